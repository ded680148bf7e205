"""One point, explained: an architecture with one hand-given strategy (docs/design.md §2.7).

:func:`evaluate_point` runs the same steps as a search chunk (operator
latencies → layer schedules) for one architecture, then costs the given plan
with ``phaze.placement.breakdown``, the placement model's one cost model of a
plan, and reports where the time and memory go.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import _config, placement
from .. import plan as _plan
from .._validate import (MAX_DEVICES, MAX_GLOBAL_BATCH, hbm_gib as _hbm_gib, nonneg_float,
                         one_of, positive_float, positive_int)
from .._cache import Memo
from ._chunk import chain_kind_index, chain_static, latencies, layer_times, model_graph
from ._inputs import arch_row, resolve_models, resolve_recompute
from ._models import COST_MODELS, cost_model
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


#: The keyword defaults of the calibrated step model's strategy knobs (``phaze.plan.STRATEGY``):
#: the table's, precision None (= "bf16", which the study's model also accepts).
_STEP_KNOBS = {**{name: _plan.KNOB[name].default for name in _plan.STRATEGY},
               "precision": None}


def evaluate_point(model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                   recompute, *, devices=None, global_batch=4096, hbm_gib=None, optimizer=None,
                   gap=None, stages=None, seq_len=None, study=False, max_power_w=None,
                   **knobs) -> dict:
    """Evaluate one architecture with one strategy and say where the time and memory go.

    By default with the calibrated Megatron-LM training step (``phaze.step.training_step``;
    :func:`evaluate_step`, whose docstring lists the keys); ``study=True`` with the
    original study's placement model (below). ``recompute``: "none", "selective" or
    "full" (True = "full", False = "none"; the study's model: none or full). The
    keyword-only strategy knobs of ``phaze.plan.STRATEGY`` (the signature lists them with
    their defaults; ``phaze.plan.KNOBS`` says what each is): the calibrated model's (the
    study's model has none of them: each must be left at its study value); ``optimizer``: the
    study's "sgd" (default) or "adam" (the calibrated model prices Adam).

    The study's model (``study=True``):

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
    _plan.check_keywords("evaluate_point", knobs, _plan.STRATEGY)
    check_sizes(tensor_parallel, pipeline_parallel, data_parallel, devices=devices,
                global_batch=global_batch, hbm_gib=hbm_gib, **knobs)
    knobs = {**_STEP_KNOBS, **knobs}
    if max_power_w is not None:
        if study:
            raise ValueError("max_power_w: the study's model has no power; the calibrated "
                             "step model prices it (leave study off)")
        knobs["max_power_w"] = max_power_w
    # The one choice of the cost model (``_models``), then its evaluation (:data:`EVALUATE`).
    return EVALUATE[cost_model(study).name](
        model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch, recompute,
        devices=devices, global_batch=global_batch, hbm_gib=hbm_gib, optimizer=optimizer,
        gap=gap, stages=stages, seq_len=seq_len, **knobs)


def check_sizes(tensor_parallel, pipeline_parallel, data_parallel, *, devices=None,
                global_batch=None, hbm_gib=None, **knobs) -> None:
    """Refuse, in one sentence naming the field and the limit, sizes beyond what the
    kernels hold or enumerate in bounded time (``phaze._validate``: ``MAX_DEVICES`` for
    each width, their product t·cp·p·d and ``devices``; ``MAX_GLOBAL_BATCH``;
    ``MAX_HBM_GIB``). Other malformed values are left to the checks that follow."""
    given = {**knobs, "tensor_parallel": tensor_parallel,
             "pipeline_parallel": pipeline_parallel, "data_parallel": data_parallel}
    # every width of the knob table (t, cp, p, d multiply into devices; the expert width
    # divides the data-parallel ranks; the virtual stages), in table order
    widths = [k for k in _plan.KNOBS if k.type is int and k.minimum == 1
              and k.name not in ("microbatch", "global_batch")]
    product = 1
    for k in widths:
        if given.get(k.name) is None:
            continue
        n = positive_int(k.name, given[k.name], maximum=MAX_DEVICES)
        if k.devices_factor:
            product *= n
    if product > MAX_DEVICES:
        factors = " × ".join(k.name for k in widths if k.devices_factor)
        raise ValueError(f"{factors} must be at most {MAX_DEVICES:,} devices, got "
                         f"{product:,}")
    if devices is not None:
        positive_int("devices", devices, maximum=MAX_DEVICES)
    if global_batch is not None:
        positive_int("global_batch", global_batch, maximum=MAX_GLOBAL_BATCH)
    if hbm_gib is not None:
        _hbm_gib("hbm_gib", hbm_gib)


def _evaluate_calibrated(model, arch, tensor_parallel, pipeline_parallel, data_parallel,
                         microbatch, recompute, *, devices, global_batch, hbm_gib, optimizer,
                         gap, stages, seq_len, max_power_w=None, **knobs) -> dict:
    """:func:`evaluate_point` on the calibrated step model: :func:`evaluate_step`, after
    refusing what only the study's model has (a schedule gap, uneven stages, SGD)."""
    if gap is not None:
        raise ValueError("gap is the study's schedule gap; the calibrated step model has "
                         "no operator schedule (pass study=True to use it)")
    if stages is not None:
        raise ValueError("stages: the calibrated step model splits the transformer layers "
                         "evenly, as Megatron-LM does (pass study=True for uneven stages)")
    if optimizer not in (None, *COST_MODELS["calibrated"].optimizers):
        raise ValueError(f"optimizer: the calibrated step model prices Adam and Muon, got "
                         f"{optimizer!r} (pass study=True for 'sgd')")
    return evaluate_step(model, arch, tensor_parallel, pipeline_parallel, data_parallel,
                         microbatch, recompute, devices=devices, global_batch=global_batch,
                         hbm_gib=hbm_gib, seq_len=seq_len, optimizer=optimizer,
                         max_power_w=max_power_w, **knobs)


def _evaluate_study(model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                    recompute, *, devices, global_batch, hbm_gib, optimizer, gap, stages,
                    seq_len, **knobs) -> dict:
    """:func:`evaluate_point` on the original study's model (its docstring): the layer
    schedules and the placement model's breakdown of the given stages."""
    for name in _plan.STRATEGY:
        knob = _plan.KNOB[name]
        if _plan.differs_from_study(name, knobs[name]):
            if knob.study_lacks:
                raise ValueError(f"{name}: the study's model has no {knob.study_lacks}; leave "
                                 f"it out with study=True")
            raise ValueError(f"{name}: the study's model has no such knob (it is "
                             f"{knob.study!r} there); leave it out with study=True")
    if isinstance(recompute, str) and recompute in ("none", "full"):
        recompute = recompute == "full"
    elif isinstance(recompute, str):
        raise ValueError(f"recompute: the study's model has only 'none' and 'full' "
                         f"(True/False), got {recompute!r}")
    optimizer = "sgd" if optimizer is None else optimizer
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
    optimizer = one_of("optimizer", optimizer, COST_MODELS["study"].optimizers)
    gap = _config.SCHEDULE_GAP if gap is None else nonneg_float("gap", gap)
    hbm = float(row["hbm_gib"][0]) if hbm_gib is None else _hbm_gib("hbm_gib", hbm_gib)
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


_POINT_MEMO = Memo(lambda: _config.SEARCH_POINT_MEMO_SIZE, "study point layer times")


def _point_layer_times(model, mb, t, row, gap):
    """Forward/backward seconds per layer kind of one architecture (memoised: a brute force
    over strategies asks for the same architecture and widths many times)."""
    def compute():
        lat = latencies(model, mb, [t], row)
        return layer_times(model, mb, [t], lat, row, gap)[t]

    return _POINT_MEMO.get_or_compute((model, mb, t, row.tobytes(), gap), compute)


#: The evaluation of one point by each cost model (``_models.COST_MODELS``' names).
EVALUATE = {"calibrated": _evaluate_calibrated, "study": _evaluate_study}


def evaluate_step(model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                  recompute, *, devices=None, global_batch=4096, hbm_gib=None, seq_len=None,
                  optimizer=None, max_power_w=None, **knobs) -> dict:
    """One plan through the calibrated training step (``phaze.step.training_step``), as one
    JSON-ready dict (what ``phaze evaluate`` prints; units in the keys). The strategy
    knobs as :func:`evaluate_point` takes them (None: the table's default); ``optimizer``
    "adam" (None: the default) or "muon".

    Keys: model, arch (the chip's name, or "row" for a structured row), platform (the
    chip file's ``platform``, None when it states none), cost_model
    ("calibrated"), schedule ("1F1B" | "interleaved 1F1B"), optimizer ("adam"), devices,
    seq_len, the plan (``phaze.plan.NAMES`` in table order, then ``training_step``'s
    derived keys: whether sequence parallelism took effect, and the trainers; then
    not_launchable, trainer id → why, and launchable_with, trainer id → the knob values at
    which it launches the plan's other settings, e.g. torchtitan's master_weights params:
    a plan priced apart), hbm_gib,
    status ("ok" | "infeasible" |
    "not_modelled"), reason, feasible (ok and every stage fits its HBM),
    model_flops_per_sample; when ok also time_per_batch_s, samples_per_s,
    tokens_per_s, mfu (0 unless feasible), microbatches_per_pipeline, ``breakdown``
    (steady_s, bubble_s, gradient_reduction_s, embedding_allreduce_s, optimizer_s,
    pipeline_s, critical_stage (from 1), slot_s, forward_s, backward_s, recompute_s,
    p2p_s) and ``stages`` (per pipeline stage from 1: microbatches_in_flight,
    weights_gib, gradients_gib, optimizer_state_gib, activations_gib, workspace_gib,
    total_gib, memory_bytes (= total_gib in bytes), hbm_gib, fits), and the step's power
    (``phaze.step.plan_power``, issue 28): power_w (one chip), energy_per_step_j (every
    device used), energy_breakdown_j (compute, vector, sram, hbm, link, network, static),
    tokens_per_joule, clock_fraction and power_cap_w (the cap the step ran under: ``max_power_w``,
    else the chip's own unless its GEMM rates are measured; None: uncapped) — under a cap
    that binds the times, throughputs and MFU are those at the lowered clock, and
    time_at_full_clock_s the step's seconds before.
    """
    import os

    from .. import step
    from ..arch import Chip, resolve

    check_sizes(tensor_parallel, pipeline_parallel, data_parallel, devices=devices,
                global_batch=global_batch, hbm_gib=hbm_gib, **knobs)
    if max_power_w is not None:
        max_power_w = positive_float("max_power_w", max_power_w)
    spec = resolve_models(model, seq_len)[0]
    # The chip, resolved once (its row, efficiency set and datatype rates) and passed down
    # whole; a row is reported as "row" whatever preset it equals.
    named = isinstance(arch, (str, os.PathLike, Chip))
    chip = resolve(arch if named else arch_row(arch))
    arch_name = chip.name if named else "row"
    if hbm_gib is not None:
        # Another HBM capacity: the same chip (its efficiency set and rates kept) on a row
        # with that capacity.
        row = chip.row.copy()
        row["hbm_gib"] = positive_float("hbm_gib", hbm_gib)
        chip = dataclasses.replace(chip, row=row, path=None, efficiency=chip.efficiency_set())
    row = chip.row
    _plan.check_keywords("evaluate_step", knobs, _plan.STRATEGY)
    # A knob left out or None takes the table's default; switches read as booleans.
    values = {}
    for name in _plan.STRATEGY:
        knob, value = _plan.KNOB[name], knobs.get(name)
        values[name] = (knob.default if value is None and not knob.optional
                        else bool(value) if knob.type is bool else value)
    t = positive_int("tensor_parallel", tensor_parallel)
    p = positive_int("pipeline_parallel", pipeline_parallel)
    d = positive_int("data_parallel", data_parallel)
    if isinstance(recompute, str) and recompute == "op":
        rc = "op"    # torchtitan's per-op policy: priced by the step model, not searched
    else:
        (rc,) = resolve_recompute(recompute) if not isinstance(recompute, (list, tuple)) \
            else (None,)
    if rc is None:
        raise ValueError(f"recompute must be one mode ('none', 'selective', 'full', 'op'), "
                         f"got {recompute!r}")
    if not spec.valid_tensor_parallel(t):
        raise ValueError(f"tensor_parallel {t} must divide heads ({spec.heads}) and kv_heads "
                         f"({spec.kv_heads}) of {spec.name}")
    pl = _plan.Plan(tensor_parallel=t, pipeline_parallel=p, data_parallel=d,
                    microbatch=microbatch, global_batch=global_batch, recompute=rc,
                    optimizer=_plan.KNOB["optimizer"].default if optimizer is None
                    else optimizer, **values)
    used = pl.devices
    if devices is not None and positive_int("devices", devices) < used:
        raise ValueError(f"devices {devices} is fewer than t·cp·p·d = {used}")
    res = step.training_step(spec, chip, **pl.as_dict())
    gib = 2 ** 30
    plan = dict(res.plan)
    # who launches it with the arguments phaze writes: the plan and the model's rules
    # (phaze.plan.launchers), the one answer evaluate, --emit and the search share
    # and the chip's platform (a preset's file states it: Megatron-LM on a TPU is refused)
    refused = {t.id: _plan.platform_refusal(t.id, chip.name, chip.platform)
               for t in _plan.TRAINERS}
    plan["trainers"] = [t for t in _plan.launchers(pl.as_dict(), spec) if refused[t] is None]
    plan["not_launchable"] = {t.id: refused[t.id] or _plan.launch_refusal(t.id, pl.as_dict(), spec)
                              for t in _plan.TRAINERS if t.id not in plan["trainers"]}
    # the trainers that launch the plan at their own values of knobs it sets otherwise (a
    # different plan, priced apart: torchtitan's master_weights params)
    plan["launchable_with"] = {}
    values = pl.as_dict()
    for tid in plan["not_launchable"]:
        own = {n: v for n, v in _plan.trainer_values(tid, {}).items() if values[n] != v}
        if own and refused[tid] is None and _plan.launch_refusal(
                tid, {**values, **own}, spec) is None:
            plan["launchable_with"][tid] = own
    flops = model_flops_per_sample(spec)
    out = {"model": spec.name, "arch": arch_name, "platform": chip.platform,
           "cost_model": "calibrated",
           "schedule": pl.schedule,
           "optimizer": pl.optimizer, "devices": used if devices is None else int(devices),
           "seq_len": spec.seq_len, **plan, "hbm_gib": float(row["hbm_gib"][0]),
           "status": res.status, "reason": res.reason, "feasible": False,
           "model_flops_per_sample": flops, "mfu": 0.0}
    if not res.ok:
        return out
    b = res.breakdown
    stages = []
    for mb in res.memory:
        stages.append({
            "stage": mb.stage + 1, "microbatches_in_flight": mb.in_flight,
            "weights_gib": mb.weights / gib, "gradients_gib": mb.gradients / gib,
            "optimizer_state_gib": mb.optimizer_state / gib,
            "activations_gib": (mb.activations + mb.activations_other) / gib,
            "workspace_gib": mb.workspace / gib, "total_gib": mb.total / gib,
            "memory_bytes": int(mb.total), "hbm_gib": mb.limit / gib, "fits": mb.fits})
    short = [st for st in stages if not st["fits"]]
    if short:
        s0 = short[0]
        out["reason"] = (f"stage {s0['stage']} needs {s0['total_gib']:.2f} GiB per device, "
                         f"more than its HBM ({s0['hbm_gib']:g} GiB)")
    pw = step.plan_power(spec, chip, plan, b, res.time_s, max_power_w=max_power_w)
    time_s = pw["time_s"]
    if not pw["power_feasible"] and not short:
        short = [None]
        out["reason"] = (f"the step needs more than the power cap ({pw['power_cap_w']:g} W per "
                         f"chip) even at the lowest clock")
    sps = plan["global_batch"] / time_s
    out.update(
        power_w=pw["power_w"], energy_per_step_j=pw["energy_per_step_j"],
        energy_breakdown_j=pw["energy_breakdown_j"],
        tokens_per_joule=plan["global_batch"] * spec.seq_len / pw["energy_per_step_j"],
        clock_fraction=pw["clock_fraction"], power_cap_w=pw["power_cap_w"],
        time_at_full_clock_s=res.time_s)
    out.update(
        feasible=not short, time_per_batch_s=time_s, samples_per_s=sps,
        tokens_per_s=sps * spec.seq_len, microbatches_per_pipeline=b.microbatches,
        mfu=float(mfu(flops, sps, used, peak_flops_of(row)[0])) if not short else 0.0,
        breakdown={"steady_s": b.steady_s, "bubble_s": b.bubble_s,
                   "gradient_reduction_s": b.dp_allreduce_s,
                   "embedding_allreduce_s": b.embedding_allreduce_s,
                   "optimizer_s": b.optimizer_s, "pipeline_s": b.pipeline_s,
                   "critical_stage": b.critical_stage + 1, "slot_s": b.slot_s,
                   "forward_s": b.forward_s, "backward_s": b.backward_s,
                   "recompute_s": b.recompute_s, "p2p_s": b.p2p_s},
        stages=stages)
    return out


_plan.keyword_signature(evaluate_point, _plan.STRATEGY, _STEP_KNOBS)
_plan.keyword_signature(evaluate_step, _plan.STRATEGY, _STEP_KNOBS)
