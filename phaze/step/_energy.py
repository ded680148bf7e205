"""Energy and power of a training step, and the clock a power cap leaves (issue 28).

Energy is counted from the work a step does, each unit at its energy per unit from the
chip's energy records (``phaze.arch.energy_rows``: ``ENERGY_DTYPE``, cited in
docs/fidelity-sources.md §23), for one device of the plan (the average device: its share of
the layers, ``L/p``, of every microbatch of its pipeline) — then the job's energy per step
is that times the devices used. The parts (:data:`PARTS`, joules per device per step):

- ``compute``: the GEMMs' multiply-accumulates, b·M·K·N each, at the operands' width (16-,
  8- or 4-bit: ``mac16_j``, ``mac8_j``, ``mac4_j``; a GEMM the graph flags low-precision is
  8-bit unless the step's datatype is a 4-bit one);
- ``vector``: the vector cores' lane operations (elements × cycles per element) at
  ``vector_op_j``;
- ``sram``: the bytes between the shared buffer and the cores — a GEMM's weight-stationary
  operand stream (``phaze.cost``'s on-chip traffic: weights once, A past every column
  block, partial sums written by each pass over K and read back by all but the first), the
  fused attention kernel's and the vector operators' bytes in and out — at
  ``sram_j_per_byte``;
- ``hbm``: every operator's bytes in and out of HBM, as the graph states them (the
  compulsory traffic: a buffer too small to hold a GEMM's tiles re-reads operands, which
  the latency model prices and this count leaves out), and the optimizer step's HBM
  traffic (its priced seconds × η·HBM bandwidth: the step is memory-bound) at
  ``hbm_j_per_byte``;
- ``link`` and ``network``: the bytes each rank sends — the layers' tensor-parallel and
  sequence-parallel collectives (an all-reduce sends 2(n − 1)/n of its bytes, a
  reduce-scatter or all-gather (n − 1)/n, an all-to-all (n − 1)/n, a point-to-point all of
  them), the data-parallel gradient reduction (ZeRO 0: an all-reduce of the gradients;
  1–2: a reduce-scatter of the gradients and an all-gather of the 16-bit weights; 3: the
  two weight all-gathers of every microbatch's forward and backward and a reduce-scatter of
  its gradients), and the pipeline's activations and gradients (2 boundary tensors per
  microbatch across p − 1 of p stage boundaries) — inside the node at ``link_j_per_byte``,
  the share that crosses nodes at ``net_j_per_byte`` — ``phaze.collectives.net_share``, on
  the rank layout the step's time reads (``span_nodes``: a tensor-parallel group's ranks
  adjacent, an expert- or context-parallel group's t apart, the data-parallel ring's cp·d
  ranks t apart, the expert-data-parallel one's t·ep apart): a ring's nodes of its n hops,
  an all-to-all's peers on other nodes, the pipeline's sends between stages on different
  nodes (``boundary_net_share``);
- ``static``: ``static_w`` × the step's seconds.

Recomputation re-runs forward work: its energy is the forward's times the priced recompute
seconds over the priced forward seconds of the critical stage.

**Power and the clock** (``power_capped``). Power = energy / time. Under a cap the clock is
lowered (DVFS) until the power fits: with the clock at a fraction s of its own, the part of
the step the arrays' clock paces — ``c``, the arrays' busy time at their calibrated rate
(MACs / (num_tc·w·d·clock·tile_efficiency)) over the step's time, at most 1 — takes c/s of
the time, the rest is unchanged (memory, links), and the clock-paced energy (compute,
vector, sram) per operation scales by ``phaze.arch.dvfs_energy_scale(s)`` (voltage follows
the clock); static power runs the longer time. The power is increasing in s, so the cap's
clock is found by bisection on [``DVFS_MIN_CLOCK_FRACTION``, 1]; a row whose power exceeds
the cap even at the lowest clock is infeasible.
"""
from __future__ import annotations

import numpy as np

from .. import arch as _arch
from .. import collectives, cost, graph, precision as _precision
from .._cache import Memo
from . import _plans
from . import _layers
from ._layers import GRAD_REDUCE_BYTES

#: The parts of a step's energy, in the order ``energy_parts`` returns them.
ENERGY_PARTS = PARTS = ("compute", "vector", "sram", "hbm", "link", "network", "static")
#: The parts the clock's voltage scales (the cores and the buffer).
CLOCKED = ("compute", "vector", "sram")

