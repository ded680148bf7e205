# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled kernels of ``phaze.cost`` (Cython, built ahead of time by ``setup.py``).
Private: call :func:`phaze.cost.op_latencies`.

One operator loop, :func:`_op_latencies`, prices both cost models: the calibrated one
with each row's efficiency parameters (a ``_records.PARAMS_DTYPE`` record per row)
and the tile and wave rule, the study's with the identity parameters (fractions 1, latencies 0)
and no tile rule, which reproduces the study's ideal model bit for bit (x·1, x/1 and
x + 0 are exact). The models are documented in ``phaze/cost/_latency.py``; the functions
here are their literal transcription, in the order of floating-point operations of the
numba kernels they replaced (built with ``-ffp-contract=off``: no fused multiply-add), so
the numbers are those kernels' bit for bit (tests/test_cost_model.py checks them against
stored reference outputs). The study's arithmetic is float64 on exact integers (< 2**52);
the calibrated parameters divide by non-integral fractions in one fixed order.

Python semantics kept: ``max(a, b)`` is ``b if b > a else a`` and ``min(a, b)`` is
``b if b < a else a`` (:func:`fmax_py`, :func:`fmin_py`); numba's ``math.ceil`` and
``math.floor`` give int64s, and so do :func:`ceil_int` and :func:`floor_int` (as floats),
exact for the magnitudes here (< 2**52). Inputs are the validated ones of
``_latency.op_latencies`` (positive rates, at least one core), so no division is by zero.

Its arguments are records (``_records``: ``OP_DTYPE`` per operator, ``ROW_DTYPE`` and
``PARAMS_DTYPE`` per architecture, ``SHAPE_DTYPE``, ``SPLIT_DTYPE``, ``TILE_DTYPE``), read
through the packed C structs below; the import checks each dtype against its struct.
The operator loop runs without the GIL: threads may call it in parallel (the search
does). :func:`_cdiv` and :func:`_tile_cycles` are the Python faces of two of its rules,
for the tests; :func:`onchip_traffic` the on-chip operand stream's over many GEMMs and array
shapes (``phaze.cost.onchip_bytes``).
"""
from libc.math cimport INFINITY
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc

import numpy as np

from .. cimport _ring

from ..graph import KIND_COLLECTIVE as _KC, KIND_FUSED as _KF, KIND_GEMM as _KG, \
    KIND_VECTOR as _KV
from ._records import OP_DTYPE, PARAMS_DTYPE, ROW_DTYPE, SHAPE_DTYPE, SPLIT_DTYPE, TILE_DTYPE

#: The operator kinds (``phaze.graph.KIND_*``; checked equal to the graph's at import).
cdef enum:
    KIND_GEMM = 0
    KIND_VECTOR = 1
    KIND_FUSED = 2
    KIND_COLLECTIVE = 3

assert (_KG, _KV, _KF, _KC) == (KIND_GEMM, KIND_VECTOR, KIND_FUSED, KIND_COLLECTIVE), \
    "phaze/cost/_kernels.pyx: operator kind codes out of date"


#: ``_records.PARAMS_DTYPE``: a row's efficiency fractions and latencies.
cdef packed struct Params:
    double tile_efficiency
    double hbm_efficiency
    double attention_hbm_efficiency
    double launch_s
    double coll_latency_s
    double link_step_s
    double net_step_s
    double link_efficiency
    double net_efficiency


#: ``_records.TILE_DTYPE``: a split's index and the tile and wave rule's parameters.
cdef packed struct Tile:
    int64_t split
    double tile_m_mult
    double tile_n_mult
    double tile_k_mult
    double cores_per_tile
    double k_stages


cdef packed struct Op:
    int64_t kind
    double batch
    double m
    double k
    double n
    double cycles_per_element
    double elements
    double bytes_moved
    double comm_bytes
    double group_size
    double in_bytes
    double flash_scale[4]
    uint8_t attention
    uint8_t fp8
    uint8_t flash


cdef packed struct Row:
    int64_t shape
    int64_t split
    int64_t tile
    int64_t flash_curve
    double num_vc
    double vc_width
    double clock_hz
    double link_bytes_per_s
    double net_bytes_per_s
    double node_size
    double gemm_rate
    double fp8_gemm_rate
    double hbm_bw
    double attention_bw
    double launch_s
    double flash_fwd_rate
    double flash_bwd_rate
    double onchip_bw


cdef packed struct Shape:
    double w
    double d
    double cap


cdef packed struct Split:
    double w
    double d
    double cores


def _check_records():
    """Each dtype of ``_records`` is its C struct's layout (the buffer check raises
    otherwise)."""
    cdef const Op[::1] a = np.zeros(1, OP_DTYPE)
    cdef const Row[::1] b = np.zeros(1, ROW_DTYPE)
    cdef const Shape[::1] c = np.zeros(1, SHAPE_DTYPE)
    cdef const Split[::1] d = np.zeros(1, SPLIT_DTYPE)
    cdef const Params[::1] e = np.zeros(1, PARAMS_DTYPE)
    cdef const Tile[::1] f = np.zeros(1, TILE_DTYPE)


_check_records()


assert PARAMS_DTYPE.itemsize == sizeof(Params) and TILE_DTYPE.itemsize == sizeof(Tile) \
    and PARAMS_DTYPE.names == ("tile_efficiency", "hbm_efficiency", "attention_hbm_efficiency",
                               "launch_s", "coll_latency_s", "link_step_s", "net_step_s",
                               "link_efficiency", "net_efficiency") \
    and TILE_DTYPE.names == ("split", "tile_m_mult", "tile_n_mult", "tile_k_mult",
                             "cores_per_tile", "k_stages"), \
    "phaze/cost/_kernels.pyx: records out of date with _records.py"


cdef inline double fmax_py(double a, double b) noexcept nogil:
    """Python's ``max(a, b)``: ``a`` unless ``b > a``."""
    return b if b > a else a


