"""phaze.trace and ``phaze trace``: the Chrome/Perfetto timeline of one training step,
loaded back and held against the plan's times (issue 16 item 4)."""
import json
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze import cli, search, step, trace

PLAN = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=2, microbatch=1,
            global_batch=32)
US = 1e6


def _x(tr):
    return [e for e in tr["traceEvents"] if e["ph"] == "X"]


def _end(e):
    return e["ts"] + e["dur"]


def _names(tr):
    """{pid: process name}, {(pid, tid): track name} from the metadata events."""
    procs, tracks = {}, {}
    for e in tr["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            tracks[e["pid"], e["tid"]] = e["args"]["name"]
    return procs, tracks


def _check_pipeline(tr, p, c, compute_per_stage, total_s):
    """The step's total is the last event's end; per stage and microbatch the compute
    events sum to the model's compute; the 1F1B order and the dependencies hold; no two
    events overlap on one track."""
    ev = _x(tr)
    assert max(_end(e) for e in ev) / US == pytest.approx(total_s, rel=1e-12)
    pipe = [e for e in ev if e["pid"] <= p]
    per = defaultdict(float)
    for e in pipe:
        if e["cat"] in ("forward", "backward", "recompute"):
            per[e["pid"], e["args"]["microbatch"]] += e["dur"] / US
    for r in range(p):
        for i in range(c):
            assert per[r + 1, i] == pytest.approx(compute_per_stage[r], rel=1e-9)
    f = {(e["pid"], e["args"]["microbatch"]): e for e in pipe if e["cat"] == "forward"}
    b = {(e["pid"], e["args"]["microbatch"]): e for e in pipe if e["cat"] == "backward"}
    assert len(f) == len(b) == p * c
    tol = 1e-9 * total_s * US
    for r in range(1, p + 1):
        seq = [e for e in pipe if e["pid"] == r and e["cat"] in ("forward", "backward")]
        seq.sort(key=lambda e: e["ts"])
        w = min(p - r, c)
        want = [("forward", i) for i in range(w)]
        for i in range(c - w):
            want += [("forward", w + i), ("backward", i)]
        want += [("backward", i) for i in range(c - w, c)]
        assert [(e["cat"], e["args"]["microbatch"]) for e in seq] == want
        for i in range(c):
            if r > 1:
                assert f[r, i]["ts"] >= _end(f[r - 1, i]) - tol
            if r < p:
                assert b[r, i]["ts"] >= _end(b[r + 1, i]) - tol
            assert b[r, i]["ts"] >= _end(f[r, i]) - tol
    tracks = defaultdict(list)
    for e in pipe:
        tracks[e["pid"], e["tid"]].append(e)
    for evs in tracks.values():
        evs.sort(key=lambda e: e["ts"])
        for a, z in zip(evs, evs[1:]):
            assert z["ts"] >= _end(a) - tol


def _check_layers(tr, p, summary):
    """Each stage's layer process: the operators of each direction end at the schedule's
    makespan (after its offset), respect precedence, and no two share a lane at once."""
    ev = _x(tr)
    for r in range(p):
        pid = p + 1 + r
        info = summary["layer_schedules"][r]
        for direction in ("forward", "backward"):
            ops = [e for e in ev if e["pid"] == pid and e["args"].get("direction") == direction]
            assert ops
            off = info[direction]["offset_s"] * US
            ms = info[direction]["makespan_s"] * US
            tol = 1e-9 * max(ms, 1.0)
            assert max(_end(e) for e in ops) - off == pytest.approx(ms, rel=1e-9, abs=1e-9)
            assert min(e["ts"] for e in ops) >= off - tol
            end_of = {}
            for e in ops:
                end_of[e["args"]["op"]] = max(end_of.get(e["args"]["op"], 0.0), _end(e))
            for e in ops:
                for q in e["args"]["preds"]:
                    if q in end_of:        # zero-length operators draw no event
                        assert e["ts"] >= end_of[q] - tol
            lanes = defaultdict(list)
            for e in ops:
                lanes[e["tid"]].append(e)
            for evs in lanes.values():
                evs.sort(key=lambda e: e["ts"])
                for a, z in zip(evs, evs[1:]):
                    assert z["ts"] >= _end(a) - tol


@pytest.mark.parametrize("recompute", [False, True])
def test_study_trace_matches_the_breakdown(recompute):
    tr = trace.events("opt-350m", "tpuv4", recompute=recompute, calibrated=False, **PLAN)
    r = search.evaluate_point("opt-350m", "tpuv4", 1, 4, 2, 1, recompute, global_batch=32, study=True)
    s = tr["otherData"]["phaze"]
    c = int(r["microbatches_per_pipeline"])
    assert s["cost_model"] == "study" and s["microbatches_per_pipeline"] == c
    assert s["time_per_batch_s"] == r["time_per_batch_s"]
    _check_pipeline(tr, 4, c, [st_["compute_s"] for st_ in r["stages"]], r["time_per_batch_s"])
    _check_layers(tr, 4, s)
    ev = _x(tr)
    assert any(e["cat"] == "recompute" for e in ev) == recompute
    # gradient sync: one event per stage, ending at the step's end
    sync = [e for e in ev if e["cat"] == "grad_sync"]
    assert len(sync) == 4
    assert all(e["dur"] / US == pytest.approx(r["breakdown"]["grad_sync_s"]) for e in sync)
    # the p2p waits are the edges' bytes over the network bandwidth (the receiving stage)
    assert any(e["cat"] == "p2p" for e in ev if e["pid"] == 2)
    assert not any(e["cat"] == "p2p" and "activations" in e["name"] for e in ev if e["pid"] == 1)
    procs, tracks = _names(tr)
    assert procs[1] == "stage 1 (pipeline)" and "layer schedule" in procs[5]
    assert {"compute", "p2p"} <= {n for (pid, _), n in tracks.items() if pid == 1}
    lanes = {n for (pid, _), n in tracks.items() if pid == 5}
    assert lanes and all(n.startswith(("tensor core", "vector core", "link", "all cores"))
                         for n in lanes)


def test_single_stage_and_idle_bubbles():
    tr = trace.events("opt-350m", "tpuv4", tensor_parallel=1, pipeline_parallel=1,
                      data_parallel=4, microbatch=2, global_batch=32, layer_schedule=False)
    s = tr["otherData"]["phaze"]
    ev = _x(tr)
    assert not any(e["cat"] == "p2p" for e in ev) and all(e["pid"] == 1 for e in ev)
    assert max(_end(e) for e in ev) / US == pytest.approx(s["time_per_batch_s"], rel=1e-12)
    # p = 1: no bubble, the compute track is busy from 0 to the pipeline's end
    busy = sum(e["dur"] for e in ev if e["cat"] in ("forward", "backward")) / US
    assert busy == pytest.approx(s["pipeline_s"], rel=1e-9)


def test_calibrated_trace_matches_the_step_model():
    kw = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, microbatch=1,
              global_batch=16)
    tr = trace.events("megatron-1.7b", "a100-80g", recompute="full", calibrated=True,
                      zero_stage=1, **kw)
    res = step.training_step("megatron-1.7b", "a100-80g", recompute="full", zero_stage=1, **kw)
    b = res.breakdown
    s = tr["otherData"]["phaze"]
    assert s["cost_model"] == "calibrated" and s["time_per_batch_s"] == res.time_s
    compute = b.forward_s + b.backward_s + b.recompute_s
    _check_pipeline(tr, 4, b.microbatches, [compute] * 4, res.time_s)
    _check_layers(tr, 4, s)
    ev = _x(tr)
    opt = [e for e in ev if e["cat"] == "optimizer"]
    assert len(opt) == 4 and all(_end(e) / US == pytest.approx(res.time_s) for e in opt)
    emb = [e for e in ev if e["cat"] == "embedding"]
    assert {e["pid"] for e in emb} == {1, 4}


