"""A step's energy by part and the clock a power cap leaves (issue 28): magnitudes by hand."""
import math

import numpy as np
import pytest

from phaze import arch, graph, models, step
from phaze.arch import presets
from phaze.step import _energy

PARTS_DTYPE = arch.ENERGY_DTYPE


def unit_energy(n, **ones):
    """Energy records with 1 J per unit of the named fields, 0 elsewhere."""
    e = np.zeros(n, dtype=PARTS_DTYPE)
    for k, v in ones.items():
        e[k] = v
    return e


_SHORT = {"pipeline_parallel": "p", "data_parallel": "d", "microbatches": "m",
          "zero_stage": "zero", "forward_s": "fwd_s", "recompute_s": "rec_s",
          "optimizer_s": "opt_s"}


def plans(**cols):
    """A one-plan ``step.plan_view``: the PLAN_DTYPE fields given by their names."""
    base = dict(pipeline_parallel=[1], data_parallel=[1], microbatches=[1], zero_stage=[0],
                forward_s=[1.0], recompute_s=[0.0], optimizer_s=[0.0])
    base.update({k: list(np.atleast_1d(v)) for k, v in cols.items()})
    view = {_SHORT[k]: np.asarray(v) for k, v in base.items()}
    view.update(cp=np.ones(1), ep=np.ones(1))
    return view


