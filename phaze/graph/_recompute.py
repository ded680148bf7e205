"""Megatron-Core's selective recomputation by module (``--recompute-granularity selective
--recompute-modules ...``) in :mod:`phaze.graph`: which forward operators of a layer each
module re-runs before the backward, and which stashed bytes it no longer keeps.

Source, code read (NVIDIA/Megatron-LM ``megatron/core/transformer/transformer_config.py``
``recompute_modules``, ``transformer_layer.py``, ``attention.py``,
``multi_latent_attention.py``, ``moe/moe_layer.py``, ``moe/experts.py``; the repository's
selective-recomputation guide; docs/fidelity-sources.md §28). Two mechanisms: a plain
checkpoint (``core_attn``, ``mlp``, ``moe``, ``shared_experts``) keeps the wrapped
function's inputs and re-runs it; an output-discarding one (``layernorm``, ``moe_act``,
``mla_up_proj``) also frees the output the next module saved and restores it by re-running
before that module's backward. Under the Transformer Engine layer spec (what Megatron-Core
trains GPUs with) a dense layer's norms are fused into the next linear layer (its
``input_layernorm`` and ``pre_mlp_layernorm`` are ``IdentityOp``), so ``layernorm`` acts on
the separate norms only: multi-head latent attention's input norm and the MoE layer's
pre-MLP norm. Per module, on the layer kinds it acts on:

- ``core_attn`` (the default): the attention core — the unfused scores, softmax, dropout
  and context, or the fused kernel's forward — drops what the core saved beyond Q, K, V
  (``LayerGraph.stash("selective")``, the graph builders' own split).
- ``mlp`` (a dense MLP; not an MoE layer's): the MLP's operators from its (fused) norm to
  the second linear layer and their tensor-parallel collectives re-run; the MLP input is
  kept, the rest of the MLP's stash (the first linear's input, the activation's input, the
  second linear's input) is not.
- ``moe``: the whole MoE layer after its norm — router, dispatch (its all-to-alls too),
  experts, shared experts, combine — re-runs; its stash but the norm's input and output
  and the residual mask is dropped.
- ``shared_experts``: the shared experts' MLP re-runs, their stash is dropped.
- ``moe_act``: the routed experts' activation re-runs; its output (the second expert GEMM's
  input) is dropped.
- ``layernorm``: the separate norms re-run, their outputs are dropped.
- ``mla_up_proj``: MLA's query and key/value up-projections (with their fused latent norms)
  and the rotary embedding re-run; the per-head Q, K, V and the up-projections' inputs are
  dropped.

A module that does not act on a layer kind (``mlp`` on an MoE layer, ``mla_up_proj`` on
plain attention, any on a Mamba mixer) changes nothing there, as in Megatron-Core.
"""
from __future__ import annotations

from ._mla import _dims as _mla_dims
from ._moe import _moe_sizes, moe_stash
from ._ops import GATED, MASK_BYTES_PER_ELEMENT, Shape

#: Megatron-Core's selective recomputation modules, in its own order (``--recompute-modules``
#: choices, megatron/training/arguments.py).
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")
#: Megatron-Core's default (``recompute_modules`` None under selective granularity).
DEFAULT_RECOMPUTE_MODULES = "core_attn"


def canonical_modules(value, field: str = "recompute_modules") -> str:
    """``value`` (a string of module names separated by commas, spaces or '+', or a list
    of names) as the canonical comma-joined set in :data:`RECOMPUTE_MODULES` order;
    ``ValueError`` in one sentence naming ``field`` and what is allowed."""
    allowed = ("a non-empty set of " + ", ".join(RECOMPUTE_MODULES)
               + " (comma-separated or a list)")
    if isinstance(value, str):
        names = value.replace("+", ",").replace(" ", ",").split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise ValueError(f"{field} must be {allowed}, got {value!r}")
    names = [n.strip() for n in names if n.strip()]
    bad = [n for n in names if n not in RECOMPUTE_MODULES]
    if not names or bad:
        raise ValueError(f"{field} must be {allowed}, got {value!r}"
                         + (f" ({bad[0]!r} is not a module)" if bad else ""))
    return ",".join(n for n in RECOMPUTE_MODULES if n in names)


