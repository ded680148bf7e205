"""Building blocks of the operator graphs of :mod:`phaze.graph`: operator kinds, the
vector-cycle table, element sizes, the operator collector :class:`Ops` and the slice
sizes :class:`Shape`. Shared by ``graph`` and the block builders (``_graph_block``,
``_graph_moe``); ``phaze.graph`` re-exports the public constants.
"""
from __future__ import annotations

import copy

from .. import precision
from ._opgraph import (COLL_ALL_GATHER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_P2P,
                       COLL_REDUCE_SCATTER, OpGraph)

#: Operator kinds (the ``kind`` array of an OpGraph).
KIND_GEMM = 0        # tensor GEMM / batched matmul, runs on tensor cores
KIND_VECTOR = 1      # element-wise or reduction work, runs on vector cores
KIND_FUSED = 2       # GEMM with a vector epilogue: one TC + one VC (or all TCs + all VCs)
KIND_COLLECTIVE = 3  # collective over a parallel group (tp all-reduce, sp, ep all-to-all, cp ring)

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
    # Squared ReLU, relu(x)²: a compare-select and a multiply ≈ 2; backward 2·relu(x)·dy ≈ 2.
    "squared_relu": 2.0,
    "squared_relu_bwd": 2.0,
    # SwiGLU product silu(gate)·up: exp, add, divide, multiply by gate, multiply by up ≈ 5.
    "swiglu": 5.0,
    # SwiGLU backward: recompute sigmoid, d(up) = g·silu, d(gate) = g·up·σ·(1 + gate·(1−σ)) ≈ 8.
    "swiglu_bwd": 8.0,
    # GeGLU product gelu(gate)·up (Gemma): GELU (8) and the multiply by up ≈ 9; backward:
    # GELU's backward (10) and the two products' gradients ≈ 12.
    "geglu": 9.0,
    "geglu_bwd": 12.0,
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
    # Mixture of experts. Top-k selection: one compare-select pass over the router's row per
    # expert chosen (the softmax before it is counted as above).
    "topk": 1.0,
    # Token permutation (gather into expert order, or its scatter back): one copy.
    "permute": 1.0,
    # Weighted sum of a token's expert outputs: one multiply-add (2) per expert output.
    "scale_add": 2.0,
    # Sigmoid (Qwen2-MoE's shared-expert gate): exp (2), add, divide ≈ 4; backward
    # σ·(1 − σ)·g ≈ 3.
    "sigmoid": 4.0,
    "sigmoid_bwd": 3.0,
}

#: Bytes of one scale read by a backward GEMM's output-scaling pass (torchao's row-wise
#: scales are fp32; ``precision.Datatype.backward_rescale``).
RESCALE_SCALE_BYTES = 4
#: Bytes of an element of the cross-entropy's saved softmax: Megatron computes the
#: (vocab-parallel) loss in fp32 whatever the training precision.
LOSS_BYTES_PER_ELEMENT = 4
#: Bytes of a token id kept for the embedding's backward scatter (int64 in PyTorch).
TOKEN_ID_BYTES = 8
#: Bytes per element of a dropout mask (one byte per element, as PyTorch's bool masks).
MASK_BYTES_PER_ELEMENT = 1
#: Bytes of one routed expert's index kept per token and choice (int64, as torch.topk).
EXPERT_INDEX_BYTES = 8
#: Query rows of one tile of a causal flash-attention kernel (FlashAttention-2 and -3 at head
#: dim 64-128, kBlockM = 128): each tile computes the key tiles up to and including the one on
#: the diagonal, in full, and skips the rest (docs/fidelity-sources.md §1.5).
FLASH_CAUSAL_BLOCK = 128


