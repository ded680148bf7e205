# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""List scheduling: serial schedule generation under several priority and mode rules with
forward-backward improvement (``list_schedule``), and a local search over the mode
vector decoded by parallel schedule generation (``mode_search``) (docs/design.md §2.5).

Pointer conventions as in ``_energy`` and ``_windows``.
"""
from libc.math cimport INFINITY, isnan
from libc.stdint cimport int64_t, int8_t, uint8_t
from libc.stdlib cimport free

from ._cdefs cimport KIND_COLLECTIVE, KIND_GEMM, KIND_VECTOR, REL_EQ, demand, xalloc
from ._energy cimport fastest, tails
from ._profile cimport earliest, insert

import numpy as np


cdef inline int8_t scaling_mode(int64_t k, double s, double a, int64_t ntc, int64_t nvc) noexcept nogil:
    """Mode 0 (one core) wherever intra-op would gain no more than the cores it takes
    (near-perfect scaling, within 5 %): such an operator leaves the other cores free;
    else 1 (collectives 0)."""
    cdef int64_t n_cores
    if k == KIND_COLLECTIVE:
        return 0
    n_cores = ntc if k == KIND_GEMM else (nvc if k == KIND_VECTOR else ntc + nvc)
    return 0 if s <= 1.05 * n_cores * a else 1


cdef double sgs(int64_t m, const int64_t* kind, const double* ds, const double* da,
                const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                const int64_t* succ_idx, const double* prio, int64_t rule, const int8_t* fixed_modes,
                int64_t ntc, int64_t nvc, double* starts, int8_t* modes, double* finish, double* pt,
                int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t* waiting, uint8_t* done,
                int64_t select) noexcept nogil:
    """Serial schedule generation: repeatedly take the ready operator of highest ``prio``
    and start it as early as precedence and capacity allow.

    ``rule`` 0: try both modes, keep the earlier finish (ties: one core);
    ``rule`` 1: use ``fixed_modes``. ``select`` 0: highest ``prio`` first; 1: the ready
    operator whose predecessors finish first (ties: highest ``prio``), which fills idle
    time (e.g. while a collective runs) with whatever is ready. Returns the makespan."""
    cdef int64_t npieces, i, j, e, k, step, mode
    cdef int64_t dtc, dvc, dlk, d0tc, d0vc, d0lk, d1tc, d1vc, d1lk
    cdef double makespan, best_est, ei, f, est, dur, t, t0, t1
    pt[0] = 0.0
    ptc[0] = 0
    pvc[0] = 0
    plk[0] = 0
    npieces = 1
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        done[i] = False
    makespan = 0.0
    for step in range(m):
        j = -1
        best_est = 0.0
        for i in range(m):
            if not done[i] and waiting[i] == 0:
                if select == 1:
                    ei = 0.0
                    for e in range(pred_ptr[i], pred_ptr[i + 1]):
                        f = finish[pred_idx[e]]
                        if f > ei:
                            ei = f
                    if j < 0 or ei < best_est or (ei == best_est and prio[i] > prio[j]):
                        j = i
                        best_est = ei
                elif j < 0 or prio[i] > prio[j]:
                    j = i
        est = 0.0
        for e in range(pred_ptr[j], pred_ptr[j + 1]):
            f = finish[pred_idx[e]]
            if f > est:
                est = f
        k = kind[j]
        if k == KIND_COLLECTIVE:
            mode = 0
        elif rule == 1:
            mode = fixed_modes[j]
        elif da[j] >= ds[j]:
            mode = 0  # intra-op is slower and holds more: dominated
        else:
            mode = -1
        if mode >= 0:
            demand(k, mode, ntc, nvc, &dtc, &dvc, &dlk)
            dur = ds[j] if mode == 0 else da[j]
            t = earliest(pt, ptc, pvc, plk, npieces, est, dur, dtc, dvc, dlk, ntc, nvc)
        else:
            demand(k, 0, ntc, nvc, &d0tc, &d0vc, &d0lk)
            t0 = earliest(pt, ptc, pvc, plk, npieces, est, ds[j], d0tc, d0vc, d0lk, ntc, nvc)
            demand(k, 1, ntc, nvc, &d1tc, &d1vc, &d1lk)
            t1 = earliest(pt, ptc, pvc, plk, npieces, est, da[j], d1tc, d1vc, d1lk, ntc, nvc)
            if t1 + da[j] < t0 + ds[j]:
                mode = 1
                t = t1
                dur = da[j]
                dtc = d1tc
                dvc = d1vc
                dlk = d1lk
            else:
                mode = 0
                t = t0
                dur = ds[j]
                dtc = d0tc
                dvc = d0vc
                dlk = d0lk
        npieces = insert(pt, ptc, pvc, plk, npieces, t, dur, dtc, dvc, dlk)
        starts[j] = t
        modes[j] = <int8_t> mode
        finish[j] = t + dur
        if finish[j] > makespan:
            makespan = finish[j]
        done[j] = True
        for e in range(succ_ptr[j], succ_ptr[j + 1]):
            waiting[succ_idx[e]] -= 1
    return makespan


cdef struct ListScratch:
    double* pt
    int64_t* ptc
    int64_t* pvc
    int64_t* plk
    int64_t* waiting
    uint8_t* done
    double* s_tmp
    int8_t* m_tmp
    double* fin
    int8_t* fixed
    double* dmin
    double* prio_min
    double* prio_ds
    double* head_min
    double* link_first
    double* prio_link
    double* rev_prio
    double* fwd_prio


cdef double list_schedule_body(int64_t m, const int64_t* kind, const double* ds, const double* da,
                               const int64_t* pred_ptr, const int64_t* pred_idx,
                               const int64_t* succ_ptr, const int64_t* succ_idx,
                               const uint8_t* reach, int64_t rs, int64_t ntc, int64_t nvc,
                               double target, double* starts, int8_t* modes, int64_t max_passes,
                               ListScratch* w) noexcept nogil:
    cdef double* pt = w.pt
    cdef int64_t* ptc = w.ptc
    cdef int64_t* pvc = w.pvc
    cdef int64_t* plk = w.plk
    cdef int64_t* waiting = w.waiting
    cdef uint8_t* done = w.done
    cdef double* s_tmp = w.s_tmp
    cdef int8_t* m_tmp = w.m_tmp
    cdef double* fin = w.fin
    cdef int8_t* fixed = w.fixed
    cdef double* dmin = w.dmin
    cdef double* prio_min = w.prio_min
    cdef double* head_min = w.head_min
    cdef double* link_first = w.link_first
    cdef double* prio_link = w.prio_link
    cdef double* rev_prio = w.rev_prio
    cdef double* fwd_prio = w.fwd_prio
    cdef const double* prio
    cdef double cp_min, h, v, best, heavy, ms, back, dur, c_end
    cdef int64_t i, e, p, r, k, rule, select, passes, rnd, j, c, budget
    cdef bint has_link, improved
    fastest(m, kind, ds, da, dmin)
    tails(m, dmin, succ_ptr, succ_idx, prio_min)
    cp_min = 0.0
    for i in range(m):  # local order is topological
        h = 0.0
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            v = head_min[pred_idx[e]] + dmin[pred_idx[e]]
            if v > h:
                h = v
        head_min[i] = h
        if h + prio_min[i] > cp_min:
            cp_min = h + prio_min[i]
    best = INFINITY
    # pass list: (priority from fastest durations | from one-core durations |
    #            ready-first with fastest-duration priority | link-first) x
    #            (earliest finish | all fastest | all intra-op | all one-core |
    #             one-core where intra-op scales near-perfectly |
    #             critical path at the faster mode, everything else one-core)
    #            link-first: collectives weigh more than all compute together, so the
    #            operators feeding a collective go first and compute overlaps the link
    heavy = 1.0
    for i in range(m):
        heavy += dmin[i]
    for i in range(m):
        link_first[i] = dmin[i] + heavy if kind[i] == KIND_COLLECTIVE else dmin[i]
    tails(m, link_first, succ_ptr, succ_idx, prio_link)
    has_link = False
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            has_link = True
    passes = 0
    for p in range(4):
        select = 1 if p == 2 else 0
        if p == 1:
            tails(m, ds, succ_ptr, succ_idx, w.prio_ds)
            prio = w.prio_ds
        elif p == 3:
            if not has_link:
                break
            prio = prio_link
        else:
            prio = prio_min
        for r in range(6):
            if p >= 2 and r >= 2 and r < 4:
                continue
            if r == 0:
                rule = 0
            else:
                rule = 1
                for i in range(m):
                    k = kind[i]
                    if k == KIND_COLLECTIVE:
                        fixed[i] = 0
                    elif r == 1:
                        fixed[i] = 1 if da[i] < ds[i] else 0
                    elif r == 2:
                        fixed[i] = 1
                    elif r == 3:
                        fixed[i] = 0
                    elif r == 5:
                        # critical operators at their faster mode, the rest (weight
                        # gradients and other side branches) on one core, in parallel
                        if head_min[i] + prio_min[i] >= cp_min * (1.0 - 1e-9) and da[i] < ds[i]:
                            fixed[i] = 1
                        else:
                            fixed[i] = 0
                    else:
                        fixed[i] = scaling_mode(k, ds[i], da[i], ntc, nvc)
            ms = sgs(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, prio, rule, fixed,
                     ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, select)
            if ms < best:
                best = ms
                for i in range(m):
                    starts[i] = s_tmp[i]
                    modes[i] = m_tmp[i]
            passes += 1
            if best <= target or passes >= max_passes:
                return best
    # Forward-backward improvement: right-justify the best schedule (schedule the reversed
    # graph, latest finish first), then left-justify it again (earliest start first),
    # once with its modes kept and once choosing modes afresh; repeat while it helps.
    for rnd in range(4):
        improved = False
        for r in range(2):
            for i in range(m):
                dur = da[i] if modes[i] == 1 else ds[i]
                rev_prio[i] = starts[i] + dur
                fixed[i] = modes[i]
            back = sgs(m, kind, ds, da, succ_ptr, succ_idx, pred_ptr, pred_idx, rev_prio, 1, fixed,
                       ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, 0)
            for i in range(m):
                fwd_prio[i] = -(back - fin[i])  # start in forward time; earlier first
            ms = sgs(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, r, fixed,
                     ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, 0)
            if ms < best:
                best = ms
                for i in range(m):
                    starts[i] = s_tmp[i]
                    modes[i] = m_tmp[i]
                improved = True
                if best <= target:
                    return best
        if not improved:
            break
    # Mode flips: switch one operator's mode, keep the order, keep the change if it helps.
    for rnd in range(1):
        improved = False
        for j in range(m):
            if kind[j] == KIND_COLLECTIVE:
                continue
            for i in range(m):
                fwd_prio[i] = -starts[i]
                fixed[i] = modes[i]
            fixed[j] = 1 - modes[j]
            ms = sgs(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, 1, fixed,
                     ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, 0)
            if ms < best:
                best = ms
                for i in range(m):
                    starts[i] = s_tmp[i]
                    modes[i] = m_tmp[i]
                improved = True
                if best <= target:
                    return best
        if not improved:
            break
    if not has_link:
        return best
    # Fill the link's idle-compute holes: move each operator that now starts outside a
    # collective's run to just behind that collective in the list (modes kept), and keep
    # the move if the makespan drops. Finds "run this weight gradient during the
    # all-reduce and let the chain wait a little" which no priority rule expresses; for
    # the collective's descendants it reorders what follows the collective.
    # At most 8 decodes per operator in all (2 rounds x collectives x operators would be
    # quadratic in decodes on graphs with many collectives; a transformer layer has two
    # collectives per part and never reaches the cap).
    budget = 8 * m
    for rnd in range(2):
        improved = False
        for c in range(m):
            if kind[c] != KIND_COLLECTIVE:
                continue
            c_end = starts[c] + ds[c]
            for j in range(m):
                # also operators that start before the collective (a weight gradient
                # run ahead of it, leaving the chip idle during it); not those already
                # in its hole, nor its ancestors (which cannot follow it)
                if (kind[j] == KIND_COLLECTIVE or (starts[j] >= starts[c] and starts[j] < c_end)
                        or reach[j * rs + c]):
                    continue
                if budget == 0:
                    return best
                budget -= 1
                for i in range(m):
                    fwd_prio[i] = -starts[i]
                    fixed[i] = modes[i]
                fwd_prio[j] = -starts[c] - 0.5 * ds[c]
                ms = sgs(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, 1, fixed,
                         ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, 0)
                if ms < best:
                    best = ms
                    for i in range(m):
                        starts[i] = s_tmp[i]
                        modes[i] = m_tmp[i]
                    improved = True
                    if best <= target:
                        return best
                    c_end = starts[c] + ds[c]
        if not improved:
            break
    return best


cdef double list_schedule(int64_t m, const int64_t* kind, const double* ds, const double* da,
                          const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                          const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                          int64_t nvc, double target, double* starts, int8_t* modes,
                          int64_t max_passes) noexcept nogil:
    """Best of several list-scheduling passes (priority rules x mode rules), then
    forward-backward improvement of the best.

    Stops early once the makespan is <= ``target`` (already certified) or after
    ``max_passes`` passes. Writes the best schedule into ``starts``/``modes`` and
    returns its makespan."""
    cdef int64_t cap = 2 * m + 2
    cdef ListScratch w
    cdef double best
    cdef int64_t i
    w.pt = <double*> xalloc(cap * sizeof(double))
    w.ptc = <int64_t*> xalloc(cap * sizeof(int64_t))
    w.pvc = <int64_t*> xalloc(cap * sizeof(int64_t))
    w.plk = <int64_t*> xalloc(cap * sizeof(int64_t))
    w.waiting = <int64_t*> xalloc(m * sizeof(int64_t))
    w.done = <uint8_t*> xalloc(m * sizeof(uint8_t))
    w.s_tmp = <double*> xalloc(m * sizeof(double))
    w.m_tmp = <int8_t*> xalloc(m * sizeof(int8_t))
    w.fin = <double*> xalloc(m * sizeof(double))
    w.fixed = <int8_t*> xalloc(m * sizeof(int8_t))
    w.dmin = <double*> xalloc(m * sizeof(double))
    w.prio_min = <double*> xalloc(m * sizeof(double))
    w.prio_ds = <double*> xalloc(m * sizeof(double))
    w.head_min = <double*> xalloc(m * sizeof(double))
    w.link_first = <double*> xalloc(m * sizeof(double))
    w.prio_link = <double*> xalloc(m * sizeof(double))
    w.rev_prio = <double*> xalloc(m * sizeof(double))
    w.fwd_prio = <double*> xalloc(m * sizeof(double))
    for i in range(m):
        w.head_min[i] = 0.0
    best = list_schedule_body(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, reach, rs,
                              ntc, nvc, target, starts, modes, max_passes, &w)
    free(w.pt)
    free(w.ptc)
    free(w.pvc)
    free(w.plk)
    free(w.waiting)
    free(w.done)
    free(w.s_tmp)
    free(w.m_tmp)
    free(w.fin)
    free(w.fixed)
    free(w.dmin)
    free(w.prio_min)
    free(w.prio_ds)
    free(w.head_min)
    free(w.link_first)
    free(w.prio_link)
    free(w.rev_prio)
    free(w.fwd_prio)
    return best


# ---------------------------------------------------------------------------
# parallel schedule generation and a mode search over it (parts still open)
# ---------------------------------------------------------------------------
cdef inline bint lt_floats(double a, double b) noexcept nogil:
    """numba's comparison for sorting floats (NaNs last)."""
    return a < b or (isnan(b) and not isnan(a))


