"""Slow, obviously-correct reference implementations for the tests.

Each section belongs to one module of phaze and is written for clarity, not
speed: brute force over every choice the fast code prunes or structures away.
"""
import dataclasses
import itertools  # noqa: F401  (used by the sections below)
import math  # noqa: F401

import numpy as np  # noqa: F401

# ---------------------------------------------------------------------------
# graph: FLOP and parameter counts straight from the formulas
# ---------------------------------------------------------------------------

def naive_param_tensors(m):
    """Every trainable tensor of a ModelSpec as (name, shape), written out one by one
    the way a PyTorch module tree would hold them (tied output weights not repeated)."""
    h, f, e, hd = m.hidden, m.ffn_hidden, (m.embed_proj or m.hidden), m.head_dim
    tensors = [("embed.tokens", (m.vocab, e))]
    if m.position == "learned":
        tensors.append(("embed.positions", (m.max_positions, h)))
    if m.embed_proj:
        tensors.append(("embed.project_in", (e, h)))

    def norm(prefix):
        out = [(prefix + ".weight", (h,))]
        if m.norm == "layernorm":
            out.append((prefix + ".bias", (h,)))
        return out

    for layer in range(m.n_layers):
        p = f"block{layer}."
        tensors += norm(p + "ln1")
        linears = [("q", h, m.heads * hd), ("k", h, m.kv_heads * hd), ("v", h, m.kv_heads * hd),
                   ("o", m.heads * hd, h)]
        if m.activation == "swiglu":
            linears += [("gate", h, f), ("up", h, f), ("down", f, h)]
        else:
            linears += [("fc1", h, f), ("fc2", f, h)]
        for name, fan_in, fan_out in linears:
            tensors.append((p + name + ".weight", (fan_out, fan_in)))
            if m.qkv_bias if name in ("q", "k", "v") else m.bias:   # Qwen2: Q, K, V only
                tensors.append((p + name + ".bias", (fan_out,)))
        tensors += norm(p + "ln2")
    if m.final_norm:
        tensors += norm("final_norm")
    if m.embed_proj:
        tensors.append(("head.project_out", (h, e)))
    if not m.tied_embeddings:
        tensors.append(("head.logits", (m.vocab, e)))
    return tensors


def naive_n_params(m):
    """Sum of the element counts of naive_param_tensors."""
    return sum(math.prod(shape) for _, shape in naive_param_tensors(m))


