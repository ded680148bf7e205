"""The fused (flash) attention kernel at its measured speed (docs/fidelity-sources.md §1.6).

The calibrated model prices ``flash_attn`` / ``flash_attn.bwd`` at ``flash_fwd_efficiency`` /
``flash_bwd_efficiency`` of the arrays' peak on the study's array cycles (no tile rule), with
the HBM traffic the operator moves. The expected times here are computed by hand from the
papers' TFLOP/s, counting FLOPs as the papers do: 4·(b·heads)·s²·d forward, 2.5 times that
backward, half of each under a causal mask.
"""
import dataclasses

import numpy as np
import pytest

import naive_cost_kernels
from phaze import cost, graph, models
from phaze.arch import _catalog, efficiency, presets, rules

_S = 8192
_HD = 128


def _block(seq_len, t=8):
    """llama3-70b's block (head dim 128, 64 heads: 8 per rank at t = 8), one sample."""
    m = models.replace(models.get("llama3-70b"), seq_len=seq_len)
    mg = graph.build_layers(m, 1, t, flash_attention=True, kernels="megatron")
    return next(layer for layer in mg.layers if layer.kind == "block")


def _index(g, name):
    return g.names.index(name)


def _renamed(g, old, new):
    """``g`` with operator ``old`` renamed ``new`` (no longer the fused attention kernel)."""
    return dataclasses.replace(g, names=[new if n == old else n for n in g.names])


def _paper_flops(heads, s, d, causal, backward):
    f = 4.0 * heads * s * s * d * (2.5 if backward else 1.0)
    return f / 2.0 if causal else f


def test_h100_causal_forward_at_8k_priced_as_cudnn_measures_it():
    # FlashAttention-3 paper, Figure 5 (causal, head dim 128, H100 80GB SXM5): cuDNN 529
    # TFLOP/s at 8K (539 at 16K sets the fraction).
    g = _block(_S).forward
    i = _index(g, "flash_attn")
    _, intra = cost.op_latencies(g, presets.get("h100-sxm"), model="calibrated",
                                 efficiency="h100-sxm")
    measured = _paper_flops(8, _S, _HD, True, False) / 529e12
    assert intra[i, 0] == pytest.approx(measured, rel=0.10)
    assert intra[i, 0] == pytest.approx(measured, rel=0.03)  # in fact within 3 %


def test_h100_backward_at_8k_priced_as_cudnn_measures_it():
    # FlashAttention-3 paper, Figure 6 (no causal mask, head dim 128): cuDNN 518 TFLOP/s at 8K;
    # phaze's causal backward at that rate on the causal half of the FLOPs.
    g = _block(_S).backward
    i = _index(g, "flash_attn.bwd")
    _, intra = cost.op_latencies(g, presets.get("h100-sxm"), model="calibrated",
                                 efficiency="h100-sxm")
    measured = _paper_flops(8, _S, _HD, True, True) / 518e12
    assert intra[i, 0] == pytest.approx(measured, rel=0.10)


def _attention_block(batch, heads, kv_heads, seq_len):
    """A one-layer model whose block has ``heads`` query heads of dimension 128."""
    m = models.ModelSpec(name="attention", n_layers=1, hidden=heads * _HD, heads=heads,
                         kv_heads=kv_heads, ffn_hidden=4 * heads * _HD, vocab=32000,
                         seq_len=seq_len, activation="swiglu", norm="rmsnorm",
                         position="rotary", bias=False)
    mg = graph.build_layers(m, batch, 1, flash_attention=True, kernels="megatron")
    return next(layer for layer in mg.layers if layer.kind == "block")


def test_h100_gqa_forward_and_backward_at_8k_priced_as_te_measures_the_kernels():
    # Transformer Engine's benchmarks/attention/benchmark_attention.py as run in
    # docs/examples/attention/attention.ipynb (NVIDIA/TransformerEngine, 2026; "NVIDIA H100
    # 80GB HBM3"): the cuDNN kernels' nsys durations, forward + backward, of test_3
    # (b = 2, 32 query heads, 4 key/value heads, head dim 128, s = 8192, causal, bf16):
    # 7.4875 ms. Nothing was set from it (the fractions are the FlashAttention-3 paper's).
    block = _attention_block(2, 32, 4, _S)
    row = presets.get("h100-sxm")
    total = 0.0
    for g, name in ((block.forward, "flash_attn"), (block.backward, "flash_attn.bwd")):
        _, intra = cost.op_latencies(g, row, model="calibrated", efficiency="h100-sxm")
        total += intra[_index(g, name), 0]
    assert total == pytest.approx(7.4875e-3, rel=0.02)


