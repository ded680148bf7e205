# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Sets the C globals declared in ``_cdefs.pxd`` from their canonical Python definitions,
and the one allocation helper of the compiled schedule modules."""
from libc.stdio cimport fprintf, stderr
from libc.stdlib cimport abort, malloc

from ..graph import KIND_COLLECTIVE as _COLLECTIVE
from ..graph import KIND_FUSED as _FUSED
from ..graph import KIND_GEMM as _GEMM
from ..graph import KIND_VECTOR as _VECTOR
from ._status import _REL_EQ

KIND_GEMM = _GEMM
KIND_VECTOR = _VECTOR
KIND_FUSED = _FUSED
KIND_COLLECTIVE = _COLLECTIVE
REL_EQ = _REL_EQ


cdef void* xalloc(size_t n_bytes) noexcept nogil:
    """``malloc`` for the kernels' scratch (they run without the GIL, so they cannot make
    numpy arrays). Scratch is a few kilobytes for a layer's part; running out of memory
    there leaves nothing sensible to return, so the process stops with a message rather
    than compute on a null pointer. Never returns NULL (a request of 0 bytes gets 1)."""
    cdef void* p = malloc(n_bytes if n_bytes > 0 else 1)
    if p == NULL:
        fprintf(stderr, b"phaze.schedule: out of memory (%zu bytes of kernel scratch)\n", n_bytes)
        abort()
    return p
