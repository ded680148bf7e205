"""``phaze plot``: throughput (or normalised score) vs area of a search's result file, or,
for a fixed system (``--arch``), each row's samples/s. Part of the command line
(``phaze.cli``)."""
from __future__ import annotations

from .._validate import output_error


def cmd_plot(args) -> int:
    """``phaze plot``: throughput (or normalised score) vs area of a result file."""
    from .. import search

    import numpy as np

    result = search.load_result(args.file)
    per_arch, front = result.per_arch(), result.pareto()
    if not (per_arch["score"] > 0).any() and not (np.asarray(front["score"]) > 0).any():
        raise ValueError(f"{args.file} has nothing to plot: it holds no feasible architecture "
                         f"and no Pareto front")
    try:
        _plot_result(result, args.out, per_arch, front)
    except OSError as exc:
        raise output_error(exc, f"-o/--out: cannot write the image {args.out!r}") from None
    print(f"wrote {args.out}")
    return 0


def _plot_fixed_system(result, out_path, plt) -> None:
    """A fixed-system result (one chip: no area axis to draw): each row's samples/s (model,
    microbatch, recomputation), the best plan per model marked."""
    t = result.table
    rows = [i for i in range(len(t["model"])) if bool(t["feasible"][i])]
    labels = [f"{t['model'][i]}  mb {int(t['microbatch'][i])}  rc {t['recompute'][i]}"
              for i in rows]
    values = [float(t["samples_per_s"][i]) for i in rows]
    best = {n: (r or {}).get("samples_per_s") for n, r in
            ((result.best or {}).get("plans") or {}).items()}
    colors = ["C3" if best.get(str(t["model"][i])) == float(t["samples_per_s"][i]) else "0.6"
              for i in rows]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.3 * max(len(rows), 1)))
    ax.barh(range(len(rows)), values, color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("samples/s (best plan of each row; red: each model's best)")
    chip = (result.metadata.get("chip") or {}).get("name") or \
        (result.metadata.get("inputs") or {}).get("arch")
    ax.set_title(f"phaze search on {chip}: {', '.join(result.models)}")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)


def _plot_power(result, ax, front3) -> None:
    """Samples/s vs power per chip (issue 28): each architecture's best row, and the
    throughput × area × power front (``SearchResult.pareto_power``) marked."""
    import numpy as np

    t = result.table
    name = result.models[0]
    ok = ((t["model"].astype(str) == name) & np.asarray(t["feasible"], dtype=bool)
          & np.isfinite(np.asarray(t["power_w"], dtype=np.float64)))
    ax.scatter(t["power_w"][ok], t["samples_per_s"][ok], s=4, c="0.75", label="rows")
    ax.scatter(front3["power_w"], front3["samples_per_s"], s=14, c="C3",
               label="throughput × area × power front")
    cap = (result.metadata.get("inputs") or {}).get("max_power_w")
    if cap is not None and np.isfinite(cap):
        ax.axvline(cap, c="C1", ls="--", lw=1, label=f"power budget {cap:g} W")
    ax.set_xlabel("power per chip (W)")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{name}: throughput vs power")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _plot_result(result, out_path, per_arch, front) -> None:
    """Throughput (or normalised score) vs area: every architecture (``per_arch``, from
    ``result.per_arch()``), the frontier (``front``, ``result.pareto()``: the stored front
    of a loaded file, as a .json keeps only the top rows), baselines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install 'phaze[plot]'") from None
    if result.metadata.get("chip") or (result.metadata.get("inputs") or {}).get("arch"):
        _plot_fixed_system(result, out_path, plt)
        return
    several = len(result.models) > 1
    partial = result.metadata.get("pareto_exact") is False
    ylabel = "mean normalised throughput" if several else "samples/s"
    front3 = result.pareto_power()
    if front3["arch_id"].size:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        _plot_power(result, ax2, front3)
    else:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = per_arch["score"] > 0
    ax.scatter(per_arch["area_mm2"][ok], per_arch["score"][ok], s=6, c="0.7", label="architectures")
    if front["arch_id"].size:
        ax.step(front["area_mm2"], front["score"], where="post", c="C3", lw=1.5, marker=".",
                label="Pareto front (partial: --prune best)" if partial else "Pareto front")
    best = result.best or {}
    best_y = best.get("score") if several else best.get("samples_per_s")
    if best.get("feasible") and best_y is not None and best.get("area_mm2") is not None:
        ax.scatter([best["area_mm2"]], [best_y], marker="o", s=60, c="C3", zorder=5,
                   label="best")
    if not several:
        name = result.models[0]
        markers = {"tpuv4_searched": ("*", "C0"), "tpuv4_fixed": ("X", "C1"),
                   "block_optimal": ("^", "C2")}
        for key, (marker, color) in markers.items():
            row = (result.baselines.get(key, {}).get("models", {}) or {}).get(name)
            if row and row.get("feasible") and row.get("area_mm2") is not None:
                ax.scatter([row["area_mm2"]], [row["samples_per_s"]], marker=marker, s=90, c=color,
                           zorder=6, label=key.replace("_", " "))
    ax.set_xlabel("area (mm²)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"phaze search: {', '.join(result.models)}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