_COLL = {name: i for i, name in enumerate(graph.COLLECTIVE_KINDS)}

_WORK = Memo(lambda: 256, "step.energy_work")
"""(OpGraph by identity) -> its per-operator work columns (:func:`_graph_columns`)."""


def _graph_columns(g):
    """Per operator of ``g``: MACs (by width class 16/8/4), vector lane operations, HBM
    bytes, bytes in and out (flash and vector operators' buffer traffic), the GEMM dims and
    operand bytes (their on-chip stream is per array shape), collective bytes sent and the
    group size."""
    hit = _WORK.get(g)
    if hit is not None:
        return hit
    kind = np.asarray(g.kind)
    gemm = (kind == graph.KIND_GEMM) | (kind == graph.KIND_FUSED)
    dims = np.asarray(g.dims, dtype=np.float64)
    macs = np.where(gemm, dims[:, 0] * dims[:, 1] * dims[:, 2] * dims[:, 3], 0.0)
    low = np.asarray(g.fp8, dtype=bool)
    four = _precision.is_low_precision(g.dtype) and "4" in _precision.datatype(g.dtype).family
    vec = np.where((kind == graph.KIND_VECTOR) | (kind == graph.KIND_FUSED),
                   np.asarray(g.elements, dtype=np.float64)
                   * np.asarray(g.cycles_per_element, dtype=np.float64), 0.0)
    coll = kind == graph.KIND_COLLECTIVE
    moved = (np.asarray(g.bytes_in, dtype=np.float64)
             + np.asarray(g.bytes_out, dtype=np.float64))
    flash = np.array([n in ("flash_attn", "flash_attn.bwd") for n in g.names], dtype=bool)
    code = np.asarray(g.collective)
    n = np.maximum(np.asarray(g.group_size, dtype=np.float64), 1.0)
    comm = np.asarray(g.comm_bytes, dtype=np.float64)
    full = np.asarray(g.bytes_in, dtype=np.float64)
    sent = np.select(
        [code == _COLL["all_reduce"],
         (code == _COLL["reduce_scatter"]) | (code == _COLL["all_gather"]),
         code == _COLL["all_to_all"], code == _COLL["p2p"]],
        [2.0 * (n - 1.0) / n * comm, (n - 1.0) / n * np.maximum(full, comm),
         (n - 1.0) / n * comm, comm], 0.0)
    sent = np.where(coll, sent, 0.0)
    in_bytes = np.where(low, float(_precision.FP8_BYTES), float(g.bytes_per_element))
    out = dict(
        mac16=float(macs[~low].sum()), mac8=0.0 if four else float(macs[low].sum()),
        mac4=float(macs[low].sum()) if four else 0.0, vector=float(vec.sum()),
        hbm=float(moved[~coll].sum()),
        streamed=float(moved[(flash | (kind == graph.KIND_VECTOR)) & ~coll].sum()),
        gemm_dims=dims[gemm & ~flash], gemm_in=in_bytes[gemm & ~flash],
        sent=sent[coll], group=n[coll], a2a=(code[coll] == _COLL["all_to_all"])
        | (code[coll] == _COLL["p2p"]), all_to_all=code[coll] == _COLL["all_to_all"])
    return _WORK.put(g, out)


def graph_energy(g, archs, energy, t):
    """Joules of one pass of ``g`` (one microbatch, one rank) on each row, by part (dict of
    (n,) arrays; no static part)."""
    c = _graph_columns(g)
    w = np.asarray(archs["tc_width"], dtype=np.float64)
    d = np.asarray(archs["tc_depth"], dtype=np.float64)
    sram = cost.onchip_bytes(c["gemm_dims"], c["gemm_in"], w, d).sum(axis=0) + c["streamed"]
    node = np.asarray(archs["node_size"], dtype=np.float64)
    if c["sent"].size:
        # a tensor-parallel group's ranks are adjacent; an expert- or context-parallel
        # group's t apart (the rank layout the step's time reads: collectives.net_share)
        share = collectives.net_share(c["group"][:, None],
                                      np.where(c["a2a"], float(t), 1.0)[:, None], node[None, :],
                                      all_to_all=c["all_to_all"][:, None])
        net = (c["sent"][:, None] * share).sum(axis=0)
        link = (c["sent"][:, None] * (1.0 - share)).sum(axis=0)
    else:
        link = net = np.zeros(len(archs))
    return dict(
        compute=(c["mac16"] * energy["mac16_j"] + c["mac8"] * energy["mac8_j"]
                 + c["mac4"] * energy["mac4_j"]),
        vector=c["vector"] * energy["vector_op_j"],
        sram=sram * energy["sram_j_per_byte"],
        hbm=c["hbm"] * energy["hbm_j_per_byte"],
        link=link * energy["link_j_per_byte"], network=net * energy["net_j_per_byte"])


