"""NCCL's protocol choice (issue 25, item 2; docs/fidelity-sources.md §4.4): every ring
all-reduce, reduce-scatter and all-gather is priced at the fastest of NCCL's Simple, LL and
LL128 protocols, each with the constants of src/graph/tuning.cc at the chip's NCCL
version — against the plain-Python reference (tests/naive_nccl.py), by hand, and as
properties."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naive_collectives
import naive_nccl
from phaze import collectives
from phaze.arch import efficiency, presets
from phaze.step import _layers

KINDS = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
SIZES = [2 ** k for k in range(10, 31)]          # 1 KiB … 1 GiB
KiB, MiB = 1024, 1024 ** 2


def _fabric(name, per_node=1):
    """The step model's fabric of preset ``name`` (``row_params``), the network's bus
    bandwidth that of a ring with ``per_node`` ranks in each node (``spread``)."""
    rp = _layers.row_params(presets.get(name), efficiency.for_rows(presets.get(name)))[0]
    f = {k: float(rp[k]) for k in collectives.FABRIC_DTYPE.names}
    if per_node > 1:
        f["net_bw"] = min(per_node * f["net_bw"], f["link_bw"])
    return collectives.fabric(**f)


# (ranks, nodes): in one node, two nodes, many nodes, one rank per node (LL128 at 0.7)
RINGS = [(8, 1), (4, 1), (16, 2), (64, 8), (4, 4), (2, 2)]


@pytest.mark.parametrize("name", ["h100-sxm", "a100-80g", "b200", "tpuv4"])
@pytest.mark.parametrize("n, nodes", RINGS)
def test_the_compiled_choice_is_the_reference_bit_for_bit(name, n, nodes):
    fab = _fabric(name, per_node=n // nodes)
    for kind in KINDS:
        for s in SIZES:
            got = collectives.collective_seconds(kind, s, n, nodes, fab)
            want = getattr(naive_collectives, f"{kind}_seconds")(s, n, nodes, fab)
            assert got == want, (kind, n, nodes, s)
            if kind != "all_reduce" or nodes == 1:     # no tree to beat the ring
                assert got == naive_nccl.ring_seconds(s, n, nodes, KINDS[kind], fab)


def test_a_small_all_reduce_over_eight_h100s_runs_ll_by_hand():
    # 64 KiB, 8 ranks in one node, NCCL v2.20.3: LL α = 6.6 µs + 14 NVLink steps of 0.6 µs
    # = 15.0 µs; bus bandwidth min(87.7 GB/s, 367.61 GB/s / 4 = 91.9) = 87.7 GB/s;
    # β = 2·7/8 · 65,536 B / 87.7e9 = 1.3077 µs → 16.31 µs (Simple: 8.4 + 14·3.4 = 56.0 µs
    # + 0.31 µs; LL128: 14.0 + 14·1.9 = 40.6 µs + 0.37 µs)
    fab = _fabric("h100-sxm")
    s = 64 * KiB
    ll = 6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * s / 87.7e9
    assert ll == pytest.approx(16.3077e-6, rel=1e-4)
    assert collectives.all_reduce_seconds(s, 8, 1, fab) == pytest.approx(ll, rel=1e-12)
    assert naive_nccl.chosen(s, 8, 1, 2, fab) == "ll"
    times = naive_nccl.protocol_seconds(s, 8, 1, 2, fab)
    assert times["simple"] == pytest.approx(56.0e-6 + 2 * 7 / 8 * s / 367.61e9, rel=1e-12)
    assert times["ll128"] == pytest.approx(40.6e-6 + 2 * 7 / 8 * s / (0.92 * 367.61e9),
                                           rel=1e-12)
    # 3.45x faster than the one-protocol (Simple) price of before
    assert times["simple"] / ll == pytest.approx(3.453, rel=1e-3)


def test_a_large_all_reduce_over_eight_h100s_runs_simple_by_hand():
    # 256 MiB: Simple 56.0 µs + 2·7/8 · 2^28 B / 367.61e9 = 1333.9 µs; LL128 40.6 µs +
    # 2·7/8 · 2^28 / (0.92 · 367.61e9) = 1429.6 µs; LL 15.0 µs + 2·7/8 · 2^28 / 87.7e9 = 5371 µs
    fab = _fabric("h100-sxm")
    s = 256 * MiB
    simple = 56.0e-6 + 2 * 7 / 8 * s / 367.61e9
    assert simple == pytest.approx(1333.88e-6, rel=1e-5)
    assert collectives.all_reduce_seconds(s, 8, 1, fab) == pytest.approx(simple, rel=1e-12)
    assert naive_nccl.chosen(s, 8, 1, 2, fab) == "simple"
    # in between LL128 wins: 8 MiB at 40.6 µs + 43.4 µs = 84.0 µs (Simple 95.9 µs)
    t = collectives.all_reduce_seconds(8 * MiB, 8, 1, fab)
    assert t == pytest.approx(40.6e-6 + 2 * 7 / 8 * 8 * MiB / (0.92 * 367.61e9), rel=1e-12)
    assert naive_nccl.chosen(8 * MiB, 8, 1, 2, fab) == "ll128"


def test_an_a100_keeps_its_fitted_curve_in_one_node_and_takes_ll_across_nodes():
    # in one node the fit to the measured nccl-tests curve (sheet §4.1) stands at every
    # size: α = 8.4 + 14·4.457 = 70.8 µs, β over 0.7257 · 300 GB/s
    fab = _fabric("a100-80g")
    for s in (KiB, 64 * KiB, 8 * MiB, 256 * MiB):
        assert collectives.all_reduce_seconds(s, 8, 1, fab) == pytest.approx(
            8.4e-6 + 14 * 4.457e-6 + 2 * 7 / 8 * s / (0.7257 * 300e9), rel=1e-12)
        assert naive_nccl.chosen(s, 8, 1, 2, fab) == "simple"
    # 32 ranks on 4 nodes, 1 KiB, NCCL v2.12.7: LL α = 3.6 µs + 56 in-node steps of
    # 1.8 · 0.47 µs + 6 crossings of 2.7 µs = 67.18 µs; bus bandwidth min(19.0 GB/s (AMD
    # host, > 2 nodes), 192 GB/s / 4) = 19 GB/s → +0.104 µs (Simple: 8.4 + 56·4.457 + 6·28
    # = 426.0 µs; the tree, 8.4 + 2·(7·4.457 + 2·28) = 182.8 µs)
    fab = _fabric("a100-80g", per_node=8)
    ll = 3.6e-6 + 56 * 0.846e-6 + 6 * 2.7e-6 + 2 * 31 / 32 * KiB / 19.0e9
    assert collectives.all_reduce_seconds(KiB, 32, 4, fab) == pytest.approx(ll, rel=1e-12)
    assert ll == pytest.approx(67.28e-6, rel=1e-4)


def test_ll128_runs_at_0_7_with_one_rank_per_node_and_ll_takes_the_two_node_cap():
    fab = _fabric("h100-sxm")            # one rank per node: the network of one NIC
    net = 0.94 * 50e9
    t = naive_nccl.protocol_seconds(64 * MiB, 4, 4, 1, fab)
    assert t["ll128"] == pytest.approx(14.0e-6 + 3 * 4.0e-6 + 3 / 4 * 64 * MiB / (0.7 * net),
                                       rel=1e-12)
    # two nodes: LL at min(39.0 GB/s, 47 GB/s / 4); in-node steps of a spanning ring 1.0 µs
    t = naive_nccl.protocol_seconds(KiB, 16, 2, 1, _fabric("h100-sxm", per_node=8))
    assert t["ll"] == pytest.approx(6.6e-6 + 14 * 1.0e-6 + 1 * 2.7e-6
                                    + 15 / 16 * KiB / min(39.0e9, 8 * net / 4), rel=1e-12)


def test_no_protocol_fields_is_the_simple_ring_and_all_to_all_stays_simple():
    fab = _fabric("h100-sxm")
    simple = collectives.fabric(**{k: float(fab[k]) for k in
                                   ("coll_latency_s", "link_step_s", "net_step_s", "link_bw",
                                    "net_bw")})
    for s in SIZES:
        assert collectives.all_reduce_seconds(s, 8, 1, simple) == collectives.ring_seconds(
            s, 8, 1, 2, *(float(fab[k]) for k in ("coll_latency_s", "link_step_s",
                                                   "net_step_s", "link_bw", "net_bw")))
        assert collectives.all_to_all_seconds(s, 8, 1, fab) \
            == collectives.all_to_all_seconds(s, 8, 1, simple)


def test_chips_that_state_no_protocols_take_them_by_the_rules():
    h, a = efficiency.get("h100-sxm"), efficiency.get("a100-80g")
    b = efficiency.get("b200")
    # a cap: the mean over the dies that run the protocol there (the A100 runs none in a node)
    assert b.ll_link_gb_per_s == h.ll_link_gb_per_s == 87.7
    assert b.ll_net_gb_per_s == pytest.approx((19.0 + 20.4) / 2, rel=1e-12)
    assert b.ll_latency_s == pytest.approx((3.6e-6 + 6.6e-6) / 2, rel=1e-12)
    assert b.ll128_share == 0.92 and a.ll_link_gb_per_s == 0.0
    # the study's identity set runs Simple only
    from phaze.cost import _latency
    assert _latency.IDENTITY.ll_link_gb_per_s == 0.0 and _latency.IDENTITY.ll128_share == 0.0


def test_bad_protocol_fields_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match="ll128_share must be a finite number in"):
        collectives.fabric(coll_latency_s=0, link_step_s=0, net_step_s=0, link_bw=1, net_bw=1,
                           ll128_share=1.5)
    with pytest.raises(ValueError, match="fabric has no field ll_bogus"):
        collectives.fabric(coll_latency_s=0, link_step_s=0, net_step_s=0, link_bw=1, net_bw=1,
                           ll_bogus=1.0)
    with pytest.raises(ValueError, match="efficiency ll_net_gb_per_s must be a finite bandwidth"):
        dataclasses.replace(efficiency.get("h100-sxm"), ll_net_gb_per_s=-1.0)
    with pytest.raises(ValueError, match="efficiency ll128_share must be a share in"):
        dataclasses.replace(efficiency.get("h100-sxm"), ll128_share=2.0)


_PROTO = st.fixed_dictionaries({
    "coll_latency_s": st.floats(0, 1e-4), "link_step_s": st.floats(0, 1e-5),
    "net_step_s": st.floats(0, 5e-5), "link_bw": st.floats(1e9, 1e12),
    "net_bw": st.floats(1e9, 1e12), "ll_latency_s": st.floats(0, 1e-4),
    "ll_link_step_s": st.floats(0, 1e-5), "ll_span_step_s": st.floats(0, 1e-5),
    "ll_net_step_s": st.floats(0, 5e-5),
    "ll_link_bw": st.sampled_from([0.0, 20e9, 87.7e9, 1e12]),
    "ll_net2_bw": st.sampled_from([0.0, 22.5e9, 39e9]),
    "ll_net_bw": st.sampled_from([0.0, 19e9, 20.4e9]), "ll128_latency_s": st.floats(0, 1e-4),
    "ll128_link_step_s": st.floats(0, 1e-5), "ll128_net_step_s": st.floats(0, 5e-5),
    "ll128_share": st.sampled_from([0.0, 0.5, 0.92, 1.0])})


@settings(max_examples=200, deadline=None)
@given(f=_PROTO, kind=st.sampled_from(sorted(KINDS)), n=st.integers(2, 64),
       node_size=st.sampled_from([1, 2, 4, 8]), a=st.integers(0, 2 ** 30),
       b=st.integers(0, 2 ** 30))
def test_the_choice_is_the_least_protocol_and_monotone_in_bytes(f, kind, n, node_size, a, b):
    fab = collectives.fabric(**f)
    nodes = (n - 1) // node_size + 1
    lo, hi = min(a, b), max(a, b)
    got = collectives.collective_seconds(kind, lo, n, nodes, fab)
    each = naive_nccl.protocol_seconds(lo, n, nodes, KINDS[kind], fab)
    assert all(got <= t for t in each.values())
    if kind != "all_reduce" or nodes == 1:
        assert got == min(each.values())
    assert got <= collectives.collective_seconds(kind, hi, n, nodes, fab)
    # the rows' path (the step model's sequence-parallel rings) gives the same numbers
    out = np.empty(2)
    rows = np.array([fab, fab])
    collectives.contiguous_seconds(collectives.COLLECTIVE_KINDS.index(kind), lo, n, rows,
                                   np.full(2, node_size, dtype=np.int64), out)
    assert np.all(out == got)
