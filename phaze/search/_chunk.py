"""The work of one chunk of the architecture space (runs inside a worker process): the one
chunk runner, with the cost model's pricing plugged in.

:data:`PRICING` holds the cost models' pricing strategies (``_pricing.Pricing``): the
study's (``_study.StudyPricing``: operator latencies → layer schedules → placement DP)
and the calibrated step model's (``_calibrated.CalibratedPricing``: ``phaze.step``'s
best plans); :func:`pricing_for` picks one from the settings, once per chunk. The runner
bounds the chunk's architectures, skips those that cannot matter, and prices the
surviving points group by group, best bound first in batches when pruning, so that the
floors rise inside the chunk too.

Pruning only skips work whose *valid* upper bound on throughput lies strictly
below a throughput already reached by an evaluated point. ``prune="best"``
compares with the best of the whole space, so it never changes the best answer
(but may drop Pareto points of smaller area). ``prune="front"`` compares an
architecture only with evaluated architectures of no more area (several models:
beaten in every model's bound, so on any normalised score), so it changes
neither the best answer nor the throughput-vs-area Pareto front. Each pricing
module's docstring gives its bounds.

The names other modules take from here (``model_graph``, ``latencies``,
``layer_times``, ``COLUMNS``, ``Rows`` …) are re-exported from the modules that define
them.
"""
from __future__ import annotations

import time

import numpy as np

from ._calibrated import CalibratedPricing
from ._models import cost_model
from ._pricing import COLUMNS, STUDY_KNOBS, PointGroup, Pricing, Rows
from ._settings import ChunkResult, ChunkTask
from ._study import (ChainArrays, StudyPricing, block_fwbw_seconds, chain_kind_index,
                     chain_static, latencies, layer_times, model_graph, schedule_ok,
                     stage_summary, throughput_upper_bounds)

__all__ = ["COLUMNS", "PRICING", "STUDY_KNOBS", "ChainArrays", "PointGroup", "Pricing", "Rows",
           "block_fwbw_seconds", "chain_kind_index", "chain_static", "dominated",
           "kept_architectures", "latencies", "layer_times", "model_graph", "pricing_for",
           "pruning_state", "run_chunk", "schedule_ok", "stage_summary", "staircase",
           "survivors", "throughput_upper_bounds"]

#: The pricing strategy of each cost model of the search, keyed by its name.
PRICING = {"study": StudyPricing, "calibrated": CalibratedPricing}


def pricing_for(cfg) -> type:
    """The :data:`PRICING` class of the settings' cost model (``SearchSettings.study``:
    the study's model, else the calibrated step model)."""
    return PRICING[cost_model(cfg.study).name]


# --------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------
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
    """Evaluate every point of one chunk (see :class:`ChunkTask` and :class:`ChunkResult`)
    with the settings' cost model (:func:`pricing_for`)."""
    t0 = time.perf_counter()
    cfg = task.settings
    archs = task.archs
    arch_ids = np.asarray(task.arch_ids, dtype=np.int64)
    pricing = pricing_for(cfg)(cfg, archs)
    n_models = len(cfg.models)
    mode = cfg.prune_mode
    prune = bool(mode)
    floors, incumbents, front = pruning_state(task)
    n_archs = len(archs)
    rows = Rows()
    pruned = 0

    # Per-arch bound across all of a model's points, for arch-level pruning before pricing.
    keep_arch = np.ones(n_archs, dtype=bool)
    if prune and n_archs:
        ub = np.zeros((n_models, n_archs))
        for mi in range(n_models):
            for mb in cfg.microbatch:
                up = pricing.arch_bound(mi, mb)
                if up is not None:
                    ub[mi] = np.maximum(ub[mi], up)
        keep_arch = kept_architectures(mode, ub, archs, floors, incumbents, front)

    block = None
    if task.want_block:
        block = np.full((n_models, n_archs), np.inf)
        for mi in range(n_models):
            block[mi] = pricing.block_seconds(mi)

    pruned += int((~keep_arch).sum()) * cfg.points_per_arch
    sub = np.flatnonzero(keep_arch)
    if sub.size:
        sub_archs = archs[sub]
        sub_ids = arch_ids[sub]
        # "front", one model: a point is skipped when its bound is below its architecture's
        # own best so far (the architecture's throughput is unchanged) or below the best
        # of an evaluated architecture of no more area (the architecture cannot be a
        # Pareto point then, and its throughput stays below that one's).
        own_best = np.zeros(sub.size)
        stair = staircase(sub_archs["area_mm2"], front) if mode == "front" else None
        point_bounds = prune and n_models == 1
        for mi in range(n_models):
            for mb in cfg.microbatch:
                for group in pricing.groups(mi, mb, sub, sub_archs, sub_ids, point_bounds):
                    bound = group.bound
                    order = np.arange(sub.size)
                    step = max(1, sub.size)
                    if bound is not None:
                        # Best bounds first, in batches, so the floor rises early.
                        order = np.argsort(-bound, kind="stable")
                        step = pricing.prune_batch
                    for lo in range(0, order.size, step):
                        batch = order[lo:lo + step]
                        if bound is not None:
                            if mode == "front":
                                skip = bound[batch] < np.maximum(own_best[batch], stair[batch])
                            else:
                                skip = bound[batch] < floors[mi]
                            pruned += int(skip.sum()) * group.points
                            batch = batch[~skip]
                            if not batch.size:
                                continue
                        sps = group.price(rows, batch).max(axis=0)
                        best = float(sps.max())
                        if best > floors[mi]:
                            floors[mi] = best
                        own_best[batch] = np.maximum(own_best[batch], sps)
    bounded, priced = pricing.plan_counts()
    return ChunkResult(chunk_id=int(task.chunk_id), columns=rows.arrays(), pruned=pruned,
                       block_fwbw_s=block, plans_bounded=int(bounded), plans_priced=int(priced),
                       busy_s=time.perf_counter() - t0)
