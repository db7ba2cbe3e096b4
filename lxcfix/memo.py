"""functools.lru_cache for what threads all want at the same moment: a miss is computed once.

    @memo.once()
    def environment(): ...          # jinja2's Environment, built by the first caller
    @memo.once(maxsize=1024)
    def _render(style, profile, rules, mounts, devs): ...

lru_cache does not hold a lock while it computes, so every thread that misses computes the value
for itself. A fleet's hosts reach the analysis together (a worker process's 32 hosts, in step
through the same round trips), and each one read every template file, built jinja2's
Environment and compiled the same template: over 50 of 64 hosts did, every scan. Here the first
caller of a key computes it under the function's lock; the others wait for it and take its
value. An exception is not cached (the next caller tries again). The cached functions must not
call themselves; one memoized function may call another.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def once(maxsize: int | None = None) -> Callable[[F], F]:
    """A decorator: fn(*args) (positional, hashable) computed once per args per process;
    maxsize: past that many values the cache starts again (None: no bound)."""

    def decorate(fn: F) -> F:
        cache: dict = {}
        lock = threading.Lock()

        @functools.wraps(fn)
        def cached(*args):
            try:
                return cache[args]
            except KeyError:
                pass
            with lock:
                try:
                    return cache[args]  # computed while this caller waited
                except KeyError:
                    pass
                value = fn(*args)
                if maxsize is not None and len(cache) >= maxsize:
                    cache.clear()
                cache[args] = value
                return value

        cached.cache_clear = cache.clear
        return cached

    return decorate


__all__ = ["once"]
