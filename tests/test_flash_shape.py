"""The fused attention kernel's speed by shape (``phaze.arch.attention_shape_factor``;
docs/fidelity-sources.md §1.6): its measured rate at an operator's head dimension and keys
per query over its rate at the shape the chips' flash fractions were read at (causal
forward / unmasked backward, head dimension 128, 16K tokens). The expected values are the
FlashAttention-3 paper's bars (Figures 5-6, H100 SXM5, BF16), divided by hand.
"""
import math

import numpy as np
import pytest

from phaze import cost, graph, models
from phaze.arch import (ATTENTION_SHAPE_TFLOPS, attention_shape_factor,
                        attention_shape_kernel, attention_shape_kernels_for_rows, efficiency,
                        presets, resolve)


def _causal_keys(s):
    return (s + 128) / 2      # a causal sequence of s tokens: (s + 128)/2 keys per query


def test_reference_shape_is_one_for_every_kernel_and_pass():
    for kernel in ATTENTION_SHAPE_TFLOPS:
        for backward in (False, True):
            assert attention_shape_factor(kernel, backward, 128, _causal_keys(16384)) == 1.0


@pytest.mark.parametrize("s, fwd, bwd", [(512, 315, 305), (2048, 484, 465), (4096, 518, 499),
                                         (8192, 529, 518)])
def test_cudnn_head_dim_128_is_the_papers_bar_over_the_16k_bar(s, fwd, bwd):
    assert attention_shape_factor("cudnn", False, 128, _causal_keys(s)) == pytest.approx(
        fwd / 539, rel=1e-12)
    assert attention_shape_factor("cudnn", True, 128, _causal_keys(s)) == pytest.approx(
        bwd / 516, rel=1e-12)


def test_head_dim_64_bars_by_hand():
    # cuDNN at 4K: 363 forward (causal), 417 backward, over the head-dim-128 16K bars
    assert attention_shape_factor("cudnn", False, 64, _causal_keys(4096)) == pytest.approx(
        363 / 539, rel=1e-12)
    assert attention_shape_factor("cudnn", True, 64, _causal_keys(4096)) == pytest.approx(
        417 / 516, rel=1e-12)
    # FlashAttention-2 loses less at head dimension 64 (its head-dim-128 kernel is slow too)
    assert attention_shape_factor("fa2", False, 64, _causal_keys(16384)) == pytest.approx(
        299 / 335, rel=1e-12)


def test_interpolation_in_log2_of_sequence_and_head_dim():
    # half way (in log2) between 2K and 4K, and between head dimensions 64 and 128
    s = 2048 * math.sqrt(2)
    got = attention_shape_factor("cudnn", False, 128, _causal_keys(s))
    assert got == pytest.approx((484 + 518) / 2 / 539, rel=1e-9)
    hd = 64 * math.sqrt(2)
    got = attention_shape_factor("cudnn", False, hd, _causal_keys(4096))
    assert got == pytest.approx((363 + 518) / 2 / 539, rel=1e-9)


def test_clamped_outside_the_measured_bars():
    f = attention_shape_factor
    assert f("cudnn", False, 128, _causal_keys(256)) == pytest.approx(315 / 539)   # 512 bar
    assert f("cudnn", False, 128, _causal_keys(131072)) == 1.0                   # 16K bar
    assert f("cudnn", False, 32, _causal_keys(4096)) == f("cudnn", False, 64, _causal_keys(4096))
    assert f("cudnn", True, 256, _causal_keys(4096)) == f("cudnn", True, 128, _causal_keys(4096))


def test_bad_kernel_and_shape_refused_in_one_sentence():
    with pytest.raises(ValueError, match="must be one of cudnn, fa2, fa3"):
        attention_shape_factor("flex", False, 128, 4160)
    with pytest.raises(ValueError, match="head_dim and keys must be > 0"):
        attention_shape_factor("cudnn", False, 0, 4160)
    with pytest.raises(ValueError, match="flash_kernel must be 'auto', one of cudnn, fa2, fa3"):
        cost.prepare(presets.get("h100-sxm"), model="calibrated", efficiency="h100-sxm",
                     flash_kernel="flex")
    with pytest.raises(ValueError, match="flash_kernel has 2 entries for 1 architecture rows"):
        cost.prepare(presets.get("h100-sxm"), model="calibrated", efficiency="h100-sxm",
                     flash_kernel=["fa2", "fa3"])


def test_the_graph_carries_each_kernels_shape():
    # gpt-oss-20b: head dimension 64; its sliding-window layers (window 128) compute 252 keys
    # per query (the previous key tile and the diagonal one), its full layers (s = 4096) 2112
    m = models.get("gpt-oss-20b")
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    shapes = set()
    for layer in mg.layers:
        for g in (layer.forward, layer.backward):
            for i, name in enumerate(g.names):
                if name.startswith("flash_attn"):
                    shapes.add(tuple(int(x) for x in g.flash_shape[i]))
                else:
                    assert tuple(g.flash_shape[i]) == (0, 0)
    assert shapes == {(64, 252), (64, 2112)}
    # the window's kernel runs as a causal one of 2·252 − 128 = 376 tokens: the 512 bar
    assert attention_shape_factor("cudnn", False, 64, 252) == pytest.approx(225 / 539)


