# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Window bounds of one part: chains of operators with the work that must fit between
them (longest path with energy windows, the chain of one core type with its windows,
the single busy core type, the collectives' holes filled by whole operators).
``strong_bound`` (in ``_bounds``) takes the max of them (docs/design.md §2.5).

``reach`` points at the part's first row and column of the graph's reachability matrix,
``rs`` is that matrix's row length: ``reach[j * rs + i]`` is nonzero when local operator
j precedes local operator i (the part's block of the whole matrix, as the numpy slice
``reach[b:e, b:e]``). ``ener`` holds ``n_lam`` rows ``ener_rs`` apart.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free
from libc.string cimport memset

from ._cdefs cimport KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, core_weight, weights, xalloc
from ._energy cimport energies

import numpy as np

# Most partial fillings kept by the hole bound's dynamic program; an operator that would
# exceed it is relaxed to the divisible class (still a valid bound, only weaker). More
# collectives than HOLE_EXACT_MAX in a part: every operator is relaxed to divisible (the
# fillings' dynamic program is over one dimension per collective; transformer parts have
# at most two). Compile-time constants of the kernel.
cdef enum:
    HOLE_STATES = 64
    HOLE_EXACT_MAX = 6

_HOLE_STATES = HOLE_STATES
_HOLE_EXACT_MAX = HOLE_EXACT_MAX


cdef double path_window_bound(int64_t m, const int64_t* kind, const double* ds, const uint8_t* reach,
                              int64_t rs, const double* dmin, const double* ener, int64_t n_lam,
                              int64_t ener_rs) noexcept nogil:
    """Longest path with energy windows: for any chain i_1 < ... < i_k of operators, the
    makespan is at least the chain's fastest durations plus, for each window between
    consecutive chain operators (and before i_1 / after i_k), the most of its members'
    chip energy (any row of ``ener``, one per lam) and link work: the members all run
    after the earlier chain operator ends and before the later one starts. The chain
    maximising that sum is found by dynamic programming over the (transitive) ``reach``.
    With empty windows this is the critical path; with one chain operator, energy."""
    cdef double* acc = <double*> xalloc((n_lam + 1) * sizeof(double))
    cdef double* best = <double*> xalloc(m * sizeof(double))
    cdef double lb = 0.0
    cdef double h, w, t
    cdef int64_t i, j, k, q
    for i in range(m):
        best[i] = 0.0
    for i in range(m):  # topological
        # window before i as the first chain operator: all its ancestors
        for q in range(n_lam + 1):
            acc[q] = 0.0
        for k in range(i):
            if reach[k * rs + i]:
                for q in range(n_lam):
                    acc[q] += ener[q * ener_rs + k]
                if kind[k] == KIND_COLLECTIVE:
                    acc[n_lam] += ds[k]
        h = 0.0
        for q in range(n_lam + 1):
            if acc[q] > h:
                h = acc[q]
        for j in range(i):
            if not reach[j * rs + i]:
                continue
            for q in range(n_lam + 1):
                acc[q] = 0.0
            for k in range(j + 1, i):
                if reach[j * rs + k] and reach[k * rs + i]:
                    for q in range(n_lam):
                        acc[q] += ener[q * ener_rs + k]
                    if kind[k] == KIND_COLLECTIVE:
                        acc[n_lam] += ds[k]
            w = 0.0
            for q in range(n_lam + 1):
                if acc[q] > w:
                    w = acc[q]
            if best[j] + w > h:
                h = best[j] + w
        best[i] = h + dmin[i]
        # window after i as the last chain operator: all its descendants
        for q in range(n_lam + 1):
            acc[q] = 0.0
        for k in range(i + 1, m):
            if reach[i * rs + k]:
                for q in range(n_lam):
                    acc[q] += ener[q * ener_rs + k]
                if kind[k] == KIND_COLLECTIVE:
                    acc[n_lam] += ds[k]
        t = 0.0
        for q in range(n_lam + 1):
            if acc[q] > t:
                t = acc[q]
        if best[i] + t > lb:
            lb = best[i] + t
    free(acc)
    free(best)
    return lb


cdef double spine_window_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                               const uint8_t* reach, int64_t rs, const double* dmin, int64_t ntc,
                               int64_t nvc, bint vector_side, bint one_at_a_time) noexcept nogil:
    """Chain-and-windows bound. Take the heaviest chain v_1 < ... < v_k of the operators
    using one core type (vector cores when ``vector_side``, else tensor cores), by fastest
    duration. The chain's operators run one after another; between the end of v_g and the
    start of v_{g+1} lies a window holding every operator that follows v_g and precedes
    v_{g+1} (and before v_1 / after v_k the windows of v_1's ancestors / v_k's
    descendants). Chain operators and windows are disjoint in time, so the makespan is at
    least the chain's fastest durations plus, per window, a bound on its members alone:
    the max of their critical path, their TC work sum min(s/num_tc, a), VC work
    sum min(s/num_vc, a) and link work.

    When ``one_at_a_time`` (one core of that type, or its users pairwise ordered) the
    type's total busy time B plus the windows, less what the off-chain users of the type
    could fill inside the windows (their longest durations), is a bound too: the type's
    cores idle in a window whenever no off-chain user runs there."""
    cdef uint8_t* uses
    cdef uint8_t* on_chain
    cdef double* weight
    cdef int64_t* prev
    cdef int64_t* chain
    cdef int64_t* window
    cdef double* head
    cdef double* cp
    cdef double* e_tc
    cdef double* e_vc
    cdef double* e_lk
    cdef double busy = 0.0
    cdef double w, chain_time, fill, h, x, v, windows, lb
    cdef int64_t i, j, k, g, last, k_len, pos, after, before
    uses = <uint8_t*> xalloc(m * sizeof(uint8_t))
    for i in range(m):
        uses[i] = False
        k = kind[i]
        if k == KIND_FUSED or (k == KIND_VECTOR if vector_side else k == KIND_GEMM):
            uses[i] = True
            busy += dmin[i]
    # heaviest chain of users (local order is topological; reach is transitive)
    weight = <double*> xalloc(m * sizeof(double))
    prev = <int64_t*> xalloc(m * sizeof(int64_t))
    for i in range(m):
        weight[i] = 0.0
        prev[i] = -1
    last = -1
    for i in range(m):
        if not uses[i]:
            continue
        w = 0.0
        for j in range(i):
            if uses[j] and reach[j * rs + i] and weight[j] > w:
                w = weight[j]
                prev[i] = j
        weight[i] = w + dmin[i]
        if last < 0 or weight[i] > weight[last]:
            last = i
    if last < 0:
        free(uses)
        free(weight)
        free(prev)
        return 0.0
    on_chain = <uint8_t*> xalloc(m * sizeof(uint8_t))
    memset(on_chain, 0, m * sizeof(uint8_t))
    k_len = 0
    i = last
    while i >= 0:
        on_chain[i] = True
        k_len += 1
        i = prev[i]
    chain = <int64_t*> xalloc(k_len * sizeof(int64_t))
    pos = 0
    for i in range(m):
        if on_chain[i]:
            chain[pos] = i
            pos += 1
    chain_time = weight[last]
    # window of each off-chain operator: g when it follows chain[g-1] and precedes chain[g]
    window = <int64_t*> xalloc(m * sizeof(int64_t))
    fill = 0.0
    for i in range(m):
        window[i] = -1
        if on_chain[i]:
            continue
        after = 0  # number of chain operators that precede i
        for g in range(k_len):
            if reach[chain[g] * rs + i]:
                after = g + 1
        before = k_len  # index of the first chain operator that i precedes
        for g in range(k_len - 1, -1, -1):
            if reach[i * rs + chain[g]]:
                before = g
        if before == after:
            window[i] = after
        if uses[i]:
            fill += ds[i] if ds[i] > da[i] else da[i]
    head = <double*> xalloc(m * sizeof(double))
    cp = <double*> xalloc((k_len + 1) * sizeof(double))
    e_tc = <double*> xalloc((k_len + 1) * sizeof(double))
    e_vc = <double*> xalloc((k_len + 1) * sizeof(double))
    e_lk = <double*> xalloc((k_len + 1) * sizeof(double))
    for i in range(m):
        head[i] = 0.0
    for g in range(k_len + 1):
        cp[g] = 0.0
        e_tc[g] = 0.0
        e_vc[g] = 0.0
        e_lk[g] = 0.0
    for i in range(m):
        g = window[i]
        if g < 0:
            continue
        h = 0.0
        for j in range(i):
            if window[j] == g and reach[j * rs + i] and head[j] + dmin[j] > h:
                h = head[j] + dmin[j]
        head[i] = h
        if h + dmin[i] > cp[g]:
            cp[g] = h + dmin[i]
        k = kind[i]
        if k == KIND_COLLECTIVE:
            e_lk[g] += ds[i]
            continue
        if k == KIND_GEMM or k == KIND_FUSED:
            x = ds[i] / ntc
            e_tc[g] += x if x < da[i] else da[i]
        if k == KIND_VECTOR or k == KIND_FUSED:
            x = ds[i] / nvc
            e_vc[g] += x if x < da[i] else da[i]
    windows = 0.0
    for g in range(k_len + 1):
        v = cp[g]
        if e_tc[g] > v:
            v = e_tc[g]
        if e_vc[g] > v:
            v = e_vc[g]
        if e_lk[g] > v:
            v = e_lk[g]
        windows += v
    lb = chain_time + windows
    if one_at_a_time:
        v = busy + windows - fill
        if v > lb:
            lb = v
    free(uses)
    free(weight)
    free(prev)
    free(on_chain)
    free(chain)
    free(window)
    free(head)
    free(cp)
    free(e_tc)
    free(e_vc)
    free(e_lk)
    return lb


