"""Fault injection (issue 17): nothing lost, nothing mixed, no tracebacks.

Result files checked against their journal on resume, one writer per file (the
lock), no truncation without --force, workers that die with their parent, Ctrl-C
that keeps finished chunks, OS errors and damaged files as one sentence, and the
same rows file whatever the number of workers. Small spaces only: CI is busy.
"""
import errno
import math
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from phaze import arch, cli, models, search
from phaze.search import _executors as ex
from phaze.search import _files
from phaze.search._table import COLUMN_NAMES

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
SMALL = dict(study=True, devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(0.0005, 0.002),
             recompute=(False, True), tensor_parallel=(1, 2))
ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


@pytest.fixture(scope="module")
def rows():
    return arch.ArchSpace.default().configs[::5000]  # 6 architectures


@pytest.fixture(scope="module")
def reference(rows):
    return search.search(TINY, space=rows, executor="serial", progress=False, baselines=False,
                         chunk_archs=2, **SMALL)


def _kw(rows, out, **extra):
    return dict(space=rows, executor="serial", progress=False, baselines=False, chunk_archs=2,
                out=out, **SMALL, **extra)


def _same(a, b):
    for name in COLUMN_NAMES:
        assert [str(v) for v in np.asarray(a[name])] == [str(v) for v in np.asarray(b[name])], name


