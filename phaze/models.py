"""The model zoo: what is trained (docs/design.md §2.1).

A :class:`ModelSpec` describes a decoder or encoder transformer by its shape
(layers, widths, heads, vocabulary, sequence length) and the few structural
choices that change its operators and parameter count (activation, norm,
position encoding, biases, an embedding projection, tied embeddings), plus the
mixture-of-experts shape (routed and shared experts, top-k, expert widths, the
dense layers before the first MoE layer and an MoE-every-n pattern) and
DeepSeek's multi-head latent attention (MLA).

``get(name)`` returns a built-in model (the zoo is ``phaze/_zoo.py``), ``names()`` lists
them, and ``from_hf_config(path_or_dict)`` reads a Hugging Face ``config.json`` (GPT-2,
Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, DeepSeek-V2, OPT, BERT; DeepSeek-V3, Kimi K2,
Qwen3, Qwen3-MoE, GPT-OSS, Llama 4, Nemotron-H, Gemma 2 and Gemma 3) without importing
``transformers`` (the reader is ``phaze/_hf_config.py``).

Parameter count (``ModelSpec.n_params``), every weight and bias once:

- embedding: ``vocab × e`` token table (``e = embed_proj`` or ``hidden``),
  ``max_positions × hidden`` learned positions, and with an embedding
  projection ``e × hidden`` in and ``hidden × e`` out (no biases, as OPT);
- per block: two norms (``2·hidden`` each for LayerNorm with its bias,
  ``hidden`` for RMSNorm); Q, K, V projections ``hidden × heads·head_dim``,
  ``hidden × kv_heads·head_dim`` (×2), output ``heads·head_dim × hidden``;
  MLP ``hidden × ffn`` and ``ffn × hidden`` (SwiGLU: gate and up
  ``hidden × ffn`` each, down ``ffn × hidden``); with ``bias`` every linear
  layer has its bias, with ``qkv_bias`` (Qwen2) only Q, K and V have one;
- an MoE block replaces the MLP by ``n_experts`` routed expert MLPs of width
  ``expert_ffn_hidden``, ``n_shared_experts`` shared expert MLPs of width
  ``shared_ffn_hidden``, the router ``hidden × n_experts`` (no bias) and, with
  ``shared_expert_gate`` (Qwen2-MoE), a ``hidden × 1`` gate of the shared expert; with
  ``moe_latent_size`` L (LatentMoE) the routed experts' matrices are ``L × width`` and the
  layer has ``fc1_latent_proj`` ``hidden × L`` and ``fc2_latent_proj`` ``L × hidden``
  (with ``bias``, their biases);
- an MLA block (``kv_lora_rank > 0``, DeepSeek-V2) replaces Q, K, V by
  ``hidden × q_lora_rank`` + norm + ``q_lora_rank × heads·(head_dim + qk_rope_head_dim)``
  (or one ``hidden × heads·(head_dim + qk_rope_head_dim)`` without ``q_lora_rank``),
  ``hidden × (kv_lora_rank + qk_rope_head_dim)`` + norm +
  ``kv_lora_rank × heads·(head_dim + v_head_dim)``, and the output by
  ``heads·v_head_dim × hidden``;
- a final norm when ``final_norm`` (pre-LN models; OPT-350M is post-LN and has
  none; BERT's embedding LayerNorm has the same size and is counted here);
- the output projection ``e × vocab`` (no bias) unless the embeddings are tied.

``ModelSpec.n_active_params`` is what one token runs through: ``n_params`` less
the routed experts it is not sent to (``n_experts − experts_per_token`` per MoE
layer). The whole token table counts, as in Mistral's "12.9B active" for
Mixtral-8x7B; DeepSeek's "2.4B activated" for V2-Lite leaves the input table out
(``n_active_params − vocab·hidden``).

Layers of other kinds (issue 27; ``phaze/_params.py`` counts them): each layer has a
token mixer and a channel mixer (``ModelSpec.layer_kinds``) and one norm per sublayer
present (two with ``sandwich_norm``). An attention-type mixer ('attention', 'sliding',
'chunked') is the attention above plus ``2·head_dim`` q/k-norm weights with ``qk_norm``
and ``heads`` sink logits with ``attention_sinks``; a Mamba-2 mixer is
``hidden × (2·d_inner + 2·groups·state + heads)`` in, a depthwise convolution of
``conv_dim × conv`` weights and ``conv_dim`` biases (``conv_dim = d_inner +
2·groups·state``), ``dt_bias``, ``A_log`` and ``D`` (``heads`` each), a gated RMSNorm
(``d_inner``) and ``d_inner × hidden`` out; 'none' is empty. A router with
``router_bias`` has ``n_experts`` more. A GeGLU MLP has SwiGLU's three matrices.
``ModelSpec.n_mtp_params`` counts DeepSeek-V3's multi-token-prediction modules apart
from ``n_params`` (the 671 B its publisher states leaves them out): per module two norms
and ``2·hidden × hidden`` in, one layer like the model's last, a final norm; the
embedding and the output head are shared (the checkpoint's copies of them are not
counted again).

Not modelled (documented differences from the published totals): BERT's
token-type embeddings (2·hidden), pooler and masked-LM transform
(≈ hidden² each), and output-layer biases — together < 1 % of BERT-large.
Nemotron's rotary embedding on half of each head (rotary_percent 0.5) is priced as rotary
positions on the whole head (no weight either way).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

from . import _config
from ._hf_config import read_hf_config
from ._zoo import build_zoo
from ._params import (ATTENTION_MIXERS, attention_params, block_params, count_params,
                      embedding_params, expert_params, ffn_params, head_params, layer_params,
                      mamba_params, mixer_params, mlp_params, moe_params, mtp_module_params)
from ._validate import nonneg_int, one_of, positive_int, show

ACTIVATIONS = ("gelu", "relu", "swiglu", "squared_relu", "geglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rotary", "none")
#: Token mixers of a layer (``ModelSpec.layer_mixers``).
MIXERS = ("attention", "sliding", "chunked", "mamba", "none")
#: Channel mixers of a layer (``ModelSpec.layer_ffns``).
FFNS = ("dense", "moe", "none")


#: Largest value of each size of a ModelSpec. Far beyond any trained model, they keep
#: every derived count (operator elements and bytes, int64 in ``phaze.graph``) from
#: wrapping around and every per-layer array within memory: a config with 10**12
#: layers is an error naming n_layers, not a MemoryError.
MODEL_LIMITS = {"n_layers": 100_000, "hidden": 2 ** 20, "heads": 2 ** 14, "kv_heads": 2 ** 14,
                "ffn_hidden": 2 ** 22, "vocab": 2 ** 24, "seq_len": 2 ** 22,
                "n_experts": 2 ** 16}

#: Mixture-of-experts fields and their dense (neutral) values: a dense model holds exactly these.
_MOE_NEUTRAL = {"experts_per_token": 0, "expert_ffn_hidden": None, "n_shared_experts": 0,
                "shared_ffn_hidden": None, "shared_expert_gate": False, "first_dense_layers": 0,
                "moe_every": 1, "moe_latent_size": 0}
#: Multi-head latent attention fields and their values without MLA.
_MLA_NEUTRAL = {"q_lora_rank": 0, "qk_rope_head_dim": 0, "v_head_dim": None}
#: Mamba-2 fields: the value stored without a Mamba layer (0) and the default with one
#: (None: required).
_MAMBA_FIELDS = {"mamba_heads": None, "mamba_head_dim": None, "mamba_state": None,
                 "mamba_groups": 1, "mamba_conv": 4, "mamba_chunk": 256}

#: Structures ``phaze.graph`` does not price yet: ``ModelSpec.op_graph_refusal`` refuses a
#: model that has one, in one sentence, never building a silently different graph. The
#: graph side removes each name here as it gains the kind (docs/design.md §2.1).
GRAPH_UNPRICED = ()


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a transformer language model.

    Fields (docs/design.md §2.1): ``name``, ``n_layers``, ``hidden`` (model width),
    ``heads``, ``kv_heads`` (grouped-query attention: key/value heads, dividing
    ``heads``), ``ffn_hidden`` (MLP width of the dense layers), ``vocab`` (real,
    unpadded), ``seq_len`` (tokens per sample in training), ``activation``
    ('gelu' | 'relu' | 'swiglu' | 'squared_relu' | 'geglu'), ``norm`` ('layernorm' | 'rmsnorm'),
    ``position`` ('learned' | 'rotary' | 'none'), ``bias`` (linear layers carry
    biases), ``embed_proj`` (width of the token embedding when it is projected
    to ``hidden``, 0 if not), ``causal`` (decoder) and ``tied_embeddings``.

    Extra optional fields: ``head_dim`` (default ``hidden // heads``),
    ``max_positions`` (rows of the learned position table, default
    ``seq_len``), ``final_norm`` (a norm before the output layer; default
    True) and ``qkv_bias`` (Q, K and V carry biases; default ``bias`` — Qwen2
    has them without any other bias).

    Mixture of experts (all at their dense defaults unless ``n_experts > 0``):

    - ``n_experts``: routed experts of each MoE layer (0: a dense model);
    - ``experts_per_token``: experts each token is routed to (top-k, 1..n_experts);
    - ``expert_ffn_hidden``: MLP width of one routed expert (default ``ffn_hidden``);
    - ``n_shared_experts``: experts every token also runs through (DeepSeek, Qwen2-MoE);
    - ``shared_ffn_hidden``: MLP width of one shared expert (default ``expert_ffn_hidden``);
    - ``shared_expert_gate``: a ``hidden × 1`` sigmoid gate on the shared experts' output
      (Qwen2-MoE);
    - ``first_dense_layers`` and ``moe_every``: layer ``i`` (from 0) is an MoE layer when
      ``i >= first_dense_layers`` and ``i % moe_every == 0`` (DeepSeek's
      ``first_k_dense_replace`` and ``moe_layer_freq``, Megatron-Core's ``moe_layer_freq``);
      the other layers have the dense MLP of width ``ffn_hidden``;
    - ``moe_latent_size``: LatentMoE (Nemotron 3 Super / Ultra; 0: none): each MoE layer
      projects its input down to this width (``fc1_latent_proj``, ``hidden × latent``)
      before dispatch, its routed experts read and write the latent (``latent ×
      expert_ffn_hidden`` matrices) and ``fc2_latent_proj`` (``latent × hidden``) projects
      the combined output back; the router and the shared experts stay at ``hidden``.

    Every MoE layer has a router (``hidden × n_experts``, no bias). Experts use the
    model's ``activation`` and ``bias``.

    Multi-head latent attention (DeepSeek-V2; all 0/None unless ``kv_lora_rank > 0``):
    ``kv_lora_rank`` (width of the compressed key/value latent), ``q_lora_rank`` (of the
    compressed query; 0: queries projected directly), ``qk_rope_head_dim`` (the rotary part
    of each query/key head, beside the ``head_dim`` part without position) and
    ``v_head_dim`` (default ``head_dim``). MLA has one key/value head per query head
    (``kv_heads == heads``) and no attention biases.

    Per-layer patterns and the structures of 2025-26 (issue 27; all neutral by default):

    - ``layer_mixers``: each layer's token mixer, one of ``MIXERS``: 'attention' (full,
      causal in a decoder), 'sliding' (a window of ``sliding_window`` keys, the query's
      own included: key j visible to query i when i − W < j ≤ i, as HF's
      ``sliding_window``), 'chunked' (Llama 4: causal inside aligned chunks of
      ``attention_chunk`` tokens), 'mamba' (a Mamba-2 mixer) or 'none' (Nemotron-H's
      MLP-only layers). None: every layer 'attention'; a list is stored as a tuple.
    - ``layer_ffns``: each layer's channel mixer, one of ``FFNS`` ('dense', 'moe',
      'none'); None: the ``first_dense_layers`` / ``moe_every`` rule. Given, it decides
      ``moe_layer_ids`` (those two fields stay at their defaults); 'moe' layers exactly
      when ``n_experts > 0``; no layer is 'none' in both.
    - ``attention_sinks`` (GPT-OSS: a learned sink logit per query head in every attention
      layer), ``qk_norm`` (an RMSNorm with weights over each query and key head, Qwen3 and
      Gemma 3; Llama 4's weightless L2 norm is ``qk_norm=False``), ``sandwich_norm``
      (Gemma 2/3: a norm after each sublayer as well as before).
    - ``router_bias``: every MoE router also has ``n_experts`` parameters (GPT-OSS's router
      bias; DeepSeek-V3's ``e_score_correction_bias``, which steers selection only);
      ``n_expert_groups`` / ``topk_groups``: DeepSeek-V3's group-limited routing (HF
      ``n_group`` / ``topk_group``, parameter-free).
    - Mamba-2 (all 0 without a 'mamba' layer): ``mamba_heads``, ``mamba_head_dim``
      (``mamba_inner = heads·head_dim``), ``mamba_state`` (HF ``ssm_state_size``),
      ``mamba_groups`` (HF ``n_groups``, default 1), ``mamba_conv`` (HF ``conv_kernel``,
      default 4) and ``mamba_chunk`` (HF ``chunk_size``, default 256).
    - ``mtp_layers``: DeepSeek-V3's multi-token-prediction depth (HF
      ``num_nextn_predict_layers``), counted in ``n_mtp_params``, not ``n_params``.
    - ``activation`` 'geglu' (Gemma): gated like SwiGLU with a tanh-GELU.
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
    qkv_bias: bool = None
    # -- mixture of experts --
    n_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden: int = None
    n_shared_experts: int = 0
    shared_ffn_hidden: int = None
    shared_expert_gate: bool = False
    first_dense_layers: int = 0
    moe_every: int = 1
    moe_latent_size: int = 0
    # -- multi-head latent attention --
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = None
    # -- per-layer patterns and the structures of 2025-26 (issue 27) --
    layer_mixers: tuple = None
    layer_ffns: tuple = None
    sliding_window: int = 0
    attention_chunk: int = 0
    attention_sinks: bool = False
    qk_norm: bool = False
    sandwich_norm: bool = False
    router_bias: bool = False
    n_expert_groups: int = 1
    topk_groups: int = 1
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state: int = 0
    mamba_groups: int = None
    mamba_conv: int = None
    mamba_chunk: int = None
    mtp_layers: int = 0

    def __post_init__(self):
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for f in ("n_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len"):
            set_(self, f, positive_int(f, getattr(self, f), MODEL_LIMITS[f]))
        set_(self, "embed_proj", nonneg_int("embed_proj", self.embed_proj, MODEL_LIMITS["hidden"]))
        set_(self, "activation", one_of("activation", self.activation, ACTIVATIONS))
        set_(self, "norm", one_of("norm", self.norm, NORMS))
        set_(self, "position", one_of("position", self.position, POSITIONS))
        if self.qkv_bias is None:
            set_(self, "qkv_bias", self.bias)
        for f in ("bias", "causal", "tied_embeddings", "final_norm", "qkv_bias",
                  "shared_expert_gate", "attention_sinks", "qk_norm", "sandwich_norm",
                  "router_bias"):
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
            set_(self, "head_dim", positive_int("head_dim", self.head_dim, MODEL_LIMITS["hidden"]))
        if self.max_positions is None:
            set_(self, "max_positions", self.seq_len if self.position == "learned" else 0)
        else:
            set_(self, "max_positions", nonneg_int("max_positions", self.max_positions,
                                                   MODEL_LIMITS["seq_len"]))
        if self.position == "learned" and self.max_positions < self.seq_len:
            raise ValueError(f"max_positions ({self.max_positions}) must be >= seq_len "
                             f"({self.seq_len}) with learned positions")
        self._check_patterns()
        self._check_moe()
        self._check_mla()
        self._check_windows()
        self._check_mamba()
        set_(self, "mtp_layers", nonneg_int("mtp_layers", self.mtp_layers,
                                            MODEL_LIMITS["n_layers"]))
        if self.mtp_layers and not self.causal:
            raise ValueError(f"mtp_layers ({self.mtp_layers}) needs a decoder (causal=True): "
                             f"multi-token prediction predicts the next tokens")
        # Cached parameter counts: attributes, not fields (frozen dataclasses allow it).
        total, active, mtp = count_params(self)
        set_(self, "_n_params", total)
        set_(self, "_n_active_params", active)
        set_(self, "_n_mtp_params", mtp)

    def _check_patterns(self):
        """layer_mixers and layer_ffns: None or one known name per layer (stored as a
        tuple; the default pattern stored as None, so that equal models compare equal)."""
        set_ = object.__setattr__
        for f, allowed in (("layer_mixers", MIXERS), ("layer_ffns", FFNS)):
            v = getattr(self, f)
            if v is None:
                continue
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
                raise ValueError(f"{f} must be None or a list of {self.n_layers} names from "
                                 f"{', '.join(allowed)}, got {show(v)}")
            if len(v) != self.n_layers:
                raise ValueError(f"{f} must name one kind per layer ({self.n_layers}), "
                                 f"got {len(v)}")
            for i, kind in enumerate(v):
                if kind not in allowed:
                    raise ValueError(f"{f}[{i}] must be one of {', '.join(allowed)}, "
                                     f"got {show(kind)}")
            set_(self, f, tuple(v))
        if self.layer_mixers is not None and all(k == "attention" for k in self.layer_mixers):
            set_(self, "layer_mixers", None)

    def _check_ffn_pattern(self):
        """layer_ffns against the experts (n_experts validated): 'moe' layers exactly when
        n_experts > 0, first_dense_layers and moe_every at their defaults."""
        if self.layer_ffns is None:
            return
        has_moe = "moe" in self.layer_ffns
        if has_moe and not self.n_experts:
            raise ValueError("layer_ffns names an 'moe' layer but n_experts is 0; give the "
                             "experts (n_experts > 0) or make the layer 'dense'")
        if self.n_experts and not has_moe:
            raise ValueError(f"layer_ffns has no 'moe' layer but n_experts is "
                             f"{self.n_experts}; use n_experts = 0 for a dense model")
        default = "moe" if self.n_experts else "dense"
        if all(k == default for k in self.layer_ffns):
            object.__setattr__(self, "layer_ffns", None)

    def _check_windows(self):
        """sliding_window and attention_chunk: > 0 exactly when some layer uses them;
        attention sinks and q/k norms need an attention layer."""
        set_ = object.__setattr__
        mixers = set(self.mixers)
        for f, kind in (("sliding_window", "sliding"), ("attention_chunk", "chunked")):
            v = nonneg_int(f, getattr(self, f), MODEL_LIMITS["seq_len"])
            set_(self, f, v)
            if kind in mixers and not v:
                raise ValueError(f"{f} must be a positive number of tokens when a layer's "
                                 f"mixer is '{kind}', got 0")
            if v and kind not in mixers:
                raise ValueError(f"{f} must be 0 when no layer's mixer is '{kind}', "
                                 f"got {show(v)}")
        if not mixers & set(ATTENTION_MIXERS):
            for f in ("attention_sinks", "qk_norm"):
                if getattr(self, f):
                    raise ValueError(f"{f} needs an attention layer (mixer attention, "
                                     f"sliding or chunked); layer_mixers has none")
        if self.mixers.count("none") and any(
                k == ("none", "none") for k in self.layer_kinds):
            i = self.layer_kinds.index(("none", "none"))
            raise ValueError(f"layer {i} has neither a token mixer nor a channel mixer "
                             f"(layer_mixers and layer_ffns both 'none')")

    def _check_mamba(self):
        """The six Mamba-2 sizes: required (> 0; groups, conv and chunk with defaults 1, 4
        and 256) when a layer's mixer is 'mamba', all 0 otherwise."""
        set_ = object.__setattr__
        if not self.has_mamba:
            for f in _MAMBA_FIELDS:
                v = getattr(self, f)
                if v is not None and v != 0:
                    raise ValueError(f"{f} must be 0 when no layer's mixer is 'mamba', "
                                     f"got {show(v)}")
                set_(self, f, 0)
            return
        for f, default in _MAMBA_FIELDS.items():
            v = getattr(self, f)
            if v is None and default is not None:
                v = default
            set_(self, f, positive_int(f, v, MODEL_LIMITS["hidden"]))
        if self.mamba_heads % self.mamba_groups:
            raise ValueError(f"mamba_groups must divide mamba_heads ({self.mamba_heads}), "
                             f"got {self.mamba_groups}")

    def _check_moe(self):
        set_ = object.__setattr__
        set_(self, "n_experts", nonneg_int("n_experts", self.n_experts, MODEL_LIMITS["n_experts"]))
        if self.layer_ffns is not None:
            for f in ("first_dense_layers", "moe_every"):
                if getattr(self, f) != _MOE_NEUTRAL[f]:
                    raise ValueError(f"{f} must stay {_MOE_NEUTRAL[f]} when layer_ffns gives "
                                     f"each layer's channel mixer, got {show(getattr(self, f))}")
        self._check_ffn_pattern()
        if self.n_experts == 0:
            # A dense model: every MoE field keeps its neutral value, so that a stray top-k
            # or expert width never hides in a spec whose count ignores it.
            for f, neutral in dict(_MOE_NEUTRAL, router_bias=False, n_expert_groups=1,
                                   topk_groups=1).items():
                v = getattr(self, f)
                if (v is None) != (neutral is None) or v != neutral:
                    raise ValueError(f"{f} must be {neutral!r} without experts (n_experts = 0), "
                                     f"got {show(v)}")
                set_(self, f, neutral)       # one canonical dense spec (0, not 0.0 or False)
            return
        set_(self, "experts_per_token", positive_int("experts_per_token", self.experts_per_token,
                                                     self.n_experts))
        width = self.ffn_hidden if self.expert_ffn_hidden is None else self.expert_ffn_hidden
        set_(self, "expert_ffn_hidden", positive_int("expert_ffn_hidden", width,
                                                     MODEL_LIMITS["ffn_hidden"]))
        set_(self, "n_shared_experts", nonneg_int("n_shared_experts", self.n_shared_experts,
                                                  MODEL_LIMITS["n_experts"]))
        if self.n_shared_experts:
            width = (self.expert_ffn_hidden if self.shared_ffn_hidden is None
                     else self.shared_ffn_hidden)
            set_(self, "shared_ffn_hidden", positive_int("shared_ffn_hidden", width,
                                                         MODEL_LIMITS["ffn_hidden"]))
        elif self.shared_ffn_hidden is not None or self.shared_expert_gate:
            f = "shared_ffn_hidden" if self.shared_ffn_hidden is not None else "shared_expert_gate"
            raise ValueError(f"{f} needs shared experts (n_shared_experts > 0)")
        set_(self, "moe_every", positive_int("moe_every", self.moe_every, MODEL_LIMITS["n_layers"]))
        set_(self, "moe_latent_size", nonneg_int("moe_latent_size", self.moe_latent_size,
                                                 MODEL_LIMITS["hidden"]))
        set_(self, "first_dense_layers", nonneg_int("first_dense_layers", self.first_dense_layers,
                                                    MODEL_LIMITS["n_layers"]))
        set_(self, "n_expert_groups", positive_int("n_expert_groups", self.n_expert_groups,
                                                   self.n_experts))
        if self.n_experts % self.n_expert_groups:
            raise ValueError(f"n_expert_groups must divide n_experts ({self.n_experts}), "
                             f"got {self.n_expert_groups}")
        set_(self, "topk_groups", positive_int("topk_groups", self.topk_groups,
                                               self.n_expert_groups))
        reach = self.topk_groups * (self.n_experts // self.n_expert_groups)
        if self.experts_per_token > reach:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) must be at most the "
                             f"{reach} experts of the topk_groups ({self.topk_groups}) groups "
                             f"a token may be sent to")
        if not self.moe_layer_ids:  # n_experts > 0 here
            raise ValueError(f"first_dense_layers ({self.first_dense_layers}) and moe_every "
                             f"({self.moe_every}) leave no MoE layer among the {self.n_layers} "
                             f"layers; use n_experts = 0 for a dense model")

    def _check_mla(self):
        set_ = object.__setattr__
        set_(self, "kv_lora_rank", nonneg_int("kv_lora_rank", self.kv_lora_rank,
                                              MODEL_LIMITS["hidden"]))
        if self.kv_lora_rank == 0:
            for f, neutral in _MLA_NEUTRAL.items():
                v = getattr(self, f)
                if (v is None) != (neutral is None) or v != neutral:
                    raise ValueError(f"{f} must be {neutral!r} without multi-head latent "
                                     f"attention (kv_lora_rank = 0), got {show(v)}")
                set_(self, f, neutral)
            return
        for f in ("q_lora_rank", "qk_rope_head_dim"):
            set_(self, f, nonneg_int(f, getattr(self, f), MODEL_LIMITS["hidden"]))
        v = self.head_dim if self.v_head_dim is None else self.v_head_dim
        set_(self, "v_head_dim", positive_int("v_head_dim", v, MODEL_LIMITS["hidden"]))
        if self.kv_heads != self.heads:
            raise ValueError(f"kv_heads must equal heads ({self.heads}) with multi-head latent "
                             f"attention (kv_lora_rank > 0), got {self.kv_heads}")
        if self.bias or self.qkv_bias:
            raise ValueError("bias and qkv_bias must be False with multi-head latent attention "
                             "(kv_lora_rank > 0): phaze models DeepSeek-V2's bias-free MLA")

    # -- derived ------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Trainable parameters: every weight and bias once, a tied embedding once."""
        return self._n_params

    @property
    def n_active_params(self) -> int:
        """Parameters one token runs through: ``n_params`` less, in each MoE layer, the
        ``n_experts − experts_per_token`` routed experts it is not sent to (the router and
        the shared experts count). Equal to ``n_params`` for a dense model."""
        return self._n_active_params

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (``n_experts > 0``)."""
        return self.n_experts > 0

    @property
    def uses_mla(self) -> bool:
        """True with DeepSeek's multi-head latent attention (``kv_lora_rank > 0``)."""
        return self.kv_lora_rank > 0

    @property
    def n_mtp_params(self) -> int:
        """Parameters of the ``mtp_layers`` multi-token-prediction modules (0 without):
        each enorm, hnorm, eh_proj, one layer like the last and a final norm; the
        embedding and output head are shared with the main model."""
        return self._n_mtp_params

    @property
    def moe_layer_ids(self) -> tuple:
        """Indices (from 0) of the MoE layers; empty for a dense model. ``layer_ffns``'
        'moe' layers when given, else layer ``i >= first_dense_layers`` with
        ``i % moe_every == 0``."""
        if not self.n_experts:
            return ()
        if self.layer_ffns is not None:
            return tuple(i for i, k in enumerate(self.layer_ffns) if k == "moe")
        return tuple(i for i in range(self.first_dense_layers, self.n_layers)
                     if i % self.moe_every == 0)

    @property
    def mixers(self) -> tuple:
        """The token mixer of each layer (``MIXERS``): ``layer_mixers``, or every layer
        'attention'."""
        if self.layer_mixers is not None:
            return self.layer_mixers
        return ("attention",) * self.n_layers

    @property
    def ffns(self) -> tuple:
        """The channel mixer of each layer (``FFNS``): ``layer_ffns``, or 'moe' on
        :attr:`moe_layer_ids` and 'dense' elsewhere."""
        if self.layer_ffns is not None:
            return self.layer_ffns
        moe = set(self.moe_layer_ids)
        return tuple("moe" if i in moe else "dense" for i in range(self.n_layers))

    @property
    def layer_kinds(self) -> tuple:
        """``(mixer, ffn)`` of each layer, in order."""
        return tuple(zip(self.mixers, self.ffns))

    @property
    def is_hybrid(self) -> bool:
        """True when some layer's token mixer is not full attention (sliding-window,
        chunked, Mamba-2 or none)."""
        return self.layer_mixers is not None

    @property
    def has_mamba(self) -> bool:
        """True when some layer's token mixer is a Mamba-2 mixer."""
        return self.layer_mixers is not None and "mamba" in self.layer_mixers

    @property
    def mamba_inner(self) -> int:
        """Mamba-2 inner width ``mamba_heads · mamba_head_dim`` (0 without Mamba)."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the Mamba-2 convolution: ``mamba_inner + 2·mamba_groups·mamba_state``
        (x, B and C; 0 without Mamba)."""
        return self.mamba_inner + 2 * self.mamba_groups * self.mamba_state

    @property
    def structures(self) -> tuple:
        """The structures of issue 27 this model uses, by the names of
        :data:`GRAPH_UNPRICED` (empty for a model of the earlier kinds)."""
        mixers, ffns = set(self.mixers), set(self.ffns)
        used = [k for k in ("sliding", "chunked", "mamba") if k in mixers]
        used += ["mixer none"] if "none" in mixers else []
        used += ["ffn none"] if "none" in ffns else []
        used += [k for k, on in (("attention sinks", self.attention_sinks),
                                 ("qk_norm", self.qk_norm), ("sandwich_norm", self.sandwich_norm),
                                 ("router_bias", self.router_bias),
                                 ("mtp", self.mtp_layers > 0),
                                 ("geglu", self.activation == "geglu")) if on]
        return tuple(used)

    @property
    def op_graph_refusal(self) -> str:
        """Why ``phaze.graph.build_layers`` cannot build this model's operator graphs, in
        one sentence naming the layer kind; '' when it can (dense, mixture-of-experts and
        multi-head latent attention blocks are all built; group-limited routing is
        parameter-free and priced as plain top-k). A structure in
        :data:`GRAPH_UNPRICED` is refused, never built as a silently different model."""
        for kind in self.structures:
            if kind in GRAPH_UNPRICED:
                return f"layer kind {kind} ({self.name}) is not priced yet"
        return ""

    @property
    def graph_refusal(self) -> str:
        """Why phaze cannot train-step and search this model end to end, in one sentence;
        '' when it can. Today that is :attr:`op_graph_refusal`: every model whose operator
        graphs build is also placed by the training-step model and the search (a mixture
        of experts with expert parallelism, issue 15)."""
        return self.op_graph_refusal

    @property
    def embed_width(self) -> int:
        """Width of the token embedding table (``embed_proj`` if set, else ``hidden``)."""
        return self.embed_proj or self.hidden

    def valid_tensor_parallel(self, t: int) -> bool:
        """True when tensor-parallel width ``t`` divides ``heads`` and ``kv_heads`` (and a Mamba-2
        model's ``mamba_heads`` and ``mamba_groups``: Megatron-Core splits them over t)."""
        return (isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 1
                and self.heads % t == 0 and self.kv_heads % t == 0
                and (not self.has_mamba
                     or (self.mamba_heads % t == 0 and self.mamba_groups % t == 0)))

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


