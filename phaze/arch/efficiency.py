"""Real-chip efficiency parameters of the calibrated cost model (docs/design.md §2.4, §2.10).

The calibrated operator model (``phaze.cost.op_latencies(..., model="calibrated")``)
applies the same rules to every architecture row; the rules need a few parameters
that the hardware knobs do not carry. They are held in an :class:`Efficiency`
(one chip's set) or, for the kernels, in a structured array of
:data:`EFFICIENCY_DTYPE` with one row per architecture.

Fields (SI units; "fraction" = achieved / ideal, in (0, 1]):

GEMM tile rule (``phaze.cost`` module docstring, "calibrated model"):

- ``tile_m_mult``, ``tile_n_mult``: the output tile one group of tensor cores owns is
  (tile_m_mult·tc_width) × (tile_n_mult·tc_width) elements (M × N). Expressed in array
  widths so that one rule scales to every array shape of the space.
- ``tile_k_mult``: one step of a tile's K loop covers tile_k_mult·tc_depth of K.
- ``cores_per_tile``: tensor cores that work together on one output tile (an SM's four
  tensor cores on a GPU); tiles are dealt to ⌊num_tc / cores_per_tile⌋ groups in waves.
- ``k_stages``: depth of the K-loop software pipeline; each tile pays ``k_stages − 1``
  extra K-steps to fill and drain it. 1 = no per-tile fill (a weight-stationary array
  whose fill is already in the template's array model).
- ``tile_efficiency``: sustained fraction of the arrays' peak inside a tile's K loop
  (16-bit GEMMs).
- ``fp8_tile_efficiency``: the same for FP8 GEMMs, as a fraction of the FP8 peak
  (``fp8_rate`` × the 16-bit peak); a chip without its own FP8 measurement takes its
  ``tile_efficiency`` (the default when an :class:`Efficiency` is made without it).
- ``flash_fwd_efficiency``, ``flash_bwd_efficiency``: the sustained fraction of the 16-bit
  tensor peak of the fused (flash) attention kernel, forward (``flash_attn``) and backward
  (``flash_attn.bwd``), at long sequences and head dim 128, its FLOPs counted as the kernel
  papers count them (a causal mask: the computed half). The cost model prices those two
  operators at this fraction of the arrays' peak instead of as a GEMM (no tile rule, no
  ``tile_efficiency``): the measurement is of the whole kernel, whose inner loop runs over
  key blocks, not over the head dimension the operator's K carries. A chip without a
  measurement takes its ``tile_efficiency`` (the default when an :class:`Efficiency` is
  made without them).

Memory and launches:

- ``hbm_efficiency``: achievable fraction of the HBM bandwidth for streaming traffic.
- ``attention_hbm_efficiency``: the same for the unfused attention core's kernels
  (:data:`phaze.graph.UNFUSED_ATTENTION_OPS`: the batched score and context GEMMs, the
  scale-mask-softmax and the attention dropout, forward and backward), which stream the
  b·a·s² score matrices; a component measurement of exactly those kernels sets it.
- ``launch_s``: fixed time per compute operator (kernel launch and synchronisation gap), s.

Collectives (ring all-reduce, NCCL's α–β form) and point-to-point transfers:

- ``coll_latency_s``: latency per collective call, s (NCCL ``baseLat``);
- ``link_step_s`` / ``net_step_s``: latency per ring step on the in-node link / between
  nodes, s (NCCL ``hwLat``);
- ``link_efficiency`` / ``net_efficiency``: achievable bus bandwidth as a fraction of
  ``link_gb_per_s`` / ``net_gb_per_s``;
- ``link_p2p_latency_s``, ``link_p2p_efficiency``, ``net_p2p_latency_s``,
  ``net_p2p_efficiency``: the same for one point-to-point send on each tier.

NCCL's other protocols (``phaze.collectives``, "Protocols"; sheet §4.4): the parameters
above are NCCL's Simple protocol's; an all-reduce, reduce-scatter or all-gather ring is
priced at the fastest of Simple, LL and LL128 (NCCL's tuning model, src/graph/tuning.cc at
the chip's NCCL version):

- ``ll_latency_s``, ``ll_link_step_s``, ``ll_net_step_s``: LL's base latency and per-step
  latencies in a node and between nodes, s; ``ll_span_step_s``: LL's in-node step of a
  ring that spans nodes, s (v2.12.7: 1.8 × the in-node step; v2.20.3: at least the host's
  network overhead);
- ``ll_link_gb_per_s``, ``ll_net2_gb_per_s``, ``ll_net_gb_per_s``: LL's bus-bandwidth cap
  (NCCL ``llMaxBws``) in one node, on two nodes and on more, GB/s; LL runs at the least
  of the cap and a quarter (a one-pass ring in one node: a third) of the tier's bus
  bandwidth. 0: not run on that tier; ``ll_link_gb_per_s`` 0 runs neither LL nor LL128
  in one node (an in-node curve fitted to measured NCCL runs: already NCCL's choice);
- ``ll128_latency_s``, ``ll128_link_step_s``, ``ll128_net_step_s``: LL128's, s;
  ``ll128_share``: LL128's bus bandwidth as a share of the tier's (NCCL: 0.92), 0 where
  NCCL does not enable it.

A set made without them runs Simple only (each 0).

Where each preset's numbers come from: its chip file's ``cite`` lines (the first study's
four: :mod:`phaze.arch.presets`' docstring), the sheet behind them being
``docs/fidelity-sources.md``. A preset's set is what was measured on its die, the rest by
the stated rules of :mod:`phaze.arch.rules`. Rows that are no preset — the study's
hypothetical chips — take :data:`TEMPLATE`: the same rules for a chip of wide systolic
arrays that nothing was measured on (the means of the measured dies' fractions and
latencies, the template's own tile rule: one array per tile, no per-tile K fill, because
the template's cores are weight-stationary arrays like the TPU's, not SMs).
:func:`for_rows` gives each row its preset's set, or the template's.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _catalog
from ._efields import EFFICIENCY_DTYPE, check_row as _check_row
from ._rows import validate


#: Fields that a set made without them takes from its ``tile_efficiency``.
_DEFAULT_TILE = ("fp8_tile_efficiency", "flash_fwd_efficiency", "flash_bwd_efficiency")


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """One chip's efficiency parameters (see the module docstring for each field; SI units)."""

    tile_m_mult: int
    tile_n_mult: int
    tile_k_mult: int
    cores_per_tile: int
    k_stages: int
    tile_efficiency: float
    hbm_efficiency: float
    attention_hbm_efficiency: float
    launch_s: float
    coll_latency_s: float
    link_step_s: float
    net_step_s: float
    link_efficiency: float
    net_efficiency: float
    link_p2p_latency_s: float
    link_p2p_efficiency: float
    net_p2p_latency_s: float
    net_p2p_efficiency: float
    fp8_tile_efficiency: float = None
    flash_fwd_efficiency: float = None
    flash_bwd_efficiency: float = None
    # NCCL's LL/LL128 protocols (module docstring); 0: not run (Simple only)
    ll_latency_s: float = 0.0
    ll_link_step_s: float = 0.0
    ll_span_step_s: float = 0.0
    ll_net_step_s: float = 0.0
    ll_link_gb_per_s: float = 0.0
    ll_net2_gb_per_s: float = 0.0
    ll_net_gb_per_s: float = 0.0
    ll128_latency_s: float = 0.0
    ll128_link_step_s: float = 0.0
    ll128_net_step_s: float = 0.0
    ll128_share: float = 0.0

    def __post_init__(self):
        # no FP8 or fused-attention measurement: the 16-bit GEMM fraction
        for f in _DEFAULT_TILE:
            if getattr(self, f) is None:
                object.__setattr__(self, f, self.tile_efficiency)
        _check_row({f: getattr(self, f) for f in EFFICIENCY_DTYPE.names})

    def row(self) -> np.ndarray:
        """This set as a one-row :data:`EFFICIENCY_DTYPE` array."""
        out = np.empty(1, dtype=EFFICIENCY_DTYPE)
        for f in EFFICIENCY_DTYPE.names:
            out[f] = getattr(self, f)
        return out