def test_write_round_trip_in_microseconds(tmp_path):
    path = tmp_path / "t.json"
    info = trace.write(path, "opt-350m", "tpuv4", layer_schedule=False, calibrated=False, **PLAN)
    tr = json.loads(path.read_text())
    assert tr["otherData"]["phaze"]["time_per_batch_s"] == info["time_per_batch_s"]
    r = search.evaluate_point("opt-350m", "tpuv4", 1, 4, 2, 1, False, global_batch=32, study=True)
    f0 = [e for e in _x(tr) if e["cat"] == "forward" and e["pid"] == 1][0]
    assert f0["dur"] == pytest.approx(r["stages"][0]["forward_s"] * 1e6, rel=1e-12)


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.integers(1, 9))
def test_one_f_one_b_ends_at_the_models_time(fractions, c):
    slot = 2.5
    phi = [f * slot for f in fractions]
    p = len(phi)
    order, fs, bs = trace.one_f_one_b(phi, slot, c)
    end = max(bs[r][i] + slot - phi[r] for r in range(p) for i in range(c))
    assert end == pytest.approx((c + p - 1) * slot, rel=1e-12)
    assert all(len(o) == 2 * c for o in order)


def test_assign_lanes_uses_the_overlap_width():
    rng = np.random.default_rng(0)
    s = rng.uniform(0, 10, 200)
    f = s + rng.uniform(0, 2, 200)
    lanes = trace.assign_lanes(s, f)
    width = max(int(((s <= x) & (f > x)).sum()) for x in s)
    assert lanes.max() + 1 == width
    for k in range(width):
        idx = np.flatnonzero(lanes == k)
        o = np.argsort(s[idx])
        assert np.all(s[idx][o][1:] >= f[idx][o][:-1])


