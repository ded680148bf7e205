"""Operator graphs of one layer of one tensor-parallel slice (docs/design.md §2.2).

An :class:`OpGraph` (defined in ``phaze/_opgraph.py``) is a struct of numpy arrays, one
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
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import _config, precision
from ._opgraph import OpGraph
from ._validate import positive_int


#: Operator kinds (the ``kind`` array of an OpGraph).
KIND_GEMM = 0        # tensor GEMM / batched matmul, runs on tensor cores
KIND_VECTOR = 1      # element-wise or reduction work, runs on vector cores
KIND_FUSED = 2       # GEMM with a vector epilogue: one TC + one VC (or all TCs + all VCs)
KIND_COLLECTIVE = 3  # all-reduce over the tensor-parallel group, runs on the chip's link

#: Kernel sets of ``build_layers(kernels=...)``: the study's fusions (the default), or the
#: kernels Megatron-LM launches (what the calibrated step model prices).
KERNEL_SETS = ("study", "megatron")


# ---------------------------------------------------------------------------
# Layer graphs of a model (docs/design.md §2.2)
# ---------------------------------------------------------------------------

#: Vector-core cycles per output element of each vector operator kind: the number of
#: element-wise passes (one lane, one element, one simple op per cycle) the operator needs.
#: ``phaze.cost`` multiplies them by ⌈elements/lanes⌉ / clock. Composite operators add up
#: their parts (e.g. the attention softmax = scale/mask + softmax + dropout).
VECTOR_CYCLES_PER_ELEMENT = {
    # LayerNorm: mean, variance, normalise (subtract, multiply by 1/σ), scale, shift ≈ 5 passes.
    "layernorm": 5.0,
    # RMSNorm: sum of squares, normalise, scale ≈ 3 passes (no mean, no shift).
    "rmsnorm": 3.0,
    # LayerNorm backward: dγ and dβ reductions, mean(g), mean(g·x̂), then
    # dx = (g − mean(g) − x̂·mean(g·x̂))/σ ≈ 8 passes.
    "layernorm_bwd": 8.0,
    # RMSNorm backward: dγ reduction, mean(g·x̂), dx = (g − x̂·mean(g·x̂))/rms ≈ 5 passes.
    "rmsnorm_bwd": 5.0,
    # Softmax over a row: max, subtract+exp, sum, divide ≈ 5 (exp counted as 2).
    "softmax": 5.0,
    # Softmax backward: y·dy, row sum, subtract, multiply by y ≈ 4 passes.
    "softmax_bwd": 4.0,
    # Attention scaling by 1/√d and (causal) masking fused before the softmax: 1 pass.
    "scale_mask": 1.0,
    # GELU, tanh approximation: x³, multiply-add, tanh (≈ 4), 1 + ·, · x/2 ≈ 8.
    "gelu": 8.0,
    # GELU backward: recompute tanh, derivative polynomial, multiply by the gradient ≈ 10.
    "gelu_bwd": 10.0,
    # ReLU: one compare-select; backward: one masked select.
    "relu": 1.0,
    "relu_bwd": 1.0,
    # SwiGLU product silu(gate)·up: exp, add, divide, multiply by gate, multiply by up ≈ 5.
    "swiglu": 5.0,
    # SwiGLU backward: recompute sigmoid, d(up) = g·silu, d(gate) = g·up·σ·(1 + gate·(1−σ)) ≈ 8.
    "swiglu_bwd": 8.0,
    # Bias add: one add.
    "bias": 1.0,
    # Bias gradient: a column-sum pass over the output gradient.
    "bias_grad": 1.0,
    # Dropout: compare a random number, select/scale; it also writes a 1-byte mask ≈ 2.
    "dropout": 2.0,
    # Dropout backward: multiply by the stored mask and scale: 1.
    "dropout_bwd": 1.0,
    # Residual add / gradient accumulation: one add.
    "residual": 1.0,
    "add": 1.0,
    # Rotary position embedding: x·cos + rotate_half(x)·sin with cached tables ≈ 3; its
    # backward is the transposed rotation, the same work.
    "rotary": 3.0,
    "rotary_bwd": 3.0,
    # Embedding gather: copy one row element (plus a range check/mask when vocab-parallel).
    "embedding": 1.0,
    # Embedding gradient: scatter-add (read, add, write) ≈ 2.
    "embedding_bwd": 2.0,
    # Cross-entropy over the logits: max, subtract+exp, sum, log, pick the target ≈ 6.
    "cross_entropy": 6.0,
    # Cross-entropy backward: softmax from the stored exp/sum, subtract one-hot, scale ≈ 3.
    "cross_entropy_bwd": 3.0,
}

#: Bytes of an element of the cross-entropy's saved softmax: Megatron computes the
#: (vocab-parallel) loss in fp32 whatever the training precision.
LOSS_BYTES_PER_ELEMENT = 4
#: Bytes of a token id kept for the embedding's backward scatter (int64 in PyTorch).
TOKEN_ID_BYTES = 8
#: Bytes per element of a dropout mask (one byte per element, as PyTorch's bool masks).
MASK_BYTES_PER_ELEMENT = 1


_C = VECTOR_CYCLES_PER_ELEMENT


@dataclass(frozen=True, eq=False)
class LayerGraph:
    """One layer kind of a model for one tensor-parallel slice.

    - ``kind``: 'embedding' | 'block' | 'head' (head = final norm, logits and loss).
    - ``count``: how many times the layer repeats in the chain.
    - ``forward`` / ``backward``: the OpGraphs of one slice, one microbatch.
    - ``param_bytes``: bytes of this slice's weights (sharded ones divided by t).
    - ``stash_bytes``: activation bytes kept from forward for backward, per microbatch.
    - ``boundary_bytes``: bytes sent to the next layer per microbatch (0 for the head).
    - ``tensor_parallel``: True when the layer is sharded (t > 1).
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


