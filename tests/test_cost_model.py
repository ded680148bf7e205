"""phaze.cost's one cost-model interface: the study is the calibrated operator loop with the
identity parameters and no tile rule, and both models give the numbers of the two
separate kernels they replaced, bit for bit.

``tests/data/cost_calibrated_outputs.npz`` holds :func:`reference_outputs` computed by the
two-kernel code (commit 2c3fa5e, before the merge; ``python3 tests/test_cost_model.py OUT``
writes them with whatever ``phaze`` is on the path). The study's own saved outputs are
checked by ``test_cost_calibrated.test_default_model_unchanged``.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import cost
from phaze.arch import ArchSpace, dtype_rates, efficiency, presets
from phaze.cost import _latency
from phaze.graph import build_layers

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "cost_calibrated_outputs.npz"

#: (model, microbatch, tensor_parallel, kernels, dtype) of the saved graphs: a dense model in
#: the study's fusions and in Megatron's kernels, a mixture of experts, an FP8 graph.
CASES = (("gpt3-175b", 1, 8, "study", "bf16"), ("gpt3-175b", 2, 1, "megatron", "bf16"),
         ("mixtral-8x7b", 1, 1, "megatron", "bf16"), ("llama3-8b", 1, 2, "megatron", "fp8"))


#: The presets the saved outputs were recorded with (h100-96g, issue 25, came later; it is
#: h100-sxm's compute and efficiency set with other HBM, tests/test_h100_96g.py).
RECORDED_PRESETS = ("tpuv4", "a100-80g", "h100-sxm")


def _rows():
    return np.ascontiguousarray(np.concatenate(
        [ArchSpace.default().configs[::367]] + [presets.get(n) for n in RECORDED_PRESETS]))


#: The GEMM efficiencies the saved outputs were computed with (before issue 25 set them from
#: shape-resolved measurements; the kernels then priced FP8 GEMMs at ``tile_efficiency``):
#: set name → tile_efficiency. The check is of the arithmetic, so it runs with those.
_SAVED_TILE_EFFICIENCY = {"a100-80g": 0.89086078125, "tpuv4": 0.89086078125,
                          "template": 0.89086078125, "h100-sxm": 0.8360561899038461}


#: What issue 26 changed in the sets the outputs were saved with: the template (and tpuv4,
#: which had the template's) was a copy of a100-80g's fractions and latencies with the
#: systolic tile rule and flash = tile; h100-sxm's in-node point-to-point efficiency was the
#: A100's. The arithmetic check runs with the sets as they were.
_A100 = {"tile_efficiency": 0.8695946611505122, "hbm_efficiency": 0.88,
         "attention_hbm_efficiency": 0.65, "launch_s": 1e-06, "coll_latency_s": 8.4e-06,
         "link_step_s": 4.457e-06, "net_step_s": 2.8e-05, "link_efficiency": 0.7257,
         "net_efficiency": 0.96, "link_p2p_latency_s": 1.65e-05,
         "link_p2p_efficiency": 0.6503333333333333, "net_p2p_latency_s": 2e-05,
         "net_p2p_efficiency": 0.96}
_OLD_TEMPLATE = dict(_A100, tile_m_mult=1, tile_n_mult=1, tile_k_mult=1, cores_per_tile=1,
                     k_stages=1, fp8_tile_efficiency=_A100["tile_efficiency"],
                     flash_fwd_efficiency=_A100["tile_efficiency"],
                     flash_bwd_efficiency=_A100["tile_efficiency"])
_OLD_CHANGES = {"h100-sxm": {"link_p2p_efficiency": 0.6503333333333333}}


def _old_sets(archs):
    """Each row's efficiency set as it was when the outputs were saved."""
    from phaze.arch import _catalog

    eff = efficiency.for_rows(archs)
    preset = np.zeros(archs.shape[0], dtype=bool)
    for name, same in _catalog.match(archs):
        if name in RECORDED_PRESETS and name != "tpuv4":
            preset |= same
            for f, v in _OLD_CHANGES.get(name, {}).items():
                eff[f][same] = v
    for f, v in _OLD_TEMPLATE.items():
        eff[f][~preset] = v
    return eff


def _as_saved(eff):
    """``eff`` (EFFICIENCY_DTYPE rows) with each set's tile efficiencies as saved."""
    eff = eff.copy()
    for name, old in _SAVED_TILE_EFFICIENCY.items():
        now = (_A100["tile_efficiency"] if name in ("tpuv4", "template")
               else efficiency.get(name).tile_efficiency)
        same = eff["tile_efficiency"] == now
        eff["tile_efficiency"][same] = old
    eff["fp8_tile_efficiency"] = eff["tile_efficiency"]
    return eff


def _is_loss(name: str, kernels: str) -> bool:
    """Whether ``name`` is one of a Megatron graph's loss kernels."""
    return kernels == "megatron" and name.startswith("cross_entropy")


def _graphs():
    """(key, kernels, dtype, OpGraph) of every layer pass of :data:`CASES`."""
    for model, mb, t, kernels, dtype in CASES:
        for layer in build_layers(model, mb, t, kernels=kernels, dtype=dtype).layers:
            for d, g in (("fwd", layer.forward), ("bwd", layer.backward)):
                yield (f"{model}_mb{mb}_t{t}_{kernels}_{dtype}_{layer.kind}_{d}", kernels, dtype,
                       g)


