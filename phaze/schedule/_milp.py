"""Exact layer scheduling as a mixed-integer program solved by HiGHS (``highspy``).

The original study's formulation with the collective rule of docs/design.md §2.5:

* ``S_i`` start (continuous), ``x_i`` intra-op binary, ``C`` makespan; duration
  ``d_i = s_i + (a_i - s_i) x_i`` is linear in ``x_i``;
* precedence ``S_j >= S_i + d_i`` for every edge, ``C >= S_i + d_i`` for every sink;
* for each pair the DAG leaves unordered and that may conflict, an ordering binary
  ``o`` and a conflict binary ``r`` with big-M disjunctions (inactive when r = 0);
  ``r >= x_i``, ``r >= x_j`` (an intra-op operator overlaps no compute operator);
  two collectives always conflict (one link);
* per-core assignment binaries ``z`` only for a core type whose operators can be more
  numerous at one instant (widest antichain, Dilworth) than its cores:
  ``sum_c z_ic + x_i = 1`` and ``r_ij >= z_ic + z_jc - 1``.

Times are scaled by the incumbent's makespan, so every big-M is 1 and the solver's
absolute tolerances act relatively. The solver's answer fixes modes and pairwise orders;
start times are then recomputed exactly (longest path over precedence plus the chosen
orders), so the returned schedule is valid to the last bit, not to the solver tolerance.

:func:`solve` returns a :class:`MilpResult`: the schedule, a status from the one
vocabulary of ``phaze.schedule`` (``_status``) and HiGHS's own model-status message, as
scipy's ``milp`` reports ``status`` and ``message``.
"""
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR
from ._prepare import _widest_antichain
from ._solve import _status
from ._status import STATUS_NAMES

#: HiGHS model statuses (``highspy.HighsModelStatus`` member names) after which the best
#: point found is a usable answer: proved optimal, or stopped by a limit with the
#: incumbent (a valid MIP start) still feasible. Every other status (load, model,
#: presolve, solve or postsolve error, infeasible or unbounded although a feasible start
#: was given, unknown, memory limit) means the solver failed: status "error".
HIGHS_USABLE = frozenset({"kOptimal", "kTimeLimit", "kIterationLimit", "kSolutionLimit",
                          "kObjectiveBound", "kObjectiveTarget", "kInterrupt",
                          "kHighsInterrupt"})


@dataclass(frozen=True, eq=False)
class MilpResult:
    """One MILP solve of a (sub)graph, in its local operator order.

    starts: float64 start times in seconds; modes: int8 (0 one core, 1 intra-op);
    makespan, lower_bound: seconds (the schedule's makespan and the best bound proved);
    proved: HiGHS proved optimality (gap <= 1e-9); status: one of ``STATUS_NAMES``
    ("optimal", "certified", "limit" or "error"; see :func:`status_of`); message: HiGHS's
    model-status text ("Optimal", "Time limit reached", ...), or why HiGHS did not run.
    """

    starts: np.ndarray
    modes: np.ndarray
    makespan: float
    lower_bound: float
    proved: bool
    status: str
    message: str


def status_of(model_status, proved, makespan, lower_bound, gap) -> str:
    """The ``phaze.schedule`` status of a solve that ended in HiGHS's ``model_status`` (a
    ``highspy.HighsModelStatus`` or its member name): "error" unless the status is in
    ``HIGHS_USABLE``; else "optimal" when ``proved``, "certified" when
    makespan - lower_bound <= gap x makespan, "limit" otherwise."""
    name = model_status if isinstance(model_status, str) else model_status.name
    if name not in HIGHS_USABLE:
        return "error"
    return STATUS_NAMES[_status(makespan, lower_bound, bool(proved), gap)]

_BANNER_SILENCED = False


def _new_highs():
    """A silent ``highspy.Highs``: the first construction in a process prints a version
    banner straight to the C-level stdout, before any option can be set, so that one
    construction runs with file descriptors 1 and 2 pointed at /dev/null."""
    global _BANNER_SILENCED
    import highspy

    if _BANNER_SILENCED:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = (os.dup(1), os.dup(2))
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            h = highspy.Highs()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.close(devnull)
        _BANNER_SILENCED = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    return h


def _reach(m, preds):
    """reach[i, j]: j is reachable from i (i precedes j)."""
    reach = np.zeros((m, m), dtype=bool)
    for j in range(m):  # local order is topological
        for p in preds[j]:
            reach[:, j] |= reach[:, p]
            reach[p, j] = True
    return reach


def _core_assignment(users, starts, finish, n_cores):
    """Interval colouring of the one-core operators of one type (by start time)."""
    core = {}
    free_at = np.full(n_cores, -np.inf)
    for i in sorted(users, key=lambda i: (starts[i], finish[i])):
        c = int(np.argmin(free_at))
        cands = np.flatnonzero(free_at <= starts[i])
        if cands.size:
            c = int(cands[0])
        core[i] = c
        free_at[c] = max(free_at[c], finish[i])
    return core


