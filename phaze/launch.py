"""Launch arguments of a plan for a real trainer: Megatron-LM, Megatron-DeepSpeed with
its ds_config (issue 16 item 3), or torchtitan's TOML job config (issue 25 item 8;
``phaze evaluate --emit megatron|deepspeed|torchtitan``).

A plan is the strategy of ``phaze evaluate``/``phaze.step.training_step``: tensor parallel
t, pipeline parallel p, data parallel d, microbatch b and global batch B (samples),
recomputation "none" | "selective" | "full", virtual stages v (interleaved 1F1B),
sequence parallelism, flash attention, ZeRO stage, overlapped gradient reduction, the
precision "bf16" | "fp16" | "fp8" and the gradient-reduction datatype "fp32" | "bf16" |
"fp16". :func:`megatron_arguments` and
:func:`deepspeed_arguments` turn it into the trainer's command-line arguments (and the
ds_config dict), :func:`torchtitan_config` into torchtitan's job config (a dict of TOML
sections); :func:`emit` formats each as text. They print only what the plan
decides (parallelism, batch, model shape, the strategy flags); data, tokenizer,
optimizer hyper-parameters and the schedule are the user's.

A plan the trainer cannot launch raises :class:`NotLaunchable` (a ``ValueError``) with
one sentence saying why:

Who launches a plan is decided in one place, ``phaze.plan.launch_refusal`` (the rules
below, then the model arguments ``phaze.plan.MODEL_FLAGS`` can write for the trainer);
``phaze evaluate``'s "launchable by" line and ``phaze search --emit``'s plan set read the
same function. The functions here take no chip; on a chip whose file states its
``platform`` (a TPU, Trainium, Gaudi), ``phaze evaluate`` and ``phaze search`` also drop
the trainers that do not run there (``phaze.plan.platform_refusal``). ``phaze evaluate
--emit`` also refuses a plan evaluate calls infeasible (it does not fit, or the step model
refuses it: e.g. Megatron-Core's mixture of experts at t > 1 without sequence
parallelism).

- every trainer: the global batch not divisible by b·d (Megatron-LM asserts it in
  ``megatron/training/arguments.py``; DeepSpeed requires ``train_batch_size =
  train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel GPUs``);
  the heads (and key/value heads) not divisible by t; expert parallelism not dividing
  the experts or cp·d (Megatron-Core: expert-tensor × expert parallel divides
  tensor × context × data parallel, with expert-tensor = t); context parallelism without
  flash attention; multi-head latent attention (DeepSeek-V2: its Megatron arguments are
  not written here).
- Megatron-LM: transformer layers not divisible by p (stages as Megatron-LM builds
  them: L/p transformer layers each, the embedding on the first, the head on the last —
  phaze's ``evaluate`` spreads uneven remainders one layer at a time, which Megatron-LM
  does not express with these arguments); interleaving (v > 1) needs p ≥ 2, L divisible
  by p·v and the microbatches per pipeline B/(b·d) divisible by p; ZeRO 2–3 beside a
  pipeline (ZeRO 1 is the distributed optimizer, 2–3 are Megatron-FSDP,
  ``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params
  --ckpt-format fsdp_dtensor``, which its guide composes with TP, CP and EP, not PP; ZeRO 3
  without resharding is torch FSDP2, ``--use-torch-fsdp2
  --torch-fsdp2-no-reshard-after-forward``, which needs ep = 1, no fp16 and untied
  embeddings); a mixture of experts at t > 1 without sequence parallelism;
  ``--overlap-param-gather`` without ``--overlap-grad-reduce``; a gradient-reduction
  datatype other than fp32 and the parameters' (Megatron-Core's gradient buffer is one of
  them). The environment it asserts is written before the arguments:
  ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with tensor or context parallelism (required before
  Blackwell), ``unset`` under FSDP (which asserts it is not 1).
- torchtitan (v0.2.0, commit 29624e37fa6d, 2025-10-17: ``phaze.plan.torchtitan`` says
  which code each key was checked against): ZeRO 1–2, fp16 and gradient reduction other
  than fp32 (the trainer's own rules); a model without a torchtitan flavor (llama3 8B,
  70B and 405B are the zoo's shapes it has); DDP (ZeRO 0) beside tensor, pipeline or
  context parallelism; stages of unequal layer counts (but the split counting the
  embedding and loss as layers, torchtitan's own); interleaving without a pipeline;
  expert parallelism outside ZeRO 3 or not divisible by cp. Multi-head latent attention
  is refused as having no flavor.
- DeepSpeed: a model its arguments cannot describe (Q/K/V biases apart from the other
  linear layers', a mixture of experts: ``phaze.plan.MODEL_FLAGS``); fp8 (the ds_config has
  bf16 and fp16 sections only); expert and context
  parallelism (not written for Megatron-DeepSpeed here: emit megatron); ZeRO 2–3 with
  pipeline parallelism (the DeepSpeed pipeline engine refuses
  them: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"), interleaving
  (DeepSpeed's pipeline engine runs plain 1F1B).

Sources of the argument names (looked up with the project's documentation search):

- Megatron-LM ``megatron/training/arguments.py`` and its user guide
  (github.com/NVIDIA/Megatron-LM): ``--tensor-model-parallel-size``,
  ``--pipeline-model-parallel-size``, ``--num-layers-per-virtual-pipeline-stage``,
  ``--micro-batch-size``, ``--global-batch-size`` (= micro batch × data parallel ×
  accumulation steps), ``--sequence-parallel``, ``--recompute-granularity full|selective``
  with ``--recompute-method uniform|block`` and ``--recompute-num-layers`` (the last two
  only with ``full``; as documented also by ms-swift's Megatron-SWIFT command-line
  reference and Hugging Face Accelerate's ``MegatronLMPlugin``),
  ``--use-distributed-optimizer`` (ZeRO-1; Megatron-LM issue #1156: "megatron-lm now has
  its own zero-1 (it is called distributed optimizer)"), ``--use-flash-attn``,
  ``--overlap-grad-reduce``, ``--num-layers``, ``--hidden-size``,
  ``--num-attention-heads``, ``--ffn-hidden-size``, ``--seq-length``,
  ``--max-position-embeddings``, ``--group-query-attention``/``--num-query-groups``,
  ``--kv-channels``, ``--swiglu``, ``--normalization RMSNorm``,
  ``--position-embedding-type rope``, ``--disable-bias-linear``,
  ``--untie-embeddings-and-output-weights``, ``--bf16``/``--fp16``, ``--fp8-format
  hybrid`` (Transformer Engine fp8, with ``--bf16``), ``--grad-reduce-in-bf16`` and
  ``--accumulate-allreduce-grads-in-fp32`` (the gradient buffer's datatype: fp32 is
  Megatron-LM's default under ``--bf16``, fp16 under ``--fp16``; docs/fidelity-sources.md
  §5.9); Megatron-Core's
  ``--context-parallel-size``, ``--expert-model-parallel-size``, ``--num-experts``,
  ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
  ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq`` (a 0/1 pattern per
  layer, e.g. ``([0]*1+[1]*26)``), ``--moe-token-dispatcher-type alltoall`` (the
  all-to-all dispatch phaze prices) and ``--moe-expert-capacity-factor`` (Megatron-Core
  MoE user guide and ``megatron/training/arguments.py``).
- Megatron-DeepSpeed (github.com/microsoft/Megatron-DeepSpeed, ``megatron/arguments.py``
  at f4157bea69f3, and ``examples_deepspeed``): the parallelism and batch arguments above,
  the model in its own spellings (``phaze.plan.MODEL_FLAGS``: ``--normalization rmsnorm``,
  ``--num-key-value-heads``, ``--use-rotary-position-embeddings --no-position-embedding``,
  ``--rotary-position-embeddings-theta``), plus ``--deepspeed``,
  ``--deepspeed_config FILE``, ``--zero-stage N``, ``--no-pipeline-parallel`` (p = 1:
  no DeepSpeed pipeline engine), ``--checkpoint-activations`` with
  ``--deepspeed-activation-checkpointing`` (full recomputation), ``--use-flash-attn-v2``;
  DeepSpeed issues #823, #1629, #3589: pipeline parallelism works with ZeRO-1 but not
  2–3.
- DeepSpeed configuration JSON (deepspeed.ai/docs/config-json): ``train_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``,
  ``zero_optimization.stage`` and ``overlap_comm``, ``bf16.enabled``,
  ``fp16.enabled``/``loss_scale`` (0: dynamic), ``communication_data_type`` (always
  written: absent, DeepSpeed reduces in the training datatype), ``activation_checkpointing``
  (``partition_activations``, ``contiguous_memory_optimization``,
  ``cpu_checkpointing``).
"""
from __future__ import annotations

import json

import inspect

from . import models
from . import plan as _knobs

__all__ = ["NotLaunchable", "TRAINERS", "megatron_arguments", "deepspeed_arguments",
           "torchtitan_config", "emit", "launchers", "environment"]

#: Trainers :func:`emit` knows (``phaze.plan.TRAINERS`` whose arguments are written here).
TRAINERS = tuple(t.emit for t in _knobs.TRAINERS if t.emit)
#: The plan sizes every launch needs given.
_REQUIRED = ("tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch",
             "global_batch")


class NotLaunchable(ValueError):
    """The plan cannot be launched by the trainer asked for; the message says why in one
    sentence."""


def _checked(function, model, knobs, megatron=True):
    """The model and the validated plan of ``function``'s keywords (bad input: ValueError
    naming the field; ``recompute`` may be a bool: True = "full"), after the rules every
    trainer shares (module docstring; ``phaze.plan.launch_refusal``'s shared rules)."""
    _knobs.check_keywords(function, knobs, _knobs.NAMES, _REQUIRED)
    spec = models.resolve(model)
    knobs = dict(knobs)
    recompute = knobs.get("recompute", "none")
    if recompute is True or recompute is False:
        knobs["recompute"] = "full" if recompute else "none"
    pl = _knobs.Plan(**knobs)
    _refuse("any", spec, pl, ("shared",))
    return spec, pl


def _refuse(trainer, spec, pl, kinds=None) -> None:
    """Raise :class:`NotLaunchable` with the sentence of ``phaze.plan.launch_refusal``
    (``kinds`` given: the first rule of those kinds only, ``phaze.plan.refusal``)."""
    if kinds is None:
        why = _knobs.launch_refusal(trainer, pl.as_dict(), spec)
    else:
        why = _knobs.refusal(trainer, _values(spec, pl), kinds)
    if why is not None:
        raise NotLaunchable(why)


def launchers(model, **knobs) -> tuple:
    """The trainers (ids of ``phaze.plan.TRAINERS``) that launch this plan of ``model``
    with the arguments written here (``phaze.plan.launchers``): what ``phaze evaluate``
    prints as "launchable by". Keywords as :func:`megatron_arguments`."""
    spec, pl = _checked("launchers", model, knobs)
    return _knobs.launchers(pl.as_dict(), spec)


def _model_arguments(spec, trainer="megatron", rotary_base=None) -> list:
    """The model arguments of ``spec`` for ``trainer`` (``phaze.plan.MODEL_FLAGS``)."""
    return _knobs.model_arguments(trainer, spec, rotary_base)


def megatron_arguments(model, **knobs) -> list:
    """Megatron-LM command-line arguments (a list of strings) of one plan.

    ``model``: zoo name or ModelSpec; the plan's knobs (``phaze.plan.KNOBS``, keyword-only;
    the signature lists them): t, p, d, ``microbatch`` b and ``global_batch`` B in
    samples required; recompute "none" | "selective" | "full" (True = "full"); the
    others as :func:`phaze.step.training_step` (expert and context parallel widths and
    the capacity factor of a mixture of experts included; the GPUs are t·cp·p·d).
    Sequence parallelism at t = 1 is left out
    (Megatron-LM switches it off there). Raises :class:`NotLaunchable` for a plan
    Megatron-LM cannot run (module docstring), ``ValueError`` for bad input.
    """
    rotary = knobs.pop("rotary_base", None)
    spec, pl = _checked("megatron_arguments", model, knobs)
    _refuse("megatron-lm", spec, pl)
    return _knobs.trainer_arguments("megatron-lm", _values(spec, pl),
                                    _model_arguments(spec, "megatron", rotary))


def deepspeed_arguments(model, *, config_path="ds_config.json", **knobs) -> tuple:
    """Megatron-DeepSpeed arguments and the ds_config of one plan: ``(arguments, config)``,
    a list of strings and a dict (JSON-ready; ``config_path`` is the file name the
    arguments point ``--deepspeed_config`` at).

    Arguments as :func:`megatron_arguments`. ``gradient_accumulation_steps`` = B / (b·d);
    full recomputation checkpoints every transformer layer (``--checkpoint-activations``
    with DeepSpeed's activation checkpointing); overlapped gradient reduction becomes
    ``zero_optimization.overlap_comm``. Raises :class:`NotLaunchable` for a plan DeepSpeed
    cannot run (module docstring), ``ValueError`` for bad input.
    """
    rotary = knobs.pop("rotary_base", None)
    spec, pl = _checked("deepspeed_arguments", model, knobs)
    _refuse("deepspeed", spec, pl)
    values = dict(_values(spec, pl), config_path=config_path)
    return (_knobs.trainer_arguments("deepspeed", values,
                                     _model_arguments(spec, "deepspeed", rotary)),
            _knobs.ds_config(values))


def torchtitan_config(model, **knobs) -> dict:
    """torchtitan's job config of one plan: ``{section: {key: value}}``, the TOML of
    ``torchrun -m torchtitan.train --job.config_file FILE`` (torchtitan v0.2.0; keys as
    ``phaze.plan.torchtitan`` writes them, the ``torchtitan`` fields of
    ``phaze.plan.KNOBS`` naming them).

    Arguments as :func:`megatron_arguments`. d is FSDP2's shard degree under ZeRO 3 and
    DDP's replicate degree under ZeRO 0; with a pipeline the local batch is B/d split into
    pipeline microbatches of b, without one it is b and ``global_batch_size`` B
    accumulates B/(b·d) steps. Raises :class:`NotLaunchable` for a plan torchtitan cannot
    run or phaze does not write for it (module docstring), ``ValueError`` for bad input.
    """
    knobs.pop("rotary_base", None)   # torchtitan's flavor carries its own
    knobs = {**_knobs.trainer_values("torchtitan", knobs), **knobs}   # absent: its own
    spec, pl = _checked("torchtitan_config", model, knobs, megatron=False)
    values = _values(spec, pl)
    _refuse("torchtitan", spec, pl, ("emit",))
    _refuse("torchtitan", spec, pl)
    return _knobs.torchtitan.config(_knobs.trainer_arguments("torchtitan", values,
                                                  _knobs.torchtitan.model_keys(spec)))


def _values(spec, pl) -> dict:
    """What the argument writers read: the plan's values and the model's
    (``phaze.plan.model_values``)."""
    return dict(pl.as_dict(), **_knobs.model_values(spec))


def _lines(arguments) -> list:
    """Arguments grouped one flag (with its values) per line."""
    lines, cur = [], []
    for a in arguments:
        if a.startswith("--") and cur:
            lines.append(" ".join(cur))
            cur = []
        cur.append(a)
    if cur:
        lines.append(" ".join(cur))
    return lines


def _torchtitan_text(spec, plan, gpus) -> str:
    """torchtitan's text of a plan: comment lines (the trainer, the GPUs, the torchrun
    line, what runs differently from the plan as priced), then the TOML job config; the
    whole text parses as TOML."""
    cfg = torchtitan_config(spec, **plan)
    values = _values(spec, _knobs.Plan(**{k: v for k, v in plan.items()
                                          if k in _knobs.NAMES}))
    per_node = min(gpus, 8)
    nodes = -(-gpus // per_node)
    head = [f"# torchtitan v0.2.0 job config for {spec.name} on {gpus} GPUs (add [job], "
            f"[optimizer], [lr_scheduler], dataset, steps and hf_assets_path)",
            f"# torchrun --nnodes {nodes} --nproc_per_node {per_node} -m torchtitan.train "
            f"--job.config_file {_knobs.torchtitan.CONFIG_FILE}"]
    head += [f"# note: {n}" for n in _knobs.torchtitan_notes(values)]
    return "\n".join(head) + "\n\n" + _knobs.torchtitan.toml(cfg)


def emit(trainer, model, **plan) -> str:
    """Text of a plan's launch arguments for ``trainer`` "megatron", "deepspeed" or
    "torchtitan": a comment naming the trainer and the GPUs (t·cp·p·d), the arguments one
    flag per line with shell continuations, and for deepspeed the ds_config JSON after a
    comment line; for torchtitan comment lines (the torchrun line on 8-GPU nodes, notes
    on what torchtitan runs differently) and the TOML job config.
    ``plan``: the keywords of :func:`megatron_arguments`; a one-value knob left out whose
    default the trainer does not run takes the trainer's own value
    (``phaze.plan.trainer_values``: torchtitan's ``master_weights`` "params"). Raises
    :class:`NotLaunchable` or ``ValueError`` as those functions do."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    spec = models.resolve(model)
    plan = {**_knobs.trainer_values(trainer, plan), **plan}   # absent: the trainer's own
    gpus = _knobs.devices_of(plan)
    if trainer == "torchtitan":
        recompute = plan.get("recompute", "none")
        if recompute is True or recompute is False:
            plan = dict(plan, recompute="full" if recompute else "none")
        return _torchtitan_text(spec, plan, gpus)
    script = ("pretrain_bert.py" if not getattr(spec, "causal", True) else
              "pretrain_mamba.py" if _knobs.hybrid_pattern(spec) else "pretrain_gpt.py")
    if trainer == "megatron":
        args = megatron_arguments(spec, **plan)
        head = (f"# Megatron-LM launch arguments for {spec.name} on {gpus} GPUs "
                f"(add data, tokenizer, optimizer and schedule arguments)")
        config = None
    else:
        args, config = deepspeed_arguments(spec, **plan)
        head = (f"# Megatron-DeepSpeed launch arguments for {spec.name} on {gpus} GPUs "
                f"(add data, tokenizer, optimizer and schedule arguments)")
    env = environment(trainer, **{k: v for k, v in plan.items() if k != "rotary_base"})
    head += "".join(f"\nunset {name}" if value is None else f"\nexport {name}={value}"
                    for name, value in env)
    body = " \\\n    ".join([script] + _lines(args))
    text = f"{head}\n{body}\n"
    if config is not None:
        text += f"# ds_config.json\n{json.dumps(config, indent=2)}\n"
    return text


def environment(trainer, **plan) -> list:
    """The environment the launch of ``plan`` by ``trainer`` ("megatron", "deepspeed",
    "torchtitan") needs: (name, value) pairs, value None for "unset"
    (``phaze.plan.environment``: CUDA_DEVICE_MAX_CONNECTIONS=1 for Megatron-LM's tensor
    or context parallelism without FSDP, unset under Megatron-FSDP or torch FSDP2)."""
    recompute = plan.get("recompute")
    if recompute is True or recompute is False:
        plan = dict(plan, recompute="full" if recompute else "none")
    return _knobs.environment(trainer, {k: v for k, v in plan.items() if k in _knobs.NAMES})


_REQUIRED_SIG = {name: inspect.Parameter.empty for name in _REQUIRED}
_knobs.keyword_signature(megatron_arguments, _knobs.NAMES, _REQUIRED_SIG)
_knobs.keyword_signature(deepspeed_arguments, _knobs.NAMES, _REQUIRED_SIG)
_knobs.keyword_signature(torchtitan_config, _knobs.NAMES, _REQUIRED_SIG)
_knobs.keyword_signature(launchers, _knobs.NAMES, _REQUIRED_SIG)
