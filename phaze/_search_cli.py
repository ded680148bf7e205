"""``phaze search``, ``phaze evaluate`` and ``phaze plot``: options and handlers (used by phaze.cli)."""
from __future__ import annotations

import json
import sys


def _int_list(text):
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected a comma-separated list of integers, got {text!r}") from None


def _float_list(text):
    try:
        return [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected a comma-separated list of numbers, got {text!r}") from None


_RECOMPUTE = {"off": (False,), "on": (True,), "both": (False, True)}


def add_search_arguments(p) -> None:
    p.add_argument("--model", action="append", default=[],
                   help="zoo model name (repeat or comma-separate for several; see `phaze models`)")
    p.add_argument("--hf-config", action="append", default=[], metavar="PATH",
                   help="Hugging Face config.json of a model to search (repeatable)")
    p.add_argument("--devices", type=int, default=1024, help="accelerators (default 1024)")
    p.add_argument("--global-batch", type=int, default=4096, help="samples per batch (default 4096)")
    p.add_argument("--microbatch", default="1,2,4,8", help="microbatch sizes (default 1,2,4,8)")
    p.add_argument("--hbm-gib", default="32,64,80", help="HBM capacities in GiB (default 32,64,80)")
    p.add_argument("--recompute", choices=sorted(_RECOMPUTE), default="both",
                   help="activation recomputation (default both)")
    p.add_argument("--tp", default="1,2,4,8", help="tensor-parallel widths (default 1,2,4,8)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--space-every", type=int, default=1, metavar="K",
                   help="keep every K-th architecture of the default space (quick looks)")
    p.add_argument("--prune", action="store_true",
                   help="skip points whose throughput upper bound is below the best found "
                        "(same best answer)")
    p.add_argument("--out", help="result file: .csv, .csv.gz, .json or .parquet (written per chunk)")
    p.add_argument("--resume", action="store_true", help="continue the sweep recorded in --out")
    p.add_argument("--address", help="Dask scheduler tcp://HOST:PORT (needs phaze[dask])")
    p.add_argument("--workers", type=int, help="local worker processes (default: all cores)")
    p.add_argument("--serial", action="store_true", help="run in this process (no worker pool)")
    p.add_argument("--no-baselines", action="store_true", help="skip the three baselines")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress on stderr (default: when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def _models_from_args(args):
    from . import models

    out = [name.strip() for item in args.model for name in item.split(",") if name.strip()]
    for path in args.hf_config:
        out.append(models.from_hf_config(path))
    if not out:
        raise ValueError("give at least one --model or --hf-config")
    return out


def cmd_search(args) -> int:
    from . import arch, search

    model_list = _models_from_args(args)
    every = args.space_every
    if every < 1:
        raise ValueError(f"--space-every must be a positive integer, got {every}")
    space = None if every == 1 else arch.ArchSpace.default().configs[::every]
    try:
        result = search.search(
            model_list, devices=args.devices, global_batch=args.global_batch,
            microbatch=_int_list(args.microbatch), hbm_gib=_float_list(args.hbm_gib),
            recompute=_RECOMPUTE[args.recompute], tensor_parallel=_int_list(args.tp), space=space,
            optimizer=args.optimizer, prune=args.prune,
            executor="serial" if args.serial else None, progress=args.progress, out=args.out,
            resume=args.resume, workers=args.workers, address=args.address,
            baselines=not args.no_baselines)
    except KeyboardInterrupt:
        if args.out:
            print(f"phaze search: interrupted; finished chunks are in {args.out} "
                  f"(continue with --resume)", file=sys.stderr)
        raise
    print(result.format_summary())
    if args.out:
        print(f"results: {args.out}")
    return 0


def add_evaluate_arguments(p) -> None:
    p.add_argument("--model", help="zoo model name")
    p.add_argument("--hf-config", metavar="PATH", help="Hugging Face config.json instead of --model")
    p.add_argument("--arch", default="tpuv4", help="architecture preset (default tpuv4)")
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel width t")
    p.add_argument("--pp", type=int, required=True, help="pipeline stages p")
    p.add_argument("--dp", type=int, required=True, help="data-parallel degree d")
    p.add_argument("--microbatch", type=int, default=1)
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--devices", type=int, help="devices available (default t·p·d)")
    p.add_argument("--global-batch", type=int, default=4096)
    p.add_argument("--hbm-gib", type=float, help="HBM per chip, GiB (default: the preset's)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")


def cmd_evaluate(args) -> int:
    from . import models, search

    if bool(args.model) == bool(args.hf_config):
        raise ValueError("give exactly one of --model or --hf-config")
    model = args.model or models.from_hf_config(args.hf_config)
    r = search.evaluate_point(model, args.arch, args.tp, args.pp, args.dp, args.microbatch,
                              args.recompute, devices=args.devices, global_batch=args.global_batch,
                              hbm_gib=args.hbm_gib, optimizer=args.optimizer)
    if args.json:
        from ._search_io import json_safe

        print(json.dumps(json_safe(r), indent=1))
        return 0
    print(f"{r['model']} on {args.arch}: t={r['tensor_parallel']} p={r['pipeline_parallel']} "
          f"d={r['data_parallel']} microbatch {r['microbatch']} recompute "
          f"{'on' if r['recompute'] else 'off'}, {r['devices']} devices, HBM {r['hbm_gib']:g} GiB")
    if r["feasible"]:
        b = r["breakdown"]
        print(f"time per batch {r['time_per_batch_s']:.6g} s   {r['samples_per_s']:,.2f} samples/s   "
              f"{r['tokens_per_s']:,.0f} tokens/s")
        print(f"  steady pipeline {b['steady_s']:.6g} s + bubble {b['bubble_s']:.6g} s + gradient sync "
              f"{b['grad_sync_s']:.6g} s; critical stage {b['critical_stage']}: compute "
              f"{b['critical_compute_s']:.6g} s + communication {b['critical_communication_s']:.6g} s "
              f"per microbatch")
    else:
        print(f"infeasible: {r['reason']}")
    print(f"{'stage':>5} {'layers':>9} {'dev':>4} {'compute_s':>11} {'comm_s':>11} {'load_s':>11} "
          f"{'memory GiB':>10} {'of':>6}")
    for i, s in enumerate(r["stages"]):
        print(f"{i + 1:>5} {s['layers'][0]:>4}-{s['layers'][1]:<4} {s['devices']:>4} "
              f"{s['compute_s']:>11.5g} {s['communication_s']:>11.5g} {s['load_s']:>11.5g} "
              f"{s['memory_bytes'] / 2**30:>10.2f} {s['memory_limit_bytes'] / 2**30:>6.1f}"
              f"{'' if s['fits'] else '  (does not fit)'}")
    return 0


def add_plot_arguments(p) -> None:
    p.add_argument("file", help="result file of phaze search (.csv, .csv.gz, .json, .parquet)")
    p.add_argument("-o", "--out", default="pareto.png", help="image to write (default pareto.png)")


def cmd_plot(args) -> int:
    from . import search

    result = search.load_result(args.file)
    if not len(result):
        raise ValueError(f"{args.file} holds no evaluated points")
    plot_result(result, args.out)
    print(f"wrote {args.out}")
    return 0


def plot_result(result, out_path) -> None:
    """Throughput (or normalised score) vs area: every architecture, the frontier, baselines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install 'phaze[plot]'") from None
    from .search import _per_arch

    per_arch = _per_arch(result.table, result.models)
    front = result.pareto()
    several = len(result.models) > 1
    ylabel = "mean normalised throughput" if several else "samples/s"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = per_arch["score"] > 0
    ax.scatter(per_arch["area_mm2"][ok], per_arch["score"][ok], s=6, c="0.7", label="architectures")
    if front["arch_id"].size:
        ax.step(front["area_mm2"], front["score"], where="post", c="C3", lw=1.5, label="Pareto front")
    best = result.best or {}
    if best.get("feasible") and not several:
        ax.scatter([best["area_mm2"]], [best["samples_per_s"]], marker="o", s=60, c="C3", zorder=5,
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
