"""The efficiency parameters' fields and their ranges (private to ``phaze.arch``).

A leaf module: :mod:`phaze.arch.presets` reads its chip files, efficiency sets included,
while it is imported, before :mod:`phaze.arch.efficiency` (which builds its parameter
sets from the presets) exists. Field meanings and units: :mod:`phaze.arch.efficiency`.
"""
from __future__ import annotations

import numpy as np

#: One architecture's efficiency parameters per row (field meanings: ``phaze.arch.efficiency``).
EFFICIENCY_DTYPE = np.dtype([
    ("tile_m_mult", np.int64),
    ("tile_n_mult", np.int64),
    ("tile_k_mult", np.int64),
    ("cores_per_tile", np.int64),
    ("k_stages", np.int64),
    ("tile_efficiency", np.float64),
    ("fp8_tile_efficiency", np.float64),
    ("flash_fwd_efficiency", np.float64),
    ("flash_bwd_efficiency", np.float64),
    ("hbm_efficiency", np.float64),
    ("attention_hbm_efficiency", np.float64),
    ("launch_s", np.float64),
    ("coll_latency_s", np.float64),
    ("link_step_s", np.float64),
    ("net_step_s", np.float64),
    ("link_efficiency", np.float64),
    ("net_efficiency", np.float64),
    ("link_p2p_latency_s", np.float64),
    ("link_p2p_efficiency", np.float64),
    ("net_p2p_latency_s", np.float64),
    ("net_p2p_efficiency", np.float64),
    ("ll_latency_s", np.float64),
    ("ll_link_step_s", np.float64),
    ("ll_span_step_s", np.float64),
    ("ll_net_step_s", np.float64),
    ("ll_link_gb_per_s", np.float64),
    ("ll_net2_gb_per_s", np.float64),
    ("ll_net_gb_per_s", np.float64),
    ("ll128_latency_s", np.float64),
    ("ll128_link_step_s", np.float64),
    ("ll128_net_step_s", np.float64),
    ("ll128_share", np.float64),
])

#: Integer fields (≥ 1): the GEMM tile rule's multiples, cores per tile, pipeline stages.
INT_FIELDS = tuple(n for n in EFFICIENCY_DTYPE.names if EFFICIENCY_DTYPE[n] == np.int64)
#: Fractions in (0, 1]: achieved / ideal.
FRACTIONS = tuple(n for n in EFFICIENCY_DTYPE.names if n.endswith("efficiency"))
#: Bus-bandwidth caps in GB/s, finite and ≥ 0 (0: the protocol is not run on that tier).
RATES = tuple(n for n in EFFICIENCY_DTYPE.names if n.endswith("_gb_per_s"))
#: Shares in [0, 1] (0: the protocol is not run).
SHARES = tuple(n for n in EFFICIENCY_DTYPE.names if n.endswith("_share"))
#: Times in seconds, finite and ≥ 0.
SECONDS = tuple(n for n in EFFICIENCY_DTYPE.names if n.endswith("_s") and n not in RATES)
#: NCCL's LL/LL128 protocol parameters (``phaze.collectives``, "Protocols"); a chip that
#: does not state them runs Simple only (each 0).
PROTOCOL_FIELDS = tuple(n for n in EFFICIENCY_DTYPE.names if n.startswith("ll"))


def _all_in_range(values) -> bool:
    """Whether every field of ``values`` is in its range (one vectorised test per kind: the
    cost models validate their parameter rows on every call, so the common case is cheap)."""
    with np.errstate(invalid="ignore"):
        ints = np.concatenate([np.asarray(values[f], dtype=np.float64).reshape(-1)
                               for f in INT_FIELDS])
        fracs = np.concatenate([np.asarray(values[f], dtype=np.float64).reshape(-1)
                                for f in FRACTIONS])
        secs = np.concatenate([np.asarray(values[f], dtype=np.float64).reshape(-1)
                               for f in SECONDS + RATES])
        shares = np.concatenate([np.asarray(values[f], dtype=np.float64).reshape(-1)
                                 for f in SHARES])
        return bool((ints >= 1).all() and (ints == np.floor(ints)).all()
                    and np.isfinite(ints).all() and (fracs > 0).all() and (fracs <= 1).all()
                    and (secs >= 0).all() and np.isfinite(secs).all()
                    and (shares >= 0).all() and (shares <= 1).all())


def check_row(values) -> None:
    """ValueError naming the first field of ``values`` (field → scalar or array) out of its range."""
    try:
        if _all_in_range(values):
            return
    except (TypeError, ValueError):
        pass  # the field-by-field checks below name what is wrong
    for f in INT_FIELDS:
        v = np.asarray(values[f], dtype=np.float64)
        if np.any(~np.isfinite(v)) or np.any(v < 1) or np.any(v != np.floor(v)):
            raise ValueError(f"efficiency {f} must be an integer >= 1, got {values[f]!r}")
    for f in FRACTIONS:
        v = np.asarray(values[f], dtype=np.float64)
        if np.any(~np.isfinite(v)) or np.any(v <= 0) or np.any(v > 1):
            raise ValueError(f"efficiency {f} must be a fraction in (0, 1], got {values[f]!r}")
    for f in SECONDS:
        v = np.asarray(values[f], dtype=np.float64)
        if np.any(~np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"efficiency {f} must be a finite time >= 0 s, got {values[f]!r}")
    for f in RATES:
        v = np.asarray(values[f], dtype=np.float64)
        if np.any(~np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"efficiency {f} must be a finite bandwidth >= 0 GB/s, "
                             f"got {values[f]!r}")
    for f in SHARES:
        v = np.asarray(values[f], dtype=np.float64)
        if np.any(~np.isfinite(v)) or np.any(v < 0) or np.any(v > 1):
            raise ValueError(f"efficiency {f} must be a share in [0, 1], got {values[f]!r}")
