"""phaze.collectives — the one price of every collective: NCCL's α–β form per network tier.

A collective (an operator of kind 3, what it does in ``OpGraph.collective``, the names
of :data:`phaze.graph.COLLECTIVE_KINDS`) runs over n ranks that span ``nodes`` nodes of
a two-tier fabric: the in-node link and the between-node network. Its time is

    α + β,   α = coll_latency_s + (steps − x)·link_step_s + x·net_step_s,

with ``steps`` the ring steps it takes and x of them crossing a node boundary, and β its
bytes over η·bandwidth of the slowest tier the ring crosses (the in-node link when the
ranks sit in one node, else the network). Per kind (S the bytes given):

- all-reduce (reduce-scatter + all-gather, two passes round the ring): steps 2(n − 1),
  x = 2(nodes − 1), β = 2(n − 1)/n · S / (η·BW); across nodes the faster of that ring and
  NCCL's tree (a chain in each node, double binary trees between nodes: α =
  coll_latency_s + 2·((n/nodes − 1)·link_step_s + ⌊log2 nodes⌋·net_step_s), β the ring's
  at 0.92 of its bus bandwidth; NCCL src/graph/tuning.cc), as NCCL's tuner picks the
  algorithm of least modelled time — the tree wins for small messages over many nodes;
- reduce-scatter, all-gather (one pass): steps n − 1, x = nodes − 1,
  β = (n − 1)/n · S / (η·BW) (S: the full tensor, before the scatter / after the gather);
- all-to-all: priced as one ring pass, like an all-gather of the S bytes a rank holds;
- point-to-point ring exchange (ring attention's K/V chunks): n − 1 steps, all ranks
  sending at once, x = nodes − 1, β = S / (η·BW) (S: what reaches each rank in all).

Protocols (docs/fidelity-sources.md §4.4): NCCL runs each collective in one of three
protocols and takes the one its tuning model (src/graph/tuning.cc) prices fastest for the
message size. The form above is Simple's. All-reduce, reduce-scatter and all-gather rings
take the least of it and of LL's and LL128's, each α + β with its own base latency and
per-step latencies (``ll_*``, ``ll128_*`` of :data:`FABRIC_DTYPE`) and its own bus
bandwidth: LL min(cap, ¼ of the tier's; ⅓ for a one-pass ring in one node), the cap
NCCL's per node count; LL128 ``ll128_share`` (0.92) of the tier's, 0.7 with fewer than two
ranks per node. A protocol whose cap or share is 0 is not run (NCCL disables LL128 off
NVLink and on untested architectures; a chip whose in-node curve is a fit to a measured
NCCL run has both off in one node: the fit already is NCCL's choice). The tree, the
all-to-all and the point-to-point exchange stay Simple's.

Two callers form the same all-reduce with their own order of operations, and each keeps
its bits: the training-step model (``phaze.step``) prices rings over placed ranks from
per-tier η·bandwidths it formed itself (:func:`ring_seconds` and the kind functions);
the operator cost model (``phaze.cost``) prices a graph's collectives over contiguous
ranks from raw bandwidths and efficiencies (:func:`contiguous_all_reduce_seconds`,
``α + steps / n · S / (BW·η)``; the study's model is the same call with the identity
fabric, α = 0 and η = 1, which gives its ``2(n − 1)/n · S / BW`` bit for bit). The
formulas are the same; the floating-point rounding order of the two callers differs,
which is why the cost model's form has its own name.

The arithmetic is compiled ahead of time: ``phaze/_ring.pxd`` holds it as C inline
functions that the Cython kernels of ``phaze.cost`` and ``phaze.step`` call directly, and
``phaze/_collectives.pyx`` gives it the Python face below (so a Python caller gets the very
numbers the kernels compute). A ``fabric`` argument is a record with the fields of
:data:`FABRIC_DTYPE` (any numpy record that has them, e.g. the step model's row
parameters). :func:`collective_seconds` is the checked entrance.
"""
from __future__ import annotations

