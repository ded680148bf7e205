"""Training datatypes: which tensors take how many bytes, and at which tensor-core rate.

``dtype`` (``phaze.graph.build_layers(..., dtype=)``) is one of :data:`DTYPES` (the table
:data:`DATATYPES`, one :class:`Datatype` each):

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
    gradient). The quantisation of the activation operand is its own operator (below).
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

The other low-precision datatypes (:data:`DATATYPES`, issue 26; sources in
``docs/fidelity-sources.md`` §13) run the same linear layers below 16 bits and differ in
their scales, their rate and their quantisation:

  * ``fp8-current``: one scale per tensor from that tensor's own amax (TE's
    ``Float8CurrentScaling``, Megatron-Core ``--fp8-recipe tensorwise``): the amax is a
    full read of the 16-bit tensor before the cast; FP8 weights cached per step.
  * ``fp8-tensorwise``: the same scaling as torchao's default float8 recipe runs it
    (torchtitan): the weights are cast again in every forward and backward.
  * ``fp8-rowwise``: one fp32 scale per row (torchao ``recipe_name="rowwise"``): each of
    the two layouts scaled along its own rows, one pass each; the backward GEMMs' outputs
    scaled in a pass of their own (``Datatype.backward_rescale``).
  * ``fp8-blockwise``: DeepSeek-V3's 1×128 activation and 128×128 weight blocks with fp32
    scales (TE ``Float8BlockScaling``, Megatron-Core ``--fp8-recipe blockwise``).
  * ``mxfp8``, ``mxfp6``, ``mxfp4``: OCP microscaling, one E8M0 scale per 32 elements
    (TE ``MXFP8BlockScaling``, Megatron-Core ``--fp8-recipe mxfp8``); the tensor cores
    must consume the format (a chip's ``scaled_formats`` holds "mx": Blackwell, MI355X).
  * ``nvfp4``: E2M1 with one E4M3 scale per 16 elements and an fp32 one per tensor (TE
    ``NVFP4BlockScaling``, Megatron-Core ``--fp4-format e2m1 --fp4-recipe nvfp4``):
    Blackwell only.

  Quantisation is priced as its own memory-bound operator before each low-precision
  GEMM's activation operand (the forward input X; in the backward the output gradient dY,
  shared by dgrad and wgrad): ``quant_reads`` reads of the 16-bit tensor and
  ``quant_layouts`` = 2 low-precision copies written (the row-wise one for this GEMM, the
  column-wise one — a transposed copy on Hopper, whose FP8 GEMMs take only the TN layout;
  column-scaled for the block formats — for the weight-gradient GEMM), at
  ``element_bytes`` each; 3 vector cycles per element per read (:data:`QUANT_CYCLES_PER_ELEMENT`:
  abs-max, scale, round). TE's fused norm-and-cast kernels fold the forward cast of a norm
  output into the norm; phaze prices it unfused (an upper bound of one 16-bit read). The
  weights' quantisation (once per step in TE, whose FP8 weight copies are cached across
  microbatches) is not priced. Blackwell's per-tensor FP8 GEMMs take every layout, so TE
  writes no transposed copy there: phaze's two layouts overcount that case by one
  1-byte write per element.

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

import dataclasses

from ._validate import show


@dataclasses.dataclass(frozen=True)
class Datatype:
    """One training datatype (a row of :data:`DATATYPES`; sources: module docstring and
    ``docs/fidelity-sources.md`` §13).

    - ``name``: the value of ``precision`` / ``dtype`` (``--precision``).
    - ``family``: the tensor-core rate it runs at — ``"16-bit"`` (the dense 16-bit rate),
      ``"fp8"``, ``"fp6"`` or ``"fp4"`` (the chip's ``fp8_rate``, ``fp6_rate``, ``fp4_rate``
      times the 16-bit rate).
    - ``element_bytes``: bytes per element of a low-precision GEMM operand as it sits in
      HBM, its scales included (E4M3: 1; MXFP8: 1 + 1/32 for one E8M0 scale per 32
      elements; NVFP4: 1/2 + 1/16 for one E4M3 scale per 16); 2 for the 16-bit types.
    - ``scaling``: how its scale factors are formed — ``"delayed"`` (one fp32 scale per
      tensor from the amax history of earlier steps), ``"current"`` (per tensor from this
      tensor's amax), ``"row"`` (one fp32 scale per row), ``"block"`` (one fp32 scale per
      1×128 activation block / 128×128 weight block), ``"mx"`` (one E8M0 scale per 32
      elements), ``"nvfp4"`` (one E4M3 scale per 16 elements and one fp32 per tensor);
      ``""`` for the 16-bit types.
    - ``native``: the block-scaled format the tensor cores must consume natively
      (a chip's ``scaled_formats`` must hold it: ``"mx"`` or ``"nvfp4"``), ``""`` when the
      chip's plain fp8/fp4 GEMMs run it (per-tensor, per-row and 128-block scales are
      applied in the GEMM's epilogue or by the kernel's main loop in software).
    - ``quant_reads``: reads of a 16-bit tensor its quantisation takes: 1 when the amax
      (or the block's max) is found in the pass that casts, 2 when a whole-tensor amax must
      be known first (current scaling; NVFP4's per-tensor scale) or each of the two
      layouts takes its own pass (torchao's row-wise scales along rows, then columns).
    - ``quant_layouts``: low-precision copies each quantisation writes: 2 — the row-wise
      copy for the GEMM that contracts over the rows' dimension, the column-wise
      (transposed, or scaled along the columns) copy for the other (module docstring).
    - ``megatron`` / ``torchtitan``: what each trainer's launch line says for it
      (Megatron-Core arguments; torchtitan's converter and recipe), ``None`` where that
      trainer has no form.
    - ``backward_rescale``: whether the backward's GEMMs end with a separate pass that
      scales their output (torchao's row-wise recipe: its dgrad and wgrad GEMMs run
      without fast accumulation, which torchao sends to cuBLAS's per-tensor kernel with
      unit scales, multiplying the output by the two scale vectors afterwards — ``output *=
      post_inverse_scale`` in ``addmm_float8_unwrapped``, pytorch/ao PR #1325; under
      ``torch.compile`` one more kernel per GEMM, pytorch/ao issue #2184). Priced as the
      operator ``NAME.dX.rescale`` / ``NAME.dW.rescale`` after each backward linear GEMM
      but the routed experts' grouped ones: one read and one write of the 16-bit output,
      one multiply per element, the two fp32 scale vectors read (``docs/fidelity-sources.md``
      §13.2).
    - ``weight_cast``: when the weights are quantised — ``"step"`` (Transformer Engine: its
      FP8 weight copies are made on a step's first microbatch and cached, Megatron passing
      ``is_first_microbatch``; not priced: ≤ 4 B per weight per step) or ``"microbatch"``
      (torchao's ``Float8Linear``: the weight is cast in every forward and again in the
      backward for the dgrad GEMM; priced as the operators ``NAME.w.quant`` and
      ``NAME.wT.quant``, one low-precision layout each).
    """

    name: str
    family: str
    element_bytes: float
    scaling: str = ""
    native: str = ""
    quant_reads: int = 0
    quant_layouts: int = 0
    megatron: tuple = None
    torchtitan: tuple = None
    weight_cast: str = "step"
    backward_rescale: bool = False

    @property
    def low_precision(self) -> bool:
        """Whether the linear layers' GEMMs run in this type (not 16-bit)."""
        return self.family != "16-bit"


#: Every training datatype phaze models, the default first (sources: module docstring).
DATATYPES = (
    Datatype("bf16", "16-bit", 2, megatron=("--bf16",), torchtitan=()),
    Datatype("fp16", "16-bit", 2, megatron=("--fp16",), torchtitan=None),
    Datatype("fp8", "fp8", 1, "delayed", "", 1, 2,
             megatron=("--bf16", "--fp8-format", "hybrid"), torchtitan=None),
    Datatype("fp8-current", "fp8", 1, "current", "", 2, 2,
             megatron=("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"),
             torchtitan=None),
    Datatype("fp8-tensorwise", "fp8", 1, "current", "", 2, 2, megatron=None,
             torchtitan=("float8", "tensorwise"), weight_cast="microbatch"),
    Datatype("fp8-rowwise", "fp8", 1, "row", "", 2, 2, megatron=None,
             torchtitan=("float8", "rowwise"), weight_cast="microbatch", backward_rescale=True),
    Datatype("fp8-blockwise", "fp8", 1 + 4 / 128, "block", "", 1, 2,
             megatron=("--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "blockwise"),
             torchtitan=None),
    Datatype("mxfp8", "fp8", 1 + 1 / 32, "mx", "mx", 1, 2,
             megatron=("--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"),
             torchtitan=("mx", "mxfp8_cublas")),
    Datatype("mxfp6", "fp6", 0.75 + 1 / 32, "mx", "mx", 1, 2),
    Datatype("mxfp4", "fp4", 0.5 + 1 / 32, "mx", "mx", 1, 2),
    Datatype("nvfp4", "fp4", 0.5 + 1 / 16, "nvfp4", "nvfp4", 2, 2,
             megatron=("--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"),
             torchtitan=None),
)
#: The datatypes by name.
BY_NAME = {d.name: d for d in DATATYPES}
#: The training datatypes' names, the default first.
DTYPES = tuple(BY_NAME)
#: The datatypes whose linear layers' GEMMs run below 16 bits.
LOW_PRECISION = tuple(d.name for d in DATATYPES if d.low_precision)
#: The tensor-rate families (``Datatype.family``), and the chip field giving each one's
#: dense rate as a multiple of the 16-bit rate (None: the 16-bit rate itself).
RATE_FIELDS = {"16-bit": None, "fp8": "fp8_rate", "fp6": "fp6_rate", "fp4": "fp4_rate"}
#: The default datatype (the original study's 2-byte training).
DEFAULT_DTYPE = "bf16"
#: Bytes per element of an FP8 GEMM's inputs (E4M3 or E5M2) under per-tensor scaling.
FP8_BYTES = 1
#: Operators that run in low precision under a low-precision ``dtype`` (forward names;
#: their backward ``NAME.dX`` and ``NAME.dW`` GEMMs too): the linear layers of a block.
FP8_GEMMS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "out_proj",
             "fc1", "gate_proj", "up_proj", "fc2",
             # mixture of experts (Transformer Engine's FP8 grouped GEMMs); the router and
             # the shared-expert gate stay 16-bit
             "expert_fc1", "expert_gate_proj", "expert_up_proj", "expert_fc2",
             "shared_fc1", "shared_gate_proj", "shared_up_proj", "shared_fc2",
             # multi-head latent attention's projections
             "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj",
             # LatentMoE's projections (Megatron-Core's MoELayer builds them as TELinear,
             # parallel_mode "duplicated")
             "fc1_latent_proj", "fc2_latent_proj")
#: Vector cycles per element of one quantisation pass (scale, round to the format, and the
#: max of the absolute values for the scale): 3 (module docstring).
QUANT_CYCLES_PER_ELEMENT = 3.0


def _memory(d: Datatype) -> dict:
    return dict(weights=2, fp8_weight=d.quant_layouts * d.element_bytes if d.low_precision
                else 0, gradients=4, optimizer_state=12)


#: Bytes per parameter held per GPU (before any ZeRO sharding), by datatype:
#: ``weights`` (16-bit model weights), ``fp8_weight`` (the low-precision copies in both
#: layouts, only for the weights of :data:`FP8_GEMMS`: 2 B under fp8), ``gradients`` (fp32
#: main gradients), ``optimizer_state`` (fp32 master weight + Adam m + Adam v).
MEMORY_BYTES_PER_PARAM = {d.name: _memory(d) for d in DATATYPES}


def check_dtype(dtype) -> str:
    """``dtype`` if it is one of :data:`DTYPES`, else ``ValueError`` in one sentence."""
    if not isinstance(dtype, str) or dtype not in BY_NAME:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {show(dtype)}")
    return dtype


def datatype(dtype) -> Datatype:
    """The :class:`Datatype` named ``dtype`` (``ValueError`` in one sentence otherwise)."""
    return BY_NAME[check_dtype(dtype)]


def is_low_precision(dtype) -> bool:
    """Whether ``dtype``'s linear-layer GEMMs run below 16 bits."""
    return BY_NAME[check_dtype(dtype)].low_precision


def is_fp8_gemm(name: str) -> bool:
    """Whether the block operator ``name`` (forward or ``.dX`` / ``.dW``) is a linear
    layer's GEMM, the ones a low-precision ``dtype`` runs below 16 bits."""
    base = name[:-3] if name.endswith((".dX", ".dW")) else name
    return base in FP8_GEMMS
