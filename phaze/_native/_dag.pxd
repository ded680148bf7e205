# Declarations of the DAG kernels, for other Cython modules to cimport.

cdef Py_ssize_t topo_order_core(const int[::1] pred_ptr, const int[::1] pred_idx,
                                int[::1] order, int[::1] indegree,
                                int[::1] succ_ptr, int[::1] succ_idx) noexcept nogil
