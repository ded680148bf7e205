"""phaze.validate and ``phaze validate``: the built-in table, a small FILE, the JSON schema,
rows that need what is not modelled yet, Figure 1 memory."""
import json

import pytest

from phaze import validate
from phaze.cli import main
from phaze.step import _model as _step_model


@pytest.fixture(scope="module")
def builtin():
    return validate.run()


def _table():
    with open(validate.builtin_path(), encoding="utf-8") as fh:
        return json.load(fh)


def _classic(rows):
    """The rows of the runs of 2021–22 (validation.json); the modern runs are checked in
    tests/test_validate_modern.py."""
    names = {r["name"] for r in _table()["rows"]}
    return [r for r in rows if r["name"] in names]


def test_every_row_of_the_builtin_table_is_reported(builtin):
    table = _table()
    assert [r["name"] for r in _classic(builtin.rows)] == [r["name"] for r in table["rows"]]
    assert [r["name"] for r in builtin.rows][:len(table["rows"])] == \
        [r["name"] for r in table["rows"]]
    names = {r["name"] for r in builtin.rows}
    for model in ("megatron-22b", "gpt3-175b", "turing-530b", "megatron-1t"):
        for mode in ("full", "seqsel"):
            assert f"korthikanti2022/table5/{model}/{mode}" in names
        for mode in ("none", "seqsel"):
            for q in ("par_opt", "act"):
                assert f"korthikanti2022/figure1/{model}/{mode}/{q}" in names
    for row in table["rows"]:
        assert row["source"] and row["gpus"] == row["t"] * row["p"] * row["d"]


def test_every_builtin_row_is_modelled(builtin):
    """With the strategy knobs (interleaving, sequence parallelism, selective
    recomputation) every row of the built-in table is modelled with its own configuration."""
    by = {r["name"]: r for r in builtin.rows}
    for r in _classic(builtin.rows):
        pred = r["predicted_s"] if r["kind"] == "time" else r["predicted_gib"]
        assert pred is not None and pred > 0 and r["reason"] == "" and r["error"] is not None
    for model in ("megatron-22b", "gpt3-175b", "turing-530b", "megatron-1t"):
        for mode in ("full", "seqsel"):
            assert by[f"korthikanti2022/table5/{model}/{mode}"]["predicted_s"] > 0
        # seqsel: shorter than full recomputation, as measured (Table 5)
        assert by[f"korthikanti2022/table5/{model}/seqsel"]["predicted_s"] < \
            by[f"korthikanti2022/table5/{model}/full"]["predicted_s"]


def test_builtin_table_within_the_fidelity_targets(builtin):
    """Issue 13's targets on every modelled row of the built-in table (held-out rows
    included): time MAPE <= 10 %, max <= 20 %; memory MAPE <= 5 %; and issue 14's on the
    four Table 5 "seqsel" rows. A regression guard: no parameter is set from these rows.
    Over the runs of 2021–22 (validation.json); the modern runs' errors are reported, not
    bounded (tests/test_validate_modern.py)."""
    classic = [abs(r["error"]) for r in _classic(builtin.rows) if r["kind"] == "time"]
    assert sum(classic) / len(classic) <= 10.0 and max(classic) <= 20.0
    assert builtin.memory_mape <= 5.0
    seqsel = [abs(r["error"]) for r in builtin.rows if r["name"].endswith("/seqsel")
              and "table5" in r["name"]]
    assert len(seqsel) == 4 and sum(seqsel) / 4 <= 10.0 and max(seqsel) <= 20.0


