"""Rows of the knob table (``phaze.plan._knobs.KNOBS``) that read no other knob: the
placement sizes, batch, recomputation, datatypes and the overlap and split switches,
kept here so that the table and its rules stay within one module's size. ``_knobs``
assembles :data:`KNOBS` from these rows and its own, in :class:`Plan` field order."""
from __future__ import annotations

from .. import precision as _precision
from ..arch import ATTENTION_KERNELS
from ..graph import (DEFAULT_LOSS_KERNEL, DEFAULT_RECOMPUTE_MODULES, LOSS_KERNEL_NAMES,
                     RECOMPUTE_MODULES, canonical_modules)
from ._knob import Knob, Rule

#: The rows by knob name.
_ROWS = {}

_ROWS["tensor_parallel"] = Knob(
    "tensor_parallel", int, 1, "a positive integer", minimum=1, flags=("--tp",),
    required=True, devices_factor=True, file_key="t", file_rank=0, metavar="TP",
    search_metavar="TP",
    help="tensor-parallel width t", search="grid", search_default="1,2,4,8",
    search_help="tensor-parallel widths (default 1,2,4,8)",
    megatron="--tensor-model-parallel-size", deepspeed="--tensor-model-parallel-size",
    torchtitan="--parallelism.tensor_parallel_degree (--parallelism."
               "enable_async_tensor_parallel with --compile.enable: async TP)")

_ROWS["pipeline_parallel"] = Knob(
    "pipeline_parallel", int, 1, "a positive integer", minimum=1, flags=("--pp",),
    required=True, devices_factor=True, file_key="p", file_rank=1, metavar="PP",
    help="pipeline stages p", megatron="--pipeline-model-parallel-size",
    deepspeed="--pipeline-model-parallel-size (p = 1: --no-pipeline-parallel)",
    torchtitan="--parallelism.pipeline_parallel_degree (p > 1: --parallelism."
               "pipeline_parallel_layers_per_stage L/(p·v), --parallelism."
               "pipeline_parallel_first_stage_less_layers 0, --parallelism."
               "pipeline_parallel_last_stage_less_layers 0)")

_ROWS["data_parallel"] = Knob(
    "data_parallel", int, 1, "a positive integer", minimum=1, flags=("--dp",),
    required=True, devices_factor=True, file_key="d", file_rank=2, metavar="DP",
    help="data-parallel degree d",
    megatron="(the world size / (t·cp·p); --global-batch-size / --micro-batch-size)",
    deepspeed="(the world size / (t·p); ds_config train_batch_size)",
    torchtitan="--parallelism.data_parallel_shard_degree (ZeRO 3, FSDP2) | "
               "--parallelism.data_parallel_replicate_degree (ZeRO 0, DDP)")

_ROWS["capacity_factor"] = Knob(
    "capacity_factor", float, None, "None or a positive number", optional=True,
    flags=("--capacity-factor",), metavar="F", study=None, calibrated_only=True,
    study_lacks="mixture-of-experts routing",
    help="MoE expert capacity factor (tokens dropped or padded to it; default: balanced "
         "routing; calibrated model only)",
    search="one", search_metavar="F",
    search_help="MoE expert capacity factor (default: balanced routing)",
    grid_rank=8, title="MoE capacity factor",
    megatron="--moe-expert-capacity-factor")

_ROWS["microbatch"] = Knob(
    "microbatch", int, 1, "a positive integer", minimum=1, flags=("--microbatch",),
    help=None, evaluate_default=1, file_key="microbatch", file_rank=3, search="grid",
    search_default="1,2,4,8",
    search_help="microbatch sizes (default 1,2,4,8)",
    megatron="--micro-batch-size", deepspeed="--micro-batch-size (ds_config "
    "train_micro_batch_size_per_gpu)", torchtitan="--training.local_batch_size (p > 1: "
    "--parallelism.pipeline_parallel_microbatch_size, the local batch B/d)")

_ROWS["global_batch"] = Knob(
    "global_batch", int, 4096, "a positive integer", minimum=1,
    flags=("--global-batch",), help=None, search="one", search_default=4096,
    evaluate_default=4096, file_key="global_batch", file_rank=4,
    search_help="samples per batch (default 4096)",
    megatron="--global-batch-size", deepspeed="--global-batch-size (ds_config "
    "train_batch_size)", torchtitan="--training.global_batch_size")

