# cython: language_level=3
"""Topological order of an operator DAG stored as CSR predecessor lists.

Operator graphs (``phaze.graph.OpGraph``) and layer chains are validated
through this kernel: it orders them, or reports that they contain a cycle.
"""
import numpy as np

cdef Py_ssize_t topo_order_core(const int[::1] pred_ptr, const int[::1] pred_idx,
                                int[::1] order, int[::1] indegree,
                                int[::1] succ_ptr, int[::1] succ_idx) noexcept nogil:
    """Kahn's algorithm with a FIFO queue of ready nodes.

    Writes a topological order into ``order`` and returns how many nodes it
    ordered; fewer than n means the rest lie on or behind a cycle.
    ``succ_ptr`` (n+1) and ``succ_idx`` (n_edges) are scratch for the successor
    lists; ``indegree`` (n) is scratch too.
    """
    cdef Py_ssize_t n = pred_ptr.shape[0] - 1
    cdef Py_ssize_t i, k, e, head = 0, tail = 0
    cdef int p, s
    for i in range(n + 1):
        succ_ptr[i] = 0
    for i in range(n):
        indegree[i] = pred_ptr[i + 1] - pred_ptr[i]
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            succ_ptr[pred_idx[k] + 1] += 1
    for i in range(n):
        succ_ptr[i + 1] += succ_ptr[i]
    # Fill the successor lists, using `order` as a per-node write cursor for now.
    for i in range(n):
        order[i] = succ_ptr[i]
    for i in range(n):
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[k]
            succ_idx[order[p]] = <int>i
            order[p] += 1
    for i in range(n):
        if indegree[i] == 0:
            order[tail] = <int>i
            tail += 1
    while head < tail:
        p = order[head]
        head += 1
        for e in range(succ_ptr[p], succ_ptr[p + 1]):
            s = succ_idx[e]
            indegree[s] -= 1
            if indegree[s] == 0:
                order[tail] = s
                tail += 1
    return tail


def topological_order(pred_ptr, pred_idx):
    """Return (order, n_ordered): a topological order of the CSR predecessor graph.

    ``pred_ptr`` int32 (n+1,), ``pred_idx`` int32 (n_edges,), indices in [0, n).
    When ``n_ordered < n`` the graph has a cycle and ``order[n_ordered:]`` is undefined.
    Index ranges must be checked by the caller.
    """
    cdef const int[::1] ptr = np.ascontiguousarray(pred_ptr, dtype=np.int32)
    cdef const int[::1] idx = np.ascontiguousarray(pred_idx, dtype=np.int32)
    cdef Py_ssize_t n = ptr.shape[0] - 1
    order = np.zeros(max(n, 0), dtype=np.int32)
    indegree = np.zeros(max(n, 0), dtype=np.int32)
    succ_ptr = np.zeros(max(n, 0) + 1, dtype=np.int32)
    succ_idx = np.zeros(idx.shape[0], dtype=np.int32)
    cdef int[::1] o = order, deg = indegree, sp = succ_ptr, si = succ_idx
    cdef Py_ssize_t done
    if n <= 0:
        return order, 0
    with nogil:
        done = topo_order_core(ptr, idx, o, deg, sp, si)
    return order, int(done)
