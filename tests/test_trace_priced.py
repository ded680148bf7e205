"""phaze trace draws exactly the step phaze evaluate prices (issue 29 item 2, What to
build 3): the same sequence and cost model (three sequence lengths, three step times equal
to evaluate's), infeasible plans refused, interleaved 1F1B and expert / context parallel
plans drawn, the pipeline's end at the model's time."""
import json

import pytest

from phaze import cli, search, trace

KW = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, microbatch=1,
          global_batch=64, recompute="none", flash_attention=True, sequence_parallel=True)


def _pipeline_end(tr):
    return max(e["ts"] + e["dur"] for e in tr["traceEvents"]
               if e["ph"] == "X" and e["cat"] in ("forward", "backward", "recompute", "p2p",
                                                 "zero")) / 1e6


@pytest.mark.parametrize("seq", [1024, 2048, 4096])
def test_three_sequences_three_times_equal_to_evaluate(seq):
    tr = trace.events("llama2-7b", "h200", seq_len=seq, layer_schedule=False, **KW)
    s = tr["otherData"]["phaze"]
    r = search.evaluate_point("llama2-7b", "h200", 2, 4, 2, 1, "none", global_batch=64,
                              flash_attention=True, sequence_parallel=True, seq_len=seq)
    assert s["seq_len"] == seq
    assert s["time_per_batch_s"] == r["time_per_batch_s"]
    assert _pipeline_end(tr) == pytest.approx(s["pipeline_s"], rel=1e-12)


def test_cli_trace_honours_seq_len(tmp_path, capsys):
    times = []
    for seq in (1024, 2048, 4096):
        out = tmp_path / f"t{seq}.json"
        assert cli.main(["trace", "--model", "llama2-7b", "--arch", "h200", "--tp", "2",
                         "--pp", "4", "--dp", "2", "--global-batch", "64", "--flash-attention",
                         "--sequence-parallel", "--seq-len", str(seq), "--no-layer-schedule",
                         "-o", str(out)]) == 0
        times.append(json.loads(out.read_text())["otherData"]["phaze"]["time_per_batch_s"])
        assert cli.main(["evaluate", "--model", "llama2-7b", "--arch", "h200", "--tp", "2",
                         "--pp", "4", "--dp", "2", "--global-batch", "64", "--flash-attention",
                         "--sequence-parallel", "--seq-len", str(seq), "--json"]) == 0
        capsys.readouterr()
    assert len(set(times)) == 3 and times == sorted(times)


def test_infeasible_plan_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="infeasible .*GiB"):
        trace.events("mixtral-8x7b", "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                     data_parallel=8, global_batch=64)
    rc = cli.main(["trace", "--model", "mixtral-8x7b", "--arch", "h100-sxm", "--tp", "1",
                   "--pp", "1", "--dp", "8", "--global-batch", "64", "-o",
                   str(tmp_path / "x.json")])
    assert rc == 2 and "infeasible" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_interleaved_is_drawn_at_the_models_time():
    tr = trace.events("llama2-7b", "h200", virtual_stages=2, **KW)
    s = tr["otherData"]["phaze"]
    m, p, v = s["microbatches_per_pipeline"], 4, 2
    assert s["virtual_stages"] == 2
    assert _pipeline_end(tr) == pytest.approx((m + (p - 1) / v) * s["slot_s"], rel=1e-12)
    assert s["pipeline_s"] == pytest.approx((m + (p - 1) / v) * s["slot_s"], rel=1e-12)
    fw = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["cat"] == "forward"]
    assert len(fw) == p * m * v                      # one forward per chunk and microbatch
    # a chunk's forward starts after the previous virtual stage's forward ends
    end = {(e["args"]["virtual_stage"], e["args"]["microbatch"]): e["ts"] + e["dur"] for e in fw}
    for e in fw:
        k, i = e["args"]["virtual_stage"], e["args"]["microbatch"]
        if k > 1:
            assert e["ts"] >= end[(k - 1, i)] - 1e-6


