"""Component measurements on a lent GPU, and phaze's prices beside them (issues 25 item 4
and 26; docs/fidelity-sources.md §8 item 6).

A session lent a device has 15 minutes of it, all tries together: this is the one short,
prepared script to spend them on. It times, at the shapes of the zoo's models, what the
calibrated model's efficiencies stand for, so that each fraction can be checked against a
measurement on the chip instead of a best-shape figure:

- GEMMs, bf16 and FP8 (``torch._scaled_mm``, with and without fast accumulation: TE runs
  Fprop with it, Dgrad and Wgrad without), each pass (fprop, dgrad, wgrad) of every linear
  layer of llama3-8b, llama3-70b and gpt3-175b at t = 1, 2, 4, 8 and 8K tokens;
- fused attention through ``scaled_dot_product_attention`` on its flash and cuDNN backends,
  forward and backward, causal and not, over the FlashAttention-3 paper's sweep (16K tokens,
  hidden 2048, head dimension 64 and 128, 512 … 16K) and the models' own shapes (GQA);
- device-to-device copies from 1 MiB to 4 GiB (the HBM fraction by size: §2's gap);
- one large GEMM held for ``--sustain`` seconds per datatype, with nvidia-smi's SM clock and
  power read beside it (the sustained clock under the power cap, which no best-shape
  figure shows);
- NCCL all-reduce, all-gather and reduce-scatter from 1 MiB to 1 GiB where the machine
  has two or more GPUs (one process per GPU).

Steps (the plan is written here, committed, and read there, so the device needs torch but
nothing of phaze)::

    python3 bench/device_check.py plan                 # writes bench/device_plan.json
    python3 bench/device_check.py measure --out "$OUT" # on the device: $OUT/device_check.json
    python3 bench/device_check.py compare FILE [--arch h200] [--json OUT]

``measure`` reads the card as it is found (no clock, power or mode is set); its timings are
CUDA events around each call, the median of ``--reps`` after warm-up, on random data, with
the inputs rotated among sets larger than the L2 where one set would fit in it. ``compare``
prices every measured case on the preset (``--arch``, or the one the GPU's name gives) with
``phaze.cost.op_latencies(model="calibrated")`` and prints measured, priced and the error
(priced / measured − 1) per case and per group.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAN_PATH = HERE / "device_plan.json"

#: Models whose linear layers and attention are timed, with the tensor-parallel degrees.
PLAN_MODELS = ("llama3-8b", "llama3-70b", "gpt3-175b")
PLAN_TP = (1, 2, 4, 8)
#: Tokens of one microbatch (M of the forward GEMMs).
PLAN_TOKENS = 8192
#: The FlashAttention-3 paper's sweep: batch × sequence = 16K tokens, hidden 2048.
FA3_TOKENS = 16384
FA3_HIDDEN = 2048
FA3_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
FA3_HEAD_DIMS = (64, 128)
#: Copy sizes, bytes (each copy reads and writes this many).
COPY_BYTES = tuple(2 ** k for k in range(20, 33, 2))
#: Collective sizes, bytes per rank.
NCCL_BYTES = tuple(2 ** k for k in range(20, 31, 2))
#: The sustained GEMM (M = N = K).
SUSTAIN_SIZE = 8192

#: GPU name (nvidia-smi / torch) → phaze preset, first match wins.
GPU_PRESETS = (("H200", "h200"), ("H100", "h100-sxm"), ("A100", "a100-80g"),
               ("GB200", "gb200"), ("B200", "b200"), ("B300", "b300"))

#: SDPA backend → the kernel of ``phaze.arch.attention_efficiency`` it runs (PyTorch's flash
#: backend is FlashAttention-2's kernels; the cuDNN backend cuDNN's fused attention).
BACKEND_KERNELS = {"flash": "fa2", "cudnn": "cudnn"}


# -- the plan (here, from the zoo) --------------------------------------------------------

def _linear_shapes(spec, t):
    """(layer, K, N) of the forward GEMMs of one block of ``spec`` on a t-way slice."""
    d = spec.hidden // spec.heads
    kv = spec.kv_heads or spec.heads
    ffn = spec.ffn_hidden
    gated = spec.activation in ("swiglu", "geglu")
    return (("qkv", spec.hidden, (spec.heads + 2 * kv) * d // t),
            ("out", spec.heads * d // t, spec.hidden),
            ("fc1", spec.hidden, (2 if gated else 1) * ffn // t),
            ("fc2", ffn // t, spec.hidden))


def build_plan() -> dict:
    """The cases ``measure`` times (JSON-ready), from phaze's zoo."""
    sys.path.insert(0, str(HERE.parent))
    from phaze import models

    gemms, attention, seen = [], [], set()
    for name in PLAN_MODELS:
        spec = models.get(name)
        for t in PLAN_TP:
            for layer, k, n in _linear_shapes(spec, t):
                m = PLAN_TOKENS
                # phaze's dims of the three passes (phaze.graph: .dX is (T, N, K), .dW (K, T, N))
                for p, dims in (("fprop", (m, k, n)), ("dgrad", (m, n, k)),
                                ("wgrad", (k, m, n))):
                    if dims in seen:
                        continue
                    seen.add(dims)
                    gemms.append(dict(name=f"{name}/t{t}/{layer}/{p}", m=dims[0], k=dims[1],
                                      n=dims[2], pass_=p))
        d = spec.hidden // spec.heads
        for t in (1, 8):
            if spec.heads % t:
                continue
            attention.append(dict(name=f"{name}/t{t}", batch=1, heads=spec.heads // t,
                                  kv_heads=max(1, (spec.kv_heads or spec.heads) // t),
                                  seq=spec.seq_len, head_dim=d, causal=True))
    for d in FA3_HEAD_DIMS:
        for s in FA3_SEQS:
            for causal in (True, False):
                attention.append(dict(name=f"fa3-sweep/d{d}/s{s}/{'causal' if causal else 'full'}",
                                      batch=FA3_TOKENS // s, heads=FA3_HIDDEN // d,
                                      kv_heads=FA3_HIDDEN // d, seq=s, head_dim=d,
                                      causal=causal))
    for n in gemms:   # "pass" is a keyword of Python, not of JSON
        n["pass"] = n.pop("pass_")
    return dict(schema="phaze.device_plan/1", gemm=gemms, gemm_dtypes=["bf16", "fp8"],
                attention=attention, attention_backends=sorted(BACKEND_KERNELS),
                copy_bytes=list(COPY_BYTES), nccl_bytes=list(NCCL_BYTES),
                sustain_size=SUSTAIN_SIZE)


def write_plan(path=PLAN_PATH) -> dict:
    plan = build_plan()
    Path(path).write_text(json.dumps(plan, indent=1) + "\n")
    return plan


# -- measuring (on the device) ------------------------------------------------------------

def _median_seconds(torch, fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return statistics.median(out)


def _sets(bytes_one, l2_bytes):
    """How many input sets to rotate so that the inputs do not sit in the L2."""
    return max(1, min(8, math.ceil(3 * l2_bytes / max(bytes_one, 1))))


def _env(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    env = dict(torch=torch.__version__, cuda=torch.version.cuda,
               cudnn=torch.backends.cudnn.version(), gpu=props.name,
               sms=props.multi_processor_count, memory_bytes=props.total_memory,
               l2_bytes=getattr(props, "L2_cache_size", 0), gpus=torch.cuda.device_count())
    q = "driver_version,power.limit,clocks.max.sm,clocks.sm,temperature.gpu"
    try:
        env["nvidia_smi"] = dict(zip(q.split(","), subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=30).stdout.strip().split(", ")))
    except (OSError, subprocess.SubprocessError) as e:
        env["nvidia_smi"] = f"not read: {e}"
    return env


#: How a GEMM record's accumulation is written: bf16 (None), FP8 fast or split (promoted).
_ACCUM = {None: "", True: "/fast", False: "/split"}


def _gemm_cases(torch, plan, reps, warmup, l2):
    out = []
    fp8_ok = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    one = torch.ones((), device="cuda", dtype=torch.float32)
    for case in plan["gemm"]:
        m, k, n = case["m"], case["k"], case["n"]
        for dtype in plan["gemm_dtypes"]:
            variants = [None] if dtype == "bf16" else [True, False]
            for fast in variants:
                rec = dict(case, dtype=dtype, fast_accum=fast)
                try:
                    size = (m * k + k * n) * (2 if dtype == "bf16" else 1)
                    sets = []
                    for _ in range(_sets(size, l2)):
                        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                        if dtype == "fp8":
                            if not fp8_ok:
                                raise RuntimeError("torch has no _scaled_mm / float8_e4m3fn")
                            a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
                        sets.append((a, b))
                    it = [0]

                    def run(sets=sets, dtype=dtype, fast=fast, it=it):
                        a, b = sets[it[0] % len(sets)]
                        it[0] += 1
                        if dtype == "bf16":
                            return torch.nn.functional.linear(a, b)   # a · bᵀ, TN
                        return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16, use_fast_accum=fast)
                    s = _median_seconds(torch, run, reps, warmup)
                    rec.update(seconds=s, tflops=2.0 * m * k * n / s / 1e12)
                    del sets
                except Exception as e:   # one case's failure is recorded, the rest go on
                    rec["error"] = f"{type(e).__name__}: {e}"[:300]
                out.append(rec)
        print(f"gemm {case['name']}: " + ", ".join(
            f"{r['dtype']}{_ACCUM[r['fast_accum']]} {r.get('tflops', float('nan')):.0f}"
            for r in out[-3:]), flush=True)
    return out


def _attention_cases(torch, plan, reps, warmup):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    out = []
    for case in plan["attention"]:
        b, hq, hkv, s, d = (case[x] for x in ("batch", "heads", "kv_heads", "seq", "head_dim"))
        flops = 4.0 * b * hq * s * s * d * (0.5 if case["causal"] else 1.0)
        for backend in plan["attention_backends"]:
            rec = dict(case, backend=backend, fwd_flops=flops, bwd_flops=2.5 * flops)
            try:
                q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16,
                                requires_grad=True)
                kk = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16,
                                 requires_grad=True)
                v = torch.randn_like(kk, requires_grad=True)
                do = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
                gqa = hq != hkv
                with sdpa_kernel([backends[backend]]):
                    def fwd():
                        return F.scaled_dot_product_attention(q, kk, v, is_causal=case["causal"],
                                                              enable_gqa=gqa)

                    def fwd_bwd():
                        o = fwd()
                        torch.autograd.grad(o, (q, kk, v), do)
                    tf = _median_seconds(torch, fwd, reps, warmup)
                    tfb = _median_seconds(torch, fwd_bwd, reps, warmup)
                rec.update(fwd_seconds=tf, bwd_seconds=tfb - tf,
                           fwd_tflops=flops / tf / 1e12,
                           bwd_tflops=2.5 * flops / (tfb - tf) / 1e12 if tfb > tf else None)
                del q, kk, v, do
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
            out.append(rec)
            print(f"attention {case['name']} {backend}: fwd "
                  f"{rec.get('fwd_tflops') or float('nan'):.0f} bwd "
                  f"{rec.get('bwd_tflops') or float('nan'):.0f} TFLOP/s"
                  + (f" ({rec['error'][:80]})" if "error" in rec else ""), flush=True)
    return out


