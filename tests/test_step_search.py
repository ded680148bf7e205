"""phaze.step.best_plans and step_lower_bounds against the brute force over
phaze.step.training_step (the fixed-plan model they share their arithmetic with)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import step
from phaze.arch import ArchSpace, make_archs, presets
from phaze.models import ModelSpec

TINY4 = ModelSpec(name="gpt-4x64", n_layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                  vocab=500, seq_len=64)
TINY6 = ModelSpec(name="gpt-6x96", n_layers=6, hidden=96, heads=6, kv_heads=6, ffn_hidden=384,
                  vocab=700, seq_len=96)
SPACE = ArchSpace.default().configs
#: a100 preset (its own efficiency set), template rows of the space, and hypothetical rows
#: with small nodes so that transfers, rings and gathers cross node boundaries.
ROWS = np.concatenate([presets.get("a100-80g"), SPACE[[0, 7000, 29359]],
                       make_archs(base="a100-80g", node_size=2),
                       make_archs(base="a100-80g", node_size=4, net_gb_per_s=12.5),
                       make_archs(base="a100-80g", node_size=3, link_gb_per_s=50.0)])
WIDTHS = (1, 2, 4)

FIELDS_OF_BREAKDOWN = (("forward_s", "forward_s"), ("backward_s", "backward_s"),
                       ("recompute_s", "recompute_s"), ("p2p_s", "p2p_s"),
                       ("bubble_s", "bubble_s"), ("dp_allreduce_s", "dp_allreduce_s"),
                       ("optimizer_s", "optimizer_s"))


def _plans(model, devices, global_batch, microbatch):
    """Every knob combination of the default grids (v up to L), launchable or not."""
    L = model.n_layers
    for t in WIDTHS:
        for p in range(1, L + 1):
            for d in range(1, devices + 1):
                if t * p * d > devices:
                    continue
                for v in range(1, L + 1):
                    for sp in (False, True):
                        for flash in (False, True):
                            for zero in range(4):
                                for ogr in (False, True):
                                    for opg in (False, True):
                                        # p not dividing L: the split counting the
                                        # embedding and loss as layers (else infeasible)
                                        yield dict(tensor_parallel=t, pipeline_parallel=p,
                                                   data_parallel=d, virtual_stages=v,
                                                   sequence_parallel=sp, flash_attention=flash,
                                                   zero_stage=zero, overlap_grad_reduce=ogr,
                                                   overlap_param_gather=opg,
                                                   account_for_embedding=bool(L % p),
                                                   microbatch=microbatch,
                                                   global_batch=global_batch)


def _launchable(plan):
    """Whether a trainer launches ``plan``: no ZeRO 2–3 sharded over more than one rank
    (the cp·d data and context ranks; ZeRO at one rank is no ZeRO) together with pipeline
    or context parallelism."""
    cp = plan.get("context_parallel", 1)
    return not (plan["zero_stage"] == 2 and cp * plan["data_parallel"] > 1
                and (plan["pipeline_parallel"] > 1 or cp > 1))


def _brute(model, row, cap, plans, recompute, launchable=True):
    """The least time over every combination of ``plans`` (dicts of training_step's
    keywords) that fits in ``cap`` bytes; ``launchable``: only what a trainer launches."""
    best = math.inf
    for plan in plans:
        if launchable and not _launchable(plan):
            continue
        r = step.training_step(model, row[None], recompute=recompute, **plan)
        if r.ok and all(mb.total <= cap for mb in r.memory) and r.time_s < best:
            best = r.time_s
    return best


def _check_row_is_its_plan(model, row, rec, recompute, microbatch, global_batch):
    """The returned plan, priced by training_step, gives the row's time and fields."""
    r = step.training_step(
        model, row[None], tensor_parallel=int(rec["tensor_parallel"]),
        pipeline_parallel=int(rec["pipeline_parallel"]), data_parallel=int(rec["data_parallel"]),
        expert_parallel=int(rec["expert_parallel"]), context_parallel=int(rec["context_parallel"]),
        microbatch=microbatch, global_batch=global_batch, recompute=recompute,
        virtual_stages=int(rec["virtual_stages"]), sequence_parallel=bool(rec["sequence_parallel"]),
        flash_attention=bool(rec["flash_attention"]), zero_stage=int(rec["zero_stage"]),
        overlap_grad_reduce=bool(rec["overlap_grad_reduce"]),
        overlap_param_gather=bool(rec["overlap_param_gather"]),
        account_for_embedding=bool(rec["account_for_embedding"]))
    assert r.ok, r.reason
    assert rec["time_s"] == pytest.approx(r.time_s, rel=1e-12)
    for ours, theirs in FIELDS_OF_BREAKDOWN:
        assert rec[ours] == pytest.approx(getattr(r.breakdown, theirs), rel=1e-12, abs=1e-300)
    assert rec["microbatches"] == r.breakdown.microbatches
    assert rec["devices_used"] == (rec["tensor_parallel"] * rec["context_parallel"]
                                   * rec["pipeline_parallel"] * rec["data_parallel"])
    assert rec["sequence_parallel"] == r.plan["sequence_parallel_effective"]
    peak = r.peak_memory
    assert rec["memory_bytes"] == peak.total
    assert rec["weights_bytes"] == peak.weights
    assert rec["gradients_bytes"] == peak.gradients
    assert rec["optimizer_bytes"] == peak.optimizer_state
    assert rec["activations_bytes"] == peak.activations + peak.activations_other
    assert rec["workspace_bytes"] == peak.workspace
    return r


