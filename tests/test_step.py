"""phaze.step: the training step of a fixed Megatron-LM plan against slow references
(tests/naive.py) and its properties."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import step
from phaze.arch import efficiency, make_archs, presets
from phaze.graph import build_layers
from phaze.models import ModelSpec

from naive import (naive_1f1b_makespan, naive_adam_seconds, naive_korthikanti_activation_bytes,
                   naive_op_latencies_calibrated, naive_p2p_seconds, naive_ring_allreduce,
                   naive_slice_param_bytes)

A100 = efficiency.get("a100-80g")


def _small(layers=4, hidden=512, heads=8):
    return ModelSpec(name=f"gpt-{layers}x{hidden}", n_layers=layers, hidden=hidden, heads=heads,
                     kv_heads=heads, ffn_hidden=4 * hidden, vocab=1000, seq_len=256)


def _step(model=None, arch="a100-80g", **kw):
    plan = dict(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, microbatch=2,
                global_batch=16, recompute="full")
    plan.update(kw)
    return step.training_step(model or _small(), arch, **plan)


# -- pipeline schedule ---------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 5), m=st.integers(1, 8), f=st.floats(0.1, 2.0), b=st.floats(0.1, 4.0))
def test_1f1b_formula_is_the_simulated_schedule_for_equal_stages(p, m, f, b):
    sim = naive_1f1b_makespan([f] * p, [b] * p, m)
    assert sim == pytest.approx((m + p - 1) * (f + b), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_1f1b_formula_bounds_the_simulated_schedule(data):
    p = data.draw(st.integers(1, 5))
    m = data.draw(st.integers(1, 8))
    fwd = data.draw(st.lists(st.floats(0.1, 2.0), min_size=p, max_size=p))
    bwd = data.draw(st.lists(st.floats(0.1, 4.0), min_size=p, max_size=p))
    sim = naive_1f1b_makespan(fwd, bwd, m)
    slot = max(f + b for f, b in zip(fwd, bwd))
    assert sim <= (m + p - 1) * slot * (1 + 1e-12)
    assert sim >= m * slot * (1 - 1e-12)


def test_pipeline_terms_add_up():
    r = _step()
    bd = r.breakdown
    assert r.ok and r.reason == ""
    assert bd.microbatches == 16 // (2 * 2)
    assert bd.steady_s == pytest.approx(bd.microbatches * bd.slot_s)
    assert bd.bubble_s == pytest.approx((2 - 1) * bd.slot_s)
    assert bd.slot_s == pytest.approx(bd.forward_s + bd.backward_s + bd.recompute_s + bd.p2p_s)
    assert bd.total_s == pytest.approx(bd.pipeline_s + bd.dp_allreduce_s + bd.embedding_allreduce_s
                                       + bd.optimizer_s)
    assert r.time_s == bd.total_s


@pytest.mark.parametrize("d", [1, 4])
def test_bubble_vanishes_at_one_stage(d):
    r = _step(pipeline_parallel=1, data_parallel=d)
    assert r.breakdown.bubble_s == 0.0 and r.breakdown.p2p_s == 0.0
    assert r.breakdown.embedding_allreduce_s == 0.0
    assert r.breakdown.pipeline_s == r.breakdown.steady_s


# -- layer times: the sum of calibrated kernels ---------------------------------------

@pytest.mark.parametrize("recompute", ["none", "full"])
def test_stage_times_are_sums_of_calibrated_kernels(recompute):
    model = _small()
    row = presets.get("a100-80g")
    mg = build_layers(model, 2, 2, kernels="megatron")
    eff = A100.row()
    t = {}
    for layer in mg.layers:
        t[layer.kind] = tuple(naive_op_latencies_calibrated(g, row, eff)[1][:, 0].sum()
                              for g in (layer.forward, layer.backward))
    r = _step(model, recompute=recompute, pipeline_parallel=1, data_parallel=1, global_batch=4)
    bd = r.breakdown
    L = model.n_layers
    assert bd.forward_s == pytest.approx(L * t["block"][0] + t["embedding"][0] + t["head"][0], rel=1e-9)
    assert bd.backward_s == pytest.approx(L * t["block"][1] + t["embedding"][1] + t["head"][1], rel=1e-9)
    assert bd.recompute_s == pytest.approx(L * t["block"][0] if recompute == "full" else 0.0, rel=1e-9)
    assert bd.steady_s == pytest.approx(2 * bd.slot_s)


def test_p2p_is_scatter_send_plus_in_node_gather():
    # t·d = 8 = node_size: every stage boundary crosses nodes; the first stage makes one
    # transfer per microbatch (send activation / receive gradient).
    model = _small()
    row = presets.get("a100-80g")
    r = _step(model, tensor_parallel=4, pipeline_parallel=2, data_parallel=2, global_batch=16)
    nbytes = 2 * 2 * model.seq_len * model.hidden
    send = naive_p2p_seconds(nbytes / 4, row[0], A100.row()[0], inter_node=True)
    gather = A100.coll_latency_s + 3 * A100.link_step_s + 3 / 4 * nbytes / (
        A100.link_efficiency * 300e9)
    assert r.breakdown.p2p_s == pytest.approx(send + gather, rel=1e-9)


def test_stage_boundary_inside_a_node_uses_the_link():
    # t = 2, d = 1, p = 2: ranks 0-1 and 2-3 share a node: the link tier, cheaper than IB.
    inside = _step(tensor_parallel=2, pipeline_parallel=2, data_parallel=1, global_batch=8)
    across = _step(tensor_parallel=2, pipeline_parallel=2, data_parallel=4, global_batch=32)
    assert 0 < inside.breakdown.p2p_s < across.breakdown.p2p_s


def test_ring_allreduce_matches_the_step_by_step_ring():
    row = presets.get("a100-80g")
    eff = A100.row()[0]
    for n in (2, 8, 16, 40):
        got = step.ring_allreduce_seconds(1e8, list(range(n)), row, A100)
        # at NCCL's protocol choice (issue 25): across nodes LL128 (α 10 µs + 1.9 µs per
        # in-node step + 4 µs per crossing, 0.92 of the bus bandwidth) beats the A100's
        # Simple ring (the fitted 4.457 µs per in-node step) at 100 MB
        ref = naive_ring_allreduce(n, 1e8, 8, 300e9, 25e9, eff, per_node=min(n, 8), tree=True,
                                   protocols=True)
        assert got == pytest.approx(ref, rel=1e-12)
    assert step.ring_allreduce_seconds(1e8, [3], row, A100) == 0.0


def test_data_parallel_allreduce_is_the_ring_over_strided_ranks():
    model = _small()
    r = _step(model, tensor_parallel=2, pipeline_parallel=1, data_parallel=8, global_batch=16)
    params = sum(layer.count * layer.param_bytes for layer in build_layers(model, 2, 2).layers) // 2
    # d = 8 ranks with stride t = 2 over 16 GPUs: the ring spans two nodes, 2 of its 14 steps
    # cross between them, and its bytes go at the between-node tier's rate over the 4 NICs
    # of the group's 4 ranks in each node (one NIC per GPU, rail-optimised; issue 25).
    nodes = 2
    alpha = A100.coll_latency_s + (14 - 2 * (nodes - 1)) * A100.link_step_s + 2 * A100.net_step_s
    bus = min(4 * 0.96 * 25e9, A100.link_efficiency * 300e9)
    beta = 2 * 7 / 8 * 4 * params / bus
    # NCCL's protocol choice (issue 25; NCCL v2.12.7's constants): LL 3.6 µs + 12 in-node
    # steps of 0.846 µs + 2 crossings of 2.7 µs at min(22.5 GB/s, bus/4); LL128 10 µs +
    # 12·1.9 µs + 2·4 µs at 0.92·bus
    ll = 3.6e-6 + 12 * 0.846e-6 + 2 * 2.7e-6 + 2 * 7 / 8 * 4 * params / min(22.5e9, bus / 4)
    ll128 = 10e-6 + 12 * 1.9e-6 + 2 * 4e-6 + 2 * 7 / 8 * 4 * params / (0.92 * bus)
    assert r.breakdown.dp_allreduce_s == pytest.approx(min(alpha + beta, ll, ll128), rel=1e-12)


def test_optimizer_is_memory_bound_adam():
    model = _small()
    for precision, per in (("fp16", 50), ("bf16", 42)):
        r = _step(model, precision=precision, pipeline_parallel=1, data_parallel=1, global_batch=4)
        n = sum(layer.count * layer.param_bytes for layer in build_layers(model, 2, 2).layers) // 2
        ref = naive_adam_seconds(n, per, 2039e9, 0.88)
        extra = r.breakdown.optimizer_s - ref
        assert 0 < extra < 1e-4      # launch gaps and the tiny norm / inf-flag all-reduces


# -- memory ----------------------------------------------------------------------------

@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("p,m_b", [(1, 4), (2, 8), (4, 16), (4, 2)])
def test_activation_memory_is_korthikanti_in_flight(recompute, p, m_b):
    model = _small(layers=8)
    r = _step(model, recompute=recompute, tensor_parallel=2, pipeline_parallel=p, data_parallel=1,
              microbatch=2, global_batch=2 * m_b)
    for mem in r.memory:
        in_flight = min(p - mem.stage, m_b)
        ref = in_flight * naive_korthikanti_activation_bytes(
            model.seq_len, 2, model.hidden, model.heads, 2, model.n_layers // p, recompute)
        assert mem.in_flight == in_flight
        assert mem.activations == pytest.approx(ref, rel=1e-12)
    assert r.memory[0].activations >= r.memory[-1].activations


def test_parameter_state_is_18_bytes_per_parameter():
    model = _small(layers=8)
    r = _step(model, tensor_parallel=2, pipeline_parallel=4)
    per = naive_slice_param_bytes(model, 2)
    for mem in r.memory:
        n = (2 * per["block"] + (per["embedding"] if mem.stage == 0 else 0)
             + (per["head"] if mem.stage == 3 else 0)) // 2
        assert (mem.weights, mem.gradients, mem.optimizer_state) == (2 * n, 4 * n, 12 * n)
        assert mem.layer_param_state == 18 * 2 * per["block"] // 2
        assert mem.total == (mem.weights + mem.gradients + mem.optimizer_state + mem.activations
                             + mem.activations_other + mem.workspace)


def test_recomputation_trades_time_for_memory():
    none, full = _step(recompute="none"), _step(recompute="full")
    assert full.time_s > none.time_s
    assert full.memory[0].activations < none.memory[0].activations
    assert none.memory[0].workspace == 0 < full.memory[0].workspace


# -- properties: more bandwidth never slower ----------------------------------------------

@settings(max_examples=15, deadline=None)
@given(knob=st.sampled_from(["hbm_gb_per_s", "link_gb_per_s", "net_gb_per_s"]),
       factor=st.floats(1.0, 4.0), p=st.sampled_from([1, 2]), d=st.sampled_from([1, 4]))
def test_more_bandwidth_never_slower(knob, factor, p, d):
    base = presets.get("a100-80g")
    faster = make_archs(base="a100-80g", **{knob: float(base[knob][0]) * factor})
    kw = dict(pipeline_parallel=p, data_parallel=d, global_batch=8 * d, efficiency="a100-80g")
    slow = _step(arch=base, **kw)
    fast = _step(arch=faster, **kw)
    assert fast.time_s <= slow.time_s * (1 + 1e-12)


# -- what Megatron refuses ---------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(virtual_stages=2, global_batch=32, pipeline_parallel=2,
                                     model=ModelSpec(name="gpt-8", n_layers=8, hidden=512, heads=8,
                                                     kv_heads=8, ffn_hidden=2048, vocab=1000,
                                                     seq_len=256)),
                                dict(sequence_parallel=True), dict(recompute="selective")])
def test_strategy_knobs_are_modelled(kw):
    r = _step(**kw)
    assert r.ok and r.reason == "" and math.isfinite(r.time_s)


def test_infeasible_plans_say_why():
    r = _step(pipeline_parallel=3)
    assert r.status == "infeasible" and "divisible" in r.reason
    r = _step(global_batch=10)
    assert r.status == "infeasible" and "global batch" in r.reason
    with pytest.raises(ValueError):
        _step(recompute="some")
    with pytest.raises(ValueError):
        _step(precision="fp8")


def test_array_row_takes_its_preset_efficiency():
    by_name = _step()
    by_row = _step(arch=presets.get("a100-80g"))
    assert by_row.time_s == by_name.time_s
    hypothetical = make_archs(base="a100-80g", num_tc=216)
    assert np.isfinite(_step(arch=hypothetical).time_s)
