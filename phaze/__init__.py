"""phaze: joint accelerator-architecture and device-placement search for LLM training.

The flow, each step a module or package that only looks backwards:
``models`` → ``graph`` → ``arch`` → ``collectives`` → ``cost`` → ``schedule`` → ``placement``
→ ``step`` → ``search``, with ``plan`` (the one declaration of a training plan's knobs) read
beside them and ``cli`` on top (docs/design.md §1, §2.11).
Units are SI throughout: seconds, bytes, bytes/s (decimal GB/s where a name says ``gb_per_s``).
"""
import os
import sys
import tempfile
from importlib import import_module

__version__ = "0.1.0"


def _numba_cache_dir() -> None:
    """Point numba's on-disk cache of compiled kernels at a per-user folder.

    numba's default puts cache files next to the source, in ``phaze/__pycache__``.
    For an installed phaze that is ``site-packages/phaze/``; pip does not know these
    files, so after ``pip install . && phaze search ...`` a later ``pip install -e .``
    leaves the folder behind, and as a namespace package it hides the editable
    install (ImportError from every other folder). A read-only install without a
    writable home fails at import instead. So, unless ``NUMBA_CACHE_DIR`` is set
    (the user's choice wins), the cache goes to ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``phaze/numba-<version>`` (numba keys its files by the
    source path and modification time below that, so two copies of phaze never
    share entries); without a writable home, to the temporary folder, saying so
    in one sentence on stderr. The variable is read by numba when it is imported
    and propagates to worker processes; an already imported numba gets the
    folder in its config directly.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates = [(os.path.join(base, "phaze", f"numba-{__version__}"), False)]
    try:
        uid = os.getuid()
    except AttributeError:  # pragma: no cover - Windows
        uid = os.environ.get("USERNAME", "user")
    candidates.append((os.path.join(tempfile.gettempdir(), f"phaze-{uid}", f"numba-{__version__}"),
                       True))
    for folder, fallback in candidates:
        try:
            os.makedirs(folder, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError:
            continue
        if fallback:
            print(f"phaze: the cache folder {candidates[0][0]} is not writable; compiled kernels "
                  f"are cached in {folder} instead", file=sys.stderr)
        os.environ["NUMBA_CACHE_DIR"] = folder
        if "numba" in sys.modules:
            sys.modules["numba"].config.CACHE_DIR = folder
        return
    print("phaze: no writable cache folder (home and temporary folder); numba caches next "
          "to the installed sources if it can", file=sys.stderr)


_numba_cache_dir()

_SUBMODULES = ("models", "graph", "arch", "cost", "schedule", "placement", "step", "search",
               "validate", "trace", "launch", "precision", "plan", "collectives", "cli")

__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name):
    # Submodules load on first use so that `import phaze` stays cheap (no numba/highspy import).
    if name in _SUBMODULES:
        return import_module(f"phaze.{name}")
    raise AttributeError(f"module 'phaze' has no attribute {name!r}")
