# cython: language_level=3
from libc.stdint cimport int64_t, uint8_t

cdef double segment_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                          const int64_t* succ_ptr, const int64_t* succ_idx, int64_t ntc, int64_t nvc,
                          int64_t width_tc, int64_t width_vc) noexcept nogil
cdef double strong_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                         const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                         int64_t nvc, int64_t width_tc, int64_t width_vc, const int64_t* opinfo,
                         double* head, double* tail) noexcept nogil
cdef double forced_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                         const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                         int64_t nvc, int64_t width_tc, int64_t width_vc, const int64_t* opinfo,
                         double ub, double lb, double target, double* head,
                         double* tail) noexcept nogil
cdef bint energetic_infeasible(int64_t m, const int64_t* kind, const double* ds, const double* da,
                               const double* head, const double* tail, double makespan,
                               int64_t cap_tc, int64_t cap_vc) noexcept nogil