def test_interleaved_order_attains_the_bubble():
    for (phi, slot, m, p, v) in [(1, 3, 8, 4, 2), (0.3, 1, 4, 2, 2), (2, 3, 12, 3, 2),
                                 (1, 2, 8, 2, 3)]:
        ops, end = trace.interleaved_one_f_one_b(phi, slot, m, p, v)
        assert end == pytest.approx((m + (p - 1) / v) * slot, rel=1e-12)
        assert all(len(o) == 2 * m * v for o in ops)


def test_expert_and_context_parallel_are_drawn():
    tr = trace.events("mixtral-8x7b", "h200", tensor_parallel=2, pipeline_parallel=2,
                      data_parallel=4, microbatch=1, global_batch=64, recompute="full",
                      expert_parallel=4, context_parallel=2, flash_attention=True,
                      sequence_parallel=True, seq_len=4096)
    s = tr["otherData"]["phaze"]
    r = search.evaluate_point("mixtral-8x7b", "h200", 2, 2, 4, 1, "full", global_batch=64,
                              expert_parallel=4, context_parallel=2, flash_attention=True,
                              sequence_parallel=True, seq_len=4096)
    assert s["expert_parallel"] == 4 and s["context_parallel"] == 2
    assert s["time_per_batch_s"] == r["time_per_batch_s"]
    names = {e["name"] for e in tr["traceEvents"] if e["ph"] == "X"
             and e["cat"].startswith("layer_")}
    assert any("flash_attn" in n for n in names)     # the calibrated graph's kernels


def test_end_stages_send_and_receive_what_they_do():
    tr = trace.events("llama2-7b", "h200", layer_schedule=False, **KW)
    by_stage = {}
    for e in tr["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "p2p":
            by_stage.setdefault(e["pid"], set()).add(e["name"].rsplit(" ", 1)[0])
    assert by_stage[1] == {"send activations", "recv gradients"}
    assert by_stage[4] == {"recv activations", "send gradients"}
    assert by_stage[2] == {"recv/send activations", "recv/send gradients"}


def test_pipeline_only_knobs_are_drawn_at_one_stage_and_refused_at_more(tmp_path, capsys):
    # torchtitan's and AutoModel's uneven split and per-local-batch schedules are moot on one
    # stage: the trace draws them there, at evaluate's time; at p = 2 they are refused
    one = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
               global_batch=64, recompute="full", layer_schedule=False)
    moot = dict(pipeline_split="remainder_first", account_for_embedding=True,
                pipeline_microbatches=4)
    tr = trace.events("llama2-7b", "h200", **one, **moot)
    r = search.evaluate_point("llama2-7b", "h200", 1, 1, 8, 1, "full", global_batch=64, **moot)
    even = trace.events("llama2-7b", "h200", **one)
    s = tr["otherData"]["phaze"]
    assert s["time_per_batch_s"] == r["time_per_batch_s"]
    assert s["time_per_batch_s"] == even["otherData"]["phaze"]["time_per_batch_s"]
    assert s["pipeline_split"] == "remainder_first" and s["pipeline_microbatches"] == 4
    for knob, note in (("pipeline_split", "even pipeline splits only"),
                       ("pipeline_microbatches", "one pipeline schedule per step only")):
        with pytest.raises(ValueError, match=note):
            trace.events("llama2-7b", "h200", **dict(one, pipeline_parallel=2,
                                                     data_parallel=4), **{knob: moot[knob]})
    out = tmp_path / "moot.json"
    assert cli.main(["trace", "--model", "llama2-7b", "--arch", "h200", "--tp", "1", "--pp",
                     "1", "--dp", "8", "--global-batch", "64", "--recompute", "full",
                     "--pipeline-split", "remainder_first", "--no-layer-schedule",
                     "-o", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["otherData"]["phaze"]["time_per_batch_s"] == \
        s["time_per_batch_s"]
