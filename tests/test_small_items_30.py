"""Issue 30's small items, each as a user would expect it: an output folder that does not
exist (exit 1, one sentence), a context-parallel width no plan can use (one sentence
naming the field and the limit), a lock file left by a killed run (said, and taken
over), and a chip rate near the float maximum (no overflow warning from the step's
arithmetic)."""
import errno
import subprocess
import sys
import warnings

import numpy as np
import pytest

from phaze import cli
from phaze.arch import resolve_chip
from phaze.search import _files
from phaze.step import _layers

SMALL = ["--model", "bert-large", "--devices", "8", "--global-batch", "64", "--no-baselines",
         "--space-every", "4000", "--serial", "--no-progress"]


def _one_sentence(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_search_out_into_a_missing_folder_exits_1_in_one_sentence(tmp_path, capsys):
    target = tmp_path / "nowhere" / "r.csv"
    rc = cli.main(["search", *SMALL, "--out", str(target)])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1
    assert "does not exist" in line and str(tmp_path / "nowhere") in line
    assert not (tmp_path / "nowhere").exists()


def test_trace_out_into_a_missing_folder_exits_1_in_one_sentence(tmp_path, capsys):
    target = tmp_path / "nowhere" / "t.json"
    rc = cli.main(["trace", "--model", "bert-large", "--tp", "1", "--pp", "1", "--dp", "8",
                   "-o", str(target)])
    line = _one_sentence(capsys.readouterr().err)
    assert rc == 1 and "-o/--out" in line and "[Errno" not in line


def test_a_context_parallel_width_too_large_is_one_sentence(capsys):
    rc = cli.main(["search", *SMALL, "--cp", "1024"])
    line = _one_sentence(capsys.readouterr().err)
    # bert-large: 512 tokens, an encoder (cp whole chunks); 8 devices: at most cp = 8
    assert rc == 2
    assert "context_parallel" in line and "1024" in line and "at most 8" in line


def test_a_context_parallel_grid_with_one_usable_width_runs(capsys):
    rc = cli.main(["search", *SMALL, "--cp", "2,1024"])
    assert rc == 0, capsys.readouterr().err


def test_a_lock_left_by_a_killed_run_is_said_and_taken_over(tmp_path, capsys):
    out = tmp_path / "r.csv"
    pid = _dead_pid()
    (tmp_path / "r.csv.lock").write_text(f"{pid}\n")
    rc = cli.main(["search", *SMALL, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"process {pid}, which is no longer running" in err
    assert out.exists() and not (tmp_path / "r.csv.lock").exists()


def test_without_flock_the_pid_in_the_lock_file_decides(tmp_path, monkeypatch, capsys):
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    path = tmp_path / "r.csv"
    lock_file = tmp_path / "r.csv.lock"
    lock_file.write_text(f"{_dead_pid()}\n")      # a killed run's: taken over
    lock = _files.OutLock(path)
    lock.acquire()
    assert "no longer running" in capsys.readouterr().err
    lock.release()
    lock_file.write_text(f"{subprocess.os.getppid()}\n")   # a live process's: refused
    with pytest.raises(ValueError, match="being written by another phaze search"):
        _files.OutLock(path).acquire()


def test_rates_near_the_float_maximum_overflow_to_inf_without_a_warning():
    row = resolve_chip("h200").row
    archs = np.concatenate([row, row])
    archs["hbm_gb_per_s"][1] = archs["link_gb_per_s"][1] = archs["net_gb_per_s"][1] = 1e300
    eff = _layers.efficiency_rows(None, archs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rp = _layers.row_params(archs, eff)
    for bw, field in (("link_bw", "link"), ("net_bw", "net"), ("hbm_bw", "hbm")):
        # the normal row: (η · GB/s) · 10⁹ exactly as formed before
        assert rp[bw][0] == eff[f"{field}_efficiency"][0] * archs[f"{field}_gb_per_s"][0] * 1e9
        assert rp[bw][1] == np.inf
