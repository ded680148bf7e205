"""phaze.cost: operator latencies against the slow reference, bounds, monotonicity, bad input."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze import arch, cost
from phaze.arch import ArchSpace, make_archs, presets
from phaze.graph import OpGraph

import naive_cost_kernels
from naive import naive_op_latencies

RTOL = 1e-12


def _gemm(name, b, m, k, n, e=2, kind=0, epilogue=0.0, extra_in=0, preds=()):
    return dict(name=name, kind=kind, dims=(b, m, k, n), cycles_per_element=epilogue,
                elements=b * m * n, bytes_in=e * b * (m * k + k * n) + extra_in,
                bytes_out=e * b * m * n, preds=list(preds))


def _vector(name, elements, cpe, bytes_in, bytes_out, preds=()):
    return dict(name=name, kind=1, elements=elements, cycles_per_element=cpe,
                bytes_in=bytes_in, bytes_out=bytes_out, preds=list(preds))


def _allreduce(name, comm_bytes, group, preds=()):
    return dict(name=name, kind=3, comm_bytes=comm_bytes, group_size=group,
                bytes_in=comm_bytes, bytes_out=comm_bytes, preds=list(preds))


def _graph(*ops):
    return OpGraph.from_ops(list(ops))


# --- strategies --------------------------------------------------------------

_small = st.integers(1, 48)
_gemm_op = st.builds(lambda b, m, k, n, kind, epi, extra: _gemm("x", b, m, k, n, kind=kind, epilogue=epi,
                                                                extra_in=extra),
                     st.integers(1, 3), _small, _small, _small, st.sampled_from([0, 2]),
                     st.sampled_from([0.0, 1.0, 7.5]), st.sampled_from([0, 100, 5000]))
_vector_op = st.builds(lambda el, cpe, bi, bo: _vector("x", el, cpe, bi, bo),
                       st.integers(0, 10 ** 6), st.floats(0, 20), st.integers(0, 10 ** 7), st.integers(0, 10 ** 7))
_coll_op = st.builds(lambda c, g: _allreduce("x", c, g), st.integers(0, 10 ** 8), st.integers(1, 64))
_any_op = st.one_of(_gemm_op, _gemm_op, _vector_op, _coll_op)

_arch = st.fixed_dictionaries(dict(
    num_tc=st.integers(1, 64), tc_width=st.integers(1, 64), tc_depth=st.integers(1, 64),
    num_vc=st.integers(1, 64), vc_width=st.integers(1, 64),
    # tiny buffers (down to ~100 bytes) so that every tiling branch is exercised
    buffer_mib=st.floats(1e-4, 4.0), hbm_gb_per_s=st.floats(0.5, 4000.0), clock_ghz=st.floats(0.2, 3.0),
    link_gb_per_s=st.floats(1.0, 900.0), net_gb_per_s=st.floats(1.0, 400.0), node_size=st.integers(1, 64)))


def _rows(knob_dicts):
    cols = {k: [d[k] for d in knob_dicts] for k in knob_dicts[0]}
    return make_archs(base="tpuv4", **cols)


def _named(ops):
    return [dict(op, name=f"op{i}") for i, op in enumerate(ops)]


# --- agreement with the slow reference --------------------------------------------

@given(ops=st.lists(_any_op, min_size=1, max_size=4), knobs=st.lists(_arch, min_size=1, max_size=3))
def test_matches_naive_reference(ops, knobs):
    g = _graph(*_named(ops))
    archs = _rows(knobs)
    single, intra = cost.op_latencies(g, archs)
    ref_single, ref_intra = naive_op_latencies(g, archs)
    np.testing.assert_allclose(single, ref_single, rtol=RTOL, atol=0)
    np.testing.assert_allclose(intra, ref_intra, rtol=RTOL, atol=0)


def test_matches_naive_on_a_transformer_block_sample():
    g = _graph(_vector("ln", 64 * 96, 5, 2 * 64 * 96, 2 * 64 * 96),
               _gemm("qkv", 1, 64, 96, 144, kind=2, epilogue=1.0, preds=["ln"]),
               _gemm("scores", 6, 64, 16, 64, preds=["qkv"]),
               _vector("softmax", 6 * 64 * 64, 8, 2 * 6 * 64 * 64, 2 * 6 * 64 * 64, preds=["scores"]),
               _gemm("context", 6, 64, 64, 16, preds=["softmax"]),
               _gemm("out", 1, 64, 96, 96, preds=["context"]),
               _allreduce("ar", 2 * 64 * 96, 4, preds=["out"]))
    archs = ArchSpace(num_tc=[1, 4], tc_width=[4, 16], tc_depth=[8, 32], num_vc=[2], buffer_mib=[0.01, 2],
                      lower_fraction=0).configs
    archs = make_archs(**{k: archs[k] for k in arch.KNOBS})
    single, intra = cost.op_latencies(g, archs)
    ref = naive_op_latencies(g, archs)
    np.testing.assert_allclose(single, ref[0], rtol=RTOL)
    np.testing.assert_allclose(intra, ref[1], rtol=RTOL)


# --- bounds and shapes ------------------------------------------------------------

@given(ops=st.lists(_any_op, min_size=1, max_size=4), knobs=st.lists(_arch, min_size=1, max_size=3))
def test_never_below_roofline_and_intra_never_slower(ops, knobs):
    g = _graph(*_named(ops))
    archs = _rows(knobs)
    single, intra = cost.op_latencies(g, archs)
    lb_single, lb_intra = cost.roofline_bounds(g, archs)
    assert np.all(single >= lb_single * (1 - RTOL))
    assert np.all(intra >= lb_intra * (1 - RTOL))
    assert np.all(intra <= single * (1 + RTOL))
    assert np.all(np.isfinite(single)) and np.all(single >= 0)


def test_output_layout():
    g = _graph(_gemm("a", 1, 128, 128, 128), _vector("b", 100, 1, 10, 10, preds=["a"]))
    archs = ArchSpace.default().configs[:37]
    single, intra = cost.op_latencies(g, archs)
    for out in (single, intra):
        assert out.shape == (2, 37) and out.dtype == np.float64 and out.flags.c_contiguous
    # a batch equals its rows computed one at a time (the dedupe changes nothing)
    for j in (0, 17, 36):
        s1, i1 = cost.op_latencies(g, archs[j:j + 1])
        np.testing.assert_array_equal(s1[:, 0], single[:, j])
        np.testing.assert_array_equal(i1[:, 0], intra[:, j])


def test_memoised_inputs_follow_in_place_changes():
    g = _graph(_gemm("a", 1, 512, 512, 512), _vector("b", 10 ** 6, 2, 10, 10, preds=["a"]))
    rows = ArchSpace.default().configs[:64].copy()
    first = cost.op_latencies(g, rows)
    rows["num_tc"] *= 2
    rows["tc_width"][5] = 3
    after = cost.op_latencies(g, rows)
    fresh = cost.op_latencies(g, rows.copy())
    np.testing.assert_array_equal(after[0], fresh[0])
    np.testing.assert_array_equal(after[1], fresh[1])
    assert not np.array_equal(first[1], after[1])


# --- monotonicity ---------------------------------------------------------------

def _latency_pair(ops, **knobs):
    return cost.op_latencies(_graph(*_named(ops)), make_archs(base="tpuv4", **knobs))


@given(ops=st.lists(_any_op, min_size=1, max_size=3), knobs=_arch,
       which=st.sampled_from(["hbm_gb_per_s", "buffer_mib"]), factor=st.floats(1.0, 8.0))
def test_more_bandwidth_or_buffer_never_slower(ops, knobs, which, factor):
    base_s, base_i = _latency_pair(ops, **knobs)
    more = dict(knobs, **{which: knobs[which] * factor})
    s, i = _latency_pair(ops, **more)
    assert np.all(s <= base_s * (1 + RTOL)) and np.all(i <= base_i * (1 + RTOL))


@given(ops=st.lists(_any_op, min_size=1, max_size=3), knobs=_arch, which=st.sampled_from(["num_tc", "num_vc"]))
def test_doubling_cores_never_slower_and_single_ignores_counts(ops, knobs, which):
    base_s, base_i = _latency_pair(ops, **knobs)
    s, i = _latency_pair(ops, **dict(knobs, **{which: knobs[which] * 2}))
    assert np.all(i <= base_i * (1 + RTOL))
    np.testing.assert_array_equal(s, base_s)


def test_gemm_4096_cubed_on_tpuv4_reaches_80_percent_of_peak():
    tpu = presets.get("tpuv4")
    single, intra = cost.op_latencies(_graph(_gemm("g", 1, 4096, 4096, 4096)), tpu)
    flops = 2.0 * 4096 ** 3
    assert flops / intra[0, 0] >= 0.8 * arch.peak_flops(tpu)[0]
    # one core of eight does an eighth of the work
    assert single[0, 0] == pytest.approx(8 * intra[0, 0], rel=0.01)


@pytest.mark.parametrize("preset", presets.names())
def test_m1_gemm_is_bandwidth_bound(preset):
    row = presets.get(preset)
    k = n = 12288
    g = _graph(_gemm("gemv", 1, 1, k, n))
    single, intra = cost.op_latencies(g, row)
    traffic_s = 2.0 * (k + k * n + n) / (row["hbm_gb_per_s"][0] * 1e9)
    assert intra[0, 0] == pytest.approx(traffic_s, rel=1e-12)
    compute_bound = 2.0 * k * n / arch.peak_flops(row)[0]
    assert intra[0, 0] > 2 * compute_bound


def test_small_buffer_costs_traffic():
    # 4096^3 through a 64 KiB buffer re-reads the operands; 128 MiB holds them all
    g = _graph(_gemm("g", 1, 4096, 4096, 4096))
    big, _ = cost.op_latencies(g, make_archs(base="tpuv4", hbm_gb_per_s=50.0))
    small, _ = cost.op_latencies(g, make_archs(base="tpuv4", hbm_gb_per_s=50.0, buffer_mib=1 / 16))
    assert small[0, 0] > 5 * big[0, 0]


def test_attention_bmm_batch_scales_linearly():
    one = cost.op_latencies(_graph(_gemm("s", 1, 2048, 128, 2048)), presets.get("tpuv4"))[0][0, 0]
    many = cost.op_latencies(_graph(_gemm("s", 12, 2048, 128, 2048)), presets.get("tpuv4"))[0][0, 0]
    # twelve times the passes and the traffic; the array fills and drains only once
    assert many == pytest.approx(12 * one, rel=1e-2) and many <= 12 * one


def test_fused_epilogue_overlaps_gemm():
    tpu = presets.get("tpuv4")
    m, k, n, cpe = 2048, 12288, 6144, 9.0
    plain = cost.op_latencies(_graph(_gemm("g", 1, m, k, n)), tpu)
    fused = cost.op_latencies(_graph(_gemm("f", 1, m, k, n, kind=2, epilogue=cpe)), tpu)
    hz = 1.05e9
    epilogue = (np.ceil(m * n / 128) * cpe / hz, np.ceil(m * n / (2 * 128)) * cpe / hz)
    for mode in (0, 1):
        # the slower pipeline stage sets the pace; the sum would be no overlap at all
        assert fused[mode][0, 0] == pytest.approx(max(plain[mode][0, 0], epilogue[mode]), rel=1e-12)
        assert fused[mode][0, 0] < plain[mode][0, 0] + epilogue[mode]


# --- collectives ------------------------------------------------------------------

def test_ring_allreduce_link_inside_node_net_outside():
    g = _graph(_allreduce("a", 10 ** 9, 8), _allreduce("b", 10 ** 9, 16), _allreduce("c", 10 ** 9, 1))
    row = make_archs(base="tpuv4", node_size=8, link_gb_per_s=300.0, net_gb_per_s=25.0)
    single, intra = cost.op_latencies(g, row)
    np.testing.assert_array_equal(single, intra)
    assert single[0, 0] == pytest.approx(2 * 7 / 8 * 1e9 / 300e9, rel=1e-15)
    assert single[1, 0] == pytest.approx(2 * 15 / 16 * 1e9 / 25e9, rel=1e-15)
    assert single[2, 0] == 0.0
    # the original study's 4 GiB/s stays reachable
    slow = make_archs(base="tpuv4", link_gb_per_s=presets.ORIGINAL_STUDY_GB_PER_S)
    assert cost.op_latencies(g, slow)[0][0, 0] == pytest.approx(2 * 7 / 8 * 1e9 / (4 * 2 ** 30), rel=1e-12)


def test_vector_formula():
    row = make_archs(base="tpuv4", num_vc=4, vc_width=128, clock_ghz=1.0, hbm_gb_per_s=1e6)
    g = _graph(_vector("v", 1000, 3.0, 8, 8))
    single, intra = cost.op_latencies(g, row)
    assert single[0, 0] == pytest.approx(8 * 3.0 / 1e9, rel=1e-15)   # ceil(1000/128) = 8
    assert intra[0, 0] == pytest.approx(2 * 3.0 / 1e9, rel=1e-15)    # ceil(1000/512) = 2
    slow_hbm = make_archs(base="tpuv4", hbm_gb_per_s=1.0)
    big = _graph(_vector("v", 10, 1.0, 10 ** 9, 10 ** 9))
    assert cost.op_latencies(big, slow_hbm)[1][0, 0] == pytest.approx(2.0, rel=1e-15)


# --- real layers ------------------------------------------------------------------

def test_gpt3_block_on_presets_is_sane():
    from phaze.graph import build_layers

    archs = np.concatenate([presets.get(n) for n in presets.names()])
    for layer in build_layers("gpt3-175b", 1, 8).layers:
        for g in (layer.forward, layer.backward):
            single, intra = cost.op_latencies(g, archs)
            lb = cost.roofline_bounds(g, archs)
            assert np.all(np.isfinite(single)) and np.all(intra <= single * (1 + RTOL))
            assert np.all(single >= lb[0] * (1 - RTOL)) and np.all(intra >= lb[1] * (1 - RTOL))
            compute = g.kind != 3
            assert np.all(single[compute] > 0)
    # an H100 runs a block faster than a TPU v4 (3.6x the peak, 2.8x the bandwidth)
    block = build_layers("gpt3-175b", 1, 8).layers[1].forward
    _, intra = cost.op_latencies(block, archs)
    compute = block.kind != 3
    total = intra[compute].sum(axis=0)
    assert total[2] < total[0]


# --- compiled == the plain-Python reference -----------------------------------------------

def _bits(pair):
    return np.stack(pair).view(np.int64)


def test_compiled_loop_is_the_reference_bit_for_bit():
    """The operator loop (phaze/cost/_kernels.pyx, an extension module built by setup.py)
    against its plain-Python reference (tests/naive_cost_kernels.py, the loop as it was
    before the Cython port, run as Python) on the same inputs: every bit of every latency."""
    import importlib.machinery

    from phaze.cost import _kernels
    from phaze.graph import build_layers

    assert _kernels.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), \
        _kernels.__file__
    archs = ArchSpace.default().configs[::997]
    ops = [_gemm("a", 2, 300, 700, 500, kind=2, epilogue=3.0, extra_in=4096),
           _gemm("b", 1, 1, 4096, 4096, preds=["a"]),
           _vector("c", 12345, 4.5, 1000, 2000, preds=["b"]),
           _allreduce("d", 10 ** 6, 8, preds=["c"])]
    graphs = [_graph(*ops)] + [g for layer in build_layers("gpt3-175b", 1, 8).layers
                               for g in (layer.forward, layer.backward)]
    for g in graphs:
        compiled = cost.op_latencies(g, archs)
        assert np.all(np.isfinite(compiled[0])) and np.all(np.isfinite(compiled[1]))
        np.testing.assert_array_equal(_bits(compiled), _bits(naive_cost_kernels.op_latencies(g, archs)))


# --- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("num_tc", 0), ("tc_width", 0), ("tc_depth", -2), ("num_vc", 0), ("vc_width", 0), ("buffer_mib", 0.0),
    ("hbm_gb_per_s", -1.0), ("clock_ghz", float("nan")), ("link_gb_per_s", -3.0), ("net_gb_per_s", float("nan")),
    ("node_size", 0), ("hbm_gib", float("inf"))])
def test_bad_arch_knob_names_it(field, value):
    rows = ArchSpace.default().configs[:5].copy()
    rows[field][3] = value
    g = _graph(_gemm("g", 1, 8, 8, 8))
    with pytest.raises(ValueError, match=field):
        cost.op_latencies(g, rows)
    with pytest.raises(ValueError, match=field):
        cost.roofline_bounds(g, rows)


def test_bad_graph_argument():
    with pytest.raises(ValueError, match="op_graph"):
        cost.op_latencies({"kind": [0]}, presets.get("tpuv4"))
    with pytest.raises(ValueError, match="structured"):
        cost.op_latencies(_graph(_gemm("g", 1, 8, 8, 8)), np.ones(13))
