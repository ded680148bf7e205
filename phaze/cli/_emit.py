"""``--emit``: launch arguments of a plan (``phaze evaluate``) or of each model's best plan
(``phaze search``), printed through :func:`phaze.launch.emit`. Part of the command line
(``phaze.cli``); a plan the trainer cannot launch is one sentence and exit status 2.
"""
from __future__ import annotations

import sys

from .. import plan as _plan


def hf_rotary_base(path):
    """The ``rope_theta`` of a Hugging Face config.json (None when it has none): the
    rotary base the emitted arguments name (the ModelSpec does not carry it)."""
    import json

    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    for c in (cfg, cfg.get("text_config") or {}):
        if isinstance(c.get("rope_theta"), (int, float)):
            return c["rope_theta"]
    return None


def emit_plan(args, model, knobs, result=None) -> int:
    """``evaluate --emit``: the plan's launch arguments (``phaze.launch.emit``) for the
    model as priced (``--seq-len`` applied); a plan the trainer cannot launch, or one
    ``result`` (evaluate's dict of the same plan) calls infeasible, is one sentence and
    exit status 2 (a ValueError), as is a trainer that does not run on the chip's platform
    (``phaze.plan.platform_refusal``)."""
    from .. import launch, models

    if result is not None:
        # the chip's platform first: Megatron-LM's arguments are no use on a TPU
        why = _plan.platform_refusal(args.emit, result["arch"], result["platform"])
        if why is not None:
            raise ValueError(f"--emit {args.emit}: {why}")
    spec = models.resolve(model)
    if getattr(args, "seq_len", None) and spec.seq_len != args.seq_len:
        spec = spec.with_(seq_len=args.seq_len)   # the model as priced
    model = spec
    recompute = getattr(args, "recompute", False)
    plan = dict(tensor_parallel=args.tensor_parallel, pipeline_parallel=args.pipeline_parallel,
                data_parallel=args.data_parallel, microbatch=args.microbatch,
                global_batch=args.global_batch,
                recompute=recompute if isinstance(recompute, str) else bool(recompute))
    plan.update(knobs)
    if getattr(args, "optimizer", None) not in (None, "sgd"):
        plan["optimizer"] = args.optimizer      # the command line's --optimizer (the knob's)
    if getattr(args, "hf_config", None):
        plan["rotary_base"] = hf_rotary_base(args.hf_config)
    try:
        text = launch.emit(args.emit, model, **plan)
    except launch.NotLaunchable as exc:
        trainer = _trainer_title(args.emit)
        raise ValueError(f"--emit {args.emit}: {trainer} cannot launch this plan: {exc}") from None
    if result is not None and (result.get("status") != "ok" or not result.get("feasible")):
        word = "not modelled" if result.get("status") == "not_modelled" else "infeasible"
        raise ValueError(f"--emit {args.emit}: the plan is {word}, so no trainer can run "
                         f"it: {result.get('reason') or 'it does not fit'}")
    sys.stdout.write(text)
    return 0


def _trainer_title(emit_name) -> str:
    return next(t.title for t in _plan.TRAINERS if t.emit == emit_name)


def _row_value(knob, value):
    """A result row's value of ``knob`` as the launch keywords take it (absent: the
    knob's default; a width recorded as 0: 1)."""
    if value is None:
        return knob.default
    value = knob.type(value)
    return (value or knob.default) if knob.type is int else value


def emit_best_plans(args, result, model_list) -> int:
    """``search --emit``: each model's best plan as launch arguments (``phaze.launch.emit``),
    after the summary. A model without a feasible plan, or a plan the trainer cannot
    launch (the study's uneven stages under ``--study``), is one sentence on stderr and
    exit status 2."""
    from .. import launch, models

    inputs = result.metadata.get("inputs", {})
    trainer = _trainer_title(args.emit)
    status = 0
    # the --hf-config models (after the zoo names, in order): their configs' rope_theta
    hf = [m for m in model_list if not isinstance(m, str)]
    rotary = {m.name: hf_rotary_base(path)
              for m, path in zip(hf, getattr(args, "hf_config", None) or [])}
    for spec in (models.resolve(m) for m in model_list):
        if args.seq_len and spec.seq_len != args.seq_len:
            spec = spec.with_(seq_len=args.seq_len)   # the model as searched
        plan = (result.best.get("plans") or {}).get(spec.name)
        if not plan or not plan.get("feasible"):
            print(f"phaze search: --emit {args.emit}: {spec.name} has no feasible plan to "
                  f"launch", file=sys.stderr)
            status = 2
            continue
        knobs = {name: _row_value(_plan.KNOB[name], plan.get(name))
                 for name in ("tensor_parallel", "pipeline_parallel", "data_parallel",
                              "microbatch", "recompute", *_plan.STRATEGY_COLUMNS)}
        knobs.update(global_batch=int(inputs.get("global_batch", args.global_batch)),
                     **{name: inputs.get(name) for name in _plan.GRIDS
                        if _plan.KNOB[name].search == "one"})
        if inputs.get("optimizer") in _plan.KNOB["optimizer"].choices:
            knobs["optimizer"] = inputs["optimizer"]
        knobs["precision"] = str(knobs["precision"] or "bf16")
        if rotary.get(spec.name) is not None:
            knobs["rotary_base"] = rotary[spec.name]
        try:
            sys.stdout.write(launch.emit(args.emit, spec, **knobs))
        except launch.NotLaunchable as exc:
            print(f"phaze search: --emit {args.emit}: {trainer} cannot launch the best plan "
                  f"of {spec.name}: {exc}", file=sys.stderr)
            status = 2
    return status
