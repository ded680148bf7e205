"""Operator graphs of issue 15: mixture-of-experts blocks (expert parallelism, capacity),
context parallelism (ring attention) and Qwen2's Q/K/V-only biases.

FLOP convention of the identities: GEMM FLOPs only (2 per multiply-add); the input
embedding is a gather (no GEMM) and norms and biases are vector work, so the forward is
2·tokens·(GEMM weights a token runs through) + the attention core's 4·b·s²·a·head_dim per
layer (full square, causal or not, as Megatron's closed form), and the backward twice
the forward.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import cost, graph, models
from phaze.arch import efficiency, make_archs
from phaze.graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM
from phaze.models import ModelSpec

from naive import naive_ring_allreduce


def _moe(**kw):
    base = dict(name="tiny-moe", n_layers=4, hidden=128, heads=4, kv_heads=2, ffn_hidden=256,
                vocab=1024, seq_len=64, activation="swiglu", norm="rmsnorm", position="rotary",
                bias=False, tied_embeddings=False, n_experts=8, experts_per_token=2,
                expert_ffn_hidden=64)
    base.update(kw)
    return ModelSpec(**base)


def _gemm_weights(m, moe):
    """GEMM weights one token runs through in one block (routed: its top-k experts only)."""
    h, hd = m.hidden, m.head_dim
    mats = 3 if m.activation == "swiglu" else 2
    w = h * (m.heads * hd + 2 * m.kv_heads * hd) + m.heads * hd * h
    if not moe:
        return w + mats * h * m.ffn_hidden
    w += h * m.n_experts + m.experts_per_token * mats * h * m.expert_ffn_hidden
    if m.n_shared_experts:
        w += mats * h * m.n_shared_experts * m.shared_ffn_hidden + (h if m.shared_expert_gate else 0)
    return w


def _core(m, b):
    return 2 * (2 * b * m.seq_len * m.seq_len * m.heads * m.head_dim)   # QKᵀ and P·V


def _norms(m):
    n = 2 if m.norm == "layernorm" else 1
    return n * m.hidden * (2 * m.n_layers + (1 if m.final_norm else 0))


# --- the MoE block -----------------------------------------------------------------------

def test_mixtral_chain_parameters_and_runs():
    m = models.get("mixtral-8x7b")
    mg = graph.build_layers(m, 1, 1)
    assert [(L.kind, L.count) for L in mg.layers] == [("embedding", 1), ("moe_block", 32), ("head", 1)]
    assert mg.param_bytes == 2 * m.n_params == 2 * 46_702_792_704
    assert len(mg.chain()) == m.n_layers + 2 and mg.layer_ids() == list(range(-1, 33))
    blk = mg.kinds()["moe_block"]
    assert blk.expert_param_bytes == 2 * 8 * 3 * 4096 * 14336
    assert mg.expert_param_bytes == 32 * blk.expert_param_bytes


@pytest.mark.parametrize("t, ep", [(1, 1), (1, 2), (1, 8), (2, 4), (4, 8), (8, 1)])
def test_mixtral_flops_and_expert_sharding(t, ep):
    m = models.get("mixtral-8x7b").with_(seq_len=1024)
    b = 2
    mg = graph.build_layers(m, b, t, expert_parallel=ep, sequence_parallel=t > 1)
    T = b * m.seq_len
    forward = 2 * T * (m.n_layers * _gemm_weights(m, True) + m.hidden * m.padded_vocab(t)) \
        + m.n_layers * _core(m, b)
    assert mg.gemm_flops() * t == 3 * forward            # backward = 2 × forward
    # the same for the model-level count: n_active_params less the input table and norms
    assert m.n_active_params - m.vocab * m.hidden - _norms(m) + \
        m.hidden * (m.padded_vocab(1) - m.vocab) == m.n_layers * _gemm_weights(m, True) \
        + m.hidden * m.padded_vocab(1)
    blk = mg.kinds()["moe_block"]
    ref = graph.build_layers(m, b, t, sequence_parallel=t > 1).kinds()["moe_block"]
    assert blk.expert_param_bytes * ep == ref.expert_param_bytes
    assert blk.param_bytes - blk.expert_param_bytes == ref.param_bytes - ref.expert_param_bytes
    # tokens per rank do not change with ep: the same compute and stash
    assert blk.stash_bytes == ref.stash_bytes
    assert blk.forward.flops.sum() == ref.forward.flops.sum()


def test_moe_block_operators_and_all_to_alls():
    m = models.get("mixtral-8x7b").with_(seq_len=1024)
    mg = graph.build_layers(m, 1, 2, expert_parallel=4, sequence_parallel=True)
    f, g = mg.kinds()["moe_block"].forward, mg.kinds()["moe_block"].backward
    for name in ("router", "router_topk", "moe_permute", "alltoall_dispatch", "allgather_moe",
                 "expert_gate_proj", "expert_up_proj", "expert_swiglu", "expert_fc2",
                 "reduce_scatter_moe", "alltoall_combine", "moe_combine", "residual2"):
        assert name in f.names
    for name in ("moe_combine.bwd", "alltoall_combine.bwd", "expert_fc2.dX", "expert_fc2.dW",
                 "expert_gate_proj.dW", "alltoall_dispatch.bwd", "moe_permute.bwd",
                 "router_topk.bwd", "router.dX", "router.dW", "ln2.bwd", "ln1.bwd"):
        assert name in g.names
    T = 1024 // 2                                  # tokens this slice routes (SP: s/t)
    i = f.names.index("alltoall_dispatch")
    assert f.kind[i] == KIND_COLLECTIVE and f.group_size[i] == 4
    assert f.bytes_in[i] == T * 2 * 4096 * 2 and f.comm_bytes[i] == f.bytes_in[i] // 2
    # grouped GEMM: batch = local experts, rows = tokens each receives (t·ep·T·k/n)
    j = f.names.index("expert_gate_proj")
    assert tuple(f.dims[j]) == (2, 2 * 4 * T * 2 // 8, 4096, 14336 // 2)
    # router: 16-bit, no bias, replicated
    r = f.names.index("router")
    assert f.kind[r] == KIND_GEMM and tuple(f.dims[r]) == (1, T, 4096, 8)
    # no all-to-all without expert parallelism
    one = graph.build_layers(m, 1, 2, sequence_parallel=True).kinds()["moe_block"]
    assert not any(n.startswith("alltoall_") for n in one.forward.names + one.backward.names)


def test_capacity_factor_pads_tokens_per_expert():
    m = models.get("mixtral-8x7b").with_(seq_len=1000)     # 1000·2/8 = 250 per expert
    blk = lambda **kw: graph.build_layers(m, 1, 1, expert_parallel=2, **kw).kinds()["moe_block"]
    rows = lambda L: int(L.forward.dims[L.forward.names.index("expert_fc2"), 1])
    assert rows(blk()) == 2 * 250 == rows(blk(capacity_factor=1.0))
    assert rows(blk(capacity_factor=1.25)) == 2 * 313               # ⌈250 · 1.25⌉
    assert rows(blk(capacity_factor=0.5)) == 2 * 125                # dropped tokens
    a, c = blk(), blk(capacity_factor=1.25)
    i = a.forward.names.index("alltoall_dispatch")
    assert c.forward.bytes_in[i] * 250 == a.forward.bytes_in[i] * 313


def test_all_to_all_price_both_models():
    m = _moe(n_experts=16, experts_per_token=2)
    row = make_archs(base="tpuv4", node_size=8, link_gb_per_s=300.0, net_gb_per_s=25.0)
    for ep, bw in ((8, 300e9), (16, 25e9)):          # fits a node: the link; else the network
        f = graph.build_layers(m, 1, 1, expert_parallel=ep).kinds()["moe_block"].forward
        i = f.names.index("alltoall_dispatch")
        nbytes = int(f.bytes_in[i])
        single, intra = cost.op_latencies(f, row)
        assert single[i, 0] == intra[i, 0] == pytest.approx((ep - 1) / ep * nbytes / bw, rel=1e-12)
        assert cost.roofline_bounds(f, row)[0][i, 0] == pytest.approx(single[i, 0], rel=1e-12)
        # calibrated: the α–β ring of half the bytes (its bandwidth term is the all-to-all's)
        eff = efficiency.rows(None, 1)[0]
        cal, _ = cost.op_latencies(f, row, model="calibrated")
        assert cal[i, 0] == pytest.approx(naive_ring_allreduce(
            ep, nbytes // 2, 8, 300e9, 25e9, eff), rel=1e-12)


def test_shared_experts_and_gate():
    m = _moe(n_shared_experts=2, shared_ffn_hidden=32, shared_expert_gate=True)
    mg = graph.build_layers(m, 2, 1)
    assert mg.param_bytes == 2 * m.n_params
    f = mg.kinds()["moe_block"].forward
    for name in ("shared_gate_proj", "shared_up_proj", "shared_fc2", "shared_gate"):
        assert name in f.names
    i = f.names.index("shared_fc2")
    assert tuple(f.dims[i]) == (1, 2 * 64, 64, 128)          # one MLP of width 2 × 32
    sp = graph.build_layers(m, 2, 2, sequence_parallel=True, expert_parallel=2)
    assert {"allgather_shared", "reduce_scatter_shared"} <= set(sp.kinds()["moe_block"].forward.names)


def test_fp8_marks_expert_gemms_not_the_router():
    f = graph.build_layers(_moe(), 1, 1, dtype="fp8").kinds()["moe_block"].forward
    fp8 = {n for n, x in zip(f.names, f.fp8) if x}
    assert {"expert_gate_proj", "expert_up_proj", "expert_fc2", "q_proj"} <= fp8
    assert "router" not in fp8


def test_dense_and_moe_runs_follow_moe_layer_ids():
    m = _moe(n_layers=7, first_dense_layers=1, moe_every=2)      # MoE at 2, 4, 6
    mg = graph.build_layers(m, 1, 1)
    assert [(L.kind, L.count) for L in mg.layers] == [
        ("embedding", 1), ("block", 2), ("moe_block", 1), ("block", 1), ("moe_block", 1),
        ("block", 1), ("moe_block", 1), ("head", 1)]
    kinds = [L.kind for L in mg.chain()][1:-1]
    assert [i for i, k in enumerate(kinds) if k == "moe_block"] == list(m.moe_layer_ids)
    assert mg.param_bytes == 2 * m.n_params
    # runs of a kind share one set of graphs
    runs = [L for L in mg.layers if L.kind == "moe_block"]
    assert all(L.forward is runs[0].forward for L in runs)
    assert set(mg.kinds()) == {"embedding", "block", "moe_block", "head"}


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_moe_identities_property(data):
    n_e = data.draw(st.sampled_from([2, 4, 8]))
    shared = data.draw(st.integers(0, 2))
    m = _moe(n_layers=data.draw(st.integers(1, 4)),
             activation=data.draw(st.sampled_from(["swiglu", "gelu"])),
             norm=data.draw(st.sampled_from(["rmsnorm", "layernorm"])),
             bias=data.draw(st.booleans()), n_experts=n_e,
             experts_per_token=data.draw(st.integers(1, n_e)),
             expert_ffn_hidden=data.draw(st.sampled_from([32, 64])), n_shared_experts=shared,
             shared_ffn_hidden=32 if shared else None,
             shared_expert_gate=bool(shared) and data.draw(st.booleans()),
             moe_every=data.draw(st.integers(1, 2)), tied_embeddings=data.draw(st.booleans()))
    b = data.draw(st.integers(1, 2))
    t = data.draw(st.sampled_from([1, 2]))
    ep = data.draw(st.sampled_from([e for e in (1, 2, 4, 8) if n_e % e == 0]))
    mg = graph.build_layers(m, b, t, expert_parallel=ep, sequence_parallel=t > 1)
    n_moe = len(m.moe_layer_ids)
    T = b * m.seq_len
    forward = 2 * T * (n_moe * _gemm_weights(m, True) + (m.n_layers - n_moe) * _gemm_weights(m, False)
                       + m.hidden * m.padded_vocab(t)) + m.n_layers * _core(m, b)
    assert mg.gemm_flops() * t == 3 * forward
    for L in mg.layers:
        assert L.backward.flops.sum() == 2 * L.forward.flops.sum()
    if t == 1:
        tied = 2 * m.vocab * m.hidden if m.tied_embeddings else 0
        experts = 2 * n_moe * n_e * models.expert_params(m)
        assert mg.param_bytes - tied == 2 * m.n_params - experts + experts // ep
        assert mg.expert_param_bytes * ep == experts


@pytest.mark.parametrize("kw, match", [
    (dict(expert_parallel=3), "expert_parallel must divide n_experts"),
    (dict(expert_parallel=0), "expert_parallel"),
    (dict(capacity_factor=0), "capacity_factor"),
    (dict(capacity_factor=float("nan")), "capacity_factor"),
])
def test_bad_moe_options(kw, match):
    with pytest.raises(ValueError, match=match):
        graph.build_layers(_moe(), 1, 1, **kw)


def test_moe_options_refused_for_dense_models_and_tp_without_sp():
    with pytest.raises(ValueError, match="expert_parallel must be 1 for gpt3-175b"):
        graph.build_layers("gpt3-175b", 1, 1, expert_parallel=2)
    with pytest.raises(ValueError, match="capacity_factor must be None"):
        graph.build_layers("gpt3-175b", 1, 1, capacity_factor=1.0)
    with pytest.raises(ValueError, match="needs sequence_parallel=True"):
        graph.build_layers(_moe(), 1, 2)


# --- context parallelism -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b", "mixtral-8x7b", "deepseek-v2-lite"])
@pytest.mark.parametrize("cp", [2, 4, 8])
def test_cp_splits_flops_stash_and_boundaries(name, cp):
    m = models.get(name).with_(seq_len=2048)
    sp = m.is_moe
    kw = dict(flash_attention=True, sequence_parallel=sp)
    a = graph.build_layers(m, 2, 2 if sp else 1, **kw)
    c = graph.build_layers(m, 2, 2 if sp else 1, context_parallel=cp, **kw)
    assert c.gemm_flops() * cp == a.gemm_flops()            # GEMMs and the attention core
    for x, y in zip(a.layers, c.layers):
        assert (y.stash_bytes * cp, y.boundary_bytes * cp) == (x.stash_bytes, x.boundary_bytes)
        assert y.stash("full") * cp == x.stash("full") and y.param_bytes == x.param_bytes


def test_ring_kv_exchange_overlaps_attention():
    m = models.get("llama3-8b").with_(seq_len=4096)
    cp, b = 4, 1
    blk = graph.build_layers(m, b, 1, flash_attention=True, context_parallel=cp).kinds()["block"]
    f, g = blk.forward, blk.backward
    i, j = f.names.index("ring_kv_exchange"), f.names.index("flash_attn")
    kv = m.kv_heads * m.head_dim
    # cp − 1 steps of 2·b·(s/cp)·kv_dim elements; priced as (cp−1)·chunk / BW
    assert f.bytes_in[i] == (cp - 1) * 2 * b * (4096 // cp) * kv * 2
    row = make_archs(base="tpuv4", node_size=8, link_gb_per_s=300.0, net_gb_per_s=25.0)
    assert cost.op_latencies(f, row)[0][i, 0] == pytest.approx(f.bytes_in[i] / 300e9, rel=1e-12)
    # neither waits for the other; out_proj waits for both
    assert j not in f.preds(i) and i not in f.preds(j)
    assert {i, j} <= set(f.preds(f.names.index("out_proj")).tolist())
    # causal: 1/cp of the key tiles up to the diagonal, (4096 + 128)/2 keys per query
    assert tuple(f.dims[j]) == (b * m.heads, 4096 // cp, m.head_dim, 2 * (4096 + 128) // 2)
    k = g.names.index("ring_kv_exchange.bwd")
    assert g.bytes_in[k] == 2 * f.bytes_in[i] and g.group_size[k] == cp
    for name in ("rotary.bwd", "v_proj.dX"):               # K (through rotary) and V wait
        assert k in g.preds(g.names.index(name))


@pytest.mark.parametrize("kw, match", [
    (dict(context_parallel=2), "needs flash_attention"),
    (dict(context_parallel=3, flash_attention=True), r"divisible by 6 \(2·cp"),
    (dict(context_parallel=0, flash_attention=True), "context_parallel"),
    (dict(context_parallel=512, flash_attention=True, sequence_parallel=True),
     r"tensor_parallel \(8\) × context_parallel \(512\)"),
])
def test_bad_cp(kw, match):
    m = models.get("llama3-8b").with_(seq_len=2048)
    with pytest.raises(ValueError, match=match):
        graph.build_layers(m, 1, 8 if kw.get("sequence_parallel") else 1, **kw)


# --- Qwen2: biases on Q, K, V only -------------------------------------------------------

def test_qwen2_qkv_bias_graph():
    m = models.get("qwen2-7b")
    assert "qwen2-7b" in models.names()
    for t in (1, 2, 4):
        mg = graph.build_layers(m, 1, t)
        if t == 1:
            assert mg.param_bytes == 2 * m.n_params == 2 * 7_615_616_512
        f = mg.kinds()["block"].forward
        for name in ("q_proj", "k_proj", "v_proj"):
            i = f.names.index(name)
            width = f.dims[i, 3]
            assert f.kind[i] == KIND_FUSED and f.bytes_in[i] == 2 * (f.dims[i, 1] * m.hidden
                                                                      + m.hidden * width + width)
        for name in ("out_proj", "gate_proj", "up_proj", "fc2"):
            assert f.kind[f.names.index(name)] == KIND_GEMM
        assert "qkv.dbias" in mg.kinds()["block"].backward.names
    plain = m.with_(qkv_bias=False)
    assert graph.build_layers(plain, 1, 4).gemm_flops() == mg.gemm_flops()   # biases: no GEMM
    assert graph.build_layers(m, 1, 1).param_bytes - graph.build_layers(plain, 1, 1).param_bytes \
        == 2 * m.n_layers * (m.heads + 2 * m.kv_heads) * m.head_dim
    assert "qkv.dbias" not in graph.build_layers(plain, 1, 1).kinds()["block"].backward.names
    # a model with every bias keeps its Q/K/V bias gradients as before
    assert "qkv.dbias" in graph.build_layers("gpt3-175b", 1, 1).kinds()["block"].backward.names


# --- multi-head latent attention (DeepSeek-V2) ---------------------------------------------

def _mla_attention_gemm_weights(m):
    """GEMM weights of MLA's projections (models.attention_params less the latent norms)."""
    n = 2 if m.norm == "layernorm" else 1
    return models.attention_params(m) - n * (m.q_lora_rank + m.kv_lora_rank)