cdef inline double fmin_py(double a, double b) noexcept nogil:
    """Python's ``min(a, b)``: ``a`` unless ``b < a``."""
    return b if b < a else a


cdef inline double ceil_int(double x) noexcept nogil:
    """numba's ``float(math.ceil(x))`` (``math.ceil`` gives an int64 there): x truncated to
    an int64 and back, plus 1 when that fell below x. Exact for |x| < 2**63 (a
    non-integral double is < 2**52, so r + 1 is exact); the same number as libm's
    ``ceil`` but for ``ceil(-0.0)``, which is +0.0 here as in numba. Written out because
    without SSE4.1 (the portable x86-64 baseline) libm's ceil expands to a longer
    branching sequence."""
    cdef double r = <double><int64_t>x
    return r + 1.0 if r < x else r


cdef inline double floor_int(double x) noexcept nogil:
    """numba's ``math.floor(x)`` (an int64) as a float: x truncated to an int64 and back,
    minus 1 when that rose above x; exact for |x| < 2**63, as :func:`ceil_int`."""
    cdef double r = <double><int64_t>x
    return r - 1.0 if r > x else r


cdef inline double cdiv(double a, double b) noexcept nogil:
    """⌈a / b⌉ for non-negative integral floats, as a float.

    Exact for a < 2**52: the correctly rounded quotient of two integers keeps any
    fractional part ≥ 1/b there, so ceil never rounds it away.
    """
    return ceil_int(a / b)


cdef inline double sum_bytes(double in_bytes, double out_bytes, double a, double b,
                             double c) noexcept nogil:
    """in_bytes·(a + b) + out_bytes·c: operand elements a, b and output elements c. With
    one element size it is computed as in_bytes·(a + b + c), the 16-bit graphs' old sum."""
    if in_bytes == out_bytes:
        return in_bytes * (a + b + c)
    return in_bytes * (a + b) + out_bytes * c


