"""Chip files (issue 16, item 1): a chip described in JSON, the presets shipped as such
files, ``phaze archs --show``, ``--arch NAME|FILE`` for evaluate and a fixed-system search."""
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from phaze import arch, cli, models, search
from phaze.arch import Chip, efficiency, load_chip, presets, resolve_chip, rules
from phaze.arch import _catalog, _fields
from phaze.arch._rows import build_rows

REPO = Path(__file__).resolve().parent.parent

# The presets' values as they were written in presets.py before they moved into chip files
# (the files must reproduce them bit for bit).
_TODAY_KNOBS = {
    "tpuv4": dict(num_tc=8, tc_width=128, tc_depth=128, num_vc=2, vc_width=128,
                  buffer_mib=128.0, hbm_gib=32.0, hbm_gb_per_s=1200.0, clock_ghz=1.05,
                  link_gb_per_s=50.0, net_gb_per_s=50.0, node_size=4096),
    "a100-80g": dict(num_tc=432, tc_width=16, tc_depth=16, num_vc=432, vc_width=16,
                     buffer_mib=40.0, hbm_gib=80.0, hbm_gb_per_s=2039.0, clock_ghz=1.41,
                     link_gb_per_s=300.0, net_gb_per_s=25.0, node_size=8),
    "h100-sxm": dict(num_tc=528, tc_width=16, tc_depth=32, num_vc=528, vc_width=32,
                     buffer_mib=50.0, hbm_gib=80.0, hbm_gb_per_s=3350.0, clock_ghz=1.83,
                     link_gb_per_s=450.0, net_gb_per_s=50.0, node_size=8),
    # Added in issue 25 (torchtitan's Grand Teton H100): h100-sxm with 96 GiB HBM2e at 2.4 TB/s.
    "h100-96g": dict(num_tc=528, tc_width=16, tc_depth=32, num_vc=528, vc_width=32,
                     buffer_mib=50.0, hbm_gib=96.0, hbm_gb_per_s=2400.0, clock_ghz=1.83,
                     link_gb_per_s=450.0, net_gb_per_s=50.0, node_size=8),
}
# GEMM efficiencies (issue 25, docs/fidelity-sources.md §1.4): the largest measured fraction
# of the model's peak, 271.2 TFLOP/s on the A100; 808.7 (bf16) and 1,402.6 (fp8) on the H100.
_A100_TILE = 271.2e12 / (432 * 256 * 2 * 1.41e9)
_H100_PEAK = 528 * 512 * 2 * 1.83e9
_A100_FRACTIONS = dict(
    tile_efficiency=_A100_TILE, fp8_tile_efficiency=_A100_TILE, hbm_efficiency=0.88,
    attention_hbm_efficiency=0.65, launch_s=1e-6,
    coll_latency_s=8.4e-6, link_step_s=4.457e-6, net_step_s=28e-6,
    link_efficiency=0.7257, net_efficiency=24.0 / 25.0,
    link_p2p_latency_s=16.5e-6, link_p2p_efficiency=195.1 / 300.0,
    net_p2p_latency_s=2.0e-5, net_p2p_efficiency=24.0 / 25.0,
    flash_fwd_efficiency=_A100_TILE, flash_bwd_efficiency=_A100_TILE)
# The fused attention kernel (docs/fidelity-sources.md §1.6): FlashAttention-2 on the A100 (73 %
# forward, 63 % backward of peak); cuDNN on the H100 SXM5 at 16K, head dim 128 (539 TFLOP/s
# causal forward, 516 backward; the FlashAttention-3 paper's Figures 5-6).
_GPU_TILE = dict(tile_m_mult=16, tile_n_mult=8, tile_k_mult=2, cores_per_tile=4, k_stages=3)
_TEMPLATE_TILE = dict(tile_m_mult=1, tile_n_mult=1, tile_k_mult=1, cores_per_tile=1, k_stages=1)
# NCCL's LL/LL128 protocols (issue 25; docs/fidelity-sources.md §4.4): NVIDIA/nccl
# src/graph/tuning.cc at v2.12.7 (the A100: LL's in-node steps of a multi-node ring 1.8 x
# 0.47 us; its in-node tier the fitted curve, so no LL cap in one node; AMD-host caps) and
# at v2.20.3 (the H100: Hopper cap 87.7 GB/s in one node, Intel-host caps between nodes).
_A100_NCCL = dict(ll_latency_s=3.6e-6, ll_link_step_s=0.47e-6, ll_span_step_s=0.846e-6,
                  ll_net_step_s=2.7e-6, ll_link_gb_per_s=0.0, ll_net2_gb_per_s=22.5,
                  ll_net_gb_per_s=19.0, ll128_latency_s=10e-6, ll128_link_step_s=1.9e-6,
                  ll128_net_step_s=4e-6, ll128_share=0.92)
