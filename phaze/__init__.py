"""phaze: joint accelerator-architecture and device-placement search for LLM training.

The flow, each step a module or package that only looks backwards:
``models`` → ``graph`` → ``arch`` → ``collectives`` → ``cost`` → ``schedule`` → ``placement``
→ ``step`` → ``search``, with ``plan`` (the one declaration of a training plan's knobs) read
beside them and ``cli`` on top (docs/design.md §1, §2.11).
Units are SI throughout: seconds, bytes, bytes/s (decimal GB/s where a name says ``gb_per_s``).
"""
from importlib import import_module

__version__ = "0.1.0"

_SUBMODULES = ("models", "graph", "arch", "cost", "schedule", "placement", "step", "search",
               "validate", "trace", "launch", "precision", "plan", "collectives", "cli")

__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name):
    # Submodules load on first use so that `import phaze` stays cheap (no numpy/highspy import).
    if name in _SUBMODULES:
        return import_module(f"phaze.{name}")
    raise AttributeError(f"module 'phaze' has no attribute {name!r}")
