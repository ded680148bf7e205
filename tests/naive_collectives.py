"""The collectives as phaze priced them in numba before they were compiled ahead of time
(phaze/_ring.pxd), run as plain Python: the reference tests/test_step_kernels.py holds the
Cython kernels to, bit for bit (these are the functions numba compiled, and the suite ran
them as plain Python under NUMBA_DISABLE_JIT=1 with the same answers)."""
import math

import naive_nccl
from phaze.graph import (COLL_ALL_GATHER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_P2P,
                         COLL_REDUCE_SCATTER)


def ring_seconds(nbytes, n, nodes, passes, coll_latency_s, link_step_s, net_step_s, link_bw,
                 net_bw):
    """A ring collective of n ranks spanning ``nodes`` nodes that goes ``passes`` times
    round the ring (2: all-reduce, 1: all-gather, reduce-scatter or all-to-all), seconds;
    0 for one rank. ``link_bw``/``net_bw``: η·bandwidth of each tier (bytes/s)."""
    if n <= 1:
        return 0.0
    x = passes * (nodes - 1)
    alpha = coll_latency_s + (passes * (n - 1) - x) * link_step_s + x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + passes * (n - 1) / n * float(nbytes) / bw


def exchange_seconds(nbytes, n, nodes, coll_latency_s, link_step_s, net_step_s, link_bw, net_bw):
    """A point-to-point ring exchange over n ranks spanning ``nodes`` nodes: n − 1 steps
    (all ranks send at once round the ring) that together bring ``nbytes`` to each rank,
    seconds; 0 for one rank. α counts x = nodes − 1 node-crossing steps (as
    :func:`ring_seconds`); β = nbytes / (η·BW) of the slowest tier crossed."""
    if n <= 1:
        return 0.0
    x = nodes - 1
    alpha = coll_latency_s + (n - 1 - x) * link_step_s + x * net_step_s
    bw = net_bw if nodes > 1 else link_bw
    return alpha + float(nbytes) / bw


def _ring(nbytes, n, nodes, passes, fabric):
    """:func:`ring_seconds` with the parameters of a ``fabric`` record."""
    return ring_seconds(nbytes, n, nodes, passes, fabric["coll_latency_s"],
                        fabric["link_step_s"], fabric["net_step_s"], fabric["link_bw"],
                        fabric["net_bw"])


