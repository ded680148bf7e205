# cython: language_level=3
from libc.stdint cimport int64_t

cdef void fastest(int64_t m, const int64_t* kind, const double* ds, const double* da,
                  double* out) noexcept nogil
cdef void tails(int64_t m, const double* dmin, const int64_t* succ_ptr, const int64_t* succ_idx,
                double* tail) noexcept nogil
cdef double energy(int64_t m, const int64_t* kind, const double* ds, const double* da, double lam,
                   int64_t ntc, int64_t nvc) noexcept nogil
cdef double energy_bound(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         int64_t ntc, int64_t nvc) noexcept nogil
cdef double chain_energy(int64_t m, const int64_t* kind, const double* ds, const double* da,
                         const int64_t* pred_ptr, const int64_t* pred_idx, double lam, int64_t ntc,
                         int64_t nvc, int64_t cap_tc, int64_t cap_vc,
                         const int64_t* opinfo) noexcept nogil
cdef void energies(int64_t m, const int64_t* kind, const double* ds, const double* da, double lam,
                   int64_t cap_tc, int64_t cap_vc, double* out) noexcept nogil
