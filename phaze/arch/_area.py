"""Area model of the accelerator template (docs/design.md §2.3), private to ``phaze.arch``.

``area = num_tc·A_tc(tc_width·tc_depth) + num_vc·A_vc(vc_width) + A_buf(buffer_mib)`` in mm².

The grid values are the per-component areas fitted to the area table of the
original study's 29,360 explored configurations (``shared/golden/area_components.json``;
they reproduce its ``phaze_arch_space.csv`` to the CSV's 6-decimal rounding). They
are copied here so that the package does not need the golden data at run time;
``tests/test_arch.py`` checks that the copy equals the JSON.

Off the grid (docs/design.md §2.3):

- ``A_tc`` depends only on the number of processing elements w·d (the JSON's table
  is symmetric in that sense: 16×2, 8×4, 4×8 and 2×16 all have the same area), so it
  is piecewise-linear in w·d between grid products, extrapolated linearly from the
  two outermost points beyond either end;
- ``A_vc`` is piecewise-linear in the lane count, extrapolated the same way;
- ``A_buf`` is piecewise-linear in (log MiB, log mm²), extrapolated from the last
  two points beyond either end (so it tends to 0 for a vanishing buffer).

All grid values increase with their argument, so every segment and both
extrapolations have positive slope: the area is strictly increasing in every knob.
"""
from __future__ import annotations

import numpy as np

# Tensor core (systolic array) area by processing-element count w·d, mm².
_TC_PE = np.array([4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                   8192, 16384, 32768, 65536], dtype=np.float64)
_TC_MM2 = np.array([0.009174146, 0.012214311, 0.018294642, 0.030455304, 0.054776629,
                    0.105533727, 0.207181095, 0.41128109, 0.816865379, 1.619903159,
                    3.228708517, 6.431023034, 12.899083068, 25.802926136, 51.444202273])

# Vector core area by lane count, mm².
_VC_LANES = np.array([2, 4, 8, 16, 32, 64, 128, 256], dtype=np.float64)
_VC_MM2 = np.array([0.007653628, 0.009173275, 0.012212571, 0.018291162, 0.030448343,
                    0.054762707, 0.105505883, 0.207125406])

# Shared on-chip buffer area by capacity in MiB, mm².
_BUF_MIB = np.array([2, 4, 8, 16, 32, 64, 128], dtype=np.float64)
_BUF_MM2 = np.array([3.33822, 6.07864, 11.9524, 23.7452, 46.7509, 88.6057, 175.423])


def _interp_extrap(x, xp, fp):
    """Piecewise-linear interpolation through (xp, fp), linear extrapolation beyond both ends."""
    x = np.asarray(x, dtype=np.float64)
    y = np.interp(x, xp, fp)
    lo = x < xp[0]
    if np.any(lo):
        slope = (fp[1] - fp[0]) / (xp[1] - xp[0])
        y = np.where(lo, fp[0] + slope * (x - xp[0]), y)
    hi = x > xp[-1]
    if np.any(hi):
        slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
        y = np.where(hi, fp[-1] + slope * (x - xp[-1]), y)
    return y


def tensor_core_mm2(tc_width, tc_depth):
    """Area of one tc_width × tc_depth systolic array, mm² (piecewise-linear in w·d)."""
    pe = np.asarray(tc_width, dtype=np.float64) * np.asarray(tc_depth, dtype=np.float64)
    return _interp_extrap(pe, _TC_PE, _TC_MM2)


def vector_core_mm2(vc_width):
    """Area of one vector core with vc_width lanes, mm² (piecewise-linear in lanes)."""
    return _interp_extrap(vc_width, _VC_LANES, _VC_MM2)


def buffer_mm2(buffer_mib):
    """Area of a shared buffer of buffer_mib MiB, mm² (piecewise-linear in log-log)."""
    log_mib = np.log(np.asarray(buffer_mib, dtype=np.float64))
    return np.exp(_interp_extrap(log_mib, np.log(_BUF_MIB), np.log(_BUF_MM2)))


def total_mm2(num_tc, tc_width, tc_depth, num_vc, vc_width, buffer_mib):
    """Chip area, mm²: num_tc·A_tc + num_vc·A_vc + A_buf (inputs already validated)."""
    return (np.asarray(num_tc, dtype=np.float64) * tensor_core_mm2(tc_width, tc_depth)
            + np.asarray(num_vc, dtype=np.float64) * vector_core_mm2(vc_width)
            + buffer_mm2(buffer_mib))
