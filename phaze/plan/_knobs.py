"""The knob table of a training plan, the :class:`Plan` record, the launchability rules
and the trainers' argument writers (``phaze.plan``'s docstring says what reads them)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import precision as _precision
from ..graph import LOSS_KERNELS as _LOSS
from ._knob import Knob, Rule, Trainer
from ._rows import RECOMPUTE_RULES, _ROWS
from ._torchtitan import stages_expressible as _tt_stages_expressible, units as _tt_units


#: The knob table, in :class:`Plan` field order (the order of ``training_step``'s plan).
KNOBS = (
    _ROWS["tensor_parallel"],
    _ROWS["pipeline_parallel"],
    _ROWS["data_parallel"],
    Knob("expert_parallel", int, 1, "a positive integer", minimum=1, flags=("--ep",),
         metavar="N", study=1, calibrated_only=True,
         file_key="ep", file_rank=22, file_optional=True,
         help="expert-parallel width (a mixture of experts: divides its routed experts and "
              "cp*d; default 1; calibrated model only)",
         search="grid", search_metavar="N,...|all", grid_none="every valid value",
         search_help="expert-parallel widths of a mixture of experts, e.g. 1,2,4,8 (default "
                     "all: every divisor of its routed experts; dense models: 1)",
         column=True, column_rank=6, short="ep", width=3,
         legend="expert parallelism (mixture of experts): each rank holds n_experts/ep routed\n"
                "experts, tokens travel by all-to-all over the ep ranks (ep divides cp*d)",
         grid_rank=6, title="expert parallel",
         megatron="--expert-model-parallel-size",
         torchtitan="--parallelism.expert_parallel_degree (with --parallelism."
                    "expert_tensor_parallel_degree t)"),
    Knob("context_parallel", int, 1, "a positive integer", minimum=1, flags=("--cp",),
         metavar="N", study=1, calibrated_only=True, devices_factor=True,
         file_key="cp", file_rank=21, file_optional=True,
         help="context-parallel width (ring attention over N ranks: needs --flash-attention "
              "and the sequence divisible by 2N; t*cp*p*d devices; default 1; calibrated "
              "model only)",
         search="grid", search_metavar="N,...|all", grid_none="every valid value",
         search_help="context-parallel widths (ring attention; t*cp*p*d devices), e.g. 1,2,4 "
                     "(default all: powers of two up to 32 leaving >= 512 tokens per "
                     "load-balanced chunk)",
         column=True, column_rank=7, short="cp", width=3,
         legend="context parallelism: each rank holds s/cp tokens of every sample, ring\n"
                "attention passes K/V round the cp ranks (t*cp*p*d devices)",
         grid_rank=7, title="context parallel",
         megatron="--context-parallel-size", torchtitan="--parallelism.context_parallel_degree"),
    _ROWS["capacity_factor"],
    _ROWS["microbatch"],
    _ROWS["global_batch"],
    _ROWS["recompute"],
    Knob("virtual_stages", int, 1, "a positive integer", minimum=1,
         flags=("--virtual-stages",), metavar="V", study=1, calibrated_only=True,
         file_key="virtual_stages", file_rank=5,
         help="interleaved 1F1B with V model chunks per device (default 1; V > 1 calibrated "
              "model only)",
         search="grid", search_metavar="V,...|all", grid_none="every valid v",
         search_help="interleaved 1F1B model chunks per device, e.g. 1,2,4 (default all: "
                     "every V dividing the layers per stage)",
         column=True, column_rank=2, short="v", width=2, phrase="v={}",
         legend="virtual stages per device (interleaved 1F1B when > 1: bubble / v)",
         grid_rank=3, title="virtual stages",
         megatron="--num-layers-per-virtual-pipeline-stage (L / (p·v))",
         torchtitan="--parallelism.pipeline_parallel_schedule Interleaved1F1B"),
    _ROWS["account_for_embedding"],
    Knob("sequence_parallel", bool, False, "True or False", flags=("--sequence-parallel",),
         study=False, calibrated_only=True, noop_note="no-op at t = 1",
         file_key="sequence_parallel", file_rank=7,
         help="sequence parallelism over the tensor-parallel group (calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="sequence parallelism: off, on or off,on (default both; chosen per row)",
         column=True, column_rank=1, short="sp", width=3,
         legend="sequence parallelism (norms and dropouts split over the t tensor-parallel\n"
                "ranks; the all-reduces become reduce-scatter + all-gather): on / off",
         grid_rank=1, title="sequence parallel",
         megatron="--sequence-parallel", deepspeed="--sequence-parallel",
         torchtitan="(part of its tensor-parallel plan: SequenceParallel norms)"),
    _ROWS["precision"],
    Knob("flash_attention", bool, False, "True or False", flags=("--flash-attention",),
         study=False, calibrated_only=True, file_key="flash_attention", file_rank=9,
         file_optional=True,
         help="fused attention kernel, no materialised scores (calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="fused (flash) attention: off, on or off,on (default both)",
         column=True, column_rank=4, short="flash", width=5,
         legend="fused (flash) attention: no b*a*s^2 scores stored, recomputed in backward",
         grid_rank=2, title="flash attention",
         megatron="--use-flash-attn", deepspeed="--use-flash-attn-v2",
         torchtitan="(scaled_dot_product_attention, its default)"),
    Knob("zero_stage", int, 0, "0, 1, 2 or 3", choices=(0, 1, 2, 3), flags=("--zero-stage",),
         study=0, calibrated_only=True, file_key="zero_stage", file_rank=10, file_optional=True,
         help="ZeRO stage over the data-parallel group (default 0; 1 = Megatron-LM's "
              "distributed optimizer; > 0: calibrated model only)",
         search="grid", search_metavar="Z,...", grid_none="all four",
         search_help="ZeRO stages over the data-parallel group, e.g. 0,1 (default 0,1,2,3; "
                     "plans are those some trainer launches; --emit X: those X launches)",
         column=True, column_rank=3, short="zero", width=4,
         legend="ZeRO stage over the d data-parallel ranks (1 = Megatron-LM's distributed\n"
                "optimizer: optimizer state sharded; 2 also gradients; 3 also weights)",
         grid_rank=4, title="ZeRO",
         megatron="--use-distributed-optimizer (stage 1); --use-megatron-fsdp "
                  "--data-parallel-sharding-strategy optim_grads (2) | optim_grads_params "
                  "(3) --ckpt-format fsdp_dtensor; 3 without resharding: --use-torch-fsdp2 "
                  "--torch-fsdp2-no-reshard-after-forward",
         deepspeed="--deepspeed --deepspeed_config FILE --zero-stage N (ds_config "
                   "zero_optimization.stage)",
         torchtitan="--parallelism.data_parallel_shard_degree (FSDP2, stage 3)"),
    Knob("overlap_grad_reduce", bool, False, "True or False",
         flags=("--overlap-grad-reduce",), study=False, calibrated_only=True,
         file_key="overlap_grad_reduce", file_rank=11, file_optional=True,
         help="overlap the gradient reduction with the backward pass (calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="overlap the gradient reduction with the backward: off, on or off,on "
                     "(default both)",
         column=True, column_rank=5, short="ogr", width=3,
         legend="overlap-grad-reduce: the gradient reduction overlaps the backward (on / off)",
         grid_rank=5, title="overlap grad reduce",
         megatron="--overlap-grad-reduce",
         deepspeed="ds_config zero_optimization.overlap_comm (ZeRO >= 1)",
         torchtitan="(FSDP2 overlaps its reduce-scatters by default)"),
    _ROWS["overlap_param_gather"], _ROWS["reshard_after_forward"],
    _ROWS["tp_comm_overlap"], _ROWS["grad_reduce_dtype"],
    _ROWS["optimizer"], _ROWS["optimizer_state_dtype"],
    _ROWS["moe_dispatcher"], _ROWS["pipeline_split"], _ROWS["pipeline_microbatches"],
    _ROWS["attention_kernel"], _ROWS["loss_kernel"], _ROWS["master_weights"],
    _ROWS["recompute_modules"])

#: Knob by name.
KNOB = {k.name: k for k in KNOBS}
#: The knob names, in :class:`Plan` field order.
NAMES = tuple(k.name for k in KNOBS)
#: The strategy knobs the calibrated model has and the study's does not (``calibrated_only``),
#: in table order.
STRATEGY = tuple(k.name for k in KNOBS if k.calibrated_only)
#: The search's strategy grids and one-value settings, in their order (``grid_rank``).
GRIDS = tuple(k.name for k in sorted((k for k in KNOBS if k.grid_rank is not None
                                       and k.name != "recompute"), key=lambda k: k.grid_rank))
#: The result columns of a plan's knobs, in the summary's order (``column_rank``).
COLUMNS = tuple(k.name for k in sorted((k for k in KNOBS if k.column),
                                        key=lambda k: k.column_rank))
#: The strategy columns of the result table (after ``reason``), in file order.
STRATEGY_COLUMNS = tuple(n for n in COLUMNS if KNOB[n].calibrated_only)


# ---------------------------------------------------------------------------
# checking values
# ---------------------------------------------------------------------------

def check(name: str, value, field: str = None):
    """``value`` of knob ``name`` as its canonical value (:meth:`Knob.check`)."""
    return KNOB[name].check(value, field)


def devices_of(values: dict) -> int:
    """GPUs of a plan: the product of its ``devices_factor`` sizes (t·cp·p·d); a size
    absent, None or 0 counts as 1."""
    out = 1
    for k in KNOBS:
        if k.devices_factor and values.get(k.name):
            out *= int(values[k.name])
    return out


# ---------------------------------------------------------------------------
# the Plan record
# ---------------------------------------------------------------------------

def _post_init(self):
    for k in KNOBS:
        object.__setattr__(self, k.name, k.check(getattr(self, k.name)))


def _as_dict(self) -> dict:
    """The plan as a dict in field order (what ``training_step`` records)."""
    return {name: getattr(self, name) for name in NAMES}


def _to_record(self) -> np.ndarray:
    """The plan as one :data:`PLAN_RECORD_DTYPE` record (capacity factor None → NaN)."""
    rec = np.zeros((), dtype=PLAN_RECORD_DTYPE)
    for name in NAMES:
        value = getattr(self, name)
        rec[name] = math.nan if value is None else value
    return rec


def _from_record(cls, record):
    """A :class:`Plan` from a :data:`PLAN_RECORD_DTYPE` record (or any mapping)."""
    values = {}
    for k in KNOBS:
        v = record[k.name]
        v = v.item() if hasattr(v, "item") else v
        if k.optional and isinstance(v, float) and math.isnan(v):
            v = None
        values[k.name] = k.type(v) if v is not None else None
    return cls(**values)


#: A training plan: every knob of :data:`KNOBS`, validated on construction (``ValueError``
#: in one sentence naming the field). Frozen; ``as_dict()``, ``to_record()``,
#: ``Plan.from_record(rec)``, ``devices`` (t·cp·p·d), ``schedule`` ("1F1B" or "interleaved
#: 1F1B"); ``dataclasses.replace`` re-validates.
Plan = dataclasses.make_dataclass(
    "Plan", [(k.name, k.type, dataclasses.field(default=k.default)) for k in KNOBS],
    frozen=True,
    namespace={"__post_init__": _post_init, "as_dict": _as_dict, "to_record": _to_record,
               "from_record": classmethod(_from_record),
               "devices": property(lambda self: devices_of(self.as_dict()),
                                   doc="GPUs the plan uses: t·cp·p·d."),
               "schedule": property(lambda self: "interleaved 1F1B" if self.virtual_stages > 1
                                    else "1F1B", doc="Megatron-LM's pipeline schedule."),
               "__doc__": "A training plan: the knobs of phaze.plan.KNOBS, validated "
                          "(module docstring)."})
Plan.__module__ = __name__   # pickles as phaze.plan.Plan

_NUMPY = {bool: "?", int: "<i8", float: "<f8"}
_str_width = (lambda k: max(map(len, k.choices)) if k.choices else len(k.rule))  # noqa: E731
#: The numpy record of a :class:`Plan` (strings as fixed-width unicode, a capacity factor
#: of None as NaN).
PLAN_RECORD_DTYPE = np.dtype([(k.name, _NUMPY.get(k.type) or f"<U{_str_width(k)}")
                              for k in KNOBS])


# ---------------------------------------------------------------------------
# trainers and the launchability rules
# ---------------------------------------------------------------------------

#: The trainers, in the order ``trainers`` lists them (torchtitan: FSDP2 = ZeRO 3 with any p,
#: t and cp), with the chip platforms each runs on (docs/fidelity-sources.md §20).
_CUDA_ROCM_GAUDI = ("cuda", "rocm", "gaudi")
TRAINERS = (Trainer("megatron-lm", "Megatron-LM", "megatron", "megatron", _CUDA_ROCM_GAUDI),
            Trainer("deepspeed", "DeepSpeed", "deepspeed", "deepspeed", _CUDA_ROCM_GAUDI),
            Trainer("torchtitan", "torchtitan", "torchtitan", "torchtitan", ("cuda", "rocm")))
_JUDGED = ("megatron-lm", "deepspeed", "torchtitan")
_SPLIT = ("pipeline_parallel", "virtual_stages", "pipeline_split", "account_for_embedding")

#: The launchability rules, in the order ``phaze.launch`` checks them.
RULES = (
    Rule("any", "shared", ("expert_parallel", "context_parallel", "data_parallel"),
         lambda v: v["expert_parallel"] > 1 and (
             not v["n_experts"] or v["n_experts"] % v["expert_parallel"]
             or (v["context_parallel"] * v["data_parallel"]) % v["expert_parallel"]),
         lambda v: f"expert parallel {v['expert_parallel']} must divide the experts "
                   f"({v['n_experts']}) and context × data parallel = "
                   f"{v['context_parallel'] * v['data_parallel']} (Megatron-Core, "
                   f"expert-tensor parallel = t)"),
    Rule("any", "shared", ("context_parallel", "flash_attention"),
         lambda v: v["context_parallel"] > 1 and not v["flash_attention"],
         lambda v: "context parallelism runs on the fused attention kernel: turn flash "
                   "attention on"),
    Rule("megatron-lm", "layout", ("pipeline_parallel", "account_for_embedding"),
         lambda v: not v["account_for_embedding"] and v["n_layers"] % v["pipeline_parallel"],
         lambda v: f"Megatron-LM splits the {v['n_layers']} transformer layers evenly over the "
                   f"pipeline stages, and {v['n_layers']} is not divisible by p = "
                   f"{v['pipeline_parallel']} (account_for_embedding splits L + 2)"),
    Rule("megatron-lm", "layout", ("pipeline_parallel", "virtual_stages",
                                   "account_for_embedding"),
         lambda v: v["account_for_embedding"] and (
             v["pipeline_parallel"] < 2
             or (v["n_layers"] + 2) % (v["pipeline_parallel"] * v["virtual_stages"])
             or (v["n_layers"] + 2) // (v["pipeline_parallel"] * v["virtual_stages"]) < 2),
         lambda v: f"counting the embedding and loss as layers needs p >= 2 and the "
                   f"{v['n_layers']} + 2 layers divisible by p·v = "
                   f"{v['pipeline_parallel'] * v['virtual_stages']} into chunks of 2 or more"),
    Rule("megatron-lm", "layout", ("virtual_stages", "pipeline_parallel"),
         lambda v: v["virtual_stages"] > 1 and v["pipeline_parallel"] < 2,
         lambda v: "Megatron-LM's interleaved schedule (virtual stages > 1) needs pipeline "
                   "parallelism (p >= 2)"),
    Rule("megatron-lm", "layout", ("virtual_stages", "pipeline_parallel",
                                   "account_for_embedding"),
         lambda v: v["virtual_stages"] > 1 and not v["account_for_embedding"]
         and v["n_layers"] % (v["pipeline_parallel"] * v["virtual_stages"]),
         lambda v: f"Megatron-LM's interleaved schedule needs the {v['n_layers']} transformer "
                   f"layers divisible by p × v = "
                   f"{v['pipeline_parallel'] * v['virtual_stages']}"),
    Rule("megatron-lm", "layout", ("virtual_stages", "pipeline_parallel", "microbatch",
                                   "data_parallel", "global_batch"),
         lambda v: v["virtual_stages"] > 1 and _microbatches(v) % v["pipeline_parallel"],
         lambda v: f"Megatron-LM's interleaved schedule needs the {_microbatches(v)} "
                   f"microbatches per pipeline divisible by p = {v['pipeline_parallel']}"),
    # What every trainer needs (Megatron-LM asserts the batch in megatron/training/
    # arguments.py; DeepSpeed: train_batch_size = micro × accumulation × data parallel):
    # the model's heads are read when the values carry its ``valid_tp`` (model_values).
    Rule("any", "shared", ("global_batch", "microbatch", "data_parallel"),
         lambda v: v["global_batch"] % (v["microbatch"] * v["data_parallel"]),
         lambda v: f"the global batch {v['global_batch']} is not divisible by microbatch × "
                   f"data parallel = {v['microbatch']} × {v['data_parallel']} = "
                   f"{v['microbatch'] * v['data_parallel']}, which every trainer requires"),
    Rule("any", "shared", ("tensor_parallel",),
         lambda v: "valid_tp" in v and not v["valid_tp"](v["tensor_parallel"]),
         lambda v: f"tensor parallel {v['tensor_parallel']} does not divide the heads "
                   f"({v.get('heads')}) and key/value heads ({v.get('kv_heads')}) of "
                   f"{v.get('model')}"),
    # Megatron-Core's ZeRO 2-3 is Megatron-FSDP (--use-megatron-fsdp
    # --data-parallel-sharding-strategy optim_grads | optim_grads_params, arguments.py at
    # d98e8a6; its guide docs/user-guide/features/megatron_fsdp.md composes it with TP, CP
    # and EP, not PP) or, for ZeRO 3 without resharding, torch FSDP2 (--use-torch-fsdp2
    # --torch-fsdp2-no-reshard-after-forward: arguments.py asserts p = 1, ep = 1, untied
    # embeddings, no fp16).
    Rule("megatron-lm", "trainer", ("zero_stage", "pipeline_parallel"),
         lambda v: v["zero_stage"] >= 2 and v["pipeline_parallel"] > 1,
         lambda v: f"Megatron-Core's ZeRO {v['zero_stage']} (Megatron-FSDP) runs without "
                   f"pipeline parallelism (p = {v['pipeline_parallel']}); use ZeRO 0-1 with a "
                   f"pipeline"),
    Rule("megatron-lm", "trainer", ("zero_stage", "reshard_after_forward", "expert_parallel",
                                    "precision"),
         lambda v: v["zero_stage"] == 3 and not v["reshard_after_forward"] and (
             v["expert_parallel"] > 1 or v["precision"] == "fp16"
             or v.get("tied_embeddings", False)),
         lambda v: "Megatron-Core's ZeRO 3 without resharding after the forward is torch "
                   "FSDP2 (--use-torch-fsdp2), which needs expert parallel 1, no fp16 and "
                   "untied embeddings (megatron/training/arguments.py)"),
    # Megatron-Core's MoE layer refuses tensor parallelism without sequence parallelism at
    # its first training step (megatron/core/transformer/moe/moe_layer.py at d98e8a6).
    Rule("megatron-lm", "trainer", ("tensor_parallel", "sequence_parallel"),
         lambda v: v.get("moe", False) and v["tensor_parallel"] > 1
         and not v["sequence_parallel"],
         lambda v: f"Megatron-Core runs a mixture of experts at tensor parallel "
                   f"{v['tensor_parallel']} only with sequence parallelism: turn it on"),
    # --overlap-param-gather: "Must use --overlap-param-gather with --overlap-grad-reduce"
    # (arguments.py); at ZeRO 0 there is no parameter gather.
    Rule("megatron-lm", "emit", ("overlap_param_gather", "overlap_grad_reduce", "zero_stage"),
         lambda v: v["overlap_param_gather"] and v["zero_stage"] >= 1
         and not v["overlap_grad_reduce"] and not _torch_fsdp2(v),
         lambda v: "Megatron-LM overlaps the parameter gathers (--overlap-param-gather) only "
                   "together with the gradient reduction: turn overlap_grad_reduce on"),
    # torchtitan's and NeMo AutoModel's one schedule per local batch (pipeline_microbatches)
    *(Rule(tr, "layout", ("pipeline_microbatches", "pipeline_parallel", "microbatch",
                          "data_parallel", "global_batch"), lambda v: _per_local_batch(v),
           lambda v, n=name: f"{n} runs the step's {_microbatches(v)} microbatches in one "
                             f"pipeline schedule, not {v['pipeline_microbatches']} per schedule")
      for tr, name in (("megatron-lm", "Megatron-LM"), ("deepspeed", "Megatron-DeepSpeed"))),
    Rule("deepspeed", "emit", ("expert_parallel", "context_parallel"),
         lambda v: v["expert_parallel"] > 1 or v["context_parallel"] > 1 or v.get("moe", False),
         lambda v: "the Megatron-DeepSpeed arguments written here have no mixture of experts, "
                   "expert or context parallelism; emit megatron"),
    Rule("deepspeed", "emit", ("precision",),
         lambda v: _precision.is_low_precision(v["precision"]),
         lambda v: f"the ds_config written here has no {v['precision']} training (DeepSpeed's "
                   f"config offers bf16 and fp16); emit megatron for it"),
    Rule("megatron-lm", "trainer", ("precision",),
         lambda v: _precision.datatype(v["precision"]).megatron is None,
         lambda v: f"Megatron-Core has no {v['precision']} recipe (its --fp8-recipe: delayed = "
                   f"fp8, tensorwise = fp8-current, blockwise, mxfp8; --fp4-recipe nvfp4)"),
    Rule("megatron-lm", "trainer", ("grad_reduce_dtype", "precision"),
         lambda v: v["grad_reduce_dtype"] not in ("fp32", PARAMETER_DTYPE[v["precision"]]),
         lambda v: f"Megatron-Core reduces gradients in fp32 or in the parameters' datatype "
                   f"({PARAMETER_DTYPE[v['precision']]} under {v['precision']} training), not "
                   f"in {v['grad_reduce_dtype']}; emit deepspeed (ds_config "
                   f"communication_data_type)"),
    # phaze/graph/_loss.py: Megatron-LM's validate_args refuses TE's cross-entropy since
    # NVIDIA/Megatron-LM 168cb15d (2026-06-03).
    Rule("megatron-lm", "trainer", ("loss_kernel",), lambda v: v["loss_kernel"] == "te",
         lambda v: "Megatron-LM refuses --cross-entropy-fusion-impl te (Transformer Engine's "
                   "cross-entropy, disabled for stability issues since June 2026); use "
                   "loss_kernel native-fused or native"),
    # Muon (phaze/step/_optim.py): Megatron-LM's --optimizer muon at ZeRO 0-1 (layer-wise
    # distributed); DeepSpeed's and torchtitan's have none. Megatron-LM's precision-aware
    # optimizer keeps Adam's moments in fp32, fp16 or fp8.
    Rule("megatron-lm", "trainer", ("optimizer", "zero_stage"),
         lambda v: v["optimizer"] == "muon" and v["zero_stage"] >= 2,
         lambda v: f"Muon needs whole weight matrices on the rank that updates them: ZeRO "
                   f"stage {v['zero_stage']} shards them (ZeRO 0 or 1 only)"),
    Rule("deepspeed", "trainer", ("optimizer",), lambda v: v["optimizer"] == "muon",
         lambda v: "DeepSpeed has no Muon optimizer; emit megatron"),
    Rule("torchtitan", "trainer", ("optimizer",), lambda v: v["optimizer"] == "muon",
         lambda v: "torchtitan's optimizers (AdamW, Adam) have no Muon; emit megatron"),
    Rule("megatron-lm", "emit", ("optimizer_state_dtype", "optimizer"),
         lambda v: v["optimizer_state_dtype"] == "bf16" or (
             v["optimizer"] == "muon" and v["optimizer_state_dtype"] != "fp32"),
         lambda v: f"the Megatron-LM arguments written here keep Adam's moments in fp32 or "
                   f"fp16 (--exp-avg-dtype) and Muon's momentum in fp32, not "
                   f"{v['optimizer_state_dtype']}"),
    Rule("torchtitan", "emit", ("moe_dispatcher",),
         lambda v: v["moe_dispatcher"] == "deepep" and v.get("moe", False),
         lambda v: "the torchtitan job config written here dispatches tokens by all-to-all; "
                   "emit megatron for DeepEP"),
    Rule("megatron-lm", "trainer", ("master_weights",),
         lambda v: v["master_weights"] == "params",
         lambda v: "Megatron-LM keeps fp32 main parameters beside its 16-bit model weights "
                   "(master_weights separate), not fp32 parameters"),
    Rule("deepspeed", "trainer", ("master_weights",),
         lambda v: v["master_weights"] == "params",
         lambda v: "DeepSpeed keeps fp32 partitions beside its 16-bit parameters "
                   "(master_weights separate), not fp32 parameters"),
    *RECOMPUTE_RULES,
    Rule("deepspeed", "emit", ("optimizer_state_dtype",),
         lambda v: v["optimizer_state_dtype"] != "fp32",
         lambda v: "the ds_config written here keeps fp32 optimizer state; emit megatron"),
    Rule("torchtitan", "emit", ("optimizer_state_dtype",),
         lambda v: v["optimizer_state_dtype"] != "fp32",
         lambda v: "the torchtitan job config written here keeps fp32 optimizer state"),
    Rule("deepspeed", "emit", ("account_for_embedding", "pipeline_parallel"),
         lambda v: v["account_for_embedding"] and v["pipeline_parallel"] > 1,
         lambda v: "the Megatron-DeepSpeed arguments written here split the layers evenly "
                   "over the pipeline; emit megatron for a split counting the embedding"),
    Rule("megatron-lm", "trainer", ("recompute",), lambda v: v["recompute"] == "op",
         lambda v: "Megatron-LM has no per-op selective recomputation (torchtitan's \"op\" "
                   "policy); use selective or full, or emit torchtitan"),
    Rule("deepspeed", "trainer", ("recompute",), lambda v: v["recompute"] == "op",
         lambda v: "DeepSpeed has no per-op selective recomputation (torchtitan's \"op\" "
                   "policy); use full, or emit torchtitan"),
    Rule("deepspeed", "trainer", ("virtual_stages",), lambda v: v["virtual_stages"] > 1,
         lambda v: "DeepSpeed's pipeline engine has no interleaved schedule (virtual stages "
                   "> 1); emit megatron instead"),
    Rule("deepspeed", "trainer", ("context_parallel",), lambda v: v["context_parallel"] > 1,
         lambda v: "DeepSpeed has no ring attention (context parallelism); emit megatron"),
    Rule("deepspeed", "trainer", ("zero_stage", "pipeline_parallel"),
         lambda v: v["zero_stage"] >= 2 and v["pipeline_parallel"] > 1,
         lambda v: f"DeepSpeed refuses ZeRO stage {v['zero_stage']} with pipeline "
                   f"parallelism (p = {v['pipeline_parallel']}); use ZeRO 0-1 or p = 1"),
    # torchtitan (pytorch/torchtitan, torchtitan/config/job_config.py Parallelism and
    # Training; torchtitan/distributed/parallel_dims.py): data parallelism is FSDP2
    # (data_parallel_shard_degree, ZeRO 3) under any pipeline, tensor and context
    # parallelism, or DDP replicas (ZeRO 0) alone (the two DDP rules below); parameters
    # bf16 or fp32; reduce in float32.
    Rule("torchtitan", "trainer", ("zero_stage",), lambda v: v["zero_stage"] in (1, 2),
         lambda v: f"torchtitan shards with FSDP2 (ZeRO 3) or replicates with DDP (ZeRO 0); "
                   f"it has no ZeRO stage {v['zero_stage']}"),
    Rule("torchtitan", "trainer", ("precision",),
         lambda v: _precision.datatype(v["precision"]).torchtitan is None,
         lambda v: f"torchtitan trains in bf16, fp8 through torchao's float8 converters "
                   f"(fp8-tensorwise, fp8-rowwise) or mxfp8 through its mx converter, not "
                   f"{v['precision']}"),
    Rule("torchtitan", "trainer", ("grad_reduce_dtype",),
         lambda v: v["grad_reduce_dtype"] != "fp32",
         lambda v: f"torchtitan reduces gradients in float32 (mixed_precision_reduce), not "
                   f"{v['grad_reduce_dtype']}"),
    # What phaze's torchtitan writer (phaze.plan._torchtitan, torchtitan v0.2.0) does not
    # write: models without a torchtitan flavor (the values name the ``model`` and its
    # ``torchtitan_flavor``), pipeline stages of unequal layers,
    # interleaving without a pipeline, and expert parallelism outside FSDP2's ranks
    # (distributed/parallel_dims.py: with etp = tp, ep % cp == 0 and dp_shard·cp % ep == 0).
    Rule("torchtitan", "emit", (),
         lambda v: "model" in v and v.get("torchtitan_flavor") is None,
         lambda v: f"torchtitan has no model flavor for {v['model']}; emit megatron"),
    # torchtitan's DDP beside other parallelism (models/llama3/infra/parallelize.py: "DDP
    # has not supported > 1D parallelism"; with cp > 1 FSDP2 shards over the cp ranks
    # whatever the ZeRO stage): the trainer cannot run them
    Rule("torchtitan", "trainer", ("zero_stage", "context_parallel"),
         lambda v: v["zero_stage"] == 0 and v["context_parallel"] > 1,
         lambda v: "torchtitan shards the parameters over the context-parallel ranks (FSDP2 "
                   "on dp_shard × cp) whatever the ZeRO stage; use ZeRO 3 with context "
                   "parallelism"),
    Rule("torchtitan", "trainer", ("zero_stage", "data_parallel", "tensor_parallel",
                                   "pipeline_parallel"),
         lambda v: v["zero_stage"] == 0 and v["data_parallel"] > 1
         and v["tensor_parallel"] * v["pipeline_parallel"] > 1,
         lambda v: "torchtitan's DDP (ZeRO 0) runs on a one-dimensional mesh only (\"DDP has "
                   "not supported > 1D parallelism\"); use ZeRO 3 (FSDP2) with tensor or "
                   "pipeline parallelism"),
    Rule("torchtitan", "emit", ("virtual_stages", "pipeline_parallel"),
         lambda v: v["virtual_stages"] > 1 and v["pipeline_parallel"] < 2,
         lambda v: "torchtitan's interleaved schedule (virtual stages > 1) needs pipeline "
                   "parallelism (p >= 2)"),
    Rule("torchtitan", "emit", ("pipeline_parallel", "virtual_stages", "pipeline_split"),
         lambda v: v["pipeline_parallel"] > 1 and not v["account_for_embedding"]
         and v.get("pipeline_split", "even") == "even"
         and v["n_layers"] % (v["pipeline_parallel"] * v["virtual_stages"]),
         lambda v: f"the torchtitan stages written here hold {v['n_layers']} / (p × v) "
                   f"transformer layers each, and {v['n_layers']} is not divisible by p × v = "
                   f"{v['pipeline_parallel'] * v['virtual_stages']}"),
    Rule("torchtitan", "emit", _SPLIT,
         lambda v: v["pipeline_parallel"] > 1 and v.get("pipeline_split") == "remainder_first"
         and not _tt_stages_expressible(v),
         lambda v: f"torchtitan makes ceil(U / pipeline_parallel_layers_per_stage) stages of "
                   f"the U = {_tt_units(v)} units (layers, embedding and head counted as "
                   f"first/last_stage_less_layers), and no layers_per_stage gives p × v = "
                   f"{v['pipeline_parallel'] * v['virtual_stages']} stages of one or more"),
    Rule("megatron-lm", "layout", _SPLIT,
         lambda v: _uneven_remainder_first(v) > 0,
         lambda v: f"Megatron-LM cuts the {_tt_units(v)} layers into equal chunks, and the "
                   f"remainder_first split (torchtitan's, NeMo AutoModel's) gives the first "
                   f"{_uneven_remainder_first(v)} of the "
                   f"{v['pipeline_parallel'] * v['virtual_stages']} chunks one more"),
    Rule("deepspeed", "emit", _SPLIT, lambda v: _uneven_remainder_first(v) > 0,
         lambda v: "the Megatron-DeepSpeed arguments written here split the layers evenly "
                   "over the pipeline; emit torchtitan for the remainder_first split"),
    Rule("torchtitan", "emit", ("expert_parallel", "zero_stage", "context_parallel"),
         lambda v: v["expert_parallel"] > 1 and (v["zero_stage"] != 3
                                                 or v["expert_parallel"] % v["context_parallel"]),
         lambda v: f"torchtitan's expert parallelism takes its ranks from FSDP2's shard and "
                   f"context-parallel ranks: it needs ZeRO 3 and ep = {v['expert_parallel']} "
                   f"divisible by cp = {v['context_parallel']}"),
    # last: the plan's other torchtitan sentences come first (ZeRO 1, DDP, ...)
    Rule("torchtitan", "emit", ("master_weights",),
         lambda v: v["master_weights"] == "separate",
         lambda v: "torchtitan's FSDP2 keeps the fp32 parameters as the master weights: "
                   "price the plan with master_weights params (--master-weights params)"),
)


#: The datatype of the model parameters (and so of Megatron-Core's gradient buffer when it
#: does not reduce in fp32) under each training datatype: fp8 trains on bf16 parameters.
PARAMETER_DTYPE = {d: ("fp16" if d == "fp16" else "bf16") for d in _precision.DTYPES}


def _microbatches(v) -> int:
    """Microbatches per pipeline per batch: B / (b·d)."""
    return v["global_batch"] // (v["microbatch"] * v["data_parallel"])


def _per_local_batch(v) -> bool:
    """Whether the plan runs more than one pipeline schedule per step."""
    n = v.get("pipeline_microbatches") or 0
    return v["pipeline_parallel"] > 1 and n not in (0, _microbatches(v))


def _values(values: dict) -> dict:
    out = {k.name: k.default for k in KNOBS}
    out.update(values)
    return out


def refusal(trainer: str, values: dict, kinds=("layout", "trainer", "emit")):
    """The sentence of the first rule of ``kinds`` by which ``trainer`` ("any": the rules
    every trainer shares) refuses the plan ``values`` (knob name → value, absent knobs at
    their defaults; the layout, shared and emit rules also read the model's ``n_layers``,
    ``n_experts`` and ``moe``), or None."""
    v = _values(values)
    for rule in RULES:
        if rule.trainer == trainer and rule.kind in kinds and rule.refuses(v):
            return rule.why(v)
    return None


def trainers(**values) -> tuple:
    """The trainers (ids) that can launch the plan ``values``, by the "trainer" rules:
    Megatron-LM for ZeRO 0–1 (any p, v, cp) reducing gradients in fp32 or the parameters'
    datatype; DeepSpeed without interleaving or ring attention, for ZeRO 0–1 or, without
    pipeline parallelism, 2–3."""
    return tuple(t for t in _JUDGED if refusal(t, values, ("trainer",)) is None)


def launchable(**values) -> bool:
    """Whether some trainer launches the plan as it runs: ZeRO over a single
    (context × data) rank is no sharding, evaluated as stage 0 (``phaze.step``)."""
    v = _values(values)
    if v["context_parallel"] * v["data_parallel"] == 1:
        v["zero_stage"] = 0
    return bool(trainers(**v))


# ---------------------------------------------------------------------------
# the trainers' arguments (phaze.launch writes them in this order)
# ---------------------------------------------------------------------------

from ._deepspeed import DS_CONFIG, ds_config  # noqa: E402,F401  (DeepSpeed's ds_config)

#: Where the model-shape (and mixture-of-experts) arguments go in a trainer's list.
MODEL_ARGUMENTS = "<model>"


def _torch_fsdp2(v) -> bool:
    """Megatron-Core's ZeRO 3 without resharding after the forward: torch FSDP2."""
    return v["zero_stage"] == 3 and not v["reshard_after_forward"]


