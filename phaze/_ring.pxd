# cython: language_level=3
"""C-level collectives shared by the compiled kernels of ``phaze.cost`` and ``phaze.step``
(the formulas are documented in ``phaze/collectives.py``; ``_collectives.pyx`` gives them
their Python face there).

``inline`` here, not in a .pyx, because they sit in the innermost loops of the step and
operator kernels: a call across extension modules would go through a function pointer.
Each function is the literal transcription of the numba kernel it replaced, in the same
order of floating-point operations (tests/test_collectives.py and the reference sweeps
check the numbers bit for bit). ``Fabric`` is ``collectives.FABRIC_DTYPE``; a record whose
first fields are these (the step model's ``ROW_PARAMS``) is read through a ``Fabric*`` to
its start. All-reduce, reduce-scatter and all-gather rings take NCCL's protocol choice
(:func:`protocol_ring`); with the LL/LL128 fields 0 they are the Simple ring bit for bit.
"""
from libc.math cimport ceil
from libc.stdint cimport int64_t

#: The operator kinds' collective codes (``phaze.graph.COLLECTIVE_KINDS``; checked equal
#: to the graph's at import of ``_collectives``).
cdef enum:
    C_NONE = 0
    C_ALL_REDUCE = 1
    C_REDUCE_SCATTER = 2
    C_ALL_GATHER = 3
    C_ALL_TO_ALL = 4
    C_P2P = 5


cdef packed struct Fabric:
    # NCCL's Simple protocol (the α–β form every collective is priced in)
    double coll_latency_s
    double link_step_s
    double net_step_s
    double link_bw
    double net_bw
    # NCCL's LL and LL128 protocols (:func:`protocol_ring`; docs/fidelity-sources.md §4.4):
    # their α parts (s), LL's bus-bandwidth caps (bytes/s: one node, two nodes, more) and
    # LL128's share of the Simple bus bandwidth; a cap or share of 0: not run
    double ll_latency_s
    double ll_link_step_s
    double ll_span_step_s
    double ll_net_step_s
    double ll_link_bw
    double ll_net2_bw
    double ll_net_bw
    double ll128_latency_s
    double ll128_link_step_s
    double ll128_net_step_s
    double ll128_share



cdef inline double ring_seconds(double nbytes, int64_t n, int64_t nodes, int64_t passes,
                                double coll_latency_s, double link_step_s, double net_step_s,
                                double link_bw, double net_bw) noexcept nogil:
    """A ring of n ranks on ``nodes`` nodes going ``passes`` times round, seconds."""
    cdef int64_t x
    cdef double alpha, bw
    if n <= 1:
        return 0.0
    x = passes * (nodes - 1)
    alpha = coll_latency_s + <double>(passes * (n - 1) - x) * link_step_s \
        + <double>x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + <double>(passes * (n - 1)) / <double>n * nbytes / bw


cdef inline double exchange_seconds(double nbytes, int64_t n, int64_t nodes,
                                    double coll_latency_s, double link_step_s,
                                    double net_step_s, double link_bw,
                                    double net_bw) noexcept nogil:
    """A point-to-point ring exchange bringing ``nbytes`` to each of n ranks, seconds."""
    cdef int64_t x
    cdef double alpha, bw
    if n <= 1:
        return 0.0
    x = nodes - 1
    alpha = coll_latency_s + <double>(n - 1 - x) * link_step_s + <double>x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + nbytes / bw


cdef inline double ring(double nbytes, int64_t n, int64_t nodes, int64_t passes,
                        const Fabric* f) noexcept nogil:
    return ring_seconds(nbytes, n, nodes, passes, f.coll_latency_s, f.link_step_s,
                        f.net_step_s, f.link_bw, f.net_bw)


