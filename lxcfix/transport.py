"""How lxcfix reaches a host or a container: one declared seam, `Transport`.

Transports compose rather than subclass:

    Local()                                   this machine
    RootDir("/srv/snap")                      a host snapshot: /etc/pve/... is /srv/snap/etc/pve/...
    ContainerExec(inner=Local(), ct="200", backend="pve")
                                              ["pct", "exec", "200", "--", *argv] through inner
    ContainerExec(inner=Ssh(...), ct="web", backend="lxc")
                                              lxc-attach on a remote host
    Cached(inner)                             reads, listings and isdir answered once (single-flight)
    Failing("pve1/200", "no route to host")   every call fails with that reason

Commands are argv lists everywhere; only an SSH transport joins them, with
shlex.join, at its own boundary. A failed command is a Result, not an
exception; a file that cannot be read is an OSError.
"""

from __future__ import annotations

import errno
import os
import stat as st_mod
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from .errors import CommandFailed
from .facts import FACTS, node_from_stat, parse_stat_lines
from .model import DeviceNode, Result

# A config or an include is a few KB; /proc/self/mountinfo of a busy host a few hundred.
MAX_READ = 16 * 1024 * 1024

# `stat -c` format facts.parse_stat_lines reads (hex major/minor and mode).
STAT_FORMAT = "%F|%t|%T|%f|%u|%g|%n"

# What a command inside a container sees of lxcfix's environment: this, and nothing else.
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTAINER_ENV = {"PATH": CONTAINER_PATH, "LC_ALL": "C"}


class Transport(Protocol):
    """Everything callers may use of a host or a container.

    name: how reports call it. local: its files are on this machine (local_path()
    gives the path here, worker processes may read them); False for SSH and containers.
    """

    name: str
    local: bool

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        """argv run there. max_output: bytes of stdout (and of stderr) to take, for a
        command whose output is known to be big (a sweep); None: the transport's own cap."""
        ...

    def read(self, path: str) -> bytes:
        """A regular file's bytes (at most MAX_READ); OSError when missing,
        unreadable, too big or not a regular file (a FIFO would block forever)."""
        ...

    def listdir(self, path: str) -> list[str]: ...

    def isdir(self, path: str) -> bool: ...

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        """paths None: every char/block node under /dev (links there followed:
        /dev/serial/by-id, /dev/dri/by-path). Else the device nodes at these paths,
        symlinks NOT followed (a mount source may sit where a tenant can write)."""
        ...

    def local_path(self, path: str) -> str:
        """Where `path` is on this machine (local transports only)."""
        ...

    def close(self) -> None: ...


def check(transport: Transport, argv: Sequence[str], **kw) -> Result:
    """run(), raising CommandFailed on a non-zero exit."""
    result = transport.run(argv, **kw)
    if not result.ok:
        raise CommandFailed(argv, result)
    return result


