"""Data × pipeline × tensor-parallel placement of a layer chain (docs/design.md §2.6).

The model is the original study's, stated exactly in
``../shared/golden/placement/README.md``: a plan picks a tensor-parallel width
t, a data-parallel degree d and a cut of the layer chain into S contiguous
stages; it is scored by

    time_per_batch = max_stage_load · (⌈m/d⌉ + S − 1) + 4·(d − 1)·P_first / (bandwidth·d)

seconds, where m is the number of microbatches per batch and P_first the
parameter bytes of the first stage. :func:`solve` finds the optimum exactly with
the compiled kernel ``phaze.placement._dp`` (Cython, GIL released, OpenMP
over problems in :func:`solve_many`). :func:`breakdown` costs any given plan
from the rules, independently of the kernel (per stage: compute, communication,
memory; per batch: steady state, pipeline bubble, gradient sync) and
:func:`evaluate` returns its time per batch. :func:`time_per_batch_lower_bound`
is the one lower bound on the optimum (vectorised over instances, for a
search's pruning); :func:`lower_bound_time` applies it to one problem.

Conventions:

* A width t larger than the device count cannot be used (the original skips it).
* Ties between widths keep the smaller width.
* An infeasible problem is a result: ``Placement.feasible`` is False,
  ``time_per_batch`` is ``math.inf`` (never a sentinel like 1e30),
  ``tensor_parallel`` and ``data_parallel`` are 0, ``stages`` is empty and
  ``reason`` says what failed.

Which plans, exactly: this DP is the original study's (``phaze.search`` with
``study=True``). It is exact over the study's plans — every cut of the layer chain into
contiguous stages (uneven sizes), one tensor-parallel width for the tensor-parallel
stages, the largest data-parallel degree the devices allow — which a trainer may not
launch. The default search prices Megatron-LM's launchable plans with the training-step
model instead (``phaze.step.best_plans``: even stages, d dividing the batch, the
strategy knobs), exact over those; docs/design.md §2.6 lists both sets.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import _validate
from . import _dp as _kernel
from .._threads import kernel_threads

__all__ = ["PlacementProblem", "Placement", "StageCost", "PlanBreakdown", "load_phaze_json", "solve",
           "solve_many", "evaluate", "breakdown"]

_OPTIMIZERS = ("sgd", "adam")

#: Largest ``devices``, ``microbatches`` and ``devices × layers`` a problem may hold: the
#: kernel forms ⌈m/d⌉ as (m + d − 1) // d and stage device counts up to S·t in int64, which
#: stay below 2**63 exactly when these are at most 2**62.
MAX_COUNT = 2 ** 62
#: Columns of data-parallel degrees :func:`time_per_batch_lower_bound` forms exactly per
#: instance; larger degrees share one valid (looser) bound, so memory stays bounded.
_BOUND_DEGREES = 4096


# ---------------------------------------------------------------------------
# Problem and result
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class PlacementProblem:
    """One placement problem: a layer chain offered at several tensor-parallel widths.

    Per width w (rows, ascending t after construction) and layer i (columns, chain order):

    - ``widths`` int64 (W,): the tensor-parallel widths offered (distinct, ≥ 1).
    - ``forward_s``, ``backward_s`` float64 (W, L): layer latencies, seconds.
    - ``param_bytes``, ``activation_bytes`` float64 (W, L): bytes per device.
    - ``tensor_parallel`` bool (W, L): the layer is sharded over t devices.
    - ``edge_bytes`` float64 (W, L−1): bytes sent from layer i to layer i+1.
    - ``devices`` D; ``memory_bytes`` per device; ``bandwidth`` bytes/s between
      stages and for the gradient sync; ``microbatches`` per batch;
      ``recompute`` activation recomputation; ``optimizer`` "sgd" or "adam"
      (any case on input, stored lower-case; Adam keeps one more copy of the
      parameters); ``layer_ids`` int64 (L,), default 0..L−1.

    The constructor validates and converts everything (ValueError naming the
    field); the search, which builds many problems from arrays it already
    trusts, may use :meth:`from_trusted_arrays` instead.
    """

    widths: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    param_bytes: np.ndarray
    activation_bytes: np.ndarray
    tensor_parallel: np.ndarray
    edge_bytes: np.ndarray
    devices: int
    memory_bytes: float
    bandwidth: float
    microbatches: int
    recompute: bool = False
    optimizer: str = "sgd"
    layer_ids: np.ndarray = field(default=None)

    def __post_init__(self):
        set_ = object.__setattr__
        widths = np.asarray(self.widths)
        if widths.ndim != 1 or widths.size == 0:
            raise ValueError("widths must be a non-empty 1-D sequence of tensor-parallel widths")
        if not (np.issubdtype(widths.dtype, np.integer)
                or (np.issubdtype(widths.dtype, np.floating) and np.all(np.isfinite(widths))
                    and np.all(widths == np.round(widths)))):
            raise ValueError("widths must be positive integers")
        widths = widths.astype(np.int64)
        if np.any(widths < 1):
            raise ValueError(f"widths must be positive integers, got {widths.tolist()}")
        if np.unique(widths).size != widths.size:
            raise ValueError(f"widths must be distinct, got {widths.tolist()}")
        n_widths = widths.size
        fw = _validate.finite_nonneg_array("forward_s", self.forward_s)
        if fw.ndim != 2 or fw.shape[0] != n_widths or fw.shape[1] < 1:
            raise ValueError(f"forward_s must have shape (widths, layers) = ({n_widths}, L ≥ 1), "
                             f"got {fw.shape}")
        n_layers = fw.shape[1]
        shape = (n_widths, n_layers)
        arrays = {"forward_s": fw}
        for name in ("backward_s", "param_bytes", "activation_bytes"):
            arr = _validate.finite_nonneg_array(name, getattr(self, name))
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape} (widths, layers), got {arr.shape}")
            arrays[name] = arr
        tp = np.asarray(self.tensor_parallel)
        if tp.shape != shape:
            raise ValueError(f"tensor_parallel must have shape {shape} (widths, layers), got {tp.shape}")
        if tp.dtype != np.bool_:
            if not np.issubdtype(tp.dtype, np.number) or not np.all((tp == 0) | (tp == 1)):
                raise ValueError("tensor_parallel must hold booleans")
        arrays["tensor_parallel"] = np.ascontiguousarray(tp, dtype=np.bool_)
        eb = _validate.finite_nonneg_array("edge_bytes", self.edge_bytes)
        if n_layers == 1 and eb.size == 0:
            eb = np.zeros((n_widths, 0))
        if eb.shape != (n_widths, n_layers - 1):
            raise ValueError(f"edge_bytes must have shape ({n_widths}, {n_layers - 1}) "
                             f"(widths, layers - 1), got {eb.shape}")
        arrays["edge_bytes"] = eb
        order = np.argsort(widths, kind="stable")
        set_(self, "widths", np.ascontiguousarray(widths[order]))
        for name, arr in arrays.items():
            set_(self, name, np.ascontiguousarray(arr[order]))
        set_(self, "devices", _validate.positive_int("devices", self.devices,
                                                     maximum=MAX_COUNT // n_layers))
        set_(self, "memory_bytes", _validate.nonneg_float("memory_bytes", self.memory_bytes))
        set_(self, "bandwidth", _validate.positive_float("bandwidth", self.bandwidth))
        set_(self, "microbatches", _validate.positive_int("microbatches", self.microbatches,
                                                          maximum=MAX_COUNT))
        if not isinstance(self.recompute, (bool, np.bool_)):
            raise ValueError(f"recompute must be a boolean, got {self.recompute!r}")
        set_(self, "recompute", bool(self.recompute))
        if not isinstance(self.optimizer, str):
            raise ValueError(f"optimizer must be one of sgd, adam; got {self.optimizer!r}")
        set_(self, "optimizer", _validate.one_of("optimizer", self.optimizer, _OPTIMIZERS))
        if self.layer_ids is None:
            ids = np.arange(n_layers, dtype=np.int64)
        else:
            ids = np.asarray(self.layer_ids)
            if ids.shape != (n_layers,) or not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(f"layer_ids must be {n_layers} integers (one per layer)")
            if np.unique(ids).size != n_layers:
                raise ValueError("layer_ids must be distinct")
            ids = np.ascontiguousarray(ids, dtype=np.int64)
        set_(self, "layer_ids", ids)
        self._freeze()

    def _freeze(self):
        for name in ("widths", "forward_s", "backward_s", "param_bytes", "activation_bytes",
                     "tensor_parallel", "edge_bytes", "layer_ids"):
            getattr(self, name).setflags(write=False)

    @classmethod
    def from_trusted_arrays(cls, widths, forward_s, backward_s, param_bytes, activation_bytes,
                             tensor_parallel, edge_bytes, devices, memory_bytes, bandwidth,
                             microbatches, recompute=False, optimizer="sgd", layer_ids=None):
        """Build without validation, for callers that construct many problems from checked arrays.

        The caller guarantees what ``__init__`` would check: ``widths`` distinct,
        shapes (W, L) and (W, L−1), finite non-negative values, ``devices`` and
        ``microbatches`` ≥ 1, ``bandwidth`` > 0, ``optimizer`` "sgd" or "adam"
        (any case).  Arrays are only converted to the kernel's dtypes (no copy
        when they already match, and none when the widths are already
        ascending); they are not frozen.
        """
        self = object.__new__(cls)
        set_ = object.__setattr__
        widths = np.ascontiguousarray(widths, dtype=np.int64)
        arrays = {"forward_s": forward_s, "backward_s": backward_s, "param_bytes": param_bytes,
                  "activation_bytes": activation_bytes, "edge_bytes": edge_bytes,
                  "tensor_parallel": tensor_parallel}
        if widths.size > 1 and np.any(widths[1:] < widths[:-1]):
            order = np.argsort(widths, kind="stable")
            widths = widths[order]
            arrays = {name: np.asarray(arr)[order] for name, arr in arrays.items()}
        set_(self, "widths", widths)
        for name in ("forward_s", "backward_s", "param_bytes", "activation_bytes", "edge_bytes"):
            set_(self, name, np.ascontiguousarray(arrays[name], dtype=np.float64))
        set_(self, "tensor_parallel", np.ascontiguousarray(arrays["tensor_parallel"], dtype=np.bool_))
        set_(self, "devices", int(devices))
        set_(self, "memory_bytes", float(memory_bytes))
        set_(self, "bandwidth", float(bandwidth))
        set_(self, "microbatches", int(microbatches))
        set_(self, "recompute", bool(recompute))
        set_(self, "optimizer", optimizer.lower())
        n_layers = self.forward_s.shape[1]
        set_(self, "layer_ids", np.arange(n_layers, dtype=np.int64) if layer_ids is None
             else np.ascontiguousarray(layer_ids, dtype=np.int64))
        return self

    @property
    def n_layers(self) -> int:
        """Layers in the chain (L)."""
        return int(self.forward_s.shape[1])


@dataclass(frozen=True)
class Placement:
    """A plan and its score.

    - ``feasible``: False when no plan fits (then ``reason`` says why).
    - ``time_per_batch``: seconds per global batch; ``math.inf`` when infeasible.
    - ``tensor_parallel`` t, ``data_parallel`` d (0 and 0 when infeasible).
    - ``stages``: list of (list of layer ids, devices of that stage), first stage first.
    - ``stage_loads``: seconds per microbatch of each stage (forward + backward,
      including edge waits and recomputation).
    - ``stage_memory``: bytes per device each stage needs at its position.
    - ``reason``: "" when feasible.
    """

    feasible: bool
    time_per_batch: float
    tensor_parallel: int
    data_parallel: int
    stages: list
    stage_loads: list
    stage_memory: list
    reason: str = ""

    @property
    def pipeline_parallel(self) -> int:
        """Number of pipeline stages S."""
        return len(self.stages)

    @property
    def devices_used(self) -> int:
        """Devices the plan occupies: d · Σ stage devices."""
        return self.data_parallel * sum(a for _, a in self.stages)

    def to_json(self) -> dict:
        """The original solver's output keys plus ``feasible``, ``reason``, ``stageLoads``, ``stageMemory``.

        ``finalTimePerBatch`` is null (not 1e30) when infeasible.
        """
        return {
            "stages": [{"nodes": [int(x) for x in ids], "devicesForStage": int(a)}
                       for ids, a in self.stages],
            "dataParallelDegree": int(self.data_parallel),
            "tensorParallelDegree": int(self.tensor_parallel),
            "finalTimePerBatch": float(self.time_per_batch) if self.feasible else None,
            "feasible": bool(self.feasible),
            "reason": self.reason,
            "stageLoads": [float(x) for x in self.stage_loads],
            "stageMemory": [float(x) for x in self.stage_memory],
        }


# ---------------------------------------------------------------------------
# The original study's JSON
# ---------------------------------------------------------------------------

def _number(field_name, value, *, positive=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field_name} must be a number, got {_validate.show(value)}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{field_name} must be finite, got {_validate.show(value)}") from None
    if not math.isfinite(v):
        raise ValueError(f"{field_name} must be finite, got {value!r}")
    if v < 0 or (positive and v == 0):
        raise ValueError(f"{field_name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return v


def _integer(field_name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field_name} must be an integer, got {_validate.show(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{field_name} must be an integer, got {value!r}")
    if abs(value) > _validate.INT64_MAX:
        raise ValueError(f"{field_name} must be an integer of at most {_validate.INT64_MAX:,} "
                         f"in size, got {_validate.show(value)}")
    return int(value)


def _chain_order(ids, edges, where):
    """Layer ids in chain order from (source, dest) pairs, or ValueError naming the culprit layer."""
    known = set(ids)
    succ, pred = {}, {}
    for src, dst in edges:
        for end, name in ((src, "sourceId"), (dst, "destId")):
            if end not in known:
                raise ValueError(f"{where}: edge {src} -> {dst} has {name} {end}, which is not a layer id")
        if src == dst:
            raise ValueError(f"{where}: layer {src} has an edge to itself (cycle)")
        if src in succ and succ[src] != dst:
            raise ValueError(f"{where}: layer {src} has two successors ({succ[src]} and {dst}); "
                             "the layer graph must be a chain")
        if dst in pred and pred[dst] != src:
            raise ValueError(f"{where}: layer {dst} has two predecessors ({pred[dst]} and {src}); "
                             "the layer graph must be a chain")
        succ[src] = dst
        pred[dst] = src
    starts = [i for i in ids if i not in pred]
    if not starts:
        raise ValueError(f"{where}: the layer graph has a cycle (every layer has a predecessor, "
                         f"e.g. layer {ids[0]})")
    if len(starts) > 1:
        raise ValueError(f"{where}: the layer graph is not a chain: layers {starts[0]} and {starts[1]} "
                         "both have no predecessor")
    order = [starts[0]]
    seen = {starts[0]}
    while order[-1] in succ:
        nxt = succ[order[-1]]
        if nxt in seen:
            raise ValueError(f"{where}: the layer graph has a cycle through layer {nxt}")
        order.append(nxt)
        seen.add(nxt)
    if len(order) != len(ids):
        missing = next(i for i in ids if i not in seen)
        raise ValueError(f"{where}: the layer graph has a cycle through layer {missing} "
                         "(it is not reachable from the first layer)")
    return order


def load_phaze_json(path) -> PlacementProblem:
    """Read a placement problem in the original study's JSON (see the golden README).

    Keeps the JSON's layer ids (e.g. −1..96) in ``layer_ids``; layers are put in
    chain order by following ``edges``.  ``mbsInBatch`` is truncated to an
    integer as the original does.  Raises ValueError naming the field or layer
    for missing, mistyped or negative fields, NaN, ids differing between widths,
    branching or cyclic layer graphs and zero devices.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give the placement problem's JSON file")
    data = _validate.read_json(path, "a placement problem")
    return problem_from_phaze_dict(data, where=str(path))


