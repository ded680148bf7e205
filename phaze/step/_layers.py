"""The step model's per-row pricing of one layer kind, and its records. Private: ``_plans``
(a variant's layer times and sizes, the plan search) and ``_model`` (one plan) use it.

A layer kind's times are the sums of its operators' calibrated intra-op latencies exactly
as :func:`phaze.step.training_step` prices them (``phaze.cost``'s operator loop on every
row, the sequence-parallel collectives re-priced as rings, the overlapped backward gathers
charged for their excess); also the rows' collective parameters (``ROW_PARAMS``), a
layer's group-collective and FP8-weight bytes, the MoE layer prefix, and the kernels'
``PLAN`` records (:func:`plan_records`).
"""
from __future__ import annotations

import numpy as np

from . import _kernels as kern
from . import _optim
from .. import _config, collectives, graph, precision
from .. import plan as _plan
from .._cache import Memo
from ..arch import efficiency as _efficiency

#: HBM bytes moved per parameter by Megatron's mixed-precision Adam step (sheet §5.2, [D]
#: from megatron/core/optimizer/optimizer.py): unscale + inf check 8 (fp16 only), grad norm 4,
#: fused Adam 28, master → model copy 6, zero grads 4 = 50 (fp16), 42 (bf16, no loss scaler).
#: fp8 training keeps bf16 model weights and fp32 master weights, gradients and Adam state
#: (Transformer Engine's recipe with Megatron-LM's --bf16; no loss scaler): the bf16 step.
#: (``_optim.OPTIMIZERS["adam"]`` at fp32 state; Muon and bf16 state there.)
OPTIMIZER_BYTES_PER_PARAM = {d: _optim.hbm_bytes("adam", "fp32", d) for d in precision.DTYPES}
#: Multi-tensor kernels the step launches (sheet §5.2 table rows, clip excluded): unscale
#: (fp16), norm, Adam, copy, zero.
OPTIMIZER_KERNELS = {d: _optim.kernels("adam", d) for d in precision.DTYPES}
#: Bytes per parameter of the gradient buffer and of its data-parallel reduction at each
#: ``grad_reduce_dtype`` (``phaze.plan``): Megatron-Core's buffer is fp32 with
#: grad_reduce_in_fp32, else in the parameters' 16-bit datatype (param_and_grad_buffer.py).
GRAD_REDUCE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: Optimizer HBM bytes per parameter a 16-bit gradient buffer adds to
#: ``OPTIMIZER_BYTES_PER_PARAM`` (sheet §5.2): the fp32 main-gradient copy
#: ``main_grad.float()`` reads 2 and writes 4 B (a no-op view for an fp32 buffer), zeroing
#: the buffer writes 2 B instead of 4: + 6 − 2. Norm, unscale and Adam read the fp32 copy.
OPTIMIZER_GRAD_COPY_BYTES = {"fp32": 0, "bf16": 4, "fp16": 4}
#: MoE token dispatchers and their kernel codes (``step._kernels.layer_times``):
#: Megatron-Core's all-to-all (every routed copy sent on its own) and DeepEP's
#: (``_ring.dedup_all_to_all``: each token once per remote node, forwarded over NVLink).
MOE_DISPATCHERS = {"alltoall": 0, "deepep": 1}
#: Recomputation modes and their kernel codes.
RECOMPUTE_CODES = {"none": kern.REC_NONE, "selective": kern.REC_SELECTIVE, "full": kern.REC_FULL,
                   "op": kern.REC_OP}


