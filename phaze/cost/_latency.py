"""Operator latencies on candidate accelerators (docs/design.md §2.4).

:func:`op_latencies` returns, for every operator of an :class:`~phaze.graph.OpGraph`
and every architecture row, two latencies in seconds: ``single`` (the operator on
one core of its type) and ``intra`` (intra-op parallel over all cores of its type).
:func:`roofline_bounds` gives the matching lower bounds that no latency may beat.
:func:`p2p_seconds` prices a point-to-point transfer on either network tier.

Two models, selected by ``model=``: ``"study"`` (the default) is the original
study's ideal model below, unchanged; ``"calibrated"`` adds what a real chip loses
against it (see "The calibrated model" at the end), with parameters from
:mod:`phaze.arch.efficiency` chosen by ``efficiency=``. Both are one operator loop
(``_kernels._op_latencies``, compiled ahead of time from ``_kernels.pyx``: the first call
compiles nothing) chosen once from :data:`COST_MODELS`: the study's model is
the calibrated one with the identity parameters (:data:`IDENTITY`: every efficiency 1,
every latency 0) and without the tile rule, which gives its numbers bit for bit.

The model (``model="study"``)
-----------------------------
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

**On-chip bandwidth** (issue 28): a weight-stationary array consumes about w + d operands
per cycle for its w·d multiply-accumulates, all from the shared buffer: a GEMM's
buffer-to-array bytes are ``batch·(e·(K·N + M·K·⌈N/w⌉) + acc·M·N·(2⌈K/d⌉ − 1))`` (weights
once, A past every column block, partial sums written by every pass over K and read back by
all but the first; ``onchip_traffic_bytes`` in ``_kernels.pyx``), and it takes at least those
bytes over the buffer's delivery rate ``buffer_bytes_per_cycle × clock`` (a one-array GEMM:
its 1/num_tc share). The rate is unlimited unless given (``buffer_bytes_per_cycle=``), which
is the study's assumption: every latency is then exactly the study's. The fused attention
kernel keeps its tiles in the cores and has no such term; vector operators stream their HBM
bytes, which the HBM term already bounds.

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
The graph stores the other collectives in this form (``phaze.graph``): a
reduce-scatter, all-gather or expert-parallel all-to-all (``alltoall_*``, group ep)
with ``comm_bytes`` = half its bytes, so the price is their (n−1)/n·bytes/BW; the
ring-attention exchange (``ring_kv_exchange*``, group cp) with ``comm_bytes`` set so
that the price is its cp − 1 point-to-point chunks over BW.

**Datatype** (``OpGraph.dtype``; :mod:`phaze.precision`): bf16 and fp16 graphs are
priced alike. In an fp8 graph the operators flagged ``OpGraph.fp8`` (the linear layers'
GEMMs) read their A and B operands at 1 byte per element in the buffer tiling above (C
stays e bytes), and their array cycles run ``fp8_rate`` times faster (the chip's dense
FP8 rate over its 16-bit rate, ``phaze.arch.dtype_rates``; ``fp8_rate=`` of
:func:`op_latencies`) in both models; every other operator is priced as in bf16. With
``fp8_rate`` ≥ 1 an FP8 GEMM is never slower than the same GEMM in bf16.

The calibrated model (``model="calibrated"``)
---------------------------------------------
The same rules for every row; each rule is a pure function of the row's knobs and
its :class:`~phaze.arch.efficiency.Efficiency` parameters (``efficiency=``: a set's
name such as ``"a100-80g"``, an ``Efficiency``, an array with one set per row, or
``None`` for the ``"template"`` set of hypothetical chips). Every calibrated latency
is at least the study's (no rule makes an operator faster), and more cores, HBM
bandwidth or buffer still never make one slower.

*GEMM tile and wave quantisation.* The output is cut into tiles of
``tile_m × tile_n`` = (tile_m_mult·tc_width) × (tile_n_mult·tc_width) elements; a
partial edge tile costs a full one. Groups of c = min(cores_per_tile, cores) arrays
own one tile at a time (an SM's four tensor cores on a GPU), and the tiles are dealt
to the ⌊cores / c⌋ groups in waves, so the last, partial wave costs a full one
(``waves = ⌈tiles / groups⌉``; single: one array, one group). *K-depth pipelining*: a
tile's K loop runs ⌈K / tile_k⌉ steps of tile_k = tile_k_mult·tc_depth, plus
``k_stages − 1`` steps to fill and drain the load pipeline; a step costs
tile_m·tile_n·tile_k / (c·w·d) cycles. Compute time = max(the study's array cycles,
the tile rule's cycles) / (clock · ``tile_efficiency``), the sustained fraction of
peak inside a tile (an FP8 GEMM: / (clock · ``fp8_tile_efficiency`` · fp8 rate)); the
array model's quantisation and the tile rule's are both real limits, so the larger holds.

*The fused attention kernel* (the operators ``flash_attn`` and ``flash_attn.bwd``, found by
name: ``_records.FLASH_OPS``): its GEMM part runs at the measured fraction of the arrays'
peak of the whole kernel, ``flash_fwd_efficiency`` forward and ``flash_bwd_efficiency``
backward — compute time = the study's array cycles / (clock · that fraction), without the
tile rule, whose K loop would run over the head dimension the operator's K carries (the
kernel's own loop runs over key blocks; at head dim 128 the rule's K fill alone doubles an
H100's cycles). Its HBM traffic is the bytes the operator moves (Q, K, V, the output and
the log-sum-exp; the GEMM tiling rule would write the M × N scores, which a flash kernel
keeps on chip); its vector epilogue is priced as for any fused operator. A chip without a
measurement has the fractions equal to its ``tile_efficiency``. The fractions are of one
shape (head dimension 128, 16K tokens); at the operator's own (``OpGraph.flash_shape``:
head dimension, keys per query) the rate is multiplied by the kernel's measured speed there
over its speed at that shape (``phaze.arch.attention_shape_factor``, on the curve
``flash_kernel`` names; docs/fidelity-sources.md §1.6). (The study's model keeps
pricing it as a GEMM.)

*HBM*: every traffic time divides by ``hbm_efficiency`` × the HBM bandwidth, except
that of the unfused attention core's operators (``OpGraph.attention_core``: the batched
score and context GEMMs, the scale-mask-softmax and the attention dropout, forward and
backward), which divides by ``attention_hbm_efficiency`` × the bandwidth: those kernels
stream the b·a·s² score matrices at a rate measured for them as a whole
(``phaze.arch.presets``).

*Launch*: every compute operator (GEMM, vector, fused) costs ``launch_s`` more
(kernel launch and synchronisation gap; collectives carry their own latency).

*Collectives*: NCCL's ring α–β form. A ring all-reduce on n devices takes
``α + 2(n−1)/n · bytes / (η · bandwidth)`` with ``α = coll_latency_s +
(2(n−1) − x)·link_step_s + x·net_step_s``, x = 2(⌈n / node_size⌉ − 1) ring steps
crossing a node boundary; η, bandwidth = ``link_efficiency``, link_gb_per_s when
the group fits in a node, else ``net_efficiency``, net_gb_per_s.

*Point-to-point* (:func:`p2p_seconds`): ``latency + bytes / (η · bandwidth)`` with
the in-node or between-node tier's ``*_p2p_latency_s`` and ``*_p2p_efficiency``.
"""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from .. import _config, precision
from .._cache import Memo
from ..arch import (ARCH_DTYPE, attention_shape_factor, attention_shape_kernels_for_rows,
                    dtype_rates)
