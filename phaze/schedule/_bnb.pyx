# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Exact branch and bound over serial schedule generation, with its cutset-dominance
table (docs/design.md §2.5).

Pointer conventions as in ``_energy``. The table is numpy memory (``_bnb_table``, made
with the GIL once per thread) seen through a ``BnbTable`` of raw pointers.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, int8_t, uint8_t
from libc.stdlib cimport free
from libc.string cimport memcpy

from ._cdefs cimport KIND_COLLECTIVE, KIND_GEMM, KIND_VECTOR, REL_EQ, core_weight, demand, weights, xalloc
from ._energy cimport fastest, tails
from ._profile cimport earliest, insert

import numpy as np

#: dominance table: buckets x ways (entries replaced round robin within a bucket), about
#: one entry per placement tried, up to its largest size (a quarter of that certified 147
#: of 300 sampled open parts with 50,000 placements, one per placement 175, in less
#: time). A placed set is often reached by many partial schedules, all in its bucket:
#: with the same entries, 16 ways certified 160 of 300 sampled open parts with 20,000
#: placements, 4 ways 112 (32 ways 165)
_BNB_TABLE_WAYS = BNB_TABLE_WAYS
#: buckets of the table at the start of a search: it grows four-fold each time the
#: placements tried outnumber its entries, up to the largest size (starting at 64
#: buckets lost entries to full buckets early on: the gpt3-175b sweep of
#: bench_schedule.py took 59.6 s against 44.9 s with 2,048 and 30,000 placements)
_BNB_TABLE_MIN_BUCKETS = BNB_TABLE_MIN_BUCKETS
#: largest size: about 135 MB per thread for a 26-operator part when a search fills it
#: (the pages are touched only as the table grows)
_BNB_TABLE_MAX_BUCKETS = BNB_TABLE_MAX_BUCKETS

#: lam of the energy bound at each node: tensor cores only, vector cores only, both
cdef enum:
    N_BNB_LAMS = 3
cdef double BNB_LAMS[N_BNB_LAMS]
BNB_LAMS[0] = 1.0
BNB_LAMS[1] = 0.0
BNB_LAMS[2] = 0.5
_BNB_LAMS = np.array([BNB_LAMS[0], BNB_LAMS[1], BNB_LAMS[2]])


cdef double cert_level(double ub, double gap, double slack) noexcept nogil:
    """Just above ub (1 - gap), by ``slack`` x ``REL_EQ`` (never above ub): a bound that
    reaches it certifies ub, and proving no schedule is that short reaches it."""
    cdef double v = ub * (1.0 - gap) * (1.0 + slack * REL_EQ)
    return v if v < ub else ub


cdef inline int64_t mask_bucket(int64_t mask, int64_t n_buckets) noexcept nogil:
    """Bucket of a placed-set bit mask (>= 0): its bits folded, so that sets differing in
    late operators spread too."""
    return (mask ^ (mask >> 13) ^ (mask >> 29) ^ (mask >> 47)) % n_buckets


cdef void table_put(BnbTable* tb, int64_t h, int64_t key, double last, double cmax,
                    const double* fin, const int8_t* md, int64_t m) noexcept nogil:
    """Store a searched node in bucket ``h`` of the dominance table, over its oldest
    entry (round robin): placed set ``key``, last start, makespan so far, and the ends
    and modes of operators 0 .. m - 1."""
    cdef int64_t w = tb.next[h]
    cdef int64_t slot = h * BNB_TABLE_WAYS + w
    cdef int64_t p
    tb.next[h] = (w + 1) % BNB_TABLE_WAYS
    tb.key[slot] = key
    tb.last[slot] = last
    tb.cmax[slot] = cmax
    for p in range(m):
        tb.fin[slot * tb.width + p] = fin[p]
        tb.mode[slot * tb.width + p] = md[p]


