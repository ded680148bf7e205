"""phaze.search: the sweep against brute force, pruning, baselines, bad input, multi-model."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import naive
from phaze import arch, graph, models, placement, search
from phaze.search import _baselines, _chunk, _point
from phaze.search._settings import SearchSettings

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
TINY2 = models.ModelSpec(name="tiny-wide", n_layers=3, hidden=96, heads=6, kv_heads=6,
                         ffn_hidden=384, vocab=512, seq_len=32)
KNOBS = dict(devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(0.0005, 0.002),
             recompute=(False, True), tensor_parallel=(1, 2, 4))


@pytest.fixture(scope="module")
def space():
    rows = arch.ArchSpace.default().configs
    return rows[[100, 9000, 20000]]


@pytest.fixture(scope="module")
def tiny_result(space):
    return search.search(TINY, space=space, executor="serial", progress=False, study=True,
                         **KNOBS)


def test_best_equals_brute_force(space, tiny_result):
    best, arg = naive.search_brute_force(TINY, space, **KNOBS)
    assert best > 0
    assert tiny_result.best["samples_per_s"] == pytest.approx(best, rel=1e-9)
    # The knobs matter on this grid: some points are infeasible (memory), some not.
    assert tiny_result.table["feasible"].any() and not tiny_result.table["feasible"].all()
    assert len(tiny_result) == 3 * 2 * 2 * 2


def test_every_row_re_evaluates(space, tiny_result):
    t = tiny_result.table
    for i in np.flatnonzero(t["feasible"]):
        sizes = [int(x) for x in t["stage_layers"][i].split(",")]
        # arch_id is the row of the default space (the fixture is a subset of it).
        aid = int(t["arch_id"][i])
        r = search.evaluate_point(TINY, arch.ArchSpace.default().configs[aid:aid + 1],
                                  int(t["tensor_parallel"][i]), len(sizes), int(t["data_parallel"][i]),
                                  int(t["microbatch"][i]), str(t["recompute"][i]), devices=4,
                                  global_batch=8, hbm_gib=float(t["hbm_gib"][i]), stages=sizes, study=True)
        assert r["feasible"]
        assert r["samples_per_s"] == pytest.approx(t["samples_per_s"][i], rel=1e-9)
        assert t["tokens_per_s"][i] == pytest.approx(t["samples_per_s"][i] * TINY.seq_len)


def test_prune_never_changes_the_answer(space, tiny_result):
    pruned = search.search(TINY, space=space, executor="serial", progress=False, prune=True,
                           study=True, **KNOBS)
    assert pruned.best["samples_per_s"] == tiny_result.best["samples_per_s"]
    assert pruned.best["arch_id"] == tiny_result.best["arch_id"]
    assert pruned.metadata["points_evaluated"] + pruned.metadata["points_pruned"] == \
        pruned.metadata["points_total"]


def test_prune_skips_points_on_a_larger_space():
    rows = arch.ArchSpace.default().configs[::400]
    kw = dict(study=True, devices=16, global_batch=32, microbatch=(1, 4), hbm_gib=(1.0,), recompute=(False,),
              tensor_parallel=(1, 2), space=rows, executor="serial", progress=False,
              baselines=False, chunk_archs=16)
    full = search.search(TINY, **kw)
    fast = search.search(TINY, prune=True, **kw)
    assert fast.metadata["points_pruned"] > 0
    assert fast.best["samples_per_s"] == full.best["samples_per_s"]
    assert fast.best["arch_id"] == full.best["arch_id"]


@given(st.integers(1, 64), st.integers(1, 64), st.integers(2, 12), st.data())
def test_time_lower_bound_is_valid(devices, microbatches, n_layers, data):
    """The pruning bound never exceeds the exact placement optimum."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    widths = np.array([1, 2])
    fw = rng.uniform(0.1, 2.0, size=(2, n_layers))
    bw = rng.uniform(0.1, 4.0, size=(2, n_layers))
    P = rng.uniform(0, 100, size=(2, n_layers))
    prob = placement.PlacementProblem(
        widths=widths, forward_s=fw, backward_s=bw, param_bytes=P,
        activation_bytes=rng.uniform(0, 100, size=(2, n_layers)),
        tensor_parallel=np.ones((2, n_layers), dtype=bool),
        edge_bytes=rng.uniform(0, 100, size=(2, n_layers - 1)), devices=devices,
        memory_bytes=1e9, bandwidth=rng.uniform(10, 1000), microbatches=microbatches,
        recompute=data.draw(st.booleans()), optimizer="sgd")
    plan = placement.solve(prob)
    bound = min(placement.time_per_batch_lower_bound(
        [float((fw[w] + bw[w]).sum())], [float((fw[w] + bw[w]).max())], float(P[w, 0]),
        [prob.bandwidth], devices, n_layers, microbatches,
        stage_devices=int(widths[w]))[0]  # every layer tensor-parallel: stages need t devices
        for w in range(2))
    assert plan.feasible
    assert bound <= plan.time_per_batch * (1 + 1e-12)


