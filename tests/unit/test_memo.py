"""memo.once: lru_cache whose misses are computed once while many threads ask at once (a fleet's
hosts reach the analysis together; each compiled the same jinja2 template for itself)."""

from __future__ import annotations

import threading
import time

import pytest

from lxcfix import memo, render


def test_threads_that_miss_together_compute_once_and_share_the_value():
    calls = []

    @memo.once()
    def slow(x):
        calls.append(x)
        time.sleep(0.05)
        return object()

    start = threading.Barrier(16)
    got = []

    def ask():
        start.wait()
        got.append(slow(1))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == [1] and len(got) == 16 and len({id(v) for v in got}) == 1
    assert slow(2) is not got[0] and calls == [1, 2]


def test_an_exception_is_not_cached_and_maxsize_bounds_the_cache():
    tries = []

    @memo.once(maxsize=2)
    def f(x):
        tries.append(x)
        if len(tries) == 1:
            raise ValueError("first try")
        return x * 10

    with pytest.raises(ValueError):
        f(1)
    assert f(1) == 10 and f(1) == 10 and tries == [1, 1]
    f(2), f(3)  # the third value starts the cache again
    f(1)
    assert tries == [1, 1, 2, 3, 1]
    f.cache_clear()
    f(2)
    assert tries[-1] == 2


def test_a_memoized_function_may_call_another():
    @memo.once()
    def inner(x):
        return x + 1

    @memo.once()
    def outer(x):
        return inner(x) * 2

    assert outer(1) == 4 and outer(1) == 4


def test_hosts_rendering_at_once_compile_the_template_once(monkeypatch):
    """What every host of a fleet renders (the fix lines of its plan): one compile per process."""
    import jinja2

    render._render.cache_clear()
    render.environment.cache_clear()
    compiles = []
    real = jinja2.Environment.compile

    def counted(self, *a, **kw):
        compiles.append(a[1] if len(a) > 1 else kw.get("name"))
        return real(self, *a, **kw)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    group = render.RuleGroup("c", 10, 200, False, ("/dev/net/tun",))
    start = threading.Barrier(8)
    got = []

    def plan():
        start.wait()
        got.append(render.render("numeric", None, [group]))

    threads = [threading.Thread(target=plan) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8 and all(g == got[0] for g in got) and got[0]
    assert len(compiles) == 1, compiles
