"""A timeline of one training step as a Chrome/Perfetto trace (issue 16 item 4; ``phaze trace``).

:func:`events` builds, and :func:`write` writes, a Trace Event Format JSON object
(``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``) that
chrome://tracing and ui.perfetto.dev open. Every event is a complete event (``"ph": "X"``)
with ``ts`` (start) and ``dur`` in **microseconds**, as the format requires: phaze
computes in seconds and each time is written as ``seconds × 1e6`` (no rounding; JSON keeps
the float). Metadata events (``"ph": "M"``) name the processes and tracks.

What is drawn (one data-parallel replica; the others run the same timeline):

- **Pipeline** — one process per pipeline stage ("stage 1" … "stage p", 1-based as
  ``phaze evaluate`` prints them) with the tracks *compute* (forward ``F i`` and
  backward ``B i`` of every microbatch i of the pipeline in Megatron's 1F1B order —
  p − r − 1 warm-up forwards on stage r (0-based), then one forward one backward, then the
  cool-down backwards — and ``recompute F i`` when activations are recomputed),
  *p2p* (the point-to-point transfer of activations or gradients a stage waits for),
  and *collectives* (gradient sync, embedding all-reduce, ZeRO traffic, optimizer). The
  bubbles are the idle gaps between events.
- **Layer schedule** — per stage a second process ("stage r · layer schedule") with the
  certified operator schedule of one transformer layer (forward, then backward) on the
  chip's cores, from :func:`phaze.schedule.schedule_layer` on the study's operator
  latencies (:func:`phaze.cost.op_latencies`): each operator on one lane, "tensor core
  k", "vector core k" (a one-core fused operator holds one of each and is drawn on both),
  "link" (collectives), or "all cores (intra-op)"; lanes are assigned greedily in start
  order, which never needs more lanes than the chip has cores because the schedule
  respects the core counts. The forward layer is placed where the stage's first forward
  computation starts, the backward layer where its first backward computation starts.

The cost model of the pipeline part (``calibrated``):

- ``False`` (default, as ``phaze evaluate``): the study's placement model,
  :func:`phaze.placement.breakdown` of the plan ``phaze.search.evaluate_point`` costs.
  Each stage's per-microbatch load = forward walk (waiting ``edge bytes / bandwidth`` for
  its input, then its layers' forwards) + backward walk (the recomputed forward when
  recomputing and not the last stage, the wait for the incoming gradient overlapping it,
  then the backwards). The model charges a transfer to the receiving stage, so p2p events
  sit on the receiver. Time per batch = max load · (⌈m/d⌉ + p − 1) + gradient sync,
  ⌈m/d⌉ the microbatches of one pipeline. The model has no optimizer time.
- ``True``: the training-step model :func:`phaze.step.training_step` (calibrated
  operators, Megatron-LM's 1F1B). That model prices every stage at the critical stage's
  slot (its breakdown gives that stage's forward, backward, recomputation and p2p, not
  the others'), so every stage is drawn with those; after the pipeline come the
  data-parallel gradient reduction, the tied-embedding all-reduce (first and last stage)
  and the optimizer step, one after another as the model adds them. ZeRO-2/3 traffic
  inside the slot is drawn as one "ZeRO collectives" event per microbatch.

How the 1F1B timeline realises the model's time exactly: stage r gets a forward window
φ_r (its forward work) and a backward window L − φ_r per microbatch, L the largest
per-microbatch load (slot); the operations are placed as soon as their dependencies allow
(forward i on stage r after forward i on stage r − 1, backward i after backward i on
stage r + 1, each stage in 1F1B order). The chain of windows F(0,0) … F(p−1,0), then the
last stage's 2m windows, then B(p−2,m−1) … B(0,m−1) has length (m + p − 1)·L, and this
placement attains it, so the pipeline ends at exactly the model's (m + p − 1)·L. Inside a
forward window the work starts at the window's start; inside a backward window it ends at
the window's end (the idle time before it is the wait for the next stage's gradient), so
the last backward of the first stage ends at the pipeline's end and every dependency
still holds. The idle gaps are the bubbles (warm-up, cool-down) and the imbalance of
stages lighter than the slowest.
Interleaved 1F1B (v > 1, the step model) is drawn chunk by chunk in Megatron-Core's
order (:func:`interleaved_one_f_one_b`; events "F i.j" of microbatch i, chunk j): each
chunk operation holds 1/v of its stage's window, and the pipeline ends at the model's
(m + (p − 1)/v)·slot. Expert and context parallelism are drawn as the step model prices
them: their all-to-alls and ring passes are inside each forward and backward.

What is traced is exactly the step ``phaze evaluate`` prices (issue 29): the model at
``seq_len`` (a zoo model's own by default), the same chip and efficiency set; the
calibrated model's layer schedule is built and priced as the step model builds it
(Megatron's kernels, the plan's strategy, ``op_latencies(model="calibrated")``). A plan
``evaluate`` calls infeasible (it does not fit its HBM, or the step model refuses it) is
refused with its reason. The first stage sends activations and receives gradients, the
last receives activations and sends gradients.
"""
from __future__ import annotations

