"""Sharded data parallelism priced by the bytes NCCL moves (issue 25): one FSDP / ZeRO-3
layer's all-gather, the reductions across nodes over every NIC, and the overlap rules,
against hand computations from the ring formula (``docs/fidelity-sources.md``, "Sharded
data parallelism and overlap"). The ring: α + (n − 1)/n · bytes / (η·BW), α =
coll_latency + (steps − x)·link_step + x·net_step with x node-crossing steps; between
nodes a group with g ranks per node uses g NICs: η·BW = min(η_link·link, g·η_net·net)."""
import pytest

from phaze import step
from phaze.arch import efficiency

H = 8192
L = 80
KV = 8 * 128
FFN = 28672
VOCAB = 128256
#: One llama3-70b layer's parameters: Q and O (h²), K and V (h·kv), SwiGLU (3·h·ffn), two norms.
LAYER_PARAMS = 2 * H * H + 2 * H * KV + 3 * H * FFN + 2 * H
EFF = efficiency.get("h100-sxm")
LINK_BW = EFF.link_efficiency * 450e9
NET_BW = EFF.net_efficiency * 50e9


def ring(nbytes, n, nodes, passes, per_node):
    """The ring formula by hand (module docstring)."""
    x = passes * (nodes - 1)
    alpha = EFF.coll_latency_s + (passes * (n - 1) - x) * EFF.link_step_s + x * EFF.net_step_s
    bw = min(LINK_BW, per_node * NET_BW) if nodes > 1 else LINK_BW
    return alpha + passes * (n - 1) / n * nbytes / bw


def _step(**kw):
    base = dict(tensor_parallel=1, pipeline_parallel=1, microbatch=1, recompute="full",
                flash_attention=True)
    base.update(kw)
    res = step.training_step("llama3-70b", "h100-sxm", **base)
    assert res.ok, res.reason
    return res


def test_layer_params_as_counted():
    assert LAYER_PARAMS == 855_654_400          # 1.71 GB in bf16 (1.59 GiB)


def test_fsdp_layer_all_gather_magnitude():
    """ZeRO-3 over 64 GPUs (8 nodes of 8) against ZeRO-2 of the same plan, no overlap: the
    difference is every layer's all-gather before its forward and (resharded) before its
    backward, the embedding's and head's likewise, less ZeRO-2's one gather of the whole
    model after the optimizer. One layer's gather ends with its 1.71 GB on every rank:
    4.6 ms at ~368 GB/s, not the 64× larger tensor (~300 ms) the old code priced."""
    d = 64
    z2 = _step(data_parallel=d, global_batch=d, zero_stage=2)
    z3 = _step(data_parallel=d, global_batch=d, zero_stage=3)
    layer = ring(2 * LAYER_PARAMS, d, 8, 1, 8)
    # the bandwidth term dominates (α = 0.3 ms of 63 ring steps, 7 between nodes)
    assert layer == pytest.approx(2 * LAYER_PARAMS * 63 / 64 / min(LINK_BW, 8 * NET_BW),
                                  rel=0.08)
    assert 4.0e-3 < layer < 5.0e-3
    emb = ring(2 * VOCAB * H, d, 8, 1, 8)
    head = ring(2 * (VOCAB * H + H), d, 8, 1, 8)
    total = L * LAYER_PARAMS + VOCAB * H + VOCAB * H + H
    end_gather = ring(2 * total, d, 8, 1, 8)
    expected = 2 * L * layer + 2 * emb + 2 * head - end_gather
    assert z3.time_s - z2.time_s == pytest.approx(expected, rel=1e-6)


