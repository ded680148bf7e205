"""Architecture presets: real accelerators expressed in phaze's template.

Each preset is a one-row ``ARCH_DTYPE`` array (``get(name)``) whose knobs and efficiency
set are read from a chip file shipped in the package, ``phaze/arch/chips/NAME.json``
(``path(name)``; the format of ``phaze.arch.load_chip``, so ``phaze archs --show NAME``
prints a file to copy and edit); ``chip(name)`` gives the whole ``Chip``. Each file's
``source`` summarises where its numbers come from; the full citations are below.
Its area comes from the same area model as every other row.
Peak FLOP/s = num_tc·tc_width·tc_depth·2·clock (the dense 16-bit rate; each file's
``fp8_rate`` gives the FP8 rate as a multiple of it, sources in ``phaze.arch.dtype_rates``:
h100-sxm and h100-96g 2, a100-80g and tpuv4 0 — no FP8 tensor cores). Bandwidths are per direction, decimal GB/s; memory sizes are binary (GiB, MiB).

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

``h100-96g`` — the H100 of pytorch/torchtitan's H100 benchmarks (Meta Grand Teton;
torchtitan benchmarks/llama3_h100_202412_torchtitan.md and
benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, "Hardware"): "8 NVIDIA H100 GPUs fully
connected with NVLink", "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "RDMA network
with 400 Gb/s per GPU", "the default 500W power limit". The same GH100 compute as
``h100-sxm`` (528 tensor cores of 16×32 at 1,830 MHz = 989 TFLOP/s dense bf16, 528 × 32
vector lanes, 50 MiB L2, NVLink 4 at 450 GB/s per direction, 50 GB/s per GPU between hosts);
96 GiB of HBM2e (6 stacks × 16 GiB) at 2,400 GB/s as torchtitan states it (6 × 1024 bits at
3.2 Gb/s would be 2,458 GB/s; the H100 HBM2e of the Helma cluster is listed at 94 GiB and
2.41 TB/s, Ujeniya et al., arXiv 2604.11391). The 500 W limit is not modelled (power is issue
28's): no component measurement of this part's sustained bf16 tensor-core clock at 500 W was
found, so the boost clock is kept and its GEMMs are an upper bound on the real speed.

Efficiency parameters (``EFFICIENCY``; the calibrated cost model, ``phaze.arch.efficiency``)
-------------------------------------------------------------------------------------------
Each number below is taken from a component-level public source as collected in
``docs/fidelity-sources.md`` (section given; [P] primary, [S] secondary, [D] derived
by the arithmetic shown). None is fitted to an end-to-end training run.

``a100-80g``:

- GEMM tile: 256×128 output tile per SM, K-step 32, 3 pipeline stages — CUTLASS SM80
  kernel ``cutlass_tensorop_h16816gemm_256x128_32x3`` (NVIDIA/cutlass
  media/docs/profiler.md [P], sheet §1.2), the tile NVIDIA's *Matrix Multiplication
  Background User's Guide* (2023, §2.3, §3.2 [S]) calls most efficient and uses for its
  wave example ("108 SMs … a wave size of 108 tiles"). In the template's units:
  tile_m_mult = 256/16 = 16, tile_n_mult = 128/16 = 8, tile_k_mult = 32/16 = 2,
  cores_per_tile = 4 (tensor cores per SM), k_stages = 3.
- tile_efficiency = fp8_tile_efficiency = 0.8696 [D] (sheet §1.4): the largest measured
  fraction of the model's peak, which the tile rule's losses (partial tiles, last wave,
  K fill) let the model approach only at large shapes: 271.2e12 FLOP/s, the best shape
  (1024×10240×5120) of a brute-force bf16 search on an A100 SXM (stas00/ml-engineering,
  "Maximum Achievable Matmul FLOPS" table, torch 2.6.0+cu126, 2025 [P], sheet §1.3) over
  311.87e12 = 0.8696; an 8192³ GEMM is then priced at 268.5e12 (no A100 FP8: the field
  equals tile_efficiency). Cross-check, not used to set it: the CUTLASS profiler's
  3456×4096×8192 (235.1e12, device not printed) comes out at 215.1e12 (−8.5 %). No
  shape-resolved A100 cuBLAS sweep at transformer shapes was found (sheet §1.4).
- flash_fwd_efficiency = 0.73, flash_bwd_efficiency = 0.63 [P] (sheet §1.6): FlashAttention-2
  on an A100 80GB SXM4 at head dim 128, "up to 73 %" of peak forward, "up to 63 %" backward
  (Dao 2023).
- hbm_efficiency = 0.88: event-timed read kernel at 1.80e12 of 2.039e12 B/s, Nsight
  Compute agreeing (NVIDIA developer forum, "Trouble to Reach Peak Bandwidth of A100" [S],
  sheet §2).
- attention_hbm_efficiency = 0.650 [D]: Megatron-LM's unfused attention core measured as a
  whole on an A100 (40 GB, fp16, batch 16, 8 heads, head dim 64, s = 2048, dropout 0.1, no
  mask): 17.41 ms forward + backward (Dao et al. 2022, "FlashAttention", arXiv 2205.14135,
  Appendix E.6, Table 17, "Megatron" column [P], sheet §2.1). phaze's own operators of that
  core (batched QKᵀ and P·V GEMMs, fused scale-mask-softmax, attention dropout, and their
  backward: 17.58e9 bytes) take 17.41 ms at 0.6498 of the 1.555e12 B/s peak (solved with
  this module's other a100 parameters; fraction of peak assumed to carry from HBM2 to
  HBM2e). Cross-checks, not used to set it: the same table at s = 1024 (4.46 ms predicted,
  4.73 measured) and the forward / backward split at s = 2048 (7.04 / 10.36 ms predicted,
  6.56 / 10.80 measured, Tables 15/16).
- launch_s = 1e-6 s: GPU-side gap between back-to-back kernels on one stream (3.8 µs per
  kernel for a 2.9 µs kernel; A. Gray, "Getting Started with CUDA Graphs", NVIDIA blog
  2019 [S], sheet §3; no A100-specific number was found).
- Collectives: NCCL's ring α–β form. coll_latency_s = 8.4e-6 (NCCL v2.12.7 ring Simple
  baseLat, src/graph/tuning.cc [P], sheet §4.3) and net_step_s = 28e-6 (NET hwLat per
  inter-node step, same file). In-node: link_step_s = 4.457e-6 and link_efficiency =
  217.7/300 = 0.7257 [D], the least-squares fit (relative errors) of
  α + 2(n−1)/n · S/β over the 8 MiB – 1 GiB rows of an 8 × A100-SXM4-80GB
  ``all_reduce_perf`` run with one process per GPU (``mpirun -np 8 … -g 1``, as
  Megatron-LM runs; out-of-place; sheet §4.1, run "C2"): α = 70.8e-6 s = 8.4e-6 +
  14 · link_step_s, β = 217.7e9 B/s bus bandwidth; every row of that range within
  −9.8 … +5.9 %. The range is where Megatron's tensor-parallel collectives fall (one
  2048-token microbatch of hidden 2048 in 16 bits is 8 MiB). NCCL's own tuning model
  (3.4e-6 per step, the 235 GB/s sm80 cap) is 7–19 % faster than every measured A100
  curve at those sizes (sheet §4.1), so it is not used for them;
  net_efficiency = 24/25 = 0.96 (HDR NIC at ~24 GB/s, S. Jeaugey in NVIDIA/nccl #412 and
  #1048 [P], sheet §4.2).
- Point-to-point: link_p2p_latency_s = 16.5e-6 (DGX A100 2-GPU send/recv of small
  messages, NVIDIA/nccl #568 [P]); link_p2p_efficiency = 195.1/300 = 0.6503
  (``sendrecv_perf`` at 1 GiB on 8 A100 NVLink, li-plus/playground cuda/nccl.md [P]);
  net_p2p_latency_s = 2.0e-5 (8-byte all-reduce between 2 nodes × 1 A100 over HDR,
  19–20 µs, NVIDIA/nccl-tests #150 [P] — one inter-node hop); net_p2p_efficiency = 0.96
  (as net_efficiency).

``h100-sxm``:

- GEMM tile: the A100 kernel's multiples (16, 8, 2; 4 tensor cores per SM; 3 stages),
  which on the 16×32 arrays give 256×128 tiles with K-step 64 — the shape the sheet
  lists for CUTLASS 3 on Hopper, unverified there, so the A100 kernel's verified
  multiples are what is used.
- tile_efficiency = 0.8173 [D] (sheet §1.4): the largest fraction of peak in XLA's cuBLAS
  sweep on sm_90 (openxla ``xla/service/gpu/model/matmul_interpolator_data.h``, 2025 [P]:
  b ∈ {1, 2, 4} × M, N, K of 256–4096, bf16), 808.70e12 at b = 4, 4096×2048×4096, over
  989.43e12 (an SXM-class part: above the PCIe H100's 756e12 peak). The sweep's shapes with
  every dimension ≥ 2048 come out within −11 … +7 % (tests/test_gemm_efficiency.py); 8192³ at
  771.6e12 (MAMF's best shape, torch 2.7, 794.5e12).
- fp8_tile_efficiency = 0.7088 [D]: the best FP8 shape of the MAMF table on H100 SXM,
  1024×9216×14336 at 1402.6e12, over the FP8 peak 1978.86e12 (FP8 reaches 0.867 of the bf16
  fraction; sheet §1.4).
- flash_fwd_efficiency = 0.5448, flash_bwd_efficiency = 0.5215 [D] (sheet §1.6): cuDNN's
  fused attention (what Transformer Engine runs on Hopper) in the FlashAttention-3 paper's
  Figures 5-6, H100 SXM5, head dim 128, 16K: 539 TFLOP/s causal forward, 516 backward, over
  989.43e12 (torchtitan's SDPA flash backend, FlashAttention-2: 335 and 322).
- hbm_efficiency = 0.90: event-timed copy at 3.02e12 of 3.35e12 B/s (sheet §2 [S, weak];
  the H100 NVL BabelStream run, 0.78–0.85, is another SKU).
- attention_hbm_efficiency = 0.650: the A100's (no Hopper measurement of the unfused
  attention core was found; Hopper runs use flash attention).
- launch_s = 1e-6 s (as A100; Hopper host launch 1.3–2.1 µs, the GPU-side gap ≈1 µs, sheet §3 [S]).
- Collectives: NCCL v2.20.3 ring Simple (sheet §4.3 [P]): coll_latency_s = 8.4e-6,
  link_step_s = 3.4e-6, net_step_s = 14e-6; link_efficiency = 367.61/450 = 0.8169 (8×H200
  ring all-reduce, NVLS off, at 16 GiB, ml-engineering network/README.md [P]; NCCL's
  maintainer: "~370GB/s", NVIDIA/nccl-tests #212 [P]); net_efficiency = 47/50 = 0.94
  (NDR 400 Gb/s NICs at 46–48e9 B/s, NVIDIA/nccl-tests #290 [P]; the midpoint).
- Point-to-point: no H100 source; the A100 values (16.5e-6 s, 0.6503 in-node;
  2.0e-5 s between nodes) with net_p2p_efficiency = 0.94 (the NDR figure above).

``h100-96g``: ``h100-sxm``'s set, copied unchanged (one GH100 chip; its HBM fraction,
0.90, was measured on the HBM3 part, and no HBM2e H100 copy measurement was found; its flash
fractions are the SXM's too: no 500 W flash-attention measurement was found).

``tpuv4`` and ``template`` (every row that is no preset, e.g. the study's space): no
component-level TPU v4 measurement of GEMM, HBM or ICI efficiency was found (sheet §8.4).
Both take every parameter from the stated rules (``phaze.arch.rules``, sheet §17): the
means of the fractions and latencies measured on the other dies, the FP8 and flash
fractions by their mean ratio to the GEMM fraction, and the template's own tile rule —
one weight-stationary array per tile (cores_per_tile 1; tile_m_mult = tile_n_mult =
tile_k_mult = 1) and no per-tile K fill (k_stages 1), because an array's fill and drain
is already in the template's array model. (Before issue 26 they copied the a100-80g set.)

The presets of issue 26 (``h200``, ``b200``, ``b300``, ``gb200``, ``gb300``, ``mi300x``,
``mi325x``, ``mi355x``, ``tpu-v5e``, ``tpu-v5p``, ``tpu-v6e``, ``tpu7x``, ``gaudi3``,
``trainium2``) cite every number in their files' ``cite`` objects; the full citations, with
the arithmetic, are ``docs/fidelity-sources.md`` §14. In ``h100-sxm`` and ``h100-96g`` the
values that were the A100's (the tile multiples, attention_hbm_efficiency, launch_s, the
in-node point-to-point latency and efficiency, the network point-to-point latency) are no
longer in the files: the rules give them, and the in-node point-to-point efficiency is the
GH100 die's own nvbandwidth measurement (0.8809, the ``h200`` file).
"""
from __future__ import annotations

