"""A host in two round trips (sweep.py), on real containers and a real sshd: the
batched scan makes two commands per host after the connection, and finds
exactly what the command-by-command path finds (codes, messages, evidence)."""

from __future__ import annotations

import collections

import pytest

from lxcfix import fleet, ssh
from lxcfix.backends import Lxc
from lxcfix.inventory import load
from lxcfix.scan import scan_host
from lxcfix.model import HOST_PYTHON
from lxcfix.transport import Local, python_of

from .sshd import Keys, Sshd, write_known_hosts

TUN_BIND = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
TUN_ALLOW = "lxc.cgroup2.devices.allow = c 10:200 rwm"


@pytest.fixture
def cts(container_factory, tun, uvm):
    """Three real containers: tun without a rule (LXF100/LXF200), tun allowed (clean), and a
    driverless node of a dynamic major allowed by path (ENXIO inside), plus one stopped."""
    node, major = uvm
    broken = container_factory([TUN_BIND])
    ok = container_factory([TUN_BIND, TUN_ALLOW])
    dyn = container_factory([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0",
                             f"lxc.cgroup2.devices.allow = c {major}:* rwm"])
    stopped = container_factory([TUN_BIND], start=False)
    assert broken.bpf_attached() and ok.bpf_attached() and dyn.bpf_attached()
    return [broken, ok, dyn, stopped]


def judged(report) -> dict:
    """What was found, container by container: everything but timing."""
    return {c.ct: sorted((f.code, f.message, f.evidence, f.device) for f in c.findings) for c in report.containers}


class Counting:
    """Counts what goes over a transport: commands (run) and file operations."""

    def __init__(self, inner):
        self.inner, self.name, self.local = inner, inner.name, inner.local
        self.python = python_of(inner)
        self.calls = collections.Counter()

    def run(self, argv, **kw):
        self.calls["run"] += 1
        self.calls["run " + argv[0]] += 1
        return self.inner.run(argv, **kw)

    def read(self, path):
        self.calls["read"] += 1
        return self.inner.read(path)

    def listdir(self, path):
        self.calls["listdir"] += 1
        return self.inner.listdir(path)

    def isdir(self, path):
        self.calls["isdir"] += 1
        return self.inner.isdir(path)

    def device_nodes(self, paths=None):
        self.calls["device_nodes"] += 1
        return self.inner.device_nodes(paths)

    def local_path(self, path):
        return self.inner.local_path(path)

    def close(self):
        self.inner.close()


def test_local_scan_probes_every_container_in_two_commands(cts, env, monkeypatch):
    monkeypatch.setenv("LXCFIX_PROC_DEVICES", env["LXCFIX_PROC_DEVICES"])
    names = [c.name for c in cts]
    local = Local(overrides={"/proc/devices": env["LXCFIX_PROC_DEVICES"]})
    one_by_one = scan_host(local, Lxc(), names, probe=True, batch=False)
    counted = Counting(local)
    batched = scan_host(counted, Lxc(), names, probe=True)
    assert judged(batched) == judged(one_by_one)
    broken, ok, dyn, stopped = cts
    codes = {c.ct: {f.code for f in c.findings} for c in batched.containers}
    assert {"LXF100", "LXF200"} <= codes[broken.name] and not codes[ok.name] - {"LXF111"}
    assert batched.notes == ()
    # the live state of every container, then every probe: the floor's one process for the
    # containers without NVIDIA nodes (lxcfix.floor), one sweep for dyn's in-container probe
    # (cuInit and NVML need its own libraries): three commands whatever the number of
    # containers (host facts are read before). Before the floor (issue 31): two, the second
    # entering every container with lxc-attach and its python3.
    sweeps = counted.calls["run " + local.python]  # this process's own interpreter, not PATH's
    assert sweeps == 3, counted.calls
    assert counted.calls["run lxc-attach"] == 0 and counted.calls["run lxc-info"] == 0, counted.calls


def _fleet_scan(tmp_path, names, wrap, compare=True):
    """One real host over a real sshd: (its report, the counting transport, a local scan of
    the same containers command by command, None unless compare). wrap(transport) -> the
    transport the scan uses."""
    keys = Keys.make(tmp_path / "client")
    d = Sshd.start(tmp_path / "sshd", keys)
    try:
        kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
        text = "\n".join([
            "all:", "  hosts:", "    hv:",
            "      ansible_host: 127.0.0.1", f"      ansible_port: {d.port}", "      ansible_user: root",
            f"      ansible_ssh_private_key_file: {keys.private}", "      lxcfix_backend: lxc",
            f"      lxcfix_containers: [{', '.join(names)}]",
        ]) + "\n"
        entries = list(load(text, "inv.yaml").hosts)
        made = []
        connect = fleet.SshConnector(ssh.SshOptions(known_hosts=str(kh), ssh_config=None, allow_agent=False,
                                                    look_for_keys=False))

        def counting_connect(entry):
            t = Counting(wrap(connect(entry)))
            made.append(t)
            return t

        (r,) = fleet.scan_fleet(entries, connect=counting_connect, enter=connect.container)
        local = scan_host(Local(), Lxc(), names, probe=True, batch=False) if compare else None
        (t,) = made
        return r, t, local
    finally:
        d.stop()