def test_context_parallel_ranks_run_their_share():
    # at cp = 2 a rank's kernel calls run over s/cp: llama3-8b at 8K prices as a 4K kernel
    m = models.get("llama3-8b")
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron",
                            context_parallel=2)
    blk = next(layer for layer in mg.layers if layer.kind == "block")
    i = blk.forward.names.index("flash_attn")
    assert tuple(blk.forward.flash_shape[i]) == (128, 2080)     # ceil(4160 / 2)


def test_priced_time_is_the_fraction_times_the_factor_by_hand():
    # Transformer Engine's attention benchmark test_1 shape: b = 2, 16 heads of 128, s = 2048,
    # causal; forward at clock × flash_fwd_efficiency × 484/539 over its array cycles, the
    # backward at 465/516 of its fraction
    m = models.ModelSpec(name="attention", n_layers=1, hidden=16 * 128, heads=16, kv_heads=16,
                         ffn_hidden=4 * 16 * 128, vocab=32000, seq_len=2048,
                         activation="swiglu", norm="rmsnorm", position="rotary", bias=False)
    blk = next(layer for layer in graph.build_layers(
        m, 2, 1, flash_attention=True, kernels="megatron").layers if layer.kind == "block")
    eff = efficiency.get("h100-sxm")
    peak = 528 * 16 * 32 * 2 * 1.83e9
    for g, name, frac, bar in ((blk.forward, "flash_attn", eff.flash_fwd_efficiency, 484 / 539),
                               (blk.backward, "flash_attn.bwd", eff.flash_bwd_efficiency,
                                465 / 516)):
        i = g.names.index(name)
        b, mm, k, n = (float(x) for x in g.dims[i])
        _, intra = cost.op_latencies(g, presets.get("h100-sxm"), model="calibrated",
                                     efficiency=eff)
        by_hand = 2 * b * mm * k * n / (peak * frac * bar) + eff.launch_s
        # (the study's array cycles quantise the 2K tiles by 0.1 %)
        assert intra[i, 0] == pytest.approx(by_hand, rel=3e-3)


def test_other_operators_do_not_see_the_curve():
    m = models.get("llama3-8b")
    blk = next(layer for layer in graph.build_layers(
        m, 1, 1, flash_attention=True, kernels="megatron").layers if layer.kind == "block")
    row = presets.get("h100-sxm")
    for g, slower in ((blk.forward, True), (blk.backward, False)):
        keep = np.array([not n.startswith("flash_attn") for n in g.names])
        a = cost.op_latencies(g, row, model="calibrated", efficiency="h100-sxm")
        b = cost.op_latencies(g, row, model="calibrated", efficiency="h100-sxm",
                              flash_kernel=None)
        c = cost.op_latencies(g, row, model="calibrated", efficiency="h100-sxm",
                              flash_kernel="fa3")
        for x, y, z in zip(a, b, c):
            assert x[keep].tobytes() == y[keep].tobytes() == z[keep].tobytes()
            # 8K: forward 529 of the 539 bar (slower), backward 518 of 516 (faster)
            assert np.all(x[~keep] > y[~keep]) if slower else np.all(x[~keep] < y[~keep])
    # the study's model prices the fused kernel as a GEMM, whatever the curve
    s1 = cost.op_latencies(blk.forward, row)
    s2 = cost.op_latencies(blk.forward, row, flash_kernel=None)
    for x, y in zip(s1, s2):
        assert x.tobytes() == y.tobytes()


def test_which_curve_a_chip_takes():
    assert attention_shape_kernel(resolve("h100-sxm")) == "cudnn"
    assert attention_shape_kernel(resolve("a100-80g")) == "fa2"
    assert attention_shape_kernel(resolve("h100-96g")) == "fa2"
    assert attention_shape_kernel(resolve("b200")) == "cudnn"        # the rule's default
    assert attention_shape_kernel(resolve("h100-sxm"), "fa3") == "fa3"
    both = np.concatenate([presets.get("a100-80g"), presets.get("h100-sxm"),
                           presets.get("b200")])
    assert attention_shape_kernels_for_rows(both) == ["fa2", "cudnn", "cudnn"]


def test_a_row_is_priced_on_its_own_curve_alone_and_among_others():
    # head dimension 64, where FlashAttention-2's curve and cuDNN's differ most
    m = models.get("gpt-oss-20b")
    blk = next(layer for layer in graph.build_layers(
        m, 1, 1, flash_attention=True, kernels="megatron").layers
        if "flash_attn" in layer.forward.names)
    names = ("a100-80g", "h100-sxm", "b200")
    rows = np.concatenate([presets.get(n) for n in names])
    eff = efficiency.for_rows(rows)
    for g in (blk.forward, blk.backward):
        _, together = cost.op_latencies(g, rows, model="calibrated", efficiency=eff)
        for j, n in enumerate(names):
            _, alone = cost.op_latencies(g, presets.get(n), model="calibrated",
                                         efficiency=n)
            assert together[:, j].tobytes() == alone[:, 0].tobytes()
        # per row as named: the a100 row on FA2's curve, the others on cuDNN's
        _, named = cost.op_latencies(g, rows, model="calibrated", efficiency=eff,
                                     flash_kernel=["fa2", "cudnn", "cudnn"])
        assert named.tobytes() == together.tobytes()
        _, cudnn = cost.op_latencies(g, rows, model="calibrated", efficiency=eff,
                                     flash_kernel="cudnn")
        i = next(k for k, x in enumerate(g.names) if x.startswith("flash_attn"))
        assert cudnn[i, 0] > together[i, 0]    # cuDNN loses more at head dimension 64
