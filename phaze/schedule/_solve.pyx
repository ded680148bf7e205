# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""One layer on one chip, compiled: parts between cut operators, bounds, list schedules,
mode exclusion, mode search, energetic reasoning and branch and bound, in that order;
and the same over a range of architectures (docs/design.md §2.5).

The graph arrives split into *segments* (see ``_prepare``): maximal groups between cut
operators (operators comparable with every other one). Every operator of a segment
waits for every operator of the segment before, so the optimal makespan is the sum of
the segments' optima and each segment is scheduled on its own. A segment is a pointer
offset into the graph's arrays (``kind + b``; ``reach + b * n + b`` with row length n).

Both entry points release the GIL while they compute: ``schedule_many`` runs disjoint
architecture ranges on threads.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, int8_t, uint8_t
from libc.stdlib cimport free

from ._bnb cimport BnbTable, as_table, bnb_search, cert_level, table_alloc, table_free
from ._bounds cimport energetic_infeasible, forced_bound, segment_bound, strong_bound
from ._cdefs cimport KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, REL_EQ, xalloc
from ._list cimport list_schedule, mode_search

from ._status import STATUS_CODES

# the codes written to ``schedule_many``'s status array (names canonical in ``_status``)
cdef int8_t STATUS_OPTIMAL = STATUS_CODES["optimal"]
cdef int8_t STATUS_CERTIFIED = STATUS_CODES["certified"]
cdef int8_t STATUS_LIMIT = STATUS_CODES["limit"]
cdef int8_t STATUS_INFEASIBLE = STATUS_CODES["infeasible"]


cdef struct Graph:
    # one graph in segment order (``_prepare``): n operators, nseg segments
    int64_t n
    int64_t nseg
    const int64_t* kind
    const int64_t* seg_ptr
    const int64_t* seg_wtc
    const int64_t* seg_wvc
    const int64_t* opinfo      # (n, 3)
    const uint8_t* reach       # (n, n)
    const int64_t* pred_ptr
    const int64_t* pred_idx
    const int64_t* succ_ptr
    const int64_t* succ_idx


cdef struct Limits:
    # the tunables of one solve (``phaze._config``, read by the driver)
    double gap
    int64_t exact_max
    int64_t node_limit
    int64_t mode_rounds
    int64_t open_nodes


