"""Hugging Face ``config.json`` → the fields of a ModelSpec: the reader behind
``phaze.models.from_hf_config`` (docs/design.md §2.1).

Each model type (gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, deepseek_v2, opt, bert;
since issue 27 deepseek_v3, kimi_k2, qwen3, qwen3_moe, gpt_oss, llama4 / llama4_text,
nemotron_h, gemma2, gemma3 / gemma3_text) has its library defaults for the keys phaze reads;
a present key phaze cannot model is a ``ValueError`` naming the key. A multimodal config
(llama4, gemma3) is read for its language model (``text_config``) only. Kept apart from
``phaze.models`` so that each module stays one screenful of concerns (and under the
layout's line limit). The reader returns keyword
arguments and ``phaze.models`` builds the ModelSpec from them, so only ``models`` imports
this module and not the other way round.
"""
from __future__ import annotations

import numbers
import os

from ._validate import positive_int, read_json, show

_GELU_NAMES = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python",
               "gelu_accurate", "quick_gelu")

_LLAMA_COMMON = dict(hidden_act="silu", tie_word_embeddings=False, head_dim=None)
# Library defaults (transformers' configuration_*.py; DeepSeek-V2's configuration_deepseek.py)
# for the keys phaze reads.
_HF_DEFAULTS = {
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                 n_inner=None, activation_function="gelu_new", tie_word_embeddings=True),
    "llama": dict(_LLAMA_COMMON, vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                  max_position_embeddings=2048, attention_bias=False, mlp_bias=False),
    "mistral": dict(_LLAMA_COMMON, vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    max_position_embeddings=4096 * 32, sliding_window=4096),
    "mixtral": dict(_LLAMA_COMMON, vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    max_position_embeddings=4096 * 32, num_local_experts=8,
                    num_experts_per_tok=2, sliding_window=None),
    "qwen2": dict(_LLAMA_COMMON, vocab_size=151936, hidden_size=4096, intermediate_size=22016,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                  max_position_embeddings=32768),
    "qwen2_moe": dict(_LLAMA_COMMON, vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16,
                      max_position_embeddings=32768, decoder_sparse_step=1,
                      moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                      num_experts_per_tok=4, num_experts=60, mlp_only_layers=None),
    "deepseek_v2": dict(_LLAMA_COMMON, vocab_size=102400, hidden_size=4096,
                        intermediate_size=11008, moe_intermediate_size=1407, num_hidden_layers=30,
                        num_attention_heads=32, num_key_value_heads=32, n_shared_experts=None,
                        n_routed_experts=None, num_experts_per_tok=None, moe_layer_freq=1,
                        first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536,
                        qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                        max_position_embeddings=2048, attention_bias=False, topk_method="greedy"),
    # DeepSeek-V3's configuration_deepseek.py (Kimi K2 ships the same class).
    "deepseek_v3": dict(_LLAMA_COMMON, vocab_size=129280, hidden_size=7168,
                        intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
                        num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
                        n_routed_experts=256, num_experts_per_tok=8, moe_layer_freq=1,
                        first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536,
                        qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                        max_position_embeddings=4096, attention_bias=False, topk_method="noaux_tc",
                        n_group=8, topk_group=4, num_nextn_predict_layers=1),
    "qwen3": dict(_LLAMA_COMMON, vocab_size=151936, hidden_size=4096, intermediate_size=22016,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                  head_dim=128, max_position_embeddings=32768, attention_bias=False),
    "qwen3_moe": dict(_LLAMA_COMMON, vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                      num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=4,
                      max_position_embeddings=32768, attention_bias=False, decoder_sparse_step=1,
                      moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128,
                      mlp_only_layers=None),
    "gpt_oss": dict(_LLAMA_COMMON, vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                    num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8,
                    head_dim=64, max_position_embeddings=131072, attention_bias=True,
                    num_local_experts=128, num_experts_per_tok=4, sliding_window=128,
                    layer_types=None),
    "llama4_text": dict(_LLAMA_COMMON, vocab_size=202048, hidden_size=5120, intermediate_size=8192,
                        intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40,
                        num_key_value_heads=8, head_dim=128, max_position_embeddings=4096 * 32,
                        attention_bias=False, num_local_experts=16, num_experts_per_tok=1,
                        interleave_moe_layer_step=1, moe_layers=None, attention_chunk_size=8192,
                        no_rope_layers=None, no_rope_layer_interval=4),
    "nemotron_h": dict(vocab_size=131072, tie_word_embeddings=False, hidden_size=4096,
                       intermediate_size=21504, num_hidden_layers=52,
                       hybrid_override_pattern=("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
                                                "-M-M-M-M-M-"),
                       num_attention_heads=32, attention_head_dim=None, num_key_value_heads=8,
                       mlp_hidden_act="relu2", attention_bias=False, mlp_bias=False,
                       use_bias=False, use_conv_bias=True, ssm_state_size=128,
                       mamba_num_heads=128, n_groups=8, mamba_head_dim=64, conv_kernel=4,
                       chunk_size=128, max_position_embeddings=4096, head_dim=None,
                       # Nemotron 3's MoE ('E') layers: no library default is relied on (each
                       # is required where the pattern has an 'E').
                       n_routed_experts=None, num_experts_per_tok=None,
                       moe_intermediate_size=None, n_shared_experts=None,
                       moe_shared_expert_intermediate_size=None, n_group=1, topk_group=1,
                       routed_scaling_factor=1.0, norm_topk_prob=True, moe_latent_size=None,
                       num_nextn_predict_layers=0, mtp_hybrid_override_pattern=None),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                   num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                   head_dim=256, hidden_activation="gelu_pytorch_tanh",
                   max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False,
                   sliding_window=4096, layer_types=None),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                        num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                        head_dim=256, hidden_activation="gelu_pytorch_tanh",
                        max_position_embeddings=131072, tie_word_embeddings=True,
                        attention_bias=False, sliding_window=4096, sliding_window_pattern=6,
                        layer_types=None),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048, do_layer_norm_before=True, word_embed_proj_dim=None,
                num_attention_heads=12, activation_function="relu", enable_bias=True,
                layer_norm_elementwise_affine=True, tie_word_embeddings=True),
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
                 position_embedding_type="absolute", tie_word_embeddings=True, is_decoder=False),
}
_HF_DEFAULTS["kimi_k2"] = _HF_DEFAULTS["deepseek_v3"]   # Kimi K2: DeepseekV3 architecture
#: Model types read by the Llama-family reader (SwiGLU, RMSNorm, rotary, untied by default).
_LLAMA_FAMILY = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2",
                 "deepseek_v3", "kimi_k2", "qwen3", "qwen3_moe", "gpt_oss", "llama4_text")
