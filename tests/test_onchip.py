"""On-chip bandwidth (issue 28): the buffer-to-array operand stream of a GEMM and the time it
takes at the buffer's delivery rate, against sums written out here."""
import math

import numpy as np
import pytest

from phaze import cost
from phaze.arch import ENERGY_DTYPE, make_archs, presets
from phaze.cost import _kernels
from phaze.graph import build_layers


def naive_onchip_bytes(batch, m, k, n, w, d, e, acc):
    """Tile by tile: every pass over a d×w weight tile loads the tile, streams M rows of A
    (its d-element slices), writes M×w partial sums and reads them back unless it is the
    first pass over K."""
    total = 0.0
    for _ in range(batch):
        for k0 in range(0, k, d):
            kk = min(d, k - k0)
            for n0 in range(0, n, w):
                nn = min(w, n - n0)
                total += e * kk * nn          # the weight tile
                total += e * m * kk           # A's rows through it
                total += acc * m * nn * (1 if k0 == 0 else 2)
    return total


@pytest.mark.parametrize("dims", [(1, 64, 96, 80, 8, 8), (2, 33, 17, 50, 16, 4),
                                  (1, 128, 512, 256, 128, 128), (3, 5, 7, 9, 2, 16)])
def test_onchip_bytes_equal_the_tile_by_tile_count(dims):
    b, m, k, n, w, d = dims
    for e, acc in ((2.0, 4.0), (1.0, 4.0)):
        assert _kernels._onchip_traffic_bytes(b, m, k, n, w, d, e, acc) == pytest.approx(
            naive_onchip_bytes(b, m, k, n, w, d, e, acc), rel=1e-12)


def test_the_cost_face_counts_every_gemm_on_every_array_shape_tile_by_tile():
    dims = np.array([(1, 64, 96, 80), (2, 33, 17, 50), (3, 5, 7, 9), (1, 0, 7, 9)], float)
    e = np.array([2.0, 1.0, 2.0, 2.0])
    w, d = np.array([8.0, 16.0, 2.0]), np.array([8.0, 4.0, 16.0])
    got = cost.onchip_bytes(dims, e, w, d)
    assert got.shape == (4, 3)
    assert np.all(got[3] == 0.0)            # a GEMM with no rows moves nothing
    for i, (b, m, k, n) in enumerate(dims[:3].astype(int)):
        for j in range(3):
            want = naive_onchip_bytes(b, m, k, n, int(w[j]), int(d[j]), e[i], 4.0)
            assert got[i, j] == pytest.approx(want, rel=1e-12)
            # the operator loop's own formula, bit for bit
            assert got[i, j] == _kernels._onchip_traffic_bytes(b, m, k, n, w[j], d[j], e[i], 4.0)
    assert cost.onchip_bytes(dims, e, w, d, acc_bytes=2.0)[0, 0] == pytest.approx(
        naive_onchip_bytes(1, 64, 96, 80, 8, 8, 2.0, 2.0), rel=1e-12)
    assert cost.onchip_bytes(np.zeros((0, 4)), [], w, d).shape == (0, 3)
    with pytest.raises(ValueError, match="dims must be a"):
        cost.onchip_bytes(dims[:, :3], e, w, d)
    with pytest.raises(ValueError, match="tc_width and tc_depth"):
        cost.onchip_bytes(dims, e, w, d[:2])


def test_the_steps_energy_counts_the_cost_faces_bytes():
    from phaze import graph as _graph
    from phaze.step import _energy
    g = build_layers("gpt3-175b", 1, 8).layers[1].forward
    rows = _rows()
    e = np.zeros(len(rows), dtype=ENERGY_DTYPE)
    e["sram_j_per_byte"] = 1.0
    got = _energy.graph_energy(g, rows, e, 8)["sram"]
    gemm = ((g.kind == _graph.KIND_GEMM) | (g.kind == _graph.KIND_FUSED)) & ~np.isin(
        np.asarray(g.names), ["flash_attn", "flash_attn.bwd"])
    flash = np.isin(np.asarray(g.names), ["flash_attn", "flash_attn.bwd"])
    streamed = float((g.bytes_in + g.bytes_out)[flash | (g.kind == _graph.KIND_VECTOR)].sum())
    for j, (w, d) in enumerate(zip(rows["tc_width"], rows["tc_depth"])):
        want = sum(naive_onchip_bytes(*(int(x) for x in g.dims[i]), int(w), int(d),
                                      float(_graph_in_bytes(g, i)), 4.0)
                   for i in np.flatnonzero(gemm))
        assert got[j] == pytest.approx(want + streamed, rel=1e-12)


