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

The operator loop runs without the GIL: threads may call it in parallel (the search
does). :func:`_cdiv` and :func:`_tile_cycles` are the Python faces of two of its rules,
for the tests.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int8_t, int32_t, int64_t
from libc.stdlib cimport free, malloc

import numpy as np

from .. cimport _ring

from ..graph import KIND_COLLECTIVE as _KC, KIND_FUSED as _KF, KIND_GEMM as _KG, \
    KIND_VECTOR as _KV
from ._records import PARAMS_DTYPE, TILE_DTYPE

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


cdef inline double vector_cycles(double elements, double cycles_per_element,
                                 double lanes) noexcept nogil:
    """Clock cycles of ⌈elements / lanes⌉ lane-steps of ``cycles_per_element`` cycles."""
    if elements == 0.0:
        return 0.0
    return cdiv(elements, lanes) * cycles_per_element


cdef inline void gemm_array_terms(double b, double m, double k, double n, double moved,
                                  double elem_bytes, double acc_bytes, Py_ssize_t n_shapes,
                                  const double* shape_w, const double* shape_d,
                                  const double* shape_cap, double single_buffer_fraction,
                                  Py_ssize_t n_splits, const double* split_w,
                                  const double* split_d, const double* split_cores,
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
        w = shape_w[u]
        d = shape_d[u]
        cyc1[u] = gemm_cycles(b, m, k, n, w, d, 1.0)
        bytes_all[u] = gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes, shape_cap[u], w, d,
                                          in_bytes) + extra
        if single_buffer_fraction == 1.0:
            bytes1[u] = bytes_all[u]
        else:
            bytes1[u] = gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes,
                                           shape_cap[u] * single_buffer_fraction, w, d,
                                           in_bytes) + extra
    for v in range(n_splits):
        cycp[v] = gemm_cycles(b, m, k, n, split_w[v], split_d[v], split_cores[v])


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

