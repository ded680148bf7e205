"""Shared fixtures: the golden reference data in ../shared/golden (CI has it there too)."""
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(os.environ.get("PHAZE_GOLDEN", REPO.parent / "shared" / "golden"))

# Deterministic, bounded property tests: CI is a busy 2-core machine.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
# Under NUMBA_DISABLE_JIT=1 (`make test-nojit`) every kernel runs as plain Python, tens
# to hundreds of times slower: the properties run on a smaller deterministic sample so
# the whole suite stays inside CI's time (the compiled run keeps the full sample).
settings.register_profile(
    "nojit", max_examples=12, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
_NOJIT = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "nojit" if _NOJIT else "ci"))


@pytest.fixture(scope="session")
def golden() -> Path:
    """Path of ../shared/golden; tests needing it are skipped with a clear message when absent."""
    if not GOLDEN.is_dir():
        pytest.skip(f"golden reference data not found at {GOLDEN} (set PHAZE_GOLDEN to its path)")
    return GOLDEN