#: Multimodal model types whose language model is the nested ``text_config`` (read alone:
#: the vision tower is not modelled).
_NESTED_TEXT = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
#: Model types that read ``sliding_window`` as sliding-window attention layers.
_SLIDING_READERS = ("mistral", "mixtral", "gpt_oss", "gemma2", "gemma3_text")
# GPT-2's attribute_map: the generic names are aliases of its own.
_GPT2_ALIASES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer",
                 "num_attention_heads": "n_head", "max_position_embeddings": "n_positions",
                 "intermediate_size": "n_inner"}


#: Largest integer a config key may hold (larger sizes are refused by ModelSpec's limits).
_HF_INT_MAX = 2 ** 31 - 1


def _hf_int(cfg, key, *, allow_none=False):
    v = cfg.get(key)
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        if isinstance(v, float) and v.is_integer() and 1 <= v <= _HF_INT_MAX:
            return int(v)
        raise ValueError(f"config key {key!r} must be a positive integer, got {show(v)}")
    if v > _HF_INT_MAX:
        raise ValueError(f"config key {key!r} must be an integer from 1 to {_HF_INT_MAX:,}, "
                         f"got {show(v)}")
    return int(v)


def _hf_nonneg_int(cfg, key):
    """``cfg[key]`` as an integer >= 0 (None reads as 0), else ValueError naming the key."""
    v = cfg.get(key)
    if v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v == 0):
        return 0
    try:
        return _hf_int(cfg, key)
    except ValueError:
        raise ValueError(f"config key {key!r} must be an integer >= 0 or null, "
                         f"got {show(v)}") from None


def _hf_bool(cfg, key):
    v = cfg.get(key)
    if not isinstance(v, bool):
        raise ValueError(f"config key {key!r} must be true or false, got {show(v)}")
    return v


# Keys that describe a mixture of experts or multi-head latent attention. Each model
# type's reader understands some of them (_MOE_KEYS_READ); any other one present with a
# value other than the neutral ones (null, false, 0, 1, an empty list) is an error naming
# the key, never a silently different (e.g. dense instead of mixture-of-experts) model.
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
             "moe_intermediate_size", "n_shared_experts", "num_shared_experts",
             "shared_expert_intermediate_size", "moe_num_experts", "moe_layer_freq",
             "expert_interval", "moe_k", "top_k_experts", "decoder_sparse_step",
             "mlp_only_layers", "first_k_dense_replace")
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
_MIXTRAL_KEYS = ("num_local_experts", "num_experts_per_tok")
_MOE_KEYS_READ = {
    # Mixtral's two keys are read in llama- and mistral-typed configs too: a Mixtral
    # checkpoint relabelled (or untyped) is still the mixture of experts it describes.
    "llama": _MIXTRAL_KEYS, "mistral": _MIXTRAL_KEYS, "mixtral": _MIXTRAL_KEYS,
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers"),
    "deepseek_v2": ("n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                    "moe_intermediate_size", "moe_layer_freq", "first_k_dense_replace")
    + _MLA_KEYS,
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "decoder_sparse_step", "mlp_only_layers"),
    "gpt_oss": _MIXTRAL_KEYS, "llama4_text": _MIXTRAL_KEYS,
    # Nemotron 3: the keys of its 'E' layers (read, and refused without one, by _hf_nemotron_h).
    "nemotron_h": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                   "n_shared_experts"),
}
_MOE_KEYS_READ["deepseek_v3"] = _MOE_KEYS_READ["kimi_k2"] = _MOE_KEYS_READ["deepseek_v2"]
#: Keys of _UNMODELLED_TRUE that a model type reads (and models) itself.
_UNMODELLED_READ = {"deepseek_v3": ("num_nextn_predict_layers",),
                    "kimi_k2": ("num_nextn_predict_layers",),
                    # Llama 4's qk norm is a weightless L2 norm: no parameter, accepted.
                    "llama4_text": ("use_qk_norm",),
                    # refused by _hf_nemotron_h in a sentence naming Nemotron 3's MTP block;
                    # LatentMoE read by _hf_nemotron_moe
                    "nemotron_h": ("num_nextn_predict_layers", "moe_latent_size")}
