"""Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1) in :mod:`phaze.graph`:
the attention half of a block for a model with ``kv_lora_rank > 0``.

Projections as ``modeling_deepseek.py`` holds them (``phaze.models.attention_params``):
queries ``q_a_proj`` (hidden → q_lora_rank), ``q_a_norm``, ``q_b_proj`` (→ heads·(head_dim
+ qk_rope_head_dim)) — or one ``q_proj`` without ``q_lora_rank``; keys and values
``kv_a_proj`` (hidden → kv_lora_rank + qk_rope_head_dim: the latent and the rotary key
shared by every head), ``kv_a_norm``, ``kv_b_proj`` (latent → heads·(head_dim +
v_head_dim): the keys without position and the values); ``rotary`` on the queries' rotary
part and the shared rotary key; the core with query/key width qk = head_dim +
qk_rope_head_dim and value width v_head_dim; ``out_proj`` (heads·v_head_dim → hidden).
Training runs the decompressed form (keys and values per head), as the reference code and
Megatron-Core do; the absorbed form is an inference optimisation.

Tensor parallelism (Megatron-Core's MLA): the down-projections (``q_a_proj``,
``kv_a_proj``) and the latent norms are replicated on every slice (each computes them for
all its tokens), the up-projections are column-parallel by heads, ``out_proj`` is
row-parallel. In backward the latents' gradients from a slice's heads are partial sums,
and so are the down-projections' input gradients: their sum ``qkv.dX_sum`` is all-reduced
(sequence parallel: reduce-scattered) over t as the dense block's is; the replicated
weights' gradients are partial over the t slices and are reduced with the gradient sync,
as the sequence-parallel norms' are. Operator names otherwise as the dense block's
(``phaze/graph/_block.py``), including context parallelism (the K/V exchange carries the
decompressed keys and values).
"""
from __future__ import annotations

from ._ops import (KIND_FUSED, LOSS_BYTES_PER_ELEMENT, MASK_BYTES_PER_ELEMENT, Ops, Shape,
                   ln1_backward, residual_out, unfused_attention, uniq)
from ._ops import VECTOR_CYCLES_PER_ELEMENT as _C


def _dims(sh: Shape):
    m = sh.m
    qk = m.head_dim + m.qk_rope_head_dim
    return qk, m.v_head_dim, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim


def _norm_w(m, width):
    return (2 if m.norm == "layernorm" else 1) * width


