"""Running the search's chunks: in this process, on a local process pool, or on Dask.

Every executor runs the same picklable function on the same picklable tasks
(``ChunkTask`` in a search), so the results do not depend on where a chunk ran. A
chunk whose worker dies (a broken process pool, a Dask worker lost or an
exception) is submitted again, up to ``phaze._config.SEARCH_CHUNK_RETRIES`` times;
tasks are built at dispatch time by ``make_task`` so that pruning can use the best
throughput known at that moment. The executors look at neither tasks nor results.

Shutdown: pool workers ignore SIGINT (Ctrl-C reaches the whole process group; the
parent decides) and die with their parent (``_watch_parent``), so a killed search
leaves no orphans. On Ctrl-C the parent first hands every chunk that already
finished to ``on_result`` (it is written), then stops the workers at once.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .. import _config
from .._threads import available_cores, pin_worker_threads


#: Seconds between two checks of a pool worker that its parent is still alive.
_PARENT_POLL_S = 0.5


def _init_worker(parent_pid=None) -> None:
    """One thread per worker in every library (see ``phaze._threads.pin_worker_threads``);
    in a pool worker (``parent_pid`` given) also ignore SIGINT and die with the parent."""
    pin_worker_threads()
    if parent_pid is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _watch_parent(parent_pid)


def _watch_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid`` is gone (killed with -9 or SIGTERM included).

    On Linux the kernel sends SIGKILL at once (``prctl(PR_SET_PDEATHSIG)``); everywhere
    a daemon thread also polls the parent id, which changes when the parent dies (the
    orphan is adopted), and covers a parent that died before ``prctl`` ran. Compiled
    kernels release the GIL, so the thread runs while a chunk computes.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no usable libc: polling only
            pass

    def poll():
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)  # no cleanup: the parent that wanted the result is gone
            time.sleep(_PARENT_POLL_S)

    threading.Thread(target=poll, name="phaze-parent-watch", daemon=True).start()


def _stop_workers(pool) -> None:
    """Kill a process pool's workers now (Ctrl-C: their chunks are not waited for).

    ``ProcessPoolExecutor.shutdown(wait=False)`` would let them run their chunks to
    the end and the interpreter would wait for them at exit; it has no public way to
    stop them, hence its ``_processes`` (absent in some future version: then the
    shutdown alone, slower but correct).
    """
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, AttributeError, ValueError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)


def unguarded_main_script():
    """The running script's path when it calls into phaze outside an
    ``if __name__ == "__main__":`` block, else None.

    Spawned pool workers re-import the main script (as ``__mp_main__``); without the
    guard each would run the search again and try to start workers of its own
    (multiprocessing then refuses, and every chunk fails). Decided in the main process
    before any worker starts: the frame of ``__main__``'s module-level code that led
    here, and whether its current line lies inside a top-level guard of the script's
    source. Interactive sessions and notebooks (no ``__file__``), calls from
    functions not reached from module level, and unreadable sources count as safe.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or multiprocessing.current_process().name != "MainProcess":
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main)
                                     and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    return None if line_is_guarded(source, frame.f_lineno) else path


def line_is_guarded(source: str, lineno: int) -> bool:
    """Whether line ``lineno`` of a script lies inside a top-level
    ``if __name__ == "__main__":`` block (either operand order); unparsable source
    counts as guarded (nothing can be said)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True
    for node in tree.body:
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
            continue
        sides = [test.left, test.comparators[0]]
        names = [s.id for s in sides if isinstance(s, ast.Name)]
        consts = [s.value for s in sides if isinstance(s, ast.Constant)]
        if names == ["__name__"] and consts == ["__main__"] and \
                node.body[0].lineno <= lineno <= node.end_lineno:
            return True
    return False


class ChunkFailed(RuntimeError):
    """A chunk failed more often than the retry limit allows."""


def _retries(retries) -> int:
    """``retries``, or the package's tunable when None (read at call time)."""
    return _config.SEARCH_CHUNK_RETRIES if retries is None else int(retries)


def run_serial(fn, make_task, chunk_ids, on_result) -> None:
    """``on_result(fn(make_task(cid)))`` for each chunk id in turn, in this process."""
    for cid in chunk_ids:
        on_result(fn(make_task(cid)))