_UNMODELLED_TRUE = {
    "add_cross_attention": "cross-attention layers",
    "parallel_attn": "attention and MLP in parallel",
    "use_parallel_residual": "attention and MLP in parallel",
    "parallel_residual": "attention and MLP in parallel",
    "qk_layernorm": "LayerNorms on queries and keys",
    "use_qk_norm": "norms on queries and keys",
    # Nemotron 3 Super / Ultra's LatentMoE (ModelSpec.moe_latent_size), read from
    # nemotron_h configs only.
    "moe_latent_size": ("a latent mixture of experts (routed experts working in a narrower "
                        "latent space between fc1_latent_proj and fc2_latent_proj), which "
                        "phaze reads from nemotron_h configs only"),
    "num_nextn_predict_layers": "multi-token-prediction layers",
}


def _neutral(v) -> bool:
    """True for a value of a mixture-of-experts key that leaves a model dense."""
    if v is None or v is False or (isinstance(v, (list, tuple)) and not v):
        return True
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 1


def _check_unmodelled(raw: dict, seq_len, model_type: str) -> None:
    """ValueError naming the first key of ``raw`` that changes the model in a way phaze
    does not model for ``model_type`` (mixture-of-experts or latent-attention keys its
    reader does not read, cross-attention, parallel blocks, multi-token prediction, a
    sliding attention window shorter than the sequence)."""
    read = _MOE_KEYS_READ.get(model_type, ())
    for key in _MOE_KEYS:
        v = raw.get(key)
        if key not in read and not _neutral(v):
            readers = ("mixtral (also llama, mistral: num_local_experts), qwen2_moe, qwen3_moe, "
                       "deepseek_v2, deepseek_v3, kimi_k2, gpt_oss, llama4 and nemotron_h "
                       "('E' layers)")
            raise ValueError(f"config key {key!r} ({show(v)}) describes a mixture of experts, "
                             f"which phaze reads from {readers} configs only, not "
                             f"from a {model_type} one")
    for key in _MLA_KEYS:
        if key not in read and raw.get(key) not in (None, 0):
            raise ValueError(f"config key {key!r} ({show(raw[key])}) describes multi-head "
                             f"latent attention, which phaze reads from deepseek_v2, "
                             f"deepseek_v3 and kimi_k2 configs only, not from a {model_type} one")
    for key, what in _UNMODELLED_TRUE.items():
        if key in _UNMODELLED_READ.get(model_type, ()):
            continue
        if raw.get(key) not in (None, False):
            raise ValueError(f"config key {key!r} ({show(raw[key])}) asks for {what}, which "
                             f"phaze does not model; it must be false or absent")
    window = raw.get("sliding_window")
    if model_type in _SLIDING_READERS:
        return                  # read as sliding-window layers by the type's reader
    if window is not None and raw.get("use_sliding_window", True) is not False:
        if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 1:
            raise ValueError(f"config key 'sliding_window' must be a positive integer or null, "
                             f"got {show(window)}")
        if seq_len is not None and window < seq_len:
            raise ValueError(f"config key 'sliding_window' ({window:,}) is shorter than the "
                             f"sequence ({seq_len:,} tokens): phaze models full attention only; "
                             f"pass seq_len <= {window:,} or a config without the window")


def _hf_model_type(cfg) -> str:
    mt = cfg.get("model_type")
    if mt is None:
        if "n_embd" in cfg or "n_layer" in cfg:
            return "gpt2"
        if "ffn_dim" in cfg or "word_embed_proj_dim" in cfg:
            return "opt"
        if "rms_norm_eps" in cfg or "num_key_value_heads" in cfg:
            return "llama"
        if "type_vocab_size" in cfg:
            return "bert"
        raise ValueError("config key 'model_type' is missing and the config's keys do not "
                         "identify one of gpt2, llama, mistral, opt, bert")
    if not isinstance(mt, str) or (mt.lower() not in _HF_DEFAULTS
                                   and mt.lower() not in _NESTED_TEXT):
        known = ", ".join(list(_HF_DEFAULTS) + list(_NESTED_TEXT))
        raise ValueError(f"config key 'model_type' must be one of {known}; got {show(mt)}")
    return mt.lower()


def _gelu_or_relu(cfg, key) -> str:
    """'gelu' or 'relu' for the activation named by ``cfg[key]``, else ValueError naming the key."""
    act = cfg[key]
    if act in _GELU_NAMES:
        return "gelu"
    if act == "relu":
        return "relu"
    raise ValueError(f"config key '{key}' must be a GELU variant or relu, got {show(act)}")


def _load_hf(path_or_dict) -> dict:
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict)
    if not isinstance(path_or_dict, (str, os.PathLike)):
        raise ValueError(f"path_or_dict must be a dict or the path of a config.json, "
                         f"got {type(path_or_dict).__name__}")
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    cfg = read_json(path, "a config")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def _hf_rope_scaling(raw) -> int:
    """The pre-training context of a config whose ``rope_scaling`` stretches positions
    (``original_max_position_embeddings``), else None. Rope scaling (Llama 3.1's "llama3",
    YaRN, linear, dynamic) changes no weight: it is accepted and only sets that default."""
    rs = raw.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ValueError(f"config key 'rope_scaling' must be an object or null, got {show(rs)}")
    if rs.get("original_max_position_embeddings") is None:
        return None
    return _hf_int(rs, "original_max_position_embeddings")


