"""What --emit prints is what was priced (issue 29 items 1, 3-7): each trainer's flags,
transcribed from its argument parser at a pinned commit, checked against the emitted
arguments of each zoo model family's best plan; the sequence, biases, rotary base and
shared-expert gate of the priced model appear in them; plans a trainer cannot run, or
that phaze calls infeasible, are refused in one sentence.

Pinned parsers (the flag lists below are transcribed from them by hand):

- Megatron-LM / Megatron-Core: NVIDIA/Megatron-LM commit
  d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22). ``megatron/training/arguments.py``
  (its literal ``add_argument`` calls) and the dataclasses it turns into flags through
  ``ArgumentGroupFactory`` (``megatron/training/argument_utils.py``: field ``a_b`` is
  ``--a-b``, a bool defaulting False is ``store_true``, a ``Literal`` gives the choices,
  ``argparse_meta`` ``arg_names`` renames): TransformerConfig
  (``megatron/core/transformer/transformer_config.py``, with ModelParallelConfig's fields),
  TrainingConfig and CheckpointConfig (``megatron/training/config/training_config.py``),
  DistributedInitConfig (``megatron/training/config/common_config.py``).
- Megatron-DeepSpeed: microsoft/Megatron-DeepSpeed commit
  f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (2024-12-24), ``megatron/arguments.py``, plus
  DeepSpeed's ``deepspeed.add_config_arguments`` (``--deepspeed``, ``--deepspeed_config``).

A flag maps to None (takes no value: store_true/store_false), a tuple (its choices) or a
type (one value of it). The real parsers are not imported here (Megatron-LM's needs torch;
Megatron-DeepSpeed is not on PyPI).
"""
import dataclasses
import json
import shlex

import pytest

from phaze import cli, launch, models, plan

MEGATRON_LM_FLAGS = {
    # parallelism and batch (ModelParallelConfig, TrainingConfig, arguments.py)
    "--tensor-model-parallel-size": int, "--pipeline-model-parallel-size": int,
    "--context-parallel-size": int, "--expert-model-parallel-size": int,
    "--num-layers-per-virtual-pipeline-stage": int,
    "--account-for-embedding-in-pipeline-split": None,
    "--account-for-loss-in-pipeline-split": None,
    "--micro-batch-size": int, "--global-batch-size": int, "--sequence-parallel": None,
    "--recompute-granularity": ("full", "selective"),
    "--recompute-method": ("uniform", "block"), "--recompute-num-layers": int,
    # data parallelism: distributed optimizer, Megatron-FSDP, torch FSDP2, checkpoints
    "--use-distributed-optimizer": None, "--use-megatron-fsdp": None,
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads",
                                          "optim_grads_params"),
    "--ckpt-format": ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"),
    "--use-torch-fsdp2": None, "--torch-fsdp2-no-reshard-after-forward": None,
    "--no-gradient-accumulation-fusion": None,
    "--overlap-grad-reduce": None, "--overlap-param-gather": None, "--tp-comm-overlap": None,
    "--use-flash-attn": None,
    # the loss (ModelParallelConfig: cross_entropy_loss_fusion, cross_entropy_fusion_impl)
    "--cross-entropy-loss-fusion": None, "--cross-entropy-fusion-impl": ("native", "te"),
    # the model (TransformerConfig, arguments.py "network size")
    "--num-layers": int, "--hidden-size": int, "--num-attention-heads": int,
    "--group-query-attention": None, "--num-query-groups": int, "--kv-channels": int,
    "--ffn-hidden-size": int, "--seq-length": int, "--max-position-embeddings": int,
    "--swiglu": None, "--squared-relu": None, "--normalization": ("LayerNorm", "RMSNorm"),
    "--position-embedding-type": ("learned_absolute", "rope", "yarn", "mrope", "relative",
                                  "none"),
    "--rotary-base": int, "--disable-bias-linear": None, "--add-qkv-bias": None,
    "--untie-embeddings-and-output-weights": None,
    # mixture of experts
    "--num-experts": int, "--moe-router-topk": int, "--moe-ffn-hidden-size": int,
    "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "--moe-shared-expert-intermediate-size": int, "--moe-shared-expert-gate": None,
    "--moe-layer-freq": str, "--moe-expert-capacity-factor": float,
    # datatypes
    "--bf16": None, "--fp16": None, "--fp8-format": ("e4m3", "hybrid"),
    "--fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "--fp4-format": ("e2m1",), "--fp4-recipe": ("nvfp4", "custom"),
    "--grad-reduce-in-bf16": None, "--accumulate-allreduce-grads-in-fp32": None,
    # multi-head latent attention and issue 27's rows
    "--multi-latent-attention": None, "--kv-lora-rank": int, "--q-lora-rank": int,
    "--qk-head-dim": int, "--qk-pos-emb-head-dim": int, "--v-head-dim": int,
    "--qk-layernorm": None, "--mtp-num-layers": int, "--moe-router-num-groups": int,
    "--moe-router-group-topk": int,
    # issue 27's families, as Megatron-LM's own tools and recipes pass them (not
    # transcribed from the pinned parser): the hybrid model's arguments as Megatron-LM's
    # hybrid checkpoint loaders build its sys.argv (--hybrid-override-pattern, --mamba-*;
    # pretrain_mamba.py), DeepSeek-V3's router (--moe-router-enable-expert-bias,
    # --moe-router-score-function sigmoid), GPT-OSS's recipe (softmax_type "learnable",
    # window_size "128,0", window_attn_skip_freq 2: TransformerConfig fields as flags)
    "--hybrid-override-pattern": str, "--mamba-state-dim": int, "--mamba-head-dim": int,
    "--mamba-num-groups": int, "--mamba-num-heads": int,
    "--moe-router-enable-expert-bias": None, "--moe-router-score-function": ("softmax",
                                                                             "sigmoid"),
    "--softmax-type": ("vanilla", "off-by-one", "learnable"), "--window-size": str,
    "--window-attn-skip-freq": int,
}

