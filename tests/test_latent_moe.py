"""LatentMoE (issue 27; Nemotron 3 Super): ``ModelSpec.moe_latent_size``, its parameters
counted by hand from the published config.json (tests/data/hf/nemotron-3-super-120b-a12b.json)
and against the checkpoint's totals, the reader, and the graph: the two latent projections'
forward and backward GEMMs, the routed experts at latent width, the dispatch at latent
width, parameter and stash bytes by hand, FLOP identities (forward = 2 × weight MACs per
token × tokens, backward = 2 × forward). Sources: docs/fidelity-sources.md §24."""
import json
from pathlib import Path

import numpy as np
import pytest

from phaze import graph, models, step
from phaze.arch import make_archs
from phaze.models import ModelSpec
from phaze.step import _plans

HF = Path(__file__).parent / "data" / "hf"
NAME = "nemotron-3-super-120b-a12b"

# Nemotron 3 Super's sizes, from the config (hidden, latent, expert width, shared width,
# experts, top-k, vocab; Mamba: heads, head width, groups, state, conv).
H, L, FE, FS, E, K, V = 4096, 1024, 2688, 5376, 512, 22, 131072
MH, MD, MG, MS, MC = 128, 64, 8, 128, 4


def _fixture():
    return json.loads((HF / f"{NAME}.json").read_text())


def _no_mtp():
    return dict(_fixture(), num_nextn_predict_layers=0)


# -- parameters by hand -------------------------------------------------------------------

def _mamba_layer():
    d, conv = MH * MD, MH * MD + 2 * MG * MS
    in_proj = H * (2 * d + 2 * MG * MS + MH)
    return H + in_proj + conv * MC + conv + 3 * MH + d + d * H


def _attention_layer():
    return H + H * 32 * 128 + 2 * H * 2 * 128 + 32 * 128 * H


def _moe_layer():
    # norm, router and its e_score_correction_bias, fc1/fc2_latent_proj, 512 experts of
    # up_proj 2688 × 1024 and down_proj 1024 × 2688, the shared expert at 4096
    return H + E * H + E + 2 * H * L + E * 2 * L * FE + 2 * H * FS


def test_layer_parameters_by_hand():
    m = models.get(NAME)
    assert _mamba_layer() == 109_640_064 == models.layer_params(m, "mamba", "none")
    assert _attention_layer() == 35_655_680 == models.layer_params(m, "attention", "none")
    assert _moe_layer() == 2_873_102_848 == models.layer_params(m, "none", "moe")
    assert models.expert_params(m) == 2 * L * FE == 5_505_024


def test_counts_against_the_checkpoint_and_the_publisher():
    """120,668,707,840 = 40 Mamba + 8 attention + 40 LatentMoE layers, the table and the
    output layer and the final norm; active: less 490 unrouted experts in each of the 40
    MoE layers. With the MTP block (eh_proj 8192 × 4096, enorm, hnorm, final norm, one
    attention and one LatentMoE layer) 123,611,033,088: the BF16 checkpoint's tensor total
    (its safetensors headers). NVIDIA: "120B total, 12B active"; "12.7B active" elsewhere."""
    m = models.get(NAME)
    total = 40 * _mamba_layer() + 8 * _attention_layer() + 40 * _moe_layer() + 2 * V * H + H
    active = total - 40 * (E - K) * 2 * L * FE
    assert (m.n_params, m.n_active_params, m.n_mtp_params) == (total, active, 0)
    assert (total, active) == (120_668_707_840, 12_770_237_440)
    mtp_block = 2 * H * H + 3 * H + _attention_layer() + _moe_layer()
    assert total + mtp_block == 123_611_033_088
    assert int(m.n_params / 1e9) == 120 and int(m.n_active_params / 1e9) == 12
    assert int(m.n_active_params / 1e8) == 127
    # the experts' latent width is the whole difference from a plain MoE of the same shape
    plain = m.with_(moe_latent_size=0)
    assert plain.n_params - m.n_params == 40 * (E * 2 * (H - L) * FE - 2 * H * L)


