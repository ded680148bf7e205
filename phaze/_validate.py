"""Input checks shared by every public entry point.

Each raises ``ValueError`` with one sentence naming the field and what is allowed,
so that bad input never reaches a compiled kernel.
"""
import math
import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    """``value`` as an int ≥ 1, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer() and value >= 1:
            return int(value)
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {value!r}")
    return int(value)


def nonneg_int(name: str, value) -> int:
    """``value`` as an int ≥ 0, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer (>= 0), got {value!r}")
    return int(value)


def positive_float(name: str, value) -> float:
    """``value`` as a finite float > 0, else ValueError naming ``name``."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return f


def nonneg_float(name: str, value) -> float:
    """``value`` as a finite float ≥ 0, else ValueError naming ``name``."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a non-negative number, got {value!r}") from None
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return f


def finite_nonneg_array(name: str, values, dtype=np.float64) -> np.ndarray:
    """``values`` as a C-contiguous array of ``dtype`` with every entry finite and ≥ 0."""
    try:
        arr = np.ascontiguousarray(values, dtype=dtype)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of numbers") from None
    if arr.size:
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite (no NaN or infinity)")
        if np.any(arr < 0):
            raise ValueError(f"{name} must be >= 0 everywhere, found {arr.min()!r}")
    return arr


def one_of(name: str, value, allowed) -> str:
    """``value`` (case-insensitive string) if in ``allowed``, else ValueError listing them."""
    v = str(value).lower() if isinstance(value, str) else value
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return v