@pytest.mark.parametrize("q_lora", [0, 96])
@pytest.mark.parametrize("t", [1, 2, 4])
@pytest.mark.parametrize("flash", [False, True])
def test_mla_parameters_and_flops(q_lora, t, flash):
    m = _moe(heads=4, kv_heads=4, kv_lora_rank=64, q_lora_rank=q_lora, qk_rope_head_dim=16,
             v_head_dim=24, n_shared_experts=1, first_dense_layers=1)
    b = 2
    mg = graph.build_layers(m, b, t, sequence_parallel=t > 1, flash_attention=flash)
    if t == 1:
        assert mg.param_bytes == 2 * m.n_params
    s, a, qk, vd = m.seq_len, m.heads, m.head_dim + m.qk_rope_head_dim, m.v_head_dim
    attn = _mla_attention_gemm_weights(m)
    mats = 3
    h = m.hidden
    moe = h * m.n_experts + m.experts_per_token * mats * h * m.expert_ffn_hidden \
        + mats * h * m.shared_ffn_hidden
    n_moe = len(m.moe_layer_ids)
    T = b * s
    core = 2 * b * a * s * s * (qk + vd)                      # QKᵀ over qk, P·V over vd
    forward = 2 * T * (m.n_layers * attn + n_moe * moe + (m.n_layers - n_moe) * mats * h * m.ffn_hidden
                       + h * m.padded_vocab(t)) + m.n_layers * core
    # flash's backward recomputes QKᵀ (as the dense blocks' does)
    recompute = m.n_layers * 2 * b * a * s * s * qk if flash else 0
    # the down-projections are replicated: every slice runs them on all its tokens
    down = m.n_layers * 3 * 2 * T * h * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    assert mg.gemm_flops() * t == 3 * forward + recompute + (t - 1) * down
    # replicated down-projections: the sharded part shrinks by t
    if t > 1:
        one = graph.build_layers(m, b, 1).kinds()["block"]
        blk = mg.kinds()["block"]
        ql = m.q_lora_rank
        replicated = 2 * (h * (ql + m.kv_lora_rank + m.qk_rope_head_dim) + 2 * h
                          + (ql + m.kv_lora_rank))
        sharded = one.param_bytes - replicated
        assert blk.param_bytes - replicated == sharded // t


