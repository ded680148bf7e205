"""What a search's metadata records so that the run can be repeated (issue 29 item 9):
:func:`run_record` forms ``metadata["run"]`` (the command line, UTC time, phaze version
and git commit, the full ModelSpec of every model, the chip's knobs and efficiency set,
the config and chip file paths), :func:`replay` turns a result's metadata back into the
models and keywords of :func:`phaze.search.search` (``phaze search --from-meta FILE``).

A run repeats exactly when its models, chip and knobs are recorded: a zoo or
``--hf-config`` model (its whole ModelSpec), one chip (``--arch``: preset or chip file,
its chip-file object), the default architecture space or every K-th row of it
(``--space-every``). A space given as arbitrary rows is not stored (its hash is): such a
run is refused in one sentence.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
from pathlib import Path

from .. import __version__
from .. import plan as _plan

#: The search keywords :func:`replay` takes from ``metadata["inputs"]`` as they are.
_AS_RECORDED = ("devices", "global_batch", "microbatch", "tensor_parallel", "optimizer",
                "gap", "chunk_archs")


def git_commit(path=None):
    """The git commit of the checkout holding phaze's source (``path``: a folder in it;
    default the package's), or None when it is not one (an installed wheel) or git is
    absent."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and len(text) == 40 else None


def run_record(model_list, chip=None, provenance=None) -> dict:
    """``metadata["run"]`` of a search: ``command`` (the argument list it was started
    with, when given), ``utc`` (ISO 8601, seconds), ``phaze_version``, ``git_commit``
    (None outside a checkout), ``model_specs`` (every field of each ModelSpec),
    ``config_paths`` (the ``--hf-config`` files, in order), ``chip_path`` (the chip file
    or preset file of a fixed system), ``chip`` (its chip-file object, knobs and
    measured efficiency included), ``efficiency`` (the efficiency set priced: the chip's,
    else "each row's own"), ``space_every`` (the K of ``--space-every``, 1 for the whole
    default space, None when unknown) and ``from_meta`` (the file it was re-run from)."""
    prov = dict(provenance or {})
    rec = {
        "command": prov.get("command"),
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "phaze_version": __version__, "git_commit": git_commit(),
        "model_specs": [dataclasses.asdict(m) for m in model_list],
        "config_paths": [str(p) for p in prov.get("config_paths") or []],
        "chip_path": None if chip is None or chip.path is None else str(chip.path),
        "chip": None if chip is None else chip.to_dict(),
        "efficiency": (dataclasses.asdict(chip.efficiency_set()) if chip is not None
                       else "each row's own (phaze.arch.efficiency.for_rows)"),
        "space_every": prov.get("space_every"),
        "from_meta": prov.get("from_meta"),
    }
    return rec


def read_meta(path) -> dict:
    """The summary (``{"metadata": ...}``) of a result file or its ``.meta.json``: a
    ``.meta.json`` or ``.json`` file itself, else ``PATH.meta.json`` next to ``PATH``.
    ``ValueError`` in one sentence when it is missing or holds no metadata."""
    path = Path(path)
    if not path.name.endswith(".json") or (not path.name.endswith(".meta.json")
                                           and not path.exists()):
        path = path.with_name(path.name + ".meta.json")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"--from-meta: cannot read {str(path)!r} ({exc.strerror})") from None
    except ValueError:
        raise ValueError(f"--from-meta: {str(path)!r} is not JSON") from None
    if isinstance(data, dict) and isinstance(data.get("summary"), dict):
        data = data["summary"]        # a journal (.meta.json): its finished run's summary
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        raise ValueError(f"--from-meta: {str(path)!r} holds no search metadata (a finished "
                         f"search's .meta.json or .json result)")
    return data


def replay(meta: dict):
    """``(models, keywords)`` of :func:`phaze.search.search` that repeat the run whose
    summary is ``meta`` (:func:`read_meta`): the recorded ModelSpecs, the chip (or the
    space), every knob grid and setting. ``ValueError`` in one sentence when the file
    lacks what the run needs (written before issue 29, or over a space of given rows)."""
    from .. import arch, models

    md = meta["metadata"]
    run, inputs = md.get("run"), md.get("inputs") or {}
    if not isinstance(run, dict) or not run.get("model_specs"):
        raise ValueError("--from-meta: the file records no run (no metadata 'run' with the "
                         "model specs): it was written before phaze recorded runs; run the "
                         "search again")
    specs = []
    for d in run["model_specs"]:
        d = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        specs.append(models.ModelSpec(**d))
    kw = {k: inputs[k] for k in _AS_RECORDED if k in inputs}
    for k in ("microbatch", "tensor_parallel"):
        kw[k] = tuple(kw[k])
    hbm = inputs.get("hbm_gib")
    kw["hbm_gib"] = None if hbm in (None, [None]) else tuple(hbm)
    kw["recompute"] = tuple(inputs["recompute"])
    kw["prune"] = inputs.get("prune") or False
    kw["baselines"] = bool(inputs.get("baselines", True))
    kw["study"] = md.get("cost_model", inputs.get("cost_model")) == "study"
    for name in _plan.GRIDS:
        if name in inputs and not kw["study"]:
            v = inputs[name]
            kw[name] = tuple(v) if isinstance(v, list) else v
    if inputs.get("trainers"):
        kw["trainers"] = tuple(inputs["trainers"])
    # the power budget, objective and area budget (issue 28; absent in older files: the
    # defaults, null: no budget recorded)
    for name in ("max_power_w", "objective", "max_area_mm2"):
        if inputs.get(name) is not None:
            kw[name] = inputs[name]
    if "arch" in inputs:
        data = run.get("chip") or md.get("chip")
        if not data:
            raise ValueError("--from-meta: the file names a fixed chip but records no chip")
        # the chip as recorded (a preset by its name when it still is that preset; a
        # chip file from its recorded object, whatever the file holds now)
        kw["arch"] = arch.chip_from_dict(data, path=run.get("chip_path"),
                                         where="--from-meta chip")
        try:
            preset = arch.resolve_chip(data.get("name"))
        except (KeyError, ValueError, TypeError):
            preset = None
        if preset is not None and preset.to_dict() == data:
            kw["arch"] = data["name"]
    else:
        every = run.get("space_every")
        if inputs.get("arch_ids") != "default space" or every is None:
            raise ValueError("--from-meta: the run searched a space of given rows, which the "
                             "file does not store (only its hash); re-run it from Python with "
                             "the same rows")
        if int(every) > 1:
            kw["space"] = arch.ArchSpace.default().configs[::int(every)]
    return specs, kw
