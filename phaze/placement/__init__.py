"""phaze.placement — the original study's data × pipeline × tensor-parallel placement
model and its exact DP (docs/design.md §2.6).

The face re-exports; ``_model`` holds the problem and plan records, validation, the
stage costs and the driver, ``_bounds`` the lower bounds that prune a search, ``_dp.pyx``
the compiled DP.
"""
from ._bounds import lower_bound_time, time_per_batch_lower_bound
from ._model import (Placement, PlacementProblem, PlanBreakdown, StageCost, breakdown, evaluate,
                     load_phaze_json, problem_from_phaze_dict, solve, solve_many)

__all__ = ["PlacementProblem", "Placement", "StageCost", "PlanBreakdown", "load_phaze_json",
           "problem_from_phaze_dict", "solve", "solve_many", "evaluate", "breakdown",
           "lower_bound_time", "time_per_batch_lower_bound"]
