"""Compiled arithmetic of the training-step model (numba). Private: call
:func:`phaze.step.training_step` or :func:`phaze.step.best_plans`.

One definition of the step: ``training_step`` prices its layers in Python (``phaze.cost``)
and then calls :func:`step_time` and :func:`stage_memory` below for the breakdown; the
search kernel :func:`search_rows` calls the very same functions for every plan it keeps,
so the fixed-plan path and the search cannot drift. The model itself is documented in
``phaze/step.py``; the functions here are its literal transcription, in the same order of
floating-point operations (so the numbers are identical compiled and under
``NUMBA_DISABLE_JIT=1``, and identical to the pure-Python version they replaced).

Packed inputs (dense float64 / int64 arrays, no Python objects):

- ``lt`` (layer times of one (t, sequence parallel, flash) variant on one row, seconds):
  ``LT_*`` indices below — embedding / block / head forward and backward, the block's
  attention core (what selective recomputation re-runs), and one pipeline send of the
  boundary tensor inside a node / between nodes.
- ``rp`` (one row's collective parameters): ``RP_*`` — NCCL α parts (s), the η·bandwidth
  of the in-node link and of the network (bytes/s), η·HBM bandwidth (bytes/s), the kernel
  launch gap (s).
- ``ints`` (one variant's sizes, bytes): ``VI_*`` — parameter bytes of the embedding,
  block and head slices, bytes per element, the boundary tensor, the tied word embedding
  (elements), the block's stash under the recomputation mode, the embedding's and head's
  stashes, and the recomputation workspace.
- geometry of Megatron's rank layout (:func:`geometry`): per stage boundary a bit mask of
  the (between nodes?, receiver's tensor-parallel group spans 2 nodes?) cases that occur
  over the data-parallel index, per stage the nodes its data-parallel ring spans, the
  nodes of the embedding all-reduce and of the model-parallel group.
"""
import math

import numpy as np
from numba import njit

# Bytes per parameter (sheet §5.1): 16-bit weights, fp32 main gradients, Adam's fp32 state.
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPT_STATE_BYTES = 12

#: Recomputation modes as the kernels code them.
REC_NONE, REC_SELECTIVE, REC_FULL = 0, 1, 2

LT_EMB_F, LT_EMB_B, LT_BLK_F, LT_BLK_B, LT_BLK_CORE, LT_HEAD_F, LT_HEAD_B, LT_SEND_IN, \
    LT_SEND_NET = range(9)
N_LT = 9
RP_COLL, RP_LINK_STEP, RP_NET_STEP, RP_LINK_BW, RP_NET_BW, RP_HBM_BW, RP_LAUNCH = range(7)
N_RP = 7
VI_EMB_PB, VI_BLK_PB, VI_HEAD_PB, VI_E, VI_ACT, VI_WORD, VI_BLK_STASH, VI_EMB_STASH, \
    VI_HEAD_STASH, VI_WS = range(10)
N_VI = 10
#: Breakdown slots filled by :func:`step_time`.
BD_TOTAL, BD_PIPELINE, BD_STEADY, BD_BUBBLE, BD_DP, BD_EMB, BD_OPT, BD_SLOT, BD_F, BD_B, \
    BD_REC, BD_P2P, BD_M, BD_CRIT = range(14)
N_BD = 14
#: Memory slots filled by :func:`stage_memory` (bytes, except the count in flight).
MEM_WEIGHTS, MEM_GRADS, MEM_OPT, MEM_ACT, MEM_OTHER, MEM_WS, MEM_IN_FLIGHT, MEM_LAYER_STATE = \
    range(8)
N_MEM = 8