def op_recompute_shares(m_spec) -> dict:
    """The part of each forward GEMM that torchtitan's per-op selective checkpointing
    re-runs (``selective_ac_option = "op"``; pytorch/torchtitan
    torchtitan/distributed/activation_checkpoint.py, ``_custom_policy``: the outputs of
    matmuls, attention, reduce-scatters and amax are saved "except every second mm", every
    other operator re-runs in the backward). Its Llama block runs seven matmuls in order
    wq, wk, wv, wo, w1, w3, w2 (six without a gate: wq, wk, wv, wo, fc1, fc2), so the
    even-numbered ones re-run: wk, wo, w3 (wk, wo, fc2). phaze's graph fuses wq·wk·wv
    into ``qkv_proj`` (the key projection's share of its output columns) and w1·w3 into
    ``fc1`` (half of it); separate projections take their whole share."""
    hd = m_spec.hidden // m_spec.heads
    kv = (m_spec.kv_heads or m_spec.heads) * hd
    gated = m_spec.activation in ("swiglu", "geglu")
    return {"qkv_proj": kv / (m_spec.hidden + 2 * kv), "k_proj": 1.0, "out_proj": 1.0,
            "o_proj": 1.0, "fc1": 0.5 if gated else 0.0, "up_proj": 1.0,
            "fc2": 0.0 if gated else 1.0}

#: The backward all-gathers of sequence parallelism that Megatron-LM overlaps with an
#: input-gradient GEMM (Korthikanti et al. 2022 §4.2.2: the sharded norm output is
#: all-gathered again for the weight gradient while the input gradient is computed):
#: all-gather → the GEMMs it runs concurrently with.
OVERLAPPED_GATHERS = {
    "allgather_ln1.bwd": ("q_proj.dX", "k_proj.dX", "v_proj.dX", "qkv_proj.dX",
                          "mamba_in_proj.dX"),
    "allgather_ln2.bwd": ("fc1.dX", "gate_proj.dX", "up_proj.dX"),
}
#: Tensor-parallel communication overlap (the ``tp_comm_overlap`` knob: Megatron-Core's
#: ``--tp-comm-overlap``, Transformer Engine's userbuffers; torchtitan's async TP): each
#: sequence-parallel collective of a transformer block → (its partner GEMMs, how TE
#: overlaps it: ``initialize_ub``'s default method of that userbuffer,
#: transformer_engine/pytorch/module/base.py). "ring": the all-gather before a
#: column-parallel GEMM (qkv/fc1 fprop) or a row-parallel input gradient (proj/fc2 dgrad),
#: a ring exchange of t chunks whose first GEMM chunk runs on the local shard;
#: "pipeline": the reduce-scatter after a row-parallel GEMM (proj/fc2 fprop), the GEMM in
#: ``TP_PIPELINE_SPLITS`` chunks each reduce-scattered beside the next; "bulk": the
#: reduce-scatter of a column-parallel input gradient beside the weight-gradient GEMM
#: (qkv/fc1 wgrad; the norm all-gathers beside dgrad are ``OVERLAPPED_GATHERS``, always on).
TP_OVERLAPPED = {
    "allgather_attn": (("qkv_proj", "q_proj", "k_proj", "v_proj"), "ring"),
    "allgather_mlp": (("fc1", "gate_proj", "up_proj"), "ring"),
    "reduce_scatter_attn": (("out_proj",), "pipeline"),
    "reduce_scatter_mlp": (("fc2",), "pipeline"),
    "allgather_out_proj.dY": (("out_proj.dX",), "ring"),
    "allgather_fc2.dY": (("fc2.dX",), "ring"),
    "reduce_scatter_qkv.dX": (("qkv_proj.dW", "q_proj.dW", "k_proj.dW", "v_proj.dW"), "bulk"),
    "reduce_scatter_fc1.dX": (("fc1.dW", "gate_proj.dW", "up_proj.dW"), "bulk"),
    # a Mamba-2 mixer's input and output projections are the same Transformer Engine
    # column- and row-parallel linear layers (Megatron-Core's MambaMixer in_proj/out_proj)
    "allgather_mamba": (("mamba_in_proj",), "ring"),
    "reduce_scatter_mamba": (("mamba_out_proj",), "pipeline"),
    "allgather_mamba_out_proj.dY": (("mamba_out_proj.dX",), "ring"),
    "reduce_scatter_mamba_in.dX": (("mamba_in_proj.dW",), "bulk"),
}
#: Chunks of TE's "pipeline" reduce-scatter overlap (``initialize_ub``'s ``num_splits``
#: default, base.py ``add_ub``).
TP_PIPELINE_SPLITS = 4
#: The attention-core operators selective recomputation re-runs before the backward.
ATTENTION_CORE = ("attn_scores", "softmax", "attn_dropout", "attn_context")


