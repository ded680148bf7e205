"""Chip files: one accelerator described in a JSON (or TOML) file (docs/design.md §2.3).

A chip file holds one object with the template's knobs, all required::

    {
      "name": "my-chip",
      "source": ["where the numbers come from", "one line per entry"],
      "num_tc": 64, "tc_width": 64, "tc_depth": 64,
      "num_vc": 64, "vc_width": 64, "buffer_mib": 64,
      "hbm_gib": 96, "hbm_gb_per_s": 3000, "clock_ghz": 1.5,
      "link_gb_per_s": 200, "net_gb_per_s": 50, "node_size": 8,
      "fp8_rate": 2,
      "efficiency": {"hbm_efficiency": 0.85}
    }

Fields (units in the names; :data:`FIELDS` is their order):

- ``num_tc`` tensor cores (systolic arrays) of ``tc_width`` columns × ``tc_depth`` rows,
  ``num_vc`` vector cores of ``vc_width`` lanes, ``node_size`` devices joined by the fast
  link: integers from 1 to :data:`MAX_INT` (2**31 − 1);
- ``buffer_mib`` shared on-chip buffer (MiB = 2**20 bytes), ``hbm_gib`` HBM capacity
  (GiB = 2**30 bytes), ``hbm_gb_per_s`` HBM bandwidth of the whole chip, ``clock_ghz``,
  ``link_gb_per_s`` per direction inside a node, ``net_gb_per_s`` per direction between
  nodes (GB/s = 1e9 bytes/s): finite numbers > 0;
- ``name`` (optional, default: the file name without its extension): one line of text;
  the name of a preset only with that preset's knobs (a changed chip needs its own name);
- ``source`` (optional): text, or a list of lines, saying where the numbers come from;
- ``fp8_rate`` (optional): the dense FP8 tensor-core rate as a multiple of the 16-bit
  rate the knobs give (``phaze.arch.dtype_rates``): 0 = no FP8 tensor cores (training in
  fp8 is refused), else a number >= 1 (H100: 2). Left out: the preset's value when the
  knobs equal a preset's, else the template rule (2). bf16 and fp16 run at the 16-bit rate.
- ``efficiency`` (optional): the calibrated cost model's parameters
  (``phaze.arch.efficiency.Efficiency``; integers ≥ 1, fractions in (0, 1], seconds ≥ 0);
  fields left out take the value of the set the knobs alone would get
  (``efficiency.for_rows``: a preset's own set when the knobs equal that preset's,
  else the ``template`` set). Without the object, :attr:`Chip.efficiency` is None.

``area_mm2`` is not a field: the area model computes it from the knobs.
Anything else — an unknown or repeated field, a missing knob, a value of the wrong type,
zero, negative, NaN or out of range — is refused with one sentence naming the file and
the field. JSON is read by the standard library; ``.toml`` files need Python 3.11 or
later (``tomllib``), the same fields with ``[efficiency]`` as a table.

:func:`load_chip` reads a file, :func:`chip_from_dict` checks a dict, :func:`resolve_chip`
turns what the CLI's ``--arch NAME|FILE`` and the Python ``arch=`` arguments accept
into a :class:`Chip`; :meth:`Chip.to_json` writes a file :func:`load_chip` reads back.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os

import numpy as np

from .._validate import show
from . import dtype_rates
from ._efields import EFFICIENCY_DTYPE, FRACTIONS, INT_FIELDS, SECONDS
from ._rows import INT_KNOBS, KNOBS, build_rows

#: Largest integer a chip file may give a count (2**31 − 1): no real chip comes near it,
#: and every product of counts in the cost model stays exact in float64.
MAX_INT = 2 ** 31 - 1

#: What each knob is, with its unit (used in the error messages).
KNOB_UNITS = {
    "num_tc": "tensor cores", "tc_width": "systolic array columns",
    "tc_depth": "systolic array rows", "num_vc": "vector cores",
    "vc_width": "lanes per vector core",
    "buffer_mib": "MiB", "hbm_gib": "GiB", "hbm_gb_per_s": "GB/s of the whole chip",
    "clock_ghz": "GHz", "link_gb_per_s": "GB/s per direction inside a node",
    "net_gb_per_s": "GB/s per direction between nodes", "node_size": "devices per node",
}

#: A chip file's fields, in the order :meth:`Chip.to_dict` writes them.
FIELDS = ("name", "source") + tuple(KNOBS) + ("fp8_rate", "efficiency")


@dataclasses.dataclass(frozen=True, eq=False)
class Chip:
    """One accelerator: its architecture row, optional efficiency set, name and source.

    - ``name``: the chip's name (str).
    - ``row``: a one-row ``ARCH_DTYPE`` array (read-only; ``area_mm2`` from the area model),
      what ``phaze.search`` and ``phaze.cost`` take as an architecture.
    - ``efficiency``: a ``phaze.arch.efficiency.Efficiency`` or None when the file gave
      none (:meth:`efficiency_set` then supplies the default set).
    - ``source``: where the numbers come from (text, possibly several lines; "" if none).
    - ``path``: the file read (None for a dict or a row).
    - ``fp8_rate``: the file's fp8 multiplier (``phaze.arch.dtype_rates``), or None when
      it gave none (:meth:`tensor_rate` then supplies the default).
    """

    name: str
    row: np.ndarray
    efficiency: object = None
    source: str = ""
    path: object = None
    fp8_rate: object = None

    def tensor_rate(self, dtype: str = "bf16") -> float:
        """The chip's dense tensor rate at ``dtype`` as a multiple of its 16-bit rate: 1 for
        bf16 and fp16; for fp8 the file's ``fp8_rate``, else ``dtype_rates.for_rows`` of
        the row (a preset's own when the knobs equal that preset's, else the template's 2).
        A chip without fp8 tensor cores refuses fp8 (``ValueError``, one sentence)."""
        rate = self.fp8_rate if self.fp8_rate is not None else float(
            dtype_rates.for_rows(self.row)[0])
        return dtype_rates.tensor_rate(dtype, rate, self.name)

    def efficiency_set(self):
        """The efficiency parameters to use: the file's, else ``efficiency.for_rows`` of the
        row (a preset's own set when the knobs equal that preset's, else ``template``)."""
        from . import efficiency as eff_mod

        if self.efficiency is not None:
            return self.efficiency
        return _efficiency_of(eff_mod.for_rows(self.row)[0])

    def to_dict(self) -> dict:
        """The chip as a chip file's object: name, source (when any), the knobs, and the
        efficiency object (when the chip has one). Integers stay integers; floats are
        written exactly (``json`` writes the shortest text that reads back the same float)."""
        out = {"name": self.name}
        if self.source:
            lines = self.source.split("\n")
            out["source"] = lines[0] if len(lines) == 1 else lines
        for knob in KNOBS:
            out[knob] = self.row[knob][0].item()
        if self.fp8_rate is not None:
            rate = float(self.fp8_rate)
            out["fp8_rate"] = int(rate) if rate.is_integer() else rate
        if self.efficiency is not None:
            out["efficiency"] = {f: getattr(self.efficiency, f) for f in EFFICIENCY_DTYPE.names}
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (two-space indent, final newline): a chip file."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _efficiency_of(record):
    """An ``Efficiency`` from one ``EFFICIENCY_DTYPE`` record."""
    from .efficiency import Efficiency

    return Efficiency(**{f: record[f].item() for f in EFFICIENCY_DTYPE.names})


# ---------------------------------------------------------------------------
# checking a chip's fields
# ---------------------------------------------------------------------------

def _is_number(value) -> bool:
    """A real number that is not a bool (JSON true/false are not numbers here)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_float(value) -> float:
    """``float(value)`` for a real number (inf beyond float's range), NaN for anything else."""
    if not _is_number(value):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an integer beyond float's range
        return math.inf


def _count(where, field, value) -> int:
    """An integer from 1 to MAX_INT (an integral float such as 8.0 is accepted)."""
    if _is_number(value) and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) \
            or not 1 <= value <= MAX_INT:
        raise ValueError(f"{where}: {field} must be an integer from 1 to {MAX_INT:,}, "
                         f"got {show(value)}")
    return int(value)


