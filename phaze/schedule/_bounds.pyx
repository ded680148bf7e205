# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Lower bounds on one part's makespan: the quick bound, the strong bound with heads and
tails, mode exclusion against an upper bound, energetic reasoning; and the search's
per-architecture layer bound from latencies alone (docs/design.md §2.5).

Pointer conventions as in ``_energy`` and ``_windows`` (a part is an offset into the
graph's arrays; ``reach`` with row length ``rs``; ``opinfo`` (m, 3) row-major).
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free

from ._cdefs cimport KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, REL_EQ, core_weight, weights, xalloc
from ._energy cimport chain_energy, energies, energy_bound, fastest, tails
from ._windows cimport bottleneck_bound, hole_bound, path_window_bound, spine_window_bound

import numpy as np

#: lam values tried by the chain-weighted energy bound (it is not concave in lam).
_LAM_GRID = np.linspace(0.0, 1.0, 11)
_LAM_GRID.setflags(write=False)
cdef enum:
    N_LAM_GRID = 11
cdef double LAM_GRID[N_LAM_GRID]
for _q in range(N_LAM_GRID):
    LAM_GRID[_q] = _LAM_GRID[_q]


cdef double segment_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                          const int64_t* succ_ptr, const int64_t* succ_idx, int64_t ntc, int64_t nvc,
                          int64_t width_tc, int64_t width_vc) noexcept nogil:
    """Quick lower bound on one segment's makespan: critical path at the faster modes,
    link work, chip energy.

    ``width_tc``/``width_vc``: the most operators using a TC / a VC that the DAG lets run
    at once (widest antichain). Operators running at one instant are pairwise unordered,
    so no more than min(cores, width) one-core operators of a type ever run together: the
    energy bound weighs a one-core operator by 1/min(cores, width) of its type's share."""
    cdef int64_t cap_tc = width_tc if width_tc < ntc else ntc
    cdef int64_t cap_vc = width_vc if width_vc < nvc else nvc
    cdef double* dmin = <double*> xalloc(m * sizeof(double))
    cdef double* tail = <double*> xalloc(m * sizeof(double))
    cdef double lb = 0.0
    cdef double link = 0.0
    cdef double e
    cdef int64_t i
    fastest(m, kind, ds, da, dmin)
    tails(m, dmin, succ_ptr, succ_idx, tail)
    for i in range(m):
        if tail[i] > lb:
            lb = tail[i]
        if kind[i] == KIND_COLLECTIVE:
            link += ds[i]
    if link > lb:
        lb = link
    e = energy_bound(m, kind, ds, da, cap_tc, cap_vc)
    if e > lb:
        lb = e
    free(dmin)
    free(tail)
    return lb


cdef double side_bound(int64_t m, const int64_t* kind, const double* dmin, const double* ener,
                       int64_t n_lam, const uint8_t* reach, int64_t rs, int64_t i, double start,
                       const double* side, bint forward, double* acc) noexcept nogil:
    """H(i) (``forward``) or T(i) of ``strong_bound``: at least ``start`` (the critical
    path before / after i), the energy (each row of ``ener`` one lam) of the operators
    on that side of i, and for each collective c on that side, its own bound ``side[c]``
    plus its duration plus the energy of the operators between c and i. ``side`` must
    hold the bounds of the operators on that side already; ``acc`` is scratch (n_lam)."""
    cdef double h = start
    cdef double v
    cdef int64_t j, q, c, lo, hi
    for q in range(n_lam):
        acc[q] = 0.0
    for j in range(m):
        if (reach[j * rs + i] if forward else reach[i * rs + j]):
            for q in range(n_lam):
                acc[q] += ener[q * m + j]
    for q in range(n_lam):
        if acc[q] > h:
            h = acc[q]
    for c in range(m):
        if kind[c] != KIND_COLLECTIVE or not (reach[c * rs + i] if forward else reach[i * rs + c]):
            continue
        for q in range(n_lam):
            acc[q] = 0.0
        lo = c + 1 if forward else i + 1
        hi = i if forward else c
        for j in range(lo, hi):
            if ((reach[c * rs + j] and reach[j * rs + i]) if forward
                    else (reach[i * rs + j] and reach[j * rs + c])):
                for q in range(n_lam):
                    acc[q] += ener[q * m + j]
        for q in range(n_lam):
            v = side[c] + dmin[c] + acc[q]
            if v > h:
                h = v
    return h