def _one_sentence(text):
    """stderr of a failed CLI run: one line, no traceback."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# ---------------------------------------------------------------------------
# 1. --resume checks the rows against the journal
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "missing", "duplicate", "header-only"])
@pytest.mark.parametrize("ext", [".csv", ".csv.gz"])
def test_resume_recomputes_chunks_whose_rows_are_gone(tmp_path, rows, reference, capsys, damage,
                                                      ext):
    out = tmp_path / f"r{ext}"
    search.search(TINY, **_kw(rows, out))
    data = out.read_bytes()
    if damage == "truncate":
        out.write_bytes(data[: len(data) // 2])
    elif damage == "missing":
        out.unlink()
    elif damage == "duplicate":
        table, chunk_ids = _files.read_rows_csv(out)
        keep = chunk_ids == 1
        extra = _files.table_csv({k: v[keep] for k, v in table.items()}, header=False,
                                 extra={"chunk": 1}).encode()
        out.write_bytes(data + (gzip.compress(extra) if ext == ".csv.gz" else extra))
    else:  # the header alone; the journal still lists every chunk
        head = (",".join(COLUMN_NAMES) + ",chunk\n").encode()
        out.write_bytes(gzip.compress(head) if ext == ".csv.gz" else head)
    capsys.readouterr()
    r = search.search(TINY, resume=True, **_kw(rows, out))
    err = capsys.readouterr().err
    assert "computed again" in err and "chunks listed" in err
    _same(r.table, reference.table)
    assert r.metadata["points_evaluated"] == len(reference)
    back = search.load_result(out)
    assert len(back) == len(reference)


def test_resume_with_a_damaged_journal_is_one_sentence(tmp_path, rows):
    out = tmp_path / "r.csv"
    search.search(TINY, **_kw(rows, out))
    meta = Path(str(out) + ".meta.json")
    doc = json.loads(meta.read_text())
    doc["chunks"] = ["not", "a", "mapping"]
    meta.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="damaged"):
        search.search(TINY, resume=True, **_kw(rows, out))
    meta.write_text("[" * 100_000)  # deep nesting: RecursionError inside json
    with pytest.raises(ValueError, match="unreadable"):
        search.search(TINY, resume=True, **_kw(rows, out))


def test_resume_without_journal_refuses_to_guess(tmp_path, rows):
    out = tmp_path / "r.csv"
    search.search(TINY, **_kw(rows, out))
    Path(str(out) + ".meta.json").unlink()
    before = out.read_bytes()
    with pytest.raises(ValueError, match="cannot be checked"):
        search.search(TINY, resume=True, **_kw(rows, out))
    assert out.read_bytes() == before


# ---------------------------------------------------------------------------
# 2./3. one writer per file; no truncation without --force
# ---------------------------------------------------------------------------
def test_second_writer_is_refused_even_with_force(tmp_path, rows):
    out = tmp_path / "r.csv"
    holder = _files.OutLock(out)
    holder.acquire()  # another search writing out (a separate open file: flock conflicts)
    try:
        for extra in (dict(force=True), dict(resume=True), {}):
            with pytest.raises(ValueError, match="being written by another phaze search"):
                search.search(TINY, **_kw(rows, out, **extra))
        assert not out.exists()
    finally:
        holder.release()
    search.search(TINY, **_kw(rows, out))  # free again
    assert not Path(str(out) + ".lock").exists()


def test_second_writer_in_another_process_is_refused(tmp_path, rows):
    out = tmp_path / "r.csv"
    code = ("import sys, time; from phaze.search import _files; "
            "lock = _files.OutLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=rf"process {proc.pid}"):
            search.search(TINY, **_kw(rows, out, force=True))
    finally:
        proc.kill()
        proc.wait()
    search.search(TINY, **_kw(rows, out, force=True))  # a killed holder leaves no lock behind


def test_cli_second_writer_is_one_sentence(tmp_path, capsys):
    out = tmp_path / "r.csv"
    holder = _files.OutLock(out)
    holder.acquire()
    try:
        rc = cli.main(["search", "--model", "bert-large", "--devices", "8", "--space-every",
                       "5000", "--serial", "--no-baselines", "--out", str(out), "--force"])
    finally:
        holder.release()
    assert rc == 2
    assert "being written by another phaze search" in _one_sentence(capsys.readouterr().err)


def test_existing_file_is_not_truncated_without_force(tmp_path, rows, reference):
    out = tmp_path / "r.csv"
    out.write_text("precious\n")
    with pytest.raises(ValueError, match="already exists"):
        search.search(TINY, **_kw(rows, out))
    assert out.read_text() == "precious\n"
    r = search.search(TINY, **_kw(rows, out, force=True))
    _same(r.table, reference.table)


# ---------------------------------------------------------------------------
# 4. workers die with their parent; Ctrl-C is prompt and keeps finished chunks
# ---------------------------------------------------------------------------
def _alive(pid):
    """True while ``pid`` runs (a zombie no init reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent(tmp_path, sig):
    code = ("import time; from phaze.search import _executors as ex\n"
            "ex.run_process_pool(time.sleep, lambda c: 120, range(4), print, workers=2)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        children = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                text = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text()
            except OSError:
                text = ""
            kids = [int(x) for x in text.split()]
            # the workers and the resource tracker, once the pool has started
            if len(kids) >= 2:
                time.sleep(3)  # let the workers finish their start-up (initializer)
                children = [int(x) for x in
                            Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text()
                            .split()]
                break
            time.sleep(0.2)
        assert children, "the pool never started"
        os.kill(parent.pid, sig)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in children):
            time.sleep(0.1)
        assert not [p for p in children if _alive(p)]
    finally:
        if parent.poll() is None:
            parent.kill()


def _fast_or_slow(cid):
    """Chunk 0 returns at once, the others take five minutes (stand-in chunk function)."""
    if cid != 0:
        time.sleep(300)
    return cid


def test_ctrl_c_is_prompt_and_keeps_finished_chunks():
    """Ctrl-C after the first chunk's result: the pool stops within seconds (not the
    minutes the slow chunks take) and the finished chunk was handed over. Timed from the
    signal, so a busy machine that starts its workers slowly does not fail it."""
    got, sent = [], []
    first = threading.Event()

    def on_result(r):
        got.append(r)
        first.set()

    def interrupt():
        if first.wait(240):
            time.sleep(0.3)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        ex.run_process_pool(_fast_or_slow, lambda c: c, range(3), on_result, workers=2)
    assert sent and time.monotonic() - sent[0] < 30  # not the minutes the slow chunks take
    assert got == [0]


def test_ctrl_c_writes_chunks_that_finished_meanwhile(monkeypatch):
    """Chunks whose result arrived while the parent was busy are handed over before exit."""
    got = []

    def on_result(r):
        got.append(r)
        if len(got) == 1:
            time.sleep(2)  # both other chunks finish meanwhile
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ex.run_process_pool(abs, lambda c: c, range(3), on_result, workers=3, per_worker=1)
    assert sorted(got) == [0, 1, 2]


# ---------------------------------------------------------------------------
# 5. OS errors: one sentence, non-zero exit, the finished chunks kept
# ---------------------------------------------------------------------------
def test_full_disk_after_a_chunk_keeps_the_others(tmp_path, rows, reference, monkeypatch, capsys):
    out = tmp_path / "r.csv"
    real = _files.Journal._append_bytes
    calls = []

    def full(self, data):
        calls.append(1)
        if len(calls) == 2:
            real(self, data[: len(data) // 3])  # part of the chunk reached the disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, data)

    monkeypatch.setattr(_files.Journal, "_append_bytes", full)
    with pytest.raises(OSError, match="cannot write chunk 1") as info:
        search.search(TINY, **_kw(rows, out))
    assert info.value.errno == errno.ENOSPC
    assert not Path(str(out) + ".lock").exists()
    monkeypatch.setattr(_files.Journal, "_append_bytes", real)
    r = search.search(TINY, resume=True, **_kw(rows, out))
    assert r.metadata["resumed_chunks"] == 1
    _same(r.table, reference.table)

    calls[:] = [1]  # the next chunk (the first of this one-chunk run) meets the full disk
    monkeypatch.setattr(_files.Journal, "_append_bytes", full)
    tiny_cfg = tmp_path / "config.json"  # a tiny model: quick even without the JIT
    tiny_cfg.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                                    "vocab_size": 512, "n_positions": 64}))
    rc = cli.main(["search", "--hf-config", str(tiny_cfg), "--devices", "4", "--global-batch", "8",
                   "--microbatch", "1", "--hbm-gib", "0.002", "--tp", "1", "--space-every",
                   "5000", "--serial", "--no-baselines", "--out", str(tmp_path / "c.csv")])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "No space left on device" in line and "--resume" in line


