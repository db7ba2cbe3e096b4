"""Check mode is the transaction run without its effects (issue 23): Transaction.check()
tests every step's precondition, in order, and its Verdict carries the error the real
run() raises at that step; nothing is written, created, locked or backed up. Each case
is checked both ways: the verdict, then the run, on the same data."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from lxcfix import api, repair, transaction
from lxcfix.errors import BadInput, CannotWrite, LxcfixError, Refused, StateError
from lxcfix.liveplan import LiveOps
from lxcfix.transaction import (
    Backup, Backups, Expect, Journal, Live, Lock, StateDir, Status, Step, Transaction, Verdict, Write,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pve-gpu-host"


@pytest.fixture
def snap(tmp_path, monkeypatch) -> Path:
    dst = tmp_path / "snap"
    shutil.copytree(EXAMPLE, dst)
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    return dst


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def snapshot_tx(snap: Path, ct: str = "200") -> Transaction:
    """The transaction `lxcfix apply --root SNAP --ct CT --no-restart` runs."""
    target = repair.open_target(str(snap))
    rep, c = repair.one(target, ct, "auto", editable=True)
    return repair.apply_transaction(target, c, rep.facts, restart=False)


def same_as_the_run(verdict: Verdict, make_tx) -> LxcfixError:
    """The real run of a fresh transaction raises what the verdict says, before acting."""
    assert not verdict.ok and verdict.error is not None
    with pytest.raises(LxcfixError) as raised:
        make_tx().run()
    assert type(raised.value) is type(verdict.error)
    assert str(raised.value) == str(verdict.error)
    assert int(raised.value.exit_code) == verdict.exit_code
    return raised.value


def test_ok_verdict_changes_nothing(snap, tmp_path):
    before = tree(snap)
    v = snapshot_tx(snap).check()
    assert v.ok and v.exit_code == 0 and v.error is None and v.step is None
    assert any(s.startswith("back up to") for s in v.steps)
    assert v.to_json() == {"ok": True, "step": None, "exit_code": 0, "error": None, "error_class": None}
    assert tree(snap) == before and not (tmp_path / "state").exists()


def test_locked_config_same_verdict_as_the_run(snap, tmp_path):
    conf = snap / "etc/pve/lxc/200.conf"
    conf.write_bytes(b"lock: backup\n" + conf.read_bytes())
    before = tree(snap)
    v = snapshot_tx(snap).check()
    assert isinstance(v.error, Refused) and v.exit_code == 2 and "locked (backup)" in v.message
    assert v.step.startswith("refuse on 'lock:'")
    same_as_the_run(v, lambda: snapshot_tx(snap))
    assert tree(snap) == before and not (tmp_path / "state").exists()


def test_config_changed_since_the_plan(snap, tmp_path):
    tx, again = snapshot_tx(snap), snapshot_tx(snap)
    conf = snap / "etc/pve/lxc/200.conf"
    conf.write_bytes(conf.read_bytes() + b"# edited by hand\n")
    edited = conf.read_bytes()
    v = tx.check()
    assert isinstance(v.error, Refused) and v.exit_code == 2 and "changed since it was planned" in v.message
    assert v.step.startswith("check /etc/pve/lxc/200.conf still has digest")
    same_as_the_run(v, lambda: again)
    assert conf.read_bytes() == edited and not (tmp_path / "state").exists()


def test_symlinked_state_dir(snap, tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "state")
    before = tree(snap)
    v = snapshot_tx(snap).check()
    assert isinstance(v.error, StateError) and v.exit_code == 3 and "refusing to follow it" in v.message
    assert v.step.startswith("back up to")
    same_as_the_run(v, lambda: snapshot_tx(snap))
    assert list(outside.iterdir()) == [] and tree(snap) == before


def test_symlinked_journal(snap, tmp_path):
    (tmp_path / "state").mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, tmp_path / "state" / "journal.jsonl")
    v = snapshot_tx(snap).check()
    assert isinstance(v.error, StateError) and "journal" in v.message and "refusing to follow it" in v.message
    same_as_the_run(v, lambda: snapshot_tx(snap))
    assert victim.read_text() == "keep\n" and not (tmp_path / "state" / "backups").exists()


@dataclass
class Vfs:
    f_bsize: int = 4096
    f_frsize: int = 4096
    f_blocks: int = 16
    f_bfree: int = 0
    f_bavail: int = 0
    f_files: int = 1000
    f_ffree: int = 1000
    f_favail: int = 1000
    f_flag: int = 0
    f_namemax: int = 255


def full_disk_under(monkeypatch, top: Path, **vfs) -> None:
    """fstatvfs says the filesystem is full (or read-only) for directories under `top`."""
    real = os.fstatvfs

    def fake(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(top)):
            return Vfs(**vfs)
        return real(fd)

    monkeypatch.setattr(transaction.os, "fstatvfs", fake)


def test_full_state_dir(snap, tmp_path, monkeypatch):
    # The state dir does not exist yet: its parent (tmp_path) is where it would be made. The
    # config's directory is on the same full "disk" here: the backup's check comes first.
    full_disk_under(monkeypatch, tmp_path)
    v = snapshot_tx(snap).check()
    assert isinstance(v.error, StateError) and v.exit_code == 3
    assert "No space left on device" in v.message and "nothing changed" in v.message
    # the first step that needs room there: the snapshot's own lock in the state dir (issue 21 row 8), else the backup
    assert v.step.startswith(("back up to", "lock ")) and "/state/" in v.step
    same_as_the_run(v, lambda: snapshot_tx(snap))
    assert not (tmp_path / "state").exists()


def test_read_only_config_dir_is_cannot_write(snap, tmp_path, monkeypatch):
    full_disk_under(monkeypatch, snap / "etc", f_bavail=100, f_flag=os.ST_RDONLY)
    before = tree(snap)
    v = snapshot_tx(snap).check()
    assert isinstance(v.error, CannotWrite) and v.exit_code == 3
    assert "cannot write /etc/pve/lxc/200.conf: Read-only file system" in v.message
    same_as_the_run(v, lambda: snapshot_tx(snap))
    assert tree(snap) == before


def test_lock_held_by_another(tmp_path):
    lock = tmp_path / "lock" / "pve-config-200.lock"
    lock.parent.mkdir()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        def make():
            return Transaction("apply", [Lock(str(lock))], None, {})
        v = make().check()
        assert isinstance(v.error, Refused) and "holds" in v.message and v.step == f"lock {lock}"
        same_as_the_run(v, make)
    finally:
        os.close(fd)
    assert make().check().ok  # free again


def test_lock_check_creates_nothing(tmp_path):
    lock = tmp_path / "run" / "lock" / "x.lock"
    assert Transaction("t", [Lock(str(lock))], None, {}).check().ok
    assert not (tmp_path / "run").exists()


@dataclass
class FakeBackend:
    state: str = "stopped"

    def status(self, t, ct) -> str:
        return self.state


class FakeChange:
    def __init__(self, ops: LiveOps):
        self.ops, self.ct, self.done = ops, "200", []

    def run(self):  # never reached: the check refuses first
        raise AssertionError("acted")


def test_live_change_on_a_stopped_container_and_one_liveplan_refuses(tmp_path):
    refused = LiveOps(allow=("c 10:200 rwm",), refuse="removing a bind mount needs a start")

    def make(state: str, ops: LiveOps):
        path = tmp_path / "200.conf"
        path.write_bytes(b"arch: amd64\n")
        return Transaction("apply", [Status(FakeBackend(state), None, "200", need_running=True),
                                     Write(str(path), b"arch: amd64\n", b"arch: amd64\nx: 1\n"),
                                     Live(FakeChange(ops))], None, {})

    v = make("stopped", LiveOps(allow=("c 10:200 rwm",))).check()
    assert isinstance(v.error, Refused) and "is not running" in v.message
    same_as_the_run(v, lambda: make("stopped", LiveOps(allow=("c 10:200 rwm",))))
    v = make("running", refused).check()
    assert isinstance(v.error, BadInput) and v.message == "--live cannot do this change: " + refused.refuse
    assert v.step.startswith("change the running CT 200")
    # the real run refuses there before anything is written (checked first), not after the write
    same_as_the_run(v, lambda: make("running", refused))
    assert (tmp_path / "200.conf").read_bytes() == b"arch: amd64\n"


class Boom(Step):
    changes = False

    def describe(self) -> str:
        return "boom"

    def check(self, tx) -> None:
        raise OSError(5, "Input/output error")

    def do(self, tx) -> None:
        raise AssertionError("acted")


def test_an_unexpected_error_in_a_check_is_the_runs_state_error():
    v = Transaction("apply", [Boom()], None, {}).check()
    assert isinstance(v.error, StateError) and v.exit_code == 3 and v.step == "boom"
    assert "failed before changing anything" in v.message
    same_as_the_run(v, lambda: Transaction("apply", [Boom()], None, {}))


def test_the_first_failing_step_is_the_verdict(tmp_path):
    """A digest that moved and a state dir that is a symlink: the digest's step comes first."""
    path = tmp_path / "f"
    path.write_bytes(b"now\n")
    os.symlink(tmp_path, tmp_path / "state")
    state = StateDir(str(tmp_path / "state"))
    make = lambda: Transaction("t", [Expect(str(path), "0" * 40), Backup(Backups(state, "x"), b"now\n", "1" * 40)],
                               Journal(state), {})
    v = make().check()
    assert isinstance(v.error, Refused) and v.step.startswith("check ")
    same_as_the_run(v, make)


def test_nested_transaction_steps_are_checked(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"now\n")
    inner = Transaction("inner", [Expect(str(path), "0" * 40)], None, {})
    v = Transaction("outer", [inner], None, {}).check()
    assert isinstance(v.error, Refused) and v.step.startswith("check ")


def test_api_check_mode_raises_what_the_fix_raises(snap):
    conf = snap / "etc/pve/lxc/200.conf"
    conf.write_bytes(b"lock: backup\n" + conf.read_bytes())
    before = tree(snap)
    with pytest.raises(Refused) as checked:
        api.fix("200", root=str(snap), check=True)
    with pytest.raises(Refused) as real:
        api.fix("200", root=str(snap), check=False)
    assert str(checked.value) == str(real.value) and tree(snap) == before
    r = api.fix("201", root=str(snap), check=True)
    assert r["verdict"]["ok"] is True and r["verdict"]["exit_code"] == 0