cdef int64_t grow_table(BnbTable* tb, int64_t n_buckets, int64_t factor) noexcept nogil:
    """Spread the dominance table's entries over ``factor`` x ``n_buckets`` buckets (at
    most all the rows; in place, rows past ``n_buckets`` are unused so far; powers of
    two). Returns the new bucket count."""
    cdef int64_t grown = n_buckets * factor
    cdef int64_t width = tb.width  # (a table for more operators than the part: the extra columns ride along)
    cdef int64_t h, w, slot
    cdef int64_t keys[BNB_TABLE_WAYS]
    cdef double lasts[BNB_TABLE_WAYS]
    cdef double cmaxes[BNB_TABLE_WAYS]
    cdef double* fins
    cdef int8_t* mds
    if grown > tb.rows:
        grown = tb.rows
    for h in range(n_buckets * BNB_TABLE_WAYS, grown * BNB_TABLE_WAYS):
        tb.key[h] = -1
    for h in range(n_buckets, grown):
        tb.next[h] = 0
    fins = <double*> xalloc(BNB_TABLE_WAYS * width * sizeof(double))
    mds = <int8_t*> xalloc(BNB_TABLE_WAYS * width * sizeof(int8_t))
    for h in range(n_buckets):
        # an old bucket's entries go only to buckets h, h + n_buckets, ...
        for w in range(BNB_TABLE_WAYS):
            slot = h * BNB_TABLE_WAYS + w
            keys[w] = tb.key[slot]
            lasts[w] = tb.last[slot]
            cmaxes[w] = tb.cmax[slot]
            memcpy(fins + w * width, tb.fin + slot * width, width * sizeof(double))
            memcpy(mds + w * width, tb.mode + slot * width, width * sizeof(int8_t))
            tb.key[slot] = -1
        tb.next[h] = 0
        for w in range(BNB_TABLE_WAYS):
            if keys[w] >= 0:
                table_put(tb, mask_bucket(keys[w], grown), keys[w], lasts[w], cmaxes[w],
                          fins + w * width, mds + w * width, width)
    free(fins)
    free(mds)
    return grown


cdef bint dominated(int64_t m, const double* efin, const int8_t* emode, const int64_t* kind,
                    const uint8_t* done, const double* fin, const int8_t* md, double t,
                    const int64_t* pred_ptr, const int64_t* pred_idx, int64_t ntc,
                    int64_t nvc) noexcept nogil:
    """Whether a fully searched node E (same placed set, last start and makespan so far
    no later; its operators' ends ``efin`` and modes ``emode``) leaves every completion
    of the current node (last start ``t``, ends ``fin``, modes ``md``) open to it:
    every operator not placed may start as early after E's predecessors as after
    ours, and from t on E holds no more tensor cores, vector cores or link at any
    moment (both hold less and less after t: nothing placed starts later)."""
    cdef bint simple = True  # each operator still running after t ends no later, holding no more
    cdef int64_t p, j, e, x
    cdef int64_t etc, evc, elk, ctc, cvc, clk, a, b, c
    cdef double re, rc, tau
    for p in range(m):
        if done[p] and efin[p] > t and (efin[p] > fin[p] or emode[p] > md[p]):
            simple = False
            break
    if simple:
        return True
    for j in range(m):
        if done[j]:
            continue
        re = t
        rc = t
        for e in range(pred_ptr[j], pred_ptr[j + 1]):
            p = pred_idx[e]
            if done[p]:
                if efin[p] > re:
                    re = efin[p]
                if fin[p] > rc:
                    rc = fin[p]
        if re > rc:
            return False
    # holdings are step functions falling at the ends: compare them at t and just
    # after each of our ends (ours is flat in between, E's only falls)
    for x in range(-1, m):
        if x >= 0 and not (done[x] and fin[x] > t):
            continue
        tau = t if x < 0 else fin[x]
        etc = 0
        evc = 0
        elk = 0
        ctc = 0
        cvc = 0
        clk = 0
        for p in range(m):
            if not done[p]:
                continue
            if efin[p] > tau:
                demand(kind[p], emode[p], ntc, nvc, &a, &b, &c)
                etc += a
                evc += b
                elk += c
            if fin[p] > tau:
                demand(kind[p], md[p], ntc, nvc, &a, &b, &c)
                ctc += a
                cvc += b
                clk += c
        if etc > ctc or evc > cvc or elk > clk:
            return False
    return True


cdef bint successors_within(const int64_t* succ_ptr, const int64_t* succ_idx, int64_t i,
                            int64_t j) noexcept nogil:
    """Every successor of operator i is a successor of operator j."""
    cdef int64_t e, f
    cdef bint found
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        found = False
        for f in range(succ_ptr[j], succ_ptr[j + 1]):
            if succ_idx[f] == succ_idx[e]:
                found = True
                break
        if not found:
            return False
    return True


cdef struct Search:
    # scratch of one search, freed together
    double* dmin
    double* head
    double* tail
    uint8_t* allow       # (m, 2)
    double* wts          # (N_BNB_LAMS, 2)
    int64_t* chain       # (m, 2)
    int64_t* desc
    int64_t* chain_end   # (m, 2)
    int64_t* chain_seen  # (m, 2)
    double* wnode        # (N_BNB_LAMS, 2)
    int64_t* sub_ptr
    int64_t* sub_idx
    double* pt           # (m + 1, cap)
    int64_t* ptc
    int64_t* pvc
    int64_t* plk
    int64_t* npc
    double* last
    double* cmax
    int64_t* mask
    double* rem_link
    int64_t* choice
    int64_t* placed
    int64_t* waiting
    uint8_t* done
    double* st
    int8_t* md
    double* fin
    double* rel
    double* dnode


