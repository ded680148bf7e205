"""Power, energy and cost in evaluate and the search (issue 28): the columns, the budget and
the objective, on the command line and in Python."""
import json
import math

import numpy as np
import pytest

from phaze import search, step
from phaze.arch import ArchSpace
from phaze.cli import main

PLAN = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
            recompute="full", global_batch=64)


def _evaluate(**kw):
    return search.evaluate_point("llama3-8b", "h100-sxm", PLAN["tensor_parallel"],
                                 PLAN["pipeline_parallel"], PLAN["data_parallel"],
                                 PLAN["microbatch"], PLAN["recompute"],
                                 global_batch=PLAN["global_batch"], zero_stage=1, **kw)


def test_evaluate_reports_power_energy_and_its_breakdown():
    r = _evaluate()
    assert r["feasible"]
    assert set(r["energy_breakdown_j"]) == set(step.ENERGY_PARTS)
    assert sum(r["energy_breakdown_j"].values()) == pytest.approx(r["energy_per_step_j"],
                                                                  rel=1e-12)
    # power per chip = energy per step / devices / seconds
    assert r["power_w"] == pytest.approx(r["energy_per_step_j"] / 8 / r["time_per_batch_s"],
                                         rel=1e-9)
    assert r["tokens_per_joule"] == pytest.approx(64 * 8192 / r["energy_per_step_j"], rel=1e-12)
    # a measured chip runs at its own clock: no cap unless one is given
    assert r["power_cap_w"] is None and r["clock_fraction"] == 1.0
    assert r["energy_breakdown_j"]["static"] > 0 and r["energy_breakdown_j"]["compute"] > 0


def test_a_power_cap_below_the_steps_power_lowers_the_clock():
    free = _evaluate()
    cap = 0.8 * free["power_w"]
    r = _evaluate(max_power_w=cap)
    assert r["power_cap_w"] == cap and r["clock_fraction"] < 1.0
    assert r["power_w"] == pytest.approx(cap, rel=1e-6)
    assert r["time_per_batch_s"] > free["time_per_batch_s"]
    assert r["time_at_full_clock_s"] == free["time_per_batch_s"]
    assert r["samples_per_s"] == pytest.approx(64 / r["time_per_batch_s"], rel=1e-12)


def test_a_cap_no_clock_meets_is_infeasible_in_one_sentence():
    r = _evaluate(max_power_w=1.0)
    assert r["feasible"] is False
    assert "power cap (1 W per chip) even at the lowest clock" in r["reason"]


