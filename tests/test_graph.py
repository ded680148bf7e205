import numpy as np
import pytest
from hypothesis import given, strategies as st

from phaze import models
from phaze.graph import (KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR,
                         VECTOR_CYCLES_PER_ELEMENT, ModelGraph, build_layers)

from naive import naive_gemm_flops, naive_n_params, naive_slice_param_bytes
from strategies import model_specs

GPT_FAMILY = ["megatron-gpt2-54", "megatron-gpt2-72", "gpt3-175b", "megatron-1.7b",
              "megatron-3.6b", "megatron-7.5b", "megatron-18.4b", "megatron-39.1b",
              "megatron-76.1b", "megatron-145.6b", "megatron-310.1b", "megatron-529.6b",
              "megatron-1t"]


def _gemm_names(g):
    return [n for n, k in zip(g.names, g.kind) if k in (KIND_GEMM, KIND_FUSED)]


def _ancestors(g, i):
    seen, todo = set(), [i]
    while todo:
        for p in g.preds(todo.pop()):
            p = int(p)
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _check_structure(mg: ModelGraph):
    m, t = mg.model, mg.tensor_parallel
    for layer in mg.layers:
        assert layer.tensor_parallel == (t > 1)
        for g in (layer.forward, layer.backward):
            assert len(g.order) == g.n_ops                        # acyclic (OpGraph checks too)
            sources = [i for i in range(g.n_ops) if len(g.preds(i)) == 0]
            assert len(sources) == 1                             # one entry point ...
            reach = {sources[0]}
            for i in g.order:                                   # ... reaching every operator
                if i != sources[0] and any(int(p) in reach for p in g.preds(i)):
                    reach.add(int(i))
            assert len(reach) == g.n_ops
            gemm = np.isin(g.kind, (KIND_GEMM, KIND_FUSED))
            assert np.all(g.dims[gemm] > 0)
            assert np.all(g.dims[~gemm] == 0)
            assert np.all(g.elements > 0)
            assert np.all(g.bytes_in > 0) and np.all(g.bytes_out > 0)
            vec = np.isin(g.kind, (KIND_VECTOR, KIND_FUSED))
            assert np.all(g.cycles_per_element[vec] > 0)
            assert np.all(g.cycles_per_element[g.kind == KIND_GEMM] == 0)
            coll = g.kind == KIND_COLLECTIVE
            if t == 1:
                assert not coll.any()
            assert np.all(g.comm_bytes[coll] > 0) and np.all(g.comm_bytes[~coll] == 0)
            assert np.all(g.group_size[coll] == t) and np.all(g.group_size[~coll] == 1)
        # Every forward GEMM has two independent backward GEMMs; the .dW one is a sink.
        fwd, bwd = layer.forward, layer.backward
        index = {n: i for i, n in enumerate(bwd.names)}
        succ = np.zeros(bwd.n_ops, dtype=int)
        np.add.at(succ, bwd.pred_idx, 1)
        assert sorted(_gemm_names(bwd)) == sorted(
            [n + ".dX" for n in _gemm_names(fwd)] + [n + ".dW" for n in _gemm_names(fwd)])
        for name in _gemm_names(fwd):
            dx, dw = index[name + ".dX"], index[name + ".dW"]
            assert dx not in _ancestors(bwd, dw) and dw not in _ancestors(bwd, dx)
            f = fwd.flops[fwd.names.index(name)]
            assert bwd.flops[dx] == f and bwd.flops[dw] == f
            if not name.startswith("attn_"):
                assert succ[dw] == 0            # weight gradients feed nothing
    assert mg.layers[0].boundary_bytes == mg.layers[1].boundary_bytes \
        == mg.microbatch * m.seq_len * m.hidden * mg.layers[0].forward.bytes_per_element
    assert mg.layers[2].boundary_bytes == 0


@pytest.mark.parametrize("name", GPT_FAMILY)
def test_gemm_flops_closed_form(name):
    m = models.get(name)
    for b in (1, 3):
        assert build_layers(name, b, 1).gemm_flops() == naive_gemm_flops(m, b)
    for t in (2, 4, 8, 32):
        if m.valid_tensor_parallel(t):
            mg = build_layers(name, 2, t)
            assert mg.gemm_flops() * t == naive_gemm_flops(m, 2, t)