cdef bint search_body(int64_t m, const int64_t* kind, const double* ds, const double* da,
                      const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                      const int64_t* succ_idx, int64_t ntc, int64_t nvc, int64_t width_tc,
                      int64_t width_vc, const double* head_in, const double* tail_in, double* ub_io,
                      double* thr_io, double gap, int64_t node_limit, double* starts, int8_t* modes,
                      BnbTable* tb, Search* s) noexcept nogil:
    cdef double ub = ub_io[0]
    cdef double thr = thr_io[0]
    cdef int64_t cap = 2 * m + 2
    cdef double* dmin = s.dmin
    cdef double* head = s.head
    cdef double* tail = s.tail
    cdef uint8_t* allow = s.allow
    cdef double* wts = s.wts
    cdef int64_t* chain = s.chain
    cdef int64_t* chain_seen = s.chain_seen
    cdef double* wnode = s.wnode
    cdef int64_t* sub_ptr = s.sub_ptr
    cdef int64_t* sub_idx = s.sub_idx
    cdef double* pt = s.pt
    cdef int64_t* ptc = s.ptc
    cdef int64_t* pvc = s.pvc
    cdef int64_t* plk = s.plk
    cdef int64_t* npc = s.npc
    cdef double* last = s.last
    cdef double* cmax = s.cmax
    cdef int64_t* mask = s.mask
    cdef double* rem_link = s.rem_link
    cdef int64_t* choice = s.choice
    cdef int64_t* placed = s.placed
    cdef int64_t* waiting = s.waiting
    cdef uint8_t* done = s.done
    cdef double* st = s.st
    cdef int8_t* md = s.md
    cdef double* fin = s.fin
    cdef double* rel = s.rel
    cdef double* dnode = s.dnode
    cdef double left[N_BNB_LAMS]
    cdef int64_t n_chains[2]
    cdef int64_t i, j, e, p, q, r, c, x, k, best, end, n_sub, cap_tc, cap_vc
    cdef int64_t nodes, depth, mode, dtc, dvc, dlk, npieces, d1, np1, act_tc, act_vc
    cdef int64_t n_buckets, grow_at, h, w, key
    cdef double hh, link_work, v, t0, f, dur, t, cm, left_link, hi, span, load, rr, en
    cdef bint use_table, swapped, pruned, one, whole, is_dominated
    # critical-path heads/tails at the faster mode, raised to the given ones
    fastest(m, kind, ds, da, dmin)
    for i in range(m):
        hh = head_in[i]
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[e]
            if head[p] + dmin[p] > hh:
                hh = head[p] + dmin[p]
        head[i] = hh
    tails(m, dmin, succ_ptr, succ_idx, tail)
    for i in range(m):
        tail[i] -= dmin[i]
        if tail_in[i] > tail[i]:
            tail[i] = tail_in[i]
    # at most width_tc one-core operators on tensor cores run at once (they are pairwise
    # unordered), so that many cores, not num_tc, is what one-core work can fill
    cap_tc = ntc if ntc < width_tc else width_tc
    cap_vc = nvc if nvc < width_vc else width_vc
    for q in range(N_BNB_LAMS):
        weights(BNB_LAMS[q], cap_tc, cap_vc, &wts[2 * q], &wts[2 * q + 1])
    # ... and, after t, at most one per chain of a chain cover that still has an operator
    # not placed or running: chains of tensor-core users (column 0) and of vector-core
    # users (column 1), greedy in topological order (any cover is valid, fewer is better)
    for i in range(2 * m):
        chain[i] = -1
        chain_seen[i] = -1
    n_chains[0] = 0
    n_chains[1] = 0
    if m <= 62:
        for i in range(m):
            s.desc[i] = 0  # descendants as bit masks
        for i in range(m - 1, -1, -1):
            for e in range(succ_ptr[i], succ_ptr[i + 1]):
                x = succ_idx[e]
                s.desc[i] |= s.desc[x] | ((<int64_t> 1) << x)
        for i in range(m):
            for r in range(2):
                if kind[i] == KIND_COLLECTIVE or (r == 0 and kind[i] == KIND_VECTOR) or (
                        r == 1 and kind[i] == KIND_GEMM):
                    continue
                best = -1
                for c in range(n_chains[r]):
                    end = s.chain_end[2 * c + r]
                    if (s.desc[end] >> i) & 1 and (best < 0 or end > s.chain_end[2 * best + r]):
                        best = c
                if best < 0:
                    best = n_chains[r]
                    n_chains[r] += 1
                chain[2 * i + r] = best
                s.chain_end[2 * best + r] = i
    link_work = 0.0
    for i in range(m):
        k = kind[i]
        allow[2 * i] = head[i] + ds[i] + tail[i] < thr
        # a slower intra-op mode is dominated: one core for less time fits wherever it does
        allow[2 * i + 1] = k != KIND_COLLECTIVE and da[i] < ds[i] and head[i] + da[i] + tail[i] < thr
        if not allow[2 * i] and not allow[2 * i + 1]:
            return True
        if k == KIND_COLLECTIVE:
            link_work += ds[i]
    # stand-ins: operator j may trade places with i (j takes i's slot, i j's later one)
    # when both have the same kind and durations and every successor of i also waits
    # for j: i's successors then wait for j's old end, as before, and j ends no later
    # than it did (its slot starts no earlier; a one-core slot of i and an intra-op one
    # of j cannot overlap, and a slower intra-op mode is never tried). Equal successor
    # sets go by index, so that only one of the two gives way.
    n_sub = 0
    sub_ptr[0] = 0
    for i in range(m):
        for j in range(m):
            if (j != i and kind[j] == kind[i] and ds[j] == ds[i] and da[j] == da[i]
                    and successors_within(succ_ptr, succ_idx, i, j)
                    and not (j > i and successors_within(succ_ptr, succ_idx, j, i))):
                sub_idx[n_sub] = j
                n_sub += 1
        sub_ptr[i + 1] = n_sub
    # per depth: resource profile, last start, makespan so far, placed set, work left
    for i in range(m + 1):
        last[i] = 0.0
        cmax[i] = 0.0
        mask[i] = 0
        rem_link[i] = 0.0
        choice[i] = 0  # next (op * 2 + mode) to try at each depth
    rem_link[0] = link_work
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        done[i] = False
        md[i] = 0
    # dominance table (only for masks that fit one int64); it starts small and grows
    # with the search (up to about one entry per placement allowed), so that the many
    # short searches do not pay for the table of the few long ones
    use_table = m <= tb.width and tb.rows > 0
    n_buckets = BNB_TABLE_MIN_BUCKETS if BNB_TABLE_MIN_BUCKETS < tb.rows else tb.rows
    if use_table:
        for h in range(n_buckets * BNB_TABLE_WAYS):
            tb.key[h] = -1
        for h in range(n_buckets):
            tb.next[h] = 0
    grow_at = n_buckets * BNB_TABLE_WAYS
    pt[0] = 0.0
    ptc[0] = 0
    pvc[0] = 0
    plk[0] = 0
    npc[0] = 1
    nodes = 0
    depth = 0
    while depth >= 0:
        if depth == m:
            if cmax[m] < ub:
                ub = cmax[m]
                for p in range(m):
                    starts[p] = st[p]
                    modes[p] = md[p]
                v = cert_level(ub, gap, 2.0)
                if v < thr:
                    thr = v
            depth -= 1
            i = placed[depth]
            done[i] = False
            for e in range(succ_ptr[i], succ_ptr[i + 1]):
                waiting[succ_idx[e]] += 1
            continue
        c = choice[depth]
        if c >= 2 * m:
            # every child searched: remember the node for the dominance test
            if use_table and depth > 0:
                table_put(tb, mask_bucket(mask[depth], n_buckets), mask[depth], last[depth],
                          cmax[depth], fin, md, m)
            choice[depth] = 0
            depth -= 1
            if depth >= 0:
                i = placed[depth]
                done[i] = False
                for e in range(succ_ptr[i], succ_ptr[i + 1]):
                    waiting[succ_idx[e]] += 1
            continue
        if nodes >= node_limit:
            ub_io[0] = ub
            thr_io[0] = thr
            return False
        if use_table and nodes >= grow_at and n_buckets < BNB_TABLE_MAX_BUCKETS:
            # more placements than entries: four times the buckets, old entries kept
            n_buckets = grow_table(tb, n_buckets, 4)
            grow_at = n_buckets * BNB_TABLE_WAYS
        choice[depth] = c + 1
        i = c // 2
        mode = 1 - c % 2  # intra-op first: on parts left open it finds short schedules sooner
        if done[i] or waiting[i] != 0 or not allow[2 * i + mode]:
            continue
        nodes += 1
        k = kind[i]
        t0 = head[i] if head[i] > last[depth] else last[depth]
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            f = fin[pred_idx[e]]
            if f > t0:
                t0 = f
        demand(k, mode, ntc, nvc, &dtc, &dvc, &dlk)
        dur = ds[i] if mode == 0 else da[i]
        npieces = npc[depth]
        t = earliest(pt + depth * cap, ptc + depth * cap, pvc + depth * cap, plk + depth * cap,
                     npieces, t0, dur, dtc, dvc, dlk, ntc, nvc)
        f = t + dur
        cm = cmax[depth] if cmax[depth] > f else f
        if f + tail[i] >= thr or cm >= thr:
            continue
        # a stand-in not placed yet whose predecessors have ended by t could take this
        # slot instead (and i its later one): such schedules are searched through it
        swapped = False
        for x in range(sub_ptr[i], sub_ptr[i + 1]):
            j = sub_idx[x]
            if done[j] or waiting[j] != 0:
                continue
            swapped = True
            for e in range(pred_ptr[j], pred_ptr[j + 1]):
                if fin[pred_idx[e]] > t:
                    swapped = False
                    break
            if swapped:
                break
        if swapped:
            continue
        d1 = depth + 1
        for q in range(npieces):
            pt[d1 * cap + q] = pt[depth * cap + q]
            ptc[d1 * cap + q] = ptc[depth * cap + q]
            pvc[d1 * cap + q] = pvc[depth * cap + q]
            plk[d1 * cap + q] = plk[depth * cap + q]
        np1 = insert(pt + d1 * cap, ptc + d1 * cap, pvc + d1 * cap, plk + d1 * cap, npieces, t,
                     dur, dtc, dvc, dlk)
        # chains still active after t: the cores one-core work can fill from t on
        act_tc = 0
        act_vc = 0
        for p in range(m):
            if done[p] and fin[p] <= t:
                continue
            c = chain[2 * p]
            if c >= 0 and chain_seen[2 * c] != nodes:
                chain_seen[2 * c] = nodes
                act_tc += 1
            c = chain[2 * p + 1]
            if c >= 0 and chain_seen[2 * c + 1] != nodes:
                chain_seen[2 * c + 1] = nodes
                act_vc += 1
        if m <= 62 and (act_tc < cap_tc or act_vc < cap_vc):
            for q in range(N_BNB_LAMS):
                weights(BNB_LAMS[q], cap_tc if cap_tc < act_tc else act_tc,
                        cap_vc if cap_vc < act_vc else act_vc, &wnode[2 * q], &wnode[2 * q + 1])
        else:
            for q in range(N_BNB_LAMS):
                wnode[2 * q] = wts[2 * q]
                wnode[2 * q + 1] = wts[2 * q + 1]
        # the placed operators' work after t (each lam's weights; the link's)
        for q in range(N_BNB_LAMS):
            left[q] = 0.0
        left_link = rem_link[depth] - (ds[i] if k == KIND_COLLECTIVE else 0.0)
        rem_link[d1] = left_link
        for p in range(np1 - 1):
            hi = pt[d1 * cap + p + 1]
            if hi > t:
                span = hi - (pt[d1 * cap + p] if pt[d1 * cap + p] > t else t)
                for q in range(N_BNB_LAMS):
                    # an intra-op piece holds the whole chip: weight 1, not more
                    load = wnode[2 * q] * ptc[d1 * cap + p] + wnode[2 * q + 1] * pvc[d1 * cap + p]
                    left[q] += (1.0 if 1.0 <= load else load) * span
                left_link += plk[d1 * cap + p] * span
        if t + left_link >= thr:
            continue
        # what is left: nothing starts before t; each operator keeps the modes that can
        # still end by thr - tail from its release (the shortest one raises the release
        # of its successors, the cheapest one adds to the energy)
        st[i] = t
        fin[i] = f
        md[i] = <int8_t> mode
        done[i] = True
        pruned = False
        for j in range(m):  # local order is topological
            if done[j]:
                continue
            rr = head[j] if head[j] > t else t
            for e in range(pred_ptr[j], pred_ptr[j + 1]):
                p = pred_idx[e]
                v = fin[p] if done[p] else rel[p] + dnode[p]
                if v > rr:
                    rr = v
            rel[j] = rr
            one = allow[2 * j] and rr + ds[j] + tail[j] < thr
            whole = allow[2 * j + 1] and rr + da[j] + tail[j] < thr
            if not one and not whole:
                pruned = True
                break
            dnode[j] = ds[j] if one else da[j]
            if whole and da[j] < dnode[j]:
                dnode[j] = da[j]
            for q in range(N_BNB_LAMS):
                en = core_weight(kind[j], wnode[2 * q], wnode[2 * q + 1]) * ds[j] if one else INFINITY
                if whole and da[j] < en:
                    en = da[j]
                left[q] += en
        if not pruned:
            for q in range(N_BNB_LAMS):
                if t + left[q] >= thr:
                    pruned = True
                    break
        if pruned:
            done[i] = False
            continue
        key = (mask[depth] | ((<int64_t> 1) << i)) if use_table else 0
        if use_table:
            h = mask_bucket(key, n_buckets)
            is_dominated = False
            for w in range(BNB_TABLE_WAYS):
                x = h * BNB_TABLE_WAYS + w
                if tb.key[x] != key or tb.last[x] > t or tb.cmax[x] > cm:
                    continue
                is_dominated = dominated(m, tb.fin + x * tb.width, tb.mode + x * tb.width, kind,
                                         done, fin, md, t, pred_ptr, pred_idx, ntc, nvc)
                if is_dominated:
                    break
            if is_dominated:
                done[i] = False
                continue
        placed[depth] = i
        mask[d1] = key
        last[d1] = t
        cmax[d1] = cm
        npc[d1] = np1
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            waiting[succ_idx[e]] -= 1
        choice[d1] = 0
        depth = d1
    ub_io[0] = ub
    thr_io[0] = thr
    return True


