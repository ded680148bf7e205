"""Issue 28 figures: the README's first command before and after power, side by side, and
what the search picks under area and power.

    python3 bench/bench_power.py [--before DIR] [--repeats N]

``--before DIR``: a checkout of phaze before the power model (built in place), e.g. a
``git worktree add --detach DIR 259ee5f`` with ``python3 setup.py build_ext --inplace``.
Each repeat runs the README's first command (``phaze search --model gpt3-175b --devices
1024 --prune``) in the before checkout and in this one, alternately, in fresh processes, and
reports the wall times and their ratio (the done-when bar: ≤ 1.25×). Then the search's best
under the default power budget, its power, energy, perf/W and $ per million tokens beside
the tpuv4 baselines', and the best under each objective; every figure is checked against
the result table it comes from (the best row is the table's top row under its objective).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
README_ARGS = ["search", "--model", "gpt3-175b", "--devices", "1024", "--prune"]


def run_cli(checkout: Path, args, out=None) -> tuple:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, "-m", "phaze", *args] + (["--out", str(out), "--force"] if out else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, capture_output=True,
                          text=True, check=True)
    return time.perf_counter() - t0, proc.stdout


def best_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.startswith("best architecture")), "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.before:
        times = {"before": [], "after": []}
        for _ in range(a.repeats):
            for key, where in (("before", a.before), ("after", HERE)):
                s, out = run_cli(where, README_ARGS)
                times[key].append(s)
                print(f"{key:>6}: {s:6.2f} s   {best_line(out)}", flush=True)
        b, f = min(times["before"]), min(times["after"])
        print(f"README command, best of {a.repeats}: before {b:.2f} s, after {f:.2f} s, "
              f"ratio {f / b:.3f} (bar 1.25)")
    sys.path.insert(0, str(HERE))
    from phaze import search

    with tempfile.TemporaryDirectory() as tmp:
        for objective in ("throughput", "perf-per-watt", "perf-per-dollar"):
            args = README_ARGS if objective == "throughput" else [
                x for x in README_ARGS if x != "--prune"] + ["--objective", objective]
            out = Path(tmp) / f"{objective}.json"
            s, text = run_cli(HERE, args, out)
            res = search.load_result(out)
            best = res.best
            top = res.top_rows(1)
            assert int(top["arch_id"][0]) == int(best["arch_id"]), (top["arch_id"], best)
            print(f"--objective {objective} ({s:.1f} s): arch {best['arch_id']} "
                  f"{best['num_tc']}x {best['tc_width']}x{best['tc_depth']}, "
                  f"{best['buffer_mib']:g} MiB, {best['area_mm2']:.1f} mm2: "
                  f"{best['samples_per_s']:.2f} samples/s, {best['power_w']:.1f} W "
                  f"(clock {100 * best['clock_fraction']:.0f}%), "
                  f"{best['tokens_per_joule']:.2f} tokens/J, chip ${best['chip_cost_usd']:,.0f}, "
                  f"${best['usd_per_million_tokens']:.4f}/M tokens")
            for key, base in (res.baselines or {}).items():
                row = (base.get("models") or {}).get("gpt3-175b") or {}
                if row.get("feasible"):
                    print(f"    {key}: {row['samples_per_s']:.2f} samples/s, "
                          f"{row.get('power_w', float('nan')):.1f} W, "
                          f"{row.get('tokens_per_joule', float('nan')):.2f} tokens/J, "
                          f"${row.get('usd_per_million_tokens', float('nan')):.4f}/M tokens")
            if objective == "throughput":
                print(json.dumps({k: best[k] for k in ("num_tc", "tc_width", "tc_depth",
                                                       "num_vc", "vc_width", "buffer_mib")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
