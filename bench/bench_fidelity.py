"""Component- and layer-level fidelity of the calibrated model on the A100 (issue 13).

Prints, for the ``a100-80g`` preset (or an A100 40 GB row where the measurement was taken
on one), phaze's prediction next to the published measurement:

1. the unfused attention core (Megatron-LM's column of Dao et al. 2022, "FlashAttention",
   Appendix E.6, Tables 15–20: A100 40 GB, fp16, batch 16, 8 heads, head dim 64, no mask;
   Table 17 at s = 2048 is the measurement ``attention_hbm_efficiency`` is derived from);
2. the in-node ring all-reduce on 8 GPUs against ``all_reduce_perf`` run with one process
   per GPU (docs/fidelity-sources.md §4.1, run "C2"; the α–β the a100 preset fits to it);
3. one 22B transformer layer (t = 8, b = 4, s = 2048) against Korthikanti et al. 2022
   Table 4 (forward, backward, sequence-parallel forward and backward, and the recomputed
   attention core = selective − baseline backward). Not inputs: layer-level evidence.

It checks its answers: the layer's forward and backward times are the ones
``phaze.step.training_step`` adds up (a one-stage, one-microbatch plan of the same layer
reproduces L · layer + embedding + head to 1e-12).

Usage: ``python3 bench/bench_fidelity.py``
"""
from __future__ import annotations

import json
import sys

import numpy as np

import _bench_env  # noqa: F401  (repository on sys.path)

from phaze import cost, graph, models, step, validate  # noqa: E402
from phaze.step._layers import ATTENTION_CORE  # noqa: E402
from phaze.arch import make_archs, resolve_chip  # noqa: E402

#: Dao et al. 2022 Appendix E.6, "Megatron" column, ms: (table, dropout, pass) → {s: ms}.
FLASH_TABLES = {
    (15, True, "fwd"): {1024: 1.88, 2048: 6.56}, (16, True, "bwd"): {1024: 2.94, 2048: 10.80},
    (17, True, "fwd+bwd"): {1024: 4.73, 2048: 17.41},
    (18, False, "fwd"): {1024: 1.33, 2048: 4.28}, (19, False, "bwd"): {1024: 2.59, 2048: 8.86},
    (20, False, "fwd+bwd"): {1024: 3.80, 2048: 13.21},
}
#: all_reduce_perf, 8 × A100-SXM4-80GB, mpirun -np 8 … -g 1, out-of-place µs (sheet §4.1, C2).
ALLREDUCE_MPIRUN_US = {2 ** 23: 130.6, 2 ** 24: 213.3, 2 ** 25: 377.6, 2 ** 26: 615.7,
                       2 ** 27: 1181.6, 2 ** 28: 2218.2, 2 ** 29: 4248.8, 2 ** 30: 8244.5}
#: Korthikanti et al. 2022 Table 4, one 22B layer, ms.
TABLE4_MS = dict(fwd=7.7, bwd=11.9, sp_fwd=7.2, sp_bwd=11.8, core=13.2 - 11.9)


def _attention_core():
    row = make_archs(base="a100-80g", hbm_gb_per_s=1555.0)  # the 40 GB part's HBM2
    print("1. unfused attention core, A100 40 GB (Dao et al. 2022 App. E.6, Megatron column)")
    print(f"   {'table':>5} {'dropout':>7} {'pass':>8} {'s':>5} {'phaze ms':>9} {'measured':>9} {'error':>7}")
    for s in (1024, 2048):
        spec = models.ModelSpec(name="fa-bench", n_layers=1, hidden=512, heads=8, kv_heads=8,
                                ffn_hidden=2048, vocab=512, seq_len=s, causal=False)
        blk = graph.build_layers(spec, 16, 1, kernels="megatron", dtype="fp16").layers[1]
        parts = {}
        for key, g in (("fwd", blk.forward), ("bwd", blk.backward)):
            _, intra = cost.op_latencies(g, row, model="calibrated", efficiency="a100-80g")
            for dropout in (True, False):
                parts[key, dropout] = sum(
                    intra[i, 0] for i, n in enumerate(g.names)
                    if n in graph.UNFUSED_ATTENTION_OPS and (dropout or "dropout" not in n))
        for (table, dropout, what), measured in FLASH_TABLES.items():
            pred = sum(parts[k, dropout] for k in what.split("+")) * 1e3
            err = 100 * (pred - measured[s]) / measured[s]
            print(f"   {table:>5} {'yes' if dropout else 'no':>7} {what:>8} {s:>5} {pred:9.2f} "
                  f"{measured[s]:9.2f} {err:+6.1f}%")