_ROWS["recompute"] = Knob(
    "recompute", str, "none", "one of none, selective, full, op",
    choices=("none", "selective", "full", "op"), flags=("--recompute",), const="full",
    file_key="recompute", file_rank=6,
    help="activation recomputation: none (the default when absent), selective "
         "(the attention core, with flash attention the fused kernel's forward, re-runs: "
         "Megatron-Core's core_attn; calibrated model only), full (bare --recompute) or op "
         "(torchtitan's per-op selective checkpointing: the elementwise operators and "
         "every second matmul re-run; calibrated model only, not searched)",
    search="grid", search_metavar="MODES",
    search_help="activation recomputation modes, comma-separated: none, selective, full "
                "(default all three; --study: none,full); off = none, on = full, both "
                "= none,full",
    column=True, column_rank=0, short="rc", width=9, phrase="recompute {}",
    legend="activation recomputation mode: none; selective (the attention core re-runs\n"
           "before its backward, Korthikanti et al. 2022; with flash attention the fused\n"
           "kernel's forward, as Megatron-Core checkpoints it); full (every transformer layer\n"
           "re-runs its forward before the backward: least activation memory). With\n"
           "--study: full = every stage but the last re-runs its forward, none = not",
    grid_rank=0, title="recompute",
    megatron="--recompute-granularity full|selective (full: --recompute-method uniform "
             "--recompute-num-layers 1)",
    deepspeed="--checkpoint-activations --deepspeed-activation-checkpointing (full); "
              "--recompute-granularity selective",
    torchtitan="--activation_checkpoint.mode none|selective|full (selective: "
               "--activation_checkpoint.selective_ac_option op)")

# Sources: Megatron-Core megatron/core/transformer/transformer_config.py
# (recompute_modules, default ["core_attn"] under selective granularity),
# megatron/training/arguments.py (--recompute-modules, nargs *); phaze/graph/_recompute.py;
# docs/fidelity-sources.md §28.
_ROWS["recompute_modules"] = Knob(
    "recompute_modules", str, DEFAULT_RECOMPUTE_MODULES,
    "a non-empty set of " + ", ".join(RECOMPUTE_MODULES), normalize=canonical_modules,
    flags=("--recompute-modules",), metavar="MODULES", study=DEFAULT_RECOMPUTE_MODULES,
    calibrated_only=True, study_lacks="selective recomputation by module",
    file_key="recompute_modules", file_rank=32, file_optional=True,
    help="what --recompute selective re-runs, Megatron-Core's --recompute-modules: a "
         "comma-separated set of " + ", ".join(RECOMPUTE_MODULES) + " (default core_attn: "
         "the attention core; mlp the dense MLP, moe the whole MoE layer with its "
         "all-to-alls, shared_experts, moe_act the experts' activation, layernorm the "
         "separate norms, mla_up_proj MLA's up-projections and rotary embedding); ignored "
         "by the other modes (calibrated model only)",
    search="one", search_metavar="MODULES", grid_rank=25, title="recompute modules",
    search_help="what selective recomputation re-runs (Megatron-Core's --recompute-modules, "
                "comma-separated; default core_attn)",
    megatron="--recompute-modules (with --recompute-granularity selective)",
    deepspeed="", torchtitan="")

# Source: Megatron-Core megatron/training/arguments.py (--account-for-embedding-in-
# pipeline-split, --account-for-loss-in-pipeline-split: the embedding and the loss
# each count as one layer when the layers are split over the (virtual) stages;
# megatron/core/transformer/transformer_block.py get_num_layers_to_build).
_ROWS["account_for_embedding"] = Knob(
    "account_for_embedding", bool, False, "True or False",
    flags=("--account-for-embedding",), study=False, calibrated_only=True,
    file_key="account_for_embedding", file_rank=20, file_optional=True,
    trace_values=(False,), pipeline_only=True,
    trace_note="phaze trace draws even pipeline splits only (any at p = 1)",
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
               "--parallelism.pipeline_parallel_last_stage_less_layers 1")

