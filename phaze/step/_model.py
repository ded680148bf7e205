"""The whole training step of a fixed plan as Megatron-LM runs it (docs/design.md; issue 13).

:func:`training_step` prices one iteration (one global batch) of a fixed plan — tensor
parallel t, pipeline parallel p, data parallel d, microbatch b, global batch B,
recomputation none/selective/full and the strategy knobs below — on one architecture row with the calibrated operator model
(``phaze.cost.op_latencies(..., model="calibrated")``), and breaks down the memory of
each GPU. It is the model ``phaze validate`` holds against published runs.
:func:`best_plans` finds, for many architecture rows at once, the fastest plan of this
model over every strategy knob (:data:`PLAN_DTYPE` rows), and :func:`step_lower_bounds`
bounds its answer cheaply (both in ``phaze.step._plans``). The step's arithmetic after
the layer times has one definition, the compiled functions of ``phaze.step._kernels``,
which ``training_step`` and the search both call.

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
— one fused Q/K/V GEMM, the attention dropout after the fused scale-mask-softmax and the
bias + GeLU after FC1 as their own memory-bound kernels — not the study's fusions. The
asynchronous all-reduce of the column-parallel input gradient (Megatron-LM from Sept.
2021) is charged in full: on the A100 a GEMM running beside an NCCL collective is
slowed by up to 1.76× (sheet §5.8), so the overlap is not modelled as free. For a
template (multi-core hypothetical) row this sum is an upper bound of its certified
schedule; this module is meant for GPU presets, where it is the honest model.

The step (1F1B, Narayanan et al. 2021 §2.2.1; sheet §5.4)
----------------------------------------------------------
- Stages as Megatron builds them: the L transformer layers split evenly over p
  (Megatron-LM asserts L divisible by p), the embedding on the first stage, the head
  (final norm, logits, loss) on the last; with ``account_for_embedding``
  (Megatron-Core's --account-for-embedding-in-pipeline-split
  --account-for-loss-in-pipeline-split, torchtitan's default split) the embedding and
  the loss count as one layer each: L + 2 layers in p·v chunks of (L + 2)/(p·v), the
  first and last chunk one transformer layer fewer (:func:`stage_layers`); with
  ``pipeline_split="remainder_first"`` (torchtitan's and NeMo AutoModel's) the units
  need not divide: the first (L + 2w) mod (p·v) chunks hold one more.
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
  (sheet §5.3, ``_allreduce_word_embedding_grads``). ``grad_reduce_dtype`` "bf16" or
  "fp16" (Megatron-Core's ``grad_reduce_in_fp32=False``: the gradient buffer in the
  parameters' 16-bit datatype) prices every gradient reduction — this all-reduce, ZeRO's
  reduce-scatters, the experts' and the tied embedding's — at 2 B per parameter; the
  optimizer still steps on fp32 main gradients (Megatron's ``main_grad.float()`` copy,
  + 4 B/param of HBM traffic: ``step._plans.OPTIMIZER_GRAD_COPY_BYTES``).
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
weights 2 B, fp32 main gradients 4 B (2 B with a 16-bit ``grad_reduce_dtype``: the
buffer Megatron-Core reduces; the optimizer's fp32 copy of its shard,
``main_grad.float()``, is a transient of the optimizer step and not counted), optimizer
state 12 B (fp32 master weight, Adam m and v) per parameter of the stage's slice —
18 B/param, as Korthikanti Figure 1 counts;
activations of the microbatches in flight under 1F1B: stage r holds min(p − r, m)
microbatches (the first stage p), each L/p transformer layers of
``graph``'s op-by-op stash (Korthikanti Table 2: s·b·h·(10 + 24/t + 5·a·s/(h·t))) without
recomputation, or the 2·s·b·h-byte layer input with full recomputation; the embedding
and head stashes separately (``activations_other``); ``workspace``: the recomputed
activations of one layer during its backward under full recomputation (allocator
caches, NCCL and cuBLAS buffers are not modelled).

Strategy knobs (issue 14; fixed plans here, searched over by ``best_plans``)
---------------------------------------------------------------------------
- ``recompute`` "op" (torchtitan's per-op selective checkpointing, its
  ``selective_ac_option = "op"``): the forward's elementwise operators and every second
  matmul (wk, wo, w3 of a Llama block: ``_layers.op_recompute_shares``) re-run before the
  backward; the stash keeps the block input and the saved matmuls' and attention's outputs
  (``_layers.op_stash``). Launched by torchtitan only; not searched.
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
  unfused scores–softmax–context kernels). With flash, "selective" is Megatron-Core's
  ``core_attn`` checkpoint around Transformer Engine's fused attention: the kernel's
  forward re-runs before its backward and only what the kernel saved beyond Q, K and V
  (its fp32 log-sum-exp; under fp8 its 16-bit output) is not stashed
  (``megatron/core/transformer/attention.py``, ``checkpoint_core_attention``;
  docs/fidelity-sources.md §28). Megatron-DeepSpeed checkpoints only the unfused core
  (its trainer rule refuses selective with flash).
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
- ``zero_stage`` (over the cp·d data-parallel ranks; Megatron's distributed optimizer =
  1, PyTorch FSDP/FSDP2 = 3): memory — optimizer state /d from stage 1, fp32 gradients /d
  from 2, 16-bit weights /d at 3 (plus two layers' gathered weights as workspace, or the
  whole stage's with ``reshard_after_forward`` off); time — stage 0 all-reduces the
  gradients after the last backward; stage 1 reduce-scatters them there and all-gathers
  the updated 16-bit parameters after the optimizer, which updates N/d parameters; stage 2
  reduce-scatters each layer's gradients after its backward, every microbatch (DeepSpeed's
  and FSDP's per-micro-step reduction; in the slot), and all-gathers the parameters after
  the optimizer; stage 3 as 2, without the final all-gather but with an all-gather of each
  layer's parameters before its forward and (``reshard_after_forward``, FSDP's default)
  again before its backward, every microbatch; the recomputed forward of full
  recomputation runs on the parameters gathered for the backward. Every collective moves
  the bytes NCCL moves: an all-gather ends with the layer's whole 16-bit parameters on
  each rank (the ring's (n − 1)/n of them through each), a reduce-scatter starts from the
  layer's whole gradient (``_kernels.pyx`` ``sharded_comm``; issue 25 fixed a d-times
  overcount). ZeRO at d = 1 is evaluated as what it is: no sharding, no traffic (=
  stage 0). ``plan["trainers"]`` says which trainer can launch the plan: Megatron-LM for
  stages 0–1; DeepSpeed for v = 1, cp = 1 and stages 0–1, or 2–3 without pipeline
  parallelism; torchtitan for stages 0 (DDP) and 3 (FSDP2) with any p, v and cp, bf16 or
  fp8 training and fp32 reduction.
- ``overlap_grad_reduce`` (bucketed gradient reduction during the backward): ZeRO 0–1 —
  the reduction of stage r counts only for what exceeds the backward (with
  recomputation) of its last microbatch, but never less than its last bucket's share
  (Megatron-Core's default bucket of max(4·10⁷, 10⁶·dp) parameters): exposed =
  max(share·reduction, reduction − backward_r); ZeRO 2–3 — each layer's reduce-scatter
  runs beside the next layer's backward and counts for its excess, plus the first
  layer's whole (``sharded_comm``'s ``hidden``).
- ``overlap_param_gather``: ZeRO 1–2 — the parameter all-gather after the optimizer runs
  bucket by bucket beside the next iteration's first forward (Megatron-Core's
  ``--overlap-param-gather``): exposed = max(share·gather, gather − forward_r); ZeRO 3 —
  each layer's all-gathers are prefetched one layer ahead (FSDP's forward and backward
  prefetch): each counts for its excess over the previous layer's compute, the first
  layer's whole. The search turns it on wherever its grid allows (it never costs time or
  memory).
- Collectives between nodes run over every NIC of the group's ranks in a node (one NIC
  per device, rail-optimised: g ranks per node drive g NICs, at most the in-node link's
  bandwidth in all; ``_ring.spread``); an expert all-to-all sends its in-node share over
  the link and the rest through each rank's own NIC (``_ring.split_all_to_all``).

Expert and context parallelism (issue 15; ``expert_parallel`` ep, ``context_parallel`` cp)
-----------------------------------------------------------------------------------------
- Layers: ``graph.build_layers``' runs in chain order — dense 'block' and
  mixture-of-experts 'moe_block' runs of any lengths. The L transformer layers still
  split evenly over p (and p·v chunks); a stage's layer ids decide how many dense and
  MoE blocks it holds, and so its forward, backward, recomputation, parameters and
  stash; the slowest stage sets the slot. With interleaving each chunk-microbatch in
  flight is counted at the device's heaviest chunk (exact when its chunks are alike).
- Rank layout (Megatron-Core's ``RankGenerator``, ``megatron.core.parallel_state``,
  https://docs.nvidia.com/megatron-core/developer-guide/latest/apidocs/core/core.parallel_state.html;
  default order "tp-cp-ep-dp-pp", the dense layers generated with ep = 1 and the experts
  with cp = 1): dense layers tensor fastest, then context, then data, then pipeline —
  global rank = r·(t·cp·d) + (j·cp + k)·t + i for stage r, data index j, context index
  k, tensor index i (the layout above with d replaced by the cp·d context × data ranks,
  which is how every stage boundary and the embedding and model-parallel groups are
  placed); experts with expert-tensor-parallel = t (Megatron-Core's default), then ep,
  then the expert-data-parallel index: the cp·d ranks of one tensor index of a stage
  are regrouped as ep × (cp·d/ep), so an EP group is ep ranks of stride t inside each
  block of t·ep consecutive ranks and an expert-data-parallel group cp·d/ep ranks of
  stride t·ep. The CP ring: cp ranks of stride t inside each block of t·cp. Rules: ep
  divides n_experts and cp·d (ETP × EP × EDP = TP × CP × DP); cp needs flash attention
  and the sequence divisible by 2·cp (cp for an encoder); t·cp·p·d devices; the global
  batch divisible by microbatch·d (CP splits the sequence, not the batch).
- Collectives over those groups are priced here from where their ranks sit (the worst
  group of each stage; the graphs' own ``alltoall_*`` and ``ring_kv_exchange*`` prices,
  which know only the group size, are left out of the layer sums): each all-to-all as one
  ring pass over the ep ranks, α + (ep−1)/ep · bytes/(η·BW) (its ``bytes_in``: the
  tokens one rank dispatches; in-node link when the group sits in one node, else the
  network with its node-crossing steps); the K/V exchange as cp − 1 point-to-point steps
  delivering its ``bytes_in`` to every rank, α + bytes/(η·BW) on the ring's tier. The
  graph gives the exchange no edge to the flash-attention kernel (they run
  concurrently), so a layer is charged max(0, exchange − flash attention) on top of its
  operators, forward and backward.
- Gradient sync and ZeRO: the dense parameters' fp32 gradients are reduced (ZeRO: their
  state sharded) over the cp·d ranks of stride t, the routed experts' (``expert_param_bytes``)
  over their cp·d/ep expert-data-parallel ranks, one collective after the other; ZeRO
  applies when that group has more than one rank. The optimizer updates the local
  shards of both. Memory: each rank holds n_experts/ep routed experts (already in the
  graphs' parameter bytes) and s/cp tokens of every stash and boundary tensor.
- Trainers: DeepSpeed has no ring attention, so a cp > 1 plan is Megatron-LM's (ZeRO 0–1).

The plan search (:func:`best_plans`)
------------------------------------
Per row, every Megatron-launchable plan of the grids (``best_plans`` docstring) whose
peak stage memory fits; exact branch and bound on the lower bound (m + (p − 1)/v) ·
max_r(f_r + b_r + recomputation_r) of the pipeline time. Layer times are priced once per
(t, sequence parallel, flash) variant for all rows (one ``op_latencies`` call per
operator graph), the rank-layout geometry once per (t, cp, ep, p, d, node size), the memory once
per plan (it does not depend on the row, only the capacity it is held against).
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import numpy as np

from . import _kernels as _kern
from . import _layers
from . import _optim
from . import _plans as _search
from .. import collectives, cost, graph, models
from .. import plan as _plan
from .. import precision as _precision
from ._layers import OPTIMIZER_BYTES_PER_PARAM
from ._plans import PLAN_DTYPE, PLAN_REASONS, best_plans, step_lower_bounds
from ..arch import attention_efficiency, attention_shape_kernel, resolve as resolve_arch

__all__ = ["OPTIMIZER_BYTES_PER_PARAM", "StepBreakdown", "MemoryBreakdown", "StepResult",
           "training_step", "ring_allreduce_seconds", "ring_allgather_seconds", "stage_layers",
           "PLAN_DTYPE", "PLAN_REASONS", "best_plans", "step_lower_bounds"]

#: Bytes per parameter held per GPU (sheet §5.1; Megatron-LM docs/api-guide/dist_optimizer.md,
#: bf16/fp16 parameters with fp32 main gradients, non-distributed optimizer: 18 B/param);
#: the kernels (phaze.step._kernels) hold the one definition.
WEIGHT_BYTES_PER_PARAM = _kern.WEIGHT_BYTES
GRAD_BYTES_PER_PARAM = _kern.GRAD_BYTES
OPTIMIZER_STATE_BYTES_PER_PARAM = _kern.OPT_STATE_BYTES   # fp32 master 4 + Adam m 4 + v 4



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
    2 + 4 + 12 B (gradients 2 B with a 16-bit ``grad_reduce_dtype``); ``activations`` the transformer layers' stash of the microbatches in
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


def split_code(account_for_embedding: bool = False, pipeline_split: str = "even") -> int:
    """The kernels' ``acct`` code of a pipeline split (``_kernels.chunk_range``): bit 0 the
    embedding and the loss counted as one layer each, bit 1 the remainder of the units
    over the p·v chunks given to the first chunks (``pipeline_split`` "remainder_first")."""
    return int(bool(account_for_embedding)) | (2 if pipeline_split == "remainder_first" else 0)


def stage_layers(n_layers: int, p: int, virtual_stages: int = 1,
                 account_for_embedding: bool = False, pipeline_split: str = "even") -> list:
    """Transformer layers per stage (device). ``pipeline_split`` "even" (Megatron-LM):
    [L/p]·p (L divisible by p), or with ``account_for_embedding`` (Megatron-Core's
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split) the
    L + 2 layers (embedding and loss one each) split into p·v chunks of (L + 2)/(p·v), the
    first and last chunk one layer fewer (p ≥ 2, chunks of at least 2).
    "remainder_first" (torchtitan's generate_llm_fqn_per_model_part with
    first/last_stage_less_layers w = 1 when ``account_for_embedding``, else 0, which is
    NeMo AutoModel's generate_hf_model_fqn_per_model_part): the U = L + 2w units cut into
    p·v chunks of ⌊U/(p·v)⌋, the first U mod (p·v) one more, the first and the last chunk
    w layers fewer; torchtitan needs ⌊U/(p·v)⌋ ≥ 1 (≥ w). Chunk k runs on device k mod p."""
    chunks = p * virtual_stages
    if pipeline_split == "remainder_first":
        w = int(bool(account_for_embedding))
        units = n_layers + 2 * w
        if units // chunks < 1:
            raise ValueError(f"pipeline_split remainder_first needs at least one of the "
                             f"{units} units (layers{' + embedding + loss' if w else ''}) "
                             f"per chunk, and there are p·v = {chunks} chunks")
    elif not account_for_embedding:
        if n_layers % p:
            raise ValueError(f"Megatron-LM needs the transformer layers ({n_layers}) divisible "
                             f"by the pipeline stages ({p}), or account_for_embedding with "
                             f"{n_layers} + 2 divisible by p·v, or pipeline_split "
                             f"remainder_first (torchtitan, NeMo AutoModel)")
        return [n_layers // p] * p
    elif p < 2 or (n_layers + 2) % chunks or (n_layers + 2) // chunks < 2:
        raise ValueError(f"account_for_embedding needs p >= 2 and the {n_layers} + 2 layers "
                         f"(embedding and loss counted) divisible by p·v = {chunks} into "
                         f"chunks of 2 or more")
    return _chunk_layers(n_layers, p, virtual_stages,
                         split_code(account_for_embedding, pipeline_split))


def _chunk_layers(n_layers, p, v, acct) -> list:
    """Layers per device of a checked split (``_kernels.chunk_range`` in Python)."""
    w = acct & 1
    units, chunks = n_layers + 2 * w, p * v
    lc, ex = units // chunks, (units % chunks if acct & 2 else 0)
    out = [0] * p
    for k in range(chunks):
        lo = max(0, k * lc + min(k, ex) - w)
        hi = min(n_layers, (k + 1) * lc + min(k + 1, ex) - w)
        out[k % p] += hi - lo
    return out


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
    (``phaze.collectives``: ``all_reduce_seconds`` for two passes, ``all_gather_seconds``
    for one). Between nodes the ring runs over the NICs of the g ranks it has in each node
    (one NIC per device, rail-optimised; g the fewest of any node): η·BW = min(η_link·link,
    g·η_net·net), the kernels' ``_ring.spread``.
    """
    ranks = list(ranks)
    n = len(ranks)
    if n <= 1:
        return 0.0
    node_size = int(_knob(row, "node_size"))
    per = {}
    for r in ranks:
        per[r // node_size] = per.get(r // node_size, 0) + 1
    nodes = len(per)
    link_bw = eff.link_efficiency * _knob(row, "link_gb_per_s") * 1e9
    net_bw = eff.net_efficiency * _knob(row, "net_gb_per_s") * 1e9
    g = min(per.values())
    if g > 1:
        net_bw = min(g * net_bw, link_bw)
    fabric = collectives.fabric(
        coll_latency_s=eff.coll_latency_s, link_step_s=eff.link_step_s,
        net_step_s=eff.net_step_s, link_bw=link_bw, net_bw=net_bw,
        **{k: float(v) for k, v in collectives.protocol_parameters(eff).items()})
    price = collectives.all_reduce_seconds if passes == 2 else collectives.all_gather_seconds
    return price(float(nbytes), n, nodes, fabric)


def ring_allreduce_seconds(nbytes, ranks, row, eff) -> float:
    """Ring all-reduce of ``nbytes`` per rank over global ``ranks`` (s): two passes."""
    return _ring_seconds(nbytes, ranks, row, eff, 2)


def ring_allgather_seconds(nbytes_total, ranks, row, eff) -> float:
    """Ring all-gather ending with ``nbytes_total`` on every rank (s): one pass."""
    return _ring_seconds(nbytes_total, ranks, row, eff, 1)


# ---------------------------------------------------------------------------
# the step
# ---------------------------------------------------------------------------

def _one_row_inputs(row, eff):
    """The efficiency set of one row as a one-row EFFICIENCY_DTYPE array, the row's
    collective parameters (``step._plans.row_params``) and its node size array."""
    eff_row = eff.row()
    return (eff_row, _layers.row_params(row, eff_row),
            np.ascontiguousarray(row["node_size"], dtype=np.int64))


def _op_seconds(g, row, eff, t):
    """Seconds of each operator of ``g`` (one microbatch) on one row: intra-op calibrated
    latencies, with sequence parallelism's reduce-scatters and all-gathers priced by their
    own ring form (n − 1 steps of (n−1)/n of the full tensor over the in-node
    tensor-parallel group, ranks 0..t−1) instead of the half-size all-reduce the graph
    stores them as, and the overlapped backward all-gathers charged only for what exceeds
    the GEMMs they overlap (max(0, gather − GEMMs)); ``step._plans.op_seconds_rows`` on
    one row. Returns (seconds (n_ops,), {name: index})."""
    _, rp, ns = _one_row_inputs(row, eff)
    sec, index = _layers.op_seconds_rows(g, cost.prepare(row, model="calibrated", efficiency=eff),
                                         rp, ns, t)
    return sec[:, 0].copy(), index


def _not(status, reason, plan):
    return StepResult(status=status, reason=reason, time_s=math.inf, breakdown=None, memory=(),
                      plan=plan)


#: training_step's own defaults where they differ from the knob table's (DESIGN.md §3),
#: and the plan sizes it needs given.
_STEP_DEFAULTS = {"recompute": "full"}
_STEP_REQUIRED = ("tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch",
                  "global_batch")


def training_step(model, arch, *, efficiency=None, fp8_rate=None, **knobs) -> StepResult:
    """One iteration of a fixed Megatron-LM plan on one architecture (module docstring).

    ``model``: zoo name or ``ModelSpec`` (dense or mixture of experts); ``arch``: preset
    name or one ``ARCH_DTYPE`` row; the plan's knobs (``phaze.plan.KNOBS``, keyword-only;
    the signature lists them): t, p, d, ``microbatch`` b (samples) and ``global_batch`` B
    (samples; B divisible by b·d) required; ``recompute`` "none" | "selective" | "full"
    (default "full"); ``virtual_stages`` v (interleaved 1F1B when > 1);
    ``sequence_parallel``; ``flash_attention``; ``zero_stage`` 0–3;
    ``overlap_grad_reduce`` (module docstring, "Strategy knobs"); ``expert_parallel`` ep
    (a mixture of experts: dividing n_experts and cp·d; 1 for a dense model);
    ``context_parallel`` cp (ring attention: flash attention on, the sequence divisible by
    2·cp; uses t·cp·p·d devices); ``capacity_factor`` (MoE: None = balanced routing, or
    Megatron-Core's expert capacity factor); ``precision`` "bf16" | "fp16" | "fp8" (the
    graphs' datatype, ``phaze.precision``: fp16 adds the loss-scaler's unscale pass to the
    optimizer, sheet §5.2; fp8 runs the linear layers' GEMMs at the chip's fp8 rate and
    holds Transformer Engine's FP8 weight copies, 2 B per GEMM weight; a chip without fp8
    tensor cores is refused); ``grad_reduce_dtype`` "fp32" | "bf16" | "fp16" (the gradient
    buffer's and the data-parallel reductions' datatype: 4 or 2 B per parameter, module
    docstring); ``efficiency``: the calibrated parameter set (None: the
    preset's own for a preset name, ``efficiency.for_rows`` for a row); ``fp8_rate``: with
    precision "fp8", the chip's fp8 tensor-rate multiplier (None: a chip file's or
    preset's own for a name, ``dtype_rates.for_rows`` for a row; 0 refuses).

    Returns a :class:`StepResult` (a plan the rules forbid — ep not dividing n_experts or
    cp·d, cp without flash attention, ... — is "infeasible" with a one-sentence reason);
    bad arguments raise ``ValueError`` (one sentence naming the field, ``phaze.plan``).
    """
    _plan.check_keywords("training_step", knobs, _plan.NAMES, _STEP_REQUIRED)
    m_spec = models.resolve(model)
    pl = _plan.Plan(**{**_STEP_DEFAULTS, **knobs})
    t, p, d, b, B = (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel,
                     pl.microbatch, pl.global_batch)
    v, ep, cp, zero = pl.virtual_stages, pl.expert_parallel, pl.context_parallel, pl.zero_stage
    recompute, precision, capacity_factor = pl.recompute, pl.precision, pl.capacity_factor
    overlap_grad_reduce = pl.overlap_grad_reduce
    if not m_spec.is_moe and (ep != 1 or capacity_factor is not None):
        what = "expert_parallel must be 1" if ep != 1 else "capacity_factor must be None"
        raise ValueError(f"{what} for {m_spec.name}, which has no experts (n_experts = 0)")
    # The chip, resolved once (phaze.arch.resolve): its row, efficiency set and tensor rate
    # at the datatype (one sentence when it has no fp8 tensor cores).
    low = _precision.is_low_precision(precision)
    fp8_family = low and _precision.datatype(precision).family == "fp8"
    chip = resolve_arch(arch, efficiency=efficiency,
                        fp8_rate=fp8_rate if fp8_family else None)
    # the fused attention at the trainer's kernel (plan knob attention_kernel; arch)
    row, eff = chip.row, attention_efficiency(chip, pl.attention_kernel)
    fp8_rate = chip.tensor_rate(precision) if low else None
    # Sequence parallelism splits over the tensor-parallel group: at t = 1 it is a no-op
    # (Megatron-LM switches it off there), and the plan records what ran.
    sp = pl.sequence_parallel and t > 1
    flash = pl.flash_attention
    # Tensor-parallel communication overlap acts on sequence parallelism's collectives: a
    # no-op at t = 1, refused without sequence parallelism at t > 1 (Megatron-LM's
    # arguments.py asserts --sequence-parallel with --tp-comm-overlap).
    tpo = bool(pl.tp_comm_overlap) and t > 1
    plan = dict(model=m_spec.name, **pl.as_dict(), sequence_parallel_effective=sp,
                tp_comm_overlap_effective=tpo, trainers=_plan.trainers(**pl.as_dict()))
    if tpo and not sp:
        raise ValueError(f"tp_comm_overlap needs sequence_parallel at tensor parallel {t} > 1 "
                         f"(Megatron-LM's --tp-comm-overlap requires --sequence-parallel)")

    if B % (b * d):
        return _not("infeasible", f"global batch {B} is not a multiple of microbatch × data "
                                  f"parallel = {b * d}", plan)
    if not m_spec.valid_tensor_parallel(t):
        return _not("infeasible", f"tensor parallel {t} does not divide the heads "
                                  f"({m_spec.heads})", plan)
    if t > int(row["node_size"][0]):
        return _not("not_modelled", f"not modelled yet: tensor parallel {t} wider than a node "
                                    f"({int(row['node_size'][0])})", plan)
    if m_spec.is_moe and m_spec.n_experts % ep:
        return _not("infeasible", f"expert parallel {ep} does not divide the routed experts "
                                  f"({m_spec.n_experts})", plan)
    if (cp * d) % ep:
        return _not("infeasible", f"expert parallel {ep} does not divide context × data "
                                  f"parallel = {cp * d} (Megatron-Core: expert-tensor × expert "
                                  f"× expert-data parallel = tensor × context × data parallel)",
                    plan)
    if m_spec.is_moe and t > 1 and not sp:
        return _not("infeasible", f"a mixture of experts with tensor parallel {t} > 1 needs "
                                  f"sequence parallelism (Megatron-Core)", plan)
    if _optim.refusal(pl.optimizer, zero):
        return _not("infeasible", _optim.refusal(pl.optimizer, zero), plan)
    if cp > 1 and graph.ring_attention_refusal(m_spec):
        return _not("not_modelled", graph.ring_attention_refusal(m_spec), plan)
    if cp > 1 and not flash:
        return _not("infeasible", f"context parallel {cp} > 1 needs flash attention (ring "
                                  f"attention runs in the fused attention kernel)", plan)
    chunks = 2 * cp if m_spec.causal else cp
    if cp > 1 and m_spec.seq_len % chunks:
        return _not("infeasible", f"context parallel {cp} needs the sequence ({m_spec.seq_len}) "
                                  f"divisible by {chunks}", plan)
    acct = split_code(pl.account_for_embedding, pl.pipeline_split)
    try:
        stage_layers(m_spec.n_layers, p, v, pl.account_for_embedding, pl.pipeline_split)
    except ValueError as exc:
        return _not("infeasible", str(exc), plan)
    m = B // (b * d)
    if v > 1:
        # Megatron-LM's interleaved schedule (Narayanan et al. 2021 §2.2.2; sheet §5.4).
        if p == 1:
            return _not("infeasible", "interleaved 1F1B (virtual_stages > 1) needs pipeline "
                                      "parallelism (p ≥ 2)", plan)
        if not acct and m_spec.n_layers % (p * v):
            return _not("infeasible", f"interleaved 1F1B needs the transformer layers "
                                      f"({m_spec.n_layers}) divisible by p·v = {p * v}", plan)
        if m % p:
            return _not("infeasible", f"interleaved 1F1B needs the microbatches per pipeline "
                                      f"({m}) divisible by p = {p}", plan)
    mp = pl.pipeline_microbatches
    if mp and m % mp:
        return _not("infeasible", f"pipeline_microbatches {mp} does not divide the {m} "
                                  f"microbatches per pipeline (global batch / (microbatch × "
                                  f"data parallel))", plan)
    if mp and v > 1 and mp % p:
        return _not("infeasible", f"interleaved 1F1B needs the microbatches of each pipeline "
                                  f"schedule ({mp}) divisible by p = {p}", plan)
    if sp and (m_spec.seq_len // cp) % t:
        return _not("infeasible", f"sequence parallelism needs the sequence ({m_spec.seq_len}) "
                                  f"divisible by tensor parallel {t}"
                                  + (f" × context parallel {cp}" if cp > 1 else ""), plan)
    mg = graph.build_layers(m_spec, b, t, sequence_parallel=sp, flash_attention=flash,
                            kernels="megatron", dtype=precision, expert_parallel=ep,
                            context_parallel=cp, capacity_factor=capacity_factor,
                            loss_kernel=pl.loss_kernel)
    # Layer times (Python, via phaze.cost), then the one compiled definition of the step's
    # arithmetic that best_plans shares (phaze.step._kernels).
    eff_row, rp, ns = _one_row_inputs(row, eff)
    pricer = cost.prepare(row, model="calibrated", efficiency=eff,
                          buffer_bytes_per_cycle=chip.buffer_bytes_per_cycle,
                          flash_kernel=attention_shape_kernel(chip, pl.attention_kernel))
    ns_steps = _optim.NS_STEPS if _optim.OPTIMIZERS[pl.optimizer].matrices else 0
    lt, sizes = _search.variant_inputs(mg, m_spec, pricer, rp, ns, recompute, fp8_rate, tpo,
                                       ns_steps, pl.recompute_modules)
    prefix = _layers.kind_prefix(m_spec)
    plan_rec = _layers.plan_records(p, t, d, cp, ep, v, m, m_spec.n_layers, zero,
                                    bool(overlap_grad_reduce), recompute, sp, precision,
                                    pl.grad_reduce_dtype, bool(pl.overlap_param_gather),
                                    bool(pl.reshard_after_forward), acct, pl.optimizer,
                                    pl.optimizer_state_dtype, pl.moe_dispatcher,
                                    mp, pl.master_weights).reshape(1)
    stages = np.zeros(p, dtype=_kern.STAGE_NODES)
    cell = np.zeros(1, dtype=_kern.CELL_NODES)
    _kern.stage_geometry(p, t, d, cp, ep, int(ns[0]), stages, cell)
    slots = np.empty((p, 6))
    bd_rec = np.zeros(1, dtype=_kern.BREAKDOWN)
    _kern.step_time(plan_rec, cell, stages, lt[:1], rp[:1], sizes, prefix, slots, bd_rec)
    bd_rec = bd_rec[0]
    bd = StepBreakdown(**{f: (int(bd_rec[f]) if f in ("microbatches", "critical_stage")
                              else float(bd_rec[f])) for f in _kern.BREAKDOWN.names})

    # -- memory per stage (sheet §5.1, §5.5) ------------------------------------------
    limit = int(float(row["hbm_gib"][0]) * 2 ** 30)
    memory = []
    mem = np.zeros(1, dtype=_kern.MEMORY)
    for r in range(p):
        _kern.stage_memory(r, plan_rec, sizes, prefix, mem)
        memory.append(MemoryBreakdown(stage=r, limit=limit,
                                      **{f: int(mem[0][f]) for f in _kern.MEMORY.names}))
    return StepResult(status="ok", reason="", time_s=bd.total_s, breakdown=bd,
                      memory=tuple(memory), plan=plan)


_plan.keyword_signature(training_step, _plan.NAMES, {
    **{name: inspect.Parameter.empty for name in _STEP_REQUIRED}, **_STEP_DEFAULTS})
