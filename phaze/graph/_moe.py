"""The mixture-of-experts block of :mod:`phaze.graph` (docs/design.md §2.2).

A block whose MLP is a mixture of experts: the attention half of the dense block
(``phaze/graph/_block.py``), then

forward: ``ln2``, ``router`` (GEMM tokens × hidden × n_experts, no bias, 16-bit),
``router_topk`` (softmax and top-k over the experts), ``moe_permute`` (tokens into
expert order), ``alltoall_dispatch`` (expert-parallel group), [``allgather_moe``],
the local experts' grouped GEMMs as batched GEMMs of batch n_experts/ep
(``expert_gate_proj``, ``expert_up_proj``, ``expert_swiglu`` | ``expert_fc1``
[``expert_fc1_act``]; ``expert_fc2``), [``reduce_scatter_moe``], ``alltoall_combine``,
the shared experts as one dense MLP of width n_shared·shared_ffn (``shared_*``, with
Qwen2-MoE's gate ``shared_gate``), ``moe_combine`` (weighted sum of each token's k expert
outputs plus the shared output), ``residual2``;

backward: ``residual2.bwd``, ``moe_combine.bwd`` (expert-output and routing-weight
gradients), ``alltoall_combine.bwd``, the experts' ``.dX`` / ``.dW`` GEMMs,
``alltoall_dispatch.bwd``, ``moe_permute.bwd`` (scatter-add back to the tokens),
``router_topk.bwd``, ``router.dX``, ``router.dW``, the shared experts' backward,
``mlp_in.dX_sum``, ``ln2.bwd``; then the attention half's backward.

LatentMoE (``ModelSpec.moe_latent_size`` L > 0; Nemotron 3 Super / Ultra, Megatron-Core's
``MoELayer`` with ``moe_latent_size``): ``fc1_latent_proj`` (GEMM tokens × hidden × L)
runs after the router on ``ln2``'s output and before ``moe_permute``; the permutation, both
all-to-alls, the all-gather / reduce-scatter under t > 1 and the experts (L × width
matrices) move and compute L-wide tokens; ``latent_combine`` sums each token's k latent
outputs, ``fc2_latent_proj`` (tokens × L × hidden) projects back and ``moe_combine`` adds
the shared experts (which, with the router, stay at hidden). The two projections are
replicated on every tensor-parallel slice (TELinear ``parallel_mode="duplicated"``), each
on the slice's own s/t tokens; their backward is ``fc2_latent_proj.dX/.dW`` before
``moe_combine.bwd`` and ``fc1_latent_proj.dX/.dW`` after ``moe_permute.bwd``.

Parallelism (Megatron-Core's rules, stated):

- *Expert parallelism* ``ep``: each rank holds n_experts/ep routed experts; the
  all-to-alls run over the ep ranks of the expert-parallel group. ``ep`` divides
  n_experts. Each rank sends, per expert, the tokens it routes to that expert.
- *Tensor parallelism inside the experts*: expert-tensor-parallel = t (Megatron-Core's
  default ``expert_tensor_parallel_size = tensor_model_parallel_size``): every expert is
  sliced by t like the dense MLP (gate/up/fc1 by columns, fc2 by rows). With it
  Megatron-Core's identity ETP × EP × EDP = TP × CP × DP makes ``ep`` divide d·cp (the
  expert-data-parallel group, which reduces the expert gradients, has d·cp/ep ranks);
  the step model checks that. As Megatron-Core requires, t > 1 needs sequence
  parallelism: each slice routes its s/t tokens, dispatches them, all-gathers the
  tokens its local experts received over the t slices (``allgather_moe``), and
  reduce-scatters the experts' partial outputs (``reduce_scatter_moe``) before the
  combine all-to-all; the shared experts all-gather / reduce-scatter like the dense MLP.
- *Tokens per expert*: a rank routes R tokens (its s/cp · b tokens, divided by t under
  sequence parallelism) to each expert ``c = ⌈R·k / n_experts⌉`` times (balanced routing,
  the default) or exactly ``c = ⌈R·k / n_experts · capacity_factor⌉`` times (Megatron's
  capacity with dropping and padding to capacity); a local expert then receives
  ``(t·)ep·c`` tokens: the grouped GEMM is (n_experts/ep) × ((t·)ep·c) × hidden × width/t.
- *All-to-all price*: ``Ops.all_to_all`` (each rank sends (n−1)/n of its bytes over the
  group's tier: ``comm_bytes`` = half the bytes, priced by phaze.cost's ring formula
  2(n−1)/n·comm_bytes/BW; the in-node link when the ep group fits a node, else the
  network — the group size alone decides the tier in ``phaze.cost``; where the ep ranks
  sit is the step model's to say).
"""
from __future__ import annotations