def _add(acc, part, scale):
    for k, v in part.items():
        acc[k] = acc.get(k, 0.0) + scale * v


def layer_sums(mg, archs, energy):
    """What :func:`energy_parts` reads of a graph variant ``mg`` on rows ``archs``, which no
    plan changes: per part, one microbatch's forward and backward joules of the whole chain
    and the forward of its transformer layers (dicts of (n,) arrays); the chain's MACs
    forward + backward and its layers' forward MACs; the 16-bit weight bytes of one rank
    outside and inside the routed experts; the largest boundary tensor."""
    fwd, bwd, layer_fwd = {}, {}, {}
    dense_w = expert_w = boundary = macs = fwd_macs = 0.0
    for layer in mg.layers:
        f = graph_energy(layer.forward, archs, energy, int(mg.tensor_parallel))
        b = graph_energy(layer.backward, archs, energy, int(mg.tensor_parallel))
        _add(fwd, f, layer.count)
        _add(bwd, b, layer.count)
        cf = _graph_columns(layer.forward)
        cb = _graph_columns(layer.backward)
        if layer.kind not in ("embedding", "head"):
            _add(layer_fwd, f, layer.count)
            boundary = max(boundary, float(layer.boundary_bytes))
            fwd_macs += layer.count * (cf["mac16"] + cf["mac8"] + cf["mac4"])
        dense_w += layer.count * float(layer.param_bytes - layer.expert_param_bytes)
        expert_w += layer.count * float(layer.expert_param_bytes)
        macs += layer.count * (cf["mac16"] + cf["mac8"] + cf["mac4"]
                               + cb["mac16"] + cb["mac8"] + cb["mac4"])
    return dict(fwd=fwd, bwd=bwd, layer_fwd=layer_fwd, macs=macs, fwd_macs=fwd_macs,
                dense_w=dense_w, expert_w=expert_w, boundary=boundary)


def take_sums(sums, index):
    """:func:`layer_sums` of the rows ``index`` of the rows it was made on."""
    out = dict(sums)
    for k in ("fwd", "bwd", "layer_fwd"):
        out[k] = {p: v[index] for p, v in sums[k].items()}
    return out


