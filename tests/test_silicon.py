"""Silicon and running cost (issue 28): magnitudes by hand, directions, bad input, vectorisation."""
import math

import numpy as np
import pytest

import phaze.arch as arch
from phaze.arch import _silicon_cost as sc


def test_dies_per_wafer_and_yield_by_hand():
    # 100 mm²: π·150²/100 − π·300/√200 = 706.86 − 66.64 = 640.2 → 640
    assert sc.gross_dies_per_wafer(100.0) == 640
    assert sc.gross_dies_per_wafer(100.0) == math.floor(math.pi * 150 ** 2 / 100 - math.pi * 300 / math.sqrt(200))
    # 1 cm² at D0 0.09 (7 nm), α 3: (1 + 0.03)^-3 = 0.9151
    assert sc.die_yield(100.0, 0.09) == pytest.approx(1.03 ** -3)
    assert sc.die_yield(100.0, 0.0) == 1.0


def test_chip_cost_by_hand():
    total, b = arch.chip_cost_usd(100.0, process_nm=7, hbm_gib=32, hbm_kind="HBM2", breakdown=True)
    die = 9346.0 / (640 * 1.03 ** -3)
    assert b["die_usd"][0] == pytest.approx(die)
    # HBM2 $120 per 8 GiB stack = $15/GiB; CoWoS-S-class packaging $750.
    assert b["hbm_usd"][0] == pytest.approx(32 * 120.0 / 8)
    assert total[0] == pytest.approx(die + 480 + 750)
    # default hbm_kind HBM2, returns an array without breakdown
    plain = arch.chip_cost_usd(100.0, process_nm=7, hbm_gib=32)
    assert isinstance(plain, np.ndarray) and plain[0] == pytest.approx(total[0])


def test_reticle_split():
    _, b = arch.chip_cost_usd(1600.0, process_nm=4, hbm_gib=0, breakdown=True)
    assert b["chiplets"][0] == 2
    piece = 800.0
    dpw = sc.gross_dies_per_wafer(piece)
    y = (1 + 8.0 * 0.10 / 3) ** -3
    assert b["die_usd"][0] == pytest.approx(2 * 16988.0 / (dpw * y))


def test_defect_density_3nm_equals_5nm():
    # TSMC (European Technology Symposium 2024): N3E defect density similar to N5's -> 0.10.
    assert sc.DEFECT_PER_CM2[3] == sc.DEFECT_PER_CM2[5] == 0.10
    _, b = arch.chip_cost_usd(100.0, process_nm=3, hbm_gib=0, breakdown=True)
    assert b["yield"][0] == pytest.approx((1 + 1.0 * 0.10 / 3) ** -3)
    assert b["die_usd"][0] == pytest.approx(20000.0 / (640 * (1 + 0.10 / 3) ** -3))


def test_defect_density_mature_nodes():
    # Chiplet Actuary (DAC 2022) parameter.ini: 14 nm 0.08, 20 and 28 nm 0.07 defects per cm²;
    # its 7 nm 0.09 equals TSMC's N7 figure used here.
    assert sc.DEFECT_PER_CM2[16] == sc.DEFECT_PER_CM2[12] == 0.08
    assert sc.DEFECT_PER_CM2[22] == 0.07
    _, b = arch.chip_cost_usd(100.0, process_nm=16, hbm_gib=0, breakdown=True)
    assert b["yield"][0] == pytest.approx((1 + 1.0 * 0.08 / 3) ** -3)
    assert b["die_usd"][0] == pytest.approx(3984.0 / (640 * (1 + 0.08 / 3) ** -3))


def test_directions():
    c = arch.chip_cost_usd([100.0, 200.0, 400.0, 800.0], process_nm=5, hbm_gib=0)
    assert np.all(np.diff(c) > 0)
    per_mm2 = arch.chip_cost_usd(400.0, process_nm=[16, 7, 5, 3], hbm_gib=0, packaging_usd=0)
    assert np.all(np.diff(per_mm2) > 0)
    hbm = arch.chip_cost_usd(100.0, process_nm=7, hbm_gib=[16, 32, 64])
    assert np.all(np.diff(hbm) > 0)


def test_overrides():
    a = arch.chip_cost_usd(100.0, process_nm=7, hbm_gib=0, wafer_usd=10000.0, defect_per_cm2=0.0,
                           packaging_usd=0.0)
    assert a[0] == pytest.approx(10000.0 / 640)


def test_run_cost_by_hand():
    # 8 chips × $3000 × 1.82 × 1 h / 5 y + 8 × 700 W × 1.82 × 1 h = 10.192 kWh × 1.58 × $0.0806
    cap = 8 * 3000 * 1.82 * 3600 / (5 * 365.25 * 86400)
    energy = 8 * 700 * 1.82 * 3600 / 3.6e6 * 1.58 * 0.0806
    got = arch.run_cost_usd(chips=8, chip_cost_usd=3000, seconds=3600, power_w=700)
    assert got == pytest.approx(cap + energy)
    assert arch.run_cost_usd(chips=8, chip_cost_usd=3000, seconds=3600, power_w=700, pue=1.0,
                             host_overhead=0.0, usd_per_kwh=0.0) == pytest.approx(
        8 * 3000 * 3600 / (5 * 365.25 * 86400))
    assert arch.usd_per_million_tokens(2.0, 4e6) == pytest.approx(0.5)


def test_bad_input_sentences():
    with pytest.raises(ValueError, match="area_mm2 must be finite and > 0"):
        arch.chip_cost_usd(0.0, process_nm=7, hbm_gib=1)
    with pytest.raises(ValueError, match="process_nm must be one of"):
        arch.chip_cost_usd(100.0, process_nm=10, hbm_gib=1)
    with pytest.raises(ValueError, match="hbm_kind must be one of"):
        arch.chip_cost_usd(100.0, process_nm=7, hbm_gib=1, hbm_kind="HBM5")
    with pytest.raises(ValueError, match="pue must be >= 1"):
        arch.run_cost_usd(chips=1, chip_cost_usd=1, seconds=1, power_w=1, pue=0.5)
    with pytest.raises(ValueError, match="tokens must be finite and > 0"):
        arch.usd_per_million_tokens(1.0, 0)


def test_vectorised_equals_loop():
    areas = np.array([50.0, 300.0, 900.0])
    nodes = np.array([16, 7, 3])
    kinds = np.array(["HBM2e", "HBM3", "HBM3e"], dtype=object)
    many = arch.chip_cost_usd(areas, process_nm=nodes, hbm_gib=[16, 80, 192], hbm_kind=kinds)
    for i, g in enumerate((16, 80, 192)):
        one = arch.chip_cost_usd(areas[i], process_nm=int(nodes[i]), hbm_gib=g, hbm_kind=kinds[i])
        assert one[0] == many[i]
