"""The model families of 2025–26 (issue 27): the plan search of each new zoo model on a
fixed system, timed warm, with its answer checked.

    python3 bench/bench_families.py [--devices 2048] [--arch h100-sxm] [--models a,b]

For every model: one cold run (graphs built, layers priced), then the same search again
warm (the memoised graphs and plan sets), as ``phaze search --model M --devices N --arch
A`` runs it at full recomputation and microbatch 1 (every other grid at its default). Prints the warm and cold seconds, the best
plan and its time, and checks the answer: the best plan, priced alone by
``phaze.step.training_step``, gives the same seconds per iteration (to 1e-12), fits in the
chip's HBM, and is launchable (no ZeRO 2 beside a pipeline).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from phaze import models, step
from phaze.arch import presets

DONE_WHEN = ("deepseek-v3", "nemotron-h-56b", "gpt-oss-120b")
OTHERS = ("kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "llama4-scout",
          "llama4-maverick", "nemotron-h-8b", "gemma-2-9b", "gemma-3-12b", "mistral-7b")


def search(name, arch, devices, global_batch):
    row = presets.get(arch)
    return step.best_plans(models.get(name), row, devices=devices, global_batch=global_batch,
                           microbatch=1, recompute="full"), row


def run(name, arch, devices, global_batch):
    t0 = time.perf_counter()
    out, row = search(name, arch, devices, global_batch)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    out, row = search(name, arch, devices, global_batch)
    warm = time.perf_counter() - t0
    best = out[0]
    if not best["feasible"]:
        return cold, warm, best, "no feasible plan"
    r = step.training_step(
        name, row, tensor_parallel=int(best["tensor_parallel"]),
        pipeline_parallel=int(best["pipeline_parallel"]),
        data_parallel=int(best["data_parallel"]), expert_parallel=int(best["expert_parallel"]),
        context_parallel=int(best["context_parallel"]),
        virtual_stages=int(best["virtual_stages"]), zero_stage=int(best["zero_stage"]),
        sequence_parallel=bool(best["sequence_parallel"]),
        flash_attention=bool(best["flash_attention"]),
        overlap_grad_reduce=bool(best["overlap_grad_reduce"]),
        overlap_param_gather=bool(best["overlap_param_gather"]),
        account_for_embedding=bool(best["account_for_embedding"]), microbatch=1,
        global_batch=global_batch, recompute="full")
    problems = []
    if not r.ok or abs(r.time_s - best["time_s"]) > 1e-12 * best["time_s"]:
        problems.append(f"training_step gives {r.time_s} s, the search {best['time_s']} s")
    if r.ok and any(m.total > float(row["hbm_gib"][0]) * 2 ** 30 for m in r.memory):
        problems.append("the best plan does not fit in HBM")
    if best["zero_stage"] == 2 and best["pipeline_parallel"] > 1:
        problems.append("ZeRO 2 beside a pipeline (no trainer launches it)")
    return cold, warm, best, "; ".join(problems)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2048)
    ap.add_argument("--arch", default="h100-sxm")
    ap.add_argument("--global-batch", type=int, default=4096)
    ap.add_argument("--models", default=",".join(DONE_WHEN + OTHERS))
    args = ap.parse_args(argv)
    bad = 0
    print(f"{'model':18s} {'cold s':>8s} {'warm s':>8s}  t  p     d  ep  cp v zero rc   "
          f"s/iter")
    for name in args.models.split(","):
        cold, warm, b, problem = run(name, args.arch, args.devices, args.global_batch)
        print(f"{name:18s} {cold:8.2f} {warm:8.2f} {b['tensor_parallel']:2d} "
              f"{b['pipeline_parallel']:2d} {b['data_parallel']:5d} {b['expert_parallel']:3d} "
              f"{b['context_parallel']:3d} {b['virtual_stages']} {b['zero_stage']:4d} full "
              f"{b['time_s']:8.3f}" + (f"   PROBLEM: {problem}" if problem else ""))
        bad += bool(problem)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