def _graph_in_bytes(g, i):
    from phaze import precision
    return precision.FP8_BYTES if g.fp8[i] else g.bytes_per_element


def test_small_arrays_need_32x_the_operand_bytes_of_large_ones():
    # the figure: per multiply-accumulate ≈ e/w + 2·acc/d
    m = k = n = 4096
    small = _kernels._onchip_traffic_bytes(1, m, k, n, 8, 8, 2.0, 4.0)
    large = _kernels._onchip_traffic_bytes(1, m, k, n, 256, 256, 2.0, 4.0)
    assert small / large == pytest.approx((2 / 8 + 8 / 8) / (2 / 256 + 8 / 256), rel=0.02)
    assert 31 < small / large < 33


def _rows():
    return np.concatenate([presets.get("tpuv4"), make_archs(base="tpuv4", num_tc=4096,
                                                            tc_width=8, tc_depth=8)])


@pytest.mark.parametrize("model", ["study", "calibrated"])
def test_ample_bandwidth_is_exactly_todays_latency(model):
    rows = _rows()
    g = build_layers("gpt3-175b", 1, 8).layers[1].forward
    base = cost.op_latencies(g, rows, model=model)
    for bpc in (np.inf, 1e30):
        got = cost.op_latencies(g, rows, model=model, buffer_bytes_per_cycle=bpc)
        assert np.array_equal(got[0], base[0]) and np.array_equal(got[1], base[1])


def test_a_tenth_of_the_bandwidth_is_slower_on_a_gemm_bound_layer():
    rows = presets.get("tpuv4")
    g = build_layers("gpt3-175b", 1, 8).layers[1].forward
    gemm = np.flatnonzero(g.kind == 0)
    clock = rows["clock_ghz"][0] * 1e9
    base = cost.op_latencies(g, rows, model="calibrated")[1][:, 0]
    # the chip's arrays at full rate: 8 arrays × (2·128 + 2·4·128) bytes per cycle
    demand = 8 * (2 * 128 + 8 * 128)
    ample = cost.op_latencies(g, rows, model="calibrated", buffer_bytes_per_cycle=demand * 10)
    tenth = cost.op_latencies(g, rows, model="calibrated", buffer_bytes_per_cycle=demand / 10)
    assert np.array_equal(ample[1][:, 0], base)
    assert tenth[1][:, 0].sum() > 2 * base.sum()
    # a bandwidth-bound GEMM takes exactly its operand bytes over the delivery rate
    i = gemm[np.argmax(g.dims[gemm, 1] * g.dims[gemm, 2] * g.dims[gemm, 3])]
    bt, m, k, n = (float(x) for x in g.dims[i])
    want = naive_onchip_bytes(int(bt), int(m), int(k), int(n), 128, 128,
                              float(g.bytes_per_element), 4.0) / (demand / 10 * clock)
    assert tenth[1][i, 0] == pytest.approx(want + _launch_s(rows), rel=1e-9)


def _launch_s(rows):
    from phaze.arch import efficiency
    return float(efficiency.for_rows(rows)["launch_s"][0])


def test_one_array_gets_its_share_of_the_buffer():
    rows = presets.get("tpuv4")
    g = build_layers("gpt3-175b", 1, 8).layers[1].forward
    single, intra = cost.op_latencies(g, rows, model="study", buffer_bytes_per_cycle=64.0)
    i = int(np.flatnonzero(g.kind == 0)[0])
    bt, m, k, n = (int(x) for x in g.dims[i])
    nbytes = naive_onchip_bytes(bt, m, k, n, 128, 128, float(g.bytes_per_element), 4.0)
    clock = rows["clock_ghz"][0] * 1e9
    assert intra[i, 0] >= nbytes / (64.0 * clock) * (1 - 1e-12)
    assert single[i, 0] >= nbytes / (64.0 / 8 * clock) * (1 - 1e-12)
    assert math.isclose(single[i, 0], nbytes / (8.0 * clock), rel_tol=1e-9)


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_bad_bandwidth_is_refused_in_one_sentence(bad):
    with pytest.raises(ValueError, match="buffer_bytes_per_cycle must be a number > 0"):
        cost.op_latencies(build_layers("gpt3-175b", 1, 8).layers[1].forward,
                          presets.get("tpuv4"), buffer_bytes_per_cycle=bad)
