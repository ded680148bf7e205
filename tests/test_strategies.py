"""Strategy knobs in the graph and the training-step model (issue 14, fixed plans):
sequence parallelism, flash attention, recomputation none/selective/full, interleaved 1F1B,
ZeRO 0–3, overlapped gradient reduction — against slow references (tests/naive.py),
Korthikanti et al. 2022 Figure 7, properties, and today's default graphs unchanged."""
import hashlib
import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import graph, models, step
from phaze.arch import efficiency, presets
from phaze.models import ModelSpec
from phaze.validate import _model_spec
from phaze.step import _model as _step_model

from naive import (naive_interleaved_in_flight, naive_interleaved_makespan,
                   naive_korthikanti_table2, naive_ring_gather_seconds)

A100 = efficiency.get("a100-80g")
HERE = os.path.dirname(__file__)
GOLDEN = os.path.join(HERE, "..", "..", "shared", "golden", "fidelity", "korthikanti2022.json")
if not os.path.exists(GOLDEN):
    GOLDEN = "/work/shared/golden/fidelity/korthikanti2022.json"


def _small(layers=8, hidden=512, heads=8, seq=256):
    return ModelSpec(name=f"gpt-{layers}x{hidden}", n_layers=layers, hidden=hidden, heads=heads,
                     kv_heads=heads, ffn_hidden=4 * hidden, vocab=1000, seq_len=seq)


def _step(model=None, arch="a100-80g", **kw):
    plan = dict(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, microbatch=2,
                global_batch=16, recompute="full")
    plan.update(kw)
    return step.training_step(model or _small(), arch, **plan)


# -- today's graphs are unchanged by default ---------------------------------------------

def test_default_graphs_are_todays():
    """Every zoo model at t ∈ {1, 2, 4, 8}, b ∈ {1, 2} recorded before the strategy knobs
    (tests/data/graph_default_reference.json): the content hash and operator names of each
    forward/backward graph, and param/stash/boundary bytes, are unchanged by default.
    Driven by the reference's keys, so models added to the zoo later do not break it."""
    with open(os.path.join(HERE, "data", "graph_default_reference.json")) as fh:
        ref = json.load(fh)
    seen = 0
    for key, want in ref.items():
        parts = key.split("|")
        name, t, b, kind = parts[0], int(parts[1]), int(parts[2]), parts[3]
        if name not in models.names():
            continue
        layer = {L.kind: L for L in graph.build_layers(name, b, t).layers}[kind]
        if len(parts) == 5:
            g = layer.forward if parts[4] == "f" else layer.backward
            names = hashlib.blake2b("\n".join(g.names).encode(), digest_size=8).hexdigest()
            assert want == [g.content_hash(), names], key
        else:
            assert want == [layer.param_bytes, layer.stash_bytes, layer.boundary_bytes], key
        seen += 1
    assert seen > 1000


def test_sp_at_t1_is_the_plain_graph():
    a = graph.build_layers("gpt3-175b", 1, 1)
    b = graph.build_layers("gpt3-175b", 1, 1, sequence_parallel=True)
    for x, y in zip(a.layers, b.layers):
        assert x.forward.content_hash() == y.forward.content_hash()
        assert x.backward.content_hash() == y.backward.content_hash()
        assert x.stash_bytes == y.stash_bytes
    assert not b.sequence_parallel


# -- Korthikanti Table 2 and Figure 7 -----------------------------------------------------

@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-1.7b"])
@pytest.mark.parametrize("t", [1, 2, 8])
def test_block_stash_is_table2_in_every_mode(name, t):
    m = models.get(name)
    if not m.valid_tensor_parallel(t) or m.activation != "gelu" or m.kv_heads != m.heads:
        pytest.skip("Table 2 is for MHA + GELU")
    s, h, a = m.seq_len, m.hidden, m.heads
    plain = graph.build_layers(m, 2, t).layers[1]
    sp = graph.build_layers(m, 2, t, sequence_parallel=True).layers[1]
    cases = [(plain, "none", "none"), (plain, "selective", "sel"), (plain, "full", "full")]
    if t > 1:
        cases += [(sp, "none", "seq"), (sp, "selective", "seqsel")]
    for blk, mode, key in cases:
        assert blk.stash(mode) == pytest.approx(naive_korthikanti_table2(s, 2, h, a, t, key),
                                                rel=1e-12)