import math

import numpy as np

from . import _collectives as _c
from .graph import (COLL_ALL_GATHER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_NONE, COLL_P2P,
                    COLL_REDUCE_SCATTER, COLLECTIVE_KINDS)

__all__ = ["FABRIC_DTYPE", "PROTOCOL_FIELDS", "COLLECTIVE_KINDS", "fabric", "protocol_parameters", "collective_seconds", "ring_seconds",
           "exchange_seconds", "all_reduce_seconds", "reduce_scatter_seconds",
           "all_gather_seconds", "all_to_all_seconds", "p2p_seconds", "placed_seconds",
           "contiguous_seconds", "contiguous_all_reduce_seconds",
           "ring_nodes", "span_nodes", "net_share", "boundary_net_share"]

#: A two-tier fabric as the collectives see it (seconds, bytes/s; ``_ring.pxd``'s ``Fabric``):
#: NCCL's fixed latency of one collective, the α of one ring step inside a node and of one
#: crossing nodes, and η·bandwidth of the in-node link and of the network — the Simple
#: protocol's — then NCCL's LL and LL128 protocols (module docstring, "Protocols"): their
#: base latencies and per-step latencies (LL's in-node steps of a ring that spans nodes
#: apart), LL's bus-bandwidth caps in one node, on two nodes and on more, and LL128's share
#: of the Simple bus bandwidth. A cap or share of 0 (the default of :func:`fabric`): the
#: protocol is not run, and the collectives are the Simple α–β form bit for bit.
FABRIC_DTYPE = np.dtype([("coll_latency_s", "f8"), ("link_step_s", "f8"), ("net_step_s", "f8"),
                         ("link_bw", "f8"), ("net_bw", "f8"),
                         ("ll_latency_s", "f8"), ("ll_link_step_s", "f8"),
                         ("ll_span_step_s", "f8"), ("ll_net_step_s", "f8"),
                         ("ll_link_bw", "f8"), ("ll_net2_bw", "f8"), ("ll_net_bw", "f8"),
                         ("ll128_latency_s", "f8"), ("ll128_link_step_s", "f8"),
                         ("ll128_net_step_s", "f8"), ("ll128_share", "f8")])
assert FABRIC_DTYPE.itemsize == _c.fabric_size(), "phaze/_ring.pxd: Fabric out of date"
#: The protocol fields of :data:`FABRIC_DTYPE` and the efficiency parameter each is made
#: from (``phaze.arch.efficiency``; caps in GB/s there, bytes/s here).
PROTOCOL_FIELDS = {"ll_latency_s": "ll_latency_s", "ll_link_step_s": "ll_link_step_s",
                   "ll_span_step_s": "ll_span_step_s", "ll_net_step_s": "ll_net_step_s",
                   "ll_link_bw": "ll_link_gb_per_s", "ll_net2_bw": "ll_net2_gb_per_s",
                   "ll_net_bw": "ll_net_gb_per_s", "ll128_latency_s": "ll128_latency_s",
                   "ll128_link_step_s": "ll128_link_step_s",
                   "ll128_net_step_s": "ll128_net_step_s", "ll128_share": "ll128_share"}

