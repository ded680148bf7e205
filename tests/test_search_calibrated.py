"""phaze.search on the calibrated Megatron-LM step model, its default (issues 13 and 14):
the strategy knobs searched inside each row, pruning with the step model's valid bounds,
the knob columns in result files, the CLI's comma lists, and --study keeping the study."""
import json

import numpy as np
import pytest

from phaze import arch, cli, models, search, step
from phaze.search import _baselines, _report, _table
from phaze.search._inputs import space_ids

TINY = models.ModelSpec(name="tiny", n_layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
#: The study's strategy set on the calibrated model.
STUDY_SET = dict(recompute=("none", "full"), sequence_parallel=(False,), flash_attention=(False,),
                 virtual_stages=(1,), zero_stage=(0,), overlap_grad_reduce=(False,))
KNOBS = dict(devices=16, global_batch=32, microbatch=(1, 2), hbm_gib=(0.004, 1.0),
             tensor_parallel=(1, 2, 4), executor="serial", progress=False, baselines=False)
ROWS = arch.ArchSpace.default().configs[::2500]  # 12 architectures


@pytest.fixture(scope="module")
def full():
    return search.search(TINY, space=ROWS, **KNOBS)


@pytest.fixture(scope="module")
def restricted():
    return search.search(TINY, space=ROWS, **KNOBS, **STUDY_SET)


def _by_point(r):
    t = r.table
    return {(int(a), int(mb), float(h), str(rc)): float(s) if f else 0.0
            for a, mb, h, rc, s, f in zip(t["arch_id"], t["microbatch"], t["hbm_gib"],
                                          t["recompute"], t["samples_per_s"], t["feasible"])}


def test_calibrated_is_the_default_and_says_so(full):
    assert full.metadata["cost_model"] == "calibrated"
    grids = full.metadata["strategy_grids"]
    assert grids["recompute"] == ("none", "selective", "full")
    assert grids["zero_stage"] == (0, 1, 2, 3) and grids["virtual_stages"] is None
    assert set(full.table["recompute"]) == {"none", "selective", "full"}
    assert len(full) == len(ROWS) * 2 * 2 * 3
    assert "cost model: calibrated" in full.format_summary()


def test_the_knob_search_is_never_slower_than_the_study_set(full, restricted):
    """(a) every point of the full knob search at least as fast as with the study's knobs,
    hence the best too; the restricted rows record only the study's values."""
    a, b = _by_point(full), _by_point(restricted)
    assert set(b) <= set(a)
    assert all(b[k] <= a[k] * (1 + 1e-12) for k in b)
    assert restricted.best["samples_per_s"] <= full.best["samples_per_s"]
    t = restricted.table
    ok = t["feasible"]
    assert ok.any()
    assert not t["sequence_parallel"][ok].any() and not t["flash_attention"][ok].any()
    assert set(t["virtual_stages"][ok]) == {1} and set(t["zero_stage"][ok]) == {0}
    assert not t["overlap_grad_reduce"][ok].any()
    # the full search uses its freedom somewhere: a knob the study lacks in some best row
    f = full.table
    used = (f["sequence_parallel"] | f["flash_attention"] | (f["zero_stage"] > 0)
            | (f["virtual_stages"] > 1) | f["overlap_grad_reduce"])
    assert used[f["feasible"]].any()


def test_every_row_re_evaluates_with_training_step(full):
    t = full.table
    rows = arch.ArchSpace.default().configs
    for i in np.flatnonzero(t["feasible"])[::7]:
        aid = int(t["arch_id"][i])
        r = search.evaluate_point(
            TINY, rows[aid:aid + 1], int(t["tensor_parallel"][i]), int(t["pipeline_parallel"][i]),
            int(t["data_parallel"][i]), int(t["microbatch"][i]), str(t["recompute"][i]),
            global_batch=32, devices=16, hbm_gib=float(t["hbm_gib"][i]),
            sequence_parallel=bool(t["sequence_parallel"][i]),
            flash_attention=bool(t["flash_attention"][i]),
            virtual_stages=int(t["virtual_stages"][i]), zero_stage=int(t["zero_stage"][i]),
            overlap_grad_reduce=bool(t["overlap_grad_reduce"][i]))
        assert r["feasible"] and r["cost_model"] == "calibrated"
        assert r["samples_per_s"] == pytest.approx(t["samples_per_s"][i], rel=1e-9)
        peak = max(s["memory_bytes"] for s in r["stages"])
        assert peak == t["memory_bytes"][i]
        parts = sum(t[c][i] for c in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                      "activations_bytes", "workspace_bytes"))
        assert parts == t["memory_bytes"][i]
        p = int(t["pipeline_parallel"][i])
        sizes = [int(x) for x in t["stage_layers"][i].split(",")]
        assert len(sizes) == p and sum(sizes) == TINY.n_layers + 2
        assert t["mfu"][i] == pytest.approx(
            _table.model_flops_per_sample(TINY) * t["samples_per_s"][i]
            / (t["devices_used"][i] * arch.peak_flops(rows[aid:aid + 1])[0]))