def read_regular(path: str, limit: int = MAX_READ) -> bytes:
    """A local regular file's bytes: opened without blocking (a FIFO must not
    hang a scan), checked to be a regular file, read up to `limit`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not st_mod.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _walk_nodes(real_top: str, shown_top: str) -> dict[str, DeviceNode]:
    """Every device node under top, by the path the host names it (links followed)."""
    out: dict[str, DeviceNode] = {}
    for dirpath, dirnames, filenames in os.walk(real_top):
        dirnames[:] = [d for d in dirnames if d not in ("pts", "shm", "mqueue", "hugepages")]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            real = os.path.join(dirpath, name)
            try:
                info = os.stat(real)
            except OSError:
                continue
            shown = shown_top + real[len(real_top):]
            if (node := node_from_stat(shown, info)) is not None:
                out[shown] = node
    return out


def _lstat_nodes(paths: Sequence[str], local) -> dict[str, DeviceNode]:
    out = {}
    for p in paths:
        try:
            info = os.lstat(local(p))
        except OSError:
            continue
        if (node := node_from_stat(p, info)) is not None:
            out[p] = node
    return out


class _Commands:
    """device_nodes() for transports that only run commands (SSH, a container)."""

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        if paths is None:
            fact = FACTS["dev_nodes"]
            return fact.parse(self.run(list(fact.run), timeout=60).stdout)  # type: ignore[attr-defined]
        if not paths:
            return {}
        result = self.run(["stat", "-c", STAT_FORMAT, "--", *paths], timeout=60)  # type: ignore[attr-defined]
        return parse_stat_lines(result.stdout)

    def local_path(self, path: str) -> str:
        raise OSError(errno.EREMOTE, "not on this machine", path)

    def close(self) -> None:
        pass


@dataclass
class Local:
    """The machine lxcfix runs on. overrides: a host path read from another file
    (LXCFIX_PROC_DEVICES: majors from a saved /proc/devices)."""

    name: str = "localhost"
    overrides: dict[str, str] = field(default_factory=dict)
    local = True

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None, env: dict[str, str] | None = None) -> Result:
        try:
            proc = subprocess.run(
                list(argv), input=input, capture_output=True, text=True,
                errors="surrogateescape", timeout=timeout, env=env,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return Result(127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return Result(124, "", f"{argv[0]}: timed out after {timeout}s")
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def local_path(self, path: str) -> str:
        return self.overrides.get(path, path)

    def read(self, path: str) -> bytes:
        return read_regular(self.local_path(path))

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        if paths is None:
            return _walk_nodes("/dev", "/dev")
        return _lstat_nodes(paths, self.local_path)

    def close(self) -> None:
        pass


@dataclass
class RootDir:
    """A host snapshot: a directory laid out like the host's root.

    Reads map `/etc/pve/lxc/200.conf` to `<root>/etc/pve/lxc/200.conf`.
    Commands do not run; a snapshot may carry their output as
    `<root>/.lxcfix/<command>` (for example `.lxcfix/pveversion` holds
    `pveversion -v`), which run() returns.
    """

    root: str
    name: str = "snapshot"
    local = True

    def local_path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    path = local_path

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        name = os.path.basename(argv[0])
        try:
            return Result(0, read_regular(os.path.join(self.root, ".lxcfix", name)).decode("utf-8", "surrogateescape"), "")
        except OSError:
            return Result(127, "", f"{name}: not in the host snapshot")

    def read(self, path: str) -> bytes:
        return read_regular(self.local_path(path))

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self.local_path(path)))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.local_path(path))

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        if paths is None:
            return _walk_nodes(self.local_path("/dev"), "/dev")
        return _lstat_nodes(paths, self.local_path)

    def close(self) -> None:
        pass


@dataclass
class ContainerExec(_Commands):
    """Runs commands inside a container, through the transport of its host, with
    lxc-attach. Nothing of lxcfix's environment goes in: --clear-env, then only
    CONTAINER_ENV. A Proxmox container is the LXC container named by its vmid:
    `pct exec` is this same lxc-attach, but keeps pct's environment unless told
    `--keep-env 0` (pve-container's default, which older releases lack)."""

    inner: Transport
    ct: str
    backend: str  # "pve" | "lxc": whose container (both are entered the same way)
    lxcpath: str | None = None  # lxc-attach -P, when not the default
    local = False

    @property
    def name(self) -> str:
        return f"{self.inner.name}/{self.ct}"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        where = ["-P", self.lxcpath] if self.lxcpath else []
        keep = [arg for k, v in CONTAINER_ENV.items() for arg in ("--set-var", f"{k}={v}")]
        return ["lxc-attach", "-n", self.ct, *where, "--clear-env", *keep, "--", *argv]

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        return self.inner.run(self.wrap(argv), input=input, timeout=timeout, max_output=max_output)

    def read(self, path: str) -> bytes:
        result = self.run(["cat", "--", path])
        if not result.ok:
            raise FileNotFoundError(errno.ENOENT, result.tail(), path)
        return result.stdout.encode("utf-8", "surrogateescape")

    def listdir(self, path: str) -> list[str]:
        result = self.run(["ls", "-1A", "--", path])
        if not result.ok:
            raise FileNotFoundError(errno.ENOENT, result.tail(), path)
        return sorted(n for n in result.stdout.split("\n") if n)

    def isdir(self, path: str) -> bool:
        return self.run(["test", "-d", path]).ok


@dataclass
class Failing(_Commands):
    """A host or container that cannot be used: every command fails with the
    reason (exit 255) and every read raises it, so the caller reports that one
    target and goes on."""

    name: str
    reason: str
    local = False

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        return Result(255, "", self.reason)

    def read(self, path: str) -> bytes:
        raise OSError(errno.EHOSTUNREACH, self.reason, path)

    def listdir(self, path: str) -> list[str]:
        raise OSError(errno.EHOSTUNREACH, self.reason, path)

    def isdir(self, path: str) -> bool:
        raise OSError(errno.EHOSTUNREACH, self.reason, path)

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        raise OSError(errno.EHOSTUNREACH, self.reason, "/dev")


class Cached:
    """A transport for the length of one scan: file reads (not /proc, /sys, /dev),
    listings and isdir answers are fetched once, also when several threads ask at
    the same moment (single-flight); commands always run."""

    _VOLATILE = ("/proc/", "/sys/", "/dev/")

    def __init__(self, inner: Transport):
        self.inner = inner
        self.name = inner.name
        self.local = inner.local
        self._done: dict[tuple[str, str], tuple[bool, object]] = {}
        self._pending: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def _once(self, kind: str, path: str, fn):
        key = (kind, path)
        while True:
            with self._lock:
                if key in self._done:
                    ok, value = self._done[key]
                    break
                waiting = self._pending.get(key)
                if waiting is None:
                    self._pending[key] = threading.Event()
            if waiting is not None:
                waiting.wait()
                continue
            try:
                ok, value = True, fn(path)
            except OSError as e:
                ok, value = False, e
            with self._lock:
                self._done[key] = (ok, value)
                self._pending.pop(key).set()
            break
        if not ok:
            raise value  # type: ignore[misc]
        return value

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        return self.inner.run(argv, input=input, timeout=timeout, max_output=max_output)

    def read(self, path: str) -> bytes:
        if path.startswith(self._VOLATILE):
            return self.inner.read(path)
        return self._once("read", path, self.inner.read)  # type: ignore[return-value]

    def listdir(self, path: str) -> list[str]:
        return list(self._once("listdir", path, self.inner.listdir))  # type: ignore[call-overload]

    def isdir(self, path: str) -> bool:
        return self._once("isdir", path, self.inner.isdir)  # type: ignore[return-value]

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        return self.inner.device_nodes(paths)

    def local_path(self, path: str) -> str:
        return self.inner.local_path(path)

    def close(self) -> None:
        self.inner.close()


class Prefetched:
    """A transport answering from what one sweep brought back (sweep.Answers),
    and asking `inner` for anything the sweep did not cover: a file it did not
    read, a command it did not run. A path below a directory the sweep read
    whole, and not in it, does not exist (no second trip to find that out)."""

    def __init__(self, inner: Transport, answers):
        self.inner = inner
        self.name = inner.name
        self.local = inner.local
        self.answers = answers

    def _absent(self, path: str) -> bool:
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in self.answers.complete)

    @staticmethod
    def _norm(path: str) -> str:
        return path.rstrip("/") or "/"

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        hit = self.answers.runs.get(tuple(argv)) if input is None else None
        return hit if hit is not None else self.inner.run(argv, input=input, timeout=timeout, max_output=max_output)

    def read(self, path: str) -> bytes:
        a = self.answers
        path = self._norm(path)
        if path in a.files:
            return a.files[path]
        if path in a.errors:
            why = a.errors[path]
            code = errno.ENOENT if "No such file" in why else errno.EINVAL if "regular file" in why else errno.EIO
            raise OSError(code, why, path)
        if a.isdir.get(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if self._absent(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return self.inner.read(path)

    def listdir(self, path: str) -> list[str]:
        a = self.answers
        path = self._norm(path)
        if path in a.dirs:
            return list(a.dirs[path])
        if a.isdir.get(path) is False or path in a.errors or self._absent(path):
            raise FileNotFoundError(errno.ENOENT, a.errors.get(path, "No such file or directory"), path)
        return self.inner.listdir(path)

    def isdir(self, path: str) -> bool:
        a = self.answers
        path = self._norm(path)
        if path in a.isdir:
            return a.isdir[path]
        if path in a.files or path in a.errors or self._absent(path):
            return False
        return self.inner.isdir(path)

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        a = self.answers
        if paths is None and a.walked:
            return {p: DeviceNode(p, *n) for p, n in a.nodes.items() if p.startswith("/dev/")}
        if paths is not None and set(paths) <= a.lstated:
            return {p: DeviceNode(p, *a.nodes[p]) for p in paths if p in a.nodes}
        return self.inner.device_nodes(paths)

    def local_path(self, path: str) -> str:
        return self.inner.local_path(path)

    def close(self) -> None:
        self.inner.close()


def env_path(var: str, default: str) -> str:
    """A path the tests may move (LXCFIX_PVE_DIR, LXCFIX_STATE_DIR, LXCFIX_LOCK_DIR)."""
    return os.environ.get(var) or default
