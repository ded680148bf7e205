"""Training datatypes (issue 16, ``--dtype {bf16,fp16,fp8}``): bytes per element through the
graphs, the chip's tensor rate at the type in both cost models, chip files, refusals."""
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze import cli, cost, precision
from phaze.arch import ArchSpace, dtype_rates, efficiency, load_chip, make_archs, peak_flops, presets
from phaze.graph import KIND_FUSED, KIND_GEMM, OpGraph, build_layers

import naive_cost_kernels
from strategies import model_specs


def _valid_t(m, t):
    return m.heads % t == 0 and m.kv_heads % t == 0


@st.composite
def _layers(draw):
    """(bf16 graphs, fp8 graphs, fp16 graphs) of one small model and strategy."""
    m = draw(model_specs())
    t = draw(st.sampled_from([t for t in (1, 2, 4) if _valid_t(m, t)]))
    sp = draw(st.booleans()) and m.seq_len % t == 0
    kw = dict(sequence_parallel=sp, flash_attention=draw(st.booleans()))
    b = draw(st.integers(1, 3))
    return (build_layers(m, b, t, **kw), build_layers(m, b, t, dtype="fp8", **kw),
            build_layers(m, b, t, dtype="fp16", **kw))


# --- graphs -----------------------------------------------------------------------------

def test_default_is_bf16_and_fp16_builds_the_same_graphs():
    for model, b, t in (("gpt3-175b", 1, 8), ("llama2-7b", 2, 1)):
        default, bf16, fp16 = (build_layers(model, b, t), build_layers(model, b, t, dtype="bf16"),
                               build_layers(model, b, t, dtype="fp16"))
        assert default is bf16 and default.dtype == "bf16" and fp16.dtype == "fp16"
        for la, lb in zip(default.layers, fp16.layers):
            assert la.stash_bytes == lb.stash_bytes and la.param_bytes == lb.param_bytes
            for ga, gb in ((la.forward, lb.forward), (la.backward, lb.backward)):
                assert ga.content_hash() == gb.content_hash() and not ga.fp8.any()


def _preds(g, i):
    return [g.names[j] for j in g.pred_idx[g.pred_ptr[i]:g.pred_ptr[i + 1]]]


def _check_quant_ops(g, dtype):
    """Every low-precision GEMM but ``.dW`` is preceded by one quantisation operator of its
    activation operand (``batch*m*k`` elements) priced by hand from ``precision.DATATYPES``;
    returns the mask of the quantisation operators."""
    d = precision.datatype(dtype)
    quant = np.array([n.endswith(".quant") for n in g.names], dtype=bool)
    weight = np.array([n.endswith((".w.quant", ".wT.quant")) for n in g.names], dtype=bool)
    assert weight.any() == (d.weight_cast == "microbatch" and g.fp8.any())
    for i in np.flatnonzero(quant):
        e = int(g.elements[i])
        assert g.kind[i] == 1 and not g.fp8[i] and not g.dims[i].any()
        assert g.bytes_in[i] == d.quant_reads * e * 2
        # activations and gradients: both layouts; torchao's weight casts: one each
        layouts = 1 if weight[i] else d.quant_layouts
        assert g.bytes_out[i] == round(layouts * e * d.element_bytes)
        assert g.cycles_per_element[i] == d.quant_reads * precision.QUANT_CYCLES_PER_ELEMENT
    base = {n for n in g.names if not n.endswith(".quant")}
    for n in np.array(g.names)[quant]:
        assert n.endswith((".x.quant", ".dY.quant", ".w.quant", ".wT.quant"))
        stem = (n[:-len(".x.quant")] if n.endswith(".x.quant")
                else n[:-len(".w.quant")] if n.endswith(".w.quant")
                else n[:-len(".wT.quant")] + ".dX" if n.endswith(".wT.quant")
                else n[:-len(".dY.quant")] + ".dX")
        assert stem in base                      # named after a GEMM of the graph
    for i in np.flatnonzero(g.fp8):
        name = g.names[i]
        qs = [p for p in _preds(g, i) if p.endswith(".quant")]
        wq = [p for p in qs if p.endswith((".w.quant", ".wT.quant"))]
        qs = [p for p in qs if p not in wq]
        if d.weight_cast == "microbatch" and not name.endswith(".dW"):
            # the weight cast of this GEMM: K x N elements of its weight operand
            assert len(wq) == 1, name
            b_, _, k_, n_ = (int(x) for x in g.dims[i])
            assert g.elements[g.names.index(wq[0])] == b_ * k_ * n_, name
        if name.endswith(".dW"):
            # the weight gradient reads the column-wise copy its dgrad's dY quantisation wrote
            assert qs == ([name[:-3] + ".dY.quant"] if name[:-3] + ".dX" in g.names else [])
            continue
        assert len(qs) == 1 and len(_preds(g, i)) == 1 + len(wq), name
        q = g.names.index(qs[0])
        b_, m_, k_, _ = (int(x) for x in g.dims[i])
        assert g.elements[q] == b_ * m_ * k_, name
        assert qs[0].endswith(".dY.quant" if name.endswith(".dX") else ".x.quant")
    assert quant.any() == g.fp8.any()
    return quant