def test_the_cli_evaluate_json_carries_the_power(capsys):
    assert main(["evaluate", "--model", "llama3-8b", "--arch", "h100-sxm", "--tp", "1",
                 "--pp", "1", "--dp", "8", "--global-batch", "64", "--json", "--zero-stage",
                 "1", "--recompute", "full",
                 "--max-power-w", "300"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["power_cap_w"] == 300.0 and r["power_w"] <= 300.0 * (1 + 1e-9)


@pytest.fixture(scope="module")
def small_search():
    rows = ArchSpace.default().configs[::1999]
    return rows, search.search("bert-large", devices=8, global_batch=64, space=rows,
                               executor="serial", baselines=False, progress=False,
                               microbatch=(2, 8))


def test_search_rows_carry_the_power_and_cost_columns(small_search):
    rows, res = small_search
    t = res.table
    ok = t["feasible"]
    assert ok.any()
    for name in ("power_w", "clock_fraction", "energy_per_step_j", "tokens_per_joule",
                 "chip_cost_usd", "usd_per_million_tokens"):
        assert np.all(np.isfinite(t[name][ok])) and np.all(t[name][ok] > 0), name
    # the default budget is the template's, and no feasible row runs above it
    assert res.metadata["inputs"]["max_power_w"] == pytest.approx(192.0)
    assert np.all(t["power_w"][ok] <= 192.0 * (1 + 1e-6))
    tokens = 64 * 512
    assert np.allclose(t["tokens_per_joule"][ok], tokens / t["energy_per_step_j"][ok])
    assert np.allclose(t["time_per_batch_s"][ok] * t["samples_per_s"][ok], 64.0)


def test_the_objective_ranks_the_rows(small_search):
    rows, _ = small_search
    res = search.search("bert-large", devices=8, global_batch=64, space=rows,
                        executor="serial", baselines=False, progress=False, microbatch=(2, 8),
                        objective="perf-per-watt")
    t = res.table
    ok = t["feasible"]
    assert res.best["tokens_per_joule"] == pytest.approx(t["tokens_per_joule"][ok].max())
    cheap = search.search("bert-large", devices=8, global_batch=64, space=rows,
                          executor="serial", baselines=False, progress=False,
                          microbatch=(2, 8), objective="perf-per-dollar")
    t = cheap.table
    assert cheap.best["usd_per_million_tokens"] == pytest.approx(
        t["usd_per_million_tokens"][t["feasible"]].min())


def test_a_tighter_budget_never_speeds_a_row_and_a_tiny_one_is_infeasible(small_search):
    rows, res = small_search
    tight = search.search("bert-large", devices=8, global_batch=64, space=rows,
                          executor="serial", baselines=False, progress=False,
                          microbatch=(2, 8), max_power_w=60.0)
    a, b = res.table, tight.table
    both = a["feasible"] & b["feasible"]
    assert np.all(b["samples_per_s"][both] <= a["samples_per_s"][both] * (1 + 1e-12))
    none = search.search("bert-large", devices=8, global_batch=64, space=rows[:3],
                         executor="serial", baselines=False, progress=False, microbatch=(8,),
                         max_power_w=0.5)
    assert not none.table["feasible"].any()
    assert all("power budget (0.5 W per chip)" in r for r in none.table["reason"])


def test_objective_and_budget_are_checked_in_one_sentence():
    with pytest.raises(ValueError, match="objective 'perf-per-watt' needs prune off"):
        search.search("bert-large", devices=8, global_batch=64, prune=True,
                      objective="perf-per-watt", space=ArchSpace.default().configs[:2])
    with pytest.raises(ValueError, match="objective must be one of"):
        search.search("bert-large", devices=8, global_batch=64, objective="speed",
                      space=ArchSpace.default().configs[:2])
    with pytest.raises(ValueError, match="max_power_w"):
        search.search("bert-large", devices=8, global_batch=64, max_power_w=-1,
                      space=ArchSpace.default().configs[:2])


def test_the_study_model_keeps_its_numbers_and_has_no_power():
    rows = ArchSpace.default().configs[::4999]
    res = search.search("bert-large", devices=8, global_batch=64, space=rows, study=True,
                        executor="serial", baselines=False, progress=False, microbatch=(8,))
    assert math.isinf(res.metadata["inputs"]["max_power_w"])
    assert np.all(np.isnan(res.table["power_w"]))


def test_the_cli_search_takes_the_budgets_and_the_objective(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["search", "--model", "bert-large", "--devices", "8", "--global-batch", "64",
                 "--microbatch", "8", "--space-every", "4999", "--serial", "--no-baselines",
                 "--max-power-w", "100", "--objective", "perf-per-watt",
                 "--max-area-mm2", "200", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tokens/J" in text and "per million tokens" in text
    res = search.load_result(out)
    t = res.table
    assert res.metadata["inputs"]["max_power_w"] == 100.0
    assert res.metadata["inputs"]["objective"] == "perf-per-watt"
    assert np.all(t["area_mm2"] <= 200.0) and len(t["area_mm2"])
    ok = t["feasible"]
    assert np.all(t["power_w"][ok] <= 100.0 * (1 + 1e-6))
    assert res.best["tokens_per_joule"] == pytest.approx(t["tokens_per_joule"][ok].max())
    with pytest.raises(ValueError, match="max_area_mm2 1: no architecture of the space"):
        search.search("bert-large", devices=8, global_batch=64, max_area_mm2=1.0,
                      space=ArchSpace.default().configs[:50])


def test_a_fixed_arch_search_prices_power_as_evaluate_does():
    # a preset's rows are that chip: its own node (4 nm) and memory and fabric kinds (HBM3,
    # NVLink 4, NDR InfiniBand), as evaluate's plan_power takes them, not TPU v4's
    res = search.search("llama3-8b", devices=8, global_batch=64, arch="h100-sxm",
                        executor="serial", progress=False, microbatch=(1,), tensor_parallel=(1,),
                        recompute=("full",))
    b = res.best
    knobs = {k: b[k] for k in ("sequence_parallel", "virtual_stages", "zero_stage",
                               "flash_attention", "overlap_grad_reduce", "expert_parallel",
                               "context_parallel", "overlap_param_gather", "tp_comm_overlap",
                               "account_for_embedding")}
    r = search.evaluate_point("llama3-8b", "h100-sxm", b["tensor_parallel"],
                              b["pipeline_parallel"], b["data_parallel"], b["microbatch"],
                              b["recompute"], global_batch=64, **knobs)
    assert r["feasible"] and b["time_per_batch_s"] == r["time_per_batch_s"]
    assert b["power_w"] == pytest.approx(r["power_w"], rel=1e-12)
    assert b["energy_per_step_j"] == pytest.approx(r["energy_per_step_j"], rel=1e-12)
    # and its cost: the die at 4 nm with HBM3, 80 GiB
    from phaze import arch
    chip = arch.resolve_chip("h100-sxm")
    area = arch.die_area_mm2(chip.row, process_nm=4, hbm_kind="HBM3")[0]
    want = arch.chip_cost_usd(area, process_nm=4, hbm_gib=80.0, hbm_kind="HBM3")[0]
    assert b["chip_cost_usd"] == pytest.approx(float(want), rel=1e-12)


def test_a_hypothetical_row_is_built_on_the_search_node():
    from phaze import arch
    from phaze.search import _power
    rows = ArchSpace.default().configs[1:40:13]        # not tpuv4's own row (row 0)
    assert [c for _, c in _power.row_chips(rows)] == [None]
    area = arch.die_area_mm2(rows, process_nm=_power.SEARCH_PROCESS_NM)[0]
    want = arch.chip_cost_usd(area, process_nm=_power.SEARCH_PROCESS_NM, hbm_gib=32.0)
    got = _power.ChunkPower(rows).costs(32.0)
    assert np.array_equal(got, want)
    both = np.concatenate([arch.presets.get("h100-sxm"), rows[:1]])
    kinds = [(m.tolist(), c and c.name) for m, c in _power.row_chips(both)]
    assert kinds == [([True, False], "h100-sxm"), ([False, True], None)]
