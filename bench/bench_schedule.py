"""Benchmark of phaze.schedule (layer scheduling); checks its answers before timing.

Parts (each prints the figures recorded in bench/RESULTS.md):

1. quality: every layer kind (forward and backward) of every zoo model at each valid
   t in {1,2,4,8} and microbatch in {1,2,4,8}, on ``tpuv4`` and on 2,000 architectures
   drawn from the default space with seed 0, through ``schedule_many`` (the compiled
   pipeline: cut-operator split, list schedules, bounds, branch and bound; no MILP):
   fraction certified within 1 %, worst and median proven gap.
2. answers: a random sample of (graph, architecture) pairs re-solved with
   ``schedule_layer``; every schedule must pass ``check_schedule`` and agree with
   ``schedule_many``.
3. ``schedule_layer`` time per call on a cache miss (median, 95th percentile), with
   ``time_limit=0`` (compiled pipeline only) and with the MILP fallback on a sample.
4. ``schedule_many`` over all gpt3-175b layer kinds x all default architectures x
   t in {1,2,4,8} x microbatch in {1,2,4,8}: total wall time (latencies excluded).

Usage: python3 bench/bench_schedule.py [--quick] [--part N ...]
"""
import argparse
import os
import sys
import time

import numpy as np

import _bench_env  # noqa: E402,F401  (repository on sys.path)

from phaze import cost, graph, models  # noqa: E402
from phaze import schedule as S  # noqa: E402
from phaze.arch import ArchSpace, presets  # noqa: E402

WIDTHS = (1, 2, 4, 8)
MICROBATCHES = (1, 2, 4, 8)


def layer_graphs(model_names):
    """(label, OpGraph) for every distinct layer graph of the models at valid (t, b)."""
    seen = set()
    out = []
    for name in model_names:
        for t in WIDTHS:
            for b in MICROBATCHES:
                try:
                    mg = graph.build_layers(name, b, t)
                except ValueError:
                    continue  # t does not divide the heads: skipped, as docs/design.md §2.1 says
                for layer in mg.layers:
                    for direction, g in (("fwd", layer.forward), ("bwd", layer.backward)):
                        key = g.content_hash()
                        if key in seen:
                            continue
                        seen.add(key)
                        out.append((f"{name} t={t} b={b} {layer.kind} {direction}", g))
    return out


def sample_archs(n, seed=0):
    space = ArchSpace.default().configs
    rng = np.random.default_rng(seed)
    picked = space[np.sort(rng.choice(len(space), size=n, replace=False))]
    return np.concatenate([presets.get("tpuv4"), picked])


def part_quality(graphs, archs, gap=0.01):
    total = certified = 0
    worst = 0.0
    worst_label = ""
    gaps_all = []
    status_counts = np.zeros(4, dtype=np.int64)
    per_kind = {}
    t0 = time.perf_counter()
    sched_time = 0.0
    for label, g in graphs:
        single, intra = cost.op_latencies(g, archs)
        t1 = time.perf_counter()
        ms, lb, status = S.schedule_many(g, single, intra, archs["num_tc"], archs["num_vc"], gap=gap)
        sched_time += time.perf_counter() - t1
        assert np.all(np.isfinite(ms)) and np.all(lb <= ms), label
        g_rel = (ms - lb) / ms
        gaps_all.append(g_rel)
        total += g_rel.size
        certified += int(np.sum(g_rel <= gap))
        status_counts += np.bincount(status, minlength=4)[:4]
        kind = label.split()[-2] + " " + label.split()[-1]
        pk = per_kind.setdefault(kind, [0, 0, 0.0])
        pk[0] += g_rel.size
        pk[1] += int(np.sum(g_rel <= gap))
        pk[2] = max(pk[2], float(g_rel.max()))
        if g_rel.max() > worst:
            worst = float(g_rel.max())
            worst_label = f"{label}, arch row {int(np.argmax(g_rel))}"
    gaps_all = np.concatenate(gaps_all)
    print(f"[quality] {len(graphs)} distinct layer graphs x {len(archs)} architectures = {total} schedules")
    print(f"[quality] certified within {gap:.0%}: {certified / total:.4f} ({certified}/{total})")
    print(f"[quality] proven gap: worst {worst:.4f} ({worst_label}), median {np.median(gaps_all):.5f}, "
          f"95th pct {np.percentile(gaps_all, 95):.4f}, 99th pct {np.percentile(gaps_all, 99):.4f}; "
          f"within 2 %: {np.mean(gaps_all <= 0.02):.4f}, within 5 %: {np.mean(gaps_all <= 0.05):.4f}")
    print(f"[quality] status counts (optimal, certified, limit, infeasible): {status_counts.tolist()}")
    for kind, (n, c, w) in sorted(per_kind.items()):
        print(f"[quality]   {kind:14s} certified {c / n:.4f}  worst gap {w:.4f}")
    print(f"[quality] wall {time.perf_counter() - t0:.1f} s (schedule_many {sched_time:.1f} s)")