cdef void argsort(int64_t n, const double* a, int64_t* r) noexcept nogil:
    """``np.argsort(a)`` exactly as numba's default (quick)sort orders it, ties included
    (insertion sort below 16 elements, median-of-three partitions above): the parallel
    schedule generation starts tied operators in this order, so a different tie order
    would give different schedules than the numba kernels it replaces."""
    cdef int64_t stack_lo[100]
    cdef int64_t stack_hi[100]
    cdef int64_t ns, low, high, i, j, k, mid, tmp
    cdef double v, pivot
    for i in range(n):
        r[i] = i
    if n < 2:
        return
    stack_lo[0] = 0
    stack_hi[0] = n - 1
    ns = 1
    while ns > 0:
        ns -= 1
        low = stack_lo[ns]
        high = stack_hi[ns]
        while high - low >= 15:
            # partition (numba.misc.quicksort.partition)
            mid = (low + high) >> 1
            if lt_floats(a[r[mid]], a[r[low]]):
                tmp = r[low]; r[low] = r[mid]; r[mid] = tmp
            if lt_floats(a[r[high]], a[r[mid]]):
                tmp = r[high]; r[high] = r[mid]; r[mid] = tmp
            if lt_floats(a[r[mid]], a[r[low]]):
                tmp = r[low]; r[low] = r[mid]; r[mid] = tmp
            pivot = a[r[mid]]
            tmp = r[high]; r[high] = r[mid]; r[mid] = tmp
            i = low
            j = high - 1
            while True:
                while i < high and lt_floats(a[r[i]], pivot):
                    i += 1
                while j >= low and lt_floats(pivot, a[r[j]]):
                    j -= 1
                if i >= j:
                    break
                tmp = r[i]; r[i] = r[j]; r[j] = tmp
                i += 1
                j -= 1
            tmp = r[i]; r[i] = r[high]; r[high] = tmp
            # push the larger side, iterate on the smaller
            if high - i > i - low:
                if high > i:
                    stack_lo[ns] = i + 1
                    stack_hi[ns] = high
                    ns += 1
                high = i - 1
            else:
                if i > low:
                    stack_lo[ns] = low
                    stack_hi[ns] = i - 1
                    ns += 1
                low = i + 1
        # insertion sort of r[low .. high]
        for i in range(low + 1, high + 1):
            k = r[i]
            v = a[k]
            j = i
            while j > low and lt_floats(v, a[r[j - 1]]):
                r[j] = r[j - 1]
                j -= 1
            r[j] = k


