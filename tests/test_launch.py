"""phaze.launch and ``phaze evaluate --emit``: launch arguments of a plan for Megatron-LM
and Megatron-DeepSpeed, and the plans they refuse (issue 16 item 3)."""
import json

import pytest

from phaze import cli, launch


def _flags(args):
    """{flag: value or True} of an argument list."""
    out, key = {}, None
    for a in args:
        if a.startswith("--"):
            key = a
            out[key] = True
        else:
            out[key] = a if out[key] is True else f"{out[key]} {a}"
    return out


def test_megatron_interleaved_full_recompute_zero1():
    args = launch.megatron_arguments(
        "llama2-7b", tensor_parallel=2, pipeline_parallel=4, data_parallel=8, microbatch=1,
        global_batch=512, recompute="full", virtual_stages=2, sequence_parallel=True,
        flash_attention=True, zero_stage=1, overlap_grad_reduce=True)
    f = _flags(args)
    assert f["--tensor-model-parallel-size"] == "2" and f["--pipeline-model-parallel-size"] == "4"
    assert f["--num-layers-per-virtual-pipeline-stage"] == "4"         # 32 / (4 · 2)
    assert f["--micro-batch-size"] == "1" and f["--global-batch-size"] == "512"
    assert f["--recompute-granularity"] == "full" and f["--recompute-method"] == "uniform"
    assert f["--recompute-num-layers"] == "1"
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--use-flash-attn",
                 "--overlap-grad-reduce", "--bf16", "--swiglu", "--disable-bias-linear"):
        assert f[flag] is True
    assert (f["--num-layers"], f["--hidden-size"], f["--num-attention-heads"],
            f["--ffn-hidden-size"], f["--seq-length"], f["--max-position-embeddings"]) == \
        ("32", "4096", "32", "11008", "4096", "4096")
    assert f["--normalization"] == "RMSNorm" and f["--position-embedding-type"] == "rope"


def test_megatron_plain_plan_and_gqa():
    f = _flags(launch.megatron_arguments(
        "llama3-70b", tensor_parallel=8, pipeline_parallel=4, data_parallel=2, microbatch=1,
        global_batch=64, recompute="selective", precision="fp16"))
    assert f["--recompute-granularity"] == "selective" and "--recompute-method" not in f
    assert f["--group-query-attention"] is True and f["--num-query-groups"] == "8"
    assert f["--fp16"] is True and "--bf16" not in f
    for flag in ("--num-layers-per-virtual-pipeline-stage", "--use-distributed-optimizer",
                 "--sequence-parallel", "--use-flash-attn"):
        assert flag not in f
    # sequence parallelism at t = 1 is what Megatron-LM runs: off
    f = _flags(launch.megatron_arguments(
        "gpt2-xl", tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=4,
        global_batch=512, recompute=True, sequence_parallel=True))
    assert "--sequence-parallel" not in f and f["--recompute-granularity"] == "full"


def test_deepspeed_arguments_and_config():
    args, cfg = launch.deepspeed_arguments(
        "gpt2-xl", tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=2,
        global_batch=512, recompute="full", zero_stage=3, overlap_grad_reduce=True)
    f = _flags(args)
    assert f["--deepspeed"] is True and f["--deepspeed_config"] == "ds_config.json"
    assert f["--zero-stage"] == "3" and f["--no-pipeline-parallel"] is True
    assert f["--checkpoint-activations"] is True and f["--deepspeed-activation-checkpointing"]
    assert cfg["train_batch_size"] == 512 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 32
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * 8)
    assert cfg["zero_optimization"] == {"stage": 3, "overlap_comm": True}
    assert cfg["bf16"] == {"enabled": True} and "activation_checkpointing" in cfg
    args, cfg = launch.deepspeed_arguments(
        "megatron-1.7b", tensor_parallel=2, pipeline_parallel=4, data_parallel=2, microbatch=2,
        global_batch=64, precision="fp16", zero_stage=1)
    f = _flags(args)
    assert "--no-pipeline-parallel" not in f and f["--pipeline-model-parallel-size"] == "4"
    assert cfg["fp16"]["enabled"] is True and "bf16" not in cfg
    assert "activation_checkpointing" not in cfg and cfg["gradient_accumulation_steps"] == 16


