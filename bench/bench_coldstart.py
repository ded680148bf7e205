"""Cold start: each command in a fresh process, first cold, then again warm.

Every compiled kernel of phaze is a Cython extension built ahead of time (``make build``,
``pip install``): there is no JIT and no cache of compiled kernels, so a first call costs
what any call costs, and what a new process pays before its first answer is starting
Python, importing phaze and its dependencies, and the command itself. This benchmark
runs each command in a new process twice, with a Python bytecode cache of its own
(``PYTHONPYCACHEPREFIX``, a folder that starts empty): the first run is cold (every
module it imports, phaze's, numpy's and the standard library's, compiled to bytecode
again: what can be dropped without root, as right after a build or in a fresh container
without precompiled bytecode; the operating system's file cache is not dropped), the
second warm (the same command again, bytecode cached). It prints both wall times and
their ratio.

Commands: ``phaze evaluate`` of one GPT-3 point; ``phaze search`` of bert-large on 64
devices (every 50th architecture); with ``--readme`` also the README's first command
(``phaze search --model gpt3-175b --devices 1024 --prune``, about 20 s).

``--imports`` instead lists where the cold start of the evaluate command goes:
``python -X importtime``, cold and then warm, the import time of every ``phaze`` module
(its own and with what it imports) and of each other top-level package, against the
command's wall time.

Usage: python3 bench/bench_coldstart.py [--readme] [--imports]
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


def _env(pycache):
    env = dict(os.environ)
    env["PYTHONPYCACHEPREFIX"] = pycache
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(args, pycache, python_flags=()):
    """Wall seconds and stderr of ``python [FLAGS] -m phaze ARGS`` in a new process."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *python_flags, "-m", "phaze", *args], cwd=REPO,
                         env=_env(pycache), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"phaze {' '.join(args)} failed:\n{out.stderr}")
    return wall, out.stderr


def commands(readme):
    runs = [("evaluate gpt3-175b (1 point)", EVALUATE), ("search bert-large 64 devices", BERT_SEARCH)]
    if readme:
        runs.append(("README search gpt3-175b 1024", README_SEARCH))
    print(f"{'command':34s} {'cold s':>8s} {'warm s':>8s} {'cold/warm':>10s}")
    for label, args in runs:
        pycache = tempfile.mkdtemp(prefix="phaze-coldstart-")
        try:
            cold, _ = _run(args, pycache)
            warm, _ = _run(args, pycache)
        finally:
            shutil.rmtree(pycache, ignore_errors=True)
        print(f"{label:34s} {cold:8.2f} {warm:8.2f} {cold / warm:9.2f}x", flush=True)


def _importtime(stderr):
    """``-X importtime`` lines as [(module, self s, cumulative s, depth)], in import order."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3:
            continue
        self_us, cum_us, name = int(parts[0]), int(parts[1]), parts[2]
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append((name.strip(), self_us / 1e6, cum_us / 1e6, depth))
    return rows


def imports():
    pycache = tempfile.mkdtemp(prefix="phaze-coldstart-")
    try:
        runs = [_run(EVALUATE, pycache, ("-X", "importtime")) for _ in ("cold", "warm")]
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    tables = [_importtime(err) for _, err in runs]
    print(f"phaze {' '.join(EVALUATE)}: wall {runs[0][0]:.2f} s cold, {runs[1][0]:.2f} s warm; "
          f"imports {sum(r[1] for r in tables[0]):.2f} s cold, "
          f"{sum(r[1] for r in tables[1]):.2f} s warm (sum of every module's own time)")
    print()
    warm = {name: (own, cum) for name, own, cum, _ in tables[1]}
    print(f"{'phaze module (a module after what it imports)':52s} {'cold own':>9s} {'cold cum':>9s} "
          f"{'warm own':>9s} {'warm cum':>9s}   (ms)")
    for name, own, cum, depth in tables[0]:
        if name == "phaze" or name.startswith("phaze."):
            w_own, w_cum = warm.get(name, (float("nan"), float("nan")))
            label = "  " * min(depth, 6) + name
            print(f"{label:52s} {own * 1e3:9.1f} {cum * 1e3:9.1f} {w_own * 1e3:9.1f} "
                  f"{w_cum * 1e3:9.1f}")
    print()
    print(f"{'top-level package (own time of all its modules)':52s} {'cold':>9s} {'warm':>9s}   (ms)")
    by_pkg = [{}, {}]
    for k, table in enumerate(tables):
        for name, own, _cum, _depth in table:
            top = name.split(".")[0]
            by_pkg[k][top] = by_pkg[k].get(top, 0.0) + own
    for top, cold in sorted(by_pkg[0].items(), key=lambda kv: -kv[1])[:15]:
        print(f"{top:52s} {cold * 1e3:9.1f} {by_pkg[1].get(top, 0.0) * 1e3:9.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readme", action="store_true", help="also the README's first command (~20 s)")
    ap.add_argument("--imports", action="store_true",
                    help="import time of phaze's modules on the evaluate command instead")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs visible; python {sys.version.split()[0]}", flush=True)
    if args.imports:
        imports()
    else:
        commands(args.readme)


if __name__ == "__main__":
    main()
