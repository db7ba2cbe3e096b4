"""Fleet repair over SSH (issue 19): `lxcfix apply/plan/diagnose/rollback --inventory`, each
host's transaction run on that host by the shipped agent, against real sshds playing the
hypervisors in front of real LXC containers. Each sshd gives its sessions that host's own
state dir and PATH (SetEnv), so a host's backups, journal and faults are its own, and a
host's tools (a faulty lxc-start, no python3 at all) are what that host has. Nothing is
mocked: the control is the real command line, the host side the real sshd and python3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import harness
from .cli import TUN_MOUNT
from .sshd import Keys, Sshd, lean_root_shell, write_known_hosts

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
# A host whose python3 is paused at one checkpoint of the agent's transaction: a sitecustomize
# (test-only; the production code has only Transaction.on_checkpoint) sets the hook as soon as
# the shipped lxcfix.transaction is imported, and waits there while the marker file exists.
PAUSE_SITE = r'''
import os, sys, threading, time
STEP, MARKER = os.environ["LXF_TEST_PAUSE"].split(":", 1)

def pause(name):
    if name != STEP or os.path.exists(MARKER + ".done"):  # once: a later rollback goes through
        return
    open(MARKER + ".done", "w").close()
    with open(MARKER, "w") as f:
        f.write("%d %s\n" % (os.getpid(), name))
    deadline = time.monotonic() + 90
    while os.path.exists(MARKER) and time.monotonic() < deadline:
        time.sleep(0.02)

def hook():
    while True:
        m = sys.modules.get("lxcfix.transaction")
        if m is not None and hasattr(m, "Transaction"):
            m.Transaction.on_checkpoint = staticmethod(pause)
            return
        time.sleep(0.005)

threading.Thread(target=hook, daemon=True).start()
'''


class Fleet:
    """Hosts (an sshd each) and the inventory naming them; run(*args) is the lxcfix command line."""

    def __init__(self, tmp: Path, keys: Keys):
        self.tmp, self.keys = tmp, keys
        self.hosts: dict[str, Sshd] = {}
        self.cts: dict[str, list[str]] = {}
        self.pythons: dict[str, str] = {}
        self.known_hosts = tmp / "known_hosts"
        self.inventory = tmp / "fleet inventory.yaml"  # a space: printed commands must quote it
        self.home = tmp / "home"
        self.home.mkdir(exist_ok=True)

    def add(self, name: str, cts, path: str = HOST_PATH, python: str | None = None, **env) -> Sshd:
        """python: the host's ansible_python_interpreter (none: lxcfix's default, /usr/bin/python3).
        A name added again replaces that host: its old sshd is stopped first (else it outlives the test)."""
        if name in self.hosts:
            self.hosts.pop(name).stop()
        state = self.tmp / f"state-{name}"
        d = Sshd.start(self.tmp / f"sshd-{name}", self.keys,
                       env={"PATH": path, "LXCFIX_STATE_DIR": str(state),
                            "LXCFIX_LOCK_DIR": str(self.tmp / f"lock-{name}"), **env})
        self.hosts[name], self.cts[name] = d, [c.name for c in cts]
        if python is not None:
            self.pythons[name] = python
        self.write()
        return d

    def state(self, name: str) -> Path:
        return self.tmp / f"state-{name}"

    def journal(self, name: str) -> list[dict]:
        path = self.state(name) / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def write(self) -> None:
        write_known_hosts(self.known_hosts, *(d.known_hosts_line() for d in self.hosts.values()))
        lines = ["all:", "  vars:", "    ansible_host: 127.0.0.1", "    ansible_user: root",
                 f"    ansible_ssh_private_key_file: {self.keys.private}",
                 f"    lxcfix_known_hosts: {self.known_hosts}", "    lxcfix_backend: lxc", "  hosts:"]
        for name, d in self.hosts.items():
            python = f", ansible_python_interpreter: {self.pythons[name]}" if name in self.pythons else ""
            lines.append(f"    {name}: {{ansible_port: {d.port}, lxcfix_containers: [{', '.join(self.cts[name])}]{python}}}")
        self.inventory.write_text("\n".join(lines) + "\n")

    def env(self) -> dict:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "LXCFIX_"))}
        e.update(HOME=str(self.home), NO_COLOR="1", COLUMNS="300",
                 LXCFIX_STATE_DIR=str(self.tmp / "control-state"))  # the control's own: never written here
        return e

    def run(self, *args: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lxcfix", *args, "--inventory", str(self.inventory)],
                              env=self.env(), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, **kw)

    def stop(self) -> None:
        for d in self.hosts.values():
            d.stop()


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path, Keys.make(tmp_path / "client"))
    try:
        yield f
    finally:
        f.stop()


def shim(tmp: Path, name: str, body: str) -> str:
    d = tmp / f"shim-{name}"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(d)


# lxc-start that starts the new config, then puts the old device program back (the tun denied
# again): the probe inside still gets EPERM, so that host's verify fails.
FAULTY_START = ('/usr/bin/lxc-start "$@" || exit $?\n'
                'name=; while [ $# -gt 0 ]; do [ "$1" = -n ] && name=$2; shift; done\n'
                'sleep 0.3; /usr/bin/lxc-cgroup -n "$name" devices.deny "c 10:200 rwm" >/dev/null 2>&1\n'
                'exit 0\n')


def broken(container_factory):
    """A running container given /dev/net/tun without an allow rule: EPERM inside."""
    c = container_factory([TUN_MOUNT])
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    return c


# ----------------------------------------------------------------- one host, one container


def test_plan_dry_run_apply_and_diagnose_of_a_fleet_host_run_there(fleet, container_factory, tun):
    c = broken(container_factory)
    fleet.add("hv1", [c])
    before = Path(c.config_path).read_bytes()

    r = fleet.run("plan", "--ct", c.name, "--host", "hv1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "+lxc.cgroup2.devices.allow = /dev/net/tun rwm" in r.stdout

    r = fleet.run("apply", "--ct", c.name, "--host", "hv1", "--dry-run")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "steps apply would take:" in r.stdout and "restart" in r.stdout
    assert "check: every step's precondition holds: apply would go ahead" in r.stdout
    assert Path(c.config_path).read_bytes() == before and not fleet.journal("hv1")

    r = fleet.run("diagnose", "--ct", c.name, "--host", "hv1", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    commands = [cmd for x in doc["containers"] for cause in x["causes"] for cmd in cause["commands"]]
    assert any(cmd.startswith(f"lxcfix apply --ct {c.name} --inventory ") and "--host hv1" in cmd
               for cmd in commands), commands

    pid = c.init_pid()
    r = fleet.run("apply", "--ct", c.name, "--host", "hv1", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"hv1: CT {c.name}: applied (verified); backup {fleet.state('hv1')}/backups/" in r.stdout
    assert "1 host(s): 1 applied" in r.stdout
    assert harness.open_errno(c, "/dev/net/tun") == "ok" and c.init_pid() != pid
    assert [e["event"] for e in fleet.journal("hv1")][-1] == "done"  # that host's own journal
    assert not (fleet.tmp / "control-state").exists()  # nothing of it on the control node

    r = fleet.run("diagnose", "--ct", c.name, "--host", "hv1")
    assert r.returncode == 0 and "no problems found" in r.stdout, r.stdout + r.stderr
    r = fleet.run("apply", "--ct", c.name, "--host", "hv1", "--yes")  # idempotent
    assert r.returncode == 0 and "nothing to change" in r.stdout, r.stdout + r.stderr


def test_rollback_through_the_inventory_restores_that_hosts_backup(fleet, container_factory, tun):
    c = broken(container_factory)
    fleet.add("hv1", [c])
    before = Path(c.config_path).read_bytes()
    assert fleet.run("apply", "--ct", c.name, "--host", "hv1", "--yes").returncode == 0
    assert Path(c.config_path).read_bytes() != before

    r = fleet.run("rollback", "--ct", c.name, "--host", "hv1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before
    assert c.running() and harness.open_errno(c, "/dev/net/tun") == "EPERM"


def test_ct_with_an_inventory_needs_one_host(fleet, container_factory, tun):
    c = broken(container_factory)
    fleet.add("hv1", [c])
    fleet.add("hv2", [c])
    r = fleet.run("apply", "--ct", c.name, "--yes")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "--host must name one host" in r.stderr
    assert sum(d.accepted() for d in fleet.hosts.values()) == 0


# ----------------------------------------------------------------- rolling over hosts


def test_rolling_apply_stops_at_the_first_host_whose_verify_fails(fleet, container_factory, tun):
    cts = [broken(container_factory) for _ in range(3)]
    fleet.add("hv1", [cts[0]])
    fleet.add("hv2", [cts[1]], path=shim(fleet.tmp, "lxc-start", FAULTY_START) + ":" + HOST_PATH)
    fleet.add("hv3", [cts[2]])
    before = {c.name: Path(c.config_path).read_bytes() for c in cts}

    r = fleet.run("apply", "--all", "--yes")

    assert r.returncode == 4, r.stdout + r.stderr
    assert harness.open_errno(cts[0], "/dev/net/tun") == "ok"  # hv1: applied and verified
    assert Path(cts[1].config_path).read_bytes() == before[cts[1].name]  # hv2: rolled back there
    assert cts[1].running()
    assert [e["event"] for e in fleet.journal("hv2")][-2:] == ["failed", "rolled-back"]
    assert Path(cts[2].config_path).read_bytes() == before[cts[2].name]  # hv3: never started
    assert fleet.hosts["hv3"].accepted() == 0
    assert "3 host(s): 1 rolled back, 1 applied, 1 not tried" in r.stdout, r.stdout
    summary = r.stdout.rsplit("3 host(s):", 1)[1]
    assert "hv2  rolled back" in summary and "hv3  not tried" in summary and "the run stopped after hv2" in summary


def test_max_fail_lets_the_run_go_on_past_a_failed_host(fleet, container_factory, tun):
    cts = [broken(container_factory) for _ in range(2)]
    fleet.add("hv1", [cts[0]], path=shim(fleet.tmp, "lxc-start", FAULTY_START) + ":" + HOST_PATH)
    fleet.add("hv2", [cts[1]])
    r = fleet.run("apply", "--all", "--yes", "--max-fail", "1", "--json")
    assert r.returncode == 4, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [(h["host"], h["status"]) for h in doc["hosts"]] == [("hv1", "rolled-back"), ("hv2", "applied")]
    assert harness.open_errno(cts[1], "/dev/net/tun") == "ok"


def test_an_unreachable_host_mid_run_is_listed_and_the_others_are_changed(fleet, container_factory, tun):
    cts = [broken(container_factory) for _ in range(3)]
    for i, c in enumerate(cts, 1):
        fleet.add(f"hv{i}", [c])
    fleet.hosts["hv2"].kill()  # down by the time its turn comes
    before = Path(cts[1].config_path).read_bytes()

    r = fleet.run("apply", "--all", "--yes")

    assert r.returncode == 3, r.stdout + r.stderr
    assert harness.open_errno(cts[0], "/dev/net/tun") == "ok"
    assert harness.open_errno(cts[2], "/dev/net/tun") == "ok"
    assert Path(cts[1].config_path).read_bytes() == before
    assert "3 host(s): 1 unreachable, 2 applied" in r.stdout, r.stdout
    assert "hv2  unreachable" in r.stdout


def test_dry_run_over_the_fleet_shows_every_hosts_diff_and_steps_and_changes_nothing(
        fleet, container_factory, tun):
    cts = [broken(container_factory) for _ in range(2)]
    fleet.add("hv1", [cts[0]])
    fleet.add("hv2", [cts[1]])
    before = {c.name: Path(c.config_path).read_bytes() for c in cts}
    r = fleet.run("apply", "--all", "--dry-run")
    assert r.returncode == 1, r.stdout + r.stderr
    for name, c in zip(("hv1", "hv2"), cts):
        assert f"{name}: CT {c.name}: apply would go ahead" in r.stdout
    assert r.stdout.count("steps apply would take:") == 2
    assert "2 host(s): 2 would apply" in r.stdout
    assert {c.name: Path(c.config_path).read_bytes() for c in cts} == before
    assert not fleet.journal("hv1") and not fleet.journal("hv2")


# ----------------------------------------------------------------- what must change nothing


def test_a_changed_host_key_is_refused_and_nothing_is_written(fleet, container_factory, tun):
    c = broken(container_factory)
    d = fleet.add("hv1", [c])
    write_known_hosts(fleet.known_hosts, f"[127.0.0.1]:{d.port} {OTHER_KEY}")
    kh = fleet.known_hosts.read_text()
    before = Path(c.config_path).read_bytes()
    r = fleet.run("apply", "--ct", c.name, "--host", "hv1", "--yes")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "CHANGED" in r.stdout and "hv1  unreachable" in r.stdout
    assert d.accepted() == 0 and fleet.known_hosts.read_text() == kh
    assert Path(c.config_path).read_bytes() == before


def test_a_host_without_python3_is_refused_in_one_line(fleet, container_factory, tun):
    c = broken(container_factory)
    empty = fleet.tmp / "no-python"
    empty.mkdir()
    fleet.add("hv1", [c], path=str(empty), python=str(empty / "python3"))  # the interpreter it names: absent
    before = Path(c.config_path).read_bytes()
    with lean_root_shell(fleet.tmp):
        r = fleet.run("apply", "--ct", c.name, "--host", "hv1", "--yes")
    assert r.returncode == 3, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if "python3" in line]
    assert lines and lines[0] == ("hv1: python3 is not installed there (lxcfix runs its transaction on the host "
                                  "with the host's python3: apt install python3); nothing changed"), r.stdout
    assert "hv1  no python3" in r.stdout
    assert Path(c.config_path).read_bytes() == before and not fleet.journal("hv1")


# ----------------------------------------------------------------- the client killed mid-change


def test_client_killed_between_write_and_restart_then_rollback_restores(fleet, container_factory, tun):
    c = broken(container_factory)
    site = fleet.tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSE_SITE)
    marker = fleet.tmp / "paused"
    fleet.add("hv1", [c], PYTHONPATH=str(site), LXF_TEST_PAUSE=f"written:{marker}")
    before = Path(c.config_path).read_bytes()

    client = subprocess.Popen([sys.executable, "-m", "lxcfix", "apply", "--ct", c.name, "--host", "hv1", "--yes",
                               "--inventory", str(fleet.inventory)], env=fleet.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert client.poll() is None and time.monotonic() < deadline, client.communicate()
        time.sleep(0.02)
    agent_pid = int(marker.read_text().split()[0])
    client.send_signal(signal.SIGKILL)  # between the write and the restart
    client.wait()

    written = Path(c.config_path).read_bytes()
    assert written != before  # the new bytes, whole: the write is done, the restart not yet
    assert "lxc.cgroup2.devices.allow = /dev/net/tun rwm" in written.decode()
    marker.unlink()  # the agent on the host goes on without its client
    deadline = time.monotonic() + 120
    while os.path.exists(f"/proc/{agent_pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{agent_pid}")
    assert Path(c.config_path).read_bytes() in (before, written)

    r = fleet.run("rollback", "--ct", c.name, "--host", "hv1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before
    assert c.running()


def test_host_fix_through_the_inventory_is_checked_on_the_host_and_changes_nothing(fleet, container_factory):
    """host-fix's check run on a fleet host (the agent plans the unit from that host's facts); the
    real install is not run here: it would put a unit into this machine's systemd."""
    c = container_factory([])
    fleet.add("hv1", [c])
    unit = Path("/etc/systemd/system/lxcfix-nvidia-nodes.service")
    existed = unit.exists()
    r = fleet.run("host-fix", "--host", "hv1", "--dry-run")
    assert r.returncode in (1, 4), r.stdout + r.stderr  # would install, or (no systemd here) would stop
    assert "steps host-fix would take:" in r.stdout and "nvidia-modprobe" in r.stdout
    assert unit.exists() == existed and not fleet.journal("hv1")


