"""Area by process node (issue 28; docs/fidelity-sources.md §23), private to ``phaze.arch``.

The study's component areas (``_area``) come from its Accelergy estimator, whose architecture
file declares ``technology: '22nm'`` (msr-fiddle/phaze, ``Estimator/arch_configs/GEMM/arch/
arch.yaml``): :data:`TEMPLATE_PROCESS_NM` = 22. This module scales them to another node:

- tensor and vector cores (logic) by the ratio of logic transistor densities,
  :data:`LOGIC_MTR_PER_MM2` (template node ÷ target node);
- the shared buffer (SRAM) by the ratio of high-density 6T bitcell areas,
  :data:`SRAM_BITCELL_UM2` (periphery assumed to scale with the bitcell);
- then adds what the template lacks and real dies have: HBM PHY + controller per 1,024-bit
  interface (:data:`HBM_PHY_MM2_PER_1024_BITS` held across nodes,
  :data:`HBM_CTRL_MTR_PER_1024_BITS` scaled by the node's logic density; a stack has
  :data:`HBM_BITS_PER_STACK` bits), SerDes PHY + controller per GB/s of scale-up link and
  network (:data:`SERDES_PHY_MM2_PER_GB_PER_S`, :data:`SERDES_CTRL_MTR_PER_GB_PER_S`), and an
  uncore share (:data:`UNCORE_FRACTION` of the whole die: L2/crossbar, PCIe, command
  processors, clocks; the total is ``(core + buffer + phy + serdes) / (1 - UNCORE_FRACTION)``).

``die_area_mm2(archs, *, process_nm, hbm_stacks=None) -> (total_mm2, breakdown)``: vectorised
over rows; ``process_nm`` a scalar or per-row array of nodes in :data:`NODES_NM`; stacks
default to ``ceil(hbm_gb_per_s / per-stack bandwidth of hbm_kind)`` (:func:`hbm_stacks_for`).
"""
from __future__ import annotations

import numpy as np

from . import _area

#: The node the study's component areas are for (Accelergy arch.yaml ``technology: '22nm'``).
TEMPLATE_PROCESS_NM = 22

#: Logic density, million transistors per mm² (WikiChip / TSMC disclosures; §23 table).
#: 22: Intel 22 nm 16.5; 16/12: TSMC 16FF+ 28.88, 12FFC 33.8; 7: N7 91.2; 6: N6 = N7 × 1.18;
#: 5: N5 171.3; 4: N4 = N5 × 1.06; 3: N3 = N5 × 1.7 (TSMC) = 291.2.
LOGIC_MTR_PER_MM2 = {22: 16.5, 16: 28.88, 12: 33.8, 7: 91.2, 6: 107.6, 5: 171.3, 4: 181.6, 3: 291.2}

#: High-density 6T SRAM bitcell, µm² (IEDM/VLSI disclosures via WikiChip; §23): Intel 22 nm
#: 0.092; TSMC 16FF+ 0.074 (12FFC same cell); N7/N6 0.027; N5/N4 0.021; N3E 0.021 (N3 SRAM
#: barely shrinks: N3B 0.0199 ≈ N5).
SRAM_BITCELL_UM2 = {22: 0.092, 16: 0.074, 12: 0.074, 7: 0.027, 6: 0.027, 5: 0.021, 4: 0.021,
                    3: 0.021}

NODES_NM = tuple(sorted(LOGIC_MTR_PER_MM2))

#: Per-stack bandwidth by HBM generation, GB/s (JEDEC pin rates × 1024 bits / 8; HBM4 2048
#: bits at 8 Gb/s): HBM2 2.4 Gb/s, HBM2e 3.6, HBM3 6.4, HBM3e 9.6.
HBM_GB_PER_S_PER_STACK = {"HBM2": 307.2, "HBM2e": 460.8, "HBM3": 819.2, "HBM3e": 1228.8,
                          "HBM4": 2048.0}

