"""Many channels of one SSH connection at once, round after round, against the real test sshd:
not one command's output may be lost or cut short.

Why this can go wrong: sshd sends a command's exit status as soon as the command has exited,
while up to a pipe's worth (64 KiB) of its output may still wait to be read and sent
(OpenSSH session.c: "there could be some more data waiting in the pipe"). A reader that
stops at the exit status returns rc 0 with the output truncated or empty. sshd at LogLevel
DEBUG1 (started with -e, its debug lines also reach each session's stderr) makes that more
frequent. And a reader that select()s on paramiko's Channel.fileno() while another thread
closes its channel can kill the whole connection (EBADF in paramiko's transport thread), as
can an EOF sent after our CLOSE when a fast command's channel closes at once (sshd:
"ieof packet referred to nonexistent channel", and it disconnects).
"""

from __future__ import annotations

import threading

import pytest

from lxcfix import ssh

from .sshd import Keys, Sshd, lean_root_shell, write_known_hosts

THREADS = 8
ROUNDS = 60


def payload(tag: str, lines: int) -> str:
    """Numbered lines: a lost or reordered piece cannot look like the whole."""
    return "".join(f"{tag} {i:06d} {'x' * 52}\n" for i in range(lines))


@pytest.fixture
def lean_shell(tmp_path):
    with lean_root_shell(tmp_path) as hidden:
        yield hidden


@pytest.mark.parametrize("log_level", ["INFO", "DEBUG1"])
@pytest.mark.parametrize("out_lines, err_lines, rounds, together", [(2500, 300, ROUNDS, True),
                                                                     (40, 10, 4 * ROUNDS, False)],
                         ids=["160KB", "2KB"])
def test_no_output_lost_with_many_concurrent_channels(tmp_path, log_level, out_lines, err_lines, rounds, together,
                                                      lean_shell):
    """160 KB, each round's channels started together: more than a pipe holds, the exit status
    overtakes the output. 2 KB, each thread at its own pace: fast commands whose channels open
    and close while others do."""
    keys = Keys.make(tmp_path / "client")
    d = Sshd.start(tmp_path / "sshd", keys, log_level=log_level)
    out, err = payload("out", out_lines), payload("err", err_lines)
    (tmp_path / "out").write_text(out)
    (tmp_path / "err").write_text(err)
    argv = ["sh", "-c", 'cat -- "$1"; cat -- "$2" >&2', "sh", str(tmp_path / "out"), str(tmp_path / "err")]
    options = ssh.SshOptions(known_hosts=str(write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())),
                             ssh_config=None, allow_agent=False, look_for_keys=False, max_sessions=THREADS)
    t = ssh.Ssh("stress", hostname="127.0.0.1", port=d.port, user="root", key_files=[str(keys.private)],
                options=options)
    bad: list[tuple] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def worker(i: int) -> None:
        for rnd in range(rounds):
            try:
                if together:
                    barrier.wait(timeout=120)
                r = t.run(argv, timeout=60)
            except Exception as e:  # a lost connection loses every output after it
                with lock:
                    bad.append((rnd, i, f"{type(e).__name__}: {e}"))
                continue
            # at DEBUG1, sshd's own lines come first on stderr; the command's must be whole
            if r.rc != 0 or r.stdout != out or not r.stderr.endswith(err):
                with lock:
                    bad.append((rnd, i, r.rc, len(r.stdout), len(r.stderr), r.stderr[-200:]))

    try:
        t.connect()
        threads = [threading.Thread(target=worker, args=(i,), name=f"stress-{i}") for i in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert bad == [], f"{len(bad)} of {THREADS * rounds} outputs lost or truncated, e.g. {bad[:5]}"
        assert t.connections == 1
    finally:
        t.close()
        d.stop()