_H100_NCCL = dict(ll_latency_s=6.6e-6, ll_link_step_s=0.6e-6, ll_span_step_s=1.0e-6,
                  ll_net_step_s=2.7e-6, ll_link_gb_per_s=87.7, ll_net2_gb_per_s=39.0,
                  ll_net_gb_per_s=20.4, ll128_latency_s=14e-6, ll128_link_step_s=1.9e-6,
                  ll128_net_step_s=4e-6, ll128_share=0.92)
_TODAY_EFFICIENCY = {
    "tpuv4": dict(_TEMPLATE_TILE, **_A100_FRACTIONS),
    "a100-80g": dict(_GPU_TILE, **dict(_A100_FRACTIONS, flash_fwd_efficiency=0.73,
                                       flash_bwd_efficiency=0.63, **_A100_NCCL)),
    "h100-sxm": dict(_GPU_TILE, **dict(
        _A100_FRACTIONS, tile_efficiency=808699906572796 / _H100_PEAK,
        fp8_tile_efficiency=1402.6e12 / (2 * _H100_PEAK),
        hbm_efficiency=0.90, link_step_s=3.4e-6, net_step_s=14e-6,
        link_efficiency=367.61 / 450.0,
        net_efficiency=47.0 / 50.0, net_p2p_efficiency=47.0 / 50.0,
        flash_fwd_efficiency=539e12 / _H100_PEAK, flash_bwd_efficiency=516e12 / _H100_PEAK,
        **_H100_NCCL)),
    "template": dict(_TEMPLATE_TILE, **_A100_FRACTIONS),
}
# h100-sxm's but the GEMM fractions of a 500 W H100 (FBGEMM PR #2546: bf16 8192³ in
# 1.879 ms, the fp8 row-wise kernel in 0.977 ms, through the tile rule)
_TODAY_EFFICIENCY["h100-96g"] = dict(_TODAY_EFFICIENCY["h100-sxm"],
                                     tile_efficiency=0.6197501120247677,
                                     fp8_tile_efficiency=0.5962554868762878,
                                     # FlashAttention-2 (SDPA) at 335 / 322 TFLOP/s of
                                     # 989.43, times the 500 W GEMM ratio
                                     flash_fwd_efficiency=335e12 / 989.43e12
                                     * (0.6197501120247677 / 0.8173393799806425),
                                     flash_bwd_efficiency=322e12 / 989.43e12
                                     * (0.6197501120247677 / 0.8173393799806425))

# The presets of the first study (more presets follow them in presets.names()).
_FIRST = ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")
# The files now hold only what was measured on each die; tpuv4 (nothing measured) takes the
# stated rules (phaze.arch.rules). Measured dies among the first four: GA100 (a100-80g) and
# GH100 (h100-sxm; h100-96g is the same die). With those alone, a chip measured nowhere gets
# the mean of the two dies' fractions and latencies, and each ratio field its tile_efficiency
# times the mean ratio to tile_efficiency (A100's fp8 / flash entries over its tile fraction).


def _mean(*xs):
    return sum(xs) / len(xs)


_A, _H = _TODAY_EFFICIENCY["a100-80g"], _TODAY_EFFICIENCY["h100-sxm"]
# (the A100 has no FP8 tensor cores: its file gives no fp8_tile_efficiency, so the FP8
# ratio is the H100's alone)
_RATIO = {f: (_H[f] / _H["tile_efficiency"] if f == "fp8_tile_efficiency"
              else _mean(_A[f] / _A["tile_efficiency"], _H[f] / _H["tile_efficiency"]))
          for f in ("fp8_tile_efficiency", "flash_fwd_efficiency", "flash_bwd_efficiency")}


def _rules_of_four(tile, tile_efficiency=None):
    """The rules' set from the first four presets' measurements for a chip measured nowhere
    (``tile``: its tile rule; ``tile_efficiency``: its own, else the rule's)."""
    te = _mean(_A["tile_efficiency"], _H["tile_efficiency"]) if tile_efficiency is None \
        else tile_efficiency
    return dict(tile, tile_efficiency=te,
                hbm_efficiency=_mean(0.88, 0.90), attention_hbm_efficiency=0.65, launch_s=1e-6,
                coll_latency_s=8.4e-6, link_step_s=_mean(4.457e-6, 3.4e-6),
                net_step_s=_mean(28e-6, 14e-6), link_efficiency=_mean(0.7257, 367.61 / 450.0),
                net_efficiency=_mean(24.0 / 25.0, 47.0 / 50.0), link_p2p_latency_s=16.5e-6,
                link_p2p_efficiency=195.1 / 300.0, net_p2p_latency_s=2.0e-5,
                net_p2p_efficiency=_mean(24.0 / 25.0, 47.0 / 50.0),
                # NCCL's protocols: latencies the two dies' mean; a cap or share the mean
                # where it is > 0 (the A100 prices no protocol choice in one node)
                ll_latency_s=_mean(3.6e-6, 6.6e-6), ll_link_step_s=_mean(0.47e-6, 0.6e-6),
                ll_span_step_s=_mean(0.846e-6, 1.0e-6), ll_net_step_s=2.7e-6,
                ll_link_gb_per_s=87.7, ll_net2_gb_per_s=_mean(22.5, 39.0),
                ll_net_gb_per_s=_mean(19.0, 20.4), ll128_latency_s=_mean(10e-6, 14e-6),
                ll128_link_step_s=1.9e-6, ll128_net_step_s=4e-6, ll128_share=0.92,
                **{f: min(1.0, te * r) for f, r in _RATIO.items()})