# Sources: torchtitan torchtitan/distributed/pipeline_parallel.py
# _generate_llm_fqn_per_model_part (commit b5bcd76: L + first_stage_less_layers +
# last_stage_less_layers units over the stages, the remainder to the first stages); NeMo
# AutoModel nemo_automodel/components/distributed/pipelining/functional.py
# generate_hf_model_fqn_per_model_part (commit 36044ad: the L layers alone, the remainder
# to the first stages); docs/fidelity-sources.md "Uneven pipeline splits".
_ROWS["pipeline_split"] = Knob(
    "pipeline_split", str, "even", "one of even, remainder_first",
    choices=("even", "remainder_first"), flags=("--pipeline-split",), study="even",
    calibrated_only=True, study_lacks="uneven pipeline split", title="pipeline split",
    file_key="pipeline_split", file_rank=27, file_optional=True,
    trace_values=("even",), pipeline_only=True,
    trace_note="phaze trace draws even pipeline splits only (any at p = 1)",
    help="how the layers (with --account-for-embedding the L + 2 units, embedding and "
         "loss one each) are cut into the p·v chunks: even (Megatron-LM: they must divide; "
         "default) or remainder_first (torchtitan's and NeMo AutoModel's: the first "
         "units mod (p·v) chunks hold one more, e.g. DeepSeek-V3's 61 layers over 32 "
         "chunks); calibrated model only",
    megatron="",
    deepspeed="",
    torchtitan="--parallelism.pipeline_parallel_layers_per_stage ceil(units / (p·v))")

# Sources: torchtitan torchtitan/train.py (forward_backward_step once per gradient-
# accumulation step, each running the pipeline schedule over local_batch_size /
# pipeline_parallel_microbatch_size microbatches); NeMo AutoModel
# examples/benchmark/benchmark_recipe.py and examples/benchmarking/benchmark.py (the
# ``for ga_step_idx in range(ga_steps)`` loop, pp_schedule.step per local batch; ga_steps =
# global / (local × dp)); Megatron-LM's schedules run all microbatches of a step in one
# schedule (megatron/core/pipeline_parallel/schedules.py, num_microbatches);
# docs/fidelity-sources.md §10.6 "Pipeline schedules per local batch".
_ROWS["pipeline_microbatches"] = Knob(
    "pipeline_microbatches", int, 0,
    "0 (every microbatch of the step in one pipeline schedule) or a positive integer",
    minimum=0, flags=("--pipeline-microbatches",), metavar="N", study=0,
    calibrated_only=True, study_lacks="pipeline schedules per local batch",
    title="microbatches per pipeline schedule (0: all)",
    file_key="pipeline_microbatches", file_rank=28, file_optional=True,
    trace_values=(0,), pipeline_only=True,
    trace_note="phaze trace draws one pipeline schedule per step only (any at p = 1)",
    help="microbatches one pipeline schedule runs: 0 (default) all B/(b·d) of the step in "
         "one schedule (Megatron-LM), or N dividing them, the schedule, with its fill and "
         "drain, run B/(b·d·N) times (torchtitan and NeMo AutoModel run one schedule per "
         "local batch of N microbatches and accumulate over the rest; calibrated model "
         "only)",
    megatron="",
    deepspeed="",
    torchtitan="--training.local_batch_size N·b (p > 1; gradient accumulation = "
               "B/(N·b·d))")

# Sources: the fused-attention kernels measured on each die (phaze/arch/_attention.py,
# docs/fidelity-sources.md §1.6): the FlashAttention-3 paper's H100 figures (cuDNN,
# FlashAttention-2, FlashAttention-3), the FlashAttention-2 paper's A100 ones, the
# FlashAttention-4 paper's B200 ones (FA4, cuDNN 9.13).
_ROWS["attention_kernel"] = Knob(
    "attention_kernel", str, "chip", "one of " + ", ".join(ATTENTION_KERNELS),
    choices=ATTENTION_KERNELS, flags=("--attention-kernel",), study="chip",
    calibrated_only=True, study_lacks="choice of attention kernel",
    title="attention kernel", file_key="attention_kernel", file_rank=29,
    file_optional=True,
    help="the fused attention kernel the flash-attention operators run: chip (default: the "
         "one the chip's own rates are of, e.g. cuDNN on h100-sxm and h200 as Transformer "
         "Engine runs it, also on b200 and gb200, FlashAttention-2 on a100-80g and "
         "h100-96g), cudnn, fa2 (FlashAttention-2: PyTorch SDPA's flash backend), fa3 "
         "(FlashAttention-3) or fa4 (FlashAttention-4, Blackwell), at their measured rates "
         "on the chip's die; a chip without a measurement of the kernel refuses it "
         "(calibrated model only)",
    megatron="(Transformer Engine's NVTE_FUSED_ATTN / NVTE_FLASH_ATTN)",
    deepspeed="",
    torchtitan="(torch.nn.attention.sdpa_kernel)")

