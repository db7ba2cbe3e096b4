"""Containers named with a space, a non-ASCII letter or an escape byte (issue 21, row 6).

LXC runs them (`lxc-start -n 'a b'`); lxcfix used to leave them out of the scan's JSON, table
and notes without a word, and the scan said clean. Every container is listed now: one whose
name lxcfix cannot act on is an LXF132 finding saying why, its name escaped for display.

The containers live in a private lxcpath (LXCFIX_LXC_PATH), so a scan of "every container"
sees this test's own and no one else's."""

from __future__ import annotations

import json
import os

import pytest

from lxcfix import fleet, ssh
from lxcfix.bounded import excerpt
from lxcfix.inventory import load

from . import harness
from .cli import lxcfix
from .sshd import Keys, Sshd, write_known_hosts

TUN_BIND = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"


class Private(harness.Container):
    """A harness container in another lxcpath: every lxc-* command gets -P."""

    def __init__(self, lxcpath: str, name: str):
        super().__init__(name, rootfs=os.path.join(lxcpath, name, "rootfs"))
        self.lxcpath = lxcpath
        self.dir = os.path.join(lxcpath, name)
        self.config_path = os.path.join(self.dir, "config")
        self.log_path = os.path.join(self.dir, "lxc.log")

    def start(self, timeout: float = 10) -> None:
        r = harness.sh(["lxc-start", "-n", self.name, "-P", self.lxcpath, "-l", "INFO", "-o", self.log_path],
                       timeout=timeout)
        if not r.ok or not self.wait("RUNNING", timeout):
            raise harness.HarnessError(f"lxc-start {self.name!r} failed rc={r.rc}: {r.stderr.strip()}\n"
                                       f"{self.log_errors()}")

    def wait(self, state: str, timeout: float = 10) -> bool:
        return harness.sh(["lxc-wait", "-n", self.name, "-P", self.lxcpath, "-s", state, "-t",
                           str(int(max(1, timeout)))], timeout=timeout + 5).ok

    def state(self) -> str:
        r = harness.sh(["lxc-info", "-n", self.name, "-P", self.lxcpath, "-s", "-H"])
        return r.stdout.strip() if r.ok else "UNKNOWN"

    def init_pid(self) -> int:
        r = harness.sh(["lxc-info", "-n", self.name, "-P", self.lxcpath, "-p", "-H"], check=True)
        return int(r.stdout.strip())

    def attach(self, argv, timeout: float = 30):
        return harness.sh(["lxc-attach", "-n", self.name, "-P", self.lxcpath, "--", *argv], timeout=timeout)

    def destroy(self) -> None:
        if self.destroyed:
            return
        try:
            if self.running():
                harness.sh(["lxc-stop", "-k", "-n", self.name, "-P", self.lxcpath], timeout=15)
                self.wait("STOPPED", 10)
        finally:
            for d in self.cgroup_dirs():
                harness.rmdir_cgroup(d)
            harness.safe_rmtree(self.dir)
            self.destroyed = True


@pytest.fixture
def odd(tmp_path, tun, env, monkeypatch):
    """A private lxcpath with running containers named 'lxf-ID a b', 'tëst-ID' and
    'lxf-ID-<ESC>[31m', and a plainly named one (tun without a rule: LXF100/LXF200)."""
    lxcpath = str(tmp_path / "lxc")
    os.makedirs(lxcpath)
    monkeypatch.setenv("LXCFIX_LXC_PATH", lxcpath)
    env["LXCFIX_LXC_PATH"] = lxcpath
    rid = harness.RUN_ID
    names = [f"lxf-{rid} a b", f"tëst-{rid}", f"lxf-{rid}-\x1b[31m", f"lxf-{rid}-plain"]
    made = []
    try:
        for name in names:
            c = Private(lxcpath, name)
            made.append(c)
            harness.make_rootfs(c.rootfs)
            c.write_config([TUN_BIND])
            c.start()
            assert c.running() and c.attach(["true"]).ok, name  # LXC runs and enters each of them
        assert made[-1].bpf_attached()
        yield lxcpath, names
    finally:
        for c in made:
            c.destroy()


def check_listed(doc: dict, names: list[str]) -> None:
    by_ct = {c["ct"]: c for c in doc["containers"]}
    *strange, plain = names
    assert sorted(by_ct) == sorted([plain] + [excerpt(n, 200) for n in strange]), sorted(by_ct)
    for name in strange:
        c = by_ct[excerpt(name, 200)]
        (f,) = c["findings"]
        assert f["code"] == "LXF132" and "not judged" in f["message"] and excerpt(name, 200) in f["message"]
        assert "\x1b" not in json.dumps(c, ensure_ascii=False)
    codes = {f["code"] for f in by_ct[plain]["findings"]}
    assert {"LXF100", "LXF200"} <= codes, codes  # the others are still read and probed


def test_a_scan_lists_every_container_and_escapes_the_names_it_cannot_act_on(odd, env):
    lxcpath, names = odd
    r = lxcfix(env, "scan", "--json")
    assert r.returncode == 1, r.stderr
    check_listed(json.loads(r.stdout), names)
    table = lxcfix(env, "scan")
    assert table.returncode == 1, table.stderr
    assert "\x1b" not in table.stdout and "LXF132" in table.stdout
    for name in names:
        assert excerpt(name, 200) in table.stdout, name


def test_a_fleet_scan_lists_them_too(odd, tmp_path, monkeypatch):
    lxcpath, names = odd
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LXCFIX_PROC_DEVICES", raising=False)
    keys = Keys.make(tmp_path / "client")
    d = Sshd.start(tmp_path / "sshd", keys)
    try:
        kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
        text = "\n".join([
            "all:", "  hosts:", "    hv:",
            "      ansible_host: 127.0.0.1", f"      ansible_port: {d.port}", "      ansible_user: root",
            f"      ansible_ssh_private_key_file: {keys.private}", "      lxcfix_backend: lxc",
            f"      lxcfix_lxc_path: {lxcpath}",
        ]) + "\n"
        connect = fleet.SshConnector(ssh.SshOptions(known_hosts=str(kh), ssh_config=None, allow_agent=False,
                                                    look_for_keys=False))
        (r,) = fleet.scan_fleet(list(load(text, "inv.yaml").hosts), connect=connect, enter=connect.container)
    finally:
        d.stop()
    assert r.error is None and r.notes == (), (r.error, r.notes)
    check_listed({"containers": [{"ct": c.ct, "findings": [f.to_json() for f in c.findings]}
                                 for c in r.containers]}, names)
