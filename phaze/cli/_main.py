"""Command-line interface: ``phaze search | evaluate | place | models | archs | plot |
validate | trace``.

Thin layer on top of the public modules: parse, call, print. Errors in user
input are printed as one line on stderr with exit status 2; operating-system
errors (a read-only or full disk, a folder where a file is expected) and a chunk
that failed for good as one line with exit status 1. Never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import _compare
from ._signals import Terminated, _on_sigterm_raise, _restore_signals, _stop_word
from . import _emit as _cli_emit
from . import _plot
from .. import plan as _plan
from .._validate import OutputError, output_error


def _cmd_models(args) -> int:
    from .. import models

    rows = [models.get(n) for n in models.names()]
    print(f"{'name':<18} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} {'ffn':>6} "
          f"{'vocab':>6} {'seq':>5} {'act':<7} {'params':>16}")
    for m in rows:
        print(f"{m.name:<18} {m.n_layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>4} "
              f"{m.ffn_hidden:>6} {m.vocab:>6} {m.seq_len:>5} {m.activation:<7} {m.n_params:>16,}")
    return 0


def _cmd_archs(args) -> int:
    from .. import arch

    if args.show is not None:
        # A chip file on stdout: `phaze archs --show a100-80g > mine.json`, edit, --arch mine.json.
        # A preset prints its shipped file (its measured parameters, each cited); which
        # parameters the stated rules give goes to stderr.
        chip = arch.resolve_chip(args.show)
        if args.show in arch.presets.names():
            print(arch.presets.path(args.show).read_text(encoding="utf-8"), end="")
        else:
            print(chip.to_json(), end="")
        if chip.efficiency_rules:
            ruled = {f: r for f, r in chip.efficiency_rules.items() if r != "measured"}
            print(f"# {chip.name}: {len(chip.efficiency_rules) - len(ruled)} efficiency parameters "
                  f"measured (in the file), {len(ruled)} from phaze.arch.rules:", file=sys.stderr)
            for f, r in ruled.items():
                print(f"#   {f} = {getattr(chip.resolved_efficiency, f):.6g}: {r}", file=sys.stderr)
        return 0
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
    print(f"\n{'name':<10} {'family':<16} {'fabric':<22} {'fp8':>4} {'fp4':>4} {'scaled':<10} "
          f"{'platform':<8} {'measured':>8}  source (phaze archs --show NAME for every citation)")
    for name in arch.presets.names():
        c = arch.presets.chip(name)
        fabric = (c.topology or "switch") + (f" {'x'.join(map(str, c.torus_dims))}"
                                             if c.torus_dims else f" of {c.row['node_size'][0]}")
        measured = sum(1 for r in (c.efficiency_rules or {}).values() if r == "measured")
        first = c.source.split("\n")[0]
        print(f"{name:<10} {c.family or '':<16} {fabric:<22} {c.rates['fp8']:>4g} "
              f"{c.rates['nvfp4'] or c.rates['mxfp4']:>4g} {','.join(c.scaled_formats or ()) or '-':<10} "
              f"{c.platform or '-':<8} {measured:>5}/{len(c.efficiency_rules or ()):<2}  "
              f"{first[:90] + ('...' if len(first) > 90 else '')}")
    space = arch.ArchSpace.default()
    cfg = space.configs
    print(f"\ndefault space: {len(space):,} architectures, budget {space.budget_mm2:.2f} mm2 (area of tpuv4), "
          f"kept when {space.lower_fraction:g} <= area/budget <= 1 (lower bound waived for 1 TC or 1 VC); "
          f"area {cfg['area_mm2'].min():.2f} to {cfg['area_mm2'].max():.2f} mm2")
    return 0


def _cmd_place(args) -> int:
    from .. import placement

    problem = placement.load_phaze_json(args.file)
    plan = placement.solve(problem)
    if plan.feasible:
        print(f"time per batch {plan.time_per_batch:.9g} s   tensor {plan.tensor_parallel}   "
              f"data {plan.data_parallel}   pipeline {plan.pipeline_parallel}   "
              f"devices {plan.devices_used} of {problem.devices}")
        print(f"{'stage':>5}  {'layers':<24} {'devices':>7} {'load (s)':>14} "
              f"{'memory (GiB)':>12}")
        for s, ((ids, devices), load, memory) in enumerate(
                zip(plan.stages, plan.stage_loads, plan.stage_memory), start=1):
            layers = f"{ids[0]}..{ids[-1]} ({len(ids)})" if len(ids) > 1 else f"{ids[0]} (1)"
            print(f"{s:>5}  {layers:<24} {devices:>7} {load:>14.9g} {memory / 2**30:>12.2f}")
    else:
        print(f"infeasible: {plan.reason}")
    if args.out:
        text = json.dumps(plan.to_json(), indent=1) + "\n"
        try:
            with open(args.out, "w") as f:
                f.write(text)
        except OSError as exc:
            raise output_error(exc, f"-o/--out: cannot write the plan to {args.out!r}") from None
    return 0


# ---------------------------------------------------------------------------
# search, evaluate, plot
# ---------------------------------------------------------------------------

def _int_list(text):
    """'1,2,4' → [1, 2, 4] (ValueError naming the text otherwise)."""
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected a comma-separated list of integers, got {text!r}") from None


def _float_list(text):
    """'32,64.5' → [32.0, 64.5] (ValueError naming the text otherwise)."""
    try:
        return [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected a comma-separated list of numbers, got {text!r}") from None


#: --emit's trainers (``phaze.plan.TRAINERS`` whose arguments ``phaze.launch`` writes).
_EMITTERS = tuple(t.emit for t in _plan.TRAINERS if t.emit)


def _add_search_arguments(p) -> None:
    p.add_argument("--model", action="append", default=[],
                   help="zoo model name (repeat or comma-separate for several; see `phaze models`)")
    p.add_argument("--hf-config", action="append", default=[], metavar="PATH",
                   help="Hugging Face config.json of a model to search (repeatable)")
    p.add_argument("--name", action="append", default=[],
                   help="name of the --hf-config model (one per --hf-config, in order; default: "
                        "the config's _name_or_path or model_type)")
    p.add_argument("--seq-len", type=int, metavar="TOKENS",
                   help="tokens per sample for every model (default: the model's own; a Hugging "
                        "Face config's own is its pre-training context: rope_scaling's "
                        "original_max_position_embeddings when positions are stretched, 8,192 "
                        "for Llama 3.1, else max_position_embeddings, 131,072 for Qwen2.5-7B; "
                        "the summary names each model's)")
    p.add_argument("--devices", type=int, default=1024, help="accelerators (default 1024)")
    _plan.add_search_options(p, ("global_batch", "microbatch"))
    p.add_argument("--hbm-gib", default=None,
                   help="HBM capacities in GiB (default 32,64,80; with --arch the chip's own)")
    p.add_argument("--study", action="store_true",
                   help="the original study's cost model, knob set and unconstrained plans "
                        "(reproduces its results); default: the calibrated Megatron-LM step "
                        "model (phaze.step) with the strategy knobs below searched")
    # The knobs (phaze.plan's table): recomputation modes and the strategy grids, the
    # tensor-parallel widths.
    _plan.add_search_options(p, ("recompute", *_plan.GRIDS, "tensor_parallel"))
    p.add_argument("--optimizer", choices=("sgd", "adam", "muon"), default=None,
                   help="optimizer (default: adam; muon: the calibrated model's Newton-Schulz "
                        "orthogonalised momentum, ZeRO 0-1; --study: sgd or adam, sgd "
                        "its default)")
    p.add_argument("--space-every", type=int, default=1, metavar="K",
                   help="keep every K-th architecture of the default space (quick looks)")
    p.add_argument("--arch", metavar="NAME|FILE[,NAME|FILE...]",
                   help="search only the training knobs and placement on this one chip (a "
                        "preset or a chip file; see `phaze archs --show NAME`): no "
                        "architecture sweep, no baselines; several, comma-separated, compare "
                        "the chips: each one's best plan per model, ranked")
    p.add_argument("--max-power-w", type=float, metavar="W", default=None,
                   help="power budget of one chip, W: a point whose step needs more runs at "
                        "the clock the cap leaves, or is infeasible (default: the TPUv4-class "
                        "budget, phaze.arch.TEMPLATE_TDP_W; a fixed --arch: its own; --study: "
                        "none)")
    p.add_argument("--max-area-mm2", type=float, metavar="MM2", default=None,
                   help="area budget of one chip, mm2 (the template's area model): search only "
                        "the architectures of at most that area (default: the space as given; "
                        "the default space is the study's, within TPU v4's area)")
    p.add_argument("--objective", default="throughput",
                   choices=("throughput", "perf-per-watt", "perf-per-dollar"),
                   help="what ranks the rows and picks the best: samples/s (default), tokens "
                        "per joule, or least $ per million tokens (the last two without "
                        "--prune)")
    p.add_argument("--prune", nargs="?", const="best", choices=("best", "front"), default=None,
                   help="skip points that cannot matter: 'best' (bare --prune) skips what cannot "
                        "beat the best found (same best; the Pareto front may be partial), "
                        "'front' only what an architecture of no more area beats (same best "
                        "and exact Pareto front)")
    p.add_argument("--out", help="result file: .csv, .csv.gz, .json or .parquet (written per "
                                 "chunk; beside it OUT.meta.json, the journal and run record, "
                                 "OUT.lock and, for .json/.parquet, OUT.rows.csv.gz: every row)")
    p.add_argument("--resume", action="store_true", help="continue the sweep recorded in --out")
    p.add_argument("--emit", choices=_EMITTERS,
                   help="search only plans this trainer launches and, after the summary, "
                        "print each model's best plan as its launch arguments: Megatron-LM, "
                        "Megatron-DeepSpeed with its ds_config JSON, or torchtitan's job "
                        "config (phaze.launch); a model the trainer cannot run is one sentence")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out (never one another search is writing)")
    p.add_argument("--from-meta", metavar="FILE",
                   help="re-run the search a result recorded (its .meta.json or .json, or "
                        "the result file beside it): the same models (their full specs), "
                        "chip or space and knobs; only --out, --force, --emit and the "
                        "worker options may be given with it")
    p.add_argument("--address", help="Dask scheduler tcp://HOST:PORT (needs phaze[dask])")
    p.add_argument("--workers", type=int, help="local worker processes (default: all cores)")
    p.add_argument("--serial", action="store_true", help="run in this process (no worker pool)")
    p.add_argument("--no-baselines", action="store_true", help="skip the three baselines")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress on stderr (default: when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def _models_from_args(args):
    """The models of ``phaze search``: --model names (repeated or comma-separated) and
    --hf-config files."""
    from .. import models

    out = [name.strip() for item in args.model for name in item.split(",") if name.strip()]
    names = args.name or [None] * len(args.hf_config)
    if len(names) != len(args.hf_config):
        raise ValueError(f"--name: give one per --hf-config, in order (got {len(args.name)} "
                         f"for {len(args.hf_config)} configs)")
    seen = {}
    for path, name in zip(args.hf_config, names):
        spec = models.from_hf_config(path, name=name, seq_len=args.seq_len)
        if spec.name in seen:
            raise ValueError(f"--name: {seen[spec.name]} and {path} are both called "
                             f"{spec.name!r}; name them apart with one --name per --hf-config")
        seen[spec.name] = path
        out.append(spec)
    if not out:
        raise ValueError("give at least one --model or --hf-config")
    return out


def _check_tp(model_list, widths) -> None:
    """One sentence naming --tp, before any work, when a model allows none of the widths
    (unknown model names are left to the search to report)."""
    from .. import models

    widths = [t for t in widths if t > 0]  # others: the search names them
    for m in model_list if widths else ():
        try:
            spec = models.get(m) if isinstance(m, str) else m
        except KeyError:
            continue
        if not any(spec.valid_tensor_parallel(t) for t in widths):
            allowed = [t for t in range(1, spec.heads + 1) if spec.valid_tensor_parallel(t)]
            raise ValueError(f"--tp: no width in {','.join(map(str, widths))} divides the heads "
                             f"({spec.heads}) and kv_heads ({spec.kv_heads}) of {spec.name}; "
                             f"allowed widths: {', '.join(map(str, allowed))}")


def _cmd_search(args) -> int:
    """``phaze search``: run the sweep, print its summary (and where the rows went)."""
    from . import _lists as lists
    from .. import arch, search

    if args.from_meta:
        from ._rerun import search_from_meta
        return search_from_meta(args, build_parser().parse_args(["search", "--model", "x"]),
                                _fixed_system_summary)
    model_list = _models_from_args(args)
    _check_tp(model_list, _int_list(args.tensor_parallel))
    every = args.space_every
    if every < 1:
        raise ValueError(f"--space-every must be a positive integer, got {every}")
    space = None if every == 1 else arch.ArchSpace.default().configs[::every]
    if args.arch is not None and space is not None:
        raise ValueError("--space-every thins the architecture space; --arch searches one chip "
                         "and takes no space: give one of them")
    hbm = (_float_list(args.hbm_gib) if args.hbm_gib is not None
           else None if args.arch is not None else (32, 64, 80))  # None: the chip's own
    recompute = lists.knob_list("recompute", args.recompute)
    knobs = {name: (lists.knob_list(name, getattr(args, name))
                    if _plan.KNOB[name].search == "grid" else getattr(args, name))
             for name in _plan.GRIDS}
    if args.optimizer == "sgd" and not args.study:
        raise ValueError("--optimizer sgd is the study's: the calibrated model prices adam "
                         "and muon (add --study for sgd)")
    if args.optimizer == "muon" and args.study:
        raise ValueError("--optimizer muon is the calibrated model's: the study's prices sgd "
                         "and adam (drop --study for muon)")
    if args.study:
        given = [_plan.KNOB[name].flag for name in _plan.GRIDS if getattr(args, name) is not None]
        if given:
            raise ValueError(f"{given[0]} is a knob of the calibrated model; the study's model "
                             f"(--study) has none: drop one of them")
        if recompute is not None and "selective" in recompute:
            raise ValueError("--recompute selective is not in the study's model (--study has "
                             "none and full)")
    if args.emit and not args.study:
        # --emit X: the search's plans are those X launches (phaze.plan.search_grids)
        from .. import models as _models
        specs = [_models.resolve(m) for m in model_list]
        specs = [s.with_(seq_len=args.seq_len) if args.seq_len and s.seq_len != args.seq_len
                 else s for s in specs]
        knobs = _plan.search_grids(args.emit, knobs, specs)
    # what every search of this command takes (one chip or space, or each chip compared)
    common = dict(devices=args.devices, global_batch=args.global_batch,
                  microbatch=_int_list(args.microbatch), hbm_gib=hbm, recompute=recompute,
                  tensor_parallel=_int_list(args.tensor_parallel), optimizer=args.optimizer,
                  prune=args.prune or False, study=args.study, **knobs,
                  executor="serial" if args.serial else None, progress=args.progress,
                  workers=args.workers, address=args.address, force=args.force,
                  seq_len=args.seq_len, max_power_w=args.max_power_w,
                  objective=args.objective, max_area_mm2=args.max_area_mm2,
                  trainers=(args.emit,) if args.emit and not args.study else ())
    chips = _compare.arch_list(args.arch)
    if len(chips) > 1:
        return _compare.compare_chips(args, chips, model_list, common)
    try:
        result = search.search(model_list, arch=args.arch, space=space, out=args.out,
                               resume=args.resume, baselines=not args.no_baselines,
                               provenance=dict(command=getattr(args, "argv", None),
                                               config_paths=args.hf_config,
                                               space_every=every if args.arch is None
                                               else None), **common)
    except KeyboardInterrupt as exc:
        if args.out:  # main() prints it: one line
            raise type(exc)(f"{_stop_word(exc)}; finished chunks are in {args.out} "
                            f"(continue with --resume)") from None
        raise
    except search.ChunkFailed as exc:
        # Not bad input but no traceback either: say which chunk, and what is kept.
        kept = (f"; finished chunks are in {args.out} (continue with --resume)" if args.out
                else "")
        print(f"phaze search: error: {str(exc).splitlines()[0] if str(exc) else exc}{kept}",
              file=sys.stderr)
        return 1
    print(_fixed_system_summary(result) if args.arch is not None else result.format_summary())
    if args.out:
        print(f"results: {args.out}")
    if args.emit:
        return _cli_emit.emit_best_plans(args, result, model_list)
    return 0


def _fixed_system_summary(result) -> str:
    """What ``phaze search --arch`` prints: the chip, then each model's best plan on it
    (no architecture, Pareto front or baseline lines: there is one chip)."""
    from ..search import cost_model_line, knob_text

    meta, best = result.metadata, result.best
    inp, chip = meta.get("inputs", {}), meta.get("chip") or {}
    seqs = inp.get("seq_len") if isinstance(inp.get("seq_len"), dict) else {}
    seq_txt = (f", sequence {next(iter(seqs.values())):,} tokens"
               if len(set(seqs.values())) == 1 else
               "".join(f", {n} sequence {v:,} tokens" for n, v in seqs.items()))
    lines = [f"phaze search: {', '.join(result.models)} on {inp.get('devices')} x "
             f"{chip.get('name', 'one chip')} (fixed system), global batch "
             f"{inp.get('global_batch')}{seq_txt}: {meta.get('points_evaluated'):,} of "
             f"{meta.get('points_total'):,} points evaluated ({meta.get('points_pruned'):,} "
             f"pruned) in {meta.get('sweep_time_s', 0):.1f} s"]
    if chip:
        peak = chip["num_tc"] * chip["tc_width"] * chip["tc_depth"] * 2 * chip["clock_ghz"] / 1e3
        lines.append(f"{chip['name']}: {chip['num_tc']} TC {chip['tc_width']}x{chip['tc_depth']}, "
                     f"{chip['num_vc']} VC x{chip['vc_width']}, {chip['buffer_mib']:g} MiB buffer, "
                     f"{chip['clock_ghz']:g} GHz ({peak:,.1f} TFLOP/s), HBM {chip['hbm_gib']:g} GiB "
                     f"at {chip['hbm_gb_per_s']:g} GB/s, link {chip['link_gb_per_s']:g} GB/s in "
                     f"nodes of {chip['node_size']}, network {chip['net_gb_per_s']:g} GB/s")
    lines.append(cost_model_line(meta))
    lines.append(f"best plan{'s' if len(result.models) > 1 else ''}:")
    lines.append(f"{'model':<18} {'t':>3} {'p':>4} {'d':>5} {'mb':>3} {'HBM':>5} "
                 f"{_plan.summary_header()} {'samples/s':>11} {'tokens/s':>13} {'MFU':>6}  "
                 f"layers per stage (embedding and head included)")
    for model in result.models:
        r = (best.get("plans") or {}).get(model)
        if r is None or not r.get("feasible"):
            reason = (r or {}).get("reason") or best.get("reason") or "infeasible"
            lines.append(f"{model:<18} no feasible plan: {reason}")
            continue
        lines.append(f"{model:<18} {r['tensor_parallel']:>3} {r['pipeline_parallel']:>4} "
                     f"{r['data_parallel']:>5} {r['microbatch']:>3} {r['hbm_gib']:>5g} "
                     f"{knob_text(r)} {r['samples_per_s']:>11,.1f} "
                     f"{r['tokens_per_s']:>13,.0f} {_mfu_text(r.get('mfu')):>6}  "
                     f"{r['stage_layers']}")
    return "\n".join(lines)


def _mfu_text(fraction) -> str:
    """MFU as a percentage ("n/a" when unknown)."""
    return "n/a" if fraction is None else f"{100 * float(fraction):.1f}%"


def _add_evaluate_arguments(p) -> None:
    p.add_argument("--model", help="zoo model name")
    p.add_argument("--hf-config", metavar="PATH", help="Hugging Face config.json instead of --model")
    p.add_argument("--name", help="name of the --hf-config model (default: the config's "
                                  "_name_or_path or model_type)")
    p.add_argument("--seq-len", type=int, metavar="TOKENS",
                   help="tokens per sample (default: the model's own; a Hugging Face config's "
                        "own is its pre-training context: rope_scaling's "
                        "original_max_position_embeddings, e.g. 8,192 for Llama 3.1, else "
                        "max_position_embeddings)")
    p.add_argument("--arch", default="tpuv4", metavar="NAME|FILE",
                   help="architecture: a preset or a chip file (default tpuv4; see `phaze archs`)")
    _plan.add_evaluate_options(p, ("tensor_parallel", "pipeline_parallel", "data_parallel",
                                   "microbatch", "recompute"))
    p.add_argument("--devices", type=int, help="devices available (default t·p·d)")
    _plan.add_evaluate_options(p, ("global_batch",))
    p.add_argument("--hbm-gib", type=float, help="HBM per chip, GiB (default: the chip's own)")
    p.add_argument("--optimizer", choices=("sgd", "adam", "muon"), default=None,
                   help="optimizer (default: adam; muon: Newton-Schulz orthogonalised "
                        "momentum, ZeRO 0-1; --study: sgd, the study's, or adam)")
    p.add_argument("--max-power-w", type=float, metavar="W", default=None,
                   help="power cap of one chip, W: the clock is lowered until the step's power "
                        "fits (default: the chip's own TDP, none for a chip whose GEMM rates "
                        "are measured)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--emit", choices=_EMITTERS,
                   help="print the plan's launch arguments instead: Megatron-LM, or "
                        "Megatron-DeepSpeed with its ds_config JSON (phaze.launch)")
    # Strategy knobs of the training-step model (phaze.plan's table); None = not given, so
    # that the study's model can refuse them by name.
    _plan.add_evaluate_options(p, _EVALUATE_KNOBS)


#: evaluate's options of the training-step model alone (phaze.plan.STRATEGY), in the
#: order of the search's grids, then those the search does not take (the pipeline split
#: and the microbatches per pipeline schedule), in table order.
_EVALUATE_KNOBS = (tuple(n for n in _plan.GRIDS if n in _plan.STRATEGY)
                   + tuple(n for n in _plan.STRATEGY if n not in _plan.GRIDS
                           and _plan.KNOB[n].flags and _plan.KNOB[n].search is None))


def _given_for_study(name, value) -> bool:
    """Whether evaluate's option of knob ``name`` asks the study's model for something it
    lacks: a one-value option given at all, a grid knob at another value than the study's."""
    if _plan.KNOB[name].search == "one":
        return value is not None
    return _plan.differs_from_study(name, value)