def test_layer_bound_below_schedules():
    """The scheduling-free layer bound (from op latencies or roofline bounds) never exceeds
    the makespan schedule_many returns, on real layer graphs and many architectures."""
    from phaze import cost, schedule

    rows = arch.ArchSpace.default().configs[::97]
    for t in (1, 2):
        for layer in graph.build_layers(TINY2, 2, t).layers:
            for g in (layer.forward, layer.backward):
                single, intra = cost.op_latencies(g, rows)
                makespan, _, _ = schedule.schedule_many(g, single, intra, rows["num_tc"],
                                                        rows["num_vc"])
                lb = schedule.layer_lower_bounds(g, single, intra, rows["num_tc"], rows["num_vc"])
                rs, ri = cost.roofline_bounds(g, rows)
                lb_roof = schedule.layer_lower_bounds(g, rs, ri, rows["num_tc"], rows["num_vc"])
                ok = np.isfinite(makespan)
                assert np.all(lb[ok] <= makespan[ok] * (1 + 1e-9))
                assert np.all(lb_roof[ok] <= lb[ok] * (1 + 1e-9))


def test_layer_bounds_equal_the_plain_python_reference():
    """The layer bound kernel (Cython, phaze/schedule/_bounds.pyx) against the kernel as it
    was before the Cython port, run as plain Python (tests/naive_layer_bounds.py), on
    every layer graph of a small model and a few architectures, with the latencies
    themselves held to the plain-Python operator loop (tests/naive_cost_kernels.py):
    every bit equal."""
    import naive_cost_kernels
    import naive_layer_bounds
    from phaze import cost, schedule

    rows = arch.ArchSpace.default().configs[::3001]
    for mb, t in ((1, 1), (2, 2)):
        for layer in graph.build_layers(TINY, mb, t).layers:
            for g in (layer.forward, layer.backward):
                single, intra = cost.op_latencies(g, rows)
                ref_single, ref_intra = naive_cost_kernels.op_latencies(g, rows)
                np.testing.assert_array_equal(single.view(np.int64), ref_single.view(np.int64))
                np.testing.assert_array_equal(intra.view(np.int64), ref_intra.view(np.int64))
                compiled = schedule.layer_lower_bounds(g, single, intra, rows["num_tc"],
                                                       rows["num_vc"])
                plain = naive_layer_bounds.layer_lower_bounds(g, single, intra, rows["num_tc"],
                                                              rows["num_vc"])
                assert compiled.shape == (len(rows),) and np.all(np.isfinite(compiled))
                assert np.all(compiled > 0)
                np.testing.assert_array_equal(compiled.view(np.int64), plain.view(np.int64))


def test_invalid_widths_are_skipped_and_recorded(space):
    r = search.search(TINY2, study=True, space=space[:1], executor="serial", progress=False, baselines=False,
                      devices=4, global_batch=8, microbatch=(1,), hbm_gib=(1.0,),
                      recompute=(False,), tensor_parallel=(1, 4))
    skipped = r.metadata["skipped_tensor_parallel"]["tiny-wide"]
    assert list(skipped) == ["4"] and "heads" in skipped["4"]
    assert set(r.table["tensor_parallel"][r.table["feasible"]]) <= {1}


