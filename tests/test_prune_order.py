"""Issue 30: a pruned sweep writes the same bytes whatever the worker count and the order
its chunks finish in. Chunk c starts from the pruning state of chunks 0 … c −
w (``_driver.prune_window``), applied in chunk order (``_driver._Sweep.ready`` / ``make_task``); before,
each task took the floors of whichever chunks had finished when it was sent (883 rows at
one worker, 1,096 at two for the same --prune sweep)."""
import random

import pytest

from phaze import search
from phaze.arch import ArchSpace
from phaze.search import _driver, _executors

SPACE = ArchSpace.default().configs[::500]


def _run(tmp_path, name, prune, space=SPACE, **kw):
    out = tmp_path / name
    res = search.search("bert-large", devices=8, global_batch=64, space=space, prune=prune,
                        microbatch=(4, 8), hbm_gib=(32,), recompute="none", chunk_archs=2, baselines=False, progress=False, out=out, **kw)
    return out.read_bytes(), res.metadata["points_pruned"]


def _shuffled_pool(seed, in_flight):
    """A stand-in for the process pool: up to ``in_flight`` chunks sent (while ``ready``
    allows), finished in a random order."""
    def run(fn, make_task, chunk_ids, on_result, *, workers=None, per_worker=1, ready=None,
            **_):
        rng = random.Random(seed)
        pending, flying = list(chunk_ids), []
        while pending or flying:
            while pending and len(flying) < in_flight and (ready is None or ready(pending[0])):
                flying.append(make_task(pending.pop(0)))
            on_result(fn(flying.pop(rng.randrange(len(flying)))))
    return run


@pytest.mark.parametrize("prune", ["best", "front"])
def test_pruned_rows_do_not_depend_on_the_order_chunks_finish_in(tmp_path, monkeypatch, prune):
    want, pruned = _run(tmp_path, "serial.csv", prune, executor="serial")
    assert pruned > 0   # the sweep does prune
    for seed, in_flight in ((1, 3), (2, 16)):
        monkeypatch.setattr(_executors, "run_process_pool", _shuffled_pool(seed, in_flight))
        got, got_pruned = _run(tmp_path, f"s{seed}.csv", prune, executor="process", workers=3)
        assert got == want and got_pruned == pruned, (seed, in_flight)


def test_pruned_sweep_is_byte_identical_at_one_two_and_three_workers(tmp_path):
    files = [_run(tmp_path, f"w{w}.csv", "best", executor="process", workers=w,
                  space=SPACE[::3])[0] for w in (1, 2, 3)]
    assert files[0] == files[1] == files[2]


def test_a_chunk_waits_for_the_window_before_it(tmp_path):
    sent = []

    def run(fn, make_task, chunk_ids, on_result, *, ready=None, **_):
        ids = list(chunk_ids)
        w = _driver.prune_window(len(ids))
        assert 1 < w <= _driver.PRUNE_WINDOW
        assert ready(ids[w - 1]) and not ready(ids[w])
        for cid in ids:
            sent.append(cid)
            on_result(fn(make_task(cid)))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_executors, "run_process_pool", run)
        _run(tmp_path, "w.csv", "best", executor="process", workers=2)
    assert sent == sorted(sent)
