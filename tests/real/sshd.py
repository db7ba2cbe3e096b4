"""A throwaway OpenSSH server on 127.0.0.1:<free port>, playing a remote hypervisor.

    keys = Keys.make(tmp)                      # client key pair, written under tmp
    d = Sshd.start(tmp / "sshd-a", keys)       # host key, config, PidFile, log: all under that dir
    Sshd.start(tmp / "sshd-b", keys, log_level="DEBUG1", sftp="/path/to/script")   # other server settings
    d.port, d.known_hosts_line()               # "[127.0.0.1]:PORT ssh-ed25519 AAAA..."
    d.accepted()                               # how many logins its log shows
    d.kill()                                   # the listener AND every per-connection child, by PID
    d.stop()                                   # same, at teardown (idempotent)

Root login by key only, `UsePAM no`, `StrictModes no`, internal-sftp, and
MaxStartups/MaxSessions raised so a fleet scan's bursts are not dropped.
Also: SilentListener(), a TCP port on 127.0.0.1 that accepts and never says a word
(no SSH banner), and container_sshd(rootfs, keys), which prepares a container's rootfs so
`lxc-attach -n NAME -- /usr/sbin/sshd -i -f /etc/ssh/lxf/sshd_config` speaks
SSH over a pipe (the ProxyCommand way into a container with no network).
Only loopback: ListenAddress 127.0.0.1. Every process started is ended by PID.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "/usr/bin/ssh-keygen"
PRIVSEP_DIR = "/run/sshd"  # compiled into Debian's sshd; it refuses to start without it


def _keygen(path: Path, kind: str = "ed25519", comment: str = "lxcfix-test") -> Path:
    if path.exists():
        path.unlink()
    subprocess.run([SSH_KEYGEN, "-q", "-t", kind, "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, capture_output=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """PIDs of every process below `pid` (from /proc), children before their own children."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def closed_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    return free_port()


@dataclass
class Keys:
    """A client key pair: `private` for ansible_ssh_private_key_file, `public` for authorized_keys."""

    private: Path
    public: Path

    @classmethod
    def make(cls, directory: Path, name: str = "client") -> Keys:
        directory.mkdir(parents=True, exist_ok=True)
        priv = _keygen(directory / f"{name}_ed25519")
        return cls(priv, Path(str(priv) + ".pub"))

    def public_line(self) -> str:
        return self.public.read_text().strip()


class Sshd:
    """log_level: sshd's LogLevel (with -e, DEBUG lines also reach each session's stderr before
    the command runs); sftp: the sftp Subsystem command (default internal-sftp)."""

    def __init__(self, directory: Path, keys: Keys, port: int, log_level: str = "INFO",
                 sftp: str = "internal-sftp", env: dict | None = None):
        self.env = dict(env or {})  # SetEnv: what every session gets (a host's own PATH, state dir)
        self.dir = directory
        self.keys = keys
        self.port = port
        self.log_level = log_level
        self.sftp = sftp
        self.host_key = directory / "ssh_host_ed25519_key"
        self.config = directory / "sshd_config"
        self.pidfile = directory / "sshd.pid"
        self.log = directory / "sshd.log"
        self.authorized_keys = directory / "authorized_keys"
        self.proc: subprocess.Popen | None = None
        self._log_fh = None

    @classmethod
    def start(cls, directory: Path, keys: Keys, port: int | None = None, tries: int = 5,
              log_level: str = "INFO", sftp: str = "internal-sftp", env: dict | None = None) -> Sshd:
        directory.mkdir(parents=True, exist_ok=True)
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        last = None
        for _ in range(tries):
            d = cls(directory, keys, port or free_port(), log_level=log_level, sftp=sftp, env=env)
            try:
                d._start()
                return d
            except RuntimeError as e:  # the free port was taken meanwhile: another one
                last = e
                d.stop()
                if port:
                    break
        raise RuntimeError(f"sshd did not start: {last}")

    def write_config(self) -> None:
        if not self.host_key.exists():
            _keygen(self.host_key, comment="lxcfix-test-host")
        self.authorized_keys.write_text(self.keys.public_line() + "\n")
        self.config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.pidfile}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxSessions 32",
            "MaxStartups 200:30:400",
            "MaxAuthTries 10",
            f"LogLevel {self.log_level}",
            f"Subsystem sftp {self.sftp}",
            *([f"SetEnv {' '.join(f'{k}={v}' for k, v in self.env.items())}"] if self.env else []),
            "",
        ]))

    def _start(self) -> None:
        self.write_config()
        if self.pidfile.exists():
            self.pidfile.unlink()
        self._log_fh = open(self.log, "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=self._log_fh, stderr=self._log_fh, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.log_text()[-2000:]}")
            if self.pidfile.exists() and self._listening():
                return
            time.sleep(0.02)
        raise RuntimeError(f"sshd not listening on 127.0.0.1:{self.port}: {self.log_text()[-2000:]}")

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.settimeout(1.0)
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    # what tests look at

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def host_public(self) -> str:
        """"ssh-ed25519 AAAA..." of this server's host key."""
        kind, b64 = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{kind} {b64}"

    def known_hosts_line(self, name: str = "127.0.0.1") -> str:
        return f"[{name}]:{self.port} {self.host_public()}"

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, needle: str, count: int = 1, timeout: float = 5.0) -> int:
        """How often `needle` is in the log, once it is there `count` times or `timeout` passed
        (each connection's own sshd process writes its lines a moment after the client moved on)."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.log_text().count(needle)
            if n >= count or time.monotonic() > deadline:
                return n
            time.sleep(0.05)

    def accepted(self) -> int:
        """Logins (one per SSH connection) the log shows."""
        return sum(1 for line in self.log_text().splitlines() if "Accepted publickey for" in line)

    def children(self) -> list[int]:
        """PIDs of every process below the listener (per-connection sshd and their sessions)."""
        return descendants(self.proc.pid) if self.proc is not None else []

    def kill(self) -> None:
        """SIGKILL the listener and every process under it, by PID (a host that died)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        victims = self.children()
        for pid in [self.proc.pid, *victims]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)

    def kill_connections(self) -> None:
        """SIGKILL only the per-connection processes: live sessions drop, the listener stays."""
        for pid in self.children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            victims = self.children()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None


