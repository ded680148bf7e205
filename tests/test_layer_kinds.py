"""The layer kinds of issue 27 in the graph and the step model: sliding-window and chunked
attention priced by the key tiles their kernels compute, the Mamba-2 mixer, MLP-only and
mixer-only layers, multi-token prediction, qk-norm / sandwich norms / sinks / GeGLU —
FLOP identities per kind by hand, parameter bytes equal to the model's counts, the step
kernels against their Python mirror on multi-kind models, and the plan search against the
brute force over training_step on tiny hybrid, MoE and MTP models."""
import dataclasses
import math

import numpy as np
import pytest

import naive_step
from phaze import graph, models, step
from phaze.arch import make_archs, presets
from phaze.graph import _ops
from phaze.models import ModelSpec
from phaze.step import _kernels as kern
from phaze.step import _layers, _plans

# -- tiny models of each family ---------------------------------------------------------

#: Nemotron-H-like: Mamba-2, attention-only and MLP-only layers.
HYBRID = ModelSpec(
    name="tiny-hybrid", n_layers=6, hidden=64, heads=4, kv_heads=2, ffn_hidden=256, vocab=500,
    seq_len=256, activation="squared_relu", norm="rmsnorm", position="none", bias=False,
    tied_embeddings=False,
    layer_mixers=("mamba", "none", "attention", "none", "mamba", "none"),
    layer_ffns=("none", "dense", "none", "dense", "none", "dense"),
    mamba_heads=4, mamba_head_dim=32, mamba_state=16, mamba_groups=2, mamba_conv=4,
    mamba_chunk=64)
#: GPT-OSS-like: sliding and full attention alternating, every layer MoE, sinks, biases.
OSS = ModelSpec(
    name="tiny-oss", n_layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=64, vocab=500,
    seq_len=512, activation="swiglu", norm="rmsnorm", position="rotary", bias=True,
    tied_embeddings=False, n_experts=4, experts_per_token=2, expert_ffn_hidden=64,
    layer_mixers=("sliding", "attention", "sliding", "attention"), sliding_window=128,
    attention_sinks=True, router_bias=True)
#: DeepSeek-V3-like: a dense first layer, MoE layers with a shared expert, one MTP module.
MTP = ModelSpec(
    name="tiny-mtp", n_layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=500,
    seq_len=128, activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
    tied_embeddings=False, n_experts=4, experts_per_token=2, expert_ffn_hidden=64,
    n_shared_experts=1, first_dense_layers=1, mtp_layers=1)
#: Llama-4-like: chunked and full attention, dense and MoE layers (three kinds).
CHUNKED = ModelSpec(
    name="tiny-chunked", n_layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=128,
    vocab=500, seq_len=512, activation="swiglu", norm="rmsnorm", position="rotary",
    bias=False, tied_embeddings=False, n_experts=4, experts_per_token=1, expert_ffn_hidden=64,
    n_shared_experts=1, layer_mixers=("chunked", "chunked", "chunked", "attention"),
    layer_ffns=("dense", "moe", "dense", "moe"), attention_chunk=256)
#: Gemma-like: GeGLU, sandwich norms, qk-norm, sliding and full attention, tied embeddings.
GEMMA = ModelSpec(
    name="tiny-gemma", n_layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, vocab=500,
    seq_len=512, activation="geglu", norm="rmsnorm", position="rotary", bias=False,
    head_dim=32, qk_norm=True, sandwich_norm=True,
    layer_mixers=("sliding", "attention", "sliding", "attention"), sliding_window=256)

TINY = [HYBRID, OSS, MTP, CHUNKED, GEMMA]


# -- the keys a windowed kernel computes ------------------------------------------------

