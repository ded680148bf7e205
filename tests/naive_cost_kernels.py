"""The operator cost kernels as phaze ran them in numba before they were compiled ahead of
time (phaze/cost/_kernels.pyx), run as plain Python: the slow reference tests/test_cost.py,
tests/test_cost_calibrated.py, tests/test_dtype.py and tests/test_search.py hold the Cython
operator loop to, bit for bit (this is ``phaze/cost/_kernels.py`` of commit 6f02363 with the
``@njit`` decorators gone and the collectives taken from tests/naive_collectives.py; numba
compiled these functions, and the suite ran them as plain Python under NUMBA_DISABLE_JIT=1
with the same answers). :func:`op_latencies` is ``phaze.cost.op_latencies`` with this
module's :func:`_op_latencies` in place of the compiled one: the same prepared inputs, the
reference's arithmetic.

One operator loop, :func:`_op_latencies`, prices both cost models: the calibrated one
with each row's efficiency parameters (a ``_records.PARAMS_DTYPE`` record per row)
and the tile and wave rule, the study's with the identity parameters (fractions 1, latencies 0)
and no tile rule, which reproduces the study's ideal model bit for bit (x·1, x/1 and
x + 0 are exact). The models are documented in ``phaze/cost/_latency.py``; the functions
here are their literal transcription.
"""

import math

import numpy as np

from naive_collectives import contiguous_all_reduce_seconds
from phaze.graph import KIND_COLLECTIVE, KIND_FUSED, KIND_VECTOR


def _cdiv(a, b):
    """⌈a / b⌉ for non-negative integral floats, as a float.

    Exact for a < 2**52: the correctly rounded quotient of two integers keeps any
    fractional part ≥ 1/b there, so ceil never rounds it away.
    """
    return float(math.ceil(a / b))


def _sum_bytes(in_bytes, out_bytes, a, b, c):
    """in_bytes·(a + b) + out_bytes·c: operand elements a, b and output elements c. With
    one element size it is computed as in_bytes·(a + b + c), the 16-bit graphs' old sum."""
    if in_bytes == out_bytes:
        return in_bytes * (a + b + c)
    return in_bytes * (a + b) + out_bytes * c


def _gemm_traffic_bytes(batch, m, k, n, elem_bytes, acc_bytes, cap_bytes, tc_width, tc_depth,
                        in_bytes):
    """HBM bytes moved by a batch of M×K×N GEMMs staged through ``cap_bytes`` of buffer.

    The least traffic of three tilings (see phaze.cost): output-stationary C tiles with
    double-buffered K-strips, an A row-block kept resident, or a B column-block kept
    resident. Falls back to no reuse at all when not even a 1×1 tile fits. A and B have
    ``in_bytes`` per element (1 for an FP8 GEMM), C ``elem_bytes``.
    """
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    e_out = elem_bytes
    elem_bytes = in_bytes  # the operands' element size sets the strips and resident blocks
    kc = min(tc_depth, k)
    best = math.inf
    # (a) output-stationary: a tm×tn tile of C accumulates in the buffer while
    # double-buffered tm×kc strips of A and kc×tn strips of B stream through.
    # need = acc·tm·tn + 2·e·kc·(tm + tn); traffic = e·(MK⌈N/tn⌉ + KN⌈M/tm⌉ + MN).
    # M is split into r = 1, 2, 4, … tiles; for each, the widest tn that fits.
    r = 1.0
    while True:
        tm = _cdiv(m, r)
        room = cap_bytes - 2.0 * elem_bytes * kc * tm
        if room > 0.0:
            tn = min(n, math.floor(room / (acc_bytes * tm + 2.0 * elem_bytes * kc)))
            if tn >= 1.0:
                t = _sum_bytes(elem_bytes, e_out, m * k * _cdiv(n, tn), k * n * _cdiv(m, tm), m * n)
                if t < best:
                    best = t
        if tm <= 1.0:
            break
        r *= 2.0
    # (b) A resident: a tm×K block of A stays while kc×tn strips of B (tn = one array
    # width) stream past; A is read once, B once per row block.
    tn = min(n, tc_width)
    room = cap_bytes - 2.0 * elem_bytes * kc * tn
    if room > 0.0:
        tm = min(m, math.floor(room / (elem_bytes * k + acc_bytes * tn)))
        if tm >= 1.0:
            t = _sum_bytes(elem_bytes, e_out, m * k, k * n * _cdiv(m, tm), m * n)
            if t < best:
                best = t
    # (c) B resident: a K×tn block of B stays while tm×kc strips of A (tm = one array
    # width of rows) stream past; B is read once, A once per column block.
    tm = min(m, tc_width)
    room = cap_bytes - 2.0 * elem_bytes * kc * tm
    if room > 0.0:
        tn = min(n, math.floor(room / (elem_bytes * k + acc_bytes * tm)))
        if tn >= 1.0:
            t = _sum_bytes(elem_bytes, e_out, m * k * _cdiv(n, tn), k * n, m * n)
            if t < best:
                best = t
    if best == math.inf:  # nothing fits: every multiply-accumulate fetches both operands
        best = _sum_bytes(elem_bytes, e_out, m * k * n, m * k * n, m * n)
    return batch * best