@pytest.mark.skipif(ROOT, reason="root ignores file permissions")
def test_read_only_out_folder(tmp_path, rows, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="out: cannot create the lock file"):
            search.search(TINY, **_kw(rows, ro / "r.csv"))
    finally:
        ro.chmod(0o700)


def test_unwritable_out_is_one_sentence(tmp_path, monkeypatch, capsys):
    """A read-only file system, simulated (root would ignore permissions)."""
    real_open = os.open

    def read_only(path, flags, *a, **k):
        if str(path).startswith(str(tmp_path)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(_files.os, "open", read_only)
    rc = cli.main(["search", "--model", "bert-large", "--devices", "8", "--space-every", "5000",
                   "--serial", "--no-baselines", "--out", str(tmp_path / "r.csv")])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "out: cannot create the lock file" in line and "Read-only" in line


@pytest.fixture
def placement_file(golden):
    return golden / "placement" / "inst_000.json"


def test_place_output_errors_are_one_sentence(tmp_path, placement_file, capsys):
    rc = cli.main(["place", str(placement_file), "-o", str(tmp_path)])  # a folder
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "-o/--out" in line
    rc = cli.main(["place", str(tmp_path)])  # a folder as the problem
    line = _one_sentence(capsys.readouterr().err)
    assert rc != 0 and str(tmp_path) in line


def test_plot_output_error_is_one_sentence(tmp_path, rows, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.csv"
    search.search(TINY, **_kw(rows, out))

    def refuse(self, path, *a, **k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    import matplotlib.figure
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    rc = cli.main(["plot", str(out), "-o", str(tmp_path / "p.png")])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "-o/--out" in line and "Permission denied" in line


# ---------------------------------------------------------------------------
# 6. damaged files are errors, not shorter tables
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("damage, what", [
    ("cut-line", "last line"), ("extra-column", "fields"), ("bad-number", "not a valid"),
])
def test_damaged_csv(tmp_path, reference, damage, what):
    path = reference.save(tmp_path / "r.csv")
    text = path.read_text()
    if damage == "cut-line":
        path.write_text(text[:-7])
    elif damage == "extra-column":
        lines = text.splitlines(keepends=True)
        lines[3] = lines[3].rstrip("\n") + ",surplus\n"
        path.write_text("".join(lines))
    else:
        lines = text.splitlines(keepends=True)
        lines[2] = lines[2].replace(",", ",x", 2)
        path.write_text("".join(lines))
    with pytest.raises(ValueError, match=f"is damaged: .*{what}"):
        search.load_result(path)


@pytest.mark.parametrize("damage, what", [("truncate", "cut off"), ("corrupt", "corrupt")])
def test_damaged_gzip(tmp_path, reference, damage, what):
    path = reference.save(tmp_path / "r.csv.gz")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) - 40])
    else:
        path.write_bytes(data[:20] + bytes(b ^ 0x55 for b in data[20:60]) + data[60:])
    with pytest.raises(ValueError, match=f"is damaged: .*{what}"):
        search.load_result(path)


def test_plot_of_damaged_file_is_one_sentence(tmp_path, reference, capsys):
    path = reference.save(tmp_path / "r.csv.gz")
    path.write_bytes(b"\x1f\x8b not gzip at all")
    rc = cli.main(["plot", str(path), "-o", str(tmp_path / "p.png")])
    assert rc == 2 and "is damaged" in _one_sentence(capsys.readouterr().err)


def test_search_rows_file_checked_against_its_journal(tmp_path, rows, reference):
    out = tmp_path / "r.csv"
    search.search(TINY, **_kw(rows, out))
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-5]))  # whole lines gone: only the journal's counts show it
    with pytest.raises(ValueError, match="is damaged: 1 of the chunks"):
        search.load_result(out)