cdef double bottleneck_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                             const uint8_t* reach, int64_t rs, const double* dmin,
                             bint vector_side) noexcept nogil:
    """Bound for a core type of which at most one operator runs at a time (one core, or
    its users pairwise ordered): its users run one after another for B >= sum of their
    faster durations. Outside that busy time lie every intra-op operator of the other
    type (disjoint from everything) and, for a one-core operator j of the other type,
    at least r_j = s_j - (one-core time of the busy-type users unordered with j), the
    most it can overlap. So makespan >= B + min over R of (R + sum of a_j with r_j > R)
    (the one-core operators share R, the others go intra-op)."""
    cdef double busy = 0.0
    cdef double* r = <double*> xalloc(m * sizeof(double))
    cdef uint8_t* other = <uint8_t*> xalloc(m * sizeof(uint8_t))
    cdef double ov, rj, best, big_r, val
    cdef int64_t i, j, k, v, q
    cdef bint uses_busy
    for i in range(m):
        r[i] = 0.0
        other[i] = False
    for i in range(m):
        k = kind[i]
        if k == KIND_COLLECTIVE:
            continue
        uses_busy = (k == KIND_FUSED) or (k == KIND_VECTOR if vector_side else k == KIND_GEMM)
        if uses_busy:
            busy += dmin[i]
        else:
            other[i] = True
    for j in range(m):
        if not other[j]:
            continue
        ov = 0.0
        for v in range(m):
            if v == j or other[v] or kind[v] == KIND_COLLECTIVE:
                continue
            if not reach[v * rs + j] and not reach[j * rs + v]:
                ov += ds[v]
        rj = ds[j] - ov
        r[j] = rj if rj > 0.0 else 0.0
    best = INFINITY
    for q in range(-1, m):
        if q >= 0 and not other[q]:
            continue
        big_r = 0.0 if q < 0 else r[q]
        val = big_r
        for j in range(m):
            if other[j] and r[j] > big_r:
                val += da[j]
        if val < best:
            best = val
    free(r)
    free(other)
    return busy + best