cdef bint bnb_search(int64_t m, const int64_t* kind, const double* ds, const double* da,
                     const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                     const int64_t* succ_idx, int64_t ntc, int64_t nvc, int64_t width_tc,
                     int64_t width_vc, const double* head_in, const double* tail_in, double* ub,
                     double* thr, double gap, int64_t node_limit, double* starts, int8_t* modes,
                     BnbTable* table) noexcept nogil:
    """Depth-first search for a schedule shorter than ``thr`` (<= ``ub``, the makespan
    of ``starts``/``modes``).

    Branching: the next operator and its mode, started at the earliest time its
    predecessors, the cores and the link allow, but never before the operator placed
    last. Ordering any schedule's operators by start time and placing them this way
    gives a schedule at least as short, so the tree holds an optimal one. Each
    schedule found (shorter than the current ``ub``) is written to ``starts``/``modes``
    and lowers ``thr`` to just above ``ub (1 - gap)`` (``gap = 0``: ``thr = ub``,
    a search for the optimum).

    Pruning, every rule valid for any schedule shorter than ``thr``:

    * ``head_in``/``tail_in`` (and the critical path): an operator starts no earlier
      than its head and ends at least its tail before the makespan; at each node an
      unplaced operator keeps only the modes that can still end by then from its
      release (nothing starts before the last start), which raises its successors'
      releases and its energy;
    * energy after the last start: the operators not placed yet and the parts of the
      placed ones after it (weights of ``weights`` for each lam of ``BNB_LAMS``;
      the link's own work for collectives). One-core operators running at once are
      pairwise unordered, so at most ``width_tc`` (``width_vc``: the widest antichain
      of tensor-core, vector-core users) and, after the last start, at most one per
      chain of a chain cover that still has an operator not placed or running: the
      weights count that many cores, not the chip's (an intra-op piece weighs 1);
    * stand-ins: an operator is not placed where an identical one (see below) could
      take its slot;
    * cutset dominance: a node whose placed set equals that of a fully searched node
      (last start and makespan so far no later) is no better when, from this node's
      last start on, the other holds no more cores or link at any moment and lets
      every operator not placed start no later (``dominated``): any completion of
      this node is a completion of the other. The table of searched nodes starts at
      ``BNB_TABLE_MIN_BUCKETS`` buckets and grows with the search.

    ``head_in``/``tail_in`` must hold for every schedule shorter than the initial
    ``thr``. ``table``: scratch from ``_bnb_table`` (contents ignored). ``ub`` and
    ``thr`` are updated in place. Returns exhausted: every schedule is at least ``thr``
    long (then ``thr`` is a lower bound), False when ``node_limit`` placements were
    tried first."""
    cdef int64_t cap = 2 * m + 2
    cdef Search s
    cdef bint exhausted
    s.dmin = <double*> xalloc(m * sizeof(double))
    s.head = <double*> xalloc(m * sizeof(double))
    s.tail = <double*> xalloc(m * sizeof(double))
    s.allow = <uint8_t*> xalloc(2 * m * sizeof(uint8_t))
    s.wts = <double*> xalloc(2 * N_BNB_LAMS * sizeof(double))
    s.chain = <int64_t*> xalloc(2 * m * sizeof(int64_t))
    s.desc = <int64_t*> xalloc(m * sizeof(int64_t))
    s.chain_end = <int64_t*> xalloc(2 * m * sizeof(int64_t))
    s.chain_seen = <int64_t*> xalloc(2 * m * sizeof(int64_t))
    s.wnode = <double*> xalloc(2 * N_BNB_LAMS * sizeof(double))
    s.sub_ptr = <int64_t*> xalloc((m + 1) * sizeof(int64_t))
    s.sub_idx = <int64_t*> xalloc(m * m * sizeof(int64_t))
    s.pt = <double*> xalloc((m + 1) * cap * sizeof(double))
    s.ptc = <int64_t*> xalloc((m + 1) * cap * sizeof(int64_t))
    s.pvc = <int64_t*> xalloc((m + 1) * cap * sizeof(int64_t))
    s.plk = <int64_t*> xalloc((m + 1) * cap * sizeof(int64_t))
    s.npc = <int64_t*> xalloc((m + 1) * sizeof(int64_t))
    s.last = <double*> xalloc((m + 1) * sizeof(double))
    s.cmax = <double*> xalloc((m + 1) * sizeof(double))
    s.mask = <int64_t*> xalloc((m + 1) * sizeof(int64_t))
    s.rem_link = <double*> xalloc((m + 1) * sizeof(double))
    s.choice = <int64_t*> xalloc((m + 1) * sizeof(int64_t))
    s.placed = <int64_t*> xalloc((m + 1) * sizeof(int64_t))
    s.waiting = <int64_t*> xalloc(m * sizeof(int64_t))
    s.done = <uint8_t*> xalloc(m * sizeof(uint8_t))
    s.st = <double*> xalloc(m * sizeof(double))
    s.md = <int8_t*> xalloc(m * sizeof(int8_t))
    s.fin = <double*> xalloc(m * sizeof(double))
    s.rel = <double*> xalloc(m * sizeof(double))
    s.dnode = <double*> xalloc(m * sizeof(double))
    exhausted = search_body(m, kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc, nvc,
                            width_tc, width_vc, head_in, tail_in, ub, thr, gap, node_limit, starts,
                            modes, table, &s)
    free(s.dmin)
    free(s.head)
    free(s.tail)
    free(s.allow)
    free(s.wts)
    free(s.chain)
    free(s.desc)
    free(s.chain_end)
    free(s.chain_seen)
    free(s.wnode)
    free(s.sub_ptr)
    free(s.sub_idx)
    free(s.pt)
    free(s.ptc)
    free(s.pvc)
    free(s.plk)
    free(s.npc)
    free(s.last)
    free(s.cmax)
    free(s.mask)
    free(s.rem_link)
    free(s.choice)
    free(s.placed)
    free(s.waiting)
    free(s.done)
    free(s.st)
    free(s.md)
    free(s.fin)
    free(s.rel)
    free(s.dnode)
    return exhausted