cdef double psgs(int64_t m, const int64_t* kind, const double* ds, const double* da,
                 const int64_t* pred_ptr, const int64_t* succ_ptr, const int64_t* succ_idx,
                 const double* prio, const int8_t* fixed, int64_t ntc, int64_t nvc, double* starts,
                 int8_t* modes, double* finish, int64_t* waiting, int64_t* state, int64_t* order,
                 double* neg) noexcept nogil:
    """Parallel (time-incremental) schedule generation with the modes ``fixed``: at each
    decision time start every ready operator that fits, highest ``prio`` first, then
    advance to the next finish. An intra-op operator that does not fit yet keeps the
    compute operators of lower priority from starting at that time (it starts as soon
    as the running ones end). Unlike ``sgs`` it never leaves a core idle that a ready
    operator could use, so weight gradients fill the time a one-core vector operator of
    the chain leaves free. Returns the makespan (``inf`` only if nothing could start,
    which capacities >= 1 rule out). ``order``, ``neg``: scratch (m)."""
    cdef int64_t free_tc = ntc
    cdef int64_t free_vc = nvc
    cdef int64_t free_lk = 1
    cdef int64_t n_fin = 0
    cdef double t = 0.0
    cdef double makespan = 0.0
    cdef double nt
    cdef int64_t i, q, j, k, mode, e, dtc, dvc, dlk
    cdef bint blocked, fits
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        state[i] = 0  # 0 waiting, 1 running, 2 finished
        neg[i] = -prio[i]
    argsort(m, neg, order)  # highest priority first
    while n_fin < m:
        # one pass in priority order: starting an operator readies no other
        blocked = False
        for q in range(m):
            j = order[q]
            if state[j] != 0 or waiting[j] != 0:
                continue
            k = kind[j]
            mode = 0 if k == KIND_COLLECTIVE else fixed[j]
            demand(k, mode, ntc, nvc, &dtc, &dvc, &dlk)
            fits = dtc <= free_tc and dvc <= free_vc and dlk <= free_lk
            if fits and blocked and k != KIND_COLLECTIVE:
                fits = False
            if fits:
                starts[j] = t
                modes[j] = <int8_t> mode
                finish[j] = t + (da[j] if mode == 1 else ds[j])
                state[j] = 1
                free_tc -= dtc
                free_vc -= dvc
                free_lk -= dlk
            elif mode == 1 and k != KIND_COLLECTIVE:
                blocked = True
        nt = INFINITY
        for i in range(m):
            if state[i] == 1 and finish[i] < nt:
                nt = finish[i]
        if nt == INFINITY:
            return INFINITY
        t = nt
        for i in range(m):
            if state[i] == 1 and finish[i] <= t:
                state[i] = 2
                n_fin += 1
                demand(kind[i], modes[i], ntc, nvc, &dtc, &dvc, &dlk)
                free_tc += dtc
                free_vc += dvc
                free_lk += dlk
                if finish[i] > makespan:
                    makespan = finish[i]
                for e in range(succ_ptr[i], succ_ptr[i + 1]):
                    waiting[succ_idx[e]] -= 1
    return makespan


