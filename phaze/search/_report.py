"""What a search reports: :class:`SearchResult`, the best point, the Pareto front, the summary text.

Throughput of an architecture is its best samples/s over all knobs; with several
models, the mean of each model's throughput normalised to that model's best over
the space (one architecture for all models). The best point, the Pareto front
and the summary text are derived from the table (``phaze.search._table``).
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np

from .. import _config
from .. import plan as _plan
from . import _files
from ._baselines import BASELINE_NAMES
from ._models import cost_model
from ._table import ARCH_FIELDS, best_row_of, json_safe, objective_score, ranking, take


@dataclasses.dataclass
class SearchResult:
    """Outcome of :func:`search`.

    ``table``: dict of numpy columns, one row per evaluated point (columns in
    ``phaze.search._table.TABLE_COLUMNS``: model, arch_id and the architecture's knobs,
    area_mm2, microbatch, hbm_gib, recompute (mode: "none", "selective", "full"), feasible,
    time_per_batch_s, samples_per_s, tokens_per_s, tensor_parallel, data_parallel,
    pipeline_parallel, devices_used, stage_layers (layers per stage), reason, mfu (model
    FLOPs utilisation, ``_table.model_flops_per_sample``; NaN in rows of older files), the
    strategy chosen inside the row (``phaze.plan.STRATEGY_COLUMNS``; the study's
    values under its model) and the
    peak stage's memory per GPU in bytes (memory_bytes = weights_bytes + gradients_bytes
    + optimizer_bytes + activations_bytes + workspace_bytes; the study's model records
    memory_bytes alone, NaN elsewhere)). ``best``: the winning
    architecture with each model's plan (``plans``), plus, for one model, that plan's
    fields at top level. ``baselines``: name → {title, model → row or infeasible
    reason, gain}. ``metadata``: version, inputs, wall time, points/s, counts,
    ``pareto_exact`` (False when ``prune="best"`` may have left the front partial).
    ``stored_pareto``: the Pareto front a result file recorded (None: derived from the
    table; a .json keeps only the top rows, so its front must be the stored one).
    """

    table: dict
    best: dict
    baselines: dict
    metadata: dict
    models: list
    stored_pareto: dict = None
    #: A search with a result file: the rows it kept (``_reduced.Reduced``) — the summary
    #: is derived from them, and ``table`` is read back from the file when first used.
    reduced: object = None

    def __len__(self):
        if self.reduced is not None:
            return self.reduced.n_rows
        return len(self.table["arch_id"])

    @property
    def objective(self) -> str:
        """What ranked the rows (``search(objective=)``; "throughput" in older files)."""
        return (self.metadata.get("inputs") or {}).get("objective") or "throughput"

    def per_arch(self) -> dict:
        """Per architecture (dict of columns, by arch id): arch_id, score (samples/s, or the
        normalised mean for several models; −1 when a model has no point on it), the
        architecture's knobs and ``samples_per_s[MODEL]`` (best feasible, 0 if none)."""
        if self.reduced is not None:
            return per_arch(self.reduced.best_rows("throughput"), self.models)
        return per_arch(self.table, self.models)

    def pareto(self) -> dict:
        """Architectures on the throughput-vs-area frontier (dict of columns, by area).

        Throughput of an architecture = its best samples/s over all knobs (several
        models: the mean of each model's throughput normalised to that model's best).
        A loaded result returns the front its file stored. After ``prune="best"`` the
        front may be partial (``metadata["pareto_exact"]`` is False).
        """
        if self.stored_pareto is not None:
            return {k: np.asarray(v) for k, v in self.stored_pareto.items()}
        cols = self.per_arch()
        if not cols["arch_id"].size:
            return cols
        order = np.lexsort((-cols["score"], cols["area_mm2"]))
        keep, top = [], -math.inf
        for i in order:
            if cols["score"][i] > top and cols["score"][i] > 0:
                keep.append(i)
                top = cols["score"][i]
        # --prune best skipped points whose bound was below the best found: a front point
        # is surely on the exhaustive front only when no skipped architecture has less
        # area, or when nothing skipped can beat it (it reaches the best)
        limit = self.metadata.get("pruned_min_area_mm2")
        if self.metadata.get("pareto_exact") is False and limit is not None and keep:
            best = max(cols["score"][i] for i in keep)
            keep = [i for i in keep if cols["area_mm2"][i] < limit or cols["score"][i] >= best]
        return {k: v[keep] for k, v in cols.items()}

    def pareto_power(self) -> dict:
        """Architectures on the throughput × area × power front (issue 28; one model: its
        best feasible row per architecture; several: the first model's): none of them has
        another architecture with at least its samples/s and no more area and power, one
        strictly better. Columns arch_id, samples_per_s, area_mm2, power_w,
        usd_per_million_tokens, by area; empty when the rows carry no power (the study's
        model, older files)."""
        table = self.reduced.power_rows() if self.reduced is not None else self.table
        return pareto_power(table, self.models[0], self.objective)

    def save(self, path) -> Path:
        """Write by extension: .json (top rows), .csv / .csv.gz (all rows; the rest in
        ``PATH.meta.json`` next to it), .parquet (all rows). Every format keeps what the
        CLI's result file keeps besides the rows: metadata (with the search's inputs),
        best, baselines and the Pareto front, so :func:`load_result` gives them back."""
        path = Path(path)
        fmt = _files.file_format(path)
        if fmt == ".json":
            _files.save_json(path, self.summary(), self.top_rows())
        elif fmt == ".parquet":
            _files.save_parquet(path, self.table, self.summary())
        else:
            _files.save_csv(path, self.table, self.summary())
        return path

    def top_rows(self, n: int = None) -> dict:
        """The ``n`` best rows (None: ``_config.SEARCH_TOP_ROWS``), best first."""
        n = _config.SEARCH_TOP_ROWS if n is None else n
        if self.reduced is not None and n <= self.reduced.top_n:
            return self.reduced.top_rows(n)
        order = ranking(self.table, self.objective)[:n]
        return take(self.table, order)

    def summary(self) -> dict:
        """metadata, best, baselines and the Pareto front (what files keep besides the rows)."""
        return {"metadata": self.metadata, "best": self.best, "baselines": self.baselines,
                "pareto": self.pareto()}

    def format_summary(self) -> str:
        """The human-readable summary the CLI prints."""
        return format_summary(self.summary(), self.models)


