"""The fused attention kernels measured on each die (``phaze.plan`` knob
``attention_kernel``; docs/fidelity-sources.md §1.6).

A chip's ``flash_fwd_efficiency`` / ``flash_bwd_efficiency`` are the rates of one kernel,
the one its trainers run (:data:`PRESET_KERNEL`). Which kernel runs is the trainer's
choice, not the chip's: Transformer Engine (Megatron-Core, NeMo) runs cuDNN's fused
attention on Hopper, PyTorch's ``scaled_dot_product_attention`` its flash backend,
FlashAttention-2 (torchtitan, NeMo AutoModel's TorchSDPA), and FlashAttention-3 is its own
package. :data:`KERNELS` holds, per die, each kernel's measured forward and backward
fraction of the die's 16-bit tensor peak on the part it was measured on; another kernel on
a chip is the chip's own fractions times that kernel's over its own kernel's (a part of the
same die at another power limit, h100-96g, keeps its ratio to the measured part).

Sources [P]: GH100 — Shah et al., "FlashAttention-3" (arXiv 2407.08608, 2024), Figures 5-6
(H100 80GB SXM5, BF16, head dim 128, 16K tokens, causal forward, backward): cuDNN 539 / 516,
FlashAttention-2 335 / 322, FlashAttention-3 616 / 561 TFLOP/s of 989.43. GA100 — Dao,
"FlashAttention-2" (arXiv 2307.08691, 2023): up to 73 % forward, 63 % backward on A100.
B200 — FlashAttention-4 (arXiv 2603.05451, 2026): forward up to 1613 TFLOP/s of 2250, up to
1.3× cuDNN 9.13 (so cuDNN 1240.8); no backward of either measured.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Per die (a chip file's ``silicon``): kernel → (forward, backward) fraction of the 16-bit
#: tensor peak, as measured (module docstring).
KERNELS = {
    "GH100": {"cudnn": (539e12 / 989.43e12, 516e12 / 989.43e12),
              "fa2": (335e12 / 989.43e12, 322e12 / 989.43e12),
              "fa3": (616e12 / 989.43e12, 561e12 / 989.43e12)},
    "GA100": {"fa2": (0.73, 0.63)},
    # B200: FlashAttention-4's forward best point and cuDNN 9.13's at 1/1.3 of it (the FA4
    # paper, arXiv 2603.05451); no backward measured of either (both the rule's backward)
    "B200": {"cudnn": (1613e12 / 1.3 / 2250e12, None), "fa4": (1613e12 / 2250e12, None)},
}

#: The kernel each preset's own flash fractions are of (docs/fidelity-sources.md §1.6).
PRESET_KERNEL = {"h100-sxm": "cudnn", "h200": "cudnn", "h100-96g": "fa2", "a100-80g": "fa2",
                 "b200": "cudnn", "gb200": "cudnn"}

#: The values of the knob: "chip" (the chip's own) and every kernel measured on some die.
KERNEL_NAMES = ("chip",) + tuple(sorted({k for table in KERNELS.values() for k in table}))


def attention_efficiency(chip, kernel: str):
    """``chip``'s efficiency set (``phaze.arch.Chip.efficiency_set``) with its fused
    attention at ``kernel``'s measured rates (module docstring); "chip" and the chip's own
    kernel give the set unchanged. A chip without a measurement of the kernel on its die
    refuses it in one sentence (``ValueError``)."""
    eff = chip.efficiency_set()
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"attention_kernel must be one of {', '.join(KERNEL_NAMES)}, "
                         f"got {kernel!r}")
    own = PRESET_KERNEL.get(chip.name)
    if kernel == "chip" or kernel == own:
        return eff
    table = KERNELS.get(chip.silicon or "", {})
    if own not in table or kernel not in table:
        have = sorted(k for k in table if own in table) if own else []
        raise ValueError(
            f"attention_kernel {kernel!r} has no measurement on {chip.name}"
            + (f" ({chip.silicon})" if chip.silicon else "")
            + (f"; measured there: {', '.join(have)}" if have else "")
            + "; use attention_kernel 'chip' (its own rates)")
    (f0, b0), (f1, b1) = table[own], table[kernel]
    # a pass measured for neither kernel (None) keeps the chip's own fraction
    bwd = 1.0 if b0 is None or b1 is None else b1 / b0
    return dataclasses.replace(eff, flash_fwd_efficiency=eff.flash_fwd_efficiency * (f1 / f0),
                               flash_bwd_efficiency=eff.flash_bwd_efficiency * bwd)


# -- the kernels' speed by shape ------------------------------------------------------------
#
# A fused attention kernel's rate depends on the shape it runs at: each CTA's fixed costs
# (prologue, the last tile's epilogue, the masked diagonal tile under a causal mask) are
# amortised over a K loop as long as the keys each query tile computes, and a smaller head
# dimension gives every key block less tensor-core work per byte and per softmax step. A
# chip's flash fractions are of one shape — causal, head dimension 128, 16K tokens per
# sequence (the FlashAttention-3 paper's bars the presets' fractions were read from) — and
# :func:`shape_factor` is a kernel's measured rate at another shape over its rate there.
#
# Source [P]: Shah et al., "FlashAttention-3" (arXiv 2407.08608, 2024), Figures 5 and 6:
# H100 80GB SXM5, BF16, batch × sequence = 16K tokens, hidden 2048 (so 16 heads of 128 or
# 32 of 64), sequence 512 … 16K; forward with a causal mask, backward without a mask (the
# paper's backward figure has none). The bar labels as transcribed from the figures [S]; at
# 8K and 16K, head dimension 128, they are the figures' values phaze's presets cite
# (cuDNN 529 / 539 forward, 518 / 516 backward; FA3 616 / 561; FA2 335 / 322: §1.6).
# TFLOP/s at 512, 1K, 2K, 4K, 8K, 16K.

#: Sequence lengths of the measured bars (tokens).
SHAPE_SEQS = (512, 1024, 2048, 4096, 8192, 16384)

#: Head dimensions measured.
SHAPE_HEAD_DIMS = (64, 128)

#: GH100 kernel → pass → head dimension → TFLOP/s at :data:`SHAPE_SEQS` (module notes above).
SHAPE_TFLOPS = {
    "cudnn": {"fwd": {64: (225, 288, 334, 363, 379, 388), 128: (315, 410, 484, 518, 529, 539)},
              "bwd": {64: (266, 348, 395, 417, 432, 433), 128: (305, 408, 465, 499, 518, 516)}},
    "fa2": {"fwd": {64: (180, 229, 262, 284, 295, 299), 128: (191, 260, 298, 319, 333, 335)},
            "bwd": {64: (198, 238, 264, 279, 287, 291), 128: (214, 260, 291, 310, 318, 322)}},
    "fa3": {"fwd": {64: (197, 265, 371, 420, 460, 473), 128: (292, 423, 521, 579, 602, 616)},
            "bwd": {64: (272, 363, 422, 453, 472, 474), 128: (316, 424, 501, 542, 559, 561)}},
}

#: The shape the chips' flash fractions were measured at: head dimension 128, 16K tokens.
REFERENCE_SHAPE = (128, 16384)

#: The curve of a chip whose kernel was not measured by shape (every preset but those of
#: :data:`PRESET_KERNEL`, and every hypothetical chip): cuDNN's, the kernel Transformer
#: Engine runs on NVIDIA GPUs (a rule, not a measurement of that chip).
DEFAULT_SHAPE_KERNEL = "cudnn"

#: Query rows of a causal kernel's tile (``phaze.graph._ops.FLASH_CAUSAL_BLOCK``): a causal
#: sequence of s tokens computes (s + B)/2 keys per query.
_TILE_ROWS = 128


def shape_sequence(keys: float) -> float:
    """The causal sequence length whose kernel computes ``keys`` keys per query on average:
    2·keys − 128 (a causal sequence of s tokens computes (s + 128)/2; a sliding window of w
    about w + 64, so its kernel runs as a causal one of about 2w)."""
    return 2.0 * float(keys) - _TILE_ROWS


def _interp(xs, ys, x):
    """Linear interpolation of ``ys`` over ``xs`` (increasing) at ``x``, clamped to the ends."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    raise AssertionError("unreachable")


