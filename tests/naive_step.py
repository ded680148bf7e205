"""The training-step kernels as phaze ran them in numba before they were compiled ahead of
time (phaze/step/_kernels.pyx), run as plain Python: the slow reference
tests/test_step_kernels.py holds the Cython kernels to, bit for bit (numba compiled these
functions, and the suite ran them as plain Python under NUMBA_DISABLE_JIT=1 with the same
answers). Records are the package's dtypes (``phaze.step._kernels``)."""

import numpy as np

import naive_collectives as coll
from phaze.step._kernels import OVERLAP_SLOWDOWN
from phaze.step._kernels import (BREAKDOWN, CELL_NODES, LAYER_TIMES, MEMORY, PLAN,  # noqa: F401
                                   ROW_PARAMS, SIZES, STAGE_NODES)

# Bytes per parameter (sheet §5.1): 16-bit weights, fp32 main gradients, Adam's fp32 state.
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPT_STATE_BYTES = 12

#: Recomputation modes as the kernels code them.
REC_NONE, REC_SELECTIVE, REC_FULL, REC_OP = 0, 1, 2, 3



#: The kernels' overlap slowdown (phaze/step/_kernels.pyx, OVERLAP_SLOWDOWN): a collective
#: beside compute costs at least KAPPA of its seconds.
KAPPA = OVERLAP_SLOWDOWN / (1.0 + OVERLAP_SLOWDOWN)


def exposed(c, w):
    """Seconds a collective of c seconds adds to compute of w seconds it overlaps."""
    return max(c - w, KAPPA * c)


def bucket_floor(x, frac):
    """What no compute hides of x seconds of bucketed data-parallel traffic: the last
    bucket's share in full, the buckets before it at the slowdown they cause."""
    return frac * x + KAPPA * (x - frac * x)


def span_nodes(first, stride, count, node_size):
    """Distinct nodes of the ranks first + k·stride, k = 0..count−1 (increasing ranks: with
    stride ≤ node_size no node between the first and the last is skipped; with a larger
    stride every rank has a node of its own)."""
    if count <= 0:
        return 0
    if stride > node_size:
        return count
    return (first + (count - 1) * stride) // node_size - first // node_size + 1


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


def chunk_range(k, p, v, n_layers, acct):
    """Layers [lo, hi) of virtual stage k: with ``acct`` bit 0 the embedding and the loss
    count as one layer each (w = 1), so L + 2w units are split, the first and last chunk
    w layers fewer; (L + 2w)/(p·v) units each, or with bit 1 (torchtitan's
    generate_llm_fqn_per_model_part) the first (L + 2w) mod (p·v) chunks one unit more."""
    w = int(acct) & 1
    units = n_layers + 2 * w
    lc, ex = units // (p * v), (units % (p * v) if int(acct) & 2 else 0)
    start = [c * lc + min(c, ex) for c in (k, k + 1)]
    return max(0, start[0] - w), min(n_layers, start[1] - w)


def prefix_row(kind_prefix, q, n_layers):
    """Kind q's row of the kernels' flat ``kind_prefix`` (L + 1 counts)."""
    return kind_prefix[q * (n_layers + 1):(q + 1) * (n_layers + 1)]


def stage_kinds(r, p, v, n_layers, kind_prefix, acct=0, sz=None):
    """Transformer layers of each kind device r holds (a list, one per kind): its chunks
    c·p + r (c < v) (:func:`chunk_range`), and on the last stage the sizes' ``mtp_n``
    multi-token-prediction layers of kind ``mtp_kind``; row q of ``kind_prefix``: layers of
    kind q among layers 0..i−1."""
    n_kinds = sz["n_kinds"]
    counts = [0] * n_kinds
    if r == p - 1 and sz["mtp_n"] > 0:
        counts[sz["mtp_kind"]] += int(sz["mtp_n"])
    for c in range(v):
        lo, hi = chunk_range(c * p + r, p, v, n_layers, acct)
        for q in range(n_kinds):
            row = prefix_row(kind_prefix, q, n_layers)
            counts[q] += int(row[hi] - row[lo])
    return counts


def stage_params(r, p, counts, sz):
    """(dense, routed-expert) parameters of stage r's slice holding ``counts[q]`` layers of
    each kind (the embedding on the first stage, the head on the last)."""
    n = sum(counts[q] * (sz["k_pb"][q] - sz["k_exp_pb"][q]) for q in range(len(counts)))
    ne = sum(counts[q] * sz["k_exp_pb"][q] for q in range(len(counts)))
    if r == 0:
        n += sz["emb_pb"]
    if r == p - 1:
        n += sz["head_pb"]
    return n // sz["elem_bytes"], ne // sz["elem_bytes"]


