"""Imported first by every benchmark: the repository on ``sys.path`` and a numba cache
that cannot be stale.

numba's ``cache=True`` keys a kernel's cache on its own source file only, so a kernel
that calls a changed kernel in another file is loaded from a stale cache. Benchmarks
therefore point ``NUMBA_CACHE_DIR`` at a folder named by a hash of every Python source
of the package (unless the caller set it): a changed source gets a fresh cache, an
unchanged tree reuses its warm one. ``make clean`` clears the package's own caches.
"""
import hashlib
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _source_hash() -> str:
    h = hashlib.sha256()
    for path in sorted((REPO / "phaze").rglob("*.py")):
        h.update(str(path.relative_to(REPO)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


if "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "phaze-bench" / _source_hash())