# ---------------------------------------------------------------------------
# The table as numpy memory, and Python entry points (the driver; tests)
# ---------------------------------------------------------------------------
def _bnb_table(int64_t n_ops, int64_t n_buckets):
    """Scratch for the branch and bound's dominance table, for parts of up to ``n_ops``
    operators, with ``n_buckets`` rows (``_BNB_TABLE_MAX_BUCKETS``: its largest size; the
    search touches only the rows it uses, so one table serves every search of a thread;
    0: an empty stand-in that ``_solve`` replaces when a search is needed). A tuple
    (keys, last starts, makespans, ends, modes, next way per bucket)."""
    cdef int64_t width = n_ops if n_ops < 62 else 62  # placed sets are int64 bit masks
    return (np.empty((n_buckets, BNB_TABLE_WAYS), np.int64), np.empty((n_buckets, BNB_TABLE_WAYS)),
            np.empty((n_buckets, BNB_TABLE_WAYS)), np.empty((n_buckets, BNB_TABLE_WAYS, width)),
            np.empty((n_buckets, BNB_TABLE_WAYS, width), np.int8), np.empty(n_buckets, np.int64))


cdef BnbTable as_table(tuple table) except *:
    """Raw pointers into a ``_bnb_table`` tuple (which must stay alive while they are used)."""
    cdef int64_t[:, ::1] tkey = table[0]
    cdef double[:, ::1] tlast = table[1]
    cdef double[:, ::1] tcmax = table[2]
    cdef double[:, :, ::1] tfin = table[3]
    cdef int8_t[:, :, ::1] tmode = table[4]
    cdef int64_t[::1] tnext = table[5]
    cdef BnbTable tb
    assert tkey.shape[1] == BNB_TABLE_WAYS
    tb.rows = tkey.shape[0]
    tb.width = tfin.shape[2]
    tb.key = &tkey[0, 0] if tb.rows else NULL
    tb.last = &tlast[0, 0] if tb.rows else NULL
    tb.cmax = &tcmax[0, 0] if tb.rows else NULL
    tb.fin = &tfin[0, 0, 0] if tb.rows and tb.width else NULL
    tb.mode = &tmode[0, 0, 0] if tb.rows and tb.width else NULL
    tb.next = &tnext[0] if tb.rows else NULL
    return tb


