"""The records at the boundary of the operator loop (``phaze.cost._kernels._op_latencies``):
the operators, the architecture rows with their parameters, the distinct core shapes and
splits, and the tiles of the tile and wave rule.

Plain numpy dtypes: the compiled kernel (``_kernels.pyx``) reads them through C structs
with the same fields at the same offsets (``Params``, ``Tile``; the names and sizes are
checked when it is imported, the field types by the buffer format at every call), so a
field added, removed or reordered here must be changed there too.
"""
import numpy as np

__all__ = ["PARAMS_DTYPE", "TILE_DTYPE", "OP_DTYPE", "ROW_DTYPE", "SHAPE_DTYPE", "SPLIT_DTYPE",
           "FLASH_OPS", "FLASH_CURVES"]

#: The shape curves of the fused attention kernel a row can take (``ROW_DTYPE.flash_curve``
#: indexes it; ``OP_DTYPE.flash_scale`` holds an operator's factor on each): None (every
#: shape at the measured one's rate) and the kernels of ``phaze.arch.ATTENTION_SHAPE_TFLOPS``.
FLASH_CURVES = (None, "cudnn", "fa2", "fa3")

#: One row of :data:`PARAMS_DTYPE` per architecture: the per-row efficiency fractions and
#: latencies of the operator loop (``phaze.arch.efficiency``; all 1 and 0 for the study).
PARAMS_DTYPE = np.dtype([(name, np.float64) for name in (
    "tile_efficiency", "hbm_efficiency", "attention_hbm_efficiency", "launch_s", "coll_latency_s",
    "link_step_s", "net_step_s", "link_efficiency", "net_efficiency")], align=True)

#: One row of :data:`TILE_DTYPE` per distinct (split, tile parameters) combination — a
#: "tile" — of the tile and wave rule: the split's index and the rule's five parameters.
TILE_DTYPE = np.dtype([("split", np.int64)] + [(name, np.float64) for name in (
    "tile_m_mult", "tile_n_mult", "tile_k_mult", "cores_per_tile", "k_stages")], align=True)

#: One row of :data:`OP_DTYPE` per operator of a graph (the ``OpGraph`` columns the loop
#: reads, as floats where it computes with them): kind code, GEMM batch, M, K, N, vector
#: cycles per element, output elements, bytes moved (in + out), collective bytes and group
#: size, the GEMM operands' bytes per element, the fused attention kernel's rate at its shape
#: over its rate at the measured one on each curve of :data:`FLASH_CURVES`
#: (``phaze.arch.attention_shape_factor``; 1 for every other operator and for the curve
#: None), and three flags: an attention-core operator
#: (its HBM traffic at ``attention_hbm_efficiency``), an FP8 GEMM (at the row's fp8 rate),
#: and the fused attention kernel (:data:`FLASH_OPS`: 1 forward, 2 backward, 0 neither; its
#: GEMM part at the row's flash rate, without the tile rule).
OP_DTYPE = np.dtype([("kind", np.int64)] + [(name, np.float64) for name in (
    "batch", "m", "k", "n", "cycles_per_element", "elements", "bytes_moved", "comm_bytes",
    "group_size", "in_bytes")] + [("flash_scale", np.float64, (len(FLASH_CURVES),)),
                                  ("attention", np.uint8), ("fp8", np.uint8), ("flash", np.uint8)])

#: The fused (flash) attention operators of ``phaze.graph`` by name and their ``flash`` code in
#: :data:`OP_DTYPE` (``phaze/graph/_block.py``, ``_mla.py``: the forward kernel and its backward).
FLASH_OPS = {"flash_attn": 1, "flash_attn.bwd": 2}

#: One row of :data:`ROW_DTYPE` per architecture: its shape, split and tile (indices into
#: the shape, split and tile records), its fused attention's shape curve (an index into
#: :data:`FLASH_CURVES`), vector cores and lanes, clock (Hz), link and network
#: bandwidth (bytes/s), node size, and the rates its parameters give: GEMM array steps per
#: second (clock × tile_efficiency; an FP8 GEMM's clock × fp8_tile_efficiency, before the
#: fp8 rate multiplies it), HBM and attention-core bytes per second, launch gap (s), and the
#: fused attention kernel's array steps per second, forward and backward (clock ×
#: flash_fwd_efficiency, clock × flash_bwd_efficiency), and the bytes per second the shared
#: buffer delivers to all arrays (``buffer_bytes_per_cycle`` × clock; ``inf``: unlimited).
ROW_DTYPE = np.dtype([(name, np.int64) for name in ("shape", "split", "tile", "flash_curve")] + [
    (name, np.float64) for name in (
        "num_vc", "vc_width", "clock_hz", "link_bytes_per_s", "net_bytes_per_s", "node_size",
        "gemm_rate", "fp8_gemm_rate", "hbm_bw", "attention_bw", "launch_s", "flash_fwd_rate",
        "flash_bwd_rate", "onchip_bw")])

#: A distinct (array width, depth, buffer bytes) of the rows — a "shape" — and a distinct
#: (width, depth, tensor cores) — a "split".
SHAPE_DTYPE = np.dtype([(name, np.float64) for name in ("w", "d", "cap")])
SPLIT_DTYPE = np.dtype([(name, np.float64) for name in ("w", "d", "cores")])

