"""The driver of ``phaze.schedule``: input checks, the memo, and the public entry points
``schedule_layer``, ``schedule_many``, ``lower_bound``, ``list_schedule``,
``milp_schedule`` and ``layer_lower_bounds`` (docs/design.md §2.5); the package face
re-exports them.

The compiled work is in ``_solve`` (one chip, one layer; a range of architectures);
this module orders operators into segments (``_prepare``), gathers the distinct
instances of a sweep, runs ranges of them on threads (the kernels release the GIL) and
hands parts still outside the gap to the MILP (``_milp``).

Tunables are read from ``phaze._config`` at call time (a keyword left at ``None``
means "the configured value"), so a changed setting takes effect without a re-import.
"""
from __future__ import annotations

import queue
import time
from dataclasses import dataclass

import numpy as np

from .. import _config
from .._cache import Memo
from .._threads import kernel_threads
from .._validate import finite_nonneg_array, nonneg_float, one_of
from . import _milp
from ._bnb import _BNB_TABLE_MAX_BUCKETS, _BNB_TABLE_WAYS, _bnb_table
from ._bounds import _layer_lower_bounds_kernel, _segment_bound, _strong_bound
from ._inputs import check_graph, check_total, gap_arg, layer_inputs
from ._list import _list_schedule
from ._prepare import _graph_hash, _prepare
from ._solve import _solve, _solve_range, _status
from ._status import _REL_EQ, STATUS_NAMES

#: An empty branch-and-bound table: ``_solve`` allocates a real one only when a search
#: runs (most ``schedule_layer`` calls need none).
_NO_TABLE = (np.empty((0, _BNB_TABLE_WAYS), np.int64), np.empty((0, _BNB_TABLE_WAYS)),
             np.empty((0, _BNB_TABLE_WAYS)), np.empty((0, _BNB_TABLE_WAYS, 0)),
             np.empty((0, _BNB_TABLE_WAYS, 0), np.int8), np.empty(0, np.int64))


def _search_limits():
    """The compiled pipeline's tunables, read now: (largest part solved exactly by branch
    and bound, its node limit, mode-search rounds, placements on a part still open)."""
    return (_config.SCHEDULE_EXACT_MAX_OPS, _config.SCHEDULE_BNB_NODE_LIMIT,
            _config.SCHEDULE_MODE_SEARCH_ROUNDS, _config.SCHEDULE_OPEN_PART_NODES)


@dataclass(frozen=True, eq=False)
class Schedule:
    """One layer's schedule on one chip.

    makespan, lower_bound: seconds (lower_bound is the best bound proved);
    starts: float64 (n_ops,) start times in seconds; modes: int8 (n_ops,), 0 one core,
    1 intra-op (collectives 0); status: one of ``STATUS_NAMES`` (meanings in ``_status``);
    message: what the MILP solver said when one ran (HiGHS's model-status text, per part
    as "part k: ..." when several parts were solved, or why it failed), else ""."""

    makespan: float
    lower_bound: float
    starts: np.ndarray
    modes: np.ndarray
    status: str
    message: str = ""

    @property
    def gap(self) -> float:
        """(makespan − lower_bound) / makespan, 0 for an empty makespan."""
        if self.makespan <= 0:
            return 0.0
        return max(0.0, (self.makespan - self.lower_bound) / self.makespan)

    def finish(self, single, intra) -> np.ndarray:
        """Finish times (seconds) given the latencies the schedule was made for."""
        single = np.asarray(single, dtype=np.float64).reshape(-1)
        intra = np.asarray(intra, dtype=np.float64).reshape(-1)
        return self.starts + np.where(self.modes == 1, intra, single)


def _status_name(makespan, lb, optimal, gap):
    return STATUS_NAMES[_status(makespan, lb, optimal, gap)]


def _freeze(starts, modes):
    starts = np.ascontiguousarray(starts, dtype=np.float64)
    modes = np.ascontiguousarray(modes, dtype=np.int8)
    starts.setflags(write=False)
    modes.setflags(write=False)
    return starts, modes


