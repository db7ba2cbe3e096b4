"""How many SSH connections each Ssh made, by its name: the witness for "one connection per host".

    with counting() as counts:                # ssh.Ssh._connect_once wrapped for the block
        fleet.scan_fleet(hosts, connect=...)
    counts == {"pve1": 1, "pve2": 1}          # a Counter

    def test_x(connections):                  # the same as a fixture (tests/real/test_fleet.py)
        ...
        assert connections == {"hv": 1}

Only connections that were made count (authenticated, and the host key accepted): a failed
try does not, a retry that succeeds does once. Jump hosts count under their own names.
Production code keeps no such global count; this is for tests and benchmarks only.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

from lxcfix import ssh


def _counted(original, counts: Counter, lock: threading.Lock):
    def connect_once(self):
        client = original(self)
        with lock:
            counts[self.name] += 1
        return client

    return connect_once


@contextlib.contextmanager
def counting():
    counts: Counter = Counter()
    original = ssh.Ssh._connect_once
    ssh.Ssh._connect_once = _counted(original, counts, threading.Lock())
    try:
        yield counts
    finally:
        ssh.Ssh._connect_once = original


def patch(monkeypatch) -> Counter:
    """For a pytest fixture: the same wrapping, undone by monkeypatch at teardown."""
    counts: Counter = Counter()
    monkeypatch.setattr(ssh.Ssh, "_connect_once", _counted(ssh.Ssh._connect_once, counts, threading.Lock()))
    return counts