@pytest.mark.parametrize("models_", [[TINY], [TINY, models.ModelSpec(
    name="tiny-wide", n_layers=3, hidden=96, heads=6, kv_heads=6, ffn_hidden=384, vocab=512,
    seq_len=32)]], ids=["one", "two"])
def test_pruning_keeps_the_best_and_the_front(models_):
    """(c) prune "best": the exhaustive best; prune "front": the exhaustive Pareto front."""
    kw = dict(KNOBS, microbatch=(1, 2), hbm_gib=(1.0,), chunk_archs=3)
    exhaustive = search.search(models_, space=ROWS, **kw)
    best = search.search(models_, space=ROWS, prune="best", **kw)
    front = search.search(models_, space=ROWS, prune="front", **kw)
    e = exhaustive.best
    for r in (best, front):
        assert r.best["arch_id"] == e["arch_id"]
        for name, plan in e["plans"].items():
            assert r.best["plans"][name]["samples_per_s"] == plan["samples_per_s"]
    ef, ff = exhaustive.pareto(), front.pareto()
    assert list(ef["arch_id"]) == list(ff["arch_id"])
    np.testing.assert_array_equal(ef["score"], ff["score"])
    assert best.metadata["points_pruned"] > 0 and best.metadata["pareto_exact"] is False


def test_step_lower_bounds_hold_on_every_row(full):
    t = full.table
    for mb in (1, 2):
        for rc in ("none", "selective", "full"):
            lb = step.step_lower_bounds(TINY, ROWS, devices=16, global_batch=32, microbatch=mb,
                                        recompute=rc, tensor_parallel=(1, 2, 4))
            sel = (t["microbatch"] == mb) & (t["recompute"] == rc) & t["feasible"]
            where = {int(a): k for k, a in enumerate(space_ids(ROWS)[0])}
            for i in np.flatnonzero(sel):
                assert t["time_per_batch_s"][i] >= lb[where[int(t["arch_id"][i])]]


def test_study_keeps_its_model_and_knob_set():
    """(b) study=True: the study's model, recomputation none/full, the study's strategy."""
    kw = dict(KNOBS, microbatch=(1,), hbm_gib=(1.0,))
    r = search.search(TINY, space=ROWS[:3], study=True, **kw)
    assert r.metadata["cost_model"] == "study"
    assert set(r.table["recompute"]) == {"none", "full"}
    ok = r.table["feasible"]
    assert not r.table["sequence_parallel"].any() and set(r.table["virtual_stages"]) == {1}
    assert np.isnan(r.table["weights_bytes"]).all() and (r.table["memory_bytes"][ok] > 0).all()
    assert "cost model: study" in r.format_summary()
    # the study's rows are those of the study's model (its own evaluate_point)
    i = int(np.flatnonzero(ok)[0])
    aid = int(r.table["arch_id"][i])
    sizes = [int(x) for x in r.table["stage_layers"][i].split(",")]
    want = search.evaluate_point(
        TINY, arch.ArchSpace.default().configs[aid:aid + 1], int(r.table["tensor_parallel"][i]),
        len(sizes), int(r.table["data_parallel"][i]), 1, str(r.table["recompute"][i]), devices=16,
        global_batch=32, hbm_gib=1.0, stages=sizes, study=True)
    assert want["samples_per_s"] == pytest.approx(r.table["samples_per_s"][i], rel=1e-9)


