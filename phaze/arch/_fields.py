"""The chip fields, declared once: their table, the checks of their values, reading a chip file
(private to ``phaze.arch``; the format is described in :mod:`phaze.arch._chipfile`).

:data:`CHIP_FIELDS` is the one declaration of what a chip (a chip file, a
:class:`phaze.arch.Chip`) carries: each :class:`ChipField` names the field, its kind (which
check reads it), its unit, the values it allows, what a chip takes when the field is left
out, and what citation a shipped preset must give for it. The chip-file parser
(:func:`check_fields`), ``Chip.to_dict`` (hence ``phaze archs --show``), the checks of a
``Chip`` built in Python and the presets' reader all read this table; a new chip field is one
row here (and, when a number uses it, the code that uses it).

Depends only on ``_rows`` (the knobs) and ``_efields`` (the efficiency parameters' ranges).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os

from .._validate import show
from ._efields import EFFICIENCY_DTYPE, FRACTIONS, INT_FIELDS, RATES, SECONDS, SHARES
from ._rows import INT_KNOBS, KNOBS

#: Largest integer a chip file may give a count (2**31 − 1): no real chip comes near it,
#: and every product of counts in the cost model stays exact in float64.
MAX_INT = 2 ** 31 - 1

#: ``ChipField.default`` of a field every chip must give.
REQUIRED = "required"

#: Block-scaled formats a chip's tensor cores may consume natively (``scaled_formats``):
#: OCP microscaling (MXFP8/MXFP6/MXFP4: one E8M0 scale per 32 elements) and NVFP4.
SCALED_FORMATS = ("mx", "nvfp4")
#: How a scale-up domain joins its chips (``topology``; priced in ``phaze/_ring.pxd``).
TOPOLOGIES = ("switch", "mesh", "torus")
#: Words of the memory and fabric kinds (the rules of ``phaze.arch.rules`` group by them).
HBM_KINDS = ("HBM2", "HBM2e", "HBM3", "HBM3e", "HBM4")
LINK_KINDS = ("nvlink3", "nvlink4", "nvlink5", "infinity-fabric", "ici", "neuronlink", "roce")
NET_KINDS = ("hdr-ib", "ndr-ib", "xdr-ib", "roce", "efa", "dcn")
#: The software platform a chip's trainers run on (``platform``): NVIDIA's CUDA, AMD's ROCm,
#: Intel Gaudi's SynapseAI, Google's TPU (XLA: JAX) and AWS Neuron (Trainium). Which
#: trainers phaze writes arguments for run on which platform is ``phaze.plan.TRAINERS``'.
PLATFORMS = ("cuda", "rocm", "gaudi", "tpu", "neuron")

#: ``ChipField.cite`` values: the presets' module docstring cites the value
#: (``phaze/arch/presets.py``); a shipped preset giving the field must have a ``source``
#: line starting with the field's name (``"fp8_rate 2: dense FP8 …"``); no citation rule.
CITE_DOCSTRING, CITE_SOURCE_LINE, CITE_NONE = "presets docstring", "source line", ""


@dataclasses.dataclass(frozen=True)
class ChipField:
    """One field of a chip (a row of :data:`CHIP_FIELDS`).

    - ``name``: the key in a chip file and the attribute of ``phaze.arch.Chip`` (a knob is
      also a field of ``ARCH_DTYPE``).
    - ``kind``: which check reads a value — ``"text"`` (one printable line), ``"lines"``
      (text or a list of lines), ``"count"`` (an integer from 1 to :data:`MAX_INT`),
      ``"positive"`` (a finite number > 0), ``"rate"`` (0 or a finite number ≥ 1),
      ``"choice"`` (one of ``choices``), ``"formats"`` (a list of distinct ``choices``),
      ``"dims"`` (1 to 4 integers ≥ 2), ``"efficiency"`` (an object of efficiency
      parameters), ``"cite"`` (field name → one line of text).
    - ``unit``: SI unit or what the number counts ("" for text).
    - ``domain``: the values allowed, as the error messages say it.
    - ``default``: :data:`REQUIRED`, or the value a chip holds when the field is left out
      (None: unknown, or resolved by the rule in ``absent``).
    - ``absent``: what a chip takes when the field is left out, in words.
    - ``cite``: the citation a shipped preset must give for the value (``CITE_*``).
    - ``choices``: the words a ``"choice"`` or ``"formats"`` field allows.
    """

    name: str
    kind: str
    unit: str
    domain: str
    default: object
    absent: str
    cite: str
    choices: tuple = ()


_COUNT = f"an integer from 1 to {MAX_INT:,}"
_POSITIVE = "a finite number > 0"
_KNOB_UNITS = {
    "num_tc": "tensor cores", "tc_width": "systolic array columns",
    "tc_depth": "systolic array rows", "num_vc": "vector cores",
    "vc_width": "lanes per vector core",
    "buffer_mib": "MiB", "hbm_gib": "GiB", "hbm_gb_per_s": "GB/s of the whole chip",
    "clock_ghz": "GHz", "link_gb_per_s": "GB/s per direction inside a node",
    "net_gb_per_s": "GB/s per direction between nodes", "node_size": "devices per node",
}

#: Every field of a chip, in the order ``Chip.to_dict`` writes them (see :class:`ChipField`).
CHIP_FIELDS = (
    ChipField("name", "text", "", "a non-empty line of printable text", None,
              "the file name without its extension (\"chip\" for a dict); a preset's name "
              "only with that preset's knobs", CITE_NONE),
    ChipField("source", "lines", "", "text or a list of lines of text", "",
              "no source (\"\")", CITE_NONE),
) + tuple(
    ChipField(k, "count" if k in INT_KNOBS else "positive", _KNOB_UNITS[k],
              _COUNT if k in INT_KNOBS else _POSITIVE, REQUIRED, "refused: every knob is required",
              CITE_DOCSTRING)
    for k in KNOBS
) + (
    ChipField("fp8_rate", "rate", "multiple of the 16-bit dense tensor rate",
              "0 (no fp8 tensor cores) or a number >= 1 (the fp8 dense tensor rate as a "
              "multiple of the 16-bit rate)", None,
              "the preset's rate when the knobs equal a preset's, else the template's 2 "
              "(phaze.arch.dtype_rates)", CITE_SOURCE_LINE),
    ChipField("fp6_rate", "rate", "multiple of the 16-bit dense tensor rate",
              "0 (no fp6 tensor cores) or a number >= 1", None,
              "the equal preset's rate, else the template's (phaze.arch.dtype_rates."
              "TEMPLATE_RATES)", CITE_SOURCE_LINE),
    ChipField("fp4_rate", "rate", "multiple of the 16-bit dense tensor rate",
              "0 (no fp4 tensor cores) or a number >= 1", None,
              "the equal preset's rate, else the template's (phaze.arch.dtype_rates."
              "TEMPLATE_RATES)", CITE_SOURCE_LINE),
    ChipField("scaled_formats", "formats", "block-scaled formats",
              "a list of distinct names among " + ", ".join(SCALED_FORMATS), None,
              "the equal preset's formats, else the template's (every one)",
              CITE_SOURCE_LINE, SCALED_FORMATS),
    ChipField("tdp_w", "positive", "W", _POSITIVE, None,
              "unknown (None): the thermal design power of one chip", CITE_SOURCE_LINE),
    ChipField("process_nm", "positive", "nm", _POSITIVE, None,
              "unknown (None): the process node the chip is made in", CITE_SOURCE_LINE),
    ChipField("buffer_bytes_per_cycle", "count", "bytes per clock", _COUNT, None,
              "unlimited: the buffer delivers whatever the arrays consume (the study's "
              "assumption; phaze.cost, \"On-chip bandwidth\")", CITE_SOURCE_LINE),
    ChipField("topology", "choice", "", "one of " + ", ".join(TOPOLOGIES), None,
              "switch (every chip of the scale-up domain reaches every other at link_gb_per_s)",
              CITE_SOURCE_LINE, TOPOLOGIES),
    ChipField("scale_up_links", "count", "links", _COUNT, None,
              "unknown: link_gb_per_s is one port (a switch's)", CITE_SOURCE_LINE),
    ChipField("torus_dims", "dims", "chips per dimension",
              "a list of 1 to 4 integers >= 2 whose product is node_size", None,
              "none (only a torus has dimensions)", CITE_SOURCE_LINE),
    ChipField("family", "text", "", "a non-empty line of printable text", None,
              "unknown (None): the chip family phaze validate groups rows by", CITE_NONE),
    ChipField("silicon", "text", "", "a non-empty line of printable text", None,
              "the chip's name: the die it is made of (chips of one die share measurements)",
              CITE_NONE),
    ChipField("hbm_kind", "choice", "", "one of " + ", ".join(HBM_KINDS), None,
              "unknown (None)", CITE_SOURCE_LINE, HBM_KINDS),
    ChipField("link_kind", "choice", "", "one of " + ", ".join(LINK_KINDS), None,
              "unknown (None)", CITE_SOURCE_LINE, LINK_KINDS),
    ChipField("net_kind", "choice", "", "one of " + ", ".join(NET_KINDS), None,
              "unknown (None)", CITE_SOURCE_LINE, NET_KINDS),
    ChipField("platform", "choice", "", "one of " + ", ".join(PLATFORMS), None,
              "not stated (None): every trainer that launches the plan is listed, as for the "
              "template's hypothetical chips and the study's tpuv4", CITE_SOURCE_LINE, PLATFORMS),
    ChipField("efficiency", "efficiency", "", "an object of efficiency parameters ("
              + ", ".join(EFFICIENCY_DTYPE.names) + ")", None,
              "the set the knobs alone get (phaze.arch.efficiency.for_rows); a partial object "
              "takes the stated rules' value (phaze.arch.rules) for each field it leaves out",
              CITE_DOCSTRING),
    ChipField("cite", "cite", "", "an object mapping field names (efficiency.NAME for an "
              "efficiency parameter) to one line of text each", None,
              "no citations (a shipped preset must cite every number it gives)", CITE_NONE),
)

#: The table by field name.
BY_NAME = {f.name: f for f in CHIP_FIELDS}
#: A chip file's fields, in the order ``Chip.to_dict`` writes them.
FIELDS = tuple(BY_NAME)
#: The optional scalar fields a chip holds as given (None when left out): fp8_rate and the
#: fields after it, but the efficiency object.
OPTIONAL_NUMBERS = tuple(f.name for f in CHIP_FIELDS[FIELDS.index("fp8_rate"):]
                         if f.kind not in ("efficiency", "cite"))
#: What each knob is, with its unit (used in the error messages).
KNOB_UNITS = {k: BY_NAME[k].unit for k in KNOBS}


# ---------------------------------------------------------------------------
# checking values
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


def check_fp8_rate(value, where: str = "fp8_rate") -> float:
    """``value`` as a float if it is 0 or a finite number ≥ 1, else ``ValueError`` in one
    sentence starting with ``where``."""
    f = _as_float(value)
    if not (f == 0.0 or (math.isfinite(f) and f >= 1.0)):
        raise ValueError(f"{where} must be {BY_NAME['fp8_rate'].domain}, got {show(value)}")
    return f


def _squeezed(name: str) -> str:
    """A field name without its spelling of units ("hbm_gb_per_s" and "hbm_gbps" alike)."""
    return str(name).lower().replace("_per_", "p").replace("_", "").replace("-", "")


def _unknown(where, field, allowed, what) -> ValueError:
    # the same name spelt another way (units run together) first, then the nearest text
    same = [a for a in allowed if _squeezed(a) == _squeezed(field)]
    near = same or difflib.get_close_matches(str(field), allowed, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ValueError(f"{where}: unknown {what} {show(field)}{hint}; allowed: "
                      f"{', '.join(allowed)}")


def _check_efficiency(where, value) -> dict:
    """The efficiency object's fields (a subset of EFFICIENCY_DTYPE's), checked."""
    names = EFFICIENCY_DTYPE.names
    if not isinstance(value, dict):
        raise ValueError(f"{where}: efficiency must be {BY_NAME['efficiency'].domain}, "
                         f"got {show(value)}")
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
        elif field in RATES:
            if not math.isfinite(_as_float(v)) or _as_float(v) < 0:
                raise ValueError(f"{where}: {key} must be a finite bandwidth >= 0 (GB/s), "
                                 f"got {show(v)}")
            out[field] = float(v)
        elif field in SHARES:
            if not 0 <= _as_float(v) <= 1:
                raise ValueError(f"{where}: {key} must be a share in [0, 1], got {show(v)}")
            out[field] = float(v)
        else:  # pragma: no cover - every field has a range above
            raise AssertionError(field)
    return out


def check_value(name, value, where):
    """The value of chip field ``name`` checked by its kind (:data:`CHIP_FIELDS`): an int for
    a count, a float for a number, the text (a source's lines joined by newlines), the
    efficiency fields given (dict); ``ValueError`` in one sentence starting with ``where``
    and naming the field otherwise."""
    spec = BY_NAME[name]
    kind = spec.kind
    if kind == "count":
        return _count(where, name, value)
    if kind == "positive":
        return _positive(where, name, value, spec.unit)
    if kind == "rate":
        return check_fp8_rate(value, f"{where}: {name}")
    if kind == "efficiency":
        return _check_efficiency(where, value)
    if kind == "choice":
        if not isinstance(value, str) or value not in spec.choices:
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return value
    if kind == "formats":
        if not isinstance(value, (list, tuple)) or any(v not in spec.choices for v in value) \
                or len(set(value)) != len(value):
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return tuple(value)
    if kind == "dims":
        if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 4 \
                or any(not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 2
                       or v > MAX_INT for v in value):
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return tuple(int(v) for v in value)
    if kind == "cite":
        if not isinstance(value, dict) or any(
                not isinstance(k, str) or not isinstance(v, str) or not v.strip()
                for k, v in value.items()):
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return dict(value)
    if kind == "text":
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return value.strip()
    if kind == "lines":
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            raise ValueError(f"{where}: {name} must be {spec.domain}, got {show(value)}")
        return value
    raise AssertionError(kind)  # pragma: no cover - every kind is handled above


def check_fields(data, where) -> dict:
    """Check a chip file's object ``data`` field by field (:data:`CHIP_FIELDS`).

    Returns the checked value of each field ``data`` gives (every knob is required; a
    source as one text). ``where`` starts every error message (e.g. "chip file 'x.json'").
    An unknown field, a missing knob or a value outside its field's domain raises
    ``ValueError`` in one sentence naming the field.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold one object of the chip's fields "
                         f"({', '.join(FIELDS)}), got {show(data)}")
    for field in data:
        if field == "area_mm2":
            raise ValueError(f"{where}: area_mm2 is not a field: the area model computes it "
                             f"from the knobs; remove it")
        if field not in BY_NAME:
            raise _unknown(where, field, FIELDS, "field")
    missing = [f.name for f in CHIP_FIELDS if f.default is REQUIRED and f.name not in data]
    if missing:
        raise ValueError(f"{where}: missing field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (every knob is required: {', '.join(KNOBS)})")
    # a name of null is no name (the file name is used), as a name left out
    out = {f.name: check_value(f.name, data[f.name], where) for f in CHIP_FIELDS
           if f.name in data and not (f.kind == "text" and data[f.name] is None)}
    check_fabric(out, where)
    return out