# -- the config reader --------------------------------------------------------------------

def test_reader_reads_the_published_config_without_its_mtp_block():
    with pytest.raises(ValueError, match="'num_nextn_predict_layers'") as exc:
        models.from_hf_config(HF / f"{NAME}.json")
    assert "'*E'" in str(exc.value) and "\n" not in str(exc.value)
    m = models.from_hf_config(_no_mtp())
    assert m.name == _fixture()["_name_or_path"] and m.seq_len == 262144
    assert m.moe_latent_size == L
    assert models.from_hf_config(_no_mtp(), name=NAME, seq_len=8192) == models.get(NAME)
    # the pattern as the zoo holds it
    z = models.get(NAME)
    assert Counter_kinds(z) == {("mamba", "none"): 40, ("none", "moe"): 40,
                                ("attention", "none"): 8}
    assert [i for i, k in enumerate(z.layer_kinds) if k[0] == "attention"] == \
        [7, 16, 25, 36, 47, 58, 69, 78]


def Counter_kinds(m):
    out = {}
    for k in m.layer_kinds:
        out[k] = out.get(k, 0) + 1
    return out


@pytest.mark.parametrize("changes, key", [
    ({"moe_latent_size": 0}, "'moe_latent_size'"),
    ({"moe_latent_size": -4}, "'moe_latent_size'"),
    ({"moe_latent_size": 1024.5}, "'moe_latent_size'"),
])
def test_reader_refuses_bad_latent_sizes_in_one_sentence(changes, key):
    with pytest.raises(ValueError, match=key) as exc:
        models.from_hf_config(dict(_no_mtp(), **changes))
    assert "\n" not in str(exc.value)


def test_latent_size_outside_nemotron_h_and_without_experts_refused():
    nano = json.loads((HF / "nemotron-h-8b.json").read_text())
    with pytest.raises(ValueError, match="'moe_latent_size'"):
        models.from_hf_config(dict(nano, moe_latent_size=1024))     # no 'E' layer
    llama = json.loads((HF / "llama3-8b.json").read_text())
    with pytest.raises(ValueError, match="'moe_latent_size'.*nemotron_h"):
        models.from_hf_config(dict(llama, moe_latent_size=1024))
    with pytest.raises(ValueError, match="moe_latent_size must be 0 without experts"):
        models.get("llama3-8b").with_(moe_latent_size=512)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="moe_latent_size"):
            models.get(NAME).with_(moe_latent_size=bad)


# -- the graph ----------------------------------------------------------------------------

#: A tiny LatentMoE model of each layer kind Nemotron 3 Super has (and a dense MLP layer).
TINY = ModelSpec(
    name="tiny-latent", n_layers=6, hidden=64, heads=4, kv_heads=2, ffn_hidden=96, vocab=500,
    seq_len=256, activation="squared_relu", norm="rmsnorm", position="none", bias=False,
    tied_embeddings=False,
    layer_mixers=("mamba", "none", "attention", "none", "mamba", "none"),
    layer_ffns=("none", "moe", "none", "moe", "none", "dense"),
    mamba_heads=4, mamba_head_dim=32, mamba_state=16, mamba_groups=2, mamba_conv=4,
    mamba_chunk=64, n_experts=8, experts_per_token=2, expert_ffn_hidden=48,
    n_shared_experts=1, shared_ffn_hidden=80, router_bias=True, moe_latent_size=16)
#: The same with biases and a SwiGLU expert, attention with the experts (the MoE block).
TINY_BIAS = ModelSpec(
    name="tiny-latent-bias", n_layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=96,
    vocab=500, seq_len=256, activation="swiglu", norm="rmsnorm", position="rotary", bias=True,
    tied_embeddings=False, n_experts=8, experts_per_token=2, expert_ffn_hidden=48,
    moe_latent_size=32)


def _op(g, name):
    return g.names.index(name)


