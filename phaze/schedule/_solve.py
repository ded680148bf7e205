"""One layer on one chip, compiled: parts between cut operators, bounds, list schedules,
mode exclusion, mode search, energetic reasoning and branch and bound, in that order;
and the same over a range of architectures (docs/design.md §2.5).

The graph arrives split into *segments* (see ``_prepare``): maximal groups between cut
operators (operators comparable with every other one). Every operator of a segment
waits for every operator of the segment before, so the optimal makespan is the sum of
the segments' optima and each segment is scheduled on its own.

Every function here runs (slowly) under ``NUMBA_DISABLE_JIT=1``.
"""
import numpy as np
from numba import njit

from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR
from ._bnb import _BNB_TABLE_MAX_BUCKETS, _bnb_search, _bnb_table, _cert_level
from ._bounds import _energetic_infeasible, _forced_bound, _segment_bound, _strong_bound
from ._list import _list_schedule, _mode_search
from ._status import _REL_EQ, STATUS_INFEASIBLE, _status


@njit(cache=True, nogil=True)
def _solve(kind, ds, da, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr, pred_idx, succ_ptr, succ_idx, ntc,
           nvc, gap, exact_max, node_limit, mode_rounds, open_nodes, starts, modes, seg_ub, seg_lb,
           table):
    """Schedule one graph (operators in segment order) on one chip.

    Returns (makespan, lower_bound, optimal). ``starts`` are absolute times; each
    segment starts when the previous one ends. ``table``: ``_bnb_table(len(kind), ...)``
    (allocated here at full size on the first search if it has no rows)."""
    tkey, tlast, tcmax, tfin, tmode, tnext = table
    nseg = seg_ptr.shape[0] - 1
    total_lb = 0.0
    total_ub = 0.0
    for s in range(nseg):
        b = seg_ptr[s]
        e = seg_ptr[s + 1]
        lb = _segment_bound(kind[b:e], ds[b:e], da[b:e], succ_ptr[b:e + 1], succ_idx, ntc, nvc,
                            seg_wtc[s], seg_wvc[s])
        # a part within the gap on its own keeps the whole within the gap
        target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
        ub = _list_schedule(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                            succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc, target,
                            starts[b:e], modes[b:e], 2)
        if ub > target:
            head = np.empty(e - b)
            tail = np.empty(e - b)
            strong = _strong_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                   succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                   seg_wtc[s], seg_wvc[s], opinfo[b:e], head, tail)
            if strong > lb:
                lb = strong
                target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
            if ub > target:
                ub = _list_schedule(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                    succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                    target, starts[b:e], modes[b:e])
            if ub > target:
                # Exclude the modes that cannot appear in a schedule shorter than ub
                # (may prove ub optimal), then shorter than ub_cert = ub (1 - gap):
                # proving no schedule beats ub_cert certifies ub, and the lower ub_cert
                # excludes more modes. head/tail of the ub-restricted instance stay
                # valid for every schedule shorter than ub_cert <= ub.
                ub_cert = _cert_level(ub, gap, 4.0)
                lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                   succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                   seg_wtc[s], seg_wvc[s], opinfo[b:e], ub, lb, ub_cert,
                                   head, tail)
                if lb < ub_cert:
                    lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                                       succ_ptr[b:e + 1], succ_idx, reach[b:e, b:e], ntc, nvc,
                                       seg_wtc[s], seg_wvc[s], opinfo[b:e], ub_cert, lb,
                                       ub_cert, head, tail)
                if lb < ub_cert:
                    # still open: search the modes (parallel generation), and if that
                    # shortens the schedule, exclude modes against the new ub (head and
                    # tail hold for every schedule shorter than the old ub_cert)
                    target = lb * (1.0 + _REL_EQ) / (1.0 - gap)
                    better = _mode_search(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1],
                                          succ_ptr[b:e + 1], succ_idx, ntc, nvc, ub, target,
                                          starts[b:e], modes[b:e], mode_rounds)
                    if better < ub:
                        ub = better
                        cert = _cert_level(ub, gap, 4.0)
                        if lb < cert and cert < ub_cert:
                            lb = _forced_bound(kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1],
                                               pred_idx, succ_ptr[b:e + 1], succ_idx,
                                               reach[b:e, b:e], ntc, nvc, seg_wtc[s],
                                               seg_wvc[s], opinfo[b:e], cert, lb, cert,
                                               head, tail)
                    # energetic reasoning against just above ub (1 - gap): no schedule
                    # that short certifies ub (head and tail hold below the old ub_cert)
                    cert = _cert_level(ub, gap, 2.0)
                    if lb < cert and cert < ub_cert and _energetic_infeasible(
                            kind[b:e], ds[b:e], da[b:e], head, tail, cert,
                            min(ntc, seg_wtc[s]), min(nvc, seg_wvc[s])):
                        lb = cert
                    if lb < cert and cert < ub_cert and open_nodes > 0:
                        # last resort: a bounded exact search below just above
                        # ub (1 - gap) (finds shorter schedules on the way)
                        if tkey.shape[0] == 0:
                            tkey, tlast, tcmax, tfin, tmode, tnext = _bnb_table(
                                kind.shape[0], _BNB_TABLE_MAX_BUCKETS)
                        ub, proven, exhausted = _bnb_search(
                            kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx,
                            succ_ptr[b:e + 1], succ_idx, ntc, nvc, seg_wtc[s], seg_wvc[s],
                            head, tail, ub, cert, gap,
                            open_nodes, starts[b:e], modes[b:e], tkey, tlast, tcmax, tfin, tmode, tnext)
                        if exhausted and proven > lb:
                            lb = proven
        if lb > ub:
            lb = ub  # float rounding only: ub is achieved, so the true bound is <= ub
        seg_lb[s] = lb
        seg_ub[s] = ub
        total_lb += lb
        total_ub += ub
    # Exact search on small segments, largest open gap first, until certified.
    tried = np.zeros(nseg, np.bool_)
    while total_ub - total_lb > gap * total_ub:
        pick = -1
        widest = 0.0
        for s in range(nseg):
            size = seg_ptr[s + 1] - seg_ptr[s]
            open_gap = seg_ub[s] - seg_lb[s]
            if (not tried[s] and size <= exact_max and open_gap > _REL_EQ * seg_ub[s]
                    and open_gap > widest):
                pick = s
                widest = open_gap
        if pick < 0:
            break
        b = seg_ptr[pick]
        e = seg_ptr[pick + 1]
        no_bound = np.zeros(e - b)
        if tkey.shape[0] == 0:
            tkey, tlast, tcmax, tfin, tmode, tnext = _bnb_table(kind.shape[0],
                                                                _BNB_TABLE_MAX_BUCKETS)
        best, proven, exhausted = _bnb_search(
            kind[b:e], ds[b:e], da[b:e], pred_ptr[b:e + 1], pred_idx, succ_ptr[b:e + 1], succ_idx,
            ntc, nvc, seg_wtc[pick], seg_wvc[pick], no_bound, no_bound, seg_ub[pick],
            seg_ub[pick], 0.0, node_limit,
            starts[b:e], modes[b:e], tkey, tlast, tcmax, tfin, tmode, tnext)
        total_ub += best - seg_ub[pick]
        seg_ub[pick] = best
        tried[pick] = True
        if exhausted:  # proven == best: nothing shorter exists
            total_lb += best - seg_lb[pick]
            seg_lb[pick] = best
    optimal = True
    offset = 0.0
    total_lb = 0.0  # re-summed in the makespan's order so that lb <= makespan in floats too
    for s in range(nseg):
        total_lb += seg_lb[s]
        b = seg_ptr[s]
        e = seg_ptr[s + 1]
        for i in range(b, e):
            starts[i] += offset
        offset += seg_ub[s]
        if seg_ub[s] - seg_lb[s] > _REL_EQ * seg_ub[s]:
            optimal = False
    return offset, total_lb, optimal


