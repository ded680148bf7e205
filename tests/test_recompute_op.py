"""torchtitan's per-op selective activation checkpointing (``recompute="op"``; issue 25):
what it re-runs — the forward's elementwise operators and every second matmul, by
torchtitan's ``_custom_policy`` — against a hand sum of the priced operators, and what it
keeps in memory."""
import pytest

from phaze import graph, launch, plan, step
from phaze.arch import presets
from phaze.step import _layers, _model

KW = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=2,
          global_batch=16, flash_attention=True, zero_stage=3)


def test_shares_of_the_llama_matmuls():
    spec = __import__("phaze").models.get("llama3-8b")
    shares = _layers.op_recompute_shares(spec)
    # wq wk wv wo w1 w3 w2: the 2nd, 4th and 6th re-run — wk (1024 of qkv's 6144 columns),
    # wo, w3 (half of the fused gate+up fc1)
    assert shares["qkv_proj"] == pytest.approx(1024 / 6144)
    assert shares["out_proj"] == 1.0 and shares["fc1"] == 0.5 and shares["fc2"] == 0.0


def test_recompute_time_is_the_hand_sum():
    row = presets.get("h100-96g")
    r = step.training_step("llama3-8b", row, recompute="op", **KW)
    assert r.ok, r.reason
    mg = graph.build_layers("llama3-8b", 2, 1, flash_attention=True, kernels="megatron")
    g = mg.kinds()["block"].forward
    eff = __import__("phaze").arch.efficiency.get("h100-96g")
    sec, index = _model._op_seconds(g, row, eff, 1)
    want = sum(sec[index[n]] for n in ("ln1", "rotary", "residual1", "ln2", "swiglu",
                                       "residual2"))
    want += sec[index["qkv_proj"]] * 1024 / 6144 + sec[index["out_proj"]] \
        + 0.5 * sec[index["fc1"]]
    assert r.breakdown.recompute_s == pytest.approx(32 * want, rel=1e-9)
    none = step.training_step("llama3-8b", row, recompute="none", **KW)
    full = step.training_step("llama3-8b", row, recompute="full", **KW)
    assert none.time_s < r.time_s < full.time_s
    mem = [x.peak_memory.activations for x in (none, r, full)]
    assert mem[0] > mem[1] > mem[2]


def test_trainers_and_launch():
    values = dict(KW, recompute="op", n_layers=32, n_experts=0, moe=False)
    assert plan.refusal("megatron-lm", values, ("trainer",)) is not None
    assert plan.refusal("deepspeed", values, ("trainer",)) is not None
    text = launch.emit("torchtitan", "llama3-8b", recompute="op", **KW)
    text = text if isinstance(text, str) else "\n".join(map(str, text))
    assert 'selective_ac_option = "op"' in text and 'mode = "selective"' in text


def test_evaluate_takes_op_and_search_says_it_is_not_searched():
    from phaze import search
    r = search.evaluate_point("llama3-8b", "h100-96g", 1, 1, 8, 1, "op", global_batch=16,
                              zero_stage=3, flash_attention=True)
    assert r["feasible"] and r["recompute"] == "op"
    with pytest.raises(ValueError, match="not searched"):
        search.search("llama3-8b", space="h100-sxm", devices=8, recompute="op")