def run_process_pool(fn, make_task, chunk_ids, on_result, *, workers=None, retries=None,
                     per_worker=2) -> None:
    """All local cores (or ``workers``), one thread each, ``per_worker`` chunks in flight each
    (1 when pruning, so each task is made with the freshest floor). ``retries``: runs
    of a failed chunk before :class:`ChunkFailed` (None: ``_config.SEARCH_CHUNK_RETRIES``)."""
    workers = workers or available_cores()
    retries = _retries(retries)
    pending = list(chunk_ids)[::-1]  # pop() from the end keeps chunk order
    failures: dict = {}
    # spawn: a forked child would inherit the OpenMP thread pool of the parent, which hangs.
    ctx = multiprocessing.get_context("spawn")
    while pending:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                   initargs=(os.getpid(),))
        in_flight = {}
        broken = False
        try:
            while pending or in_flight:
                while pending and len(in_flight) < per_worker * workers and not broken:
                    cid = pending.pop()
                    try:
                        in_flight[pool.submit(fn, make_task(cid))] = cid
                    except BrokenProcessPool:
                        pending.append(cid)
                        broken = True
                if not in_flight:
                    break
                done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for fut in done:
                    cid = in_flight.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        _count_failure(failures, cid, retries, "its worker process died")
                        pending.append(cid)
                        continue
                    except Exception as exc:  # noqa: BLE001 - retried, then reported
                        _count_failure(failures, cid, retries, f"{type(exc).__name__}: {exc}")
                        pending.append(cid)
                        continue
                    on_result(result)
                if broken:
                    # Every chunk still in flight on a broken pool is lost: run it again.
                    for fut, cid in in_flight.items():
                        pending.append(cid)
                    in_flight.clear()
                    break
        except KeyboardInterrupt:
            # Ctrl-C: keep (write) every chunk that finished meanwhile, then stop at once.
            try:
                for fut in [f for f in in_flight if f.done() and not f.cancelled()]:
                    if fut.exception() is None:
                        on_result(fut.result())
            finally:
                _stop_workers(pool)
            raise
        except BaseException:
            # A chunk that failed for good (or a write error): do not wait for the others.
            _stop_workers(pool)
            raise
        pool.shutdown(wait=not broken, cancel_futures=True)


def _count_failure(failures, cid, retries, why):
    """Count a failure of chunk ``cid``; ChunkFailed once it failed more than ``retries`` times."""
    failures[cid] = failures.get(cid, 0) + 1
    if failures[cid] > retries:
        raise ChunkFailed(f"chunk {cid} failed {failures[cid]} times; last: {why}")
    print(f"phaze search: chunk {cid} failed ({why}); retrying", file=sys.stderr)


def _dask_worker_setup():  # pragma: no cover - runs on Dask workers
    _init_worker()
    return True


def run_dask(fn, make_task, chunk_ids, on_result, *, address, retries=None,
             connect_timeout_s=30.0, per_worker=2) -> None:
    """The same chunks on a Dask distributed cluster at ``address`` (tcp://HOST:PORT);
    ``retries`` as in :func:`run_process_pool`, ``connect_timeout_s`` seconds."""
    retries = _retries(retries)
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ValueError("--address needs Dask distributed: pip install 'phaze[dask]'") from None
    if not str(address).startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        raise ValueError(f"address must look like tcp://HOST:PORT, got {address!r}")
    try:
        client = Client(address, timeout=connect_timeout_s)
    except OSError as exc:
        raise ValueError(f"address: cannot reach a Dask scheduler at {address} ({exc})") from None
    try:
        client.run(_dask_worker_setup)
        failures: dict = {}
        futures = {}
        stamp = f"{time.time_ns():x}"

        def submit(cid, attempt):
            fut = client.submit(fn, make_task(cid), pure=False, retries=retries,
                                key=f"phaze-chunk-{stamp}-{cid}-{attempt}")
            futures[fut.key] = cid
            return fut

        try:
            slots = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        except Exception:  # noqa: BLE001 - older/newer scheduler_info layouts
            slots = 1
        limit = max(1, per_worker * slots)  # bounded, so tasks made later see a higher pruning floor
        pending = list(chunk_ids)[::-1]
        queue = as_completed([submit(pending.pop(), 0) for _ in range(min(limit, len(pending)))],
                             with_results=False)
        for fut in queue:
            cid = futures.pop(fut.key)
            try:
                result = fut.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker and friends: retry
                _count_failure(failures, cid, retries, f"{type(exc).__name__}: {exc}")
                queue.add(submit(cid, failures[cid]))
                continue
            finally:
                fut.release()
            on_result(result)
            if pending:
                queue.add(submit(pending.pop(), 0))
    finally:
        client.close()