@njit(cache=True, nogil=True)
def _solve_range(kind, single, intra, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr,
                 pred_idx, succ_ptr, succ_idx, ntc, nvc, gap, exact_max, node_limit, mode_rounds,
                 open_nodes, makespan, lower_bound, status, first, stop, table):
    """``_solve`` for architectures ``first`` .. ``stop - 1`` (columns of ``single``/``intra``,
    rows already in segment order). Architectures lacking cores of a needed type are
    infeasible. ``table``: ``_bnb_table(len(kind), _BNB_TABLE_MAX_BUCKETS)``, one per thread (reused: the pages
    it touches are faulted in once). Releases the GIL: the caller runs disjoint ranges on
    threads."""
    n = kind.shape[0]
    need_tc = False
    need_vc = False
    for i in range(n):
        if kind[i] == KIND_GEMM or kind[i] == KIND_FUSED:
            need_tc = True
        if kind[i] == KIND_VECTOR or kind[i] == KIND_FUSED:
            need_vc = True
    nseg = seg_ptr.shape[0] - 1
    ds = np.empty(n)
    da = np.empty(n)
    starts = np.empty(n)
    modes = np.empty(n, np.int8)
    seg_ub = np.empty(nseg)
    seg_lb = np.empty(nseg)
    for a in range(first, stop):
        if (need_tc and ntc[a] < 1) or (need_vc and nvc[a] < 1):
            makespan[a] = np.inf
            lower_bound[a] = np.inf
            status[a] = STATUS_INFEASIBLE
            continue
        for i in range(n):
            ds[i] = single[i, a]
            da[i] = single[i, a] if kind[i] == KIND_COLLECTIVE else intra[i, a]
        ms, lb, opt = _solve(kind, ds, da, seg_ptr, seg_wtc, seg_wvc, opinfo, reach, pred_ptr,
                             pred_idx, succ_ptr, succ_idx, ntc[a], nvc[a], gap, exact_max,
                             node_limit, mode_rounds, open_nodes, starts, modes, seg_ub, seg_lb,
                             table)
        makespan[a] = ms
        lower_bound[a] = lb
        status[a] = _status(ms, lb, opt, gap)