def _copy_cases(torch, plan, reps, warmup, l2):
    out = []
    for nbytes in plan["copy_bytes"]:
        n = nbytes // 2
        sets = [(torch.randn(n, device="cuda", dtype=torch.bfloat16),
                 torch.empty(n, device="cuda", dtype=torch.bfloat16))
                for _ in range(_sets(2 * nbytes, l2))]
        it = [0]

        def run(sets=sets, it=it):
            src, dst = sets[it[0] % len(sets)]
            it[0] += 1
            dst.copy_(src)
        s = _median_seconds(torch, run, reps, warmup)
        out.append(dict(bytes=nbytes, seconds=s, bytes_per_s=2.0 * nbytes / s))
        print(f"copy {nbytes} B: {2 * nbytes / s / 1e12:.3f} TB/s (read + written)", flush=True)
        del sets
    return out


def _sustained(torch, plan, seconds, out_dir):
    """One large GEMM per datatype back to back for ``seconds``, the rate per half second,
    nvidia-smi's SM clock and power every 200 ms beside it."""
    size = plan["sustain_size"]
    result = {}
    for dtype in ("bf16", "fp8"):
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        if dtype == "fp8":
            if not hasattr(torch, "_scaled_mm"):
                continue
            a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)

        def run():
            if dtype == "bf16":
                return torch.nn.functional.linear(a, b)
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
        log = Path(out_dir) / f"smi_{dtype}.csv"
        smi, sink = None, open(log, "w")
        try:
            smi = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                 "--format=csv,noheader,nounits", "-lms", "200", "-i", "0"],
                stdout=sink, stderr=subprocess.DEVNULL)
        except OSError:
            pass
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        rates, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            calls = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.5:
                run()
                calls += 1
                if calls % 8 == 0:
                    torch.cuda.synchronize()
            e1.record()
            e1.synchronize()
            rates.append(2.0 * size ** 3 * calls / (e0.elapsed_time(e1) / 1e3) / 1e12)
        if smi is not None:
            smi.terminate()
            smi.wait(timeout=10)
        sink.close()
        samples = []
        if log.exists():
            for line in log.read_text().splitlines():
                parts = [x.strip() for x in line.split(",")]
                try:
                    samples.append(dict(clock_mhz=float(parts[1]), power_w=float(parts[2]),
                                        temp_c=float(parts[3])))
                except (IndexError, ValueError):
                    continue
        result[dtype] = dict(size=size, tflops_per_half_second=rates, smi=samples)
        print(f"sustained {dtype}: first {rates[0]:.0f}, last {rates[-1]:.0f} TFLOP/s; "
              f"SM clock {samples[-1]['clock_mhz'] if samples else '?'} MHz at the end",
              flush=True)
        del a, b
    return result