def test_one_layer_against_korthikanti_table4():
    """One 22B layer (t = 8, b = 4, s = 2048, A100) against Korthikanti et al. 2022 Table 4's
    measured forward / backward (ms): baseline 7.7 / 11.9, sequence parallel 7.2 / 11.8,
    and the recomputed attention core (selective minus baseline backward) 1.3 — each
    within 5 % (the core 10 %). Layer-level evidence of the kernels, not an input."""
    import numpy as np
    from phaze import graph, step
    from phaze.step._layers import ATTENTION_CORE
    from phaze.arch import resolve_chip
    chip = resolve_chip("a100-80g")
    spec = validate._model_spec("megatron-22b", _table()["models"])
    for sp, (fwd, bwd) in ((False, (7.7e-3, 11.9e-3)), (True, (7.2e-3, 11.8e-3))):
        blk = graph.build_layers(spec, 4, 8, kernels="megatron", sequence_parallel=sp,
                                 dtype="fp16").layers[1]
        f, fi = _step_model._op_seconds(blk.forward, chip.row, chip.efficiency_set(), 8)
        b, _ = _step_model._op_seconds(blk.backward, chip.row, chip.efficiency_set(), 8)
        assert float(np.sum(f)) == pytest.approx(fwd, rel=0.05)
        assert float(np.sum(b)) == pytest.approx(bwd, rel=0.05)
        if not sp:
            assert sum(f[fi[n]] for n in ATTENTION_CORE) == pytest.approx(1.3e-3, rel=0.10)


def test_errors_and_summaries(builtin):
    time_err, mem_err = [], []
    for r in builtin.rows:
        if r["error"] is None:
            continue
        pk, qk = ("predicted_s", "published_s") if r["kind"] == "time" else ("predicted_gib", "published_gib")
        assert r["error"] == pytest.approx(100 * (r[pk] - r[qk]) / r[qk])
        (time_err if r["kind"] == "time" else mem_err).append(abs(r["error"]))
    assert builtin.time_mape == pytest.approx(sum(time_err) / len(time_err))
    assert builtin.time_max_error == pytest.approx(max(time_err))
    assert builtin.memory_mape == pytest.approx(sum(mem_err) / len(mem_err))
    held = [abs(r["error"]) for r in builtin.rows if r["held_out"] and r["error"] is not None]
    assert builtin.held_out_time_mape == pytest.approx(sum(held) / len(held))


def test_figure1_memory_rows(builtin):
    by = {r["name"]: r for r in builtin.rows}
    for model in ("megatron-22b", "megatron-1t"):
        for q in ("par_opt", "act"):
            r = by[f"korthikanti2022/figure1/{model}/none/{q}"]
            # par_opt: 18 B/param of the layers (phaze counts biases and norms: +0.1 % at most);
            # act: Korthikanti's s·b·h·(10 + 24/t + 5as/(ht)) for L layers in flight, exactly.
            assert abs(r["error"]) < (0.2 if q == "par_opt" else 1e-9)
    # seqsel (s·b·h·34/t per layer) and the interleaved rows (first stage: L·(1 + (p − 1)/(p·v))
    # layers in flight): the paper's memory model exactly.
    for model in ("megatron-22b", "gpt3-175b", "turing-530b", "megatron-1t"):
        for mode in ("none", "seqsel"):
            assert abs(by[f"korthikanti2022/figure1/{model}/{mode}/act"]["error"]) < 1e-9
            assert abs(by[f"korthikanti2022/figure1/{model}/{mode}/par_opt"]["error"]) < 0.2


def _small_file(tmp_path):
    shape = dict(n_layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=1000, seq_len=256)
    base = dict(model="tiny", arch="a100-80g", gpus=8, t=2, p=2, d=2, microbatch=1,
                global_batch=8, virtual_stages=1, recompute="full", sequence_parallel=False,
                precision="bf16", source="a made-up row for the tests")
    rows = [dict(base, name="tiny/time", kind="time", published_s=0.05),
            dict(base, name="tiny/act", kind="memory", quantity="act", published_gib=0.01,
                 recompute="none"),
            dict(base, name="tiny/interleaved", kind="time", published_s=0.05, virtual_stages=3),
            dict(base, name="zoo/time", kind="time", model="megatron-1.7b", t=1, p=1, d=1, gpus=1,
                 published_s=1.0, held_out=True, assumptions=["made up"])]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(dict(models=dict(tiny=shape), rows=rows)))
    return path