# ---------------------------------------------------------------------------
# the zoo
# ---------------------------------------------------------------------------

_ZOO = {m.name: m for m in build_zoo(ModelSpec)}


def _graph_pending(m: ModelSpec) -> bool:
    """True for a model phaze cannot search end to end (``ModelSpec.graph_refusal``; no
    zoo entry today)."""
    return bool(m.graph_refusal)


def names(*, pending: bool = False) -> list:
    """Names of the built-in models, in zoo order: those phaze can search end to end, with
    operator graphs that match their parameter counts exactly (dense, mixture of experts
    and multi-head latent attention; what ``phaze models``, the benchmarks and the
    zoo-wide tests sweep). ``pending=True`` also lists entries that cannot be searched
    yet (none today); ``get`` returns any of them.
    """
    return [n for n, m in _ZOO.items() if pending or not _graph_pending(m)]


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


def resolve(model) -> ModelSpec:
    """``model`` as a ModelSpec: a zoo name (unknown: ``KeyError`` listing the names) or a
    ModelSpec; anything else is a ``ValueError`` naming ``model``."""
    if isinstance(model, str):
        return get(model)
    if not isinstance(model, ModelSpec):
        raise ValueError(f"model must be a ModelSpec or a zoo name, got {type(model).__name__}")
    return model


