"""The power and cost columns of the calibrated model's rows (issue 28), and the clock a
power budget leaves them (``SearchSettings.max_power_w``).

Per row of one (model, microbatch, recomputation, HBM) call of ``_calibrated.add_plans``:
the step's energy by part (``phaze.step.energy_parts``, one graph variant per distinct
(t, sp, flash, cp, ep) of the rows' plans), the clock the cap leaves and the step's seconds
at it (``phaze.step.power_capped``), and the cost of a chip and of a million tokens
(``phaze.arch.chip_cost_usd`` on the template's die area at its node,
``phaze.arch.usd_per_million_tokens``). A searched row is a hypothetical chip of the
template: its node, memory and fabric are the template's (``phaze.arch.TEMPLATE_*``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import arch as _arch
from .. import graph, step
from ..arch import efficiency as _efficiency

NAMES = ("power_w", "clock_fraction", "energy_per_step_j", "tokens_per_joule", "chip_cost_usd",
         "usd_per_million_tokens")


def chip_costs(archs, hbm_gib) -> np.ndarray:
    """US$ per chip of each row: its die at the template's node and its HBM capacity."""
    area, _parts = _arch.die_area_mm2(archs, process_nm=_arch.TEMPLATE_PROCESS_NM)
    return np.asarray(_arch.chip_cost_usd(area, process_nm=_arch.TEMPLATE_PROCESS_NM,
                                          hbm_gib=np.asarray(hbm_gib, dtype=np.float64)),
                      dtype=np.float64)


def power_columns(cfg, model_index, microbatch, archs, plans, feasible, time_s, hbm_gib):
    """(seconds at the capped clock, feasible under the cap, {column: values}) of the rows
    ``plans`` (``step.PLAN_DTYPE``, one per row of ``archs``); NaN columns where
    infeasible."""
    n = len(plans)
    cols = {name: np.full(n, math.nan) for name in NAMES}
    time_s = np.asarray(time_s, dtype=np.float64).copy()
    feasible = np.asarray(feasible, dtype=bool).copy()
    live = np.flatnonzero(feasible)
    if not live.size:
        return time_s, feasible, cols
    spec = cfg.models[model_index]
    rows, pl = archs[live], plans[live]
    eff = _efficiency.for_rows(rows)
    energy = _arch.energy_rows(rows, process_nm=_arch.TEMPLATE_PROCESS_NM)
    hbm_bw = np.asarray(rows["hbm_gb_per_s"], dtype=np.float64) * 1e9 * eff["hbm_efficiency"]
    grad = float(step.GRAD_REDUCE_BYTES[cfg.grad_reduce_dtype])
    parts = {k: np.zeros(live.size) for k in step.ENERGY_PARTS}
    macs = np.zeros(live.size)
    key_cols = [np.asarray(pl[k]).astype(np.int64) for k in (
        "tensor_parallel", "sequence_parallel", "flash_attention", "context_parallel",
        "expert_parallel")]
    keys = np.stack(key_cols, axis=1)
    for key in np.unique(keys, axis=0):
        t, sp, flash, cp, ep = (int(x) for x in key)
        idx = np.flatnonzero(np.all(keys == key, axis=1))
        mg = graph.build_layers(spec, int(microbatch), t, sequence_parallel=bool(sp) and t > 1,
                                flash_attention=bool(flash), kernels="megatron",
                                dtype=cfg.precision, expert_parallel=ep, context_parallel=cp,
                                capacity_factor=cfg.capacity_factor if spec.is_moe else None)
        got, m = step.energy_parts(mg, rows[idx], energy[idx], plans=pl[idx],
                                   global_batch=int(cfg.global_batch), grad_bytes=grad,
                                   hbm_bw=hbm_bw[idx])
        for k in step.ENERGY_PARTS:
            parts[k][idx] = got[k]
        macs[idx] = m
    share = step.clock_share(macs, rows, eff["tile_efficiency"], time_s[live])
    s, t_new, out, power, ok = step.power_capped(parts, time_s[live], energy["static_w"], share,
                                                 float(cfg.max_power_w))
    devices = np.asarray(pl["devices_used"], dtype=np.float64)
    e_job = sum(out[k] for k in step.ENERGY_PARTS) * devices
    tokens = float(cfg.global_batch) * float(spec.seq_len)
    cost = chip_costs(rows, np.asarray(hbm_gib, dtype=np.float64)[live])
    usd = np.asarray(_arch.usd_per_million_tokens(
        chips=devices, chip_cost_usd=cost, seconds_per_step=t_new, tokens_per_step=tokens,
        power_w=power), dtype=np.float64)
    vals = {"power_w": power, "clock_fraction": s, "energy_per_step_j": e_job,
            "tokens_per_joule": tokens / e_job, "chip_cost_usd": cost,
            "usd_per_million_tokens": usd}
    for name in NAMES:
        cols[name][live] = np.where(ok, vals[name], math.nan)
    time_s[live] = np.where(ok, t_new, math.inf)
    feasible[live] = ok
    return time_s, feasible, cols
