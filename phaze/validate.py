"""Predicted vs published training runs: ``phaze validate [FILE] [--json]`` (issue 13).

:func:`run` reads a validation table (the built-in ``phaze/data/validation.json`` when
``path`` is None), predicts every row with :func:`phaze.step.training_step` (the
calibrated model) with the row's own configuration (interleaving, sequence parallelism,
recomputation none/selective/full) and returns a :class:`Report`. A row phaze cannot
model, or a plan Megatron-LM would refuse, keeps its place with
``predicted_s``/``predicted_gib`` None and the ``reason``; no row is dropped.

Errors are signed percentages, ``error = 100·(predicted − published)/published``.
``time_mape`` / ``time_max_error`` are the mean and the largest absolute error (%) over
the modelled time rows; ``memory_mape`` over the modelled memory rows; ``None`` when no
row of that kind is modelled. ``held_out_time_mape`` is the same over the rows marked
``held_out`` (kept out of any parameter choice, sheet §6).

Validation file schema (JSON; the built-in table follows it)
-------------------------------------------------------------
::

    {
      "name": str, "description": str,                       (optional)
      "models": {                                              model shapes by name
        NAME: {"n_layers": int, "hidden": int, "heads": int, "ffn_hidden": int,
               "vocab": int, "seq_len": int,
               optional ModelSpec fields: "kv_heads", "activation", "norm", "position",
               "bias", "tied_embeddings", ...}                 (default: Megatron GPT —
      },                                                        GELU, LayerNorm, learned
      "rows": [                                                 positions, biases, tied)
        {"name": str,                  unique, e.g. "korthikanti2022/table5/gpt3-175b/full"
         "kind": "time" | "memory",
         "source": str,                paper, table or figure, hardware
         "model": str,                 a key of "models" or a phaze zoo name
         "arch": str,                  an architecture preset (phaze archs), e.g. "a100-80g"
         "gpus": int,                  t·p·d (checked)
         KEY: value,                   the plan: every knob of phaze.plan.KNOBS with a
                                       file_key, by that key (t, p, d the sizes; the
                                       others by the knob's name: microbatch and
                                       global_batch in samples, the interleaving, the
                                       recomputation mode, sequence parallelism and the
                                       precision; flash attention, the ZeRO stage and
                                       overlapped gradient reduction optional, at the
                                       knob's default), values by the knob's rule
         "published_s": float,         kind "time": seconds per iteration
         "quantity": "par_opt" | "act",            kind "memory": parameters + gradients +
         "published_gib": float,       optimizer state of the transformer layers, or their
                                       activations in flight, per GPU of the first stage, GiB
         "held_out": bool,             (optional, default false)
         "assumptions": [str, ...]}    (optional) what the source does not state
      ]
    }

Each report row is a dict with ``name``, ``kind``, ``predicted_s``, ``published_s``
(memory rows: ``predicted_gib``, ``published_gib``, ``quantity``), ``error`` (None when
not modelled), ``reason`` ("" when modelled), ``held_out``, ``source``, ``config`` and
``assumptions``; time rows also carry the step ``breakdown`` (seconds).
"""
from __future__ import annotations

import dataclasses
import os
from importlib import resources

from . import models as _models
from . import plan as _plan
from . import step as _step
from ._validate import read_json

__all__ = ["Report", "run", "load_table", "builtin_path"]

_GIB = float(2 ** 30)
#: The plan's knobs a row holds (``phaze.plan.Knob.file_key``), in the order of a report
#: row's ``config``.
_FILE_KNOBS = tuple(sorted((k for k in _plan.KNOBS if k.file_key), key=lambda k: k.file_rank))
_CONFIG_KEYS = ("model", "arch", "gpus") + tuple(k.file_key for k in _FILE_KNOBS
                                                 if not k.file_optional)
#: Optional strategy fields of a row and their defaults (the runs of 2021–22 used none).
_OPTIONAL_KEYS = tuple((k.file_key, k.default) for k in _FILE_KNOBS if k.file_optional)
#: Fields that must be positive integers: the GPUs and the open integer knobs.
_POSITIVE_KEYS = ("gpus",) + tuple(k.file_key for k in _FILE_KNOBS
                                   if k.type is int and k.choices is None)
