"""phaze.graph — the operators of one layer of one tensor-parallel slice (docs/design.md §2.2).

The face re-exports; the work is split by job: ``_opgraph`` (the :class:`OpGraph` record
and its operator kinds' validation), ``_ops`` (operator kinds, the cycle table,
:class:`Ops` and :class:`Shape`), ``_block`` (the dense transformer block, context
parallelism), ``_mla`` (multi-head latent attention), ``_moe`` (mixture-of-experts blocks),
``_mamba`` (the Mamba-2 mixer), ``_layer`` (a layer of any token and channel mixer),
``_newton_schulz`` (a Muon step's iterations on a layer's weights), ``_recompute``
(Megatron-Core's selective recomputation modules), ``_loss`` (the
head's cross-entropy kernels, :data:`LOSS_KERNELS`) and
``_build`` (:func:`build_layers`: the embedding, the blocks and the head of a model,
as :class:`LayerGraph` records of a :class:`ModelGraph`). ``_dag.pyx`` is the compiled
topological order the OpGraph checks.
"""
from ._build import (LayerGraph, ModelGraph, block_kind_names, build_layers,
                     ring_attention_refusal, layer_kind_name,
                     layer_kind_names)
from ._loss import DEFAULT_LOSS_KERNEL, LOSS_KERNEL_NAMES, LOSS_KERNELS, LossKernel
from ._newton_schulz import newton_schulz, weight_matrices
from ._recompute import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE_MODULES, canonical_modules
from ._opgraph import (COLL_ALL_GATHER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_NONE, COLL_P2P,
                       COLL_REDUCE_SCATTER, COLLECTIVE_KINDS, UNFUSED_ATTENTION_OPS, OpGraph)
from ._ops import (KERNEL_SETS, KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR,
                   LOSS_BYTES_PER_ELEMENT, MASK_BYTES_PER_ELEMENT, RESCALE_SCALE_BYTES,
                   TOKEN_ID_BYTES, VECTOR_CYCLES_PER_ELEMENT)

__all__ = ["LayerGraph", "ModelGraph", "build_layers", "block_kind_names", "layer_kind_name",
           "ring_attention_refusal", "newton_schulz", "weight_matrices",
           "DEFAULT_LOSS_KERNEL", "LOSS_KERNEL_NAMES", "LOSS_KERNELS", "LossKernel",
           "layer_kind_names", "OpGraph", "UNFUSED_ATTENTION_OPS",
           "DEFAULT_RECOMPUTE_MODULES", "RECOMPUTE_MODULES", "canonical_modules",
           "KERNEL_SETS", "KIND_COLLECTIVE", "KIND_FUSED", "KIND_GEMM", "KIND_VECTOR",
           "LOSS_BYTES_PER_ELEMENT", "MASK_BYTES_PER_ELEMENT", "RESCALE_SCALE_BYTES", "TOKEN_ID_BYTES",
           "VECTOR_CYCLES_PER_ELEMENT", "COLLECTIVE_KINDS", "COLL_NONE", "COLL_ALL_REDUCE",
           "COLL_REDUCE_SCATTER", "COLL_ALL_GATHER", "COLL_ALL_TO_ALL", "COLL_P2P"]
