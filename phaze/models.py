"""The model zoo: what is trained (docs/design.md §2.1).

A :class:`ModelSpec` describes a decoder or encoder transformer by its shape
(layers, widths, heads, vocabulary, sequence length) and the few structural
choices that change its operators and parameter count (activation, norm,
position encoding, biases, an embedding projection, tied embeddings).

``get(name)`` returns a built-in model, ``names()`` lists them, and
``from_hf_config(path_or_dict)`` reads a Hugging Face ``config.json`` (GPT-2,
Llama, Mistral, OPT, BERT) without importing ``transformers``.

Parameter count (``ModelSpec.n_params``), every weight and bias once:

- embedding: ``vocab × e`` token table (``e = embed_proj`` or ``hidden``),
  ``max_positions × hidden`` learned positions, and with an embedding
  projection ``e × hidden`` in and ``hidden × e`` out (no biases, as OPT);
- per block: two norms (``2·hidden`` each for LayerNorm with its bias,
  ``hidden`` for RMSNorm); Q, K, V projections ``hidden × heads·head_dim``,
  ``hidden × kv_heads·head_dim`` (×2), output ``heads·head_dim × hidden``;
  MLP ``hidden × ffn`` and ``ffn × hidden`` (SwiGLU: gate and up
  ``hidden × ffn`` each, down ``ffn × hidden``); with ``bias`` every linear
  layer has its bias;
- a final norm when ``final_norm`` (pre-LN models; OPT-350M is post-LN and has
  none; BERT's embedding LayerNorm has the same size and is counted here);
- the output projection ``e × vocab`` (no bias) unless the embeddings are tied.

Not modelled (documented differences from the published totals): BERT's
token-type embeddings (2·hidden), pooler and masked-LM transform
(≈ hidden² each), and output-layer biases — together < 1 % of BERT-large.
"""
from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass, replace

from . import _config
from ._validate import nonneg_int, one_of, positive_int