# Sources: Megatron-Core's three loss paths and Transformer Engine's kernels, read in their
# code (phaze/graph/_loss.py; docs/fidelity-sources.md §27).
_ROWS["loss_kernel"] = Knob(
    "loss_kernel", str, DEFAULT_LOSS_KERNEL, "one of " + ", ".join(LOSS_KERNEL_NAMES),
    choices=LOSS_KERNEL_NAMES, flags=("--loss-kernel",), study=DEFAULT_LOSS_KERNEL,
    calibrated_only=True, study_lacks="choice of loss kernel",
    title="loss kernel", file_key="loss_kernel", file_rank=30, file_optional=True,
    help="the head's cross-entropy kernels: native-fused (default: Megatron-Core's "
         "jit-fused loss, 28 B per logit), te (Transformer Engine's Triton kernels, 22 B; "
         "Megatron-LM refuses them since June 2026) or native (Megatron-Core's unfused "
         "default, 52 B): their passes over the logits priced at the HBM rate (calibrated "
         "model only)",
    megatron="--cross-entropy-loss-fusion --cross-entropy-fusion-impl native | te (native: "
             "neither flag)",
    deepspeed="",
    torchtitan="")

_ROWS["precision"] = Knob(
    "precision", str, "bf16", "one of " + ", ".join(_precision.DTYPES),
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
               "--quantize.linear.float8.recipe_name; mxfp8: quantize.linear.mx)")

# Sources (docs/fidelity-sources.md, "Sharded data parallelism and overlap (issue
# 25)"): Megatron-Core megatron/core/distributed/distributed_data_parallel_config.py
# (overlap_param_gather: the distributed optimizer's parameter all-gathers overlapped
# with the next forward, bucket by bucket); PyTorch FSDP2 fully_shard (implicit forward
# prefetch of the next module's all-gather, explicit backward prefetch;
# reshard_after_forward) and DeepSpeed ZeRO-3 (stage3_prefetch_bucket_size).
_ROWS["overlap_param_gather"] = Knob(
    "overlap_param_gather", bool, False, "True or False",
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
    torchtitan="(FSDP2 prefetches the next module's all-gather by default)")

_ROWS["reshard_after_forward"] = Knob(
    "reshard_after_forward", bool, True, "True or False",
    flags=("--reshard-after-forward",), study=True, calibrated_only=True,
    file_key="reshard_after_forward", file_rank=14, file_optional=True,
    help="ZeRO-3/FSDP: free each layer's gathered parameters after its forward and "
         "gather them again for its backward (default on, FSDP's FULL_SHARD; off: "
         "SHARD_GRAD_OP, the stage's parameters stay gathered from forward to backward; "
         "calibrated model only)",
    search="one", search_metavar="on|off",
    search_help="ZeRO-3/FSDP: reshard the parameters after the forward (default on)",
    grid_rank=12, title="reshard after forward",
    megatron="(on: Megatron-FSDP --data-parallel-sharding-strategy optim_grads_params; "
             "off: torch FSDP2 --torch-fsdp2-no-reshard-after-forward)",
    deepspeed="(ZeRO-3 always reshards: stage3_max_reuse_distance)",
    torchtitan="--parallelism.fsdp_reshard_after_forward always|never")