# ---------------------------------------------------------------------------
# 9. rows files do not depend on the number of workers
# ---------------------------------------------------------------------------
def test_rows_file_identical_for_1_2_3_workers(tmp_path, rows):
    files = []
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}.csv.gz"
        search.search(TINY, space=rows, executor="process", workers=workers, progress=False,
                      baselines=False, chunk_archs=1, out=out, **SMALL)
        files.append(out.read_bytes())
    serial = tmp_path / "s.csv.gz"
    search.search(TINY, **_kw(rows, serial))
    assert files[0] == files[1] == files[2]
    # the same rows whatever the chunk size (the chunk column aside)
    a = search.load_result(serial).table
    b = search.load_result(tmp_path / "w1.csv.gz").table
    _same(a, b)


# ---------------------------------------------------------------------------
# 5. out-of-range numbers at the edge
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [
    ("maxDevices", 2 ** 63), ("maxDevices", 2 ** 63 - 1 + 2 ** 40), ("bandwidth", 10 ** 400),
    ("mbsInBatch", 1e300),
], ids=["devices-2**63", "devices-big", "bandwidth-huge", "mbs-1e300"])
def test_placement_json_huge_numbers(placement_file, field, value):
    from phaze import placement
    doc = json.loads(placement_file.read_text())
    doc[field] = value
    with pytest.raises(ValueError, match=field):   # the key as the file names it
        placement.problem_from_phaze_dict(doc)


def test_placement_json_file_with_huge_or_deep_content(tmp_path, capsys):
    digits = tmp_path / "digits.json"
    digits.write_text('{"maxDevices": ' + "9" * 5000 + "}")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for path, what in ((digits, "too many digits"), (deep, "nested too deeply")):
        rc = cli.main(["place", str(path)])
        assert rc == 2 and what in _one_sentence(capsys.readouterr().err)


def test_solve_rejects_int64_overflow(placement_file):
    from phaze import placement
    problem = placement.load_phaze_json(placement_file)
    with pytest.raises(ValueError, match="devices must be an integer from 1 to"):
        placement.PlacementProblem(**{**{f: getattr(problem, f) for f in (
            "widths", "forward_s", "backward_s", "param_bytes", "activation_bytes",
            "tensor_parallel", "edge_bytes", "memory_bytes", "bandwidth", "microbatches",
            "recompute", "optimizer", "layer_ids")}, "devices": 2 ** 63})


def test_cli_chunk_failing_for_good_is_one_sentence(tmp_path, monkeypatch, capsys):
    def failing(*a, **k):
        raise search.ChunkFailed("chunk 3 failed 4 times; last: RuntimeError: boom")

    monkeypatch.setattr(search, "search", failing)
    rc = cli.main(["search", "--model", "bert-large", "--out", str(tmp_path / "r.csv")])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "chunk 3 failed" in line and "--resume" in line


def test_out_that_is_a_folder_is_one_sentence(tmp_path, capsys):
    folder = tmp_path / "r.csv"
    folder.mkdir()
    rc = cli.main(["search", "--model", "bert-large", "--out", str(folder)])
    assert rc == 2 and "is a folder" in _one_sentence(capsys.readouterr().err)


