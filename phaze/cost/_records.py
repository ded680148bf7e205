"""The records at the boundary of the operator loop (``phaze.cost._kernels._op_latencies``).

Plain numpy dtypes (no numba here, so that importing ``phaze.cost`` stays light): the
kernel reads their fields by name.
"""
import numpy as np

__all__ = ["PARAMS_DTYPE", "TILE_DTYPE"]

#: One row of :data:`PARAMS_DTYPE` per architecture: the per-row efficiency fractions and
#: latencies of the operator loop (``phaze.arch.efficiency``; all 1 and 0 for the study).
PARAMS_DTYPE = np.dtype([(name, np.float64) for name in (
    "tile_efficiency", "hbm_efficiency", "attention_hbm_efficiency", "launch_s", "coll_latency_s",
    "link_step_s", "net_step_s", "link_efficiency", "net_efficiency")], align=True)

#: One row of :data:`TILE_DTYPE` per distinct (split, tile parameters) combination — a
#: "tile" — of the tile and wave rule: the split's index and the rule's five parameters.
TILE_DTYPE = np.dtype([("split", np.int64)] + [(name, np.float64) for name in (
    "tile_m_mult", "tile_n_mult", "tile_k_mult", "cores_per_tile", "k_stages")], align=True)
