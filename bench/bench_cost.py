"""Benchmark of ``phaze.cost.op_latencies`` over the original study's whole space.

Times the latencies of every operator of the gpt3-175b layer kinds (embedding, block,
head; forward and backward) for tensor-parallel widths t ∈ {1, 2, 4, 8} and
microbatches ∈ {1, 2, 4, 8} on all 29,360 architectures of ``ArchSpace.default()``,
after one untimed call (the operator loop is compiled ahead of time, so that call
only imports). Target: ≤ 5 s on a 2-core machine.

Before reporting, it checks its answers: every latency finite and at least the
roofline bound, intra-op never slower than one core, and a sample of (operator,
architecture) pairs equal to the slow reference in ``tests/naive.py``.

``--cost-model calibrated`` times the calibrated model instead (real-chip efficiency,
``phaze.cost`` module docstring; parameters ``--efficiency``, default ``template``, the set
of the study's hypothetical chips), checked against ``naive_op_latencies_calibrated``.
``--ops-table ARCH`` prints, per operator of the gpt3-175b block (microbatch 1, t = 8),
the study and calibrated intra-op latencies on preset ARCH with its own parameter set.
``--components`` prints the calibrated model against the component measurements of
``docs/fidelity-sources.md`` (GEMM fractions of peak, nccl-tests all-reduce times).

Usage: ``python3 bench/bench_cost.py [--repeat N] [--model NAME] [--fresh-archs]
[--cost-model study|calibrated] [--efficiency SET] [--ops-table ARCH] [--components]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
import _bench_env  # noqa: E402,F401  (repository on sys.path)
sys.path.insert(0, str(REPO / "tests"))

from phaze import cost  # noqa: E402
from phaze.arch import ArchSpace  # noqa: E402
from phaze.graph import build_layers  # noqa: E402


def _graphs(model):
    graphs = []
    for t in (1, 2, 4, 8):
        for mb in (1, 2, 4, 8):
            for layer in build_layers(model, mb, t).layers:
                graphs.append((f"t={t} mb={mb} {layer.kind} fwd", layer.forward))
                graphs.append((f"t={t} mb={mb} {layer.kind} bwd", layer.backward))
    return graphs


def _check(graphs, archs, results, kw):
    from naive import naive_op_latencies, naive_op_latencies_calibrated
    from phaze.arch import efficiency

    rng = np.random.default_rng(0)
    for (label, g), (single, intra) in zip(graphs, results):
        lb_single, lb_intra = cost.roofline_bounds(g, archs)
        assert np.all(np.isfinite(single)) and np.all(np.isfinite(intra)), label
        assert np.all(single >= lb_single * (1 - 1e-12)), label
        assert np.all(intra >= lb_intra * (1 - 1e-12)), label
        assert np.all(intra <= single * (1 + 1e-12)), label
    # the slow reference on a sample: a few graphs, a few architectures each
    # (the reference enumerates every tile width, so it takes seconds per large GEMM)
    for gi in rng.choice(len(graphs), size=3, replace=False):
        label, g = graphs[gi]
        cols = rng.choice(archs.shape[0], size=2, replace=False)
        if kw["model"] == "study":
            ref_single, ref_intra = naive_op_latencies(g, archs[cols])
        else:
            eff = efficiency.rows(kw["efficiency"], archs.shape[0])[cols]
            ref_single, ref_intra = naive_op_latencies_calibrated(g, archs[cols], eff)
        np.testing.assert_allclose(results[gi][0][:, cols], ref_single, rtol=1e-12, err_msg=label)
        np.testing.assert_allclose(results[gi][1][:, cols], ref_intra, rtol=1e-12, err_msg=label)


def _ops_table(model, arch_name):
    """Study vs calibrated intra-op latency of every operator of the block, one preset."""
    from phaze.arch import presets

    row = presets.get(arch_name)
    layer = next(lay for lay in build_layers(model, 1, 8).layers if lay.kind == "block")
    print(f"{model} block, microbatch 1, t = 8, on {arch_name} (efficiency set {arch_name}); intra-op, us")
    print(f"{'pass':4} {'operator':28} {'study':>10} {'calibrated':>11} {'ratio':>6}")
    for label, g in (("fwd", layer.forward), ("bwd", layer.backward)):
        study = cost.op_latencies(g, row)[1][:, 0]
        cal = cost.op_latencies(g, row, model="calibrated", efficiency=arch_name)[1][:, 0]
        for i, name in enumerate(g.names):
            ratio = cal[i] / study[i] if study[i] > 0 else float("nan")
            print(f"{label:4} {name:28} {study[i] * 1e6:10.1f} {cal[i] * 1e6:11.1f} {ratio:6.2f}")
        print(f"{label:4} {'sum':28} {study.sum() * 1e6:10.1f} {cal.sum() * 1e6:11.1f} "
              f"{cal.sum() / study.sum():6.2f}")
    return 0


# Component measurements of docs/fidelity-sources.md (a check of the calibrated rules; the
# first two set tile_efficiency, the others were not used to set anything).
_GEMM_CHECKS = (  # preset, (M, K, N), measured fraction of peak, source
    ("a100-80g", (1024, 5120, 10240), 0.869, "MAMF best shape (sets tile_efficiency)"),
    ("h100-sxm", (2048, 13312, 2048), 0.803, "MAMF best shape (sets tile_efficiency)"),
    ("a100-80g", (3456, 8192, 4096), 0.754, "CUTLASS profiler 256x128_32x3"),
)
# 8xA100 all_reduce_perf (ml-engineering network/README.md): bytes, seconds
_NCCL_A100 = ((32768, 43.83e-6), (1048576, 101.9e-6), (16777216, 276.6e-6), (67108864, 684.6e-6),
              (268435456, 2420.6e-6), (1073741824, 8203.9e-6), (4294967296, 32136e-6))


def _components():
    """The calibrated model against the sheet's component measurements."""
    from phaze.arch import peak_flops, presets
    from phaze.graph import OpGraph

    print("GEMM (intra-op, bf16): calibrated vs measured fraction of the vendor peak")
    for name, (m, k, n), measured, what in _GEMM_CHECKS:
        row = presets.get(name)
        g = OpGraph.from_ops([dict(name="g", kind=0, dims=(1, m, k, n), elements=m * n,
                                   bytes_in=2 * (m * k + k * n), bytes_out=2 * m * n)])
        t_study = cost.op_latencies(g, row)[1][0, 0]
        t_cal = cost.op_latencies(g, row, model="calibrated", efficiency=name)[1][0, 0]
        flops = 2.0 * m * k * n
        peak = peak_flops(row)[0]
        print(f"  {name:9} M={m:5} K={k:5} N={n:5}: study {flops / t_study / peak:.3f}, "
              f"calibrated {flops / t_cal / peak:.3f}, measured {measured:.3f} ({what})")
    print("all-reduce, 8 x a100-80g in one node: calibrated vs nccl-tests (seconds)")
    row = presets.get("a100-80g")
    for size, measured in _NCCL_A100:
        g = OpGraph.from_ops([dict(name="ar", kind=3, comm_bytes=size, group_size=8, bytes_in=size,
                                   bytes_out=size)])
        t_study = cost.op_latencies(g, row)[0][0, 0]
        t_cal = cost.op_latencies(g, row, model="calibrated", efficiency="a100-80g")[0][0, 0]
        print(f"  {size:>11,} B: study {t_study:.3e}, calibrated {t_cal:.3e}, measured {measured:.3e} "
              f"({(t_cal - measured) / measured * 100:+.0f} %)")
    print("point-to-point on a100-80g, calibrated: 1 GiB in node "
          f"{cost.p2p_seconds(2 ** 30, row, inter_node=False, model='calibrated', efficiency='a100-80g')[0, 0]:.3e} s "
          "(sendrecv_perf 1 GiB at 195.1e9 B/s: 5.503e-03 s); 50 MB between nodes "
          f"{cost.p2p_seconds(50e6, row, inter_node=True, model='calibrated', efficiency='a100-80g')[0, 0]:.3e} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (the best is reported)")
    parser.add_argument("--model", default="gpt3-175b")
    parser.add_argument("--fresh-archs", action="store_true",
                        help="pass a new copy of the architectures to every call (defeats the memo of "
                             "validated, deduplicated inputs, as if every call saw a new chunk)")
    parser.add_argument("--cost-model", choices=cost.MODELS, default="study")
    parser.add_argument("--efficiency", default=None,
                        help="parameter set of the calibrated model (phaze.arch.efficiency.names())")
    parser.add_argument("--ops-table", metavar="ARCH", default=None,
                        help="print study vs calibrated latency of the gpt3-175b block's operators on ARCH")
    parser.add_argument("--components", action="store_true",
                        help="print the calibrated model against the component measurements it rests on")
    args = parser.parse_args(argv)
    if args.components:
        return _components()
    if args.ops_table:
        return _ops_table(args.model, args.ops_table)
    kw = dict(model=args.cost_model)
    if args.cost_model == "calibrated":
        kw["efficiency"] = args.efficiency

    archs = ArchSpace.default().configs
    graphs = _graphs(args.model)
    n_ops = sum(g.n_ops for _, g in graphs)
    cost.op_latencies(graphs[0][1], archs[:8], **kw)  # untimed: the first call imports

    times = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        if args.fresh_archs:
            results = [cost.op_latencies(g, archs.copy(), **kw) for _, g in graphs]
        else:
            results = [cost.op_latencies(g, archs, **kw) for _, g in graphs]
        times.append(time.perf_counter() - start)
    _check(graphs, archs, results, kw)

    best = min(times)
    pairs = n_ops * archs.shape[0]
    print(f"model {args.model}: {len(graphs)} op graphs, {n_ops} operators x {archs.shape[0]:,} architectures "
          f"= {pairs:,} (operator, architecture) pairs, two modes each")
    print(f"op_latencies total: best {best:.3f} s of {len(times)} "
          f"(all: {', '.join(f'{t:.3f}' for t in times)}); {best / pairs * 1e9:.1f} ns per pair; "
          f"serial kernel, {os.cpu_count()} CPUs; cost model {args.cost_model}"
          f"{' (' + (args.efficiency or 'template') + ')' if args.cost_model == 'calibrated' else ''}; "
          f"{'a fresh copy of the architectures per call' if args.fresh_archs else 'one architecture array'}")
    print("answers checked: finite, >= roofline, intra <= single, sample == tests/naive.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