#: ring_seconds(nbytes, n, nodes, passes, coll_latency_s, link_step_s, net_step_s, link_bw,
#: net_bw): a ring collective of n ranks spanning ``nodes`` nodes that goes ``passes``
#: times round the ring (2: all-reduce, 1: all-gather, reduce-scatter or all-to-all),
#: seconds; 0 for one rank. ``link_bw``/``net_bw``: η·bandwidth of each tier (bytes/s).
ring_seconds = _c.ring_seconds
#: exchange_seconds(nbytes, n, nodes, coll_latency_s, link_step_s, net_step_s, link_bw,
#: net_bw): a point-to-point ring exchange over n ranks spanning ``nodes`` nodes: n − 1
#: steps (all ranks send at once round the ring) that together bring ``nbytes`` to each
#: rank, seconds; 0 for one rank. α counts x = nodes − 1 node-crossing steps (as
#: :func:`ring_seconds`); β = nbytes / (η·BW) of the slowest tier crossed.
exchange_seconds = _c.exchange_seconds
#: ring_nodes(n, node_size): nodes spanned by the contiguous ranks 0..n−1.
ring_nodes = _c.ring_nodes
#: span_nodes(first, stride, count, node_size): nodes spanned by the ranks first + k·stride,
#: k < count (every rank a node of its own when stride > node_size): the rank layout's rule
#: (``phaze.step``'s groups; :func:`net_share`).
span_nodes = _c.span_nodes
#: contiguous_all_reduce_seconds(group, comm_bytes, node_size, link_bytes_per_s,
#: net_bytes_per_s, coll_latency_s, link_step_s, net_step_s, link_efficiency,
#: net_efficiency): ring all-reduce of ``comm_bytes`` over ``group`` contiguous devices
#: (floats), the calibrated cost model's order of operations: steps = 2(n − 1), of which
#: inter = 2(⌈n / node_size⌉ − 1) cross a node boundary; β = steps / n · bytes over the
#: tier's bandwidth × its efficiency (the link when the group fits in a node, else the
#: network). 0 for one device or no bytes.
contiguous_all_reduce_seconds = _c.contiguous_all_reduce_seconds


def protocol_parameters(eff) -> dict:
    """The LL/LL128 fields of :data:`FABRIC_DTYPE` made from an efficiency set ``eff`` (an
    ``Efficiency``, a record or rows of ``EFFICIENCY_DTYPE``: floats or arrays): the
    latencies and LL128's share as they are, LL's caps from GB/s to bytes/s (× 10⁹)."""
    def get(name):
        return eff[name] if not hasattr(eff, name) else getattr(eff, name)
    out = {}
    for field, name in PROTOCOL_FIELDS.items():
        x = np.asarray(get(name), dtype=np.float64)
        out[field] = x * 1e9 if field.endswith("_bw") else x
    return out


def _fill(out, source, have, what) -> np.ndarray:
    """``out`` (:data:`FABRIC_DTYPE` records) with ``source``'s fields among ``have``; a
    protocol field it lacks stays 0 (not run), another is refused naming ``what``."""
    for name in FABRIC_DTYPE.names:
        if name in have:
            out[name] = source[name]
        elif name not in PROTOCOL_FIELDS:
            raise ValueError(f"{what} lack{'s' if what == 'fabric' else ''} field {name}")
    return out


def _record(fabric) -> np.ndarray:
    """The bytes of one :data:`FABRIC_DTYPE` record holding ``fabric``'s fields (a record or
    mapping; a field it lacks of the protocols' 0: not run)."""
    names = getattr(getattr(fabric, "dtype", None), "names", None)
    have = names if names is not None else tuple(fabric)
    return _fill(np.zeros(1, dtype=FABRIC_DTYPE), fabric, have, "fabric").view(np.uint8)


def placed_seconds(kind, nbytes, n, nodes, fabric) -> float:
    """A collective of ``kind`` (an ``OpGraph.collective`` code) over n ranks spanning
    ``nodes`` nodes on ``fabric`` (a record or mapping with the fields of
    :data:`FABRIC_DTYPE`; the protocol fields may be left out: not run), seconds (0 for
    ``COLL_NONE``)."""
    return _c.placed_seconds(int(kind), float(nbytes), int(n), int(nodes), _record(fabric))


def all_reduce_seconds(nbytes, n, nodes, fabric) -> float:
    """Ring all-reduce of ``nbytes`` per rank over n ranks on ``nodes`` nodes (two passes)."""
    return placed_seconds(COLL_ALL_REDUCE, nbytes, n, nodes, fabric)