def shape_factor(kernel: str, backward: bool, head_dim: int, keys: float) -> float:
    """``kernel``'s measured rate (:data:`SHAPE_TFLOPS`) at an operator of head dimension
    ``head_dim`` computing ``keys`` keys per query, over its rate at :data:`REFERENCE_SHAPE`
    (forward causal, backward unmasked, as measured). The sequence is
    :func:`shape_sequence` (``keys``) for both passes, interpolated linearly in log2 of the
    sequence and of the head dimension between the measured bars and clamped outside them
    (below 512 tokens the 512 bar, above 16K the 16K bar; a head dimension below 64 the 64
    bars, above 128 the 128 bars: not measured here). 1 at the reference shape."""
    if kernel not in SHAPE_TFLOPS:
        raise ValueError(f"a flash shape curve must be one of {', '.join(sorted(SHAPE_TFLOPS))}, "
                         f"got {kernel!r}")
    if head_dim <= 0 or keys <= 0:
        raise ValueError(f"head_dim and keys must be > 0, got {head_dim!r} and {keys!r}")
    table = SHAPE_TFLOPS[kernel]["bwd" if backward else "fwd"]
    lx = [math.log2(s) for s in SHAPE_SEQS]
    ls = math.log2(max(shape_sequence(keys), 1.0))
    at = {d: _interp(lx, table[d], ls) for d in SHAPE_HEAD_DIMS}
    lo, hi = SHAPE_HEAD_DIMS
    rate = _interp([math.log2(lo), math.log2(hi)], [at[lo], at[hi]], math.log2(head_dim))
    ref = table[REFERENCE_SHAPE[0]][SHAPE_SEQS.index(REFERENCE_SHAPE[1])]
    return rate / float(ref)


