"""Fleet scans over real SSH: a throwaway sshd on 127.0.0.1 plays the remote hypervisor in
front of real LXC containers made by the harness; containers reached over their own SSH
through `lxc-attach ... sshd -i` (no network at all). Nothing is mocked: host keys, logins,
refused ports and killed servers are the real thing, and the sshd log is the witness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import fleet, ssh
from lxcfix.backends import Lxc
from lxcfix.inventory import load
from lxcfix.scan import scan_host
from lxcfix.transport import Local

from . import sshcount
from .sshd import (
    Keys,
    SilentListener,
    Sshd,
    closed_port,
    container_proxy_argv,
    container_sshd,
    write_known_hosts,
)

TUN_BIND = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
TUN_ALLOW = "lxc.cgroup2.devices.allow = c 10:200 rwm"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


# ----------------------------------------------------------------- fixtures


@pytest.fixture
def keys(tmp_path) -> Keys:
    return Keys.make(tmp_path / "client")


@pytest.fixture
def sshd_factory(tmp_path, keys):
    made: list[Sshd] = []

    def make(name: str = "a") -> Sshd:
        d = Sshd.start(tmp_path / f"sshd-{name}", keys)
        made.append(d)
        return d

    try:
        yield make
    finally:
        for d in made:
            d.stop()


@pytest.fixture
def cts(container_factory, tun):
    """Two real containers: `broken` is given /dev/net/tun without an allow rule, `ok` is allowed it."""
    broken = container_factory([TUN_BIND])
    ok = container_factory([TUN_BIND, TUN_ALLOW])
    assert broken.bpf_attached() and ok.bpf_attached()
    return broken, ok


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """$HOME in tmp_path: ~/.ssh (the user's known_hosts accept-new may write) is the test's own."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture
def connections(monkeypatch):
    """SSH connections made during the test, by Ssh name (tests/real/sshcount.py)."""
    return sshcount.patch(monkeypatch)


def inventory(hosts: dict[str, int], keys: Keys, known_hosts: Path, containers, **extra) -> list:
    """name -> port, all at 127.0.0.1, as an Ansible inventory text run through inventory.load."""
    lines = [
        "all:",
        "  vars:",
        "    ansible_host: 127.0.0.1",
        "    ansible_user: root",
        f"    ansible_ssh_private_key_file: {keys.private}",
        f"    lxcfix_known_hosts: {known_hosts}",
        "    lxcfix_backend: lxc",
        f"    lxcfix_containers: [{', '.join(c.name for c in containers)}]",
        *[f"    {k}: {v}" for k, v in extra.items()],
        "  hosts:",
        *[f"    {name}: {{ansible_port: {port}}}" for name, port in hosts.items()],
    ]
    return list(load("\n".join(lines) + "\n", "test-inventory.yaml").hosts)


NO_AGENT = ssh.SshOptions(ssh_config=None, allow_agent=False, look_for_keys=False)


def connector(**kw):
    """Only the test's key and known_hosts: no agent, no ~/.ssh of whoever runs the tests."""
    return fleet.ssh_connector(NO_AGENT, **kw)


def codes(report) -> dict[str, list[str]]:
    return {c.ct: sorted({f.code for f in c.findings}) for c in report.containers}


def local_codes(containers) -> dict[str, list[str]]:
    """The same containers scanned on this machine directly (probing them when scan_host can)."""
    return codes(scan_host(Local(), Lxc(), [c.name for c in containers], probe=True))


# ----------------------------------------------------------------- host keys


def test_unknown_host_key_is_refused_by_default(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts")
    (r,) = fleet.scan_fleet(inventory({"pve1": d.port}, keys, kh, cts), connect=connector())
    assert r.error.startswith(f"host key for pve1 (127.0.0.1:{d.port}) is unknown (not in known_hosts); "
                              "re-run with --accept-new-host-keys to trust it"), r.error
    assert [f.code for f in r.findings] == ["LXF301"] and r.containers == () and r.facts is None
    assert d.accepted() == 0  # never logged in
    assert kh.read_text() == ""  # and nothing was trusted


def test_changed_host_key_is_refused_even_with_accept_new(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", f"[127.0.0.1]:{d.port} {OTHER_KEY}")
    before = kh.read_text()
    (r,) = fleet.scan_fleet(inventory({"pve1": d.port}, keys, kh, cts),
                            connect=connector(accept_new=True, known_hosts=str(kh)))
    assert r.error.startswith(f"host key for pve1 (127.0.0.1:{d.port}) CHANGED"), r.error
    assert "man-in-the-middle" in r.error and r.findings[0].code == "LXF301"
    assert d.accepted() == 0
    assert kh.read_text() == before


def test_accept_new_adds_the_key_once_and_scans(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts")
    hosts = inventory({"pve1": d.port, "pve2": d.port, "pve3": d.port}, keys, kh, cts)
    reports = fleet.scan_fleet(hosts, concurrency=3, connect=connector(accept_new=True, known_hosts=str(kh)))
    assert [r.error for r in reports] == [None, None, None]
    assert kh.read_text() == d.known_hosts_line() + "\n"  # appended once, though 3 hosts raced for it
    # now known: the strict default scans it (the inventory's lxcfix_known_hosts is that file)
    (r,) = fleet.scan_fleet(hosts[:1], connect=connector())
    assert r.error is None and codes(r) == codes(reports[0])


def test_accept_new_key_and_auth_failure_is_not_retried_nor_recorded(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts")
    stranger = Keys.make(tmp_path / "stranger")
    (r,) = fleet.scan_fleet(
        inventory({"pve1": d.port}, stranger, kh, cts, lxcfix_accept_new_host_keys="true"),
        connect=connector(accept_new=True, known_hosts=str(kh)))
    assert r.error == f"authentication failed for root@pve1 (127.0.0.1:{d.port})", r.error
    assert d.wait_log("Connection closed by authenticating user root") == 1
    time.sleep(0.5)
    assert d.log_text().count("Connection closed by authenticating user root") == 1  # one try only
    assert kh.read_text() == ""  # the key was new, but no login came of it: nothing recorded


def test_inventory_known_hosts_is_checked_never_written(tmp_path, home, keys, sshd_factory, cts):
    """accept-new writes the command line's known_hosts (else the user's), never the path an
    inventory names: that file is only read."""
    d = sshd_factory()
    inv_kh = tmp_path / "inventory-chosen" / "known_hosts"  # neither the file nor its dir exists
    cli_kh = write_known_hosts(tmp_path / "cli_known_hosts")
    hosts = inventory({"pve1": d.port}, keys, inv_kh, cts, lxcfix_accept_new_host_keys="true")
    (r,) = fleet.scan_fleet(hosts, connect=connector(accept_new=True, known_hosts=str(cli_kh)))
    assert r.error is None, r.error
    assert cli_kh.read_text() == d.known_hosts_line() + "\n"
    assert not inv_kh.parent.exists()
    # no --known-hosts: the user's own file (~/.ssh/known_hosts), still not the inventory's
    (r,) = fleet.scan_fleet(hosts, connect=connector(accept_new=True))
    assert r.error is None, r.error
    assert (home / ".ssh/known_hosts").read_text() == d.known_hosts_line() + "\n"
    assert not inv_kh.parent.exists()
    # and a key the inventory's file does hold is checked: a strict scan with that file passes
    inv_kh.parent.mkdir()
    write_known_hosts(inv_kh, d.known_hosts_line())
    (home / ".ssh/known_hosts").unlink()
    (r,) = fleet.scan_fleet(hosts, connect=connector())
    assert r.error is None, r.error
    assert not (home / ".ssh/known_hosts").exists()


def test_inventory_accept_new_alone_trusts_nothing(tmp_path, home, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = tmp_path / "inv" / "known_hosts"
    (r,) = fleet.scan_fleet(inventory({"pve1": d.port}, keys, kh, cts, lxcfix_accept_new_host_keys="true"),
                            connect=connector())
    assert r.error.startswith(f"host key for pve1 (127.0.0.1:{d.port}) is unknown"), r.error
    assert r.error.endswith("lxcfix_accept_new_host_keys in the inventory alone trusts no key: "
                            "the command line must say --accept-new-host-keys"), r.error
    assert d.accepted() == 0
    assert not kh.parent.exists() and not (home / ".ssh").exists()


# ----------------------------------------------------------------- real scans, failures per host


def test_remote_scan_matches_a_local_scan(tmp_path, keys, sshd_factory, cts, connections):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    (r,) = fleet.scan_fleet(inventory({"hv": d.port}, keys, kh, cts), connect=connector())
    broken, ok = cts
    assert r.error is None and r.backend == "lxc" and r.facts.cgroup_layout == "v2"
    assert r.facts.char_major("misc") == 10 and "/dev/net/tun" in r.facts.nodes
    assert [c.ct for c in r.containers] == [broken.name, ok.name]
    assert "LXF100" in codes(r)[broken.name]
    assert [f for f in r.containers[1].findings if f.severity == "error"] == []
    assert codes(r) == local_codes(cts)  # over SSH, lxcfix sees what it sees locally
    assert connections == {"hv": 1}


def test_closed_port_is_lxf301_and_the_others_complete(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    dead = closed_port()
    start = time.monotonic()
    r1, r2, r3 = fleet.scan_fleet(inventory({"ok1": d.port, "gone": dead, "ok2": d.port}, keys, kh, cts),
                                  connect=connector())
    assert time.monotonic() - start < 20  # bounded retries
    assert r2.error == f"connection refused by 127.0.0.1:{dead} (gone (127.0.0.1:{dead}); 3 tries)"
    assert [f.code for f in r2.findings] == ["LXF301"]
    assert r1.error is None and r3.error is None and codes(r1) == codes(r3) == local_codes(cts)


def test_sshd_killed_after_the_first_host(tmp_path, keys, sshd_factory, cts):
    a, b = sshd_factory("a"), sshd_factory("b")
    kh = write_known_hosts(tmp_path / "known_hosts", a.known_hosts_line(), b.known_hosts_line())
    killed = threading.Event()
    order = []
    inner = connector()

    def progress(host, done, total):
        order.append(host)
        if done == 1:
            b.kill()  # by PID: the listener and every child
            killed.set()

    def connect(entry):
        if entry.name != "a1":
            assert killed.wait(30)  # the pool's worker would otherwise start b1 before we kill
        return inner(entry)

    reports = fleet.scan_fleet(inventory({"a1": a.port, "b1": b.port, "a2": a.port}, keys, kh, cts),
                               concurrency=1, progress=progress, connect=connect)
    assert order[0] == "a1"
    a1, b1, a2 = reports
    assert b1.error is not None and b1.error.startswith(f"connection refused by 127.0.0.1:{b.port}"), b1.error
    assert b1.findings[0].code == "LXF301"
    assert a1.error is None and a2.error is None and codes(a1) == codes(a2) == local_codes(cts)
    assert b.accepted() == 0 and a.accepted() == 2


def test_connection_killed_mid_scan(tmp_path, keys, sshd_factory, cts):
    """The server dies after the host is connected and facts are being read: that host is
    LXF301 'connection ... lost', the other host (another sshd) completes."""
    a, b = sshd_factory("a"), sshd_factory("b")
    kh = write_known_hosts(tmp_path / "known_hosts", a.known_hosts_line(), b.known_hosts_line())
    inner = connector()

    def connect(entry):
        t = inner(entry)
        if entry.name == "victim":
            t.run(["true"])  # connected and working ...
            b.kill()  # ... then the server and its session processes die
        return t

    victim, other = fleet.scan_fleet(inventory({"victim": b.port, "other": a.port}, keys, kh, cts),
                                     concurrency=2, connect=connect)
    assert "connection to victim lost" in victim.error, victim.error
    assert victim.findings[0].code == "LXF301" and victim.containers == ()
    assert other.error is None and codes(other) == local_codes(cts)


# ----------------------------------------------------------------- many hosts, one connection each


def test_many_hosts_one_connection_each_and_concurrency_bound(tmp_path, keys, sshd_factory, cts, connections):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    names = [f"pve{i}" for i in range(1, 7)]
    inner = connector(max_sessions=4)
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    transports = []

    class Tracked:
        """Counts hosts between connect and close: what `concurrency` bounds."""

        def __init__(self, t):
            self.t = t
            self.name = t.name

        def __getattr__(self, attr):
            return getattr(self.t, attr)

        def close(self):
            with lock:
                state["now"] -= 1
            self.t.close()

    def connect(entry):
        t = inner(entry)
        transports.append(t)
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        return Tracked(t)

    reports = fleet.scan_fleet(inventory({n: d.port for n in names}, keys, kh, cts),
                               concurrency=3, per_host=2, connect=connect)
    assert [r.host for r in reports] == names
    assert all(r.error is None for r in reports)
    expected = local_codes(cts)
    assert all(codes(r) == expected for r in reports)
    assert connections == {n: 1 for n in names}  # one SSH connection per host ...
    assert all(t.connections == 1 and t.attempts == 1 for t in transports)
    assert d.accepted() == 6  # ... as the server saw it
    assert 2 <= state["peak"] <= 3


# ----------------------------------------------------------------- ssh config: ProxyJump


def test_proxyjump_from_ssh_config(tmp_path, keys, sshd_factory, connections):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""
Host target
  HostName 127.0.0.1
  Port {d.port}
  User root
  IdentityFile {keys.private}
  IdentitiesOnly yes
  ProxyJump bastion
Host bastion
  HostName 127.0.0.1
  Port {d.port}
  User root
  IdentityFile {keys.private}
  IdentitiesOnly yes
""")
    t = ssh.Ssh("target", options=ssh.SshOptions(ssh_config=str(cfg), known_hosts=str(kh)))
    try:
        r = t.run(["sh", "-c", "echo $SSH_CONNECTION"])
        assert r.ok, r
        assert r.stdout.split()[2] == "127.0.0.1"
        assert t.read("/proc/devices").startswith(b"Character devices:")
    finally:
        t.close()
    assert d.accepted() == 2  # the bastion's login, then the target's, through the bastion
    assert connections == {"target": 1, "bastion": 1}  # one connection each


# ----------------------------------------------------------------- a container over its own SSH


@pytest.fixture
def ssh_ct(container_factory, keys):
    """A container with no network whose only way in is `lxc-attach -- sshd -i` (a pipe)."""
    c = container_factory(start=False)
    hostkey = container_sshd(c.rootfs, keys, hostname=f"{c.name}-inside")
    c.start()
    r = c.attach(["ls", "/sys/class/net"])
    assert r.ok and r.stdout.split() == ["lo"], r  # loopback only: SSH can only come over the pipe
    return c, hostkey


def test_container_over_its_own_ssh_proxycommand(tmp_path, keys, ssh_ct):
    c, hostkey = ssh_ct
    kh = write_known_hosts(tmp_path / "known_hosts", f"{c.name} {hostkey}")
    t = ssh.Ssh(f"hv/{c.name}", hostname=c.name, user="root", key_files=[str(keys.private)],
                options=replace(NO_AGENT, known_hosts=str(kh)), proxy_argv=container_proxy_argv(c.name))
    try:
        r = t.run(["cat", "/etc/hostname"])
        assert r == type(r)(0, f"{c.name}-inside\n", "")
        net = t.run(["ls", "/sys/class/net"])
        assert net.ok and net.stdout.split() == ["lo"]
        assert t.read("/etc/hostname") == f"{c.name}-inside\n".encode()  # a file read inside the container
        assert t.listdir("/etc/ssh/lxf")[:1] == ["ssh_host_ed25519_key"]
        results = []
        threads = [threading.Thread(target=lambda: results.append(t.run(["echo", "multiplexed"]).stdout))
                   for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert results == ["multiplexed\n"] * 6
        assert t.connections == 1
    finally:
        t.close()


def test_container_ssh_unknown_key_refused(tmp_path, keys, ssh_ct):
    c, _ = ssh_ct
    kh = write_known_hosts(tmp_path / "known_hosts")
    t = ssh.Ssh("ct", hostname=c.name, user="root", key_files=[str(keys.private)],
                options=replace(NO_AGENT, known_hosts=str(kh)), proxy_argv=container_proxy_argv(c.name))
    with pytest.raises(ssh.HostKeyUnknown, match=r"^host key for ct \(proxy lxc-attach\) is unknown"):
        t.connect()
    t.close()


def test_container_ssh_from_inventory_and_ssh_config(tmp_path, keys, ssh_ct):
    """lxcfix_ct_ssh names the container; ~/.ssh/config-style ProxyCommand gets there."""
    c, hostkey = ssh_ct
    kh = write_known_hosts(tmp_path / "known_hosts", f"{c.name} {hostkey}")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host lxf-*\n  ProxyCommand {' '.join(container_proxy_argv('%h'))}\n  IdentitiesOnly yes\n")
    (entry,) = load(f"""
all:
  hosts:
    hv:
      ansible_connection: local
      ansible_user: root
      ansible_ssh_private_key_file: {keys.private}
      lxcfix_known_hosts: {kh}
      lxcfix_ct_ssh: {{{c.name}: "root@{c.name}"}}
""", "ct.yaml").hosts
    t = fleet.container_transport(Local(name="hv"), entry, Lxc(), c.name, ssh_config=str(cfg))
    try:
        assert isinstance(t, ssh.Ssh)
        r = t.run(["cat", "/etc/hostname"])
        assert r.ok and r.stdout == f"{c.name}-inside\n", r
    finally:
        t.close()
    # the same container through the host's tools instead: the same answer
    local_entry = type(entry)("hv", container_access="exec")
    t2 = fleet.container_transport(Local(name="hv"), local_entry, Lxc(), c.name)
    assert t2.run(["cat", "/etc/hostname"]).stdout == f"{c.name}-inside\n"


def test_fleet_probe_goes_over_the_containers_own_ssh(tmp_path, keys, sshd_factory, container_factory, tun,
                                                     connections):
    """The hypervisor over SSH, and the container named in lxcfix_ct_ssh probed over ITS OWN sshd
    (reached with a ProxyCommand from an ssh config): the probe's EPERM is the same as lxc-attach's."""
    d = sshd_factory()
    c = container_factory([TUN_BIND], start=False)
    hostkey = container_sshd(c.rootfs, keys, hostname=f"{c.name}-inside")
    c.start()
    assert c.bpf_attached()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line(), f"{c.name} {hostkey}")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host lxf-*\n  ProxyCommand {' '.join(container_proxy_argv('%h'))}\n")
    hosts = inventory({"hv": d.port}, keys, kh, [c], lxcfix_container_access="ssh",
                      lxcfix_ct_ssh=f"{{{c.name}: root@{c.name}}}")
    conn = connector(ssh_config=str(cfg))
    (r,) = fleet.scan_fleet(hosts, connect=conn, enter=conn.container)  # the run's SSH options, for containers too
    assert r.error is None, r.error
    assert "LXF200" in codes(r)[c.name]  # open() gave EPERM inside, seen through the container's sshd
    assert codes(r) == local_codes([c])
    assert connections == {"hv": 1, f"hv/{c.name}": 1}


# ---- the command line: lxcfix scan --inventory


def _inventory_file(tmp_path, hosts: dict[str, int], keys: Keys, known_hosts: Path, containers) -> Path:
    text = "\n".join([
        "all:", "  vars:", "    ansible_host: 127.0.0.1", "    ansible_user: root",
        f"    ansible_ssh_private_key_file: {keys.private}", f"    lxcfix_known_hosts: {known_hosts}",
        "    lxcfix_backend: lxc", f"    lxcfix_containers: [{', '.join(c.name for c in containers)}]",
        "  hosts:", *[f"    {name}: {{ansible_port: {port}}}" for name, port in hosts.items()],
    ]) + "\n"
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lxcfix", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1", "SSH_AUTH_SOCK": ""}, stdin=subprocess.DEVNULL)


def test_cli_scan_inventory_json_prometheus_and_exit_codes(tmp_path, keys, sshd_factory, cts):
    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    dead = closed_port()
    inv = _inventory_file(tmp_path, {"ok1": d.port, "gone": dead}, keys, kh, cts)
    r = _cli("scan", "--inventory", str(inv), "--json", "--ssh-config", "/dev/null")
    assert r.returncode == 1, r.stderr  # findings on ok1 win over the unreachable host
    doc = json.loads(r.stdout)
    assert [h["host"] for h in doc["hosts"]] == ["ok1", "gone"]
    gone = doc["hosts"][1]
    assert "connection refused" in gone["error"] and [f["code"] for f in gone["findings"]] == ["LXF301"]
    broken, ok = cts
    by_ct = {c["ct"]: {f["code"] for f in c["findings"]} for c in doc["containers"]}
    assert {"LXF100", "LXF200"} <= by_ct[broken.name] and by_ct[ok.name] == set()
    assert doc["summary"]["unreachable"] == 1

    r = _cli("scan", "--inventory", str(inv), "--format", "prometheus", "--ssh-config", "/dev/null")
    assert 'lxcfix_host_up{host="gone"} 0' in r.stdout and 'lxcfix_host_up{host="ok1"} 1' in r.stdout
    assert f'lxcfix_findings{{host="ok1",ct="{broken.name}",code="LXF200",severity="error"}} 1' in r.stdout

    r = _cli("scan", "--inventory", str(inv), "--host", "gone", "--json", "--ssh-config", "/dev/null")
    assert r.returncode == 3  # unreachable and nothing else to report

    r = _cli("scan", "--inventory", str(inv), "--host", "nosuch")
    assert r.returncode == 2 and "no host or group 'nosuch'" in r.stderr


def test_cli_bad_ssh_config_is_bad_input_before_any_host(tmp_path, keys):
    """A missing or garbage --ssh-config is the admin's input: exit 2 with the reason, and no
    host is contacted (the listener sees no connection), not every host "unreachable" (exit 3)."""
    listener = SilentListener()
    try:
        kh = write_known_hosts(tmp_path / "known_hosts")
        inv = _inventory_file(tmp_path, {"h1": listener.port}, keys, kh, [])
        garbage = tmp_path / "garbage_config"
        garbage.write_text("Host *\n  this is not an ssh config\n")
        missing = tmp_path / "missing_config"
        for cfg, why in ((missing, f"ssh config {missing}: no such file"),
                         (garbage, f"ssh config {garbage}:2: unknown keyword 'this'")):
            r = _cli("scan", "--inventory", str(inv), "--ssh-config", str(cfg), "--json")
            assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
            assert why in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert listener.accepted == 0
    finally:
        listener.close()