MEGATRON_DEEPSPEED_FLAGS = {
    "--tensor-model-parallel-size": int, "--pipeline-model-parallel-size": int,
    "--no-pipeline-parallel": None, "--micro-batch-size": int, "--global-batch-size": int,
    "--sequence-parallel": None, "--recompute-granularity": ("full", "selective"),
    "--checkpoint-activations": None, "--deepspeed-activation-checkpointing": None,
    "--use-flash-attn-v2": None,
    "--num-layers": int, "--hidden-size": int, "--num-attention-heads": int,
    "--num-key-value-heads": int, "--kv-channels": int, "--ffn-hidden-size": int,
    "--seq-length": int, "--max-position-embeddings": int, "--swiglu": None,
    "--squared-relu": None, "--normalization": ("layernorm", "rmsnorm"),
    "--use-rotary-position-embeddings": None, "--rotary-position-embeddings-theta": int,
    "--no-position-embedding": None, "--disable-bias-linear": None,
    "--untie-embeddings-and-output-weights": None,
    "--bf16": None, "--fp16": None, "--zero-stage": int,
    "--deepspeed": None, "--deepspeed_config": str,     # deepspeed.add_config_arguments
}


def parse(flags, arguments):
    """The pinned flag list as a parser: {flag: value or True}; AssertionError naming the
    first flag the trainer does not take, a missing or extra value, a value outside the
    choices or not of the flag's type."""
    out, i = {}, 0
    while i < len(arguments):
        flag = arguments[i]
        assert flag.startswith("--"), f"{flag!r}: a value without a flag"
        assert flag in flags, f"{flag}: not an argument of the pinned parser"
        kind = flags[flag]
        if kind is None:
            assert i + 1 == len(arguments) or arguments[i + 1].startswith("--"), \
                f"{flag} takes no value, got {arguments[i + 1]!r}"
            out[flag], i = True, i + 1
            continue
        assert i + 1 < len(arguments) and not arguments[i + 1].startswith("--"), \
            f"{flag} needs a value"
        value = arguments[i + 1]
        if isinstance(kind, tuple):
            assert value in kind, f"{flag} {value}: not one of {kind}"
        else:
            kind(value)
        out[flag], i = value, i + 2
    return out