cdef inline double protocol_ring(double nbytes, int64_t n, int64_t nodes, int64_t passes,
                                 const Fabric* f) noexcept nogil:
    """A ring all-reduce (``passes`` 2), reduce-scatter or all-gather (1) as NCCL prices it
    (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime): the least of its
    three protocols' times, each α + β with its own base latency, per-step latencies and
    bus bandwidth (docs/fidelity-sources.md §4.4). Simple is :func:`ring` (bit for bit the
    one-protocol price). LL: α of ``ll_latency_s`` and the per-step latencies (in-node
    steps of a ring spanning nodes at ``ll_span_step_s``), bus bandwidth min(cap, factor ·
    the tier's), factor 1/4 for an all-reduce or across nodes, 1/3 otherwise, cap
    ``ll_link_bw`` in one node, ``ll_net2_bw`` on two nodes, ``ll_net_bw`` on more. LL128:
    its α parts, bus bandwidth ``ll128_share`` (0.92) of the tier's, 0.7 with fewer than
    two ranks per node. A cap or share of 0 leaves the protocol out; ``ll_link_bw`` 0 leaves
    both out in one node (a chip whose in-node curve is a fit to measured NCCL: already
    NCCL's choice)."""
    cdef double best = ring(nbytes, n, nodes, passes, f)
    cdef double base, cap, bw, factor, share, t
    if n <= 1 or (nodes <= 1 and f.ll_link_bw <= 0.0):
        return best
    if nodes > 1:
        base = f.net_bw
        cap = f.ll_net2_bw if nodes == 2 else f.ll_net_bw
    else:
        base = f.link_bw
        cap = f.ll_link_bw
    if cap > 0.0:
        factor = 0.25 if (passes == 2 or nodes > 1) else 1.0 / 3.0
        bw = factor * base
        if cap < bw:
            bw = cap
        t = ring_seconds(nbytes, n, nodes, passes, f.ll_latency_s,
                         f.ll_span_step_s if nodes > 1 else f.ll_link_step_s,
                         f.ll_net_step_s, bw, bw)
        if t < best:
            best = t
    if f.ll128_share > 0.0:
        share = 0.7 if <double>n < 2.0 * <double>nodes else f.ll128_share
        bw = share * base
        t = ring_seconds(nbytes, n, nodes, passes, f.ll128_latency_s, f.ll128_link_step_s,
                         f.ll128_net_step_s, bw, bw)
        if t < best:
            best = t
    return best


cdef inline int64_t log2_floor(int64_t x) noexcept nogil:
    cdef int64_t k = 0
    while x > 1:
        x >>= 1
        k += 1
    return k


cdef inline double tree_all_reduce(double nbytes, int64_t n, int64_t nodes,
                                   const Fabric* f) noexcept nogil:
    """NCCL's tree all-reduce of n ranks on ``nodes`` > 1 nodes (a chain in each node, double
    binary trees between them; src/graph/tuning.cc): latency coll_latency_s + 2·((n/nodes −
    1)·link_step_s + ⌊log2 nodes⌋·net_step_s) — reduce up, broadcast down — and the ring's
    bandwidth term at 0.92 of its bus bandwidth (tuning.cc: ``busBw = min(busBw * .92,
    nChannels * perChMaxTreeBw)`` for the tree's AllReduce)."""
    cdef int64_t g = n // nodes
    if g < 1:
        g = 1
    return f.coll_latency_s + 2.0 * (<double>(g - 1) * f.link_step_s
                                     + <double>log2_floor(nodes) * f.net_step_s) \
        + 2.0 * <double>(n - 1) / <double>n * nbytes / (0.92 * f.net_bw)


cdef inline double all_reduce(double nbytes, int64_t n, int64_t nodes,
                              const Fabric* f) noexcept nogil:
    """A ring all-reduce, or across nodes the faster of the ring and NCCL's tree (NCCL's
    tuner picks the algorithm of the least modelled time); the ring at the fastest of its
    protocols (:func:`protocol_ring`), the tree Simple's."""
    cdef double r = protocol_ring(nbytes, n, nodes, 2, f)
    cdef double t
    if n <= 1 or nodes <= 1:
        return r
    t = tree_all_reduce(nbytes, n, nodes, f)
    return t if t < r else r


cdef inline double reduce_scatter(double nbytes, int64_t n, int64_t nodes,
                                  const Fabric* f) noexcept nogil:
    return protocol_ring(nbytes, n, nodes, 1, f)


cdef inline double all_gather(double nbytes, int64_t n, int64_t nodes,
                              const Fabric* f) noexcept nogil:
    return protocol_ring(nbytes, n, nodes, 1, f)


cdef inline double all_to_all(double nbytes, int64_t n, int64_t nodes,
                              const Fabric* f) noexcept nogil:
    """One Simple ring pass: NCCL runs an all-to-all as grouped send/receive, outside the
    tuner's per-protocol model (tuning.cc prices all-reduce, reduce-scatter, all-gather,
    broadcast and reduce)."""
    return ring(nbytes, n, nodes, 1, f)