cdef bint _indices_in(const int64_t* index, Py_ssize_t n, Py_ssize_t bound) noexcept nogil:
    """Whether every one of the n indices lies in [0, bound)."""
    cdef Py_ssize_t j
    for j in range(n):
        if index[j] < 0 or index[j] >= bound:
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
def _op_latencies(const int8_t[::1] kind, const int64_t[:, ::1] dims, const double[::1] cpe,
                  const int64_t[::1] elements, const double[::1] bytes_moved,
                  const int64_t[::1] comm_bytes, const int32_t[::1] group_size,
                  double elem_bytes, double acc_bytes, double single_buffer_fraction,
                  const double[::1] shape_w, const double[::1] shape_d, const double[::1] shape_cap,
                  const int64_t[::1] shape_of_arch,
                  const double[::1] split_w, const double[::1] split_d, const double[::1] split_cores,
                  const int64_t[::1] split_of_arch,
                  const double[::1] num_vc, const double[::1] vc_width, const double[::1] clock_hz,
                  const double[::1] link_bytes_per_s, const double[::1] net_bytes_per_s,
                  const double[::1] node_size, bint tile_rule, const Tile[::1] tiles,
                  const int64_t[::1] tile_of_arch, const Params[::1] params,
                  const double[::1] gemm_rate, const double[::1] hbm_bw,
                  const double[::1] attention_bw, const double[::1] launch,
                  attention_op, const double[::1] in_bytes, fp8_op, const double[::1] fp8_rate,
                  double[:, ::1] single, double[:, ::1] intra):
    """Fill ``single`` and ``intra`` (n_ops, n_archs), seconds: the one operator loop of both
    cost models.

    Per operator (the ``OpGraph`` columns in their own dtypes): ``kind`` (int8), ``dims``
    (batch, M, K, N; int64), ``cpe`` cycles per element, ``elements`` (int64),
    ``bytes_moved`` (bytes_in + bytes_out, float64), ``comm_bytes`` (int64), ``group_size``
    (int32). GEMM quantities are computed once per distinct (w, d, buffer) — "shapes" — and
    per distinct (w, d, num_tc) — "splits" — then broadcast to the architectures.
    ``params`` (``_records.PARAMS_DTYPE``, one row per architecture): the efficiency
    fractions and latencies, and per row the rates derived from them (memoised with the
    rows): ``gemm_rate`` array steps per second (clock × tile_efficiency), ``hbm_bw`` and
    ``attention_bw`` HBM bytes per second (× hbm_efficiency, × attention_hbm_efficiency),
    ``launch`` seconds (launch_s); ``tile_rule``: whether the tile and wave rule bounds GEMM
    cycles, on the "tiles" ``tiles`` (``_records.TILE_DTYPE``; ``tile_of_arch[a]``: the
    tile of row a). The study's model is this loop with identity parameters (fractions 1,
    latencies 0) and no tile rule: multiplying by 1 and adding 0 are exact, so it gives the
    study's numbers bit for bit. Per operator: ``attention_op`` (bool; its HBM traffic runs
    at ``attention_hbm_efficiency`` instead of ``hbm_efficiency``), ``in_bytes`` (its GEMM
    operands' element size) and ``fp8_op`` (bool; its GEMM runs at ``fp8_rate[a]`` × the
    array rate of architecture a). Scratch for the per-shape, per-split and per-tile terms
    is allocated once per call.
    """
    cdef const unsigned char[::1] attn = np.ascontiguousarray(attention_op, dtype=bool).view(np.uint8)
    cdef const unsigned char[::1] fp8s = np.ascontiguousarray(fp8_op, dtype=bool).view(np.uint8)
    cdef Py_ssize_t n_ops = kind.shape[0]
    cdef Py_ssize_t n_archs = clock_hz.shape[0]
    cdef Py_ssize_t n_tiles = tiles.shape[0] if tile_rule else 0
    cdef Py_ssize_t n_shapes = shape_w.shape[0]
    cdef Py_ssize_t n_splits = split_w.shape[0]
    cdef Py_ssize_t i, a, x, u, v
    cdef int64_t kd
    cdef double g, cb, t, moved, el, traffic_s, lanes, t1, tp, b, m, k, n, w, d, c1, cp
    cdef double rate, hz
    cdef bint fused, fp8
    cdef const double* bw
    cdef const Params* p
    cdef const Tile* tl
    cdef double* scratch
    cdef double* cyc1
    cdef double* bytes1
    cdef double* bytes_all
    cdef double* cycp
    cdef double* tile1
    cdef double* tilep
    if not (dims.shape[0] == cpe.shape[0] == elements.shape[0] == bytes_moved.shape[0]
            == comm_bytes.shape[0] == group_size.shape[0] == attn.shape[0] == in_bytes.shape[0]
            == fp8s.shape[0] == single.shape[0] == intra.shape[0] == n_ops) or dims.shape[1] != 4:
        raise ValueError("_op_latencies: the per-operator arrays differ in length")
    if not (num_vc.shape[0] == vc_width.shape[0] == link_bytes_per_s.shape[0]
            == net_bytes_per_s.shape[0] == node_size.shape[0] == params.shape[0]
            == gemm_rate.shape[0] == hbm_bw.shape[0] == attention_bw.shape[0]
            == launch.shape[0] == fp8_rate.shape[0] == shape_of_arch.shape[0]
            == split_of_arch.shape[0] == single.shape[1] == intra.shape[1] == n_archs) \
            or (tile_rule and tile_of_arch.shape[0] != n_archs):
        raise ValueError("_op_latencies: the per-architecture arrays differ in length")
    if not (shape_d.shape[0] == shape_cap.shape[0] == n_shapes
            and split_d.shape[0] == split_cores.shape[0] == n_splits):
        raise ValueError("_op_latencies: the shape or split arrays differ in length")
    # the indices the loop follows unchecked (boundscheck is off)
    if not (_indices_in(&shape_of_arch[0], n_archs, n_shapes)
            and _indices_in(&split_of_arch[0], n_archs, n_splits)
            and (not tile_rule or _indices_in(&tile_of_arch[0], n_archs, n_tiles))
            and _tile_splits_in(&tiles[0], n_tiles, n_splits)):
        raise ValueError("_op_latencies: a shape, split or tile index out of range")
    scratch = <double*>malloc((3 * n_shapes + n_splits + 2 * n_tiles + 1) * sizeof(double))
    if scratch == NULL:
        raise MemoryError()
    cyc1 = scratch
    bytes1 = cyc1 + n_shapes
    bytes_all = bytes1 + n_shapes
    cycp = bytes_all + n_shapes
    tile1 = cycp + n_splits
    tilep = tile1 + n_tiles
    try:
        with nogil:
            for i in range(n_ops):
                kd = kind[i]
                if kd == KIND_COLLECTIVE:
                    g = <double>group_size[i]
                    cb = <double>comm_bytes[i]
                    for a in range(n_archs):
                        p = &params[a]
                        t = _ring.contiguous_all_reduce(g, cb, node_size[a], link_bytes_per_s[a],
                                                        net_bytes_per_s[a], p.coll_latency_s,
                                                        p.link_step_s, p.net_step_s,
                                                        p.link_efficiency, p.net_efficiency)
                        single[i, a] = t
                        intra[i, a] = t
                    continue
                moved = bytes_moved[i]
                bw = &attention_bw[0] if attn[i] else &hbm_bw[0]
                if kd == KIND_VECTOR:
                    el = <double>elements[i]
                    for a in range(n_archs):
                        traffic_s = moved / bw[a]
                        lanes = vc_width[a]
                        t1 = vector_cycles(el, cpe[i], lanes) / clock_hz[a]
                        tp = vector_cycles(el, cpe[i], lanes * num_vc[a]) / clock_hz[a]
                        single[i, a] = fmax_py(t1, traffic_s) + launch[a]
                        intra[i, a] = fmax_py(tp, traffic_s) + launch[a]
                    continue
                # GEMM or fused GEMM + vector epilogue
                b = <double>dims[i, 0]
                m = <double>dims[i, 1]
                k = <double>dims[i, 2]
                n = <double>dims[i, 3]
                gemm_array_terms(b, m, k, n, moved, elem_bytes, acc_bytes, n_shapes,
                                 &shape_w[0], &shape_d[0], &shape_cap[0],
                                 single_buffer_fraction, n_splits, &split_w[0], &split_d[0],
                                 &split_cores[0], in_bytes[i], cyc1, bytes1, bytes_all, cycp)
                # the array model's quantisation and the tile rule's are both real limits:
                # the larger holds
                for x in range(n_tiles):
                    tl = &tiles[x]
                    v = tl.split
                    w = split_w[v]
                    d = split_d[v]
                    tile1[x] = tile_cycles(b, m, k, n, w, d, 1.0, tl.tile_m_mult, tl.tile_n_mult,
                                           tl.tile_k_mult, tl.cores_per_tile, tl.k_stages)
                    tilep[x] = tile_cycles(b, m, k, n, w, d, split_cores[v], tl.tile_m_mult,
                                           tl.tile_n_mult, tl.tile_k_mult, tl.cores_per_tile,
                                           tl.k_stages)
                fused = kd == KIND_FUSED
                el = <double>elements[i]
                fp8 = fp8s[i] != 0
                for a in range(n_archs):
                    u = shape_of_arch[a]
                    v = split_of_arch[a]
                    c1 = cyc1[u]
                    cp = cycp[v]
                    if tile_rule:
                        x = tile_of_arch[a]
                        c1 = fmax_py(c1, tile1[x])
                        cp = fmax_py(cp, tilep[x])
                    # array steps per second
                    rate = gemm_rate[a] * fp8_rate[a] if fp8 else gemm_rate[a]
                    t1 = fmax_py(c1 / rate, bytes1[u] / bw[a])
                    tp = fmax_py(cp / rate, bytes_all[u] / bw[a])
                    if fused:
                        # the epilogue consumes output tiles as the arrays drain them: the
                        # slower stage sets the pace (one VC with one TC; all VCs with all TCs)
                        hz = clock_hz[a]
                        lanes = vc_width[a]
                        t1 = fmax_py(t1, vector_cycles(el, cpe[i], lanes) / hz)
                        tp = fmax_py(tp, vector_cycles(el, cpe[i], lanes * num_vc[a]) / hz)
                    single[i, a] = t1 + launch[a]
                    intra[i, a] = tp + launch[a]
    finally:
        free(scratch)