def _gemm_cycles(batch, m, k, n, tc_width, tc_depth, cores):
    """Clock cycles of a batch of M×K×N GEMMs on ``cores`` weight-stationary arrays.

    A pass holds one tc_depth×tc_width tile of B and streams rows of A; passes are
    the units of work, dealt out evenly to the cores. Rows may be split into
    s = 1, 2, 4, … ≤ cores chunks to create more passes; the best split is kept.
    """
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    tiles = batch * _cdiv(k, tc_depth) * _cdiv(n, tc_width)
    fill_drain = tc_depth + tc_width - 1.0
    best = math.inf
    s = 1.0
    while True:
        rows = _cdiv(m, s)
        per_core = _cdiv(tiles * s, cores)
        c = per_core * max(rows, tc_depth) + fill_drain
        if c < best:
            best = c
        if s >= cores or s >= m:
            break
        s *= 2.0
    return best


def _vector_cycles(elements, cycles_per_element, lanes):
    """Clock cycles of ⌈elements / lanes⌉ lane-steps of ``cycles_per_element`` cycles."""
    if elements == 0.0:
        return 0.0
    return _cdiv(elements, lanes) * cycles_per_element


def _gemm_array_terms(b, m, k, n, moved, elem_bytes, acc_bytes, shape_w, shape_d, shape_cap,
                      single_buffer_fraction, split_w, split_d, split_cores, in_bytes):
    """The systolic-array terms of one GEMM that both cost models share.

    Returns (cycles on one array, HBM bytes with the single-core buffer share, HBM bytes
    with the whole buffer) per distinct core shape, and cycles intra-op per distinct
    (shape, core count) split. Bytes the operator moves besides its GEMM operands (a
    fused bias or residual) are added once to each traffic. ``in_bytes``: element size of
    A and B (``elem_bytes``, or 1 for an FP8 GEMM).
    """
    n_shapes = shape_w.shape[0]
    n_splits = split_w.shape[0]
    if in_bytes == elem_bytes:
        compulsory = elem_bytes * b * (m * k + k * n + m * n)
    else:
        compulsory = b * (in_bytes * (m * k + k * n) + elem_bytes * m * n)
    extra = max(0.0, moved - compulsory)  # bytes the op moves besides its GEMM operands
    cyc1 = np.empty(n_shapes)
    bytes1 = np.empty(n_shapes)
    bytes_all = np.empty(n_shapes)
    for u in range(n_shapes):
        w = float(shape_w[u])
        d = float(shape_d[u])
        cyc1[u] = _gemm_cycles(b, m, k, n, w, d, 1.0)
        bytes_all[u] = _gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes, shape_cap[u], w, d,
                                           in_bytes) + extra
        if single_buffer_fraction == 1.0:
            bytes1[u] = bytes_all[u]
        else:
            bytes1[u] = _gemm_traffic_bytes(b, m, k, n, elem_bytes, acc_bytes,
                                            shape_cap[u] * single_buffer_fraction, w, d,
                                            in_bytes) + extra
    cycp = np.empty(n_splits)
    for v in range(n_splits):
        cycp[v] = _gemm_cycles(b, m, k, n, float(split_w[v]), float(split_d[v]), float(split_cores[v]))
    return cyc1, bytes1, bytes_all, cycp