cdef void table_alloc(BnbTable* tb, int64_t n_ops) noexcept nogil:
    """A table of the largest size in C memory, for a search that was handed none (as
    ``_bnb_table(n_ops, BNB_TABLE_MAX_BUCKETS)``; the pages are touched only as the
    table grows). Free with ``table_free``."""
    tb.rows = BNB_TABLE_MAX_BUCKETS
    tb.width = n_ops if n_ops < 62 else 62  # placed sets are int64 bit masks
    tb.key = <int64_t*> xalloc(tb.rows * BNB_TABLE_WAYS * sizeof(int64_t))
    tb.last = <double*> xalloc(tb.rows * BNB_TABLE_WAYS * sizeof(double))
    tb.cmax = <double*> xalloc(tb.rows * BNB_TABLE_WAYS * sizeof(double))
    tb.fin = <double*> xalloc(tb.rows * BNB_TABLE_WAYS * tb.width * sizeof(double))
    tb.mode = <int8_t*> xalloc(tb.rows * BNB_TABLE_WAYS * tb.width * sizeof(int8_t))
    tb.next = <int64_t*> xalloc(tb.rows * sizeof(int64_t))


cdef void table_free(BnbTable* tb) noexcept nogil:
    free(tb.key)
    free(tb.last)
    free(tb.cmax)
    free(tb.fin)
    free(tb.mode)
    free(tb.next)
    tb.rows = 0


