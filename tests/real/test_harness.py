"""The harness itself, against real LXC: containers start with a cgroup device
program attached, denied nodes give EPERM, allowed ones open (or ENXIO without
a driver), and the pct shim behaves like Proxmox where lxcfix looks."""

import os

import pytest

from . import harness
from .harness import CGROUP_ROOT, open_errno, probe_node

TUN_BIND = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
TUN_ALLOW = "lxc.cgroup2.devices.allow = c 10:200 rwm"


def test_container_starts_with_device_program(container_factory):
    c = container_factory()
    assert c.running()
    assert c.init_pid() > 1
    assert c.cgroup_path() == f"{CGROUP_ROOT}/lxc.payload.{c.name}"
    assert c.bpf_attached(), c.bpf_programs()
    assert "r0 = " in c.bpf_dump()
    r = c.attach(["cat", "/etc/hostname", "/proc/1/cmdline"])
    assert r.ok, r.stderr
    assert "sleep" in r.stdout
    # own network namespace, loopback only
    r = c.attach(["ls", "/sys/class/net"])
    assert r.ok and r.stdout.split() == ["lo"], r
    # default devices from common.conf open
    assert open_errno(c, "/dev/null") == "ok"
    assert open_errno(c, "/dev/lxf-nonexistent") == "ENOENT"


def test_tun_denied_then_allowed_after_edit_and_restart(container_factory, tun):
    c = container_factory([TUN_BIND])
    assert c.bpf_attached()
    node = probe_node(c, "/dev/net/tun")
    assert (node.exists, node.is_char, node.major, node.minor) == (True, True, 10, 200)
    assert node.open == "EPERM"

    pid = c.init_pid()
    c.write_config([TUN_BIND, TUN_ALLOW])
    c.restart()
    assert c.init_pid() != pid
    assert c.bpf_attached()
    assert open_errno(c, "/dev/net/tun") == "ok"


@pytest.mark.parametrize("allow, expected", [(None, "EPERM"), ("c {major}:* rwm", "ENXIO")])
def test_driverless_dynamic_major(container_factory, tmp_path, allow, expected):
    major = harness.free_char_major(511)
    src = harness.mknod(str(tmp_path / "nvidia-uvm"), major, 0)
    lines = [f"lxc.mount.entry = {src} dev/nvidia-uvm none bind,create=file 0 0"]
    if allow:
        lines.append("lxc.cgroup2.devices.allow = " + allow.format(major=major))
    c = container_factory(lines)
    assert c.bpf_attached()
    node = probe_node(c, "/dev/nvidia-uvm")
    assert (node.is_char, node.major, node.minor) == (True, major, 0)
    assert node.open == expected


def test_pct_shim_raw_lines(pve, tun):
    ct = pve.make_ct([
        "lxc.cgroup2.devices.allow: c 10:200 rwm",
        "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file 0 0",
    ])
    generated = ct.config_text()
    assert "lxc.cgroup2.devices.allow = c 10:200 rwm\n" in generated
    assert "lxc.net.0.type = empty\n" in generated

    assert pve.pct("status", ct.vmid).stdout == "status: running\n"
    r = pve.pct("exec", ct.vmid, "--", "cat", "/proc/1/cmdline")
    assert r.ok and "sleep" in r.stdout, r
    # Proxmox's cgroup layout: program on lxc/<vmid>, processes in lxc/<vmid>/ns
    assert ct.init_cgroup() == f"{CGROUP_ROOT}/lxc/{ct.vmid}/ns"
    assert ct.cgroup_path() == f"{CGROUP_ROOT}/lxc/{ct.vmid}"
    assert ct.bpf_attached()
    assert open_errno(ct, "/dev/net/tun") == "ok"

    listing = pve.pct("list").stdout.splitlines()
    assert listing[0].split() == ["VMID", "Status", "Lock", "Name"]
    assert any(l.split()[:2] == [ct.vmid, "running"] for l in listing[1:])

    r = pve.pct("stop", ct.vmid)
    assert r.ok, r
    assert pve.pct("status", ct.vmid).stdout == "status: stopped\n"
    assert not ct.running()


def test_pct_shim_devN_and_refusals(pve, tun, tmp_path):
    ct = pve.make_ct(["dev0: /dev/net/tun,mode=0666"])
    assert "lxc.cgroup2.devices.allow = c 10:200 rw\n" in ct.config_text()
    assert ct.bpf_attached()
    assert open_errno(ct, "/dev/net/tun") == "ok"
    r = pve.pct("start", ct.vmid)
    assert r.rc == 255 and f"CT {ct.vmid} already running" in r.stderr

    missing = pve.make_ct([f"dev0: path=/dev/lxf-missing-{harness.RUN_ID}"], start=False)
    r = pve.pct("start", missing.vmid)
    assert r.rc == 255 and f"Device /dev/lxf-missing-{harness.RUN_ID} does not exist" in r.stderr
    assert not missing.running()

    locked = pve.make_ct(["lock: backup"], start=False)
    r = pve.pct("start", locked.vmid)
    assert r.rc == 255 and "CT is locked (backup)" in r.stderr
    assert not locked.running()

    r = pve.pct("status", "999999999")
    assert r.rc == 255 and "does not exist" in r.stderr


def test_pct_shim_ignores_snapshot_sections(pve, tun):
    ct = pve.make_ct(["[snap1]", "lxc.cgroup2.devices.allow: c 10:200 rwm"])
    assert "10:200" not in ct.config_text()
    assert ct.bpf_attached()
    assert open_errno(ct, "/dev/net/tun") == "ENOENT"
    assert pve.pct("config", ct.vmid, "--snapshot", "snap1").stdout == "lxc.cgroup2.devices.allow: c 10:200 rwm\n"


def test_harness_refuses_host_network(container_factory):
    name = harness.new_name()
    host_network = "lxc.net.0.type = " + "none"  # split: no config line in this repo reads like that
    with pytest.raises(ValueError):
        container_factory([host_network], name=name, start=False)
    assert not os.path.lexists(os.path.join(harness.LXCPATH, name))
