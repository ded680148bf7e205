"""The work of one chunk of the architecture space (runs inside a worker process).

For a chunk of architecture rows and every model, microbatch and valid
tensor-parallel width: operator latencies → layer schedules (forward and
backward of each layer kind) → one placement problem per (architecture, HBM
capacity, recomputation) over all valid widths → ``solve_many``. Python loops
run per (model, microbatch, width, layer kind) and per (HBM, recomputation),
never per architecture inside the expensive steps: the kernels take the whole
chunk at once.

Pruning only skips work whose *valid* upper bound on throughput lies strictly
below a throughput already reached by an evaluated point. ``prune="best"``
compares with the best of the whole space, so it never changes the best answer
(but may drop Pareto points of smaller area). ``prune="front"`` compares an
architecture only with evaluated architectures of no more area (several models:
beaten in every model's bound, so on any normalised score), so it changes
neither the best answer nor the throughput-vs-area Pareto front. The bounds:

* time per batch ≥ the placement model's lower bound
  (``phaze.placement.time_per_batch_lower_bound``) from per-layer forward +
  backward times;
* per-layer times are bounded below from the operator latencies alone by
  ``phaze.schedule.layer_lower_bounds`` (critical path and per-resource work), so
  whole architectures can be skipped before ``schedule_many`` and the placement run.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import _config, cost, graph, placement, schedule
from ._settings import ChunkResult, ChunkTask

# --------------------------------------------------------------------------
# Layer graphs, cached per worker: they depend on (model, microbatch, t) only.
# --------------------------------------------------------------------------
_LAYER_CACHE: dict = {}


def model_graph(model, microbatch: int, tensor_parallel: int):
    """``phaze.graph.build_layers(model, microbatch, tensor_parallel)``, memoised per process."""
    key = (model, int(microbatch), int(tensor_parallel))
    mg = _LAYER_CACHE.get(key)
    if mg is None:
        if len(_LAYER_CACHE) >= _config.SEARCH_LAYER_CACHE_SIZE:
            _LAYER_CACHE.pop(next(iter(_LAYER_CACHE)))
        mg = graph.build_layers(model, int(microbatch), int(tensor_parallel))
        _LAYER_CACHE[key] = mg
    return mg


def chain_kind_index(mg) -> np.ndarray:
    """For each position of the layer chain, the index of its layer in ``mg.layers``."""
    return np.repeat(np.arange(len(mg.layers)), [int(layer.count) for layer in mg.layers])


def chain_static(mg):
    """Arrays of the chain that do not depend on the architecture (one width).

    Returns (param_bytes, activation_bytes, tensor_parallel, edge_bytes) with
    lengths L, L, L, L−1: activation = the layer's stash, edge = the source layer's
    boundary bytes.
    """
    idx = chain_kind_index(mg)
    P = np.array([float(mg.layers[k].param_bytes) for k in idx])
    A = np.array([float(mg.layers[k].stash_bytes) for k in idx])
    T = np.array([bool(mg.layers[k].tensor_parallel) for k in idx])
    E = np.array([float(mg.layers[k].boundary_bytes) for k in idx[:-1]])
    return P, A, T, E


# --------------------------------------------------------------------------
# Plans → table columns
# --------------------------------------------------------------------------
def stage_summary(plan) -> tuple[int, int, str]:
    """(stages, devices used by one replica, layers per stage as 'a,b,c') of a Placement."""
    stages = list(plan.stages or [])
    if not stages:
        return 0, 0, ""
    sizes = ",".join(str(len(ids)) for ids, _ in stages)
    return len(stages), int(sum(int(dev) for _, dev in stages)), sizes


COLUMNS = (  # name, dtype of the column the chunk returns
    ("model", np.int64), ("arch_id", np.int64), ("microbatch", np.int64), ("hbm_gib", np.float64),
    ("recompute", object), ("feasible", np.bool_), ("time_per_batch_s", np.float64),
    ("samples_per_s", np.float64), ("tensor_parallel", np.int64), ("data_parallel", np.int64),
    ("pipeline_parallel", np.int64), ("devices_used", np.int64), ("stage_layers", object),
    ("reason", object), ("sequence_parallel", np.bool_), ("virtual_stages", np.int64),
    ("zero_stage", np.int64), ("flash_attention", np.bool_), ("overlap_grad_reduce", np.bool_),
    ("expert_parallel", np.int64), ("context_parallel", np.int64), ("memory_bytes", np.float64),
    ("weights_bytes", np.float64), ("gradients_bytes", np.float64), ("optimizer_bytes", np.float64), ("activations_bytes", np.float64),
    ("workspace_bytes", np.float64),
)
#: What a study row records for the knobs its model does not have: the study's own
#: strategy (no sequence parallelism, plain 1F1B, no ZeRO, unfused attention, gradient
#: reduction after the backward) and no per-GPU memory breakdown (NaN: not recorded).
STUDY_KNOBS = {"sequence_parallel": False, "virtual_stages": 1, "zero_stage": 0,
               "flash_attention": False, "overlap_grad_reduce": False, "expert_parallel": 1,
               "context_parallel": 1,
               "memory_bytes": math.nan, "weights_bytes": math.nan, "gradients_bytes": math.nan,
               "optimizer_bytes": math.nan, "activations_bytes": math.nan,
               "workspace_bytes": math.nan}


class Rows:
    """Column lists of the points a chunk has evaluated (one ``add`` per point; a column
    left out takes its :data:`STUDY_KNOBS` value)."""

    def __init__(self):
        self.cols = {name: [] for name, _ in COLUMNS}

    def add(self, **values):
        for name, _ in COLUMNS:
            self.cols[name].append(values[name] if name in values else STUDY_KNOBS[name])

    def arrays(self):
        return {name: np.array(self.cols[name], dtype=dt) for name, dt in COLUMNS}


# --------------------------------------------------------------------------
# Latencies → layer times → bounds
# --------------------------------------------------------------------------
def latencies(model, mb, widths, archs):
    """Operator latencies of every layer graph: {(t, kind index, 0 fw | 1 bw): (single, intra)},
    seconds, each (operators, architectures)."""
    out = {}
    for t in widths:
        for k, layer in enumerate(model_graph(model, mb, t).layers):
            for direction, g in enumerate((layer.forward, layer.backward)):
                out[t, k, direction] = cost.op_latencies(g, archs)
    return out


def schedule_ok(status) -> np.ndarray:
    """Where a ``schedule_many`` status (codes or names) marks a valid schedule: optimal,
    certified, or stopped at a limit with a feasible schedule."""
    st = np.asarray(status)
    if st.dtype.kind in "iu":  # codes in the order of schedule.STATUS_NAMES
        return st <= schedule.STATUS_CODES["limit"]
    return np.isin(st.astype(str), ("optimal", "certified", "limit"))


def layer_times(model, mb, widths, lat, archs, gap, cols=None, lower_only=False):
    """Per width: (forward, backward) seconds per layer kind, shape (kinds, n_archs) each
    (``inf`` where no valid schedule was found).

    ``lat``: :func:`latencies` of ``archs``; ``cols`` selects architectures (columns of
    the latency arrays) and rows of ``archs``; ``lower_only`` returns the
    scheduling-free lower bounds instead of schedules.
    """
    if cols is not None:
        archs = archs[cols]
    num_tc = archs["num_tc"].astype(np.int64)
    num_vc = archs["num_vc"].astype(np.int64)
    out = {}
    for t in widths:
        mg = model_graph(model, mb, t)
        fw = np.empty((len(mg.layers), len(archs)))
        bw = np.empty_like(fw)
        for k, layer in enumerate(mg.layers):
            for direction, (g, dest) in enumerate(((layer.forward, fw), (layer.backward, bw))):
                single, intra = lat[t, k, direction]
                if cols is not None:
                    single, intra = single[:, cols], intra[:, cols]
                single = np.ascontiguousarray(single, dtype=np.float64)
                intra = np.ascontiguousarray(intra, dtype=np.float64)
                if lower_only:
                    dest[k] = schedule.layer_lower_bounds(g, single, intra, num_tc, num_vc)
                else:
                    makespan, _lb, status = schedule.schedule_many(g, single, intra, num_tc, num_vc,
                                                                   gap=gap)
                    ms = np.array(makespan, dtype=np.float64)
                    ms[~schedule_ok(status) | ~np.isfinite(ms)] = np.inf
                    dest[k] = ms
        out[t] = (fw, bw)
    return out


def throughput_upper_bounds(model, mb, widths, times, archs, devices, global_batch) -> np.ndarray:
    """Valid upper bound on samples/s per architecture for one (model, microbatch).

    ``times``: :func:`layer_times` (schedules or their lower bounds) of ``archs``.
    """
    m = global_batch // mb
    best_time = np.full(len(archs), np.inf)
    bandwidth = archs["net_gb_per_s"].astype(np.float64) * 1e9
    for t in widths:
        mg = model_graph(model, mb, t)
        counts = np.array([float(layer.count) for layer in mg.layers])
        fw, bw = times[t]
        per_layer = fw + bw
        total = (per_layer * counts[:, None]).sum(axis=0)
        max_layer = per_layer.max(axis=0)
        n_layers = int(counts.sum())
        first_param = float(mg.layers[0].param_bytes)
        all_tp = all(bool(layer.tensor_parallel) for layer in mg.layers)
        lb = placement.time_per_batch_lower_bound(total, max_layer, first_param, bandwidth, devices,
                                                  n_layers, m, stage_devices=t if all_tp else 1)
        best_time = np.minimum(best_time, lb)
    with np.errstate(divide="ignore"):
        return np.where(best_time > 0, global_batch / best_time, np.inf)


def survivors(ub, floors, incumbents) -> np.ndarray:
    """Architectures whose throughput upper bounds ``ub`` (models, archs) could still reach
    the best answer."""
    n_models = ub.shape[0]
    if n_models == 1:
        return ub[0] >= floors[0]
    keep = np.ones(ub.shape[1], dtype=bool)
    # Several models: an architecture is skipped only when one already evaluated
    # architecture beats its upper bound for every model (then its normalised mean
    # is below that architecture's whatever the per-model bests turn out to be).
    for inc in incumbents:
        keep &= ~np.all(ub < inc[:, None], axis=0)
    return keep


def dominated(ub, area, front) -> np.ndarray:
    """Architectures that an evaluated architecture of no more area beats in every model.

    ``ub``: (models, archs) throughput upper bounds; ``area``: (archs,) mm²; ``front``:
    rows (area, samples/s per model) of evaluated architectures. Such an architecture
    has, in every model, less throughput than one of no more area, so whatever each
    model's normaliser turns out to be it is strictly below on the score: never on
    the Pareto front, never the best, never any model's best.
    """
    if not len(front):
        return np.zeros(ub.shape[1], dtype=bool)
    f = np.asarray(front, dtype=np.float64)
    no_more_area = f[:, 0][:, None] <= np.asarray(area, dtype=np.float64)[None, :]
    beats = np.all(f[:, 1:, None] > ub[None, :, :], axis=1)
    return (no_more_area & beats).any(axis=0)


def staircase(area, front) -> np.ndarray:
    """One model: per architecture, the best samples/s of an evaluated architecture of no
    more area (0 when none): a point whose bound lies below it cannot make its
    architecture a Pareto point."""
    if not len(front):
        return np.zeros(len(area))
    f = np.asarray(front, dtype=np.float64)
    no_more_area = f[:, 0][:, None] <= np.asarray(area, dtype=np.float64)[None, :]
    return np.where(no_more_area, f[:, 1][:, None], 0.0).max(axis=0)


def block_fwbw_seconds(model, archs, gap) -> np.ndarray:
    """Forward + backward makespan (seconds) of one transformer block at t = 1, microbatch 1,
    per architecture (what baseline (c), a placement-blind accelerator search, minimises)."""
    mg = model_graph(model, 1, 1)
    block = mg.layers[[layer.kind for layer in mg.layers].index("block")]
    total = np.zeros(len(archs))
    for g in (block.forward, block.backward):
        single, intra = cost.op_latencies(g, archs)
        makespan, _lb, status = schedule.schedule_many(
            g, single, intra, archs["num_tc"].astype(np.int64), archs["num_vc"].astype(np.int64),
            gap=gap)
        ms = np.array(makespan, dtype=np.float64)
        ms[~schedule_ok(status) | ~np.isfinite(ms)] = np.inf
        total += ms
    return total


# --------------------------------------------------------------------------
# The chunk
# --------------------------------------------------------------------------
def kept_architectures(mode, ub, archs, floors, incumbents, front) -> np.ndarray:
    """Which architectures a valid throughput upper bound ``ub`` (models × archs) keeps:
    with ``prune="front"`` those no evaluated architecture of no more area beats
    (:func:`dominated`), else those that can still reach a model's floor or beat an
    incumbent (:func:`survivors`)."""
    if mode == "front":
        return ~dominated(ub, archs["area_mm2"], front)
    return survivors(ub, floors, incumbents)


def pruning_state(task: ChunkTask):
    """The pruning state a chunk starts from: per model the best samples/s reached (a list:
    the floors rise inside the chunk as its points are solved), the incumbents'
    samples/s per model, and the front's rows (several models / ``prune="front"``)."""
    floors = [float(x) for x in task.floors or [0.0] * len(task.settings.models)]
    incumbents = [np.asarray(v, dtype=np.float64) for v in task.incumbents or []]
    return floors, incumbents, tuple(task.front or ())


