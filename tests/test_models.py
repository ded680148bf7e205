import json

import pytest
from hypothesis import given

from phaze import models
from phaze.models import ModelSpec

from naive import naive_n_params
from strategies import model_specs

GPT2_SMALL = {  # openai-community/gpt2 config.json (abridged to what a config carries)
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_activation": None, "task_specific_params": {"text-generation": {"max_length": 50}},
    "vocab_size": 50257,
}
LLAMA2_7B = {  # meta-llama/Llama-2-7b-hf config.json
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": True,
    "vocab_size": 32000,
}

EXPECTED_NAMES = [
    "bert-large", "gpt2-xl", "opt-350m", "llama2-7b", "llama3-8b", "llama3-70b", "llama3.1-405b",
    "qwen2-7b",
    "megatron-bert", "megatron-gpt2-54",
    "megatron-gpt2-72", "gpt3-175b", "megatron-1.7b", "megatron-3.6b", "megatron-7.5b",
    "megatron-18.4b", "megatron-39.1b", "megatron-76.1b", "megatron-145.6b", "megatron-310.1b",
    "megatron-529.6b", "megatron-1t", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v2-lite",
    # issue 25: the dense models of the published NeMo runs (tests/test_zoo_modern.py)
    "gpt3-5b", "gpt3-20b", "llama2-13b", "llama2-70b", "nemotron4-15b", "nemotron4-340b",
    "nemotron-8b", "nemotron-22b"]
#: Zoo entries phaze cannot search end to end yet: the model families of issue 27, until the
#: graph prices their layer kinds (ModelSpec.op_graph_refusal, models.GRAPH_UNPRICED).
PENDING_NAMES = [n for n in (
    "deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b",
    "llama4-scout", "llama4-maverick", "nemotron-h-8b", "nemotron-h-56b", "gemma-2-9b",
    "gemma-3-12b", "mistral-7b", "nemotron-3-nano-30b-a3b") if models.get(n).graph_refusal]
ISSUE27_NAMES = [
    "deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b",
    "llama4-scout", "llama4-maverick", "nemotron-h-8b", "nemotron-h-56b", "gemma-2-9b",
    "gemma-3-12b", "mistral-7b", "nemotron-3-nano-30b-a3b",
    "nemotron-3-super-120b-a12b"]


def test_zoo_names_exact():
    # The issue-27 entries join names() as the graph gains their layer kinds.
    searchable = [n for n in ISSUE27_NAMES if n not in PENDING_NAMES]
    assert sorted(models.names()) == sorted(EXPECTED_NAMES + searchable)
    assert sorted(models.names(pending=True)) == sorted(EXPECTED_NAMES + ISSUE27_NAMES)
    for n in models.names(pending=True):
        assert models.get(n).name == n


def test_unknown_name_lists_known():
    with pytest.raises(KeyError, match="known models: .*gpt3-175b"):
        models.get("gpt-5")


@pytest.mark.parametrize("name,L,h,a", [
    ("megatron-1.7b", 24, 2304, 24), ("megatron-3.6b", 30, 3072, 32),
    ("megatron-7.5b", 36, 4096, 32), ("megatron-18.4b", 40, 6144, 48),
    ("megatron-39.1b", 48, 8192, 64), ("megatron-76.1b", 60, 10240, 80),
    ("megatron-145.6b", 80, 12288, 96), ("megatron-310.1b", 96, 16384, 128),
    ("megatron-529.6b", 105, 20480, 128), ("megatron-1t", 128, 25600, 160),
    ("megatron-bert", 24, 1024, 16), ("megatron-gpt2-54", 54, 1920, 20),
    ("megatron-gpt2-72", 72, 3072, 24), ("gpt3-175b", 96, 12288, 96)])