def _allreduce():
    row = resolve_chip("a100-80g").row
    print("2. ring all-reduce on 8 A100 in one node vs all_reduce_perf, one process per GPU")
    print(f"   {'MiB':>6} {'phaze us':>9} {'measured':>9} {'error':>7}")
    for size, us in ALLREDUCE_MPIRUN_US.items():
        g = graph.OpGraph.from_ops([dict(name="ar", kind=3, comm_bytes=size, group_size=8,
                                         bytes_in=size, bytes_out=size, preds=[])])
        t = cost.op_latencies(g, row, model="calibrated", efficiency="a100-80g")[0][0, 0] * 1e6
        print(f"   {size / 2 ** 20:6.0f} {t:9.1f} {us:9.1f} {100 * (t - us) / us:+6.1f}%")


def _layer():
    chip = resolve_chip("a100-80g")
    with open(validate.builtin_path(), encoding="utf-8") as fh:
        spec = validate._model_spec("megatron-22b", json.load(fh)["models"])
    print("3. one megatron-22b layer, t = 8, b = 4, s = 2048, A100 80 GB "
          "(Korthikanti et al. 2022 Table 4)")
    got = {}
    for sp in (False, True):
        mg = graph.build_layers(spec, 4, 8, kernels="megatron", sequence_parallel=sp, dtype="fp16")
        blk = mg.layers[1]
        f, fi = step._op_seconds(blk.forward, chip.row, chip.efficiency_set(), 8)
        b, _ = step._op_seconds(blk.backward, chip.row, chip.efficiency_set(), 8)
        pre = "sp_" if sp else ""
        got[pre + "fwd"], got[pre + "bwd"] = float(np.sum(f)) * 1e3, float(np.sum(b)) * 1e3
        if not sp:
            got["core"] = sum(f[fi[n]] for n in ATTENTION_CORE) * 1e3
            # check: training_step adds up exactly these layer times
            r = step.training_step(spec, "a100-80g", tensor_parallel=8, pipeline_parallel=1,
                                   data_parallel=1, microbatch=4, global_batch=4,
                                   recompute="none", precision="fp16")
            other = {L.kind: L for L in mg.layers}
            extra = sum(float(np.sum(step._op_seconds(other[k].forward, chip.row,
                                                      chip.efficiency_set(), 8)[0]))
                        for k in ("embedding", "head"))
            want = spec.n_layers * got["fwd"] / 1e3 + extra
            if abs(r.breakdown.forward_s - want) > 1e-12 * want:
                raise AssertionError(f"training_step forward {r.breakdown.forward_s} != {want}")
    labels = dict(fwd="forward", bwd="backward", sp_fwd="forward, sequence parallel",
                  sp_bwd="backward, sequence parallel", core="recomputed attention core")
    for key, label in labels.items():
        err = 100 * (got[key] - TABLE4_MS[key]) / TABLE4_MS[key]
        print(f"   {label:<30} {got[key]:7.2f} ms  measured {TABLE4_MS[key]:5.1f} ms  {err:+6.1f}%")
    print("   checked: training_step's forward = L x layer + embedding + head")


def main(argv=None) -> int:
    _attention_core()
    _allreduce()
    _layer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
