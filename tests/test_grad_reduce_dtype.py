"""The knob ``grad_reduce_dtype`` (phaze.plan): the datatype of the data-parallel gradient
reduction and of the gradient buffer (Megatron-Core's ``grad_reduce_in_fp32``, DeepSpeed's
``communication_data_type``, torchtitan's ``mixed_precision_reduce``). Magnitudes by hand:
the reduction's bytes and its α–β seconds, the gradient memory per GPU; the CLI flag, the
launch arguments, one-sentence refusals; the default leaves every number as it was."""
import dataclasses
import json

import numpy as np
import pytest

from phaze import cli, collectives, graph, launch, models, plan, search, step
from phaze.arch import resolve
from phaze.models import ModelSpec
from phaze.step import _layers, _model

CHIP = resolve("a100-80g")
MODEL = "megatron-1.7b"
#: ZeRO 1 over d = 16 (t = p = 1): one reduce-scatter of the gradients over 16 ranks on two
#: nodes of 8, then the all-gather of the updated 16-bit parameters.
ZERO1 = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=16, microbatch=1,
             global_batch=16, recompute="full", zero_stage=1)
#: ZeRO 0 with two stages: each stage's all-reduce over its 8 data-parallel ranks (one
#: node each), and the tied word-embedding all-reduce between the first and last stage.
ZERO0 = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=8, microbatch=1,
             global_batch=16, recompute="full", zero_stage=0)
MOE = ModelSpec(name="moe-4x2", n_layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=256,
                vocab=500, seq_len=64, n_experts=4, experts_per_token=2, expert_ffn_hidden=96,
                first_dense_layers=1, activation="swiglu", norm="rmsnorm", position="rotary",
                bias=False)
TINY = ModelSpec(name="tiny", n_layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                 vocab=512, seq_len=64)


def _fabric(per_node=8):
    """The a100-80g row's collective parameters, formed as phaze.step forms them for a
    group with ``per_node`` ranks in each node: between nodes over their NICs (one per
    GPU), at most the in-node link's bandwidth."""
    eff, row = CHIP.efficiency_set(), CHIP.row
    link_bw = eff.link_efficiency * float(row["link_gb_per_s"][0]) * 1e9
    net_bw = eff.net_efficiency * float(row["net_gb_per_s"][0]) * 1e9
    return collectives.fabric(
        coll_latency_s=eff.coll_latency_s, link_step_s=eff.link_step_s,
        net_step_s=eff.net_step_s, link_bw=link_bw,
        net_bw=min(per_node * net_bw, link_bw) if per_node > 1 else net_bw)


def _naive_ring(nbytes, n, nodes, passes, fab):
    """NCCL's ring by hand: α = latency + in-node steps · link step + node-crossing steps ·
    net step; β = passes · (n − 1)/n of the bytes over the slowest tier crossed."""
    steps = passes * (n - 1)
    crossing = passes * (nodes - 1)
    alpha = (float(fab["coll_latency_s"]) + (steps - crossing) * float(fab["link_step_s"])
             + crossing * float(fab["net_step_s"]))
    bw = float(fab["net_bw"] if nodes > 1 else fab["link_bw"])
    return alpha, steps / n * nbytes / bw


def _step(model=MODEL, **kw):
    r = step.training_step(model, CHIP, **kw)
    assert r.ok, r.reason
    return r


# ---------------------------------------------------------------------------
# magnitudes by hand
# ---------------------------------------------------------------------------