#: HBM interface on the compute die per 1,024 bits (LLMCompass, Zhang et al., ISCA 2024,
#: Table II, from annotated A100 and MI210 die photos; §23): PHY 10.45 mm², held across nodes
#: (analog, bump-limited: "the PHY area remains fixed"); controller 552.743 M transistors,
#: scaled by the node's logic density (:data:`LOGIC_MTR_PER_MM2`).
HBM_PHY_MM2_PER_1024_BITS = 10.45
HBM_CTRL_MTR_PER_1024_BITS = 552.743
#: Interface bits per stack: 1,024 through HBM3e, 2,048 for HBM4 (JESD238).
HBM_BITS_PER_STACK = {"HBM2": 1024, "HBM2e": 1024, "HBM3": 1024, "HBM3e": 1024, "HBM4": 2048}

#: SerDes per GB/s of per-direction bandwidth (LLMCompass's cost model, PrincetonUniversity/
#: LLMCompass cost_model/cost_model.py: one NVLink3 link of A100, 25 GB/s per direction, PHY
#: 1.888 mm² held across nodes, controller 74.632 M transistors scaled by logic density; §23).
#: Applied to link + net GB/s.
SERDES_PHY_MM2_PER_GB_PER_S = 1.888 / 25.0
SERDES_CTRL_MTR_PER_GB_PER_S = 74.632 / 25.0

#: Share of the whole die outside the cores, buffer and PHYs (§23): TPU v1's published
#: floorplan (Jouppi et al., ISCA 2017, Figure 2: "datapath is 67%, ... i/o is 10%, and ...
#: control is just 2% of the die") leaves 1 - 0.67 - 0.10 = 0.23 outside its datapath
#: (matrix unit, buffers, accumulators: phaze's cores and buffer) and its I/O (phaze's
#: PHYs and SerDes).
UNCORE_FRACTION = 0.23


def _node_array(process_nm, n):
    try:
        arr = np.asarray(process_nm, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"process_nm must be a number or an array of numbers among "
                         f"{', '.join(map(str, NODES_NM))}, got {process_nm!r}") from None
    if arr.size == 1:
        arr = np.full(n, arr[0])
    if arr.size != n:
        raise ValueError(f"process_nm must be a scalar or one node per row ({n}), got {arr.size}")
    bad = ~np.isin(arr, np.asarray(NODES_NM, dtype=np.float64))
    if np.any(bad):
        raise ValueError(f"process_nm must be one of {', '.join(map(str, NODES_NM))} nm, "
                         f"got {arr[np.flatnonzero(bad)[0]].item()!r}")
    return arr.astype(np.int64)


def _lookup(table, nodes):
    keys = np.asarray(sorted(table), dtype=np.int64)
    vals = np.asarray([table[k] for k in keys], dtype=np.float64)
    return vals[np.searchsorted(keys, nodes)]


def logic_scale(process_nm):
    """Area factor of logic from the template node to ``process_nm`` (array)."""
    nodes = _node_array(process_nm, np.size(process_nm))
    return LOGIC_MTR_PER_MM2[TEMPLATE_PROCESS_NM] / _lookup(LOGIC_MTR_PER_MM2, nodes)


def sram_scale(process_nm):
    """Area factor of SRAM from the template node to ``process_nm`` (array)."""
    nodes = _node_array(process_nm, np.size(process_nm))
    return _lookup(SRAM_BITCELL_UM2, nodes) / SRAM_BITCELL_UM2[TEMPLATE_PROCESS_NM]


def _rows(archs):
    if isinstance(archs, np.void):
        archs = np.array([archs])
    if not isinstance(archs, np.ndarray) or archs.dtype.names is None:
        raise ValueError("archs must be a numpy structured array with the fields of phaze.arch.ARCH_DTYPE")
    return archs.reshape(-1)


def check_kind(name, kind, allowed, n):
    """``kind`` (a name or one per row) as int codes into ``allowed`` (array of n); refuses others."""
    if isinstance(kind, str):
        if kind not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {kind!r}")
        return np.full(n, allowed.index(kind), dtype=np.int64)
    arr = np.asarray(kind, dtype=object).reshape(-1)
    if arr.size == 1:
        return check_kind(name, arr[0] if isinstance(arr[0], str) else repr(arr[0]), allowed, n)
    if arr.size != n:
        raise ValueError(f"{name} must be one name or one per row ({n}), got {arr.size}")
    uniq, inverse = np.unique(arr.astype(str), return_inverse=True)
    for v in uniq.tolist():
        if v not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")
    return np.array([allowed.index(v) for v in uniq], dtype=np.int64)[inverse.reshape(-1)]


