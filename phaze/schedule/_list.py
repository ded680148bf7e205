"""List scheduling: serial schedule generation under several priority and mode rules with
forward-backward improvement (``_list_schedule``), and a local search over the mode
vector decoded by parallel schedule generation (``_mode_search``) (docs/design.md §2.5).

Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_GEMM, KIND_VECTOR
from ._energy import _fastest, _tails
from ._profile import _demand, _earliest, _insert
from ._status import _REL_EQ


@njit(cache=True, nogil=True)
def _scaling_mode(k, s, a, ntc, nvc):
    """Mode 0 (one core) wherever intra-op would gain no more than the cores it takes
    (near-perfect scaling, within 5 %): such an operator leaves the other cores free;
    else 1 (collectives 0)."""
    if k == KIND_COLLECTIVE:
        return 0
    n_cores = ntc if k == KIND_GEMM else (nvc if k == KIND_VECTOR else ntc + nvc)
    return 0 if s <= 1.05 * n_cores * a else 1


@njit(cache=True, nogil=True)
def _sgs(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, prio, rule, fixed_modes,
         ntc, nvc, starts, modes, finish, pt, ptc, pvc, plk, waiting, done, select=0):
    """Serial schedule generation: repeatedly take the ready operator of highest ``prio``
    and start it as early as precedence and capacity allow.

    ``rule`` 0: try both modes, keep the earlier finish (ties: one core);
    ``rule`` 1: use ``fixed_modes``. ``select`` 0: highest ``prio`` first; 1: the ready
    operator whose predecessors finish first (ties: highest ``prio``), which fills idle
    time (e.g. while a collective runs) with whatever is ready. Returns the makespan."""
    m = kind.shape[0]
    pt[0] = 0.0
    ptc[0] = 0
    pvc[0] = 0
    plk[0] = 0
    npieces = 1
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        done[i] = False
    makespan = 0.0
    for _step in range(m):
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
            dtc, dvc, dlk = _demand(k, mode, ntc, nvc)
            dur = ds[j] if mode == 0 else da[j]
            t = _earliest(pt, ptc, pvc, plk, npieces, est, dur, dtc, dvc, dlk, ntc, nvc)
        else:
            d0tc, d0vc, d0lk = _demand(k, 0, ntc, nvc)
            t0 = _earliest(pt, ptc, pvc, plk, npieces, est, ds[j], d0tc, d0vc, d0lk, ntc, nvc)
            d1tc, d1vc, d1lk = _demand(k, 1, ntc, nvc)
            t1 = _earliest(pt, ptc, pvc, plk, npieces, est, da[j], d1tc, d1vc, d1lk, ntc, nvc)
            if t1 + da[j] < t0 + ds[j]:
                mode, t, dur, dtc, dvc, dlk = 1, t1, da[j], d1tc, d1vc, d1lk
            else:
                mode, t, dur, dtc, dvc, dlk = 0, t0, ds[j], d0tc, d0vc, d0lk
        npieces = _insert(pt, ptc, pvc, plk, npieces, t, dur, dtc, dvc, dlk)
        starts[j] = t
        modes[j] = mode
        finish[j] = t + dur
        if finish[j] > makespan:
            makespan = finish[j]
        done[j] = True
        for e in range(succ_ptr[j], succ_ptr[j + 1]):
            waiting[succ_idx[e]] -= 1
    return makespan


@njit(cache=True, nogil=True)
def _list_schedule(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, reach, ntc, nvc,
                   target, starts, modes, max_passes=1000):
    """Best of several list-scheduling passes (priority rules x mode rules), then
    forward-backward improvement of the best.

    Stops early once the makespan is <= ``target`` (already certified) or after
    ``max_passes`` passes. Writes the best schedule into ``starts``/``modes`` and
    returns its makespan."""
    m = kind.shape[0]
    cap = 2 * m + 2
    pt = np.empty(cap)
    ptc = np.empty(cap, np.int64)
    pvc = np.empty(cap, np.int64)
    plk = np.empty(cap, np.int64)
    waiting = np.empty(m, np.int64)
    done = np.empty(m, np.bool_)
    s_tmp = np.empty(m)
    m_tmp = np.empty(m, np.int8)
    fin = np.empty(m)
    fixed = np.empty(m, np.int8)
    dmin = _fastest(kind, ds, da)
    prio_min = _tails(dmin, succ_ptr, succ_idx)
    head_min = np.zeros(m)
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
    best = np.inf
    # pass list: (priority from fastest durations | from one-core durations |
    #            ready-first with fastest-duration priority | link-first) x
    #            (earliest finish | all fastest | all intra-op | all one-core |
    #             one-core where intra-op scales near-perfectly |
    #             critical path at the faster mode, everything else one-core)
    #            link-first: collectives weigh more than all compute together, so the
    #            operators feeding a collective go first and compute overlaps the link
    link_first = np.empty(m)
    heavy = 1.0
    for i in range(m):
        heavy += dmin[i]
    for i in range(m):
        link_first[i] = dmin[i] + heavy if kind[i] == KIND_COLLECTIVE else dmin[i]
    prio_link = _tails(link_first, succ_ptr, succ_idx)
    has_link = False
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            has_link = True
    passes = 0
    for p in range(4):
        select = 1 if p == 2 else 0
        if p == 1:
            prio = _tails(ds, succ_ptr, succ_idx)
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
                        fixed[i] = _scaling_mode(k, ds[i], da[i], ntc, nvc)
            ms = _sgs(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, prio, rule, fixed,
                      ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done, select)
            if ms < best:
                best = ms
                starts[:] = s_tmp
                modes[:] = m_tmp
            passes += 1
            if best <= target or passes >= max_passes:
                return best
    # Forward-backward improvement: right-justify the best schedule (schedule the reversed
    # graph, latest finish first), then left-justify it again (earliest start first),
    # once with its modes kept and once choosing modes afresh; repeat while it helps.
    rev_prio = np.empty(m)
    fwd_prio = np.empty(m)
    for _round in range(4):
        improved = False
        for r in range(2):
            for i in range(m):
                dur = da[i] if modes[i] == 1 else ds[i]
                rev_prio[i] = starts[i] + dur
                fixed[i] = modes[i]
            back = _sgs(kind, ds, da, succ_ptr, succ_idx, pred_ptr, pred_idx, rev_prio, 1, fixed,
                        ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done)
            for i in range(m):
                fwd_prio[i] = -(back - fin[i])  # start in forward time; earlier first
            ms = _sgs(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, r, fixed,
                      ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done)
            if ms < best:
                best = ms
                starts[:] = s_tmp
                modes[:] = m_tmp
                improved = True
                if best <= target:
                    return best
        if not improved:
            break
    # Mode flips: switch one operator's mode, keep the order, keep the change if it helps.
    for _round in range(1):
        improved = False
        for j in range(m):
            if kind[j] == KIND_COLLECTIVE:
                continue
            for i in range(m):
                fwd_prio[i] = -starts[i]
                fixed[i] = modes[i]
            fixed[j] = 1 - modes[j]
            ms = _sgs(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, 1, fixed,
                      ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done)
            if ms < best:
                best = ms
                starts[:] = s_tmp
                modes[:] = m_tmp
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
    for _round in range(2):
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
                        or reach[j, c]):
                    continue
                if budget == 0:
                    return best
                budget -= 1
                for i in range(m):
                    fwd_prio[i] = -starts[i]
                    fixed[i] = modes[i]
                fwd_prio[j] = -starts[c] - 0.5 * ds[c]
                ms = _sgs(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, fwd_prio, 1, fixed,
                          ntc, nvc, s_tmp, m_tmp, fin, pt, ptc, pvc, plk, waiting, done)
                if ms < best:
                    best = ms
                    starts[:] = s_tmp
                    modes[:] = m_tmp
                    improved = True
                    if best <= target:
                        return best
                    c_end = starts[c] + ds[c]
        if not improved:
            break
    return best


# ---------------------------------------------------------------------------
# parallel schedule generation and a mode search over it (parts still open)
# ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _psgs(kind, ds, da, pred_ptr, succ_ptr, succ_idx, prio, fixed, ntc, nvc, starts, modes,
          finish, waiting, state):
    """Parallel (time-incremental) schedule generation with the modes ``fixed``: at each
    decision time start every ready operator that fits, highest ``prio`` first, then
    advance to the next finish. An intra-op operator that does not fit yet keeps the
    compute operators of lower priority from starting at that time (it starts as soon
    as the running ones end). Unlike ``_sgs`` it never leaves a core idle that a ready
    operator could use, so weight gradients fill the time a one-core vector operator of
    the chain leaves free. Returns the makespan (``inf`` only if nothing could start,
    which capacities >= 1 rule out)."""
    m = kind.shape[0]
    for i in range(m):
        waiting[i] = pred_ptr[i + 1] - pred_ptr[i]
        state[i] = 0  # 0 waiting, 1 running, 2 finished
    free_tc = ntc
    free_vc = nvc
    free_lk = 1
    n_fin = 0
    t = 0.0
    makespan = 0.0
    order = np.argsort(-prio)  # highest priority first
    while n_fin < m:
        # one pass in priority order: starting an operator readies no other
        blocked = False
        for q in range(m):
            j = order[q]
            if state[j] != 0 or waiting[j] != 0:
                continue
            k = kind[j]
            mode = 0 if k == KIND_COLLECTIVE else fixed[j]
            dtc, dvc, dlk = _demand(k, mode, ntc, nvc)
            fits = dtc <= free_tc and dvc <= free_vc and dlk <= free_lk
            if fits and blocked and k != KIND_COLLECTIVE:
                fits = False
            if fits:
                starts[j] = t
                modes[j] = mode
                finish[j] = t + (da[j] if mode == 1 else ds[j])
                state[j] = 1
                free_tc -= dtc
                free_vc -= dvc
                free_lk -= dlk
            elif mode == 1 and k != KIND_COLLECTIVE:
                blocked = True
        nt = np.inf
        for i in range(m):
            if state[i] == 1 and finish[i] < nt:
                nt = finish[i]
        if nt == np.inf:
            return np.inf
        t = nt
        for i in range(m):
            if state[i] == 1 and finish[i] <= t:
                state[i] = 2
                n_fin += 1
                dtc, dvc, dlk = _demand(kind[i], modes[i], ntc, nvc)
                free_tc += dtc
                free_vc += dvc
                free_lk += dlk
                if finish[i] > makespan:
                    makespan = finish[i]
                for e in range(succ_ptr[i], succ_ptr[i + 1]):
                    waiting[succ_idx[e]] -= 1
    return makespan


@njit(cache=True, nogil=True)
def _mode_priority(ds, da, md, succ_ptr, succ_idx, dur):
    """Critical-path priorities (``_tails``) at the durations of the modes ``md``
    (``dur``: scratch, receives those durations)."""
    for i in range(ds.shape[0]):
        dur[i] = da[i] if md[i] == 1 else ds[i]
    return _tails(dur, succ_ptr, succ_idx)


@njit(cache=True, nogil=True)
def _mode_search(kind, ds, da, pred_ptr, succ_ptr, succ_idx, ntc, nvc, best, target,
                 starts, modes, rounds):
    """Local search over the mode vector, each vector decoded by ``_psgs`` with
    critical-path priorities at that vector's durations: from the best schedule's modes
    and from "one core wherever intra-op scales no better than the cores it takes",
    flip one operator's mode at a time and keep every flip that shortens the schedule,
    for at most ``rounds`` passes. ``best`` is the makespan of (``starts``,
    ``modes``), which are overwritten by any shorter schedule. Returns the makespan;
    stops once it is <= ``target``."""
    m = kind.shape[0]
    fin = np.empty(m)
    waiting = np.empty(m, np.int64)
    state = np.empty(m, np.int64)
    st = np.empty(m)
    mo = np.empty(m, np.int8)
    dur = np.empty(m)
    md = np.empty(m, np.int8)
    for start in range(2):
        for i in range(m):
            k = kind[i]
            if k == KIND_COLLECTIVE:
                md[i] = 0
            elif start == 0:
                md[i] = modes[i]
            else:
                md[i] = _scaling_mode(k, ds[i], da[i], ntc, nvc)
        prio = _mode_priority(ds, da, md, succ_ptr, succ_idx, dur)
        cur = _psgs(kind, ds, da, pred_ptr, succ_ptr, succ_idx, prio, md, ntc, nvc, st, mo,
                    fin, waiting, state)
        if cur < best:
            best = cur
            starts[:] = st
            modes[:] = mo
            if best <= target:
                return best
        for _round in range(rounds):
            improved = False
            for j in range(m):
                if kind[j] == KIND_COLLECTIVE:
                    continue
                md[j] = 1 - md[j]
                prio = _mode_priority(ds, da, md, succ_ptr, succ_idx, dur)
                v = _psgs(kind, ds, da, pred_ptr, succ_ptr, succ_idx, prio, md, ntc, nvc, st, mo,
                          fin, waiting, state)
                if v < cur * (1.0 - _REL_EQ):
                    cur = v
                    improved = True
                    if v < best:
                        best = v
                        starts[:] = st
                        modes[:] = mo
                        if best <= target:
                            return best
                else:
                    md[j] = 1 - md[j]
            if not improved:
                break
    return best
