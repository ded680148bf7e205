"""phaze.cost — operator latencies over architectures (docs/design.md §2.4).

The face re-exports; ``_latency`` validates and dispatches (:func:`op_latencies`, the
point-to-point and roofline helpers), ``_kernels`` holds the operator loop, compiled ahead
of time (Cython, ``_kernels.pyx``: nothing is compiled at first use).
"""
from ._latency import MODELS, op_latencies, p2p_seconds, roofline_bounds

__all__ = ["MODELS", "op_latencies", "p2p_seconds", "roofline_bounds"]
