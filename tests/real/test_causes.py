"""One problem per cause, on a real container: several denied nodes of one driver fold into
one cause, its proof from inside, and one command (issue 16).

The "driver" is a driverless dynamic major M named nvidia-uvm in a /proc/devices text
(harness.driverless_uvm): /dev/nvidia-uvm (M:0) and /dev/nvidia-uvm-tools (M:1) are
mknod'ed on the host and bind-mounted in, and the container's cgroup denies M. That gives
LXF100 and LXF200 for each node: four findings, one cause. A BPF device program is
asserted attached, so a silently ignored rule can never pass.
"""

from __future__ import annotations

import json
import os
import re

from . import harness
from .cli import lxcfix


def uvm_pair(container_factory, uvm):
    node, major = uvm
    tools = harness.mknod(os.path.join(os.path.dirname(node), "nvidia-uvm-tools"), major, 1)
    c = container_factory([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0",
                           f"lxc.mount.entry = {tools} dev/nvidia-uvm-tools none bind,optional,create=file 0 0"])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == harness.open_errno(c, "/dev/nvidia-uvm-tools") == "EPERM"
    return c, major


def test_several_denied_nodes_of_one_driver_are_one_cause(container_factory, uvm, env):
    c, major = uvm_pair(container_factory, uvm)

    r = lxcfix(env, "diagnose", "--ct", c.name)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    # one cause, named once, with the probe's proof and the one command
    causes = [line for line in out.splitlines() if re.match(r"^(error|warning|info) ", line)]
    assert causes == [f"error    CT {c.name} cannot use the GPU: the cgroup denies nvidia-uvm (c {major}:*) [LXF100]"]
    assert "proof: open() inside gives EPERM: /dev/nvidia-uvm, /dev/nvidia-uvm-tools" in out
    assert f"fix:   lxcfix apply --ct {c.name}\n" in out
    assert f"lxcfix apply --ct {c.name} --live    # without a restart" in out
    # the four findings folded under it, each ending with its code
    assert "4 findings:" in out
    symptoms = [line.strip() for line in out.splitlines() if re.match(r"^ {11}\S", line)]
    assert sorted(s.rsplit(" ", 1)[-1] for s in symptoms) == ["[LXF100]", "[LXF100]", "[LXF200]", "[LXF200]"]
    assert "evidence:" not in out

    # -v: every finding as before, with its evidence
    v = lxcfix(env, "diagnose", "--ct", c.name, "-v")
    assert v.returncode == 1
    assert len(re.findall(r"^LXF(100|200) error ", v.stdout, flags=re.M)) == 4
    assert "evidence:" in v.stdout

    # JSON: every finding kept, all with the same stable cause id, and the cause itself
    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
    (ct,) = doc["containers"]
    assert doc["schema"] == 1
    assert sorted(f["code"] for f in ct["findings"]) == ["LXF100", "LXF100", "LXF200", "LXF200"]
    assert {f["cause"] for f in ct["findings"]} == {"cgroup-denies:nvidia"}
    (cause,) = ct["causes"]
    assert cause["id"] == "cgroup-denies:nvidia" and cause["symptoms"] == 4 and cause["applies"] is True
    again = json.loads(lxcfix(env, "scan", "--ct", c.name, "--json").stdout)
    assert [f["cause"] for f in again["containers"][0]["findings"]] == [f["cause"] for f in ct["findings"]]

    # scan folds the symptoms into one line under the cause
    s = lxcfix(env, "scan", "--ct", c.name)
    assert s.returncode == 1, s.stdout + s.stderr
    assert f"cannot use the GPU: the cgroup denies nvidia-uvm (c {major}:*) [LXF100]" in s.stdout
    assert "4 findings: LXF100 (2), LXF200 (2)" in s.stdout

    # the one command repairs the whole cause: both nodes pass the cgroup (ENXIO: no driver)
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == harness.open_errno(c, "/dev/nvidia-uvm-tools") == "ENXIO"
    left = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)["containers"][0]["causes"]
    assert [x["code"] for x in left] == ["LXF103"]  # the numeric rule pins the dynamic major: a warning