# ---------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------
def lower_bound(op_graph, single, intra, num_tc, num_vc) -> float:
    """A proven lower bound on the makespan (seconds), summed over the parts between cut
    operators; per part the max of

    * the critical path with every operator at its faster mode;
    * the link's work (collectives one at a time);
    * chip energy: each operator's least (share of the chip × duration), a one-core
      operator weighing lam/min(num_tc, widest TC antichain) per TC and
      (1 − lam)/min(num_vc, widest VC antichain) per VC, an intra-op one 1; lam = 1 and
      lam = 0 give (at least) the per-type work bounds Σ min(single, n·intra)/n;
    * the same energy with one chain of operators weighted up to what the operators
      unordered with them leave free;
    * for each operator, bounds on the time before it (ancestors' energy, recursively
      through collectives) plus its own duration plus the time after it;
    * with a single busy VC (or TC): the busy type's total time plus what the other
      type's operators cannot overlap;
    * any chain of operators' fastest durations plus, for each window between
      consecutive chain operators, its members' energy or link work (the best chain by
      dynamic programming), and the same over the heaviest chain of VC (or TC) users
      with windows bounded by critical path, per-type work and link work;
    * the collectives' runs plus the energy run outside them, where an operator that
      can only usefully run intra-op fills at most one collective's run (whole), the
      best filling found exactly by dynamic programming.
    """
    ds, da, ntc, nvc = layer_inputs(op_graph, single, intra, num_tc, num_vc)
    prep = _prepare(op_graph)
    dsq, daq = ds[prep.perm], da[prep.perm]
    total = 0.0
    for s in range(len(prep.seg_ptr) - 1):
        b, e = prep.seg_ptr[s], prep.seg_ptr[s + 1]
        quick = _segment_bound(prep.kind[b:e], dsq[b:e], daq[b:e], prep.succ_ptr[b:e + 1],
                                  prep.succ_idx, ntc, nvc, prep.seg_wtc[s], prep.seg_wvc[s])
        strong = _strong_bound(prep.kind[b:e], dsq[b:e], daq[b:e], prep.pred_ptr[b:e + 1],
                                  prep.pred_idx, prep.succ_ptr[b:e + 1], prep.succ_idx,
                                  prep.reach[b:e, b:e], ntc, nvc, prep.seg_wtc[s], prep.seg_wvc[s],
                                  prep.opinfo[b:e], np.empty(e - b), np.empty(e - b))
        total += max(quick, strong)
    return float(total)


def layer_lower_bounds(op_graph, single, intra, num_tc, num_vc) -> np.ndarray:
    """Seconds per architecture that no schedule of ``op_graph`` can beat, from the
    latencies alone (critical path of the faster modes; tensor-core, vector-core and link
    work over their capacities). Cheaper than :func:`schedule_many`; the search prunes
    with it. ``single``/``intra`` are (n_ops, n_archs) seconds, ``num_tc``/``num_vc`` per
    architecture."""
    return _layer_lower_bounds_kernel(
        np.ascontiguousarray(op_graph.kind, dtype=np.int64),
        np.ascontiguousarray(op_graph.pred_ptr, dtype=np.int64),
        np.ascontiguousarray(op_graph.pred_idx, dtype=np.int64),
        np.ascontiguousarray(op_graph.order, dtype=np.int64),
        np.ascontiguousarray(single, dtype=np.float64),
        np.ascontiguousarray(intra, dtype=np.float64),
        np.ascontiguousarray(num_tc, dtype=np.float64),
        np.ascontiguousarray(num_vc, dtype=np.float64))


def list_schedule(op_graph, single, intra, num_tc, num_vc, *, gap=None) -> Schedule:
    """List schedule of the whole graph: operators by critical-path priority, started as
    early as capacity allows, both modes tried (earliest finish) plus fixed-mode passes;
    the best pass is returned with :func:`lower_bound`. Always valid."""
    gap = _config.SCHEDULE_GAP if gap is None else gap_arg(gap)
    ds, da, ntc, nvc = layer_inputs(op_graph, single, intra, num_tc, num_vc)
    prep = _prepare(op_graph, split=False)
    n = op_graph.n_ops
    starts_q = np.empty(n)
    modes_q = np.empty(n, np.int8)
    ms = _list_schedule(prep.kind, ds[prep.perm], da[prep.perm], prep.pred_ptr, prep.pred_idx,
                           prep.succ_ptr, prep.succ_idx, prep.reach, ntc, nvc, 0.0, starts_q, modes_q)
    lb = min(lower_bound(op_graph, ds, da, ntc, nvc), ms)
    starts = np.empty(n)
    modes = np.empty(n, np.int8)
    starts[prep.perm] = starts_q
    modes[prep.perm] = modes_q
    starts, modes = _freeze(starts, modes)
    optimal = ms - lb <= _REL_EQ * ms
    return Schedule(float(ms), float(lb), starts, modes, _status_name(ms, lb, optimal, gap))


