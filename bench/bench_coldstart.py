"""Cold start: each command in a fresh process with an empty numba cache, then again warm.

A fresh install, a CI run, a new container or a new Dask worker machine starts with no
numba cache; whatever numba compiles on a first call is paid there. This benchmark runs
each command twice in new processes sharing one numba cache folder that starts empty:
the first run is cold (everything numba compiles, the Cython extensions are already
built), the second warm (kernels loaded from the cache). It prints both wall times and
their ratio.

Commands: ``phaze evaluate`` of one GPT-3 point; ``phaze search`` of bert-large on 64
devices (every 50th architecture); with ``--readme`` also the README's first command
(``phaze search --model gpt3-175b --devices 1024 --prune``, about half a minute warm).

``--compile-table`` instead lists what numba compiles on the first two commands, per
kernel: seconds spent compiling it alone (its callees, compiled inside it, subtracted)
and with its callees, from numba's ``numba:compile`` events, in a fresh process with an
empty cache.

Usage: python3 bench/bench_coldstart.py [--readme] [--compile-table]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import _bench_env  # noqa: F401  (repository on sys.path)

REPO = str(_bench_env.REPO)

EVALUATE = ["evaluate", "--model", "gpt3-175b", "--arch", "a100-80g", "--tp", "8", "--pp", "8",
            "--dp", "16", "--microbatch", "1"]
BERT_SEARCH = ["search", "--model", "bert-large", "--devices", "64", "--prune", "--space-every", "50"]
README_SEARCH = ["search", "--model", "gpt3-175b", "--devices", "1024", "--prune"]


def _env(cache_dir):
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = cache_dir
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


def _run(args, cache_dir):
    """Wall seconds of ``python -m phaze ARGS`` in a new process (output discarded)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "phaze", *args], cwd=REPO, env=_env(cache_dir),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"phaze {' '.join(args)} failed:\n{out.stderr}")
    return wall


def commands(readme):
    runs = [("evaluate gpt3-175b (1 point)", EVALUATE), ("search bert-large 64 devices", BERT_SEARCH)]
    if readme:
        runs.append(("README search gpt3-175b 1024", README_SEARCH))
    print(f"{'command':34s} {'cold s':>8s} {'warm s':>8s} {'cold/warm':>10s}")
    for label, args in runs:
        cache = tempfile.mkdtemp(prefix="phaze-coldstart-")
        try:
            cold = _run(args, cache)
            warm = _run(args, cache)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        print(f"{label:34s} {cold:8.2f} {warm:8.2f} {cold / warm:9.2f}x", flush=True)


def _compile_worker():
    """In a process with an empty cache: run the first two commands in-process and print
    the numba compile time per kernel."""
    from numba.core import event

    from phaze import cli

    stack = []   # [dispatcher name, start, seconds of children]
    totals = {}  # name -> [exclusive s, inclusive s, compiles]

    class Listener(event.Listener):
        def on_start(self, ev):
            d = ev.data["dispatcher"]
            stack.append([f"{d.py_func.__module__}.{d.py_func.__name__}", time.perf_counter(), 0.0])

        def on_end(self, ev):
            name, t0, children = stack.pop()
            spent = time.perf_counter() - t0
            row = totals.setdefault(name, [0.0, 0.0, 0])
            row[0] += spent - children
            row[1] += spent
            row[2] += 1
            if stack:
                stack[-1][2] += spent

    t0 = time.perf_counter()
    with event.install_listener("numba:compile", Listener()):
        for args in (EVALUATE, BERT_SEARCH + ["--serial"]):
            with open(os.devnull, "w") as devnull:
                saved = sys.stdout
                sys.stdout = devnull
                try:
                    cli.main(args)
                finally:
                    sys.stdout = saved
    wall = time.perf_counter() - t0
    total = sum(r[0] for r in totals.values())
    print(f"{'kernel':60s} {'alone s':>8s} {'with callees s':>15s} {'compiles':>9s}")
    for name, (alone, incl, n) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:60s} {alone:8.2f} {incl:15.2f} {n:9d}")
    by_module = {}
    for name, (alone, _incl, _n) in totals.items():
        mod = name.rsplit(".", 1)[0]
        by_module[mod] = by_module.get(mod, 0.0) + alone
    print()
    for mod, s in sorted(by_module.items(), key=lambda kv: -kv[1]):
        print(f"{mod:60s} {s:8.2f}")
    print(f"numba compile total {total:.2f} s of {wall:.2f} s for both commands "
          f"({len(totals)} kernels)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readme", action="store_true", help="also the README's first command (long)")
    ap.add_argument("--compile-table", action="store_true",
                    help="numba compile time per kernel on a cold start instead")
    ap.add_argument("--_compile-worker", dest="worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _compile_worker()
        return
    print(f"machine: {os.cpu_count()} CPUs visible; python {sys.version.split()[0]}", flush=True)
    if args.compile_table:
        cache = tempfile.mkdtemp(prefix="phaze-coldstart-")
        try:
            subprocess.run([sys.executable, __file__, "--_compile-worker"], env=_env(cache),
                           cwd=REPO, check=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    else:
        commands(args.readme)


if __name__ == "__main__":
    main()
