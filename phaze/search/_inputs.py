"""Checking a search's input: every argument is validated before any work starts.

Each function takes what a user may pass (names, scalars, sequences, arrays) and
returns it in one canonical form, or raises ValueError with one sentence naming
the argument and what it accepts.
"""
from __future__ import annotations

import os

import numpy as np

from .. import plan as _plan
from ..plan import check_expert_grid, model_expert_grid  # noqa: F401  (the chunk runners')
from .._validate import hbm_gib as _hbm_gib
from .._validate import positive_float, positive_int
from ._models import RECOMPUTE_MODES, cost_model

def resolve_models(models, seq_len=None) -> list:
    """``models`` (a zoo name, a ModelSpec or a list of them) as a list of distinct ModelSpecs;
    ``seq_len`` (tokens per sample), when given, replaces each model's own (a copy)."""
    from .. import models as zoo

    if isinstance(models, (str, zoo.ModelSpec)):
        models = [models]
    try:
        models = list(models)
    except TypeError:
        raise ValueError(f"models must be a model name, a ModelSpec or a list of them, "
                         f"got {models!r}") from None
    if not models:
        raise ValueError("models must name at least one model")
    out = []
    for m in models:
        if isinstance(m, zoo.ModelSpec):
            out.append(m)
        elif isinstance(m, str):
            try:
                out.append(zoo.get(m))
            except KeyError:
                raise ValueError(f"models: unknown model {m!r}; known: {', '.join(zoo.names())}") \
                    from None
        else:
            raise ValueError(f"models must contain names or ModelSpec objects, got {m!r}")
    if seq_len is not None:
        seq_len = positive_int("seq_len", seq_len, zoo.MODEL_LIMITS["seq_len"])
        out = [m if m.seq_len == seq_len else m.with_(seq_len=seq_len) for m in out]
    for m in out:
        if m.op_graph_refusal:  # refuse before any chunk runs, not after its retries
            raise ValueError(f"models: {m.op_graph_refusal}")
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"models: each model may appear once, got {', '.join(names)}")
    return out


def _as_list(values, scalar_types, not_a_list, empty):
    """``values`` as a non-empty list (a lone scalar of ``scalar_types`` becomes a list of
    one); ``not_a_list`` / ``empty``: the ValueError messages otherwise."""
    if isinstance(values, scalar_types) and not isinstance(values, bool):
        values = (values,)
    try:
        values = list(values)
    except TypeError:
        raise ValueError(not_a_list) from None
    if not values:
        raise ValueError(empty)
    return values


def int_tuple(name, values) -> tuple:
    """A positive integer or a list of them as a sorted tuple of distinct values."""
    values = _as_list(values, (int, np.integer),
                      f"{name} must be a positive integer or a list of them, got {values!r}",
                      f"{name} must list at least one value")
    return tuple(sorted({positive_int(name, v) for v in values}))


def resolve_hbm(hbm_gib) -> tuple:
    """HBM capacities (GiB) as a sorted tuple; None → ``(None,)`` (each row's own)."""
    if hbm_gib is None:
        return (None,)
    values = _as_list(hbm_gib, (int, float, np.number),
                      f"hbm_gib must be a number of GiB or a list of them, got {hbm_gib!r}",
                      "hbm_gib must list at least one capacity (or be None for each row's own)")
    return tuple(sorted({_hbm_gib("hbm_gib", v) for v in values}))


def resolve_prune(prune) -> str:
    """``prune`` as "" (off), "best" (``True``) or "front"."""
    if prune is None or prune is False:
        return ""
    if prune is True:
        return "best"
    if isinstance(prune, str) and prune in ("best", "front"):
        return prune
    raise ValueError(f"prune must be False, True, 'best' or 'front', got {prune!r}")



def resolve_recompute(recompute, study=False) -> tuple:
    """``recompute`` as a tuple of distinct modes in :data:`RECOMPUTE_MODES` order.

    Accepts a mode name ("none", "selective", "full"), a boolean (True = "full", False =
    "none", as before the modes) or a list of them; None: every mode the cost model has
    (``_models.CostModel.recompute_modes``: the calibrated model all three, the study's
    ("none", "full"))."""
    model = cost_model(study)
    if recompute is None:
        return model.recompute_modes
    if isinstance(recompute, (bool, np.bool_, str)):
        recompute = (recompute,)
    try:
        values = list(recompute)
    except TypeError:
        values = None
    modes = set()
    for v in values or ():
        if isinstance(v, (bool, np.bool_)):
            modes.add("full" if v else "none")
        elif isinstance(v, str) and v in RECOMPUTE_MODES:
            modes.add(v)
        else:
            values = None
            break
    if not values:
        raise ValueError(f"recompute must be 'none', 'selective', 'full' (True = 'full', False "
                         f"= 'none') or a list of them, got {recompute!r}"
                         + (" ('op', torchtitan's per-op checkpointing, is priced by evaluate "
                            "and validate, not searched)" if "op" in (
                                recompute if isinstance(recompute, (list, tuple))
                                else (recompute,)) else ""))
    missing = [m for m in RECOMPUTE_MODES if m in modes and m not in model.recompute_modes]
    if missing:
        other = cost_model(not study)
        raise ValueError(f"recompute: {model.title} has no {missing[0]} recomputation (only "
                         f"{' and '.join(repr(m) for m in model.recompute_modes)}); "
                         f"{other.choose} to search it")
    return tuple(m for m in RECOMPUTE_MODES if m in modes)