import json

import numpy as np

from . import plan as _plan
from ._validate import output_error, positive_int

__all__ = ["events", "write", "one_f_one_b", "assign_lanes"]

_US = 1e6  # microseconds per second (the trace format's unit)


# ---------------------------------------------------------------------------
# 1F1B windows
# ---------------------------------------------------------------------------

def one_f_one_b(forward_windows, slot, microbatches):
    """Start times (seconds) of the 1F1B windows of one pipeline.

    ``forward_windows[r]``: seconds of stage r's forward window (≤ ``slot``); the
    backward window is ``slot − forward_windows[r]``; ``microbatches`` c per pipeline.
    Returns ``(order, fstart, bstart)``: ``order[r]`` the list of ("F"|"B", i) in stage r's
    1F1B order, ``fstart[r][i]`` and ``bstart[r][i]`` the windows' starts; each operation
    starts as soon as its stage's previous operation and its dependency (forward i on
    stage r − 1, backward i on stage r + 1) have ended. The last window ends at
    (c + p − 1)·slot (module docstring).
    """
    p, c = len(forward_windows), int(microbatches)
    phi = [float(x) for x in forward_windows]
    beta = [float(slot) - x for x in phi]
    order = []
    for r in range(p):
        w = min(p - r - 1, c)
        ops = [("F", i) for i in range(w)]
        for i in range(c - w):
            ops += [("F", w + i), ("B", i)]
        ops += [("B", i) for i in range(c - w, c)]
        order.append(ops)
    fstart = [[None] * c for _ in range(p)]
    bstart = [[None] * c for _ in range(p)]
    fend = [[None] * c for _ in range(p)]
    bend = [[None] * c for _ in range(p)]
    pos, free = [0] * p, [0.0] * p
    remaining = p * 2 * c
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, i = order[r][pos[r]]
                if kind == "F":
                    dep = 0.0 if r == 0 else fend[r - 1][i]
                else:
                    dep = bend[r + 1][i] if r < p - 1 else 0.0
                if dep is None:
                    break
                start = max(free[r], dep)
                if kind == "F":
                    fstart[r][i], fend[r][i] = start, start + phi[r]
                    free[r] = fend[r][i]
                else:
                    bstart[r][i], bend[r][i] = start, start + beta[r]
                    free[r] = bend[r][i]
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the 1F1B order has no cycle
            raise RuntimeError("1F1B order deadlocked")
    return order, fstart, bstart


