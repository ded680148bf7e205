"""``make_archs``: architecture rows from knobs, the missing ones taken from a preset.

Its own module, after ``presets`` (whose rows a base name gives), before the face.
"""
from __future__ import annotations

import numpy as np

from . import presets
from ._rows import KNOBS, build_rows, validate


def make_archs(*, base=None, **fields) -> np.ndarray:
    """Build validated architecture rows (``ARCH_DTYPE``) and fill ``area_mm2``.

    Each keyword is a knob of ``ARCH_DTYPE`` (all but ``area_mm2``), a scalar or a
    1-D sequence; they are broadcast against each other. Knobs not given are taken
    from ``base`` (a preset name or a one-row structured array); without a base
    every knob is required. Zero, negative, NaN or non-integral counts raise
    ``ValueError`` naming the knob.
    """
    unknown = sorted(set(fields) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown architecture field(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(KNOBS)}")
    if base is not None:
        base = validate(presets.get(base) if isinstance(base, str) else base)
        if base.shape[0] != 1:
            raise ValueError("base must be a preset name or a one-row architecture array")
        for name in KNOBS:
            fields.setdefault(name, base[name][0])
    return build_rows(**fields)
