"""Fastest durations, critical paths and chip energy: the quantities every bound of
``phaze.schedule`` builds on (docs/design.md §2.5).

Operators arrive as one *part* (segment) of a layer graph, numbered locally in a
topological order; predecessor and successor lists are CSR arrays whose pointers are
absolute positions into the shared index arrays (a part is a slice of the pointers).
Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR


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