def _saved_keep(names, kernels):
    """The saved file's operators to compare (None: all of them): today's ``names``
    without the quantisation operators (never saved), each run of loss kernels read as
    the single loss operator the file was saved with, which is left out."""
    if kernels != "megatron":
        return None
    saved, prev = [], False
    for n in names:
        if n.endswith(".quant"):   # not in the file (saved before them)
            continue
        loss = _is_loss(n, kernels)
        if not (loss and prev):
            saved.append(not loss)
        prev = loss
    return np.array(saved)


def reference_outputs() -> dict:
    """op_latencies of both models and p2p_seconds on :data:`CASES` × every 367th row of the
    default space and the presets; calibrated with each row's own set (``for_rows``) and with
    the a100-80g set for every row, both with the GEMM efficiencies they were saved with
    (:data:`_SAVED_TILE_EFFICIENCY`). FP8 graphs at each row's rate (2 where it has none)."""
    archs = _rows()
    eff = _as_saved(_old_sets(archs))
    a100 = _as_saved(efficiency.get("a100-80g").row())
    rates = dtype_rates.for_rows(archs)
    rates = np.where(rates == 0, 2.0, rates)
    out = {}
    for key, kernels, dtype, g in _graphs():
        fp8_rate = rates if dtype == "fp8" else None
        # the quantisation operators (issue 26) and the trainers' loss kernels
        # (fidelity-sources §27) came after the save: the others' prices are what is
        # checked (each operator is priced on its own); the saved file's one fused loss
        # operator per pass is left out of it likewise (_saved_keep)
        keep = np.array([not n.endswith(".quant") and not _is_loss(n, kernels)
                         for n in g.names])
        out[key + "_study"] = np.stack(cost.op_latencies(g, archs, fp8_rate=fp8_rate))[:, keep]
        out[key + "_calibrated"] = np.stack(cost.op_latencies(
            g, archs, model="calibrated", efficiency=eff, fp8_rate=fp8_rate))[:, keep]
        out[key + "_a100"] = np.stack(cost.op_latencies(
            g, archs, model="calibrated", efficiency=a100, fp8_rate=fp8_rate))[:, keep]
    nbytes = np.array([0.0, 1.0, 4096.0, 12345.0, 1e9])
    for inter in (False, True):
        out[f"p2p_inter{int(inter)}_study"] = cost.p2p_seconds(nbytes, archs, inter_node=inter)
        out[f"p2p_inter{int(inter)}_calibrated"] = cost.p2p_seconds(
            nbytes, archs, inter_node=inter, model="calibrated", efficiency=eff)
    return out


def test_both_models_reproduce_the_two_kernels_bit_for_bit():
    ref = np.load(DATA)
    now = reference_outputs()
    assert sorted(now) == sorted(ref.files)
    saved_keep = {key: _saved_keep(g.names, kernels) for key, kernels, _, g in _graphs()}
    for key, value in now.items():
        keep = saved_keep.get(key.rsplit("_", 1)[0])
        saved = ref[key] if keep is None else ref[key][:, keep]
        np.testing.assert_array_equal(value, saved, err_msg=key)
        assert value.dtype == saved.dtype and value.shape == saved.shape, key


def test_the_study_is_the_identity_parameters_without_the_tile_rule():
    study, calibrated = _latency.COST_MODELS["study"], _latency.COST_MODELS["calibrated"]
    assert _latency.MODELS == ("study", "calibrated") == cost.MODELS
    assert not study.tile_rule and calibrated.tile_rule
    assert study.efficiency(None) is _latency.IDENTITY
    assert calibrated.efficiency(None) is None and calibrated.efficiency("a100-80g") == "a100-80g"
    ident = _latency.IDENTITY
    for f in ("tile_efficiency", "hbm_efficiency", "attention_hbm_efficiency", "link_efficiency",
              "net_efficiency", "link_p2p_efficiency", "net_p2p_efficiency"):
        assert getattr(ident, f) == 1.0, f
    for f in ("launch_s", "coll_latency_s", "link_step_s", "net_step_s", "link_p2p_latency_s",
              "net_p2p_latency_s"):
        assert getattr(ident, f) == 0.0, f


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(CASES), start=st.integers(0, 366))
def test_calibrated_at_identity_equals_study_except_where_the_tile_rule_binds(case, start):
    """The calibrated model with the identity set differs from the study only on GEMMs
    (kinds 0 and 2), and there only upwards (the tile rule's cycles are the larger)."""
    model, mb, t, kernels, dtype = case
    if dtype == "fp8":
        dtype = "bf16"
    archs = np.ascontiguousarray(ArchSpace.default().configs[start::997])
    for layer in build_layers(model, mb, t, kernels=kernels, dtype=dtype).layers:
        for g in (layer.forward, layer.backward):
            study = cost.op_latencies(g, archs)
            ident = cost.op_latencies(g, archs, model="calibrated", efficiency=_latency.IDENTITY)
            gemm = (g.kind == 0) | (g.kind == 2)
            for s, i in zip(study, ident):
                np.testing.assert_array_equal(s[~gemm], i[~gemm])
                assert np.all(i[gemm] >= s[gemm])


def test_study_refuses_an_efficiency_through_the_table():
    g = build_layers("gpt3-175b", 1, 8).layers[0].forward
    with pytest.raises(ValueError, match="efficiency applies only to model='calibrated'"):
        cost.op_latencies(g, presets.get("a100-80g"), model="study", efficiency=_latency.IDENTITY)
    with pytest.raises(ValueError, match="efficiency applies only"):
        cost.p2p_seconds(1.0, presets.get("a100-80g"), inter_node=True, efficiency="a100-80g")


if __name__ == "__main__":
    np.savez_compressed(sys.argv[1], **reference_outputs())