import numpy as np

from . import _catalog
from ._chipfile import Chip, preset_chip

#: 4 GiB/s (the original study's device-to-device bandwidth) in decimal GB/s.
ORIGINAL_STUDY_GB_PER_S = 4 * 2**30 / 1e9

#: Knobs of each preset (read from its chip file).
_PRESETS = _catalog.KNOB_VALUES
#: Where each preset's numbers come from (each file's ``source``; the full citations are
#: this module's docstring).
SOURCES = _catalog.SOURCES
#: Dense FP8 tensor rate of each preset as a multiple of its 16-bit rate (each file's
#: ``fp8_rate``; 0 = no FP8 tensor cores; sources: ``phaze.arch.dtype_rates``).
FP8_RATE = _catalog.FP8_RATE

#: Vendor peak dense bf16 FLOP/s each preset is meant to reproduce (checked by the tests).
VENDOR_PEAK_FLOPS = {"tpuv4": 275e12, "a100-80g": 312e12, "h100-sxm": 989e12,
                     "h100-96g": 989e12}

#: Efficiency parameters per preset (each file's ``efficiency``), plus ``"template"`` for
#: rows that are no preset: the template's tile rule with a100-80g's fractions and
#: latencies (fields: ``phaze.arch.efficiency``; sources: this module's docstring).
EFFICIENCY = _catalog.EFFICIENCY

