"""Expert parallelism (EP) and context parallelism (CP) in the training-step model and its
plan search: best_plans against the brute force over training_step on tiny dense and
mixture-of-experts models, Megatron-Core's rank groups against an explicit generator
(tests/naive.py), and identities of memory, gradient sync, all-to-all and K/V ring."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze.step import _kernels as kern
from phaze import graph, step
from phaze.arch import efficiency, make_archs, presets
from phaze.models import ModelSpec
from phaze.step import _model as _step_model

from naive import naive_megatron_groups
from test_step_search import _brute, _check_row_is_its_plan

A100 = efficiency.get("a100-80g")
MOE = ModelSpec(name="moe-4x2", n_layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=256,
                vocab=500, seq_len=64, n_experts=4, experts_per_token=2, expert_ffn_hidden=96,
                first_dense_layers=1, activation="swiglu", norm="rmsnorm", position="rotary",
                bias=False)
ALL_MOE = MOE.with_(name="moe-all", first_dense_layers=0, n_shared_experts=1)
DENSE = ModelSpec(name="gpt-4x64", n_layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                  vocab=500, seq_len=64)
#: a100, and a100-like rows whose small nodes put EP, CP and data-parallel groups across nodes.
ROWS = np.concatenate([presets.get("a100-80g"), make_archs(base="a100-80g", node_size=2),
                       make_archs(base="a100-80g", node_size=4, net_gb_per_s=12.5),
                       make_archs(base="a100-80g", node_size=1, net_gb_per_s=5.0)])
WIDTHS = (1, 2)
EPS = (1, 2, 4)
CPS = (1, 2)
GRIDS = dict(tensor_parallel=WIDTHS, virtual_stages=(1, 2), zero_stage=(0, 1, 2),
             context_parallel=CPS)


def _plans(model, devices, global_batch, microbatch):
    eps = EPS if model.is_moe else (1,)
    L = model.n_layers
    for t in WIDTHS:
        for cp in CPS:
            for p in range(1, L + 1):
                for d in range(1, devices + 1):
                    if t * cp * p * d > devices:
                        continue
                    for ep in eps:
                        for v in (1, 2):
                            for sp in (False, True):
                                for flash in (False, True):
                                    for zero in (0, 1, 2):
                                        for ogr in (False, True):
                                            yield dict(
                                                tensor_parallel=t, pipeline_parallel=p,
                                                data_parallel=d, expert_parallel=ep,
                                                context_parallel=cp, virtual_stages=v,
                                                sequence_parallel=sp, flash_attention=flash,
                                                zero_stage=zero, overlap_grad_reduce=ogr,
                                                microbatch=microbatch, global_batch=global_batch)


@settings(max_examples=6, deadline=None)
@given(model=st.sampled_from([MOE, ALL_MOE, DENSE]), devices=st.integers(1, 8),
       batch_mult=st.integers(1, 3), recompute=st.sampled_from(["none", "selective", "full"]),
       log_cap=st.floats(5.5, 8.0), row=st.integers(0, len(ROWS) - 1))
def test_best_plans_is_the_brute_force_minimum_with_ep_and_cp(model, devices, batch_mult,
                                                               recompute, log_cap, row):
    global_batch = 2 * batch_mult
    cap = 10.0 ** log_cap
    archs = ROWS[[row]]
    out = step.best_plans(model, archs, devices=devices, global_batch=global_batch, microbatch=1,
                          recompute=recompute, hbm_bytes=cap,
                          expert_parallel=EPS if model.is_moe else None, **GRIDS)
    ref = _brute(model, archs[0], cap, _plans(model, devices, global_batch, 1), recompute)
    if math.isinf(ref):
        assert not out["feasible"][0] and out["reason"][0] in (1, 2)
        return
    assert out["feasible"][0]
    assert out["time_s"][0] == pytest.approx(ref, rel=1e-12)
    _check_row_is_its_plan(model, archs[0], out[0], recompute, 1, global_batch)


@pytest.mark.parametrize("model, row, recompute, cap, parallel", [
    # the optimum has ep = 2 and cp = 2 (at 10^6.3 before NCCL's protocol choice, issue 25:
    # its faster small collectives make a t2 d4 plan optimal there)
    (ALL_MOE, 1, "none", 10 ** 6.2, True),
    (ALL_MOE, 2, "full", 10 ** 6.3, True),    # ep = 4
    (DENSE, 1, "none", 10 ** 6.0, True),      # cp = 2
    (MOE, 1, "full", 1e12, False)])           # a dense first layer, then MoE layers
def test_brute_force_across_nodes(model, row, recompute, cap, parallel):
    archs = ROWS[[row]]
    out = step.best_plans(model, archs, devices=8, global_batch=8, microbatch=1,
                          recompute=recompute, hbm_bytes=cap,
                          expert_parallel=EPS if model.is_moe else None, **GRIDS)
    ref = _brute(model, archs[0], cap, _plans(model, 8, 8, 1), recompute)
    assert out["time_s"][0] == pytest.approx(ref, rel=1e-12)
    if parallel:
        assert out["expert_parallel"][0] * out["context_parallel"][0] > 1
    _check_row_is_its_plan(model, archs[0], out[0], recompute, 1, 8)


@settings(max_examples=40, deadline=None)
@given(t=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2, 4]), d=st.integers(1, 6),
       p=st.integers(1, 3), ep_i=st.integers(0, 5), node_size=st.sampled_from([1, 2, 3, 4, 8]))
def test_group_geometry_is_megatron_cores_rank_groups(t, cp, d, p, ep_i, node_size):
    divisors = [e for e in range(1, cp * d + 1) if (cp * d) % e == 0]
    ep = divisors[ep_i % len(divisors)]
    cpn, epn, edpn, dpn, masks = (np.zeros(p, dtype=np.int64) for _ in range(5))
    kern.group_geometry(p, t, d, cp, ep, node_size, cpn, epn, edpn)
    kern.geometry(p, t, cp * d, node_size, masks, dpn)

    def nodes(group):
        return len({r // node_size for r in group})

    for r, groups in enumerate(naive_megatron_groups(t, cp, ep, d, p)):
        assert cpn[r] == max(nodes(g) for g in groups["cp"])
        assert epn[r] == max(nodes(g) for g in groups["ep"])
        assert edpn[r] == max(nodes(g) for g in groups["edp"])
        assert dpn[r] == nodes(groups["dp_cp"][0])   # tensor index 0, as before


@pytest.mark.parametrize("model", [MOE, ALL_MOE])
@pytest.mark.parametrize("ep", [1, 2, 4])
def test_weights_are_the_graphs_parameters_with_experts_sharded_over_ep(model, ep):
    r = step.training_step(model, "a100-80g", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=4, expert_parallel=ep, microbatch=1, global_batch=8)
    mg = graph.build_layers(model, 1, 1, kernels="megatron", expert_parallel=ep)
    assert r.ok and r.memory[0].weights == mg.param_bytes
    one = graph.build_layers(model, 1, 1, kernels="megatron", expert_parallel=1)
    assert mg.expert_param_bytes * ep == one.expert_param_bytes
    assert mg.param_bytes - mg.expert_param_bytes == one.param_bytes - one.expert_param_bytes
    # ZeRO 1: the dense optimizer state over the 4 data-parallel ranks, the experts' over 4/ep
    z = step.training_step(model, "a100-80g", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=4, expert_parallel=ep, microbatch=1, global_batch=8,
                           zero_stage=1)
    dense = (mg.param_bytes - mg.expert_param_bytes) // 2
    experts = mg.expert_param_bytes // 2
    assert z.memory[0].optimizer_state == int(12 * dense / 4) + int(12 * experts / (4 // ep))


def test_gradient_sync_reduces_experts_over_their_own_group():
    row = make_archs(base="a100-80g", node_size=2)
    r = step.training_step(ALL_MOE, row, tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=4, expert_parallel=2, microbatch=1, global_batch=8,
                           efficiency=A100)
    mg = graph.build_layers(ALL_MOE, 1, 1, kernels="megatron", expert_parallel=2)
    dense = (mg.param_bytes - mg.expert_param_bytes) // 2
    experts = mg.expert_param_bytes // 2
    # dense over ranks 0..3 (two nodes); experts over the expert-data-parallel ranks {0, 2}
    want = (step.ring_allreduce_seconds(4 * dense, range(4), row, A100)
            + step.ring_allreduce_seconds(4 * experts, [0, 2], row, A100))
    assert r.breakdown.dp_allreduce_s == pytest.approx(want, rel=1e-12)


def test_all_to_all_is_priced_over_the_expert_groups_ranks():
    # t = 2, ep = 2: the EP group is ranks {0, 2} — one node of 4, two nodes of 2.
    kw = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=2, expert_parallel=2,
              sequence_parallel=True, microbatch=1, global_batch=4, efficiency=A100)
    wide = make_archs(base="a100-80g", node_size=4)
    narrow = make_archs(base="a100-80g", node_size=2)
    a, b = (step.training_step(ALL_MOE, row, **kw) for row in (wide, narrow))
    g = graph.build_layers(ALL_MOE, 1, 2, sequence_parallel=True, kernels="megatron",
                           expert_parallel=2).kinds()["moe_block"].forward
    nbytes = int(g.bytes_in[g.names.index("alltoall_dispatch")])
    # one Simple ring pass (NCCL runs an all-to-all as send/receive, outside the tuner's
    # protocol choice): the all-gather's price with the LL/LL128 protocols off
    simple = dataclasses.replace(A100, ll_link_gb_per_s=0.0, ll_net2_gb_per_s=0.0,
                                 ll_net_gb_per_s=0.0, ll128_share=0.0)
    a2a = {id(row): step.ring_allgather_seconds(nbytes, [0, 2], row, simple)
           for row in (wide, narrow)}
    want = ALL_MOE.n_layers * 2 * (a2a[id(narrow)] - a2a[id(wide)])
    assert want > 0
    assert b.breakdown.forward_s - a.breakdown.forward_s == pytest.approx(want, rel=1e-9)


def test_ring_exchange_counts_only_its_excess_over_flash_attention():
    # cp = 2 at t = 1: the ring is ranks {0, 1}; a slow network makes the exchange exceed
    # the attention when the two ranks sit on two nodes.
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, context_parallel=2,
              flash_attention=True, microbatch=1, global_batch=2, efficiency=A100)
    one = make_archs(base="a100-80g", node_size=2)
    two = make_archs(base="a100-80g", node_size=1, net_gb_per_s=0.05)
    mg = graph.build_layers(DENSE, 1, 1, flash_attention=True, kernels="megatron",
                            context_parallel=2)
    blk = mg.kinds()["block"]
    excess = {}
    for name, row in (("one", one), ("two", two)):
        sec, index = _step_model._op_seconds(blk.forward, row, A100, 1)
        g = blk.forward
        nbytes = int(g.bytes_in[index["ring_kv_exchange"]])
        nodes = 1 if name == "one" else 2
        x = nodes - 1
        bw = (A100.net_efficiency * float(row["net_gb_per_s"][0]) if nodes > 1
              else A100.link_efficiency * float(row["link_gb_per_s"][0])) * 1e9
        ex = A100.coll_latency_s + (1 - x) * A100.link_step_s + x * A100.net_step_s + nbytes / bw
        excess[name] = max(0.0, ex - sec[index["flash_attn"]])
    assert excess["two"] > 0
    a, b = (step.training_step(DENSE, row, **kw) for row in (one, two))
    want = DENSE.n_layers * (excess["two"] - excess["one"])
    assert b.breakdown.forward_s - a.breakdown.forward_s == pytest.approx(want, rel=1e-9)


def test_context_parallelism_splits_the_activations():
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, flash_attention=True,
              microbatch=1, global_batch=2, recompute="full")
    one = step.training_step(DENSE, "a100-80g", **kw)
    two = step.training_step(DENSE, "a100-80g", context_parallel=2, **kw)
    assert two.memory[0].activations * 2 == one.memory[0].activations
    assert two.memory[0].weights == one.memory[0].weights


@pytest.mark.parametrize("model, kw, match", [
    (MOE, dict(expert_parallel=3), "expert parallel 3 does not divide the routed experts"),
    (MOE, dict(expert_parallel=4, data_parallel=2), "does not divide context × data"),
    (MOE, dict(tensor_parallel=2), "needs sequence parallelism"),
    (DENSE, dict(context_parallel=2), "needs flash attention"),
    (DENSE, dict(context_parallel=3, flash_attention=True), "divisible by 6"),
])
def test_plans_the_rules_forbid_are_infeasible_in_one_sentence(model, kw, match):
    args = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, microbatch=1,
                global_batch=4)
    args.update(kw)
    r = step.training_step(model, "a100-80g", **args)
    assert r.status == "infeasible" and match in r.reason and r.reason.count(". ") == 0


@pytest.mark.parametrize("model, kw, match", [
    (DENSE, dict(expert_parallel=2), "expert_parallel must be 1"),
    (DENSE, dict(capacity_factor=1.25), "capacity_factor must be None"),
    (MOE, dict(capacity_factor=0.0), "capacity_factor"),
    (MOE, dict(expert_parallel=0), "expert_parallel"),
])
def test_bad_arguments_raise(model, kw, match):
    args = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=2, microbatch=1,
                global_batch=4)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        step.training_step(model, "a100-80g", **args)


@pytest.mark.parametrize("model, kw, match", [
    (MOE, dict(expert_parallel=(3,)), "expert_parallel must divide n_experts"),
    (DENSE, dict(expert_parallel=(2,)), "expert_parallel must be 1"),
    (DENSE, dict(context_parallel=(0,)), "context_parallel"),
])
def test_best_plans_refuses_bad_grids(model, kw, match):
    with pytest.raises(ValueError, match=match):
        step.best_plans(model, ROWS[:1], devices=4, global_batch=8, microbatch=1, **kw)


def test_default_grids_and_capacity_factor():
    out = step.best_plans(MOE, ROWS[:1], devices=8, global_batch=8, microbatch=1,
                          context_parallel=(1,))
    assert out["feasible"][0] and out["expert_parallel"][0] in (1, 2, 4)
    dense = step.best_plans(DENSE, ROWS[:1], devices=8, global_batch=8, microbatch=1)
    assert dense["expert_parallel"][0] == 1 and dense["context_parallel"][0] == 1  # s = 64
    # a capacity factor above 1 pads every expert: never faster than balanced routing
    kw = dict(devices=8, global_batch=8, microbatch=1, expert_parallel=(2,), context_parallel=(1,))
    bal = step.best_plans(MOE, ROWS[:2], **kw)
    pad = step.best_plans(MOE, ROWS[:2], capacity_factor=2.0, **kw)
    assert np.all(pad["time_s"] >= bal["time_s"])


@settings(max_examples=6, deadline=None)
@given(model=st.sampled_from([MOE, ALL_MOE, DENSE]), devices=st.integers(1, 16),
       batch_mult=st.integers(1, 4), recompute=st.sampled_from(["none", "selective", "full"]))
def test_lower_bound_never_exceeds_the_best_plan(model, devices, batch_mult, recompute):
    kw = dict(devices=devices, global_batch=2 * batch_mult, microbatch=1, recompute=recompute,
              context_parallel=CPS)
    out = step.best_plans(model, ROWS, **kw)
    lb = step.step_lower_bounds(model, ROWS, **kw)
    assert np.all(lb <= out["time_s"]) and np.all(lb > 0)
