"""Graph preparation for ``phaze.schedule`` (per graph, cached): cut operators and the
segments between them, local CSR predecessor/successor lists, widest antichains of
tensor-core and vector-core users, reachability, content hashes (docs/design.md §2.5).

Layer graphs have tens of operators, so plain Python (and dense boolean matrices) is
fast enough here: a transformer block takes about 1-2 ms, once per distinct graph.
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import _config
from .._cache import Memo
from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR, OpGraph


class _Prepared:
    """Operators reordered into segments with local CSR predecessor/successor lists."""

    __slots__ = ("perm", "seg_ptr", "seg_wtc", "seg_wvc", "opinfo", "reach", "pred_ptr", "pred_idx", "succ_ptr", "succ_idx", "kind",
                 "need_tc", "need_vc", "local_preds")


#: Prepared graphs by (content hash, split), at most ``_config.SCHEDULE_PREP_CACHE_SIZE``.
_PREP_CACHE = Memo(lambda: _config.SCHEDULE_PREP_CACHE_SIZE, name="schedule.prepare")
# OpGraph is immutable (read-only arrays), so its content hash is computed once per object.
_HASHES: "weakref.WeakKeyDictionary[OpGraph, str]" = weakref.WeakKeyDictionary()


def _graph_hash(g: OpGraph) -> str:
    h = _HASHES.get(g)
    if h is None:
        h = g.content_hash()
        _HASHES[g] = h
    return h


def _prepare(g: OpGraph, split: bool = True) -> _Prepared:
    """``g`` prepared for the kernels (cached by content): with ``split``, cut at its
    cut operators into segments; else one segment."""
    return _PREP_CACHE.get_or_compute((_graph_hash(g), split), lambda: _prepare_now(g, split))


def _prepare_now(g: OpGraph, split: bool) -> _Prepared:
    """The work of :func:`_prepare`, uncached."""
    n = g.n_ops
    order = np.asarray(g.order, dtype=np.int64)
    # ancestors as a boolean matrix (layer graphs have tens of operators)
    anc = np.zeros((n, n), dtype=bool)
    for j in order:
        for p in g.preds(j):
            anc[j] |= anc[p]
            anc[j, p] = True
    if split:
        n_anc = anc.sum(axis=1)
        n_desc = anc.sum(axis=0)
        is_cut = (n_anc + n_desc) == n - 1
    else:
        is_cut = np.zeros(n, dtype=bool)
    seg_ptr = [0]
    for pos, op in enumerate(order):
        if is_cut[op]:
            if seg_ptr[-1] != pos:
                seg_ptr.append(pos)
            seg_ptr.append(pos + 1)
    if seg_ptr[-1] != n:
        seg_ptr.append(n)
    seg_of = np.empty(n, dtype=np.int64)
    local = np.empty(n, dtype=np.int64)
    for s in range(len(seg_ptr) - 1):
        for q in range(seg_ptr[s], seg_ptr[s + 1]):
            seg_of[order[q]] = s
            local[order[q]] = q - seg_ptr[s]
    preds_q = [[int(local[p]) for p in g.preds(op) if seg_of[p] == seg_of[op]] for op in order]
    succs_q = [[] for _ in range(n)]
    for q, op in enumerate(order):
        s = seg_of[op]
        for lp in preds_q[q]:
            succs_q[seg_ptr[s] + lp].append(int(local[op]))
    prep = _Prepared()
    prep.perm = order
    prep.seg_ptr = np.array(seg_ptr, dtype=np.int64)
    prep.pred_ptr = np.cumsum([0] + [len(p) for p in preds_q]).astype(np.int64)
    prep.pred_idx = np.array([x for p in preds_q for x in p], dtype=np.int64)
    prep.succ_ptr = np.cumsum([0] + [len(s) for s in succs_q]).astype(np.int64)
    prep.succ_idx = np.array([x for s in succs_q for x in s], dtype=np.int64)
    prep.kind = np.ascontiguousarray(g.kind[order], dtype=np.int64)
    prep.need_tc = bool(np.any((g.kind == KIND_GEMM) | (g.kind == KIND_FUSED)))
    prep.need_vc = bool(np.any((g.kind == KIND_VECTOR) | (g.kind == KIND_FUSED)))
    prep.local_preds = preds_q
    # widest antichains of TC users and VC users per segment (for the energy bound)
    uses_tc = (g.kind == KIND_GEMM) | (g.kind == KIND_FUSED)
    uses_vc = (g.kind == KIND_VECTOR) | (g.kind == KIND_FUSED)
    wtc, wvc = [], []
    for s in range(len(seg_ptr) - 1):
        ops = order[seg_ptr[s]:seg_ptr[s + 1]]
        wtc.append(_widest_antichain([o for o in ops if uses_tc[o]], anc))
        wvc.append(_widest_antichain([o for o in ops if uses_vc[o]], anc))
    prep.seg_wtc = np.array(wtc, dtype=np.int64)
    # per operator: widest antichains of TC / VC users unordered with it (in its segment),
    # and whether a collective is unordered with no compute operator (chain-energy bound)
    opinfo = np.zeros((n, 3), dtype=np.int64)
    compute = g.kind != KIND_COLLECTIVE
    for s in range(len(seg_ptr) - 1):
        ops = order[seg_ptr[s]:seg_ptr[s + 1]]
        for q, i in enumerate(ops):
            free = [o for o in ops if o != i and not anc[o, i] and not anc[i, o]]
            opinfo[seg_ptr[s] + q, 0] = _widest_antichain([o for o in free if uses_tc[o]], anc)
            opinfo[seg_ptr[s] + q, 1] = _widest_antichain([o for o in free if uses_vc[o]], anc)
            opinfo[seg_ptr[s] + q, 2] = int(g.kind[i] == KIND_COLLECTIVE
                                            and not any(compute[o] for o in free))
    prep.opinfo = opinfo
    # reach[q, r]: the operator at position q precedes the one at r (same segment)
    reach = np.zeros((n, n), dtype=np.uint8)
    for s in range(len(seg_ptr) - 1):
        for q in range(seg_ptr[s], seg_ptr[s + 1]):
            for r in range(seg_ptr[s], seg_ptr[s + 1]):
                reach[q, r] = anc[order[r], order[q]]
    prep.reach = reach
    prep.seg_wvc = np.array(wvc, dtype=np.int64)
    return prep


def _widest_antichain(ops, anc) -> int:
    """Most operators of ``ops`` that are pairwise unordered (Dilworth: |ops| minus a
    maximum matching of the comparability graph); ``anc[j, i]``: i precedes j."""
    match_of = {}

    def augment(u, seen):
        for v in ops:
            if anc[v, u] and v not in seen:
                seen.add(v)
                if v not in match_of or augment(match_of[v], seen):
                    match_of[v] = u
                    return True
        return False

    return len(ops) - sum(1 for u in ops if augment(u, set()))
