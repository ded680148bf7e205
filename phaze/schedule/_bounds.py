"""Lower bounds on one part's makespan: the quick bound, the strong bound with heads and
tails, mode exclusion against an upper bound, energetic reasoning; and the search's
per-architecture layer bound from latencies alone (docs/design.md §2.5).

Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR
from ._energy import (_chain_energy, _core_weight, _energies, _energy_bound, _fastest, _tails,
                      _weights)
from ._status import _REL_EQ
from ._windows import _bottleneck_bound, _hole_bound, _path_window_bound, _spine_window_bound

#: lam values tried by the chain-weighted energy bound (it is not concave in lam).
_LAM_GRID = np.linspace(0.0, 1.0, 11)


@njit(cache=True, nogil=True)
def _segment_bound(kind, ds, da, succ_ptr, succ_idx, ntc, nvc, width_tc, width_vc):
    """Quick lower bound on one segment's makespan: critical path at the faster modes,
    link work, chip energy.

    ``width_tc``/``width_vc``: the most operators using a TC / a VC that the DAG lets run
    at once (widest antichain). Operators running at one instant are pairwise unordered,
    so no more than min(cores, width) one-core operators of a type ever run together: the
    energy bound weighs a one-core operator by 1/min(cores, width) of its type's share."""
    cap_tc = width_tc if width_tc < ntc else ntc
    cap_vc = width_vc if width_vc < nvc else nvc
    dmin = _fastest(kind, ds, da)
    tail = _tails(dmin, succ_ptr, succ_idx)
    lb = 0.0
    link = 0.0
    for i in range(kind.shape[0]):
        if tail[i] > lb:
            lb = tail[i]
        if kind[i] == KIND_COLLECTIVE:
            link += ds[i]
    if link > lb:
        lb = link
    e = _energy_bound(kind, ds, da, cap_tc, cap_vc)
    if e > lb:
        lb = e
    return lb


@njit(cache=True, nogil=True)
def _side_bound(kind, dmin, ener, reach, i, start, side, forward, acc):
    """H(i) (``forward``) or T(i) of ``_strong_bound``: at least ``start`` (the critical
    path before / after i), the energy (each row of ``ener`` one lam) of the operators
    on that side of i, and for each collective c on that side, its own bound ``side[c]``
    plus its duration plus the energy of the operators between c and i. ``side`` must
    hold the bounds of the operators on that side already; ``acc`` is scratch (n_lam)."""
    m = kind.shape[0]
    n_lam = ener.shape[0]
    h = start
    for q in range(n_lam):
        acc[q] = 0.0
    for j in range(m):
        if (reach[j, i] if forward else reach[i, j]):
            for q in range(n_lam):
                acc[q] += ener[q, j]
    for q in range(n_lam):
        if acc[q] > h:
            h = acc[q]
    for c in range(m):
        if kind[c] != KIND_COLLECTIVE or not (reach[c, i] if forward else reach[i, c]):
            continue
        for q in range(n_lam):
            acc[q] = 0.0
        lo = c + 1 if forward else i + 1
        hi = i if forward else c
        for j in range(lo, hi):
            if (reach[c, j] and reach[j, i]) if forward else (reach[i, j] and reach[j, c]):
                for q in range(n_lam):
                    acc[q] += ener[q, j]
        for q in range(n_lam):
            v = side[c] + dmin[c] + acc[q]
            if v > h:
                h = v
    return h