def _positive(where, field, value, unit) -> float:
    """A finite number > 0."""
    f = _as_float(value)
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"{where}: {field} must be a finite number > 0 ({unit}), "
                         f"got {show(value)}")
    return f


def _unknown(where, field, allowed, what) -> ValueError:
    near = difflib.get_close_matches(str(field), allowed, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ValueError(f"{where}: unknown {what} {show(field)}{hint}; allowed: "
                      f"{', '.join(allowed)}")


def _check_efficiency(where, value) -> dict:
    """The efficiency object's fields (a subset of EFFICIENCY_DTYPE's), checked."""
    names = EFFICIENCY_DTYPE.names
    if not isinstance(value, dict):
        raise ValueError(f"{where}: efficiency must be an object of efficiency parameters "
                         f"({', '.join(names)}), got {show(value)}")
    out = {}
    for field, v in value.items():
        if field not in names:
            raise _unknown(where, field, names, "efficiency field")
        key = f"efficiency.{field}"
        if field in INT_FIELDS:
            out[field] = _count(where, key, v)
        elif field in FRACTIONS:
            if not 0 < _as_float(v) <= 1:
                raise ValueError(f"{where}: {key} must be a fraction in (0, 1], got {show(v)}")
            out[field] = float(v)
        elif field in SECONDS:
            if not math.isfinite(_as_float(v)) or _as_float(v) < 0:
                raise ValueError(f"{where}: {key} must be a finite time >= 0 (seconds), "
                                 f"got {show(v)}")
            out[field] = float(v)
        else:  # pragma: no cover - every field has a range above
            raise AssertionError(field)
    return out


def parse_fields(data, where) -> tuple:
    """Check a chip file's object ``data`` without building anything.

    Returns ``(knobs, efficiency, name, source)``: the knob values (dict, all of
    ``KNOBS``), the efficiency fields given (dict, possibly partial, or None), the name
    (str or None) and the source (str, "" if none). ``where`` starts every error message
    (e.g. "chip file 'x.json'"). Used by :func:`chip_from_dict` and by the presets, which
    read their own files with it while ``phaze.arch`` is being imported.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold one object of the chip's fields "
                         f"({', '.join(FIELDS)}), got {show(data)}")
    for field in data:
        if field == "area_mm2":
            raise ValueError(f"{where}: area_mm2 is not a field: the area model computes it "
                             f"from the knobs; remove it")
        if field not in FIELDS:
            raise _unknown(where, field, FIELDS, "field")
    missing = [k for k in KNOBS if k not in data]
    if missing:
        raise ValueError(f"{where}: missing field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (every knob is required: {', '.join(KNOBS)})")
    knobs = {}
    for k in KNOBS:
        knobs[k] = (_count(where, k, data[k]) if k in INT_KNOBS
                    else _positive(where, k, data[k], KNOB_UNITS[k]))
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()
                             or not name.isprintable()):
        raise ValueError(f"{where}: name must be a non-empty line of printable text, "
                         f"got {show(name)}")
    source = data.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "\n".join(source)
    if not isinstance(source, str):
        raise ValueError(f"{where}: source must be text or a list of lines of text, "
                         f"got {show(source)}")
    efficiency = _check_efficiency(where, data["efficiency"]) if "efficiency" in data else None
    return knobs, efficiency, (name.strip() if name is not None else None), source


def chip_from_dict(data, *, where="chip", name=None, path=None) -> Chip:
    """A :class:`Chip` from a chip file's object ``data`` (fields: module docstring).

    ``where`` starts every error message; ``name``: the name when ``data`` has none
    (default "chip"); ``path``: recorded in :attr:`Chip.path`. Raises ``ValueError``
    with one sentence naming the field and what it allows.
    """
    from . import efficiency as eff_mod
    from . import presets

    knobs, eff, given_name, source = parse_fields(data, where)
    fp8_rate = (dtype_rates.check_fp8_rate(data["fp8_rate"], f"{where}: fp8_rate")
                if "fp8_rate" in data else None)
    name = given_name or name or "chip"
    row = build_rows(**knobs)
    if name in presets.names():
        ref = presets.get(name)
        differ = [(k, row[k][0].item(), ref[k][0].item()) for k in KNOBS if row[k][0] != ref[k][0]]
        if fp8_rate is not None and fp8_rate != presets.FP8_RATE[name]:
            differ.append(("fp8_rate", fp8_rate, presets.FP8_RATE[name]))
        if differ:
            k, mine, theirs = differ[0]
            raise ValueError(f"{where}: name {name!r} is a preset's, but {k} is {mine!r} where "
                             f"the preset has {theirs!r}; give the changed chip its own name")
    efficiency = None
    if eff is not None:
        base = eff_mod.for_rows(row)[0]
        values = {f: eff.get(f, base[f].item()) for f in EFFICIENCY_DTYPE.names}
        efficiency = eff_mod.Efficiency(**values)
    row.setflags(write=False)
    return Chip(name=name, row=row, efficiency=efficiency, source=source, path=path,
                fp8_rate=fp8_rate)


def read_file(path, where) -> object:
    """The parsed content of a chip file (JSON, or TOML by its ``.toml`` extension); one
    ``ValueError`` sentence starting with ``where`` when it cannot be parsed."""
    with open(path, "rb") as f:
        raw = f.read()
    if not raw.strip():
        raise ValueError(f"{where} is empty; it must hold one object of the chip's fields")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    if os.fspath(path).lower().endswith(".toml"):
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise ValueError(f"{where}: TOML chip files need Python 3.11 or later (tomllib); "
                             f"write the chip as JSON") from None
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{where} is not valid TOML: {exc}") from None

    def no_repeats(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"{where}: field {key!r} is given twice")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc.msg} (line {exc.lineno}, "
                         f"column {exc.colno})") from None
    except RecursionError:
        raise ValueError(f"{where} is not a chip file: it is nested too deeply") from None
    except ValueError as exc:
        if str(exc).startswith(where):
            raise
        # e.g. an integer of more digits than Python converts
        raise ValueError(f"{where} cannot be read: {str(exc).splitlines()[0]}") from None


def load_chip(path) -> Chip:
    """Read the chip file ``path`` (JSON; ``.toml`` on Python 3.11+) as a :class:`Chip`.

    The name defaults to the file name without its extension. Raises ``ValueError``
    with one sentence naming the file and the field for bad content, and
    ``FileNotFoundError`` (or another ``OSError``) when the file cannot be read.
    """
    path = os.fspath(path)
    where = f"chip file {path!r}"
    data = read_file(path, where)
    stem = os.path.splitext(os.path.basename(path))[0]
    return chip_from_dict(data, where=where, name=stem, path=path)


def resolve_chip(spec) -> Chip:
    """What ``--arch NAME|FILE`` and ``arch=`` accept, as a :class:`Chip`.

    ``spec``: a :class:`Chip`; a preset name (``presets.names()``; the preset's own file,
    efficiency set included); a path (str or ``os.PathLike``) of a chip file; or an
    architecture row (a one-row structured array or record, name "custom", no
    efficiency set). A preset name wins over a file of the same name in the working
    directory. An unknown name raises ``KeyError`` naming the presets.
    """
    from . import presets
    from ._rows import validate

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
            ref = presets.get(name)
            if all(row[k][0] == ref[k][0] for k in KNOBS):
                return dataclasses.replace(presets.chip(name), row=row)
        return Chip(name="custom", row=row)
    raise ValueError(f"arch must be a preset name, a chip file, a Chip or one architecture "
                     f"row, got {show(spec)}")
