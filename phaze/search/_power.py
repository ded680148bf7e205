"""The power and cost columns of the calibrated model's rows (issue 28), and the clock a
power budget leaves them (``SearchSettings.max_power_w``).

Per row of one (model, microbatch, recomputation, HBM) call of ``_calibrated.add_plans``:
the step's energy by part (``phaze.step.energy_parts``, one graph variant per distinct
(t, sp, flash, cp, ep) of the rows' plans), the clock the cap leaves and the step's seconds
at it (``phaze.step.power_capped``), and the cost of a chip and of a million tokens
(``phaze.arch.chip_cost_usd`` on the template's die area at its node,
``phaze.arch.run_cost_usd`` / ``usd_per_million_tokens`` with their cited defaults). A
searched row is a hypothetical chip of the template, built on :data:`SEARCH_PROCESS_NM`
with tpuv4's memory and fabric; a row equal to a preset in every knob (a fixed ``--arch``
search of it, the tpuv4 baseline) is that chip, at its own node and kinds, as ``phaze
evaluate`` prices it (:func:`row_chips`). One price per chip for both (:func:`chip_costs`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import arch as _arch
from .. import step
from ..arch import efficiency as _efficiency

NAMES = ("power_w", "clock_fraction", "energy_per_step_j", "tokens_per_joule", "chip_cost_usd",
         "usd_per_million_tokens")


#: The node a searched chip is built and powered on: TPU v4's (the tpuv4 preset's
#: ``process_nm``), since the space's area budget and its baselines are TPU v4's; the
#: template's memory and fabric are tpuv4's too (``phaze.arch.energy_rows``' defaults).
SEARCH_PROCESS_NM = _arch.resolve_chip("tpuv4").process_nm


def row_chips(archs) -> list:
    """``[(mask, chip), …]``: the rows of ``archs`` that are one preset in every knob, with
    its ``phaze.arch.Chip`` (``phaze.arch.presets.match``, the rule of
    ``phaze.arch.resolve``: a fixed ``--arch`` search of a preset), then the other rows with
    None (hypothetical chips of the template, built at :data:`SEARCH_PROCESS_NM`)."""
    out, rest = [], np.ones(len(archs), dtype=bool)
    for name, same in _arch.presets.match(archs):
        same = same & rest
        if same.any():
            out.append((same, _arch.presets.chip(name)))
            rest &= ~same
    return out + ([(rest, None)] if rest.any() else [])


def _node_nm(chip):
    """The node a row is priced at: a preset's own (``Chip.priced_process_nm``, as
    ``step.chip_energy`` takes it), else :data:`SEARCH_PROCESS_NM`."""
    return SEARCH_PROCESS_NM if chip is None else chip.priced_process_nm


def chip_costs(archs, area_mm2, hbm_gib) -> np.ndarray:
    """US$ per chip of each row of ``archs``: its die (``area_mm2``, at the row's node) and
    its ``hbm_gib`` GiB of HBM (of the preset's kind; a hypothetical chip's tpuv4's), each
    row priced as :func:`row_chips` says — the one price of the fixed baselines and the
    searched rows."""
    area = np.asarray(area_mm2, dtype=np.float64)
    gib = np.broadcast_to(np.asarray(hbm_gib, dtype=np.float64), area.shape)
    out = np.full(area.shape, np.inf)     # a die of infinite area (a rate near the float
    for same, chip in row_chips(archs):   # maximum) cannot be bought: inf US$
        same = same & np.isfinite(area)
        if same.any():
            out[same] = _arch.chip_cost_usd(area[same], process_nm=_node_nm(chip),
                                            hbm_gib=gib[same],
                                            hbm_kind=None if chip is None else chip.hbm_kind)
    return out


class ChunkPower:
    """What the power columns read of a chunk's architecture rows, made once per chunk:
    each row's energy records and die area (a preset's row at its own node and with its
    memory and fabric kinds, as ``phaze evaluate`` prices it: ``step.chip_energy``; a
    hypothetical chip at :data:`SEARCH_PROCESS_NM`; :func:`row_chips`), calibrated tile
    efficiency and η·HBM bandwidth, and the layer graphs of the variants its plans use."""

    def __init__(self, archs):
        self.archs = archs
        eff = _efficiency.for_rows(archs)
        self.tile_efficiency = np.asarray(eff["tile_efficiency"], dtype=np.float64)
        self.hbm_bw = step.bytes_per_s(eff["hbm_efficiency"], archs["hbm_gb_per_s"])
        self.energy = np.empty(len(archs), dtype=_arch.ENERGY_DTYPE)
        self.area_mm2 = np.empty(len(archs))
        for same, chip in row_chips(archs):
            rows = archs[same]
            if chip is None:
                self.energy[same] = _arch.energy_rows(rows, process_nm=SEARCH_PROCESS_NM)
                hbm_kind = None
            else:
                self.energy[same] = step.chip_energy(chip, rows)
                hbm_kind = chip.hbm_kind
            self.area_mm2[same] = _arch.die_area_mm2(
                rows, process_nm=_node_nm(chip),
                **({} if hbm_kind is None else {"hbm_kind": hbm_kind}))[0]
        self._graphs = {}
        self._sums = {}
        self._costs = {}

    def sums(self, mg):
        """``step.layer_sums`` of a variant on every row of the chunk, made once."""
        hit = self._sums.get(id(mg))
        if hit is None:
            hit = self._sums[id(mg)] = (mg, step.layer_sums(mg, self.archs, self.energy))
        return hit[1]

    def costs(self, hbm_gib):
        """US$ per chip of every row of the chunk with ``hbm_gib`` of HBM (None: each row's
        own; :func:`chip_costs`), made once."""
        hit = self._costs.get(hbm_gib)
        if hit is None:
            hit = self._costs[hbm_gib] = chip_costs(
                self.archs, self.area_mm2,
                self.archs["hbm_gib"] if hbm_gib is None else float(hbm_gib))
        return hit

    def graphs(self, cfg, model_index, microbatch, key):
        """``step.variant_graph`` of one variant (t, sp, flash, cp, ep), built once."""
        hit = self._graphs.get((model_index, microbatch, key))
        if hit is None:
            hit = self._graphs[model_index, microbatch, key] = step.variant_graph(
                cfg.models[model_index], microbatch, *key, cfg.precision, cfg.capacity_factor)
        return hit


def power_columns(cfg, model_index, microbatch, chunk, index, plans, feasible, time_s,
                  hbm_gib):
    """(seconds at the capped clock, feasible under the cap, {column: values}) of the rows
    ``plans`` (``step.PLAN_DTYPE``), one per row ``index`` of the chunk (a
    :class:`ChunkPower`); NaN columns where infeasible."""
    n = len(plans)
    cols = {name: np.full(n, math.nan) for name in NAMES}
    time_s = np.asarray(time_s, dtype=np.float64).copy()
    feasible = np.asarray(feasible, dtype=bool).copy()
    live = np.flatnonzero(feasible)
    if not live.size:
        return time_s, feasible, cols
    spec = cfg.models[model_index]
    at = np.asarray(index, dtype=np.int64)[live]
    rows, view = chunk.archs[at], {k: v[live] for k, v in step.plan_view(plans).items()}
    energy, hbm_bw = chunk.energy[at], chunk.hbm_bw[at]
    grad = float(step.GRAD_REDUCE_BYTES[cfg.grad_reduce_dtype])
    parts = {k: np.zeros(live.size) for k in step.ENERGY_PARTS}
    macs = np.zeros(live.size)
    variants = {}
    for i, key in enumerate(zip(*(view[k].astype(np.int64).tolist()
                                  for k in ("t", "sp", "flash", "cp", "ep")))):
        variants.setdefault(key, []).append(i)
    for key, members in variants.items():
        idx = np.asarray(members, dtype=np.int64)
        mg = chunk.graphs(cfg, model_index, microbatch, key)
        got, m = step.energy_parts(mg, rows[idx], energy[idx],
                                   plans={k: v[idx] for k, v in view.items()},
                                   global_batch=int(cfg.global_batch), grad_bytes=grad,
                                   hbm_bw=hbm_bw[idx],
                                   sums=step.take_sums(chunk.sums(mg), at[idx]))
        for k in step.ENERGY_PARTS:
            parts[k][idx] = got[k]
        macs[idx] = m
    share = step.clock_share(macs, rows, chunk.tile_efficiency[at], time_s[live])
    s, t_new, out, power, ok = step.power_capped(parts, time_s[live], energy["static_w"], share,
                                                 float(cfg.max_power_w))
    devices = np.asarray(view["devices"], dtype=np.float64)
    e_job = sum(out[k] for k in step.ENERGY_PARTS) * devices
    tokens = float(cfg.global_batch) * float(spec.seq_len)
    hbm = np.asarray(hbm_gib, dtype=np.float64)
    own = np.array_equal(hbm, np.asarray(chunk.archs["hbm_gib"], dtype=np.float64)[index])
    cost = chunk.costs(None if own else float(hbm[0]))[at] if (own or np.all(hbm == hbm[0])) \
        else chip_costs(rows, chunk.area_mm2[at], hbm[live])
    usd = _usd_per_million_tokens(devices, cost, t_new, power, tokens)
    vals = {"power_w": power, "clock_fraction": s, "energy_per_step_j": e_job,
            "tokens_per_joule": tokens / e_job, "chip_cost_usd": cost,
            "usd_per_million_tokens": usd}
    for name in NAMES:
        cols[name][live] = np.where(ok, vals[name], math.nan)
    time_s[live] = np.where(ok, t_new, math.inf)
    feasible[live] = ok
    return time_s, feasible, cols


def _usd_per_million_tokens(devices, cost, seconds, power_w, tokens):
    """``phaze.arch.usd_per_million_tokens`` of the run of each row, inf where the chip
    cannot be bought or the step not priced (an infinite die, time or power: rates near
    the float maximum), so one such row does not refuse the chunk."""
    devices, cost, seconds, power_w = (np.asarray(x, dtype=np.float64).reshape(-1)
                                       for x in (devices, cost, seconds, power_w))
    n = max(len(devices), len(cost), len(seconds), len(power_w))
    devices, cost, seconds, power_w = (np.broadcast_to(x, (n,)) for x in
                                       (devices, cost, seconds, power_w))
    out = np.full(n, np.inf)
    ok = np.isfinite(cost) & np.isfinite(seconds) & np.isfinite(power_w) & (power_w >= 0)
    if ok.any():
        out[ok] = _arch.usd_per_million_tokens(_arch.run_cost_usd(
            chips=devices[ok], chip_cost_usd=cost[ok], seconds=seconds[ok],
            power_w=power_w[ok]), tokens)
    return out


def fixed_power(cfg, spec, row, res):
    """The power columns, seconds and feasibility of one ``training_step`` result ``res`` on
    the architecture ``row`` (a fixed-plan baseline), as :func:`power_columns` gives a
    searched row: a dict of the columns plus ``time_s`` and ``power_feasible``."""
    chip = _arch.resolve(row)
    pw = step.plan_power(spec, chip, res.plan, res.breakdown, res.time_s,
                         max_power_w=float(cfg.max_power_w))
    devices = int(step.step_view(res.plan, res.breakdown)["devices"][0])
    tokens = float(cfg.global_batch) * float(spec.seq_len)
    cost = float(ChunkPower(row).costs(None)[0])
    usd = float(_usd_per_million_tokens(devices, cost, pw["time_s"], pw["power_w"], tokens)[0])
    return {"power_w": pw["power_w"], "clock_fraction": pw["clock_fraction"],
            "energy_per_step_j": pw["energy_per_step_j"],
            "tokens_per_joule": tokens / pw["energy_per_step_j"], "chip_cost_usd": cost,
            "usd_per_million_tokens": usd, "time_s": pw["time_s"],
            "power_feasible": pw["power_feasible"]}