def _check_study_knobs(args) -> None:
    """The study's model has none of the step-only knobs: one sentence naming the first
    one given (never a silent switch of cost model)."""
    if getattr(args, "recompute", None) == "selective":
        raise ValueError("selective recomputation is not in the study's model: drop --study")
    for name in _EVALUATE_KNOBS:
        if _given_for_study(name, getattr(args, name, None)):
            raise ValueError(f"{_plan.KNOB[name].flag} is a knob of the calibrated "
                             f"training-step model, not of the study's: drop --study")


def _strategy_knobs(args) -> dict:
    """The strategy knobs given on the command line (``evaluate``/``trace``), by their
    Python keyword names; a knob left out is not in the dict."""
    return {name: getattr(args, name) for name in _EVALUATE_KNOBS
            if getattr(args, name, None) is not None}


def _cmd_evaluate(args) -> int:
    """``phaze evaluate``: one architecture and strategy, where the time and memory go."""
    from .. import models, search

    if bool(args.model) == bool(args.hf_config):
        raise ValueError("give exactly one of --model or --hf-config")
    if args.name is not None and not args.hf_config:
        raise ValueError("--name names a --hf-config model; zoo models keep their names")
    model = args.model or models.from_hf_config(args.hf_config, name=args.name,
                                                seq_len=args.seq_len)
    if getattr(args, "emit", None):
        if getattr(args, "study", False):
            raise ValueError("--emit writes the plan the calibrated model prices: drop --study")
        # a knob left out whose default the trainer does not run is priced at the trainer's
        # own value (torchtitan: --master-weights params), as the plan it launches runs
        for name, value in _plan.trainer_values(args.emit, _strategy_knobs(args)).items():
            setattr(args, name, value)
        return _cli_emit.emit_plan(args, model, _strategy_knobs(args),
                                   result=_calibrated_result(args, model))
    if getattr(args, "study", False) and getattr(args, "calibrated", False):
        raise ValueError("--study and --calibrated name two cost models: give one of them")
    if not getattr(args, "study", False):
        return _evaluate_calibrated(args, model)
    _check_study_knobs(args)
    r = search.evaluate_point(model, args.arch, args.tensor_parallel, args.pipeline_parallel,
                              args.data_parallel, args.microbatch,
                              args.recompute == "full", devices=args.devices, global_batch=args.global_batch,
                              hbm_gib=args.hbm_gib, optimizer=args.optimizer or "sgd",
                              seq_len=args.seq_len, study=True)
    if args.json:
        print(json.dumps(search.json_safe(r), indent=1))
        return 0
    from ..arch import resolve_chip

    print(f"{r['model']} on {resolve_chip(args.arch).name}: t={r['tensor_parallel']} "
          f"p={r['pipeline_parallel']} d={r['data_parallel']} microbatch {r['microbatch']} recompute "
          f"{'on' if r['recompute'] else 'off'}, {r['devices']} devices, HBM {r['hbm_gib']:g} GiB")
    if r["feasible"]:
        b = r["breakdown"]
        print(f"time per batch {r['time_per_batch_s']:.6g} s   {r['samples_per_s']:,.2f} samples/s   "
              f"{r['tokens_per_s']:,.0f} tokens/s   MFU {100 * r['mfu']:.1f}%")
        print(f"  steady pipeline {b['steady_s']:.6g} s + bubble {b['bubble_s']:.6g} s + gradient sync "
              f"{b['grad_sync_s']:.6g} s; critical stage {b['critical_stage']}: compute "
              f"{b['critical_compute_s']:.6g} s + communication {b['critical_communication_s']:.6g} s "
              f"per microbatch")
    else:
        print(f"infeasible: {r['reason']}")
    print(f"microbatches per pipeline {r['microbatches_per_pipeline']} (global batch "
          f"{r['global_batch']} / (microbatch {r['microbatch']} x d {r['data_parallel']})), "
          f"sequence {r['seq_len']:,} tokens")
    print(f"{'stage':>5} {'layers':>9} {'dev':>4} {'compute (s)':>11} {'comm (s)':>11} "
          f"{'load (s)':>11} {'memory (GiB)':>12} {'of (GiB)':>8}")
    for i, s in enumerate(r["stages"]):
        print(f"{i + 1:>5} {s['layers'][0]:>4}-{s['layers'][1]:<4} {s['devices']:>4} "
              f"{s['compute_s']:>11.5g} {s['communication_s']:>11.5g} {s['load_s']:>11.5g} "
              f"{s['memory_bytes'] / 2**30:>12.2f} {s['memory_limit_bytes'] / 2**30:>8.1f}"
              f"{'' if s['fits'] else '  (does not fit)'}")
    return 0