def interleaved_one_f_one_b(forward_window, slot, microbatches, stages, chunks):
    """Start times (seconds) of Megatron-LM's interleaved 1F1B on ``stages`` devices of
    ``chunks`` model chunks each (v > 1), every device's forward work ``forward_window``
    and backward ``slot − forward_window`` per microbatch, split evenly over its chunks.

    Order per device r (Megatron-Core ``schedules.py``
    ``forward_backward_pipelining_with_interleaving``): (p − r − 1)·2 + (v − 1)·p warm-up
    chunk forwards (at most m·v), then one forward one backward, then the cool-down
    backwards; the k-th forward runs chunk (k // p) mod v on microbatch (k // (p·v))·p +
    k mod p, the k-th backward chunk v − 1 − (k // p) mod v. Chunk j of device r is
    virtual stage j·p + r: a forward waits for the previous virtual stage's forward of
    the same microbatch, a backward for the next one's backward (the last virtual stage's
    for its own forward). Each operation starts when its device and its dependency are
    free. Returns ``(ops, end)``: ``ops[r]`` the list of ("F"|"B", chunk, microbatch,
    start) of device r in its order and the last operation's end, which is
    (m + (p − 1)/v)·slot when m is a multiple of p (Megatron's condition).
    """
    p, v, c = int(stages), int(chunks), int(microbatches)
    f, b = float(forward_window) / v, (float(slot) - float(forward_window)) / v
    total = c * v

    def op(kind, k):
        j = (k // p) % v
        return (kind, j if kind == "F" else v - 1 - j, (k // (p * v)) * p + k % p)

    orders = []
    for r in range(p):
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
        ops = [op("F", k) for k in range(warm)]
        for k in range(total - warm):
            ops += [op("F", warm + k), op("B", k)]
        ops += [op("B", k) for k in range(total - warm, total)]
        orders.append(ops)
    end, placed = {}, [[] for _ in range(p)]
    pos, free = [0] * p, [0.0] * p
    remaining = p * 2 * total
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, j, i = orders[r][pos[r]]
                if kind == "F":
                    dep = (None if r == 0 and j == 0 else
                           ("F", j, r - 1, i) if r > 0 else ("F", j - 1, p - 1, i))
                elif r < p - 1:
                    dep = ("B", j, r + 1, i)
                else:
                    dep = ("B", j + 1, 0, i) if j < v - 1 else ("F", j, r, i)
                if dep is not None and dep not in end:
                    break
                start = max(free[r], end[dep] if dep is not None else 0.0)
                free[r] = end[(kind, j, r, i)] = start + (f if kind == "F" else b)
                placed[r].append((kind, j, i, start))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - Megatron's order has no cycle
            raise RuntimeError("interleaved 1F1B order deadlocked")
    return placed, max(free) if p else 0.0


def assign_lanes(starts, finishes, tol=0.0):
    """Greedy interval partitioning: lane index (0-based) per interval, intervals taken in
    start order, each to the lowest lane free at its start (free when its last interval
    ended no later than ``start + tol``). Uses as many lanes as the most intervals
    overlapping at once."""
    order = np.lexsort((np.asarray(finishes), np.asarray(starts)))
    lane_end, lanes = [], np.empty(len(order), dtype=np.int64)
    for i in order:
        s, f = float(starts[i]), float(finishes[i])
        for k, end in enumerate(lane_end):
            if end <= s + tol:
                lanes[i], lane_end[k] = k, f
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(f)
    return lanes


# ---------------------------------------------------------------------------
# the trace
# ---------------------------------------------------------------------------

class _Trace:
    def __init__(self):
        self.events = []

    def meta(self, pid, name, tid=None, sort=None):
        if tid is None:
            self.events.append({"ph": "M", "pid": pid, "name": "process_name",
                                "args": {"name": name}})
            if sort is not None:
                self.events.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                                    "args": {"sort_index": sort}})
        else:
            self.events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                                "args": {"name": name}})
            if sort is not None:
                self.events.append({"ph": "M", "pid": pid, "tid": tid,
                                    "name": "thread_sort_index", "args": {"sort_index": sort}})

    def span(self, pid, tid, name, cat, start_s, dur_s, **args):
        """One complete event; start and duration given in seconds, written in µs."""
        if dur_s <= 0:
            return
        self.events.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat,
                            "ts": start_s * _US, "dur": dur_s * _US, "args": args})


_COMPUTE, _P2P, _COLL = 1, 2, 3


