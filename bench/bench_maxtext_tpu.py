"""Published MaxText training runs on TPU v5p and v6e (Trillium) priced by phaze: a held-out
check of the TPU presets (issue 26; docs/fidelity-sources.md §14, "Vector"). Reported, not
fitted: no parameter of any preset was set from these rows.

Source [P]: AI-Hypercomputer/maxtext ``docs/reference/models/tiering.md`` (commit 20a91e12),
"Approx tokens/sec/device" of the Gold tier, and the benchmark configurations it links
(``benchmarks/maxtext_v5p_model_configs.py`` and ``maxtext_trillium_model_configs.py`` at
commit 92e59fdf): every run is FSDP over all chips (``ici_fsdp_parallelism: -1`` or
``ici_fsdp_transpose_parallelism: -1``; phaze: ZeRO 3 over d = the chips, t = p = 1) with
flash (splash) attention, bf16, ``per_device_batch_size`` b (phaze: microbatch b, global batch
b·d, one microbatch per step). Step seconds = b · seq / (tokens/s/device).

MaxText's rematerialisation policies have no exact phaze form except "full":
``save_dot_except_mlpwi`` (saves every matmul output but the MLP's input projections) and
"custom" with the decoder input and q/k/v (and out) projections offloaded to host memory lie
between phaze's ``none`` and ``op`` (the elementwise operators and every second matmul
re-run) in recomputed work; both are printed, and a row is "inside" when the measured time
lies between them. Memory is not compared (host offload has no phaze form): phaze's peak per
chip is printed as "fits" (within the chip's HBM) or the GiB it needs.

Priced at the chips' published peak rates (``step.training_step``, no power cap): Google
publishes no TDP for v5p or v6e, so the 192 W default cap of ``phaze evaluate`` (issue 28's
TPUv4-class budget, for a chip without ``tdp_w``) is an estimate this check leaves out.

    python3 bench/bench_maxtext_tpu.py

Prints per row: the measured step, phaze's step under each recompute mode it is priced with,
the signed errors, and whether the measured step lies inside the bracket.
"""
from __future__ import annotations

import sys

import _bench_env  # noqa: F401  (the repository on sys.path)
from phaze import step

#: (label, model, chip, chips, b, seq, tokens/s/device, MaxText remat policy, phaze modes)
ROWS = (
    ("v5p Llama 2 70B (512 chips, SL 4096)", "llama2-70b", "tpu-v5p", 512, 4, 4096, 692,
     "save_dot_except_mlpwi", ("none", "op")),
    ("v6e Llama 3.1 8B (256 chips, SL 8192)", "llama3-8b", "tpu-v6e", 256, 4, 8192, 7207,
     "custom (offload)", ("none", "op")),
    ("v6e Llama 3.1 70B (256 chips, SL 8192)", "llama3-70b", "tpu-v6e", 256, 5, 8192, 960,
     "custom (offload)", ("none", "op")),
    ("v6e Llama 2 70B (256 chips, SL 4096)", "llama2-70b", "tpu-v6e", 256, 4, 4096, 900,
     "full", ("full",)),
)


def price(model, chip, d, b, mode):
    """phaze's step seconds of the MaxText plan, and its memory verdict."""
    r = step.training_step(model, chip, tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=d, microbatch=b, global_batch=b * d,
                           zero_stage=3, flash_attention=True, overlap_param_gather=True,
                           overlap_grad_reduce=True, recompute=mode)
    if r.breakdown is None:
        return float("nan"), r.status, float("nan"), False
    peak = r.peak_memory
    return r.breakdown.total_s, r.status, peak.total / 2 ** 30, peak.fits


def main() -> int:
    errors = []
    print(f"{'row':42s} {'measured':>9s}  phaze by recompute mode (error)")
    for label, model, chip, d, b, seq, tps, policy, modes in ROWS:
        measured = b * seq / tps
        cells, priced = [], []
        for mode in modes:
            s, status, peak, fits = price(model, chip, d, b, mode)
            if not s > 0:
                print(f"{label}: no step priced for recompute {mode} ({status})")
                return 1
            priced.append(s)
            err = 100.0 * (s - measured) / measured
            errors.append(err)
            fit = "fits" if fits else f"needs {peak:.1f} GiB"
            cells.append(f"{mode} {s:8.3f} s ({err:+6.1f} %, {fit})")
        inside = min(priced) <= measured <= max(priced) if len(priced) > 1 else None
        tail = "" if inside is None else ("  inside" if inside else "  outside")
        print(f"{label:42s} {measured:8.3f}s  " + "; ".join(cells) + tail
              + f"   [MaxText remat {policy}]")
    print(f"max |error| over the priced cells: {max(abs(e) for e in errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
