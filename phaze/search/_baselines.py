"""The three baselines a search's best point is compared with (docs/design.md §2.8).

(a) ``tpuv4_searched``: tpuv4 with the full placement and knob search;
(b) ``tpuv4_fixed``: tpuv4 with the original study's hand-written strategy;
(c) ``block_optimal``: the architecture with the fastest transformer block
(forward + backward at t = 1, microbatch 1: what a placement-blind accelerator
search optimises; under the calibrated model its calibrated block time), then
given the full placement and knob search.

Each baseline runs through the search's own cost model and knob grids (the
calibrated step model with its strategy grids, or the study's), so the gains
compare like with like. The block
times are measured inside the chunks (``ChunkTask.want_block``) and reduced per
chunk by :func:`chunk_block_argmin`, so (c) needs no second pass over the space.
"""
from __future__ import annotations

import math

import numpy as np

from .. import plan as _plan
from ..arch import presets
from . import _calibrated, _chunk
from ._models import cost_model
from ._point import evaluate_point
from ._settings import ChunkTask
from ._table import best_row_of, expand, mfu, model_flops_per_sample, peak_flops_of

#: The original study's hand-written strategies on tpuv4: model → (pipeline stages p,
#: data-parallel degree d, tensor-parallel width t).
FIXED_STRATEGIES = {
    "opt-350m": (12, 85, 1), "bert-large": (8, 128, 1), "gpt2-xl": (32, 32, 1),
    "megatron-bert": (8, 128, 1), "megatron-gpt2-54": (8, 32, 4), "megatron-gpt2-72": (8, 16, 8),
    "gpt3-175b": (32, 8, 4), "llama2-7b": (8, 128, 1),
}
BASELINE_NAMES = ("tpuv4_searched", "tpuv4_fixed", "block_optimal")
BASELINE_TITLES = {
    "tpuv4_searched": "tpuv4 with the searched placement and knobs",
    "tpuv4_fixed": "tpuv4 with the original study's fixed strategy",
    "block_optimal": "fastest transformer block (t=1, microbatch 1), then full placement search",
}


def chunk_block_argmin(block, archs, base) -> list:
    """Per model: [seconds, area, arch id] of a chunk's fastest block (ties: smaller area,
    then lower id; seconds None when no architecture of the chunk scheduled it).

    ``block``: (models, chunk archs) seconds; ``archs``: the searched space's rows;
    ``base``: the arch id of the chunk's first row.
    """
    out = []
    for mi in range(block.shape[0]):
        b = block[mi]
        area = archs["area_mm2"][base:base + b.size]
        ids = np.arange(base, base + b.size)
        order = np.lexsort((ids, area, b))
        i = order[0]
        out.append([float(b[i]) if math.isfinite(b[i]) else None, float(area[i]), int(ids[i])])
    return out


def single_arch_best(settings, model_index, row):
    """Best row of the full placement and knob search of one model on one architecture
    ``row`` (in this process; arch_id −1), or None when nothing was evaluated."""
    cfg = settings.for_one_model(model_index)
    res = _chunk.run_chunk(ChunkTask(settings=cfg, chunk_id=0, archs=row,
                                     arch_ids=np.array([-1])))
    cols = res.columns
    tab = expand({**cols, "arch_id": np.zeros_like(cols["arch_id"])}, row, list(cfg.models))
    tab["arch_id"][:] = -1
    return best_row_of(tab, cfg.models[0].name)


def fixed_baseline(settings, model, tpu) -> dict:
    """Baseline (b): ``model``'s fixed strategy on the tpuv4 row ``tpu``, best over the
    settings' microbatch, HBM and recompute grids (a row dict, or infeasible with a reason;
    ``applicable`` False when the study fixes no strategy for the model)."""
    if model.name not in FIXED_STRATEGIES:
        # Not a failed plan: there is nothing to compare with ("not applicable").
        return {"feasible": False, "applicable": False, "samples_per_s": 0.0,
                "reason": f"the original study gives a fixed strategy only for "
                          f"{', '.join(FIXED_STRATEGIES)}, not for {model.name}"}
    p, d, t = FIXED_STRATEGIES[model.name]
    return FIXED[cost_model(settings.study).name](settings, model, tpu, t, p, d)


def _study_fixed(settings, model, tpu, t, p, d) -> dict:
    """Baseline (b) under the study's model: the fixed t/p/d on tpuv4 through the placement
    model, best over the settings' microbatch, HBM and recomputation grids."""
    best, reasons = None, []
    for mb in settings.microbatch:
        for h in settings.hbm_gib:
            for rc in settings.recompute:
                r = evaluate_point(model, tpu, t, p, d, mb, rc == "full", devices=settings.devices,
                                   global_batch=settings.global_batch, hbm_gib=h,
                                   optimizer=settings.optimizer, gap=settings.gap, study=True)
                if r["feasible"] and (best is None or r["samples_per_s"] > best["samples_per_s"]):
                    best = r
                elif not r["feasible"]:
                    reasons.append(r["reason"])
    if best is None:
        return {"feasible": False, "tensor_parallel": t, "pipeline_parallel": p,
                "data_parallel": d, "samples_per_s": 0.0,
                "reason": f"fixed strategy p/d/t = {p}/{d}/{t} is infeasible: {reasons[0]}"}
    row = {k: best[k] for k in ("feasible", "microbatch", "hbm_gib", "time_per_batch_s",
                                "samples_per_s", "tokens_per_s", "tensor_parallel",
                                "pipeline_parallel", "data_parallel", "reason", "mfu")}
    row["recompute"] = "full" if best["recompute"] else "none"
    row.update(STUDY_KNOBS_OF_ROW)
    row["model"] = model.name
    row["area_mm2"] = float(tpu["area_mm2"][0])
    row["stage_layers"] = ",".join(str(s["n_layers"]) for s in best["stages"])
    return row


