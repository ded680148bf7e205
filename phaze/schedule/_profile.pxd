# cython: language_level=3
from libc.stdint cimport int64_t

cdef double earliest(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                     double est, double dur, int64_t dtc, int64_t dvc, int64_t dlk, int64_t ntc,
                     int64_t nvc) noexcept nogil
cdef int64_t split(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                   double x) noexcept nogil
cdef int64_t insert(double* pt, int64_t* ptc, int64_t* pvc, int64_t* plk, int64_t npieces,
                    double start, double dur, int64_t dtc, int64_t dvc, int64_t dlk) noexcept nogil
