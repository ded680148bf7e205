"""Imported first by every benchmark: the repository on ``sys.path``, so a benchmark runs
the checkout it lives in (its compiled extensions built in place by ``make build``)."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