def emitted(text):
    """(environment lines, the script's arguments, the ds_config or None) of --emit's text."""
    lines = text.splitlines()
    env = [ln for ln in lines if ln.startswith(("export ", "unset "))]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("pretrain_"))
    body = []
    for ln in lines[start:]:
        body.append(ln.rstrip("\\").strip())
        if not ln.endswith("\\"):
            break
    config = None
    if "# ds_config.json" in lines:
        config = json.loads("\n".join(lines[lines.index("# ds_config.json") + 1:]))
    return env, shlex.split(" ".join(body))[1:], config


def _search_emit(capsys, trainer, model_args, seq_len=2048):
    rc = cli.main(["search", *model_args, "--arch", "h200", "--devices", "32",
                   "--global-batch", "256", "--seq-len", str(seq_len), "--serial",
                   "--no-progress", "--emit", trainer])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


QWEN_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json (its published values)
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
    "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "vocab_size": 151936, "max_position_embeddings": 8192, "rope_theta": 1000000.0,
    "tie_word_embeddings": False, "decoder_sparse_step": 1, "norm_topk_prob": False,
    "hidden_act": "silu", "rms_norm_eps": 1e-06, "use_sliding_window": False,
}

#: One model of each zoo family (and a Qwen-MoE config): what its arguments must hold.
FAMILIES = [
    ("gpt2-xl", {"--position-embedding-type": None, "--disable-bias-linear": None}),
    ("bert-large", {}),
    ("megatron-1.7b", {}),
    ("gpt3-5b", {}),
    ("llama2-7b", {"--rotary-base": "10000", "--disable-bias-linear": True,
                   "--normalization": "RMSNorm", "--swiglu": True}),
    ("llama3-8b", {"--rotary-base": "500000", "--num-query-groups": "8",
                   "--group-query-attention": True}),
    ("qwen2-7b", {"--add-qkv-bias": True, "--disable-bias-linear": True,
                  "--rotary-base": "1000000"}),
    ("mixtral-8x7b", {"--num-experts": "8", "--moe-router-topk": "2",
                      "--rotary-base": "1000000"}),
    ("nemotron4-15b", {"--squared-relu": True, "--normalization": None}),
    ("nemotron-8b", {"--squared-relu": True}),
    ("deepseek-v2-lite", {"--multi-latent-attention": True, "--kv-lora-rank": "512",
                          "--qk-head-dim": "128", "--qk-pos-emb-head-dim": "64",
                          "--v-head-dim": "128", "--moe-shared-expert-intermediate-size":
                          "2816", "--kv-channels": None}),
    ("qwen3-30b-a3b", {"--qk-layernorm": True, "--num-experts": "128",
                       "--moe-router-topk": "8", "--moe-ffn-hidden-size": "768"}),
    ("gpt-oss-20b", {"--window-size": "128,0", "--window-attn-skip-freq": "2",
                     "--softmax-type": "learnable", "--disable-bias-linear": None,
                     "--moe-router-enable-expert-bias": None}),
    ("nemotron-h-8b", {"--hybrid-override-pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
                       "M-M-M-M-M*-M-M-M-M-M-", "--mamba-state-dim": "128",
                       "--mamba-head-dim": "64", "--mamba-num-groups": "8",
                       "--mamba-num-heads": "128", "--position-embedding-type": "none"}),
    ("mistral-7b", {"--window-size": "4096,0", "--window-attn-skip-freq": None}),
    ("nemotron-3-nano-30b-a3b", {"--num-experts": "128", "--hybrid-override-pattern":
                                 "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"}),
    (QWEN_MOE, {"--moe-shared-expert-gate": True, "--num-experts": "60",
                "--moe-shared-expert-intermediate-size": "5632", "--rotary-base": "1000000",
                "--add-qkv-bias": True}),
]


@pytest.mark.parametrize("model,want", FAMILIES,
                         ids=[m if isinstance(m, str) else "qwen1.5-moe" for m, _ in FAMILIES])