def layer_times(cp, ep, stage, lt, sz, rp, dispatch=0):
    """Forward and backward seconds of one layer of each kind (two lists, one microbatch)
    on a stage (a :data:`STAGE_NODES` record) whose context-parallel ring spans
    ``stage.cp_nodes`` nodes and expert-parallel group ``stage.ep_nodes``: the priced
    operators (``lt``), plus a kind's K/V exchange's excess over the flash attention it runs
    concurrently with (exposed(exchange, attention), forward and backward; the exchange
    ``collectives.p2p_seconds``), plus its all-to-alls (``collectives.all_to_all_seconds``
    over the ep ranks)."""
    kf, kb = [], []
    for q in range(sz["n_kinds"]):
        f = lt["k_f"][q]
        b = lt["k_b"][q]
        if cp > 1 and sz["k_ring_f"][q] > 0:
            f += exposed(coll.p2p_seconds(sz["k_ring_f"][q], cp, stage["cp_nodes"], rp),
                         lt["k_flash_f"][q])
            b += exposed(coll.p2p_seconds(sz["k_ring_b"][q], cp, stage["cp_nodes"], rp),
                         lt["k_flash_b"][q])
        if ep > 1 and (sz["k_a2a_f_n"][q] or sz["k_a2a_b_n"][q]):
            if dispatch == 1:
                a = coll.dedup_all_to_all_seconds(sz["a2a_bytes"], sz["a2a_token_bytes"],
                                                  sz["topk"], sz["node_limit"], ep,
                                                  stage["ep_nodes"], rp)
            else:
                a = coll.split_all_to_all_seconds(sz["a2a_bytes"], ep, stage["ep_nodes"], rp)
            f += sz["k_a2a_f_n"][q] * a
            b += sz["k_a2a_b_n"][q] * a
        kf.append(f)
        kb.append(b)
    return kf, kb


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


def stage_sums(r, p, counts, kf, kb, lt, rec_mode):
    """(forward, backward, recomputation) seconds per microbatch of stage r holding
    ``counts[q]`` layers of each kind whose forward/backward are (kf[q], kb[q]): the layers
    in kind order, the embedding on stage 0 and the head on stage p − 1; full recomputation
    re-runs the layers' forward, selective their attention cores, "op" torchtitan's per-op
    share (one definition for :func:`step_time` and :func:`slot_lower_bounds`)."""
    f = bw = rec = 0.0
    for q, n in enumerate(counts):
        f += n * kf[q]
        bw += n * kb[q]
        if rec_mode == REC_FULL:
            rec += n * kf[q]
        elif rec_mode == REC_SELECTIVE:
            rec += n * lt["k_core"][q]
        elif rec_mode == REC_OP:
            rec += n * lt["k_op"][q]
    if r == 0:
        f += lt["emb_f"]
        bw += lt["emb_b"]
    if r == p - 1:
        f += lt["head_f"]
        bw += lt["head_b"]
    return f, bw, rec


def hidden(counts, c, w):
    """Exposed seconds of ``counts[q]`` layers of each kind's communication (c[q] per layer)
    run one layer ahead beside the previous layer's compute (w[q] per layer): every layer's
    excess over the compute, plus the whole of the first one (its hidden part too: the
    largest over the kinds present)."""
    present = [q for q, n in enumerate(counts) if n > 0]
    if not present:
        return 0.0
    out = 0.0
    for q in present:
        out += counts[q] * exposed(c[q], w[q])
    return out + max(c[q] - exposed(c[q], w[q]) for q in present)


def bucket_fraction(params, D):
    """The last bucket's share of a stage's gradients: Megatron-Core's default bucket of
    max(40e6, 1e6·dp) parameters, at most 1."""
    bucket = max(40000000.0, 1000000.0 * D)
    return 1.0 if params <= 0 or bucket >= params else bucket / params


