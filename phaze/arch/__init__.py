"""The hardware template: architecture rows, their area, presets and the search space (docs/design.md §2.3).

An architecture is one row of the structured dtype :data:`ARCH_DTYPE`: ``num_tc``
systolic arrays of ``tc_width × tc_depth``, ``num_vc`` vector cores of ``vc_width``
lanes, a shared ``buffer_mib`` buffer, HBM (``hbm_gib``, ``hbm_gb_per_s`` for the whole
chip), ``clock_ghz``, per-direction ``link_gb_per_s`` inside a node of ``node_size``
devices and ``net_gb_per_s`` between nodes, and the derived ``area_mm2``.

- :func:`make_archs` builds validated rows (area filled in), :func:`validate` checks
  rows someone else built, :func:`area_mm2` and :func:`peak_flops` evaluate them;
- :mod:`phaze.arch.presets` holds ``tpuv4``, ``a100-80g``, ``h100-sxm`` and ``h100-96g`` with
  sources, each read from its chip file ``phaze/arch/chips/NAME.json``;
- :class:`Chip` is the one record of a chip: the knob row, the efficiency set, the tensor
  rate at each datatype, power and process (``tdp_w``, ``process_nm``; None when unknown)
  and the fabric as network tiers (:class:`Tier`); its fields are declared once
  (``_fields.CHIP_FIELDS``). :func:`resolve` is the entrance: a preset name, a chip file,
  a ``Chip`` or one row, optionally with an efficiency set or fp8 rate, gives the record,
  checked once; :func:`resolve_rows` gives many rows their efficiency sets and fp8 rates
  as arrays. :func:`load_chip` reads a chip file (JSON; TOML on Python 3.11+; format:
  :mod:`phaze.arch._chipfile`), :func:`resolve_chip` is :func:`resolve` without overrides;
- :mod:`phaze.arch.dtype_rates`: the tensor rate at each training datatype (a chip's
  ``fp8_rate``, the template rule of 2× for the space's hypothetical chips);
- :class:`ArchSpace` is a grid of knobs filtered by an area budget; ``ArchSpace.default()``
  is exactly the original study's 29,360-row space.

Modules, each importing only those before it (no cycle, no import inside a function to
dodge one): ``_area`` (area model) → ``_rows`` (the dtype, rows from knobs) → ``_efields``
(efficiency fields and ranges) → ``_fields`` (the chip-field table, value checks, reading a
file) → ``_node`` (area by process node, ``die_area_mm2``) → ``_energy``
(``ENERGY_DTYPE``, ``energy_rows``, ``peak_power_w``, DVFS) → ``_silicon_cost``
(``chip_cost_usd``, ``run_cost_usd``, ``usd_per_million_tokens``; issue 28, docs/fidelity-
sources.md §23) → ``rules`` (the stated rules for unmeasured efficiency parameters) → ``_catalog``
(the presets' files as data) → ``efficiency`` (parameter sets,
``for_rows``) → ``dtype_rates`` (tensor rate per datatype) → ``_chipfile`` (the ``Chip``
record, chip files) → ``presets`` (the real chips, cited) → ``_resolve`` (the entrance)
→ ``_make`` (``make_archs``) → ``_attention`` (the attention kernels measured per die,
``attention_efficiency``) → this face with ``ArchSpace``.
"""
from __future__ import annotations

import numpy as np

from .. import _config
from .._validate import nonneg_float, positive_float
from . import dtype_rates, efficiency, presets
from ._attention import KERNEL_NAMES as ATTENTION_KERNELS, attention_efficiency
from ._attention import DEFAULT_SHAPE_KERNEL as DEFAULT_ATTENTION_SHAPE_KERNEL
from ._attention import SHAPE_TFLOPS as ATTENTION_SHAPE_TFLOPS
from ._attention import shape_factor as attention_shape_factor
from ._attention import shape_kernel as attention_shape_kernel
from ._attention import shape_kernels_for_rows as attention_shape_kernels_for_rows
from ._chipfile import Chip, Tier, chip_from_dict, load_chip
from ._fields import CHIP_FIELDS, PLATFORMS, ChipField
from ._make import make_archs
from ._resolve import ChipRows, resolve, resolve_chip, resolve_rows
from ._rows import ARCH_DTYPE, KNOBS, area_of, check_knob, peak_flops, validate
from ._energy import (DVFS_MIN_CLOCK_FRACTION, ENERGY_DTYPE, TEMPLATE_TDP_W, dvfs_energy_scale,
                      energy_rows, peak_power_w)
