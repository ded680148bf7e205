"""Issue 30: the exhaustive sweep in constant memory — rows on disk per chunk, the final
order from a k-way merge of sorted chunk spills, the summary from running per-chunk state."""
import csv
import errno
import gzip
import io
import json
import os
import random

import numpy as np
import pytest

from phaze import arch, models, search
from phaze.search import _files, _reduced, _spill
from phaze.search._table import COLUMN_NAMES

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
TINY2 = models.ModelSpec(name="tiny2", n_layers=4, hidden=64, heads=4, kv_heads=4,
                         ffn_hidden=128, vocab=512, seq_len=32)
SMALL = dict(study=True, devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(0.0005, 0.002),
             recompute=(False, True), tensor_parallel=(1, 2))


@pytest.fixture(scope="module")
def rows():
    return arch.ArchSpace.default().configs[::5000]  # 6 architectures


def _kw(rows, out=None, **extra):
    kw = dict(space=rows, executor="serial", progress=False, baselines=False, chunk_archs=2,
              **SMALL)
    kw.update(extra)
    if out is not None:
        kw["out"] = out
    return kw


def _summary(r):
    """The summary without the run's metadata (times, the run record)."""
    s = r.summary()
    s.pop("metadata")
    return json.dumps(s, default=str, sort_keys=True)


def _expected_bytes(reference, rows, chunk_archs=2):
    """The rows file the sweep must write: the in-memory table (sorted by point, as phaze
    before issue 30 sorted it) with each row's chunk, as ``Journal`` formats it."""
    ids = {int(i): k for k, i in enumerate(search._inputs.space_ids(rows)[0])}
    t = reference.table
    chunk = [ids[int(a)] // chunk_archs for a in t["arch_id"]]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(COLUMN_NAMES) + ["chunk"])
    cols = [_files._column_text(t[name]) for name in COLUMN_NAMES] + [[str(c) for c in chunk]]
    w.writerows(zip(*cols))
    return buf.getvalue().encode()


# -- the k-way merge against a naive sort -------------------------------------------
def _line(model, aid, mb, hbm, rc, cid, tag):
    fields = [""] * len(COLUMN_NAMES)
    pos = {n: i for i, n in enumerate(COLUMN_NAMES)}
    fields[pos["model"]], fields[pos["arch_id"]] = model, str(aid)
    fields[pos["microbatch"]], fields[pos["hbm_gib"]], fields[pos["recompute"]] = \
        str(mb), repr(hbm), rc
    fields[pos["reason"]] = f"why, {tag}"  # a quoted field with a comma
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields + [str(cid)])
    return buf.getvalue()


@pytest.mark.parametrize("gz", [False, True])
def test_merge_of_spills_equals_a_naive_sort(tmp_path, gz):
    names = ["m-b", "m-a", "m-c"]
    index = {n: i for i, n in enumerate(names)}
    header = ",".join(COLUMN_NAMES) + ",chunk\n"
    for seed in range(25):
        rng = random.Random(seed)
        n_chunks, per = rng.randint(1, 7), rng.randint(1, 4)
        models_used = names[:rng.randint(1, 3)]
        ids = list(range(n_chunks * per))
        if rng.random() < 0.5:
            rng.shuffle(ids)  # arch ids that do not grow with the row number
        chunks = []
        for c in range(n_chunks):
            lines = [_line(m, ids[c * per + k], mb, h, rc, c, f"{seed}-{c}-{k}")
                     for m in models_used for k in range(per) for mb in (1, 4)
                     for h in (0.5, 32.0) for rc in rng.sample(["none", "full", "selective"], 2)]
            rng.shuffle(lines)
            chunks.append(lines)
        order = list(range(n_chunks))
        rng.shuffle(order)  # chunks finish in any order
        folder = tmp_path / f"s{seed}{gz}"
        folder.mkdir()
        spills = []
        for seq, c in enumerate(order):
            for (cid, mi), group in _spill.split_lines(chunks[c], index).items():
                name = _spill.spill_name(cid, mi, seq, gz)
                _spill.write_spill(folder, name, group, gz)
                spill = (_spill.line_key(group[0], index), folder / name)
                if seed % 2:  # with its last key: copied whole when nothing overlaps it
                    spill += (_spill.line_key(group[-1], index),)
                spills.append(spill)
        out = folder / "out"
        _spill.merge_spills(spills, out, header, gz, index)
        naive = header + "".join(sorted((ln for ls in chunks for ln in ls),
                                        key=lambda ln: _spill.line_key(ln, index)))
        data = out.read_bytes()
        want = gzip.compress(naive.encode(), mtime=0) if gz else naive.encode()
        assert data == want, seed
        assert not [p for p in folder.iterdir() if p.name != "out"]  # spills consumed
        if ids == sorted(ids):
            assert _spill.MERGE_STATS["max_open"] <= len(models_used) + 1