def test_fsdp_not_resharded_gathers_once():
    """reshard_after_forward off (FSDP's SHARD_GRAD_OP): one gather per layer per
    microbatch, and the gathered stage held in memory instead of two layers."""
    d = 64
    on = _step(data_parallel=d, global_batch=d, zero_stage=3)
    off = _step(data_parallel=d, global_batch=d, zero_stage=3, reshard_after_forward=False)
    layer = ring(2 * LAYER_PARAMS, d, 8, 1, 8)
    emb = ring(2 * VOCAB * H, d, 8, 1, 8)
    head = ring(2 * (VOCAB * H + H), d, 8, 1, 8)
    assert on.time_s - off.time_s == pytest.approx(L * layer + emb + head, rel=1e-6)
    total = L * LAYER_PARAMS + 2 * VOCAB * H + H
    grow = off.peak_memory.workspace - on.peak_memory.workspace
    assert grow == 2 * total - 2 * 2 * LAYER_PARAMS


def test_prefetched_gathers_hide_behind_compute():
    """With the gathers prefetched (overlap_param_gather) and the reduce-scatters
    overlapped, a layer whose compute outlasts its traffic leaves the first layer's
    traffic, the embedding/head's and the compute's slowdown beside the rest exposed."""
    d = 64
    z3 = _step(data_parallel=d, global_batch=d, zero_stage=3, overlap_param_gather=True,
               overlap_grad_reduce=True)
    bd = z3.breakdown
    layer = ring(2 * LAYER_PARAMS, d, 8, 1, 8)
    rs = ring(4 * LAYER_PARAMS, d, 8, 1, 8)
    emb = ring(2 * VOCAB * H, d, 8, 1, 8)
    head = ring(2 * (VOCAB * H + H), d, 8, 1, 8)
    emb_rs = ring(4 * VOCAB * H, d, 8, 1, 8)
    head_rs = ring(4 * (VOCAB * H + H), d, 8, 1, 8)
    per_layer_f = (bd.forward_s) / L       # embedding/head forward are small beside it
    assert layer < per_layer_f               # the case this test is about
    # the first layer's gathers run alone; the other L − 1 layers' gathers and
    # reduce-scatters slow the compute they overlap by 18.9 % of their seconds' worth
    # (Lee et al. 2025): κ = 0.189/1.189 of each
    k = 0.189 / 1.189
    exposed = (layer + (layer + rs) + (L - 1) * k * (layer + (layer + rs))
               + 2 * emb + 2 * head + emb_rs + head_rs)
    comm = bd.slot_s - bd.forward_s - bd.backward_s - bd.recompute_s - bd.p2p_s
    assert comm == pytest.approx(exposed, rel=1e-6)


def test_data_parallel_all_reduce_uses_every_nic():
    """ZeRO-0 over 16 GPUs (2 nodes of 8, t = 1): the fp32 gradients' all-reduce runs over
    the 8 NICs of each node, ~8× one NIC's bandwidth (capped by NVLink), not one card."""
    d = 16
    res = step.training_step("llama3-8b", "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                             data_parallel=d, microbatch=1, global_batch=d, recompute="full",
                             flash_attention=True, zero_stage=0)
    h, ffn, kv, vocab, layers = 4096, 14336, 1024, 128256, 32
    n = layers * (2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h) + 2 * vocab * h + h
    expected = ring(4 * n, d, 2, 2, 8)
    assert res.breakdown.dp_allreduce_s == pytest.approx(expected, rel=1e-6)
    one_nic = ring(4 * n, d, 2, 2, 1)
    assert one_nic / expected > 7.0


def test_tensor_parallel_eight_leaves_one_nic():
    """Megatron's data-parallel group at t = 8 has one rank per node: one NIC."""
    res = step.training_step("llama3-70b", "h100-sxm", tensor_parallel=8, pipeline_parallel=1,
                             data_parallel=2, microbatch=1, global_batch=2, recompute="full",
                             flash_attention=True, sequence_parallel=True, zero_stage=0)
    n_local = (L * LAYER_PARAMS - L * 2 * H) // 8 + L * 2 * H + 2 * (VOCAB * H // 8) + H
    expected = ring(4 * n_local, 2, 2, 2, 1)
    assert res.breakdown.dp_allreduce_s == pytest.approx(expected, rel=0.02)