_SHAPE_REQUIRED = ("n_layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")


@dataclasses.dataclass
class Report:
    """Rows (dicts, module docstring) and the error summaries in percent (None: no row)."""

    rows: list
    time_mape: float
    time_max_error: float
    memory_mape: float
    memory_max_error: float
    held_out_time_mape: float
    source: str

    def to_json(self) -> dict:
        return dict(source=self.source, rows=self.rows, time_mape=self.time_mape,
                    time_max_error=self.time_max_error, memory_mape=self.memory_mape,
                    memory_max_error=self.memory_max_error,
                    held_out_time_mape=self.held_out_time_mape)


def builtin_path() -> str:
    """Path of the built-in validation table."""
    return str(resources.files("phaze") / "data" / "validation.json")


def load_table(path=None) -> dict:
    """The validation table at ``path`` (None: the built-in one), checked against the schema;
    ``ValueError`` names the first bad row and field."""
    path = builtin_path() if path is None else os.fspath(path)
    table = read_json(path, "a validation table")
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        raise ValueError(f"{path}: a validation table is an object with a 'rows' list")
    shapes = table.get("models", {})
    if not isinstance(shapes, dict):
        raise ValueError(f"{path}: 'models' must be an object of model shapes")
    seen = set()
    for i, row in enumerate(table["rows"]):
        where = f"{path}: row {i} ({row.get('name', '?') if isinstance(row, dict) else '?'})"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: a row is an object")
        for key in ("name", "kind", "source") + _CONFIG_KEYS:
            if key not in row:
                raise ValueError(f"{where}: missing field {key!r}")
        if row["name"] in seen:
            raise ValueError(f"{where}: name appears twice")
        seen.add(row["name"])
        if row["kind"] == "time":
            need = ("published_s",)
        elif row["kind"] == "memory":
            need = ("published_gib", "quantity")
            if row.get("quantity") not in ("par_opt", "act"):
                raise ValueError(f"{where}: quantity must be 'par_opt' or 'act'")
        else:
            raise ValueError(f"{where}: kind must be 'time' or 'memory', got {row['kind']!r}")
        for key in need:
            if key not in row:
                raise ValueError(f"{where}: missing field {key!r}")
        published = row[need[0]]
        if not isinstance(published, (int, float)) or isinstance(published, bool) or published <= 0:
            raise ValueError(f"{where}: {need[0]} must be a positive number")
        for key in _POSITIVE_KEYS:
            if not isinstance(row[key], int) or isinstance(row[key], bool) or row[key] < 1:
                raise ValueError(f"{where}: {key} must be a positive integer")
        if row["gpus"] != row["t"] * row["p"] * row["d"]:
            raise ValueError(f"{where}: gpus ({row['gpus']}) != t·p·d "
                             f"({row['t'] * row['p'] * row['d']})")
        for knob in _FILE_KNOBS:
            if not knob.file_optional:
                continue
            value = row.get(knob.file_key, knob.default)
            ok = (isinstance(value, bool) if knob.type is bool
                  else isinstance(value, int) and not isinstance(value, bool)
                  and value in knob.choices)
            if not ok:
                raise ValueError(f"{where}: {knob.file_key} must be "
                                 f"{'true or false' if knob.type is bool else knob.rule}")
        if row["model"] not in shapes and row["model"] not in _models.names():
            raise ValueError(f"{where}: model {row['model']!r} is neither in 'models' nor in the zoo")
    for name, shape in shapes.items():
        missing = [k for k in _SHAPE_REQUIRED if k not in shape]
        if missing:
            raise ValueError(f"{path}: model {name!r} lacks {', '.join(missing)}")
    table["_path"] = path
    return table


def _model_spec(name, shapes):
    """The table's shape as a ModelSpec (Megatron GPT defaults), else the zoo's model."""
    if name not in shapes:
        return _models.get(name)
    shape = dict(shapes[name])
    shape.setdefault("kv_heads", shape["heads"])
    return _models.ModelSpec(name=name, **shape)


