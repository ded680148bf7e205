# cython: language_level=3
from libc.stdint cimport int64_t, uint8_t

cdef double path_window_bound(int64_t m, const int64_t* kind, const double* ds, const uint8_t* reach,
                              int64_t rs, const double* dmin, const double* ener, int64_t n_lam,
                              int64_t ener_rs) noexcept nogil
cdef double spine_window_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                               const uint8_t* reach, int64_t rs, const double* dmin, int64_t ntc,
                               int64_t nvc, bint vector_side, bint one_at_a_time) noexcept nogil
cdef double bottleneck_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                             const uint8_t* reach, int64_t rs, const double* dmin,
                             bint vector_side) noexcept nogil
cdef double hole_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                       const uint8_t* reach, int64_t rs, const double* lams, int64_t n_lams,
                       int64_t cap_tc, int64_t cap_vc) noexcept nogil
