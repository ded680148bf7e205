"""torchtitan's job config of a plan (issue 25 item 8; ``phaze evaluate --emit torchtitan``):
the model flavours torchtitan names, the job config of the ("section.key", value) pairs
that ``phaze.plan._knobs`` writes (``TORCHTITAN_ARGUMENTS``; its torchtitan "emit" rules)
and its TOML text, written by ``phaze.launch``.

Pinned version: torchtitan v0.2.0 (pytorch/torchtitan tag v0.2.0, commit
29624e37fa6dd319fd671b009338651b5c665da2, 2025-10-17), the TOML job config read by
``torchrun -m torchtitan.train --job.config_file FILE`` (its ``run_train.sh``). Every key
below was checked against that commit's code:

- ``torchtitan/config/job_config.py``: ``[model] name, flavor, converters``;
  ``[training] local_batch_size, global_batch_size`` (-1: local × data-parallel degree;
  gradient accumulation = global / (local × dp_replicate × dp_shard), ``train.py``),
  ``seq_len, mixed_precision_param`` ("bfloat16" | "float32"), ``mixed_precision_reduce``
  ("float32" only); ``[parallelism] data_parallel_replicate_degree,
  data_parallel_shard_degree`` (-1: the ranks left over; written explicitly here),
  ``fsdp_reshard_after_forward`` ("default" | "always" | "never"),
  ``tensor_parallel_degree, enable_async_tensor_parallel`` (needs ``[compile] enable``:
  ``distributed/tensor_parallel.py`` raises "Async TP requires --training.compile"),
  ``pipeline_parallel_degree, pipeline_parallel_schedule`` ("1F1B", "Interleaved1F1B"),
  ``pipeline_parallel_layers_per_stage, pipeline_parallel_first_stage_less_layers,
  pipeline_parallel_last_stage_less_layers`` (default 1 each: the embedding and the head
  count as one layer; written 0 here, so that each of the p·v stages holds L/(p·v)
  transformer layers as phaze prices them, or 1 with ``account_for_embedding``, the split
  phaze prices then; ``distributed/pipeline_parallel.py``
  ``generate_llm_fqn_per_model_part``), ``pipeline_parallel_microbatch_size`` (the
  local batch is split into local / microbatch pipeline microbatches),
  the context, expert and expert-tensor parallel degrees (their key names are in the
  ``torchtitan`` fields of ``phaze.plan.KNOBS``);
  ``[activation_checkpoint] mode`` ("selective" | "full" | "memory_budget" | "none";
  default "selective") and ``selective_ac_option`` ("op" or a layer period);
  ``[compile] enable``.
- float8 (``components/quantization/float8.py``): the converter is registered as
  ``"quantize.linear.float8"`` (v0.1's ``"float8"`` was renamed with the ``[quantize]``
  section), tensorwise scaling by default.
- ``models/llama3/__init__.py``: the flavours "8B" (dim 4096, 32 layers, 32 heads, 8
  key/value heads, ffn_dim_multiplier 1.3, multiple_of 1024 → 14,336), "70B" (8192, 80,
  64, 8; 1.3, 4096 → 28,672) and "405B" (16384, 126, 128, 8; 1.2, 4096 → 53,248), the
  Llama 3 tokenizer's 128,256 tokens. torchtitan's llama4, deepseek_v3 and qwen3 flavours
  have no model of phaze's zoo; a model is matched by its shape, not its name.

How a plan becomes keys: d is FSDP2's shard degree under ZeRO 3 (torchtitan's FSDP mesh
is ``dp_shard_cp``: the context-parallel ranks shard too, as phaze's ZeRO group is cp·d)
and DDP's replicate degree under ZeRO 0; pipeline parallelism runs all B/(b·d)
microbatches of a rank in one schedule (local batch B/d, pipeline microbatch b, no
accumulation), without it the local batch is b and the global batch B accumulates
B/(b·d) steps. Sequence parallelism is not a key: torchtitan's tensor parallelism always
shards the norms over the sequence (``SequenceParallel`` in ``parallelize.py``), so a
plan at t > 1 without it is emitted with a note (same bytes, less activation memory than
priced); flash attention is not a key either (``scaled_dot_product_attention`` always:
a plan priced with materialised scores is emitted with a note). phaze's selective
recomputation (Megatron's core-attention recompute) is written as torchtitan's per-op
selective checkpointing (``selective_ac_option = "op"``), its nearest policy.
"""
from __future__ import annotations

#: torchtitan v0.2.0's model flavours of phaze's zoo shapes: (layers, hidden, heads,
#: key/value heads, FFN width, vocabulary) → (model name, flavor).
FLAVORS = {
    (32, 4096, 32, 8, 14336, 128256): ("llama3", "8B"),
    (80, 8192, 64, 8, 28672, 128256): ("llama3", "70B"),
    (126, 16384, 128, 8, 53248, 128256): ("llama3", "405B"),
}

#: The job-config file the torchrun line points at.
CONFIG_FILE = "phaze_torchtitan.toml"


def units(v) -> int:
    """The units torchtitan splits over the stages of a plan's knob values ``v``: the
    layers, and the embedding and head one each with ``account_for_embedding``
    (first/last_stage_less_layers = 1)."""
    return v["n_layers"] + 2 * int(bool(v.get("account_for_embedding")))


def stages_expressible(v) -> bool:
    """torchtitan's layers_per_stage x = ceil(U/(p·v)) makes ceil(U/x) = p·v stages, each
    of one unit or more (its checks: no empty stage, less_layers ≤ U // (p·v))."""
    n, stages = units(v), v["pipeline_parallel"] * v["virtual_stages"]
    x = -(-n // stages)
    return -(-n // x) == stages and n // stages >= 1


def flavor(spec):
    """torchtitan's (model name, flavor) of the ModelSpec ``spec``, or None when it has
    none (matched by shape; a mixture of experts or latent attention never matches)."""
    if getattr(spec, "n_experts", 0) or getattr(spec, "kv_lora_rank", 0):
        return None
    key = (spec.n_layers, spec.hidden, spec.heads, spec.kv_heads, spec.ffn_hidden,
           getattr(spec, "vocab", None))
    return FLAVORS.get(key)


def model_keys(spec) -> list:
    """The ``[model]`` and sequence-length keys of ``spec`` (one with a flavor)."""
    name, flav = flavor(spec)
    return [("model.name", name), ("model.flavor", flav), ("training.seq_len", spec.seq_len)]


def config(pairs) -> dict:
    """The job config {section: {key: value}} of ("section.key", value) pairs, in order; a
    key of more dots nests as TOML reads it ("quantize.linear.float8.recipe_name" →
    {"quantize": {"linear": {"float8": {"recipe_name": …}}}})."""
    out = {}
    for dotted, value in pairs:
        *tables, key = dotted.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[key] = value
    return out


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(_toml_value(x) for x in value) + "]"


def toml(cfg: dict) -> str:
    """TOML text of a job config ``cfg`` (tables of scalars and lists of strings; a nested
    table is written as its own ``[a.b.c]`` header)."""
    blocks = []

    def table(name, keys):
        scalars = {k: x for k, x in keys.items() if not isinstance(x, dict)}
        if scalars:
            blocks.append("\n".join([f"[{name}]"] + [f"{k} = {_toml_value(x)}"
                                                      for k, x in scalars.items()]))
        for k, x in keys.items():
            if isinstance(x, dict):
                table(f"{name}.{k}", x)

    for section, keys in cfg.items():
        table(section, keys)
    return "\n\n".join(blocks) + "\n"
