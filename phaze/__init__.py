"""phaze: joint accelerator-architecture and device-placement search for LLM training.

The flow, each step a module that only looks backwards:
``models`` → ``graph`` → ``cost`` (per ``arch``) → ``schedule`` → ``placement`` → ``search``.
Units are SI throughout: seconds, bytes, bytes/s (decimal GB/s where a name says ``gb_per_s``).
"""
from importlib import import_module

__version__ = "0.1.0"

_SUBMODULES = ("models", "graph", "arch", "cost", "schedule", "placement", "search", "cli")

__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name):
    # Submodules load on first use so that `import phaze` stays cheap (no numba/highspy import).
    if name in _SUBMODULES:
        return import_module(f"phaze.{name}")
    raise AttributeError(f"module 'phaze' has no attribute {name!r}")