cdef double solve(const Graph* g, const double* ds, const double* da, int64_t ntc, int64_t nvc,
                  const Limits* lim, double* starts, int8_t* modes, double* seg_ub,
                  double* seg_lb, BnbTable* tb, bint* optimal, double* lower) noexcept nogil:
    """Schedule one graph (operators in segment order) on one chip. Returns the makespan
    and writes the lower bound and whether it is optimal; ``starts`` are absolute times
    (each segment starts when the previous one ends). ``tb``: a table from
    ``_bnb_table`` (one of 0 rows: a full-size one is made here on the first search
    and freed before returning)."""
    cdef int64_t nseg = g.nseg
    cdef int64_t n = g.n
    cdef double gap = lim.gap
    cdef double total_lb = 0.0
    cdef double total_ub = 0.0
    cdef double lb, ub, target, strong, ub_cert, better, cert, widest, open_gap, best, proven, offset
    cdef double ub_io, thr_io
    cdef int64_t s, b, e, m, pick, size, i, cap_tc, cap_vc
    cdef bint exhausted, is_optimal
    cdef BnbTable own
    cdef BnbTable* table = tb
    cdef double* head = <double*> xalloc(n * sizeof(double))
    cdef double* tail = <double*> xalloc(n * sizeof(double))
    cdef double* no_bound = <double*> xalloc(n * sizeof(double))
    cdef uint8_t* tried = <uint8_t*> xalloc(nseg * sizeof(uint8_t))
    own.rows = 0
    for s in range(nseg):
        b = g.seg_ptr[s]
        e = g.seg_ptr[s + 1]
        m = e - b
        lb = segment_bound(m, g.kind + b, ds + b, da + b, g.succ_ptr + b, g.succ_idx, ntc, nvc,
                           g.seg_wtc[s], g.seg_wvc[s])
        # a part within the gap on its own keeps the whole within the gap
        target = lb * (1.0 + REL_EQ) / (1.0 - gap)
        ub = list_schedule(m, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                           g.succ_ptr + b, g.succ_idx, g.reach + b * n + b, n, ntc, nvc, target,
                           starts + b, modes + b, 2)
        if ub > target:
            strong = strong_bound(m, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                                  g.succ_ptr + b, g.succ_idx, g.reach + b * n + b, n, ntc, nvc,
                                  g.seg_wtc[s], g.seg_wvc[s], g.opinfo + 3 * b, head, tail)
            if strong > lb:
                lb = strong
                target = lb * (1.0 + REL_EQ) / (1.0 - gap)
            if ub > target:
                ub = list_schedule(m, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                                   g.succ_ptr + b, g.succ_idx, g.reach + b * n + b, n, ntc, nvc,
                                   target, starts + b, modes + b, 1000)
            if ub > target:
                # Exclude the modes that cannot appear in a schedule shorter than ub
                # (may prove ub optimal), then shorter than ub_cert = ub (1 - gap):
                # proving no schedule beats ub_cert certifies ub, and the lower ub_cert
                # excludes more modes. head/tail of the ub-restricted instance stay
                # valid for every schedule shorter than ub_cert <= ub.
                ub_cert = cert_level(ub, gap, 4.0)
                lb = forced_bound(m, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                                  g.succ_ptr + b, g.succ_idx, g.reach + b * n + b, n, ntc, nvc,
                                  g.seg_wtc[s], g.seg_wvc[s], g.opinfo + 3 * b, ub, lb, ub_cert,
                                  head, tail)
                if lb < ub_cert:
                    lb = forced_bound(m, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                                      g.succ_ptr + b, g.succ_idx, g.reach + b * n + b, n, ntc, nvc,
                                      g.seg_wtc[s], g.seg_wvc[s], g.opinfo + 3 * b, ub_cert, lb,
                                      ub_cert, head, tail)
                if lb < ub_cert:
                    # still open: search the modes (parallel generation), and if that
                    # shortens the schedule, exclude modes against the new ub (head and
                    # tail hold for every schedule shorter than the old ub_cert)
                    target = lb * (1.0 + REL_EQ) / (1.0 - gap)
                    better = mode_search(m, g.kind + b, ds + b, da + b, g.pred_ptr + b,
                                         g.succ_ptr + b, g.succ_idx, ntc, nvc, ub, target,
                                         starts + b, modes + b, lim.mode_rounds)
                    if better < ub:
                        ub = better
                        cert = cert_level(ub, gap, 4.0)
                        if lb < cert and cert < ub_cert:
                            lb = forced_bound(m, g.kind + b, ds + b, da + b, g.pred_ptr + b,
                                              g.pred_idx, g.succ_ptr + b, g.succ_idx,
                                              g.reach + b * n + b, n, ntc, nvc, g.seg_wtc[s],
                                              g.seg_wvc[s], g.opinfo + 3 * b, cert, lb, cert,
                                              head, tail)
                    # energetic reasoning against just above ub (1 - gap): no schedule
                    # that short certifies ub (head and tail hold below the old ub_cert)
                    cert = cert_level(ub, gap, 2.0)
                    cap_tc = ntc if ntc < g.seg_wtc[s] else g.seg_wtc[s]
                    cap_vc = nvc if nvc < g.seg_wvc[s] else g.seg_wvc[s]
                    if lb < cert and cert < ub_cert and energetic_infeasible(
                            m, g.kind + b, ds + b, da + b, head, tail, cert, cap_tc, cap_vc):
                        lb = cert
                    if lb < cert and cert < ub_cert and lim.open_nodes > 0:
                        # last resort: a bounded exact search below just above
                        # ub (1 - gap) (finds shorter schedules on the way)
                        if table.rows == 0:
                            table_alloc(&own, n)
                            table = &own
                        ub_io = ub
                        thr_io = cert
                        exhausted = bnb_search(m, g.kind + b, ds + b, da + b, g.pred_ptr + b,
                                               g.pred_idx, g.succ_ptr + b, g.succ_idx, ntc, nvc,
                                               g.seg_wtc[s], g.seg_wvc[s], head, tail, &ub_io,
                                               &thr_io, gap, lim.open_nodes, starts + b,
                                               modes + b, table)
                        ub = ub_io
                        proven = thr_io
                        if exhausted and proven > lb:
                            lb = proven
        if lb > ub:
            lb = ub  # float rounding only: ub is achieved, so the true bound is <= ub
        seg_lb[s] = lb
        seg_ub[s] = ub
        total_lb += lb
        total_ub += ub
    # Exact search on small segments, largest open gap first, until certified.
    for s in range(nseg):
        tried[s] = False
    for i in range(n):
        no_bound[i] = 0.0
    while total_ub - total_lb > gap * total_ub:
        pick = -1
        widest = 0.0
        for s in range(nseg):
            size = g.seg_ptr[s + 1] - g.seg_ptr[s]
            open_gap = seg_ub[s] - seg_lb[s]
            if (not tried[s] and size <= lim.exact_max and open_gap > REL_EQ * seg_ub[s]
                    and open_gap > widest):
                pick = s
                widest = open_gap
        if pick < 0:
            break
        b = g.seg_ptr[pick]
        e = g.seg_ptr[pick + 1]
        if table.rows == 0:
            table_alloc(&own, n)
            table = &own
        ub_io = seg_ub[pick]
        thr_io = seg_ub[pick]
        exhausted = bnb_search(e - b, g.kind + b, ds + b, da + b, g.pred_ptr + b, g.pred_idx,
                               g.succ_ptr + b, g.succ_idx, ntc, nvc, g.seg_wtc[pick],
                               g.seg_wvc[pick], no_bound, no_bound, &ub_io, &thr_io, 0.0,
                               lim.node_limit, starts + b, modes + b, table)
        best = ub_io
        total_ub += best - seg_ub[pick]
        seg_ub[pick] = best
        tried[pick] = True
        if exhausted:  # proven == best: nothing shorter exists
            total_lb += best - seg_lb[pick]
            seg_lb[pick] = best
    is_optimal = True
    offset = 0.0
    total_lb = 0.0  # re-summed in the makespan's order so that lb <= makespan in floats too
    for s in range(nseg):
        total_lb += seg_lb[s]
        b = g.seg_ptr[s]
        e = g.seg_ptr[s + 1]
        for i in range(b, e):
            starts[i] += offset
        offset += seg_ub[s]
        if seg_ub[s] - seg_lb[s] > REL_EQ * seg_ub[s]:
            is_optimal = False
    if own.rows:
        table_free(&own)
    free(head)
    free(tail)
    free(no_bound)
    free(tried)
    optimal[0] = is_optimal
    lower[0] = total_lb
    return offset