def energy_parts(mg, archs, energy, *, plans, global_batch, grad_bytes, hbm_bw, sums=None):
    """Joules per device per step by part (:data:`PARTS`) of the plans ``plans`` (a
    ``_plans.plan_view`` of their records; one per row of ``archs`` and ``energy``), all of
    one graph variant ``mg`` (``_plans.variant_graph`` of their microbatch, widths, switches
    and datatype). ``grad_bytes``: bytes per gradient element in the reduction;
    ``hbm_bw``: each row's η·HBM bytes/s (the optimizer's traffic); ``sums``: the rows'
    :func:`layer_sums` when made already. Also returns the MACs per device per step (the
    clock's share, :func:`clock_share`)."""
    n = len(archs)
    if sums is None:
        sums = layer_sums(mg, archs, energy)
    t = int(mg.tensor_parallel)
    ep = np.asarray(plans["ep"], dtype=np.float64)
    cp = np.asarray(plans["cp"], dtype=np.float64)
    p = np.asarray(plans["p"], dtype=np.float64)
    d = np.asarray(plans["d"], dtype=np.float64)
    m = np.asarray(plans["m"], dtype=np.float64)
    zero = np.asarray(plans["zero"], dtype=np.int64)
    fwd_s = np.asarray(plans["fwd_s"], dtype=np.float64)
    rec_s = np.asarray(plans["rec_s"], dtype=np.float64)
    node = np.asarray(archs["node_size"], dtype=np.float64)
    fwd, bwd, layer_fwd = sums["fwd"], sums["bwd"], sums["layer_fwd"]
    with np.errstate(divide="ignore", invalid="ignore"):
        rec = np.where(fwd_s > 0, rec_s / fwd_s, 0.0)
    per = m / p
    parts = {k: per * (fwd[k] + bwd[k] + rec * layer_fwd[k]) for k in fwd}
    # recomputed MACs: the layers' forward again, at the recompute share
    macs_dev = per * (sums["macs"] + rec * sums["fwd_macs"])
    # the data-parallel reduction of the weights' gradients (16-bit weights: 2 B each)
    link = np.zeros(n)
    net = np.zeros(n)
    # the data-parallel ring: the cp·d ranks t apart; the expert-data-parallel one the
    # cp·d/ep ranks t·ep apart (Megatron-Core's layout, as the step's time places them)
    for weight_bytes, g, stride in ((sums["dense_w"], d * cp, np.full_like(d, float(t))),
                                    (sums["expert_w"], np.maximum(np.floor(d * cp / ep), 1.0),
                                     t * ep)):
        if not weight_bytes:
            continue
        elements = weight_bytes / 2.0 / p
        frac = np.where(g > 1, (g - 1.0) / g, 0.0)
        grads = elements * grad_bytes
        weights = elements * 2.0
        sent = np.select([zero == 0, zero < 3],
                         [2.0 * frac * grads, frac * (grads + weights)],
                         m * frac * (2.0 * weights + grads))
        share = collectives.net_share(g, stride, node)
        net = net + sent * share
        link = link + sent * (1.0 - share)
    # the pipeline's activations forward and gradients backward
    pp = np.where(p > 1, 2.0 * m * sums["boundary"] * (p - 1.0) / p, 0.0)
    pp_net = collectives.boundary_net_share(p, t * cp * d, node)
    net = net + pp * pp_net
    link = link + pp * (1.0 - pp_net)
    parts["link"] = parts["link"] + link * energy["link_j_per_byte"]
    parts["network"] = parts["network"] + net * energy["net_j_per_byte"]
    opt_s = np.asarray(plans["opt_s"], dtype=np.float64)
    parts["hbm"] = parts["hbm"] + opt_s * hbm_bw * energy["hbm_j_per_byte"]
    parts["static"] = np.zeros(n)
    return {k: np.asarray(parts[k], dtype=np.float64) for k in PARTS}, macs_dev