def reduce_scatter_seconds(nbytes, n, nodes, fabric) -> float:
    """Ring reduce-scatter of an ``nbytes`` tensor (per rank, before the scatter): one pass."""
    return placed_seconds(COLL_REDUCE_SCATTER, nbytes, n, nodes, fabric)


def all_gather_seconds(nbytes, n, nodes, fabric) -> float:
    """Ring all-gather ending with ``nbytes`` on every rank: one pass."""
    return placed_seconds(COLL_ALL_GATHER, nbytes, n, nodes, fabric)


def all_to_all_seconds(nbytes, n, nodes, fabric) -> float:
    """All-to-all of the ``nbytes`` a rank holds over n ranks, priced as one ring pass."""
    return placed_seconds(COLL_ALL_TO_ALL, nbytes, n, nodes, fabric)


def p2p_seconds(nbytes, n, nodes, fabric) -> float:
    """Point-to-point ring exchange bringing ``nbytes`` to each of n ranks
    (:func:`exchange_seconds`)."""
    return placed_seconds(COLL_P2P, nbytes, n, nodes, fabric)


def _row_bytes(fabric_rows) -> np.ndarray:
    """(rows, itemsize) uint8: the bytes of ``fabric_rows``, records whose first fields are
    those of :data:`FABRIC_DTYPE` in its order (the step model's ``ROW_PARAMS``); others are
    copied into :data:`FABRIC_DTYPE` records first (absent protocol fields 0)."""
    rows = np.asarray(fabric_rows).reshape(-1)
    descr = rows.dtype.descr
    if not (descr[:len(FABRIC_DTYPE.descr)] == FABRIC_DTYPE.descr
            and rows.dtype.itemsize == sum(np.dtype(t).itemsize for _, t in descr)
            and rows.flags.c_contiguous):
        rows = _fill(np.zeros(rows.shape[0], dtype=FABRIC_DTYPE), rows, rows.dtype.names,
                     "fabric rows")
    return rows.view(np.uint8).reshape(rows.shape[0], rows.dtype.itemsize)


def contiguous_seconds(kind, nbytes, n, fabric_rows, node_size, out) -> None:
    """:func:`placed_seconds` of one collective over ranks 0..n−1 on every row
    (``fabric_rows`` (rows,) records with the fields of :data:`FABRIC_DTYPE`,
    ``node_size`` (rows,) int64) into ``out`` (rows,) float64."""
    _c.contiguous_seconds(int(kind), float(nbytes), int(n), _row_bytes(fabric_rows),
                          np.asarray(node_size, dtype=np.int64), out)


def _integers(**arrays):
    """The broadcast arrays as flat C-contiguous int64 (each an integer >= 1) and the shape."""
    parts = np.broadcast_arrays(*(np.asarray(x) for x in arrays.values()))
    cols = []
    for name, x in zip(arrays, parts):
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(x)) or np.any(x < 1) or np.any(x != np.floor(x)):
            raise ValueError(f"{name} must hold integers >= 1")
        cols.append(np.ascontiguousarray(x, dtype=np.int64))
    return cols, parts[0].shape


def boundary_net_share(pipeline_parallel, stage_ranks, node_size) -> np.ndarray:
    """The share of a pipeline's activation and gradient sends that crosses nodes, on
    Megatron's rank layout (stage a holds ranks a·S … a·S + S − 1, S = ``stage_ranks`` =
    t·cp·d, and rank a·S + o sends to (a + 1)·S + o; the step's time reads the same
    placement): the sends of the p − 1 boundaries whose two ranks sit on different nodes of
    ``node_size`` (arrays broadcast together; integers >= 1)."""
    (p, s, n), shape = _integers(pipeline_parallel=pipeline_parallel, stage_ranks=stage_ranks,
                                 node_size=node_size)
    out = np.empty(p.shape[0], dtype=np.float64)
    _c.boundary_net_shares(p, s, n, out)
    return out.reshape(shape)


