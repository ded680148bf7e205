"""The entrance: what ``--arch NAME|FILE`` and ``arch=`` accept, resolved once into a chip
record (private to ``phaze.arch``; its names are the face's).

- :func:`resolve` gives one :class:`~phaze.arch.Chip` — the knob row, the efficiency set,
  the tensor rate at each datatype and the fabric tiers — for a preset name, a chip file,
  a ``Chip`` or one architecture row, with an optional override of the efficiency set or
  the fp8 rate; the layers below take the record whole.
- :func:`resolve_rows` gives many rows their per-row arrays (efficiency sets, fp8 rates)
  in the form the cost and step kernels take.
- :func:`resolve_chip` is :func:`resolve` without overrides (its older name).
"""
from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

import numpy as np

from .._validate import show
from . import dtype_rates, efficiency as _efficiency, presets
from ._chipfile import Chip, load_chip
from ._efields import EFFICIENCY_DTYPE
from ._fields import check_fp8_rate
from ._rows import KNOBS, validate


def resolve_chip(spec) -> Chip:
    """What ``--arch NAME|FILE`` and ``arch=`` accept, as a :class:`Chip`.

    ``spec``: a :class:`Chip`; a preset name (``presets.names()``; the preset's own file,
    efficiency set included); a path (str or ``os.PathLike``) of a chip file; or an
    architecture row (a one-row structured array or record, name "custom", no
    efficiency set). A preset name wins over a file of the same name in the working
    directory. An unknown name raises ``KeyError`` naming the presets.
    """
    if isinstance(spec, Chip):
        return spec
    if isinstance(spec, str) and spec in presets.names():
        return presets.chip(spec)
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        looks_like_path = (os.sep in text or (os.altsep and os.altsep in text)
                           or text.lower().endswith((".json", ".toml")))
        if looks_like_path or os.path.isfile(text):
            return load_chip(text)
        raise KeyError(f"unknown architecture {text!r}: neither a preset "
                       f"({', '.join(presets.names())}) nor a chip file (.json)")
    if isinstance(spec, (np.ndarray, np.void)):
        row = validate(spec)
        if row.shape[0] != 1:
            raise ValueError(f"arch must be one architecture, got {row.shape[0]} rows")
        row = row.copy()
        row.setflags(write=False)
        for name in presets.names():  # a preset's row keeps the preset's name
            ref = presets.chip(name).row
            if all(row[k][0] == ref[k][0] for k in KNOBS):
                return dataclasses.replace(presets.chip(name), row=row)
        return Chip(name="custom", row=row)
    raise ValueError(f"arch must be a preset name, a chip file, a Chip or one architecture "
                     f"row, got {show(spec)}")


def _one_efficiency(efficiency) -> _efficiency.Efficiency:
    """An efficiency override as one ``Efficiency``: a set's name, an ``Efficiency`` or a
    one-row ``EFFICIENCY_DTYPE`` array (checked field by field)."""
    if isinstance(efficiency, str):
        return _efficiency.get(efficiency)
    if isinstance(efficiency, _efficiency.Efficiency):
        return efficiency
    if isinstance(efficiency, np.ndarray) and efficiency.dtype.names is not None:
        rows = _efficiency.rows(efficiency, 1)
        return _efficiency.Efficiency(**{f: rows[f][0].item() for f in EFFICIENCY_DTYPE.names})
    raise ValueError("efficiency must be None, a parameter-set name "
                     f"({', '.join(_efficiency.names())}), a phaze.arch.efficiency.Efficiency "
                     f"or a one-row EFFICIENCY_DTYPE array, got {show(efficiency)}")


def resolve(arch, *, efficiency=None, fp8_rate=None) -> Chip:
    """The one chip record of ``arch``, resolved and checked once.

    ``arch``: a preset name, a chip-file path, a :class:`Chip` or one ``ARCH_DTYPE`` row
    (:func:`resolve_chip`; a row equal to a preset is that preset, another row is "custom"
    with ``efficiency.for_rows`` and ``dtype_rates.for_rows`` of it). ``efficiency``
    (None: the chip's own): a set's name, an ``Efficiency`` or a one-row
    ``EFFICIENCY_DTYPE`` array, replacing the chip's set; ``fp8_rate`` (None: the chip's
    own): 0 or a number ≥ 1, replacing the chip's fp8 multiplier. The record's
    ``efficiency_set()``, ``rates``/``tensor_rate(dtype)`` and ``tiers`` then carry the
    overrides. Bad input raises ``ValueError`` (``KeyError`` for an unknown name) in one
    sentence.
    """
    chip = resolve_chip(arch)
    changes = {}
    if efficiency is not None:
        changes["efficiency"] = _one_efficiency(efficiency)
    if fp8_rate is not None:
        changes["fp8_rate"] = check_fp8_rate(fp8_rate)
    return dataclasses.replace(chip, **changes) if changes else chip


class ChipRows(NamedTuple):
    """Many architectures resolved at once, as the cost and step kernels take them.

    - ``archs``: the validated rows (C-contiguous ``ARCH_DTYPE``, n rows);
    - ``efficiency``: one efficiency set per row (C-contiguous ``EFFICIENCY_DTYPE``, n rows);
    - ``fp8_rate``: the fp8 tensor-rate multiplier of each row (float64, n; 0 = none).
    """

    archs: np.ndarray
    efficiency: np.ndarray
    fp8_rate: np.ndarray


def resolve_rows(archs, efficiency=None, fp8_rate=None) -> ChipRows:
    """Per-row arrays of many architectures: ``(archs, efficiency rows, fp8 rates)``.

    ``archs``: structured rows (``ARCH_DTYPE`` fields), or anything :func:`resolve` takes
    (one chip: its row, its set and its rate). ``efficiency``: None — each row's own
    (``efficiency.for_rows``: a preset's set where the row equals that preset, else the
    template's; a chip's resolved set) — or what ``efficiency.rows`` accepts (a set's
    name, an ``Efficiency``, an ``EFFICIENCY_DTYPE`` array of 1 or n rows). ``fp8_rate``:
    None — each row's own (``dtype_rates.for_rows``; a chip's rate) — or what
    ``dtype_rates.per_row`` accepts (one number or n). Bad input raises ``ValueError``.
    """
    if isinstance(archs, (np.ndarray, np.void)) and archs.dtype.names is not None:
        rows = validate(archs)
        eff = (_efficiency.for_rows(rows) if efficiency is None
               else _efficiency.rows(efficiency, rows.shape[0]))
        rates = (dtype_rates.for_rows(rows) if fp8_rate is None
                 else dtype_rates.per_row(fp8_rate, rows.shape[0]))
        return ChipRows(rows, eff, rates)
    chip = resolve_chip(archs)
    rows = np.ascontiguousarray(chip.row.copy())
    eff = (chip.resolved_efficiency.row() if efficiency is None
           else _efficiency.rows(efficiency, 1))
    rates = (np.array([chip.rates["fp8"]]) if fp8_rate is None
             else dtype_rates.per_row(fp8_rate, 1))
    return ChipRows(rows, eff, rates)
