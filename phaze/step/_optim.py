"""The optimizers the step model prices (issue 27, item 4): Adam/AdamW (Megatron-LM's fused
mixed-precision step) and Muon (momentum orthogonalised by Newton–Schulz iterations, with
Adam on the parameters that are not weight matrices), each with its state datatype.
Private: ``_layers.plan_records`` and ``_plans`` read :data:`OPTIMIZERS`.

Per parameter (docs/fidelity-sources.md §21):

- **State bytes** (the memory of ``MemoryBreakdown.optimizer_state``): Adam keeps fp32
  master weights (4) and two moments (2 × s bytes, s = 4 fp32 or 2 for bf16 / fp16:
  Megatron-Core's precision-aware optimizer, ``--use-precision-aware-optimizer
  --exp-avg-dtype fp16 --exp-avg-sq-dtype fp16``; DeepSeek-V3 §3.3.2 keeps the moments in
  bf16): 12 or 8. Muon keeps the master weights
  and one momentum buffer: 8 or 6; the embedding, the output head (and the norms and
  biases, counted with the layers: < 0.1 % of them) run Adam (Megatron-Core's
  ``--muon-scalar-optimizer adam``), so the embedding's and head's state is Adam's.
- **HBM bytes of the elementwise step** (memory-bound, at the chip's HBM bandwidth): Adam
  42 (bf16; sheet §5.2: grad norm 4, fused Adam 28 = read p, g, m, v and write p, m, v,
  copy to the 16-bit model weights 6, zero the gradients 4), 50 with fp16's unscale and
  inf check, and 8 less with bf16 moments (four moment accesses of 2 bytes instead of 4).
  Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; the update Megatron-Core
  runs): grad norm 4; momentum m ← β·m + g: read g 4, read and write m 2·s; Nesterov
  u ← g + β·m: read g 4, read m s, write u in bf16 for the iterations 2; read the
  orthogonalised update 2; p ← p − lr·(scale·O + wd·p): read and write p 8; copy to the
  model weights 6; zero the gradients 4: 34 + 3·s = 46 (fp32 state) or 40 (bf16), 8 more
  under fp16.
- **Newton–Schulz GEMMs** (Muon only): ``ns_steps`` = 5 iterations (Megatron-Core's
  ``--muon-num-ns-steps`` default, Muon's reference) on each weight matrix of each layer,
  priced by the cost model as the GEMMs they are (``graph.newton_schulz``); with the
  distributed optimizer (ZeRO 1) each data-parallel rank orthogonalises 1/d of the
  matrices (Megatron-Core's layer-wise distributed Muon), else every rank all of them.
  Tensor-parallel weights are orthogonalised slice by slice (``--muon-tp-mode
  blockwise``). Muon needs whole matrices on the rank that updates them: ZeRO 2 and 3
  (parameters or gradients sharded inside a matrix) are refused.
- **Where the master weights live** (the plan knob ``master_weights``): "separate" (Megatron-LM, DeepSpeed) keeps 16-bit model weights
  and the optimizer's fp32 master copy, as above; "params" (PyTorch FSDP2 with a
  ``MixedPrecisionPolicy``: torchtitan, NeMo AutoModel; JAX's fp32 parameters: MaxText)
  keeps the parameters themselves in fp32 — "the optimizer step uses the sharded parameter
  in the original dtype", and FSDP "does not require any extra memory to keep a
  high-precision copy of the parameters for the optimizer step" (the ``MixedPrecisionPolicy``
  docstring, torch/distributed/fsdp/_fully_shard/_fsdp_api.py) — with fp32 gradients (the
  reduce-scattered gradient is cast back to the parameter's dtype), the 16-bit copies only
  while gathered. Per parameter: weights 4 B instead of 2, gradients 4 B whatever the
  reduction's datatype, state without the master's 4 B, and the step without the copy to
  16-bit weights (6 B) and without zeroing a gradient buffer (``zero_grad`` frees the
  gradients, ``set_to_none=True`` its default since PyTorch 2.0: 4 B).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Datatypes of the optimizer's state (moments or momentum), bytes per element.
STATE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: The fp32 master weights every optimizer keeps, bytes per parameter.
MASTER_BYTES = 4
#: The plan knob ``master_weights`` "params" (module docstring): bytes per parameter of the weights a rank keeps and of its gradients (fp32).
PARAMS_WEIGHT_BYTES = 4
PARAMS_GRAD_BYTES = 4
#: "params": HBM bytes per parameter the step does not move: the copy to the 16-bit model
#: weights (read 4, write 2) and the zeroing of the gradient buffer (4).
PARAMS_STEP_SAVED_BYTES = 6 + 4
#: Newton–Schulz iterations of a Muon step.
NS_STEPS = 5


@dataclass(frozen=True)
class Optimizer:
    """One optimizer: ``matrices`` (True: the layers' weight matrices are orthogonalised,
    Muon), ``moments`` (state elements per parameter beside the fp32 master weights: two
    for Adam, one momentum for Muon; :func:`state_bytes`),
    ``hbm`` (HBM bytes per parameter of its elementwise step at fp32 state, bf16 training),
    ``hbm_per_state_byte`` (how many state bytes the step reads and writes per parameter:
    the HBM bytes fall by that × (4 − s) at s bytes per state element), ``kernels``
    (multi-tensor kernels the elementwise step launches), ``zero_stages`` (the ZeRO stages
    it runs under)."""

    name: str
    matrices: bool
    moments: int
    hbm: int
    hbm_per_state_byte: int
    kernels: int
    zero_stages: tuple


OPTIMIZERS = {
    "adam": Optimizer("adam", False, 2, 42, 4, 4, (0, 1, 2, 3)),
    "muon": Optimizer("muon", True, 1, 46, 3, 6, (0, 1)),
}
#: fp16 training adds the loss scaler's unscale and inf check: 8 bytes and one kernel.
FP16_EXTRA_BYTES, FP16_EXTRA_KERNELS = 8, 1


def state_bytes(name: str, state_dtype: str) -> float:
    """Optimizer state bytes per parameter: the master weights and the moments."""
    return float(MASTER_BYTES + OPTIMIZERS[name].moments * STATE_DTYPES[state_dtype])


def hbm_bytes(name: str, state_dtype: str, precision: str) -> float:
    """HBM bytes per parameter of ``name``'s elementwise step."""
    o = OPTIMIZERS[name]
    s = STATE_DTYPES[state_dtype]
    return float(o.hbm - o.hbm_per_state_byte * (4 - s)
                 + (FP16_EXTRA_BYTES if precision == "fp16" else 0))


def kernels(name: str, precision: str) -> float:
    """Multi-tensor kernels of ``name``'s elementwise step."""
    return float(OPTIMIZERS[name].kernels + (FP16_EXTRA_KERNELS if precision == "fp16" else 0))


def refusal(name: str, zero_stage: int) -> str:
    """Why ``name`` cannot run at ``zero_stage`` ('' when it can)."""
    if zero_stage not in OPTIMIZERS[name].zero_stages:
        return (f"the {name} optimizer needs whole weight matrices on the rank that updates "
                f"them: ZeRO stage {zero_stage} shards them (ZeRO 0 or 1 only)")
    return ""