#: The strategy a study row records (the study's model has no other).
STUDY_KNOBS_OF_ROW = {name: _plan.study_value(name) for name in _plan.STRATEGY_COLUMNS}


def _calibrated_fixed(settings, model, tpu, t, p, d) -> dict:
    """Baseline (b) under the calibrated model: the study's fixed t/p/d on tpuv4, with the
    same microbatch, HBM, recomputation and strategy grids as the search."""
    best, reason = _calibrated.fixed_plan_best(settings, model, tpu, t, p, d)
    if best is None:
        return {"feasible": False, "tensor_parallel": t, "pipeline_parallel": p,
                "data_parallel": d, "samples_per_s": 0.0,
                "reason": f"fixed strategy p/d/t = {p}/{d}/{t} is infeasible: "
                          f"{reason or 'no plan was evaluated'}"}
    row = dict(best)
    row["mfu"] = float(mfu(model_flops_per_sample(model), row["samples_per_s"],
                           row["devices_used"], peak_flops_of(tpu)[0]))
    row["model"] = model.name
    row["area_mm2"] = float(tpu["area_mm2"][0])
    return row


#: The fixed-strategy baseline of each cost model (``_models.COST_MODELS``' names).
FIXED = {"study": _study_fixed, "calibrated": _calibrated_fixed}


def with_gain(row, best_sps) -> dict:
    """``row`` with ``gain`` = best samples/s ÷ the row's (None when the row is infeasible)."""
    if row is None:
        return {"feasible": False, "reason": "not evaluated", "gain": None}
    row = dict(row)
    sps = float(row.get("samples_per_s") or 0.0)
    row["gain"] = best_sps / sps if row.get("feasible") and sps > 0 else None
    return row


def baselines(settings, best, chunk_facts, archs, ids=None) -> dict:
    """The three baselines for each model: name → {title, models: model → row with gain}.

    ``best``: the search's best point (its ``plans`` give each model's samples/s);
    ``chunk_facts``: chunk id → facts recorded per chunk (``block``: the output of
    :func:`chunk_block_argmin`, by row number); ``archs``: the searched space's rows;
    ``ids``: each row's architecture id (None: its row number).
    """
    tpu = presets.get("tpuv4")
    out = {name: {"title": BASELINE_TITLES[name], "models": {}} for name in BASELINE_NAMES}
    for mi, model in enumerate(settings.models):
        plan = best["plans"].get(model.name) if best.get("plans") else None
        best_sps = float(plan["samples_per_s"]) if plan and plan["feasible"] else 0.0
        if presets.chip("tpuv4").rates[settings.precision] == 0:
            # TPU v4 has no tensor cores below 16 bits (phaze.arch.dtype_rates): nothing to
            # compare.
            for name in ("tpuv4_searched", "tpuv4_fixed"):
                out[name]["models"][model.name] = {
                    "feasible": False, "applicable": False, "samples_per_s": 0.0, "gain": None,
                    "reason": f"tpuv4 has no {settings.precision} tensor cores (its rate is 0): "
                              f"not applicable to an {settings.precision} search"}
        else:
            # (a) tpuv4 with the searched placement and knobs.
            row_a = single_arch_best(settings, mi, tpu)
            out["tpuv4_searched"]["models"][model.name] = with_gain(row_a, best_sps)
            # (b) tpuv4 with the original study's fixed strategy.
            out["tpuv4_fixed"]["models"][model.name] = with_gain(
                fixed_baseline(settings, model, tpu), best_sps)
        # (c) the fastest block at t = 1, microbatch 1, then the full search on it.
        cands = [f["block"][mi] for f in chunk_facts.values() if f.get("block")]
        cands = [c for c in cands if c[0] is not None]
        if not cands:
            out["block_optimal"]["models"][model.name] = {
                "feasible": False, "reason": "no architecture could schedule the block", "gain": None}
            continue
        sec, area, aid = min(cands, key=lambda c: (c[0], c[1], c[2]))
        row_c = single_arch_best(settings, mi, archs[aid:aid + 1])
        if row_c is not None:
            row_c["arch_id"] = int(aid if ids is None else ids[aid])
            row_c["block_fwbw_s"] = sec
        out["block_optimal"]["models"][model.name] = with_gain(row_c, best_sps)
    return out
