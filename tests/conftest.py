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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def golden() -> Path:
    """Path of ../shared/golden; tests needing it are skipped with a clear message when absent."""
    if not GOLDEN.is_dir():
        pytest.skip(f"golden reference data not found at {GOLDEN} (set PHAZE_GOLDEN to its path)")
    return GOLDEN
