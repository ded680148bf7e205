# cython: language_level=3
from libc.stdint cimport int64_t, int8_t

cdef enum:
    BNB_TABLE_WAYS = 16
    BNB_TABLE_MIN_BUCKETS = 2048
    BNB_TABLE_MAX_BUCKETS = 32768

cdef struct BnbTable:
    # the dominance table (``_bnb_table``): rows x ways entries, ``width`` operators each
    int64_t* key
    double* last
    double* cmax
    double* fin
    int8_t* mode
    int64_t* next
    int64_t rows
    int64_t width

cdef double cert_level(double ub, double gap, double slack) noexcept nogil
cdef bint bnb_search(int64_t m, const int64_t* kind, const double* ds, const double* da,
                     const int64_t* pred_ptr, const int64_t* pred_idx, const int64_t* succ_ptr,
                     const int64_t* succ_idx, int64_t ntc, int64_t nvc, int64_t width_tc,
                     int64_t width_vc, const double* head_in, const double* tail_in, double* ub,
                     double* thr, double gap, int64_t node_limit, double* starts, int8_t* modes,
                     BnbTable* table) noexcept nogil
cdef BnbTable as_table(tuple table) except *
cdef void table_alloc(BnbTable* tb, int64_t n_ops) noexcept nogil
cdef void table_free(BnbTable* tb) noexcept nogil