def test_a100_forward_at_16k_priced_at_flashattention2s_fraction():
    # FlashAttention-2 paper: forward up to 73 % of the A100's 312 TFLOP/s, backward 63 %.
    blk = _block(16384)
    arch = presets.get("a100-80g")
    for g, name, frac, bwd in ((blk.forward, "flash_attn", 0.73, False),
                               (blk.backward, "flash_attn.bwd", 0.63, True)):
        _, intra = cost.op_latencies(g, arch, model="calibrated", efficiency="a100-80g")
        measured = _paper_flops(8, 16384, _HD, True, bwd) / (frac * 311.87e12)
        assert intra[_index(g, name), 0] == pytest.approx(measured, rel=0.10)


def test_flash_time_is_array_cycles_over_the_fraction_by_hand():
    # the rule itself: 2·b·M·K·N FLOPs at w·d·2·clock per array on all 528 arrays, over the
    # fraction; the study's array cycles quantise nothing here (< 0.1 %)
    g = _block(_S).forward
    i = _index(g, "flash_attn")
    b, m, k, n = (float(x) for x in g.dims[i])
    peak = 528 * 16 * 32 * 2 * 1.83e9
    eff = efficiency.get("h100-sxm")
    _, intra = cost.op_latencies(g, presets.get("h100-sxm"), model="calibrated",
                                 efficiency=eff)
    # at 8K the kernel computes (8192 + 128)/2 = 4160 keys per query: the causal 8K bar, so
    # cuDNN's 529 of the 539 TFLOP/s the fraction was read at (FlashAttention-3, Figure 5)
    assert tuple(g.flash_shape[i]) == (128, 4160)
    by_hand = 2 * b * m * k * n / (peak * eff.flash_fwd_efficiency * 529 / 539) + eff.launch_s
    assert intra[i, 0] == pytest.approx(by_hand, rel=1e-3)
    # without a shape curve: the fraction alone, as measured at 16K
    _, flat = cost.op_latencies(g, presets.get("h100-sxm"), model="calibrated",
                                efficiency=eff, flash_kernel=None)
    assert flat[i, 0] == pytest.approx(
        2 * b * m * k * n / (peak * eff.flash_fwd_efficiency) + eff.launch_s, rel=1e-3)


@pytest.mark.parametrize("chip", ["a100-80g", "h100-sxm", "tpuv4"])
def test_other_operators_unchanged_bit_for_bit(chip):
    # the flash fractions move the flash operators only; with the operator renamed (no
    # longer the fused kernel) every other operator is priced exactly as before
    blk = _block(4096)
    arch = presets.get(chip)
    base = efficiency.get(chip)
    other = dataclasses.replace(base, flash_fwd_efficiency=0.31, flash_bwd_efficiency=0.29)
    for g, name in ((blk.forward, "flash_attn"), (blk.backward, "flash_attn.bwd")):
        keep = np.array([n != name for n in g.names])
        a = cost.op_latencies(g, arch, model="calibrated", efficiency=base)
        b = cost.op_latencies(g, arch, model="calibrated", efficiency=other)
        c = cost.op_latencies(_renamed(g, name, name + "_x"), arch, model="calibrated",
                              efficiency=base)
        for x, y, z in zip(a, b, c):
            assert x[keep].tobytes() == y[keep].tobytes() == z[keep].tobytes()
            assert np.all(y[~keep] >= x[~keep])  # 0.31 / 0.29 are below every preset's
            if chip != "tpuv4":  # (the TPU's flash operator is bound by another stage there)
                assert np.all(y[~keep] > x[~keep])


def test_study_model_prices_the_flash_kernel_as_before():
    blk = _block(4096)
    arch = presets.get("h100-sxm")
    for g, name in ((blk.forward, "flash_attn"), (blk.backward, "flash_attn.bwd")):
        a = cost.op_latencies(g, arch)
        c = cost.op_latencies(_renamed(g, name, name + "_x"), arch)
        for x, z in zip(a, c):
            assert x.tobytes() == z.tobytes()


def test_reference_loop_agrees_on_the_flash_operators():
    blk = _block(4096)
    archs = np.concatenate([presets.get(n) for n in ("a100-80g", "h100-sxm", "tpuv4")])
    eff = efficiency.for_rows(archs)
    for g in (blk.forward, blk.backward):
        a = cost.op_latencies(g, archs, model="calibrated", efficiency=eff)
        r = naive_cost_kernels.op_latencies(g, archs, model="calibrated", efficiency=eff)
        for x, y in zip(a, r):
            np.testing.assert_array_equal(x, y)


