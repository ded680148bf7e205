"""Template vs published die area and TDP of real chips (issue 28, item 6). Reported, not fitted.

For each preset: the template's die area (``phaze.arch.die_area_mm2`` of the preset's knobs at
its node, HBM stacks from its bandwidth and kind) and its full-load power
(``phaze.arch.peak_power_w``) next to the published die area and TDP (docs/fidelity-sources.md
§23), with the error ``(template − published) / published``. No parameter is tuned to these
rows. Multi-die chips (B200, MI300X) are compared with the sum of their compute dies.

Run: ``python3 bench/bench_real_chips.py``
"""
from __future__ import annotations

import _bench_env  # noqa: F401  (the repository on sys.path)
import json
import pathlib

import phaze.arch as arch
from phaze.arch import _node

CHIPS = pathlib.Path(arch.__file__).parent / "chips"

#: Published die area (mm²) and TDP (W), each with its source; None = unpublished.
PUBLISHED = {
    "a100-80g": (826.0, 400.0, "NVIDIA A100 whitepaper (GA100 826 mm², TSMC N7); A100 SXM4 400 W"),
    "h100-sxm": (814.0, 700.0, "NVIDIA H100 whitepaper (GH100 814 mm², TSMC 4N); H100 SXM5 700 W"),
    "b200": (1600.0, 1000.0, "NVIDIA Blackwell: two reticle-limited dies (per-die area unpublished, "
             "taken as 2 x 800 mm²); B200 1,000 W (preset)"),
    "tpuv4": (780.0, 192.0, "Jouppi et al. ISCA 2023: TPU v4 die < 780 mm² (an upper bound); "
              "192 W maximum (Google Cloud TPU v4 documentation)"),
    "tpu-v5p": (None, None, "die area and TDP unpublished"),
    "mi300x": (920.0, 750.0, "8 XCDs (TSMC N5) ≈ 115 mm² each (press estimates; AMD has not "
               "published) = 920 mm², the four N6 IODs excluded; MI300X 750 W (AMD)"),
}


def _pct(t, p):
    return "n/a" if p is None else f"{100.0 * (t - p) / p:+.0f}%"


def main():
    print("| chip | node nm | template die mm² | published mm² | error | template peak W "
          "| published TDP W | error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (area_pub, tdp_pub, _src) in PUBLISHED.items():
        spec = json.loads((CHIPS / f"{name}.json").read_text())
        node = spec.get("process_nm") or _node.PRESET_PROCESS_NM[name]
        row = arch.presets.get(name)
        area, _ = arch.die_area_mm2(row, process_nm=node, hbm_kind=spec["hbm_kind"])
        energy = arch.energy_rows(row, process_nm=node, hbm_kind=spec["hbm_kind"],
                                  link_kind=spec["link_kind"], net_kind=spec["net_kind"])
        power = arch.peak_power_w(row, energy)
        a, w = float(area[0]), float(power[0])
        print(f"| {name} | {node} | {a:.0f} | {'unpublished' if area_pub is None else f'{area_pub:.0f}'} "
              f"| {_pct(a, area_pub)} | {w:.0f} | {'unpublished' if tdp_pub is None else f'{tdp_pub:.0f}'} "
              f"| {_pct(w, tdp_pub)} |")
    print()
    print("| chip | chip cost USD, template die | chip cost USD, published die | of which HBM USD |")
    print("|---|---|---|---|")
    for name, (area_pub, _tdp, _src) in PUBLISHED.items():
        spec = json.loads((CHIPS / f"{name}.json").read_text())
        node = spec.get("process_nm") or _node.PRESET_PROCESS_NM[name]
        row = arch.presets.get(name)
        area, _ = arch.die_area_mm2(row, process_nm=node, hbm_kind=spec["hbm_kind"])
        kw = dict(process_nm=node, hbm_gib=float(row["hbm_gib"][0]), hbm_kind=spec["hbm_kind"])
        t, parts = arch.chip_cost_usd(area, breakdown=True, **kw)
        p = "unpublished" if area_pub is None else f"{float(arch.chip_cost_usd(area_pub, **kw)[0]):,.0f}"
        print(f"| {name} | {float(t[0]):,.0f} | {p} | {float(parts['hbm_usd'][0]):,.0f} |")


if __name__ == "__main__":
    main()
