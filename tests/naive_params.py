"""Slow, obviously-correct parameter counts of the model families of issue 27.

Two independent references for ``ModelSpec.n_params`` / ``n_active_params`` /
``n_mtp_params``:

- :func:`hf_tensors` reads a Hugging Face ``config.json`` (a dict; no phaze code) and writes
  out every trainable tensor the way the architecture's PyTorch module tree holds it
  (``modeling_deepseek.py``, ``modeling_qwen3_moe.py``, ``modeling_gpt_oss.py``,
  ``modeling_llama4.py``, ``modeling_nemotron_h.py``, ``modeling_gemma2/3.py``,
  ``modeling_mistral.py``), tagged "main", "mtp" or "routed:<layer>:<expert>";
- :func:`spec_layer_tensors` writes out one layer of a ModelSpec tensor by tensor from the
  contract's rules (docs: phaze/models.py), for the hypothesis properties.
"""
import math


def _linear(out, name, n_out, n_in, bias=False):
    out.append((name + ".weight", (n_out, n_in)))
    if bias:
        out.append((name + ".bias", (n_out,)))


def _swiglu(out, p, h, f, bias=False):
    _linear(out, p + "gate_proj", f, h, bias)
    _linear(out, p + "up_proj", f, h, bias)
    _linear(out, p + "down_proj", h, f, bias)


def _gqa(out, p, h, heads, kv, hd, bias=False):
    _linear(out, p + "q_proj", heads * hd, h, bias)
    _linear(out, p + "k_proj", kv * hd, h, bias)
    _linear(out, p + "v_proj", kv * hd, h, bias)
    _linear(out, p + "o_proj", h, heads * hd, bias)


def _tensors(build, *args):
    """The tensors one of the builders above appends (``build(out, *args)``), as a list."""
    out = []
    build(out, *args)
    return out


def _routed(out, layer, n_experts, expert):
    """Append the routed experts of one layer, tagged "routed:<layer>:<j>": ``expert(j)``
    the tensors of expert j (the loop every MoE family shares)."""
    for j in range(n_experts):
        out += [(f"routed:{layer}:{j}", x) for x in expert(j)]


def _deepseek_layer(cfg, p, moe):
    h, a = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ql, kvl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    t = [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
    s = p + "self_attn."
    if ql:
        _linear(t, s + "q_a_proj", ql, h)
        t.append((s + "q_a_layernorm.weight", (ql,)))
        _linear(t, s + "q_b_proj", a * (nope + rope), ql)
    else:
        _linear(t, s + "q_proj", a * (nope + rope), h)
    _linear(t, s + "kv_a_proj_with_mqa", kvl + rope, h)
    t.append((s + "kv_a_layernorm.weight", (kvl,)))
    _linear(t, s + "kv_b_proj", a * (nope + v), kvl)
    _linear(t, s + "o_proj", h, a * v)
    tagged = [("main", x) for x in t]
    if not moe:
        d = []
        _swiglu(d, p + "mlp.", h, cfg["intermediate_size"])
        return tagged + [("main", x) for x in d]
    e, f = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    g = [(p + "mlp.gate.weight", (e, h)), (p + "mlp.gate.e_score_correction_bias", (e,))]
    _swiglu(g, p + "mlp.shared_experts.", h, f * cfg["n_shared_experts"])
    tagged += [("main", x) for x in g]
    _routed(tagged, p, e, lambda j: _tensors(_swiglu, p + f"mlp.experts.{j}.", h, f))
    return tagged


def _deepseek(cfg):
    h, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    out = [("main", ("model.embed_tokens.weight", (V, h)))]
    first, freq = cfg["first_k_dense_replace"], cfg.get("moe_layer_freq", 1)
    for i in range(L):
        out += _deepseek_layer(cfg, f"model.layers.{i}.", i >= first and i % freq == 0)
    out += [("main", ("model.norm.weight", (h,))), ("main", ("lm_head.weight", (V, h)))]
    for k in range(cfg.get("num_nextn_predict_layers", 0)):
        # modeling_deepseek / DeepSeek's README_WEIGHTS: layer L + k holds enorm, hnorm,
        # eh_proj, a decoder layer like the last and shared_head (its norm; its head and
        # embed_tokens are the main model's, not counted again).
        p = f"model.layers.{L + k}."
        out += [("mtp", (p + "enorm.weight", (h,))), ("mtp", (p + "hnorm.weight", (h,))),
                ("mtp", (p + "eh_proj.weight", (h, 2 * h))),
                ("mtp", (p + "shared_head.norm.weight", (h,)))]
        last_moe = (L - 1) >= first and (L - 1) % freq == 0
        for tag, x in _deepseek_layer(cfg, p, last_moe):
            out.append(("mtp", x))
    return out


def _qwen3_moe(cfg):
    h, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    a, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    e, f = cfg["num_experts"], cfg["moe_intermediate_size"]
    out = [("main", ("model.embed_tokens.weight", (V, h)))]
    for i in range(L):
        p = f"model.layers.{i}."
        t = [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        _gqa(t, p + "self_attn.", h, a, kv, hd)
        t += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,)),
              (p + "mlp.gate.weight", (e, h))]
        out += [("main", x) for x in t]
        _routed(out, i, e, lambda j: _tensors(_swiglu, p + f"mlp.experts.{j}.", h, f))
    out += [("main", ("model.norm.weight", (h,))), ("main", ("lm_head.weight", (V, h)))]
    return out