from ._node import TEMPLATE_PROCESS_NM, die_area_mm2
from ._silicon_cost import chip_cost_usd, run_cost_usd, usd_per_million_tokens

__all__ = ["ATTENTION_KERNELS", "attention_efficiency", "ATTENTION_SHAPE_TFLOPS",
           "DEFAULT_ATTENTION_SHAPE_KERNEL", "attention_shape_factor", "attention_shape_kernel",
           "attention_shape_kernels_for_rows", "DVFS_MIN_CLOCK_FRACTION", "ENERGY_DTYPE",
           "TEMPLATE_PROCESS_NM", "TEMPLATE_TDP_W",
           "chip_cost_usd", "die_area_mm2", "dvfs_energy_scale", "energy_rows", "peak_power_w",
           "run_cost_usd", "usd_per_million_tokens", "ARCH_DTYPE", "CHIP_FIELDS", "KNOBS",
           "PLATFORMS", "ArchSpace", "Chip", "ChipField", "ChipRows",
           "Tier", "area_mm2", "chip_from_dict", "dtype_rates", "efficiency", "load_chip",
           "make_archs", "peak_flops", "presets", "resolve", "resolve_chip", "resolve_rows",
           "validate"]

_POW2_COUNTS = tuple(2 ** i for i in range(13))      # 1 … 4096
_POW2_WIDTHS = tuple(2 ** i for i in range(1, 9))    # 2 … 256
_POW2_BUFFERS = tuple(float(2 ** i) for i in range(1, 8))  # 2 … 128 MiB

#: Grids of the original study's space; ``vc_width=None`` ties the lane count to tc_width.
DEFAULT_GRIDS = dict(num_tc=_POW2_COUNTS, tc_width=_POW2_WIDTHS, tc_depth=_POW2_WIDTHS,
                     num_vc=_POW2_COUNTS, vc_width=None, buffer_mib=_POW2_BUFFERS)


def area_mm2(archs) -> np.ndarray:
    """Chip area of each architecture row, mm² (float64 array).

    ``num_tc·A_tc(tc_width·tc_depth) + num_vc·A_vc(vc_width) + A_buf(buffer_mib)`` with the
    component areas of the original study on its grid and, off the grid, A_tc
    piecewise-linear in w·d, A_vc piecewise-linear in lanes and A_buf log-log in
    capacity (linear extrapolation beyond the grid); increasing in every knob.
    The stored ``area_mm2`` field is ignored: the area is recomputed from the knobs.
    """
    if isinstance(archs, np.void):
        archs = np.array([archs])
    if not isinstance(archs, np.ndarray) or archs.dtype.names is None:
        raise ValueError("archs must be a numpy structured array with the fields of phaze.arch.ARCH_DTYPE")
    archs = archs.reshape(-1)
    fields = {}
    for name in ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib"):
        if name not in archs.dtype.names:
            raise ValueError(f"archs lacks field {name}")
        fields[name] = check_knob(name, archs[name]) if archs.shape[0] else np.empty(0)
    return area_of(fields)


