"""Expert and context parallelism in the search and the CLI (issue 15): the grids reach
``phaze.step.best_plans``, every row records the ep and cp it chose and re-prices with
training_step, the columns round-trip through result files, and the CLI's --ep / --cp /
--capacity-factor options of search and evaluate (one sentence for bad input)."""
import numpy as np
import pytest

from phaze import arch, cli, models, search, step

MOE = models.ModelSpec(name="tiny-moe", n_layers=4, hidden=64, heads=4, kv_heads=2,
                       ffn_hidden=256, vocab=512, seq_len=2048, n_experts=4,
                       experts_per_token=2, expert_ffn_hidden=2048, first_dense_layers=1,
                       activation="swiglu", norm="rmsnorm", position="rotary", bias=False)
DENSE = models.ModelSpec(name="tiny-long", n_layers=4, hidden=64, heads=4, kv_heads=4,
                         ffn_hidden=256, vocab=512, seq_len=2048)
ROWS = arch.ArchSpace.default().configs[::5000]
#: 40 MiB of HBM needs the experts and the sequence sharded (ep = 4, cp = 2) or t = 2 (tested).
KNOBS = dict(devices=16, global_batch=32, microbatch=(1,), hbm_gib=(0.04, 1.0),
             tensor_parallel=(1, 2), recompute="full", executor="serial", progress=False,
             baselines=False)


@pytest.fixture(scope="module")
def moe():
    return search.search(MOE, space=ROWS, expert_parallel=(1, 2, 4), context_parallel=(1, 2),
                         **KNOBS)


def test_rows_record_the_ep_and_cp_best_plans_chose(moe):
    t = moe.table
    feasible = t["feasible"]
    assert feasible.any()
    assert set(t["expert_parallel"][feasible]) <= {1, 2, 4}
    assert set(t["context_parallel"][feasible]) <= {1, 2}
    tight = feasible & (t["hbm_gib"] == 0.04)
    # 40 MiB holds no unsharded plan: every row's choice shards the experts and the sequence
    # (ep = 4, cp = 2) or the whole layer over t = 2, whichever is faster on that row
    ep4cp2 = (t["expert_parallel"] == 4) & (t["context_parallel"] == 2)
    assert tight.any() and (ep4cp2 | (t["tensor_parallel"] == 2))[tight].all()
    assert ep4cp2[tight].any()
    rows = arch.ArchSpace.default().configs
    for i in np.flatnonzero(tight):
        # the row holds the faster of the two ways to fit, each priced on its own grid
        aid = int(t["arch_id"][i])
        times = [step.best_plans(MOE, rows[aid:aid + 1], devices=16, global_batch=32,
                                 microbatch=1, recompute="full", hbm_bytes=0.04 * 2 ** 30,
                                 tp_comm_overlap=(False, True), **grid)["time_s"][0]
                 for grid in (dict(tensor_parallel=(1,), expert_parallel=(4,),
                                   context_parallel=(2,)),
                              dict(tensor_parallel=(2,), expert_parallel=(1, 2, 4),
                                   context_parallel=(1, 2)))]
        assert t["time_per_batch_s"][i] == pytest.approx(min(times), rel=1e-12)
        assert bool(ep4cp2[i]) == (times[0] < times[1])
    assert (t["devices_used"][feasible] == t["tensor_parallel"][feasible]
            * t["context_parallel"][feasible] * t["pipeline_parallel"][feasible]
            * t["data_parallel"][feasible]).all()
    for i in np.flatnonzero(feasible)[:4]:
        aid = int(t["arch_id"][i])
        ref = step.best_plans(MOE, rows[aid:aid + 1], devices=16, global_batch=32, microbatch=1,
                              recompute="full", hbm_bytes=float(t["hbm_gib"][i]) * 2 ** 30,
                              tensor_parallel=(1, 2), expert_parallel=(1, 2, 4),
                              context_parallel=(1, 2), tp_comm_overlap=(False, True))
        assert ref["time_s"][0] == pytest.approx(t["time_per_batch_s"][i], rel=1e-12)
        assert ref["expert_parallel"][0] == t["expert_parallel"][i]
        assert ref["context_parallel"][0] == t["context_parallel"][i]
        r = search.evaluate_point(
            MOE, rows[aid:aid + 1], int(t["tensor_parallel"][i]), int(t["pipeline_parallel"][i]),
            int(t["data_parallel"][i]), 1, "full", global_batch=32, devices=16,
            hbm_gib=float(t["hbm_gib"][i]), sequence_parallel=bool(t["sequence_parallel"][i]),
            flash_attention=bool(t["flash_attention"][i]),
            virtual_stages=int(t["virtual_stages"][i]), zero_stage=int(t["zero_stage"][i]),
            overlap_grad_reduce=bool(t["overlap_grad_reduce"][i]),
            expert_parallel=int(t["expert_parallel"][i]),
            context_parallel=int(t["context_parallel"][i]),
            tp_comm_overlap=bool(t["tp_comm_overlap"][i]))
        assert r["feasible"]
        assert r["samples_per_s"] == pytest.approx(t["samples_per_s"][i], rel=1e-9)
        assert r["devices"] == t["devices_used"][i]