# ---------------------------------------------------------------------------
# Hugging Face config.json
# ---------------------------------------------------------------------------

def from_hf_config(path_or_dict, *, name: str = None, seq_len: int = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (path, directory or dict).

    Understands GPT-2, Llama (with ``rope_scaling``), Mistral, Mixtral (their
    ``sliding_window`` as sliding-window layers), Qwen2, Qwen2-MoE, DeepSeek-V2
    (multi-head latent attention and its MoE), DeepSeek-V3 and Kimi K2 (its router bias,
    group-limited routing and ``num_nextn_predict_layers``), Qwen3 and Qwen3-MoE (q/k
    norms), GPT-OSS (``layer_types``, sinks, biases), Llama 4 (chunked attention, MoE
    interleave; ``text_config`` of a multimodal config), Nemotron-H
    (``hybrid_override_pattern``), Gemma 2 and Gemma 3 (GeGLU, sandwich norms, sliding
    layers), OPT and BERT configs (``model_type``, or guessed from
    GPT-2/OPT/Llama/BERT-specific keys).
    Absent keys take the library's documented defaults; unrelated keys are ignored;
    a present key whose value phaze cannot model raises ``ValueError`` naming the
    key, and so does a key that changes the model in a way phaze does not model
    for that type (e.g. ``num_experts`` in a gpt2 config, cross-attention, parallel
    attention and MLP, a ``sliding_window`` shorter than the sequence). Mixtral's
    ``num_local_experts`` is read as a mixture of experts in a mixtral, llama,
    mistral or untyped config alike: never a silently dense model.

    ``seq_len`` (tokens per training sample) defaults to the pre-training context:
    ``rope_scaling``'s ``original_max_position_embeddings`` when positions are
    stretched (Llama 3.1: 8,192 of 131,072), else the config's maximum positions;
    ``name`` defaults to ``_name_or_path`` or the model type.
    """
    # The reader (phaze/_hf_config.py) returns the fields; the record is built here.
    fields = read_hf_config(path_or_dict, name=name, seq_len=seq_len,
                            max_seq_len=MODEL_LIMITS["seq_len"])
    try:
        return ModelSpec(**fields)
    except ValueError as exc:
        raise ValueError(f"config does not describe a model phaze can build: {exc}") from None


def gemm_flops_per_sample(m: ModelSpec) -> float:
    """Forward+backward GEMM FLOPs of one sample in Megatron's closed form, in FLOPs.

    72·s·L·h²·(1 + s/(6h) + V/(12·h·L)) with the padded vocabulary (t = 1): the
    count ``phaze.graph`` reproduces exactly for GPT-style models.
    """
    s, L, h, V = m.seq_len, m.n_layers, m.hidden, m.padded_vocab(1)
    return 72.0 * s * L * h * h * (1 + s / (6.0 * h) + V / (12.0 * h * L))


__all__ = ["ModelSpec", "ACTIVATIONS", "NORMS", "POSITIONS", "MIXERS", "FFNS", "GRAPH_UNPRICED",
           "get", "names", "from_hf_config", "block_params", "attention_params", "mlp_params",
           "expert_params", "moe_params", "embedding_params", "head_params", "mamba_params",
           "mixer_params", "ffn_params", "layer_params", "mtp_module_params",
           "gemm_flops_per_sample"]
