"""Running the search's chunks: in this process, on a local process pool, or on Dask.

Every executor runs the same picklable function on the same picklable tasks
(``ChunkTask`` in a search), so the results do not depend on where a chunk ran. A
chunk whose worker dies (a broken process pool, a Dask worker lost or an
exception) is submitted again, up to ``phaze._config.SEARCH_CHUNK_RETRIES`` times;
tasks are built at dispatch time by ``make_task`` so that pruning can use the best
throughput known at that moment. The executors look at neither tasks nor results.

Shutdown: pool workers ignore SIGINT (Ctrl-C reaches the whole process group; the
parent decides) and die with their parent (``_watch_parent``), so a killed search
leaves no orphans. The local pool is phaze's own (:class:`_Pool`), not
``concurrent.futures``': each worker has a pipe of its own each way, so a worker
killed while sending its MB-sized result leaves a cut-off pipe that reads as end of
file (the partial message abandoned), never a manager thread waiting forever for the
rest, and stopping is bounded: a stop message, SIGTERM (obeyed at once, or right after
the result being sent), SIGKILL, then the pipes closed (``STOP_TERM_S``,
``STOP_KILL_S``). On Ctrl-C the parent first hands every chunk whose result already
arrived to ``on_result`` (it is written), then stops the workers. The Dask executor
waits for results in short polls and ends with :class:`SchedulerLost` when the
scheduler has not answered for ``DASK_LOST_S`` seconds; the chunks handed over before
are kept (written).
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections import deque

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


#: Seconds a pool gives its stopped workers to exit by themselves (a stop message, then
#: SIGTERM, which a worker obeys at once unless it is sending a result: that it finishes,
#: the parent reading it meanwhile), before SIGKILL.
STOP_TERM_S = 2.0
#: Seconds after SIGKILL before a worker still not reaped is abandoned (its pipes closed).
STOP_KILL_S = 2.0


def _pool_worker(parent_pid, tasks, results) -> None:  # pragma: no cover - runs in a worker
    """A pool worker's life: run ``(fn, task)`` messages from ``tasks`` in order, send
    ``("ok", seq, fn(task))`` or ``("error", seq, why)`` on ``results``; end on a stop
    message, on the parent closing ``tasks``, or on SIGTERM (at once, or right after the
    result being sent, so the parent never holds half a message it must wait for)."""
    _init_worker(parent_pid)
    state = {"sending": False, "stop": False}

    def on_term(signum, frame):
        if state["sending"]:
            state["stop"] = True  # finish this message first
        else:
            os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    inbox = queue.SimpleQueue()

    def receive():  # so that the parent's sends never wait for a chunk to end
        while True:
            try:
                data = tasks.recv_bytes()
            except (EOFError, OSError):
                data = None
            inbox.put(data)
            if data is None:
                return

    threading.Thread(target=receive, name="phaze-task-inbox", daemon=True).start()
    while True:
        data = inbox.get()
        if data is None:
            break
        seq = None
        try:
            seq, fn, task = pickle.loads(data)
            if fn is None:
                break  # the stop message
            payload = pickle.dumps(("ok", seq, fn(task)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which retries
            payload = pickle.dumps(("error", seq, f"{type(exc).__name__}: {exc}"))
        state["sending"] = True
        try:
            results.send_bytes(payload)
        except OSError:
            break  # the parent closed its end: it stopped the pool
        finally:
            state["sending"] = False
        if state["stop"]:
            break
    os._exit(0)  # no interpreter teardown: nothing of this process is worth waiting for


class _PoolWorker:
    """One worker process of :class:`_Pool`, its two pipes and the chunks sent to it (in
    the order it runs them)."""

    def __init__(self, wid, proc, tasks, results):
        self.wid, self.proc, self.tasks, self.results = wid, proc, tasks, results
        self.sent: list = []  # [(seq, chunk id)] not yet answered; the first one is running
        self.reader = None
        self.dead = False


class _Pool:
    """Worker processes with a pipe each way apiece (no shared queue, so a worker killed
    mid-message leaves a cut-off pipe that reads as end of file, never a reader waiting
    forever), a reader thread per worker that drains its results into :attr:`events`, and
    a :meth:`stop` whose every stage is bounded in time."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.events = queue.SimpleQueue()  # (worker id, message bytes or None = the end)
        self.workers: dict = {}
        self._next_id = 0
        self._seq = 0

    def spawn(self) -> _PoolWorker:
        """Start one worker (spawned: a forked child would inherit the parent's OpenMP
        thread pool, which hangs)."""
        wid = self._next_id
        self._next_id += 1
        task_r, task_w = self.ctx.Pipe(duplex=False)
        res_r, res_w = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_pool_worker, args=(os.getpid(), task_r, res_w),
                                name=f"phaze-worker-{wid}", daemon=True)
        # SIGINT ignored from the worker's first instruction (_block_sigint): a Ctrl-C that
        # reaches the process group cannot print a KeyboardInterrupt traceback from a
        # worker still importing; the parent gets its own Ctrl-C once the mask is restored.
        blocked = _block_sigint()
        try:
            proc.start()
        finally:
            _restore_sigmask(blocked)
            # The parent keeps only its own ends: a dead worker's pipes then read as closed.
            task_r.close()
            res_w.close()
        w = _PoolWorker(wid, proc, task_w, res_r)
        w.reader = threading.Thread(target=self._read, args=(w,), daemon=True,
                                    name=f"phaze-results-{wid}")
        w.reader.start()
        self.workers[wid] = w
        return w

    def _read(self, w: _PoolWorker) -> None:
        while True:
            try:
                data = w.results.recv_bytes()
            except (EOFError, OSError):
                self.events.put((w.wid, None))
                return
            self.events.put((w.wid, data))

    def send(self, w: _PoolWorker, fn, task, cid) -> bool:
        """Send chunk ``cid`` to ``w``; False when ``w`` can no longer take it (dying)."""
        self._seq += 1
        data = pickle.dumps((self._seq, fn, task), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            w.tasks.send_bytes(data)
        except OSError:
            return False
        w.sent.append((self._seq, cid))
        return True

    def drop(self, w: _PoolWorker) -> None:
        """Forget a worker whose result pipe ended (reap it, close its pipes)."""
        w.dead = True
        self.workers.pop(w.wid, None)
        _reap([w], STOP_KILL_S)
        _close_pipes(w)

    def stop(self, *, now: bool) -> None:
        """Stop every worker, in bounded time (at most ``STOP_TERM_S + STOP_KILL_S``
        seconds plus a moment): a stop message (an idle worker exits at once), then, right
        away when ``now`` (a fault or Ctrl-C: chunks running are abandoned) or after
        ``STOP_TERM_S`` otherwise, SIGTERM; SIGKILL for any still alive ``STOP_TERM_S``
        later; pipes closed, and a worker not reaped after ``STOP_KILL_S`` more is left to
        its parent-death signal."""
        workers = list(self.workers.values())
        self.workers.clear()
        stop = pickle.dumps((0, None, None))
        for w in workers:
            try:
                w.tasks.send_bytes(stop)
            except OSError:
                pass
        if not now:
            _reap(workers, STOP_TERM_S)
        for w in workers:
            if w.proc.exitcode is None:
                _signal(w.proc, signal.SIGTERM)
        _reap(workers, STOP_TERM_S)
        for w in workers:
            if w.proc.exitcode is None:
                _signal(w.proc, signal.SIGKILL)
        _reap(workers, STOP_KILL_S)
        for w in workers:
            _close_pipes(w)


def _block_sigint():
    """Block SIGINT in this thread, then (main thread) ignore it: a child started now
    inherits SIG_IGN across exec, which Python keeps (it installs its own SIGINT handler
    only where SIGINT is not ignored); a Ctrl-C meanwhile stays pending (a blocked signal
    is never discarded as ignored) and reaches this process once
    :func:`_restore_sigmask` has put its handler back. What that needs, or None."""
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):  # pragma: no cover - Windows
        return None
    try:
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: the mask alone
        handler = None
    return mask, handler