def _study_stages(model, arch, t, p, d, mb, recompute, devices, global_batch, hbm_gib,
                  optimizer):
    """The study's model: per stage the window contents, the slot, the tail phases."""
    from . import search
    from .search import arch_row, chain_static, model_graph, resolve_models

    r = search.evaluate_point(model, arch, t, p, d, mb, recompute, devices=devices,
                              global_batch=global_batch, hbm_gib=hbm_gib, optimizer=optimizer,
                              study=True)
    if not r["feasible"]:
        raise ValueError(f"the plan is infeasible ({r['reason']}); there is no step to trace")
    spec = resolve_models(model)[0]
    row = arch_row(arch)
    _, _, _, E = chain_static(model_graph(spec, mb, t))
    bandwidth = float(row["net_gb_per_s"][0]) * 1e9
    n_chain = len(E) + 1
    stages = []
    for k, s in enumerate(r["stages"]):
        first, last = s["layers"]
        wait_in = float(E[first - 1]) / bandwidth if first > 0 else 0.0
        wait_out = float(E[last]) / bandwidth if last < n_chain - 1 else 0.0
        sum_fw = s["forward_s"] - wait_in
        sum_bw = s["backward_s"] - wait_out
        recomputes = bool(recompute) and k < p - 1   # every stage but the last
        fwd = [(_P2P, "recv activations", "p2p", 0.0, wait_in),
               (_COMPUTE, "F", "forward", wait_in, sum_fw)]
        if recomputes:
            bwd = [(_COMPUTE, "recompute F", "recompute", 0.0, sum_fw),
                   (_P2P, "recv gradients", "p2p", 0.0, wait_out),
                   (_COMPUTE, "B", "backward", max(sum_fw, wait_out), sum_bw)]
        else:
            bwd = [(_P2P, "recv gradients", "p2p", 0.0, wait_out),
                   (_COMPUTE, "B", "backward", wait_out, sum_bw)]
        stages.append({"phi": s["forward_s"], "forward": fwd, "backward": bwd,
                       "compute_s": s["compute_s"], "load_s": s["load_s"]})
    bd = r["breakdown"]
    slot = max(s["load_s"] for s in r["stages"])
    c = int(r["microbatches_per_pipeline"])  # ⌈global / (microbatch · d)⌉
    tail = [("gradient sync", "grad_sync", bd["grad_sync_s"], range(p))]
    info = {"cost_model": "study", "time_per_batch_s": r["time_per_batch_s"],
            "steady_s": bd["steady_s"], "bubble_s": bd["bubble_s"],
            "grad_sync_s": bd["grad_sync_s"], "critical_stage": bd["critical_stage"]}
    return stages, slot, c, tail, info, row


def _p2p_words(r, p):
    """What stage r (0-based) of p moves point to point: (forward, backward) labels (the
    first stage receives no activations, the last sends no gradients)."""
    fwd = "send activations" if r == 0 else ("recv activations" if r == p - 1
                                             else "recv/send activations")
    bwd = "recv gradients" if r == p - 1 and p == 1 else (
        "send gradients" if r == p - 1 else "recv gradients" if r == 0
        else "recv/send gradients")
    return fwd, bwd


def _calibrated_stages(spec, arch, t, p, d, mb, recompute, global_batch, hbm_gib, knobs):
    """The step model: every stage at the critical stage's slot (module docstring); the
    plan refused unless ``phaze evaluate`` calls it feasible (it runs and fits)."""
    from . import search, step
    from .arch import resolve_chip

    rec = recompute if isinstance(recompute, str) else ("full" if recompute else "none")
    chip = resolve_chip(arch) if isinstance(arch, str) else arch
    r = search.evaluate_point(spec, chip, t, p, d, mb, rec, global_batch=global_batch,
                              hbm_gib=hbm_gib, **knobs)
    if r["status"] != "ok" or not r["feasible"]:
        raise ValueError(f"the plan is {'not modelled' if r['status'] == 'not_modelled' else 'infeasible'} "
                         f"({r['reason']}); there is no step to trace")
    res = step.training_step(spec, chip, tensor_parallel=t, pipeline_parallel=p,
                             data_parallel=d, microbatch=mb, global_batch=global_batch,
                             recompute=rec, **knobs)
    b = res.breakdown
    half = b.p2p_s / 2.0
    zero_s = b.slot_s - (b.forward_s + b.backward_s + b.recompute_s + b.p2p_s)
    compute = b.forward_s + b.backward_s + b.recompute_s
    stages = []
    for k in range(p):
        words = _p2p_words(k, p)
        fwd = [(_P2P, words[0], "p2p", 0.0, half),
               (_COMPUTE, "F", "forward", half, b.forward_s)]
        bwd = [(_COMPUTE, "recompute F", "recompute", 0.0, b.recompute_s),
               (_COMPUTE, "B", "backward", b.recompute_s, b.backward_s),
               (_P2P, words[1], "p2p", b.recompute_s + b.backward_s, half),
               (_COLL, "ZeRO collectives", "zero", b.recompute_s + b.backward_s + half,
                max(0.0, zero_s))]
        stages.append({"phi": half + b.forward_s, "forward": fwd, "backward": bwd,
                       "compute_s": compute, "load_s": b.slot_s})
    tail = [("gradient reduction (data parallel)", "grad_sync", b.dp_allreduce_s, range(p)),
            ("embedding all-reduce", "embedding", b.embedding_allreduce_s,
             sorted({0, p - 1})),
            ("optimizer step", "optimizer", b.optimizer_s, range(p))]
    info = {"cost_model": "calibrated", "time_per_batch_s": res.time_s,
            "evaluate_time_per_batch_s": r["time_per_batch_s"], "seq_len": spec.seq_len,
            **knobs,   # the strategy knobs drawn (phaze.plan.STRATEGY)
            "pipeline_time_s": b.pipeline_s,
            "steady_s": b.steady_s, "bubble_s": b.bubble_s, "grad_sync_s": b.dp_allreduce_s,
            "embedding_allreduce_s": b.embedding_allreduce_s, "optimizer_s": b.optimizer_s,
            "critical_stage": b.critical_stage + 1}
    return stages, b.slot_s, b.microbatches, tail, info, chip.row


