"""Where a calibrated sweep's time goes, and how far it is from its arithmetic (issue 24).

Runs the README's first command (``phaze search --model gpt3-175b --devices 1024 --prune``,
any model / devices with the flags) in this process, serially (one core, ``executor=
"serial"``), once untimed to load the graph memo and the page cache, then timed with
every component wrapped by a timer:

- ``op latencies (kernel)``: the compiled operator loop (``phaze.cost._kernels``);
- ``layer tables (rest)``: pricing every layer variant on a chunk's rows besides that
  kernel (the sequence-parallel rings, overlapped gathers, sums, point-to-point sends);
- ``plan sets``: enumerating a model's plans with their records, memory and rank layouts
  (once per model, microbatch, recomputation mode and node sizes; shared by the chunks;
  the process-wide memo is cleared before the timed run, so they are built there);
- ``plan search (kernel)``: ``search_rows``, the exact branch and bound over the plans of
  each row (its bound per plan and the full ``step_time`` of the plans it cannot skip);
- ``plan search (rest)``: assembling the result rows from the kernel's plan indices;
- ``bounds``: the per-architecture throughput bounds pruning uses;
- ``rest``: the chunk runner, its rows and pruning, the baselines, the result file.

It prints each component's seconds and share, the plans bounded and priced, plans per
evaluated point, plans/s per core (this run is one core), and the plan search kernel's own
rates: what the sweep would reach if everything but that kernel were free, and the share
of the sweep's time the plan arithmetic is. Before reporting it checks its answer: the
best architecture and samples/s of the README's run (``--expect-arch``,
``--expect-sps``; ``--no-check`` for another model).

Usage: ``python3 bench/bench_sweep_profile.py [--model NAME] [--devices N] [--no-check]``
"""
from __future__ import annotations

import argparse
import time

import _bench_env  # noqa: F401  (repository on sys.path)

from phaze.cost import _kernels as cost_kernels  # noqa: E402
from phaze.search import search  # noqa: E402
from phaze.step import _kernels as step_kernels  # noqa: E402
from phaze.step import _plans  # noqa: E402


class Timers:
    """Wall seconds per component, nested timers subtracted from their parents."""

    def __init__(self):
        self.total = {}
        self._stack = []

    def wrap(self, owner, attr, name):
        fn = getattr(owner, attr)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            self._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = self._stack.pop()
                dt = time.perf_counter() - t0
                self.total[name] = self.total.get(name, 0.0) + dt - inner
                if self._stack:
                    self._stack[-1] += dt

        setattr(owner, attr, timed)
        return fn


def run(model, devices):
    return search(model, devices=devices, prune=True, executor="serial", progress=False)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--expect-arch", type=int, default=29163)
    ap.add_argument("--expect-sps", type=float, default=147.19000031009793)
    args = ap.parse_args(argv)

    run(args.model, args.devices)  # untimed: graph memo, page cache
    _plans._PLAN_SETS.clear()       # a sweep builds its plan sets once: time that too
    timers = Timers()
    timers.wrap(cost_kernels, "_op_latencies", "op latencies (kernel)")
    timers.wrap(_plans, "_layer_table", "layer tables (rest)")
    timers.wrap(_plans._PlanSet, "__init__", "plan sets")
    timers.wrap(step_kernels, "search_rows", "plan search (kernel)")
    timers.wrap(_plans, "_search_plans", "plan search (rest)")
    timers.wrap(_plans, "_lower_bounds", "bounds")
    t0 = time.perf_counter()
    r = run(args.model, args.devices)
    wall = time.perf_counter() - t0
    meta = r.metadata
    best = r.best
    if not args.no_check:
        got = (int(best["arch_id"]), float(best["samples_per_s"]))
        assert got == (args.expect_arch, args.expect_sps), f"best point {got} is not the README's"
    parts = dict(timers.total)
    parts["rest"] = wall - sum(parts.values())
    print(f"{args.model} on {args.devices} devices, prune best, one core: {wall:.2f} s wall, "
          f"{meta['points_evaluated']:,} points evaluated "
          f"({meta['points_evaluated'] / wall:,.0f} points/s)")
    print(f"{'component':<24}{'s':>8}{'share':>8}")
    for name, s in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"{name:<24}{s:>8.2f}{s / wall:>8.1%}")
    bounded, priced = meta["plans_bounded"], meta["plans_priced"]
    kern_s = parts["plan search (kernel)"]
    print(f"plans bounded {bounded:,}, priced {priced:,} "
          f"({bounded / meta['points_evaluated']:,.0f} and {priced / meta['points_evaluated']:,.1f}"
          f" per point)")
    print(f"plans priced per core-second: {priced / wall:,.0f} (whole sweep); "
          f"{priced / kern_s:,.0f} in the plan search kernel alone, which also forms "
          f"{bounded / kern_s:,.0f} bounds/s")
    print(f"the plan arithmetic is {kern_s / wall:.1%} of the sweep: with everything else free "
          f"it would run {wall / kern_s:.1f}x faster")


if __name__ == "__main__":
    main()