def test_megatron_family_shapes(name, L, h, a):
    m = models.get(name)
    assert (m.n_layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == (L, h, a, a, 4 * h)
    assert m.vocab == 51200 and m.activation == "gelu" and m.position == "learned" and m.bias
    seq = {"megatron-bert": 512, "megatron-gpt2-54": 1024, "megatron-gpt2-72": 1024}.get(name, 2048)
    assert m.seq_len == seq
    # The published label is the parameter count in billions, within a few percent.
    label = name.split("-")[-1]
    if label.endswith("b") and label[:-1].replace(".", "").isdigit():
        assert abs(m.n_params / 1e9 / float(label[:-1]) - 1) < 0.05
    if name == "megatron-1t":
        assert abs(m.n_params / 1e12 - 1) < 0.05


def test_hf_zoo_models_published_counts():
    # Counts of the Hugging Face implementations (transformers' num_parameters()).
    assert models.get("gpt2-xl").n_params == 1_557_611_200
    assert models.get("opt-350m").n_params == 331_196_416
    assert models.get("llama2-7b").n_params == 6_738_415_616
    # BERT-large without token-type embeddings (2·1024) and pooler (1024²+1024): 335,141,888 − both.
    assert models.get("bert-large").n_params == 335_141_888 - 2 * 1024 - (1024 * 1024 + 1024)
    assert [models.get(n).seq_len for n in ("bert-large", "gpt2-xl", "opt-350m", "llama2-7b")] \
        == [512, 1024, 2048, 4096]
    opt = models.get("opt-350m")
    assert opt.embed_proj == 512 and opt.activation == "relu"


def test_from_hf_gpt2_small():
    m = models.from_hf_config(GPT2_SMALL)
    assert m.n_params == 124_439_808
    assert (m.n_layers, m.hidden, m.heads, m.ffn_hidden, m.seq_len) == (12, 768, 12, 3072, 1024)
    assert m.tied_embeddings and m.activation == "gelu"
    # Absent keys take GPT2Config's defaults: an empty gpt2 config is GPT-2 small.
    assert models.from_hf_config({"model_type": "gpt2"}).n_params == 124_439_808
    # Generic aliases are understood.
    alias = models.from_hf_config({"model_type": "gpt2", "hidden_size": 768, "num_hidden_layers": 12,
                                   "num_attention_heads": 12, "max_position_embeddings": 1024})
    assert alias.n_params == 124_439_808


def test_from_hf_llama2_7b(tmp_path):
    m = models.from_hf_config(LLAMA2_7B)
    assert m.n_params == 6_738_415_616
    assert (m.activation, m.norm, m.position, m.bias, m.tied_embeddings) == \
        ("swiglu", "rmsnorm", "rotary", False, False)
    assert m.seq_len == 4096
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    assert models.from_hf_config(path).n_params == 6_738_415_616
    assert models.from_hf_config(tmp_path).n_params == 6_738_415_616


def test_from_hf_mistral_gqa_and_head_dim():
    m = models.from_hf_config({"model_type": "mistral", "max_position_embeddings": 32768},
                              seq_len=4096)
    assert (m.kv_heads, m.heads, m.ffn_hidden, m.seq_len) == (8, 32, 14336, 4096)
    assert m.n_params == 7_241_732_096   # Mistral-7B-v0.1
    g = models.from_hf_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                               "head_dim": 8, "num_key_value_heads": 2, "intermediate_size": 96,
                               "num_hidden_layers": 1, "vocab_size": 10,
                               "tie_word_embeddings": True})
    assert g.head_dim == 8
    assert g.n_params == naive_n_params(g) == 10 * 64 + (64 * 32 + 2 * 64 * 16 + 32 * 64 + 3 * 64 * 96
                                                        + 2 * 64) + 64


def test_from_hf_opt_and_bert():
    opt = models.from_hf_config({"model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 24,
                                 "ffn_dim": 4096, "num_attention_heads": 16,
                                 "word_embed_proj_dim": 512, "do_layer_norm_before": False})
    assert opt.n_params == 331_196_416 and opt.embed_proj == 512 and not opt.final_norm
    assert models.from_hf_config({"model_type": "opt"}).n_params == 125_239_296   # OPT-125m
    bert = models.from_hf_config({"model_type": "bert", "hidden_size": 1024,
                                  "num_hidden_layers": 24, "num_attention_heads": 16,
                                  "intermediate_size": 4096})
    assert bert.n_params == models.get("bert-large").n_params and not bert.causal