def _hf_mixtral_moe(raw, cfg, mt) -> dict:
    """ModelSpec fields of Mixtral's experts (every layer an MoE layer), or {} for a dense
    llama/mistral config (no expert key, or only neutral ones: null, 0, 1). ``num_experts_per_tok`` without ``num_local_experts`` (or the
    other way round outside a mixtral config, which has defaults) is ambiguous: refused."""
    src = cfg if mt == "mixtral" else raw
    n, k = src.get("num_local_experts"), src.get("num_experts_per_tok")
    if _neutral(n) and _neutral(k):
        return {}           # absent, or one expert and top-1: the dense model it always was
    if n is None:
        raise ValueError(f"config key 'num_experts_per_tok' ({show(k)}) routes tokens to "
                         f"experts but the {mt} config gives no 'num_local_experts'; phaze "
                         f"will not read it as a dense model")
    if k is None:
        raise ValueError(f"config key 'num_local_experts' ({show(n)}) describes a mixture of "
                         f"experts but the {mt} config gives no 'num_experts_per_tok' (top-k)")
    return dict(n_experts=_hf_int(src, "num_local_experts"),
                experts_per_token=_hf_int(src, "num_experts_per_tok"))


def _hf_qwen2_moe(cfg) -> dict:
    """ModelSpec fields of a Qwen2-MoE config (modeling_qwen2_moe.py: layer i is sparse when
    it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; one shared expert
    of width shared_expert_intermediate_size behind a hidden × 1 sigmoid gate)."""
    layers = _hf_int(cfg, "num_hidden_layers")
    n = _hf_nonneg_int(cfg, "num_experts")
    if n == 0:
        return {}
    step = _hf_int(cfg, "decoder_sparse_step")
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, (list, tuple)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in only):
        raise ValueError(f"config key 'mlp_only_layers' must be a list of layer indices, "
                         f"got {show(only)}")
    first = len(only)
    if sorted(only) != list(range(first)) or (step > 1 and first):
        raise ValueError(f"config key 'mlp_only_layers' ({show(only)}) must list the first "
                         f"layers 0, 1, ... (and decoder_sparse_step be 1): phaze models dense "
                         f"layers before the first MoE layer only")
    if step > 1:
        # (i + 1) % step == 0 puts the MoE layers at step − 1, 2·step − 1, ...; phaze's
        # pattern (i >= first and i % every == 0) has them at multiples of its period.
        raise ValueError(f"config key 'decoder_sparse_step' ({step}) must be 1: phaze's "
                         f"MoE-every-n pattern starts at layer 0, Qwen2-MoE's at layer {step - 1}")
    shared = _hf_nonneg_int(cfg, "shared_expert_intermediate_size")
    return dict(n_experts=n, experts_per_token=_hf_int(cfg, "num_experts_per_tok"),
                expert_ffn_hidden=_hf_int(cfg, "moe_intermediate_size"),
                n_shared_experts=1 if shared else 0, shared_ffn_hidden=shared or None,
                shared_expert_gate=bool(shared), first_dense_layers=min(first, layers))


def _hf_deepseek_v2(cfg) -> dict:
    """ModelSpec fields of a DeepSeek-V2 config: multi-head latent attention and, with
    n_routed_experts, the fine-grained MoE (layer i is sparse when i >= first_k_dense_replace
    and i % moe_layer_freq == 0; n_shared_experts experts of moe_intermediate_size)."""
    if _hf_bool(cfg, "attention_bias"):
        raise ValueError("config key 'attention_bias' must be false: phaze models DeepSeek-V2's "
                         "bias-free multi-head latent attention")
    method = cfg.get("topk_method")
    if method not in (None, "greedy", "group_limited_greedy"):
        # noaux_tc (DeepSeek-V3) adds a bias per expert to the router.
        raise ValueError(f"config key 'topk_method' must be greedy or group_limited_greedy, "
                         f"got {show(method)}: phaze models DeepSeek-V2's bias-free router")
    nope = _hf_int(cfg, "qk_nope_head_dim")
    spec = dict(kv_lora_rank=_hf_int(cfg, "kv_lora_rank"),
                q_lora_rank=_hf_nonneg_int(cfg, "q_lora_rank"),
                qk_rope_head_dim=_hf_nonneg_int(cfg, "qk_rope_head_dim"),
                v_head_dim=_hf_int(cfg, "v_head_dim"), head_dim=nope)
    n = _hf_nonneg_int(cfg, "n_routed_experts")
    if n:
        shared = _hf_nonneg_int(cfg, "n_shared_experts")
        spec.update(n_experts=n, experts_per_token=_hf_int(cfg, "num_experts_per_tok"),
                    expert_ffn_hidden=_hf_int(cfg, "moe_intermediate_size"),
                    n_shared_experts=shared, first_dense_layers=_hf_nonneg_int(
                        cfg, "first_k_dense_replace"), moe_every=_hf_int(cfg, "moe_layer_freq"))
    return spec


def _hf_layer_types(cfg, key, n_layers, kinds) -> list:
    """``cfg[key]`` (HF ``layer_types``) as phaze mixer names, one per layer; ``kinds`` maps
    each HF name it may hold to a mixer."""
    v = cfg.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != n_layers:
        raise ValueError(f"config key {key!r} must list one of {', '.join(kinds)} for each of "
                         f"the {n_layers} layers, got {show(v)}")
    for kind in v:
        if kind not in kinds:
            raise ValueError(f"config key {key!r} must hold only {', '.join(kinds)}, "
                             f"got {show(kind)}")
    return [kinds[kind] for kind in v]


def _hf_window(cfg, mixers) -> dict:
    """``sliding_window`` for the 'sliding' layers of ``mixers`` (null: full attention)."""
    if "sliding" not in mixers:
        return {}
    return dict(layer_mixers=mixers, sliding_window=_hf_int(cfg, "sliding_window"))


