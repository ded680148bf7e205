"""Layer times priced once and shared (issue 24): ``phaze.step.layer_table`` / LayerTable
answer exactly as ``best_plans`` and ``step_lower_bounds`` on any subset of their rows;
``phaze.cost.prepare`` answers exactly as ``op_latencies`` / ``p2p_seconds``; the plan
counts a search reports are the plans its kernel bounded and priced."""
import numpy as np
import pytest

from phaze import cost, graph, step
from phaze.arch import ArchSpace, make_archs, presets
from phaze.search import search
from phaze.step import _plans


def _rows():
    space = ArchSpace.default().configs
    return np.concatenate([presets.get("a100-80g"), presets.get("h100-sxm"), space[::4000],
                           make_archs(base="h100-sxm", node_size=4)])


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a).view(np.uint8).tobytes() \
        == np.ascontiguousarray(b).view(np.uint8).tobytes()


CASES = [("gpt3-175b", 1024, 1536, 1, {"tensor_parallel": (2, 8)}),
         ("mixtral-8x7b", 128, 256, 1, {"tensor_parallel": (1, 2)}),
         ("deepseek-v2-lite", 64, 128, 2, {"tensor_parallel": (1, 2)})]


@pytest.mark.parametrize("name,devices,gb,mb,grids", CASES, ids=[c[0] for c in CASES])
def test_table_answers_as_best_plans_on_any_subset(name, devices, gb, mb, grids):
    rows = _rows()
    table = step.layer_table(name, rows, microbatch=mb, **grids)
    assert len(table) == rows.shape[0]
    rng = np.random.default_rng(1)
    subsets = [None, rng.permutation(rows.shape[0])[:5], np.array([3, 3, 0, 3])]
    for recompute in ("none", "selective", "full"):
        for sub in subsets:
            archs = rows if sub is None else rows[sub]
            caps = np.full(archs.shape[0], 60 * 2.0 ** 30)
            for hbm in (None, caps):
                got = table.best_plans(devices=devices, global_batch=gb, recompute=recompute,
                                       hbm_bytes=hbm, rows=sub)
                want = step.best_plans(name, archs, devices=devices, global_batch=gb,
                                       microbatch=mb, recompute=recompute, hbm_bytes=hbm,
                                       **grids)
                _same(got, want)
            got = table.lower_bounds(devices=devices, global_batch=gb, recompute=recompute,
                                     rows=sub)
            want = step.step_lower_bounds(name, archs, devices=devices, global_batch=gb,
                                          microbatch=mb, recompute=recompute, **grids)
            _same(got, want)


def test_table_takes_the_plan_grids_per_call():
    rows = _rows()[:3]
    table = step.layer_table("gpt3-175b", rows, microbatch=1, tensor_parallel=(8,))
    for kw in ({"zero_stage": (1,), "overlap_grad_reduce": (False,)},
               {"virtual_stages": (1, 2)}, {"grad_reduce_dtype": "bf16"},
               {"launchable": False, "zero_stage": (3,)}):
        got = table.best_plans(devices=512, global_batch=1024, recompute="full", **kw)
        want = step.best_plans("gpt3-175b", rows, devices=512, global_batch=1024, microbatch=1,
                               recompute="full", tensor_parallel=(8,), **kw)
        _same(got, want)


def test_table_refuses_bad_input_in_one_sentence():
    rows = _rows()[:3]
    table = step.layer_table("bert-large", rows, microbatch=1)
    with pytest.raises(ValueError, match=r"rows must index the table's 3 rows"):
        table.best_plans(devices=8, global_batch=64, rows=[0, 3])
    with pytest.raises(ValueError, match=r"recompute must be one of"):
        table.lower_bounds(devices=8, global_batch=64, recompute="half")
    with pytest.raises(ValueError, match=r"devices"):
        table.best_plans(devices=0, global_batch=64)
    with pytest.raises(ValueError, match=r"zero_stage"):
        table.best_plans(devices=8, global_batch=64, zero_stage=(4,))
    with pytest.raises(ValueError, match=r"microbatch"):
        step.layer_table("bert-large", rows, microbatch=0)
    with pytest.raises(ValueError, match=r"precision must be one of"):
        step.layer_table("bert-large", rows, microbatch=1, precision="fp4")