def _check_rescale_ops(g, dtype):
    """Under ``Datatype.backward_rescale`` (torchao's row-wise recipe) each backward linear
    GEMM but the routed experts' is followed by ``NAME.rescale``: one read and one write of
    its b·m·n 16-bit output plus the m + n fp32 scales (by hand), one multiply per element;
    every other reader of the GEMM waits on the rescale. Returns the rescale operators'
    mask (all False for other datatypes)."""
    d = precision.datatype(dtype)
    mask = np.array([n.endswith(".rescale") for n in g.names], dtype=bool)
    gemms = [i for i in np.flatnonzero(g.fp8)
             if g.names[i].endswith((".dX", ".dW")) and not g.names[i].startswith("expert_")]
    assert mask.sum() == (len(gemms) if d.backward_rescale else 0)
    for i in gemms if d.backward_rescale else ():
        r = g.names.index(g.names[i] + ".rescale")
        b_, m_, _, n_ = (int(x) for x in g.dims[i])
        assert _preds(g, r) == [g.names[i]]
        assert g.kind[r] == 1 and not g.fp8[r] and g.elements[r] == b_ * m_ * n_
        assert g.bytes_in[r] == 2 * b_ * m_ * n_ + 4 * b_ * (m_ + n_)
        assert g.bytes_out[r] == g.bytes_out[i] == 2 * b_ * m_ * n_
        assert g.cycles_per_element[r] == 1.0
        readers = [j for j in range(len(g.names)) if g.names[i] in _preds(g, j)]
        assert readers == [r], g.names[i]        # the rest read the scaled output
    return mask


