"""Unprivileged (idmapped) containers and the users inside them, on real containers.

A service user in the container's `render` group opens a passed-in node. The node is
driverless (a free major): the permission check comes before the driver, so EACCES
says the mode/owner/idmap refused, ENXIO that the open got through to the (absent)
driver. Both ways a node gets in:
- plain LXC, bind mount: the host node is root:<host gid> 0660, outside the idmap, so
  inside it is nobody:nogroup (root refused too); lxcfix's fix passes the host group
  through onto the container's render gid with lxc.idmap, and writes root's
  /etc/subgid line when asked (--write-subgid; here a file of the test's own);
- Proxmox devN through the pct shim, which makes the node as Proxmox does (tmpfs under
  /var/lib/lxc/<vmid>/passthrough, root:root 0660 mapped through the idmap): lxcfix's fix
  is devN gid=<the container's render gid>, read inside by the probe.
Each container is asserted to be really unprivileged: its init runs as the mapped root.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from . import harness
from .cli import lxcfix

# tests/run says so when uidmap is installed but /etc/subuid or /etc/subgid is missing: with
# no file to bind a copy over, lxc-start cannot map root's range through newuidmap.
pytestmark = pytest.mark.skipif(bool(os.environ.get("LXCFIX_TESTS_NO_SUBID")),
                                reason=os.environ.get("LXCFIX_TESTS_NO_SUBID", ""))

RENDER = 104  # the container's render gid (Debian's)
SVC = 1000  # the service user, a member of render
HOST_GID = 4242  # the host group of the bind-mounted node: not in the container's idmap (100000+)
USERS = [("svc", SVC, ["render"])]
GROUPS = {"render": RENDER}


@pytest.fixture
def made():
    """Containers this test makes; destroyed at teardown."""
    cts: list = []
    yield cts
    errors = []
    for c in reversed(cts):
        try:
            c.destroy()
        except Exception as e:
            errors.append(f"{c.name}: {e}")
    assert not errors, errors


@pytest.fixture
def world_dir():
    """A directory the container's mapped root can traverse (pytest's tmp_path is 0700 root)."""
    d = tempfile.mkdtemp(prefix="lxf-unpriv-", dir="/tmp")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d)


def lxc_maps_ids_itself(env: dict, scratch: Path) -> None:
    """Where uidmap is installed, lxc-start maps ids through its setuid newuidmap and
    newgidmap, which read the host's /etc/subuid and /etc/subgid. A test that keeps root's
    subordinate ids in a file of its own (LXCFIX_SUBGID) puts non-setuid stand-ins first on
    the PATH of the lxcfix it runs: LXC, as root, then writes the maps itself (as on a host
    without uidmap), and the test's file is the only one that decides."""
    tools = [shutil.which(t) for t in ("newuidmap", "newgidmap")]
    if not any(t and os.stat(t).st_mode & stat.S_ISUID for t in tools):
        return
    stand_ins = scratch / "no-uidmap"
    stand_ins.mkdir()
    for t in ("newuidmap", "newgidmap"):
        (stand_ins / t).write_text("#!/bin/sh\necho \"$0: a test's stand-in, not setuid\" >&2\nexit 1\n")
        (stand_ins / t).chmod(0o755)
    env["PATH"] = f"{stand_ins}:{env.get('PATH', os.defpath)}"


def diagnose(env, ct) -> dict:
    r = lxcfix(env, "diagnose", "--ct", ct, "--json")
    assert r.returncode in (0, 1), r.stderr
    (c,) = json.loads(r.stdout)["containers"]
    return {f["code"]: f for f in c["findings"]}


def inside_owner(c, path) -> str:
    r = c.attach(["/usr/bin/stat", "-c", "%u:%g %a", path])
    assert r.ok, r
    return r.stdout.strip()


