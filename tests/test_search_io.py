"""phaze.search: result files, resume after interruption, executors (pool, Dask), CLI."""
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from phaze import arch, cli, models, search
from phaze.search import _chunk
from phaze.search import _executors as ex
from phaze.search import _files
from phaze.search._table import COLUMN_NAMES, take

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
SMALL = dict(study=True, devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(0.0005, 0.002),
             recompute=(False, True), tensor_parallel=(1, 2))


@pytest.fixture(scope="module")
def rows():
    return arch.ArchSpace.default().configs[::5000]  # 6 architectures


@pytest.fixture(scope="module")
def reference(rows):
    return search.search(TINY, space=rows, executor="serial", progress=False, baselines=False,
                         chunk_archs=2, **SMALL)


def _same_tables(a, b):
    assert set(a) == set(b)
    for name in COLUMN_NAMES:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.shape == y.shape, name
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert [str(v) for v in x] == [str(v) for v in y], name


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".json", ".parquet"])
def test_out_file_round_trip(tmp_path, rows, reference, ext):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"r{ext}"
    r = search.search(TINY, space=rows, executor="serial", progress=False, baselines=False,
                      chunk_archs=2, out=out, **SMALL)
    _same_tables(r.table, reference.table)
    back = search.load_result(out)
    if ext == ".json":
        doc = json.loads(out.read_text())
        assert doc["metadata"]["phaze_version"] and "inputs" in doc["metadata"]
        assert doc["metadata"]["points_per_s"] > 0 and doc["metadata"]["wall_time_s"] > 0
        assert len(doc["top_rows"]) == min(len(r), 50)
        assert back.table["samples_per_s"][0] == pytest.approx(r.best["samples_per_s"])
    else:
        _same_tables(take(back.table, np.argsort(back.table["arch_id"], kind="stable")),
                     take(r.table, np.argsort(r.table["arch_id"], kind="stable")))
    assert back.best["samples_per_s"] == pytest.approx(r.best["samples_per_s"])


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".json", ".parquet"])
def test_save_by_extension(tmp_path, reference, ext):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    path = reference.save(tmp_path / f"s{ext}")
    back = search.load_result(path)
    if ext != ".json":
        _same_tables(back.table, reference.table)
    if ext == ".csv.gz":
        with gzip.open(path, "rt") as f:
            assert f.readline().startswith("model,arch_id")


def test_save_rejects_unknown_extension(tmp_path, reference):
    with pytest.raises(ValueError, match="out must end with"):
        reference.save(tmp_path / "r.xlsx")


class _Interrupt:
    """Raise KeyboardInterrupt on the n-th chunk (as Ctrl-C would)."""

    def __init__(self, n):
        self.n, self.calls = n, 0
        self.real = _chunk.run_chunk

    def __call__(self, task):
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt
        return self.real(task)


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".json"])
def test_interrupt_then_resume(tmp_path, rows, reference, monkeypatch, ext):
    out = tmp_path / f"r{ext}"
    kw = dict(space=rows, executor="serial", progress=False, baselines=False, chunk_archs=2,
              out=out, **SMALL)
    stopper = _Interrupt(3)
    monkeypatch.setattr(_chunk, "run_chunk", stopper)
    with pytest.raises(KeyboardInterrupt):
        search.search(TINY, **kw)
    # What is on disk is readable and holds exactly the two finished chunks.
    rows_file = out if ext != ".json" else Path(str(out) + ".rows.csv.gz")
    table, chunk_ids = _files.read_rows_csv(rows_file)
    assert sorted(set(chunk_ids.tolist())) == [0, 1]
    assert len(table["arch_id"]) == 4 * 8
    # Resume: nothing finished is redone, nothing is lost.
    counter = _Interrupt(10 ** 9)
    monkeypatch.setattr(_chunk, "run_chunk", counter)
    r = search.search(TINY, resume=True, **kw)
    assert counter.calls == 1  # chunk 2 only
    assert r.metadata["resumed_chunks"] == 2
    _same_tables(r.table, reference.table)


def test_resume_after_a_killed_writer(tmp_path, rows, reference):
    """Rows of a chunk that never reached the meta file, and a cut-off line, are dropped."""
    out = tmp_path / "r.csv"
    kw = dict(space=rows, executor="serial", progress=False, baselines=False, chunk_archs=2,
              out=out, **SMALL)
    search.search(TINY, **kw)
    meta_path = Path(str(out) + ".meta.json")
    meta = json.loads(meta_path.read_text())
    del meta["chunks"]["2"]
    meta_path.write_text(json.dumps(meta))
    with open(out, "a") as f:
        f.write("tiny,9,1,2")  # a process killed mid-line
    r = search.search(TINY, resume=True, **kw)
    _same_tables(r.table, reference.table)
    table, chunk_ids = _files.read_rows_csv(out)
    assert len(table["arch_id"]) == len(reference)


