"""Rules that do nothing, on real LXC (5.0.2 here; 6.0.4 measured identical): the line
lxcfix calls inert really changes nothing the kernel enforces, and its fix really does
what the line meant. The BPF device program is asserted attached wherever the answer
depends on it, so a rule LXC ignored can never pass.

1. `allow c 10:* rwm` + `deny c 10:200 rwm`: /dev/net/tun really opens (LXF140); the
   fix lxcfix gives (narrow the allow rule) makes it EPERM.
2. A deny equal to the allow line really denies: no finding.
3. A path-form rule whose path is missing at start: the container starts, LXC logs
   "Failed to parse device rule", the device is denied (EPERM) (LXF145).
4. `deny = a` as the container's last device line: no program at all, every device opens
   (LXF146).
"""

from __future__ import annotations

import json
import os

import pytest

from lxcfix import ctconfig, repair

from . import harness
from .cli import TUN_MOUNT, lxcfix

pytestmark = pytest.mark.real


def findings(env, name) -> list[dict]:
    r = lxcfix(env, "diagnose", "--ct", name, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return json.loads(r.stdout)["containers"][0]["findings"]


def config_line(c, text: str) -> int:
    """1-based line of `text` in the container's config."""
    return c.config_text().splitlines().index(text) + 1


def test_inert_deny_leaves_the_device_open_and_the_fix_denies_it(container_factory, tun, env, monkeypatch):
    deny = "lxc.cgroup2.devices.deny = c 10:200 rwm"
    c = container_factory(["lxc.cgroup2.devices.allow = c 10:* rwm", deny, TUN_MOUNT])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "ok"  # the deny line does nothing
    got = [f for f in findings(env, c.name) if f["code"] == "LXF140"]
    assert [f["line"] for f in got] == [config_line(c, deny)]
    assert "c 10:200 stays allowed by c 10:* rwm" in got[0]["message"]

    # the fix as lxcfix computes it, applied to the real config, then a restart
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _, ct = repair.one(repair.open_target(None), c.name)
    (f,) = [f for f in ct.findings if f.code == "LXF140"]
    with open(c.config_path, "wb") as fh:
        fh.write(ctconfig.apply_edits(ct.context.config, f.fix.edits).raw)
    c.restart()
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    assert not [f for f in findings(env, c.name) if f["code"].startswith("LXF14")]


def test_a_deny_equal_to_the_allow_line_really_denies(container_factory, tun, env):
    c = container_factory(["lxc.cgroup2.devices.allow = c 10:200 rwm", "lxc.cgroup2.devices.deny = c 10:200 rwm",
                           TUN_MOUNT])
    assert c.bpf_attached() and harness.open_errno(c, "/dev/net/tun") == "EPERM"
    assert not [f for f in findings(env, c.name) if f["code"].startswith("LXF14")]


def test_missing_path_form_rule_starts_the_container_with_the_device_denied(container_factory, tun, env):
    missing = f"/dev/net/lxf-{harness.RUN_ID}-missing"
    assert not os.path.exists(missing)
    rule = f"lxc.cgroup2.devices.allow = {missing} rwm"
    c = container_factory([rule, TUN_MOUNT])
    assert c.running() and c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    with open(c.log_path, errors="replace") as fh:
        assert "Failed to parse device rule" in fh.read()
    got = [f for f in findings(env, c.name) if f["code"] == "LXF145"]
    assert [f["line"] for f in got] == [config_line(c, rule)]
    assert f"{missing} does not exist on this host" in got[0]["message"]


def test_deny_a_as_the_last_device_line_attaches_no_program_so_every_device_opens(container_factory, tun, env):
    c = container_factory(["lxc.cgroup2.devices.deny = a", TUN_MOUNT])
    assert c.running() and not c.bpf_attached()  # an empty list at start: no device program at all
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    (f,) = [f for f in findings(env, c.name) if f["code"] == "LXF146"]
    assert "every device is allowed inside" in f["message"]
