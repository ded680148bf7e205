"""DeepSpeed's ds_config of a plan (``phaze.launch.deepspeed_arguments``; its command-line
arguments are ``phaze.plan._knobs.ARGUMENTS["deepspeed"]``): one writer per knob, in key
order."""
from __future__ import annotations


def _ds_zero(v, c):
    c["zero_optimization"] = {"stage": v["zero_stage"]}


def _ds_overlap(v, c):
    # Written at every sharded stage: DeepSpeed's default is false, but true at ZeRO-3
    # (deepspeed/runtime/zero/config.py: overlap_comm None → True for stage 3), so a
    # plan priced without overlap must say false there.
    if v["zero_stage"] >= 1:
        c["zero_optimization"]["overlap_comm"] = bool(v["overlap_grad_reduce"])


def _ds_precision(v, c):
    if v["precision"] == "bf16":
        c["bf16"] = {"enabled": True}
    else:
        c["fp16"] = {"enabled": True, "loss_scale": 0}


def _ds_recompute(v, c):
    if v["recompute"] == "full":
        c["activation_checkpointing"] = {"partition_activations": False,
                                         "contiguous_memory_optimization": False,
                                         "cpu_checkpointing": False}


def _ds_batch(v, c):
    c["train_micro_batch_size_per_gpu"] = v["microbatch"]
    c["gradient_accumulation_steps"] = v["global_batch"] // (v["microbatch"]
                                                              * v["data_parallel"])


#: DeepSpeed's ds_config of a plan, in key order: (knob name, writer(v, config)) pairs.
DS_CONFIG = (
    ("global_batch", lambda v, c: c.update(train_batch_size=v["global_batch"])),
    ("microbatch", _ds_batch),
    ("zero_stage", _ds_zero),
    ("overlap_grad_reduce", _ds_overlap),
    ("precision", _ds_precision),
    ("recompute", _ds_recompute),
    # DeepSpeed reduces in the training datatype unless told (engine.communication_data_type).
    ("grad_reduce_dtype", lambda v, c: c.update(communication_data_type=v["grad_reduce_dtype"])),
)


def ds_config(values: dict) -> dict:
    """DeepSpeed's configuration dict of the plan ``values``."""
    config = {}
    for _, write in DS_CONFIG:
        write(values, config)
    return config
