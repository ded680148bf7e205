# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fastest durations, critical paths and chip energy: the quantities every bound of
``phaze.schedule`` builds on (docs/design.md §2.5).

Operators arrive as one *part* (segment) of a layer graph, ``m`` operators numbered
locally in a topological order; predecessor and successor lists are CSR arrays whose
pointers are absolute positions into the shared index arrays (a part is a slice of the
pointers). Kernels take C pointers (a part is an offset into the whole graph's arrays)
and run without the GIL; ``opinfo`` is (m, 3) row-major.
"""
from libc.stdint cimport int64_t
from libc.stdlib cimport free

from ._cdefs cimport KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, core_weight, weights, xalloc

import numpy as np


cdef void fastest(int64_t m, const int64_t* kind, const double* ds, const double* da,
                  double* out) noexcept nogil:
    """Duration of each operator at its faster mode (collectives have one mode)."""
    cdef int64_t i
    for i in range(m):
        out[i] = ds[i] if (kind[i] == KIND_COLLECTIVE or ds[i] <= da[i]) else da[i]


cdef void tails(int64_t m, const double* dmin, const int64_t* succ_ptr, const int64_t* succ_idx,
                double* tail) noexcept nogil:
    """Longest path from each operator (inclusive) to the end, durations ``dmin``."""
    cdef int64_t i, e
    cdef double best, v
    for i in range(m - 1, -1, -1):
        best = 0.0
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            v = tail[succ_idx[e]]
            if v > best:
                best = v
        tail[i] = dmin[i] + best


cdef double energy(int64_t m, const int64_t* kind, const double* ds, const double* da, double lam,
                   int64_t ntc, int64_t nvc) noexcept nogil:
    """Chip energy sum_i min_mode(weight x duration) with weight lam/ntc per TC, (1-lam)/nvc per VC.

    At any instant the running operators' weights sum to at most 1 (an intra-op one
    holds every core: weight 1), so the makespan is at least this sum."""
    cdef double wt, wv, e
    cdef double total = 0.0
    cdef int64_t i, k
    weights(lam, ntc, nvc, &wt, &wv)
    for i in range(m):
        k = kind[i]
        if k == KIND_COLLECTIVE:
            continue
        e = core_weight(k, wt, wv) * ds[i]
        if da[i] < e:
            e = da[i]
        total += e
    return total


cdef double energy_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         int64_t ntc, int64_t nvc) noexcept nogil:
    """max over lam in [0, 1] of ``energy`` (concave piecewise linear: check the breakpoints)."""
    cdef double best, v, s, a, lam, slope
    cdef int64_t i, k
    if ntc == 0:
        return energy(m, kind, ds, da, 0.0, ntc, nvc)
    if nvc == 0:
        return energy(m, kind, ds, da, 1.0, ntc, nvc)
    best = energy(m, kind, ds, da, 0.0, ntc, nvc)
    v = energy(m, kind, ds, da, 1.0, ntc, nvc)
    if v > best:
        best = v
    for i in range(m):
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
            v = energy(m, kind, ds, da, lam, ntc, nvc)
            if v > best:
                best = v
    return best


cdef double chain_energy(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, double lam, int64_t ntc,
                         int64_t nvc, int64_t cap_tc, int64_t cap_vc,
                         const int64_t* opinfo) noexcept nogil:
    """Chip-energy bound with one chain of operators weighted up.

    Base weights: lam/cap_tc per TC and (1-lam)/cap_vc per VC held by a one-core
    operator, 1 for an intra-op operator (it holds everything). A running set is an
    antichain, so it holds at most one operator of any chain; an operator i on the chain
    can be weighted ``1 - (most weight the operators unordered with it can hold)``:
    ``opinfo[i, 0]``/``[i, 1]`` are the widest antichains of TC/VC users unordered with
    i, ``opinfo[i, 2]`` is 1 for a collective that no compute operator can overlap.
    The running weight never exceeds 1, so the makespan is at least the total energy.
    The chain maximising the extra energy is a longest path (node weights >= 0)."""
    cdef double wt, wv, s, a, base, boosted, w, wb, gain, longest, v
    cdef double total = 0.0
    cdef double best_path = 0.0
    cdef int64_t i, k, e, uses_t, uses_v, kt, kv
    cdef double* path = <double*> xalloc(m * sizeof(double))
    weights(lam, cap_tc, cap_vc, &wt, &wv)
    for i in range(m):
        k = kind[i]
        s = ds[i]
        a = da[i]
        if k == KIND_COLLECTIVE:
            base = 0.0
            boosted = s if opinfo[3 * i + 2] == 1 else 0.0
        else:
            uses_t = 1 if (k == KIND_GEMM or k == KIND_FUSED) else 0
            uses_v = 1 if (k == KIND_VECTOR or k == KIND_FUSED) else 0
            w = uses_t * wt + uses_v * wv
            base = w * s
            if a < base:
                base = a
            kt = opinfo[3 * i]
            if kt > ntc - uses_t:
                kt = ntc - uses_t
            kv = opinfo[3 * i + 1]
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
    free(path)
    return total + best_path


cdef void energies(int64_t m, const int64_t* kind, const double* ds, const double* da, double lam,
                   int64_t cap_tc, int64_t cap_vc, double* out) noexcept nogil:
    """Per-operator chip energy min_mode(weight x duration) (see ``energy``)."""
    cdef double wt, wv, e
    cdef int64_t i, k
    weights(lam, cap_tc, cap_vc, &wt, &wv)
    for i in range(m):
        k = kind[i]
        if k == KIND_COLLECTIVE:
            out[i] = 0.0
            continue
        e = core_weight(k, wt, wv) * ds[i]
        out[i] = da[i] if da[i] < e else e


def _fastest(const int64_t[::1] kind, const double[::1] ds, const double[::1] da):
    """Duration of each operator at its faster mode (Python entry point, for tests)."""
    cdef int64_t m = kind.shape[0]
    out = np.empty(m)
    cdef double[::1] o = out
    if m:
        fastest(m, &kind[0], &ds[0], &da[0], &o[0])
    return out
