"""The operator graph: :class:`OpGraph`, one layer pass as a struct of numpy arrays.

Re-exported by :mod:`phaze.graph` (``phaze.graph.OpGraph``), which builds them from
models; kept in its own module so that ``graph`` stays a readable size.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ._dag import topological_order
from ..precision import DEFAULT_DTYPE, check_dtype, is_low_precision

#: Operators of the unfused attention core, forward and backward (``phaze.graph._ops``
#: ``unfused_attention`` and the blocks' backward): the batched score and context GEMMs,
#: the scale-mask-softmax (with the study's kernels also the dropout) and Megatron-LM's
#: separate attention dropout. They stream the b·a·s² score matrices.
UNFUSED_ATTENTION_OPS = frozenset((
    "attn_scores", "softmax", "attn_dropout", "attn_context",
    "attn_context.dX", "attn_context.dW", "attn_dropout.bwd", "softmax.bwd",
    "attn_scores.dX", "attn_scores.dW"))

#: What a collective operator (kind 3) does: the ``collective`` array of an OpGraph holds the
#: index into this table (0 for every other operator). ``phaze.collectives`` prices each.
#: "p2p" is a ring exchange of point-to-point sends (ring attention's K/V exchange).
COLLECTIVE_KINDS = ("none", "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
COLL_NONE, COLL_ALL_REDUCE, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_ALL_TO_ALL, COLL_P2P = \
    range(len(COLLECTIVE_KINDS))


@dataclass(frozen=True, eq=False)
class OpGraph:
    """Operators of one layer's forward or backward pass (one tensor-parallel slice).

    Arrays, one entry per operator (n = ``len(names)``):

    - ``kind`` int8: 0 GEMM/BMM, 1 vector, 2 fused GEMM+epilogue, 3 collective.
    - ``dims`` int64 (n, 4): batch, M, K, N of the GEMM part (zeros otherwise).
    - ``cycles_per_element`` float64: vector cycles per output element (0 for pure GEMMs).
    - ``elements`` int64: output elements.
    - ``bytes_in`` / ``bytes_out`` int64: bytes read from / written to HBM at minimum.
    - ``comm_bytes`` int64: bytes each participant contributes to a collective (0 otherwise).
    - ``group_size`` int32: participants of a collective (the tensor-parallel width t; ep for
      an ``alltoall_*``, cp for ``ring_kv_exchange*``; 1 otherwise).
    - ``collective`` int8: what a collective does, an index into :data:`COLLECTIVE_KINDS`
      (all-reduce, reduce-scatter, all-gather, all-to-all, point-to-point ring exchange);
      0 ("none") for every other operator. Absent, every collective is an all-reduce.
    - ``pred_ptr`` int32 (n+1), ``pred_idx`` int32: CSR lists of predecessors.
    - ``names``: list of str.
    - ``bytes_per_element``: element size of the 16-bit tensors the byte counts were
      computed with (2; fp32 and 1-byte tensors are counted in their own sizes).
    - ``dtype``: the training datatype of the graph (``phaze.precision.DTYPES``).
    - ``fp8`` bool: operators whose GEMM runs in FP8 (inputs at 1 byte per element in
      ``bytes_in``, the chip's fp8 tensor rate); all False unless ``dtype == "fp8"``.
    - ``flash_shape`` int64 (n, 2): for a fused attention kernel (``flash_attn``,
      ``flash_attn.bwd``), its head dimension (of the query and key) and the keys each query
      computes on average (``phaze.graph._ops.flash_keys``): the shape its measured speed
      depends on (``phaze.arch.attention_shape_factor``); zeros for every other operator.

    :attr:`attention_core` (derived from the names): the operators of the unfused
    attention core (:data:`UNFUSED_ATTENTION_OPS`), whose HBM traffic the calibrated cost
    model prices at the chip's ``attention_hbm_efficiency``.
    """

    kind: np.ndarray
    dims: np.ndarray
    cycles_per_element: np.ndarray
    elements: np.ndarray
    bytes_in: np.ndarray
    bytes_out: np.ndarray
    comm_bytes: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    names: list
    group_size: np.ndarray = None
    bytes_per_element: int = 2
    dtype: str = DEFAULT_DTYPE
    fp8: np.ndarray = None
    collective: np.ndarray = None
    flash_shape: np.ndarray = None
    _order: np.ndarray = field(default=None, repr=False)

    def __post_init__(self):
        n = len(self.names)
        set_ = object.__setattr__
        set_(self, "kind", np.ascontiguousarray(self.kind, dtype=np.int8).reshape(n))
        set_(self, "dims", np.ascontiguousarray(self.dims, dtype=np.int64).reshape(n, 4))
        set_(self, "cycles_per_element",
             np.ascontiguousarray(self.cycles_per_element, dtype=np.float64).reshape(n))
        for name in ("elements", "bytes_in", "bytes_out", "comm_bytes"):
            set_(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.int64).reshape(n))
        gs = np.ones(n, dtype=np.int32) if self.group_size is None else self.group_size
        set_(self, "group_size", np.ascontiguousarray(gs, dtype=np.int32).reshape(n))
        set_(self, "pred_ptr", np.ascontiguousarray(self.pred_ptr, dtype=np.int32).reshape(n + 1))
        set_(self, "pred_idx", np.ascontiguousarray(self.pred_idx, dtype=np.int32).reshape(-1))
        set_(self, "names", list(self.names))
        set_(self, "dtype", check_dtype(self.dtype))
        fp8 = np.zeros(n, dtype=bool) if self.fp8 is None else self.fp8
        set_(self, "fp8", np.ascontiguousarray(fp8, dtype=bool).reshape(n))
        coll = np.where(self.kind == 3, COLL_ALL_REDUCE, COLL_NONE) if self.collective is None \
            else self.collective
        set_(self, "collective", np.ascontiguousarray(coll, dtype=np.int8).reshape(n))
        fs = np.zeros((n, 2), dtype=np.int64) if self.flash_shape is None else self.flash_shape
        set_(self, "flash_shape", np.ascontiguousarray(fs, dtype=np.int64).reshape(n, 2))
        self._validate()
        for name in ("kind", "dims", "cycles_per_element", "elements", "bytes_in", "bytes_out",
                     "comm_bytes", "group_size", "pred_ptr", "pred_idx", "fp8", "collective",
                     "flash_shape"):
            getattr(self, name).setflags(write=False)

    # -- construction helpers -------------------------------------------------
    @classmethod
    def from_ops(cls, ops, *, bytes_per_element: int = 2, dtype: str = DEFAULT_DTYPE) -> "OpGraph":
        """Build from a list of dicts with keys name, kind, preds (names or indices) and
        any of dims, cycles_per_element, elements, bytes_in, bytes_out, comm_bytes,
        group_size, fp8, collective, flash_shape (absent numeric keys are 0; group_size
        defaults to 1, fp8 to False, collective to "all_reduce" for a kind-3 operator; a
        collective may be
        given by its name in :data:`COLLECTIVE_KINDS` or its index)."""
        index = {}
        for i, op in enumerate(ops):
            if op["name"] in index:
                raise ValueError(f"operator name {op['name']!r} appears twice")
            index[op["name"]] = i
        ptr = [0]
        idx = []
        for op in ops:
            for p in op.get("preds", ()):
                if isinstance(p, str):
                    if p not in index:
                        raise ValueError(f"operator {op['name']!r} has unknown predecessor {p!r}")
                    p = index[p]
                idx.append(int(p))
            ptr.append(len(idx))
        n = len(ops)
        get = lambda key, default=0: [op.get(key, default) for op in ops]  # noqa: E731
        dims = np.array([list(op.get("dims", (0, 0, 0, 0))) for op in ops], dtype=np.int64)
        return cls(
            kind=np.array(get("kind"), dtype=np.int8),
            dims=dims.reshape(n, 4),
            cycles_per_element=np.array(get("cycles_per_element", 0.0), dtype=np.float64),
            elements=np.array(get("elements"), dtype=np.int64),
            bytes_in=np.array(get("bytes_in"), dtype=np.int64),
            bytes_out=np.array(get("bytes_out"), dtype=np.int64),
            comm_bytes=np.array(get("comm_bytes"), dtype=np.int64),
            group_size=np.array(get("group_size", 1), dtype=np.int32),
            pred_ptr=np.array(ptr, dtype=np.int32),
            pred_idx=np.array(idx, dtype=np.int32),
            names=[op["name"] for op in ops],
            bytes_per_element=bytes_per_element,
            dtype=dtype,
            fp8=np.array([bool(op.get("fp8", False)) for op in ops], dtype=bool),
            collective=np.array([_collective_code(op) for op in ops], dtype=np.int8),
            flash_shape=np.array([list(op.get("flash_shape", (0, 0))) for op in ops],
                                 dtype=np.int64).reshape(n, 2),
        )

    # -- validation -----------------------------------------------------------
    def _validate(self):
        n = self.n_ops
        if n == 0:
            raise ValueError("an OpGraph needs at least one operator")
        if np.any((self.kind < 0) | (self.kind > 3)):
            bad = int(np.flatnonzero((self.kind < 0) | (self.kind > 3))[0])
            raise ValueError(f"operator {self.names[bad]!r}: kind must be 0, 1, 2 or 3")
        if self.pred_ptr[0] != 0 or np.any(np.diff(self.pred_ptr) < 0) \
                or self.pred_ptr[-1] != self.pred_idx.shape[0]:
            raise ValueError("pred_ptr must start at 0, never decrease and end at len(pred_idx)")
        if self.pred_idx.size and (self.pred_idx.min() < 0 or self.pred_idx.max() >= n):
            raise ValueError(f"pred_idx entries must lie in [0, {n})")
        for name in ("dims", "elements", "bytes_in", "bytes_out", "comm_bytes", "flash_shape"):
            arr = getattr(self, name)
            if np.any(arr < 0):
                row = int(np.flatnonzero((arr < 0).reshape(n, -1).any(axis=1))[0])
                raise ValueError(f"operator {self.names[row]!r}: {name} must be >= 0")
        cpe = self.cycles_per_element
        if not np.all(np.isfinite(cpe)) or np.any(cpe < 0):
            row = int(np.flatnonzero(~np.isfinite(cpe) | (cpe < 0))[0])
            raise ValueError(f"operator {self.names[row]!r}: cycles_per_element must be finite and >= 0")
        if np.any(self.group_size < 1):
            row = int(np.flatnonzero(self.group_size < 1)[0])
            raise ValueError(f"operator {self.names[row]!r}: group_size must be >= 1")
        coll = self.collective
        bad = (coll < 0) | (coll >= len(COLLECTIVE_KINDS)) | ((coll == COLL_NONE) != (self.kind != 3))
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(f"operator {self.names[row]!r}: collective must be one of "
                             f"{', '.join(COLLECTIVE_KINDS[1:])} for a collective (kind 3) and "
                             f"none otherwise")
        bad = self.fp8 & ~((self.kind == 0) | (self.kind == 2))
        if np.any(bad):
            raise ValueError(f"operator {self.names[int(np.flatnonzero(bad)[0])]!r}: fp8 applies "
                             f"only to GEMM operators (kind 0 or 2)")
        if np.any(self.fp8) and not is_low_precision(self.dtype):
            raise ValueError(f"operator {self.names[int(np.flatnonzero(self.fp8)[0])]!r} runs in "
                             f"low precision, which needs a low-precision dtype for the graph (it is {self.dtype!r})")
        order, done = topological_order(self.pred_ptr, self.pred_idx)
        if done < n:
            on_cycle = sorted(set(range(n)) - set(order[:done].tolist()))
            raise ValueError(
                f"operator graph has a cycle through {', '.join(repr(self.names[i]) for i in on_cycle[:5])}")
        order.setflags(write=False)
        object.__setattr__(self, "_order", order)

    # -- derived views --------------------------------------------------------
    @property
    def n_ops(self) -> int:
        return len(self.names)

    @property
    def order(self) -> np.ndarray:
        """A topological order of the operators (int32)."""
        return self._order

    def preds(self, i: int) -> np.ndarray:
        """Predecessor indices of operator ``i``."""
        return self.pred_idx[self.pred_ptr[i]:self.pred_ptr[i + 1]]

    @property
    def attention_core(self) -> np.ndarray:
        """bool per operator: whether it belongs to the unfused attention core
        (:data:`UNFUSED_ATTENTION_OPS`); read-only, computed once."""
        flags = self.__dict__.get("_attention_core")
        if flags is None:
            flags = np.fromiter((n in UNFUSED_ATTENTION_OPS for n in self.names), dtype=bool,
                                count=len(self.names))
            flags.setflags(write=False)
            object.__setattr__(self, "_attention_core", flags)
        return flags

    @property
    def flops(self) -> np.ndarray:
        """Floating-point operations of each operator's GEMM part: 2·batch·M·K·N (float64)."""
        d = self.dims.astype(np.float64)
        return 2.0 * d[:, 0] * d[:, 1] * d[:, 2] * d[:, 3]

    def content_hash(self) -> str:
        """Stable digest of the graph's structure and sizes (names excluded), for memoisation."""
        h = hashlib.blake2b(digest_size=16)
        for arr in (self.kind, self.dims, self.cycles_per_element, self.elements, self.bytes_in,
                    self.bytes_out, self.comm_bytes, self.group_size, self.pred_ptr, self.pred_idx):
            h.update(arr.tobytes())
        h.update(str(self.bytes_per_element).encode())
        if np.any(self.fp8):  # a 16-bit graph hashes as it always did
            h.update(b"fp8")
            h.update(self.fp8.tobytes())
        if np.any(self.flash_shape):  # a graph without a fused attention kernel hashes as before
            h.update(b"flash_shape")
            h.update(self.flash_shape.tobytes())
        if np.any(self.collective > COLL_ALL_REDUCE):  # all-reduces alone hash as they always did
            h.update(b"collective")
            h.update(self.collective.tobytes())
        return h.hexdigest()

    def collectives(self, *kinds) -> np.ndarray:
        """bool per operator: whether it is a collective of one of ``kinds`` (names of
        :data:`COLLECTIVE_KINDS`)."""
        mask = np.zeros(self.n_ops, dtype=bool)
        for k in kinds:
            mask |= self.collective == COLLECTIVE_KINDS.index(k)
        return mask

    def __repr__(self):
        counts = np.bincount(self.kind, minlength=4)
        return (f"OpGraph({self.n_ops} ops: {counts[0]} gemm, {counts[1]} vector, "
                f"{counts[2]} fused, {counts[3]} collective)")


def _collective_code(op) -> int:
    """The ``collective`` index of one operator dict of :meth:`OpGraph.from_ops`."""
    c = op.get("collective")
    if c is None:
        return COLL_ALL_REDUCE if op.get("kind") == 3 else COLL_NONE
    if isinstance(c, str):
        if c not in COLLECTIVE_KINDS:
            raise ValueError(f"operator {op['name']!r}: collective must be one of "
                             f"{', '.join(COLLECTIVE_KINDS)}, got {c!r}")
        return COLLECTIVE_KINDS.index(c)
    return int(c)
