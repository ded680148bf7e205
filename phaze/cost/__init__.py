"""phaze.cost — operator latencies over architectures (docs/design.md §2.4).

The face re-exports; ``_latency`` validates and dispatches (:func:`op_latencies`, the
point-to-point and roofline helpers), ``_kernels`` holds the compiled (numba) operator
loops.
"""
from ._latency import MODELS, op_latencies, p2p_seconds, roofline_bounds

__all__ = ["MODELS", "op_latencies", "p2p_seconds", "roofline_bounds"]