from ..arch import efficiency as _efficiency
from ..arch import validate as _validate_archs
from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, OpGraph
from . import _kernels
from ._records import (FLASH_CURVES, FLASH_OPS, OP_DTYPE, PARAMS_DTYPE, ROW_DTYPE, SHAPE_DTYPE,
                       SPLIT_DTYPE, TILE_DTYPE)

__all__ = ["MODELS", "op_latencies", "p2p_seconds", "roofline_bounds"]

_MIB = float(2 ** 20)

#: ``flash_kernel``'s default: each row its own kernel's shape curve (:func:`op_latencies`).
DEFAULT_FLASH_KERNEL = "auto"


def _check_graph(op_graph) -> OpGraph:
    if not isinstance(op_graph, OpGraph):
        raise ValueError(f"op_graph must be a phaze.graph.OpGraph, got {type(op_graph).__name__}")
    if not isinstance(op_graph.bytes_per_element, (int, np.integer)) or op_graph.bytes_per_element < 1:
        raise ValueError(f"op_graph.bytes_per_element must be a positive integer, "
                         f"got {op_graph.bytes_per_element!r}")
    return op_graph


def _si(archs):
    """The architecture columns the kernels need, in SI units, as contiguous arrays (a rate
    whose SI value exceeds the float maximum saturates to inf, without a warning)."""
    with np.errstate(over="ignore"):
        return _si_columns(archs)


def _si_columns(archs):
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


_PREPARED = Memo(lambda: _config.COST_PREPARED_CACHE_SIZE, "cost.prepared")
"""(address, rows, crc32 of the bytes) -> kernel inputs of a chunk of rows (thread-safe:
the search may call from several threads, the kernels release the GIL)."""


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
        hit = _PREPARED.get(key)
        if hit is not None:
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
        node_size=col["node_size"].astype(np.float64),
        # each row's own fused attention shape curve (flash_kernel "auto")
        auto_flash_curve=np.array([FLASH_CURVES.index(k)
                                   for k in attention_shape_kernels_for_rows(archs)],
                                  dtype=np.int64))
    for value in prep.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    # the cost models' inputs per efficiency parameter set (:func:`_model_inputs`)
    prep["_models"] = Memo(lambda: _config.COST_PREPARED_CACHE_SIZE, "cost.model_inputs")
    if key is not None:
        _PREPARED.put(key, prep)
    return prep