@settings(max_examples=8)
@given(model=st.sampled_from([TINY4, TINY6]), devices=st.integers(1, 8),
       batch_mult=st.integers(1, 4), microbatch=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]),
       log_cap=st.floats(5.0, 9.0), rows=st.lists(st.integers(0, len(ROWS) - 1), min_size=1,
                                                  max_size=2, unique=True))
def test_best_plans_is_the_brute_force_minimum(model, devices, batch_mult, microbatch, recompute,
                                               log_cap, rows):
    global_batch = microbatch * batch_mult * 2
    cap = 10.0 ** log_cap
    archs = ROWS[rows]
    out = step.best_plans(model, archs, devices=devices, global_batch=global_batch,
                          microbatch=microbatch, recompute=recompute, hbm_bytes=cap,
                          tensor_parallel=WIDTHS)
    assert out.dtype == step.PLAN_DTYPE
    for i, row in enumerate(archs):
        ref = _brute(model, row, cap, _plans(model, devices, global_batch, microbatch), recompute)
        if math.isinf(ref):
            assert not out["feasible"][i] and math.isinf(out["time_s"][i])
            assert out["reason"][i] in (1, 2)
            continue
        assert out["feasible"][i] and out["reason"][i] == 0
        assert out["time_s"][i] == pytest.approx(ref, rel=1e-12)
        r = _check_row_is_its_plan(model, row, out[i], recompute, microbatch, global_batch)
        assert all(mb.total <= cap for mb in r.memory)
        assert out["memory_bytes"][i] <= cap


@pytest.mark.parametrize("rows, devices, global_batch, recompute", [
    ([4, 6], 8, 16, "full"),       # nodes of 2 and 3: boundaries, rings and gathers cross nodes
    ([5, 0], 8, 8, "selective"),   # nodes of 4 and 8; interleaving needs m divisible by p
])
def test_best_plans_brute_force_on_small_nodes(rows, devices, global_batch, recompute):
    archs = ROWS[rows]
    out = step.best_plans(TINY4, archs, devices=devices, global_batch=global_batch, microbatch=1,
                          recompute=recompute, hbm_bytes=1e12, tensor_parallel=WIDTHS)
    for i, row in enumerate(archs):
        ref = _brute(TINY4, row, 1e12, _plans(TINY4, devices, global_batch, 1), recompute)
        assert out["time_s"][i] == pytest.approx(ref, rel=1e-12)
        _check_row_is_its_plan(TINY4, row, out[i], recompute, 1, global_batch)


def test_hbm_none_takes_each_rows_capacity_and_too_little_is_infeasible():
    archs = ROWS[[0, 4]]
    out = step.best_plans(TINY4, archs, devices=4, global_batch=8, microbatch=1)
    assert out["feasible"].all()
    for i in range(2):
        assert out["memory_bytes"][i] <= archs["hbm_gib"][i] * 2 ** 30
        _check_row_is_its_plan(TINY4, archs[i], out[i], "full", 1, 8)
    tight = step.best_plans(TINY4, archs, devices=4, global_batch=8, microbatch=1,
                            hbm_bytes=np.array([1e3, 1e12]))
    assert not tight["feasible"][0] and tight["reason"][0] == 1
    assert step.PLAN_REASONS[1] and tight["feasible"][1]


def test_no_launchable_plan_has_its_reason():
    # heads = 4: t = 8 is not allowed, and 3 layers / batch 3 leave nothing at t = 8
    out = step.best_plans(TINY4, ROWS[:1], devices=8, global_batch=8, microbatch=1,
                          tensor_parallel=(8,))
    assert not out["feasible"][0] and out["reason"][0] == 2 and math.isinf(out["time_s"][0])
    # node of 2: t = 4 does not fit in a node
    out = step.best_plans(TINY4, ROWS[4:5], devices=8, global_batch=8, microbatch=1,
                          tensor_parallel=(4,))
    assert out["reason"][0] == 2