def _between(names, start, stop) -> tuple:
    """The operator names after ``start`` (None: from the first) and before ``stop``."""
    i = names.index(start) + 1 if start is not None else 0
    return tuple(names[i:names.index(stop)])


def module_parts(sh: Shape, mixer: str, ffn: str, names, core_bytes: int) -> tuple:
    """Per module that acts on the layer kind of token mixer ``mixer`` and channel mixer
    ``ffn`` (``sh`` its shape, ``names`` its forward operators in order, ``core_bytes``
    what the builders' selective split drops): ``(module, operator names re-run, stash
    bytes dropped, whether the MoE all-to-alls re-run)``, a tuple of them."""
    m, B, B8, T, Tn, h = sh.m, sh.B, sh.B8, sh.T, sh.Tn, sh.h
    names = list(names)
    out = []
    attention = mixer in ("attention", "sliding", "chunked")
    if attention:
        core = ("flash_attn",) if sh.flash else tuple(
            n for n in ("attn_scores", "softmax", "attn_dropout", "attn_context") if n in names)
        out.append(("core_attn", core, int(core_bytes), False))
    if attention and m.uses_mla:
        qk, vd, ql, kvl, _rope = _mla_dims(sh)
        up = tuple(n for n in ("q_a_norm", "q_b_proj", "q_proj", "kv_a_norm", "kv_b_proj",
                               "rotary") if n in names)
        # Q, K (the rotary key broadcast), V per head; the up-projections' inputs (the
        # latent norms' outputs; without q_lora_rank the query projection reads ln1's
        # output, which the key/value down-projection keeps)
        out.append(("mla_up_proj", up, B * T * sh.a_t * (2 * qk + vd) + B8 * T * (ql + kvl),
                    False))
        out.append(("layernorm", ("ln1",), B8 * Tn * h, False))
    if ffn == "dense":
        start = "residual1" if "residual1" in names else None
        act_in = (2 if m.activation in GATED else 1) * T * sh.f_t
        out.append(("mlp", _between(names, start, "residual2"),
                    B * act_in + B8 * (Tn * h + T * sh.f_t), False))
    elif ffn == "moe":
        local, _R, _c, _sent, rows, fe_t, fs_t, _routing = _moe_sizes(sh)
        kept = 2 * B * Tn * h + MASK_BYTES_PER_ELEMENT * Tn * h + (
            B * Tn * h if m.sandwich_norm else 0)
        out.append(("moe", _between(names, "ln2", "residual2"), moe_stash(sh) - kept, True))
        act_ops = tuple("expert_" + a for a in (*GATED, "fc1_act"))
        out.append(("moe_act", tuple(n for n in names if n in act_ops),
                    B8 * local * rows * fe_t, False))
        if m.n_shared_experts:
            act = 2 if m.activation in GATED else 1
            shared = tuple(n for n in names if n.startswith("shared_") or n.endswith("_shared"))
            out.append(("shared_experts", shared,
                        B * act * T * fs_t + B8 * T * fs_t + (B8 * Tn * h if B8 != B else 0),
                        False))
        out.append(("layernorm", ("ln2",), B * Tn * h, False))
    return tuple(out)


def selective(parts: tuple, modules: str, stash_none: int, stash_full: int) -> tuple:
    """(operator names re-run, stash bytes kept, whether the MoE all-to-alls re-run) of a
    layer under selective recomputation of ``modules`` (canonical, :func:`canonical_modules`)
    given its :func:`module_parts`: ``moe`` covers ``moe_act`` and ``shared_experts``; the
    stash is at least the layer's input (``stash_full``)."""
    chosen = set(modules.split(","))
    if "moe" in chosen:
        chosen -= {"moe_act", "shared_experts"}
    ops, dropped, a2a = [], 0, False
    for module, names, drop, reruns in parts:
        if module in chosen:
            ops.extend(n for n in names if n not in ops)
            dropped += drop
            a2a = a2a or reruns
    return tuple(ops), max(int(stash_none) - int(dropped), int(stash_full)), a2a