cdef inline double p2p(double nbytes, int64_t n, int64_t nodes,
                       const Fabric* f) noexcept nogil:
    return exchange_seconds(nbytes, n, nodes, f.coll_latency_s, f.link_step_s,
                            f.net_step_s, f.link_bw, f.net_bw)


cdef inline Fabric spread(const Fabric* f, int64_t per_node) noexcept nogil:
    """The fabric a group with ``per_node`` ranks in each node sees between nodes: one NIC
    per device, rail-optimised (device i of every node on rail i), and NCCL runs one
    channel per rail, so the node's traffic leaves over min(per_node, node_size) NICs —
    the per-device network bandwidth times ``per_node``, capped by the in-node link that
    feeds them (docs/fidelity-sources.md, "Collectives across nodes use every NIC")."""
    cdef Fabric g = f[0]
    cdef double w
    if per_node > 1:
        w = <double>per_node * f.net_bw
        g.net_bw = w if w < f.link_bw else f.link_bw
    return g


cdef inline double a2a_alpha(int64_t n, int64_t nodes, const Fabric* f,
                             int64_t* g) noexcept nogil:
    """The prologue every all-to-all across ``nodes`` > 1 nodes shares: the ranks per node
    (into ``g``, at least 1) and the latency of one ring pass of n ranks, nodes − 1 of its
    steps between nodes."""
    cdef int64_t x = nodes - 1
    g[0] = n // nodes
    if g[0] < 1:
        g[0] = 1
    return f.coll_latency_s + <double>(n - 1 - x) * f.link_step_s + <double>x * f.net_step_s


cdef inline double split_all_to_all(double nbytes, int64_t n, int64_t nodes,
                                    const Fabric* f) noexcept nogil:
    """An all-to-all of n ranks on ``nodes`` nodes (n/nodes ranks in each), ``nbytes``
    dispatched by each rank (nbytes/n to every peer): the part for peers in its node over
    the in-node link, the rest through its own NIC, concurrently; the latency of one ring
    pass. In one node the ring pass itself ((n − 1)/n · nbytes over the link)."""
    cdef int64_t g
    cdef double alpha, intra, inter
    if n <= 1:
        return 0.0
    if nodes <= 1:
        return ring(nbytes, n, 1, 1, f)
    alpha = a2a_alpha(n, nodes, f, &g)
    intra = <double>(g - 1) / <double>n * nbytes / f.link_bw
    inter = <double>(n - g) / <double>n * nbytes / f.net_bw
    return alpha + (intra if intra > inter else inter)


cdef inline double dedup_all_to_all(double nbytes, double token_bytes, int64_t topk,
                                    int64_t node_limit, int64_t n, int64_t nodes,
                                    const Fabric* f) noexcept nogil:
    """The token dispatch of DeepEP's normal kernels (deepseek-ai/DeepEP: each token crosses
    to each destination node once over RDMA, through the rank's own NIC, then reaches its
    experts' GPUs over NVLink) on n ranks over ``nodes`` nodes: ``nbytes`` the rank's k
    routed copies (as :func:`split_all_to_all` takes them), ``token_bytes`` one copy of its
    tokens. The network carries each token once per distinct remote node its k = ``topk``
    copies reach — (nodes − 1)·(1 − (1 − 1/nodes)^k) on average under balanced routing, at
    most ``node_limit``·(nodes − 1)/nodes with DeepSeek-V3's node-limited routing (0: no
    limit); the in-node link the copies for peers of the node plus the forwarding of the
    copies that arrived for the node's other GPUs. Both at once; α of one ring pass."""
    cdef int64_t g, _k
    cdef int64_t x = nodes - 1
    cdef double alpha, intra, inter, miss, remote, limit
    if n <= 1:
        return 0.0
    if nodes <= 1:
        return ring(nbytes, n, 1, 1, f)
    alpha = a2a_alpha(n, nodes, f, &g)
    miss = 1.0
    for _k in range(topk):
        miss *= 1.0 - 1.0 / <double>nodes
    remote = <double>x * (1.0 - miss)
    if node_limit > 0:
        limit = <double>node_limit * <double>x / <double>nodes
        if limit < remote:
            remote = limit
    inter = token_bytes * remote / f.net_bw
    intra = (<double>(g - 1) / <double>n * nbytes
             + <double>(n - g) / <double>n * <double>(g - 1) / <double>g * nbytes) / f.link_bw
    return alpha + (intra if intra > inter else inter)


