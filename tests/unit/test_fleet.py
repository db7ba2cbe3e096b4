"""Fleet logic with a fake connect(): host snapshots (RootDir) stand in for SSH hosts.

Real SSH is in tests/real/test_fleet.py; here: failures stay per host, bounds hold,
cluster members judge only their own containers, progress and order are right.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from lxcfix import fleet, ssh
from lxcfix.errors import BadInput
from lxcfix.inventory import CtAddress, HostEntry, load
from lxcfix.model import Result
from lxcfix.transport import ContainerExec, Local, RootDir

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


# ----------------------------------------------------------------- fake hosts


class FakeHost:
    """A RootDir host that can be slow, die, or count what is in flight."""

    def __init__(self, root: Path, name: str, fleet_state: Fleet, delay: float = 0.0):
        self.inner = RootDir(str(root), name=name)
        self.name = name
        self.fleet = fleet_state
        self.delay = delay
        self.closed = False
        self.reads_in_flight = 0
        self.peak_reads = 0
        self._lock = threading.Lock()

    def _maybe_fail(self, what: str):
        fail = self.fleet.fail_during.get(self.name)
        if fail is not None and what.startswith(fail[0]):
            raise fail[1]

    def run(self, argv, *, input=None, timeout=60, max_output=None) -> Result:
        self._maybe_fail("run " + argv[0])
        return self.inner.run(argv, input=input, timeout=timeout)

    def read(self, path: str) -> bytes:
        self._maybe_fail("read " + path)
        with self._lock:
            self.reads_in_flight += 1
            self.peak_reads = max(self.peak_reads, self.reads_in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            return self.inner.read(path)
        finally:
            with self._lock:
                self.reads_in_flight -= 1

    def listdir(self, path: str):
        self._maybe_fail("listdir " + path)
        return self.inner.listdir(path)

    def isdir(self, path: str) -> bool:
        return self.inner.isdir(path)

    local = False  # as an SSH host: its files are not on this machine

    def device_nodes(self, paths=None):
        return self.inner.device_nodes(paths)

    def local_path(self, path):
        raise OSError("not on this machine")

    def close(self):
        self.closed = True
        self.fleet.closed(self)


class Fleet:
    """connect(entry) over snapshot dirs; records hosts in flight and their peak."""

    def __init__(self, roots: dict[str, Path], delay: float = 0.0):
        self.roots = roots
        self.delay = delay
        self.unreachable: dict[str, Exception] = {}
        self.fail_during: dict[str, tuple[str, BaseException]] = {}
        self.in_flight = 0
        self.peak = 0
        self.made: dict[str, FakeHost] = {}
        self.connects: dict[str, int] = {}
        self.lock = threading.Lock()

    def connect(self, entry: HostEntry):
        with self.lock:
            self.connects[entry.name] = self.connects.get(entry.name, 0) + 1
        if entry.name in self.unreachable:
            raise self.unreachable[entry.name]
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        h = FakeHost(self.roots[entry.name], entry.name, self, self.delay)
        self.made[entry.name] = h
        return h

    def closed(self, h: FakeHost):
        with self.lock:
            self.in_flight -= 1


def lxc_host(tmp: Path, name: str, cts: list[str]) -> Path:
    """A plain LXC host snapshot with containers `cts` (copies of examples/lxc-healthy's vpn)."""
    root = tmp / name
    shutil.copytree(EXAMPLES / "lxc-healthy", root)
    shutil.rmtree(root / "var/lib/lxc")
    for ct in cts:
        d = root / "var/lib/lxc" / ct
        d.mkdir(parents=True)
        text = (EXAMPLES / "lxc-healthy/var/lib/lxc/vpn/config").read_text().replace("vpn", ct)
        (d / "config").write_text(text)
    return root


def pve_cluster_view(tmp: Path, name: str, hostname: str) -> Path:
    """What one member of a 2-node cluster sees: nodes/pve1/lxc/200,201 and nodes/pve2/lxc/202,203,
    /etc/pve/lxc empty (its own node's dir is under nodes/); `hostname` prints `hostname`."""
    root = tmp / name
    shutil.copytree(EXAMPLES / "pve-gpu-host", root)
    src = root / "etc/pve/lxc"
    for node, cts in (("pve1", ("200", "201")), ("pve2", ("202", "203"))):
        d = root / "etc/pve/nodes" / node / "lxc"
        d.mkdir(parents=True)
        for ct in cts:
            shutil.copy(src / f"{ct}.conf", d / f"{ct}.conf")
    shutil.rmtree(src)
    (root / ".lxcfix/hostname").write_text(hostname + ".example.org\n")
    return root


def entries(text: str) -> list[HostEntry]:
    return list(load(text, "fleet.yaml").hosts)


@pytest.fixture(autouse=True)
def _default_dirs(monkeypatch):
    monkeypatch.delenv("LXCFIX_PVE_DIR", raising=False)
    monkeypatch.delenv("LXCFIX_LXC_PATH", raising=False)


# ----------------------------------------------------------------- failures stay per host


def test_unreachable_host_is_lxf301_and_the_rest_completes(tmp_path):
    names = ["h1", "h2", "h3", "h4"]
    f = Fleet({n: lxc_host(tmp_path, n, ["vpn", "web"]) for n in names})
    f.unreachable["h2"] = ssh.ConnectFailed("connection refused by 10.0.0.2:22 (h2; 3 tries)")
    f.unreachable["h3"] = ssh.HostKeyUnknown(
        "host key for h3 is unknown (not in known_hosts); re-run with --accept-new-host-keys to trust it")
    calls = []
    main = threading.get_ident()
    reports = fleet.scan_fleet(entries("all:\n  hosts: {h1: , h2: , h3: , h4: }\n"), concurrency=2,
                               connect=f.connect,
                               progress=lambda h, d, t: calls.append((h, d, t, threading.get_ident() == main)))
    assert [r.host for r in reports] == names  # inventory order, whatever finished first
    ok = {r.host: r for r in reports if r.error is None}
    assert set(ok) == {"h1", "h4"}
    for r in ok.values():
        assert r.backend == "lxc" and [c.ct for c in r.containers] == ["vpn", "web"]
        assert r.facts is not None and r.findings == ()
    h2, h3 = reports[1], reports[2]
    assert (h2.backend, h2.facts, h2.containers) == ("unknown", None, ())
    assert h2.error == "connection refused by 10.0.0.2:22 (h2; 3 tries)"
    (finding,) = h2.findings
    assert (finding.code, finding.severity, finding.ct, finding.host) == ("LXF301", "error", "", "h2")
    assert "connection refused" in finding.message
    assert h3.error.startswith("host key for h3 is unknown (not in known_hosts)")
    assert [d for _, d, _, _ in calls] == [1, 2, 3, 4]
    assert {h for h, *_ in calls} == set(names) and all(t == 4 and on_main for _, _, t, on_main in calls)
    assert all(h.closed for h in f.made.values())


@pytest.mark.parametrize("where, exc, expected", [
    ("read /var/lib/lxc/web/config", ssh.ConnectionLost("connection to h1 lost while running cat"),
     "connection to h1 lost while running cat"),
    ("listdir /var/lib/lxc", RuntimeError("boom"), "scan failed: RuntimeError: boom"),
    ("run lxc-start", ssh.ConnectionLost("connection to h1 lost"), "connection to h1 lost"),
])
def test_failure_during_a_scan_is_that_hosts_lxf301(tmp_path, where, exc, expected):
    f = Fleet({n: lxc_host(tmp_path, n, ["vpn", "web"]) for n in ("h1", "h2")})
    f.fail_during["h1"] = (where, exc)
    r1, r2 = fleet.scan_fleet(entries("all:\n  hosts: {h1: , h2: }\n"), connect=f.connect)
    assert r1.error == expected and r1.findings[0].code == "LXF301" and r1.containers == ()
    assert r2.error is None and len(r2.containers) == 2
    assert f.made["h1"].closed and f.made["h2"].closed


def test_connect_raising_anything_is_contained(tmp_path):
    f = Fleet({"h1": lxc_host(tmp_path, "h1", ["vpn"]), "h2": lxc_host(tmp_path, "h2", ["vpn"])})
    f.unreachable["h1"] = ValueError("odd")
    r1, r2 = fleet.scan_fleet(entries("all:\n  hosts: {h1: , h2: }\n"), connect=f.connect)
    assert r1.error == "cannot connect: ValueError: odd" and r2.error is None


# ----------------------------------------------------------------- bounds


def test_concurrency_bound_across_hosts(tmp_path):
    names = [f"h{i}" for i in range(10)]
    f = Fleet({n: lxc_host(tmp_path, n, ["vpn"]) for n in names}, delay=0.03)
    text = "all:\n  hosts:\n" + "".join(f"    {n}:\n" for n in names)
    reports = fleet.scan_fleet(entries(text), concurrency=3, connect=f.connect)
    assert all(r.error is None for r in reports)
    assert f.peak == 3  # reached, never exceeded
    assert f.connects == {n: 1 for n in names}  # one connection per host


def test_concurrency_one_is_sequential(tmp_path):
    names = ["a", "b", "c"]
    f = Fleet({n: lxc_host(tmp_path, n, ["vpn"]) for n in names}, delay=0.01)
    fleet.scan_fleet(entries("all:\n  hosts: {a: , b: , c: }\n"), concurrency=1, connect=f.connect)
    assert f.peak == 1


def test_per_host_bound_and_container_order(tmp_path):
    cts = [f"ct{i}" for i in range(7)]
    f = Fleet({"h": lxc_host(tmp_path, "h", cts)}, delay=0.03)
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {h: }\n"), per_host=3, connect=f.connect)
    assert [c.ct for c in r.containers] == cts
    assert all(c.host == "h" for c in r.containers)
    assert 2 <= f.made["h"].peak_reads <= 3


def test_bad_arguments(tmp_path):
    with pytest.raises(BadInput, match="unique"):
        fleet.scan_fleet([HostEntry("a"), HostEntry("a")], connect=lambda e: None)
    with pytest.raises(BadInput, match="at least 1"):
        fleet.scan_fleet([HostEntry("a")], concurrency=0, connect=lambda e: None)
    assert fleet.scan_fleet([], connect=lambda e: None) == []


# ----------------------------------------------------------------- what is scanned


def test_explicit_containers_and_missing_one(tmp_path):
    f = Fleet({"h": lxc_host(tmp_path, "h", ["vpn", "web", "db"])})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts:\n    h: {lxcfix_containers: [web, gone]}\n"), connect=f.connect)
    assert [c.ct for c in r.containers] == ["web", "gone"]
    assert [x.code for x in r.containers[1].findings] == ["LXF131"]


def test_cluster_members_judge_only_their_own_containers(tmp_path):
    f = Fleet({"pve1": pve_cluster_view(tmp_path, "pve1", "pve1"),
               "pve2": pve_cluster_view(tmp_path, "pve2", "pve2")})
    r1, r2 = fleet.scan_fleet(entries("all:\n  hosts: {pve1: , pve2: }\n"), connect=f.connect)
    assert (r1.backend, r2.backend) == ("pve", "pve")
    assert [(c.ct, c.node) for c in r1.containers] == [("200", "pve1"), ("201", "pve1")]
    assert [(c.ct, c.node) for c in r2.containers] == [("202", "pve2"), ("203", "pve2")]
    assert r1.facts.host == "pve1" and r2.facts.host == "pve2"


def test_cluster_node_from_inventory_and_explicit_foreign_ct_skipped(tmp_path):
    # hostname says "weird", the inventory says pve2; 200 lives on pve1: not judged here
    f = Fleet({"b": pve_cluster_view(tmp_path, "b", "weird")})
    (r,) = fleet.scan_fleet(
        entries("all:\n  hosts:\n    b: {lxcfix_pve_node: pve2, lxcfix_containers: [200, 203]}\n"),
        connect=f.connect)
    assert [c.ct for c in r.containers] == ["203"]
    f2 = Fleet({"b": pve_cluster_view(tmp_path, "b2", "weird")})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {b: }\n"), connect=f2.connect)
    assert r.containers == () and r.error is None  # not a node of this cluster: nothing is its own


def test_cluster_node_name_from_etc_hostname_before_the_command(tmp_path):
    root = pve_cluster_view(tmp_path, "c", "pve1")  # `hostname` would say pve1 ...
    (root / "etc/hostname").write_text("pve2\n")  # ... /etc/hostname says pve2, and wins
    f = Fleet({"c": root})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {c: }\n"), connect=f.connect)
    assert [c.ct for c in r.containers] == ["202", "203"]


def test_local_pve_dir_containers_are_this_nodes(tmp_path):
    f = Fleet({"solo": EXAMPLES / "pve-gpu-host"})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {solo: }\n"), connect=f.connect)
    assert [c.ct for c in r.containers] == ["200", "201", "202", "203"]
    codes = {c.ct: sorted({x.code for x in c.findings}) for c in r.containers}
    assert codes["200"] == ["LXF101"] and codes["201"] == ["LXF100"]


def test_backend_from_inventory_overrides_detection(tmp_path):
    root = pve_cluster_view(tmp_path, "both", "pve1")
    shutil.copytree(EXAMPLES / "lxc-healthy/var/lib/lxc", root / "var/lib/lxc")
    f = Fleet({"both": root})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts:\n    both: {lxcfix_backend: lxc}\n"), connect=f.connect)
    assert r.backend == "lxc" and [c.ct for c in r.containers] == ["vpn", "web"]


# ----------------------------------------------------------------- transports per host and container


def test_ssh_connector_builds_from_the_entry(monkeypatch):
    made = []

    class FakeSsh:
        def __init__(self, name, **kw):
            self.name, self.kw = name, kw
            made.append(self)

        def connect(self):
            return self

        def close(self):
            pass

    monkeypatch.setattr(fleet, "Ssh", FakeSsh)
    (a, b, c) = entries("""
all:
  vars: {ansible_user: root, ansible_ssh_private_key_file: /k/id}
  hosts:
    a: {ansible_host: 10.0.0.1, ansible_port: 2222}
    b: {lxcfix_known_hosts: /k/kh, lxcfix_accept_new_host_keys: false}
    c: {ansible_connection: local}
""")
    connect = fleet.ssh_connector(known_hosts="/cli/kh", accept_new=True, ssh_config=None, max_sessions=3)
    ta, tb, tc = connect(a), connect(b), connect(c)
    assert ta.kw["hostname"] == "10.0.0.1" and ta.kw["port"] == 2222 and ta.kw["user"] == "root"
    oa, ob = ta.kw["options"], tb.kw["options"]
    assert ta.kw["key_files"] == ["/k/id"] and oa.known_hosts == "/cli/kh" and oa.accept_new is True
    assert oa.max_sessions == 3 and oa.ssh_config is None and ta.kw["known_hosts_extra"] == ()
    # the inventory's known_hosts is checked as well; accept-new still writes only the command line's
    assert tb.kw["hostname"] == "b" and tb.kw["known_hosts_extra"] == ("/k/kh",) and ob.accept_new is False
    assert ob.known_hosts == "/cli/kh"
    assert isinstance(tc, Local) and tc.name == "c"


def test_container_transport():
    from lxcfix.backends import Lxc, Proxmox

    host = Local(name="pve1")
    e = HostEntry("pve1", user="root", ct_ssh={"200": CtAddress("10.0.5.200", None, 2200)})
    t = fleet.container_transport(host, e, Proxmox(), "200", ssh_config=None)
    assert isinstance(t, ssh.Ssh) and t.name == "pve1/200" and t.dest == "10.0.5.200"
    assert t.port == 2200 and t.user == "root" and t.options.max_sessions == 2
    t2 = fleet.container_transport(host, e, Proxmox(), "201")
    assert isinstance(t2, ContainerExec) and t2.wrap(["true"]) == Proxmox().exec(host, "201").wrap(["true"])
    e_exec = HostEntry("pve1", container_access="exec", ct_ssh=e.ct_ssh)
    assert isinstance(fleet.container_transport(host, e_exec, Proxmox(), "200"), ContainerExec)
    e_ssh = HostEntry("h", container_access="ssh", ct_ssh=e.ct_ssh, source="inv.yaml:3")
    with pytest.raises(BadInput, match=r"inv.yaml:3: host h: lxcfix_container_access is ssh but .* CT 201"):
        fleet.container_transport(host, e_ssh, Proxmox(), "201")
    lxc = fleet.container_transport(host, HostEntry("h"), Lxc(lxcpath="/srv/lxc"), "web")
    assert lxc.wrap(["id"]) == Lxc(lxcpath="/srv/lxc").exec(host, "web").wrap(["id"])
    assert lxc.wrap(["id"])[:3] == ["lxc-attach", "-n", "web"]


# ----------------------------------------------------------------- ssh endpoint resolution (pure)


def test_resolve_ssh_config_and_inventory_precedence(tmp_path):
    import paramiko

    cfg = paramiko.SSHConfig.from_text("""
Host pve*
  HostName %h.lan
  Port 2222
  User admin
  IdentityFile ~/.ssh/pve_key
  ProxyJump bastion.example:22
  StrictHostKeyChecking accept-new
  UserKnownHostsFile /etc/lxcfix/kh /dev/null
  ConnectTimeout 4
Host ct*
  ProxyCommand lxc-attach -n %h -- /usr/sbin/sshd -i
  HostKeyAlias ct-alias
  IdentitiesOnly yes
""")
    ep = ssh.resolve("pve1", config=cfg)
    assert (ep.hostname, ep.port, ep.user) == ("pve1.lan", 2222, "admin")
    assert ep.key_files[0].endswith("/.ssh/pve_key") and not ep.key_files[0].startswith("~")
    assert ep.proxy_jump == "bastion.example:22" and ep.proxy_argv is None
    assert ep.accept_new is True and ep.connect_timeout == 4.0
    assert ep.known_hosts[-2:] == ("/etc/lxcfix/kh", "/dev/null") and ep.known_hosts_write == "/etc/lxcfix/kh"
    # the inventory (explicit options) wins, like `ssh -p -l -i`
    ep = ssh.resolve("pve1", port=22, user="root", key_files=["/k/id"], known_hosts="/k/kh", config=cfg)
    assert (ep.port, ep.user, ep.key_files[0]) == (22, "root", "/k/id")
    assert ep.known_hosts == ("/k/kh",) and ep.known_hosts_write == "/k/kh"
    ep = ssh.resolve("ct7", config=cfg)
    assert ep.proxy_argv == ("lxc-attach", "-n", "ct7", "--", "/usr/sbin/sshd", "-i")
    assert ep.host_key_name == "ct-alias" and ep.identities_only and not ep.accept_new
    ep = ssh.resolve("other", config=None)
    assert (ep.hostname, ep.port, ep.proxy_argv, ep.proxy_jump) == ("other", 22, None, None)


def test_explicit_missing_ssh_config_is_bad_input(tmp_path):
    t = ssh.Ssh("x", options=ssh.SshOptions(ssh_config=str(tmp_path / "nope")))
    with pytest.raises(BadInput, match="ssh config .*nope: no such file"):
        t.connect()
    with pytest.raises(BadInput, match="ssh config .*nope: no such file"):
        fleet.SshConnector(t.options)  # up front, before any host


def test_ssh_errors_are_unreachable_not_oserror():
    from lxcfix.errors import Unreachable

    for cls in (ssh.HostKeyUnknown, ssh.HostKeyChanged, ssh.AuthFailed, ssh.ConnectFailed, ssh.ConnectionLost):
        e = cls("why")
        assert isinstance(e, Unreachable) and not isinstance(e, OSError) and e.reason == "why"


# ----------------------------------------------------------------- probes follow lxcfix_ct_ssh


class ProbeOverSsh:
    """A container's own SSH, faked: answers the probe as if /dev/net/tun opened fine."""

    def __init__(self, name: str):
        self.name = name
        self.commands = []

    def run(self, argv, *, input=None, timeout=60, max_output=None) -> Result:
        self.commands.append(list(argv))
        return Result(0, "lxcfix-probe 1\nnode /dev/net/tun exists=1 char=1 major=10 minor=200 open=ok\nend\n", "")

    def read(self, path):
        raise FileNotFoundError(path)


def running_lxc_host(tmp: Path, name: str, cts: list[str]) -> Path:
    root = lxc_host(tmp, name, cts)
    (root / ".lxcfix/lxc-info").write_text("RUNNING\n")  # `lxc-info -s -H` for every container
    return root


class Connector:
    """Hosts from a Fleet, containers the way SshConnector decides (its Ssh faked by the test)."""

    def __init__(self, f: Fleet):
        self.f = f
        self.real = fleet.SshConnector(ssh.SshOptions(ssh_config=None))

    def __call__(self, entry):
        return self.f.connect(entry)

    def container(self, host, entry, backend, ct):
        return self.real.container(host, entry, backend, ct)


def test_probe_enters_a_container_over_its_own_ssh_when_the_inventory_says(tmp_path, monkeypatch):
    made = {}

    class FakeSsh(ProbeOverSsh):
        def __init__(self, name, **kw):
            super().__init__(name)
            self.kw = kw
            self.closed = False
            made[name] = self

        def close(self):
            self.closed = True

    monkeypatch.setattr(fleet, "Ssh", FakeSsh)
    f = Fleet({"h": running_lxc_host(tmp_path, "h", ["vpn", "web"])})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts:\n    h: {ansible_user: ops, lxcfix_ct_ssh: {web: 10.9.9.9:2222}}\n"),
                            connect=Connector(f))
    assert r.error is None
    by = {c.ct: c for c in r.containers}
    assert set(made) == {"h/web"}  # only the container the inventory names
    web = made["h/web"]
    assert (web.kw["hostname"], web.kw["port"], web.kw["user"]) == ("10.9.9.9", 2222, "ops")
    assert web.commands[0][:2] == ["sh", "-c"]  # the probe itself, not wrapped in lxc-attach
    assert web.closed  # with the host's scan
    assert [x.code for x in by["web"].findings if x.code == "LXF301"] == []
    # vpn was entered with lxc-attach on the host; the snapshot has no lxc-attach: its probe fails, alone
    (vpn_301,) = [x for x in by["vpn"].findings if x.code == "LXF301"]
    assert "probe in CT vpn failed" in vpn_301.message


