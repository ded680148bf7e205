"""TEMPORARY slow stand-in for phaze.step.best_plans / step_lower_bounds (delete before commit)."""
from __future__ import annotations

import math

import numpy as np

from .. import models as _models
from .. import step

PLAN_DTYPE = np.dtype([
    ("time_s", "f8"), ("feasible", "?"), ("reason", "i8"), ("tensor_parallel", "i8"),
    ("pipeline_parallel", "i8"), ("data_parallel", "i8"), ("virtual_stages", "i8"),
    ("zero_stage", "i8"), ("sequence_parallel", "?"), ("flash_attention", "?"),
    ("overlap_grad_reduce", "?"), ("devices_used", "i8"), ("microbatches", "i8"),
    ("memory_bytes", "i8"), ("weights_bytes", "i8"), ("gradients_bytes", "i8"),
    ("optimizer_bytes", "i8"), ("activations_bytes", "i8"), ("workspace_bytes", "i8"),
    ("forward_s", "f8"), ("backward_s", "f8"), ("recompute_s", "f8"), ("p2p_s", "f8"),
    ("bubble_s", "f8"), ("dp_allreduce_s", "f8"), ("optimizer_s", "f8")])
PLAN_REASONS = ("", "no plan fits in the HBM of a device", "no launchable plan")


def best_plans(model, archs, *, devices, global_batch, microbatch, recompute="full", hbm_bytes=None,
               tensor_parallel=(1, 2, 4, 8), sequence_parallel=(False, True),
               flash_attention=(False, True), virtual_stages=None, zero_stage=(0, 1, 2, 3),
               overlap_grad_reduce=(False, True), precision="bf16", efficiency=None):
    m = _models.resolve(model)
    n = len(archs)
    out = np.zeros(n, PLAN_DTYPE)
    out["time_s"] = math.inf
    out["reason"] = 2
    L = m.n_layers
    for a in range(n):
        row = archs[a:a + 1].copy()
        cap = float(row["hbm_gib"][0]) * 2 ** 30 if hbm_bytes is None else float(
            np.broadcast_to(np.asarray(hbm_bytes, dtype=float), (n,))[a])
        for t in tensor_parallel:
            if t > int(row["node_size"][0]) or not m.valid_tensor_parallel(t):
                continue
            for p in [p for p in range(1, L + 1) if L % p == 0]:
                for d in range(1, devices // (t * p) + 1):
                    if (global_batch // microbatch) % d or global_batch % microbatch:
                        continue
                    vs = virtual_stages or [v for v in range(1, L // p + 1) if (L // p) % v == 0]
                    for sp in sequence_parallel:
                        for fa in flash_attention:
                            for v in vs:
                                for z in zero_stage:
                                    for ov in overlap_grad_reduce:
                                        if z >= 2 and p > 1:
                                            continue
                                        if v > 1 and z > 1:
                                            continue
                                        r = step.training_step(
                                            m, row, tensor_parallel=t, pipeline_parallel=p,
                                            data_parallel=d, microbatch=microbatch,
                                            global_batch=global_batch, recompute=recompute,
                                            virtual_stages=v, sequence_parallel=sp,
                                            flash_attention=fa, zero_stage=z,
                                            overlap_grad_reduce=ov, precision=precision)
                                        if not r.ok:
                                            continue
                                        pk = r.peak_memory
                                        if pk.total > cap:
                                            if out["reason"][a] == 2:
                                                out["reason"][a] = 1
                                            continue
                                        if r.time_s < out["time_s"][a]:
                                            b = r.breakdown
                                            out[a] = (r.time_s, True, 0, t, p, d, v, z, sp, fa, ov,
                                                      t * p * d, b.microbatches, pk.total,
                                                      pk.weights, pk.gradients, pk.optimizer_state,
                                                      pk.activations + pk.activations_other,
                                                      pk.workspace, b.forward_s, b.backward_s,
                                                      b.recompute_s, b.p2p_s, b.bubble_s,
                                                      b.dp_allreduce_s, b.optimizer_s)
    return out


def step_lower_bounds(model, archs, *, devices, global_batch, microbatch, recompute,
                      tensor_parallel=(1, 2, 4, 8), sequence_parallel=(False, True),
                      flash_attention=(False, True), efficiency=None):
    return np.zeros(len(archs))
from ..step import training_step  # noqa: E402,F401