def milp_schedule(op_graph, single, intra, num_tc, num_vc, *, gap=None, time_limit=None,
                  initial: Schedule | None = None) -> Schedule:
    """Exact MILP (HiGHS, one thread, nothing printed) over the whole graph, started from
    ``initial`` (default: the list schedule). ``gap`` is HiGHS's ``mip_rel_gap``;
    ``time_limit`` in seconds. Status "optimal" when HiGHS proves optimality (gap ≤ 1e-9),
    "certified" within ``gap``, else "limit"."""
    gap = _config.SCHEDULE_GAP if gap is None else gap_arg(gap)
    time_limit = _config.SCHEDULE_TIME_LIMIT_S if time_limit is None else nonneg_float(
        "time_limit", time_limit)
    ds, da, ntc, nvc = layer_inputs(op_graph, single, intra, num_tc, num_vc)
    if initial is None:
        initial = list_schedule(op_graph, ds, da, ntc, nvc, gap=gap)
    prep = _prepare(op_graph, split=False)
    perm = prep.perm
    lb0 = max(initial.lower_bound, 0.0)
    try:
        res = _milp.solve(
            prep.kind[:], ds[perm], da[perm], prep.local_preds, ntc, nvc,
            np.asarray(initial.starts)[perm], np.asarray(initial.modes)[perm], lb0, gap, time_limit)
    except Exception as exc:  # pragma: no cover - solver failure is reported, not raised
        return Schedule(initial.makespan, initial.lower_bound, initial.starts, initial.modes, "error",
                        _failure(exc))
    if res.status == "error":
        return Schedule(initial.makespan, initial.lower_bound, initial.starts, initial.modes, "error",
                        res.message)
    starts = np.empty(len(perm))
    modes = np.empty(len(perm), np.int8)
    starts[perm] = res.starts
    modes[perm] = res.modes
    starts, modes = _freeze(starts, modes)
    return Schedule(float(res.makespan), float(res.lower_bound), starts, modes, res.status,
                    res.message)


def _failure(exc) -> str:
    """The message of a MILP solve that raised ``exc``."""
    return f"HiGHS failed: {type(exc).__name__}: {exc}"


#: Schedules by a content hash of (graph, latencies, counts, options), at most
#: ``_config.SCHEDULE_MEMO_SIZE`` (least recently used dropped first).
_MEMO = Memo(lambda: _config.SCHEDULE_MEMO_SIZE, name="schedule.layer")


def clear_memo() -> None:
    """Forget every memoised :func:`schedule_layer` result."""
    _MEMO.clear()


def schedule_layer(op_graph, single, intra, num_tc, num_vc, *, gap=None,
                   method="auto", time_limit=None) -> Schedule:
    """Schedule one layer's operator DAG on one chip (latencies in seconds, per operator).

    ``method``: "auto" (cut-operator split, list schedules, exact branch and bound on small
    parts, MILP only on parts still outside ``gap``), "list" or "milp". ``gap`` (default
    ``_config.SCHEDULE_GAP``) is the relative gap accepted as certified; ``time_limit``
    (seconds, default ``_config.SCHEDULE_TIME_LIMIT_S``) bounds the MILP. Results are
    memoised by a content hash of (graph, latencies, counts, options)."""
    gap = _config.SCHEDULE_GAP if gap is None else gap_arg(gap)
    time_limit = _config.SCHEDULE_TIME_LIMIT_S if time_limit is None else nonneg_float(
        "time_limit", time_limit)
    method = one_of("method", method, ("auto", "list", "milp"))
    ds, da, ntc, nvc = layer_inputs(op_graph, single, intra, num_tc, num_vc)
    key = (_graph_hash(op_graph), ds.tobytes(), da.tobytes(), ntc, nvc, gap, method, time_limit)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    if method == "list":
        result = list_schedule(op_graph, ds, da, ntc, nvc, gap=gap)
    elif method == "milp":
        result = milp_schedule(op_graph, ds, da, ntc, nvc, gap=gap, time_limit=time_limit)
    else:
        result = _auto(op_graph, ds, da, ntc, nvc, gap, time_limit)
    return _MEMO.put(key, result)