@given(_layers())
def test_fp8_halves_exactly_the_documented_bytes(graphs):
    bf16, fp8, fp16 = graphs
    assert fp8.dtype == "fp8"
    m, b = bf16.model, bf16.microbatch
    for la, l8, l16 in zip(bf16.layers, fp8.layers, fp16.layers):
        assert la.param_bytes == l8.param_bytes == l16.param_bytes  # 16-bit weights kept
        assert la.boundary_bytes == l8.boundary_bytes
        for ga, g8, g16 in ((la.forward, l8.forward, l16.forward),
                            (la.backward, l8.backward, l16.backward)):
            assert g8.dtype == "fp8" and g8.bytes_per_element == 2
            # the fp8 graph is the bf16 graph plus its quantisation operators
            quant = _check_quant_ops(g8, "fp8")
            keep = ~quant
            assert ga.names == [n for n, q in zip(g8.names, quant) if not q]
            np.testing.assert_array_equal(ga.bytes_in, g16.bytes_in)
            want = np.array([precision.is_fp8_gemm(n) and la.kind == "block" for n in g8.names])
            np.testing.assert_array_equal(g8.fp8, want & np.isin(g8.kind, (KIND_GEMM, KIND_FUSED)))
            for arr in ("dims", "bytes_out", "comm_bytes", "elements", "kind", "group_size"):
                np.testing.assert_array_equal(getattr(ga, arr), getattr(g8, arr)[keep], err_msg=arr)
            d = ga.dims
            operands = d[:, 0] * (d[:, 1] * d[:, 2] + d[:, 2] * d[:, 3])  # elements of A and B
            # FP8 GEMMs read each operand element in 1 byte instead of 2; nothing else changes
            np.testing.assert_array_equal(ga.bytes_in - g8.bytes_in[keep],
                                          np.where(g8.fp8[keep], operands, 0))
        if la.kind != "block":
            assert (la.stash_bytes, la.stash_selective_bytes, la.stash_full_bytes) == \
                (l8.stash_bytes, l8.stash_selective_bytes, l8.stash_full_bytes)
            continue
        t, s, h = bf16.tensor_parallel, m.seq_len, m.hidden
        T = b * s
        Tn = T // t if bf16.sequence_parallel else T
        q_dim = m.heads // t * m.head_dim
        f_t = -(-m.ffn_hidden // t)
        halved = 2 * Tn * h + T * q_dim + T * f_t      # elements of the four FP8 GEMM inputs
        kept = 2 * T * q_dim if bf16.flash_attention else 0   # flash's 16-bit output as well
        assert la.stash_bytes - l8.stash_bytes == halved - kept
        # selective drops the fused kernel's own saved tensors, its 16-bit output with them
        assert la.stash_selective_bytes - l8.stash_selective_bytes == halved
        assert la.stash_full_bytes == l8.stash_full_bytes   # the 16-bit layer input


@pytest.mark.parametrize("dtype", precision.LOW_PRECISION)
def test_every_low_precision_dtype_prices_operands_and_quantisation(dtype):
    """llama2-7b block, t = 2: each linear GEMM reads its operands at the datatype's
    element_bytes (scales included), and its quantisation operators are priced by hand."""
    d = precision.datatype(dtype)
    la = build_layers("llama2-7b", 1, 2).layers[1]
    lq = build_layers("llama2-7b", 1, 2, dtype=dtype).layers[1]
    assert lq.param_bytes == la.param_bytes
    for ga, gq in ((la.forward, lq.forward), (la.backward, lq.backward)):
        quant = _check_quant_ops(gq, dtype) | _check_rescale_ops(gq, dtype)
        keep = ~quant
        assert ga.names == [n for n, q in zip(gq.names, quant) if not q]
        dd = ga.dims
        operands = dd[:, 0] * (dd[:, 1] * dd[:, 2] + dd[:, 2] * dd[:, 3])
        low = gq.fp8[keep]
        want = np.where(low, ga.bytes_in - 2 * operands + np.round(operands * d.element_bytes),
                        ga.bytes_in)
        np.testing.assert_array_equal(gq.bytes_in[keep], want.astype(np.int64))
    # magnitudes: the forward q/k/v input (1 x 4096 tokens x 4096 hidden) is quantised once
    g = lq.forward
    i = g.names.index("q_proj.x.quant")
    e = 4096 * 4096
    assert g.elements[i] == e
    assert g.bytes_in[i] == {"fp8": 1, "fp8-current": 2, "fp8-tensorwise": 2, "fp8-rowwise": 2,
                             "nvfp4": 2}.get(dtype, 1) * 2 * e
    assert g.bytes_out[i] == round(2 * e * {"fp8": 1, "fp8-current": 1, "fp8-tensorwise": 1,
                                            "fp8-rowwise": 1,
                                            "fp8-blockwise": 1 + 4 / 128, "mxfp8": 1 + 1 / 32,
                                            "mxfp6": 0.75 + 1 / 32, "mxfp4": 0.5 + 1 / 32,
                                            "nvfp4": 0.5 + 1 / 16}[dtype])
    # q_proj reads X (4096 x 4096) and W (4096 x 2048) at element_bytes
    j = g.names.index("q_proj")
    assert g.bytes_in[j] == round((4096 * 4096 + 4096 * 2048) * d.element_bytes)
    # torchao's row-wise backward: fc2's dgrad output (4096 tokens x 11008 / 2) scaled in a
    # pass of its own, 2 B read + 2 B written per element and 4 B per scale
    gb = lq.backward
    assert ("fc2.dX.rescale" in gb.names) == (dtype == "fp8-rowwise")
    if dtype == "fp8-rowwise":
        i = gb.names.index("fc2.dX.rescale")
        assert (gb.elements[i], gb.bytes_in[i], gb.bytes_out[i]) == (
            4096 * 5504, 2 * 4096 * 5504 + 4 * (4096 + 5504), 2 * 4096 * 5504)


def test_datatype_table():
    assert precision.DTYPES == ("bf16", "fp16", "fp8", "fp8-current", "fp8-tensorwise",
                                "fp8-rowwise", "fp8-blockwise", "mxfp8", "mxfp6", "mxfp4",
                                "nvfp4")
    assert precision.LOW_PRECISION == precision.DTYPES[2:]
    by = precision.BY_NAME
    assert [by[n].family for n in precision.DTYPES] == ["16-bit"] * 2 + ["fp8"] * 6 + \
        ["fp6", "fp4", "fp4"]
    assert [by[n].element_bytes for n in precision.DTYPES] == [
        2, 2, 1, 1, 1, 1, 1 + 4 / 128, 1 + 1 / 32, 0.75 + 1 / 32, 0.5 + 1 / 32, 0.5 + 1 / 16]
    assert [by[n].native for n in precision.DTYPES] == ["", "", "", "", "", "", "", "mx", "mx",
                                                        "mx", "nvfp4"]
    assert [by[n].quant_reads for n in precision.LOW_PRECISION] == [1, 2, 2, 2, 1, 1, 1, 1, 2]
    # torchao recasts its weights every microbatch; Transformer Engine caches them per step
    assert [n for n in precision.DTYPES if by[n].weight_cast == "microbatch"] == \
        ["fp8-tensorwise", "fp8-rowwise"]
    assert all(by[n].quant_layouts == 2 for n in precision.LOW_PRECISION)
    assert precision.MEMORY_BYTES_PER_PARAM["nvfp4"]["fp8_weight"] == 2 * (0.5 + 1 / 16)
    assert precision.MEMORY_BYTES_PER_PARAM["mxfp8"]["fp8_weight"] == 2 * (1 + 1 / 32)


def test_fp8_ops_of_a_llama_block():
    g = build_layers("llama2-7b", 1, 2, dtype="fp8").layers[1]
    fwd = [n for n, f in zip(g.forward.names, g.forward.fp8) if f]
    assert fwd == ["q_proj", "k_proj", "v_proj", "out_proj", "gate_proj", "up_proj", "fc2"]
    assert "attn_scores" not in fwd and "logits" not in fwd
    bwd = {n for n, f in zip(g.backward.names, g.backward.fp8) if f}
    assert bwd == {f"{n}.{x}" for n in fwd for x in ("dX", "dW")}
    # one quantisation per distinct activation input: q/k/v share ln1's output, gate/up ln2's
    quant = [n for n in g.forward.names if n.endswith(".quant")]
    assert quant == ["q_proj.x.quant", "out_proj.x.quant", "gate_proj.x.quant", "fc2.x.quant"]
    for name in quant:
        assert g.forward.names.index(name) < g.forward.names.index(name[:-len(".x.quant")])
    # backward: every .dX GEMM waits for a quantised output gradient
    for n in fwd:
        i = g.backward.names.index(f"{n}.dX")
        (p,) = _preds(g.backward, i)
        assert p.endswith(".dY.quant")
    assert {"fc2.dY.quant", "out_proj.dY.quant", "v_proj.dY.quant"} <= set(g.backward.names)


@pytest.mark.parametrize("bad", ["fp32", "BF16", None, 2])
def test_bad_dtype_one_sentence(bad):
    with pytest.raises(ValueError, match=r"^dtype must be one of bf16, fp16, fp8, fp8-current, "
                                         r"fp8-tensorwise, fp8-rowwise, fp8-blockwise, mxfp8, "
                                         r"mxfp6, mxfp4, nvfp4, got "):
        build_layers("gpt2-xl", 1, 1, dtype=bad)


def test_opgraph_refuses_fp8_flags_it_cannot_honour():
    with pytest.raises(ValueError, match="fp8 applies only to GEMM operators"):
        OpGraph.from_ops([dict(name="v", kind=1, elements=4, fp8=True)], dtype="fp8")
    with pytest.raises(ValueError, match=r"^operator 'g' runs in low precision, which needs a "
                                         r"low-precision dtype for the graph \(it is 'bf16'\)"):
        OpGraph.from_ops([dict(name="g", kind=0, dims=(1, 2, 2, 2), fp8=True)])
    for dtype in precision.LOW_PRECISION:   # any low-precision dtype may carry the flag
        assert OpGraph.from_ops([dict(name="g", kind=0, dims=(1, 2, 2, 2), fp8=True)],
                                dtype=dtype).fp8.all()


# --- cost ---------------------------------------------------------------------------------

_arch = st.fixed_dictionaries(dict(
    num_tc=st.integers(1, 64), tc_width=st.integers(1, 64), tc_depth=st.integers(1, 64),
    num_vc=st.integers(1, 64), vc_width=st.integers(1, 64), buffer_mib=st.floats(1e-4, 64.0),
    hbm_gb_per_s=st.floats(0.5, 4000.0), clock_ghz=st.floats(0.2, 3.0)))


@given(_layers(), st.lists(_arch, min_size=1, max_size=3), st.floats(1.0, 4.0),
       st.sampled_from(["study", "calibrated"]))
def test_fp8_never_slower_than_bf16_and_never_below_its_roofline(graphs, knobs, rate, model):
    bf16, fp8, fp16 = graphs
    archs = make_archs(base="tpuv4", **{k: [d[k] for d in knobs] for k in knobs[0]})
    for la, l8, l16 in zip(bf16.layers, fp8.layers, fp16.layers):
        for ga, g8, g16 in ((la.forward, l8.forward, l16.forward),
                            (la.backward, l8.backward, l16.backward)):
            base = cost.op_latencies(ga, archs, model=model)
            low = cost.op_latencies(g8, archs, model=model, fp8_rate=rate)
            same = cost.op_latencies(g16, archs, model=model)
            bounds = cost.roofline_bounds(g8, archs, fp8_rate=rate)
            keep = np.array([not n.endswith(".quant") for n in g8.names], dtype=bool)
            assert ga.names == [n for n, k in zip(g8.names, keep) if k]
            f8 = g8.fp8[keep]
            # calibrated: an fp8 GEMM runs at fp8_tile_efficiency of the fp8 peak; the
            # template's (rule-derived) fp8 fraction is below its 16-bit one, so at a rate
            # near 1 it may be slower by at most tile / (rate * fp8_tile)
            T = efficiency.TEMPLATE
            slower = 1.0 if model == "study" else max(
                1.0, T.tile_efficiency / (rate * T.fp8_tile_efficiency))
            for x, y, z, lb in zip(base, low, same, bounds):
                np.testing.assert_array_equal(x, z)            # fp16 = bf16
                yk = y[keep]
                assert np.all(yk <= x * slower * (1 + 1e-12))  # fp8 GEMMs never slower
                np.testing.assert_array_equal(yk[~f8], x[~f8])  # only FP8 GEMMs change
                assert np.all(y >= lb * (1 - 1e-12))           # quant ops too
                assert np.all(y[~keep] > 0)                    # quantising costs time


def test_h100_fp8_rate_is_twice_bf16_from_its_datasheet():
    h100 = presets.chip("h100-sxm")
    # dense FP8 1,978.9 TFLOP/s against dense BF16 989.4 (H100 SXM datasheet)
    assert peak_flops(h100.row)[0] * h100.tensor_rate("fp8") == pytest.approx(1978.9e12, rel=2e-3)
    assert h100.tensor_rate("bf16") == h100.tensor_rate("fp16") == 1.0
    # a compute-bound GEMM takes half the time; a weight-streaming one (M = 1) reads its
    # operands in 1 byte per element and writes its output in 2
    ops = [dict(name="fc1", kind=0, dims=(1, 8192, 8192, 8192), fp8=True),
           dict(name="fc2", kind=0, dims=(1, 1, 8192, 8192), fp8=True)]
    g8 = OpGraph.from_ops(ops, dtype="fp8")
    g16 = OpGraph.from_ops([dict(op, fp8=False) for op in ops])
    for model in ("study", "calibrated"):
        eff = dict(efficiency=h100.efficiency) if model == "calibrated" else {}
        x = cost.op_latencies(g16, h100.row, model=model, **eff)[1][:, 0]
        y = cost.op_latencies(g8, h100.row, model=model, fp8_rate=h100.tensor_rate("fp8"), **eff)[1][:, 0]
        launch = h100.efficiency.launch_s if model == "calibrated" else 0.0
        # (calibrated: at the FP8 fraction of the FP8 peak, fp8_tile_efficiency, not the
        # 16-bit one: 1,402.6 of 1,978.9 against 808.7 of 989.4 TFLOP/s measured)
        slower = (h100.efficiency.tile_efficiency / h100.efficiency.fp8_tile_efficiency
                  if model == "calibrated" else 1.0)
        assert (y[0] - launch) == pytest.approx((x[0] - launch) / 2 * slower, rel=1e-12)
        if model == "study":  # (the calibrated tile rule makes the M = 1 GEMM compute-bound)
            assert y[1] == pytest.approx((8192 + 8192 ** 2 + 2 * 8192) / 3350e9, rel=1e-12)
            assert x[1] == pytest.approx(2 * (8192 + 8192 ** 2 + 8192) / 3350e9, rel=1e-12)
        assert y[1] < x[1]


@pytest.mark.parametrize("name", ["a100-80g", "tpuv4"])
def test_chips_without_fp8_refuse_it_in_one_sentence(name):
    chip = presets.chip(name)
    assert chip.tensor_rate("bf16") == 1.0
    with pytest.raises(ValueError, match=rf"^dtype fp8 needs fp8 tensor cores, which {name} "
                                         r"does not have \(its fp8_rate is 0\); train it in bf16 or fp16$"):
        chip.tensor_rate("fp8")
    g8 = build_layers("gpt2-xl", 1, 1, dtype="fp8").layers[1].forward
    with pytest.raises(ValueError, match=r"^the graph's dtype fp8 needs tensor cores of its "
                                         r"datatype, which architecture row 0 does not have "
                                         r"\(its rate is 0\)"):
        cost.op_latencies(g8, chip.row, fp8_rate=dtype_rates.for_rows(chip.row))
    # every low-precision datatype is refused in one sentence naming it
    for dtype in precision.LOW_PRECISION:
        assert chip.rates[dtype] == 0.0
        with pytest.raises(ValueError, match=rf"^dtype {dtype} needs "):
            chip.tensor_rate(dtype)
    # a bf16 graph runs there whatever fp8_rate says
    g16 = build_layers("gpt2-xl", 1, 1).layers[1].forward
    np.testing.assert_array_equal(cost.op_latencies(g16, chip.row, fp8_rate=0)[1],
                                  cost.op_latencies(g16, chip.row)[1])


def test_hopper_rates_at_every_datatype():
    h100 = presets.chip("h100-sxm")
    assert dict(h100.rates) == {"bf16": 1.0, "fp16": 1.0, "fp8": 2.0, "fp8-current": 2.0,
                                "fp8-tensorwise": 2.0,
                                "fp8-rowwise": 2.0, "fp8-blockwise": 2.0, "mxfp8": 0.0,
                                "mxfp6": 0.0, "mxfp4": 0.0, "nvfp4": 0.0}
    assert h100.tensor_rate("fp8-blockwise") == 2.0
    for dtype, fmt in (("mxfp8", "mx"), ("mxfp4", "mx"), ("nvfp4", "nvfp4")):
        with pytest.raises(ValueError, match=rf"^dtype {dtype} needs tensor cores that consume the "
                                             rf"{fmt} block-scaled format, which h100-sxm does not "
                                             r"have \(its scaled_formats: none\); train it in "
                                             r"another datatype$"):
            h100.tensor_rate(dtype)


def test_template_rule_and_per_row_rates():
    space = ArchSpace.default().configs[::5000]
    assert np.all(dtype_rates.for_rows(space[space["num_tc"] != 8]) == 2.0)
    first = ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")
    assert tuple(presets.names()[:4]) == first
    rows = np.concatenate([presets.get(n) for n in first])
    assert dtype_rates.for_rows(rows).tolist() == [0.0, 0.0, 2.0, 2.0]   # tpuv4, a100, h100 x2
    for dtype in ("fp8-tensorwise", "fp8-rowwise", "fp8-blockwise"):   # Hopper's plain fp8
        assert dtype_rates.for_rows(rows, dtype).tolist() == [0.0, 0.0, 2.0, 2.0]
    for dtype in ("mxfp8", "mxfp6", "mxfp4", "nvfp4"):   # no block-scaled format before Blackwell
        assert dtype_rates.for_rows(rows, dtype).tolist() == [0.0] * 4
        # the template's rows take every format, at the family's template rate
        assert np.all(dtype_rates.for_rows(space[space["num_tc"] != 8], dtype)
                      == {"fp8": 2.0, "fp6": 2.0, "fp4": 4.0}[precision.datatype(dtype).family])
    g8 = build_layers("gpt2-xl", 1, 1, dtype="fp8").layers[1].forward
    default = cost.op_latencies(g8, space)
    np.testing.assert_array_equal(default[1], cost.op_latencies(g8, space, fp8_rate=2.0)[1])
    np.testing.assert_array_equal(
        default[1], cost.op_latencies(g8, space, fp8_rate=[2.0] * len(space))[1])
    with pytest.raises(ValueError, match="fp8_rate has 1 values; expected one number or"):
        cost.op_latencies(g8, space, fp8_rate=[2.0])
    with pytest.raises(ValueError, match=r"fp8_rate must be 0 \(no fp8 tensor cores\) or a number >= 1"):
        cost.op_latencies(g8, space, fp8_rate=0.5)


def test_fp8_compiled_loop_is_the_reference_bit_for_bit():
    """An FP8 graph (1-byte GEMM operands, a rate multiplier per row) through the compiled
    operator loop and through the plain-Python reference (tests/naive_cost_kernels.py),
    both cost models: every bit equal."""
    g = build_layers("opt-350m", 1, 2, dtype="fp8").layers[1].backward
    assert g.fp8.any() and not g.fp8.all()
    archs = ArchSpace.default().configs[::2999]
    for m in ("study", "calibrated"):
        compiled = cost.op_latencies(g, archs, model=m, fp8_rate=1.5)
        reference = naive_cost_kernels.op_latencies(g, archs, model=m, fp8_rate=1.5)
        assert np.all(np.isfinite(compiled[0])) and np.all(np.isfinite(compiled[1]))
        np.testing.assert_array_equal(np.stack(compiled).view(np.int64),
                                      np.stack(reference).view(np.int64))
        # the multiplier is applied: a different rate changes an FP8 GEMM's time
        assert not np.array_equal(compiled[1], cost.op_latencies(g, archs, model=m, fp8_rate=3.0)[1])


# --- chip files -------------------------------------------------------------------------

def _file(tmp_path, **change):
    data = json.loads(presets.chip("h100-sxm").to_json())
    data.update(name="mine", **change)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("name,rate", [("h100-sxm", 2), ("h100-96g", 2), ("a100-80g", 0),
                                       ("tpuv4", 0)])
def test_archs_show_prints_fp8_rate(name, rate, capsys):
    assert cli.main(["archs", "--show", name]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fp8_rate"] == rate and isinstance(shown["fp8_rate"], int)


def test_chip_file_overrides_the_fp8_rate(tmp_path):
    assert load_chip(_file(tmp_path, fp8_rate=1)).tensor_rate("fp8") == 1.0   # e.g. Gaudi 3
    assert load_chip(_file(tmp_path, fp8_rate=2.25)).tensor_rate("fp8") == 2.25
    with pytest.raises(ValueError, match="mine does not have"):
        load_chip(_file(tmp_path, fp8_rate=0)).tensor_rate("fp8")
    # left out: knobs changed from h100-sxm, so the template's rule
    changed = _file(tmp_path, fp8_rate=None, num_tc=264)
    assert load_chip(changed).fp8_rate is None and load_chip(changed).tensor_rate("fp8") == 2.0
    assert "fp8_rate" not in json.loads(load_chip(changed).to_json())
    # left out with a preset's knobs: the preset's own
    same = _file(tmp_path, fp8_rate=None, efficiency=None)
    data = json.loads(same.read_text())
    data.update(name="x", **{k: json.loads(presets.chip("a100-80g").to_json())[k]
                             for k in ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width",
                                       "buffer_mib", "hbm_gib", "hbm_gb_per_s", "clock_ghz",
                                       "link_gb_per_s", "net_gb_per_s", "node_size")})
    same.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="x does not have"):
        load_chip(same).tensor_rate("fp8")


