"""The schedule validator (``check_schedule``), independent of the solvers: every rule of
docs/design.md §2.5 checked directly on start times and modes."""
import numpy as np

from ..graph import KIND_COLLECTIVE, KIND_FUSED, KIND_GEMM, KIND_VECTOR
from ._inputs import layer_inputs
from ._status import STATUS_NAMES


def check_schedule(op_graph, single, intra, num_tc, num_vc, schedule) -> list:
    """Rules ``schedule`` breaks (empty list when valid): shapes, modes, precedence,
    core capacity (an event sweep), intra-op exclusivity, one collective at a time,
    makespan = last finish, lower_bound <= makespan."""
    ds, da, ntc, nvc = layer_inputs(op_graph, single, intra, num_tc, num_vc)
    n = op_graph.n_ops
    names = op_graph.names
    errors = []
    starts = np.asarray(schedule.starts, dtype=np.float64).reshape(-1)
    modes = np.asarray(schedule.modes).reshape(-1)
    if starts.shape != (n,) or modes.shape != (n,):
        return [f"starts and modes must have one entry per operator ({n})"]
    if not np.all(np.isfinite(starts)) or np.any(starts < 0):
        errors.append("every start time must be finite and >= 0")
    if np.any((modes != 0) & (modes != 1)):
        errors.append("modes must be 0 (one core) or 1 (intra-op)")
        return errors
    kind = op_graph.kind
    for i in np.flatnonzero((kind == KIND_COLLECTIVE) & (modes != 0)):
        errors.append(f"collective {names[i]!r} must have mode 0")
    dur = np.where(modes == 1, da, ds)
    finish = starts + dur
    scale = max(float(np.max(finish, initial=0.0)), 1e-300)
    tol = 1e-9 * scale
    for j in range(n):
        for p in op_graph.preds(j):
            if starts[j] < finish[p] - tol:
                errors.append(f"{names[j]!r} starts at {starts[j]:.9g} s before its predecessor "
                              f"{names[p]!r} finishes at {finish[p]:.9g} s")
    last = float(np.max(finish, initial=0.0))
    if abs(schedule.makespan - last) > tol:
        errors.append(f"makespan {schedule.makespan:.9g} s differs from the last finish {last:.9g} s")
    if schedule.lower_bound > schedule.makespan + tol:
        errors.append(f"lower_bound {schedule.lower_bound:.9g} s exceeds makespan {schedule.makespan:.9g} s")
    if schedule.status not in STATUS_NAMES:
        errors.append(f"status {schedule.status!r} is not one of {', '.join(STATUS_NAMES)}")
    active = dur > 0
    compute = kind != KIND_COLLECTIVE

    def overlap(i, j):
        return starts[i] < finish[j] - tol and starts[j] < finish[i] - tol

    for i in np.flatnonzero(active & compute & (modes == 1)):
        for j in np.flatnonzero(active & compute):
            if j != i and overlap(i, j):
                errors.append(f"intra-op operator {names[i]!r} overlaps compute operator {names[j]!r}")
    coll = np.flatnonzero(active & ~compute)
    for x in range(len(coll)):
        for y in range(x + 1, len(coll)):
            if overlap(coll[x], coll[y]):
                errors.append(f"collectives {names[coll[x]]!r} and {names[coll[y]]!r} overlap on the link")
    # capacity sweep over one-core operators (ends before starts at equal times)
    tc_use = np.where(modes == 1, 0, ((kind == KIND_GEMM) | (kind == KIND_FUSED)).astype(int))
    vc_use = np.where(modes == 1, 0, ((kind == KIND_VECTOR) | (kind == KIND_FUSED)).astype(int))
    events = []
    for i in np.flatnonzero(active & compute & (modes == 0)):
        events.append((finish[i] - tol, 0, -tc_use[i], -vc_use[i]))
        events.append((starts[i], 1, tc_use[i], vc_use[i]))
    events.sort()
    tc = vc = 0
    for t, _, dtc, dvc in events:
        tc += dtc
        vc += dvc
        if tc > ntc:
            errors.append(f"{tc} tensor cores busy at {t:.9g} s but the chip has {ntc}")
            break
        if vc > nvc:
            errors.append(f"{vc} vector cores busy at {t:.9g} s but the chip has {nvc}")
            break
    return errors