def _auto(op_graph, ds, da, ntc, nvc, gap, time_limit) -> Schedule:
    prep = _prepare(op_graph)
    perm = prep.perm
    n = op_graph.n_ops
    nseg = len(prep.seg_ptr) - 1
    dsq = np.ascontiguousarray(ds[perm])
    daq = np.ascontiguousarray(da[perm])
    starts_q = np.empty(n)
    modes_q = np.empty(n, np.int8)
    seg_ub = np.empty(nseg)
    seg_lb = np.empty(nseg)
    ms, lb, optimal = _solve(prep.kind, dsq, daq, prep.seg_ptr, prep.seg_wtc, prep.seg_wvc,
                             prep.opinfo, prep.reach, prep.pred_ptr, prep.pred_idx, prep.succ_ptr,
                             prep.succ_idx, ntc, nvc, gap, *_search_limits(), starts_q, modes_q,
                             seg_ub, seg_lb, _NO_TABLE)
    status, message = None, ""
    if ms - lb > gap * ms and time_limit > 0:
        ms, lb, optimal, status, message = _improve_with_milp(
            prep, dsq, daq, ntc, nvc, gap, time_limit, starts_q, modes_q, seg_ub, seg_lb)
    starts = np.empty(n)
    modes = np.empty(n, np.int8)
    starts[perm] = starts_q
    modes[perm] = modes_q
    starts, modes = _freeze(starts, modes)
    if status is None:
        status = _status_name(ms, lb, optimal, gap)
    return Schedule(float(ms), float(lb), starts, modes, status, message)


def _improve_with_milp(prep, dsq, daq, ntc, nvc, gap, time_limit, starts_q, modes_q, seg_ub, seg_lb):
    """MILP on the parts whose gap is still open (widest first), within ``time_limit``.
    Returns (makespan, lower bound, optimal, "error" or None, the solver's messages)."""
    deadline = time.monotonic() + time_limit
    seg_ptr = prep.seg_ptr
    nseg = len(seg_ptr) - 1
    offsets = np.concatenate([[0.0], np.cumsum(seg_ub)[:-1]])
    errored = False
    messages = []
    for s in sorted(range(nseg), key=lambda s: -(seg_ub[s] - seg_lb[s])):
        total_ub, total_lb = seg_ub.sum(), seg_lb.sum()
        if total_ub - total_lb <= gap * total_ub:
            break
        if seg_ub[s] - seg_lb[s] <= _REL_EQ * seg_ub[s]:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        b, e = seg_ptr[s], seg_ptr[s + 1]
        # the part's own gap target: what keeps the whole within ``gap``
        slack = gap * total_ub - (total_ub - total_lb) + (seg_ub[s] - seg_lb[s])
        part_gap = min(max(slack / seg_ub[s], 0.0), gap) if seg_ub[s] > 0 else gap
        try:
            res = _milp.solve(
                prep.kind[b:e], dsq[b:e], daq[b:e], prep.local_preds[b:e], ntc, nvc,
                starts_q[b:e] - offsets[s], modes_q[b:e], seg_lb[s], part_gap, left)
        except Exception as exc:  # pragma: no cover - solver failure: keep the list schedule
            errored = True
            messages.append((s, _failure(exc)))
            continue
        messages.append((s, res.message))
        if res.status == "error":  # the solver failed: keep the list schedule
            errored = True
            continue
        if res.makespan <= seg_ub[s]:
            starts_q[b:e] = res.starts + offsets[s]
            modes_q[b:e] = res.modes
            seg_ub[s] = res.makespan
        seg_lb[s] = max(seg_lb[s], res.lower_bound if not res.proved else seg_ub[s])
    # re-lay the parts end to end with their (possibly shorter) makespans
    offset = 0.0
    for s in range(nseg):
        b, e = seg_ptr[s], seg_ptr[s + 1]
        starts_q[b:e] = starts_q[b:e] - offsets[s] + offset
        offset += seg_ub[s]
    ms, lb = float(seg_ub.sum()), float(seg_lb.sum())
    optimal = bool(np.all(seg_ub - seg_lb <= _REL_EQ * seg_ub))
    status = "error" if errored and ms - lb > gap * ms else None
    if nseg == 1:
        message = "; ".join(text for _, text in messages)
    else:
        message = "; ".join(f"part {s}: {text}" for s, text in messages)
    return ms, lb, optimal, status, message


