"""The whole training step of a fixed plan as Megatron-LM runs it (docs/design.md; issue 13).

:func:`training_step` prices one iteration (one global batch) of a fixed plan — tensor
parallel t, pipeline parallel p, data parallel d, microbatch b, global batch B,
recomputation none/full — on one architecture row with the calibrated operator model
(``phaze.cost.op_latencies(..., model="calibrated")``), and breaks down the memory of
each GPU. It is the model ``phaze validate`` holds against published runs; the search
still uses the study's model (its placement DP integration comes later).

Every number below is in SI units (seconds, bytes). Sources are the parameter sheet
``docs/fidelity-sources.md`` (§ given in the comments); no parameter here was set to
make an end-to-end row match.

Layer times: a sum of kernels, not a multi-core schedule
--------------------------------------------------------
A GPU rank runs Megatron-LM's kernels on one CUDA stream: each GEMM, fused
elementwise kernel and NCCL collective occupies the whole chip (all SMs) and the next
kernel starts when it ends (tensor-parallel all-reduces are synchronous in the
Megatron versions of the published runs). ``phaze.schedule``'s model — operators on
separate cores overlapping in time — does not describe that stream, so the layer time
here is the plain sum of the operators' intra-op calibrated latencies (each already
carries its kernel launch gap, ``launch_s``). For a template (multi-core
hypothetical) row this sum is an upper bound of its certified schedule; this module
is meant for GPU presets, where it is the honest model.

The step (1F1B, Narayanan et al. 2021 §2.2.1; sheet §5.4)
----------------------------------------------------------
- Stages as Megatron builds them: the L transformer layers split evenly over p
  (Megatron-LM asserts L divisible by p), the embedding on the first stage, the head
  (final norm, logits, loss) on the last.
- Per microbatch per stage: forward f_r and backward b_r = sums of the stage's layer
  times; full recomputation re-runs each transformer layer's forward before its
  backward (the embedding and head are not checkpointed), so b_r grows by the
  stage's block forwards.
- Pipeline point-to-point (stage r, per microbatch): Megatron's steady-state calls
  ``send_forward_recv_backward`` and ``send_backward_recv_forward`` each move one
  activation (or gradient) tensor; an end stage makes one such call, a middle stage
  two. With t > 1, Megatron's scatter/gather optimisation (Narayanan §4.1, default in
  those versions) sends 2·b·s·h/t bytes per GPU over the boundary's tier
  (``cost.p2p_seconds``) and all-gathers the 2·b·s·h bytes over the t ranks inside the
  node (ring, ``(t−1)/t`` of the bytes).
- Slot of stage r: f_r + b_r + its transfers. Iteration pipeline time (Narayanan eq. 1
  with heterogeneous stages): (m + p − 1) · max_r slot_r, m = B / (b·d); the bubble is
  the (p − 1) slots.
- Rank layout (Megatron-LM's default): tensor-parallel ranks fastest, then data
  parallel, then pipeline: global rank = r·(t·d) + j·t + i for stage r, data-parallel
  index j, tensor-parallel index i; node = rank // node_size. A stage boundary crosses
  nodes when its two ranks lie in different nodes (always when t·d ≥ node_size).
- Data-parallel gradient all-reduce after the last backward, not overlapped (sheet
  §5.3): fp32 main gradients, 4 B per parameter of the stage's slice, ring over the d
  ranks with stride t (between nodes when they span several nodes). With p > 1 the
  tied word-embedding gradients are all-reduced between the first and last stage
  (sheet §5.3, ``_allreduce_word_embedding_grads``).
- Optimizer step (sheet §5.2): memory-bound, ``OPTIMIZER_BYTES_PER_PARAM`` bytes of
  HBM traffic per local parameter over ``hbm_efficiency`` · HBM bandwidth, its
  multi-tensor kernels' launch gaps, and two tiny all-reduces over the model-parallel
  group (grad norm; found-inf with fp16 loss scaling) that cost their latency.
- Collectives priced here (not by ``op_latencies``, whose group is contiguous):
  NCCL's ring α–β form with the row's efficiency set, the same rule as
  ``phaze.cost``'s calibrated collectives: all-reduce
  ``α + 2(n−1)/n · S/(η·BW)``, all-gather ``α + (n−1)/n · S/(η·BW)``, with
  α = coll_latency_s + (steps − x)·link_step_s + x·net_step_s, x = ring steps crossing
  nodes, η·BW of the slowest tier the ring crosses.

Memory per GPU (bytes; sheet §5.1, §5.5)
-----------------------------------------
weights 2 B, fp32 main gradients 4 B, optimizer state 12 B (fp32 master weight, Adam m
and v) per parameter of the stage's slice — 18 B/param, as Korthikanti Figure 1 counts;
activations of the microbatches in flight under 1F1B: stage r holds min(p − r, m)
microbatches (the first stage p), each L/p transformer layers of
``graph``'s op-by-op stash (Korthikanti Table 2: s·b·h·(10 + 24/t + 5·a·s/(h·t))) without
recomputation, or the 2·s·b·h-byte layer input with full recomputation; the embedding
and head stashes separately (``activations_other``); ``workspace``: the recomputed
activations of one layer during its backward under full recomputation (allocator
caches, NCCL and cuBLAS buffers are not modelled).

Not modelled yet (a :class:`StepResult` with ``status="not_modelled"`` and the reason):
interleaved 1F1B (virtual_stages > 1), sequence parallelism, selective recomputation —
the strategy-space issue adds them.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import cost, graph, models
from .arch import efficiency as _efficiency
from .arch import presets
from .arch import validate as _validate_archs

__all__ = ["OPTIMIZER_BYTES_PER_PARAM", "StepBreakdown", "MemoryBreakdown", "StepResult",
           "training_step", "ring_allreduce_seconds", "ring_allgather_seconds", "stage_layers"]

#: Bytes per parameter held per GPU (sheet §5.1; Megatron-LM docs/api-guide/dist_optimizer.md,
#: bf16/fp16 parameters with fp32 main gradients, non-distributed optimizer: 18 B/param).
WEIGHT_BYTES_PER_PARAM = 2
GRAD_BYTES_PER_PARAM = 4
OPTIMIZER_STATE_BYTES_PER_PARAM = 12   # fp32 master weight 4 + Adam m 4 + Adam v 4

#: HBM bytes moved per parameter by Megatron's mixed-precision Adam step (sheet §5.2, [D]
#: from megatron/core/optimizer/optimizer.py): unscale + inf check 8 (fp16 only), grad norm 4,
#: fused Adam 28, master → model copy 6, zero grads 4 = 50 (fp16), 42 (bf16, no loss scaler).
OPTIMIZER_BYTES_PER_PARAM = {"fp16": 50, "bf16": 42}
#: Multi-tensor kernels the step launches (sheet §5.2 table rows, clip excluded): unscale
#: (fp16), norm, Adam, copy, zero.
_OPTIMIZER_KERNELS = {"fp16": 5, "bf16": 4}

RECOMPUTE = ("none", "full", "selective")


@dataclasses.dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one iteration and its parts (SI units).

    ``total_s`` = ``pipeline_s`` + ``dp_allreduce_s`` + ``embedding_allreduce_s`` +
    ``optimizer_s``; ``pipeline_s`` = ``steady_s`` + ``bubble_s`` = (m + p − 1)·``slot_s``.
    Per microbatch of the critical (slowest) stage: ``forward_s``, ``backward_s`` (without
    the recomputation), ``recompute_s`` (the re-run forwards), ``p2p_s`` (its transfers);
    ``slot_s`` is their sum.
    """

    total_s: float
    pipeline_s: float
    steady_s: float
    bubble_s: float
    dp_allreduce_s: float
    embedding_allreduce_s: float
    optimizer_s: float
    slot_s: float
    forward_s: float
    backward_s: float
    recompute_s: float
    p2p_s: float
    microbatches: int
    critical_stage: int


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes held by one GPU of one pipeline stage (sheet §5.1, §5.5).

    ``weights`` + ``gradients`` + ``optimizer_state`` are the stage slice's parameters at
    2 + 4 + 12 B; ``activations`` the transformer layers' stash of the microbatches in
    flight (``in_flight``); ``activations_other`` the embedding's and head's stashes;
    ``workspace`` the transient modelled (module docstring). ``layer_param_state`` is
    weights + gradients + optimizer state of the transformer layers alone (Korthikanti
    Figure 1's "parameters and optimizer state"). ``total`` sums all but that.
    """

    stage: int
    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    activations_other: int
    workspace: int
    in_flight: int
    layer_param_state: int
    limit: int

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer_state + self.activations
                + self.activations_other + self.workspace)

    @property
    def fits(self) -> bool:
        return self.total <= self.limit


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One plan's step: ``status`` "ok" | "not_modelled" | "infeasible" with ``reason``;
    ``time_s`` (inf unless ok), ``breakdown`` (:class:`StepBreakdown` or None), ``memory``
    (one :class:`MemoryBreakdown` per stage, or ()), ``plan`` (the inputs)."""

    status: str
    reason: str
    time_s: float
    breakdown: object
    memory: tuple
    plan: dict

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def peak_memory(self):
        """The stage memory with the largest total (None unless ok)."""
        return max(self.memory, key=lambda mb: mb.total) if self.memory else None


def stage_layers(n_layers: int, p: int) -> list:
    """Transformer layers per stage as Megatron-LM builds them (L divisible by p): [L/p]·p."""
    if n_layers % p:
        raise ValueError(f"Megatron-LM needs the transformer layers ({n_layers}) divisible by "
                         f"the pipeline stages ({p})")
    return [n_layers // p] * p


# ---------------------------------------------------------------------------
# collectives over arbitrary rank sets (NCCL ring α–β, the calibrated rule of phaze.cost)
# ---------------------------------------------------------------------------

def _knob(row, name) -> float:
    """One knob of a one-row architecture array (or a record) as a float."""
    return float(np.asarray(row[name]).reshape(-1)[0])


def _ring(ranks, node_size):
    ranks = list(ranks)
    n = len(ranks)
    nodes = len({r // node_size for r in ranks})
    crossing = 2 * (nodes - 1) if nodes > 1 else 0
    return n, nodes, crossing


def ring_allreduce_seconds(nbytes, ranks, row, eff) -> float:
    """Ring all-reduce of ``nbytes`` per rank over global ``ranks`` (s); 0 for one rank.

    α = coll_latency_s + (2(n−1) − x)·link_step_s + x·net_step_s (x = 2·(nodes − 1) steps
    cross a node boundary), β = 2(n−1)/n · bytes / (η·BW) on the between-node tier when
    the ring spans nodes, else the in-node link (``phaze.cost`` module docstring).
    """
    n, nodes, x = _ring(ranks, int(_knob(row, "node_size")))
    if n <= 1:
        return 0.0
    alpha = eff.coll_latency_s + (2 * (n - 1) - x) * eff.link_step_s + x * eff.net_step_s
    bw = (eff.net_efficiency * _knob(row, "net_gb_per_s") if nodes > 1
          else eff.link_efficiency * _knob(row, "link_gb_per_s")) * 1e9
    return alpha + 2.0 * (n - 1) / n * float(nbytes) / bw


def ring_allgather_seconds(nbytes_total, ranks, row, eff) -> float:
    """Ring all-gather ending with ``nbytes_total`` on every rank (s): α with n − 1 steps,
    β = (n−1)/n · bytes / (η·BW), tiers as :func:`ring_allreduce_seconds`."""
    n, nodes, _ = _ring(ranks, int(_knob(row, "node_size")))
    if n <= 1:
        return 0.0
    x = nodes - 1 if nodes > 1 else 0
    alpha = eff.coll_latency_s + (n - 1 - x) * eff.link_step_s + x * eff.net_step_s
    bw = (eff.net_efficiency * _knob(row, "net_gb_per_s") if nodes > 1
          else eff.link_efficiency * _knob(row, "link_gb_per_s")) * 1e9
    return alpha + (n - 1) / n * float(nbytes_total) / bw


def _rank(stage, dp, tp, t, d):
    """Megatron-LM's default order: tensor-parallel fastest, then data, then pipeline."""
    return stage * t * d + dp * t + tp


# ---------------------------------------------------------------------------
# the step
# ---------------------------------------------------------------------------

def _arch_and_efficiency(arch, efficiency):
    if isinstance(arch, str):
        row = presets.get(arch)
        eff = efficiency if efficiency is not None else arch
    else:
        row = _validate_archs(arch)
        if row.shape[0] != 1:
            raise ValueError(f"arch must be one architecture row, got {row.shape[0]}")
        eff = efficiency if efficiency is not None else _efficiency.for_rows(row)
    if isinstance(eff, str):
        eff = _efficiency.get(eff)
    elif isinstance(eff, np.ndarray):
        eff = _efficiency.Efficiency(**{f: eff.reshape(-1)[f][0].item()
                                        for f in _efficiency.EFFICIENCY_DTYPE.names})
    elif not isinstance(eff, _efficiency.Efficiency):
        raise ValueError("efficiency must be None, a parameter-set name, an Efficiency or an "
                         f"EFFICIENCY_DTYPE row, got {type(eff).__name__}")
    return row, eff


def _layer_seconds(layer, row, eff):
    """(forward, backward) seconds of one layer kind, one microbatch: the sum of the
    operators' intra-op calibrated latencies (one kernel stream; module docstring)."""
    out = []
    for g in (layer.forward, layer.backward):
        _, intra = cost.op_latencies(g, row, model="calibrated", efficiency=eff)
        out.append(float(intra[:, 0].sum()))
    return tuple(out)


def _not(status, reason, plan):
    return StepResult(status=status, reason=reason, time_s=math.inf, breakdown=None, memory=(),
                      plan=plan)


def training_step(model, arch, *, tensor_parallel: int, pipeline_parallel: int,
                  data_parallel: int, microbatch: int, global_batch: int,
                  recompute: str = "full", virtual_stages: int = 1,
                  sequence_parallel: bool = False, precision: str = "bf16",
                  efficiency=None) -> StepResult:
    """One iteration of a fixed Megatron-LM plan on one architecture (module docstring).

    ``model``: zoo name or ``ModelSpec``; ``arch``: preset name or one ``ARCH_DTYPE`` row;
    t, p, d, ``microbatch`` b (samples) and ``global_batch`` B (samples; B divisible by
    b·d); ``recompute`` "none" | "full" (| "selective": not modelled yet);
    ``virtual_stages`` 1 (> 1: not modelled yet); ``sequence_parallel`` False (True: not
    modelled yet); ``precision`` "bf16" | "fp16" (fp16 adds the loss-scaler's unscale pass
    to the optimizer, sheet §5.2); ``efficiency``: the calibrated parameter set (None:
    the preset's own for a preset name, ``efficiency.for_rows`` for a row).

    Returns a :class:`StepResult`; bad arguments raise ``ValueError``.
    """
    from ._validate import positive_int

    m_spec = models.get(model) if isinstance(model, str) else model
    if not isinstance(m_spec, models.ModelSpec):
        raise ValueError(f"model must be a ModelSpec or a zoo name, got {type(model).__name__}")
    t = positive_int("tensor_parallel", tensor_parallel)
    p = positive_int("pipeline_parallel", pipeline_parallel)
    d = positive_int("data_parallel", data_parallel)
    b = positive_int("microbatch", microbatch)
    B = positive_int("global_batch", global_batch)
    v = positive_int("virtual_stages", virtual_stages)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    if precision not in OPTIMIZER_BYTES_PER_PARAM:
        raise ValueError(f"precision must be 'bf16' or 'fp16', got {precision!r}")
    row, eff = _arch_and_efficiency(arch, efficiency)
    plan = dict(model=m_spec.name, tensor_parallel=t, pipeline_parallel=p, data_parallel=d,
                microbatch=b, global_batch=B, recompute=recompute, virtual_stages=v,
                sequence_parallel=bool(sequence_parallel), precision=precision)

    missing = []
    if v > 1:
        missing.append(f"interleaved 1F1B (virtual_stages={v})")
    if sequence_parallel:
        missing.append("sequence parallelism")
    if recompute == "selective":
        missing.append("selective recomputation")
    if missing:
        return _not("not_modelled", "not modelled yet: " + ", ".join(missing), plan)
    if B % (b * d):
        return _not("infeasible", f"global batch {B} is not a multiple of microbatch × data "
                                  f"parallel = {b * d}", plan)
    if not m_spec.valid_tensor_parallel(t):
        return _not("infeasible", f"tensor parallel {t} does not divide the heads "
                                  f"({m_spec.heads})", plan)
    if t > int(row["node_size"][0]):
        return _not("not_modelled", f"not modelled yet: tensor parallel {t} wider than a node "
                                    f"({int(row['node_size'][0])})", plan)
    try:
        per_stage = stage_layers(m_spec.n_layers, p)
    except ValueError as exc:
        return _not("infeasible", str(exc), plan)
    m = B // (b * d)

    mg = graph.build_layers(m_spec, b, t)
    emb, block, head = mg.layers
    e = mg.layers[1].forward.bytes_per_element
    times = {L.kind: _layer_seconds(L, row, eff) for L in mg.layers}
    s, h = m_spec.seq_len, m_spec.hidden

    # -- pipeline transfers (per microbatch; scatter/gather when t > 1) --------------
    act_bytes = e * b * s * h                      # one activation (or gradient) tensor

    def transfer(stage_a, stage_b):
        """Seconds of one boundary crossing between two adjacent stages (worst rank)."""
        worst = 0.0
        nodes = int(row["node_size"][0])
        for j in range(d):
            inter = any((_rank(stage_a, j, i, t, d) // nodes) != (_rank(stage_b, j, i, t, d) // nodes)
                        for i in range(t))
            send = float(cost.p2p_seconds(act_bytes / t, row, inter_node=inter,
                                          model="calibrated", efficiency=eff)[0, 0])
            gather = ring_allgather_seconds(act_bytes, [_rank(stage_b, j, i, t, d) for i in range(t)],
                                            row, eff)
            worst = max(worst, send + gather)
        return worst

    slots = []
    for r in range(p):
        n_blocks = per_stage[r]
        f = n_blocks * times["block"][0]
        bw = n_blocks * times["block"][1]
        if r == 0:
            f += times["embedding"][0]
            bw += times["embedding"][1]
        if r == p - 1:
            f += times["head"][0]
            bw += times["head"][1]
        rec = n_blocks * times["block"][0] if recompute == "full" else 0.0
        comm = 0.0
        if r > 0:
            comm += transfer(r - 1, r)
        if r < p - 1:
            comm += transfer(r, r + 1)
        slots.append((f + bw + rec + comm, f, bw, rec, comm))
    crit = max(range(p), key=lambda r: slots[r][0])
    slot = slots[crit][0]
    steady, bubble = m * slot, (p - 1) * slot

    # -- parameters per stage (elements of one tensor-parallel slice) ----------------
    def stage_params(r):
        n = per_stage[r] * block.param_bytes
        if r == 0:
            n += emb.param_bytes
        if r == p - 1:
            n += head.param_bytes
        return n // e

    # -- data-parallel gradient all-reduce, fp32 main grads (sheet §5.3) --------------
    dp_s = 0.0
    for r in range(p):
        ranks = [_rank(r, j, 0, t, d) for j in range(d)]
        dp_s = max(dp_s, ring_allreduce_seconds(GRAD_BYTES_PER_PARAM * stage_params(r), ranks,
                                                row, eff))
    emb_s = 0.0
    if p > 1:
        word = -(-m_spec.vocab // t) * m_spec.embed_width
        emb_s = ring_allreduce_seconds(GRAD_BYTES_PER_PARAM * word,
                                       [_rank(0, 0, 0, t, d), _rank(p - 1, 0, 0, t, d)], row, eff)

    # -- optimizer (sheet §5.2) ----------------------------------------------------------
    hbm = eff.hbm_efficiency * float(row["hbm_gb_per_s"][0]) * 1e9
    mp_ranks = [_rank(r, 0, i, t, d) for r in range(p) for i in range(t)]
    tiny = ring_allreduce_seconds(4, mp_ranks, row, eff)
    n_tiny = 2 if precision == "fp16" else 1
    opt_s = max(stage_params(r) * OPTIMIZER_BYTES_PER_PARAM[precision] / hbm for r in range(p)) \
        + _OPTIMIZER_KERNELS[precision] * eff.launch_s + n_tiny * tiny

    total = steady + bubble + dp_s + emb_s + opt_s
    bd = StepBreakdown(total_s=total, pipeline_s=steady + bubble, steady_s=steady,
                       bubble_s=bubble, dp_allreduce_s=dp_s, embedding_allreduce_s=emb_s,
                       optimizer_s=opt_s, slot_s=slot, forward_s=slots[crit][1],
                       backward_s=slots[crit][2], recompute_s=slots[crit][3],
                       p2p_s=slots[crit][4], microbatches=m, critical_stage=crit)

    # -- memory per stage (sheet §5.1, §5.5) ------------------------------------------
    per_layer_act = block.stash_bytes if recompute == "none" else e * b * s * h
    limit = int(float(row["hbm_gib"][0]) * 2 ** 30)
    memory = []
    for r in range(p):
        n_par = stage_params(r)
        in_flight = min(p - r, m)
        other = 0
        if r == 0:
            other += in_flight * emb.stash_bytes
        if r == p - 1:
            other += in_flight * head.stash_bytes
        layer_state = per_stage[r] * (block.param_bytes // e) * (
            WEIGHT_BYTES_PER_PARAM + GRAD_BYTES_PER_PARAM + OPTIMIZER_STATE_BYTES_PER_PARAM)
        memory.append(MemoryBreakdown(
            stage=r, weights=WEIGHT_BYTES_PER_PARAM * n_par, gradients=GRAD_BYTES_PER_PARAM * n_par,
            optimizer_state=OPTIMIZER_STATE_BYTES_PER_PARAM * n_par,
            activations=in_flight * per_stage[r] * per_layer_act, activations_other=other,
            workspace=block.stash_bytes if recompute == "full" else 0,
            in_flight=in_flight, layer_param_state=layer_state, limit=limit))
    return StepResult(status="ok", reason="", time_s=total, breakdown=bd, memory=tuple(memory),
                      plan=plan)
