"""Thread-count policy, in one place.

phaze parallelises across *processes* (the search's worker pool, Dask workers)
and inside compiled kernels (OpenMP in the Cython extensions; numpy's BLAS). Mixing the two
oversubscribes the cores, so a worker process pins every library to one thread,
while a plain interactive call may use all cores.
"""
import os

_THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)


def available_cores() -> int:
    """Cores this process may run on (respects CPU affinity where the OS exposes it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def kernel_threads() -> int:
    """Threads a compiled kernel may use in this process.

    ``PHAZE_NUM_THREADS`` overrides; a worker process (see :func:`pin_worker_threads`)
    gets 1; otherwise every available core.
    """
    env = os.environ.get("PHAZE_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"PHAZE_NUM_THREADS must be a positive integer, got {env!r}") from None
    return available_cores()


def pin_worker_threads() -> None:
    """Make this process single-threaded in every library (call first thing in a pool worker).

    ``PHAZE_NUM_THREADS`` (read by :func:`kernel_threads` at each call) limits phaze's own
    OpenMP kernels; the other variables, the OpenMP runtime's and the BLAS libraries'.
    """
    os.environ["PHAZE_NUM_THREADS"] = "1"
    for var in _THREAD_ENV_VARS:
        os.environ[var] = "1"
