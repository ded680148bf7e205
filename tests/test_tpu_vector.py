"""The TPU presets' vector units counted by their ALUs (docs/fidelity-sources.md §14, "Vector"):
8 sublanes x 128 lanes x 4 floating-point ALUs per (lane, sublane) = 4,096 per TensorCore, as
phaze counts a GPU's FP32 lanes; and what the count changes, priced by hand."""
import pytest

from phaze import cost, graph
from phaze.arch import resolve
from phaze.graph._ops import flash_keys

#: preset -> TensorCores per chip (one VPU each)
TPUS = {"tpu-v5e": 1, "tpu-v5p": 2, "tpu-v6e": 1, "tpu7x": 2}


@pytest.mark.parametrize("name,cores", sorted(TPUS.items()))
def test_vpu_counted_by_alus(name, cores):
    row = resolve(name).row
    assert int(row["num_vc"][0]) == cores
    assert int(row["vc_width"][0]) == 8 * 128 * 4


def test_study_tpuv4_keeps_its_lanes():
    # the study's architecture point (its area budget and --study results) is unchanged
    row = resolve("tpuv4").row
    assert (int(row["num_vc"][0]), int(row["vc_width"][0])) == (2, 128)


def _flash_forward_s(chip, row):
    mg = graph.build_layers("llama3-8b", 1, 4, sequence_parallel=True, flash_attention=True,
                            dtype="bf16", kernels="megatron")
    fwd = next(layer for layer in mg.layers if layer.kind == "block").forward
    _, intra = cost.op_latencies(fwd, row, model="calibrated",
                                 efficiency=chip.efficiency_set().row())
    return float(intra[list(fwd.names).index("flash_attn"), 0])


def test_flash_forward_on_v5p_is_array_bound_by_hand():
    # Llama 3 8B at t = 4 (8 heads of 128 per rank), s = 8,192, causal: 4·s·keys·d·heads
    # FLOPs at the rule's flash_fwd_efficiency of 8 arrays of 128x128 at 1.75 GHz, plus the
    # launch gap; the softmax epilogue on 2 x 4,096 ALUs stays below it
    chip = resolve("tpu-v5p")
    eff = chip.efficiency_set()
    flops = 4 * 8192 * flash_keys(8192, True) * 128 * 8
    peak = 8 * 128 * 128 * 2 * 1.75e9
    # at cuDNN's measured speed at 8K over its 16K one (529 / 539: the rule's shape curve
    # for a chip whose own kernel was not measured by shape, phaze.arch.attention_shape_factor)
    expected = flops / (peak * float(eff.flash_fwd_efficiency) * 529 / 539) + float(eff.launch_s)
    assert _flash_forward_s(chip, chip.row) == pytest.approx(expected, rel=2e-3)


def test_lanes_alone_made_the_epilogue_bind():
    # counted by its 128 lanes (the files before 3 Dec 2026) the VPU bound the same kernel
    # at well over 5x its array time
    chip = resolve("tpu-v5p")
    lanes_only = chip.row.copy()
    lanes_only["vc_width"] = 128
    assert _flash_forward_s(chip, lanes_only) > 5 * _flash_forward_s(chip, chip.row)