def test_resume_refuses_other_inputs(tmp_path, rows):
    out = tmp_path / "r.csv"
    kw = dict(space=rows, executor="serial", progress=False, baselines=False, chunk_archs=2,
              out=out)
    search.search(TINY, **kw, **SMALL)
    other = dict(SMALL, devices=8)
    with pytest.raises(ValueError, match="different inputs"):
        search.search(TINY, resume=True, **kw, **other)


# --------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------
def test_process_pool_matches_serial(rows, reference):
    r = search.search(TINY, space=rows, executor="process", workers=2, progress=False,
                      baselines=False, chunk_archs=2, **SMALL)
    _same_tables(r.table, reference.table)


def _die_once(task):
    """Stand-in chunk function: the worker of chunk 1 dies the first time it runs."""
    marker = Path(task["marker"])
    if task["chunk_id"] == 1 and not marker.exists():
        marker.write_text("died")
        os._exit(1)
    return {"chunk_id": task["chunk_id"], "pid": os.getpid()}


def test_dead_worker_chunk_is_retried(tmp_path):
    got = []
    ex.run_process_pool(_die_once, lambda cid: {"chunk_id": cid, "marker": str(tmp_path / "m")},
                        range(4), got.append, workers=2)
    assert sorted(r["chunk_id"] for r in got) == [0, 1, 2, 3]
    assert (tmp_path / "m").exists()


def _always_fail(task):
    raise RuntimeError("broken chunk")


def test_chunk_failing_every_time_is_reported():
    with pytest.raises(ex.ChunkFailed, match="chunk 0"):
        ex.run_process_pool(_always_fail, lambda cid: {"chunk_id": cid}, [0], lambda r: None,
                            workers=1, retries=1)


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    yield cluster
    cluster.close()


def test_dask_matches_local_and_retries_dead_workers(dask_cluster, rows, reference, tmp_path):
    r = search.search(TINY, space=rows, address=dask_cluster.scheduler_address, progress=False,
                      baselines=False, chunk_archs=2, **SMALL)
    _same_tables(r.table, reference.table)
    got = []
    ex.run_dask(_die_once, lambda cid: {"chunk_id": cid, "marker": str(tmp_path / "m")},
                range(4), got.append, address=dask_cluster.scheduler_address)
    assert sorted(x["chunk_id"] for x in got) == [0, 1, 2, 3]


def test_dask_address_errors():
    pytest.importorskip("distributed")
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        search.search(TINY, space="tpuv4", address="localhost:1", progress=False, **SMALL)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------
def test_cli_search_prints_summary_and_writes(tmp_path, capsys):
    out = tmp_path / "r.csv"
    rc = cli.main(["search", "--model", "opt-350m", "--devices", "16", "--global-batch", "32",
                   "--microbatch", "1,2", "--hbm-gib", "32", "--recompute", "off", "--tp", "1,2",
                   "--space-every", "3000", "--serial", "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "best architecture" in text and "samples/s" in text and "vs tpuv4" in text
    assert "tpuv4_fixed" in text and "block_optimal" in text
    assert out.exists()
    png = tmp_path / "p.png"
    pytest.importorskip("matplotlib")
    assert cli.main(["plot", str(out), "-o", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_cli_evaluate(capsys):
    rc = cli.main(["evaluate", "--model", "gpt3-175b", "--arch", "tpuv4", "--tp", "4", "--pp", "32",
                   "--dp", "8", "--microbatch", "1", "--recompute", "--hbm-gib", "80"])
    text = capsys.readouterr().out
    assert rc == 0 and "stage" in text
    assert "time per batch" in text or "infeasible" in text


@pytest.mark.parametrize("argv, needle", [
    (["search", "--model", "no-such-model"], "unknown model"),
    (["search", "--model", "opt-350m", "--devices", "0"], "devices"),
    (["search", "--model", "opt-350m", "--microbatch", "3"], "microbatch"),
    (["search"], "--model"),
    (["evaluate", "--model", "gpt3-175b", "--tp", "5", "--pp", "1", "--dp", "1"], "tensor_parallel"),
    (["plot", "missing.csv"], "does not exist"),
])
def test_cli_bad_input_is_one_line(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_progress_on_stderr(rows, capsys):
    search.search(TINY, space=rows[:2], executor="serial", progress=True, baselines=False,
                  chunk_archs=1, **SMALL)
    err = capsys.readouterr().err
    assert "points/s" in err and "best" in err and err.endswith("\n")


def test_cli_search_hf_config_and_several_models(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                               "vocab_size": 512, "n_positions": 64}))
    rc = cli.main(["search", "--hf-config", str(cfg), "--model", "opt-350m", "--devices", "8",
                   "--global-batch", "16", "--microbatch", "1", "--hbm-gib", "32",
                   "--recompute", "off", "--tp", "1", "--space-every", "6000", "--serial",
                   "--no-baselines", "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "normalised score" in text and "opt-350m" in text
