"""The result table of a search: its columns, row operations and ranking.

A table is a dict of numpy columns, one row per evaluated point, in the order
and dtypes of :data:`TABLE_COLUMNS`. Chunks return compact columns (model
index, architecture id); :func:`expand` turns them into table rows.
"""
from __future__ import annotations

import math

import numpy as np

from .. import plan as _plan
from ._models import RECOMPUTE_MODES  # the order rows tie-break on (least recomputation first)

#: The plan's strategy columns (``phaze.plan.STRATEGY_COLUMNS``) with their numpy dtype.
_STRATEGY = tuple((name, np.bool_ if _plan.KNOB[name].type is bool else np.int64)
                  for name in _plan.STRATEGY_COLUMNS)

#: Columns of SearchResult.table, in file order, with their numpy dtype.
TABLE_COLUMNS = (
    ("model", object), ("arch_id", np.int64), ("num_tc", np.int64), ("tc_width", np.int64),
    ("tc_depth", np.int64), ("num_vc", np.int64), ("vc_width", np.int64),
    ("buffer_mib", np.float64), ("area_mm2", np.float64), ("microbatch", np.int64),
    ("hbm_gib", np.float64), ("recompute", object), ("feasible", np.bool_),
    ("time_per_batch_s", np.float64), ("samples_per_s", np.float64), ("tokens_per_s", np.float64),
    ("tensor_parallel", np.int64), ("data_parallel", np.int64), ("pipeline_parallel", np.int64),
    ("devices_used", np.int64), ("stage_layers", object), ("reason", object),
    *_STRATEGY,
    ("memory_bytes", np.float64), ("weights_bytes", np.float64), ("gradients_bytes", np.float64),
    ("optimizer_bytes", np.float64), ("activations_bytes", np.float64),
    ("workspace_bytes", np.float64),
    ("mfu", np.float64),
    *((name, np.float64) for name in ("power_w", "clock_fraction", "energy_per_step_j",
                                      "tokens_per_joule", "chip_cost_usd",
                                      "usd_per_million_tokens")),
)
#: The power and cost columns (issue 28; NaN in a row the study's model priced, or in a file
#: written before them).
POWER_COLUMNS = ("power_w", "clock_fraction", "energy_per_step_j", "tokens_per_joule",
                 "chip_cost_usd", "usd_per_million_tokens")
#: What ranks the rows (``search(objective=)``): the column, and whether more is better.
OBJECTIVES = {"throughput": ("samples_per_s", True), "perf-per-watt": ("tokens_per_joule", True),
              "perf-per-dollar": ("usd_per_million_tokens", False)}
COLUMN_NAMES = tuple(name for name, _ in TABLE_COLUMNS)
#: Column name → numpy dtype.
COLUMN_DTYPES = dict(TABLE_COLUMNS)
#: Columns added after the first result files were written, with the value they read as
#: in a file that lacks them (NaN: not recorded; the strategy knobs: the study's, which
#: is what every older file searched), so older files still load.
LATE_COLUMNS = {"mfu": math.nan, **{name: _plan.study_value(name) for name, _ in _STRATEGY},
                "memory_bytes": math.nan,
                "weights_bytes": math.nan, "gradients_bytes": math.nan, "optimizer_bytes": math.nan,
                "activations_bytes": math.nan, "workspace_bytes": math.nan,
                **{name: math.nan for name in POWER_COLUMNS}}
#: Architecture knobs copied into every row (and into per-architecture summaries).
ARCH_FIELDS = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib", "area_mm2")
#: Columns a chunk's rows carry as they are (the rest come from the model and the row).
_CHUNK_PLAN_COLUMNS = ("microbatch", "hbm_gib", "recompute", "feasible", "time_per_batch_s",
                       "samples_per_s", "tensor_parallel", "data_parallel", "pipeline_parallel",
                       "devices_used", "stage_layers", "reason", *_plan.STRATEGY_COLUMNS,
                       "memory_bytes", "weights_bytes",
                       "gradients_bytes", "optimizer_bytes", "activations_bytes",
                       "workspace_bytes", *POWER_COLUMNS)


