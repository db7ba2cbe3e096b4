"""fleetpool: how many worker processes a fleet scan gets, and that a scan in processes gives
what the thread path gives, host for host, in inventory order (here: ports nobody listens on,
so every host is an LXF301 report; the real tier has sshds and containers)."""

from __future__ import annotations

import socket

from lxcfix import fleet, fleetpool, ssh
from lxcfix.inventory import load


def test_workers_for():
    assert fleetpool.workers_for(1, cores=2) == 1
    assert fleetpool.workers_for(31, cores=2) == 1  # below 2 x HOSTS_PER_WORKER: one process
    assert fleetpool.workers_for(32, cores=2) == 2
    assert fleetpool.workers_for(1000, cores=2) == 2
    assert fleetpool.workers_for(1000, cores=64) == fleetpool.MAX_WORKERS
    assert fleetpool.workers_for(1000, cores=1) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hosts(n: int):
    port = _closed_port()
    lines = ["all:", "  vars:", "    ansible_host: 127.0.0.1", f"    ansible_port: {port}", "    ansible_user: root",
             "    lxcfix_backend: lxc", "  hosts:", *[f"    h{i}:" for i in range(n)]]
    return list(load("\n".join(lines) + "\n", "inv.yaml").hosts)


def test_processes_report_what_threads_report_in_inventory_order(tmp_path):
    hosts = _hosts(6)
    connect = fleet.ssh_connector(ssh.SshOptions(ssh_config=None, allow_agent=False, look_for_keys=False,
                                                 known_hosts=str(tmp_path / "known_hosts"), tries=1))
    seen = []
    many = fleet.scan_fleet(hosts, concurrency=4, connect=connect, enter=connect.container, workers=2,
                            progress=lambda h, done, total: seen.append((h, done, total)))
    one = fleet.scan_fleet(hosts, concurrency=4, connect=connect, enter=connect.container, workers=1)
    assert [r.host for r in many] == [h.name for h in hosts]
    assert [(r.error, [f.code for f in r.findings]) for r in many] == \
        [(r.error, [f.code for f in r.findings]) for r in one]
    assert all(r.error.startswith("connection refused by 127.0.0.1:") for r in many)
    assert sorted(h for h, _, _ in seen) == sorted(h.name for h in hosts)
    assert [d for _, d, _ in seen] == list(range(1, 7)) and {t for _, _, t in seen} == {6}


def test_what_cannot_cross_a_process_stays_in_threads():
    connect = fleet.ssh_connector(ssh.SshOptions(ssh_config=None))
    assert fleet._crosses(connect, None, False) and fleet._crosses(connect, connect.container, False)
    assert not fleet._crosses(connect, connect.container, True)  # keep_context: the audit's views
    assert not fleet._crosses(lambda e: None, None, False)  # any other connect
    assert not fleet._crosses(connect, lambda *a: None, False)
    accept = fleet.ssh_connector(ssh.SshOptions(ssh_config=None, accept_new=True))
    assert not fleet._crosses(accept, None, False)  # known_hosts is appended under this process's lock