def per_arch(table, model_names, objective="throughput") -> dict:
    """Per architecture: best samples/s per model, normalised mean score, knobs; under
    another ``objective`` the score is of that objective's values (``_table.objective_score``)."""
    if not len(table["arch_id"]):
        empty = {k: np.array([], dtype=np.float64) for k in ("score", "area_mm2")}
        empty["arch_id"] = np.array([], dtype=np.int64)
        return empty
    arch_ids, inverse = np.unique(table["arch_id"], return_inverse=True)
    n_models = len(model_names)
    best = np.full((n_models, arch_ids.size), -1.0)  # -1: no evaluated point for that model
    model_index = {name: i for i, name in enumerate(model_names)}
    mi = np.array([model_index[str(m)] for m in table["model"]], dtype=np.int64)
    sps = (np.where(table["feasible"], table["samples_per_s"], 0.0) if objective == "throughput"
           else np.maximum(objective_score(table, objective), 0.0))
    np.maximum.at(best, (mi, inverse), sps)
    model_best = best.max(axis=1)
    complete = np.all(best >= 0, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(model_best[:, None] > 0, np.maximum(best, 0) / model_best[:, None], 0.0)
    score = np.where(complete, norm.mean(axis=0), -1.0)
    first = np.zeros(arch_ids.size, dtype=np.int64)
    first[inverse[::-1]] = np.arange(inverse.size)[::-1]
    out = {"arch_id": arch_ids, "score": score if n_models > 1 else np.where(complete, best[0], -1.0)}
    for f in ARCH_FIELDS:
        out[f] = table[f][first]
    for i, name in enumerate(model_names):
        out[f"samples_per_s[{name}]"] = np.maximum(best[i], 0.0)
    return out


def pareto_power(table, model_name, objective="throughput") -> dict:
    """:meth:`SearchResult.pareto_power` of ``table`` for ``model_name``."""
    names = ("arch_id", "samples_per_s", "area_mm2", "power_w", "usd_per_million_tokens")
    sel = (table["model"].astype(str) == model_name) & np.asarray(table["feasible"], dtype=bool)
    sel &= np.isfinite(np.asarray(table["power_w"], dtype=np.float64))
    idx = np.flatnonzero(sel)
    if not idx.size:
        return {k: np.array([]) for k in names}
    sub = take(table, idx)
    order = ranking(sub, objective)
    _, first = np.unique(sub["arch_id"][order], return_index=True)
    rows = order[first]
    cols = {k: np.asarray(sub[k], dtype=np.float64)[rows] for k in names}
    x, a, w = cols["samples_per_s"], cols["area_mm2"], cols["power_w"]
    keep = np.ones(rows.size, dtype=bool)
    for i in range(rows.size):
        worse = (x >= x[i]) & (a <= a[i]) & (w <= w[i]) & ((x > x[i]) | (a < a[i]) | (w < w[i]))
        keep[i] = not worse.any()
    by_area = np.argsort(a[keep], kind="stable")
    out = {k: v[keep][by_area] for k, v in cols.items()}
    out["arch_id"] = out["arch_id"].astype(np.int64)
    return out


def choose_best(table, model_names, objective="throughput", reduced=None) -> dict:
    """The best point under ``objective`` (``_table.OBJECTIVES``): for one model its best
    row (plus ``plans``); for several, the architecture with the highest normalised mean
    of each model's best score, with each model's best plan on it. ``reduced`` (a
    ``_reduced.Reduced``; ``table`` is then ignored): the same from the rows it kept."""
    why = lambda tab, name: why_infeasible(tab, name)  # noqa: E731
    feasible_table = table
    if reduced is not None:
        table = reduced.best_rows(objective)
        feasible_table = reduced.best_rows("throughput")
        why = lambda tab, name: reduced.why_infeasible(name)  # noqa: E731
    if not len(table["arch_id"]):
        return {"feasible": False, "reason": "no point was evaluated", "plans": {}}
    if len(model_names) == 1:
        row = best_row_of(table, model_names[0], objective=objective)
        best = dict(row)
        best["plans"] = {model_names[0]: row}
        if not row["feasible"]:
            best["reason"] = "no feasible point: " + why(table, model_names[0])
        return best
    cols = per_arch(table, model_names, objective)
    order = np.lexsort((cols["arch_id"], cols["area_mm2"], -cols["score"]))
    i = order[0]
    aid = int(cols["arch_id"][i])
    plans = {name: best_row_of(table, name, aid, objective) for name in model_names}
    best = {"arch_id": aid, "score": float(cols["score"][i]),
            "feasible": bool(cols["score"][i] > 0), "plans": plans}
    if not best["feasible"]:
        ft = feasible_table
        none = [n for n in model_names if not ft["feasible"][ft["model"].astype(str) == n].any()]
        best["reason"] = "no feasible point: " + "; ".join(
            f"{n}: {why(table, n)}" for n in none or model_names)
    for f in ARCH_FIELDS:
        best[f] = json_safe(cols[f][i])
    return best


#: Kinds of infeasibility, by words of the reasons the placement and the chunks write.
_CAUSES = (
    ("memory per device", ("memory", "bytes per device", "does not fit")),
    ("too few microbatches", ("microbatches per batch",)),
    ("no layer schedule", ("schedule",)),
    ("no valid tensor-parallel width", ("tensor-parallel width",)),
    ("too few devices", ("devices",)),
    ("power budget", ("power budget",)),
)


def infeasible_cause(reason) -> str:
    """The kind of an infeasible row's ``reason``: "memory per device", "too few
    microbatches", "no layer schedule", "no valid tensor-parallel width", "too few
    devices", or the reason itself."""
    text = str(reason or "infeasible")
    for cause, words in _CAUSES:
        if any(w in text for w in words):
            return cause
    return text


def why_infeasible(table, model_name) -> str:
    """Why ``model_name`` has no feasible point in ``table``: the most common cause over
    its rows, how many rows it stopped, and one of their reasons as an example."""
    sel = (table["model"].astype(str) == model_name) & ~np.asarray(table["feasible"], dtype=bool)
    reasons = [str(r or "infeasible") for r in np.asarray(table["reason"])[sel]]
    if not reasons:
        return "no point was evaluated"
    counts = Counter(infeasible_cause(r) for r in reasons)
    examples = {}
    for r in reasons:
        examples.setdefault(infeasible_cause(r), r)
    return why_text(counts, examples)


def why_text(counts, examples) -> str:
    """:func:`why_infeasible`'s sentence from the count of each cause (in order of first
    occurrence) and each cause's first reason."""
    if not counts:
        return "no point was evaluated"
    cause, n = counts.most_common(1)[0]
    example = examples[cause]
    total = sum(counts.values())
    text = f"{cause} in {n:,} of {total:,} points"
    if example != cause:
        text += f" (e.g. {example})"
    if cause == "memory per device":
        text += ("; more HBM, recomputation, a smaller microbatch, a shorter sequence or more "
                 "devices may fit")
    return text


def load_result(path) -> SearchResult:
    """A SearchResult from a file written by :func:`search` or :meth:`SearchResult.save`
    (a .csv without its .meta.json sidecar has no baselines or metadata)."""
    table, summary = _files.load_table(path)
    names = list(dict.fromkeys(table["model"].astype(str).tolist()))
    parts = {"summary": summary}
    if isinstance(summary, dict):
        parts.update(metadata=summary.get("metadata") or {}, best=summary.get("best") or {},
                     baselines=summary.get("baselines") or {})
    for what, part in parts.items():
        if not isinstance(part, dict):
            # A hand-edited or damaged summary: one sentence, not a bare key or attribute.
            raise _files.DamagedFile(f"{path} is damaged: its {what} must be a JSON object, "
                                     f"got {type(part).__name__}")
    meta = parts["metadata"]
    inputs = meta.get("inputs") or {}
    listed = inputs.get("models") if isinstance(inputs, dict) else None
    if listed is not None and not (isinstance(listed, list)
                                   and all(isinstance(n, str) for n in listed)):
        raise _files.DamagedFile(f"{path} is damaged: its metadata's inputs.models must be a "
                                 f"list of model names")
    names = listed or names
    best = parts["best"] or (choose_best(table, names) if len(table["arch_id"]) else {})
    return SearchResult(table=table, best=best, baselines=parts["baselines"], metadata=meta,
                        models=names, stored_pareto=_stored_front(path, parts["summary"]))


def _stored_front(path, summary):
    """The Pareto front a result file recorded, as numpy columns (None when it has none)."""
    front = summary.get("pareto") if isinstance(summary, dict) else None
    if front is None:
        return None
    lengths = {len(v) for v in front.values() if isinstance(v, list)} if isinstance(front, dict) \
        else set()
    if (not isinstance(front, dict) or "arch_id" not in front or len(lengths) != 1
            or not all(isinstance(v, list) for v in front.values())):
        raise _files.DamagedFile(f"{path} is damaged: its pareto must map column names to "
                                 f"lists of equal length")
    out = {}
    for k, v in front.items():
        # json_safe wrote inf/nan as null.
        vals = [math.nan if x is None else x for x in v]
        try:
            out[k] = np.asarray(vals, dtype=np.int64 if k == "arch_id" else None)
        except (TypeError, ValueError, OverflowError):
            raise _files.DamagedFile(f"{path} is damaged: its pareto column {k!r} holds "
                                     f"values of the wrong type") from None
    return out


def format_summary(summary: dict, model_names) -> str:
    """The human-readable summary of a search (``SearchResult.summary()``) the CLI prints."""
    meta, best, base = summary["metadata"], summary["best"], summary["baselines"]
    lines = []
    inp = meta.get("inputs", {})
    seqs = inp.get("seq_len") if isinstance(inp.get("seq_len"), dict) else {}
    if len(set(seqs.values())) == 1:
        seq_txt = f", sequence {next(iter(seqs.values())):,} tokens"
    else:
        seq_txt = "".join(f", {n} sequence {v:,} tokens" for n, v in seqs.items())
    lines.append(f"phaze search: {', '.join(model_names)} on {inp.get('devices')} devices, "
                 f"global batch {inp.get('global_batch')}{seq_txt}: "
                 f"{meta.get('points_evaluated'):,} of "
                 f"{meta.get('points_total'):,} points evaluated ({meta.get('points_pruned'):,} pruned) "
                 f"in {meta.get('sweep_time_s', 0):.1f} s "
                 f"({(meta.get('points_per_s') or 0):,.0f} points/s{_plans_text(meta)})")
    lines.append(cost_model_line(meta))
    if not best.get("feasible"):
        reason = str(best.get("reason") or "infeasible")
        # choose_best's reason already starts with these words.
        lines.append(reason if reason.startswith("no feasible point") else
                     f"no feasible point: {reason}")
        return "\n".join(lines)
    lines.append(f"best architecture (id {best['arch_id']}): {best['num_tc']} TC "
                 f"{best['tc_width']}x{best['tc_depth']}, {best['num_vc']} VC x{best['vc_width']}, "
                 f"{best['buffer_mib']:g} MiB buffer, area {best['area_mm2']:.2f} mm2"
                 + (f", normalised score {best['score']:.4f}" if "score" in best else ""))
    front = summary.get("pareto") or {}
    n_front = len(front.get("arch_id", ()))
    if meta.get("pareto_exact") is False:
        lines.append(f"Pareto front: {n_front} architectures, possibly PARTIAL: --prune best "
                     f"skips points that cannot beat the best, front points of smaller area "
                     f"among them (--prune front keeps the front exact)")
    else:
        lines.append(f"Pareto front: {n_front} architectures (throughput vs area)")
    hdr = (f"{'model':<18} {'t':>3} {'p':>4} {'d':>5} {'mb':>3} {'HBM GiB':>7} "
           f"{_plan.summary_header()} {'samples/s':>11} {'tokens/s':>13} {'MFU':>6} "
           f"{'vs tpuv4':>9} {'vs fixed':>9} "
           f"{'vs block':>9}")
    lines.append(hdr)
    power_lines = []
    for name in model_names:
        r = best["plans"].get(name)
        if r is None:
            continue
        if r.get("feasible") and _finite(r.get("power_w")):
            power_lines.append(power_text(name, r, inp))
        gains = []
        for key in BASELINE_NAMES:
            g = (base.get(key, {}).get("models", {}).get(name) or {}).get("gain")
            gains.append(f"{g:.2f}x" if g else "n/a")
        if not r["feasible"]:
            lines.append(f"{name:<18} infeasible: {r['reason']}")
            continue
        lines.append(f"{name:<18} {r['tensor_parallel']:>3} {r['pipeline_parallel']:>4} "
                     f"{r['data_parallel']:>5} {r['microbatch']:>3} {r['hbm_gib']:>7g} "
                     f"{knob_text(r)} {r['samples_per_s']:>11,.1f} "
                     f"{r['tokens_per_s']:>13,.0f} {_percent(r.get('mfu')):>6} {gains[0]:>9} "
                     f"{gains[1]:>9} {gains[2]:>9}")
    lines.extend(power_lines)
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
                             f"{strategy_text(r)}, MFU {_percent(r.get('mfu'))}, "
                             f"area {r.get('area_mm2', float('nan')):.2f} mm2)")
                if _finite(r.get("power_w")):
                    lines.append("    " + power_text(name, r, inp))
            elif r.get("applicable") is False:
                lines.append(f"  {key:<15} {name:<18} not applicable: {r.get('reason')}")
            else:
                lines.append(f"  {key:<15} {name:<18} infeasible: {r.get('reason')}")
    return "\n".join(lines)


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def power_text(name, r, inputs) -> str:
    """One row's power and cost as the summary prints them (issue 28)."""
    cap = inputs.get("max_power_w")
    clock = r.get("clock_fraction")
    capped = (f", clock {100 * clock:.0f}% under the {cap:g} W budget"
              if _finite(clock) and clock < 1 and _finite(cap) else "")
    return (f"{name}: {r['power_w']:,.0f} W per chip{capped}, "
            f"{r['energy_per_step_j']:.4g} J per step, {r['tokens_per_joule']:,.1f} tokens/J, "
            f"chip ${r['chip_cost_usd']:,.0f}, ${r['usd_per_million_tokens']:.4g} per million "
            f"tokens")


