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

from . import _fields, rules
from ._rows import KNOBS, build_rows

#: The presets of the first study, in their fixed order; the other files of ``chips/``
#: follow in name order.
_FIRST = ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")


def _names() -> tuple:
    found = sorted(p.name[:-5] for p in (resources.files(__package__) / "chips").iterdir()
                   if p.name.endswith(".json"))
    return tuple(n for n in _FIRST if n in found) + tuple(n for n in found if n not in _FIRST)


#: Preset names, in their fixed order; preset ``NAME`` is the package file ``chips/NAME.json``.
NAMES = _names()


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
    missing = [f for f in ("fp8_rate", "fp6_rate", "fp4_rate", "scaled_formats", "family")
               if f not in values]
    if values.get("name") != name or missing:
        raise ImportError(f"phaze.arch: {where} must be named {name!r} and give "
                          f"{', '.join(missing) or 'its name'}")
    return values


#: Every preset's checked chip-file fields (name → field → value).
FILES = {name: _read(name) for name in NAMES}
#: Knobs of each preset (read from its chip file).
KNOB_VALUES = {name: {k: values[k] for k in KNOBS} for name, values in FILES.items()}
#: Where each preset's numbers come from (each file's ``source``).
SOURCES = {name: values.get("source", "") for name, values in FILES.items()}
#: Dense FP8 tensor rate of each preset as a multiple of its 16-bit rate (each file's ``fp8_rate``).
FP8_RATE = {name: values["fp8_rate"] for name, values in FILES.items()}
#: silicon → the efficiency parameters measured on it (``rules.measured_table``).
MEASURED = rules.measured_table(FILES)
#: Efficiency parameters per preset — its file's measured ones, the rest by the stated rules
#: (``phaze.arch.rules``) — plus ``"template"`` for rows that are no preset: the rules for
#: a chip of the template's wide arrays whose every parameter is unmeasured.
EFFICIENCY = {}
#: For each preset and ``"template"``: field → "measured" or the rule that gives it.
EFFICIENCY_RULES = {}
for _name, _values in FILES.items():
    EFFICIENCY[_name], EFFICIENCY_RULES[_name] = rules.derive(_values, MEASURED)
EFFICIENCY["template"], EFFICIENCY_RULES["template"] = rules.derive(
    {"name": "template", "silicon": "template", "tc_width": 128}, MEASURED)

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
