"""The transformer block of :mod:`phaze.graph`: attention and the dense MLP, forward and
backward, for one tensor-parallel slice (docs/design.md §2.2).

The block is built in four parts that append to one forward and one backward
:class:`~phaze.graph._ops.Ops` in chain order — :func:`attention_forward` (``ln1`` …
``residual1``), :func:`dense_mlp_forward` (``ln2`` … ``residual2``), then
:func:`dense_mlp_backward` (``residual2.bwd`` … ``ln2.bwd``) and
:func:`attention_backward` (``residual1.bwd`` … ``ln1.bwd``) — so that a mixture-of-experts
block (``phaze/graph/_moe.py``) reuses the attention half and replaces the MLP half.

Context parallelism (``Shape.cp`` > 1, ring attention as Megatron-Core runs it through
Transformer Engine's fused attention; flash attention is required): the rank holds
``s/cp`` tokens of each sample, so every token-proportional operator, stash and byte
count uses them; its queries attend to all ``s`` keys, which arrive in ``cp − 1``
point-to-point steps of the previous rank's K and V chunk (``2·b·(s/cp)·kv_dim``
elements each). Causal models are load-balanced as Megatron-Core does: the sequence is
cut into ``2·cp`` chunks and rank ``r`` holds chunks ``r`` and ``2cp − 1 − r``, so every
rank does the same attention work, 1/cp of the causal core: the flash kernel computes only
the key tiles up to the diagonal (``_ops.flash_keys``: (s + 128)/2 keys per query on
average, about half the square; docs/fidelity-sources.md §1.5), with or without context
parallelism; an encoder computes the full square. The unfused core computes the full
square and masks it. The exchanges are one
collective operator ``ring_kv_exchange`` (group ``cp``; ``comm_bytes`` = b·s·kv_dim·e,
so the ring price 2(cp−1)/cp·comm_bytes/BW is the cp − 1 transfers' bytes over BW)
with no edge to ``flash_attn``: the scheduler runs it concurrently with the attention
compute and ``out_proj`` waits for both, so the layer pays max(compute, exchange) —
the ring's per-chunk pipelining without its one-chunk fill. Backward:
``ring_kv_exchange.bwd`` carries K, V forward and dK, dV back (twice the bytes),
concurrent with ``flash_attn.bwd``.
"""
from __future__ import annotations

from ._mla import mla_backward, mla_forward, mla_params, mla_stash
from ._ops import (GATED, KIND_FUSED, LOSS_BYTES_PER_ELEMENT, MASK_BYTES_PER_ELEMENT, Ops, Shape,
                   ln1_backward, residual_out, unfused_attention, uniq)
from ._ops import VECTOR_CYCLES_PER_ELEMENT as _C


def _bias(m, qkv=False):
    """Vector cycles of a bias add (``qkv``: on Q/K/V, which Qwen2 biases alone)."""
    return _C["bias"] if (m.qkv_bias if qkv else m.bias) else 0.0