def test_figure7_activation_percentages_within_5_percent():
    with open(GOLDEN) as fh:
        gold = json.load(fh)
    rows = {r["model"]: r for r in gold["table5_iteration_s"]}
    for name, ref in gold["figure7_activation_percent_of_none"].items():
        m = _model_spec(name, gold["models"])
        t, b = rows[name]["t"], rows[name]["microbatch"]
        plain = graph.build_layers(m, b, t).layers[1]
        sp = graph.build_layers(m, b, t, sequence_parallel=True).layers[1]
        none = plain.stash("none")
        got = dict(none=100.0, seq=100 * sp.stash("none") / none,
                   sel=100 * plain.stash("selective") / none,
                   seqsel=100 * sp.stash("selective") / none, full=100 * plain.stash("full") / none)
        for mode, pct in ref.items():
            assert abs(got[mode] - pct) <= 0.05 * pct, (name, mode, got[mode], pct)


# -- graph properties ------------------------------------------------------------------

@st.composite
def _specs(draw):
    heads = draw(st.sampled_from([4, 8, 16]))
    hd = draw(st.sampled_from([16, 32, 64]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, heads) if heads % k == 0]))
    return ModelSpec(name="r", n_layers=2, hidden=heads * hd, heads=heads, kv_heads=kv,
                     ffn_hidden=draw(st.sampled_from([2, 4])) * heads * hd,
                     vocab=draw(st.integers(100, 3000)), seq_len=draw(st.sampled_from([64, 128])),
                     activation=draw(st.sampled_from(["gelu", "swiglu"])),
                     norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
                     position=draw(st.sampled_from(["learned", "rotary"])),
                     bias=draw(st.booleans()))