# e.g. tile_efficiency (0.8696 + 0.8173) / 2 = 0.8435, hbm 0.89, link_step_s 3.93 us
_RULE_EFFICIENCY = _rules_of_four(_TEMPLATE_TILE)
# a 64-wide array is an MMA unit (GPU tile rule): 256/64 x 128/64 output tiles of 4 cores
_GPU64_TILE = dict(tile_m_mult=4, tile_n_mult=2, tile_k_mult=2, cores_per_tile=4, k_stages=3)
_FOUR_MEASURED = rules.measured_table({n: _catalog.FILES[n] for n in _FIRST})


def _approx_set(got, want):
    assert set(got) == set(want)
    for f, v in want.items():
        assert got[f] == pytest.approx(v, rel=1e-12), f


TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)

# A hypothetical chip: every knob, no efficiency object.
MY_CHIP = dict(name="my-chip", source="made up for the tests", num_tc=64, tc_width=64,
               tc_depth=64, num_vc=64, vc_width=64, buffer_mib=64, hbm_gib=96,
               hbm_gb_per_s=3000, clock_ghz=1.5, link_gb_per_s=200, net_gb_per_s=50, node_size=8)


def _write(tmp_path, data, name="chip.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


# --- the presets are chip files with today's values ------------------------------------

@pytest.mark.parametrize("name", _FIRST)
def test_presets_equal_todays_values_exactly(name):
    assert presets.get(name).tobytes() == build_rows(**_TODAY_KNOBS[name]).tobytes()
    assert presets._PRESETS[name] == _TODAY_KNOBS[name]
    # the file's efficiency object: only what was measured on the die, each value as before
    measured = _catalog.FILES[name].get("efficiency", {})
    assert measured == {f: _TODAY_EFFICIENCY[name][f] for f in measured}
    if name == "tpuv4":
        assert measured == {}
    if name == "a100-80g":
        # every parameter measured but the FP8 fraction (no FP8 tensor cores on an A100)
        assert set(measured) == set(_TODAY_EFFICIENCY[name]) - {"fp8_tile_efficiency"}
    if name in ("h100-sxm", "h100-96g"):   # the fields copied from the A100 are dropped
        assert set(_TODAY_EFFICIENCY[name]) - set(measured) == {
            "tile_m_mult", "tile_n_mult", "tile_k_mult", "cores_per_tile", "k_stages",
            "attention_hbm_efficiency", "launch_s", "link_p2p_latency_s",
            "link_p2p_efficiency", "net_p2p_latency_s"}
    # the rest by the rules, from the other dies' measurements
    derived, _ = rules.derive(_catalog.FILES[name], _catalog.MEASURED)
    assert presets.EFFICIENCY[name] == derived
    assert efficiency.get(name) == efficiency.Efficiency(**derived)
    # "measured": in the file, or on the same die by another preset of it
    die = _catalog.FILES[name].get("silicon") or name
    on_die = {f for f in _catalog.MEASURED.get(die, {}) if f != "__kinds__"}
    assert {f for f, r in _catalog.EFFICIENCY_RULES[name].items() if r == "measured"} \
        == set(measured) | on_die
    # from the first four presets' measurements: the GPUs keep today's values exactly (the
    # A100 is the only other die that measured what the H100 files dropped; the GPU tile rule
    # gives 16 x 8 for 16-wide arrays); tpuv4 the means of the two GPU dies
    four, _ = rules.derive(_catalog.FILES[name], _FOUR_MEASURED)
    if name == "tpuv4":
        _approx_set(four, _RULE_EFFICIENCY)
        assert four["tile_efficiency"] == pytest.approx(0.8434670205655774, rel=1e-12)
        # (0.8696 + 0.8173) / 2 x the H100's FP8/bf16 ratio 0.8672
        assert four["fp8_tile_efficiency"] == pytest.approx(0.7314498452577636, rel=1e-12)
    elif name == "a100-80g":
        assert {f: v for f, v in four.items() if f != "fp8_tile_efficiency"} == \
            {f: v for f, v in _TODAY_EFFICIENCY[name].items() if f != "fp8_tile_efficiency"}
        assert four["fp8_tile_efficiency"] == pytest.approx(
            _A["tile_efficiency"] * _H["fp8_tile_efficiency"] / _H["tile_efficiency"], rel=1e-12)
    else:
        assert four == _TODAY_EFFICIENCY[name]


def test_template_set_is_the_rules_and_names_in_order():
    assert tuple(presets.names()[:4]) == _FIRST
    template = {"name": "template", "silicon": "template", "tc_width": 128}
    assert presets.EFFICIENCY["template"] == rules.derive(template, _catalog.MEASURED)[0]
    assert efficiency.TEMPLATE == efficiency.Efficiency(**presets.EFFICIENCY["template"])
    assert efficiency.names() == list(presets.names()) + ["template"]
    # no longer a copy of one GPU: the means over every measured die
    assert all(r != "measured" for r in _catalog.EFFICIENCY_RULES["template"].values())
    for f, v in presets.EFFICIENCY["template"].items():
        pool = [m[f] for m in _catalog.MEASURED.values() if f in m]
        if f.endswith(("_gb_per_s", "_share")):   # a protocol's cap or share: where it runs
            pool = [x for x in pool if x > 0]
        if f in rules.RATIO_FIELDS:
            ratios = [m[f] / m["tile_efficiency"] for m in _catalog.MEASURED.values()
                      if f in m and "tile_efficiency" in m]
            assert v == pytest.approx(min(1.0, presets.EFFICIENCY["template"]["tile_efficiency"]
                                          * _mean(*ratios)), rel=1e-12)
        elif f in _TEMPLATE_TILE:
            assert v == _TEMPLATE_TILE[f]
        else:
            assert v == pytest.approx(_mean(*pool), rel=1e-12), f
    # with the first four presets' measurements, by hand
    _approx_set(rules.derive(template, _FOUR_MEASURED)[0], _RULE_EFFICIENCY)


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_round_trips_through_its_file(name, tmp_path):
    chip = load_chip(str(presets.path(name)))
    assert chip.name == name
    assert chip.row.tobytes() == presets.get(name).tobytes()
    assert chip.resolved_efficiency == efficiency.get(name)
    # a file without an efficiency object (e.g. tpuv4) takes its preset's rule-derived set
    if "efficiency" in _catalog.FILES[name]:
        assert chip.efficiency == efficiency.get(name)
    else:
        assert chip.efficiency is None
    assert "\n" in chip.source and chip.source == presets.SOURCES[name]
    # written out and read back: the same chip
    again = load_chip(_write(tmp_path, chip.to_json(), f"{name}.json"))
    assert again.row.tobytes() == chip.row.tobytes()
    assert again.efficiency == chip.efficiency
    assert again.resolved_efficiency == chip.resolved_efficiency
    assert (again.name, again.source) == (chip.name, chip.source)
    # the preset record: the same fields, and the same (resolved) efficiency set
    preset = resolve_chip(name)
    rest = lambda d: {k: v for k, v in d.items() if k != "efficiency"}  # noqa: E731
    assert rest(preset.to_dict()) == rest(chip.to_dict())
    assert preset.resolved_efficiency == chip.resolved_efficiency


def test_chip_folder_holds_exactly_the_presets_and_is_package_data():
    folder = REPO / "phaze" / "arch" / "chips"
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(presets.names())
    assert sorted(os.listdir(folder)) == sorted(f"{n}.json" for n in presets.names())
    text = (REPO / "pyproject.toml").read_text()
    assert '"phaze.arch" = ["chips/*.json"]' in text


def test_citations_stay_with_the_presets():
    doc = presets.__doc__
    for needle in ("ISCA 2023", "A100 Tensor Core GPU Architecture", "H100 Tensor Core GPU",
                   "cutlass_tensorop_h16816gemm_256x128_32x3", "NVIDIA/nccl #568"):
        assert needle in doc
    for name in _FIRST:   # the first study's presets cite in presets.py; later ones by cite
        assert "presets.py" in presets.SOURCES[name]


# --- a user's chip ------------------------------------------------------------------------

def test_user_chip_without_efficiency(tmp_path):
    chip = load_chip(_write(tmp_path, MY_CHIP))
    assert isinstance(chip, Chip)
    assert chip.name == "my-chip" and chip.source == "made up for the tests"
    expect = arch.make_archs(**{k: v for k, v in MY_CHIP.items() if k not in ("name", "source")})
    assert chip.row.tobytes() == expect.tobytes()
    assert chip.row.dtype == arch.ARCH_DTYPE and chip.row.shape == (1,)
    assert chip.efficiency is None
    # the stated rules for its own fields: the GPU tile rule of 64-wide arrays, every
    # fraction and latency the template's (means over every measured die)
    derived, _ = rules.derive(_fields.check_fields(MY_CHIP, "x"), _catalog.MEASURED)
    assert chip.rule_efficiency == efficiency.Efficiency(**derived)
    assert chip.efficiency_set() is chip.resolved_efficiency is chip.rule_efficiency
    got = dataclasses.asdict(chip.rule_efficiency)
    assert {f: got[f] for f in _GPU64_TILE} == _GPU64_TILE
    T = dataclasses.asdict(efficiency.TEMPLATE)
    assert {f: v for f, v in got.items() if f not in _GPU64_TILE} == \
        {f: v for f, v in T.items() if f not in _GPU64_TILE}
    assert set(chip.efficiency_rules) == set(T)
    assert all(r != "measured" for r in chip.efficiency_rules.values())
    assert chip.efficiency_rules["tile_m_mult"].startswith("GPU tile rule")
    assert chip.efficiency_rules["tile_efficiency"].startswith("mean of ")
    assert chip.efficiency_rules["fp8_tile_efficiency"].startswith("tile_efficiency x mean ratio")
    # with the first four presets' measurements, by hand
    _approx_set(rules.derive(_fields.check_fields(MY_CHIP, "x"), _FOUR_MEASURED)[0],
                dict(_RULE_EFFICIENCY, **_GPU64_TILE))
    assert "efficiency" not in json.loads(chip.to_json())
    assert chip.path == str(tmp_path / "chip.json")


def test_name_defaults_to_the_file_name_and_integral_floats_are_counts(tmp_path):
    data = {k: v for k, v in MY_CHIP.items() if k != "name"}
    data["num_tc"] = 64.0
    chip = load_chip(_write(tmp_path, data, "fast-one.json"))
    assert chip.name == "fast-one" and chip.row["num_tc"][0] == 64


def test_partial_efficiency_takes_the_rest_from_the_default_set(tmp_path):
    chip = load_chip(_write(tmp_path, dict(MY_CHIP, efficiency={"hbm_efficiency": 0.5,
                                                              "cores_per_tile": 2})))
    # the rest by the rules (the GPU tile rule of 64-wide arrays, the template's fractions)
    want = dict(dataclasses.asdict(efficiency.TEMPLATE), **_GPU64_TILE)
    want.update(hbm_efficiency=0.5, cores_per_tile=2)
    assert chip.efficiency == efficiency.Efficiency(**want)
    # written out: what the file gave (the rules give the rest again when it is read back)
    assert json.loads(chip.to_json())["efficiency"] == {"hbm_efficiency": 0.5, "cores_per_tile": 2}
    assert load_chip(_write(tmp_path, chip.to_json(), "again.json")).efficiency == chip.efficiency
    assert chip.rule_efficiency is None and chip.resolved_efficiency == chip.efficiency
    assert [f for f, r in chip.efficiency_rules.items() if r == "measured"] == \
        ["cores_per_tile", "hbm_efficiency"]
    # a chip with a preset's knobs under its own name: the rest by the same rules, from every
    # measured die (its name is its die, so the A100's own measurements count in the means)
    knobs = dict(_TODAY_KNOBS["a100-80g"], name="my-a100", efficiency={"launch_s": 2e-6})
    chip = load_chip(_write(tmp_path, knobs, "a.json"))
    derived, _ = rules.derive(_fields.check_fields(knobs, "x"), _catalog.MEASURED)
    assert derived["launch_s"] == 2e-6
    assert chip.efficiency == efficiency.Efficiency(**derived)
    assert {f: derived[f] for f in _GPU_TILE} == _GPU_TILE
    _approx_set(rules.derive(_fields.check_fields(knobs, "x"), _FOUR_MEASURED)[0],
                dict(_RULE_EFFICIENCY, launch_s=2e-6, **_GPU_TILE))


def test_resolve_chip_accepts_names_files_rows_and_chips(tmp_path):
    path = _write(tmp_path, MY_CHIP, "mine.json")
    by_file = resolve_chip(str(path))
    assert resolve_chip(path).row.tobytes() == by_file.row.tobytes()  # os.PathLike
    assert resolve_chip(by_file) is by_file
    row = resolve_chip(presets.get("h100-sxm"))
    assert row.name == "h100-sxm" and row.efficiency == efficiency.get("h100-sxm")
    custom = resolve_chip(by_file.row)
    assert custom.name == "custom" and custom.efficiency is None
    with pytest.raises(KeyError, match="neither a preset .* nor a chip file"):
        resolve_chip("no-such-chip")
    with pytest.raises(FileNotFoundError):
        resolve_chip(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="one architecture, got 2 rows"):
        resolve_chip(arch.ArchSpace.default().configs[:2])
    with pytest.raises(ValueError, match="arch must be"):
        resolve_chip(3.5)


def test_toml_chip_file(tmp_path):
    text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in MY_CHIP.items())
    text += "\n[efficiency]\nhbm_efficiency = 0.7\n"
    path = _write(tmp_path, text, "mine.toml")
    if sys.version_info < (3, 11):
        with pytest.raises(ValueError, match="TOML chip files need Python 3.11"):
            load_chip(path)
        return
    chip = load_chip(path)
    assert chip.row.tobytes() == load_chip(_write(tmp_path, MY_CHIP)).row.tobytes()
    assert chip.efficiency.hbm_efficiency == 0.7
    with pytest.raises(ValueError, match="is not valid TOML"):
        load_chip(_write(tmp_path, "num_tc = = 3", "bad.toml"))


