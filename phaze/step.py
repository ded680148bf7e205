"""The whole training step of a fixed plan as Megatron-LM runs it (docs/design.md; issue 13).

:func:`training_step` prices one iteration (one global batch) of a fixed plan — tensor
parallel t, pipeline parallel p, data parallel d, microbatch b, global batch B,
recomputation none/selective/full and the strategy knobs below — on one architecture row with the calibrated operator model
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
carries its kernel launch gap, ``launch_s``). The graphs are built with
``kernels="megatron"`` (``phaze.graph.build_layers``): the kernels Megatron-LM launches
— the attention dropout after the fused scale-mask-softmax and the bias + GeLU after
FC1 as their own memory-bound kernels — not the study's fusions. For a template (multi-core
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

Strategy knobs (issue 14; fixed plans — the search does not use them yet)
-------------------------------------------------------------------------
- ``recompute``: "none"; "full" (each transformer layer's forward re-run before its
  backward, the 2·s·b·h layer input stashed); "selective" (Korthikanti et al. 2022 §5:
  the attention core — QKᵀ, scale-mask-softmax-dropout, ·V — re-run before the
  backward, its 5·a·s²·b/t bytes not stashed; workspace: one layer's core). Stashes
  per mode come from ``graph`` (:meth:`phaze.graph.LayerGraph.stash`).
- ``sequence_parallel``: the graph's reduce-scatter/all-gather form (``graph``
  docstring); each reduce-scatter and all-gather is priced here as a ring of n − 1
  steps over the in-node tensor-parallel group (:func:`ring_allgather_seconds`); the
  backward re-gathers of the norm outputs run concurrently with the input-gradient
  GEMMs (Megatron's async all-gather), so only max(0, gather − GEMMs) counts. The
  pipeline boundary tensor is already split over the t ranks: no all-gather after the
  scatter/gather send. At t = 1 a no-op (Megatron-LM switches it off): the plan records
  ``sequence_parallel_effective``.
- ``flash_attention``: the graph's fused attention kernel (no scores stashed, the
  backward recomputes them). The calibrated cost prices each fused kernel as a GEMM
  with the FLOPs of QKᵀ and P·V (backward: the five BMMs) and a softmax epilogue; the
  GEMM's own tile-traffic rule still applies to it, which for GPT-3 at t = 8 on the
  A100 leaves it compute-bound (≈ 180 TFLOP/s; 0.14 ms forward against 0.34 ms for the
  unfused scores–softmax–context kernels). With flash, "selective" has nothing left to
  recompute and equals "none" in memory and time.
- ``virtual_stages`` v (interleaved 1F1B, Narayanan et al. 2021 §2.2.2; sheet §5.4):
  device r runs model chunks (virtual stages) c·p + r, c = 0..v−1, of L/(p·v) layers
  each; the embedding sits on virtual stage 0, the head on the last. Per microbatch a
  device's slot is the sum of its chunks' work plus one transfer per chunk boundary it
  touches (2v − 1 for an end device, 2v for a middle one: v× plain 1F1B's). Pipeline
  time (m + (p − 1)/v) · slot — the simulated Megatron order gives exactly this for
  equal chunks (tests/naive.py). In flight on device r: min(2(p − r − 1) + (v − 1)·p + 1,
  m·v) chunk-microbatches (Megatron's warm-up; the first stage L·(1 + (p−1)/(p·v))
  layers' worth); ``MemoryBreakdown.in_flight`` counts chunk-microbatches when v > 1.
  Megatron needs p ≥ 2, L divisible by p·v and m divisible by p; other plans are
  "infeasible" with that reason.
- ``zero_stage`` (over the d data-parallel ranks; Megatron's distributed optimizer = 1):
  memory — optimizer state /d from stage 1, fp32 gradients /d from 2, 16-bit weights
  /d at 3 (plus two layers' gathered weights as workspace); time — stage 0 all-reduces
  the fp32 gradients after the last backward; stage 1 reduce-scatters them there and
  all-gathers the updated 16-bit parameters after the optimizer, which updates N/d
  parameters; stage 2 reduce-scatters each microbatch's gradients at the end of its
  backward (DeepSpeed's per-micro-step reduction; in the slot) and all-gathers the
  parameters after the optimizer; stage 3 as 2, without the final all-gather but with
  an all-gather of each layer's parameters before its forward, its backward and (full
  recomputation) its recomputed forward, every microbatch. ZeRO at d = 1 is evaluated
  as what it is: no sharding, no traffic (= stage 0). ``plan["trainers"]`` says which
  trainer can launch the plan: Megatron-LM for stages 0–1, DeepSpeed for v = 1 and
  stages 0–1, or 2–3 without pipeline parallelism.
- ``overlap_grad_reduce`` (bucketed gradient reduction during the backward): the
  gradient reduction of stage r (all-reduce for ZeRO 0, reduce-scatter for 1; per
  microbatch for 2–3) counts only for what exceeds the backward (with recomputation)
  of one microbatch on that stage: exposed = max(0, reduction − backward_r). The
  parameter all-gather after the optimizer stays exposed.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os

import numpy as np

from . import cost, graph, models
from .arch import efficiency as _efficiency
from .arch import resolve_chip
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


def _ring_seconds(nbytes, ranks, row, eff, passes) -> float:
    """A ring collective over global ``ranks`` that goes ``passes`` times round the ring
    (2: all-reduce = reduce-scatter + all-gather; 1: one of them), seconds; 0 for one rank.

    α = coll_latency_s + (passes·(n−1) − x)·link_step_s + x·net_step_s, where
    x = passes·(nodes − 1) steps cross a node boundary; β = passes·(n−1)/n · bytes / (η·BW)
    on the between-node tier when the ring spans nodes, else the in-node link
    (``phaze.cost`` module docstring).
    """
    ranks = list(ranks)
    n = len(ranks)
    if n <= 1:
        return 0.0
    node_size = int(_knob(row, "node_size"))
    nodes = len({r // node_size for r in ranks})
    x = passes * (nodes - 1)
    alpha = eff.coll_latency_s + (passes * (n - 1) - x) * eff.link_step_s + x * eff.net_step_s
    bw = (eff.net_efficiency * _knob(row, "net_gb_per_s") if nodes > 1
          else eff.link_efficiency * _knob(row, "link_gb_per_s")) * 1e9
    return alpha + passes * (n - 1) / n * float(nbytes) / bw


def ring_allreduce_seconds(nbytes, ranks, row, eff) -> float:
    """Ring all-reduce of ``nbytes`` per rank over global ``ranks`` (s): two passes."""
    return _ring_seconds(nbytes, ranks, row, eff, 2)


def ring_allgather_seconds(nbytes_total, ranks, row, eff) -> float:
    """Ring all-gather ending with ``nbytes_total`` on every rank (s): one pass."""
    return _ring_seconds(nbytes_total, ranks, row, eff, 1)


def _rank(stage, dp, tp, t, d):
    """Megatron-LM's default order: tensor-parallel fastest, then data, then pipeline."""
    return stage * t * d + dp * t + tp