def _layer_plan(spec, mb, t, row, gap):
    """The certified schedule of one transformer layer on ``row``'s cores, per direction
    ("forward", "backward"): (graph, schedule, start_s, dur_s, lanes), where ``lanes[i]``
    lists the (lane kind, index) operator i occupies. The same for every stage: computed
    once per trace."""
    from . import cost
    from .search import model_graph

    return _layer_lanes(model_graph(spec, mb, t).layers[1], row, gap,
                        lambda g: cost.op_latencies(g, row))


def _layer_plan_calibrated(spec, mb, t, row, gap, knobs, arch):
    """:func:`_layer_plan` on the calibrated model the pipeline lanes use: the layer as the
    step model builds it (Megatron's kernels, the plan's sequence parallelism, flash
    attention, datatype, expert and context parallelism; the first MoE block of a mixture
    of experts) priced by ``phaze.cost.op_latencies(model="calibrated")`` with the chip's
    efficiency set."""
    from . import cost, graph
    from .arch import attention_shape_kernel, resolve_chip

    chip = resolve_chip(arch) if isinstance(arch, str) else arch
    eff = chip.efficiency_set() if hasattr(chip, "efficiency_set") else None
    mg = graph.build_layers(spec, mb, t, **_plan.layer_graph_keywords(knobs, t, spec.is_moe))
    blocks = [lay for lay in mg.layers[1:-1]]
    layer = next((lay for lay in blocks if lay.kind == "moe_block"), blocks[0])
    curve = attention_shape_kernel(chip, knobs.get("attention_kernel", "chip"))
    return _layer_lanes(layer, row, gap, lambda g: cost.op_latencies(
        g, row, model="calibrated", efficiency=eff, flash_kernel=curve))