@pytest.mark.parametrize("kwargs, words", [
    (dict(study=True, sequence_parallel=True), "sequence_parallel"),
    (dict(study=True, recompute="selective"), "selective"),
    (dict(study=True, precision="fp16"), "precision"),
    (dict(sequence_parallel="yes"), "sequence_parallel"),
    (dict(flash_attention=()), "flash_attention"),
    (dict(zero_stage=(0, 4)), "zero_stage"),
    (dict(zero_stage=True), "zero_stage"),
    (dict(virtual_stages=(0,)), "virtual_stages"),
    (dict(overlap_grad_reduce=(1, 0)), "overlap_grad_reduce"),
    (dict(recompute=("none", "some")), "recompute"),
    (dict(precision="int8"), "precision"),
    (dict(optimizer="sgd"), "optimizer"),
])
def test_bad_knobs_are_one_sentence_before_any_work(kwargs, words):
    with pytest.raises(ValueError) as err:
        search.search(TINY, space=ROWS[:1], **dict(KNOBS, **kwargs))
    msg = str(err.value)
    assert words in msg and "\n" not in msg


def test_recompute_booleans_keep_their_meaning():
    kw = dict(KNOBS, microbatch=(1,), hbm_gib=(1.0,))
    r = search.search(TINY, space=ROWS[:2], recompute=(True, False), **kw)
    assert r.metadata["strategy_grids"]["recompute"] == ("none", "full")
    assert set(r.table["recompute"]) == {"none", "full"}


# --- files -----------------------------------------------------------------------------

@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".json", ".parquet"])
def test_knob_columns_round_trip(tmp_path, full, ext):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    back = search.load_result(full.save(tmp_path / f"r{ext}"))
    want = full.top_rows() if ext == ".json" else full.table
    for name in ("recompute", "sequence_parallel", "virtual_stages", "zero_stage",
                 "flash_attention", "overlap_grad_reduce", "memory_bytes", "weights_bytes",
                 "activations_bytes", "workspace_bytes", "stage_layers"):
        assert [str(v) for v in back.table[name]] == [str(v) for v in want[name]], name
    assert back.metadata["cost_model"] == "calibrated"
    assert "cost model: calibrated" in back.format_summary()


def test_old_files_with_boolean_recompute_still_load(tmp_path, full):
    path = full.save(tmp_path / "old.csv")
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    drop = [header.index(c) for c in ("sequence_parallel", "virtual_stages", "zero_stage",
                                      "flash_attention", "overlap_grad_reduce", "memory_bytes",
                                      "weights_bytes", "gradients_bytes", "optimizer_bytes",
                                      "activations_bytes", "workspace_bytes")]
    rc = header.index("recompute")
    out = []
    for ln in lines:
        cells = ln.split(",")
        if ln is not lines[0]:
            cells[rc] = {"none": "false", "full": "true", "selective": "false"}[cells[rc]]
        out.append(",".join(c for k, c in enumerate(cells) if k not in drop))
    path.write_text("\n".join(out) + "\n")
    (tmp_path / "old.csv.meta.json").unlink()
    back = search.load_result(path)
    assert set(back.table["recompute"]) <= {"none", "full"}
    assert not back.table["sequence_parallel"].any() and set(back.table["virtual_stages"]) == {1}
    assert np.isnan(back.table["memory_bytes"]).all()
    assert _report.cost_model_line(back.metadata).startswith("cost model: study")
    js = tmp_path / "old.json"
    full.save(js)
    doc = json.loads(js.read_text())
    for row in doc["top_rows"]:
        row["recompute"] = row["recompute"] == "full"
        for c in ("sequence_parallel", "virtual_stages", "zero_stage"):
            row.pop(c)
    js.write_text(json.dumps(doc))
    back = search.load_result(js)
    assert set(back.table["recompute"]) <= {"none", "full"}


def _cut_journal_after_first_chunk(meta_path):
    """Make a finished run's journal (``*.meta.json``) look cut after its first chunk: only
    chunk 0 recorded, no completion mark, no summary."""
    meta = json.loads(meta_path.read_text())
    meta["chunks"] = {"0": meta["chunks"]["0"]}
    meta.pop("complete", None)
    meta.pop("summary", None)
    meta_path.write_text(json.dumps(meta))