cdef inline double gemm_traffic_bytes(double batch, double m, double k, double n,
                                      double elem_bytes, double acc_bytes, double cap_bytes,
                                      double tc_width, double tc_depth,
                                      double in_bytes) noexcept nogil:
    """HBM bytes moved by a batch of M×K×N GEMMs staged through ``cap_bytes`` of buffer.

    The least traffic of three tilings (see phaze.cost): output-stationary C tiles with
    double-buffered K-strips, an A row-block kept resident, or a B column-block kept
    resident. Falls back to no reuse at all when not even a 1×1 tile fits. A and B have
    ``in_bytes`` per element (1 for an FP8 GEMM), C ``elem_bytes``.
    """
    cdef double e_out, kc, best, r, tm, tn, room, t
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    e_out = elem_bytes
    elem_bytes = in_bytes  # the operands' element size sets the strips and resident blocks
    kc = fmin_py(tc_depth, k)
    best = INFINITY
    # (a) output-stationary: a tm×tn tile of C accumulates in the buffer while
    # double-buffered tm×kc strips of A and kc×tn strips of B stream through.
    # need = acc·tm·tn + 2·e·kc·(tm + tn); traffic = e·(MK⌈N/tn⌉ + KN⌈M/tm⌉ + MN).
    # M is split into r = 1, 2, 4, … tiles; for each, the widest tn that fits.
    r = 1.0
    while True:
        tm = cdiv(m, r)
        room = cap_bytes - 2.0 * elem_bytes * kc * tm
        if room > 0.0:
            tn = fmin_py(n, floor_int(room / (acc_bytes * tm + 2.0 * elem_bytes * kc)))
            if tn >= 1.0:
                t = sum_bytes(elem_bytes, e_out, m * k * cdiv(n, tn), k * n * cdiv(m, tm), m * n)
                if t < best:
                    best = t
        if tm <= 1.0:
            break
        r *= 2.0
    # (b) A resident: a tm×K block of A stays while kc×tn strips of B (tn = one array
    # width) stream past; A is read once, B once per row block.
    tn = fmin_py(n, tc_width)
    room = cap_bytes - 2.0 * elem_bytes * kc * tn
    if room > 0.0:
        tm = fmin_py(m, floor_int(room / (elem_bytes * k + acc_bytes * tn)))
        if tm >= 1.0:
            t = sum_bytes(elem_bytes, e_out, m * k, k * n * cdiv(m, tm), m * n)
            if t < best:
                best = t
    # (c) B resident: a K×tn block of B stays while tm×kc strips of A (tm = one array
    # width of rows) stream past; B is read once, A once per column block.
    tm = fmin_py(m, tc_width)
    room = cap_bytes - 2.0 * elem_bytes * kc * tm
    if room > 0.0:
        tn = fmin_py(n, floor_int(room / (elem_bytes * k + acc_bytes * tm)))
        if tn >= 1.0:
            t = sum_bytes(elem_bytes, e_out, m * k * cdiv(n, tn), k * n, m * n)
            if t < best:
                best = t
    if best == INFINITY:  # nothing fits: every multiply-accumulate fetches both operands
        best = sum_bytes(elem_bytes, e_out, m * k * n, m * k * n, m * n)
    return batch * best


cdef inline double gemm_cycles(double batch, double m, double k, double n, double tc_width,
                               double tc_depth, double cores) noexcept nogil:
    """Clock cycles of a batch of M×K×N GEMMs on ``cores`` weight-stationary arrays.

    A pass holds one tc_depth×tc_width tile of B and streams rows of A; passes are
    the units of work, dealt out evenly to the cores. Rows may be split into
    s = 1, 2, 4, … ≤ cores chunks to create more passes; the best split is kept.
    """
    cdef double tiles, fill_drain, best, s, rows, per_core, c
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    tiles = batch * cdiv(k, tc_depth) * cdiv(n, tc_width)
    fill_drain = tc_depth + tc_width - 1.0
    best = INFINITY
    s = 1.0
    while True:
        rows = cdiv(m, s)
        per_core = cdiv(tiles * s, cores)
        c = per_core * fmax_py(rows, tc_depth) + fill_drain
        if c < best:
            best = c
        if s >= cores or s >= m:
            break
        s *= 2.0
    return best


cdef inline double onchip_traffic_bytes(double batch, double m, double k, double n,
                                        double tc_width, double tc_depth, double in_bytes,
                                        double acc_bytes) noexcept nogil:
    """Bytes a batch of M×K×N GEMMs moves between the shared buffer and weight-stationary
    tc_depth×tc_width arrays (issue 28; docs/design.md §2.4): every K×N weight element is
    loaded once, A streams past every column block (M·K·⌈N/w⌉ operands), and each of the
    ⌈K/d⌉ passes over an output writes its M×N partial sums, every pass after the first
    reading them back first (the arrays hold no accumulators): M·N·(2⌈K/d⌉ − 1) partial sums
    of ``acc_bytes``. A and B have ``in_bytes`` per element. Per multiply-accumulate that is
    about in_bytes/w + 2·acc_bytes/d: 32× more for 8×8 arrays than for 256×256 ones."""
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    return batch * (in_bytes * (k * n + m * k * cdiv(n, tc_width))
                    + acc_bytes * m * n * (2.0 * cdiv(k, tc_depth) - 1.0))


