"""The remote side is hostile or broken, over real SSH (the test sshd on 127.0.0.1): output
without end, an SFTP server that never answers, a FIFO where a config should be, a file too
big, a listener that never says a word. Each must end in bounded time and memory with a
clear reason, never hang a scan."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import ssh
from lxcfix.errors import Unreachable

from .sshd import Keys, SilentListener, Sshd, lean_root_shell, write_known_hosts

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


@pytest.fixture
def keys(tmp_path) -> Keys:
    return Keys.make(tmp_path / "client")


@pytest.fixture
def lean_shell(tmp_path):
    with lean_root_shell(tmp_path) as hidden:
        yield hidden


@pytest.fixture
def server(tmp_path, keys, lean_shell):
    """factory(**Sshd.start options) -> (Sshd, SshOptions that trust it); all stopped at teardown."""
    made: list[Sshd] = []

    def make(name: str = "a", **kw) -> tuple[Sshd, ssh.SshOptions]:
        d = Sshd.start(tmp_path / f"sshd-{name}", keys, **kw)
        made.append(d)
        kh = write_known_hosts(tmp_path / f"known_hosts-{name}", d.known_hosts_line())
        return d, ssh.SshOptions(known_hosts=str(kh), ssh_config=None, allow_agent=False, look_for_keys=False)

    try:
        yield make
    finally:
        for d in made:
            d.stop()


def host(d: Sshd, keys: Keys, options: ssh.SshOptions, **kw) -> ssh.Ssh:
    return ssh.Ssh("h", hostname="127.0.0.1", port=d.port, user="root", key_files=[str(keys.private)],
                   options=options, **kw)


# ----------------------------------------------------------------- output without end


def test_output_past_the_cap_stops_reading(server, keys):
    d, options = server()
    with host(d, keys, options) as t:
        start = time.monotonic()
        r = t.run(["sh", "-c", "head -c 5242880 /dev/zero | tr '\\0' a"])
        assert r.rc == 125 and r.stdout == "a" * MiB
        assert r.stderr == "sh: output exceeded 1048576 bytes on stdout; stopped"
        r = t.run(["sh", "-c", "echo on-stdout; head -c 5242880 /dev/zero | tr '\\0' e >&2"])
        assert r.rc == 125 and r.stdout == "on-stdout\n" and len(r.stderr.split("\n")[0]) == MiB
        assert r.stderr.endswith("\nsh: output exceeded 1048576 bytes on stderr; stopped")
        r = t.run(["yes"])  # never ends by itself: closing the channel ends it
        assert r.rc == 125 and len(r.stdout) == MiB
        assert time.monotonic() - start < 20
        small = replace(options, max_output=1000)
    with host(d, keys, small) as t:
        assert t.run(["head", "-c", "1000", "/dev/zero"]).rc == 0  # exactly the cap is fine
        r = t.run(["head", "-c", "1001", "/dev/zero"])
        assert r.rc == 125 and len(r.stdout) == 1000
        assert t.run(["echo", "still", "usable"]).stdout == "still usable\n"


RSS_CHILD = r"""
import json, resource, sys
from lxcfix import ssh
port, key, kh, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = ssh.SshOptions(known_hosts=kh, ssh_config=None, allow_agent=False, look_for_keys=False)
t = ssh.Ssh("h", hostname="127.0.0.1", port=int(port), user="root", key_files=[key], options=opts)
t.run(["head", "-c", "300000", "/dev/zero"])  # warm: buffers, threads, imports
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = t.run(["head", "-c", str(size), "/dev/zero"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t.close()
print(json.dumps({"rc": r.rc, "out": len(r.stdout), "grew_kib": after - before}))
"""


def test_memory_stays_small_for_huge_output(server, keys, tmp_path):
    """In a fresh process (ru_maxrss is a high-water mark): 64 MiB printed, ~1 MiB kept. Reading
    it all would take 64 MiB at least, three times over (bytes, copy, str)."""
    d, options = server()
    child = subprocess.run([sys.executable, "-c", RSS_CHILD, str(d.port), str(keys.private), options.known_hosts,
                            str(64 * MiB)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    got = json.loads(child.stdout)
    assert got["rc"] == 125 and got["out"] == MiB
    assert got["grew_kib"] < 12 * 1024, got


# ----------------------------------------------------------------- SFTP that never answers


def test_sftp_that_never_answers_fails_within_the_deadline(server, keys, tmp_path):
    stuck = tmp_path / "stuck-sftp"
    stuck.write_text("#!/bin/sh\nexec sleep 120\n")  # accepts the subsystem, never says a word
    stuck.chmod(0o755)
    d, options = server(sftp=str(stuck))
    with host(d, keys, replace(options, op_timeout=2), use_sftp=True) as t:
        start = time.monotonic()
        with pytest.raises(ssh.OperationTimedOut) as e:
            t.read("/etc/hostname")
        took = time.monotonic() - start
        assert 1.5 < took < 6, took
        assert isinstance(e.value, Unreachable) and not isinstance(e.value, OSError)
        assert e.value.reason == "SFTP on h: no answer within 2s (the SFTP server is stuck)"
        for call in (lambda: t.read("/etc/hostname"), lambda: t.listdir("/etc"), lambda: t.isdir("/etc")):
            start = time.monotonic()
            with pytest.raises(ssh.OperationTimedOut, match="no answer within 2s"):
                call()
            assert time.monotonic() - start < 0.5  # known stuck: not waited for again
        assert t.run(["echo", "commands", "still", "work"]).stdout == "commands still work\n"


def test_sftp_reply_deadline_mid_session(server, keys, tmp_path):
    """SFTP answers at first, then a request never gets its reply (the server stopped)."""
    d, options = server()
    (tmp_path / "f").write_text("hello\n")
    with host(d, keys, replace(options, op_timeout=2), use_sftp=True) as t:
        assert t.read(str(tmp_path / "f")) == b"hello\n"
        (server_pid,) = [p for p in d.children() if _comm(p) in ("sshd", "sshd-session")][-1:]  # the session's sshd
        os.kill(server_pid, 19)  # SIGSTOP: the connection stays up, nothing answers
        try:
            start = time.monotonic()
            with pytest.raises(ssh.OperationTimedOut, match=r"^SFTP read .*/f on h: no answer within 2s"):
                t.read(str(tmp_path / "f"))
            assert time.monotonic() - start < 6
        finally:
            os.kill(server_pid, 18)  # SIGCONT


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# ----------------------------------------------------------------- what is not a regular file, or too big


@pytest.mark.parametrize("use_sftp", [True, False])
def test_fifo_and_other_non_regular_files_are_refused(server, keys, tmp_path, use_sftp):
    d, options = server()
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    with host(d, keys, replace(options, op_timeout=5), use_sftp=use_sftp) as t:
        for path in (fifo, tmp_path / "link", tmp_path):
            start = time.monotonic()
            with pytest.raises(OSError) as e:
                t.read(str(path))
            assert e.value.errno == errno.EINVAL and "not a regular file" in str(e.value), e.value
            assert time.monotonic() - start < 3  # refused, not waited on
        with pytest.raises(FileNotFoundError):
            t.read(str(tmp_path / "missing"))
        assert t.read("/proc/devices").startswith(b"Character devices:")  # size 0 in stat, still read


@pytest.mark.parametrize("use_sftp", [True, False])
def test_read_cap(server, keys, tmp_path, use_sftp):
    d, options = server()
    (tmp_path / "fits").write_bytes(b"x" * 1000)
    (tmp_path / "big").write_bytes(b"x" * 5000)
    with host(d, keys, replace(options, max_read=1000), use_sftp=use_sftp) as t:
        assert t.read(str(tmp_path / "fits")) == b"x" * 1000
        with pytest.raises(OSError) as e:
            t.read(str(tmp_path / "big"))
        assert e.value.errno == errno.EFBIG and "larger than 1000 bytes" in str(e.value)


# ----------------------------------------------------------------- commands: deadline and complete output


def test_command_deadline_and_output_held_open(server, keys):
    d, options = server()
    with host(d, keys, options) as t:
        start = time.monotonic()
        r = t.run(["sleep", "30"], timeout=1)
        assert r.rc == 124 and r.stderr == "sleep: timed out after 1s" and time.monotonic() - start < 4
        # the command exited, a child still holds its output open: as with OpenSSH's ssh, the
        # output is complete only at EOF, so this waits (to the deadline) instead of cutting it
        r = t.run(["sh", "-c", "echo before; sleep 30 & exit 0"], timeout=2)
        assert r.rc == 124 and r.stdout == "before\n"
        r = t.run(["sh", "-c", "echo before; sleep 30 >/dev/null 2>&1 & exit 3"], timeout=10)
        assert r.rc == 3 and r.stdout == "before\n"


# ----------------------------------------------------------------- a listener that never says a word


def test_silent_listener_is_reported_as_such_and_not_retried():
    listener = SilentListener()
    try:
        options = ssh.SshOptions(ssh_config=None, connect_timeout=1.5, tries=3, allow_agent=False,
                                 look_for_keys=False)
        t = ssh.Ssh("quiet", hostname="127.0.0.1", port=listener.port, user="root", options=options)
        start = time.monotonic()
        with pytest.raises(ssh.ConnectFailed) as e:
            t.connect()
        took = time.monotonic() - start
        t.close()
        assert e.value.reason == (f"no SSH banner from 127.0.0.1:{listener.port} within 1.5s "
                                  "(not an SSH server, or it is stuck)")
        assert 1.4 < took < 4, took  # one wait, not three
        assert listener.accepted == 1
    finally:
        listener.close()


def test_a_caller_may_raise_the_cap_for_one_command(server, keys):
    d, options = server()
    with host(d, keys, options) as t:
        r = t.run(["head", "-c", str(3 * MiB), "/dev/zero"], max_output=4 * MiB)
        assert r.rc == 0 and len(r.stdout) == 3 * MiB
        assert t.run(["head", "-c", str(3 * MiB), "/dev/zero"]).rc == 125  # the run's cap otherwise


# ----------------------------------------------------------------- issue 21 row 9: files SSH reads, bounded


def test_dev_zero_as_the_inventorys_key_file_is_that_host_unreachable_never_read(server, keys, tmp_path):
    """`ansible_ssh_private_key_file: /dev/zero` was read whole (MemoryError under a 2 GiB limit,
    a traceback). Now the key file is checked before paramiko reads it: the host is unreachable
    (LXF301) with the reason, in bounded memory; a real key beside it still works."""
    from .hostile import lxcfix_limited

    d, options = server()
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n"
                   f"    zero:\n      ansible_host: 127.0.0.1\n      ansible_port: {d.port}\n"
                   "      ansible_user: root\n      ansible_ssh_private_key_file: /dev/zero\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"}
    r = lxcfix_limited(env, "scan", "--inventory", str(inv), "--known-hosts", options.known_hosts, "--json",
                       memory=2 << 30, timeout=120)
    err = r.stderr.decode()
    assert b"Traceback" not in r.stdout + r.stderr and "MemoryError" not in err, err[-2000:]
    assert r.returncode == 3, (r.returncode, err[-2000:])
    doc = json.loads(r.stdout)
    (h,) = doc["hosts"]
    text = json.dumps([h["error"], h["findings"]])
    assert "LXF301" in text and "/dev/zero: not a regular file" in text, text[:2000]
    with pytest.raises(Unreachable, match="private key file /dev/zero: not a regular file"):
        ssh.Ssh("h", hostname="127.0.0.1", port=d.port, user="root", key_files=["/dev/zero"],
                options=options).connect()
    big = tmp_path / "big_key"
    big.write_bytes(b"x" * (ssh.MAX_KEY_FILE + 1))
    with pytest.raises(Unreachable, match="larger than"):
        ssh.Ssh("h", hostname="127.0.0.1", port=d.port, user="root", key_files=[str(big)], options=options).connect()
    with host(d, keys, options) as t:
        assert t.run(["echo", "ok"]).stdout == "ok\n"


def test_dev_zero_as_ssh_config_is_one_line_exit_2(tmp_path):
    """--ssh-config /dev/zero was read whole; now it is refused as not a regular file, and a
    huge regular one as too big, each one line (exit 2), under a 2 GiB limit."""
    from .hostile import lxcfix_limited

    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 127.0.0.1\n")
    huge = tmp_path / "huge_config"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk; read whole it is 1 GiB, twice (bytes, str)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"}
    for path, why in (("/dev/zero", "not a regular file"), (str(huge), "larger than")):
        r = lxcfix_limited(env, "scan", "--inventory", str(inv), "--ssh-config", path, memory=2 << 30, timeout=60)
        err = r.stderr.decode()
        lines = [l for l in err.splitlines() if l.strip()]
        assert r.returncode == 2 and len(lines) == 1 and why in lines[0] and path in lines[0], err[-2000:]
    assert ssh.load_ssh_config("/dev/null") is not None  # the usual "no config" still reads as empty