def clock_share(macs_dev, archs, tile_efficiency, time_s):
    """The share of the step the arrays' clock paces: their busy time at the calibrated
    rate over the step's seconds, at most 1 (0 where nothing runs)."""
    with np.errstate(over="ignore"):       # a clock near the float maximum: an infinite rate
        rate = (np.asarray(archs["num_tc"], dtype=np.float64) * archs["tc_width"]
                * archs["tc_depth"] * archs["clock_ghz"] * 1e9
                * np.asarray(tile_efficiency, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where((time_s > 0) & np.isfinite(time_s), macs_dev / rate / time_s, 0.0)
    return np.clip(c, 0.0, 1.0)


def _at_clock(s, time_s, share, clocked, other, static_w):
    """(seconds, power W) of steps at the clock fraction ``s``: the clock-paced share of
    the step takes share/s of its time, the rest is unchanged; the clocked energy scales by
    ``phaze.arch.dvfs_energy_scale(s)`` and static power runs the whole (longer) step."""
    t = time_s * (share / s + (1.0 - share))
    return t, (clocked * _arch.dvfs_energy_scale(s) + other + static_w * t) / t


def power_capped(parts, time_s, static_w, share, cap_w):
    """The step under a power cap: (clock fraction s, seconds, parts with static, power W,
    feasible) per row. ``parts``: :func:`energy_parts`' (static 0); ``share``:
    :func:`clock_share`; ``cap_w``: the cap per row (inf: none)."""
    time_s = np.asarray(time_s, dtype=np.float64)
    static_w = np.asarray(static_w, dtype=np.float64)
    cap = np.broadcast_to(np.asarray(cap_w, dtype=np.float64), time_s.shape)
    clocked = sum(parts[k] for k in CLOCKED)
    other = sum(parts[k] for k in PARTS if k not in CLOCKED)
    ok = np.isfinite(time_s) & (time_s > 0)
    time_s = np.where(ok, time_s, 1.0)
    rows = (time_s, share, clocked, other, static_w)
    _, p1 = _at_clock(np.ones_like(time_s), *rows)
    s = np.ones_like(time_s)
    bind = ok & (p1 > cap)
    lo_s = float(_arch.DVFS_MIN_CLOCK_FRACTION)
    _, p_lo = _at_clock(np.full_like(time_s, lo_s), *rows)
    feasible = ok & (p_lo <= cap)
    search = bind & feasible
    if np.any(search):
        lo = np.full(int(search.sum()), lo_s)
        hi = np.ones_like(lo)
        sub = [v[search] if np.ndim(v) else v for v in rows]
        for _ in range(26):   # the clock to 2⁻²⁶ of its range
            mid = 0.5 * (lo + hi)
            over = _at_clock(mid, *sub)[1] > cap[search]
            hi = np.where(over, mid, hi)
            lo = np.where(over, lo, mid)
        s[search] = lo
    s = np.where(feasible | ~bind, s, lo_s)
    t_new, power = _at_clock(s, *rows)
    out = {k: np.asarray(parts[k], dtype=np.float64).copy() for k in PARTS}
    for k in CLOCKED:
        out[k] = out[k] * _arch.dvfs_energy_scale(s)
    out["static"] = static_w * t_new
    return s, np.where(ok, t_new, np.inf), out, np.where(ok, power, 0.0), feasible | (ok & ~bind)


def template_cap(chip, max_power_w):
    """The power cap a chip's step runs under: ``max_power_w`` when given; else, for a
    chip whose GEMM efficiency is measured (its rates already run at the clock its own
    power limit leaves), none; else its ``tdp_w``, or the template's budget
    (``phaze.arch.TEMPLATE_TDP_W``)."""
    if max_power_w is not None:
        return float(max_power_w)
    if chip.gemm_rates_measured:
        return float("inf")
    return float(chip.tdp_w) if chip.tdp_w is not None else float(_arch.TEMPLATE_TDP_W)


def chip_energy(chip, rows=None):
    """The energy records of one resolved chip (``phaze.arch.Chip``): its node and the
    kinds of its memory and fabric, the template's where it gives none; of ``rows`` (rows
    equal to the chip's, e.g. a search's) when given, else of its own row."""
    return _arch.energy_rows(chip.row if rows is None else rows,
                             process_nm=chip.priced_process_nm,
                             hbm_kind=chip.hbm_kind, link_kind=chip.link_kind,
                             net_kind=chip.net_kind)


def plan_power(m_spec, chip, plan, breakdown, time_s, *, max_power_w=None):
    """Energy, power and the capped clock of one priced plan (``training_step``'s ``plan``
    dict, its breakdown and seconds) on ``chip``: a dict of plain values — ``power_w`` (one
    chip), ``energy_per_step_j`` (every device used), ``energy_breakdown_j`` (per part,
    every device), ``clock_fraction``, ``power_cap_w`` (None: uncapped), ``time_s`` (at that
    clock), ``power_feasible``."""
    view = _plans.step_view(plan, breakdown)
    mg = _plans.variant_graph(m_spec, plan["microbatch"], int(view["t"][0]), view["sp"][0],
                              view["flash"][0], int(view["cp"][0]), int(view["ep"][0]),
                              plan["precision"], plan.get("capacity_factor"))
    row = chip.row
    eff = chip.efficiency_set()
    energy = chip_energy(chip)
    grad = float(GRAD_REDUCE_BYTES[plan.get("grad_reduce_dtype") or "fp32"])
    hbm_bw = _layers.bytes_per_s(eff.hbm_efficiency, row["hbm_gb_per_s"])
    parts, macs = energy_parts(mg, row, energy, plans=view,
                               global_batch=int(plan["global_batch"]), grad_bytes=grad,
                               hbm_bw=hbm_bw)
    share = clock_share(macs, row, float(eff.tile_efficiency), np.array([time_s]))
    cap = template_cap(chip, max_power_w)
    s, t_new, out, power, ok = power_capped(parts, np.array([time_s]), energy["static_w"],
                                            share, cap)
    devices = int(view["devices"][0])
    return {"power_w": float(power[0]),
            "energy_per_step_j": float(sum(out[k][0] for k in PARTS) * devices),
            "energy_breakdown_j": {k: float(out[k][0] * devices) for k in PARTS},
            "clock_fraction": float(s[0]), "power_cap_w": None if cap == float("inf") else cap,
            "time_s": float(t_new[0]), "power_feasible": bool(ok[0])}
