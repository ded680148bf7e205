"""Input checks shared by every public entry point.

Each raises ``ValueError`` with one sentence naming the field and what is allowed,
so that bad input never reaches a compiled kernel.
"""
import json
import math
import numbers

import numpy as np

#: Largest integer any input may hold: every count ends up in an int64 array or kernel,
#: where a larger one would wrap around (2**63 - 1 read back as -2**63).
INT64_MAX = 2 ** 63 - 1
#: Largest device count (and parallel width product t·cp·p·d) a search or an evaluation
#: takes: the step model lays Megatron's ranks out one by one (node spans of every
#: pipeline boundary and data-parallel ring), so a count is also a loop length.
MAX_DEVICES = 2 ** 24
#: Largest global batch (samples): the data-parallel degrees of a search are the divisors
#: of B / b, found in O(√B) steps.
MAX_GLOBAL_BATCH = 2 ** 40
#: Largest HBM capacity (GiB): the kernels hold capacities in bytes (GiB · 2**30) as int64.
MAX_HBM_GIB = 2.0 ** 32


class OutputError(OSError):
    """An output file that cannot be written where it was asked for (its folder is
    missing, say): an operating-system error, so ``phaze`` exits 1 as for a full or
    read-only disk, never 2 as for bad input or a missing *input* file. Its one
    argument is the whole sentence (no errno prefix)."""

    def __init__(self, sentence: str, errno: int = None):
        super().__init__(sentence)
        self.errno = errno
        self.strerror = sentence

    def __str__(self) -> str:
        return self.strerror


def output_error(exc: OSError, sentence: str) -> "OutputError":
    """``sentence`` with the OS's reason for ``exc`` appended in brackets."""
    return OutputError(f"{sentence} ({exc.strerror or exc})", exc.errno)


def show(value) -> str:
    """``repr(value)`` for a message, short for huge integers (whose repr Python refuses
    beyond 4,300 digits) and long texts."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and abs(int(value)) > 10 ** 30:
        digits = int(abs(int(value)).bit_length() * 0.30103) + 1
        return f"an integer of about {digits:,} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:77] + "..."


def _int_in_range(name: str, value, low: int, maximum: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer() and low <= value <= maximum:
            return int(value)
        if isinstance(value, float) and value.is_integer() and value > maximum:
            raise ValueError(f"{name} must be an integer from {low} to {maximum:,}, "
                             f"got {show(value)}")
        raise ValueError(f"{name} must be a {what} integer, got {show(value)}")
    if value < low:
        raise ValueError(f"{name} must be a {what} integer (>= {low}), got {show(value)}")
    if value > maximum:
        raise ValueError(f"{name} must be an integer from {low} to {maximum:,}, got {show(value)}")
    return int(value)


def positive_int(name: str, value, maximum: int = INT64_MAX) -> int:
    """``value`` as an int from 1 to ``maximum``, else ValueError naming ``name``."""
    return _int_in_range(name, value, 1, maximum, "positive")


def positive_ints(**values) -> tuple:
    """Each keyword's value as a positive int (:func:`positive_int`, the keyword names the
    field), in the order given: a plan's sizes checked in one call."""
    return tuple(positive_int(name, value) for name, value in values.items())


def nonneg_int(name: str, value, maximum: int = INT64_MAX) -> int:
    """``value`` as an int from 0 to ``maximum``, else ValueError naming ``name``."""
    return _int_in_range(name, value, 0, maximum, "non-negative")


def positive_float(name: str, value) -> float:
    """``value`` as a finite float > 0, else ValueError naming ``name``."""
    try:
        f = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number > 0, got {show(value)}") from None
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {show(value)}") from None
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {show(value)}")
    return f


def hbm_gib(name: str, value) -> float:
    """``value`` as a capacity in GiB, > 0 and at most ``MAX_HBM_GIB``, else ValueError."""
    f = positive_float(name, value)
    if f > MAX_HBM_GIB:
        raise ValueError(f"{name} must be at most {MAX_HBM_GIB:,.0f} GiB (2**32: the "
                         f"capacity in bytes must fit an int64), got {show(value)}")
    return f


def nonneg_float(name: str, value) -> float:
    """``value`` as a finite float ≥ 0, else ValueError naming ``name``."""
    try:
        f = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number >= 0, got {show(value)}") from None
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a non-negative number, got {show(value)}") from None
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {show(value)}")
    return f


def finite_nonneg_array(name: str, values, dtype=np.float64) -> np.ndarray:
    """``values`` as a C-contiguous array of ``dtype`` with every entry finite and ≥ 0."""
    try:
        arr = np.ascontiguousarray(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError, RecursionError):
        raise ValueError(f"{name} must be an array of numbers (each at most {INT64_MAX:,} for "
                         f"integers)") from None
    if arr.size:
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite (no NaN or infinity)")
        if np.any(arr < 0):
            raise ValueError(f"{name} must be >= 0 everywhere, found {arr.min()!r}")
    return arr


def one_of(name: str, value, allowed) -> str:
    """``value`` (case-insensitive string) if in ``allowed``, else ValueError listing them."""
    v = str(value).lower() if isinstance(value, str) else value
    try:
        ok = v in allowed
    except TypeError:  # unhashable, for a set or dict of allowed values
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; "
                         f"got {show(value)}")
    return v


def read_json(path, what: str):
    """The JSON document in the file ``path``; anything that keeps it from being read is a
    ``ValueError`` in one sentence naming the path (``what``, e.g. "a config", says what the
    file should have been). A missing file raises ``FileNotFoundError`` naming it."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text") from None
        except ValueError:  # Python refuses integers of more than 4,300 digits
            raise ValueError(f"{path} holds a number with too many digits") from None
        except RecursionError:
            raise ValueError(f"{path} is nested too deeply to be {what}") from None