cdef inline double vector_cycles(double elements, double cycles_per_element,
                                 double lanes) noexcept nogil:
    """Clock cycles of ⌈elements / lanes⌉ lane-steps of ``cycles_per_element`` cycles."""
    if elements == 0.0:
        return 0.0
    return cdiv(elements, lanes) * cycles_per_element


cdef inline void gemm_array_terms(double b, double m, double k, double n, double moved,
                                  double elem_bytes, double acc_bytes, Py_ssize_t n_shapes,
                                  const Shape* shapes, double single_buffer_fraction,
                                  Py_ssize_t n_splits, const Split* splits,
                                  double in_bytes, double* cyc1, double* bytes1,
                                  double* bytes_all, double* cycp) noexcept nogil:
    """The systolic-array terms of one GEMM that both cost models share.

    Fills (cycles on one array ``cyc1``, HBM bytes with the single-core buffer share
    ``bytes1``, HBM bytes with the whole buffer ``bytes_all``) per distinct core shape, and
    cycles intra-op ``cycp`` per distinct (shape, core count) split. Bytes the operator
    moves besides its GEMM operands (a fused bias or residual) are added once to each
    traffic. ``in_bytes``: element size of A and B (``elem_bytes``, or 1 for an FP8 GEMM).
    """
    cdef Py_ssize_t u, v
    cdef double compulsory, extra, w, d
    if in_bytes == elem_bytes:
        compulsory = elem_bytes * b * (m * k + k * n + m * n)
    else:
        compulsory = b * (in_bytes * (m * k + k * n) + elem_bytes * m * n)
    extra = fmax_py(0.0, moved - compulsory)  # bytes the op moves besides its GEMM operands
    for u in range(n_shapes):
        w = shapes[u].w
        d = shapes[u].d
        cyc1[u] = gemm_cycles(b, m, k, n, w, d, 1.0)
        bytes_all[u] = gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes, shapes[u].cap, w, d,
                                          in_bytes) + extra
        if single_buffer_fraction == 1.0:
            bytes1[u] = bytes_all[u]
        else:
            bytes1[u] = gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes,
                                           shapes[u].cap * single_buffer_fraction, w, d,
                                           in_bytes) + extra
    for v in range(n_splits):
        cycp[v] = gemm_cycles(b, m, k, n, splits[v].w, splits[v].d, splits[v].cores)


# --- the calibrated model's rules (phaze.cost, "calibrated model") ----------------------

cdef inline double tile_cycles(double batch, double m, double k, double n, double tc_width,
                               double tc_depth, double cores, double tile_m_mult,
                               double tile_n_mult, double tile_k_mult, double cores_per_tile,
                               double k_stages) noexcept nogil:
    """Clock cycles of a batch of M×K×N GEMMs under the tile and wave rule (at full array rate).

    Output tiles of (tile_m_mult·w) × (tile_n_mult·w) elements, partial edge tiles
    costing full ones, are dealt in waves to ⌊cores / c⌋ groups of c = min(cores_per_tile,
    cores) arrays; a tile runs ⌈K / (tile_k_mult·d)⌉ K-steps plus ``k_stages − 1`` to fill
    and drain its pipeline, each step ``tile_m·tile_n·tile_k / (c·w·d)`` cycles.
    """
    cdef double c, groups, tiles, waves, steps
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    c = fmin_py(cores_per_tile, cores)
    groups = floor_int(cores / c)
    tiles = batch * cdiv(m, tile_m_mult * tc_width) * cdiv(n, tile_n_mult * tc_width)
    waves = cdiv(tiles, groups)
    steps = cdiv(k, tile_k_mult * tc_depth) + (k_stages - 1.0)
    # tile_m·tile_n·tile_k / (w·d) = tile_m_mult·tile_n_mult·tile_k_mult·w cycles per array
    return waves * steps * (tile_m_mult * tile_n_mult * tile_k_mult * tc_width) / c


# --- the Python faces of two rules (tests) ----------------------------------------------

