"""Pipeline schedules per local batch (``pipeline_microbatches``; issues 25 and 27).

torchtitan (torchtitan/train.py) and NeMo AutoModel (examples/benchmark/benchmark_recipe.py:
``for ga_step_idx in range(ga_steps)``, each step a ``pp_schedule.step`` over
local_batch_size / pp_microbatch_size microbatches) run the pipeline schedule once per local
batch and accumulate the gradients over global / (local × dp) such schedules; Megatron-LM
runs all microbatches of a step in one schedule. Each schedule fills and drains the
pipeline: m/N schedules of N microbatches pay m/N bubbles and the same steady work. Checked
by hand on one plan, against the kernels' mirror (tests/naive_step.py) bit for bit, with
its refusals, its launch arguments and the validation rows it prices.
"""
import math
import tomllib

import numpy as np
import pytest

import naive_step
from phaze import launch, plan, step, validate
from phaze.arch import make_archs, presets
from phaze.models import ModelSpec
from phaze.step import _kernels as kern
from phaze.step import _layers, _plans

DENSE = ModelSpec(name="tiny-dense8", n_layers=8, hidden=64, heads=4, kv_heads=4,
                  ffn_hidden=256, vocab=512, seq_len=128, activation="swiglu",
                  norm="rmsnorm", position="rotary", bias=False, tied_embeddings=False)
KW = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=2, microbatch=1,
          global_batch=64, recompute="full", flash_attention=True, zero_stage=1)


def test_bubble_paid_once_per_schedule_by_hand():
    one = step.training_step(DENSE, "h100-sxm", **KW)            # m = 64 / (1·2) = 32
    assert one.ok, one.reason
    b0 = one.breakdown
    assert b0.microbatches == 32
    # 1F1B, p = 4, v = 1: one fill and drain of (p − 1) slots
    assert b0.bubble_s == pytest.approx(3 * b0.slot_s, rel=1e-15)
    for n, passes in ((32, 1), (16, 2), (8, 4), (4, 8)):
        r = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=n, **KW)
        assert r.ok, r.reason
        b = r.breakdown
        assert b.steady_s == b0.steady_s and b.slot_s == b0.slot_s
        assert b.bubble_s == passes * 3 * b0.slot_s
        assert b.total_s == pytest.approx(b0.total_s + (passes - 1) * 3 * b0.slot_s,
                                          rel=1e-12)
        assert r.plan["pipeline_microbatches"] == n
    # 0 (the default) is Megatron-LM's one schedule per step: bit for bit the plan without it
    zero = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=0, **KW)
    assert zero.time_s == one.time_s


def test_interleaved_schedules_per_local_batch():
    kw = dict(KW, virtual_stages=2)
    one = step.training_step(DENSE, "h100-sxm", **kw)
    r = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=8, **kw)
    assert one.ok and r.ok, (one.reason, r.reason)
    # interleaved: (p − 1)/v slots of bubble per schedule, 32 / 8 = 4 schedules
    assert one.breakdown.bubble_s == pytest.approx(3 * one.breakdown.slot_s / 2, rel=1e-15)
    assert r.breakdown.bubble_s == 4 * one.breakdown.bubble_s


def test_in_flight_bounded_by_one_schedule():
    # 1F1B keeps p − r microbatches of stage r in flight, at most the schedule's own
    full = step.training_step(DENSE, "h100-sxm", **KW)
    small = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=2, **KW)
    assert full.ok and small.ok
    assert [m.in_flight for m in full.memory] == [4, 3, 2, 1]
    assert [m.in_flight for m in small.memory] == [2, 2, 2, 1]
    per = full.memory[0].activations // 4
    assert small.memory[0].activations == 2 * per


def test_refusals():
    r = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=5, **KW)
    assert r.status == "infeasible" and "does not divide the 32" in r.reason
    r = step.training_step(DENSE, "h100-sxm", pipeline_microbatches=2,
                           **dict(KW, virtual_stages=2))
    assert r.status == "infeasible" and "divisible by p = 4" in r.reason
    with pytest.raises(ValueError, match="pipeline_microbatches must be a non-negative"):
        step.training_step(DENSE, "h100-sxm", pipeline_microbatches=-1, **KW)
    with pytest.raises(ValueError, match="pipeline_microbatches"):
        plan.check("pipeline_microbatches", 1.5)
    assert plan.KNOB["pipeline_microbatches"].calibrated_only


def test_trainers_that_run_it():
    kw = dict(KW, pipeline_microbatches=8)
    assert step.training_step(DENSE, "h100-sxm", **kw).ok
    rules = [x for x in plan.RULES if "pipeline_microbatches" in x.knobs]
    assert {x.trainer for x in rules} == {"megatron-lm", "deepspeed"}
    with pytest.raises(launch.NotLaunchable, match="32 microbatches in one pipeline schedule"):
        launch.megatron_arguments("llama3-8b", **kw)
    values = {**plan.Plan(**kw).as_dict(), "n_layers": 8}
    assert [x.why(values) for x in rules if x.refuses(values)] == [
        f"{n} runs the step's 32 microbatches in one pipeline schedule, not 8 per schedule"
        for n in ("Megatron-LM", "Megatron-DeepSpeed")]
    # all of a step's microbatches in one schedule is Megatron-LM's own; so is p = 1
    for same in (dict(KW, pipeline_microbatches=32),
                 dict(KW, pipeline_microbatches=8, pipeline_parallel=1)):
        values = {**plan.Plan(**same).as_dict(), "n_layers": 8}
        assert not [x for x in rules if x.refuses(values)]
    launch.megatron_arguments("llama3-8b", **dict(KW, pipeline_microbatches=32))


