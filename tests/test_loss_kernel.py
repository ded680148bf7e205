"""The head's cross-entropy as the trainers' kernels run it (plan knob ``loss_kernel``;
phaze/graph/_loss.py; docs/fidelity-sources.md §27): bytes per logit counted by hand from
Megatron-Core's and Transformer Engine's code, the step's time difference by hand, the
validation rows' settings, the Megatron arguments and the refusals."""
import json
from pathlib import Path

import pytest

from phaze import graph, plan, step, validate
from phaze.arch import efficiency, presets

DATA = Path(__file__).resolve().parent.parent / "phaze" / "data"

#: HBM bytes per logit element, forward + backward, counted in the code (16-bit logits):
#: native: .float() 2+4, max 4, subtract 4+4, exp 4+4, sum 4, divide 4+4 | mul_ 4+4,
#: autograd's cast 4+2; native-fused: max (with the cast) 2+4, subtract/exp/sum 4+4,
#: divide 4+4 | gradient 4+2; te: online softmax 2, loss and gradient 2+4 | element_mul
#: 4+4, cast 4+2; the study's single pass: 2+4 | 4+2.
BYTES_PER_LOGIT = {"native": 52, "native-fused": 28, "te": 22}
KERNELS_PER_STEP = {"native": 8, "native-fused": 4, "te": 4}


def _loss_ops(mg):
    head = [layer for layer in mg.layers if layer.kind == "head"][0]
    out = []
    for g in (head.forward, head.backward):
        out += [(n, int(bi) + int(bo)) for n, bi, bo in zip(g.names, g.bytes_in, g.bytes_out)
                if n.startswith("cross_entropy")]
    return out


@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("kernel", sorted(BYTES_PER_LOGIT))
def test_bytes_per_logit_by_hand(kernel, t):
    mg = graph.build_layers("llama3-8b", 1, t, kernels="megatron", loss_kernel=kernel)
    logits = 8192 * (128256 // t)          # 128256 = 1002 * 128: no padding at t = 1, 2
    ops = _loss_ops(mg)
    assert sum(b for _, b in ops) == BYTES_PER_LOGIT[kernel] * logits
    assert len(ops) == KERNELS_PER_STEP[kernel]
    assert graph.LOSS_KERNELS[kernel].bytes_per_logit(2) == BYTES_PER_LOGIT[kernel]


def test_the_default_and_the_study():
    assert graph.DEFAULT_LOSS_KERNEL == "native-fused" == plan.KNOB["loss_kernel"].default
    default = _loss_ops(graph.build_layers("llama3-8b", 1, 1, kernels="megatron"))
    fused = _loss_ops(graph.build_layers("llama3-8b", 1, 1, kernels="megatron",
                                         loss_kernel="native-fused"))
    assert default == fused
    # the study's graphs keep their one fused pass each way: 12 B per logit
    study = _loss_ops(graph.build_layers("llama3-8b", 1, 1))
    assert [n for n, _ in study] == ["cross_entropy", "cross_entropy.bwd"]
    assert sum(b for _, b in study) == 12 * 8192 * 128256
    with pytest.raises(ValueError, match="loss_kernel applies to kernels='megatron' only"):
        graph.build_layers("llama3-8b", 1, 1, loss_kernel="te")


def test_the_step_difference_by_hand():
    """Native minus native-fused on one H100, no data parallelism: per microbatch 24 B per
    logit more at the HBM rate and four more launches, m = 4 microbatches."""
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, microbatch=1,
              global_batch=4, recompute="none", flash_attention=True, precision="bf16")
    a = step.training_step("llama3-8b", "h100-sxm", loss_kernel="native", **kw)
    b = step.training_step("llama3-8b", "h100-sxm", loss_kernel="native-fused", **kw)
    assert a.ok and b.ok
    row, eff = presets.get("h100-sxm"), efficiency.get("h100-sxm")
    bw = float(row["hbm_gb_per_s"][0]) * 1e9 * eff.hbm_efficiency
    logits = 8192 * 128256
    per_microbatch = (52 - 28) * logits / bw + (8 - 4) * eff.launch_s
    assert a.time_s - b.time_s == pytest.approx(4 * per_microbatch, rel=1e-9)
    assert a.breakdown.slot_s - b.breakdown.slot_s == pytest.approx(per_microbatch, rel=1e-9)
    # the stash is the same fp32 tensor of the logits' size in every implementation
    assert [m.activations for m in a.memory] == [m.activations for m in b.memory]


def test_bad_values_are_one_sentence():
    with pytest.raises(ValueError, match=r"^loss_kernel must be one of native-fused, te, "
                                         r"native, got 'fused'$"):
        step.training_step("llama3-8b", "h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=1, microbatch=1, global_batch=1, loss_kernel="fused")


def test_megatron_arguments_and_refusal():
    values = {**plan.Plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                          microbatch=1, global_batch=8).as_dict()}
    writer = dict(plan.ARGUMENTS["megatron-lm"])["loss_kernel"]
    assert writer({**values, "loss_kernel": "native-fused"}) == [
        "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native"]
    assert writer({**values, "loss_kernel": "native"}) == []
    assert plan.launch_refusal("megatron-lm", {**values, "loss_kernel": "native"}) is None
    why = plan.launch_refusal("megatron-lm", {**values, "loss_kernel": "te"})
    assert why.startswith("Megatron-LM refuses --cross-entropy-fusion-impl te")
    assert "megatron-lm" not in plan.trainers(**{**values, "loss_kernel": "te"})


def test_validation_rows_carry_the_trainers_loss():
    rows = json.loads((DATA / "modern_runs.json").read_text())["rows"]
    by_table = {}
    for r in rows:
        by_table.setdefault(r["table"], set()).add(r.get("loss_kernel"))
    assert by_table["nemo_24_07_h100_fp8"] == {"native"}
    assert by_table["nemo_user_guide_25_02_25_04"] == {"native-fused", "te"}
    for r in rows:   # NeMo 25.04's performance scripts select TE's kernel, 25.02's do not
        if r["table"] == "nemo_user_guide_25_02_25_04":
            assert r["loss_kernel"] == ("te" if r["name"].startswith("nemo-25.04/")
                                        else "native-fused")
    old = json.loads((DATA / "validation.json").read_text())["rows"]
    assert {r.get("loss_kernel") for r in old if r["kind"] == "time"} == {"native"}
    # validate prices a row at its loss kernel: the GPT-3 5B row as training_step does
    report = validate.run()
    got = {r["name"]: r for r in report.rows}["nemo-24.07/gpt3-5b/64gpu-t1p1c1v1-b4-B2048"]
    row = [r for r in rows if r["name"] == "nemo-24.07/gpt3-5b/64gpu-t1p1c1v1-b4-B2048"][0]
    res = step.training_step(
        "gpt3-5b", "h100-sxm", tensor_parallel=1, pipeline_parallel=1, data_parallel=64,
        microbatch=4, global_batch=2048, recompute="none", flash_attention=True,
        precision="fp8", zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True,
        grad_reduce_dtype="bf16", loss_kernel="native")
    assert row["loss_kernel"] == "native"
    assert got["predicted_s"] == pytest.approx(res.time_s, rel=1e-12)
