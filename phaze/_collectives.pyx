# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Python face of the compiled collectives (``_ring.pxd``): ``phaze.collectives``
calls these with a fabric's fields, so the numbers a Python caller gets are the very
ones the kernels compute."""
from libc.stdint cimport int8_t, int64_t

from . cimport _ring as c

from .graph import COLLECTIVE_KINDS

assert COLLECTIVE_KINDS == ("none", "all_reduce", "reduce_scatter", "all_gather",
                            "all_to_all", "p2p"), "phaze/_ring.pxd: codes out of date"


def ring_seconds(double nbytes, int64_t n, int64_t nodes, int64_t passes, double coll_latency_s,
                 double link_step_s, double net_step_s, double link_bw, double net_bw):
    return c.ring_seconds(nbytes, n, nodes, passes, coll_latency_s, link_step_s, net_step_s,
                          link_bw, net_bw)


def exchange_seconds(double nbytes, int64_t n, int64_t nodes, double coll_latency_s,
                     double link_step_s, double net_step_s, double link_bw, double net_bw):
    return c.exchange_seconds(nbytes, n, nodes, coll_latency_s, link_step_s, net_step_s,
                              link_bw, net_bw)


def placed_seconds(int64_t kind, double nbytes, int64_t n, int64_t nodes,
                   const unsigned char[::1] fabric):
    """``placed`` on the fabric whose ``FABRIC_DTYPE`` record's bytes are ``fabric``."""
    if fabric.shape[0] < <Py_ssize_t>sizeof(c.Fabric):
        raise ValueError("fabric must hold one FABRIC_DTYPE record")
    return c.placed(kind, nbytes, n, nodes, <const c.Fabric*>&fabric[0])


def contiguous_seconds(int64_t kind, double nbytes, int64_t n,
                       const unsigned char[:, ::1] rows, const int64_t[:] node_size,
                       double[:] out):
    """``placed`` of one collective over ranks 0..n−1 on every row into ``out``: ``rows``
    the bytes of (rows,) records whose first fields are a ``FABRIC_DTYPE`` record."""
    cdef Py_ssize_t k
    if rows.shape[0] < out.shape[0] or (out.shape[0] > 0
                                        and rows.shape[1] < <Py_ssize_t>sizeof(c.Fabric)):
        raise ValueError("rows must hold one FABRIC_DTYPE record per output")
    with nogil:
        for k in range(out.shape[0]):
            out[k] = c.placed(kind, nbytes, n, c.ring_nodes(n, node_size[k]),
                              <const c.Fabric*>&rows[k, 0])


def fabric_size():
    """Bytes of one ``Fabric`` (``collectives.FABRIC_DTYPE``'s itemsize)."""
    return sizeof(c.Fabric)


def ring_nodes(int64_t n, int64_t node_size):
    return c.ring_nodes(n, node_size)


def span_nodes(int64_t first, int64_t stride, int64_t count, int64_t node_size):
    return c.span_nodes(first, stride, count, node_size)


def boundary_net_shares(const int64_t[::1] p, const int64_t[::1] stage_ranks,
                        const int64_t[::1] node_size, double[::1] out):
    """``boundary_net_share`` of every k into ``out[k]``."""
    cdef Py_ssize_t k
    with nogil:
        for k in range(out.shape[0]):
            out[k] = c.boundary_net_share(p[k], stage_ranks[k], node_size[k])


def net_shares(const int64_t[::1] count, const int64_t[::1] stride,
               const int64_t[::1] node_size, const int8_t[::1] all_to_all, double[::1] out):
    """Per k: the share of the bytes a group of ``count[k]`` ranks ``stride[k]`` apart
    (from rank 0) on nodes of ``node_size[k]`` sends across nodes — an all-to-all's
    (``all_to_all[k]``) or a ring's — into ``out[k]``."""
    cdef Py_ssize_t k
    cdef int64_t nodes
    with nogil:
        for k in range(out.shape[0]):
            nodes = c.span_nodes(0, stride[k], count[k], node_size[k])
            out[k] = c.a2a_net_share(count[k], nodes) if all_to_all[k] != 0 \
                else c.ring_net_share(count[k], nodes)


def contiguous_all_reduce_seconds(double group, double comm_bytes, double node_size,
                                  double link_bytes_per_s, double net_bytes_per_s,
                                  double coll_latency_s, double link_step_s, double net_step_s,
                                  double link_efficiency, double net_efficiency):
    return c.contiguous_all_reduce(group, comm_bytes, node_size, link_bytes_per_s,
                                   net_bytes_per_s, coll_latency_s, link_step_s, net_step_s,
                                   link_efficiency, net_efficiency)