@settings(max_examples=30, deadline=None)
@given(m=_specs(), b=st.integers(1, 3), t=st.sampled_from([1, 2, 4]), flash=st.booleans())
def test_stash_properties(m, b, t, flash):
    if not m.valid_tensor_parallel(t):
        return
    plain = graph.build_layers(m, b, t, flash_attention=flash)
    sp = graph.build_layers(m, b, t, sequence_parallel=True, flash_attention=flash)
    for x, y in zip(plain.layers, sp.layers):
        for mode in ("none", "selective", "full"):
            assert y.stash(mode) <= x.stash(mode)          # SP never increases activations
        assert x.stash("full") <= x.stash("selective") <= x.stash("none")
        assert y.stash("full") <= y.stash("selective") <= y.stash("none")
        # the forward's FLOPs do not change with SP (same GEMMs, norms on fewer tokens)
        assert x.forward.flops.sum() == y.forward.flops.sum()
    if not flash:
        fl = graph.build_layers(m, b, t, flash_attention=True).layers[1]
        blk = plain.layers[1]
        assert fl.stash("none") < blk.stash("none")        # no b·a·s² scores
        # selective drops the kernel's fp32 log-sum-exp only (b·a/t·s·4 bytes)
        assert fl.stash("none") - fl.stash("selective") == b * (m.heads // t) * m.seq_len * 4
        # flash keeps the FLOPs of QKᵀ and P·V (forward), and adds the recomputed QKᵀ
        assert fl.forward.flops.sum() == blk.forward.flops.sum()
        assert fl.backward.flops.sum() == pytest.approx(
            blk.backward.flops.sum() + 2.0 * b * (m.heads // t) * m.seq_len ** 2 * m.head_dim,
            rel=1e-12)


def test_sp_collectives_replace_the_allreduces():
    g = graph.build_layers("gpt3-175b", 1, 8, sequence_parallel=True).layers[1]
    fnames, bnames = g.forward.names, g.backward.names
    assert not any(n.startswith("allreduce") for n in fnames + bnames)
    assert [n for n in fnames if n.startswith(("reduce_scatter_", "allgather_"))] == \
        ["allgather_attn", "reduce_scatter_attn", "allgather_mlp", "reduce_scatter_mlp"]
    plain = graph.build_layers("gpt3-175b", 1, 8).layers[1]
    # bandwidth term: reduce-scatter + all-gather = one all-reduce (half-size comm_bytes each)
    sp_comm = sum(int(g.forward.comm_bytes[i]) for i, n in enumerate(fnames))
    assert 2 * sp_comm == 2 * int(plain.forward.comm_bytes.sum())
    i = fnames.index("ln1")
    assert g.forward.elements[i] * 8 == plain.forward.elements[plain.forward.names.index("ln1")]


def test_bad_sequence_for_sp():
    m = ModelSpec(name="odd", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                  vocab=100, seq_len=66)
    with pytest.raises(ValueError, match="divisible"):
        graph.build_layers(m, 1, 4, sequence_parallel=True)


# -- step: interleaved 1F1B ------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 4), v=st.integers(1, 4), k=st.integers(1, 3),
       f=st.floats(0.1, 2.0), b=st.floats(0.1, 4.0))
def test_interleaved_formula_is_the_simulated_schedule(p, v, k, f, b):
    m = k * p
    sim = naive_interleaved_makespan(f / v, b / v, p, v, m)
    assert sim == pytest.approx((m + (p - 1) / v) * (f + b), rel=1e-9)


@pytest.mark.parametrize("p,v", [(2, 2), (4, 2), (2, 4), (4, 3)])
def test_interleaved_in_flight_is_megatrons_warmup(p, v):
    layers = p * v * 2
    m_spec = _small(layers=layers)
    m = 2 * p
    r = step.training_step(m_spec, "a100-80g", tensor_parallel=1, pipeline_parallel=p,
                           data_parallel=1, microbatch=1, global_batch=m, recompute="none",
                           virtual_stages=v)
    assert r.ok
    for st_mem in r.memory:
        chunks = naive_interleaved_in_flight(p, v, st_mem.stage, m)
        assert st_mem.in_flight == chunks
        blk = graph.build_layers(m_spec, 1, 1).layers[1]
        assert st_mem.activations == chunks * (layers // (p * v)) * blk.stash("none")
    # the sheet's first-stage figure: L·(1 + (p − 1)/(p·v)) layers' worth when m·v is large
    first = r.memory[0]
    assert first.in_flight * layers // (p * v) == pytest.approx(
        layers * (1 + (p - 1) / (p * v)), rel=1e-12) or m * v < 2 * (p - 1) + (v - 1) * p + 1


def test_bubble_shrinks_with_v():
    m_spec = _small(layers=8)
    bubbles = []
    for v in (1, 2, 4):
        r = _step(m_spec, tensor_parallel=1, pipeline_parallel=2, data_parallel=1,
                  global_batch=8, virtual_stages=v)
        assert r.ok
        bd = r.breakdown
        assert bd.bubble_s == pytest.approx(bd.slot_s / v)
        bubbles.append(bd.bubble_s / bd.slot_s)
    assert bubbles[0] > bubbles[1] > bubbles[2]


def test_interleaving_moves_v_times_the_transfers():
    m_spec = _small(layers=8)
    one = _step(m_spec, pipeline_parallel=2, data_parallel=1, global_batch=8)
    two = _step(m_spec, pipeline_parallel=2, data_parallel=1, global_batch=8, virtual_stages=2)
    # plain, p = 2: each stage crosses one boundary per microbatch; v = 2: virtual stages
    # 0..3 alternate between the devices, so each device crosses 2v − 1 = 3 (all in one node
    # here, equal transfers)
    assert two.breakdown.p2p_s == pytest.approx(3 * one.breakdown.p2p_s, rel=1e-12)


@pytest.mark.parametrize("kw,words", [
    (dict(virtual_stages=3), "divisible by p·v"),
    (dict(virtual_stages=2, global_batch=12, data_parallel=1, microbatch=4), "divisible by p"),
    (dict(virtual_stages=2, pipeline_parallel=1), "needs pipeline parallelism"),
])
def test_interleaving_refusals_say_why(kw, words):
    r = _step(_small(layers=8), **kw)
    assert r.status == "infeasible" and words in r.reason and math.isinf(r.time_s)


# -- step: SP, selective, flash --------------------------------------------------------

def test_sp_at_t1_is_a_noop_in_the_step():
    a = _step(tensor_parallel=1)
    b = _step(tensor_parallel=1, sequence_parallel=True)
    assert a.time_s == b.time_s and a.memory == b.memory
    assert b.plan["sequence_parallel"] and not b.plan["sequence_parallel_effective"]


def test_sp_collectives_are_priced_as_rings():
    r_row = presets.get("a100-80g")
    m_spec = _small()
    g = graph.build_layers(m_spec, 2, 2, sequence_parallel=True).layers[1].forward
    sec, index = _step_model._op_seconds(g, r_row, A100, 2)
    i = index["reduce_scatter_attn"]
    ref = naive_ring_gather_seconds(2, int(g.bytes_in[i]), 1, float(r_row["link_gb_per_s"][0]),
                                    float(r_row["net_gb_per_s"][0]), A100)
    assert sec[i] == pytest.approx(ref, rel=1e-12)
    # across two nodes at NCCL's protocol choice (issue 25): 1 MB runs LL128 (10 µs + 14·1.9
    # + 1·4 µs, 0.92 of the bus bandwidth) rather than the A100's fitted Simple ring
    assert step.ring_allgather_seconds(1e6, range(16), r_row, A100) == pytest.approx(
        naive_ring_gather_seconds(16, 1e6, 2, float(r_row["link_gb_per_s"][0]),
                                  float(r_row["net_gb_per_s"][0]), A100, per_node=8,
                                  protocols=True),
        rel=1e-12)


def test_recompute_modes_order_time_and_memory():
    res = {mode: _step(recompute=mode) for mode in ("none", "selective", "full")}
    assert all(r.ok for r in res.values())
    t = {k: r.time_s for k, r in res.items()}
    act = {k: r.memory[0].activations for k, r in res.items()}
    assert t["none"] < t["selective"] < t["full"]
    assert act["none"] > act["selective"] > act["full"]
    bd = res["selective"].breakdown
    g = graph.build_layers(_small(), 2, 2, kernels="megatron").layers[1].forward
    sec, index = _step_model._op_seconds(g, presets.get("a100-80g"), A100, 2)
    core = sum(sec[index[n]] for n in ("attn_scores", "softmax", "attn_dropout", "attn_context"))
    assert bd.recompute_s == pytest.approx(4 * core, rel=1e-12)     # 4 layers per stage


def test_flash_attention_saves_activations():
    a = _step(recompute="none")
    b = _step(recompute="none", flash_attention=True)
    assert b.ok and b.memory[0].activations < a.memory[0].activations


def test_selective_with_flash_reruns_the_fused_kernel():
    """Megatron-Core's selective recomputation checkpoints core_attention, Transformer
    Engine's fused attention, and re-runs its forward before the backward
    (megatron/core/transformer/attention.py, ``checkpoint_core_attention``): by hand, the
    stage's 4 layers each re-run flash_attn's forward, and each drops the kernel's fp32
    log-sum-exp (b·a/t·s·4 B); the stage holds 2 microbatches in flight and one layer's
    recomputed kernel as workspace."""
    b = _step(recompute="none", flash_attention=True)
    s = _step(recompute="selective", flash_attention=True)
    g = graph.build_layers(_small(), 2, 2, flash_attention=True, kernels="megatron")
    sec, index = _step_model._op_seconds(g.layers[1].forward, presets.get("a100-80g"), A100, 2)
    assert s.breakdown.recompute_s == pytest.approx(4 * sec[index["flash_attn"]], rel=1e-12)
    assert s.breakdown.recompute_s > 0 and s.time_s > b.time_s
    lse = 2 * (8 // 2) * 256 * 4
    L = g.layers[1]
    assert L.stash("none") - L.stash("selective") == lse
    assert b.memory[0].activations - s.memory[0].activations == 2 * 4 * lse
    assert s.memory[0].workspace == lse
    # fp8: the 16-bit attention output flash's backward reads is dropped too
    f8 = graph.build_layers(_small(), 2, 2, flash_attention=True, kernels="megatron",
                            dtype="fp8").layers[1]
    assert f8.stash("none") - f8.stash("selective") == lse + 2 * (2 * 256) * (512 // 2)


# -- step: ZeRO and overlap ------------------------------------------------------------

@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_memory_sharding(zero):
    d = 4
    r = _step(data_parallel=d, global_batch=32, zero_stage=zero)
    base = _step(data_parallel=d, global_batch=32)
    assert r.ok
    mb, m0 = r.memory[0], base.memory[0]
    n_par = m0.weights // 2
    assert mb.optimizer_state == (12 * n_par // d if zero >= 1 else 12 * n_par)
    assert mb.gradients == (4 * n_par // d if zero >= 2 else 4 * n_par)
    assert mb.weights == (2 * n_par // d if zero >= 3 else 2 * n_par)
    if zero == 1:
        # Megatron's distributed optimizer, bf16 params + fp32 grads: 6 + 12/d B/param (sheet §5.1)
        assert (mb.weights + mb.gradients + mb.optimizer_state) == pytest.approx(
            n_par * (6 + 12 / d), abs=4)
    assert ("megatron-lm" in r.plan["trainers"]) == (zero <= 1)
    assert ("deepspeed" in r.plan["trainers"]) == (zero <= 1)     # p = 2: DeepSpeed refuses 2–3


def test_zero_at_d1_is_zero0():
    base = _step(data_parallel=1, global_batch=8)
    for zero in (1, 2, 3):
        r = _step(data_parallel=1, global_batch=8, zero_stage=zero)
        assert r.time_s == pytest.approx(base.time_s, rel=1e-12)
        assert r.memory[0].total == base.memory[0].total


def test_zero3_adds_per_layer_gathers_and_overlap_never_slower():
    kw = dict(data_parallel=4, global_batch=32, tensor_parallel=1)
    t = {z: _step(zero_stage=z, **kw).time_s for z in range(4)}
    assert t[3] > t[2]
    for z in range(4):
        assert _step(zero_stage=z, overlap_grad_reduce=True, **kw).time_s <= t[z] * (1 + 1e-12)
    with pytest.raises(ValueError):
        _step(zero_stage=4)
    with pytest.raises(ValueError):
        _step(zero_stage=True)


def test_overlapped_reduction_is_what_exceeds_the_last_backward():
    kw = dict(data_parallel=4, global_batch=32, tensor_parallel=1, pipeline_parallel=1)
    plain = _step(**kw)
    over = _step(overlap_grad_reduce=True, **kw)
    bd = plain.breakdown
    # Megatron-Core's buckets: max(40e6, 1e6·dp) parameters; the last one's share of the
    # stage's gradients stays exposed however long the backward it overlaps (issue 25)
    n_par = plain.memory[0].weights // 2
    frac = min(1.0, max(40e6, 1e6 * 4) / n_par)
    assert over.breakdown.dp_allreduce_s == pytest.approx(
        max(frac * bd.dp_allreduce_s, bd.dp_allreduce_s - bd.backward_s - bd.recompute_s),
        rel=1e-12, abs=1e-15)
    assert over.breakdown.dp_allreduce_s > 0.0


def test_zero1_traffic_is_reduce_scatter_plus_all_gather():
    r_row = presets.get("a100-80g")
    kw = dict(data_parallel=4, global_batch=32, tensor_parallel=2, pipeline_parallel=1)
    z1 = _step(zero_stage=1, **kw)
    n_par = z1.memory[0].weights // 2 * 4 // 4          # ZeRO-1 keeps weights whole
    ranks_nodes = 1                                     # t·d = 8 ranks: one node
    ref = (naive_ring_gather_seconds(4, 4 * n_par, ranks_nodes, float(r_row["link_gb_per_s"][0]),
                                     float(r_row["net_gb_per_s"][0]), A100)
           + naive_ring_gather_seconds(4, 2 * n_par, ranks_nodes, float(r_row["link_gb_per_s"][0]),
                                       float(r_row["net_gb_per_s"][0]), A100))
    assert z1.breakdown.dp_allreduce_s == pytest.approx(ref, rel=1e-12)
    z0 = _step(**kw)
    # the optimizer updates a quarter of the parameters (launch gaps and tiny all-reduces equal)
    assert z1.breakdown.optimizer_s < z0.breakdown.optimizer_s
