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

import phaze.arch as arch

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


def rows():
    """One pass over the presets: each resolved once (``phaze.arch.resolve_chip``), its node
    and HBM/link/network kinds read off the chip record, area, power and cost computed."""
    out = []
    for name, (area_pub, tdp_pub, _src) in PUBLISHED.items():
        chip = arch.resolve_chip(name)
        if chip.process_nm is None:
            raise ValueError(f"{name}: the chip file gives no process_nm")
        node = int(chip.process_nm)
        row = chip.row
        area, _ = arch.die_area_mm2(row, process_nm=node, hbm_kind=chip.hbm_kind)
        energy = arch.energy_rows(row, process_nm=node, hbm_kind=chip.hbm_kind,
                                  link_kind=chip.link_kind, net_kind=chip.net_kind)
        power = arch.peak_power_w(row, energy)
        kw = dict(process_nm=node, hbm_gib=float(row["hbm_gib"][0]), hbm_kind=chip.hbm_kind)
        cost, parts = arch.chip_cost_usd(area, breakdown=True, **kw)
        cost_pub = None if area_pub is None else float(arch.chip_cost_usd(area_pub, **kw)[0])
        out.append(dict(name=name, node=node, area=float(area[0]), area_pub=area_pub,
                        power=float(power[0]), tdp_pub=tdp_pub, cost=float(cost[0]),
                        cost_pub=cost_pub, hbm_usd=float(parts["hbm_usd"][0])))
    return out


def _pub(x):
    return "unpublished" if x is None else f"{x:.0f}"


def main():
    table = rows()
    print("| chip | node nm | template die mm² | published mm² | error | template peak W "
          "| published TDP W | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['name']} | {r['node']} | {r['area']:.0f} | {_pub(r['area_pub'])} "
              f"| {_pct(r['area'], r['area_pub'])} | {r['power']:.0f} | {_pub(r['tdp_pub'])} "
              f"| {_pct(r['power'], r['tdp_pub'])} |")
    print()
    print("| chip | chip cost USD, template die | chip cost USD, published die | of which HBM USD |")
    print("|---|---|---|---|")
    for r in table:
        p = "unpublished" if r["cost_pub"] is None else f"{r['cost_pub']:,.0f}"
        print(f"| {r['name']} | {r['cost']:,.0f} | {p} | {r['hbm_usd']:,.0f} |")


if __name__ == "__main__":
    main()