# ---------------------------------------------------------------------------
# per-row inputs
# ---------------------------------------------------------------------------

def efficiency_rows(efficiency, archs) -> np.ndarray:
    """One EFFICIENCY_DTYPE set per row: None → ``efficiency.for_rows(archs)``; a set's
    name, an Efficiency or an array of 1 or n sets otherwise."""
    if efficiency is None:
        return _efficiency.for_rows(archs)
    return _efficiency.rows(efficiency, archs.shape[0])


def bytes_per_s(efficiency, gb_per_s) -> np.ndarray:
    """(η · GB/s) · 10⁹ per row, +inf where the product would pass the float maximum (a
    chip file's rate near it): the value the overflow would give, formed without one. The
    one form of an achievable bandwidth (the kernels' ``ROW_PARAMS``, the energy model's
    optimizer traffic, the search's power columns)."""
    eta_gb = np.asarray(efficiency, dtype=np.float64) * np.asarray(gb_per_s, dtype=np.float64)
    fits = eta_gb <= np.finfo(np.float64).max / 1e9
    return np.multiply(eta_gb, 1e9, out=np.full(eta_gb.shape, np.inf), where=fits)


def row_params(archs, eff_rows) -> np.ndarray:
    """(n,) ``step._kernels.ROW_PARAMS`` records: the collective parameters of each row,
    each product formed as ``training_step`` forms it: (η · GB/s) · 10⁹; NCCL's LL/LL128
    protocol parameters as ``collectives.protocol_parameters`` makes them."""
    rp = np.empty(archs.shape[0], dtype=kern.ROW_PARAMS)
    rp["coll_latency_s"] = eff_rows["coll_latency_s"]
    rp["link_step_s"] = eff_rows["link_step_s"]
    rp["net_step_s"] = eff_rows["net_step_s"]
    for field, x in collectives.protocol_parameters(eff_rows).items():
        rp[field] = x
    for bw, field in (("link_bw", "link"), ("net_bw", "net"), ("hbm_bw", "hbm")):
        rp[bw] = bytes_per_s(eff_rows[f"{field}_efficiency"], archs[f"{field}_gb_per_s"])
    rp["launch_s"] = eff_rows["launch_s"]
    return rp


#: κ = s/(1 + s): the least share of an overlapped collective's seconds it costs, compute
#: beside it running 1/(1 + s) as fast (s = ``step._kernels.OVERLAP_SLOWDOWN``, Lee et
#: al. 2025, docs/fidelity-sources.md §4.5; the kernels' ``KAPPA``).
OVERLAP_KAPPA = kern.OVERLAP_SLOWDOWN / (1.0 + kern.OVERLAP_SLOWDOWN)


def overlap_exposed(comm, busy):
    """Seconds a collective of ``comm`` seconds adds beside compute of ``busy`` seconds
    (arrays or floats): its excess comm − busy, or, when the compute outlasts it, the
    compute's slowdown while they overlap, κ·comm (the kernels' ``exposed``)."""
    return np.maximum(comm - busy, OVERLAP_KAPPA * comm)


