"""phaze.search: SearchResult.save() from Python keeps what the CLI's result file keeps (issue 16)."""
import json

import numpy as np
import pytest

from phaze import arch, models, search

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)


@pytest.fixture(scope="module")
def result():
    rows = arch.ArchSpace.default().configs[[100, 9000, 20000]]
    return search.search(TINY, study=True, space=rows, devices=4, global_batch=8, microbatch=(1, 2),
                         hbm_gib=(1.0,), recompute=(False,), tensor_parallel=(1, 2),
                         executor="serial", progress=False)


@pytest.mark.parametrize("name", ["r.csv", "r.csv.gz", "r.json", "r.parquet"])
def test_save_round_trip_keeps_metadata_and_baselines(result, tmp_path, name):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    path = result.save(tmp_path / name)
    back = search.load_result(path)
    assert back.metadata["inputs"] == json.loads(json.dumps(search.json_safe(
        result.metadata["inputs"])))
    assert back.metadata["points_evaluated"] == result.metadata["points_evaluated"]
    assert set(back.baselines) == set(search.BASELINE_NAMES)
    assert back.baselines["tpuv4_searched"]["models"]["tiny"]["samples_per_s"] == pytest.approx(
        result.baselines["tpuv4_searched"]["models"]["tiny"]["samples_per_s"])
    assert back.best["arch_id"] == result.best["arch_id"]
    np.testing.assert_array_equal(back.pareto()["arch_id"], result.pareto()["arch_id"])
    assert "best architecture" in back.format_summary()


def test_save_matches_the_search_own_file(result, tmp_path):
    rows = arch.ArchSpace.default().configs[[100, 9000, 20000]]
    out = tmp_path / "cli.csv"
    own = search.search(TINY, study=True, space=rows, devices=4, global_batch=8, microbatch=(1, 2),
                        hbm_gib=(1.0,), recompute=(False,), tensor_parallel=(1, 2),
                        executor="serial", progress=False, out=out)
    saved = search.load_result(own.save(tmp_path / "py.csv"))
    written = search.load_result(out)
    assert set(saved.metadata) == set(written.metadata)
    assert saved.metadata["inputs"] == written.metadata["inputs"]
    assert saved.baselines == written.baselines
