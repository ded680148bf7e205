"""The issue-15 zoo: Llama 3 / 3.1, Qwen2, Mixtral and DeepSeek-V2-Lite, mixture-of-experts
and multi-head-latent-attention parameter counts, and their Hugging Face configs.

Published totals are the checkpoints' safetensors parameter counts (sources next to each
zoo entry in phaze/models.py); the config.json fixtures are in tests/data/hf (README.md
there names each repository).
"""
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze import graph, models
from phaze.models import ModelSpec

from naive import naive_n_params

HF = Path(__file__).parent / "data" / "hf"

# name: (total parameters, active per token, training sequence length)
PUBLISHED = {
    "llama3-8b": (8_030_261_248, 8_030_261_248, 8192),
    "llama3-70b": (70_553_706_496, 70_553_706_496, 8192),
    "llama3.1-405b": (405_853_388_800, 405_853_388_800, 8192),
    "qwen2-7b": (7_615_616_512, 7_615_616_512, 4096),
    # Mistral: "46.7B total, 12.9B active" (arXiv:2401.04088); 8x22B: "141B, 39B active".
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248, 32768),
    "mixtral-8x22b": (140_630_071_296, 39_161_468_928, 65536),
    # DeepSeek-V2 report: "15.7B total, 2.4B activated" (the latter without the input table).
    "deepseek-v2-lite": (15_706_484_224, 2_661_150_208, 4096),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_totals_active_counts_and_sequence(name):
    m = models.get(name)
    total, active, seq = PUBLISHED[name]
    assert (m.n_params, m.n_active_params, m.seq_len) == (total, active, seq)
    assert m.n_params == naive_moe_n_params(m)     # tensor by tensor, an independent count
    assert m.is_moe == (total != active)


def test_rounded_published_active_counts():
    # The figures the model cards round: Mixtral 12.9B / 39B active, DeepSeek-V2-Lite 2.4B
    # activated without the 102,400 × 2,048 input table.
    assert round(models.get("mixtral-8x7b").n_active_params / 1e9, 1) == 12.9
    assert round(models.get("mixtral-8x22b").n_active_params / 1e9) == 39
    lite = models.get("deepseek-v2-lite")
    assert 2.4e9 <= lite.n_active_params - lite.vocab * lite.hidden < 2.5e9   # 2.45 B


def test_moe_layout():
    mix = models.get("mixtral-8x7b")
    assert mix.moe_layer_ids == tuple(range(32)) and mix.expert_ffn_hidden == 14336
    lite = models.get("deepseek-v2-lite")
    assert lite.moe_layer_ids == tuple(range(1, 27)) and lite.uses_mla
    assert (lite.n_shared_experts, lite.shared_ffn_hidden, lite.v_head_dim) == (2, 1408, 128)
    assert models.get("llama3-8b").moe_layer_ids == ()
    every = mix.with_(name="alt", n_layers=8, first_dense_layers=1, moe_every=2)
    assert every.moe_layer_ids == (2, 4, 6)
    dense_block = models.block_params(every, moe=False)
    assert every.n_params == (models.embedding_params(every) + 5 * dense_block
                              + 3 * models.block_params(every, moe=True)
                              + models.head_params(every))


# --- Hugging Face configs -------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_hf_config_round_trips_to_the_zoo(name):
    path = HF / f"{name}.json"
    # Qwen2-7B's config states its 131,072-token inference context only.
    seq = 4096 if name == "qwen2-7b" else None
    m = models.from_hf_config(path, seq_len=seq)
    assert m.name == json.loads(path.read_text())["_name_or_path"]
    assert m.with_(name=name) == models.get(name)


def test_llama31_rope_scaling_sets_the_pretraining_length():
    cfg = json.loads((HF / "llama3.1-405b.json").read_text())
    assert models.from_hf_config(cfg).seq_len == 8192
    assert models.from_hf_config(cfg, seq_len=131072).seq_len == 131072
    # Rope scaling changes no weight.
    plain = models.from_hf_config(dict(cfg, rope_scaling=None))
    assert plain.seq_len == 131072 and plain.n_params == 405_853_388_800
    with pytest.raises(ValueError, match="'rope_scaling'"):
        models.from_hf_config(dict(cfg, rope_scaling="llama3"))
    with pytest.raises(ValueError, match="'original_max_position_embeddings'"):
        models.from_hf_config(dict(cfg, rope_scaling={"original_max_position_embeddings": 0}))


QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json (Qwen2MoeForCausalLM)
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632,
    "sliding_window": 32768, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_hf_qwen2_moe():
    m = models.from_hf_config(QWEN15_MOE)
    assert m.n_params == 14_315_784_192          # the checkpoint's total (keras-hub presets)
    assert round(m.n_active_params / 1e9, 1) == 2.7    # "A2.7B"
    assert (m.n_experts, m.experts_per_token, m.n_shared_experts, m.shared_ffn_hidden) \
        == (60, 4, 1, 5632) and m.shared_expert_gate and m.qkv_bias and not m.bias
    assert m.n_params == naive_moe_n_params(m)
    assert models.from_hf_config(dict(QWEN15_MOE, mlp_only_layers=[0, 1])).first_dense_layers == 2
    assert not models.from_hf_config(dict(QWEN15_MOE, num_experts=0)).is_moe


def test_hf_deepseek_v2_query_compression_and_dense():
    cfg = json.loads((HF / "deepseek-v2-lite.json").read_text())
    lora = models.from_hf_config(dict(cfg, q_lora_rank=1536))
    qk = 16 * (128 + 64)
    grown = 2048 * 1536 + 1536 + 1536 * qk - 2048 * qk   # q_a_proj, its norm, q_b_proj
    assert lora.n_params == models.get("deepseek-v2-lite").n_params + 27 * grown
    assert lora.n_params == naive_moe_n_params(lora)
    dense = models.from_hf_config(dict(cfg, n_routed_experts=None))
    assert not dense.is_moe and dense.uses_mla and dense.n_params == naive_moe_n_params(dense)


