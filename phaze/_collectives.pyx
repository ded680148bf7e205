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
                   double coll_latency_s, double link_step_s, double net_step_s,
                   double link_bw, double net_bw):
    cdef c.Fabric f
    f.coll_latency_s = coll_latency_s
    f.link_step_s = link_step_s
    f.net_step_s = net_step_s
    f.link_bw = link_bw
    f.net_bw = net_bw
    return c.placed(kind, nbytes, n, nodes, &f)


def contiguous_seconds(int64_t kind, double nbytes, int64_t n, const double[:] coll_latency_s,
                       const double[:] link_step_s, const double[:] net_step_s,
                       const double[:] link_bw, const double[:] net_bw,
                       const int64_t[:] node_size, double[:] out):
    """``placed`` of one collective over ranks 0..n−1 on every row into ``out``."""
    cdef Py_ssize_t k
    cdef c.Fabric f
    with nogil:
        for k in range(out.shape[0]):
            f.coll_latency_s = coll_latency_s[k]
            f.link_step_s = link_step_s[k]
            f.net_step_s = net_step_s[k]
            f.link_bw = link_bw[k]
            f.net_bw = net_bw[k]
            out[k] = c.placed(kind, nbytes, n, c.ring_nodes(n, node_size[k]), &f)


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
