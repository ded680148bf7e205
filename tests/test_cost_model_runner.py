"""The one chunk runner (phaze.search._chunk.run_chunk) with a cost model plugged in through
the pricing interface (phaze.search._pricing): the table picks the strategy from the
settings, the modules import without a cycle, and the runner's pruning never changes the
best answer or any evaluated point, checked with a synthetic pricing against the
exhaustive run."""
import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import arch, cost, models
from phaze.search import _calibrated, _chunk, _pricing, _study
from phaze.search._settings import ChunkTask, SearchSettings

REPO = Path(__file__).resolve().parent.parent
MODULES = ("_chunk", "_pricing", "_study", "_calibrated")


def _settings(**kw):
    base = dict(models=(models.get("gpt2-xl"),), widths=((1, 2),), devices=64, global_batch=512,
                microbatch=(1, 2), hbm_gib=(None, 32.0), recompute=("none", "full"),
                optimizer="adam", gap=0.01)
    base.update(kw)
    return SearchSettings(**base)


def test_the_table_picks_the_pricing_of_the_settings():
    assert set(_chunk.PRICING) == set(cost.MODELS)
    assert _chunk.pricing_for(_settings(study=True)) is _study.StudyPricing
    assert _chunk.pricing_for(_settings(study=False)) is _calibrated.CalibratedPricing
    for cls in _chunk.PRICING.values():
        assert issubclass(cls, _pricing.Pricing)
        assert not getattr(cls, "__abstractmethods__", None)


def test_runner_modules_import_without_a_cycle():
    """Each module's imports of its siblings, lazy ones included, form no cycle, and no
    pricing module imports the runner."""
    deps = {}
    for name in MODULES:
        tree = ast.parse((REPO / "phaze" / "search" / f"{name}.py").read_text())
        deps[name] = {a.name if node.module is None else node.module.lstrip(".")
                      for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                      and node.level == 1 for a in node.names} & set(MODULES)
    for name in ("_pricing", "_study", "_calibrated"):
        assert "_chunk" not in deps[name], name

    def reach(start, seen):
        for d in deps[start]:
            assert d != seen[0], f"import cycle through {seen + [d]}"
            if d not in seen:
                reach(d, seen + [d])
    for name in MODULES:
        reach(name, [name])


def test_names_other_modules_import_stay_in_chunk():
    for name in ("chain_kind_index", "chain_static", "latencies", "layer_times", "model_graph",
                 "run_chunk", "COLUMNS", "Rows", "STUDY_KNOBS", "stage_summary", "schedule_ok",
                 "throughput_upper_bounds", "block_fwbw_seconds", "survivors", "dominated",
                 "staircase", "kept_architectures", "pruning_state"):
        assert hasattr(_chunk, name), name
    assert _chunk.model_graph is _study.model_graph and _chunk.Rows is _pricing.Rows


class _Synthetic(_pricing.Pricing):
    """A cost model with known answers: each (model, microbatch, group, architecture) point
    has samples/s ``value`` ≤ its bound ``bound`` (per arch: the max over the groups)."""

    groups_per_mb = 2
    batch = 3
    values = None  # (models, microbatches, groups, points, archs), set per test
    slack = None

    @property
    def prune_batch(self):
        return self.batch

    def _ub(self, mi, j):
        return self.values[mi, j] + self.slack[mi, j]

    def arch_bound(self, mi, mb):
        j = self.cfg.microbatch.index(mb)
        return self._ub(mi, j).max(axis=(0, 1))

    def block_seconds(self, mi):
        return np.arange(len(self.archs), dtype=np.float64) + mi

    def groups(self, mi, mb, sub, sub_archs, sub_ids, point_bounds):
        j = self.cfg.microbatch.index(mb)
        for g in range(self.groups_per_mb):
            value = self.values[mi, j, g][:, sub]
            bound = self._ub(mi, j)[g].max(axis=0)[sub] if point_bounds else None

            def price(rows, batch, g=g, value=value):
                for p in range(value.shape[0]):
                    for a in batch:
                        rows.add(model=mi, arch_id=int(sub_ids[a]), microbatch=mb, hbm_gib=float(p),
                                 recompute=str(g), feasible=True, time_per_batch_s=1.0,
                                 samples_per_s=float(value[p, a]), tensor_parallel=1,
                                 data_parallel=1, pipeline_parallel=1, devices_used=1,
                                 stage_layers="", reason="")
                return value[:, batch]
            yield _pricing.PointGroup(bound=bound, points=value.shape[0], price=price)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n_models=st.sampled_from([1, 2]),
       mode=st.sampled_from(["best", "front"]), batch=st.integers(1, 5))
def test_pruning_keeps_the_best_and_every_evaluated_point(seed, n_models, mode, batch):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _check_pruning(monkeypatch, seed, n_models, mode, batch)


def _check_pruning(monkeypatch, seed, n_models, mode, batch):
    rng = np.random.default_rng(seed)
    n_archs = 11
    cfg = _settings(models=(models.get("gpt2-xl"),) * n_models, widths=((1, 2),) * n_models,
                    hbm_gib=(None, 32.0), recompute=("none", "full"))
    points = len(cfg.hbm_gib)
    shape = (n_models, len(cfg.microbatch), _Synthetic.groups_per_mb, points, n_archs)
    archs = arch.ArchSpace.default().configs[rng.choice(1000, n_archs, replace=False)]
    monkeypatch.setattr(_Synthetic, "values", rng.uniform(0, 10, shape).round(1))
    monkeypatch.setattr(_Synthetic, "slack", rng.uniform(0, 3, shape).round(1))
    monkeypatch.setattr(_Synthetic, "batch", batch)
    monkeypatch.setattr(_chunk, "pricing_for", lambda cfg: _Synthetic)
    ids = np.arange(100, 100 + n_archs)

    def run(c):
        res = _chunk.run_chunk(ChunkTask(settings=c, chunk_id=0, archs=archs, arch_ids=ids,
                                         want_block=True))
        cols = res.columns
        got = {(int(m), int(a), int(mb), float(h), str(r)): float(s) for m, a, mb, h, r, s in zip(
            cols["model"], cols["arch_id"], cols["microbatch"], cols["hbm_gib"],
            cols["recompute"], cols["samples_per_s"])}
        assert len(got) == len(cols["model"])  # each point once
        return res, got

    full, every = run(cfg)
    assert full.pruned == 0 and len(every) == n_models * len(cfg.microbatch) * 2 * points * n_archs
    np.testing.assert_array_equal(full.block_fwbw_s[-1], np.arange(n_archs) + n_models - 1.0)
    pruned, some = run(dataclasses.replace(cfg, prune=mode))
    assert pruned.pruned + len(some) == len(every)
    assert all(every[k] == v for k, v in some.items())
    for mi in range(n_models):  # every model's best is evaluated
        best = max(v for k, v in every.items() if k[0] == mi)
        assert max((v for k, v in some.items() if k[0] == mi), default=-1.0) == best
    if mode == "front" and n_models == 1:  # and every architecture on the area front
        area = dict(zip(ids.tolist(), archs["area_mm2"].tolist()))
        per_arch = {a: max(v for k, v in every.items() if k[1] == a) for a in area}
        seen = {a: max((v for k, v in some.items() if k[1] == a), default=-1.0) for a in area}
        for a in area:
            on_front = not any(area[b] <= area[a] and per_arch[b] > per_arch[a] for b in area)
            if on_front:
                assert seen[a] == per_arch[a], a