def _error(predicted, published):
    return 100.0 * (predicted - published) / published


def _mape(errors):
    return sum(abs(e) for e in errors) / len(errors) if errors else None


def _max(errors):
    return max(abs(e) for e in errors) if errors else None


def run(path=None) -> Report:
    """Predict every row of the validation table at ``path`` (None: built-in); a :class:`Report`."""
    table = load_table(path)
    shapes = table.get("models", {})
    out = []
    for row in table["rows"]:
        config = {k: row[k] for k in _CONFIG_KEYS}
        config.update({k: row.get(k, default) for k, default in _OPTIONAL_KEYS})
        res = _step.training_step(_model_spec(row["model"], shapes), row["arch"],
                                  **{k.name: config[k.file_key] for k in _FILE_KNOBS})
        rec = dict(name=row["name"], kind=row["kind"], held_out=bool(row.get("held_out", False)),
                   reason=res.reason, source=row["source"], config=config,
                   assumptions=list(row.get("assumptions", [])))
        if row["kind"] == "time":
            pred = res.time_s if res.ok else None
            rec.update(predicted_s=pred, published_s=float(row["published_s"]),
                       error=None if pred is None else _error(pred, row["published_s"]),
                       breakdown=dataclasses.asdict(res.breakdown) if res.ok else None)
        else:
            pred = None
            if res.ok:
                first = res.memory[0]   # the first stage holds p microbatches in flight
                pred = (first.layer_param_state if row["quantity"] == "par_opt"
                        else first.activations) / _GIB
            rec.update(quantity=row["quantity"], predicted_gib=pred,
                       published_gib=float(row["published_gib"]),
                       error=None if pred is None else _error(pred, row["published_gib"]))
        out.append(rec)
    time_err = [r["error"] for r in out if r["kind"] == "time" and r["error"] is not None]
    held = [r["error"] for r in out if r["kind"] == "time" and r["error"] is not None and r["held_out"]]
    mem_err = [r["error"] for r in out if r["kind"] == "memory" and r["error"] is not None]
    return Report(rows=out, time_mape=_mape(time_err), time_max_error=_max(time_err),
                  memory_mape=_mape(mem_err), memory_max_error=_max(mem_err),
                  held_out_time_mape=_mape(held), source=table["_path"])


def format_report(report: Report) -> str:
    """The report as the text table ``phaze validate`` prints."""
    def num(x, fmt):
        return "—" if x is None else format(x, fmt)

    width = max(len(r["name"]) for r in report.rows) if report.rows else 4
    lines = [f"{'name':<{width}}  {'predicted':>10}  {'published':>10}  {'error':>8}"]
    for r in report.rows:
        unit, pk, qk = ("s", "predicted_s", "published_s") if r["kind"] == "time" else \
            ("GiB", "predicted_gib", "published_gib")
        pred = num(r[pk], ".3f") + (" " + unit if r[pk] is not None else "")
        line = (f"{r['name']:<{width}}  {pred:>10}  {format(r[qk], '.3f') + ' ' + unit:>10}  "
                f"{num(r['error'], '+.1f') + ('%' if r['error'] is not None else ''):>8}")
        if r["reason"]:
            line += f"  ({r['reason']})"
        elif r["held_out"]:
            line += "  (held out)"
        lines.append(line)
    n_time = sum(1 for r in report.rows if r["kind"] == "time")
    n_mem = len(report.rows) - n_time
    m_time = sum(1 for r in report.rows if r["kind"] == "time" and r["error"] is not None)
    m_mem = sum(1 for r in report.rows if r["kind"] == "memory" and r["error"] is not None)
    lines.append("")
    lines.append(f"time:   MAPE {num(report.time_mape, '.1f')} %, max error "
                 f"{num(report.time_max_error, '.1f')} % over {m_time} of {n_time} rows modelled"
                 f" (held out: MAPE {num(report.held_out_time_mape, '.1f')} %)")
    lines.append(f"memory: MAPE {num(report.memory_mape, '.2f')} %, max error "
                 f"{num(report.memory_max_error, '.2f')} % over {m_mem} of {n_mem} rows modelled")
    return "\n".join(lines)