ACTIVATIONS = ("gelu", "relu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rotary", "none")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a transformer language model.

    Fields (docs/design.md §2.1): ``name``, ``n_layers``, ``hidden`` (model width),
    ``heads``, ``kv_heads`` (grouped-query attention: key/value heads, dividing
    ``heads``), ``ffn_hidden`` (MLP width), ``vocab`` (real, unpadded),
    ``seq_len`` (tokens per sample in training), ``activation``
    ('gelu' | 'relu' | 'swiglu'), ``norm`` ('layernorm' | 'rmsnorm'),
    ``position`` ('learned' | 'rotary' | 'none'), ``bias`` (linear layers carry
    biases), ``embed_proj`` (width of the token embedding when it is projected
    to ``hidden``, 0 if not), ``causal`` (decoder) and ``tied_embeddings``.

    Extra optional fields: ``head_dim`` (default ``hidden // heads``),
    ``max_positions`` (rows of the learned position table, default
    ``seq_len``) and ``final_norm`` (a norm before the output layer; default
    True).
    """

    name: str
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    activation: str = "gelu"
    norm: str = "layernorm"
    position: str = "learned"
    bias: bool = True
    embed_proj: int = 0
    causal: bool = True
    tied_embeddings: bool = True
    head_dim: int = None
    max_positions: int = None
    final_norm: bool = True

    def __post_init__(self):
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for f in ("n_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len"):
            set_(self, f, positive_int(f, getattr(self, f)))
        set_(self, "embed_proj", nonneg_int("embed_proj", self.embed_proj))
        set_(self, "activation", one_of("activation", self.activation, ACTIVATIONS))
        set_(self, "norm", one_of("norm", self.norm, NORMS))
        set_(self, "position", one_of("position", self.position, POSITIONS))
        for f in ("bias", "causal", "tied_embeddings", "final_norm"):
            v = getattr(self, f)
            if not isinstance(v, bool):
                raise ValueError(f"{f} must be True or False, got {v!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}), got {self.kv_heads}")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}) "
                                 f"unless head_dim is given")
            set_(self, "head_dim", self.hidden // self.heads)
        else:
            set_(self, "head_dim", positive_int("head_dim", self.head_dim))
        if self.max_positions is None:
            set_(self, "max_positions", self.seq_len if self.position == "learned" else 0)
        else:
            set_(self, "max_positions", nonneg_int("max_positions", self.max_positions))
        if self.position == "learned" and self.max_positions < self.seq_len:
            raise ValueError(f"max_positions ({self.max_positions}) must be >= seq_len "
                             f"({self.seq_len}) with learned positions")
        # Cached parameter count: an attribute, not a field (frozen dataclasses allow it).
        set_(self, "_n_params", _count_params(self))

    # -- derived ------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Trainable parameters: every weight and bias once, a tied embedding once."""
        return self._n_params

    @property
    def embed_width(self) -> int:
        """Width of the token embedding table (``embed_proj`` if set, else ``hidden``)."""
        return self.embed_proj or self.hidden

    def valid_tensor_parallel(self, t: int) -> bool:
        """True when tensor-parallel width ``t`` divides both ``heads`` and ``kv_heads``."""
        return (isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 1
                and self.heads % t == 0 and self.kv_heads % t == 0)

    def padded_vocab(self, t: int = 1) -> int:
        """Vocabulary padded to a multiple of VOCAB_PAD_MULTIPLE·t, as Megatron-LM does."""
        t = positive_int("tensor_parallel", t)
        m = _config.VOCAB_PAD_MULTIPLE * t
        return -(-self.vocab // m) * m

    def with_(self, **changes) -> "ModelSpec":
        """A copy with some fields changed (validated again).

        Derived defaults follow: changing ``hidden`` or ``heads`` recomputes ``head_dim``;
        a longer ``seq_len`` grows a learned position table to fit; changing ``position``
        resets ``max_positions``.
        """
        if "hidden" in changes or "heads" in changes:
            changes.setdefault("head_dim", None)
        if "position" in changes:
            changes.setdefault("max_positions", None)
        elif "seq_len" in changes and "max_positions" not in changes and self.position == "learned":
            seq = changes["seq_len"]
            if isinstance(seq, numbers.Integral) and seq > self.max_positions:
                changes["max_positions"] = seq
        return replace(self, **changes)


def _norm_params(m: ModelSpec) -> int:
    return 2 * m.hidden if m.norm == "layernorm" else m.hidden


def block_params(m: ModelSpec) -> int:
    """Parameters of one transformer block."""
    h, hd, f = m.hidden, m.head_dim, m.ffn_hidden
    q, kv = m.heads * hd, m.kv_heads * hd
    attn = h * q + 2 * h * kv + q * h
    mlp = 3 * h * f if m.activation == "swiglu" else 2 * h * f
    n = attn + mlp + 2 * _norm_params(m)
    if m.bias:
        n += q + 2 * kv + h                                      # QKV and output biases
        n += (2 * f if m.activation == "swiglu" else f) + h      # MLP biases
    return n


def embedding_params(m: ModelSpec) -> int:
    """Parameters of the input side: token table, positions, input projection."""
    e = m.embed_width
    n = m.vocab * e
    if m.position == "learned":
        n += m.max_positions * m.hidden
    if m.embed_proj:
        n += e * m.hidden
    return n


def head_params(m: ModelSpec, *, count_tied: bool = False) -> int:
    """Parameters of the output side: final norm, output projection, logits weights.

    With tied embeddings the logits weights are the token table, counted once in
    :func:`embedding_params`; ``count_tied=True`` counts the head's copy as well.
    """
    n = _norm_params(m) if m.final_norm else 0
    if m.embed_proj:
        n += m.hidden * m.embed_width
    if not m.tied_embeddings or count_tied:
        n += m.vocab * m.embed_width
    return n


def _count_params(m: ModelSpec) -> int:
    return embedding_params(m) + m.n_layers * block_params(m) + head_params(m)


# ---------------------------------------------------------------------------
# the zoo
# ---------------------------------------------------------------------------

def _megatron(name, layers, hidden, heads, *, seq_len=2048, causal=True, vocab=51200):
    # Megatron-LM GPT/BERT: FFN 4h, GELU, LayerNorm (pre-LN with a final norm),
    # learned positions, biases, tied input/output embeddings.
    return ModelSpec(name=name, n_layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                     ffn_hidden=4 * hidden, vocab=vocab, seq_len=seq_len, activation="gelu",
                     norm="layernorm", position="learned", bias=True, causal=causal,
                     tied_embeddings=True)


def _build_zoo() -> dict:
    zoo = [
        # bert-large-uncased: 24 × 1024, 16 heads, FFN 4096, vocab 30522, 512 positions.
        ModelSpec(name="bert-large", n_layers=24, hidden=1024, heads=16, kv_heads=16,
                  ffn_hidden=4096, vocab=30522, seq_len=512, activation="gelu", norm="layernorm",
                  position="learned", bias=True, causal=False, tied_embeddings=True),
        # gpt2-xl: 48 × 1600, 25 heads, n_inner 4·1600, vocab 50257, 1024 positions.
        ModelSpec(name="gpt2-xl", n_layers=48, hidden=1600, heads=25, kv_heads=25,
                  ffn_hidden=6400, vocab=50257, seq_len=1024, activation="gelu", norm="layernorm",
                  position="learned", bias=True, causal=True, tied_embeddings=True),
        # facebook/opt-350m: 24 × 1024, 16 heads, FFN 4096, ReLU, vocab 50272, 512-wide token
        # embedding projected in and out, post-LN (no final norm), 2048 positions + OPT's offset 2.
        ModelSpec(name="opt-350m", n_layers=24, hidden=1024, heads=16, kv_heads=16,
                  ffn_hidden=4096, vocab=50272, seq_len=2048, activation="relu", norm="layernorm",
                  position="learned", bias=True, embed_proj=512, causal=True,
                  tied_embeddings=True, max_positions=2050, final_norm=False),
        # meta-llama/Llama-2-7b-hf: 32 × 4096, 32 heads, SwiGLU 11008, RMSNorm, rotary, no biases,
        # untied output layer, vocab 32000.
        ModelSpec(name="llama2-7b", n_layers=32, hidden=4096, heads=32, kv_heads=32,
                  ffn_hidden=11008, vocab=32000, seq_len=4096, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, causal=True, tied_embeddings=False),
        _megatron("megatron-bert", 24, 1024, 16, seq_len=512, causal=False),
        _megatron("megatron-gpt2-54", 54, 1920, 20, seq_len=1024),
        _megatron("megatron-gpt2-72", 72, 3072, 24, seq_len=1024),
        _megatron("gpt3-175b", 96, 12288, 96),
        _megatron("megatron-1.7b", 24, 2304, 24),
        _megatron("megatron-3.6b", 30, 3072, 32),
        _megatron("megatron-7.5b", 36, 4096, 32),
        _megatron("megatron-18.4b", 40, 6144, 48),
        _megatron("megatron-39.1b", 48, 8192, 64),
        _megatron("megatron-76.1b", 60, 10240, 80),
        _megatron("megatron-145.6b", 80, 12288, 96),
        _megatron("megatron-310.1b", 96, 16384, 128),
        _megatron("megatron-529.6b", 105, 20480, 128),
        _megatron("megatron-1t", 128, 25600, 160),
    ]
    return {m.name: m for m in zoo}


_ZOO = _build_zoo()


def names() -> list:
    """Names of the built-in models, in zoo order."""
    return list(_ZOO)


def get(name) -> ModelSpec:
    """The built-in model called ``name`` (a ModelSpec passes through).

    Raises ``KeyError`` listing the known names when ``name`` is unknown.
    """
    if isinstance(name, ModelSpec):
        return name
    try:
        return _ZOO[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(_ZOO)}") from None


# ---------------------------------------------------------------------------
# Hugging Face config.json
# ---------------------------------------------------------------------------

_GELU_NAMES = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python",
               "gelu_accurate", "quick_gelu")

# Library defaults (transformers' configuration_*.py) for the keys phaze reads.
_HF_DEFAULTS = {
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                 n_inner=None, activation_function="gelu_new", tie_word_embeddings=True),
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                  hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, head_dim=None),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    hidden_act="silu", max_position_embeddings=4096 * 32,
                    tie_word_embeddings=False, head_dim=None),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048, do_layer_norm_before=True, word_embed_proj_dim=None,
                num_attention_heads=12, activation_function="relu", enable_bias=True,
                layer_norm_elementwise_affine=True, tie_word_embeddings=True),
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
                 position_embedding_type="absolute", tie_word_embeddings=True, is_decoder=False),
}
# GPT-2's attribute_map: the generic names are aliases of its own.
_GPT2_ALIASES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer",
                 "num_attention_heads": "n_head", "max_position_embeddings": "n_positions",
                 "intermediate_size": "n_inner"}


