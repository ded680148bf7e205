"""The search's per-architecture layer bound as phaze ran it in numba before the schedule
kernels were compiled ahead of time (``_layer_lower_bounds_kernel`` of
phaze/schedule/_bounds.py, commit 3c55e1d, with the ``@njit`` decorator gone), run as plain
Python: the slow reference tests/test_search.py holds the Cython kernel
(phaze/schedule/_bounds.pyx, behind ``phaze.schedule.layer_lower_bounds``) to, bit for bit."""
import numpy as np

from phaze.graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR


def _layer_lower_bounds_kernel(kind, pred_ptr, pred_idx, order, single, intra, num_tc, num_vc):
    """Lower bound on a layer's makespan per architecture, from operator latencies.

    Valid for the schedule model of docs/design.md §2.5: every operator takes at least
    min(single, intra) and waits for its predecessors (critical path); tensor-core
    busy time is single (one core) or num_tc·intra (all cores), so the makespan is at
    least the total of the cheaper of the two over num_tc (same for vector cores);
    collectives share one link, one at a time.
    """
    n_ops, n_archs = single.shape
    out = np.zeros(n_archs)
    finish = np.zeros(n_ops)
    for a in range(n_archs):
        tc_work = 0.0
        vc_work = 0.0
        link = 0.0
        for j in range(n_ops):
            i = order[j]
            start = 0.0
            for p in range(pred_ptr[i], pred_ptr[i + 1]):
                f = finish[pred_idx[p]]
                if f > start:
                    start = f
            dur = min(single[i, a], intra[i, a])
            finish[i] = start + dur
            k = kind[i]
            if k == KIND_GEMM or k == KIND_FUSED:
                tc_work += min(single[i, a], num_tc[a] * intra[i, a])
            if k == KIND_VECTOR or k == KIND_FUSED:
                vc_work += min(single[i, a], num_vc[a] * intra[i, a])
            if k == KIND_COLLECTIVE:
                link += dur
        cp = 0.0
        for i in range(n_ops):
            if finish[i] > cp:
                cp = finish[i]
        best = cp
        if tc_work / num_tc[a] > best:
            best = tc_work / num_tc[a]
        if vc_work / num_vc[a] > best:
            best = vc_work / num_vc[a]
        if link > best:
            best = link
        out[a] = best
    return out


def layer_lower_bounds(op_graph, single, intra, num_tc, num_vc):
    """``phaze.schedule.layer_lower_bounds`` on :func:`_layer_lower_bounds_kernel`."""
    return _layer_lower_bounds_kernel(
        np.asarray(op_graph.kind, dtype=np.int64), np.asarray(op_graph.pred_ptr, dtype=np.int64),
        np.asarray(op_graph.pred_idx, dtype=np.int64), np.asarray(op_graph.order, dtype=np.int64),
        np.asarray(single, dtype=np.float64), np.asarray(intra, dtype=np.float64),
        np.asarray(num_tc, dtype=np.float64), np.asarray(num_vc, dtype=np.float64))
