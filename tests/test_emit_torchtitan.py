"""``phaze evaluate --emit torchtitan``: torchtitan v0.2.0's TOML job config of a plan, and
the plans it refuses (issue 25 item 8)."""
import tomllib

import pytest

from phaze import cli, launch, plan

_PLAN = dict(tensor_parallel=8, pipeline_parallel=4, context_parallel=2, data_parallel=4,
             microbatch=1, global_batch=64, virtual_stages=2, sequence_parallel=True,
             flash_attention=True, zero_stage=3, recompute="selective", precision="fp8-tensorwise")


def test_fsdp_tp_pp_cp_plan_parses_with_exactly_its_keys():
    text = launch.emit("torchtitan", "llama3-70b", **_PLAN)
    assert "on 256 GPUs" in text                                      # 8 · 2 · 4 · 4
    assert ("# torchrun --nnodes 32 --nproc_per_node 8 -m torchtitan.train "
            "--job.config_file phaze_torchtitan.toml") in text
    cfg = tomllib.loads(text)
    assert cfg == launch.torchtitan_config("llama3-70b", **_PLAN)
    assert cfg == {
        "model": {"name": "llama3", "flavor": "70B", "converters": ["quantize.linear.float8"]},
        "training": {"seq_len": 8192, "mixed_precision_param": "bfloat16",
                     "local_batch_size": 16,                           # B / d = 64 / 4
                     "global_batch_size": 64, "mixed_precision_reduce": "float32"},
        "parallelism": {"pipeline_parallel_microbatch_size": 1,
                        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 4,
                        "fsdp_reshard_after_forward": "always", "tensor_parallel_degree": 8,
                        "enable_async_tensor_parallel": False, "pipeline_parallel_degree": 4,
                        "pipeline_parallel_layers_per_stage": 10,       # 80 / (4 · 2)
                        "pipeline_parallel_first_stage_less_layers": 0,
                        "pipeline_parallel_last_stage_less_layers": 0,
                        "pipeline_parallel_schedule": "Interleaved1F1B",
                        "context_parallel_degree": 2},
        "compile": {"enable": False},
        "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
        "quantize": {"linear": {"float8": {"recipe_name": "tensorwise"}}}}
    assert "[quantize.linear.float8]\nrecipe_name = \"tensorwise\"" in text
    # torchtitan's batch arithmetic (train.py): global = local × dp_replicate × dp_shard ×
    # accumulation steps, here 1; the pipeline splits the local batch into B/(b·d) = 16.
    t, p = cfg["training"], cfg["parallelism"]
    assert t["global_batch_size"] == t["local_batch_size"] * p["data_parallel_shard_degree"]
    assert t["local_batch_size"] // p["pipeline_parallel_microbatch_size"] == 16


def test_ddp_accumulation_full_recompute_and_notes():
    text = launch.emit("torchtitan", "llama3-8b", tensor_parallel=1, pipeline_parallel=1,
                       data_parallel=8, microbatch=2, global_batch=64, recompute=True,
                       zero_stage=0, reshard_after_forward=False)
    cfg = tomllib.loads(text)
    assert cfg["training"]["local_batch_size"] == 2 and cfg["training"]["global_batch_size"] == 64
    # 64 / (2 · 8) = 4 accumulation steps, as torchtitan's train.py derives them
    assert cfg["training"]["global_batch_size"] // (2 * 8) == 4
    assert cfg["parallelism"]["data_parallel_replicate_degree"] == 8
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 1
    assert "fsdp_reshard_after_forward" not in cfg["parallelism"]
    assert "pipeline_parallel_schedule" not in cfg["parallelism"]
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert "converters" not in cfg["model"]
    assert "# note: torchtitan always runs fused attention" in text
    # tensor parallelism without sequence parallelism: emitted with a note
    text = launch.emit("torchtitan", "llama3-8b", tensor_parallel=8, pipeline_parallel=2,
                       data_parallel=2, microbatch=1, global_batch=16, zero_stage=3,
                       flash_attention=True, reshard_after_forward=False)
    assert "always shards the norms over the sequence" in text
    cfg = tomllib.loads(text)
    assert cfg["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert cfg["parallelism"]["pipeline_parallel_layers_per_stage"] == 16


_BASE = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
             global_batch=16, zero_stage=3, flash_attention=True)


