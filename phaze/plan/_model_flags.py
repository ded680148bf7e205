"""The model's own launch arguments: one row per :class:`phaze.models.ModelSpec` field,
saying what each trainer writes for its value (issue 29 item 7: the emitted model is the
priced one). ``phaze.launch`` writes a model's arguments from this table alone.

Each :class:`ModelFlag` row names the ModelSpec fields it reads and, per trainer, a
writer ``(spec) -> list of strings`` or None when that trainer's arguments cannot express
the row at a value other than its neutral one (``neutral(spec)`` says whether the model
is at it). A ModelSpec field no row names, at a value other than its dataclass default,
is refused for every trainer by name (:func:`model_refusal`), so a field added to the
ModelSpec is never silently dropped: adding its flags is one row here (e.g. issue 27's
``qk_norm``: ``ModelFlag(("qk_norm",), lambda s: not s.qk_norm,
megatron=lambda s: ["--qk-layernorm"], deepspeed=None)``).

Spellings, each checked against its trainer's argument parser at a pinned commit (the
lists are transcribed in ``tests/test_emit_flags.py``):

- Megatron-LM / Megatron-Core, NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553
  (2026-08-22): ``megatron/training/arguments.py`` (literal ``add_argument`` calls) and the
  dataclass fields it turns into flags (``ArgumentGroupFactory``: field ``a_b`` is
  ``--a-b``; ``megatron/core/transformer/transformer_config.py``,
  ``megatron/core/model_parallel_config.py``, ``megatron/training/config/*.py``):
  ``--normalization LayerNorm|RMSNorm``, ``--group-query-attention --num-query-groups``,
  ``--position-embedding-type rope|none``, ``--rotary-base`` (int, default 10000),
  ``--add-qkv-bias``, ``--moe-shared-expert-gate``.
- Megatron-DeepSpeed, microsoft/Megatron-DeepSpeed f4157bea69f3df8c6cb66f2ebcda66ba03d1288e
  (2024-12-24), ``megatron/arguments.py``: ``--normalization layernorm|rmsnorm``,
  ``--num-key-value-heads``, ``--use-rotary-position-embeddings`` with
  ``--no-position-embedding`` (else a learned table is added too: ``add_position_embedding``
  defaults on), ``--rotary-position-embeddings-theta`` (int, default 10000); it has no
  Q/K/V-only bias and no mixture-of-experts arguments of Megatron-Core's kind.

The rotary base is not a ModelSpec field: a spec's ``rope_theta`` attribute when it has
one, else the publisher's value for the zoo models (:data:`ROTARY_BASE`, from each
model's Hugging Face ``config.json`` ``rope_theta``), else the value given to
``phaze.launch`` (``phaze evaluate --hf-config`` reads the config's ``rope_theta``).
"""
from __future__ import annotations

import dataclasses

#: The zoo's rotary bases (Hugging Face config.json ``rope_theta`` of each published
#: model: meta-llama/Llama-2-*-hf 10000, meta-llama/Meta-Llama-3-8B/70B and
#: Llama-3.1-405B 500000, Qwen/Qwen2-7B 1000000, mistralai/Mixtral-8x7B-v0.1 and
#: Mixtral-8x22B-v0.1 1000000, deepseek-ai/DeepSeek-V2-Lite 10000; Nemotron-4 (NeMo
#: configs, rotary_base 10000)).
ROTARY_BASE = {
    "llama2-7b": 10000, "llama2-13b": 10000, "llama2-70b": 10000,
    "llama3-8b": 500000, "llama3-70b": 500000, "llama3.1-405b": 500000,
    "qwen2-7b": 1000000, "mixtral-8x7b": 1000000, "mixtral-8x22b": 1000000,
    "deepseek-v2-lite": 10000, "nemotron4-15b": 10000, "nemotron4-340b": 10000,
    "nemotron-8b": 10000, "nemotron-22b": 10000,
}


def rotary_base(spec, given=None):
    """The rotary base of ``spec``: ``given``, its ``rope_theta`` attribute, the zoo's
    (:data:`ROTARY_BASE`), or None (unknown: the trainer's default 10000 applies)."""
    if given is not None:
        return given
    own = getattr(spec, "rope_theta", None)
    if own is not None:
        return own
    return ROTARY_BASE.get(spec.name)


def _qkv_bias(spec) -> bool:
    q = getattr(spec, "qkv_bias", None)
    return spec.bias if q is None else bool(q)