def mla_forward(f: Ops, sh: Shape) -> str:
    """Append ``ln1`` … ``residual1`` of MLA to ``f``; returns the last operator's name."""
    m, B, T, h, b, s, sq = sh.m, sh.B, sh.T, sh.h, sh.b, sh.s, sh.s_q
    Tn, sp, a = sh.Tn, sh.sp, sh.a_t
    qk, vd, ql, kvl, rope = _dims(sh)
    scores = b * a * sq * s
    lse = b * a * sq * LOSS_BYTES_PER_ELEMENT
    f.vector("ln1", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    src = f.all_gather("allgather_attn", ["ln1"], T * h * B) if sp else "ln1"
    if ql:
        f.gemm("q_a_proj", [src], 1, T, h, ql)
        f.vector("q_a_norm", ["q_a_proj"], T * ql, _C[m.norm], T * ql * B + _norm_w(m, ql) * B,
                 T * ql * B)
        q = f.gemm("q_b_proj", ["q_a_norm"], 1, T, ql, a * qk)
    else:
        q = f.gemm("q_proj", [src], 1, T, h, a * qk)
    f.gemm("kv_a_proj", [src], 1, T, h, kvl + rope)
    f.vector("kv_a_norm", ["kv_a_proj"], T * kvl, _C[m.norm], T * kvl * B + _norm_w(m, kvl) * B,
             T * kvl * B)
    f.gemm("kv_b_proj", ["kv_a_norm"], 1, T, kvl, a * (m.head_dim + vd))
    rot = T * (a + 1) * rope
    f.vector("rotary", [q, "kv_a_proj"], rot, _C["rotary"], rot * B, rot * B)
    exchange = None
    if sh.flash:
        # Both BMMs in one kernel: QKᵀ over qk and P·V over vd (dims carry their FLOPs)
        # over the key tiles it computes (causal: up to the diagonal, ``_ops.flash_keys``).
        f.ops.append(dict(
            name="flash_attn", kind=KIND_FUSED, preds=["rotary", "kv_b_proj"],
            dims=(b * a, sq, qk + vd, sh.s_flash),
            flash_shape=(qk, -(-sh.s_flash // sh.cp)),
            cycles_per_element=_C["scale_mask"] + _C["softmax"] + _C["dropout"],
            elements=b * a * sq * sh.s_flash,
            bytes_in=(T * a * qk + b * s * a * (qk + vd)) * B, bytes_out=T * a * vd * B + lse))
        ctx = "flash_attn"
        if sh.cp > 1:
            exchange = f.ring_exchange(
                "ring_kv_exchange", ["rotary", "kv_b_proj"], (sh.cp - 1) * T * a * (qk + vd) * B,
                sh.cp, comm_bytes=b * s * a * (qk + vd) * B // 2)
    else:
        ctx = unfused_attention(f, sh, ["rotary", "kv_b_proj"], "kv_b_proj", b * a, sq, s, qk,
                                vd, scores)
    f.gemm("out_proj", [ctx, exchange], 1, T, a * vd, h)
    # (the MLA block carries no output bias)
    return residual_out(f, sh, "residual1", f.tp_reduce("attn", "out_proj", T * h * B, sp),
                        bias=False)


def mla_backward(g: Ops, sh: Shape, src: str) -> str:
    """Append ``residual1.bwd`` … ``ln1.bwd`` of MLA after ``src``."""
    m, B, T, h, b, s, sq = sh.m, sh.B, sh.T, sh.h, sh.b, sh.s, sh.s_q
    Tn, sp, a = sh.Tn, sh.sp, sh.a_t
    qk, vd, ql, kvl, rope = _dims(sh)
    scores = b * a * sq * s
    lse = b * a * sq * LOSS_BYTES_PER_ELEMENT
    g.vector("residual1.bwd", [src], Tn * h, _C["dropout_bwd"],
             Tn * h * (B + MASK_BYTES_PER_ELEMENT), Tn * h * B)
    dy = g.all_gather("allgather_out_proj.dY", ["residual1.bwd"], T * h * B) if sp \
        else "residual1.bwd"
    g.gemm("out_proj.dX", [dy], 1, T, h, a * vd)
    g.gemm("out_proj.dW", [dy], 1, a * vd, T, h)
    if sh.flash:
        # Recompute S (qk), dV = Pᵀ·dO and dP = dO·Vᵀ (vd each), dQ = dS·K and dK = dSᵀ·Q (qk each).
        g.ops.append(dict(
            name="flash_attn.bwd", kind=KIND_FUSED, preds=["out_proj.dX"],
            dims=(b * a, sq, 3 * qk + 2 * vd, sh.s_flash),
            flash_shape=(qk, -(-sh.s_flash // sh.cp)),
            cycles_per_element=(_C["scale_mask"] + _C["softmax"] + _C["dropout"]
                                + _C["softmax_bwd"] + _C["dropout_bwd"]),
            elements=b * a * sq * sh.s_flash,
            bytes_in=(T * a * (qk + 2 * vd) + b * s * a * (qk + vd)) * B + lse,
            bytes_out=(T * a * qk + b * s * a * (qk + vd)) * B))
        grads = ["flash_attn.bwd"]
        if sh.cp > 1:
            grads.append(g.ring_exchange(
                "ring_kv_exchange.bwd", ["out_proj.dX"], 2 * (sh.cp - 1) * T * a * (qk + vd) * B,
                sh.cp, comm_bytes=b * s * a * (qk + vd) * B))
        q_grad = kv_grad = grads
    else:
        g.gemm("attn_context.dX", ["out_proj.dX"], b * a, sq, vd, s)      # dP = dO·Vᵀ
        g.gemm("attn_context.dW", ["out_proj.dX"], b * a, s, sq, vd)      # dV = Pᵀ·dO
        g.vector("softmax.bwd", ["attn_context.dX"], scores,
                 _C["dropout_bwd"] + _C["softmax_bwd"] + _C["scale_mask"],
                 scores * (2 * B + MASK_BYTES_PER_ELEMENT), scores * B)
        g.gemm("attn_scores.dX", ["softmax.bwd"], b * a, sq, s, qk)       # dQ = dS·K
        g.gemm("attn_scores.dW", ["softmax.bwd"], b * a, s, sq, qk)       # dK = dSᵀ·Q
        q_grad, kv_grad = ["attn_scores.dX", "attn_scores.dW"], ["attn_scores.dW", "attn_context.dW"]
    # The rotary parts' backward; the shared rotary key's gradient sums over the heads.
    rot = T * (a + 1) * rope
    g.vector("rotary.bwd", uniq(q_grad + kv_grad), rot, _C["rotary_bwd"] + _C["add"],
             T * (2 * a) * rope * B, rot * B)
    ln1_full = g.all_gather("allgather_ln1.bwd", [], T * h * B) if sp else None
    up = a * (m.head_dim + vd)
    g.gemm("kv_b_proj.dX", kv_grad, 1, T, up, kvl)
    g.gemm("kv_b_proj.dW", kv_grad, 1, kvl, T, up)
    g.vector("kv_a_norm.bwd", ["kv_b_proj.dX"], T * kvl, _C[m.norm + "_bwd"],
             2 * T * kvl * B + _norm_w(m, kvl) * B, T * kvl * B + _norm_w(m, kvl) * B)
    g.gemm("kv_a_proj.dX", ["kv_a_norm.bwd", "rotary.bwd"], 1, T, kvl + rope, h)
    g.gemm("kv_a_proj.dW", ["kv_a_norm.bwd", "rotary.bwd", ln1_full], 1, h, T, kvl + rope)
    q_in = q_grad + ["rotary.bwd"]
    if ql:
        g.gemm("q_b_proj.dX", q_in, 1, T, a * qk, ql)
        g.gemm("q_b_proj.dW", q_in, 1, ql, T, a * qk)
        g.vector("q_a_norm.bwd", ["q_b_proj.dX"], T * ql, _C[m.norm + "_bwd"],
                 2 * T * ql * B + _norm_w(m, ql) * B, T * ql * B + _norm_w(m, ql) * B)
        g.gemm("q_a_proj.dX", ["q_a_norm.bwd"], 1, T, ql, h)
        g.gemm("q_a_proj.dW", ["q_a_norm.bwd", ln1_full], 1, h, T, ql)
        q_dx = "q_a_proj.dX"
    else:
        g.gemm("q_proj.dX", q_in, 1, T, a * qk, h)
        g.gemm("q_proj.dW", q_in + [ln1_full], 1, h, T, a * qk)
        q_dx = "q_proj.dX"
    src = g.vector("qkv.dX_sum", [q_dx, "kv_a_proj.dX"], T * h, _C["add"], 2 * T * h * B, T * h * B)
    return ln1_backward(g, sh, src)


def mla_params(sh: Shape) -> int:
    """Parameters (elements) of this slice's MLA half: ln1, the replicated down-projections
    and latent norms, the up-projections and out_proj sharded by heads."""
    m, h, a = sh.m, sh.h, sh.a_t
    qk, vd, ql, kvl, rope = _dims(sh)
    q = h * ql + _norm_w(m, ql) + ql * a * qk if ql else h * a * qk
    kv = h * (kvl + rope) + _norm_w(m, kvl) + kvl * a * (m.head_dim + vd)
    return sh.norm_w + q + kv + a * vd * h


def mla_stash(sh: Shape) -> tuple:
    """Stashed bytes of the MLA half: (kept with no recomputation, the attention core's share
    that selective recomputation drops)."""
    B, B8, T, h, Tn, a = sh.B, sh.B8, sh.T, sh.h, sh.Tn, sh.a_t
    qk, vd, ql, kvl, _ = _dims(sh)
    scores = sh.b * a * sh.s_q * sh.s
    stash = (B * (Tn * h                       # ln1 input
                  + T * (ql + kvl)             # latent norm inputs
                  + T * a * (2 * qk + vd))     # Q, K (rotary key broadcast), V
             + B8 * (Tn * h + T * (ql + kvl) + T * a * vd)   # projection inputs, out_proj input
             + MASK_BYTES_PER_ELEMENT * Tn * h)
    if sh.flash:
        # the kernel's log-sum-exp and (fp8) 16-bit output: what a core_attn checkpoint
        # drops (``_block.attention_stash``)
        kernel = sh.b * a * sh.s_q * LOSS_BYTES_PER_ELEMENT + (B * T * a * vd if B8 != B else 0)
        return stash + kernel, kernel
    core = 2 * B * scores + MASK_BYTES_PER_ELEMENT * scores
    return stash + core, core
