"""Benchmark of ``phaze.step.best_plans`` (the fastest plan per architecture over every
strategy knob) and ``phaze.step.step_lower_bounds``.

For gpt3-175b (default; any zoo model, e.g. mixtral-8x7b or llama3-70b at its zoo sequence,
with the default expert- and context-parallel grids of ``best_plans``), ``--devices`` 1024 chips, microbatch 1, recompute "full" and
each global batch of ``--batches`` (default 1536 and 4096): times ``best_plans`` on
``--rows`` rows of ``ArchSpace.default()`` (default 256, drawn with a fixed seed) and on
the a100-80g preset, warm (one untimed call first, so the graph and cost memos
are filled), best of ``--repeat``; prints rows per second. Serial kernels: one core.

Before reporting, it checks its answers: every returned plan of a sample of rows (and of
the a100) priced again by ``training_step`` gives the same time (to 1e-12 relative), the
same breakdown and the same peak-stage memory, within the capacity; and
``step_lower_bounds`` never exceeds a row's time.

Usage: ``python3 bench/bench_step.py [--model NAME] [--devices N] [--batches B ...]
[--rows N] [--repeat N] [--microbatch B] [--recompute MODE] [--check N]``
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import _bench_env  # the repository on sys.path; plan_keywords

from phaze import models, step  # noqa: E402
from phaze.arch import ArchSpace, presets  # noqa: E402

_BREAKDOWN = ("forward_s", "backward_s", "recompute_s", "p2p_s", "bubble_s", "dp_allreduce_s",
              "optimizer_s")


def _check(model, archs, out, lb, kw, rows):
    """training_step at each returned plan of ``rows`` equals the row; lb ≤ time."""
    assert np.all(lb <= out["time_s"]), "a lower bound exceeds its row's best time"
    for i in rows:
        rec = out[i]
        if not rec["feasible"]:
            assert math.isinf(rec["time_s"]) and rec["reason"] > 0
            continue
        r = step.training_step(model, archs[i:i + 1], microbatch=kw["microbatch"],
                               global_batch=kw["global_batch"], recompute=kw["recompute"],
                               **_bench_env.plan_keywords(rec))
        assert r.ok, r.reason
        assert abs(r.time_s - rec["time_s"]) <= 1e-12 * r.time_s, (r.time_s, rec["time_s"])
        for f in _BREAKDOWN:
            want = getattr(r.breakdown, f)
            assert abs(want - rec[f]) <= 1e-12 * abs(want), (f, want, rec[f])
        peak = r.peak_memory
        assert rec["memory_bytes"] == peak.total and peak.total <= peak.limit
        assert all(mb.fits for mb in r.memory)


def _time(fn, repeat):
    fn()   # warm: graph and cost memos
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--batches", type=int, nargs="+", default=[1536, 4096])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--microbatch", type=int, default=1)
    ap.add_argument("--recompute", default="full")
    ap.add_argument("--check", type=int, default=8, help="rows re-priced by training_step")
    args = ap.parse_args(argv)

    model = models.resolve(args.model)
    space = ArchSpace.default().configs
    rng = np.random.default_rng(0)
    sample = np.ascontiguousarray(space[np.sort(rng.choice(space.shape[0], args.rows,
                                                           replace=False))])
    a100 = presets.get("a100-80g")
    print(f"model {model.name} (sequence {model.seq_len}): {args.devices} devices, microbatch {args.microbatch}, "
          f"recompute {args.recompute}; serial kernels (one core)")
    for B in args.batches:
        kw = dict(devices=args.devices, global_batch=B, microbatch=args.microbatch,
                  recompute=args.recompute)
        for name, archs in ((f"ArchSpace.default() sample of {args.rows}", sample),
                            ("a100-80g preset", a100)):
            sec, out = _time(lambda: step.best_plans(model, archs, **kw), args.repeat)
            lsec, lb = _time(lambda: step.step_lower_bounds(model, archs, **kw), args.repeat)
            check = rng.choice(archs.shape[0], min(args.check, archs.shape[0]), replace=False)
            _check(model, archs, out, lb, kw, check)
            n = archs.shape[0]
            print(f"B={B} {name}: best_plans {sec:.3f} s = {n / sec:,.1f} rows/s "
                  f"({out['feasible'].sum()} feasible); step_lower_bounds {lsec:.3f} s "
                  f"= {n / lsec:,.1f} rows/s")
            if n == 1:
                r = out[0]
                print(f"    plan: t={r['tensor_parallel']} p={r['pipeline_parallel']} "
                      f"d={r['data_parallel']} ep={r['expert_parallel']} "
                      f"cp={r['context_parallel']} v={r['virtual_stages']} zero={r['zero_stage']} "
                      f"sp={r['sequence_parallel']} flash={r['flash_attention']} "
                      f"overlap={r['overlap_grad_reduce']}: {r['time_s']:.3f} s/iteration, "
                      f"{r['memory_bytes'] / 2 ** 30:.1f} GiB peak; lower bound {lb[0]:.3f} s")
    print("answers checked: returned plans == training_step (time, breakdown, peak memory), "
          "lower bound <= time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