def run_chunk(task: ChunkTask) -> ChunkResult:
    """Evaluate every point of one chunk (see :class:`ChunkTask` and :class:`ChunkResult`):
    with the study's model here, with the calibrated step model in ``_calibrated``."""
    cfg = task.settings
    if not cfg.study:
        from . import _calibrated  # imports this module: bound at call time

        return _calibrated.run_chunk(task)
    archs = task.archs
    arch_ids = np.asarray(task.arch_ids, dtype=np.int64)
    models = cfg.models
    n_models = len(models)
    devices, global_batch = int(cfg.devices), int(cfg.global_batch)
    gap = float(cfg.gap)
    mode = cfg.prune_mode
    prune = bool(mode)
    floors, incumbents, front = pruning_state(task)
    n_archs = len(archs)
    rows = Rows()
    pruned = 0

    # Per-arch bound across all of a model's points, for arch-level pruning before scheduling.
    keep_arch = np.ones(n_archs, dtype=bool)
    lat_cache = {}
    if prune and n_archs:
        ub = np.zeros((n_models, n_archs))
        for mi, model in enumerate(models):
            widths = cfg.widths[mi]
            for mb in cfg.microbatch:
                if not widths:
                    continue
                # The real operator latencies (kept for the survivors): their layer bounds are
                # as tight as the roofline's and the kernel is faster than the numpy roofline.
                lat_cache[mi, mb] = lat = latencies(model, mb, widths, archs)
                lower = layer_times(model, mb, widths, lat, archs, gap, lower_only=True)
                ub[mi] = np.maximum(ub[mi], throughput_upper_bounds(
                    model, mb, widths, lower, archs, devices, global_batch))
        keep_arch = kept_architectures(mode, ub, archs, floors, incumbents, front)

    block = None
    if task.want_block:
        block = np.full((n_models, n_archs), np.inf)
        for mi, model in enumerate(models):
            block[mi] = block_fwbw_seconds(model, archs, gap)

    pruned += int((~keep_arch).sum()) * cfg.points_per_arch
    sub = np.flatnonzero(keep_arch)
    if sub.size:
        sub_archs = archs[sub]
        # "front", one model: a point is skipped when its bound is below its architecture's
        # own best so far (the architecture's throughput is unchanged) or below the best
        # of an evaluated architecture of no more area (the architecture cannot be a
        # Pareto point then, and its throughput stays below that one's).
        own_best = np.zeros(sub.size)
        stair = staircase(sub_archs["area_mm2"], front) if mode == "front" else None
        for mi, model in enumerate(models):
            widths = list(cfg.widths[mi])
            for mb in cfg.microbatch:
                times = {}
                if widths:
                    lat = lat_cache.pop((mi, mb), None)
                    if lat is None:
                        lat = latencies(model, mb, widths, sub_archs)
                        times = layer_times(model, mb, widths, lat, sub_archs, gap)
                    else:
                        times = layer_times(model, mb, widths, lat, archs, gap, cols=sub)
                point_ub = (throughput_upper_bounds(model, mb, widths, times, sub_archs, devices,
                                                    global_batch)
                            if (prune and n_models == 1 and widths) else None)
                chains = ChainArrays(model, mb, widths, times) if widths else None
                for hbm in cfg.hbm_gib:
                    for rc in cfg.recompute:
                        order = np.arange(sub.size)
                        if point_ub is not None:
                            order = np.argsort(-point_ub, kind="stable")
                        # Solve in small batches so the floor rises inside the chunk too.
                        step = _config.SEARCH_PRUNE_BATCH if point_ub is not None else max(1, sub.size)
                        for lo in range(0, order.size, step):
                            batch = order[lo:lo + step]
                            if point_ub is not None:
                                if mode == "front":
                                    skip = point_ub[batch] < np.maximum(own_best[batch],
                                                                        stair[batch])
                                else:
                                    skip = point_ub[batch] < floors[mi]
                                pruned += int(skip.sum())
                                batch = batch[~skip]
                                if not batch.size:
                                    continue
                            _solve_batch(rows, cfg, _Knobs(mi, mb, hbm, rc), chains, sub_archs,
                                         arch_ids[sub], batch, floors, own_best)
    return ChunkResult(chunk_id=int(task.chunk_id), columns=rows.arrays(), pruned=pruned,
                       block_fwbw_s=block)