cdef inline int8_t status_code(double makespan, double lower_bound, bint optimal,
                               double gap) noexcept nogil:
    """Optimal when proved, certified within ``gap``, else limit."""
    if optimal:
        return STATUS_OPTIMAL
    if makespan - lower_bound <= gap * makespan:
        return STATUS_CERTIFIED
    return STATUS_LIMIT


cdef void solve_range(const Graph* g, const double* single, const double* intra, int64_t n_archs,
                      const int64_t* ntc, const int64_t* nvc, const Limits* lim, double* makespan,
                      double* lower_bound, int8_t* status, int64_t first, int64_t stop,
                      BnbTable* tb) noexcept nogil:
    """``solve`` for architectures ``first`` .. ``stop - 1`` (columns of the (n, n_archs)
    ``single``/``intra``, rows already in segment order). Architectures lacking cores of
    a needed type are infeasible."""
    cdef int64_t n = g.n
    cdef bint need_tc = False
    cdef bint need_vc = False
    cdef int64_t i, a
    cdef double ms, lb
    cdef bint opt
    cdef double* ds = <double*> xalloc(n * sizeof(double))
    cdef double* da = <double*> xalloc(n * sizeof(double))
    cdef double* starts = <double*> xalloc(n * sizeof(double))
    cdef int8_t* modes = <int8_t*> xalloc(n * sizeof(int8_t))
    cdef double* seg_ub = <double*> xalloc(g.nseg * sizeof(double))
    cdef double* seg_lb = <double*> xalloc(g.nseg * sizeof(double))
    for i in range(n):
        if g.kind[i] == KIND_GEMM or g.kind[i] == KIND_FUSED:
            need_tc = True
        if g.kind[i] == KIND_VECTOR or g.kind[i] == KIND_FUSED:
            need_vc = True
    for a in range(first, stop):
        if (need_tc and ntc[a] < 1) or (need_vc and nvc[a] < 1):
            makespan[a] = INFINITY
            lower_bound[a] = INFINITY
            status[a] = STATUS_INFEASIBLE
            continue
        for i in range(n):
            ds[i] = single[i * n_archs + a]
            da[i] = single[i * n_archs + a] if g.kind[i] == KIND_COLLECTIVE else intra[i * n_archs + a]
        ms = solve(g, ds, da, ntc[a], nvc[a], lim, starts, modes, seg_ub, seg_lb, tb, &opt, &lb)
        makespan[a] = ms
        lower_bound[a] = lb
        status[a] = status_code(ms, lb, opt, lim.gap)
    free(ds)
    free(da)
    free(starts)
    free(modes)
    free(seg_ub)
    free(seg_lb)