def tp_overlap_exposed(method, comm, gemm, t):
    """Seconds of a tensor-parallel collective of ``comm`` seconds left exposed beside its
    partner GEMMs of ``gemm`` seconds under ``tp_comm_overlap`` (arrays or floats; method
    of :data:`TP_OVERLAPPED`). "ring" (t chunks, the local one's GEMM first, each of the
    t − 1 exchange steps beside the next chunk's GEMM): (t−1)·max(0, comm/(t−1) − gemm/t)
    = max(0, comm − gemm·(t−1)/t). "pipeline" (n = ``TP_PIPELINE_SPLITS`` chunks, chunk
    i's reduce-scatter beside GEMM chunk i+1, the last one alone): (n−1)/n·max(0, comm −
    gemm) + comm/n. "bulk" (the whole collective beside the GEMM): max(0, comm − gemm).
    Each max(0, ·) is at least the GEMMs' slowdown beside the traffic, κ·comm
    (:func:`overlap_exposed`)."""
    if method == "ring":
        return overlap_exposed(comm, gemm * ((t - 1) / t))
    if method == "pipeline":
        n = TP_PIPELINE_SPLITS
        return overlap_exposed(comm, gemm) * ((n - 1) / n) + comm / n
    if method == "bulk":
        return overlap_exposed(comm, gemm)
    raise ValueError(f"method must be one of ring, pipeline, bulk, got {method!r}")


def op_seconds_rows(g, pricer, rp, node_size, t, fp8_rate=None, intra=None,
                    tp_overlap=False):
    """Seconds of each operator of ``g`` (one microbatch) on every row, (n_ops, n): the
    intra-op calibrated latencies, with sequence parallelism's reduce-scatters and
    all-gathers (``OpGraph.collective``) priced as rings over the in-node tensor-parallel
    group (ranks 0..t−1, ``collectives.reduce_scatter_seconds`` /
    ``all_gather_seconds``, one pass) instead of the half-size all-reduce the graph
    stores them as, and the overlapped backward all-gathers charged only for what
    exceeds the GEMMs they overlap. ``pricer``: the rows under the calibrated model
    (``cost.prepare``); ``fp8_rate`` (an fp8 graph's tensor-rate multiplier) goes to its
    ``op_latencies`` as given; ``intra``: those latencies already priced (its
    ``op_latencies_many``), or None; ``tp_overlap``: tensor-parallel communication
    overlap (``tp_comm_overlap``, effective: sequence parallelism at t > 1): the
    collectives of :data:`TP_OVERLAPPED` charged :func:`tp_overlap_exposed` beside their
    partner GEMMs (no slowdown of the GEMMs beside the traffic: no component measurement
    with shapes, docs/fidelity-sources.md).
    Returns (seconds, {operator name: index})."""
    if intra is None:
        _, intra = pricer.op_latencies(g, fp8_rate=fp8_rate)
    sec = np.ascontiguousarray(intra, dtype=np.float64).copy()
    index, rings, overlapped, _group, tp_overlapped = _graph_static(g)
    for i, code, nbytes in rings:
        collectives.contiguous_seconds(code, nbytes, t, rp, node_size, sec[i])
    for i, partners in overlapped:
        sec[i] = overlap_exposed(sec[i], _partner_seconds(sec, partners))
    if tp_overlap and t > 1:
        for i, partners, method in tp_overlapped:
            sec[i] = tp_overlap_exposed(method, sec[i], _partner_seconds(sec, partners), t)
    return sec, index


def _partner_seconds(sec, partners):
    """The summed seconds (per row) of the operators ``partners`` an overlapped collective
    runs beside, in their order (0 for none)."""
    busy = 0
    for q in partners:
        busy = busy + sec[q]
    return busy


_GRAPH_STATIC = Memo(lambda: _config.STEP_GRAPH_CACHE_SIZE, "step.graph_static")
"""OpGraph (by identity) -> what :func:`op_seconds_rows` and :func:`layer_times_rows` read of
its operators: the name index, the sequence-parallel rings, the overlapped gathers with their
partners and the group collectives' mask."""


def _graph_static(g):
    hit = _GRAPH_STATIC.get(g)
    if hit is None:
        index = {n: i for i, n in enumerate(g.names)}
        rings = [(int(i), int(g.collective[i]), int(g.bytes_in[i]))
                 for i in np.flatnonzero(g.collectives("reduce_scatter", "all_gather"))]
        overlapped = [(index[name], [index[q] for q in partners if q in index])
                      for name, partners in OVERLAPPED_GATHERS.items() if name in index]
        group = g.collectives(*GROUP_COLLECTIVES)
        group.setflags(write=False)
        tp_overlapped = [(index[name], [index[q] for q in partners if q in index], method)
                         for name, (partners, method) in TP_OVERLAPPED.items()
                         if name in index]
        hit = _GRAPH_STATIC.put(g, (index, rings, overlapped, group, tp_overlapped))
    return hit


