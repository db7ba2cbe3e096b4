"""A verify that means it: faults injected on real containers (a PATH shim for
`lxc-cgroup` or `lxc-start` that drops or undoes one action), each of which must
end in exit 4 with the config byte-identical to before, the journal naming the
failed check, and the container running as before.

- a live change that does not take: `lxc-cgroup devices.deny` does nothing, so the
  stale rule stays in the running BPF program (LXF121 after the change);
- a restart that leaves the old program: `lxc-start` starts the container, then
  denies the device again (the probe still gets EPERM, and LXF121);
- the verify is derived from the codes' records, whatever the severity: LXF121 is a
  warning in a scan and still fails a verify.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from . import harness
from .cli import TUN_MOUNT, codes, diagnose, lxcfix


def shim(tmp_path: Path, name: str, body: str) -> str:
    """A directory with one executable `name` in it, to go first on PATH."""
    d = tmp_path / f"shim-{name}"
    d.mkdir()
    p = d / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(d)


def journal(env) -> list[dict]:
    path = Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def stale_uvm(tmp_path, env, container_factory):
    """A container whose config pins a stale major for a driverless nvidia-uvm node: the node is
    major M now (the /proc/devices the test gives lxcfix), the config allows S, which no driver holds."""
    node, major = harness.driverless_uvm(str(tmp_path))[:2]
    env["LXCFIX_PROC_DEVICES"] = str(tmp_path / "proc-devices")
    used = harness.char_majors_in_use() | {major}
    stale = next(m for m in range(major - 1, 383, -1) if m not in used)
    c = container_factory([f"lxc.cgroup2.devices.allow = c {stale}:* rwm",
                           f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"])
    return c, major, stale


def test_a_live_change_that_does_not_take_is_rolled_back(container_factory, env, tmp_path):
    """The issue's case: `c S:* rwm` pinned, the major is M; the live deny of the stale rule
    silently does nothing. Before: "applied (verified)", exit 0, and LXF121 right after."""
    c, major, stale = stale_uvm(tmp_path, env, container_factory)
    assert "LXF101" in codes(diagnose(env, c.name))
    pid = c.init_pid()
    before = Path(c.config_path).read_bytes()
    env["PATH"] = shim(tmp_path, "lxc-cgroup", 'case "$*" in *devices.deny*) exit 0 ;; esac\n'
                       'exec /usr/bin/lxc-cgroup "$@"\n') + ":" + env["PATH"]

    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live", "--style", "numeric")

    assert r.returncode == 4, r.stdout + r.stderr
    assert "verified" not in r.stdout.replace("not verified", "")
    assert "LXF121" in r.stdout + r.stderr  # the check that failed is named
    assert Path(c.config_path).read_bytes() == before
    assert c.running() and c.init_pid() == pid
    events = journal(env)
    assert [e["event"] for e in events][-2:] == ["failed", "rolled-back"]
    failed = next(e for e in events if e["event"] == "failed")
    assert "LXF121" in json.dumps(failed)


def test_a_restart_that_leaves_the_old_program_is_rolled_back(container_factory, tun, env, tmp_path):
    """lxc-start starts the new config, then something puts the old device program back:
    the probe still gets EPERM inside, so the verify fails, the old config comes back and
    the container runs (restarted on it)."""
    c = container_factory([TUN_MOUNT])
    before = Path(c.config_path).read_bytes()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    env["PATH"] = shim(tmp_path, "lxc-start",
                       '/usr/bin/lxc-start "$@" || exit $?\n'
                       'name=; while [ $# -gt 0 ]; do [ "$1" = -n ] && name=$2; shift; done\n'
                       'sleep 0.3; /usr/bin/lxc-cgroup -n "$name" devices.deny "c 10:200 rwm" >/dev/null 2>&1\n'
                       'exit 0\n') + ":" + env["PATH"]

    r = lxcfix(env, "apply", "--ct", c.name, "--yes")

    assert r.returncode == 4, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before
    assert c.running()
    failed = next(e for e in journal(env) if e["event"] == "failed")
    assert "LXF200" in json.dumps(failed) or "LXF121" in json.dumps(failed)
    assert [e["event"] for e in journal(env)][-1] == "rolled-back"


def test_the_same_change_without_a_fault_is_verified(container_factory, env, tmp_path):
    """The control: the stale major fixed live with the real lxc-cgroup verifies (exit 0) and
    leaves nothing for a diagnose to find (no LXF121: the running program equals the config)."""
    c, major, stale = stale_uvm(tmp_path, env, container_factory)
    pid = c.init_pid()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.init_pid() == pid
    assert f"c {major}:* rwm" in Path(c.config_path).read_text()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"
    # What is left is the numeric style's own warnings (it pins the major, LXF103; the mount lacks
    # `optional`, LXF111): nothing a verified change must leave gone.
    assert codes(diagnose(env, c.name)) == ["LXF103", "LXF111"]
