"""phaze.placement: golden optima, brute force on small chains, bad input, CLI."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import placement as pl
from phaze.cli import main as cli_main

import naive

GPT3_OPTIMUM_S = 18.840038387843546


def _check_plan_shape(problem, plan):
    """Structural invariants of a feasible plan."""
    ids = [lid for stage, _ in plan.stages for lid in stage]
    assert ids == problem.layer_ids.tolist()
    assert len(plan.stage_loads) == len(plan.stage_memory) == plan.pipeline_parallel
    assert plan.tensor_parallel in problem.widths.tolist()
    assert 1 <= plan.data_parallel <= min(problem.devices, problem.microbatches)
    assert plan.devices_used <= problem.devices
    assert max(plan.stage_memory) <= problem.memory_bytes
    assert plan.reason == ""


# ---------------------------------------------------------------------------
# Golden instances from the original solver
# ---------------------------------------------------------------------------

def _golden_instances(golden):
    files = sorted((golden / "placement").glob("inst_*[0-9].json"))
    if not files:
        pytest.skip(f"no placement instances in {golden / 'placement'}")
    return files


def test_golden_instances_match_original_optimum(golden):
    files = _golden_instances(golden)
    problems = [pl.load_phaze_json(f) for f in files]
    for f, problem, plan in zip(files, problems, map(pl.solve, problems)):
        expected = json.loads(f.with_name(f.stem + ".expected.json").read_text())
        assert plan.feasible == expected["feasible"], f.name
        if not plan.feasible:
            assert plan.reason and math.isinf(plan.time_per_batch) and plan.stages == []
            continue
        assert plan.time_per_batch == pytest.approx(expected["time_per_batch"], rel=1e-9), f.name
        assert pl.evaluate(problem, plan) == pytest.approx(plan.time_per_batch, rel=1e-12), f.name
        _check_plan_shape(problem, plan)


def test_golden_solve_many_equals_solve(golden):
    files = _golden_instances(golden)
    by_length = {}
    for f in files:
        p = pl.load_phaze_json(f)
        by_length.setdefault(p.n_layers, []).append(p)
    for problems in by_length.values():
        many = pl.solve_many(problems)
        for p, plan in zip(problems, many):
            assert plan == pl.solve(p)


def test_gpt3_bench_instance_optimum(golden):
    problem = pl.load_phaze_json(golden / "placement_bench_gpt3_1024.json")
    plan = pl.solve(problem)
    assert plan.time_per_batch == pytest.approx(GPT3_OPTIMUM_S, rel=1e-9)
    assert (plan.tensor_parallel, plan.data_parallel, plan.pipeline_parallel) == (4, 42, 6)
    assert pl.evaluate(problem, plan) == pytest.approx(plan.time_per_batch, rel=1e-12)
    assert pl.lower_bound_time(problem) <= plan.time_per_batch


# ---------------------------------------------------------------------------
# Random small chains against brute force (tests/naive.py)
# ---------------------------------------------------------------------------

@st.composite
def small_problems(draw, max_layers=6):
    L = draw(st.integers(1, max_layers))
    widths = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3, unique=True))
    W = len(widths)
    # Runs of identical layers make many cuts tie: draw from a small pool of layer kinds.
    pool = draw(st.integers(1, L))
    pos = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)
    kinds = [(draw(pos), draw(pos), draw(pos), draw(pos), draw(st.booleans())) for _ in range(pool)]
    layer_kind = [draw(st.integers(0, pool - 1)) for _ in range(L)]
    scale = np.array([1.0 / t for t in widths])[:, None]
    fw = np.array([[kinds[k][0] for k in layer_kind]]) * scale
    bw = np.array([[kinds[k][1] for k in layer_kind]]) * scale
    par = np.array([[kinds[k][2] for k in layer_kind]]) * scale
    act = np.array([[kinds[k][3] for k in layer_kind]]) * scale
    tp = np.array([[kinds[k][4] for k in layer_kind]] * W)
    if draw(st.booleans()):  # per-width flags mixed independently
        tp = np.array(draw(st.lists(st.lists(st.booleans(), min_size=L, max_size=L),
                                    min_size=W, max_size=W)), dtype=bool)
    edges = np.array(draw(st.lists(pos, min_size=L - 1, max_size=L - 1)) or [], dtype=float)
    edges = np.tile(edges, (W, 1)).reshape(W, L - 1)
    recompute = draw(st.booleans())
    optimizer = draw(st.sampled_from(["sgd", "SGD", "adam", "Adam"]))
    total = float((3 * par + act).sum(axis=1).max()) * L + 1.0
    memory = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.0, 2.0])) * total
    return pl.PlacementProblem(
        widths=widths, forward_s=fw, backward_s=bw, param_bytes=par, activation_bytes=act,
        tensor_parallel=tp, edge_bytes=edges, devices=draw(st.integers(1, 9)),
        memory_bytes=memory, bandwidth=draw(st.sampled_from([0.5, 1.0, 4.0, 100.0])),
        microbatches=draw(st.integers(1, 12)), recompute=recompute, optimizer=optimizer)


@given(small_problems())
def test_solve_equals_brute_force(problem):
    plan = pl.solve(problem)
    time, t, d, bounds = naive.placement_brute_force(problem)
    assert plan.feasible == math.isfinite(time)
    if not plan.feasible:
        assert math.isinf(plan.time_per_batch) and plan.reason
        return
    assert plan.time_per_batch == pytest.approx(time, rel=1e-9, abs=1e-12)
    assert pl.evaluate(problem, plan) == pytest.approx(plan.time_per_batch, rel=1e-12, abs=1e-12)
    _check_plan_shape(problem, plan)
    # Ties keep the smaller width: no width below the chosen one reaches the optimum.
    if t is not None:
        assert plan.tensor_parallel <= t or plan.time_per_batch < time * (1 - 1e-9)
    # Stage loads and memory agree with the reference's per-stage rules.
    w = int(np.flatnonzero(problem.widths == plan.tensor_parallel)[0])
    start, S = 0, plan.pipeline_parallel
    for s, (ids, _) in enumerate(plan.stages):
        load, mem = naive.placement_stage(problem, w, start, start + len(ids) - 1, S - s)
        assert plan.stage_loads[s] == pytest.approx(load, rel=1e-12, abs=1e-12)
        assert plan.stage_memory[s] == pytest.approx(mem, rel=1e-12, abs=1e-12)
        start += len(ids)
    assert pl.lower_bound_time(problem) <= plan.time_per_batch * (1 + 1e-12)


@given(st.lists(small_problems(max_layers=4).filter(lambda p: p.n_layers == 4), min_size=1, max_size=5))
def test_solve_many_equals_solve(problems):
    many = pl.solve_many(problems)
    assert many == [pl.solve(p) for p in problems]


def test_solve_many_parallel_matches_serial(monkeypatch, golden):
    problem = pl.load_phaze_json(golden / "placement_bench_gpt3_1024.json")
    variants = []
    for mem_scale in (0.05, 0.3, 0.6, 1.0):
        for rc in (False, True):
            variants.append(pl.PlacementProblem(
                widths=problem.widths, forward_s=problem.forward_s, backward_s=problem.backward_s,
                param_bytes=problem.param_bytes, activation_bytes=problem.activation_bytes,
                tensor_parallel=problem.tensor_parallel, edge_bytes=problem.edge_bytes,
                devices=problem.devices, memory_bytes=problem.memory_bytes * mem_scale,
                bandwidth=problem.bandwidth, microbatches=problem.microbatches, recompute=rc,
                optimizer="adam" if mem_scale > 0.5 else "sgd", layer_ids=problem.layer_ids))
    monkeypatch.setenv("PHAZE_NUM_THREADS", "1")
    serial = pl.solve_many(variants)
    monkeypatch.setenv("PHAZE_NUM_THREADS", "2")
    assert pl.solve_many(variants) == serial
    for p, plan in zip(variants, serial):
        if plan.feasible:
            assert pl.evaluate(p, plan) == pytest.approx(plan.time_per_batch, rel=1e-12)


def test_trusted_constructor_gives_same_result(golden):
    problem = pl.load_phaze_json(golden / "placement_bench_gpt3_1024.json")
    trusted = pl.PlacementProblem.from_trusted_arrays(
        problem.widths, problem.forward_s, problem.backward_s, problem.param_bytes,
        problem.activation_bytes, problem.tensor_parallel, problem.edge_bytes, problem.devices,
        problem.memory_bytes, problem.bandwidth, problem.microbatches, problem.recompute,
        problem.optimizer, problem.layer_ids)
    assert pl.solve(trusted) == pl.solve(problem)


# ---------------------------------------------------------------------------
# Infeasibility is a result with a reason
# ---------------------------------------------------------------------------

def _uniform(L=4, widths=(1, 2), **kw):
    W = len(widths)
    args = dict(widths=list(widths), forward_s=np.ones((W, L)), backward_s=np.full((W, L), 2.0),
                param_bytes=np.full((W, L), 10.0), activation_bytes=np.full((W, L), 5.0),
                tensor_parallel=np.ones((W, L), dtype=bool), edge_bytes=np.ones((W, L - 1)),
                devices=8, memory_bytes=1e6, bandwidth=1e3, microbatches=4)
    args.update(kw)
    return pl.PlacementProblem(**args)


def test_reason_fewer_devices_than_width():
    plan = pl.solve(_uniform(widths=(4, 8), devices=2))
    assert not plan.feasible and "fewer devices" in plan.reason and math.isinf(plan.time_per_batch)
    assert plan.to_json()["finalTimePerBatch"] is None


def test_reason_layer_alone_exceeds_memory():
    par = np.full((2, 4), 10.0)
    par[:, 2] = 1000.0
    plan = pl.solve(_uniform(param_bytes=par, memory_bytes=500.0))
    assert not plan.feasible and "layer 2 alone exceeds" in plan.reason


def test_reason_no_cut_fits():
    # Each layer fits alone (25 bytes) but two stages at positions 2 and 1 need 30 + 25 > 29.
    plan = pl.solve(_uniform(L=2, widths=(1,), memory_bytes=29.0, devices=2))
    assert not plan.feasible and "no cut" in plan.reason
    assert pl.evaluate(_uniform(L=2, widths=(1,), memory_bytes=29.0), plan) == math.inf


def test_width_above_devices_is_skipped_not_fatal():
    plan = pl.solve(_uniform(widths=(1, 16), devices=4))
    assert plan.feasible and plan.tensor_parallel == 1


# ---------------------------------------------------------------------------
# evaluate() rejects malformed plans
# ---------------------------------------------------------------------------

def test_evaluate_rejects_malformed_plans():
    problem = _uniform()
    plan = pl.solve(problem)
    assert pl.evaluate(problem, plan) == pytest.approx(plan.time_per_batch, rel=1e-12)
    bad_order = pl.Placement(True, 0.0, 1, 1, [([1, 0, 2, 3], 1)], [], [])
    with pytest.raises(ValueError, match="chain in order"):
        pl.evaluate(problem, bad_order)
    with pytest.raises(ValueError, match="not one of the problem's widths"):
        pl.evaluate(problem, pl.Placement(True, 0.0, 3, 1, [([0, 1, 2, 3], 3)], [], []))
    with pytest.raises(ValueError, match="declares"):
        pl.evaluate(problem, pl.Placement(True, 0.0, 2, 1, [([0, 1, 2, 3], 1)], [], []))
    with pytest.raises(ValueError, match="cover every layer"):
        pl.evaluate(problem, pl.Placement(True, 0.0, 1, 1, [([0, 1], 1)], [], []))
    # Too many devices for d: a limit, so infinite time rather than an error.
    assert pl.evaluate(problem, pl.Placement(True, 0.0, 2, 4, [([0, 1], 2), ([2, 3], 2)], [], [])) == math.inf


# ---------------------------------------------------------------------------
# Bad input: ValueError naming the field or layer
# ---------------------------------------------------------------------------

def _json_problem():
    nodes, edges = {}, {}
    for t in (1, 2):
        nodes[str(t)] = [{"id": i, "parameterSize": 100.0 / t, "activationSize": 50.0,
                          "optimalLatencyFw": 0.01 / t, "optimalLatencyBw": 0.02 / t,
                          "isTensorParallelized": t > 1} for i in range(-1, 3)]
        edges[str(t)] = [{"sourceId": i, "destId": i + 1, "communicationCost": 64.0}
                         for i in range(-1, 2)]
    return {"maxMemoryPerDevice": 1e6, "maxDevices": 8, "bandwidth": 1e9, "mbsInBatch": 4.7,
            "nodes": nodes, "edges": edges, "activationRecomputation": False,
            "optimizerAlgorithm": "Adam", "fixedPP": 1, "fixedTMPC": 1, "fixedDP": 1,
            "numTransformerLayers": 2}


def _write(tmp_path, data, name="p.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_load_valid_json(tmp_path):
    problem = pl.load_phaze_json(_write(tmp_path, _json_problem()))
    assert problem.layer_ids.tolist() == [-1, 0, 1, 2]
    assert problem.microbatches == 4 and problem.optimizer == "adam"
    assert problem.widths.tolist() == [1, 2]
    assert pl.solve(problem).feasible


def test_load_json_shuffled_nodes_and_edges_follow_the_chain(tmp_path):
    data = _json_problem()
    for t in data["nodes"]:
        data["nodes"][t].reverse()
        data["edges"][t].reverse()
    problem = pl.load_phaze_json(_write(tmp_path, data))
    assert problem.layer_ids.tolist() == [-1, 0, 1, 2]


def _mutate(path, value):
    data = _json_problem()
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize("path, value, match", [
    (("maxDevices",), _DELETE, "maxDevices"),
    (("maxDevices",), 0, "maxDevices"),
    (("maxDevices",), "8", "maxDevices"),
    (("bandwidth",), -1.0, "bandwidth"),
    (("maxMemoryPerDevice",), float("nan"), "maxMemoryPerDevice"),
    (("mbsInBatch",), 0.5, "mbsInBatch"),
    (("activationRecomputation",), "yes", "activationRecomputation"),
    (("optimizerAlgorithm",), "RMSprop", "optimizerAlgorithm"),
    (("nodes", "1", 2, "parameterSize"), -5.0, "parameterSize"),
    (("nodes", "2", 1, "optimalLatencyFw"), -0.1, "optimalLatencyFw"),
    (("nodes", "2", 1, "optimalLatencyBw"), float("nan"), "optimalLatencyBw"),
    (("nodes", "1", 0, "activationSize"), _DELETE, "activationSize"),
    (("nodes", "1", 0, "isTensorParallelized"), 1, "isTensorParallelized"),
    (("nodes", "2", 3, "id"), 7, "layer ids of width 2 differ"),
    (("edges", "1", 1, "communicationCost"), -1.0, "communicationCost"),
    (("edges", "1", 1, "destId"), 9, "not a layer id"),
    (("edges", "2"), _DELETE, "width 2"),
    (("nodes",), [], "nodes"),
])
def test_bad_json_fields(tmp_path, path, value, match):
    with pytest.raises(ValueError, match=match):
        pl.load_phaze_json(_write(tmp_path, _mutate(path, value)))


def test_branching_graph_names_the_layer(tmp_path):
    data = _json_problem()
    for t in data["edges"]:
        data["edges"][t].append({"sourceId": 0, "destId": 2, "communicationCost": 1.0})
    with pytest.raises(ValueError, match="layer 0 has two successors"):
        pl.load_phaze_json(_write(tmp_path, data))


def test_cycle_is_rejected(tmp_path):
    data = _json_problem()
    for t in data["edges"]:
        data["edges"][t].append({"sourceId": 2, "destId": -1, "communicationCost": 1.0})
    with pytest.raises(ValueError, match="cycle"):
        pl.load_phaze_json(_write(tmp_path, data))


def test_disconnected_graph_is_rejected(tmp_path):
    data = _json_problem()
    for t in data["edges"]:
        data["edges"][t].pop(1)
    with pytest.raises(ValueError, match="not a chain"):
        pl.load_phaze_json(_write(tmp_path, data))


def test_malformed_json_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        pl.load_phaze_json(path)


@pytest.mark.parametrize("field, value, match", [
    ("devices", 0, "devices"),
    ("microbatches", -1, "microbatches"),
    ("bandwidth", 0.0, "bandwidth"),
    ("memory_bytes", float("nan"), "memory_bytes"),
    ("optimizer", "lamb", "optimizer"),
    ("widths", [1, 1], "widths"),
    ("widths", [0, 2], "widths"),
    ("forward_s", -np.ones((2, 4)), "forward_s"),
    ("backward_s", np.full((2, 4), np.nan), "backward_s"),
    ("param_bytes", np.ones((2, 3)), "param_bytes"),
    ("edge_bytes", np.ones((2, 4)), "edge_bytes"),
    ("tensor_parallel", np.full((2, 4), 3), "tensor_parallel"),
    ("recompute", "no", "recompute"),
    ("layer_ids", [0, 0, 1, 2], "layer_ids"),
])
def test_bad_problem_arrays(field, value, match):
    with pytest.raises(ValueError, match=match):
        _uniform(**{field: value})


def test_solve_many_rejects_mixed_chain_lengths():
    with pytest.raises(ValueError, match="same chain length"):
        pl.solve_many([_uniform(L=3), _uniform(L=4)])
    assert pl.solve_many([]) == []


def test_problem_sorts_widths_ascending():
    fw = np.array([[1.0, 1.0], [3.0, 3.0]])
    p = _uniform(L=2, widths=(4, 1), forward_s=fw)
    assert p.widths.tolist() == [1, 4]
    assert p.forward_s[0].tolist() == [3.0, 3.0]


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def test_cli_place_writes_original_keys(golden, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli_main(["place", str(golden / "placement_bench_gpt3_1024.json"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stage" in text and "memory" in text
    plan = json.loads(out.read_text())
    for key in ("stages", "dataParallelDegree", "tensorParallelDegree", "finalTimePerBatch",
                "feasible", "reason", "stageLoads", "stageMemory"):
        assert key in plan
    assert plan["finalTimePerBatch"] == pytest.approx(GPT3_OPTIMUM_S, rel=1e-9)
    assert set(plan["stages"][0]) == {"nodes", "devicesForStage"}
    assert sum(len(s["nodes"]) for s in plan["stages"]) == 98


def test_cli_place_infeasible_and_bad_input(tmp_path, capsys):
    data = _json_problem()
    data["maxMemoryPerDevice"] = 1.0
    out = tmp_path / "plan.json"
    assert cli_main(["place", str(_write(tmp_path, data)), "-o", str(out)]) == 0
    assert "infeasible" in capsys.readouterr().out
    plan = json.loads(out.read_text())
    assert plan["feasible"] is False and plan["finalTimePerBatch"] is None and plan["reason"]
    data["maxDevices"] = 0
    assert cli_main(["place", str(_write(tmp_path, data, "bad.json"))]) == 2
    assert "maxDevices" in capsys.readouterr().err


def test_memory_limit_exactly_at_the_chain_order_sum():
    # The golden set puts limits exactly on a whole chain's requirement; the test is
    # "<=" with the sums taken in chain order (0.1 + 0.2 + 0.3 rounds differently
    # from 0.3 + 0.2 + 0.1).
    par = np.array([[0.1, 0.2, 0.3, 1e-3, 7e-5]])
    act = np.array([[0.3, 0.2, 0.1, 3e-3, 1e-7]])
    P = A = 0.0
    for x, y in zip(par[0], act[0]):
        P += x
        A += y
    need = 2.0 * P + A
    args = dict(widths=[1], forward_s=np.ones((1, 5)), backward_s=np.ones((1, 5)), param_bytes=par,
                activation_bytes=act, tensor_parallel=np.zeros((1, 5), bool),
                edge_bytes=np.zeros((1, 4)), devices=1, bandwidth=1.0, microbatches=2)
    fits = pl.solve(pl.PlacementProblem(memory_bytes=need, **args))
    assert fits.feasible and fits.pipeline_parallel == 1 and fits.stage_memory == [need]
    below = pl.PlacementProblem(memory_bytes=np.nextafter(need, 0.0), **args)
    assert not pl.solve(below).feasible
    assert pl.evaluate(below, fits) == math.inf


def test_trusted_constructor_sorts_widths_and_lowercases_optimizer():
    ref = _uniform(L=3, widths=(1, 2), optimizer="adam",
                   forward_s=np.array([[1.0, 2.0, 3.0], [0.6, 1.1, 1.6]]))
    trusted = pl.PlacementProblem.from_trusted_arrays(
        ref.widths[::-1], ref.forward_s[::-1], ref.backward_s[::-1], ref.param_bytes[::-1],
        ref.activation_bytes[::-1], ref.tensor_parallel[::-1], ref.edge_bytes[::-1], ref.devices,
        ref.memory_bytes, ref.bandwidth, ref.microbatches, ref.recompute, "Adam")
    assert trusted.widths.tolist() == [1, 2] and trusted.optimizer == "adam"
    assert pl.solve(trusted) == pl.solve(ref)


@st.composite
def medium_problems(draw):
    """Chains of 8–14 layers from a few layer kinds (runs of identical layers), mixed flags."""
    L = draw(st.integers(8, 14))
    widths = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True))
    W = len(widths)
    pos = st.floats(0.5, 10.0, allow_nan=False, allow_infinity=False)
    kinds = [[draw(pos) for _ in range(4)] for _ in range(draw(st.integers(1, 3)))]
    layer_kind = [draw(st.integers(0, len(kinds) - 1)) for _ in range(L)]
    base = np.array([kinds[k] for k in layer_kind]).T                 # (4, L)
    scale = 1.0 / np.array(widths, dtype=float)[:, None]
    tp = np.ones((W, L), dtype=bool)
    flags = draw(st.sampled_from(["all", "ends", "random"]))
    if flags == "ends":
        tp[:, 0] = tp[:, -1] = False
    elif flags == "random":
        tp = np.array(draw(st.lists(st.lists(st.booleans(), min_size=L, max_size=L),
                                    min_size=W, max_size=W)), dtype=bool)
    edges = np.tile(np.array(draw(st.lists(st.floats(0.0, 20.0), min_size=L - 1, max_size=L - 1))), (W, 1))
    total = float((3 * base[2] + base[3]).sum())
    return pl.PlacementProblem(
        widths=widths, forward_s=base[0] * scale, backward_s=base[1] * scale,
        param_bytes=base[2] * scale, activation_bytes=base[3] * scale, tensor_parallel=tp,
        edge_bytes=edges, devices=draw(st.integers(1, 24)),
        memory_bytes=draw(st.sampled_from([0.05, 0.1, 0.2, 0.4, 1.0])) * total,
        bandwidth=draw(st.sampled_from([1.0, 10.0, 1000.0])), microbatches=draw(st.integers(1, 64)),
        recompute=draw(st.booleans()), optimizer=draw(st.sampled_from(["sgd", "adam"])))


@settings(max_examples=25)
@given(medium_problems())
def test_solve_equals_plain_dp_on_longer_chains(problem):
    plan = pl.solve(problem)
    expected = naive.placement_dp_reference(problem)
    assert plan.feasible == math.isfinite(expected)
    if plan.feasible:
        assert plan.time_per_batch == pytest.approx(expected, rel=1e-9)
        assert pl.evaluate(problem, plan) == pytest.approx(plan.time_per_batch, rel=1e-12)


def test_trusted_problem_with_inconsistent_shapes_is_rejected_before_the_kernel():
    ref = _uniform(L=3)
    bad = pl.PlacementProblem.from_trusted_arrays(
        ref.widths, ref.forward_s, np.ones((2, 4)), ref.param_bytes, ref.activation_bytes,
        ref.tensor_parallel, ref.edge_bytes, ref.devices, ref.memory_bytes, ref.bandwidth,
        ref.microbatches)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        pl.solve(bad)