@njit(cache=True, nogil=True)
def _strong_bound(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, reach, ntc, nvc,
                  width_tc, width_vc, opinfo, head, tail):
    """Stronger (costlier) lower bound on one segment's makespan, the max of

    * chain-weighted energy (``_chain_energy``) over a grid of lam;
    * for every operator i: H(i) + i at its faster mode + T(i), where H(i) bounds i's
      start: the critical path to i, the energy of i's ancestors (they all finish before
      i starts), and for each collective c before i, H(c) + c + the energy of the
      operators between c and i (they start after c ends and end before i starts);
      T(i) likewise bounds the time after i ends. Every lam gives a valid energy, so
      each term takes the best lam;
    * the longest path with energy windows (``_path_window_bound``) and the
      chain-and-windows bounds of the vector and tensor cores (``_spine_window_bound``);
    * chip energy plus the collectives' holes filled by whole operators (``_hole_bound``).

    ``reach[i, j]`` is nonzero when i precedes j (local indices). ``head``/``tail``
    (length m) receive H(i) and T(i): in every schedule operator i starts no earlier
    than H(i) and ends at least T(i) before the makespan, whatever i's own mode."""
    m = kind.shape[0]
    cap_tc = width_tc if width_tc < ntc else ntc
    cap_vc = width_vc if width_vc < nvc else nvc
    lb = 0.0
    if cap_tc == 0 or cap_vc == 0:
        lams = np.full(1, 1.0 if cap_vc == 0 else 0.0)  # only one type's weight matters
    else:
        lams = _LAM_GRID
    n_lam = lams.shape[0]
    ener = np.empty((n_lam, m))
    for q in range(n_lam):
        lam = lams[q]
        e = _chain_energy(kind, ds, da, pred_ptr, pred_idx, lam, ntc, nvc, cap_tc, cap_vc, opinfo)
        if e > lb:
            lb = e
        _energies(kind, ds, da, lam, cap_tc, cap_vc, ener[q])
    dmin = _fastest(kind, ds, da)
    tail_cp = _tails(dmin, succ_ptr, succ_idx)
    head[:] = 0.0
    tail[:] = 0.0
    acc = np.empty(n_lam)
    for i in range(m):  # topological
        h = 0.0
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[e]
            v = head[p] + dmin[p]
            if v > h:
                h = v
        head[i] = _side_bound(kind, dmin, ener, reach, i, h, head, True, acc)
    for i in range(m - 1, -1, -1):
        tail[i] = _side_bound(kind, dmin, ener, reach, i, tail_cp[i] - dmin[i], tail, False, acc)
        v = head[i] + dmin[i] + tail[i]
        if v > lb:
            lb = v
    # (every third lam: the windows' energies cost O(m^3) per lam)
    v = _path_window_bound(kind, ds, reach, dmin, ener[::5])
    if v > lb:
        lb = v
    for side in range(2):
        v = _spine_window_bound(kind, ds, da, reach, dmin, ntc, nvc, side == 0,
                                cap_vc == 1 if side == 0 else cap_tc == 1)
        if v > lb:
            lb = v
    if cap_vc == 1:
        v = _bottleneck_bound(kind, ds, da, reach, dmin, True)
        if v > lb:
            lb = v
    if cap_tc == 1:
        v = _bottleneck_bound(kind, ds, da, reach, dmin, False)
        if v > lb:
            lb = v
    v = _hole_bound(kind, ds, da, reach, lams, cap_tc, cap_vc)
    if v > lb:
        lb = v
    return lb


@njit(cache=True, nogil=True)
def _forced_modes(kind, head, tail, ub, ds_f, da_f):
    """Exclude modes that cannot appear in any schedule shorter than ``ub``.

    ``head[i]``/``tail[i]`` bound, in every schedule of the instance (``ds_f``, ``da_f``),
    when operator i starts and how long after its end the makespan is (``_strong_bound``).
    If head + duration + tail >= ``ub`` at one mode, every schedule shorter than ``ub``
    runs i in its other mode; that mode's duration is raised to ``4 ub`` in place (a
    schedule using it is >= ``ub`` before and after), so the instances' schedules shorter
    than ``ub`` are the same. Returns the number of modes newly excluded, or -1 when
    some operator has both modes excluded (then no schedule is shorter than ``ub``)."""
    big = 4.0 * ub
    excluded = 0
    for i in range(kind.shape[0]):
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