def naive_slice_param_bytes(m, t, bytes_per_element=2):
    """Parameter bytes of one tensor-parallel slice per layer kind, tensor by tensor:
    Megatron shards the token table by rows (vocab), Q/K/V and FC1/gate/up by output
    columns (weights and biases), out_proj and FC2 by input rows (weights only); the rest
    is replicated. The head holds its own copy of tied logits weights."""
    def shard(rows):
        return -(-rows // t)

    out = {"embedding": 0, "block": 0, "head": 0}
    tensors = naive_param_tensors(m)
    if m.tied_embeddings:
        tensors.append(("head.logits", (m.vocab, m.embed_proj or m.hidden)))
    for name, shape in tensors:
        if name.startswith("block") and not name.startswith("block0."):
            continue
        kind = "embedding" if name.startswith("embed") else "block" if name.startswith("block") \
            else "head"
        leaf = name.split(".", 1)[1] if kind == "block" else name
        shape = list(shape)
        if leaf in ("q.weight", "k.weight", "v.weight", "fc1.weight", "gate.weight", "up.weight",
                    "q.bias", "k.bias", "v.bias", "fc1.bias", "gate.bias", "up.bias",
                    "embed.tokens", "head.logits"):
            shape[0] = shard(shape[0])          # output rows / vocabulary rows
        elif leaf in ("o.weight", "fc2.weight", "down.weight"):
            shape[1] = shard(shape[1])          # input columns
        out[kind] += math.prod(shape) * bytes_per_element
    return out


def naive_gemm_flops(m, microbatch, tensor_parallel=1):
    """Megatron's closed form of forward+backward GEMM FLOPs of one microbatch (whole model,
    all slices together, full s² attention, vocabulary V padded for width t):
    72·b·s·L·h²·(1 + s/(6h) + V/(12·h·L))."""
    b, s, L, h = microbatch, m.seq_len, m.n_layers, m.hidden
    V = m.padded_vocab(tensor_parallel)
    return 72 * b * s * L * h * h + 12 * b * s * s * L * h + 6 * b * s * h * V

# ---------------------------------------------------------------------------
# cost: operator latencies
# ---------------------------------------------------------------------------

def _ceil_div(a, b):
    return -(-a // b)


def naive_gemm_traffic(batch, m, k, n, e, acc, cap, w, d):
    """HBM bytes of a batch of M×K×N GEMMs: brute force over every tile size of the
    three loop orders of phaze.cost (exact integer arithmetic; cap may be fractional)."""
    if 0 in (batch, m, k, n):
        return 0
    kc = min(d, k)
    best = math.inf
    r = 1  # (a) output-stationary: power-of-two counts of row tiles × every tile width
    while True:
        tm = _ceil_div(m, r)
        for tn in range(1, n + 1):
            if acc * tm * tn + 2 * e * kc * (tm + tn) <= cap:
                best = min(best, e * (m * k * _ceil_div(n, tn) + k * n * _ceil_div(m, tm) + m * n))
        if tm <= 1:
            break
        r *= 2
    tn = min(n, w)  # (b) A row block resident: every block height
    for tm in range(1, m + 1):
        if e * tm * k + 2 * e * kc * tn + acc * tm * tn <= cap:
            best = min(best, e * (m * k + k * n * _ceil_div(m, tm) + m * n))
    tm = min(m, w)  # (c) B column block resident: every block width
    for tn in range(1, n + 1):
        if e * k * tn + 2 * e * kc * tm + acc * tm * tn <= cap:
            best = min(best, e * (m * k * _ceil_div(n, tn) + k * n + m * n))
    if best == math.inf:
        best = e * (2 * m * k * n + m * n)
    return batch * best


def naive_gemm_cycles(batch, m, k, n, w, d, cores):
    """Cycles of a batch of GEMMs on `cores` weight-stationary arrays, by dealing every
    pass to the cores round-robin and timing each core (rows cut in s = 1, 2, 4, … chunks
    up to the first power of two ≥ min(cores, M), each chunk padded to ⌈M/s⌉ rows)."""
    if 0 in (batch, m, k, n):
        return 0
    best = math.inf
    s = 1
    while True:
        rows = _ceil_div(m, s)
        n_passes = batch * _ceil_div(k, d) * _ceil_div(n, w) * s
        # core j runs passes j, j + cores, j + 2·cores, … each max(rows, d) cycles
        busy = max(len(range(j, n_passes, cores)) * max(rows, d) for j in range(min(cores, n_passes)))
        best = min(best, busy + d + w - 1)
        if s >= cores or s >= m:
            break
        s *= 2
    return best


def naive_op_latencies(op_graph, archs, acc_bytes=4, single_buffer_fraction=1.0):
    """phaze.cost.op_latencies one operator and one architecture at a time (no dedupe)."""
    n_ops, n_archs = op_graph.n_ops, len(archs)
    single = np.zeros((n_ops, n_archs))
    intra = np.zeros((n_ops, n_archs))
    e = op_graph.bytes_per_element
    for a, row in enumerate(archs):
        hz = float(row["clock_ghz"]) * 1e9
        bw = float(row["hbm_gb_per_s"]) * 1e9
        cap = float(row["buffer_mib"]) * 2 ** 20
        w, d, p = int(row["tc_width"]), int(row["tc_depth"]), int(row["num_tc"])
        lanes, nvc = int(row["vc_width"]), int(row["num_vc"])
        for i in range(n_ops):
            kind = int(op_graph.kind[i])
            moved = int(op_graph.bytes_in[i]) + int(op_graph.bytes_out[i])
            if kind == 3:
                g = int(op_graph.group_size[i])
                link = row["link_gb_per_s"] if g <= row["node_size"] else row["net_gb_per_s"]
                t = 0.0 if g == 1 else 2 * (g - 1) / g * int(op_graph.comm_bytes[i]) / (float(link) * 1e9)
                single[i, a] = intra[i, a] = t
                continue
            el, cpe = int(op_graph.elements[i]), float(op_graph.cycles_per_element[i])
            vec1 = (_ceil_div(el, lanes) * cpe / hz) if el else 0.0
            vecp = (_ceil_div(el, lanes * nvc) * cpe / hz) if el else 0.0
            if kind == 1:
                single[i, a] = max(vec1, moved / bw)
                intra[i, a] = max(vecp, moved / bw)
                continue
            b, m, k, n = (int(x) for x in op_graph.dims[i])
            extra = max(0, moved - e * b * (m * k + k * n + m * n))
            t1 = max(naive_gemm_cycles(b, m, k, n, w, d, 1) / hz,
                     (naive_gemm_traffic(b, m, k, n, e, acc_bytes, cap * single_buffer_fraction, w, d)
                      + extra) / bw)
            tp = max(naive_gemm_cycles(b, m, k, n, w, d, p) / hz,
                     (naive_gemm_traffic(b, m, k, n, e, acc_bytes, cap, w, d) + extra) / bw)
            if kind == 2:
                t1, tp = max(t1, vec1), max(tp, vecp)
            single[i, a], intra[i, a] = t1, tp
    return single, intra


# ---------------------------------------------------------------------------
# schedule: exhaustive search over modes and event orders (DAGs up to 7 operators)
# ---------------------------------------------------------------------------


def schedule_optimum(kind, preds, single, intra, num_tc, num_vc):
    """Minimum makespan of one layer on one chip by brute force.

    Tries every mode of every operator and every order of the operators that respects
    precedence ("event order"); each operator in turn starts at the earliest time at or
    after its predecessors' finish where the rules hold (checked directly against every
    operator already placed). Every active schedule arises this way, and some optimal
    schedule is active (shift anything left that can be), so the minimum over all of
    them is the optimum. Partial orders already as long as the best found are cut.

    kind: list of 0 GEMM / 1 vector / 2 fused / 3 collective; preds: list of lists.
    Returns (makespan, starts, modes)."""
    n = len(kind)
    uses_tc = [k in (0, 2) for k in kind]
    uses_vc = [k in (1, 2) for k in kind]
    compute = [k != 3 for k in kind]
    best = [math.inf, None, None]

    def overlaps(s1, f1, s2, f2):
        return s1 < f2 and s2 < f1

    def fits(j, mode, t, d, placed):
        if d <= 0:
            return True
        others = [(i, s, f, m) for (i, s, f, m) in placed if f > s and overlaps(t, t + d, s, f)]
        for i, s, f, m in others:
            if compute[j] and compute[i] and (mode == 1 or m == 1):
                return False  # an intra-op operator overlaps no other compute operator
            if not compute[j] and not compute[i]:
                return False  # one collective at a time on the link
        if not compute[j]:
            return True
        # one-core capacity: count at t and at every start inside [t, t + d)
        points = [t] + [s for (_, s, _, _) in others if t < s < t + d]
        for p in points:
            running = [(i, m) for (i, s, f, m) in others if s <= p < f]
            tcs = sum(1 for i, m in running if uses_tc[i] and m == 0) + (uses_tc[j] and mode == 0)
            vcs = sum(1 for i, m in running if uses_vc[i] and m == 0) + (uses_vc[j] and mode == 0)
            if tcs > num_tc or vcs > num_vc:
                return False
        return True

    def extend(placed, finish, makespan):
        if makespan >= best[0]:
            return
        if len(placed) == n:
            starts = [0.0] * n
            modes = [0] * n
            for i, s, f, m in placed:
                starts[i] = s
                modes[i] = m
            best[:] = [makespan, starts, modes]
            return
        done = {i for i, _, _, _ in placed}
        for j in range(n):
            if j in done or any(p not in done for p in preds[j]):
                continue
            est = max([finish[p] for p in preds[j]], default=0.0)
            for mode in ((0,) if kind[j] == 3 else (0, 1)):
                d = single[j] if mode == 0 else intra[j]
                candidates = sorted({est} | {f for (_, _, f, _) in placed if f >= est})
                t = next(c for c in candidates if fits(j, mode, c, d, placed))
                finish[j] = t + d
                extend(placed + [(j, t, t + d, mode)], finish, max(makespan, t + d))
                del finish[j]

    extend([], {}, 0.0)
    return best[0], best[1], best[2]

# ---------------------------------------------------------------------------
# placement: brute force over widths, cuts and data-parallel degrees
# ---------------------------------------------------------------------------

def placement_stage(problem, w, first, last, position):
    """(load seconds, memory bytes per device) of layers first..last at ``position``, from the README rules."""
    L = problem.forward_s.shape[1]
    bw_ = problem.bandwidth
    wait_in = problem.edge_bytes[w][first - 1] / bw_ if first > 0 else 0.0
    wait_out = problem.edge_bytes[w][last] / bw_ if last < L - 1 else 0.0
    t = wait_in
    for i in range(first, last + 1):
        t += problem.forward_s[w][i]
    fw_finish = t
    t = wait_out
    for i in reversed(range(first, last + 1)):
        t += problem.backward_s[w][i]
    bw_finish = t
    if problem.recompute and position > 1:
        t = 0.0
        for i in range(first, last + 1):
            t += problem.forward_s[w][i]
        t = max(t, wait_out)
        for i in reversed(range(first, last + 1)):
            t += problem.backward_s[w][i]
        load = fw_finish + t
    else:
        load = fw_finish + bw_finish
    P = sum(float(problem.param_bytes[w][i]) for i in range(first, last + 1))
    A = sum(float(problem.activation_bytes[w][i]) for i in range(first, last + 1))
    const = (3.0 if problem.optimizer == "adam" else 2.0) * P + A  # 2P (+P for Adam) + A
    if problem.recompute:
        stash = problem.edge_bytes[w][first - 1] if first > 0 else 0.0
    else:
        stash = A
    return load, const + (position - 1) * stash


def placement_dp_reference(problem):
    """Optimum by a plain dynamic programme, for chains too long to enumerate every cut.

    h[s][i] maps devices used -> least max-load of layers i.. cut into s stages at
    positions s..1 (no pruning, every device count kept); the first stage is
    enumerated separately and every d is tried.  Returns the time per batch, or
    math.inf when nothing fits.
    """
    L = problem.forward_s.shape[1]
    D, m = problem.devices, problem.microbatches
    best = math.inf
    for w in range(len(problem.widths)):
        t = int(problem.widths[w])
        if t > D:
            continue

        def devices_of(i, j):
            return t if any(problem.tensor_parallel[w][i:j + 1]) else 1

        h = {0: {L: {0: 0.0}}}
        for s in range(1, min(D, L) + 1):
            h[s] = {}
            for i in range(L):
                res = {}
                for j in range(i, L):
                    if j + 1 not in h[s - 1]:
                        continue
                    load, mem = placement_stage(problem, w, i, j, s)
                    if mem > problem.memory_bytes:
                        continue
                    a = devices_of(i, j)
                    for n, g in h[s - 1][j + 1].items():
                        if n + a <= D and max(load, g) < res.get(n + a, math.inf):
                            res[n + a] = max(load, g)
                if res:
                    h[s][i] = res
        for S in range(1, min(D, L) + 1):
            for j in range(L):
                if (S == 1 and j != L - 1) or j + 1 not in h[S - 1]:
                    continue
                load, mem = placement_stage(problem, w, 0, j, S)
                if mem > problem.memory_bytes:
                    continue
                p_first = sum(float(problem.param_bytes[w][i]) for i in range(j + 1))
                for n, g in h[S - 1][j + 1].items():
                    devices = n + devices_of(0, j)
                    for d in range(1, min(D, m) + 1):
                        if devices > D // d:
                            break
                        time = (max(load, g) * (math.ceil(m / d) + S - 1)
                                + 4 * (d - 1) * p_first / (problem.bandwidth * d))
                        best = min(best, time)
    return best


def placement_brute_force(problem):
    """Optimum over every width t <= devices, every cut of the chain and every d.

    Returns (time_per_batch, t, d, stage_bounds) with stage_bounds a list of
    (first, last) layer indices, or (math.inf, None, None, None) when nothing fits.
    Ties keep the smaller width (then the first plan met).
    """
    L = problem.forward_s.shape[1]
    D, m = problem.devices, problem.microbatches
    best = (math.inf, None, None, None)
    for w in sorted(range(len(problem.widths)), key=lambda w: problem.widths[w]):
        t = int(problem.widths[w])
        if t > D:
            continue
        for S in range(1, min(D, L) + 1):
            for cut in itertools.combinations(range(1, L), S - 1):
                edges = (0,) + cut + (L,)
                bounds = [(edges[k], edges[k + 1] - 1) for k in range(S)]
                loads, fits, devices = [], True, 0
                for k, (a, b) in enumerate(bounds):
                    load, mem = placement_stage(problem, w, a, b, S - k)
                    if mem > problem.memory_bytes:
                        fits = False
                        break
                    loads.append(load)
                    devices += t if any(problem.tensor_parallel[w][a:b + 1]) else 1
                if not fits:
                    continue
                p_first = sum(float(problem.param_bytes[w][i]) for i in range(bounds[0][0], bounds[0][1] + 1))
                for d in range(1, min(D, m) + 1):
                    if devices > D // d:
                        break
                    time = (max(loads) * (math.ceil(m / d) + S - 1)
                            + 4 * (d - 1) * p_first / (problem.bandwidth * d))
                    if time < best[0]:
                        best = (time, t, d, bounds)
    return best


# ---------------------------------------------------------------------------
# search: brute force over architectures and knobs through public evaluation
# ---------------------------------------------------------------------------


def search_compositions(n, parts):
    """Every way to cut a chain of n layers into `parts` contiguous non-empty stages (sizes)."""
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        yield [bounds[i + 1] - bounds[i] for i in range(parts)]


def search_brute_force(model, archs, *, devices, global_batch, microbatch, hbm_gib, recompute,
                       tensor_parallel, optimizer="sgd"):
    """Best samples/s over every (architecture, t, d, cut, microbatch, HBM, recomputation),
    each point scored by phaze.search.evaluate_point (which calls phaze.placement.evaluate).

    Returns (best samples/s, the arguments of the best point); 0.0 when nothing is feasible.
    """
    from phaze import search

    best, arg = 0.0, None
    n_chain = model.n_layers + 2
    for a in range(len(archs)):
        row = archs[a:a + 1]
        for mb in microbatch:
            m = global_batch // mb
            for hbm in hbm_gib:
                for rc in recompute:
                    for t in tensor_parallel:
                        if not model.valid_tensor_parallel(t):
                            continue
                        for d in range(1, min(devices, m) + 1):
                            for p in range(1, min(devices, n_chain) + 1):
                                for sizes in search_compositions(n_chain, p):
                                    r = search.evaluate_point(
                                        model, row, t, p, d, mb, rc, devices=devices,
                                        global_batch=global_batch, hbm_gib=hbm,
                                        optimizer=optimizer, stages=sizes, study=True)
                                    if r["feasible"] and r["samples_per_s"] > best:
                                        best = r["samples_per_s"]
                                        arg = (a, t, d, tuple(sizes), mb, hbm, rc)
    return best, arg


# ---------------------------------------------------------------------------
# cost, calibrated model: the efficiency rules one tile, one ring step at a time
# ---------------------------------------------------------------------------

def naive_tile_cycles(batch, m, k, n, w, d, cores, tile_m_mult, tile_n_mult, tile_k_mult,
                      cores_per_tile, k_stages):
    """Cycles of the calibrated tile rule by listing every output tile, dealing the tiles
    round-robin to the groups of arrays and adding up each group's K loops."""
    if 0 in (batch, m, k, n):
        return 0
    c = min(cores_per_tile, cores)
    groups = cores // c
    tm, tn, tk = tile_m_mult * w, tile_n_mult * w, tile_k_mult * d
    tiles = [(e, i, j) for e in range(batch) for i in range(0, m, tm) for j in range(0, n, tn)]
    k_steps = len(range(0, k, tk)) + (k_stages - 1)  # the K loop plus the pipeline's fill and drain
    step_cycles = tm * tn * tk / (c * w * d)         # a partial edge tile costs a full one
    busy = [0] * groups
    for t, _ in enumerate(tiles):
        busy[t % groups] += k_steps
    return max(busy) * step_cycles


def naive_protocol_rings(group, nodes, comm_bytes, bw, eff, passes=2):
    """NCCL's LL and LL128 rings step by step (docs/fidelity-sources.md §4.4), an all-reduce
    (``passes`` 2) or a reduce-scatter / all-gather (1): each protocol's base latency,
    passes·(n−1) steps paying its per-step latencies (the first passes·(nodes−1) crossing
    nodes; LL's in-node steps of a ring that spans nodes at ``ll_span_step_s``), each moving
    1/n of the bytes at its bus bandwidth: LL min(cap, bw/4) (bw/3 for one pass in one node),
    the cap that of one node / two nodes / more; LL128 ``ll128_share``·bw (0.7·bw with fewer
    than two ranks per node). ``bw``: the Simple ring's bus bandwidth (bytes/s). The times
    of the protocols the set runs there (none in one node when ``ll_link_gb_per_s`` is 0)."""
    out = []
    if nodes == 1 and float(eff["ll_link_gb_per_s"]) <= 0:
        return out
    steps, crossing = passes * (group - 1), passes * (nodes - 1)
    cap = float(eff["ll_link_gb_per_s"] if nodes == 1 else eff["ll_net2_gb_per_s"]
                if nodes == 2 else eff["ll_net_gb_per_s"]) * 1e9
    if cap > 0:
        ll_bw = min(cap, bw / 4 if (passes == 2 or nodes > 1) else bw / 3)
        lat = float(eff["ll_latency_s"])
        for step in range(steps):
            lat += float(eff["ll_net_step_s"] if step < crossing else
                         eff["ll_span_step_s"] if nodes > 1 else eff["ll_link_step_s"])
            lat += comm_bytes / group / ll_bw
        out.append(lat)
    if float(eff["ll128_share"]) > 0:
        share = 0.7 if group < 2 * nodes else float(eff["ll128_share"])
        lat = float(eff["ll128_latency_s"])
        for step in range(steps):
            lat += float(eff["ll128_net_step_s"] if step < crossing
                         else eff["ll128_link_step_s"])
            lat += comm_bytes / group / (share * bw)
        out.append(lat)
    return out


def naive_ring_allreduce(group, comm_bytes, node_size, link_bw, net_bw, eff, per_node=1,
                         tree=False, protocols=False):
    """A ring all-reduce step by step: 2(n−1) steps, the first 2(nodes−1) of them crossing
    a node boundary (NCCL's count), each paying its tier's latency; then the bytes.
    ``per_node``: NICs the ring's ranks in one node drive between nodes (the step model's
    placed rings: one NIC per device, at most the in-node link's bandwidth in all; the
    cost model's contiguous operator collectives keep 1). ``tree`` (the step model's):
    across nodes the faster of the ring and NCCL's tree — up a chain of the group/nodes
    ranks of a node and ⌊log2 nodes⌋ levels of a binary tree, then down again, each step
    paying its tier's latency, the bytes at 0.92 of the ring's bus bandwidth. ``protocols``
    (the step model's): the ring at the fastest of NCCL's Simple, LL and LL128
    (:func:`naive_protocol_rings`)."""
    if group <= 1 or comm_bytes == 0:
        return 0.0
    nodes = 1 if group <= node_size else -(-group // node_size)
    latency = float(eff["coll_latency_s"])
    for step in range(2 * (group - 1)):
        latency += float(eff["net_step_s"] if step < 2 * (nodes - 1) else eff["link_step_s"])
    if group <= node_size:
        bw = link_bw * float(eff["link_efficiency"])
    else:
        bw = net_bw * float(eff["net_efficiency"])
        if per_node > 1:
            bw = min(per_node * bw, link_bw * float(eff["link_efficiency"]))
    ring = latency + 2 * (group - 1) / group * comm_bytes / bw
    if protocols:
        ring = min([ring] + naive_protocol_rings(group, nodes, comm_bytes, bw, eff))
    if not tree or nodes <= 1:
        return ring
    levels = 0
    while (2 << levels) <= nodes:
        levels += 1
    up = (max(1, group // nodes) - 1) * float(eff["link_step_s"]) \
        + levels * float(eff["net_step_s"])
    tree_s = float(eff["coll_latency_s"]) + 2 * up + 2 * (group - 1) / group * comm_bytes / (
        0.92 * bw)
    return min(ring, tree_s)


#: The unfused attention core's operators, written out (phaze.graph._opgraph.UNFUSED_ATTENTION_OPS).
ATTENTION_CORE_NAMES = ("attn_scores", "softmax", "attn_dropout", "attn_context", "attn_context.dX",
                        "attn_context.dW", "attn_dropout.bwd", "softmax.bwd", "attn_scores.dX",
                        "attn_scores.dW")


def naive_op_latencies_calibrated(op_graph, archs, eff_rows, acc_bytes=4, single_buffer_fraction=1.0):
    """phaze.cost.op_latencies(model="calibrated") one operator and one architecture at a time;
    ``eff_rows``: one phaze.arch.efficiency.EFFICIENCY_DTYPE row per architecture."""
    n_ops, n_archs = op_graph.n_ops, len(archs)
    single = np.zeros((n_ops, n_archs))
    intra = np.zeros((n_ops, n_archs))
    e = op_graph.bytes_per_element
    for a, row in enumerate(archs):
        eff = eff_rows[a]
        hz = float(row["clock_ghz"]) * 1e9
        bw_plain = float(row["hbm_gb_per_s"]) * 1e9 * float(eff["hbm_efficiency"])
        bw_attention = float(row["hbm_gb_per_s"]) * 1e9 * float(eff["attention_hbm_efficiency"])
        rate = hz * float(eff["tile_efficiency"])
        launch = float(eff["launch_s"])
        cap = float(row["buffer_mib"]) * 2 ** 20
        w, d, p = int(row["tc_width"]), int(row["tc_depth"]), int(row["num_tc"])
        lanes, nvc = int(row["vc_width"]), int(row["num_vc"])
        tile = tuple(int(eff[f]) for f in ("tile_m_mult", "tile_n_mult", "tile_k_mult", "cores_per_tile",
                                           "k_stages"))
        for i in range(n_ops):
            kind = int(op_graph.kind[i])
            moved = int(op_graph.bytes_in[i]) + int(op_graph.bytes_out[i])
            # the unfused attention core's operators, by name (not the kernel's flag array)
            bw = bw_attention if op_graph.names[i] in ATTENTION_CORE_NAMES else bw_plain
            if kind == 3:
                single[i, a] = intra[i, a] = naive_ring_allreduce(
                    int(op_graph.group_size[i]), int(op_graph.comm_bytes[i]), int(row["node_size"]),
                    float(row["link_gb_per_s"]) * 1e9, float(row["net_gb_per_s"]) * 1e9, eff)
                continue
            el, cpe = int(op_graph.elements[i]), float(op_graph.cycles_per_element[i])
            vec1 = (_ceil_div(el, lanes) * cpe / hz) if el else 0.0
            vecp = (_ceil_div(el, lanes * nvc) * cpe / hz) if el else 0.0
            if kind == 1:
                single[i, a] = max(vec1, moved / bw) + launch
                intra[i, a] = max(vecp, moved / bw) + launch
                continue
            b, m, k, n = (int(x) for x in op_graph.dims[i])
            extra = max(0, moved - e * b * (m * k + k * n + m * n))
            compute1 = max(naive_gemm_cycles(b, m, k, n, w, d, 1), naive_tile_cycles(b, m, k, n, w, d, 1, *tile))
            computep = max(naive_gemm_cycles(b, m, k, n, w, d, p), naive_tile_cycles(b, m, k, n, w, d, p, *tile))
            t1 = max(compute1 / rate,
                     (naive_gemm_traffic(b, m, k, n, e, acc_bytes, cap * single_buffer_fraction, w, d)
                      + extra) / bw)
            tp = max(computep / rate, (naive_gemm_traffic(b, m, k, n, e, acc_bytes, cap, w, d) + extra) / bw)
            if kind == 2:
                t1, tp = max(t1, vec1), max(tp, vecp)
            single[i, a], intra[i, a] = t1 + launch, tp + launch
    return single, intra


def naive_p2p_seconds(nbytes, row, eff, inter_node):
    """One point-to-point transfer: the tier's latency plus bytes over its achievable bandwidth."""
    if nbytes == 0:
        return 0.0
    tier = "net" if inter_node else "link"
    bw = float(row[f"{tier}_gb_per_s"]) * 1e9 * float(eff[f"{tier}_p2p_efficiency"])
    return float(eff[f"{tier}_p2p_latency_s"]) + nbytes / bw


# ---------------------------------------------------------------------------
# step: the training step of a fixed Megatron-LM plan (phaze.step)
# ---------------------------------------------------------------------------

def naive_1f1b_makespan(fwd, bwd, m, hop=None):
    """Megatron's 1F1B (PipeDream-Flush) simulated kernel by kernel: stage r runs
    min(p − r − 1, m) warm-up forwards, then alternates one forward and one backward, then
    drains its backwards; F(r, i) waits for F(r − 1, i) (+ ``hop[r-1]``), B(r, i) for
    F(r, i) and B(r + 1, i) (+ ``hop[r]``). ``fwd``/``bwd``: seconds per microbatch per
    stage; returns the time the last backward ends."""
    p = len(fwd)
    hop = [0.0] * max(p - 1, 0) if hop is None else list(hop)
    orders = []
    for r in range(p):
        warm = min(p - r - 1, m)
        seq = [("F", i) for i in range(warm)]
        nf, nb = warm, 0
        while nf < m:
            seq.append(("F", nf))
            nf += 1
            seq.append(("B", nb))
            nb += 1
        seq += [("B", i) for i in range(nb, m)]
        orders.append(seq)
    done = {}
    clock = [0.0] * p
    pos = [0] * p
    while any(pos[r] < len(orders[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, i = orders[r][pos[r]]
                if kind == "F":
                    deps = [] if r == 0 else [("F", r - 1, i, hop[r - 1])]
                else:
                    deps = [("F", r, i, 0.0)] + ([] if r == p - 1 else [("B", r + 1, i, hop[r])])
                if any((k, s, j) not in done for k, s, j, _ in deps):
                    break
                start = max([clock[r]] + [done[(k, s, j)] + lag for k, s, j, lag in deps])
                clock[r] = start + (fwd[r] if kind == "F" else bwd[r])
                done[(kind, r, i)] = clock[r]
                pos[r] += 1
                progressed = True
        assert progressed, "1F1B order deadlocked"
    return max(clock)


def naive_korthikanti_activation_bytes(s, b, h, a, t, layers, recompute):
    """Korthikanti et al. 2022, Table 2: bytes of ``layers`` transformer layers' activations,
    tensor parallel t, no sequence parallelism: s·b·h·(10 + 24/t + 5·a·s/(h·t)) per layer,
    or the 2·s·b·h layer input with full recomputation."""
    per = 2 * s * b * h if recompute == "full" else s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    return per * layers


def naive_adam_seconds(n_params, bytes_per_param, hbm_bytes_per_s, hbm_efficiency):
    """Memory-bound optimizer step: bytes moved per parameter over achievable HBM bandwidth."""
    return n_params * bytes_per_param / (hbm_bytes_per_s * hbm_efficiency)


def naive_korthikanti_table2(s, b, h, a, t, mode):
    """Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer per GPU,
    16-bit, for ``mode`` none (tensor parallel), seq (+ sequence parallel), sel (+ selective
    recomputation), seqsel (both) or full (the 2·s·b·h layer input)."""
    core = 5 * a * s / (h * t)
    per = {"none": 10 + 24 / t + core, "seq": 34 / t + core, "sel": 10 + 24 / t,
           "seqsel": 34 / t, "full": 2}[mode]
    return s * b * h * per


def naive_interleaved_makespan(fwd, bwd, p, v, m):
    """Megatron-LM's interleaved 1F1B simulated chunk by chunk on ``p`` devices with ``v``
    model chunks each (virtual stage k = c·p + r on device r), equal chunks of ``fwd`` /
    ``bwd`` seconds, no transfer time. Forward order of device r: chunk-microbatch i runs
    chunk (i // p) % v of microbatch (i // (p·v))·p + i % p (backwards: chunks reversed);
    2(p − r − 1) + (v − 1)·p warm-up forwards (at most m·v), then one forward and one backward alternately, then the remaining backwards. F(k, j) waits for
    F(k − 1, j); B(k, j) for F(k, j) and B(k + 1, j). Returns the makespan (s)."""
    n = m * v
    def fwd_id(i):
        return (i // (p * v)) * p + i % p, (i // p) % v
    def bwd_id(i):
        mb, c = fwd_id(i)
        return mb, v - 1 - c
    orders = []
    for r in range(p):
        warm = min(2 * (p - r - 1) + (v - 1) * p, n)
        seq = [("F",) + fwd_id(i) for i in range(warm)]
        nf, nb = warm, 0
        while nf < n:
            seq.append(("F",) + fwd_id(nf))
            nf += 1
            seq.append(("B",) + bwd_id(nb))
            nb += 1
        seq += [("B",) + bwd_id(i) for i in range(nb, n)]
        orders.append(seq)
    done, clock, pos = {}, [0.0] * p, [0] * p
    while any(pos[r] < len(orders[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, mb, c = orders[r][pos[r]]
                k = c * p + r
                if kind == "F":
                    deps = [] if k == 0 else [("F", k - 1, mb)]
                else:
                    deps = [("F", k, mb)] + ([] if k == p * v - 1 else [("B", k + 1, mb)])
                if any(dep not in done for dep in deps):
                    break
                start = max([clock[r]] + [done[dep] for dep in deps])
                clock[r] = start + (fwd if kind == "F" else bwd)
                done[(kind, k, mb)] = clock[r]
                pos[r] += 1
                progressed = True
        assert progressed, "interleaved order deadlocked"
    return max(clock)


def naive_interleaved_in_flight(p, v, r, m):
    """Chunk-microbatches whose activations device r holds at most under Megatron's
    interleaved order (:func:`naive_interleaved_makespan`), counted by walking the order."""
    n = m * v
    warm = min(2 * (p - r - 1) + (v - 1) * p, n)
    held = peak = 0
    nf = nb = 0
    for _ in range(warm):
        held += 1; nf += 1; peak = max(peak, held)
    while nf < n:
        held += 1; nf += 1; peak = max(peak, held)
        held -= 1; nb += 1
    return peak


def naive_ring_gather_seconds(n, nbytes_total, nodes, link_bw, net_bw, eff, per_node=1,
                              protocols=False):
    """Ring all-gather / reduce-scatter of a ``nbytes_total`` tensor on n ranks spread
    over ``nodes`` nodes, step by step: n − 1 steps each moving nbytes_total/n over the
    slowest tier, α per step by tier (``nodes − 1`` steps cross a node); between nodes over
    the ``per_node`` NICs of the ranks in each node (capped by the in-node link).
    ``protocols`` (the step model's): the fastest of NCCL's Simple, LL and LL128
    (:func:`naive_protocol_rings`)."""
    if n <= 1:
        return 0.0
    x = nodes - 1
    bw = (eff.net_efficiency * net_bw if nodes > 1 else eff.link_efficiency * link_bw) * 1e9
    if nodes > 1 and per_node > 1:
        bw = min(per_node * bw, eff.link_efficiency * link_bw * 1e9)
    total = eff.coll_latency_s
    for step in range(n - 1):
        total += (eff.net_step_s if step < x else eff.link_step_s) + nbytes_total / n / bw
    if protocols:
        fields = {f.name: getattr(eff, f.name) for f in dataclasses.fields(eff)}
        total = min([total] + naive_protocol_rings(n, nodes, nbytes_total, bw, fields, 1))
    return total


def naive_megatron_groups(t, cp, ep, d, p):
    """Rank groups of every pipeline stage as Megatron-Core's RankGenerator builds them,
    from explicit rank coordinates (no closed form): the dense layers in the order
    tp-cp-dp-pp (rank = i + t·(k + cp·(j + d·r)) for tensor index i, context index k,
    data index j, stage r), the experts in tp-ep-dp-pp with expert-tensor-parallel = t
    (rank = i + t·(e + ep·(f + (cp·d/ep)·r)), expert index e, expert-data index f).
    Returns per stage a dict of lists of rank lists: 'cp' (context-parallel rings),
    'dp_cp' (the cp·d ranks reducing dense gradients), 'ep' (expert-parallel groups),
    'edp' (expert-data-parallel groups)."""
    edp = cp * d // ep
    out = []
    for r in range(p):
        dense = {}
        for i in range(t):
            for k in range(cp):
                for j in range(d):
                    dense[(i, k, j)] = i + t * (k + cp * (j + d * r))
        expert = {}
        for i in range(t):
            for e in range(ep):
                for f in range(edp):
                    expert[(i, e, f)] = i + t * (e + ep * (f + edp * r))
        out.append(dict(
            cp=[[dense[(i, k, j)] for k in range(cp)] for i in range(t) for j in range(d)],
            dp_cp=[sorted(dense[(i, k, j)] for k in range(cp) for j in range(d))
                   for i in range(t)],
            ep=[[expert[(i, e, f)] for e in range(ep)] for i in range(t) for f in range(edp)],
            edp=[[expert[(i, e, f)] for f in range(edp)] for i in range(t) for e in range(ep)]))
    return out