def test_container_access_ssh_without_an_address_fails_that_container_only(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet, "Ssh", lambda name, **kw: ProbeOverSsh(name))
    f = Fleet({"h": running_lxc_host(tmp_path, "h", ["vpn", "web"])})
    text = "all:\n  hosts:\n    h: {lxcfix_container_access: ssh, lxcfix_ct_ssh: {web: 10.9.9.9}}\n"
    (r,) = fleet.scan_fleet(entries(text), connect=Connector(f))
    assert r.error is None
    by = {c.ct: c for c in r.containers}
    (vpn_301,) = [x for x in by["vpn"].findings if x.code == "LXF301"]
    assert "lxcfix_container_access is ssh but lxcfix_ct_ssh has no address for CT vpn" in vpn_301.message
    assert not [x for x in by["web"].findings if x.code == "LXF301"]


def test_unreachable_container_ssh_is_that_containers_lxf301(tmp_path):
    """A real Ssh to a closed loopback port: refused, for that container only."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    f = Fleet({"h": running_lxc_host(tmp_path, "h", ["vpn", "web"])})
    text = (f"all:\n  hosts:\n    h: {{lxcfix_ct_ssh: {{web: '127.0.0.1:{port}', vpn: '127.0.0.1:{port}'}},"
            " lxcfix_containers: [web]}\n")
    connector = Connector(f)
    connector.real = fleet.SshConnector(ssh.SshOptions(ssh_config=None, tries=1, allow_agent=False,
                                                       look_for_keys=False))
    (r,) = fleet.scan_fleet(entries(text), connect=connector, enter=connector.container)
    assert r.error is None and [c.ct for c in r.containers] == ["web"]
    (web_301,) = [x for x in r.containers[0].findings if x.code == "LXF301"]
    assert f"h/web: connection refused by 127.0.0.1:{port}" in web_301.message


def test_remote_calls_stay_small_and_without_probes_use_one_chunk(tmp_path, monkeypatch):
    """scan_host may fork worker processes for big offline batches; a live SSH connection must
    not travel there, so each call gets at most MAX_PER_CALL containers."""
    sizes = []
    real = fleet.scan_host

    def spy(t, backend, cts=None, style="auto", facts=None, probe=False, **kw):
        sizes.append(len(cts))
        return real(t, backend, cts, style, facts=facts, probe=probe, **kw)

    monkeypatch.setattr(fleet, "scan_host", spy)
    cts = [f"ct{i}" for i in range(7)]
    f = Fleet({"h": lxc_host(tmp_path, "h", cts)})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {h: }\n"), probe=False, per_host=4, connect=f.connect)
    assert sizes == [7] and [c.ct for c in r.containers] == cts  # no probes: one call
    sizes.clear()
    monkeypatch.setattr(fleet, "MAX_PER_CALL", 3)
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {h: }\n"), probe=False, connect=f.connect)
    assert sorted(sizes) == [2, 2, 3] and [c.ct for c in r.containers] == cts


def test_containers_whose_name_lxcfix_cannot_act_on_are_listed_escaped_as_lxf132(tmp_path):
    """Issue 21, row 6: 'a b', 'tëst' and a name with an ESC byte were left out without a word."""
    from lxcfix import repair
    from lxcfix.backends import Lxc

    odd = ["a b", "tëst", "e\x1b[31m"]
    root = lxc_host(tmp_path, "h", ["vpn", *odd])
    shown = ["a b", "e\\x1b[31m", "t\\xc3\\xabst"]
    f = Fleet({"h": root})
    (r,) = fleet.scan_fleet(entries("all:\n  hosts: {h: }\n"), probe=False, connect=f.connect)
    local = repair.scan(repair.Target(RootDir(str(root), name="h"), Lxc(), root=str(root)), None)
    for rep in (r, local):
        assert [c.ct for c in rep.containers] == ["vpn", *shown]
        for c in rep.containers[1:]:
            (x,) = c.findings
            assert x.code == "LXF132" and f"container '{c.ct}' not judged" in x.message and "\x1b" not in x.message
    # asked for by name, such a container is refused as bad input, its name escaped
    with pytest.raises(BadInput) as e:
        repair.scan(repair.Target(RootDir(str(root), name="h"), Lxc(), root=str(root)), ["e\x1b[31m"])
    assert "'e\\x1b[31m'" in str(e.value) and "\x1b" not in str(e.value)
