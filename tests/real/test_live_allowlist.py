"""The live allowlist read back from real containers: lxcfix.bpf's reader
(python3 + bpf() syscalls, and the bpftool fallback) and decoder against the
programs LXC 5 really attaches, before and after live `lxc-cgroup` changes,
with the kernel's own answers (open() inside the container) as the judge.

Run through tests/run (root, private mount namespace with a pure cgroup2
mount); the conftest skips otherwise, which is a failure when CI=true.
"""

from __future__ import annotations

import os

import pytest

from lxcfix import bpf, observe
from lxcfix.model import DeviceRule
from lxcfix.transport import Local

from . import harness
from .harness import COMMON_CONF, probe_node, sh
from .hostile import CGROUP_RW, move_init_and_attach

pytestmark = pytest.mark.real

TUN_BIND = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"


def common_lines() -> list[tuple[bool, str]]:
    """This host's common.conf device lines, as LXC reads them."""
    out = []
    with open(COMMON_CONF) as f:
        for line in f:
            key, _, value = line.partition("=")
            key = key.strip()
            if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"):
                out.append((key.endswith(".allow"), value.strip()))
    return out


def own_lines(lines: list[str]) -> list[tuple[bool, str]]:
    out = []
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip().startswith("lxc.cgroup2.devices."):
            out.append((key.strip().endswith(".allow"), value.strip()))
    return out


