"""The schedule status vocabulary, defined once: names, and codes derived from them
(docs/design.md §2.5); the compiled pipeline (``_solve``) reads its codes from here.

"optimal" (proved), "certified" (gap <= the requested gap), "limit" (no proof within the
gap in the time allowed; valid schedule, gap reported), "infeasible" (an architecture
without cores of a needed type, ``schedule_many`` only), "error" (the MILP failed; the
list schedule is returned, ``schedule_layer``/``milp_schedule`` only).
"""

#: ``schedule_many`` status codes -> names (``STATUS_NAMES[code]``).
STATUS_NAMES = ("optimal", "certified", "limit", "infeasible", "error")
#: names -> codes.
STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}

# Two makespans closer than this (relative) are treated as equal when deciding
# "optimal": the bound and the schedule are both exact float sums, so only
# rounding separates them.
_REL_EQ = 1e-12
