"""Slow, obviously-correct reference implementations for the tests.

Each section belongs to one module of phaze and is written for clarity, not
speed: brute force over every choice the fast code prunes or structures away.
"""
import itertools  # noqa: F401  (used by the sections below)
import math  # noqa: F401

import numpy as np  # noqa: F401

# ---------------------------------------------------------------------------
# graph: FLOP and parameter counts straight from the formulas
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# cost: operator latencies
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# schedule: exhaustive search over modes and event orders (DAGs up to 7 operators)
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# placement: brute force over widths, cuts and data-parallel degrees
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# search: brute force over architectures and knobs through public evaluation
# ---------------------------------------------------------------------------