def _layer_lanes(layer, row, gap, latencies):
    """The certified schedule of ``layer`` (forward and backward graphs) on ``row``'s
    cores with operator latencies ``latencies(graph) -> (single, intra)``."""
    from . import _config, schedule
    from .graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR

    ntc, nvc = int(row["num_tc"][0]), int(row["num_vc"][0])
    gap = _config.SCHEDULE_GAP if gap is None else gap
    plan = {}
    for direction, g in (("forward", layer.forward), ("backward", layer.backward)):
        single, intra = latencies(g)
        single = np.ascontiguousarray(single[:, 0], dtype=np.float64)
        intra = np.ascontiguousarray(intra[:, 0], dtype=np.float64)
        sch = schedule.schedule_layer(g, single, intra, ntc, nvc, gap=gap)
        dur = np.where(sch.modes == 1, intra, single)
        start, finish = sch.starts, sch.starts + dur
        tol = 1e-9 * max(float(sch.makespan), 1e-300)
        kind, modes = g.kind, sch.modes
        one = modes == 0
        uses_tc = one & ((kind == KIND_GEMM) | (kind == KIND_FUSED)) & (dur > 0)
        uses_vc = one & ((kind == KIND_VECTOR) | (kind == KIND_FUSED)) & (dur > 0)
        lanes = {}
        for name_, mask in (("tc", uses_tc), ("vc", uses_vc)):
            idx = np.flatnonzero(mask)
            for i, k in zip(idx, assign_lanes(start[idx], finish[idx], tol)):
                lanes.setdefault(int(i), []).append((name_, int(k)))
        for i in range(g.n_ops):
            if kind[i] == KIND_COLLECTIVE:
                lanes[i] = [("link", 0)]
            elif modes[i] == 1:
                lanes[i] = [("intra", 0)]
            elif i not in lanes:                       # zero-length one-core operator
                lanes[i] = [("tc" if kind[i] in (KIND_GEMM, KIND_FUSED) else "vc", 0)]
        plan[direction] = (g, sch, start, dur, lanes)
    return plan


def _layer_schedule(tr, pid, plan, row, offsets):
    """Draw the layer schedule ``plan`` (:func:`_layer_plan`; forward at ``offsets[0]``,
    backward at ``offsets[1]``, seconds) on the lanes of process ``pid``; returns a dict
    per direction: makespan_s, status, lower_bound_s, offset_s."""
    ntc, nvc = int(row["num_tc"][0]), int(row["num_vc"][0])
    lane_tid = {}
    out = {}

    def tid_of(lane_kind, k):
        key = (lane_kind, k)
        if key not in lane_tid:
            base = {"tc": 100, "vc": 100 + ntc, "link": 100 + ntc + nvc,
                    "intra": 101 + ntc + nvc}[lane_kind]
            name = {"tc": f"tensor core {k}", "vc": f"vector core {k}", "link": "link",
                    "intra": "all cores (intra-op)"}[lane_kind]
            lane_tid[key] = base + k
            tr.meta(pid, name, tid=base + k, sort=base + k)
        return lane_tid[key]

    for direction, offset in (("forward", offsets[0]), ("backward", offsets[1])):
        g, sch, start, dur, lanes = plan[direction]
        modes = sch.modes
        for i in range(g.n_ops):
            for lane_kind, k in lanes[i]:
                tr.span(pid, tid_of(lane_kind, k), g.names[i], f"layer_{direction}",
                        offset + float(start[i]), float(dur[i]), op=int(i),
                        direction=direction, mode="intra-op" if modes[i] == 1 else "one core",
                        preds=[int(q) for q in g.preds(i)])
        out[direction] = {"makespan_s": float(sch.makespan), "status": sch.status,
                          "lower_bound_s": float(sch.lower_bound), "offset_s": float(offset)}
    return out


