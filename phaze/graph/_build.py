"""Operator graphs of one layer of one tensor-parallel slice (docs/design.md §2.2).

An :class:`OpGraph` (defined in ``phaze/graph/_opgraph.py``) is a struct of numpy arrays, one
entry per operator, with predecessors in CSR form; it is what ``phaze.cost`` and
``phaze.schedule`` consume.

:func:`build_layers` turns a model into a :class:`ModelGraph`: for each layer kind
(embedding, transformer block, head + loss) a :class:`LayerGraph` holding the
forward and backward OpGraphs of one tensor-parallel slice plus its parameter,
stashed-activation and boundary bytes. Operator names, forward:
``ln1, q_proj, k_proj, v_proj, [rotary], attn_scores, softmax, attn_context,
out_proj, [allreduce_attn], residual1, ln2, fc1 | gate_proj+up_proj+swiglu, fc2,
[allreduce_mlp], residual2``. Backward: every forward GEMM ``G`` becomes two
independent GEMMs ``G.dX`` (gradient of its first operand, the activation) and
``G.dW`` (gradient of its second operand: the weight, or for the attention BMMs
K and V); vector operators ``X`` become ``X.bwd``; the input gradients of the
column-parallel GEMMs are summed (``qkv.dX_sum``, ``mlp_in.dX_sum``) and, when
t > 1, all-reduced (``allreduce_qkv.dX``, ``allreduce_fc1.dX``) before they flow on.
(With ``kernels="megatron"`` Q, K, V are one ``qkv_proj`` GEMM and a gated MLP's gate and
up projections one ``fc1``, so there is nothing to sum.)
Collectives exist only when t > 1.

Strategy options of :func:`build_layers` (defaults: the graphs above, unchanged):
``sequence_parallel`` replaces each all-reduce by ``reduce_scatter_*`` and adds
``allgather_*`` before the column-parallel GEMMs (forward: ``allgather_attn``,
``reduce_scatter_attn``, ``allgather_mlp``, ``reduce_scatter_mlp``; backward the
transposes plus ``allgather_ln1.bwd`` / ``allgather_ln2.bwd`` for the weight gradients),
with norms, dropouts and residuals on s/t tokens; ``flash_attention`` replaces
``attn_scores, softmax, attn_context`` by ``flash_attn`` and their gradients by
``flash_attn.bwd``. Reduce-scatter and all-gather are stored as collectives of half
their tensor's bytes, so the study's ring all-reduce price 2(n−1)/n·comm_bytes/BW is
exactly their (n−1)/n·bytes/BW (the calibrated model's α then counts 2(n−1) ring
steps where they take n − 1; ``phaze.step`` prices them with their own ring).

Issue 15 (defaults unchanged): mixture-of-experts blocks (``expert_parallel``,
``capacity_factor``; ``phaze/graph/_moe.py``), context parallelism
(``context_parallel``: ring attention, ``phaze/graph/_block.py``), multi-head latent
attention (``phaze/graph/_mla.py``) and Qwen2's Q/K/V-only biases. The builders live in
those modules; the operator kinds, cycle table, :class:`Ops` and :class:`Shape` in
``phaze/graph/_ops.py`` (re-exported here).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import _config, precision
from .._cache import Memo
from ._opgraph import OpGraph
from .._validate import positive_float, positive_int


from ._layer import layer as _layer
from ._recompute import DEFAULT_RECOMPUTE_MODULES, module_parts, selective as _selective
from ._loss import DEFAULT_LOSS_KERNEL, LOSS_KERNELS, STUDY as _STUDY_LOSS, add_loss, \
    check_loss_kernel
from ._ops import (KERNEL_SETS, LOSS_BYTES_PER_ELEMENT, MASK_BYTES_PER_ELEMENT, TOKEN_ID_BYTES,
                   Ops, Shape)
from ._ops import VECTOR_CYCLES_PER_ELEMENT as _C



@dataclass(frozen=True, eq=False)
class LayerGraph:
    """One layer kind of a model for one tensor-parallel slice, and one run of it in the chain.

    - ``kind``: 'embedding' | 'block' (dense MLP) | 'moe_block' (mixture-of-experts MLP) |
      'head' (head = final norm, logits and loss).
    - ``count``: how many consecutive chain positions this run covers.
    - ``forward`` / ``backward``: the OpGraphs of one slice, one microbatch.
    - ``param_bytes``: bytes of this slice's weights (sharded ones divided by t; routed
      experts: the n_experts/ep this rank holds).
    - ``stash_bytes``: activation bytes kept from forward for backward, per microbatch.
    - ``boundary_bytes``: bytes sent to the next layer per microbatch (0 for the head).
    - ``tensor_parallel``: True when the layer is sharded (t > 1).
    - ``expert_param_bytes``: the part of ``param_bytes`` held by routed experts (0 but in
      an MoE block): sharded over the expert-parallel group, their gradients are reduced
      over the expert-data-parallel group (d·cp/ep ranks), not over all d·cp.
    """

    kind: str
    count: int
    forward: OpGraph
    backward: OpGraph
    param_bytes: int
    stash_bytes: int
    boundary_bytes: int
    tensor_parallel: bool
    stash_selective_bytes: int = None
    stash_full_bytes: int = None
    expert_param_bytes: int = 0
    recompute_parts: tuple = ()

    def __post_init__(self):
        # Layers that are never checkpointed (embedding, head) keep the same stash in every
        # recomputation mode.
        if self.stash_selective_bytes is None:
            object.__setattr__(self, "stash_selective_bytes", self.stash_bytes)
        if self.stash_full_bytes is None:
            object.__setattr__(self, "stash_full_bytes", self.stash_bytes)

    def stash(self, recompute: str = "none") -> int:
        """Activation bytes kept from forward for backward per microbatch (bytes) under
        ``recompute`` "none" (``stash_bytes``), "selective" (the attention core's scores,
        softmax and dropout are recomputed in backward) or "full" (only the layer input is
        kept: Megatron's checkpointed input)."""
        if recompute == "none":
            return self.stash_bytes
        if recompute == "selective":
            return self.stash_selective_bytes
        if recompute == "full":
            return self.stash_full_bytes
        raise ValueError(f"recompute must be 'none', 'selective' or 'full', got {recompute!r}")

    def selective(self, modules: str = DEFAULT_RECOMPUTE_MODULES) -> tuple:
        """(forward operator names re-run, stash bytes kept, whether the MoE all-to-alls
        re-run) under Megatron-Core's selective recomputation of ``modules`` (canonical
        comma-joined names, ``phaze.graph._recompute``); the default ``core_attn`` keeps
        :meth:`stash` ("selective")."""
        return _selective(self.recompute_parts, modules, self.stash_bytes, self.stash_full_bytes)


@dataclass(frozen=True, eq=False)
class ModelGraph:
    """A model as a chain of layers: ``layers`` holds *runs* of consecutive identical layers
    in chain order, each a LayerGraph whose ``count`` is the run's length — [embedding,
    block, head] for a dense model; for a mixture of experts the dense and MoE blocks in
    the order of ``ModelSpec.moe_layer_ids`` (Mixtral: [embedding, moe_block ×32, head];
    DeepSeek-V2-Lite: [embedding, block ×1, moe_block ×26, head]; an MoE-every-2 pattern
    alternates runs of 1). Runs of the same kind share their OpGraphs and sizes
    (:meth:`kinds` gives one LayerGraph per kind). Expanding the runs in order
    (:meth:`chain`, or ``np.repeat(range(len(layers)), counts)``) gives the chain."""

    model: object          # phaze.models.ModelSpec
    microbatch: int
    tensor_parallel: int
    layers: tuple
    sequence_parallel: bool = False
    flash_attention: bool = False
    kernels: str = "study"
    dtype: str = precision.DEFAULT_DTYPE
    expert_parallel: int = 1
    context_parallel: int = 1
    capacity_factor: float = None

    def chain(self) -> list:
        """The per-layer chain with counts expanded (n_layers + 2 LayerGraphs, the same
        objects repeated), matching layer ids -1 (embedding), 0..L-1 (blocks), L (head)."""
        out = []
        for layer in self.layers:
            out.extend([layer] * layer.count)
        return out

    def layer_ids(self) -> list:
        """Ids of the chain entries as in the original study's placement JSON: −1 … L."""
        return list(range(-1, len(self.chain()) - 1))

    def kinds(self) -> dict:
        """One LayerGraph per layer kind, in chain order of first appearance: 'embedding',
        the transformer-layer kinds ('block', 'moe_block', … :func:`layer_kind_name`),
        'head'."""
        out = {}
        for layer in self.layers:
            out.setdefault(layer.kind, layer)
        return out

    def block_kinds(self) -> list:
        """The transformer-layer kinds' LayerGraphs in :func:`block_kind_names` order (the
        order the step kernels number them in)."""
        kinds = self.kinds()
        return [kinds[name] for name in block_kind_names(self.model)]

    @property
    def expert_param_bytes(self) -> int:
        """Routed-expert weight bytes of one slice over the chain (part of ``param_bytes``)."""
        return sum(layer.count * layer.expert_param_bytes for layer in self.layers)

    @property
    def param_bytes(self) -> int:
        """Weight bytes of one slice over the whole chain (the head's tied copy included)."""
        return sum(layer.count * layer.param_bytes for layer in self.layers)

    def gemm_flops(self) -> float:
        """Forward + backward GEMM FLOPs of one slice over the whole chain, one microbatch."""
        return float(sum(layer.count * (layer.forward.flops.sum() + layer.backward.flops.sum())
                         for layer in self.layers))




def _embedding(sh: Shape):
    m, B, T, h, E = sh.m, sh.B, sh.T, sh.h, sh.E
    Tn, sp = sh.Tn, sh.sp
    learned = m.position == "learned"
    f = Ops(B, sh.t, sh.dtype)
    # Vocab-parallel gather: each slice looks up the ids of its rows (others give zeros) and
    # the partial embeddings are all-reduced (sequence parallel: reduce-scattered to the
    # slice's s/t tokens, which the dropout and the first layer's norm then work on).
    f.vector("embed_gather", [], T * E, _C["embedding"], T * TOKEN_ID_BYTES + T * E * B, T * E * B)
    if sp:
        src = f.reduce_scatter("reduce_scatter_embed", ["embed_gather"], T * E * B)
    else:
        src = f.allreduce("allreduce_embed", ["embed_gather"], T * E * B)
    if m.embed_proj:
        src = f.gemm("project_in", [src], 1, Tn, E, h)     # replicated on every slice
    f.vector("embed_out", [src], Tn * h, (_C["residual"] if learned else 0.0) + _C["dropout"],
             (2 if learned else 1) * Tn * h * B, Tn * h * (B + MASK_BYTES_PER_ELEMENT))

    g = Ops(B, sh.t, sh.dtype)
    g.vector("embed_out.bwd", [], Tn * h, _C["dropout_bwd"], Tn * h * (B + MASK_BYTES_PER_ELEMENT),
             Tn * h * B)
    if learned:
        g.vector("pos_embed.dW", ["embed_out.bwd"], Tn * h, _C["embedding_bwd"], Tn * h * B,
                 sh.s_q * h * B)
    src = "embed_out.bwd"
    if m.embed_proj:
        g.gemm("project_in.dX", [src], 1, Tn, h, E)
        g.gemm("project_in.dW", [src], 1, E, Tn, h)
        src = "project_in.dX"
    if sp:
        # Every vocabulary slice scatters the gradients of all tokens into its rows.
        src = g.all_gather("allgather_embed.dY", [src], T * E * B)
    # Scatter-add into this slice's rows; no collective (the forward all-reduce's backward is
    # the identity on every slice).
    g.vector("embed.dW", [src], T * E, _C["embedding_bwd"], T * TOKEN_ID_BYTES + T * E * B,
             T * E * B)

    params = sh.V_rows * E + (m.max_positions * h if learned else 0) + (E * h if m.embed_proj else 0)
    stash = T * TOKEN_ID_BYTES + Tn * h * MASK_BYTES_PER_ELEMENT + (Tn * E * B if m.embed_proj else 0)
    return f.graph(), g.graph(), params * B, stash, Tn * h * B


def _head(sh: Shape):
    m, B, T, h, E = sh.m, sh.B, sh.T, sh.h, sh.E
    Tn, sp = sh.Tn, sh.sp
    logits = T * sh.V_t
    f = Ops(B, sh.t, sh.dtype)
    src = None
    if m.final_norm:
        src = f.vector("final_norm", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    if m.embed_proj:
        src = f.gemm("project_out", [src], 1, Tn, h, E)     # replicated on every slice
    if sp:
        # The column-parallel logits need every token (sequence parallel: all-gather).
        src = f.all_gather("allgather_head", [src], T * E * B)
    # Column-parallel logits over the padded vocabulary (no bias).
    f.gemm("logits", [src], 1, T, E, sh.V_t)
    # The loss's kernels (plan knob loss_kernel; phaze/graph/_loss.py), forward and backward.
    g = Ops(B, sh.t, sh.dtype)
    loss, loss_bwd = add_loss(f, g, "", logits, sh.loss, B, _C)
    # Vocab-parallel cross-entropy all-reduces three fp32 values per token (max, sum of
    # exponentials, target logit).
    f.allreduce("allreduce_loss", [loss], 3 * T * LOSS_BYTES_PER_ELEMENT)
    g.gemm("logits.dX", [loss_bwd], 1, T, sh.V_t, E)
    g.gemm("logits.dW", [loss_bwd], 1, E, T, sh.V_t)
    if sp:
        src = g.reduce_scatter("reduce_scatter_logits.dX", ["logits.dX"], T * E * B)
    else:
        src = g.allreduce("allreduce_logits.dX", ["logits.dX"], T * E * B)
    if m.embed_proj:
        g.gemm("project_out.dX", [src], 1, Tn, E, h)
        g.gemm("project_out.dW", [src], 1, h, Tn, E)
        src = "project_out.dX"
    if m.final_norm:
        g.vector("final_norm.bwd", [src], Tn * h, _C[m.norm + "_bwd"],
                 2 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)

    # The head keeps its own copy of the (sharded) logits weights even when they are tied to
    # the token table: with pipeline placement the two ends of the chain live on different
    # devices (Megatron keeps both copies and all-reduces their gradients). That copy —
    # vocab·embed_width elements at t = 1 — is the only difference between the chain's
    # parameter bytes and 2·n_params.
    params = sh.V_rows * E + (sh.norm_w if m.final_norm else 0) + (h * E if m.embed_proj else 0)
    # Sequence parallel: the norm and projection inputs and the logits GEMM's input are kept
    # sharded (s/t tokens; the latter re-gathered in backward like the blocks' norm outputs).
    stash = B * ((Tn * h if m.final_norm else 0) + (Tn * h if m.embed_proj else 0) + Tn * E) \
        + logits * LOSS_BYTES_PER_ELEMENT
    for d in range(m.mtp_layers):
        p, st = _mtp_head(f, g, sh, f"mtp{d}.")
        params += p
        stash += st
    return f.graph(), g.graph(), params * B, stash, 0


def _mtp_head(f: Ops, g: Ops, sh: Shape, p: str) -> tuple:
    """One multi-token-prediction module's operators outside its transformer layer
    (DeepSeek-V3 §2.2; Megatron-Core's ``MultiTokenPredictionLayer``), appended to the
    head's ``f`` and ``g``: the shifted tokens' embedding (the shared table, gathered and
    reduced as the embedding does), its norm and the hidden state's (``enorm``,
    ``hnorm``), the column-parallel ``eh_proj`` of the concatenation 2·h → h (all-gathered
    back to h; Megatron's gather_output=False then gather of the last dimension), and after
    the layer the final norm, the logits over the shared output weights and the loss.
    Returns its (parameters in elements, stash in bytes): the three norms and eh_proj's
    2·h·h/t (the embedding and the output weights are the main model's)."""
    m, B, T, h, E, Tn, sp, t = sh.m, sh.B, sh.T, sh.h, sh.E, sh.Tn, sh.sp, sh.t
    logits = T * sh.V_t
    ht = -(-h // t)
    f.vector(p + "embed_gather", [], T * E, _C["embedding"], T * TOKEN_ID_BYTES + T * E * B,
             T * E * B)
    emb = (f.reduce_scatter("reduce_scatter_" + p + "embed", [p + "embed_gather"], T * E * B) if sp
           else f.allreduce("allreduce_" + p + "embed", [p + "embed_gather"], T * E * B))
    f.vector(p + "enorm", [emb], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    f.vector(p + "hnorm", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    src = [p + "enorm", p + "hnorm"]
    if sp:
        src = [f.all_gather("allgather_" + p + "eh", src, 2 * T * h * B)]
    f.gemm(p + "eh_proj", src, 1, T, 2 * h, ht)
    f.all_gather("allgather_" + p + "eh_out", [p + "eh_proj"], T * h * B)
    f.vector(p + "final_norm", [], Tn * h, _C[m.norm], Tn * h * B + sh.norm_w * B, Tn * h * B)
    x = f.all_gather("allgather_" + p + "head", [p + "final_norm"], T * E * B) if sp \
        else p + "final_norm"
    f.gemm(p + "logits", [x], 1, T, E, sh.V_t)
    loss, loss_bwd = add_loss(f, g, p, logits, sh.loss, B, _C)
    f.allreduce("allreduce_" + p + "loss", [loss], 3 * T * LOSS_BYTES_PER_ELEMENT)
    g.gemm(p + "logits.dX", [loss_bwd], 1, T, sh.V_t, E)
    g.gemm(p + "logits.dW", [loss_bwd], 1, E, T, sh.V_t)
    dx = (g.reduce_scatter("reduce_scatter_" + p + "logits.dX", [p + "logits.dX"], T * E * B) if sp
          else g.allreduce("allreduce_" + p + "logits.dX", [p + "logits.dX"], T * E * B))
    g.vector(p + "final_norm.bwd", [dx], Tn * h, _C[m.norm + "_bwd"],
             2 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)
    g.gemm(p + "eh_proj.dX", [], 1, T, ht, 2 * h)
    x = g.all_gather("allgather_" + p + "eh.bwd", [], 2 * T * h * B) if sp else None
    g.gemm(p + "eh_proj.dW", [x], 1, 2 * h, T, ht)
    dx = g.tp_reduce(p + "eh.dX", p + "eh_proj.dX", 2 * T * h * B, sp)
    for n in ("enorm", "hnorm"):
        g.vector(p + n + ".bwd", [dx], Tn * h, _C[m.norm + "_bwd"],
                 2 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)
    params = 3 * sh.norm_w + 2 * h * ht
    stash = B * (3 * Tn * h + Tn * E) + sh.B8 * 2 * Tn * h + logits * LOSS_BYTES_PER_ELEMENT
    return params, stash


def build_layers(model, microbatch, tensor_parallel, *,
                 bytes_per_element: int = _config.DEFAULT_BYTES_PER_ELEMENT,
                 sequence_parallel: bool = False, flash_attention: bool = False,
                 dtype: str = precision.DEFAULT_DTYPE, kernels: str = "study",
                 expert_parallel: int = 1, capacity_factor: float = None,
                 context_parallel: int = 1, loss_kernel: str = None) -> ModelGraph:
    """Operator graphs of one tensor-parallel slice of ``model`` for one microbatch.

    ``model`` is a ModelSpec or a zoo name; ``microbatch`` samples of ``seq_len`` tokens;
    ``tensor_parallel`` t must divide heads and kv_heads (else ``ValueError``); the
    vocabulary is padded to a multiple of 128·t for compute. Byte counts use
    ``bytes_per_element`` (2: bf16/fp16; under fp8 the size of every tensor that is not
    FP8). Returns a :class:`ModelGraph` whose ``layers`` are the runs of the chain: the
    embedding (count 1), the transformer blocks (a dense model: one run 'block' of count
    n_layers; a mixture of experts: runs of 'block' and 'moe_block' in the order of
    ``ModelSpec.moe_layer_ids``) and the head (count 1).
    Results are memoised: the graphs are immutable.

    Strategy options (keyword-only; the defaults give the study's graphs unchanged):

    - ``sequence_parallel`` (Korthikanti et al. 2022 §4.2.2): the tensor-parallel
      all-reduces become a reduce-scatter after each row-parallel GEMM and an all-gather
      before each column-parallel GEMM (``reduce_scatter_*`` / ``allgather_*`` operators,
      see ``Ops.reduce_scatter``); norms, dropouts and residual adds run on the slice's
      s/t tokens and their stashed activations shrink by t; backward all-gathers the
      sharded norm outputs again for the weight gradients (``allgather_ln*.bwd``). Needs
      ``seq_len`` divisible by t (by t·cp with context parallelism). A no-op at t = 1
      (Megatron-LM turns it off there): the graphs are the plain ones. A
      mixture-of-experts model with t > 1 needs it (Megatron-Core's rule).
    - ``flash_attention``: the attention core (scores, scale-mask-softmax, dropout,
      context) is one fused kernel ``flash_attn`` (forward) / ``flash_attn.bwd`` (which
      recomputes the scores), with the FLOPs of QKᵀ and P·V (and the five BMMs of the
      backward); no b·a·s² scores are stashed, the fp32 log-sum-exp is.
    - ``kernels``: "study" (the study's fusions: scale-mask-softmax and the attention
      dropout in one pass; bias and activation in FC1's GEMM epilogue) or "megatron" (the
      kernels Megatron-LM launches, which the calibrated step model prices: one
      ``qkv_proj`` GEMM (Megatron's fused ``query_key_value``; backward ``qkv_proj.dX``
      and ``qkv_proj.dW``, no sum of three input gradients); ``FusedScaleMaskSoftmax``
      then a separate ``attn_dropout`` kernel, and their two backward kernels
      ``attn_dropout.bwd`` and ``softmax.bwd``; FC1 as a plain GEMM followed by the fused
      bias + GeLU kernel ``fc1_act``, or for a gated MLP one ``fc1`` of width 2·ffn/t
      then ``swiglu`` (Megatron-Core's ``linear_fc1``)). FLOPs, stashes and parameters
      are the same as the study's.
    - ``dtype``: "bf16" (default) or "fp16" (the same graphs), or "fp8": the linear
      layers' GEMMs (experts' included) read FP8 operands (1 byte per element;
      ``OpGraph.fp8`` marks them for the chip's fp8 tensor rate) and their inputs are
      stashed in FP8; everything else stays 16-bit. Which tensors, and the sources:
      :mod:`phaze.precision`.
    - ``expert_parallel`` ep (mixture-of-experts models; 1 otherwise): each rank holds
      n_experts/ep routed experts and the tokens travel by all-to-all over the ep ranks
      (``alltoall_dispatch``, ``alltoall_combine`` and their backward); ep divides
      n_experts. ``capacity_factor``: None (balanced routing: every expert receives
      tokens·top_k/n_experts) or a positive factor (Megatron-Core's expert capacity, tokens
      dropped or padded to it). The MoE block, the parallelism rule (expert-tensor-parallel
      = t) and the all-to-all price: ``phaze/graph/_moe.py``.
    - ``context_parallel`` cp: each rank holds s/cp tokens of every sample (ring
      attention; causal models load-balanced over 2·cp chunks as Megatron-Core does);
      needs ``flash_attention`` and seq_len divisible by 2·cp (cp for an encoder).
      Every token-proportional operator, stash and boundary shrinks by cp; the attention
      core is 1/cp of the full one; the K/V exchange (``ring_kv_exchange``) may overlap
      the attention compute: ``phaze/graph/_block.py``.

    - ``loss_kernel`` (kernels "megatron" only): the head's cross-entropy as the trainer's
      kernels run it, one of ``LOSS_KERNELS`` ("native-fused", the default, and "native":
      Megatron-Core's jit-fused and unfused ones; "te": Transformer Engine's Triton
      kernels): their passes over the logits, ``phaze/graph/_loss.py``. The study's graphs
      keep its single fused pass each way.

    Every block carries its stash per recomputation mode (:meth:`LayerGraph.stash`):
    none, selective (attention core recomputed), full (layer input only).
    """
    from .. import models   # graph sits after models in the flow

    model = models.resolve(model)
    b = positive_int("microbatch", microbatch)
    t = positive_int("tensor_parallel", tensor_parallel)
    B = positive_int("bytes_per_element", bytes_per_element)
    dtype = precision.check_dtype(dtype)
    ep = positive_int("expert_parallel", expert_parallel)
    cp = positive_int("context_parallel", context_parallel)
    if model.op_graph_refusal:  # a structure phaze does not model: never a stand-in graph
        raise ValueError(model.op_graph_refusal)
    if not model.valid_tensor_parallel(t):
        mamba = (f", mamba_heads ({model.mamba_heads}) and mamba_groups ({model.mamba_groups})"
                 if model.has_mamba else "")
        raise ValueError(f"tensor_parallel must divide heads ({model.heads}), kv_heads "
                         f"({model.kv_heads}){mamba} of {model.name}; got {t}")
    if model.is_moe:
        if model.n_experts % ep:
            raise ValueError(f"expert_parallel must divide n_experts ({model.n_experts}) of "
                             f"{model.name}; got {ep}")
        if capacity_factor is not None:
            capacity_factor = positive_float("capacity_factor", capacity_factor)
        if t > 1 and not sequence_parallel:
            raise ValueError(f"{model.name} is a mixture of experts: tensor_parallel {t} > 1 "
                             f"needs sequence_parallel=True (as in Megatron-Core)")
    elif ep != 1 or capacity_factor is not None:
        what = "expert_parallel must be 1" if ep != 1 else "capacity_factor must be None"
        raise ValueError(f"{what} for {model.name}, which has no experts (n_experts = 0)")
    if cp > 1 and ring_attention_refusal(model):
        raise ValueError(ring_attention_refusal(model))
    if cp > 1:
        if not flash_attention:
            raise ValueError(f"context_parallel {cp} > 1 needs flash_attention=True (ring "
                             f"attention runs in the fused attention kernel)")
        chunks = 2 * cp if model.causal else cp
        if model.seq_len % chunks:
            raise ValueError(f"context_parallel {cp} needs seq_len ({model.seq_len}) divisible "
                             f"by {chunks} ({'2·cp load-balanced chunks' if model.causal else 'cp'})")
    sp = bool(sequence_parallel) and t > 1
    if sp and (model.seq_len // cp) % t:
        raise ValueError(f"sequence_parallel needs seq_len ({model.seq_len}) divisible by "
                         f"tensor_parallel ({t})" + (f" × context_parallel ({cp})" if cp > 1 else ""))
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_SETS)}, got {kernels!r}")
    if kernels == "study":
        if loss_kernel is not None:
            raise ValueError(f"loss_kernel applies to kernels='megatron' only (the study's "
                             f"graphs have one fused loss); got {loss_kernel!r}")
        loss = "study"
    else:
        loss = check_loss_kernel(DEFAULT_LOSS_KERNEL if loss_kernel is None else loss_kernel)
    return _build_layers_cached(model, b, t, B, sp, bool(flash_attention), dtype, kernels,
                                ep, capacity_factor, cp, loss)


#: Built model graphs by their validated arguments (512 kept; the graphs are immutable).
_LAYERS_MEMO = Memo(512, name="graph.build_layers")


#: LayerGraph kind of the two layer kinds of a transformer: attention with a dense MLP, and
#: attention with a mixture of experts. Every other (token mixer, channel mixer) pair of
#: ``ModelSpec.layer_kinds`` is named "mixer+ffn" (:func:`layer_kind_name`).
LEGACY_KIND_NAMES = {("attention", "dense"): "block", ("attention", "moe"): "moe_block"}


def layer_kind_name(mixer: str, ffn: str) -> str:
    """The LayerGraph kind of a layer of token mixer ``mixer`` and channel mixer ``ffn``
    (``ModelSpec.layer_kinds``): 'block', 'moe_block', or e.g. 'sliding+moe',
    'mamba+none', 'none+dense'."""
    return LEGACY_KIND_NAMES.get((mixer, ffn), f"{mixer}+{ffn}")


def layer_kind_names(model) -> list:
    """The LayerGraph kind of each of the model's n_layers transformer layers."""
    return [layer_kind_name(mixer, ffn) for mixer, ffn in model.layer_kinds]


def block_kind_names(model) -> tuple:
    """The model's distinct transformer-layer kinds in the step kernels' order: 'block',
    then 'moe_block', then the others in the order they first appear."""
    names = layer_kind_names(model)
    first = [k for k in ("block", "moe_block") if k in names]
    return tuple(first + [k for k in dict.fromkeys(names) if k not in first])


def ring_attention_refusal(model) -> str:
    """Why context parallelism cannot run ``model`` ('' when it can): ring attention is
    modelled for full attention only; a sliding-window or chunked mask and a Mamba-2 scan
    (whose state would pass along the ring) are not (Transformer Engine's context-parallel
    attention takes no sliding window; Megatron-Core's hybrid models ran without it)."""
    other = sorted({mixer for mixer, _ in model.layer_kinds} - {"attention", "none"})
    if other:
        return (f"context_parallel > 1 is not modelled for {model.name}'s "
                f"{', '.join(other)} layers (ring attention is priced for full attention only)")
    return ""


def _block_runs(model) -> list:
    """(kind, count) of the runs of transformer layers in chain order."""
    runs = []
    for kind in layer_kind_names(model):
        if runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        else:
            runs.append([kind, 1])
    return runs


def _build_layers_cached(model, b, t, B, sp=False, flash=False, dtype="bf16",
                         kernels="study", ep=1, capacity_factor=None, cp=1,
                         loss="study") -> ModelGraph:
    """:func:`build_layers` of validated arguments, memoised (:data:`_LAYERS_MEMO`);
    ``loss``: a ``LOSS_KERNELS`` name, or "study"."""
    key = (model, b, t, B, sp, flash, dtype, kernels, ep, capacity_factor, cp, loss)
    return _LAYERS_MEMO.get_or_compute(
        key, lambda: _build_layers(model, b, t, B, sp, flash, dtype, kernels, ep,
                                   capacity_factor, cp, loss))


def _build_layers(model, b, t, B, sp, flash, dtype, kernels, ep, capacity_factor,
                  cp, loss="study") -> ModelGraph:
    sh = Shape(model, b, t, B, sp, flash, dtype, kernels, cp, ep, capacity_factor,
               _STUDY_LOSS if loss == "study" else LOSS_KERNELS[loss])
    builders = {"embedding": _embedding, "head": _head}
    mixers = {layer_kind_name(mixer, ffn): (mixer, ffn) for mixer, ffn in set(model.layer_kinds)}
    for mixer, ffn in set(model.layer_kinds):
        builders[layer_kind_name(mixer, ffn)] = \
            lambda sh_, mixer=mixer, ffn=ffn: _layer(sh_, mixer, ffn)
    runs = _block_runs(model)
    if model.mtp_layers:
        # the multi-token-prediction modules' transformer layers (of the last layer's kind),
        # before the head that holds their norms, projections and losses
        runs.append([layer_kind_names(model)[-1], model.mtp_layers])
    built = {}
    layers = []
    for kind, count in [("embedding", 1)] + runs + [("head", 1)]:
        if kind not in built:
            out = builders[kind](sh)
            fwd, bwd, params, stash, boundary = out[:5]
            stash, selective, full = stash if isinstance(stash, tuple) else (stash, stash, stash)
            built[kind] = dict(kind=kind, forward=fwd, backward=bwd, param_bytes=int(params),
                               stash_bytes=int(stash), boundary_bytes=int(boundary),
                               tensor_parallel=t > 1, stash_selective_bytes=int(selective),
                               stash_full_bytes=int(full),
                               expert_param_bytes=int(out[5]) if len(out) > 5 else 0)
            if kind in mixers:
                mixer, ffn = mixers[kind]
                built[kind]["recompute_parts"] = module_parts(
                    sh.for_mixer(mixer), mixer, ffn, fwd.names, int(stash) - int(selective))
        layers.append(LayerGraph(count=count, **built[kind]))
    return ModelGraph(model=model, microbatch=b, tensor_parallel=t, layers=tuple(layers),
                      sequence_parallel=sp, flash_attention=bool(flash), dtype=dtype,
                      kernels=kernels, expert_parallel=ep, context_parallel=cp,
                      capacity_factor=capacity_factor)
