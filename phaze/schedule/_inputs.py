"""The checks on what ``phaze.schedule``'s entry points are given (docs/design.md §2.5 and
§4): the operator graph, per-operator latencies in seconds, core counts and the gap.
Shared by the driver and the validator (``_check``), which then need not import each other.
"""
import numpy as np

from .._validate import finite_nonneg_array, nonneg_float, nonneg_int
from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, OpGraph

#: Largest total latency (seconds, single plus intra over all operators) a schedule
#: accepts. The bounds add and scale latencies; a total near the float maximum would
#: overflow to inf and an inf makespan and bound would read as "optimal". 1e300 s is
#: beyond anything physical and leaves the arithmetic ample headroom.
MAX_TOTAL_LATENCY_S = 1e300


def check_graph(op_graph) -> None:
    """ValueError unless ``op_graph`` is a :class:`phaze.graph.OpGraph`."""
    if not isinstance(op_graph, OpGraph):
        raise ValueError(f"op_graph must be a phaze.graph.OpGraph, got {type(op_graph).__name__}")


def latency_vector(name, values, n) -> np.ndarray:
    """``values`` as a contiguous float64 (n,) array of finite non-negative seconds
    (shape (n,) or (n, 1)); ValueError naming ``name`` otherwise."""
    arr = finite_nonneg_array(name, values)
    if arr.shape not in ((n,), (n, 1)):
        raise ValueError(f"{name} must have shape ({n},) (one latency per operator), got {arr.shape}")
    return np.ascontiguousarray(arr.reshape(n))


def check_total(single, intra, axis=None) -> None:
    """ValueError unless the latencies' total (per architecture with ``axis=0``) is at most
    ``MAX_TOTAL_LATENCY_S``."""
    with np.errstate(over="ignore"):
        total = np.sum(single, axis=axis) + np.sum(intra, axis=axis)
    if not np.all(total <= MAX_TOTAL_LATENCY_S):
        raise ValueError(f"single and intra must sum to at most {MAX_TOTAL_LATENCY_S:g} seconds "
                         f"(per architecture), got {float(np.max(total)):g}: latencies that "
                         f"large overflow the schedule's arithmetic")


def layer_inputs(op_graph, single, intra, num_tc, num_vc):
    """One layer on one chip, checked: ``(single, intra, num_tc, num_vc)`` with the
    latencies as float64 (n_ops,) seconds (a collective's intra latency set to its single
    one: it has one mode) and the core counts as ints, each >= 1 where the graph has
    operators of that core type."""
    check_graph(op_graph)
    n = op_graph.n_ops
    ds = latency_vector("single", single, n)
    da = latency_vector("intra", intra, n)
    check_total(ds, da)
    ntc = nonneg_int("num_tc", num_tc)
    nvc = nonneg_int("num_vc", num_vc)
    kind = op_graph.kind
    if ntc == 0 and np.any((kind == KIND_GEMM) | (kind == KIND_FUSED)):
        raise ValueError("num_tc must be >= 1 because the graph has GEMM or fused operators")
    if nvc == 0 and np.any((kind == KIND_VECTOR) | (kind == KIND_FUSED)):
        raise ValueError("num_vc must be >= 1 because the graph has vector or fused operators")
    # a collective has one mode: its intra latency is its single latency
    da = np.where(kind == KIND_COLLECTIVE, ds, da)
    return ds, da, ntc, nvc


def gap_arg(gap) -> float:
    """``gap`` as a float in [0, 1); ValueError naming gap otherwise."""
    g = nonneg_float("gap", gap)
    if g >= 1.0:
        raise ValueError(f"gap must be in [0, 1), got {gap!r}")
    return g