cdef double strong_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                         const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                         int64_t nvc, int64_t width_tc, int64_t width_vc, const int64_t* opinfo,
                         double* head, double* tail) noexcept nogil:
    """Stronger (costlier) lower bound on one segment's makespan, the max of

    * chain-weighted energy (``chain_energy``) over a grid of lam;
    * for every operator i: H(i) + i at its faster mode + T(i), where H(i) bounds i's
      start: the critical path to i, the energy of i's ancestors (they all finish before
      i starts), and for each collective c before i, H(c) + c + the energy of the
      operators between c and i (they start after c ends and end before i starts);
      T(i) likewise bounds the time after i ends. Every lam gives a valid energy, so
      each term takes the best lam;
    * the longest path with energy windows (``path_window_bound``) and the
      chain-and-windows bounds of the vector and tensor cores (``spine_window_bound``);
    * chip energy plus the collectives' holes filled by whole operators (``hole_bound``).

    ``reach[i, j]`` is nonzero when i precedes j (local indices). ``head``/``tail``
    (length m) receive H(i) and T(i): in every schedule operator i starts no earlier
    than H(i) and ends at least T(i) before the makespan, whatever i's own mode."""
    cdef int64_t cap_tc = width_tc if width_tc < ntc else ntc
    cdef int64_t cap_vc = width_vc if width_vc < nvc else nvc
    cdef double lb = 0.0
    cdef double one_lam
    cdef const double* lams
    cdef int64_t n_lam, q, i, e, p
    cdef double lam, en, h, v
    cdef double* ener
    cdef double* dmin
    cdef double* tail_cp
    cdef double* acc
    if cap_tc == 0 or cap_vc == 0:
        one_lam = 1.0 if cap_vc == 0 else 0.0  # only one type's weight matters
        lams = &one_lam
        n_lam = 1
    else:
        lams = LAM_GRID
        n_lam = N_LAM_GRID
    ener = <double*> xalloc(n_lam * m * sizeof(double))
    for q in range(n_lam):
        lam = lams[q]
        en = chain_energy(m, kind, ds, da, pred_ptr, pred_idx, lam, ntc, nvc, cap_tc, cap_vc, opinfo)
        if en > lb:
            lb = en
        energies(m, kind, ds, da, lam, cap_tc, cap_vc, ener + q * m)
    dmin = <double*> xalloc(m * sizeof(double))
    tail_cp = <double*> xalloc(m * sizeof(double))
    fastest(m, kind, ds, da, dmin)
    tails(m, dmin, succ_ptr, succ_idx, tail_cp)
    for i in range(m):
        head[i] = 0.0
        tail[i] = 0.0
    acc = <double*> xalloc(n_lam * sizeof(double))
    for i in range(m):  # topological
        h = 0.0
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[e]
            v = head[p] + dmin[p]
            if v > h:
                h = v
        head[i] = side_bound(m, kind, dmin, ener, n_lam, reach, rs, i, h, head, True, acc)
    for i in range(m - 1, -1, -1):
        tail[i] = side_bound(m, kind, dmin, ener, n_lam, reach, rs, i, tail_cp[i] - dmin[i], tail,
                             False, acc)
        v = head[i] + dmin[i] + tail[i]
        if v > lb:
            lb = v
    # (every fifth lam: the windows' energies cost O(m^3) per lam)
    v = path_window_bound(m, kind, ds, reach, rs, dmin, ener, (n_lam + 4) // 5, 5 * m)
    if v > lb:
        lb = v
    v = spine_window_bound(m, kind, ds, da, reach, rs, dmin, ntc, nvc, True, cap_vc == 1)
    if v > lb:
        lb = v
    v = spine_window_bound(m, kind, ds, da, reach, rs, dmin, ntc, nvc, False, cap_tc == 1)
    if v > lb:
        lb = v
    if cap_vc == 1:
        v = bottleneck_bound(m, kind, ds, da, reach, rs, dmin, True)
        if v > lb:
            lb = v
    if cap_tc == 1:
        v = bottleneck_bound(m, kind, ds, da, reach, rs, dmin, False)
        if v > lb:
            lb = v
    v = hole_bound(m, kind, ds, da, reach, rs, lams, n_lam, cap_tc, cap_vc)
    if v > lb:
        lb = v
    free(ener)
    free(dmin)
    free(tail_cp)
    free(acc)
    return lb


cdef int64_t forced_modes(int64_t m, const int64_t* kind, const double* head, const double* tail,
                          double ub, double* ds_f, double* da_f) noexcept nogil:
    """Exclude modes that cannot appear in any schedule shorter than ``ub``.

    ``head[i]``/``tail[i]`` bound, in every schedule of the instance (``ds_f``, ``da_f``),
    when operator i starts and how long after its end the makespan is (``strong_bound``).
    If head + duration + tail >= ``ub`` at one mode, every schedule shorter than ``ub``
    runs i in its other mode; that mode's duration is raised to ``4 ub`` in place (a
    schedule using it is >= ``ub`` before and after), so the instances' schedules shorter
    than ``ub`` are the same. Returns the number of modes newly excluded, or -1 when
    some operator has both modes excluded (then no schedule is shorter than ``ub``)."""
    cdef double big = 4.0 * ub
    cdef int64_t excluded = 0
    cdef int64_t i
    cdef double rest
    cdef bint single_out, intra_out
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            continue
        rest = head[i] + tail[i]
        single_out = rest + ds_f[i] >= ub
        intra_out = rest + da_f[i] >= ub
        if single_out and intra_out:
            return -1
        if single_out and ds_f[i] < big:
            ds_f[i] = big
            excluded += 1
        if intra_out and da_f[i] < big:
            da_f[i] = big
            excluded += 1
    return excluded


cdef double forced_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                         const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                         int64_t nvc, int64_t width_tc, int64_t width_vc, const int64_t* opinfo,
                         double ub, double lb, double target, double* head,
                         double* tail) noexcept nogil:
    """Raise the lower bound ``lb`` by excluding modes that cannot beat ``ub``.

    ``head``/``tail`` come from ``strong_bound`` on (``ds``, ``da``). Alternates
    ``forced_modes`` and ``strong_bound`` on the restricted instance. Valid for any
    ``ub``: if the optimum is below ``ub`` its schedule is a schedule of every restricted
    instance, so the optimum is >= min(ub, bound of the restricted instance). Stops once
    ``lb`` reaches ``target`` or nothing new is excluded. Returns the new bound (<= ub
    unless ``lb`` already was above).

    An operator whose one-core mode is excluded never runs beside another, so the widths
    of one-core users (``width_tc``/``width_vc``, ``opinfo``'s first two columns) are
    capped by the number of operators of the type that may still run on one core (at
    least 1: any width >= the true one is valid)."""
    cdef double* ds_f = <double*> xalloc(m * sizeof(double))
    cdef double* da_f = <double*> xalloc(m * sizeof(double))
    cdef int64_t* info = <int64_t*> xalloc(3 * m * sizeof(int64_t))
    cdef double big = 4.0 * ub
    cdef double forced
    cdef int64_t i, rnd, n_out, n_tc, n_vc, own_tc, own_vc, w_tc, w_vc
    cdef bint one_core
    for i in range(m):
        ds_f[i] = ds[i]
        da_f[i] = da[i]
    for i in range(3 * m):
        info[i] = opinfo[i]
    try:
        for rnd in range(3):
            n_out = forced_modes(m, kind, head, tail, ub, ds_f, da_f)
            if n_out < 0:
                return ub if ub > lb else lb
            if n_out == 0:
                break
            n_tc = 0
            n_vc = 0
            for i in range(m):
                if kind[i] == KIND_COLLECTIVE or ds_f[i] >= big:
                    continue
                if kind[i] == KIND_GEMM or kind[i] == KIND_FUSED:
                    n_tc += 1
                if kind[i] == KIND_VECTOR or kind[i] == KIND_FUSED:
                    n_vc += 1
            for i in range(m):
                one_core = kind[i] != KIND_COLLECTIVE and ds_f[i] < big
                own_tc = 1 if one_core and (kind[i] == KIND_GEMM or kind[i] == KIND_FUSED) else 0
                own_vc = 1 if one_core and (kind[i] == KIND_VECTOR or kind[i] == KIND_FUSED) else 0
                if info[3 * i] > n_tc - own_tc:
                    info[3 * i] = n_tc - own_tc
                if info[3 * i + 1] > n_vc - own_vc:
                    info[3 * i + 1] = n_vc - own_vc
            w_tc = width_tc if width_tc < n_tc else n_tc
            w_vc = width_vc if width_vc < n_vc else n_vc
            if w_tc < 1:
                w_tc = 1
            if w_vc < 1:
                w_vc = 1
            forced = strong_bound(m, kind, ds_f, da_f, pred_ptr, pred_idx, succ_ptr, succ_idx, reach,
                                  rs, ntc, nvc, w_tc, w_vc, info, head, tail)
            if forced > ub:
                forced = ub
            if forced > lb:
                lb = forced
            if lb >= target:
                break
        return lb
    finally:
        free(ds_f)
        free(da_f)
        free(info)


