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
"""
from __future__ import annotations

import dataclasses

#: Per die (a chip file's ``silicon``): kernel → (forward, backward) fraction of the 16-bit
#: tensor peak, as measured (module docstring).
KERNELS = {
    "GH100": {"cudnn": (539e12 / 989.43e12, 516e12 / 989.43e12),
              "fa2": (335e12 / 989.43e12, 322e12 / 989.43e12),
              "fa3": (616e12 / 989.43e12, 561e12 / 989.43e12)},
    "GA100": {"fa2": (0.73, 0.63)},
}

#: The kernel each preset's own flash fractions are of (docs/fidelity-sources.md §1.6).
PRESET_KERNEL = {"h100-sxm": "cudnn", "h200": "cudnn", "h100-96g": "fa2", "a100-80g": "fa2"}

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
    return dataclasses.replace(eff, flash_fwd_efficiency=eff.flash_fwd_efficiency * (f1 / f0),
                               flash_bwd_efficiency=eff.flash_bwd_efficiency * (b1 / b0))