def test_summary_prints_ep_and_cp_and_the_grids(moe):
    text = moe.format_summary()
    assert " ep  cp " in text
    assert "expert parallel 1,2,4; context parallel 1,2" in text


def test_ep_cp_columns_round_trip(tmp_path, moe):
    back = search.load_result(moe.save(tmp_path / "r.csv"))
    for name in ("expert_parallel", "context_parallel"):
        assert [int(v) for v in back.table[name]] == [int(v) for v in moe.table[name]]


def test_dense_models_search_context_parallelism_only():
    res = search.search(DENSE, space=ROWS[:3], **KNOBS)
    t = res.table
    assert (t["expert_parallel"][t["feasible"]] == 1).all()
    assert set(t["context_parallel"][t["feasible"]]) <= {1, 2}   # s/(2cp) >= 512
    assert res.metadata["strategy_grids"]["context_parallel"] is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(expert_parallel=3), "expert_parallel: no value of 3 divides the 4 routed experts"),
    (dict(expert_parallel=0), "expert_parallel must be"),
    (dict(context_parallel=(1, -2)), "context_parallel must be"),
    (dict(capacity_factor=-1.0), "capacity_factor"),
    (dict(study=True, context_parallel=2), "context_parallel: the study's model"),
])
def test_bad_grids_are_one_sentence_before_any_work(kwargs, words):
    with pytest.raises(ValueError, match=words):
        search.search(MOE if "expert" in str(kwargs) or "capacity" in str(kwargs) else DENSE,
                      space=ROWS[:1], **dict(KNOBS, **kwargs))


def test_cli_search_passes_ep_cp(monkeypatch):
    seen = {}

    def fake(models_, **kw):
        seen.update(kw)
        raise ValueError("stop")

    monkeypatch.setattr(search, "search", fake)
    cli.main(["search", "--model", "mixtral-8x7b", "--ep", "1,2,4,8", "--cp", "all",
              "--capacity-factor", "1.25"])
    assert seen["expert_parallel"] == (1, 2, 4, 8) and seen["context_parallel"] is None
    assert seen["capacity_factor"] == 1.25
    seen.clear()
    cli.main(["search", "--model", "llama3-70b", "--cp", "1,2,4"])
    assert seen["context_parallel"] == (1, 2, 4) and seen["expert_parallel"] is None