def tree_all_reduce_seconds(nbytes, n, nodes, fabric):
    """NCCL's tree all-reduce across ``nodes`` > 1 nodes: latency coll + 2·((n/nodes − 1)·
    link step + floor(log2 nodes)·net step), the ring's bandwidth term at 0.92."""
    coll, link_step, net_step, _link_bw, net_bw = (float(fabric[k]) for k in (
        "coll_latency_s", "link_step_s", "net_step_s", "link_bw", "net_bw"))
    g = max(1, n // nodes)
    log2 = int(nodes).bit_length() - 1
    return coll + 2.0 * ((g - 1) * link_step + log2 * net_step) \
        + 2.0 * (n - 1) / n * float(nbytes) / (0.92 * net_bw)


def all_reduce_seconds(nbytes, n, nodes, fabric):
    """All-reduce of ``nbytes`` per rank over n ranks on ``nodes`` nodes: the two-pass ring
    at NCCL's protocol choice (tests/naive_nccl.py), or across nodes the faster of it and
    NCCL's tree."""
    ring = naive_nccl.ring_seconds(nbytes, n, nodes, 2, fabric)
    if n <= 1 or nodes <= 1:
        return ring
    return min(ring, tree_all_reduce_seconds(nbytes, n, nodes, fabric))


def reduce_scatter_seconds(nbytes, n, nodes, fabric):
    """Ring reduce-scatter of an ``nbytes`` tensor (per rank, before the scatter): one pass,
    at NCCL's protocol choice."""
    return naive_nccl.ring_seconds(nbytes, n, nodes, 1, fabric)


def all_gather_seconds(nbytes, n, nodes, fabric):
    """Ring all-gather ending with ``nbytes`` on every rank: one pass, at NCCL's protocol
    choice."""
    return naive_nccl.ring_seconds(nbytes, n, nodes, 1, fabric)


def spread(fabric, per_node):
    """The fabric a group with ``per_node`` ranks in each node sees between nodes: one NIC
    per device, every one of them used (per_node × the per-device network bandwidth,
    at most the in-node link's); a copy, as a dict."""
    names = fabric.dtype.names if hasattr(fabric, "dtype") else tuple(fabric)
    out = {k: float(fabric[k]) for k in names}
    if per_node > 1:
        out["net_bw"] = min(per_node * out["net_bw"], out["link_bw"])
    return out


def _a2a_alpha(n, nodes, fabric):
    """(ranks per node, α of one ring pass with nodes − 1 steps between nodes)."""
    x = nodes - 1
    return max(n // nodes, 1), (fabric["coll_latency_s"] + (n - 1 - x) * fabric["link_step_s"]
                                + x * fabric["net_step_s"])


def split_all_to_all_seconds(nbytes, n, nodes, fabric):
    """An all-to-all of n ranks on ``nodes`` nodes (n/nodes in each): each rank sends
    nbytes/n to every peer, over the link to the peers of its node and through its own NIC
    to the others, both at once; α of one ring pass. One node: the ring pass."""
    if n <= 1:
        return 0.0
    if nodes <= 1:
        return _ring(nbytes, n, 1, 1, fabric)
    g, alpha = _a2a_alpha(n, nodes, fabric)
    intra = (g - 1) / n * float(nbytes) / fabric["link_bw"]
    inter = (n - g) / n * float(nbytes) / fabric["net_bw"]
    return alpha + max(intra, inter)


def dedup_all_to_all_seconds(nbytes, token_bytes, topk, node_limit, n, nodes, fabric):
    """DeepEP's dispatch on n ranks over ``nodes`` nodes: each token once per distinct remote
    node its ``topk`` copies reach (expected under balanced routing, at most
    ``node_limit``·(nodes − 1)/nodes), through the rank's NIC; over the link the copies for
    the node's peers and the forwarding of those that arrived for the node's other GPUs."""
    if n <= 1:
        return 0.0
    if nodes <= 1:
        return _ring(nbytes, n, 1, 1, fabric)
    g, alpha = _a2a_alpha(n, nodes, fabric)
    x = nodes - 1
    miss = 1.0
    for _ in range(topk):      # the product in order, as the C loop forms it
        miss *= 1.0 - 1.0 / nodes
    remote = x * (1.0 - miss)
    if node_limit > 0:
        remote = min(remote, node_limit * x / nodes)
    inter = float(token_bytes) * remote / fabric["net_bw"]
    intra = ((g - 1) / n * float(nbytes) + (n - g) / n * (g - 1) / g * float(nbytes)) \
        / fabric["link_bw"]
    return alpha + max(intra, inter)


def all_to_all_seconds(nbytes, n, nodes, fabric):
    """All-to-all of the ``nbytes`` a rank holds over n ranks, priced as one ring pass."""
    return _ring(nbytes, n, nodes, 1, fabric)


def p2p_seconds(nbytes, n, nodes, fabric):
    """Point-to-point ring exchange bringing ``nbytes`` to each of n ranks
    (:func:`exchange_seconds`)."""
    return exchange_seconds(nbytes, n, nodes, fabric["coll_latency_s"], fabric["link_step_s"],
                            fabric["net_step_s"], fabric["link_bw"], fabric["net_bw"])


def placed_seconds(kind, nbytes, n, nodes, fabric):
    """A collective of ``kind`` (an ``OpGraph.collective`` code) over n ranks spanning
    ``nodes`` nodes, seconds (0 for ``COLL_NONE``)."""
    if kind == COLL_ALL_REDUCE:
        return all_reduce_seconds(nbytes, n, nodes, fabric)
    if kind == COLL_REDUCE_SCATTER:
        return reduce_scatter_seconds(nbytes, n, nodes, fabric)
    if kind == COLL_ALL_GATHER:
        return all_gather_seconds(nbytes, n, nodes, fabric)
    if kind == COLL_ALL_TO_ALL:
        return all_to_all_seconds(nbytes, n, nodes, fabric)
    if kind == COLL_P2P:
        return p2p_seconds(nbytes, n, nodes, fabric)
    return 0.0


def ring_nodes(n, node_size):
    """Nodes spanned by the contiguous ranks 0..n−1 on nodes of ``node_size``."""
    return (n - 1) // node_size + 1


def contiguous_seconds(kind, nbytes, n, fabric_rows, node_size, out):
    """:func:`placed_seconds` of one collective over ranks 0..n−1 on every row
    (``fabric_rows`` (rows,) records, ``node_size`` (rows,)) into ``out`` (rows,)."""
    for k in range(out.shape[0]):
        out[k] = placed_seconds(kind, nbytes, n, ring_nodes(n, node_size[k]), fabric_rows[k])


# --- the operator cost model's variants (phaze.cost): contiguous groups, raw bandwidths ----

def contiguous_all_reduce_seconds(group, comm_bytes, node_size, link_bytes_per_s,
                                  net_bytes_per_s, coll_latency_s, link_step_s, net_step_s,
                                  link_efficiency, net_efficiency):
    """Ring all-reduce of ``comm_bytes`` over ``group`` contiguous devices (floats), the
    calibrated cost model's order of operations: steps = 2(n − 1), of which
    inter = 2(⌈n / node_size⌉ − 1) cross a node boundary; β = steps / n · bytes over the
    tier's bandwidth × its efficiency (the link when the group fits in a node, else the
    network). 0 for one device or no bytes."""
    if group <= 1.0 or comm_bytes == 0.0:
        return 0.0
    steps = 2.0 * (group - 1.0)
    if group <= node_size:
        inter = 0.0
        bw = link_bytes_per_s * link_efficiency
    else:
        inter = 2.0 * (float(math.ceil(group / node_size)) - 1.0)
        bw = net_bytes_per_s * net_efficiency
    alpha = coll_latency_s + (steps - inter) * link_step_s + inter * net_step_s
    return alpha + steps / group * comm_bytes / bw