@njit(cache=True, nogil=True)
def _forced_bound(kind, ds, da, pred_ptr, pred_idx, succ_ptr, succ_idx, reach, ntc, nvc,
                  width_tc, width_vc, opinfo, ub, lb, target, head, tail):
    """Raise the lower bound ``lb`` by excluding modes that cannot beat ``ub``.

    ``head``/``tail`` come from ``_strong_bound`` on (``ds``, ``da``). Alternates
    ``_forced_modes`` and ``_strong_bound`` on the restricted instance. Valid for any
    ``ub``: if the optimum is below ``ub`` its schedule is a schedule of every restricted
    instance, so the optimum is >= min(ub, bound of the restricted instance). Stops once
    ``lb`` reaches ``target`` or nothing new is excluded. Returns the new bound (<= ub
    unless ``lb`` already was above).

    An operator whose one-core mode is excluded never runs beside another, so the widths
    of one-core users (``width_tc``/``width_vc``, ``opinfo``'s first two columns) are
    capped by the number of operators of the type that may still run on one core (at
    least 1: any width >= the true one is valid)."""
    m = kind.shape[0]
    ds_f = ds.copy()
    da_f = da.copy()
    info = opinfo.copy()
    big = 4.0 * ub
    for _round in range(3):
        n_out = _forced_modes(kind, head, tail, ub, ds_f, da_f)
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
            if info[i, 0] > n_tc - own_tc:
                info[i, 0] = n_tc - own_tc
            if info[i, 1] > n_vc - own_vc:
                info[i, 1] = n_vc - own_vc
        w_tc = width_tc if width_tc < n_tc else n_tc
        w_vc = width_vc if width_vc < n_vc else n_vc
        if w_tc < 1:
            w_tc = 1
        if w_vc < 1:
            w_vc = 1
        forced = _strong_bound(kind, ds_f, da_f, pred_ptr, pred_idx, succ_ptr, succ_idx, reach,
                               ntc, nvc, w_tc, w_vc, info, head, tail)
        if forced > ub:
            forced = ub
        if forced > lb:
            lb = forced
        if lb >= target:
            break
    return lb


@njit(cache=True, nogil=True)
def _least_overlap(p, est, lft, t1, t2):
    """Least time a run of length ``p`` placed anywhere within [est, lft] spends in [t1, t2]."""
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


@njit(cache=True, nogil=True)
def _energetic_infeasible(kind, ds, da, head, tail, makespan, cap_tc, cap_vc):
    """True when no schedule has a makespan <= ``makespan`` (energetic reasoning).

    In such a schedule operator i runs within [head[i], makespan - tail[i]] (``head`` and
    ``tail`` as from ``_strong_bound``, or from a restricted instance when ``makespan`` is
    below the ub it was restricted against). For every interval [t1, t2] with t1 a head
    and t2 an end limit, each operator spends at least its least overlap with the
    interval (over its modes that fit its window, weighted as in ``_energy``), and the
    chip holds at most weight 1 (the link at most one collective) at a time; more than
    t2 - t1 of either, or an operator with no mode fitting its window, is a
    contradiction. Tried at lam 0 and 1 (vector cores' and tensor cores' work; lam 1/2
    and 1/4, 3/4 added nothing on sampled open cases). ``makespan`` is first
    raised by a relative ``_REL_EQ`` so that the rounding in the heads' and tails' sums
    never rules out the makespan itself (the claim only gets weaker)."""
    m = kind.shape[0]
    makespan = makespan * (1.0 + _REL_EQ)
    for q in range(2):
        wt, wv = _weights(1.0 * q, cap_tc, cap_vc)
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
                        link += _least_overlap(ds[i], head[i], lft, t1, t2)
                        continue
                    least = np.inf
                    if head[i] + ds[i] <= lft:
                        least = _core_weight(k, wt, wv) * _least_overlap(ds[i], head[i], lft, t1, t2)
                    if head[i] + da[i] <= lft:
                        v = _least_overlap(da[i], head[i], lft, t1, t2)
                        if v < least:
                            least = v
                    if least == np.inf:
                        return True
                    chip += least
                span = (t2 - t1) * (1.0 + _REL_EQ)
                if chip > span or link > span:
                    return True
    return False


@njit(cache=True, nogil=True)
def _layer_lower_bounds_kernel(kind, pred_ptr, pred_idx, order, single, intra, num_tc, num_vc):
    """Lower bound on a layer's makespan per architecture, from operator latencies.

    Valid for the schedule model of docs/design.md §2.5: every operator takes at least
    min(single, intra) and waits for its predecessors (critical path); tensor-core
    busy time is single (one core) or num_tc·intra (all cores), so the makespan is at
    least the total of the cheaper of the two over num_tc (same for vector cores);
    collectives share one link, one at a time.
    """
    n_ops, n_archs = single.shape
    out = np.zeros(n_archs)
    finish = np.zeros(n_ops)
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
            dur = min(single[i, a], intra[i, a])
            finish[i] = start + dur
            k = kind[i]
            if k == KIND_GEMM or k == KIND_FUSED:
                tc_work += min(single[i, a], num_tc[a] * intra[i, a])
            if k == KIND_VECTOR or k == KIND_FUSED:
                vc_work += min(single[i, a], num_vc[a] * intra[i, a])
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
    return out