def schedule_many(op_graph, single, intra, num_tc, num_vc, *, gap=None):
    """Schedule one graph on many architectures (compiled, parallel over architectures).

    ``single``/``intra``: float64 (n_ops, n_archs) seconds; ``num_tc``/``num_vc``: int
    (n_archs,). Returns ``(makespan, lower_bound, status)``: float64 seconds (each makespan
    is achieved by a valid schedule), float64 proven bounds, int8 status codes
    (``STATUS_NAMES[code]``: 0 optimal, 1 certified, 2 limit, 3 infeasible). No MILP is
    run here: an architecture not certified within ``gap`` keeps code 2 and its proven
    gap (makespan − lower_bound)/makespan. Architectures with zero cores of a type the
    graph uses are infeasible (code 3, makespan and bound +inf)."""
    gap = _config.SCHEDULE_GAP if gap is None else gap_arg(gap)
    check_graph(op_graph)
    n = op_graph.n_ops
    single = finite_nonneg_array("single", single)
    intra = finite_nonneg_array("intra", intra)
    if single.ndim != 2 or single.shape[0] != n:
        raise ValueError(f"single must have shape ({n}, n_archs), got {single.shape}")
    if intra.shape != single.shape:
        raise ValueError(f"intra must have the shape of single {single.shape}, got {intra.shape}")
    check_total(single, intra, axis=0)
    n_archs = single.shape[1]
    ntc = finite_nonneg_array("num_tc", num_tc, dtype=np.int64).reshape(-1)
    nvc = finite_nonneg_array("num_vc", num_vc, dtype=np.int64).reshape(-1)
    if ntc.shape != (n_archs,) or nvc.shape != (n_archs,):
        raise ValueError(f"num_tc and num_vc must have shape ({n_archs},) (one per architecture)")
    prep = _prepare(op_graph)
    # Architectures that differ only in knobs the latencies do not see (HBM capacity,
    # area, network) are the same scheduling instance: solve each distinct one once.
    first, inverse = _distinct_instances(single, intra, ntc, nvc)
    rows_cols = np.ix_(prep.perm, first)  # one gather: operators in segment order, distinct columns
    sq = np.ascontiguousarray(single[rows_cols])
    iq = np.ascontiguousarray(intra[rows_cols])
    ntc_u = np.ascontiguousarray(ntc[first])
    nvc_u = np.ascontiguousarray(nvc[first])
    n_distinct = first.shape[0]
    makespan = np.empty(n_distinct)
    lb = np.empty(n_distinct)
    status = np.empty(n_distinct, np.int8)
    args = (prep.kind, sq, iq, prep.seg_ptr, prep.seg_wtc, prep.seg_wvc, prep.opinfo, prep.reach,
            prep.pred_ptr, prep.pred_idx, prep.succ_ptr, prep.succ_idx, ntc_u, nvc_u, gap,
            *_search_limits(), makespan, lb, status)
    # The kernel releases the GIL: disjoint architecture ranges run on threads.
    threads = max(1, min(kernel_threads(), n_distinct // 64 or 1))
    if threads == 1:
        _solve_range(*args, 0, n_distinct, _bnb_table(n, _BNB_TABLE_MAX_BUCKETS))
    else:
        from concurrent.futures import ThreadPoolExecutor

        # one branch-and-bound table per thread, handed from chunk to chunk
        tables = queue.SimpleQueue()
        for _ in range(threads):
            tables.put(_bnb_table(n, _BNB_TABLE_MAX_BUCKETS))

        def run(ab):
            table = tables.get()
            try:
                _solve_range(*args, ab[0], ab[1], table)
            finally:
                tables.put(table)

        # interleaved small chunks balance the load (hard architectures cluster)
        chunk = max(16, n_distinct // (threads * _config.SCHEDULE_CHUNKS_PER_THREAD))
        bounds = [(a, min(a + chunk, n_distinct)) for a in range(0, n_distinct, chunk)]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(run, bounds))
    return makespan[inverse], lb[inverse], status[inverse]


def _distinct_instances(single, intra, ntc, nvc):
    """Columns of (``single``, ``intra``, ``ntc``, ``nvc``) that are bit-for-bit equal
    describe the same scheduling instance. Returns ``(first, inverse)``: the index of one
    representative per distinct instance, and for every architecture the position of its
    representative in ``first``."""
    n_ops, n_archs = single.shape
    if n_archs < 2:
        return np.arange(n_archs), np.arange(n_archs)
    rows = np.empty((n_archs, 2 * n_ops + 2))
    rows[:, :n_ops] = single.T
    rows[:, n_ops:2 * n_ops] = intra.T
    rows[:, -2] = ntc
    rows[:, -1] = nvc
    rows = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()  # one key per row
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)