# ---------------------------------------------------------------------------
# the step
# ---------------------------------------------------------------------------

def _arch_and_efficiency(arch, efficiency):
    if isinstance(arch, (str, os.PathLike)):  # a preset name or a chip file (its efficiency too)
        chip = resolve_chip(arch)
        row = chip.row
        eff = efficiency if efficiency is not None else chip.efficiency_set()
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


#: The backward all-gathers of sequence parallelism that Megatron-LM overlaps with an
#: input-gradient GEMM (Korthikanti et al. 2022 §4.2.2: the sharded norm output is
#: all-gathered again for the weight gradient while the input gradient is computed):
#: all-gather → the GEMMs it runs concurrently with.
_OVERLAPPED_GATHERS = {
    "allgather_ln1.bwd": ("q_proj.dX", "k_proj.dX", "v_proj.dX"),
    "allgather_ln2.bwd": ("fc1.dX", "gate_proj.dX", "up_proj.dX"),
}
#: The attention-core operators selective recomputation re-runs before the backward.
_ATTENTION_CORE = ("attn_scores", "softmax", "attn_dropout", "attn_context")


def _op_seconds(g, row, eff, t):
    """Seconds of each operator of ``g`` (one microbatch): intra-op calibrated latencies,
    with sequence parallelism's reduce-scatters and all-gathers priced by their own ring
    form (:func:`ring_allgather_seconds`: n − 1 steps of (n−1)/n of the full tensor over
    the in-node tensor-parallel group, ranks 0..t−1) instead of the half-size all-reduce
    the graph stores them as, and the overlapped backward all-gathers charged only for
    what exceeds the GEMMs they overlap (max(0, gather − GEMMs))."""
    _, intra = cost.op_latencies(g, row, model="calibrated", efficiency=eff)
    sec = intra[:, 0].astype(np.float64).copy()
    index = {n: i for i, n in enumerate(g.names)}
    for i, name in enumerate(g.names):
        if name.startswith(("reduce_scatter_", "allgather_")):
            sec[i] = ring_allgather_seconds(int(g.bytes_in[i]), range(t), row, eff)
    for name, partners in _OVERLAPPED_GATHERS.items():
        if name in index:
            i = index[name]
            busy = sum(sec[index[q]] for q in partners if q in index)
            sec[i] = max(0.0, sec[i] - busy)
    return sec, index


