"""NCCL's protocol choice for ring collectives, as plain Python (the reference the compiled
``phaze/_ring.pxd`` ``protocol_ring`` is held to; docs/fidelity-sources.md §4.4).

NCCL's tuner (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel / ncclTopoGetAlgoTime, read
at v2.12.7-1 and v2.20.3-1) gives every (algorithm, protocol) pair a latency and a bus
bandwidth and runs the pair of least ``lat + bytes / bw``. For the ring and each protocol
p: latency = baseLat[p] + (steps − x)·intra step[p] + x·net step[p], x the steps crossing
nodes; bus bandwidth Simple's busBw, LL min(llMaxBw, busBw/4) (1/3 for a reduce-scatter or
all-gather in one node), LL128 0.92·busBw (0.7·busBw with fewer than two ranks per node).
Each protocol's time is computed here on its own, then the least is taken, in the order of
operations of the compiled form (so the two agree bit for bit).
"""

PROTOCOLS = ("simple", "ll", "ll128")


def _ring(nbytes, n, nodes, passes, lat, intra, net, bw):
    """α + β of one protocol's ring (phaze.collectives.ring_seconds' order of operations)."""
    x = passes * (nodes - 1)
    alpha = lat + (passes * (n - 1) - x) * intra + x * net
    return alpha + passes * (n - 1) / n * float(nbytes) / bw


def protocol_seconds(nbytes, n, nodes, passes, fabric):
    """{protocol: seconds} of a ring all-reduce (``passes`` 2), reduce-scatter or all-gather
    (1) over n > 1 ranks on ``nodes`` nodes, for each protocol NCCL would run on ``fabric``
    (a mapping with the fields of ``phaze.collectives.FABRIC_DTYPE``)."""
    f = {k: float(fabric[k]) for k in fabric.dtype.names} if hasattr(fabric, "dtype") \
        else {k: float(v) for k, v in fabric.items()}
    get = lambda k: f.get(k, 0.0)  # noqa: E731 - a field left out: protocol not run
    base = f["net_bw"] if nodes > 1 else f["link_bw"]
    out = {"simple": _ring(nbytes, n, nodes, passes, f["coll_latency_s"], f["link_step_s"],
                           f["net_step_s"], base)}
    if nodes <= 1 and get("ll_link_bw") <= 0.0:
        return out          # a fitted in-node curve: NCCL's choice already
    cap = get("ll_link_bw") if nodes == 1 else get("ll_net2_bw") if nodes == 2 \
        else get("ll_net_bw")
    if cap > 0.0:
        factor = 0.25 if (passes == 2 or nodes > 1) else 1.0 / 3.0
        bw = min(cap, factor * base)
        out["ll"] = _ring(nbytes, n, nodes, passes, get("ll_latency_s"),
                          get("ll_span_step_s") if nodes > 1 else get("ll_link_step_s"),
                          get("ll_net_step_s"), bw)
    if get("ll128_share") > 0.0:
        share = 0.7 if n < 2 * nodes else get("ll128_share")
        out["ll128"] = _ring(nbytes, n, nodes, passes, get("ll128_latency_s"),
                             get("ll128_link_step_s"), get("ll128_net_step_s"), share * base)
    return out


def ring_seconds(nbytes, n, nodes, passes, fabric):
    """The ring at NCCL's choice: the least of :func:`protocol_seconds` (0 for one rank)."""
    if n <= 1:
        return 0.0
    return min(protocol_seconds(nbytes, n, nodes, passes, fabric).values())


def chosen(nbytes, n, nodes, passes, fabric):
    """The protocol NCCL would run (ties: Simple, then LL, then LL128)."""
    t = protocol_seconds(nbytes, n, nodes, passes, fabric)
    return min(t, key=lambda p: (t[p], PROTOCOLS.index(p)))