@pytest.mark.parametrize("model,kw,why", [
    ("llama2-7b", {}, "torchtitan has no model flavor for llama2-7b; emit megatron"),
    ("mixtral-8x7b", {}, "torchtitan has no model flavor for mixtral-8x7b; emit megatron"),
    ("deepseek-v2-lite", {}, "torchtitan has no model flavor for deepseek-v2-lite; emit "
                             "megatron"),
    ("llama3-8b", dict(zero_stage=0, tensor_parallel=2),
     "torchtitan's DDP (ZeRO 0) runs on a one-dimensional mesh only (\"DDP has not supported "
     "> 1D parallelism\"); use ZeRO 3 (FSDP2) with tensor or pipeline parallelism"),
    ("llama3-8b", dict(zero_stage=0, context_parallel=2, data_parallel=4),
     "torchtitan shards the parameters over the context-parallel ranks (FSDP2 on dp_shard × "
     "cp) whatever the ZeRO stage; use ZeRO 3 with context parallelism"),
    ("llama3-8b", dict(virtual_stages=2),
     "torchtitan's interleaved schedule (virtual stages > 1) needs pipeline parallelism "
     "(p >= 2)"),
    ("llama3.1-405b", dict(pipeline_parallel=4, data_parallel=2),
     "the torchtitan stages written here hold 126 / (p × v) transformer layers each, and "
     "126 is not divisible by p × v = 4"),
    ("llama3-8b", dict(zero_stage=1),
     "torchtitan shards with FSDP2 (ZeRO 3) or replicates with DDP (ZeRO 0); it has no ZeRO "
     "stage 1"),
    ("llama3-8b", dict(precision="fp16"),
     "torchtitan trains in bf16, fp8 through torchao's float8 converters (fp8-tensorwise, "
     "fp8-rowwise) or mxfp8 through its mx converter, not fp16"),
    ("llama3-8b", dict(grad_reduce_dtype="bf16"),
     "torchtitan reduces gradients in float32 (mixed_precision_reduce), not bf16"),
])
def test_refusals_in_one_sentence(model, kw, why):
    with pytest.raises(launch.NotLaunchable) as err:
        launch.emit("torchtitan", model, **dict(_BASE, **kw))
    assert str(err.value) == why


def test_expert_parallel_rule_and_writer():
    """No zoo mixture of experts has a torchtitan flavor, so the expert keys are checked on
    the rule and the writer themselves (torchtitan v0.2.0 parallel_dims.py, etp = tp)."""
    v = dict(plan.Plan(expert_parallel=4, data_parallel=4, zero_stage=0,
                       master_weights="params").as_dict(),
             n_layers=32, n_experts=8, moe=True)
    assert plan.refusal("torchtitan", v, ("emit",)).startswith(
        "torchtitan's expert parallelism takes its ranks from FSDP2's shard")
    v.update(zero_stage=3, expert_parallel=3, n_experts=9, data_parallel=6, context_parallel=2,
             tensor_parallel=2)
    assert "ep = 3 divisible by cp = 2" in plan.refusal("torchtitan", v, ("emit",))
    v.update(expert_parallel=4, n_experts=8, data_parallel=4)
    assert plan.refusal("torchtitan", v, ("emit",)) is None
    write = dict(plan.ARGUMENTS["torchtitan"])["expert_parallel"]
    assert write(v) == [("parallelism.expert_parallel_degree", 4),
                        ("parallelism.expert_tensor_parallel_degree", 2)]


def test_writers_match_the_knob_table():
    """Every key the torchtitan writer produces is named by its knob's ``torchtitan`` field
    (written ``--section.key``)."""
    values = dict(plan.Plan(tensor_parallel=2, pipeline_parallel=2, context_parallel=2,
                            expert_parallel=2, virtual_stages=2, recompute="selective",
                            zero_stage=3, precision="fp8-tensorwise").as_dict(), n_layers=8, moe=True)
    seen = 0
    for name, write in plan.ARGUMENTS["torchtitan"]:
        if name == plan.MODEL_ARGUMENTS:
            continue
        for key, _ in write(values):
            assert f"--{key}" in plan.KNOB[name].torchtitan, (name, key)
            seen += 1
    assert seen >= 18
    assert "torchtitan" in launch.TRAINERS


def test_cli_emit_torchtitan(capsys):
    # (on a chip where the plan fits: --emit refuses an infeasible plan, issue 29)
    assert cli.main(["evaluate", "--model", "llama3-8b", "--arch", "h200", "--tp", "1",
                     "--pp", "1", "--dp", "8", "--zero-stage", "3", "--global-batch", "16",
                     "--flash-attention", "--emit", "torchtitan"]) == 0
    cfg = tomllib.loads(capsys.readouterr().out)
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 8
    assert cfg["training"]["local_batch_size"] == 1 and cfg["training"]["global_batch_size"] == 16


def test_cli_emit_torchtitan_refuses_in_one_sentence(capsys):
    assert cli.main(["evaluate", "--model", "llama2-7b", "--tp", "1", "--pp", "1", "--dp", "8",
                     "--zero-stage", "3", "--global-batch", "16", "--emit", "torchtitan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--emit torchtitan: torchtitan cannot launch this plan: torchtitan has "
                        "no model flavor for llama2-7b; emit megatron")


def test_tp_comm_overlap_is_async_tp_with_compile():
    """Megatron-Core's --tp-comm-overlap knob is torchtitan's async TP, which needs
    torch.compile (torchtitan v0.2.0 distributed/tensor_parallel.py)."""
    cfg = launch.torchtitan_config("llama3-8b", tensor_parallel=8, pipeline_parallel=1,
                                   data_parallel=2, microbatch=1, global_batch=16,
                                   zero_stage=3, flash_attention=True, sequence_parallel=True,
                                   tp_comm_overlap=True)
    assert cfg["parallelism"]["enable_async_tensor_parallel"] is True
    assert cfg["compile"] == {"enable": True}