class ChainArrays:
    """The chain's arrays for one (model, microbatch), stacked over widths once.

    ``fw``/``bw`` (W, L, n_archs) seconds per chain position; ``ok`` (W, n_archs) where
    every layer of that width got a schedule; static (W, L) / (W, L−1) byte arrays.
    """

    def __init__(self, model, mb, widths, times):
        self.widths = np.array(widths, dtype=np.int64)
        kind_idx = [chain_kind_index(model_graph(model, mb, t)) for t in widths]
        self.fw = np.stack([times[t][0][k] for t, k in zip(widths, kind_idx)])
        self.bw = np.stack([times[t][1][k] for t, k in zip(widths, kind_idx)])
        self.ok = np.isfinite(self.fw).all(axis=1) & np.isfinite(self.bw).all(axis=1)
        statics = [chain_static(model_graph(model, mb, t)) for t in widths]
        self.P, self.A, self.T, self.E = (np.stack([st[i] for st in statics]) for i in range(4))
        self.layer_ids = np.arange(self.fw.shape[1], dtype=np.int64)

    def rows(self, sel):
        """Static arrays of the widths ``sel`` (None: all)."""
        if sel is None:
            return self.P, self.A, self.T, self.E
        return self.P[sel], self.A[sel], self.T[sel], self.E[sel]