def part_answers(graphs, archs, n_pairs, seed=1):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(n_pairs):
        label, g = graphs[rng.integers(len(graphs))]
        a = int(rng.integers(len(archs)))
        row = archs[a:a + 1]
        single, intra = cost.op_latencies(g, row)
        ntc, nvc = int(row["num_tc"][0]), int(row["num_vc"][0])
        res = S.schedule_layer(g, single[:, 0], intra[:, 0], ntc, nvc, time_limit=0.0)
        errors = S.check_schedule(g, single[:, 0], intra[:, 0], ntc, nvc, res)
        assert errors == [], (label, a, errors)
        ms, lb, status = S.schedule_many(g, single, intra, row["num_tc"], row["num_vc"])
        assert ms[0] == res.makespan and lb[0] == res.lower_bound, (label, a)
        listed = S.list_schedule(g, single[:, 0], intra[:, 0], ntc, nvc)
        assert S.check_schedule(g, single[:, 0], intra[:, 0], ntc, nvc, listed) == []
        # auto stops improving once certified, so it may trail the full list schedule
        # (which runs every pass) by less than the gap
        assert res.makespan <= listed.makespan * (1 + 1e-12) or res.gap <= 0.01, (label, a)
        checked += 1
    print(f"[answers] {checked} sampled schedules pass check_schedule and agree with schedule_many")


def part_timing(graphs, archs, n_calls, n_milp, milp_limit, seed=2):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n_calls):
        label, g = graphs[rng.integers(len(graphs))]
        a = int(rng.integers(len(archs)))
        cases.append((label, g, a))
    lat = {}
    for label, g, a in cases:
        if (label, a) not in lat:
            s, i = cost.op_latencies(g, archs[a:a + 1])
            lat[(label, a)] = (s[:, 0].copy(), i[:, 0].copy())
    # per-graph preparation (cut operators, antichain widths, reachability) happens once
    # per graph, not per call: time it separately, then warm up the compiled kernels
    t0 = time.perf_counter()
    for label, g in graphs:
        S._prepare(g)
    prep_s = time.perf_counter() - t0
    print(f"[timing] graph preparation: {prep_s / len(graphs) * 1e3:.2f} ms per graph "
          f"({len(graphs)} graphs, once per graph)")
    label, g, a = cases[0]
    S.schedule_layer(g, *lat[(label, a)], int(archs["num_tc"][a]), int(archs["num_vc"][a]), time_limit=0.0)
    times = []
    uncertified = []
    for label, g, a in cases:
        S.clear_memo()
        s, i = lat[(label, a)]
        ntc, nvc = int(archs["num_tc"][a]), int(archs["num_vc"][a])
        t0 = time.perf_counter()
        res = S.schedule_layer(g, s, i, ntc, nvc, time_limit=0.0)
        times.append(time.perf_counter() - t0)
        if res.gap > 0.01:
            uncertified.append((label, g, a))
    times = np.array(times)
    print(f"[timing] schedule_layer(time_limit=0) on a cache miss, {len(times)} random (graph, arch) calls: "
          f"median {np.median(times) * 1e3:.3f} ms, 95th pct {np.percentile(times, 95) * 1e3:.3f} ms; "
          f"{len(uncertified)} outside 1 %")
    if n_milp and uncertified:
        pick = [uncertified[k] for k in rng.choice(len(uncertified), size=min(n_milp, len(uncertified)),
                                                   replace=False)]
        mt, closed, gaps = [], 0, []
        for label, g, a in pick:
            S.clear_memo()
            s, i = lat[(label, a)]
            ntc, nvc = int(archs["num_tc"][a]), int(archs["num_vc"][a])
            t0 = time.perf_counter()
            res = S.schedule_layer(g, s, i, ntc, nvc, time_limit=milp_limit)
            mt.append(time.perf_counter() - t0)
            assert S.check_schedule(g, s, i, ntc, nvc, res) == []
            closed += res.gap <= 0.01
            gaps.append(res.gap)
        mt = np.array(mt)
        print(f"[timing] MILP fallback (time_limit={milp_limit} s) on {len(pick)} of those: "
              f"{closed} certified within 1 %, worst gap after {max(gaps):.4f}, "
              f"median {np.median(mt):.2f} s, 95th pct {np.percentile(mt, 95):.2f} s")


