"""The plan search of the step model over architecture rows (:func:`layer_table`,
:class:`LayerTable`, :func:`best_plans`, :func:`step_lower_bounds`). Private: the public
names are re-exported by :mod:`phaze.step` (see its docstring for the model, and
:func:`best_plans` below for the search).

The layers of every variant are priced once per row by ``_layers`` (the calibrated
operator latencies, exactly as :func:`phaze.step.training_step` prices them); the rest of
the step is the compiled arithmetic of :mod:`phaze.step._kernels`, shared with
``training_step``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _kernels as kern
from . import _optim
from .. import _config, cost, graph, models
from ..graph import DEFAULT_RECOMPUTE_MODULES as _RM
from .._cache import Memo
from .. import plan as _plan
from ..arch import validate as _validate_archs
from ._layers import (OPTIMIZER_BYTES_PER_PARAM, RECOMPUTE_CODES, _bool_grid, _int_grid,
                      efficiency_rows, fp8_weight_bytes, group_collective_bytes,
                      kind_prefix, layer_times_rows, mtp_kind, op_recompute_shares, op_stash,
                      plan_records, row_params)
from ._bounds import _lower_bounds

#: Why a row of :func:`best_plans` has no plan (``reason`` indexes this; 0 = a plan was found).
PLAN_REASONS = (
    "",
    "no plan fits in the HBM capacity",
    "no launchable plan: no tensor-parallel width of the grid divides the heads and fits in a "
    "node, or no pipeline/data-parallel split meets Megatron-LM's rules (L divisible by p, the "
    "global batch by microbatch·d, t·cp·p·d within the devices, sequence divisible by t under "
    "sequence parallelism, ep dividing the experts and cp·d, the interleaving rules)",
)

#: One row of :func:`best_plans` (seconds, bytes; memory of the stage with the largest
#: total; the time breakdown of the critical stage, per microbatch, as in StepBreakdown).
PLAN_DTYPE = np.dtype([
    ("time_s", "f8"), ("feasible", "?"), ("reason", "i8"),
    ("tensor_parallel", "i8"), ("pipeline_parallel", "i8"), ("data_parallel", "i8"),
    ("expert_parallel", "i8"), ("context_parallel", "i8"), ("virtual_stages", "i8"), ("zero_stage", "i8"), ("sequence_parallel", "?"),
    ("flash_attention", "?"), ("overlap_grad_reduce", "?"), ("overlap_param_gather", "?"),
    ("account_for_embedding", "?"), ("tp_comm_overlap", "?"),
    ("devices_used", "i8"), ("microbatches", "i8"),
    ("memory_bytes", "i8"), ("weights_bytes", "i8"), ("gradients_bytes", "i8"),
    ("optimizer_bytes", "i8"), ("activations_bytes", "i8"), ("workspace_bytes", "i8"),
    ("forward_s", "f8"), ("backward_s", "f8"), ("recompute_s", "f8"), ("p2p_s", "f8"),
    ("bubble_s", "f8"), ("dp_allreduce_s", "f8"), ("optimizer_s", "f8"),
])


# ---------------------------------------------------------------------------
# one variant's layer times and sizes
# ---------------------------------------------------------------------------

def check_kinds(mg):
    """The graph variant's transformer-layer kinds (``ModelGraph.block_kinds``), at most
    ``step._kernels.K_MAX`` of them (else ``ValueError`` in one sentence)."""
    blocks = mg.block_kinds()
    if len(blocks) > kern.K_MAX:
        raise ValueError(f"{mg.model.name} mixes {len(blocks)} layer kinds "
                         f"({', '.join(L.kind for L in blocks)}); the step model prices at most "
                         f"{kern.K_MAX} in one model")
    return blocks


def variant_times(mg, m_spec, pricer, rp, node_size, fp8_rate=None, priced=None,
                  tp_overlap=False, ns_steps=0, recompute_modules=_RM) -> np.ndarray:
    """The layer times ((n,) ``step._kernels.LAYER_TIMES`` records) of one (t, sequence
    parallel, flash, cp, ep) graph variant ``mg`` on every row of ``pricer`` (the rows under
    the calibrated model, ``cost.prepare``; ``rp`` and ``node_size`` theirs; ``fp8_rate``:
    the rows' fp8 multiplier for an fp8 graph, as ``cost.op_latencies`` takes it;
    ``priced``: {graph: intra-op latencies} of its graphs already priced, or None). They do
    not depend on the recomputation mode (:func:`variant_sizes` does). The transformer-layer
    kinds fill the ``k_*`` slots in ``ModelGraph.block_kinds`` order. ``tp_overlap``:
    tensor-parallel communication overlap (``tp_comm_overlap``; ``_layers.op_seconds_rows``,
    a no-op without sequence parallelism's collectives); ``ns_steps``: the Newton–Schulz
    iterations of a Muon step on each kind's weight matrices, priced into ``k_ns_d`` /
    ``k_ns_e`` (0: Adam, none); ``recompute_modules``: what selective recomputation re-runs
    (``k_core``; ``LayerGraph.selective``)."""
    t = mg.tensor_parallel
    cp = mg.context_parallel
    kinds = mg.kinds()
    emb, head = kinds["embedding"], kinds["head"]
    e = head.forward.bytes_per_element
    lt = np.zeros(len(pricer), dtype=kern.LAYER_TIMES)
    shares = op_recompute_shares(m_spec)
    for L, (sf, sb) in ((emb, ("emb_f", "emb_b")), (head, ("head_f", "head_b"))):
        f, b, *_rest = layer_times_rows(L, pricer, rp, node_size, t, fp8_rate, priced,
                                        tp_overlap, None)
        lt[sf] = f
        lt[sb] = b
    for q, L in enumerate(check_kinds(mg)):
        f, b, core, flash_f, flash_b, op = layer_times_rows(
            L, pricer, rp, node_size, t, fp8_rate, priced, tp_overlap, shares, recompute_modules)
        for slot, col in (("k_f", f), ("k_b", b), ("k_core", core), ("k_op", op),
                          ("k_flash_f", flash_f), ("k_flash_b", flash_b)):
            lt[slot][:, q] = col
        if ns_steps:
            for slot, g in zip(("k_ns_d", "k_ns_e"), graph.newton_schulz(L, ns_steps)):
                if g is not None:
                    lt[slot][:, q] = np.ascontiguousarray(
                        pricer.op_latencies(g)[1].T).sum(axis=1)
    act_bytes = e * mg.microbatch * (m_spec.seq_len // cp) * m_spec.hidden
    for slot, inter in (("send_in", False), ("send_net", True)):
        lt[slot] = pricer.p2p_seconds(act_bytes / t, inter_node=inter)[0]
    return lt


def variant_sizes(mg, m_spec, recompute, recompute_modules=_RM) -> np.ndarray:
    """The sizes (one ``step._kernels.SIZES`` record, a one-element array) of one graph
    variant ``mg`` under ``recompute`` (selective: of ``recompute_modules``,
    ``LayerGraph.selective``; an MoE layer's re-run ``moe`` re-sends its forward
    all-to-alls in the backward): what does not depend on the row."""
    t = mg.tensor_parallel
    cp = mg.context_parallel
    kinds = mg.kinds()
    emb, head = kinds["embedding"], kinds["head"]
    e = head.forward.bytes_per_element
    sizes = np.zeros(1, dtype=kern.SIZES)
    shares = op_recompute_shares(m_spec)   # what recompute "op" re-runs of the GEMMs
    ws = 0
    blocks = check_kinds(mg)
    a2a_sizes = set()
    rec = sizes[0]
    for q, L in enumerate(blocks):
        a2a, n_f, n_b, ring_f, ring_b = group_collective_bytes(L)
        if n_f or n_b:
            a2a_sizes.add(a2a)
        _ops, sel_stash, sel_a2a = L.selective(recompute_modules)
        if recompute == "selective" and sel_a2a:
            n_b += n_f
        rec["k_a2a_f_n"][q], rec["k_a2a_b_n"][q] = n_f, n_b
        rec["k_ring_f"][q], rec["k_ring_b"][q] = ring_f, ring_b
        if recompute == "full":
            ws = max(ws, L.stash("none"))            # one layer's recomputed activations
        elif recompute == "selective":
            ws = max(ws, L.stash("none") - sel_stash)   # what its modules re-run
        elif recompute == "op":
            ws = max(ws, L.stash("none") - op_stash(L, shares))
        rec["k_pb"][q] = L.param_bytes
        rec["k_exp_pb"][q] = L.expert_param_bytes
        rec["k_stash"][q] = (op_stash(L, shares) if recompute == "op" else sel_stash
                             if recompute == "selective" else L.stash(recompute))
        rec["k_fp8_w"][q] = fp8_weight_bytes(L)
        rec["k_exp_fp8_w"][q] = fp8_weight_bytes(L, experts=True)
    if len(a2a_sizes) > 1:
        raise AssertionError(f"the all-to-alls of {m_spec.name}'s layer kinds differ in size: "
                             f"{sorted(a2a_sizes)}")
    sizes["n_kinds"] = len(blocks)
    sizes["mtp_kind"], sizes["mtp_n"] = mtp_kind(m_spec)
    if m_spec.is_moe:
        # DeepEP's dispatch (step._kernels.layer_times): one copy of the tokens this slice
        # routes, the experts per token, DeepSeek-V3's node limit (its expert groups laid
        # on nodes, as it trains them: topk_groups of n_expert_groups)
        tokens = mg.microbatch * (m_spec.seq_len // cp)
        if mg.sequence_parallel:
            tokens //= t
        # (LatentMoE dispatches moe_latent_size-wide tokens: ModelSpec.moe_latent_size)
        sizes["a2a_token_bytes"] = tokens * (m_spec.moe_latent_size or m_spec.hidden) * e
        sizes["topk"] = m_spec.experts_per_token
        sizes["node_limit"] = m_spec.topk_groups if m_spec.n_expert_groups > 1 else 0
    sizes["a2a_bytes"] = a2a_sizes.pop() if a2a_sizes else 0
    sizes["emb_pb"] = emb.param_bytes
    sizes["head_pb"] = head.param_bytes
    sizes["elem_bytes"] = e
    sizes["act_bytes"] = e * mg.microbatch * (m_spec.seq_len // cp) * m_spec.hidden
    sizes["word_elements"] = -(-m_spec.vocab // t) * m_spec.embed_width
    sizes["emb_stash"] = emb.stash_bytes
    sizes["head_stash"] = head.stash_bytes
    sizes["workspace"] = ws
    return sizes


def variant_inputs(mg, m_spec, pricer, rp, node_size, recompute, fp8_rate=None,
                   tp_overlap=False, ns_steps=0, recompute_modules=_RM):
    """(:func:`variant_times`, :func:`variant_sizes`) of one graph variant."""
    return (variant_times(mg, m_spec, pricer, rp, node_size, fp8_rate, tp_overlap=tp_overlap,
                          ns_steps=ns_steps, recompute_modules=recompute_modules),
            variant_sizes(mg, m_spec, recompute, recompute_modules))


# ---------------------------------------------------------------------------
# the search
# ---------------------------------------------------------------------------

def _model_args(model, archs, microbatch, efficiency):
    """The checked (model, rows, microbatch, efficiency rows) of a layer table."""
    from .._validate import positive_int

    m_spec = models.resolve(model)
    if m_spec.op_graph_refusal:
        raise ValueError(m_spec.op_graph_refusal)
    archs = _validate_archs(archs)
    b = positive_int("microbatch", microbatch)
    return m_spec, archs, b, efficiency_rows(efficiency, archs)


def _bound_args(devices, global_batch, recompute):
    """The checked (devices, global batch, recomputation mode) of a bound or plan search."""
    from .._validate import positive_int

    n_dev = positive_int("devices", devices)
    B = positive_int("global_batch", global_batch)
    if recompute not in RECOMPUTE_CODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_CODES)}, got {recompute!r}")
    return n_dev, B, recompute


def _plan_args(devices, global_batch, recompute, virtual_stages, zero_stage,
               overlap_grad_reduce, grad_reduce_dtype, overlap_param_gather=(False, True),
               reshard_after_forward=True, account_for_embedding=(False, True),
               moe_dispatcher="alltoall", master_weights="separate"):
    """The checked plan-level settings of a plan search, in :func:`_search_plans`' order
    (devices, global batch, recomputation, v grid, ZeRO grid, overlap grid, the
    :class:`_Sharding` settings)."""
    n_dev, B, recompute = _bound_args(devices, global_batch, recompute)
    grad_reduce_dtype = _plan.check("grad_reduce_dtype", grad_reduce_dtype)
    zeros = _int_grid("zero_stage", zero_stage, 0, 3)
    ogrs = _bool_grid("overlap_grad_reduce", overlap_grad_reduce)
    opgs = _bool_grid("overlap_param_gather", overlap_param_gather)
    reshard = _plan.check("reshard_after_forward", reshard_after_forward)
    accts = _bool_grid("account_for_embedding", account_for_embedding)
    vs_grid = None if virtual_stages is None else sorted(
        _int_grid("virtual_stages", virtual_stages, 1))
    moe_dispatcher = _plan.check("moe_dispatcher", moe_dispatcher)
    master_weights = _plan.check("master_weights", master_weights)
    return n_dev, B, recompute, vs_grid, zeros, ogrs, _Sharding(
        grad_reduce_dtype, True in opgs, reshard, tuple(accts), moe_dispatcher, master_weights)


@dataclasses.dataclass(frozen=True)
class _Sharding:
    """The plan-level settings of a plan search beside the grids enumerate_plans takes: the
    gradient-reduction datatype, whether the parameter all-gathers overlap compute (on when
    the grid allows it: overlap never costs time or memory), ZeRO-3's resharding after the
    forward, and the pipeline splits searched (``account_for_embedding`` values: False the
    even splits, True the splits counting the embedding and loss as layers, for the p that
    divide L + 2 and not L), the MoE dispatcher and where the master weights live."""

    grad_reduce_dtype: str
    overlap_param_gather: bool
    reshard_after_forward: bool
    account_for_embedding: tuple = (False,)
    moe_dispatcher: str = "alltoall"
    master_weights: str = "separate"


#: The context-parallel widths ``context_parallel=None`` tries (then kept where the
#: sequence allows them, :func:`context_parallel_grid`).
CONTEXT_PARALLEL_ALL = (1, 2, 4, 8, 16, 32)
#: Fewest tokens per load-balanced chunk (s/(2·cp)) for ``context_parallel=None``.
MIN_CP_CHUNK_TOKENS = 512


def expert_parallel_grid(m_spec, values=None) -> list:
    """The expert-parallel widths to search: ``None`` → every divisor of ``n_experts``
    ((1,) for a dense model); else the given values (each ≥ 1; a value that does not
    divide n_experts, or > 1 on a dense model, is refused in one sentence)."""
    if values is None:
        n = m_spec.n_experts
        return [e for e in range(1, n + 1) if n % e == 0] if n else [1]
    out = _int_grid("expert_parallel", values, 1)
    for e in out:
        if not m_spec.is_moe and e != 1:
            raise ValueError(f"expert_parallel must be 1 for {m_spec.name}, which has no experts "
                             f"(n_experts = 0); got {e}")
        if m_spec.is_moe and m_spec.n_experts % e:
            raise ValueError(f"expert_parallel must divide n_experts ({m_spec.n_experts}) of "
                             f"{m_spec.name}; got {e}")
    return out


def context_parallel_grid(m_spec, values=None) -> list:
    """The context-parallel widths to search: ``None`` → those of
    :data:`CONTEXT_PARALLEL_ALL` whose load-balanced chunks s/(2·cp) (s/cp for an encoder)
    are whole and hold at least :data:`MIN_CP_CHUNK_TOKENS` tokens (1 always); else the
    given values (each ≥ 1; plans whose sequence they do not divide are skipped)."""
    chunks = 2 if m_spec.causal else 1
    if values is None:
        if graph.ring_attention_refusal(m_spec):
            return [1]
        return [c for c in CONTEXT_PARALLEL_ALL
                if c == 1 or (m_spec.seq_len % (chunks * c) == 0
                              and m_spec.seq_len // (chunks * c) >= MIN_CP_CHUNK_TOKENS)]
    return _int_grid("context_parallel", values, 1)


def _variants(m_spec, b, widths, sps, flashes, dtype="bf16", cps=(1,), eps=(1,),
              capacity_factor=None):
    """(t, sequence parallel (effective), flash, cp, ep, ModelGraph) in loop order: t as
    given, then sequence parallelism, then flash, then cp, then ep (grid orders); SP once
    (off) at t = 1, skipped when (s/cp) % t; a mixture of experts at t > 1 only with SP
    (Megatron-Core's rule); cp > 1 only with flash attention and s divisible by 2·cp
    (cp for an encoder)."""
    out = []
    chunks = 2 if m_spec.causal else 1
    no_cp = bool(graph.ring_attention_refusal(m_spec))
    for t in widths:
        if not m_spec.valid_tensor_parallel(t):
            continue
        seen = []
        for sp in sps:
            eff_sp = sp and t > 1
            if eff_sp in seen or (m_spec.is_moe and t > 1 and not eff_sp):
                continue
            seen.append(eff_sp)
            for flash in flashes:
                for cp in cps:
                    if cp > 1 and (no_cp or not flash or m_spec.seq_len % (chunks * cp)):
                        continue
                    if eff_sp and (m_spec.seq_len // cp) % t:
                        continue
                    for ep in eps:
                        out.append((t, eff_sp, flash, cp, ep, graph.build_layers(
                            m_spec, b, t, sequence_parallel=eff_sp, flash_attention=flash,
                            kernels="megatron", dtype=dtype, expert_parallel=ep,
                            context_parallel=cp, capacity_factor=capacity_factor)))
    return out


class LayerTable:
    """The layer times of every (t, sequence parallel, flash, cp, ep) variant of one model
    at one microbatch on architecture rows, priced once and shared by the plan search
    (:meth:`best_plans`) and its bound (:meth:`lower_bounds`) for any recomputation mode,
    HBM capacity, plan grid or subset of the rows. Built by :func:`layer_table`, which
    checks its arguments; the methods check theirs and nothing twice.

    ``variants``: (t, sequence parallel, flash, cp, ep, ModelGraph) in loop order;
    ``times``: (max(len(variants), 1), n) ``LAYER_TIMES`` records; ``rows``: the
    ARCH_DTYPE rows (n,); ``rp``, ``node_size``: their collective parameters and node sizes.
    ``plans_bounded``, ``plans_priced``: running totals over the table's plan searches of
    the plans whose lower bound was formed and of those then priced in full
    (``step_time``), the search's work in plans.
    """

    def __init__(self, m_spec, microbatch, precision, rows, rp, variants, times, key=None,
                 tp_overlap=False, recompute_modules=_RM):
        self.model = m_spec
        # the optimizer (phaze.step._optim) whose Newton–Schulz GEMMs the times hold
        self.optimizer, self.optimizer_state_dtype = "adam", "fp32"
        # tensor-parallel communication overlap in the layer times (on the variants with
        # sequence parallelism)
        self.tp_overlap = bool(tp_overlap)
        # the modules selective recomputation re-runs (the times' k_core, the sizes)
        self.recompute_modules = recompute_modules
        # what the variants (and so the plans and their sizes) follow from, hashable: tables
        # with equal keys share their plan sets (:data:`_PLAN_SETS`)
        self.key = key
        self.microbatch = int(microbatch)
        self.precision = precision
        self.rows = rows
        self.rp = rp
        self.node_size = np.ascontiguousarray(rows["node_size"], dtype=np.int64)
        self.variants = variants
        self.times = times
        self._sizes = {}
        self.plans_bounded = 0
        self.plans_priced = 0
        self._plan_sets = {}

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def sizes(self, recompute) -> np.ndarray:
        """(max(len(variants), 1),) ``SIZES`` records of the variants under ``recompute``
        (memoised: they do not depend on the row)."""
        hit = self._sizes.get(recompute)
        if hit is None:
            hit = np.zeros(max(len(self.variants), 1), dtype=kern.SIZES)
            for k, (_t, _sp, _flash, _cp, _ep, mg) in enumerate(self.variants):
                hit[k] = variant_sizes(mg, self.model, recompute, self.recompute_modules)[0]
            self._sizes[recompute] = hit
        return hit

    def plan_set(self, n_dev, B, recompute, vs_grid, zeros, ogrs, launchable,
                 sharding) -> _PlanSet:
        """The table's plans under checked plan-level settings (memoised per settings)."""
        key = (n_dev, B, recompute, None if vs_grid is None else tuple(vs_grid), tuple(zeros),
               tuple(ogrs), launchable, sharding)
        hit = self._plan_sets.get(key)
        if hit is None:
            shared = None if self.key is None else (
                self.key, key, tuple(np.unique(self.node_size).tolist()))
            hit = None if shared is None else _PLAN_SETS.get(shared)
            if hit is None:
                hit = _PlanSet(self, n_dev, B, recompute, vs_grid, zeros, ogrs, launchable,
                               sharding)
                if shared is not None:
                    _PLAN_SETS.put(shared, hit)
            self._plan_sets[key] = hit
        return hit

    def _take(self, rows):
        """(rows, rp, node sizes, times) of the row indices ``rows`` (None: all)."""
        if rows is None:
            return self.rows, self.rp, self.node_size, self.times
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise ValueError(f"rows must index the table's {len(self)} rows, got "
                             f"{idx.min()}..{idx.max()}")
        return (self.rows[idx], self.rp[idx], self.node_size[idx],
                np.ascontiguousarray(self.times[:, idx]))

    def best_plans(self, *, devices, global_batch, recompute="full", hbm_bytes=None,
                   virtual_stages=None, zero_stage=(0, 1, 2, 3),
                   overlap_grad_reduce=(False, True), launchable=True,
                   grad_reduce_dtype="fp32", overlap_param_gather=(False, True),
                   reshard_after_forward=True, account_for_embedding=(False, True),
                   rows=None, moe_dispatcher="alltoall",
                   master_weights="separate") -> np.ndarray:
        """:func:`best_plans` on the table's rows (or the row indices ``rows``, repeats
        allowed; ``hbm_bytes`` then one per index), with the table's variants."""
        n_dev, B, recompute, vs_grid, zeros, ogrs, sharding = _plan_args(
            devices, global_batch, recompute, virtual_stages, zero_stage, overlap_grad_reduce,
            grad_reduce_dtype, overlap_param_gather, reshard_after_forward,
            account_for_embedding, moe_dispatcher, master_weights)
        archs, rp, ns, times = self._take(rows)
        return _search_plans(self, archs, rp, ns, times, n_dev, B, recompute, hbm_bytes,
                             vs_grid, zeros, ogrs, _launch_arg(launchable), sharding)

    def lower_bounds(self, *, devices, global_batch, recompute, rows=None) -> np.ndarray:
        """:func:`step_lower_bounds` on the table's rows (or the row indices ``rows``)."""
        n_dev, B, recompute = _bound_args(devices, global_batch, recompute)
        _archs, _rp, ns, times = self._take(rows)
        return _lower_bounds(self, ns, times, n_dev, B, recompute)


def layer_table(model, archs, *, microbatch, tensor_parallel=(1, 2, 4, 8),
                sequence_parallel=(False, True), flash_attention=(False, True),
                precision="bf16", efficiency=None, fp8_rate=None, expert_parallel=None,
                context_parallel=None, capacity_factor=None,
                tp_comm_overlap=(False,), optimizer="adam",
                optimizer_state_dtype="fp32", recompute_modules=_RM) -> LayerTable:
    """The :class:`LayerTable` of ``model`` at ``microbatch`` on ``archs``: every variant
    of the grids (as :func:`best_plans` takes them) priced once on every row;
    ``recompute_modules``: what its selective recomputation re-runs (one value)."""
    m_spec, archs, b, eff_rows = _model_args(model, archs, microbatch, efficiency)
    return _layer_table(m_spec, archs, b, eff_rows, tensor_parallel, sequence_parallel,
                        flash_attention, precision, fp8_rate, expert_parallel,
                        context_parallel, capacity_factor, tp_comm_overlap, optimizer,
                        optimizer_state_dtype, _plan.check("recompute_modules", recompute_modules))


def _layer_table(m_spec, archs, b, eff_rows, tensor_parallel, sequence_parallel,
                 flash_attention, precision, fp8_rate, expert_parallel, context_parallel,
                 capacity_factor, tp_comm_overlap=(False,), optimizer="adam",
                 optimizer_state_dtype="fp32", recompute_modules=_RM) -> LayerTable:
    if precision not in OPTIMIZER_BYTES_PER_PARAM:
        raise ValueError(f"precision must be one of {', '.join(OPTIMIZER_BYTES_PER_PARAM)}, "
                         f"got {precision!r}")
    optimizer, optimizer_state_dtype = _optimizer_args(optimizer, optimizer_state_dtype)
    ns_steps = _optim.NS_STEPS if _optim.OPTIMIZERS[optimizer].matrices else 0
    widths = _int_grid("tensor_parallel", tensor_parallel, 1)
    sps = _bool_grid("sequence_parallel", sequence_parallel)
    flashes = _bool_grid("flash_attention", flash_attention)
    # Tensor-parallel communication overlap never costs time (each exposed collective is
    # ≤ the collective, _layers.tp_overlap_exposed): with both in the grid only on is
    # priced, and it acts on the variants with sequence parallelism at t > 1 only.
    tpo = True in _bool_grid("tp_comm_overlap", tp_comm_overlap)
    eps = expert_parallel_grid(m_spec, expert_parallel)
    cps = context_parallel_grid(m_spec, context_parallel)
    rp = row_params(archs, eff_rows)
    ns = np.ascontiguousarray(archs["node_size"], dtype=np.int64)
    pricer = cost.prepare(archs, model="calibrated", efficiency=eff_rows)
    variants = _variants(m_spec, b, widths, sps, flashes, precision, cps, eps, capacity_factor)
    times = np.zeros((max(len(variants), 1), archs.shape[0]), dtype=kern.LAYER_TIMES)
    # every graph of every variant in one pass of the operator loop
    graphs = list(dict.fromkeys(g for *_knobs, mg in variants for layer in mg.kinds().values()
                                for g in (layer.forward, layer.backward)))
    priced = {g: intra for g, (_single, intra) in
              zip(graphs, pricer.op_latencies_many(graphs, fp8_rate=fp8_rate))}
    for k, (_t, _sp, _flash, _cp, _ep, mg) in enumerate(variants):
        times[k] = variant_times(mg, m_spec, pricer, rp, ns, fp8_rate, priced, tpo, ns_steps,
                                 recompute_modules)
    key = (m_spec, b, precision, tuple(widths), tuple(sps), tuple(flashes), tuple(cps),
           tuple(eps), capacity_factor, tpo, optimizer, optimizer_state_dtype,
           recompute_modules)
    try:
        hash(key)
    except TypeError:   # an unhashable model (a spec with list fields): no sharing
        key = None
    table = LayerTable(m_spec, b, precision, archs, rp, variants, times, key, tpo,
                       recompute_modules)
    table.optimizer, table.optimizer_state_dtype = optimizer, optimizer_state_dtype
    return table


def _optimizer_args(optimizer, optimizer_state_dtype) -> tuple:
    """The checked optimizer and its state datatype (``_optim``)."""
    if optimizer not in _optim.OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(_optim.OPTIMIZERS)}, "
                         f"got {optimizer!r}")
    if optimizer_state_dtype not in _optim.STATE_DTYPES:
        raise ValueError(f"optimizer_state_dtype must be one of "
                         f"{', '.join(_optim.STATE_DTYPES)}, got {optimizer_state_dtype!r}")
    return optimizer, optimizer_state_dtype