@pytest.mark.parametrize("argv, flag", [
    (["--ep", "two"], "--ep"), (["--cp", "0"], "--cp"), (["--study", "--ep", "2"], "--ep"),
])
def test_cli_bad_ep_cp_are_one_sentence_exit_2(capsys, argv, flag):
    rc = cli.main(["search", "--model", "opt-350m", "--space-every", "20000", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and flag in err and err.count("\n") == 1


def test_cli_evaluate_takes_ep_and_cp(capsys):
    rc = cli.main(["evaluate", "--model", "mixtral-8x7b", "--arch", "a100-80g", "--tp", "2",
                   "--pp", "4", "--dp", "16", "--ep", "8", "--cp", "2", "--flash-attention",
                   "--sequence-parallel", "--recompute", "--global-batch", "512"])
    out = capsys.readouterr().out
    assert rc == 0 and "expert parallel 8, context parallel 2" in out
    assert "256 devices" in out and "time per batch" in out
    rc = cli.main(["evaluate", "--model", "mixtral-8x7b", "--arch", "a100-80g", "--tp", "1",
                   "--pp", "1", "--dp", "4", "--ep", "3", "--global-batch", "8"])
    assert rc == 0 and "infeasible: expert parallel 3 does not divide the routed experts (8)" \
        in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--model", "llama3-8b", "--ep", "2"], "expert_parallel must be 1 for llama3-8b"),
    (["--model", "llama3-8b", "--cp", "0"], "--cp must be a positive integer"),
    (["--model", "mixtral-8x7b", "--capacity-factor", "0"], "--capacity-factor must be positive"),
    (["--model", "llama3-8b", "--study", "--cp", "2"], "--cp is a knob of the calibrated"),
    (["--model", "llama3-8b", "--emit", "megatron", "--cp", "2"],
     "context parallelism runs on the fused attention kernel"),
])
def test_cli_evaluate_bad_ep_cp_are_one_sentence(capsys, argv, words):
    rc = cli.main(["evaluate", "--arch", "a100-80g", "--tp", "1", "--pp", "1", "--dp", "2",
                   "--global-batch", "8", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and err.count("\n") == 1


def test_cli_help_documents_ep_cp(capsys):
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    text = capsys.readouterr().out
    for word in ("--ep", "--cp", "--capacity-factor", "ep          expert parallelism",
                 "cp          context parallelism"):
        assert word in text, word


def test_cli_trace_draws_ep_cp(capsys, tmp_path):
    """phaze trace draws context parallelism now (issue 29); without flash attention the
    plan is refused with evaluate's reason, in one sentence."""
    rc = cli.main(["trace", "--model", "llama3-8b", "--arch", "a100-80g", "--tp", "1", "--pp",
                   "1", "--dp", "2", "--cp", "2", "-o", str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "needs flash attention" in err and err.count("\n") == 1
    rc = cli.main(["trace", "--model", "llama2-7b", "--arch", "h200", "--tp", "1", "--pp",
                   "2", "--dp", "2", "--cp", "2", "--flash-attention", "--global-batch", "16",
                   "--no-layer-schedule", "-o", str(tmp_path / "t.json")])
    assert rc == 0, capsys.readouterr().err
    import json
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["phaze"][
        "context_parallel"] == 2


def test_cli_search_emit_writes_ep_and_cp(capsys):
    """search --emit on a mixture of experts with ep and cp searched: Megatron-Core's
    expert, context-parallel and MoE arguments of the best plan."""
    rc = cli.main(["search", "--model", "mixtral-8x7b", "--arch", "a100-80g", "--devices", "64",
                   "--global-batch", "64", "--microbatch", "1", "--recompute", "full", "--ep",
                   "8", "--emit", "megatron"])
    out = capsys.readouterr().out
    assert rc == 0
    for flag in ("--expert-model-parallel-size 8", "--num-experts 8", "--moe-router-topk 2",
                 "--moe-ffn-hidden-size 14336", "--moe-token-dispatcher-type alltoall"):
        assert flag in out, flag
    rc = cli.main(["search", "--model", "mixtral-8x7b", "--arch", "a100-80g", "--devices", "64",
                   "--global-batch", "64", "--microbatch", "1", "--recompute", "full", "--ep",
                   "8", "--emit", "deepspeed"])
    assert rc == 2 and "emit megatron" in capsys.readouterr().err