"""The result table of a search: its columns, row operations and ranking.

A table is a dict of numpy columns, one row per evaluated point, in the order
and dtypes of :data:`TABLE_COLUMNS`. Chunks return compact columns (model
index, architecture id); :func:`expand` turns them into table rows.
"""
from __future__ import annotations

import math

import numpy as np

#: Columns of SearchResult.table, in file order, with their numpy dtype.
TABLE_COLUMNS = (
    ("model", object), ("arch_id", np.int64), ("num_tc", np.int64), ("tc_width", np.int64),
    ("tc_depth", np.int64), ("num_vc", np.int64), ("vc_width", np.int64),
    ("buffer_mib", np.float64), ("area_mm2", np.float64), ("microbatch", np.int64),
    ("hbm_gib", np.float64), ("recompute", np.bool_), ("feasible", np.bool_),
    ("time_per_batch_s", np.float64), ("samples_per_s", np.float64), ("tokens_per_s", np.float64),
    ("tensor_parallel", np.int64), ("data_parallel", np.int64), ("pipeline_parallel", np.int64),
    ("devices_used", np.int64), ("stage_layers", object), ("reason", object),
)
COLUMN_NAMES = tuple(name for name, _ in TABLE_COLUMNS)
#: Column name → numpy dtype.
COLUMN_DTYPES = dict(TABLE_COLUMNS)
#: Architecture knobs copied into every row (and into per-architecture summaries).
ARCH_FIELDS = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib", "area_mm2")
#: Columns a chunk's rows carry as they are (the rest come from the model and the row).
_CHUNK_PLAN_COLUMNS = ("microbatch", "hbm_gib", "recompute", "feasible", "time_per_batch_s",
                       "samples_per_s", "tensor_parallel", "data_parallel", "pipeline_parallel",
                       "devices_used", "stage_layers", "reason")


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
    table = {}
    table["model"] = np.array([models[i].name for i in columns["model"]], dtype=object)
    table["arch_id"] = (aid if ids is None else np.asarray(ids)[aid]).astype(np.int64)
    rows = archs[aid] if n else archs[:0]
    for f in ARCH_FIELDS:
        table[f] = rows[f].astype(COLUMN_DTYPES[f])
    for name in _CHUNK_PLAN_COLUMNS:
        table[name] = columns[name]
    seq = np.array([models[i].seq_len for i in columns["model"]], dtype=np.float64)
    table["tokens_per_s"] = columns["samples_per_s"] * seq
    return {name: np.asarray(table[name], dtype=dt) for name, dt in TABLE_COLUMNS}


def ranking(table) -> np.ndarray:
    """Row order: feasible first, then samples/s descending, smaller area, lower arch id, knobs."""
    t = table
    return np.lexsort((t["recompute"], t["hbm_gib"], t["microbatch"], t["arch_id"], t["area_mm2"],
                       -np.where(t["feasible"], t["samples_per_s"], -1.0), t["model"].astype(str)))


def row_dict(table, i) -> dict:
    """Row ``i`` of a table as a dict of plain Python values."""
    out = {}
    for name in COLUMN_NAMES:
        v = np.asarray(table[name])[i]
        out[name] = v.item() if isinstance(v, np.generic) else v
    return out


def best_row_of(table, model_name, arch_id=None):
    """The best row of one model (on one architecture if ``arch_id`` is given) as a dict,
    or None when the table has no such row."""
    sel = table["model"].astype(str) == model_name
    if arch_id is not None:
        sel &= table["arch_id"] == arch_id
    idx = np.flatnonzero(sel)
    if not idx.size:
        return None
    sub = take(table, idx)
    return row_dict(sub, ranking(sub)[0])


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
