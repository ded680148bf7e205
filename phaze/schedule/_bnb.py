"""Exact branch and bound over serial schedule generation, with its cutset-dominance
table (docs/design.md §2.5).

Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_GEMM, KIND_VECTOR
from ._energy import _core_weight, _fastest, _tails, _weights
from ._profile import _demand, _earliest, _insert
from ._status import _REL_EQ


@njit(cache=True, nogil=True)
def _cert_level(ub, gap, slack):
    """Just above ub (1 - gap), by ``slack`` x ``_REL_EQ`` (never above ub): a bound that
    reaches it certifies ub, and proving no schedule is that short reaches it."""
    v = ub * (1.0 - gap) * (1.0 + slack * _REL_EQ)
    return v if v < ub else ub


#: lam of the energy bound at each node: tensor cores only, vector cores only, both
_BNB_LAMS = np.array([1.0, 0.0, 0.5])
#: dominance table: buckets x ways (entries replaced round robin within a bucket), about
#: one entry per placement tried, up to its largest size (a quarter of that certified 147
#: of 300 sampled open parts with 50,000 placements, one per placement 175, in less
#: time). A placed set is
#: often reached by many partial schedules, all in its bucket: with the same entries,
#: 16 ways certified 160 of 300 sampled open parts with 20,000 placements, 4 ways 112
#: (32 ways 165)
_BNB_TABLE_WAYS = 16
#: buckets of the table at the start of a search: it grows four-fold each time the
#: placements tried outnumber its entries, up to the largest size (starting at 64
#: buckets lost entries to full buckets early on: the gpt3-175b sweep of
#: bench_schedule.py took 59.6 s against 44.9 s with 2,048 and 30,000 placements)
_BNB_TABLE_MIN_BUCKETS = 2048
#: largest size: about 135 MB per thread for a 26-operator part when a search fills it
#: (the pages are touched only as the table grows)
_BNB_TABLE_MAX_BUCKETS = 32768


@njit(cache=True, nogil=True)
def _mask_bucket(mask, n_buckets):
    """Bucket of a placed-set bit mask (>= 0): its bits folded, so that sets differing in
    late operators spread too."""
    return (mask ^ (mask >> 13) ^ (mask >> 29) ^ (mask >> 47)) % n_buckets


@njit(cache=True, nogil=True)
def _grow_table(tkey, tlast, tcmax, tfin, tmode, tnext, n_buckets, factor):
    """Spread the dominance table's entries over ``factor`` x ``n_buckets`` buckets (at
    most all the rows; in place, rows past ``n_buckets`` are unused so far; powers of
    two). Returns the new bucket count."""
    grown = min(n_buckets * factor, tkey.shape[0])
    tkey[n_buckets:grown] = -1
    tnext[n_buckets:grown] = 0
    ways = tkey.shape[1]
    m = tfin.shape[2]  # (a table for more operators than the part: the extra columns ride along)
    keys = np.empty(ways, np.int64)
    lasts = np.empty(ways)
    cmaxes = np.empty(ways)
    fins = np.empty((ways, m))
    mds = np.empty((ways, m), np.int8)
    for h in range(n_buckets):
        # an old bucket's entries go only to buckets h, h + n_buckets, ...
        for w in range(ways):
            keys[w] = tkey[h, w]
            lasts[w] = tlast[h, w]
            cmaxes[w] = tcmax[h, w]
            fins[w, :] = tfin[h, w, :]
            mds[w, :] = tmode[h, w, :]
            tkey[h, w] = -1
        tnext[h] = 0
        for w in range(ways):
            if keys[w] >= 0:
                _table_put(tkey, tlast, tcmax, tfin, tmode, tnext, _mask_bucket(keys[w], grown),
                           keys[w], lasts[w], cmaxes[w], fins[w], mds[w], m)
    return grown


@njit(cache=True, nogil=True)
def _table_put(tkey, tlast, tcmax, tfin, tmode, tnext, h, key, last, cmax, fin, md, m):
    """Store a searched node in bucket ``h`` of the dominance table, over its oldest
    entry (round robin): placed set ``key``, last start, makespan so far, and the ends
    and modes of operators 0 .. m - 1."""
    w = tnext[h]
    tnext[h] = (w + 1) % tkey.shape[1]
    tkey[h, w] = key
    tlast[h, w] = last
    tcmax[h, w] = cmax
    for p in range(m):
        tfin[h, w, p] = fin[p]
        tmode[h, w, p] = md[p]


@njit(cache=True, nogil=True)
def _dominated(efin, emode, kind, done, fin, md, t, pred_ptr, pred_idx, ntc, nvc):
    """Whether a fully searched node E (same placed set, last start and makespan so far
    no later; its operators' ends ``efin`` and modes ``emode``) leaves every completion
    of the current node (last start ``t``, ends ``fin``, modes ``md``) open to it:
    every operator not placed may start as early after E's predecessors as after
    ours, and from t on E holds no more tensor cores, vector cores or link at any
    moment (both hold less and less after t: nothing placed starts later)."""
    m = kind.shape[0]
    simple = True  # each operator still running after t ends no later, holding no more
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
        etc = evc = elk = 0
        ctc = cvc = clk = 0
        for p in range(m):
            if not done[p]:
                continue
            if efin[p] > tau:
                a, b, c = _demand(kind[p], emode[p], ntc, nvc)
                etc += a
                evc += b
                elk += c
            if fin[p] > tau:
                a, b, c = _demand(kind[p], md[p], ntc, nvc)
                ctc += a
                cvc += b
                clk += c
        if etc > ctc or evc > cvc or elk > clk:
            return False
    return True


@njit(cache=True, nogil=True)
def _successors_within(succ_ptr, succ_idx, i, j):
    """Every successor of operator i is a successor of operator j."""
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        found = False
        for f in range(succ_ptr[j], succ_ptr[j + 1]):
            if succ_idx[f] == succ_idx[e]:
                found = True
                break
        if not found:
            return False
    return True


@njit(cache=True, nogil=True)
def _bnb_table(n_ops, n_buckets):
    """Scratch for the branch and bound's dominance table, for parts of up to ``n_ops``
    operators, with ``n_buckets`` rows (``_BNB_TABLE_MAX_BUCKETS``: its largest size; the
    search touches only the rows it uses, so one table serves every search of a thread;
    0: an empty stand-in that ``_solve`` replaces when a search is needed)."""
    n_max = n_buckets
    width = min(n_ops, 62)  # placed sets are int64 bit masks
    return (np.empty((n_max, _BNB_TABLE_WAYS), np.int64), np.empty((n_max, _BNB_TABLE_WAYS)),
            np.empty((n_max, _BNB_TABLE_WAYS)), np.empty((n_max, _BNB_TABLE_WAYS, width)),
            np.empty((n_max, _BNB_TABLE_WAYS, width), np.int8), np.empty(n_max, np.int64))


@njit(cache=True, nogil=True)
def _branch_and_bound(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc, nvc,
                      head_in, tail_in, ub, thr, gap, node_limit, starts, modes,
                      width_tc=-1, width_vc=-1):
    """``_bnb_search`` with a table of its own (widths: the core counts when omitted)."""
    tkey, tlast, tcmax, tfin, tmode, tnext = _bnb_table(kind.shape[0], _BNB_TABLE_MAX_BUCKETS)
    return _bnb_search(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc, nvc,
                       ntc if width_tc < 0 else width_tc, nvc if width_vc < 0 else width_vc,
                       head_in, tail_in, ub, thr, gap, node_limit, starts, modes,
                       tkey, tlast, tcmax, tfin, tmode, tnext)


@njit(cache=True, nogil=True)
def _bnb_search(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc, nvc,
                width_tc, width_vc, head_in, tail_in, ub, thr, gap, node_limit, starts, modes,
                tkey, tlast, tcmax, tfin, tmode, tnext):
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
      placed ones after it (weights of ``_weights`` for each lam of ``_BNB_LAMS``;
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
      every operator not placed start no later (``_dominated``): any completion of
      this node is a completion of the other. The table of searched nodes starts at
      ``_BNB_TABLE_MIN_BUCKETS`` buckets and grows with the search.

    ``head_in``/``tail_in`` must hold for every schedule shorter than the initial
    ``thr``. ``tkey`` .. ``tnext``: scratch from ``_bnb_table`` (contents ignored).
    Returns ``(ub, thr, exhausted)``; exhausted: every schedule is at least ``thr``
    long (then ``thr`` is a lower bound), False when ``node_limit`` placements were
    tried first."""
    m = kind.shape[0]
    n_lam = _BNB_LAMS.shape[0]
    # critical-path heads/tails at the faster mode, raised to the given ones
    dmin = _fastest(kind, ds, da)
    head = np.empty(m)
    for i in range(m):
        h = head_in[i]
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[e]
            if head[p] + dmin[p] > h:
                h = head[p] + dmin[p]
        head[i] = h
    tail = _tails(dmin, succ_ptr, succ_idx)
    for i in range(m):
        tail[i] -= dmin[i]
        if tail_in[i] > tail[i]:
            tail[i] = tail_in[i]
    allow = np.zeros((m, 2), np.bool_)
    # at most width_tc one-core operators on tensor cores run at once (they are pairwise
    # unordered), so that many cores, not num_tc, is what one-core work can fill
    cap_tc = min(ntc, width_tc)
    cap_vc = min(nvc, width_vc)
    wts = np.empty((n_lam, 2))
    for q in range(n_lam):
        wts[q, 0], wts[q, 1] = _weights(_BNB_LAMS[q], cap_tc, cap_vc)
    # ... and, after t, at most one per chain of a chain cover that still has an operator
    # not placed or running: chains of tensor-core users (column 0) and of vector-core
    # users (column 1), greedy in topological order (any cover is valid, fewer is better)
    chain = np.full((m, 2), -1, np.int64)
    n_chains = np.zeros(2, np.int64)
    if m <= 62:
        desc = np.zeros(m, np.int64)  # descendants as bit masks
        for i in range(m - 1, -1, -1):
            for e in range(succ_ptr[i], succ_ptr[i + 1]):
                x = succ_idx[e]
                desc[i] |= desc[x] | (np.int64(1) << x)
        chain_end = np.empty((m, 2), np.int64)
        for i in range(m):
            for r in range(2):
                if kind[i] == KIND_COLLECTIVE or (r == 0 and kind[i] == KIND_VECTOR) or (
                        r == 1 and kind[i] == KIND_GEMM):
                    continue
                best = -1
                for c in range(n_chains[r]):
                    end = chain_end[c, r]
                    if desc[end] >> i & 1 and (best < 0 or end > chain_end[best, r]):
                        best = c
                if best < 0:
                    best = n_chains[r]
                    n_chains[r] += 1
                chain[i, r] = best
                chain_end[best, r] = i
    chain_seen = np.full((m, 2), -1, np.int64)
    wnode = np.empty((n_lam, 2))
    link_work = 0.0
    for i in range(m):
        k = kind[i]
        allow[i, 0] = head[i] + ds[i] + tail[i] < thr
        # a slower intra-op mode is dominated: one core for less time fits wherever it does
        allow[i, 1] = k != KIND_COLLECTIVE and da[i] < ds[i] and head[i] + da[i] + tail[i] < thr
        if not allow[i, 0] and not allow[i, 1]:
            return ub, thr, True
        if k == KIND_COLLECTIVE:
            link_work += ds[i]
    # stand-ins: operator j may trade places with i (j takes i's slot, i j's later one)
    # when both have the same kind and durations and every successor of i also waits
    # for j: i's successors then wait for j's old end, as before, and j ends no later
    # than it did (its slot starts no earlier; a one-core slot of i and an intra-op one
    # of j cannot overlap, and a slower intra-op mode is never tried). Equal successor
    # sets go by index, so that only one of the two gives way.
    n_sub = 0
    sub_ptr = np.zeros(m + 1, np.int64)
    sub_idx = np.empty(m * m, np.int64)
    for i in range(m):
        for j in range(m):
            if (j != i and kind[j] == kind[i] and ds[j] == ds[i] and da[j] == da[i]
                    and _successors_within(succ_ptr, succ_idx, i, j)
                    and not (j > i and _successors_within(succ_ptr, succ_idx, j, i))):
                sub_idx[n_sub] = j
                n_sub += 1
        sub_ptr[i + 1] = n_sub
    # per depth: resource profile, last start, makespan so far, placed set, work left
    cap = 2 * m + 2
    pt = np.empty((m + 1, cap))
    ptc = np.empty((m + 1, cap), np.int64)
    pvc = np.empty((m + 1, cap), np.int64)
    plk = np.empty((m + 1, cap), np.int64)
    npc = np.empty(m + 1, np.int64)
    last = np.zeros(m + 1)
    cmax = np.zeros(m + 1)
    mask = np.zeros(m + 1, np.int64)
    rem_link = np.zeros(m + 1)
    left = np.empty(n_lam)
    choice = np.zeros(m + 1, np.int64)    # next (op * 2 + mode) to try at each depth
    placed = np.empty(m + 1, np.int64)    # op placed at each depth
    rem_link[0] = link_work
    waiting = np.empty(m, np.int64)
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
    done = np.zeros(m, np.bool_)
    st = np.empty(m)
    md = np.zeros(m, np.int8)
    fin = np.empty(m)
    rel = np.empty(m)
    dnode = np.empty(m)
    # dominance table (only for masks that fit one int64); it starts small and grows
    # with the search (up to about one entry per placement allowed), so that the many
    # short searches do not pay for the table of the few long ones
    use_table = m <= tfin.shape[2]
    n_buckets = _BNB_TABLE_MIN_BUCKETS
    if use_table:
        tkey[:n_buckets] = -1
        tnext[:n_buckets] = 0
    grow_at = n_buckets * _BNB_TABLE_WAYS
    pt[0, 0] = 0.0
    ptc[0, 0] = 0
    pvc[0, 0] = 0
    plk[0, 0] = 0
    npc[0] = 1
    nodes = 0
    depth = 0
    while depth >= 0:
        if depth == m:
            if cmax[m] < ub:
                ub = cmax[m]
                starts[:] = st
                modes[:] = md
                v = _cert_level(ub, gap, 2.0)
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
                _table_put(tkey, tlast, tcmax, tfin, tmode, tnext,
                           _mask_bucket(mask[depth], n_buckets), mask[depth], last[depth],
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
            return ub, thr, False
        if use_table and nodes >= grow_at and n_buckets < _BNB_TABLE_MAX_BUCKETS:
            # more placements than entries: four times the buckets, old entries kept
            n_buckets = _grow_table(tkey, tlast, tcmax, tfin, tmode, tnext, n_buckets, 4)
            grow_at = n_buckets * _BNB_TABLE_WAYS
        choice[depth] = c + 1
        i = c // 2
        mode = 1 - c % 2  # intra-op first: on parts left open it finds short schedules sooner
        if done[i] or waiting[i] != 0 or not allow[i, mode]:
            continue
        nodes += 1
        k = kind[i]
        t0 = head[i] if head[i] > last[depth] else last[depth]
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            f = fin[pred_idx[e]]
            if f > t0:
                t0 = f
        dtc, dvc, dlk = _demand(k, mode, ntc, nvc)
        dur = ds[i] if mode == 0 else da[i]
        npieces = npc[depth]
        t = _earliest(pt[depth], ptc[depth], pvc[depth], plk[depth], npieces, t0, dur,
                      dtc, dvc, dlk, ntc, nvc)
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
            pt[d1, q] = pt[depth, q]
            ptc[d1, q] = ptc[depth, q]
            pvc[d1, q] = pvc[depth, q]
            plk[d1, q] = plk[depth, q]
        np1 = _insert(pt[d1], ptc[d1], pvc[d1], plk[d1], npieces, t, dur, dtc, dvc, dlk)
        # chains still active after t: the cores one-core work can fill from t on
        act_tc = 0
        act_vc = 0
        for p in range(m):
            if done[p] and fin[p] <= t:
                continue
            c = chain[p, 0]
            if c >= 0 and chain_seen[c, 0] != nodes:
                chain_seen[c, 0] = nodes
                act_tc += 1
            c = chain[p, 1]
            if c >= 0 and chain_seen[c, 1] != nodes:
                chain_seen[c, 1] = nodes
                act_vc += 1
        if m <= 62 and (act_tc < cap_tc or act_vc < cap_vc):
            for q in range(n_lam):
                wnode[q, 0], wnode[q, 1] = _weights(_BNB_LAMS[q], min(cap_tc, act_tc),
                                                    min(cap_vc, act_vc))
        else:
            for q in range(n_lam):
                wnode[q, 0] = wts[q, 0]
                wnode[q, 1] = wts[q, 1]
        # the placed operators' work after t (each lam's weights; the link's)
        for q in range(n_lam):
            left[q] = 0.0
        left_link = rem_link[depth] - (ds[i] if k == KIND_COLLECTIVE else 0.0)
        rem_link[d1] = left_link
        for p in range(np1 - 1):
            hi = pt[d1, p + 1]
            if hi > t:
                span = hi - (pt[d1, p] if pt[d1, p] > t else t)
                for q in range(n_lam):
                    # an intra-op piece holds the whole chip: weight 1, not more
                    left[q] += min(1.0, wnode[q, 0] * ptc[d1, p] + wnode[q, 1] * pvc[d1, p]) * span
                left_link += plk[d1, p] * span
        if t + left_link >= thr:
            continue
        # what is left: nothing starts before t; each operator keeps the modes that can
        # still end by thr - tail from its release (the shortest one raises the release
        # of its successors, the cheapest one adds to the energy)
        st[i] = t
        fin[i] = f
        md[i] = mode
        done[i] = True
        pruned = False
        for j in range(m):  # local order is topological
            if done[j]:
                continue
            r = head[j] if head[j] > t else t
            for e in range(pred_ptr[j], pred_ptr[j + 1]):
                p = pred_idx[e]
                v = fin[p] if done[p] else rel[p] + dnode[p]
                if v > r:
                    r = v
            rel[j] = r
            one = allow[j, 0] and r + ds[j] + tail[j] < thr
            whole = allow[j, 1] and r + da[j] + tail[j] < thr
            if not one and not whole:
                pruned = True
                break
            dnode[j] = ds[j] if one else da[j]
            if whole and da[j] < dnode[j]:
                dnode[j] = da[j]
            for q in range(n_lam):
                e = _core_weight(kind[j], wnode[q, 0], wnode[q, 1]) * ds[j] if one else np.inf
                if whole and da[j] < e:
                    e = da[j]
                left[q] += e
        if not pruned:
            for q in range(n_lam):
                if t + left[q] >= thr:
                    pruned = True
                    break
        if pruned:
            done[i] = False
            continue
        key = mask[depth] | (np.int64(1) << i)
        if use_table:
            h = _mask_bucket(key, n_buckets)
            dominated = False
            for w in range(_BNB_TABLE_WAYS):
                if tkey[h, w] != key or tlast[h, w] > t or tcmax[h, w] > cm:
                    continue
                dominated = _dominated(tfin[h, w], tmode[h, w], kind, done, fin, md, t,
                                       pred_ptr, pred_idx, ntc, nvc)
                if dominated:
                    break
            if dominated:
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
    return ub, thr, True
