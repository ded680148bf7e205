"""Command-line interface: ``phaze search | evaluate | place | models | archs | plot``.

Thin layer on top of the public modules: parse, call, print. Errors in user
input are printed as one line on stderr with exit status 2.
"""
from __future__ import annotations

import argparse
import os
import sys


def _cmd_models(args) -> int:
    from . import models

    rows = [models.get(n) for n in models.names()]
    print(f"{'name':<18} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} {'ffn':>6} "
          f"{'vocab':>6} {'seq':>5} {'act':<7} {'params':>16}")
    for m in rows:
        print(f"{m.name:<18} {m.n_layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>4} "
              f"{m.ffn_hidden:>6} {m.vocab:>6} {m.seq_len:>5} {m.activation:<7} {m.n_params:>16,}")
    return 0


def _cmd_archs(args) -> int:
    from . import arch

    print(f"{'name':<10} {'tensor cores':>16} {'vector cores':>13} {'buf MiB':>7} {'HBM GiB':>7} "
          f"{'HBM GB/s':>8} {'GHz':>5} {'TFLOP/s':>7} {'link GB/s':>9} {'net GB/s':>8} {'node':>5} "
          f"{'area mm2':>8}")
    for name in arch.presets.names():
        r = arch.presets.get(name)
        peak = arch.peak_flops(r)[0] / 1e12
        r = r[0]
        tcs = f"{r['num_tc']} x {r['tc_width']}x{r['tc_depth']}"
        vcs = f"{r['num_vc']} x {r['vc_width']}"
        print(f"{name:<10} {tcs:>16} {vcs:>13} {r['buffer_mib']:>7g} {r['hbm_gib']:>7g} "
              f"{r['hbm_gb_per_s']:>8g} {r['clock_ghz']:>5g} {peak:>7.1f} {r['link_gb_per_s']:>9g} "
              f"{r['net_gb_per_s']:>8g} {r['node_size']:>5} {r['area_mm2']:>8.2f}")
    space = arch.ArchSpace.default()
    cfg = space.configs
    print(f"\ndefault space: {len(space):,} architectures, budget {space.budget_mm2:.2f} mm2 (area of tpuv4), "
          f"kept when {space.lower_fraction:g} <= area/budget <= 1 (lower bound waived for 1 TC or 1 VC); "
          f"area {cfg['area_mm2'].min():.2f} to {cfg['area_mm2'].max():.2f} mm2")
    return 0


def _cmd_place(args) -> int:
    import json

    from . import placement

    problem = placement.load_phaze_json(args.file)
    plan = placement.solve(problem)
    if plan.feasible:
        print(f"time per batch {plan.time_per_batch:.9g} s   tensor {plan.tensor_parallel}   "
              f"data {plan.data_parallel}   pipeline {plan.pipeline_parallel}   "
              f"devices {plan.devices_used} of {problem.devices}")
        print(f"{'stage':>5}  {'layers':<24} {'devices':>7} {'load_s':>14} {'memory_bytes':>16}")
        for s, ((ids, devices), load, memory) in enumerate(
                zip(plan.stages, plan.stage_loads, plan.stage_memory)):
            layers = f"{ids[0]}..{ids[-1]} ({len(ids)})" if len(ids) > 1 else f"{ids[0]} (1)"
            print(f"{s:>5}  {layers:<24} {devices:>7} {load:>14.9g} {memory:>16.6g}")
    else:
        print(f"infeasible: {plan.reason}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(plan.to_json(), f, indent=1)
            f.write("\n")
    return 0


def _cmd_search(args) -> int:
    from ._search_cli import cmd_search

    return cmd_search(args)


def _cmd_evaluate(args) -> int:
    from ._search_cli import cmd_evaluate

    return cmd_evaluate(args)


def _cmd_plot(args) -> int:
    from ._search_cli import cmd_plot

    return cmd_plot(args)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="phaze",
        description="Joint accelerator-architecture and device-placement search for LLM training.")
    parser.add_argument("--version", action="version", version=f"phaze {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list the built-in model zoo")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("archs", help="list the architecture presets and the default space")
    p.set_defaults(func=_cmd_archs)

    p = sub.add_parser("place", help="solve a placement problem in the original study's JSON")
    p.add_argument("file", help="placement problem JSON")
    p.add_argument("-o", "--out", help="write the plan as JSON here")
    p.set_defaults(func=_cmd_place)

    from ._search_cli import add_evaluate_arguments, add_plot_arguments, add_search_arguments

    p = sub.add_parser("search", help="joint architecture and placement search")
    add_search_arguments(p)
    p.set_defaults(func=_cmd_search)

    p = sub.add_parser("evaluate", help="evaluate one architecture and strategy")
    add_evaluate_arguments(p)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("plot", help="plot throughput vs area from a result file")
    add_plot_arguments(p)
    p.set_defaults(func=_cmd_plot)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"phaze {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"phaze {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`phaze models | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
