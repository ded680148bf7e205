"""Energy per operation and per byte, static and peak power of the template (issue 28), private to ``phaze.arch``.

Every default is a named constant below; each is cited, with its arithmetic, in
docs/fidelity-sources.md §23. SI units: joules, watts, bytes.

- :data:`ENERGY_DTYPE`: one record per architecture row: ``mac16_j``, ``mac8_j``, ``mac4_j``
  (one multiply-accumulate with 16/8/4-bit operands and an fp32 accumulate), ``vector_op_j``
  (one fp32 lane operation, taken as a fused multiply-add), ``sram_j_per_byte`` (one byte read
  or written at the shared buffer, delivered over the on-chip wires to the cores),
  ``hbm_j_per_byte``, ``link_j_per_byte``, ``net_j_per_byte`` (NIC + optics + switch),
  ``static_w`` (leakage of the die at its node + HBM background power).
- :func:`energy_rows` ``(archs, *, process_nm, hbm_kind=None, link_kind=None, net_kind=None)``:
  kinds None → the tpuv4 preset's (:data:`DEFAULT_HBM_KIND` HBM2, ``ici``, ``dcn``).
- :func:`dvfs_energy_scale` ``(f_ratio)``: dynamic energy per operation at clock ``f_ratio·f0``,
  ``f_ratio²`` (CMOS ``P = αCV²f`` with V roughly proportional to f over the DVFS range), for
  ``DVFS_MIN_CLOCK_FRACTION ≤ f_ratio ≤ 1``.
- :func:`peak_power_w` ``(archs, energy, *, hbm_utilisation=1.0)``: the template's estimate of a
  chip's TDP: every PE one 16-bit MAC per cycle; the buffer delivering ``BUFFER_BYTES_PER_ARRAY_CYCLE
  (W, D) = 2·(W + D)`` bytes per array per cycle (weight-stationary: D activations in and W
  partial sums out, 16-bit words; weight loads neglected); every vector lane one op per cycle;
  HBM at ``hbm_utilisation × hbm_gb_per_s``; plus ``static_w``.
- :data:`TEMPLATE_TDP_W` = 192: TPU v4's maximum chip power (Google Cloud TPU v4 documentation;
  Jouppi et al., ISCA 2023).

Energy by node: Horowitz (ISSCC 2014) gives 45 nm figures; :data:`NODE_ENERGY_FACTOR` scales
them (45 → 22/16 nm by Stillmaker & Baas's fitted energy equations, :data:`SB_HP_ENERGY_FIT`;
16 → 12/7/5/3 nm by TSMC's iso-speed power reductions, 4 nm by N4P's power efficiency over N5;
§23).
"""
from __future__ import annotations

import numpy as np

from . import _node
from ._fields import HBM_KINDS, LINK_KINDS, NET_KINDS

ENERGY_DTYPE = np.dtype([("mac16_j", "f8"), ("mac8_j", "f8"), ("mac4_j", "f8"),
                         ("vector_op_j", "f8"), ("sram_j_per_byte", "f8"),
                         ("hbm_j_per_byte", "f8"), ("link_j_per_byte", "f8"),
                         ("net_j_per_byte", "f8"), ("static_w", "f8")])

PJ = 1e-12

# Horowitz, "Computing's energy problem", ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V).
H45_FP16_MUL_J = 1.1 * PJ
H45_FP16_ADD_J = 0.4 * PJ
H45_FP32_MUL_J = 3.7 * PJ
H45_FP32_ADD_J = 0.9 * PJ
H45_INT8_MUL_J = 0.2 * PJ
#: SRAM read of 64 bits: 8 KB 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ (same figure).
H45_SRAM_8KB_J_PER_BYTE = 10.0 * PJ / 8
H45_SRAM_8KB_BYTES = 8 * 1024
#: Banks larger than this are not built; a bigger buffer is many banks of it.
SRAM_BANK_BYTES = 1 << 20

#: Multiply-accumulates at 45 nm: multiplier + fp32 accumulate. fp8 multiply ≈ int8 multiply
#: (3–4 bit mantissas); 4-bit multiply = int8 × (4/8)² (array multiplier ∝ bits²).
MAC16_45NM_J = H45_FP16_MUL_J + H45_FP32_ADD_J
MAC8_45NM_J = H45_INT8_MUL_J + H45_FP32_ADD_J
MAC4_45NM_J = H45_INT8_MUL_J * (4 / 8) ** 2 + H45_FP32_ADD_J
VECTOR_OP_45NM_J = H45_FP32_MUL_J + H45_FP32_ADD_J