def attention_forward(f: Ops, sh: Shape) -> str:
    """Append ``ln1`` … ``residual1`` to ``f``; returns the last operator's name
    (multi-head latent attention: ``phaze/graph/_mla.py``)."""
    if sh.m.uses_mla:
        return mla_forward(f, sh)
    m, B, T, h = sh.m, sh.B, sh.T, sh.h
    b, s, sq = sh.b, sh.s, sh.s_q
    Tn, sp, flash = sh.Tn, sh.sp, sh.flash
    qkv_c = _bias(m, qkv=True)
    scores = b * sh.a_t * sq * s                     # attention score elements of this slice
    lse = b * sh.a_t * sq * LOSS_BYTES_PER_ELEMENT
    f.vector("ln1", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    # Sequence parallelism: the norm ran on this slice's s/t tokens; the column-parallel
    # GEMMs need all of them (Korthikanti et al. 2022 §4.2.2: g = all-gather).
    src = f.all_gather("allgather_attn", ["ln1"], T * h * B) if sp else "ln1"
    if sh.megatron:
        # Megatron-LM: one column-parallel GEMM ``query_key_value`` whose output is split
        # into Q, K and V as views (ColumnParallelLinear of width q_dim + 2·kv_dim).
        width = sh.q_dim + 2 * sh.kv_dim
        f.gemm("qkv_proj", [src], 1, T, h, width, epilogue=qkv_c,
               extra_in=width * B if m.qkv_bias else 0)
        q_out = k_out = v_out = "qkv_proj"
    else:
        # Column-parallel Q, K, V (separate GEMMs: independent, the scheduler may overlap them).
        for name, width in (("q_proj", sh.q_dim), ("k_proj", sh.kv_dim), ("v_proj", sh.kv_dim)):
            f.gemm(name, [src], 1, T, h, width, epilogue=qkv_c,
                   extra_in=width * B if m.qkv_bias else 0)
        q_out, k_out, v_out = "q_proj", "k_proj", "v_proj"
    q_src = k_src = None
    if m.qk_norm:
        # Per-head RMSNorm of the queries and keys (Qwen3, Gemma 3): one pass over Q and K.
        qk = T * (sh.q_dim + sh.kv_dim)
        q_out = k_out = f.vector("qk_norm", uniq([q_out, k_out]), qk, _C["rmsnorm"],
                                 qk * B + 2 * sh.hd * B, qk * B)
    if m.position == "rotary":
        rot = T * (sh.q_dim + sh.kv_dim)
        q_src = k_src = f.vector("rotary", uniq([q_out, k_out]), rot, _C["rotary"], rot * B,
                                 rot * B)
    exchange = None
    if flash:
        # One fused kernel (Dao et al. 2022): QKᵀ and P·V tile by tile with an online
        # softmax; the b·a·s² scores never reach HBM. Dims carry the FLOPs of both BMMs
        # over the key tiles it computes (batch b·a/t, M = s/cp, K = head_dim, N = 2·s_flash:
        # 2s, or about s + 128 under a causal mask); it reads Q and every K, V chunk and
        # writes the context and the log-sum-exp. flash_shape: the head dimension and the keys
        # per query of one kernel call (a context-parallel rank's calls run over its s/cp
        # share), the shape the kernel's measured speed depends on
        # (phaze.arch.attention_shape_factor).
        computed = b * sh.a_t * sq * sh.s_flash          # score elements the kernel computes
        f.ops.append(dict(
            name="flash_attn", kind=KIND_FUSED,
            preds=uniq([q_src or q_out, k_src or k_out, v_out]),
            dims=(b * sh.a_t, sq, sh.hd, 2 * sh.s_flash),
            flash_shape=(sh.hd, -(-sh.s_flash // sh.cp)),
            cycles_per_element=(_C["scale_mask"] + _C["softmax"] + _C["dropout"]) / 2.0,
            elements=2 * computed,
            bytes_in=(T * sh.q_dim + 2 * b * s * sh.kv_dim) * B, bytes_out=T * sh.q_dim * B + lse))
        ctx = "flash_attn"
        # Ring attention: cp − 1 K/V chunks from the neighbour, concurrent with flash_attn.
        exchange = f.ring_exchange(
            "ring_kv_exchange", uniq([k_src or k_out, v_out]), 2 * (sh.cp - 1) * T * sh.kv_dim * B,
            sh.cp, comm_bytes=b * s * sh.kv_dim * B) if sh.cp > 1 else None
    else:
        ctx = unfused_attention(f, sh, uniq([q_src or q_out, k_src or k_out]), v_out,
                                b * sh.a_t, sq, s, sh.hd, sh.hd, scores)
    # Row-parallel output projection: partial sums, all-reduced (or, with sequence
    # parallelism, reduce-scattered to the s/t tokens of each slice); its bias is added after.
    f.gemm("out_proj", [ctx, exchange], 1, T, sh.q_dim, h)
    out = f.tp_reduce("attn", "out_proj", T * h * B, sp)
    if m.sandwich_norm:
        out = post_norm(f, sh, "post_attn_norm", out)
    return residual_out(f, sh, "residual1", out, m.bias)


def post_norm(f: Ops, sh: Shape, name: str, src: str) -> str:
    """Gemma's norm of a branch's output before the residual add (``sandwich_norm``), on the
    slice's tokens (the reduced or reduce-scattered output)."""
    Tn, h, B = sh.Tn, sh.h, sh.B
    return f.vector(name, [src], Tn * h, _C[sh.m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)


def post_norm_backward(g: Ops, sh: Shape, name: str, src: str) -> str:
    """The backward of :func:`post_norm` ``name`` after ``src``."""
    Tn, h, B = sh.Tn, sh.h, sh.B
    return g.vector(name + ".bwd", [src], Tn * h, _C[sh.m.norm + "_bwd"],
                    2 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)


def dense_mlp_forward(f: Ops, sh: Shape, src: str) -> str:
    """Append ``ln2`` … ``residual2`` (the dense MLP) after ``src``."""
    m, B, T, h, Tn, sp = sh.m, sh.B, sh.T, sh.h, sh.Tn, sh.sp
    bias_c = _bias(m)
    f.vector("ln2", [src], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    src = f.all_gather("allgather_mlp", ["ln2"], T * h * B) if sp else "ln2"
    if m.activation in GATED and sh.megatron:
        # Megatron-Core (gated linear unit): one linear_fc1 GEMM of width 2·ffn/t holding the
        # gate and up projections, then the (bias +) SwiGLU kernel.
        f.gemm("fc1", [src], 1, T, h, 2 * sh.f_t)
        act = f.vector(m.activation, ["fc1"], T * sh.f_t, bias_c + _C[m.activation],
                       2 * T * sh.f_t * B + (2 * sh.f_t * B if m.bias else 0), T * sh.f_t * B)
    elif m.activation in GATED:
        for name in ("gate_proj", "up_proj"):
            f.gemm(name, [src], 1, T, h, sh.f_t, epilogue=bias_c,
                   extra_in=sh.f_t * B if m.bias else 0)
        act = f.vector(m.activation, ["gate_proj", "up_proj"], T * sh.f_t, _C[m.activation],
                       2 * T * sh.f_t * B, T * sh.f_t * B)
    elif sh.megatron:
        # Megatron-LM: FC1 without its bias (skip_bias_add), then one fused bias + GeLU
        # elementwise kernel (--bias-gelu-fusion) that reads the GEMM output back from HBM.
        f.gemm("fc1", [src], 1, T, h, sh.f_t)
        act = f.vector("fc1_act", ["fc1"], T * sh.f_t, bias_c + _C[m.activation],
                       T * sh.f_t * B + (sh.f_t * B if m.bias else 0), T * sh.f_t * B)
    else:
        # FC1 with its bias and activation fused into the GEMM epilogue.
        act = f.gemm("fc1", [src], 1, T, h, sh.f_t, epilogue=bias_c + _C[m.activation],
                     extra_in=sh.f_t * B if m.bias else 0)
    f.gemm("fc2", [act], 1, T, sh.f_t, h)
    out = f.tp_reduce("mlp", "fc2", T * h * B, sp)
    if m.sandwich_norm:
        out = post_norm(f, sh, "post_mlp_norm", out)
    return residual_out(f, sh, "residual2", out, m.bias)


def dense_mlp_backward(g: Ops, sh: Shape) -> str:
    """Append ``residual2.bwd`` … ``ln2.bwd`` (the first operators of the backward)."""
    m, B, T, h, Tn, sp = sh.m, sh.B, sh.T, sh.h, sh.Tn, sh.sp
    bias_g = _C["bias_grad"] if m.bias else 0.0
    mask = Tn * h * MASK_BYTES_PER_ELEMENT
    # Dropout backward of the MLP branch (the residual add passes the gradient through);
    # fc2's bias gradient is a column sum fused into this pass.
    dy = g.vector("residual2.bwd", [], Tn * h, _C["dropout_bwd"] + bias_g, Tn * h * B + mask,
                  Tn * h * B)
    if m.sandwich_norm:
        dy = post_norm_backward(g, sh, "post_mlp_norm", dy)
    # With sequence parallelism the output gradient of a row-parallel GEMM is all-gathered
    # (the backward of the forward reduce-scatter).
    dy = g.all_gather("allgather_fc2.dY", [dy], T * h * B) if sp else dy
    g.gemm("fc2.dX", [dy], 1, T, h, sh.f_t)
    g.gemm("fc2.dW", [dy], 1, sh.f_t, T, h)
    # Sequence parallelism stashes the norm outputs sharded (s/t tokens) and all-gathers them
    # again for the weight gradients of the column-parallel GEMMs; Megatron overlaps that
    # all-gather with the input-gradient GEMM (Korthikanti et al. 2022 §4.2.2).
    ln2_full = g.all_gather("allgather_ln2.bwd", [], T * h * B) if sp else None
    if m.activation in GATED and sh.megatron:
        g.vector(m.activation + ".bwd", ["fc2.dX"], 2 * T * sh.f_t, _C[m.activation + "_bwd"] + bias_g,
                 3 * T * sh.f_t * B, 2 * T * sh.f_t * B)
        g.gemm("fc1.dX", [m.activation + ".bwd"], 1, T, 2 * sh.f_t, h)
        g.gemm("fc1.dW", [m.activation + ".bwd", ln2_full], 1, h, T, 2 * sh.f_t)
        src = "fc1.dX"
    elif m.activation in GATED:
        g.vector(m.activation + ".bwd", ["fc2.dX"], 2 * T * sh.f_t, _C[m.activation + "_bwd"] + bias_g,
                 3 * T * sh.f_t * B, 2 * T * sh.f_t * B)
        for name in ("gate_proj", "up_proj"):
            g.gemm(name + ".dX", [m.activation + ".bwd"], 1, T, sh.f_t, h)
            g.gemm(name + ".dW", [m.activation + ".bwd", ln2_full], 1, h, T, sh.f_t)
        src = g.vector("mlp_in.dX_sum", ["gate_proj.dX", "up_proj.dX"], T * h, _C["add"],
                       2 * T * h * B, T * h * B)
    else:
        g.vector("fc1.act.bwd", ["fc2.dX"], T * sh.f_t, _C[m.activation + "_bwd"] + bias_g,
                 2 * T * sh.f_t * B, T * sh.f_t * B)
        g.gemm("fc1.dX", ["fc1.act.bwd"], 1, T, sh.f_t, h)
        g.gemm("fc1.dW", ["fc1.act.bwd", ln2_full], 1, h, T, sh.f_t)
        src = "fc1.dX"
    src = g.tp_reduce("fc1.dX", src, T * h * B, sp)
    # LN2 backward, plus the residual stream's gradient (the add of both branches).
    return g.vector("ln2.bwd", [src, "residual2.bwd"], Tn * h, _C[m.norm + "_bwd"] + _C["residual"],
                    3 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)


def attention_backward(g: Ops, sh: Shape, src: str) -> str:
    """Append ``residual1.bwd`` … ``ln1.bwd`` after ``src`` (the MLP half's ``ln2.bwd``)."""
    if sh.m.uses_mla:
        return mla_backward(g, sh, src)
    m, B, T, h = sh.m, sh.B, sh.T, sh.h
    b, s, sq = sh.b, sh.s, sh.s_q
    Tn, sp, flash = sh.Tn, sh.sp, sh.flash
    bias_g = _C["bias_grad"] if m.bias else 0.0
    mask = Tn * h * MASK_BYTES_PER_ELEMENT
    scores = b * sh.a_t * sq * s
    lse = b * sh.a_t * sq * LOSS_BYTES_PER_ELEMENT
    qkv_out = sh.q_dim + 2 * sh.kv_dim
    dy = g.vector("residual1.bwd", [src], Tn * h, _C["dropout_bwd"] + bias_g, Tn * h * B + mask,
                  Tn * h * B)
    if m.sandwich_norm:
        dy = post_norm_backward(g, sh, "post_attn_norm", dy)
    dy = g.all_gather("allgather_out_proj.dY", [dy], T * h * B) if sp else dy
    g.gemm("out_proj.dX", [dy], 1, T, h, sh.q_dim)
    g.gemm("out_proj.dW", [dy], 1, sh.q_dim, T, h)
    if flash:
        # The fused backward recomputes the scores from Q, K and the log-sum-exp, then
        # dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax backward, dQ = dS·K, dK = dSᵀ·Q: five BMMs of
        # (s/cp)·s_flash·head_dim per head (N = 5·s_flash; causal: the key tiles up to the
        # diagonal). Reads Q, O, dO, lse and every K, V chunk; writes dQ and the dK, dV of
        # every chunk.
        g.ops.append(dict(
            name="flash_attn.bwd", kind=KIND_FUSED, preds=["out_proj.dX"],
            dims=(b * sh.a_t, sq, sh.hd, 5 * sh.s_flash),
            flash_shape=(sh.hd, -(-sh.s_flash // sh.cp)),
            cycles_per_element=(_C["scale_mask"] + _C["softmax"] + _C["dropout"]
                                + _C["softmax_bwd"] + _C["dropout_bwd"]) / 5.0,
            elements=5 * b * sh.a_t * sq * sh.s_flash,
            bytes_in=(3 * T * sh.q_dim + 2 * b * s * sh.kv_dim) * B + lse,
            bytes_out=(T * sh.q_dim + 2 * b * s * sh.kv_dim) * B))
        q_grad = k_grad = v_grad = "flash_attn.bwd"
        if sh.cp > 1:
            # K, V travel the ring again and their gradients travel back: twice the bytes.
            k_grad = v_grad = g.ring_exchange(
                "ring_kv_exchange.bwd", ["out_proj.dX"], 4 * (sh.cp - 1) * T * sh.kv_dim * B,
                sh.cp, comm_bytes=2 * b * s * sh.kv_dim * B)
            k_grad = v_grad = [k_grad, "flash_attn.bwd"]
    else:
        # dP = dO·Vᵀ per query head; dV = Pᵀ·dO summed over the query heads sharing a K/V head
        # (one GEMM of inner size group·s per K/V head).
        g.gemm("attn_context.dX", ["out_proj.dX"], b * sh.a_t, sq, sh.hd, s)
        g.gemm("attn_context.dW", ["out_proj.dX"], b * sh.kv_t, s, sh.group * sq, sh.hd)
        if sh.megatron:
            # The dropout's backward (gradient and mask in) and the fused softmax's
            # backward (probabilities and gradient in) are two kernels.
            g.vector("attn_dropout.bwd", ["attn_context.dX"], scores, _C["dropout_bwd"],
                     scores * (B + MASK_BYTES_PER_ELEMENT), scores * B)
            g.vector("softmax.bwd", ["attn_dropout.bwd"], scores,
                     _C["softmax_bwd"] + _C["scale_mask"], scores * 2 * B, scores * B)
        else:
            g.vector("softmax.bwd", ["attn_context.dX"], scores,
                     _C["dropout_bwd"] + _C["softmax_bwd"] + _C["scale_mask"],
                     scores * (2 * B + MASK_BYTES_PER_ELEMENT), scores * B)
        # dQ = dS·K; dK = dSᵀ·Q summed over the group.
        g.gemm("attn_scores.dX", ["softmax.bwd"], b * sh.a_t, sq, s, sh.hd)
        g.gemm("attn_scores.dW", ["softmax.bwd"], b * sh.kv_t, s, sh.group * sq, sh.hd)
        q_grad, k_grad, v_grad = "attn_scores.dX", "attn_scores.dW", "attn_context.dW"
    q_grad, k_grad, v_grad = (x if isinstance(x, list) else [x] for x in (q_grad, k_grad, v_grad))
    if m.position == "rotary":
        rot = T * (sh.q_dim + sh.kv_dim)
        q_grad = k_grad = [g.vector("rotary.bwd", uniq(q_grad + k_grad), rot, _C["rotary_bwd"],
                                    rot * B, rot * B)]
    if m.qk_norm:
        qk = T * (sh.q_dim + sh.kv_dim)
        q_grad = k_grad = [g.vector("qk_norm.bwd", uniq(q_grad + k_grad), qk, _C["rmsnorm_bwd"],
                                    2 * qk * B + 2 * sh.hd * B, qk * B + 2 * sh.hd * B)]
    ln1_full = g.all_gather("allgather_ln1.bwd", [], T * h * B) if sp else None
    if sh.megatron:
        # One input-gradient and one weight-gradient GEMM for the fused query_key_value.
        grads = uniq(q_grad + k_grad + v_grad)
        src = g.gemm("qkv_proj.dX", grads, 1, T, qkv_out, h)
        g.gemm("qkv_proj.dW", grads + [ln1_full], 1, h, T, qkv_out)
    else:
        for name, width, grad in (("q_proj", sh.q_dim, q_grad), ("k_proj", sh.kv_dim, k_grad),
                                  ("v_proj", sh.kv_dim, v_grad)):
            g.gemm(name + ".dX", grad, 1, T, width, h)
            g.gemm(name + ".dW", grad + [ln1_full], 1, h, T, width)
    if m.qkv_bias:
        # Q/K/V bias gradients: column sums of their output gradients (a sink).
        g.vector("qkv.dbias", uniq(q_grad + k_grad + v_grad), qkv_out, T * _C["bias_grad"],
                 T * qkv_out * B, qkv_out * B)
    if not sh.megatron:
        src = g.vector("qkv.dX_sum", ["q_proj.dX", "k_proj.dX", "v_proj.dX"], T * h,
                       2 * _C["add"], 3 * T * h * B, T * h * B)
    return ln1_backward(g, sh, src)


def attention_params(sh: Shape) -> int:
    """Parameters (elements) of this slice's attention half: ln1, Q/K/V (and their biases,
    sharded), out_proj and its replicated bias."""
    if sh.m.uses_mla:
        return mla_params(sh)
    m, h = sh.m, sh.h
    qkv_out = sh.q_dim + 2 * sh.kv_dim
    return (sh.norm_w + h * qkv_out + sh.q_dim * h + (qkv_out if m.qkv_bias else 0)
            + (h if m.bias else 0) + attention_extra_params(sh))


def attention_extra_params(sh: Shape) -> int:
    """Parameters (elements) of an attention half beyond its projections and ln1 (MLA's
    too): the per-head query and key norms (``qk_norm``: 2·head_dim, replicated), the
    sink logit of each of the slice's heads (``attention_sinks``: heads/t) and the
    post-attention norm (``sandwich_norm``)."""
    m = sh.m
    return ((2 * sh.hd if m.qk_norm else 0)
            + (sh.a_t if m.attention_sinks else 0)
            + (sh.norm_w if m.sandwich_norm else 0))


def attention_stash(sh: Shape) -> tuple:
    """Stashed bytes of the attention half: (kept with no recomputation, the attention core's
    share that selective recomputation drops)."""
    if sh.m.uses_mla:
        return mla_stash(sh)
    B, T, h, Tn = sh.B, sh.T, sh.h, sh.Tn
    scores = sh.b * sh.a_t * sh.s_q * sh.s
    lse = sh.b * sh.a_t * sh.s_q * LOSS_BYTES_PER_ELEMENT
    # Korthikanti et al. 2022 (Megatron, 2-byte elements, no sequence parallelism): ln1 input
    # 2sbh, QKV input 2sbh, Q and K 4sbh/t, V 2sbh/t, softmax output 2as²b/t, its dropout mask
    # as²b/t, dropout output 2as²b/t, out_proj input 2sbh/t, residual1 dropout mask sbh.
    # Generalised: Q/K/V widths follow GQA; under fp8 the FP8 GEMMs' inputs are kept in FP8
    # (B8 = 1 byte; phaze.precision); sequence parallelism keeps the norm input, the
    # (re-gathered) norm output and the mask on s/t tokens.
    stash = (B * (Tn * h + T * (sh.q_dim + sh.kv_dim) + T * sh.kv_dim)
             + sh.B8 * (Tn * h + T * sh.q_dim) + MASK_BYTES_PER_ELEMENT * Tn * h)
    if sh.m.qk_norm:
        stash += B * T * (sh.q_dim + sh.kv_dim)      # Q and K before their norms
    if sh.m.sandwich_norm:
        stash += B * Tn * h                          # the post-norm's input
    if sh.flash:
        # No scores, probabilities or dropout mask (the kernel regenerates the mask from the
        # RNG state): the fp32 log-sum-exp instead, and under fp8 the 16-bit attention
        # output flash's backward reads. Selective recomputation (Megatron-Core's
        # core_attn checkpoint around Transformer Engine's fused attention) keeps the
        # kernel's inputs Q, K, V and drops what the kernel saved beyond them: these two.
        kernel = lse + (B * T * sh.q_dim if sh.B8 != B else 0)
        return stash + kernel, kernel
    core = 2 * B * scores + MASK_BYTES_PER_ELEMENT * scores   # probabilities, dropped, mask
    return stash + core, core


def dense_mlp_stash(sh: Shape) -> int:
    """Stashed bytes of the dense MLP half: ln2 input 2sbh, fc1 input 2sbh, activation input
    8sbh/t (SwiGLU: gate and up outputs), fc2 input 8sbh/t, residual2 dropout mask sbh."""
    m, B, T, h, Tn = sh.m, sh.B, sh.T, sh.h, sh.Tn
    act_in = (2 if m.activation in GATED else 1) * T * sh.f_t
    return (B * (Tn * h + act_in) + sh.B8 * (Tn * h + T * sh.f_t)
            + MASK_BYTES_PER_ELEMENT * Tn * h
            + (B * Tn * h if m.sandwich_norm else 0))


def dense_mlp_params(sh: Shape) -> int:
    """Parameters (elements) of this slice's dense MLP half: ln2, the sharded weights and
    column biases, fc2's replicated bias, the post-MLP norm (``sandwich_norm``)."""
    m, h = sh.m, sh.h
    mlp_mats = 3 if m.activation in GATED else 2
    params = sh.norm_w + mlp_mats * h * sh.f_t
    if m.bias:
        params += (mlp_mats - 1) * sh.f_t + h
    return params + (sh.norm_w if m.sandwich_norm else 0)


def block(sh: Shape):
    """The dense transformer block: (forward, backward, parameter bytes,
    (stash none, selective, full), boundary bytes)."""
    m, B, h = sh.m, sh.B, sh.h
    f = Ops(B, sh.t, sh.dtype)
    dense_mlp_forward(f, sh, attention_forward(f, sh))
    g = Ops(B, sh.t, sh.dtype)
    attention_backward(g, sh, dense_mlp_backward(g, sh))
    # Sharded: Q/K/V, out_proj and MLP weights, Q/K/V and FC1/gate/up biases.
    # Replicated: the two norms, the row-parallel biases (out_proj, fc2).
    params = attention_params(sh) + dense_mlp_params(sh)
    attn, core = attention_stash(sh)
    stash = attn + dense_mlp_stash(sh)
    # Selective recomputation drops the attention core (recomputed from Q and K); full
    # recomputation keeps the layer input only: 2·s·b·h (Korthikanti Table 2), its s/t share
    # under sequence parallelism.
    return f.graph(), g.graph(), params * B, (stash, stash - core, B * sh.Tn * h), sh.T * h * B
