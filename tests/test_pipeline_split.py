"""Pipeline splits counting the embedding and the loss as layers (issue 25; Megatron-Core's
--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split): Llama 3
405B's 126 layers over 16 stages, as the layer counts, the step, the memory of every stage
and the launch arguments."""
import pytest

from phaze import launch, plan, step

KW = dict(tensor_parallel=8, pipeline_parallel=16, data_parallel=2, microbatch=1,
          global_batch=64, recompute="full", flash_attention=True, sequence_parallel=True)


def test_stage_layers_by_hand():
    assert step.stage_layers(126, 16, 1, True) == [7] + [8] * 14 + [7]
    # interleaved, v = 4: 64 chunks of 128/64 = 2, the first and last chunk 1
    assert step.stage_layers(126, 16, 4, True) == [7] + [8] * 14 + [7]
    assert step.stage_layers(96, 8) == [12] * 8
    for bad in ((126, 16, 1, False), (126, 1, 1, True), (126, 16, 8, True)):
        with pytest.raises(ValueError):
            step.stage_layers(*bad)


def test_126_layers_over_16_stages():
    even = step.training_step("llama3.1-405b", "h100-sxm", **KW)
    assert even.status == "infeasible" and "account_for_embedding" in even.reason
    r = step.training_step("llama3.1-405b", "h100-sxm", account_for_embedding=True, **KW)
    assert r.ok, r.reason
    state = [m.layer_param_state for m in r.memory]
    # every middle stage holds 8 layers, the end stages 7: their layers' state 8 : 7
    assert state[1] * 7 == state[0] * 8 and state[1] == state[14] and state[15] == state[0]
    # the slot is set by a stage of 8 blocks, not the first one's 7 and the embedding
    assert r.breakdown.critical_stage not in (0,)


def test_megatron_arguments_and_refusals():
    args = launch.megatron_arguments("llama3.1-405b", account_for_embedding=True, **KW)
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    with pytest.raises(launch.NotLaunchable) as err:
        launch.megatron_arguments("llama3.1-405b", **KW)
    assert "account_for_embedding" in str(err.value)
    why = plan.refusal("deepspeed", dict(KW, account_for_embedding=True, n_layers=126,
                                         n_experts=0, moe=False))
    assert why is not None


def test_search_finds_the_split_where_the_even_one_cannot_run():
    from phaze.arch import presets
    row = presets.get("h100-sxm")
    kw = dict(devices=1024, global_batch=1024, microbatch=1, recompute="full",
              zero_stage=(0, 1))
    with_split = step.best_plans("llama3.1-405b", row, **kw)[0]
    even_only = step.best_plans("llama3.1-405b", row, account_for_embedding=(False,), **kw)[0]
    assert with_split["time_s"] <= even_only["time_s"]
    if with_split["account_for_embedding"]:
        assert 126 % with_split["pipeline_parallel"] != 0


def test_torchtitan_writes_the_split_as_its_default():
    """torchtitan's pipeline split counts the embedding and the output as one layer each
    when its first/last_stage_less_layers are 1: (126 + 2)/8 = 16 layers per stage."""
    import tomllib

    kw = dict(tensor_parallel=8, pipeline_parallel=8, data_parallel=8, microbatch=1,
              global_batch=64, recompute="full", flash_attention=True, sequence_parallel=True,
              zero_stage=3, account_for_embedding=True)
    text = launch.emit("torchtitan", "llama3.1-405b", **kw)
    text = text if isinstance(text, str) else "\n".join(map(str, text))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    par = tomllib.loads(body)["parallelism"]
    assert par["pipeline_parallel_layers_per_stage"] == 16
    assert par["pipeline_parallel_first_stage_less_layers"] == 1
    assert par["pipeline_parallel_last_stage_less_layers"] == 1
