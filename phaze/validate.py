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
         "assumptions": [str, ...],    (optional) what the source does not state
         "cp": int, "ep": int,         (optional, default 1) context- and expert-parallel
                                       widths (gpus = t·cp·p·d; ep carved out of cp·d)
         "grad_reduce_dtype": str,     (optional, default "fp32") fp32 | bf16 | fp16
         "seq_len": int,               (optional) the row's sequence, replacing the model's
         "mtp_layers": int,            (optional) the multi-token-prediction depth the run
                                       trained, replacing the model's (0: a trainer that
                                       builds no MTP module, e.g. NeMo AutoModel's
                                       DeepSeek-V3)
         "table": str,                 (optional, default the name up to its first "/")
                                       the published table the row belongs to
         "trainer": str,               (optional, default "megatron") who ran it: megatron
                                       (Megatron-LM, NeMo), torchtitan, automodel, maxtext, ...;
                                       it sets the default of the row's pipeline_split
                                       (TRAINER_SPLITS: remainder_first for torchtitan
                                       and automodel, else even) and of its
                                       master_weights (TRAINER_MASTER_WEIGHTS: params for
                                       torchtitan, automodel and maxtext, else separate)
         "model_class": str,           (optional) dense | mixtral | moe | hybrid: rows that
                                       carry it count towards the H100 dense coverage line
         "reason": str}                (optional) why phaze cannot model the row yet, in
                                       one sentence: the row is not predicted, its "model"
                                       may then name a model phaze lacks and its "arch" a
                                       chip without a preset
      ]
    }