# ----------------------------------------------------------------- a fleet scan reads the containers' own files


def test_a_fleet_scan_reads_a_containers_own_files_in_its_sweep_and_no_link_out(fleet, container_factory):
    """The static checks of the container's files (LXF230 here) over SSH, as on this machine: the
    reader runs in the sweep's process on the host, each path resolved inside the container's
    root (config.toml -> /etc/passwd is the container's passwd, never the host's)."""
    c = container_factory()
    etc = os.path.join(c.rootfs, "etc", "nvidia-container-runtime")
    os.makedirs(etc)
    os.symlink("/../../../../etc/passwd", os.path.join(etc, "config.toml"))
    fleet.add("hv1", [c])
    r = fleet.run("scan", "--host", "hv1", "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (ct,) = json.loads(r.stdout)["containers"]
    found = {f["code"]: f for f in ct["findings"]}
    assert "LXF230" in found, ct["findings"]
    evidence = " ".join(found["LXF230"]["evidence"])
    assert "nobody:x:65534" in evidence and "daemon:x:1:1" not in evidence  # the container's, not the host's
    local = subprocess.run([sys.executable, "-m", "lxcfix", "diagnose", "--ct", c.name, "--json"],
                           env={**fleet.env(), "LXCFIX_STATE_DIR": str(fleet.tmp / "local-state")},
                           capture_output=True, text=True, timeout=120)
    assert sorted(f["code"] for f in json.loads(local.stdout)["containers"][0]["findings"]) == \
        sorted(found), local.stdout


def test_a_host_lost_mid_change_stops_the_run_and_rollback_restores_it(fleet, container_factory, tun):
    """hv1 dies (its sshd, the session and the agent, SIGKILLed) between the write and the restart:
    the client reports it lost mid-run (its state is only in its journal), starts no other host,
    and once hv1 is back `rollback` through the inventory restores its config."""
    c1, c2 = broken(container_factory), broken(container_factory)
    site = fleet.tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSE_SITE)
    marker = fleet.tmp / "paused"
    fleet.add("hv1", [c1], PYTHONPATH=str(site), LXF_TEST_PAUSE=f"written:{marker}")
    fleet.add("hv2", [c2])
    before1, before2 = Path(c1.config_path).read_bytes(), Path(c2.config_path).read_bytes()

    client = subprocess.Popen([sys.executable, "-m", "lxcfix", "apply", "--all", "--yes", "--inventory",
                               str(fleet.inventory)], env=fleet.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert client.poll() is None and time.monotonic() < deadline, client.communicate()
        time.sleep(0.02)
    dead = fleet.hosts["hv1"]
    dead.kill()
    out, err = client.communicate(timeout=180)

    assert client.returncode == 3, out + err
    summary = out.rsplit("2 host(s):", 1)[-1]
    assert "hv1  lost mid-run" in summary and "hv2  not tried" in summary, out
    assert fleet.hosts["hv2"].accepted() == 0 and Path(c2.config_path).read_bytes() == before2
    written = Path(c1.config_path).read_bytes()
    assert written != before1 and "lxc.cgroup2.devices.allow = /dev/net/tun rwm" in written.decode()

    dead.stop()
    fleet.add("hv1", [c1])  # the host back (a new sshd; the same state dir, so the same journal)
    r = fleet.run("rollback", "--ct", c1.name, "--host", "hv1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(c1.config_path).read_bytes() == before1 and c1.running()
