"""Architecture rows: the structured dtype, building and validating them (private to ``phaze.arch``)."""
from __future__ import annotations

import numpy as np

from . import _area

#: One accelerator per row (docs/design.md §2.3). Units are in the names: MiB, GiB, decimal GB/s, GHz, mm².
ARCH_DTYPE = np.dtype([
    ("num_tc", np.int64),          # tensor cores (systolic arrays)
    ("tc_width", np.int64),        # systolic array columns (output / N dimension)
    ("tc_depth", np.int64),        # systolic array rows (reduction / K dimension)
    ("num_vc", np.int64),          # vector cores
    ("vc_width", np.int64),        # lanes per vector core
    ("buffer_mib", np.float64),    # shared on-chip buffer, MiB (2**20 bytes)
    ("hbm_gib", np.float64),       # off-chip memory capacity, GiB (2**30 bytes)
    ("hbm_gb_per_s", np.float64),  # off-chip memory bandwidth of the whole chip, 1e9 bytes/s
    ("clock_ghz", np.float64),     # core clock, 1e9 Hz
    ("link_gb_per_s", np.float64),  # per-direction bandwidth inside a node (tensor-parallel collectives)
    ("net_gb_per_s", np.float64),  # per-direction bandwidth between nodes (pipeline, data-parallel)
    ("node_size", np.int64),       # devices joined by the fast link
    ("area_mm2", np.float64),      # chip area from the area model
])

#: The knobs a user sets (every field but the derived area).
KNOBS = ARCH_DTYPE.names[:-1]
INT_KNOBS = tuple(n for n in KNOBS if ARCH_DTYPE[n] == np.int64)
FLOAT_KNOBS = tuple(n for n in KNOBS if ARCH_DTYPE[n] == np.float64)


def check_knob(name, values):
    """``values`` as a 1-D array of the knob's dtype, every entry finite and > 0 (integral for counts)."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric, got {values!r}") from None
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    bad = ~np.isfinite(arr) | (arr <= 0)
    if np.any(bad):
        raise ValueError(f"{name} must be finite and > 0, got {arr[np.flatnonzero(bad)[0]].item()!r}")
    if name in INT_KNOBS:
        if np.any(arr != np.floor(arr)):
            raise ValueError(f"{name} must be a positive integer, got {arr[arr != np.floor(arr)][0].item()!r}")
        return arr.astype(np.int64)
    return arr


def area_of(archs) -> np.ndarray:
    """Area in mm² of each row of a structured array with the knob fields."""
    return _area.total_mm2(archs["num_tc"], archs["tc_width"], archs["tc_depth"],
                           archs["num_vc"], archs["vc_width"], archs["buffer_mib"])


def build_rows(**fields) -> np.ndarray:
    """Validated architecture rows (``ARCH_DTYPE``, area filled in) from every knob.

    Each keyword is a knob of ``ARCH_DTYPE`` (all but ``area_mm2``), a scalar or a 1-D
    sequence; they are broadcast against each other. Zero, negative, NaN or
    non-integral counts raise ``ValueError`` naming the knob.
    """
    unknown = sorted(set(fields) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown architecture field(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(KNOBS)}")
    missing = [n for n in KNOBS if n not in fields]
    if missing:
        raise ValueError(f"missing architecture field(s) {', '.join(missing)} "
                         f"(pass them, or base='tpuv4' to take them from a preset)")
    columns = [check_knob(n, fields[n]) for n in KNOBS]
    try:
        columns = np.broadcast_arrays(*columns) if len(set(c.shape for c in columns)) > 1 else columns
    except ValueError:
        raise ValueError("architecture fields must be scalars or sequences of one common length") from None
    out = np.empty(columns[0].shape[0], dtype=ARCH_DTYPE)
    for name, col in zip(KNOBS, columns):
        out[name] = col
    out["area_mm2"] = area_of(out)
    return out


def validate(archs) -> np.ndarray:
    """Check architecture rows and return them as a C-contiguous 1-D ``ARCH_DTYPE`` array.

    Accepts a structured array or record with at least the knob fields (extra fields
    are dropped, a missing ``area_mm2`` is computed). Raises ``ValueError`` naming the
    first field with a zero, negative, NaN or non-integral (for counts) value.
    """
    if isinstance(archs, np.void):
        archs = np.array([archs])
    if not isinstance(archs, np.ndarray) or archs.dtype.names is None:
        raise ValueError("archs must be a numpy structured array with the fields of phaze.arch.ARCH_DTYPE "
                         "(build one with phaze.arch.make_archs or phaze.arch.presets.get)")
    names = archs.dtype.names
    missing = [n for n in KNOBS if n not in names]
    if missing:
        raise ValueError(f"archs lacks field(s) {', '.join(missing)}")
    archs = archs.reshape(-1)
    if archs.dtype == ARCH_DTYPE:
        out = np.ascontiguousarray(archs)
    else:
        out = np.empty(archs.shape[0], dtype=ARCH_DTYPE)
        for name in KNOBS:
            col = np.asarray(archs[name])
            if name in INT_KNOBS and np.issubdtype(col.dtype, np.floating):
                col = check_knob(name, col)
            out[name] = col
        out["area_mm2"] = archs["area_mm2"] if "area_mm2" in names else area_of(out)
    if out.shape[0] == 0:
        raise ValueError("archs must contain at least one architecture")
    for name in INT_KNOBS:
        col = out[name]
        if np.any(col <= 0):
            raise ValueError(f"{name} must be a positive integer, got {col[col <= 0][0].item()!r}")
    for name in FLOAT_KNOBS + ("area_mm2",):
        col = out[name]
        bad = ~np.isfinite(col) | (col <= 0)
        if np.any(bad):
            raise ValueError(f"{name} must be finite and > 0, got {col[bad][0].item()!r}")
    return out


def peak_flops(archs) -> np.ndarray:
    """Peak tensor throughput of each row, FLOP/s: num_tc · tc_width · tc_depth · 2 · clock
    (inf, without a warning, beyond the float maximum)."""
    archs = validate(archs)
    with np.errstate(over="ignore"):
        return (archs["num_tc"].astype(np.float64) * archs["tc_width"] * archs["tc_depth"]
                * 2.0 * archs["clock_ghz"] * 1e9)