#: Parameter sets by name: every preset of ``phaze.arch.presets`` (read from its chip file)
#: plus ``"template"``.
PARAMETER_SETS = {name: Efficiency(**values) for name, values in _catalog.EFFICIENCY.items()}

#: The set of rows that are no preset (the study's hypothetical chips); see the module docstring.
TEMPLATE = PARAMETER_SETS["template"]


def names() -> list:
    """Names of the parameter sets (the presets', then ``"template"``)."""
    return list(PARAMETER_SETS)


def get(name: str) -> Efficiency:
    """The parameter set ``name``; KeyError lists the names."""
    try:
        return PARAMETER_SETS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown efficiency parameter set {name!r}; known: {', '.join(PARAMETER_SETS)}") from None


def rows(efficiency, n_archs: int) -> np.ndarray:
    """Per-architecture parameters, a C-contiguous :data:`EFFICIENCY_DTYPE` array of ``n_archs`` rows.

    ``efficiency``: ``None`` (:data:`TEMPLATE` for every row), a set's name, an
    :class:`Efficiency`, or a structured array with the fields of
    :data:`EFFICIENCY_DTYPE` and 1 or ``n_archs`` rows (one set per architecture).
    Raises ``ValueError`` naming a field out of range.
    """
    if efficiency is None:
        efficiency = TEMPLATE
    if isinstance(efficiency, str):
        efficiency = get(efficiency)
    if isinstance(efficiency, Efficiency):
        base = efficiency.row()
    elif isinstance(efficiency, np.ndarray) and efficiency.dtype.names is not None:
        # an array without fp8_tile_efficiency or the flash fractions takes each row's
        # tile_efficiency for them (as Efficiency)
        missing = [f for f in EFFICIENCY_DTYPE.names if f not in efficiency.dtype.names
                   and f not in _DEFAULT_TILE]
        if missing:
            raise ValueError(f"efficiency array lacks field(s) {', '.join(missing)}")
        flat = efficiency.reshape(-1)
        base = np.empty(flat.shape[0], dtype=EFFICIENCY_DTYPE)
        for f in EFFICIENCY_DTYPE.names:
            base[f] = flat[f] if f in flat.dtype.names else flat["tile_efficiency"]
        _check_row({f: base[f] for f in EFFICIENCY_DTYPE.names})
    else:
        raise ValueError("efficiency must be None, a parameter-set name "
                         f"({', '.join(PARAMETER_SETS)}), a phaze.arch.efficiency.Efficiency "
                         f"or an EFFICIENCY_DTYPE array, got {type(efficiency).__name__}")
    if base.shape[0] == 1:
        return np.ascontiguousarray(np.repeat(base, n_archs))
    if base.shape[0] != n_archs:
        raise ValueError(f"efficiency array has {base.shape[0]} rows; expected 1 or {n_archs} "
                         f"(one per architecture)")
    return np.ascontiguousarray(base)


def for_rows(archs) -> np.ndarray:
    """One parameter set per architecture row: a preset's set where the row equals that
    preset in every knob, :data:`TEMPLATE` elsewhere (an :data:`EFFICIENCY_DTYPE` array
    to pass as ``efficiency=``).

    A row changed in any knob (``make_archs(base="a100-80g", num_tc=216)``) is a
    hypothetical chip and takes the template's set: the presets' parameters were
    measured on those chips only.
    """
    archs = validate(archs)
    out = np.repeat(TEMPLATE.row(), archs.shape[0])
    for name, same in _catalog.match(archs):
        if np.any(same):
            out[same] = get(name).row()[0]
    return np.ascontiguousarray(out)