@pytest.mark.parametrize("base, changes, key", [
    ("qwen15", {"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ("qwen15", {"mlp_only_layers": [3]}, "mlp_only_layers"),
    ("qwen15", {"mlp_only_layers": "all"}, "mlp_only_layers"),
    ("qwen15", {"num_experts_per_tok": 0}, "num_experts_per_tok"),
    ("qwen15", {"num_experts_per_tok": 61}, "experts_per_token"),
    ("lite", {"topk_method": "noaux_tc"}, "topk_method"),
    ("lite", {"attention_bias": True}, "attention_bias"),
    ("lite", {"kv_lora_rank": None}, "kv_lora_rank"),
    ("lite", {"first_k_dense_replace": 27}, "first_dense_layers"),
    ("lite", {"num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
    # Issue 27: deepseek_v3 is read, and its reader refuses DeepSeek-V2's greedy router.
    ("lite", {"model_type": "deepseek_v3"}, "topk_method"),
    ("lite", {"model_type": "deepseek_v4"}, "model_type"),
    ("mixtral", {"num_local_experts": -8}, "num_local_experts"),
    ("mixtral", {"num_experts_per_tok": 9}, "experts_per_token"),
    # Issue 27: Mixtral's window is read as sliding layers; Qwen2-MoE's is not modelled.
    ("qwen15", {"use_sliding_window": True, "sliding_window": 4096}, "sliding_window"),
])
def test_hf_moe_configs_not_modelled_are_one_sentence_naming_the_key(base, changes, key):
    cfg = {"qwen15": QWEN15_MOE, "lite": json.loads((HF / "deepseek-v2-lite.json").read_text()),
           "mixtral": json.loads((HF / "mixtral-8x7b.json").read_text())}[base]
    with pytest.raises(ValueError, match=key) as info:
        models.from_hf_config(dict(cfg, **changes))
    assert "\n" not in str(info.value)


# --- the ModelSpec fields ---------------------------------------------------------------
def test_defaults_keep_dense_specs_unchanged():
    for name in models.names():
        m = models.get(name)
        if m.is_moe or m.uses_mla:
            continue
        assert m.graph_refusal == ""
        assert m.n_active_params == m.n_params
        assert m.qkv_bias == m.bias or name == "qwen2-7b"   # Q/K/V-only biases, in the graphs


@pytest.mark.parametrize("changes, field", [
    ({"experts_per_token": 2}, "experts_per_token"),
    ({"expert_ffn_hidden": 64}, "expert_ffn_hidden"),
    ({"first_dense_layers": 1}, "first_dense_layers"),
    ({"n_experts": 4, "experts_per_token": 5}, "experts_per_token"),
    ({"n_experts": 4, "experts_per_token": 0}, "experts_per_token"),
    ({"n_experts": 4, "experts_per_token": 1, "first_dense_layers": 2}, "first_dense_layers"),
    ({"n_experts": 4, "experts_per_token": 1, "moe_every": 0}, "moe_every"),
    ({"n_experts": 4, "experts_per_token": 1, "shared_expert_gate": True}, "shared_expert_gate"),
    ({"n_experts": -1}, "n_experts"),
    ({"n_experts": 2 ** 40}, "n_experts"),
    ({"q_lora_rank": 16}, "q_lora_rank"),
    ({"kv_lora_rank": 16}, "kv_heads"),
    ({"kv_lora_rank": 16, "kv_heads": 4, "bias": True}, "bias"),
    ({"qkv_bias": 1}, "qkv_bias"),
])
def test_bad_moe_and_mla_fields_name_the_field(changes, field):
    base = ModelSpec(name="t", n_layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=96,
                     vocab=100, seq_len=16, activation="swiglu", norm="rmsnorm",
                     position="rotary", bias=False)
    with pytest.raises(ValueError, match=field):
        base.with_(**changes)


def test_every_zoo_model_builds_and_is_searchable():
    for name in ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v2-lite"):
        m = models.get(name)
        assert m.graph_refusal == m.op_graph_refusal == "" and name in models.names()
    mla = models.from_hf_config(dict(json.loads((HF / "deepseek-v2-lite.json").read_text()),
                                     n_routed_experts=None))
    assert mla.uses_mla and mla.graph_refusal == mla.op_graph_refusal == ""   # MLA is built
    assert models.get("qwen2-7b").graph_refusal == ""      # built, Q/K/V biases exact


# --- dense additions build, with the FLOP identity of the closed form ----------------------
@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "llama3.1-405b", "qwen2-7b"])
def test_dense_additions_gemm_flops_identity(name):
    m = models.get(name).with_(seq_len=512)   # the identity holds at any length; keep it quick
    s, L, h, a, hd, f = m.seq_len, m.n_layers, m.hidden, m.heads, m.head_dim, m.ffn_hidden
    weights = h * a * hd + 2 * h * m.kv_heads * hd + a * hd * h + 3 * h * f   # GEMM weights
    forward = 2 * s * (L * weights + h * m.padded_vocab(1)) + L * 2 * (2 * s * s * a * hd)
    assert graph.build_layers(m, 1, 1).gemm_flops() == 3 * forward   # backward = 2 × forward
    assert graph.build_layers(m, 1, 4).gemm_flops() * 4 == 3 * (
        forward + 2 * s * h * (m.padded_vocab(4) - m.padded_vocab(1)))


# --- an independent count: every tensor of the Hugging Face module tree ---------------------
def naive_moe_n_params(m):
    """Sum of the element counts of every tensor, written out layer by layer the way
    modeling_mixtral / modeling_qwen2_moe / modeling_deepseek hold them (dense specs: the
    shared reference of tests/naive.py)."""
    if not m.is_moe and not m.uses_mla and m.qkv_bias == m.bias:
        return naive_n_params(m)
    h, hd, a = m.hidden, m.head_dim, m.heads
    norm = 2 if m.norm == "layernorm" else 1
    tensors = [(m.vocab, h)] + ([] if m.tied_embeddings else [(m.vocab, h)]) + [(norm * h,)]

    def mlp(width):
        out = [(width, h), (h, width)] + ([(width, h)] if m.activation == "swiglu" else [])
        if m.bias:
            out += [(width,)] * (len(out) - 1) + [(h,)]
        return out

    for layer in range(m.n_layers):
        tensors += [(norm * h,), (norm * h,)]
        if m.uses_mla:
            qk = hd + m.qk_rope_head_dim
            if m.q_lora_rank:
                tensors += [(m.q_lora_rank, h), (norm * m.q_lora_rank,), (a * qk, m.q_lora_rank)]
            else:
                tensors += [(a * qk, h)]
            tensors += [(m.kv_lora_rank + m.qk_rope_head_dim, h), (norm * m.kv_lora_rank,),
                        (a * (hd + m.v_head_dim), m.kv_lora_rank), (h, a * m.v_head_dim)]
        else:
            for rows in (a * hd, m.kv_heads * hd, m.kv_heads * hd):
                tensors += [(rows, h)] + ([(rows,)] if m.qkv_bias else [])
            tensors += [(h, a * hd)] + ([(h,)] if m.bias else [])
        if layer in m.moe_layer_ids:
            tensors.append((m.n_experts, h))                       # router
            for _ in range(m.n_experts):
                tensors += mlp(m.expert_ffn_hidden)
            for _ in range(m.n_shared_experts):
                tensors += mlp(m.shared_ffn_hidden)
            if m.shared_expert_gate:
                tensors.append((1, h))
        else:
            tensors += mlp(m.ffn_hidden)
    return sum(math.prod(shape) for shape in tensors)


@st.composite
def moe_specs(draw):
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.integers(1, 3))
    mla = draw(st.booleans())
    n_experts = draw(st.integers(0, 6))
    n_shared = draw(st.integers(0, 2)) if n_experts else 0
    layers = draw(st.integers(1, 5))
    moe = dict(n_experts=n_experts)
    if n_experts:
        every = draw(st.integers(1, 3))
        first = draw(st.integers(0, layers - 1))
        if not any(i % every == 0 for i in range(first, layers)):
            first, every = 0, 1
        moe.update(experts_per_token=draw(st.integers(1, n_experts)),
                   expert_ffn_hidden=draw(st.integers(1, 40)), n_shared_experts=n_shared,
                   shared_ffn_hidden=draw(st.integers(1, 40)) if n_shared else None,
                   shared_expert_gate=bool(n_shared) and draw(st.booleans()),
                   first_dense_layers=first, moe_every=every)
    bias = False if mla else draw(st.booleans())
    return ModelSpec(
        name="hyp-moe", n_layers=layers, hidden=heads * draw(st.integers(1, 8)), heads=heads,
        kv_heads=heads if mla else kv, ffn_hidden=draw(st.integers(1, 40)),
        vocab=draw(st.integers(1, 300)), seq_len=8, activation=draw(st.sampled_from(
            ["gelu", "relu", "swiglu"])), norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        position="rotary", bias=bias, qkv_bias=False if mla else draw(st.booleans()),
        tied_embeddings=False, kv_lora_rank=draw(st.integers(1, 16)) if mla else 0,
        q_lora_rank=draw(st.integers(0, 16)) if mla else 0,
        qk_rope_head_dim=draw(st.integers(0, 8)) if mla else 0, **moe)


@given(moe_specs())
def test_n_params_and_active_match_the_tensor_by_tensor_count(m):
    assert m.n_params == naive_moe_n_params(m)
    unrouted = len(m.moe_layer_ids) * (m.n_experts - m.experts_per_token)
    assert m.n_active_params == naive_moe_n_params(m) - unrouted * models.expert_params(m)
    assert (m.n_active_params == m.n_params) == (not m.is_moe or m.experts_per_token == m.n_experts)


def test_dense_addition_evaluates_end_to_end():
    # `phaze evaluate --model llama3-8b --arch a100-80g --tp 8 --pp 1 --dp 1 --microbatch 1`
    from phaze import search

    r = search.evaluate_point("llama3-8b", "a100-80g", 8, 1, 1, 1, False, study=True)
    assert r["feasible"] and r["time_per_batch_s"] > 0
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 8192)


