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

The other low-precision families (``phaze.precision.Datatype.family``) have their own
fields, ``fp6_rate`` and ``fp4_rate`` (same form: 0 = none), with template rules
(:data:`TEMPLATE_RATES`) fp6 2 (Blackwell runs FP6 at its FP8 rate: NVIDIA Blackwell
architecture technical brief, 2024) and fp4 4 (B200 dense FP4 9 PFLOP/s vs 2.25 dense
BF16; MI355X dense MXFP4 10.1 vs 2.5 PFLOP/s). A block-scaled datatype (``Datatype.native``:
MXFP8/6/4 "mx", NVFP4 "nvfp4") also needs the format among the chip's ``scaled_formats``;
the template's rows take every format.

A chip file overrides the rule with its ``fp8_rate`` field (``phaze.arch.load_chip``);
without the field a chip takes the preset's value when its knobs equal a preset's
(``for_rows``), else the template's. ``phaze.cost.op_latencies(..., fp8_rate=)`` takes
the multiplier per row (``None``: the template's for every row, as ``efficiency=None``
takes the template's efficiency set).
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import precision
from . import _catalog
from ._fields import SCALED_FORMATS, check_fp8_rate
from ._rows import validate

__all__ = ["PRESET_RATES", "TEMPLATE_FP8_RATE", "TEMPLATE_RATES", "check_fp8_rate", "for_rows",
           "per_row", "rates", "tensor_rate"]

#: fp8 dense tensor rate / 16-bit dense rate of a template (hypothetical) chip.
TEMPLATE_FP8_RATE = 2.0
#: Each low-precision family's dense rate / 16-bit rate on a template chip (module docstring).
TEMPLATE_RATES = {"fp8": TEMPLATE_FP8_RATE, "fp6": 2.0, "fp4": 4.0}


def _family(dtype) -> str:
    d = precision.datatype(dtype)
    return d.family if d.low_precision else "fp8"


def per_row(fp8_rate, n_archs: int, dtype: str = "fp8") -> np.ndarray:
    """The low-precision multiplier of each of ``n_archs`` rows (float64) for ``dtype``'s
    family: ``None`` gives the template's (:data:`TEMPLATE_RATES`) to every row, a number to
    every row, a sequence of ``n_archs`` numbers one per row; each is 0 or ≥ 1."""
    if fp8_rate is None:
        return np.full(n_archs, TEMPLATE_RATES[_family(dtype)])
    if isinstance(fp8_rate, numbers.Real) and not isinstance(fp8_rate, bool):
        return np.full(n_archs, check_fp8_rate(fp8_rate))
    values = np.asarray(fp8_rate, dtype=np.float64).reshape(-1)
    if values.shape[0] != n_archs:
        raise ValueError(f"fp8_rate has {values.shape[0]} values; expected one number or "
                         f"{n_archs} (one per architecture)")
    for v in values:
        check_fp8_rate(float(v))
    return np.ascontiguousarray(values)


def for_rows(archs, dtype: str = "fp8") -> np.ndarray:
    """The multiplier of ``dtype`` (default fp8) for each architecture row: a preset's
    (:data:`PRESET_RATES`; 0 where the preset cannot run ``dtype``) where the row equals that
    preset in every knob, the template's (:data:`TEMPLATE_RATES`; 1 for a 16-bit type)
    elsewhere."""
    archs = validate(archs)
    d = precision.datatype(dtype)
    out = np.full(archs.shape[0], TEMPLATE_RATES[d.family] if d.low_precision else 1.0)
    for name, same in _catalog.match(archs):
        out[same] = PRESET_RATES[name][d.name]
    return out


def rates(fp8_rate, fp6_rate=None, fp4_rate=None, scaled_formats=SCALED_FORMATS) -> dict:
    """The multiplier of the 16-bit dense tensor rate at every training datatype
    (``phaze.precision.DTYPES``) of a chip: 1.0 for the 16-bit types; its family's rate for
    a low-precision type (``fp6_rate`` / ``fp4_rate`` None: the template's), 0.0 where the
    chip has no tensor cores of the family or the type's block-scaled format is not among
    ``scaled_formats``."""
    family = {"fp8": check_fp8_rate(fp8_rate),
              "fp6": TEMPLATE_RATES["fp6"] if fp6_rate is None else check_fp8_rate(fp6_rate),
              "fp4": TEMPLATE_RATES["fp4"] if fp4_rate is None else check_fp8_rate(fp4_rate)}
    out = {}
    for d in precision.DATATYPES:
        if not d.low_precision:
            out[d.name] = 1.0
        elif d.native and d.native not in scaled_formats:
            out[d.name] = 0.0
        else:
            out[d.name] = family[d.family]
    return out


def tensor_rate(dtype: str, chip_rates, chip_name: str, scaled_formats=SCALED_FORMATS) -> float:
    """The multiplier of the 16-bit rate at ``dtype`` for a chip whose :func:`rates` are
    ``chip_rates``; ``ValueError`` in one sentence when the chip cannot train in ``dtype``."""
    d = precision.datatype(dtype)
    if not d.low_precision:
        return 1.0
    rate = float(chip_rates[d.name])
    if rate == 0:
        if d.native and d.native not in scaled_formats:
            raise ValueError(f"dtype {d.name} needs tensor cores that consume the "
                             f"{d.native} block-scaled format, which {chip_name} does not have "
                             f"(its scaled_formats: {', '.join(scaled_formats) or 'none'}); "
                             f"train it in another datatype")
        raise ValueError(f"dtype {d.name} needs {d.family} tensor cores, which {chip_name} does "
                         f"not have (its {precision.RATE_FIELDS[d.family]} is 0); train it in "
                         f"bf16 or fp16")
    return rate


#: The dense tensor rate of each preset at every datatype (:func:`rates` of its file's
#: fields), what :func:`for_rows` gives a row equal to that preset.
PRESET_RATES = {name: rates(v["fp8_rate"], v["fp6_rate"], v["fp4_rate"], v["scaled_formats"])
                for name, v in _catalog.FILES.items()}


#: The chip-file fields a chip's rates come from (each family's rate field,
#: ``precision.RATE_FIELDS``, and the block-scaled formats), and what a row that equals no
#: preset takes for each.
ROW_FIELDS = tuple(f for f in precision.RATE_FIELDS.values() if f) + ("scaled_formats",)
TEMPLATE_FIELDS = dict(fp8_rate=TEMPLATE_FP8_RATE, fp6_rate=TEMPLATE_RATES["fp6"],
                       fp4_rate=TEMPLATE_RATES["fp4"], scaled_formats=SCALED_FORMATS)


def row_fields(row) -> dict:
    """The rate fields (:data:`ROW_FIELDS`) a one-row architecture takes where its chip gives
    none: the first preset's that equals it in every knob, else the template's."""
    for name, same in _catalog.match(validate(row)):
        if same[0]:
            return {f: _catalog.FILES[name][f] for f in ROW_FIELDS}
    return dict(TEMPLATE_FIELDS)