def test_zero1_reduce_scatter_moves_half_the_bytes_at_the_alpha_beta_price():
    fp32, bf16 = _step(**ZERO1), _step(**ZERO1, grad_reduce_dtype="bf16")
    m32, m16 = fp32.memory[0], bf16.memory[0]
    assert m32.gradients % 4 == 0
    n_local = m32.gradients // 4            # parameters of the stage's slice (ZeRO 1: unsharded)
    assert n_local == m32.weights // 2      # the same slice as the 16-bit weights
    fab = _fabric()
    gather = collectives.all_gather_seconds(2 * n_local, 16, 2, fab)
    for res, gb in ((fp32, 4), (bf16, 2)):
        rs = collectives.reduce_scatter_seconds(gb * n_local, 16, 2, fab)
        assert res.breakdown.dp_allreduce_s == rs + gather
        alpha, beta = _naive_ring(gb * n_local, 16, 2, 1, fab)
        assert rs == pytest.approx(alpha + beta, rel=1e-13)
    # the bf16 reduce-scatter moves exactly half the fp32 bytes: its β halves, α stays
    alpha, beta32 = _naive_ring(4 * n_local, 16, 2, 1, fab)
    _, beta16 = _naive_ring(2 * n_local, 16, 2, 1, fab)
    assert beta16 == beta32 / 2
    saved = fp32.breakdown.dp_allreduce_s - bf16.breakdown.dp_allreduce_s
    assert saved == pytest.approx(beta32 / 2, rel=1e-9)
    # memory: the gradient buffer drops by exactly 2 B per local parameter, nothing else moves
    assert m32.gradients - m16.gradients == 2 * n_local
    assert m32.total - m16.total == 2 * n_local
    for f in ("weights", "optimizer_state", "activations", "activations_other", "workspace",
              "in_flight"):
        assert getattr(m16, f) == getattr(m32, f)
    assert m32.layer_param_state - m16.layer_param_state > 0
    # the pipeline is untouched; the optimizer steps on an fp32 copy of its shard of the
    # 16-bit buffer (read 2 + write 4 B, zeroing 2 B instead of 4: + 4 B of HBM traffic)
    for f in ("pipeline_s", "embedding_allreduce_s", "slot_s"):
        assert getattr(bf16.breakdown, f) == getattr(fp32.breakdown, f)
    hbm_bw = CHIP.efficiency_set().hbm_efficiency * float(CHIP.row["hbm_gb_per_s"][0]) * 1e9
    assert bf16.breakdown.optimizer_s - fp32.breakdown.optimizer_s == pytest.approx(
        n_local / 16 * 4 / hbm_bw, rel=1e-9)


def test_zero0_all_reduce_and_tied_embedding_all_reduce_by_hand():
    fab = _fabric()
    spec = models.resolve(MODEL)
    word = -(-spec.vocab // 1) * spec.embed_width
    for name, gb in (("fp32", 4), ("bf16", 2), ("fp16", 2)):
        precision = "fp16" if name == "fp16" else "bf16"
        r = _step(**ZERO0, grad_reduce_dtype=name, precision=precision)
        per_stage = []
        for mem in r.memory:
            assert mem.gradients % gb == 0
            n_local = mem.gradients // gb
            per_stage.append(collectives.all_reduce_seconds(gb * n_local, 8, 1, fab))
            alpha, beta = _naive_ring(gb * n_local, 8, 1, 2, fab)
            assert per_stage[-1] == pytest.approx(alpha + beta, rel=1e-13)
        assert r.breakdown.dp_allreduce_s == max(per_stage)
        # ranks 0 and 8 of the tied embedding sit on two nodes of 8
        assert r.breakdown.embedding_allreduce_s == collectives.all_reduce_seconds(
            gb * word, 2, 2, _fabric(per_node=1))     # one rank per node: one NIC
    r32 = _step(**ZERO0)
    r16 = _step(**ZERO0, grad_reduce_dtype="bf16")
    for a, b in zip(r32.memory, r16.memory):
        assert a.gradients == 2 * b.gradients


def test_expert_gradients_reduce_in_the_datatype_too():
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=4, expert_parallel=2,
              microbatch=1, global_batch=8, recompute="none", zero_stage=1)
    fp32, bf16 = _step(MOE, **kw), _step(MOE, **kw, grad_reduce_dtype="bf16")
    assert fp32.memory[0].gradients == 2 * bf16.memory[0].gradients
    # dense parameters over the 4 data-parallel ranks, routed experts over the 2
    # expert-data-parallel ranks (all in one node): the slice by hand from the graphs
    kinds = graph.build_layers(MOE, 1, 1, kernels="megatron", expert_parallel=2).kinds()
    e = kinds["head"].forward.bytes_per_element
    n_moe = len(MOE.moe_layer_ids)
    dense = (kinds["embedding"].param_bytes + kinds["head"].param_bytes
             + (MOE.n_layers - n_moe) * kinds["block"].param_bytes
             + n_moe * (kinds["moe_block"].param_bytes - kinds["moe_block"].expert_param_bytes)
             ) // e
    expert = n_moe * kinds["moe_block"].expert_param_bytes // e
    assert fp32.memory[0].gradients == 4 * dense + 4 * expert
    fab = _fabric()
    for res, gb in ((fp32, 4), (bf16, 2)):
        red = collectives.reduce_scatter_seconds(gb * dense, 4, 1, fab)
        red += collectives.reduce_scatter_seconds(gb * expert, 2, 1, fab)
        red += collectives.all_gather_seconds(2 * dense, 4, 1, fab)
        red += collectives.all_gather_seconds(2 * expert, 2, 1, fab)
        assert res.breakdown.dp_allreduce_s == red


