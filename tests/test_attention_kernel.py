"""The fused attention kernel a trainer runs (``attention_kernel``; phaze/arch/_attention.py,
docs/fidelity-sources.md §1.6): a chip's flash fractions are one kernel's; another kernel
is priced at its measured rate on the same die, by hand from the FlashAttention-3 paper's
H100 figures; a chip without a measurement refuses it in one sentence."""
import pytest

from phaze import arch, plan, step, validate

PEAK = 989.43e12


def test_rates_by_hand_on_gh100():
    h200 = arch.resolve("h200")
    own = h200.efficiency_set()
    assert arch.attention_efficiency(h200, "chip") is own
    assert arch.attention_efficiency(h200, "cudnn") is own          # its own kernel
    fa2 = arch.attention_efficiency(h200, "fa2")
    # FlashAttention-2 on H100 SXM: 335 TFLOP/s causal forward, 322 backward (16K tokens)
    # (the chip file states its peak to 7 digits: the ratio carries that rounding)
    assert fa2.flash_fwd_efficiency == pytest.approx(335e12 / PEAK, rel=1e-6)
    assert fa2.flash_bwd_efficiency == pytest.approx(322e12 / PEAK, rel=1e-6)
    fa3 = arch.attention_efficiency(h200, "fa3")
    assert fa3.flash_fwd_efficiency == pytest.approx(616e12 / PEAK, rel=1e-6)
    # every other parameter is the chip's own
    assert fa2.tile_efficiency == own.tile_efficiency and fa2.hbm_efficiency == own.hbm_efficiency
    # the 500 W part keeps its ratio to the measured part: its own kernel is FlashAttention-2
    h96 = arch.resolve("h100-96g")
    cud = arch.attention_efficiency(h96, "cudnn")
    assert cud.flash_fwd_efficiency == pytest.approx(
        h96.efficiency_set().flash_fwd_efficiency * 539 / 335, rel=1e-12)


def test_refused_where_not_measured():
    with pytest.raises(ValueError, match="'fa3' has no measurement on a100-80g"):
        arch.attention_efficiency(arch.resolve("a100-80g"), "fa3")
    with pytest.raises(ValueError, match="no measurement on b200"):
        step.training_step("llama3-8b", "b200", tensor_parallel=1, pipeline_parallel=1,
                           data_parallel=8, microbatch=1, global_batch=8, flash_attention=True,
                           attention_kernel="fa2")
    with pytest.raises(ValueError, match="attention_kernel must be one of chip, cudnn, fa2"):
        plan.check("attention_kernel", "flex")


def test_flash_operators_priced_at_the_kernel():
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, microbatch=1,
              global_batch=8, recompute="none", flash_attention=True)
    own = step.training_step("llama3-8b", "h100-sxm", **kw)
    fa2 = step.training_step("llama3-8b", "h100-sxm", attention_kernel="fa2", **kw)
    assert own.ok and fa2.ok
    assert fa2.time_s > own.time_s and fa2.plan["attention_kernel"] == "fa2"
    # without flash attention the knob changes nothing
    off = dict(kw, flash_attention=False)
    a = step.training_step("llama3-8b", "h100-sxm", **off)
    b = step.training_step("llama3-8b", "h100-sxm", attention_kernel="fa2", **off)
    assert a.time_s == b.time_s


def test_torchtitan_rows_run_flashattention2():
    rows = [r for r in validate.run().rows if r["trainer"] == "torchtitan"
            and r["error"] is not None]
    assert rows and all(r["config"]["attention_kernel"] == "fa2" for r in rows)
