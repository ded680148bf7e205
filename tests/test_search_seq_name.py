"""--seq-len and --name (issue 16, item 5): a model's training sequence and a Hugging Face
model's name set from the command line or Python, and an all-infeasible summary that says why."""
import json
from pathlib import Path

import numpy as np
import pytest

from phaze import arch, cli, models, search

HF = Path(__file__).parent / "data" / "hf"
TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
KNOBS = dict(study=True, devices=4, global_batch=8, microbatch=(1,), hbm_gib=(1.0,), recompute=(False,),
             tensor_parallel=(1,), executor="serial", progress=False, baselines=False)
ROW = arch.ArchSpace.default().configs[[100]]


def test_search_seq_len_copies_the_models():
    r = search.search(TINY, space=ROW, seq_len=128, **KNOBS)
    row = r.best
    assert row["feasible"] and row["tokens_per_s"] == pytest.approx(row["samples_per_s"] * 128)
    assert r.metadata["inputs"]["seq_len"] == {"tiny": 128}
    assert "sequence 128 tokens" in r.format_summary().splitlines()[0]
    assert TINY.seq_len == 64   # the caller's spec is untouched


def test_longer_sequence_is_slower():
    short = search.search(TINY, space=ROW, **KNOBS).best["samples_per_s"]
    long = search.search(TINY, space=ROW, seq_len=512, **KNOBS).best["samples_per_s"]
    assert 0 < long < short


def test_seq_len_is_validated_by_name():
    with pytest.raises(ValueError, match="seq_len"):
        search.search(TINY, space=ROW, seq_len=0, **KNOBS)
    with pytest.raises(ValueError, match="seq_len"):
        search.evaluate_point(TINY, "tpuv4", 1, 1, 1, 1, False, seq_len=-5, study=True)


def test_evaluate_point_seq_len():
    r = search.evaluate_point("gpt2-xl", "tpuv4", 1, 4, 2, 1, False, seq_len=512, study=True)
    assert r["seq_len"] == 512 and r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 512)


def test_cli_evaluate_seq_len_and_name(capsys):
    rc = cli.main(["evaluate", "--hf-config", str(HF / "llama3-8b.json"), "--name", "mine",
                   "--seq-len", "2048", "--tp", "8", "--pp", "4", "--dp", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["model"] == "mine" and out["seq_len"] == 2048


def test_cli_name_needs_hf_config(capsys):
    rc = cli.main(["evaluate", "--model", "gpt2-xl", "--name", "x", "--tp", "1", "--pp", "1",
                   "--dp", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--name" in err and "\n" not in err.strip()


def test_cli_two_configs_of_one_model_type(capsys, tmp_path):
    cfg = json.loads((HF / "llama3-8b.json").read_text())
    cfg.pop("_name_or_path", None)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(cfg))
    b.write_text(json.dumps(dict(cfg, num_hidden_layers=8)))
    common = ["search", "--hf-config", str(a), "--hf-config", str(b), "--seq-len", "1024",
              "--space-every", "20000", "--serial", "--no-baselines", "--no-progress",
              "--tp", "8", "--devices", "16", "--global-batch", "16", "--microbatch", "1",
              "--hbm-gib", "80", "--recompute", "on"]
    rc = cli.main(common)
    err = capsys.readouterr().err
    assert rc == 2 and "--name" in err and "both called 'llama'" in err
    rc = cli.main(common + ["--name", "llama-32", "--name", "llama-8"])
    out = capsys.readouterr().out
    assert rc == 0 and "llama-32, llama-8" in out and "sequence 1,024 tokens" in out
    rc = cli.main(common + ["--name", "only-one"])
    assert rc == 2 and "one per --hf-config" in capsys.readouterr().err


def test_all_infeasible_summary_says_the_most_common_cause():
    r = search.search(TINY, space=ROW, **dict(KNOBS, hbm_gib=(1e-9,)))
    assert not r.best["feasible"]
    text = r.format_summary()
    assert "no feasible point: memory per device in 1 of 1 points" in text
    assert "more HBM" in text


def test_all_infeasible_several_models_names_each():
    other = TINY.with_(name="tiny2", n_layers=3)
    r = search.search([TINY, other], space=ROW, **dict(KNOBS, hbm_gib=(1e-9,)))
    text = r.format_summary()
    assert "tiny: memory per device" in text and "tiny2: memory per device" in text
