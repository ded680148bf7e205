"""phaze.step — the training step of a fixed plan as Megatron-LM runs it, and the plan
search over it (docs/design.md; the physics in ``_model``'s docstring).

The face re-exports; ``_model`` prices one plan (:func:`training_step`, memory per GPU),
``_layers`` prices the layers of every variant on architecture rows, ``_plans``
searches the plans of many rows (:func:`best_plans`, :func:`step_lower_bounds`;
:func:`layer_table` prices the layers once for both, a :class:`LayerTable` whose methods
run them on any subset of its rows; ``_bounds`` the bound's arithmetic), ``_kernels`` holds the compiled step arithmetic
they share; ``_energy`` counts a step's energy by part and the clock a power cap leaves
(:func:`plan_power`, :func:`energy_parts`, :func:`power_capped`, issue 28).
"""
from ._model import (OPTIMIZER_BYTES_PER_PARAM, PLAN_DTYPE, PLAN_REASONS, MemoryBreakdown,
                     StepBreakdown, StepResult, best_plans, ring_allgather_seconds,
                     ring_allreduce_seconds, stage_layers, step_lower_bounds, training_step)
from ._energy import (ENERGY_PARTS, chip_energy, clock_share, energy_parts, layer_sums,
                      plan_power, power_capped, take_sums, template_cap)
from ._layers import GRAD_REDUCE_BYTES, bytes_per_s
from ._plans import (LayerTable, context_parallel_grid, expert_parallel_grid, layer_table,
                     plan_view, step_view, variant_graph)

__all__ = ["OPTIMIZER_BYTES_PER_PARAM", "bytes_per_s", "StepBreakdown", "MemoryBreakdown", "StepResult",
           "training_step", "ring_allreduce_seconds", "ring_allgather_seconds", "stage_layers",
           "PLAN_DTYPE", "PLAN_REASONS", "best_plans", "step_lower_bounds",
           "context_parallel_grid", "expert_parallel_grid", "LayerTable", "layer_table",
           "ENERGY_PARTS", "energy_parts", "clock_share", "power_capped", "plan_power",
           "template_cap", "chip_energy", "GRAD_REDUCE_BYTES", "layer_sums", "take_sums",
           "plan_view", "step_view", "variant_graph"]