def test_zero2_per_microbatch_reduce_scatter_halves():
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
              global_batch=16, recompute="full", zero_stage=2)
    fp32, bf16 = _step(**kw), _step(**kw, grad_reduce_dtype="bf16")
    n_local = fp32.memory[0].weights // 2
    fab = _fabric()
    saved = (collectives.reduce_scatter_seconds(4 * n_local, 8, 1, fab)
             - collectives.reduce_scatter_seconds(2 * n_local, 8, 1, fab))
    # the slot holds one reduce-scatter per microbatch; two microbatches, no bubble (p = 1)
    assert fp32.breakdown.slot_s - bf16.breakdown.slot_s == pytest.approx(saved, rel=1e-9)
    assert fp32.breakdown.microbatches == 2
    assert fp32.memory[0].gradients == int(4 * n_local / 8)
    assert bf16.memory[0].gradients == int(2 * n_local / 8)


# ---------------------------------------------------------------------------
# the default is today's model
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [ZERO1, ZERO0, dict(ZERO0, precision="fp16")])
def test_default_leaves_training_step_identical(kw):
    a, b = _step(**kw), _step(**kw, grad_reduce_dtype="fp32")
    assert a.time_s == b.time_s and a.breakdown == b.breakdown and a.memory == b.memory
    assert a.plan == b.plan and a.plan["grad_reduce_dtype"] == "fp32"
    assert _model.GRAD_BYTES_PER_PARAM == 4 == _layers.GRAD_REDUCE_BYTES["fp32"]
    assert plan.Plan().grad_reduce_dtype == "fp32" and plan.KNOB["grad_reduce_dtype"].study == "fp32"


def test_best_plans_takes_the_knob_and_matches_training_step():
    rows = CHIP.row
    kw = dict(devices=16, global_batch=32, microbatch=1, recompute="full", tensor_parallel=(1, 2))
    base = step.best_plans(TINY, rows, **kw)
    same = step.best_plans(TINY, rows, **kw, grad_reduce_dtype="fp32")
    assert base.tobytes() == same.tobytes()
    half = step.best_plans(TINY, rows, **kw, grad_reduce_dtype="bf16")
    # a latency-bound reduction saves little; the optimizer's fp32 copy costs: either way
    assert half["feasible"][0] and half["time_s"][0] != base["time_s"][0]
    h = half[0]
    r = step.training_step(
        TINY, CHIP, tensor_parallel=int(h["tensor_parallel"]),
        pipeline_parallel=int(h["pipeline_parallel"]), data_parallel=int(h["data_parallel"]),
        microbatch=1, global_batch=32, recompute="full",
        virtual_stages=int(h["virtual_stages"]), zero_stage=int(h["zero_stage"]),
        sequence_parallel=bool(h["sequence_parallel"]),
        flash_attention=bool(h["flash_attention"]),
        overlap_grad_reduce=bool(h["overlap_grad_reduce"]), grad_reduce_dtype="bf16")
    assert r.time_s == h["time_s"] and r.peak_memory.total == h["memory_bytes"]


def test_a_datatype_megatron_refuses_leaves_deepspeeds_plans():
    rows = CHIP.row
    kw = dict(devices=16, global_batch=32, microbatch=1, recompute="full",
              tensor_parallel=(1,), virtual_stages=(1, 2), zero_stage=(0, 1))
    mixed = step.best_plans(TINY, rows, **kw, grad_reduce_dtype="fp16")   # bf16 training
    assert mixed["feasible"][0] and mixed["virtual_stages"][0] == 1
    assert mixed["context_parallel"][0] == 1
    assert plan.trainers(precision="bf16", grad_reduce_dtype="fp16") == ("deepspeed",)
    assert plan.trainers(precision="fp16", grad_reduce_dtype="fp16") == ("megatron-lm",
                                                                         "deepspeed")
    assert plan.trainers(precision="fp8", grad_reduce_dtype="bf16") == ("megatron-lm",
                                                                        "deepspeed")
    r = _step(**ZERO1, grad_reduce_dtype="bf16", precision="fp16")
    assert r.plan["trainers"] == ("deepspeed",)