def _tt(**kw):
    text = launch.emit("torchtitan", "llama3-8b", **kw)
    text = text if isinstance(text, str) else "\n".join(map(str, text))
    return tomllib.loads("\n".join(x for x in text.splitlines() if not x.startswith("#")))


def test_torchtitan_local_batch_is_one_schedule():
    kw = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=2, microbatch=2,
              global_batch=64, recompute="full", flash_attention=True, zero_stage=3)
    # one schedule per step: local batch B/d = 32 samples of 2 per pipeline microbatch
    assert _tt(**kw)["training"]["local_batch_size"] == 32
    # N = 4 microbatches of 2 per schedule: local batch 8, torchtitan accumulates 64/(8·2)
    got = _tt(pipeline_microbatches=4, **kw)
    assert got["training"]["local_batch_size"] == 8
    assert got["parallelism"]["pipeline_parallel_microbatch_size"] == 2
    assert got["training"]["global_batch_size"] == 64


def _rows():
    return np.concatenate([presets.get("h100-sxm"),
                           make_archs(base="h100-sxm", node_size=2, net_gb_per_s=12.5)])


def test_kernels_equal_their_mirror():
    rows = _rows()
    table = _plans.layer_table(DENSE, rows, microbatch=1, tensor_parallel=(1,))
    prefix = _layers.kind_prefix(DENSE)
    sizes = table.sizes("full")
    t, sp = table.variants[0][0], table.variants[0][1]
    for p, v, m, mp in ((2, 1, 8, 2), (4, 1, 8, 4), (4, 1, 16, 2), (2, 2, 8, 4), (4, 2, 16, 8),
                        (4, 1, 8, 0)):
        pl = _layers.plan_records(p, t, 2, 1, 1, v, m, 8, 1, True, "full", sp,
                                  table.precision, mp=mp).reshape(1)
        for row in range(rows.shape[0]):
            stages = np.zeros(p, dtype=kern.STAGE_NODES)
            cell = np.zeros(1, dtype=kern.CELL_NODES)
            kern.stage_geometry(p, t, 2, 1, 1, int(rows["node_size"][row]), stages, cell)
            slots, slots_n = np.empty((p, 6)), np.empty((p, 6))
            bd, bd_n = (np.zeros(1, dtype=kern.BREAKDOWN) for _ in range(2))
            lt, rp = table.times[0, row:row + 1], table.rp[row:row + 1]
            got = kern.step_time(pl, cell, stages, lt, rp, sizes[:1], prefix, slots, bd)
            want = naive_step.step_time(pl[0], cell[0], stages, lt[0], rp[0], sizes[0], prefix,
                                        slots_n, bd_n[0])
            assert got == want and bd.tobytes() == bd_n.tobytes()
            passes = m // (mp or m)
            assert bd["bubble_s"][0] == passes * ((p - 1) * bd["slot_s"][0] / v)
            mem, mem_n = (np.zeros(1, dtype=kern.MEMORY) for _ in range(2))
            for r in range(p):
                assert kern.stage_memory(r, pl, sizes[:1], prefix, mem) == \
                    naive_step.stage_memory(r, pl[0], sizes[0], prefix, mem_n[0])
                assert mem.tobytes() == mem_n.tobytes()


def test_validate_prices_the_automodel_schedules():
    rows = {r["name"]: r for r in validate.run().rows}
    r = rows["automodel/deepseek-v3-671b/1024gpu-t1p4c1e64"]
    assert r["config"]["pipeline_microbatches"] == 8
    bd = r["breakdown"]
    # 8192 / (1 · 256) = 32 microbatches, 4 schedules of 8; interleaved over v = 8 chunks
    assert bd["microbatches"] == 32
    assert bd["bubble_s"] == pytest.approx(4 * 3 * bd["slot_s"] / 8, rel=1e-12)
    k = rows["automodel/kimi-k2/256gpu-t1p8c1e32"]["breakdown"]
    assert k["microbatches"] == 16
    assert k["bubble_s"] == pytest.approx(2 * 7 * k["slot_s"] / 4, rel=1e-12)
    assert math.isclose(rows["automodel/deepseek-v3-671b/256gpu-t1p4c1e64"]["breakdown"]
                        ["bubble_s"], 3 * rows["automodel/deepseek-v3-671b/256gpu-t1p4c1e64"]
                        ["breakdown"]["slot_s"] / 8, rel_tol=1e-12)
