"""phaze search: small output defects of issue 16 (--tp no model can use, fixed baselines of
non-zoo models, the infeasible summary line)."""
import numpy as np
import pytest

from phaze import arch, cli, models, search
from phaze.search import _chunk

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
KNOBS = dict(study=True, devices=4, global_batch=8, microbatch=(1,), hbm_gib=(1.0,), recompute=(False,),
             tensor_parallel=(1,), executor="serial", progress=False)


@pytest.fixture
def no_work(monkeypatch):
    def fail(task):
        raise AssertionError("a chunk ran")
    monkeypatch.setattr(_chunk, "run_chunk", fail)


def test_cli_tp_no_model_width_is_one_sentence_before_work(capsys, no_work):
    rc = cli.main(["search", "--model", "gpt2-xl", "--tp", "3", "--serial", "--no-progress"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2 and captured.out == ""
    assert err.startswith("phaze search: error: --tp:") and "\n" not in err
    assert "gpt2-xl" in err and "allowed widths: 1, 5, 25" in err


def test_python_tensor_parallel_no_model_width_fails_before_work(no_work):
    with pytest.raises(ValueError, match=r"tensor_parallel: no width in 3 divides .* "
                                         r"allowed widths: 1, 2, 4"):
        search.search(TINY, space="tpuv4", **dict(KNOBS, tensor_parallel=(3,)))


def test_fixed_baseline_of_a_non_zoo_model_is_not_applicable():
    r = search.search(TINY, space=arch.ArchSpace.default().configs[[100]], **KNOBS)
    row = r.baselines["tpuv4_fixed"]["models"]["tiny"]
    assert row["applicable"] is False and "only for" in row["reason"]
    line = [ln for ln in r.format_summary().splitlines() if "tpuv4_fixed" in ln][0]
    assert "not applicable" in line and "infeasible" not in line


def test_infeasible_summary_says_it_once():
    r = search.search(TINY, space=arch.ArchSpace.default().configs[[100]], baselines=False,
                      **dict(KNOBS, hbm_gib=(1e-9,)))
    text = r.format_summary()
    assert not r.best["feasible"]
    assert text.count("no feasible point") == 1
    assert np.all(~r.table["feasible"])