cdef inline void mode_priority(int64_t m, const double* ds, const double* da, const int8_t* md,
                               const int64_t* succ_ptr, const int64_t* succ_idx, double* dur,
                               double* prio) noexcept nogil:
    """Critical-path priorities (``tails``) at the durations of the modes ``md`` into
    ``prio`` (``dur``: scratch, receives those durations)."""
    cdef int64_t i
    for i in range(m):
        dur[i] = da[i] if md[i] == 1 else ds[i]
    tails(m, dur, succ_ptr, succ_idx, prio)


cdef double mode_search(int64_t m, const int64_t* kind, const double* ds, const double* da,
                        const int64_t* pred_ptr, const int64_t* succ_ptr, const int64_t* succ_idx,
                        int64_t ntc, int64_t nvc, double best, double target, double* starts,
                        int8_t* modes, int64_t rounds) noexcept nogil:
    """Local search over the mode vector, each vector decoded by ``psgs`` with
    critical-path priorities at that vector's durations: from the best schedule's modes
    and from "one core wherever intra-op scales no better than the cores it takes",
    flip one operator's mode at a time and keep every flip that shortens the schedule,
    for at most ``rounds`` passes. ``best`` is the makespan of (``starts``,
    ``modes``), which are overwritten by any shorter schedule. Returns the makespan;
    stops once it is <= ``target``."""
    cdef double* fin = <double*> xalloc(m * sizeof(double))
    cdef int64_t* waiting = <int64_t*> xalloc(m * sizeof(int64_t))
    cdef int64_t* state = <int64_t*> xalloc(m * sizeof(int64_t))
    cdef double* st = <double*> xalloc(m * sizeof(double))
    cdef int8_t* mo = <int8_t*> xalloc(m * sizeof(int8_t))
    cdef double* dur = <double*> xalloc(m * sizeof(double))
    cdef int8_t* md = <int8_t*> xalloc(m * sizeof(int8_t))
    cdef double* prio = <double*> xalloc(m * sizeof(double))
    cdef int64_t* order = <int64_t*> xalloc(m * sizeof(int64_t))
    cdef double* neg = <double*> xalloc(m * sizeof(double))
    cdef int64_t start, i, k, rnd, j
    cdef double cur, v
    cdef bint improved
    try:
        for start in range(2):
            for i in range(m):
                k = kind[i]
                if k == KIND_COLLECTIVE:
                    md[i] = 0
                elif start == 0:
                    md[i] = modes[i]
                else:
                    md[i] = scaling_mode(k, ds[i], da[i], ntc, nvc)
            mode_priority(m, ds, da, md, succ_ptr, succ_idx, dur, prio)
            cur = psgs(m, kind, ds, da, pred_ptr, succ_ptr, succ_idx, prio, md, ntc, nvc, st, mo,
                       fin, waiting, state, order, neg)
            if cur < best:
                best = cur
                for i in range(m):
                    starts[i] = st[i]
                    modes[i] = mo[i]
                if best <= target:
                    return best
            for rnd in range(rounds):
                improved = False
                for j in range(m):
                    if kind[j] == KIND_COLLECTIVE:
                        continue
                    md[j] = 1 - md[j]
                    mode_priority(m, ds, da, md, succ_ptr, succ_idx, dur, prio)
                    v = psgs(m, kind, ds, da, pred_ptr, succ_ptr, succ_idx, prio, md, ntc, nvc, st,
                             mo, fin, waiting, state, order, neg)
                    if v < cur * (1.0 - REL_EQ):
                        cur = v
                        improved = True
                        if v < best:
                            best = v
                            for i in range(m):
                                starts[i] = st[i]
                                modes[i] = mo[i]
                            if best <= target:
                                return best
                    else:
                        md[j] = 1 - md[j]
                if not improved:
                    break
        return best
    finally:
        free(fin)
        free(waiting)
        free(state)
        free(st)
        free(mo)
        free(dur)
        free(md)
        free(prio)
        free(order)
        free(neg)


