"""Training datatypes: which tensors take how many bytes, and at which tensor-core rate.

``dtype`` (``phaze.graph.build_layers(..., dtype=)``) is one of :data:`DTYPES`:

- ``"bf16"`` (the default) and ``"fp16"``: mixed-precision training as Megatron-LM runs
  it. Every tensor of the operator graphs is 16-bit (2 bytes per element), except the
  few the graphs say otherwise (fp32 loss softmax and log-sum-exp, int64 token ids,
  1-byte dropout masks). fp16 is priced as bf16 on every chip: A100 and H100 have the
  same dense rate for both (312 and 989.4 TFLOP/s); TPU v4's MXUs multiply bf16 only, so
  there fp16 stands for bf16. Their graphs and costs are identical; fp16 differs only in
  the optimizer's loss-scaler pass (``phaze.step``).
- ``"fp8"``: FP8 training as NVIDIA Transformer Engine (TE) runs it with its default
  recipe (``DelayedScaling``, ``Format.HYBRID``: E4M3 in forward, E5M2 for gradients).
  TE runs only the GEMMs of its linear modules in FP8; every other operation keeps its
  16-bit inputs and outputs ("Only the GEMMs are run in FP8": TE user guide, *Using FP8
  with Transformer Engine*; *Introduction: mixed precision*, "layer normalization and
  softmax ... use high precision"). Precisely, under ``"fp8"``:

  * **FP8 GEMMs** (:data:`FP8_GEMMS`): the linear layers of every transformer block —
    ``q_proj, k_proj, v_proj`` (Megatron-LM's fused ``qkv_proj``), ``out_proj, fc1 |
    gate_proj, up_proj, fc2`` — and their backward ``.dX`` (dgrad) and ``.dW`` (wgrad)
    GEMMs. Both inputs (activation or output gradient, and weight or saved input) are
    read at :data:`FP8_BYTES` = 1 byte per element and the GEMM runs at the chip's fp8
    tensor rate (``phaze.arch.fp8_rate``); its output is written in 16-bit (TE's
    ``Linear`` returns the activation dtype; the wgrad accumulates into the 16/32-bit
    gradient). The cast to FP8 is fused into the producer (TE's ``LayerNormLinear`` /
    ``LayerNormMLP`` emit the norm output and the activation in FP8) and is not priced
    separately.
  * **16-bit as before**: norms, softmax, dropout, residual adds, rotary, the
    activation's element-wise math, the attention core (``attn_scores``,
    ``attn_context`` or ``flash_attn``: TE's ``DotProductAttention`` runs in FP8 only
    with the recipe's ``fp8_dpa=True``, default ``False``), the embedding, the head's
    logits GEMM and loss (Megatron-Core's output layer is a plain
    ``ColumnParallelLinear``, outside TE's FP8 modules), and every collective and
    pipeline transfer (the tensors they move are the 16-bit outputs).
  * **Stashed activations**: TE saves the FP8 copy of each FP8 GEMM's input for its
    wgrad (``LayerNormLinear`` keeps ``ln_out`` as a quantized tensor for the wgrad
    GEMM; TE PR #1596), so the block's stash keeps the Q/K/V input (ln1 output), the
    out_proj input, the fc1/gate/up input (ln2 output) and the fc2 input at 1 byte per
    element; the norm inputs, Q, K, V, the attention probabilities and the activation's
    input stay 16-bit. With flash attention the attention output, which its backward
    reads, is kept in 16-bit besides out_proj's FP8 copy. Full recomputation keeps the
    16-bit layer input, as in bf16.
  * **Weights** (``LayerGraph.param_bytes``) stay the 16-bit model weights, as TE keeps
    them; see :data:`MEMORY_BYTES_PER_PARAM` for the FP8 copies.

Memory per parameter (:data:`MEMORY_BYTES_PER_PARAM`, for ``phaze.step``): the
16-bit model weights (2 B), fp32 main gradients (4 B; Megatron-LM's
``--accumulate-allreduce-grads-in-fp32`` default with bf16), fp32 master weights and
Adam's two fp32 moments (12 B) — 18 B/param for bf16 and fp16 (Megatron-LM
docs/api-guide/dist_optimizer.md; Korthikanti et al. 2022 Figure 1). Under fp8 the
master weights and optimizer state stay fp32 and the gradients stay fp32 (TE's FP8
changes only the GEMMs' operands), and TE keeps an FP8 copy of each linear layer's
weight in both layouts — row-wise for the forward GEMM and column-wise (its transpose)
for the dgrad GEMM, since Hopper's FP8 GEMMs take only the TN layout ("Weight with
column-wise usage is needed for dgrad GEMM", TE PR #1596) — cached across the step's
microbatches (Megatron passes TE's ``is_first_microbatch``): +2 B per parameter of the
FP8 GEMMs (``fp8_weight``), 20 B for those parameters, 18 B for the rest (norms,
biases, embedding, head).
"""
from __future__ import annotations

from ._validate import show

#: The training datatypes phaze models, the default first.
DTYPES = ("bf16", "fp16", "fp8")
#: The default datatype (the original study's 2-byte training).
DEFAULT_DTYPE = "bf16"
#: Bytes per element of an FP8 GEMM's inputs (E4M3 or E5M2).
FP8_BYTES = 1
#: Operators that run in FP8 under ``dtype="fp8"`` (forward names; their backward
#: ``NAME.dX`` and ``NAME.dW`` GEMMs too): the linear layers of a transformer block.
FP8_GEMMS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "out_proj",
             "fc1", "gate_proj", "up_proj", "fc2",
             # mixture of experts (Transformer Engine's FP8 grouped GEMMs); the router and
             # the shared-expert gate stay 16-bit
             "expert_fc1", "expert_gate_proj", "expert_up_proj", "expert_fc2",
             "shared_fc1", "shared_gate_proj", "shared_up_proj", "shared_fc2",
             # multi-head latent attention's projections
             "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj")

#: Bytes per parameter held per GPU (before any ZeRO sharding), by datatype:
#: ``weights`` (16-bit model weights), ``fp8_weight`` (TE's FP8 copies in both layouts,
#: only for the weights of :data:`FP8_GEMMS`), ``gradients`` (fp32 main gradients),
#: ``optimizer_state`` (fp32 master weight + Adam m + Adam v). Sources: module docstring.
MEMORY_BYTES_PER_PARAM = {
    "bf16": dict(weights=2, fp8_weight=0, gradients=4, optimizer_state=12),
    "fp16": dict(weights=2, fp8_weight=0, gradients=4, optimizer_state=12),
    "fp8": dict(weights=2, fp8_weight=2, gradients=4, optimizer_state=12),
}


def check_dtype(dtype) -> str:
    """``dtype`` if it is one of :data:`DTYPES`, else ``ValueError`` in one sentence."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {show(dtype)}")
    return dtype


def is_fp8_gemm(name: str) -> bool:
    """Whether the block operator ``name`` (forward or ``.dX`` / ``.dW``) is an FP8 GEMM
    under ``dtype="fp8"``."""
    base = name[:-3] if name.endswith((".dX", ".dW")) else name
    return base in FP8_GEMMS
