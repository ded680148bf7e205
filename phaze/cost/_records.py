"""The records at the boundary of the operator loop (``phaze.cost._kernels._op_latencies``).

Plain numpy dtypes: the compiled kernel (``_kernels.pyx``) reads them through C structs
with the same fields at the same offsets (``Params``, ``Tile``; the names and sizes are
checked when it is imported, the field types by the buffer format at every call), so a
field added, removed or reordered here must be changed there too.
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