def _head_dim(spec) -> int:
    return getattr(spec, "head_dim", None) or spec.hidden // spec.heads


def _positions(spec) -> int:
    # rotary or none: the priced sequence; a learned table: its rows (at least the sequence)
    if spec.position == "learned":
        return max(getattr(spec, "max_positions", None) or spec.seq_len, spec.seq_len)
    return spec.seq_len


#: Megatron-Core's hybrid layer symbols (``--hybrid-override-pattern``, one per layer):
#: a Mamba-2 mixer, an attention layer, an MLP, a mixture of experts.
HYBRID_SYMBOLS = {("mamba", "none"): "M", ("attention", "none"): "*", ("none", "dense"): "-",
                  ("none", "moe"): "E"}


def hybrid_pattern(spec):
    """Megatron-Core's ``--hybrid-override-pattern`` of a model whose every layer is one
    sublayer of :data:`HYBRID_SYMBOLS` (Nemotron-H), with a Mamba layer among them; None
    for any other model (a layer of a mixer and a feed-forward block has no symbol)."""
    kinds = getattr(spec, "layer_kinds", None)
    if not kinds or not any(k[0] == "mamba" for k in kinds):
        return None
    if any(k not in HYBRID_SYMBOLS for k in kinds):
        return None
    return "".join(HYBRID_SYMBOLS[k] for k in kinds)


def _mixer_arguments(spec):
    """The arguments of a model's token mixers other than full attention, or None when
    Megatron-Core has none for them: a hybrid Mamba model's pattern; sliding-window
    attention on every layer (Mistral: ``--window-size W,0``, Megatron-Core's window_size
    (left, right) as its GPT-OSS recipe maps Hugging Face's sliding_window) or on all but
    every n-th layer (GPT-OSS, Gemma: ``--window-attn-skip-freq n``, full attention on the
    layers numbered from 1 that n divides). Chunked attention has no argument here."""
    pattern = hybrid_pattern(spec)
    if pattern:
        return ["--hybrid-override-pattern", pattern]
    mixers = getattr(spec, "mixers", None) or ("attention",)
    if set(mixers) == {"attention"}:
        return []
    if set(mixers) - {"attention", "sliding"}:
        return None
    window = ["--window-size", f"{spec.sliding_window},0"]
    full = [i + 1 for i, m in enumerate(mixers) if m == "attention"]
    if not full:
        return window
    n = full[0]
    if full != list(range(n, len(mixers) + 1, n)):
        return None
    return window + ["--window-attn-skip-freq", str(n)]


def _moe_layer_freq(spec) -> list:
    moe = set(spec.moe_layer_ids)
    if len(moe) == spec.n_layers:
        return []
    return ["--moe-layer-freq",
            "[" + ",".join("1" if i in moe else "0" for i in range(spec.n_layers)) + "]"]


def _shared_width(spec) -> int:
    return spec.n_shared_experts * (spec.shared_ffn_hidden or spec.expert_ffn_hidden
                                    or spec.ffn_hidden)


def _int_text(x) -> str:
    return str(int(x)) if float(x) == int(x) else repr(float(x))


#: The activations both trainers name (Megatron-LM and Megatron-DeepSpeed spell them
#: alike); any other (ReLU, Gemma's GeGLU) has no flag there and is refused.
_ACTIVATION = {"gelu": [], "swiglu": ["--swiglu"], "squared_relu": ["--squared-relu"]}


@dataclasses.dataclass(frozen=True)
class ModelFlag:
    """One row: the ModelSpec ``fields`` it reads; ``neutral(spec)``: the model is at the
    row's neutral value (nothing need be written, and a trainer without the row can take
    it); ``megatron`` / ``deepspeed``: writer ``(spec, rotary_base) -> list`` or None
    (the trainer cannot express a non-neutral value); ``title``: what it is, in words."""

    fields: tuple
    neutral: object
    megatron: object
    deepspeed: object
    title: str


_ALWAYS = lambda s: True  # noqa: E731  (a row every trainer writes)

