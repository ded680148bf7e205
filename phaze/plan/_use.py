"""What the rest of phaze does with the knob table, generically: keyword checks and the
study's values, the search's grids, the command-line options and lists, the legend and
summaries, keyword signatures. Nothing here names a knob; every rule comes from
``phaze.plan._knobs``."""
from __future__ import annotations

import inspect

import numpy as np

from ._knobs import COLUMNS, KNOB, KNOBS

# ---------------------------------------------------------------------------
# keyword and study checks
# ---------------------------------------------------------------------------

def check_keywords(function: str, given: dict, allowed, required=()) -> None:
    """Refuse a keyword outside ``allowed`` (``TypeError``, as Python's own for a bad
    keyword) and a missing ``required`` one, naming ``function``."""
    for key in given:
        if key not in allowed:
            raise TypeError(f"{function}() got an unexpected keyword argument {key!r}")
    for key in required:
        if key not in given:
            raise TypeError(f"{function}() missing required keyword-only argument: {key!r}")


def study_value(name: str):
    """The value the original study's model has for knob ``name``."""
    return KNOB[name].study


def differs_from_study(name: str, value) -> bool:
    """Whether ``value`` (None: not given) of a calibrated-only knob is something the
    study's model does not price."""
    if value is None:
        return False
    return value != KNOB[name].study


# ---------------------------------------------------------------------------
# the search's grids
# ---------------------------------------------------------------------------

def _as_list(name, value, allowed):
    """``value`` (one value or a list) as a list, or ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_, int, np.integer, str, bytes)):
        value = (value,)
    try:
        values = list(value)
    except TypeError:
        values = []
    if not values:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return values


def grid(name: str, value):
    """The checked search grid of knob ``name``: None → the default (every value: both
    booleans, every choice, or None = every valid value per model for an open integer);
    one value or a list of them → a sorted tuple; ``ValueError`` naming the knob and what
    is allowed otherwise."""
    k = KNOB[name]
    if k.type is bool:
        allowed = f"True, False or a list of them (None: {k.grid_none})"
        if value is None:
            return (False, True)
        values = _as_list(name, value, allowed)
        if any(not isinstance(v, (bool, np.bool_)) for v in values):
            raise ValueError(f"{name} must be {allowed}, got {value!r}")
        return tuple(sorted({bool(v) for v in values}))
    if k.choices is not None:
        allowed = (f"{', '.join(map(str, k.choices))} or a list of them "
                   f"(None: {k.grid_none})")
        if value is None:
            return tuple(k.choices)
    else:
        allowed = f"a positive integer or a list of them (None: {k.grid_none})"
        if value is None:
            return None
    values = _as_list(name, value, allowed)
    if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))
           or (int(v) not in k.choices if k.choices is not None else int(v) < 1)
           for v in values):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return tuple(sorted({int(v) for v in values}))


def grid_words(grids: dict) -> list:
    """The searched values of each grid in words, in grid order ("sequence parallel
    off,on", "virtual stages all valid"): the summary's cost-model line."""
    out = []
    for k in sorted((k for k in KNOBS if k.grid_rank is not None and k.search == "grid"),
                    key=lambda k: k.grid_rank):
        if k.name not in grids:
            continue   # a result written before the knob existed
        values = grids[k.name]
        if values is None:
            out.append(f"{k.title} all valid")
            continue
        vals = ["on" if v is True else "off" if v is False else str(v) for v in values]
        out.append(f"{k.title} {','.join(vals)}")
    return out


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------

#: search's words of an on/off switch list, and of the recomputation modes (the study-era
#: switches: off = none, on = full, both = none,full).
SWITCH_WORDS = {"off": (False,), "on": (True,), "both": (False, True)}
RECOMPUTE_WORDS = {"none": ("none",), "selective": ("selective",), "full": ("full",),
                   "op": ("op",),
                   "off": ("none",), "on": ("full",), "both": ("none", "full")}


def add_evaluate_options(parser, names) -> None:
    """Add ``phaze evaluate``'s option of each knob in ``names`` (one value each): a bool
    is a bare switch (None when absent, so that the study's model can refuse it by name;
    one on by default also has its ``--no-`` form),
    an int with choices takes one of them, ``recompute`` a mode (bare: ``const``)."""
    for name in names:
        k = KNOB[name]
        kw = dict(dest=k.dest, help=k.help)
        if k.type is bool and k.default is True:
            # on by default: --NAME / --no-NAME (None when absent)
            import argparse
            kw.update(action=argparse.BooleanOptionalAction, default=None)
        elif k.type is bool:
            kw.update(action="store_true", default=None)
        elif k.const is not None:
            kw.update(nargs="?", const=k.const, default=None, choices=k.choices)
        elif k.type is str:
            kw.update(choices=k.choices, default=None)
            if k.choices is None and k.metavar:
                kw["metavar"] = k.metavar
        else:
            kw.update(type=k.type, default=k.evaluate_default)
            if k.required:
                del kw["default"]
                kw["required"] = True
            if k.choices is not None:
                kw["choices"] = k.choices
            elif k.metavar:
                kw["metavar"] = k.metavar
        if kw["help"] is None:
            del kw["help"]
        parser.add_argument(*k.flags, **kw)


def add_search_options(parser, names) -> None:
    """Add ``phaze search``'s option of each knob in ``names``: a grid takes a comma list
    (text, parsed by :func:`search_values`; absent = every value), a one-value knob one."""
    for name in names:
        k = KNOB[name]
        kw = dict(dest=k.dest, help=k.search_help, default=k.search_default)
        if k.search == "one" and k.type is str:
            kw["choices"] = k.choices
        elif k.search == "one" and k.type is bool:
            kw["type"] = _switch
        elif k.search == "one":
            kw["type"] = k.type
        if k.search_metavar:
            kw["metavar"] = k.search_metavar
        parser.add_argument(*k.flags, **kw)


def _switch(text) -> bool:
    """A one-value switch of ``phaze search``: on or off."""
    word = str(text).strip().lower()
    if word not in ("on", "off"):
        import argparse
        raise argparse.ArgumentTypeError(f"takes on or off, got {text!r}")
    return word == "on"


def int_tuple(text):
    """'1,2,4' → (1, 2, 4); () when any item is not an integer."""
    try:
        return tuple(int(x) for x in str(text).split(","))
    except ValueError:
        return ()


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


def search_values(name: str, text):
    """``phaze search``'s text of grid knob ``name`` as the tuple ``search`` takes, or None
    when absent (every value): 'off,on'/'both' for a switch, the mode words for
    ``recompute``, the choices for ZeRO, 'all' or positive integers for an open width;
    ``ValueError`` in one sentence naming the flag otherwise."""
    k = KNOB[name]
    if k.type is bool:
        return None if text is None else words(k.flag, text, SWITCH_WORDS)
    if k.type is str:
        return None if text is None else words(k.flag, text, RECOMPUTE_WORDS)
    if k.choices is not None:
        if text is None:
            return None
        values = int_tuple(text)
        if not values or any(v not in k.choices for v in values):
            raise ValueError(f"{k.flag} takes a comma-separated list of "
                             f"{', '.join(map(str, k.choices))}; got {text!r}")
        return values
    if text is None or str(text).strip().lower() == "all":
        return None
    values = int_tuple(text)
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{k.flag} takes 'all' or a comma-separated list of positive "
                         f"integers; got {text!r}")
    return values


