# cython: language_level=3
from libc.stdint cimport int64_t, int8_t, uint8_t

cdef double list_schedule(int64_t m, const int64_t* kind, const double* ds, const double* da,
                          const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                          const int64_t* succ_idx, const uint8_t* reach, int64_t rs, int64_t ntc,
                          int64_t nvc, double target, double* starts, int8_t* modes,
                          int64_t max_passes) noexcept nogil
cdef double mode_search(int64_t m, const int64_t* kind, const double* ds, const double* da,
                        const int64_t* pred_ptr, const int64_t* succ_ptr, const int64_t* succ_idx,
                        int64_t ntc, int64_t nvc, double best, double target, double* starts,
                        int8_t* modes, int64_t rounds) noexcept nogil