# --- bad files: one sentence each, naming the field ---------------------------------------

def _knobs(**changes):
    data = dict(MY_CHIP)
    for k, v in changes.items():
        if v is _DROP:
            data.pop(k)
        else:
            data[k] = v
    return data


_DROP = object()

BAD = [
    (_knobs(num_tcs=3), "unknown field 'num_tcs' (did you mean 'num_tc'?)"),
    (_knobs(hbm_gib=_DROP), "missing field hbm_gib"),
    (_knobs(hbm_gib=_DROP, clock_ghz=_DROP), "missing fields hbm_gib, clock_ghz"),
    (_knobs(num_tc="8"), "num_tc must be an integer from 1 to 2,147,483,647, got '8'"),
    (_knobs(num_tc=True), "num_tc must be an integer"),
    (_knobs(num_tc=8.5), "num_tc must be an integer"),
    (_knobs(num_tc=0), "num_tc must be an integer from 1"),
    (_knobs(node_size=-8), "node_size must be an integer from 1"),
    (_knobs(num_tc=2 ** 31), "num_tc must be an integer from 1 to 2,147,483,647, got 2147483648"),
    (_knobs(node_size=10 ** 40),
     "node_size must be an integer from 1 to 2,147,483,647, got an integer"),
    (_knobs(clock_ghz="fast"), "clock_ghz must be a finite number > 0 (GHz), got 'fast'"),
    (_knobs(hbm_gb_per_s=-1), "hbm_gb_per_s must be a finite number > 0 (GB/s of the whole chip)"),
    (_knobs(buffer_mib=0), "buffer_mib must be a finite number > 0 (MiB), got 0"),
    (_knobs(link_gb_per_s=None), "link_gb_per_s must be a finite number > 0"),
    (_knobs(hbm_gib=10 ** 400), "hbm_gib must be a finite number > 0 (GiB), got an integer"),
    (_knobs(area_mm2=100.0), "area_mm2 is not a field: the area model computes it"),
    (_knobs(name=3), "name must be a non-empty line of printable text, got 3"),
    (_knobs(name=""), "name must be a non-empty line"),
    (_knobs(name="two\nlines"), "name must be a non-empty line"),
    (_knobs(source=5), "source must be text or a list of lines of text, got 5"),
    (_knobs(source=["a", 1]), "source must be text or a list of lines"),
    (_knobs(name="a100-80g"), "name 'a100-80g' is a preset's, but num_tc is 64 where the preset "
                              "has 432; give the changed chip its own name"),
    (_knobs(efficiency=[0.5]), "efficiency must be an object of efficiency parameters"),
    (_knobs(efficiency={"hbm_eff": 0.5}),
     "unknown efficiency field 'hbm_eff' (did you mean 'hbm_efficiency'?)"),
    (_knobs(efficiency={"hbm_efficiency": 1.5}),
     "efficiency.hbm_efficiency must be a fraction in (0, 1], got 1.5"),
    (_knobs(efficiency={"hbm_efficiency": "high"}), "efficiency.hbm_efficiency must be a fraction"),
    (_knobs(efficiency={"launch_s": -1e-6}),
     "efficiency.launch_s must be a finite time >= 0 (seconds), got -1e-06"),
    (_knobs(efficiency={"k_stages": 0}), "efficiency.k_stages must be an integer from 1"),
    ([MY_CHIP], "must hold one object of the chip's fields"),
    ("", "is empty"),
    ("{", "is not valid JSON: Expecting property name enclosed in double quotes "
          "(line 1, column 2)"),
    ('{"num_tc": 8, "num_tc": 16}', "field 'num_tc' is given twice"),
    (json.dumps(MY_CHIP).replace('"clock_ghz": 1.5', '"clock_ghz": NaN'),
     "clock_ghz must be a finite number > 0 (GHz), got nan"),
    (json.dumps(MY_CHIP).replace('"clock_ghz": 1.5', '"clock_ghz": Infinity'),
     "clock_ghz must be a finite number > 0 (GHz), got inf"),
    (json.dumps(MY_CHIP).replace('"clock_ghz": 1.5', '"clock_ghz": 1e400'),
     "clock_ghz must be a finite number > 0 (GHz), got inf"),
    (json.dumps(MY_CHIP).replace('"num_tc": 64', '"num_tc": ' + "9" * 5000), "cannot be read"),
    ("[" * 100000, "nested too deeply"),
]