def test_overlap_grad_reduce_is_never_slower():
    kw = dict(devices=8, global_batch=16, microbatch=1, recompute="none")
    both = step.best_plans(TINY6, ROWS, **kw)
    off = step.best_plans(TINY6, ROWS, overlap_grad_reduce=(False,), **kw)
    on = step.best_plans(TINY6, ROWS, overlap_grad_reduce=(True,), **kw)
    assert np.array_equal(both["time_s"], on["time_s"])
    assert np.all(on["time_s"] <= off["time_s"])
    assert both["overlap_grad_reduce"].all() and not off["overlap_grad_reduce"].any()


def test_grids_restrict_the_plans_and_sp_is_recorded_effective():
    out = step.best_plans(TINY6, ROWS, devices=8, global_batch=16, microbatch=1,
                          tensor_parallel=(1,), sequence_parallel=(True,), flash_attention=(True,),
                          virtual_stages=(1,), zero_stage=(2,))
    assert (out["tensor_parallel"] == 1).all() and not out["sequence_parallel"].any()
    assert out["flash_attention"].all() and (out["virtual_stages"] == 1).all()
    # ZeRO 2 at d = 1 is ZeRO 0 (no sharding): still recorded as the grid's stage
    assert (out["zero_stage"] == 2).all()


def test_efficiency_argument_forms_agree():
    archs = ROWS[:3]
    kw = dict(devices=4, global_batch=8, microbatch=1)
    from phaze.arch import efficiency
    a = step.best_plans(TINY4, archs, efficiency="a100-80g", **kw)
    b = step.best_plans(TINY4, archs, efficiency=efficiency.get("a100-80g"), **kw)
    c = step.best_plans(TINY4, archs, efficiency=np.repeat(efficiency.get("a100-80g").row(), 3),
                        **kw)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    d = step.best_plans(TINY4, archs, **kw)           # for_rows: a100's set on row 0 only
    assert d["time_s"][0] == a["time_s"][0]


@pytest.mark.parametrize("kw, match", [
    (dict(recompute="some"), "recompute"), (dict(precision="fp32"), "precision"),
    (dict(zero_stage=(4,)), "zero_stage"), (dict(tensor_parallel=()), "tensor_parallel"),
    (dict(sequence_parallel=(1,)), "sequence_parallel"), (dict(hbm_bytes=-1.0), "hbm_bytes"),
    (dict(devices=0), "devices"), (dict(virtual_stages=(0,)), "virtual_stages"),
])
def test_bad_arguments_raise(kw, match):
    args = dict(devices=4, global_batch=8, microbatch=1)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        step.best_plans(TINY4, ROWS[:1], **args)


def test_fp16_adds_the_loss_scaler():
    kw = dict(devices=4, global_batch=8, microbatch=1)
    bf = step.best_plans(TINY4, ROWS[:2], **kw)
    fp = step.best_plans(TINY4, ROWS[:2], precision="fp16", **kw)
    assert np.all(fp["time_s"] >= bf["time_s"])


@settings(max_examples=10)
@given(model=st.sampled_from([TINY4, TINY6]), devices=st.integers(1, 16),
       batch_mult=st.integers(1, 8), microbatch=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]),
       log_cap=st.floats(6.0, 11.0), seed=st.integers(0, 2 ** 16))
def test_lower_bound_never_exceeds_the_best_plan(model, devices, batch_mult, microbatch, recompute,
                                                  log_cap, seed):
    rng = np.random.default_rng(seed)
    archs = np.concatenate([ROWS, SPACE[rng.integers(0, SPACE.shape[0], 24)]])
    kw = dict(devices=devices, global_batch=microbatch * batch_mult * 2, microbatch=microbatch,
              recompute=recompute)
    out = step.best_plans(model, archs, hbm_bytes=10.0 ** log_cap, **kw)
    lb = step.step_lower_bounds(model, archs, **kw)
    assert lb.shape == (archs.shape[0],)
    assert np.all(lb <= out["time_s"])
    assert np.all(np.isfinite(lb[out["feasible"]])) and np.all(lb > 0)