def test_refusals():
    # refused with evaluate's own reason (issue 29: the trace is the step evaluate prices)
    with pytest.raises(ValueError, match="infeasible .*divisible by the pipeline stages"):
        trace.events("llama2-7b", "a100-80g", tensor_parallel=1, pipeline_parallel=3,
                     data_parallel=1, global_batch=8, calibrated=True)
    # interleaved 1F1B is drawn now (issue 29); its Megatron rule still refuses p = 1
    with pytest.raises(ValueError, match="interleaved"):
        trace.events("opt-350m", virtual_stages=2, **dict(PLAN, pipeline_parallel=1))
    with pytest.raises(ValueError, match="calibrated=True"):
        trace.events("opt-350m", zero_stage=1, calibrated=False, **PLAN)
    with pytest.raises(ValueError, match="infeasible"):
        trace.events("gpt3-175b", "tpuv4", tensor_parallel=1, pipeline_parallel=1,
                     data_parallel=1, global_batch=32, calibrated=False)


def test_cli_trace(tmp_path, capsys):
    out = tmp_path / "step.json"
    rc = cli.main(["trace", "--model", "opt-350m", "--tp", "1", "--pp", "4", "--dp", "2",
                   "--global-batch", "32", "--recompute", "--study", "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "wrote" in text and "perfetto" in text
    tr = json.loads(out.read_text())
    assert tr["otherData"]["phaze"]["cost_model"] == "study"
    # the calibrated step model is the default (as in evaluate); --calibrated is accepted
    for extra in ([], ["--calibrated"]):
        rc = cli.main(["trace", "--model", "opt-350m", "--arch", "a100-80g", "--tp", "1", "--pp",
                       "2", "--dp", "2", "--global-batch", "32", "--no-layer-schedule",
                       "-o", str(out), *extra])
        assert rc == 0
        assert json.loads(out.read_text())["otherData"]["phaze"]["cost_model"] == "calibrated"
    capsys.readouterr()
    assert cli.main(["trace", "--model", "opt-350m", "--tp", "1", "--pp", "2", "--dp", "2",
                     "--global-batch", "32", "--study", "--zero-stage", "1",
                     "-o", str(out)]) == 2
    assert "drop --study" in capsys.readouterr().err


@pytest.mark.parametrize("argv,rc,words", [
    (["--model", "gpt3-175b", "--tp", "1", "--pp", "1", "--dp", "1", "--global-batch", "32",
      "--study"], 2, "infeasible"),
    (["--model", "opt-350m", "--tp", "1", "--pp", "2", "--dp", "1", "--json"], 2, "--json"),
])
def test_cli_trace_errors(argv, rc, words, tmp_path, capsys):
    assert cli.main(["trace", *argv, "-o", str(tmp_path / "x.json")]) == rc
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_cli_trace_unwritable(tmp_path, capsys):
    rc = cli.main(["trace", "--model", "opt-350m", "--tp", "1", "--pp", "2", "--dp", "1",
                   "--global-batch", "8", "--no-layer-schedule", "-o", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "-o/--out" in err and len(err.strip().splitlines()) == 1


def test_layer_schedule_on_one_core_lanes():
    """A chip of the default space with 4 tensor cores: one-core operators spread over
    the tensor-core lanes, never more lanes than cores, and the checks above hold."""
    from phaze import arch

    row = arch.ArchSpace.default().configs[10000:10001]
    kw = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=1, global_batch=8)
    tr = trace.events("opt-350m", row, calibrated=False, **kw)
    s = tr["otherData"]["phaze"]
    _check_layers(tr, 2, s)
    _, tracks = _names(tr)
    tc = {n for (pid, _), n in tracks.items() if pid == 3 and n.startswith("tensor core")}
    assert 1 < len(tc) <= int(row["num_tc"][0])
    r = search.evaluate_point("opt-350m", row, 1, 2, 1, 1, False, global_batch=8, study=True)
    _check_pipeline(tr, 2, 8, [x["compute_s"] for x in r["stages"]], r["time_per_batch_s"])
    # the makespans are those of schedule_layer on the study's operator latencies
    from phaze import cost, graph, schedule

    block = graph.build_layers("opt-350m", 1, 1).layers[1]
    for direction, g in (("forward", block.forward), ("backward", block.backward)):
        single, intra = cost.op_latencies(g, row)
        sch = schedule.schedule_layer(g, single[:, 0], intra[:, 0], int(row["num_tc"][0]),
                                      int(row["num_vc"][0]))
        assert not schedule.check_schedule(g, single[:, 0], intra[:, 0], int(row["num_tc"][0]),
                                           int(row["num_vc"][0]), sch)
        for info in s["layer_schedules"]:
            assert info[direction]["makespan_s"] == sch.makespan