def part_sweep(model="gpt3-175b", quick=False):
    space = ArchSpace.default().configs
    if quick:
        space = space[:2000]
    n_graphs = 0
    sched_time = 0.0
    lat_time = 0.0
    certified = total = 0
    worst = 0.0
    gaps = []
    for t in WIDTHS:
        for b in MICROBATCHES:
            try:
                mg = graph.build_layers(model, b, t)
            except ValueError:
                continue
            for layer in mg.layers:
                for g in (layer.forward, layer.backward):
                    t0 = time.perf_counter()
                    single, intra = cost.op_latencies(g, space)
                    lat_time += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    ms, lb, status = S.schedule_many(g, single, intra, space["num_tc"], space["num_vc"])
                    sched_time += time.perf_counter() - t0
                    assert np.all(lb <= ms)
                    gap = (ms - lb) / ms
                    gaps.append(gap)
                    certified += int(np.sum(gap <= 0.01))
                    total += gap.size
                    worst = max(worst, float(gap.max()))
                    n_graphs += 1
    print(f"[sweep] {model}: {n_graphs} layer graphs x {len(space)} architectures = {total} schedules: "
          f"schedule_many {sched_time:.1f} s ({sched_time / total * 1e6:.1f} us per schedule), "
          f"latencies {lat_time:.1f} s; certified within 1 %: {certified / total:.4f} "
          f"({certified}/{total}, {total - certified} not), worst gap {worst:.4f}")
    gaps = np.concatenate(gaps)
    print(f"[sweep] proven gap: 99th pct {np.percentile(gaps, 99):.4f}; within 2 %: {np.mean(gaps <= 0.02):.4f}, "
          f"within 5 %: {np.mean(gaps <= 0.05):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--part", type=int, action="append", help="run only these parts (1-4)")
    args = ap.parse_args()
    parts = set(args.part or (1, 2, 3, 4))
    names = models.names()
    n_archs = 200 if args.quick else 2000
    print(f"machine: {os.cpu_count()} CPUs visible; threads used by schedule_many: "
          f"PHAZE_NUM_THREADS={os.environ.get('PHAZE_NUM_THREADS', 'unset (all cores)')}")
    graphs = layer_graphs(names[:3] if args.quick else names)
    archs = sample_archs(n_archs)
    if 1 in parts:
        part_quality(graphs, archs)
    if 2 in parts:
        part_answers(graphs, archs, 50 if args.quick else 300)
    if 3 in parts:
        part_timing(graphs, archs, 300 if args.quick else 3000, 5 if args.quick else 20,
                    1.0 if args.quick else 10.0)
    if 4 in parts:
        part_sweep(quick=args.quick)


if __name__ == "__main__":
    main()