def _nccl_worker(rank, world, sizes, port, queue):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    res = []
    for nbytes in sizes:
        n = nbytes // 2
        n -= n % world
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        full = torch.empty(n * world, device="cuda", dtype=torch.bfloat16)
        part = torch.empty(n // world, device="cuda", dtype=torch.bfloat16)
        for name, fn, factor in (
                ("all_reduce", lambda: dist.all_reduce(x), 2.0 * (world - 1) / world),
                ("all_gather", lambda: dist.all_gather_into_tensor(full, x),
                 (world - 1) / world),
                ("reduce_scatter", lambda: dist.reduce_scatter_tensor(part, x),
                 (world - 1) / world)):
            s = _median_seconds(torch, fn, 10, 3)
            # busbw as nccl-tests defines it (doc/PERFORMANCE.md): algbw × factor, the
            # size being the full tensor (all-gather: the gathered one)
            size = 2 * n * (world if name == "all_gather" else 1)
            res.append(dict(op=name, bytes=size, seconds=s, busbw=size / s * factor))
    if rank == 0:
        queue.put(res)
    dist.destroy_process_group()


def _nccl_cases(torch, plan):
    world = torch.cuda.device_count()
    if world < 2:
        return dict(note=f"{world} GPU: no collective to time")
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_nccl_worker, args=(r, world, plan["nccl_bytes"], port, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    res = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return dict(world=world, results=res)


def measure(out_dir, *, reps=20, warmup=5, sustain=20.0, only=None) -> dict:
    """Time the plan's cases on GPU 0; writes and returns ``out_dir/device_check.json``."""
    try:
        import torch
    except ImportError:
        raise SystemExit("measure needs PyTorch with CUDA (run it on the device machine)")
    if not torch.cuda.is_available():
        raise SystemExit("measure needs a CUDA GPU: torch.cuda.is_available() is False")
    plan = json.loads(PLAN_PATH.read_text())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = _env(torch)
    l2 = env["l2_bytes"] or 64 * 2 ** 20
    print(json.dumps(env), flush=True)
    result = dict(schema="phaze.device_check/1", env=env, reps=reps, warmup=warmup,
                  started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    path = out_dir / "device_check.json"
    parts = (("copy", lambda: _copy_cases(torch, plan, reps, warmup, l2)),
             ("gemm", lambda: _gemm_cases(torch, plan, reps, warmup, l2)),
             ("attention", lambda: _attention_cases(torch, plan, reps, warmup)),
             ("sustained", lambda: _sustained(torch, plan, sustain, out_dir)),
             ("nccl", lambda: _nccl_cases(torch, plan)))
    for name, fn in parts:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as e:   # a part that fails leaves the parts before it written
            result[name] = dict(error=f"{type(e).__name__}: {e}"[:500])
        result.setdefault("part_seconds", {})[name] = time.perf_counter() - t0
        path.write_text(json.dumps(result, indent=1))   # written after every part
        torch.cuda.empty_cache()
    return result


# -- comparing (here, with phaze) ---------------------------------------------------------

def preset_for(gpu_name: str) -> str:
    for key, preset in GPU_PRESETS:
        if key.lower() in gpu_name.lower():
            return preset
    raise SystemExit(f"no phaze preset for GPU {gpu_name!r}; give --arch "
                     f"(one of {', '.join(p for _, p in GPU_PRESETS)})")


def _gemm_prices(arch, cases):
    """(case, phaze's seconds) of each measured GEMM on preset ``arch``
    (``bench_te_gemm.gemm_seconds``, the one-GEMM pricing the benchmarks share)."""
    from bench_te_gemm import gemm_seconds
    out = []
    for fp8 in (False, True):
        sel = [c for c in cases if (c["dtype"] == "fp8") == fp8]
        if sel:
            # operator names unique (a shape is timed with fast and split accumulation)
            lat = gemm_seconds(arch, [(f"g{i}", c["m"], c["k"], c["n"])
                                      for i, c in enumerate(sel)], fp8)
            out += list(zip(sel, (float(x) for x in lat)))
    return out


def _attention_price(arch, case, backend):
    """phaze's forward and backward seconds of ``case``'s fused attention on ``arch`` under
    the kernel ``backend`` runs (:data:`BACKEND_KERNELS`)."""
    from phaze import cost, graph, models
    from phaze.arch import attention_efficiency, attention_shape_kernel, resolve_chip
    chip = resolve_chip(arch)
    kernel = BACKEND_KERNELS[backend]
    eff = attention_efficiency(chip, kernel)
    d, hq, hkv = case["head_dim"], case["heads"], case["kv_heads"]
    spec = models.ModelSpec(name="attention", n_layers=1, hidden=hq * d, heads=hq,
                            kv_heads=hkv, ffn_hidden=4 * hq * d, vocab=32000,
                            seq_len=case["seq"], activation="swiglu", norm="rmsnorm",
                            position="rotary", bias=False, causal=case["causal"])
    block = next(lay for lay in graph.build_layers(spec, case["batch"], 1, flash_attention=True,
                                                   kernels="megatron").layers
                 if lay.kind == "block")
    out = []
    for g, name in ((block.forward, "flash_attn"), (block.backward, "flash_attn.bwd")):
        lat = cost.op_latencies(g, chip.row, model="calibrated", efficiency=eff,
                                flash_kernel=attention_shape_kernel(chip, kernel))[1]
        out.append(float(lat[g.names.index(name), 0]))
    return out


def _copy_price(arch, nbytes):
    from phaze import cost
    from phaze.arch import efficiency, presets
    from phaze.graph import OpGraph
    g = OpGraph.from_ops([dict(name="copy", kind=1, elements=nbytes // 2, bytes_in=nbytes,
                               bytes_out=nbytes)])
    return float(cost.op_latencies(g, presets.get(arch), model="calibrated",
                                   efficiency=efficiency.get(arch))[1][0, 0])


def _err(priced, measured):
    return priced / measured - 1.0


def compare(result: dict, arch=None) -> dict:
    """Every measured case beside phaze's price on ``arch`` (default: the GPU's preset):
    rows (group, name, measured_s, priced_s, error) and per group the median and mean
    absolute error."""
    sys.path[:0] = [str(HERE.parent), str(HERE)]   # phaze, and the benchmarks beside this
    arch = arch or preset_for(result["env"]["gpu"])
    rows = []
    gemms = [c for c in result.get("gemm", []) if "seconds" in c]
    for c, priced in _gemm_prices(arch, gemms):
        rows.append(dict(group=f"gemm {c['dtype']}{_ACCUM[c['fast_accum']]} {c['pass']}",
                         name=c["name"],
                         measured_s=c["seconds"], priced_s=priced))
    for c in result.get("attention", []):
        if "fwd_seconds" not in c:
            continue
        f, b = _attention_price(arch, c, c["backend"])
        mask = "causal" if c["causal"] else "full"
        rows.append(dict(group=f"attention {c['backend']} fwd {mask}", name=c["name"],
                         measured_s=c["fwd_seconds"], priced_s=f))
        if c.get("bwd_seconds", 0) > 0:
            rows.append(dict(group=f"attention {c['backend']} bwd {mask}", name=c["name"],
                             measured_s=c["bwd_seconds"], priced_s=b))
    for c in result.get("copy", []) if isinstance(result.get("copy"), list) else []:
        rows.append(dict(group="copy", name=f"{c['bytes']} B", measured_s=c["seconds"],
                         priced_s=_copy_price(arch, c["bytes"])))
    for r in rows:
        r["error"] = _err(r["priced_s"], r["measured_s"])
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r["error"])
    summary = {k: dict(cases=len(v), median_error=statistics.median(v),
                       mean_abs_error=sum(abs(x) for x in v) / len(v))
               for k, v in groups.items()}
    return dict(arch=arch, env=result.get("env"), rows=rows, groups=summary,
                sustained=result.get("sustained"), nccl=result.get("nccl"))


def format_compare(c: dict) -> str:
    lines = [f"phaze's calibrated prices on {c['arch']} against {c['env'].get('gpu')} "
             f"(torch {c['env'].get('torch')}, CUDA {c['env'].get('cuda')}, cuDNN "
             f"{c['env'].get('cudnn')}); error = priced / measured - 1", ""]
    lines.append(f"{'group':34s} {'case':44s} {'measured':>11s} {'priced':>11s} {'error':>8s}")
    for r in c["rows"]:
        lines.append(f"{r['group']:34s} {r['name']:44s} {r['measured_s'] * 1e3:9.4f}ms "
                     f"{r['priced_s'] * 1e3:9.4f}ms {100 * r['error']:+7.1f}%")
    lines += ["", f"{'group':34s} {'cases':>5s} {'median error':>13s} {'mean |error|':>13s}"]
    for k, s in c["groups"].items():
        lines.append(f"{k:34s} {s['cases']:5d} {100 * s['median_error']:+12.1f}% "
                     f"{100 * s['mean_abs_error']:12.1f}%")
    for dtype, s in (c.get("sustained") or {}).items():
        if isinstance(s, dict) and s.get("tflops_per_half_second"):
            r = s["tflops_per_half_second"]
            clocks = [x["clock_mhz"] for x in s.get("smi", [])]
            lines.append(f"sustained {dtype} {s['size']}^3: {r[0]:.0f} -> {r[-1]:.0f} TFLOP/s "
                         f"over {len(r) / 2:.0f} s; SM clock "
                         + (f"{min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else "not read"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("plan", help="write bench/device_plan.json from the zoo")
    m = sub.add_parser("measure", help="time the plan on this machine's GPU 0")
    m.add_argument("--out", default=os.environ.get("OUT", "device_out"))
    m.add_argument("--reps", type=int, default=20)
    m.add_argument("--warmup", type=int, default=5)
    m.add_argument("--sustain", type=float, default=20.0,
                   help="seconds of the sustained GEMM per datatype (default 20)")
    m.add_argument("--only", nargs="*", choices=("copy", "gemm", "attention", "sustained",
                                                 "nccl"))
    c = sub.add_parser("compare", help="measured against phaze's prices")
    c.add_argument("file")
    c.add_argument("--arch", default=None)
    c.add_argument("--json", default=None, help="also write the comparison here")
    a = ap.parse_args(argv)
    if a.cmd == "plan":
        plan = write_plan()
        print(f"{PLAN_PATH}: {len(plan['gemm'])} GEMM shapes, {len(plan['attention'])} "
              f"attention shapes, {len(plan['copy_bytes'])} copy sizes")
    elif a.cmd == "measure":
        measure(a.out, reps=a.reps, warmup=a.warmup, sustain=a.sustain, only=a.only)
    else:
        res = compare(json.loads(Path(a.file).read_text()), a.arch)
        print(format_compare(res))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