def flash_keys(s: int, causal: bool) -> int:
    """Keys per query a flash-attention kernel computes, on average, over a sequence of ``s``
    tokens: ``s`` without a causal mask; with one, the s × s square cut into query tiles of
    B = :data:`FLASH_CAUSAL_BLOCK` rows, tile i computing keys 0 … min((i+1)·B, s) − 1 (the
    diagonal tile in full, masked inside): Σ_i rows_i · min((i+1)·B, s) / s, rounded up —
    (s + B)/2 when B divides s, so (n + 1)/(2n) of the square for n = s/B tiles. The same
    count for a context-parallel rank's 1/cp share (load-balanced chunks: every rank does
    1/cp of the causal work). s ≤ B: the full square (one tile, all of it computed)."""
    if not causal or s <= FLASH_CAUSAL_BLOCK:
        return int(s)
    b = FLASH_CAUSAL_BLOCK
    full, last = divmod(int(s), b)
    computed = b * b * full * (full + 1) // 2 + last * s  # score elements of one head
    return -(-computed // int(s))


def _tile_keys(s: int, first_key) -> int:
    """Keys per query, on average, a causal flash-attention kernel computes when query tile
    i (rows i·B … of B = :data:`FLASH_CAUSAL_BLOCK`) computes the whole key tiles from the
    one holding key ``first_key(i·B)`` to its diagonal tile: Σ_i rows_i · (min((i+1)·B, s) −
    B·⌊first_key(i·B)/B⌋) / s, rounded up (the local-attention block rule of
    FlashAttention-2; s > B)."""
    b = FLASH_CAUSAL_BLOCK
    computed = 0
    for i in range(-(-s // b)):
        rows = min((i + 1) * b, s) - i * b
        computed += rows * (min((i + 1) * b, s) - b * (first_key(i * b) // b))
    return -(-computed // s)


def flash_keys_window(s: int, window: int) -> int:
    """Keys per query a causal flash-attention kernel computes, on average, with a sliding
    window of ``window`` keys (query i sees keys i − window < j ≤ i; FlashAttention-2's
    ``window_size=(window − 1, 0)``, Hugging Face's ``sliding_window``): query tile i
    computes from the tile holding key max(0, i·B − window + 1) (:func:`_tile_keys`). A
    window of s or more is the causal count (:func:`flash_keys`)."""
    s, w = int(s), int(window)
    if w >= s:
        return flash_keys(s, True)
    if s <= FLASH_CAUSAL_BLOCK:
        return s
    return _tile_keys(s, lambda q: max(0, q - w + 1))


def flash_keys_chunked(s: int, chunk: int) -> int:
    """Keys per query a causal flash-attention kernel computes, on average, under Llama 4's
    chunked attention (causal inside aligned chunks of ``chunk`` tokens; Hugging Face's
    ``attention_chunk_size``): query tile i computes from the tile holding its chunk's first
    key, C·⌊i·B/C⌋ (:func:`_tile_keys`). A chunk of s or more is the causal count."""
    s, c = int(s), int(chunk)
    if c >= s:
        return flash_keys(s, True)
    if s <= FLASH_CAUSAL_BLOCK:
        return s
    return _tile_keys(s, lambda q: c * (q // c))


_C = VECTOR_CYCLES_PER_ELEMENT

#: Gated activations: the MLP's first linear layer has a gate and an up projection, their
#: product (act(gate)·up) feeds the second (SwiGLU; Gemma's GeGLU).
GATED = ("swiglu", "geglu")


class Ops:
    """Collects operator dicts for OpGraph.from_ops with compulsory HBM traffic filled in."""

    def __init__(self, bytes_per_element: int, tensor_parallel: int, dtype: str = "bf16"):
        self.B = bytes_per_element
        self.t = tensor_parallel
        self.dtype = dtype
        self.dt = precision.datatype(dtype)
        self.low = self.dt.low_precision
        self.ops = []
        self._quant = {}
        self._quant_of = {}     # GEMM base name → its dY quantisation (for the .dW)
        self._rescaled = {}     # backward GEMM name → the pass scaling its output

    def gemm(self, name, preds, batch, m, k, n, *, epilogue=0.0, extra_in=0):
        """GEMM/BMM (batch, M, K, N); both operands read once, output written once. A
        positive ``epilogue`` (vector cycles per output element) makes it a fused op.
        Under a low-precision dtype (``precision.LOW_PRECISION``) the linear layers
        (``precision.is_fp8_gemm``) read both operands at the type's ``element_bytes``
        (scales included) and write their output in 16-bit; the quantisation of the
        activation operand (forward: the input X; ``.dX``: the output gradient dY, which
        the ``.dW`` GEMM reads too) is its own memory-bound operator before the GEMM
        (:meth:`quantise`)."""
        fp8 = self.low and precision.is_fp8_gemm(name)
        e_in = self.dt.element_bytes if fp8 else self.B
        if fp8 and not name.endswith(".dW"):
            preds = [self.quantise(name, preds, batch * m * k)]
            if self.dt.weight_cast == "microbatch":
                preds.append(self.quantise_weight(name, batch * k * n))
        elif fp8 and name[:-3] in self._quant_of:
            # the weight gradient reads the column-wise copy of the dgrad's quantised dY
            preds = list(preds) + [self._quant_of[name[:-3]]]
        self.ops.append(dict(
            name=name, kind=KIND_FUSED if epilogue > 0 else KIND_GEMM, preds=uniq(preds),
            dims=(batch, m, k, n), cycles_per_element=float(epilogue), elements=batch * m * n,
            bytes_in=int(round(batch * (m * k + k * n) * e_in)) + extra_in,
            bytes_out=batch * m * n * self.B, fp8=fp8))
        if fp8 and self.dt.backward_rescale and name.endswith((".dX", ".dW")) \
                and not name.startswith("expert_"):
            self.rescale(name, batch, m, n)
        return name

    def rescale(self, name, batch, m, n):
        """The pass scaling the ``batch``·m×n 16-bit output of the backward GEMM ``name``
        by its operands' scale vectors (``precision.Datatype.backward_rescale``): one read
        and one write of the output, the m + n fp32 scales read, one multiply per element.
        Every operator reading the GEMM's output waits on it instead (:meth:`graph`)."""
        elements = batch * m * n
        rname = self.vector(name + ".rescale", [name], elements, _C["add"],
                            elements * self.B + batch * (m + n) * RESCALE_SCALE_BYTES,
                            elements * self.B)
        self._rescaled[name] = rname
        return rname

    def quantise_weight(self, name, elements):
        """torchao's cast of a linear layer's ``elements``-element 16-bit weight for the
        GEMM ``name`` (``Datatype.weight_cast`` "microbatch": once for the forward
        ``NAME.w.quant``, again for the dgrad ``NAME.wT.quant``): ``quant_reads`` reads,
        one low-precision layout written. Returns its name."""
        d = self.dt
        qname = name[:-3] + ".wT.quant" if name.endswith(".dX") else name + ".w.quant"
        return self.vector(qname, [], elements,
                           d.quant_reads * precision.QUANT_CYCLES_PER_ELEMENT,
                           d.quant_reads * elements * self.B, int(round(elements * d.element_bytes)))

    def quantise(self, name, preds, elements):
        """The quantisation of a low-precision GEMM's ``elements``-element activation
        operand (the GEMM ``name``'s input, or its output gradient for ``NAME.dX``), as
        Transformer Engine / torchao run it: ``quant_reads`` passes over the 16-bit tensor
        writing ``quant_layouts`` low-precision copies (row-wise for this GEMM, column-wise
        for the weight-gradient GEMM) at ``element_bytes`` each (``precision.Datatype``).
        One operator per tensor: GEMMs reading the same tensor (separate q/k/v or gate/up
        projections of one input) share it. Returns its name."""
        backward = name.endswith(".dX")
        # one forward input feeds several GEMMs (q/k/v, gate/up): one quantisation; each
        # output gradient is its own tensor, even when two come from one producer
        key = (name,) if backward else (tuple(uniq(preds)), int(elements))
        if key in self._quant:
            return self._quant[key]
        d = self.dt
        qname = (name[:-3] + ".dY" if backward else name + ".x") + ".quant"
        if backward:
            self._quant_of[name[:-3]] = qname
        self.vector(qname, preds, elements, d.quant_reads * precision.QUANT_CYCLES_PER_ELEMENT,
                    d.quant_reads * elements * self.B,
                    int(round(d.quant_layouts * elements * d.element_bytes)))
        self._quant[key] = qname
        return qname

    def vector(self, name, preds, elements, cycles, bytes_in, bytes_out):
        self.ops.append(dict(name=name, kind=KIND_VECTOR, preds=uniq(preds), elements=elements,
                             cycles_per_element=float(cycles), bytes_in=bytes_in,
                             bytes_out=bytes_out))
        return name

    def allreduce(self, name, preds, nbytes, comm_bytes=None, collective=COLL_ALL_REDUCE):
        """An all-reduce of ``nbytes`` per participant over the t slices; none when t = 1
        (then the producer itself is what follows wait on). ``comm_bytes``: the bytes the
        ring prices (default ``nbytes``); ``collective``: its ``OpGraph.collective`` code."""
        preds = uniq(preds)
        if self.t == 1:
            assert len(preds) == 1
            return preds[0]
        self.ops.append(dict(name=name, kind=KIND_COLLECTIVE, preds=preds,
                             comm_bytes=nbytes if comm_bytes is None else comm_bytes,
                             group_size=self.t, elements=nbytes // self.B,
                             bytes_in=nbytes, bytes_out=nbytes, collective=collective))
        return name

    def _sp_collective(self, name, preds, nbytes, collective):
        # Reduce-scatter and all-gather move (n−1)/n of the full tensor per rank in a ring,
        # half an all-reduce's 2(n−1)/n: they are stored as collectives (kind 3, priced as a
        # ring all-reduce by phaze.cost) of half the bytes, which gives the exact bandwidth
        # term. Their ``collective`` code says what they are; the training-step model
        # (phaze.step) prices them with their own ring latency (n − 1 steps, where the
        # all-reduce form charges 2(n − 1)).
        return self.allreduce(name, preds, nbytes, comm_bytes=nbytes // 2, collective=collective)

    def reduce_scatter(self, name, preds, nbytes):
        """Reduce-scatter of an ``nbytes`` tensor (bytes per participant before the
        scatter) over the t slices; none when t = 1. ``name`` must start with
        ``reduce_scatter_``."""
        assert name.startswith("reduce_scatter_")
        return self._sp_collective(name, preds, nbytes, COLL_REDUCE_SCATTER)

    def all_gather(self, name, preds, nbytes):
        """All-gather ending with ``nbytes`` on every slice; none when t = 1. ``name`` must
        start with ``allgather_``."""
        assert name.startswith("allgather_")
        return self._sp_collective(name, preds, nbytes, COLL_ALL_GATHER)

    def tp_reduce(self, tag, src, nbytes, sequence_parallel):
        """The tensor-parallel reduction of ``src`` (a row-parallel GEMM's partial sums, or
        a column-parallel GEMM's input gradient): ``reduce_scatter_<tag>`` to the s/t tokens
        of each slice under sequence parallelism, else ``allreduce_<tag>``; none when t = 1.
        Returns what follows waits on."""
        if sequence_parallel:
            return self.reduce_scatter("reduce_scatter_" + tag, [src], nbytes)
        return self.allreduce("allreduce_" + tag, [src], nbytes)

    def group_collective(self, name, preds, nbytes, group, *, comm_bytes, collective=COLL_P2P):
        """A collective over ``group`` ranks other than the tensor-parallel group (expert or
        context parallel); none when ``group`` = 1. ``comm_bytes``: what the ring all-reduce
        price 2(n−1)/n·comm_bytes/BW of ``phaze.cost`` is given; ``collective``: its
        ``OpGraph.collective`` code (default the point-to-point ring exchange)."""
        preds = uniq(preds)
        if group == 1:
            assert len(preds) == 1
            return preds[0]
        self.ops.append(dict(name=name, kind=KIND_COLLECTIVE, preds=preds, comm_bytes=comm_bytes,
                             group_size=group, elements=nbytes // self.B, bytes_in=nbytes,
                             bytes_out=nbytes, collective=collective))
        return name

    def ring_exchange(self, name, preds, nbytes, group, *, comm_bytes):
        """Ring attention's exchange over ``group`` context-parallel ranks: group − 1
        point-to-point steps bringing ``nbytes`` to each rank (``collective`` "p2p"); none
        when ``group`` = 1. ``name`` starts with ``ring_kv_exchange``."""
        assert name.startswith("ring_kv_exchange")
        return self.group_collective(name, preds, nbytes, group, comm_bytes=comm_bytes,
                                     collective=COLL_P2P)

    def all_to_all(self, name, preds, nbytes, group):
        """All-to-all of the ``nbytes`` a rank holds over ``group`` ranks (expert
        parallel); none when ``group`` = 1. Each rank keeps 1/n of its bytes and sends
        (n−1)/n of them (and receives as much), on the group's tier: stored as a collective
        of half the bytes, like the sequence-parallel ones, so that the study's ring price
        2(n−1)/n·comm_bytes/BW is exactly (n−1)/n·nbytes/BW (the calibrated model's α then
        counts 2(n−1) steps where a pairwise all-to-all takes n − 1). ``name`` starts with
        ``alltoall_``."""
        assert name.startswith("alltoall_")
        return self.group_collective(name, preds, nbytes, group, comm_bytes=nbytes // 2,
                                     collective=COLL_ALL_TO_ALL)

    def graph(self) -> OpGraph:
        if self._rescaled:
            # a rescaled GEMM's readers read the scaled output
            done = set(self._rescaled.values())
            for op in self.ops:
                if op["name"] not in done:
                    op["preds"] = uniq([self._rescaled.get(p, p) for p in op["preds"]])
        return OpGraph.from_ops(self.ops, bytes_per_element=self.B, dtype=self.dtype)


def uniq(preds):
    out = []
    for p in preds:
        if p is not None and p not in out:
            out.append(p)
    return out


class Shape:
    """The sizes of one slice that every builder needs, computed once.

    ``cp``: context-parallel width (this rank holds ``s/cp`` tokens of each sample);
    ``ep``: expert-parallel width (this rank holds ``n_experts/ep`` routed experts);
    ``capacity_factor``: None (balanced routing) or the expert capacity factor;
    ``loss``: the head's loss kernel (a ``phaze.graph._loss.LossKernel``).
    """

    def __init__(self, m, b, t, B, sp=False, flash=False, dtype="bf16", kernels="study",
                 cp=1, ep=1, capacity_factor=None, loss=None):
        self.m, self.b, self.t, self.B = m, b, t, B
        self.loss = loss
        self.sp, self.flash, self.dtype = sp, flash, dtype
        self.cp, self.ep, self.capacity_factor = cp, ep, capacity_factor
        self.megatron = kernels == "megatron"
        # Element size of the stashed low-precision GEMM inputs, scales included
        # (precision module docstring); the 16-bit element size otherwise.
        dt = precision.datatype(dtype)
        self.B8 = dt.element_bytes if dt.low_precision else B
        self.s = m.seq_len                           # keys each query attends to
        # keys per query a flash kernel computes (causal: the tiles up to the diagonal)
        self.s_flash = flash_keys(m.seq_len, m.causal)
        self.s_q = m.seq_len // cp                   # tokens of a sample on this rank
        self.T = b * self.s_q                        # tokens per microbatch on this rank
        # Tokens of this slice for the norms, dropouts and residuals: all of them, or
        # their 1/t share under sequence parallelism (s/cp divisible by t is checked).
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
        self.mixer = "attention"                     # the token mixer of the layer built

    def for_mixer(self, mixer: str) -> "Shape":
        """This shape for a layer whose token mixer is ``mixer`` ("attention", "sliding",
        "chunked", "mamba", "none"): the keys per query a flash kernel computes follow its
        mask (:func:`flash_keys_window`, :func:`flash_keys_chunked`); the unfused core
        computes and masks the whole square whatever the mask."""
        if mixer == self.mixer:
            return self
        out = copy.copy(self)
        out.mixer = mixer
        if mixer == "sliding":
            out.s_flash = flash_keys_window(self.m.seq_len, self.m.sliding_window)
        elif mixer == "chunked":
            out.s_flash = flash_keys_chunked(self.m.seq_len, self.m.attention_chunk)
        else:
            out.s_flash = flash_keys(self.m.seq_len, self.m.causal)
        return out


def unfused_attention(f, sh, score_preds, value_pred, batch, sq, s, qk_dim, v_dim, scores):
    """The attention core without flash attention, forward, into ``f``: ``attn_scores``
    (batch × sq × qk_dim · qk_dim × s), the scale-mask-softmax with the attention dropout
    (one pass with the study's fusion; with ``kernels="megatron"`` Megatron-LM's fused
    softmax then a separate ``attn_dropout`` kernel that reads the probabilities back and
    writes the dropped ones and the 1-byte mask), and ``attn_context`` (· V). ``scores``:
    score elements of the slice. Returns the context operator's name."""
    B = sh.B
    f.gemm("attn_scores", score_preds, batch, sq, qk_dim, s)
    if sh.megatron:
        f.vector("softmax", ["attn_scores"], scores, _C["scale_mask"] + _C["softmax"],
                 scores * B, scores * B)
        probs = f.vector("attn_dropout", ["softmax"], scores, _C["dropout"], scores * B,
                         scores * (B + MASK_BYTES_PER_ELEMENT))
    else:
        probs = f.vector("softmax", ["attn_scores"], scores,
                         _C["scale_mask"] + _C["softmax"] + _C["dropout"], scores * B,
                         scores * (2 * B + MASK_BYTES_PER_ELEMENT))  # probabilities, dropped, mask
    return f.gemm("attn_context", [probs, value_pred], batch, sq, s, v_dim)


def residual_out(f, sh, name, src, bias):
    """Megatron-LM's fused bias + dropout + residual add after a branch's reduction ``src``
    (``residual1`` / ``residual2``), on the slice's tokens (s/t of them under sequence
    parallelism): reads the branch and the residual stream (and the bias when ``bias``),
    writes the sum and the 1-byte dropout mask. Returns its name."""
    Tn, h, B = sh.Tn, sh.h, sh.B
    return f.vector(name, [src], Tn * h,
                    (_C["bias"] if bias else 0.0) + _C["dropout"] + _C["residual"],
                    2 * Tn * h * B + (h * B if bias else 0), Tn * h * (B + MASK_BYTES_PER_ELEMENT))


def ln1_backward(g, sh, src):
    """The end of an attention half's backward, into ``g``: the summed input gradient
    ``src`` of the column-parallel projections reduced over the tensor-parallel group
    (all-reduce, or reduce-scatter to the s/t tokens under sequence parallelism), then the
    first norm's backward with the residual stream's gradient. Returns its name."""
    T, h, Tn, B = sh.T, sh.h, sh.Tn, sh.B
    src = g.tp_reduce("qkv.dX", src, T * h * B, sh.sp)
    return g.vector("ln1.bwd", [src, "residual1.bwd"], Tn * h,
                    _C[sh.m.norm + "_bwd"] + _C["residual"],
                    3 * Tn * h * B + sh.norm_w * B, Tn * h * B + sh.norm_w * B)