@pytest.mark.parametrize("cfg,key", [
    ({"model_type": "gpt2", "activation_function": "tanh"}, "activation_function"),
    ({"model_type": "llama", "hidden_act": "gelu"}, "hidden_act"),
    ({"model_type": "llama", "attention_bias": True}, "mlp_bias"),
    ({"model_type": "gpt2", "n_layer": 0}, "n_layer"),
    ({"model_type": "gpt2", "n_embd": -5}, "n_embd"),
    ({"model_type": "opt", "layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
    ({"model_type": "bert", "position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"model_type": "t5"}, "model_type"),
    ({"model_type": "llama", "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({"model_type": "llama", "rms_norm_eps": -1.0}, "rms_norm_eps"),
])
def test_from_hf_bad_values_name_the_key(cfg, key):
    with pytest.raises(ValueError, match=key):
        models.from_hf_config(cfg)


def test_from_hf_bad_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        models.from_hf_config(p)
    with pytest.raises(FileNotFoundError):
        models.from_hf_config(tmp_path / "missing.json")


@pytest.mark.parametrize("field,value", [
    ("n_layers", 0), ("hidden", -1), ("heads", 0), ("kv_heads", 3), ("vocab", 0),
    ("seq_len", -2), ("activation", "tanh"), ("norm", "batchnorm"), ("position", "alibi"),
    ("embed_proj", -1), ("bias", 1), ("ffn_hidden", 0), ("n_layers", 2.5)])
def test_bad_spec_names_field(field, value):
    base = models.get("megatron-bert")
    with pytest.raises(ValueError, match=field):
        base.with_(**{field: value})


def test_valid_tensor_parallel_and_padding():
    m = models.get("gpt2-xl")  # 25 heads
    assert m.valid_tensor_parallel(5) and m.valid_tensor_parallel(25)
    assert not m.valid_tensor_parallel(2) and not m.valid_tensor_parallel(0)
    assert m.padded_vocab(1) == 50304 and m.padded_vocab(5) == 50560
    g = models.get("gpt3-175b")
    assert g.padded_vocab(8) == 51200 and g.padded_vocab(32) == 53248
    q = ModelSpec(name="q", n_layers=1, hidden=64, heads=8, kv_heads=2, ffn_hidden=10, vocab=5,
                  seq_len=4)
    assert q.valid_tensor_parallel(2) and not q.valid_tensor_parallel(4)


@given(model_specs())
def test_n_params_matches_naive(m):
    assert m.n_params == naive_n_params(m)


def test_with_recomputes_derived_fields():
    m = models.get("gpt3-175b")
    longer = m.with_(seq_len=4096)
    assert longer.max_positions == 4096 and longer.n_params == m.n_params + 2048 * m.hidden
    assert m.with_(seq_len=1024).max_positions == 2048
    wide = m.with_(hidden=256, heads=8, kv_heads=8, ffn_hidden=1024)
    assert wide.head_dim == 32
    rot = m.with_(position="rotary")
    assert rot.max_positions == 0 and rot.n_params == m.n_params - 2048 * m.hidden
    assert m.with_() == m and hash(m.with_()) == hash(m)


# --- issue 17: unmodelled keys and out-of-range numbers are one sentence naming the key ---
MIXTRAL = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
           "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "max_position_embeddings": 32768}


@pytest.mark.parametrize("model_type", ["mistral", "llama", "mixtral", None])
def test_from_hf_mixtral_keys_are_a_mixture_of_experts_whatever_the_type(model_type):
    # Issue 17 item 7: a Mixtral config typed as mistral, llama or untyped was modelled as a
    # dense 7.24 B model. Its MoE keys now make it the 46.7 B mixture of experts it is.
    cfg = dict(MIXTRAL)
    if model_type:
        cfg["model_type"] = model_type
    m = models.from_hf_config(cfg)
    assert m.is_moe and (m.n_experts, m.experts_per_token) == (8, 2)
    assert m.n_params == 46_702_792_704 == models.get("mixtral-8x7b").n_params
    # Half of Mixtral's description is ambiguous: refused naming the key, never dense.
    if model_type != "mixtral":   # mixtral's own type has library defaults for both keys
        del cfg["num_local_experts"]
        with pytest.raises(ValueError, match="'num_experts_per_tok'.*no 'num_local_experts'"):
            models.from_hf_config(cfg)
        cfg = dict(MIXTRAL, model_type=model_type) if model_type else dict(MIXTRAL)
        del cfg["num_experts_per_tok"]
        with pytest.raises(ValueError, match="'num_local_experts'.*no 'num_experts_per_tok'"):
            models.from_hf_config(cfg)
        assert not models.from_hf_config(dict(cfg, num_local_experts=1)).is_moe  # one expert
        del cfg["num_local_experts"]
        assert not models.from_hf_config(cfg).is_moe   # no MoE key at all: dense, fine


@pytest.mark.parametrize("model_type, key, value", [
    ("gpt2", "num_experts", 8), ("opt", "num_local_experts", 8), ("qwen2", "num_experts", 60),
    ("llama", "n_routed_experts", 64), ("mistral", "moe_intermediate_size", 1408),
    ("llama", "kv_lora_rank", 512), ("qwen2_moe", "q_lora_rank", 1536),
    ("deepseek_v2", "num_local_experts", 8), ("bert", "mlp_only_layers", [0, 1]),
])
def test_from_hf_moe_keys_another_type_does_not_read_are_refused(model_type, key, value):
    with pytest.raises(ValueError, match=f"config key '{key}'"):
        models.from_hf_config({"model_type": model_type, key: value})
    # Neutral values (null, 0, 1, an empty list) leave the model as it is.
    if key not in ("kv_lora_rank", "q_lora_rank"):
        assert models.from_hf_config({"model_type": model_type, key: None}).n_params > 0


@pytest.mark.parametrize("key, value", [("add_cross_attention", True), ("parallel_attn", True)])
def test_from_hf_unmodelled_structure_is_refused(key, value):
    with pytest.raises(ValueError, match=f"'{key}'"):
        models.from_hf_config({"model_type": "gpt2", key: value})


def test_from_hf_sliding_window_shorter_than_the_sequence():
    # Issue 27: Mistral's sliding window is modelled (every layer 'sliding'); a type whose
    # reader does not model the window (Qwen2's use_sliding_window) is still refused.
    cfg = {"model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}
    m = models.from_hf_config(cfg)
    assert m.seq_len == 32768 and m.mixers == ("sliding",) * 32 and m.sliding_window == 4096
    assert models.from_hf_config({"model_type": "mistral"}).sliding_window == 4096  # default
    plain = models.from_hf_config(dict(cfg, sliding_window=None))
    assert plain.seq_len == 32768 and plain.layer_mixers is None and plain.sliding_window == 0
    assert plain.n_params == m.n_params                       # the window adds no weight
    qwen = {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096,
            "max_position_embeddings": 32768}
    with pytest.raises(ValueError, match="'sliding_window'"):
        models.from_hf_config(qwen)
    assert models.from_hf_config(qwen, seq_len=4096).seq_len == 4096


@pytest.mark.parametrize("value, match", [
    (10 ** 12, "'num_hidden_layers'"), (2 ** 63, "'num_hidden_layers'"),
    (10 ** 5000, "about 5,001 digits"), (200_000, "n_layers must be an integer from 1 to"),
], ids=["1e12", "2**63", "5001-digits", "2e5"])
def test_from_hf_huge_numbers(value, match):
    with pytest.raises(ValueError, match=match):
        models.from_hf_config({"model_type": "llama", "num_hidden_layers": value})


def test_from_hf_file_with_huge_or_deep_json(tmp_path):
    digits = tmp_path / "digits.json"
    digits.write_text('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}")
    with pytest.raises(ValueError, match="too many digits"):
        models.from_hf_config(digits)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="nested too deeply"):
        models.from_hf_config(deep)
