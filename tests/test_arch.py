"""phaze.arch: rows, area model, presets and the architecture space."""
import csv
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze import arch
from phaze.arch import ARCH_DTYPE, ArchSpace, area_mm2, make_archs, presets, validate
from phaze.arch import _area


def test_dtype_fields_in_canonical_order():
    assert ARCH_DTYPE.names == (
        "num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib", "hbm_gib",
        "hbm_gb_per_s", "clock_ghz", "link_gb_per_s", "net_gb_per_s", "node_size", "area_mm2")
    ints = {"num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "node_size"}
    for name in ARCH_DTYPE.names:
        assert ARCH_DTYPE[name] == (np.int64 if name in ints else np.float64)


# --- area model ------------------------------------------------------------------

def test_area_tables_equal_golden_json(golden):
    comp = json.loads((golden / "area_components.json").read_text())
    for w, row in comp["tensor_core"].items():
        for d, mm2 in row.items():
            assert _area.tensor_core_mm2(int(w), int(d)) == pytest.approx(mm2, rel=1e-12, abs=0)
    for w, mm2 in comp["vector_core"].items():
        assert _area.vector_core_mm2(int(w)) == pytest.approx(mm2, rel=1e-12, abs=0)
    for mib, mm2 in comp["global_buffer_mib"].items():
        assert _area.buffer_mm2(float(mib)) == pytest.approx(mm2, rel=1e-12, abs=0)


def _one(**knobs):
    return make_archs(base="tpuv4", **knobs)


_KNOB_VALUES = dict(
    num_tc=st.integers(1, 5000), tc_width=st.integers(1, 600), tc_depth=st.integers(1, 600),
    num_vc=st.integers(1, 5000), vc_width=st.integers(1, 600),
    buffer_mib=st.floats(0.01, 1000.0, allow_nan=False))


@given(knobs=st.fixed_dictionaries(_KNOB_VALUES), which=st.sampled_from(sorted(_KNOB_VALUES)),
       factor=st.floats(1.001, 4.0))
def test_area_strictly_increasing_in_every_knob(knobs, which, factor):
    lo = _one(**knobs)
    bigger = dict(knobs)
    bigger[which] = (int(np.ceil(knobs[which] * factor)) if which != "buffer_mib"
                     else knobs[which] * factor)
    if bigger[which] == knobs[which]:
        bigger[which] += 1
    hi = _one(**bigger)
    assert area_mm2(hi)[0] > area_mm2(lo)[0] > 0


def test_area_off_grid_rules():
    # TC: piecewise-linear in w*d (midpoint of 64x64 and 64x128 is the mean), VC linear,
    # buffer log-log (geometric midpoint of 32 and 64 MiB has the geometric mean area).
    a, b = _area.tensor_core_mm2(64, 64), _area.tensor_core_mm2(64, 128)
    assert _area.tensor_core_mm2(64, 96) == pytest.approx((a + b) / 2, rel=1e-12)
    assert _area.tensor_core_mm2(96, 64) == _area.tensor_core_mm2(64, 96)
    a, b = _area.vector_core_mm2(64), _area.vector_core_mm2(128)
    assert _area.vector_core_mm2(96) == pytest.approx((a + b) / 2, rel=1e-12)
    a, b = _area.buffer_mm2(32), _area.buffer_mm2(64)
    assert _area.buffer_mm2(32 * 2 ** 0.5) == pytest.approx((a * b) ** 0.5, rel=1e-12)
    # beyond the grid: linear extrapolation from the last two points
    a, b = _area.buffer_mm2(64), _area.buffer_mm2(128)
    assert _area.buffer_mm2(256) == pytest.approx(b * b / a, rel=1e-12)
    assert _area.tensor_core_mm2(512, 256) > _area.tensor_core_mm2(256, 256)
    assert 0 < _area.tensor_core_mm2(1, 1) < _area.tensor_core_mm2(2, 2)


def test_area_mm2_matches_field_and_ignores_stale_area():
    rows = ArchSpace.default().configs[:100].copy()
    np.testing.assert_allclose(area_mm2(rows), rows["area_mm2"], rtol=1e-12)
    rows["area_mm2"] = 1.0
    assert not np.allclose(area_mm2(rows), 1.0)


# --- presets ---------------------------------------------------------------------

def test_preset_names_and_unknown():
    # the first study's four first, then the chip files of issue 26 in name order
    names = presets.names()
    assert names[:4] == ["tpuv4", "a100-80g", "h100-sxm", "h100-96g"]
    assert names[4:] == sorted(names[4:]) and {"b200", "gb200", "mi300x", "tpu-v5p"} <= set(names)
    with pytest.raises(KeyError, match="tpuv4"):
        presets.get("tpu-v9")


@pytest.mark.parametrize("name,peak", [("tpuv4", 275e12), ("a100-80g", 312e12), ("h100-sxm", 989e12),
                                       ("h100-96g", 989e12)])
def test_preset_peak_within_half_percent(name, peak):
    row = presets.get(name)
    assert row.dtype == ARCH_DTYPE and row.shape == (1,)
    assert arch.peak_flops(row)[0] == pytest.approx(peak, rel=5e-3)


def test_preset_key_numbers():
    tpu = presets.get("tpuv4")[0]
    assert (tpu["num_tc"], tpu["tc_width"], tpu["tc_depth"], tpu["num_vc"], tpu["vc_width"]) == (8, 128, 128, 2, 128)
    assert (tpu["buffer_mib"], tpu["hbm_gib"], tpu["hbm_gb_per_s"]) == (128, 32, 1200)
    assert (tpu["link_gb_per_s"], tpu["net_gb_per_s"], tpu["node_size"]) == (50, 50, 4096)
    a100 = presets.get("a100-80g")[0]
    assert (a100["num_tc"], a100["buffer_mib"], a100["hbm_gb_per_s"], a100["link_gb_per_s"],
            a100["node_size"], a100["net_gb_per_s"]) == (432, 40, 2039, 300, 8, 25)
    h100 = presets.get("h100-sxm")[0]
    assert (h100["num_tc"], h100["tc_width"], h100["tc_depth"], h100["buffer_mib"],
            h100["hbm_gb_per_s"], h100["link_gb_per_s"], h100["net_gb_per_s"]) == (528, 16, 32, 50, 3350, 450, 50)
    # the torchtitan benchmarks' H100: h100-sxm's compute and fabric, 96 GiB HBM2e at 2.4 TB/s
    h96 = presets.get("h100-96g")[0]
    assert (h96["hbm_gib"], h96["hbm_gb_per_s"]) == (96, 2400)
    assert all(h96[k] == h100[k] for k in h96.dtype.names if k not in ("hbm_gib", "hbm_gb_per_s"))
    for name in presets.names():
        row = presets.get(name)
        assert row["area_mm2"][0] == pytest.approx(area_mm2(row)[0])


def test_presets_are_fresh_copies():
    presets.get("tpuv4")["num_tc"] = 1
    assert presets.get("tpuv4")["num_tc"][0] == 8


# --- the default space -------------------------------------------------------------

def _golden_rows(golden):
    with open(golden / "phaze_arch_space.csv") as f:
        reader = csv.DictReader(f)
        return {(int(r["num_tc"]), int(r["num_vc"]), int(r["tc_width"]), int(r["tc_depth"]),
                 int(r["vc_width"]), float(r["global_buffer_mib"])): float(r["area_mm2"])
                for r in reader}


def test_default_space_equals_golden_csv(golden):
    gold = _golden_rows(golden)
    space = ArchSpace.default()
    cfg = space.configs
    assert len(space) == len(gold) == 29360
    mine = {(int(r["num_tc"]), int(r["num_vc"]), int(r["tc_width"]), int(r["tc_depth"]),
             int(r["vc_width"]), float(r["buffer_mib"])): float(r["area_mm2"]) for r in cfg}
    assert mine.keys() == gold.keys()
    keys = list(gold)
    np.testing.assert_allclose([mine[k] for k in keys], [gold[k] for k in keys], rtol=1e-6)
    tpu = presets.get("tpuv4")[0]
    assert space.budget_mm2 == pytest.approx(278.83, abs=0.005)
    assert space.budget_mm2 == tpu["area_mm2"]
    for name in ("hbm_gib", "hbm_gb_per_s", "clock_ghz", "link_gb_per_s", "net_gb_per_s", "node_size"):
        assert np.all(cfg[name] == tpu[name]), name


def test_default_space_bounds_and_order():
    space = ArchSpace.default()
    cfg = space.configs
    ratio = cfg["area_mm2"] / space.budget_mm2
    assert ratio.max() <= 1 + 1e-9
    waived = (cfg["num_tc"] == 1) | (cfg["num_vc"] == 1)
    assert ratio[~waived].min() >= 0.3 * (1 - 1e-9)
    assert np.any(ratio[waived] < 0.3)
    # tpuv4 itself sits exactly at the budget and is kept
    tpu = presets.get("tpuv4")[0]
    is_tpu = ((cfg["num_tc"] == 8) & (cfg["tc_width"] == 128) & (cfg["tc_depth"] == 128)
              & (cfg["num_vc"] == 2) & (cfg["buffer_mib"] == 128))
    assert is_tpu.sum() == 1 and cfg["area_mm2"][is_tpu][0] == tpu["area_mm2"]
    # stable, deterministic order
    np.testing.assert_array_equal(cfg, ArchSpace.default().configs)
    assert cfg.flags.c_contiguous and cfg.dtype == ARCH_DTYPE


def test_user_grids_budget_and_lower_fraction():
    space = ArchSpace(num_tc=[4, 8], tc_width=128, tc_depth=[64, 128], num_vc=[2], buffer_mib=[64, 128],
                      link_gb_per_s=[presets.ORIGINAL_STUDY_GB_PER_S, 50.0], budget_mm2="tpuv4",
                      lower_fraction=0.0)
    assert len(space) == 2 * 2 * 2 * 2
    assert set(space.configs["link_gb_per_s"]) == {4 * 2 ** 30 / 1e9, 50.0}
    assert np.all(space.configs["vc_width"] == space.configs["tc_width"])
    budget = 150.0
    small = ArchSpace(num_tc=[1, 2, 4, 8], tc_width=[128], tc_depth=[128], num_vc=[2, 4], vc_width=[8, 16],
                      buffer_mib=[16, 32, 64], budget_mm2=budget, lower_fraction=0.5)
    r = small.configs["area_mm2"] / budget
    waived = (small.configs["num_tc"] == 1) | (small.configs["num_vc"] == 1)
    assert np.all(r <= 1 + 1e-9) and np.all(r[~waived] >= 0.5 * (1 - 1e-9))
    assert set(small.configs["vc_width"]) <= {8, 16}
    # the filter keeps exactly the qualifying grid points
    full = make_archs(**{k: v for k, v in zip(
        ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib"),
        np.array(np.meshgrid([1, 2, 4, 8], [128], [128], [2, 4], [8, 16], [16, 32, 64],
                             indexing="ij")).reshape(6, -1))}, base="tpuv4")
    fr = full["area_mm2"] / budget
    waived = full["num_tc"] == 1
    assert len(small) == int(np.sum((fr <= 1) & ((fr >= 0.5) | waived)))
    assert np.any(waived & (fr < 0.5))
    assert small.budget_mm2 == budget and small.lower_fraction == 0.5


def test_base_preset_supplies_other_fields():
    space = ArchSpace(num_tc=[432], tc_width=[16], tc_depth=[16], num_vc=[432], buffer_mib=[40],
                      base="a100-80g", budget_mm2="a100-80g")
    row = space.configs[0]
    a100 = presets.get("a100-80g")[0]
    for name in ARCH_DTYPE.names:
        assert row[name] == pytest.approx(a100[name]), name


def test_empty_space_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        ArchSpace(num_tc=[4096], tc_width=[256], tc_depth=[256], budget_mm2=100.0)


@pytest.mark.parametrize("kwargs,field", [
    (dict(num_tc=[0, 2]), "num_tc"), (dict(tc_width=[-4]), "tc_width"), (dict(buffer_mib=[float("nan")]), "buffer_mib"),
    (dict(tc_depth=[2.5]), "tc_depth"), (dict(budget_mm2=-1.0), "budget_mm2"),
    (dict(lower_fraction=1.5), "lower_fraction"), (dict(num_vc=[]), "num_vc"),
    (dict(hbm_gb_per_s=[-1.0]), "hbm_gb_per_s"),
])
def test_arch_space_bad_input(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ArchSpace(**kwargs)


# --- make_archs / validate -------------------------------------------------------

def test_make_archs_broadcasts_and_fills_area():
    rows = make_archs(base="h100-sxm", num_tc=[1, 2, 4])
    assert rows.shape == (3,) and rows.dtype == ARCH_DTYPE
    assert np.all(rows["tc_depth"] == 32)
    np.testing.assert_allclose(rows["area_mm2"], area_mm2(rows))
    assert np.all(np.diff(rows["area_mm2"]) > 0)


@pytest.mark.parametrize("field,value", [
    ("num_tc", 0), ("tc_width", -1), ("vc_width", 0), ("buffer_mib", 0.0), ("hbm_gib", float("nan")),
    ("hbm_gb_per_s", -5.0), ("clock_ghz", float("inf")), ("link_gb_per_s", 0.0), ("net_gb_per_s", -1),
    ("node_size", 0), ("num_vc", 1.5)])
def test_make_archs_and_validate_name_bad_knob(field, value):
    with pytest.raises(ValueError, match=field):
        make_archs(base="tpuv4", **{field: value})
    rows = presets.get("tpuv4")
    rows[field] = value if field not in ("num_tc", "tc_width", "vc_width", "num_vc", "node_size") else 0
    with pytest.raises(ValueError, match=field):
        validate(rows)


def test_make_archs_requires_all_fields_without_base():
    with pytest.raises(ValueError, match="missing"):
        make_archs(num_tc=4)
    with pytest.raises(ValueError, match="unknown"):
        make_archs(base="tpuv4", cores=4)


def test_validate_converts_foreign_layouts():
    tpu = presets.get("tpuv4")
    assert validate(tpu) is not None and validate(tpu[0]).shape == (1,)
    # different field order and dtypes, no area field
    names = [n for n in ARCH_DTYPE.names if n != "area_mm2"][::-1]
    other = np.zeros(1, dtype=[(n, np.float32 if n == "clock_ghz" else np.float64) for n in names])
    for n in names:
        other[n] = tpu[n]
    out = validate(other)
    assert out.dtype == ARCH_DTYPE
    assert out["area_mm2"][0] == pytest.approx(tpu["area_mm2"][0])
    with pytest.raises(ValueError, match="structured"):
        validate(np.zeros(3))
    with pytest.raises(ValueError, match="at least one"):
        validate(np.zeros(0, dtype=ARCH_DTYPE))


def test_cli_archs_lists_presets_and_space(capsys):
    from phaze.cli import main

    assert main(["archs"]) == 0
    out = capsys.readouterr().out
    for name in presets.names():
        assert name in out
    assert "29,360 architectures" in out and "278.83" in out
