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


def test_a_parquet_out_is_written_batch_by_batch_and_equals_the_in_memory_table(tmp_path):
    """issue 30: a sweep with ``out=….parquet`` converts its sorted rows file a row group at
    a time (``_files.save_parquet_rows``), never the whole table; the file reads back to the
    same table as a sweep without a file (and as ``save_parquet`` of it), its digest checked,
    at any batch size (here 4 rows: two row groups)."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from phaze.search import _files

    rows = arch.ArchSpace.default().configs[[100, 9000, 20000]]
    kw = dict(study=True, space=rows, devices=4, global_batch=8, microbatch=(1, 2),
              hbm_gib=(1.0,), recompute=(False,), tensor_parallel=(1, 2), executor="serial",
              progress=False)
    mem = search.search(TINY, **kw)
    out = tmp_path / "r.parquet"
    search.search(TINY, out=out, **kw)
    table, summary = _files.load_table(out)        # checks the phaze_digest
    ref = {name: np.asarray(mem.table[name]) for name, _ in _files.TABLE_COLUMNS}
    assert len(table["arch_id"]) == len(ref["arch_id"]) > 4
    for name, _ in _files.TABLE_COLUMNS:
        np.testing.assert_array_equal(np.asarray(table[name]), ref[name])
    rows_path = out.with_name(out.name + ".rows.csv.gz")
    small = tmp_path / "small.parquet"
    _files.save_parquet_rows(small, rows_path, summary, batch_rows=4)
    assert pq.ParquetFile(small).num_row_groups == -(-len(ref["arch_id"]) // 4) > 1
    again, _ = _files.load_table(small)
    whole = tmp_path / "whole.parquet"
    _files.save_parquet(whole, again, summary)
    assert (pq.read_schema(small).metadata[b"phaze_digest"]
            == pq.read_schema(whole).metadata[b"phaze_digest"])
    for name, _ in _files.TABLE_COLUMNS:
        np.testing.assert_array_equal(np.asarray(again[name]), ref[name])