def _zero_megatron(v) -> list:
    # ZeRO 1: the distributed optimizer; 2 and 3: Megatron-FSDP (its checkpoints are
    # fsdp_dtensor: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"); 3
    # without resharding: torch FSDP2 (no gradient-accumulation fusion, torch_dist
    # checkpoints: arguments.py asserts both).
    if v["zero_stage"] == 1:
        return ["--use-distributed-optimizer"]
    if _torch_fsdp2(v):
        return ["--use-torch-fsdp2", "--torch-fsdp2-no-reshard-after-forward",
                "--no-gradient-accumulation-fusion", "--ckpt-format", "torch_dist"]
    if v["zero_stage"] >= 2:
        return ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                "optim_grads" if v["zero_stage"] == 2 else "optim_grads_params",
                "--ckpt-format", "fsdp_dtensor"]
    return []


def _given(flag, value) -> list:
    return [flag, str(value)]


def _recompute_megatron(v) -> list:
    if v["recompute"] == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    mods = v.get("recompute_modules") or "core_attn"
    return (["--recompute-granularity", "selective"] + (
        [] if mods == "core_attn" else ["--recompute-modules", *mods.split(",")])
        if v["recompute"] == "selective" else [])


def _recompute_deepspeed(v) -> list:
    if v["recompute"] == "full":
        return ["--checkpoint-activations", "--deepspeed-activation-checkpointing"]
    return ["--recompute-granularity", "selective"] if v["recompute"] == "selective" else []