def _mask_bucket(int64_t mask, int64_t n_buckets):
    """Bucket of a placed-set bit mask in a table of ``n_buckets`` buckets."""
    return mask_bucket(mask, n_buckets)


def _table_put(tkey, tlast, tcmax, tfin, tmode, tnext, int64_t h, int64_t key, double last,
               double cmax, const double[::1] fin, const int8_t[::1] md, int64_t m):
    """``table_put`` on the table of arrays ``tkey`` .. ``tnext`` (``_bnb_table``)."""
    cdef BnbTable tb = as_table((tkey, tlast, tcmax, tfin, tmode, tnext))
    assert 0 <= h < tb.rows and m <= tb.width and fin.shape[0] >= m and md.shape[0] >= m
    table_put(&tb, h, key, last, cmax, &fin[0] if m else NULL, &md[0] if m else NULL, m)


def _grow_table(tkey, tlast, tcmax, tfin, tmode, tnext, int64_t n_buckets, int64_t factor):
    """``grow_table`` on the table of arrays ``tkey`` .. ``tnext``; returns the new bucket count."""
    cdef BnbTable tb = as_table((tkey, tlast, tcmax, tfin, tmode, tnext))
    assert 0 < n_buckets <= tb.rows
    return grow_table(&tb, n_buckets, factor)


