"""What travels to a worker: a search's settings and one chunk's task (both picklable).

:class:`SearchSettings` holds everything a search fixes once its input is
checked (models, knob grids, limits); :class:`ChunkTask` adds what differs per
chunk (its architecture rows, and the pruning state at dispatch time). Both are
frozen dataclasses of plain values, numpy arrays and ``ModelSpec`` objects, so
they pickle for the local process pool and for Dask.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import plan as _plan


class _SettingsMethods:
    """What a :class:`SearchSettings` answers besides its fields."""

    __slots__ = ()

    @property
    def prune_mode(self) -> str:
        """``prune`` as one of "", "best", "front" (``True`` is the historical "best")."""
        if self.prune is True:
            return "best"
        return self.prune or ""

    def for_one_model(self, model_index: int):
        """The same grids for one of the models alone, without pruning (a baseline's
        full search of a single architecture)."""
        return dataclasses.replace(self, models=(self.models[model_index],),
                                   widths=(self.widths[model_index],), prune="")

    @property
    def points_per_arch(self) -> int:
        """Points evaluated per architecture: models × microbatches × HBM × recompute (the
        other strategy knobs are optimised inside a point)."""
        return len(self.models) * len(self.microbatch) * len(self.hbm_gib) * len(self.recompute)


_SETTINGS_DOC = """A checked search: the knob grids and limits every chunk works with.

    - ``models``: tuple of ``ModelSpec``; ``widths``: per model, the tuple of valid
      tensor-parallel widths t (those dividing heads and kv_heads).
    - ``devices``: identical chips; ``global_batch``: samples per batch;
      ``microbatch``: tuple of microbatch sizes (samples, each dividing global_batch).
    - ``hbm_gib``: tuple of HBM capacities (GiB per chip); a ``None`` entry keeps each
      architecture row's own capacity.
    - ``recompute``: tuple of recomputation modes ("none", "selective", "full";
      the study's model has "none" and "full" only); ``optimizer``: "sgd" or "adam".
    - ``study``: True prices every point with the original study's model (operator
      schedules and the placement DP: ``_chunk``); False (the default) with the
      calibrated Megatron-LM step model (``phaze.step.best_plans``: ``_calibrated``).
    - The strategy grids of the calibrated model, one field per knob of
      ``phaze.plan.GRIDS`` (generated from the table): a grid knob holds the tuple of
      values searched inside a row (an open integer grid None: every valid value per
      model, ``phaze.step.best_plans``' defaults; a dense model has ep = 1 only), a
      one-value knob its value (the capacity factor None: balanced MoE routing; the
      precision one datatype). The study's model has none of them (its grids are the
      study's values, ``phaze.plan.study_value``).
    - ``gap``: accepted relative schedule gap; ``prune``: "" (evaluate every point),
      "best" (skip points whose valid throughput upper bound lies below the best
      reached: the best is unchanged, the Pareto front may be partial) or "front" (skip
      a point only when an evaluated architecture of no more area beats its bound: the
      throughput-vs-area Pareto front is unchanged); ``True`` means "best".
    - ``fp8_rate``: fp8 only: the fixed chip's fp8 tensor-rate multiplier
      (``Chip.tensor_rate``); None for a space, whose rows are hypothetical chips at the
      template's rate (``phaze.arch.dtype_rates``).
    - ``max_power_w``: the power budget of one chip (issue 28): a point whose step needs
      more runs at the clock the cap leaves (``phaze.step.power_capped``), or is infeasible
      when even the lowest clock needs more; inf: no cap. ``objective``: what ranks the
      rows — "throughput" (samples/s), "perf-per-watt" (tokens per joule) or
      "perf-per-dollar" (least $ per million tokens).
    - ``trainers``: the trainer ids (``phaze.plan.TRAINERS``) whose plans the calibrated
      model searches (``phaze search --emit``: that trainer's); () any trainer's.
    """


def _grid_default(name):
    knob = _plan.KNOB[name]
    return _plan.grid(name, None) if knob.search == "grid" else knob.default


#: A checked search (its docstring lists the fields). The strategy fields come from
#: ``phaze.plan``'s table, with the search's defaults (every value).
SearchSettings = dataclasses.make_dataclass(
    "SearchSettings",
    [("models", tuple), ("widths", tuple), ("devices", int), ("global_batch", int),
     ("microbatch", tuple), ("hbm_gib", tuple), ("recompute", tuple), ("optimizer", str),
     ("gap", float), ("prune", object, dataclasses.field(default="")),
     ("study", bool, dataclasses.field(default=False))]
    + [(name, object, dataclasses.field(default=_grid_default(name))) for name in _plan.GRIDS]
    + [("fp8_rate", float, dataclasses.field(default=None)),
       ("max_power_w", float, dataclasses.field(default=float("inf"))),
       ("objective", str, dataclasses.field(default="throughput")),
       ("trainers", tuple, dataclasses.field(default=()))],
    bases=(_SettingsMethods,), frozen=True, namespace={"__doc__": _SETTINGS_DOC})
SearchSettings.__module__ = __name__   # pickles as phaze.search._settings.SearchSettings


@dataclasses.dataclass(frozen=True)
class ChunkTask:
    """One chunk of the architecture space, with the pruning state when it was dispatched.

    - ``archs``: structured architecture rows; ``arch_ids``: their ids (row numbers in
      the searched space; −1 for a row outside it, as a baseline's).
    - ``floors``: per model, the best samples/s an evaluated point has reached (0: none).
    - ``incumbents``: several models only: per kept architecture, its samples/s per model.
    - ``front``: pruning "front" only: rows (area mm², samples/s per model) of evaluated
      architectures none of which is beaten by another of no more area.
    - ``want_block``: also time one transformer block (t = 1, microbatch 1) per
      architecture, for the block-optimal baseline.
    """

    settings: SearchSettings
    chunk_id: int
    archs: np.ndarray
    arch_ids: np.ndarray
    floors: tuple = ()
    incumbents: tuple = ()
    front: tuple = ()
    want_block: bool = False


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    """What a worker returns for one chunk.

    ``columns``: dict of per-point columns (``phaze.search._chunk.COLUMNS``: model
    index, arch id, knobs, plan); ``pruned``: points skipped by a valid bound;
    ``block_fwbw_s``: (models, archs) seconds of one block's forward + backward, or
    None when not asked for. ``plans_bounded``, ``plans_priced``: the plans of the
    chunk's plan searches whose lower bound was formed and those priced in full (0 for the
    study's model, which searches no plans); ``busy_s``: the worker's wall seconds on the
    chunk.
    """

    chunk_id: int
    columns: dict
    pruned: int
    block_fwbw_s: np.ndarray = None
    plans_bounded: int = 0
    plans_priced: int = 0
    busy_s: float = 0.0