def test_deepseek_v2_lite_graphs():
    m = models.get("deepseek-v2-lite")
    mg = graph.build_layers(m, 1, 1)
    assert mg.param_bytes == 2 * m.n_params == 2 * 15_706_484_224
    f = mg.kinds()["block"].forward
    assert {"q_proj", "kv_a_proj", "kv_a_norm", "kv_b_proj", "rotary", "out_proj"} <= set(f.names)
    i = f.names.index("attn_scores")
    assert tuple(f.dims[i]) == (16, 4096, 128 + 64, 4096)
    ep = graph.build_layers(m, 1, 2, sequence_parallel=True, expert_parallel=8,
                            flash_attention=True, context_parallel=2)
    blk = ep.kinds()["moe_block"]
    assert blk.expert_param_bytes == 2 * 8 * 3 * 2048 * (1408 // 2)
    assert "ring_kv_exchange" in blk.forward.names and "shared_fc2" in blk.forward.names
    fp8 = graph.build_layers(m, 1, 1, dtype="fp8").kinds()["block"].forward
    assert {"q_proj", "kv_a_proj", "kv_b_proj"} <= {n for n, x in zip(fp8.names, fp8.fp8) if x}


@pytest.mark.parametrize("name", ["mixtral-8x7b", "mixtral-8x22b"])
def test_model_level_flops_from_n_active_params(name):
    """Forward + backward GEMM FLOPs of the chain = 3 × [2·tokens·(n_active_params less the
    input token table (a gather) and the norms, the logits at the padded vocabulary) + the
    attention core of every layer] with top-k routing and capacity_factor None."""
    m = models.get(name).with_(seq_len=512)
    b = 2
    T = b * m.seq_len
    gemm_params = (m.n_active_params - m.vocab * m.hidden - _norms(m)
                   + m.hidden * (m.padded_vocab(1) - m.vocab))
    assert graph.build_layers(m, b, 1).gemm_flops() == 3 * (2 * T * gemm_params
                                                             + m.n_layers * _core(m, b))


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["llama3-8b", "gpt3-175b", "mixtral-8x7b", "deepseek-v2-lite"]),
       cp=st.sampled_from([1, 2, 4, 8]), t=st.sampled_from([1, 2, 4]), b=st.integers(1, 2),
       dtype=st.sampled_from(["bf16", "fp8"]))
def test_cp_property(name, cp, t, b, dtype):
    m = models.get(name).with_(seq_len=1024)
    kw = dict(flash_attention=True, sequence_parallel=t > 1, dtype=dtype)
    a = graph.build_layers(m, b, t, **kw)
    c = graph.build_layers(m, b, t, context_parallel=cp, **kw)
    assert c.gemm_flops() * cp == a.gemm_flops()
    for x, y in zip(a.layers, c.layers):
        for mode in ("none", "selective", "full"):
            assert y.stash(mode) * cp == x.stash(mode)
        assert y.boundary_bytes * cp == x.boundary_bytes and y.param_bytes == x.param_bytes
        ring = [i for i, n in enumerate(y.forward.names) if n == "ring_kv_exchange"]
        assert len(ring) == (1 if cp > 1 and y.kind.endswith("block") else 0)
