"""Peak memory of an exhaustive sweep with a result file (issue 30: constant memory).

Runs ``phaze search --model bert-large --devices 8 --global-batch 64 --no-baselines
--out DIR/ex.csv`` (the whole default space, or every K-th architecture with
``--space-every K``), samples the resident memory of the search process and of all
its worker processes (``/proc``, every 0.1 s) and prints the parent's peak and the
peak of their sum, the wall time, and whether the written file equals a reference
(``--reference FILE``: byte for byte, e.g. one written by an older phaze) or, without
one, whether its rows are in the reference order (model, arch id, microbatch, HBM,
recomputation: what the file is sorted by).

    python3 bench/bench_sweep_memory.py --workers 2                  # whole space
    python3 bench/bench_sweep_memory.py --workers 2 --space-every 4  # a quarter
    PHAZE=/work/main python3 bench/bench_sweep_memory.py ...          # another checkout
"""
from __future__ import annotations

import argparse
import csv
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _tree(pid) -> list:
    """``pid`` and its descendants (from /proc)."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _rss_bytes(pid) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _in_order(path) -> bool:
    rc = {"none": 0, "selective": 1, "full": 2}
    models: dict = {}
    prev = None
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        pos = [head.index(n) for n in ("model", "arch_id", "microbatch", "hbm_gib", "recompute")]
        for row in r:
            m, a, mb, h, c = (row[i] for i in pos)
            key = (models.setdefault(m, len(models)), int(a), int(mb), float(h), rc[c])
            if prev is not None and key <= prev:
                return False
            prev = key
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--space-every", type=int, default=None)
    ap.add_argument("--reference", help="a file the result must equal byte for byte")
    ap.add_argument("--keep", help="folder to write ex.csv into (default: a temporary one)")
    args = ap.parse_args(argv)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="phaze-mem-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "ex.csv"
    cmd = [sys.executable, "-m", "phaze", "search", "--model", "bert-large", "--devices", "8",
           "--global-batch", "64", "--no-baselines", "--out", str(out), "--force",
           "--workers", str(args.workers)]
    if args.space_every:
        cmd += ["--space-every", str(args.space_every)]
    env = dict(os.environ)
    root = os.environ.get("PHAZE") or str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root
    t0 = time.perf_counter()
    # run from the checkout: ``python -m`` puts the working folder first on sys.path
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL)
    parent = total = 0
    while proc.poll() is None:
        pids = _tree(proc.pid)
        parent = max(parent, _rss_bytes(proc.pid))
        total = max(total, sum(_rss_bytes(p) for p in pids))
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    print(f"command: cd {root} && PYTHONPATH={root} {' '.join(cmd)}")
    print(f"exit {proc.returncode}; wall {wall:.1f} s; peak RSS parent {parent / 2**20:.0f} MiB, "
          f"parent + workers {total / 2**20:.0f} MiB; rows file {out.stat().st_size / 2**20:.0f} MiB")
    ok = proc.returncode == 0
    if args.reference:
        same = filecmp.cmp(out, args.reference, shallow=False)
        print(f"equal to {args.reference}: {same}")
        ok &= same
    else:
        order = _in_order(out)
        print(f"rows in the reference order: {order}")
        ok &= order
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