#: Collectives over the expert- and context-parallel groups (names of
#: ``graph.COLLECTIVE_KINDS``): priced by the kernels from where the group's ranks sit
#: (``step._kernels.layer_times``), not summed with the operators.
GROUP_COLLECTIVES = ("all_to_all", "p2p")


def layer_times_rows(layer, pricer, rp, node_size, t, fp8_rate=None, priced=None,
                     tp_overlap=False, op_shares=None, recompute_modules=None):
    """(forward, backward, attention-core forward, flash attention forward, flash attention
    backward) seconds of one layer kind, one microbatch, on every row: five (n,) arrays, the
    first two each a row's sum of its operators (numpy's sum over one contiguous row, the
    same summation as one row alone) without the expert-parallel all-to-alls and the
    context-parallel K/V exchanges (``GROUP_COLLECTIVES``: the kernels price them over the
    plan's ranks). The third is what selective recomputation re-runs: the unfused attention
    core, or with flash attention the fused kernel's forward (Megatron-Core checkpoints
    ``core_attention``, Transformer Engine's fused attention, and re-runs it before the
    backward: ``megatron/core/transformer/attention.py``, ``checkpoint_core_attention``);
    the next two are the fused attention kernels the K/V exchange overlaps;
    the sixth what per-op selective recomputation re-runs: the forward's elementwise and
    memory-bound operators and ``op_shares`` (:func:`op_recompute_shares`) of its GEMMs
    (0 without ``op_shares``). ``recompute_modules``: the selective recomputation's
    modules (``LayerGraph.selective``; None: ``core_attn``, the third as above), whose
    forward operators the third sums. ``priced``: {graph: intra-op latencies} already
    priced, or None; ``tp_overlap``: :func:`op_seconds_rows`'."""
    priced = priced or {}
    fs, findex = op_seconds_rows(layer.forward, pricer, rp, node_size, t, fp8_rate,
                                 priced.get(layer.forward), tp_overlap)
    bs, bindex = op_seconds_rows(layer.backward, pricer, rp, node_size, t, fp8_rate,
                                 priced.get(layer.backward), tp_overlap)
    for sec, g in ((fs, layer.forward), (bs, layer.backward)):
        sec[_graph_static(g)[3]] = 0.0
    core = np.zeros(fs.shape[1])
    rerun = (ATTENTION_CORE + ("flash_attn",) if recompute_modules is None
             else layer.selective(recompute_modules)[0])
    for n in rerun:
        if n in findex:
            core = core + fs[findex[n]]
    zero = np.zeros(fs.shape[1])
    flash_f = fs[findex["flash_attn"]].copy() if "flash_attn" in findex else zero
    flash_b = bs[bindex["flash_attn.bwd"]].copy() if "flash_attn.bwd" in bindex else zero
    op = np.zeros(fs.shape[1])
    if op_shares is not None:
        g = layer.forward
        for i, name in enumerate(g.names):
            if g.kind[i] == graph.KIND_GEMM:
                share = op_shares.get(name, 0.0)
                if share:
                    op = op + share * fs[i]
            elif g.kind[i] == graph.KIND_VECTOR:
                op = op + fs[i]
    return (np.ascontiguousarray(fs.T).sum(axis=1), np.ascontiguousarray(bs.T).sum(axis=1), core,
            flash_f, flash_b, op)