# ---------------------------------------------------------------------------
# 10. (issue 30) shutdown that always ends
# ---------------------------------------------------------------------------
_STOP_SCRIPT = """
import errno, os, sys, time
from phaze.search import _executors as ex
def on_result(r):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
for attempt in range(int(sys.argv[1])):
    t0 = time.monotonic()
    try:
        # bytes(n): n zero bytes, a 24 MB result that takes a while to send through the pipe
        ex.run_process_pool(bytes, lambda c: 24_000_000, range(8), on_result, workers=2)
    except OSError:
        pass
    print(f"{time.monotonic() - t0:.2f}", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_stop_after_a_write_error_never_hangs():
    """A write error while other workers send their MB-sized results: the pool stops and
    the interpreter exits, every time (concurrent.futures' pool hung in 1 of 4 such stops:
    its manager thread waited for the rest of a message from a killed worker)."""
    attempts = int(os.environ.get("PHAZE_SOAK", "0") and 20) or 4
    proc = subprocess.run([sys.executable, "-c", _STOP_SCRIPT, str(attempts)],
                          capture_output=True, text=True, timeout=60 + 15 * attempts)
    assert proc.returncode == 0, proc.stderr
    seconds = [float(x) for x in proc.stdout.split()]
    assert len(seconds) == attempts and max(seconds) < 20, seconds
    assert "Traceback" not in proc.stderr and "leaked" not in proc.stderr, proc.stderr


def test_full_disk_with_a_pool_stops_its_workers(tmp_path, rows, monkeypatch):
    import multiprocessing
    real = _files.Journal._append_bytes
    calls = []

    def full(self, data):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, data)

    monkeypatch.setattr(_files.Journal, "_append_bytes", full)
    with pytest.raises(OSError, match="cannot write chunk"):
        search.search(TINY, space=rows, executor="process", workers=2, progress=False,
                      baselines=False, chunk_archs=1, out=tmp_path / "r.csv", **SMALL)
    t0 = time.monotonic()
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("phaze-")]
    assert time.monotonic() - t0 < 1


def test_dead_worker_costs_one_failure_only(tmp_path, capsys):
    """A worker that dies with two chunks sent to it: the one it ran failed once, the one
    queued behind it is sent again without a failure."""
    got = []
    ex.run_process_pool(_die_once_first, lambda cid: {"chunk_id": cid, "marker": str(tmp_path / "m")},
                        range(4), got.append, workers=1, per_worker=2)
    assert sorted(r["chunk_id"] for r in got) == [0, 1, 2, 3]
    err = capsys.readouterr().err
    assert err.count("failed") == 1 and "chunk 0 failed (its worker process died" in err


def _die_once_first(task):
    marker = Path(task["marker"])
    if task["chunk_id"] == 0 and not marker.exists():
        marker.write_text("died")
        time.sleep(0.5)  # chunk 1 is queued behind it by now
        os._exit(3)
    return {"chunk_id": task["chunk_id"]}


_TERM_SCRIPT = """
import os, sys, time
from phaze import _config, cli
from phaze.search import _chunk
_config.SEARCH_CHUNK_ARCHS = 1
real = _chunk.run_chunk
def slow(task):
    time.sleep(float(os.environ.get("SLOW_S", "0.7")))
    return real(task)
