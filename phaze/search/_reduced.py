"""What a sweep with a result file keeps of its rows (issue 30: constant memory).

:class:`Reduced` is the running state kept instead of the rows: per chunk it folds in
the best row of every (model, architecture) under the throughput ranking and under the
objective's, the best feasible row with a power of every architecture (the power
front's), the top rows, the rows per architecture (the pruned front's limit) and the
causes of infeasibility. Each architecture belongs to one chunk, so the
per-architecture rows of a chunk are final when it ends; everything the summary
derives from the table (best point, Pareto fronts, top rows, why no point is feasible)
is the same derived from these rows (tests/test_stream_sweep.py). :class:`LazyTable`:
the table of such a run, read back from the rows file when first used.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np

from ._files import read_rows_csv
from ._models import RECOMPUTE_MODES
from ._report import infeasible_cause, why_text
from ._table import concat_tables, empty_table, ranking, take

_RC_RANK = {m: i for i, m in enumerate(RECOMPUTE_MODES)}


def _first_per_group(table, order, names) -> np.ndarray:
    """Indices (of ``table``) of the first row in ``order`` of each (model, arch id)."""
    if not order.size:
        return order
    mi = np.array([names.get(str(m), -1) for m in table["model"][order]], dtype=np.int64)
    pairs = np.stack([mi, np.asarray(table["arch_id"])[order]], axis=1)
    _, first = np.unique(pairs, axis=0, return_index=True)
    return order[np.sort(first)]


class Reduced:
    """What a sweep with a result file keeps of its rows (see the module docstring).

    ``held_rows``: rows held now (the per-architecture rows and the top rows), for the
    structural check that memory does not grow with the rows (tests)."""

    def __init__(self, model_names, objective="throughput", top_n=50):
        self.models = list(model_names)
        self.index = {n: i for i, n in enumerate(self.models)}
        self.objective = objective
        self.top_n = int(top_n)
        self.n_rows = 0
        self._tp, self._obj, self._pow, self._counts = [], [], [], []
        self.top = empty_table()
        # model → cause → [count, first key, example reason] (insertion: first in row order)
        self._causes = {n: {} for n in self.models}
        self.max_chunk_rows = 0

    @property
    def held_rows(self) -> int:
        return (sum(len(t["arch_id"]) for t in self._tp + self._obj + self._pow)
                + len(self.top["arch_id"]))

    def add(self, tab) -> None:
        """Fold in one chunk's rows ``tab`` (a table); nothing of ``tab`` is kept but the rows
        named in the module docstring."""
        n = len(tab["arch_id"])
        self.n_rows += n
        self.max_chunk_rows = max(self.max_chunk_rows, n)
        if not n:
            return
        self._tp.append(take(tab, _first_per_group(tab, ranking(tab), self.index)))
        if self.objective != "throughput":
            self._obj.append(take(tab, _first_per_group(tab, ranking(tab, self.objective),
                                                        self.index)))
        sel = ((tab["model"].astype(str) == self.models[0]) & np.asarray(tab["feasible"], bool)
               & np.isfinite(np.asarray(tab["power_w"], dtype=np.float64)))
        if sel.any():
            sub = take(tab, np.flatnonzero(sel))
            self._pow.append(take(sub, _first_per_group(sub, ranking(sub, self.objective),
                                                        self.index)))
        ids, counts = np.unique(np.asarray(tab["arch_id"], dtype=np.int64), return_counts=True)
        self._counts.append((ids, counts))
        both = concat_tables([self.top, tab])
        self.top = take(both, ranking(both, self.objective)[:self.top_n])
        self._add_causes(tab)

    def _add_causes(self, tab) -> None:
        """Count the causes of the chunk's infeasible rows (per model) and keep, per cause,
        the reason of its first row in the file's order (the example the summary gives)."""
        bad = np.flatnonzero(~np.asarray(tab["feasible"], dtype=bool))
        if not bad.size:
            return
        sub = take(tab, bad)
        rc = np.array([_RC_RANK.get(str(v), len(_RC_RANK)) for v in sub["recompute"]])
        order = np.lexsort((rc, sub["hbm_gib"], sub["microbatch"], sub["arch_id"]))
        reasons = np.array([str(r or "infeasible") for r in sub["reason"]], dtype=object)
        uniq, inverse = np.unique(reasons.astype(str), return_inverse=True)
        cause_of = np.array([infeasible_cause(r) for r in uniq.tolist()], dtype=object)[inverse]
        names = sub["model"].astype(str)
        for name in np.unique(names).tolist():
            in_model = order[names[order] == name]
            for cause in np.unique(cause_of[in_model].astype(str)).tolist():
                hits = in_model[cause_of[in_model] == cause]
                i = int(hits[0])  # the first in the file's order
                key = (int(sub["arch_id"][i]), int(sub["microbatch"][i]),
                       float(sub["hbm_gib"][i]), int(rc[i]))
                slot = self._causes.setdefault(name, {}).get(cause)
                if slot is None:
                    self._causes[name][cause] = [int(hits.size), key, str(reasons[i])]
                else:
                    slot[0] += int(hits.size)
                    if key < slot[1]:
                        slot[1], slot[2] = key, str(reasons[i])

    # -- what the summary reads ---------------------------------------------
    def best_rows(self, objective=None) -> dict:
        """The best row of every (model, architecture) under ``objective`` (default: the
        search's; "throughput": the throughput ranking's)."""
        objective = self.objective if objective is None else objective
        parts = self._tp if objective == "throughput" else self._obj
        return concat_tables(parts)

    def power_rows(self) -> dict:
        """Per architecture the first model's best feasible row with a power (the power front's)."""
        return concat_tables(self._pow)

    def top_rows(self, n) -> dict:
        return take(self.top, ranking(self.top, self.objective)[:n])

    def arch_counts(self) -> tuple:
        """(arch ids, rows of each)."""
        if not self._counts:
            return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
        return (np.concatenate([c[0] for c in self._counts]),
                np.concatenate([c[1] for c in self._counts]))

    def why_infeasible(self, model_name) -> str:
        """``_report.why_infeasible`` of the whole table, from the causes folded in."""
        causes = self._causes.get(model_name) or {}
        ordered = sorted(causes.items(), key=lambda kv: kv[1][1])  # first occurrence order
        counts = Counter({c: v[0] for c, v in ordered})
        return why_text(counts, {c: v[2] for c, v in ordered})


class LazyTable(Mapping):
    """A result table read from the sorted rows file only when first used (a sweep with a
    result file does not hold its rows; ``SearchResult.table`` of such a run). A read-only
    mapping (``keys``, ``items``, ``get``, ``in`` come from ``Mapping``)."""

    def __init__(self, rows_path):
        self.rows_path = Path(rows_path)

    @cached_property
    def _table(self) -> dict:
        return read_rows_csv(self.rows_path)[0]

    def __getitem__(self, key):
        return self._table[key]

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)
