"""One point, explained: an architecture with one hand-given strategy (docs/design.md §2.7).

:func:`evaluate_point` runs the same steps as a search chunk (operator
latencies → layer schedules) for one architecture, then costs the given plan
with ``phaze.placement.breakdown``, the placement model's one cost model of a
plan, and reports where the time and memory go.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _config, placement
from .._validate import nonneg_float, one_of, positive_float, positive_int
from ._chunk import chain_kind_index, chain_static, latencies, layer_times, model_graph
from ._inputs import arch_row, resolve_models
from ._table import json_safe, mfu, model_flops_per_sample, peak_flops_of


def even_stages(n_layers_total: int, n_blocks: int, p: int) -> list:
    """Layers per stage: blocks spread over p stages (sizes differ by ≤ 1, larger first),
    the embedding joins the first stage and the head the last."""
    base, extra = divmod(n_blocks, p)
    sizes = [base + (1 if i < extra else 0) for i in range(p)]
    sizes[0] += 1
    sizes[-1] += 1
    assert sum(sizes) == n_layers_total
    return sizes


def evaluate_point(model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                   recompute, *, devices=None, global_batch=4096, hbm_gib=None, optimizer="sgd",
                   gap=None, stages=None, seq_len=None) -> dict:
    """Evaluate one architecture with one strategy and say where the time goes.

    ``model``: zoo name or ModelSpec; ``arch``: preset name or one structured row;
    ``tensor_parallel`` t, ``pipeline_parallel`` p (stages), ``data_parallel`` d;
    ``microbatch`` (samples, dividing ``global_batch``); ``recompute`` bool;
    ``devices`` (default t·p·d); ``hbm_gib`` overrides the row's HBM (GiB);
    ``gap``: accepted schedule gap (None: ``phaze._config.SCHEDULE_GAP``);
    ``stages``: layers per stage (default: blocks spread evenly, embedding in the
    first stage, head in the last); ``seq_len``: tokens per sample (default: the
    model's own).

    Returns a dict: feasible, reason, time_per_batch_s (that of
    ``phaze.placement.evaluate``), samples_per_s, tokens_per_s,
    ``microbatches_per_pipeline`` (microbatches each of the d pipelines runs per batch,
    ⌈global_batch / (microbatch · d)⌉), seq_len, model_flops_per_sample and ``mfu``
    (model FLOPs utilisation over the devices used, ``_table.model_flops_per_sample``;
    0 when infeasible), ``stages`` (in pipeline order, stage
    1 first; per stage: layers [first, last] chain positions (0 the embedding, 1..L
    the blocks, L+1 the head), devices, forward_s, backward_s, compute_s,
    communication_s, load_s, memory_bytes, memory_limit_bytes (per device), fits) and
    ``breakdown`` (seconds per batch: steady = max load × microbatches_per_pipeline,
    bubble = max load × (p − 1), grad_sync; the critical stage (numbered from 1) and
    its load's compute and communication seconds per microbatch; devices_used). Units
    are in the key: ``_s`` seconds, ``_bytes`` bytes, ``_gib`` GiB.
    """
    model = resolve_models(model, seq_len)[0]
    row = arch_row(arch)
    t = positive_int("tensor_parallel", tensor_parallel)
    p = positive_int("pipeline_parallel", pipeline_parallel)
    d = positive_int("data_parallel", data_parallel)
    mb = positive_int("microbatch", microbatch)
    global_batch = positive_int("global_batch", global_batch)
    if global_batch % mb:
        raise ValueError(f"microbatch {mb} does not divide global_batch {global_batch}")
    if not isinstance(recompute, (bool, np.bool_)):
        raise ValueError(f"recompute must be True or False, got {recompute!r}")
    recompute = bool(recompute)
    devices = t * p * d if devices is None else positive_int("devices", devices)
    optimizer = one_of("optimizer", optimizer, ("sgd", "adam"))
    gap = _config.SCHEDULE_GAP if gap is None else nonneg_float("gap", gap)
    hbm = float(row["hbm_gib"][0]) if hbm_gib is None else positive_float("hbm_gib", hbm_gib)
    if not model.valid_tensor_parallel(t):
        raise ValueError(f"tensor_parallel {t} must divide heads ({model.heads}) and kv_heads "
                         f"({model.kv_heads}) of {model.name}")
    mg = model_graph(model, mb, t)
    kind_idx = chain_kind_index(mg)
    n_chain = kind_idx.size
    if stages is None:
        if p > model.n_layers:
            raise ValueError(f"pipeline_parallel must be at most n_layers ({model.n_layers}) "
                             f"of {model.name}, got {p}")
        sizes = even_stages(n_chain, model.n_layers, p)
    else:
        sizes = [positive_int("stages", s) for s in stages]
        if len(sizes) != p or sum(sizes) != n_chain:
            raise ValueError(f"stages must list {p} positive layer counts summing to {n_chain}")
    fw_k, bw_k = _point_layer_times(model, mb, t, row, gap)
    fw, bw = fw_k[kind_idx, 0], bw_k[kind_idx, 0]
    P, A, TP, E = chain_static(mg)
    m = global_batch // mb
    bandwidth = float(row["net_gb_per_s"][0]) * 1e9
    memory = hbm * 2.0 ** 30
    bounds = np.cumsum([0] + sizes)
    stage_list = [(list(range(bounds[i], bounds[i + 1])), t if TP[bounds[i]:bounds[i + 1]].any() else 1)
                  for i in range(p)]
    # Trusted arrays: built above from the layer graphs; a layer without a schedule has
    # infinite time, which the constructor would refuse but the breakdown reports.
    problem = placement.PlacementProblem.from_trusted_arrays(
        widths=np.array([t], dtype=np.int64), forward_s=fw[None], backward_s=bw[None],
        param_bytes=P[None], activation_bytes=A[None], tensor_parallel=TP[None], edge_bytes=E[None],
        devices=devices, memory_bytes=memory, bandwidth=bandwidth, microbatches=m,
        recompute=recompute, optimizer=optimizer, layer_ids=np.arange(n_chain, dtype=np.int64))
    plan = placement.Placement(feasible=True, time_per_batch=math.nan, tensor_parallel=t,
                               data_parallel=d, stages=stage_list, stage_loads=[], stage_memory=[])
    bd = placement.breakdown(problem, plan)
    scheduled = bool(np.all(np.isfinite(fw)) and np.all(np.isfinite(bw)))
    feasible = bd.feasible and scheduled and math.isfinite(bd.time_per_batch)
    tpb = bd.time_per_batch if feasible else math.inf
    sps = global_batch / tpb if feasible and tpb > 0 else 0.0
    reason = "" if feasible else (bd.reason or "no layer schedule found")
    crit = bd.stages[bd.critical_stage]
    flops = model_flops_per_sample(model)
    return {
        "model": model.name, "arch": {f: json_safe(row[f][0]) for f in row.dtype.names},
        "tensor_parallel": t, "pipeline_parallel": p, "data_parallel": d, "microbatch": mb,
        "recompute": recompute, "devices": devices, "global_batch": global_batch,
        "microbatches_per_pipeline": -(-m // d), "hbm_gib": hbm, "seq_len": model.seq_len,
        "optimizer": optimizer, "feasible": feasible,
        "reason": reason, "time_per_batch_s": tpb, "samples_per_s": sps,
        "tokens_per_s": sps * model.seq_len,
        "model_flops_per_sample": flops,
        "mfu": float(mfu(flops, sps, bd.devices_used,
                         peak_flops_of(row)[0])),
        "stages": [{"layers": [s.first, s.last], "n_layers": s.n_layers, "devices": s.devices,
                    "forward_s": s.forward_s, "backward_s": s.backward_s,
                    "compute_s": s.compute_s, "communication_s": s.communication_s,
                    "load_s": s.load_s, "memory_bytes": s.memory_bytes,
                    "memory_limit_bytes": memory, "fits": s.fits} for s in bd.stages],
        "breakdown": {"steady_s": bd.steady_s, "bubble_s": bd.bubble_s,
                      "grad_sync_s": bd.grad_sync_s, "critical_stage": bd.critical_stage + 1,
                      "critical_compute_s": crit.compute_s,
                      "critical_communication_s": crit.communication_s,
                      "devices_used": bd.devices_used},
    }


_POINT_MEMO: dict = {}


def _point_layer_times(model, mb, t, row, gap):
    """Forward/backward seconds per layer kind of one architecture (memoised: a brute force
    over strategies asks for the same architecture and widths many times)."""
    key = (model, mb, t, row.tobytes(), gap)
    hit = _POINT_MEMO.get(key)
    if hit is None:
        lat = latencies(model, mb, [t], row)
        hit = layer_times(model, mb, [t], lat, row, gap)[t]
        if len(_POINT_MEMO) >= _config.SEARCH_POINT_MEMO_SIZE:
            _POINT_MEMO.pop(next(iter(_POINT_MEMO)))
        _POINT_MEMO[key] = hit
    return hit