_TILE_FIELDS = ("tile_m_mult", "tile_n_mult", "tile_k_mult", "cores_per_tile", "k_stages")
_RATE_FIELDS = PARAMS_DTYPE.names


@dataclasses.dataclass(frozen=True)
class CostModel:
    """One cost model of the operator loop (``_kernels._op_latencies``).

    ``name``: as ``model=`` spells it; ``tile_rule``: whether the tile and wave rule bounds
    a GEMM's array cycles; ``parameters``: the model's own efficiency parameter set, or
    None when the caller chooses it (``efficiency=``, default the ``"template"`` set).
    """

    name: str
    tile_rule: bool
    parameters: object = None

    def efficiency(self, efficiency):
        """The efficiency parameters this model prices with, given the caller's ``efficiency=``."""
        return efficiency if self.parameters is None else self.parameters


#: The study's parameter set: every efficiency fraction 1 and every latency 0, so that each
#: calibrated rule multiplies by 1 or adds 0 (exact) — with the template's tile parameters,
#: which the study's model does not read (it has no tile rule).
IDENTITY = _efficiency.Efficiency(**{
    **{f: getattr(_efficiency.TEMPLATE, f) for f in _TILE_FIELDS},
    **{f: 1.0 for f in ("tile_efficiency", "fp8_tile_efficiency", "flash_fwd_efficiency",
                        "flash_bwd_efficiency", "hbm_efficiency", "attention_hbm_efficiency",
                        "link_efficiency", "net_efficiency", "link_p2p_efficiency",
                        "net_p2p_efficiency")},
    **{f: 0.0 for f in ("launch_s", "coll_latency_s", "link_step_s", "net_step_s",
                        "link_p2p_latency_s", "net_p2p_latency_s")}})

#: The cost models, chosen once by ``model=``: the study's ideal model is the calibrated
#: operator loop with the identity parameters and no tile rule.
COST_MODELS = {
    "study": CostModel("study", tile_rule=False, parameters=IDENTITY),
    "calibrated": CostModel("calibrated", tile_rule=True),
}

#: The cost models ``op_latencies`` and ``p2p_seconds`` accept (the first is the default).
MODELS = tuple(COST_MODELS)