# ---------------------------------------------------------------------------
# legend and summaries
# ---------------------------------------------------------------------------

def legend_lines(indent: str = "  ", key_width: int = 12) -> list:
    """The legend's lines of the knob columns, in column order: the header word, then its
    text (continuation lines indented under it)."""
    lines = []
    for name in COLUMNS:
        k = KNOB[name]
        first, *rest = k.legend.split("\n")
        lines.append(f"{indent}{k.short:<{key_width}}{first}")
        lines.extend(f"{indent}{'':<{key_width}}{line}" for line in rest)
    return lines


def summary_header() -> str:
    """The summary's header of the knob columns (rc, sp, v, zero, flash, ogr, ep, cp)."""
    return " ".join(f"{KNOB[n].short:>{KNOB[n].width}}" for n in COLUMNS)


def summary_row(row) -> str:
    """A result row's knob cells under :func:`summary_header`."""
    return " ".join(f"{cell:>{KNOB[n].width}}" for n, cell in zip(COLUMNS, summary_cells(row)))


def _cell(k, value) -> str:
    if k.type is bool:
        return "on" if value is True or value in (1, "true", "True") else "off"
    if k.type is str:
        if isinstance(value, bool):   # files of the study era hold recompute as a bool
            value = "full" if value else "none"
        return str(value)
    return str(int(value or k.default))


def summary_phrases(row) -> str:
    """A result row's knobs in words, in column order ("recompute full, sp on, v=2, ...":
    the baselines' lines)."""
    return ", ".join((KNOB[n].phrase or f"{KNOB[n].short} {{}}").format(cell)
                     for n, cell in zip(COLUMNS, summary_cells(row)))


def summary_cells(row) -> list:
    """A result row's knob values as the summary shows them, in column order (a row of an
    older file lacks the strategy knobs: the study's values)."""
    return [_cell(KNOB[n], row.get(n, KNOB[n].study)) for n in COLUMNS]


# ---------------------------------------------------------------------------
# keyword signatures generated from the table
# ---------------------------------------------------------------------------

def keyword_signature(function, names, defaults=None):
    """Give ``function`` (which takes ``**knobs``) an introspectable signature: its own
    parameters, the ``**knobs`` replaced by keyword-only parameters ``names`` with
    ``defaults`` (name → value; absent: the knob's default; ``inspect.Parameter.empty``
    for a required one). Returns ``function``."""
    defaults = defaults or {}
    sig = inspect.signature(function)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    have = {p.name for p in params}
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY,
                               default=defaults.get(n, KNOB[n].default if n in KNOB else None))
             for n in names if n not in have]
    function.__signature__ = sig.replace(parameters=params + extra)
    return function
