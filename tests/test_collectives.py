"""phaze.collectives: the α–β price of each collective on a two-tier fabric, hand-computed
and against step-by-step references; the collective kind an operator carries
(``OpGraph.collective``) and the step model's dispatch on it rather than on names."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naive import naive_ring_allreduce
from phaze import collectives, cost, graph, models
from phaze.arch import efficiency, make_archs, presets
from phaze.graph import COLLECTIVE_KINDS, OpGraph
from phaze.step import _layers as _plans

#: A two-tier fabric: 10 µs per collective, 1 µs per in-node ring step, 5 µs per step
#: crossing nodes; η·BW 100 GB/s in the node, 25 GB/s between nodes.
FAB = collectives.fabric(coll_latency_s=10e-6, link_step_s=1e-6, net_step_s=5e-6,
                         link_bw=100e9, net_bw=25e9)
S = 8_000_000   # bytes
#: The Simple protocol's fields of a fabric (FAB runs no other protocol: its LL/LL128 fields 0).
SIMPLE = ("coll_latency_s", "link_step_s", "net_step_s", "link_bw", "net_bw")


# Hand-computed (kind, ranks, nodes, α in s, β in s) for S bytes on FAB.
HAND = [
    # all-reduce, 4 ranks in one node: 2·3 = 6 link steps; 2·3/4 · 8 MB / 100 GB/s
    ("all_reduce", 4, 1, 10e-6 + 6e-6, 1.2e-4),
    # all-reduce, 8 ranks on 2 nodes: 14 steps, 2 crossing: 12 link + 2 net; 2·7/8 · S / 25 GB/s
    ("all_reduce", 8, 2, 10e-6 + 12e-6 + 10e-6, 5.6e-4),
    # reduce-scatter / all-gather, 8 ranks on 2 nodes: 7 steps, 1 crossing; 7/8 · S / 25 GB/s
    ("reduce_scatter", 8, 2, 10e-6 + 6e-6 + 5e-6, 2.8e-4),
    ("all_gather", 8, 2, 10e-6 + 6e-6 + 5e-6, 2.8e-4),
    ("all_gather", 2, 1, 10e-6 + 1e-6, 0.4e-4),
    # all-to-all, one ring pass: 4 ranks in a node, 3 link steps; 3/4 · S / 100 GB/s
    ("all_to_all", 4, 1, 10e-6 + 3e-6, 6e-5),
    ("all_to_all", 4, 4, 10e-6 + 15e-6, 3 / 4 * S / 25e9),
    # point-to-point ring exchange, 4 ranks on 2 nodes: 3 steps, 1 crossing; S / 25 GB/s
    ("p2p", 4, 2, 10e-6 + 2e-6 + 5e-6, 3.2e-4),
    ("p2p", 3, 1, 10e-6 + 2e-6, 8e-5),
]


@pytest.mark.parametrize("kind, n, nodes, alpha, beta", HAND)
def test_each_collective_by_hand(kind, n, nodes, alpha, beta):
    got = collectives.collective_seconds(kind, S, n, nodes, FAB)
    assert got == pytest.approx(alpha + beta, rel=1e-12)
    assert collectives.collective_seconds(COLLECTIVE_KINDS.index(kind), S, n, nodes, FAB) == got


def _naive_ring(kind, nbytes, n, nodes, fab):
    """Step by step: each ring pass takes n − 1 steps moving 1/n of the tensor (all-reduce
    two passes; reduce-scatter, all-gather and all-to-all one), the first nodes − 1 steps of
    a pass crossing nodes; the exchange takes n − 1 steps whose chunks sum to ``nbytes``.
    Every step pays its tier's α; the bytes run at the slowest tier's bandwidth."""
    if n <= 1:
        return 0.0
    bw = fab["net_bw"] if nodes > 1 else fab["link_bw"]
    total = float(fab["coll_latency_s"])
    passes = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1,
              "p2p": 1}[kind]
    for _ in range(passes):
        for step in range(n - 1):
            total += float(fab["net_step_s"] if step < nodes - 1 else fab["link_step_s"])
            total += (nbytes / (n - 1) if kind == "p2p" else nbytes / n) / bw
    if kind == "all_reduce" and nodes > 1:
        # NCCL's tree: up a chain in the node and floor(log2 nodes) tree levels, then down
        levels = nodes.bit_length() - 1
        tree = float(fab["coll_latency_s"]) + 2 * (
            (max(1, n // nodes) - 1) * float(fab["link_step_s"])
            + levels * float(fab["net_step_s"])) + 2 * (n - 1) / n * nbytes / (0.92 * bw)
        total = min(total, tree)
    return total


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(COLLECTIVE_KINDS[1:]), n=st.integers(1, 64),
       node_size=st.sampled_from([1, 2, 4, 8]), nbytes=st.integers(0, 10 ** 12))
def test_every_collective_against_the_step_by_step_ring(kind, n, node_size, nbytes):
    nodes = (n - 1) // node_size + 1
    got = collectives.collective_seconds(kind, nbytes, n, nodes, FAB)
    assert got == pytest.approx(_naive_ring(kind, nbytes, n, nodes, FAB), rel=1e-12, abs=1e-18)
    out = np.empty(3)
    rows = np.array([FAB] * 3)
    collectives.contiguous_seconds(COLLECTIVE_KINDS.index(kind), nbytes, n, rows,
                                   np.full(3, node_size, dtype=np.int64), out)
    assert np.all(out == got)


def test_the_kind_functions_are_the_ring_with_their_passes():
    for fn, passes in ((collectives.all_reduce_seconds, 2), (collectives.reduce_scatter_seconds, 1),
                       (collectives.all_gather_seconds, 1), (collectives.all_to_all_seconds, 1)):
        want = collectives.ring_seconds(S, 8, 2, passes, *(FAB[f] for f in SIMPLE))
        assert fn(S, 8, 2, FAB) == want
    assert collectives.p2p_seconds(S, 4, 2, FAB) == collectives.exchange_seconds(
        S, 4, 2, *(FAB[f] for f in SIMPLE))
    assert collectives.collective_seconds("all_reduce", S, 1, 1, FAB) == 0.0


@pytest.mark.parametrize("group, node_size", [(1, 8), (2, 8), (8, 8), (16, 8), (12, 4), (3, 1)])
def test_the_cost_models_variants(group, node_size):
    row = make_archs(base="a100-80g", node_size=node_size)
    eff = efficiency.for_rows(row)[0]
    link, net = float(row["link_gb_per_s"][0]) * 1e9, float(row["net_gb_per_s"][0]) * 1e9
    args = [float(eff[f]) for f in ("coll_latency_s", "link_step_s", "net_step_s",
                                    "link_efficiency", "net_efficiency")]
    got = collectives.contiguous_all_reduce_seconds(float(group), float(S), float(node_size),
                                                    link, net, *args)
    assert got == pytest.approx(naive_ring_allreduce(group, S, node_size, link, net, eff),
                                rel=1e-12)
    # the study's model: the same formula with the identity fabric (no latency, η = 1)
    ideal = collectives.contiguous_all_reduce_seconds(float(group), float(S), float(node_size),
                                                      link, net, 0.0, 0.0, 0.0, 1.0, 1.0)
    want = 0.0 if group == 1 else 2 * (group - 1) / group * S / (link if group <= node_size
                                                                 else net)
    assert ideal == pytest.approx(want, rel=1e-12)
    # bit for bit what phaze.cost prices a graph's all-reduce at, in both models
    g = OpGraph.from_ops([dict(name="x", kind=1, elements=1, bytes_in=2, bytes_out=2),
                          dict(name="ar", kind=3, preds=["x"], comm_bytes=S, group_size=group)])
    _, intra = cost.op_latencies(g, row, model="calibrated", efficiency=efficiency.for_rows(row))
    assert intra[1, 0] == got
    _, intra = cost.op_latencies(g, row, model="study")
    assert intra[1, 0] == ideal


def test_the_python_face_refuses_bad_input_in_one_sentence():
    with pytest.raises(ValueError, match="kind must be one of"):
        collectives.collective_seconds("broadcast", S, 4, 1, FAB)
    with pytest.raises(ValueError, match="kind must be one of"):
        collectives.collective_seconds("none", S, 4, 1, FAB)
    with pytest.raises(ValueError, match="nodes must not exceed ranks"):
        collectives.collective_seconds("p2p", S, 2, 3, FAB)
    with pytest.raises(ValueError, match="ranks must be an integer"):
        collectives.collective_seconds("p2p", S, 0, 1, FAB)
    with pytest.raises(ValueError, match="net_bw must be a finite number > 0"):
        collectives.fabric(coll_latency_s=0, link_step_s=0, net_step_s=0, link_bw=1, net_bw=0)


# ---------------------------------------------------------------------------
# the operator field and the dispatch on it
# ---------------------------------------------------------------------------

PREFIX = {"reduce_scatter_": "reduce_scatter", "allgather_": "all_gather",
          "alltoall_": "all_to_all", "ring_kv_exchange": "p2p", "allreduce_": "all_reduce"}


@pytest.mark.parametrize("name, t, sp, cp, ep", [
    ("gpt3-175b", 4, True, 2, 1), ("gpt3-175b", 2, False, 1, 1), ("mixtral-8x7b", 2, True, 2, 2),
    ("llama3-70b", 8, True, 4, 1)])
def test_the_builders_mark_each_collective(name, t, sp, cp, ep):
    mg = graph.build_layers(models.resolve(name), 1, t, sequence_parallel=sp,
                            flash_attention=True, kernels="megatron", context_parallel=cp,
                            expert_parallel=ep)
    seen = set()
    for layer in mg.layers:
        for g in (layer.forward, layer.backward):
            for i, op in enumerate(g.names):
                want = next((v for k, v in PREFIX.items() if op.startswith(k)), "none")
                assert COLLECTIVE_KINDS[g.collective[i]] == want, op
                assert (g.kind[i] == graph.KIND_COLLECTIVE) == (want != "none")
                seen.add(want)
    assert {"all_reduce" if not sp else "reduce_scatter", "none"} <= seen
    assert ("p2p" in seen) == (cp > 1) and ("all_to_all" in seen) == (ep > 1)


def test_the_field_defaults_validates_and_hashes():
    ops = [dict(name="x", kind=1, elements=1, bytes_in=2, bytes_out=2),
           dict(name="c", kind=3, preds=["x"], comm_bytes=8, group_size=2)]
    g = OpGraph.from_ops(ops)
    assert g.collective.tolist() == [0, graph.COLL_ALL_REDUCE]
    assert OpGraph.from_ops([ops[0], dict(ops[1], collective="all_reduce")]).content_hash() \
        == g.content_hash()   # all-reduces alone hash as before the field
    rs = OpGraph.from_ops([ops[0], dict(ops[1], collective="reduce_scatter")])
    assert rs.content_hash() != g.content_hash()
    assert rs.collectives("reduce_scatter").tolist() == [False, True]
    with pytest.raises(ValueError, match="'x': collective must be one of"):
        OpGraph.from_ops([dict(ops[0], collective="all_gather"), ops[1]])
    with pytest.raises(ValueError, match="'c': collective must be one of"):
        OpGraph.from_ops([ops[0], dict(ops[1], collective="none")])
    with pytest.raises(ValueError, match="'c': collective must be one of"):
        OpGraph.from_ops([ops[0], dict(ops[1], collective="gossip")])
    assert not g.collective.flags.writeable


def test_the_step_model_dispatches_on_the_field_not_the_name():
    row = presets.get("a100-80g")
    eff = efficiency.for_rows(row)
    rp = _plans.row_params(row, eff)
    ns = np.ascontiguousarray(row["node_size"], dtype=np.int64)
    base = [dict(name="x", kind=1, elements=1, bytes_in=2, bytes_out=2)]
    coll = dict(name="weird_name", kind=3, preds=["x"], comm_bytes=S // 2, group_size=4,
                bytes_in=S, bytes_out=S)
    sec = {}
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p"):
        g = OpGraph.from_ops(base + [dict(coll, collective=kind)])
        sec[kind] = _plans.op_seconds_rows(g, cost.prepare(row, model="calibrated",
                                                           efficiency=eff), rp, ns, 4)[0][1, 0]
    # all-reduce, all-to-all and the exchange keep op_latencies' price; the sequence-
    # parallel pair is re-priced as one ring pass over the 4 in-node ranks
    assert sec["all_reduce"] == sec["all_to_all"] == sec["p2p"]
    ring = collectives.all_gather_seconds(S, 4, 1, rp[0])
    assert sec["reduce_scatter"] == sec["all_gather"] == ring != sec["all_reduce"]
    # the plans' group collectives are found by the field too
    fwd = OpGraph.from_ops(base + [dict(coll, collective="all_to_all"),
                                   dict(coll, name="other", collective="p2p")])

    class Layer:
        kind = "moe_block"
        forward = backward = fwd

    assert _plans.group_collective_bytes(Layer) == (S, 1, 1, S, S)
    assert math.isfinite(sec["p2p"])