#: Stillmaker & Baas, "Scaling equations for the accurate prediction of CMOS device
#: performance from 180 nm to 7 nm", Integration 58 (2017): energy of the high-performance (HP)
#: devices fitted as a·V² + b·V + c per node (their Table 5, as transcribed in UCLA NanoCAD's
#: nodeScale, wromaszkan/nodeScale ``nodeScale.py`` ``depCoeffDict``; §23). No 22 nm row: it
#: is interpolated linearly between 32 and 20 nm.
SB_HP_ENERGY_FIT = {45: (1.018, -0.3107, 0.1539), 32: (0.8367, -0.4341, 0.1701),
                    20: (0.373, -0.1582, 0.04104), 16: (0.2958, -0.1241, 0.03024)}
#: Supply voltages the fit is evaluated at: Horowitz's 45 nm figures are at 0.9 V; 16 nm at
#: 0.8 V, the typical corner of TSMC's 16FF+ standard cells (libraries
#: ``tcbn16ffplus…tt0p8v25c``, §23), and 22 nm at the same 0.8 V (no 22 nm figure read).
H45_VDD = 0.9
FINFET_VDD = 0.8


def _sb_energy(node, vdd):
    a, b, c = SB_HP_ENERGY_FIT[node]
    return a * vdd * vdd + b * vdd + c


_E45 = _sb_energy(45, H45_VDD)
_F16 = _sb_energy(16, FINFET_VDD) / _E45
_F22 = (_sb_energy(20, FINFET_VDD)
        + (_sb_energy(32, FINFET_VDD) - _sb_energy(20, FINFET_VDD)) * (22 - 20) / (32 - 20)) / _E45
#: Dynamic energy per operation relative to 45 nm (§23 arithmetic): 22 and 16 nm from the fit
#: above; 12 = 16 × 0.75 (TSMC 12FFC vs 16FFC); 7 = 16 × 0.6 × 0.6 (TSMC: N10 −40 % vs 16FF+,
#: N7 −40 % vs N10); 6 = 7; 5 = 7 × 0.70 (N5 vs N7); 4 = 5 / 1.22 (TSMC N4P: 22 % better power
#: efficiency than N5); 3 = 5 × 0.70 (N3 vs N5).
NODE_ENERGY_FACTOR = {22: _F22, 16: _F16, 12: _F16 * 0.75, 7: _F16 * 0.36, 6: _F16 * 0.36,
                      5: _F16 * 0.36 * 0.70, 4: _F16 * 0.36 * 0.70 / 1.22,
                      3: _F16 * 0.36 * 0.70 * 0.70}

#: On-chip wire energy per bit per mm (Keckler et al., IEEE Micro 2011: 256 bits over 1 mm
#: ≈ 26 pJ at 28 nm ⇒ 0.10 pJ/bit/mm; Keckler's talk quotes 18–110 fJ/bit/mm from the DARPA
#: Exascale report); wires barely scale, so held across nodes.
WIRE_J_PER_BIT_MM = 0.10 * PJ

#: HBM access energy per bit (§23): HBM2 3.9 pJ/bit (O'Connor et al., MICRO 2017); HBM2e
#: 6.0 pJ/bit (Micron's memory comparison table, "Average Device Power (pJ/bit)"); HBM3E
#: 3.9 pJ/bit (Samsung, 2024 statement on HBM4E); HBM4 = HBM3E / 1.4 (SK hynix: HBM4 "over 40 %
#: better energy efficiency"); HBM3 assumed equal to the sourced figures around it.
HBM_J_PER_BIT = {"HBM2": 3.9 * PJ, "HBM2e": 6.0 * PJ, "HBM3": 3.9 * PJ, "HBM3e": 3.9 * PJ,
                 "HBM4": 3.9 * PJ / 1.4}

#: One electrical SerDes traversal, pJ/bit (NVIDIA at OFC 2025: 2–5 pJ/bit; mid-range 3.5).
SERDES_J_PER_BIT = 3.5 * PJ
#: Scale-up links: traversals per byte (a switched fabric crosses two SerDes hops).
LINK_TRAVERSALS = {"nvlink3": 2, "nvlink4": 2, "nvlink5": 2, "infinity-fabric": 1, "ici": 1,
                   "neuronlink": 1, "roce": None}