def _gemm_flops(g):
    core = np.array([n in ("flash_attn", "flash_attn.bwd", "mamba_ssd", "mamba_ssd.bwd")
                     for n in g.names])
    return float(g.flops[~core].sum())


def _moe_macs_per_token(m):
    """Weight MACs per token of a LatentMoE channel mixer at t = 1: router at hidden, the
    two projections, k experts at the latent, the shared experts at hidden."""
    h, lat = m.hidden, m.moe_latent_size
    mats = 3 if m.activation == "swiglu" else 2
    return (h * m.n_experts + 2 * h * lat + m.experts_per_token * mats * lat * m.expert_ffn_hidden
            + m.n_shared_experts * mats * h * (m.shared_ffn_hidden or 0))


@pytest.mark.parametrize("b", [1, 2])
def test_flop_identities_of_the_latent_moe_layer(b):
    """Forward GEMMs = 2 × weight MACs × tokens (balanced routing: every expert runs
    tokens·k/n_experts tokens); backward GEMMs = 2 × forward."""
    mg = graph.build_layers(TINY, b, 1, flash_attention=True, kernels="megatron")
    T = b * TINY.seq_len
    lay = mg.kinds()[graph.layer_kind_name("none", "moe")]
    assert _gemm_flops(lay.forward) == 2.0 * T * _moe_macs_per_token(TINY)
    assert _gemm_flops(lay.backward) == 2.0 * _gemm_flops(lay.forward)
    f = lay.forward
    assert tuple(f.dims[_op(f, "fc1_latent_proj")]) == (1, T, 64, 16)
    assert tuple(f.dims[_op(f, "fc2_latent_proj")]) == (1, T, 16, 64)
    assert tuple(f.dims[_op(f, "expert_fc1")]) == (8, T * 2 // 8, 16, 48)
    assert tuple(f.dims[_op(f, "expert_fc2")]) == (8, T * 2 // 8, 48, 16)
    assert tuple(f.dims[_op(f, "router")]) == (1, T, 64, 8)
    assert tuple(f.dims[_op(f, "shared_fc1")]) == (1, T, 64, 80)
    g = lay.backward
    for name, dims in (("fc1_latent_proj.dX", (1, T, 16, 64)),
                       ("fc1_latent_proj.dW", (1, 64, T, 16)),
                       ("fc2_latent_proj.dX", (1, T, 64, 16)),
                       ("fc2_latent_proj.dW", (1, 16, T, 64))):
        assert tuple(g.dims[_op(g, name)]) == dims


def test_flop_identities_of_the_full_model():
    """Nemotron 3 Super at b = 1: each LatentMoE layer's forward GEMMs are 2 × s × (router
    4096·512 + projections 2·4096·1024 + 22 experts 2·1024·2688 + shared 2·4096·5376)."""
    m = models.get(NAME)
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    lay = mg.kinds()[graph.layer_kind_name("none", "moe")]
    macs = H * E + 2 * H * L + K * 2 * L * FE + 2 * H * FS
    assert _gemm_flops(lay.forward) == 2.0 * 8192 * macs
    assert _gemm_flops(lay.backward) == 2.0 * _gemm_flops(lay.forward)
    assert mg.param_bytes == 2 * m.n_params


@pytest.mark.parametrize("m", [TINY, TINY_BIAS], ids=["relu2", "swiglu-bias"])
def test_parameter_bytes_are_the_models_count(m):
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron")
    assert mg.param_bytes == 2 * m.n_params
    # with biases: fc1_latent_proj's L and fc2_latent_proj's hidden bias, experts on L
    if m.bias:
        h, lat, fe = m.hidden, m.moe_latent_size, m.expert_ffn_hidden
        expert = 3 * lat * fe + 2 * fe + lat
        assert models.expert_params(m) == expert
        assert models.moe_params(m) == 8 * expert + 8 * h + 2 * h * lat + lat + h


def test_tensor_parallel_replicates_the_projections_and_slices_the_experts():
    """t = 2 (sequence parallel), ep = 2: each slice holds the router, both latent
    projections whole (TELinear "duplicated"), 4 of the 8 experts sliced by 2, the shared
    expert sliced by 2 and the norm."""
    mg = graph.build_layers(TINY, 1, 2, sequence_parallel=True, flash_attention=True,
                            kernels="megatron", expert_parallel=2)
    lay = mg.kinds()[graph.layer_kind_name("none", "moe")]
    h, lat = 64, 16
    want = h + h * 8 + 8 + 2 * h * lat + 4 * 2 * lat * 24 + 2 * h * 40
    assert lay.param_bytes == 2 * want
    assert lay.expert_param_bytes == 2 * 4 * 2 * lat * 24
    f = lay.forward
    Tn = 256 // 2
    assert tuple(f.dims[_op(f, "fc1_latent_proj")]) == (1, Tn, h, lat)
    assert tuple(f.dims[_op(f, "fc2_latent_proj")]) == (1, Tn, lat, h)


def _moe(m, **kw):
    mg = graph.build_layers(m, 1, 1, flash_attention=True, kernels="megatron",
                            expert_parallel=kw.get("ep", 1))
    return mg.kinds()[graph.layer_kind_name("none", "moe")]


def test_dispatch_and_stash_at_latent_width():
    """The all-to-alls move latent-wide tokens: L/h of a plain MoE's bytes; the stash keeps
    the experts' inputs and outputs at L and fc2_latent_proj's input (tokens × L) more."""
    lat, plain = _moe(TINY, ep=2), _moe(TINY.with_(moe_latent_size=0), ep=2)
    for g_lat, g_plain in ((lat.forward, plain.forward), (lat.backward, plain.backward)):
        for i, name in enumerate(g_plain.names):
            if name.startswith("alltoall_"):
                j = _op(g_lat, name)
                assert g_lat.comm_bytes[j] * 64 == g_plain.comm_bytes[i] * 16
                assert g_lat.comm_bytes[j] > 0
    T, k, n_e, B = 256, 2, 8, 2
    sent = n_e * (T * k // n_e)                      # token rows dispatched
    rows, local = 2 * (T * k // n_e), 4              # tokens per local expert (ep 2), experts
    diff = B * (sent * (64 - 16) + local * rows * (64 - 16)) - B * T * 16
    assert plain.stash("none") - lat.stash("none") == diff


def test_deepep_prices_latent_tokens():
    """DeepEP sends each token's latent (moe_latent_size wide), once per remote node."""
    table = _plans.layer_table(TINY, make_archs(base="h100-sxm"), microbatch=1,
                               tensor_parallel=(1,), sequence_parallel=(False,),
                               flash_attention=(True,), context_parallel=(1,),
                               expert_parallel=(2,))
    assert table.sizes("none")[0]["a2a_token_bytes"] == 256 * 16 * 2


def test_training_step_runs_the_super_row():
    """The Automodel row's plan (64 H100s, FSDP 64, EP 64, full recompute, b 2, s 4,096)
    prices and fits, faster than the same model with its experts at hidden width (4× the
    expert GEMMs and dispatch bytes, less the two projections)."""
    m = models.get(NAME).with_(seq_len=4096)
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=64, expert_parallel=64,
              microbatch=2, global_batch=512, recompute="full", flash_attention=True,
              zero_stage=3, moe_dispatcher="deepep")
    r = step.training_step(m, "h100-sxm", **kw)
    plain = step.training_step(m.with_(moe_latent_size=0), "h100-sxm", **kw)
    assert r.ok and plain.ok
    assert 0 < r.time_s < plain.time_s


def test_kernels_equal_their_mirror_on_a_latent_model():
    """The step kernels against their Python mirror (tests/naive_step.py) on the tiny
    LatentMoE model: the graph carries the latent operators, the kernels are unchanged."""
    from test_layer_kinds import test_kernels_equal_their_mirror_on_multi_kind_models as mirror
    mirror(TINY)
