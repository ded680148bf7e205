"""Where the fp32 master weights live (plan knob ``master_weights``; phaze/step/_optim.py):
"separate" (Megatron-LM, DeepSpeed: 16-bit weights beside the optimizer's fp32 copy) or
"params" (PyTorch FSDP2 as torchtitan and NeMo AutoModel run it, JAX's fp32 parameters:
the parameters are the master weights, the gradients fp32). Memory and optimizer bytes by
hand, the search's plan memory equal to training_step's, the trainers that launch each, the
validation rows' defaults by trainer."""
import pytest

from phaze import cli, plan, step, validate
from phaze.step import _optim

KW = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
          global_batch=64, recompute="full")


def _step(model="llama3-8b", arch="h100-sxm", **kw):
    return step.training_step(model, arch, **dict(KW, **kw))


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_memory_by_hand(zero):
    sep = _step(zero_stage=zero)
    par = _step(zero_stage=zero, master_weights="params")
    # every parameter of the stage (p = 1: all of them), over its shards at this stage
    n = sep.memory[0].weights / 2 * (8 if zero >= 3 else 1)
    w_div = 8 if zero >= 3 else 1
    g_div = 8 if zero >= 2 else 1
    o_div = 8 if zero >= 1 else 1
    s, q = sep.memory[0], par.memory[0]
    assert s.weights == pytest.approx(2 * n / w_div, rel=1e-9)
    assert s.gradients == pytest.approx(4 * n / g_div, rel=1e-9)
    assert s.optimizer_state == pytest.approx(12 * n / o_div, rel=1e-9)
    assert q.weights == pytest.approx(4 * n / w_div, rel=1e-9)
    assert q.gradients == pytest.approx(4 * n / g_div, rel=1e-9)
    assert q.optimizer_state == pytest.approx(8 * n / o_div, rel=1e-9)
    # activations and workspace are the same
    assert q.activations == s.activations and q.workspace == s.workspace
    # at ZeRO 3 the two hold the same 18 - 16 = 2 B/param over 8 shards apart
    if zero == 3:
        assert s.total - q.total == pytest.approx(2 * n / 8, rel=1e-9)


def test_params_grads_are_fp32_whatever_the_reduction():
    par = _step(zero_stage=3, master_weights="params", grad_reduce_dtype="bf16")
    sep = _step(zero_stage=3, grad_reduce_dtype="bf16")
    assert par.memory[0].gradients == 2 * sep.memory[0].gradients


def test_optimizer_step_bytes_by_hand():
    # Adam at fp32 state, bf16 training: 42 B/param with a separate master (norm 4, Adam 28,
    # copy to the 16-bit weights 6, zero the gradients 4), 32 B where the parameters are it
    sep = _step(zero_stage=3)
    par = _step(zero_stage=3, master_weights="params")
    assert _optim.hbm_bytes("adam", "fp32", "bf16") == 42
    assert 42 - _optim.PARAMS_STEP_SAVED_BYTES == 32
    # the elementwise step is memory-bound: bytes over the HBM rate plus the same launches,
    # so the two differ by 10 B/param at the HBM rule
    from phaze.arch import efficiency, presets
    e = efficiency.get("h100-sxm")
    bw = e.hbm_efficiency * float(presets.get("h100-sxm")["hbm_gb_per_s"][0]) * 1e9
    n = sep.memory[0].optimizer_state / 12   # the rank's share of the parameters
    assert sep.breakdown.optimizer_s - par.breakdown.optimizer_s == pytest.approx(
        10 * n / bw, rel=0.02)


def test_best_plans_memory_equals_training_step():
    import numpy as np
    from phaze.arch import presets
    row = presets.get("h100-sxm")
    for mw in ("separate", "params"):
        ref = step.best_plans("llama3-8b", row, devices=8, global_batch=64, microbatch=1,
                              recompute="full", tensor_parallel=(1,), zero_stage=(3,),
                              context_parallel=(1,), master_weights=mw, launchable=False)
        r = ref[0]
        res = step.training_step("llama3-8b", "h100-sxm", tensor_parallel=1,
                                 pipeline_parallel=int(r["pipeline_parallel"]),
                                 data_parallel=int(r["data_parallel"]), microbatch=1,
                                 global_batch=64, recompute="full", zero_stage=3,
                                 virtual_stages=int(r["virtual_stages"]),
                                 sequence_parallel=bool(r["sequence_parallel"]),
                                 flash_attention=bool(r["flash_attention"]),
                                 overlap_grad_reduce=bool(r["overlap_grad_reduce"]),
                                 overlap_param_gather=bool(r["overlap_param_gather"]),
                                 account_for_embedding=bool(r["account_for_embedding"]),
                                 master_weights=mw)
        assert r["time_s"] == pytest.approx(res.time_s, rel=1e-12)
        assert int(r["weights_bytes"]) == res.memory[0].weights
        assert int(r["optimizer_bytes"]) == res.memory[0].optimizer_state
        assert np.isfinite(r["time_s"])


