"""SIGTERM and SIGINT in the command line: SIGTERM is handled as Ctrl-C is (finished
chunks are written, the workers stopped, one line), and a watchdog ends a process whose
main thread cannot handle either within ``STOP_WATCHDOG_S`` seconds."""
from __future__ import annotations

import os
import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs: handled as Ctrl-C is (finished chunks are written,
    the workers stopped), then exit status 143."""


def _stop_word(exc) -> str:
    return "terminated" if isinstance(exc, Terminated) else "interrupted"


def _on_sigterm_raise(command=""):
    """Make SIGTERM raise :class:`Terminated` in the main thread, and start the watchdog
    (:func:`_stop_watchdog`); returns what :func:`_restore_signals` needs (None when not in
    the main thread, where no handler can be set)."""
    def handler(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # pragma: no cover - checked above: the main thread
        old_fd = -1
    import threading

    ended = threading.Event()
    threading.Thread(target=_stop_watchdog, args=(r, ended, command), name="phaze-stop-watchdog",
                     daemon=True).start()
    return previous, old_fd, w, ended


#: Seconds after SIGINT or SIGTERM before the watchdog ends a process whose main thread
#: has not (a compiled kernel that holds the interpreter runs no signal handler).
STOP_WATCHDOG_S = 8.0


def _stop_watchdog(fd, ended, command="") -> None:
    """Read the signal numbers Python's C handler writes to the wakeup pipe ``fd``; once
    SIGINT or SIGTERM came, give the main thread ``STOP_WATCHDOG_S`` to end, then end the
    process with one line and 130 / 143 (its workers die with it). Returns once the
    command ended (``ended`` set, the pipe closed)."""
    try:
        while True:
            data = os.read(fd, 64)
            if not data:
                return  # the command ended: _restore_signals closed the pipe
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    if ended.wait(STOP_WATCHDOG_S):
                        return
                    word = "terminated" if signum == signal.SIGTERM else "interrupted"
                    try:
                        os.write(2, f"phaze {command}: {word}; stopped without waiting for "
                                    f"the computation under way\n".encode())
                    finally:
                        os._exit(143 if signum == signal.SIGTERM else 130)
    except OSError:
        return
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _restore_signals(saved) -> None:
    """Undo :func:`_on_sigterm_raise` (the previous SIGTERM handler and wakeup fd)."""
    if saved is None:
        return
    previous, old_fd, w, ended = saved
    ended.set()
    try:
        signal.set_wakeup_fd(old_fd)
    except ValueError:  # pragma: no cover
        pass
    os.close(w)  # the watchdog sees the end of its pipe and returns
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
