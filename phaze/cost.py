"""Operator latencies on candidate accelerators (docs/design.md §2.4).

:func:`op_latencies` returns, for every operator of an :class:`~phaze.graph.OpGraph`
and every architecture row, two latencies in seconds: ``single`` (the operator on
one core of its type) and ``intra`` (intra-op parallel over all cores of its type).
:func:`roofline_bounds` gives the matching lower bounds that no latency may beat.

The model
---------
Units: knobs are converted to SI first (buffer MiB·2²⁰ bytes, HBM GB/s·10⁹ bytes/s,
GHz·10⁹ Hz). HBM bandwidth belongs to the chip: a single-core operator and an
intra-op one both see all of it, so an intra-op GEMM on many cores ends up
bandwidth-bound. Compute and HBM traffic overlap (double-buffered tiles), so every
compute operator takes ``max(compute time, HBM bytes / HBM bandwidth)``.

**GEMM / batched GEMM** (kind 0; ``dims`` = batch, M, K, N; attention BMMs carry
their head×microbatch batch). *Dataflow*: weight-stationary systolic arrays, as in
the TPU. ``tc_depth`` rows span the reduction (K) dimension and ``tc_width`` columns
the output (N) dimension. A *pass* loads one tc_depth×tc_width tile of B (``tc_depth``
cycles, double-buffered behind the previous pass) and streams rows of A through it,
so a pass of ``m`` rows costs ``max(m, tc_depth)`` cycles; consecutive passes pipeline,
so the fill and drain of the array (``tc_depth + tc_width − 1`` cycles) is paid once
per core. *Partial edges*: a pass on an edge tile costs as much as a full one
(``⌈K/d⌉·⌈N/w⌉`` passes per batch element). *Intra-op*: passes are dealt out evenly
to the ``num_tc`` arrays (⌈passes / num_tc⌉ per array); the rows may be cut into
s = 1, 2, 4, … chunks (up to the first power of two ≥ min(num_tc, M); each chunk
padded to ⌈M/s⌉ rows) to make enough passes, and the best s is kept. Doubling
num_tc only adds candidates and never lengthens one, so more arrays are never slower.
*Buffer tiling* (HBM traffic, e = ``bytes_per_element`` of the graph, fp32
accumulators = ``_config.COST_ACCUMULATOR_BYTES``): the least traffic of three
loop orders, each with double-buffered K-strips of depth ``min(tc_depth, K)``:
(a) output-stationary C tile tm×tn (A read ⌈N/tn⌉ times, B ⌈M/tm⌉ times; M cut into
1, 2, 4, … row tiles, the widest tn that fits for each); (b) a tm×K block of A
resident (A read once, B ⌈M/tm⌉ times); (c) a K×tn block of B resident (B read
once, A ⌈N/tn⌉ times); C is written once. A larger buffer only enlarges the
feasible tiles, so it never adds traffic. Bytes the graph says the operator moves
beyond its GEMM operands (``bytes_in + bytes_out`` above e·batch·(MK+KN+MN), e.g. a
bias or residual read by a fused epilogue) are added once. *Buffer share*: the
buffer is shared by the cores; an intra-op GEMM tiles the whole buffer and its
arrays work on the shared tiles; a single-core GEMM may use the fraction
``_config.COST_SINGLE_CORE_BUFFER_FRACTION`` (1.0: the whole buffer, as if concurrent
operators take turns in it), which never depends on num_tc or num_vc. Single-core
latencies therefore depend only on (tc_width, tc_depth, buffer_mib, clock, HBM
bandwidth); they are computed once per distinct (w, d, buffer) and broadcast.

**Vector operators** (kind 1): ``⌈elements / lanes⌉ · cycles_per_element / clock``
with lanes = ``vc_width`` (single) or ``vc_width · num_vc`` (intra-op), never below
``(bytes_in + bytes_out) / HBM bandwidth``. ``cycles_per_element`` comes from the
operator graph (``phaze.graph`` keeps the one table of cycles per element per
operator kind, with its reasoning).

**Fused GEMM + vector epilogue** (kind 2): the epilogue consumes each output tile as
the arrays drain it, so GEMM, epilogue and HBM traffic proceed as a pipeline and the
slowest stage sets the latency: ``max(GEMM compute, epilogue compute, traffic)``,
one TC + one VC (single) or all TCs + all VCs (intra-op).

**Collectives** (kind 3): ring all-reduce over n = ``group_size`` devices,
``2(n−1)/n · comm_bytes / bandwidth``, with ``link_gb_per_s`` when n ≤ node_size
(the group sits inside one node) and ``net_gb_per_s`` otherwise; 0 when n = 1. The
same value is reported for single and intra (the chip's link does the work).
"""
from __future__ import annotations

import threading
import zlib
from collections import OrderedDict

import numpy as np