def test_bind_mounted_node_idmap_pass_through_on_plain_lxc(made, world_dir, env):
    major = harness.free_char_major(509)
    node = harness.mknod(str(world_dir / "renderD128"), major, 128, mode=0o660)
    os.chown(node, 0, HOST_GID)
    subgid = world_dir / "subgid"
    subgid.write_text(f"root:{harness.MAPPED_ROOT}:{harness.MAPPED_COUNT}\n")
    env["LXCFIX_SUBGID"] = str(subgid)
    lxc_maps_ids_itself(env, world_dir)
    c = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {node} dev/dri/renderD128 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:128 rwm"], users=USERS, groups=GROUPS)
    made.append(c)
    assert harness.host_uid(c) == harness.MAPPED_ROOT  # really unprivileged
    assert c.bpf_attached()  # plain LXC: allowlist mode, the node allowed: the cgroup is not the story

    path = "/dev/dri/renderD128"
    assert inside_owner(c, path) == "65534:65534 660"  # nobody:nogroup
    assert harness.open_errno_as(c, path, SVC, RENDER) == "EACCES"
    assert harness.open_errno(c, path) == "EACCES"  # root inside too

    found = diagnose(env, c.name)
    assert {"LXF204", "LXF201"} <= set(found), found
    member = found["LXF204"]
    assert member["severity"] == "error" and member["device"] == path
    assert member["message"].startswith(f"as svc (uid {SVC}) in group render (gid {RENDER}), open {path} "
                                        "gives EACCES")
    assert f"gid {HOST_GID} is not mapped into CT {c.name}" in member["message"]
    assert "nobody:nogroup" in member["message"]
    assert any("tried for real" in e for e in member["evidence"])
    assert member["applicability"] == "manual"  # root may not map host gid 4242 yet: /etc/subgid says no

    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--write-subgid")
    assert r.returncode == 0, r.stdout + r.stderr
    config = Path(c.config_path).read_text()
    assert f"lxc.idmap = g {RENDER} {HOST_GID} 1" in config and "lxc.idmap = g 0 100000 65536" not in config
    assert subgid.read_text() == f"root:{harness.MAPPED_ROOT}:{harness.MAPPED_COUNT}\nroot:{HOST_GID}:1\n"
    backups = list((Path(env["LXCFIX_STATE_DIR"]) / "host").rglob("*.conf"))
    assert [b.read_text() for b in backups] == [f"root:{harness.MAPPED_ROOT}:{harness.MAPPED_COUNT}\n"]

    assert harness.host_uid(c) == harness.MAPPED_ROOT
    assert inside_owner(c, path) == f"65534:{RENDER} 660"  # nobody:render
    assert harness.open_errno_as(c, path, SVC, RENDER) == "ENXIO"  # through to the (absent) driver
    after = diagnose(env, c.name)
    assert not {"LXF114", "LXF115", "LXF204", "LXF201"} & set(after), after
    assert after["LXF205"]["severity"] == "info"  # root refused, render members get in: said, not an error


def test_devn_node_gets_the_containers_render_gid_through_the_pct_shim(pve, made, world_dir, env):
    env.update(pve.env())
    # /dev/kfd (a dynamic major, the render group: ROCm's node); on a host that has one, a free renderD name
    spare = [f"/dev/dri/renderD{n}" for n in range(250, 200, -1)] if os.path.isdir("/dev/dri") else []
    kfd, major = harness.driverless_dev_node(("/dev/kfd", *spare), mode=0o660)
    try:
        proc = world_dir / "proc-devices"
        proc.write_text(f"Character devices:\n  1 mem\n 10 misc\n226 drm\n{major} kfd\n\nBlock devices:\n  8 sd\n")
        env["LXCFIX_PROC_DEVICES"] = str(proc)
        ct = harness.make_unprivileged_ct(pve, [f"dev0: {kfd}"], users=USERS, groups=GROUPS)
        made.append(ct)
        assert harness.host_uid(ct) == harness.MAPPED_ROOT  # really unprivileged
        passthrough = os.path.join(ct.dir, "passthrough")
        assert passthrough in harness.mounts_under(passthrough)  # the shim's tmpfs, as Proxmox's
        st = os.stat(passthrough + kfd)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (harness.MAPPED_ROOT, harness.MAPPED_ROOT, 0o660)
        assert inside_owner(ct, kfd) == "0:0 660"  # root:root 0660 inside

        assert harness.open_errno_as(ct, kfd, SVC, RENDER) == "EACCES"
        assert harness.open_errno(ct, kfd) == "ENXIO"  # root can: the permission check lets it through

        found = diagnose(env, ct.vmid)
        member = found["LXF204"]
        assert member["message"] == (f"as svc (uid {SVC}) in group render (gid {RENDER}), open {kfd} gives "
                                     "EACCES: inside it is root:root 0660: Proxmox creates devN nodes root:root "
                                     "0660 unless uid=/gid=/mode= say otherwise")
        assert member["edits"] == [{"op": "replace", "line": member["line"],
                                    "lines": [{"key": "dev0", "value": f"{kfd},gid={RENDER}"}]}]
        assert member["applicability"] == "needs-restart"
        assert "LXF114" not in found  # the probe tried it for real: its finding stands instead

        r = lxcfix(env, "apply", "--ct", ct.vmid, "--yes")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"dev0: {kfd},gid={RENDER}\n" in ct.conf_text()
        st = os.stat(passthrough + kfd)
        assert (st.st_uid, st.st_gid) == (harness.MAPPED_ROOT, harness.MAPPED_ROOT + RENDER)
        assert inside_owner(ct, kfd) == f"0:{RENDER} 660"
        assert harness.open_errno_as(ct, kfd, SVC, RENDER) == "ENXIO"
        assert harness.host_uid(ct) == harness.MAPPED_ROOT
        assert not {"LXF114", "LXF204", "LXF201"} & set(diagnose(env, ct.vmid))
    finally:
        for c in made:
            c.destroy()
        harness.remove_dev_node(kfd, major)


