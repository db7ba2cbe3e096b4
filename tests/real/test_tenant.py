"""A container's root is a tenant, not the admin (issue 30), on real containers.

A read-only share remounted read-write (item 1): a host directory bind-mounted `ro` holds the
node a device mount passes in. In a privileged container `ro` protects nothing: its root has
CAP_SYS_ADMIN over its mounts, `mount -o remount,rw,bind` undoes it, and the tenant replaces
the node with a symlink to /dev/kmsg, which LXC follows at the next start (the path rule too).
Measured here, an unprivileged container's root does the same: LXC makes the bind inside the
container's own user namespace, so the kernel does not lock it read-only (no MNT_LOCK_READONLY).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from . import harness
from .cli import lxcfix


def findings(env, ct) -> dict:
    r = lxcfix(env, "diagnose", "--ct", ct, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (c,) = json.loads(r.stdout)["containers"]
    return {f["code"]: f for f in c["findings"]}


def all_of(env, ct, code) -> list[dict]:
    r = lxcfix(env, "diagnose", "--ct", ct, "--json")
    (c,) = json.loads(r.stdout)["containers"]
    return [f for f in c["findings"] if f["code"] == code]


REMOUNT = ["mount", "-o", "remount,rw,bind", "/srv/share"]
SWAP = ["sh", "-c", "rm -f /srv/share/nvidia-uvm && ln -s /dev/kmsg /srv/share/nvidia-uvm"]


def test_a_read_only_share_of_a_privileged_container_is_the_tenants(container_factory, uvm, env):
    """Before: no LXF160 for the `ro` share, and `apply --style path` wrote
    `lxc.cgroup2.devices.allow = <share>/nvidia-uvm rwm`; the tenant remounted the share
    read-write, made the node a link to /dev/kmsg, and after a restart /dev/nvidia-uvm inside
    was c 1:11, open. Now: LXF160 (the evidence says the remount), nothing planned in any style."""
    node, major = uvm
    share = os.path.dirname(node)
    lines = [f"lxc.mount.entry = {share} srv/share none bind,ro,create=dir 0 0",
             f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0"]
    c = container_factory(lines)
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"
    assert not c.attach(["touch", "/srv/share/x"]).ok  # read-only as mounted

    found = findings(env, c.name)
    assert "LXF160" in found and found["LXF160"]["device"] == node, sorted(found)
    assert "LXF100" not in found
    ev = "\n".join(found["LXF160"]["evidence"])
    assert f"{share}: written by the container" in ev and "remount,rw,bind" in ev, ev
    before = Path(c.config_path).read_bytes()
    for style in ("auto", "path", "numeric"):
        r = lxcfix(env, "plan", "--ct", c.name, "--style", style)
        assert r.returncode == 0 and r.stdout == "", (style, r.stdout)
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--style", "path")
    assert r.returncode == 0 and "nothing to change" in r.stdout, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before

    # What the plan used to write, written by hand: the attack is real, and still reported
    c.stop()
    c.write_config([*lines, f"lxc.cgroup2.devices.allow = {node} rwm"])
    c.start()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"  # allowed: through to the absent driver
    assert [f["device"] for f in all_of(env, c.name, "LXF160")] == [node, node]  # the mount, the path rule
    r = c.attach(REMOUNT)
    assert r.ok, r.stderr  # the privileged tenant undoes `ro`
    r = c.attach(SWAP)
    assert r.ok, r.stderr
    assert os.path.islink(node) and os.readlink(node) == "/dev/kmsg"  # on the host
    c.restart()
    assert c.bpf_attached()
    seen = harness.probe_node(c, "/dev/nvidia-uvm", "r")
    assert (seen.major, seen.minor, seen.open) == (1, 11, "ok")  # the host's kernel log, open inside
    ev = "\n".join(e for f in all_of(env, c.name, "LXF160") for e in f["evidence"])
    assert "is not a device node now (a symlink or a file: not followed)" in ev, ev


@pytest.fixture
def world_dir():
    """A directory the container's mapped root can traverse (pytest's tmp_path is 0700 root)."""
    d = tempfile.mkdtemp(prefix="lxf-tenant-", dir="/tmp")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d)


def test_a_read_only_share_of_an_unprivileged_container_is_the_tenants_too(world_dir, env):
    """Measured here (LXC 5.0.2): the same remount succeeds in an unprivileged container, because
    LXC makes the bind inside the container's own user namespace and nothing locks it read-only.
    With a share the container's root owns, the tenant swaps the node for a link to /dev/kmsg and
    the path rule resolves to c 1:11 at the next start. lxcfix reports LXF160, saying so, and
    plans nothing."""
    major = harness.free_char_major(511)
    proc = world_dir / "proc-devices"
    proc.write_text(f"Character devices:\n  1 mem\n 10 misc\n{major} nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    env["LXCFIX_PROC_DEVICES"] = str(proc)
    share = world_dir / "share"
    share.mkdir()
    os.chown(share, harness.MAPPED_ROOT, harness.MAPPED_ROOT)  # the container's root owns its share
    node = harness.mknod(str(share / "nvidia-uvm"), major, 0)
    lines = [f"lxc.mount.entry = {share} srv/share none bind,ro,create=dir 0 0",
             f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0"]
    c = harness.make_unprivileged_container(lines)
    try:
        assert harness.host_uid(c) == harness.MAPPED_ROOT  # really unprivileged
        assert c.bpf_attached()
        assert not c.attach(["touch", "/srv/share/x"]).ok  # read-only as mounted

        found = findings(env, c.name)
        assert "LXF160" in found and found["LXF160"]["device"] == node, sorted(found)
        ev = "\n".join(found["LXF160"]["evidence"])
        assert "remount,rw,bind" in ev and "own user namespace" in ev, ev
        before = Path(c.config_path).read_bytes()
        for style in ("auto", "path", "numeric"):
            r = lxcfix(env, "plan", "--ct", c.name, "--style", style)
            assert r.returncode == 0 and r.stdout == "", (style, r.stdout)
        assert Path(c.config_path).read_bytes() == before

        c.stop()
        c.write_config([*harness.IDMAP_LINES, *lines, f"lxc.cgroup2.devices.allow = {node} rwm"])
        c.start()
        r = c.attach(REMOUNT)
        assert r.ok, (r.rc, r.stderr)  # not locked: the unprivileged tenant undoes `ro` too
        r = c.attach(SWAP)
        assert r.ok, r.stderr
        assert os.path.islink(node) and os.readlink(node) == "/dev/kmsg"
        c.restart()
        seen = harness.probe_node(c, "/dev/nvidia-uvm", "r")
        assert (seen.major, seen.minor) == (1, 11), seen  # the host's kernel log's node, inside
    finally:
        c.destroy()


# ---------------------------------------------------------------- a tenant's runtime lists 256 (item 3)

RUNC = os.path.realpath(shutil.which("runc") or "/usr/sbin/runc").lstrip("/")
LIST_256 = 'i=0; while [ $i -lt 256 ]; do echo "c$i"; i=$((i+1)); done'
EXECS = {
    "sleeps": "exec sleep 600",
    "prints 1 MiB": "head -c 1048576 /dev/zero | tr '\\0' x; echo",
}


@pytest.mark.skipif(not os.path.exists("/" + RUNC), reason="runc not installed on the host's /usr")
@pytest.mark.parametrize("exec_does", sorted(EXECS))
def test_a_tenants_runtime_listing_256_inner_containers_is_bounded(exec_does, container_factory, tun, env, tmp_path):
    """Before: `scan --inner all` probed all 256 one after another, 30 s each when the exec sleeps
    (2 h 11 min), and kept each raw output (1 GiB when each prints 1 MiB). Now: one budget per LXC
    container (16 probed, LXCFIX_INNER_DEADLINE, 4 MiB), the rest one LXF223, the neighbour reported."""
    from .cli import TUN_MOUNT
    from .hostile import hostile_script, lxcfix_limited, over

    script = hostile_script(tmp_path, "runc", f'case "$3" in\nlist) {LIST_256} ;;\nexec) {EXECS[exec_does]} ;;\nesac')
    name = harness.new_name()
    bad = container_factory([TUN_MOUNT, *over(script, RUNC)], name=name, start=False)
    os.makedirs(os.path.join(bad.rootfs, "run/runc"), exist_ok=True)  # where the probe asks runc
    bad.start()
    good = container_factory([TUN_MOUNT])
    deadline = 8
    started = time.monotonic()
    r = lxcfix_limited({**env, "LXCFIX_INNER_DEADLINE": str(deadline)}, "scan", "--inner", "all",
                       "--ct", bad.name, "--ct", good.name, "--json", timeout=300)
    took = time.monotonic() - started
    assert r.returncode in (0, 1), r.stderr.decode(errors="replace")[-2000:]
    doc = json.loads(r.stdout)
    by_ct = {c["ct"]: c for c in doc["containers"]}
    assert {"LXF100", "LXF200"} <= {f["code"] for f in by_ct[good.name]["findings"]}  # the neighbour
    mine = by_ct[bad.name]["findings"]
    listed = [f for f in mine if f["code"] == "LXF224"]
    assert listed and listed[0]["message"].startswith(f"CT {bad.name} runs 256 inner container(s)")
    cut = [f for f in mine if f["code"] == "LXF223" and "not checked: budget" in f["message"]]
    assert len(cut) == 1, [f["message"] for f in mine if f["code"] == "LXF223"]
    probed = [f for f in mine if f["code"] == "LXF223" and "not checked: budget" not in f["message"]]
    assert len(probed) <= 16
    # the bad container's inner probes end within their deadline (one probe may overrun it by
    # the kill's own time); the rest is the outer probes and lxcfix's own start
    assert took < deadline + 25, took
    print(f"\n{exec_does}: scan --inner all took {took:.1f}s; {len(probed)} probed, then: {cut[0]['message'][:120]}")
