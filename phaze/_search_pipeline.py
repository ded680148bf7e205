"""The work of one chunk of the architecture space (runs inside a worker process).

For a chunk of architecture rows and every model, microbatch and valid
tensor-parallel width: operator latencies → layer schedules (forward and
backward of each layer kind) → one placement problem per (architecture, HBM
capacity, recomputation) over all valid widths → ``solve_many``. Python loops
run per (model, microbatch, width, layer kind) and per (HBM, recomputation),
never per architecture inside the expensive steps: the kernels take the whole
chunk at once.

Pruning (``prune=True``) only skips work whose *valid* upper bound on
throughput lies strictly below a throughput already reached by an evaluated
point of the space, so it never changes the best answer:

* time per batch ≥ max over plans of the placement model's lower bound derived
  in :func:`time_per_batch_lower_bound` from per-layer forward+backward times;
* per-layer times are bounded below from the operator latencies alone by
  :func:`layer_lower_bounds` (critical path and per-resource work), so whole
  architectures can be skipped before ``schedule_many`` and the placement run.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from .schedule import layer_lower_bounds

#: Order of the layer kinds in a ModelGraph chain (embedding, block × n_layers, head).
LAYER_KINDS = ("embedding", "block", "head")


# --------------------------------------------------------------------------
# Backend: the real modules, looked up at call time (tests may substitute).
# --------------------------------------------------------------------------
def _real_backend():
    from . import cost, graph, placement, schedule

    return SimpleNamespace(
        build_layers=graph.build_layers,
        op_latencies=cost.op_latencies,
        roofline_bounds=cost.roofline_bounds,
        schedule_many=schedule.schedule_many,
        PlacementProblem=placement.PlacementProblem,
        solve_many=placement.solve_many,
    )


_BACKEND = None


def backend():
    """The functions the pipeline calls (phaze.graph/cost/schedule/placement)."""
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = _real_backend()
    return _BACKEND


def set_backend(namespace) -> None:
    """Replace the backend (tests only; ``None`` restores the real modules)."""
    global _BACKEND
    _BACKEND = namespace
    _LAYER_CACHE.clear()


# --------------------------------------------------------------------------
# Layer graphs, cached per worker: they depend on (model, microbatch, t) only.
# --------------------------------------------------------------------------
_LAYER_CACHE: dict = {}
_LAYER_CACHE_SIZE = 64


def model_graph(model, microbatch: int, tensor_parallel: int):
    key = (model, int(microbatch), int(tensor_parallel))
    mg = _LAYER_CACHE.get(key)
    if mg is None:
        if len(_LAYER_CACHE) >= _LAYER_CACHE_SIZE:
            _LAYER_CACHE.pop(next(iter(_LAYER_CACHE)))
        mg = backend().build_layers(model, int(microbatch), int(tensor_parallel))
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


def time_per_batch_lower_bound(total_s, max_layer_s, first_param_bytes, bandwidth,
                               devices: int, n_layers: int, microbatches: int,
                               stage_devices: int = 1) -> np.ndarray:
    """Valid lower bound on the placement model's time per batch, per architecture.

    ``total_s``: Σ over the chain of forward+backward seconds of each layer;
    ``max_layer_s``: the largest single-layer forward+backward; ``first_param_bytes``:
    parameter bytes of the chain's first layer (always in the first stage);
    ``bandwidth`` bytes/s; ``stage_devices``: devices every stage needs at least (the
    width t when every layer of the chain is tensor-parallel, else 1). For a plan with
    S stages and d replicas: every stage load is ≥ the forward+backward sum of its
    layers, so max load ≥ total/S and ≥ max_layer; d·S·stage_devices ≤ devices and
    S ≤ layers; time = max_load·(⌈m/d⌉ + S − 1) +
    4(d−1)·P_first/(bandwidth·d), and (c + S − 1)/S decreases in S. The bound is
    the minimum over d of the resulting expression.
    """
    total_s = np.asarray(total_s, dtype=np.float64)[:, None]
    max_layer_s = np.asarray(max_layer_s, dtype=np.float64)[:, None]
    bandwidth = np.asarray(bandwidth, dtype=np.float64)[:, None]
    if stage_devices > devices:
        return np.full(total_s.shape[0], np.inf)
    d = np.arange(1, min(devices // stage_devices, microbatches) + 1, dtype=np.float64)[None, :]
    c = np.ceil(microbatches / d)
    s_max = np.minimum(np.floor(devices / (d * stage_devices)), n_layers)
    pipeline = total_s * (c + s_max - 1.0) / s_max
    bound = np.maximum(pipeline, max_layer_s * c) + 4.0 * (d - 1.0) * first_param_bytes / (bandwidth * d)
    return bound.min(axis=1)


# --------------------------------------------------------------------------
# Plans → table columns
# --------------------------------------------------------------------------
def stage_summary(placement) -> tuple[int, int, str]:
    """(stages, devices used by one replica, layers per stage as 'a,b,c')."""
    stages = list(placement.stages or [])
    if not stages:
        return 0, 0, ""
    sizes = ",".join(str(len(ids)) for ids, _ in stages)
    return len(stages), int(sum(int(dev) for _, dev in stages)), sizes


COLUMNS = (  # name, dtype of the column the chunk returns
    ("model", np.int64), ("arch_id", np.int64), ("microbatch", np.int64), ("hbm_gib", np.float64),
    ("recompute", np.bool_), ("feasible", np.bool_), ("time_per_batch_s", np.float64),
    ("samples_per_s", np.float64), ("tensor_parallel", np.int64), ("data_parallel", np.int64),
    ("pipeline_parallel", np.int64), ("devices_used", np.int64), ("stage_layers", object),
    ("reason", object),
)


class _Rows:
    def __init__(self):
        self.cols = {name: [] for name, _ in COLUMNS}

    def add(self, **values):
        for name, _ in COLUMNS:
            self.cols[name].append(values[name])

    def arrays(self):
        return {name: np.array(self.cols[name], dtype=dt) for name, dt in COLUMNS}


# --------------------------------------------------------------------------
# The chunk
# --------------------------------------------------------------------------
def _latencies(model, mb, widths, archs, *, bounds=False):
    """Operator latencies of every layer graph: {(t, kind index, 0 fw | 1 bw): (single, intra)}.

    ``bounds``: cheap lower bounds on them instead (``phaze.cost.roofline_bounds``).
    """
    be = backend()
    fn = be.roofline_bounds if bounds else be.op_latencies
    out = {}
    for t in widths:
        for k, layer in enumerate(model_graph(model, mb, t).layers):
            for direction, g in enumerate((layer.forward, layer.backward)):
                out[t, k, direction] = fn(g, archs)
    return out


def _layer_times(model, mb, widths, lat, archs, gap, cols=None, lower_only=False):
    """Per width: (forward, backward) seconds per layer kind, shape (kinds, n_archs) each.

    ``cols`` selects architectures (columns of the latency arrays) and rows of ``archs``;
    ``lower_only`` returns the scheduling-free lower bounds instead of schedules.
    """
    be = backend()
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
                    dest[k] = layer_lower_bounds(g, single, intra, num_tc, num_vc)
                else:
                    makespan, _lb, status = be.schedule_many(g, single, intra, num_tc, num_vc, gap=gap)
                    ms = np.array(makespan, dtype=np.float64)
                    ms[~_schedule_ok(status) | ~np.isfinite(ms)] = np.inf
                    dest[k] = ms
        out[t] = (fw, bw)
    return out


def _throughput_upper_bounds(model, mb, widths, times, archs, devices, global_batch):
    """Valid upper bound on samples/s per architecture for one (model, microbatch)."""
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
        lb = time_per_batch_lower_bound(total, max_layer, first_param, bandwidth, devices, n_layers, m,
                                        stage_devices=t if all_tp else 1)
        best_time = np.minimum(best_time, lb)
    with np.errstate(divide="ignore"):
        return np.where(best_time > 0, global_batch / best_time, np.inf)


def run_chunk(task: dict) -> dict:
    """Evaluate every point of one chunk; returns {"chunk_id", "columns", "pruned", "block_fwbw_s"}.

    ``task`` keys: chunk_id, archs (structured rows), arch_ids, models (list of
    ModelSpec), widths (per model: list of valid t), devices, global_batch,
    microbatch, hbm_gib (tuple; None entries mean the row's own), recompute,
    optimizer, gap, prune, floors (per model: best samples/s reached so far, or 0),
    incumbents (several models: list of per-model throughput vectors of evaluated
    architectures), want_block (compute block fw+bw at t = 1, microbatch 1).
    """
    archs = task["archs"]
    arch_ids = np.asarray(task["arch_ids"], dtype=np.int64)
    models = task["models"]
    n_models = len(models)
    devices, global_batch = int(task["devices"]), int(task["global_batch"])
    gap = float(task["gap"])
    prune = bool(task.get("prune"))
    floors = [float(x) for x in task.get("floors") or [0.0] * n_models]
    incumbents = [np.asarray(v, dtype=np.float64) for v in task.get("incumbents") or []]
    be = backend()
    n_archs = len(archs)
    rows = _Rows()
    pruned = 0

    # Per-arch bound across all of a model's points, for arch-level pruning before scheduling.
    keep_arch = np.ones(n_archs, dtype=bool)
    lat_cache = {}
    if prune and n_archs:
        ub = np.zeros((n_models, n_archs))
        for mi, model in enumerate(models):
            widths = task["widths"][mi]
            for mb in task["microbatch"]:
                if not widths:
                    continue
                # The real operator latencies (kept for the survivors): their layer bounds are
                # as tight as the roofline's and the kernel is faster than the numpy roofline.
                lat_cache[mi, mb] = lat = _latencies(model, mb, widths, archs)
                lower = _layer_times(model, mb, widths, lat, archs, gap, lower_only=True)
                ub[mi] = np.maximum(ub[mi], _throughput_upper_bounds(
                    model, mb, widths, lower, archs, devices, global_batch))
        keep_arch = _survivors(ub, floors, incumbents)

    block = None
    if task.get("want_block"):
        block = np.full((n_models, n_archs), np.inf)
        for mi, model in enumerate(models):
            block[mi] = block_fwbw_seconds(model, archs, gap)

    n_points_arch = len(task["microbatch"]) * len(task["hbm_gib"]) * len(task["recompute"])
    pruned += int((~keep_arch).sum()) * n_points_arch * n_models
    sub = np.flatnonzero(keep_arch)
    if sub.size:
        sub_archs = archs[sub]
        for mi, model in enumerate(models):
            widths = list(task["widths"][mi])
            for mb in task["microbatch"]:
                m = global_batch // mb
                times = {}
                if widths:
                    lat = lat_cache.pop((mi, mb), None)
                    if lat is None:
                        lat = _latencies(model, mb, widths, sub_archs)
                        times = _layer_times(model, mb, widths, lat, sub_archs, gap)
                    else:
                        times = _layer_times(model, mb, widths, lat, archs, gap, cols=sub)
                point_ub = (_throughput_upper_bounds(model, mb, widths, times, sub_archs, devices,
                                                     global_batch)
                            if (prune and n_models == 1 and widths) else None)
                chains = _ChainArrays(model, mb, widths, times, sub.size) if widths else None
                for hbm in task["hbm_gib"]:
                    for rc in task["recompute"]:
                        order = np.arange(sub.size)
                        if point_ub is not None:
                            order = np.argsort(-point_ub, kind="stable")
                        # Solve in small batches so the floor rises inside the chunk too.
                        step = 16 if point_ub is not None else max(1, sub.size)
                        for lo in range(0, order.size, step):
                            batch = order[lo:lo + step]
                            if point_ub is not None:
                                skip = point_ub[batch] < floors[mi]
                                pruned += int(skip.sum())
                                batch = batch[~skip]
                                if not batch.size:
                                    continue
                            _solve_batch(be, rows, mi, mb, m, hbm, rc, widths, chains, sub_archs,
                                         arch_ids[sub], batch, devices, global_batch,
                                         task["optimizer"], floors)
    return {"chunk_id": int(task["chunk_id"]), "columns": rows.arrays(), "pruned": pruned,
            "block_fwbw_s": block}


def block_fwbw_seconds(model, archs, gap) -> np.ndarray:
    """Forward + backward makespan of one transformer block at t = 1, microbatch 1, per
    architecture (what baseline (c), a placement-blind accelerator search, minimises)."""
    be = backend()
    mg = model_graph(model, 1, 1)
    block = mg.layers[[layer.kind for layer in mg.layers].index("block")]
    total = np.zeros(len(archs))
    for g in (block.forward, block.backward):
        single, intra = be.op_latencies(g, archs)
        makespan, _lb, status = be.schedule_many(g, single, intra, archs["num_tc"].astype(np.int64),
                                                 archs["num_vc"].astype(np.int64), gap=gap)
        ms = np.array(makespan, dtype=np.float64)
        ms[~_schedule_ok(status) | ~np.isfinite(ms)] = np.inf
        total += ms
    return total


def _schedule_ok(status) -> np.ndarray:
    """Statuses whose makespan is a valid schedule."""
    st = np.asarray(status)
    if st.dtype.kind in "iu":  # codes: 0 optimal, 1 certified, 2 limit, 3 infeasible
        return st <= 2
    return np.isin(st.astype(str), ("optimal", "certified", "limit"))


def _survivors(ub, floors, incumbents) -> np.ndarray:
    """Architectures whose throughput upper bounds could still reach the best answer."""
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


def make_problem(**fields):
    """A PlacementProblem; through the trusted constructor when the placement module has one
    (the arrays built here are checked by construction: finite, non-negative, right shapes)."""
    cls = backend().PlacementProblem
    trusted = getattr(cls, "_from_trusted_arrays", None)
    return trusted(**fields) if trusted is not None else cls(**fields)


class _ChainArrays:
    """The chain's arrays for one (model, microbatch), stacked over widths once.

    ``fw``/``bw`` (W, L, n_archs) seconds per chain position; ``ok`` (W, n_archs) where
    every layer of that width got a schedule; static (W, L) / (W, L−1) byte arrays.
    """

    def __init__(self, model, mb, widths, times, n_archs):
        self.widths = np.array(widths, dtype=np.int64)
        kind_idx = [chain_kind_index(model_graph(model, mb, t)) for t in widths]
        self.fw = np.stack([times[t][0][k] for t, k in zip(widths, kind_idx)])
        self.bw = np.stack([times[t][1][k] for t, k in zip(widths, kind_idx)])
        self.ok = np.isfinite(self.fw).all(axis=1) & np.isfinite(self.bw).all(axis=1)
        statics = [chain_static(model_graph(model, mb, t)) for t in widths]
        self.P, self.A, self.T, self.E = (np.stack([st[i] for st in statics]) for i in range(4))
        self.layer_ids = np.arange(self.fw.shape[1], dtype=np.int64)

    def rows(self, sel):
        if sel is None:
            return self.P, self.A, self.T, self.E
        return self.P[sel], self.A[sel], self.T[sel], self.E[sel]


def _solve_batch(be, rows, mi, mb, m, hbm, rc, widths, chains, archs, arch_ids, batch, devices,
                 global_batch, optimizer, floors):
    problems, where = [], []
    net = archs["net_gb_per_s"]
    for a in batch:
        a = int(a)
        hbm_a = float(archs["hbm_gib"][a]) if hbm is None else float(hbm)
        if chains is None or not chains.ok[:, a].any():
            reason = ("no valid tensor-parallel width" if not widths
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
        problems.append(make_problem(
            widths=w, forward_s=fw, backward_s=bw, param_bytes=P, activation_bytes=A,
            tensor_parallel=T, edge_bytes=E, devices=devices, memory_bytes=hbm_a * 2.0 ** 30,
            bandwidth=float(net[a]) * 1e9, microbatches=m, recompute=bool(rc),
            optimizer=optimizer, layer_ids=chains.layer_ids))
        where.append((a, hbm_a))
    if not problems:
        return
    for (a, hbm_a), plan in zip(where, be.solve_many(problems)):
        feasible = bool(plan.feasible) and math.isfinite(float(plan.time_per_batch))
        tpb = float(plan.time_per_batch) if feasible else math.inf
        sps = global_batch / tpb if feasible and tpb > 0 else 0.0
        stages, dev, sizes = stage_summary(plan) if feasible else (0, 0, "")
        d = int(plan.data_parallel) if feasible else 0
        rows.add(model=mi, arch_id=arch_ids[a], microbatch=mb, hbm_gib=hbm_a, recompute=bool(rc),
                 feasible=feasible, time_per_batch_s=tpb, samples_per_s=sps,
                 tensor_parallel=int(plan.tensor_parallel) if feasible else 0, data_parallel=d,
                 pipeline_parallel=stages, devices_used=dev * d, stage_layers=sizes,
                 reason="" if feasible else str(plan.reason or "infeasible"))
        if sps > floors[mi]:
            floors[mi] = sps
