"""Transformer layers of any kind for :mod:`phaze.graph`: a token mixer and a channel mixer
(``ModelSpec.layer_kinds``), forward and backward, for one tensor-parallel slice.

A layer is built from halves that append to one forward and one backward
:class:`~phaze.graph._ops.Ops` in chain order: the token mixer (attention of any mask —
full, sliding-window, chunked — or MLA: ``phaze/graph/_block.py``; Mamba-2:
``phaze/graph/_mamba.py``; or none) and then the channel mixer (the dense MLP:
``_block.py``; the mixture of experts: ``phaze/graph/_moe.py``; or none); the backward runs
them in reverse. Attention with a dense MLP is the dense block, attention with experts the
MoE block, exactly as those modules build them (a sliding-window or chunked layer is that
block with the keys per query its flash kernel computes: ``Shape.for_mixer``).

Selective recomputation re-runs an attention half's core (nothing of a Mamba or MLP-only
layer); full recomputation keeps the layer's input.
"""
from __future__ import annotations

from ._block import (attention_backward, attention_forward, attention_params, attention_stash,
                     block, dense_mlp_backward, dense_mlp_forward, dense_mlp_params,
                     dense_mlp_stash)
from ._mamba import mamba_backward, mamba_forward, mamba_params, mamba_stash
from ._moe import moe_backward, moe_block, moe_forward, moe_params, moe_stash
from ._ops import Ops, Shape

#: Token mixers that are attention (of some mask).
ATTENTION_MIXERS = ("attention", "sliding", "chunked")


def layer(sh: Shape, mixer: str, ffn: str):
    """The transformer layer of token mixer ``mixer`` and channel mixer ``ffn``:
    (forward, backward, parameter bytes, (stash none, selective, full), boundary bytes,
    routed-expert parameter bytes)."""
    sh = sh.for_mixer(mixer)
    attention = mixer in ATTENTION_MIXERS
    if attention and ffn == "dense":
        return (*block(sh), 0)
    if attention and ffn == "moe":
        return moe_block(sh)
    B, T, Tn, h = sh.B, sh.T, sh.Tn, sh.h
    f = Ops(B, sh.t, sh.dtype)
    src = None
    if attention:
        src = attention_forward(f, sh)
    elif mixer == "mamba":
        src = mamba_forward(f, sh)
    if ffn == "dense":
        dense_mlp_forward(f, sh, src)
    elif ffn == "moe":
        moe_forward(f, sh, src)
    g = Ops(B, sh.t, sh.dtype)
    src = None
    if ffn == "dense":
        src = dense_mlp_backward(g, sh)
    elif ffn == "moe":
        src = moe_backward(g, sh)
    if attention:
        attention_backward(g, sh, src)
    elif mixer == "mamba":
        mamba_backward(g, sh, src)
    params = expert = stash = core = 0
    if attention:
        params += attention_params(sh)
        stash, core = attention_stash(sh)
    elif mixer == "mamba":
        params += mamba_params(sh)
        stash += mamba_stash(sh)
    if ffn == "dense":
        params += dense_mlp_params(sh)
        stash += dense_mlp_stash(sh)
    elif ffn == "moe":
        p, expert = moe_params(sh)
        params += p
        stash += moe_stash(sh)
    return (f.graph(), g.graph(), params * B, (stash, stash - core, B * Tn * h), T * h * B,
            expert * B)
