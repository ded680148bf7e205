"""Warm-up-free workers (issue 24): every kernel phaze runs is compiled ahead of time, so a
fresh worker process — a spawned pool worker, as the search starts them, or a Dask worker —
imports phaze and answers a chunk without compiling anything: no JIT is loaded, and the
kernel modules it used are extension modules built at install time."""
import multiprocessing
import sys

import numpy as np

from phaze.arch import ArchSpace

KERNELS = ("phaze.step._kernels", "phaze.cost._kernels", "phaze._collectives",
           "phaze.schedule._solve", "phaze.placement._dp")


def _fresh_worker_answers(space_step):
    """Run in a new spawned interpreter: one calibrated and one study search, serially."""
    import importlib.machinery

    from phaze.arch import ArchSpace
    from phaze.search import search

    space = ArchSpace.default().configs[::space_step]
    rows = []
    for study in (False, True):
        r = search("bert-large", devices=16, space=space, global_batch=64, baselines=False,
                   executor="serial", progress=False, study=study)
        rows.append(np.asarray(r.table["samples_per_s"], dtype=np.float64))
    files = {m: sys.modules[m].__file__ for m in KERNELS if m in sys.modules}
    compiled = {m: f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
                for m, f in files.items()}
    jit = sorted(m for m in sys.modules if m == "numba" or m.startswith("numba.")
                 or m == "llvmlite")
    return rows, compiled, jit


def test_a_fresh_worker_answers_without_compiling():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        rows, compiled, jit = pool.apply(_fresh_worker_answers, (2000,))
    assert jit == [], f"a worker loaded a JIT: {jit}"
    assert compiled and all(compiled.values()), compiled
    assert {"phaze.step._kernels", "phaze.cost._kernels", "phaze._collectives"} <= set(compiled)
    # and its answers are this process's
    here, _, _ = _fresh_worker_answers(2000)
    for a, b in zip(rows, here):
        assert a.shape == b.shape and a.size > 0
        np.testing.assert_array_equal(a, b)
    assert ArchSpace.default().configs[::2000].shape[0] > 1
