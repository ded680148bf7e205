"""phaze.placement's one cost model of a plan (breakdown) and its one lower bound.

``breakdown`` is what ``evaluate`` and ``phaze.search.evaluate_point`` report; it
is checked here against the golden optima, the kernel's own stage loads and
memory, and the README rules written out independently in ``tests/naive.py``.
``time_per_batch_lower_bound`` (vectorised, what the search prunes with) must
equal ``lower_bound_time`` (one problem) and never exceed the optimum.
"""
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import naive
from phaze import placement as pl


def _golden_files(golden):
    files = sorted((golden / "placement").glob("inst_*[0-9].json"))
    if not files:
        pytest.skip(f"no placement instances in {golden / 'placement'}")
    return files + [golden / "placement_bench_gpt3_1024.json"]


def _reference_time(problem, w, d, cuts):
    """Time per batch of a plan straight from the README rules (naive.placement_stage), or inf."""
    t = int(problem.widths[w])
    S, D, m = len(cuts), problem.devices, problem.microbatches
    loads, devices = [], 0
    for s, (first, last) in enumerate(cuts):
        load, mem = naive.placement_stage(problem, w, first, last, S - s)
        if mem > problem.memory_bytes:
            return math.inf
        loads.append(load)
        devices += t if t > 1 and problem.tensor_parallel[w, first:last + 1].any() else 1
    if t > D or d > min(D, m) or S > min(D, problem.n_layers) or devices * d > D:
        return math.inf
    p_first = float(np.sum(problem.param_bytes[w, cuts[0][0]:cuts[0][1] + 1]))
    return max(loads) * (math.ceil(m / d) + S - 1) + 4.0 * (d - 1) * p_first / (problem.bandwidth * d)


def _check_consistent(bd, problem):
    """Internal sums of a breakdown: load = compute + communication, steady + bubble + sync =
    time, the critical stage holds the largest load, fits = memory within the limit."""
    for st_ in bd.stages:
        assert st_.load_s == pytest.approx(st_.compute_s + st_.communication_s, rel=1e-12, abs=1e-12)
        assert st_.fits == (st_.memory_bytes <= problem.memory_bytes)
        assert st_.n_layers == st_.last - st_.first + 1
    assert bd.max_load_s == max(s.load_s for s in bd.stages)
    assert bd.stages[bd.critical_stage].load_s == bd.max_load_s
    assert [s.position for s in bd.stages] == list(range(len(bd.stages), 0, -1))
    if bd.feasible:
        assert bd.steady_s + bd.bubble_s + bd.grad_sync_s == pytest.approx(bd.time_per_batch,
                                                                        rel=1e-12, abs=1e-15)
    else:
        assert math.isinf(bd.time_per_batch) and bd.reason


def test_breakdown_agrees_with_the_golden_optima(golden):
    """On every golden instance: the breakdown of the solver's plan gives the original's
    optimum, evaluate's time bit for bit, and the kernel's stage loads and memory."""
    for f in _golden_files(golden):
        problem = pl.load_phaze_json(f)
        plan = pl.solve(problem)
        if not plan.feasible:
            assert pl.evaluate(problem, plan) == math.inf
            with pytest.raises(ValueError, match="infeasible"):
                pl.breakdown(problem, plan)
            continue
        bd = pl.breakdown(problem, plan)
        assert bd.feasible and bd.reason == ""
        assert bd.time_per_batch == pl.evaluate(problem, plan)
        assert bd.time_per_batch == pytest.approx(plan.time_per_batch, rel=1e-12), f.name
        expected = f.with_name(f.stem + ".expected.json")
        if expected.exists():
            assert bd.time_per_batch == pytest.approx(
                json.loads(expected.read_text())["time_per_batch"], rel=1e-9), f.name
        assert [s.load_s for s in bd.stages] == pytest.approx(plan.stage_loads, rel=1e-12)
        assert [s.memory_bytes for s in bd.stages] == pytest.approx(plan.stage_memory, rel=1e-12)
        assert [s.devices for s in bd.stages] == [a for _, a in plan.stages]
        assert bd.devices_used == plan.devices_used
        _check_consistent(bd, problem)


