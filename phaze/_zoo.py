"""The built-in models of ``phaze.models`` (docs/design.md §2.1): each entry from its
publisher's configuration, with the source and the checkpoint's parameter count beside it.

Kept apart from ``phaze.models`` so that each module stays under the layout's line limit;
the ModelSpec class is passed in (``build_zoo(ModelSpec)``), so this module imports
nothing of ``phaze.models`` and there is no import cycle.
"""
from __future__ import annotations


def _megatron(M, name, layers, hidden, heads, *, seq_len=2048, causal=True, vocab=51200):
    # Megatron-LM GPT/BERT: FFN 4h, GELU, LayerNorm (pre-LN with a final norm),
    # learned positions, biases, tied input/output embeddings.
    return M(name=name, n_layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                     ffn_hidden=4 * hidden, vocab=vocab, seq_len=seq_len, activation="gelu",
                     norm="layernorm", position="learned", bias=True, causal=causal,
                     tied_embeddings=True)


def _llama(M, name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len, **extra):
    # Llama-family decoder: SwiGLU, RMSNorm (with a final norm), rotary positions, no biases,
    # untied output layer — Llama 2/3, Mistral, Mixtral, Qwen2, DeepSeek-V2 all share it.
    return M(name=name, n_layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                     ffn_hidden=ffn, vocab=vocab, seq_len=seq_len, activation="swiglu",
                     norm="rmsnorm", position="rotary", bias=False, causal=True,
                     tied_embeddings=False, **extra)


def _nemotron(M, name, layers, hidden, heads, kv_heads, ffn):
    # NVIDIA Nemotron-3 / Nemotron-4 as NeMo trains them (NemotronConfig): a non-gated MLP
    # with squared ReLU, LayerNorm ("layernorm1p", zero-centred gamma: a weight and a bias
    # each), rotary positions on half of each head (rotary_percent 0.5, no weight), no
    # biases, untied output layer, the 256,000-token vocabulary, 4,096-token sequences.
    return M(name=name, n_layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                     ffn_hidden=ffn, vocab=256000, seq_len=4096, activation="squared_relu",
                     norm="layernorm", position="rotary", bias=False, causal=True,
                     tied_embeddings=False)