# Sources (docs/fidelity-sources.md, "Tensor-parallel communication overlap (issue 25)"):
# Megatron-LM megatron/training/arguments.py (--tp-comm-overlap: asserts
# --sequence-parallel), Transformer Engine transformer_engine/pytorch/module/base.py
# (initialize_ub: ring_exchange qkv/fc1 fprop and proj/fc2 dgrad, pipeline proj/fc2
# fprop in num_splits = 4, bulk qkv/fc1 dgrad and wgrad); torchtitan
# --parallelism.enable_async_tensor_parallel (torch micro-pipeline TP,
# torch/distributed/_symmetric_memory: _fused_all_gather_matmul /
# _fused_matmul_reduce_scatter, one chunk per rank).
_ROWS["tp_comm_overlap"] = Knob(
    "tp_comm_overlap", bool, False, "True or False",
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
    torchtitan="--parallelism.enable_async_tensor_parallel (with --compile)")

# Sources (docs/fidelity-sources.md, "Gradient-reduction datatype"): Megatron-LM
# d98e8a6 megatron/core/distributed/param_and_grad_buffer.py (grad_dtype = torch.float
# if grad_reduce_in_fp32 else param.dtype), megatron/training/arguments.py
# (--grad-reduce-in-bf16, --accumulate-allreduce-grads-in-fp32; --bf16 forces fp32
# unless --grad-reduce-in-bf16), megatron/training/training.py (grad_reduce_in_fp32 =
# args.accumulate_allreduce_grads_in_fp32); DeepSpeed edaa722 deepspeed/runtime/engine.py
# (communication_data_type: the config's, else fp16/bf16 as trained);
# torchtitan b5bcd76 torchtitan/config/configs.py (mixed_precision_reduce: "float32").
_ROWS["grad_reduce_dtype"] = Knob(
    "grad_reduce_dtype", str, "fp32", "one of fp32, bf16, fp16",
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
               "MixedPrecisionPolicy.reduce_dtype; float32 its only value)")


# Sources (docs/fidelity-sources.md §21; phaze/step/_optim.py): Megatron-LM
# megatron/training/arguments.py --optimizer adam|sgd|muon (muon with
# --use-distributed-optimizer: the layer-wise distributed Muon), --muon-num-ns-steps (5),
# --muon-scalar-optimizer adam; --use-precision-aware-optimizer --exp-avg-dtype
# --exp-avg-sq-dtype (fp32, fp16, fp8) for Adam's moments.
# The command line's --optimizer (phaze evaluate / search) is the cost models' one option
# (cli/_main.py): sgd and adam for the study's model, adam and muon for this one.
_ROWS["optimizer"] = Knob(
    "optimizer", str, "adam", "one of adam, muon", choices=("adam", "muon"),
    file_key="optimizer", file_rank=24, file_optional=True,
    help="the optimizer: adam (AdamW, default) or muon (momentum orthogonalised by five "
         "Newton-Schulz iterations on each layer weight matrix, Adam on the embedding and "
         "head; ZeRO 0-1 only)",
    title="optimizer",
    megatron="--optimizer adam|muon (muon at ZeRO 1: with --use-distributed-optimizer)",
    deepspeed="(ds_config optimizer type; no Muon)",
    torchtitan="--optimizer.name AdamW (no Muon)")

_ROWS["optimizer_state_dtype"] = Knob(
    "optimizer_state_dtype", str, "fp32", "one of fp32, bf16, fp16",
    choices=("fp32", "bf16", "fp16"), flags=("--optimizer-state-dtype",), study="fp32",
    calibrated_only=True, study_lacks="optimizer state datatype choice",
    file_key="optimizer_state_dtype", file_rank=25, file_optional=True,
    help="datatype of the optimizer's moments or momentum (default fp32: Adam 12 B/param "
         "with its fp32 master weights; bf16 or fp16: 8 B; Muon 8 or 6 B; calibrated "
         "model only)",
    search="one",
    search_help="datatype of the optimizer's moments (default fp32; bf16, fp16: half the "
                "bytes, DeepSeek-V3's bf16 moments)",
    grid_rank=22, title="optimizer state",
    megatron="--use-precision-aware-optimizer --exp-avg-dtype fp16 --exp-avg-sq-dtype fp16 "
             "(fp16; Megatron-LM takes fp32, fp16 or fp8 moments)",
    deepspeed="", torchtitan="")

