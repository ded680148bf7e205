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


class _Tensor:
    """A stand-in tensor: shape and dtype only (measure's bookkeeping, not its numbers)."""

    def __init__(self, *shape, dtype="bf16"):
        self.shape, self.dtype = shape, dtype

    def to(self, dtype):
        return _Tensor(*self.shape, dtype=dtype)

    def t(self):
        return _Tensor(*reversed(self.shape), dtype=self.dtype)

    def copy_(self, other):
        assert other.shape == self.shape
        return self


def _fake_torch():
    """A module object with the PyTorch names ``measure`` uses, on no device: each call
    checks its operands' shapes; events time the host clock."""
    import contextlib
    import time
    import types

    torch = types.ModuleType("torch")
    torch.__version__ = "stand-in"
    torch.bfloat16, torch.float32, torch.float8_e4m3fn = "bf16", "fp32", "fp8"
    torch.version = types.SimpleNamespace(cuda="none")
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 0))

    def randn(*shape, device=None, dtype="bf16", requires_grad=False):
        return _Tensor(*shape, dtype=dtype)
    torch.randn = torch.empty = randn
    torch.ones = lambda *shape, device=None, dtype="fp32": _Tensor(*shape, dtype=dtype)
    torch.randn_like = lambda x, requires_grad=False: _Tensor(*x.shape, dtype=x.dtype)

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum):
        assert a.dtype == b.dtype == "fp8" and a.shape[1] == b.shape[0]
        return _Tensor(a.shape[0], b.shape[1])
    torch._scaled_mm = scaled_mm

    class Event:
        def __init__(self, enable_timing):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3 + 1e-3

    props = types.SimpleNamespace(name="Stand-in GPU", multi_processor_count=1,
                                  total_memory=1, L2_cache_size=50 * 2 ** 20)
    torch.cuda = types.SimpleNamespace(
        Event=Event, synchronize=lambda: None, is_available=lambda: True,
        device_count=lambda: 1, get_device_properties=lambda i: props,
        empty_cache=lambda: None)

    def linear(a, b):
        assert a.shape[1] == b.shape[1]
        return _Tensor(a.shape[0], b.shape[0])

    def sdpa(q, k, v, is_causal, enable_gqa):
        assert q.shape[-1] == k.shape[-1] and k.shape == v.shape
        assert enable_gqa == (q.shape[1] != k.shape[1]) and q.shape[1] % k.shape[1] == 0
        return _Tensor(*q.shape)
    functional = types.SimpleNamespace(linear=linear, scaled_dot_product_attention=sdpa)
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="flash", CUDNN_ATTENTION="cudnn")
    attention.sdpa_kernel = lambda backends: contextlib.nullcontext()
    nn = types.ModuleType("torch.nn")
    nn.functional, nn.attention = functional, attention
    torch.nn = nn
    torch.autograd = types.SimpleNamespace(grad=lambda out, inputs, grad: tuple(inputs))
    return {"torch": torch, "torch.nn": nn, "torch.nn.attention": attention}


def test_measure_records_every_case_of_the_plan(tmp_path, monkeypatch):
    # no GPU here: a stand-in PyTorch runs measure's loops, so that the one device run a
    # session gets cannot die on its bookkeeping (names, shapes, the file it writes)
    for name, module in _fake_torch().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(dc.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError()))
    monkeypatch.setattr(dc.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError()))
    out = dc.measure(tmp_path, reps=2, warmup=1, sustain=0.6)
    plan = json.loads(dc.PLAN_PATH.read_text())
    saved = json.loads((tmp_path / "device_check.json").read_text())
    assert saved["gemm"] == out["gemm"]
    assert len(out["gemm"]) == 3 * len(plan["gemm"])          # bf16, fp8 fast, fp8 split
    assert all("seconds" in r and "error" not in r for r in out["gemm"])
    assert len(out["attention"]) == 2 * len(plan["attention"])
    assert all(r["fwd_seconds"] > 0 and "error" not in r for r in out["attention"])
    assert [r["bytes"] for r in out["copy"]] == plan["copy_bytes"]
    assert set(out["sustained"]) == {"bf16", "fp8"}
    assert out["sustained"]["bf16"]["tflops_per_half_second"]
    assert out["nccl"] == {"note": "1 GPU: no collective to time"}
    assert out["env"]["gpu"] == "Stand-in GPU" and "not read" in out["env"]["nvidia_smi"]
    # and compare reads the file it wrote (on the arch named: the stand-in has no preset)
    res = dc.compare(saved, "h200")
    assert len([r for r in res["rows"] if r["group"].startswith("gemm")]) == len(out["gemm"])