# ---------------------------------------------------------------------------
# Python entry points (the driver's list_schedule; tests)
# ---------------------------------------------------------------------------
def _list_schedule(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                   const int64_t[::1] pred_ptr, const int64_t[::1] pred_idx,
                   const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx,
                   const uint8_t[:, :] reach, int64_t ntc, int64_t nvc, double target,
                   double[::1] starts, int8_t[::1] modes, int64_t max_passes=1000):
    """``list_schedule`` of one part (``reach`` its (m, m) block); returns the makespan."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0  # (every pass schedules nothing: makespan 0)
    assert reach.strides[1] == 1
    return list_schedule(m, &kind[0], &ds[0], &da[0], &pred_ptr[0],
                         &pred_idx[0] if pred_idx.shape[0] else NULL, &succ_ptr[0],
                         &succ_idx[0] if succ_idx.shape[0] else NULL, &reach[0, 0],
                         reach.strides[0], ntc, nvc, target, &starts[0], &modes[0], max_passes)


def _psgs(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
          const int64_t[::1] pred_ptr, const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx,
          const double[::1] prio, const int8_t[::1] fixed, int64_t ntc, int64_t nvc,
          double[::1] starts, int8_t[::1] modes, double[::1] finish, int64_t[::1] waiting,
          int64_t[::1] state):
    """``psgs`` on a whole graph (``finish``, ``waiting``, ``state``: scratch (m))."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0
    cdef int64_t[::1] order = np.empty(m, np.int64)
    cdef double[::1] neg = np.empty(m)
    return psgs(m, &kind[0], &ds[0], &da[0], &pred_ptr[0], &succ_ptr[0],
                &succ_idx[0] if succ_idx.shape[0] else NULL, &prio[0], &fixed[0], ntc, nvc,
                &starts[0], &modes[0], &finish[0], &waiting[0], &state[0], &order[0], &neg[0])


def _mode_search(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                 const int64_t[::1] pred_ptr, const int64_t[::1] succ_ptr,
                 const int64_t[::1] succ_idx, int64_t ntc, int64_t nvc, double best, double target,
                 double[::1] starts, int8_t[::1] modes, int64_t rounds):
    """``mode_search`` on a whole graph; returns the makespan."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return best
    return mode_search(m, &kind[0], &ds[0], &da[0], &pred_ptr[0], &succ_ptr[0],
                       &succ_idx[0] if succ_idx.shape[0] else NULL, ntc, nvc, best, target,
                       &starts[0], &modes[0], rounds)