def test_moe_models_are_searched_with_expert_parallelism():
    """The graphs build MoE blocks (and MLA), never a dense stand-in, and the search takes a
    mixture of experts (issue 15: expert parallelism is in the step model); an ep grid with
    no width dividing the routed experts, and the study's model, are refused in one
    sentence before any work."""
    import pytest as _pytest

    from phaze import graph, search

    assert {L.kind for L in graph.build_layers("mixtral-8x7b", 1, 1).layers} == {
        "embedding", "moe_block", "head"}
    lite = graph.build_layers("deepseek-v2-lite", 1, 1)       # MLA and fine-grained MoE
    assert [(L.kind, L.count) for L in lite.layers] == [
        ("embedding", 1), ("block", 1), ("moe_block", 26), ("head", 1)]
    with _pytest.raises(ValueError, match="expert_parallel: no value of 3 divides the 64 "
                                          "routed experts of deepseek-v2-lite"):
        search.search("deepseek-v2-lite", devices=8, arch="a100-80g", expert_parallel=3,
                      executor="serial", progress=False)
    with _pytest.raises(ValueError, match="study: the study's model has no expert parallelism"):
        search.search("mixtral-8x7b", devices=8, study=True, executor="serial", progress=False)
    res = search.search("mixtral-8x7b", devices=64, global_batch=64, microbatch=1,
                        arch="a100-80g", expert_parallel=(1, 8), context_parallel=(1, 2),
                        recompute="full", executor="serial", progress=False)
    best = res.best["plans"]["mixtral-8x7b"]
    assert best["feasible"] and best["expert_parallel"] in (1, 8)
    assert best["context_parallel"] in (1, 2)
    assert best["devices_used"] == (best["tensor_parallel"] * best["context_parallel"]
                                    * best["pipeline_parallel"] * best["data_parallel"])