#: The chip file of preset ``name`` (``importlib.resources`` Traversable); KeyError lists the names.
path = _catalog.path

# Each preset's record, made once (a Chip is immutable: frozen, its row read-only).
_CHIPS = {name: preset_chip(name) for name in _catalog.NAMES}


def names() -> list:
    """Preset names, in a fixed order."""
    return list(_catalog.NAMES)


def get(name: str) -> np.ndarray:
    """The preset ``name`` as a one-row ``ARCH_DTYPE`` array (a fresh copy); KeyError lists the names."""
    try:
        row = _catalog.ROWS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown architecture preset {name!r}; known presets: "
                       f"{', '.join(_catalog.NAMES)}") from None
    return row.copy()


def match(archs) -> list:
    """``[(name, mask), …]`` for every preset, in :func:`names` order: ``mask`` the boolean
    array of the rows of ``archs`` (validated ``ARCH_DTYPE`` rows) equal to that preset in
    every knob — the rows ``phaze.arch.resolve`` and ``efficiency.for_rows`` take for it."""
    return _catalog.match(archs)


def chip(name: str) -> Chip:
    """The preset ``name`` as a ``phaze.arch.Chip`` (its row, efficiency set, tensor rates,
    fabric tiers, name and source); KeyError lists the names."""
    try:
        return _CHIPS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown architecture preset {name!r}; known presets: "
                       f"{', '.join(_catalog.NAMES)}") from None
