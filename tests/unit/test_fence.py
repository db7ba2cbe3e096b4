"""lxcfix.fence: what a tenant controls is read in a forked child killed at its deadline, path by
path, so a read that hangs (a FUSE mount that never answers) costs the deadline, names its path,
and keeps what was read before it. The hang with a real FUSE mount: tests/real/test_fuse_hang.py."""

from __future__ import annotations

import json
import os
import time

from lxcfix import fence, rootfs


def _lib() -> dict:
    ns: dict = {"__name__": "lxcfix_rootfs_reader"}
    exec(compile(fence.rootfs_command(), "<lxcfix rootfs reader>", "exec"), ns)
    return ns


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    time.sleep(0.02)  # killed, its reaper thread not there yet
                    continue
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.02)
    return False


def test_a_child_that_never_ends_is_killed_at_the_deadline_and_what_it_wrote_is_kept():
    ns = _lib()

    def stuck(out):
        out(b"%d\n" % os.getpid())
        time.sleep(3600)

    start = time.monotonic()
    status, data = ns["in_child"](stuck, (), 0.5, 1 << 20)
    assert status == "timeout" and time.monotonic() - start < 5
    pid = int(data)
    assert pid != os.getpid() and _gone(pid)  # killed, and reaped without anyone waiting on it here


def test_a_child_past_its_cap_is_cut_and_one_that_raises_fails():
    ns = _lib()
    status, data = ns["in_child"](lambda out: out(b"x" * 100_000), (), 10, 1000)
    assert status == "large" and data == b"x" * 1000
    assert ns["in_child"](lambda out: 1 / 0, (), 10, 1000) == ("failed", b"")


def test_the_fenced_reader_prints_what_the_reader_prints_in_process(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc/docker").mkdir(parents=True)
    (root / "etc/group").write_text("render:x:993:\n")
    (root / "etc/docker/daemon.json").symlink_to("/../../etc/group")  # resolved inside the root
    files, exists = list(rootfs.FILES), ["/etc/group", "/usr/bin/dockerd"]
    rc, text, err = _lib()["fenced"](str(root), rootfs.FILE_MAX, files, exists, {}, 10)
    assert (rc, err) == (0, "")
    assert text.rstrip("\n").split("\n") == _lib()["report"](str(root), rootfs.FILE_MAX, files, exists)
    seen = rootfs.parse_reader(str(root), text, files, exists)
    assert seen.files[rootfs.DAEMON] == b"render:x:993:\n" and seen.present == {"/etc/group"}


def test_a_path_that_hangs_is_named_and_the_paths_before_it_are_kept(tmp_path):
    """The reader stuck on one path (what a FUSE mount does to open()): rc 124, 'not checked:
    reading ROOT/PATH timed out after N s', the lines of the paths before it."""
    ns = _lib()
    real = ns["report"]

    def hangs_on_toolkit(root, cap, files, exists, caps=None):
        if rootfs.TOOLKIT in files:
            time.sleep(3600)
        return real(root, cap, files, exists, caps)

    ns["report"] = hangs_on_toolkit
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/group").write_text("video:x:44:\n")
    files = [rootfs.GROUP, rootfs.TOOLKIT, rootfs.DAEMON]
    rc, text, err = ns["fenced"](str(tmp_path), rootfs.FILE_MAX, files, [], {}, 0.5)
    assert rc == 124
    assert err == f"not checked: reading {tmp_path}{rootfs.TOOLKIT} timed out after 0.5 s"
    assert [json.loads(line)["path"] for line in text.split("\n") if line] == [rootfs.GROUP]


def test_the_reader_command_runs_alone_with_a_deadline(tmp_path):
    """`PYTHON -c rootfs_command() TIMEOUT ROOT CAP N FILES... EXISTS...`: what a remote host runs
    when no sweep answered it (observe.reader_argv)."""
    import subprocess
    import sys

    from lxcfix.observe import reader_argv

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/group").write_text("video:x:44:\n")
    argv = reader_argv(str(tmp_path), [rootfs.GROUP], ["/etc/passwd"], python=sys.executable, timeout=7)
    assert argv[0] == sys.executable and argv[3] == "7"
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    seen = rootfs.parse_reader(str(tmp_path), r.stdout, [rootfs.GROUP], ["/etc/passwd"])
    assert seen.files == {rootfs.GROUP: b"video:x:44:\n"} and seen.present == frozenset()
