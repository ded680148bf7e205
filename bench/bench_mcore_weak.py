"""Megatron-Core r0.8.0's published H100 weak-scaling table priced by phaze: a held-out
check (issue 25; docs/fidelity-sources.md §6.4 and §18). Reported, not fitted: no parameter
of any preset was set from these rows.

Source [P]: NVIDIA/Megatron-LM ``README.md`` "Performance Benchmarking" and its table image
``images/model_table.png`` (commit f2e5db40, 2024-07-15; the weak-scaling figure is labelled
"Megatron-Core r0.8.0"): GPT models of 1.7B to 462B parameters on H100, vocabulary 131,072,
sequence 4,096, "fine-grained overlapping with DP (--overlap-grad-reduce,
--overlap-param-gather), TP (--tp-comm-overlap), and PP (enabled by default)", throughputs
"include all operations (data loading, optimizer steps, communication, and logging)". Per
row: heads, hidden, layers, t, p, d, GPUs, global batch and the per-GPU TFLOP/s. The step
time is derived from the TFLOP/s with Megatron's own FLOP count (``megatron/training/
training.py`` ``num_floating_point_operations``, FFN 4h, no GQA):
72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) FLOP per step over t·p·d GPUs.

Not published, so each is a stated setting here: the FFN is 4h with GELU and biases (GPT),
embeddings untied (the 1.7B row's parameter count needs it), bf16 (MFU = TFLOP/s / 989),
no recomputation, flash attention, sequence parallelism at t > 1, the distributed optimizer
with both overlaps, fp32 gradient reduction (Megatron-LM's default under bf16,
``arguments.py``: ``accumulate_allreduce_grads_in_fp32`` set True), no interleaving,
Megatron-Core's unfused cross-entropy (``loss_kernel`` native: the release's default,
``cross_entropy_loss_fusion`` False; docs/fidelity-sources.md §27), and the microbatch (1
and 2 are both printed).

    python3 bench/bench_mcore_weak.py

Prints per row the derived measured step, phaze's step at microbatch 1 and 2, and the signed
errors; exits non-zero if a row cannot be priced.
"""
from __future__ import annotations

import sys

import _bench_env  # noqa: F401  (the repository on sys.path)
from phaze import models
from phaze.step import training_step

#: (label, heads, hidden, layers, t, p, d, global batch, TFLOP/s per GPU) — the table.
ROWS = (
    ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    ("7.1B", 32, 4096, 30, 2, 1, 48, 192, 465.9),
    ("16B", 48, 6144, 32, 4, 1, 48, 192, 489.1),
    ("32B", 56, 7168, 48, 8, 1, 48, 192, 459.6),
    ("70B", 64, 8192, 84, 8, 2, 48, 384, 419.7),
    ("119B", 80, 10240, 92, 8, 4, 48, 768, 420.5),
    ("177B", 96, 12288, 96, 8, 6, 48, 1152, 432.8),
    ("314B", 128, 16384, 96, 8, 8, 48, 1536, 474.4),
    ("462B", 144, 18432, 112, 8, 16, 48, 3072, 459.9),
)
VOCAB, SEQ = 131072, 4096


def measured_step_s(h, L, t, p, d, B, tflops):
    flop = 72.0 * B * SEQ * L * h * h * (1 + SEQ / (6 * h) + VOCAB / (12 * h * L))
    return flop / (t * p * d) / (tflops * 1e12)


def priced(label, a, h, L, t, p, d, B, microbatch):
    spec = models.ModelSpec(name=f"mcore-{label}", n_layers=L, hidden=h, heads=a, kv_heads=a,
                            ffn_hidden=4 * h, vocab=VOCAB, seq_len=SEQ, tied_embeddings=False)
    return training_step(
        spec, "h100-sxm", tensor_parallel=t, pipeline_parallel=p, data_parallel=d,
        microbatch=microbatch, global_batch=B, recompute="none", flash_attention=True,
        sequence_parallel=t > 1, zero_stage=1, overlap_grad_reduce=True,
        overlap_param_gather=True, tp_comm_overlap=t > 1, precision="bf16",
        grad_reduce_dtype="fp32", loss_kernel="native")


def main() -> int:
    bad = 0
    errs = {1: [], 2: []}
    print(f"{'model':6s} {'t':>2s} {'p':>3s} {'d':>3s} {'B':>5s} {'measured':>9s} "
          f"{'mb1':>8s} {'err':>7s} {'mb2':>8s} {'err':>7s}")
    for label, a, h, L, t, p, d, B, tf in ROWS:
        meas = measured_step_s(h, L, t, p, d, B, tf)
        cells = []
        for mb in (1, 2):
            r = priced(label, a, h, L, t, p, d, B, mb)
            if not r.ok:
                print(f"FAIL: {label} at microbatch {mb} not priced: {r.reason}")
                bad += 1
                cells.append(f"{'-':>8s} {'-':>7s}")
                continue
            e = 100 * (r.time_s / meas - 1)
            errs[mb].append(e)
            cells.append(f"{r.time_s:8.3f} {e:+6.1f}%")
        print(f"{label:6s} {t:2d} {p:3d} {d:3d} {B:5d} {meas:9.3f} " + " ".join(cells))
    for mb, es in errs.items():
        if es:
            print(f"microbatch {mb}: signed mean {sum(es) / len(es):+.1f} %, "
                  f"MAPE {sum(abs(e) for e in es) / len(es):.1f} %, "
                  f"max |error| {max(abs(e) for e in es):.1f} %")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
