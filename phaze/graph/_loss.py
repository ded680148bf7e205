"""The head's cross-entropy loss as the trainers' kernels run it (issue 25; the plan knob
``loss_kernel``; docs/fidelity-sources.md §27).

Megatron-Core computes the vocabulary-parallel loss in fp32 from 16-bit logits in one of
three ways, each a different number of passes over the b·s·V/t logits of a rank (counted
from the code, commits in §27): its default unfused ``vocab_parallel_cross_entropy``
(``--cross-entropy-loss-fusion`` off: six forward kernels, 52 bytes per logit in all),
its jit-fused one (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl native``:
28 bytes; the knob's default, as Megatron-LM recommends it) and Transformer Engine's
Triton kernels (``--cross-entropy-fusion-impl te``: 22 bytes; Megatron-LM's argument
check refuses them since June 2026 for "stability issues"). Each kernel is one vector
operator, a tuple (part, vector passes per element, 16-bit reads, fp32 reads, 16-bit
writes, fp32 writes), the counts in elements per logit. Every implementation keeps an
fp32 tensor of the logits' size for the backward (the probabilities or TE's gradient),
:data:`phaze.graph.LOSS_BYTES_PER_ELEMENT` per logit, as the study's single pass does.
"""
from __future__ import annotations

import dataclasses

#: Bytes of an fp32 element.
_F32 = 4


@dataclasses.dataclass(frozen=True)
class LossKernel:
    """A cross-entropy implementation: ``name`` (the knob's value), ``title`` (in words),
    ``forward`` and ``backward`` (its kernels, module docstring) and ``megatron`` (the
    Megatron-Core arguments that select it)."""

    name: str
    title: str
    forward: tuple
    backward: tuple
    megatron: tuple

    def bytes_per_logit(self, elem_bytes: int) -> int:
        """HBM bytes per logit element, forward and backward, with 16-bit elements of
        ``elem_bytes``."""
        return sum(k[2] * elem_bytes + k[3] * _F32 + k[4] * elem_bytes + k[5] * _F32
                   for k in self.forward + self.backward)


#: The kernels by knob value, the knob's default first.
LOSS_KERNELS = {
    "native-fused": LossKernel(
        "native-fused", "Megatron-Core's jit-fused vocab-parallel cross-entropy",
        # calculate_logits_max (cast to fp32 and the row max), calculate_predicted_logits
        # (subtract, exp, sum), calculate_cross_entropy_loss (divide by the sum)
        forward=(("max", 2.0, 1, 0, 0, 1), ("exp", 3.0, 0, 1, 0, 1), ("", 1.0, 0, 1, 0, 1)),
        # calculate_gradients: subtract the one-hot, scale, cast to bf16 in one kernel
        backward=(("", 3.0, 0, 1, 1, 0),),
        megatron=("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native")),
    "te": LossKernel(
        "te", "Transformer Engine's Triton cross-entropy",
        # online_softmax_kernel reads the logits for each row's max and sum;
        # cross_entropy_kernel reads them again and writes the fp32 gradient
        forward=(("online_softmax", 4.0, 1, 0, 0, 0), ("", 2.0, 1, 0, 0, 1)),
        # element_mul_kernel scales it by the per-token loss gradient in place; autograd
        # casts the fp32 gradient to the 16-bit logits' dtype
        backward=(("scale", 1.0, 0, 1, 0, 1), ("", 1.0, 0, 1, 1, 0)),
        megatron=("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te")),
    "native": LossKernel(
        "native", "Megatron-Core's unfused vocab-parallel cross-entropy",
        # .float(), max, in-place subtract, exp, sum, in-place divide
        forward=(("cast", 1.0, 1, 0, 0, 1), ("max", 1.0, 0, 1, 0, 0),
                 ("subtract", 1.0, 0, 1, 0, 1), ("exp", 2.0, 0, 1, 0, 1),
                 ("sum", 1.0, 0, 1, 0, 0), ("", 1.0, 0, 1, 0, 1)),
        # grad_input.mul_(grad_output), then autograd's cast to the logits' dtype
        backward=(("scale", 2.0, 0, 1, 0, 1), ("", 1.0, 0, 1, 1, 0)),
        megatron=()),
}
#: The knob's values, in table order.
LOSS_KERNEL_NAMES = tuple(LOSS_KERNELS)
#: The calibrated model's loss when a plan names none.
DEFAULT_LOSS_KERNEL = "native-fused"
#: The study's loss: one forward pass (16-bit logits in, fp32 probabilities out) and one
#: backward pass, its vector work the cycle table's ``cross_entropy`` and
#: ``cross_entropy_bwd``.
STUDY = LossKernel("study", "the study's fused loss",
                   forward=(("", None, 1, 0, 0, 1),), backward=(("", None, 0, 1, 1, 0),),
                   megatron=())


def check_loss_kernel(value) -> str:
    """``value`` if it names a loss kernel, else ``ValueError`` in one sentence."""
    if isinstance(value, str) and value in LOSS_KERNELS:
        return value
    raise ValueError(f"loss_kernel must be one of {', '.join(LOSS_KERNEL_NAMES)}, "
                     f"got {value!r}")


def add_loss(f, g, prefix: str, logits: int, kernel: LossKernel, elem_bytes: int,
             cycles: dict) -> tuple:
    """Append ``kernel``'s forward operators to ``f`` (after ``prefix + 'logits'``) and
    its backward operators to ``g`` for ``logits`` elements of ``elem_bytes``-byte logits;
    the study's kernel takes ``cycles['cross_entropy']`` / ``['cross_entropy_bwd']``.
    Returns the names of the last forward and the last backward operator
    (``prefix + 'cross_entropy'`` and ``prefix + 'cross_entropy.bwd'``)."""
    names = []
    for ops, parts, base, dep, default_cycles in (
            (f, kernel.forward, prefix + "cross_entropy", prefix + "logits",
             cycles["cross_entropy"]),
            (g, kernel.backward, prefix + "cross_entropy.bwd", None, cycles["cross_entropy_bwd"])):
        for part, passes, r16, r32, w16, w32 in parts:
            name = base + ("." + part if part else "")
            ops.vector(name, [dep] if dep else [], logits,
                       default_cycles if passes is None else passes,
                       logits * (r16 * elem_bytes + r32 * _F32),
                       logits * (w16 * elem_bytes + w32 * _F32))
            dep = name
        names.append(dep)
    return tuple(names)