# ---------------------------------------------------------------------------
# Python entry points (the driver)
# ---------------------------------------------------------------------------
cdef Graph as_graph(const int64_t[::1] kind, const int64_t[::1] seg_ptr,
                    const int64_t[::1] seg_wtc, const int64_t[::1] seg_wvc,
                    const int64_t[:, ::1] opinfo, const uint8_t[:, ::1] reach,
                    const int64_t[::1] pred_ptr, const int64_t[::1] pred_idx,
                    const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx) except *:
    """Raw pointers into a prepared graph's arrays (which must stay alive while used)."""
    cdef Graph g
    g.n = kind.shape[0]
    g.nseg = seg_ptr.shape[0] - 1
    assert g.n > 0 and g.nseg > 0 and opinfo.shape[0] == g.n and reach.shape[0] == g.n
    g.kind = &kind[0]
    g.seg_ptr = &seg_ptr[0]
    g.seg_wtc = &seg_wtc[0]
    g.seg_wvc = &seg_wvc[0]
    g.opinfo = &opinfo[0, 0]
    g.reach = &reach[0, 0]
    g.pred_ptr = &pred_ptr[0]
    g.pred_idx = &pred_idx[0] if pred_idx.shape[0] else NULL
    g.succ_ptr = &succ_ptr[0]
    g.succ_idx = &succ_idx[0] if succ_idx.shape[0] else NULL
    return g


def _solve(kind, const double[::1] ds, const double[::1] da, seg_ptr, seg_wtc, seg_wvc, opinfo,
           reach, pred_ptr, pred_idx, succ_ptr, succ_idx, int64_t ntc, int64_t nvc, double gap,
           int64_t exact_max, int64_t node_limit, int64_t mode_rounds, int64_t open_nodes,
           double[::1] starts, int8_t[::1] modes, double[::1] seg_ub, double[::1] seg_lb,
           tuple table):
    """Schedule one graph (operators in segment order) on one chip; returns
    ``(makespan, lower_bound, optimal)``. ``table``: ``_bnb_table(len(kind), ...)`` (one
    of 0 rows: a full-size one is made on the first search)."""
    cdef Graph g = as_graph(kind, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr, pred_idx,
                            succ_ptr, succ_idx)
    cdef BnbTable tb = as_table(table)
    cdef Limits lim
    cdef double ms, lb
    cdef bint opt
    lim.gap = gap
    lim.exact_max = exact_max
    lim.node_limit = node_limit
    lim.mode_rounds = mode_rounds
    lim.open_nodes = open_nodes
    assert ds.shape[0] == g.n and da.shape[0] == g.n and starts.shape[0] == g.n
    assert modes.shape[0] == g.n and seg_ub.shape[0] == g.nseg and seg_lb.shape[0] == g.nseg
    with nogil:
        ms = solve(&g, &ds[0], &da[0], ntc, nvc, &lim, &starts[0], &modes[0], &seg_ub[0],
                   &seg_lb[0], &tb, &opt, &lb)
    return ms, lb, opt


def _solve_range(kind, const double[:, ::1] single, const double[:, ::1] intra, seg_ptr, seg_wtc,
                 seg_wvc, opinfo, reach, pred_ptr, pred_idx, succ_ptr, succ_idx,
                 const int64_t[::1] ntc, const int64_t[::1] nvc, double gap, int64_t exact_max,
                 int64_t node_limit, int64_t mode_rounds, int64_t open_nodes,
                 double[::1] makespan, double[::1] lower_bound, int8_t[::1] status,
                 int64_t first, int64_t stop, tuple table):
    """``_solve`` for architectures ``first`` .. ``stop - 1`` (columns of ``single``/``intra``,
    rows already in segment order), results into ``makespan``/``lower_bound``/``status``.
    ``table``: ``_bnb_table(len(kind), _BNB_TABLE_MAX_BUCKETS)``, one per thread (reused:
    the pages it touches are faulted in once). Releases the GIL: the caller runs
    disjoint ranges on threads."""
    cdef Graph g = as_graph(kind, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr, pred_idx,
                            succ_ptr, succ_idx)
    cdef BnbTable tb = as_table(table)
    cdef Limits lim
    cdef int64_t n_archs = single.shape[1]
    lim.gap = gap
    lim.exact_max = exact_max
    lim.node_limit = node_limit
    lim.mode_rounds = mode_rounds
    lim.open_nodes = open_nodes
    assert single.shape[0] == g.n and intra.shape[0] == g.n and intra.shape[1] == n_archs
    assert 0 <= first <= stop <= n_archs and ntc.shape[0] >= stop and nvc.shape[0] >= stop
    assert makespan.shape[0] >= stop and lower_bound.shape[0] >= stop and status.shape[0] >= stop
    if first == stop:
        return
    with nogil:
        solve_range(&g, &single[0, 0], &intra[0, 0], n_archs, &ntc[0], &nvc[0], &lim,
                    &makespan[0], &lower_bound[0], &status[0], first, stop, &tb)


def _status(double makespan, double lower_bound, bint optimal, double gap):
    """Status code (``STATUS_NAMES[code]``) of a schedule: optimal when proved, certified
    within ``gap``, else limit."""
    return status_code(makespan, lower_bound, optimal, gap)
