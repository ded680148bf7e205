"""Benchmark of phaze.search (not a test): exhaustive and pruned sweeps, then the study's models.

    python3 bench/bench_search.py sweep  [--model gpt3-175b] [--every K] [--workers N] [--mode both]
                                         [--study]
    python3 bench/bench_search.py models [--every K] [--workers N] [--study]
    python3 bench/bench_search.py knobs  [--every K] [--workers N]

``sweep`` runs the exhaustive search (and/or ``--prune``) over the default space
× microbatch {1,2,4,8} × HBM {32,64,80} GiB × recomputation (the calibrated
default: none/selective/full with every strategy knob searched inside each point;
``--study``: the study's model and its recomputation off/on) and prints points/s;
with ``--mode both`` it checks that pruning reaches the identical best point.
Every run re-evaluates its best point through ``evaluate_point`` (the same cost
model and, for the calibrated model, the knobs the row chose) and checks the
throughput. ``models`` runs the original study's model set (pruned
search) and prints, per model, the best architecture, strategy, throughput and
the gains over the three baselines, as a Markdown table for bench/RESULTS.md.
``knobs`` runs, per study model on the calibrated model, the search with every
strategy knob and with the study's knob set only (recomputation none/full, no
sequence parallelism, flash attention, interleaving, ZeRO or overlap) and prints
both best points and the gain (it fails if the study's set ever wins).
"""
import argparse
import os
import platform
import sys
import time

import _bench_env  # noqa: E402,F401  (repository on sys.path)

from phaze import arch, search  # noqa: E402

STUDY_MODELS = ("bert-large", "gpt2-xl", "opt-350m", "llama2-7b", "megatron-gpt2-54",
                "megatron-gpt2-72", "gpt3-175b")


def _space(every):
    rows = arch.ArchSpace.default().configs
    return rows if every == 1 else rows[::every]


def _check_best(result, rows, devices, global_batch, study):
    """Re-evaluate the best plan with evaluate_point: the same samples/s, or fail loudly."""
    b = result.best
    if not b.get("feasible"):
        return
    sizes = [int(x) for x in b["stage_layers"].split(",")]
    # arch_id numbers the default space's rows (also under --every): look it up there.
    row = arch.ArchSpace.default().configs[b["arch_id"]:b["arch_id"] + 1]
    if study:
        r = search.evaluate_point(b["model"], row, b["tensor_parallel"], len(sizes),
                                  b["data_parallel"], b["microbatch"], b["recompute"],
                                  devices=devices, global_batch=global_batch,
                                  hbm_gib=b["hbm_gib"], stages=sizes, study=True)
    else:
        r = search.evaluate_point(
            b["model"], row, b["tensor_parallel"], b["pipeline_parallel"], b["data_parallel"],
            b["microbatch"], b["recompute"], devices=devices, global_batch=global_batch,
            hbm_gib=b["hbm_gib"], sequence_parallel=b["sequence_parallel"],
            flash_attention=b["flash_attention"], virtual_stages=b["virtual_stages"],
            zero_stage=b["zero_stage"], overlap_grad_reduce=b["overlap_grad_reduce"],
            expert_parallel=b.get("expert_parallel", 1),
            context_parallel=b.get("context_parallel", 1))
    if not (r["feasible"] and abs(r["samples_per_s"] - b["samples_per_s"]) <= 1e-9 * b["samples_per_s"]):
        raise SystemExit(f"CHECK FAILED: best point re-evaluates to {r['samples_per_s']} samples/s, "
                         f"search said {b['samples_per_s']}")


def _run(model, devices, every, prune, workers, baselines, study=False):
    t0 = time.perf_counter()
    rows = _space(every)
    r = search.search(model, devices=devices, space=rows, prune=prune, workers=workers,
                      progress=sys.stderr.isatty(), baselines=baselines, study=study)
    wall = time.perf_counter() - t0
    _check_best(r, rows, devices, 4096, study)
    return r, wall


def _describe(r):
    b = r.best
    return (f"arch {b['arch_id']} ({b['num_tc']} TC {b['tc_width']}x{b['tc_depth']}, {b['num_vc']} VC "
            f"x{b['vc_width']}, {b['buffer_mib']:g} MiB, {b['area_mm2']:.1f} mm2), "
            f"t={b['tensor_parallel']} p={b['pipeline_parallel']} d={b['data_parallel']} "
            f"mb={b['microbatch']} HBM={b['hbm_gib']:g} recompute={b['recompute']} "
            f"sp={'on' if b['sequence_parallel'] else 'off'} v={b['virtual_stages']} "
            f"zero={b['zero_stage']} flash={'on' if b['flash_attention'] else 'off'} "
            f"ogr={'on' if b['overlap_grad_reduce'] else 'off'}, "
            f"{b['samples_per_s']:.3f} samples/s")


def cmd_sweep(args):
    print(f"machine: {platform.node()} {os.cpu_count()} cores (shared with other work while measured)")
    results = {}
    modes = {"exhaustive": [False], "prune": [True], "both": [False, True]}[args.mode]
    for prune in modes:
        r, wall = _run(args.model, args.devices, args.every, prune, args.workers, baselines=False,
                       study=args.study)
        m = r.metadata
        name = "prune" if prune else "exhaustive"
        results[name] = r
        print(f"{name} ({m['cost_model']} model): {args.model} on {args.devices} devices, "
              f"{m['points_total']:,} points "
              f"({m['points_evaluated']:,} evaluated, {m['points_pruned']:,} pruned) in {wall:.1f} s "
              f"= {m['points_total'] / wall:,.0f} points/s; best {_describe(r)}")
    if len(results) == 2:
        a, b = results["exhaustive"].best, results["prune"].best
        same = (a["arch_id"], a["samples_per_s"]) == (b["arch_id"], b["samples_per_s"])
        print(f"pruned best identical to exhaustive best: {same}")
        if not same:
            raise SystemExit("CHECK FAILED: pruning changed the best point")