def test_trainers_that_launch_each():
    base = dict(zero_stage=3, data_parallel=8)
    assert "torchtitan" in plan.launchers(dict(base, master_weights="params"))
    assert "megatron-lm" not in plan.launchers(dict(base, master_weights="params"))
    assert "torchtitan" not in plan.launchers(dict(base))
    why = plan.launch_refusal("megatron", dict(base, master_weights="params"))
    assert why and "Megatron-LM keeps fp32 main parameters" in why
    why = plan.launch_refusal("deepspeed", dict(base, master_weights="params"))
    assert why and "DeepSpeed keeps fp32 partitions" in why
    why = plan.launch_refusal("torchtitan", dict(base))
    assert why and "master_weights params" in why
    assert plan.launch_refusal("torchtitan", dict(base, master_weights="params")) is None


def test_search_emit_torchtitan_takes_params_when_unset():
    grids = plan.search_grids("torchtitan", {"master_weights": None})
    assert grids["master_weights"] == "params"
    # with a model and the ZeRO grid: the model and the grid's values are checked at params
    from phaze import models
    grids = plan.search_grids("torchtitan", {"master_weights": None, "zero_stage": None},
                              [models.get("llama3-8b")])
    assert grids["master_weights"] == "params" and set(grids["zero_stage"]) == {0, 3}
    assert plan.trainer_values("torchtitan", {}) == {"master_weights": "params"}
    assert plan.trainer_values("torchtitan", {"master_weights": "separate"}) == {}
    assert plan.trainer_values("megatron", {}) == {}
    with pytest.raises(ValueError, match="--master-weights separate"):
        plan.search_grids("torchtitan", {"master_weights": "separate"})
    assert plan.search_grids("megatron", {"master_weights": None})["master_weights"] is None


def test_bad_value_one_sentence(capsys):
    with pytest.raises(ValueError, match="master_weights must be one of separate, params"):
        _step(master_weights="fp32")
    with pytest.raises(SystemExit) as e:   # argparse's choices: exit status 2
        cli.main(["evaluate", "--model", "llama3-8b", "--arch", "h100-sxm", "--tp", "1",
                  "--pp", "1", "--dp", "8", "--global-batch", "64", "--master-weights", "x"])
    assert e.value.code == 2 and "--master-weights" in capsys.readouterr().err


def test_validation_rows_default_by_trainer():
    rep = validate.run()
    by = {}
    for r in rep.rows:
        by.setdefault(r["trainer"], set()).add(r["config"]["master_weights"])
    assert by["torchtitan"] == {"params"} and by["automodel"] == {"params"}
    assert by["maxtext"] == {"params"} and by["megatron"] == {"separate"}
    # the FSDP2 rows priced as FSDP2 holds them: gpt-oss-20b on 8 H100 fits (it ran)
    row = next(r for r in rep.rows if r["name"] == "automodel/gpt-oss-20b/8gpu-t1p1c1")
    assert row["fits"] is True and row["memory_gib"] < row["hbm_gib"]


def test_evaluate_names_who_launches_it_at_their_own_values(capsys):
    args = ["evaluate", "--model", "llama3-8b", "--arch", "h100-sxm", "--tp", "1", "--pp", "1",
            "--dp", "8", "--global-batch", "64", "--zero-stage", "3", "--flash-attention"]
    assert cli.main(args) == 0
    assert ("  launchable by: Megatron-LM, DeepSpeed (as priced); torchtitan with "
            "--master-weights params (a plan priced apart)") in capsys.readouterr().out
    assert cli.main(args + ["--master-weights", "params"]) == 0
    assert "  launchable by: torchtitan\n" in capsys.readouterr().out
    from phaze import search
    r = search.evaluate_point("llama3-8b", "h100-sxm", 1, 1, 8, 1, "none", global_batch=64,
                              zero_stage=3, flash_attention=True)
    assert r["launchable_with"] == {"torchtitan": {"master_weights": "params"}}