#: Scale-out path per bit: two NICs, four pluggable optics (NIC and switch side, two hops),
#: one packet-switch ASIC (§23); dcn crosses Google's optical circuit switch (no packet switch).
#: A module's or NIC's power serves both directions: per bit crossing it, W / (2 × line rate).
#: NIC: NVIDIA ConnectX-7 MCX75310AAS-NEAT (one 400 Gb/s OSFP port), "typical power with passive
#: cables in PCIe Gen 5.0 x16" 24.9 W (ConnectX-7 user manual, Specifications) ⇒ 24.9 / (2 × 400e9)
#: = 31.1 pJ/bit. Optics: NVIDIA MMS4X00-NS twin-port 800G OSFP, 16 W typical ⇒ 16 / (2 × 800e9)
#: = 10 pJ/bit. Switch: Broadcom Tomahawk 5, 51.2 Tb/s at an estimated 500 W (TechInsights /
#: Linley Group) ⇒ 500 / 51.2e12 = 9.77 pJ/bit.
NIC_CARD_W = 24.9
NIC_BITS_PER_S = 400e9
NIC_J_PER_BIT = NIC_CARD_W / (2.0 * NIC_BITS_PER_S)
OPTICS_MODULE_W = 16.0
OPTICS_MODULE_BITS_PER_S = 800e9
OPTICS_J_PER_BIT = OPTICS_MODULE_W / (2.0 * OPTICS_MODULE_BITS_PER_S)
SWITCH_ASIC_W = 500.0
SWITCH_ASIC_BITS_PER_S = 51.2e12
SWITCH_J_PER_BIT = SWITCH_ASIC_W / SWITCH_ASIC_BITS_PER_S
NET_J_PER_BIT = {k: 2 * NIC_J_PER_BIT + 4 * OPTICS_J_PER_BIT + SWITCH_J_PER_BIT for k in NET_KINDS}
NET_J_PER_BIT["dcn"] = 2 * NIC_J_PER_BIT + 4 * OPTICS_J_PER_BIT
#: Per bit over each scale-up link kind (a ``roce`` scale-up link is priced as the network).
LINK_J_PER_BIT = {k: NET_J_PER_BIT["roce"] if t is None else t * SERDES_J_PER_BIT
                  for k, t in LINK_TRAVERSALS.items()}

#: Static power: leakage per mm² of die (all nodes) and HBM background power per stack (§23).
#: Leakage: AccelWattch (Kandiah et al., MICRO 2021) static power of a V100 (GV100, 815 mm²,
#: TSMC 12FFN) running INT+FP+tensor-core work, 48.94875596 W (``static_cat6_flane``, no
#: per-lane term; accel-sim configs SM7_QV100 ``accelwattch_sass_hw.xml``) ⇒ 48.949 / 815 W/mm².
#: HBM background: assumed.
ACCELWATTCH_V100_TENSOR_STATIC_W = 48.94875596
GV100_DIE_MM2 = 815.0
LEAKAGE_W_PER_MM2 = ACCELWATTCH_V100_TENSOR_STATIC_W / GV100_DIE_MM2
HBM_BACKGROUND_W_PER_STACK = 2.0

DEFAULT_HBM_KIND = "HBM2"
DEFAULT_LINK_KIND = "ici"
DEFAULT_NET_KIND = "dcn"

#: The TPUv4-class power budget: TPU v4 maximum chip power 192 W (§23).
TEMPLATE_TDP_W = 192.0

#: Lowest clock as a fraction of the highest (A100 SXM: nvidia-smi supported graphics
#: clocks 210–1410 MHz).
DVFS_MIN_CLOCK_FRACTION = 210.0 / 1410.0
#: Energy per operation ∝ V², V ∝ f over the DVFS range ⇒ ∝ f_ratio ** DVFS_ENERGY_EXPONENT.
DVFS_ENERGY_EXPONENT = 2.0


def dvfs_energy_scale(f_ratio):
    """Dynamic energy per operation at ``f_ratio × f0`` relative to f0: ``f_ratio²`` (array)."""
    f = np.asarray(f_ratio, dtype=np.float64)
    bad = ~np.isfinite(f) | (f < DVFS_MIN_CLOCK_FRACTION * (1 - 1e-12)) | (f > 1 + 1e-12)
    if np.any(bad):
        raise ValueError(f"f_ratio must lie in [{DVFS_MIN_CLOCK_FRACTION:.4g}, 1] "
                         f"(DVFS_MIN_CLOCK_FRACTION to the full clock), got {f[bad].reshape(-1)[0]!r}")
    return f ** DVFS_ENERGY_EXPONENT