def check_fabric(values, where) -> None:
    """``ValueError`` unless the fabric fields agree: torus_dims only on a torus and then
    required, their product equal to node_size."""
    dims = values.get("torus_dims")
    if values.get("topology") == "torus":
        if dims is None:
            raise ValueError(f"{where}: topology torus needs torus_dims (the chips along each "
                             f"dimension of the scale-up domain)")
        if math.prod(dims) != values["node_size"]:
            raise ValueError(f"{where}: torus_dims {list(dims)} hold {math.prod(dims):,} chips, "
                             f"but node_size is {values['node_size']:,}; they must be equal")
    elif dims is not None:
        raise ValueError(f"{where}: torus_dims is given but topology is "
                         f"{values.get('topology', 'switch')!r}; only a torus has dimensions")


def check_citations(values, where) -> None:
    """For a shipped preset: ``ValueError`` unless every number and word it gives is cited —
    in its ``cite`` object (field name → one line; ``efficiency.NAME`` for an efficiency
    parameter), or, for the presets of the first study, a ``source`` line starting with the
    field's name (CITE_SOURCE_LINE fields) and the presets module's docstring (the rest)."""
    cites = values.get("cite")
    if cites is not None:
        given = [f.name for f in CHIP_FIELDS if f.name in values
                 and f.cite != CITE_NONE and f.kind != "efficiency"]
        given += ["efficiency." + e for e in values.get("efficiency", {})]
        missing = [k for k in given if k not in cites]
        if missing:
            raise ValueError(f"{where}: cite has no line for {', '.join(missing)}; every number "
                             f"a preset gives needs its source")
        present = set(given) | {f.name for f in CHIP_FIELDS if f.name in values}
        unknown = [k for k in cites if k not in present]
        if unknown:
            raise ValueError(f"{where}: cite names {', '.join(unknown)}, which the file does "
                             f"not give")
        return
    lines = values.get("source", "").split("\n")
    for f in CHIP_FIELDS:
        if f.cite == CITE_SOURCE_LINE and f.name in values \
                and not any(line.startswith(f.name + " ") for line in lines):
            raise ValueError(f"{where}: {f.name} needs a source line starting with "
                             f"'{f.name} ' that cites the value")


# ---------------------------------------------------------------------------
# reading a file
# ---------------------------------------------------------------------------

def read_file(path, where) -> object:
    """The parsed content of a chip file (JSON, or TOML by its ``.toml`` extension); one
    ``ValueError`` sentence starting with ``where`` when it cannot be parsed."""
    with open(path, "rb") as f:
        raw = f.read()
    return parse_text(raw, where, toml=os.fspath(path).lower().endswith(".toml"))


def parse_text(raw: bytes, where, *, toml: bool = False) -> object:
    """The parsed content of a chip file's bytes ``raw`` (JSON, or TOML with ``toml``)."""
    if not raw.strip():
        raise ValueError(f"{where} is empty; it must hold one object of the chip's fields")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    if toml:
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