def solve(kind, ds, da, preds, ntc, nvc, inc_starts, inc_modes, lower, gap, time_limit):
    """MILP over one (sub)graph with local topologically ordered indices.

    ``preds[j]``: local predecessor indices. ``inc_starts``/``inc_modes``: a valid
    incumbent (MIP start and big-M source). ``lower``: a proven lower bound (seconds).
    ``gap``: HiGHS's ``mip_rel_gap`` and the gap of the status; ``time_limit``: seconds.
    Returns a :class:`MilpResult`; when HiGHS fails (status "error") it holds the
    incumbent and ``lower``."""
    import highspy

    m = len(kind)
    inc_starts = np.asarray(inc_starts, dtype=np.float64)
    inc_modes = np.asarray(inc_modes, dtype=np.int8)
    dur_inc = np.where(inc_modes == 1, da, ds)
    inc_finish = inc_starts + dur_inc
    ub = float(inc_finish.max()) if m else 0.0
    if ub <= 0.0:
        return MilpResult(inc_starts, inc_modes, ub, ub, True, "optimal",
                          "HiGHS not run: the incumbent's makespan is 0 s")
    scale = ub
    s = ds / scale
    a = da / scale
    is_coll = kind == KIND_COLLECTIVE
    # intra-op is possible only where it is faster (else dominated) and the op is compute
    can_intra = (~is_coll) & (da < ds)
    reach = _reach(m, preds)
    unordered = ~(reach | reach.T)
    succ_count = np.zeros(m, dtype=int)
    for j in range(m):
        for p in preds[j]:
            succ_count[p] += 1

    uses_tc = ((kind == KIND_GEMM) | (kind == KIND_FUSED)) & (ds > 0)
    uses_vc = ((kind == KIND_VECTOR) | (kind == KIND_FUSED)) & (ds > 0)
    assign = []  # (type mask, cores)
    for mask, cap in ((uses_tc, ntc), (uses_vc, nvc)):
        users = np.flatnonzero(mask)
        # _widest_antichain takes anc[j, i] = i precedes j, the transpose of reach.
        if users.size > cap and _widest_antichain(users, reach.T) > cap:
            assign.append((mask, int(cap)))

    # --- columns ---------------------------------------------------------
    lo, hi, cost, integ = [], [], [], []

    def col(lower_, upper_, c=0.0, integer=False):
        lo.append(lower_)
        hi.append(upper_)
        cost.append(c)
        integ.append(integer)
        return len(lo) - 1

    # start windows from the critical path (faster modes): head_i <= S_i <= 1 - tail_i,
    # which tightens every big-M row
    dmin = np.where(can_intra, np.minimum(s, a), s)
    head = np.zeros(m)
    for j in range(m):
        for p in preds[j]:
            head[j] = max(head[j], head[p] + dmin[p])
    tail = dmin.copy()
    for i in range(m - 1, -1, -1):
        for j in range(i + 1, m):
            if i in preds[j]:
                tail[i] = max(tail[i], dmin[i] + tail[j])
    S = [col(min(head[i], 1.0), max(min(head[i], 1.0), 1.0 - tail[i])) for i in range(m)]
    X = [col(0.0, 1.0 if can_intra[i] else 0.0, integer=True) for i in range(m)]
    Cmax = col(max(0.0, lower / scale * (1 - 1e-9)), 1.0, 1.0)
    Z = []  # per assignment type: dict op -> list of columns
    for mask, cap in assign:
        Z.append({int(i): [col(0.0, 1.0, integer=True) for _ in range(cap)] for i in np.flatnonzero(mask)})

    rows_lo, rows_hi, rows = [], [], []

    def row(entries, lower_, upper_):
        rows.append(entries)
        rows_lo.append(lower_)
        rows_hi.append(upper_)

    inf = highspy.kHighsInf
    for j in range(m):
        for p in preds[j]:
            row([(S[j], 1.0), (S[p], -1.0), (X[p], -(a[p] - s[p]))], s[p], inf)
    for i in range(m):
        if succ_count[i] == 0:
            row([(Cmax, 1.0), (S[i], -1.0), (X[i], -(a[i] - s[i]))], s[i], inf)
    for zt in Z:
        for i, cols in zt.items():
            row([(c, 1.0) for c in cols] + [(X[i], 1.0)], 1.0, 1.0)

    pairs = []  # (i, j, o column, r column or -1)
    for i in range(m):
        for j in range(i + 1, m):
            if not unordered[i, j]:
                continue
            if is_coll[i] and is_coll[j]:
                o = col(0.0, 1.0, integer=True)
                row([(S[i], 1.0), (S[j], -1.0), (o, 1.0)], -inf, 1.0 - s[i])
                row([(S[j], 1.0), (S[i], -1.0), (o, -1.0)], -inf, -s[j])
                pairs.append((i, j, o, -1))
                continue
            if is_coll[i] or is_coll[j]:
                continue
            shared = [zt for (mask, _), zt in zip(assign, Z) if i in zt and j in zt]
            if not (can_intra[i] or can_intra[j] or shared):
                continue
            o = col(0.0, 1.0, integer=True)
            r = col(0.0, 1.0, integer=True)
            row([(S[i], 1.0), (S[j], -1.0), (X[i], a[i] - s[i]), (o, 1.0), (r, 1.0)], -inf, 2.0 - s[i])
            row([(S[j], 1.0), (S[i], -1.0), (X[j], a[j] - s[j]), (o, -1.0), (r, 1.0)], -inf, 1.0 - s[j])
            if can_intra[i]:
                row([(r, 1.0), (X[i], -1.0)], 0.0, inf)
            if can_intra[j]:
                row([(r, 1.0), (X[j], -1.0)], 0.0, inf)
            for zt in shared:
                for ci, cj in zip(zt[i], zt[j]):
                    row([(r, 1.0), (ci, -1.0), (cj, -1.0)], -1.0, inf)
            pairs.append((i, j, o, r))

    # --- model from arrays -------------------------------------------------
    n_col = len(lo)
    lp = highspy.HighsLp()
    lp.num_col_ = n_col
    lp.num_row_ = len(rows)
    lp.col_cost_ = np.array(cost, dtype=np.float64)
    lp.col_lower_ = np.array(lo, dtype=np.float64)
    lp.col_upper_ = np.array(hi, dtype=np.float64)
    lp.row_lower_ = np.array(rows_lo, dtype=np.float64)
    lp.row_upper_ = np.array(rows_hi, dtype=np.float64)
    start = np.zeros(len(rows) + 1, dtype=np.int32)
    index, value = [], []
    for k, entries in enumerate(rows):
        for c, v in entries:
            if v != 0.0:
                index.append(c)
                value.append(v)
        start[k + 1] = len(index)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n_col
    lp.a_matrix_.num_row_ = len(rows)
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=np.float64)
    lp.integrality_ = [highspy.HighsVarType.kInteger if t else highspy.HighsVarType.kContinuous
                       for t in integ]

    h = _new_highs()
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", float(gap))
    h.setOptionValue("mip_abs_gap", 1e-12)
    h.setOptionValue("time_limit", float(time_limit))
    h.passModel(lp)

    # --- MIP start from the incumbent ----------------------------------------
    val = np.zeros(n_col)
    val[S] = inc_starts / scale
    val[X] = inc_modes
    val[Cmax] = 1.0
    cores = []
    for (mask, cap), zt in zip(assign, Z):
        users = [i for i in zt if inc_modes[i] == 0]
        core = _core_assignment(users, inc_starts, inc_finish, cap)
        cores.append(core)
        for i, c in core.items():
            val[zt[i][c]] = 1.0
    for i, j, o, r in pairs:
        first_i = (inc_starts[i], inc_finish[i]) <= (inc_starts[j], inc_finish[j])
        val[o] = 1.0 if first_i else 0.0
        if r >= 0:
            same = any(i in core and j in core and core[i] == core[j] for core in cores)
            val[r] = 1.0 if (inc_modes[i] == 1 or inc_modes[j] == 1 or same) else 0.0
    sol = highspy.HighsSolution()
    sol.col_value = val.tolist()
    sol.value_valid = True
    h.setSolution(sol)

    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    text = h.modelStatusToString(status)
    if status_of(status, False, ub, float(lower), gap) == "error":
        return MilpResult(inc_starts, inc_modes, ub, float(lower), False, "error", text)
    dual = float(info.mip_dual_bound) * scale if np.isfinite(info.mip_dual_bound) else 0.0
    lower_out = max(float(lower), min(dual, ub))
    if info.primal_solution_status != 2:  # no feasible point: keep the incumbent
        return MilpResult(inc_starts, inc_modes, ub, lower_out, False,
                          status_of(status, False, ub, lower_out, gap), text)
    v = np.array(h.getSolution().col_value)
    modes = (v[X] > 0.5).astype(np.int8)
    arcs = [list(p) for p in preds]
    for i, j, o, r in pairs:
        if r >= 0 and v[r] < 0.5:
            continue
        if v[o] > 0.5:
            arcs[j].append(i)
        else:
            arcs[i].append(j)
    starts = _longest_path(m, arcs, np.where(modes == 1, da, ds))
    if starts is None:
        return MilpResult(inc_starts, inc_modes, ub, lower_out, False,
                          status_of(status, False, ub, lower_out, gap), text)
    makespan = float((starts + np.where(modes == 1, da, ds)).max())
    if makespan > ub:
        starts, modes, makespan = inc_starts, inc_modes, ub
    proved = status == highspy.HighsModelStatus.kOptimal and float(info.mip_gap) <= 1e-9
    lower_out = min(lower_out, makespan)
    return MilpResult(starts, modes, makespan, lower_out, proved,
                      status_of(status, proved, makespan, lower_out, gap), text)


def _longest_path(m, arcs, dur):
    """Earliest starts over predecessor lists ``arcs`` (None if they contain a cycle)."""
    indeg = np.array([len(set(a)) for a in arcs])
    succ = [[] for _ in range(m)]
    for j in range(m):
        for p in set(arcs[j]):
            succ[p].append(j)
    starts = np.zeros(m)
    ready = [i for i in range(m) if indeg[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in succ[i]:
            starts[j] = max(starts[j], starts[i] + dur[i])
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    return starts if seen == m else None