class SilentListener:
    """127.0.0.1:<port> accepts TCP connections and never sends a byte: not an SSH server,
    or one that is stuck. `accepted` counts connections; close() ends it (its own thread)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="silent-listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            self._conns.append(conn)  # held open, never answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for c in [*self._conns, self.sock]:
            c.close()


def _private_mount_namespace() -> bool:
    """This process's mount namespace is not its parent's (tests/run made it), nor PID 1's
    when that can be seen (in a container it may not be)."""
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        if mine == os.readlink(f"/proc/{os.getppid()}/ns/mnt"):
            return False
    except OSError:
        return False
    try:
        return mine != os.readlink("/proc/1/ns/mnt")
    except PermissionError:
        return True
    except OSError:
        return False


@contextlib.contextmanager
def lean_root_shell(tmp: Path):
    """Root's ~/.bashrc hidden (an empty file bound over it) for the block, so a remote command
    costs what it costs on a lean host: Debian's bash sources it for every command sshd runs,
    and here it runs `pyenv init` (~0.2 s). Only in a private mount namespace (tests/run);
    elsewhere nothing is mounted and commands are just slower. Yields whether it is hidden."""
    rc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
    hidden = False
    if rc.is_file() and _private_mount_namespace():
        empty = tmp / "empty-bashrc"
        empty.write_text("")
        hidden = subprocess.run(["mount", "--bind", str(empty), str(rc)], capture_output=True).returncode == 0
    try:
        yield hidden
    finally:
        if hidden:
            subprocess.run(["umount", str(rc)], capture_output=True)


def write_known_hosts(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


# ----------------------------------------------------------------- inside a container

CT_SSHD_DIR = "/etc/ssh/lxf"
CT_SSHD_CONFIG = f"{CT_SSHD_DIR}/sshd_config"


def container_sshd(rootfs: str, keys: Keys, hostname: str) -> str:
    """Prepare a (stopped or running) container's rootfs for `sshd -i`: a host key, root's
    authorized_keys, the privsep user and dir, /etc/hostname. Returns the host public key line
    ("ssh-ed25519 AAAA...")."""
    root = Path(rootfs)
    d = root / CT_SSHD_DIR.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(d / "ssh_host_ed25519_key", comment="lxcfix-test-ct")
    (root / "root/.ssh").mkdir(parents=True, exist_ok=True)
    (root / "root/.ssh/authorized_keys").write_text(keys.public_line() + "\n")
    (root / "run/sshd").mkdir(parents=True, exist_ok=True)
    passwd = root / "etc/passwd"
    if "sshd:" not in passwd.read_text():
        with passwd.open("a") as f:
            f.write("sshd:x:102:65534::/run/sshd:/usr/sbin/nologin\n")
    (root / "etc/hostname").write_text(hostname + "\n")
    (d / "sshd_config").write_text("\n".join([
        f"HostKey {CT_SSHD_DIR}/ssh_host_ed25519_key",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PrintMotd no",
        "PrintLastLog no",
        "LogLevel QUIET",
        "Subsystem sftp internal-sftp",
        "",
    ]))
    kind, b64 = Path(str(host_key) + ".pub").read_text().split()[:2]
    return f"{kind} {b64}"


def container_proxy_argv(name: str) -> list[str]:
    return ["lxc-attach", "-n", name, "--", SSHD, "-i", "-f", CT_SSHD_CONFIG]