from . import _config
from .arch import ARCH_DTYPE
from .arch import validate as _validate_archs
from .graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, OpGraph

__all__ = ["op_latencies", "roofline_bounds"]

_MIB = float(2 ** 20)


def _check_graph(op_graph) -> OpGraph:
    if not isinstance(op_graph, OpGraph):
        raise ValueError(f"op_graph must be a phaze.graph.OpGraph, got {type(op_graph).__name__}")
    if not isinstance(op_graph.bytes_per_element, (int, np.integer)) or op_graph.bytes_per_element < 1:
        raise ValueError(f"op_graph.bytes_per_element must be a positive integer, "
                         f"got {op_graph.bytes_per_element!r}")
    return op_graph


def _si(archs):
    """The architecture columns the kernels need, in SI units, as contiguous arrays."""
    return dict(
        num_tc=np.ascontiguousarray(archs["num_tc"]),
        tc_width=np.ascontiguousarray(archs["tc_width"]),
        tc_depth=np.ascontiguousarray(archs["tc_depth"]),
        num_vc=np.ascontiguousarray(archs["num_vc"]),
        vc_width=np.ascontiguousarray(archs["vc_width"]),
        buffer_bytes=archs["buffer_mib"] * _MIB,
        clock_hz=archs["clock_ghz"] * 1e9,
        hbm_bytes_per_s=archs["hbm_gb_per_s"] * 1e9,
        link_bytes_per_s=archs["link_gb_per_s"] * 1e9,
        net_bytes_per_s=archs["net_gb_per_s"] * 1e9,
        node_size=np.ascontiguousarray(archs["node_size"]),
    )


def _distinct(*columns):
    """Distinct rows of the given equal-length columns: (list of unique columns, index of each row).

    Each column is coded by its own 1-D ``np.unique`` and the codes are combined in mixed
    radix, which is an order of magnitude faster than ``np.unique(axis=0)``.
    """
    code = np.zeros(np.asarray(columns[0]).shape[0], dtype=np.int64)
    values = []
    for c in columns:
        vals, inv = np.unique(np.asarray(c, dtype=np.float64), return_inverse=True)
        values.append(vals)
        code = code * vals.shape[0] + inv.reshape(-1)
    uniq_code, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    uniq = [np.ascontiguousarray(np.asarray(c, dtype=np.float64)[first]) for c in columns]
    return uniq, np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)


_PREPARED = OrderedDict()  # (address, rows, crc32 of the bytes) -> kernel inputs
_PREPARED_LOCK = threading.Lock()  # the search may call from several threads (nogil kernels)


def _prepared(archs):
    """Validated, SI-converted and deduplicated kernel inputs for ``archs``, memoised.

    The search calls op_latencies for dozens of graphs on the same chunk of
    architectures; validation and deduplication cost more than a small graph's
    kernel, so they are kept for the last few chunks. The key includes a CRC of the
    rows' bytes, so a chunk changed in place is prepared afresh.
    """
    key = None
    if (isinstance(archs, np.ndarray) and archs.dtype == ARCH_DTYPE and archs.ndim == 1
            and archs.shape[0] > 0 and archs.flags.c_contiguous):
        key = (archs.__array_interface__["data"][0], archs.shape[0],
               zlib.crc32(memoryview(archs).cast("B")))
        with _PREPARED_LOCK:
            hit = _PREPARED.get(key)
            if hit is not None:
                _PREPARED.move_to_end(key)
                return hit
    archs = _validate_archs(archs)
    col = _si(archs)
    (shape_w, shape_d, shape_cap), shape_of_arch = _distinct(col["tc_width"], col["tc_depth"],
                                                             col["buffer_bytes"])
    (split_w, split_d, split_cores), split_of_arch = _distinct(col["tc_width"], col["tc_depth"],
                                                               col["num_tc"])
    prep = dict(
        n_archs=archs.shape[0], shape_w=shape_w, shape_d=shape_d, shape_cap=shape_cap,
        shape_of_arch=shape_of_arch, split_w=split_w, split_d=split_d, split_cores=split_cores,
        split_of_arch=split_of_arch,
        num_vc=col["num_vc"].astype(np.float64), vc_width=col["vc_width"].astype(np.float64),
        clock_hz=col["clock_hz"], hbm_bytes_per_s=col["hbm_bytes_per_s"],
        link_bytes_per_s=col["link_bytes_per_s"], net_bytes_per_s=col["net_bytes_per_s"],
        node_size=col["node_size"].astype(np.float64))
    for value in prep.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    if key is not None:
        with _PREPARED_LOCK:
            _PREPARED[key] = prep
            while len(_PREPARED) > _config.COST_PREPARED_CACHE_SIZE:
                _PREPARED.popitem(last=False)
    return prep


