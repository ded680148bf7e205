"""Energy tables, area by node, peak power (issue 28): magnitudes by hand, directions, bad input, vectorisation."""
import math

import numpy as np
import pytest

import phaze.arch as arch
from phaze.arch import _area, _energy, _node


def row(**kw):
    base = dict(num_tc=8, tc_width=128, tc_depth=128, num_vc=2, vc_width=128, buffer_mib=128.0,
                hbm_gib=32.0, hbm_gb_per_s=1200.0, clock_ghz=1.05, link_gb_per_s=50.0,
                net_gb_per_s=50.0, node_size=4096)
    base.update(kw)
    return arch.make_archs(**base)


def test_names_and_dtype():
    assert arch.ENERGY_DTYPE.names == ("mac16_j", "mac8_j", "mac4_j", "vector_op_j",
                                       "sram_j_per_byte", "hbm_j_per_byte", "link_j_per_byte",
                                       "net_j_per_byte", "static_w")
    assert arch.TEMPLATE_PROCESS_NM == 22 and arch.TEMPLATE_TDP_W == 192.0


# Stillmaker & Baas (2017) HP energy fits a·V² + b·V + c: 45 nm at Horowitz's 0.9 V, 16 nm at 0.8 V.
E45 = 1.018 * 0.81 - 0.3107 * 0.9 + 0.1539          # 0.69885
E16 = 0.2958 * 0.64 - 0.1241 * 0.8 + 0.03024        # 0.120272
F16 = E16 / E45                                     # 0.1721
F7 = F16 * 0.6 * 0.6                                # TSMC: N10 -40 % vs 16FF+, N7 -40 % vs N10


def test_node_energy_factors_by_hand():
    assert F16 == pytest.approx(0.1721, abs=1e-4)
    e20 = 0.373 * 0.64 - 0.1582 * 0.8 + 0.04104     # 0.1532
    e32 = 0.8367 * 0.64 - 0.4341 * 0.8 + 0.1701     # 0.358308
    f = _energy.NODE_ENERGY_FACTOR
    assert f[22] == pytest.approx((e20 + (e32 - e20) * 2 / 12) / E45)   # 0.2681
    assert f[16] == pytest.approx(F16)
    assert f[12] == pytest.approx(F16 * 0.75)
    assert f[7] == f[6] == pytest.approx(F7)                            # 0.0620
    assert f[5] == pytest.approx(F7 * 0.70)
    assert f[3] == pytest.approx(F7 * 0.70 * 0.70)


def test_tpuv4_energy_by_hand():
    e = arch.energy_rows(row(), process_nm=7)[0]
    # Horowitz 45 nm: bf16 mul 1.1 + fp32 add 0.9 = 2.0 pJ; 7 nm factor F7 = 0.0620.
    assert e["mac16_j"] == pytest.approx(2.0e-12 * F7)
    assert e["mac8_j"] == pytest.approx((0.2 + 0.9) * 1e-12 * F7)
    assert e["mac4_j"] == pytest.approx((0.05 + 0.9) * 1e-12 * F7)
    assert e["vector_op_j"] == pytest.approx(4.6e-12 * F7)
    # defaults HBM2 / ici / dcn: 3.9 pJ/bit; one SerDes 3.5 pJ/bit; dcn = 2 NICs (ConnectX-7
    # 400G, 24.9 W typical / (2 × 400 Gb/s) = 31.1 pJ/bit) + 4 optics × 16 W / (2 × 800 Gb/s)
    # = 62.25 + 40 = 102.25 pJ/bit (no packet switch).
    nic = 24.9 / (2 * 400e9)
    assert e["hbm_j_per_byte"] == pytest.approx(8 * 3.9e-12)
    assert e["link_j_per_byte"] == pytest.approx(8 * 3.5e-12)
    assert e["net_j_per_byte"] == pytest.approx(8 * (2 * nic + 4 * 16.0 / 1.6e12))
    assert e["net_j_per_byte"] == pytest.approx(8 * 102.25e-12)
    # a packet-switched network adds one Tomahawk-5-class switch, 500 W / 51.2 Tb/s.
    ib = arch.energy_rows(row(), process_nm=7, net_kind="ndr-ib")[0]
    assert ib["net_j_per_byte"] == pytest.approx(8 * (2 * nic + 40e-12 + 500.0 / 51.2e12))
    # buffer: one 1 MiB bank = 1.25 pJ/B × √128 × F7, + 0.8 pJ/B/mm × half the core side.
    core = (8 * _area.tensor_core_mm2(128, 128) * 16.5 / 91.2
            + 2 * _area.vector_core_mm2(128) * 16.5 / 91.2
            + _area.buffer_mm2(128.0) * 0.027 / 0.092)
    want = 1.25e-12 * math.sqrt(128) * F7 + 0.8e-12 * 0.5 * math.sqrt(float(core))
    assert e["sram_j_per_byte"] == pytest.approx(want)
    total, _ = arch.die_area_mm2(row(), process_nm=7)
    # leakage: AccelWattch's V100 tensor-work static power 48.949 W over GV100's 815 mm²
    # (0.0601 W/mm²); HBM background 2 W per stack, 1200/307.2 → 4 stacks.
    assert e["static_w"] == pytest.approx(48.94875596 / 815 * total[0] + 2.0 * 4)