def problem_from_phaze_dict(data, where="placement JSON") -> PlacementProblem:
    """The :class:`PlacementProblem` of an already-parsed original-format dict (see :func:`load_phaze_json`)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the top level must be a JSON object")
    required = ("maxMemoryPerDevice", "maxDevices", "bandwidth", "mbsInBatch", "nodes", "edges",
                "activationRecomputation", "optimizerAlgorithm")
    for key in required:
        if key not in data:
            raise ValueError(f"{where}: missing field '{key}'")
    memory = _number("maxMemoryPerDevice", data["maxMemoryPerDevice"])
    devices = _integer("maxDevices", data["maxDevices"])
    if devices < 1:
        raise ValueError(f"maxDevices must be >= 1, got {data['maxDevices']!r}")
    bandwidth = _number("bandwidth", data["bandwidth"], positive=True)
    mbs = _number("mbsInBatch", data["mbsInBatch"])
    if int(mbs) < 1:
        raise ValueError(f"mbsInBatch must be >= 1 (it is truncated to an integer), got {data['mbsInBatch']!r}")
    recompute = data["activationRecomputation"]
    if not isinstance(recompute, bool):
        raise ValueError(f"activationRecomputation must be true or false, got {recompute!r}")
    optimizer = data["optimizerAlgorithm"]
    if not isinstance(optimizer, str) or optimizer.lower() not in _OPTIMIZERS:
        raise ValueError(f"optimizerAlgorithm must be \"SGD\" or \"Adam\", got {optimizer!r}")
    nodes, edges = data["nodes"], data["edges"]
    if not isinstance(nodes, dict) or not nodes:
        raise ValueError("nodes must be a non-empty object mapping each tensor-parallel width to its layers")
    if not isinstance(edges, dict):
        raise ValueError("edges must be an object mapping each tensor-parallel width to its edges")
    widths = []
    for key in nodes:
        try:
            t = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"nodes: key {key!r} is not a tensor-parallel width (a positive integer)") from None
        if t < 1 or str(t) != str(key).strip():
            raise ValueError(f"nodes: key {key!r} is not a tensor-parallel width (a positive integer)")
        if key not in edges:
            raise ValueError(f"edges: missing the edge list of width {key}")
        widths.append((t, key))
    widths.sort()
    fields = ("parameterSize", "activationSize", "optimalLatencyFw", "optimalLatencyBw")
    order = None
    base_edges = None
    per_width = []
    for t, key in widths:
        layers = nodes[key]
        if not isinstance(layers, list) or not layers:
            raise ValueError(f"nodes[{key}] must be a non-empty list of layers")
        rows = {}
        for n, layer in enumerate(layers):
            if not isinstance(layer, dict):
                raise ValueError(f"nodes[{key}][{n}] must be an object")
            if "id" not in layer:
                raise ValueError(f"nodes[{key}][{n}]: missing field 'id'")
            lid = _integer(f"nodes[{key}][{n}].id", layer["id"])
            if lid in rows:
                raise ValueError(f"nodes[{key}]: layer id {lid} appears twice")
            vals = []
            for fname in fields:
                if fname not in layer:
                    raise ValueError(f"nodes[{key}] layer {lid}: missing field '{fname}'")
                vals.append(_number(f"nodes[{key}] layer {lid} {fname}", layer[fname]))
            if "isTensorParallelized" not in layer:
                raise ValueError(f"nodes[{key}] layer {lid}: missing field 'isTensorParallelized'")
            flag = layer["isTensorParallelized"]
            if not isinstance(flag, bool):
                raise ValueError(f"nodes[{key}] layer {lid} isTensorParallelized must be true or false, "
                                 f"got {flag!r}")
            rows[lid] = vals + [flag]
        elist = edges[key]
        if not isinstance(elist, list):
            raise ValueError(f"edges[{key}] must be a list of edges")
        pairs, cost = [], {}
        for n, e in enumerate(elist):
            if not isinstance(e, dict):
                raise ValueError(f"edges[{key}][{n}] must be an object")
            for fname in ("sourceId", "destId", "communicationCost"):
                if fname not in e:
                    raise ValueError(f"edges[{key}][{n}]: missing field '{fname}'")
            src = _integer(f"edges[{key}][{n}].sourceId", e["sourceId"])
            dst = _integer(f"edges[{key}][{n}].destId", e["destId"])
            c = _number(f"edges[{key}][{n}] ({src} -> {dst}) communicationCost", e["communicationCost"])
            if (src, dst) in cost:
                raise ValueError(f"edges[{key}]: edge {src} -> {dst} appears twice")
            pairs.append((src, dst))
            cost[(src, dst)] = c
        if order is None:
            ids = sorted(rows)
            order = _chain_order(ids, pairs, f"edges[{key}]")
            base_ids = set(rows)
            base_edges = set(pairs)
            base_key = key
        else:
            if set(rows) != base_ids:
                diff = sorted(set(rows) ^ base_ids)
                raise ValueError(f"nodes: layer ids of width {key} differ from width {base_key} "
                                 f"(e.g. layer {diff[0]})")
            if set(pairs) != base_edges:
                diff = sorted(set(pairs) ^ base_edges)
                raise ValueError(f"edges: the edges of width {key} differ from width {base_key} "
                                 f"(e.g. {diff[0][0]} -> {diff[0][1]})")
        per_width.append((t, rows, cost))
    n_layers = len(order)
    W = len(per_width)
    arr = np.zeros((4, W, n_layers))
    tp = np.zeros((W, n_layers), dtype=bool)
    eb = np.zeros((W, n_layers - 1))
    for w, (t, rows, cost) in enumerate(per_width):
        for i, lid in enumerate(order):
            arr[:, w, i] = rows[lid][:4]
            tp[w, i] = rows[lid][4]
        for i in range(n_layers - 1):
            eb[w, i] = cost[(order[i], order[i + 1])]
    # The limits of PlacementProblem, in this format's own field names.
    if devices > MAX_COUNT // n_layers:
        raise ValueError(f"maxDevices must be at most {MAX_COUNT // n_layers:,} (2**62 / "
                         f"{n_layers} layers), got {_validate.show(devices)}")
    if int(mbs) > MAX_COUNT:
        raise ValueError(f"mbsInBatch must be at most {MAX_COUNT:,} (2**62), got "
                         f"{_validate.show(data['mbsInBatch'])}")
    return PlacementProblem(
        widths=np.array([t for t, _, _ in per_width], dtype=np.int64),
        forward_s=arr[2], backward_s=arr[3], param_bytes=arr[0], activation_bytes=arr[1],
        tensor_parallel=tp, edge_bytes=eb, devices=devices, memory_bytes=memory,
        bandwidth=bandwidth, microbatches=int(mbs), recompute=recompute, optimizer=optimizer,
        layer_ids=np.array(order, dtype=np.int64))


# ---------------------------------------------------------------------------
# Solving
# ---------------------------------------------------------------------------

def _infeasible_reason(problem: PlacementProblem) -> str:
    """One sentence saying why no plan fits (called only when the kernel found none)."""
    D, M = problem.devices, problem.memory_bytes
    usable = [w for w, t in enumerate(problem.widths) if t <= D]
    if not usable:
        return (f"fewer devices ({D}) than the smallest tensor-parallel width "
                f"({int(problem.widths.min())})")
    mult = 3.0 if problem.optimizer == "adam" else 2.0
    alone = mult * problem.param_bytes + problem.activation_bytes  # a layer alone as the last stage
    over = [w for w in usable if np.any(alone[w] > M)]
    if len(over) == len(usable):
        w = over[0]
        i = int(np.argmax(alone[w] > M))
        return (f"layer {int(problem.layer_ids[i])} alone exceeds the memory per device "
                f"({alone[w, i]:.6g} > {M:.6g} bytes at tensor-parallel width {int(problem.widths[w])}, "
                f"and some layer does at every usable width)")
    return (f"no cut of the chain into at most {min(D, problem.n_layers)} stages fits in "
            f"{M:.6g} bytes per device at any usable tensor-parallel width (t <= {D})")


def _pack(problems):
    n_layers = problems[0].n_layers
    for n, p in enumerate(problems):
        if not isinstance(p, PlacementProblem):
            raise ValueError(f"problems[{n}] must be a PlacementProblem, got {type(p).__name__}")
        if p.n_layers != n_layers:
            raise ValueError(f"problems[{n}] has {p.n_layers} layers; solve_many needs the same chain "
                             f"length ({n_layers}) for every problem")
    P = len(problems)
    W = max(p.widths.size for p in problems)
    E = max(n_layers - 1, 1)
    same_w = all(p.widths.size == W for p in problems)
    if same_w:
        widths = np.stack([p.widths for p in problems]).astype(np.int64, copy=False)
        stacks = [np.stack([getattr(p, name) for p in problems]).astype(np.float64, copy=False)
                  for name in ("forward_s", "backward_s", "param_bytes", "activation_bytes")]
        tp = np.stack([p.tensor_parallel for p in problems]).view(np.uint8)
        if n_layers > 1:
            eb = np.stack([p.edge_bytes for p in problems]).astype(np.float64, copy=False)
        else:
            eb = np.zeros((P, W, E))
    else:
        widths = np.zeros((P, W), dtype=np.int64)  # padding width 0 is skipped by the kernel
        stacks = [np.zeros((P, W, n_layers)) for _ in range(4)]
        tp = np.zeros((P, W, n_layers), dtype=np.uint8)
        eb = np.zeros((P, W, E))
        for n, p in enumerate(problems):
            k = p.widths.size
            widths[n, :k] = p.widths
            for arr, name in zip(stacks, ("forward_s", "backward_s", "param_bytes", "activation_bytes")):
                arr[n, :k] = getattr(p, name)
            tp[n, :k] = p.tensor_parallel
            if n_layers > 1:
                eb[n, :k] = p.edge_bytes
    # Cheap guard for problems built with from_trusted_arrays: the kernel reads
    # raw pointers, so the packed shapes must agree exactly.
    if (any(a.shape != (P, W, n_layers) for a in stacks) or tp.shape != (P, W, n_layers)
            or eb.shape != (P, W, E) or widths.shape != (P, W)):
        raise ValueError("problem arrays have inconsistent shapes: forward_s, backward_s, "
                         "param_bytes, activation_bytes and tensor_parallel must be (widths, layers) "
                         "and edge_bytes (widths, layers - 1)")
    for n, p in enumerate(problems):  # cheap guard (from_trusted_arrays): no 0, no wrap-around
        _check_counts(n, p.devices, p.microbatches, n_layers)
    scalars = (
        np.fromiter((p.devices for p in problems), np.int64, P),
        np.fromiter((p.memory_bytes for p in problems), np.float64, P),
        np.fromiter((p.bandwidth for p in problems), np.float64, P),
        np.fromiter((p.microbatches for p in problems), np.int64, P),
        np.fromiter((p.recompute for p in problems), np.uint8, P),
        np.fromiter((p.optimizer == "adam" for p in problems), np.uint8, P),
    )
    return (np.ascontiguousarray(widths), *(np.ascontiguousarray(a) for a in stacks),
            np.ascontiguousarray(tp), np.ascontiguousarray(eb), *scalars)


def _check_counts(n, devices, microbatches, n_layers) -> None:
    """ValueError naming ``problems[n]``'s field unless 1 ≤ devices ≤ MAX_COUNT / layers and
    1 ≤ microbatches ≤ MAX_COUNT (what the kernel's int64 arithmetic holds; a zero would
    divide by zero in it)."""
    for name, value, top in (("devices", devices, MAX_COUNT // max(1, n_layers)),
                             ("microbatches", microbatches, MAX_COUNT)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                or not 1 <= value <= top:
            raise ValueError(f"problems[{n}].{name} must be an integer from 1 to {top:,}, "
                             f"got {_validate.show(value)}")


def solve_many(problems) -> list:
    """Optimal :class:`Placement` of each problem; all must have the same chain length.

    The sweep's entry point: the problems are packed into (P, W, L) arrays and
    solved in one call of the compiled kernel, GIL released, in parallel over
    problems with ``phaze._threads.kernel_threads()`` OpenMP threads.
    """
    problems = list(problems)
    if not problems:
        return []
    packed = _pack(problems)
    time, width, dp, n_stages, ends, devs, loads, mems = _kernel.solve_packed(
        *packed, num_threads=kernel_threads())
    out = []
    for n, p in enumerate(problems):
        if width[n] <= 0:
            out.append(Placement(False, math.inf, 0, 0, [], [], [], _infeasible_reason(p)))
            continue
        S = int(n_stages[n])
        ids = p.layer_ids.tolist()
        stages, start = [], 0
        for s in range(S):
            end = int(ends[n, s]) + 1
            stages.append((ids[start:end], int(devs[n, s])))
            start = end
        out.append(Placement(True, float(time[n]), int(width[n]), int(dp[n]), stages,
                             loads[n, :S].tolist(), mems[n, :S].tolist(), ""))
    return out


def solve(problem: PlacementProblem) -> Placement:
    """Optimal plan of one problem (exact; ties between widths keep the smaller width)."""
    if not isinstance(problem, PlacementProblem):
        raise ValueError(f"problem must be a PlacementProblem, got {type(problem).__name__}")
    return solve_many([problem])[0]


# ---------------------------------------------------------------------------
# The cost of a given plan, by the rules (independent of the DP kernel)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StageCost:
    """Cost of one pipeline stage of a plan, per microbatch (seconds) and per device (bytes).

    - ``first``, ``last``: chain positions (0-based, inclusive) of the stage's layers;
      ``position``: counted from the end of the pipeline (the last stage is 1);
      ``devices``: devices of one replica of the stage (t or 1).
    - ``forward_s``: forward walk, including the wait for the incoming edge;
      ``backward_s``: backward walk without recomputation, including the wait for the
      outgoing edge's gradient.
    - ``load_s``: the stage's load: forward + backward, or forward + the recomputing
      backward walk when recomputation is on and the stage is not the last.
    - ``compute_s``: layer time inside the load (Σ forward + Σ backward, plus Σ forward
      again when recomputing); ``communication_s`` = ``load_s`` − ``compute_s``: the
      edge waits the walks expose.
    - ``memory_bytes``: 2P (+P for Adam) + A + (position − 1) · stash;
      ``fits``: ``memory_bytes`` ≤ the problem's ``memory_bytes``.
    """

    first: int
    last: int
    position: int
    devices: int
    forward_s: float
    backward_s: float
    load_s: float
    compute_s: float
    communication_s: float
    memory_bytes: float
    fits: bool

    @property
    def n_layers(self) -> int:
        """Layers in the stage."""
        return self.last - self.first + 1


@dataclass(frozen=True)
class PlanBreakdown:
    """Where the time and memory of a plan go (see :func:`breakdown`).

    - ``stages``: one :class:`StageCost` per stage, first stage first.
    - ``max_load_s``: the largest stage load (seconds per microbatch);
      ``critical_stage``: index (0-based) of the first stage with that load.
    - Seconds per batch: ``steady_s`` = max load · ⌈m/d⌉, ``bubble_s`` = max load · (S − 1),
      ``grad_sync_s`` = 4 (d − 1) · P_first / (bandwidth · d).
    - ``time_per_batch``: max load · (⌈m/d⌉ + S − 1) + grad sync, evaluated in that
      order (what :func:`evaluate` returns; it equals steady + bubble + sync up to
      rounding), or ``math.inf`` when the plan breaks a limit.
    - ``devices_used``: d · Σ stage devices; ``feasible``: no limit is broken;
      ``reason``: the first broken limit in words ("" when feasible).
    """

    stages: tuple
    tensor_parallel: int
    data_parallel: int
    max_load_s: float
    critical_stage: int
    steady_s: float
    bubble_s: float
    grad_sync_s: float
    time_per_batch: float
    devices_used: int
    feasible: bool
    reason: str


def _plan_bounds(problem, placement):
    """(width row, d, [(first, last, devices)]) of a plan, or ValueError if it is malformed."""
    t = int(placement.tensor_parallel)
    matches = np.flatnonzero(problem.widths == t)
    if matches.size == 0:
        raise ValueError(f"tensor_parallel {t} is not one of the problem's widths {problem.widths.tolist()}")
    w = int(matches[0])
    d = int(placement.data_parallel)
    if d < 1:
        raise ValueError(f"data_parallel must be >= 1, got {d}")
    ids = problem.layer_ids.tolist()
    pos_of = {lid: i for i, lid in enumerate(ids)}
    bounds, expect = [], 0
    for s, (layer_ids, devices) in enumerate(placement.stages):
        layer_ids = list(layer_ids)
        if not layer_ids:
            raise ValueError(f"stage {s} is empty")
        idx = [pos_of.get(lid, -1) for lid in layer_ids]
        if idx != list(range(expect, expect + len(idx))):
            raise ValueError(f"stage {s} does not continue the chain in order (layers {layer_ids})")
        rule = t if (t > 1 and bool(problem.tensor_parallel[w, idx].any())) else 1
        if int(devices) != rule:
            raise ValueError(f"stage {s} declares {devices} devices; the rule gives {rule}")
        bounds.append((idx[0], idx[-1], rule))
        expect = idx[-1] + 1
    if expect != len(ids) or not bounds:
        raise ValueError("the stages must cover every layer of the chain")
    return w, d, bounds


def _stage_cost(problem, w, first, last, position, devices) -> StageCost:
    """Cost of layers first..last at ``position`` (1 = last stage), by the rules.

    Sums run in chain order (backward walks in reverse chain order), one addition
    at a time as the rules state them: memory limits can sit exactly on a sum,
    and the search's results are compared bit for bit.
    """
    fw, bw = problem.forward_s[w], problem.backward_s[w]
    L = problem.n_layers
    wait_in = problem.edge_bytes[w, first - 1] / problem.bandwidth if first > 0 else 0.0
    wait_out = problem.edge_bytes[w, last] / problem.bandwidth if last < L - 1 else 0.0
    clock = wait_in                      # forward walk, first layer waits for its input
    for i in range(first, last + 1):
        clock += fw[i]
    forward = clock
    clock = wait_out                     # backward walk in reverse
    for i in range(last, first - 1, -1):
        clock += bw[i]
    backward = clock
    sum_fw = sum_bw = 0.0                # the layers' own time inside the load
    for i in range(first, last + 1):
        sum_fw += fw[i]
    for i in range(last, first - 1, -1):
        sum_bw += bw[i]
    if problem.recompute and position > 1:
        # The recomputed forward (sum_fw: no input wait) runs before the backward walk,
        # which also cannot start before the outgoing edge's gradient arrives.
        clock = max(sum_fw, wait_out)
        for i in range(last, first - 1, -1):
            clock += bw[i]
        load = forward + clock
        compute = 2 * sum_fw + sum_bw
    else:
        load = forward + backward
        compute = sum_fw + sum_bw
    params = acts = 0.0
    for i in range(first, last + 1):
        params += float(problem.param_bytes[w, i])
        acts += float(problem.activation_bytes[w, i])
    const = (3.0 if problem.optimizer == "adam" else 2.0) * params + acts  # 2P (+P for Adam) + A
    if problem.recompute:  # only the stage's input is stashed per microbatch in flight
        stash = problem.edge_bytes[w, first - 1] if first > 0 else 0.0
    else:
        stash = acts
    memory = const + (position - 1) * stash
    return StageCost(first=int(first), last=int(last), position=int(position), devices=int(devices),
                     forward_s=float(forward), backward_s=float(backward), load_s=float(load),
                     compute_s=float(compute), communication_s=float(load - compute),
                     memory_bytes=float(memory), fits=bool(memory <= problem.memory_bytes))


def breakdown(problem: PlacementProblem, placement: Placement) -> PlanBreakdown:
    """Time and memory of ``placement`` under ``problem``'s rules, stage by stage.

    The one cost model of a given plan: :func:`evaluate` returns its
    ``time_per_batch`` and ``phaze.search.evaluate_point`` reports it. Every stage
    is costed even when the plan breaks a limit (memory at a stage's position,
    devices, d > min(devices, microbatches), more stages than min(devices, layers),
    a width above the device count); then ``feasible`` is False, ``reason`` names
    the first broken limit and ``time_per_batch`` is ``math.inf``.

    Raises ValueError for an infeasible placement (it has no plan) and for a
    malformed plan: a width not offered, stages that do not cover the chain in
    order, a stage's device count that differs from the rule (t if it holds a
    tensor-parallel layer, else 1), d < 1.
    """
    if not placement.feasible:
        raise ValueError("an infeasible placement has no plan to break down")
    w, d, bounds = _plan_bounds(problem, placement)
    t = int(placement.tensor_parallel)
    D, L, S, m = problem.devices, problem.n_layers, len(bounds), problem.microbatches
    stages = tuple(_stage_cost(problem, w, first, last, S - s, a)
                   for s, (first, last, a) in enumerate(bounds))
    memory = problem.memory_bytes
    used = d * sum(a for _, _, a in bounds)
    reason = ""
    for j, st in enumerate(stages):
        if not st.fits:
            reason = (f"stage {j + 1} needs {st.memory_bytes / 2**30:.2f} GiB of "
                      f"{memory / 2**30:.2f} GiB HBM")
            break
    if not reason and used > D:  # same as Σ stage devices > ⌊D/d⌋
        reason = f"the plan needs {used} devices, only {D} available"
    if not reason and d > m:
        reason = f"data_parallel {d} exceeds the {m} microbatches per batch"
    if not reason and S > min(D, L):
        reason = f"{S} stages exceed min(devices, layers) = {min(D, L)}"
    if not reason and t > D:
        reason = f"tensor_parallel {t} exceeds the {D} devices"
    max_load, critical = 0.0, 0
    for s, st in enumerate(stages):
        if st.load_s > max_load:
            critical = s
        max_load = max(max_load, st.load_s)
    p_first = 0.0                        # parameter bytes of the first stage, in chain order
    for i in range(bounds[0][0], bounds[0][1] + 1):
        p_first += float(problem.param_bytes[w, i])
    slots = math.ceil(m / d)
    sync = 4.0 * (d - 1) * p_first / (problem.bandwidth * d)
    time = math.inf if reason else max_load * (slots + S - 1) + sync
    return PlanBreakdown(stages=stages, tensor_parallel=t, data_parallel=d, max_load_s=max_load,
                         critical_stage=critical, steady_s=max_load * slots,
                         bubble_s=max_load * (S - 1), grad_sync_s=sync, time_per_batch=time,
                         devices_used=int(used), feasible=not reason, reason=reason)


def evaluate(problem: PlacementProblem, placement: Placement) -> float:
    """Time per batch (seconds) of ``placement`` under ``problem``'s rules, independent of the DP.

    ``breakdown(problem, placement).time_per_batch``: ``math.inf`` for an
    infeasible placement or a plan that breaks a limit (memory at a stage's
    position, devices, d > min(devices, microbatches), more stages than
    min(devices, layers), a width above the device count). Raises ValueError for a
    malformed plan (see :func:`breakdown`).
    """
    if not placement.feasible:
        return math.inf
    return breakdown(problem, placement).time_per_batch