def _hf_int(cfg, key, *, allow_none=False):
    v = cfg.get(key)
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        if isinstance(v, float) and v.is_integer() and v >= 1:
            return int(v)
        raise ValueError(f"config key {key!r} must be a positive integer, got {v!r}")
    return int(v)


def _hf_bool(cfg, key):
    v = cfg.get(key)
    if not isinstance(v, bool):
        raise ValueError(f"config key {key!r} must be true or false, got {v!r}")
    return v


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
    if not isinstance(mt, str) or mt.lower() not in _HF_DEFAULTS:
        raise ValueError(f"config key 'model_type' must be one of {', '.join(_HF_DEFAULTS)}; "
                         f"got {mt!r}")
    return mt.lower()


def _gelu_or_relu(cfg, key) -> str:
    """'gelu' or 'relu' for the activation named by ``cfg[key]``, else ValueError naming the key."""
    act = cfg[key]
    if act in _GELU_NAMES:
        return "gelu"
    if act == "relu":
        return "relu"
    raise ValueError(f"config key '{key}' must be a GELU variant or relu, got {act!r}")


def _load_hf(path_or_dict) -> dict:
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict)
    if not isinstance(path_or_dict, (str, os.PathLike)):
        raise ValueError(f"path_or_dict must be a dict or the path of a config.json, "
                         f"got {type(path_or_dict).__name__}")
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, encoding="utf-8") as fh:   # FileNotFoundError names the path
        try:
            cfg = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def from_hf_config(path_or_dict, *, name: str = None, seq_len: int = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (path, directory or dict).

    Understands GPT-2, Llama, Mistral, OPT and BERT configs (``model_type``, or
    guessed from GPT-2/OPT/Llama/BERT-specific keys). Absent keys take the
    library's documented defaults; unrelated keys are ignored; a present key
    whose value phaze cannot model raises ``ValueError`` naming the key.

    ``seq_len`` (tokens per training sample) defaults to the config's maximum
    positions; ``name`` defaults to ``_name_or_path`` or the model type.
    """
    raw = _load_hf(path_or_dict)
    mt = _hf_model_type(raw)
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
    elif mt in ("llama", "mistral"):
        act = cfg["hidden_act"]
        if act not in ("silu", "swish"):
            raise ValueError(f"config key 'hidden_act' must be silu (SwiGLU) for {mt}, got {act!r}")
        bias = False
        if mt == "llama":
            bias = _hf_bool(cfg, "attention_bias")
            if _hf_bool(cfg, "mlp_bias") != bias:
                raise ValueError("config key 'mlp_bias' must equal attention_bias: phaze models "
                                 "biases on all linear layers or on none")
        heads = _hf_int(cfg, "num_attention_heads")
        kv = _hf_int(cfg, "num_key_value_heads", allow_none=True) or heads
        positions = _hf_int(cfg, "max_position_embeddings")
        spec = dict(n_layers=_hf_int(cfg, "num_hidden_layers"), hidden=_hf_int(cfg, "hidden_size"),
                    heads=heads, kv_heads=kv, ffn_hidden=_hf_int(cfg, "intermediate_size"),
                    vocab=_hf_int(cfg, "vocab_size"), activation="swiglu", norm="rmsnorm",
                    position="rotary", bias=bias, causal=True,
                    tied_embeddings=_hf_bool(cfg, "tie_word_embeddings"),
                    head_dim=_hf_int(cfg, "head_dim", allow_none=True))
        if "rms_norm_eps" in raw:   # read to reject nonsense; the value does not change the cost
            eps = raw["rms_norm_eps"]
            if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps > 0:
                raise ValueError(f"config key 'rms_norm_eps' must be a positive number, got {eps!r}")
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
                             f"got {act!r}")
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
                             f"got {cfg['position_embedding_type']!r}")
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
        seq_len = positive_int("seq_len", seq_len)
    spec.setdefault("max_positions", None)
    if spec["max_positions"] is not None and spec["position"] != "learned":
        spec["max_positions"] = None
    try:
        return ModelSpec(name=name, seq_len=seq_len, **spec)
    except ValueError as exc:
        raise ValueError(f"config does not describe a model phaze can build: {exc}") from None


def gemm_flops_per_sample(m: ModelSpec) -> float:
    """Forward+backward GEMM FLOPs of one sample in Megatron's closed form, in FLOPs.

    72·s·L·h²·(1 + s/(6h) + V/(12·h·L)) with the padded vocabulary (t = 1): the
    count ``phaze.graph`` reproduces exactly for GPT-style models.
    """
    s, L, h, V = m.seq_len, m.n_layers, m.hidden, m.padded_vocab(1)
    return 72.0 * s * L * h * h * (1 + s / (6.0 * h) + V / (12.0 * h * L))


__all__ = ["ModelSpec", "ACTIVATIONS", "NORMS", "POSITIONS", "get", "names", "from_hf_config",
           "block_params", "embedding_params", "head_params", "gemm_flops_per_sample"]