def test_die_area_by_hand():
    total, b = arch.die_area_mm2(row(), process_nm=7)
    assert b["tensor_mm2"][0] == pytest.approx(8 * 12.899083068 * 16.5 / 91.2)
    assert b["buffer_mm2"][0] == pytest.approx(175.423 * 0.027 / 0.092)
    # LLMCompass (ISCA 2024) Table II: per 1,024-bit HBM interface a 10.45 mm² PHY (fixed) and a
    # 552.743 M-transistor controller at the node's density (N7 91.2 MTr/mm²); 4 stacks.
    assert b["hbm_phy_mm2"][0] == pytest.approx(4 * (10.45 + 552.743 / 91.2))
    # NVLink3 link of A100 (25 GB/s per direction): PHY 1.888 mm², controller 74.632 M
    # transistors; 50 + 50 GB/s of link and network.
    assert b["serdes_mm2"][0] == pytest.approx(100 * (1.888 / 25 + 74.632 / 25 / 91.2))
    inner = sum(v[0] for k, v in b.items() if k != "uncore_mm2")
    assert total[0] == pytest.approx(inner / (1 - 0.23))   # TPU v1: 23 % outside datapath and I/O
    assert total[0] == pytest.approx(sum(v[0] for v in b.values()))
    # at the template node the core areas are the study's own
    t22, b22 = arch.die_area_mm2(row(), process_nm=22)
    assert b22["tensor_mm2"][0] + b22["vector_mm2"][0] + b22["buffer_mm2"][0] == pytest.approx(
        row()["area_mm2"][0])


def test_node_energy_4nm_from_n4p():
    # TSMC N4P: 22 % better power efficiency than N5 -> 4 nm = 5 nm / 1.22.
    assert _energy.NODE_ENERGY_FACTOR[4] == pytest.approx(F7 * 0.70 / 1.22)   # 0.0355
    e4 = arch.energy_rows(row(), process_nm=4)[0]
    assert e4["mac16_j"] == pytest.approx(2.0e-12 * F7 * 0.70 / 1.22)


def test_directions():
    newer = [arch.energy_rows(row(), process_nm=n)[0]["mac16_j"] for n in (22, 16, 12, 7, 5, 4, 3)]
    assert all(a > b for a, b in zip(newer, newer[1:]))
    areas = [arch.die_area_mm2(row(), process_nm=n)[0][0] for n in (22, 16, 12, 7, 5, 3)]
    assert all(a >= b for a, b in zip(areas, areas[1:]))
    small, big = (arch.energy_rows(row(buffer_mib=m), process_nm=7)[0]["sram_j_per_byte"]
                  for m in (0.25, 128.0))
    assert big > small
    more = [arch.peak_power_w(r, arch.energy_rows(r, process_nm=7))[0]
            for r in (row(num_tc=4), row(num_tc=8), row(num_tc=16))]
    assert more[0] < more[1] < more[2]
    hbm = [arch.energy_rows(row(), process_nm=7, hbm_kind=k)[0]["hbm_j_per_byte"]
           for k in ("HBM2", "HBM3", "HBM3e", "HBM4")]
    # HBM2 through HBM3E at 3.9 pJ/bit (O'Connor 2017; Samsung on HBM3E), HBM4 below it
    assert hbm[0] == hbm[1] == hbm[2] > hbm[3]
    # HBM2e: Micron's "Average Device Power" 6.0 pJ/bit
    e2e = arch.energy_rows(row(), process_nm=7, hbm_kind="HBM2e")[0]
    assert e2e["hbm_j_per_byte"] == pytest.approx(8 * 6.0e-12)


def test_peak_power_by_hand():
    r = row()
    e = arch.energy_rows(r, process_nm=7)
    hz = 1.05e9
    want = (8 * 128 * 128 * hz * e["mac16_j"][0] + 8 * 2 * 256 * hz * e["sram_j_per_byte"][0]
            + 2 * 128 * hz * e["vector_op_j"][0] + 1200e9 * e["hbm_j_per_byte"][0]
            + e["static_w"][0])
    assert arch.peak_power_w(r, e)[0] == pytest.approx(want)
    half = arch.peak_power_w(r, e, hbm_utilisation=0.5)[0]
    assert half == pytest.approx(want - 600e9 * e["hbm_j_per_byte"][0])


