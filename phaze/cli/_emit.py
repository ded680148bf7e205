"""``--emit``: launch arguments of a plan (``phaze evaluate``) or of each model's best plan
(``phaze search``), printed through :func:`phaze.launch.emit`. Part of the command line
(``phaze.cli``); a plan the trainer cannot launch is one sentence and exit status 2.
"""
from __future__ import annotations

import sys


def emit_plan(args, model, knobs) -> int:
    """``evaluate --emit``: the plan's launch arguments (``phaze.launch.emit``); a plan the
    trainer cannot launch is one sentence and exit status 2 (a ValueError)."""
    from .. import launch

    recompute = getattr(args, "recompute", False)
    plan = dict(tensor_parallel=args.tp, pipeline_parallel=args.pp, data_parallel=args.dp,
                microbatch=args.microbatch, global_batch=args.global_batch,
                recompute=recompute if isinstance(recompute, str) else bool(recompute))
    plan.update(knobs)
    for dest in ("expert_parallel", "context_parallel", "capacity_factor"):
        if getattr(args, dest, None) is not None:
            plan[dest] = getattr(args, dest)
    if args.precision:
        plan["precision"] = args.precision
    try:
        text = launch.emit(args.emit, model, **plan)
    except launch.NotLaunchable as exc:
        trainer = "Megatron-LM" if args.emit == "megatron" else "DeepSpeed"
        raise ValueError(f"--emit {args.emit}: {trainer} cannot launch this plan: {exc}") from None
    sys.stdout.write(text)
    return 0


def emit_best_plans(args, result, model_list) -> int:
    """``search --emit``: each model's best plan as launch arguments (``phaze.launch.emit``),
    after the summary. A model without a feasible plan, or a plan the trainer cannot
    launch (the study's uneven stages under ``--study``), is one sentence on stderr and
    exit status 2."""
    from .. import launch, models

    inputs = result.metadata.get("inputs", {})
    trainer = "Megatron-LM" if args.emit == "megatron" else "DeepSpeed"
    status = 0
    for spec in (models.resolve(m) for m in model_list):
        if args.seq_len and spec.seq_len != args.seq_len:
            spec = spec.with_(seq_len=args.seq_len)   # the model as searched
        plan = (result.best.get("plans") or {}).get(spec.name)
        if not plan or not plan.get("feasible"):
            print(f"phaze search: --emit {args.emit}: {spec.name} has no feasible plan to "
                  f"launch", file=sys.stderr)
            status = 2
            continue
        knobs = dict(tensor_parallel=int(plan["tensor_parallel"]),
                     pipeline_parallel=int(plan["pipeline_parallel"]),
                     data_parallel=int(plan["data_parallel"]), microbatch=int(plan["microbatch"]),
                     global_batch=int(inputs.get("global_batch", args.global_batch)),
                     recompute=str(plan["recompute"]),
                     virtual_stages=int(plan.get("virtual_stages", 1)),
                     sequence_parallel=bool(plan.get("sequence_parallel", False)),
                     flash_attention=bool(plan.get("flash_attention", False)),
                     zero_stage=int(plan.get("zero_stage", 0)),
                     overlap_grad_reduce=bool(plan.get("overlap_grad_reduce", False)),
                     expert_parallel=int(plan.get("expert_parallel") or 1),
                     context_parallel=int(plan.get("context_parallel") or 1),
                     capacity_factor=inputs.get("capacity_factor"),
                     precision=str(inputs.get("precision") or "bf16"))
        try:
            sys.stdout.write(launch.emit(args.emit, spec, **knobs))
        except launch.NotLaunchable as exc:
            print(f"phaze search: --emit {args.emit}: {trainer} cannot launch the best plan "
                  f"of {spec.name}: {exc}", file=sys.stderr)
            status = 2
    return status