cdef inline double placed(int64_t kind, double nbytes, int64_t n, int64_t nodes,
                          const Fabric* f) noexcept nogil:
    """A collective of ``kind`` over n ranks on ``nodes`` nodes (0 for none)."""
    if kind == C_ALL_REDUCE:
        return all_reduce(nbytes, n, nodes, f)
    if kind == C_REDUCE_SCATTER:
        return reduce_scatter(nbytes, n, nodes, f)
    if kind == C_ALL_GATHER:
        return all_gather(nbytes, n, nodes, f)
    if kind == C_ALL_TO_ALL:
        return all_to_all(nbytes, n, nodes, f)
    if kind == C_P2P:
        return p2p(nbytes, n, nodes, f)
    return 0.0


cdef inline int64_t ring_nodes(int64_t n, int64_t node_size) noexcept nogil:
    """Nodes spanned by the contiguous ranks 0..n−1 (n ≥ 1)."""
    return (n - 1) // node_size + 1


cdef inline int64_t span_nodes(int64_t first, int64_t stride, int64_t count,
                               int64_t node_size) noexcept nogil:
    """Distinct nodes of the ranks first + k·stride, k = 0..count−1 (increasing ranks: with
    stride ≤ node_size no node between the first and the last is skipped; with a larger
    stride every rank has a node of its own). The placement rule of every group the step
    prices (``phaze/step/_kernels.pyx``'s rank layout) and of its energy."""
    if count <= 0:
        return 0
    if stride > node_size:
        return count
    return (first + (count - 1) * stride) // node_size - first // node_size + 1


cdef inline double ring_net_share(int64_t n, int64_t nodes) noexcept nogil:
    """The share of a ring collective's bytes that crosses nodes: of the n hops of the
    closed ring of n ranks on ``nodes`` nodes (each node's ranks adjacent on it), one leaves
    each node — nodes of n (all when every rank has a node of its own); 0 in one node."""
    if n <= 1 or nodes <= 1:
        return 0.0
    return <double>nodes / <double>n


cdef inline double boundary_net_share(int64_t p, int64_t stage_ranks,
                                      int64_t node_size) noexcept nogil:
    """The share of a pipeline's boundary sends that cross nodes, on Megatron's layout (rank
    a·S + o of stage a sends to rank (a + 1)·S + o, S = ``stage_ranks`` = t·cp·d): of the
    (p − 1)·S sends, those whose two ranks sit on different nodes of ``node_size`` — all
    when S ≥ node_size; 0 for one stage."""
    cdef int64_t a, o, crossing = 0
    if p <= 1:
        return 0.0
    if stage_ranks >= node_size:
        return 1.0
    for a in range(p - 1):
        for o in range(stage_ranks):
            if (a * stage_ranks + o) // node_size != ((a + 1) * stage_ranks + o) // node_size:
                crossing += 1
    return <double>crossing / <double>((p - 1) * stage_ranks)


cdef inline double a2a_net_share(int64_t n, int64_t nodes) noexcept nogil:
    """The share of an all-to-all's bytes that crosses nodes, as :func:`split_all_to_all`
    sends them: of the n − 1 peers a rank sends 1/n of its bytes to, n − g sit on other
    nodes (g = n / nodes ranks in each, at least 1); 0 in one node."""
    cdef int64_t g
    if n <= 1 or nodes <= 1:
        return 0.0
    g = n // nodes
    if g < 1:
        g = 1
    return <double>(n - g) / <double>(n - 1)


cdef inline double contiguous_all_reduce(double group, double comm_bytes, double node_size,
                                         double link_bytes_per_s, double net_bytes_per_s,
                                         double coll_latency_s, double link_step_s,
                                         double net_step_s, double link_efficiency,
                                         double net_efficiency) noexcept nogil:
    """The operator cost model's ring all-reduce over ``group`` contiguous devices."""
    cdef double steps, inter, bw, alpha
    if group <= 1.0 or comm_bytes == 0.0:
        return 0.0
    steps = 2.0 * (group - 1.0)
    if group <= node_size:
        inter = 0.0
        bw = link_bytes_per_s * link_efficiency
    else:
        inter = 2.0 * (ceil(group / node_size) - 1.0)
        bw = net_bytes_per_s * net_efficiency
    alpha = coll_latency_s + (steps - inter) * link_step_s + inter * net_step_s
    return alpha + steps / group * comm_bytes / bw