def net_share(group, stride, node_size, *, all_to_all=False) -> np.ndarray:
    """The share of the bytes each rank of a group sends that crosses nodes (the rest stays
    on the in-node link), for ``group`` ranks ``stride`` apart from rank 0 on nodes of
    ``node_size`` (arrays broadcast together; integral values): the group spans
    :func:`span_nodes` nodes (the rule the step's time reads); a ring collective (all-reduce,
    reduce-scatter, all-gather, the point-to-point ring exchange) crosses on ``nodes`` of
    its ``group`` hops, an all-to-all (``all_to_all``, per element too) sends to the
    group − g of its group − 1 peers outside its node (g = group / nodes), as
    ``split_all_to_all`` prices it; 0 inside one node."""
    cols, shape = _integers(group=group, stride=stride, node_size=node_size)
    a2a = np.broadcast_to(np.asarray(all_to_all, dtype=bool), shape).reshape(-1)
    out = np.empty(cols[0].shape[0], dtype=np.float64)
    _c.net_shares(cols[0], cols[1], cols[2], np.ascontiguousarray(a2a, dtype=np.int8), out)
    return out.reshape(shape)


# --- the Python face ----------------------------------------------------------------------

def fabric(*, coll_latency_s, link_step_s, net_step_s, link_bw, net_bw, **protocols) -> np.void:
    """One :data:`FABRIC_DTYPE` record (seconds; η·bandwidths in bytes/s, > 0); the LL/LL128
    fields of :data:`PROTOCOL_FIELDS` as keywords too (each >= 0 and finite, ``ll128_share``
    at most 1; left out: 0, the protocol not run)."""
    unknown = sorted(set(protocols) - set(PROTOCOL_FIELDS))
    if unknown:
        raise ValueError(f"fabric has no field {unknown[0]}")
    values = dict(coll_latency_s=coll_latency_s, link_step_s=link_step_s,
                  net_step_s=net_step_s, link_bw=link_bw, net_bw=net_bw, **protocols)
    for name, x in values.items():
        if not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x) \
                or x < 0 or (name in ("link_bw", "net_bw") and x <= 0) \
                or (name == "ll128_share" and x > 1):
            rule = ("> 0" if name in ("link_bw", "net_bw")
                    else "in [0, 1]" if name == "ll128_share" else ">= 0")
            raise ValueError(f"{name} must be a finite number {rule}, got {x!r}")
    out = np.zeros(1, dtype=FABRIC_DTYPE)
    for name, x in values.items():
        out[name] = x
    return out[0]


def collective_seconds(kind, nbytes, ranks: int, nodes: int, fabric) -> float:
    """Seconds of one collective: ``kind`` a name of :data:`COLLECTIVE_KINDS` (or its
    code) other than "none", ``nbytes`` its bytes (module docstring, per kind), ``ranks``
    participants spanning ``nodes`` nodes (1 ≤ nodes ≤ ranks), ``fabric`` a
    :data:`FABRIC_DTYPE` record (:func:`fabric`)."""
    code = COLLECTIVE_KINDS.index(kind) if isinstance(kind, str) and kind in COLLECTIVE_KINDS \
        else kind
    if isinstance(code, str) or not isinstance(code, (int, np.integer)) \
            or not COLL_NONE < int(code) < len(COLLECTIVE_KINDS):
        raise ValueError(f"kind must be one of {', '.join(COLLECTIVE_KINDS[1:])}, got {kind!r}")
    for name, x, lo in (("ranks", ranks, 1), ("nodes", nodes, 1)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}")
    if nodes > ranks:
        raise ValueError(f"nodes must not exceed ranks ({ranks}), got {nodes}")
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    return float(placed_seconds(int(code), nbytes, int(ranks), int(nodes), fabric))
