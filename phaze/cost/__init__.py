"""phaze.cost — operator latencies over architectures (docs/design.md §2.4).

The face re-exports; ``_latency`` validates and dispatches (:func:`op_latencies`, the
point-to-point and roofline helpers; :func:`prepare` checks a set of rows and a cost
model's parameters once, for a caller pricing many graphs on them: :class:`Prepared`), ``_kernels`` holds the operator loop, compiled ahead
of time (Cython, ``_kernels.pyx``: nothing is compiled at first use). :func:`onchip_bytes`
is the GEMMs' buffer-to-array bytes the operator loop prices (the step's energy counts them).
"""
from ._latency import (MODELS, Prepared, onchip_bytes, op_latencies, p2p_seconds, prepare,
                       roofline_bounds)

__all__ = ["MODELS", "op_latencies", "p2p_seconds", "roofline_bounds", "prepare", "Prepared",
           "onchip_bytes"]