def kind_values(table, codes, allowed):
    """``table[allowed[code]]`` for each code (float array)."""
    return np.array([table[k] for k in allowed], dtype=np.float64)[codes]


def hbm_stacks_for(hbm_gb_per_s, hbm_kind):
    """Stacks needed for the bandwidth: ceil(hbm_gb_per_s / per-stack GB/s of the kind)."""
    bw = np.asarray(hbm_gb_per_s, dtype=np.float64).reshape(-1)
    allowed = tuple(HBM_GB_PER_S_PER_STACK)
    per = kind_values(HBM_GB_PER_S_PER_STACK, check_kind("hbm_kind", hbm_kind, allowed, bw.size),
                      allowed)
    return np.ceil(bw / per - 1e-9)


def hbm_interface_mm2(hbm_kind, logic_mtr_per_mm2):
    """PHY + controller of one stack of ``hbm_kind`` at a node of the given logic density, mm²."""
    density = np.asarray(logic_mtr_per_mm2, dtype=np.float64).reshape(-1)
    allowed = tuple(HBM_GB_PER_S_PER_STACK)
    bits = kind_values(HBM_BITS_PER_STACK, check_kind("hbm_kind", hbm_kind, allowed, density.size),
                       allowed)
    return bits / 1024.0 * (HBM_PHY_MM2_PER_1024_BITS + HBM_CTRL_MTR_PER_1024_BITS / density)


def die_area_mm2(archs, *, process_nm, hbm_stacks=None, hbm_kind="HBM2"):
    """Die area of each row at ``process_nm``, mm², and its breakdown.

    Returns ``(total, breakdown)``; breakdown keys ``tensor_mm2``, ``vector_mm2``,
    ``buffer_mm2``, ``hbm_phy_mm2``, ``serdes_mm2``, ``uncore_mm2`` (float arrays, summing
    to ``total``). ``hbm_stacks`` None → :func:`hbm_stacks_for` of the row's bandwidth and
    ``hbm_kind`` (default HBM2, the tpuv4 preset's).
    """
    rows = _rows(archs)
    n = rows.shape[0]
    nodes = _node_array(process_nm, n)
    density = _lookup(LOGIC_MTR_PER_MM2, nodes)
    ls = LOGIC_MTR_PER_MM2[TEMPLATE_PROCESS_NM] / density
    ss = _lookup(SRAM_BITCELL_UM2, nodes) / SRAM_BITCELL_UM2[TEMPLATE_PROCESS_NM]
    tensor = rows["num_tc"] * _area.tensor_core_mm2(rows["tc_width"], rows["tc_depth"]) * ls
    vector = rows["num_vc"] * _area.vector_core_mm2(rows["vc_width"]) * ls
    buffer = _area.buffer_mm2(rows["buffer_mib"]) * ss
    if hbm_stacks is None:
        stacks = hbm_stacks_for(rows["hbm_gb_per_s"], hbm_kind)
    else:
        stacks = np.asarray(hbm_stacks, dtype=np.float64).reshape(-1)
        if stacks.size == 1:
            stacks = np.full(n, stacks[0])
        if stacks.size != n or np.any(~np.isfinite(stacks)) or np.any(stacks < 0):
            raise ValueError(f"hbm_stacks must be a count >= 0, scalar or one per row ({n})")
    phy = stacks * hbm_interface_mm2(hbm_kind, density)
    with np.errstate(over="ignore", invalid="ignore"):   # a rate near the float maximum:
        serdes = ((rows["link_gb_per_s"] + rows["net_gb_per_s"])
                  * (SERDES_PHY_MM2_PER_GB_PER_S + SERDES_CTRL_MTR_PER_GB_PER_S / density))
        inner = tensor + vector + buffer + phy + serdes     # inf mm², no warning
        total = inner / (1.0 - UNCORE_FRACTION)
        uncore = np.where(np.isfinite(inner), total - inner, np.inf)
    breakdown = dict(tensor_mm2=tensor, vector_mm2=vector, buffer_mm2=buffer, hbm_phy_mm2=phy,
                     serdes_mm2=serdes, uncore_mm2=uncore)
    return total, breakdown