def _hf_deepseek_v3(cfg) -> dict:
    """ModelSpec fields of a DeepSeek-V3 (or Kimi K2) config: DeepSeek-V2's MLA and MoE with
    the sigmoid router's per-expert selection bias (``e_score_correction_bias`` of
    topk_method noaux_tc, counted as router_bias), group-limited routing (n_group,
    topk_group) and num_nextn_predict_layers multi-token-prediction modules."""
    method = cfg.get("topk_method")
    if method != "noaux_tc":
        raise ValueError(f"config key 'topk_method' must be noaux_tc for DeepSeek-V3, "
                         f"got {show(method)} (its modeling_deepseek.py implements no other)")
    spec = _hf_deepseek_v2(dict(cfg, topk_method="greedy"))
    spec["mtp_layers"] = _hf_nonneg_int(cfg, "num_nextn_predict_layers")
    if spec.get("n_experts"):
        groups, top = _hf_int(cfg, "n_group"), _hf_int(cfg, "topk_group")
        if spec["n_experts"] % groups:
            raise ValueError(f"config key 'n_group' ({groups}) must divide n_routed_experts "
                             f"({spec['n_experts']}): the experts are routed in equal groups")
        if top > groups:
            raise ValueError(f"config key 'topk_group' ({top}) must be at most n_group "
                             f"({groups})")
        spec.update(router_bias=True, n_expert_groups=groups, topk_groups=top)
    return spec


def _hf_gpt_oss(cfg) -> dict:
    """ModelSpec fields of a GPT-OSS config (modeling_gpt_oss.py): biases on every linear
    layer (attention, experts, router), an attention sink per head, every layer an MoE
    layer of num_local_experts experts (top num_experts_per_tok), layer_types alternating
    sliding-window and full attention."""
    if not _hf_bool(cfg, "attention_bias"):
        raise ValueError("config key 'attention_bias' must be true for gpt_oss: its experts "
                         "and router always carry biases, and phaze models biases on all "
                         "linear layers or on none")
    layers = _hf_int(cfg, "num_hidden_layers")
    if cfg.get("layer_types") is None:      # GptOssConfig's default: sliding on even layers
        mixers = ["sliding" if i % 2 == 0 else "attention" for i in range(layers)]
    else:
        mixers = _hf_layer_types(cfg, "layer_types", layers, {
            "sliding_attention": "sliding", "full_attention": "attention"})
    return dict(bias=True, attention_sinks=True, router_bias=True,
                n_experts=_hf_int(cfg, "num_local_experts"),
                experts_per_token=_hf_int(cfg, "num_experts_per_tok"), **_hf_window(cfg, mixers))


def _hf_llama4(cfg) -> dict:
    """ModelSpec fields of a Llama 4 text config (modeling_llama4.py): the layers of
    ``moe_layers`` (default every interleave_moe_layer_step-th, from step − 1) have
    num_local_experts routed experts and one shared expert of intermediate_size and a
    bias-free router; the others a dense MLP of intermediate_size_mlp. Layers with rotary
    positions (no_rope_layers 1) use chunked attention over attention_chunk_size tokens;
    the NoPE layers (every no_rope_layer_interval-th) full attention. The qk norm is a
    weightless L2 norm (no parameter)."""
    if _hf_bool(cfg, "attention_bias"):
        raise ValueError("config key 'attention_bias' must be false for llama4: phaze models "
                         "Q, K, V and output biases together with MLP biases only")
    layers = _hf_int(cfg, "num_hidden_layers")
    step = _hf_int(cfg, "interleave_moe_layer_step")
    moe = cfg.get("moe_layers")
    if moe is None:
        moe = list(range(step - 1, layers, step))
    if not isinstance(moe, (list, tuple)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) and 0 <= i < layers
            for i in moe):
        raise ValueError(f"config key 'moe_layers' must list layer indices from 0 to "
                         f"{layers - 1}, got {show(moe)}")
    rope = cfg.get("no_rope_layers")
    if not rope:            # Llama4TextConfig: NoPE on every no_rope_layer_interval-th layer
        interval = _hf_int(cfg, "no_rope_layer_interval")
        rope = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(rope, (list, tuple)) or len(rope) != layers or any(
            v not in (0, 1) or isinstance(v, float) for v in rope):
        raise ValueError(f"config key 'no_rope_layers' must hold 0 or 1 for each of the "
                         f"{layers} layers, got {show(rope)}")
    chunk = _hf_int(cfg, "attention_chunk_size", allow_none=True)
    spec = dict(ffn_hidden=_hf_int(cfg, "intermediate_size_mlp"),
                n_experts=_hf_int(cfg, "num_local_experts"),
                experts_per_token=_hf_int(cfg, "num_experts_per_tok"),
                expert_ffn_hidden=_hf_int(cfg, "intermediate_size"), n_shared_experts=1,
                layer_ffns=["moe" if i in set(moe) else "dense" for i in range(layers)])
    if chunk:
        spec.update(layer_mixers=["chunked" if r else "attention" for r in rope],
                    attention_chunk=chunk)
    return spec