def test_gpt3_on_the_a100_matches_training_step():
    """A realistic instance: gpt3-175b on 1024 A100s (node of 8: every transfer tier)."""
    row = presets.get("a100-80g")
    out = step.best_plans("gpt3-175b", row, devices=1024, global_batch=1536, microbatch=1,
                          recompute="full")
    assert out["feasible"][0]
    m = step.training_step  # noqa: F841  (the check below prices the plan again)
    _check_row_is_its_plan(__import__("phaze").models.get("gpt3-175b"), row[0], out[0], "full", 1,
                           1536)
    lb = step.step_lower_bounds("gpt3-175b", row, devices=1024, global_batch=1536, microbatch=1,
                                recompute="full")
    assert lb[0] <= out["time_s"][0]


def test_a_row_gets_the_same_answer_alone_and_among_others():
    kw = dict(devices=8, global_batch=16, microbatch=1, recompute="full", hbm_bytes=2e8)
    together = step.best_plans(TINY6, ROWS, **kw)
    for i in range(ROWS.shape[0]):
        alone = step.best_plans(TINY6, ROWS[i:i + 1], **kw)
        assert alone[0].tobytes() == together[i].tobytes()


def test_launchable_drops_only_zero_2_3_under_pipelines():
    """launchable=False also prices ZeRO 2 with p > 1 (never slower: a superset of plans;
    ZeRO 3 there is torchtitan's FSDP2, launchable); the default never returns such a
    plan, and both equal their brute force."""
    row = presets.get("a100-80g")
    cap = 3_500_000   # bytes: ZeRO 2 under a pipeline fits and beats every launchable plan
    kw = dict(devices=8, global_batch=16, microbatch=1, recompute="full", hbm_bytes=cap,
              tensor_parallel=WIDTHS)
    on = step.best_plans(TINY6, row, **kw)
    off = step.best_plans(TINY6, row, launchable=False, **kw)
    assert off["time_s"][0] <= on["time_s"][0]
    assert on["pipeline_parallel"][0] == 1 or on["zero_stage"][0] != 2
    for rec, launchable in ((on[0], True), (off[0], False)):
        ref = _brute(TINY6, row, cap, _plans(TINY6, 8, 16, 1), "full", launchable)
        assert rec["time_s"] == ref


def test_fp8_plans_on_h100_equal_their_training_step_and_a100_refuses():
    """precision="fp8": the graphs' FP8 GEMMs at the chip's fp8 rate (h100-sxm: 2), never
    slower than bf16; the returned plan priced by training_step gives the same time and
    memory; a chip without fp8 tensor cores (a100-80g: rate 0) is refused in one sentence."""
    from phaze.arch import dtype_rates

    row = presets.get("h100-sxm")
    kw = dict(devices=8, global_batch=16, microbatch=2, recompute="selective",
              tensor_parallel=WIDTHS)
    rate = dtype_rates.for_rows(row)
    fp8 = step.best_plans(TINY6, row, precision="fp8", fp8_rate=rate, **kw)
    bf16 = step.best_plans(TINY6, row, **kw)
    assert fp8["time_s"][0] <= bf16["time_s"][0]
    rec = fp8[0]
    r = step.training_step(TINY6, "h100-sxm", tensor_parallel=int(rec["tensor_parallel"]),
                           pipeline_parallel=int(rec["pipeline_parallel"]),
                           data_parallel=int(rec["data_parallel"]), microbatch=2, global_batch=16,
                           recompute="selective", virtual_stages=int(rec["virtual_stages"]),
                           sequence_parallel=bool(rec["sequence_parallel"]),
                           flash_attention=bool(rec["flash_attention"]),
                           zero_stage=int(rec["zero_stage"]),
                           overlap_grad_reduce=bool(rec["overlap_grad_reduce"]), precision="fp8")
    assert rec["time_s"] == pytest.approx(r.time_s, rel=1e-12)
    assert rec["memory_bytes"] == r.peak_memory.total
    # FP8 weight copies: 2 B per GEMM weight on top of the 16-bit weights
    assert r.peak_memory.weights > step.training_step(
        TINY6, "h100-sxm", tensor_parallel=int(rec["tensor_parallel"]),
        pipeline_parallel=int(rec["pipeline_parallel"]), data_parallel=int(rec["data_parallel"]),
        microbatch=2, global_batch=16, recompute="selective",
        virtual_stages=int(rec["virtual_stages"]), zero_stage=int(rec["zero_stage"])
    ).peak_memory.weights
    with pytest.raises(ValueError, match="fp8 tensor cores, which a100-80g does not have"):
        step.training_step(TINY6, "a100-80g", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=1, microbatch=2, global_batch=16, precision="fp8")
    with pytest.raises(ValueError, match="precision must be one of"):
        step.best_plans(TINY6, row, precision="int8", **kw)