def op_latencies(op_graph: OpGraph, archs):
    """Latency of every operator on every architecture, seconds.

    Parameters
    ----------
    op_graph : OpGraph
        Operators of one layer pass (``phaze.graph``).
    archs : structured array
        Architecture rows (``phaze.arch.ARCH_DTYPE``; a preset row, ``ArchSpace.configs``
        or ``make_archs(...)``); a zero, negative or NaN knob raises ``ValueError`` naming it.

    Returns
    -------
    (single, intra) : two C-contiguous float64 arrays of shape (n_ops, n_archs)
        ``single``: each operator on one core of its type (a fused one on one TC and
        one VC); ``intra``: intra-op parallel over all cores of its type(s). For
        collectives both hold the ring all-reduce time. See the module docstring for
        the model.
    """
    op_graph = _check_graph(op_graph)
    prep = _prepared(archs)
    from . import _cost_kernels as kern

    n_ops, n_archs = op_graph.n_ops, prep["n_archs"]
    single = np.empty((n_ops, n_archs), dtype=np.float64)
    intra = np.empty((n_ops, n_archs), dtype=np.float64)
    bytes_moved = (op_graph.bytes_in + op_graph.bytes_out).astype(np.float64)
    kern._op_latencies(
        op_graph.kind.astype(np.int64), op_graph.dims, op_graph.cycles_per_element,
        op_graph.elements, bytes_moved, op_graph.comm_bytes, op_graph.group_size.astype(np.int64),
        float(op_graph.bytes_per_element), float(_config.COST_ACCUMULATOR_BYTES),
        float(_config.COST_SINGLE_CORE_BUFFER_FRACTION),
        prep["shape_w"], prep["shape_d"], prep["shape_cap"], prep["shape_of_arch"],
        prep["split_w"], prep["split_d"], prep["split_cores"], prep["split_of_arch"],
        prep["num_vc"], prep["vc_width"], prep["clock_hz"], prep["hbm_bytes_per_s"],
        prep["link_bytes_per_s"], prep["net_bytes_per_s"], prep["node_size"], single, intra)
    return single, intra


def roofline_bounds(op_graph: OpGraph, archs):
    """Lower bounds (single, intra), seconds, shape (n_ops, n_archs), that no latency beats.

    Per operator: ``max(work / peak of the cores used, compulsory bytes / HBM bandwidth)``,
    where work is 2·batch·M·K·N FLOPs on tensor cores (peak w·d·2·clock per core) and/or
    elements·cycles_per_element lane-cycles on vector cores, and compulsory bytes are
    the larger of ``bytes_in + bytes_out`` and e·batch·(MK + KN + MN). Collectives: the
    ring all-reduce time itself. Cheap (numpy only).
    """
    op_graph = _check_graph(op_graph)
    archs = _validate_archs(archs)
    col = _si(archs)
    kind = op_graph.kind[:, None]
    d = op_graph.dims.astype(np.float64)
    flops = (2.0 * d[:, 0] * d[:, 1] * d[:, 2] * d[:, 3])[:, None]
    e = float(op_graph.bytes_per_element)
    gemm_bytes = e * d[:, 0] * (d[:, 1] * d[:, 2] + d[:, 2] * d[:, 3] + d[:, 1] * d[:, 3])
    moved = np.maximum((op_graph.bytes_in + op_graph.bytes_out).astype(np.float64), gemm_bytes)
    traffic = moved[:, None] / col["hbm_bytes_per_s"][None, :]
    hz = col["clock_hz"][None, :]
    core_peak = (col["tc_width"] * col["tc_depth"] * 2.0)[None, :] * hz
    lane_work = (op_graph.elements * op_graph.cycles_per_element)[:, None]
    lanes = col["vc_width"].astype(np.float64)[None, :]
    has_gemm = (kind == KIND_GEMM) | (kind == KIND_FUSED)
    has_vec = (kind == KIND_VECTOR) | (kind == KIND_FUSED)
    bounds = []
    for tcs, vcs in ((1.0, 1.0), (col["num_tc"][None, :], col["num_vc"][None, :])):
        t = traffic.copy()
        t = np.maximum(t, np.where(has_gemm, flops / (core_peak * tcs), 0.0))
        t = np.maximum(t, np.where(has_vec, lane_work / (lanes * vcs * hz), 0.0))
        bounds.append(t)
    g = op_graph.group_size.astype(np.float64)[:, None]
    bw = np.where(g <= col["node_size"][None, :], col["link_bytes_per_s"][None, :],
                  col["net_bytes_per_s"][None, :])
    ring = np.where(g > 1, 2.0 * (g - 1.0) / g * op_graph.comm_bytes[:, None] / bw, 0.0)
    is_coll = kind == KIND_COLLECTIVE
    return tuple(np.ascontiguousarray(np.where(is_coll, ring, t)) for t in bounds)