@pytest.mark.parametrize("data,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_chip_file_is_one_sentence(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(ValueError) as info:
        load_chip(path)
    text = str(info.value)
    assert message in text
    assert text.startswith(f"chip file {str(path)!r}")
    assert "\n" not in text


def test_not_utf8_is_one_sentence(tmp_path):
    path = tmp_path / "chip.json"
    path.write_bytes(b"\xff\xfe{\x00")
    with pytest.raises(ValueError, match="is not UTF-8 text$"):
        load_chip(path)


@pytest.mark.parametrize("data,message", BAD[::4], ids=[m[:40] for _, m in BAD[::4]])
@pytest.mark.parametrize("command", ["show", "evaluate", "search"])
def test_bad_chip_file_on_the_command_line_exits_2(tmp_path, capsys, data, message, command):
    path = str(_write(tmp_path, data))
    argv = {"show": ["archs", "--show", path],
            "evaluate": ["evaluate", "--model", "gpt2-xl", "--arch", path, "--tp", "1",
                         "--pp", "1", "--dp", "1"],
            "search": ["search", "--model", "gpt2-xl", "--arch", path, "--serial"]}[command]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and message in lines[0], err


def test_missing_file_and_unknown_name_on_the_command_line(tmp_path, capsys):
    assert cli.main(["archs", "--show", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No such file" in err and "nope.json" in err
    assert cli.main(["evaluate", "--model", "gpt2-xl", "--arch", "nope", "--tp", "1",
                     "--pp", "1", "--dp", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown architecture 'nope'" in err


# --- phaze archs --show -------------------------------------------------------------------

@pytest.mark.parametrize("name", presets.names())
def test_archs_show_prints_a_chip_file_that_loads_back(name, tmp_path, capsys):
    assert cli.main(["archs", "--show", name]) == 0
    out, err = capsys.readouterr()
    # a preset prints its shipped file; which parameters the rules give goes to stderr
    assert out == presets.path(name).read_text(encoding="utf-8")
    assert json.loads(out)["name"] == name
    rules_of = presets.chip(name).efficiency_rules
    ruled = [f for f, r in rules_of.items() if r != "measured"]
    assert err.splitlines()[0] == (f"# {name}: {len(rules_of) - len(ruled)} efficiency "
                                   f"parameters measured (in the file), {len(ruled)} from "
                                   f"phaze.arch.rules:")
    assert len(err.splitlines()) == 1 + len(ruled)
    if name == "tpuv4":   # nothing measured on the die
        assert len(ruled) == len(efficiency.EFFICIENCY_DTYPE.names)
    back = load_chip(_write(tmp_path, out, "shown.json"))
    assert back.row.tobytes() == presets.get(name).tobytes()
    assert back.resolved_efficiency == efficiency.get(name)
    # shown again from the file: the same fields and the same resolved set
    assert cli.main(["archs", "--show", str(tmp_path / "shown.json")]) == 0
    again = capsys.readouterr().out
    rest = lambda d: {k: v for k, v in d.items() if k != "efficiency"}  # noqa: E731
    assert rest(json.loads(again)) == rest(json.loads(out))
    assert load_chip(_write(tmp_path, again, "again.json")).resolved_efficiency \
        == efficiency.get(name)


def test_archs_show_of_a_user_file_fills_in_a_partial_efficiency(tmp_path, capsys):
    path = _write(tmp_path, dict(MY_CHIP, efficiency={"tile_efficiency": 0.75}))
    assert cli.main(["archs", "--show", str(path)]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    # the file as given on stdout; the rules fill the rest, said on stderr; the ratio fields
    # scale with the chip's own tile_efficiency
    assert shown["efficiency"] == {"tile_efficiency": 0.75}
    derived, _ = rules.derive(_fields.check_fields(shown, "x"), _catalog.MEASURED)
    assert "1 efficiency parameters measured" in captured.err
    assert f"fp8_tile_efficiency = {derived['fp8_tile_efficiency']:.6g}" in captured.err
    assert derived["tile_efficiency"] == 0.75
    assert {f: derived[f] for f in _GPU64_TILE} == _GPU64_TILE
    partial = dict(MY_CHIP, efficiency={"tile_efficiency": 0.75})
    four, _ = rules.derive(_fields.check_fields(partial, "x"), _FOUR_MEASURED)
    _approx_set(four, dict(_rules_of_four(_GPU64_TILE, tile_efficiency=0.75)))
    assert four["fp8_tile_efficiency"] == pytest.approx(
        0.75 * 0.7087921026349561 / 0.8173393799806425, rel=1e-12)
    assert {k: shown[k] for k in MY_CHIP} == MY_CHIP


def test_archs_without_show_still_lists_the_presets(capsys):
    assert cli.main(["archs"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in presets.names()) and "default space" in out


# --- evaluate --arch FILE -----------------------------------------------------------------

def test_evaluate_with_a_chip_file_equals_the_preset(tmp_path, capsys):
    path = _write(tmp_path, presets.chip("a100-80g").to_json(), "copy.json")
    argv = ["evaluate", "--model", "gpt2-xl", "--tp", "1", "--pp", "8", "--dp", "8",
            "--global-batch", "512", "--study", "--json"]
    assert cli.main(argv + ["--arch", "a100-80g"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert cli.main(argv + ["--arch", str(path)]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert by_file == by_name and by_name["feasible"]
    mine = _write(tmp_path, MY_CHIP, "mine.json")
    assert cli.main(argv[:-1] + ["--arch", str(mine)]) == 0
    assert capsys.readouterr().out.startswith("gpt2-xl on my-chip: t=1 p=8 d=8")
    r = search.evaluate_point("gpt2-xl", str(mine), 1, 8, 8, 1, False, global_batch=512, study=True)
    assert r["hbm_gib"] == 96.0 and r["arch"]["num_tc"] == 64


# --- search on one fixed system -----------------------------------------------------------

def test_search_arch_best_equals_evaluate_point_of_its_plan(capsys):
    kw = dict(study=True, devices=16, global_batch=64, microbatch=(1, 2, 4), executor="serial",
              progress=False)
    result = search.search(TINY, arch="a100-80g", **kw)
    assert len(result) == 3 * 1 * 2  # microbatches x the chip's own HBM x recompute
    assert set(result.table["hbm_gib"]) == {80.0}
    assert result.baselines == {}
    assert result.metadata["inputs"]["arch"] == "a100-80g"
    assert result.metadata["chip"] == presets.chip("a100-80g").to_dict()
    best = result.best
    assert best["feasible"]
    sizes = [int(x) for x in best["stage_layers"].split(",")]
    r = search.evaluate_point(TINY, "a100-80g", best["tensor_parallel"], len(sizes),
                              best["data_parallel"], best["microbatch"], best["recompute"],
                              devices=16, global_batch=64, hbm_gib=best["hbm_gib"], stages=sizes, study=True)
    assert r["feasible"]
    assert r["samples_per_s"] == pytest.approx(best["samples_per_s"], rel=1e-9)
    # The same search as a one-row space (what arch= reuses), with the chip's own HBM.
    space = search.search(TINY, space=presets.get("a100-80g"), hbm_gib=None, baselines=False, **kw)
    assert space.best["samples_per_s"] == best["samples_per_s"]
    # arch as a file, a row and a Chip: the same answer; an explicit HBM grid is kept
    for spec in (str(presets.path("a100-80g")), presets.get("a100-80g"), presets.chip("a100-80g")):
        assert search.search(TINY, arch=spec, **kw).best["samples_per_s"] == best["samples_per_s"]
    grid = search.search(TINY, arch="a100-80g", hbm_gib=(40, 80), **kw)
    assert set(grid.table["hbm_gib"]) == {40.0, 80.0}


def test_search_arch_and_space_together_is_refused():
    with pytest.raises(ValueError, match="give space or arch, not both"):
        search.search(TINY, arch="a100-80g", space=presets.get("tpuv4"), executor="serial")


def test_cli_search_arch_on_a_small_model(capsys, tmp_path):
    argv = ["search", "--model", "opt-350m", "--devices", "16", "--global-batch", "64",
            "--arch", "a100-80g", "--serial", "--study", "--out", str(tmp_path / "r.json")]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # the summary names the sequence searched (issue 29 item 8)
    assert lines[0].startswith("phaze search: opt-350m on 16 x a100-80g (fixed system), "
                               "global batch 64, sequence 2,048 tokens: 8 of 8 points "
                               "evaluated")
    assert lines[1].startswith("a100-80g: 432 TC 16x16, 432 VC x16, 40 MiB buffer")
    assert "best plan:" in out and "layers per stage" in out
    assert "vs tpuv4" not in out and "Pareto" not in out and "baselines" not in out
    loaded = search.load_result(tmp_path / "r.json")
    best = loaded.best
    row = next(ln for ln in lines if ln.startswith("opt-350m "))
    assert f"{best['samples_per_s']:,.1f}" in row
    sizes = [int(x) for x in best["stage_layers"].split(",")]
    r = search.evaluate_point("opt-350m", "a100-80g", best["tensor_parallel"], len(sizes),
                              best["data_parallel"], best["microbatch"], best["recompute"],
                              devices=16, global_batch=64, hbm_gib=best["hbm_gib"], stages=sizes, study=True)
    assert r["samples_per_s"] == pytest.approx(best["samples_per_s"], rel=1e-9)
    # the stored chip is itself a chip file
    chip = arch.chip_from_dict(loaded.metadata["chip"])
    assert chip.row.tobytes() == presets.get("a100-80g").tobytes()


def test_cli_search_arch_with_space_every_is_refused(capsys):
    assert cli.main(["search", "--model", "opt-350m", "--arch", "a100-80g",
                     "--space-every", "40"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--space-every" in err and "--arch" in err


def test_search_signature_keeps_the_study_hbm_default():
    import inspect

    param = inspect.signature(search.search).parameters["hbm_gib"]
    assert param.default == (32, 64, 80)
    assert "arch" in inspect.signature(search.search).parameters
    np.testing.assert_equal(search.search.__kwdefaults__["arch"], None)