def _precision_megatron(v) -> list:
    # fp8: Transformer Engine's hybrid format (E4M3 forward, E5M2 gradients) on top of bf16.
    # (Datatype.megatron: Transformer Engine's recipes on top of bf16)
    return list(_precision.datatype(v["precision"]).megatron)


def _grad_reduce_megatron(v) -> list:
    # Megatron-LM's default: fp32 under --bf16 (forced unless --grad-reduce-in-bf16), the
    # parameters' fp16 under --fp16 (fp32 only with --accumulate-allreduce-grads-in-fp32).
    if v["precision"] == "fp16":
        return ["--accumulate-allreduce-grads-in-fp32"] if v["grad_reduce_dtype"] == "fp32" else []
    return ["--grad-reduce-in-bf16"] if v["grad_reduce_dtype"] == "bf16" else []


#: Each trainer's command-line arguments of a plan, in order: (knob name, writer) pairs,
#: a writer mapping the plan's values ``v`` (plus ``n_layers``, ``moe`` and, for
#: DeepSpeed, ``config_path``) to a list of strings; :data:`MODEL_ARGUMENTS` marks where
#: the model's shape goes (the ``megatron``/``deepspeed`` fields of :data:`KNOBS` name the
#: same arguments).
ARGUMENTS = {
    "megatron-lm": (
        ("tensor_parallel", lambda v: _given("--tensor-model-parallel-size",
                                             v["tensor_parallel"])),
        ("pipeline_parallel", lambda v: _given("--pipeline-model-parallel-size",
                                               v["pipeline_parallel"])),
        ("context_parallel", lambda v: _given("--context-parallel-size", v["context_parallel"])
         if v["context_parallel"] > 1 else []),
        ("expert_parallel", lambda v: _given("--expert-model-parallel-size",
                                             v["expert_parallel"])
         if v["expert_parallel"] > 1 else []),
        ("virtual_stages", lambda v: _given(
            "--num-layers-per-virtual-pipeline-stage",
            (v["n_layers"] + 2 * bool(v["account_for_embedding"]))
            // (v["pipeline_parallel"] * v["virtual_stages"]))
         if v["virtual_stages"] > 1 else []),
        ("account_for_embedding", lambda v: ["--account-for-embedding-in-pipeline-split",
                                             "--account-for-loss-in-pipeline-split"]
         if v["account_for_embedding"] and v["pipeline_parallel"] > 1 else []),
        ("microbatch", lambda v: _given("--micro-batch-size", v["microbatch"])),
        ("global_batch", lambda v: _given("--global-batch-size", v["global_batch"])),
        ("sequence_parallel", lambda v: ["--sequence-parallel"]
         if v["sequence_parallel"] and v["tensor_parallel"] > 1 else []),
        ("recompute", _recompute_megatron),
        ("zero_stage", _zero_megatron),
        ("flash_attention", lambda v: ["--use-flash-attn"] if v["flash_attention"] else []),
        ("loss_kernel", lambda v: list(_LOSS[v["loss_kernel"]].megatron)),
        ("overlap_grad_reduce", lambda v: ["--overlap-grad-reduce"]
         if v["overlap_grad_reduce"] else []),
        ("overlap_param_gather", lambda v: ["--overlap-param-gather"]
         if v["overlap_param_gather"] and v["zero_stage"] >= 1 and v["overlap_grad_reduce"]
         and not _torch_fsdp2(v) else []),
        ("tp_comm_overlap", lambda v: ["--tp-comm-overlap"]
         if v["tp_comm_overlap"] and v["sequence_parallel"] and v["tensor_parallel"] > 1
         else []),
        (MODEL_ARGUMENTS, None),
        ("capacity_factor", lambda v: ["--moe-expert-capacity-factor",
                                       f"{float(v['capacity_factor']):g}"]
         if v["moe"] and v["capacity_factor"] is not None else []),
        ("precision", _precision_megatron),
        ("grad_reduce_dtype", _grad_reduce_megatron),
        ("optimizer", lambda v: ["--optimizer", "muon"] if v["optimizer"] == "muon" else []),
        ("moe_dispatcher", lambda v: ([] if not v["moe"] else
                                      ["--moe-token-dispatcher-type", "flex",
                                       "--moe-enable-deepep"]
                                      if v["moe_dispatcher"] == "deepep" else
                                      ["--moe-token-dispatcher-type", "alltoall"])),
        ("optimizer_state_dtype", lambda v: ["--use-precision-aware-optimizer",
                                             "--exp-avg-dtype", v["optimizer_state_dtype"],
                                             "--exp-avg-sq-dtype", v["optimizer_state_dtype"]]
         if v["optimizer_state_dtype"] != "fp32" else []),
    ),
    "deepspeed": (
        ("tensor_parallel", lambda v: _given("--tensor-model-parallel-size",
                                             v["tensor_parallel"])),
        ("pipeline_parallel", lambda v: _given("--pipeline-model-parallel-size",
                                               v["pipeline_parallel"])
         + (["--no-pipeline-parallel"] if v["pipeline_parallel"] == 1 else [])),
        ("microbatch", lambda v: _given("--micro-batch-size", v["microbatch"])),
        ("global_batch", lambda v: _given("--global-batch-size", v["global_batch"])),
        ("sequence_parallel", lambda v: ["--sequence-parallel"]
         if v["sequence_parallel"] and v["tensor_parallel"] > 1 else []),
        ("recompute", _recompute_deepspeed),
        ("flash_attention", lambda v: ["--use-flash-attn-v2"] if v["flash_attention"] else []),
        (MODEL_ARGUMENTS, None),
        ("precision", lambda v: ["--bf16" if v["precision"] == "bf16" else "--fp16"]),
        ("zero_stage", lambda v: ["--deepspeed", "--deepspeed_config", str(v["config_path"]),
                                  "--zero-stage", str(v["zero_stage"])]),
    ),
}


# torchtitan v0.2.0's job-config keys (phaze.plan._torchtitan says which code each was
# checked against): ("section.key", value) pairs.

def _tt_data_parallel(v) -> list:
    # ZeRO 3: FSDP2 shards over d (and the cp ranks); ZeRO 0: DDP replicas.
    sharded = v["zero_stage"] == 3
    return [("parallelism.data_parallel_replicate_degree", 1 if sharded else v["data_parallel"]),
            ("parallelism.data_parallel_shard_degree", v["data_parallel"] if sharded else 1)]


def _tt_microbatch(v) -> list:
    if v["pipeline_parallel"] > 1:
        per = v.get("pipeline_microbatches") or _microbatches(v)  # one schedule's
        return [("training.local_batch_size", per * v["microbatch"]),
                ("parallelism.pipeline_parallel_microbatch_size", v["microbatch"])]
    return [("training.local_batch_size", v["microbatch"])]


def _uneven_remainder_first(v) -> int:
    """Chunks the remainder_first split gives one more unit (0: none, or another split)."""
    return (_tt_units(v) % (v["pipeline_parallel"] * v["virtual_stages"])
            if v["pipeline_parallel"] > 1 and v.get("pipeline_split") == "remainder_first" else 0)


def _tt_pipeline(v) -> list:
    # the embedding counted as a layer (account_for_embedding) is torchtitan's default split:
    # (L + 2)/(p·v) per stage, the first and the last one fewer
    p, stages = v["pipeline_parallel"], v["pipeline_parallel"] * v["virtual_stages"]
    if p == 1:
        return [("parallelism.pipeline_parallel_degree", 1)]
    acct = int(bool(v.get("account_for_embedding")))
    # torchtitan makes ceil(U / layers_per_stage) stages of the U units and gives the
    # remainder to the first (_generate_llm_fqn_per_model_part): ceil(U / (p·v)) per stage
    # (U / (p·v) when they divide; _tt_stages_expressible checks it makes p·v stages)
    return [("parallelism.pipeline_parallel_degree", p),
            ("parallelism.pipeline_parallel_layers_per_stage", -(-_tt_units(v) // stages)),
            ("parallelism.pipeline_parallel_first_stage_less_layers", acct),
            ("parallelism.pipeline_parallel_last_stage_less_layers", acct)]


def _tt_async_tp(v) -> bool:
    # Megatron-Core's --tp-comm-overlap knob, when the plan has one, is torchtitan's async TP.
    return bool(v.get("tp_comm_overlap", False)) and v["tensor_parallel"] > 1


def _tt_tensor_parallel(v) -> list:
    return [("parallelism.tensor_parallel_degree", v["tensor_parallel"]),
            ("parallelism.enable_async_tensor_parallel", _tt_async_tp(v)),
            ("compile.enable", _tt_async_tp(v))]


def _tt_recompute(v) -> list:
    if v["recompute"] == "op":   # torchtitan's own per-op policy
        return [("activation_checkpoint.mode", "selective"),
                ("activation_checkpoint.selective_ac_option", "op")]
    out = [("activation_checkpoint.mode", v["recompute"])]
    if v["recompute"] == "selective":
        out.append(("activation_checkpoint.selective_ac_option", "op"))
    return out


def _tt_precision(v) -> list:
    out = [("training.mixed_precision_param", "bfloat16")]
    converter = _precision.datatype(v["precision"]).torchtitan
    if not converter:
        return out
    kind, recipe = converter
    return out + [("model.converters", [f"quantize.linear.{kind}"]),
                  (f"quantize.linear.{kind}.recipe_name", recipe)]


def _tt_expert(v) -> list:
    if v["expert_parallel"] == 1:
        return []
    # phaze's expert-tensor parallel width is t (Megatron-Core's), torchtitan's etp = tp.
    return [("parallelism.expert_parallel_degree", v["expert_parallel"]),
            ("parallelism.expert_tensor_parallel_degree", v["tensor_parallel"])]


#: torchtitan's job-config keys of a plan, in order: (knob name, writer) pairs, each
#: writer mapping the plan's values ``v`` (plus ``n_layers``) to ("section.key", value)
#: pairs, the keys the knob's ``torchtitan`` field names; :data:`MODEL` marks where the
#: model's name, flavor and sequence length go.
TORCHTITAN_ARGUMENTS = (
    ("<model>", None),
    ("precision", _tt_precision),
    ("microbatch", _tt_microbatch),
    ("global_batch", lambda v: [("training.global_batch_size", v["global_batch"])]),
    ("grad_reduce_dtype", lambda v: [("training.mixed_precision_reduce", "float32")]),
    ("data_parallel", _tt_data_parallel),
    ("reshard_after_forward", lambda v: [("parallelism.fsdp_reshard_after_forward",
                                          "always" if v["reshard_after_forward"] else "never")]
     if v["zero_stage"] == 3 else []),
    ("tensor_parallel", _tt_tensor_parallel),
    ("pipeline_parallel", _tt_pipeline),
    ("virtual_stages", lambda v: [("parallelism.pipeline_parallel_schedule",
                                   "Interleaved1F1B" if v["virtual_stages"] > 1 else "1F1B")]
     if v["pipeline_parallel"] > 1 else []),
    ("context_parallel", lambda v: [("parallelism.context_parallel_degree",
                                     v["context_parallel"])]),
    ("expert_parallel", _tt_expert),
    ("recompute", _tt_recompute),
)
ARGUMENTS["torchtitan"] = TORCHTITAN_ARGUMENTS


def torchtitan_notes(v) -> list:
    """What torchtitan runs differently from the plan as priced, one sentence each."""
    out = []
    if v["tensor_parallel"] > 1 and not v["sequence_parallel"]:
        out.append("torchtitan's tensor parallelism always shards the norms over the "
                   "sequence (SequenceParallel): the plan was priced without it")
    if not v["flash_attention"]:
        out.append("torchtitan always runs fused attention (scaled_dot_product_attention): "
                   "the plan was priced with materialised scores")
    if v["recompute"] == "selective":
        out.append("phaze's selective recomputation (Megatron's core attention) is written "
                   "as torchtitan's per-op selective checkpointing, its nearest policy")
    return out


def environment(trainer: str, values: dict) -> list:
    """The environment a trainer's launch needs for the plan ``values``: (name, value)
    pairs, value None meaning "unset". Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1
    for tensor or context parallelism before Blackwell (one stream keeps the
    communication kernels in order; on Blackwell it is allowed, not required) unless
    FSDP runs, which asserts it is not 1 (megatron/training/arguments.py at d98e8a6)."""
    v = _values(values)
    if trainer not in ("megatron-lm", "megatron"):
        return []
    if v["zero_stage"] >= 2:
        return [("CUDA_DEVICE_MAX_CONNECTIONS", None)]
    if v["tensor_parallel"] > 1 or v["context_parallel"] > 1:
        return [("CUDA_DEVICE_MAX_CONNECTIONS", "1")]
    return []


#: The ZeRO-stage knob, the ranks it shards over, and the knobs the search's plan set
#: enumerates per plan (``phaze.step``): what ``_launchers.launched_mask`` reads.
SHARDING = ("zero_stage", ("context_parallel", "data_parallel"))
ENUMERATED = ("zero_stage", "pipeline_parallel", "data_parallel", "context_parallel",
              "expert_parallel", "tensor_parallel", "virtual_stages", "overlap_grad_reduce")


def search_contexts(name, value) -> list:
    """Where the search's plan set holds a plan of knob ``name`` at ``value`` that a
    single-knob test must check (``phaze.step``'s enumeration): interleaving only beside
    a pipeline; ZeRO 3 at p = 1 and, where torchtitan's FSDP2 takes it, beside a pipeline
    (ZeRO 2 never beside one); every other value at the default plan."""
    if name == "virtual_stages" and value > 1:
        return [{"pipeline_parallel": 2}]
    if name == "zero_stage" and value == 3:
        return [{}, {"pipeline_parallel": 2, "data_parallel": 2}]
    return [{}]


def pipeline_chunks(values: dict) -> int:
    """Model chunks per pipeline stage of the plan ``values`` (v; 1: plain 1F1B)."""
    return int(_values(values)["virtual_stages"])


def layer_graph_keywords(values: dict, tensor_parallel: int, moe: bool) -> dict:
    """``phaze.graph.build_layers``' keywords of the plan ``values`` as the step model
    builds its layers (Megatron's kernels; sequence parallelism at t > 1 only, always for
    a mixture of experts there; the datatype, flash attention, expert and context
    parallel widths, the capacity factor and the loss kernel)."""
    v = _values(values)
    return dict(sequence_parallel=tensor_parallel > 1 and (bool(v["sequence_parallel"]) or moe),
                flash_attention=bool(v["flash_attention"]), kernels="megatron",
                dtype=v["precision"], expert_parallel=int(v["expert_parallel"]),
                context_parallel=int(v["context_parallel"]),
                capacity_factor=v["capacity_factor"], loss_kernel=v["loss_kernel"])


def trainer_arguments(trainer: str, values: dict, model_arguments: list) -> list:
    """The command-line arguments of ``trainer`` for the plan ``values`` (module
    docstring of ``phaze.launch``), with ``model_arguments`` at :data:`MODEL_ARGUMENTS`."""
    out = []
    for name, write in ARGUMENTS[trainer]:
        out += model_arguments if name == MODEL_ARGUMENTS else write(values)
    return out


_EXPERT = "expert_parallel"


def model_expert_grid(model, grid):
    """The expert-parallel widths searched for ``model``: a dense model has only 1; a
    mixture of experts the grid's values that divide its routed experts (None: every
    divisor, ``phaze.step.best_plans``' default)."""
    if not model.is_moe:
        return (1,)
    if grid is None:
        return None
    return tuple(e for e in grid if model.n_experts % e == 0)


def check_expert_grid(models, grids) -> None:
    """Every mixture of experts must keep one expert-parallel width of the search's grid
    (``grids``: the checked strategy grids, or that grid alone): one sentence naming the
    model and its divisors otherwise."""
    grid = grids.get(_EXPERT) if isinstance(grids, dict) else grids
    for m in models:
        if m.is_moe and grid is not None and not model_expert_grid(m, grid):
            allowed = [e for e in range(1, m.n_experts + 1) if m.n_experts % e == 0]
            raise ValueError(f"{_EXPERT}: no value of {','.join(map(str, grid))} divides "
                             f"the {m.n_experts} routed experts of {m.name}; allowed: "
                             f"{', '.join(map(str, allowed))}")