def _hf_nemotron_h(cfg) -> dict:
    """ModelSpec fields of a Nemotron-H or Nemotron 3 config (modeling_nemotron_h.py): one
    sublayer per layer after one RMSNorm, named by hybrid_override_pattern (M: Mamba-2
    mixer, *: attention without position embedding, -: squared-ReLU MLP, E: Nemotron 3's
    MoE, see :func:`_hf_nemotron_moe`); no linear biases, a convolution bias."""
    for key, want in (("mlp_hidden_act", "relu2"), ("use_bias", False), ("mlp_bias", False),
                      ("attention_bias", False), ("use_conv_bias", True)):
        if cfg.get(key) != want:
            raise ValueError(f"config key {key!r} must be {show(want).lower()} for nemotron_h "
                             f"(the structure phaze models), got {show(cfg.get(key))}")
    layers = _hf_int(cfg, "num_hidden_layers")
    pattern = cfg.get("hybrid_override_pattern")
    kinds = {"M": ("mamba", "none"), "*": ("attention", "none"), "-": ("none", "dense"),
             "E": ("none", "moe")}
    if not isinstance(pattern, str) or len(pattern) != layers or not set(pattern) <= set(kinds):
        raise ValueError(f"config key 'hybrid_override_pattern' must hold one of M, *, -, E "
                         f"for each of the {layers} layers, got {show(pattern)}")
    mtp = _hf_nonneg_int(cfg, "num_nextn_predict_layers")
    if mtp:
        raise ValueError(f"config key 'num_nextn_predict_layers' ({mtp}) asks for Nemotron 3's "
                         f"multi-token-prediction block (mtp_hybrid_override_pattern "
                         f"{show(cfg.get('mtp_hybrid_override_pattern'))}: an attention and an "
                         f"MoE layer behind the eh_proj fusion), which phaze's MTP module (one "
                         f"layer of the last layer's kind: the step model holds one MTP layer "
                         f"kind) does not model; it must be 0 or absent")
    # Nemotron-H spells the head width attention_head_dim, Nemotron 3 head_dim (default 128).
    given = [k for k in ("attention_head_dim", "head_dim") if cfg.get(k) is not None]
    widths = {_hf_int(cfg, k) for k in given} or {128}
    if len(widths) > 1:
        raise ValueError(f"config key 'head_dim' ({cfg['head_dim']}) must equal "
                         f"attention_head_dim ({cfg['attention_head_dim']})")
    head_dim = widths.pop()
    heads = _hf_int(cfg, "num_attention_heads")
    spec = dict(n_layers=layers, hidden=_hf_int(cfg, "hidden_size"), heads=heads,
                kv_heads=_hf_int(cfg, "num_key_value_heads"), head_dim=head_dim,
                ffn_hidden=_hf_int(cfg, "intermediate_size"), vocab=_hf_int(cfg, "vocab_size"),
                activation="squared_relu", norm="rmsnorm", position="none", bias=False,
                causal=True, tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                layer_mixers=[kinds[c][0] for c in pattern],
                layer_ffns=[kinds[c][1] for c in pattern],
                mamba_heads=_hf_int(cfg, "mamba_num_heads"),
                mamba_head_dim=_hf_int(cfg, "mamba_head_dim"),
                mamba_state=_hf_int(cfg, "ssm_state_size"), mamba_groups=_hf_int(cfg, "n_groups"),
                mamba_conv=_hf_int(cfg, "conv_kernel"), mamba_chunk=_hf_int(cfg, "chunk_size"))
    spec.update(_hf_nemotron_moe(cfg, "E" in pattern))
    return spec


def _hf_nemotron_moe(cfg, has_moe: bool) -> dict:
    """The MoE fields of a Nemotron 3 config's 'E' layers (modeling_nemotron_h.py's
    NemotronHMOE): n_routed_experts squared-ReLU experts of moe_intermediate_size (up_proj,
    down_proj, no gate), top num_experts_per_tok by sigmoid scores plus the router's
    e_score_correction_bias (router_bias: n_routed_experts more per layer) within
    topk_group of n_group groups, one shared expert of
    moe_shared_expert_intermediate_size; routed_scaling_factor and norm_topk_prob scale
    the routed output and add no parameter. Nemotron 3 Super's moe_latent_size (null:
    none) is LatentMoE: the routed experts on a latent of that width between
    fc1_latent_proj and fc2_latent_proj (NemotronHMOE, Megatron-Core's MoELayer). Empty
    for a pattern without 'E' (whose expert keys must then be absent: they would describe
    layers the model does not have)."""
    if not has_moe:
        for key in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                    "moe_latent_size"):
            if not _neutral(cfg.get(key)):
                raise ValueError(f"config key {key!r} ({show(cfg[key])}) describes MoE "
                                 f"layers, but hybrid_override_pattern has no 'E' layer")
        return {}
    experts = _hf_int(cfg, "n_routed_experts")
    top = _hf_int(cfg, "num_experts_per_tok")
    if top > experts:
        raise ValueError(f"config key 'num_experts_per_tok' ({top}) must be at most "
                         f"n_routed_experts ({experts})")
    shared = _hf_nonneg_int(cfg, "n_shared_experts")
    if shared > 1:
        raise ValueError(f"config key 'n_shared_experts' must be 0 or 1 for nemotron_h, got "
                         f"{shared}: the published configs (all 1) do not settle whether "
                         f"moe_shared_expert_intermediate_size is the width of each shared "
                         f"expert or of all of them")
    groups, top_groups = _hf_int(cfg, "n_group"), _hf_int(cfg, "topk_group")
    if experts % groups:
        raise ValueError(f"config key 'n_group' ({groups}) must divide n_routed_experts "
                         f"({experts}): the experts are routed in equal groups")
    if top_groups > groups:
        raise ValueError(f"config key 'topk_group' ({top_groups}) must be at most n_group "
                         f"({groups})")
    scale = cfg.get("routed_scaling_factor")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0:
        raise ValueError(f"config key 'routed_scaling_factor' must be a positive number, "
                         f"got {show(scale)}")
    spec = dict(n_experts=experts, experts_per_token=top,
                expert_ffn_hidden=_hf_int(cfg, "moe_intermediate_size"),
                n_shared_experts=shared, router_bias=True, n_expert_groups=groups,
                topk_groups=top_groups)
    if shared:
        spec["shared_ffn_hidden"] = _hf_int(cfg, "moe_shared_expert_intermediate_size")
    if cfg.get("moe_latent_size") is not None:
        spec["moe_latent_size"] = _hf_int(cfg, "moe_latent_size")
    return spec