The built-in table is ``phaze/data/validation.json`` (the runs of 2021–22),
``phaze/data/modern_runs.json`` (the published runs of 2024–26, issue 25) and
``phaze/data/held_out_runs.json`` (published runs no issue names, found by the project and
marked ``held_out``: MaxText's TPU v5p and v6e runs) read together: :func:`builtin_paths`.
Besides the overall errors a :class:`Report` groups the rows
(``groups``): per table and per chip (the row's ``arch``) the rows, how many are
modelled and the time MAPE / max error; per trainer and chip the signed mean time
error; and the H100 rows of dense or Mixtral-class models (``model_class``) modelled.

Each report row is a dict with ``name``, ``kind``, ``predicted_s``, ``published_s``
(memory rows: ``predicted_gib``, ``published_gib``, ``quantity``), ``error`` (None when
not modelled), ``reason`` ("" when modelled), ``held_out``, ``source``, ``config`` and
``assumptions``; time rows also carry the step ``breakdown`` (seconds) and, when modelled,
phaze's memory of the fullest stage against its HBM: ``memory_gib``, ``hbm_gib`` and ``fits``
(False: a run that fitted is over HBM by phaze's memory model, so the search would refuse its
plan; the report counts them).
"""
from __future__ import annotations

import dataclasses
import os
from importlib import resources

from . import models as _models
from . import plan as _plan
from . import arch as _arch
from . import step as _step
from ._validate import read_json

__all__ = ["Report", "run", "load_table", "builtin_path", "builtin_paths", "format_report",
           "H100_ARCHS"]

_GIB = float(2 ** 30)
#: The pipeline split each trainer makes (``phaze.plan`` knob ``pipeline_split``), the
#: default of a row that does not state one: torchtitan's _generate_llm_fqn_per_model_part
#: and NeMo AutoModel's generate_hf_model_fqn_per_model_part give the remainder of the
#: layers over the chunks to the first chunks (torchtitan counting the embedding and the
#: head as one layer each, the row's ``account_for_embedding``; AutoModel not);
#: Megatron-LM (and NeMo on it) needs them to divide.
TRAINER_SPLITS = {"torchtitan": "remainder_first", "automodel": "remainder_first"}
#: Where each trainer keeps the master weights (``phaze.plan`` knob ``master_weights``), the
#: default of a row that does not state one: PyTorch FSDP2 (torchtitan, NeMo AutoModel) and
#: JAX (MaxText's ``weight_dtype: float32``) keep fp32 parameters, which are the optimizer's
#: master weights; Megatron-LM (and NeMo on it) keeps fp32 main parameters beside 16-bit
#: ones (docs/fidelity-sources.md §10.8).
TRAINER_MASTER_WEIGHTS = {"torchtitan": "params", "automodel": "params", "maxtext": "params"}
#: The row keys a trainer sets the default of, and each trainer's values.
_TRAINER_DEFAULTS = {"pipeline_split": TRAINER_SPLITS, "master_weights": TRAINER_MASTER_WEIGHTS}
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
_MODEL_CLASSES = ("dense", "mixtral", "moe", "hybrid")
#: The H100 presets (the DGX SXM part and the torchtitan benchmarks' 96 GB, 500 W part).
H100_ARCHS = ("h100-sxm", "h100-96g")


@dataclasses.dataclass
class Report:
    """Rows (dicts, module docstring), the error summaries in percent (None: no row) and
    the groups (module docstring; :func:`groups`)."""

    rows: list
    time_mape: float
    time_max_error: float
    memory_mape: float
    memory_max_error: float
    held_out_time_mape: float
    source: str
    groups: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dict(source=self.source, rows=self.rows, time_mape=self.time_mape,
                    time_max_error=self.time_max_error, memory_mape=self.memory_mape,
                    memory_max_error=self.memory_max_error,
                    held_out_time_mape=self.held_out_time_mape, groups=self.groups)


def builtin_path() -> str:
    """Path of the built-in validation table of the runs of 2021–22."""
    return str(resources.files("phaze") / "data" / "validation.json")


def builtin_paths() -> tuple:
    """Paths of the built-in tables read together when no file is given: the runs of
    2021–22, the published runs of 2024–26 (``modern_runs.json``, issue 25) and the held-out
    runs the project found (``held_out_runs.json``)."""
    data = resources.files("phaze") / "data"
    return (builtin_path(), str(data / "modern_runs.json"), str(data / "held_out_runs.json"))


def _check_row(row, where, shapes):
    for key in ("name", "kind", "source") + _CONFIG_KEYS:
        if key not in row:
            raise ValueError(f"{where}: missing field {key!r}")
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
    for key in _POSITIVE_KEYS + (("seq_len",) if "seq_len" in row else ()):
        value = row.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}: {key} must be a positive integer")
    if "mtp_layers" in row:
        value = row["mtp_layers"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: mtp_layers must be a non-negative integer")
    cp = row.get("cp", 1)
    if row["gpus"] != row["t"] * cp * row["p"] * row["d"]:
        raise ValueError(f"{where}: gpus ({row['gpus']}) != t·cp·p·d "
                         f"({row['t'] * cp * row['p'] * row['d']})")
    for knob in _FILE_KNOBS:
        if not knob.file_optional:
            continue
        if knob.type is int and knob.choices is None:
            continue      # an open width: checked with the positive integers above
        value = row.get(knob.file_key, knob.default)
        if knob.type is bool:
            ok = isinstance(value, bool)
        elif knob.type is str and knob.normalize is not None:   # a set of names
            try:
                ok = bool(knob.check(value))
            except ValueError:
                ok = False
        elif knob.type is str:
            ok = isinstance(value, str) and value in knob.choices
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) \
                and value in knob.choices
        if not ok:
            raise ValueError(f"{where}: {knob.file_key} must be "
                             f"{'true or false' if knob.type is bool else knob.rule}")
    for key in ("table", "trainer", "reason"):
        if key in row and (not isinstance(row[key], str) or not row[key].strip()):
            raise ValueError(f"{where}: {key} must be a non-empty string")
    if "model_class" in row and row["model_class"] not in _MODEL_CLASSES:
        raise ValueError(f"{where}: model_class must be one of {', '.join(_MODEL_CLASSES)}")
    if "reason" not in row and row["model"] not in shapes and row["model"] not in _models.names():
        raise ValueError(f"{where}: model {row['model']!r} is neither in 'models' nor in the zoo")


def _load_one(path) -> dict:
    table = read_json(path, "a validation table")
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        raise ValueError(f"{path}: a validation table is an object with a 'rows' list")
    shapes = table.get("models", {})
    if not isinstance(shapes, dict):
        raise ValueError(f"{path}: 'models' must be an object of model shapes")
    for i, row in enumerate(table["rows"]):
        where = f"{path}: row {i} ({row.get('name', '?') if isinstance(row, dict) else '?'})"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: a row is an object")
        _check_row(row, where, shapes)
    for name, shape in shapes.items():
        missing = [k for k in _SHAPE_REQUIRED if k not in shape]
        if missing:
            raise ValueError(f"{path}: model {name!r} lacks {', '.join(missing)}")
    return table


def load_table(path=None) -> dict:
    """The validation table at ``path`` (None: the built-in ones, :func:`builtin_paths`,
    read as one table), checked against the schema; ``ValueError`` names the first bad row
    and field."""
    paths = builtin_paths() if path is None else (os.fspath(path),)
    table = {"rows": [], "models": {}}
    for one in paths:
        part = _load_one(one)
        for name, shape in part.get("models", {}).items():
            if name in table["models"] and table["models"][name] != shape:
                raise ValueError(f"{one}: model {name!r} is defined differently in another "
                                 f"built-in table")
            table["models"][name] = shape
        table["rows"].extend(part["rows"])
        for key in ("name", "description"):
            table.setdefault(key, part.get(key))
    seen = set()
    for i, row in enumerate(table["rows"]):
        if row["name"] in seen:
            raise ValueError(f"{paths[-1] if len(paths) > 1 else paths[0]}: row {i} "
                             f"({row['name']}): name appears twice")
        seen.add(row["name"])
    table["_path"] = " + ".join(paths)
    return table


def _model_spec(name, shapes, seq_len=None, mtp_layers=None):
    """The table's shape as a ModelSpec (Megatron GPT defaults), else the zoo's model;
    ``seq_len``: the row's own sequence in place of the model's; ``mtp_layers``: the
    row's multi-token-prediction depth in place of the model's."""
    if name not in shapes:
        spec = _models.get(name)
    else:
        shape = dict(shapes[name])
        shape.setdefault("kv_heads", shape["heads"])
        spec = _models.ModelSpec(name=name, **shape)
    if seq_len is not None and seq_len != spec.seq_len:
        spec = dataclasses.replace(spec, seq_len=seq_len)
    if mtp_layers is not None and mtp_layers != spec.mtp_layers:
        spec = dataclasses.replace(spec, mtp_layers=mtp_layers)
    return spec


def _error(predicted, published):
    return 100.0 * (predicted - published) / published


def _mape(errors):
    return sum(abs(e) for e in errors) / len(errors) if errors else None


def _max(errors):
    return max(abs(e) for e in errors) if errors else None


def _mean(errors):
    return sum(errors) / len(errors) if errors else None


def _predict(row, shapes, config, efficiency=None):
    """The row's report fields from one ``training_step`` (a row with a ``reason`` is not
    priced); ``efficiency``: None, or arch name → the efficiency set to price its rows
    with instead of the chip's own."""
    rec = {}
    if row.get("reason"):
        res = None
        rec["reason"] = row["reason"]
    else:
        spec = _model_spec(row["model"], shapes, row.get("seq_len"), row.get("mtp_layers"))
        knobs = {k.name: config[k.file_key] for k in _FILE_KNOBS}
        eff = (efficiency or {}).get(row["arch"])
        res = _step.training_step(spec, row["arch"], efficiency=eff, **knobs)
        rec["reason"] = res.reason
    ok = res is not None and res.ok
    if row["kind"] == "time":
        pred = res.time_s if ok else None
        rec.update(predicted_s=pred, published_s=float(row["published_s"]),
                   error=None if pred is None else _error(pred, row["published_s"]),
                   breakdown=dataclasses.asdict(res.breakdown) if ok else None)
        if ok:
            # the run fitted; phaze's fullest stage says whether its memory model agrees
            worst = max(res.memory, key=lambda m: m.total / m.limit)
            rec.update(memory_gib=worst.total / _GIB, hbm_gib=worst.limit / _GIB,
                       fits=bool(worst.fits))
    else:
        pred = None
        if ok:
            first = res.memory[0]   # the first stage holds p microbatches in flight
            pred = (first.layer_param_state if row["quantity"] == "par_opt"
                    else first.activations) / _GIB
        rec.update(quantity=row["quantity"], predicted_gib=pred,
                   published_gib=float(row["published_gib"]),
                   error=None if pred is None else _error(pred, row["published_gib"]))
    return rec


def _summary(rows):
    """Rows, modelled rows and time MAPE / max over the modelled time rows of ``rows``."""
    time_err = [r["error"] for r in rows if r["kind"] == "time" and r["error"] is not None]
    return dict(rows=len(rows), modelled=sum(1 for r in rows if r["error"] is not None),
                time_rows=sum(1 for r in rows if r["kind"] == "time"),
                time_modelled=len(time_err), time_mape=_mape(time_err),
                time_max_error=_max(time_err))


def _family(arch) -> str:
    """The chip family of a row's ``arch`` (a preset's ``family``; a chip file's own, or
    "other")."""
    try:
        return _arch.resolve_chip(arch).family or "other"
    except (KeyError, ValueError, OSError):
        return "other"


def groups(rows) -> dict:
    """The report's groups of ``rows`` (module docstring): ``by_table`` and ``by_chip``
    (:func:`_summary` each, in the rows' order), ``by_trainer_chip`` (``"trainer/chip"``:
    signed mean, MAPE and count of the modelled time errors) and ``h100_dense`` (the rows
    with a ``model_class`` of dense or mixtral on an H100 preset: rows, modelled, percent)."""
    def split(key):
        out = {}
        for r in rows:
            out.setdefault(key(r), []).append(r)
        return out

    by_table = {k: _summary(v) for k, v in split(lambda r: r["table"]).items()}
    by_chip = {k: _summary(v) for k, v in split(lambda r: r["config"]["arch"]).items()}
    by_family = {k: _summary(v) for k, v in split(lambda r: _family(r["config"]["arch"])).items()}
    by_tc = {}
    for k, v in split(lambda r: f"{r['trainer']}/{r['config']['arch']}").items():
        err = [r["error"] for r in v if r["kind"] == "time" and r["error"] is not None]
        if err:
            by_tc[k] = dict(signed_mean_error=_mean(err), time_mape=_mape(err), rows=len(err))
    dense = [r for r in rows if r.get("model_class") in ("dense", "mixtral")
             and r["config"]["arch"] in H100_ARCHS]
    n_mod = sum(1 for r in dense if r["error"] is not None)
    return dict(by_table=by_table, by_chip=by_chip, by_family=by_family, by_trainer_chip=by_tc,
                h100_dense=dict(rows=len(dense), modelled=n_mod,
                                percent=100.0 * n_mod / len(dense) if dense else None))


def run(path=None, *, efficiency=None) -> Report:
    """Predict every row of the validation table at ``path`` (None: the built-in ones);
    a :class:`Report`. ``efficiency``: None, or a mapping of arch name → efficiency set
    (``phaze.arch.efficiency.Efficiency``) that prices that chip's rows instead of its own
    (e.g. the rule-derived set of a chip held out, ``bench/bench_rules.py``)."""
    table = load_table(path)
    shapes = table.get("models", {})
    out = []
    for row in table["rows"]:
        config = {k: row[k] for k in _CONFIG_KEYS}
        config.update({k: row.get(k, default) for k, default in _OPTIONAL_KEYS})
        trainer = row.get("trainer", "megatron")
        for key, by_trainer in _TRAINER_DEFAULTS.items():   # else the knob's default
            if key not in row and trainer in by_trainer:
                config[key] = by_trainer[trainer]
        rec = dict(name=row["name"], kind=row["kind"], held_out=bool(row.get("held_out", False)),
                   source=row["source"], config=config,
                   table=row.get("table", row["name"].split("/")[0]),
                   trainer=row.get("trainer", "megatron"),
                   assumptions=list(row.get("assumptions", [])))
        if "seq_len" in row:
            rec["seq_len"] = row["seq_len"]
        if "mtp_layers" in row:
            rec["mtp_layers"] = row["mtp_layers"]
        if "model_class" in row:
            rec["model_class"] = row["model_class"]
        rec.update(_predict(row, shapes, config, efficiency))
        out.append(rec)
    time_err = [r["error"] for r in out if r["kind"] == "time" and r["error"] is not None]
    held = [r["error"] for r in out if r["kind"] == "time" and r["error"] is not None and r["held_out"]]
    mem_err = [r["error"] for r in out if r["kind"] == "memory" and r["error"] is not None]
    return Report(rows=out, time_mape=_mape(time_err), time_max_error=_max(time_err),
                  memory_mape=_mape(mem_err), memory_max_error=_max(mem_err),
                  held_out_time_mape=_mape(held), source=table["_path"], groups=groups(out))


def format_report(report: Report) -> str:
    """The report as the text table ``phaze validate`` prints."""
    def num(x, fmt):
        if x is None:
            width = fmt.split(".")[0].lstrip("+")
            return format("—", f">{width}") if width else "—"
        return format(x, fmt)

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
        if r.get("fits") is False:
            line += (f"  (phaze's memory: {r['memory_gib']:.1f} GiB per device, over its "
                     f"{r['hbm_gib']:.0f} GiB)")
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
    over = [r for r in report.rows if r["kind"] == "time" and r.get("fits") is False]
    lines.append(f"runs that fitted, over HBM by phaze's memory model (the search would refuse "
                 f"them): {len(over)} of {m_time} modelled time rows")
    g = report.groups or groups(report.rows)
    for title, key in (("table", "by_table"), ("chip", "by_chip"),
                       ("chip family", "by_family")):
        items = g.get(key)
        if not items:
            continue
        w = max(len(k) for k in items)
        lines.append("")
        lines.append(f"per {title}: time MAPE and max error over its modelled time rows; rows "
                     f"modelled of all")
        for k, v in items.items():
            lines.append(f"  {k:<{w}}  MAPE {num(v['time_mape'], '5.1f')} %, max "
                         f"{num(v['time_max_error'], '5.1f')} % over {v['time_modelled']} of "
                         f"{v['time_rows']} time rows; {v['modelled']} of {v['rows']} rows "
                         f"modelled")
    if g["by_trainer_chip"]:
        w = max(len(k) for k in g["by_trainer_chip"])
        lines.append("")
        lines.append("signed mean time error per trainer and chip (modelled time rows):")
        for k, v in g["by_trainer_chip"].items():
            lines.append(f"  {k:<{w}}  {v['signed_mean_error']:+6.1f} % (MAPE "
                         f"{v['time_mape']:.1f} %) over {v['rows']} rows")
    d = g["h100_dense"]
    if d["rows"]:
        lines.append("")
        lines.append(f"H100 rows of dense or Mixtral-class models modelled: {d['modelled']} of "
                     f"{d['rows']} ({d['percent']:.1f} %)")
    return "\n".join(lines)
