"""Where sharded data parallelism wins (issue 25): per zoo model and device count on the
h100-sxm preset, the best plan the calibrated search finds with every ZeRO stage and with
ZeRO-3/FSDP left out, side by side, and the search's time. Checks its answers: the best plan
with ZeRO-3 allowed is never slower than without (a superset of plans), and each returned
plan, priced again by ``phaze.step.training_step``, gives the same time.

    python3 bench/bench_sharding.py [--models a,b] [--devices 64,256,1024]
"""
import argparse
import time

import _bench_env  # the repository first on the path; plan_keywords

from phaze import step
from phaze.arch import presets

MODELS = ("llama3-8b", "llama3-70b", "llama3.1-405b", "gpt3-175b", "llama2-70b",
          "nemotron4-15b", "mixtral-8x7b")


def _plan_text(rec) -> str:
    return (f"t={rec['tensor_parallel']} p={rec['pipeline_parallel']} "
            f"d={rec['data_parallel']} cp={rec['context_parallel']} "
            f"ep={rec['expert_parallel']} v={rec['virtual_stages']} "
            f"zero={rec['zero_stage']}")


def _check(model, row, rec, kw):
    r = step.training_step(model, row, microbatch=kw["microbatch"],
                           global_batch=kw["global_batch"], recompute=kw["recompute"],
                           **_bench_env.plan_keywords(rec))
    assert r.ok and abs(r.time_s - float(rec["time_s"])) <= 1e-9 * r.time_s, (model, r.reason)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="64,256,1024")
    ap.add_argument("--global-batch", type=int, default=1024)
    args = ap.parse_args()
    row = presets.get("h100-sxm")
    print("model           GPUs  best plan (all ZeRO)                         s/iter   "
          "best without ZeRO-3                          s/iter   gain   search s")
    for model in args.models.split(","):
        for n in map(int, args.devices.split(",")):
            kw = dict(devices=n, global_batch=args.global_batch, microbatch=1,
                      recompute="full")
            t0 = time.perf_counter()
            with_z3 = step.best_plans(model, row, zero_stage=(0, 1, 2, 3), **kw)[0]
            no_z3 = step.best_plans(model, row, zero_stage=(0, 1, 2), **kw)[0]
            dt = time.perf_counter() - t0
            if not with_z3["feasible"]:
                print(f"{model:15s} {n:5d}  no feasible plan")
                continue
            assert with_z3["time_s"] <= no_z3["time_s"]
            _check(model, row, with_z3, dict(kw, microbatch=1))
            gain = no_z3["time_s"] / with_z3["time_s"] if no_z3["feasible"] else float("inf")
            other = _plan_text(no_z3) if no_z3["feasible"] else "none fits"
            print(f"{model:15s} {n:5d}  {_plan_text(with_z3):44s} {with_z3['time_s']:7.3f}  "
                  f"{other:44s} {no_z3['time_s']:7.3f}  {gain:5.2f}x  {dt:7.1f}")


if __name__ == "__main__":
    main()