cdef inline double least_overlap(double p, double est, double lft, double t1,
                                 double t2) noexcept nogil:
    """Least time a run of length ``p`` placed anywhere within [est, lft] spends in [t1, t2]."""
    cdef double v, left, right
    if p <= 0.0:
        return 0.0
    v = t2 - t1
    if p < v:
        v = p
    left = est + p - t1      # placed as early as possible
    if left < v:
        v = left
    right = t2 - (lft - p)   # placed as late as possible
    if right < v:
        v = right
    return v if v > 0.0 else 0.0


cdef bint energetic_infeasible(int64_t m, const int64_t* kind, const double* ds, const double* da,
                               const double* head, const double* tail, double makespan,
                               int64_t cap_tc, int64_t cap_vc) noexcept nogil:
    """True when no schedule has a makespan <= ``makespan`` (energetic reasoning).

    In such a schedule operator i runs within [head[i], makespan - tail[i]] (``head`` and
    ``tail`` as from ``strong_bound``, or from a restricted instance when ``makespan`` is
    below the ub it was restricted against). For every interval [t1, t2] with t1 a head
    and t2 an end limit, each operator spends at least its least overlap with the
    interval (over its modes that fit its window, weighted as in ``energy``), and the
    chip holds at most weight 1 (the link at most one collective) at a time; more than
    t2 - t1 of either, or an operator with no mode fitting its window, is a
    contradiction. Tried at lam 0 and 1 (vector cores' and tensor cores' work; lam 1/2
    and 1/4, 3/4 added nothing on sampled open cases). ``makespan`` is first
    raised by a relative ``REL_EQ`` so that the rounding in the heads' and tails' sums
    never rules out the makespan itself (the claim only gets weaker)."""
    cdef double wt, wv, t1, t2, chip, link, lft, least, v, span
    cdef int64_t q, x, y, i, k
    makespan = makespan * (1.0 + REL_EQ)
    for q in range(2):
        weights(1.0 * q, cap_tc, cap_vc, &wt, &wv)
        for x in range(m):
            t1 = head[x]
            for y in range(m):
                t2 = makespan - tail[y]
                if t2 <= t1:
                    continue
                chip = 0.0
                link = 0.0
                for i in range(m):
                    k = kind[i]
                    lft = makespan - tail[i]
                    if k == KIND_COLLECTIVE:
                        if head[i] + ds[i] > lft:
                            return True
                        link += least_overlap(ds[i], head[i], lft, t1, t2)
                        continue
                    least = INFINITY
                    if head[i] + ds[i] <= lft:
                        least = core_weight(k, wt, wv) * least_overlap(ds[i], head[i], lft, t1, t2)
                    if head[i] + da[i] <= lft:
                        v = least_overlap(da[i], head[i], lft, t1, t2)
                        if v < least:
                            least = v
                    if least == INFINITY:
                        return True
                    chip += least
                span = (t2 - t1) * (1.0 + REL_EQ)
                if chip > span or link > span:
                    return True
    return False