def _cost_model(model, efficiency) -> CostModel:
    """The :data:`COST_MODELS` entry ``model``; ``efficiency`` is given only with the
    calibrated one."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(map(repr, MODELS))}, got {model!r}")
    spec = COST_MODELS[model]
    if spec.parameters is not None and efficiency is not None:
        raise ValueError("efficiency applies only to model='calibrated'")
    return spec


def _model_inputs(prep, efficiency):
    """The operator loop's records of ``prep``'s rows under ``efficiency``, memoised with
    ``prep``: (rows: one ``ROW_DTYPE`` record per row, with its shape, split and tile and the
    GEMM rate, HBM and attention-core bandwidths and launch gap its parameters give;
    params: one ``PARAMS_DTYPE`` record per row; shapes, splits, tiles: ``SHAPE_DTYPE``,
    ``SPLIT_DTYPE`` and ``TILE_DTYPE`` records).

    "Tiles" are the distinct (split, tile parameters) combinations of the rows: with
    one parameter set for every row (the usual case) exactly the splits; per-row sets
    may add more. The memo is keyed by the set itself, or by a CRC of a per-row array.
    """
    if efficiency is None or isinstance(efficiency, (str, _efficiency.Efficiency)):
        one = _efficiency.TEMPLATE if efficiency is None else (
            _efficiency.get(efficiency) if isinstance(efficiency, str) else efficiency)
        key = ("set", one)
    else:
        eff = _efficiency.rows(efficiency, prep["n_archs"])
        key = ("rows", zlib.crc32(memoryview(eff).cast("B")))
    cache = prep["_models"]
    hit = cache.get(key)
    if hit is not None:
        return hit
    params = np.zeros(prep["n_archs"], dtype=PARAMS_DTYPE)
    if key[0] == "set":
        tiles = np.zeros(prep["split_w"].shape[0], dtype=TILE_DTYPE)
        tiles["split"] = np.arange(tiles.shape[0], dtype=np.int64)
        for f in _TILE_FIELDS:
            tiles[f] = float(getattr(one, f))
        tile_of_arch = prep["split_of_arch"]
        for f in _RATE_FIELDS:
            params[f] = float(getattr(one, f))
    else:
        uniq, tile_of_arch = _distinct(prep["split_of_arch"], *(eff[f] for f in _TILE_FIELDS))
        tiles = np.zeros(uniq[0].shape[0], dtype=TILE_DTYPE)
        tiles["split"] = uniq[0].astype(np.int64)
        for f, values in zip(_TILE_FIELDS, uniq[1:]):
            tiles[f] = values
        for f in _RATE_FIELDS:
            params[f] = np.asarray(eff[f], dtype=np.float64)
    rows = np.zeros(prep["n_archs"], dtype=ROW_DTYPE)
    rows["shape"] = prep["shape_of_arch"]
    rows["split"] = prep["split_of_arch"]
    rows["tile"] = tile_of_arch
    for name in ("num_vc", "vc_width", "clock_hz", "link_bytes_per_s", "net_bytes_per_s",
                 "node_size"):
        rows[name] = prep[name]
    # the per-row rates the operator loop divides by (the same products it would form)
    rows["gemm_rate"] = prep["clock_hz"] * params["tile_efficiency"]
    rows["fp8_gemm_rate"] = prep["clock_hz"] * (
        float(one.fp8_tile_efficiency) if key[0] == "set"
        else np.asarray(eff["fp8_tile_efficiency"], dtype=np.float64))
    rows["hbm_bw"] = prep["hbm_bytes_per_s"] * params["hbm_efficiency"]
    rows["attention_bw"] = prep["hbm_bytes_per_s"] * params["attention_hbm_efficiency"]
    rows["launch_s"] = params["launch_s"]
    rows["onchip_bw"] = np.inf  # unlimited delivery; Prepared.with_onchip sets a chip's
    for f in ("flash_fwd", "flash_bwd"):
        rows[f"{f}_rate"] = prep["clock_hz"] * (
            float(getattr(one, f"{f}_efficiency")) if key[0] == "set"
            else np.asarray(eff[f"{f}_efficiency"], dtype=np.float64))
    shapes = np.zeros(prep["shape_w"].shape[0], dtype=SHAPE_DTYPE)
    shapes["w"], shapes["d"], shapes["cap"] = prep["shape_w"], prep["shape_d"], prep["shape_cap"]
    splits = np.zeros(prep["split_w"].shape[0], dtype=SPLIT_DTYPE)
    splits["w"], splits["d"], splits["cores"] = (prep["split_w"], prep["split_d"],
                                                 prep["split_cores"])
    records = (rows, params, shapes, splits, tiles)
    for value in records:
        value.setflags(write=False)
    return cache.put(key, records)


_GRAPH_INPUTS = Memo(lambda: _config.COST_GRAPH_INPUTS_CACHE_SIZE, "cost.graph_inputs")
"""OpGraph (by identity: graphs are immutable) -> (its operators as ``OP_DTYPE`` records,
whether it has an FP8 GEMM)."""


def _flash_scales(g):
    """(n_ops, len(FLASH_CURVES)): each operator's fused attention kernel's speed at its
    shape (``OpGraph.flash_shape``) over the speed at the shape the chips' flash fractions
    were measured at, on each curve of ``_records.FLASH_CURVES``
    (``phaze.arch.attention_shape_factor``); 1 for every other operator and for the curve
    None."""
    out = np.ones((g.n_ops, len(FLASH_CURVES)))
    for i, name in enumerate(g.names):
        code = FLASH_OPS.get(name, 0)
        hd, keys = (int(x) for x in g.flash_shape[i])
        if code and hd > 0 and keys > 0:
            for c, kernel in enumerate(FLASH_CURVES):
                if kernel is not None:
                    out[i, c] = attention_shape_factor(kernel, code == 2, hd, keys)
    return out


def _graph_inputs(op_graph):
    hit = _GRAPH_INPUTS.get(op_graph)
    if hit is None:
        g = op_graph
        ops = np.zeros(g.n_ops, dtype=OP_DTYPE)
        ops["kind"] = g.kind
        for col, name in enumerate(("batch", "m", "k", "n")):
            ops[name] = g.dims[:, col]
        ops["cycles_per_element"] = g.cycles_per_element
        ops["elements"] = g.elements
        ops["bytes_moved"] = (g.bytes_in + g.bytes_out).astype(np.float64)
        ops["comm_bytes"] = g.comm_bytes
        ops["group_size"] = g.group_size
        ops["in_bytes"] = np.where(g.fp8, float(precision.FP8_BYTES), float(g.bytes_per_element))
        ops["attention"] = g.attention_core
        ops["fp8"] = g.fp8
        # the fused attention kernel, found by its operator name (phaze.graph names it so)
        ops["flash"] = [FLASH_OPS.get(name, 0) for name in g.names]
        ops["flash_scale"] = _flash_scales(g)
        ops.setflags(write=False)
        hit = _GRAPH_INPUTS.put(op_graph, (ops, bool(np.any(g.fp8))))
    return hit


def _dtype_inputs(op_graph, n_archs, fp8_rate):
    """The graph's operator records and the per-row fp8 multiplier (all ones when the graph
    has no FP8 GEMM); a row without fp8 tensor cores is refused."""
    ops, any_fp8 = _graph_inputs(op_graph)
    if not any_fp8:
        return ops, np.ones(n_archs)
    rates = dtype_rates.per_row(fp8_rate, n_archs, op_graph.dtype)
    if np.any(rates == 0):
        row = int(np.flatnonzero(rates == 0)[0])
        raise ValueError(f"the graph's dtype {op_graph.dtype} needs tensor cores of its "
                         f"datatype, which architecture row {row} does not have (its rate is "
                         f"0); build the graph with dtype bf16 or fp16")
    return ops, rates


class Prepared:
    """Architecture rows and one cost model's parameters, checked, converted and
    deduplicated once (:func:`prepare`): the operator latencies of many graphs
    (:meth:`op_latencies`) and point-to-point times (:meth:`p2p_seconds`) on those rows
    without checking them again — what a caller pricing dozens of graphs on one chunk of
    rows uses; :func:`op_latencies` and :func:`p2p_seconds` are one call of each."""

    def __init__(self, prep, spec, records, efficiency):
        self._prep = prep
        self._spec = spec
        self._records = records        # the operator loop's (``_model_inputs``)
        self._efficiency = efficiency  # the model's parameters, as the caller gave them
        self._eff = None               # their EFFICIENCY_DTYPE rows, made when p2p needs them
        self.model = spec.name

    def __len__(self) -> int:
        return int(self._prep["n_archs"])

    def with_onchip(self, buffer_bytes_per_cycle) -> "Prepared":
        """These rows with their shared buffer delivering ``buffer_bytes_per_cycle`` bytes
        per clock to the arrays (one number or one per row; ``None`` or ``inf``: unlimited,
        the study's assumption — these rows unchanged). A GEMM then takes at least its
        buffer-to-array operand bytes over ``buffer_bytes_per_cycle × clock`` (one array: its
        1/num_tc share), see the module docstring's "On-chip bandwidth"."""
        if buffer_bytes_per_cycle is None:
            return self
        n = int(self._prep["n_archs"])
        bpc = np.broadcast_to(np.asarray(buffer_bytes_per_cycle, dtype=np.float64).reshape(-1)
                              if np.ndim(buffer_bytes_per_cycle) else
                              np.float64(buffer_bytes_per_cycle), (n,))
        if np.any(np.isnan(bpc)) or np.any(bpc <= 0):
            raise ValueError("buffer_bytes_per_cycle must be a number > 0 (inf: unlimited) "
                             f"per architecture row, got {buffer_bytes_per_cycle!r}")
        rows, params, shapes, splits, tiles = self._records
        rows = rows.copy()
        rows["onchip_bw"] = bpc * self._prep["clock_hz"]
        rows.setflags(write=False)
        out = Prepared(self._prep, self._spec, (rows, params, shapes, splits, tiles),
                       self._efficiency)
        out._eff = self._eff
        return out

    def with_flash_kernel(self, flash_kernel) -> "Prepared":
        """These rows with their fused attention priced on ``flash_kernel``'s shape curve
        (as :func:`op_latencies` takes it: "auto", a kernel name, a list of one per row,
        or None)."""
        n = int(self._prep["n_archs"])
        codes = _flash_curve_codes(flash_kernel, self._prep, n)
        rows, params, shapes, splits, tiles = self._records
        if np.array_equal(rows["flash_curve"], codes):
            return self
        rows = rows.copy()
        rows["flash_curve"] = codes
        rows.setflags(write=False)
        out = Prepared(self._prep, self._spec, (rows, params, shapes, splits, tiles),
                       self._efficiency)
        out._eff = self._eff
        return out

    def op_latencies(self, op_graph: OpGraph, *, fp8_rate=None):
        """:func:`op_latencies` of ``op_graph`` on the prepared rows (``fp8_rate`` as there)."""
        return self._latencies(_check_graph(op_graph), fp8_rate)

    def _latencies(self, op_graph, fp8_rate):
        n_ops, n_archs = op_graph.n_ops, self._prep["n_archs"]
        ops, rates = _dtype_inputs(op_graph, n_archs, fp8_rate)
        rows, params, shapes, splits, tiles = self._records
        single = np.empty((n_ops, n_archs), dtype=np.float64)
        intra = np.empty((n_ops, n_archs), dtype=np.float64)
        _kernels._op_latencies(
            ops, rows, params, shapes, splits, tiles, self._spec.tile_rule,
            np.ascontiguousarray(rates, dtype=np.float64), float(op_graph.bytes_per_element),
            float(_config.COST_ACCUMULATOR_BYTES),
            float(_config.COST_SINGLE_CORE_BUFFER_FRACTION), single, intra)
        return single, intra

    def op_latencies_many(self, graphs, *, fp8_rate=None) -> list:
        """:meth:`op_latencies` of each graph of ``graphs``, in one pass of the operator loop
        per element size (the graphs' operators concatenated: each operator is priced on
        its own, so the numbers are those of one call per graph): a list of (single,
        intra) per graph, row slices of two (total operators, n_archs) arrays."""
        graphs = [_check_graph(g) for g in graphs]
        out = [None] * len(graphs)
        by_size = {}
        for k, g in enumerate(graphs):
            by_size.setdefault(int(g.bytes_per_element), []).append(k)
        for ks in by_size.values():
            group = tuple(graphs[k] for k in ks)
            whole, offsets = _concatenated(group)
            single, intra = self._latencies(whole, fp8_rate)
            for k, lo, hi in zip(ks, offsets[:-1], offsets[1:]):
                out[k] = (single[lo:hi], intra[lo:hi])
        return out

    def p2p_seconds(self, nbytes, *, inter_node: bool):
        """:func:`p2p_seconds` on the prepared rows, shape (len(nbytes), n_archs)."""
        size = _p2p_sizes(nbytes)
        if self._eff is None:
            self._eff = _efficiency.rows(self._efficiency, self._prep["n_archs"])
        bw = self._prep["net_bytes_per_s" if inter_node else "link_bytes_per_s"]
        tier = "net" if inter_node else "link"
        latency = self._eff[f"{tier}_p2p_latency_s"][None, :]
        t = latency + size[:, None] / (self._eff[f"{tier}_p2p_efficiency"] * bw)[None, :]
        return np.ascontiguousarray(np.where(size[:, None] > 0, t, 0.0))


_CONCATENATED = Memo(lambda: _config.COST_GRAPH_INPUTS_CACHE_SIZE, "cost.concatenated")
"""Tuple of OpGraphs (by identity) of one element size -> (one OpGraph of all their
operators, predecessors dropped: the operator loop does not read them; offsets)."""


def _concatenated(graphs):
    hit = _CONCATENATED.get(graphs)
    if hit is None:
        if len(graphs) == 1:
            whole = graphs[0]
        else:
            n = sum(g.n_ops for g in graphs)
            fields = {f: np.concatenate([getattr(g, f) for g in graphs])
                      for f in ("kind", "dims", "cycles_per_element", "elements", "bytes_in",
                                "bytes_out", "comm_bytes", "group_size", "collective", "fp8",
                                "flash_shape")}
            # the operators' own names (their attention-core flags follow from them)
            names = [name for g in graphs for name in g.names]
            dtype = next((g.dtype for g in graphs if np.any(g.fp8)), graphs[0].dtype)
            whole = OpGraph(**fields, pred_ptr=np.zeros(n + 1, dtype=np.int32),
                            pred_idx=np.zeros(0, dtype=np.int32), names=names,
                            bytes_per_element=graphs[0].bytes_per_element, dtype=dtype)
        offsets = np.concatenate([[0], np.cumsum([g.n_ops for g in graphs])]).tolist()
        hit = _CONCATENATED.put(graphs, (whole, offsets))
    return hit


def prepare(archs, *, model: str = "study", efficiency=None,
            buffer_bytes_per_cycle=None, flash_kernel=DEFAULT_FLASH_KERNEL) -> Prepared:
    """The :class:`Prepared` rows ``archs`` under ``model`` with ``efficiency``,
    ``flash_kernel`` (all as :func:`op_latencies` takes them) and the buffer's delivery rate
    (:meth:`Prepared.with_onchip`), checked once."""
    spec = _cost_model(model, efficiency)
    prep = _prepared(archs)
    chosen = spec.efficiency(efficiency)
    return Prepared(prep, spec, _model_inputs(prep, chosen), chosen).with_onchip(
        buffer_bytes_per_cycle).with_flash_kernel(flash_kernel)


def _flash_curve_codes(kernel, prep, n) -> np.ndarray:
    """Each row's index into ``_records.FLASH_CURVES`` for ``flash_kernel`` = ``kernel``
    (:func:`op_latencies`) on the prepared rows ``prep``; one sentence for a bad value."""
    allowed = ", ".join(k for k in FLASH_CURVES if k is not None)
    if isinstance(kernel, str) and kernel == "auto":
        return prep["auto_flash_curve"]
    if kernel is None or isinstance(kernel, str):
        names = [kernel] * n
    else:
        names = list(kernel)
        if len(names) != n:
            raise ValueError(f"flash_kernel has {len(names)} entries for {n} architecture rows")
    bad = [k for k in names if k not in FLASH_CURVES]
    if bad:
        raise ValueError(f"flash_kernel must be 'auto', one of {allowed} or None (or one of "
                         f"those per row), got {bad[0]!r}")
    return np.array([FLASH_CURVES.index(k) for k in names], dtype=np.int64)


def _p2p_sizes(nbytes) -> np.ndarray:
    size = np.asarray(nbytes, dtype=np.float64).reshape(-1)
    if size.size == 0 or np.any(~np.isfinite(size)) or np.any(size < 0):
        raise ValueError(f"nbytes must be finite byte counts >= 0, got {nbytes!r}")
    return size


def op_latencies(op_graph: OpGraph, archs, *, model: str = "study", efficiency=None,
                 fp8_rate=None, buffer_bytes_per_cycle=None,
                 flash_kernel=DEFAULT_FLASH_KERNEL):
    """Latency of every operator on every architecture, seconds.

    Parameters
    ----------
    op_graph : OpGraph
        Operators of one layer pass (``phaze.graph``).
    archs : structured array
        Architecture rows (``phaze.arch.ARCH_DTYPE``; a preset row, ``ArchSpace.configs``
        or ``make_archs(...)``); a zero, negative or NaN knob raises ``ValueError`` naming it.
    model : {"study", "calibrated"}
        ``"study"`` (default): the original study's ideal model, unchanged.
        ``"calibrated"``: the real-chip efficiency rules (module docstring).
    efficiency : None, str, phaze.arch.efficiency.Efficiency or structured array
        Only with ``model="calibrated"``: the efficiency parameters, a set's name
        (``phaze.arch.efficiency.names()``, e.g. ``"a100-80g"``) or object applied to
        every row, or an ``EFFICIENCY_DTYPE`` array with one set per row
        (``phaze.arch.efficiency.for_rows(archs)`` gives each preset row its own set and
        every other row the template's); ``None`` takes the ``"template"`` set
        (hypothetical chips) for every row.
    fp8_rate : None, number or sequence
        Used only when the graph has FP8 GEMMs (``OpGraph.fp8``, ``dtype="fp8"``): each
        row's dense FP8 tensor rate as a multiple of its 16-bit rate — one number, or one
        per row (``phaze.arch.dtype_rates.for_rows(archs)`` gives preset rows their own,
        ``Chip.tensor_rate("fp8")`` a chip's); ``None`` takes the template rule (2) for every
        row. 0 means no FP8 tensor cores: ``ValueError``. Both models divide an FP8 GEMM's
        array cycles by it; its operands are read at 1 byte per element.
    buffer_bytes_per_cycle : None, number or sequence
        Bytes per clock the shared buffer delivers to the arrays (one, or one per row);
        ``None`` (default): unlimited, as the study assumes (module docstring, "On-chip
        bandwidth").
    flash_kernel : "auto", str, sequence or None
        Only the calibrated model reads it: the fused attention kernel whose measured
        speed by shape prices ``flash_attn`` / ``flash_attn.bwd`` at their head dimension
        and keys per query (``OpGraph.flash_shape``; ``phaze.arch.attention_shape_factor``):
        "auto" (default): each row its own (``phaze.arch.attention_shape_kernels_for_rows``:
        a preset's kernel, cuDNN's for every other row); "cudnn", "fa2" or "fa3" for every
        row, or one per row; ``None``: every shape at the rate of the measured one (the
        chips' flash fractions as they are).

    Returns
    -------
    (single, intra) : two C-contiguous float64 arrays of shape (n_ops, n_archs)
        ``single``: each operator on one core of its type (a fused one on one TC and
        one VC); ``intra``: intra-op parallel over all cores of its type(s). For
        collectives both hold the ring all-reduce time. See the module docstring for
        the models.
    """
    op_graph = _check_graph(op_graph)
    return prepare(archs, model=model, efficiency=efficiency,
                   buffer_bytes_per_cycle=buffer_bytes_per_cycle,
                   flash_kernel=flash_kernel)._latencies(op_graph, fp8_rate)


def p2p_seconds(nbytes, archs, *, inter_node: bool, model: str = "study", efficiency=None):
    """Seconds to send ``nbytes`` from one device to another, shape (len(nbytes), n_archs).

    ``nbytes``: a byte count or a 1-D sequence of them (≥ 0). ``inter_node``: True for a
    transfer between nodes (``net_gb_per_s``), False inside a node (``link_gb_per_s``).
    ``model="study"``: bytes / bandwidth. ``model="calibrated"``: latency + bytes /
    (efficiency · bandwidth) with the tier's ``*_p2p_latency_s`` and ``*_p2p_efficiency``
    of ``efficiency`` (as in :func:`op_latencies`); a zero-byte transfer costs 0 (no message).
    """
    spec = _cost_model(model, efficiency)
    _p2p_sizes(nbytes)
    return prepare(archs, model=spec.name, efficiency=efficiency).p2p_seconds(
        nbytes, inter_node=inter_node)


def onchip_bytes(dims, in_bytes, tc_width, tc_depth, *, acc_bytes=None) -> np.ndarray:
    """Buffer-to-array bytes of GEMMs on weight-stationary arrays (module docstring,
    "On-chip bandwidth"; the operator loop's own formula, ``onchip_traffic_bytes``):
    ``dims`` (g, 4) rows of batch, M, K, N; ``in_bytes`` (g,) bytes per element of A and B;
    ``tc_width``, ``tc_depth`` (r,) the array shapes; ``acc_bytes`` the partial sums' bytes
    (default ``_config.COST_ACCUMULATOR_BYTES``). Returns (g, r) float64 bytes: GEMM i on
    shape j at [i, j] (0 for a GEMM with a zero dimension)."""
    dims = np.ascontiguousarray(dims, dtype=np.float64)
    if dims.ndim != 2 or dims.shape[1] != 4:
        raise ValueError(f"dims must be a (gemms, 4) array of batch, M, K, N, got shape "
                         f"{dims.shape}")
    in_bytes = np.ascontiguousarray(np.broadcast_to(np.asarray(in_bytes, dtype=np.float64),
                                                    (dims.shape[0],)))
    w = np.ascontiguousarray(np.atleast_1d(tc_width), dtype=np.float64)
    d = np.ascontiguousarray(np.atleast_1d(tc_depth), dtype=np.float64)
    acc = float(_config.COST_ACCUMULATOR_BYTES if acc_bytes is None else acc_bytes)
    for name, x in (("dims", dims), ("in_bytes", in_bytes), ("tc_width", w), ("tc_depth", d)):
        if not np.all(np.isfinite(x)) or np.any(x < 0):
            raise ValueError(f"{name} must hold finite numbers >= 0")
    if w.shape != d.shape or w.ndim != 1 or np.any(w <= 0) or np.any(d <= 0):
        raise ValueError("tc_width and tc_depth must be equal-length 1-D arrays of numbers > 0")
    if not (np.isfinite(acc) and acc > 0):
        raise ValueError(f"acc_bytes must be a number > 0, got {acc_bytes!r}")
    out = np.empty((dims.shape[0], w.shape[0]), dtype=np.float64)
    _kernels.onchip_traffic(dims, in_bytes, w, d, acc, out)
    return out


def roofline_bounds(op_graph: OpGraph, archs, *, fp8_rate=None):
    """Lower bounds (single, intra), seconds, shape (n_ops, n_archs), that no latency beats.

    Per operator: ``max(work / peak of the cores used, compulsory bytes / HBM bandwidth)``,
    where work is 2·batch·M·K·N FLOPs on tensor cores (peak w·d·2·clock per core, times
    ``fp8_rate`` for an FP8 GEMM, as in :func:`op_latencies`) and/or
    elements·cycles_per_element lane-cycles on vector cores, and compulsory bytes are
    the larger of ``bytes_in + bytes_out`` and batch·(e_in·(MK + KN) + e·MN) (e_in = 1 for
    an FP8 GEMM's operands, else e; the fused attention kernel's, which writes no M × N
    scores: ``bytes_in + bytes_out`` alone). Collectives: the ring all-reduce time itself. Cheap
    (numpy only).
    """
    op_graph = _check_graph(op_graph)
    archs = _validate_archs(archs)
    col = _si(archs)
    ops, rates = _dtype_inputs(op_graph, archs.shape[0], fp8_rate)
    in_bytes, fp8 = ops["in_bytes"], op_graph.fp8
    kind = op_graph.kind[:, None]
    d = op_graph.dims.astype(np.float64)
    flops = (2.0 * d[:, 0] * d[:, 1] * d[:, 2] * d[:, 3])[:, None]
    e = float(op_graph.bytes_per_element)
    if np.any(fp8):
        gemm_bytes = d[:, 0] * (in_bytes * (d[:, 1] * d[:, 2] + d[:, 2] * d[:, 3])
                                + e * d[:, 1] * d[:, 3])
    else:
        gemm_bytes = e * d[:, 0] * (d[:, 1] * d[:, 2] + d[:, 2] * d[:, 3] + d[:, 1] * d[:, 3])
    # the fused attention kernel writes no M×N scores: its compulsory bytes are its own
    flash = ops["flash"] != 0
    moved = np.maximum((op_graph.bytes_in + op_graph.bytes_out).astype(np.float64),
                       np.where(flash, 0.0, gemm_bytes))
    traffic = moved[:, None] / col["hbm_bytes_per_s"][None, :]
    hz = col["clock_hz"][None, :]
    core_peak = (col["tc_width"] * col["tc_depth"] * 2.0)[None, :] * hz
    core_peak = np.where(fp8[:, None], core_peak * rates[None, :], core_peak)
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
