"""Imported first by every benchmark: the repository on ``sys.path``, so a benchmark runs
the checkout it lives in (its compiled extensions built in place by ``make build``)."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def plan_keywords(rec) -> dict:
    """``phaze.step.training_step``'s plan keywords of one ``best_plans`` row (a
    ``PLAN_DTYPE`` record): every knob of ``phaze.plan.KNOBS`` the row records, by the
    knob table (so a benchmark that re-prices a row keeps up with new knobs)."""
    from phaze import plan

    out = {}
    for k in plan.KNOBS:
        if k.name in rec.dtype.names:
            value = rec[k.name]
            out[k.name] = bool(value) if k.type is bool else k.type(value)
    return out
