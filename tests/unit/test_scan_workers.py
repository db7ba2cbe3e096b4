"""A snapshot scan big enough for worker processes (scan.PARALLEL_MIN configs): the same
reports as one process, and the diffs computed by the workers only when they are shown."""

from __future__ import annotations

import os
import shutil
import threading
import time

from lxcfix import repair, report, scan

from .conftest import EXAMPLES


def _big_snapshot(tmp_path, n: int):
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    lxc = snap / "etc/pve/lxc"
    configs = sorted(p.read_bytes() for p in lxc.glob("*.conf"))
    for p in lxc.glob("*.conf"):
        p.unlink()
    for i in range(n):
        (lxc / f"{1000 + i}.conf").write_bytes(configs[i % len(configs)])
    return snap


def _doc(rep) -> dict:
    """The scan's JSON document, its timings out."""
    d = report.document("scan", [rep])
    for h in d["hosts"]:
        h["seconds"] = 0
    return d


def _alone(seconds: float = 15.0) -> bool:
    """Whether this process is down to one thread within `seconds`: an earlier SSH test's
    deadline thread ends once it has been idle for ssh._Deadlines.IDLE."""
    end = time.monotonic() + seconds
    while not scan.only_thread():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_worker_processes_give_one_process_s_reports_and_diffs_only_when_shown(tmp_path, monkeypatch):
    n = scan.PARALLEL_MIN
    snap = _big_snapshot(tmp_path, n)
    assert scan.workers_for(n) > 1 or len(os.sched_getaffinity(0)) == 1
    assert _alone(), f"an earlier test left threads running: {threading.enumerate()}"
    target = repair.open_target(str(snap), None)
    shown = repair.scan(target, None)  # worker processes, diffs made there
    hidden = repair.scan(target, None, diffs=False)  # a table: no diff made
    monkeypatch.setattr(scan, "PARALLEL_MIN", 10 ** 9)
    alone = repair.scan(target, None)  # one process
    planned = [c for c in hidden.containers if c.plan is not None and not c.plan.is_empty]
    assert planned and all("_diff" not in c.plan.__dict__ for c in planned)
    assert all("_diff" in c.plan.__dict__ for c in shown.containers if c.plan is not None and not c.plan.is_empty)

    assert _doc(shown) == _doc(alone) == _doc(hidden)  # a diff not made yet is made when asked for
    assert len(_doc(alone)["containers"]) == n


def test_with_another_thread_running_the_configs_are_analysed_in_this_process(tmp_path, monkeypatch):
    """fork() would copy only this thread: a lock the other one holds would stay held in
    the child. Same reports, no worker process."""
    snap = _big_snapshot(tmp_path, scan.PARALLEL_MIN)
    target = repair.open_target(str(snap), None)
    assert _alone(), f"an earlier test left threads running: {threading.enumerate()}"
    monkeypatch.setattr(scan, "PARALLEL_MIN", 10 ** 9)
    alone = _doc(repair.scan(target, None))
    monkeypatch.undo()

    def no_fork(*a, **k):
        raise AssertionError("forked worker processes with another thread running")

    monkeypatch.setattr(scan, "_analyze_in_processes", no_fork)
    release = threading.Event()
    other = threading.Thread(target=release.wait, name="other")
    other.start()
    try:
        assert not scan.only_thread()
        threaded = _doc(repair.scan(target, None))
    finally:
        release.set()
        other.join()
    assert threaded == alone and len(threaded["containers"]) == scan.PARALLEL_MIN
    assert scan.only_thread()
