"""The Mamba-2 mixer of :mod:`phaze.graph` (hybrid models: Nemotron-H, Nemotron 3), forward
and backward, for one tensor-parallel slice (docs/design.md §2.2).

A Mamba-2 layer (Dao & Gu 2024, "Transformers are SSMs", §7–8; Megatron-Core's
``MambaMixer``, the Hugging Face ``NemotronH`` / ``Mamba2Mixer`` modules) is a pre-norm, an
input projection to (z, x, B, C, dt), a causal depthwise convolution of (x, B, C) with
SiLU, the state-space dual (SSD) chunked scan, a gated RMSNorm (y·silu(z), normalised per
group), the output projection and the residual add. Sizes: H = ``mamba_heads`` of P =
``mamba_head_dim`` channels (d_inner = H·P), G = ``mamba_groups`` groups of B and C with
N = ``mamba_state`` states, a convolution of K = ``mamba_conv`` taps over the conv_dim =
d_inner + 2·G·N channels, chunks of Q = ``mamba_chunk`` tokens.

Tensor parallelism (Megatron-Core's rule): the heads and groups are split over the t ranks
(H and G divisible by t): the input projection is column-parallel (its 2·d_inner + 2·G·N + H
outputs by t), the convolution, the scan and the norm run on the rank's heads, the output
projection is row-parallel and its partial sums are all-reduced (reduce-scattered under
sequence parallelism, after an all-gather of the norm output before the input projection,
as the attention half does). Context parallelism is not modelled for a Mamba layer (the
scan's state would travel the ring): the graph refuses it.

The SSD scan is one fused operator ``mamba_ssd`` (``mamba_chunk_scan_combined``), its work
the multiply-accumulates of the chunked algorithm per token and head: the intra-chunk
C·Bᵀ of its group (Q_c·N·G/H), the masked (C·Bᵀ)·X (Q_c·P), the chunk states Bᵀ·X and
their contribution C·state (N·P each), where Q_c = ``flash_keys(Q, causal)`` is the keys
per query a causal tile kernel computes inside a chunk (the tiles up to the diagonal);
dims (b·H/t, s, P, n) with n = ⌈Q_c·(1 + N·G/(H·P)) + 2·N⌉ carry those MACs as a batched
GEMM does. The backward (``mamba_ssd.bwd``) does twice the forward's MACs (the FLOP
identity of every layer kind: backward = 2 × forward). Its elementwise parts (softplus of
dt, the exponentials of the cumulative dt·A, the D skip) ride in the operator's vector
cycles.
"""
from __future__ import annotations

from ._ops import KIND_FUSED, LOSS_BYTES_PER_ELEMENT, MASK_BYTES_PER_ELEMENT, Ops, Shape
from ._ops import VECTOR_CYCLES_PER_ELEMENT as _C
from ._ops import flash_keys, residual_out

#: Vector cycles per element of the Mamba-2 mixer's elementwise kernels (the same counting
#: as ``VECTOR_CYCLES_PER_ELEMENT``): SiLU x·σ(x) ≈ exp, add, divide, multiply = 4; the
#: causal depthwise convolution a multiply-add per tap; the scan's per-(token, channel)
#: work outside its matrix products (dt softplus and exp(dt·A) per head, the D skip and
#: the state decay) ≈ 4; the gated norm: SiLU of z, the product, RMSNorm (3) = 8.
MAMBA_CYCLES = {"silu": 4.0, "conv_tap": 2.0, "ssd": 4.0, "gate_norm": 8.0}


def mamba_sizes(sh: Shape) -> tuple:
    """(heads, groups, d_inner, conv channels, input-projection outputs) of this slice."""
    m, t = sh.m, sh.t
    heads, groups = m.mamba_heads // t, m.mamba_groups // t
    d_in = heads * m.mamba_head_dim
    conv = d_in + 2 * groups * m.mamba_state
    return heads, groups, d_in, conv, 2 * d_in + 2 * groups * m.mamba_state + heads


