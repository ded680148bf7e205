"""Parameter counts of a ModelSpec, tensor group by tensor group (docs/design.md §2.1).

The counting behind ``ModelSpec.n_params``, ``n_active_params`` and ``n_mtp_params``
and the public ``phaze.models.*_params`` functions, kept apart from ``phaze.models`` so
that each module stays under the layout's line limit. Every function takes a ModelSpec
(read by its attributes only, so this module imports nothing of ``phaze.models``); the
rules are written out in ``phaze.models``' docstring.
"""
from __future__ import annotations

from collections import Counter

#: Token mixers that are attention (full, sliding-window or chunked): each has the
#: model's attention (or MLA) projections, per-head q/k norms and attention sinks.
ATTENTION_MIXERS = ("attention", "sliding", "chunked")
#: Activations with a gate: two hidden × ffn matrices in, one ffn × hidden out.
GATED_ACTIVATIONS = ("swiglu", "geglu")


def _norm_params(m, width: int = None) -> int:
    """Weights of one norm over ``width`` (default ``hidden``) features: a LayerNorm has
    a weight and a bias, an RMSNorm a weight only."""
    width = m.hidden if width is None else width
    return 2 * width if m.norm == "layernorm" else width


def attention_params(m) -> int:
    """Parameters of one block's attention: projections and their biases (and, with
    multi-head latent attention, the norms of the latents). Per-head q/k norms and
    attention sinks are :func:`mixer_params`' additions."""
    h, hd, a = m.hidden, m.head_dim, m.heads
    if m.uses_mla:
        # DeepSeek-V2 (modeling_deepseek.py): q_a_proj, q_a_layernorm, q_b_proj (or q_proj),
        # kv_a_proj_with_mqa (latent + the shared rotary key), kv_a_layernorm, kv_b_proj
        # (keys without position and values of every head), o_proj; no biases.
        qk = a * (hd + m.qk_rope_head_dim)
        if m.q_lora_rank:
            n = h * m.q_lora_rank + _norm_params(m, m.q_lora_rank) + m.q_lora_rank * qk
        else:
            n = h * qk
        n += h * (m.kv_lora_rank + m.qk_rope_head_dim) + _norm_params(m, m.kv_lora_rank)
        n += m.kv_lora_rank * a * (hd + m.v_head_dim)
        return n + a * m.v_head_dim * h
    q, kv = a * hd, m.kv_heads * hd
    n = h * q + 2 * h * kv + q * h
    if m.qkv_bias:
        n += q + 2 * kv                                          # Q, K, V biases
    if m.bias:
        n += h                                                   # output bias
    return n


def mlp_params(m, width: int = None, io: int = None) -> int:
    """Parameters of one MLP of ``width`` (default ``ffn_hidden``) reading and writing
    ``io`` features (default ``hidden``; a LatentMoE expert's: the latent): two matrices
    (three with a gated activation, SwiGLU or GeGLU) and, with ``bias``, their biases. A
    routed or shared expert is one."""
    h, f = m.hidden if io is None else io, m.ffn_hidden if width is None else width
    gated = m.activation in GATED_ACTIVATIONS
    n = 3 * h * f if gated else 2 * h * f
    if m.bias:
        n += (2 * f if gated else f) + h
    return n


def expert_params(m) -> int:
    """Parameters of one routed expert (0 for a dense model): an MLP of width
    ``expert_ffn_hidden`` on ``hidden`` or, with LatentMoE, on ``moe_latent_size``."""
    if not m.is_moe:
        return 0
    return mlp_params(m, m.expert_ffn_hidden, io=m.moe_latent_size or m.hidden)


def latent_proj_params(m) -> int:
    """Parameters of one MoE layer's LatentMoE projections (0 without ``moe_latent_size``):
    ``fc1_latent_proj`` ``hidden × L`` and ``fc2_latent_proj`` ``L × hidden``, with
    ``bias`` their ``L`` and ``hidden`` biases (Megatron-Core's ``add_bias_linear``)."""
    lat = m.moe_latent_size
    if not lat:
        return 0
    return 2 * m.hidden * lat + ((lat + m.hidden) if m.bias else 0)


def moe_params(m) -> int:
    """Parameters of one MoE layer's MLP part: routed experts, shared experts, the router
    (``hidden × n_experts``, and with ``router_bias`` ``n_experts`` more), a shared-expert
    gate (``hidden × 1``) and LatentMoE's two projections (:func:`latent_proj_params`)."""
    if not m.is_moe:
        raise ValueError(f"{m.name} has no MoE layers (n_experts = 0)")
    n = m.n_experts * expert_params(m) + m.n_experts * m.hidden + latent_proj_params(m)
    if m.router_bias:
        n += m.n_experts
    if m.n_shared_experts:
        n += m.n_shared_experts * mlp_params(m, m.shared_ffn_hidden)
    if m.shared_expert_gate:
        n += m.hidden
    return n


