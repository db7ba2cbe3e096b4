"""A fleet scan spread over worker processes (lxcfix.fleetpool) on real sshds in front of real
LXC containers: the same report as the single-process path, and a host whose sshd dies, or a
worker process that dies, mid-scan is that host's LXF301 report, never a crashed scan."""

from __future__ import annotations

import json
import os
import signal
import threading

from lxcfix import fleet, report

from .sshd import write_known_hosts
from .test_fleet import codes, connector, inventory, local_codes

from .test_fleet import cts, home, keys, sshd_factory  # noqa: F401  (fixtures)


def _doc(reports) -> dict:
    """report.document's JSON without what differs between two scans of the same hosts (time)."""
    doc = json.loads(json.dumps(report.document("scan", reports)))
    for h in doc["hosts"]:
        h.pop("seconds", None)
    return doc


def test_worker_processes_give_the_single_process_report(tmp_path, keys, sshd_factory, cts):
    a, b = sshd_factory("a"), sshd_factory("b")
    kh = write_known_hosts(tmp_path / "known_hosts", a.known_hosts_line(), b.known_hosts_line())
    names = {f"pve{i}": (a if i % 2 else b).port for i in range(1, 9)}
    hosts = inventory(names, keys, kh, cts)
    done: list[tuple[str, int, int]] = []
    one = fleet.scan_fleet(hosts, concurrency=4, connect=connector(), workers=1)
    many = fleet.scan_fleet(hosts, concurrency=4, connect=connector(), workers=2,
                            progress=lambda h, n, total: done.append((h, n, total)))
    assert [r.host for r in many] == list(names)  # inventory order
    assert all(r.error is None for r in many), [r.error for r in many]
    assert _doc(many) == _doc(one)
    assert all(codes(r) == local_codes(cts) for r in many)
    assert sorted(h for h, _, _ in done) == sorted(names)  # progress once per host, in the parent
    assert [n for _, n, _ in done] == list(range(1, 9)) and {t for _, _, t in done} == {8}
    assert a.accepted() == b.accepted() == 8  # one connection per host, each scan


def test_sshd_killed_mid_scan_in_a_worker_is_reported(tmp_path, keys, sshd_factory, cts):
    a, b = sshd_factory("a"), sshd_factory("b")
    kh = write_known_hosts(tmp_path / "known_hosts", a.known_hosts_line(), b.known_hosts_line())
    names = {f"h{i}": (a if i % 2 else b).port for i in range(1, 9)}  # h1 a, h2 b, ...
    killed = threading.Event()

    def progress(host, done, total):
        if done == 1 and not killed.is_set():
            b.kill()  # the listener and its sessions, by PID: later b hosts cannot connect
            killed.set()

    reports = fleet.scan_fleet(inventory(names, keys, kh, cts), concurrency=2, connect=connector(),
                               workers=2, progress=progress)
    assert killed.is_set() and [r.host for r in reports] == list(names)
    lost = [r for r in reports if r.error]
    assert lost and all(names[r.host] == b.port for r in lost)
    assert all(r.findings[0].code == "LXF301" and r.containers == () for r in lost)
    assert all(("refused" in r.error or "lost" in r.error or "closed" in r.error) for r in lost), \
        [r.error for r in lost]
    expected = local_codes(cts)
    assert all(codes(r) == expected for r in reports if not r.error)
    assert all(r.error is None for r in reports if names[r.host] == a.port)


def test_a_killed_worker_process_fails_its_hosts_only(tmp_path, keys, sshd_factory, cts):
    from multiprocessing import forkserver

    from .sshd import descendants

    d = sshd_factory()
    kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
    names = [f"n{i}" for i in range(1, 9)]
    victims: list[int] = []

    def progress(host, done, total):
        if done == 2 and not victims:
            server = forkserver._forkserver._forkserver_pid
            workers = descendants(server) if server else []
            workers = [p for p in workers if _is_python(p)]
            if workers:
                victims.append(workers[0])
                os.kill(workers[0], signal.SIGKILL)

    reports = fleet.scan_fleet(inventory({n: d.port for n in names}, keys, kh, cts), concurrency=4,
                               connect=connector(), workers=2, progress=progress)
    assert victims, "no worker process found to kill"
    assert [r.host for r in reports] == names
    failed = [r for r in reports if r.error]
    assert all(r.error.startswith(f"scan failed: worker process {victims[0]} killed by signal 9")
               and r.findings[0].code == "LXF301" for r in failed), [r.error for r in failed]
    assert len(failed) <= 2  # at most the hosts it had in flight (2 slots each)
    expected = local_codes(cts)
    assert all(codes(r) == expected for r in reports if not r.error)


def _is_python(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"python" in f.read().split(b"\0")[0]
    except OSError:
        return False
