# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Resource profiles of the list scheduler and the branch and bound (docs/design.md §2.5).

The problem is a multi-mode resource-constrained project scheduling problem with
three renewable resources: tensor cores (capacity num_tc), vector cores (num_vc)
and the chip's link (capacity 1). Demands per operator and mode (``_cdefs.demand``):

    GEMM one core (1, 0, 0)     vector one core (0, 1, 0)     fused one core (1, 1, 0)
    collective (0, 0, 1)        any compute intra-op (num_tc, num_vc, 0)

An intra-op operator holds *every* core of both types, which is exactly "holds all
cores of its type(s) and overlaps no other compute operator".

A profile is piecewise-constant usage over [pt[k], pt[k+1]) (arrays of capacity
2 m + 2 for m operators); its last piece is idle.
"""
from libc.stdint cimport int64_t


cdef double earliest(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                     double est, double dur, int64_t dtc, int64_t dvc, int64_t dlk, int64_t ntc,
                     int64_t nvc) noexcept nogil:
    """Earliest t >= est where the demand fits the profile throughout [t, t + dur)."""
    cdef double t, end
    cdef int64_t k, j
    cdef bint fits
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


cdef int64_t split(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                   double x) noexcept nogil:
    """Make ``x`` a breakpoint of the profile; returns the new number of pieces."""
    cdef int64_t k = npieces - 1
    cdef int64_t j
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


cdef int64_t insert(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                    double start, double dur, int64_t dtc, int64_t dvc, int64_t dlk) noexcept nogil:
    """Add a demand over [start, start + dur) to the profile; returns the number of pieces."""
    cdef double end
    cdef int64_t j
    if dur <= 0.0:
        return npieces
    end = start + dur
    npieces = split(pt, ptc, pvc, plk, npieces, start)
    npieces = split(pt, ptc, pvc, plk, npieces, end)
    for j in range(npieces):
        if pt[j] >= start and pt[j] < end:
            ptc[j] += dtc
            pvc[j] += dvc
            plk[j] += dlk
    return npieces