_chunk.run_chunk = slow
sys.exit(cli.main(sys.argv[1:]))
"""


def _cli_search_args(tmp_path, out):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                               "vocab_size": 512, "n_positions": 64}))
    return ["search", "--hf-config", str(cfg), "--devices", "4", "--global-batch", "8",
            "--microbatch", "1", "--hbm-gib", "0.002", "--tp", "1", "--space-every", "5000",
            "--serial", "--no-baselines", "--study", "--out", str(out)]


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"),
                                             (signal.SIGINT, 130, "interrupted")])
def test_cli_signal_keeps_chunks_in_one_sentence(tmp_path, sig, code, word):
    out = tmp_path / "r.csv"
    args = _cli_search_args(tmp_path, out)
    proc = subprocess.Popen([sys.executable, "-c", _TERM_SCRIPT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    meta = Path(str(out) + ".meta.json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if json.loads(meta.read_text()).get("chunks"):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == code, err
    line = _one_sentence(err)
    assert word in line and "finished chunks are in" in line and "--resume" in line
    # resumed: the same file as a run never interrupted
    env = dict(os.environ, SLOW_S="0")
    whole = tmp_path / "w.csv"
    for more in (args + ["--resume"], _cli_search_args(tmp_path, whole)):
        subprocess.run([sys.executable, "-c", _TERM_SCRIPT, *more], check=True, env=env,
                       capture_output=True, timeout=300)
    assert out.read_bytes() == whole.read_bytes()


def _dask_cli():
    pytest.importorskip("distributed")
    import shutil
    if shutil.which("dask") is None:
        pytest.skip("no dask command to start a scheduler with")


def test_lost_dask_scheduler_ends_the_run_in_one_sentence():
    """kill -9 of the scheduler after the first result: SchedulerLost within the limit,
    the finished chunk handed over, nothing printed by distributed."""
    _dask_cli()
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    address = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheduler = subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port",
                                  str(port), "--no-dashboard"], **quiet)
    worker = subprocess.Popen(["dask", "worker", address, "--nthreads", "1", "--no-dashboard"],
                              **quiet)
    got, killed = [], []

    def on_result(r):
        got.append(r)
        if len(got) == 1:
            scheduler.kill()
            killed.append(time.monotonic())

    try:
        with pytest.raises(ex.SchedulerLost, match="has not answered for .* 1 chunks had"):
            ex.run_dask(time.sleep, lambda c: 0.2 if c == 0 else 5, range(6), on_result,
                        address=address, lost_after_s=5)
        assert time.monotonic() - killed[0] < 30
        assert got == [None]
    finally:
        worker.kill()
        scheduler.kill()
        worker.wait()
        scheduler.wait()


# ---------------------------------------------------------------------------
# 11. (issue 30) arithmetic that cannot overflow into an answer
# ---------------------------------------------------------------------------
def _random_problem(rng, placement):
    from phaze.placement._model import MAX_COUNT
    n_w, n_l = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    widths = np.sort(rng.choice([1, 2, 4, 8, 2 ** 20, 2 ** 40], n_w, replace=False))
    shape = (n_w, n_l)
    edge = [1, 2, 3, 2 ** 31, 2 ** 40, 2 ** 61, MAX_COUNT // n_l - 1, MAX_COUNT // n_l]
    devices = int(rng.choice(edge)) if rng.random() < 0.7 else int(rng.integers(1, 10 ** 6))
    devices = min(devices, MAX_COUNT // n_l)
    mb = int(rng.choice([1, 2, 7, 2 ** 31, 2 ** 62 - 1, MAX_COUNT]))
    return placement.PlacementProblem(
        widths=widths, forward_s=rng.uniform(1e-6, 1e-2, shape),
        backward_s=rng.uniform(1e-6, 2e-2, shape), param_bytes=rng.uniform(0, 1e9, shape),
        activation_bytes=rng.uniform(0, 1e9, shape), tensor_parallel=rng.random(shape) < 0.5,
        edge_bytes=rng.uniform(0, 1e8, (n_w, n_l - 1)), devices=devices,
        memory_bytes=float(rng.choice([1e9, 1e12, 1e300])), bandwidth=float(rng.uniform(1e9, 1e12)),
        microbatches=mb, recompute=bool(rng.random() < 0.5),
        optimizer=str(rng.choice(["sgd", "adam"])))


def test_placement_at_the_limits_never_answers_negative():
    """Problems at the validators' limits (devices, microbatches, devices × layers up to
    2**62): every answer positive and finite, the plan within the devices (microbatches
    near 2**63 gave time_per_batch -4.6e15 and data_parallel -7 before the limits)."""
    from phaze import placement
    rng = np.random.default_rng(30)
    n = 10_000 if os.environ.get("PHAZE_SOAK") else 400
    for _ in range(n):
        problem = _random_problem(rng, placement)
        plan = placement.solve(problem)
        if not plan.feasible:
            continue
        assert math.isfinite(plan.time_per_batch) and plan.time_per_batch > 0
        assert 1 <= plan.data_parallel <= min(problem.devices, problem.microbatches)
        assert plan.tensor_parallel >= 1
        used = plan.data_parallel * sum(a for _, a in plan.stages)
        assert 1 <= used <= problem.devices
        lb = placement.lower_bound_time(problem)
        assert 0 < lb <= plan.time_per_batch * (1 + 1e-9)


@pytest.mark.parametrize("field, value, what", [
    ("microbatches", 2 ** 63 - 1, "microbatches must be an integer from 1 to"),
    ("devices", 2 ** 62, "devices must be an integer from 1 to"),
])
def test_placement_sizes_beyond_the_kernel_are_refused(placement_file, field, value, what):
    from phaze import placement
    p = placement.load_phaze_json(placement_file)
    kw = {f: getattr(p, f) for f in ("widths", "forward_s", "backward_s", "param_bytes",
                                     "activation_bytes", "tensor_parallel", "edge_bytes",
                                     "devices", "memory_bytes", "bandwidth", "microbatches")}
    kw[field] = value
    with pytest.raises(ValueError, match=what):
        placement.PlacementProblem(**kw)
    trusted = placement.PlacementProblem.from_trusted_arrays(**{**kw, field: 0})
    with pytest.raises(ValueError, match=rf"problems\[0\]\.{field} must be an integer from 1"):
        placement.solve(trusted)  # was SIGFPE (microbatches 0) in the kernel


def test_lower_bound_memory_is_bounded():
    """devices = microbatches = 2**31: the bound used to build arrays of 2**31 floats."""
    from phaze import placement
    t0 = time.monotonic()
    lb = placement.time_per_batch_lower_bound([1.0, 2.0], [0.1, 0.2], 1e6, [1e10, 1e10],
                                              2 ** 31, 8, 2 ** 31)
    assert time.monotonic() - t0 < 2 and lb.shape == (2,) and np.all(lb > 0)
    # a valid bound: below the exact minimum over every degree of a small case
    small = placement.time_per_batch_lower_bound([1.0], [0.1], 1e6, [1e10], 10_000, 8, 10_000)
    d = np.arange(1, 10_001, dtype=np.float64)
    c = np.ceil(10_000 / d)
    s = np.minimum(np.floor(10_000 / d), 8)
    exact = (np.maximum(1.0 * (c + s - 1) / s, 0.1 * c) + 4 * (d - 1) * 1e6 / (1e10 * d)).min()
    assert small[0] <= exact * (1 + 1e-12)


@pytest.mark.parametrize("argv, what", [
    (["search", "--model", "bert-large", "--arch", "h100-sxm", "--devices", "2147483648"],
     "devices must be an integer from 1 to 16,777,216"),
    (["evaluate", "--model", "bert-large", "--arch", "h100-sxm", "--tp", "1", "--pp", "1",
      "--dp", "1099511627776", "--global-batch", "1099511627776"],
     "data_parallel must be an integer from 1 to 16,777,216"),
    (["search", "--model", "bert-large", "--arch", "h100-sxm", "--hbm-gib", "1e308"],
     "hbm_gib must be at most"),
    (["evaluate", "--model", "bert-large", "--arch", "h100-sxm", "--tp", "1", "--pp", "1",
      "--dp", "8", "--hbm-gib", "1e308"], "hbm_gib must be at most"),
])
def test_cli_sizes_beyond_the_limits_are_one_sentence(argv, what, capsys):
    t0 = time.monotonic()
    assert cli.main(argv) == 2
    assert what in _one_sentence(capsys.readouterr().err)
    assert time.monotonic() - t0 < 10


def test_search_with_2_31_devices_under_the_limit_is_quick():
    """best_plans enumerated range(1, devices + 1): 2**24 devices now cost the divisors
    of B / b only."""
    t0 = time.monotonic()
    r = search.search("bert-large", arch="h100-sxm", devices=2 ** 24, global_batch=64,
                      microbatch=(1,), executor="serial", progress=False)
    assert time.monotonic() - t0 < 30 and r.best is not None


# ---------------------------------------------------------------------------
# 12. (issue 30) integrity: checksummed chunks, strict gzip, parquet checksum
# ---------------------------------------------------------------------------
def _flip(path, rng):
    data = bytearray(path.read_bytes())
    i = int(rng.integers(len(data)))
    data[i] ^= 1 << int(rng.integers(8))
    path.write_bytes(bytes(data))


def _rows_of(table):
    return sorted(zip(*[[str(v) for v in np.asarray(table[n])] for n in COLUMN_NAMES]))


def _interrupted(tmp_path, rows, name, monkeypatch):
    """A rows file of a sweep stopped by a full disk after two chunks (and its journal)."""
    out = tmp_path / name
    real = _files.Journal._append_bytes
    calls = []

    def full(self, data):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, data)

    monkeypatch.setattr(_files.Journal, "_append_bytes", full)
    with pytest.raises(OSError):
        search.search(TINY, **_kw(rows, out))
    monkeypatch.setattr(_files.Journal, "_append_bytes", real)
    return out


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".parquet"])
@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_bit_flips_are_detected(tmp_path, rows, reference, monkeypatch, ext, state):
    """Random single-bit flips: load_result refuses the file or gives back exactly the rows
    written (0 accepted with changed rows; 25 of 180 were before the checksums)."""
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
        if state == "interrupted":
            pytest.skip("an interrupted .parquet search has only its .rows.csv.gz (tested)")
    rng = np.random.default_rng([len(ext), len(state), 30])
    if state == "finished":
        clean = tmp_path / f"clean{ext}"
        search.search(TINY, **_kw(rows, clean))
        target = clean
    else:
        clean = _interrupted(tmp_path, rows, f"clean{ext}", monkeypatch)
        target = clean
    meta = Path(str(clean) + ".meta.json")
    want = _rows_of(search.load_result(clean).table)
    assert want and (state == "interrupted" or want == _rows_of(reference.table))
    n = 200 if os.environ.get("PHAZE_SOAK") else 25
    work = tmp_path / f"work{ext}"
    accepted_changed = 0
    for _ in range(n):
        work.write_bytes(target.read_bytes())
        Path(str(work) + ".meta.json").write_bytes(meta.read_bytes())
        _flip(work, rng)
        try:
            got = _rows_of(search.load_result(work).table)
        except ValueError:
            continue  # refused (DamagedFile, or not a phaze result)
        accepted_changed += got != want
    assert accepted_changed == 0


@pytest.mark.parametrize("ext", [".csv", ".csv.gz"])
def test_resume_recomputes_flipped_chunks(tmp_path, rows, reference, capsys, ext):
    """--resume after a changed value: the chunk is computed again (it used to be kept, or
    the whole resume gave up on a value that did not parse)."""
    out = tmp_path / f"r{ext}"
    search.search(TINY, **_kw(rows, out))
    rng = np.random.default_rng(7)
    data = out.read_bytes()
    for trial in range(6):
        if ext == ".csv":
            text = data.decode()
            lines = text.splitlines(keepends=True)
            k = int(rng.integers(1, len(lines)))
            digits = [i for i, ch in enumerate(lines[k]) if ch.isdigit()]
            i = digits[int(rng.integers(len(digits)))]
            ch = "x" if trial % 2 else str((int(lines[k][i]) + 1) % 10)  # unparsable / changed
            lines[k] = lines[k][:i] + ch + lines[k][i + 1:]
            out.write_text("".join(lines))
        else:
            _flip(out, rng)
        capsys.readouterr()
        try:
            r = search.search(TINY, resume=True, **_kw(rows, out, force=False))
        except ValueError as exc:
            assert "--force" in str(exc)
            search.search(TINY, **_kw(rows, out, force=True))
        else:
            _same(r.table, reference.table)
            assert out.read_bytes() == data
        out.write_bytes(data)


def test_renamed_pair_is_still_checked(tmp_path, rows):
    """mv r.csv r2.csv; mv r.csv.meta.json r2.csv.meta.json used to switch the check off."""
    out = tmp_path / "r.csv"
    search.search(TINY, **_kw(rows, out))
    lines = out.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace("e-", "e-1", 1) if "e-" in lines[2] else lines[2].replace(
        "1", "2", 1)
    moved = tmp_path / "r2.csv"
    moved.write_text("".join(lines))
    Path(str(out) + ".meta.json").rename(Path(str(moved) + ".meta.json"))
    out.unlink()
    with pytest.raises(ValueError, match="is damaged: 1 of the chunks .* changed"):
        search.load_result(moved)


def test_gzip_crc_error_is_damage_even_on_resume_reads(tmp_path, reference):
    """A CRC error in a member drops that member's rows instead of keeping them."""
    path = tmp_path / "r.csv.gz"
    text = _files.table_csv(reference.table, header=True, extra={"chunk": 0})
    good = gzip.compress(text.encode(), mtime=0)
    bad = bytearray(good)
    bad[-8] ^= 0xFF  # the member's CRC-32
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="corrupt"):
        _files.read_rows_csv(path)
    table, _ = _files.read_rows_csv(path, strict=False)
    assert len(table["arch_id"]) == 0  # the unverified member is not used


