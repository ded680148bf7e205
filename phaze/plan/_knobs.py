"""The knob table of a training plan, the :class:`Plan` record, the launchability rules
and the trainers' argument writers (``phaze.plan``'s docstring says what reads them)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import precision as _precision
from ._knob import Knob, Rule, Trainer


_MEGATRON_CORE = "Megatron-Core"

#: The knob table, in :class:`Plan` field order (the order of ``training_step``'s plan).
KNOBS = (
    Knob("tensor_parallel", int, 1, "a positive integer", minimum=1, flags=("--tp",),
         required=True, devices_factor=True, file_key="t", file_rank=0, metavar="TP",
         search_metavar="TP",
         help="tensor-parallel width t", search="grid", search_default="1,2,4,8",
         search_help="tensor-parallel widths (default 1,2,4,8)",
         megatron="--tensor-model-parallel-size", deepspeed="--tensor-model-parallel-size",
         torchtitan="--parallelism.tensor_parallel_degree (--parallelism."
                    "enable_async_tensor_parallel with --compile.enable: async TP)"),
    Knob("pipeline_parallel", int, 1, "a positive integer", minimum=1, flags=("--pp",),
         required=True, devices_factor=True, file_key="p", file_rank=1, metavar="PP",
         help="pipeline stages p", megatron="--pipeline-model-parallel-size",
         deepspeed="--pipeline-model-parallel-size (p = 1: --no-pipeline-parallel)",
         torchtitan="--parallelism.pipeline_parallel_degree (p > 1: --parallelism."
                    "pipeline_parallel_layers_per_stage L/(p·v), --parallelism."
                    "pipeline_parallel_first_stage_less_layers 0, --parallelism."
                    "pipeline_parallel_last_stage_less_layers 0)"),
    Knob("data_parallel", int, 1, "a positive integer", minimum=1, flags=("--dp",),
         required=True, devices_factor=True, file_key="d", file_rank=2, metavar="DP",
         help="data-parallel degree d",
         megatron="(the world size / (t·cp·p); --global-batch-size / --micro-batch-size)",
         deepspeed="(the world size / (t·p); ds_config train_batch_size)",
         torchtitan="--parallelism.data_parallel_shard_degree (ZeRO 3, FSDP2) | "
                    "--parallelism.data_parallel_replicate_degree (ZeRO 0, DDP)"),
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
    Knob("capacity_factor", float, None, "None or a positive number", optional=True,
         flags=("--capacity-factor",), metavar="F", study=None, calibrated_only=True,
         study_lacks="mixture-of-experts routing",
         help="MoE expert capacity factor (tokens dropped or padded to it; default: balanced "
              "routing; calibrated model only)",
         search="one", search_metavar="F",
         search_help="MoE expert capacity factor (default: balanced routing)",
         grid_rank=8, title="MoE capacity factor",
         megatron="--moe-expert-capacity-factor"),
    Knob("microbatch", int, 1, "a positive integer", minimum=1, flags=("--microbatch",),
         help=None, evaluate_default=1, file_key="microbatch", file_rank=3, search="grid",
         search_default="1,2,4,8",
         search_help="microbatch sizes (default 1,2,4,8)",
         megatron="--micro-batch-size", deepspeed="--micro-batch-size (ds_config "
         "train_micro_batch_size_per_gpu)", torchtitan="--training.local_batch_size (p > 1: "
         "--parallelism.pipeline_parallel_microbatch_size, the local batch B/d)"),
    Knob("global_batch", int, 4096, "a positive integer", minimum=1,
         flags=("--global-batch",), help=None, search="one", search_default=4096,
         evaluate_default=4096, file_key="global_batch", file_rank=4,
         search_help="samples per batch (default 4096)",
         megatron="--global-batch-size", deepspeed="--global-batch-size (ds_config "
         "train_batch_size)", torchtitan="--training.global_batch_size"),
    Knob("recompute", str, "none", "one of none, selective, full, op",
         choices=("none", "selective", "full", "op"), flags=("--recompute",), const="full",
         file_key="recompute", file_rank=6,
         help="activation recomputation: none (the default when absent), selective "
              "(attention core only; calibrated model only), full (bare --recompute) or op "
              "(torchtitan's per-op selective checkpointing: the elementwise operators and "
              "every second matmul re-run; calibrated model only, not searched)",
         search="grid", search_metavar="MODES",
         search_help="activation recomputation modes, comma-separated: none, selective, full "
                     "(default all three; --study: none,full); off = none, on = full, both "
                     "= none,full",
         column=True, column_rank=0, short="rc", width=9, phrase="recompute {}",
         legend="activation recomputation mode: none; selective (the attention core re-runs\n"
                "before its backward, Korthikanti et al. 2022); full (every transformer layer\n"
                "re-runs its forward before the backward: least activation memory). With\n"
                "--study: full = every stage but the last re-runs its forward, none = not",
         grid_rank=0, title="recompute",
         megatron="--recompute-granularity full|selective (full: --recompute-method uniform "
                  "--recompute-num-layers 1)",
         deepspeed="--checkpoint-activations --deepspeed-activation-checkpointing (full); "
                   "--recompute-granularity selective",
         torchtitan="--activation_checkpoint.mode none|selective|full (selective: "
                    "--activation_checkpoint.selective_ac_option op)"),
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
    # Source: Megatron-Core megatron/training/arguments.py (--account-for-embedding-in-
    # pipeline-split, --account-for-loss-in-pipeline-split: the embedding and the loss
    # each count as one layer when the layers are split over the (virtual) stages;
    # megatron/core/transformer/transformer_block.py get_num_layers_to_build).
    Knob("account_for_embedding", bool, False, "True or False",
         flags=("--account-for-embedding",), study=False, calibrated_only=True,
         file_key="account_for_embedding", file_rank=20, file_optional=True,
         trace_values=(False,),
         trace_note="phaze trace draws even pipeline splits only",
         help="split the layers over the pipeline stages counting the embedding and the "
              "loss as one layer each (Megatron-Core's --account-for-embedding-in-pipeline-"
              "split --account-for-loss-in-pipeline-split): (L + 2)/(p·v) per chunk, the "
              "first and last one fewer, e.g. Llama 3 405B's 126 layers over 16 stages "
              "(calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="pipeline splits counting the embedding and loss as layers: off, on or "
                     "off,on (default both; on adds the p that divide L + 2, not L)",
         column=True, column_rank=12, short="ae", width=3,
         legend="embedding and loss counted as pipeline layers ((L + 2)/(p·v) per chunk, the\n"
                "first and last one fewer): on / off",
         grid_rank=20, title="embedding in pipeline split",
         megatron="--account-for-embedding-in-pipeline-split "
                  "--account-for-loss-in-pipeline-split",
         deepspeed="",
         torchtitan="--parallelism.pipeline_parallel_first_stage_less_layers 1 "
                    "--parallelism.pipeline_parallel_last_stage_less_layers 1"),
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
    Knob("precision", str, "bf16", "one of " + ", ".join(_precision.DTYPES),
         choices=_precision.DTYPES,
         flags=("--dtype", "--precision"), study="bf16", calibrated_only=True,
         study_lacks="precision choice", file_key="precision", file_rank=8,
         help="training datatype (default bf16; fp8 = Transformer Engine's delayed scaling, "
              "fp8-current (TE's current scaling), fp8-tensorwise / fp8-rowwise (torchao's), "
              "fp8-blockwise, mxfp8 / mxfp6 / mxfp4, nvfp4: "
              "the linear layers' GEMMs at the chip's rate for the type, their quantisation "
              "priced; a chip without the type is refused; calibrated model only; "
              "--precision is the same flag)",
         search="one",
         search_help="training datatype of the calibrated model (default bf16; fp8: the "
                     "linear layers' GEMMs in fp8 at the chip's fp8 rate, master weights and "
                     "optimizer state fp32; --precision is the same flag)",
         grid_rank=9, title="precision",
         megatron="--bf16 | --fp16 | --bf16 --fp8-format hybrid [--fp8-recipe tensorwise "
                  "(fp8-current)] | --fp8-format e4m3 --fp8-recipe blockwise | mxfp8 | --bf16 "
                  "--fp4-format e2m1 --fp4-recipe nvfp4",
         deepspeed="--bf16 | --fp16 (ds_config bf16.enabled / fp16.enabled)",
         torchtitan="--training.mixed_precision_param bfloat16 (fp8-tensorwise / "
                    "fp8-rowwise: --model.converters quantize.linear.float8 with "
                    "--quantize.linear.float8.recipe_name; mxfp8: quantize.linear.mx)"),
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
                     "plans are those Megatron-LM launches)",
         column=True, column_rank=3, short="zero", width=4,
         legend="ZeRO stage over the d data-parallel ranks (1 = Megatron-LM's distributed\n"
                "optimizer: optimizer state sharded; 2 also gradients; 3 also weights)",
         grid_rank=4, title="ZeRO",
         megatron="--use-distributed-optimizer (stage 1)",
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
    # Sources (docs/fidelity-sources.md, "Sharded data parallelism and overlap (issue
    # 25)"): Megatron-Core megatron/core/distributed/distributed_data_parallel_config.py
    # (overlap_param_gather: the distributed optimizer's parameter all-gathers overlapped
    # with the next forward, bucket by bucket); PyTorch FSDP2 fully_shard (implicit forward
    # prefetch of the next module's all-gather, explicit backward prefetch;
    # reshard_after_forward) and DeepSpeed ZeRO-3 (stage3_prefetch_bucket_size).
    Knob("overlap_param_gather", bool, False, "True or False",
         flags=("--overlap-param-gather",), study=False, calibrated_only=True,
         file_key="overlap_param_gather", file_rank=13, file_optional=True,
         help="overlap the parameter all-gathers with compute: ZeRO-1/2 (Megatron's "
              "distributed optimizer) the gather after the optimizer with the next forward; "
              "ZeRO-3/FSDP each layer's gather prefetched during the previous layer's "
              "forward or backward (calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="overlap the parameter all-gathers with compute: off, on or off,on "
                     "(default both; overlap never costs time, so on wins where allowed)",
         column=True, column_rank=8, short="opg", width=3,
         legend="overlap-param-gather: parameter all-gathers overlap compute (ZeRO-1/2: "
                "with the next\nforward; ZeRO-3/FSDP: prefetched one layer ahead) (on / off)",
         grid_rank=11, title="overlap param gather",
         megatron="--overlap-param-gather (with --use-distributed-optimizer "
                  "--overlap-grad-reduce)",
         deepspeed="ds_config zero_optimization.overlap_comm (ZeRO-3: prefetch of "
                   "stage3_prefetch_bucket_size)",
         torchtitan="(FSDP2 prefetches the next module's all-gather by default)"),
    Knob("reshard_after_forward", bool, True, "True or False",
         flags=("--reshard-after-forward",), study=True, calibrated_only=True,
         file_key="reshard_after_forward", file_rank=14, file_optional=True,
         help="ZeRO-3/FSDP: free each layer's gathered parameters after its forward and "
              "gather them again for its backward (default on, FSDP's FULL_SHARD; off: "
              "SHARD_GRAD_OP, the stage's parameters stay gathered from forward to backward; "
              "calibrated model only)",
         search="one", search_metavar="on|off",
         search_help="ZeRO-3/FSDP: reshard the parameters after the forward (default on)",
         grid_rank=12, title="reshard after forward",
         megatron="(Megatron-FSDP: --data-parallel-sharding-strategy optim_grads_params)",
         deepspeed="(ZeRO-3 always reshards: stage3_max_reuse_distance)",
         torchtitan="--parallelism.fsdp_reshard_after_forward always|never"),
    # Sources (docs/fidelity-sources.md, "Tensor-parallel communication overlap (issue 25)"):
    # Megatron-LM megatron/training/arguments.py (--tp-comm-overlap: asserts
    # --sequence-parallel), Transformer Engine transformer_engine/pytorch/module/base.py
    # (initialize_ub: ring_exchange qkv/fc1 fprop and proj/fc2 dgrad, pipeline proj/fc2
    # fprop in num_splits = 4, bulk qkv/fc1 dgrad and wgrad); torchtitan
    # --parallelism.enable_async_tensor_parallel (torch micro-pipeline TP,
    # torch/distributed/_symmetric_memory: _fused_all_gather_matmul /
    # _fused_matmul_reduce_scatter, one chunk per rank).
    Knob("tp_comm_overlap", bool, False, "True or False",
         flags=("--tp-comm-overlap",), study=False, calibrated_only=True,
         noop_note="no-op at t = 1", file_key="tp_comm_overlap", file_rank=15,
         file_optional=True,
         help="overlap sequence parallelism's all-gathers and reduce-scatters with the GEMMs "
              "beside them, split into chunks (Megatron-Core --tp-comm-overlap, Transformer "
              "Engine userbuffers; torchtitan's async TP); needs sequence parallelism at "
              "t > 1 (calibrated model only)",
         search="grid", search_metavar="off,on", grid_none="both",
         search_help="tensor-parallel communication overlap: off, on or off,on (default "
                     "both; overlap never costs time, so on wins where sequence parallelism "
                     "runs)",
         column=True, column_rank=11, short="tpo", width=3,
         legend="tp-comm-overlap: sequence parallelism's collectives overlap their GEMMs "
                "(on / off)",
         grid_rank=13, title="tensor-parallel comm overlap",
         megatron="--tp-comm-overlap (with --sequence-parallel; Transformer Engine "
                  "userbuffers)",
         torchtitan="--parallelism.enable_async_tensor_parallel (with --compile)"),
    # Sources (docs/fidelity-sources.md, "Gradient-reduction datatype"): Megatron-LM
    # d98e8a6 megatron/core/distributed/param_and_grad_buffer.py (grad_dtype = torch.float
    # if grad_reduce_in_fp32 else param.dtype), megatron/training/arguments.py
    # (--grad-reduce-in-bf16, --accumulate-allreduce-grads-in-fp32; --bf16 forces fp32
    # unless --grad-reduce-in-bf16), megatron/training/training.py (grad_reduce_in_fp32 =
    # args.accumulate_allreduce_grads_in_fp32); DeepSpeed edaa722 deepspeed/runtime/engine.py
    # (communication_data_type: the config's, else fp16/bf16 as trained);
    # torchtitan b5bcd76 torchtitan/config/configs.py (mixed_precision_reduce: "float32").
    Knob("grad_reduce_dtype", str, "fp32", "one of fp32, bf16, fp16",
         choices=("fp32", "bf16", "fp16"), flags=("--grad-reduce-dtype",), study="fp32",
         calibrated_only=True, study_lacks="gradient-reduction datatype choice",
         file_key="grad_reduce_dtype", file_rank=23, file_optional=True,
         help="datatype of the data-parallel gradient reduction and of the gradient buffer "
              "(default fp32: fp32 main gradients, 4 B/param; bf16 or fp16: 2 B/param, as "
              "Megatron-Core's grad_reduce_in_fp32=False; calibrated model only)",
         search="one",
         search_help="datatype of the data-parallel gradient reduction and gradient buffer "
                     "(default fp32; bf16, fp16: half the bytes; Megatron-LM reduces in "
                     "fp32 or the parameters' datatype)",
         grid_rank=10, title="gradient reduction",
         megatron="Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32; --bf16: "
                  "fp32 by default, bf16 with --grad-reduce-in-bf16; --fp16: fp16 by "
                  "default, fp32 with --accumulate-allreduce-grads-in-fp32",
         deepspeed="ds_config communication_data_type fp32|bf16|fp16 (absent: the training "
                   "datatype)",
         torchtitan="--training.mixed_precision_reduce float32 (FSDP2 "
                    "MixedPrecisionPolicy.reduce_dtype; float32 its only value)"),
)

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


def check_keywords(function: str, given: dict, allowed, required=()) -> None:
    """Refuse a keyword outside ``allowed`` (``TypeError``, as Python's own for a bad
    keyword) and a missing ``required`` one, naming ``function``."""
    for key in given:
        if key not in allowed:
            raise TypeError(f"{function}() got an unexpected keyword argument {key!r}")
    for key in required:
        if key not in given:
            raise TypeError(f"{function}() missing required keyword-only argument: {key!r}")


def devices_of(values: dict) -> int:
    """GPUs of a plan: the product of its ``devices_factor`` sizes (t·cp·p·d); a size
    absent, None or 0 counts as 1."""
    out = 1
    for k in KNOBS:
        if k.devices_factor and values.get(k.name):
            out *= int(values[k.name])
    return out


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
#: The numpy record of a :class:`Plan` (strings as fixed-width unicode, a capacity factor
#: of None as NaN).
PLAN_RECORD_DTYPE = np.dtype([(k.name, _NUMPY.get(k.type) or f"<U{max(map(len, k.choices))}")
                              for k in KNOBS])


# ---------------------------------------------------------------------------
# trainers and the launchability rules
# ---------------------------------------------------------------------------

#: The trainers, in the order ``trainers`` lists them (torchtitan judged by its "trainer"
#: rules: FSDP2 = ZeRO 3 with any pipeline, tensor and context parallelism).
TRAINERS = (Trainer("megatron-lm", "Megatron-LM", "megatron", "megatron"),
            Trainer("deepspeed", "DeepSpeed", "deepspeed", "deepspeed"),
            Trainer("torchtitan", "torchtitan", "torchtitan", "torchtitan"))
_JUDGED = ("megatron-lm", "deepspeed", "torchtitan")


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
    Rule("torchtitan", "emit", ("pipeline_parallel", "virtual_stages"),
         lambda v: v["pipeline_parallel"] > 1 and not v["account_for_embedding"]
         and v["n_layers"] % (v["pipeline_parallel"] * v["virtual_stages"]),
         lambda v: f"the torchtitan stages written here hold {v['n_layers']} / (p × v) "
                   f"transformer layers each, and {v['n_layers']} is not divisible by p × v = "
                   f"{v['pipeline_parallel'] * v['virtual_stages']}"),
    Rule("torchtitan", "emit", ("expert_parallel", "zero_stage", "context_parallel"),
         lambda v: v["expert_parallel"] > 1 and (v["zero_stage"] != 3
                                                 or v["expert_parallel"] % v["context_parallel"]),
         lambda v: f"torchtitan's expert parallelism takes its ranks from FSDP2's shard and "
                   f"context-parallel ranks: it needs ZeRO 3 and ep = {v['expert_parallel']} "
                   f"divisible by cp = {v['context_parallel']}"),
)


#: The datatype of the model parameters (and so of Megatron-Core's gradient buffer when it
#: does not reduce in fp32) under each training datatype: fp8 trains on bf16 parameters.
PARAMETER_DTYPE = {d: ("fp16" if d == "fp16" else "bf16") for d in _precision.DTYPES}


def _microbatches(v) -> int:
    """Microbatches per pipeline per batch: B / (b·d)."""
    return v["global_batch"] // (v["microbatch"] * v["data_parallel"])


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
    return ["--recompute-granularity", "selective"] if v["recompute"] == "selective" else []


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


# torchtitan's job-config keys (phaze.plan._torchtitan writes them)
from ._torchtitan import TORCHTITAN_ARGUMENTS, torchtitan_notes  # noqa: E402,F401
ARGUMENTS["torchtitan"] = TORCHTITAN_ARGUMENTS


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