#: The model-argument table, in the order the arguments are written.
MODEL_FLAGS = (
    ModelFlag(("n_layers",), _ALWAYS, lambda s, r: ["--num-layers", str(s.n_layers)],
              lambda s, r: ["--num-layers", str(s.n_layers)], "transformer layers"),
    ModelFlag(("hidden",), _ALWAYS, lambda s, r: ["--hidden-size", str(s.hidden)],
              lambda s, r: ["--hidden-size", str(s.hidden)], "model width"),
    ModelFlag(("heads",), _ALWAYS, lambda s, r: ["--num-attention-heads", str(s.heads)],
              lambda s, r: ["--num-attention-heads", str(s.heads)], "attention heads"),
    ModelFlag(("kv_heads",), lambda s: s.kv_heads == s.heads,
              lambda s, r: [] if s.kv_heads == s.heads else
              ["--group-query-attention", "--num-query-groups", str(s.kv_heads)],
              lambda s, r: [] if s.kv_heads == s.heads else
              ["--num-key-value-heads", str(s.kv_heads)], "key/value heads"),
    ModelFlag(("head_dim",), lambda s: _head_dim(s) == s.hidden // s.heads,
              lambda s, r: [] if _head_dim(s) == s.hidden // s.heads or s.kv_lora_rank else
              ["--kv-channels", str(_head_dim(s))],
              lambda s, r: [] if _head_dim(s) == s.hidden // s.heads else
              ["--kv-channels", str(_head_dim(s))], "head width"),
    ModelFlag(("ffn_hidden",), _ALWAYS, lambda s, r: ["--ffn-hidden-size", str(s.ffn_hidden)],
              lambda s, r: ["--ffn-hidden-size", str(s.ffn_hidden)], "MLP width"),
    ModelFlag(("seq_len",), _ALWAYS, lambda s, r: ["--seq-length", str(s.seq_len)],
              lambda s, r: ["--seq-length", str(s.seq_len)], "sequence length"),
    ModelFlag(("max_positions",), _ALWAYS,
              lambda s, r: ["--max-position-embeddings", str(_positions(s))],
              lambda s, r: ["--max-position-embeddings", str(_positions(s))],
              "position-table rows"),
    ModelFlag(("activation",), lambda s: s.activation == "gelu",
              lambda s, r: _ACTIVATION.get(s.activation),
              lambda s, r: _ACTIVATION.get(s.activation), "activation"),
    ModelFlag(("norm",), lambda s: s.norm == "layernorm",
              lambda s, r: [] if s.norm == "layernorm" else ["--normalization", "RMSNorm"],
              lambda s, r: [] if s.norm == "layernorm" else ["--normalization", "rmsnorm"],
              "normalisation"),
    ModelFlag(("position",), lambda s: s.position == "learned",
              lambda s, r: {"learned": [], "rotary": ["--position-embedding-type", "rope"],
                            "none": ["--position-embedding-type", "none"]}[s.position]
              + (["--rotary-base", _int_text(r)] if s.position == "rotary" and r else []),
              lambda s, r: {"learned": [],
                            "rotary": ["--use-rotary-position-embeddings",
                                       "--no-position-embedding"],
                            "none": ["--no-position-embedding"]}[s.position]
              + (["--rotary-position-embeddings-theta", _int_text(r)]
                 if s.position == "rotary" and r else []), "position embedding"),
    ModelFlag(("bias",), lambda s: s.bias, lambda s, r: [] if s.bias else
              ["--disable-bias-linear"],
              lambda s, r: [] if s.bias else ["--disable-bias-linear"], "linear biases"),
    # Megatron-Core's add_qkv_bias adds Q/K/V biases beside --disable-bias-linear (Qwen2);
    # without --disable-bias-linear every linear layer has them (qkv_bias == bias).
    ModelFlag(("qkv_bias",), lambda s: _qkv_bias(s) == s.bias,
              lambda s, r: [] if _qkv_bias(s) == s.bias else
              (["--add-qkv-bias"] if _qkv_bias(s) else None),
              lambda s, r: [] if _qkv_bias(s) == s.bias else None,
              "Q/K/V biases apart from the other linear layers'"),
    ModelFlag(("tied_embeddings",), lambda s: s.tied_embeddings,
              lambda s, r: [] if s.tied_embeddings else ["--untie-embeddings-and-output-weights"],
              lambda s, r: [] if s.tied_embeddings else
              ["--untie-embeddings-and-output-weights"], "untied output layer"),
    ModelFlag(("embed_proj",), lambda s: not s.embed_proj, None, None,
              "a projected token embedding"),
    ModelFlag(("final_norm",), lambda s: s.final_norm, None, None,
              "a model without the final norm"),
    ModelFlag(("causal",), _ALWAYS, lambda s, r: [], lambda s, r: [],
              "decoder or encoder (the script: pretrain_gpt.py or pretrain_bert.py)"),
    ModelFlag(("n_experts", "experts_per_token"), lambda s: not s.n_experts,
              lambda s, r: [] if not s.n_experts else
              ["--num-experts", str(s.n_experts), "--moe-router-topk",
               str(s.experts_per_token)], None, "a mixture of experts"),
    ModelFlag(("expert_ffn_hidden",), lambda s: not s.n_experts,
              lambda s, r: [] if not s.n_experts else
              ["--moe-ffn-hidden-size", str(s.expert_ffn_hidden or s.ffn_hidden)], None,
              "expert width"),
    ModelFlag(("n_shared_experts", "shared_ffn_hidden"), lambda s: not s.n_shared_experts,
              lambda s, r: [] if not s.n_shared_experts else
              ["--moe-shared-expert-intermediate-size", str(_shared_width(s))], None,
              "shared experts"),
    ModelFlag(("shared_expert_gate",), lambda s: not s.shared_expert_gate,
              lambda s, r: ["--moe-shared-expert-gate"] if s.shared_expert_gate else [], None,
              "the shared experts' gate"),
    ModelFlag(("first_dense_layers", "moe_every"),
              lambda s: s.first_dense_layers == 0 and s.moe_every == 1,
              lambda s, r: _moe_layer_freq(s) if s.n_experts else [], None,
              "dense layers among the MoE layers"),
    # Issue 27's fields (read with getattr: a ModelSpec without them is at their neutral
    # value). Per-head Q/K RMSNorm is Megatron-Core's qk_layernorm (the model's norm type on
    # each query and key head); DeepSeek-V3's multi-token prediction and group-limited
    # routing are --mtp-num-layers and --moe-router-num-groups / --moe-router-group-topk.
    # A per-layer pattern of dense and MoE layers is the --moe-layer-freq row's; other
    # mixers (sliding, chunked, Mamba, none) and the fields without a row are refused.
    ModelFlag(("qk_norm",), lambda s: not getattr(s, "qk_norm", False),
              lambda s, r: ["--qk-layernorm"] if getattr(s, "qk_norm", False) else [], None,
              "per-head query/key norms"),
    ModelFlag(("mtp_layers",), lambda s: not getattr(s, "mtp_layers", 0),
              lambda s, r: ["--mtp-num-layers", str(s.mtp_layers)]
              if getattr(s, "mtp_layers", 0) else [], None, "multi-token prediction"),
    ModelFlag(("n_expert_groups", "topk_groups"),
              lambda s: (getattr(s, "n_expert_groups", 1), getattr(s, "topk_groups", 1)) == (1, 1),
              lambda s, r: [] if getattr(s, "n_expert_groups", 1) == 1 else
              ["--moe-router-num-groups", str(s.n_expert_groups), "--moe-router-group-topk",
               str(s.topk_groups)], None, "group-limited routing"),
    ModelFlag(("layer_ffns",),
              lambda s: getattr(s, "layer_ffns", None) is None,
              lambda s, r: [] if set(getattr(s, "layer_ffns", None) or ()) <= {"dense", "moe"}
              or hybrid_pattern(s) else None, None, "a per-layer pattern of feed-forward kinds"),
    ModelFlag(("layer_mixers", "sliding_window"),
              lambda s: set(getattr(s, "layer_mixers", None) or ("attention",)) == {"attention"},
              lambda s, r: _mixer_arguments(s), None,
              "token mixers other than full attention"),
    # Mamba-2 sizes (Megatron-Core's hybrid model: --mamba-state-dim, --mamba-head-dim,
    # --mamba-num-groups, --mamba-num-heads; its MambaMixer's d_conv 4 and chunk_size 128
    # have no flag, so another value is refused)
    ModelFlag(("mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_conv",
               "mamba_chunk"), lambda s: not getattr(s, "mamba_heads", 0),
              lambda s, r: [] if not getattr(s, "mamba_heads", 0) else
              None if (s.mamba_conv, s.mamba_chunk) != (4, 128) else
              ["--mamba-state-dim", str(s.mamba_state), "--mamba-head-dim",
               str(s.mamba_head_dim), "--mamba-num-groups", str(s.mamba_groups),
               "--mamba-num-heads", str(s.mamba_heads)], None, "Mamba-2 mixers"),
    # GPT-OSS's learned attention sinks: Megatron-Core's softmax_type "learnable"
    ModelFlag(("attention_sinks",), lambda s: not getattr(s, "attention_sinks", False),
              lambda s, r: ["--softmax-type", "learnable"]
              if getattr(s, "attention_sinks", False) else [], None, "attention sinks"),
    # A router bias: DeepSeek-V3's aux-loss-free expert bias (sigmoid scores, group-limited
    # routing) is --moe-router-enable-expert-bias with --moe-router-score-function sigmoid;
    # GPT-OSS's router carries a bias with its linear layers' (no --disable-bias-linear).
    ModelFlag(("router_bias",), lambda s: not getattr(s, "router_bias", False),
              lambda s, r: ["--moe-router-enable-expert-bias", "--moe-router-score-function",
                            "sigmoid"] if getattr(s, "router_bias", False) and not s.bias
              else [], None, "a router bias"),
    # Multi-head latent attention (arguments.py: --kv-lora-rank, --q-lora-rank (None: the
    # queries are not compressed), --qk-head-dim (the part without position),
    # --qk-pos-emb-head-dim (the rotary part), --v-head-dim; TransformerConfig's
    # multi_latent_attention).
    ModelFlag(("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"),
              lambda s: not s.kv_lora_rank, lambda s, r: [] if not s.kv_lora_rank else
              ["--multi-latent-attention", "--kv-lora-rank", str(s.kv_lora_rank)]
              + (["--q-lora-rank", str(s.q_lora_rank)] if s.q_lora_rank else [])
              + ["--qk-head-dim", str(_head_dim(s)), "--qk-pos-emb-head-dim",
                 str(s.qk_rope_head_dim), "--v-head-dim", str(s.v_head_dim or _head_dim(s))],
              None, "multi-head latent attention"),
)