def test_several_models_share_one_architecture(space):
    kw = dict(study=True, space=space, executor="serial", progress=False, baselines=False, devices=4,
              global_batch=8, microbatch=(1, 2), hbm_gib=(1.0,), recompute=(False,),
              tensor_parallel=(1, 2))
    r = search.search([TINY, TINY2], **kw)
    t = r.table
    best = {}
    for name in ("tiny", "tiny-wide"):
        sel = t["model"] == name
        best[name] = {int(a): t["samples_per_s"][sel & (t["arch_id"] == a)].max()
                      for a in np.unique(t["arch_id"])}
    tops = {name: max(v.values()) for name, v in best.items()}
    score = {a: np.mean([best[n][a] / tops[n] for n in best]) for a in best["tiny"]}
    assert r.best["arch_id"] == max(score, key=score.get)
    assert r.best["score"] == pytest.approx(max(score.values()))
    assert set(r.best["plans"]) == {"tiny", "tiny-wide"}
    for name, plan in r.best["plans"].items():
        assert plan["arch_id"] == r.best["arch_id"]
        assert plan["samples_per_s"] == pytest.approx(best[name][r.best["arch_id"]])
    pruned = search.search([TINY, TINY2], prune=True, **kw)
    assert pruned.best["arch_id"] == r.best["arch_id"]
    assert pruned.best["score"] == pytest.approx(r.best["score"])


def test_pareto_front(tiny_result):
    front = tiny_result.pareto()
    assert front["arch_id"].size >= 1
    assert np.all(np.diff(front["area_mm2"]) > 0)
    assert np.all(np.diff(front["score"]) > 0)
    assert front["score"].max() == pytest.approx(tiny_result.best["samples_per_s"])


def test_baselines_present(tiny_result):
    b = tiny_result.baselines
    assert set(b) == {"tpuv4_searched", "tpuv4_fixed", "block_optimal"}
    a = b["tpuv4_searched"]["models"]["tiny"]
    assert a["feasible"] and a["gain"] == pytest.approx(tiny_result.best["samples_per_s"]
                                                        / a["samples_per_s"])
    # No fixed strategy is known for a custom model: reported, not raised.
    assert not b["tpuv4_fixed"]["models"]["tiny"]["feasible"]
    c = b["block_optimal"]["models"]["tiny"]
    assert c["feasible"] and c["gain"] >= 1 - 1e-12


def test_block_optimal_baseline_is_the_fastest_block(space, tiny_result):
    from phaze import cost, schedule

    mg = graph.build_layers(TINY, 1, 1)
    block = mg.layers[[layer.kind for layer in mg.layers].index("block")]
    total = np.zeros(len(space))
    for g in (block.forward, block.backward):
        single, intra = cost.op_latencies(g, space)
        total += schedule.schedule_many(g, single, intra, space["num_tc"], space["num_vc"])[0]
    order = np.lexsort((np.arange(len(space)), space["area_mm2"], total))
    # The fixture holds rows 100, 9000, 20000 of the default space: ids keep those numbers.
    assert tiny_result.baselines["block_optimal"]["models"]["tiny"]["arch_id"] == \
        [100, 9000, 20000][int(order[0])]


def test_fixed_strategy_baseline_on_a_zoo_model():
    """bert-large's fixed strategy (p/d/t 8/128/1) on tpuv4, evaluated as a baseline."""
    tpu = arch.presets.get("tpuv4")
    bert = models.get("bert-large")
    settings = SearchSettings(models=(bert,), widths=((1, 2, 4, 8),), devices=1024,
                              global_batch=4096, microbatch=(1,), hbm_gib=(32.0,),
                              recompute=("none",), optimizer="sgd", gap=0.01, study=True)
    row = _baselines.fixed_baseline(settings, bert, tpu)
    direct = search.evaluate_point("bert-large", "tpuv4", 1, 8, 128, 1, False, devices=1024, study=True)
    assert row["feasible"] == direct["feasible"]
    if direct["feasible"]:
        assert row["samples_per_s"] == pytest.approx(direct["samples_per_s"])
        assert row["stage_layers"] == "4,3,3,3,3,3,3,4"
    too_few = _baselines.fixed_baseline(dataclasses.replace(settings, devices=64), bert, tpu)
    assert not too_few["feasible"] and "devices" in too_few["reason"]