def events(model, arch="tpuv4", *, tensor_parallel, pipeline_parallel, data_parallel,
           microbatch=1, recompute=False, devices=None, global_batch=4096, hbm_gib=None,
           optimizer="sgd", calibrated=True, layer_schedule=True, gap=None, seq_len=None,
           **knobs) -> dict:
    """The Chrome/Perfetto trace (a JSON-ready dict) of one training step of a plan.

    Plan arguments as :func:`phaze.search.evaluate_point` (``model`` zoo name or
    ModelSpec, ``arch`` preset name or row, t, p, d, ``microbatch`` and ``global_batch``
    in samples, ``recompute`` "none" | "selective" | "full" (or a bool: full / none) —
    bool only with the study's model — ``devices``, ``hbm_gib`` GiB, ``optimizer``);
    ``calibrated`` (the default, as ``phaze evaluate``) chooses the step model, False the
    study's (module docstring); the step model also takes the strategy knobs of
    :func:`phaze.step.training_step` (``phaze.plan.STRATEGY``, keyword-only: the signature
    lists them) at the values the trace draws (a knob's ``trace_values``: even pipeline
    splits and one schedule per step; at p = 1, where they price the same step, any value
    of a ``pipeline_only`` knob), the study's model none of them;
    ``layer_schedule`` adds the per-stage operator schedule of one transformer layer
    (``gap``: its accepted schedule gap, default ``phaze._config.SCHEDULE_GAP``).

    ``seq_len``: tokens per sample (default the model's own), as ``phaze evaluate``;
    ``hbm_gib`` the HBM the plan must fit (default the chip's); ``devices`` and
    ``optimizer`` act on the study's model only.
    The trace holds about 5·p·c pipeline events (c microbatches per pipeline: the
    global batch / (microbatch·d)), some 100 bytes each, plus p times one layer's
    operators.

    Returns ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"phaze":
    summary}}`` with ``ts``/``dur`` in microseconds; the summary holds the plan, the cost
    model, ``time_per_batch_s`` (seconds; equals the last event's end / 1e6 up to
    rounding), ``slot_s``, ``microbatches_per_pipeline``, per stage ``compute_s`` per
    microbatch, and the layer schedules' makespans (seconds). A plan the model finds
    infeasible, or one it cannot price, raises ``ValueError`` with the reason.
    """
    t = positive_int("tensor_parallel", tensor_parallel)
    p = positive_int("pipeline_parallel", pipeline_parallel)
    d = positive_int("data_parallel", data_parallel)
    mb = positive_int("microbatch", microbatch)
    _plan.check_keywords("events", knobs, _plan.STRATEGY)
    knobs = {name: _plan.check(name, knobs[name]) if name in knobs else _plan.KNOB[name].default
             for name in _plan.STRATEGY}
    for name, value in knobs.items():
        knob = _plan.KNOB[name]
        if (knob.trace_values is not None and value not in knob.trace_values
                and not (knob.pipeline_only and p == 1)):   # moot on one stage
            raise ValueError(knob.trace_note or f"{name}: phaze trace does not draw "
                             f"{knob.title} {value} yet")
    from .search import resolve_models

    spec = resolve_models(model, seq_len)[0]   # the model as priced (its sequence)
    if calibrated:
        if isinstance(recompute, (bool, np.bool_)):
            recompute = "full" if recompute else "none"
        stages, slot, c, tail, info, row = _calibrated_stages(
            spec, arch, t, p, d, mb, recompute, global_batch, hbm_gib, knobs)
    else:
        if recompute not in (True, False) and not isinstance(recompute, np.bool_):
            raise ValueError(f"recompute must be True or False for the study's model, got "
                             f"{recompute!r} (selective recomputation: use calibrated=True)")
        lacking = [_plan.KNOB[name].title for name, value in knobs.items()
                   if _plan.differs_from_study(name, value)]
        if lacking:
            raise ValueError(f"the study's model has no {', '.join(lacking)} choice; use "
                             f"calibrated=True")
        stages, slot, c, tail, info, row = _study_stages(
            spec, arch, t, p, d, mb, bool(recompute), devices, global_batch, hbm_gib,
            optimizer)
    tr = _Trace()
    v = _plan.pipeline_chunks(knobs) if calibrated else 1
    if v > 1:
        first_f, first_b = _draw_interleaved(tr, stages, slot, c, p, v)
        clock = info["pipeline_time_s"]
    else:
        first_f, first_b = _draw_one_f_one_b(tr, stages, slot, c, p)
        clock = (c + p - 1) * slot
    pipeline_end = clock
    for name, cat, dur, where in tail:
        for r in where:
            tr.span(r + 1, _COLL, name, cat, clock, dur)
        clock += dur
    layers = []
    if layer_schedule:
        plan = (_layer_plan_calibrated(spec, mb, t, row, gap, knobs, arch) if calibrated
                else _layer_plan(spec, mb, t, row, gap))
        for r in range(p):
            pid = p + 1 + r
            tr.meta(pid, f"stage {r + 1} · layer schedule on {t}-way slice", sort=2 * r + 1)
            layers.append(_layer_schedule(tr, pid, plan, row, (first_f[r], first_b[r])))
    summary = dict(info, model=spec.name, tensor_parallel=t, pipeline_parallel=p,
                   data_parallel=d, microbatch=mb, global_batch=int(global_batch),
                   recompute=recompute, slot_s=slot, microbatches_per_pipeline=c,
                   pipeline_s=pipeline_end, end_s=clock,
                   stages=[{"stage": r + 1, "compute_s": st["compute_s"],
                            "load_s": st["load_s"]} for r, st in enumerate(stages)],
                   layer_schedules=layers, time_unit="ts and dur in microseconds "
                   "(seconds x 1e6)")
    return {"traceEvents": tr.events, "displayTimeUnit": "ms",
            "otherData": {"phaze": summary}}