def _hf_gemma(cfg, mt) -> dict:
    """ModelSpec fields of a Gemma 2 or Gemma 3 text config (modeling_gemma2/3.py): GeGLU
    (tanh GELU) MLP, RMSNorm before and after each sublayer, rotary positions, tied
    embeddings; sliding-window layers by layer_types (default: Gemma 2 every other layer
    from 0, Gemma 3 all but every sliding_window_pattern-th); Gemma 3 adds per-head q/k
    RMSNorms. Logit soft-capping and query_pre_attn_scalar add no parameter."""
    act = cfg["hidden_activation"]
    if act not in _GELU_NAMES:
        raise ValueError(f"config key 'hidden_activation' must be a GELU variant (GeGLU) for "
                         f"{mt}, got {show(act)}")
    if _hf_bool(cfg, "attention_bias"):
        raise ValueError(f"config key 'attention_bias' must be false for {mt}: phaze models "
                         f"Q, K, V and output biases together with MLP biases only")
    layers = _hf_int(cfg, "num_hidden_layers")
    kinds = {"sliding_attention": "sliding", "full_attention": "attention"}
    if cfg.get("layer_types") is not None:
        mixers = _hf_layer_types(cfg, "layer_types", layers, kinds)
    elif mt == "gemma2":
        mixers = ["sliding" if i % 2 == 0 else "attention" for i in range(layers)]
    else:
        every = _hf_int(cfg, "sliding_window_pattern")
        mixers = ["sliding" if (i + 1) % every else "attention" for i in range(layers)]
    heads = _hf_int(cfg, "num_attention_heads")
    return dict(n_layers=layers, hidden=_hf_int(cfg, "hidden_size"), heads=heads,
                kv_heads=_hf_int(cfg, "num_key_value_heads"), head_dim=_hf_int(cfg, "head_dim"),
                ffn_hidden=_hf_int(cfg, "intermediate_size"), vocab=_hf_int(cfg, "vocab_size"),
                activation="geglu", norm="rmsnorm", position="rotary", bias=False, causal=True,
                tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"), sandwich_norm=True,
                qk_norm=mt == "gemma3_text", **_hf_window(cfg, mixers))


def _hf_unwrap_text(raw, mt):
    """The language model of a multimodal config (llama4, gemma3: its ``text_config``, with
    the outer tie_word_embeddings and _name_or_path when the inner one has none) and its
    model type; any other config as it is."""
    if mt not in _NESTED_TEXT:
        return raw, mt
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise ValueError(f"config key 'text_config' must be an object (the language model of "
                         f"a {mt} config), got {show(text)}")
    inner = dict(text)
    for key in ("tie_word_embeddings", "_name_or_path"):
        if key in raw and key not in inner:
            inner[key] = raw[key]
    want = _NESTED_TEXT[mt]
    if inner.setdefault("model_type", want) != want:
        raise ValueError(f"config key 'text_config' must describe a {want} model, got "
                         f"model_type {show(inner['model_type'])}")
    return inner, want