def _restore_sigmask(saved) -> None:
    if saved is None:
        return
    mask, handler = saved
    if handler is not None:
        signal.signal(signal.SIGINT, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _signal(proc, sig) -> None:
    try:
        os.kill(proc.pid, sig)
    except (OSError, TypeError):  # gone already, or never started
        pass


def _reap(workers, seconds) -> None:
    """Wait up to ``seconds`` in all for the workers' processes to end."""
    deadline = time.monotonic() + seconds
    for w in workers:
        w.proc.join(max(0.0, deadline - time.monotonic()))


def _close_pipes(w: _PoolWorker) -> None:
    """Close the parent's ends of a stopped worker's pipes: the task pipe at once, the
    result pipe once its reader thread has seen the end (a process killed mid-message
    leaves a cut-off pipe: end of file, the partial message abandoned)."""
    try:
        w.tasks.close()
    except OSError:
        pass
    if w.reader is not None:
        w.reader.join(STOP_KILL_S if w.proc.exitcode is not None else 0.0)
    if w.reader is None or not w.reader.is_alive():
        try:
            w.results.close()
        except OSError:
            pass


def run_process_pool(fn, make_task, chunk_ids, on_result, *, workers=None, retries=None,
                     per_worker=2, ready=None) -> None:
    """All local cores (or ``workers``), one thread each, ``per_worker`` chunks in flight each
    (1 when pruning, so each task is made with the freshest floor). ``retries``: runs
    of a failed chunk before :class:`ChunkFailed` (None: ``_config.SEARCH_CHUNK_RETRIES``).

    A worker that dies costs one failure of the chunk it was running; the chunks queued
    behind it are sent again without counting, and a new worker takes its place. On
    Ctrl-C the results that already arrived are handed to ``on_result``, then the pool
    stops (:meth:`_Pool.stop`); on any error it stops at once, in bounded time.
    ``ready(cid)`` (optional): whether the next chunk may be sent yet (pruning in chunk
    order); it must turn true once the chunks in flight are done.
    """
    workers = workers or available_cores()
    retries = _retries(retries)
    pending = deque(chunk_ids)
    if not pending:
        return
    per_worker = max(1, int(per_worker))
    failures: dict = {}
    pool = _Pool(multiprocessing.get_context("spawn"))
    clean = False
    try:
        for _ in range(min(workers, len(pending))):
            pool.spawn()
        idle_deaths = 0
        while True:
            _fill(pool, fn, make_task, pending, per_worker, ready)
            if not pending and not any(w.sent for w in pool.workers.values()):
                break
            if not pool.workers:
                pool.spawn()
                continue
            wid, data = pool.events.get()
            w = pool.workers.get(wid)
            if w is None:
                continue  # a worker already dropped
            if data is None:
                if not w.sent:
                    idle_deaths += 1  # died before it took a chunk
                    if idle_deaths > retries + workers:
                        raise ChunkFailed(f"{idle_deaths} worker processes died before taking "
                                          f"a chunk (exit status {w.proc.exitcode})")
                _worker_died(pool, w, pending, failures, retries)
                if pending and len(pool.workers) < workers:
                    pool.spawn()
                continue
            _handle(w, data, pending, failures, retries, on_result)
        clean = True
    except KeyboardInterrupt:
        # Ctrl-C: keep (write) every chunk whose result already arrived, then stop.
        try:
            _drain(pool, on_result)
        finally:
            pool.stop(now=True)
        raise
    finally:
        if pool.workers:
            pool.stop(now=not clean)


def _fill(pool, fn, make_task, pending, per_worker, ready=None) -> None:
    """Send chunks to workers with fewer than ``per_worker`` in flight (each worker its
    first chunk before any gets a second, in chunk order), while ``ready`` allows."""
    for depth in range(per_worker):
        for w in list(pool.workers.values()):
            if not pending or (ready is not None and not ready(pending[0])):
                return
            if len(w.sent) <= depth and not w.dead:
                cid = pending.popleft()
                if not pool.send(w, fn, make_task(cid), cid):
                    pending.appendleft(cid)  # dying: its end of file is on the way
                    w.dead = True


def _worker_died(pool, w, pending, failures, retries) -> None:
    """``w``'s result pipe ended: its running chunk failed once, those behind it go back."""
    pool.drop(w)
    if not w.sent:
        return
    (_, running), queued = w.sent[0], [cid for _, cid in w.sent[1:]]
    w.sent.clear()
    pending.extendleft(reversed([running] + queued))
    code = w.proc.exitcode
    how = (f"killed by signal {-code}" if code is not None and code < 0
           else f"exit status {code}" if code is not None else "no exit status")
    _count_failure(failures, running, retries, f"its worker process died ({how})")


def _handle(w, data, pending, failures, retries, on_result) -> None:
    """One message from ``w``: a result for ``on_result``, or a chunk's error (retried)."""
    seq, cid = w.sent.pop(0)
    try:
        kind, got_seq, value = pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - a result that does not unpickle: retried
        kind, got_seq, value = "error", seq, f"its result does not unpickle ({exc})"
    if got_seq is not None and got_seq != seq:  # pragma: no cover - would be a bug here
        raise RuntimeError(f"pool worker answered message {got_seq}, expected {seq}")
    if kind == "ok":
        on_result(value)
        return
    pending.appendleft(cid)
    _count_failure(failures, cid, retries, value)


def _drain(pool, on_result) -> None:
    """Hand every result that already arrived to ``on_result`` (none is waited for)."""
    while True:
        try:
            wid, data = pool.events.get_nowait()
        except queue.Empty:
            return
        w = pool.workers.get(wid)
        if w is None or data is None or not w.sent:
            continue
        w.sent.pop(0)
        try:
            kind, _, value = pickle.loads(data)
        except Exception:  # noqa: BLE001 - abandoned, as a chunk still running is
            continue
        if kind == "ok":
            on_result(value)

def _count_failure(failures, cid, retries, why):
    """Count a failure of chunk ``cid``; ChunkFailed once it failed more than ``retries`` times."""
    failures[cid] = failures.get(cid, 0) + 1
    if failures[cid] > retries:
        raise ChunkFailed(f"chunk {cid} failed {failures[cid]} times; last: {why}")
    print(f"phaze search: chunk {cid} failed ({why}); retrying", file=sys.stderr)


def _dask_worker_setup():  # pragma: no cover - runs on Dask workers
    _init_worker()
    return True


#: Seconds between two looks at a Dask run's results (and at its scheduler).
DASK_POLL_S = 1.0
#: Seconds without an answer from the Dask scheduler before a run ends (SchedulerLost).
DASK_LOST_S = 30.0


class SchedulerLost(ChunkFailed):
    """The Dask scheduler stopped answering; the chunks handed over before are kept."""


def run_dask(fn, make_task, chunk_ids, on_result, *, address, retries=None,
             connect_timeout_s=30.0, per_worker=2, lost_after_s=None, ready=None) -> None:
    """The same chunks on a Dask distributed cluster at ``address`` (tcp://HOST:PORT);
    ``retries`` as in :func:`run_process_pool`, ``connect_timeout_s`` seconds.

    Results are waited for in polls of ``DASK_POLL_S``; when the client has lost its
    scheduler, or the scheduler does not answer a heartbeat, for ``lost_after_s``
    seconds (default ``DASK_LOST_S``) the run ends with :class:`SchedulerLost` (one
    sentence; the chunks handed to ``on_result`` before are kept), instead of waiting
    forever for results no one will send."""
    retries = _retries(retries)
    lost_after_s = DASK_LOST_S if lost_after_s is None else float(lost_after_s)
    try:
        from distributed import Client
        from distributed import wait as dask_wait
    except ImportError:
        raise ValueError("--address needs Dask distributed: pip install 'phaze[dask]'") from None
    if not str(address).startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        raise ValueError(f"address must look like tcp://HOST:PORT, got {address!r}")
    try:
        client = Client(address, timeout=connect_timeout_s)
    except OSError as exc:
        raise ValueError(f"address: cannot reach a Dask scheduler at {address} ({exc})") from None
    quieted = None
    try:
        client.run(_dask_worker_setup)
        failures: dict = {}
        futures = {}
        stamp = f"{time.time_ns():x}"
        handed = [0]

        def submit(cid, attempt):
            fut = client.submit(fn, make_task(cid), pure=False, retries=retries,
                                key=f"phaze-chunk-{stamp}-{cid}-{attempt}")
            futures[fut.key] = (cid, fut)

        try:
            slots = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        except Exception:  # noqa: BLE001 - older/newer scheduler_info layouts
            slots = 1
        limit = max(1, per_worker * slots)  # bounded, so tasks made later see a higher pruning floor
        pending = deque(chunk_ids)

        def top_up():  # while a slot is free and the next chunk may be sent (``ready``)
            while pending and len(futures) < limit and (ready is None or ready(pending[0])):
                submit(pending.popleft(), 0)

        top_up()
        heard = time.monotonic()
        while futures:
            try:
                done, _ = dask_wait([f for _, f in futures.values()], timeout=DASK_POLL_S,
                                    return_when="FIRST_COMPLETED")
            except Exception:  # noqa: BLE001 - a timeout (its class differs across versions)
                done = ()
            done = [f for f in done if f.status in ("finished", "error")]
            now = time.monotonic()
            if done or _scheduler_answers(client, min(DASK_POLL_S * 5, lost_after_s)):
                heard = now
            elif now - heard > lost_after_s:
                quieted = _quiet_dask()  # its reconnect attempts would print tracebacks
                raise SchedulerLost(
                    f"the Dask scheduler at {address} has not answered for "
                    f"{now - heard:.0f} s (lost); {handed[0]:,} chunks had finished")
            for fut in sorted(done, key=lambda f: futures[f.key][0]):
                cid, _ = futures.pop(fut.key)
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - KilledWorker and friends: retry
                    _count_failure(failures, cid, retries, f"{type(exc).__name__}: {exc}")
                    submit(cid, failures[cid])
                    continue
                finally:
                    fut.release()
                on_result(result)
                handed[0] += 1
                top_up()
    finally:
        try:
            client.close(timeout=2 if quieted is not None else 30)
        except Exception:  # noqa: BLE001 - a lost scheduler: nothing left to close cleanly
            pass
        if quieted is not None:
            time.sleep(0.2)  # let its cancelled reconnect task end while the loggers are quiet
            for logger, level in quieted:
                logger.setLevel(level)


def _quiet_dask() -> list:
    """Silence the ``distributed`` loggers (a lost scheduler: this run's one sentence says
    it); their previous levels, [(logger, level)]."""
    import logging

    loggers = [logging.getLogger(name) for name in
               ("distributed", "distributed.client", "distributed.core", "distributed.comm")]
    before = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    return before


def _scheduler_answers(client, timeout_s) -> bool:
    """Whether the client is connected and its scheduler answers an identity call within
    ``timeout_s`` seconds (the heartbeat of :func:`run_dask`)."""
    if getattr(client, "status", "running") != "running":
        return False
    try:
        client.sync(client.scheduler.identity, callback_timeout=timeout_s)
    except Exception:  # noqa: BLE001 - any failure to answer is no answer
        return False
    return True
