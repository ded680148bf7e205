"""The lower bounds on a placement's time per batch that prune a search (the placement
model's, ``phaze/placement/_model.py``). Private: ``phaze.placement`` re-exports them."""
from __future__ import annotations

import math

import numpy as np

from .. import _validate
from ._model import _BOUND_DEGREES, MAX_COUNT, PlacementProblem


# ---------------------------------------------------------------------------
# Lower bound on the time per batch (pruning)
# ---------------------------------------------------------------------------

def time_per_batch_lower_bound(total_s, max_layer_s, first_param_bytes, bandwidth, devices: int,
                               n_layers: int, microbatches: int, stage_devices: int = 1) -> np.ndarray:
    """Valid lower bound on the optimal time per batch (seconds) of one width, vectorised.

    Arrays run over instances of the same chain shape (a search: architectures):
    ``total_s`` Σ over the chain of each layer's forward + backward seconds;
    ``max_layer_s`` the largest single-layer forward + backward; ``bandwidth``
    bytes/s. Scalars: ``first_param_bytes`` parameter bytes of the chain's first
    layer (always in the first stage); ``devices`` D; ``n_layers`` L;
    ``microbatches`` m; ``stage_devices`` a, the devices every stage needs at
    least (the width t when every layer is tensor-parallel, else 1).

    For a plan with S stages and d replicas: every stage load is ≥ the forward +
    backward sum of its layers, so max load ≥ total/S and ≥ max_layer; d·S·a ≤ D
    and S ≤ L; time = max load · (⌈m/d⌉ + S − 1) + 4 (d − 1) · P_first / (bandwidth · d),
    and (c + S − 1)/S decreases in S. The bound is the minimum over d of
    max(total · (c + S_max − 1)/S_max, max_layer · c) + sync. Returns an
    array of ``len(total_s)`` (``inf`` everywhere when a > D). Degrees d above 4,096
    share one looser bound (still valid), so memory is O(instances · 4,096) whatever D
    and m; the counts must be positive integers of at most ``MAX_COUNT`` (2**62).
    """
    devices = _validate.positive_int("devices", devices, maximum=MAX_COUNT)
    microbatches = _validate.positive_int("microbatches", microbatches, maximum=MAX_COUNT)
    n_layers = _validate.positive_int("n_layers", n_layers, maximum=MAX_COUNT)
    stage_devices = _validate.positive_int("stage_devices", stage_devices, maximum=MAX_COUNT)
    total_s = np.asarray(total_s, dtype=np.float64)[:, None]
    max_layer_s = np.asarray(max_layer_s, dtype=np.float64)[:, None]
    bandwidth = np.asarray(bandwidth, dtype=np.float64)[:, None]
    if stage_devices > devices:
        return np.full(total_s.shape[0], np.inf)
    d_max = min(devices // stage_devices, microbatches)
    k = min(d_max, _BOUND_DEGREES)
    d = np.arange(1, k + 1, dtype=np.float64)[None, :]
    c = np.ceil(microbatches / d)
    s_max = np.minimum(np.floor(devices / (d * stage_devices)), n_layers)
    pipeline = total_s * (c + s_max - 1.0) / s_max
    bound = np.maximum(pipeline, max_layer_s * c) + 4.0 * (d - 1.0) * first_param_bytes / (bandwidth * d)
    best = bound.min(axis=1)
    if d_max > k:
        # Every d > k at once: c ≥ ⌈m/d_max⌉, S ≤ S_max(k + 1), and the sync term ≥ its value
        # at k + 1 (it grows with d); each part of the bound is monotone, so this is below
        # the bound of every such d (valid, looser), in O(1) memory.
        c_low = float(-(-microbatches // d_max))
        s_up = float(min(devices // ((k + 1) * stage_devices), n_layers))
        tail = (np.maximum(total_s[:, 0] * (c_low + s_up - 1.0) / s_up, max_layer_s[:, 0] * c_low)
                + 4.0 * k * first_param_bytes / (bandwidth[:, 0] * (k + 1)))
        best = np.minimum(best, tail)
    return best


def lower_bound_time(problem: PlacementProblem) -> float:
    """A cheap lower bound (seconds) on the optimal time per batch of ``problem``.

    The minimum over usable widths (t ≤ devices) of
    :func:`time_per_batch_lower_bound`; ``math.inf`` when no width is usable.
    """
    D, m = problem.devices, problem.microbatches
    best = math.inf
    for w, t in enumerate(problem.widths.tolist()):
        if t > D:
            continue
        per_layer = problem.forward_s[w] + problem.backward_s[w]
        a = t if (t > 1 and bool(problem.tensor_parallel[w].all())) else 1
        bound = time_per_batch_lower_bound(
            [per_layer.sum()], [per_layer.max()], float(problem.param_bytes[w, 0]),
            [problem.bandwidth], D, problem.n_layers, m, stage_devices=a)
        best = min(best, float(bound[0]))
    return best
