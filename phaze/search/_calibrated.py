"""One chunk of the architecture space with the calibrated Megatron-LM step model
(``phaze.step``; the default cost model of :func:`phaze.search.search`).

For a chunk of architecture rows, every model, microbatch, HBM capacity and
recomputation mode ("none", "selective", "full"): ``phaze.step.best_plans`` gives
each row its fastest feasible Megatron-launchable plan, optimising inside the
point the tensor-parallel width t, the pipeline stages p (even: p divides the
transformer layers), the data-parallel degree d (dividing global batch /
microbatch; t·p·d ≤ devices), and the strategy grids of the settings: sequence
parallelism, flash attention, virtual stages (interleaved 1F1B), ZeRO stage,
overlapped gradient reduction, expert parallelism (a mixture of experts) and context
parallelism (t·cp·p·d ≤ devices). The row records the values chosen and the peak
stage's memory per GPU. The kernels take the whole chunk at once; Python loops
run per (model, microbatch, HBM, recomputation) only.

:class:`CalibratedPricing` plugs it into the one chunk runner (``_chunk.run_chunk``).
Pruning follows the runner's rules (``_chunk``'s module docstring) with the step model's
own valid bound: ``phaze.step.step_lower_bounds`` is a lower bound of
``best_plans``' time per batch for each row at one (model, microbatch,
recomputation) — whatever the HBM, which only removes plans — so global_batch
divided by it bounds the samples/s of every point above. ``prune="best"``
skips a point (or, over all of an architecture's points, the architecture) whose
bound lies below the best reached; ``prune="front"`` only when an evaluated
architecture of no more area beats the bound (one model: also below the
architecture's own best so far), so the best and the throughput-vs-area Pareto
front are those of the exhaustive sweep.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import cost, graph, step
from .. import plan as _plan
from . import _power
from ._inputs import model_expert_grid
from ._pricing import PointGroup, Pricing

#: Pruned sweeps price a chunk's architectures in batches of this many (best bound first),
#: raising the floor between batches. Larger than the study's ``SEARCH_PRUNE_BATCH``: a
#: ``best_plans`` call has a fixed cost (pricing every layer variant) that a batch shares.
CALIBRATED_PRUNE_BATCH = 64


def _stage_text(n_layers: int, p: int, v: int = 1, acct: bool = False) -> str:
    """Layers per stage of the split Megatron-LM builds, as 'a,b,c' chain positions:
    L/p transformer layers each (or, counting the embedding and loss as layers,
    ``step.stage_layers``' split), the embedding joining the first stage and the head the
    last (the study's rows count the same way)."""
    return _split_text(int(n_layers), int(p), int(v), bool(acct))


@functools.lru_cache(maxsize=4096)
def _split_text(n_layers: int, p: int, v: int, acct: bool) -> str:
    try:
        sizes = step.stage_layers(n_layers, p, v, acct) if p >= 1 else None
    except ValueError:
        sizes = None
    if not sizes:
        return ""
    sizes[0] += 1
    sizes[-1] += 1
    return ",".join(str(s) for s in sizes)


def _bounds_to_throughput(lower_s, global_batch) -> np.ndarray:
    """Samples/s upper bounds from time-per-batch lower bounds (inf where the bound is 0)."""
    lb = np.asarray(lower_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lb > 0, global_batch / lb, np.inf)


def layer_table(cfg, model_index, microbatch, archs):
    """``phaze.step.layer_table`` of one (model, microbatch) on ``archs`` with the settings'
    grids: every layer variant priced once, shared by the bounds and the plan searches of
    every recomputation mode and HBM capacity."""
    return step.layer_table(
        cfg.models[model_index], archs, microbatch=int(microbatch),
        tensor_parallel=tuple(cfg.widths[model_index]),
        sequence_parallel=tuple(cfg.sequence_parallel),
        flash_attention=tuple(cfg.flash_attention), precision=cfg.precision,
        fp8_rate=cfg.fp8_rate, optimizer=cfg.optimizer,
        optimizer_state_dtype=cfg.optimizer_state_dtype,
        recompute_modules=cfg.recompute_modules, **_parallel_grids(cfg, model_index))


def lower_bounds(cfg, table, recompute, rows=None) -> np.ndarray:
    """``phaze.step.step_lower_bounds`` of one recomputation mode on the rows ``rows`` of
    ``table`` (:func:`layer_table`; None: all): seconds per batch, a valid lower bound of
    :func:`phaze.step.best_plans`."""
    return np.asarray(table.lower_bounds(devices=int(cfg.devices),
                                         global_batch=int(cfg.global_batch),
                                         recompute=recompute, rows=rows), dtype=np.float64)


def check_context_grid(models, grids, devices) -> None:
    """Every model must keep one context-parallel width of the search's grid (``grids``:
    the checked strategy grids; None there: the widths its sequence allows): a width cp
    splits a sequence of s tokens into 2·cp whole chunks (cp for an encoder) and fits
    in the devices. One sentence naming the width, the model and the limit otherwise
    (a search in which no plan could launch would run to end saying only "no feasible
    point")."""
    grid = grids.get("context_parallel")
    if grid is None:
        return
    for m in models:
        chunks = 2 if m.causal else 1
        if any(cp == 1 or (cp <= devices and m.seq_len % (chunks * cp) == 0) for cp in grid):
            continue
        most = max((c for c in range(1, min(devices, m.seq_len // chunks) + 1)
                    if m.seq_len % (chunks * c) == 0), default=1)
        raise ValueError(f"context_parallel: no value of {','.join(map(str, grid))} fits "
                         f"{m.name}: cp must divide its {m.seq_len:,}-token sequence into "
                         f"{'2·cp' if chunks == 2 else 'cp'} whole chunks and be at most the "
                         f"{devices:,} devices, so at most {most:,} here")


def _parallel_grids(cfg, model_index) -> dict:
    """The expert- and context-parallel grids and capacity factor of one model, as
    ``phaze.step.best_plans`` takes them (a dense model: ep = 1 only)."""
    return dict(expert_parallel=model_expert_grid(cfg.models[model_index], cfg.expert_parallel),
                context_parallel=cfg.context_parallel,
                capacity_factor=cfg.capacity_factor if cfg.models[model_index].is_moe else None,
                tp_comm_overlap=tuple(cfg.tp_comm_overlap))


def plans_over_hbm(cfg, table, recompute, rows) -> list:
    """The best plans of the rows ``rows`` of ``table`` at every HBM capacity of the
    settings, in one plan search (its fixed cost per call is paid once; the layer times do
    not depend on the capacity): a list, per HBM value of ``cfg.hbm_gib``, of PLAN_DTYPE
    rows (one per row). A None capacity is each row's own, floored to whole bytes as
    ``best_plans`` floors it."""
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    archs = table.rows[rows]
    caps = [np.floor(np.asarray(archs["hbm_gib"], dtype=np.float64) * 2.0 ** 30) if h is None
            else np.full(n, float(h) * 2.0 ** 30) for h in cfg.hbm_gib]
    plans = table.best_plans(
        devices=int(cfg.devices), global_batch=int(cfg.global_batch), recompute=recompute,
        hbm_bytes=np.concatenate(caps),
        virtual_stages=None if cfg.virtual_stages is None else tuple(cfg.virtual_stages),
        zero_stage=tuple(cfg.zero_stage), overlap_grad_reduce=tuple(cfg.overlap_grad_reduce),
        grad_reduce_dtype=cfg.grad_reduce_dtype, moe_dispatcher=cfg.moe_dispatcher,
        master_weights=cfg.master_weights,
        overlap_param_gather=tuple(cfg.overlap_param_gather),
        reshard_after_forward=cfg.reshard_after_forward,
        account_for_embedding=tuple(cfg.account_for_embedding),
        launchable=tuple(cfg.trainers) or True,   # --emit X: the plans X launches
        rows=np.concatenate([rows] * len(caps)))
    return [plans[k * n:(k + 1) * n] for k in range(len(caps))]


def block_fwbw_seconds(model, archs, precision="bf16", fp8_rate=None) -> np.ndarray:
    """Forward + backward seconds of one transformer block at t = 1, microbatch 1, per
    architecture, on the calibrated operator model: the sum of the operators' intra-op
    latencies (one kernel stream, on the kernels Megatron-LM launches, in the search's
    datatype, as ``phaze.step`` prices a layer), each row with its own efficiency set
    (``phaze.arch.efficiency.for_rows``). What baseline (c), a placement-blind
    accelerator search, minimises under the calibrated model. A model with dense and
    mixture-of-experts blocks: the mean over its transformer blocks (each kind weighted by
    how many layers have it; expert parallelism 1)."""
    from ..arch import efficiency

    mg = graph.build_layers(model, 1, 1, kernels="megatron", dtype=precision)
    kinds = mg.kinds()
    eff = efficiency.for_rows(archs)
    blocks = [k for k in ("block", "moe_block") if k in kinds]
    counts = {k: sum(layer.count for layer in mg.layers if layer.kind == k) for k in blocks}
    total = np.zeros(len(archs))
    for kind in blocks:
        part = np.zeros(len(archs))
        for g in (kinds[kind].forward, kinds[kind].backward):
            _single, intra = cost.op_latencies(g, archs, model="calibrated", efficiency=eff,
                                               fp8_rate=fp8_rate)
            part += np.asarray(intra, dtype=np.float64).sum(axis=0)
        total = part if len(blocks) == 1 else total + part * counts[kind] / model.n_layers
    total[~np.isfinite(total)] = np.inf
    return total


def plan_reason(code) -> str:
    """The sentence of a ``PLAN_DTYPE`` reason code (``phaze.step.PLAN_REASONS``)."""
    reasons = step.PLAN_REASONS
    code = int(code)
    return str(reasons[code]) if 0 <= code < len(reasons) and reasons[code] else "infeasible"


def add_plans(rows, cfg, model_index, microbatch, recompute, hbm_gib, archs, arch_ids, plans,
              power, index):
    """Add one row per architecture of ``archs`` (ids ``arch_ids``; rows ``index`` of the
    chunk whose :class:`_power.ChunkPower` is ``power``) from its ``best_plans`` row, priced
    under the power budget; returns samples/s per architecture (0 where infeasible)."""
    n = len(plans)
    t_s = np.asarray(plans["time_s"], dtype=np.float64)
    feasible = np.asarray(plans["feasible"], dtype=bool) & np.isfinite(t_s) & (t_s > 0)
    hbm = (np.asarray(archs["hbm_gib"], dtype=np.float64) if hbm_gib is None
           else np.full(n, float(hbm_gib)))
    # the power budget: the step at the clock it leaves, and the power and cost columns
    t_s, capped, power = _power.power_columns(cfg, model_index, microbatch, power, index,
                                              plans, feasible, t_s, hbm)
    over = feasible & ~capped
    feasible = capped
    with np.errstate(divide="ignore", invalid="ignore"):
        sps = np.where(feasible, cfg.global_batch / t_s, 0.0)
    n_layers = int(cfg.models[model_index].n_layers)
    p = np.asarray(plans["pipeline_parallel"], dtype=np.int64)

    def knob(name, dtype, off):
        return np.where(feasible, np.asarray(plans[name]).astype(dtype), off)

    cols = rows.cols
    cols["model"].extend([model_index] * n)
    cols["arch_id"].extend(np.asarray(arch_ids, dtype=np.int64).tolist())
    cols["microbatch"].extend([int(microbatch)] * n)
    cols["hbm_gib"].extend(hbm.tolist())
    cols["recompute"].extend([recompute] * n)
    cols["feasible"].extend(feasible.tolist())
    cols["time_per_batch_s"].extend(np.where(feasible, t_s, math.inf).tolist())
    cols["samples_per_s"].extend(sps.tolist())
    cols["tensor_parallel"].extend(knob("tensor_parallel", np.int64, 0).tolist())
    cols["data_parallel"].extend(knob("data_parallel", np.int64, 0).tolist())
    cols["pipeline_parallel"].extend(knob("pipeline_parallel", np.int64, 0).tolist())
    cols["devices_used"].extend(knob("devices_used", np.int64, 0).tolist())
    v_col = knob("virtual_stages", np.int64, 1)
    acct_col = knob("account_for_embedding", bool, False)
    cols["stage_layers"].extend([_stage_text(n_layers, p[i], v_col[i], acct_col[i])
                                 if feasible[i] else "" for i in range(n)])
    cols["reason"].extend(["" if feasible[i] else POWER_REASON.format(cfg.max_power_w)
                           if over[i] else plan_reason(plans["reason"][i]) for i in range(n)])
    for name in _plan.STRATEGY_COLUMNS:      # the plan's strategy columns (``phaze.plan``)
        switch = _plan.KNOB[name].type is bool
        cols[name].extend(knob(name, bool if switch else np.int64, False if switch else 0)
                          .tolist())
    for name in ("memory_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                 "activations_bytes", "workspace_bytes"):
        cols[name].extend(np.where(feasible, np.asarray(plans[name], dtype=np.float64),
                                   math.nan).tolist())
    for name in _power.NAMES:
        cols[name].extend(power[name].tolist())
    return sps


#: The reason of a row whose step needs more power than the budget even at the lowest clock.
POWER_REASON = ("the step needs more than the power budget ({:g} W per chip) even at the "
                "lowest clock")


#: What a row without a plan records for the plan's integer strategy columns (0: none).
_NO_PLAN_SIZES = {name: 0 for name in _plan.STRATEGY_COLUMNS if _plan.KNOB[name].type is int}


def add_infeasible(rows, model_index, microbatch, recompute, hbm_gib, archs, arch_ids, reason):
    """Rows for architectures no plan can run on at all (e.g. no valid tensor-parallel width)."""
    for a, aid in enumerate(np.asarray(arch_ids, dtype=np.int64).tolist()):
        hbm = float(archs["hbm_gib"][a]) if hbm_gib is None else float(hbm_gib)
        rows.add(model=model_index, arch_id=aid, microbatch=int(microbatch), hbm_gib=hbm,
                 recompute=recompute, feasible=False, time_per_batch_s=math.inf,
                 samples_per_s=0.0, tensor_parallel=0, data_parallel=0, pipeline_parallel=0,
                 devices_used=0, stage_layers="", reason=reason,
                 **_NO_PLAN_SIZES)


class CalibratedPricing(Pricing):
    """The calibrated step model (module docstring) behind the chunk runner's interface
    (``_pricing.Pricing``): one point group per recomputation mode, holding every HBM
    capacity (the bound does not depend on it), priced by ``best_plans`` in one call.

    Bounds per (model, microbatch, recomputation). On every row of the chunk only for the
    grid's least recomputation: ``step_lower_bounds`` adds the recomputed work to the same
    sums, so its bound is the smallest of the modes and its throughput bound the largest,
    enough for skipping whole architectures. The other modes' (tighter) bounds are
    computed for the surviving architectures only.
    """

    def __init__(self, cfg, archs):
        super().__init__(cfg, archs)
        self._bounds = {}
        self._tables = {}
        self._power = None

    @property
    def power(self):
        """The chunk's :class:`_power.ChunkPower`, made at its first use."""
        if self._power is None:
            self._power = _power.ChunkPower(self.archs)
        return self._power

    def plan_counts(self) -> tuple:
        return (sum(t.plans_bounded for t in self._tables.values()),
                sum(t.plans_priced for t in self._tables.values()))

    def table(self, model_index, microbatch):
        """The chunk's :func:`layer_table` of one (model, microbatch), built once."""
        key = model_index, microbatch
        hit = self._tables.get(key)
        if hit is None:
            hit = self._tables[key] = layer_table(self.cfg, model_index, microbatch, self.archs)
        return hit

    @property
    def prune_batch(self) -> int:
        return CALIBRATED_PRUNE_BATCH

    def arch_bound(self, model_index, microbatch):
        cfg = self.cfg
        if not cfg.widths[model_index]:
            return None
        least = cfg.recompute[0]
        self._bounds[model_index, microbatch, least] = up = _bounds_to_throughput(
            lower_bounds(cfg, self.table(model_index, microbatch), least),
            int(cfg.global_batch))
        return up

    def block_seconds(self, model_index):
        cfg = self.cfg
        return block_fwbw_seconds(cfg.models[model_index], self.archs, cfg.precision,
                                  cfg.fp8_rate)

    def groups(self, model_index, microbatch, sub, sub_archs, sub_ids, point_bounds):
        cfg = self.cfg
        n_hbm = len(cfg.hbm_gib)
        least = cfg.recompute[0]
        for rc in cfg.recompute:
            if not cfg.widths[model_index]:
                price = functools.partial(_price_infeasible, cfg, model_index, microbatch, rc,
                                          sub_archs, sub_ids, "no valid tensor-parallel width")
                yield PointGroup(bound=None, points=n_hbm, price=price)
                continue
            table = self.table(model_index, microbatch)
            bound = None
            if point_bounds:
                bound = (self._bounds[model_index, microbatch, rc][sub] if rc == least else
                         _bounds_to_throughput(lower_bounds(cfg, table, rc, sub),
                                               int(cfg.global_batch)))
            price = functools.partial(_price_plans, cfg, model_index, microbatch, rc, table,
                                      sub, sub_archs, sub_ids, self.power)
            yield PointGroup(bound=bound, points=n_hbm, price=price)


def _price_plans(cfg, model_index, microbatch, recompute, table, sub, archs, arch_ids, power,
                 rows, batch):
    """A :class:`PointGroup` ``price``: the best plans of the architectures ``batch`` (in
    ascending order; indices into ``archs``, the rows ``sub`` of the chunk's ``table``) at
    every HBM capacity, one row each; samples/s (HBM values, len(batch)) aligned with
    ``batch``."""
    order = np.argsort(batch, kind="stable")
    ascending = batch[order]
    per_hbm = plans_over_hbm(cfg, table, recompute, sub[ascending])
    out = np.empty((len(per_hbm), len(batch)))
    for h, (hbm, plans) in enumerate(zip(cfg.hbm_gib, per_hbm)):
        out[h, order] = add_plans(rows, cfg, model_index, microbatch, recompute, hbm,
                                  archs[ascending], arch_ids[ascending], plans, power,
                                  sub[ascending])
    return out


def _price_infeasible(cfg, model_index, microbatch, recompute, archs, arch_ids, reason, rows,
                      batch):
    """A :class:`PointGroup` ``price`` of points no plan can run (``reason``): one infeasible
    row per HBM capacity and architecture of ``batch``; samples/s 0."""
    for hbm in cfg.hbm_gib:
        add_infeasible(rows, model_index, microbatch, recompute, hbm, archs[batch],
                       arch_ids[batch], reason)
    return np.zeros((len(cfg.hbm_gib), len(batch)))


def fixed_plan_best(cfg, model, row, t, p, d):
    """The best of one fixed t/p/d plan on one architecture ``row`` under the calibrated step
    model (``phaze.step.training_step``), over the settings' microbatch, HBM and
    recomputation grids and, as in every row of the search, their strategy grids (the
    plans ``phaze.step.best_plans`` considers at that t/p/d, without expert or context
    parallelism: the study's fixed strategies are for its dense models, and cp > 1 would
    take more than the t·p·d devices it fixes). Returns (the best as a
    dict with the fields of a result row, or None; the first reason a plan failed)."""
    spec = model
    n_layers = int(spec.n_layers)
    v_grid = cfg.virtual_stages
    if v_grid is None:
        per_stage = n_layers // p if n_layers % p == 0 else 0
        v_grid = tuple(v for v in range(1, per_stage + 1) if per_stage % v == 0) or (1,)
    if t * p * d > cfg.devices:
        return None, f"t·p·d = {t * p * d} devices, more than the {cfg.devices} available"
    hbm_values = [float(row["hbm_gib"][0]) if h is None else float(h) for h in cfg.hbm_gib]
    best, reason = None, None
    for mb in cfg.microbatch:
        for rc in cfg.recompute:
            for sp in cfg.sequence_parallel:
                for fa in cfg.flash_attention:
                    for v in v_grid:
                        for zero in cfg.zero_stage:
                            if p > 1 and d > 1 and not _plan.launchable(
                                    pipeline_parallel=p, data_parallel=d, zero_stage=zero,
                                    precision=cfg.precision,
                                    grad_reduce_dtype=cfg.grad_reduce_dtype):
                                continue   # no trainer launches it (best_plans' launchable)
                            for ogr in cfg.overlap_grad_reduce:
                                res = step.training_step(
                                    spec, row, tensor_parallel=t, pipeline_parallel=p,
                                    data_parallel=d, microbatch=mb,
                                    global_batch=cfg.global_batch, recompute=rc,
                                    virtual_stages=v, sequence_parallel=sp, flash_attention=fa,
                                    zero_stage=zero, overlap_grad_reduce=ogr,
                                    precision=cfg.precision,
                                    grad_reduce_dtype=cfg.grad_reduce_dtype,
                                    optimizer=cfg.optimizer,
                                    optimizer_state_dtype=cfg.optimizer_state_dtype,
                                    moe_dispatcher=cfg.moe_dispatcher,
                                    master_weights=cfg.master_weights,
                                    recompute_modules=cfg.recompute_modules,
                                    overlap_param_gather=True in cfg.overlap_param_gather,
                                    reshard_after_forward=cfg.reshard_after_forward,
                                    # Megatron's overlap runs on sequence parallelism:
                                    # on where the plan has it, as best_plans records it
                                    tp_comm_overlap=bool(sp) and t > 1
                                    and True in cfg.tp_comm_overlap)
                                if not res.ok:
                                    reason = reason or res.reason
                                    continue
                                peak = res.peak_memory
                                fits = [h for h in hbm_values if peak.total <= h * 2.0 ** 30]
                                if not fits:
                                    reason = reason or (
                                        f"{peak.total / 2 ** 30:.2f} GiB per device do not fit "
                                        f"in {max(hbm_values):g} GiB of HBM")
                                    continue
                                if best is not None and (cfg.global_batch / res.time_s
                                                         <= best["samples_per_s"]):
                                    continue   # a power cap only slows it: it cannot win
                                pw = _power.fixed_power(cfg, spec, row, res)
                                if not pw["power_feasible"]:
                                    reason = reason or POWER_REASON.format(cfg.max_power_w)
                                    continue
                                sps = cfg.global_batch / pw["time_s"]
                                if best is None or sps > best["samples_per_s"]:
                                    best = {
                                        **{k: pw[k] for k in _power.NAMES},
                                        "feasible": True, "microbatch": mb, "hbm_gib": min(fits),
                                        "recompute": rc, "time_per_batch_s": pw["time_s"],
                                        "samples_per_s": sps,
                                        "tokens_per_s": sps * spec.seq_len,
                                        "tensor_parallel": t, "pipeline_parallel": p,
                                        "data_parallel": d, "reason": "",
                                        "devices_used": t * p * d,
                                        "sequence_parallel": bool(sp), "virtual_stages": v,
                                        "zero_stage": zero, "flash_attention": bool(fa),
                                        "overlap_grad_reduce": bool(ogr),
                                        "overlap_param_gather":
                                            True in cfg.overlap_param_gather,
                                        "tp_comm_overlap": bool(sp) and t > 1
                                        and True in cfg.tp_comm_overlap,
                                        "account_for_embedding": False,
                                        "expert_parallel": 1, "context_parallel": 1,
                                        "memory_bytes": float(peak.total),
                                        "stage_layers": _stage_text(n_layers, p)}
    return best, reason
