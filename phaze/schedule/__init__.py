"""Certified operator schedules of one layer on one multi-core chip (docs/design.md §2.5).

Given an :class:`~phaze.graph.OpGraph`, each operator's latency on one core of its
type (``single``) and intra-op over all cores of its type(s) (``intra``), both in
seconds, and the chip's ``num_tc`` tensor cores and ``num_vc`` vector cores, choose
per operator a mode (0 one core, 1 intra-op) and a start time minimising the
makespan, where

* an operator starts after all its predecessors finish;
* at most num_tc TCs and num_vc VCs are busy at once (a one-core GEMM holds one TC,
  a one-core vector operator one VC, a one-core fused operator one TC and one VC);
* an intra-op operator holds all cores and overlaps no other compute operator;
* collectives use the chip's link one at a time and may overlap any compute.

Methods: :func:`lower_bound`; :func:`list_schedule` (heuristic, always valid);
:func:`milp_schedule` (exact MILP in HiGHS); :func:`schedule_layer` "auto", which
splits the graph at *cut operators* (operators every other operator precedes or
follows: the makespan is then the sum of the parts' makespans), list-schedules
each part, solves small parts exactly by branch and bound and hands only parts
still outside the gap to the MILP; :func:`schedule_many` runs the same compiled
pipeline (without the MILP) over many architectures at once. A part still outside
the gap after its list schedule (makespan ub) gets a further bound: modes that cannot
appear in any schedule shorter than ub, then shorter than ub (1 - gap), are excluded
(the operator's start and finish bounds plus that mode's duration already reach it)
and the strong bound is recomputed on the restricted instance (``forced_bound``); a
part still open after that gets a local search over its mode vector, each vector
decoded by parallel (time-incremental) schedule generation (``mode_search``),
energetic reasoning just above ub (1 - gap), and last a bounded branch and bound
that looks only for schedules shorter than ub (1 - gap) (``bnb_search``:
node energies with the modes still able to beat that and one-core work counted
against the antichain width and the chains still active, cutset dominance on the
cores held and the releases, stand-ins for identical operators;
``phaze._config.SCHEDULE_OPEN_PART_NODES`` placements);
:func:`lower_bound` itself, which has no incumbent, does not include them.
:func:`schedule_many` solves each distinct (latencies, core counts) column once:
architectures that differ only in knobs the latencies do not see share a solve.

Status strings: "optimal" (proved), "certified" (gap <= requested gap), "limit"
(no proof within the gap in the time allowed; valid schedule, gap reported),
"infeasible" (an architecture without cores of a needed type, ``schedule_many``
only), "error" (the solver failed; the list schedule is returned). A :class:`Schedule`
keeps what the MILP solver said in ``message`` (HiGHS's model-status text, "" when no
MILP ran), as scipy's ``milp`` reports a status and a message.

Modules, by algorithm: ``_prepare`` (cut operators, segments, antichain widths,
reachability, hashes), ``_profile`` (resource profiles), ``_energy`` (fastest
durations, critical paths, chip energy), ``_windows`` and ``_bounds`` (lower bounds),
``_list`` (list scheduling and the mode search), ``_bnb`` (branch and bound and its
dominance table), ``_solve`` (the compiled per-chip pipeline), ``_milp`` (HiGHS),
``_driver`` (entry points, memo, threads), ``_inputs`` (the checks on the arguments),
``_check`` (the validator) and ``_status`` (the status vocabulary). This face only
re-exports (``_prepare`` for ``bench/bench_schedule.py``); no module imports it.

The kernels (``_profile`` .. ``_solve``, with ``_cdefs``: the operator kinds and
tolerance as C globals) are Cython extensions compiled at install (``setup.py``), so a
new process schedules at full speed without a JIT warm-up; they run without the GIL
(``schedule_many`` runs disjoint architecture ranges on threads). Each ``.pyx`` kept
the floating-point operations of the numba kernel it replaced in their order
(``setup.py`` turns off fused multiply-add), so the answers stayed bit for bit; each
has Python entry points (``_strong_bound``, ``_bnb_search``, ...) for the driver and
the tests.
"""
from ._check import check_schedule
from ._driver import (
    Schedule,
    clear_memo,
    layer_lower_bounds,
    list_schedule,
    lower_bound,
    milp_schedule,
    schedule_layer,
    schedule_many,
)
from ._prepare import _prepare
from ._status import STATUS_CODES, STATUS_NAMES

__all__ = [
    "Schedule", "schedule_layer", "schedule_many", "check_schedule", "lower_bound",
    "list_schedule", "milp_schedule", "layer_lower_bounds", "STATUS_NAMES", "STATUS_CODES",
    "clear_memo",
]