def sharded_comm(r, p, counts, kf, kb, lt, sz, rec_mode, zero, ogr, opg, reshard,
                 gb, D, edp, dpn, edpn, rp):
    """Exposed seconds per microbatch of stage r's ZeRO-2/3 (FSDP) traffic: per layer an
    all-gather ending with its whole 16-bit parameters (ZeRO-3; before the forward and,
    resharded, before the backward) and a reduce-scatter of its whole gradient after the
    backward, over every NIC of the group's nodes; overlapped ones (``opg`` gathers,
    ``ogr`` reduce-scatters) run one layer ahead beside the previous layer's compute."""
    e = sz["elem_bytes"]
    Fd = coll.spread(rp, D // dpn)
    Fe = coll.spread(rp, edp // edpn)
    z3 = zero >= 3
    n = len(counts)
    g = [0.0] * n
    rd = [0.0] * n
    for q in range(n):
        if counts[q] <= 0:
            continue
        dense_pb = sz["k_pb"][q] - sz["k_exp_pb"][q]
        rd[q] = coll.reduce_scatter_seconds(gb * (dense_pb // e), D, dpn, Fd)
        if sz["k_exp_pb"][q] > 0:
            rd[q] += coll.reduce_scatter_seconds(gb * (sz["k_exp_pb"][q] // e), edp, edpn, Fe)
        if z3:
            g[q] = coll.all_gather_seconds(WEIGHT_BYTES * (dense_pb // e), D, dpn, Fd)
            if sz["k_exp_pb"][q] > 0:
                g[q] += coll.all_gather_seconds(WEIGHT_BYTES * (sz["k_exp_pb"][q] // e), edp,
                                                edpn, Fe)
    out = 0.0
    if z3:
        if opg:
            out += hidden(counts, g, kf)
        else:
            acc = 0.0
            for q in range(n):
                acc += counts[q] * g[q]
            out += acc
    w, o = [], []
    acc = 0.0
    for q in range(n):
        wq = kb[q]
        if rec_mode == REC_FULL:
            wq += kf[q]
        elif rec_mode == REC_SELECTIVE:
            wq += lt["k_core"][q]
        elif rec_mode == REC_OP:
            wq += lt["k_op"][q]
        w.append(wq)
        cq = g[q] if (z3 and reshard) else 0.0
        o.append((cq if opg else 0.0) + (rd[q] if ogr else 0.0))
        acc += counts[q] * ((0.0 if opg else cq) + (0.0 if ogr else rd[q]))
    out += acc
    out += hidden(counts, o, w)
    return out + sharded_fixed(r, p, sz, zero, reshard, gb, D, dpn, rp)


def sharded_fixed(r, p, sz, zero, reshard, gb, D, dpn, rp):
    """What no overlap hides of :func:`sharded_comm`: the embedding's (stage 0) and the
    head's (stage p − 1) reduce-scatter and, ZeRO-3, their gathers (twice resharded)."""
    e = sz["elem_bytes"]
    Fd = coll.spread(rp, D // dpn)
    pe = 2.0 if reshard else 1.0
    out = 0.0
    for here, pb in ((r == 0, sz["emb_pb"]), (r == p - 1, sz["head_pb"])):
        if here:
            eh = float(pb // e)
            out += coll.reduce_scatter_seconds(gb * eh, D, dpn, Fd)
            if zero >= 3:
                out += pe * coll.all_gather_seconds(WEIGHT_BYTES * eh, D, dpn, Fd)
    return out


def eh_params(r, p, sz):
    """Parameters of the embedding (stage 0) and head (stage p − 1) on stage r."""
    return ((sz["emb_pb"] if r == 0 else 0) + (sz["head_pb"] if r == p - 1 else 0)) \
        // sz["elem_bytes"]


def optimizer_seconds(r, plan, dn, en, shard, shard_e, lt, sz, kind_prefix, rp):
    """Stage r's optimizer step: the memory-bound update of its parameters' shares (the
    embedding's and head's at Adam's bytes when the optimizer's differ), plus the
    Newton–Schulz GEMMs of a Muon step on its layers' weight matrices."""
    if plan["opt_bytes_eh"] == plan["opt_bytes"]:
        x = (dn / shard + en / shard_e) * plan["opt_bytes"] / rp["hbm_bw"]
    else:
        eh = eh_params(r, plan["p"], sz)
        x = (((dn - eh) / shard + en / shard_e) * plan["opt_bytes"]
             + eh / shard * plan["opt_bytes_eh"]) / rp["hbm_bw"]
    counts = stage_kinds(r, plan["p"], plan["v"], plan["n_layers"], kind_prefix, plan["acct"],
                         sz)
    ns = 0.0
    for q, n in enumerate(counts):
        if lt["k_ns_d"][q] > 0.0 or lt["k_ns_e"][q] > 0.0:
            ns += n * (lt["k_ns_d"][q] / shard + lt["k_ns_e"][q] / shard_e)
    return x + ns


def step_time(plan, cell, stages, lt, rp, sz, kind_prefix, slots, bd):
    """The time of one iteration of ``plan`` (a :data:`PLAN` record; phaze/step/_model.py's
    model), seconds, into ``bd`` (a :data:`BREAKDOWN` record), on the rank layout
    ``stages`` (p :data:`STAGE_NODES` records) and ``cell`` (:data:`CELL_NODES`), with the
    variant's layer times ``lt`` (:data:`LAYER_TIMES`), the row's ``rp``
    (:data:`ROW_PARAMS`) and the sizes ``sz`` (:data:`SIZES`); ``slots`` (≥ p, 6) receives
    per stage: slot, forward, backward, recomputation, transfers, and the seconds of
    boundary a's crossing. Returns the total. Gradients of the dense parameters are
    reduced over the cp·d ranks (``dp_nodes``), those of the routed experts over the
    cp·d/ep expert-data-parallel ranks (``edp_nodes``)."""
    p = plan["p"]
    t = plan["t"]
    cp = plan["cp"]
    ep = plan["ep"]
    v = plan["v"]
    m = plan["m"]
    n_layers = plan["n_layers"]
    zero = plan["zero"]
    ogr = plan["ogr"]
    rec_mode = plan["rec_mode"]
    gb = plan["grad_bytes"]   # bytes per parameter of the gradient reductions
    D = cp * plan["d"]
    edp = D // ep
    e = sz["elem_bytes"]
    # -- one crossing per stage boundary (worst data-parallel index) ------------------
    g1 = 0.0
    g2 = 0.0
    if not plan["sp"]:  # with SP the boundary tensor stays split over the t ranks: no gather
        g1 = coll.all_gather_seconds(sz["act_bytes"], t, 1, rp)
        g2 = coll.all_gather_seconds(sz["act_bytes"], t, 2, rp)
    for a in range(p):
        mk = stages[a]["mask"]
        worst = 0.0
        for bit in range(4):
            if mk & (1 << bit):
                x = (lt["send_net"] if bit >= 2 else lt["send_in"]) + (g2 if bit & 1 else g1)
                if x > worst:
                    worst = x
        slots[a, 5] = worst
    full = rec_mode == REC_FULL
    crit = 0
    for r in range(p):
        dpn = stages[r]["dp_nodes"]
        edpn = stages[r]["edp_nodes"]
        counts = stage_kinds(r, p, v, n_layers, kind_prefix, plan["acct"], sz)
        kf, kb = layer_times(cp, ep, stages[r], lt, sz, rp, plan["dispatch"])
        f, bw, rec = stage_sums(r, p, counts, kf, kb, lt, rec_mode)
        comm = stage_comm(r, p, v, slots[:, 5])
        extra = 0.0
        if zero >= 2 and D > 1:
            extra = sharded_comm(r, p, counts, kf, kb, lt, sz, rec_mode, zero, ogr,
                                 bool(plan["opg"]), bool(plan["reshard"]), gb, D, edp, dpn,
                                 edpn, rp)
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
    # one fill and drain per pipeline schedule: m / mp of them (mp = 0: one per step)
    passes = m // (plan["mp"] if plan["mp"] > 0 else m)
    bubble = passes * ((p - 1) * slot / v)
    # -- data-parallel reduction, tied-embedding all-reduce, optimizer ---------------
    dp_s = 0.0
    upd = 0.0
    shard = D if zero >= 1 else 1
    shard_e = edp if zero >= 1 else 1
    for r in range(p):
        dpn = stages[r]["dp_nodes"]
        edpn = stages[r]["edp_nodes"]
        counts = stage_kinds(r, p, v, n_layers, kind_prefix, plan["acct"], sz)
        dn, en = stage_params(r, p, counts, sz)
        Fd = coll.spread(rp, D // dpn)
        Fe = coll.spread(rp, edp // edpn)
        if zero == 0:
            red = coll.all_reduce_seconds(gb * dn, D, dpn, Fd)
            if en > 0:
                red += coll.all_reduce_seconds(gb * en, edp, edpn, Fe)
        elif zero == 1 and D > 1:
            red = coll.reduce_scatter_seconds(gb * dn, D, dpn, Fd)
            if en > 0:
                red += coll.reduce_scatter_seconds(gb * en, edp, edpn, Fe)
        else:
            red = 0.0
        if ogr and zero <= 1:
            frac = bucket_fraction(dn + en, D)
            red = max(red - slots[r, 2] - slots[r, 3], bucket_floor(red, frac))
        if (zero == 1 or zero == 2) and D > 1:
            ag = coll.all_gather_seconds(WEIGHT_BYTES * dn, D, dpn, Fd)
            if en > 0:
                ag += coll.all_gather_seconds(WEIGHT_BYTES * en, edp, edpn, Fe)
            if plan["opg"]:
                frac = bucket_fraction(dn + en, D)
                ag = max(ag - slots[r, 1], bucket_floor(ag, frac))
            red += ag
        if red > dp_s:
            dp_s = red
        x = optimizer_seconds(r, plan, dn, en, shard, shard_e, lt, sz, kind_prefix, rp)
        if r == 0 or x > upd:
            upd = x
    emb_s = 0.0
    if p > 1:
        emb_s = coll.all_reduce_seconds(gb * sz["word_elements"], 2, cell["emb_nodes"], rp)
    tiny = coll.all_reduce_seconds(4, p * t, cell["mp_nodes"], rp)
    opt_s = upd + plan["opt_kernels"] * rp["launch_s"] + plan["n_tiny"] * tiny
    total = steady + bubble + dp_s + emb_s + opt_s
    bd["total_s"] = total
    bd["pipeline_s"] = steady + bubble
    bd["steady_s"] = steady
    bd["bubble_s"] = bubble
    bd["dp_allreduce_s"] = dp_s
    bd["embedding_allreduce_s"] = emb_s
    bd["optimizer_s"] = opt_s
    bd["slot_s"] = slot
    bd["forward_s"] = slots[crit, 1]
    bd["backward_s"] = slots[crit, 2]
    bd["recompute_s"] = slots[crit, 3]
    bd["p2p_s"] = slots[crit, 4]
    bd["microbatches"] = m
    bd["critical_stage"] = crit
    return total


def stage_memory(r, plan, sz, kind_prefix, out):
    """Bytes held by one GPU of stage r of ``plan`` (phaze/step/_model.py, "Memory per
    GPU") into ``out`` (a :data:`MEMORY` record); returns their total (all but the count
    in flight and the layer state). ZeRO shards the dense parameters' state over the cp·d
    ranks and the routed experts' over the cp·d/ep expert-data-parallel ranks."""
    p = plan["p"]
    v = plan["v"]
    m = plan["mp"] if plan["mp"] > 0 else plan["m"]   # in flight: one schedule's at most
    ep = plan["ep"]
    n_layers = plan["n_layers"]
    zero = plan["zero"]
    # the weights' and gradients' bytes per parameter a rank keeps
    gb, wb = plan["g_bytes"], plan["w_bytes"]
    D = plan["cp"] * plan["d"]
    edp = D // ep
    e = sz["elem_bytes"]
    nk = sz["n_kinds"]
    counts = stage_kinds(r, p, v, n_layers, kind_prefix, plan["acct"], sz)
    # ZeRO shards: optimizer state from stage 1, gradients from 2, weights at 3.
    w_div = D if zero >= 3 else 1
    g_div = D if zero >= 2 else 1
    o_div = D if zero >= 1 else 1
    w_div_e = edp if zero >= 3 else 1
    g_div_e = edp if zero >= 2 else 1
    o_div_e = edp if zero >= 1 else 1
    O = plan["state_bytes"]
    per_param = wb / w_div + gb / g_div + O / o_div
    per_param_e = wb / w_div_e + gb / g_div_e + O / o_div_e
    dn, en = stage_params(r, p, counts, sz)
    if v == 1:
        in_flight = min(p - r, m)
        act = in_flight * sum(counts[q] * sz["k_stash"][q] for q in range(nk))
        ends_in_flight = in_flight
    else:
        # Megatron's interleaved warm-up: 2(p − r − 1) + (v − 1)·p + 1 chunk-microbatches,
        # each counted at the device's heaviest chunk (exact when its chunks are alike)
        in_flight = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)
        chunk = 0
        for c in range(v):
            lo, hi = chunk_range(c * p + r, p, v, n_layers, plan["acct"])
            x = 0
            for q in range(nk):
                row = prefix_row(kind_prefix, q, n_layers)
                x += int(row[hi] - row[lo]) * sz["k_stash"][q]
            if c * p + r == p * v - 1 and sz["mtp_n"] > 0:
                x += int(sz["mtp_n"]) * sz["k_stash"][sz["mtp_kind"]]
            if x > chunk:
                chunk = x
        act = in_flight * chunk
        ends_in_flight = -(-in_flight // v)
    other = 0
    if r == 0:
        other += ends_in_flight * sz["emb_stash"]
    if r == p - 1:
        other += ends_in_flight * sz["head_stash"]
    workspace = sz["workspace"]
    if zero >= 3 and D > 1 and plan["reshard"]:
        # the gathered parameters of the layer running and of the one prefetched
        biggest = max([sz["k_pb"][q] // e for q in range(nk) if counts[q] > 0], default=0)
        workspace += 2 * WEIGHT_BYTES * biggest
    if zero >= 3 and D > 1 and not plan["reshard"]:
        workspace += WEIGHT_BYTES * (dn + en)
    # fp8 training: Transformer Engine's FP8 copies of the blocks' GEMM weights (both
    # layouts, the ``*_fp8_w`` sizes per layer; 0 otherwise), sharded like the weights.
    fp8 = sum(int(counts[q] * sz["k_fp8_w"][q] / w_div)
              + int(counts[q] * sz["k_exp_fp8_w"][q] / w_div_e) for q in range(nk))
    out["weights"] = int(wb * dn / w_div) + int(wb * en / w_div_e) + fp8
    out["gradients"] = int(gb * dn / g_div) + int(gb * en / g_div_e)
    if plan["state_bytes_eh"] == O:
        out["optimizer_state"] = int(O * dn / o_div) + int(O * en / o_div_e)
    else:
        eh = eh_params(r, p, sz)
        out["optimizer_state"] = int(O * (dn - eh) / o_div) \
            + int(plan["state_bytes_eh"] * eh / o_div) + int(O * en / o_div_e)
    out["activations"] = act
    out["activations_other"] = other
    out["workspace"] = workspace
    out["in_flight"] = in_flight
    out["layer_param_state"] = fp8 + sum(
        int(counts[q] * ((sz["k_pb"][q] - sz["k_exp_pb"][q]) // e) * per_param)
        + int(counts[q] * (sz["k_exp_pb"][q] // e) * per_param_e) for q in range(nk))
    return (out["weights"] + out["gradients"] + out["optimizer_state"] + out["activations"] + out["activations_other"]
            + out["workspace"])


# ---------------------------------------------------------------------------
# the plan search (phaze.step.best_plans)
# ---------------------------------------------------------------------------

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


def enumerate_plans(var_g, nv, grp_t, grp_cp, grp_ep, ps, ds, devices, global_batch,
                    microbatch, n_layers, vs, vs_all, zeros, ogrs, launchable,
                    z3_anywhere=True):
    """Every plan in the documented loop order: variant (t, SP, flash, cp, ep; ``var_g``
    its (t, cp, ep) group index into ``grp_*``), p, d, v, ZeRO stage (only the first at
    cp·d = 1, where all stages are one plan), overlap. Rules: t·cp·p·d ≤ devices, ep
    divides cp·d; with ``launchable`` no ZeRO stage 2 over more than one rank with
    pipeline or context parallelism (no trainer launches it), nor stage 3 there unless
    ``z3_anywhere`` (torchtitan's FSDP2 beside pipelines and ring attention).
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
                                    and (zeros[zi] == 2
                                         or (zeros[zi] >= 3 and not z3_anywhere)):
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


def _cell_ok(t, cp, ep, p, d, node_size, devices):
    return t * cp * p * d <= devices and t <= node_size and (cp * d) % ep == 0


def stage_geometry(p, t, d, cp, ep, node_size, stages, cell):
    """Megatron's rank layout of a plan on nodes of ``node_size``: :func:`geometry` and
    :func:`group_geometry` into ``stages`` (p :data:`STAGE_NODES` records) and ``cell``
    (a :data:`CELL_NODES` record)."""
    masks = np.empty(p, dtype=np.int64)
    dpn = np.empty(p, dtype=np.int64)
    cpn = np.empty(p, dtype=np.int64)
    epn = np.empty(p, dtype=np.int64)
    edpn = np.empty(p, dtype=np.int64)
    cell["emb_nodes"], cell["mp_nodes"] = geometry(p, t, cp * d, node_size, masks, dpn)
    group_geometry(p, t, d, cp, ep, node_size, cpn, epn, edpn)
    for r in range(p):
        st = stages[r]
        st["mask"] = masks[r]
        st["dp_nodes"] = dpn[r]
        st["cp_nodes"] = cpn[r]
        st["ep_nodes"] = epn[r]
        st["edp_nodes"] = edpn[r]


def build_geometry(geo_t, geo_cp, geo_ep, geo_p, geo_d, ns_values, devices):
    """:func:`stage_geometry` of every valid cell (t, cp, ep, p, d) on every distinct node
    size: offsets (cells, sizes) into the flat :data:`STAGE_NODES` array (p records per
    cell and size), that array, and the :data:`CELL_NODES` records (cells, sizes)."""
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
    stages = np.zeros(total, dtype=STAGE_NODES)
    for k in range(total):
        stages[k]["cp_nodes"] = 1
        stages[k]["ep_nodes"] = 1
        stages[k]["edp_nodes"] = 1
    cells = np.zeros((n_cells, nns), dtype=CELL_NODES)
    for c in range(n_cells):
        for s in range(nns):
            cells[c, s]["emb_nodes"] = 1
            cells[c, s]["mp_nodes"] = 1
            t, cp, ep, p, d = geo_t[c], geo_cp[c], geo_ep[c], geo_p[c], geo_d[c]
            if _cell_ok(t, cp, ep, p, d, ns_values[s], devices):
                o = off[c, s]
                stage_geometry(p, t, d, cp, ep, ns_values[s], stages[o:o + p], cells[c, s])
    return off, stages, cells


def peak_stage_memory(plan, sz, kind_prefix, out):
    """The largest stage total of ``plan`` (bytes), its parts in ``out`` (a :data:`MEMORY`
    record); ties go to the first maximal stage (as StepResult.peak_memory picks). When
    every transformer layer is of one kind (dense, or all MoE) only stages 0 and p − 1 are
    priced: a middle stage holds fewer parameters (no embedding), no more microbatches in
    flight (in flight never grows with r), no embedding/head stash and the same workspace
    as stage 0, so it never exceeds stage 0. A model mixing dense and MoE layers has every
    stage priced."""
    p = plan["p"]
    n_layers = plan["n_layers"]
    tmp = np.empty(1, dtype=MEMORY)
    peak = stage_memory(0, plan, sz, kind_prefix, out)
    present = sum(1 for q in range(sz["n_kinds"])
                  if prefix_row(kind_prefix, q, n_layers)[n_layers] > 0)
    mixed = present > 1 or bool(plan["acct"])
    for r in range(1, p):
        if not mixed and r < p - 1:
            continue
        x = stage_memory(r, plan, sz, kind_prefix, tmp[0])
        if x > peak:
            peak = x
            _copy_memory(tmp[0], out)
    return peak


def _copy_memory(src, dst):
    dst["weights"] = src["weights"]
    dst["gradients"] = src["gradients"]
    dst["optimizer_state"] = src["optimizer_state"]
    dst["activations"] = src["activations"]
    dst["activations_other"] = src["activations_other"]
    dst["workspace"] = src["workspace"]
    dst["in_flight"] = src["in_flight"]
    dst["layer_param_state"] = src["layer_param_state"]


def plan_memory(plans, plan_var, var_sizes, kind_prefix):
    """The peak stage memory of every plan (:data:`PLAN` records; bytes, float64): it does
    not depend on the row."""
    out = np.empty(plans.shape[0])
    mem = np.empty(1, dtype=MEMORY)
    for k in range(plans.shape[0]):
        out[k] = peak_stage_memory(plans[k], var_sizes[plan_var[k]], kind_prefix, mem[0])
    return out


def slot_lower_bounds(plan, lt, sz, kind_prefix):
    """Forward + backward + recomputation per microbatch with the operators' times alone,
    formed as :func:`step_time` forms them, of stages 0, p − 1 and 1 (0 unless p ≥ 3)."""
    p = plan["p"]
    out = []
    for q, r in enumerate((0, p - 1, 1)):
        if r >= p or (q == 2 and p < 3):
            out.append(0.0)
            continue
        counts = stage_kinds(r, p, plan["v"], plan["n_layers"], kind_prefix, plan["acct"], sz)
        f, bw, rec = stage_sums(r, p, counts, lt["k_f"], lt["k_b"], lt, plan["rec_mode"])
        out.append(f + bw + rec)
    return out


def stage_slot_bound(r, pl, stage, lt, sz, rp, kind_prefix):
    """Stage r's slot of a ZeRO 2–3 plan without its pipeline transfers, formed as
    :func:`step_time` forms it."""
    D = pl["cp"] * pl["d"]
    counts = stage_kinds(r, pl["p"], pl["v"], pl["n_layers"], kind_prefix, pl["acct"], sz)
    kf, kb = layer_times(pl["cp"], pl["ep"], stage, lt, sz, rp, pl["dispatch"])
    f, bw, rec = stage_sums(r, pl["p"], counts, kf, kb, lt, pl["rec_mode"])
    return f + bw + rec + sharded_comm(r, pl["p"], counts, kf, kb, lt, sz,
                                       pl["rec_mode"], pl["zero"], pl["ogr"], bool(pl["opg"]),
                                       bool(pl["reshard"]), pl["grad_bytes"], D, D // pl["ep"],
                                       stage["dp_nodes"], stage["edp_nodes"], rp)


def plan_slot_bound(pl, s3, sz, stages, lt, rp, kind_prefix):
    """The slot bound of plan ``pl``: the largest stage bound, under ZeRO 2–3 stages 0 and
    p − 1 with their sharded traffic (:func:`stage_slot_bound`)."""
    D = pl["cp"] * pl["d"]
    a, b, c = s3
    if pl["zero"] >= 2 and D > 1:
        a = stage_slot_bound(0, pl, stages[0], lt, sz, rp, kind_prefix)
        b = a if pl["p"] == 1 else stage_slot_bound(pl["p"] - 1, pl, stages[pl["p"] - 1], lt,
                                                    sz, rp, kind_prefix)
    return max(a, b, c)


def dp_tail_bound(pl, sz, stages, rp, kind_prefix):
    """Stage 0's data-parallel reduction and parameter gather after the pipeline, an
    overlapped one at its last bucket's share: a lower bound of the step's."""
    D = pl["cp"] * pl["d"]
    if D <= 1:
        return 0.0
    edp = D // pl["ep"]
    dpn, edpn = stages[0]["dp_nodes"], stages[0]["edp_nodes"]
    counts = stage_kinds(0, pl["p"], pl["v"], pl["n_layers"], kind_prefix, pl["acct"], sz)
    dn, en = stage_params(0, pl["p"], counts, sz)
    Fd = coll.spread(rp, D // dpn)
    Fe = coll.spread(rp, edp // edpn)
    frac = bucket_fraction(dn + en, D)
    gb = pl["grad_bytes"]
    red = 0.0
    if pl["zero"] == 0:
        red = coll.all_reduce_seconds(gb * dn, D, dpn, Fd)
        if en > 0:
            red += coll.all_reduce_seconds(gb * en, edp, edpn, Fe)
    elif pl["zero"] == 1:
        red = coll.reduce_scatter_seconds(gb * dn, D, dpn, Fd)
        if en > 0:
            red += coll.reduce_scatter_seconds(gb * en, edp, edpn, Fe)
    if pl["ogr"] and pl["zero"] <= 1:
        red = bucket_floor(red, frac)
    if pl["zero"] in (1, 2):
        ag = coll.all_gather_seconds(WEIGHT_BYTES * dn, D, dpn, Fd)
        if en > 0:
            ag += coll.all_gather_seconds(WEIGHT_BYTES * en, edp, edpn, Fe)
        if pl["opg"]:
            ag = bucket_floor(ag, frac)
        red += ag
    return red


def search_rows(plans, plan_var, plan_geo, plan_peak, var_sizes, var_ok, lt_rows, rp, cap,
                row_nsi, geo_off, geo_stages, geo_cells, kind_prefix, best_idx, best_bd):
    """Per row, the feasible plan of least time (index into ``plans``, :data:`PLAN`
    records, or −1) and its breakdown (``best_bd``, :data:`BREAKDOWN` records). Exact
    branch and bound: every plan whose lower bound (m + (p−1)/v)·:func:`plan_slot_bound`
    does not exceed the best time found is priced with :func:`step_time`; the plan of
    least bound is priced first. Ties go to the lower index."""
    n_plans = plans.shape[0]
    lbs = np.empty(n_plans)
    slots = np.empty((max([int(plans[k]["p"]) for k in range(n_plans)], default=1), 6))
    bd = np.empty(1, dtype=BREAKDOWN)
    for row in range(rp.shape[0]):
        nsi = row_nsi[row]
        seed = -1
        seed_lb = np.inf
        for k in range(n_plans):
            vi = plan_var[k]
            if not var_ok[vi, row] or plan_peak[k] > cap[row]:
                lbs[k] = np.inf
                continue
            pl = plans[k]
            p = pl["p"]
            s = max(slot_lower_bounds(pl, lt_rows[vi, row], var_sizes[vi], kind_prefix))
            lb = pl["m"] * s + (p - 1) * s / pl["v"]
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
            pl = plans[k]
            p = pl["p"]
            c = plan_geo[k]
            o = geo_off[c, nsi]
            if step > 0:
                s = plan_slot_bound(pl, slot_lower_bounds(pl, lt_rows[vi, row], var_sizes[vi],
                                                          kind_prefix),
                                    var_sizes[vi], geo_stages[o:o + p], lt_rows[vi, row],
                                    rp[row], kind_prefix)
                lb = pl["m"] * s + (p - 1) * s / pl["v"]
                lb = lb + dp_tail_bound(pl, var_sizes[vi], geo_stages[o:o + p], rp[row],
                                        kind_prefix)
                if not lb <= best:
                    continue
            total = step_time(pl, geo_cells[c, nsi], geo_stages[o:o + p], lt_rows[vi, row],
                              rp[row], var_sizes[vi], kind_prefix, slots, bd[0])
            if total < best or (total == best and k < bi):
                best = total
                bi = k
                best_bd[row] = bd[0]
        best_idx[row] = bi