def test_megatron_arguments_of_each_family_best_plan(tmp_path, capsys, model, want):
    if isinstance(model, dict):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(model))
        args = ["--hf-config", str(path), "--name", "qwen1.5-moe"]
    else:
        args = ["--model", model]
    rc, out, err = _search_emit(capsys, "megatron", args)
    assert rc == 0, err
    env, arguments, _ = emitted(out)
    got = parse(MEGATRON_LM_FLAGS, arguments)
    # the priced model: the searched sequence, its biases, rotary base, experts' gate
    assert got["--seq-length"] == "2048"
    assert int(got["--max-position-embeddings"]) >= 2048
    for flag, value in want.items():
        if value is None:
            assert flag not in got, flag
        else:
            assert got.get(flag) == value, (flag, got.get(flag))
    if "--num-experts" in got and int(got["--tensor-model-parallel-size"]) > 1:
        assert "--sequence-parallel" in got   # Megatron-Core's MoE with tensor parallelism
    if int(got["--tensor-model-parallel-size"]) > 1 and "--use-megatron-fsdp" not in got:
        assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in env
    if "--use-megatron-fsdp" in got:
        assert got["--ckpt-format"] == "fsdp_dtensor"
        assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in env


@pytest.mark.parametrize("model,want", [
    ("gpt2-xl", {}),
    ("llama2-7b", {"--normalization": "rmsnorm", "--use-rotary-position-embeddings": True,
                   "--no-position-embedding": True,
                   "--rotary-position-embeddings-theta": "10000"}),
    ("llama3-8b", {"--num-key-value-heads": "8",
                   "--rotary-position-embeddings-theta": "500000"}),
    ("nemotron4-15b", {"--squared-relu": True}),
])
def test_deepspeed_arguments_of_each_family_best_plan(capsys, model, want):
    rc, out, err = _search_emit(capsys, "deepspeed", ["--model", model])
    assert rc == 0, err
    _, arguments, config = emitted(out)
    got = parse(MEGATRON_DEEPSPEED_FLAGS, arguments)
    assert got["--seq-length"] == "2048"
    for flag, value in want.items():
        assert got.get(flag) == value, (flag, got.get(flag))
    assert config["train_batch_size"] == 256
    if config["zero_optimization"]["stage"] >= 1:
        assert "overlap_comm" in config["zero_optimization"]


@pytest.mark.parametrize("model,words", [
    ("qwen2-7b", "Q/K/V biases"), ("mixtral-8x7b", "mixture of experts")])
def test_deepspeed_refuses_what_it_cannot_express(capsys, model, words):
    rc, out, err = _search_emit(capsys, "deepspeed", ["--model", model])
    assert rc == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and words in line and "emit megatron" in line


def test_deepseek_v3_arguments():
    """DeepSeek-V3's MLA, 256 routed experts and a shared one after three dense layers,
    group-limited sigmoid routing with the expert bias, one MTP module."""
    spec = models.get("deepseek-v3")
    assert plan.model_refusal("megatron", spec) is None
    got = parse(MEGATRON_LM_FLAGS, plan.model_arguments("megatron", spec))
    assert got["--num-experts"] == "256" and got["--moe-router-topk"] == "8"
    assert got["--moe-layer-freq"] == "[" + ",".join(["0"] * 3 + ["1"] * 58) + "]"
    assert got["--mtp-num-layers"] == "1"
    assert (got["--moe-router-num-groups"], got["--moe-router-group-topk"]) == ("8", "4")
    assert got["--moe-router-enable-expert-bias"] is True
    assert got["--moe-router-score-function"] == "sigmoid"
    assert got["--multi-latent-attention"] is True and got["--kv-lora-rank"] == "512"
    assert got["--q-lora-rank"] == "1536"


def test_hybrid_models_run_pretrain_mamba(capsys):
    rc, out, err = _search_emit(capsys, "megatron", ["--model", "nemotron-h-8b"])
    assert rc == 0, err
    assert "pretrain_mamba.py" in out and "pretrain_gpt.py" not in out


def test_models_megatron_cannot_be_told_are_refused(capsys):
    for model, words in (("opt-350m", "activation"), ("llama4-scout", "chunked"),
                         ("gemma-2-9b", "activation")):
        rc, out, err = _search_emit(capsys, "megatron", ["--model", model])
        assert rc == 2 and out == "" and words in err and "\n" not in err.strip()


# -- every plan shape through the pinned list -------------------------------------------

PLANS = [dict(zero_stage=z, reshard_after_forward=r, overlap_grad_reduce=o,
              overlap_param_gather=o, precision=dt)
         for z in (0, 1, 2, 3) for r in (True, False) for o in (False, True)
         for dt in ("bf16", "fp8", "fp8-current", "mxfp8", "nvfp4")
         if r or z == 3]