cdef double hole_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                       const uint8_t* reach, int64_t rs, const double* lams, int64_t n_lams,
                       int64_t cap_tc, int64_t cap_vc) noexcept nogil:
    """Chip energy plus the collectives' idle holes, with whole operators in the holes;
    the best over the energy weights ``lams``.

    The collectives run one at a time on the link, so their runs (holes) are disjoint and
    the makespan is at least sum_k d_k + (energy run outside the holes). With the
    energies of ``energy`` (the running weight never exceeds 1), an operator i at its
    actual mode spends E_i >= e_i (its least energy), and inside hole k it can spend
    f_ik <= d_k (summed over operators), only if it is unordered with that collective.
    So makespan >= sum_i e_i + sum_k d_k - max(sum_ik f_ik - sum_i (E_i - e_i)).

    The maximum is bounded with operators in two classes. *Whole*: intra-op is the
    least-energy mode, one core could not gain anything (its extra energy is at least
    what it could put in the holes), and every two holes it may meet are separated by a
    compute operator that must run between them, which an intra-op operator spanning
    both would overlap: it fills min(a_i, d_k) of one hole at most. *Divisible* (all
    others): at most max(w_i min(s_i, d_k), min(a_i, d_k)) in hole k and e_i in all. The
    whole operators' fillings are enumerated exactly (Pareto-optimal fillings per hole,
    each capped at the hole), the divisible ones relaxed. An operator whose fillings would
    need more than ``HOLE_STATES`` states (or more than 4 x that many candidates), and
    every operator of a part with more than ``HOLE_EXACT_MAX`` collectives, is relaxed
    to divisible instead (valid, only weaker)."""
    cdef int64_t n_holes = 0
    cdef int64_t i, j, k, l, q, a, b, c, n_states, n_cand, s, x, y, n_new
    cdef int64_t* hole
    cdef double* dh
    cdef uint8_t* sep
    cdef uint8_t* elig
    cdef uint8_t* spans
    cdef int64_t* n_elig
    cdef double* states
    cdef double* cand
    cdef uint8_t* keep
    cdef double* div_cap
    cdef double* ener
    cdef double total_d = 0.0
    cdef double best = 0.0
    cdef double lam, wt, wv, total_e, div_total, w, e, one_core_fill, v, f1, f2, gain, g1, g2, g
    cdef bint whole, ge, gt
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            n_holes += 1
    if n_holes == 0:
        return 0.0
    hole = <int64_t*> xalloc(n_holes * sizeof(int64_t))
    dh = <double*> xalloc(n_holes * sizeof(double))
    q = 0
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            hole[q] = i
            dh[q] = ds[i]
            total_d += ds[i]
            q += 1
    # holes k, l separated: a compute operator of positive duration lies between them
    sep = <uint8_t*> xalloc(n_holes * n_holes * sizeof(uint8_t))
    memset(sep, 0, n_holes * n_holes * sizeof(uint8_t))
    for k in range(n_holes):
        for l in range(n_holes):
            a = hole[k]
            b = hole[l]
            if k == l or not reach[a * rs + b]:
                continue
            for j in range(m):
                if (kind[j] != KIND_COLLECTIVE and reach[a * rs + j] and reach[j * rs + b]
                        and ds[j] > 0.0 and da[j] > 0.0):
                    sep[k * n_holes + l] = True
                    sep[l * n_holes + k] = True
                    break
    # elig[i, k]: operator i is unordered with collective k; spans: i may meet two
    # holes that are not separated (then never whole)
    elig = <uint8_t*> xalloc(m * n_holes * sizeof(uint8_t))
    spans = <uint8_t*> xalloc(m * sizeof(uint8_t))
    n_elig = <int64_t*> xalloc(m * sizeof(int64_t))
    memset(elig, 0, m * n_holes * sizeof(uint8_t))
    for i in range(m):
        spans[i] = False
        n_elig[i] = 0
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            continue
        for k in range(n_holes):
            c = hole[k]
            if not reach[i * rs + c] and not reach[c * rs + i]:
                elig[i * n_holes + k] = True
                n_elig[i] += 1
        for k in range(n_holes):
            for l in range(k + 1, n_holes):
                if elig[i * n_holes + k] and elig[i * n_holes + l] and not sep[k * n_holes + l]:
                    spans[i] = True
    states = <double*> xalloc(HOLE_STATES * n_holes * sizeof(double))
    for x in range(HOLE_STATES * n_holes):
        states[x] = 0.0
    cand = <double*> xalloc(4 * HOLE_STATES * n_holes * sizeof(double))
    keep = <uint8_t*> xalloc(4 * HOLE_STATES * sizeof(uint8_t))
    div_cap = <double*> xalloc(n_holes * sizeof(double))
    ener = <double*> xalloc(m * sizeof(double))
    for q in range(n_lams):
        lam = lams[q]
        weights(lam, cap_tc, cap_vc, &wt, &wv)
        energies(m, kind, ds, da, lam, cap_tc, cap_vc, ener)
        total_e = 0.0
        div_total = 0.0
        for k in range(n_holes):
            div_cap[k] = 0.0
            states[k] = 0.0
        n_states = 1
        for i in range(m):
            if kind[i] == KIND_COLLECTIVE:
                continue
            w = core_weight(kind[i], wt, wv)
            e = ener[i]
            total_e += e
            if e <= 0.0 or n_elig[i] == 0:
                continue
            whole = e == da[i] and not spans[i] and n_holes <= HOLE_EXACT_MAX
            # (bounded work: at most 4 x HOLE_STATES candidate fillings per operator)
            if whole and n_states * (n_elig[i] + 1) > 4 * HOLE_STATES:
                whole = False
            if whole:
                one_core_fill = 0.0
                for k in range(n_holes):
                    if elig[i * n_holes + k]:
                        one_core_fill += w * (ds[i] if ds[i] < dh[k] else dh[k])
                whole = one_core_fill <= w * ds[i] - e
            if whole:
                # the Pareto set of fillings, extended by i in each hole it may meet
                n_cand = 0
                for s in range(n_states):
                    for k in range(n_holes + 1):
                        if k < n_holes and not elig[i * n_holes + k]:
                            continue
                        for l in range(n_holes):
                            cand[n_cand * n_holes + l] = states[s * n_holes + l]
                        if k < n_holes:
                            v = cand[n_cand * n_holes + k] + (da[i] if da[i] < dh[k] else dh[k])
                            cand[n_cand * n_holes + k] = v if v < dh[k] else dh[k]
                        n_cand += 1
                n_new = 0
                for x in range(n_cand):
                    keep[x] = True
                    for y in range(n_cand):
                        if y == x:
                            continue
                        ge = True
                        gt = False
                        for l in range(n_holes):
                            if cand[y * n_holes + l] < cand[x * n_holes + l]:
                                ge = False
                                break
                            if cand[y * n_holes + l] > cand[x * n_holes + l]:
                                gt = True
                        if ge and (gt or y < x):
                            keep[x] = False
                            break
                    if keep[x]:
                        n_new += 1
                if n_new <= HOLE_STATES:
                    n_states = 0
                    for x in range(n_cand):
                        if keep[x]:
                            for l in range(n_holes):
                                states[n_states * n_holes + l] = cand[x * n_holes + l]
                            n_states += 1
                    continue
            # divisible (or too many fillings)
            div_total += e
            for k in range(n_holes):
                if elig[i * n_holes + k]:
                    f1 = w * (ds[i] if ds[i] < dh[k] else dh[k])
                    f2 = da[i] if da[i] < dh[k] else dh[k]
                    div_cap[k] += f1 if f1 > f2 else f2
        gain = 0.0
        for s in range(n_states):
            g1 = 0.0
            g2 = div_total
            for k in range(n_holes):
                v = states[s * n_holes + k] + div_cap[k]
                g1 += v if v < dh[k] else dh[k]
                g2 += states[s * n_holes + k]
            g = g1 if g1 < g2 else g2
            if g > gain:
                gain = g
        v = total_e + total_d - gain
        if v > best:
            best = v
    free(hole)
    free(dh)
    free(sep)
    free(elig)
    free(spans)
    free(n_elig)
    free(states)
    free(cand)
    free(keep)
    free(div_cap)
    free(ener)
    return best


# ---------------------------------------------------------------------------
# Python entry points (tests call the bounds on their own)
# ---------------------------------------------------------------------------
def _spine_window_bound(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                        const uint8_t[:, ::1] reach, const double[::1] dmin, int64_t ntc,
                        int64_t nvc, bint vector_side, bint one_at_a_time):
    """``spine_window_bound`` on a whole graph (``reach`` (m, m))."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0
    return spine_window_bound(m, &kind[0], &ds[0], &da[0], &reach[0, 0], reach.shape[1], &dmin[0],
                              ntc, nvc, vector_side, one_at_a_time)


def _hole_bound(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                const uint8_t[:, ::1] reach, const double[::1] lams, int64_t cap_tc, int64_t cap_vc):
    """``hole_bound`` on a whole graph (``reach`` (m, m))."""
    cdef int64_t m = kind.shape[0]
    if m == 0:
        return 0.0
    return hole_bound(m, &kind[0], &ds[0], &da[0], &reach[0, 0], reach.shape[1], &lams[0],
                      lams.shape[0], cap_tc, cap_vc)