def test_calibrated_flash_never_below_its_roofline():
    blk = _block(2048, t=1)
    archs = np.concatenate([presets.get(n) for n in presets.names()])
    eff = efficiency.for_rows(archs)
    for g in (blk.forward, blk.backward):
        lat = cost.op_latencies(g, archs, model="calibrated", efficiency=eff)
        for t, lb in zip(lat, cost.roofline_bounds(g, archs)):
            assert np.all(t >= lb * (1 - 1e-12))


def test_defaults_and_ranges():
    e = efficiency.get("a100-80g")
    fields = {f: getattr(e, f) for f in efficiency.EFFICIENCY_DTYPE.names
              if not f.startswith("flash_")}
    made = efficiency.Efficiency(**fields)
    assert made.flash_fwd_efficiency == made.flash_bwd_efficiency == e.tile_efficiency
    # tpuv4 and the template measured no flash kernel: the rules give their tile_efficiency
    # times the mean flash / tile ratio of the dies that measured both
    for f in ("flash_fwd_efficiency", "flash_bwd_efficiency"):
        ratios = [m[f] / m["tile_efficiency"] for m in _catalog.MEASURED.values()
                  if f in m and "tile_efficiency" in m]
        for name in ("tpuv4", "template"):
            s = efficiency.get(name)
            assert getattr(s, f) == pytest.approx(
                min(1.0, s.tile_efficiency * sum(ratios) / len(ratios)), rel=1e-12)
            assert getattr(s, f) < s.tile_efficiency
    # from the first study's presets, by hand: A100 FlashAttention-2 73 % / 63 % of peak and
    # H100 cuDNN 539 / 516 TFLOP/s over their GEMM fractions
    four = rules.measured_table({n: _catalog.FILES[n] for n in
                                 ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")})
    got, _ = rules.derive(_catalog.FILES["tpuv4"], four)
    peak_h = 528 * 512 * 2 * 1.83e9
    a, h = 271.2e12 / (432 * 256 * 2 * 1.41e9), 808699906572796 / peak_h
    tile = (a + h) / 2
    assert got["flash_fwd_efficiency"] == pytest.approx(
        tile * (0.73 / a + 539e12 / peak_h / h) / 2, rel=1e-12)
    assert got["flash_bwd_efficiency"] == pytest.approx(
        tile * (0.63 / a + 516e12 / peak_h / h) / 2, rel=1e-12)
    assert (round(got["flash_fwd_efficiency"], 4), round(got["flash_bwd_efficiency"], 4)) == \
        (0.6351, 0.5746)
    # the torchtitan hosts' part: FlashAttention-2's fractions, slower than h100-sxm's cuDNN
    h = efficiency.get("h100-96g")
    assert h.flash_fwd_efficiency < efficiency.get("h100-sxm").flash_fwd_efficiency
    assert h.flash_bwd_efficiency < efficiency.get("h100-sxm").flash_bwd_efficiency
    with pytest.raises(ValueError, match="flash_bwd_efficiency"):
        efficiency.Efficiency(**dict(fields, flash_bwd_efficiency=1.5))
    # an array without the flash fields takes each row's tile_efficiency
    arr = np.zeros(1, dtype=[(f, efficiency.EFFICIENCY_DTYPE[f]) for f in fields])
    for f, v in fields.items():
        arr[f] = v
    rows = efficiency.rows(arr, 2)
    assert np.all(rows["flash_fwd_efficiency"] == e.tile_efficiency)


def test_b200_runs_cudnn_at_the_fa4_papers_ratio():
    # FlashAttention-4 (arXiv 2603.05451): forward up to 1613 TFLOP/s on B200 BF16, up to 1.3x
    # cuDNN 9.13; Transformer Engine runs cuDNN, so the preset carries 1613 / 1.3 of 2250
    from phaze.arch import attention_efficiency, resolve
    b200 = resolve("b200")
    assert b200.efficiency_set().flash_fwd_efficiency == pytest.approx(1613 / 1.3 / 2250,
                                                                        rel=1e-12)
    fa4 = attention_efficiency(b200, "fa4")
    assert fa4.flash_fwd_efficiency == pytest.approx(1613 / 2250, rel=1e-12)
    # no backward measured of either kernel: the backward keeps the chip's own fraction
    assert fa4.flash_bwd_efficiency == b200.efficiency_set().flash_bwd_efficiency
    # the GB200's GPU is the same die; an H100 has no FlashAttention-4 measurement
    assert attention_efficiency(resolve("gb200"), "fa4").flash_fwd_efficiency == \
        pytest.approx(1613 / 2250, rel=1e-12)
    with pytest.raises(ValueError, match="attention_kernel 'fa4' has no measurement on h100-sxm"):
        attention_efficiency(resolve("h100-sxm"), "fa4")