def mamba_params(m) -> int:
    """Parameters of one Mamba-2 mixer (HF NemotronH / Mamba2Mixer, no linear biases,
    a convolution bias): in_proj ``hidden × (2·d_inner + 2·groups·state + heads)``, the
    depthwise conv1d ``conv_dim × conv`` and its ``conv_dim`` bias, dt_bias, A_log and D
    (``mamba_heads`` each), the gated RMSNorm (``d_inner``) and out_proj
    ``d_inner × hidden``; 0 for a model without Mamba layers."""
    if not m.has_mamba:
        return 0
    d, conv_dim, nh = m.mamba_inner, m.mamba_conv_dim, m.mamba_heads
    n = m.hidden * (2 * d + 2 * m.mamba_groups * m.mamba_state + nh)
    n += conv_dim * m.mamba_conv + conv_dim
    return n + 3 * nh + d + d * m.hidden


def mixer_params(m, mixer: str) -> int:
    """Parameters of one token mixer of kind ``mixer`` (``phaze.models.MIXERS``), without
    the layer's norms: attention-type mixers have the attention (or MLA) projections,
    ``2·head_dim`` per-head q/k norm weights with ``qk_norm`` and ``heads`` sink logits
    with ``attention_sinks``; "mamba" is :func:`mamba_params`; "none" has none."""
    if mixer in ATTENTION_MIXERS:
        n = attention_params(m)
        if m.qk_norm:
            n += 2 * m.head_dim
        if m.attention_sinks:
            n += m.heads
        return n
    if mixer == "mamba":
        return mamba_params(m)
    if mixer == "none":
        return 0
    raise ValueError(f"mixer must be one of attention, sliding, chunked, mamba, none; "
                     f"got {mixer!r}")


def ffn_params(m, ffn: str) -> int:
    """Parameters of one channel mixer of kind ``ffn`` (``phaze.models.FFNS``): the dense
    MLP, the MoE layer (:func:`moe_params`) or none."""
    if ffn == "dense":
        return mlp_params(m)
    if ffn == "moe":
        return moe_params(m)
    if ffn == "none":
        return 0
    raise ValueError(f"ffn must be one of dense, moe, none; got {ffn!r}")


def layer_params(m, mixer: str, ffn: str) -> int:
    """Parameters of one layer of kind (``mixer``, ``ffn``): the two sublayers and their
    norms, one per sublayer present (two with ``sandwich_norm``: Gemma's norms after
    each sublayer too)."""
    sublayers = (mixer != "none") + (ffn != "none")
    norms = sublayers * (2 if m.sandwich_norm else 1)
    return mixer_params(m, mixer) + ffn_params(m, ffn) + norms * _norm_params(m)


def block_params(m, *, moe: bool = None) -> int:
    """Parameters of one transformer block: attention, two norms and the MLP — the dense
    MLP, or with ``moe=True`` the MoE layer (default: MoE for a mixture-of-experts model,
    whose dense layers are ``block_params(m, moe=False)``). The full-attention layer of
    :func:`layer_params` (with its q/k norms, sinks and sandwich norms)."""
    if moe is None:
        moe = m.is_moe
    return layer_params(m, "attention", "moe" if moe else "dense")


def embedding_params(m) -> int:
    """Parameters of the input side: token table, positions, input projection."""
    e = m.embed_width
    n = m.vocab * e
    if m.position == "learned":
        n += m.max_positions * m.hidden
    if m.embed_proj:
        n += e * m.hidden
    return n


def head_params(m, *, count_tied: bool = False) -> int:
    """Parameters of the output side: final norm, output projection, logits weights.

    With tied embeddings the logits weights are the token table, counted once in
    :func:`embedding_params`; ``count_tied=True`` counts the head's copy as well.
    """
    n = _norm_params(m) if m.final_norm else 0
    if m.embed_proj:
        n += m.hidden * m.embed_width
    if not m.tied_embeddings or count_tied:
        n += m.vocab * m.embed_width
    return n


def mtp_module_params(m) -> int:
    """Parameters of one multi-token-prediction module (DeepSeek-V3 §2.2): enorm and
    hnorm (a norm over ``hidden`` each), eh_proj ``2·hidden × hidden`` (no bias), one
    layer of the kind of the model's last layer and a final norm; the embedding and the
    output head are the main model's (not counted again)."""
    mixer, ffn = m.layer_kinds[-1]
    return 3 * _norm_params(m) + 2 * m.hidden * m.hidden + layer_params(m, mixer, ffn)


def count_params(m) -> tuple:
    """``(n_params, n_active_params, n_mtp_params)`` of ``m``: the main model (every
    weight and bias once, a tied embedding once), what one token runs through (less the
    ``n_experts − experts_per_token`` routed experts of each MoE layer it is not sent
    to) and the MTP modules."""
    blocks = sum(count * layer_params(m, mixer, ffn)
                 for (mixer, ffn), count in Counter(m.layer_kinds).items())
    total = embedding_params(m) + blocks + head_params(m)
    unrouted = len(m.moe_layer_ids) * (m.n_experts - m.experts_per_token)
    active = total - unrouted * expert_params(m)
    return total, active, m.mtp_layers * mtp_module_params(m)


__all__ = ["ATTENTION_MIXERS", "GATED_ACTIVATIONS", "attention_params", "mlp_params",
           "expert_params", "latent_proj_params", "moe_params", "mamba_params", "mixer_params",
           "ffn_params", "layer_params", "block_params", "embedding_params", "head_params",
           "mtp_module_params", "count_params"]