#: ModelSpec fields no trainer argument describes (the name; the vocabulary comes with
#: the tokenizer the user adds).
NOT_ARGUMENTS = ("name", "vocab")

_TRAINER_TITLE = {"megatron": "Megatron-LM", "deepspeed": "Megatron-DeepSpeed"}


_EMPTY = (None, 0, False, ())


def _neutral(value, default) -> bool:
    """Whether a field no row names is at its neutral value: its default, or "none" (None,
    0, False, an empty tuple) where the default is "none" too (a Mamba size stored as 0
    on a model without Mamba layers, whose default is None)."""
    if value == default:
        return True
    return any(value is e or (type(value) is type(e) and value == e) for e in _EMPTY) and \
        any(default is e or (type(default) is type(e) and default == e) for e in _EMPTY)


def _short(value) -> str:
    """A field's value for a sentence: a long per-layer tuple as its distinct values."""
    if isinstance(value, tuple) and len(value) > 6:
        return f"{len(value)} layers of {', '.join(dict.fromkeys(map(str, value)))}"
    return repr(value)


def model_refusal(trainer: str, spec):
    """The sentence saying why ``trainer`` ("megatron" or "deepspeed") cannot be told the
    model ``spec`` (a row it cannot express at a non-neutral value, or a ModelSpec field
    at a non-default value that no row names), or None."""
    title = _TRAINER_TITLE[trainer]
    named = set(NOT_ARGUMENTS)
    for row in MODEL_FLAGS:
        named.update(row.fields)
        write = getattr(row, trainer)
        if row.neutral(spec):
            continue
        if write is None or write(spec, None) is None:
            return (f"the {title} arguments written here cannot express {row.title} "
                    f"({', '.join(f'{f}={_short(getattr(spec, f, None))}' for f in row.fields)}) of "
                    f"{spec.name}" + ("; emit megatron" if trainer == "deepspeed"
                                      and row.megatron is not None else ""))
    for f in dataclasses.fields(spec):
        if f.name in named:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        if not _neutral(getattr(spec, f.name), default):
            return (f"phaze writes no {title} argument for the ModelSpec field {f.name} "
                    f"(= {getattr(spec, f.name)!r}) of {spec.name}: the emitted model would "
                    f"not be the priced one")
    return None


def model_arguments(trainer: str, spec, rotary=None) -> list:
    """The model arguments of ``spec`` for ``trainer`` ("megatron" or "deepspeed"), in
    table order (call :func:`model_refusal` first); ``rotary``: the rotary base given."""
    base = rotary_base(spec, rotary)
    out = []
    for row in MODEL_FLAGS:
        write = getattr(row, trainer)
        if write is not None:
            out += write(spec, base) or []
    return out