# -- byte identity of a tiny sweep --------------------------------------------------
@pytest.fixture(scope="module")
def reference(rows):
    return search.search(TINY, **_kw(rows))  # no result file: the table in memory, sorted


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_rows_file_is_the_sorted_table(tmp_path, rows, reference, suffix):
    out = tmp_path / f"r{suffix}"
    r = search.search(TINY, **_kw(rows, out))
    data = out.read_bytes()
    want = _expected_bytes(reference, rows)
    assert (gzip.decompress(data) if suffix.endswith(".gz") else data) == want
    if suffix.endswith(".gz"):
        assert data == gzip.compress(want, mtime=0)  # one gzip stream, as before
    assert isinstance(r.table, _reduced.LazyTable) and len(r) == len(reference)
    assert _summary(r) == _summary(reference)
    assert np.array_equal(r.table["samples_per_s"], reference.table["samples_per_s"])
    assert not (tmp_path / f"r{suffix}.parts").exists()


def test_two_workers_write_the_same_bytes(tmp_path, rows, reference):
    out = tmp_path / "w2.csv"
    search.search(TINY, **_kw(rows, out, executor="process", workers=2))
    assert out.read_bytes() == _expected_bytes(reference, rows)


def test_interrupted_and_resumed_writes_the_same_bytes(tmp_path, rows, reference, monkeypatch):
    out = tmp_path / "i.csv"
    real, calls = _files.Journal._append_bytes, []

    def dies(self, data):
        calls.append(1)
        if len(calls) == 2:
            real(self, data[:len(data) // 2])  # a chunk cut off mid-way
            raise KeyboardInterrupt
        real(self, data)

    monkeypatch.setattr(_files.Journal, "_append_bytes", dies)
    with pytest.raises(KeyboardInterrupt):
        search.search(TINY, **_kw(rows, out))
    monkeypatch.setattr(_files.Journal, "_append_bytes", real)
    r = search.search(TINY, resume=True, **_kw(rows, out))
    assert r.metadata["resumed_chunks"] == 1
    assert out.read_bytes() == _expected_bytes(reference, rows)
    # resuming the finished file rewrites the same bytes
    search.search(TINY, resume=True, **_kw(rows, out))
    assert out.read_bytes() == _expected_bytes(reference, rows)


def test_several_models_summary_and_order(tmp_path, rows):
    ref = search.search([TINY, TINY2], **_kw(rows))
    out = tmp_path / "mm.csv"
    r = search.search([TINY, TINY2], **_kw(rows, out))
    assert out.read_bytes() == _expected_bytes(ref, rows)
    assert _summary(r) == _summary(ref)
    assert json.dumps(r.best, default=str) == json.dumps(ref.best, default=str)
    assert r.format_summary().split("\n")[2:] == ref.format_summary().split("\n")[2:]


# -- memory: what the parent holds --------------------------------------------------
def test_parent_holds_per_arch_rows_and_top_rows_only(tmp_path, rows, monkeypatch):
    seen = []
    real = _reduced.Reduced.add

    def add(self, tab):
        real(self, tab)
        seen.append((self.held_rows, self.n_rows, len(tab["arch_id"])))

    monkeypatch.setattr(_reduced.Reduced, "add", add)
    r = search.search(TINY, **_kw(rows, tmp_path / "m.csv"))
    assert r.reduced is not None and len(seen) == 3
    n_archs, top = len(rows), r.reduced.top_n
    for held, n_rows, _ in seen:
        # at most three best rows per (model, architecture) and the top rows: never the
        # rows themselves (8 points per architecture here)
        assert held <= 3 * n_archs + top
    assert seen[-1][1] == len(r) and seen[-1][0] < seen[-1][1] + top


# -- finishing when the disk is full -------------------------------------------------
def test_full_disk_while_spilling_then_resume(tmp_path, rows, reference, monkeypatch):
    out = tmp_path / "f.csv.gz"
    real, calls = _spill.write_spill, []

    def full(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the last chunk's spill is written, the next one is not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args, **kwargs)

    monkeypatch.setattr(_spill, "write_spill", full)
    with pytest.raises(OSError, match="every one of the 3 chunks is done and kept.*--resume"):
        search.search(TINY, **_kw(rows, out))
    meta = json.loads((tmp_path / "f.csv.gz.meta.json").read_text())
    assert len(meta["spilled"]) == 1 and not meta.get("complete")
    monkeypatch.setattr(_spill, "write_spill", real)
    r = search.search(TINY, resume=True, **_kw(rows, out))
    assert r.metadata["resumed_chunks"] == 3
    assert gzip.decompress(out.read_bytes()) == _expected_bytes(reference, rows)


def test_too_little_free_space_is_refused_before_finishing(tmp_path, rows, monkeypatch):
    monkeypatch.setattr(_spill, "free_bytes", lambda folder: 10)
    out = tmp_path / "n.csv"
    with pytest.raises(OSError, match="every one of the 3 chunks is done and kept.*--resume"):
        search.search(TINY, **_kw(rows, out))
    monkeypatch.undo()
    r = search.search(TINY, resume=True, **_kw(rows, out))
    assert r.metadata["resumed_chunks"] == 3 and r.metadata["points_evaluated"] == len(r)


@pytest.mark.parametrize("model_list", [[TINY], [TINY, TINY2]])
def test_no_feasible_point_says_why_as_before(tmp_path, rows, model_list):
    kw = dict(hbm_gib=(1e-7, 2e-7))  # nothing fits: every row infeasible
    ref = search.search(model_list, **_kw(rows, **kw))
    r = search.search(model_list, **_kw(rows, tmp_path / "x.csv", **kw))
    assert not ref.best["feasible"] and "no feasible point" in ref.best["reason"]
    assert r.best["reason"] == ref.best["reason"]
    assert _summary(r) == _summary(ref)


def test_pruned_sweep_resumes_to_the_same_bytes(tmp_path, rows, monkeypatch):
    whole = tmp_path / "p.csv"
    r0 = search.search(TINY, **_kw(rows, whole, prune="best"))
    out = tmp_path / "q.csv"
    real, calls = _files.Journal._append_bytes, []

    def dies(self, data):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(self, data)

    monkeypatch.setattr(_files.Journal, "_append_bytes", dies)
    with pytest.raises(KeyboardInterrupt):
        search.search(TINY, **_kw(rows, out, prune="best"))
    monkeypatch.setattr(_files.Journal, "_append_bytes", real)
    r = search.search(TINY, resume=True, **_kw(rows, out, prune="best"))
    assert out.read_bytes() == whole.read_bytes()
    assert r.metadata["points_pruned"] == r0.metadata["points_pruned"]
    assert _summary(r) == _summary(r0)
    # every chunk of a finished file is kept on resume, one with no rows too
    again = search.search(TINY, resume=True, **_kw(rows, out, prune="best"))
    assert again.metadata["resumed_chunks"] == 3 and out.read_bytes() == whole.read_bytes()


def test_a_chunk_with_no_rows_is_kept_on_resume(tmp_path):
    out = tmp_path / "z.csv"
    j = _files.Journal(out, "h", resume=False)
    j.append(0, _files.empty_table(), {"evaluated": 0, "pruned": 5})
    j.close()
    j = _files.Journal(out, "h", resume=True)
    assert 0 in j.chunks and list(j.iter_previous()) == []
    j.close()