def shape_kernel(chip, kernel: str = "chip") -> str:
    """The kernel whose shape curve prices ``chip``'s fused attention under the plan knob
    ``attention_kernel`` = ``kernel``: the knob's kernel, or for "chip" the chip's own
    (:data:`PRESET_KERNEL`); :data:`DEFAULT_SHAPE_KERNEL` for a chip without one and for a
    kernel whose speed was not measured by shape (FlashAttention-4)."""
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"attention_kernel must be one of {', '.join(KERNEL_NAMES)}, "
                         f"got {kernel!r}")
    if kernel == "chip":
        kernel = PRESET_KERNEL.get(getattr(chip, "name", None), DEFAULT_SHAPE_KERNEL)
    # a kernel not measured by shape (FlashAttention-4) takes the default curve
    return kernel if kernel in SHAPE_TFLOPS else DEFAULT_SHAPE_KERNEL


def shape_kernels_for_rows(archs) -> list:
    """The shape curve of each architecture row (``phaze.arch.ARCH_DTYPE``): a preset row
    its own kernel's (:data:`PRESET_KERNEL`: e.g. a100-80g FlashAttention-2), every other
    row :data:`DEFAULT_SHAPE_KERNEL` (a hypothetical chip, or a preset whose kernel was not
    measured by shape): a list of kernel names, one per row."""
    from . import _catalog
    from ._rows import validate
    rows = validate(archs)
    out = [DEFAULT_SHAPE_KERNEL] * rows.shape[0]
    for name, same in _catalog.match(rows):
        for i in np.flatnonzero(same):
            k = PRESET_KERNEL.get(name, DEFAULT_SHAPE_KERNEL)
            out[int(i)] = k if k in SHAPE_TFLOPS else DEFAULT_SHAPE_KERNEL
    return out