# --- the calibrated model's rules (phaze.cost, "calibrated model") ----------------------

def _tile_cycles(batch, m, k, n, tc_width, tc_depth, cores, tile_m_mult, tile_n_mult, tile_k_mult,
                 cores_per_tile, k_stages):
    """Clock cycles of a batch of M×K×N GEMMs under the tile and wave rule (at full array rate).

    Output tiles of (tile_m_mult·w) × (tile_n_mult·w) elements, partial edge tiles
    costing full ones, are dealt in waves to ⌊cores / c⌋ groups of c = min(cores_per_tile,
    cores) arrays; a tile runs ⌈K / (tile_k_mult·d)⌉ K-steps plus ``k_stages − 1`` to fill
    and drain its pipeline, each step ``tile_m·tile_n·tile_k / (c·w·d)`` cycles.
    """
    if batch == 0.0 or m == 0.0 or k == 0.0 or n == 0.0:
        return 0.0
    c = min(cores_per_tile, cores)
    groups = math.floor(cores / c)
    tiles = batch * _cdiv(m, tile_m_mult * tc_width) * _cdiv(n, tile_n_mult * tc_width)
    waves = _cdiv(tiles, groups)
    steps = _cdiv(k, tile_k_mult * tc_depth) + (k_stages - 1.0)
    # tile_m·tile_n·tile_k / (w·d) = tile_m_mult·tile_n_mult·tile_k_mult·w cycles per array
    return waves * steps * (tile_m_mult * tile_n_mult * tile_k_mult * tc_width) / c