def _bnb_search(const int64_t[::1] kind, const double[::1] ds, const double[::1] da,
                const int64_t[::1] pred_ptr, const int64_t[::1] pred_idx,
                const int64_t[::1] succ_ptr, const int64_t[::1] succ_idx, int64_t ntc, int64_t nvc,
                int64_t width_tc, int64_t width_vc, const double[::1] head_in,
                const double[::1] tail_in, double ub, double thr, double gap, int64_t node_limit,
                double[::1] starts, int8_t[::1] modes, tkey, tlast, tcmax, tfin, tmode, tnext):
    """``bnb_search`` on one part with the table ``tkey`` .. ``tnext``; returns
    ``(ub, thr, exhausted)``."""
    cdef int64_t m = kind.shape[0]
    cdef tuple table = (tkey, tlast, tcmax, tfin, tmode, tnext)
    cdef BnbTable tb = as_table(table)
    cdef bint exhausted
    if m == 0:
        return ub, thr, True
    with nogil:
        exhausted = bnb_search(m, &kind[0], &ds[0], &da[0], &pred_ptr[0],
                               &pred_idx[0] if pred_idx.shape[0] else NULL, &succ_ptr[0],
                               &succ_idx[0] if succ_idx.shape[0] else NULL, ntc, nvc, width_tc,
                               width_vc, &head_in[0], &tail_in[0], &ub, &thr, gap, node_limit,
                               &starts[0], &modes[0], &tb)
    return ub, thr, exhausted


def _branch_and_bound(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, int64_t ntc,
                      int64_t nvc, head_in, tail_in, double ub, double thr, double gap,
                      int64_t node_limit, starts, modes, int64_t width_tc=-1, int64_t width_vc=-1):
    """``_bnb_search`` with a table of its own (widths: the core counts when omitted)."""
    table = _bnb_table(len(kind), BNB_TABLE_MAX_BUCKETS)
    return _bnb_search(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc, nvc,
                       ntc if width_tc < 0 else width_tc, nvc if width_vc < 0 else width_vc,
                       head_in, tail_in, ub, thr, gap, node_limit, starts, modes, *table)
