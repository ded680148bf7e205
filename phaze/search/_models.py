"""The search's cost models, each described once: what it prices and what it refuses.

A search, a point evaluation or a chunk is priced by one of two cost models, chosen once
at the entrance (``study=`` of :func:`phaze.search.search` and
:func:`phaze.search.evaluate_point`, ``--study`` on the command line) and looked up here
by name; the code below the entrance reads the record's fields instead of asking which
model it is:

- ``calibrated`` (the default): the Megatron-LM training step (``phaze.step``), with
  every strategy knob of ``phaze.plan`` searched inside a point, recomputation none,
  selective or full, Adam, mixtures of experts, even stages only;
- ``study``: the original study's model (operator schedules and the placement DP), its
  knob set alone (each strategy knob at its study value), recomputation none or full,
  SGD by default (Adam too), dense models, any cut of the layer chain into stages.

The pricing of a chunk (``_chunk.PRICING``), the evaluation of one point
(``_point.EVALUATE``) and the fixed-strategy baseline (``_baselines.FIXED``) are tables
keyed by :attr:`CostModel.name`.
"""
from __future__ import annotations

import dataclasses

from .. import plan as _plan

__all__ = ["CostModel", "COST_MODELS", "cost_model", "RECOMPUTE_MODES"]

#: Every recomputation mode, in order.
RECOMPUTE_MODES = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class CostModel:
    """One cost model of the search (module docstring).

    - ``name``: its key (``metadata["cost_model"]``, the tables' key); ``title``: how a
      sentence names it; ``choose``: how to choose it instead of the other ("pass
      study=True", "leave study off");
    - ``recompute_modes``: the recomputation modes it prices (also what an absent
      ``recompute`` means);
    - ``optimizer`` / ``optimizers``: its default optimizer and those it prices;
    - ``experts``: whether it prices a mixture of experts;
    - ``strategy_knobs``: whether it searches the strategy knobs of ``phaze.plan``
      (False: each must be left at its study value, ``Knob.study``);
    - ``schedule``: whether it has an operator schedule (a schedule ``gap``) and prices
      uneven stages (``stages=``);
    - ``summary``: the summary's cost-model sentence when it is fixed ("": built from the
      search's strategy grids).
    """

    name: str
    title: str
    choose: str
    recompute_modes: tuple
    optimizer: str
    optimizers: tuple
    experts: bool
    strategy_knobs: bool
    schedule: bool
    summary: str = ""

    def line(self, meta: dict) -> str:
        """The summary's sentence naming the cost model that priced the points."""
        if self.summary:
            return self.summary
        grids = meta.get("strategy_grids") or {}
        parts = _plan.grid_words(grids)
        # The one-value knobs besides the datatype, where a value other than the default was
        # given (MoE capacity factor, gradient-reduction datatype, ...).
        for name in _plan.GRIDS:
            knob = _plan.KNOB[name]
            value = grids.get(name)
            if knob.search == "one" and name != "precision" and value is not None \
                    and value != knob.default:
                parts.append(f"{knob.title} {value:g}" if knob.type is float
                             else f"{knob.title} {value}")
        optimizer = {"adam": "Adam", "muon": "Muon"}.get((meta.get("inputs") or {}).get("optimizer"),
                                                   "Adam")
        return (f"cost model: calibrated (Megatron-LM training step, phaze.step; "
                f"{grids.get('precision', 'bf16')}, {optimizer}); searched: {'; '.join(parts)}")


#: The cost models by name.
COST_MODELS = {
    "calibrated": CostModel(
        name="calibrated", title="the calibrated model", choose="leave study off",
        recompute_modes=RECOMPUTE_MODES, optimizer="adam", optimizers=("adam", "muon"),
        experts=True, strategy_knobs=True, schedule=False),
    "study": CostModel(
        name="study", title="the study's model", choose="pass study=True",
        recompute_modes=("none", "full"), optimizer="sgd", optimizers=("sgd", "adam"),
        experts=False, strategy_knobs=False, schedule=True,
        summary="cost model: study (the original study's operator schedules and placement "
                "over its knob set; --study)"),
}


def cost_model(study=False) -> CostModel:
    """The cost model a ``study`` switch chooses (True: the study's, False: the calibrated
    step model), or the record named by a string (files written before the calibrated
    model carry none: pass ``"study"``)."""
    if isinstance(study, str):
        if study not in COST_MODELS:
            raise ValueError(f"cost_model must be one of {', '.join(COST_MODELS)}, "
                             f"got {study!r}")
        return COST_MODELS[study]
    return COST_MODELS["study" if study else "calibrated"]