def ssd_width(m) -> int:
    """n of ``mamba_ssd``'s dims (b·H/t, s, P, n): the scan's MACs per token and head over
    P (module docstring)."""
    qc = flash_keys(m.mamba_chunk, True)
    n = qc * (1.0 + m.mamba_state * m.mamba_groups / (m.mamba_heads * m.mamba_head_dim)) \
        + 2 * m.mamba_state
    return -(-int(round(n * 1e6)) // 1_000_000)


def _states_bytes(sh: Shape) -> int:
    """fp32 chunk states the scan keeps for its backward: b·⌈s/Q⌉·H/t·P·N."""
    m = sh.m
    heads = m.mamba_heads // sh.t
    chunks = -(-sh.s_q // m.mamba_chunk)
    return sh.b * chunks * heads * m.mamba_head_dim * m.mamba_state * LOSS_BYTES_PER_ELEMENT


def mamba_forward(f: Ops, sh: Shape) -> str:
    """Append ``ln1`` … ``residual1`` (the Mamba-2 mixer) to ``f``; returns the last name."""
    m, B, T, h, Tn, sp = sh.m, sh.B, sh.T, sh.h, sh.Tn, sh.sp
    heads, groups, d_in, conv, proj = mamba_sizes(sh)
    K = m.mamba_conv
    f.vector("ln1", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    src = f.all_gather("allgather_mamba", ["ln1"], T * h * B) if sp else "ln1"
    f.gemm("mamba_in_proj", [src], 1, T, h, proj)
    f.vector("mamba_conv", ["mamba_in_proj"], T * conv,
             K * MAMBA_CYCLES["conv_tap"] + MAMBA_CYCLES["silu"],
             T * conv * B + conv * (K + 1) * B, T * conv * B)
    n = ssd_width(m)
    f.ops.append(dict(
        name="mamba_ssd", kind=KIND_FUSED, preds=["mamba_conv", "mamba_in_proj"],
        dims=(sh.b * heads, sh.s_q, m.mamba_head_dim, n),
        cycles_per_element=MAMBA_CYCLES["ssd"], elements=T * d_in,
        bytes_in=(T * conv + T * heads) * B + 3 * heads * B,
        bytes_out=T * d_in * B + _states_bytes(sh)))
    f.vector("mamba_gate_norm", ["mamba_ssd", "mamba_in_proj"], T * d_in,
             MAMBA_CYCLES["gate_norm"], 2 * T * d_in * B + d_in * B, T * d_in * B)
    f.gemm("mamba_out_proj", ["mamba_gate_norm"], 1, T, d_in, h)
    out = f.tp_reduce("mamba", "mamba_out_proj", T * h * B, sp)
    return residual_out(f, sh, "residual1", out, False)


def mamba_backward(g: Ops, sh: Shape, src) -> str:
    """Append the mixer's backward (``residual1.bwd`` … ``ln1.bwd``) after ``src`` (the
    channel mixer's ``ln2.bwd``, or None); returns ``ln1.bwd``."""
    m, B, T, h, Tn, sp = sh.m, sh.B, sh.T, sh.h, sh.Tn, sh.sp
    heads, groups, d_in, conv, proj = mamba_sizes(sh)
    K = m.mamba_conv
    mask = Tn * h * MASK_BYTES_PER_ELEMENT
    dy = g.vector("residual1.bwd", [src], Tn * h, _C["dropout_bwd"], Tn * h * B + mask, Tn * h * B)
    dy = g.all_gather("allgather_mamba_out_proj.dY", [dy], T * h * B) if sp else dy
    g.gemm("mamba_out_proj.dX", [dy], 1, T, h, d_in)
    g.gemm("mamba_out_proj.dW", [dy], 1, d_in, T, h)
    # gated norm backward: dy of the scan output and dz
    g.vector("mamba_gate_norm.bwd", ["mamba_out_proj.dX"], T * d_in,
             _C["rmsnorm_bwd"] + 2 * MAMBA_CYCLES["silu"], 3 * T * d_in * B + d_in * B,
             2 * T * d_in * B + d_in * B)
    n = ssd_width(m)
    g.ops.append(dict(
        name="mamba_ssd.bwd", kind=KIND_FUSED, preds=["mamba_gate_norm.bwd"],
        dims=(sh.b * heads, sh.s_q, m.mamba_head_dim, 2 * n),
        cycles_per_element=2 * MAMBA_CYCLES["ssd"], elements=T * d_in,
        bytes_in=(T * conv + T * heads + 2 * T * d_in) * B + _states_bytes(sh),
        bytes_out=(T * conv + T * heads) * B + 3 * heads * B))
    g.vector("mamba_conv.bwd", ["mamba_ssd.bwd"], T * conv,
             2 * K * MAMBA_CYCLES["conv_tap"] + MAMBA_CYCLES["silu"],
             2 * T * conv * B + conv * (K + 1) * B, T * conv * B + conv * (K + 1) * B)
    ln1_full = g.all_gather("allgather_ln1.bwd", [], T * h * B) if sp else None
    grads = ["mamba_conv.bwd", "mamba_gate_norm.bwd", "mamba_ssd.bwd"]
    g.gemm("mamba_in_proj.dX", grads, 1, T, proj, h)
    g.gemm("mamba_in_proj.dW", grads + [ln1_full], 1, h, T, proj)
    src = g.tp_reduce("mamba_in.dX", "mamba_in_proj.dX", T * h * B, sp)
    return g.vector("ln1.bwd", [src, "residual1.bwd"], Tn * h,
                    _C[m.norm + "_bwd"] + _C["residual"],
                    3 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)


def mamba_params(sh: Shape) -> int:
    """Parameters (elements) of this slice's Mamba-2 mixer: the pre-norm (replicated), the
    input projection h × (2·d_inner + 2·G·N + H)/t, the convolution's weights and biases
    conv_dim/t × (K + 1), dt_bias, A_log and D (H/t each), the gated norm (d_inner/t) and
    the output projection d_inner/t × h (no biases: Nemotron-H's ``use_bias`` False)."""
    heads, groups, d_in, conv, proj = mamba_sizes(sh)
    return (sh.norm_w + sh.h * proj + conv * (sh.m.mamba_conv + 1) + 3 * heads + d_in
            + d_in * sh.h)


def mamba_stash(sh: Shape) -> int:
    """Stashed bytes of the mixer without recomputation: the norm's input, the input
    projection's input (low-precision under fp8), its output (z, x, B, C, dt: the
    convolution's and the gate's inputs), the convolution's output (the scan's input), the
    scan's output and its fp32 chunk states, the output projection's input, the residual
    dropout mask."""
    B, T, h, Tn = sh.B, sh.T, sh.h, sh.Tn
    heads, groups, d_in, conv, proj = mamba_sizes(sh)
    return (B * (Tn * h + T * proj + T * conv + T * d_in) + sh.B8 * (Tn * h + T * d_in)
            + _states_bytes(sh) + MASK_BYTES_PER_ELEMENT * Tn * h)