def proc_cgroup(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read()


def lxc_cgroup(c, key: str, value: str) -> None:
    r = sh(["lxc-cgroup", "-n", c.name, key, value], timeout=30)
    assert r.ok, r.stderr


def test_read_live_decodes_the_configured_rules_and_a_live_change(container_factory, tmp_path):
    major = harness.free_char_major(511)
    node = harness.mknod(str(tmp_path / "uvm"), major, 1)  # no driver: ENXIO once allowed
    lines = [
        "lxc.cgroup2.devices.allow = c 195:* rwm",
        "lxc.cgroup2.devices.allow = c 10:200 rwm",
        f"lxc.cgroup2.devices.allow = c {major}:0 rw",
        "lxc.cgroup2.devices.allow = b 8:* r",
        "lxc.cgroup2.devices.allow = c *:* m",       # repeats common.conf: reused, not added
        "lxc.cgroup2.devices.deny = c 10:229 rwm",   # cancels common.conf's /dev/fuse line
        "lxc.cgroup2.devices.deny = c 195:0 rwm",    # no exception carved out of c 195:*
        f"lxc.mount.entry = {node} dev/lxf-uvm none bind,create=file 0 0",
    ]
    c = container_factory(lines)
    assert c.bpf_attached(), "no device program: cgroup2 rules ignored?"
    cg = c.cgroup_path()
    assert bpf.cgroup_candidates("lxc", c.name)[0] == cg
    assert bpf.cgroup_candidates("lxc", c.name, proc_cgroup=proc_cgroup(c.init_pid()))[0] == cg

    out = observe.read_programs(Local(), cg)
    assert (out.status, out.scope, out.via, len(out.programs)) == ("progs", "direct", "python3", 1)
    assert observe.read_bpftool(Local(), cg).programs == out.programs  # the fallback reads the same bytes

    live = observe.read_live(Local(), cg)
    expected = bpf.lxc_expected(common_lines() + own_lines(lines))
    assert live is not None and not live.unknown
    assert live == expected
    assert live.mode == "allowlist"
    assert live.rules[-4:] == (DeviceRule("c", 195, None, "rwm"), DeviceRule("c", 10, 200, "rwm"),
                               DeviceRule("c", major, 0, "rw"), DeviceRule("b", 8, None, "r"))
    assert DeviceRule("c", 10, 229, "rwm") not in live.rules
    assert bpf.encode(live) == out.programs[0][1]
    assert live.allows("c", 195, 0)
    assert not live.allows("c", major, 1)
    assert probe_node(c, "/dev/lxf-uvm").open == "EPERM"  # the kernel agrees

    lxc_cgroup(c, "devices.allow", f"c {major}:* rwm")
    after = observe.read_live(Local(), cg)
    assert after is not None and not after.unknown
    assert after.prog_id != live.prog_id and not after.others  # replaced, not appended
    assert after.rules == live.rules + (DeviceRule("c", major, None, "rwm"),)
    assert after.allows("c", major, 1)
    assert probe_node(c, "/dev/lxf-uvm").open == "ENXIO"  # allowed now; no driver behind it

    lxc_cgroup(c, "devices.deny", "c 195:* rwm")  # flips the identical allow: gone
    gone = observe.read_live(Local(), cg)
    assert DeviceRule("c", 195, None, "rwm") not in gone.rules
    assert gone.rules == tuple(r for r in after.rules if r != DeviceRule("c", 195, None, "rwm"))


def test_denylist_access_is_matched_as_a_whole_request(container_factory, tun):
    """`deny c 10:200 w`: O_WRONLY is denied, O_RDWR is not (the program tests
    requested-bits-within-mask), and the decoded policy says the same."""
    lines = ["lxc.cgroup2.devices.allow = a", "lxc.cgroup2.devices.deny = c 10:200 w", TUN_BIND]
    c = container_factory(lines)
    assert c.bpf_attached()
    live = observe.read_live(Local(), c.cgroup_path())
    assert (live.mode, live.rules, live.unknown) == ("denylist", (DeviceRule("c", 10, 200, "w", allow=False),), False)
    for mode in ("w", "rw", "r"):
        kernel = probe_node(c, "/dev/net/tun", mode).open
        assert kernel in ("ok", "EPERM"), kernel
        assert live.allows("c", 10, 200, mode) == (kernel == "ok"), mode
    assert probe_node(c, "/dev/net/tun", "w").open == "EPERM"
    assert probe_node(c, "/dev/net/tun", "rw").open == "ok"


def test_no_program_when_the_list_is_empty(container_factory, tun):
    """`deny a` as the last device line empties LXC's list: nothing is attached
    and every device opens. A live rule then attaches a program."""
    lines = ["lxc.cgroup2.devices.deny = a", TUN_BIND]
    c = container_factory(lines)
    cg = f"{harness.CGROUP_ROOT}/lxc.payload.{c.name}"
    assert os.path.isdir(cg)
    assert observe.read_programs(Local(), cg).status == "none"
    assert observe.read_live(Local(), cg) is None
    assert bpf.lxc_expected(common_lines() + own_lines(lines)) is None
    assert probe_node(c, "/dev/net/tun").open == "ok"

    lxc_cgroup(c, "devices.allow", "c 10:200 rwm")
    live = observe.read_live(Local(), cg)
    assert c.bpf_attached()
    assert (live.mode, live.rules) == ("allowlist", (DeviceRule("c", 10, 200, "rwm"),))
    assert probe_node(c, "/dev/net/tun").open == "ok"


def test_proxmox_layout(pve):
    """pct's cgroup layout: program on lxc/<vmid>, init in lxc/<vmid>/ns, where
    only the effective (inherited) query sees it."""
    ct = pve.make_ct(["lxc.cgroup2.devices.allow: c 10:200 rwm"])
    assert ct.bpf_attached()
    limit = f"{harness.CGROUP_ROOT}/lxc/{ct.vmid}"
    cands = bpf.cgroup_candidates("pve", ct.vmid, proc_cgroup=proc_cgroup(ct.init_pid()))
    assert cands[:2] == [limit, f"{limit}/ns"]  # the limit cgroup first, never the init's own (issue 21 row 3)

    direct = observe.read_programs(Local(), limit)
    inner = observe.read_programs(Local(), f"{limit}/ns")
    assert (direct.status, direct.scope) == ("progs", "direct")
    assert (inner.status, inner.scope) == ("progs", "effective")
    assert inner.programs == direct.programs

    live = observe.read_live(Local(), cands[0])
    assert live == observe.read_live(Local(), limit)
    assert live.mode == "allowlist" and live.rules[-1] == DeviceRule("c", 10, 200, "rwm")
    assert live.allows("c", 10, 200) and not live.allows("c", 195, 0)


def test_a_tenant_moving_its_init_below_the_limit_cgroup_does_not_hide_drift(container_factory, env):
    """Issue 21 row 3, from inside: the privileged container's root (cgroup mounted rw) makes
    a cgroup below its own, moves PID 1 there and attaches a device program of its own that
    allows exactly what the config on disk says. Before, lxcfix read the program of the init's
    cgroup, the tenant's, found it equal to the config and LXF121 (the config was edited
    without a restart) disappeared, while the kernel still enforced LXC's stale program. Now
    the limit cgroup's program (LXC's) is read: LXF121 stays, and its evidence names the
    deeper cgroup and its program."""
    import json

    from .cli import lxcfix

    start = [*CGROUP_RW, "lxc.cgroup2.devices.allow = c 10:200 rwm"]
    c = container_factory(start)
    assert c.bpf_attached()
    limit = c.cgroup_path()
    assert limit == f"{harness.CGROUP_ROOT}/lxc.payload.{c.name}"
    # the admin edits the config without a restart: drift (LXF121)
    on_disk = start + ["lxc.cgroup2.devices.allow = c 10:232 rwm"]
    c.write_config(on_disk)

    def lxf121():
        doc = json.loads(lxcfix(env, "diagnose", "--ct", c.name, "--json").stdout)
        (ct,) = doc["containers"]
        return next((f for f in ct["findings"] if f["code"] == "LXF121"), None)

    before = lxf121()
    assert before is not None and "c 10:232 rwm" in before["message"]
    assert any(e.startswith(f"running program on {limit}:") for e in before["evidence"])

    # the tenant: its own cgroup, PID 1 in it, a program that says what the config on disk says
    deeper = move_init_and_attach(c, bpf.lxc_expected(common_lines() + own_lines(on_disk)))
    assert deeper == f"{limit}/lxf-hide"
    assert f"0::/lxc.payload.{c.name}/lxf-hide" in proc_cgroup(c.init_pid()).splitlines()
    mine = observe.read_programs(Local(), deeper)
    assert (mine.status, mine.scope) == ("progs", "direct")
    assert bpf.effective_of(mine).rules == bpf.lxc_expected(common_lines() + own_lines(on_disk)).rules
    # the kernel still runs LXC's program: 10:232, which the tenant's allows, stays denied
    assert c.attach(["mknod", "/tmp/lxf-kvm", "c", "10", "232"]).ok
    assert probe_node(c, "/tmp/lxf-kvm").open == "EPERM"

    after = lxf121()
    assert after is not None, "LXF121 disappeared: the tenant's program was read as LXC's"
    assert "c 10:232 rwm" in after["message"]
    assert any(e.startswith(f"running program on {limit}:") for e in after["evidence"])
    assert any(deeper in e and "of its own" in e for e in after["evidence"]), after["evidence"]

    # the same through a host sweep (two containers: one command reads both, sweep.py)
    other = container_factory(["lxc.cgroup2.devices.allow = c 10:200 rwm"])
    r = lxcfix(env, "scan", "--ct", c.name, "--ct", other.name, "--json")
    doc = json.loads(r.stdout)
    (mine,) = [x for x in doc["containers"] if x["ct"] == c.name]
    swept = next((f for f in mine["findings"] if f["code"] == "LXF121"), None)
    assert swept is not None and any(deeper in e for e in swept["evidence"]), mine["findings"]