@pytest.mark.parametrize("knobs", PLANS)
def test_megatron_plan_arguments_parse(knobs):
    args = launch.megatron_arguments("llama3-8b", tensor_parallel=2, pipeline_parallel=1,
                                     data_parallel=4, microbatch=1, global_batch=64,
                                     sequence_parallel=True, **knobs)
    got = parse(MEGATRON_LM_FLAGS, args)
    z = knobs["zero_stage"]
    if z == 1:
        assert "--use-distributed-optimizer" in got
    elif z == 2 or (z == 3 and knobs["reshard_after_forward"]):
        assert got["--data-parallel-sharding-strategy"] == (
            "optim_grads" if z == 2 else "optim_grads_params")
        assert got["--ckpt-format"] == "fsdp_dtensor"
    elif z == 3:
        assert "--use-torch-fsdp2" in got and "--torch-fsdp2-no-reshard-after-forward" in got
        assert got["--ckpt-format"] == "torch_dist"
    env = launch.environment("megatron", tensor_parallel=2, pipeline_parallel=1,
                             data_parallel=4, microbatch=1, global_batch=64, **knobs)
    assert env == ([("CUDA_DEVICE_MAX_CONNECTIONS", None)] if z >= 2
                   else [("CUDA_DEVICE_MAX_CONNECTIONS", "1")])


def test_megatron_has_no_fsdp_beside_a_pipeline():
    with pytest.raises(launch.NotLaunchable, match="without pipeline parallelism"):
        launch.megatron_arguments("llama3-8b", tensor_parallel=1, pipeline_parallel=2,
                                  data_parallel=4, microbatch=1, global_batch=64,
                                  zero_stage=3)


def test_ds_config_says_overlap_comm_false_at_zero3():
    """DeepSpeed turns overlap_comm on by default at ZeRO-3 (deepspeed/runtime/zero/
    config.py: None → True for stage 3): a plan priced without overlap must say false."""
    _, cfg = launch.deepspeed_arguments("llama3-8b", tensor_parallel=1, pipeline_parallel=1,
                                        data_parallel=8, microbatch=1, global_batch=64,
                                        zero_stage=3)
    assert cfg["zero_optimization"] == {"stage": 3, "overlap_comm": False}


# -- the model table covers the ModelSpec ------------------------------------------------

def test_the_table_names_modelspec_fields_and_every_zoo_model_is_judged():
    """Every row reads real ModelSpec fields (no stale row); a field no row names is
    judged generically (refused at a non-neutral value): every zoo model is either written
    or refused in one sentence, never written as another model."""
    named = set()
    for row in plan.MODEL_FLAGS:
        named.update(row.fields)
    # issue 27's fields (/work/wt/CONTRACT27.md) have rows before the ModelSpec has them
    contract27 = set()
    fields = {f.name for f in dataclasses.fields(models.ModelSpec)}
    assert named <= fields | contract27
    # the fields of the ModelSpec this table was written against all have rows
    assert {"n_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "activation",
            "norm", "position", "bias", "qkv_bias", "tied_embeddings", "head_dim",
            "max_positions", "n_experts", "shared_expert_gate", "kv_lora_rank"} <= named
    names = models.names() if hasattr(models, "names") else list(models.ZOO)
    for name in names:
        spec = models.get(name)
        for trainer in ("megatron", "deepspeed"):
            why = plan.model_refusal(trainer, spec)
            if why is None:
                args = plan.model_arguments(trainer, spec)
                assert args[args.index("--seq-length") + 1] == str(spec.seq_len)
            else:
                assert "\n" not in why and spec.name in why


def test_a_new_field_at_a_new_value_is_refused_by_name():
    @dataclasses.dataclass(frozen=True)
    class Wider(models.ModelSpec):
        emit_test_norm: bool = False      # a field no row names (as issue 27's were)

    base = models.get("llama3-8b")
    spec = Wider(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                 emit_test_norm=True)
    why = plan.model_refusal("megatron", spec)
    assert "emit_test_norm" in why and "\n" not in why
    assert plan.model_refusal("megatron", Wider(**{
        f.name: getattr(base, f.name) for f in dataclasses.fields(base)})) is None