def build_zoo(M) -> list:
    """The built-in models (``phaze.models.get``), in zoo order, built with ``M``
    (``phaze.models.ModelSpec``, passed in so that this module imports nothing of
    ``phaze.models``)."""
    return [
        # bert-large-uncased: 24 × 1024, 16 heads, FFN 4096, vocab 30522, 512 positions.
        M(name="bert-large", n_layers=24, hidden=1024, heads=16, kv_heads=16,
                  ffn_hidden=4096, vocab=30522, seq_len=512, activation="gelu", norm="layernorm",
                  position="learned", bias=True, causal=False, tied_embeddings=True),
        # gpt2-xl: 48 × 1600, 25 heads, n_inner 4·1600, vocab 50257, 1024 positions.
        M(name="gpt2-xl", n_layers=48, hidden=1600, heads=25, kv_heads=25,
                  ffn_hidden=6400, vocab=50257, seq_len=1024, activation="gelu", norm="layernorm",
                  position="learned", bias=True, causal=True, tied_embeddings=True),
        # facebook/opt-350m: 24 × 1024, 16 heads, FFN 4096, ReLU, vocab 50272, 512-wide token
        # embedding projected in and out, post-LN (no final norm), 2048 positions + OPT's offset 2.
        M(name="opt-350m", n_layers=24, hidden=1024, heads=16, kv_heads=16,
                  ffn_hidden=4096, vocab=50272, seq_len=2048, activation="relu", norm="layernorm",
                  position="learned", bias=True, embed_proj=512, causal=True,
                  tied_embeddings=True, max_positions=2050, final_norm=False),
        # meta-llama/Llama-2-7b-hf: 32 × 4096, 32 heads, SwiGLU 11008, RMSNorm, rotary, no biases,
        # untied output layer, vocab 32000.
        _llama(M, "llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        # Llama 3 (meta-llama/Meta-Llama-3-8B and -70B config.json; "The Llama 3 Herd of
        # Models", arXiv:2407.21783, Table 3): GQA with 8 K/V heads, vocab 128,256. Sequence:
        # the 8,192-token pre-training context (Llama 3 model card, §3.4.1 of the paper).
        # 8,030,261,248 and 70,553,706,496 parameters (the checkpoints' safetensors totals).
        _llama(M, "llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama(M, "llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        # meta-llama/Llama-3.1-405B config.json: 126 × 16384, 128 heads, 8 K/V heads, FFN
        # 53,248; rope_scaling "llama3" (factor 8) stretches positions to 131,072 but adds no
        # weight. Sequence: 8,192, the pre-training length before the long-context stage
        # (arXiv:2407.21783 §3.4.1-3.4.2; original_max_position_embeddings in the config).
        # 405,853,388,800 parameters (the checkpoint's safetensors total).
        _llama(M, "llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
        # Qwen/Qwen2-7B config.json: 28 × 3584, 28 heads, 4 K/V heads, FFN 18,944, vocab
        # 152,064, biases on Q, K, V only (modeling_qwen2.py). Sequence: 4,096, the pre-training
        # length before the final 32,768-token stage (Qwen2 report, arXiv:2407.10671 §3.2).
        # 7,615,616,512 parameters (the checkpoint's safetensors total).
        _llama(M, "qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 4096, qkv_bias=True),
        # mistralai/Mixtral-8x7B-v0.1 config.json: Mistral-7B's shape with every MLP replaced by
        # 8 SwiGLU experts of width 14,336, top-2 routing ("Mixtral of Experts",
        # arXiv:2401.04088, Table 1). Sequence: 32,768, the context it was pre-trained with
        # (arXiv:2401.04088 §2). 46,702,792,704 parameters, 12,879,925,248 active per token.
        _llama(M, "mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768,
               n_experts=8, experts_per_token=2),
        # mistralai/Mixtral-8x22B-v0.1 config.json: 56 × 6144, 48 heads, 8 K/V heads, 8 experts
        # of width 16,384, top-2, vocab 32,768. Sequence: 65,536, the context window of the
        # release (mistral.ai/news/mixtral-8x22b; no separate pre-training length is
        # published). 140,630,071,296 parameters (the checkpoint's total), 39,161,468,928 active.
        _llama(M, "mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 65536,
               n_experts=8, experts_per_token=2),
        # deepseek-ai/DeepSeek-V2-Lite config.json (DeepSeek-V2 report, arXiv:2405.04434,
        # Appendix B): 27 × 2048, 16 heads with multi-head latent attention (kv_lora_rank 512,
        # no query compression, 128 + 64 rotary query/key dims, 128 value dims); the first
        # layer dense (FFN 10,944), the other 26 fine-grained MoE: 64 routed experts of width
        # 1,408, top-6, and 2 shared experts; vocab 102,400. Sequence: 4,096, the pre-training
        # length before YaRN extends it to 32K (original_max_position_embeddings in the config).
        # 15,706,484,224 parameters (the checkpoint's total); 2,661,150,208 active per token,
        # 2.45 B without the input table (the report's "2.4B activated").
        _llama(M, "deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, 4096,
               n_experts=64, experts_per_token=6, expert_ffn_hidden=1408, n_shared_experts=2,
               first_dense_layers=1, kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128),
        _megatron(M, "megatron-bert", 24, 1024, 16, seq_len=512, causal=False),
        _megatron(M, "megatron-gpt2-54", 54, 1920, 20, seq_len=1024),
        _megatron(M, "megatron-gpt2-72", 72, 3072, 24, seq_len=1024),
        _megatron(M, "gpt3-175b", 96, 12288, 96),
        _megatron(M, "megatron-1.7b", 24, 2304, 24),
        _megatron(M, "megatron-3.6b", 30, 3072, 32),
        _megatron(M, "megatron-7.5b", 36, 4096, 32),
        _megatron(M, "megatron-18.4b", 40, 6144, 48),
        _megatron(M, "megatron-39.1b", 48, 8192, 64),
        _megatron(M, "megatron-76.1b", 60, 10240, 80),
        _megatron(M, "megatron-145.6b", 80, 12288, 96),
        _megatron(M, "megatron-310.1b", 96, 16384, 128),
        _megatron(M, "megatron-529.6b", 105, 20480, 128),
        _megatron(M, "megatron-1t", 128, 25600, 160),
        # -- the dense models of the published NeMo runs (issue 25; sources in
        # docs/fidelity-sources.md, "Zoo models for the modern runs") --
        # GPT-3 5B and 20B as NeMo trains them (NeMo GPTConfig5B / GPTConfig20B;
        # NeMo-Framework-Launcher conf/training/gpt3/5b.yaml, 20b.yaml): FFN 4h, GELU,
        # LayerNorm, learned positions (2,048), biases, tied embeddings, the GPT-2 BPE
        # vocabulary of 50,257 (GPT2BPETokenizer; Megatron pads it to 128·t).
        # 5,047,365,632 and 20,256,221,184 parameters.
        _megatron(M, "gpt3-5b", 24, 4096, 32, vocab=50257),
        _megatron(M, "gpt3-20b", 44, 6144, 48, vocab=50257),
        # meta-llama/Llama-2-13b-hf and Llama-2-70b-hf config.json (Llama 2 paper,
        # arXiv:2307.09288, Table 1: 4k context, GQA for 70B): 13,015,864,320 and
        # 68,976,648,192 parameters (transformers' num_parameters()).
        _llama(M, "llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama(M, "llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        # Nemotron-4 15B (arXiv:2402.16819, Table 1: 32 × 6144, 48 heads, 8 K/V heads; "3.2
        # billion embedding and 12.5 billion non-embedding parameters") and 340B
        # (arXiv:2406.11704: 96 × 18432, 96 heads, 8 K/V heads, FFN 73,728; "9.4 billion
        # embedding and 331.6 billion non-embedding parameters"); NeMo Nemotron4Config15B /
        # Nemotron4Config340B. 15,628,775,424 and 341,029,195,776 parameters.
        _nemotron(M, "nemotron4-15b", 32, 6144, 48, 8, 24576),
        _nemotron(M, "nemotron4-340b", 96, 18432, 96, 8, 73728),
        # Nemotron-3 8B and 22B (NeMo Nemotron3Config8B / Nemotron3Config22B; launcher
        # conf/training/nemotron/nemotron_8b.yaml, nemotron_22b.yaml): multi-head attention,
        # 32 × 4096 (FFN 16,384) and 40 × 6144 (FFN 24,576). 8,540,135,424 and
        # 21,266,116,608 parameters (the "8B" label is 6.3 % under the count).
        _nemotron(M, "nemotron-8b", 32, 4096, 32, 32, 16384),
        _nemotron(M, "nemotron-22b", 40, 6144, 48, 48, 24576),
    ] + zoo_2025(M)


#: Nemotron-H's hybrid_override_pattern letters: (token mixer, channel mixer) of a layer.
NEMOTRON_H_KINDS = {"M": ("mamba", "none"), "*": ("attention", "none"), "-": ("none", "dense"),
                    "E": ("none", "moe")}
#: nvidia/Nemotron-H-8B-Base-8K and -56B-Base-8K hybrid_override_pattern (52 and 118 layers).
NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
NEMOTRON_H_56B = ("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
                  "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")


def _nemotron_h(M, name, pattern, hidden, heads, ffn, mamba_heads, state):
    # NVIDIA Nemotron-H (NemotronHForCausalLM): one sublayer per layer after one RMSNorm,
    # as the pattern names it; GQA with 8 K/V heads of 128 and no position embedding
    # (NoPE), squared-ReLU MLP, Mamba-2 mixers of 64-wide heads in 8 groups (conv 4, chunk
    # 128), no linear biases, untied output layer, 131,072-token vocabulary, 8,192-token
    # sequences (the "8K" of the checkpoints' names; Megatron-Bridge
    # NemotronHModelProvider.seq_length). 8,100,852,736 and 56,324,350,464 parameters.
    return M(name=name, n_layers=len(pattern), hidden=hidden, heads=heads, kv_heads=8,
             head_dim=128, ffn_hidden=ffn, vocab=131072, seq_len=8192,
             activation="squared_relu", norm="rmsnorm", position="none", bias=False,
             causal=True, tied_embeddings=False,
             layer_mixers=tuple(NEMOTRON_H_KINDS[c][0] for c in pattern),
             layer_ffns=tuple(NEMOTRON_H_KINDS[c][1] for c in pattern),
             mamba_heads=mamba_heads, mamba_head_dim=64, mamba_state=state, mamba_groups=8,
             mamba_conv=4, mamba_chunk=128)


#: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 hybrid_override_pattern (52 layers: 23 Mamba-2,
#: 23 MoE, 6 attention).
NEMOTRON_3_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def _nemotron_3_nano(M):
    # NVIDIA Nemotron 3 Nano 30B-A3B (NemotronHForCausalLM, config.json of
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): Nemotron-H's one-sublayer layers, 2688
    # wide, 32 query and 2 K/V heads of 128 without position embedding, Mamba-2 mixers of
    # 64 heads of 64 in 8 groups (state 128, conv 4, chunk 128), and 'E' layers of 128
    # squared-ReLU experts of 1,856 (top-6 by sigmoid scores plus the router's
    # e_score_correction_bias; n_group = topk_group = 1; routed_scaling_factor 2.5, no
    # weight) and one shared expert of 3,712; no MTP; vocab 131,072, untied. Sequence:
    # 8,192, Megatron-Bridge's nemotron_3_nano_pretrain_config seq_length (the config's
    # 262,144 is the extended context). 31,577,940,288 parameters, 3,580,076,352 active
    # (3.23 B without the input table; NVIDIA: "3.2B active (3.6B with embeddings), 31.6B
    # total"; Megatron-Bridge's docs and some cards round it to "3.5B active").
    return M(name="nemotron-3-nano-30b-a3b", n_layers=len(NEMOTRON_3_NANO), hidden=2688,
             heads=32, kv_heads=2, head_dim=128, ffn_hidden=1856, vocab=131072, seq_len=8192,
             activation="squared_relu", norm="rmsnorm", position="none", bias=False,
             causal=True, tied_embeddings=False,
             layer_mixers=tuple(NEMOTRON_H_KINDS[c][0] for c in NEMOTRON_3_NANO),
             layer_ffns=tuple(NEMOTRON_H_KINDS[c][1] for c in NEMOTRON_3_NANO),
             mamba_heads=64, mamba_head_dim=64, mamba_state=128, mamba_groups=8,
             mamba_conv=4, mamba_chunk=128, n_experts=128, experts_per_token=6,
             expert_ffn_hidden=1856, n_shared_experts=1, shared_ffn_hidden=3712,
             router_bias=True)


#: nvidia/NVIDIA-Nemotron-3-Super-120B-A12B hybrid_override_pattern (88 layers: 40 Mamba-2,
#: 40 MoE, 8 attention at 7, 16, 25, 36, 47, 58, 69, 78).
NEMOTRON_3_SUPER = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                    "EMEMEMEM*EMEMEMEME")


def _nemotron_3_super(M):
    # NVIDIA Nemotron 3 Super 120B-A12B (NemotronHForCausalLM, config.json of
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B; the same shapes in Megatron-Bridge's
    # Nemotron3SuperProvider): Nano's one-sublayer layers, 4096 wide, 32 query and 2 K/V
    # heads of 128 without position embedding, Mamba-2 mixers of 128 heads of 64 in 8 groups
    # (state 128, conv 4, chunk 128), and LatentMoE 'E' layers: fc1_latent_proj 4096 → 1024,
    # 512 squared-ReLU experts of 2,688 on the 1,024-wide latent (top-22 by sigmoid scores
    # plus e_score_correction_bias; n_group = topk_group = 1; routed_scaling_factor 5.0),
    # fc2_latent_proj 1024 → 4096, one shared expert of 5,376 at 4096; vocab 131,072, untied.
    # The config's MTP block (num_nextn_predict_layers 1, mtp_hybrid_override_pattern '*E':
    # an attention and a LatentMoE layer behind eh_proj; 2,942,325,248 parameters) is not
    # modelled: the step model holds one MTP layer kind. Sequence: 8,192, Megatron-Bridge's
    # nemotron_3_super_pretrain_config seq_length (262,144 is the extended context).
    # 120,668,707,840 parameters, 12,770,237,440 active (NVIDIA: "120B total, 12B active";
    # with the MTP block 123,611,033,088, the BF16 checkpoint's tensor total).
    return M(name="nemotron-3-super-120b-a12b", n_layers=len(NEMOTRON_3_SUPER), hidden=4096,
             heads=32, kv_heads=2, head_dim=128, ffn_hidden=2688, vocab=131072, seq_len=8192,
             activation="squared_relu", norm="rmsnorm", position="none", bias=False,
             causal=True, tied_embeddings=False,
             layer_mixers=tuple(NEMOTRON_H_KINDS[c][0] for c in NEMOTRON_3_SUPER),
             layer_ffns=tuple(NEMOTRON_H_KINDS[c][1] for c in NEMOTRON_3_SUPER),
             mamba_heads=128, mamba_head_dim=64, mamba_state=128, mamba_groups=8,
             mamba_conv=4, mamba_chunk=128, n_experts=512, experts_per_token=22,
             expert_ffn_hidden=2688, n_shared_experts=1, shared_ffn_hidden=5376,
             router_bias=True, moe_latent_size=1024)


def _gpt_oss(M, name, layers, experts):
    # openai/gpt-oss-20b and -120b config.json (GptOssForCausalLM): 2880 wide, 64 query
    # heads and 8 K/V heads of 64, biases on every linear layer and the router, a learned
    # sink logit per head, every layer an MoE of SwiGLU experts of width 2,880 (top-4),
    # layer_types alternating 128-token sliding-window and full attention from layer 0,
    # vocab 201,088, untied. Sequence: 4,096, initial_context_length and YaRN's
    # original_max_position_embeddings (the model card: pre-trained at 4K, extended to 131K).
    # 20,914,757,184 and 116,829,156,672 parameters; 4,187,440,704 and 5,711,982,912 active
    # (3.61 B and 5.13 B without the input table, as the model card counts them).
    return M(name=name, n_layers=layers, hidden=2880, heads=64, kv_heads=8, ffn_hidden=2880,
             vocab=201088, seq_len=4096, activation="swiglu", norm="rmsnorm", position="rotary",
             bias=True, causal=True, tied_embeddings=False, head_dim=64, n_experts=experts,
             experts_per_token=4, layer_mixers=("sliding", "attention") * (layers // 2),
             sliding_window=128, attention_sinks=True, router_bias=True)


def _gemma(M, name, layers, hidden, heads, kv, ffn, vocab, seq_len, mixers, window, qk_norm):
    # Google Gemma 2 / Gemma 3 (Gemma2ForCausalLM, Gemma3ForCausalLM): GeGLU MLP (tanh GELU),
    # RMSNorm before and after each sublayer, rotary positions, 256-wide heads, no biases,
    # tied embeddings; Gemma 3 adds RMSNorms over each query and key head.
    return M(name=name, n_layers=layers, hidden=hidden, heads=heads, kv_heads=kv, head_dim=256,
             ffn_hidden=ffn, vocab=vocab, seq_len=seq_len, activation="geglu", norm="rmsnorm",
             position="rotary", bias=False, causal=True, tied_embeddings=True,
             sandwich_norm=True, qk_norm=qk_norm, layer_mixers=mixers, sliding_window=window)


def zoo_2025(M) -> list:
    """The model families of 2025-26 (issue 27; sources in docs/fidelity-sources.md, "Model
    configs of 2025-26"; the config.json files in tests/data/hf/)."""
    llama4_mixers = ("chunked", "chunked", "chunked", "attention") * 12
    return [
        # deepseek-ai/DeepSeek-V3 config.json (arXiv:2412.19437 §4.2): 61 × 7168, 128 MLA
        # heads (q_lora 1536, kv_lora 512, 128 + 64 query/key dims, 128 value dims); the
        # first 3 layers dense (FFN 18,432), the other 58 with 256 routed experts of 2,048
        # (top-8 within 4 of 8 groups, sigmoid scores with a per-expert selection bias,
        # topk_method noaux_tc) and 1 shared; vocab 129,280; 1 multi-token-prediction module.
        # Sequence: 4,096, the pre-training length (§4.2; YaRN's
        # original_max_position_embeddings). 671,026,419,200 parameters, 37,552,297,472
        # active (36.6 B without the input table: "671B total, 37B activated"); the MTP
        # module 11,610,068,224 more (DeepSeek's "11.5B unique").
        _llama(M, "deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096, head_dim=128,
               n_experts=256, experts_per_token=8, expert_ffn_hidden=2048, n_shared_experts=1,
               first_dense_layers=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
               v_head_dim=128, router_bias=True, n_expert_groups=8, topk_groups=4,
               mtp_layers=1),
        # moonshotai/Kimi-K2-Base config.json (model_type kimi_k2, DeepseekV3ForCausalLM):
        # DeepSeek-V3's design with 64 MLA heads, 384 routed experts (top-8, no group
        # limit), 1 shared, 1 dense layer, vocab 163,840, no MTP module. Sequence: 4,096,
        # the pre-training length (Kimi K2 report, arXiv:2507.20534 §2.3; YaRN's
        # original_max_position_embeddings). 1,026,408,232,448 parameters, 32,861,500,928
        # active (31.7 B without the input table: "1T total, 32B activated").
        _llama(M, "kimi-k2", 61, 7168, 64, 64, 18432, 163840, 4096, head_dim=128,
               n_experts=384, experts_per_token=8, expert_ffn_hidden=2048, n_shared_experts=1,
               first_dense_layers=1, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
               v_head_dim=128, router_bias=True),
        # Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B config.json (Qwen3MoeForCausalLM): GQA
        # with 4 K/V heads of 128 and per-head q/k RMSNorms, every layer an MoE of 128
        # SwiGLU experts (top-8, no shared expert), vocab 151,936, untied. Sequence: 4,096,
        # the length of the general and reasoning pre-training stages before the
        # 32,768-token long-context stage (Qwen3 report, arXiv:2505.09388 §3.2).
        # 30,532,122,624 / 3,353,032,704 active ("30.5B, 3.3B activated") and
        # 235,093,634,560 / 22,190,763,520 ("235B, 22B activated").
        _llama(M, "qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, head_dim=128,
               qk_norm=True, n_experts=128, experts_per_token=8, expert_ffn_hidden=768),
        _llama(M, "qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096, head_dim=128,
               qk_norm=True, n_experts=128, experts_per_token=8, expert_ffn_hidden=1536),
        _gpt_oss(M, "gpt-oss-20b", 24, 32),
        _gpt_oss(M, "gpt-oss-120b", 36, 128),
        # meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E config.json,
        # text_config (the language model only; the vision encoder is not modelled): 48 ×
        # 5120, 40 query and 8 K/V heads of 128; three of every four layers use rotary
        # positions and chunked attention over 8,192-token chunks, the fourth no position
        # and full attention (no_rope_layers); MoE layers of 16 (Scout, every layer) or 128
        # (Maverick, every other layer from 1) experts of 8,192, top-1, and a shared expert;
        # Maverick's other layers a dense MLP of 16,384; the qk norm is weightless;
        # vocab 202,048, untied. Sequence: 8,192, Scout's original_max_position_embeddings
        # and the attention chunk (Meta publishes no pre-training length for Maverick).
        # 107,769,861,120 / 17,172,894,720 active and 400,711,848,960 / 17,184,691,200
        # (Meta's "109B" and "400B" totals include the vision encoder; "17B active").
        _llama(M, "llama4-scout", 48, 5120, 40, 8, 16384, 202048, 8192, head_dim=128,
               n_experts=16, experts_per_token=1, expert_ffn_hidden=8192, n_shared_experts=1,
               layer_mixers=llama4_mixers, attention_chunk=8192),
        _llama(M, "llama4-maverick", 48, 5120, 40, 8, 16384, 202048, 8192, head_dim=128,
               n_experts=128, experts_per_token=1, expert_ffn_hidden=8192, n_shared_experts=1,
               layer_ffns=("dense", "moe") * 24, layer_mixers=llama4_mixers,
               attention_chunk=8192),
        _nemotron_h(M, "nemotron-h-8b", NEMOTRON_H_8B, 4096, 32, 21504, 128, 128),
        _nemotron_h(M, "nemotron-h-56b", NEMOTRON_H_56B, 8192, 64, 32768, 256, 256),
        _nemotron_3_nano(M),
        _nemotron_3_super(M),
        # google/gemma-2-9b config.json: 42 × 3584, 16 query and 8 K/V heads, FFN 14,336,
        # vocab 256,000, every other layer (from 0) a 4,096-token sliding window. Sequence:
        # 8,192, its training context (Gemma 2 report, arXiv:2408.00118 §2). 9,241,705,984
        # parameters (the report's 917,504,000 embedding + 8,324,201,984 non-embedding).
        _gemma(M, "gemma-2-9b", 42, 3584, 16, 8, 14336, 256000, 8192,
               ("sliding", "attention") * 21, 4096, False),
        # google/gemma-3-12b-pt config.json, text_config (the vision encoder is not
        # modelled) with Gemma3TextConfig's defaults: 48 × 3840, 16 query and 8 K/V heads,
        # FFN 15,360, vocab 262,208, five 1,024-token sliding-window layers to one global.
        # Sequence: 32,768, the pre-training length before RoPE rescaling to 128K (Gemma 3
        # report, arXiv:2503.19786 §2.1). 11,766,034,176 parameters: the report's 10,759 M
        # non-embedding exactly, and 1,007 M embedding (the report lists 1,012 M).
        _gemma(M, "gemma-3-12b", 48, 3840, 16, 8, 15360, 262208, 32768,
               (("sliding",) * 5 + ("attention",)) * 8, 1024, True),
        # mistralai/Mistral-7B-v0.1 config.json: Llama's block with GQA (8 K/V heads), FFN
        # 14,336, every layer a 4,096-token sliding window (arXiv:2310.06825 Table 1).
        # Sequence: 8,192, the paper's context_len. 7,241,732,096 parameters.
        _llama(M, "mistral-7b", 32, 4096, 32, 8, 14336, 32000, 8192,
               layer_mixers=("sliding",) * 32, sliding_window=4096),
    ]