def test_resume_keeps_the_knob_columns(tmp_path):
    out = tmp_path / "run.csv.gz"
    kw = dict(KNOBS, microbatch=(1,), hbm_gib=(1.0,), chunk_archs=4, out=out)
    whole = search.search(TINY, space=ROWS, **kw)
    _cut_journal_after_first_chunk(tmp_path / "run.csv.gz.meta.json")
    again = search.search(TINY, space=ROWS, resume=True, **dict(kw, out=out))
    assert again.metadata["resumed_chunks"] == 1
    for name in _table.COLUMN_NAMES:
        assert [str(v) for v in again.table[name]] == [str(v) for v in whole.table[name]], name


# --- baselines ---------------------------------------------------------------------------

def test_baselines_use_the_calibrated_model_and_the_same_knobs():
    space = arch.ArchSpace.default().configs[::6000]
    kw = dict(devices=64, global_batch=64, microbatch=(1,), hbm_gib=(80.0,), executor="serial",
              progress=False, recompute=("full",), zero_stage=(0, 1))
    r = search.search("opt-350m", space=space, **kw)
    base = r.baselines
    a = base["tpuv4_searched"]["models"]["opt-350m"]
    tpu = arch.presets.get("tpuv4")
    plans = step.best_plans("opt-350m", tpu, devices=64, global_batch=64, microbatch=1,
                            recompute="full", hbm_bytes=80.0 * 2 ** 30, zero_stage=(0, 1))
    assert a["feasible"] and a["samples_per_s"] == pytest.approx(64 / plans["time_s"][0],
                                                                 rel=1e-12)
    b = base["tpuv4_fixed"]["models"]["opt-350m"]
    p, d, t = _baselines.FIXED_STRATEGIES["opt-350m"]
    if b["feasible"]:
        assert (b["pipeline_parallel"], b["data_parallel"], b["tensor_parallel"]) == (p, d, t)
        want = step.training_step("opt-350m", tpu, tensor_parallel=t, pipeline_parallel=p,
                                  data_parallel=d, microbatch=1, global_batch=64,
                                  recompute="full", sequence_parallel=b["sequence_parallel"],
                                  flash_attention=b["flash_attention"],
                                  virtual_stages=b["virtual_stages"], zero_stage=b["zero_stage"],
                                  overlap_grad_reduce=b["overlap_grad_reduce"])
        assert b["samples_per_s"] == pytest.approx(64 / want.time_s, rel=1e-12)
        assert b["zero_stage"] in (0, 1) and b["recompute"] == "full"
    else:
        assert "fixed strategy" in b["reason"]
    c = base["block_optimal"]["models"]["opt-350m"]
    from phaze.search import _calibrated
    block = _calibrated.block_fwbw_seconds(models.get("opt-350m"), space)
    assert c["block_fwbw_s"] == pytest.approx(block.min())
    text = r.format_summary()
    assert "cost model: calibrated" in text and "zero" in text


# --- the command line ---------------------------------------------------------------------

def _search_args(argv):
    return cli.build_parser().parse_args(["search", "--model", "tiny", *argv])


@pytest.mark.parametrize("text, want", [
    ("none,selective,full", ("none", "selective", "full")), ("off", ("none",)),
    ("on", ("full",)), ("both", ("none", "full")), ("full,none", ("full", "none")),
    ("selective", ("selective",))])
def test_cli_recompute_lists(text, want):
    from phaze.cli import _lists as _cli_lists

    assert _cli_lists.recompute_list(text) == want
    assert _cli_lists.recompute_list(None) is None


def test_cli_switch_virtual_zero_lists():
    from phaze.cli import _lists as L

    assert L.switch_list("--sequence-parallel", "off,on") == (False, True)
    assert L.switch_list("--sequence-parallel", "both") == (False, True)
    assert L.switch_list("--flash-attention", "on") == (True,)
    assert L.virtual_list("1,2,4") == (1, 2, 4) and L.virtual_list("all") is None
    assert L.zero_list("0,1") == (0, 1) and L.zero_list(None) is None