@pytest.mark.parametrize("fn,kw,words", [
    # issue 16: the GPT-3 plan with p = 17 (96 layers) and d = 15 (4096 samples)
    (launch.megatron_arguments, dict(model="gpt3-175b", tensor_parallel=8, pipeline_parallel=16,
                                     data_parallel=15, microbatch=1, global_batch=4096),
     "not divisible by microbatch × data parallel"),
    (launch.megatron_arguments, dict(model="gpt3-175b", tensor_parallel=8, pipeline_parallel=17,
                                     data_parallel=16, microbatch=1, global_batch=4096),
     "not divisible by p = 17"),
    # Megatron-Core's ZeRO 2-3 is Megatron-FSDP, which runs without pipeline parallelism
    (launch.megatron_arguments, dict(model="gpt2-xl", tensor_parallel=1, pipeline_parallel=2,
                                     data_parallel=4, microbatch=1, global_batch=64,
                                     zero_stage=2), "runs without pipeline parallelism"),
    (launch.megatron_arguments, dict(model="llama2-7b", tensor_parallel=1, pipeline_parallel=4,
                                     data_parallel=1, microbatch=1, global_batch=6,
                                     virtual_stages=2), "divisible by p = 4"),
    (launch.megatron_arguments, dict(model="llama2-7b", tensor_parallel=1, pipeline_parallel=4,
                                     data_parallel=1, microbatch=1, global_batch=8,
                                     virtual_stages=3), "p × v = 12"),
    (launch.megatron_arguments, dict(model="gpt2-xl", tensor_parallel=2, pipeline_parallel=1,
                                     data_parallel=1, microbatch=1, global_batch=8),
     "does not divide the heads"),
    (launch.deepspeed_arguments, dict(model="gpt2-xl", tensor_parallel=1, pipeline_parallel=2,
                                      data_parallel=4, microbatch=1, global_batch=64,
                                      zero_stage=3), "ZeRO stage 3 with pipeline"),
    (launch.deepspeed_arguments, dict(model="llama2-7b", tensor_parallel=1, pipeline_parallel=4,
                                      data_parallel=1, microbatch=1, global_batch=8,
                                      virtual_stages=2), "no interleaved schedule"),
])
def test_refusals(fn, kw, words):
    model = kw.pop("model")
    with pytest.raises(launch.NotLaunchable, match=words) as info:
        fn(model, **kw)
    assert "\n" not in str(info.value)


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="recompute"):
        launch.megatron_arguments("gpt2-xl", tensor_parallel=1, pipeline_parallel=1,
                                  data_parallel=1, microbatch=1, global_batch=8, recompute="x")
    with pytest.raises(ValueError, match="trainer"):
        launch.emit("fsdp", "gpt2-xl", tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                    microbatch=1, global_batch=8)