def _keys_by_query(s, visible_lo):
    """Keys per query a tile kernel computes, by brute force: per query tile of 128 rows,
    every key tile from the one holding the earliest key any of its queries sees up to the
    diagonal tile, in whole tiles (``visible_lo(i)``: the first key query i sees)."""
    b = 128
    total = 0
    for q0 in range(0, s, b):
        rows = range(q0, min(q0 + b, s))
        lo = min(visible_lo(i) for i in rows)
        first_tile = lo // b
        total += len(rows) * (min(q0 + b, s) - first_tile * b)
    return -(-total // s)


@pytest.mark.parametrize("s, w", [(4096, 128), (4096, 4096), (8192, 1000), (300, 128),
                                  (1024, 1), (100, 64)])
def test_sliding_window_keys_by_brute_force(s, w):
    want = _keys_by_query(s, lambda i: max(0, i - w + 1)) if s > 128 else s
    assert _ops.flash_keys_window(s, w) == want
    assert _ops.flash_keys_window(s, w) <= _ops.flash_keys(s, True)


@pytest.mark.parametrize("s, c", [(8192, 8192), (16384, 8192), (4096, 1024), (4096, 384)])
def test_chunked_keys_by_brute_force(s, c):
    assert _ops.flash_keys_chunked(s, c) == _keys_by_query(s, lambda i: c * (i // c))


def test_gpt_oss_sliding_layers_do_a_fraction_of_the_causal_work():
    """GPT-OSS's 128-token window at 4,096 tokens: a query tile computes its own diagonal
    tile and the one before (256 keys), the first tile 128: (31·256 + 128)/32 = 252 keys
    per query, against 2,112 under the causal mask."""
    assert _ops.flash_keys_window(4096, 128) == 252
    assert _ops.flash_keys(4096, True) == 2112
    mg = graph.build_layers(models.get("gpt-oss-20b"), 1, 1, flash_attention=True,
                            kernels="megatron")
    k = mg.kinds()
    full, slide = k["moe_block"].forward, k["sliding+moe"].forward
    f_full = full.flops[full.names.index("flash_attn")]
    f_slide = slide.flops[slide.names.index("flash_attn")]
    assert f_slide / f_full == pytest.approx(252 / 2112)


# -- FLOP identities per layer kind, by hand --------------------------------------------

#: The fused kernels that are not a GEMM with an epilogue: attention and the SSD scan.
CORES = ("flash_attn", "flash_attn.bwd", "mamba_ssd", "mamba_ssd.bwd")


def _gemm_flops(g):
    """FLOPs of the weight GEMMs (plain, or with a bias/activation epilogue)."""
    core = np.array([n in CORES for n in g.names])
    return float(g.flops[~core].sum())


def _fused_flops(g):
    """FLOPs of the attention and scan kernels."""
    core = np.array([n in CORES for n in g.names])
    return float(g.flops[core].sum())


def _weight_macs_per_token(m, mixer, ffn):
    """Multiply-accumulates per token of a layer's weight GEMMs at t = 1, from the config."""
    h, hd = m.hidden, m.head_dim
    q, kv = m.heads * hd, m.kv_heads * hd
    mats = 3 if m.activation in ("swiglu", "geglu") else 2
    macs = 0
    if mixer in ("attention", "sliding", "chunked"):
        macs += h * (q + 2 * kv) + q * h
    elif mixer == "mamba":
        d_in = m.mamba_heads * m.mamba_head_dim
        proj = 2 * d_in + 2 * m.mamba_groups * m.mamba_state + m.mamba_heads
        macs += h * proj + d_in * h
    if ffn == "dense":
        macs += mats * h * m.ffn_hidden
    elif ffn == "moe":
        macs += h * m.n_experts + m.experts_per_token * mats * h * m.expert_ffn_hidden
        macs += m.n_shared_experts * mats * h * (m.shared_ffn_hidden or 0)
    return macs


@pytest.mark.parametrize("m", TINY, ids=[m.name for m in TINY])
@pytest.mark.parametrize("b", [1, 2])
def test_flop_identities_per_layer_kind(m, b):
    """Forward GEMMs = 2 × the weights' MACs × tokens (routing balanced: every expert gets
    tokens·k/n_experts); backward GEMMs = 2 × forward; the fused attention kernel's forward
    = 4·b·heads·s·head_dim·keys (QKᵀ and P·V over the keys it computes), its backward 2.5×
    (five BMMs, the scores recomputed); the SSD scan's backward 2× its forward."""
    mg = graph.build_layers(m, b, 1, flash_attention=True, kernels="megatron")
    T = b * m.seq_len
    for (mixer, ffn) in set(m.layer_kinds):
        L = mg.kinds()[graph.layer_kind_name(mixer, ffn)]
        assert _gemm_flops(L.forward) == 2.0 * T * _weight_macs_per_token(m, mixer, ffn)
        assert _gemm_flops(L.backward) == 2.0 * _gemm_flops(L.forward)
        if mixer in ("attention", "sliding", "chunked"):
            keys = {"attention": _ops.flash_keys(m.seq_len, True),
                    "sliding": _ops.flash_keys_window(m.seq_len, m.sliding_window or 1),
                    "chunked": _ops.flash_keys_chunked(m.seq_len, m.attention_chunk or 1)}[mixer]
            assert _fused_flops(L.forward) == 4.0 * b * m.heads * m.seq_len * m.head_dim * keys
            assert _fused_flops(L.backward) == 2.5 * _fused_flops(L.forward)
        elif mixer == "mamba":
            n = math.ceil(_ops.flash_keys(m.mamba_chunk, True)
                          * (1 + m.mamba_state * m.mamba_groups / (m.mamba_heads * m.mamba_head_dim))
                          + 2 * m.mamba_state - 1e-9)
            assert _fused_flops(L.forward) == 2.0 * b * m.mamba_heads * m.seq_len \
                * m.mamba_head_dim * n
            assert _fused_flops(L.backward) == 2.0 * _fused_flops(L.forward)
        else:
            assert _fused_flops(L.forward) == 0.0


# -- parameters ---------------------------------------------------------------------------

NEW_ZOO = ["deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
           "gpt-oss-120b", "llama4-scout", "llama4-maverick", "nemotron-h-8b", "nemotron-h-56b",
           "gemma-2-9b", "gemma-3-12b", "mistral-7b"]


@pytest.mark.parametrize("name", NEW_ZOO + [m.name for m in TINY])
def test_graph_parameters_are_the_models_counts(name):
    """The chain's parameter bytes at t = 1 are the model's parameters and its MTP modules'
    (one 16-bit copy each), plus the head's copy of tied output weights."""
    m = next((x for x in TINY if x.name == name), None) or models.get(name)
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    tied = m.vocab * m.embed_width if m.tied_embeddings else 0
    assert mg.param_bytes == 2 * (m.n_params + m.n_mtp_params + tied)
    # and sharded by t: the slices' sharded parts add up (t = 2 where the heads split)
    if m.valid_tensor_parallel(2) and (not m.is_moe or True):
        mg2 = graph.build_layers(m, 1, 2, sequence_parallel=True, flash_attention=True,
                                 kernels="megatron")
        assert mg2.param_bytes < mg.param_bytes


def test_mamba_layer_parameters_by_hand():
    """Nemotron-H-8B's Mamba-2 layer: norm 4096; in_proj 4096 × (2·8192 + 2·8·128 + 128);
    conv 10240 × (4 + 1); dt_bias, A_log, D 128 each; gated norm 8192; out_proj 8192 × 4096."""
    m = models.get("nemotron-h-8b")
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    want = 4096 + 4096 * (2 * 8192 + 2 * 8 * 128 + 128) + 10240 * 5 + 3 * 128 + 8192 \
        + 8192 * 4096
    assert mg.kinds()["mamba+none"].param_bytes == 2 * want


# -- refusals ------------------------------------------------------------------------------

def test_context_parallel_and_tensor_widths_refused_in_one_sentence():
    with pytest.raises(ValueError, match="context_parallel > 1 is not modelled for tiny-hybrid"):
        graph.build_layers(HYBRID, 1, 1, flash_attention=True, context_parallel=2)
    with pytest.raises(ValueError, match="mamba_heads"):
        graph.build_layers(HYBRID, 1, 4, sequence_parallel=True)   # 2 groups, t = 4
    assert not HYBRID.valid_tensor_parallel(4) and HYBRID.valid_tensor_parallel(2)
    assert _plans.context_parallel_grid(HYBRID) == [1]
    r = step.training_step(HYBRID, "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=1, context_parallel=2, microbatch=1, global_batch=1,
                           flash_attention=True)
    assert not r.ok and "context_parallel" in r.reason


# -- the step: multi-token prediction on the last stage ---------------------------------

def test_mtp_layer_runs_on_the_last_stage():
    """With p = 2 the last stage holds its two layers, the MTP module's MoE layer and the
    head (with the MTP's norms, projection and loss); its weights are the model's
    without MTP plus one MoE layer and the MTP head parts, by hand."""
    no_mtp = dataclasses.replace(MTP, name="tiny-no-mtp", mtp_layers=0)
    kw = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=1, microbatch=1,
              global_batch=4, flash_attention=True, recompute="none")
    a = step.training_step(MTP, "h100-sxm", **kw)
    b = step.training_step(no_mtp, "h100-sxm", **kw)
    assert a.ok and b.ok
    mg = graph.build_layers(MTP, 1, 1, flash_attention=True, kernels="megatron")
    moe = mg.kinds()["moe_block"]
    mtp_head = 3 * MTP.hidden + 2 * MTP.hidden * MTP.hidden          # 3 norms + eh_proj
    assert a.memory[0].weights == b.memory[0].weights
    assert a.memory[1].weights - b.memory[1].weights == moe.param_bytes + 2 * mtp_head
    assert a.memory[1].weights - b.memory[1].weights == 2 * MTP.n_mtp_params
    assert a.breakdown.slot_s > b.breakdown.slot_s


# -- the step kernels against their mirror --------------------------------------------------

def _rows():
    return np.concatenate([presets.get("h100-sxm"),
                           make_archs(base="h100-sxm", node_size=2, net_gb_per_s=12.5)])


def _assert_kernels_equal_mirror(pl, p, t, d, cp, ep, table, vi, sizes, prefix, rows):
    """On every row of ``rows``: the compiled step time and every stage's memory of the one
    plan ``pl`` (its widths p, t, d, cp, ep; variant ``vi`` of ``table``) equal the mirror's
    (tests/naive_step.py) bit for bit, on Megatron's rank layout of the row's nodes."""
    for row in range(rows.shape[0]):
        stages = np.zeros(p, dtype=kern.STAGE_NODES)
        cell = np.zeros(1, dtype=kern.CELL_NODES)
        kern.stage_geometry(p, t, d, cp, ep, int(rows["node_size"][row]), stages, cell)
        lt = table.times[vi, row:row + 1]
        got = kern.step_time(pl, cell, stages, lt, table.rp[row:row + 1], sizes[vi:vi + 1],
                             prefix, np.empty((p, 6)), np.zeros(1, dtype=kern.BREAKDOWN))
        want = naive_step.step_time(pl[0], cell[0], stages, lt[0], table.rp[row], sizes[vi],
                                    prefix, np.empty((p, 6)),
                                    np.zeros(1, dtype=kern.BREAKDOWN)[0])
        assert got == want
        for r in range(p):
            mem = np.zeros(1, dtype=kern.MEMORY)
            mem_n = np.zeros(1, dtype=kern.MEMORY)
            assert kern.stage_memory(r, pl, sizes[vi:vi + 1], prefix, mem) == \
                naive_step.stage_memory(r, pl[0], sizes[vi], prefix, mem_n[0])
            assert mem.tobytes() == mem_n.tobytes()


@pytest.mark.parametrize("m", TINY, ids=[m.name for m in TINY])
def test_kernels_equal_their_mirror_on_multi_kind_models(m):
    rows = _rows()
    table = _plans.layer_table(m, rows, microbatch=1, tensor_parallel=(1, 2))
    prefix = _layers.kind_prefix(m)
    assert prefix.shape[0] == len(graph.block_kind_names(m)) * (m.n_layers + 1)
    L = m.n_layers
    rng = np.random.default_rng(3)
    for recompute in ("none", "selective", "full"):
        sizes = table.sizes(recompute)
        for vi, (t, sp, _f, cp, ep, _mg) in enumerate(table.variants):
            for p in [x for x in (1, 2, 4) if L % x == 0]:
                for d in (1, 2):
                    zero = int(rng.integers(0, 4))
                    pl = _layers.plan_records(p, t, d, cp, ep, 1, 4 // d, L, zero,
                                              bool(rng.integers(0, 2)), recompute, sp,
                                              table.precision, "fp32",
                                              bool(rng.integers(0, 2)), True).reshape(1)
                    if (cp * d) % ep:
                        continue
                    _assert_kernels_equal_mirror(pl, p, t, d, cp, ep, table, vi, sizes,
                                                 prefix, rows)


# -- the plan search against the brute force ---------------------------------------------

def _brute(m, row, devices, global_batch, microbatch, recompute, cap):
    best = math.inf
    L = m.n_layers
    eps = [e for e in range(1, (m.n_experts or 1) + 1) if (m.n_experts or 1) % e == 0]
    for t in (1, 2):
        if not m.valid_tensor_parallel(t):
            continue
        for p in range(1, L + 1):
            for d in range(1, devices + 1):
                if t * p * d > devices or global_batch % (microbatch * d):
                    continue
                for ep in eps:
                    if d % ep:
                        continue
                    for v in range(1, L + 1):
                        for sp in (False, True):
                            for flash in (False, True):
                                for zero in range(4):
                                    if zero == 2 and d > 1 and p > 1:
                                        continue   # no trainer launches it
                                    for ogr in (False, True):
                                        r = step.training_step(
                                            m, row[None], tensor_parallel=t,
                                            pipeline_parallel=p, data_parallel=d,
                                            expert_parallel=ep, virtual_stages=v,
                                            sequence_parallel=sp, flash_attention=flash,
                                            zero_stage=zero, overlap_grad_reduce=ogr,
                                            overlap_param_gather=False,
                                            account_for_embedding=bool(L % p),
                                            microbatch=microbatch, global_batch=global_batch,
                                            recompute=recompute)
                                        if r.ok and all(x.total <= cap for x in r.memory) \
                                                and r.time_s < best:
                                            best = r.time_s
    return best


@pytest.mark.parametrize("m", [HYBRID, OSS, MTP, CHUNKED], ids=lambda m: m.name)
def test_best_plans_is_the_brute_force_minimum_on_tiny_models(m):
    rows = _rows()
    for recompute in ("none", "full"):
        out = step.best_plans(m, rows, devices=4, global_batch=8, microbatch=1,
                              recompute=recompute, hbm_bytes=1e12, tensor_parallel=(1, 2),
                              context_parallel=(1,), overlap_param_gather=(False,),
                              tp_comm_overlap=(False,))
        for i, row in enumerate(rows):
            ref = _brute(m, row, 4, 8, 1, recompute, 1e12)
            assert out["feasible"][i]
            assert out["time_s"][i] == pytest.approx(ref, rel=1e-12)


# -- Muon and the optimizer state's datatype ------------------------------------------------

def test_newton_schulz_flops_by_hand():
    """Five iterations on each weight matrix X (m = min, n = max of its K × N): 2·(2m²n +
    m³) FLOPs each; Qwen3-30B-A3B's MoE layer at t = 1: qkv 2048 × 5120, out 4096 × 2048,
    router 2048 × 128, 128 experts' gate and up 2048 × 768 and down 768 × 2048."""
    m = models.get("qwen3-30b-a3b")
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    dense, experts = graph.newton_schulz(mg.kinds()["moe_block"], 5)

    def ns(k, n):
        a, b = min(k, n), max(k, n)
        return 5 * 2 * (2 * a * a * b + a ** 3)
    assert dense.flops.sum() == ns(2048, 5120) + ns(4096, 2048) + ns(2048, 128)
    assert experts.flops.sum() == 128 * (2 * ns(2048, 768) + ns(768, 2048))


def _muon_plan(m, optimizer, state, zero, d=4):
    rows = presets.get("h100-sxm")
    return step.best_plans(m, rows, devices=d, global_batch=8, microbatch=1, recompute="full",
                           tensor_parallel=(1,), sequence_parallel=(False,),
                           flash_attention=(True,), zero_stage=(zero,),
                           overlap_grad_reduce=(False,), overlap_param_gather=(False,),
                           virtual_stages=(1,), account_for_embedding=(False,),
                           context_parallel=(1,), expert_parallel=(1,),
                           tp_comm_overlap=(False,), optimizer=optimizer,
                           optimizer_state_dtype=state)


@pytest.mark.parametrize("state, adam_b, muon_b", [("fp32", 12, 8), ("bf16", 8, 6)])
def test_optimizer_state_bytes_by_hand(state, adam_b, muon_b):
    """ZeRO 0 on one stage: Adam keeps adam_b bytes of state per parameter; Muon muon_b per
    parameter of the transformer layers and Adam's on the embedding and head."""
    m = OSS
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    eh = (mg.kinds()["embedding"].param_bytes + mg.kinds()["head"].param_bytes) // 2
    layers = mg.param_bytes // 2 - eh
    a = _muon_plan(m, "adam", state, 0)[0]
    u = _muon_plan(m, "muon", state, 0)[0]
    assert a["feasible"] and u["feasible"]
    assert a["optimizer_bytes"] == adam_b * (layers + eh)
    assert u["optimizer_bytes"] == muon_b * layers + adam_b * eh


def test_muon_adds_its_newton_schulz_gemms_and_shards_them_under_zero_1():
    """The optimizer seconds of Muon exceed Adam's by the Newton–Schulz GEMMs of every
    layer (priced by the cost model, on each rank's 1/d of the matrices under ZeRO 1),
    less the cheaper elementwise step."""
    m = MTP
    row = presets.get("h100-sxm")
    mu0 = _muon_plan(m, "muon", "fp32", 0)[0]
    mu1 = _muon_plan(m, "muon", "fp32", 1)[0]
    ad0 = _muon_plan(m, "adam", "fp32", 0)[0]
    table = _plans.layer_table(m, row, microbatch=1, tensor_parallel=(1,),
                               sequence_parallel=(False,), flash_attention=(True,),
                               context_parallel=(1,), expert_parallel=(1,), optimizer="muon")
    lt = table.times[0, 0]
    counts = _layers.kind_counts(m)
    ns = sum(n * (lt["k_ns_d"][q] + lt["k_ns_e"][q]) for q, n in enumerate(counts))
    assert ns > 0
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    for q, L in enumerate(mg.block_kinds()):
        d, e = graph.newton_schulz(L, 5)
        want = float(np.asarray(cost_prepare(row).op_latencies(d)[1]).sum())
        assert lt["k_ns_d"][q] == pytest.approx(want, rel=1e-12)
    # the elementwise parts by hand: every parameter at its bytes over η·HBM bandwidth
    hbm = float(table.rp["hbm_bw"][0])
    eh = (mg.kinds()["embedding"].param_bytes + mg.kinds()["head"].param_bytes) // 2
    layers = mg.param_bytes // 2 - eh
    launch = float(table.rp["launch_s"][0])
    tiny = ad0["optimizer_s"] - 42 * (layers + eh) / hbm - 4 * launch
    assert mu0["optimizer_s"] == pytest.approx(
        (46 * layers + 42 * eh) / hbm + ns + (6 + 4) * launch + tiny, rel=1e-9)
    assert mu1["optimizer_s"] < mu0["optimizer_s"]
    with pytest.raises(ValueError, match="ZeRO 0 or 1"):
        _muon_plan(m, "muon", "fp32", 3)


def cost_prepare(row):
    from phaze import cost
    from phaze.arch import efficiency
    return cost.prepare(row, model="calibrated", efficiency=efficiency.for_rows(row))


def test_kernels_equal_their_mirror_under_muon():
    m = MTP
    rows = _rows()
    table = _plans.layer_table(m, rows, microbatch=1, tensor_parallel=(1, 2),
                               optimizer="muon", optimizer_state_dtype="bf16")
    prefix = _layers.kind_prefix(m)
    sizes = table.sizes("full")
    for vi, (t, sp, _f, cp, ep, _mg) in enumerate(table.variants):
        for p, d, zero in ((1, 2, 1), (2, 2, 0), (4, 1, 1)):
            if (cp * d) % ep:
                continue
            pl = _layers.plan_records(p, t, d, cp, ep, 1, 8 // d, m.n_layers, zero, True, "full",
                                      sp, "bf16", "fp32", False, True, False, "muon",
                                      "bf16").reshape(1)
            _assert_kernels_equal_mirror(pl, p, t, d, cp, ep, table, vi, sizes, prefix, rows)


def test_training_step_prices_muon_as_the_search_does():
    """training_step(optimizer="muon") is the plan the Muon search returns, bit for bit;
    ZeRO 2-3 is refused in one sentence."""
    m = OSS
    best = _muon_plan(m, "muon", "fp32", 1)[0]
    r = step.training_step(m, "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=int(best["data_parallel"]), microbatch=1,
                           global_batch=8, recompute="full", flash_attention=True,
                           zero_stage=1, optimizer="muon")
    assert r.ok and r.time_s == best["time_s"]
    assert r.breakdown.optimizer_s == best["optimizer_s"]
    bad = step.training_step(m, "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                             data_parallel=4, microbatch=1, global_batch=8, zero_stage=3,
                             optimizer="muon")
    assert not bad.ok and "ZeRO 0 or 1" in bad.reason


def test_optimizer_on_the_command_line(capsys):
    from phaze import cli
    base = ["evaluate", "--model", "qwen3-30b-a3b", "--arch", "h100-sxm", "--tp", "1", "--pp",
            "1", "--dp", "8", "--ep", "8", "--microbatch", "1", "--global-batch", "64",
            "--recompute", "full", "--flash-attention", "--zero-stage", "1"]
    assert cli.main(base + ["--optimizer", "muon"]) == 0
    out = capsys.readouterr().out
    assert "optimizer Muon" in out
    assert cli.main(base + ["--optimizer", "muon", "--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--optimizer muon" in out and "--use-distributed-optimizer" in out
    llama = ["evaluate", "--model", "llama3-8b", "--arch", "h100-sxm", "--tp", "1", "--pp",
             "1", "--dp", "8", "--microbatch", "1", "--global-batch", "64", "--recompute",
             "full", "--flash-attention", "--zero-stage", "1", "--optimizer", "muon"]
    assert cli.main(llama + ["--emit", "torchtitan"]) != 0
    err = capsys.readouterr().err
    assert "Muon" in err and "\n" not in err.strip()
    assert cli.main(["search", "--model", "gpt3-175b", "--devices", "8", "--arch", "a100-80g",
                     "--optimizer", "muon", "--study"]) != 0
    assert "the calibrated model's" in capsys.readouterr().err


# -- DeepEP's dispatch ---------------------------------------------------------------------

GROUPED = ModelSpec(
    name="tiny-grouped", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=128,
    vocab=500, seq_len=256, activation="swiglu", norm="rmsnorm", position="rotary",
    bias=False, tied_embeddings=False, n_experts=16, experts_per_token=4,
    expert_ffn_hidden=64, n_expert_groups=4, topk_groups=2, router_bias=True)


def test_deepep_dispatch_by_hand():
    """ep = 8 over four nodes of two GPUs: Megatron-Core's all-to-all sends every routed
    copy, 6/8 of them through the NIC; DeepEP sends each token once per distinct remote
    node, at most topk_groups·(nodes − 1)/nodes = 1.5 (node-limited), against
    3·(1 − (3/4)^4) = 2.05 unlimited. The forward's difference is its all-to-alls' (two)."""
    import naive_collectives as nc
    row = make_archs(base="h100-sxm", node_size=2)
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=8,
              microbatch=1, global_batch=8, recompute="none", flash_attention=True)
    a = step.training_step(GROUPED, row, **kw, moe_dispatcher="alltoall")
    d = step.training_step(GROUPED, row, **kw, moe_dispatcher="deepep")
    assert a.ok and d.ok
    table = _plans.layer_table(GROUPED, row, microbatch=1, tensor_parallel=(1,),
                               sequence_parallel=(False,), flash_attention=(True,),
                               context_parallel=(1,), expert_parallel=(8,))
    sz = table.sizes("none")[0]
    rp = table.rp[0]
    assert sz["a2a_token_bytes"] == 256 * 64 * 2 and sz["topk"] == 4
    assert sz["node_limit"] == 2
    split = nc.split_all_to_all_seconds(sz["a2a_bytes"], 8, 4, rp)
    dedup = nc.dedup_all_to_all_seconds(sz["a2a_bytes"], sz["a2a_token_bytes"], 4, 2, 8, 4, rp)
    g, x = 2, 3
    alpha = rp["coll_latency_s"] + (8 - 1 - x) * rp["link_step_s"] + x * rp["net_step_s"]
    inter = sz["a2a_token_bytes"] * 1.5 / rp["net_bw"]
    intra = (1 / 8 + 6 / 8 * 1 / 2) * sz["a2a_bytes"] / rp["link_bw"]
    assert dedup == pytest.approx(alpha + max(inter, intra), rel=1e-12)
    n_f = int(sz["k_a2a_f_n"][0])
    assert n_f == 2
    assert a.breakdown.forward_s - d.breakdown.forward_s == pytest.approx(
        GROUPED.n_layers * n_f * (split - dedup), rel=1e-9)


def test_kernels_equal_their_mirror_under_deepep():
    m = GROUPED
    rows = np.concatenate([make_archs(base="h100-sxm", node_size=2),
                           make_archs(base="h100-sxm", node_size=4, net_gb_per_s=12.5)])
    table = _plans.layer_table(m, rows, microbatch=1, tensor_parallel=(1, 2))
    prefix = _layers.kind_prefix(m)
    sizes = table.sizes("full")
    for vi, (t, sp, _f, cp, ep, _mg) in enumerate(table.variants):
        for p, d, zero in ((1, 8, 1), (2, 4, 0), (1, 16, 3)):
            if (cp * d) % ep:
                continue
            pl = _layers.plan_records(p, t, d, cp, ep, 1, 16 // d, m.n_layers, zero, True,
                                      "full", sp, "bf16", "fp32", True, True, False, "adam",
                                      "fp32", "deepep").reshape(1)
            _assert_kernels_equal_mirror(pl, p, t, d, cp, ep, table, vi, sizes, prefix, rows)