def _stage_meta(tr, r):
    pid = r + 1
    tr.meta(pid, f"stage {r + 1} (pipeline)", sort=2 * r)
    tr.meta(pid, "compute", tid=_COMPUTE, sort=_COMPUTE)
    tr.meta(pid, "p2p", tid=_P2P, sort=_P2P)
    tr.meta(pid, "collectives and optimizer", tid=_COLL, sort=_COLL)
    return pid


def _draw_interleaved(tr, stages, slot, c, p, v):
    """Draw Megatron's interleaved 1F1B (:func:`interleaved_one_f_one_b`): each chunk
    operation holds 1/v of its stage's forward (or backward) window contents, the
    backward contents ending with the window. Returns each stage's first forward and
    first backward computation starts (seconds)."""
    first_f, first_b = [], []
    for r, st in enumerate(stages):
        pid = _stage_meta(tr, r)
        placed, _ = interleaved_one_f_one_b(st["phi"], slot, c, p, v)
        ops = placed[r]
        used = max(off + dur for _, _, _, off, dur in st["backward"]) / v
        shift = max(0.0, (slot - st["phi"]) / v - used)
        ff = fb = None
        for kind, j, i, start in ops:
            base = start if kind == "F" else start + shift
            for tid, label, cat, off, dur in st["forward" if kind == "F" else "backward"]:
                tr.span(pid, tid, f"{label} {i}.{j}", cat, base + off / v, dur / v,
                        microbatch=i, chunk=j, virtual_stage=j * p + r + 1, stage=r + 1)
            if kind == "F" and ff is None:
                ff = start + next(off for _, _, cat, off, _ in st["forward"]
                                  if cat == "forward") / v
            if kind == "B" and fb is None:
                fb = base + next(off for _, _, cat, off, _ in st["backward"]
                                 if cat == "backward") / v
        first_f.append(ff or 0.0)
        first_b.append(fb or 0.0)
    return first_f, first_b


def _draw_one_f_one_b(tr, stages, slot, c, p):
    """Draw plain 1F1B (:func:`one_f_one_b`); returns each stage's first forward and first
    backward computation starts (seconds)."""
    order, fstart, bstart = one_f_one_b([s["phi"] for s in stages], slot, c)
    first_f, first_b = [], []
    for r, st in enumerate(stages):
        pid = _stage_meta(tr, r)
        # Forward work starts with its window, backward work ends with its window (the
        # slack before it is the wait for the gradient; module docstring).
        used = max(off + dur for _, _, _, off, dur in st["backward"])
        shift = max(0.0, (slot - st["phi"]) - used)
        for kind, i in order[r]:
            base = fstart[r][i] if kind == "F" else bstart[r][i] + shift
            for tid, label, cat, off, dur in st["forward" if kind == "F" else "backward"]:
                tr.span(pid, tid, f"{label} {i}", cat, base + off, dur, microbatch=i, stage=r + 1)
        fw_off = next(off for tid, lab, cat, off, dur in st["forward"] if cat == "forward")
        bw_off = shift + next(off for tid, lab, cat, off, dur in st["backward"]
                              if cat == "backward")
        first_f.append(fstart[r][0] + fw_off if c else 0.0)
        first_b.append(bstart[r][0] + bw_off if c else 0.0)
    return first_f, first_b


def write(path, model, arch="tpuv4", **plan) -> dict:
    """Write :func:`events` (same arguments) as JSON to ``path``; returns the trace's
    summary (``otherData["phaze"]``). ``OSError`` names the path when it cannot be
    written."""
    trace = events(model, arch, **plan)
    text = json.dumps(trace, separators=(",", ":"))
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise output_error(exc, f"cannot write the trace to {str(path)!r}") from None
    return trace["otherData"]["phaze"]


_plan.keyword_signature(events, _plan.STRATEGY)
