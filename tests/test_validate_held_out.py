"""The held-out runs the project found (``phaze/data/held_out_runs.json``) in ``phaze validate``:
MaxText's TPU v5p and v6e runs of its model tiering page, each a row (modelled, or with its
reason), their published seconds computed by hand from the page's tokens/s/device."""
import pytest

from phaze import step, validate

#: (row name, per-device batch, sequence, tokens/s/device) as the tiering page prints them.
_PAGE = (
    ("maxtext/tpu-v5p/llama2-70b/512chips-fsdp512-b4-s4096", 4, 4096, 692),
    ("maxtext/tpu-v6e/llama3.1-8b/256chips-fsdp256-b4-s8192", 4, 8192, 7207),
    ("maxtext/tpu-v6e/llama3.1-70b/256chips-fsdp256-b5-s8192", 5, 8192, 960),
    ("maxtext/tpu-v6e/llama2-70b/256chips-fsdp256-b4-s4096-remat-full", 4, 4096, 900),
)


@pytest.fixture(scope="module")
def report():
    return validate.run()


def _rows(report):
    return {r["name"]: r for r in report.rows if r["table"] == "maxtext_tiering"}


def test_each_run_is_a_row_with_the_pages_step_time(report):
    rows = _rows(report)
    assert sorted(rows) == sorted(name for name, *_ in _PAGE)
    for name, b, seq, tps in _PAGE:
        r = rows[name]
        assert r["published_s"] == pytest.approx(b * seq / tps, rel=1e-6)
        assert r["held_out"] and r["trainer"] == "maxtext"
        assert r["config"]["zero_stage"] == 3 and r["config"]["d"] == r["config"]["gpus"]
        assert r["config"]["global_batch"] == b * r["config"]["gpus"]


def test_only_the_full_remat_run_is_modelled_and_the_others_say_why(report):
    rows = _rows(report)
    full = rows["maxtext/tpu-v6e/llama2-70b/256chips-fsdp256-b4-s4096-remat-full"]
    assert full["reason"] == "" and full["error"] is not None
    direct = step.training_step(
        "llama2-70b", "tpu-v6e", tensor_parallel=1, pipeline_parallel=1, data_parallel=256,
        microbatch=4, global_batch=1024, zero_stage=3, flash_attention=True,
        overlap_param_gather=True, overlap_grad_reduce=True, recompute="full",
        master_weights="params")   # MaxText's fp32 parameters (validate's trainer default)
    assert full["predicted_s"] == pytest.approx(direct.time_s, rel=1e-12)
    assert full["error"] == pytest.approx(100 * (direct.time_s / (4 * 4096 / 900) - 1))
    for name, r in rows.items():
        if r is full:
            continue
        assert r["predicted_s"] is None and r["error"] is None
        assert r["reason"].startswith("MaxText's rematerialisation policy"), name


def test_the_tpu_families_are_reported(report):
    fam = report.groups["by_family"]
    assert fam["tpu-v6"]["time_rows"] == 3 and fam["tpu-v6"]["time_modelled"] == 1
    assert fam["tpu-v5"]["time_rows"] == 1 and fam["tpu-v5"]["time_modelled"] == 0
    tc = report.groups["by_trainer_chip"]["maxtext/tpu-v6e"]
    assert tc["rows"] == 1