def best_plans(model, archs, *, devices, global_batch, microbatch, recompute="full",
               hbm_bytes=None, tensor_parallel=(1, 2, 4, 8), sequence_parallel=(False, True),
               flash_attention=(False, True), virtual_stages=None, zero_stage=(0, 1, 2, 3),
               overlap_grad_reduce=(False, True), precision="bf16", efficiency=None,
               fp8_rate=None, launchable=True, expert_parallel=None, context_parallel=None,
               capacity_factor=None, grad_reduce_dtype="fp32", overlap_param_gather=(False, True),
               reshard_after_forward=True, account_for_embedding=(False, True),
               tp_comm_overlap=(False,), optimizer="adam", optimizer_state_dtype="fp32",
               moe_dispatcher="alltoall", master_weights="separate"):
    """The fastest Megatron-launchable plan of one training iteration per architecture row,
    over every strategy knob, under :func:`phaze.step.training_step`'s model.

    ``model``: ModelSpec or zoo name (dense or mixture of experts); ``archs``: ARCH_DTYPE
    rows (n,); ``devices``: chips available (a plan uses t·cp·p·d ≤ devices of them);
    ``global_batch`` B and ``microbatch`` b (samples, one value each); ``recompute``: one
    mode, "none" | "selective" | "full"; ``hbm_bytes``: None (each row's ``hbm_gib``·2³⁰)
    or a capacity in bytes, one for all rows or an array (n,); the grids
    ``tensor_parallel`` (widths t), ``sequence_parallel``, ``flash_attention``,
    ``zero_stage`` (0–3), ``overlap_grad_reduce`` (booleans), ``virtual_stages`` (v values,
    or None: every v Megatron allows), ``expert_parallel`` (ep values, or None: every
    divisor of n_experts; (1,) for a dense model) and ``context_parallel`` (cp values, or
    None: :func:`context_parallel_grid`); ``capacity_factor``: None (balanced routing) or
    the MoE expert capacity factor (one value); ``precision`` "bf16" | "fp16" | "fp8" (the
    graphs' ``dtype``; fp8: ``fp8_rate``, the rows' fp8 tensor-rate multiplier as
    ``cost.op_latencies`` takes it — None: the template's; a row with 0 is refused
    there); ``grad_reduce_dtype`` "fp32" | "bf16" | "fp16" (one value: the gradient
    buffer's and the data-parallel reductions' datatype, ``phaze.plan``); ``optimizer``
    "adam" | "muon" and ``optimizer_state_dtype`` "fp32" | "bf16" (one value each: the
    optimizer's state, its elementwise step and Muon's Newton–Schulz GEMMs,
    ``phaze/step/_optim.py``; Muon searches ZeRO 0–1 only); ``master_weights`` "separate" |
    "params" (one value: where the fp32 master weights live, ``_optim``); ``efficiency``:
    None (``efficiency.for_rows(archs)``), a set's name, an Efficiency or an
    EFFICIENCY_DTYPE array with one set per row. ``launchable`` (default): only plans a
    trainer can launch — no ZeRO stage 2 with pipeline or context parallelism
    (Megatron-LM has ZeRO 0–1; DeepSpeed refuses 2–3 with a pipeline and has no ring
    attention; torchtitan has ZeRO 0 and 3), ZeRO 3 there only where torchtitan's FSDP2
    takes the datatypes (bf16 or fp8 training, fp32 reduction), and with a gradient datatype Megatron-LM refuses (fp16 under bf16 or
    fp8 training, bf16 under fp16: ``phaze.plan``'s rule) DeepSpeed's plans only
    (v = 1, cp = 1); False also prices those what-if plans; trainer names (e.g.
    ("megatron",): ``phaze search --emit``) exactly the plans one of them launches by
    ``phaze.plan``'s rules (``launched_mask``: Megatron-FSDP's ZeRO 2-3 at p = 1 only).

    Plans (as ``training_step`` and ``phaze.launch`` accept them): t of the grid that the
    model allows and that fits in the row's node; p dividing n_layers; d with
    t·cp·p·d ≤ devices and B divisible by b·d; ep dividing cp·d; cp > 1 only with flash
    attention and the sequence divisible by 2·cp; v = 1, and v > 1 when p ≥ 2, L divisible
    by p·v and m = B/(b·d) divisible by p; sequence parallelism only at t > 1 with
    seq_len/cp divisible by t (at t = 1 "on" is the same plan as "off", evaluated once and
    recorded False), and always at t > 1 for a mixture of experts; ZeRO 0–3 (at cp·d = 1
    every stage is the same plan: only the grid's first is evaluated). Feasible: every
    stage's memory ≤ the capacity. When both overlap_grad_reduce values are in the grid
    only True is evaluated: it is never slower (each exposed reduction is max(0, x −
    backward) ≤ x in floating point too) and holds the same memory. ``tp_comm_overlap``
    (booleans) likewise: with True in the grid the variants with sequence parallelism at
    t > 1 are priced with tensor-parallel communication overlap (never slower, the same
    memory), the others as they are.

    Returns a PLAN_DTYPE array (n,): per row the feasible plan of least ``time_s`` (inf,
    ``feasible`` False and a ``reason`` index into PLAN_REASONS when there is none). Ties
    go to the first plan in the loop order t (grid order), sequence parallelism, flash
    (grid order), cp (grid order), ep (grid order), p (ascending), d (ascending), v
    (ascending), ZeRO stage (grid order), overlap_grad_reduce. Time and breakdown equal
    ``training_step`` at the returned plan.

    Exact branch and bound: a plan is fully priced only when its lower bound
    (m + (p − 1)/v) · max over stages of (forward + backward + recomputation) does not
    exceed the best time found; the plan of least bound is priced first.
    """
    m_spec, archs, b, eff_rows = _model_args(model, archs, microbatch, efficiency)
    n_dev, B, recompute, vs_grid, zeros, ogrs, sharding = _plan_args(
        devices, global_batch, recompute, virtual_stages, zero_stage, overlap_grad_reduce,
        grad_reduce_dtype, overlap_param_gather, reshard_after_forward, account_for_embedding,
        moe_dispatcher, master_weights)
    table = _layer_table(m_spec, archs, b, eff_rows, tensor_parallel, sequence_parallel,
                         flash_attention, precision, fp8_rate, expert_parallel,
                         context_parallel, capacity_factor, tp_comm_overlap, optimizer,
                         optimizer_state_dtype)
    return _search_plans(table, table.rows, table.rp, table.node_size, table.times, n_dev, B,
                         recompute, hbm_bytes, vs_grid, zeros, ogrs, _launch_arg(launchable),
                         sharding)


