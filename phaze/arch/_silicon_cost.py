"""Silicon and running cost (issue 28; docs/fidelity-sources.md §23), private to ``phaze.arch``.

- :func:`chip_cost_usd` ``(area_mm2, *, process_nm, hbm_gib, hbm_kind=None, breakdown=False, ...)``:
  die cost = wafer price / (gross dies per wafer × yield), for every chiplet; + HBM $/GiB ×
  capacity + packaging (CoWoS-class interposer and assembly) per chip. Gross dies per 300 mm
  wafer: ``π(d/2)²/A − πd/√(2A)``; yield: negative binomial ``(1 + A·D0/α)^−α``. A die larger
  than the reticle (:data:`RETICLE_MM2`, 26 × 33 mm) is split into ``ceil(A / RETICLE_MM2)``
  equal chiplets, each priced alone (no die-to-die area added: stated).
- :func:`run_cost_usd` ``(*, chips, chip_cost_usd, seconds, power_w, life_years, pue,
  usd_per_kwh, host_overhead)``: ``chips × chip_cost × (1 + host_overhead) × seconds / life``
  + ``chips × power_w × (1 + host_overhead) × seconds × pue × usd_per_kwh / 3.6e6``.
- :func:`usd_per_million_tokens` ``(run_cost_usd, tokens)``: ``1e6 × cost / tokens``.

Every price is a keyword with a default named constant here.
"""
from __future__ import annotations

import numpy as np

from . import _node
from ._fields import HBM_KINDS

#: Foundry sale price per 300 mm wafer, USD (CSET, "AI Chips: What They Are and Why They
#: Matter", 2020: 16/12 nm 3,984; 10 nm 5,992; 7 nm 9,346; 5 nm 16,988). N6 = N7 and N4 = N5
#: (same families); 3 nm ≈ 20,000 (industry reports, 2021); 22 nm: 28 nm's ≈ 3,000.
WAFER_USD = {22: 3000.0, 16: 3984.0, 12: 3984.0, 7: 9346.0, 6: 9346.0, 5: 16988.0, 4: 16988.0,
             3: 20000.0}
WAFER_DIAMETER_MM = 300.0
#: Defect density D0, defects per cm² (TSMC: N7 0.09 three quarters into volume, N5 0.10–0.11
#: at its 2020 symposium, AnandTech 2020; N3E "similar to" N5, TSMC European Technology
#: Symposium 2024, so 3 nm = 0.10; 16/12 nm = the 14 nm row 0.08 and 22 nm = the 20/28 nm rows
#: 0.07 of Chiplet Actuary's cost model, Feng & Ma, DAC 2022, ``parameter.ini``; §23).
DEFECT_PER_CM2 = {22: 0.07, 16: 0.08, 12: 0.08, 7: 0.09, 6: 0.09, 5: 0.10, 4: 0.10, 3: 0.10}
#: Negative-binomial clustering parameter α: 3, the value LLMCompass's supply-chain cost model
#: (Zhang et al., ISCA 2024) calls its yield with (Chiplet Actuary, DAC 2022, uses 10; §23).
YIELD_CLUSTER_ALPHA = 3.0
#: Reticle field, mm² (26 mm × 33 mm).
RETICLE_MM2 = 26.0 * 33.0
#: HBM price per GiB, USD (§23): HBM2 8-Hi stack $120 for 8 GB (Gamers Nexus, 2017) = 15;
#: HBM2e assumed = HBM2; HBM3: H100's 80 GB ≈ $1,350 (Raymond James BOM) = 16.875; HBM3e:
#: B200's 192 GB ≈ $2,900 (Silicon Analysts / Epoch AI) = 15.10; HBM4 = HBM3e × 1.3
#: (TrendForce: "at least 30 % more expensive than HBM3E").
HBM_USD_PER_GIB = {"HBM2": 120.0 / 8, "HBM2e": 120.0 / 8, "HBM3": 1350.0 / 80,
                   "HBM3e": 2900.0 / 192, "HBM4": 2900.0 / 192 * 1.3}
DEFAULT_HBM_KIND = "HBM2"
#: CoWoS-class packaging per chip, USD: H100's CoWoS-S ≈ $750 (Silicon Analysts' B200 cost
#: breakdown, which puts B200's CoWoS-L at ≈ $1,100; §23).
PACKAGING_USD = 750.0

#: Service life the capex is amortised over, years (Meta's 10-K: servers five years from
#: Q4 2022; Amazon back to five years for a subset from 2025; Microsoft, Alphabet six; §23).
LIFE_YEARS = 5.0
#: Power usage effectiveness (Uptime Institute global survey 2023: 1.58).
PUE = 1.58
#: Electricity price, USD/kWh (EIA, US industrial average 2023: 8.06 ¢/kWh).
USD_PER_KWH = 0.0806
#: Host, network and rack overhead on a chip's capex and power (NVIDIA DGX H100: 10.2 kW for
#: 8 × 700 W GPUs ⇒ 10.2 / 5.6 − 1 = 0.82).
HOST_OVERHEAD = 0.82

SECONDS_PER_YEAR = 365.25 * 86400.0


