"""One bounded, thread-safe memo for the whole package (least recently used goes first).

Every cache of phaze (prepared operator arrays in ``cost``, layer graphs in ``graph`` and
the search, prepared schedule inputs and schedules in ``schedule``) is a :class:`Memo`:
a key → value map of at most ``maxsize`` entries, safe to share between the threads of a
process (a caller may run phaze on threads: the compiled kernels release the GIL).
Values are kept as given: callers store immutable records or arrays they never write to.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

__all__ = ["Memo"]

_MISSING = object()


class Memo:
    """A bounded least-recently-used map.

    ``maxsize``: the most entries kept (a positive int, or a zero-argument callable read
    at every insertion, so a tunable of ``phaze._config`` changed at run time applies).
    """

    def __init__(self, maxsize: int | Callable[[], int], name: str = "memo"):
        self._maxsize = maxsize
        self.name = name
        self._data: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def maxsize(self) -> int:
        size = self._maxsize() if callable(self._maxsize) else self._maxsize
        return max(int(size), 0)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value stored under ``key`` (marked most recently used), else ``default``."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return default
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: Any) -> Any:
        """Store ``value`` under ``key``, dropping the least recently used beyond the size;
        returns ``value``."""
        limit = self.maxsize
        with self._lock:
            if limit == 0:
                return value
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > limit:
                self._data.popitem(last=False)
        return value

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value under ``key``, computed by ``compute()`` and stored on a miss (outside
        the lock: two threads missing together may both compute; the last one stored wins,
        and both values are equal by construction)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = self.put(key, compute())
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)