def _gpt_oss(cfg):
    h, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    a, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    e, f = cfg["num_local_experts"], cfg["intermediate_size"]
    out = [("main", ("model.embed_tokens.weight", (V, h)))]
    for i in range(L):
        p = f"model.layers.{i}."
        t = [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        _gqa(t, p + "self_attn.", h, a, kv, hd, bias=True)
        t += [(p + "self_attn.sinks", (a,)), (p + "mlp.router.weight", (e, h)),
              (p + "mlp.router.bias", (e,))]
        out += [("main", x) for x in t]
        # GptOssExperts stacks the experts: gate_up_proj (E, h, 2f) and its bias (E, 2f),
        # down_proj (E, f, h) and its bias (E, h); one expert is a slice of each.
        _routed(out, i, e, lambda j: [(p + f"mlp.experts.gate_up_proj[{j}]", (h, 2 * f)),
                                      (p + f"mlp.experts.gate_up_proj_bias[{j}]", (2 * f,)),
                                      (p + f"mlp.experts.down_proj[{j}]", (f, h)),
                                      (p + f"mlp.experts.down_proj_bias[{j}]", (h,))])
    out += [("main", ("model.norm.weight", (h,))), ("main", ("lm_head.weight", (V, h)))]
    return out


def _llama4(cfg):
    t_cfg = cfg["text_config"]
    h, V, L = t_cfg["hidden_size"], t_cfg["vocab_size"], t_cfg["num_hidden_layers"]
    a, kv, hd = t_cfg["num_attention_heads"], t_cfg["num_key_value_heads"], t_cfg["head_dim"]
    e, f, fm = t_cfg["num_local_experts"], t_cfg["intermediate_size"], t_cfg["intermediate_size_mlp"]
    step = t_cfg["interleave_moe_layer_step"]
    moe = t_cfg.get("moe_layers") or list(range(step - 1, L, step))
    out = [("main", ("language_model.model.embed_tokens.weight", (V, h)))]
    for i in range(L):
        p = f"language_model.model.layers.{i}."
        t = [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        _gqa(t, p + "self_attn.", h, a, kv, hd)          # use_qk_norm: an L2 norm, no weight
        if i in moe:
            t.append((p + "feed_forward.router.weight", (e, h)))
            _swiglu(t, p + "feed_forward.shared_expert.", h, f)
            out += [("main", x) for x in t]
            _routed(out, i, e, lambda j: [
                (p + f"feed_forward.experts.gate_up_proj[{j}]", (h, 2 * f)),
                (p + f"feed_forward.experts.down_proj[{j}]", (f, h))])
        else:
            _swiglu(t, p + "feed_forward.", h, fm)
            out += [("main", x) for x in t]
    out += [("main", ("language_model.model.norm.weight", (h,))),
            ("main", ("language_model.lm_head.weight", (V, h)))]
    return out


def _nemotron_h(cfg):
    h, V = cfg["hidden_size"], cfg["vocab_size"]
    a, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg.get("attention_head_dim") or 128     # Nemotron 3: head_dim
    nh, d, g, n = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["n_groups"], cfg["ssm_state_size"]
    inner, k = nh * d, cfg["conv_kernel"]
    conv_dim = inner + 2 * g * n
    out = [("main", ("backbone.embeddings.weight", (V, h)))]
    for i, c in enumerate(cfg["hybrid_override_pattern"]):
        p = f"backbone.layers.{i}."
        t = [(p + "norm.weight", (h,))]
        if c == "M":
            _linear(t, p + "mixer.in_proj", inner + conv_dim + nh, h)
            t += [(p + "mixer.conv1d.weight", (conv_dim, 1, k)), (p + "mixer.conv1d.bias", (conv_dim,)),
                  (p + "mixer.dt_bias", (nh,)), (p + "mixer.A_log", (nh,)), (p + "mixer.D", (nh,)),
                  (p + "mixer.norm.weight", (inner,))]
            _linear(t, p + "mixer.out_proj", h, inner)
        elif c == "*":
            _gqa(t, p + "mixer.", h, a, kv, hd)
        elif c == "-":
            _linear(t, p + "mixer.up_proj", cfg["intermediate_size"], h)
            _linear(t, p + "mixer.down_proj", h, cfg["intermediate_size"])
        elif c == "E":
            # Nemotron 3's NemotronHMOE: the sigmoid router's gate.weight and its
            # e_score_correction_bias, routed experts up_proj / down_proj (squared ReLU, no
            # gate), one shared_experts MLP of moe_shared_expert_intermediate_size.
            e, f, fs = cfg["n_routed_experts"], cfg["moe_intermediate_size"], \
                cfg["moe_shared_expert_intermediate_size"]
            assert cfg["n_shared_experts"] == 1
            t += [(p + "mixer.gate.weight", (e, h)), (p + "mixer.gate.e_score_correction_bias", (e,))]
            _linear(t, p + "mixer.shared_experts.up_proj", fs, h)
            _linear(t, p + "mixer.shared_experts.down_proj", h, fs)
            _routed(out, i, e, lambda j: (_tensors(_linear, p + f"mixer.experts.{j}.up_proj", f, h)
                                          + _tensors(_linear, p + f"mixer.experts.{j}.down_proj",
                                                     h, f)))
        else:
            raise ValueError(c)
        out += [("main", x) for x in t]
    out += [("main", ("backbone.norm_f.weight", (h,))), ("main", ("lm_head.weight", (V, h)))]
    return out


def _gemma(cfg, qk_norm):
    # Gemma3TextConfig's defaults fill the keys google/gemma-3-12b-pt's text_config omits.
    h, V = cfg["hidden_size"], cfg.get("vocab_size", 262208)
    a, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg.get("head_dim", 256)
    out = [("main", ("model.embed_tokens.weight", (V, h)))]       # tied: no lm_head
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t = [(p + n + ".weight", (h,)) for n in ("input_layernorm", "post_attention_layernorm",
                                                  "pre_feedforward_layernorm",
                                                  "post_feedforward_layernorm")]
        _gqa(t, p + "self_attn.", h, a, kv, hd)
        if qk_norm:
            t += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        _swiglu(t, p + "mlp.", h, cfg["intermediate_size"])       # GeGLU: the same three
        out += [("main", x) for x in t]
    out.append(("main", ("model.norm.weight", (h,))))
    return out


def _mistral(cfg):
    h, V, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    a, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = [("main", ("model.embed_tokens.weight", (V, h)))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t = [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        _gqa(t, p + "self_attn.", h, a, kv, h // a)
        _swiglu(t, p + "mlp.", h, f)
        out += [("main", x) for x in t]
    out += [("main", ("model.norm.weight", (h,))), ("main", ("lm_head.weight", (V, h)))]
    return out


def hf_tensors(cfg):
    """Every trainable tensor of the language model a config.json describes, as
    (tag, (name, shape)): tag "main", "mtp" or "routed:<layer>:<expert>"."""
    mt = cfg["model_type"]
    if mt in ("deepseek_v3", "kimi_k2"):
        return _deepseek(cfg)
    if mt == "qwen3_moe":
        return _qwen3_moe(cfg)
    if mt == "gpt_oss":
        return _gpt_oss(cfg)
    if mt == "llama4":
        return _llama4(cfg)
    if mt == "nemotron_h":
        return _nemotron_h(cfg)
    if mt == "gemma2":
        return _gemma(cfg, qk_norm=False)
    if mt == "gemma3":
        return _gemma(cfg["text_config"], qk_norm=True)
    if mt == "mistral":
        return _mistral(cfg)
    raise ValueError(mt)


def _top_k(cfg):
    c = cfg.get("text_config", cfg)
    return c["num_experts_per_tok"]


def hf_counts(cfg):
    """(total, active, mtp) parameters of a config.json, tensor by tensor: the main model,
    what one token runs through (every main tensor and top-k routed experts of each MoE
    layer) and the multi-token-prediction modules."""
    tensors = hf_tensors(cfg)
    size = {}
    for tag, (_, shape) in tensors:
        size[tag] = size.get(tag, 0) + math.prod(shape)
    main = size.get("main", 0)
    routed = {t: n for t, n in size.items() if t.startswith("routed:")}
    total = main + sum(routed.values())
    per_layer = {}
    for t, n in routed.items():
        layer = t.split(":")[1]
        per_layer.setdefault(layer, []).append(n)
    active = main + sum(sum(sorted(ns)[:_top_k(cfg)]) for ns in per_layer.values())
    return total, active, size.get("mtp", 0)


# ---------------------------------------------------------------------------
# one layer of a ModelSpec, tensor by tensor (the contract's rules written out)
# ---------------------------------------------------------------------------

def spec_layer_tensors(m, mixer, ffn):
    """The tensors of one layer of kind (mixer, ffn) of ModelSpec ``m``."""
    h, hd, a = m.hidden, m.head_dim, m.heads
    t = []

    def norm(name, width=h):
        t.append((name + ".weight", (width,)))
        if m.norm == "layernorm":
            t.append((name + ".bias", (width,)))

    for sub in (mixer, ffn):
        if sub != "none":
            norm("pre_" + sub)
            if m.sandwich_norm:
                norm("post_" + sub)
    if mixer in ("attention", "sliding", "chunked"):
        if m.uses_mla:
            qk = a * (hd + m.qk_rope_head_dim)
            if m.q_lora_rank:
                t.append(("q_a", (m.q_lora_rank, h)))
                norm("q_a_norm", m.q_lora_rank)
                t.append(("q_b", (qk, m.q_lora_rank)))
            else:
                t.append(("q", (qk, h)))
            t.append(("kv_a", (m.kv_lora_rank + m.qk_rope_head_dim, h)))
            norm("kv_a_norm", m.kv_lora_rank)
            t.append(("kv_b", (a * (hd + m.v_head_dim), m.kv_lora_rank)))
            t.append(("o", (h, a * m.v_head_dim)))
        else:
            for name, rows in (("q", a * hd), ("k", m.kv_heads * hd), ("v", m.kv_heads * hd)):
                t.append((name, (rows, h)))
                if m.qkv_bias:
                    t.append((name + ".bias", (rows,)))
            t.append(("o", (h, a * hd)))
            if m.bias:
                t.append(("o.bias", (h,)))
        if m.qk_norm:
            t += [("q_norm", (hd,)), ("k_norm", (hd,))]
        if m.attention_sinks:
            t.append(("sinks", (a,)))
    elif mixer == "mamba":
        d, g, n, nh = m.mamba_heads * m.mamba_head_dim, m.mamba_groups, m.mamba_state, m.mamba_heads
        conv = d + 2 * g * n
        t += [("in_proj", (d + conv + nh, h)), ("conv1d", (conv, 1, m.mamba_conv)),
              ("conv1d.bias", (conv,)), ("dt_bias", (nh,)), ("A_log", (nh,)), ("D", (nh,)),
              ("gated_norm", (d,)), ("out_proj", (h, d))]

    def mlp(prefix, f):
        gated = m.activation in ("swiglu", "geglu")
        mats = [("gate", (f, h)), ("up", (f, h)), ("down", (h, f))] if gated else \
            [("fc1", (f, h)), ("fc2", (h, f))]
        for name, shape in mats:
            t.append((prefix + name, shape))
            if m.bias:
                t.append((prefix + name + ".bias", (shape[0],)))

    if ffn == "dense":
        mlp("mlp.", m.ffn_hidden)
    elif ffn == "moe":
        t.append(("router", (m.n_experts, h)))
        if m.router_bias:
            t.append(("router.bias", (m.n_experts,)))
        for j in range(m.n_experts):
            mlp(f"expert{j}.", m.expert_ffn_hidden)
        for j in range(m.n_shared_experts):
            mlp(f"shared{j}.", m.shared_ffn_hidden)
        if m.shared_expert_gate:
            t.append(("shared_gate", (1, h)))
    return t


def spec_layer_params(m, mixer, ffn):
    return sum(math.prod(s) for _, s in spec_layer_tensors(m, mixer, ffn))