def _launch_arg(launchable):
    """``best_plans``' checked ``launchable``: True or False, or the ids of the trainers
    named (a name or names: ``phaze.plan.TRAINERS`` ids or their ``emit`` names)."""
    if isinstance(launchable, (bool, np.bool_)):
        return bool(launchable)
    names = (launchable,) if isinstance(launchable, str) else tuple(launchable)
    if not names:
        raise ValueError("launchable must be True, False or trainer names (e.g. 'megatron'), "
                         "got none")
    return _plan.trainer_ids(names)


_PLAN_SETS = Memo(lambda: _config.STEP_PLAN_SET_CACHE_SIZE, "step.plan_sets")
"""(table key, plan settings, node sizes) -> :class:`_PlanSet`: a sweep's chunks share them."""


class _PlanSet:
    """Every plan of a table's variants under one set of plan-level settings, with what
    does not depend on the row: their records and peak memory, and Megatron's rank layout
    of each geometry cell on each of the table's node sizes (computed once per table and
    settings, shared by every subset of rows a search prices)."""

    def __init__(self, table, n_dev, B, recompute, vs_grid, zeros, ogrs, launchable,
                 sharding):
        grad_reduce_dtype = sharding.grad_reduce_dtype
        kept = [z for z in zeros if not _optim.refusal(table.optimizer, z)]
        if not kept:
            raise ValueError(_optim.refusal(table.optimizer, zeros[0]) + "; zero_stage must "
                             f"include one of {_optim.OPTIMIZERS[table.optimizer].zero_stages}")
        zeros = kept
        m_spec = table.model
        b = table.microbatch
        precision = table.precision
        ogrs = [True] if True in ogrs else [False]
        # Only DeepSpeed launches a gradient datatype Megatron-LM refuses: plain 1F1B, no
        # ring attention (its ZeRO rule is enumerate_plans').
        trainers = launchable if isinstance(launchable, tuple) else None
        deepspeed_only = launchable is True and _plan.refusal(
            "megatron-lm", {"precision": precision, "grad_reduce_dtype": grad_reduce_dtype},
            ("trainer",)) is not None
        keep = list(range(len(table.variants)))
        if deepspeed_only:
            vs_grid = [1]
            keep = [k for k in keep if table.variants[k][3] == 1]
        self.keep = None if len(keep) == len(table.variants) else keep
        self.variants = variants = [table.variants[k] for k in keep]
        nv = len(variants)
        if self.keep is None:
            self.sizes = table.sizes(recompute)
        else:
            self.sizes = np.zeros(max(nv, 1), dtype=kern.SIZES)
            if nv:
                self.sizes[:] = table.sizes(recompute)[keep]
        var_t = np.ones(max(nv, 1), dtype=np.int64)
        var_cp = np.ones(max(nv, 1), dtype=np.int64)
        var_ep = np.ones(max(nv, 1), dtype=np.int64)
        var_g = np.zeros(max(nv, 1), dtype=np.int64)
        var_sp = np.zeros(max(nv, 1), dtype=np.bool_)
        var_flash = np.zeros(max(nv, 1), dtype=np.bool_)
        groups = []
        for k, (t, sp, flash, cp, ep, _mg) in enumerate(variants):
            var_t[k], var_sp[k], var_flash[k], var_cp[k], var_ep[k] = t, sp, flash, cp, ep
            if (t, cp, ep) not in groups:
                groups.append((t, cp, ep))
            var_g[k] = groups.index((t, cp, ep))
        self.var_t = var_t
        grp = np.array(groups or [(1, 1, 1)], dtype=np.int64).reshape(-1, 3)
        L = m_spec.n_layers
        self.prefix = prefix = kind_prefix(m_spec)
        # d <= n_dev dividing B / b: the divisors of q = B / b, in pairs (i, q / i) for
        # i <= sqrt(q), O(sqrt(q)) steps whatever n_dev (a search may have 2**31 devices)
        q = B // b if B % b == 0 else 0
        ds = sorted({x for i in range(1, int(np.sqrt(q)) + 2) if q and q % i == 0
                     for x in (i, q // i) if x <= n_dev})
        z3_anywhere = _plan.refusal("torchtitan", {"precision": precision, "zero_stage": 3,
                                                   "grad_reduce_dtype": grad_reduce_dtype},
                                    ("trainer",)) is None
        # even splits (p dividing L), then the splits counting the embedding and the loss
        # as layers for the p that divide L + 2 and not L (enumerated as L + 2 layers:
        # Megatron's interleaving rule then reads (L + 2) % (p·v); chunks of 2 or more),
        # one enumeration each, their geometry cells numbered on
        plan_parts, geo_parts, acct_parts = [], [], []
        for acct in sorted(set(sharding.account_for_embedding)):
            if acct:
                ps = [p for p in range(2, (L + 2) // 2 + 1) if (L + 2) % p == 0 and L % p]
            else:
                ps = [p for p in range(1, L + 1) if L % p == 0]
            cols = kern.enumerate_plans(
                var_g, np.int64(nv), np.ascontiguousarray(grp[:, 0]),
                np.ascontiguousarray(grp[:, 1]), np.ascontiguousarray(grp[:, 2]),
                np.array(ps, dtype=np.int64), np.array(ds, dtype=np.int64), n_dev, B, b,
                L + 2 if acct else L, np.array(vs_grid or [0], dtype=np.int64),
                vs_grid is None, np.array(zeros, dtype=np.int64),
                np.array(ogrs, dtype=np.uint8), launchable is True, z3_anywhere)
            plan, geo = list(cols[:8]), cols[8:]
            if trainers is not None:
                # exactly the plans the target trainers launch (phaze.plan's rules)
                k = plan[0]
                ok = _plan.launched_mask(trainers, m_spec, dict(
                    zero_stage=plan[4], pipeline_parallel=plan[1], data_parallel=plan[2],
                    context_parallel=var_cp[k], expert_parallel=var_ep[k],
                    tensor_parallel=var_t[k], virtual_stages=plan[3],
                    overlap_grad_reduce=plan[5]), dict(
                    precision=precision, grad_reduce_dtype=grad_reduce_dtype,
                    reshard_after_forward=sharding.reshard_after_forward,
                    overlap_param_gather=sharding.overlap_param_gather,
                    optimizer=table.optimizer, master_weights=sharding.master_weights))
                plan = [c[ok] for c in plan]
            if acct:
                keep = (L + 2) // (plan[1] * plan[3]) >= 2
                plan = [c[keep] for c in plan]
            plan[7] = plan[7] + sum(g[0].shape[0] for g in geo_parts)
            plan_parts.append(plan)
            geo_parts.append(geo)
            acct_parts.append(np.full(plan[0].shape[0], acct, dtype=bool))

        def joined(parts, i):
            return np.ascontiguousarray(np.concatenate([part[i] for part in parts]))

        (plan_var, plan_p, plan_d, plan_v, plan_zero, plan_ogr, plan_m,
         plan_geo) = (joined(plan_parts, i) for i in range(8))
        geo_t, geo_cp, geo_ep, geo_p, geo_d = (joined(geo_parts, i) for i in range(5))
        plan_acct = np.concatenate(acct_parts)
        self.plan_var, self.plan_geo = plan_var, plan_geo
        self.ns_values = np.unique(table.node_size).astype(np.int64)
        self.geo_off, self.geo_stages, self.geo_cells = kern.build_geometry(
            geo_t, geo_cp, geo_ep, geo_p, geo_d, self.ns_values, n_dev)
        self.plans = plan_records(plan_p, var_t[plan_var], plan_d, var_cp[plan_var],
                                  var_ep[plan_var], plan_v, plan_m, L, plan_zero, plan_ogr,
                                  recompute, var_sp[plan_var], precision, grad_reduce_dtype,
                                  sharding.overlap_param_gather,
                                  sharding.reshard_after_forward, plan_acct,
                                  table.optimizer, table.optimizer_state_dtype,
                                  sharding.moe_dispatcher, 0, sharding.master_weights)
        self.plan_peak = kern.plan_memory(self.plans, plan_var, self.sizes, prefix)
        # the (variant, p, v) classes sharing one slot bound (search_rows)
        # (one int64 key per plan, mixed radix, in the lexicographic order of (variant, p,
        # v, acct): the classes and their numbering of np.unique over the stacked columns,
        # without its sort of multi-field records, seconds at millions of plans)
        radix_p = int(plan_p.max(initial=0)) + 1
        radix_v = int(plan_v.max(initial=0)) + 1
        key = ((plan_var * radix_p + plan_p) * radix_v + plan_v) * 2 + plan_acct
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        self.plan_slot = np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)
        self.slot_plan = np.ascontiguousarray(first, dtype=np.int64)
        # what a result row records of each plan (PLAN_DTYPE fields, by plan index)
        self.columns = {
            "tensor_parallel": var_t[plan_var], "pipeline_parallel": plan_p,
            "data_parallel": plan_d, "expert_parallel": var_ep[plan_var],
            "context_parallel": var_cp[plan_var], "virtual_stages": plan_v,
            "zero_stage": plan_zero, "sequence_parallel": var_sp[plan_var],
            "flash_attention": var_flash[plan_var], "overlap_grad_reduce": plan_ogr,
            "overlap_param_gather": np.full(plan_var.shape[0], sharding.overlap_param_gather),
            "account_for_embedding": plan_acct,
            "tp_comm_overlap": var_sp[plan_var] & table.tp_overlap,
            "devices_used": var_t[plan_var] * var_cp[plan_var] * plan_p * plan_d,
            "microbatches": plan_m}
        self.variants_planned = np.unique(plan_var) if plan_var.shape[0] else plan_var
        self._memory = {}

    def memory(self, k):
        """(peak bytes, MEMORY record) of plan k (memoised)."""
        hit = self._memory.get(k)
        if hit is None:
            vi = self.plan_var[k]
            mem = np.zeros(1, dtype=kern.MEMORY)
            peak = kern.peak_stage_memory(self.plans[k:k + 1], self.sizes[vi:vi + 1],
                                          self.prefix, mem)
            hit = self._memory[k] = (peak, mem[0])
        return hit


def _search_plans(table, archs, rp, ns, LT_all, n_dev, B, recompute, hbm_bytes, vs_grid,
                  zeros, ogrs, launchable, sharding) -> np.ndarray:
    """The plan search of :func:`best_plans` on checked inputs: the rows ``archs`` with
    their ``rp``, node sizes ``ns`` and the table's layer times ``LT_all`` of those rows."""
    n = archs.shape[0]
    if hbm_bytes is None:
        cap = np.floor(archs["hbm_gib"].astype(np.float64) * 2 ** 30)
    else:
        cap = np.asarray(hbm_bytes, dtype=np.float64).reshape(-1)
        if cap.shape[0] not in (1, n) or np.any(~(cap > 0)):
            raise ValueError(f"hbm_bytes must be None, or capacities in bytes > 0: one, or one "
                             f"per row ({n}); got {hbm_bytes!r}")
        cap = np.ascontiguousarray(np.broadcast_to(cap, (n,)))
    ps = table.plan_set(n_dev, B, recompute, vs_grid, zeros, ogrs, launchable, sharding)
    LT = LT_all if ps.keep is None else np.ascontiguousarray(
        LT_all[ps.keep] if ps.keep else np.zeros((1, n), dtype=kern.LAYER_TIMES))
    var_ok = np.ascontiguousarray(ps.var_t[:, None] <= ns[None, :])
    if not ps.variants:
        var_ok[:] = False
    row_nsi = np.ascontiguousarray(np.searchsorted(ps.ns_values, ns), dtype=np.int64)
    best_idx = np.full(n, -1, dtype=np.int64)
    best_bd = np.zeros(n, dtype=kern.BREAKDOWN)
    bounded, priced = kern.search_rows(ps.plans, ps.plan_var, ps.plan_geo, ps.plan_slot,
                                       ps.slot_plan, ps.plan_peak,
                                       ps.sizes, var_ok.view(np.uint8), LT, rp, cap, row_nsi,
                                       ps.geo_off, ps.geo_stages, ps.geo_cells, ps.prefix,
                                       best_idx, best_bd)
    table.plans_bounded += bounded
    table.plans_priced += priced

    out = np.zeros(n, dtype=PLAN_DTYPE)
    out["time_s"] = np.inf
    found = best_idx >= 0
    miss = np.flatnonzero(~found)
    if miss.size:
        # 1: some variant runs on the row but no plan fits; 2: none runs (no launchable plan)
        runs = var_ok[ps.variants_planned][:, miss].any(axis=0) if ps.variants_planned.size \
            else np.zeros(miss.size, dtype=bool)
        out["reason"][miss] = np.where(runs, 1, 2)
    rows = np.flatnonzero(found)
    if rows.size:
        k = best_idx[rows]
        bd = best_bd[rows]
        out["time_s"][rows] = bd["total_s"]
        out["feasible"][rows] = True
        for name, col in ps.columns.items():
            out[name][rows] = col[k]
        mem = {name: np.empty(rows.size, dtype=np.int64)
               for name in ("peak", "weights", "gradients", "optimizer_state", "activations",
                            "workspace")}
        for x, kk in enumerate(k.tolist()):
            peak, m = ps.memory(kk)
            mem["peak"][x] = peak
            mem["weights"][x] = m["weights"]
            mem["gradients"][x] = m["gradients"]
            mem["optimizer_state"][x] = m["optimizer_state"]
            mem["activations"][x] = m["activations"] + m["activations_other"]
            mem["workspace"][x] = m["workspace"]
        out["memory_bytes"][rows] = mem["peak"]
        out["weights_bytes"][rows] = mem["weights"]
        out["gradients_bytes"][rows] = mem["gradients"]
        out["optimizer_bytes"][rows] = mem["optimizer_state"]
        out["activations_bytes"][rows] = mem["activations"]
        out["workspace_bytes"][rows] = mem["workspace"]
        for name in ("forward_s", "backward_s", "recompute_s", "p2p_s", "bubble_s",
                     "dp_allreduce_s", "optimizer_s"):
            out[name][rows] = bd[name]
    return out


def step_lower_bounds(model, archs, *, devices, global_batch, microbatch, recompute,
                      tensor_parallel=(1, 2, 4, 8), sequence_parallel=(False, True),
                      flash_attention=(False, True), efficiency=None, precision="bf16",
                      fp8_rate=None, expert_parallel=None, context_parallel=None,
                      capacity_factor=None, tp_comm_overlap=(False,)):
    """A lower bound (seconds, (n,)) of :func:`best_plans`' ``time_s`` per row, for any
    pipeline/data split, virtual stages, ZeRO stage and overlap in those grids (inf where
    no tensor-parallel width of the grid is allowed on the row); the ``expert_parallel``,
    ``context_parallel`` grids and ``capacity_factor`` as :func:`best_plans` takes them.

    Any plan's pipeline time is at least m·slot ≥ m · (one microbatch's forward, backward
    and recomputation through all stages)/p, with m = B/(b·d) and t·cp·p·d ≤ devices: so
    ≥ B·t·cp·W / (b·devices), W the whole model's per-microbatch work of the (t, SP, flash,
    cp, ep) variant (its operators alone: the all-to-alls and the K/V exchanges' excess are
    left out). The bound is that, minimised over the variants, times (1 − 10⁻¹²) against
    rounding; bubbles, transfers, reductions and the optimizer are left out. Costs one
    pass of the layer pricing, no plan enumeration.
    """
    m_spec, archs, b, eff_rows = _model_args(model, archs, microbatch, efficiency)
    n_dev, B, recompute = _bound_args(devices, global_batch, recompute)
    table = _layer_table(m_spec, archs, b, eff_rows, tensor_parallel, sequence_parallel,
                         flash_attention, precision, fp8_rate, expert_parallel,
                         context_parallel, capacity_factor, tp_comm_overlap)
    return _lower_bounds(table, table.node_size, table.times, n_dev, B, recompute)


# ---------------------------------------------------------------------------
# what the energy model reads of a plan (step._energy, search._power; issue 28)
# ---------------------------------------------------------------------------

#: Short name → the ``PLAN_DTYPE`` field the energy model reads (the one place its knobs
#: are named).
PLAN_VIEW = {"t": "tensor_parallel", "p": "pipeline_parallel", "d": "data_parallel",
             "cp": "context_parallel", "ep": "expert_parallel", "zero": "zero_stage",
             "sp": "sequence_parallel", "flash": "flash_attention", "m": "microbatches",
             "fwd_s": "forward_s", "rec_s": "recompute_s", "opt_s": "optimizer_s",
             "devices": "devices_used"}


def plan_view(plans) -> dict:
    """:data:`PLAN_VIEW` of plan records (``PLAN_DTYPE`` rows, or a dict of their columns)."""
    names = plans.dtype.names if hasattr(plans, "dtype") else tuple(plans)
    return {k: np.asarray(plans[v]) for k, v in PLAN_VIEW.items() if v in names}


def step_view(plan: dict, breakdown) -> dict:
    """:data:`PLAN_VIEW` of one ``training_step`` (its ``plan`` dict and breakdown) as
    one-element arrays, with the effective sequence parallelism."""
    view = {k: np.asarray([plan[v]]) for k, v in PLAN_VIEW.items() if v in plan}
    view["sp"] = np.asarray([bool(plan.get(PLAN_VIEW["sp"] + "_effective", plan[PLAN_VIEW["sp"]]))])
    view["m"] = np.asarray([breakdown.microbatches])
    for k in ("fwd_s", "rec_s", "opt_s"):
        view[k] = np.asarray([getattr(breakdown, PLAN_VIEW[k])])
    view["devices"] = view["t"] * view["cp"] * view["p"] * view["d"]
    return view


def variant_graph(m_spec, microbatch, t, sp, flash, cp, ep, precision, capacity_factor=None):
    """The layer graphs of one variant (:func:`_variants`' ModelGraph)."""
    return _variants(m_spec, int(microbatch), [int(t)], [bool(sp)], [bool(flash)], precision,
                     [int(cp)], [int(ep)], capacity_factor if m_spec.is_moe else None)[0][-1]
