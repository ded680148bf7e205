"""phaze.plan: one knob table drives the Plan record, the CLI, the result columns, the
legend, the keywords and the launchability rules (issue 23 item 1)."""
import argparse
import dataclasses
import inspect
import itertools
import pickle

import numpy as np
import pytest

from phaze import cli, launch, plan, search, step
from phaze.search import _settings, _table


def _subparser(name):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _actions(name):
    return {a.dest: a for a in _subparser(name)._actions}


# -- the table drives the command line ------------------------------------------------------

@pytest.mark.parametrize("command", ["search", "evaluate"])
def test_every_knob_option_comes_from_the_table(command):
    actions = _actions(command)
    names = ("recompute", *plan.GRIDS) if command == "search" else (
        "tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch", "recompute",
        *[n for n in plan.GRIDS if n in plan.STRATEGY])
    for name in names:
        knob = plan.KNOB[name]
        action = actions[name]
        # evaluate: a switch on by default also takes its --no- form
        negated = tuple("--no-" + f[2:] for f in knob.flags) if (
            command == "evaluate" and knob.type is bool and knob.default is True) else ()
        assert tuple(action.option_strings) == knob.flags + negated, name
        assert action.help == (knob.search_help if command == "search" else knob.help), name


@pytest.mark.parametrize("command", ["search", "evaluate"])
def test_help_documents_every_knob(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in plan.GRIDS:
        knob = plan.KNOB[name]
        for flag in knob.flags:
            assert flag in text, (command, flag)
        words = knob.search_help if command == "search" else knob.help
        assert " ".join(words.split())[:40] in text, (command, name)


def test_search_lists_parse_by_the_table():
    assert plan.search_values("sequence_parallel", "off,on") == (False, True)
    assert plan.search_values("flash_attention", "both") == (False, True)
    assert plan.search_values("zero_stage", "0,1") == (0, 1)
    assert plan.search_values("virtual_stages", "all") is None
    assert plan.search_values("expert_parallel", "1,2,4") == (1, 2, 4)
    assert plan.search_values("recompute", "on") == ("full",)
    for name, bad in (("zero_stage", "0,4"), ("context_parallel", "0"),
                      ("overlap_grad_reduce", "1"), ("recompute", "half")):
        with pytest.raises(ValueError) as err:
            plan.search_values(name, bad)
        msg = str(err.value)
        assert plan.KNOB[name].flag in msg and "\n" not in msg


# -- the result columns, the summary and the legend -----------------------------------------

def test_result_columns_are_the_tables():
    names = _table.COLUMN_NAMES
    start = names.index("reason") + 1
    assert names[start:start + len(plan.STRATEGY_COLUMNS)] == plan.STRATEGY_COLUMNS
    for name in plan.STRATEGY_COLUMNS:
        want = np.bool_ if plan.KNOB[name].type is bool else np.int64
        assert _table.COLUMN_DTYPES[name] is want
        assert _table.LATE_COLUMNS[name] == plan.study_value(name)
    assert "recompute" in names and set(plan.COLUMNS) <= set(names)


def test_legend_and_summary_name_every_knob_column():
    legend = cli.SEARCH_LEGEND
    header = plan.summary_header().split()
    assert header == [plan.KNOB[n].short for n in plan.COLUMNS]
    for name in plan.COLUMNS:
        knob = plan.KNOB[name]
        first = knob.legend.split("\n")[0]
        assert f"  {knob.short:<12}{first}" in legend, name
    row = {"recompute": "full", "sequence_parallel": True, "virtual_stages": 2,
           "zero_stage": 1, "flash_attention": False, "overlap_grad_reduce": True,
           "expert_parallel": 4, "context_parallel": 2, "overlap_param_gather": True}
    assert search.knob_text(row).split() == ["full", "on", "2", "1", "off", "on", "4", "2",
                                             "on", "off", "off"]
    assert plan.summary_cells({}) [1:] == ["off", "1", "0", "off", "off", "1", "1", "off",
                                           "off", "off"]


def test_cost_model_line_reads_the_grids():
    meta = {"cost_model": "calibrated",
            "strategy_grids": {"recompute": ("none", "full"), "sequence_parallel": (False,),
                               "flash_attention": (False, True), "virtual_stages": None,
                               "zero_stage": (0, 1), "overlap_grad_reduce": (True,),
                               "expert_parallel": (1,), "context_parallel": None,
                               "capacity_factor": 1.5, "precision": "fp16"}}
    line = search.cost_model_line(meta)
    assert ("searched: recompute none,full; sequence parallel off; flash attention off,on; "
            "virtual stages all valid; ZeRO 0,1; overlap grad reduce on; expert parallel 1; "
            "context parallel all valid; MoE capacity factor 1.5") in line
    assert "fp16, Adam" in line


# -- the Plan record ------------------------------------------------------------------------

def test_plan_record_round_trips_and_is_frozen():
    p = plan.Plan(tensor_parallel=2, pipeline_parallel=4, data_parallel=8, context_parallel=2,
                  zero_stage=1, recompute="selective", capacity_factor=1.25, precision="fp8")
    assert plan.Plan.from_record(p.to_record()) == p
    assert pickle.loads(pickle.dumps(p)) == p
    assert p.devices == 2 * 4 * 8 * 2 and p.schedule == "1F1B"
    assert tuple(p.as_dict()) == plan.NAMES == plan.PLAN_RECORD_DTYPE.names
    assert plan.Plan.from_record(plan.Plan().to_record()).capacity_factor is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.zero_stage = 2
    with pytest.raises(ValueError, match="zero_stage"):
        dataclasses.replace(p, zero_stage=4)


def _bad(knob):
    if knob.type is bool:
        return "yes"
    if knob.type is int:
        return 7 if knob.choices else knob.minimum - 1 if knob.minimum is not None else 0
    if knob.type is float:
        return -1.0
    return "bogus"


@pytest.mark.parametrize("name", plan.NAMES)
def test_bad_input_is_one_sentence_naming_the_field(name):
    with pytest.raises(ValueError) as err:
        plan.Plan(**{name: _bad(plan.KNOB[name])})
    msg = str(err.value)
    assert msg.startswith(name + " must be ") and "\n" not in msg
    assert repr(_bad(plan.KNOB[name])) in msg or "positive" in msg or "number" in msg


def test_table_values_match_the_step_model():
    assert set(plan.KNOB["precision"].choices) == set(step.OPTIMIZER_BYTES_PER_PARAM)
    # the search's modes: every mode but torchtitan's per-op policy (priced, not searched)
    assert set(plan.KNOB["recompute"].choices) == set(_table.RECOMPUTE_MODES) | {"op"}
    assert set(plan.KNOB["recompute"].choices) == set(step._layers.RECOMPUTE_CODES)
    for name in plan.GRIDS:
        if plan.KNOB[name].search == "grid":
            assert plan.grid(name, None) == getattr(_settings.SearchSettings, name)


# -- keywords from the table ----------------------------------------------------------------

def test_signatures_list_the_knobs():
    for function, names in ((search.evaluate_point, plan.STRATEGY), (search.search, plan.GRIDS),
                            (step.training_step, plan.NAMES),
                            (launch.megatron_arguments, plan.NAMES)):
        params = inspect.signature(function).parameters
        for name in names:
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (function, name)
    params = inspect.signature(step.training_step).parameters
    assert params["recompute"].default == "full"
    assert params["tensor_parallel"].default is inspect.Parameter.empty
    assert inspect.signature(search.evaluate_point).parameters["zero_stage"].default == 0


def test_unknown_keywords_are_refused_by_name():
    with pytest.raises(TypeError, match="zero_stages"):
        search.evaluate_point("gpt2-xl", "a100-80g", 1, 1, 1, 1, False, zero_stages=1)
    with pytest.raises(TypeError, match="tensor_paralel"):
        step.training_step("gpt2-xl", "a100-80g", tensor_paralel=1, pipeline_parallel=1,
                           data_parallel=1, microbatch=1, global_batch=8)
    with pytest.raises(TypeError, match="global_batch"):
        step.training_step("gpt2-xl", "a100-80g", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=1, microbatch=1)


def test_grids_check_by_the_table():
    assert plan.grid("sequence_parallel", None) == (False, True)
    assert plan.grid("zero_stage", None) == (0, 1, 2, 3)
    assert plan.grid("virtual_stages", None) is None
    assert plan.grid("zero_stage", (3, 0, 3)) == (0, 3)
    assert plan.grid("overlap_grad_reduce", True) == (True,)
    for name, bad in (("zero_stage", 4), ("zero_stage", True), ("context_parallel", (0,)),
                      ("flash_attention", ()), ("sequence_parallel", "yes")):
        with pytest.raises(ValueError) as err:
            plan.grid(name, bad)
        assert str(err.value).startswith(name + " must be ") and "\n" not in str(err.value)


# -- the launchability rules, against a slow naive restatement ------------------------------

def _naive_trainers(p, v, zero, cp, d=1, t=1):
    """The rules as docs/design.md and the launch module state them, written out."""
    out = []
    # its distributed optimizer is ZeRO-1; ZeRO 2-3 are Megatron-FSDP, without pipelines
    megatron_ok = zero in (0, 1) or p == 1
    if megatron_ok:
        out.append("megatron-lm")
    deepspeed_ok = True
    if v != 1:                                       # no interleaved schedule
        deepspeed_ok = False
    if cp != 1:                                      # no ring attention
        deepspeed_ok = False
    if zero in (2, 3) and p != 1:                    # ZeRO 2-3 refuse pipeline parallelism
        deepspeed_ok = False
    if deepspeed_ok:
        out.append("deepspeed")
    # torchtitan: FSDP2 with any p, v, cp; DDP (ZeRO 0) on a one-dimensional mesh only
    if zero == 3 or (zero == 0 and cp == 1 and (d == 1 or t * p == 1)):
        out.append("torchtitan")
    return tuple(out)


def test_trainers_equal_the_naive_rules():
    for p, v, zero, cp in itertools.product((1, 2, 3, 8), (1, 2, 4), (0, 1, 2, 3), (1, 2, 4)):
        assert plan.trainers(pipeline_parallel=p, virtual_stages=v, zero_stage=zero,
                             context_parallel=cp) == _naive_trainers(p, v, zero, cp)


def test_launchable_is_the_search_kernels_filter():
    """best_plans' launchable filter (step._kernels: drop ZeRO 2 over more than one rank
    with pipeline or context parallelism; ZeRO 3 there is torchtitan's FSDP2) is "some
    trainer launches it", ZeRO over a single rank being stage 0; interleaving needs
    p >= 2, so v only matters with pipelines."""
    for p, v, zero, cp, d in itertools.product((1, 2, 4), (1, 2), (0, 1, 2, 3), (1, 2), (1, 2)):
        if p == 1 and v > 1:
            continue   # infeasible: interleaving needs pipeline parallelism
        kernel_keeps = not ((p > 1 or cp > 1) and cp * d > 1 and zero == 2)
        # Megatron-FSDP's ZeRO 2 beside context parallelism (p = 1) is launchable, though
        # the search's plan set does not hold it yet: the kernel keeps a subset
        fsdp_cp = p == 1 and cp > 1 and zero == 2
        assert plan.launchable(pipeline_parallel=p, virtual_stages=v, zero_stage=zero,
                               context_parallel=cp, data_parallel=d) == (kernel_keeps or fsdp_cp)


def test_training_step_records_the_rules():
    for zero, p, v in ((0, 2, 2), (1, 1, 1), (2, 1, 1), (3, 2, 1)):
        r = step.training_step("gpt2-xl", "a100-80g", tensor_parallel=1, pipeline_parallel=p,
                               data_parallel=2, microbatch=1, global_batch=8, zero_stage=zero,
                               virtual_stages=v)
        assert r.plan["trainers"] == _naive_trainers(p, v, zero, 1, d=2)


def test_launch_refuses_by_the_rules():
    """phaze.launch raises exactly the first rule's sentence (gpt2-xl: 48 layers, dense)."""
    kw = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=2, microbatch=1,
              global_batch=8)
    for trainer, emit_fn in (("megatron-lm", launch.megatron_arguments),
                             ("deepspeed", launch.deepspeed_arguments)):
        for zero, extra in itertools.product(range(4), ({}, dict(virtual_stages=2),
                                                        dict(pipeline_parallel=5))):
            given = {**kw, **extra, "zero_stage": zero}
            why = plan.refusal(trainer, dict(given, n_layers=48, n_experts=0, moe=False))
            if why is None:
                emit_fn("gpt2-xl", **given)
            else:
                with pytest.raises(launch.NotLaunchable) as err:
                    emit_fn("gpt2-xl", **given)
                assert str(err.value) == why


def test_trainer_argument_writers_match_the_documented_names():
    """Every flag a writer produces is among the arguments the knob's row names."""
    values = dict(plan.Plan(tensor_parallel=2, pipeline_parallel=2, context_parallel=2,
                            expert_parallel=2, virtual_stages=2, sequence_parallel=True,
                            recompute="full", zero_stage=1, flash_attention=True,
                            overlap_grad_reduce=True, capacity_factor=1.5,
                            precision="fp8").as_dict(), n_layers=8, moe=True,
                  config_path="ds.json")
    for trainer, field in (("megatron-lm", "megatron"), ("deepspeed", "deepspeed")):
        for name, write in plan.ARGUMENTS[trainer]:
            if name == plan.MODEL_ARGUMENTS:
                continue
            doc = getattr(plan.KNOB[name], field)
            for token in write(values):
                if token.startswith("--"):
                    assert token in doc, (trainer, name, token)
    assert {t.emit for t in plan.TRAINERS if t.emit} == set(launch.TRAINERS)
