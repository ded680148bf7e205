"""Benchmark of phaze.placement: median in-process solve time on the golden bench instances.

    python3 bench/bench_placement.py [--repeat N] [--sweep P]

Checks its answers before it reports a time: the GPT-3 instance must reach the
original solver's optimum (18.840038387843546 s, rel 1e-9) and every returned
plan must re-evaluate (phaze.placement.evaluate) to its reported time.  Then:

* ``solve`` median over N calls (validation-free: the problem is built once),
  and the compiled kernel alone on the packed arrays;
* ``solve_many`` over P variants of the GPT-3 instance (memory per device,
  recomputation and optimizer varied, as a sweep does), with 1 thread and
  with every core, reported per problem.
"""
import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
import _bench_env  # noqa: E402,F401  (repository on sys.path)

from phaze import placement as pl  # noqa: E402
from phaze.placement import _dp as kernel  # noqa: E402
from phaze._threads import available_cores  # noqa: E402

GOLDEN = Path(os.environ.get("PHAZE_GOLDEN", REPO.parent / "shared" / "golden"))
GPT3_OPTIMUM_S = 18.840038387843546


def _median_ms(fn, repeat):
    fn()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), 1e3 * min(times)


def _check(problem, plan, expected=None):
    if expected is not None and abs(plan.time_per_batch - expected) > 1e-9 * expected:
        raise SystemExit(f"wrong optimum: {plan.time_per_batch!r} != {expected!r}")
    if plan.feasible:
        again = pl.evaluate(problem, plan)
        if abs(again - plan.time_per_batch) > 1e-12 * plan.time_per_batch:
            raise SystemExit(f"plan re-evaluates to {again!r}, reported {plan.time_per_batch!r}")


def _variants(problem, count):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        out.append(pl.PlacementProblem.from_trusted_arrays(
            problem.widths, problem.forward_s, problem.backward_s, problem.param_bytes,
            problem.activation_bytes, problem.tensor_parallel, problem.edge_bytes,
            problem.devices, problem.memory_bytes * rng.uniform(0.05, 2.0), problem.bandwidth,
            problem.microbatches, bool(rng.integers(2)), "adam" if rng.integers(2) else "sgd",
            problem.layer_ids))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=200, help="timed solves per instance")
    ap.add_argument("--sweep", type=int, default=2000, help="problems in the solve_many run")
    args = ap.parse_args()
    if not GOLDEN.is_dir():
        raise SystemExit(f"golden data not found at {GOLDEN} (set PHAZE_GOLDEN)")
    print(f"cores available: {available_cores()}")
    for name, expected in (("placement_bench_gpt3_1024.json", GPT3_OPTIMUM_S),
                           ("placement_bench_200x8192.json", None)):
        problem = pl.load_phaze_json(GOLDEN / name)
        plan = pl.solve(problem)
        _check(problem, plan, expected)
        packed = pl._pack([problem])
        med, best = _median_ms(lambda: pl.solve(problem), args.repeat)
        kmed, kbest = _median_ms(lambda: kernel.solve_packed(*packed, num_threads=1), args.repeat)
        print(f"{name}: optimum {plan.time_per_batch!r} s (t={plan.tensor_parallel}, "
              f"d={plan.data_parallel}, S={plan.pipeline_parallel}); widths {problem.widths.tolist()}, "
              f"{problem.n_layers} layers, {problem.devices} devices")
        print(f"  solve   median {med:.3f} ms  (min {best:.3f} ms) over {args.repeat}")
        print(f"  kernel  median {kmed:.3f} ms  (min {kbest:.3f} ms) over {args.repeat}")

    problem = pl.load_phaze_json(GOLDEN / "placement_bench_gpt3_1024.json")
    variants = _variants(problem, args.sweep)
    results = {}
    for threads in sorted({1, available_cores()}):
        os.environ["PHAZE_NUM_THREADS"] = str(threads)
        t0 = time.perf_counter()
        plans = pl.solve_many(variants)
        elapsed = time.perf_counter() - t0
        results[threads] = plans
        print(f"solve_many gpt3 variants x{len(variants)}, {threads} thread(s): {elapsed:.3f} s, "
              f"{1e3 * elapsed / len(variants):.3f} ms per problem, "
              f"{sum(p.feasible for p in plans)} feasible")
    os.environ.pop("PHAZE_NUM_THREADS", None)
    first = next(iter(results.values()))
    if any(r != first for r in results.values()):
        raise SystemExit("solve_many results differ between thread counts")
    for p, plan in zip(variants[:200], first[:200]):
        _check(p, plan)
        if plan != pl.solve(p):
            raise SystemExit("solve_many differs from solve")


if __name__ == "__main__":
    main()