def op_stash(layer, shares) -> int:
    """Bytes one layer keeps for its backward under per-op selective checkpointing
    (:func:`op_recompute_shares`): its checkpointed input (``stash("full")``), the outputs
    of the matmuls it saves (each GEMM's output bytes less the share re-run) and of its
    fused attention kernel; what the policy re-runs (elementwise outputs, the other
    matmuls' outputs) is not kept. At most the layer's stash without recomputation."""
    g = layer.forward
    kept = layer.stash("full")
    for i, name in enumerate(g.names):
        if g.kind[i] == graph.KIND_GEMM:
            kept += int(round((1.0 - shares.get(name, 0.0)) * int(g.bytes_out[i])))
        elif name == "flash_attn":
            kept += int(g.bytes_out[i])
    return min(kept, layer.stash("none"))


def group_collective_bytes(layer):
    """(bytes of each all-to-all, all-to-alls forward, backward, K/V exchange bytes forward,
    backward) of one layer kind: ``bytes_in`` of its all-to-all and point-to-point ring
    exchange operators (``OpGraph.collective``; one rank's; 0 where there are none)."""
    a2a = set()
    counts = [0, 0]
    ring = [0, 0]
    for k, g in enumerate((layer.forward, layer.backward)):
        for i in range(g.n_ops):
            if g.collective[i] == graph.COLL_ALL_TO_ALL:
                a2a.add(int(g.bytes_in[i]))
                counts[k] += 1
            elif g.collective[i] == graph.COLL_P2P:
                ring[k] += int(g.bytes_in[i])
    if len(a2a) > 1:
        raise AssertionError(f"the all-to-alls of one {layer.kind} differ in size: {sorted(a2a)}")
    return (a2a.pop() if a2a else 0), counts[0], counts[1], ring[0], ring[1]


def fp8_weight_bytes(layer, experts=False) -> int:
    """Bytes of Transformer Engine's FP8 weight copies of one layer slice under
    ``dtype="fp8"`` (``precision.MEMORY_BYTES_PER_PARAM["fp8"]["fp8_weight"]`` per weight of
    the FP8 GEMMs: K·N of each forward linear layer, times the batch of a grouped expert
    GEMM), of the routed experts' GEMMs (``experts``) or of the others; 0 for a 16-bit
    graph."""
    g = layer.forward
    per_param = precision.MEMORY_BYTES_PER_PARAM[g.dtype]["fp8_weight"]
    if not per_param:
        return 0
    n = sum(int(g.dims[i, 0]) * int(g.dims[i, 2]) * int(g.dims[i, 3])
            for i, name in enumerate(g.names)
            if precision.is_fp8_gemm(name) and name.startswith("expert_") == experts)
    return per_param * n


def mtp_kind(m_spec) -> tuple:
    """(kind index, count) of the multi-token-prediction layers the last stage runs after
    its own (``ModelSpec.mtp_layers`` layers of the kind of the model's last layer, in
    ``graph.block_kind_names`` order); (0, 0) without."""
    n = int(m_spec.mtp_layers or 0)
    if not n:
        return 0, 0
    last = graph.layer_kind_names(m_spec)[-1]
    return graph.block_kind_names(m_spec).index(last), n


def kind_counts(m_spec) -> list:
    """Layers of each transformer-layer kind, in ``graph.block_kind_names`` order, the
    multi-token-prediction layers included."""
    names = graph.layer_kind_names(m_spec)
    out = [names.count(k) for k in graph.block_kind_names(m_spec)]
    q, n = mtp_kind(m_spec)
    if n:
        out[q] += n
    return out


def kind_prefix(m_spec) -> np.ndarray:
    """(n_kinds·(L + 1),) int64: row k (``graph.block_kind_names`` order) counts the
    layers of kind k among layers 0..i−1, the step kernels' ``kind_prefix``."""
    names = graph.layer_kind_names(m_spec)
    rows = []
    for k in graph.block_kind_names(m_spec):
        flags = np.array([n == k for n in names], dtype=np.int64)
        rows.append(np.concatenate([[0], np.cumsum(flags)]))
    return np.ascontiguousarray(np.concatenate(rows), dtype=np.int64)