# Sources (docs/fidelity-sources.md §10.8; phaze/step/_optim.py): PyTorch FSDP2's
# MixedPrecisionPolicy docstring (torch/distributed/fsdp/_fully_shard/_fsdp_api.py: "The
# optimizer step uses the sharded parameter in the original dtype"; FSDP "does not require
# any extra memory to keep a high-precision copy of the parameters"); Megatron-LM's
# mixed-precision optimizers (megatron/core/optimizer/optimizer.py: fp32 main params beside
# the 16-bit model params) and DeepSpeed's ZeRO (fp32 partitions of the 16-bit params).
_ROWS["master_weights"] = Knob(
    "master_weights", str, "separate", "one of separate, params",
    choices=("separate", "params"), flags=("--master-weights",), study="separate",
    calibrated_only=True, study_lacks="master-weights layout",
    file_key="master_weights", file_rank=31, file_optional=True,
    help="where the fp32 master weights live: separate (default: 16-bit weights beside the "
         "optimizer's fp32 copy, Megatron-LM and DeepSpeed; 2 + 12 B/param with Adam) or "
         "params (the fp32 parameters are the master weights and the gradients fp32, "
         "PyTorch FSDP2 as torchtitan and NeMo AutoModel run it: 4 + 8 B, no copy to "
         "16-bit weights in the optimizer step; calibrated model only)",
    search="one",
    search_help="where the fp32 master weights live: separate (Megatron-LM, DeepSpeed; "
                "default) or params (PyTorch FSDP2's fp32 parameters; --emit torchtitan "
                "takes it)",
    grid_rank=24, title="master weights",
    megatron="(separate: fp32 main params beside the 16-bit model)",
    deepspeed="(separate: fp32 partitions beside the 16-bit parameters)",
    torchtitan="(params: FSDP2 keeps the fp32 parameters; "
               "--training.mixed_precision_param bfloat16 is the gathered copies' dtype)")

# Sources (docs/fidelity-sources.md §22): deepseek-ai/DeepEP README (normal kernels: a
# token to each destination node once over RDMA, then NVLink forwarding); Megatron-LM
# arguments.py --moe-token-dispatcher-type allgather|alltoall|flex with --moe-enable-deepep.
_ROWS["moe_dispatcher"] = Knob(
    "moe_dispatcher", str, "alltoall", "one of alltoall, deepep",
    choices=("alltoall", "deepep"), flags=("--moe-dispatcher",), study="alltoall",
    calibrated_only=True, study_lacks="MoE token dispatcher choice",
    file_key="moe_dispatcher", file_rank=26, file_optional=True,
    help="the MoE token dispatcher (a mixture of experts at ep > 1): alltoall (Megatron-Core's "
         "all-to-all, every routed copy sent on its own; default) or deepep (each token "
         "once per remote node, forwarded over NVLink; node-limited routing caps the "
         "nodes); calibrated model only",
    search="one",
    search_help="the MoE token dispatcher (default alltoall; deepep: each token once per "
                "remote node)",
    grid_rank=23, title="MoE dispatcher",
    megatron="--moe-token-dispatcher-type alltoall | flex with --moe-enable-deepep",
    deepspeed="", torchtitan="")


#: The launchability rules of recomputation (spliced into ``_knobs.RULES``): Megatron-
#: DeepSpeed's ParallelAttention checkpoints its unfused core only, so with
#: --use-flash-attn-v2 its selective recomputation re-runs nothing (phaze prices
#: Megatron-Core's re-run of the fused kernel, docs/fidelity-sources.md §28); the modules
#: beyond core_attn are Megatron-Core's alone.
RECOMPUTE_RULES = (
    Rule("deepspeed", "trainer", ("recompute", "flash_attention"),
         lambda v: v["recompute"] == "selective" and v["flash_attention"],
         lambda v: "Megatron-DeepSpeed does not checkpoint the flash-attention kernel (its "
                   "selective recomputation re-runs the unfused core only); use recompute none"),
    *(Rule(trainer, "trainer", ("recompute", "recompute_modules"),
           lambda v: v["recompute"] == "selective" and v["recompute_modules"] != "core_attn",
           lambda v, who=who: f"{who} has no selective recomputation by module "
                              f"(recompute_modules {v['recompute_modules']} is Megatron-Core's "
                              f"--recompute-modules)")
      for trainer, who in (("deepspeed", "Megatron-DeepSpeed"), ("torchtitan", "torchtitan"))),
)