def _add_calibrated_argument(p) -> None:
    p.add_argument("--study", action="store_true",
                   help="evaluate with the original study's placement model (no strategy "
                        "knobs; recompute none or full) instead of the default calibrated "
                        "training-step model (phaze.step: Megatron-LM 1F1B on the calibrated "
                        "operator model)")
    p.add_argument("--calibrated", action="store_true",
                   help="the calibrated training-step model: the default, accepted for old "
                        "command lines")


def _calibrated_result(args, model) -> dict:
    """``evaluate`` (the calibrated default): the plan through
    ``phaze.search.evaluate_point`` → ``phaze.step.training_step``, as one JSON-ready dict
    (seconds ``_s``, GiB ``_gib``; stages numbered from 1; keys in
    ``phaze.search._point.evaluate_step``)."""
    from .. import search
    from ..arch import resolve_chip

    if getattr(args, "study", False) and getattr(args, "calibrated", False):
        raise ValueError("--study and --calibrated name two cost models: give one of them")
    if args.hbm_gib is not None and not args.hbm_gib > 0:
        raise ValueError(f"--hbm-gib must be positive, got {args.hbm_gib:g}")
    for name in _EVALUATE_KNOBS:
        knob, value = _plan.KNOB[name], getattr(args, name)
        if value is None:
            continue
        if knob.type is int and knob.choices is None and value < 1:
            raise ValueError(f"{knob.flag} must be a positive integer, got {value}")
        if knob.type is float and not value > 0:
            raise ValueError(f"{knob.flag} must be positive, got {value:g}")
    used = _plan.devices_of(vars(args))
    if args.devices is not None and args.devices < used:
        raise ValueError(f"--devices {args.devices} is fewer than t·cp·p·d = {used}")
    if args.optimizer not in (None, "adam", "muon"):
        raise ValueError("--optimizer sgd is the study's: the calibrated model prices adam "
                         "and muon (add --study for sgd)")
    # --seq-len as the study's path reads it (a --hf-config model already has it).
    out = search.evaluate_point(
        model, resolve_chip(args.arch), args.tensor_parallel, args.pipeline_parallel,
        args.data_parallel, args.microbatch,
        args.recompute or "none", devices=args.devices, global_batch=args.global_batch,
        hbm_gib=args.hbm_gib, seq_len=args.seq_len if args.model else None,
        optimizer=args.optimizer, max_power_w=args.max_power_w,
        **{name: getattr(args, name) for name in _EVALUATE_KNOBS})
    return out