@pytest.mark.parametrize("name", [n for n in models.names() if not models.get(n).is_moe
                                  and len(set(models.get(n).layer_kinds)) == 1])
def test_param_bytes_sum_to_two_per_param(name):
    # Dense models of one layer kind (the naive slice reference is [embedding, block,
    # head]); mixture of experts: tests/test_graph_moe.py; models mixing layer kinds
    # (hybrid, sliding/full): tests/test_layer_kinds.py.
    m = models.get(name)
    mg = build_layers(m, 1, 1)
    tied_copy = 2 * m.vocab * m.embed_width if m.tied_embeddings else 0
    assert mg.param_bytes - tied_copy == 2 * m.n_params
    assert sum(layer.param_bytes for layer in mg.chain()) == mg.param_bytes
    for t in (1, 2, 4, 8, 16):
        if m.valid_tensor_parallel(t):
            mg = build_layers(m, 1, t)
            ref = naive_slice_param_bytes(m, t)
            assert [l.param_bytes for l in mg.layers] == [ref["embedding"], ref["block"], ref["head"]]


def test_sharded_weights_shrink_by_t():
    m = models.get("gpt3-175b")
    h, B = m.hidden, 2
    # Replicated in a block: two LayerNorms (weight+bias) and the row-parallel biases.
    replicated = B * (4 * h + 2 * h)
    base = build_layers(m, 1, 1).layers[1].param_bytes - replicated
    for t in (2, 4, 8):
        assert build_layers(m, 1, t).layers[1].param_bytes - replicated == base // t
        emb = build_layers(m, 1, t).layers[0].param_bytes
        assert emb == B * (m.vocab * h // t + m.seq_len * h)


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-bert", "megatron-7.5b"])
@pytest.mark.parametrize("t", [1, 2, 8])
def test_block_stash_matches_korthikanti(name, t):
    m = models.get(name)
    b = 2
    s, h, a = m.seq_len, m.hidden, m.heads
    sbh = s * b * h
    expected = sbh * (10 + 24 // t) + 5 * a * s * s * b // t
    assert 24 % t == 0
    assert build_layers(m, b, t).layers[1].stash_bytes == expected


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-7b", "opt-350m", "bert-large"])
@pytest.mark.parametrize("t", [1, 4])
def test_zoo_structure(name, t):
    mg = build_layers(name, 2, t)
    _check_structure(mg)
    assert [l.kind for l in mg.layers] == ["embedding", "block", "head"]
    assert [l.count for l in mg.layers] == [1, mg.model.n_layers, 1]
    chain = mg.chain()
    assert len(chain) == mg.model.n_layers + 2 and chain[0].kind == "embedding"
    assert chain[-1].kind == "head"
    assert mg.layer_ids() == list(range(-1, mg.model.n_layers + 1))
    fwd, bwd = mg.layers[1].forward, mg.layers[1].backward
    n_coll = 2 if t > 1 else 0
    assert (fwd.kind == KIND_COLLECTIVE).sum() == n_coll == (bwd.kind == KIND_COLLECTIVE).sum()
    if t > 1:
        i = fwd.names.index("allreduce_attn")
        assert fwd.comm_bytes[i] == 2 * 2 * mg.model.seq_len * mg.model.hidden
        assert [fwd.names[p] for p in fwd.preds(i)] == ["out_proj"]
        j = bwd.names.index("allreduce_qkv.dX")
        assert [bwd.names[p] for p in bwd.preds(j)] == ["qkv.dX_sum"]


def test_block_operators_megatron():
    mg = build_layers("gpt3-175b", 1, 8)
    f = mg.layers[1].forward
    h, s = 12288, 2048
    assert f.names == ["ln1", "q_proj", "k_proj", "v_proj", "attn_scores", "softmax",
                       "attn_context", "out_proj", "allreduce_attn", "residual1", "ln2", "fc1",
                       "fc2", "allreduce_mlp", "residual2"]
    dims = dict(zip(f.names, map(tuple, f.dims)))
    assert dims["q_proj"] == (1, s, h, h // 8)
    assert dims["attn_scores"] == (96 // 8, s, 128, s)
    assert dims["attn_context"] == (96 // 8, s, s, 128)
    assert dims["out_proj"] == (1, s, h // 8, h)
    assert dims["fc1"] == (1, s, h, 4 * h // 8)
    assert dims["fc2"] == (1, s, 4 * h // 8, h)
    kinds = dict(zip(f.names, f.kind))
    assert kinds["fc1"] == KIND_FUSED and kinds["out_proj"] == KIND_GEMM
    assert f.cycles_per_element[f.names.index("fc1")] == \
        VECTOR_CYCLES_PER_ELEMENT["bias"] + VECTOR_CYCLES_PER_ELEMENT["gelu"]
    head = mg.layers[2].forward
    assert tuple(head.dims[head.names.index("logits")]) == (1, s, h, 51200 // 8)


def test_gqa_swiglu_rotary_block():
    m = models.ModelSpec(name="gqa", n_layers=2, hidden=64, heads=8, kv_heads=2, ffn_hidden=96,
                         vocab=1000, seq_len=16, activation="swiglu", norm="rmsnorm",
                         position="rotary", bias=False, tied_embeddings=False)
    mg = build_layers(m, 3, 2)
    _check_structure(mg)
    f, g = mg.layers[1].forward, mg.layers[1].backward
    dims = dict(zip(f.names, map(tuple, f.dims)))
    assert dims["q_proj"] == (1, 48, 64, 4 * 8)
    assert dims["k_proj"] == dims["v_proj"] == (1, 48, 64, 1 * 8)
    assert dims["gate_proj"] == dims["up_proj"] == (1, 48, 64, 48)
    assert "rotary" in f.names and "swiglu" in f.names and "fc1" not in f.names
    gd = dict(zip(g.names, map(tuple, g.dims)))
    # dK, dV per K/V head sum over the 4 query heads sharing it.
    assert gd["attn_scores.dW"] == (3 * 1, 16, 4 * 16, 8)
    assert gd["attn_context.dW"] == (3 * 1, 16, 4 * 16, 8)
    gate_up = [g.names[p] for p in g.preds(g.names.index("mlp_in.dX_sum"))]
    assert gate_up == ["gate_proj.dX", "up_proj.dX"]
    # Untied: parameter bytes are exactly 2 per parameter at t = 1.
    assert build_layers(m, 1, 1).param_bytes == 2 * m.n_params


def test_bytes_per_element_configurable():
    m = models.get("megatron-bert")
    two, four = build_layers(m, 1, 2), build_layers(m, 1, 2, bytes_per_element=4)
    assert [l.param_bytes * 2 for l in two.layers] == [l.param_bytes for l in four.layers]
    assert four.layers[1].forward.bytes_per_element == 4
    assert four.layers[1].boundary_bytes == 2 * two.layers[1].boundary_bytes


@pytest.mark.parametrize("kwargs,match", [
    (dict(model="gpt2-xl", microbatch=1, tensor_parallel=2), "tensor_parallel"),
    (dict(model="gpt3-175b", microbatch=0, tensor_parallel=1), "microbatch"),
    (dict(model="gpt3-175b", microbatch=1, tensor_parallel=0), "tensor_parallel"),
    (dict(model="gpt3-175b", microbatch=1, tensor_parallel=1, bytes_per_element=0),
     "bytes_per_element"),
    (dict(model=42, microbatch=1, tensor_parallel=1), "model"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_layers(**kwargs)


def test_unknown_model_is_keyerror():
    with pytest.raises(KeyError, match="known models"):
        build_layers("nope", 1, 1)


@pytest.mark.parametrize("field,value", [("n_layers", 0), ("hidden", -4), ("heads", 0),
                                         ("vocab", -1), ("seq_len", 0)])
def test_invalid_specs_name_field(field, value):
    with pytest.raises(ValueError, match=field):
        build_layers(models.get("megatron-bert").with_(**{field: value}), 1, 1)


@given(model_specs(), st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_random_specs_build_valid_graphs(m, b, t):
    if not m.valid_tensor_parallel(t):
        with pytest.raises(ValueError, match="tensor_parallel"):
            build_layers(m, b, t)
        return
    mg = build_layers(m, b, t)
    _check_structure(mg)
    ref = naive_slice_param_bytes(m, t)
    assert [l.param_bytes for l in mg.layers] == [ref["embedding"], ref["block"], ref["head"]]
    if t == 1:
        tied = 2 * m.vocab * m.embed_width if m.tied_embeddings else 0
        assert mg.param_bytes - tied == 2 * naive_n_params(m)
    assert all(l.stash_bytes > 0 for l in mg.layers)


@given(model_specs(), st.sampled_from(["n_layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                                       "vocab", "seq_len", "embed_proj", "max_positions"]),
       st.integers(-1000, 0))
def test_random_invalid_specs_name_the_field(m, field, value):
    if field in ("embed_proj", "max_positions") and value == 0:
        value = -1                      # 0 is allowed there (no projection / no table)
    with pytest.raises(ValueError, match=field):
        build_layers(m.with_(**{field: value}), 1, 1)


@given(model_specs(), st.integers(2, 12))
def test_random_width_not_dividing_heads(m, t):
    if not m.valid_tensor_parallel(t):
        with pytest.raises(ValueError, match="tensor_parallel must divide heads"):
            build_layers(m, 1, t)


# -- the kernels Megatron-LM launches (kernels="megatron", the calibrated step's graphs) ----

@pytest.mark.parametrize("name,b,t", [("gpt3-175b", 1, 8), ("bert-large", 2, 1), ("opt-350m", 4, 2)])
def test_megatron_kernels_split_the_study_fusions(name, b, t):
    """Same GEMM FLOPs, stashes and parameters; the attention dropout and the bias + GeLU
    become their own kernels, which read their input back, and Q, K, V are one GEMM
    (Megatron-LM's query_key_value) with one input- and one weight-gradient GEMM and no
    sum of three input gradients."""
    from phaze.graph import build_layers
    study = build_layers(name, b, t).layers[1]
    mega = build_layers(name, b, t, kernels="megatron").layers[1]
    for a, m in ((study.forward, mega.forward), (study.backward, mega.backward)):
        assert a.flops.sum() == m.flops.sum()
    spec = build_layers(name, b, t).model
    T, h = b * spec.seq_len, spec.hidden
    width = (spec.heads + 2 * spec.kv_heads) * spec.head_dim // t
    for g, names in ((mega.forward, {"qkv_proj": (1, T, h, width)}),
                     (mega.backward, {"qkv_proj.dX": (1, T, width, h),
                                      "qkv_proj.dW": (1, h, T, width)})):
        idx = {n: i for i, n in enumerate(g.names)}
        for n, dims in names.items():
            assert tuple(int(x) for x in g.dims[idx[n]]) == dims
        assert not {"q_proj", "k_proj", "v_proj", "q_proj.dX", "qkv.dX_sum"} & set(idx)
    for mode in ("none", "selective", "full"):
        assert study.stash(mode) == mega.stash(mode)
    assert study.param_bytes == mega.param_bytes and study.boundary_bytes == mega.boundary_bytes
    fw = {n: i for i, n in enumerate(mega.forward.names)}
    assert {"softmax", "attn_dropout", "fc1_act"} <= set(fw)
    scores = b * (build_layers(name, b, t).model.heads // t) * build_layers(name, b, t).model.seq_len ** 2
    e = mega.forward.bytes_per_element
    # softmax: scores in, probabilities out; dropout: probabilities in, dropped + 1-byte mask out
    assert mega.forward.bytes_out[fw["softmax"]] == scores * e
    assert mega.forward.bytes_in[fw["attn_dropout"]] == scores * e
    assert mega.forward.bytes_out[fw["attn_dropout"]] == scores * (e + 1)
    bw = {n: i for i, n in enumerate(mega.backward.names)}
    assert mega.backward.bytes_in[bw["attn_dropout.bwd"]] == scores * (e + 1)
    assert mega.backward.bytes_in[bw["softmax.bwd"]] == 2 * scores * e


def test_kernels_option_is_checked():
    from phaze.graph import build_layers
    with pytest.raises(ValueError, match="kernels must be one of study, megatron"):
        build_layers("bert-large", 1, 1, kernels="fused")
