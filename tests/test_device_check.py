"""bench/device_check.py, the prepared device script (issue 25 item 4): the committed plan is
the zoo's shapes, and ``compare`` prices each measured case as phaze's calibrated model does,
checked by hand (copy bytes at the HBM rule, a GEMM and a fused attention call at their
fractions), with the error priced / measured − 1. The device half (``measure``) needs a GPU;
here only its refusal without PyTorch is tested."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from phaze.arch import efficiency, presets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import device_check as dc  # noqa: E402


def test_committed_plan_is_the_zoos():
    assert json.loads(dc.PLAN_PATH.read_text()) == dc.build_plan()


def test_plan_shapes_by_hand():
    plan = dc.build_plan()
    g = {c["name"]: (c["m"], c["k"], c["n"]) for c in plan["gemm"]}
    # llama3-8b: hidden 4096, 32 heads of 128 with 8 key/value heads, SwiGLU FFN 14336
    assert g["llama3-8b/t1/qkv/fprop"] == (8192, 4096, (32 + 2 * 8) * 128)
    assert g["llama3-8b/t1/fc1/fprop"] == (8192, 4096, 2 * 14336)
    assert g["llama3-8b/t1/fc2/dgrad"] == (8192, 4096, 14336)
    assert g["llama3-8b/t1/fc2/wgrad"] == (14336, 8192, 4096)
    # gpt3-175b at t = 8: 96 heads of 128, GELU FFN 4 h
    assert g["gpt3-175b/t8/qkv/fprop"] == (8192, 12288, 3 * 12288 // 8)
    # its t = 8 FC2 is the t = 2 out projection's shape, timed once under that name
    assert g["gpt3-175b/t2/out/fprop"] == (8192, 4 * 12288 // 8, 12288)
    assert "gpt3-175b/t8/fc2/fprop" not in g
    assert len(set(g.values())) == len(g)   # each shape timed once
    a = {c["name"]: c for c in plan["attention"]}
    assert (a["llama3-70b/t8"]["heads"], a["llama3-70b/t8"]["kv_heads"]) == (8, 1)
    s = a["fa3-sweep/d64/s2048/causal"]
    assert s["batch"] * s["seq"] == 16384 and s["heads"] * s["head_dim"] == 2048


def _result(gemm=(), attention=(), copy=()):
    return dict(env=dict(gpu="NVIDIA H200", torch="t", cuda="c", cudnn=0), gemm=list(gemm),
                attention=list(attention), copy=list(copy))


def test_copy_priced_at_the_hbm_rule_by_hand():
    nbytes = 2 ** 32
    out = dc.compare(_result(copy=[dict(bytes=nbytes, seconds=2.5e-3)]))
    assert out["arch"] == "h200"
    row = presets.get("h200")
    e = efficiency.get("h200")
    priced = 2 * nbytes / (e.hbm_efficiency * float(row["hbm_gb_per_s"][0]) * 1e9) + e.launch_s
    (r,) = out["rows"]
    assert r["priced_s"] == pytest.approx(priced, rel=1e-9)
    assert r["error"] == pytest.approx(priced / 2.5e-3 - 1, rel=1e-12)
    assert out["groups"]["copy"]["cases"] == 1


def test_large_gemm_priced_near_the_tile_fraction():
    # 8192 x 8192 x 28672 bf16 (llama3-8b's FC1): the tile rule's losses are small here, so
    # the price is 2·M·K·N at about tile_efficiency × the 16-bit peak
    case = dict(name="x", m=8192, k=4096, n=28672, dtype="bf16", fast_accum=None,
                seconds=3e-3, **{"pass": "fprop"})
    (r,) = dc.compare(_result(gemm=[case]), "h200")["rows"]
    e = efficiency.get("h200")
    peak = 989.43e12 * float(presets.get("h200")["clock_ghz"][0]) / 1.83
    assert r["priced_s"] == pytest.approx(2 * 8192 * 4096 * 28672 / (e.tile_efficiency * peak),
                                          rel=0.06)
    assert r["group"] == "gemm bf16 fprop"


@pytest.mark.parametrize("backend,tflops", [("cudnn", 539e12), ("flash", 335e12)])
def test_attention_priced_at_the_kernels_measured_rate(backend, tflops):
    # the FlashAttention-3 paper's reference shape (causal, head dim 128, 16K): cuDNN 539 and
    # FlashAttention-2 335 TFLOP/s forward on the H100 SXM5, the H200's die at its clock
    case = dict(name="fa3", batch=1, heads=16, kv_heads=16, seq=16384, head_dim=128,
                causal=True, backend=backend, fwd_seconds=1e-3, bwd_seconds=3e-3)
    out = dc.compare(_result(attention=[case]), "h200")
    fwd = next(r for r in out["rows"] if "fwd" in r["group"])
    flops = 4.0 * 16 * 16384 ** 2 * 128 / 2
    assert fwd["priced_s"] == pytest.approx(flops / tflops, rel=0.03)
    assert {r["group"] for r in out["rows"]} == {f"attention {backend} fwd causal",
                                                  f"attention {backend} bwd causal"}
    assert "attention" in dc.format_compare(out)


def test_unknown_gpu_needs_arch():
    with pytest.raises(SystemExit, match="--arch"):
        dc.compare(_result() | dict(env=dict(gpu="Some Accelerator")))


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch installed")
def test_measure_without_torch_says_so(tmp_path):
    with pytest.raises(SystemExit, match="needs PyTorch"):
        dc.measure(tmp_path)