@dataclasses.dataclass(frozen=True)
class _Knobs:
    """One training-knob combination of a chunk: model (index into the settings' models),
    microbatch (samples), HBM (GiB per chip; None: each row's own), recomputation."""

    model_index: int
    microbatch: int
    hbm_gib: float
    recompute: str


def _solve_batch(rows, cfg, knobs, chains, archs, arch_ids, batch, floors, own_best=None):
    """Solve the placement of architectures ``batch`` (indices into ``archs``, ids
    ``arch_ids``) at one knob combination, add their rows and raise the model's floor.

    ``chains``: the :class:`ChainArrays` of (model, microbatch), None when the model has
    no valid width; ``floors``: per model, the best samples/s reached so far;
    ``own_best``: per architecture of ``archs``, its best samples/s so far (raised too).
    """
    mi, mb, hbm, rc = knobs.model_index, knobs.microbatch, knobs.hbm_gib, knobs.recompute
    recompute_on = rc == "full"  # the study's model: "none" or "full"
    m = cfg.global_batch // mb
    problems, where = [], []
    net = archs["net_gb_per_s"]
    for a in batch:
        a = int(a)
        hbm_a = float(archs["hbm_gib"][a]) if hbm is None else float(hbm)
        if chains is None or not chains.ok[:, a].any():
            reason = ("no valid tensor-parallel width" if chains is None
                      else "no layer schedule found for any width")
            rows.add(model=mi, arch_id=arch_ids[a], microbatch=mb, hbm_gib=hbm_a, recompute=rc,
                     feasible=False, time_per_batch_s=math.inf, samples_per_s=0.0, tensor_parallel=0,
                     data_parallel=0, pipeline_parallel=0, devices_used=0, stage_layers="",
                     reason=reason)
            continue
        if chains.ok[:, a].all():
            sel = None
            fw, bw, w = chains.fw[:, :, a], chains.bw[:, :, a], chains.widths
        else:
            sel = np.flatnonzero(chains.ok[:, a])
            fw, bw, w = chains.fw[sel, :, a], chains.bw[sel, :, a], chains.widths[sel]
        P, A, T, E = chains.rows(sel)
        # The trusted constructor: these arrays are finite, non-negative and shaped by
        # construction, and validating each of the sweep's many problems would cost more
        # than solving it.
        problems.append(placement.PlacementProblem.from_trusted_arrays(
            widths=w, forward_s=fw, backward_s=bw, param_bytes=P, activation_bytes=A,
            tensor_parallel=T, edge_bytes=E, devices=cfg.devices, memory_bytes=hbm_a * 2.0 ** 30,
            bandwidth=float(net[a]) * 1e9, microbatches=m, recompute=recompute_on,
            optimizer=cfg.optimizer, layer_ids=chains.layer_ids))
        where.append((a, hbm_a))
    if not problems:
        return
    for (a, hbm_a), plan in zip(where, placement.solve_many(problems)):
        feasible = bool(plan.feasible) and math.isfinite(float(plan.time_per_batch))
        tpb = float(plan.time_per_batch) if feasible else math.inf
        sps = cfg.global_batch / tpb if feasible and tpb > 0 else 0.0
        stages, dev, sizes = stage_summary(plan) if feasible else (0, 0, "")
        d = int(plan.data_parallel) if feasible else 0
        rows.add(model=mi, arch_id=arch_ids[a], microbatch=mb, hbm_gib=hbm_a, recompute=rc,
                 feasible=feasible, time_per_batch_s=tpb, samples_per_s=sps,
                 tensor_parallel=int(plan.tensor_parallel) if feasible else 0, data_parallel=d,
                 pipeline_parallel=stages, devices_used=dev * d, stage_layers=sizes,
                 reason="" if feasible else str(plan.reason or "infeasible"),
                 # The placement model's bytes per device of its fullest stage.
                 memory_bytes=(float(max(plan.stage_memory)) if feasible and plan.stage_memory
                               else math.nan))
        if sps > floors[mi]:
            floors[mi] = sps
        if own_best is not None and sps > own_best[a]:
            own_best[a] = sps