def _onchip_traffic_bytes(double batch, double m, double k, double n, double tc_width,
                          double tc_depth, double in_bytes, double acc_bytes):
    return onchip_traffic_bytes(batch, m, k, n, tc_width, tc_depth, in_bytes, acc_bytes)


def onchip_traffic(const double[:, ::1] dims, const double[::1] in_bytes,
                   const double[::1] tc_width, const double[::1] tc_depth, double acc_bytes,
                   double[:, ::1] out):
    """:func:`onchip_traffic_bytes` of every GEMM (row g of ``dims``: batch, M, K, N; A and
    B of ``in_bytes[g]`` bytes per element) on every array shape j (``tc_width[j]`` ×
    ``tc_depth[j]``) into ``out[g, j]`` — the one formula the operator loop prices, for
    ``phaze.cost.onchip_bytes`` (inputs checked there)."""
    cdef Py_ssize_t g, j
    with nogil:
        for g in range(dims.shape[0]):
            for j in range(tc_width.shape[0]):
                out[g, j] = onchip_traffic_bytes(dims[g, 0], dims[g, 1], dims[g, 2], dims[g, 3],
                                                 tc_width[j], tc_depth[j], in_bytes[g],
                                                 acc_bytes)


def _cdiv(double a, double b):
    """⌈a / b⌉ for non-negative integral floats, as a float (the kernels' rule)."""
    return cdiv(a, b)


def _tile_cycles(double batch, double m, double k, double n, double tc_width, double tc_depth,
                 double cores, double tile_m_mult, double tile_n_mult, double tile_k_mult,
                 double cores_per_tile, double k_stages):
    """Clock cycles of a batch of M×K×N GEMMs under the tile and wave rule (the kernels' rule)."""
    return tile_cycles(batch, m, k, n, tc_width, tc_depth, cores, tile_m_mult, tile_n_mult,
                       tile_k_mult, cores_per_tile, k_stages)


# --- the operator loop ------------------------------------------------------------------

cdef bint _rows_in(const Row* rows, Py_ssize_t n, Py_ssize_t n_shapes, Py_ssize_t n_splits,
                   Py_ssize_t n_tiles) noexcept nogil:
    """Whether every row's shape, split and (n_tiles ≥ 0: with the tile rule) tile index lies
    in range."""
    cdef Py_ssize_t j
    for j in range(n):
        if rows[j].shape < 0 or rows[j].shape >= n_shapes or rows[j].split < 0 \
                or rows[j].split >= n_splits \
                or (n_tiles >= 0 and (rows[j].tile < 0 or rows[j].tile >= n_tiles)):
            return False
    return True


cdef bint _tile_splits_in(const Tile* tiles, Py_ssize_t n, Py_ssize_t n_splits) noexcept nogil:
    """Whether the split of every one of the n tiles lies in [0, n_splits)."""
    cdef Py_ssize_t j
    for j in range(n):
        if tiles[j].split < 0 or tiles[j].split >= n_splits:
            return False
    return True


