"""The small items of issue 29 point 10 (and item 8), each as a user would expect it."""
import io
import json
import os

import pytest

from phaze import cli, search
from phaze.search import _driver

HF = os.path.join(os.path.dirname(__file__), "data", "hf", "llama3-8b.json")


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_infeasible_plan_says_why_before_any_rate(capsys):
    rc, out, _ = _run(capsys, "evaluate", "--model", "llama3-8b", "--arch", "h200", "--tp", "1",
                      "--pp", "1", "--dp", "8", "--global-batch", "64")
    assert rc == 0
    lines = out.splitlines()
    why = next(i for i, ln in enumerate(lines) if ln.startswith("infeasible:"))
    assert not any("samples/s" in ln or "MFU" in ln for ln in lines[:why + 2])


def test_not_modelled_is_said_once(capsys):
    rc, out, _ = _run(capsys, "evaluate", "--model", "llama2-7b", "--arch", "h200", "--tp", "16",
                      "--pp", "1", "--dp", "1", "--global-batch", "64")
    line = next(ln for ln in out.splitlines() if ln.startswith("not modelled"))
    assert line.count("not modelled") == 1


def test_a_misspelt_flag_gets_its_commands_usage_and_the_close_flag(capsys):
    with pytest.raises(SystemExit) as ex:
        cli.main(["search", "--modle", "llama3-8b"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: phaze search") and "did you mean --model?" in err


def test_hf_default_sequence_is_said_and_shown(capsys):
    rc, out, err = _run(capsys, "search", "--hf-config", HF, "--arch", "h200", "--devices", "8",
                        "--global-batch", "64", "--serial", "--no-progress")
    assert rc == 0
    assert "sequence 8,192 tokens" in out.splitlines()[0]   # the summary names it
    header = next(ln for ln in out.splitlines() if ln.startswith("model "))
    assert "MFU" in header and "embedding and head included" in header
    text = " ".join(cli.build_parser()._subparsers._group_actions[0]
                    .choices["search"].format_help().split())
    assert "original_max_position_embeddings" in text and "8,192 for Llama 3.1" in text


def test_interrupted_is_said_once(monkeypatch, capsys, tmp_path):
    def stop(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(search, "search", stop)
    rc, _, err = _run(capsys, "search", "--model", "llama3-8b", "--arch", "h200", "--serial",
                      "--out", str(tmp_path / "r.csv"))
    assert rc == 130 and err.count("phaze search: interrupted") == 1 and "--resume" in err
    assert len(err.strip().splitlines()) == 1


def test_plot_of_a_fixed_system_draws_its_rows(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.json"
    assert cli.main(["search", "--model", "llama2-7b", "--arch", "h200", "--devices", "8",
                     "--global-batch", "64", "--serial", "--no-progress", "--out",
                     str(out)]) == 0
    import matplotlib.pyplot as plt

    drawn = {}
    real = plt.Axes.barh

    def barh(self, y, width, *a, **k):
        drawn["bars"] = list(width)
        return real(self, y, width, *a, **k)

    plt.Axes.barh = barh
    try:
        assert cli.main(["plot", str(out), "-o", str(tmp_path / "p.png")]) == 0
    finally:
        plt.Axes.barh = real
    rows = json.loads(out.read_text())["top_rows"]
    assert len(drawn["bars"]) >= 2 and max(drawn["bars"]) == pytest.approx(
        max(r["samples_per_s"] for r in rows))


class _Tty(io.StringIO):
    def isatty(self):
        return True

    def fileno(self):
        return 2


def test_progress_on_a_zero_width_terminal_is_plain_lines(monkeypatch):
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=None: os.terminal_size((0, 0)))
    stream = _Tty()
    p = _driver._Progress(10, True, stream=stream)
    p.update(10, 0, 1.0)
    p.close()
    assert "100% 10/10 points" in stream.getvalue()


def test_a_unit_spelt_together_suggests_its_field():
    from phaze import arch

    d = arch.resolve_chip("h200").to_dict()
    d["name"], d["hbm_gbps"] = "x", d.pop("hbm_gb_per_s")
    with pytest.raises(ValueError, match=r"'hbm_gbps' \(did you mean 'hbm_gb_per_s'\?\)"):
        arch.chip_from_dict(d)
