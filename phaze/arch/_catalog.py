"""The presets' chip files as data, and which rows are a preset (private to ``phaze.arch``).

Reads ``phaze/arch/chips/NAME.json`` of every preset once, when ``phaze.arch`` is imported,
with the same field checks as any chip file (``_fields``), before anything that uses the
presets exists: ``efficiency`` builds its parameter sets from :data:`EFFICIENCY`,
``dtype_rates`` its per-row rates from :data:`FP8_RATE`, ``_chipfile`` refuses a changed chip
under a preset's name, and ``presets`` (the public face, with the citations) re-exports them.
:func:`match` says which rows equal a preset in every knob (the rule ``efficiency.for_rows``
and ``dtype_rates.for_rows`` apply).
"""
from __future__ import annotations

import json
from importlib import resources

import numpy as np

from . import _fields
from ._efields import EFFICIENCY_DTYPE, INT_FIELDS
from ._rows import KNOBS, build_rows

#: Preset names, in their fixed order; preset ``NAME`` is the package file ``chips/NAME.json``.
NAMES = ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")


def path(name: str):
    """The chip file of preset ``name`` (an ``importlib.resources`` Traversable inside the
    package; ``str()`` of it is a path in an ordinary install); KeyError lists the names."""
    if name not in NAMES:
        raise KeyError(f"unknown architecture preset {name!r}; known presets: {', '.join(NAMES)}")
    return resources.files(__package__) / "chips" / f"{name}.json"


def _read(name: str) -> dict:
    """The checked fields of preset ``name``'s file; a preset must be named ``name``, give
    fp8_rate and every efficiency field, and cite what ``_fields`` asks a preset to cite."""
    where = f"preset file chips/{name}.json"
    try:
        data = json.loads(path(name).read_text(encoding="utf-8"))
        values = _fields.check_fields(data, where)
        _fields.check_citations(values, where)
    except (OSError, ValueError) as exc:  # a broken install
        raise ImportError(f"phaze.arch: cannot read {where}: {exc}") from None
    if values.get("name") != name or set(values.get("efficiency", ())) != set(EFFICIENCY_DTYPE.names) \
            or "fp8_rate" not in values:
        raise ImportError(f"phaze.arch: {where} must be named {name!r} and give fp8_rate and "
                          f"every efficiency field")
    return values


#: Every preset's checked chip-file fields (name → field → value).
FILES = {name: _read(name) for name in NAMES}
#: Knobs of each preset (read from its chip file).
KNOB_VALUES = {name: {k: values[k] for k in KNOBS} for name, values in FILES.items()}
#: Where each preset's numbers come from (each file's ``source``).
SOURCES = {name: values.get("source", "") for name, values in FILES.items()}
#: Dense FP8 tensor rate of each preset as a multiple of its 16-bit rate (each file's ``fp8_rate``).
FP8_RATE = {name: values["fp8_rate"] for name, values in FILES.items()}

# The template's tile rule: one weight-stationary array per tile, no per-tile K fill.
_TEMPLATE_TILE = dict(tile_m_mult=1, tile_n_mult=1, tile_k_mult=1, cores_per_tile=1, k_stages=1)

#: Efficiency parameters per preset (each file's ``efficiency``), plus ``"template"`` for rows
#: that are no preset: the template's tile rule with a100-80g's fractions and latencies.
EFFICIENCY = {name: dict(values["efficiency"]) for name, values in FILES.items()}
# The fused attention kernel's fractions were measured on one chip each: the template takes
# its own tile_efficiency for them (as ``Efficiency`` does without them), not the A100's.
EFFICIENCY["template"] = dict(_TEMPLATE_TILE, **{f: v for f, v in EFFICIENCY["a100-80g"].items()
                                                 if f not in INT_FIELDS})
EFFICIENCY["template"].update({f: EFFICIENCY["template"]["tile_efficiency"]
                               for f in ("flash_fwd_efficiency", "flash_bwd_efficiency")})

#: Each preset's one-row ``ARCH_DTYPE`` array (read-only; ``presets.get`` hands out copies).
ROWS = {name: build_rows(**knobs) for name, knobs in KNOB_VALUES.items()}
for _row in ROWS.values():
    _row.setflags(write=False)


def match(archs) -> list:
    """``[(name, mask), …]`` for every preset, in :data:`NAMES` order: ``mask`` is the boolean
    array of the rows of the validated ``ARCH_DTYPE`` array ``archs`` that equal the preset
    in every knob."""
    out = []
    for name in NAMES:
        ref = ROWS[name]
        same = np.ones(archs.shape[0], dtype=bool)
        for knob in KNOBS:
            same &= archs[knob] == ref[knob][0]
        out.append((name, same))
    return out