def cmd_models(args):
    print(f"machine: {platform.node()} {os.cpu_count()} cores (shared with other work while measured)")
    print("| model | best architecture (TC, VC, buffer, area) | t/p/d, microbatch, HBM, recompute | "
          "samples/s | tokens/s | gain vs tpuv4 searched | vs tpuv4 fixed | vs block-optimal | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r, wall = _run(name, args.devices, args.every, True, args.workers, baselines=True,
                       study=args.study)
        b = r.best
        gains = []
        for key in search.BASELINE_NAMES:
            g = r.baselines[key]["models"][name]
            gains.append(f"{g['gain']:.2f}x ({g['samples_per_s']:.1f}/s)" if g.get("gain")
                         else f"n/a ({g.get('reason', 'infeasible')})")
        if not b.get("feasible"):
            print(f"| {name} | infeasible: {b.get('reason')} | | | | | | | {wall:.0f} s |")
            continue
        print(f"| {name} | {b['num_tc']}×{b['tc_width']}x{b['tc_depth']} TC, {b['num_vc']}×{b['vc_width']} VC, "
              f"{b['buffer_mib']:g} MiB, {b['area_mm2']:.1f} mm² | {b['tensor_parallel']}/"
              f"{b['pipeline_parallel']}/{b['data_parallel']}, mb {b['microbatch']}, {b['hbm_gib']:g} GiB, "
              f"{b['recompute']} | {b['samples_per_s']:.2f} | {b['tokens_per_s']:,.0f} | "
              f"{gains[0]} | {gains[1]} | {gains[2]} | {wall:.0f} s |", flush=True)


#: The study's strategy set, on the calibrated model (``knobs``' "without" column).
STUDY_KNOB_SET = dict(recompute=("none", "full"), sequence_parallel=(False,),
                      flash_attention=(False,), virtual_stages=(1,), zero_stage=(0,),
                      overlap_grad_reduce=(False,), expert_parallel=(1,), context_parallel=(1,))


def _plan(b):
    return (f"t/p/d {b['tensor_parallel']}/{b['pipeline_parallel']}/{b['data_parallel']}, "
            f"mb {b['microbatch']}, {b['hbm_gib']:g} GiB, rc {b['recompute']}, "
            f"sp {'on' if b['sequence_parallel'] else 'off'}, v {b['virtual_stages']}, "
            f"zero {b['zero_stage']}, flash {'on' if b['flash_attention'] else 'off'}, "
            f"ogr {'on' if b['overlap_grad_reduce'] else 'off'}, "
            f"cp {b.get('context_parallel', 1)}")


def cmd_knobs(args):
    """Per study model, on the calibrated model (pruned search of the space): the best point
    with every strategy knob searched, and with the study's knob set only, and the gain."""
    print(f"machine: {platform.node()} {os.cpu_count()} cores (shared with other work while measured)")
    print("| model | best with the new knobs (arch, plan) | samples/s | best with the study's "
          "knobs (arch, plan) | samples/s | gain | time |")
    print("|---|---|---|---|---|---|---|")
    rows = _space(args.every)
    for name in args.models.split(","):
        t0 = time.perf_counter()
        full = search.search(name, devices=args.devices, space=rows, prune=True,
                             workers=args.workers, progress=False, baselines=False)
        study_set = search.search(name, devices=args.devices, space=rows, prune=True,
                                  workers=args.workers, progress=False, baselines=False,
                                  **STUDY_KNOB_SET)
        wall = time.perf_counter() - t0
        _check_best(full, rows, args.devices, 4096, False)
        _check_best(study_set, rows, args.devices, 4096, False)
        a, b = full.best, study_set.best
        if not (a.get("feasible") and b.get("feasible")):
            print(f"| {name} | {a.get('reason', '')} | | {b.get('reason', '')} | | | {wall:.0f} s |")
            continue
        if b["samples_per_s"] > a["samples_per_s"]:
            raise SystemExit(f"CHECK FAILED: {name}: the study's knob set beats the full search")
        print(f"| {name} | {a['arch_id']}, {_plan(a)} | {a['samples_per_s']:.2f} | "
              f"{b['arch_id']}, {_plan(b)} | {b['samples_per_s']:.2f} | "
              f"{a['samples_per_s'] / b['samples_per_s']:.3f}x | {wall:.0f} s |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sweep")
    p.add_argument("--model", default="gpt3-175b")
    p.add_argument("--mode", choices=("exhaustive", "prune", "both"), default="both")
    p.set_defaults(func=cmd_sweep)
    q = sub.add_parser("models")
    q.add_argument("--models", default=",".join(STUDY_MODELS))
    q.set_defaults(func=cmd_models)
    k = sub.add_parser("knobs")
    k.add_argument("--models", default=",".join(STUDY_MODELS))
    k.set_defaults(func=cmd_knobs)
    for x in (p, q, k):
        x.add_argument("--devices", type=int, default=1024)
        x.add_argument("--every", type=int, default=1, help="keep every K-th architecture")
        x.add_argument("--workers", type=int, default=None)
        x.add_argument("--study", action="store_true",
                       help="the original study's cost model and knob set (default: calibrated)")
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
