"""Slow, obviously-correct reference implementations for the tests.

Each section belongs to one module of phaze and is written for clarity, not
speed: brute force over every choice the fast code prunes or structures away.
"""
import itertools  # noqa: F401  (used by the sections below)
import math  # noqa: F401

import numpy as np  # noqa: F401

# ---------------------------------------------------------------------------
# graph: FLOP and parameter counts straight from the formulas
# ---------------------------------------------------------------------------

def naive_param_tensors(m):
    """Every trainable tensor of a ModelSpec as (name, shape), written out one by one
    the way a PyTorch module tree would hold them (tied output weights not repeated)."""
    h, f, e, hd = m.hidden, m.ffn_hidden, (m.embed_proj or m.hidden), m.head_dim
    tensors = [("embed.tokens", (m.vocab, e))]
    if m.position == "learned":
        tensors.append(("embed.positions", (m.max_positions, h)))
    if m.embed_proj:
        tensors.append(("embed.project_in", (e, h)))

    def norm(prefix):
        out = [(prefix + ".weight", (h,))]
        if m.norm == "layernorm":
            out.append((prefix + ".bias", (h,)))
        return out

    for layer in range(m.n_layers):
        p = f"block{layer}."
        tensors += norm(p + "ln1")
        linears = [("q", h, m.heads * hd), ("k", h, m.kv_heads * hd), ("v", h, m.kv_heads * hd),
                   ("o", m.heads * hd, h)]
        if m.activation == "swiglu":
            linears += [("gate", h, f), ("up", h, f), ("down", f, h)]
        else:
            linears += [("fc1", h, f), ("fc2", f, h)]
        for name, fan_in, fan_out in linears:
            tensors.append((p + name + ".weight", (fan_out, fan_in)))
            if m.bias:
                tensors.append((p + name + ".bias", (fan_out,)))
        tensors += norm(p + "ln2")
    if m.final_norm:
        tensors += norm("final_norm")
    if m.embed_proj:
        tensors.append(("head.project_out", (h, e)))
    if not m.tied_embeddings:
        tensors.append(("head.logits", (m.vocab, e)))
    return tensors


def naive_n_params(m):
    """Sum of the element counts of naive_param_tensors."""
    return sum(math.prod(shape) for _, shape in naive_param_tensors(m))


def naive_slice_param_bytes(m, t, bytes_per_element=2):
    """Parameter bytes of one tensor-parallel slice per layer kind, tensor by tensor:
    Megatron shards the token table by rows (vocab), Q/K/V and FC1/gate/up by output
    columns (weights and biases), out_proj and FC2 by input rows (weights only); the rest
    is replicated. The head holds its own copy of tied logits weights."""
    def shard(rows):
        return -(-rows // t)

    out = {"embedding": 0, "block": 0, "head": 0}
    tensors = naive_param_tensors(m)
    if m.tied_embeddings:
        tensors.append(("head.logits", (m.vocab, m.embed_proj or m.hidden)))
    for name, shape in tensors:
        if name.startswith("block") and not name.startswith("block0."):
            continue
        kind = "embedding" if name.startswith("embed") else "block" if name.startswith("block") \
            else "head"
        leaf = name.split(".", 1)[1] if kind == "block" else name
        shape = list(shape)
        if leaf in ("q.weight", "k.weight", "v.weight", "fc1.weight", "gate.weight", "up.weight",
                    "q.bias", "k.bias", "v.bias", "fc1.bias", "gate.bias", "up.bias",
                    "embed.tokens", "head.logits"):
            shape[0] = shard(shape[0])          # output rows / vocabulary rows
        elif leaf in ("o.weight", "fc2.weight", "down.weight"):
            shape[1] = shard(shape[1])          # input columns
        out[kind] += math.prod(shape) * bytes_per_element
    return out


def naive_gemm_flops(m, microbatch, tensor_parallel=1):
    """Megatron's closed form of forward+backward GEMM FLOPs of one microbatch (whole model,
    all slices together, full s² attention, vocabulary V padded for width t):
    72·b·s·L·h²·(1 + s/(6h) + V/(12·h·L))."""
    b, s, L, h = microbatch, m.seq_len, m.n_layers, m.hidden
    V = m.padded_vocab(tensor_parallel)
    return 72 * b * s * L * h * h + 12 * b * s * s * L * h + 6 * b * s * h * V

# ---------------------------------------------------------------------------
# cost: operator latencies
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# schedule: exhaustive search over modes and event orders (DAGs up to 7 operators)
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# placement: brute force over widths, cuts and data-parallel degrees
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# search: brute force over architectures and knobs through public evaluation
# ---------------------------------------------------------------------------
