"""Comma-separated knob lists of ``phaze search`` (``--recompute none,full``,
``--sequence-parallel off,on``, ...): each parser returns the tuple the Python API
takes, or None when the option is absent (the API's default: every value), and raises
ValueError with one sentence naming the option otherwise."""
from __future__ import annotations

#: --recompute words: the modes, and the study-era switches (off = none, on = full).
RECOMPUTE_WORDS = {"none": ("none",), "selective": ("selective",), "full": ("full",),
                   "off": ("none",), "on": ("full",), "both": ("none", "full")}
SWITCH_WORDS = {"off": (False,), "on": (True,), "both": (False, True)}


def words(flag, text, allowed):
    """A comma list of words from ``allowed`` (dict word → values) as the union of their
    values in first-seen order; ValueError naming ``flag`` otherwise."""
    out = []
    items = [w.strip().lower() for w in str(text).split(",")]
    if not all(items) or any(w not in allowed for w in items):
        raise ValueError(f"{flag} takes a comma-separated list of {', '.join(allowed)}; "
                         f"got {text!r}")
    for w in items:
        out.extend(v for v in allowed[w] if v not in out)
    return tuple(out)


def recompute_list(text):
    """--recompute of search: 'none,selective,full' (also off = none, on = full, both =
    none,full) → a tuple of modes; None (absent) → None (every mode of the cost model)."""
    return None if text is None else words("--recompute", text, RECOMPUTE_WORDS)


def switch_list(flag, text):
    """An on/off strategy switch of search: 'off,on' (also 'both') → a tuple of booleans;
    None (absent) → None (both)."""
    return None if text is None else words(flag, text, SWITCH_WORDS)


def _int_tuple(text):
    """'1,2,4' → (1, 2, 4); () when any item is not an integer."""
    try:
        return tuple(int(x) for x in str(text).split(","))
    except ValueError:
        return ()


def virtual_list(text):
    """--virtual-stages of search: '1,2,4' → (1, 2, 4); 'all' or absent → None (every v a
    plan allows)."""
    return width_list("--virtual-stages", text)


def zero_list(text):
    """--zero-stage of search: '0,1' → (0, 1); absent → None (all four stages)."""
    if text is None:
        return None
    values = _int_tuple(text)
    if not values or any(not 0 <= v <= 3 for v in values):
        raise ValueError(f"--zero-stage takes a comma-separated list of 0, 1, 2, 3; got {text!r}")
    return values


def width_list(flag, text):
    """--ep / --cp / --virtual-stages of search: '1,2,4' → (1, 2, 4); 'all' or absent → None
    (every valid value, per model)."""
    if text is None or str(text).strip().lower() == "all":
        return None
    values = _int_tuple(text)
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{flag} takes 'all' or a comma-separated list of positive integers; "
                         f"got {text!r}")
    return values
