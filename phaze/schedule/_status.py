"""The schedule status vocabulary, defined once: names, codes derived from them, and the
compiled rule that picks a code (docs/design.md §2.5).

"optimal" (proved), "certified" (gap <= the requested gap), "limit" (no proof within the
gap in the time allowed; valid schedule, gap reported), "infeasible" (an architecture
without cores of a needed type, ``schedule_many`` only), "error" (the MILP failed; the
list schedule is returned, ``schedule_layer``/``milp_schedule`` only).
"""
from numba import njit

#: ``schedule_many`` status codes -> names (``STATUS_NAMES[code]``).
STATUS_NAMES = ("optimal", "certified", "limit", "infeasible", "error")
#: names -> codes.
STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}

# The codes the compiled kernels write (numba freezes these module globals at compile).
STATUS_OPTIMAL = STATUS_CODES["optimal"]
STATUS_CERTIFIED = STATUS_CODES["certified"]
STATUS_LIMIT = STATUS_CODES["limit"]
STATUS_INFEASIBLE = STATUS_CODES["infeasible"]

# Two makespans closer than this (relative) are treated as equal when deciding
# "optimal": the bound and the schedule are both exact float sums, so only
# rounding separates them.
_REL_EQ = 1e-12


@njit(cache=True, nogil=True)
def _status(makespan, lower_bound, optimal, gap):
    """Status code of a schedule: optimal when proved, certified within ``gap``, else limit."""
    if optimal:
        return STATUS_OPTIMAL
    if makespan - lower_bound <= gap * makespan:
        return STATUS_CERTIFIED
    return STATUS_LIMIT
