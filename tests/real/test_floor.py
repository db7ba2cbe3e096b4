"""The probe at the namespace floor (lxcfix.floor, lxcfix.nsprobe) on real containers.

The differential test scans the same real containers twice, once with today's in-container probe
(LXCFIX_PROBER=attach: lxc-attach, sh and python3 inside) and once at the floor (a child of
lxcfix's that joins each container's cgroup and namespaces), and asserts equal verdicts on every
case: privileged, unprivileged with a real idmap, denied (EPERM), a node absent inside, a
driverless major (ENXIO), group access as a service user, a non-ASCII node name, NVIDIA nodes (the
in-container probe still runs for them), 20+ containers. lxc-attach and lxc-info are counted
through stand-ins first on PATH: the floor runs neither for a container it answers for.

The hostile cases: a frozen cgroup, a huge /etc/group, links out of the root and to /dev/zero,
each a finding for that container while the others are judged in full.
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
from .cli import TUN_MOUNT, lxcfix
from .hostile import hostile_script, over_python3, over_sh

RENDER, SVC, HOST_GID = 104, 1000, 4242
USERS = [("svc", SVC, ["render"])]
COUNTED = ("lxc-attach", "lxc-info")


@pytest.fixture
def counted(tmp_path, env):
    """lxc-attach and lxc-info stand-ins first on PATH: each call logged, then the real one run."""
    bindir = tmp_path / "counted"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    for tool in COUNTED:
        real = shutil.which(tool)
        assert real, tool
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexec {real} "$@"\n')
        (bindir / tool).chmod(0o755)
    env["PATH"] = f"{bindir}:{env.get('PATH', os.defpath)}"
    return log


@pytest.fixture
def world_dir():
    """A directory the containers' mapped root can traverse (pytest's tmp_path is 0700 root)."""
    d = Path(tempfile.mkdtemp(prefix="lxf-floor-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


def scan(env, names, prober, log=None) -> tuple[dict, list[str]]:
    """The scan's containers by name, and the counted calls it made."""
    if log is not None and log.exists():
        log.unlink()
    r = lxcfix({**env, "LXCFIX_PROBER": prober}, "scan", "--json", *[a for n in names for a in ("--ct", n)],
               timeout=300)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    calls = log.read_text().splitlines() if log is not None and log.exists() else []
    return {c["ct"]: c for c in doc["containers"]}, calls


def verdicts(c: dict) -> list[tuple]:
    """What a container's report says: each finding's code, severity, device, message and evidence."""
    return sorted((f["code"], f["severity"], f.get("device") or "", f["message"], tuple(f.get("evidence") or ()))
                  for f in c["findings"])


def codes_of(c: dict) -> set[str]:
    return {f["code"] for f in c["findings"]}