def test_cli_emit(capsys):
    rc = cli.main(["evaluate", "--model", "llama2-7b", "--tp", "2", "--pp", "4", "--dp", "8",
                   "--global-batch", "512", "--recompute", "--emit", "megatron"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("# Megatron-LM")
    assert "--pipeline-model-parallel-size 4" in out and "--recompute-granularity full" in out
    rc = cli.main(["evaluate", "--model", "gpt2-xl", "--tp", "1", "--pp", "2", "--dp", "4",
                   "--global-batch", "64", "--emit", "deepspeed"])
    assert rc == 0
    out = capsys.readouterr().out
    cfg = json.loads(out.split("# ds_config.json\n", 1)[1])
    assert cfg["gradient_accumulation_steps"] == 16 and cfg["zero_optimization"]["stage"] == 0


def test_cli_emit_refuses_in_one_sentence(capsys):
    rc = cli.main(["evaluate", "--model", "gpt3-175b", "--tp", "8", "--pp", "17", "--dp", "15",
                   "--emit", "megatron"])
    assert rc == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert "Megatron-LM cannot launch this plan" in cap.err
    assert len(cap.err.strip().splitlines()) == 1


def test_fp8():
    f = _flags(launch.megatron_arguments("llama2-7b", tensor_parallel=1, pipeline_parallel=1,
                                         data_parallel=8, microbatch=1, global_batch=64,
                                         precision="fp8"))
    assert f["--bf16"] is True and f["--fp8-format"] == "hybrid"
    with pytest.raises(launch.NotLaunchable, match="fp8"):
        launch.deepspeed_arguments("llama2-7b", tensor_parallel=1, pipeline_parallel=1,
                                   data_parallel=8, microbatch=1, global_batch=64,
                                   precision="fp8")


def test_context_and_expert_parallel_arguments():
    """Megatron-Core's --context-parallel-size and --expert-model-parallel-size, the MoE
    shape (experts, top-k, expert width, shared experts, the dense/MoE layer pattern) and
    the GPUs t·cp·p·d; ep must divide the experts and cp·d; cp needs flash attention."""
    from phaze import launch

    args = launch.megatron_arguments("mixtral-8x7b", tensor_parallel=2, pipeline_parallel=4,
                                     data_parallel=4, microbatch=1, global_batch=64,
                                     context_parallel=2, expert_parallel=8,
                                     flash_attention=True, sequence_parallel=True,
                                     capacity_factor=1.25)
    text = " ".join(args)
    for flag in ("--context-parallel-size 2", "--expert-model-parallel-size 8",
                 "--num-experts 8", "--moe-router-topk 2", "--moe-expert-capacity-factor 1.25"):
        assert flag in text, flag
    assert "--moe-layer-freq" not in text            # every layer is an MoE layer
    ds = " ".join(launch.megatron_arguments("mixtral-8x7b", tensor_parallel=1,
                                            pipeline_parallel=1, data_parallel=8,
                                            microbatch=1, global_batch=8))
    assert "--expert-model-parallel-size" not in ds and "--context-parallel-size" not in ds
    assert "on 256 GPUs" in launch.emit("megatron", "mixtral-8x7b", tensor_parallel=2,
                                        pipeline_parallel=4, data_parallel=16, microbatch=1,
                                        global_batch=64, context_parallel=2,
                                        flash_attention=True, sequence_parallel=True)
    with pytest.raises(launch.NotLaunchable, match="must divide the experts"):
        launch.megatron_arguments("mixtral-8x7b", tensor_parallel=1, pipeline_parallel=1,
                                  data_parallel=4, microbatch=1, global_batch=8,
                                  expert_parallel=8)
    with pytest.raises(launch.NotLaunchable, match="fused attention kernel"):
        launch.megatron_arguments("llama3-8b", tensor_parallel=1, pipeline_parallel=1,
                                  data_parallel=2, microbatch=1, global_batch=8,
                                  context_parallel=2)
    with pytest.raises(launch.NotLaunchable, match="emit megatron"):
        launch.deepspeed_arguments("mixtral-8x7b", tensor_parallel=1, pipeline_parallel=1,
                                   data_parallel=8, microbatch=1, global_batch=8)
    # multi-head latent attention is written now (issue 29: Megatron-Core's MLA arguments);
    # Megatron-DeepSpeed has none and refuses it
    args = launch.megatron_arguments("deepseek-v2-lite", tensor_parallel=1, pipeline_parallel=1,
                                     data_parallel=8, microbatch=1, global_batch=8)
    assert "--multi-latent-attention" in args
    with pytest.raises(launch.NotLaunchable, match="multi-head latent attention|mixture"):
        launch.deepspeed_arguments("deepseek-v2-lite", tensor_parallel=1, pipeline_parallel=1,
                                   data_parallel=8, microbatch=1, global_batch=8)
