"""The 12 GEMMs of one transformer layer priced on a preset against Transformer Engine's own
measurement of them (issue 26; docs/fidelity-sources.md §1.7).

Source: NVIDIA/TransformerEngine ``docs/examples/gemm_profiling/gemm_profiling.rst`` (TE's
``benchmarks/gemm/benchmark_gemm.py``, CUDA events, 10 warm-up and 100 timed iterations):
the 5B layer (hidden 4096, intermediate 16384, M = 31 x 512 = 15,872 tokens), its 4 Fprop,
4 Dgrad and 4 Wgrad GEMMs, per-layer sums on an NVIDIA B300 SXM6 AC. BF16 is a plain GEMM
(autocast and pre-quantized agree within 3 %); the FP8 figure used is FP8 current scaling with
``--pre-quantize``: the GEMM kernel alone, as phaze prices the quantisation as its own
operators.

    python3 bench/bench_te_gemm.py            # priced vs measured on b300, b200, gb200
    python3 bench/bench_te_gemm.py --solve    # the fraction at which b300 prices them at TE's sum

Prints, per chip and datatype, phaze's per-pass sums (ms) and the measured ones, and with
``--solve`` the tile efficiency that reproduces the measured sum (fixed-point iteration on
the compute-bound price, which is proportional to 1 / efficiency).
"""
import argparse
import dataclasses

from phaze import cost
from phaze.arch import efficiency, presets, dtype_rates  # noqa: F401
from phaze.graph import OpGraph

#: (name, M, K, N) of the layer's GEMMs as the tutorial lists them (M x K x N).
FPROP = (("qkv", 15872, 4096, 12288), ("out", 15872, 4096, 4096),
         ("up", 15872, 4096, 16384), ("down", 15872, 16384, 4096))
DGRAD = (("qkv", 15872, 12288, 4096), ("out", 15872, 4096, 4096),
         ("up", 15872, 16384, 4096), ("down", 15872, 4096, 16384))
WGRAD = (("qkv", 4096, 15872, 12288), ("out", 4096, 15872, 4096),
         ("up", 4096, 15872, 16384), ("down", 16384, 15872, 4096))
PASSES = (("fprop", FPROP), ("dgrad", DGRAD), ("wgrad", WGRAD))

#: B300 SXM6 AC per-layer sums, ms (fprop, dgrad, wgrad): BF16 (autocast table) and FP8
#: current scaling pre-quantized (the kernels alone).
TE_B300_MS = {"bf16": (4.196, 4.290, 4.272), "fp8": (2.158, 2.329, 2.325)}


def gemm_seconds(chip, shapes, fp8=False, eff=None):
    """Calibrated intra-op seconds of each (name, M, K, N) GEMM on preset ``chip``."""
    row = presets.get(chip)
    eff = eff if eff is not None else efficiency.get(chip)
    ops = [dict(name=n, kind=0, dims=(1, m, k, nn), fp8=fp8) for n, m, k, nn in shapes]
    g = OpGraph.from_ops(ops, dtype="fp8" if fp8 else "bf16")
    rate = presets.FP8_RATE[chip] if fp8 else None
    return cost.op_latencies(g, row, model="calibrated", efficiency=eff,
                             fp8_rate=rate)[1][:, 0]


def pass_sums_ms(chip, fp8=False, eff=None):
    return tuple(1e3 * float(gemm_seconds(chip, shapes, fp8, eff).sum()) for _, shapes in PASSES)


def solve(chip, dtype, measured_ms, iters=30):
    """The ``tile_efficiency`` (bf16) or ``fp8_tile_efficiency`` at which ``chip`` prices the
    12 GEMMs at ``measured_ms`` summed."""
    field = "fp8_tile_efficiency" if dtype == "fp8" else "tile_efficiency"
    e = efficiency.get(chip)
    target = sum(measured_ms)
    for _ in range(iters):
        got = sum(pass_sums_ms(chip, dtype == "fp8", e))
        e = dataclasses.replace(e, **{field: getattr(e, field) * got / target})
    return getattr(e, field), sum(pass_sums_ms(chip, dtype == "fp8", e))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solve", action="store_true")
    a = ap.parse_args(argv)
    for chip in ("b300", "b200", "gb200"):
        for dtype in ("bf16", "fp8"):
            got = pass_sums_ms(chip, dtype == "fp8")
            line = f"{chip:6s} {dtype}: phaze " + " ".join(f"{x:.3f}" for x in got) + \
                f"  sum {sum(got):.3f} ms"
            if chip == "b300":
                m = TE_B300_MS[dtype]
                line += f"   TE {' '.join(f'{x:.3f}' for x in m)}  sum {sum(m):.3f} ms  " \
                        f"({100 * (sum(got) / sum(m) - 1):+.1f} %)"
            print(line)
    if a.solve:
        for dtype in ("bf16", "fp8"):
            f, check = solve("b300", dtype, TE_B300_MS[dtype])
            print(f"b300 {dtype}: fraction {f:.6f} prices the 12 GEMMs at {check:.3f} ms "
                  f"(TE {sum(TE_B300_MS[dtype]):.3f})")


if __name__ == "__main__":
    main()