def test_even_stages():
    assert _point.even_stages(26, 24, 8) == [4, 3, 3, 3, 3, 3, 3, 4]
    assert _point.even_stages(98, 96, 32) == [4] + [3] * 30 + [4]
    assert _point.even_stages(14, 12, 5) == [4, 3, 2, 2, 3]


def test_evaluate_point_breakdown_adds_up():
    r = search.evaluate_point(TINY, "tpuv4", 2, 2, 2, 1, True, devices=8, global_batch=8,
                              hbm_gib=1.0, study=True)
    assert r["feasible"]
    b = r["breakdown"]
    assert b["steady_s"] + b["bubble_s"] + b["grad_sync_s"] == pytest.approx(r["time_per_batch_s"],
                                                                           rel=1e-12)
    assert len(r["stages"]) == 2
    for s in r["stages"]:
        assert s["load_s"] == pytest.approx(s["compute_s"] + s["communication_s"])
        assert s["fits"] and s["memory_bytes"] > 0
    assert b["grad_sync_s"] > 0 and b["bubble_s"] > 0


def test_evaluate_point_reports_infeasible():
    r = search.evaluate_point(TINY, "tpuv4", 1, 1, 1, 1, False, hbm_gib=1e-6, global_batch=8, study=True)
    assert not r["feasible"] and "HBM" in r["reason"] and r["samples_per_s"] == 0.0


@pytest.mark.parametrize("kwargs, field", [
    (dict(models="no-such-model"), "models"),
    (dict(models=[]), "models"),
    (dict(devices=0), "devices"),
    (dict(global_batch=-1), "global_batch"),
    (dict(microbatch=(3,)), "microbatch"),
    (dict(microbatch=()), "microbatch"),
    (dict(hbm_gib=(float("nan"),)), "hbm_gib"),
    (dict(tensor_parallel=(0,)), "tensor_parallel"),
    (dict(recompute=("yes",)), "recompute"),
    (dict(optimizer="lion"), "optimizer"),
    (dict(space=arch.ArchSpace.default().configs[:0]), "space"),
    (dict(out="result.xlsx"), "out"),
    (dict(resume=True), "resume"),
    (dict(executor="dask"), "address"),
])
def test_bad_input_fails_before_any_work(kwargs, field, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("work started before the input was validated")

    monkeypatch.setattr(_chunk, "run_chunk", boom)
    args = dict(models="tiny-unused", devices=4, global_batch=8, space="tpuv4",
                executor="serial", progress=False)
    args["models"] = TINY
    args.update(kwargs)
    with pytest.raises(ValueError) as err:
        search.search(**args)
    msg = str(err.value)
    assert field in msg and "\n" not in msg


def test_bad_input_evaluate_point():
    with pytest.raises(ValueError, match="tensor_parallel"):
        search.evaluate_point(TINY2, "tpuv4", 4, 1, 1, 1, False, study=True)
    with pytest.raises(ValueError, match="microbatch"):
        search.evaluate_point(TINY, "tpuv4", 1, 1, 1, 3, False, global_batch=8, study=True)
    with pytest.raises(ValueError, match="stages"):
        search.evaluate_point(TINY, "tpuv4", 1, 2, 1, 1, False, stages=[1, 1], study=True)
    with pytest.raises(KeyError):
        search.evaluate_point(TINY, "no-such-arch", 1, 1, 1, 1, False, study=True)


def test_result_keeps_metadata(tiny_result):
    m = tiny_result.metadata
    assert m["phaze_version"]
    assert m["points_total"] == 24 and m["points_evaluated"] == 24
    assert m["points_per_s"] > 0 and m["wall_time_s"] > 0
    assert m["inputs"]["devices"] == 4 and m["inputs"]["models"] == ["tiny"]
    assert math.isfinite(tiny_result.best["time_per_batch_s"])
