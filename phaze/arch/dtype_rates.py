"""Tensor-core rate of a chip at each training datatype (``phaze.precision.DTYPES``).

The template's peak, ``num_tc · tc_width · tc_depth · 2 · clock``, is the 16-bit (bf16)
dense rate. A chip's rate at another datatype is that peak times a multiplier:

- ``bf16`` and ``fp16``: 1 on every chip (every chip phaze knows has the same dense
  tensor rate for both: A100 312 TFLOP/s, H100 SXM 989.4 TFLOP/s).
- ``fp8``: the chip's ``fp8_rate`` — 0 for a chip without FP8 tensor cores (training in
  fp8 on it is refused), else a number ≥ 1. The presets (their chip files):

  * ``h100-sxm``: 2 — NVIDIA H100 datasheet / Hopper whitepaper (2022), H100 SXM dense
    FP8 1,978.9 TFLOP/s against dense BF16 989.4 TFLOP/s (3,958 and 1,979 "with sparsity");
  * ``h100-96g``: 2 — the same GH100 tensor cores as ``h100-sxm`` (only its HBM differs);
  * ``a100-80g``: 0 — the A100 (Ampere whitepaper, 2020) has TF32, FP16/BF16, INT8 and INT4
    tensor cores, no FP8 (FP8 tensor cores arrived with Hopper);
  * ``tpuv4``: 0 — TPU v4's MXUs multiply bf16 (and int8); no FP8 (Jouppi et al. 2023).

Rule of the template (:data:`TEMPLATE_FP8_RATE`), for every row that is no chip with its
own rate — the study's hypothetical chips of ``phaze.arch.ArchSpace``: fp8 at 2× the
16-bit rate. 2 is the dense FP8/BF16 ratio of the accelerators with FP8 tensor cores and
published dense peaks: NVIDIA H100 and H200 (1,978.9 / 989.4 TFLOP/s), B200 (4.5 / 2.25
PFLOP/s), AMD MI300X (2,614.9 / 1,307.4 TFLOP/s; AMD CDNA 3 white paper).
Intel Gaudi 3 is the exception: its MME runs FP8 and BF16 at the same 1,835 TFLOP/s
(Intel Gaudi 3 white paper, 2024): a chip file says ``"fp8_rate": 1`` for such a chip.

A chip file overrides the rule with its ``fp8_rate`` field (``phaze.arch.load_chip``);
without the field a chip takes the preset's value when its knobs equal a preset's
(``for_rows``), else the template's. ``phaze.cost.op_latencies(..., fp8_rate=)`` takes
the multiplier per row (``None``: the template's for every row, as ``efficiency=None``
takes the template's efficiency set).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..precision import DTYPES, check_dtype
from . import _catalog
from ._fields import check_fp8_rate
from ._rows import validate

__all__ = ["TEMPLATE_FP8_RATE", "check_fp8_rate", "for_rows", "per_row", "rates", "tensor_rate"]

#: fp8 dense tensor rate / 16-bit dense rate of a template (hypothetical) chip.
TEMPLATE_FP8_RATE = 2.0


def per_row(fp8_rate, n_archs: int) -> np.ndarray:
    """The fp8 multiplier of each of ``n_archs`` rows (float64): ``None`` gives
    :data:`TEMPLATE_FP8_RATE` to every row, a number to every row, a sequence of
    ``n_archs`` numbers one per row; each is 0 or ≥ 1."""
    if fp8_rate is None:
        return np.full(n_archs, TEMPLATE_FP8_RATE)
    if isinstance(fp8_rate, numbers.Real) and not isinstance(fp8_rate, bool):
        return np.full(n_archs, check_fp8_rate(fp8_rate))
    values = np.asarray(fp8_rate, dtype=np.float64).reshape(-1)
    if values.shape[0] != n_archs:
        raise ValueError(f"fp8_rate has {values.shape[0]} values; expected one number or "
                         f"{n_archs} (one per architecture)")
    for v in values:
        check_fp8_rate(float(v))
    return np.ascontiguousarray(values)


def for_rows(archs) -> np.ndarray:
    """The fp8 multiplier of each architecture row: a preset's where the row equals that
    preset in every knob, :data:`TEMPLATE_FP8_RATE` elsewhere (as
    ``phaze.arch.efficiency.for_rows``)."""
    archs = validate(archs)
    out = np.full(archs.shape[0], TEMPLATE_FP8_RATE)
    for name, same in _catalog.match(archs):
        out[same] = _catalog.FP8_RATE[name]
    return out


def tensor_rate(dtype: str, fp8_rate: float, chip_name: str) -> float:
    """The multiplier of the 16-bit rate at ``dtype`` for a chip whose fp8 multiplier is
    ``fp8_rate``; ``ValueError`` in one sentence when the chip cannot train in ``dtype``."""
    if check_dtype(dtype) != "fp8":
        return 1.0
    if fp8_rate == 0:
        raise ValueError(f"dtype fp8 needs fp8 tensor cores, which {chip_name} does not have "
                         f"(its fp8_rate is 0); train it in bf16 or fp16")
    return float(fp8_rate)


def rates(fp8_rate) -> dict:
    """The multiplier of the 16-bit dense tensor rate at every training datatype
    (``phaze.precision.DTYPES``) of a chip whose fp8 multiplier is ``fp8_rate``: 1.0 for bf16
    and fp16, ``fp8_rate`` (0.0: no fp8 tensor cores) for fp8."""
    fp8 = check_fp8_rate(fp8_rate)
    return {dtype: (fp8 if dtype == "fp8" else 1.0) for dtype in DTYPES}