def test_plan_counts_are_the_kernels_work():
    """plans_bounded = the (plan, row) pairs whose variant runs on the row and whose peak
    memory fits (computed here from the plan set's arrays); priced ≥ one per row with a
    plan and ≤ bounded."""
    rows = _rows()
    table = step.layer_table("gpt3-175b", rows, microbatch=1, tensor_parallel=(4, 8))
    out = table.best_plans(devices=1024, global_batch=1536, recompute="selective")
    ps = table.plan_set(1024, 1536, "selective", None, [0, 1, 2, 3], [False, True], True,
                        _plans._Sharding("fp32", True, True, (False, True)))
    cap = np.floor(rows["hbm_gib"].astype(np.float64) * 2 ** 30)
    ok = (ps.var_t[ps.plan_var][:, None] <= table.node_size[None, :]) \
        & (ps.plan_peak[:, None] <= cap[None, :])
    assert table.plans_bounded == int(ok.sum()) > 0
    n_found = int(out["feasible"].sum())
    assert n_found > 0
    assert n_found <= table.plans_priced <= table.plans_bounded
    table.best_plans(devices=1024, global_batch=1536, recompute="selective")
    assert table.plans_bounded == 2 * int(ok.sum())


def test_prepared_rows_price_as_op_latencies():
    rows = _rows()
    mg = graph.build_layers("llama3-8b", 1, 2, kernels="megatron", dtype="fp8")
    kinds = mg.kinds()
    for model, eff in (("study", None), ("calibrated", None), ("calibrated", "h100-sxm")):
        pr = cost.prepare(rows, model=model, efficiency=eff)
        assert len(pr) == rows.shape[0] and pr.model == model
        for g in (kinds["block"].forward, kinds["block"].backward, kinds["head"].forward):
            for a, b in zip(pr.op_latencies(g, fp8_rate=2.0),
                            cost.op_latencies(g, rows, model=model, efficiency=eff,
                                              fp8_rate=2.0)):
                _same(a, b)
        for inter in (False, True):
            _same(pr.p2p_seconds([0, 1e6, 3.5e9], inter_node=inter),
                  cost.p2p_seconds([0, 1e6, 3.5e9], rows, inter_node=inter, model=model,
                                   efficiency=eff))
    with pytest.raises(ValueError, match="op_graph must be a phaze.graph.OpGraph"):
        cost.prepare(rows).op_latencies("block")
    with pytest.raises(ValueError, match="nbytes must be finite"):
        cost.prepare(rows).p2p_seconds([-1], inter_node=True)
    with pytest.raises(ValueError, match="efficiency applies only to model='calibrated'"):
        cost.prepare(rows, model="study", efficiency="a100-80g")


def test_search_reports_its_plans_per_point_and_per_core():
    space = ArchSpace.default().configs[::2000]
    r = search("bert-large", devices=16, space=space, global_batch=64, baselines=False,
               executor="serial", progress=False)
    meta = r.metadata
    assert meta["plans_priced"] > 0 and meta["plans_bounded"] >= meta["plans_priced"]
    assert meta["worker_busy_s"] > 0
    assert meta["plans_per_core_s"] == pytest.approx(meta["plans_priced"] / meta["worker_busy_s"])
    text = r.format_summary()
    per_point = meta["plans_priced"] / meta["points_evaluated"]
    assert f"{meta['plans_priced']:,} plans priced, {per_point:,.1f} per point" in text
    study = search("bert-large", devices=16, space=space, global_batch=64, baselines=False,
                   executor="serial", progress=False, study=True)
    assert study.metadata["plans_priced"] == 0 and study.metadata["plans_per_core_s"] is None
    assert "plans priced" not in study.format_summary()


def test_many_graphs_in_one_pass_price_as_one_call_each():
    rows = _rows()
    graphs = []
    for dtype in ("bf16", "fp8", "fp16"):
        for t in (1, 4):
            mg = graph.build_layers("llama3-8b", 2, t, kernels="megatron", dtype=dtype)
            for layer in mg.kinds().values():
                graphs += [layer.forward, layer.backward]
    graphs.append(graph.build_layers("bert-large", 1, 1).kinds()["block"].forward)
    assert len({g.bytes_per_element for g in graphs}) >= 1 and any(g.fp8.any() for g in graphs)
    for model in ("study", "calibrated"):
        pr = cost.prepare(rows, model=model)
        many = pr.op_latencies_many(graphs, fp8_rate=2.0)
        assert len(many) == len(graphs)
        for g, (single, intra) in zip(graphs, many):
            want = pr.op_latencies(g, fp8_rate=2.0)
            _same(np.ascontiguousarray(single), want[0])
            _same(np.ascontiguousarray(intra), want[1])