@pytest.mark.parametrize("argv, flag", [
    (["--recompute", "half"], "--recompute"),
    (["--recompute", "none,"], "--recompute"),
    (["--sequence-parallel", "yes"], "--sequence-parallel"),
    (["--flash-attention", "on,maybe"], "--flash-attention"),
    (["--overlap-grad-reduce", "1"], "--overlap-grad-reduce"),
    (["--virtual-stages", "0"], "--virtual-stages"),
    (["--virtual-stages", "two"], "--virtual-stages"),
    (["--zero-stage", "4"], "--zero-stage"),
    (["--zero-stage", "0,x"], "--zero-stage"),
    (["--study", "--zero-stage", "1"], "--zero-stage"),
    (["--study", "--recompute", "selective"], "selective"),
    (["--optimizer", "sgd"], "--optimizer"),
])
def test_cli_bad_knob_lists_are_one_sentence_exit_2(capsys, argv, flag):
    rc = cli.main(["search", "--model", "opt-350m", "--space-every", "20000", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and flag in err and err.count("\n") == 1


def test_cli_search_passes_the_knob_lists(monkeypatch, capsys):
    seen = {}

    def fake(models_, **kw):
        seen.update(kw)
        raise ValueError("stop")

    monkeypatch.setattr(search, "search", fake)
    cli.main(["search", "--model", "opt-350m", "--recompute", "on,selective",
              "--sequence-parallel", "off", "--flash-attention", "on", "--virtual-stages", "1,2",
              "--zero-stage", "0,1", "--overlap-grad-reduce", "both", "--precision", "fp16"])
    assert seen["recompute"] == ("full", "selective") and seen["sequence_parallel"] == (False,)
    assert seen["flash_attention"] == (True,) and seen["virtual_stages"] == (1, 2)
    assert seen["zero_stage"] == (0, 1) and seen["overlap_grad_reduce"] == (False, True)
    assert seen["precision"] == "fp16" and seen["study"] is False
    seen.clear()
    cli.main(["search", "--model", "opt-350m", "--study"])
    assert seen["study"] is True and seen["recompute"] is None
    assert all(seen[k] is None for k in ("sequence_parallel", "flash_attention",
                                         "virtual_stages", "zero_stage", "overlap_grad_reduce"))


def test_cli_help_documents_the_knobs(capsys):
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    text = capsys.readouterr().out
    for word in ("--study", "--recompute", "selective", "--sequence-parallel",
                 "--flash-attention", "--virtual-stages", "--zero-stage",
                 "--overlap-grad-reduce", "--dtype", "sp ", "zero ", "flash ", "ogr "):
        assert word in text, word


# --- evaluate_point ------------------------------------------------------------------------

def test_evaluate_point_defaults_to_the_step_model():
    r = search.evaluate_point("llama2-7b", "a100-80g", 2, 4, 8, 1, True, global_batch=64,
                              sequence_parallel=True, zero_stage=1)
    want = step.training_step("llama2-7b", "a100-80g", tensor_parallel=2, pipeline_parallel=4,
                              data_parallel=8, microbatch=1, global_batch=64, recompute="full",
                              sequence_parallel=True, zero_stage=1)
    assert r["cost_model"] == "calibrated" and r["recompute"] == "full"
    assert r["time_per_batch_s"] == want.time_s and r["feasible"]
    assert r["mfu"] == pytest.approx(_table.model_flops_per_sample(models.get("llama2-7b")) * 64
                                     / want.time_s / (64 * arch.peak_flops(
                                         arch.presets.get("a100-80g"))[0]))
    study = search.evaluate_point("llama2-7b", "a100-80g", 2, 4, 8, 1, True, global_batch=64,
                                  study=True)
    assert study["time_per_batch_s"] != r["time_per_batch_s"] and "cost_model" not in study


@pytest.mark.parametrize("kwargs, words", [
    (dict(stages=[9, 8, 8, 9]), "stages"), (dict(gap=0.01), "gap"),
    (dict(optimizer="sgd"), "optimizer"),
    (dict(study=True, zero_stage=2), "zero_stage"), (dict(study=True, precision="fp16"), "precision"),
    (dict(study=True, flash_attention=True), "flash_attention"),
])
def test_evaluate_point_knobs_of_the_other_model_are_one_sentence(kwargs, words):
    with pytest.raises(ValueError) as err:
        search.evaluate_point("llama2-7b", "a100-80g", 2, 4, 8, 1, False, global_batch=64,
                              **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_fp8_search_fixed_chips_and_baselines():
    """dtype fp8: a fixed chip trains at its own fp8 rate (h100-sxm: faster than bf16), a
    chip without fp8 tensor cores is refused in one sentence before any work, and the tpuv4
    baselines of a space search are not applicable (tpuv4 has no fp8 tensor cores)."""
    kw = dict(devices=64, global_batch=64, microbatch=(1,), executor="serial", progress=False,
              recompute=("full",), zero_stage=(0, 1))
    bf16 = search.search("opt-350m", arch="h100-sxm", **kw)
    fp8 = search.search("opt-350m", arch="h100-sxm", precision="fp8", **kw)
    assert fp8.best["samples_per_s"] > bf16.best["samples_per_s"]
    with pytest.raises(ValueError, match="a100-80g does not have"):
        search.search("opt-350m", arch="a100-80g", precision="fp8", **kw)
    res = search.search("opt-350m", space=arch.ArchSpace.default().configs[::6000],
                        precision="fp8", hbm_gib=(80.0,), **kw)
    for name in ("tpuv4_searched", "tpuv4_fixed"):
        row = res.baselines[name]["models"]["opt-350m"]
        assert row["applicable"] is False and "fp8" in row["reason"]


def test_search_emit_prints_the_best_plans_launch_arguments(capsys):
    """search --emit: after the summary, the best plan as Megatron-LM arguments with the
    knobs the row chose; no feasible plan is one sentence and exit status 2. (gpt2-xl:
    opt-350m's ReLU has no Megatron-LM flag, so --emit megatron refuses it, issue 29.)"""
    argv = ["search", "--model", "gpt2-xl", "--arch", "h100-sxm", "--devices", "64",
            "--global-batch", "64", "--microbatch", "1", "--recompute", "full"]
    assert cli.main(argv + ["--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    best = search.search("gpt2-xl", arch="h100-sxm", devices=64, global_batch=64,
                         microbatch=(1,), recompute=("full",), executor="serial",
                         progress=False).best
    assert "best plan:" in out and "# Megatron-LM launch arguments for gpt2-xl" in out
    assert f"--tensor-model-parallel-size {best['tensor_parallel']}" in out
    assert f"--pipeline-model-parallel-size {best['pipeline_parallel']}" in out
    assert "--recompute-granularity full" in out and "--global-batch-size 64" in out
    assert cli.main(argv + ["--hbm-gib", "0.001", "--emit", "deepspeed"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "phaze search: --emit deepspeed: gpt2-xl has no feasible plan to launch"]


def test_default_plans_are_launchable_study_plans_need_not_be():
    """Issue 16: the default search returns plans a trainer launches (d divides global
    batch / microbatch, p divides the layers, ZeRO 2-3 only without a pipeline) — the
    defect was gpt2-xl with d = 60 and GPT-3 with d = 15; --study keeps the unconstrained
    plans (here d = 60, not dividing the batch)."""
    from phaze import launch

    space = arch.ArchSpace.default().configs[::4000]
    kw = dict(devices=1024, global_batch=4096, microbatch=(1, 2), executor="serial",
              progress=False, baselines=False)
    res = search.search("gpt2-xl", space=space, **kw)
    spec = models.get("gpt2-xl")
    t = res.table
    ok = t["feasible"]
    assert ok.any()
    for d, mb, p, z in zip(t["data_parallel"][ok], t["microbatch"][ok],
                           t["pipeline_parallel"][ok], t["zero_stage"][ok]):
        assert 4096 % (int(d) * int(mb)) == 0 and spec.n_layers % int(p) == 0
        assert int(z) <= 1 or int(p) == 1
    b = res.best
    launch.emit("megatron", spec, tensor_parallel=b["tensor_parallel"],
                pipeline_parallel=b["pipeline_parallel"], data_parallel=b["data_parallel"],
                microbatch=b["microbatch"], global_batch=4096, recompute=b["recompute"],
                virtual_stages=b["virtual_stages"], sequence_parallel=b["sequence_parallel"],
                flash_attention=b["flash_attention"], zero_stage=b["zero_stage"],
                overlap_grad_reduce=b["overlap_grad_reduce"])
    study = search.search("gpt2-xl", space=space, study=True, **kw).best
    assert 4096 % (study["data_parallel"] * study["microbatch"]) != 0