def same_findings(r, local) -> bool:
    return judged(r) == {k: [(c, m.replace("localhost", "hv"), e, dv) for c, m, e, dv in v]
                         for k, v in judged(local).items()} or judged(r) == judged(local)


def test_fleet_scan_is_two_commands_per_host_and_finds_what_a_local_scan_finds(tmp_path, cts, env, monkeypatch):
    names = [c.name for c in cts]
    monkeypatch.setenv("HOME", str(tmp_path))
    # The remote host's /proc/devices is this machine's: its majors name no nvidia-uvm,
    # so compare with a local scan that reads the same file.
    monkeypatch.delenv("LXCFIX_PROC_DEVICES", raising=False)
    r, t, local = _fleet_scan(tmp_path, names, lambda t: t)
    assert r.error is None and r.notes == (), (r.error, r.notes)
    assert same_findings(r, local)
    assert t.calls["run"] == 2, t.calls  # the sweep, then every probe
    assert t.calls["read"] == t.calls["listdir"] == t.calls["isdir"] == 0, t.calls


class NoPython3:
    """A host without python3: the shell answers every `python3 ...` with 127."""

    def __init__(self, inner):
        self.inner, self.name, self.local = inner, inner.name, inner.local

    def run(self, argv, **kw):
        from lxcfix.model import Result

        if argv[0] == HOST_PYTHON:
            return Result(127, "", "sh: 1: python3: not found")
        return self.inner.run(argv, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_host_without_python3_is_read_command_by_command_and_says_so(tmp_path, cts, env, monkeypatch):
    names = [c.name for c in cts]
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LXCFIX_PROC_DEVICES", raising=False)
    r, t, local = _fleet_scan(tmp_path, names, NoPython3)
    assert r.error is None, r.error
    assert len(r.notes) == 1 and "read command by command" in r.notes[0] and "python3" in r.notes[0], r.notes
    assert same_findings(r, local)  # slower, not worse: the device program through bpftool
    assert t.calls["run"] > 2, t.calls


def test_a_host_of_20_running_containers_is_read_whole_in_two_commands(tmp_path, container_factory, tun, env,
                                                                       monkeypatch):
    """Issue 21, row 4: each probe (~15 KB) went into the sweep's argv, so from 9 running containers
    the command was "Argument list too long" and from 16 sshd dropped the connection (a 256 KiB
    packet): the host was LXF301 with none of its containers. The script and its request now go
    through stdin, the probe's script once."""
    from . import sshcount

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LXCFIX_PROC_DEVICES", raising=False)
    made = [container_factory([TUN_BIND] if i % 2 else [TUN_BIND, TUN_ALLOW]) for i in range(20)]
    names = [c.name for c in made]
    with sshcount.counting() as connections:
        r, t, _ = _fleet_scan(tmp_path, names, lambda t: t, compare=False)
    assert r.error is None and r.notes == (), (r.error, r.notes)
    assert [c.ct for c in r.containers] == names
    codes = {c.ct: {f.code for f in c.findings} for c in r.containers}
    for i, name in enumerate(names):
        if i % 2:  # probed inside: tun denied
            assert {"LXF100", "LXF200"} <= codes[name], (name, codes[name])
        else:
            assert not codes[name] - {"LXF111"}, (name, codes[name])
        assert "LXF301" not in codes[name]
    assert connections == {"hv": 1}
    assert t.calls["run"] <= 4 and t.calls["run"] == t.calls["run " + HOST_PYTHON] == 2, t.calls
    assert t.calls["read"] == t.calls["listdir"] == t.calls["isdir"] == 0, t.calls


def test_a_tenant_moving_its_init_does_not_hide_drift_from_a_fleet_scan(tmp_path, container_factory, monkeypatch):
    """Issue 21 row 3 over SSH: the sweep reads the program at the container's limit cgroup (and
    the tenant's cgroup below it, for the evidence) in the same two commands."""
    from lxcfix import bpf

    from .harness import COMMON_CONF
    from .hostile import CGROUP_RW, move_init_and_attach

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LXCFIX_PROC_DEVICES", raising=False)
    c = container_factory([*CGROUP_RW, TUN_ALLOW])
    other = container_factory([TUN_BIND, TUN_ALLOW])
    on_disk = [*CGROUP_RW, TUN_ALLOW, "lxc.cgroup2.devices.allow = c 10:232 rwm"]
    c.write_config(on_disk)  # edited, not restarted: LXF121
    with open(COMMON_CONF) as f:
        lines = [ln.partition("=") for ln in f.read().splitlines() + on_disk]
    # the tenant's program allows what the config on disk says
    shown = bpf.lxc_expected([(k.strip().endswith("allow"), v.strip()) for k, _, v in lines
                              if k.strip().startswith("lxc.cgroup2.devices.")])
    deeper = move_init_and_attach(c, shown)
    r, t, _ = _fleet_scan(tmp_path, [c.name, other.name], lambda t: t)
    assert r.error is None, r.error
    (mine,) = [x for x in r.containers if x.ct == c.name]
    f121 = [f for f in mine.findings if f.code == "LXF121"]
    assert f121 and "c 10:232 rwm" in f121[0].message, [(f.code, f.message) for f in mine.findings]
    assert any(deeper in e and "of its own" in e for e in f121[0].evidence), f121[0].evidence
    assert t.calls["run"] == 2, t.calls