def test_the_forward_of_a_gpt_block_does_its_hand_counted_macs():
    m = models.resolve("gpt3-175b")
    mg = graph.build_layers(m, 1, 8, kernels="megatron")
    blk = mg.layers[1]
    h, s, t = m.hidden, m.seq_len, 8
    # Q, K, V and the projection (4h²), the MLP (8h²), QKᵀ and AV per head
    want = s * 12 * h * h / t + 2 * (m.heads // t) * s * s * m.head_dim
    rows = presets.get("tpuv4")
    f = _energy.graph_energy(blk.forward, rows, unit_energy(1, mac16_j=1.0), t)
    b = _energy.graph_energy(blk.backward, rows, unit_energy(1, mac16_j=1.0), t)
    assert f["compute"][0] == want
    assert b["compute"][0] == 2 * want          # dX and dW of every product
    # the forward's two tensor-parallel all-reduces of the b·s·h·2-byte activations
    link = _energy.graph_energy(blk.forward, rows, unit_energy(1, link_j_per_byte=1.0), t)
    assert link["link"][0] == pytest.approx(2 * 2 * (t - 1) / t * s * h * 2)


def test_the_step_counts_every_microbatch_of_its_share_of_the_layers():
    m = models.resolve("gpt3-175b")
    mg = graph.build_layers(m, 1, 8, kernels="megatron")
    rows = presets.get("tpuv4")
    e = unit_energy(1, mac16_j=1.0)
    one, macs1 = _energy.energy_parts(mg, rows, e, plans=plans(), global_batch=1,
                                      grad_bytes=4, hbm_bw=np.array([1e12]))
    four, macs4 = _energy.energy_parts(mg, rows, e, plans=plans(pipeline_parallel=[2],
                                                                microbatches=[8]),
                                       global_batch=1, grad_bytes=4, hbm_bw=np.array([1e12]))
    assert four["compute"][0] == pytest.approx(one["compute"][0] * 8 / 2, rel=1e-12)
    assert macs4[0] == pytest.approx(macs1[0] * 4, rel=1e-12)
    # full recomputation re-runs each layer's forward once more
    rec, _ = _energy.energy_parts(mg, rows, e, plans=plans(forward_s=[2.0], recompute_s=[2.0]),
                                  global_batch=1, grad_bytes=4, hbm_bw=np.array([1e12]))
    blocks = sum(L.count * _energy.graph_energy(L.forward, rows, e, 8)["compute"][0]
                 for L in mg.layers if L.kind == "block")
    assert rec["compute"][0] == pytest.approx(one["compute"][0] + blocks, rel=1e-12)


def _dp_bytes(zero, d=4, m=4, node=8, t=1, cp=1):
    spec = models.resolve("llama3-8b")
    mg = graph.build_layers(spec, 1, t, kernels="megatron")
    rows = presets.get("h100-sxm").copy()
    rows["node_size"] = node
    e = unit_energy(1, link_j_per_byte=1.0, net_j_per_byte=1.0)
    view = plans(data_parallel=[d], zero_stage=[zero], microbatches=[m])
    view["cp"] = np.full(1, cp)
    got, _ = _energy.energy_parts(mg, rows, e, plans=view,
                                  global_batch=1, grad_bytes=4, hbm_bw=np.array([1e12]))
    params = sum(L.count * L.param_bytes for L in mg.layers) / 2
    layers = {k: 0.0 for k in ("link", "network")}
    for L in mg.layers:
        for g in (L.forward, L.backward):
            part = _energy.graph_energy(g, rows, e, t)
            for k in layers:
                layers[k] += m * L.count * part[k][0]
    return got["link"][0] - layers["link"], got["network"][0] - layers["network"], params


def test_data_parallel_gradients_are_a_ring_all_reduce_of_fp32_gradients():
    link, net, params = _dp_bytes(0)
    assert net == 0.0
    assert link == pytest.approx(2 * 3 / 4 * 4 * params, rel=1e-12)


def test_zero_1_reduce_scatters_gradients_and_gathers_16_bit_weights():
    link, _, params = _dp_bytes(1)
    assert link == pytest.approx(3 / 4 * (4 + 2) * params, rel=1e-12)


def test_zero_3_gathers_the_weights_twice_per_microbatch_not_d_times_more():
    z0, _, params = _dp_bytes(0, m=4)
    z3, _, _ = _dp_bytes(3, m=4)
    # per microbatch: two all-gathers of 2-byte weights and a reduce-scatter of 4-byte grads
    assert z3 == pytest.approx(4 * 3 / 4 * (2 * 2 + 4) * params, rel=1e-12)
    assert z3 / z0 == pytest.approx(4.0, rel=1e-12)


def test_a_group_across_nodes_sends_a_node_boundary_share_over_the_network():
    link, net, params = _dp_bytes(0, d=16, node=8)
    total = 2 * 15 / 16 * 4 * params
    assert net == pytest.approx(total * 2 / 16, rel=1e-12)   # 2 nodes: 2 of 16 ring hops
    assert link + net == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_the_data_parallel_ring_over_two_nodes_by_hand(t):
    # d = 16 ranks t apart on nodes of 8 (Megatron's layout: global rank j·t + i): t = 1
    # puts ranks 0..7 and 8..15 on two nodes, 2 of the ring's 16 hops leave a node; t = 8
    # gives each rank a node of its own, every hop crosses
    link, net, params = _dp_bytes(0, d=16, node=8, t=t)
    total = 2 * 15 / 16 * 4 * params              # a ring all-reduce of fp32 gradients
    crossing = {1: 2, 8: 16}[t]
    assert net == pytest.approx(total * crossing / 16, rel=1e-12)
    assert link == pytest.approx(total * (16 - crossing) / 16, abs=1e-9 * total)


def test_the_data_parallel_ring_with_context_parallelism_spans_cp_d_ranks_t_apart():
    # t = 2, cp = 2, d = 4: the gradients reduce over the cp·d = 8 ranks 0, 2, …, 14 —
    # two nodes of 8, 2 of the ring's 8 hops cross (the old rule took them 2·cp apart,
    # four nodes, and sent 4 of 8 hops over the network)
    link, net, params = _dp_bytes(0, d=4, node=8, t=2, cp=2)
    total = 2 * 7 / 8 * 4 * params
    assert net == pytest.approx(total * 2 / 8, rel=1e-12)
    assert link == pytest.approx(total * 6 / 8, rel=1e-12)


def test_an_all_to_all_across_nodes_sends_its_remote_peers_share_over_the_network():
    # 8 experts over ep = 8 ranks on nodes of 4: each rank sends 1/8 of its bytes to each
    # of 7 peers, 4 of them on the other node: 4/7 of what it sends crosses nodes
    spec = models.resolve("mixtral-8x7b")
    mg = step.variant_graph(spec, 1, 1, False, True, 1, 8, "bf16")
    rows = presets.get("h100-sxm").copy()
    rows["node_size"] = 4
    layer = next(L for L in mg.layers if L.kind not in ("embedding", "head"))
    g = layer.forward
    a2a = (g.kind == graph.KIND_COLLECTIVE) & (g.collective == graph.COLL_ALL_TO_ALL)
    assert a2a.any() and np.all(g.group_size[a2a] == 8)
    sent = float((7 / 8 * g.comm_bytes[a2a]).sum())
    e = unit_energy(1, net_j_per_byte=1.0)
    rest = (g.kind == graph.KIND_COLLECTIVE) & ~a2a
    assert not rest.any() or np.all(g.group_size[rest] <= 1)
    got = _energy.graph_energy(g, rows, e, 1)["network"][0]
    assert got == pytest.approx(sent * 4 / 7, rel=1e-12)


@pytest.mark.parametrize("t,share", [(4, 1 / 3), (8, 1.0), (2, 0.0)])
def test_the_pipelines_sends_cross_nodes_where_its_stages_do(t, share):
    # p = 4 stages of t ranks (d = 1) on nodes of 8: t = 4 puts stages 0, 1 on one node and
    # 2, 3 on the next, so 1 of the 3 boundaries crosses; t = 8 gives each stage a node;
    # t = 2 keeps all four in one (the old rule: none cross unless t·cp·d >= node)
    spec = models.resolve("llama3-8b")
    mg = graph.build_layers(spec, 1, t, kernels="megatron")
    rows = presets.get("h100-sxm").copy()
    assert rows["node_size"][0] == 8
    e = unit_energy(1, net_j_per_byte=1.0)
    m = 4
    got, _ = _energy.energy_parts(mg, rows, e, plans=plans(pipeline_parallel=[4],
                                                           microbatches=[m]),
                                  global_batch=1, grad_bytes=4, hbm_bw=np.array([1e12]))
    boundary = max(float(L.boundary_bytes) for L in mg.layers
                   if L.kind not in ("embedding", "head"))
    assert got["network"][0] == pytest.approx(2 * m * boundary * 3 / 4 * share, rel=1e-12,
                                              abs=1e-12)


def test_net_share_is_the_rank_layouts_rule():
    from phaze import collectives
    assert collectives.span_nodes(0, 1, 16, 8) == 2
    assert collectives.span_nodes(0, 3, 4, 8) == 2       # ranks 0, 3, 6 | 9
    assert collectives.span_nodes(0, 16, 4, 8) == 4
    got = collectives.net_share([16, 16, 8, 4, 8, 1], [1, 8, 1, 3, 1, 1], 8)
    assert got.tolist() == [2 / 16, 1.0, 0.0, 2 / 4, 0.0, 0.0]
    assert collectives.net_share(8, 1, 4, all_to_all=True) == pytest.approx(4 / 7)
    with pytest.raises(ValueError, match="node_size must hold integers >= 1"):
        collectives.net_share(8, 1, 0)
    assert collectives.boundary_net_share([4, 4, 3, 1], [4, 2, 3, 2], 8).tolist() == [
        1 / 3, 0.0, 1 / 6, 0.0]      # 3 ranks a stage: of 0→3 … 5→8 only 5→8 crosses


def test_a_power_cap_lowers_the_clock_until_the_power_fits():
    parts = {k: np.zeros(1) for k in step.ENERGY_PARTS}
    parts["compute"] = np.array([100.0])       # 100 J per 1 s step: 100 W
    s, t, out, power, ok = step.power_capped(parts, np.array([1.0]), np.array([0.0]),
                                             np.array([1.0]), 50.0)
    # the highest clock the cap allows, to the bisection's 2⁻²⁶: never above the cap
    assert ok[0] and power[0] <= 50.0 and power[0] == pytest.approx(50.0, rel=1e-6)
    assert t[0] == pytest.approx(1.0 / s[0], rel=1e-12)   # all of the step paced by the clock
    assert out["compute"][0] == pytest.approx(100.0 * arch.dvfs_energy_scale(s[0]), rel=1e-12)
    assert out["compute"][0] / t[0] == pytest.approx(50.0, rel=1e-6)
    # no cap binds: unchanged
    s2, t2, out2, p2, ok2 = step.power_capped(parts, np.array([1.0]), np.array([0.0]),
                                              np.array([1.0]), 150.0)
    assert s2[0] == 1.0 and t2[0] == 1.0 and p2[0] == 100.0 and ok2[0]


def test_a_cap_below_the_lowest_clocks_power_is_infeasible():
    parts = {k: np.zeros(1) for k in step.ENERGY_PARTS}
    parts["hbm"] = np.array([100.0])             # not paced by the clock: no relief
    s, t, out, power, ok = step.power_capped(parts, np.array([1.0]), np.array([5.0]),
                                             np.array([0.0]), 50.0)
    assert not ok[0]


def test_static_power_runs_the_whole_step():
    parts = {k: np.zeros(2) for k in step.ENERGY_PARTS}
    s, t, out, power, ok = step.power_capped(parts, np.array([2.0, 3.0]), np.array([7.0, 7.0]),
                                             np.zeros(2), math.inf)
    assert list(out["static"]) == [14.0, 21.0] and list(power) == [7.0, 7.0]