def recompute_mode(value) -> str:
    """A ``recompute`` value as its mode: files written before the modes held booleans
    (true = full recomputation, false = none); anything else must be a mode's name."""
    if isinstance(value, (bool, np.bool_)):
        return "full" if value else "none"
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return "full" if text == "true" else "none"
    if text not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {value!r}")
    return text


def recompute_rank(column) -> np.ndarray:
    """Each row's recomputation mode as its index in :data:`RECOMPUTE_MODES` (sort key)."""
    index = {m: i for i, m in enumerate(RECOMPUTE_MODES)}
    return np.array([index.get(str(v), len(index)) for v in np.asarray(column).tolist()],
                    dtype=np.int64)


def empty_table() -> dict:
    """A table with no rows."""
    return {name: np.array([], dtype=dt) for name, dt in TABLE_COLUMNS}


def concat_tables(tables) -> dict:
    """Rows of ``tables`` (None entries skipped) one after the other."""
    tables = [t for t in tables if t is not None]
    if not tables:
        return empty_table()
    return {name: np.concatenate([np.asarray(t[name], dtype=dt) for t in tables])
            for name, dt in TABLE_COLUMNS}


def take(table: dict, index) -> dict:
    """Rows ``index`` (integer indices or a boolean mask) of ``table``."""
    return {name: np.asarray(col)[index] for name, col in table.items()}


def expand(columns, archs, models, ids=None) -> dict:
    """A chunk's columns (model index, arch id, plan) → table rows with names and knobs.

    ``archs``: the searched space's rows (indexed by the chunk's arch ids, which are
    row numbers of ``archs``); ``models``: the ModelSpecs the model indices refer to;
    ``ids``: the table's arch id of each row of ``archs`` (None: the row number).
    tokens/s = samples/s × seq_len.
    """
    n = len(columns["arch_id"])
    aid = columns["arch_id"]
    mi = np.asarray(columns["model"], dtype=np.int64)
    table = {}
    # Per-model values, looked up per row (a chunk has up to hundreds of thousands of rows).
    table["model"] = np.array([m.name for m in models], dtype=object)[mi]
    table["arch_id"] = (aid if ids is None else np.asarray(ids)[aid]).astype(np.int64)
    rows = archs[aid] if n else archs[:0]
    for f in ARCH_FIELDS:
        table[f] = rows[f].astype(COLUMN_DTYPES[f])
    for name in _CHUNK_PLAN_COLUMNS:
        table[name] = columns[name]
    seq = np.array([m.seq_len for m in models], dtype=np.float64)[mi]
    table["tokens_per_s"] = columns["samples_per_s"] * seq
    flops = np.array([model_flops_per_sample(m) for m in models], dtype=np.float64)[mi]
    table["mfu"] = mfu(flops, columns["samples_per_s"], columns["devices_used"],
                       peak_flops_of(rows))
    return {name: np.asarray(table[name], dtype=dt) for name, dt in TABLE_COLUMNS}


def model_flops_per_sample(model) -> float:
    """Model FLOPs of one training sample, forward and backward: PaLM's count (Chowdhery
    et al. 2022, appendix B), 6·N·s + 12·L·a·s², where s = seq_len, L = n_layers,
    a = heads · head_dim (attention counted in full, as PaLM does, causal or not) and N
    the parameters a token's matrix products use: the active parameters less the input
    lookup tables (the token table unless it is tied to the head, learned positions).
    Recomputation is not counted: these are the model's FLOPs, not the hardware's."""
    n = model.n_active_params
    if not model.tied_embeddings:
        n -= model.vocab * model.embed_width
    if model.position == "learned":
        n -= model.max_positions * model.hidden
    s = float(model.seq_len)
    return 6.0 * n * s + 12.0 * model.n_layers * model.heads * model.head_dim * s * s


