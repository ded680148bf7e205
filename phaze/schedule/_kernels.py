"""Compiled core of ``phaze.schedule``: list scheduling, lower bounds, exact branch and bound.

The problem is a multi-mode resource-constrained project scheduling problem with
three renewable resources: tensor cores (capacity num_tc), vector cores (num_vc)
and the chip's link (capacity 1). Demands per operator and mode:

    GEMM one core (1, 0, 0)     vector one core (0, 1, 0)     fused one core (1, 1, 0)
    collective (0, 0, 1)        any compute intra-op (num_tc, num_vc, 0)

An intra-op operator holds *every* core of both types, which is exactly "holds all
cores of its type(s) and overlaps no other compute operator".

The graph arrives split into *segments* (see ``_prepare`` in ``__init__``): maximal
groups between cut operators (operators comparable with every other one). Every
operator of a segment waits for every operator of the segment before, so the optimal
makespan is the sum of the segments' optima and each segment is scheduled on its own.

Within a segment operators are numbered locally in a topological order; predecessor
and successor lists are CSR arrays whose pointers are absolute positions into the
shared index arrays (so a segment is just a slice of the pointer arrays).

Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

KIND_GEMM = 0
KIND_VECTOR = 1
KIND_FUSED = 2
KIND_COLLECTIVE = 3

STATUS_OPTIMAL = 0
STATUS_CERTIFIED = 1
STATUS_LIMIT = 2
STATUS_INFEASIBLE = 3
STATUS_ERROR = 4

# Two makespans closer than this (relative) are treated as equal when deciding
# "optimal": the bound and the schedule are both exact float sums, so only
# rounding separates them.
_REL_EQ = 1e-12


# ---------------------------------------------------------------------------
# resource profile: piecewise-constant usage over [pt[k], pt[k+1]); last piece is idle
# ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _demand(kind, mode, ntc, nvc):
    """(tensor cores, vector cores, link) held by an operator of ``kind`` in ``mode``."""
    if kind == KIND_COLLECTIVE:
        return 0, 0, 1
    if mode == 1:
        return ntc, nvc, 0
    if kind == KIND_GEMM:
        return 1, 0, 0
    if kind == KIND_VECTOR:
        return 0, 1, 0
    return 1, 1, 0


@njit(cache=True, nogil=True)
def _earliest(pt, ptc, pvc, plk, npieces, est, dur, dtc, dvc, dlk, ntc, nvc):
    """Earliest t >= est where the demand fits the profile throughout [t, t + dur)."""
    if dur <= 0.0:
        return est
    t = est
    k = 0
    while True:
        while k + 1 < npieces and pt[k + 1] <= t:
            k += 1
        end = t + dur
        j = k
        fits = True
        while j < npieces and pt[j] < end:
            if ptc[j] + dtc > ntc or pvc[j] + dvc > nvc or plk[j] + dlk > 1:
                fits = False
                t = pt[j + 1]  # the last piece is idle, so j + 1 exists
                break
            j += 1
        if fits:
            return t


@njit(cache=True, nogil=True)
def _split(pt, ptc, pvc, plk, npieces, x):
    """Make ``x`` a breakpoint of the profile; returns the new number of pieces."""
    k = npieces - 1
    while pt[k] > x:
        k -= 1
    if pt[k] == x:
        return npieces
    for j in range(npieces, k + 1, -1):
        pt[j] = pt[j - 1]
        ptc[j] = ptc[j - 1]
        pvc[j] = pvc[j - 1]
        plk[j] = plk[j - 1]
    pt[k + 1] = x
    ptc[k + 1] = ptc[k]
    pvc[k + 1] = pvc[k]
    plk[k + 1] = plk[k]
    return npieces + 1


@njit(cache=True, nogil=True)
def _insert(pt, ptc, pvc, plk, npieces, start, dur, dtc, dvc, dlk):
    """Add a demand over [start, start + dur) to the profile; returns the number of pieces."""
    if dur <= 0.0:
        return npieces
    end = start + dur
    npieces = _split(pt, ptc, pvc, plk, npieces, start)
    npieces = _split(pt, ptc, pvc, plk, npieces, end)
    for j in range(npieces):
        if pt[j] >= start and pt[j] < end:
            ptc[j] += dtc
            pvc[j] += dvc
            plk[j] += dlk
    return npieces


# ---------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _fastest(kind, ds, da):
    """Duration of each operator at its faster mode (collectives have one mode)."""
    m = kind.shape[0]
    out = np.empty(m)
    for i in range(m):
        out[i] = ds[i] if (kind[i] == KIND_COLLECTIVE or ds[i] <= da[i]) else da[i]
    return out


@njit(cache=True, nogil=True)
def _tails(dmin, succ_ptr, succ_idx):
    """Longest path from each operator (inclusive) to the end, durations ``dmin``."""
    m = dmin.shape[0]
    tail = np.empty(m)
    for i in range(m - 1, -1, -1):
        best = 0.0
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            v = tail[succ_idx[e]]
            if v > best:
                best = v
        tail[i] = dmin[i] + best
    return tail


@njit(cache=True, nogil=True)
def _weights(lam, cap_tc, cap_vc):
    """Energy weights (per TC, per VC) of one-core operators: lam/cap_tc and
    (1 - lam)/cap_vc, 0 for a type with no cores."""
    wt = lam / cap_tc if cap_tc > 0 else 0.0
    wv = (1.0 - lam) / cap_vc if cap_vc > 0 else 0.0
    return wt, wv


@njit(cache=True, nogil=True)
def _core_weight(k, wt, wv):
    """Energy weight of a one-core compute operator of kind ``k`` (0 for a collective)."""
    if k == KIND_GEMM:
        return wt
    if k == KIND_VECTOR:
        return wv
    if k == KIND_FUSED:
        return wt + wv
    return 0.0


@njit(cache=True, nogil=True)
def _energy(kind, ds, da, lam, ntc, nvc):
    """Chip energy sum_i min_mode(weight x duration) with weight lam/ntc per TC, (1-lam)/nvc per VC.

    At any instant the running operators' weights sum to at most 1 (an intra-op one
    holds every core: weight 1), so the makespan is at least this sum."""
    wt, wv = _weights(lam, ntc, nvc)
    total = 0.0
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == KIND_COLLECTIVE:
            continue
        e = _core_weight(k, wt, wv) * ds[i]
        if da[i] < e:
            e = da[i]
        total += e
    return total


@njit(cache=True, nogil=True)
def _energy_bound(kind, ds, da, ntc, nvc):
    """max over lam in [0, 1] of ``_energy`` (concave piecewise linear: check the breakpoints)."""
    if ntc == 0:
        return _energy(kind, ds, da, 0.0, ntc, nvc)
    if nvc == 0:
        return _energy(kind, ds, da, 1.0, ntc, nvc)
    best = _energy(kind, ds, da, 0.0, ntc, nvc)
    v = _energy(kind, ds, da, 1.0, ntc, nvc)
    if v > best:
        best = v
    for i in range(kind.shape[0]):
        k = kind[i]
        s = ds[i]
        a = da[i]
        if k == KIND_COLLECTIVE or s <= 0.0:
            continue
        if k == KIND_GEMM:
            lam = ntc * a / s
        elif k == KIND_VECTOR:
            lam = 1.0 - nvc * a / s
        else:
            slope = (1.0 / ntc - 1.0 / nvc) * s
            if slope == 0.0:
                continue
            lam = (a - s / nvc) / slope
        if lam > 0.0 and lam < 1.0:
            v = _energy(kind, ds, da, lam, ntc, nvc)
            if v > best:
                best = v
    return best


@njit(cache=True, nogil=True)
def _chain_energy(kind, ds, da, pred_ptr, pred_idx, lam, ntc, nvc, cap_tc, cap_vc, opinfo):
    """Chip-energy bound with one chain of operators weighted up.

    Base weights: lam/cap_tc per TC and (1-lam)/cap_vc per VC held by a one-core
    operator, 1 for an intra-op operator (it holds everything). A running set is an
    antichain, so it holds at most one operator of any chain; an operator i on the chain
    can be weighted ``1 - (most weight the operators unordered with it can hold)``:
    ``opinfo[i, 0]``/``[i, 1]`` are the widest antichains of TC/VC users unordered with
    i, ``opinfo[i, 2]`` is 1 for a collective that no compute operator can overlap.
    The running weight never exceeds 1, so the makespan is at least the total energy.
    The chain maximising the extra energy is a longest path (node weights >= 0)."""
    m = kind.shape[0]
    wt, wv = _weights(lam, cap_tc, cap_vc)
    total = 0.0
    best_path = 0.0
    path = np.empty(m)
    for i in range(m):
        k = kind[i]
        s = ds[i]
        a = da[i]
        if k == KIND_COLLECTIVE:
            base = 0.0
            boosted = s if opinfo[i, 2] == 1 else 0.0
        else:
            uses_t = 1 if (k == KIND_GEMM or k == KIND_FUSED) else 0
            uses_v = 1 if (k == KIND_VECTOR or k == KIND_FUSED) else 0
            w = uses_t * wt + uses_v * wv
            base = w * s
            if a < base:
                base = a
            kt = opinfo[i, 0]
            if kt > ntc - uses_t:
                kt = ntc - uses_t
            kv = opinfo[i, 1]
            if kv > nvc - uses_v:
                kv = nvc - uses_v
            wb = 1.0 - kt * wt - kv * wv
            if wb < w:
                wb = w
            boosted = wb * s
            if a < boosted:
                boosted = a
        total += base
        gain = boosted - base
        if gain < 0.0:
            gain = 0.0
        longest = 0.0
        for e in range(pred_ptr[i], pred_ptr[i + 1]):
            v = path[pred_idx[e]]
            if v > longest:
                longest = v
        path[i] = gain + longest
        if path[i] > best_path:
            best_path = path[i]
    return total + best_path


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
def _energies(kind, ds, da, lam, cap_tc, cap_vc, out):
    """Per-operator chip energy min_mode(weight x duration) (see ``_energy``)."""
    wt, wv = _weights(lam, cap_tc, cap_vc)
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == KIND_COLLECTIVE:
            out[i] = 0.0
            continue
        e = _core_weight(k, wt, wv) * ds[i]
        out[i] = da[i] if da[i] < e else e


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
def _path_window_bound(kind, ds, reach, dmin, ener):
    """Longest path with energy windows: for any chain i_1 < ... < i_k of operators, the
    makespan is at least the chain's fastest durations plus, for each window between
    consecutive chain operators (and before i_1 / after i_k), the most of its members'
    chip energy (any row of ``ener``, one per lam) and link work: the members all run
    after the earlier chain operator ends and before the later one starts. The chain
    maximising that sum is found by dynamic programming over the (transitive) ``reach``.
    With empty windows this is the critical path; with one chain operator, energy."""
    m = kind.shape[0]
    n_lam = ener.shape[0]
    acc = np.empty(n_lam + 1)
    best = np.zeros(m)
    lb = 0.0
    for i in range(m):  # topological
        # window before i as the first chain operator: all its ancestors
        for q in range(n_lam + 1):
            acc[q] = 0.0
        for k in range(i):
            if reach[k, i]:
                for q in range(n_lam):
                    acc[q] += ener[q, k]
                if kind[k] == KIND_COLLECTIVE:
                    acc[n_lam] += ds[k]
        h = 0.0
        for q in range(n_lam + 1):
            if acc[q] > h:
                h = acc[q]
        for j in range(i):
            if not reach[j, i]:
                continue
            for q in range(n_lam + 1):
                acc[q] = 0.0
            for k in range(j + 1, i):
                if reach[j, k] and reach[k, i]:
                    for q in range(n_lam):
                        acc[q] += ener[q, k]
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
            if reach[i, k]:
                for q in range(n_lam):
                    acc[q] += ener[q, k]
                if kind[k] == KIND_COLLECTIVE:
                    acc[n_lam] += ds[k]
        t = 0.0
        for q in range(n_lam + 1):
            if acc[q] > t:
                t = acc[q]
        if best[i] + t > lb:
            lb = best[i] + t
    return lb


@njit(cache=True, nogil=True)
def _spine_window_bound(kind, ds, da, reach, dmin, ntc, nvc, vector_side, one_at_a_time):
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
    m = kind.shape[0]
    uses = np.zeros(m, np.bool_)
    busy = 0.0
    for i in range(m):
        k = kind[i]
        if k == KIND_FUSED or (k == KIND_VECTOR if vector_side else k == KIND_GEMM):
            uses[i] = True
            busy += dmin[i]
    # heaviest chain of users (local order is topological; reach is transitive)
    weight = np.zeros(m)
    prev = np.full(m, -1, np.int64)
    last = -1
    for i in range(m):
        if not uses[i]:
            continue
        w = 0.0
        for j in range(i):
            if uses[j] and reach[j, i] and weight[j] > w:
                w = weight[j]
                prev[i] = j
        weight[i] = w + dmin[i]
        if last < 0 or weight[i] > weight[last]:
            last = i
    if last < 0:
        return 0.0
    on_chain = np.zeros(m, np.bool_)
    k_len = 0
    i = last
    while i >= 0:
        on_chain[i] = True
        k_len += 1
        i = prev[i]
    chain = np.empty(k_len, np.int64)
    pos = 0
    for i in range(m):
        if on_chain[i]:
            chain[pos] = i
            pos += 1
    chain_time = weight[last]
    # window of each off-chain operator: g when it follows chain[g-1] and precedes chain[g]
    window = np.full(m, -1, np.int64)
    fill = 0.0
    for i in range(m):
        if on_chain[i]:
            continue
        after = 0  # number of chain operators that precede i
        for g in range(k_len):
            if reach[chain[g], i]:
                after = g + 1
        before = k_len  # index of the first chain operator that i precedes
        for g in range(k_len - 1, -1, -1):
            if reach[i, chain[g]]:
                before = g
        if before == after:
            window[i] = after
        if uses[i]:
            fill += ds[i] if ds[i] > da[i] else da[i]
    head = np.zeros(m)
    cp = np.zeros(k_len + 1)
    e_tc = np.zeros(k_len + 1)
    e_vc = np.zeros(k_len + 1)
    e_lk = np.zeros(k_len + 1)
    for i in range(m):
        g = window[i]
        if g < 0:
            continue
        h = 0.0
        for j in range(i):
            if window[j] == g and reach[j, i] and head[j] + dmin[j] > h:
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
    return lb


@njit(cache=True, nogil=True)
def _bottleneck_bound(kind, ds, da, reach, dmin, vector_side):
    """Bound for a core type of which at most one operator runs at a time (one core, or
    its users pairwise ordered): its users run one after another for B >= sum of their
    faster durations. Outside that busy time lie every intra-op operator of the other
    type (disjoint from everything) and, for a one-core operator j of the other type,
    at least r_j = s_j - (one-core time of the busy-type users unordered with j), the
    most it can overlap. So makespan >= B + min over R of (R + sum of a_j with r_j > R)
    (the one-core operators share R, the others go intra-op)."""
    m = kind.shape[0]
    busy = 0.0
    r = np.zeros(m)
    other = np.zeros(m, np.bool_)
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
            if not reach[v, j] and not reach[j, v]:
                ov += ds[v]
        rj = ds[j] - ov
        r[j] = rj if rj > 0.0 else 0.0
    best = np.inf
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
    return busy + best


#: Most partial fillings kept by the hole bound's dynamic program; an operator that
#: would exceed it is relaxed to the divisible class (still a valid bound, only weaker).
#: A compile-time constant of the kernel (numba's cache would not see a change made to
#: it from another module), so it lives here rather than in ``_config``.
_HOLE_STATES = 64
#: More collectives than this in a part: every operator is relaxed to divisible (the
#: fillings' dynamic program is over one dimension per collective; transformer parts
#: have at most two).
_HOLE_EXACT_MAX = 6


@njit(cache=True, nogil=True)
def _hole_bound(kind, ds, da, reach, lams, cap_tc, cap_vc):
    """Chip energy plus the collectives' idle holes, with whole operators in the holes;
    the best over the energy weights ``lams``.

    The collectives run one at a time on the link, so their runs (holes) are disjoint and
    the makespan is at least sum_k d_k + (energy run outside the holes). With the
    energies of ``_energy`` (the running weight never exceeds 1), an operator i at its
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
    need more than ``_HOLE_STATES`` states (or more than 4 x that many candidates), and
    every operator of a part with more than ``_HOLE_EXACT_MAX`` collectives, is relaxed
    to divisible instead (valid, only weaker)."""
    m = kind.shape[0]
    n_holes = 0
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            n_holes += 1
    if n_holes == 0:
        return 0.0
    hole = np.empty(n_holes, np.int64)
    dh = np.empty(n_holes)
    total_d = 0.0
    q = 0
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            hole[q] = i
            dh[q] = ds[i]
            total_d += ds[i]
            q += 1
    # holes k, l separated: a compute operator of positive duration lies between them
    sep = np.zeros((n_holes, n_holes), np.bool_)
    for k in range(n_holes):
        for l in range(n_holes):
            a = hole[k]
            b = hole[l]
            if k == l or not reach[a, b]:
                continue
            for j in range(m):
                if (kind[j] != KIND_COLLECTIVE and reach[a, j] and reach[j, b]
                        and ds[j] > 0.0 and da[j] > 0.0):
                    sep[k, l] = True
                    sep[l, k] = True
                    break
    # elig[i, k]: operator i is unordered with collective k; spans: i may meet two
    # holes that are not separated (then never whole)
    elig = np.zeros((m, n_holes), np.bool_)
    spans = np.zeros(m, np.bool_)
    n_elig = np.zeros(m, np.int64)
    for i in range(m):
        if kind[i] == KIND_COLLECTIVE:
            continue
        for k in range(n_holes):
            c = hole[k]
            if not reach[i, c] and not reach[c, i]:
                elig[i, k] = True
                n_elig[i] += 1
        for k in range(n_holes):
            for l in range(k + 1, n_holes):
                if elig[i, k] and elig[i, l] and not sep[k, l]:
                    spans[i] = True
    states = np.zeros((_HOLE_STATES, n_holes))
    cand = np.empty((4 * _HOLE_STATES, n_holes))
    keep = np.empty(4 * _HOLE_STATES, np.bool_)
    div_cap = np.empty(n_holes)
    ener = np.empty(m)
    best = 0.0
    for q in range(lams.shape[0]):
        lam = lams[q]
        wt, wv = _weights(lam, cap_tc, cap_vc)
        _energies(kind, ds, da, lam, cap_tc, cap_vc, ener)
        total_e = 0.0
        div_total = 0.0
        for k in range(n_holes):
            div_cap[k] = 0.0
            states[0, k] = 0.0
        n_states = 1
        for i in range(m):
            if kind[i] == KIND_COLLECTIVE:
                continue
            w = _core_weight(kind[i], wt, wv)
            e = ener[i]
            total_e += e
            if e <= 0.0 or n_elig[i] == 0:
                continue
            whole = e == da[i] and not spans[i] and n_holes <= _HOLE_EXACT_MAX
            # (bounded work: at most 4 x _HOLE_STATES candidate fillings per operator)
            if whole and n_states * (n_elig[i] + 1) > 4 * _HOLE_STATES:
                whole = False
            if whole:
                one_core_fill = 0.0
                for k in range(n_holes):
                    if elig[i, k]:
                        one_core_fill += w * (ds[i] if ds[i] < dh[k] else dh[k])
                whole = one_core_fill <= w * ds[i] - e
            if whole:
                # the Pareto set of fillings, extended by i in each hole it may meet
                n_cand = 0
                for s in range(n_states):
                    for k in range(n_holes + 1):
                        if k < n_holes and not elig[i, k]:
                            continue
                        for l in range(n_holes):
                            cand[n_cand, l] = states[s, l]
                        if k < n_holes:
                            v = cand[n_cand, k] + (da[i] if da[i] < dh[k] else dh[k])
                            cand[n_cand, k] = v if v < dh[k] else dh[k]
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
                            if cand[y, l] < cand[x, l]:
                                ge = False
                                break
                            if cand[y, l] > cand[x, l]:
                                gt = True
                        if ge and (gt or y < x):
                            keep[x] = False
                            break
                    if keep[x]:
                        n_new += 1
                if n_new <= _HOLE_STATES:
                    n_states = 0
                    for x in range(n_cand):
                        if keep[x]:
                            for l in range(n_holes):
                                states[n_states, l] = cand[x, l]
                            n_states += 1
                    continue
            # divisible (or too many fillings)
            div_total += e
            for k in range(n_holes):
                if elig[i, k]:
                    f1 = w * (ds[i] if ds[i] < dh[k] else dh[k])
                    f2 = da[i] if da[i] < dh[k] else dh[k]
                    div_cap[k] += f1 if f1 > f2 else f2
        gain = 0.0
        for s in range(n_states):
            g1 = 0.0
            g2 = div_total
            for k in range(n_holes):
                v = states[s, k] + div_cap[k]
                g1 += v if v < dh[k] else dh[k]
                g2 += states[s, k]
            g = g1 if g1 < g2 else g2
            if g > gain:
                gain = g
        v = total_e + total_d - gain
        if v > best:
            best = v
    return best


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


# ---------------------------------------------------------------------------
# serial schedule generation (list scheduling)
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# exact branch and bound over serial schedule generation
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# one layer on one chip: segments, bounds, heuristics, exact small segments
# ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _solve(kind, ds, da, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc,
           nvc, gap, exact_max, node_limit, mode_rounds, open_nodes, starts, modes, seg_ub, seg_lb,
           table):
    """Schedule one graph (operators in segment order) on one chip.

    Returns (makespan, lower_bound, optimal). ``starts`` are absolute times; each
    segment starts when the previous one ends. ``table``: ``_bnb_table(len(kind), ...)``
    (allocated here at full size on the first search if it has no rows)."""
    tkey, tlast, tcmax, tfin, tmode, tnext = table
    nseg = seg_ptr.shape[0] - 1
    total_lb = 0.0
    total_ub = 0.0
    for s in range(nseg):
        b = seg_ptr[s]
        e = seg_ptr[s + 1]
        lb = _segment_bound(kind[b:e], ds[b:e], da[b:e], succ_ptr[b:e + 1], succ_idx, ntc, nvc,
                            seg_wtc[s], seg_wvc[s])
        # a part within the gap on its own keeps the whole within the gap
        target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
        ub = _list_schedule(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                            succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc, target,
                            starts[b:e], modes[b:e], 2)
        if ub > target:
            head = np.empty(e - b)
            tail = np.empty(e - b)
            strong = _strong_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                   succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                   seg_wtc[s], seg_wvc[s], opinfo[b:e], head, tail)
            if strong > lb:
                lb = strong
                target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
            if ub > target:
                ub = _list_schedule(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                    succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                    target, starts[b:e], modes[b:e])
            if ub > target:
                # Exclude the modes that cannot appear in a schedule shorter than ub
                # (may prove ub optimal), then shorter than ub_cert = ub (1 - gap):
                # proving no schedule beats ub_cert certifies ub, and the lower ub_cert
                # excludes more modes. head/tail of the ub-restricted instance stay
                # valid for every schedule shorter than ub_cert <= ub.
                ub_cert = _cert_level(ub, gap, 4.0)
                lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                   succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                   seg_wtc[s], seg_wvc[s], opinfo[b:e], ub, lb, ub_cert,
                                   head, tail)
                if lb < ub_cert:
                    lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                       succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                       seg_wtc[s], seg_wvc[s], opinfo[b:e], ub_cert, lb,
                                       ub_cert, head, tail)
                if lb < ub_cert:
                    # still open: search the modes (parallel generation), and if that
                    # shortens the schedule, exclude modes against the new ub (head and
                    # tail hold for every schedule shorter than the old ub_cert)
                    target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
                    better = _mode_search(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1],
                                          succ_ptr[b:e + 1], succ_idx, ntc, nvc, ub, target,
                                          starts[b:e], modes[b:e], mode_rounds)
                    if better < ub:
                        ub = better
                        cert = _cert_level(ub, gap, 4.0)
                        if lb < cert and cert < ub_cert:
                            lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1],
                                               pred_idx, succ_ptr[b:e + 1], succ_idx,
                                               reach[b:e, b:e], ntc, nvc, seg_wtc[s],
                                               seg_wvc[s], opinfo[b:e], cert, lb, cert,
                                               head, tail)
                    # energetic reasoning against just above ub (1 - gap): no schedule
                    # that short certifies ub (head and tail hold below the old ub_cert)
                    cert = _cert_level(ub, gap, 2.0)
                    if lb < cert and cert < ub_cert and _energetic_infeasible(
                            kind[b:e], ds[b:e], da[b:e], head, tail, cert,
                            min(ntc, seg_wtc[s]), min(nvc, seg_wvc[s])):
                        lb = cert
                    if lb < cert and cert < ub_cert and open_nodes > 0:
                        # last resort: a bounded exact search below just above
                        # ub (1 - gap) (finds shorter schedules on the way)
                        if tkey.shape[0] == 0:
                            tkey, tlast, tcmax, tfin, tmode, tnext = _bnb_table(
                                kind.shape[0], _BNB_TABLE_MAX_BUCKETS)
                        ub, proven, exhausted = _bnb_search(
                            kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                            succ_ptr[b:e + 1], succ_idx, ntc, nvc, seg_wtc[s], seg_wvc[s],
                            head, tail, ub, cert, gap,
                            open_nodes, starts[b:e], modes[b:e], tkey, tlast, tcmax, tfin, tmode, tnext)
                        if exhausted and proven > lb:
                            lb = proven
        if lb > ub:
            lb = ub  # float rounding only: ub is achieved, so the true bound is <= ub
        seg_lb[s] = lb
        seg_ub[s] = ub
        total_lb += lb
        total_ub += ub
    # Exact search on small segments, largest open gap first, until certified.
    tried = np.zeros(nseg, np.bool_)
    while total_ub - total_lb > gap * total_ub:
        pick = -1
        widest = 0.0
        for s in range(nseg):
            size = seg_ptr[s + 1] - seg_ptr[s]
            open_gap = seg_ub[s] - seg_lb[s]
            if (not tried[s] and size <= exact_max and open_gap > _REL_EQ * seg_ub[s]
                    and open_gap > widest):
                pick = s
                widest = open_gap
        if pick < 0:
            break
        b = seg_ptr[pick]
        e = seg_ptr[pick + 1]
        no_bound = np.zeros(e - b)
        if tkey.shape[0] == 0:
            tkey, tlast, tcmax, tfin, tmode, tnext = _bnb_table(kind.shape[0],
                                                                _BNB_TABLE_MAX_BUCKETS)
        best, proven, exhausted = _bnb_search(
            kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx, succ_ptr[b:e + 1], succ_idx,
            ntc, nvc, seg_wtc[pick], seg_wvc[pick], no_bound, no_bound, seg_ub[pick],
            seg_ub[pick], 0.0, node_limit,
            starts[b:e], modes[b:e], tkey, tlast, tcmax, tfin, tmode, tnext)
        total_ub += best - seg_ub[pick]
        seg_ub[pick] = best
        tried[pick] = True
        if exhausted:  # proven == best: nothing shorter exists
            total_lb += best - seg_lb[pick]
            seg_lb[pick] = best
    optimal = True
    offset = 0.0
    total_lb = 0.0  # re-summed in the makespan's order so that lb <= makespan in floats too
    for s in range(nseg):
        total_lb += seg_lb[s]
        b = seg_ptr[s]
        e = seg_ptr[s + 1]
        for i in range(b, e):
            starts[i] += offset
        offset += seg_ub[s]
        if seg_ub[s] - seg_lb[s] > _REL_EQ * seg_ub[s]:
            optimal = False
    return offset, total_lb, optimal


@njit(cache=True, nogil=True)
def _status(makespan, lower_bound, optimal, gap):
    if optimal:
        return STATUS_OPTIMAL
    if makespan - lower_bound <= gap * makespan:
        return STATUS_CERTIFIED
    return STATUS_LIMIT


@njit(cache=True, nogil=True)
def _solve_range(kind, single, intra, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr,
                 pred_idx, succ_ptr, succ_idx, ntc, nvc, gap, exact_max, node_limit, mode_rounds,
                 open_nodes, makespan, lower_bound, status, first, stop, table):
    """``_solve`` for architectures ``first`` .. ``stop - 1`` (columns of ``single``/``intra``,
    rows already in segment order). Architectures lacking cores of a needed type are
    infeasible. ``table``: ``_bnb_table(len(kind), _BNB_TABLE_MAX_BUCKETS)``, one per thread (reused: the pages
    it touches are faulted in once). Releases the GIL: the caller runs disjoint ranges on
    threads."""
    n = kind.shape[0]
    need_tc = False
    need_vc = False
    for i in range(n):
        if kind[i] == KIND_GEMM or kind[i] == KIND_FUSED:
            need_tc = True
        if kind[i] == KIND_VECTOR or kind[i] == KIND_FUSED:
            need_vc = True
    nseg = seg_ptr.shape[0] - 1
    ds = np.empty(n)
    da = np.empty(n)
    starts = np.empty(n)
    modes = np.empty(n, np.int8)
    seg_ub = np.empty(nseg)
    seg_lb = np.empty(nseg)
    for a in range(first, stop):
        if (need_tc and ntc[a] < 1) or (need_vc and nvc[a] < 1):
            makespan[a] = np.inf
            lower_bound[a] = np.inf
            status[a] = STATUS_INFEASIBLE
            continue
        for i in range(n):
            ds[i] = single[i, a]
            da[i] = single[i, a] if kind[i] == KIND_COLLECTIVE else intra[i, a]
        ms, lb, opt = _solve(kind, ds, da, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr,
                             pred_idx, succ_ptr, succ_idx, ntc[a], nvc[a], gap, exact_max,
                             node_limit, mode_rounds, open_nodes, starts, modes, seg_ub, seg_lb,
                             table)
        makespan[a] = ms
        lower_bound[a] = lb
        status[a] = _status(ms, lb, opt, gap)


# ---------------------------------------------------------------------------
# Per-architecture layer bound from latencies alone (the search's pruning)
# ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _layer_lower_bounds_kernel(kind, pred_ptr, pred_idx, order, single, intra, num_tc, num_vc):
    """Lower bound on a layer's makespan per architecture, from operator latencies.

    Valid for the schedule model of the schedule model (module docstring): every operator takes at least
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
