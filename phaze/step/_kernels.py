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

- ``lt`` (layer times of one (t, sequence parallel, flash, cp, ep) variant on one row, seconds):
  ``LT_*`` indices below — embedding / block / head forward and backward, the block's
  attention core (what selective recomputation re-runs), and one pipeline send of the
  boundary tensor inside a node / between nodes; the MoE block's forward, backward and
  attention core; the flash-attention kernels the K/V exchange overlaps.
- ``rp`` (one row's collective parameters): ``RP_*`` — NCCL α parts (s), the η·bandwidth
  of the in-node link and of the network (bytes/s), η·HBM bandwidth (bytes/s), the kernel
  launch gap (s).
- ``ints`` (one variant's sizes, bytes): ``VI_*`` — parameter bytes of the embedding,
  block and head slices, bytes per element, the boundary tensor, the tied word embedding
  (elements), the block's stash under the recomputation mode, the embedding's and head's
  stashes, the recomputation workspace; the MoE block's parameter bytes (and its routed
  experts' part), stash and FP8 weight copies; the bytes of one all-to-all and how many
  the MoE block runs forward and backward; the K/V exchange bytes forward and backward.
- ``moe_prefix`` (L + 1,): how many of layers 0..i−1 are mixture-of-experts layers, from
  which each stage's dense and MoE layer counts follow (:func:`stage_kinds`).
- geometry of Megatron's rank layout (:func:`geometry`, :func:`group_geometry`): per
  stage the nodes spanned by its context-parallel, expert-parallel and
  expert-data-parallel groups, and per stage boundary a bit mask of
  the (between nodes?, receiver's tensor-parallel group spans 2 nodes?) cases that occur
  over the data-parallel index, per stage the nodes its data-parallel ring spans, the
  nodes of the embedding all-reduce and of the model-parallel group.
"""

import numpy as np
from numba import njit

# Bytes per parameter (sheet §5.1): 16-bit weights, fp32 main gradients, Adam's fp32 state.
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPT_STATE_BYTES = 12

#: Recomputation modes as the kernels code them.
REC_NONE, REC_SELECTIVE, REC_FULL = 0, 1, 2

LT_EMB_F, LT_EMB_B, LT_BLK_F, LT_BLK_B, LT_BLK_CORE, LT_HEAD_F, LT_HEAD_B, LT_SEND_IN, \
    LT_SEND_NET, LT_MOE_F, LT_MOE_B, LT_MOE_CORE, LT_FLASH_F, LT_FLASH_B = range(14)
N_LT = 14
RP_COLL, RP_LINK_STEP, RP_NET_STEP, RP_LINK_BW, RP_NET_BW, RP_HBM_BW, RP_LAUNCH = range(7)
N_RP = 7
VI_EMB_PB, VI_BLK_PB, VI_HEAD_PB, VI_E, VI_ACT, VI_WORD, VI_BLK_STASH, VI_EMB_STASH, \
    VI_HEAD_STASH, VI_WS, VI_BLK_FP8_W, VI_MOE_PB, VI_MOE_EXP_PB, VI_MOE_STASH, VI_MOE_FP8_W, \
    VI_A2A_BYTES, VI_A2A_F_N, VI_A2A_B_N, VI_RING_F, VI_RING_B, VI_MOE_EXP_FP8_W = range(21)
N_VI = 21
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
def exchange_seconds(nbytes, n, nodes, coll_latency_s, link_step_s, net_step_s, link_bw, net_bw):
    """Ring attention's K/V exchange over n context-parallel ranks spanning ``nodes`` nodes:
    n − 1 point-to-point steps (all ranks send at once round the ring) that together bring
    ``nbytes`` to each rank, seconds; 0 for one rank. α = coll_latency_s + (n − 1 − x)·
    link_step_s + x·net_step_s with x = nodes − 1 steps crossing a node boundary (as
    :func:`ring_seconds` counts them); β = nbytes / (η·BW) of the slowest tier crossed."""
    if n <= 1:
        return 0.0
    x = nodes - 1
    alpha = coll_latency_s + (n - 1 - x) * link_step_s + x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + float(nbytes) / bw


@njit(cache=True, nogil=True)
def geometry(p, t, d, node_size, masks, dpn):
    """Megatron's rank layout (global rank = r·t·d + j·t + i) on nodes of ``node_size``;
    with context parallelism ``d`` here is the context × data width cp·d (Megatron-Core's
    tp-cp-dp-pp order: the context index sits between tensor and data, so the cp·d ranks
    of a stage with one tensor index are r·t·cp·d + j·t + i, j < cp·d).

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
def worst_span(p, stage_stride, j_count, j_stride, i_count, stride, count, node_size, out):
    """Per stage r (``out[r]``) the most nodes spanned by one group of ``count`` ranks
    base + k·stride (k < count), over every base r·stage_stride + j·j_stride + i
    (j < j_count, i < i_count). A span depends on its base modulo node_size only, so j
    and i run over at most node_size values each."""
    jn = min(j_count, node_size)
    inn = min(i_count, node_size)
    for r in range(p):
        worst = 1
        if count > 1:
            for j in range(jn):
                for i in range(inn):
                    s = span_nodes(r * stage_stride + j * j_stride + i, stride, count, node_size)
                    if s > worst:
                        worst = s
        out[r] = worst


@njit(cache=True, nogil=True)
def group_geometry(p, t, d, cp, ep, node_size, cpn, epn, edpn):
    """Nodes spanned, per stage r, by the worst group of three kinds in Megatron-Core's
    layouts (global rank = r·t·cp·d + j·t + i, i < t, j < cp·d; phaze/step.py "Rank
    layout"): ``cpn`` the context-parallel ring (cp ranks of stride t inside each block of
    t·cp ranks: order tp-cp-dp-pp), ``epn`` the expert-parallel group (ep ranks of stride t
    inside each block of t·ep ranks: the expert order tp-ep-dp-pp with expert tensor
    parallel = t), ``edpn`` the expert-data-parallel group (cp·d/ep ranks of stride t·ep)."""
    D = cp * d
    S = t * D
    worst_span(p, S, d, t * cp, t, t, cp, node_size, cpn)
    worst_span(p, S, D // ep, t * ep, t, t, ep, node_size, epn)
    worst_span(p, S, ep, t, t, t * ep, D // ep, node_size, edpn)


@njit(cache=True, nogil=True)
def stage_kinds(r, p, v, n_layers, moe_prefix):
    """(dense, MoE) transformer layers device r holds: its chunks c·p + r (c < v) of
    L/(p·v) consecutive layers each; ``moe_prefix[i]``: MoE layers among layers 0..i−1."""
    lc = n_layers // (p * v)
    nm = 0
    for c in range(v):
        k = c * p + r
        nm += moe_prefix[(k + 1) * lc] - moe_prefix[k * lc]
    return n_layers // p - nm, nm


@njit(cache=True, nogil=True)
def stage_params(r, p, nd, nm, ints):
    """(dense, routed-expert) parameters of stage r's slice holding ``nd`` dense and ``nm``
    MoE layers (the embedding on the first stage, the head on the last)."""
    n = nd * ints[VI_BLK_PB] + nm * (ints[VI_MOE_PB] - ints[VI_MOE_EXP_PB])
    if r == 0:
        n += ints[VI_EMB_PB]
    if r == p - 1:
        n += ints[VI_HEAD_PB]
    return n // ints[VI_E], nm * ints[VI_MOE_EXP_PB] // ints[VI_E]


@njit(cache=True, nogil=True)
def layer_times(cp, ep, cp_nodes, ep_nodes, lt, ints, rp):
    """Forward and backward seconds of one dense and one MoE block (one microbatch) on a
    stage whose context-parallel ring spans ``cp_nodes`` nodes and expert-parallel group
    ``ep_nodes``: the priced operators (``lt``), plus the K/V exchange's excess over the
    flash attention it runs concurrently with (max(0, exchange − attention), forward and
    backward), plus the all-to-alls (:func:`ring_seconds`, one pass over the ep ranks)."""
    bf = lt[LT_BLK_F]
    bb = lt[LT_BLK_B]
    mf = lt[LT_MOE_F]
    mb = lt[LT_MOE_B]
    if cp > 1:
        xf = exchange_seconds(ints[VI_RING_F], cp, cp_nodes, rp[RP_COLL], rp[RP_LINK_STEP],
                              rp[RP_NET_STEP], rp[RP_LINK_BW], rp[RP_NET_BW]) - lt[LT_FLASH_F]
        xb = exchange_seconds(ints[VI_RING_B], cp, cp_nodes, rp[RP_COLL], rp[RP_LINK_STEP],
                              rp[RP_NET_STEP], rp[RP_LINK_BW], rp[RP_NET_BW]) - lt[LT_FLASH_B]
        if xf > 0.0:
            bf += xf
            mf += xf
        if xb > 0.0:
            bb += xb
            mb += xb
    if ep > 1:
        a = ring_seconds(ints[VI_A2A_BYTES], ep, ep_nodes, 1, rp[RP_COLL], rp[RP_LINK_STEP],
                         rp[RP_NET_STEP], rp[RP_LINK_BW], rp[RP_NET_BW])
        mf += ints[VI_A2A_F_N] * a
        mb += ints[VI_A2A_B_N] * a
    return bf, bb, mf, mb


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
def stage_sums(r, p, nd, nm, bf, bb, mf, mb, lt, rec_mode):
    """(forward, backward, recomputation) seconds per microbatch of stage r holding nd dense
    and nm MoE blocks whose forward/backward are (bf, bb) and (mf, mb): the blocks, the
    embedding on stage 0 and the head on stage p − 1; full recomputation re-runs the
    blocks' forward, selective their attention cores (one definition for
    :func:`step_time` and :func:`slot_lower_bound`)."""
    f = nd * bf + nm * mf
    bw = nd * bb + nm * mb
    if r == 0:
        f += lt[LT_EMB_F]
        bw += lt[LT_EMB_B]
    if r == p - 1:
        f += lt[LT_HEAD_F]
        bw += lt[LT_HEAD_B]
    rec = 0.0
    if rec_mode == REC_FULL:
        rec = nd * bf + nm * mf
    elif rec_mode == REC_SELECTIVE:
        rec = nd * lt[LT_BLK_CORE] + nm * lt[LT_MOE_CORE]
    return f, bw, rec


@njit(cache=True, nogil=True)
def step_time(p, t, d, cp, ep, v, m, n_layers, zero, ogr, rec_mode, sp, opt_bytes, opt_kernels,
              n_tiny, lt, rp, ints, moe_prefix, masks, dpn, cpn, epn, edpn, emb_nodes, mp_nodes,
              slots, bd):
    """The time of one iteration of a plan (phaze/step.py's model), seconds, into ``bd``
    (``BD_*``); ``slots`` (≥ p, 6) receives per stage: slot, forward, backward,
    recomputation, transfers, and the seconds of boundary a's crossing. Returns the total.
    Gradients of the dense parameters are reduced over the cp·d ranks (``dpn``), those of
    the routed experts over the cp·d/ep expert-data-parallel ranks (``edpn``)."""
    coll = rp[RP_COLL]
    lstep = rp[RP_LINK_STEP]
    nstep = rp[RP_NET_STEP]
    lbw = rp[RP_LINK_BW]
    nbw = rp[RP_NET_BW]
    D = cp * d
    edp = D // ep
    e = ints[VI_E]
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
        nd, nm = stage_kinds(r, p, v, n_layers, moe_prefix)
        bf, bb, mf, mb = layer_times(cp, ep, cpn[r], epn[r], lt, ints, rp)
        f, bw, rec = stage_sums(r, p, nd, nm, bf, bb, mf, mb, lt, rec_mode)
        comm = stage_comm(r, p, v, slots[:, 5])
        # ZeRO-3: each layer's parameters all-gathered before its forward, its backward
        # and (full recomputation) its recomputed forward; the embedding and head twice.
        extra = 0.0
        if zero >= 3 and D > 1:
            passes = 3 if full else 2
            blk = ring_seconds(WEIGHT_BYTES * (ints[VI_BLK_PB] // e) * D, D, dpn[r], 1, coll,
                               lstep, nstep, lbw, nbw)
            extra = passes * nd * blk
            if nm > 0:
                moe = ring_seconds(WEIGHT_BYTES * ((ints[VI_MOE_PB] - ints[VI_MOE_EXP_PB]) // e)
                                   * D, D, dpn[r], 1, coll, lstep, nstep, lbw, nbw) \
                    + ring_seconds(WEIGHT_BYTES * (ints[VI_MOE_EXP_PB] // e) * edp, edp,
                                   edpn[r], 1, coll, lstep, nstep, lbw, nbw)
                extra += passes * nm * moe
            if r == 0:
                extra += 2 * ring_seconds(WEIGHT_BYTES * (ints[VI_EMB_PB] // e) * D, D, dpn[r],
                                          1, coll, lstep, nstep, lbw, nbw)
            if r == p - 1:
                extra += 2 * ring_seconds(WEIGHT_BYTES * (ints[VI_HEAD_PB] // e) * D, D,
                                          dpn[r], 1, coll, lstep, nstep, lbw, nbw)
        if zero >= 2 and D > 1:
            # per-microbatch reduce-scatter of the gradients as the backward ends
            dn, en = stage_params(r, p, nd, nm, ints)
            rs = ring_seconds(GRAD_BYTES * dn, D, dpn[r], 1, coll, lstep, nstep, lbw, nbw)
            if en > 0:
                rs += ring_seconds(GRAD_BYTES * en, edp, edpn[r], 1, coll, lstep, nstep, lbw,
                                   nbw)
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
    upd = 0.0
    shard = D if zero >= 1 else 1
    shard_e = edp if zero >= 1 else 1
    for r in range(p):
        nd, nm = stage_kinds(r, p, v, n_layers, moe_prefix)
        dn, en = stage_params(r, p, nd, nm, ints)
        if zero == 0:
            red = ring_seconds(GRAD_BYTES * dn, D, dpn[r], 2, coll, lstep, nstep, lbw, nbw)
            if en > 0:
                red += ring_seconds(GRAD_BYTES * en, edp, edpn[r], 2, coll, lstep, nstep, lbw,
                                    nbw)
        elif zero == 1 and D > 1:
            red = ring_seconds(GRAD_BYTES * dn, D, dpn[r], 1, coll, lstep, nstep, lbw, nbw)
            if en > 0:
                red += ring_seconds(GRAD_BYTES * en, edp, edpn[r], 1, coll, lstep, nstep, lbw,
                                    nbw)
        else:
            red = 0.0
        if ogr:
            red = max(0.0, red - slots[r, 2] - slots[r, 3])
        if (zero == 1 or zero == 2) and D > 1:
            red += ring_seconds(WEIGHT_BYTES * dn, D, dpn[r], 1, coll, lstep, nstep, lbw, nbw)
            if en > 0:
                red += ring_seconds(WEIGHT_BYTES * en, edp, edpn[r], 1, coll, lstep, nstep, lbw,
                                    nbw)
        if red > dp_s:
            dp_s = red
        x = (dn / shard + en / shard_e) * opt_bytes / rp[RP_HBM_BW]
        if r == 0 or x > upd:
            upd = x
    emb_s = 0.0
    if p > 1:
        emb_s = ring_seconds(GRAD_BYTES * ints[VI_WORD], 2, emb_nodes, 2, coll, lstep, nstep,
                             lbw, nbw)
    tiny = ring_seconds(4, p * t, mp_nodes, 2, coll, lstep, nstep, lbw, nbw)
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
def stage_memory(r, p, v, m, d, cp, ep, n_layers, zero, ints, moe_prefix, out):
    """Bytes held by one GPU of stage r (phaze/step.py, "Memory per GPU") into ``out``
    (``MEM_*``); returns their total (all but the count in flight and the layer state).
    ZeRO shards the dense parameters' state over the cp·d ranks and the routed experts'
    over the cp·d/ep expert-data-parallel ranks."""
    D = cp * d
    edp = D // ep
    e = ints[VI_E]
    nd, nm = stage_kinds(r, p, v, n_layers, moe_prefix)
    # ZeRO shards: optimizer state from stage 1, gradients from 2, weights at 3.
    w_div = D if zero >= 3 else 1
    g_div = D if zero >= 2 else 1
    o_div = D if zero >= 1 else 1
    w_div_e = edp if zero >= 3 else 1
    g_div_e = edp if zero >= 2 else 1
    o_div_e = edp if zero >= 1 else 1
    per_param = WEIGHT_BYTES / w_div + GRAD_BYTES / g_div + OPT_STATE_BYTES / o_div
    per_param_e = WEIGHT_BYTES / w_div_e + GRAD_BYTES / g_div_e + OPT_STATE_BYTES / o_div_e
    dn, en = stage_params(r, p, nd, nm, ints)
    if v == 1:
        in_flight = min(p - r, m)
        act = in_flight * (nd * ints[VI_BLK_STASH] + nm * ints[VI_MOE_STASH])
        ends_in_flight = in_flight
    else:
        # Megatron's interleaved warm-up: 2(p − r − 1) + (v − 1)·p + 1 chunk-microbatches,
        # each counted at the device's heaviest chunk (exact when its chunks are alike)
        in_flight = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)
        lc = n_layers // (p * v)
        chunk = 0
        for c in range(v):
            k = c * p + r
            cm = moe_prefix[(k + 1) * lc] - moe_prefix[k * lc]
            x = (lc - cm) * ints[VI_BLK_STASH] + cm * ints[VI_MOE_STASH]
            if x > chunk:
                chunk = x
        act = in_flight * chunk
        ends_in_flight = -(-in_flight // v)
    other = 0
    if r == 0:
        other += ends_in_flight * ints[VI_EMB_STASH]
    if r == p - 1:
        other += ends_in_flight * ints[VI_HEAD_STASH]
    workspace = ints[VI_WS]
    if zero >= 3 and D > 1:
        # the gathered parameters of the layer running and of the one prefetched
        biggest = 0
        if nd > 0:
            biggest = ints[VI_BLK_PB] // e
        if nm > 0 and ints[VI_MOE_PB] // e > biggest:
            biggest = ints[VI_MOE_PB] // e
        workspace += 2 * WEIGHT_BYTES * biggest
    # fp8 training: Transformer Engine's FP8 copies of the blocks' GEMM weights (both
    # layouts, ``VI_*_FP8_W`` bytes per layer; 0 otherwise), sharded like the weights.
    out[MEM_WEIGHTS] = int(WEIGHT_BYTES * dn / w_div) + int(WEIGHT_BYTES * en / w_div_e) \
        + int(nd * ints[VI_BLK_FP8_W] / w_div) + int(nm * ints[VI_MOE_FP8_W] / w_div) \
        + int(nm * ints[VI_MOE_EXP_FP8_W] / w_div_e)
    out[MEM_GRADS] = int(GRAD_BYTES * dn / g_div) + int(GRAD_BYTES * en / g_div_e)
    out[MEM_OPT] = int(OPT_STATE_BYTES * dn / o_div) + int(OPT_STATE_BYTES * en / o_div_e)
    out[MEM_ACT] = act
    out[MEM_OTHER] = other
    out[MEM_WS] = workspace
    out[MEM_IN_FLIGHT] = in_flight
    out[MEM_LAYER_STATE] = int(nd * (ints[VI_BLK_PB] // e) * per_param) \
        + int(nd * ints[VI_BLK_FP8_W] / w_div) \
        + int(nm * ((ints[VI_MOE_PB] - ints[VI_MOE_EXP_PB]) // e) * per_param) \
        + int(nm * (ints[VI_MOE_EXP_PB] // e) * per_param_e) \
        + int(nm * ints[VI_MOE_FP8_W] / w_div) + int(nm * ints[VI_MOE_EXP_FP8_W] / w_div_e)
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
def enumerate_plans(var_g, nv, grp_t, grp_cp, grp_ep, ps, ds, devices, global_batch,
                    microbatch, n_layers, vs, vs_all, zeros, ogrs, launchable):
    """Every plan in the documented loop order: variant (t, SP, flash, cp, ep; ``var_g``
    its (t, cp, ep) group index into ``grp_*``), p, d, v, ZeRO stage (only the first at
    cp·d = 1, where all stages are one plan), overlap. Rules: t·cp·p·d ≤ devices, ep
    divides cp·d; with ``launchable`` no ZeRO stage 2–3 over more than one rank with
    pipeline or context parallelism (no trainer launches it: Megatron-LM has ZeRO 0–1
    only, DeepSpeed refuses stages 2–3 with a pipeline and has no ring attention).
    Returns the plans' columns (variant, p, d, v, zero, overlap, m, geometry cell) and the
    geometry cells' (t, cp, ep, p, d) — one cell per group × p × d."""
    ng = grp_t.shape[0]
    n_cells = ng * ps.shape[0] * ds.shape[0]
    geo_t = np.empty(n_cells, dtype=np.int64)
    geo_cp = np.empty(n_cells, dtype=np.int64)
    geo_ep = np.empty(n_cells, dtype=np.int64)
    geo_p = np.empty(n_cells, dtype=np.int64)
    geo_d = np.empty(n_cells, dtype=np.int64)
    for gi in range(ng):
        for pi in range(ps.shape[0]):
            for di in range(ds.shape[0]):
                c = (gi * ps.shape[0] + pi) * ds.shape[0] + di
                geo_t[c] = grp_t[gi]
                geo_cp[c] = grp_cp[gi]
                geo_ep[c] = grp_ep[gi]
                geo_p[c] = ps[pi]
                geo_d[c] = ds[di]
    vbuf = np.empty(max(n_layers, vs.shape[0]) + 1, dtype=np.int64)
    cols = np.empty((0, 8), dtype=np.int64)
    for fill in range(2):  # count, then fill
        count = 0
        for k in range(nv):
            gi = var_g[k]
            t = grp_t[gi]
            cp = grp_cp[gi]
            ep = grp_ep[gi]
            for pi in range(ps.shape[0]):
                p = ps[pi]
                for di in range(ds.shape[0]):
                    d = ds[di]
                    if t * cp * p * d > devices:
                        break
                    if (cp * d) % ep:
                        continue
                    m = global_batch // (microbatch * d)
                    nvs = _plan_vs(p, m, n_layers, vs, vs_all, vbuf)
                    for vi in range(nvs):
                        for zi in range(zeros.shape[0] if cp * d > 1 else 1):
                            if launchable and (p > 1 or cp > 1) and cp * d > 1 \
                                    and zeros[zi] >= 2:
                                continue
                            for oi in range(ogrs.shape[0]):
                                if fill:
                                    cols[count, 0] = k
                                    cols[count, 1] = p
                                    cols[count, 2] = d
                                    cols[count, 3] = vbuf[vi]
                                    cols[count, 4] = zeros[zi]
                                    cols[count, 5] = 1 if ogrs[oi] else 0
                                    cols[count, 6] = m
                                    cols[count, 7] = (gi * ps.shape[0] + pi) * ds.shape[0] + di
                                count += 1
        if not fill:
            cols = np.empty((count, 8), dtype=np.int64)
    return (np.ascontiguousarray(cols[:, 0]), np.ascontiguousarray(cols[:, 1]),
            np.ascontiguousarray(cols[:, 2]), np.ascontiguousarray(cols[:, 3]),
            np.ascontiguousarray(cols[:, 4]), np.ascontiguousarray(cols[:, 5] == 1),
            np.ascontiguousarray(cols[:, 6]), np.ascontiguousarray(cols[:, 7]),
            geo_t, geo_cp, geo_ep, geo_p, geo_d)


@njit(cache=True, nogil=True)
def _cell_ok(t, cp, ep, p, d, node_size, devices):
    return t * cp * p * d <= devices and t <= node_size and (cp * d) % ep == 0


@njit(cache=True, nogil=True)
def build_geometry(geo_t, geo_cp, geo_ep, geo_p, geo_d, ns_values, devices):
    """:func:`geometry` and :func:`group_geometry` of every valid cell (t, cp, ep, p, d) on
    every distinct node size: offsets (cells, sizes) into the flat per-stage arrays
    ``masks``, ``dpn``, ``cpn``, ``epn``, ``edpn`` (p entries per cell and size), and the
    embedding and model-parallel node counts (cells, sizes)."""
    n_cells = geo_t.shape[0]
    nns = ns_values.shape[0]
    off = np.zeros((n_cells, nns), dtype=np.int64)
    total = 0
    for c in range(n_cells):
        for s in range(nns):
            off[c, s] = total
            if _cell_ok(geo_t[c], geo_cp[c], geo_ep[c], geo_p[c], geo_d[c], ns_values[s],
                        devices):
                total += geo_p[c]
    masks = np.zeros(total, dtype=np.int64)
    dpn = np.zeros(total, dtype=np.int64)
    cpn = np.ones(total, dtype=np.int64)
    epn = np.ones(total, dtype=np.int64)
    edpn = np.ones(total, dtype=np.int64)
    emb = np.ones((n_cells, nns), dtype=np.int64)
    mp = np.ones((n_cells, nns), dtype=np.int64)
    for c in range(n_cells):
        for s in range(nns):
            t, cp, ep, p, d = geo_t[c], geo_cp[c], geo_ep[c], geo_p[c], geo_d[c]
            if _cell_ok(t, cp, ep, p, d, ns_values[s], devices):
                o = off[c, s]
                emb[c, s], mp[c, s] = geometry(p, t, cp * d, ns_values[s], masks[o:o + p],
                                               dpn[o:o + p])
                group_geometry(p, t, d, cp, ep, ns_values[s], cpn[o:o + p], epn[o:o + p],
                               edpn[o:o + p])
    return off, masks, dpn, cpn, epn, edpn, emb, mp


@njit(cache=True, nogil=True)
def peak_stage_memory(p, v, m, d, cp, ep, n_layers, zero, ints, moe_prefix, out):
    """The largest stage total of a plan (bytes), its parts in ``out``; ties go to the first
    maximal stage (as StepResult.peak_memory picks). When every transformer layer is of one
    kind (dense, or all MoE) only stages 0 and p − 1 are priced: a middle stage holds fewer
    parameters (no embedding), no more microbatches in flight (in flight never grows with
    r), no embedding/head stash and the same workspace as stage 0, so it never exceeds
    stage 0. A model mixing dense and MoE layers has every stage priced."""
    tmp = np.empty(N_MEM, dtype=np.int64)
    peak = stage_memory(0, p, v, m, d, cp, ep, n_layers, zero, ints, moe_prefix, out)
    n_moe = moe_prefix[n_layers]
    mixed = 0 < n_moe < n_layers
    for r in range(1, p):
        if not mixed and r < p - 1:
            continue
        x = stage_memory(r, p, v, m, d, cp, ep, n_layers, zero, ints, moe_prefix, tmp)
        if x > peak:
            peak = x
            out[:] = tmp
    return peak


@njit(cache=True, nogil=True)
def plan_memory(plan_var, plan_p, plan_d, plan_v, plan_zero, plan_m, var_cp, var_ep, var_ints,
                n_layers, moe_prefix):
    """The peak stage memory of every plan (bytes, float64): it does not depend on the row."""
    out = np.empty(plan_var.shape[0])
    mem = np.empty(N_MEM, dtype=np.int64)
    for k in range(plan_var.shape[0]):
        vi = plan_var[k]
        out[k] = peak_stage_memory(plan_p[k], plan_v[k], plan_m[k], plan_d[k], var_cp[vi],
                                   var_ep[vi], n_layers, plan_zero[k], var_ints[vi], moe_prefix,
                                   mem)
    return out


@njit(cache=True, nogil=True)
def slot_lower_bound(p, v, n_layers, rec_mode, lt, moe_prefix):
    """max over stages 0, p − 1 and 1 of forward + backward + recomputation per microbatch
    with the operators' times alone, formed as :func:`step_time` forms them: its slot adds
    the exchanges' excess, the all-to-alls, transfers and ZeRO traffic (≥ 0) to the same
    sums, and the slot is the max over all stages, so (m + (p − 1)/v) times this never
    exceeds its pipeline time."""
    best = 0.0
    for r in (0, p - 1, 1):
        if r >= p or (r == 1 and p < 3):
            continue
        nd, nm = stage_kinds(r, p, v, n_layers, moe_prefix)
        f, bw, rec = stage_sums(r, p, nd, nm, lt[LT_BLK_F], lt[LT_BLK_B], lt[LT_MOE_F],
                                lt[LT_MOE_B], lt, rec_mode)
        x = f + bw + rec
        if x > best:
            best = x
    return best


@njit(cache=True, nogil=True)
def search_rows(plan_var, plan_geo, plan_p, plan_d, plan_v, plan_zero, plan_ogr, plan_m,
                plan_peak, var_t, var_sp, var_cp, var_ep, var_ints, var_ok, lt_rows, rp, cap,
                row_nsi, geo_off, geo_masks, geo_dpn, geo_cpn, geo_epn, geo_edpn, geo_emb,
                geo_mp, n_layers, moe_prefix, rec_mode, opt_bytes, opt_kernels, n_tiny,
                best_idx, best_bd):
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
            s = slot_lower_bound(p, plan_v[k], n_layers, rec_mode, lt_rows[vi, row], moe_prefix)
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
            total = step_time(p, var_t[vi], plan_d[k], var_cp[vi], var_ep[vi], plan_v[k],
                              plan_m[k], n_layers, plan_zero[k], plan_ogr[k], rec_mode,
                              var_sp[vi], opt_bytes, opt_kernels, n_tiny, lt_rows[vi, row],
                              rp[row], var_ints[vi], moe_prefix, geo_masks[o:o + p],
                              geo_dpn[o:o + p], geo_cpn[o:o + p], geo_epn[o:o + p],
                              geo_edpn[o:o + p], geo_emb[c, nsi], geo_mp[c, nsi], slots, bd)
            if total < best or (total == best and k < bi):
                best = total
                bi = k
                best_bd[row, :] = bd
        best_idx[row] = bi