@pytest.mark.parametrize("value", [-1, 0.5, "2", True, None, float("nan"), float("inf")])
def test_bad_fp8_rate_one_sentence(tmp_path, value):
    path = tmp_path / "bad.json"
    data = json.loads(presets.chip("h100-sxm").to_json())
    data.update(name="bad", fp8_rate=value)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"^chip file '.*bad\.json': fp8_rate must be 0 \(no fp8 "
                                         r"tensor cores\) or a number >= 1"):
        load_chip(path)


def test_preset_name_with_another_fp8_rate_refused(tmp_path):
    path = tmp_path / "a.json"
    data = json.loads(presets.chip("a100-80g").to_json())
    data["fp8_rate"] = 2
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="is a preset's, but fp8_rate is 2.0 where the preset has 0.0"):
        load_chip(path)


def test_memory_bytes_per_param_keep_fp32_master_and_optimizer():
    for dtype in precision.DTYPES:
        mem = precision.MEMORY_BYTES_PER_PARAM[dtype]
        assert mem["weights"] == 2 and mem["gradients"] == 4 and mem["optimizer_state"] == 12
    assert precision.MEMORY_BYTES_PER_PARAM["fp8"]["fp8_weight"] == 2
    assert precision.MEMORY_BYTES_PER_PARAM["bf16"]["fp8_weight"] == 0
