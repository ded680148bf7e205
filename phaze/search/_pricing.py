"""The cost-model interface of the chunk runner: what a chunk's rows are and how a cost model
plugs its pricing into :func:`phaze.search._chunk.run_chunk`.

A :class:`Pricing` is made once per chunk for one cost model (the study's,
``_study.StudyPricing``, or the calibrated step model's, ``_calibrated.CalibratedPricing``;
``_chunk.PRICING`` is the table that picks one from the settings). It answers three
questions, and the runner does the rest (pruning, batching, the floors):

* :meth:`Pricing.arch_bound` — a valid samples/s upper bound per architecture of the
  chunk over all points of one (model, microbatch), to skip whole architectures;
* :meth:`Pricing.block_seconds` — one transformer block's forward + backward seconds per
  architecture (the block-optimal baseline);
* :meth:`Pricing.groups` — the points of one (model, microbatch) on the surviving
  architectures as :class:`PointGroup` s, each with its bound and a ``price`` that adds
  the rows of a batch of architectures and returns their samples/s.
"""
from __future__ import annotations

import abc
import dataclasses
import math
from typing import Callable, Iterator

import numpy as np

from .. import plan as _plan

COLUMNS = (  # name, dtype of the column the chunk returns
    ("model", np.int64), ("arch_id", np.int64), ("microbatch", np.int64), ("hbm_gib", np.float64),
    ("recompute", object), ("feasible", np.bool_), ("time_per_batch_s", np.float64),
    ("samples_per_s", np.float64), ("tensor_parallel", np.int64), ("data_parallel", np.int64),
    ("pipeline_parallel", np.int64), ("devices_used", np.int64), ("stage_layers", object),
    ("reason", object),
    # the plan's strategy columns, as the knob table declares them (``phaze.plan``)
    *((name, {bool: np.bool_, int: np.int64}[_plan.KNOB[name].type])
      for name in _plan.STRATEGY_COLUMNS),
    ("memory_bytes", np.float64),
    ("weights_bytes", np.float64), ("gradients_bytes", np.float64), ("optimizer_bytes", np.float64),
    ("activations_bytes", np.float64), ("workspace_bytes", np.float64),
    # power and cost (issue 28; NaN for the study's model)
    *((name, np.float64) for name in ("power_w", "clock_fraction", "energy_per_step_j",
                                      "tokens_per_joule", "chip_cost_usd",
                                      "usd_per_million_tokens")),
)
#: What a study row records for the knobs its model does not have: the study's own
#: strategy (no sequence parallelism, plain 1F1B, no ZeRO, unfused attention, gradient
#: reduction after the backward) and no per-GPU memory breakdown (NaN: not recorded).
STUDY_KNOBS = {**{name: _plan.study_value(name) for name in _plan.STRATEGY_COLUMNS},
               "memory_bytes": math.nan, "weights_bytes": math.nan, "gradients_bytes": math.nan,
               "optimizer_bytes": math.nan, "activations_bytes": math.nan,
               "workspace_bytes": math.nan,
               **{name: math.nan for name in ("power_w", "clock_fraction", "energy_per_step_j",
                                              "tokens_per_joule", "chip_cost_usd",
                                              "usd_per_million_tokens")}}


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


@dataclasses.dataclass(frozen=True)
class PointGroup:
    """Points of one (model, microbatch) that a cost model prices together, on the chunk's
    surviving architectures.

    - ``bound``: per surviving architecture, a valid samples/s upper bound of every point
      of the group (None: no bound; the runner then prices all architectures at once);
    - ``points``: how many points per architecture the group holds (a skipped
      architecture counts that many pruned points);
    - ``price(rows, batch)``: adds the rows of the architectures ``batch`` (indices into
      the surviving ones) to ``rows`` and returns their samples/s, shape
      (points, len(batch)) aligned with ``batch`` (0 where infeasible).
    """

    bound: np.ndarray | None
    points: int
    price: Callable[[Rows, np.ndarray], np.ndarray]


class Pricing(abc.ABC):
    """How one cost model prices one chunk (module docstring); made with the chunk's
    settings and its architecture rows."""

    def __init__(self, cfg, archs):
        self.cfg = cfg
        self.archs = archs

    def plan_counts(self) -> tuple:
        """(plans bounded, plans priced in full) so far in this chunk, for a cost model
        that searches plans per point (the calibrated step model); (0, 0) otherwise."""
        return 0, 0

    @property
    @abc.abstractmethod
    def prune_batch(self) -> int:
        """Pruned sweeps price the surviving architectures in batches of this many (best
        bound first), raising the floor between batches."""

    @abc.abstractmethod
    def arch_bound(self, model_index: int, microbatch: int) -> np.ndarray | None:
        """Valid samples/s upper bound per architecture of the chunk over every point of
        (model, microbatch); None when the model has no valid tensor-parallel width."""

    @abc.abstractmethod
    def block_seconds(self, model_index: int) -> np.ndarray:
        """Forward + backward seconds of one transformer block per architecture of the chunk."""

    @abc.abstractmethod
    def groups(self, model_index: int, microbatch: int, sub: np.ndarray, sub_archs: np.ndarray,
               sub_ids: np.ndarray, point_bounds: bool) -> Iterator[PointGroup]:
        """The point groups of (model, microbatch) on the surviving architectures ``sub``
        (indices into the chunk; rows ``sub_archs``, ids ``sub_ids``), in the order their
        rows are written; ``point_bounds``: whether to give each group its bound."""
