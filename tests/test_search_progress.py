"""phaze search's progress display (issue 16, item 5): tqdm with percent, elapsed, ETA and
a rate of evaluated points; plain lines at a bounded rate when stderr is not a terminal."""
import io
import re

import numpy as np

from phaze import arch, cli, models, search
from phaze.search import _driver

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
KNOBS = dict(study=True, devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(1.0,), recompute=(False,),
             tensor_parallel=(1,), executor="serial", baselines=False)
ROWS = arch.ArchSpace.default().configs[::3000][:12]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_with_percent_when_forced_into_a_log(capsys):
    r = search.search(TINY, space=ROWS, progress=True, chunk_archs=1, **KNOBS)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("phaze search")]
    # 12 chunks: at most one line per 10 % (and one at the end), never one per chunk update.
    assert 2 <= len(lines) <= 11
    for ln in lines:
        assert re.search(r"\d+% \d+/\d+ points \[\d\d:\d\d<", ln), ln
        assert "evaluated points/s" in ln
    total = len(ROWS) * 2
    assert lines[-1].split()[2] == "100%" and f"{total}/{total} points" in lines[-1]
    assert r.metadata["points_evaluated"] == total


def test_plain_lines_are_rate_bounded(monkeypatch):
    stream = io.StringIO()
    p = _driver._Progress(1000, True, stream=stream)
    for _ in range(1000):          # 1000 updates, 0.1 % each
        p.update(1, 0, 5.0)
    p.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10       # one per 10 % (the last is the 100 % one)
    assert lines[-1].startswith("phaze search 100% 1000/1000 points")


def test_pruned_points_are_counted_apart_from_the_rate():
    stream = io.StringIO()
    p = _driver._Progress(100, True, stream=stream)
    p.update(10, 90, 1.0)
    p.close()
    line = stream.getvalue().splitlines()[-1]
    assert "100% 100/100 points" in line and "90 pruned" in line
    assert p.evaluated == 10 and p.pruned == 90
    rate = float(re.search(r"([\d,]+) evaluated points/s", line).group(1).replace(",", ""))
    assert rate <= 10 / (p._last_line - p.start) + 1


def test_terminal_gets_tqdm_bar_with_percent_elapsed_eta():
    stream = _Tty()
    p = _driver._Progress(40, True, stream=stream)
    for _ in range(4):
        p.update(10, 0, 2.5)
    p.close()
    out = stream.getvalue()
    assert "\r" in out and "100%" in out and "40/40 points" in out
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", out) and "best 2.5 samples/s" in out


def test_disabled_progress_writes_nothing(capsys):
    search.search(TINY, space=ROWS[:2], progress=False, **KNOBS)
    assert capsys.readouterr().err == ""


def test_cli_progress_into_a_log(capsys):
    rc = cli.main(["search", "--model", "gpt2-xl", "--space-every", "20000", "--serial",
                   "--no-baselines", "--progress", "--tp", "1", "--microbatch", "1",
                   "--hbm-gib", "80", "--recompute", "on"])
    err = capsys.readouterr().err
    assert rc == 0 and "\r" not in err and "100%" in err


def test_nothing_to_do_writes_no_plain_line():
    stream = io.StringIO()
    _driver._Progress(0, True, stream=stream).close()
    assert stream.getvalue() == ""