def _positive(name, value):
    arr = np.asarray(value, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return arr


def _nonneg(name, value):
    arr = np.asarray(value, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return arr


def gross_dies_per_wafer(area_mm2, diameter_mm=WAFER_DIAMETER_MM):
    """Whole dies of ``area_mm2`` on a round wafer: π(d/2)²/A − πd/√(2A), floored, ≥ 0."""
    a = _positive("area_mm2", area_mm2)
    d = float(diameter_mm)
    return np.maximum(np.floor(np.pi * (d / 2) ** 2 / a - np.pi * d / np.sqrt(2 * a)), 0.0)


def die_yield(area_mm2, defect_per_cm2, alpha=YIELD_CLUSTER_ALPHA):
    """Negative-binomial yield (1 + A·D0/α)^−α with A in cm²."""
    a = _positive("area_mm2", area_mm2) / 100.0
    return (1.0 + a * np.asarray(defect_per_cm2, dtype=np.float64) / alpha) ** (-alpha)


def chip_cost_usd(area_mm2, *, process_nm, hbm_gib, hbm_kind=None, breakdown=False,
                  wafer_usd=None, defect_per_cm2=None, alpha=YIELD_CLUSTER_ALPHA,
                  hbm_usd_per_gib=None, packaging_usd=PACKAGING_USD,
                  reticle_mm2=RETICLE_MM2):
    """Manufacturing cost of each chip, USD (float array); with ``breakdown=True`` also a dict.

    ``wafer_usd`` / ``defect_per_cm2`` / ``hbm_usd_per_gib``: None → the tables above by node /
    kind, or a number (or per-row array) overriding them. Breakdown keys: ``die_usd``,
    ``hbm_usd``, ``packaging_usd``, ``chiplets``, ``dies_per_wafer``, ``yield``.
    """
    area = _positive("area_mm2", area_mm2).reshape(-1)
    try:
        n = np.broadcast(area, np.asarray(process_nm, dtype=object).reshape(-1),
                         np.asarray(hbm_gib, dtype=object).reshape(-1)).size
    except ValueError:
        raise ValueError("area_mm2, process_nm and hbm_gib must be scalars or arrays of one "
                         "common length") from None
    area = area * np.ones(n)
    nodes = _node._node_array(process_nm, n)
    gib = _nonneg("hbm_gib", hbm_gib) * np.ones(n)
    kinds = _node.check_kind("hbm_kind", DEFAULT_HBM_KIND if hbm_kind is None else hbm_kind,
                             HBM_KINDS, n)
    wafer = (_node._lookup(WAFER_USD, nodes) if wafer_usd is None
             else _positive("wafer_usd", wafer_usd) * np.ones(n))
    d0 = (_node._lookup(DEFECT_PER_CM2, nodes) if defect_per_cm2 is None
          else _nonneg("defect_per_cm2", defect_per_cm2) * np.ones(n))
    per_gib = (_node.kind_values(HBM_USD_PER_GIB, kinds, HBM_KINDS) if hbm_usd_per_gib is None
               else _nonneg("hbm_usd_per_gib", hbm_usd_per_gib) * np.ones(n))
    pack = _nonneg("packaging_usd", packaging_usd) * np.ones(n)
    chiplets = np.ceil(area / float(reticle_mm2) - 1e-12)
    piece = area / chiplets
    dpw = gross_dies_per_wafer(piece)
    if np.any(dpw < 1):
        raise ValueError("area_mm2 leaves no whole die on a 300 mm wafer")
    y = die_yield(piece, d0, alpha)
    die = chiplets * wafer / (dpw * y)
    hbm = gib * per_gib
    total = die + hbm + pack
    if breakdown:
        return total, dict(die_usd=die, hbm_usd=hbm, packaging_usd=pack, chiplets=chiplets,
                           dies_per_wafer=dpw, **{"yield": y})
    return total


def run_cost_usd(*, chips, chip_cost_usd, seconds, power_w, life_years=LIFE_YEARS, pue=PUE,
                 usd_per_kwh=USD_PER_KWH, host_overhead=HOST_OVERHEAD):
    """Cost of a run, USD: amortised capex of the chips (and hosts) + energy × PUE × price."""
    chips = _positive("chips", chips)
    cost = _nonneg("chip_cost_usd", chip_cost_usd)
    secs = _nonneg("seconds", seconds)
    power = _nonneg("power_w", power_w)
    life = _positive("life_years", life_years)
    pue_ = _positive("pue", pue)
    if np.any(pue_ < 1):
        raise ValueError(f"pue must be >= 1, got {pue!r}")
    price = _nonneg("usd_per_kwh", usd_per_kwh)
    over = _nonneg("host_overhead", host_overhead)
    capex = chips * cost * (1 + over) * secs / (life * SECONDS_PER_YEAR)
    energy_kwh = chips * power * (1 + over) * secs / 3.6e6
    return capex + energy_kwh * pue_ * price


def usd_per_million_tokens(run_cost_usd, tokens):
    """USD per million tokens: 1e6 × run cost / tokens."""
    return 1e6 * _nonneg("run_cost_usd", run_cost_usd) / _positive("tokens", tokens)
