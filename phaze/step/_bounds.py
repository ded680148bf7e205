"""The step model's lower bound of a plan search's seconds per batch on checked inputs
(:func:`phaze.step.step_lower_bounds`, ``LayerTable.lower_bounds``), split from
:mod:`phaze.step._plans`, which re-exports it."""
from __future__ import annotations

import numpy as np

from ._layers import kind_counts


def _lower_bounds(table, ns, times, n_dev, B, recompute) -> np.ndarray:
    """:func:`step_lower_bounds` on checked inputs: the rows' node sizes ``ns`` and the
    table's layer times ``times`` of those rows."""
    m_spec = table.model
    b = table.microbatch
    counts = kind_counts(m_spec)
    best = np.full(ns.shape[0], np.inf)
    for k, (t, _, _, cp, ep, _mg) in enumerate(table.variants):
        if not any(B % (b * d) == 0 and (cp * d) % ep == 0
                   for d in range(1, n_dev // (t * cp) + 1)):
            continue
        lt = times[k]
        work = lt["emb_f"] + lt["emb_b"] + lt["head_f"] + lt["head_b"]
        for q, n in enumerate(counts):
            work = work + n * (lt["k_f"][:, q] + lt["k_b"][:, q])
            if recompute == "full":
                work = work + n * lt["k_f"][:, q]
            elif recompute == "selective":
                work = work + n * lt["k_core"][:, q]
            elif recompute == "op":
                work = work + n * lt["k_op"][:, q]
        bound = B * t * cp * work / (b * n_dev) * (1.0 - 1e-12)
        best = np.where(ns >= t, np.minimum(best, bound), best)
    return best