class ArchSpace:
    """A grid of architecture knobs, kept where ``lower_fraction ≤ area / budget ≤ 1``.

    Every knob of :data:`ARCH_DTYPE` (except ``area_mm2``) is a keyword taking a list of
    values (a scalar means one value). Unset knobs: ``num_tc``/``num_vc`` 1…4096,
    ``tc_width``/``tc_depth`` 2…256 (powers of two), ``vc_width`` tied to ``tc_width``
    (``None``; give a list to sweep it independently), ``buffer_mib`` 2…128 (powers of
    two), everything else the value of the ``base`` preset (default ``tpuv4``).

    ``budget_mm2`` is a number or a preset name (its area); ``lower_fraction`` (default
    0.3) is waived for rows with ``num_tc == 1`` or ``num_vc == 1``, as in the original
    study. Ratios are compared with a relative tolerance of
    ``_config.ARCH_AREA_RATIO_RTOL`` (1e-9), so the budget preset itself is kept.
    An empty result raises ``ValueError``.

    Attributes: ``configs`` (structured array, rows in lexicographic order of the
    knobs in ``ARCH_DTYPE`` order), ``budget_mm2``, ``lower_fraction``, ``grids``.
    """

    def __init__(self, num_tc=None, tc_width=None, tc_depth=None, num_vc=None, vc_width=None,
                 buffer_mib=None, hbm_gib=None, hbm_gb_per_s=None, clock_ghz=None,
                 link_gb_per_s=None, net_gb_per_s=None, node_size=None, *,
                 base="tpuv4", budget_mm2="tpuv4", lower_fraction=0.3):
        given = dict(num_tc=num_tc, tc_width=tc_width, tc_depth=tc_depth, num_vc=num_vc,
                     vc_width=vc_width, buffer_mib=buffer_mib, hbm_gib=hbm_gib,
                     hbm_gb_per_s=hbm_gb_per_s, clock_ghz=clock_ghz, link_gb_per_s=link_gb_per_s,
                     net_gb_per_s=net_gb_per_s, node_size=node_size)
        base_row = validate(presets.get(base) if isinstance(base, str) else base)
        if base_row.shape[0] != 1:
            raise ValueError("base must be a preset name or a one-row architecture array")

        if isinstance(budget_mm2, str):
            budget = float(presets.get(budget_mm2)["area_mm2"][0])
        else:
            budget = positive_float("budget_mm2", budget_mm2)
        lower = nonneg_float("lower_fraction", lower_fraction)
        if lower > 1:
            raise ValueError(f"lower_fraction must lie in [0, 1], got {lower_fraction!r}")

        grids = {}
        for name in KNOBS:
            value = given[name]
            if value is None:
                value = DEFAULT_GRIDS.get(name, base_row[name][0])
                if value is None:  # vc_width tied to tc_width
                    grids[name] = None
                    continue
            values = np.atleast_1d(np.asarray(value, dtype=object if isinstance(value, str) else None))
            grids[name] = np.unique(check_knob(name, values))
        self.grids = grids
        self.budget_mm2 = budget
        self.lower_fraction = lower

        swept = [n for n in KNOBS if grids[n] is not None]
        n_combos = int(np.prod([grids[n].size for n in swept], dtype=np.float64))
        if n_combos > _config.ARCH_SPACE_MAX_COMBINATIONS:
            raise ValueError(f"the knob grids span {n_combos:,} combinations, more than "
                             f"{_config.ARCH_SPACE_MAX_COMBINATIONS:,}; narrow a grid")
        mesh = np.meshgrid(*[grids[n] for n in swept], indexing="ij")
        rows = np.empty(n_combos, dtype=ARCH_DTYPE)
        for name, col in zip(swept, mesh):
            rows[name] = col.reshape(-1)
        if grids["vc_width"] is None:
            rows["vc_width"] = rows["tc_width"]
        rows["area_mm2"] = area_of(rows)

        rtol = _config.ARCH_AREA_RATIO_RTOL
        ratio = rows["area_mm2"] / budget
        keep = ratio <= 1.0 + rtol
        keep &= (ratio >= lower * (1.0 - rtol)) | (rows["num_tc"] == 1) | (rows["num_vc"] == 1)
        if not np.any(keep):
            raise ValueError(
                f"the architecture space is empty: no combination of the grids has an area within "
                f"[{lower:g}, 1] x the budget of {budget:.6g} mm2 (areas span "
                f"{rows['area_mm2'].min():.6g} to {rows['area_mm2'].max():.6g} mm2)")
        self.configs = np.ascontiguousarray(rows[keep])
        self.configs.setflags(write=False)

    @classmethod
    def default(cls) -> "ArchSpace":
        """The original study's space: 29,360 rows, budget = area of ``tpuv4`` ≈ 278.83 mm²."""
        return cls()

    def __len__(self) -> int:
        return self.configs.shape[0]

    def __repr__(self) -> str:
        return (f"ArchSpace({len(self):,} architectures, budget {self.budget_mm2:.2f} mm2, "
                f"lower fraction {self.lower_fraction:g})")
