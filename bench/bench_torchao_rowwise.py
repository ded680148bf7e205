"""torchao's float8 row-wise linear on an H100, priced by phaze against torchao's own
microbenchmark of it (issue 25; docs/fidelity-sources.md §13.2).

Source: pytorch/ao commit 4c8086744 (2025-06-06, PR #2312), ``docs/static/fp8-rowwise-perf.png``,
produced by ``benchmarks/float8/float8_roofline.py --shape_gen_name sweep --float8_recipe_name
rowwise``: the speedup of ``LayerNorm -> Linear -> Sigmoid`` forward + backward with torchao's
``Float8Linear`` (recipe "rowwise") over the same module in bf16, both under ``torch.compile``,
each timed as the sum of its GPU kernels (profiler), PyTorch 2.8.0a0+git48807d5, "NVIDIA H100"
(the README's wording; the part is not named further). 36 (M, K) rows x 6 N columns, read off
the table image.

phaze prices the same module from its own operators on ``h100-96g`` (the torchtitan hosts'
500 W H100, whose GEMM fractions come from FBGEMM's bf16 and row-wise FP8 kernels timed on an
"H100 500W"): a LayerNorm (no affine) and its backward, the three GEMMs, a sigmoid and its
backward, and under fp8-rowwise the quantisation operators phaze's graphs add (the input and
the output gradient: ``quant_reads`` reads of the 16-bit tensor, ``quant_layouts`` FP8 copies;
the weight cast for the forward and again for the dgrad; the backward GEMMs' output-scaling
passes, ``Datatype.backward_rescale``). Nothing here is fitted.

    python3 bench/bench_torchao_rowwise.py [--arch h100-96g]

Prints measured / phaze speedup per shape and the distribution of phaze / measured.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from phaze import cost, precision  # noqa: E402
from phaze.arch import resolve  # noqa: E402
from phaze.graph import (KIND_GEMM, KIND_VECTOR, RESCALE_SCALE_BYTES, OpGraph,  # noqa: E402
                         VECTOR_CYCLES_PER_ELEMENT as C)

NS = (1024, 2048, 4096, 8192, 16384, 32768)
#: (M, K): measured speedup (bf16 time / rowwise time) for N in NS.
MEASURED = {
    (1024, 1024): (0.42, 0.42, 0.50, 0.51, 0.56, 0.56),
    (1024, 2048): (0.40, 0.38, 0.42, 0.50, 0.50, 0.56),
    (1024, 4096): (0.48, 0.43, 0.46, 0.53, 0.57, 0.60),
    (1024, 8192): (0.45, 0.48, 0.54, 0.62, 0.60, 0.62),
    (1024, 16384): (0.46, 0.48, 0.54, 0.60, 0.60, 0.61),
    (1024, 32768): (0.45, 0.50, 0.55, 0.60, 0.62, 0.65),
    (2048, 1024): (0.43, 0.43, 0.48, 0.55, 0.62, 0.65),
    (2048, 2048): (0.38, 0.45, 0.58, 0.65, 0.72, 0.75),
    (2048, 4096): (0.43, 0.50, 0.68, 0.78, 0.81, 0.82),
    (2048, 8192): (0.46, 0.58, 0.73, 0.82, 0.87, 0.89),
    (2048, 16384): (0.48, 0.62, 0.75, 0.83, 0.84, 0.85),
    (2048, 32768): (0.50, 0.64, 0.75, 0.84, 0.83, 0.99),
    (4096, 1024): (0.45, 0.47, 0.57, 0.66, 0.72, 0.76),
    (4096, 2048): (0.43, 0.53, 0.70, 0.83, 0.90, 0.91),
    (4096, 4096): (0.44, 0.64, 0.84, 1.01, 1.01, 1.04),
    (4096, 8192): (0.53, 0.72, 0.91, 1.01, 1.07, 1.13),
    (4096, 16384): (0.53, 0.74, 0.92, 1.05, 1.10, 1.18),
    (4096, 32768): (0.54, 0.75, 0.93, 1.02, 1.17, 1.18),
    (8192, 1024): (0.48, 0.52, 0.65, 0.77, 0.83, 0.84),
    (8192, 2048): (0.45, 0.64, 0.82, 1.01, 1.03, 1.06),
    (8192, 4096): (0.52, 0.76, 1.00, 1.13, 1.17, 1.19),
    (8192, 8192): (0.59, 0.85, 1.05, 1.20, 1.31, 1.41),
    (8192, 16384): (0.58, 0.82, 1.03, 1.22, 1.37, 1.40),
    (8192, 32768): (0.59, 0.82, 1.04, 1.30, 1.36, 1.46),
    (16384, 1024): (0.48, 0.58, 0.73, 0.86, 0.85, 0.89),
    (16384, 2048): (0.51, 0.70, 0.90, 1.05, 1.07, 1.15),
    (16384, 4096): (0.57, 0.79, 1.02, 1.20, 1.26, 1.40),
    (16384, 8192): (0.61, 0.87, 1.08, 1.33, 1.39, 1.49),
    (16384, 16384): (0.59, 0.83, 1.07, 1.34, 1.42, 1.55),
    (16384, 32768): (0.60, 0.85, 1.16, 1.35, 1.48, 1.72),
    (32768, 1024): (0.51, 0.62, 0.77, 0.87, 0.88, 0.94),
    (32768, 2048): (0.54, 0.73, 0.91, 1.08, 1.14, 1.27),
    (32768, 4096): (0.59, 0.81, 1.04, 1.28, 1.35, 1.49),
    (32768, 8192): (0.63, 0.87, 1.11, 1.41, 1.50, 1.62),
    (32768, 16384): (0.60, 0.83, 1.16, 1.39, 1.49, 1.73),
    (32768, 32768): (0.63, 0.93, 1.16, 1.48, 1.70, 1.52),
}


def _vector(name, elements, cycles, bytes_in, bytes_out, preds=()):
    return dict(name=name, kind=KIND_VECTOR, elements=int(elements), cycles_per_element=float(cycles),
                bytes_in=int(bytes_in), bytes_out=int(bytes_out), preds=list(preds))


def _gemm(name, m, k, n, low, e, preds):
    return dict(name=name, kind=KIND_GEMM, dims=(1, m, k, n), elements=m * n, fp8=low,
                bytes_in=int(round((m * k + k * n) * e)), bytes_out=2 * m * n, preds=list(preds))


def module_graph(M, K, N, dtype):
    """LayerNorm -> Linear(K, N) -> Sigmoid forward and backward on M rows, as phaze's graphs
    price them (``phaze.graph``'s operator rules, quantisation included)."""
    d = precision.datatype(dtype)
    low, e = d.low_precision, (d.element_bytes if d.low_precision else 2)
    qc = d.quant_reads * precision.QUANT_CYCLES_PER_ELEMENT

    def quant(name, elements, layouts):
        return _vector(name, elements, qc, d.quant_reads * 2 * elements, layouts * elements * d.element_bytes)

    ops = [_vector("ln", M * K, C["layernorm"], 2 * M * K, 2 * M * K)]
    fwd = ["ln"]
    if low:
        ops += [quant("x.quant", M * K, d.quant_layouts), quant("w.quant", K * N, 1)]
        fwd = ["x.quant", "w.quant"]
    ops += [_gemm("fc", M, K, N, low, e, fwd),
            _vector("sig", M * N, C["sigmoid"], 2 * M * N, 2 * M * N, ["fc"]),
            _vector("sig.bwd", M * N, C["sigmoid_bwd"], 4 * M * N, 2 * M * N, ["sig"])]
    bwd = ["sig.bwd"]
    if low:
        ops += [quant("dy.quant", M * N, d.quant_layouts), quant("wT.quant", K * N, 1)]
        bwd = ["dy.quant", "wT.quant"]
    ops += [_gemm("fc.dX", M, N, K, low, e, bwd), _gemm("fc.dW", N, M, K, low, e, bwd[:1])]
    dx = "fc.dX"
    if low and d.backward_rescale:
        # torchao's row-wise backward: each GEMM's 16-bit output scaled in a pass of its own
        def rescale(gemm, rows, cols):
            return _vector(gemm + ".rescale", rows * cols, C["add"],
                           2 * rows * cols + RESCALE_SCALE_BYTES * (rows + cols),
                           2 * rows * cols, [gemm])
        ops += [rescale("fc.dX", M, K), rescale("fc.dW", N, K)]
        dx = "fc.dX.rescale"
    ops += [_vector("ln.bwd", M * K, C["layernorm_bwd"], 4 * M * K, 2 * M * K, [dx])]
    return OpGraph.from_ops(ops, dtype=dtype)


def module_seconds(chip, M, K, N, dtype):
    g = module_graph(M, K, N, dtype)
    fp8 = chip.tensor_rate(dtype) if g.fp8.any() else None
    _, intra = cost.op_latencies(g, chip.row, model="calibrated",
                                 efficiency=chip.efficiency_set().row(), fp8_rate=fp8)
    return float(intra[:, 0].sum())


def compare(arch="h100-96g"):
    chip = resolve(arch)
    rows = []
    for (M, K), measured in MEASURED.items():
        for N, s in zip(NS, measured):
            p = module_seconds(chip, M, K, N, "bf16") / module_seconds(chip, M, K, N, "fp8-rowwise")
            rows.append((M, K, N, s, p))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="h100-96g")
    args = ap.parse_args(argv)
    rows = compare(args.arch)
    assert len(rows) == 216 and all(r[4] > 0 for r in rows)
    print(f"measured / phaze speedup of fp8-rowwise over bf16, {args.arch}")
    print("      M      K  " + " ".join(f"{n:>11d}" for n in NS))
    for i in range(0, len(rows), len(NS)):
        M, K = rows[i][:2]
        print(f"{M:7d} {K:6d}  " + " ".join(f"{r[3]:5.2f}/{r[4]:5.2f}" for r in rows[i:i + len(NS)]))
    ratio = np.array([r[4] / r[3] for r in rows])
    print(f"phaze / measured speedup over 216 shapes: median {np.median(ratio):.2f}, "
          f"min {ratio.min():.2f}, max {ratio.max():.2f}; "
          f"phaze's row-wise module is faster than measured at {int((ratio > 1).sum())} of 216")
    big = np.array([r[4] / r[3] for r in rows if min(r[:3]) >= 8192])
    print(f"at M, K, N >= 8192 ({big.size} shapes): median {np.median(big):.2f}")


if __name__ == "__main__":
    main()
