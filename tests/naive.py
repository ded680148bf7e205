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


def naive_gemm_flops(m, microbatch):
    """Megatron's closed form of forward+backward GEMM FLOPs of one microbatch (whole model,
    t = 1, full s² attention, padded vocabulary V):
    72·b·s·L·h²·(1 + s/(6h) + V/(12·h·L))."""
    b, s, L, h, V = microbatch, m.seq_len, m.n_layers, m.hidden, m.padded_vocab(1)
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