cdef void layer_lower_bounds(int64_t n_ops, int64_t n_archs, const int64_t* kind,
                             const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* order,
                             const double* single, const double* intra, const double* num_tc,
                             const double* num_vc, double* out, double* finish) noexcept nogil:
    """See ``_layer_lower_bounds_kernel``; ``single``/``intra`` (n_ops, n_archs) row-major,
    ``finish`` scratch (n_ops)."""
    cdef int64_t a, j, i, p, k
    cdef double tc_work, vc_work, link, start, f, dur, cp, best, s, x
    for i in range(n_ops):
        finish[i] = 0.0
    for a in range(n_archs):
        tc_work = 0.0
        vc_work = 0.0
        link = 0.0
        for j in range(n_ops):
            i = order[j]
            start = 0.0
            for p in range(pred_ptr[i], pred_ptr[i + 1]):
                f = finish[pred_idx[p]]
                if f > start:
                    start = f
            s = single[i * n_archs + a]
            x = intra[i * n_archs + a]
            dur = s if s <= x else x
            finish[i] = start + dur
            k = kind[i]
            if k == KIND_GEMM or k == KIND_FUSED:
                x = num_tc[a] * intra[i * n_archs + a]
                tc_work += s if s <= x else x
            if k == KIND_VECTOR or k == KIND_FUSED:
                x = num_vc[a] * intra[i * n_archs + a]
                vc_work += s if s <= x else x
            if k == KIND_COLLECTIVE:
                link += dur
        cp = 0.0
        for i in range(n_ops):
            if finish[i] > cp:
                cp = finish[i]
        best = cp
        if tc_work / num_tc[a] > best:
            best = tc_work / num_tc[a]
        if vc_work / num_vc[a] > best:
            best = vc_work / num_vc[a]
        if link > best:
            best = link
        out[a] = best