def _evaluate_calibrated(args, model) -> int:
    """Print ``evaluate`` with the calibrated model, its default (text, or one JSON object
    with --json)."""
    r = _calibrated_result(args, model)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    onoff = {True: "on", False: "off"}
    print(f"{r['model']} on {r['arch']} (training-step model, Megatron-LM {r['schedule']}, "
          f"calibrated): t={r['tensor_parallel']} p={r['pipeline_parallel']} "
          f"d={r['data_parallel']} microbatch {r['microbatch']} global batch "
          f"{r['global_batch']}, {r['devices']} devices, HBM {r['hbm_gib']:g} GiB")
    words = [f"recompute {r['recompute']}"]
    for name in _EVALUATE_KNOBS:
        knob, value = _plan.KNOB[name], r.get(name)
        if knob.type is float:   # the capacity factor: only when set
            if value is not None:
                words[-1] += f" ({knob.title} {value:g})"
            continue
        text = onoff[value] if knob.type is bool else str(value)
        if value is True and r.get(f"{name}_effective") is False and knob.noop_note:
            text += f" ({knob.noop_note})"
        words.append(f"{knob.title} {text}")
    print("  " + ", ".join(words) + f", optimizer {r['optimizer'].title()}")
    titles = {t.id: t.title for t in _plan.TRAINERS}
    refused = r.get("not_launchable") or {}
    why = ""
    if refused:     # the first refusal, named by its trainer unless the sentence names it
        tid, text = next(iter(refused.items()))
        title = titles.get(tid, tid)
        why = f" ({text})" if text.startswith(title) else f" ({title}: {text})"
    other = "; ".join(f"{titles.get(t, t)} with " + " ".join(
        f"{_plan.KNOB[n].flag} {v}" for n, v in own.items())
        for t, own in (r.get("launchable_with") or {}).items())
    print("  launchable by: " + (", ".join(titles.get(x, x) for x in r["trainers"])
                                 or "no trainer" + why)
          + (f" (as priced); {other} (a plan priced apart)" if other else ""))
    if r["status"] != "ok":
        reason = str(r["reason"])
        if r["status"] == "not_modelled" and reason.startswith("not modelled yet: "):
            reason = reason[len("not modelled yet: "):]
        print(f"{'not modelled yet' if r['status'] == 'not_modelled' else 'infeasible'}: "
              f"{reason}")
        return 0
    b = r["breakdown"]
    if not r["feasible"]:
        # the reason first; the rates are what the step would take if it fitted (no MFU)
        print(f"infeasible: {r['reason']}")
        print(f"time per batch {r['time_per_batch_s']:.6g} s if it fitted")
    else:
        print(f"time per batch {r['time_per_batch_s']:.6g} s   {r['samples_per_s']:,.2f} "
              f"samples/s   {r['tokens_per_s']:,.0f} tokens/s   MFU {100 * r['mfu']:.1f}%")
    cap = r.get("power_cap_w")
    e = r["energy_breakdown_j"]
    print(f"power {r['power_w']:,.0f} W per chip"
          + (f" (cap {cap:g} W: clock at {100 * r['clock_fraction']:.0f}%)" if cap else "")
          + f"   energy {r['energy_per_step_j']:.6g} J per step   "
          f"{r['tokens_per_joule']:,.1f} tokens/J")
    print("  energy: " + " + ".join(f"{k} {v:.4g} J" for k, v in e.items()))
    print(f"  pipeline steady {b['steady_s']:.6g} s + bubble {b['bubble_s']:.6g} s + gradient "
          f"reduction {b['gradient_reduction_s']:.6g} s + embedding all-reduce "
          f"{b['embedding_allreduce_s']:.6g} s + optimizer {b['optimizer_s']:.6g} s")
    print(f"  per microbatch on critical stage {b['critical_stage']}: forward "
          f"{b['forward_s']:.6g} s + backward {b['backward_s']:.6g} s + recompute "
          f"{b['recompute_s']:.6g} s + p2p {b['p2p_s']:.6g} s")
    print(f"microbatches per pipeline {r['microbatches_per_pipeline']} (global batch "
          f"{r['global_batch']} / (microbatch {r['microbatch']} x d {r['data_parallel']})), "
          f"sequence {r['seq_len']:,} tokens")
    print(f"{'stage':>5} {'in flight':>9} {'weights (GiB)':>13} {'grads (GiB)':>11} "
          f"{'optimizer (GiB)':>15} {'activations (GiB)':>17} {'workspace (GiB)':>15} "
          f"{'total (GiB)':>11} {'HBM (GiB)':>9}")
    for s in r["stages"]:
        print(f"{s['stage']:>5} {s['microbatches_in_flight']:>9} {s['weights_gib']:>13.2f} "
              f"{s['gradients_gib']:>11.2f} {s['optimizer_state_gib']:>15.2f} "
              f"{s['activations_gib']:>17.2f} {s['workspace_gib']:>15.2f} "
              f"{s['total_gib']:>11.2f} {s['hbm_gib']:>9.1f}"
              f"{'' if s['fits'] else '  (does not fit)'}")
    return 0