def _layer_seconds(layer, row, eff, t=1):
    """(forward, backward, attention core forward) seconds of one layer kind, one
    microbatch: the sums of the operators' calibrated latencies (one kernel stream;
    module docstring; :func:`_op_seconds`). The third is what selective recomputation
    re-runs (0 with flash attention, whose backward kernel already recomputes)."""
    fs, findex = _op_seconds(layer.forward, row, eff, t)
    bs, _ = _op_seconds(layer.backward, row, eff, t)
    core = sum(float(fs[findex[n]]) for n in _ATTENTION_CORE if n in findex)
    return float(fs.sum()), float(bs.sum()), core


def _not(status, reason, plan):
    return StepResult(status=status, reason=reason, time_s=math.inf, breakdown=None, memory=(),
                      plan=plan)


def _trainers(p, v, zero):
    """Which trainers can launch a plan: Megatron-LM (ZeRO 0, or 1 as its distributed
    optimizer; any p, v), DeepSpeed (ZeRO 0–3, but stages 2–3 refuse pipeline
    parallelism, and it has no interleaved schedule)."""
    out = []
    if zero <= 1:
        out.append("megatron-lm")
    if v == 1 and (zero <= 1 or p == 1):
        out.append("deepspeed")
    return tuple(out)


def training_step(model, arch, *, tensor_parallel: int, pipeline_parallel: int,
                  data_parallel: int, microbatch: int, global_batch: int,
                  recompute: str = "full", virtual_stages: int = 1,
                  sequence_parallel: bool = False, precision: str = "bf16",
                  flash_attention: bool = False, zero_stage: int = 0,
                  overlap_grad_reduce: bool = False, efficiency=None) -> StepResult:
    """One iteration of a fixed Megatron-LM plan on one architecture (module docstring).

    ``model``: zoo name or ``ModelSpec``; ``arch``: preset name or one ``ARCH_DTYPE`` row;
    t, p, d, ``microbatch`` b (samples) and ``global_batch`` B (samples; B divisible by
    b·d); ``recompute`` "none" | "selective" | "full"; ``virtual_stages`` v (interleaved
    1F1B when > 1); ``sequence_parallel``; ``flash_attention``; ``zero_stage`` 0–3;
    ``overlap_grad_reduce`` (module docstring, "Strategy knobs"); ``precision`` "bf16" |
    "fp16" (fp16 adds the loss-scaler's unscale pass to the optimizer, sheet §5.2);
    ``efficiency``: the calibrated parameter set (None: the preset's own for a preset
    name, ``efficiency.for_rows`` for a row).

    Returns a :class:`StepResult`; bad arguments raise ``ValueError``.
    """
    from ._validate import positive_int

    m_spec = models.resolve(model)
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
    if isinstance(zero_stage, bool) or not isinstance(zero_stage, (int, np.integer)) \
            or not 0 <= int(zero_stage) <= 3:
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    zero = int(zero_stage)
    row, eff = _arch_and_efficiency(arch, efficiency)
    # Sequence parallelism splits over the tensor-parallel group: at t = 1 it is a no-op
    # (Megatron-LM switches it off there), and the plan records what ran.
    sp = bool(sequence_parallel) and t > 1
    flash = bool(flash_attention)
    plan = dict(model=m_spec.name, tensor_parallel=t, pipeline_parallel=p, data_parallel=d,
                microbatch=b, global_batch=B, recompute=recompute, virtual_stages=v,
                sequence_parallel=bool(sequence_parallel), precision=precision,
                flash_attention=flash, zero_stage=zero,
                overlap_grad_reduce=bool(overlap_grad_reduce), sequence_parallel_effective=sp,
                trainers=_trainers(p, v, zero))

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
    if v > 1:
        # Megatron-LM's interleaved schedule (Narayanan et al. 2021 §2.2.2; sheet §5.4).
        if p == 1:
            return _not("infeasible", "interleaved 1F1B (virtual_stages > 1) needs pipeline "
                                      "parallelism (p ≥ 2)", plan)
        if m_spec.n_layers % (p * v):
            return _not("infeasible", f"interleaved 1F1B needs the transformer layers "
                                      f"({m_spec.n_layers}) divisible by p·v = {p * v}", plan)
        if m % p:
            return _not("infeasible", f"interleaved 1F1B needs the microbatches per pipeline "
                                      f"({m}) divisible by p = {p}", plan)
    if sp and m_spec.seq_len % t:
        return _not("infeasible", f"sequence parallelism needs the sequence ({m_spec.seq_len}) "
                                  f"divisible by tensor parallel {t}", plan)
    chunk_layers = m_spec.n_layers // (p * v)      # layers of one model chunk

    mg = graph.build_layers(m_spec, b, t, sequence_parallel=sp, flash_attention=flash,
                            kernels="megatron")
    emb, block, head = mg.layers
    e = mg.layers[1].forward.bytes_per_element
    times = {L.kind: _layer_seconds(L, row, eff, t) for L in mg.layers}
    s, h = m_spec.seq_len, m_spec.hidden

    # -- pipeline transfers (per microbatch; scatter/gather when t > 1) --------------
    act_bytes = e * b * s * h                      # one activation (or gradient) tensor

    # A send costs the same on every boundary of one tier: price each tier once.
    send_s = {x: float(cost.p2p_seconds(act_bytes / t, row, inter_node=x, model="calibrated",
                                        efficiency=eff)[0, 0]) for x in (False, True)}
    nodes = int(row["node_size"][0])

    @functools.lru_cache(maxsize=None)  # stage pairs recur (both sides, every virtual stage)
    def transfer(stage_a, stage_b):
        """Seconds of one boundary crossing between two adjacent stages (worst rank)."""
        worst = 0.0
        for j in range(d):
            inter = any((_rank(stage_a, j, i, t, d) // nodes) != (_rank(stage_b, j, i, t, d) // nodes)
                        for i in range(t))
            send = send_s[inter]
            # With sequence parallelism the boundary tensor is already split over the
            # t ranks (s/t tokens each): nothing to gather on the receiving side.
            gather = 0.0 if sp else ring_allgather_seconds(
                act_bytes, [_rank(stage_b, j, i, t, d) for i in range(t)], row, eff)
            worst = max(worst, send + gather)
        return worst

    def stage_params(r):
        n = per_stage[r] * block.param_bytes
        if r == 0:
            n += emb.param_bytes
        if r == p - 1:
            n += head.param_bytes
        return n // e

    def dp_ranks(r):
        return [_rank(r, j, 0, t, d) for j in range(d)]

    # ZeRO-3 all-gathers each layer's parameters (2 B each) over the data-parallel group
    # before its forward and again before its backward (and its recomputed forward under
    # full recomputation), every microbatch; the embedding and head likewise.
    def zero3_gathers(r):
        if zero < 3 or d == 1:
            return 0.0
        passes = 3 if recompute == "full" else 2
        blk = ring_allgather_seconds(WEIGHT_BYTES_PER_PARAM * (block.param_bytes // e) * d,
                                     dp_ranks(r), row, eff)
        sec = passes * per_stage[r] * blk
        for L, here in ((emb, r == 0), (head, r == p - 1)):
            if here:
                sec += 2 * ring_allgather_seconds(WEIGHT_BYTES_PER_PARAM * (L.param_bytes // e) * d,
                                                  dp_ranks(r), row, eff)
        return sec

    def grad_reduce_scatter(r):
        """Reduce-scatter of the stage's fp32 gradients over d (ZeRO ≥ 1) (s)."""
        return ring_allgather_seconds(GRAD_BYTES_PER_PARAM * stage_params(r), dp_ranks(r), row, eff)

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
        rec = 0.0
        if recompute == "full":
            rec = n_blocks * times["block"][0]
        elif recompute == "selective":
            rec = n_blocks * times["block"][2]
        comm = 0.0
        # Device r runs the model chunks (virtual stages) c·p + r, c = 0..v−1; each chunk
        # receives from the previous virtual stage and sends to the next (v× the transfers
        # of plain 1F1B; chunk boundaries p−1 → 0 wrap around the pipeline).
        for c in range(v):
            k = c * p + r
            if k > 0:
                comm += transfer((k - 1) % p, r)
            if k < p * v - 1:
                comm += transfer(r, (k + 1) % p)
        extra = zero3_gathers(r)
        if zero >= 2 and d > 1:
            # ZeRO-2/3 keep only their gradient shard: each microbatch's gradients are
            # reduce-scattered as its backward ends (DeepSpeed's per-micro-step reduction);
            # overlapped with that backward when overlap_grad_reduce.
            rs = grad_reduce_scatter(r)
            extra += max(0.0, rs - bw - rec) if overlap_grad_reduce else rs
        slots.append((f + bw + rec + comm + extra, f, bw, rec, comm))
    crit = max(range(p), key=lambda r: slots[r][0])
    slot = slots[crit][0]
    # Interleaving cuts the bubble to (p − 1)/v slots (Narayanan et al. 2021 §2.2.2).
    steady, bubble = m * slot, (p - 1) * slot / v

    # -- data-parallel gradient reduction, fp32 main grads (sheet §5.3) --------------
    # ZeRO 0: all-reduce after the last backward. ZeRO 1 (Megatron's distributed
    # optimizer): reduce-scatter there, then all-gather the updated 16-bit parameters
    # after the optimizer. ZeRO 2: the gradients were reduce-scattered per microbatch
    # (in the slot); the parameter all-gather remains. ZeRO 3: parameters stay sharded
    # (gathered per layer in the slot). overlap_grad_reduce: the end-of-step reduction
    # runs bucket by bucket during the last microbatch's backward, so only what exceeds
    # that backward (with its recomputation) on the stage is exposed.
    dp_s = 0.0
    for r in range(p):
        ranks = dp_ranks(r)
        if zero == 0:
            red = ring_allreduce_seconds(GRAD_BYTES_PER_PARAM * stage_params(r), ranks, row, eff)
        elif zero == 1:
            red = grad_reduce_scatter(r) if d > 1 else 0.0
        else:
            red = 0.0
        if overlap_grad_reduce:
            red = max(0.0, red - slots[r][2] - slots[r][3])
        if zero in (1, 2) and d > 1:
            red += ring_allgather_seconds(WEIGHT_BYTES_PER_PARAM * stage_params(r), ranks, row, eff)
        dp_s = max(dp_s, red)
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
    # ZeRO ≥ 1: each data-parallel rank updates its 1/d shard of the parameters.
    shard = d if zero >= 1 else 1
    opt_s = max(stage_params(r) / shard * OPTIMIZER_BYTES_PER_PARAM[precision] / hbm
                for r in range(p)) \
        + _OPTIMIZER_KERNELS[precision] * eff.launch_s + n_tiny * tiny

    total = steady + bubble + dp_s + emb_s + opt_s
    bd = StepBreakdown(total_s=total, pipeline_s=steady + bubble, steady_s=steady,
                       bubble_s=bubble, dp_allreduce_s=dp_s, embedding_allreduce_s=emb_s,
                       optimizer_s=opt_s, slot_s=slot, forward_s=slots[crit][1],
                       backward_s=slots[crit][2], recompute_s=slots[crit][3],
                       p2p_s=slots[crit][4], microbatches=m, critical_stage=crit)

    # -- memory per stage (sheet §5.1, §5.5) ------------------------------------------
    per_layer_act = block.stash(recompute)
    limit = int(float(row["hbm_gib"][0]) * 2 ** 30)
    # ZeRO shards over d: optimizer state from stage 1, gradients from 2, weights at 3.
    w_div, g_div, o_div = (d if zero >= 3 else 1), (d if zero >= 2 else 1), (d if zero >= 1 else 1)
    per_param = (WEIGHT_BYTES_PER_PARAM / w_div + GRAD_BYTES_PER_PARAM / g_div
                 + OPTIMIZER_STATE_BYTES_PER_PARAM / o_div)
    memory = []
    for r in range(p):
        n_par = stage_params(r)
        if v == 1:
            in_flight = min(p - r, m)
            layers_in_flight = in_flight * per_stage[r]
            ends_in_flight = in_flight
        else:
            # Megatron's interleaved warm-up on rank r: 2(p − r − 1) + (v − 1)·p chunk
            # forwards, then one more before the first backward (sheet §5.4); each chunk is
            # L/(p·v) layers — the first stage holds L·(1 + (p − 1)/(p·v)) layers' worth.
            in_flight = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)
            layers_in_flight = in_flight * chunk_layers
            # The embedding (chunk 0) and head (last chunk) are one chunk of v: their share
            # of the chunk-microbatches in flight.
            ends_in_flight = -(-in_flight // v)
        other = 0
        if r == 0:
            other += ends_in_flight * emb.stash_bytes
        if r == p - 1:
            other += ends_in_flight * head.stash_bytes
        layer_state = int(per_stage[r] * (block.param_bytes // e) * per_param)
        workspace = 0
        if recompute == "full":
            workspace = block.stash("none")         # one layer's recomputed activations
        elif recompute == "selective":
            workspace = block.stash("none") - block.stash("selective")   # its attention core
        if zero >= 3 and d > 1:
            # The gathered (unsharded) parameters of the layer running and the next one
            # being prefetched.
            workspace += 2 * WEIGHT_BYTES_PER_PARAM * (block.param_bytes // e)
        memory.append(MemoryBreakdown(
            stage=r, weights=int(WEIGHT_BYTES_PER_PARAM * n_par / w_div),
            gradients=int(GRAD_BYTES_PER_PARAM * n_par / g_div),
            optimizer_state=int(OPTIMIZER_STATE_BYTES_PER_PARAM * n_par / o_div),
            activations=layers_in_flight * per_layer_act, activations_other=other,
            workspace=workspace, in_flight=in_flight, layer_param_state=layer_state,
            limit=limit))
    return StepResult(status="ok", reason="", time_s=total, breakdown=bd, memory=tuple(memory),
                      plan=plan)
