"""Comma-separated knob lists of ``phaze search`` (``--recompute none,full``,
``--sequence-parallel off,on``, ...): each parser returns the tuple the Python API
takes, or None when the option is absent (the API's default: every value), and raises
ValueError with one sentence naming the option otherwise. The rules are the knob
table's (:func:`phaze.plan.search_values`); these names keep the parsers by kind."""
from __future__ import annotations

from .. import plan as _plan

#: --recompute words: the modes, and the study-era switches (off = none, on = full).
RECOMPUTE_WORDS = _plan.RECOMPUTE_WORDS
SWITCH_WORDS = _plan.SWITCH_WORDS
words = _plan.words


def knob_list(name, text):
    """``phaze search``'s text of the grid knob ``name`` (``phaze.plan.search_values``)."""
    return _plan.search_values(name, text)


def recompute_list(text):
    """--recompute of search: 'none,selective,full' (also off = none, on = full, both =
    none,full) → a tuple of modes; None (absent) → None (every mode of the cost model)."""
    return None if text is None else words("--recompute", text, RECOMPUTE_WORDS)


def switch_list(flag, text):
    """An on/off strategy switch of search: 'off,on' (also 'both') → a tuple of booleans;
    None (absent) → None (both)."""
    return None if text is None else words(flag, text, SWITCH_WORDS)


def width_list(flag, text):
    """--ep / --cp / --virtual-stages of search: '1,2,4' → (1, 2, 4); 'all' or absent → None
    (every valid value, per model)."""
    if text is None or str(text).strip().lower() == "all":
        return None
    values = _plan.int_tuple(text)
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{flag} takes 'all' or a comma-separated list of positive integers; "
                         f"got {text!r}")
    return values


def virtual_list(text):
    """--virtual-stages of search: '1,2,4' → (1, 2, 4); 'all' or absent → None (every v a
    plan allows)."""
    return width_list("--virtual-stages", text)


def zero_list(text):
    """--zero-stage of search: '0,1' → (0, 1); absent → None (all four stages)."""
    if text is None:
        return None
    values = _plan.int_tuple(text)
    if not values or any(not 0 <= v <= 3 for v in values):
        raise ValueError(f"--zero-stage takes a comma-separated list of 0, 1, 2, 3; got {text!r}")
    return values