def test_search_passes_the_knob_to_best_plans():
    rows = CHIP.row
    kw = dict(devices=16, global_batch=32, microbatch=(1,), hbm_gib=(1.0,),
              tensor_parallel=(1, 2), executor="serial", progress=False, baselines=False)
    a = search.search(TINY, space=rows, **kw)
    b = search.search(TINY, space=rows, **kw, grad_reduce_dtype="bf16")
    assert b.metadata["strategy_grids"]["grad_reduce_dtype"] == "bf16"
    assert a.metadata["strategy_grids"]["grad_reduce_dtype"] == "fp32"
    assert len(b.table["recompute"]) == 3
    for res, dtype in ((a, "fp32"), (b, "bf16")):
        for rc, t_s in zip(res.table["recompute"], res.table["time_per_batch_s"]):
            best = step.best_plans(TINY, rows, devices=16, global_batch=32, microbatch=1,
                                   recompute=str(rc), hbm_bytes=2.0 ** 30,
                                   tensor_parallel=(1, 2), grad_reduce_dtype=dtype)
            assert t_s == best["time_s"][0]
    assert list(a.table["time_per_batch_s"]) != list(b.table["time_per_batch_s"])
    with pytest.raises(ValueError, match="grad_reduce_dtype") as exc:
        search.search(TINY, space=rows, **kw, grad_reduce_dtype="fp8")
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="gradient-reduction datatype"):
        search.search(TINY, space=rows, **dict(kw, study=True), grad_reduce_dtype="bf16")


# ---------------------------------------------------------------------------
# bad values, the CLI, the launch arguments
# ---------------------------------------------------------------------------

def test_bad_values_are_one_sentence():
    for call in (lambda: plan.Plan(grad_reduce_dtype="fp8"),
                 lambda: step.training_step(MODEL, CHIP, **ZERO1, grad_reduce_dtype="int8"),
                 lambda: step.best_plans(TINY, CHIP.row, devices=8, global_batch=8, microbatch=1,
                                         grad_reduce_dtype="float32")):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert msg.startswith("grad_reduce_dtype must be one of fp32, bf16, fp16, got ")
        assert "\n" not in msg
    with pytest.raises(ValueError, match="gradient-reduction datatype choice"):
        search.evaluate_point(MODEL, "a100-80g", 1, 1, 16, 1, "full", global_batch=16,
                              study=True, grad_reduce_dtype="bf16")


def _cli(capsys, argv):
    try:
        rc = cli.main(argv)
    except SystemExit as exc:   # argparse's refusal of a value outside the choices
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


EVAL = ["evaluate", "--model", MODEL, "--arch", "a100-80g", "--tp", "1", "--pp", "1", "--dp",
        "16", "--microbatch", "1", "--global-batch", "16", "--recompute", "full",
        "--zero-stage", "1"]


def test_cli_flag_json_and_text(capsys):
    rc, out, _ = _cli(capsys, EVAL + ["--grad-reduce-dtype", "bf16", "--json"])
    assert rc == 0
    r = json.loads(out)
    assert r["grad_reduce_dtype"] == "bf16"
    expected = _step(**ZERO1, grad_reduce_dtype="bf16")
    assert r["breakdown"]["gradient_reduction_s"] == expected.breakdown.dp_allreduce_s
    assert r["stages"][0]["gradients_gib"] == expected.memory[0].gradients / 2 ** 30
    rc, out, _ = _cli(capsys, EVAL + ["--json"])
    assert rc == 0 and json.loads(out)["grad_reduce_dtype"] == "fp32"
    rc, out, _ = _cli(capsys, EVAL + ["--grad-reduce-dtype", "fp16"])
    assert rc == 0 and "gradient reduction fp16" in out and "launchable by: DeepSpeed" in out
    rc, _, err = _cli(capsys, EVAL + ["--grad-reduce-dtype", "fp8"])
    assert rc == 2 and "--grad-reduce-dtype" in err
    rc, _, err = _cli(capsys, EVAL[:-2] + ["--grad-reduce-dtype", "bf16", "--study"])
    assert rc == 2 and "--grad-reduce-dtype" in err


