"""This machine's own cgroup layout is hybrid (TESTING.md): outside tests/run's private
namespace (pure cgroup2), LXC ignores every lxc.cgroup2 device rule. lxcfix run in that layout
(a private mount namespace with the machine's v1 devices hierarchy: HYBRID), on a real LXC container given /dev/net/tun
without a rule, must say so (LXF300), plan nothing, say why, and print no "run:" or plan hint
that leads to a plan that does nothing (issue 29: scan said "fix: allow c 10:200 rwm (run:
lxcfix plan)", plan printed nothing and apply --dry-run said "nothing to change"). The same
container seen from the pure cgroup2 namespace gets its rule planned."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import harness
from .cli import TUN_MOUNT

REPO = Path(__file__).resolve().parents[2]


# The machine's hybrid layout, made beside ours: a private mount namespace of this one (same root
# and lxcpath, so also inside the Debian 13 tier's pivot_root'd root, where the machine's own
# namespace sees another filesystem) whose /sys/fs/cgroup is what a hybrid host mounts: the v1
# devices hierarchy (this kernel keeps that controller on v1) and cgroup2 at unified.
HYBRID = ("umount -l /sys/fs/cgroup && mount -t tmpfs cgroup /sys/fs/cgroup && "
          "mkdir /sys/fs/cgroup/devices /sys/fs/cgroup/unified && "
          "mount -t cgroup -o devices devices /sys/fs/cgroup/devices && "
          "mount -t cgroup2 none /sys/fs/cgroup/unified && exec \"$@\"")
OUTSIDE = ["unshare", "-m", "--propagation", "private", "sh", "-c", HYBRID, "sh"]
PLAN = re.compile(r"lxcfix plan --ct (\S+?)[)`'\s]|run: ")


def lxcfix(env, *args, outside: bool = False) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "lxcfix", *args]
    return subprocess.run((OUTSIDE if outside else []) + argv, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)


@pytest.fixture
def hybrid():
    r = subprocess.run(OUTSIDE + ["cat", "/proc/self/mountinfo"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot make a hybrid cgroup mount namespace: {r.stderr.strip()}")
    if harness.cgroup_layout(r.stdout) == "v2":
        pytest.skip("this machine's own cgroup layout is pure cgroup v2: nothing hybrid to see")
    assert harness.cgroup_layout() == "v2"  # the test itself runs in tests/run's pure cgroup2 namespace


def test_on_the_machines_hybrid_layout_lxcfix_says_so_and_plans_nothing_with_a_reason(
        hybrid, container_factory, tun, env):
    c = container_factory([TUN_MOUNT], start=False)  # LXC's common.conf: allowlist mode, no tun rule

    # inside the pure cgroup2 namespace: a Proxmox VE 7+ host; the rule is planned
    inside = lxcfix(env, "plan", "--ct", c.name)
    assert inside.returncode == 1 and "+lxc.cgroup2.devices.allow = /dev/net/tun rwm" in inside.stdout, inside.stderr

    facts = json.loads(lxcfix(env, "facts", "--json", outside=True).stdout)
    assert facts["facts"]["cgroup_layout"] == "hybrid", facts["facts"].get("cgroup_layout")

    scan = lxcfix(env, "scan", "--ct", c.name, "--json", outside=True)
    assert scan.returncode == 1, scan.stderr
    found = {f["code"]: f for ct in json.loads(scan.stdout)["containers"] for f in ct["findings"]}
    assert "LXF300" in found and "LXF100" not in found, sorted(found)
    assert "hybrid" in found["LXF300"]["message"] and "plans no device rule" in found["LXF300"]["message"]

    plan = lxcfix(env, "plan", "--ct", c.name, outside=True)
    assert plan.returncode == 0 and plan.stdout == "", plan.stdout
    assert "not planned: host runs a hybrid cgroup layout" in plan.stderr and "[LXF300]" in plan.stderr, plan.stderr
    dry = lxcfix(env, "apply", "--ct", c.name, "--dry-run", outside=True)
    assert "nothing to change" in dry.stdout and "not planned: host runs a hybrid" in dry.stderr, dry.stdout + dry.stderr

    # no hint printed there names a plan (it would plan nothing) or a "run:"
    for args in (("scan", "--ct", c.name), ("scan", "--ct", c.name, "--json"), ("diagnose", "--ct", c.name),
                 ("diagnose", "--ct", c.name, "--json"), ("audit",)):
        r = lxcfix(env, *args, outside=True)
        assert r.returncode in (0, 1), r.stderr
        hints = [m.group(0) for m in PLAN.finditer(r.stdout) if c.name in m.group(0) or "run:" in m.group(0)]
        assert hints == [], (args, hints, r.stdout)


def test_a_real_eperm_probed_on_the_hybrid_layout_names_the_v1_rule_not_a_plan(hybrid, container_factory, tun, env):
    """The issue's case itself: the container runs (started in the pure cgroup2 namespace, its
    BPF program denies tun: EPERM inside), and lxcfix in the machine's own namespace probes it."""
    c = container_factory([TUN_MOUNT])
    assert c.bpf_attached() and harness.open_errno(c, "/dev/net/tun") == "EPERM"
    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json", outside=True).stdout)
    (ct,) = doc["containers"]
    by = {f["code"]: f for f in ct["findings"]}
    assert {"LXF200", "LXF300"} <= set(by), sorted(by)
    assert "lxcfix plan" not in by["LXF200"]["fix"] and "run:" not in by["LXF200"]["fix"]
    assert "lxc.cgroup.devices.allow = c 10:200 rwm" in by["LXF200"]["fix"] and by["LXF200"]["live_fixable"] is False
    assert all(not cause["commands"] for cause in ct["causes"])  # nothing lxcfix would run does anything here
    plan = lxcfix(env, "plan", "--ct", c.name, outside=True)
    assert plan.stdout == "" and "not planned: host runs a hybrid cgroup layout" in plan.stderr, plan.stderr