import math

from .._params import latent_proj_params
from ._block import (attention_backward, attention_forward, attention_params, attention_stash,
                     post_norm, post_norm_backward)
from ._ops import EXPERT_INDEX_BYTES, GATED, MASK_BYTES_PER_ELEMENT, Ops, Shape, residual_out
from ._ops import VECTOR_CYCLES_PER_ELEMENT as _C


def tokens_per_expert(routed_tokens: int, top_k: int, n_experts: int, capacity_factor=None) -> int:
    """Tokens one rank sends to each expert: ⌈routed·k/n⌉ (balanced), or Megatron-Core's
    capacity ⌈routed·k/n · capacity_factor⌉ (dropped or padded to it)."""
    if capacity_factor is None:
        return -(-routed_tokens * top_k // n_experts)
    return math.ceil(routed_tokens * top_k / n_experts * capacity_factor)


def _mlp_forward(f: Ops, sh: Shape, p: str, src: str, batch: int, rows: int, cols: int,
                 io: int = None) -> str:
    """A (batched) MLP of ``cols`` columns per slice on ``rows`` tokens of ``io`` features
    (default the model width; LatentMoE's experts: the latent), operators named
    ``p + gate_proj | up_proj | swiglu (geglu) | fc1 [| fc1_act] | fc2``; returns fc2's name."""
    m, B, h = sh.m, sh.B, sh.h if io is None else io
    bias_c = _C["bias"] if m.bias else 0.0
    extra = batch * cols * B if m.bias else 0
    if m.activation in GATED:
        for name in ("gate_proj", "up_proj"):
            f.gemm(p + name, [src], batch, rows, h, cols, epilogue=bias_c, extra_in=extra)
        act = f.vector(p + m.activation, [p + "gate_proj", p + "up_proj"], batch * rows * cols,
                       _C[m.activation], 2 * batch * rows * cols * B, batch * rows * cols * B)
    elif sh.megatron:
        f.gemm(p + "fc1", [src], batch, rows, h, cols)
        act = f.vector(p + "fc1_act", [p + "fc1"], batch * rows * cols, bias_c + _C[m.activation],
                       batch * rows * cols * B + extra, batch * rows * cols * B)
    else:
        act = f.gemm(p + "fc1", [src], batch, rows, h, cols, epilogue=bias_c + _C[m.activation],
                     extra_in=extra)
    return f.gemm(p + "fc2", [act], batch, rows, cols, h)


def _mlp_backward(g: Ops, sh: Shape, p: str, dy: str, x, batch: int, rows: int, cols: int,
                  io: int = None) -> str:
    """Backward of :func:`_mlp_forward` from the output gradient ``dy`` (``x``: an extra
    predecessor of the weight gradients, e.g. a re-gathered input); returns the name of
    the input gradient."""
    m, B, h = sh.m, sh.B, sh.h if io is None else io
    bias_g = _C["bias_grad"] if m.bias else 0.0
    n = batch * rows * cols
    g.gemm(p + "fc2.dX", [dy], batch, rows, h, cols)
    g.gemm(p + "fc2.dW", [dy], batch, cols, rows, h)
    if m.activation in GATED:
        g.vector(p + m.activation + ".bwd", [p + "fc2.dX"], 2 * n, _C[m.activation + "_bwd"] + bias_g, 3 * n * B,
                 2 * n * B)
        for name in ("gate_proj", "up_proj"):
            g.gemm(p + name + ".dX", [p + m.activation + ".bwd"], batch, rows, cols, h)
            g.gemm(p + name + ".dW", [p + m.activation + ".bwd", x], batch, h, rows, cols)
        return g.vector(p + "in.dX_sum", [p + "gate_proj.dX", p + "up_proj.dX"], batch * rows * h,
                        _C["add"], 2 * batch * rows * h * B, batch * rows * h * B)
    g.vector(p + "fc1.act.bwd", [p + "fc2.dX"], n, _C[m.activation + "_bwd"] + bias_g, 2 * n * B,
             n * B)
    g.gemm(p + "fc1.dX", [p + "fc1.act.bwd"], batch, rows, cols, h)
    g.gemm(p + "fc1.dW", [p + "fc1.act.bwd", x], batch, h, rows, cols)
    return p + "fc1.dX"


def _moe_sizes(sh: Shape):
    """The MoE half's sizes on this slice: (experts held, tokens routed, tokens sent per
    expert, token rows dispatched, tokens each local expert runs, expert columns, shared
    columns, routing bytes)."""
    m, t, ep, sp = sh.m, sh.t, sh.ep, sh.sp
    n_e, k = m.n_experts, m.experts_per_token
    local = n_e // ep                                # routed experts held by this rank
    R = sh.Tn                                        # tokens this slice routes
    c = tokens_per_expert(R, k, n_e, sh.capacity_factor)
    sent = n_e * c                                   # token rows this slice dispatches
    rows = (t if sp else 1) * ep * c                 # tokens each local expert runs
    fe_t = -(-m.expert_ffn_hidden // t)              # expert columns of this slice
    shared = m.n_shared_experts
    fs_t = -(-(shared * m.shared_ffn_hidden) // t) if shared else 0
    routing = R * k * (sh.B + EXPERT_INDEX_BYTES)    # routing weights and expert indices
    return local, R, c, sent, rows, fe_t, fs_t, routing


def moe_forward(f: Ops, sh: Shape, src) -> str:
    """Append the MoE half (``ln2`` … ``residual2``) after ``src`` (None: the layer's
    input); returns the last operator's name."""
    m, B, T, Tn, h, ep, sp = sh.m, sh.B, sh.T, sh.Tn, sh.h, sh.ep, sh.sp
    n_e, k = m.n_experts, m.experts_per_token
    local, R, c, sent, rows, fe_t, fs_t, routing = _moe_sizes(sh)
    shared = m.n_shared_experts
    bias_c = _C["bias"] if m.bias else 0.0
    f.vector("ln2", [src], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    f.gemm("router", ["ln2"], 1, R, h, n_e)
    f.vector("router_topk", ["router"], R * n_e, _C["softmax"] + k * _C["topk"], R * n_e * B,
             R * n_e * B + routing)
    lat = m.moe_latent_size
    w = lat or h                                     # width of the dispatched tokens
    src = "ln2"
    if lat:
        # LatentMoE: fc1_latent_proj (replicated over t, on this slice's R tokens) before
        # the permutation; everything up to the combine is latent-wide
        src = f.gemm("fc1_latent_proj", ["ln2"], 1, R, h, lat, epilogue=bias_c,
                     extra_in=lat * B if m.bias else 0)
    f.vector("moe_permute", [src, "router_topk"], sent * w, _C["permute"],
             R * w * B + R * k * EXPERT_INDEX_BYTES, sent * w * B)
    x = f.all_to_all("alltoall_dispatch", ["moe_permute"], sent * w * B, ep)
    x = f.all_gather("allgather_moe", [x], local * rows * w * B) if sp else x
    y = _mlp_forward(f, sh, "expert_", x, local, rows, fe_t, io=w)
    y = f.reduce_scatter("reduce_scatter_moe", [y], local * rows * w * B) if sp else y
    y = f.all_to_all("alltoall_combine", [y], sent * w * B, ep)
    parts = [y, "router_topk"]
    if lat:
        # the weighted sum of each token's k latent outputs, then fc2_latent_proj back to h
        f.vector("latent_combine", parts, R * lat, k * (_C["scale_add"] + bias_c),
                 sent * lat * B + R * k * B, R * lat * B)
        parts = [f.gemm("fc2_latent_proj", ["latent_combine"], 1, R, lat, h, epilogue=bias_c,
                        extra_in=h * B if m.bias else 0)]
    if shared:
        s_in = f.all_gather("allgather_shared", ["ln2"], T * h * B) if sp else "ln2"
        s_out = _mlp_forward(f, sh, "shared_", s_in, 1, T, fs_t)
        parts.append(f.reduce_scatter("reduce_scatter_shared", [s_out], T * h * B) if sp else s_out)
        if m.shared_expert_gate:
            parts.append(f.gemm("shared_gate", ["ln2"], 1, R, h, 1))
    # Weighted sum of each token's k expert outputs (each with its fc2 bias), plus the
    # (sigmoid-gated) shared experts' output.
    gate_c = _C["sigmoid"] / h + _C["scale_add"] if m.shared_expert_gate else _C["add"]
    if not lat:
        f.vector("moe_combine", parts, R * h,
                 k * (_C["scale_add"] + bias_c) + (gate_c if shared else 0.0),
                 (sent + (R if shared else 0)) * h * B + R * k * B
                 + (R * B if m.shared_expert_gate else 0), R * h * B)
        out = "moe_combine"
    elif shared:
        # LatentMoE: the projected routed output plus the (gated) shared experts' output
        f.vector("moe_combine", parts, R * h, gate_c, 2 * R * h * B
                 + (R * B if m.shared_expert_gate else 0), R * h * B)
        out = "moe_combine"
    else:
        out = "fc2_latent_proj"
    # t = 1 or sequence parallel: the output is complete on this slice's tokens.
    if m.sandwich_norm:
        out = post_norm(f, sh, "post_mlp_norm", out)
    return residual_out(f, sh, "residual2", out, bias=False)


def moe_backward(g: Ops, sh: Shape) -> str:
    """Append the MoE half's backward (``residual2.bwd`` … ``ln2.bwd``, the first operators
    of the layer's backward); returns ``ln2.bwd``."""
    m, B, T, Tn, h, ep, sp = sh.m, sh.B, sh.T, sh.Tn, sh.h, sh.ep, sh.sp
    n_e, k = m.n_experts, m.experts_per_token
    local, R, c, sent, rows, fe_t, fs_t, routing = _moe_sizes(sh)
    shared = m.n_shared_experts
    mask = Tn * h * MASK_BYTES_PER_ELEMENT
    dy0 = g.vector("residual2.bwd", [], Tn * h, _C["dropout_bwd"], Tn * h * B + mask, Tn * h * B)
    if m.sandwich_norm:
        dy0 = post_norm_backward(g, sh, "post_mlp_norm", dy0)
    lat = m.moe_latent_size
    w = lat or h                                     # width of the dispatched tokens
    r_dy = dy0
    if lat:
        # fc2_latent_proj's gradients (its input: the stashed latent combine)
        r_dy = g.gemm("fc2_latent_proj.dX", [dy0], 1, R, h, lat)
        g.gemm("fc2_latent_proj.dW", [dy0], 1, lat, R, h)
    # Gradients of the k expert outputs (routing weight × dy) and of the routing weights
    # (dy · expert output, from the stashed outputs).
    g.vector("moe_combine.bwd", [r_dy], sent * w, _C["scale_add"],
             R * w * B + sent * w * B + R * k * B, sent * w * B + R * k * B)
    dy = g.all_to_all("alltoall_combine.bwd", ["moe_combine.bwd"], sent * w * B, ep)
    dy = g.all_gather("allgather_expert_fc2.dY", [dy], local * rows * w * B) if sp else dy
    dx = _mlp_backward(g, sh, "expert_", dy, None, local, rows, fe_t, io=w)
    dx = g.reduce_scatter("reduce_scatter_expert.dX", [dx], local * rows * w * B) if sp else dx
    dx = g.all_to_all("alltoall_dispatch.bwd", [dx], sent * w * B, ep)
    parts = [g.vector("moe_permute.bwd", [dx], R * w, k * _C["add"], sent * w * B, R * w * B)]
    if lat:
        g.gemm("fc1_latent_proj.dX", [parts[0]], 1, R, lat, h)
        g.gemm("fc1_latent_proj.dW", [parts[0]], 1, h, R, lat)
        parts = ["fc1_latent_proj.dX"]
    g.vector("router_topk.bwd", ["moe_combine.bwd"], R * n_e, _C["softmax_bwd"],
             2 * R * n_e * B + routing, R * n_e * B)
    g.gemm("router.dX", ["router_topk.bwd"], 1, R, n_e, h)
    g.gemm("router.dW", ["router_topk.bwd"], 1, h, R, n_e)
    parts.append("router.dX")
    if shared:
        s_dy = dy0
        if m.shared_expert_gate:
            s_dy = g.vector("shared_gate.bwd", [dy0], R * h,
                            _C["scale_add"] + _C["sigmoid_bwd"] / h, 2 * R * h * B, R * h * B + R * B)
            g.gemm("shared_gate.dX", [s_dy], 1, R, 1, h)
            g.gemm("shared_gate.dW", [s_dy], 1, h, R, 1)
            parts.append("shared_gate.dX")
        s_dy = g.all_gather("allgather_shared_fc2.dY", [s_dy], T * h * B) if sp else s_dy
        s_x = g.all_gather("allgather_shared_in.bwd", [], T * h * B) if sp else None
        s_dx = _mlp_backward(g, sh, "shared_", s_dy, s_x, 1, T, fs_t)
        parts.append(g.reduce_scatter("reduce_scatter_shared.dX", [s_dx], T * h * B) if sp else s_dx)
    g.vector("mlp_in.dX_sum", parts, R * h, (len(parts) - 1) * _C["add"], len(parts) * R * h * B,
             R * h * B)
    return g.vector("ln2.bwd", ["mlp_in.dX_sum", "residual2.bwd"], Tn * h,
                    _C[m.norm + "_bwd"] + _C["residual"], 3 * Tn * h * B + sh.norm_w * B,
                    Tn * h * B + sh.norm_w * B)


def moe_params(sh: Shape) -> tuple:
    """(parameters of this slice's MoE half, of its routed experts) in elements: ln2, the
    router (and its bias), the local routed experts, the shared experts and their gate."""
    m, h = sh.m, sh.h
    n_e = m.n_experts
    local, R, c, sent, rows, fe_t, fs_t, routing = _moe_sizes(sh)
    shared = m.n_shared_experts
    mats = 3 if m.activation in GATED else 2
    w = m.moe_latent_size or h                       # the experts' input and output width
    expert = mats * w * fe_t + ((mats - 1) * fe_t + w if m.bias else 0)
    params = sh.norm_w + h * n_e + local * expert
    # fc1/fc2_latent_proj (0 without LatentMoE), replicated on every slice (Megatron-Core's
    # TELinear parallel_mode "duplicated"): the whole model's count of them
    params += latent_proj_params(m)
    if m.router_bias:
        params += n_e
    if m.sandwich_norm:
        params += sh.norm_w
    if shared:
        params += mats * h * fs_t + ((mats - 1) * fs_t + shared * h if m.bias else 0)
        params += h if m.shared_expert_gate else 0
    return params, local * expert


def moe_stash(sh: Shape) -> int:
    """Stashed bytes of the MoE half (no recomputation)."""
    m, B, T, Tn, h = sh.m, sh.B, sh.T, sh.Tn, sh.h
    n_e = m.n_experts
    local, R, c, sent, rows, fe_t, fs_t, routing = _moe_sizes(sh)
    act = (2 if m.activation in GATED else 1)
    lat = m.moe_latent_size
    w = lat or h                                     # width of the dispatched tokens
    stash = (B * (2 * Tn * h                         # ln2 input and output (router, permute)
                  + R * n_e                          # router probabilities (softmax backward)
                  + act * local * rows * fe_t        # expert activation inputs
                  + sent * w)                        # expert outputs (routing-weight gradient)
             + routing
             + sh.B8 * local * rows * (w + fe_t)     # expert fc1 and fc2 inputs
             + Tn * h * MASK_BYTES_PER_ELEMENT)
    if lat:
        # fc2_latent_proj's input (the latent combine); fc1_latent_proj's is ln2's output,
        # kept above. Both projections are 16-bit GEMMs (not in precision.FP8_GEMMS).
        stash += B * R * lat
    if m.n_shared_experts:
        stash += B * act * T * fs_t + sh.B8 * T * fs_t + (sh.B8 * Tn * h if sh.B8 != B else 0)
    if m.sandwich_norm:
        stash += B * Tn * h                          # the post-norm's input
    return stash


def moe_block(sh: Shape):
    """The MoE transformer block: (forward, backward, parameter bytes,
    (stash none, selective, full), boundary bytes, expert parameter bytes)."""
    B, T, Tn, h, t = sh.B, sh.T, sh.Tn, sh.h, sh.t
    f = Ops(B, t, sh.dtype)
    moe_forward(f, sh, attention_forward(f, sh))
    g = Ops(B, t, sh.dtype)
    attention_backward(g, sh, moe_backward(g, sh))
    params, expert = moe_params(sh)
    params += attention_params(sh)
    attn, core = attention_stash(sh)
    stash = attn + moe_stash(sh)
    # Selective drops the attention core; full keeps the layer input (s/t tokens under SP).
    return (f.graph(), g.graph(), params * B, (stash, stash - core, B * Tn * h), T * h * B,
            expert * B)