def test_cli_search_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    assert "--grad-reduce-dtype" in capsys.readouterr().out


def test_megatron_arguments():
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
                global_batch=64)
    bf16 = launch.megatron_arguments("gpt2-xl", **base)
    assert "--grad-reduce-in-bf16" not in bf16          # --bf16 reduces in fp32 by default
    assert "--accumulate-allreduce-grads-in-fp32" not in bf16
    assert launch.megatron_arguments("gpt2-xl", **base, grad_reduce_dtype="bf16") == \
        bf16 + ["--grad-reduce-in-bf16"]
    fp16 = launch.megatron_arguments("gpt2-xl", **base, precision="fp16", grad_reduce_dtype="fp16")
    assert "--fp16" in fp16 and "--accumulate-allreduce-grads-in-fp32" not in fp16
    assert launch.megatron_arguments("gpt2-xl", **base, precision="fp16") == \
        fp16 + ["--accumulate-allreduce-grads-in-fp32"]
    fp8 = launch.megatron_arguments("gpt2-xl", **base, precision="fp8", grad_reduce_dtype="bf16")
    assert fp8[-1] == "--grad-reduce-in-bf16" and "--fp8-format" in fp8
    for precision, dtype in (("bf16", "fp16"), ("fp8", "fp16"), ("fp16", "bf16")):
        with pytest.raises(launch.NotLaunchable) as exc:
            launch.megatron_arguments("gpt2-xl", **base, precision=precision,
                                      grad_reduce_dtype=dtype)
        msg = str(exc.value)
        assert msg.startswith("Megatron-Core reduces gradients in fp32 or in the parameters' "
                              "datatype") and f"not in {dtype}" in msg and "\n" not in msg


def test_deepspeed_config_and_emit_text():
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
                global_batch=64)
    for precision, dtype in (("bf16", "fp32"), ("bf16", "bf16"), ("bf16", "fp16"),
                             ("fp16", "fp32"), ("fp16", "fp16")):
        _, cfg = launch.deepspeed_arguments("gpt2-xl", **base, precision=precision,
                                            grad_reduce_dtype=dtype)
        assert cfg["communication_data_type"] == dtype
    text = launch.emit("deepspeed", "gpt2-xl", **base, grad_reduce_dtype="bf16")
    assert '"communication_data_type": "bf16"' in text
    text = launch.emit("megatron", "gpt2-xl", **base, grad_reduce_dtype="bf16")
    assert text.rstrip().endswith("--grad-reduce-in-bf16")


def test_the_row_names_every_trainer():
    k = plan.KNOB["grad_reduce_dtype"]
    assert k.choices == ("fp32", "bf16", "fp16") and k.default == "fp32"
    assert k.flag == "--grad-reduce-dtype" and k.search == "one" and not k.column
    assert "grad_reduce_in_fp32" in k.megatron and "--grad-reduce-in-bf16" in k.megatron
    assert "--accumulate-allreduce-grads-in-fp32" in k.megatron
    assert "communication_data_type" in k.deepspeed
    assert "mixed_precision_reduce" in k.torchtitan
    assert "grad_reduce_dtype" in plan.GRIDS and "grad_reduce_dtype" in plan.STRATEGY
    assert "grad_reduce_dtype" not in plan.COLUMNS
    assert plan.PLAN_RECORD_DTYPE["grad_reduce_dtype"] == np.dtype("<U4")
    p = plan.Plan(grad_reduce_dtype="bf16")
    assert plan.Plan.from_record(p.to_record()) == p
    assert dataclasses.replace(p, grad_reduce_dtype="fp16").grad_reduce_dtype == "fp16"


def test_the_summary_names_a_non_default_reduction_datatype():
    from phaze.search import cost_model_line

    grids = {"precision": "bf16", "capacity_factor": None, "grad_reduce_dtype": "bf16"}
    assert cost_model_line({"cost_model": "calibrated", "strategy_grids": grids}).endswith(
        "gradient reduction bf16")
    grids["grad_reduce_dtype"] = "fp32"       # the default is not repeated
    assert "gradient reduction" not in cost_model_line(
        {"cost_model": "calibrated", "strategy_grids": grids})
    grids["capacity_factor"] = 1.25
    assert cost_model_line({"cost_model": "calibrated", "strategy_grids": grids}).endswith(
        "MoE capacity factor 1.25")