def plan_records(p, t, d, cp, ep, v, m, n_layers, zero, ogr, recompute, sp,
                 precision, grad_reduce_dtype="fp32", opg=False, reshard=True,
                 acct=False, optimizer="adam", optimizer_state_dtype="fp32",
                 moe_dispatcher="alltoall", mp=0, master_weights="separate") -> np.ndarray:
    """``step._kernels.PLAN`` records of plans given as scalars or equal-length arrays
    (``recompute`` a mode name, ``precision`` a datatype: the optimizer's bytes per
    parameter, its kernels and its tiny all-reduces follow from them;
    ``grad_reduce_dtype`` the gradient buffer's and reduction's bytes per parameter, and
    the optimizer's copy of a 16-bit buffer to fp32 main gradients; ``opg`` the overlap of
    the parameter all-gathers, ``reshard`` ZeRO-3's resharding after the forward, ``acct``
    the pipeline split counting the embedding and loss as layers; ``optimizer`` and
    ``optimizer_state_dtype`` the state and HBM bytes per parameter, ``_optim``: the
    embedding and head always run Adam; ``moe_dispatcher`` "alltoall" (Megatron-Core's) or
    "deepep"; ``mp`` the microbatches one pipeline schedule runs, 0 = all m (the knob
    ``pipeline_microbatches``); ``master_weights`` "separate" (16-bit weights beside the
    optimizer's fp32 master copy) or "params" (the fp32 parameters are the master weights,
    PyTorch FSDP2's: ``_optim``))."""
    cols = np.broadcast_arrays(p, t, d, cp, ep, v, m, n_layers, zero, ogr, sp, opg, reshard,
                               acct, mp)
    out = np.zeros(cols[0].shape, dtype=kern.PLAN)
    for name, col in zip(("p", "t", "d", "cp", "ep", "v", "m", "n_layers", "zero", "ogr",
                          "sp", "opg", "reshard", "acct", "mp"), cols):
        out[name] = col
    out["rec_mode"] = RECOMPUTE_CODES[recompute]
    params = _plan.check("master_weights", master_weights) == "params"
    # "params": no 16-bit gradient buffer to copy, no master copy, no model-weight copy
    copy = -_optim.PARAMS_STEP_SAVED_BYTES if params \
        else OPTIMIZER_GRAD_COPY_BYTES[grad_reduce_dtype]
    master = _optim.MASTER_BYTES if params else 0
    out["opt_bytes"] = _optim.hbm_bytes(optimizer, optimizer_state_dtype, precision) + copy
    out["opt_bytes_eh"] = _optim.hbm_bytes("adam", optimizer_state_dtype, precision) + copy
    out["state_bytes"] = _optim.state_bytes(optimizer, optimizer_state_dtype) - master
    out["state_bytes_eh"] = _optim.state_bytes("adam", optimizer_state_dtype) - master
    out["dispatch"] = MOE_DISPATCHERS[moe_dispatcher]
    out["opt_kernels"] = _optim.kernels(optimizer, precision) + (
        _optim.kernels("adam", precision) if _optim.OPTIMIZERS[optimizer].matrices else 0.0)
    out["n_tiny"] = 2 if precision == "fp16" else 1
    out["grad_bytes"] = GRAD_REDUCE_BYTES[grad_reduce_dtype]
    out["w_bytes"] = _optim.PARAMS_WEIGHT_BYTES if params else kern.WEIGHT_BYTES
    out["g_bytes"] = _optim.PARAMS_GRAD_BYTES if params else out["grad_bytes"]
    return out


# the grids' checks (step._plans)

def _int_grid(name, values, lo, hi=None):
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo \
                or (hi is not None and x > hi):
            raise ValueError(f"{name} must hold integers in [{lo}, {hi if hi is not None else '∞'}],"
                             f" got {x!r}")
        if int(x) not in out:
            out.append(int(x))
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


def _bool_grid(name, values):
    out = []
    for x in values:
        if not isinstance(x, (bool, np.bool_)):
            raise ValueError(f"{name} must hold booleans, got {x!r}")
        if bool(x) not in out:
            out.append(bool(x))
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out