def _kinds(name, kind, default, allowed, n):
    return _node.check_kind(name, default if kind is None else kind, allowed, n)


def sram_j_per_byte(buffer_mib, distance_mm, node_factor):
    """Buffer access per byte: bank energy (√capacity up to one bank, Horowitz) × node + wire."""
    cap = np.minimum(np.asarray(buffer_mib, dtype=np.float64) * (1 << 20), SRAM_BANK_BYTES)
    bank = H45_SRAM_8KB_J_PER_BYTE * np.sqrt(cap / H45_SRAM_8KB_BYTES) * node_factor
    return bank + 8.0 * WIRE_J_PER_BIT_MM * distance_mm


def energy_rows(archs, *, process_nm, hbm_kind=None, link_kind=None, net_kind=None):
    """One :data:`ENERGY_DTYPE` record per architecture row (see the module docstring)."""
    rows = _node._rows(archs)
    n = rows.shape[0]
    nodes = _node._node_array(process_nm, n)
    hk = _kinds("hbm_kind", hbm_kind, DEFAULT_HBM_KIND, HBM_KINDS, n)
    lk = _kinds("link_kind", link_kind, DEFAULT_LINK_KIND, LINK_KINDS, n)
    nk = _kinds("net_kind", net_kind, DEFAULT_NET_KIND, NET_KINDS, n)
    factor = _node._lookup(NODE_ENERGY_FACTOR, nodes)
    total, parts = _node.die_area_mm2(rows, process_nm=nodes,
                                      hbm_kind=DEFAULT_HBM_KIND if hbm_kind is None else hbm_kind)
    core = parts["tensor_mm2"] + parts["vector_mm2"] + parts["buffer_mm2"]
    out = np.empty(n, dtype=ENERGY_DTYPE)
    out["mac16_j"] = MAC16_45NM_J * factor
    out["mac8_j"] = MAC8_45NM_J * factor
    out["mac4_j"] = MAC4_45NM_J * factor
    out["vector_op_j"] = VECTOR_OP_45NM_J * factor
    # Mean delivery distance: half the side of the square holding cores and buffer.
    out["sram_j_per_byte"] = sram_j_per_byte(rows["buffer_mib"], 0.5 * np.sqrt(core), factor)
    out["hbm_j_per_byte"] = 8.0 * _node.kind_values(HBM_J_PER_BIT, hk, HBM_KINDS)
    link_bit = _node.kind_values(LINK_J_PER_BIT, lk, LINK_KINDS)
    out["link_j_per_byte"] = 8.0 * link_bit
    out["net_j_per_byte"] = 8.0 * _node.kind_values(NET_J_PER_BIT, nk, NET_KINDS)
    stacks = _node.hbm_stacks_for(rows["hbm_gb_per_s"],
                                  DEFAULT_HBM_KIND if hbm_kind is None else hbm_kind)
    out["static_w"] = LEAKAGE_W_PER_MM2 * total + HBM_BACKGROUND_W_PER_STACK * stacks
    return out


def buffer_bytes_per_array_cycle(tc_width, tc_depth):
    """Weight-stationary operand stream of one array per cycle: (W + D) 16-bit words."""
    return 2.0 * (np.asarray(tc_width, dtype=np.float64) + np.asarray(tc_depth, dtype=np.float64))


def peak_power_w(archs, energy, *, hbm_utilisation=1.0):
    """The template's full-load power of each row, W (float array): its estimate of TDP."""
    rows = _node._rows(archs)
    energy = np.asarray(energy).reshape(-1)
    if energy.dtype != ENERGY_DTYPE or energy.shape[0] != rows.shape[0]:
        raise ValueError("energy must be the ENERGY_DTYPE records of energy_rows, one per arch row")
    u = float(hbm_utilisation)
    if not (0.0 <= u <= 1.0):
        raise ValueError(f"hbm_utilisation must lie in [0, 1], got {hbm_utilisation!r}")
    hz = rows["clock_ghz"] * 1e9
    macs = rows["num_tc"] * rows["tc_width"] * rows["tc_depth"] * hz
    buf = rows["num_tc"] * buffer_bytes_per_array_cycle(rows["tc_width"], rows["tc_depth"]) * hz
    lanes = rows["num_vc"] * rows["vc_width"] * hz
    return (macs * energy["mac16_j"] + buf * energy["sram_j_per_byte"]
            + lanes * energy["vector_op_j"]
            + u * rows["hbm_gb_per_s"] * 1e9 * energy["hbm_j_per_byte"] + energy["static_w"])
