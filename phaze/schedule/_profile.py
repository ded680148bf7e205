"""Resource profiles of the list scheduler and the branch and bound (docs/design.md §2.5).

The problem is a multi-mode resource-constrained project scheduling problem with
three renewable resources: tensor cores (capacity num_tc), vector cores (num_vc)
and the chip's link (capacity 1). Demands per operator and mode:

    GEMM one core (1, 0, 0)     vector one core (0, 1, 0)     fused one core (1, 1, 0)
    collective (0, 0, 1)        any compute intra-op (num_tc, num_vc, 0)

An intra-op operator holds *every* core of both types, which is exactly "holds all
cores of its type(s) and overlaps no other compute operator".

A profile is piecewise-constant usage over [pt[k], pt[k+1]); its last piece is idle.
Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_GEMM, KIND_VECTOR


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