@st.composite
def problems_and_plans(draw):
    """A small problem and any plan on it: width, d, and a cut of the chain."""
    L = draw(st.integers(1, 7))
    widths = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3, unique=True))
    W = len(widths)
    pos = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)
    arr = lambda: np.array(draw(st.lists(pos, min_size=W * L, max_size=W * L))).reshape(W, L)  # noqa: E731
    fw, bw, par, act = arr(), arr(), arr(), arr()
    tp = np.array(draw(st.lists(st.booleans(), min_size=W * L, max_size=W * L))).reshape(W, L)
    edges = np.array(draw(st.lists(pos, min_size=W * (L - 1), max_size=W * (L - 1)))).reshape(W, L - 1)
    total = float((3 * par + act).sum()) + 1.0
    problem = pl.PlacementProblem(
        widths=widths, forward_s=fw, backward_s=bw, param_bytes=par, activation_bytes=act,
        tensor_parallel=tp, edge_bytes=edges, devices=draw(st.integers(1, 12)),
        memory_bytes=draw(st.sampled_from([0.0, 0.1, 0.3, 1.0])) * total,
        bandwidth=draw(st.sampled_from([0.5, 1.0, 100.0])), microbatches=draw(st.integers(1, 9)),
        recompute=draw(st.booleans()), optimizer=draw(st.sampled_from(["sgd", "adam"])))
    w = draw(st.integers(0, W - 1))
    cut_at = sorted(draw(st.sets(st.integers(1, L - 1), max_size=L - 1))) if L > 1 else []
    bounds = [0] + cut_at + [L]
    cuts = [(bounds[i], bounds[i + 1] - 1) for i in range(len(bounds) - 1)]
    t = int(problem.widths[w])
    stages = [(problem.layer_ids[a:b + 1].tolist(),
               t if t > 1 and problem.tensor_parallel[w, a:b + 1].any() else 1) for a, b in cuts]
    d = draw(st.integers(1, 10))
    return problem, w, d, cuts, pl.Placement(True, math.nan, t, d, stages, [], [])


@given(problems_and_plans())
def test_breakdown_of_any_plan_follows_the_rules(case):
    problem, w, d, cuts, plan = case
    bd = pl.breakdown(problem, plan)
    S = len(cuts)
    for s, ((first, last), stage) in enumerate(zip(cuts, bd.stages)):
        load, mem = naive.placement_stage(problem, w, first, last, S - s)
        assert (stage.first, stage.last) == (first, last)
        assert stage.load_s == pytest.approx(load, rel=1e-12, abs=1e-12)
        assert stage.memory_bytes == pytest.approx(mem, rel=1e-12, abs=1e-12)
    ref = _reference_time(problem, w, d, cuts)
    assert bd.feasible == math.isfinite(ref)
    if bd.feasible:
        assert bd.time_per_batch == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert pl.evaluate(problem, plan) == bd.time_per_batch or (
        math.isinf(bd.time_per_batch) and math.isinf(pl.evaluate(problem, plan)))
    _check_consistent(bd, problem)


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 12), st.integers(1, 8),
       st.sampled_from([1, 2, 4]), st.booleans(), st.integers(0, 2**31))
def test_vectorised_bound_equals_the_scalar_bound_and_stays_below_the_optimum(
        devices, microbatches, n_layers, n_archs, t, all_tp, seed):
    """One call over n_archs instances of a chain (as the search makes it, one per
    architecture) equals lower_bound_time on each instance alone, bit for bit, and
    no instance's bound exceeds its exact optimum."""
    rng = np.random.default_rng(seed)
    fw = rng.uniform(0.01, 2.0, size=(n_archs, n_layers))
    bw = rng.uniform(0.01, 4.0, size=(n_archs, n_layers))
    par = rng.uniform(0.0, 100.0, size=n_layers)
    tp = np.ones(n_layers, bool) if all_tp else rng.integers(0, 2, n_layers).astype(bool)
    bandwidth = rng.uniform(10.0, 1000.0, size=n_archs)
    problems = [pl.PlacementProblem(
        widths=[t], forward_s=fw[k][None], backward_s=bw[k][None], param_bytes=par[None],
        activation_bytes=np.zeros((1, n_layers)), tensor_parallel=tp[None],
        edge_bytes=rng.uniform(0, 100, size=(1, n_layers - 1)), devices=devices, memory_bytes=1e12,
        bandwidth=bandwidth[k], microbatches=microbatches, recompute=bool(rng.integers(2)))
        for k in range(n_archs)]
    per_layer = fw + bw
    a = t if t > 1 and tp.all() else 1
    vec = pl.time_per_batch_lower_bound(per_layer.sum(axis=1), per_layer.max(axis=1), float(par[0]),
                                        bandwidth, devices, n_layers, microbatches, stage_devices=a)
    assert vec.shape == (n_archs,)
    for k, problem in enumerate(problems):
        scalar = pl.lower_bound_time(problem)
        if t > devices:
            assert math.isinf(scalar)
            continue
        assert scalar == vec[k]
        plan = pl.solve(problem)
        if plan.feasible:
            assert scalar <= plan.time_per_batch * (1 + 1e-12)


def test_lower_bound_below_golden_optima(golden):
    for f in _golden_files(golden):
        problem = pl.load_phaze_json(f)
        plan = pl.solve(problem)
        if plan.feasible:
            assert pl.lower_bound_time(problem) <= plan.time_per_batch * (1 + 1e-12), f.name