def mfu(flops_per_sample, samples_per_s, devices_used, peak_flops) -> np.ndarray:
    """Model FLOPs utilisation: flops_per_sample × samples/s ÷ (devices used × peak FLOP/s of
    one chip), element-wise; 0 where nothing runs (an infeasible point)."""
    flops = np.asarray(flops_per_sample, dtype=np.float64)
    sps = np.asarray(samples_per_s, dtype=np.float64)
    dev = np.asarray(devices_used, dtype=np.float64)
    peak = np.asarray(peak_flops, dtype=np.float64)
    ok = (sps > 0) & (dev > 0) & (peak > 0) & np.isfinite(sps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, flops * sps / (dev * peak), 0.0)


def peak_flops_of(rows) -> np.ndarray:
    """Peak tensor FLOP/s of architecture rows (``phaze.arch.peak_flops``; none for no rows)."""
    if not len(rows):
        return np.array([], dtype=np.float64)
    from ..arch import peak_flops

    return peak_flops(rows)


def fill_mfu(table, models, archs, rows_of_ids) -> None:
    """Compute the ``mfu`` column (in place) where it is NaN: rows read from a file written
    before the column existed. ``rows_of_ids``: the row of ``archs`` of each table row."""
    missing = np.isnan(np.asarray(table["mfu"], dtype=np.float64))
    if not missing.any():
        return
    by_name = {m.name: model_flops_per_sample(m) for m in models}
    idx = np.flatnonzero(missing)
    flops = np.array([by_name.get(str(n), math.nan) for n in table["model"][idx]])
    col = np.array(table["mfu"], dtype=np.float64)
    col[idx] = mfu(flops, table["samples_per_s"][idx], table["devices_used"][idx],
                   peak_flops_of(archs[np.asarray(rows_of_ids)[idx]]))
    table["mfu"] = col


def objective_score(table, objective="throughput") -> np.ndarray:
    """Each row's score under ``objective`` (:data:`OBJECTIVES`; more is better): samples/s,
    tokens per joule, or tokens per US$ (10⁶ / $ per million tokens); −inf where infeasible
    or not recorded."""
    column, more = OBJECTIVES[objective]
    v = np.asarray(table[column], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = v if more else 1e6 / v  # tokens per dollar
    return np.where(np.asarray(table["feasible"], dtype=bool) & np.isfinite(v) & (v > 0), v,
                    -np.inf)


def ranking(table, objective="throughput") -> np.ndarray:
    """Row order: feasible first, then the objective's score (samples/s by default)
    descending, samples/s, smaller area, lower arch id, knobs."""
    t = table
    keys = (recompute_rank(t["recompute"]), t["hbm_gib"], t["microbatch"], t["arch_id"],
            t["area_mm2"], -np.where(t["feasible"], t["samples_per_s"], -1.0))
    if objective != "throughput":
        keys = keys + (-objective_score(t, objective),)
    return np.lexsort(keys + (t["model"].astype(str),))


def row_dict(table, i) -> dict:
    """Row ``i`` of a table as a dict of plain Python values."""
    out = {}
    for name in COLUMN_NAMES:
        v = np.asarray(table[name])[i]
        out[name] = v.item() if isinstance(v, np.generic) else v
    return out


def best_row_of(table, model_name, arch_id=None, objective="throughput"):
    """The best row of one model (on one architecture if ``arch_id`` is given) as a dict,
    or None when the table has no such row."""
    sel = table["model"].astype(str) == model_name
    if arch_id is not None:
        sel &= table["arch_id"] == arch_id
    idx = np.flatnonzero(sel)
    if not idx.size:
        return None
    sub = take(table, idx)
    return row_dict(sub, ranking(sub, objective)[0])


def json_safe(obj):
    """Plain-Python, JSON-encodable copy (numpy scalars/arrays, inf → null)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj
