"""Launch arguments of a plan for a real trainer: Megatron-LM, or Megatron-DeepSpeed with
its ds_config (issue 16 item 3; ``phaze evaluate --emit megatron|deepspeed``).

A plan is the strategy of ``phaze evaluate``/``phaze.step.training_step``: tensor parallel
t, pipeline parallel p, data parallel d, microbatch b and global batch B (samples),
recomputation "none" | "selective" | "full", virtual stages v (interleaved 1F1B),
sequence parallelism, flash attention, ZeRO stage, overlapped gradient reduction and the
precision "bf16" | "fp16" | "fp8". :func:`megatron_arguments` and
:func:`deepspeed_arguments` turn it into the trainer's command-line arguments (and the
ds_config dict); :func:`emit` formats either as text. They print only what the plan
decides (parallelism, batch, model shape, the strategy flags); data, tokenizer,
optimizer hyper-parameters and the schedule are the user's.

A plan the trainer cannot launch raises :class:`NotLaunchable` (a ``ValueError``) with
one sentence saying why:

- both: the global batch not divisible by b·d (Megatron-LM asserts it in
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
  by p·v and the microbatches per pipeline B/(b·d) divisible by p; ZeRO 2–3 (Megatron-LM's
  distributed optimizer is ZeRO-1; use DeepSpeed).
- DeepSpeed: fp8 (the ds_config has bf16 and fp16 sections only); expert and context
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
  hybrid`` (Transformer Engine fp8, with ``--bf16``); Megatron-Core's
  ``--context-parallel-size``, ``--expert-model-parallel-size``, ``--num-experts``,
  ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
  ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq`` (a 0/1 pattern per
  layer, e.g. ``([0]*1+[1]*26)``), ``--moe-token-dispatcher-type alltoall`` (the
  all-to-all dispatch phaze prices) and ``--moe-expert-capacity-factor`` (Megatron-Core
  MoE user guide and ``megatron/training/arguments.py``).
- Megatron-DeepSpeed (github.com/microsoft/Megatron-DeepSpeed, ``megatron/arguments.py``
  and ``examples_deepspeed``): the Megatron arguments above plus ``--deepspeed``,
  ``--deepspeed_config FILE``, ``--zero-stage N``, ``--no-pipeline-parallel`` (p = 1:
  no DeepSpeed pipeline engine), ``--checkpoint-activations`` with
  ``--deepspeed-activation-checkpointing`` (full recomputation), ``--use-flash-attn-v2``;
  DeepSpeed issues #823, #1629, #3589: pipeline parallelism works with ZeRO-1 but not
  2–3.
- DeepSpeed configuration JSON (deepspeed.ai/docs/config-json): ``train_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``,
  ``zero_optimization.stage`` and ``overlap_comm``, ``bf16.enabled``,
  ``fp16.enabled``/``loss_scale`` (0: dynamic), ``activation_checkpointing``
  (``partition_activations``, ``contiguous_memory_optimization``,
  ``cpu_checkpointing``).
"""
from __future__ import annotations

import json

from . import models
from ._validate import positive_ints

__all__ = ["NotLaunchable", "TRAINERS", "megatron_arguments", "deepspeed_arguments", "emit"]

#: Trainers :func:`emit` knows.
TRAINERS = ("megatron", "deepspeed")


class NotLaunchable(ValueError):
    """The plan cannot be launched by the trainer asked for; the message says why in one
    sentence."""


def _plan(model, tensor_parallel, pipeline_parallel, data_parallel, microbatch, global_batch,
          recompute, virtual_stages, zero_stage, precision, expert_parallel=1,
          context_parallel=1, flash_attention=False):
    """Validated plan values (bad input: ValueError naming the field)."""
    spec = models.resolve(model)
    t, p, d, b, B, v = positive_ints(
        tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel,
        data_parallel=data_parallel, microbatch=microbatch, global_batch=global_batch,
        virtual_stages=virtual_stages)
    if recompute is True or recompute is False:
        recompute = "full" if recompute else "none"
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be 'none', 'selective' or 'full' (or a bool), "
                         f"got {recompute!r}")
    if isinstance(zero_stage, bool) or zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if precision not in ("bf16", "fp16", "fp8"):
        raise ValueError(f"precision must be 'bf16', 'fp16' or 'fp8', got {precision!r}")
    ep, cp = positive_ints(expert_parallel=expert_parallel, context_parallel=context_parallel)
    if getattr(spec, "kv_lora_rank", 0):
        raise NotLaunchable(f"{spec.name} uses multi-head latent attention, whose Megatron "
                            f"arguments phaze does not write yet")
    if ep > 1 and (not getattr(spec, "n_experts", 0) or spec.n_experts % ep or (cp * d) % ep):
        raise NotLaunchable(f"expert parallel {ep} must divide the experts "
                            f"({getattr(spec, 'n_experts', 0)}) and context × data parallel "
                            f"= {cp * d} (Megatron-Core, expert-tensor parallel = t)")
    if cp > 1 and not flash_attention:
        raise NotLaunchable("context parallelism runs on the fused attention kernel: turn "
                            "flash attention on")
    if B % (b * d):
        raise NotLaunchable(f"the global batch {B} is not divisible by microbatch × data "
                            f"parallel = {b} × {d} = {b * d}, which both trainers require")
    if not spec.valid_tensor_parallel(t):
        raise NotLaunchable(f"tensor parallel {t} does not divide the heads ({spec.heads}) "
                            f"and key/value heads ({spec.kv_heads}) of {spec.name}")
    return spec, t, p, d, b, B, v, recompute, int(zero_stage), ep, cp


def _model_arguments(spec) -> list:
    """Megatron model-shape arguments of ``spec`` (shared by both trainers)."""
    out = ["--num-layers", str(spec.n_layers), "--hidden-size", str(spec.hidden),
           "--num-attention-heads", str(spec.heads), "--ffn-hidden-size", str(spec.ffn_hidden),
           "--seq-length", str(spec.seq_len), "--max-position-embeddings",
           str(getattr(spec, "max_positions", None) or spec.seq_len)]
    head_dim = getattr(spec, "head_dim", None)
    if head_dim and head_dim != spec.hidden // spec.heads:
        out += ["--kv-channels", str(head_dim)]
    if spec.kv_heads != spec.heads:
        out += ["--group-query-attention", "--num-query-groups", str(spec.kv_heads)]
    if spec.activation == "swiglu":
        out += ["--swiglu"]
    if getattr(spec, "norm", "layernorm") == "rmsnorm":
        out += ["--normalization", "RMSNorm"]
    if getattr(spec, "position", "learned") == "rotary":
        out += ["--position-embedding-type", "rope"]
    if not getattr(spec, "bias", True):
        out += ["--disable-bias-linear"]
    if not getattr(spec, "tied_embeddings", True):
        out += ["--untie-embeddings-and-output-weights"]
    return out


def megatron_arguments(model, *, tensor_parallel, pipeline_parallel, data_parallel, microbatch,
                       global_batch, recompute="none", virtual_stages=1, sequence_parallel=False,
                       flash_attention=False, zero_stage=0, overlap_grad_reduce=False,
                       precision="bf16", expert_parallel=1, context_parallel=1,
                       capacity_factor=None) -> list:
    """Megatron-LM command-line arguments (a list of strings) of one plan.

    ``model``: zoo name or ModelSpec; t, p, d, ``microbatch`` b and ``global_batch`` B in
    samples; ``recompute`` "none" | "selective" | "full" (True = "full"); the other knobs
    as :func:`phaze.step.training_step` (``expert_parallel`` ep, ``context_parallel`` cp
    and ``capacity_factor`` of a mixture of experts included; the GPUs are t·cp·p·d).
    Sequence parallelism at t = 1 is left out
    (Megatron-LM switches it off there). Raises :class:`NotLaunchable` for a plan
    Megatron-LM cannot run (module docstring), ``ValueError`` for bad input.
    """
    spec, t, p, d, b, B, v, recompute, zero, ep, cp = _plan(
        model, tensor_parallel, pipeline_parallel, data_parallel, microbatch, global_batch,
        recompute, virtual_stages, zero_stage, precision, expert_parallel, context_parallel,
        flash_attention)
    L = spec.n_layers
    if L % p:
        raise NotLaunchable(f"Megatron-LM splits the {L} transformer layers evenly over the "
                            f"pipeline stages, and {L} is not divisible by p = {p}")
    if v > 1:
        m = B // (b * d)
        if p < 2:
            raise NotLaunchable("Megatron-LM's interleaved schedule (virtual stages > 1) needs "
                                "pipeline parallelism (p >= 2)")
        if L % (p * v):
            raise NotLaunchable(f"Megatron-LM's interleaved schedule needs the {L} transformer "
                                f"layers divisible by p × v = {p * v}")
        if m % p:
            raise NotLaunchable(f"Megatron-LM's interleaved schedule needs the {m} microbatches "
                                f"per pipeline divisible by p = {p}")
    if zero >= 2:
        raise NotLaunchable(f"Megatron-LM has no ZeRO stage {zero} (its distributed optimizer "
                            f"is ZeRO-1); emit deepspeed for ZeRO 2-3")
    out = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p)]
    if cp > 1:
        out += ["--context-parallel-size", str(cp)]
    if ep > 1:
        out += ["--expert-model-parallel-size", str(ep)]
    if v > 1:
        out += ["--num-layers-per-virtual-pipeline-stage", str(L // (p * v))]
    out += ["--micro-batch-size", str(b), "--global-batch-size", str(B)]
    if sequence_parallel and t > 1:
        out += ["--sequence-parallel"]
    if recompute == "full":
        out += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    elif recompute == "selective":
        out += ["--recompute-granularity", "selective"]
    if zero == 1:
        out += ["--use-distributed-optimizer"]
    if flash_attention:
        out += ["--use-flash-attn"]
    if overlap_grad_reduce:
        out += ["--overlap-grad-reduce"]
    out += _model_arguments(spec)
    out += _moe_arguments(spec, capacity_factor)
    # fp8: Transformer Engine's hybrid format (E4M3 forward, E5M2 gradients) on top of bf16.
    out += (["--fp16"] if precision == "fp16" else ["--bf16"]
            + (["--fp8-format", "hybrid"] if precision == "fp8" else []))
    return out


def deepspeed_arguments(model, *, tensor_parallel, pipeline_parallel, data_parallel,
                        microbatch, global_batch, recompute="none", virtual_stages=1,
                        sequence_parallel=False, flash_attention=False, zero_stage=0,
                        overlap_grad_reduce=False, precision="bf16",
                        config_path="ds_config.json", expert_parallel=1, context_parallel=1,
                        capacity_factor=None) -> tuple:
    """Megatron-DeepSpeed arguments and the ds_config of one plan: ``(arguments, config)``,
    a list of strings and a dict (JSON-ready; ``config_path`` is the file name the
    arguments point ``--deepspeed_config`` at).

    Arguments as :func:`megatron_arguments`. ``gradient_accumulation_steps`` = B / (b·d);
    full recomputation checkpoints every transformer layer (``--checkpoint-activations``
    with DeepSpeed's activation checkpointing); ``overlap_grad_reduce`` becomes
    ``zero_optimization.overlap_comm``. Raises :class:`NotLaunchable` for a plan DeepSpeed
    cannot run (module docstring), ``ValueError`` for bad input.
    """
    spec, t, p, d, b, B, v, recompute, zero, ep, cp = _plan(
        model, tensor_parallel, pipeline_parallel, data_parallel, microbatch, global_batch,
        recompute, virtual_stages, zero_stage, precision, expert_parallel, context_parallel,
        flash_attention)
    if ep > 1 or cp > 1 or getattr(spec, "n_experts", 0):
        raise NotLaunchable("the Megatron-DeepSpeed arguments written here have no mixture "
                            "of experts, expert or context parallelism; emit megatron")
    if precision == "fp8":
        raise NotLaunchable("the ds_config written here has no fp8 training (DeepSpeed's "
                            "config offers bf16 and fp16); emit megatron for fp8")
    if v > 1:
        raise NotLaunchable("DeepSpeed's pipeline engine has no interleaved schedule "
                            "(virtual stages > 1); emit megatron instead")
    if zero >= 2 and p > 1:
        raise NotLaunchable(f"DeepSpeed refuses ZeRO stage {zero} with pipeline parallelism "
                            f"(p = {p}); use ZeRO 0-1 or p = 1")
    out = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p)]
    if p == 1:
        out += ["--no-pipeline-parallel"]
    out += ["--micro-batch-size", str(b), "--global-batch-size", str(B)]
    if sequence_parallel and t > 1:
        out += ["--sequence-parallel"]
    if recompute == "full":
        out += ["--checkpoint-activations", "--deepspeed-activation-checkpointing"]
    elif recompute == "selective":
        out += ["--recompute-granularity", "selective"]
    if flash_attention:
        out += ["--use-flash-attn-v2"]
    out += _model_arguments(spec)
    out += ["--bf16" if precision == "bf16" else "--fp16"]
    out += ["--deepspeed", "--deepspeed_config", str(config_path), "--zero-stage", str(zero)]
    zero_cfg = {"stage": zero}
    if overlap_grad_reduce and zero >= 1:
        zero_cfg["overlap_comm"] = True
    config = {"train_batch_size": B, "train_micro_batch_size_per_gpu": b,
              "gradient_accumulation_steps": B // (b * d), "zero_optimization": zero_cfg}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    else:
        config["fp16"] = {"enabled": True, "loss_scale": 0}
    if recompute == "full":
        config["activation_checkpointing"] = {"partition_activations": False,
                                              "contiguous_memory_optimization": False,
                                              "cpu_checkpointing": False}
    return out, config


def _moe_arguments(spec, capacity_factor) -> list:
    """Megatron-Core's mixture-of-experts arguments of ``spec`` (none for a dense model):
    experts, top-k, expert width, shared experts, the layer pattern, the all-to-all
    dispatcher phaze prices and the capacity factor when one is set."""
    n = getattr(spec, "n_experts", 0)
    if not n:
        return []
    out = ["--num-experts", str(n), "--moe-router-topk", str(spec.experts_per_token),
           "--moe-ffn-hidden-size", str(spec.expert_ffn_hidden or spec.ffn_hidden),
           "--moe-token-dispatcher-type", "alltoall"]
    if spec.n_shared_experts:
        width = spec.shared_ffn_hidden or spec.expert_ffn_hidden or spec.ffn_hidden
        out += ["--moe-shared-expert-intermediate-size", str(spec.n_shared_experts * width)]
    moe = set(spec.moe_layer_ids)
    if len(moe) != spec.n_layers:
        pattern = "[" + ",".join("1" if i in moe else "0" for i in range(spec.n_layers)) + "]"
        out += ["--moe-layer-freq", pattern]
    if capacity_factor is not None:
        out += ["--moe-expert-capacity-factor", f"{float(capacity_factor):g}"]
    return out


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


def emit(trainer, model, **plan) -> str:
    """Text of a plan's launch arguments for ``trainer`` "megatron" or "deepspeed":
    a comment naming the trainer and the GPUs (t·p·d), the arguments one flag per line
    with shell continuations, and for deepspeed the ds_config JSON after a comment line.
    ``plan``: the keywords of :func:`megatron_arguments`. Raises :class:`NotLaunchable`
    or ``ValueError`` as those functions do."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    spec = models.resolve(model)
    gpus = (int(plan.get("tensor_parallel", 1)) * int(plan.get("pipeline_parallel", 1))
            * int(plan.get("data_parallel", 1)) * int(plan.get("context_parallel", 1) or 1))
    script = "pretrain_gpt.py" if getattr(spec, "causal", True) else "pretrain_bert.py"
    if trainer == "megatron":
        args = megatron_arguments(spec, **plan)
        head = (f"# Megatron-LM launch arguments for {spec.name} on {gpus} GPUs "
                f"(add data, tokenizer, optimizer and schedule arguments)")
        config = None
    else:
        args, config = deepspeed_arguments(spec, **plan)
        head = (f"# Megatron-DeepSpeed launch arguments for {spec.name} on {gpus} GPUs "
                f"(add data, tokenizer, optimizer and schedule arguments)")
    body = " \\\n    ".join([script] + _lines(args))
    text = f"{head}\n{body}\n"
    if config is not None:
        text += f"# ds_config.json\n{json.dumps(config, indent=2)}\n"
    return text