def _plans_text(meta) -> str:
    """", N plans priced (x per point, y/s per core)" of a run whose cost model searches
    plans per point (the calibrated step model), else ""."""
    priced = meta.get("plans_priced") or 0
    evaluated = meta.get("points_evaluated") or 0
    rate = meta.get("plans_per_core_s")
    if not priced or not evaluated or not rate:
        return ""
    return (f"; {priced:,} plans priced, {priced / evaluated:,.1f} per point, "
            f"{rate:,.0f} plans/s per core")


def cost_model_line(meta) -> str:
    """The summary's sentence naming the cost model that priced the points (files written
    before the calibrated model have no ``cost_model``: the study's)."""
    return cost_model(meta.get("cost_model", "study")).line(meta)


def knob_text(r) -> str:
    """A row's recomputation and strategy knobs as the summary's columns
    (``phaze.plan.summary_header``: rc, sp, v, zero, flash, ogr, ep, cp); a row of an
    older file lacks the strategy knobs (the study's) and may hold recompute as a bool."""
    return _plan.summary_row(r)


def strategy_text(r) -> str:
    """A baseline row's recomputation and strategy knobs, as words."""
    return _plan.summary_phrases(r)


def _percent(fraction) -> str:
    """A fraction as a percentage with one decimal ('n/a' when not recorded)."""
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        return "n/a"
    return f"{100 * value:.1f}%" if math.isfinite(value) else "n/a"


def pruned_min_area(table, archs, ids, points_per_arch, counts=None):
    """The least area (mm²) of an architecture of the space (rows ``archs``, ids ``ids``)
    not every one of whose ``points_per_arch`` points has a row in ``table`` (some were
    pruned), or None when none was pruned: what :meth:`SearchResult.pareto` needs to keep
    only points of the exhaustive front after ``--prune best``."""
    from ..arch import area_mm2

    ev, counts = (np.unique(np.asarray(table["arch_id"], dtype=np.int64), return_counts=True)
                  if counts is None else counts)
    full = set(ev[counts >= points_per_arch].tolist())
    mask = np.array([int(i) not in full for i in ids], dtype=bool)
    return float(area_mm2(archs[mask]).min()) if mask.any() else None

