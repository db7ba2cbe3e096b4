"""Issue 15, the rows about lxcfix's own state and the change path, on real containers and
real (tiny) disks: 1 (a full state dir), 3 (an exception at each step), 8 (symlinks planted
in a snapshot's state dir), 10 (host-fix and a container named `host`), 13 (rollback after a
kill: hand edits, a container left stopped), 14 (rollback --to what is not a backup), and
full or read-only config and state dirs (one clear line, nothing changed).

Tiny disks are tmpfs mounts under tmp_path, in the private mount namespace tests/run
makes: the machine's mounts are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import harness
from .cli import TUN_MOUNT, lxcfix, paused_apply

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAULTING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faulting.py")


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "64k", ro: bool = False):
    """A tmpfs of `size` at path (in this test's private mount namespace), unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    harness.sh(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
    try:
        if ro:
            harness.sh(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        harness.sh(["umount", "-l", str(path)])


def fill(directory: Path) -> Path:
    """Write a file in `directory` until the disk is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def one_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip() and not l.startswith("style: ")]  # apply's own note
    assert len(lines) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


def events(state) -> list[str]:
    path = Path(state) / "journal.jsonl"
    return [json.loads(l)["event"] for l in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------- row 1: a full state dir


def test_full_state_dir_stops_before_the_config_and_rollback_keeps_it(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    with tmpfs(tmp_path / "tiny") as state:
        env = {**env, "LXCFIX_STATE_DIR": str(state / "state")}
        filler = fill(state)
        r = lxcfix(env, "apply", "--ct", c.name, "--yes")
        assert r.returncode == 3, r.stdout + r.stderr
        line = one_line(r.stderr)
        assert "No space left on device" in line and "nothing changed" in line
        assert Path(c.config_path).read_bytes() == old and c.running()
        assert not [p for p in (state / "state").rglob("*") if p.is_file() and p.stat().st_size == 0]
        filler.unlink()  # space again
        r = lxcfix(env, "rollback", "--ct", c.name)
        assert r.returncode == 2 and "no backup" in one_line(r.stderr)
        assert Path(c.config_path).read_bytes() == old
        r = lxcfix(env, "apply", "--ct", c.name, "--yes")
        assert r.returncode == 0, r.stderr
        r = lxcfix(env, "rollback", "--ct", c.name)
        assert r.returncode == 0, r.stderr
        assert Path(c.config_path).read_bytes() == old and c.running()


def test_read_only_state_dir_is_one_line_and_nothing_changes(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    with tmpfs(tmp_path / "ro", ro=True) as state:
        r = lxcfix({**env, "LXCFIX_STATE_DIR": str(state / "state")}, "apply", "--ct", c.name, "--yes")
        assert r.returncode == 3 and "Read-only file system" in one_line(r.stderr)
    assert Path(c.config_path).read_bytes() == old and c.running()


@pytest.mark.parametrize("ro", [False, True], ids=["full", "read-only"])
def test_full_or_read_only_config_dir_is_one_line_and_nothing_changes(env, tmp_path, ro):
    with tmpfs(tmp_path / "disk", size="256k") as disk:
        shutil.copytree(EXAMPLES / "pve-gpu-host", disk / "snap")
        conf = disk / "snap/etc/pve/lxc/200.conf"
        old = conf.read_bytes()
        filler = fill(disk)
        if ro:
            filler.unlink()
            harness.sh(["mount", "-o", "remount,ro", str(disk)], check=True)
        r = lxcfix(env, "apply", "--root", str(disk / "snap"), "--ct", "200", "--no-restart", "--yes")
        assert r.returncode == 3, r.stdout + r.stderr
        line = one_line(r.stderr)
        assert "cannot write /etc/pve/lxc/200.conf" in line
        assert ("Read-only file system" if ro else "No space left on device") in line
        assert conf.read_bytes() == old
        assert not [p for p in conf.parent.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- row 8: symlinks in a snapshot's state dir


@pytest.fixture
def snap(tmp_path, env):
    """A copy of examples/pve-gpu-host whose own state dir (DIR/.lxcfix/state) is used."""
    root = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", root)
    env.pop("LXCFIX_STATE_DIR", None)
    return root


def _apply_snapshot(env, root, *extra):
    return lxcfix(env, "apply", "--root", str(root), "--ct", "200", "--no-restart", "--yes", *extra)


def test_symlinked_backup_dir_in_a_snapshot_is_refused(snap, env, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (snap / ".lxcfix/state/backups").mkdir(parents=True)
    os.symlink(outside, snap / ".lxcfix/state/backups/200")
    old = (snap / "etc/pve/lxc/200.conf").read_bytes()
    r = _apply_snapshot(env, snap)
    assert r.returncode == 3 and "refusing to follow it" in one_line(r.stderr)
    assert list(outside.iterdir()) == [] and (snap / "etc/pve/lxc/200.conf").read_bytes() == old


def test_symlinked_state_dir_in_a_snapshot_is_refused(snap, env, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, snap / ".lxcfix/state")
    r = _apply_snapshot(env, snap)
    assert r.returncode == 3 and "refusing to follow it" in one_line(r.stderr)
    assert list(outside.iterdir()) == []


def test_symlinked_journal_in_a_snapshot_is_refused_and_its_target_untouched(snap, env, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("do not touch\n")
    victim.chmod(0o600)
    (snap / ".lxcfix/state").mkdir(parents=True)
    os.symlink(victim, snap / ".lxcfix/state/journal.jsonl")
    old = (snap / "etc/pve/lxc/200.conf").read_bytes()
    r = _apply_snapshot(env, snap)
    assert r.returncode == 3 and "journal" in one_line(r.stderr)
    assert victim.read_text() == "do not touch\n" and victim.stat().st_mode & 0o777 == 0o600
    assert (snap / "etc/pve/lxc/200.conf").read_bytes() == old


def test_symlink_at_the_temp_name_is_never_written_through_nor_renamed_over_the_config(snap, env, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("do not touch\n")
    pause = tmp_path / "pause"
    proc = paused_apply(env, "200", "backed-up", pause, "--root", str(snap), "--no-restart")
    pid = pause.read_text().split()[0]
    conf = snap / "etc/pve/lxc/200.conf"
    old = conf.read_bytes()
    os.symlink(victim, conf.parent / f".200.conf.lxcfix-{pid}.tmp")
    pause.unlink()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert victim.read_text() == "do not touch\n"
    assert conf.is_file() and not conf.is_symlink() and conf.read_bytes() != old
    assert not [p for p in conf.parent.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- row 3: an exception at each step


@pytest.mark.parametrize("step,code", [("locked", 3), ("backed-up", 3), ("temp-written", 3),
                                       ("written", 4), ("stopped", 4), ("restarted", 4), ("verified", 4)])
def test_an_exception_at_each_step_goes_through_the_rollback(container_factory, tun, env, step, code):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    pid = c.init_pid()
    r = subprocess.run([sys.executable, FAULTING, step, "apply", "--ct", c.name, "--yes"], env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == code, r.stdout + r.stderr
    assert f"injected at {step}" in r.stderr and "Traceback" not in r.stderr
    assert Path(c.config_path).read_bytes() == old
    assert c.running() and c.bpf_attached()
    if code == 3:
        assert "nothing changed" in r.stderr and events(env["LXCFIX_STATE_DIR"])[-1:] != ["failed"]
        assert c.init_pid() == pid
    else:
        assert "rolled back" in r.stderr
        assert events(env["LXCFIX_STATE_DIR"])[-2:] == ["failed", "rolled-back"]
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"  # the old config, running


# ---------------------------------------------------------------- rows 13 and 14: rollback


def test_rollback_after_a_kill_before_the_backup_keeps_a_later_hand_edit(container_factory, tun, uvm, env, tmp_path):
    """An apply killed before its backup, after a hand edit: the newest backup is an older
    apply's, and restoring it would drop the hand edit. rollback refuses and says what it
    would drop; --to that backup restores it and says what it dropped."""
    node, _ = uvm
    c = container_factory([TUN_MOUNT])
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0, r.stderr
    (backup,) = (Path(env["LXCFIX_STATE_DIR"]) / "backups" / c.name).iterdir()
    hand = f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,optional,create=file 0 0"
    with open(c.config_path, "a") as f:
        f.write(hand + "\n")
    edited = Path(c.config_path).read_bytes()
    proc = paused_apply(env, c.name, "locked", tmp_path / "pause")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    r = lxcfix(env, "rollback", "--ct", c.name)
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert "was changed after lxcfix's change" in line and hand in line and str(backup) in line
    assert "--to" in line and Path(c.config_path).read_bytes() == edited

    r = lxcfix(env, "rollback", "--ct", c.name, "--to", str(backup))
    assert r.returncode == 0, r.stderr
    assert f"restored from {backup}" in r.stdout and hand in r.stdout and "/dev/net/tun rwm" in r.stdout
    assert Path(c.config_path).read_bytes() == backup.read_bytes()


def test_rollback_after_a_kill_between_stop_and_start_starts_the_container(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    proc = paused_apply(env, c.name, "stopped", tmp_path / "pause")
    assert not c.running()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert not c.running()
    r = lxcfix(env, "rollback", "--ct", c.name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started again" in r.stdout
    assert Path(c.config_path).read_bytes() == old
    assert c.running() and c.bpf_attached()


def test_rollback_after_a_kill_while_the_undo_restarted_it_starts_the_container(container_factory, tun, env,
                                                                                tmp_path):
    """Killed while the failed apply's own undo had the container stopped (its config already
    the old one): rollback has nothing to restore, and starts it."""
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    # the apply fails at verify; its undo restores the file and stops the container: killed there
    marker = tmp_path / "pause"
    script = (f"import sys; sys.argv[1:] = ['x', {str(marker)!r}, 'apply', '--ct', {c.name!r}, '--yes'];"
              f"sys.path.insert(0, {os.path.dirname(FAULTING)!r});"
              "import pausing; from lxcfix.transaction import Transaction;"
              f"pause = pausing.pause_at('stopped', {str(marker)!r}); seen = []\n"
              "def hook(name):\n"
              "    seen.append(name)\n"
              "    if name == 'verified': raise RuntimeError('verify blew up')\n"
              "    if name == 'stopped' and 'verified' in seen: pause(name)\n"
              "Transaction.on_checkpoint = staticmethod(hook)\n"
              "from lxcfix import cli; cli.main(sys.argv[3:])")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    for _ in range(600):
        if marker.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert not c.running() and Path(c.config_path).read_bytes() == old
    r = lxcfix(env, "rollback", "--ct", c.name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already matches" in r.stdout and "started again" in r.stdout
    assert c.running() and c.bpf_attached()


def test_rollback_to_what_is_not_this_containers_backup_is_refused(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    other = container_factory([TUN_MOUNT], start=False)
    assert lxcfix(env, "apply", "--ct", c.name, "--yes").returncode == 0
    assert lxcfix(env, "apply", "--ct", other.name, "--yes", "--no-restart").returncode == 0
    now = Path(c.config_path).read_bytes()
    backups = Path(env["LXCFIX_STATE_DIR"]) / "backups"
    (theirs,) = (backups / other.name).iterdir()
    empty = backups / c.name / "20000101T000000.000000Z-da39a3ee5e6b.conf"
    empty.write_bytes(b"")
    copied = backups / c.name / theirs.name  # the other container's backup, copied in
    shutil.copy(theirs, copied)
    for to, why in (("/etc/passwd", "not a backup lxcfix took"), (str(theirs), "not a backup lxcfix took"),
                    (str(empty), "empty"), (str(copied), "has no record of lxcfix taking it")):
        r = lxcfix(env, "rollback", "--ct", c.name, "--to", to)
        assert r.returncode == 2 and why in one_line(r.stderr), (to, r.stderr)
        assert Path(c.config_path).read_bytes() == now


# ---------------------------------------------------------------- row 10: host-fix and a container named host


def test_host_fix_backups_are_not_a_container_named_hosts(env, tmp_path):
    if os.path.lexists(os.path.join(harness.LXCPATH, "host")):
        pytest.skip("an LXC container named host exists on this machine")
    c = harness.make_container([TUN_MOUNT], name="host", start=False)
    try:
        env = {**env, "LXCFIX_SYSTEMD_DIR": str(tmp_path / "units")}
        before = Path(c.config_path).read_bytes()
        for gpus in (["--gpu", "0"], ["--gpu", "0", "--gpu", "1"]):  # the second replaces the first: a backup
            r = lxcfix(env, "host-fix", "--yes", "--no-enable", "--nvidia-modprobe", "/usr/bin/true", *gpus)
            assert r.returncode == 0, r.stdout + r.stderr
        state = Path(env["LXCFIX_STATE_DIR"])
        assert len(list((state / "host-unit" / "lxcfix-nvidia-nodes.service").iterdir())) == 1
        assert not (state / "backups" / "host").exists()
        r = lxcfix(env, "rollback", "--ct", "host")
        assert r.returncode == 2 and "no backup of host" in one_line(r.stderr)
        # a unit backup where lxcfix before 0.2 kept it: not a container config, refused
        old_place = state / "backups" / "host"
        old_place.mkdir(parents=True)
        unit = next((state / "host-unit" / "lxcfix-nvidia-nodes.service").iterdir())
        shutil.copy(unit, old_place / unit.name)
        r = lxcfix(env, "rollback", "--ct", "host")
        assert r.returncode == 2 and "does not parse as a container config" in one_line(r.stderr)
        assert Path(c.config_path).read_bytes() == before
    finally:
        c.destroy()


# ---------------------------------------------------------------- issue 21 row 8: concurrent applies on one snapshot


def test_a_second_apply_of_a_snapshot_while_one_is_paused_is_refused_by_the_lock(snap, env, tmp_path):
    """Before: no lock covered a snapshot; the second apply finished, and the first (paused
    after its backup) then restored its backup over that change (exit 4): the change was gone.
    Now the snapshot's container is locked in the state dir its --root uses: the second is
    refused (exit 2, nothing changed), the first finishes."""
    conf = snap / "etc/pve/lxc/200.conf"
    old = conf.read_bytes()
    pause = tmp_path / "pause"
    first = paused_apply(env, "200", "backed-up", pause, "--root", str(snap), "--no-restart")
    try:
        second = _apply_snapshot(env, snap)
        assert second.returncode == 2, second.stdout + second.stderr
        line = one_line(second.stderr)
        assert "another lxcfix holds" in line and "locks/200.lock" in line and "nothing changed" in line
        assert conf.read_bytes() == old
    finally:
        pause.unlink(missing_ok=True)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert conf.read_bytes() != old
    assert events(snap / ".lxcfix/state") == ["backup", "written", "done"]
    assert _apply_snapshot(env, snap).returncode == 0  # the lock is released: nothing left to do


def test_an_apply_never_restores_over_a_change_it_did_not_write(snap, env, tmp_path):
    """Another writer the lock does not stop (an lxcfix using another state dir) finishes the
    same change while the first apply is paused after its backup. Before: the first found the
    file changed, "nothing written", and still restored its backup over the other's change
    (exit 4). Now a rollback restores only what this apply wrote: exit 2, the change stays."""
    conf = snap / "etc/pve/lxc/200.conf"
    old = conf.read_bytes()
    pause = tmp_path / "pause"
    first = paused_apply(env, "200", "backed-up", pause, "--root", str(snap), "--no-restart")
    try:
        other = lxcfix({**env, "LXCFIX_STATE_DIR": str(tmp_path / "other-state")}, "apply", "--root", str(snap),
                       "--ct", "200", "--no-restart", "--yes")
        assert other.returncode == 0, other.stdout + other.stderr
        theirs = conf.read_bytes()
        assert theirs != old
    finally:
        pause.unlink(missing_ok=True)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 2, out + err
    line = one_line(err)
    assert "changed while lxcfix was working" in line and "nothing written" in line
    assert conf.read_bytes() == theirs
    assert "rolled-back" not in events(snap / ".lxcfix/state")


def test_a_hand_edit_while_an_apply_waits_is_kept_and_the_exit_is_nothing_changed(snap, env, tmp_path):
    """Before: the hand edit was kept, but the exit was 5 ("rollback failed") although nothing
    had been written. Now: exit 2, one line, the hand edit as it was."""
    conf = snap / "etc/pve/lxc/200.conf"
    pause = tmp_path / "pause"
    first = paused_apply(env, "200", "backed-up", pause, "--root", str(snap), "--no-restart")
    try:
        edited = conf.read_bytes().replace(b"cores: 16\n", b"cores: 8\n")
        conf.write_bytes(edited)
    finally:
        pause.unlink(missing_ok=True)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 2, out + err
    assert "changed while lxcfix was working" in one_line(err)
    assert conf.read_bytes() == edited
    assert not [p for p in conf.parent.iterdir() if p.name.endswith(".tmp")]
    assert "rollback-failed" not in events(snap / ".lxcfix/state")