# ---------------------------------------------------------------------------
# Python entry points (the driver's lower_bound; tests call the bounds on their own)
# ---------------------------------------------------------------------------
def _segment_bound(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                   const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx, int64_t ntc, int64_t nvc,
                   int64_t width_tc, int64_t width_vc):
    """``segment_bound`` of one part (``succ_ptr`` the part's m + 1 pointers)."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0
    return segment_bound(m, &kind[0], &ds[0], &da[0], &succ_ptr[0], &succ_idx[0], ntc, nvc,
                         width_tc, width_vc)


def _strong_bound(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                  const int64_t[::1] pred_ptr, const int64_t[::1] pred_idx,
                  const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx,
                  const uint8_t[:, :] reach, int64_t ntc, int64_t nvc, int64_t width_tc,
                  int64_t width_vc, const int64_t[:, ::1] opinfo, double[::1] head,
                  double[::1] tail):
    """``strong_bound`` of one part: ``reach`` the part's (m, m) block (a slice of the
    graph's matrix: rows may be longer than m), ``head``/``tail`` receive H and T."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0
    assert reach.strides[1] == 1 and opinfo.shape[0] == m
    return strong_bound(m, &kind[0], &ds[0], &da[0], &pred_ptr[0], &pred_idx[0] if pred_idx.shape[0] else NULL,
                        &succ_ptr[0], &succ_idx[0] if succ_idx.shape[0] else NULL, &reach[0, 0],
                        reach.strides[0], ntc, nvc, width_tc, width_vc, &opinfo[0, 0], &head[0], &tail[0])


def _forced_bound(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                  const int64_t[::1] pred_ptr, const int64_t[::1] pred_idx,
                  const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx,
                  const uint8_t[:, :] reach, int64_t ntc, int64_t nvc, int64_t width_tc,
                  int64_t width_vc, const int64_t[:, ::1] opinfo, double ub, double lb,
                  double target, double[::1] head, double[::1] tail):
    """``forced_bound`` of one part (arguments as ``_strong_bound``, then ub, lb, target)."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return lb
    assert reach.strides[1] == 1 and opinfo.shape[0] == m
    return forced_bound(m, &kind[0], &ds[0], &da[0], &pred_ptr[0], &pred_idx[0] if pred_idx.shape[0] else NULL,
                        &succ_ptr[0], &succ_idx[0] if succ_idx.shape[0] else NULL, &reach[0, 0],
                        reach.strides[0], ntc, nvc, width_tc, width_vc, &opinfo[0, 0], ub, lb, target,
                        &head[0], &tail[0])


def _energetic_infeasible(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                          const double[::1] head, const double[::1] tail, double makespan,
                          int64_t cap_tc, int64_t cap_vc):
    """``energetic_infeasible`` of one part."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return False
    return energetic_infeasible(m, &kind[0], &ds[0], &da[0], &head[0], &tail[0], makespan,
                                cap_tc, cap_vc)


def _layer_lower_bounds_kernel(const int64_t[::1] kind, const int64_t[::1] pred_ptr,
                               const int64_t[::1] pred_idx, const int64_t[::1] order,
                               const double[:, ::1] single, const double[:, ::1] intra,
                               const double[::1] num_tc, const double[::1] num_vc):
    """Lower bound on a layer's makespan per architecture, from operator latencies.

    Valid for the schedule model of docs/design.md §2.5: every operator takes at least
    min(single, intra) and waits for its predecessors (critical path); tensor-core
    busy time is single (one core) or num_tc·intra (all cores), so the makespan is at
    least the total of the cheaper of the two over num_tc (same for vector cores);
    collectives share one link, one at a time. ``single``/``intra`` (n_ops, n_archs)."""
    cdef int64_t n_ops = single.shape[0]
    cdef int64_t n_archs = single.shape[1]
    out = np.zeros(n_archs)
    if n_ops == 0 or n_archs == 0:
        return out
    cdef double[::1] o = out
    cdef double[::1] finish = np.zeros(n_ops)
    cdef const int64_t* pidx = &pred_idx[0] if pred_idx.shape[0] else NULL
    with nogil:
        layer_lower_bounds(n_ops, n_archs, &kind[0], &pred_ptr[0], pidx, &order[0],
                           &single[0, 0], &intra[0, 0], &num_tc[0], &num_vc[0], &o[0], &finish[0])
    return out