# -- evaluate --emit: the priced sequence, infeasible plans refused -----------------------

def _evaluate(capsys, *args):
    rc = cli.main(["evaluate", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_evaluate_emit_writes_the_priced_sequence(capsys):
    for seq in (2048, 4096):
        rc, out, err = _evaluate(capsys, "--model", "llama3-8b", "--arch", "h200", "--tp", "2",
                                 "--pp", "1", "--dp", "4", "--global-batch", "64",
                                 "--sequence-parallel", "--flash-attention", "--recompute",
                                 "--seq-len", str(seq), "--emit", "megatron")
        assert rc == 0, err
        got = parse(MEGATRON_LM_FLAGS, emitted(out)[1])
        assert got["--seq-length"] == str(seq) and got["--max-position-embeddings"] == str(seq)


def test_evaluate_emit_refuses_an_infeasible_plan(capsys):
    rc, out, err = _evaluate(capsys, "--model", "llama3-8b", "--arch", "h200", "--tp", "1",
                             "--pp", "1", "--dp", "8", "--global-batch", "64", "--emit",
                             "megatron")
    assert rc == 2 and out == ""
    assert "infeasible" in err and "GiB" in err and "\n" not in err.strip()
    # Megatron-Core's MoE at t = 2 without sequence parallelism: refused before its step
    rc, out, err = _evaluate(capsys, "--model", "mixtral-8x7b", "--arch", "h200", "--tp", "2",
                             "--pp", "4", "--dp", "4", "--ep", "4", "--global-batch", "64",
                             "--emit", "megatron")
    assert rc == 2 and out == "" and "sequence parallelism" in err


@pytest.mark.parametrize("args,refused", [
    (("--model", "llama3-8b", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "100"),
     "not divisible"),
    (("--model", "gpt2-xl", "--tp", "1", "--pp", "5", "--dp", "1", "--global-batch", "8"),
     "Megatron-LM"),
    (("--model", "mixtral-8x7b", "--tp", "2", "--pp", "1", "--dp", "4", "--ep", "4",
      "--sequence-parallel", "--global-batch", "64"), None),
])
def test_launchable_by_agrees_with_the_reason(capsys, args, refused):
    rc, out, err = _evaluate(capsys, *args, "--arch", "h200")
    line = next(ln for ln in out.splitlines() if "launchable by" in ln)
    if refused is None:
        # experts: Megatron-LM launches it, DeepSpeed's arguments do not hold experts
        assert "Megatron-LM" in line and "DeepSpeed" not in line
    else:
        assert "no trainer" in line or "Megatron-LM" not in line.split(":")[1].split("(")[0]
        assert refused in line or refused in out


def test_search_emit_restricts_to_the_trainers_plans():
    g = {n: None for n in plan.GRIDS}
    g.update(precision="bf16", grad_reduce_dtype="fp32", capacity_factor=None,
             reshard_after_forward=True)
    spec = models.get("llama3-8b")
    ds = plan.search_grids("deepspeed", g, [spec])
    assert ds["virtual_stages"] == (1,) and ds["context_parallel"] == (1,)
    # ZeRO 2-3 stay: both trainers shard without a pipeline (DeepSpeed's ZeRO, Megatron-FSDP);
    # the plan set drops them beside one (best_plans' launchable = the trainer)
    assert ds["zero_stage"] is None   # every stage (None: the whole grid)
    mg = plan.search_grids("megatron", g, [spec])
    assert mg["zero_stage"] is None and mg["virtual_stages"] is None
    with pytest.raises(ValueError, match="fp8"):
        plan.search_grids("deepspeed", dict(g, precision="fp8"), [spec])


def _zero3_search(capsys, *extra):
    rc = cli.main(["search", "--model", "llama3-8b", "--arch", "h200", "--devices", "8",
                   "--global-batch", "16", "--hbm-gib", "40", "--serial", "--no-progress",
                   *extra])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_search_emit_megatron_finds_megatron_fsdp_at_p1(capsys):
    """Issue 29 item 6: on 8 H200 cut to 40 GiB, llama3-8b's best plan shards parameters,
    gradients and optimizer state (ZeRO 3) at p = cp = 1, which Megatron-Core launches as
    Megatron-FSDP; ``--emit megatron`` used to search without ZeRO 3 (its grid dropped it
    because Megatron refuses it beside a pipeline) and emitted a slower ZeRO-1 plan."""
    rc, out, err = _zero3_search(capsys, "--emit", "megatron")
    assert rc == 0, err
    env, arguments, _ = emitted(out)
    got = parse(MEGATRON_LM_FLAGS, arguments)
    assert got["--pipeline-model-parallel-size"] == "1"
    assert "--context-parallel-size" not in got or got["--context-parallel-size"] == "1"
    assert "--use-megatron-fsdp" in got
    assert got["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert got["--ckpt-format"] == "fsdp_dtensor"
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in env
    # the same best as the search over every trainer's plans (it is a Megatron plan)
    rc, free, err = _zero3_search(capsys)
    assert rc == 0, err
    row = [x for x in free.splitlines() if x.startswith("llama3-8b ")]
    assert len(row) == 1 and " 3 " in row[0] and row[0] in out.splitlines()


def test_plan_set_follows_the_target_trainer():
    """best_plans(launchable=trainers): the plans enumerated are those the trainers launch
    (phaze.plan's rules): Megatron-LM's and DeepSpeed's ZeRO 2-3 only at p = 1 (beside a
    pipeline they have ZeRO 0-1), torchtitan's ZeRO 3 (FSDP2) beside any pipeline and no
    ZeRO 1-2; ZeRO over one rank (cp·d = 1) is no sharding and kept."""
    import itertools

    import numpy as np

    from phaze import step
    from phaze.arch import presets
    row = presets.get("h200")
    kw = dict(devices=8, global_batch=16, microbatch=1, hbm_bytes=40 * 2 ** 30,
              tensor_parallel=(1, 2), context_parallel=(1,))
    anyone = step.best_plans("llama3-8b", row, zero_stage=(0, 1, 3), **kw)[0]
    assert anyone["feasible"] and anyone["zero_stage"] == 3
    for trainers in (("megatron",), ("deepspeed",), ("megatron-lm", "torchtitan")):
        best = step.best_plans("llama3-8b", row, launchable=trainers, zero_stage=(0, 1, 3),
                               **kw)[0]
        assert best["feasible"] and best["zero_stage"] == 3, trainers
        assert best["pipeline_parallel"] == 1 and best["context_parallel"] == 1
        assert best["time_s"] == anyone["time_s"]
    spec = models.get("llama3-8b")
    combos = list(itertools.product((0, 1, 2, 3), (1, 2), (1, 2), (1, 2)))  # zero, p, d, cp
    cols = {k: np.array(c) for k, c in zip(
        ("zero_stage", "pipeline_parallel", "data_parallel", "context_parallel"),
        zip(*combos))}
    n = len(combos)
    cols.update(expert_parallel=np.ones(n, int), tensor_parallel=np.ones(n, int),
                virtual_stages=np.ones(n, int), overlap_grad_reduce=np.ones(n, bool))
    one = dict(precision="bf16", grad_reduce_dtype="fp32", reshard_after_forward=True,
               overlap_param_gather=True, optimizer="adam")
    by_hand = {
        ("megatron-lm",): lambda z, p, d, cp: cp * d == 1 or not (z >= 2 and p > 1),
        ("deepspeed",): lambda z, p, d, cp: cp * d == 1 or not (z >= 2 and p > 1),
        # FSDP2 or DDP; DDP neither beside cp (FSDP2 shards over it) nor beside a pipeline
        ("torchtitan",): lambda z, p, d, cp: cp * d == 1 or (
            z in (0, 3) and not (z == 0 and (cp > 1 or p > 1))),
    }
    for trainers, want in by_hand.items():
        got = plan.launched_mask(trainers, spec, cols, one)
        assert got.tolist() == [want(*c) for c in combos], trainers
    both = plan.launched_mask(("megatron-lm", "torchtitan"), spec, cols, one)
    assert both.tolist() == [by_hand[("megatron-lm",)](*c) or by_hand[("torchtitan",)](*c)
                             for c in combos]
    with pytest.raises(ValueError, match="not a trainer"):
        step.best_plans("llama3-8b", row, launchable=("nemo",), **kw)
