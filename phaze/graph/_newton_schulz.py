"""The Newton–Schulz iterations of a Muon optimizer step on one layer's weight matrices
(Jordan et al. 2024; Megatron-Core's ``--optimizer muon``), as an operator graph the cost
model prices (``phaze.step`` sums it into the optimizer's time).

A layer's weight matrices are the K × N operands of its forward weight GEMMs (every GEMM
of the forward graph but the attention cores and the SSD scan: ``CORE_OPS``), of this
tensor-parallel slice (Megatron-Core's ``--muon-tp-mode blockwise``: each slice
orthogonalised alone); a grouped expert GEMM holds ``batch`` matrices; a fused GEMM
(Megatron's ``qkv_proj``, the gated ``fc1``) is one matrix. One iteration on X (m × n,
m = min(K, N), n = max(K, N): Muon transposes a tall matrix) is three bf16 GEMMs:
A = X·Xᵀ (m × n · n × m), B = b·A + c·A·A (m × m · m × m) and X ← a·X + B·X
(m × m · m × n): 2·m²·n + m³ multiply-accumulates; ``steps`` iterations.
"""
from __future__ import annotations

from ._opgraph import UNFUSED_ATTENTION_OPS, OpGraph
from ._ops import KIND_FUSED, KIND_GEMM, Ops

#: Forward operators that are GEMMs without a weight matrix.
CORE_OPS = ("flash_attn", "mamba_ssd") + tuple(UNFUSED_ATTENTION_OPS)


def weight_matrices(layer) -> list:
    """(name, matrices, K, N) of each weight GEMM of ``layer``'s forward graph."""
    g = layer.forward
    out = []
    for i, name in enumerate(g.names):
        if g.kind[i] not in (KIND_GEMM, KIND_FUSED) or name in CORE_OPS:
            continue
        batch, _m, k, n = (int(x) for x in g.dims[i])
        if batch and k and n:
            out.append((name, batch, k, n))
    return out


def newton_schulz(layer, steps: int) -> tuple:
    """(dense, routed experts) OpGraphs of ``steps`` Newton–Schulz iterations on the weight
    matrices of ``layer`` (a LayerGraph; the experts' are those of the ``expert_`` GEMMs)."""
    graphs = []
    for experts in (False, True):
        f = Ops(2, 1, "bf16")
        for name, batch, k, n in weight_matrices(layer):
            if name.startswith("expert_") != experts:
                continue
            m, n = min(k, n), max(k, n)
            b = batch * steps
            f.gemm(f"ns.{name}.gram", [], b, m, n, m)
            f.gemm(f"ns.{name}.square", [f"ns.{name}.gram"], b, m, m, m)
            f.gemm(f"ns.{name}.update", [f"ns.{name}.square"], b, m, m, n)
        graphs.append(f.graph() if f.ops else None)
    return tuple(graphs)


__all__ = ["newton_schulz", "weight_matrices", "OpGraph"]
