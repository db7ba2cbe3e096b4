"""Fixtures of the real tier. Every test here is marked `real` (tests/conftest.py)
and skips, with the reason, without root, LXC or a pure cgroup v2 mount
(a failure when CI=true)."""

import os

import pytest

from . import harness


@pytest.fixture(autouse=True)
def _real_tier_available():
    reason = harness.unavailable_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def _shared_cgroups_cleanup():
    yield
    if harness.unavailable_reason() is None:
        harness.cleanup_shared_cgroups()


@pytest.fixture
def container_factory(_real_tier_available):
    """factory(extra_lines=(), init=("sleep", "infinity"), name=None, start=True) -> Container;
    everything it made is destroyed (lxc-stop -k, dir and cgroups removed) at teardown."""
    factory = harness.Factory()
    try:
        yield factory
    finally:
        factory.destroy_all()


@pytest.fixture
def pve(_real_tier_available, tmp_path, monkeypatch):
    """A fake /etc/pve in tmp_path (LXCFIX_PVE_DIR set), the pct shim first on PATH;
    pve.make_ct(lines, ...) -> PveContainer; all destroyed at teardown."""
    p = harness.Pve(str(tmp_path / "pve"))
    monkeypatch.setenv("LXCFIX_PVE_DIR", p.dir)
    monkeypatch.setenv("PATH", harness.SHIM_DIR + ":" + os.environ.get("PATH", ""))
    try:
        yield p
    finally:
        p.destroy_all()


@pytest.fixture
def tun():
    """/dev/net/tun on the host (10:200)."""
    return harness.ensure_tun()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """lxcfix's state and lock dirs in tmp_path; returns the environment for subprocesses."""
    e = dict(os.environ)
    e["LXCFIX_STATE_DIR"] = str(tmp_path / "state")
    e["LXCFIX_LOCK_DIR"] = str(tmp_path / "lock")
    e["NO_COLOR"] = "1"
    for k in ("LXCFIX_STATE_DIR", "LXCFIX_LOCK_DIR"):
        monkeypatch.setenv(k, e[k])
    return e


@pytest.fixture
def uvm(tmp_path, env):
    """A driverless node with a dynamic-range major, and a /proc/devices text naming it nvidia-uvm."""
    node, major, proc = harness.driverless_uvm(str(tmp_path))
    env["LXCFIX_PROC_DEVICES"] = proc
    return node, major