@dataclass(frozen=True, eq=False)
class ModelGraph:
    """A model as a chain of layer kinds: ``layers`` = [embedding, block, head] in chain order."""

    model: object          # phaze.models.ModelSpec
    microbatch: int
    tensor_parallel: int
    layers: tuple
    sequence_parallel: bool = False
    flash_attention: bool = False
    kernels: str = "study"
    dtype: str = precision.DEFAULT_DTYPE

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

    @property
    def param_bytes(self) -> int:
        """Weight bytes of one slice over the whole chain (the head's tied copy included)."""
        return sum(layer.count * layer.param_bytes for layer in self.layers)

    def gemm_flops(self) -> float:
        """Forward + backward GEMM FLOPs of one slice over the whole chain, one microbatch."""
        return float(sum(layer.count * (layer.forward.flops.sum() + layer.backward.flops.sum())
                         for layer in self.layers))


class _Ops:
    """Collects operator dicts for OpGraph.from_ops with compulsory HBM traffic filled in."""

    def __init__(self, bytes_per_element: int, tensor_parallel: int, dtype: str = "bf16"):
        self.B = bytes_per_element
        self.t = tensor_parallel
        self.dtype = dtype
        self.ops = []

    def gemm(self, name, preds, batch, m, k, n, *, epilogue=0.0, extra_in=0):
        """GEMM/BMM (batch, M, K, N); both operands read once, output written once. A
        positive ``epilogue`` (vector cycles per output element) makes it a fused op.
        Under dtype "fp8" the linear layers (``precision.is_fp8_gemm``) read both operands
        in FP8 (1 byte per element) and write their output in 16-bit."""
        fp8 = self.dtype == "fp8" and precision.is_fp8_gemm(name)
        e_in = precision.FP8_BYTES if fp8 else self.B
        self.ops.append(dict(
            name=name, kind=KIND_FUSED if epilogue > 0 else KIND_GEMM, preds=_uniq(preds),
            dims=(batch, m, k, n), cycles_per_element=float(epilogue), elements=batch * m * n,
            bytes_in=batch * (m * k + k * n) * e_in + extra_in,
            bytes_out=batch * m * n * self.B, fp8=fp8))
        return name

    def vector(self, name, preds, elements, cycles, bytes_in, bytes_out):
        self.ops.append(dict(name=name, kind=KIND_VECTOR, preds=_uniq(preds), elements=elements,
                             cycles_per_element=float(cycles), bytes_in=bytes_in,
                             bytes_out=bytes_out))
        return name

    def allreduce(self, name, preds, nbytes, comm_bytes=None):
        """An all-reduce of ``nbytes`` per participant over the t slices; none when t = 1
        (then the producer itself is what follows wait on). ``comm_bytes``: the bytes the
        ring prices (default ``nbytes``)."""
        preds = _uniq(preds)
        if self.t == 1:
            assert len(preds) == 1
            return preds[0]
        self.ops.append(dict(name=name, kind=KIND_COLLECTIVE, preds=preds,
                             comm_bytes=nbytes if comm_bytes is None else comm_bytes,
                             group_size=self.t, elements=nbytes // self.B,
                             bytes_in=nbytes, bytes_out=nbytes))
        return name

    def _sp_collective(self, name, preds, nbytes):
        # Reduce-scatter and all-gather move (n−1)/n of the full tensor per rank in a ring,
        # half an all-reduce's 2(n−1)/n: they are stored as collectives (kind 3, priced as a
        # ring all-reduce) of half the bytes, which gives the exact bandwidth term. Their
        # name prefix ("reduce_scatter_", "allgather_") says what they are; the
        # training-step model (phaze.step) prices them with their own ring latency (n − 1
        # steps, where the all-reduce form charges 2(n − 1)).
        return self.allreduce(name, preds, nbytes, comm_bytes=nbytes // 2)

    def reduce_scatter(self, name, preds, nbytes):
        """Reduce-scatter of an ``nbytes`` tensor (bytes per participant before the
        scatter) over the t slices; none when t = 1. ``name`` must start with
        ``reduce_scatter_``."""
        assert name.startswith("reduce_scatter_")
        return self._sp_collective(name, preds, nbytes)

    def all_gather(self, name, preds, nbytes):
        """All-gather ending with ``nbytes`` on every slice; none when t = 1. ``name`` must
        start with ``allgather_``."""
        assert name.startswith("allgather_")
        return self._sp_collective(name, preds, nbytes)

    def graph(self) -> OpGraph:
        return OpGraph.from_ops(self.ops, bytes_per_element=self.B, dtype=self.dtype)


def _uniq(preds):
    out = []
    for p in preds:
        if p is not None and p not in out:
            out.append(p)
    return out


class _Shape:
    """The sizes of one slice that every builder needs, computed once."""

    def __init__(self, m, b, t, B, sp=False, flash=False, dtype="bf16", kernels="study"):
        self.m, self.b, self.t, self.B = m, b, t, B
        self.sp, self.flash, self.dtype = sp, flash, dtype
        self.megatron = kernels == "megatron"
        # Element size of the stashed FP8 GEMM inputs (precision module docstring).
        self.B8 = precision.FP8_BYTES if dtype == "fp8" else B
        self.s = m.seq_len
        self.T = b * m.seq_len                       # tokens per microbatch
        # Tokens of this slice for the norms, dropouts and residuals: all of them, or
        # their 1/t share under sequence parallelism (s divisible by t is checked).
        self.Tn = self.T // t if sp else self.T
        self.h = m.hidden
        self.hd = m.head_dim
        self.a_t = m.heads // t                      # query heads of this slice
        self.kv_t = m.kv_heads // t                  # key/value heads of this slice
        self.group = m.heads // m.kv_heads           # query heads sharing one K/V head
        self.q_dim = self.a_t * self.hd
        self.kv_dim = self.kv_t * self.hd
        self.f_t = -(-m.ffn_hidden // t)             # MLP columns of this slice (largest shard)
        self.E = m.embed_width
        self.V_t = m.padded_vocab(t) // t            # padded vocabulary columns (compute)
        self.V_rows = -(-m.vocab // t)               # real vocabulary rows (parameters)
        self.norm_w = (2 if m.norm == "layernorm" else 1) * m.hidden   # norm parameters


def _block(sh: _Shape):
    m, B, T, h = sh.m, sh.B, sh.T, sh.h
    b, s = sh.b, sh.s
    Tn, sp, flash = sh.Tn, sh.sp, sh.flash
    ln, ln_bwd = m.norm, m.norm + "_bwd"
    bias_c = _C["bias"] if m.bias else 0.0
    bias_g = _C["bias_grad"] if m.bias else 0.0
    scores = b * sh.a_t * s * s                      # attention score elements of this slice
    qkv_out = sh.q_dim + 2 * sh.kv_dim
    # Flash attention keeps the softmax's log-sum-exp per query row and head, in fp32.
    lse = b * sh.a_t * s * LOSS_BYTES_PER_ELEMENT

    # -- forward --------------------------------------------------------------
    f = _Ops(B, sh.t, sh.dtype)
    f.vector("ln1", [], Tn * h, _C[ln], Tn * h * B + sh.norm_w * B, Tn * h * B)
    # Sequence parallelism: the norm ran on this slice's s/t tokens; the column-parallel
    # GEMMs need all of them (Korthikanti et al. 2022 §4.2.2: g = all-gather).
    src = f.all_gather("allgather_attn", ["ln1"], T * h * B) if sp else "ln1"
    # Column-parallel Q, K, V (separate GEMMs: independent, the scheduler may overlap them).
    for name, width in (("q_proj", sh.q_dim), ("k_proj", sh.kv_dim), ("v_proj", sh.kv_dim)):
        f.gemm(name, [src], 1, T, h, width, epilogue=bias_c, extra_in=width * B if m.bias else 0)
    q_src = k_src = None
    if m.position == "rotary":
        rot = T * (sh.q_dim + sh.kv_dim)
        q_src = k_src = f.vector("rotary", ["q_proj", "k_proj"], rot, _C["rotary"], rot * B, rot * B)
    if flash:
        # One fused kernel (Dao et al. 2022): QKᵀ and P·V tile by tile with an online
        # softmax; the b·a·s² scores never reach HBM. Dims carry the FLOPs of both BMMs
        # (batch b·a/t, M = s, K = head_dim, N = 2s); it reads Q, K, V and writes the
        # context and the log-sum-exp.
        f.ops.append(dict(
            name="flash_attn", kind=KIND_FUSED,
            preds=_uniq([q_src or "q_proj", k_src or "k_proj", "v_proj"]),
            dims=(b * sh.a_t, s, sh.hd, 2 * s),
            cycles_per_element=(_C["scale_mask"] + _C["softmax"] + _C["dropout"]) / 2.0,
            elements=2 * scores,
            bytes_in=T * (sh.q_dim + 2 * sh.kv_dim) * B, bytes_out=T * sh.q_dim * B + lse))
        ctx = "flash_attn"
    else:
        f.gemm("attn_scores", [q_src or "q_proj", k_src or "k_proj"], b * sh.a_t, s, sh.hd, s)
        if sh.megatron:
            # Megatron-LM's FusedScaleMaskSoftmax writes the probabilities; the attention
            # dropout is a separate PyTorch kernel that reads them again and writes the
            # dropped probabilities and the mask.
            f.vector("softmax", ["attn_scores"], scores, _C["scale_mask"] + _C["softmax"],
                     scores * B, scores * B)
            probs = f.vector("attn_dropout", ["softmax"], scores, _C["dropout"], scores * B,
                             scores * (B + MASK_BYTES_PER_ELEMENT))
        else:
            probs = f.vector("softmax", ["attn_scores"], scores,
                             _C["scale_mask"] + _C["softmax"] + _C["dropout"], scores * B,
                             scores * (2 * B + MASK_BYTES_PER_ELEMENT))  # probabilities, dropped, mask
        ctx = f.gemm("attn_context", [probs, "v_proj"], b * sh.a_t, s, s, sh.hd)
    # Row-parallel output projection: partial sums, all-reduced (or, with sequence
    # parallelism, reduce-scattered to the s/t tokens of each slice); its bias is added after.
    f.gemm("out_proj", [ctx], 1, T, sh.q_dim, h)
    if sp:
        src = f.reduce_scatter("reduce_scatter_attn", ["out_proj"], T * h * B)
    else:
        src = f.allreduce("allreduce_attn", ["out_proj"], T * h * B)
    f.vector("residual1", [src], Tn * h, bias_c + _C["dropout"] + _C["residual"],
             2 * Tn * h * B + (h * B if m.bias else 0), Tn * h * (B + MASK_BYTES_PER_ELEMENT))
    f.vector("ln2", ["residual1"], Tn * h, _C[ln], Tn * h * B + sh.norm_w * B, Tn * h * B)
    src = f.all_gather("allgather_mlp", ["ln2"], T * h * B) if sp else "ln2"
    if m.activation == "swiglu":
        for name in ("gate_proj", "up_proj"):
            f.gemm(name, [src], 1, T, h, sh.f_t, epilogue=bias_c,
                   extra_in=sh.f_t * B if m.bias else 0)
        act = f.vector("swiglu", ["gate_proj", "up_proj"], T * sh.f_t, _C["swiglu"],
                       2 * T * sh.f_t * B, T * sh.f_t * B)
    elif sh.megatron:
        # Megatron-LM: FC1 without its bias (skip_bias_add), then one fused bias + GeLU
        # elementwise kernel (--bias-gelu-fusion) that reads the GEMM output back from HBM.
        f.gemm("fc1", [src], 1, T, h, sh.f_t)
        act = f.vector("fc1_act", ["fc1"], T * sh.f_t, bias_c + _C[m.activation],
                       T * sh.f_t * B + (sh.f_t * B if m.bias else 0), T * sh.f_t * B)
    else:
        # FC1 with its bias and activation fused into the GEMM epilogue.
        act = f.gemm("fc1", [src], 1, T, h, sh.f_t, epilogue=bias_c + _C[m.activation],
                     extra_in=sh.f_t * B if m.bias else 0)
    f.gemm("fc2", [act], 1, T, sh.f_t, h)
    if sp:
        src = f.reduce_scatter("reduce_scatter_mlp", ["fc2"], T * h * B)
    else:
        src = f.allreduce("allreduce_mlp", ["fc2"], T * h * B)
    f.vector("residual2", [src], Tn * h, bias_c + _C["dropout"] + _C["residual"],
             2 * Tn * h * B + (h * B if m.bias else 0), Tn * h * (B + MASK_BYTES_PER_ELEMENT))

    # -- backward -------------------------------------------------------------
    g = _Ops(B, sh.t, sh.dtype)
    mask = Tn * h * MASK_BYTES_PER_ELEMENT
    # Dropout backward of the MLP branch (the residual add passes the gradient through);
    # fc2's bias gradient is a column sum fused into this pass.
    g.vector("residual2.bwd", [], Tn * h, _C["dropout_bwd"] + bias_g, Tn * h * B + mask, Tn * h * B)
    # With sequence parallelism the output gradient of a row-parallel GEMM is all-gathered
    # (the backward of the forward reduce-scatter).
    dy = g.all_gather("allgather_fc2.dY", ["residual2.bwd"], T * h * B) if sp else "residual2.bwd"
    g.gemm("fc2.dX", [dy], 1, T, h, sh.f_t)
    g.gemm("fc2.dW", [dy], 1, sh.f_t, T, h)
    # Sequence parallelism stashes the norm outputs sharded (s/t tokens) and all-gathers them
    # again for the weight gradients of the column-parallel GEMMs; Megatron overlaps that
    # all-gather with the input-gradient GEMM (Korthikanti et al. 2022 §4.2.2).
    ln2_full = g.all_gather("allgather_ln2.bwd", [], T * h * B) if sp else None
    if m.activation == "swiglu":
        g.vector("swiglu.bwd", ["fc2.dX"], 2 * T * sh.f_t, _C["swiglu_bwd"] + bias_g,
                 3 * T * sh.f_t * B, 2 * T * sh.f_t * B)
        for name in ("gate_proj", "up_proj"):
            g.gemm(name + ".dX", ["swiglu.bwd"], 1, T, sh.f_t, h)
            g.gemm(name + ".dW", ["swiglu.bwd", ln2_full], 1, h, T, sh.f_t)
        src = g.vector("mlp_in.dX_sum", ["gate_proj.dX", "up_proj.dX"], T * h, _C["add"],
                       2 * T * h * B, T * h * B)
    else:
        g.vector("fc1.act.bwd", ["fc2.dX"], T * sh.f_t, _C[m.activation + "_bwd"] + bias_g,
                 2 * T * sh.f_t * B, T * sh.f_t * B)
        g.gemm("fc1.dX", ["fc1.act.bwd"], 1, T, sh.f_t, h)
        g.gemm("fc1.dW", ["fc1.act.bwd", ln2_full], 1, h, T, sh.f_t)
        src = "fc1.dX"
    if sp:
        src = g.reduce_scatter("reduce_scatter_fc1.dX", [src], T * h * B)
    else:
        src = g.allreduce("allreduce_fc1.dX", [src], T * h * B)
    # LN2 backward, plus the residual stream's gradient (the add of both branches).
    g.vector("ln2.bwd", [src, "residual2.bwd"], Tn * h, _C[ln_bwd] + _C["residual"],
             3 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)
    g.vector("residual1.bwd", ["ln2.bwd"], Tn * h, _C["dropout_bwd"] + bias_g, Tn * h * B + mask,
             Tn * h * B)
    dy = g.all_gather("allgather_out_proj.dY", ["residual1.bwd"], T * h * B) if sp \
        else "residual1.bwd"
    g.gemm("out_proj.dX", [dy], 1, T, h, sh.q_dim)
    g.gemm("out_proj.dW", [dy], 1, sh.q_dim, T, h)
    if flash:
        # The fused backward recomputes the scores from Q, K and the log-sum-exp, then
        # dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax backward, dQ = dS·K, dK = dSᵀ·Q: five BMMs of
        # s·s·head_dim per head (N = 5s). Reads Q, K, V, O, dO, lse; writes dQ, dK, dV.
        g.ops.append(dict(
            name="flash_attn.bwd", kind=KIND_FUSED, preds=["out_proj.dX"],
            dims=(b * sh.a_t, s, sh.hd, 5 * s),
            cycles_per_element=(_C["scale_mask"] + _C["softmax"] + _C["dropout"]
                                + _C["softmax_bwd"] + _C["dropout_bwd"]) / 5.0,
            elements=5 * scores,
            bytes_in=T * (3 * sh.q_dim + 2 * sh.kv_dim) * B + lse,
            bytes_out=T * (sh.q_dim + 2 * sh.kv_dim) * B))
        q_grad = k_grad = v_grad = "flash_attn.bwd"
    else:
        # dP = dO·Vᵀ per query head; dV = Pᵀ·dO summed over the query heads sharing a K/V head
        # (one GEMM of inner size group·s per K/V head).
        g.gemm("attn_context.dX", ["out_proj.dX"], b * sh.a_t, s, sh.hd, s)
        g.gemm("attn_context.dW", ["out_proj.dX"], b * sh.kv_t, s, sh.group * s, sh.hd)
        if sh.megatron:
            # The dropout's backward (gradient and mask in) and the fused softmax's
            # backward (probabilities and gradient in) are two kernels.
            g.vector("attn_dropout.bwd", ["attn_context.dX"], scores, _C["dropout_bwd"],
                     scores * (B + MASK_BYTES_PER_ELEMENT), scores * B)
            g.vector("softmax.bwd", ["attn_dropout.bwd"], scores,
                     _C["softmax_bwd"] + _C["scale_mask"], scores * 2 * B, scores * B)
        else:
            g.vector("softmax.bwd", ["attn_context.dX"], scores,
                     _C["dropout_bwd"] + _C["softmax_bwd"] + _C["scale_mask"],
                     scores * (2 * B + MASK_BYTES_PER_ELEMENT), scores * B)
        # dQ = dS·K; dK = dSᵀ·Q summed over the group.
        g.gemm("attn_scores.dX", ["softmax.bwd"], b * sh.a_t, s, s, sh.hd)
        g.gemm("attn_scores.dW", ["softmax.bwd"], b * sh.kv_t, s, sh.group * s, sh.hd)
        q_grad, k_grad, v_grad = "attn_scores.dX", "attn_scores.dW", "attn_context.dW"
    if m.position == "rotary":
        rot = T * (sh.q_dim + sh.kv_dim)
        q_grad = k_grad = g.vector("rotary.bwd", _uniq([q_grad, k_grad]), rot, _C["rotary_bwd"],
                                   rot * B, rot * B)
    ln1_full = g.all_gather("allgather_ln1.bwd", [], T * h * B) if sp else None
    for name, width, grad in (("q_proj", sh.q_dim, q_grad), ("k_proj", sh.kv_dim, k_grad),
                              ("v_proj", sh.kv_dim, v_grad)):
        g.gemm(name + ".dX", [grad], 1, T, width, h)
        g.gemm(name + ".dW", [grad, ln1_full], 1, h, T, width)
    if m.bias:
        # Q/K/V bias gradients: column sums of their output gradients (a sink).
        g.vector("qkv.dbias", _uniq([q_grad, k_grad, v_grad]), qkv_out, T * _C["bias_grad"],
                 T * qkv_out * B, qkv_out * B)
    src = g.vector("qkv.dX_sum", ["q_proj.dX", "k_proj.dX", "v_proj.dX"], T * h, 2 * _C["add"],
                   3 * T * h * B, T * h * B)
    if sp:
        src = g.reduce_scatter("reduce_scatter_qkv.dX", [src], T * h * B)
    else:
        src = g.allreduce("allreduce_qkv.dX", [src], T * h * B)
    g.vector("ln1.bwd", [src, "residual1.bwd"], Tn * h, _C[ln_bwd] + _C["residual"],
             3 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)

    # -- parameters of the slice ----------------------------------------------------------
    # Sharded: Q/K/V, out_proj and MLP weights, Q/K/V and FC1/gate/up biases.
    # Replicated: the two norms, the row-parallel biases (out_proj, fc2).
    mlp_mats = 3 if m.activation == "swiglu" else 2
    params = 2 * sh.norm_w + h * qkv_out + sh.q_dim * h + mlp_mats * h * sh.f_t
    if m.bias:
        params += qkv_out + h + (mlp_mats - 1) * sh.f_t + h
    # -- stashed activations (Korthikanti et al. 2022, op by op) ---------------------------
    # Megatron, 2-byte elements, no sequence parallelism: sbh·(10 + 24/t) + 5·a·s²·b/t:
    #   ln1 input 2sbh, QKV input 2sbh, Q and K 4sbh/t, V 2sbh/t, softmax output 2as²b/t,
    #   its dropout mask as²b/t, dropout output 2as²b/t, out_proj input 2sbh/t, residual1
    #   dropout mask sbh, ln2 input 2sbh, fc1 input 2sbh, GELU input 8sbh/t, fc2 input 8sbh/t,
    #   residual2 dropout mask sbh.
    # Generalised: Q/K/V widths follow GQA (a·hd, kv·hd), SwiGLU keeps gate and up outputs
    # (2·f/t) where GELU keeps one, RMSNorm and no-bias keep the same inputs.
    # Sequence parallelism keeps the norm inputs, the (sharded, re-gathered in backward)
    # norm outputs and the dropout masks on s/t tokens: sbh·(34/t + 5as/(ht)) (Table 2).
    act_in = (2 if m.activation == "swiglu" else 1) * T * sh.f_t
    core = 2 * scores                      # softmax output and its dropout output
    # Under fp8 the inputs of the FP8 GEMMs are kept in FP8 (B8 = 1 byte; phaze.precision).
    stash = (B * (Tn * h                   # ln1 input
                  + T * (sh.q_dim + sh.kv_dim)  # Q and K for the scores
                  + T * sh.kv_dim          # V for the context
                  + (0 if flash else core)
                  + Tn * h                 # ln2 input
                  + act_in)                # activation input
             + sh.B8 * (Tn * h             # Q/K/V input (ln1 output)
                        + T * sh.q_dim     # out_proj input
                        + Tn * h           # fc1/gate/up input (ln2 output)
                        + T * sh.f_t))     # fc2 input
    if flash and sh.B8 != B:
        stash += B * T * sh.q_dim          # the 16-bit attention output flash's backward reads
    masks = MASK_BYTES_PER_ELEMENT * 2 * Tn * h    # the two residual dropout masks
    if flash:
        # No scores, probabilities or dropout mask (the kernel regenerates the mask from the
        # RNG state): the log-sum-exp instead.
        stash += masks + lse
        selective = stash        # nothing left to recompute: selective = flash's own stash
    else:
        stash += masks + MASK_BYTES_PER_ELEMENT * scores   # + the attention dropout mask
        # Selective recomputation drops the attention core's 5·a·s²·b/t bytes (softmax output,
        # dropout mask, dropout output) and recomputes them from Q and K: sbh·(10 + 24/t).
        selective = stash - B * core - MASK_BYTES_PER_ELEMENT * scores
    # Full recomputation keeps the layer input only: 2·s·b·h (Korthikanti Table 2), its s/t
    # share under sequence parallelism (the input of a sequence-parallel layer is sharded).
    full = B * Tn * h
    return f.graph(), g.graph(), params * B, (stash, selective, full), T * h * B


def _embedding(sh: _Shape):
    m, B, T, h, E = sh.m, sh.B, sh.T, sh.h, sh.E
    Tn, sp = sh.Tn, sh.sp
    learned = m.position == "learned"
    f = _Ops(B, sh.t, sh.dtype)
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

    g = _Ops(B, sh.t, sh.dtype)
    g.vector("embed_out.bwd", [], Tn * h, _C["dropout_bwd"], Tn * h * (B + MASK_BYTES_PER_ELEMENT),
             Tn * h * B)
    if learned:
        g.vector("pos_embed.dW", ["embed_out.bwd"], Tn * h, _C["embedding_bwd"], Tn * h * B,
                 sh.s * h * B)
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


def _head(sh: _Shape):
    m, B, T, h, E = sh.m, sh.B, sh.T, sh.h, sh.E
    Tn, sp = sh.Tn, sh.sp
    logits = T * sh.V_t
    f = _Ops(B, sh.t, sh.dtype)
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
    f.vector("cross_entropy", ["logits"], logits, _C["cross_entropy"], logits * B,
             logits * LOSS_BYTES_PER_ELEMENT)
    # Vocab-parallel cross-entropy all-reduces three fp32 values per token (max, sum of
    # exponentials, target logit).
    f.allreduce("allreduce_loss", ["cross_entropy"], 3 * T * LOSS_BYTES_PER_ELEMENT)

    g = _Ops(B, sh.t, sh.dtype)
    g.vector("cross_entropy.bwd", [], logits, _C["cross_entropy_bwd"],
             logits * LOSS_BYTES_PER_ELEMENT, logits * B)
    g.gemm("logits.dX", ["cross_entropy.bwd"], 1, T, sh.V_t, E)
    g.gemm("logits.dW", ["cross_entropy.bwd"], 1, E, T, sh.V_t)
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
    return f.graph(), g.graph(), params * B, stash, 0


def build_layers(model, microbatch, tensor_parallel, *,
                 bytes_per_element: int = _config.DEFAULT_BYTES_PER_ELEMENT,
                 sequence_parallel: bool = False, flash_attention: bool = False,
                 dtype: str = precision.DEFAULT_DTYPE, kernels: str = "study") -> ModelGraph:
    """Operator graphs of one tensor-parallel slice of ``model`` for one microbatch.

    ``model`` is a ModelSpec or a zoo name; ``microbatch`` samples of ``seq_len`` tokens;
    ``tensor_parallel`` t must divide heads and kv_heads (else ``ValueError``); the
    vocabulary is padded to a multiple of 128·t for compute. Byte counts use
    ``bytes_per_element`` (2: bf16/fp16; under fp8 the size of every tensor that is not
    FP8). Returns a :class:`ModelGraph` whose ``layers`` are
    the embedding (count 1), the transformer block (count n_layers) and the head (count 1).
    Results are memoised: the graphs are immutable.

    Strategy options (keyword-only; the defaults give the study's graphs unchanged):

    - ``sequence_parallel`` (Korthikanti et al. 2022 §4.2.2): the tensor-parallel
      all-reduces become a reduce-scatter after each row-parallel GEMM and an all-gather
      before each column-parallel GEMM (``reduce_scatter_*`` / ``allgather_*`` operators,
      see ``_Ops.reduce_scatter``); norms, dropouts and residual adds run on the slice's
      s/t tokens and their stashed activations shrink by t; backward all-gathers the
      sharded norm outputs again for the weight gradients (``allgather_ln*.bwd``). Needs
      ``seq_len`` divisible by t. A no-op at t = 1 (Megatron-LM turns it off there):
      the graphs are the plain ones.
    - ``flash_attention``: the attention core (scores, scale-mask-softmax, dropout,
      context) is one fused kernel ``flash_attn`` (forward) / ``flash_attn.bwd`` (which
      recomputes the scores), with the FLOPs of QKᵀ and P·V (and the five BMMs of the
      backward); no b·a·s² scores are stashed, the fp32 log-sum-exp is.
    - ``kernels``: "study" (the study's fusions: scale-mask-softmax and the attention
      dropout in one pass; bias and activation in FC1's GEMM epilogue) or "megatron" (the
      kernels Megatron-LM launches, which the calibrated step model prices:
      ``FusedScaleMaskSoftmax`` then a separate ``attn_dropout`` kernel, and their two
      backward kernels ``attn_dropout.bwd`` and ``softmax.bwd``; FC1 as a plain GEMM
      followed by the fused bias + GeLU kernel ``fc1_act``). Stashes are the same.

    - ``dtype``: "bf16" (default) or "fp16" (the same graphs), or "fp8": the linear
      layers' GEMMs read FP8 operands (1 byte per element; ``OpGraph.fp8`` marks them for
      the chip's fp8 tensor rate) and their inputs are stashed in FP8; everything else
      stays 16-bit. Which tensors, and the sources: :mod:`phaze.precision`.

    Every block carries its stash per recomputation mode (:meth:`LayerGraph.stash`):
    none, selective (attention core recomputed), full (layer input only).
    """
    from . import models   # graph sits after models in the flow

    model = models.resolve(model)
    b = positive_int("microbatch", microbatch)
    t = positive_int("tensor_parallel", tensor_parallel)
    B = positive_int("bytes_per_element", bytes_per_element)
    dtype = precision.check_dtype(dtype)
    if model.graph_refusal:  # e.g. mixture-of-experts layers: no operator graphs for them yet
        raise ValueError(model.graph_refusal)
    if not model.valid_tensor_parallel(t):
        raise ValueError(f"tensor_parallel must divide heads ({model.heads}) and kv_heads "
                         f"({model.kv_heads}) of {model.name}; got {t}")
    sp = bool(sequence_parallel) and t > 1
    if sp and model.seq_len % t:
        raise ValueError(f"sequence_parallel needs seq_len ({model.seq_len}) divisible by "
                         f"tensor_parallel ({t})")
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_SETS)}, got {kernels!r}")
    return _build_layers_cached(model, b, t, B, sp, bool(flash_attention), dtype, kernels)


@functools.lru_cache(maxsize=512)
def _build_layers_cached(model, b, t, B, sp=False, flash=False, dtype="bf16",
                         kernels="study") -> ModelGraph:
    sh = _Shape(model, b, t, B, sp, flash, dtype, kernels)
    layers = []
    for kind, count, builder in (("embedding", 1, _embedding), ("block", model.n_layers, _block),
                                 ("head", 1, _head)):
        fwd, bwd, params, stash, boundary = builder(sh)
        stash, selective, full = stash if isinstance(stash, tuple) else (stash, stash, stash)
        layers.append(LayerGraph(kind=kind, count=count, forward=fwd, backward=bwd,
                                 param_bytes=int(params), stash_bytes=int(stash),
                                 boundary_bytes=int(boundary), tensor_parallel=t > 1,
                                 stash_selective_bytes=int(selective),
                                 stash_full_bytes=int(full)))
    return ModelGraph(model=model, microbatch=b, tensor_parallel=t, layers=tuple(layers),
                      sequence_parallel=sp, flash_attention=bool(flash), dtype=dtype,
                      kernels=kernels)