@pytest.mark.parametrize("tools", ["setpriv", "none"])
def test_without_python3_the_probe_tries_with_setpriv_or_says_it_could_not(made, world_dir, env, tools):
    """python3 masked in this one container (a stub bind-mounted over the real binary):
    the probe's shell half opens as the member with setpriv; with setpriv masked too, the
    static finding stands and says the open could not be tried."""
    major = harness.free_char_major(509)
    node = harness.mknod(str(world_dir / "renderD128"), major, 128, mode=0o660)
    os.chown(node, 0, HOST_GID)
    stub = world_dir / "stub"
    stub.write_text("#!/bin/sh\nexit 127\n")
    stub.chmod(0o755)
    masked = [os.path.realpath("/usr/bin/python3")] + (["/usr/bin/setpriv"] if tools == "none" else [])
    c = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {node} dev/dri/renderD128 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:128 rwm",
         *(f"lxc.mount.entry = {stub} {m.lstrip('/')} none bind,ro 0 0" for m in masked)],
        users=USERS, groups=GROUPS)
    made.append(c)
    assert harness.host_uid(c) == harness.MAPPED_ROOT
    assert c.attach(["python3", "-c", "print(1)"]).rc == 127  # really no python3 in there
    # The in-container probe's shell half (NVIDIA containers, remote hosts); the namespace floor
    # runs nothing of the container's, its python3 or setpriv included.
    env["LXCFIX_PROBER"] = "attach"

    found = diagnose(env, c.name)
    if tools == "setpriv":
        member = found["LXF204"]
        assert member["message"].startswith(f"as svc (uid {SVC}) in group render (gid {RENDER}), open "
                                            "/dev/dri/renderD128 gives EACCES")
        assert member["evidence"][0].startswith("tried for real (setpriv)")
    else:
        assert "LXF204" not in found
        static = found["LXF115"]
        assert static["evidence"][-1] == "the probe could not try it as a render member: setpriv-failed"


def test_write_subgid_never_maps_the_hosts_root_group(made, world_dir, env):
    """Issue 21 row 2: a bind-mounted node that is root:root 0660 on the host (host gid 0).
    Before, the group-access fix passed gid 0 through (`lxc.idmap = g 104 0 1`) and
    `--write-subgid` wrote `root:0:1` to /etc/subgid; after the restart the container's root
    made a setgid file owned by the host's root group under its rootfs. Now the fix is
    manual: it says why and offers a udev rule giving the node its own group; nothing is
    written, and a file the container's root gives its render group is not host gid 0."""
    major = harness.free_char_major(509)
    node = harness.mknod(str(world_dir / "renderD128"), major, 128, mode=0o660)
    os.chown(node, 0, 0)
    subgid = world_dir / "subgid"
    allowed = f"root:{harness.MAPPED_ROOT}:{harness.MAPPED_COUNT}\n"
    subgid.write_text(allowed)
    env["LXCFIX_SUBGID"] = str(subgid)
    c = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {node} dev/dri/renderD128 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:128 rwm"], users=USERS, groups=GROUPS)
    made.append(c)
    assert harness.host_uid(c) == harness.MAPPED_ROOT  # really unprivileged
    assert c.bpf_attached()
    path = "/dev/dri/renderD128"
    assert harness.open_errno_as(c, path, SVC, RENDER) == "EACCES"

    before = Path(c.config_path).read_text()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--write-subgid")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert f"g {RENDER} 0 1" not in Path(c.config_path).read_text()
    assert Path(c.config_path).read_text() == before
    assert subgid.read_text() == allowed  # no root:0:1

    c.restart()
    assert harness.host_uid(c) == harness.MAPPED_ROOT
    r = c.attach(["sh", "-c", f"touch /root/lxf-sgid && chgrp {RENDER} /root/lxf-sgid && chmod 2755 /root/lxf-sgid"])
    assert r.ok, r.stderr
    st = os.stat(os.path.join(c.rootfs, "root/lxf-sgid"))
    assert st.st_gid == harness.MAPPED_ROOT + RENDER and st.st_gid != 0

    found = diagnose(env, c.name)
    member = found["LXF204"]
    assert member["applicability"] == "manual" and member["edits"] == [], member
    assert any("host gid 0 is the host's root group" in e and "udev rule" in e for e in member["evidence"]), member
    r = lxcfix(env, "plan", "--ct", c.name, "--write-subgid")
    assert "root:0:1" not in r.stdout and f"g {RENDER} 0 1" not in r.stdout, r.stdout