def test_a_small_file(tmp_path):
    rep = validate.run(_small_file(tmp_path))
    assert [r["name"] for r in rep.rows] == ["tiny/time", "tiny/act", "tiny/interleaved", "zoo/time"]
    assert rep.rows[0]["predicted_s"] > 0 and rep.rows[1]["predicted_gib"] > 0
    # 4 layers cannot be split into p·v = 6 chunks: the row keeps its place with the reason
    assert rep.rows[2]["predicted_s"] is None and "interleaved" in rep.rows[2]["reason"]
    assert "divisible by p·v" in rep.rows[2]["reason"]
    assert rep.rows[3]["held_out"] and rep.rows[3]["assumptions"] == ["made up"]
    # act: one microbatch of 256 tokens, 2 layers per stage, first stage 2 in flight.
    ref = 2 * 2 * 256 * 512 * (10 + 24 / 2 + 5 * 8 * 256 / (512 * 2)) / 2 ** 30
    assert rep.rows[1]["predicted_gib"] == pytest.approx(ref)


@pytest.mark.parametrize("change,words", [
    (lambda t: t["rows"][0].pop("t"), "missing field 't'"),
    (lambda t: t["rows"][0].update(gpus=7), "gpus"),
    (lambda t: t["rows"][0].update(kind="speed"), "kind"),
    (lambda t: t["rows"][1].update(name="tiny/time"), "twice"),
    (lambda t: t["rows"][0].update(model="nope"), "nope"),
    (lambda t: t["rows"][0].update(zero_stage=5), "zero_stage"),
    (lambda t: t["rows"][0].update(flash_attention="yes"), "flash_attention"),
])
def test_bad_files_are_refused(tmp_path, change, words):
    path = _small_file(tmp_path)
    table = json.loads(path.read_text())
    change(table)
    path.write_text(json.dumps(table))
    with pytest.raises(ValueError, match=words):
        validate.run(path)


def test_cli_json(capsys, tmp_path):
    assert main(["validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"rows", "time_mape", "time_max_error", "memory_mape"} <= set(out)
    for r in out["rows"]:
        assert {"name", "error", "reason"} <= set(r)
        assert ("predicted_s" in r and "published_s" in r) or ("predicted_gib" in r and "published_gib" in r)
    assert all(r["reason"] == "" for r in _classic(out["rows"]))
    assert all(r["reason"] or r["error"] is not None for r in out["rows"])
    assert {"by_table", "by_chip", "by_trainer_chip", "h100_dense"} <= set(out["groups"])
    assert main(["validate", str(_small_file(tmp_path)), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 4
    none = [r for r in rows if r["kind"] == "time" and r["predicted_s"] is None]
    assert none and all(r["reason"] for r in none)


def test_cli_table(capsys, tmp_path):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "korthikanti2022/table5/gpt3-175b/full" in out and "MAPE" in out
    rep = validate.run()
    n_time = sum(1 for r in rep.rows if r["kind"] == "time")
    m_time = sum(1 for r in rep.rows if r["kind"] == "time" and r["error"] is not None)
    assert f"over {m_time} of {n_time} rows modelled" in out and m_time < n_time
    assert "per table:" in out and "per chip:" in out and "H100 rows of dense" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["validate", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_optional_strategy_fields(tmp_path):
    path = _small_file(tmp_path)
    table = json.loads(path.read_text())
    table["rows"] = [dict(table["rows"][0], name="tiny/zero1", d=2, zero_stage=1,
                          flash_attention=True, overlap_grad_reduce=True)]
    path.write_text(json.dumps(table))
    rep = validate.run(path)
    row = rep.rows[0]
    assert row["predicted_s"] > 0 and row["config"]["zero_stage"] == 1
    assert row["config"]["flash_attention"] and row["config"]["overlap_grad_reduce"]
