"""Issue 15, the rows about what comes out of a container: hostile containers (their own
python3/sh bound over the real ones, inside that container only) next to an innocent
neighbour whose finding must still be reported, lxcfix under RLIMIT_AS.

Rows: 2 (garbage probe output is that container's finding; prometheus still has every
container), 3 (garbage during apply's verify: rolled back, exit 4), 4 (endless output: cut
at the cap, memory bounded), 6 (a stuck probe: its deadline, the others still reported),
7 (nothing of lxcfix's environment inside), 9 (tenant-writable device sources), 12
(escape sequences from a container never reach the terminal; JSON stays exact).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from . import harness
from .cli import TUN_MOUNT, codes, lxcfix
from .hostile import PYTHON3, hostile_script, lxcfix_limited, over_python3, over_sh

# What a hostile python3 prints in place of the probe's node lines: a node line with a
# 5,000-digit major, `group render ²` ("²".isdigit() is True, int("²") raises), a line far
# over the per-line cap, and NVML "output" that moves the cursor, clears the screen and
# writes the terminal's clipboard (OSC 52).
GARBAGE = r"""
printf 'node /dev/net/tun exists=1 char=1 major=%s minor=200 open=ok\n' "$(printf '9%.0s' $(seq 5000))"
printf 'group render \302\262\n'
printf 'cuinit %s\n' "$(printf '7%.0s' $(seq 20))"
printf 'nvidia_smi rc=255\n'
printf 'nvidia_smi_out \033]52;c;cm0gLXJmIH4=\007\033[2J\033[1Agotcha\n'
"""


@pytest.fixture(autouse=True)
def _in_container_probe(env, monkeypatch):
    """These rows are about what the container's own sh and python3 print: the in-container probe,
    which still runs for containers given NVIDIA nodes and on remote hosts. On this machine the
    scan's default prober runs nothing of the container's (tests/real/test_floor.py)."""
    env["LXCFIX_PROBER"] = "attach"
    monkeypatch.setenv("LXCFIX_PROBER", "attach")


def findings_of(doc, ct) -> dict[str, dict]:
    (c,) = [c for c in doc["containers"] if c["ct"] == ct]
    return {f["code"]: f for f in c["findings"]}


def test_garbage_probe_output_is_one_containers_finding_and_the_neighbour_is_still_reported(
        container_factory, tun, env, tmp_path):
    bad = container_factory([TUN_MOUNT, *over_python3(hostile_script(tmp_path, "python3", GARBAGE))])
    good = container_factory([TUN_MOUNT])
    assert bad.bpf_attached() and good.bpf_attached()

    r = lxcfix_limited(env, "scan", "--ct", bad.name, "--ct", good.name, "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {"LXF100", "LXF200"} <= set(findings_of(doc, good.name))  # the innocent neighbour
    mine = findings_of(doc, bad.name)
    assert "LXF100" in mine  # from its config and the host: the tenant cannot change those
    evidence = "\n".join(mine["LXF206"]["evidence"])
    assert "group render \\xc2\\xb2" in evidence and "longer than" in evidence and "cuinit" in evidence
    # JSON is exact: the tenant's bytes are there, as JSON escapes them
    assert "\x1b]52;c;" in mine["LXF211"]["message"]

    # prometheus: every container, the hostile one too (row 2: it was an empty file)
    r = lxcfix_limited(env, "scan", "--ct", bad.name, "--ct", good.name, "--format", "prometheus")
    assert r.returncode == 1, r.stderr
    text = r.stdout.decode()
    for ct, code in ((good.name, "LXF100"), (bad.name, "LXF206")):
        assert f'ct="{ct}",code="{code}"' in text

    # human output: no escape byte from the container reaches the terminal (row 12), also with NO_COLOR
    for extra in ({}, {"NO_COLOR": "1"}):
        for args in (("scan", "--ct", bad.name, "--ct", good.name), ("diagnose", "--ct", bad.name)):
            r = lxcfix_limited({**env, **extra}, *args)
            assert r.returncode == 1, r.stderr
            assert b"\x1b" not in r.stdout + r.stderr and b"\x07" not in r.stdout + r.stderr
    assert b"\\x1b]52;c;" in r.stdout  # shown, escaped


def test_endless_output_is_cut_at_the_cap_and_memory_stays_bounded(container_factory, tun, env, tmp_path):
    zero = container_factory([TUN_MOUNT, *over_python3(hostile_script(tmp_path, "python3", "exec cat /dev/zero"))])
    good = container_factory([TUN_MOUNT])
    start = time.monotonic()
    r = lxcfix_limited(env, "scan", "--ct", zero.name, "--ct", good.name, "--json")
    took = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {"LXF100", "LXF200"} <= set(findings_of(doc, good.name))
    assert "went past 1048576 bytes" in "\n".join(findings_of(doc, zero.name)["LXF206"]["evidence"])
    assert took < 30, took  # the issue saw 3 GiB after 7 s, then a MemoryError

    # the cap is configurable
    r = lxcfix_limited({**env, "LXCFIX_PROBE_MAX_OUTPUT": "65536"}, "scan", "--ct", zero.name, "--json")
    assert "went past 65536 bytes" in "\n".join(findings_of(json.loads(r.stdout), zero.name)["LXF206"]["evidence"])
    # nothing of the probe is left running inside
    left = zero.attach(["ps", "-e", "-o", "stat=,comm="]).stdout.split("\n")
    assert not [p for p in left if p.strip().endswith("cat") and not p.strip().startswith("Z")], left


def test_a_stuck_probe_meets_its_deadline_and_withholds_nothing(container_factory, tun, env, tmp_path):
    stuck = hostile_script(tmp_path, "sh", "exec sleep 1000", interpreter="/usr/bin/bash")
    one = container_factory([TUN_MOUNT, *over_sh(stuck)])
    two = container_factory([TUN_MOUNT, *over_sh(stuck)])
    good = container_factory([TUN_MOUNT])
    env = {**env, "LXCFIX_PROBE_TIMEOUT": "3"}
    start = time.monotonic()
    r = lxcfix_limited(env, "scan", "--ct", one.name, "--ct", two.name, "--ct", good.name, "--json")
    took = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {"LXF100", "LXF200"} <= set(findings_of(doc, good.name))
    for c in (one, two):
        assert "did not finish within 3s" in findings_of(doc, c.name)["LXF301"]["message"]
        assert not [l for l in c.attach(["ps", "-e", "-o", "stat=,comm="]).stdout.split("\n")
                    if l.strip().endswith("sleep") and not l.strip().startswith("Z") and "1000" in l]
    assert took < 3 + 3 + 10, took  # in parallel: about one deadline, not two


def test_verify_with_garbage_probe_output_is_a_failed_verify_rolled_back(container_factory, tun, env, tmp_path):
    """Row 3: the same output during apply's verify. It was an exception that skipped the
    rollback (exit 3, new config kept); now it is a finding (LXF206) that fails the verify."""
    c = container_factory([TUN_MOUNT, *over_python3(hostile_script(tmp_path, "python3", GARBAGE))])
    old = Path(c.config_path).read_bytes()
    r = lxcfix_limited(env, "apply", "--ct", c.name, "--yes", timeout=180)
    assert r.returncode == 4, r.stdout + r.stderr
    assert b"LXF206" in r.stderr and b"rolled back" in r.stderr
    assert Path(c.config_path).read_bytes() == old
    assert c.running() and c.bpf_attached()
    events = [json.loads(l)["event"] for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()]
    assert events == ["backup", "written", "failed", "rolled-back"]


CANARY = "VAULT_TOKEN"


def _env_seen(rootfs: str) -> dict[str, str]:
    seen = {}
    for line in Path(rootfs, "tmp", "env-seen").read_text().splitlines():
        k, _, v = line.partition("=")
        seen[k] = v
    return seen


def test_nothing_of_lxcfixs_environment_enters_a_container(container_factory, pve, tun, env, tmp_path):
    """Row 7: lxc-attach --clear-env with only PATH and LC_ALL; Proxmox containers too
    (they are entered the same way). The hostile python3 writes what it sees to /tmp."""
    spy = hostile_script(tmp_path, "python3", "env > /tmp/env-seen\nexit 1")
    secret = "s.canary-" + os.urandom(6).hex()
    env = {**env, CANARY: secret, "AWS_SECRET_ACCESS_KEY": secret, "SSH_AUTH_SOCK": "/tmp/agent.sock"}
    lxc = container_factory([TUN_MOUNT, *over_python3(spy)])
    plain = {k: v for k, v in env.items() if k != "LXCFIX_PVE_DIR"}  # this one is a plain LXC container
    r = lxcfix(plain, "diagnose", "--ct", lxc.name, "--json")
    assert r.returncode == 1, r.stderr
    ct = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file",
                      f"lxc.mount.entry: {spy} {PYTHON3} none bind,ro,create=file"])
    r = lxcfix({**env, **pve.env(), CANARY: secret}, "diagnose", "--ct", ct.vmid, "--json")
    assert r.returncode == 1, r.stderr
    for rootfs in (lxc.rootfs, ct.rootfs):
        seen = _env_seen(rootfs)
        assert CANARY not in seen and "AWS_SECRET_ACCESS_KEY" not in seen and "SSH_AUTH_SOCK" not in seen
        assert secret not in "\n".join(seen.values())
        assert seen["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        assert seen["LC_ALL"] == "C"
        assert not {k for k in seen if k.startswith("LXCFIX_")}
        assert env["LXCFIX_STATE_DIR"] not in "\n".join(seen.values())


def test_a_device_source_the_tenant_can_write_is_reported_and_never_allowed(container_factory, env):
    """Row 9: the config passes a node from inside the container's rootfs; the tenant swaps it
    for a symlink to /dev/kmsg, then for a node it made itself. lxcfix does not follow the
    link, reports LXF160 and plans no allow rule, in any style; a path-form rule there is
    reported too."""
    name = harness.new_name()
    rootfs = os.path.join(harness.LXCPATH, name, "rootfs")
    c = container_factory([f"lxc.mount.entry = {rootfs}/devs/gpu dev/gpu none bind,optional,create=file 0 0",
                           f"lxc.cgroup2.devices.allow = {rootfs}/devs/other rwm"], name=name, start=False)
    os.makedirs(f"{rootfs}/devs")
    harness.mknod(f"{rootfs}/devs/gpu", 1, 3)  # what the admin put there: /dev/null's numbers
    c.start()
    assert c.bpf_attached()
    # the tenant: a symlink to the host's kernel log where the admin's node was
    r = c.attach(["sh", "-c", "rm -f /devs/gpu && ln -s /dev/kmsg /devs/gpu && ln -s /dev/kmsg /devs/other"])
    assert r.ok, r.stderr
    before = Path(c.config_path).read_bytes()
    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
    found = [f for f in doc["containers"][0]["findings"] if f["code"] == "LXF160"]
    assert {f["device"] for f in found} == {f"{rootfs}/devs/gpu", f"{rootfs}/devs/other"}
    assert any("not followed" in e for f in found for e in f["evidence"])
    for style in ("auto", "path", "numeric"):
        r = lxcfix(env, "plan", "--ct", c.name, "--style", style)
        assert r.returncode == 0 and r.stdout == "", (style, r.stdout)
    # a node the tenant made (common.conf allows mknod): still its choice, still not allowed
    r = c.attach(["sh", "-c", "rm -f /devs/gpu && mknod /devs/gpu c 1 11"])
    assert r.ok, r.stderr
    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
    gpu = [f for f in doc["containers"][0]["findings"] if f["code"] == "LXF160" and f["device"].endswith("/gpu")]
    assert any("c 1:11 now" in e for e in gpu[0]["evidence"])
    assert "LXF100" not in codes(doc)
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0 and "nothing to change" in r.stdout
    assert Path(c.config_path).read_bytes() == before
    assert harness.open_errno(c, "/devs/gpu") == "EPERM"  # the tenant's 1:11 (kmsg): still denied


# Issue 21 row 1: the shared directory bind-mounted read-write in each form LXC reads.
SHARED_FORMS = {
    "bind": "lxc.mount.entry = {shared} mnt/shared none bind 0 0",
    "bind,rw": "lxc.mount.entry = {shared} mnt/shared none bind,rw 0 0",
    "fstab": "lxc.mount.fstab = {fstab}",
    "include": "lxc.include = {include}",
}


@pytest.mark.parametrize("form", sorted(SHARED_FORMS))
def test_a_node_in_a_shared_directory_is_lxf160_and_the_tenants_symlink_never_allowed(
        form, container_factory, uvm, env, tmp_path):
    """Issue 21 row 1: a driverless nvidia-uvm node (a free dynamic major) in a host directory
    that is also bind-mounted read-write at /mnt/shared (plain bind, bind,rw, through an
    lxc.mount.fstab file or an include), and a device mount of that node. Before: scan gave
    LXF100 + LXF200, `apply --style path` added `lxc.cgroup2.devices.allow = <shared>/nvidia-uvm
    rwm`, the tenant made that name a symlink to /dev/kmsg, and after the next restart LXC
    stat()ed the link and the container opened the host's kernel log. Now: LXF160, nothing
    planned or written, and after the swap and a restart the node stays denied (EPERM)."""
    node, major = uvm
    shared = os.path.dirname(node)
    fstab, include = tmp_path / "fstab", tmp_path / "shared.conf"
    fstab.write_text(f"{shared} mnt/shared none bind 0 0\n")
    include.write_text(f"lxc.mount.entry = {shared} mnt/shared none bind 0 0\n")
    name = harness.new_name()
    rootfs = os.path.join(harness.LXCPATH, name, "rootfs")
    c = container_factory([SHARED_FORMS[form].format(shared=shared, fstab=fstab, include=include),
                           f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0"],
                          name=name, start=False)
    os.makedirs(f"{rootfs}/mnt/shared")
    c.start()
    assert c.bpf_attached()
    assert c.attach(["sh", "-c", "test -c /mnt/shared/nvidia-uvm && touch /mnt/shared/x"]).ok  # it writes there
    assert os.path.exists(os.path.join(shared, "x"))
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"

    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
    found = findings_of(doc, c.name)
    assert "LXF160" in found and found["LXF160"]["device"] == node, sorted(found)
    assert "LXF100" not in found
    assert any(f"{shared}: written by the container" in e for e in found["LXF160"]["evidence"])
    before = Path(c.config_path).read_bytes()
    for style in ("auto", "path", "numeric"):
        r = lxcfix(env, "plan", "--ct", c.name, "--style", style)
        assert r.returncode == 0 and r.stdout == "", (style, r.stdout)
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--style", "path")
    assert r.returncode == 0 and "nothing to change" in r.stdout, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before

    # the tenant swaps the admin's node for a link to the host's kernel log; the next start follows it
    assert c.attach(["sh", "-c", "rm -f /mnt/shared/nvidia-uvm && ln -s /dev/kmsg /mnt/shared/nvidia-uvm"]).ok
    assert os.path.islink(node)
    doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
    found = findings_of(doc, c.name)
    assert "LXF160" in found and "not followed" in "\n".join(found["LXF160"]["evidence"])
    assert lxcfix(env, "plan", "--ct", c.name, "--style", "path").stdout == ""
    c.stop()
    c.start()
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm", "r") == "EPERM"  # /dev/kmsg behind it: still denied