def read_hf_config(path_or_dict, *, name: str = None, seq_len: int = None,
                   max_seq_len: int) -> dict:
    """The keyword arguments of the ModelSpec that ``phaze.models.from_hf_config``
    builds from ``path_or_dict`` (see its docstring): ``name``, ``seq_len`` (checked
    against ``max_seq_len``, the ModelSpec's limit) and the shape fields."""
    raw = _load_hf(path_or_dict)
    raw, mt = _hf_unwrap_text(raw, _hf_model_type(raw))
    _check_unmodelled(raw, None, mt)
    cfg = dict(_HF_DEFAULTS[mt])
    if mt == "gpt2":
        for alias, own in _GPT2_ALIASES.items():
            if alias in raw and own not in raw:
                raw[own] = raw[alias]
    cfg.update({k: v for k, v in raw.items() if k in cfg})
    if name is None:
        name = raw.get("_name_or_path") or mt
        if not isinstance(name, str) or not name:
            name = mt

    if mt == "gpt2":
        hidden = _hf_int(cfg, "n_embd")
        ffn = _hf_int(cfg, "n_inner", allow_none=True) or 4 * hidden
        activation = _gelu_or_relu(cfg, "activation_function")
        heads = _hf_int(cfg, "n_head")
        positions = _hf_int(cfg, "n_positions")
        spec = dict(n_layers=_hf_int(cfg, "n_layer"), hidden=hidden, heads=heads, kv_heads=heads,
                    ffn_hidden=ffn, vocab=_hf_int(cfg, "vocab_size"), activation=activation,
                    norm="layernorm", position="learned", bias=True, causal=True,
                    tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                    max_positions=positions)
    elif mt in _LLAMA_FAMILY:
        act = cfg["hidden_act"]
        if act not in ("silu", "swish"):
            raise ValueError(f"config key 'hidden_act' must be silu (SwiGLU) for {mt}, "
                             f"got {show(act)}")
        bias = False
        if mt == "llama":
            bias = _hf_bool(cfg, "attention_bias")
            if _hf_bool(cfg, "mlp_bias") != bias:
                raise ValueError("config key 'mlp_bias' must equal attention_bias: phaze models "
                                 "biases on all linear layers or on none")
        elif mt in ("qwen3", "qwen3_moe") and _hf_bool(cfg, "attention_bias"):
            raise ValueError(f"config key 'attention_bias' must be false for {mt}: phaze models "
                             f"Q, K, V and output biases together with MLP biases only")
        heads = _hf_int(cfg, "num_attention_heads")
        kv = _hf_int(cfg, "num_key_value_heads", allow_none=True) or heads
        positions = _hf_int(cfg, "max_position_embeddings")
        spec = dict(n_layers=_hf_int(cfg, "num_hidden_layers"), hidden=_hf_int(cfg, "hidden_size"),
                    heads=heads, kv_heads=kv, ffn_hidden=_hf_int(cfg, "intermediate_size"),
                    vocab=_hf_int(cfg, "vocab_size"), activation="swiglu", norm="rmsnorm",
                    position="rotary", bias=bias, causal=True,
                    tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                    head_dim=_hf_int(cfg, "head_dim", allow_none=True))
        if mt in ("qwen2", "qwen2_moe"):
            spec["qkv_bias"] = True      # hard-wired in modeling_qwen2*.py: no config key
        if mt in ("llama", "mistral", "mixtral"):
            spec.update(_hf_mixtral_moe(raw, cfg, mt))
        if mt in ("mistral", "mixtral") and cfg.get("sliding_window") is not None:
            spec.update(_hf_window(cfg, ["sliding"] * spec["n_layers"]))
        elif mt in ("qwen2_moe", "qwen3_moe"):
            spec.update(_hf_qwen2_moe(cfg))
        elif mt == "deepseek_v2":
            spec.update(_hf_deepseek_v2(cfg))
        elif mt in ("deepseek_v3", "kimi_k2"):
            spec.update(_hf_deepseek_v3(cfg))
        elif mt == "gpt_oss":
            spec.update(_hf_gpt_oss(cfg))
        elif mt == "llama4_text":
            spec.update(_hf_llama4(cfg))
        if mt in ("qwen3", "qwen3_moe"):
            spec["qk_norm"] = True       # q_norm, k_norm over each head: no config key
        if "rms_norm_eps" in raw:   # read to reject nonsense; the value does not change the cost
            eps = raw["rms_norm_eps"]
            if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps > 0:
                raise ValueError(f"config key 'rms_norm_eps' must be a positive number, "
                                 f"got {show(eps)}")
        original = _hf_rope_scaling(raw)
        if original is not None:
            positions = original
    elif mt in ("nemotron_h", "gemma2", "gemma3_text"):
        spec = _hf_nemotron_h(cfg) if mt == "nemotron_h" else _hf_gemma(cfg, mt)
        positions = _hf_int(cfg, "max_position_embeddings")
        original = _hf_rope_scaling(raw)
        if original is not None:
            positions = original
    elif mt == "opt":
        hidden = _hf_int(cfg, "hidden_size")
        proj = _hf_int(cfg, "word_embed_proj_dim", allow_none=True) or hidden
        act = cfg["activation_function"]
        if act == "relu":
            activation = "relu"
        elif act in _GELU_NAMES:
            activation = "gelu"
        else:
            raise ValueError(f"config key 'activation_function' must be relu or a GELU variant, "
                             f"got {show(act)}")
        if not _hf_bool(cfg, "layer_norm_elementwise_affine"):
            raise ValueError("config key 'layer_norm_elementwise_affine' must be true: phaze "
                             "models LayerNorms with weight and bias")
        heads = _hf_int(cfg, "num_attention_heads")
        positions = _hf_int(cfg, "max_position_embeddings")
        spec = dict(n_layers=_hf_int(cfg, "num_hidden_layers"), hidden=hidden, heads=heads,
                    kv_heads=heads, ffn_hidden=_hf_int(cfg, "ffn_dim"),
                    vocab=_hf_int(cfg, "vocab_size"), activation=activation, norm="layernorm",
                    position="learned", bias=_hf_bool(cfg, "enable_bias"),
                    embed_proj=proj if proj != hidden else 0, causal=True,
                    tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                    # OPT's learned position table has 2 extra rows (its padding offset).
                    max_positions=positions + 2,
                    final_norm=_hf_bool(cfg, "do_layer_norm_before"))
    else:  # bert
        activation = _gelu_or_relu(cfg, "hidden_act")
        if cfg["position_embedding_type"] != "absolute":
            raise ValueError(f"config key 'position_embedding_type' must be 'absolute', "
                             f"got {show(cfg['position_embedding_type'])}")
        heads = _hf_int(cfg, "num_attention_heads")
        positions = _hf_int(cfg, "max_position_embeddings")
        spec = dict(n_layers=_hf_int(cfg, "num_hidden_layers"), hidden=_hf_int(cfg, "hidden_size"),
                    heads=heads, kv_heads=heads, ffn_hidden=_hf_int(cfg, "intermediate_size"),
                    vocab=_hf_int(cfg, "vocab_size"), activation=activation, norm="layernorm",
                    position="learned", bias=True, causal=_hf_bool(cfg, "is_decoder"),
                    tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                    max_positions=positions)

    if seq_len is None:
        seq_len = positions
    else:
        seq_len = positive_int("seq_len", seq_len, max_seq_len)
    _check_unmodelled(raw, seq_len, mt)
    spec.setdefault("max_positions", None)
    if spec["max_positions"] is not None and spec["position"] != "learned":
        spec["max_positions"] = None
    return dict(name=name, seq_len=seq_len, **spec)


__all__ = ["read_hf_config"]