@njit(cache=True, nogil=True)
def ring_seconds(nbytes, n, nodes, passes, coll_latency_s, link_step_s, net_step_s, link_bw,
                 net_bw):
    """A ring collective of n ranks spanning ``nodes`` nodes that goes ``passes`` times
    round the ring (2: all-reduce, 1: all-gather or reduce-scatter), seconds; 0 for one
    rank. ``link_bw``/``net_bw``: η·bandwidth of each tier (bytes/s). phaze/step.py's
    module docstring gives the α–β form."""
    if n <= 1:
        return 0.0
    x = passes * (nodes - 1)
    alpha = coll_latency_s + (passes * (n - 1) - x) * link_step_s + x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + passes * (n - 1) / n * float(nbytes) / bw


@njit(cache=True, nogil=True)
def ring_rows(nbytes, n, passes, rp, node_size, out):
    """:func:`ring_seconds` of one collective over ranks 0..n−1 on every row (``rp`` (rows,
    N_RP), ``node_size`` (rows,)) into ``out`` (rows,)."""
    for k in range(out.shape[0]):
        nodes = (n - 1) // node_size[k] + 1
        out[k] = ring_seconds(nbytes, n, nodes, passes, rp[k, RP_COLL], rp[k, RP_LINK_STEP],
                              rp[k, RP_NET_STEP], rp[k, RP_LINK_BW], rp[k, RP_NET_BW])


@njit(cache=True, nogil=True)
def span_nodes(first, stride, count, node_size):
    """Distinct nodes of the ranks first + k·stride, k = 0..count−1 (increasing ranks: with
    stride ≤ node_size no node between the first and the last is skipped; with a larger
    stride every rank has a node of its own)."""
    if count <= 0:
        return 0
    if stride > node_size:
        return count
    return (first + (count - 1) * stride) // node_size - first // node_size + 1


@njit(cache=True, nogil=True)
def geometry(p, t, d, node_size, masks, dpn):
    """Megatron's rank layout (global rank = r·t·d + j·t + i) on nodes of ``node_size``.

    ``masks[a]`` (a < p − 1: boundary a → a + 1; a = p − 1: the interleaved wrap p − 1 → 0):
    bit 2·inter + wide is set when for some data-parallel index j the boundary's send
    crosses nodes for some tensor-parallel rank (inter) and the receiver's t ranks span two
    nodes (wide; t ≤ node_size). ``dpn[r]``: nodes of stage r's data-parallel ring (ranks
    r·t·d + j·t). Returns (nodes of the embedding all-reduce between ranks 0 and
    (p − 1)·t·d, nodes of the model-parallel group r·t·d + i).
    """
    td = t * d
    one_node = (p * td - 1) // node_size == 0
    for a in range(p):
        if one_node:
            masks[a] = 1
            continue
        b = a + 1 if a < p - 1 else 0
        mk = 0
        for j in range(d):
            sa = a * td + j * t
            sb = b * td + j * t
            inter = False
            for i in range(t):
                if (sa + i) // node_size != (sb + i) // node_size:
                    inter = True
                    break
            wide = (sb + t - 1) // node_size != sb // node_size
            mk |= 1 << ((2 if inter else 0) + (1 if wide else 0))
            if mk == 15:
                break
        masks[a] = mk
    for r in range(p):
        dpn[r] = span_nodes(r * td, t, d, node_size)
    emb_nodes = 1 if ((p - 1) * td) // node_size == 0 else 2
    mp_nodes = 0
    last = -1
    for r in range(p):
        lo = (r * td) // node_size
        hi = (r * td + t - 1) // node_size
        if lo <= last:
            lo = last + 1
        if hi >= lo:
            mp_nodes += hi - lo + 1
        if hi > last:
            last = hi
    return emb_nodes, mp_nodes


@njit(cache=True, nogil=True)
def stage_params(r, p, per_stage, ints):
    """Parameters of stage r's slice (the embedding on the first, the head on the last)."""
    n = per_stage * ints[VI_BLK_PB]
    if r == 0:
        n += ints[VI_EMB_PB]
    if r == p - 1:
        n += ints[VI_HEAD_PB]
    return n // ints[VI_E]