#: The study's strategy: what each searched knob is under ``study=True`` (its only value).
STUDY_GRIDS = {name: (_plan.study_value(name),) for name in _plan.GRIDS
               if _plan.KNOB[name].search == "grid"}


def resolve_strategy_grids(study, **given) -> dict:
    """The strategy knob grids of a search (``phaze.plan.GRIDS``), checked: {knob: tuple
    (an open integer grid may be None: every valid value), a one-value knob (precision,
    capacity factor): its value}. With ``study`` each knob must be left out (None) or be
    the study's own value; the study's model has no other."""
    from .._validate import one_of, positive_float

    _plan.check_keywords("search", given, _plan.GRIDS)
    grids = {name: _plan.grid(name, given.get(name)) for name in STUDY_GRIDS}
    if not cost_model(study).strategy_knobs:
        for name, study_value in STUDY_GRIDS.items():
            if given.get(name) is not None and grids[name] != study_value:
                raise ValueError(f"{name}: the study's model searches only {study_value[0]!r}; "
                                 f"leave it out with study=True (or leave study off to "
                                 f"search it)")
        for name in _plan.GRIDS:
            k = _plan.KNOB[name]
            if k.search == "one" and _plan.differs_from_study(name, given.get(name)):
                raise ValueError(f"{name}: the study's model has no {k.study_lacks}; leave it "
                                 f"out with study=True")
        return dict(STUDY_GRIDS, **{name: _plan.study_value(name) for name in _plan.GRIDS
                                    if name not in STUDY_GRIDS})
    for name in _plan.GRIDS:
        k = _plan.KNOB[name]
        if k.search != "one":
            continue
        value = given.get(name)
        if k.type is float:
            grids[name] = None if value is None else positive_float(name, value)
        elif k.type is bool or k.normalize is not None:
            grids[name] = k.check(k.default if value is None else value)
        else:
            grids[name] = one_of(name, k.default if value is None else value, k.choices)
    from .._validate import MAX_DEVICES, show

    for name, values in grids.items():  # counts the kernels hold (int64 loops over them)
        for v in values if isinstance(values, tuple) else ():
            if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) \
                    and v > MAX_DEVICES:
                raise ValueError(f"{name} must hold integers of at most {MAX_DEVICES:,}, "
                                 f"got {show(v)}")
    return grids


def resolve_space(space) -> np.ndarray:
    """Architecture rows of ``space``: None (the default space), an ArchSpace, a preset
    name or chip file (``phaze.arch.resolve_chip``), a Chip, or structured rows (checked
    by ``phaze.arch.validate``)."""
    from .. import arch

    if space is None:
        return arch.ArchSpace.default().configs
    if isinstance(space, arch.ArchSpace):
        rows = space.configs
    elif isinstance(space, (str, os.PathLike, arch.Chip)):
        rows = arch.resolve_chip(space).row
    else:
        rows = space
    if isinstance(rows, np.ndarray) and rows.dtype.names is not None and rows.size == 0:
        raise ValueError("space: the architecture space is empty")
    return arch.validate(rows)


def space_ids(rows) -> tuple[np.ndarray, bool]:
    """Architecture ids of the searched rows: each row's number in the default space
    (``ArchSpace.default()``) when every row belongs to it, so an id names the same
    architecture under any subset (``--space-every K``, ``space=rows[sel]``); otherwise
    the rows' own numbers in the given space. Returns (ids, whether they are rows of
    the default space)."""
    from .. import arch

    rows = np.ascontiguousarray(rows)
    default = arch.ArchSpace.default().configs
    if rows.dtype == default.dtype:
        where = {r.tobytes(): i for i, r in enumerate(default)}
        ids = [where.get(r.tobytes()) for r in rows]
        if all(i is not None for i in ids):
            return np.array(ids, dtype=np.int64), True
    return np.arange(rows.shape[0], dtype=np.int64), False


def allowed_widths(model) -> list:
    """The tensor-parallel widths ``model`` allows (those dividing heads and kv_heads)."""
    return [t for t in range(1, int(model.heads) + 1) if model.valid_tensor_parallel(t)]


def check_some_width(model, widths, field="tensor_parallel") -> None:
    """ValueError naming ``field`` when no width of ``widths`` is valid for ``model``
    (every point would be infeasible: said before any work)."""
    if not any(model.valid_tensor_parallel(t) for t in widths):
        raise ValueError(
            f"{field}: no width in {', '.join(str(t) for t in widths)} divides the heads "
            f"({model.heads}) and kv_heads ({model.kv_heads}) of {model.name}; allowed widths: "
            f"{', '.join(str(t) for t in allowed_widths(model))}")


def valid_widths(model, widths) -> tuple[list, dict]:
    """(widths valid for ``model``, {invalid width: why}): t must divide heads and kv_heads."""
    valid, skipped = [], {}
    for t in widths:
        if model.valid_tensor_parallel(t):
            valid.append(t)
        else:
            skipped[t] = (f"t={t} does not divide heads ({model.heads}) and kv_heads "
                          f"({model.kv_heads})")
    return valid, skipped


def arch_row(arch) -> np.ndarray:
    """One architecture: a preset name or chip file (``phaze.arch.resolve_chip``), a Chip,
    a structured row or a one-row array (a fresh, writable one-row ``ARCH_DTYPE`` array)."""
    from .. import arch as arch_mod

    if isinstance(arch, (str, os.PathLike, arch_mod.Chip)):
        return arch_mod.resolve_chip(arch).row.copy()
    rows = arch_mod.validate(arch)
    if rows.shape[0] != 1:
        raise ValueError(f"arch must be one architecture, got {rows.shape[0]} rows")
    return rows
