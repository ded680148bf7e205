# cython: language_level=3
"""C-level names shared by the compiled schedule modules (``_cdefs.pyx`` sets them).

The operator kinds are canonical in ``phaze.graph`` and the optimality tolerance in
``_status``: ``_cdefs`` copies them into C globals once, at import, so that every
kernel compares against the same values without a Python lookup. The helpers below are
``inline`` here (not in a .pyx) because they sit in the innermost loops of several
modules: a call across extension modules would go through a function pointer.
"""
from libc.stdint cimport int64_t

cdef int64_t KIND_GEMM
cdef int64_t KIND_VECTOR
cdef int64_t KIND_FUSED
cdef int64_t KIND_COLLECTIVE
cdef double REL_EQ

cdef void* xalloc(size_t n_bytes) noexcept nogil


cdef inline void demand(int64_t kind, int64_t mode, int64_t ntc, int64_t nvc,
                        int64_t* dtc, int64_t* dvc, int64_t* dlk) noexcept nogil:
    """(tensor cores, vector cores, link) held by an operator of ``kind`` in ``mode``."""
    if kind == KIND_COLLECTIVE:
        dtc[0] = 0
        dvc[0] = 0
        dlk[0] = 1
    elif mode == 1:
        dtc[0] = ntc
        dvc[0] = nvc
        dlk[0] = 0
    elif kind == KIND_GEMM:
        dtc[0] = 1
        dvc[0] = 0
        dlk[0] = 0
    elif kind == KIND_VECTOR:
        dtc[0] = 0
        dvc[0] = 1
        dlk[0] = 0
    else:
        dtc[0] = 1
        dvc[0] = 1
        dlk[0] = 0


cdef inline void weights(double lam, int64_t cap_tc, int64_t cap_vc, double* wt,
                         double* wv) noexcept nogil:
    """Energy weights (per TC, per VC) of one-core operators: lam/cap_tc and
    (1 - lam)/cap_vc, 0 for a type with no cores."""
    wt[0] = lam / cap_tc if cap_tc > 0 else 0.0
    wv[0] = (1.0 - lam) / cap_vc if cap_vc > 0 else 0.0


cdef inline double core_weight(int64_t k, double wt, double wv) noexcept nogil:
    """Energy weight of a one-core compute operator of kind ``k`` (0 for a collective)."""
    if k == KIND_GEMM:
        return wt
    if k == KIND_VECTOR:
        return wv
    if k == KIND_FUSED:
        return wt + wv
    return 0.0
