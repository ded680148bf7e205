"""The joint sweep: accelerator architecture × training knobs × device placement (DESIGN §2.7–2.8).

:func:`search` evaluates every architecture of a space with every microbatch,
HBM capacity and recomputation setting: operator latencies → layer schedules →
the exact placement over all valid tensor-parallel widths → samples/s =
global_batch / time per batch (tokens/s = samples/s × sequence length). The
work is cut into chunks of architectures (``_config.SEARCH_CHUNK_ARCHS``) that
run on a local process pool (default), in this process, or on a Dask cluster,
and are written to the result file one by one (resumable).

:func:`evaluate_point` evaluates one architecture with one hand-given strategy
and says where the time goes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__, _config
from . import _search_io as io_
from . import _search_pipeline as pipe
from ._validate import nonneg_float, one_of, positive_float, positive_int

#: The original study's hand-written strategies on tpuv4: model → (pipeline stages p,
#: data-parallel degree d, tensor-parallel width t).
FIXED_STRATEGIES = {
    "opt-350m": (12, 85, 1), "bert-large": (8, 128, 1), "gpt2-xl": (32, 32, 1),
    "megatron-bert": (8, 128, 1), "megatron-gpt2-54": (8, 32, 4), "megatron-gpt2-72": (8, 16, 8),
    "gpt3-175b": (32, 8, 4), "llama2-7b": (8, 128, 1),
}
BASELINE_NAMES = ("tpuv4_searched", "tpuv4_fixed", "block_optimal")
BASELINE_TITLES = {
    "tpuv4_searched": "tpuv4 with the searched placement and knobs",
    "tpuv4_fixed": "tpuv4 with the original study's fixed strategy",
    "block_optimal": "fastest transformer block (t=1, microbatch 1), then full placement search",
}
_ARCH_FIELDS = ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib", "area_mm2")


# ==========================================================================
# Input validation (everything is checked before any work starts)
# ==========================================================================
def _resolve_models(models) -> list:
    from . import models as zoo

    if isinstance(models, (str, zoo.ModelSpec)):
        models = [models]
    try:
        models = list(models)
    except TypeError:
        raise ValueError(f"models must be a model name, a ModelSpec or a list of them, "
                         f"got {models!r}") from None
    if not models:
        raise ValueError("models must name at least one model")
    out = []
    for m in models:
        if isinstance(m, zoo.ModelSpec):
            out.append(m)
        elif isinstance(m, str):
            try:
                out.append(zoo.get(m))
            except KeyError:
                raise ValueError(f"models: unknown model {m!r}; known: {', '.join(zoo.names())}") \
                    from None
        else:
            raise ValueError(f"models must contain names or ModelSpec objects, got {m!r}")
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"models: each model may appear once, got {', '.join(names)}")
    return out


def _as_list(values, scalar_types, not_a_list, empty):
    """``values`` as a non-empty list (a lone scalar of ``scalar_types`` becomes a list of
    one); ``not_a_list`` / ``empty``: the ValueError messages otherwise."""
    if isinstance(values, scalar_types) and not isinstance(values, bool):
        values = (values,)
    try:
        values = list(values)
    except TypeError:
        raise ValueError(not_a_list) from None
    if not values:
        raise ValueError(empty)
    return values


def _int_tuple(name, values) -> tuple:
    values = _as_list(values, (int, np.integer),
                      f"{name} must be a positive integer or a list of them, got {values!r}",
                      f"{name} must list at least one value")
    return tuple(sorted({positive_int(name, v) for v in values}))


def _resolve_hbm(hbm_gib) -> tuple:
    if hbm_gib is None:
        return (None,)
    values = _as_list(hbm_gib, (int, float, np.number),
                      f"hbm_gib must be a number of GiB or a list of them, got {hbm_gib!r}",
                      "hbm_gib must list at least one capacity (or be None for each row's own)")
    return tuple(sorted({positive_float("hbm_gib", v) for v in values}))


def _resolve_recompute(recompute) -> tuple:
    if isinstance(recompute, (bool, np.bool_)):
        recompute = (recompute,)
    values = list(recompute)
    if not values or any(not isinstance(v, (bool, np.bool_)) for v in values):
        raise ValueError(f"recompute must be True, False or a list of them, got {recompute!r}")
    return tuple(sorted({bool(v) for v in values}))


def _resolve_space(space) -> np.ndarray:
    from . import arch

    if space is None:
        return arch.ArchSpace.default().configs
    if isinstance(space, arch.ArchSpace):
        rows = space.configs
    elif isinstance(space, str):
        rows = arch.presets.get(space)
    else:
        rows = space
    if isinstance(rows, np.ndarray) and rows.dtype.names is not None and rows.size == 0:
        raise ValueError("space: the architecture space is empty")
    return arch.validate(rows)


def _valid_widths(model, widths) -> tuple[list, dict]:
    valid, skipped = [], {}
    for t in widths:
        if model.valid_tensor_parallel(t):
            valid.append(t)
        else:
            skipped[t] = (f"t={t} does not divide heads ({model.heads}) and kv_heads "
                          f"({model.kv_heads})")
    return valid, skipped


def _arch_row(arch) -> np.ndarray:
    """One architecture: a preset name, a structured row or a one-row array."""
    from . import arch as arch_mod

    if isinstance(arch, str):
        return arch_mod.presets.get(arch)
    rows = arch_mod.validate(arch)
    if rows.shape[0] != 1:
        raise ValueError(f"arch must be one architecture, got {rows.shape[0]} rows")
    return rows


# ==========================================================================
# Result
# ==========================================================================
@dataclasses.dataclass
class SearchResult:
    """Outcome of :func:`search`.

    ``table``: dict of numpy columns, one row per evaluated point (columns in
    ``phaze._search_io.TABLE_COLUMNS``: model, arch_id and the architecture's knobs,
    area_mm2, microbatch, hbm_gib, recompute, feasible, time_per_batch_s,
    samples_per_s, tokens_per_s, tensor_parallel, data_parallel, pipeline_parallel,
    devices_used, stage_layers (layers per stage), reason). ``best``: the winning
    architecture with each model's plan (``plans``), plus, for one model, that plan's
    fields at top level. ``baselines``: name → {title, model → row or infeasible
    reason, gain}. ``metadata``: version, inputs, wall time, points/s, counts.
    """

    table: dict
    best: dict
    baselines: dict
    metadata: dict
    models: list

    def __len__(self):
        return len(self.table["arch_id"])

    def pareto(self) -> dict:
        """Architectures on the throughput-vs-area frontier (dict of columns, by area).

        Throughput of an architecture = its best samples/s over all knobs (several
        models: the mean of each model's throughput normalised to that model's best).
        """
        per_arch = _per_arch(self.table, self.models)
        if not per_arch["arch_id"].size:
            return per_arch
        order = np.lexsort((-per_arch["score"], per_arch["area_mm2"]))
        keep, top = [], -math.inf
        for i in order:
            if per_arch["score"][i] > top and per_arch["score"][i] > 0:
                keep.append(i)
                top = per_arch["score"][i]
        return {k: v[keep] for k, v in per_arch.items()}

    def save(self, path) -> Path:
        """Write by extension: .json (top rows + metadata), .csv / .csv.gz (all rows), .parquet."""
        path = Path(path)
        fmt = io_.file_format(path)
        if fmt == ".json":
            io_.save_json(path, self.summary(), self.top_rows())
        elif fmt == ".parquet":
            io_.save_parquet(path, self.table, self.summary())
        else:
            io_.save_csv(path, self.table)
        return path

    def top_rows(self, n: int = None) -> dict:
        n = _config.SEARCH_TOP_ROWS if n is None else n
        order = _ranking(self.table)[:n]
        return io_.take(self.table, order)

    def summary(self) -> dict:
        return {"metadata": self.metadata, "best": self.best, "baselines": self.baselines,
                "pareto": self.pareto()}

    def format_summary(self) -> str:
        """The human-readable summary the CLI prints."""
        return format_summary(self.summary(), self.models)


def _ranking(table) -> np.ndarray:
    """Row order: feasible first, then samples/s descending, smaller area, lower arch id, knobs."""
    t = table
    return np.lexsort((t["recompute"], t["hbm_gib"], t["microbatch"], t["arch_id"], t["area_mm2"],
                       -np.where(t["feasible"], t["samples_per_s"], -1.0), t["model"].astype(str)))


def _per_arch(table, model_names) -> dict:
    """Per architecture: best samples/s per model, normalised mean score, knobs."""
    if not len(table["arch_id"]):
        empty = {k: np.array([], dtype=np.float64) for k in ("score", "area_mm2")}
        empty["arch_id"] = np.array([], dtype=np.int64)
        return empty
    arch_ids, inverse = np.unique(table["arch_id"], return_inverse=True)
    n_models = len(model_names)
    best = np.full((n_models, arch_ids.size), -1.0)  # -1: no evaluated point for that model
    model_index = {name: i for i, name in enumerate(model_names)}
    mi = np.array([model_index[str(m)] for m in table["model"]], dtype=np.int64)
    sps = np.where(table["feasible"], table["samples_per_s"], 0.0)
    np.maximum.at(best, (mi, inverse), sps)
    model_best = best.max(axis=1)
    complete = np.all(best >= 0, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(model_best[:, None] > 0, np.maximum(best, 0) / model_best[:, None], 0.0)
    score = np.where(complete, norm.mean(axis=0), -1.0)
    first = np.zeros(arch_ids.size, dtype=np.int64)
    first[inverse[::-1]] = np.arange(inverse.size)[::-1]
    out = {"arch_id": arch_ids, "score": score if n_models > 1 else np.where(complete, best[0], -1.0)}
    for f in _ARCH_FIELDS:
        out[f] = table[f][first]
    for i, name in enumerate(model_names):
        out[f"samples_per_s[{name}]"] = np.maximum(best[i], 0.0)
    return out


def _row_dict(table, i) -> dict:
    """Row ``i`` of a table as a dict of plain Python values."""
    out = {}
    for name in io_.COLUMN_NAMES:
        v = np.asarray(table[name])[i]
        out[name] = v.item() if isinstance(v, np.generic) else v
    return out


def _best_row_of(table, model_name, arch_id=None):
    sel = table["model"].astype(str) == model_name
    if arch_id is not None:
        sel &= table["arch_id"] == arch_id
    idx = np.flatnonzero(sel)
    if not idx.size:
        return None
    sub = io_.take(table, idx)
    return _row_dict(sub, _ranking(sub)[0])


def _choose_best(table, model_names) -> dict:
    if not len(table["arch_id"]):
        return {"feasible": False, "reason": "no point was evaluated", "plans": {}}
    if len(model_names) == 1:
        row = _best_row_of(table, model_names[0])
        best = dict(row)
        best["plans"] = {model_names[0]: row}
        if not row["feasible"]:
            best["reason"] = "no feasible point: " + (row["reason"] or "infeasible")
        return best
    per_arch = _per_arch(table, model_names)
    order = np.lexsort((per_arch["arch_id"], per_arch["area_mm2"], -per_arch["score"]))
    i = order[0]
    aid = int(per_arch["arch_id"][i])
    plans = {name: _best_row_of(table, name, aid) for name in model_names}
    best = {"arch_id": aid, "score": float(per_arch["score"][i]),
            "feasible": bool(per_arch["score"][i] > 0), "plans": plans}
    for f in _ARCH_FIELDS:
        best[f] = io_.json_safe(per_arch[f][i])
    return best


# ==========================================================================
# Progress on stderr
# ==========================================================================
class _Progress:
    def __init__(self, total_points, enabled):
        self.total = total_points
        self.enabled = enabled
        self.start = time.perf_counter()
        self.done = 0
        self.last = 0.0

    def update(self, points, best):
        self.done += points
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.5 and self.done < self.total:
            return
        self.last = now
        rate = self.done / max(now - self.start, 1e-9)
        best_txt = f"{best:,.1f} samples/s" if best > 0 else "none yet"
        sys.stderr.write(f"\rphaze search: {self.done:,}/{self.total:,} points  "
                         f"{rate:,.0f} points/s  best {best_txt}   ")
        sys.stderr.flush()

    def close(self):
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ==========================================================================
# The search
# ==========================================================================
def _expand(columns, archs, models) -> dict:
    """Chunk columns (model index, arch index) → full table rows with names and knobs."""
    n = len(columns["arch_id"])
    aid = columns["arch_id"]
    table = {}
    table["model"] = np.array([models[i].name for i in columns["model"]], dtype=object)
    table["arch_id"] = aid.astype(np.int64)
    rows = archs[aid] if n else archs[:0]
    for f in _ARCH_FIELDS:
        table[f] = rows[f].astype(io_._DTYPES[f])
    for name in ("microbatch", "hbm_gib", "recompute", "feasible", "time_per_batch_s",
                 "samples_per_s", "tensor_parallel", "data_parallel", "pipeline_parallel",
                 "devices_used", "stage_layers", "reason"):
        table[name] = columns[name]
    seq = np.array([models[i].seq_len for i in columns["model"]], dtype=np.float64)
    table["tokens_per_s"] = columns["samples_per_s"] * seq
    return {name: np.asarray(table[name], dtype=dt) for name, dt in io_.TABLE_COLUMNS}


def search(models, devices=1024, global_batch=4096, microbatch=(1, 2, 4, 8), hbm_gib=(32, 64, 80),
           recompute=(False, True), tensor_parallel=(1, 2, 4, 8), space=None, optimizer="sgd",
           prune=False, executor=None, progress=None, *, out=None, resume=False, workers=None,
           address=None, gap=None, chunk_archs=None, baselines=True) -> SearchResult:
    """Search architectures and training plans jointly for the highest training throughput.

    ``models``: a zoo name, a ModelSpec or a list of them (several: one architecture
    for all, maximising the mean of each model's throughput normalised to its best).
    ``devices``: identical chips; ``global_batch``: samples per batch; ``microbatch``
    (samples, each must divide global_batch), ``hbm_gib`` (GiB per chip, overriding the
    rows' own; None keeps each row's), ``recompute`` and ``tensor_parallel`` (widths
    t; invalid ones — not dividing heads and kv_heads — are skipped and recorded):
    the knob grids. ``space``: an ArchSpace, structured rows or a preset name
    (default ``ArchSpace.default()``). ``optimizer``: 'sgd' or 'adam'. ``prune``:
    skip points whose valid throughput upper bound is below the best found (the best
    is unchanged). ``executor``: None/'process' (local pool, ``workers`` processes,
    default all cores), 'serial' (this process) or 'dask' (needs ``address``,
    tcp://HOST:PORT; giving ``address`` implies it). ``progress``: print progress on
    stderr (default: when stderr is a terminal). ``out``: result file written chunk
    by chunk (.csv, .csv.gz, .json, .parquet); ``resume`` continues it. ``gap``:
    accepted schedule gap (default ``_config.SCHEDULE_GAP``). ``baselines``: also
    evaluate the three baselines of DESIGN §2.8.

    Throughput: samples/s = global_batch / time per batch (seconds), tokens/s =
    samples/s × the model's seq_len.
    """
    wall0 = time.perf_counter()
    model_list = _resolve_models(models)
    devices = positive_int("devices", devices)
    global_batch = positive_int("global_batch", global_batch)
    microbatch = _int_tuple("microbatch", microbatch)
    for mb in microbatch:
        if global_batch % mb:
            raise ValueError(f"microbatch {mb} does not divide global_batch {global_batch}")
    hbm = _resolve_hbm(hbm_gib)
    recompute = _resolve_recompute(recompute)
    widths_all = _int_tuple("tensor_parallel", tensor_parallel)
    optimizer = one_of("optimizer", optimizer, ("sgd", "adam"))
    gap = _config.SCHEDULE_GAP if gap is None else nonneg_float("gap", gap)
    chunk_archs = positive_int("chunk_archs", chunk_archs or _config.SEARCH_CHUNK_ARCHS)
    if address is not None and executor is None:
        executor = "dask"
    executor = one_of("executor", "process" if executor is None else executor,
                      ("process", "serial", "dask"))
    if executor == "dask" and not address:
        raise ValueError("executor 'dask' needs address (tcp://HOST:PORT)")
    if workers is not None:
        workers = positive_int("workers", workers)
    if resume and out is None:
        raise ValueError("resume needs out (the result file to continue)")
    if out is not None:
        io_.file_format(out)
    archs = _resolve_space(space)
    widths, skipped = {}, {}
    for m in model_list:
        widths[m.name], skipped[m.name] = _valid_widths(m, widths_all)

    n_archs = archs.shape[0]
    chunk_ids = list(range((n_archs + chunk_archs - 1) // chunk_archs))
    points_per_arch = len(model_list) * len(microbatch) * len(hbm) * len(recompute)
    total_points = n_archs * points_per_arch
    inputs = {
        "models": [dataclasses.asdict(m) for m in model_list], "devices": devices,
        "global_batch": global_batch, "microbatch": microbatch, "hbm_gib": hbm,
        "recompute": recompute, "tensor_parallel": widths_all, "optimizer": optimizer,
        "prune": bool(prune), "gap": gap, "chunk_archs": chunk_archs, "n_archs": n_archs,
        "space_hash": hashlib.blake2b(archs.tobytes(), digest_size=16).hexdigest(),
        "version": __version__, "baselines": bool(baselines),  # resumed chunks carry block facts
    }
    for d in inputs["models"]:
        d.pop("_params", None)
    digest = io_.inputs_hash(inputs)

    journal = io_.Journal(out, digest, resume=resume) if out is not None else None
    tables = [journal.previous] if journal is not None else []
    chunk_facts = dict(journal.chunks) if journal is not None else {}
    todo = [c for c in chunk_ids if c not in chunk_facts]

    # Pruning floors: the best throughput an evaluated point of the space reached, per model.
    floors = [0.0] * len(model_list)
    incumbents: list = []
    for tab in tables:
        _update_floors(tab, model_list, floors, incumbents)

    progress = sys.stderr.isatty() if progress is None else bool(progress)
    prog = _Progress(sum(
        (min(n_archs, (c + 1) * chunk_archs) - c * chunk_archs) * points_per_arch for c in todo),
        progress)
    n_evaluated = sum(len(t["arch_id"]) for t in tables)

    def make_task(cid):
        lo, hi = cid * chunk_archs, min(n_archs, (cid + 1) * chunk_archs)
        return {"chunk_id": cid, "archs": archs[lo:hi], "arch_ids": np.arange(lo, hi),
                "models": model_list, "widths": [widths[m.name] for m in model_list],
                "devices": devices, "global_batch": global_batch, "microbatch": microbatch,
                "hbm_gib": hbm, "recompute": recompute, "optimizer": optimizer, "gap": gap,
                "prune": bool(prune), "floors": list(floors),
                "incumbents": [v.tolist() for v in incumbents], "want_block": bool(baselines)}

    def on_result(res):
        nonlocal n_evaluated
        cid = res["chunk_id"]
        tab = _expand(res["columns"], archs, model_list)
        facts = {"pruned": int(res["pruned"]), "evaluated": len(tab["arch_id"])}
        if res.get("block_fwbw_s") is not None:
            facts["block"] = _chunk_block_argmin(res["block_fwbw_s"], archs, cid * chunk_archs)
        if journal is not None:
            journal.append(cid, tab, facts)
        chunk_facts[cid] = facts
        tables.append(tab)
        n_evaluated += len(tab["arch_id"])
        _update_floors(tab, model_list, floors, incumbents)
        lo, hi = cid * chunk_archs, min(n_archs, (cid + 1) * chunk_archs)
        prog.update((hi - lo) * points_per_arch, max(floors) if len(floors) == 1 else 0.0)

    from . import _search_exec as ex

    try:
        if executor == "serial" or (executor == "process" and len(todo) <= 1 and workers is None):
            ex.run_serial(pipe.run_chunk, make_task, todo, on_result)
        elif executor == "process":
            ex.run_process_pool(pipe.run_chunk, make_task, todo, on_result, workers=workers,
                                per_worker=1 if prune else 2)
        else:
            ex.run_dask(pipe.run_chunk, make_task, todo, on_result, address=address,
                        per_worker=1 if prune else 2)
    finally:
        prog.close()
    sweep_s = time.perf_counter() - wall0

    table = io_.concat_tables(tables)
    order = np.lexsort((table["recompute"], table["hbm_gib"], table["microbatch"], table["arch_id"],
                        np.array([[m.name for m in model_list].index(str(x)) for x in table["model"]],
                                 dtype=np.int64)))
    table = io_.take(table, order)
    model_names = [m.name for m in model_list]
    best = _choose_best(table, model_names)

    base = {}
    if baselines:
        base = _baselines(model_list, best, chunk_facts, archs, widths, devices, global_batch,
                          microbatch, hbm, recompute, optimizer, gap)
    wall_s = time.perf_counter() - wall0
    n_pruned = sum(int(f.get("pruned", 0)) for f in chunk_facts.values())
    metadata = {
        "phaze_version": __version__,
        "inputs": {k: v for k, v in inputs.items() if k not in ("models",)} | {
            "models": model_names, "space_rows": n_archs, "executor": executor,
            "address": address, "workers": workers},
        "wall_time_s": wall_s, "sweep_time_s": sweep_s,
        "points_total": total_points, "points_evaluated": n_evaluated, "points_pruned": n_pruned,
        # Rate of this run: points of the chunks it evaluated (resumed ones excluded).
        "points_per_s": prog.total / sweep_s if sweep_s > 0 and prog.total else None,
        "skipped_tensor_parallel": {m: {str(t): r for t, r in s.items()} for m, s in skipped.items()},
        "resumed_chunks": len(chunk_ids) - len(todo),
    }
    result = SearchResult(table=table, best=best, baselines=base, metadata=metadata,
                          models=model_names)
    if journal is not None:
        summary = result.summary()
        journal.finish(summary)
        if journal.format == ".json":
            io_.save_json(journal.path, summary, result.top_rows())
        elif journal.format == ".parquet":
            io_.save_parquet(journal.path, table, summary)
    return result


def _update_floors(tab, model_list, floors, incumbents):
    if not len(tab["arch_id"]):
        return
    feasible_sps = np.where(tab["feasible"], tab["samples_per_s"], 0.0)
    names = tab["model"].astype(str)
    for mi, m in enumerate(model_list):
        sel = names == m.name
        if sel.any():
            floors[mi] = max(floors[mi], float(feasible_sps[sel].max()))
    if len(model_list) > 1:
        per_arch = _per_arch(tab, [m.name for m in model_list])
        complete = per_arch["score"] >= 0
        cand = [np.array([per_arch[f"samples_per_s[{m.name}]"][i] for m in model_list])
                for i in np.flatnonzero(complete)]
        pool = incumbents + cand
        if pool:
            # Keep the best architecture for each model plus the best in the normalised mean.
            mat = np.array(pool)
            keep = set(np.argmax(mat, axis=0).tolist())
            norm = mat / np.maximum(mat.max(axis=0), 1e-300)
            keep.add(int(np.argmax(norm.mean(axis=1))))
            incumbents[:] = [pool[i] for i in sorted(keep)]


def _chunk_block_argmin(block, archs, base) -> list:
    """Per model: [seconds, area, arch id] of the chunk's fastest block (ties: smaller area)."""
    out = []
    for mi in range(block.shape[0]):
        b = block[mi]
        area = archs["area_mm2"][base:base + b.size]
        ids = np.arange(base, base + b.size)
        order = np.lexsort((ids, area, b))
        i = order[0]
        out.append([float(b[i]) if math.isfinite(b[i]) else None, float(area[i]), int(ids[i])])
    return out


# ==========================================================================
# Baselines (DESIGN §2.8)
# ==========================================================================
def _single_arch_best(model, row, widths, devices, global_batch, microbatch, hbm, recompute,
                      optimizer, gap):
    """Full placement and knob search on one architecture (in this process)."""
    task = {"chunk_id": 0, "archs": row, "arch_ids": np.array([-1]), "models": [model],
            "widths": [widths], "devices": devices, "global_batch": global_batch,
            "microbatch": microbatch, "hbm_gib": hbm, "recompute": recompute,
            "optimizer": optimizer, "gap": gap, "prune": False}
    res = pipe.run_chunk(task)
    cols = res["columns"]
    tab = _expand({**cols, "arch_id": np.zeros_like(cols["arch_id"])}, row, [model])
    tab["arch_id"][:] = -1
    return _best_row_of(tab, model.name)


def _baselines(model_list, best, chunk_facts, archs, widths, devices, global_batch, microbatch,
               hbm, recompute, optimizer, gap) -> dict:
    from .arch import presets

    tpu = presets.get("tpuv4")
    out = {name: {"title": BASELINE_TITLES[name], "models": {}} for name in BASELINE_NAMES}
    for mi, model in enumerate(model_list):
        plan = best["plans"].get(model.name) if best.get("plans") else None
        best_sps = float(plan["samples_per_s"]) if plan and plan["feasible"] else 0.0
        # (a) tpuv4 with the searched placement and knobs.
        row_a = _single_arch_best(model, tpu, widths[model.name], devices, global_batch,
                                  microbatch, hbm, recompute, optimizer, gap)
        out["tpuv4_searched"]["models"][model.name] = _with_gain(row_a, best_sps)
        # (b) tpuv4 with the original study's fixed strategy.
        out["tpuv4_fixed"]["models"][model.name] = _with_gain(
            _fixed_baseline(model, tpu, devices, global_batch, microbatch, hbm, recompute,
                            optimizer, gap), best_sps)
        # (c) the fastest block at t = 1, microbatch 1, then the full search on it.
        cands = [f["block"][mi] for f in chunk_facts.values() if f.get("block")]
        cands = [c for c in cands if c[0] is not None]
        if not cands:
            out["block_optimal"]["models"][model.name] = {
                "feasible": False, "reason": "no architecture could schedule the block", "gain": None}
            continue
        sec, area, aid = min(cands, key=lambda c: (c[0], c[1], c[2]))
        row_c = _single_arch_best(model, archs[aid:aid + 1], widths[model.name], devices,
                                  global_batch, microbatch, hbm, recompute, optimizer, gap)
        if row_c is not None:
            row_c["arch_id"] = aid
            row_c["block_fwbw_s"] = sec
        out["block_optimal"]["models"][model.name] = _with_gain(row_c, best_sps)
    return out


def _with_gain(row, best_sps):
    if row is None:
        return {"feasible": False, "reason": "not evaluated", "gain": None}
    row = dict(row)
    sps = float(row.get("samples_per_s") or 0.0)
    row["gain"] = best_sps / sps if row.get("feasible") and sps > 0 else None
    return row


def _fixed_baseline(model, tpu, devices, global_batch, microbatch, hbm, recompute, optimizer, gap):
    if model.name not in FIXED_STRATEGIES:
        return {"feasible": False, "reason": f"the original study gives no fixed strategy for "
                                             f"{model.name}", "samples_per_s": 0.0}
    p, d, t = FIXED_STRATEGIES[model.name]
    best, reasons = None, []
    for mb in microbatch:
        for h in hbm:
            for rc in recompute:
                r = evaluate_point(model, tpu, t, p, d, mb, rc, devices=devices,
                                   global_batch=global_batch, hbm_gib=h, optimizer=optimizer,
                                   gap=gap)
                if r["feasible"] and (best is None or r["samples_per_s"] > best["samples_per_s"]):
                    best = r
                elif not r["feasible"]:
                    reasons.append(r["reason"])
    if best is None:
        return {"feasible": False, "tensor_parallel": t, "pipeline_parallel": p,
                "data_parallel": d, "samples_per_s": 0.0,
                "reason": f"fixed strategy p/d/t = {p}/{d}/{t} is infeasible: {reasons[0]}"}
    row = {k: best[k] for k in ("feasible", "microbatch", "hbm_gib", "recompute", "time_per_batch_s",
                                "samples_per_s", "tokens_per_s", "tensor_parallel",
                                "pipeline_parallel", "data_parallel", "reason")}
    row["model"] = model.name
    row["area_mm2"] = float(tpu["area_mm2"][0])
    row["stage_layers"] = ",".join(str(s["n_layers"]) for s in best["stages"])
    return row


# ==========================================================================
# One point, explained
# ==========================================================================
def _even_stages(n_layers_total: int, n_blocks: int, p: int) -> list:
    """Layers per stage: blocks spread over p stages (sizes differ by ≤ 1, larger first),
    the embedding joins the first stage and the head the last."""
    base, extra = divmod(n_blocks, p)
    sizes = [base + (1 if i < extra else 0) for i in range(p)]
    sizes[0] += 1
    sizes[-1] += 1
    assert sum(sizes) == n_layers_total
    return sizes


def evaluate_point(model, arch, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                   recompute, *, devices=None, global_batch=4096, hbm_gib=None, optimizer="sgd",
                   gap=None, stages=None) -> dict:
    """Evaluate one architecture with one strategy and say where the time goes.

    ``model``: zoo name or ModelSpec; ``arch``: preset name or one structured row;
    ``tensor_parallel`` t, ``pipeline_parallel`` p (stages), ``data_parallel`` d;
    ``microbatch`` (samples, dividing ``global_batch``); ``recompute`` bool;
    ``devices`` (default t·p·d); ``hbm_gib`` overrides the row's HBM; ``stages``:
    layers per stage (default: blocks spread evenly, embedding in the first stage,
    head in the last).

    Returns a dict: feasible, reason, time_per_batch_s (from
    ``phaze.placement.evaluate``), samples_per_s, tokens_per_s, ``stages`` (per stage:
    layers, devices, forward_s, backward_s, compute_s, communication_s, load_s,
    memory_bytes, memory_limit_bytes, fits) and ``breakdown`` (seconds per batch:
    steady = max load × ⌈microbatches/d⌉, bubble = max load × (p − 1), grad_sync, and
    of the critical stage's load: compute and communication).
    """
    from . import placement

    model = _resolve_models(model)[0]
    row = _arch_row(arch)
    t = positive_int("tensor_parallel", tensor_parallel)
    p = positive_int("pipeline_parallel", pipeline_parallel)
    d = positive_int("data_parallel", data_parallel)
    mb = positive_int("microbatch", microbatch)
    global_batch = positive_int("global_batch", global_batch)
    if global_batch % mb:
        raise ValueError(f"microbatch {mb} does not divide global_batch {global_batch}")
    if not isinstance(recompute, (bool, np.bool_)):
        raise ValueError(f"recompute must be True or False, got {recompute!r}")
    recompute = bool(recompute)
    devices = t * p * d if devices is None else positive_int("devices", devices)
    optimizer = one_of("optimizer", optimizer, ("sgd", "adam"))
    gap = _config.SCHEDULE_GAP if gap is None else nonneg_float("gap", gap)
    hbm = float(row["hbm_gib"][0]) if hbm_gib is None else positive_float("hbm_gib", hbm_gib)
    if not model.valid_tensor_parallel(t):
        raise ValueError(f"tensor_parallel {t} must divide heads ({model.heads}) and kv_heads "
                         f"({model.kv_heads}) of {model.name}")
    mg = pipe.model_graph(model, mb, t)
    kind_idx = pipe.chain_kind_index(mg)
    n_chain = kind_idx.size
    if stages is None:
        if p > model.n_layers:
            raise ValueError(f"pipeline_parallel must be at most n_layers ({model.n_layers}) "
                             f"of {model.name}, got {p}")
        sizes = _even_stages(n_chain, model.n_layers, p)
    else:
        sizes = [positive_int("stages", s) for s in stages]
        if len(sizes) != p or sum(sizes) != n_chain:
            raise ValueError(f"stages must list {p} positive layer counts summing to {n_chain}")
    fw_k, bw_k = _point_layer_times(model, mb, t, row, gap)
    fw, bw = fw_k[kind_idx, 0], bw_k[kind_idx, 0]
    P, A, TP, E = pipe.chain_static(mg)
    m = global_batch // mb
    bandwidth = float(row["net_gb_per_s"][0]) * 1e9
    memory = hbm * 2.0 ** 30
    bounds = np.cumsum([0] + sizes)
    stage_list = [(list(range(bounds[i], bounds[i + 1])), t if TP[bounds[i]:bounds[i + 1]].any() else 1)
                  for i in range(p)]
    problem = placement.PlacementProblem(
        widths=np.array([t], dtype=np.int64), forward_s=fw[None], backward_s=bw[None],
        param_bytes=P[None], activation_bytes=A[None], tensor_parallel=TP[None], edge_bytes=E[None],
        devices=devices, memory_bytes=memory, bandwidth=bandwidth, microbatches=m,
        recompute=recompute, optimizer=optimizer, layer_ids=np.arange(n_chain, dtype=np.int64))
    detail = plan_breakdown(fw, bw, P, A, E, [s for s, _ in stage_list], [a for _, a in stage_list],
                            d, devices, m, memory, bandwidth, recompute, optimizer)
    feasible = detail["feasible"] and bool(np.all(np.isfinite(fw)) and np.all(np.isfinite(bw)))
    tpb = math.inf
    if feasible:
        plan = placement.Placement(
            feasible=True, time_per_batch=detail["time_per_batch_s"], tensor_parallel=t,
            data_parallel=d, stages=stage_list,
            stage_loads=np.array([s["load_s"] for s in detail["stages"]]),
            stage_memory=np.array([s["memory_bytes"] for s in detail["stages"]]), reason="")
        tpb = float(placement.evaluate(problem, plan))
        feasible = math.isfinite(tpb)
    sps = global_batch / tpb if feasible and tpb > 0 else 0.0
    reason = "" if feasible else (detail["reason"] or "no layer schedule found")
    return {
        "model": model.name, "arch": {f: io_.json_safe(row[f][0]) for f in row.dtype.names},
        "tensor_parallel": t, "pipeline_parallel": p, "data_parallel": d, "microbatch": mb,
        "recompute": recompute, "devices": devices, "global_batch": global_batch,
        "microbatches": m, "hbm_gib": hbm, "optimizer": optimizer, "feasible": feasible,
        "reason": reason, "time_per_batch_s": tpb, "samples_per_s": sps,
        "tokens_per_s": sps * model.seq_len, "stages": detail["stages"],
        "breakdown": detail["breakdown"],
    }


_POINT_MEMO: dict = {}
_POINT_MEMO_SIZE = 256


def _point_layer_times(model, mb, t, row, gap):
    """Forward/backward seconds per layer kind of one architecture (memoised: a brute force
    over strategies asks for the same architecture and widths many times)."""
    key = (model, mb, t, row.tobytes(), gap)
    hit = _POINT_MEMO.get(key)
    if hit is None:
        lat = pipe._latencies(model, mb, [t], row)
        hit = pipe._layer_times(model, mb, [t], lat, row, gap)[t]
        if len(_POINT_MEMO) >= _POINT_MEMO_SIZE:
            _POINT_MEMO.pop(next(iter(_POINT_MEMO)))
        _POINT_MEMO[key] = hit
    return hit


def plan_breakdown(fw, bw, P, A, E, stage_layers, stage_devices, d, devices, microbatches, memory,
                   bandwidth, recompute, optimizer) -> dict:
    """Time and memory of one plan under the placement model (golden/placement/README.md).

    All inputs describe the layer chain of one width: ``fw``/``bw`` seconds,
    ``P``/``A`` parameter/activation bytes, ``E`` bytes on the L−1 edges;
    ``stage_layers`` lists each stage's layer indices, ``stage_devices`` its devices.
    """
    S = len(stage_layers)
    L = len(fw)
    stages, loads, reason = [], [], ""
    for j, layers in enumerate(stage_layers):
        lo, hi = layers[0], layers[-1] + 1
        s = S - j  # position from the end: last stage s = 1
        in_wait = E[lo - 1] / bandwidth if lo > 0 else 0.0
        out_wait = E[hi - 1] / bandwidth if hi < L else 0.0
        sum_fw, sum_bw = float(np.sum(fw[lo:hi])), float(np.sum(bw[lo:hi]))
        fw_time = in_wait + sum_fw
        bw_time = out_wait + sum_bw
        if recompute and s > 1:
            rb = max(sum_fw, out_wait) + sum_bw
            load = fw_time + rb
            compute = 2 * sum_fw + sum_bw
        else:
            load = fw_time + bw_time
            compute = sum_fw + sum_bw
        params = float(np.sum(P[lo:hi]))
        act = float(np.sum(A[lo:hi]))
        const = (3 if optimizer == "adam" else 2) * params + act
        stash = (E[lo - 1] if lo > 0 else 0.0) if recompute else act
        mem = const + (s - 1) * stash
        fits = mem <= memory
        if not fits and not reason:
            reason = (f"stage {j + 1} needs {mem / 2**30:.2f} GiB of {memory / 2**30:.2f} GiB "
                      f"HBM")
        stages.append({"layers": [int(lo), int(hi - 1)], "n_layers": int(hi - lo),
                       "devices": int(stage_devices[j]), "forward_s": fw_time, "backward_s": bw_time,
                       "compute_s": compute, "communication_s": load - compute, "load_s": load,
                       "memory_bytes": mem, "memory_limit_bytes": memory, "fits": bool(fits)})
        loads.append(load)
    used = d * sum(int(a) for a in stage_devices)
    if used > devices and not reason:
        reason = f"the plan needs {used} devices, only {devices} available"
    if d > microbatches and not reason:
        reason = f"data_parallel {d} exceeds the {microbatches} microbatches per batch"
    if S > min(devices, L) and not reason:
        reason = f"{S} stages exceed min(devices, layers) = {min(devices, L)}"
    max_load = max(loads)
    crit = int(np.argmax(loads))
    steady = max_load * math.ceil(microbatches / d)
    bubble = max_load * (S - 1)
    first_params = float(np.sum(P[stage_layers[0][0]:stage_layers[0][-1] + 1]))
    sync = 4.0 * (d - 1) * first_params / (bandwidth * d)
    return {"feasible": not reason, "reason": reason, "time_per_batch_s": steady + bubble + sync,
            "stages": stages,
            "breakdown": {"steady_s": steady, "bubble_s": bubble, "grad_sync_s": sync,
                          "critical_stage": crit + 1,
                          "critical_compute_s": stages[crit]["compute_s"],
                          "critical_communication_s": stages[crit]["communication_s"],
                          "devices_used": used}}


# ==========================================================================
# Reading results back and the summary text
# ==========================================================================
def load_result(path) -> SearchResult:
    """A SearchResult from a file written by :func:`search` or :meth:`SearchResult.save`
    (a .csv without its .meta.json sidecar has no baselines or metadata)."""
    table, summary = io_.load_table(path)
    names = list(dict.fromkeys(table["model"].astype(str).tolist()))
    meta = summary.get("metadata") or {}
    names = (meta.get("inputs") or {}).get("models") or names
    best = summary.get("best") or (_choose_best(table, names) if len(table["arch_id"]) else {})
    return SearchResult(table=table, best=best, baselines=summary.get("baselines") or {},
                        metadata=meta, models=names)


def format_summary(summary: dict, model_names) -> str:
    meta, best, base = summary["metadata"], summary["best"], summary["baselines"]
    lines = []
    inp = meta.get("inputs", {})
    lines.append(f"phaze search: {', '.join(model_names)} on {inp.get('devices')} devices, "
                 f"global batch {inp.get('global_batch')}: {meta.get('points_evaluated'):,} of "
                 f"{meta.get('points_total'):,} points evaluated ({meta.get('points_pruned'):,} pruned) "
                 f"in {meta.get('sweep_time_s', 0):.1f} s "
                 f"({(meta.get('points_per_s') or 0):,.0f} points/s)")
    if not best.get("feasible"):
        lines.append(f"no feasible point: {best.get('reason', 'infeasible')}")
        return "\n".join(lines)
    lines.append(f"best architecture (id {best['arch_id']}): {best['num_tc']} TC "
                 f"{best['tc_width']}x{best['tc_depth']}, {best['num_vc']} VC x{best['vc_width']}, "
                 f"{best['buffer_mib']:g} MiB buffer, area {best['area_mm2']:.2f} mm2"
                 + (f", normalised score {best['score']:.4f}" if "score" in best else ""))
    hdr = (f"{'model':<18} {'t':>3} {'p':>4} {'d':>5} {'mb':>3} {'HBM':>5} {'rc':>3} "
           f"{'samples/s':>11} {'tokens/s':>13} {'vs tpuv4':>9} {'vs fixed':>9} {'vs block':>9}")
    lines.append(hdr)
    for name in model_names:
        r = best["plans"].get(name)
        if r is None:
            continue
        gains = []
        for key in BASELINE_NAMES:
            g = (base.get(key, {}).get("models", {}).get(name) or {}).get("gain")
            gains.append(f"{g:.2f}x" if g else "n/a")
        if not r["feasible"]:
            lines.append(f"{name:<18} infeasible: {r['reason']}")
            continue
        lines.append(f"{name:<18} {r['tensor_parallel']:>3} {r['pipeline_parallel']:>4} "
                     f"{r['data_parallel']:>5} {r['microbatch']:>3} {r['hbm_gib']:>5g} "
                     f"{'on' if r['recompute'] else 'off':>3} {r['samples_per_s']:>11,.1f} "
                     f"{r['tokens_per_s']:>13,.0f} {gains[0]:>9} {gains[1]:>9} {gains[2]:>9}")
    if base:
        lines.append("baselines:")
    for key in BASELINE_NAMES:
        for name in model_names:
            r = base.get(key, {}).get("models", {}).get(name)
            if r is None:
                continue
            if r.get("feasible"):
                lines.append(f"  {key:<15} {name:<18} {r['samples_per_s']:>11,.1f} samples/s "
                             f"(t={r.get('tensor_parallel')}, p={r.get('pipeline_parallel')}, "
                             f"d={r.get('data_parallel')}, mb={r.get('microbatch')}, "
                             f"area {r.get('area_mm2', float('nan')):.2f} mm2)")
            else:
                lines.append(f"  {key:<15} {name:<18} infeasible: {r.get('reason')}")
    return "\n".join(lines)
