"""``phaze evaluate --calibrated`` and the strategy knobs of issue 14 (one value each),
priced by the training-step model (phaze.step); issue 13 item 3 (memory per GPU)."""
import json
import re

import pytest

from phaze import cli, search, step, validate
from phaze.cli import _main as cli_main

#: Korthikanti et al. 2022 Table 5, 22B "full": t=8 p=1 d=1, microbatch 4, global batch 4.
PLAN_22B = dict(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, microbatch=4,
                global_batch=4)
ZOO = ["--model", "megatron-18.4b", "--arch", "a100-80g", "--tp", "8", "--pp", "1", "--dp", "1",
       "--microbatch", "4", "--global-batch", "4"]
PIPE = ["--model", "megatron-18.4b", "--arch", "a100-80g", "--tp", "8", "--pp", "4", "--dp", "2",
        "--microbatch", "1", "--global-batch", "64"]


def _run(capsys, argv):
    rc = cli.main(["evaluate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _time(text):
    return float(re.search(r"time per batch (\S+) s", text).group(1))


def test_korthikanti_22b_equals_training_step(capsys):
    table = validate.load_table(validate.builtin_path())
    spec = validate._model_spec("megatron-22b", table["models"])
    args = cli.build_parser().parse_args(
        ["evaluate", "--model", "x", "--arch", "a100-80g", "--tp", "8", "--pp", "1", "--dp", "1",
         "--microbatch", "4", "--global-batch", "4", "--recompute", "--precision", "fp16",
         "--calibrated"])
    r = cli_main._calibrated_result(args, spec)
    want = step.training_step(spec, "a100-80g", recompute="full", precision="fp16", **PLAN_22B)
    assert want.ok and r["feasible"]
    assert r["time_per_batch_s"] == want.time_s
    assert r["stages"][0]["total_gib"] == want.memory[0].total / 2 ** 30


@pytest.mark.parametrize("extra, knobs", [
    (["--recompute"], dict(recompute="full")),
    ([], dict(recompute="none")),
    (["--recompute", "selective", "--sequence-parallel", "--flash-attention"],
     dict(recompute="selective", sequence_parallel=True, flash_attention=True)),
])
def test_cli_time_equals_training_step(capsys, extra, knobs):
    rc, out, err = _run(capsys, ZOO + extra + ["--calibrated"])
    assert rc == 0 and err == ""
    want = step.training_step("megatron-18.4b", "a100-80g", **PLAN_22B, **knobs)
    assert _time(out) == pytest.approx(want.time_s, rel=1e-5)
    rc, out, _ = _run(capsys, ZOO + extra + ["--calibrated", "--json"])
    assert json.loads(out)["time_per_batch_s"] == want.time_s


def test_pipeline_knobs_equal_training_step(capsys):
    extra = ["--virtual-stages", "2", "--zero-stage", "1", "--overlap-grad-reduce",
             "--recompute", "selective", "--sequence-parallel", "--calibrated", "--json"]
    rc, out, _ = _run(capsys, PIPE + extra)
    r = json.loads(out)
    want = step.training_step("megatron-18.4b", "a100-80g", tensor_parallel=8,
                              pipeline_parallel=4, data_parallel=2, microbatch=1,
                              global_batch=64, virtual_stages=2, zero_stage=1,
                              overlap_grad_reduce=True, recompute="selective",
                              sequence_parallel=True)
    assert rc == 0 and want.ok and r["time_per_batch_s"] == want.time_s
    assert [s["stage"] for s in r["stages"]] == [1, 2, 3, 4]
    assert r["breakdown"]["critical_stage"] == want.breakdown.critical_stage + 1
    assert r["trainers"] == ["megatron-lm"]


def test_json_keys_and_memory_sums(capsys):
    rc, out, _ = _run(capsys, PIPE + ["--recompute", "--calibrated", "--json"])
    r = json.loads(out)
    assert rc == 0 and r["cost_model"] == "calibrated" and r["feasible"]
    for key in ("time_per_batch_s", "samples_per_s", "tokens_per_s", "breakdown", "stages",
                "recompute", "virtual_stages", "sequence_parallel", "flash_attention",
                "zero_stage", "overlap_grad_reduce", "precision", "hbm_gib"):
        assert key in r
    b = r["breakdown"]
    for key in ("steady_s", "bubble_s", "p2p_s", "gradient_reduction_s", "optimizer_s",
                "embedding_allreduce_s"):
        assert key in b
    assert r["time_per_batch_s"] == pytest.approx(
        b["steady_s"] + b["bubble_s"] + b["gradient_reduction_s"] + b["embedding_allreduce_s"]
        + b["optimizer_s"], rel=1e-12)
    assert r["samples_per_s"] == pytest.approx(64 / r["time_per_batch_s"])
    assert r["tokens_per_s"] == pytest.approx(64 * 2048 / r["time_per_batch_s"])
    for s in r["stages"]:
        parts = (s["weights_gib"] + s["gradients_gib"] + s["optimizer_state_gib"]
                 + s["activations_gib"] + s["workspace_gib"])
        assert s["total_gib"] == pytest.approx(parts, rel=1e-12)
        assert s["hbm_gib"] == 80 and s["fits"] == (s["total_gib"] <= 80)


def test_text_memory_table_sums_and_units(capsys):
    rc, out, _ = _run(capsys, PIPE + ["--recompute", "--calibrated"])
    assert rc == 0
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.split()[:1] == ["stage"])
    header = lines[i]
    for unit in ("weights (GiB)", "optimizer (GiB)", "activations (GiB)", "total (GiB)",
                 "HBM (GiB)"):
        assert unit in header
    rows = [ln.split() for ln in lines[i + 1:]]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    for r in rows:
        w, g, o, a, ws, total = map(float, r[2:8])
        assert total == pytest.approx(w + g + o + a + ws, abs=0.03)
    for word in ("bubble", "p2p", "gradient reduction", "optimizer", "samples/s", "tokens/s"):
        assert word in out


def test_hbm_gib_makes_a_plan_not_fit(capsys):
    rc, out, _ = _run(capsys, PIPE + ["--calibrated", "--hbm-gib", "8"])
    assert rc == 0 and "infeasible: stage 1 needs" in out and "(does not fit)" in out
    rc, out, _ = _run(capsys, PIPE + ["--calibrated", "--hbm-gib", "8", "--json"])
    assert json.loads(out)["feasible"] is False and json.loads(out)["hbm_gib"] == 8


def test_infeasible_plan_prints_its_reason_exit_0(capsys):
    rc, out, err = _run(capsys, PIPE + ["--virtual-stages", "3", "--calibrated"])
    assert rc == 0 and err == ""
    assert "infeasible: interleaved 1F1B needs the transformer layers (40) divisible" in out
    rc, out, _ = _run(capsys, PIPE + ["--virtual-stages", "3", "--calibrated", "--json"])
    r = json.loads(out)
    assert r["status"] == "infeasible" and r["feasible"] is False and "p·v" in r["reason"]


def test_unlaunchable_plan_says_so(capsys):
    # ZeRO 2 under a pipeline: Megatron-LM has no ZeRO 2, DeepSpeed refuses it with a
    # pipeline, torchtitan has ZeRO 0 and 3 only (its FSDP2 runs beside pipelines)
    rc, out, _ = _run(capsys, PIPE + ["--zero-stage", "2", "--calibrated"])
    assert rc == 0 and "launchable by: no trainer" in out


def test_bare_recompute_still_means_full_on_the_study_path(capsys):
    argv = ["--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2", "--global-batch", "64",
            "--study"]
    _, bare, _ = _run(capsys, argv + ["--recompute"])
    _, full, _ = _run(capsys, argv + ["--recompute", "full"])
    _, absent, _ = _run(capsys, argv)
    _, none, _ = _run(capsys, argv + ["--recompute", "none"])
    assert bare == full and absent == none and bare != absent
    assert "recompute on" in bare and "recompute off" in absent
    r = search.evaluate_point("gpt2-xl", "tpuv4", 1, 4, 2, 1, True, global_batch=64, study=True)
    assert f"time per batch {r['time_per_batch_s']:.6g} s" in bare
    _, js, _ = _run(capsys, argv + ["--recompute", "--json"])
    assert json.loads(js)["recompute"] is True


@pytest.mark.parametrize("extra, flag", [
    (["--sequence-parallel"], "--sequence-parallel"),
    (["--virtual-stages", "2"], "--virtual-stages"),
    (["--zero-stage", "1"], "--zero-stage"),
    (["--flash-attention"], "--flash-attention"),
    (["--overlap-grad-reduce"], "--overlap-grad-reduce"),
    (["--precision", "fp16"], "--dtype"),
    (["--dtype", "fp16"], "--dtype"),
    (["--recompute", "selective"], "selective"),
])
def test_step_only_knob_with_study_is_one_sentence(capsys, extra, flag):
    rc, out, err = _run(capsys, PIPE + extra + ["--study"])
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert flag in err and "--study" in err
    rc, out, err = _run(capsys, PIPE + extra)  # the calibrated default takes every knob
    assert rc == 0 and err == "" and "calibrated" in out


def test_calibrated_is_the_default_and_study_the_original(capsys):
    _, default, _ = _run(capsys, PIPE + ["--recompute"])
    _, alias, _ = _run(capsys, PIPE + ["--recompute", "--calibrated"])
    _, study, _ = _run(capsys, PIPE + ["--recompute", "--study"])
    assert default == alias and "calibrated" in default and default != study
    want = step.training_step("megatron-18.4b", "a100-80g", tensor_parallel=8,
                              pipeline_parallel=4, data_parallel=2, microbatch=1,
                              global_batch=64, recompute="full")
    assert _time(default) == pytest.approx(want.time_s, rel=1e-5)
    r = search.evaluate_point("megatron-18.4b", "a100-80g", 8, 4, 2, 1, True, global_batch=64,
                              study=True)
    assert f"time per batch {r['time_per_batch_s']:.6g} s" in study
    rc, _, err = _run(capsys, PIPE + ["--study", "--calibrated"])
    assert rc == 2 and "--study" in err and len(err.strip().splitlines()) == 1


def test_trivial_values_stay_on_the_study_path(capsys):
    argv = ["--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2", "--global-batch", "64",
            "--study"]
    _, plain, _ = _run(capsys, argv)
    rc, same, _ = _run(capsys, argv + ["--virtual-stages", "1", "--zero-stage", "0"])
    assert rc == 0 and same == plain


def test_emit_picks_up_the_knobs(capsys):
    rc, out, _ = _run(capsys, PIPE + ["--recompute", "selective", "--sequence-parallel",
                                      "--virtual-stages", "2", "--zero-stage", "1",
                                      "--precision", "fp16", "--emit", "megatron"])
    assert rc == 0
    for arg in ("--sequence-parallel", "--recompute-granularity selective",
                "--num-layers-per-virtual-pipeline-stage 5", "--use-distributed-optimizer",
                "--fp16"):
        assert arg in " ".join(out.split())


def test_bad_input_is_exit_2(capsys):
    rc, _, err = _run(capsys, PIPE + ["--calibrated", "--virtual-stages", "0"])
    assert rc == 2 and "--virtual-stages" in err
    rc, _, err = _run(capsys, PIPE + ["--calibrated", "--devices", "8"])
    assert rc == 2 and "--devices" in err


def test_seq_len_reaches_the_step_model(capsys):
    from phaze import models

    rc, out, _ = _run(capsys, ["--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2",
                               "--global-batch", "64", "--seq-len", "512", "--calibrated",
                               "--json"])
    r = json.loads(out)
    want = step.training_step(models.get("gpt2-xl").with_(seq_len=512), "tpuv4",
                              tensor_parallel=1, pipeline_parallel=4, data_parallel=2,
                              microbatch=1, global_batch=64, recompute="none")
    assert rc == 0 and r["seq_len"] == 512 and r["time_per_batch_s"] == want.time_s


def test_trace_keeps_reading_recompute(tmp_path, capsys):
    base = ["trace", "--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2",
            "--global-batch", "64"]
    assert cli.main(base + ["--recompute", "-o", str(tmp_path / "a.json")]) == 0
    assert cli.main(base + ["--recompute", "selective", "--calibrated",
                            "-o", str(tmp_path / "b.json")]) == 0
    assert "calibrated model" in capsys.readouterr().out
