"""ssh._Deadlines: one thread closes every channel whose request got no answer in time, and
ends once nothing is pending (a process done with SSH keeps no thread of lxcfix's: worker
processes may be forked again, scan.only_thread)."""

from __future__ import annotations

import threading
import time

import pytest

from lxcfix import ssh


class Chan:
    def __init__(self):
        self.closed = threading.Event()

    def close(self):
        self.closed.set()


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "lxcfix-ssh-deadlines"]


def _until(cond, seconds=5.0) -> bool:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def deadlines():
    d = ssh._Deadlines()
    d.IDLE = 0.05
    assert _until(lambda: not _threads())  # another test's thread has ended
    return d


def test_an_answered_request_leaves_no_thread_behind(deadlines):
    chan = Chan()
    pending = ssh._Pending(chan)
    deadlines.add(60, pending)
    assert _threads() == ["lxcfix-ssh-deadlines"]
    assert pending.finish() is True
    assert deadlines._heap == [] and deadlines._live == 0  # not kept until its deadline, 60 s away
    assert _until(lambda: not _threads())
    assert not chan.closed.is_set()


def test_an_unanswered_request_is_closed_at_its_deadline_and_the_thread_then_ends(deadlines):
    late, answered = Chan(), Chan()
    p_late, p_answered = ssh._Pending(late), ssh._Pending(answered)
    deadlines.add(0.1, p_late)
    deadlines.add(60, p_answered)
    assert late.closed.wait(5)
    assert p_late.finish() is False  # its reply came after the deadline: the caller raises
    assert _threads() and deadlines._live == 1  # the other one still waits
    assert p_answered.finish() is True
    assert _until(lambda: not _threads())
    assert not answered.closed.is_set() and deadlines._live == 0


def test_a_request_after_the_thread_ended_starts_it_again(deadlines):
    for _ in range(3):
        chan = Chan()
        deadlines.add(0.05, ssh._Pending(chan))
        assert chan.closed.wait(5)
        assert _until(lambda: not _threads())
    assert deadlines._live == 0


def test_many_requests_answered_from_many_threads_are_each_settled_once(deadlines):
    pendings = [ssh._Pending(Chan()) for _ in range(400)]
    for p in pendings:
        deadlines.add(30, p)
    workers = [threading.Thread(target=lambda part=pendings[i::8]: [p.finish() for p in part]) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert deadlines._live == 0 and deadlines._heap == []
    assert _until(lambda: not _threads())