# Serial on purpose: a parallel version over operators measured slower on the 2-core
# CI-like machine (bench/RESULTS.md, "Operator latencies"), and the search already runs
# one process per core; the loop releases the GIL so that threads call it in parallel.
def _op_latencies(const Op[::1] ops, const Row[::1] rows, const Params[::1] params,
                  const Shape[::1] shapes, const Split[::1] splits, const Tile[::1] tiles,
                  bint tile_rule, const double[::1] fp8_rate, double elem_bytes,
                  double acc_bytes, double single_buffer_fraction, double[:, ::1] single,
                  double[:, ::1] intra):
    """Fill ``single`` and ``intra`` (n_ops, n_archs), seconds: the one operator loop of both
    cost models, on records (``_records``): ``ops`` one ``OP_DTYPE`` record per operator;
    ``rows`` one ``ROW_DTYPE`` record per architecture (its shape, split and tile indices,
    vector cores, clock, bandwidths, node size, and the rates its parameters give: GEMM
    array steps per second = clock × tile_efficiency (FP8 GEMMs: clock ×
    fp8_tile_efficiency, times ``fp8_rate``), HBM and attention-core bytes per
    second, launch gap, and the fused attention kernel's array steps per second, forward and
    backward = clock × flash_fwd_efficiency, clock × flash_bwd_efficiency, which an operator
    flagged ``flash`` 1 or 2 runs at, times its ``flash_scale`` on the row's
    ``flash_curve``, on its array cycles, without the tile rule) with
    ``params`` (``PARAMS_DTYPE``, its efficiency fractions and latencies, which the
    collectives read); GEMM quantities are computed once per distinct
    (w, d, buffer) — ``shapes`` — and per distinct (w, d, num_tc) — ``splits`` — then
    broadcast to the architectures; ``tile_rule``: whether the tile and wave rule bounds
    GEMM cycles, on the ``tiles`` (``TILE_DTYPE``); ``fp8_rate[a]``: the multiple of the
    array rate an FP8 GEMM runs at on architecture a. The study's model is this loop with
    identity parameters (fractions 1, latencies 0) and no tile rule: multiplying by 1 and
    adding 0 are exact, so it gives the study's numbers bit for bit. An attention-core
    operator's HBM traffic runs at ``attention_bw``, the others' at ``hbm_bw``. Scratch for
    the per-shape, per-split and per-tile terms is allocated once per call.
    """
    cdef Py_ssize_t n_ops = ops.shape[0]
    cdef Py_ssize_t n_archs = rows.shape[0]
    cdef Py_ssize_t n_tiles = tiles.shape[0] if tile_rule else 0
    cdef Py_ssize_t n_shapes = shapes.shape[0]
    cdef Py_ssize_t n_splits = splits.shape[0]
    cdef Py_ssize_t i, a, x, u, v
    cdef int64_t kd
    cdef double g, cb, t, moved, el, traffic_s, lanes, t1, tp, b, m, k, n, w, d, c1, cp
    cdef double rate, hz, bwa, cpe
    cdef bint fused, fp8, attn
    cdef uint8_t flash
    cdef const Op* op
    cdef const Row* r
    cdef const Params* p
    cdef const Tile* tl
    cdef double* scratch
    cdef double* cyc1
    cdef double* bytes1
    cdef double* bytes_all
    cdef double* cycp
    cdef double* tile1
    cdef double* tilep
    cdef double* onchip
    if not (single.shape[0] == intra.shape[0] == n_ops):
        raise ValueError("_op_latencies: the outputs need one row per operator")
    if not (params.shape[0] == fp8_rate.shape[0] == single.shape[1] == intra.shape[1]
            == n_archs):
        raise ValueError("_op_latencies: the per-architecture inputs differ in length")
    # the indices the loop follows unchecked (boundscheck is off)
    if not (_rows_in(&rows[0] if n_archs else NULL, n_archs, n_shapes, n_splits,
                     n_tiles if tile_rule else -1)
            and _tile_splits_in(&tiles[0] if n_tiles else NULL, n_tiles, n_splits)):
        raise ValueError("_op_latencies: a shape, split or tile index out of range")
    scratch = <double*>malloc((4 * n_shapes + n_splits + 2 * n_tiles + 1) * sizeof(double))
    if scratch == NULL:
        raise MemoryError()
    cyc1 = scratch
    bytes1 = cyc1 + n_shapes
    bytes_all = bytes1 + n_shapes
    cycp = bytes_all + n_shapes
    tile1 = cycp + n_splits
    tilep = tile1 + n_tiles
    onchip = tilep + n_tiles
    try:
        with nogil:
            for i in range(n_ops):
                op = &ops[i]
                kd = op.kind
                if kd == KIND_COLLECTIVE:
                    g = op.group_size
                    cb = op.comm_bytes
                    for a in range(n_archs):
                        p = &params[a]
                        r = &rows[a]
                        t = _ring.contiguous_all_reduce(g, cb, r.node_size, r.link_bytes_per_s,
                                                        r.net_bytes_per_s, p.coll_latency_s,
                                                        p.link_step_s, p.net_step_s,
                                                        p.link_efficiency, p.net_efficiency)
                        single[i, a] = t
                        intra[i, a] = t
                    continue
                moved = op.bytes_moved
                attn = op.attention != 0
                cpe = op.cycles_per_element
                if kd == KIND_VECTOR:
                    el = op.elements
                    for a in range(n_archs):
                        r = &rows[a]
                        traffic_s = moved / (r.attention_bw if attn else r.hbm_bw)
                        lanes = r.vc_width
                        t1 = vector_cycles(el, cpe, lanes) / r.clock_hz
                        tp = vector_cycles(el, cpe, lanes * r.num_vc) / r.clock_hz
                        single[i, a] = fmax_py(t1, traffic_s) + r.launch_s
                        intra[i, a] = fmax_py(tp, traffic_s) + r.launch_s
                    continue
                # GEMM or fused GEMM + vector epilogue
                b = op.batch
                m = op.m
                k = op.k
                n = op.n
                gemm_array_terms(b, m, k, n, moved, elem_bytes, acc_bytes, n_shapes,
                                 &shapes[0], single_buffer_fraction, n_splits, &splits[0],
                                 op.in_bytes, cyc1, bytes1, bytes_all, cycp)
                # the calibrated model's fused attention kernel (the study's model prices it
                # as a GEMM): its HBM traffic is the bytes it moves (Q, K, V, the output and
                # the log-sum-exp; the GEMM tiling would write the M×N scores, which never
                # reach HBM)
                flash = op.flash if tile_rule else 0
                if flash != 0:
                    for u in range(n_shapes):
                        bytes1[u] = moved
                        bytes_all[u] = moved
                # the buffer-to-array operand stream (issue 28): 0 for the fused attention
                # kernel, whose tiles stay in the cores (its measured fraction holds)
                for u in range(n_shapes):
                    onchip[u] = 0.0 if flash != 0 else onchip_traffic_bytes(
                        b, m, k, n, shapes[u].w, shapes[u].d, op.in_bytes, acc_bytes)
                # the array model's quantisation and the tile rule's are both real limits:
                # the larger holds (not for the fused attention kernel: its measured fraction
                # of peak is of the whole kernel, priced on the array cycles alone)
                for x in range(n_tiles if flash == 0 else 0):
                    tl = &tiles[x]
                    v = tl.split
                    w = splits[v].w
                    d = splits[v].d
                    tile1[x] = tile_cycles(b, m, k, n, w, d, 1.0, tl.tile_m_mult, tl.tile_n_mult,
                                           tl.tile_k_mult, tl.cores_per_tile, tl.k_stages)
                    tilep[x] = tile_cycles(b, m, k, n, w, d, splits[v].cores, tl.tile_m_mult,
                                           tl.tile_n_mult, tl.tile_k_mult, tl.cores_per_tile,
                                           tl.k_stages)
                fused = kd == KIND_FUSED
                el = op.elements
                fp8 = op.fp8 != 0
                for a in range(n_archs):
                    r = &rows[a]
                    u = r.shape
                    v = r.split
                    c1 = cyc1[u]
                    cp = cycp[v]
                    if tile_rule and flash == 0:
                        x = r.tile
                        c1 = fmax_py(c1, tile1[x])
                        cp = fmax_py(cp, tilep[x])
                    # array steps per second
                    if flash == 1:
                        rate = r.flash_fwd_rate * op.flash_scale[r.flash_curve]
                    elif flash == 2:
                        rate = r.flash_bwd_rate * op.flash_scale[r.flash_curve]
                    else:
                        rate = r.fp8_gemm_rate * fp8_rate[a] if fp8 else r.gemm_rate
                    bwa = r.attention_bw if attn else r.hbm_bw
                    t1 = fmax_py(c1 / rate, bytes1[u] / bwa)
                    tp = fmax_py(cp / rate, bytes_all[u] / bwa)
                    # the buffer delivers onchip_bw to all arrays (its share to one array):
                    # with unlimited delivery (INFINITY) both terms are 0 and change nothing
                    t1 = fmax_py(t1, onchip[u] * splits[v].cores / r.onchip_bw)
                    tp = fmax_py(tp, onchip[u] / r.onchip_bw)
                    if fused:
                        # the epilogue consumes output tiles as the arrays drain them: the
                        # slower stage sets the pace (one VC with one TC; all VCs with all TCs)
                        hz = r.clock_hz
                        lanes = r.vc_width
                        t1 = fmax_py(t1, vector_cycles(el, cpe, lanes) / hz)
                        tp = fmax_py(tp, vector_cycles(el, cpe, lanes * r.num_vc) / hz)
                    single[i, a] = t1 + r.launch_s
                    intra[i, a] = tp + r.launch_s
    finally:
        free(scratch)
