"""Architecture presets: real accelerators expressed in phaze's template.

Each preset is a one-row ``ARCH_DTYPE`` array (``get(name)``); its area comes from
the same area model as every other row. Peak FLOP/s = num_tc·tc_width·tc_depth·2·clock.
Bandwidths are per direction, decimal GB/s; memory sizes are binary (GiB, MiB).

``tpuv4`` — Google TPU v4 (Jouppi et al., "TPU v4: An Optically Reconfigurable
Supercomputer for Machine Learning", ISCA 2023, Table 1; Google Cloud TPU v4 docs):
2 TensorCores × 4 MXUs = 8 systolic arrays of 128×128; 2 vector units (one per
TensorCore) modelled as 128 lanes each; 128 MiB CMEM as the shared buffer; 1,050 MHz,
so 8·128·128·2·1.05e9 = 275 TFLOP/s bf16; 32 GiB HBM2 at 1,200 GB/s. One ICI link is
400 Gb/s = 50 GB/s per direction, used for both the in-node link and the network;
the 3D torus pod joins up to 4,096 chips, hence node_size 4096. The original study's
space (``ArchSpace.default()``) carries these values. The original study assumed
4 GiB/s between devices; pass ``link_gb_per_s``/``net_gb_per_s`` = 4·1.073741824
(``ORIGINAL_STUDY_GB_PER_S``) to ``phaze.arch.make_archs`` or ``ArchSpace`` to reproduce that.

``a100-80g`` — NVIDIA A100 SXM 80 GB (NVIDIA A100 Tensor Core GPU Architecture
whitepaper, 2020; A100 datasheet): 108 SMs × 4 tensor cores = 432, each modelled as a
16×16 array (256 bf16 FMA/clock: 432·256·2·1.41e9 = 312 TFLOP/s dense bf16 at the
1,410 MHz boost clock); one vector core of 16 lanes per tensor core (432 × 16);
40 MiB L2 as the shared buffer; 80 GiB HBM2e at 2,039 GB/s; NVLink 3 at 600 GB/s
bidirectional = 300 GB/s per direction among the 8 GPUs of an HGX node; one
200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s between nodes.

``h100-sxm`` — NVIDIA H100 SXM5 80 GB (NVIDIA H100 Tensor Core GPU Architecture
whitepaper, 2022; H100 datasheet): 132 SMs × 4 tensor cores = 528, each modelled as
16×32 (512 bf16 FMA/clock: 528·512·2·1.83e9 = 989 TFLOP/s dense bf16 at the 1,830 MHz
boost clock); 528 vector cores of 32 lanes; 50 MiB L2; 80 GiB HBM3 at 3,350 GB/s;
NVLink 4 at 900 GB/s bidirectional = 450 GB/s per direction within an 8-GPU node;
one 400 Gb/s NDR InfiniBand NIC per GPU = 50 GB/s between nodes.
"""
from __future__ import annotations

import numpy as np

from ._rows import build_rows

#: 4 GiB/s (the original study's device-to-device bandwidth) in decimal GB/s.
ORIGINAL_STUDY_GB_PER_S = 4 * 2**30 / 1e9

_PRESETS = {
    "tpuv4": dict(num_tc=8, tc_width=128, tc_depth=128, num_vc=2, vc_width=128,
                  buffer_mib=128.0, hbm_gib=32.0, hbm_gb_per_s=1200.0, clock_ghz=1.05,
                  link_gb_per_s=50.0, net_gb_per_s=50.0, node_size=4096),
    "a100-80g": dict(num_tc=432, tc_width=16, tc_depth=16, num_vc=432, vc_width=16,
                     buffer_mib=40.0, hbm_gib=80.0, hbm_gb_per_s=2039.0, clock_ghz=1.41,
                     link_gb_per_s=300.0, net_gb_per_s=25.0, node_size=8),
    "h100-sxm": dict(num_tc=528, tc_width=16, tc_depth=32, num_vc=528, vc_width=32,
                     buffer_mib=50.0, hbm_gib=80.0, hbm_gb_per_s=3350.0, clock_ghz=1.83,
                     link_gb_per_s=450.0, net_gb_per_s=50.0, node_size=8),
}

#: Vendor peak dense bf16 FLOP/s each preset is meant to reproduce (checked by the tests).
VENDOR_PEAK_FLOPS = {"tpuv4": 275e12, "a100-80g": 312e12, "h100-sxm": 989e12}


def names() -> list:
    """Preset names, in a fixed order."""
    return list(_PRESETS)


def get(name: str) -> np.ndarray:
    """The preset ``name`` as a one-row ``ARCH_DTYPE`` array (a fresh copy); KeyError lists the names."""
    try:
        knobs = _PRESETS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown architecture preset {name!r}; known presets: {', '.join(_PRESETS)}") from None
    return build_rows(**knobs)