@njit(cache=True, nogil=True)
def stage_comm(r, p, v, pair_s):
    """Pipeline transfers of device r per microbatch: chunks c·p + r each receive from the
    previous virtual stage and send to the next (``pair_s[a]``: boundary a → a + 1, the
    wrap p − 1 → 0 at a = p − 1), in chunk order."""
    comm = 0.0
    for c in range(v):
        k = c * p + r
        if k > 0:
            comm += pair_s[(k - 1) % p]
        if k < p * v - 1:
            comm += pair_s[r]
    return comm


@njit(cache=True, nogil=True)
def step_time(p, t, d, v, m, n_layers, zero, ogr, rec_mode, sp, opt_bytes, opt_kernels, n_tiny,
              lt, rp, ints, masks, dpn, emb_nodes, mp_nodes, slots, bd):
    """The time of one iteration of a plan (phaze/step.py's model), seconds, into ``bd``
    (``BD_*``); ``slots`` (≥ p, 6) receives per stage: slot, forward, backward,
    recomputation, transfers, and the seconds of boundary a's crossing. Returns the total."""
    coll = rp[RP_COLL]
    lstep = rp[RP_LINK_STEP]
    nstep = rp[RP_NET_STEP]
    lbw = rp[RP_LINK_BW]
    nbw = rp[RP_NET_BW]
    per_stage = n_layers // p
    # -- one crossing per stage boundary (worst data-parallel index) ------------------
    g1 = 0.0
    g2 = 0.0
    if not sp:  # with SP the boundary tensor stays split over the t ranks: no gather
        g1 = ring_seconds(ints[VI_ACT], t, 1, 1, coll, lstep, nstep, lbw, nbw)
        g2 = ring_seconds(ints[VI_ACT], t, 2, 1, coll, lstep, nstep, lbw, nbw)
    for a in range(p):
        mk = masks[a]
        worst = 0.0
        for bit in range(4):
            if mk & (1 << bit):
                x = (lt[LT_SEND_NET] if bit >= 2 else lt[LT_SEND_IN]) + (g2 if bit & 1 else g1)
                if x > worst:
                    worst = x
        slots[a, 5] = worst
    full = rec_mode == REC_FULL
    crit = 0
    for r in range(p):
        f = per_stage * lt[LT_BLK_F]
        bw = per_stage * lt[LT_BLK_B]
        if r == 0:
            f += lt[LT_EMB_F]
            bw += lt[LT_EMB_B]
        if r == p - 1:
            f += lt[LT_HEAD_F]
            bw += lt[LT_HEAD_B]
        rec = 0.0
        if full:
            rec = per_stage * lt[LT_BLK_F]
        elif rec_mode == REC_SELECTIVE:
            rec = per_stage * lt[LT_BLK_CORE]
        comm = stage_comm(r, p, v, slots[:, 5])
        # ZeRO-3: each layer's parameters all-gathered before its forward, its backward
        # and (full recomputation) its recomputed forward; the embedding and head twice.
        extra = 0.0
        if zero >= 3 and d > 1:
            passes = 3 if full else 2
            e = ints[VI_E]
            blk = ring_seconds(WEIGHT_BYTES * (ints[VI_BLK_PB] // e) * d, d, dpn[r], 1, coll,
                               lstep, nstep, lbw, nbw)
            extra = passes * per_stage * blk
            if r == 0:
                extra += 2 * ring_seconds(WEIGHT_BYTES * (ints[VI_EMB_PB] // e) * d, d, dpn[r],
                                          1, coll, lstep, nstep, lbw, nbw)
            if r == p - 1:
                extra += 2 * ring_seconds(WEIGHT_BYTES * (ints[VI_HEAD_PB] // e) * d, d,
                                          dpn[r], 1, coll, lstep, nstep, lbw, nbw)
        if zero >= 2 and d > 1:
            # per-microbatch reduce-scatter of the gradients as the backward ends
            rs = ring_seconds(GRAD_BYTES * stage_params(r, p, per_stage, ints), d, dpn[r], 1,
                              coll, lstep, nstep, lbw, nbw)
            if ogr:
                extra += max(0.0, rs - bw - rec)
            else:
                extra += rs
        slot = f + bw + rec + comm + extra
        slots[r, 0] = slot
        slots[r, 1] = f
        slots[r, 2] = bw
        slots[r, 3] = rec
        slots[r, 4] = comm
        if slot > slots[crit, 0]:
            crit = r
    slot = slots[crit, 0]
    steady = m * slot
    bubble = (p - 1) * slot / v
    # -- data-parallel reduction, tied-embedding all-reduce, optimizer ---------------
    dp_s = 0.0
    for r in range(p):
        n_par = stage_params(r, p, per_stage, ints)
        if zero == 0:
            red = ring_seconds(GRAD_BYTES * n_par, d, dpn[r], 2, coll, lstep, nstep, lbw, nbw)
        elif zero == 1 and d > 1:
            red = ring_seconds(GRAD_BYTES * n_par, d, dpn[r], 1, coll, lstep, nstep, lbw, nbw)
        else:
            red = 0.0
        if ogr:
            red = max(0.0, red - slots[r, 2] - slots[r, 3])
        if (zero == 1 or zero == 2) and d > 1:
            red += ring_seconds(WEIGHT_BYTES * n_par, d, dpn[r], 1, coll, lstep, nstep, lbw,
                                nbw)
        if red > dp_s:
            dp_s = red
    emb_s = 0.0
    if p > 1:
        emb_s = ring_seconds(GRAD_BYTES * ints[VI_WORD], 2, emb_nodes, 2, coll, lstep, nstep,
                             lbw, nbw)
    tiny = ring_seconds(4, p * t, mp_nodes, 2, coll, lstep, nstep, lbw, nbw)
    shard = d if zero >= 1 else 1
    upd = 0.0
    for r in range(p):
        x = stage_params(r, p, per_stage, ints) / shard * opt_bytes / rp[RP_HBM_BW]
        if r == 0 or x > upd:
            upd = x
    opt_s = upd + opt_kernels * rp[RP_LAUNCH] + n_tiny * tiny
    total = steady + bubble + dp_s + emb_s + opt_s
    bd[BD_TOTAL] = total
    bd[BD_PIPELINE] = steady + bubble
    bd[BD_STEADY] = steady
    bd[BD_BUBBLE] = bubble
    bd[BD_DP] = dp_s
    bd[BD_EMB] = emb_s
    bd[BD_OPT] = opt_s
    bd[BD_SLOT] = slot
    bd[BD_F] = slots[crit, 1]
    bd[BD_B] = slots[crit, 2]
    bd[BD_REC] = slots[crit, 3]
    bd[BD_P2P] = slots[crit, 4]
    bd[BD_M] = m
    bd[BD_CRIT] = crit
    return total


@njit(cache=True, nogil=True)
def stage_memory(r, p, v, m, d, n_layers, zero, ints, out):
    """Bytes held by one GPU of stage r (phaze/step.py, "Memory per GPU") into ``out``
    (``MEM_*``); returns their total (all but the count in flight and the layer state)."""
    per_stage = n_layers // p
    e = ints[VI_E]
    # ZeRO shards over d: optimizer state from stage 1, gradients from 2, weights at 3.
    w_div = d if zero >= 3 else 1
    g_div = d if zero >= 2 else 1
    o_div = d if zero >= 1 else 1
    per_param = WEIGHT_BYTES / w_div + GRAD_BYTES / g_div + OPT_STATE_BYTES / o_div
    n_par = stage_params(r, p, per_stage, ints)
    if v == 1:
        in_flight = min(p - r, m)
        layers_in_flight = in_flight * per_stage
        ends_in_flight = in_flight
    else:
        # Megatron's interleaved warm-up: 2(p − r − 1) + (v − 1)·p + 1 chunk-microbatches
        in_flight = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)
        layers_in_flight = in_flight * (n_layers // (p * v))
        ends_in_flight = -(-in_flight // v)
    other = 0
    if r == 0:
        other += ends_in_flight * ints[VI_EMB_STASH]
    if r == p - 1:
        other += ends_in_flight * ints[VI_HEAD_STASH]
    workspace = ints[VI_WS]
    if zero >= 3 and d > 1:
        # the gathered parameters of the layer running and of the one prefetched
        workspace += 2 * WEIGHT_BYTES * (ints[VI_BLK_PB] // e)
    out[MEM_WEIGHTS] = int(WEIGHT_BYTES * n_par / w_div)
    out[MEM_GRADS] = int(GRAD_BYTES * n_par / g_div)
    out[MEM_OPT] = int(OPT_STATE_BYTES * n_par / o_div)
    out[MEM_ACT] = layers_in_flight * ints[VI_BLK_STASH]
    out[MEM_OTHER] = other
    out[MEM_WS] = workspace
    out[MEM_IN_FLIGHT] = in_flight
    out[MEM_LAYER_STATE] = int(per_stage * (ints[VI_BLK_PB] // e) * per_param)
    return (out[MEM_WEIGHTS] + out[MEM_GRADS] + out[MEM_OPT] + out[MEM_ACT] + out[MEM_OTHER]
            + out[MEM_WS])


# ---------------------------------------------------------------------------
# the plan search (phaze.step.best_plans)
# ---------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _plan_vs(p, m, n_layers, vs, vs_all, out):
    """Virtual-stage counts Megatron allows for (p, m) from the grid (or all), ascending,
    into ``out``; returns how many."""
    k = 0
    top = n_layers // p if vs_all else vs.shape[0]
    for i in range(top):
        v = i + 1 if vs_all else vs[i]
        if v == 1 or (p >= 2 and n_layers % (p * v) == 0 and m % p == 0):
            out[k] = v
            k += 1
    return k


@njit(cache=True, nogil=True)
def enumerate_plans(var_t, nv, ps, ds, devices, global_batch, microbatch, n_layers, vs, vs_all,
                    zeros, ogrs):
    """Every plan in the documented loop order: variant (t, SP, flash), p, d, v, ZeRO stage
    (only the first at d = 1, where all stages are one plan), overlap. Returns the plans'
    columns (variant, p, d, v, zero, overlap, m, geometry cell) and the geometry cells'
    (t, p, d) — one cell per distinct t of the variants × p × d."""
    ts = np.unique(var_t[:nv])
    n_cells = ts.shape[0] * ps.shape[0] * ds.shape[0]
    geo_t = np.empty(n_cells, dtype=np.int64)
    geo_p = np.empty(n_cells, dtype=np.int64)
    geo_d = np.empty(n_cells, dtype=np.int64)
    for ti in range(ts.shape[0]):
        for pi in range(ps.shape[0]):
            for di in range(ds.shape[0]):
                c = (ti * ps.shape[0] + pi) * ds.shape[0] + di
                geo_t[c] = ts[ti]
                geo_p[c] = ps[pi]
                geo_d[c] = ds[di]
    vbuf = np.empty(max(n_layers, vs.shape[0]) + 1, dtype=np.int64)
    cols = np.empty((0, 8), dtype=np.int64)
    for fill in range(2):  # count, then fill
        count = 0
        for k in range(nv):
            t = var_t[k]
            ti = np.searchsorted(ts, t)
            for pi in range(ps.shape[0]):
                p = ps[pi]
                for di in range(ds.shape[0]):
                    d = ds[di]
                    if t * p * d > devices:
                        break
                    m = global_batch // (microbatch * d)
                    nvs = _plan_vs(p, m, n_layers, vs, vs_all, vbuf)
                    for vi in range(nvs):
                        for zi in range(zeros.shape[0] if d > 1 else 1):
                            for oi in range(ogrs.shape[0]):
                                if fill:
                                    cols[count, 0] = k
                                    cols[count, 1] = p
                                    cols[count, 2] = d
                                    cols[count, 3] = vbuf[vi]
                                    cols[count, 4] = zeros[zi]
                                    cols[count, 5] = 1 if ogrs[oi] else 0
                                    cols[count, 6] = m
                                    cols[count, 7] = (ti * ps.shape[0] + pi) * ds.shape[0] + di
                                count += 1
        if not fill:
            cols = np.empty((count, 8), dtype=np.int64)
    return (np.ascontiguousarray(cols[:, 0]), np.ascontiguousarray(cols[:, 1]),
            np.ascontiguousarray(cols[:, 2]), np.ascontiguousarray(cols[:, 3]),
            np.ascontiguousarray(cols[:, 4]), np.ascontiguousarray(cols[:, 5] == 1),
            np.ascontiguousarray(cols[:, 6]), np.ascontiguousarray(cols[:, 7]),
            geo_t, geo_p, geo_d)


@njit(cache=True, nogil=True)
def build_geometry(geo_t, geo_p, geo_d, ns_values, devices):
    """:func:`geometry` of every cell (t, p, d) with t·p·d ≤ devices on every distinct node
    size: offsets (cells, sizes) into flat ``masks``/``dpn`` (p entries per cell and size),
    and the embedding and model-parallel node counts (cells, sizes)."""
    n_cells = geo_t.shape[0]
    nns = ns_values.shape[0]
    off = np.zeros((n_cells, nns), dtype=np.int64)
    total = 0
    for c in range(n_cells):
        for s in range(nns):
            off[c, s] = total
            if geo_t[c] * geo_p[c] * geo_d[c] <= devices and geo_t[c] <= ns_values[s]:
                total += geo_p[c]
    masks = np.zeros(total, dtype=np.int64)
    dpn = np.zeros(total, dtype=np.int64)
    emb = np.ones((n_cells, nns), dtype=np.int64)
    mp = np.ones((n_cells, nns), dtype=np.int64)
    for c in range(n_cells):
        for s in range(nns):
            if geo_t[c] * geo_p[c] * geo_d[c] <= devices and geo_t[c] <= ns_values[s]:
                o = off[c, s]
                p = geo_p[c]
                emb[c, s], mp[c, s] = geometry(p, geo_t[c], geo_d[c], ns_values[s],
                                               masks[o:o + p], dpn[o:o + p])
    return off, masks, dpn, emb, mp


@njit(cache=True, nogil=True)
def peak_stage_memory(p, v, m, d, n_layers, zero, ints, out):
    """The largest stage total of a plan (bytes), its parts in ``out``. Only stages 0 and
    p − 1 are priced: a middle stage holds fewer parameters (no embedding), no more
    microbatches in flight (in flight never grows with r), no embedding/head stash and
    the same workspace as stage 0, so it never exceeds stage 0; ties go to stage 0 (the
    first maximal stage, as StepResult.peak_memory picks)."""
    tmp = np.empty(N_MEM, dtype=np.int64)
    peak = stage_memory(0, p, v, m, d, n_layers, zero, ints, out)
    if p > 1:
        last = stage_memory(p - 1, p, v, m, d, n_layers, zero, ints, tmp)
        if last > peak:
            peak = last
            out[:] = tmp
    return peak


@njit(cache=True, nogil=True)
def plan_memory(plan_var, plan_p, plan_d, plan_v, plan_zero, plan_m, var_ints, n_layers):
    """The peak stage memory of every plan (bytes, float64): it does not depend on the row."""
    out = np.empty(plan_var.shape[0])
    mem = np.empty(N_MEM, dtype=np.int64)
    for k in range(plan_var.shape[0]):
        out[k] = peak_stage_memory(plan_p[k], plan_v[k], plan_m[k], plan_d[k], n_layers,
                                   plan_zero[k], var_ints[plan_var[k]], mem)
    return out


@njit(cache=True, nogil=True)
def slot_lower_bound(p, n_layers, rec_mode, lt):
    """max over stages of forward + backward + recomputation per microbatch, formed as
    :func:`step_time` forms them: its slot adds transfers and ZeRO traffic (≥ 0) to the
    same sums, so (m + (p − 1)/v) times this never exceeds its pipeline time."""
    per_stage = n_layers // p
    best = 0.0
    for r in (0, p - 1, 1):
        if r >= p or (r == 1 and p < 3):
            continue
        f = per_stage * lt[LT_BLK_F]
        bw = per_stage * lt[LT_BLK_B]
        if r == 0:
            f += lt[LT_EMB_F]
            bw += lt[LT_EMB_B]
        if r == p - 1:
            f += lt[LT_HEAD_F]
            bw += lt[LT_HEAD_B]
        rec = 0.0
        if rec_mode == REC_FULL:
            rec = per_stage * lt[LT_BLK_F]
        elif rec_mode == REC_SELECTIVE:
            rec = per_stage * lt[LT_BLK_CORE]
        x = f + bw + rec
        if x > best:
            best = x
    return best


@njit(cache=True, nogil=True)
def search_rows(plan_var, plan_geo, plan_p, plan_d, plan_v, plan_zero, plan_ogr, plan_m,
                plan_peak, var_t, var_sp, var_ints, var_ok, lt_rows, rp, cap, row_nsi, geo_off,
                geo_masks, geo_dpn, geo_emb, geo_mp, n_layers, rec_mode, opt_bytes, opt_kernels,
                n_tiny, best_idx, best_bd):
    """Per row, the feasible plan of least time (index into the plan columns, or −1) and its
    breakdown. Exact branch and bound: every plan whose lower bound (m + (p−1)/v)·
    :func:`slot_lower_bound` does not exceed the best time found is priced with
    :func:`step_time`; the plan of least bound is priced first. Ties go to the lower index."""
    n_plans = plan_var.shape[0]
    lbs = np.empty(n_plans)
    slots = np.empty((n_layers + 1, 6))
    bd = np.empty(N_BD)
    for row in range(rp.shape[0]):
        nsi = row_nsi[row]
        seed = -1
        seed_lb = np.inf
        for k in range(n_plans):
            vi = plan_var[k]
            if not var_ok[vi, row] or plan_peak[k] > cap[row]:
                lbs[k] = np.inf
                continue
            p = plan_p[k]
            s = slot_lower_bound(p, n_layers, rec_mode, lt_rows[vi, row])
            lb = plan_m[k] * s + (p - 1) * s / plan_v[k]
            lbs[k] = lb
            if lb < seed_lb:
                seed_lb = lb
                seed = k
        best = np.inf
        bi = -1
        if seed < 0:
            best_idx[row] = -1
            continue
        for step in range(n_plans + 1):
            k = seed if step == 0 else step - 1
            if k < 0 or (step > 0 and k == seed) or not lbs[k] <= best:
                continue
            vi = plan_var[k]
            p = plan_p[k]
            c = plan_geo[k]
            o = geo_off[c, nsi]
            total = step_time(p, var_t[vi], plan_d[k], plan_v[k], plan_m[k], n_layers,
                              plan_zero[k], plan_ogr[k], rec_mode, var_sp[vi], opt_bytes,
                              opt_kernels, n_tiny, lt_rows[vi, row], rp[row], var_ints[vi],
                              geo_masks[o:o + p], geo_dpn[o:o + p], geo_emb[c, nsi],
                              geo_mp[c, nsi], slots, bd)
            if total < best or (total == best and k < bi):
                best = total
                bi = k
                best_bd[row, :] = bd
        best_idx[row] = bi