def _op_latencies(kind, dims, cpe, elements, bytes_moved, comm_bytes, group_size,
                  elem_bytes, acc_bytes, single_buffer_fraction,
                  shape_w, shape_d, shape_cap, shape_of_arch,
                  split_w, split_d, split_cores, split_of_arch,
                  num_vc, vc_width, clock_hz, link_bytes_per_s, net_bytes_per_s,
                  node_size, tile_rule, tiles, tile_of_arch, params,
                  gemm_rate, fp8_gemm_rate, hbm_bw, attention_bw, launch,
                  attention_op, in_bytes, fp8_op, fp8_rate, single, intra,
                  flash_op=None, flash_fwd_rate=None, flash_bwd_rate=None, flash_scale=None,
                  flash_curve=None):
    """Fill ``single`` and ``intra`` (n_ops, n_archs), seconds: the one operator loop of both
    cost models.

    GEMM quantities are computed once per distinct (w, d, buffer) — "shapes" — and
    per distinct (w, d, num_tc) — "splits" — then broadcast to the architectures.
    ``params`` (``_records.PARAMS_DTYPE``, one row per architecture): the efficiency
    fractions and latencies, and per row the rates derived from them (memoised with the
    rows): ``gemm_rate`` array steps per second (clock × tile_efficiency; ``fp8_gemm_rate``
    clock × fp8_tile_efficiency for FP8 GEMMs), ``hbm_bw`` and
    ``attention_bw`` HBM bytes per second (× hbm_efficiency, × attention_hbm_efficiency),
    ``launch`` seconds (launch_s); ``tile_rule``: whether the tile and wave rule bounds GEMM
    cycles, on the "tiles" ``tiles`` (``_records.TILE_DTYPE``; ``tile_of_arch[a]``: the
    tile of row a). The
    study's model is this loop with identity parameters (fractions 1, latencies 0) and no
    tile rule: multiplying by 1 and adding 0 are exact, so it gives the study's numbers
    bit for bit. Per operator: ``attention_op`` (its HBM traffic runs at
    ``attention_hbm_efficiency`` instead of ``hbm_efficiency``), ``in_bytes`` (its GEMM
    operands' element size) and ``fp8_op`` (its GEMM runs at ``fp8_rate[a]`` × the FP8
    array rate of architecture a); ``flash_op`` (1: the fused attention forward, 2: its
    backward, 0: neither; ``phaze.cost._records.FLASH_OPS``): its array cycles, without the
    tile rule, run at ``flash_fwd_rate[a]`` / ``flash_bwd_rate[a]`` array steps per second
    (clock × flash_fwd_efficiency / flash_bwd_efficiency) times ``flash_scale[i, c]`` with
    c = ``flash_curve[a]`` (the kernel's speed at the operator's shape over its measured
    one on row a's curve; None: 1).
    """
    n_ops = kind.shape[0]
    n_archs = clock_hz.shape[0]
    n_tiles = tiles.shape[0] if tile_rule else 0
    for i in range(n_ops):
        kd = kind[i]
        if kd == KIND_COLLECTIVE:
            g = float(group_size[i])
            cb = float(comm_bytes[i])
            for a in range(n_archs):
                p = params[a]
                t = contiguous_all_reduce_seconds(g, cb, node_size[a], link_bytes_per_s[a],
                                                  net_bytes_per_s[a], p["coll_latency_s"],
                                                  p["link_step_s"], p["net_step_s"],
                                                  p["link_efficiency"], p["net_efficiency"])
                single[i, a] = t
                intra[i, a] = t
            continue
        moved = float(bytes_moved[i])
        bw = attention_bw if attention_op[i] else hbm_bw
        if kd == KIND_VECTOR:
            el = float(elements[i])
            for a in range(n_archs):
                traffic_s = moved / bw[a]
                lanes = float(vc_width[a])
                t1 = _vector_cycles(el, cpe[i], lanes) / clock_hz[a]
                tp = _vector_cycles(el, cpe[i], lanes * num_vc[a]) / clock_hz[a]
                single[i, a] = max(t1, traffic_s) + launch[a]
                intra[i, a] = max(tp, traffic_s) + launch[a]
            continue
        # GEMM or fused GEMM + vector epilogue
        b = float(dims[i, 0])
        m = float(dims[i, 1])
        k = float(dims[i, 2])
        n = float(dims[i, 3])
        cyc1, bytes1, bytes_all, cycp = _gemm_array_terms(
            b, m, k, n, moved, elem_bytes, acc_bytes, shape_w, shape_d, shape_cap,
            single_buffer_fraction, split_w, split_d, split_cores, in_bytes[i])
        # the array model's quantisation and the tile rule's are both real limits: the larger holds
        # the calibrated model's fused attention kernel (tile_rule: the calibrated model):
        # its HBM traffic is the bytes it moves, not the GEMM tiling's (which writes M×N)
        flash = 0 if flash_op is None or not tile_rule else int(flash_op[i])
        if flash:
            bytes1 = np.full_like(bytes1, moved)
            bytes_all = np.full_like(bytes_all, moved)
        tile1 = np.empty(n_tiles)
        tilep = np.empty(n_tiles)
        for x in range(n_tiles if flash == 0 else 0):
            tl = tiles[x]
            v = tl["split"]
            w = float(split_w[v])
            d = float(split_d[v])
            tile1[x] = _tile_cycles(b, m, k, n, w, d, 1.0, tl["tile_m_mult"], tl["tile_n_mult"],
                                    tl["tile_k_mult"], tl["cores_per_tile"], tl["k_stages"])
            tilep[x] = _tile_cycles(b, m, k, n, w, d, float(split_cores[v]), tl["tile_m_mult"],
                                    tl["tile_n_mult"], tl["tile_k_mult"], tl["cores_per_tile"],
                                    tl["k_stages"])
        fused = kd == KIND_FUSED
        el = float(elements[i])
        fp8 = fp8_op[i]
        for a in range(n_archs):
            u = shape_of_arch[a]
            v = split_of_arch[a]
            c1 = cyc1[u]
            cp = cycp[v]
            if tile_rule and flash == 0:  # the fused attention kernel: its measured fraction
                x = tile_of_arch[a]
                c1 = max(c1, tile1[x])
                cp = max(cp, tilep[x])
            scale = 1.0 if flash_scale is None else float(flash_scale[i, flash_curve[a]])
            if flash == 1:
                rate = flash_fwd_rate[a] * scale
            elif flash == 2:
                rate = flash_bwd_rate[a] * scale
            else:
                rate = fp8_gemm_rate[a] * fp8_rate[a] if fp8 else gemm_rate[a]  # steps per second
            t1 = max(c1 / rate, bytes1[u] / bw[a])
            tp = max(cp / rate, bytes_all[u] / bw[a])
            if fused:
                # the epilogue consumes output tiles as the arrays drain them: the slower
                # stage sets the pace (one VC with one TC; all VCs with all TCs)
                hz = clock_hz[a]
                lanes = float(vc_width[a])
                t1 = max(t1, _vector_cycles(el, cpe[i], lanes) / hz)
                tp = max(tp, _vector_cycles(el, cpe[i], lanes * num_vc[a]) / hz)
            single[i, a] = t1 + launch[a]
            intra[i, a] = tp + launch[a]