def test_the_floor_gives_the_in_container_probes_verdicts(container_factory, tun, uvm, world_dir, env, counted):
    node, major = uvm  # driverless major, named nvidia-uvm in the /proc/devices text
    driverless = harness.mknod(str(world_dir / "renderD129"), major, 129, mode=0o666)
    render = harness.mknod(str(world_dir / "renderD128"), major, 128, mode=0o660)
    os.chown(render, 0, HOST_GID)
    made = {}
    made["ok"] = container_factory([TUN_MOUNT, "lxc.cgroup2.devices.allow = c 10:200 rwm"])
    made["eperm"] = container_factory([TUN_MOUNT])
    made["absent"] = container_factory([TUN_MOUNT, "lxc.cgroup2.devices.allow = c 10:200 rwm"])
    gone = made["absent"].attach(["/bin/sh", "-c", "umount /dev/net/tun && rm /dev/net/tun"])  # the tenant's doing
    assert gone.ok, gone
    made["enxio"] = container_factory([f"lxc.mount.entry = {driverless} dev/dri/renderD129 none bind,create=file 0 0",
                                       f"lxc.cgroup2.devices.allow = c {major}:129 rwm"])
    made["enxio-denied"] = container_factory([f"lxc.mount.entry = {driverless} dev/dri/renderD129 none "
                                              "bind,create=file 0 0"])
    made["nonascii"] = container_factory(["lxc.mount.entry = /dev/net/tun dev/net/tün none bind,create=file 0 0"])
    made["nvidia"] = container_factory([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"])
    unpriv = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {render} dev/dri/renderD128 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:128 rwm"], users=USERS, groups={"render": RENDER})
    container_factory.made.append(unpriv)
    made["unpriv"] = unpriv
    unpriv_ok = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {driverless} dev/dri/renderD129 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:129 rwm"], users=USERS, groups={"render": RENDER})
    container_factory.made.append(unpriv_ok)
    made["unpriv-ok"] = unpriv_ok
    for n in range(14):  # 20+ containers, half of them broken
        made[f"fill{n}"] = container_factory([TUN_MOUNT] + (["lxc.cgroup2.devices.allow = c 10:200 rwm"] if n % 2 else []))
    assert len(made) >= 20
    assert all(c.bpf_attached() for c in made.values())
    assert harness.host_uid(unpriv) == harness.MAPPED_ROOT
    names = {c.name: key for key, c in made.items()}

    old, old_calls = scan(env, names, "attach", counted)
    new, new_calls = scan(env, names, "ns", counted)
    assert set(old) == set(new) == set(names)
    for name, key in names.items():
        assert verdicts(new[name]) == verdicts(old[name]), key

    # the cases are what they say (else equal verdicts would prove little)
    by = {key: codes_of(new[c.name]) for key, c in made.items()}
    assert "LXF200" in by["eperm"] and "LXF200" in by["enxio-denied"] and "LXF200" not in by["ok"]
    assert "LXF200" not in by["enxio"] and not {"LXF200", "LXF201"} & by["unpriv-ok"]
    assert "LXF204" in by["unpriv"] and "LXF201" in by["unpriv"]  # svc in render refused: the idmap
    assert "LXF202" in by["absent"]
    assert "LXF200" in by["nonascii"]
    assert "LXF301" not in set().union(*by.values())

    # the floor entered nothing but the container with NVIDIA nodes, and asked lxc-info nothing of the rest
    attached = [line for line in new_calls if line.startswith("lxc-attach")]
    assert len(attached) == 1 and made["nvidia"].name in attached[0], new_calls
    asked = [line for line in new_calls if line.startswith("lxc-info")]
    assert all(made["nvidia"].name in line for line in asked), asked
    assert len([line for line in old_calls if line.startswith("lxc-attach")]) == len(made)


def test_a_frozen_cgroup_a_huge_group_file_and_links_out_are_that_containers_findings(
        container_factory, tun, world_dir, env, counted):
    env["LXCFIX_PROBE_TIMEOUT"] = "5"
    frozen = container_factory([TUN_MOUNT])
    major = harness.free_char_major(509)
    render = harness.mknod(str(world_dir / "renderD128"), major, 128, mode=0o660)
    os.chown(render, 0, HOST_GID)
    huge = harness.make_unprivileged_container(
        [f"lxc.mount.entry = {render} dev/dri/renderD128 none bind,optional,create=file 0 0",
         f"lxc.cgroup2.devices.allow = c {major}:128 rwm"], users=USERS, groups={"render": RENDER})
    container_factory.made.append(huge)
    links = container_factory([TUN_MOUNT])
    healthy = container_factory([TUN_MOUNT])
    with open(os.path.join(huge.rootfs, "etc/group"), "a") as f:
        f.write("".join(f"g{n}:x:{20000 + n}:{'u,' * 20}u\n" for n in range(40000)))  # ~3 MiB
    for name, target in (("group", "/dev/zero"), ("passwd", "../../../../../../etc/shadow")):
        path = os.path.join(links.rootfs, "etc", name)
        os.unlink(path)
        os.symlink(target, path)
    cgroup = frozen.cgroup_path()
    Path(cgroup, "cgroup.freeze").write_text("1")
    try:
        start = time.monotonic()
        got, _ = scan(env, [c.name for c in (frozen, huge, links, healthy)], "ns", counted)
        took = time.monotonic() - start
    finally:
        Path(cgroup, "cgroup.freeze").write_text("0")
    assert took < 60, took
    assert "LXF200" in codes_of(got[healthy.name]) and "LXF200" in codes_of(got[links.name])
    # the huge /etc/group is read no further than nsprobe.TABLE_MAX: the node still judged, the
    # group access left to the static check (its files too large to read: LXF236)
    assert {"LXF201", "LXF236"} <= codes_of(got[huge.name]) and "LXF301" not in codes_of(got[huge.name])
    f301 = [f for f in got[frozen.name]["findings"] if f["code"] == "LXF301"]
    assert f301 and "frozen" in f301[0]["message"], got[frozen.name]["findings"]


def test_a_tenants_own_sh_and_python3_decide_nothing_at_the_floor(container_factory, tun, env, tmp_path, counted):
    """A container whose python3 and sh lie ("open=ok"): the in-container probe believes them; the floor
    runs neither and judges the node as it is (EPERM: LXF200)."""
    script = hostile_script(tmp_path, "liar", "printf 'node /dev/net/tun exists=1 char=1 major=10 minor=200 open=ok\\n'"
                                              "; printf 'end\\n'", interpreter="/usr/bin/bash")
    bad = container_factory([TUN_MOUNT, *over_python3(script), *over_sh(script)])
    old, _ = scan(env, [bad.name], "attach", counted)
    new, calls = scan(env, [bad.name], "ns", counted)
    assert "LXF200" not in codes_of(old[bad.name])  # the liar's "open=ok" believed
    assert "LXF200" in codes_of(new[bad.name]) and "LXF206" not in codes_of(new[bad.name])
    assert not [line for line in calls if line.startswith("lxc-attach")]


def test_proxmox_containers_through_the_pct_shim_are_read_at_the_floor_too(pve, tun, env, counted):
    """Proxmox's layout: the device program on lxc/VMID, the processes in lxc/VMID/ns."""
    assert env["LXCFIX_PVE_DIR"] == pve.dir and harness.SHIM_DIR in env["PATH"]
    denied = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file 0 0"])
    allowed = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file 0 0",
                           "lxc.cgroup2.devices.allow: c 10:200 rwm"])
    assert os.path.isdir(f"/sys/fs/cgroup/lxc/{denied.vmid}/ns")
    old, _ = scan(env, [denied.vmid, allowed.vmid], "attach", counted)
    new, calls = scan(env, [denied.vmid, allowed.vmid], "ns", counted)
    for ct in (denied.vmid, allowed.vmid):
        assert verdicts(new[ct]) == verdicts(old[ct])
    assert "LXF200" in codes_of(new[denied.vmid]) and "LXF200" not in codes_of(new[allowed.vmid])
    assert not [line for line in calls if line.startswith(("lxc-attach", "lxc-info"))], calls