# ---------------------------------------------------------------------------
# 13. (issue 30) the smaller items
# ---------------------------------------------------------------------------
def test_out_through_a_symlink_keeps_the_link(tmp_path, rows, reference):
    target = tmp_path / "real.csv"
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    search.search(TINY, **_kw(rows, link))
    assert link.is_symlink() and target.exists()
    _same(search.load_result(link).table, reference.table)


def test_huge_grid_value_is_one_sentence():
    with pytest.raises(ValueError, match="virtual_stages must hold integers of at most"):
        search.search("bert-large", arch="h100-sxm", devices=8, global_batch=64,
                      executor="serial", progress=False, virtual_stages=2 ** 63)
    with pytest.raises(ValueError, match="hbm_gib must be at most"):
        search.evaluate_point("bert-large", "h100-sxm", 1, 1, 8, 1, False, hbm_gib=1e308)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_start_with_sigint_ignored():
    """A Ctrl-C that reaches a worker still importing printed a KeyboardInterrupt traceback
    (5 of 10 soak SIGINTs): a process started the way the pool starts its workers finds
    SIGINT ignored from its first instruction, and the parent gets its handler back."""
    before = signal.getsignal(signal.SIGINT)
    saved = ex._block_sigint()
    try:
        child = subprocess.run([sys.executable, "-c", "import signal, sys; sys.exit(int("
                                "signal.getsignal(signal.SIGINT) is signal.SIG_IGN))"])
    finally:
        ex._restore_sigmask(saved)
    assert child.returncode == 1
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_full_disk_at_the_end_says_every_chunk_is_done(tmp_path, rows, reference, monkeypatch):
    # issue 30: the sorted rows are merged from chunk spill files; a full disk while
    # spilling them (the end of the run) leaves every chunk kept
    from phaze.search import _spill

    out = tmp_path / "r.csv"
    real = _spill.write_spill

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_spill, "write_spill", full)
    with pytest.raises(OSError, match="every one of the 3 chunks is done .* --resume"):
        search.search(TINY, **_kw(rows, out))
    monkeypatch.setattr(_spill, "write_spill", real)
    r = search.search(TINY, resume=True, **_kw(rows, out))
    assert r.metadata["resumed_chunks"] == 3
    _same(r.table, reference.table)