# --- the Python face: phaze.cost.op_latencies on this operator loop -------------------------

#: Calls of :func:`_op_latencies` made through :func:`op_latencies` (a test checks that the
#: reference ran, not the compiled loop twice).
calls = 0


def _counted(ops, rows, params, shapes, splits, tiles, tile_rule, fp8_rate, elem_bytes,
             acc_bytes, single_buffer_fraction, single, intra):
    """The compiled loop's record arguments (``phaze.cost._records``) unpacked into the
    arrays the numba-era loop took, then that loop."""
    global calls
    calls += 1
    dims = np.stack([ops[f] for f in ("batch", "m", "k", "n")], axis=1).astype(np.int64)
    _op_latencies(
        ops["kind"].astype(np.int64), dims, ops["cycles_per_element"].astype(np.float64),
        ops["elements"].astype(np.int64), ops["bytes_moved"].astype(np.float64),
        ops["comm_bytes"].astype(np.int64), ops["group_size"].astype(np.int64),
        elem_bytes, acc_bytes, single_buffer_fraction,
        shapes["w"].copy(), shapes["d"].copy(), shapes["cap"].copy(), rows["shape"].copy(),
        splits["w"].copy(), splits["d"].copy(), splits["cores"].copy(), rows["split"].copy(),
        rows["num_vc"].copy(), rows["vc_width"].copy(), rows["clock_hz"].copy(),
        rows["link_bytes_per_s"].copy(), rows["net_bytes_per_s"].copy(),
        rows["node_size"].copy(), tile_rule, tiles, rows["tile"].copy(), params,
        rows["gemm_rate"].copy(), rows["fp8_gemm_rate"].copy(), rows["hbm_bw"].copy(),
        rows["attention_bw"].copy(),
        rows["launch_s"].copy(), ops["attention"] != 0, ops["in_bytes"].copy(),
        ops["fp8"] != 0, np.asarray(fp8_rate), single, intra, ops["flash"].astype(np.int64),
        rows["flash_fwd_rate"].copy(), rows["flash_bwd_rate"].copy(), ops["flash_scale"].copy(),
        rows["flash_curve"].copy())


def op_latencies(*args, **kwargs):
    """``phaze.cost.op_latencies(*args, **kwargs)`` with :func:`_op_latencies` in place of
    the compiled ``phaze.cost._kernels._op_latencies`` for the call: phaze prepares the
    inputs (graph columns, architecture shapes and splits, parameter records) as always,
    and this module does the arithmetic. Raises if the compiled loop was not replaced."""
    from phaze import cost
    from phaze.cost import _kernels as compiled

    before = calls
    real = compiled._op_latencies
    compiled._op_latencies = _counted
    try:
        out = cost.op_latencies(*args, **kwargs)
    finally:
        compiled._op_latencies = real
    assert calls == before + 1, "phaze.cost.op_latencies did not call _kernels._op_latencies"
    return out