#: The knobs phaze trace does not draw (``phaze.plan``: no ``trace_note``): their options
#: are hidden in ``phaze trace`` and refused by name.
_UNTRACED = tuple(n for n in _EVALUATE_KNOBS
                  if _plan.KNOB[n].trace_values is not None and not _plan.KNOB[n].trace_note)


def _add_trace_arguments(p) -> None:
    _add_evaluate_arguments(p)   # the same plan arguments (and knobs) as evaluate
    hidden = ("json", "emit") + _UNTRACED
    for action in p._actions:    # evaluate's output options: hidden here, refused if given
        if action.dest in hidden:
            action.help = argparse.SUPPRESS
    _add_calibrated_argument(p)  # the calibrated step model by default, --study the study's
    p.add_argument("--no-layer-schedule", dest="layer_schedule", action="store_false",
                   help="leave out the per-stage operator schedule of one transformer layer")
    p.add_argument("-o", "--out", default="trace.json",
                   help="trace file to write (default trace.json; open in ui.perfetto.dev)")


def _cmd_trace(args) -> int:
    """``phaze trace``: a Chrome/Perfetto trace of one training step (phaze.trace)."""
    from .. import models, trace

    if bool(args.model) == bool(args.hf_config):
        raise ValueError("give exactly one of --model or --hf-config")
    if getattr(args, "json", False) or getattr(args, "emit", None):
        raise ValueError("--json and --emit belong to phaze evaluate; phaze trace writes "
                         "the trace file given by -o")
    for name in _UNTRACED:   # --ep, --cp, --capacity-factor
        if _given_for_study(name, getattr(args, name, None)):
            titles = [_plan.KNOB[n].title for n in _UNTRACED]
            raise ValueError(f"{_plan.KNOB[name].flag} belongs to phaze evaluate: phaze trace "
                             f"does not draw {', '.join(titles[:-1])} or {titles[-1]} yet")
    if args.study and args.calibrated:
        raise ValueError("--study and --calibrated name two cost models: give one of them")
    if args.study:
        _check_study_knobs(args)   # the study's model has none of the step's knobs
    calibrated = not args.study    # the training-step model is the default, as in evaluate
    model = args.model or models.from_hf_config(args.hf_config, name=args.name,
                                                seq_len=args.seq_len)
    recompute = {None: False, "none": False, "full": True}.get(args.recompute, args.recompute)
    if calibrated and not isinstance(recompute, str):
        recompute = "full" if recompute else "none"
    plan = dict(tensor_parallel=args.tensor_parallel, pipeline_parallel=args.pipeline_parallel,
                data_parallel=args.data_parallel, microbatch=args.microbatch, recompute=recompute,
                global_batch=args.global_batch, calibrated=calibrated,
                layer_schedule=args.layer_schedule, hbm_gib=args.hbm_gib,
                seq_len=args.seq_len if args.model else None)   # the step evaluate prices
    if not calibrated:
        plan.update(devices=args.devices, optimizer=args.optimizer or "sgd")
    plan.update(_strategy_knobs(args))
    try:
        info = trace.write(args.out, model, args.arch, **plan)
    except OSError as exc:
        raise OutputError(f"-o/--out: {exc.strerror or exc}", exc.errno) from None
    print(f"wrote {args.out}: one step of {info['model']} on {args.arch}, "
          f"{info['time_per_batch_s']:.6g} s ({info['cost_model']} model), "
          f"{info['pipeline_parallel']} stages x {info['microbatches_per_pipeline']} "
          f"microbatches; open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


def _add_plot_arguments(p) -> None:
    p.add_argument("file", help="result file of phaze search (.csv, .csv.gz, .json, .parquet)")
    p.add_argument("-o", "--out", default="pareto.png", help="image to write (default pareto.png)")


def _cmd_validate(args) -> int:
    """``phaze validate [FILE] [--json]``: predicted vs published training runs (phaze.validate)."""
    from .. import validate

    report = validate.run(args.file)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(validate.format_report(report))
    return 0


#: How place, evaluate and search print numbers (the epilog of their --help).
OUTPUT_CONVENTIONS = """\
output conventions (place, evaluate, search):
  stages      numbered from 1 (the first pipeline stage) in every table and sentence
  memory      GiB per device (2^30 bytes); the unit is in the column header, e.g. 'memory (GiB)'
  time        seconds: 's' after a number, '(s)' in a column header
  area        mm2;  throughput: samples/s and tokens/s (samples/s x sequence length)
  layers      place: the problem file's layer ids; evaluate: positions in the layer chain
              (0 the embedding, 1..L the transformer blocks, L+1 the head)
  JSON        keys carry their unit: _s seconds, _bytes bytes, _gib GiB (place -o keeps the
              original study's keys: stageLoads in seconds, stageMemory in bytes)"""


#: The columns of `phaze search`'s summary (the epilog of its --help; the README's legend).
_SEARCH_LEGEND = """\
summary columns (one row per model: its best plan on the best architecture; the line above
the table names the cost model: calibrated, the default, or study with --study):
  t / p / d   tensor-parallel width / pipeline stages / data-parallel degree (t*cp*p*d
              devices, cp the context-parallel width below)
  mb          microbatch: samples per pipeline step (global batch / (mb * d) of them per
              pipeline per batch)
  HBM GiB     HBM capacity per chip at which the plan was found
{knobs}
  samples/s   global batch / time per batch;  tokens/s = samples/s x sequence length
  MFU         model FLOPs utilisation: model FLOPs per sample x samples/s / (devices used x
              peak FLOP/s of the chip); model FLOPs per sample = 6*N*s + 12*L*a*s^2 (PaLM's
              count: N parameters used by matrix products, s sequence, L layers, a = heads x
              head_dim; recomputation not counted)
  vs tpuv4    samples/s of the plan / samples/s of tpuv4 with the searched placement and knobs
  vs fixed    ... / tpuv4 with the original study's fixed strategy (n/a: the model has none)
  vs block    ... / the architecture fastest at one transformer block (t = 1, microbatch 1),
              given the same placement and knob search (a placement-blind chip search)
              (a gain: 1.50x = 50 % more samples/s; n/a = baseline infeasible or not run)
  normalised score (several models): the mean over the models of the architecture's
              samples/s / that model's best samples/s anywhere in the space (1 = best for all)"""
SEARCH_LEGEND = _SEARCH_LEGEND.format(knobs="\n".join(
    _plan.legend_lines()
    + [f"{'':14}({', '.join(_plan.KNOB[n].short for n in _plan.STRATEGY_COLUMNS)} are chosen "
       f"inside each row, with t / p / d;",
       f"{'':14}--study rows have the study's: "
       f"{', '.join(_plan.summary_cells({})[1:])})"]))


def _unrecognized(parser, args, extra) -> None:
    """argparse's error for arguments the sub-command does not take, from that
    sub-command's parser (its usage, not the top-level one), naming the closest flag."""
    import difflib

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices.get(args.command, parser)
    flags = [f for a in p._actions for f in a.option_strings]
    first = next((x.split("=")[0] for x in extra if x.startswith("-")), None)
    close = difflib.get_close_matches(first, flags, n=1) if first else []
    p.error(f"unrecognized arguments: {' '.join(extra)}"
            + (f" (did you mean {close[0]}?)" if close else ""))


def build_parser() -> argparse.ArgumentParser:
    """The ``phaze`` argument parser: one sub-command per job, each with its handler."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="phaze",
        description="Joint accelerator-architecture and device-placement search for LLM training.")
    parser.add_argument("--version", action="version", version=f"phaze {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list the built-in model zoo")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("archs", help="list the architecture presets and the default space")
    p.add_argument("--show", metavar="NAME|FILE",
                   help="print one chip (a preset or a chip file) as a chip file (JSON) to edit "
                        "and pass back with --arch")
    p.set_defaults(func=_cmd_archs)

    p = sub.add_parser("place", help="solve a placement problem in the original study's JSON",
                       epilog=OUTPUT_CONVENTIONS,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="placement problem JSON")
    p.add_argument("-o", "--out", help="write the plan as JSON here")
    p.set_defaults(func=_cmd_place)

    p = sub.add_parser("search", help="joint architecture and placement search",
                       epilog=SEARCH_LEGEND + "\n\n" + OUTPUT_CONVENTIONS,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_search_arguments(p)
    p.set_defaults(func=_cmd_search)

    p = sub.add_parser("evaluate", help="evaluate one architecture and strategy",
                       epilog=OUTPUT_CONVENTIONS,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_evaluate_arguments(p)
    _add_calibrated_argument(p)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("trace", help="write a Chrome/Perfetto timeline of one training step")
    _add_trace_arguments(p)
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser("plot", help="plot throughput vs area from a result file")
    _add_plot_arguments(p)
    p.set_defaults(func=_plot.cmd_plot)

    p = sub.add_parser("validate", help="predicted vs published training runs (calibrated model)")
    p.add_argument("file", nargs="?", default=None,
                   help="validation table JSON (schema: phaze.validate; default: the built-in table)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_validate)
    return parser


def _os_error_text(exc: OSError) -> str:
    """One sentence for an OSError: its own message when phaze wrote one (no errno
    prefix), else what failed on which path."""
    if exc.filename is not None:
        return f"cannot use {os.fsdecode(exc.filename)!r}: {exc.strerror or exc}"
    if exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def main(argv=None) -> int:
    """Run ``phaze`` with ``argv`` (default: the command line); returns the exit status
    (0 done, 2 bad input, 1 an operating-system error such as a read-only or full
    disk, 130 interrupted, 143 terminated (SIGTERM), 141 output pipe closed). Every error is one line on stderr,
    never a traceback."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args, extra)   # the sub-command's usage, a close flag named
    args.argv = ["phaze", *(sys.argv[1:] if argv is None else argv)]   # recorded by search
    previous = _on_sigterm_raise(args.command)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader went away (`phaze models | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except FileNotFoundError as exc:
        msg = exc if exc.filename is None else _os_error_text(exc)
        print(f"phaze {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"phaze {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"phaze {args.command}: error: {_os_error_text(exc)}", file=sys.stderr)
        return 1
    except (OverflowError, MemoryError, RecursionError) as exc:
        # Last line of defence: the entry points name the field for the inputs they check.
        what = ("a number is too large" if isinstance(exc, OverflowError) else
                "it is nested too deeply" if isinstance(exc, RecursionError) else
                "it needs more memory than there is")
        print(f"phaze {args.command}: error: the input cannot be handled: {what}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"phaze {args.command}: {exc.args[0] if exc.args else _stop_word(exc)}",
              file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        _restore_signals(previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
