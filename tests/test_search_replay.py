"""A run's .meta.json repeats it (issue 29 item 9): the command line, UTC time, phaze
version and commit, every ModelSpec in full, the chip's knobs and efficiency set and the
config paths are recorded, and ``phaze search --from-meta FILE`` re-runs the exhaustive
sweep to the same rows (an --hf-config model and a chip file included)."""
import json
import shutil
from pathlib import Path

import pytest

from phaze import arch, cli, models

HF = Path(__file__).parent / "data" / "hf" / "qwen2-7b.json"


@pytest.fixture()
def recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(HF, tmp_path / "q.json")
    chip = arch.resolve_chip("h200").to_dict()
    chip["name"], chip["clock_ghz"] = "slow-h200", chip["clock_ghz"] * 0.9
    (tmp_path / "chip.json").write_text(json.dumps(chip))
    argv = ["search", "--hf-config", "q.json", "--model", "llama2-7b", "--arch", "chip.json",
            "--devices", "16", "--global-batch", "128", "--seq-len", "2048", "--serial",
            "--no-progress", "--out", "r.csv"]
    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    return tmp_path, argv, first


def test_meta_records_the_run(recorded):
    where, argv, _ = recorded
    md = json.loads((where / "r.csv.meta.json").read_text())["summary"]["metadata"]
    run = md["run"]
    assert run["command"] == ["phaze", *argv]
    assert run["utc"].endswith("+00:00") and run["phaze_version"]
    assert run["git_commit"] is None or len(run["git_commit"]) == 40
    assert run["config_paths"] == ["q.json"] and run["chip_path"] == "chip.json"
    assert run["chip"]["name"] == "slow-h200" and run["chip"] == md["chip"]
    assert isinstance(run["efficiency"], dict) and run["efficiency"]
    specs = {d["name"]: d for d in run["model_specs"]}
    qwen = models.ModelSpec(**specs["Qwen/Qwen2-7B"])
    assert qwen.seq_len == 2048 and qwen.qkv_bias is True
    assert models.ModelSpec(**specs["llama2-7b"]) == models.get("llama2-7b").with_(seq_len=2048)


def test_from_meta_reruns_to_the_same_rows(recorded, capsys):
    where, _, first = recorded
    # the files it read may change or go: the run is in the metadata
    (where / "q.json").unlink()
    (where / "chip.json").write_text("{}")
    assert cli.main(["search", "--from-meta", "r.csv.meta.json", "--serial", "--no-progress",
                     "--out", "r2.csv"]) == 0
    again = capsys.readouterr().out
    assert (where / "r.csv").read_bytes() == (where / "r2.csv").read_bytes()
    assert first.splitlines()[1:-1] == again.splitlines()[1:-1]   # all but timing and path
    run = json.loads((where / "r2.csv.meta.json").read_text())["summary"]["metadata"]["run"]
    assert run["from_meta"] == "r.csv.meta.json"


def test_from_meta_refuses_other_options(recorded, capsys):
    assert cli.main(["search", "--from-meta", "r.csv.meta.json", "--devices", "8"]) == 2
    err = capsys.readouterr().err
    assert "drop --devices" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["search", "--from-meta", "missing.meta.json"]) == 2
    assert "cannot read" in capsys.readouterr().err
