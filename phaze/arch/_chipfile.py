"""The chip record and chip files: one accelerator, resolved once (docs/design.md §2.3).

A chip file holds one object with the template's knobs, all required::

    {
      "name": "my-chip",
      "source": ["where the numbers come from", "one line per entry"],
      "num_tc": 64, "tc_width": 64, "tc_depth": 64,
      "num_vc": 64, "vc_width": 64, "buffer_mib": 64,
      "hbm_gib": 96, "hbm_gb_per_s": 3000, "clock_ghz": 1.5,
      "link_gb_per_s": 200, "net_gb_per_s": 50, "node_size": 8,
      "fp8_rate": 2, "tdp_w": 700, "process_nm": 4,
      "efficiency": {"hbm_efficiency": 0.85}
    }

Fields (units in the names; declared once in ``phaze.arch._fields.CHIP_FIELDS``, which the
parser, :meth:`Chip.to_dict` and the checks read; :data:`FIELDS` is their order):

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
- ``fp6_rate``, ``fp4_rate`` (optional): the same for the FP6 and FP4 families (left out:
  the template's 2 and 4); ``scaled_formats`` (optional): the block-scaled formats the
  tensor cores consume ("mx", "nvfp4"; left out: both).
- ``tdp_w`` (optional): the thermal design power of one chip, W; ``process_nm``
  (optional): the process node, nm. Finite numbers > 0, None (unknown) when left out; no
  number of phaze uses them yet (room for the power and cost issues).
- ``topology`` ("switch" | "mesh" | "torus"), ``scale_up_links``, ``torus_dims`` (a torus
  only, multiplying to ``node_size``): the scale-up fabric; ``family``, ``silicon``,
  ``hbm_kind``, ``link_kind``, ``net_kind``: words the rules and reports group by;
  ``platform`` ("cuda" | "rocm" | "gaudi" | "tpu" | "neuron"; optional): the software the
  chip's trainers run on, which decides which of phaze's trainers can launch a plan on it
  (``phaze.plan.TRAINERS``' platforms; left out: no restriction);
  ``cite``: field name → its source line (a shipped preset cites every number).
- ``efficiency`` (optional): the calibrated cost model's parameters measured on the chip
  (``phaze.arch.efficiency.Efficiency``; integers ≥ 1, fractions in (0, 1], seconds ≥ 0);
  the fields left out come from the stated rules (``phaze.arch.rules``) applied to the
  file's fields. Without the object, :attr:`Chip.efficiency` is None and the resolved set
  is the preset's when the knobs equal a preset's, else the rules' (``rule_efficiency``).

``area_mm2`` is not a field: the area model computes it from the knobs.
Anything else — an unknown or repeated field, a missing knob, a value of the wrong type,
zero, negative, NaN or out of range — is refused with one sentence naming the file and
the field. JSON is read by the standard library; ``.toml`` files need Python 3.11 or
later (``tomllib``), the same fields with ``[efficiency]`` as a table.

:class:`Chip` is the one record of a chip that the rest of phaze takes whole: the knob row,
the fields given, and what they resolve to — the efficiency set, the tensor rate at each
datatype and the fabric as network tiers (:class:`Tier`). :func:`load_chip` reads a file,
:func:`chip_from_dict` checks a dict, :meth:`Chip.to_json` writes a file :func:`load_chip`
reads back; ``phaze.arch.resolve`` (module ``_resolve``) is the entrance that turns what
``--arch NAME|FILE`` and ``arch=`` accept into a :class:`Chip`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import types

import numpy as np

from . import _catalog, dtype_rates, rules
from ._efields import EFFICIENCY_DTYPE
from ._node import TEMPLATE_PROCESS_NM
from ._fields import (CHIP_FIELDS, FIELDS, KNOB_UNITS, MAX_INT, OPTIONAL_NUMBERS,
                      TOPOLOGIES, check_fields, check_value, read_file)
from ._rows import ARCH_DTYPE, KNOBS, build_rows, validate
from .efficiency import Efficiency, for_rows as _efficiency_for_rows

__all__ = ["Chip", "FIELDS", "KNOB_UNITS", "MAX_INT", "TOPOLOGIES", "Tier", "chip_from_dict",
           "load_chip"]



@dataclasses.dataclass(frozen=True)
class Tier:
    """One network tier of a chip's fabric (SI units).

    - ``name``: ``"scale-up"`` (the fast domain inside a node) or ``"scale-out"`` (between
      nodes).
    - ``size``: devices in one domain of the tier (the row's ``node_size`` for scale-up);
      None for scale-out: as many as the job spans.
    - ``bytes_per_s``: bandwidth per chip and direction, bytes/s (``link_gb_per_s · 1e9``,
      ``net_gb_per_s · 1e9``).
    - ``step_s``: latency per ring step of a collective on the tier, s (``link_step_s``,
      ``net_step_s`` of the efficiency set).
    - ``efficiency``: achievable bus bandwidth of a collective as a fraction of
      ``bytes_per_s`` (``link_efficiency``, ``net_efficiency``).
    - ``p2p_latency_s``, ``p2p_efficiency``: the same for one point-to-point send.
    - ``topology``: how the tier joins its chips, one of :data:`TOPOLOGIES`.
    """

    name: str
    size: object
    bytes_per_s: float
    step_s: float
    efficiency: float
    p2p_latency_s: float
    p2p_efficiency: float
    topology: str = "switch"

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"tier {self.name}: topology must be one of {', '.join(TOPOLOGIES)}, "
                             f"got {self.topology!r}")


def tiers_of(row, eff: Efficiency, topology: str = "switch") -> tuple:
    """The fabric of a one-row ``ARCH_DTYPE`` array ``row`` with efficiency set ``eff``:
    ``(scale-up, scale-out)`` :class:`Tier` s built from today's row and efficiency fields
    (the numbers the cost model prices collectives with, exactly)."""
    r = row[0]
    with np.errstate(over="ignore"):  # a rate beyond the float maximum in B/s: inf, no warning
        up_bps, out_bps = float(r["link_gb_per_s"] * 1e9), float(r["net_gb_per_s"] * 1e9)
    return (Tier("scale-up", int(r["node_size"]), up_bps,
                 eff.link_step_s, eff.link_efficiency, eff.link_p2p_latency_s,
                 eff.link_p2p_efficiency, topology),
            Tier("scale-out", None, out_bps, eff.net_step_s,
                 eff.net_efficiency, eff.net_p2p_latency_s, eff.net_p2p_efficiency))


@dataclasses.dataclass(frozen=True, eq=False)
class Chip:
    """One accelerator, resolved once: what a chip file gives and what it resolves to.

    Given (the fields of a chip file, :data:`FIELDS`):

    - ``name``: the chip's name (str).
    - ``row``: a one-row ``ARCH_DTYPE`` array (read-only; ``area_mm2`` from the area model),
      what ``phaze.search`` and ``phaze.cost`` take as an architecture.
    - ``efficiency``: a ``phaze.arch.efficiency.Efficiency`` or None when the file gave
      none (:attr:`resolved_efficiency` then holds the default set).
    - ``source``: where the numbers come from (text, possibly several lines; "" if none).
    - ``path``: the file read (None for a dict or a row).
    - ``fp8_rate``: the file's fp8 multiplier (``phaze.arch.dtype_rates``), or None when
      it gave none (:attr:`rates` then holds the default).
    - ``tdp_w``: thermal design power of one chip, W; ``process_nm``: process node, nm
      (None when unknown): the step's power cap and energy per operation
      (``phaze.step.plan_power``, issue 28).
    - ``buffer_bytes_per_cycle``: bytes per clock the shared buffer delivers to the arrays
      (None: unlimited, the study's assumption; ``phaze.cost``, "On-chip bandwidth").

    Resolved when the record is made (not arguments; ``dataclasses.replace`` resolves again):

    - ``resolved_efficiency``: the efficiency set to use — ``efficiency``, else
      ``efficiency.for_rows`` of the row (a preset's own set when the knobs equal that
      preset's, else ``template``).
    - ``rates``: the dense tensor rate at each datatype of ``phaze.precision.DTYPES`` as a
      multiple of the 16-bit rate (a read-only mapping, ``dtype_rates.rates``: 1.0 for the
      16-bit types, the family's rate for a low-precision one, 0.0 where the chip lacks the
      family or the block-scaled format); each of ``fp8_rate``, ``fp6_rate``, ``fp4_rate``,
      ``scaled_formats`` left out is the equal preset's, else the template's
      (``dtype_rates.row_fields``); ``resolved_formats`` the formats so resolved.
    - ``tiers``: the fabric, ``(scale-up, scale-out)`` :class:`Tier` s from the row's
      ``node_size``, ``link_gb_per_s``, ``net_gb_per_s`` and the resolved set's link and
      net latencies and efficiencies.

    Bad values raise ``ValueError`` in one sentence naming the field.
    """

    name: str
    row: np.ndarray
    efficiency: object = None
    source: str = ""
    path: object = None
    fp8_rate: object = None
    fp6_rate: object = None
    fp4_rate: object = None
    scaled_formats: object = None
    tdp_w: object = None
    process_nm: object = None
    buffer_bytes_per_cycle: object = None
    topology: object = None
    scale_up_links: object = None
    torus_dims: object = None
    family: object = None
    silicon: object = None
    hbm_kind: object = None
    link_kind: object = None
    net_kind: object = None
    platform: object = None
    cite: object = None
    efficiency_rules: object = None
    rule_efficiency: object = None
    resolved_efficiency: Efficiency = dataclasses.field(init=False, repr=False)
    resolved_formats: tuple = dataclasses.field(init=False, repr=False)
    rates: types.MappingProxyType = dataclasses.field(init=False, repr=False)
    tiers: tuple = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        set_ = object.__setattr__
        name = check_value("name", self.name, "chip")
        where = f"chip {name!r}"
        row = self.row
        if not (isinstance(row, np.ndarray) and row.dtype == ARCH_DTYPE and row.shape == (1,)
                and not row.flags.writeable):
            row = validate(row)
            if row.shape[0] != 1:
                raise ValueError(f"{where}: row must be one architecture, got {row.shape[0]} rows")
            row = row.copy()
            row.setflags(write=False)
        if self.efficiency is not None and not isinstance(self.efficiency, Efficiency):
            raise ValueError(f"{where}: efficiency must be None or a "
                             f"phaze.arch.efficiency.Efficiency, got "
                             f"{type(self.efficiency).__name__}")
        source = check_value("source", self.source, where)
        set_(self, "name", name)
        set_(self, "row", row)
        set_(self, "source", source)
        for field in OPTIONAL_NUMBERS + ("cite",):
            value = getattr(self, field)
            if value is not None:
                set_(self, field, check_value(field, value, where))
        eff = self.efficiency if self.efficiency is not None else self.rule_efficiency
        if eff is None:
            record = _efficiency_for_rows(row)[0]
            eff = Efficiency(**{f: record[f].item() for f in EFFICIENCY_DTYPE.names})
        # each rate field the chip leaves out: the equal preset's, else the template's
        given = dtype_rates.row_fields(row)
        given.update({f: getattr(self, f) for f in dtype_rates.ROW_FIELDS
                      if getattr(self, f) is not None})
        set_(self, "resolved_efficiency", eff)
        set_(self, "resolved_formats", tuple(given["scaled_formats"]))
        set_(self, "rates", types.MappingProxyType(dtype_rates.rates(**given)))
        set_(self, "tiers", tiers_of(row, eff, self.topology or "switch"))

    @property
    def scale_up(self) -> Tier:
        """The fabric's tier inside a node (``tiers[0]``)."""
        return self.tiers[0]

    @property
    def scale_out(self) -> Tier:
        """The fabric's tier between nodes (``tiers[1]``)."""
        return self.tiers[1]

    def tensor_rate(self, dtype: str = "bf16") -> float:
        """The chip's dense tensor rate at ``dtype`` as a multiple of its 16-bit rate
        (:attr:`rates`): 1 for bf16 and fp16; for fp8 the file's ``fp8_rate``, else
        ``dtype_rates.for_rows`` of the row. A chip without fp8 tensor cores refuses fp8
        (``ValueError``, one sentence)."""
        return dtype_rates.tensor_rate(dtype, self.rates, self.name, self.resolved_formats)

    @property
    def priced_process_nm(self):
        """The process node, nm, its energy, die area and price are formed at: its own
        ``process_nm``, else the template's (``TEMPLATE_PROCESS_NM``)."""
        return self.process_nm or TEMPLATE_PROCESS_NM

    @property
    def gemm_rates_measured(self) -> bool:
        """Whether the chip's GEMM rates are measured: its ``tile_efficiency`` is a measured
        figure (:attr:`efficiency_rules` says "measured"), so they already run at the clock
        its own power limit leaves (``phaze.step.template_cap``: no cap of its own)."""
        return (self.efficiency_rules or {}).get("tile_efficiency") == "measured"

    def efficiency_set(self) -> Efficiency:
        """The efficiency parameters to use (:attr:`resolved_efficiency`): the file's, else
        ``efficiency.for_rows`` of the row (a preset's own set when the knobs equal that
        preset's, else ``template``)."""
        return self.resolved_efficiency

    def to_dict(self) -> dict:
        """The chip as a chip file's object, in :data:`FIELDS` order: name, source (when
        any), the knobs, each optional number the chip was given, and the efficiency object
        (when the chip has one). Integers stay integers; floats are written exactly
        (``json`` writes the shortest text that reads back the same float)."""
        out = {}
        for spec in CHIP_FIELDS:
            f = spec.name
            if f == "name":
                out[f] = self.name
            elif f == "source":
                if self.source:
                    lines = self.source.split("\n")
                    out[f] = lines[0] if len(lines) == 1 else lines
            elif f in KNOBS:
                out[f] = self.row[f][0].item()
            elif f == "efficiency":
                if self.efficiency is not None:
                    # what was measured (the rules give the rest again when it is read back)
                    why = self.efficiency_rules or {}
                    given = {e: getattr(self.efficiency, e) for e in EFFICIENCY_DTYPE.names
                             if why.get(e, "measured") == "measured"}
                    out[f] = given   # {} when the rules give every parameter
            elif getattr(self, f) is not None:
                value = getattr(self, f)
                if spec.kind in ("rate", "positive", "count"):
                    value = float(value)
                    value = int(value) if value.is_integer() else value
                elif isinstance(value, tuple):
                    value = list(value)
                out[f] = value
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (two-space indent, final newline): a chip file."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def preset_chip(name: str) -> Chip:
    """The preset ``name`` as a :class:`Chip` (its file's row, efficiency set, rates, name,
    source and path); KeyError lists the names."""
    values = _catalog.FILES.get(name) if isinstance(name, str) else None
    if values is None:
        raise KeyError(f"unknown architecture preset {name!r}; known presets: "
                       f"{', '.join(_catalog.NAMES)}")
    return Chip(name=name, row=_catalog.ROWS[name],
                efficiency=Efficiency(**_catalog.EFFICIENCY[name]), source=_catalog.SOURCES[name],
                path=str(_catalog.path(name)), efficiency_rules=dict(_catalog.EFFICIENCY_RULES[name]),
                **{f: values[f] for f in OPTIONAL_NUMBERS + ("cite",) if f in values})


def chip_from_dict(data, *, where="chip", name=None, path=None) -> Chip:
    """A :class:`Chip` from a chip file's object ``data`` (fields: module docstring).

    ``where`` starts every error message; ``name``: the name when ``data`` has none
    (default "chip"); ``path``: recorded in :attr:`Chip.path`. Raises ``ValueError``
    with one sentence naming the field and what it allows.
    """
    values = check_fields(data, where)
    name = values.get("name") or name or "chip"
    row = build_rows(**{k: values[k] for k in KNOBS})
    if name in _catalog.NAMES:
        ref, ref_values = _catalog.ROWS[name], _catalog.FILES[name]
        differ = [(k, row[k][0].item(), ref[k][0].item()) for k in KNOBS if row[k][0] != ref[k][0]]
        differ += [(f, values[f], ref_values.get(f)) for f in OPTIONAL_NUMBERS
                   if f in values and values[f] != ref_values.get(f)]
        if differ:
            k, mine, theirs = differ[0]
            raise ValueError(f"{where}: name {name!r} is a preset's, but {k} is {mine!r} where "
                             f"the preset has {theirs!r}; give the changed chip its own name")
    efficiency, ruled, explained = None, None, None
    same_preset = [n for n, mask in _catalog.match(row) if mask[0]]
    if "efficiency" in values or not same_preset:
        # the stated rules (phaze.arch.rules) for every parameter the file does not give
        derived, explained = rules.derive(dict(values, name=name), _catalog.MEASURED)
        if "efficiency" in values:
            efficiency = Efficiency(**derived)
        else:
            ruled = Efficiency(**derived)
    row.setflags(write=False)
    return Chip(name=name, row=row, efficiency=efficiency, source=values.get("source", ""),
                path=path, efficiency_rules=explained, rule_efficiency=ruled,
                **{f: values[f] for f in OPTIONAL_NUMBERS + ("cite",) if f in values})


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
