"""The study's cost model for the chunk runner: operator latencies → layer schedules
(forward and backward of each layer kind) → one placement problem per (architecture, HBM
capacity, recomputation) over all valid widths → ``solve_many``.

Python loops run per (model, microbatch, width, layer kind) and per (HBM,
recomputation), never per architecture inside the expensive steps: the kernels take the
whole chunk at once. :class:`StudyPricing` plugs it into ``_chunk.run_chunk``; its
bounds (valid, so pruning never changes the best answer):

* time per batch ≥ the placement model's lower bound
  (``phaze.placement.time_per_batch_lower_bound``) from per-layer forward +
  backward times;
* per-layer times are bounded below from the operator latencies alone by
  ``phaze.schedule.layer_lower_bounds`` (critical path and per-resource work), so
  whole architectures can be skipped before ``schedule_many`` and the placement run.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .. import _config, cost, graph, placement, schedule
from .._cache import Memo
from ._pricing import PointGroup, Pricing

# --------------------------------------------------------------------------
# Layer graphs, cached per worker: they depend on (model, microbatch, t) only.
# --------------------------------------------------------------------------
_LAYER_CACHE = Memo(lambda: _config.SEARCH_LAYER_CACHE_SIZE, "search.layer_graphs")


def model_graph(model, microbatch: int, tensor_parallel: int):
    """``phaze.graph.build_layers(model, microbatch, tensor_parallel)``, memoised per process."""
    key = (model, int(microbatch), int(tensor_parallel))
    return _LAYER_CACHE.get_or_compute(
        key, lambda: graph.build_layers(model, int(microbatch), int(tensor_parallel)))


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
    gb_per_s = archs["net_gb_per_s"].astype(np.float64)
    # bytes/s; +inf (what the overflow would give) for a rate near the float maximum
    bandwidth = np.multiply(gb_per_s, 1e9, out=np.full(gb_per_s.shape, np.inf),
                            where=gb_per_s <= np.finfo(np.float64).max / 1e9)
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


def _solve_batch(rows, cfg, knobs, chains, archs, arch_ids, batch):
    """Solve the placement of architectures ``batch`` (indices into ``archs``, ids
    ``arch_ids``) at one knob combination and add their rows; returns their samples/s
    (aligned with ``batch``; 0 where infeasible).

    ``chains``: the :class:`ChainArrays` of (model, microbatch), None when the model has
    no valid width.
    """
    mi, mb, hbm, rc = knobs.model_index, knobs.microbatch, knobs.hbm_gib, knobs.recompute
    recompute_on = rc == "full"  # the study's model: "none" or "full"
    m = cfg.global_batch // mb
    problems, where = [], []
    out = np.zeros(len(batch))
    net = archs["net_gb_per_s"]
    for j, a in enumerate(batch):
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
        where.append((j, a, hbm_a))
    if not problems:
        return out
    for (j, a, hbm_a), plan in zip(where, placement.solve_many(problems)):
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
        out[j] = sps
    return out


class StudyPricing(Pricing):
    """The study's model (module docstring) behind the chunk runner's interface
    (``_pricing.Pricing``): one point group per (HBM, recomputation), priced by the
    placement DP on the schedules of (model, microbatch)."""

    def __init__(self, cfg, archs):
        super().__init__(cfg, archs)
        # the operator latencies of the bound pass, kept for the surviving architectures
        self._latencies = {}

    @property
    def prune_batch(self) -> int:
        return _config.SEARCH_PRUNE_BATCH

    def arch_bound(self, model_index, microbatch):
        cfg = self.cfg
        widths = cfg.widths[model_index]
        if not widths:
            return None
        model = cfg.models[model_index]
        # The real operator latencies (kept for the survivors): their layer bounds are as
        # tight as the roofline's and the kernel is faster than the numpy roofline.
        self._latencies[model_index, microbatch] = lat = latencies(model, microbatch, widths,
                                                                   self.archs)
        lower = layer_times(model, microbatch, widths, lat, self.archs, float(cfg.gap),
                            lower_only=True)
        return throughput_upper_bounds(model, microbatch, widths, lower, self.archs,
                                       int(cfg.devices), int(cfg.global_batch))

    def block_seconds(self, model_index):
        return block_fwbw_seconds(self.cfg.models[model_index], self.archs, float(self.cfg.gap))

    def groups(self, model_index, microbatch, sub, sub_archs, sub_ids, point_bounds):
        cfg = self.cfg
        model = cfg.models[model_index]
        widths = list(cfg.widths[model_index])
        gap = float(cfg.gap)
        times = {}
        if widths:
            lat = self._latencies.pop((model_index, microbatch), None)
            if lat is None:
                lat = latencies(model, microbatch, widths, sub_archs)
                times = layer_times(model, microbatch, widths, lat, sub_archs, gap)
            else:
                times = layer_times(model, microbatch, widths, lat, self.archs, gap, cols=sub)
        bound = (throughput_upper_bounds(model, microbatch, widths, times, sub_archs,
                                         int(cfg.devices), int(cfg.global_batch))
                 if (point_bounds and widths) else None)
        chains = ChainArrays(model, microbatch, widths, times) if widths else None
        for hbm in cfg.hbm_gib:
            for rc in cfg.recompute:
                knobs = _Knobs(model_index, microbatch, hbm, rc)
                price = functools.partial(_price_batch, cfg, knobs, chains, sub_archs, sub_ids)
                yield PointGroup(bound=bound, points=1, price=price)


def _price_batch(cfg, knobs, chains, archs, arch_ids, rows, batch):
    """A :class:`PointGroup` ``price`` of the study: :func:`_solve_batch` as one row of
    samples/s."""
    return _solve_batch(rows, cfg, knobs, chains, archs, arch_ids, batch)[None, :]