def test_dvfs():
    assert arch.dvfs_energy_scale(1.0) == 1.0
    assert arch.dvfs_energy_scale(0.5) == pytest.approx(0.25)
    assert arch.DVFS_MIN_CLOCK_FRACTION == pytest.approx(210 / 1410)
    np.testing.assert_allclose(arch.dvfs_energy_scale([0.5, 0.8]), [0.25, 0.64])
    with pytest.raises(ValueError, match="f_ratio must lie in"):
        arch.dvfs_energy_scale(0.1)
    with pytest.raises(ValueError, match="f_ratio must lie in"):
        arch.dvfs_energy_scale(1.5)


def test_bad_input_sentences():
    with pytest.raises(ValueError, match="process_nm must be one of 3, 4, 5, 6, 7, 12, 16, 22 nm"):
        arch.energy_rows(row(), process_nm=8)
    with pytest.raises(ValueError, match="hbm_kind must be one of HBM2, HBM2e"):
        arch.energy_rows(row(), process_nm=7, hbm_kind="GDDR6")
    with pytest.raises(ValueError, match="link_kind must be one of"):
        arch.energy_rows(row(), process_nm=7, link_kind="pcie")
    with pytest.raises(ValueError, match="net_kind must be one of"):
        arch.energy_rows(row(), process_nm=7, net_kind="eth")
    with pytest.raises(ValueError, match="structured array"):
        arch.die_area_mm2([1, 2], process_nm=7)
    with pytest.raises(ValueError, match="hbm_utilisation"):
        r = row()
        arch.peak_power_w(r, arch.energy_rows(r, process_nm=7), hbm_utilisation=2)


def test_vectorised_equals_loop():
    rows = np.concatenate([row(num_tc=n, buffer_mib=m) for n, m in ((1, 2.0), (64, 16.0), (4096, 0.5))])
    nodes = np.array([22, 7, 3])
    kinds = np.array(["HBM2", "HBM3", "HBM4"], dtype=object)
    many = arch.energy_rows(rows, process_nm=nodes, hbm_kind=kinds, link_kind="nvlink4",
                            net_kind="ndr-ib")
    area, parts = arch.die_area_mm2(rows, process_nm=nodes, hbm_kind=kinds)
    power = arch.peak_power_w(rows, many)
    for i in range(3):
        one = arch.energy_rows(rows[i:i + 1], process_nm=int(nodes[i]), hbm_kind=kinds[i],
                               link_kind="nvlink4", net_kind="ndr-ib")
        assert one[0] == many[i]
        a1, _ = arch.die_area_mm2(rows[i:i + 1], process_nm=int(nodes[i]), hbm_kind=kinds[i])
        assert a1[0] == area[i]
        assert arch.peak_power_w(rows[i:i + 1], one)[0] == power[i]


def test_stacks_by_kind():
    np.testing.assert_array_equal(_node.hbm_stacks_for([1200.0, 3350.0, 8000.0],
                                                       ["HBM2", "HBM3", "HBM3e"]), [4, 5, 7])
    _, b = arch.die_area_mm2(row(), process_nm=7, hbm_stacks=6)
    assert b["hbm_phy_mm2"][0] == pytest.approx(6 * (10.45 + 552.743 / 91.2))
    # HBM4's 2,048-bit interface is two 1,024-bit ones; at 22 nm the controller is at 16.5 MTr/mm².
    _, b4 = arch.die_area_mm2(row(), process_nm=7, hbm_stacks=6, hbm_kind="HBM4")
    assert b4["hbm_phy_mm2"][0] == pytest.approx(2 * b["hbm_phy_mm2"][0])
    _, b22 = arch.die_area_mm2(row(), process_nm=22, hbm_stacks=1)
    assert b22["hbm_phy_mm2"][0] == pytest.approx(10.45 + 552.743 / 16.5)
    assert _energy.buffer_bytes_per_array_cycle(8, 8) == 32.0


def test_kind_arrays_with_repeats_and_a_bad_entry():
    rows = np.concatenate([row(), row(), row()])
    e = arch.energy_rows(rows, process_nm=7, hbm_kind=["HBM4", "HBM2", "HBM4"])
    # HBM2 3.9 pJ/bit; HBM4 = HBM3E's 3.9 / 1.4 (SK hynix: over 40 % better efficiency).
    np.testing.assert_allclose(e["hbm_j_per_byte"], [8 * 3.9e-12 / 1.4, 31.2e-12,
                                                     8 * 3.9e-12 / 1.4])
    with pytest.raises(ValueError, match="hbm_kind must be one of .* got 'HBM9'"):
        arch.energy_rows(rows, process_nm=7, hbm_kind=["HBM3", "HBM9", "HBM3"])
    with pytest.raises(ValueError, match="hbm_kind must be one name or one per row"):
        arch.energy_rows(rows, process_nm=7, hbm_kind=["HBM3", "HBM2"])
