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

Every run() is bounded: at most `max_output` bytes of stdout and of stderr are read
(Local: MAX_OUTPUT unless told; Ssh: SshOptions.max_output unless told) and the command gets
`timeout` seconds; past either, reading stops and the command is killed (on this
machine its whole process group): Result(125, ..., truncated="stdout") or
Result(124, ...). What runs inside a container (ContainerExec) gets a tighter cap,
container_output_max() (1 MiB; LXCFIX_PROBE_MAX_OUTPUT): a tenant's python3 that
is `cat /dev/zero` costs the host 1 MiB, not its memory.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import stat as st_mod
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from .bounded import excerpt
from .errors import BadInput, CommandFailed
from .facts import FACTS, node_from_stat, parse_stat_lines
from .model import HOST_PYTHON, DeviceNode, Result

# A config or an include is a few KB; /proc/self/mountinfo of a busy host a few hundred.
MAX_READ = 16 * 1024 * 1024
# What one host command may print (bpftool's JSON, `find /dev -exec stat`: well under this).
MAX_OUTPUT = 16 * 1024 * 1024
# What one command inside a container may print, and how long it may take (probe deadline).
CONTAINER_OUTPUT_MAX = 1024 * 1024
CONTAINER_TIMEOUT = 30.0
# A command that exited while something it started still holds its output open: this long, then it is killed.
EXIT_GRACE = 2.0

# `stat -c` format facts.parse_stat_lines reads (hex major/minor and mode).
STAT_FORMAT = "%F|%t|%T|%f|%u|%g|%n"

# What a command inside a container sees of lxcfix's environment: this, and nothing else.
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTAINER_ENV = {"PATH": CONTAINER_PATH, "LC_ALL": "C"}


class Transport(Protocol):
    """Everything callers may use of a host or a container.

    name: how reports call it. local: its files are on this machine (local_path()
    gives the path here, worker processes may read them); False for SSH and containers.
    A host's transport may name `python`, the interpreter lxcfix's helpers run with there
    (python_of() reads it).
    """

    name: str
    local: bool

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        """argv's Result. max_output: at most this many bytes of stdout, and of stderr, are
        read (None: the transport's own bound; a sweep takes more); past it, or past
        timeout, the command is killed (rc 125 with Result.truncated set, or rc 124)."""
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


def python_of(t: Transport) -> str:
    """The interpreter lxcfix's own helper processes (the sweep, the BPF and rootfs readers) run
    with on t's host: this process's own on this machine (Local.python: sys.executable), the
    inventory's ansible_python_interpreter or HOST_PYTHON over SSH (Ssh.python); never `python3`
    looked up on a PATH (a pyenv shim there costs a tenth of a second a start). A transport that
    names none (a container, a snapshot, a test's fake): HOST_PYTHON."""
    return getattr(t, "python", None) or HOST_PYTHON


def check(transport: Transport, argv: Sequence[str], **kw) -> Result:
    """run(), raising CommandFailed on a non-zero exit."""
    result = transport.run(argv, **kw)
    if not result.ok:
        raise CommandFailed(argv, result)
    return result


def read_regular(path: str, limit: int = MAX_READ, dir_fd: int | None = None, follow: bool = True) -> bytes:
    """A local regular file's bytes: opened without blocking (a FIFO must not
    hang a scan), checked to be a regular file, read up to `limit`. dir_fd and
    follow=False: a name in an open directory, never through a symlink (lxcfix's
    own state)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not st_mod.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks, size = [], 0
        while True:
            want = min(1 << 20, limit + 1 - size)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
            if len(chunk) < want and 0 < info.st_size <= size:
                break  # a short read at the size fstat gave: the end (a config is one read, not two)
        return b"".join(chunks)
    finally:
        os.close(fd)


class OutsideRoot(BadInput):
    """A path of a host snapshot (--root DIR) that leads out of DIR: a symlink to a directory
    elsewhere, or `..` above DIR. Refused (exit 2, one line): a snapshot's files are data,
    and nothing lxcfix reads or writes for it is outside it. why: the reason alone (RootDir.read
    raises it as an OSError: a file that cannot be read inside the snapshot is an unreadable
    file, judged as such)."""

    def __init__(self, message: str, why: str = ""):
        super().__init__(message)
        self.why = why or message


# Symlinks followed on one path at most (the kernel's limit, as openat2 counts them).
MAX_LINKS = 40


def resolve_in_root(root: str, path: str, follow_last: bool = True) -> str:
    """Where the host path `path` (/etc/pve/lxc/200.conf) is inside the snapshot `root` (a real
    path: no symlink in it), every symlink on the way resolved inside it, as
    openat2(RESOLVE_IN_ROOT) resolves them: a relative link from its own directory (Proxmox's
    etc/pve/lxc -> nodes/pve1/lxc), an absolute one that names a path under `root`. A link that
    leads anywhere else, or `..` above `root`, raises OutsideRoot; so does a loop. The path
    returned has no symlink in it (its last part is one only when follow_last is False); a part
    that does not exist ends the walk (the rest is taken as written, `..` included)."""
    shown = path
    todo = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    last = ""  # the last link followed, for the message

    def outside(why: str) -> OutsideRoot:
        return OutsideRoot(f"--root {root}: {excerpt(shown, 200)}: {why}, outside the snapshot; lxcfix reads and "
                           "writes only inside it (nothing changed)", f"{why}, outside the snapshot (not followed)")

    while todo:
        part = todo.pop(0)
        if part == "..":
            if not done:
                raise outside(last or "'..' leads above the snapshot's root")
            done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            info = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            for rest in [part] + todo:  # nothing there: no link below to follow
                if rest != "..":
                    done.append(rest)
                elif done:
                    done.pop()
                else:
                    raise outside(last or "'..' leads above the snapshot's root") from None
            break
        if not st_mod.S_ISLNK(info.st_mode) or (not todo and not follow_last):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OutsideRoot(f"--root {root}: {excerpt(shown, 200)}: more than {MAX_LINKS} symlinks on the way "
                              "(a loop); nothing changed", f"more than {MAX_LINKS} symlinks on the way (a loop)")
        target = os.readlink(here)
        last = f"/{excerpt('/'.join(done + [part]), 200)} is a symlink to {excerpt(target, 200)}"
        if target.startswith("/"):
            if target != root and not target.startswith(root.rstrip("/") + "/"):
                raise outside(last)
            target, done = target[len(root):], []
        todo = [p for p in target.split("/") if p not in ("", ".")] + todo
    return os.path.join(root, *done)


def _text(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", "surrogateescape")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the command's process group (it leads one: start_new_session), then reap it.
    Whatever it left behind in another group is on its own; lxcfix stops reading it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_bounded(argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
                limit: int = MAX_OUTPUT, env: dict[str, str] | None = None) -> Result:
    """argv on this machine, its output read as it comes, at most `limit` bytes of each
    stream. Past the limit: the process group is killed, Result(125, <the first `limit`
    bytes>, ..., truncated="stdout"|"stderr"). Past `timeout`: killed, rc 124. A command
    that exits while a child of it keeps the pipes open is given EXIT_GRACE seconds,
    then its group is killed (its exit status stands)."""
    argv = list(argv)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
    except FileNotFoundError:
        return Result(127, "", f"{argv[0]}: command not found")
    except OSError as e:
        return Result(126, "", f"{argv[0]}: {e.strerror or e}")
    deadline = None if timeout is None else time.monotonic() + timeout
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    names = {out_fd: "stdout", err_fd: "stderr"}
    pending = memoryview(input.encode("utf-8", "surrogateescape")) if input is not None else None
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        try:
            while sel.get_map():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    _kill_group(proc)
                    return Result(124, _text(bufs[out_fd]), _text(bufs[err_fd]) + f"{argv[0]}: timed out after {timeout}s")
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at >= EXIT_GRACE:
                    _kill_group(proc)  # the command is done; what it left running is not waited for
                    break
                wait = 0.5 if deadline is None else min(0.5, deadline - now)
                for key, _ in sel.select(max(wait, 0.0)):
                    fd = key.fd
                    if fd not in bufs:  # stdin
                        try:
                            pending = pending[os.write(fd, pending):]
                        except (BrokenPipeError, OSError):
                            pending = pending[:0]
                        if not pending:
                            sel.unregister(fd)
                            proc.stdin.close()
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    buf = bufs[fd]
                    buf += chunk
                    if len(buf) > limit:
                        del buf[limit:]
                        _kill_group(proc)
                        what = names[fd]
                        return Result(125, _text(bufs[out_fd]),
                                      _text(bufs[err_fd]) + f"{argv[0]}: output exceeded {limit} bytes on {what}; stopped",
                                      truncated=what)
        finally:
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        rc = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return Result(124, _text(bufs[out_fd]), _text(bufs[err_fd]) + f"{argv[0]}: timed out after {timeout}s")
    return Result(rc, _text(bufs[out_fd]), _text(bufs[err_fd]))


def _walk_nodes(real_top: str, shown_top: str, stat=None) -> dict[str, DeviceNode]:
    """Every device node under top, by the path the host names it (links followed; `stat`:
    how a shown path is stat()ed, for a snapshot inside it); also what is there but is no
    node (facts.NOT_NODES: a regular file, a directory, a symlink to nothing), which gather
    keeps apart."""
    out: dict[str, DeviceNode] = {}
    for dirpath, dirnames, filenames in os.walk(real_top):
        dirnames[:] = [d for d in dirnames if d not in ("pts", "shm", "mqueue", "hugepages")]
        for name in filenames + dirnames:
            real = os.path.join(dirpath, name)
            shown = shown_top + real[len(real_top):]
            try:
                info = os.stat(real) if stat is None else stat(shown)
            except FileNotFoundError:
                if os.path.islink(real):
                    out[shown] = DeviceNode(shown, "l", 0, 0, 0)
                continue
            except (OSError, OutsideRoot):
                continue
            if (node := node_from_stat(shown, info, odd=True)) is not None:
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
    """device_nodes(), listdir() and isdir() for transports that only run commands (SSH, a
    container); each may answer them its own way instead (Ssh does)."""

    def listdir(self, path: str) -> list[str]:
        result = self.run(["ls", "-1A", "--", path])  # type: ignore[attr-defined]
        if not result.ok:
            raise FileNotFoundError(errno.ENOENT, result.tail(), path)
        return sorted(n for n in result.stdout.split("\n") if n)

    def isdir(self, path: str) -> bool:
        return self.run(["test", "-d", path]).ok  # type: ignore[attr-defined]

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        if paths is None:
            fact = FACTS["dev_nodes"]
            return parse_stat_lines(self.run(list(fact.run), timeout=60).stdout, odd=True)  # type: ignore[attr-defined]
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
    python: str = field(default_factory=lambda: sys.executable or HOST_PYTHON)  # python_of()
    local = True

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None, env: dict[str, str] | None = None) -> Result:
        return run_bounded(argv, input=input, timeout=timeout,
                           limit=MAX_OUTPUT if max_output is None else max_output, env=env)

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

    Reads map `/etc/pve/lxc/200.conf` to `<root>/etc/pve/lxc/200.conf`, and so do writes
    (local_path): every path is resolved inside root (resolve_in_root: a symlink is followed
    only while it stays inside; one that leads out raises OutsideRoot, exit 2).
    Commands do not run; a snapshot may carry their output as
    `<root>/.lxcfix/<command>` (for example `.lxcfix/pveversion` holds
    `pveversion -v`), which run() returns.
    """

    root: str
    name: str = "snapshot"
    local = True
    _dirs: dict = field(default_factory=dict, repr=False, compare=False)  # _file_path's resolved directories
    _absent: set = field(default_factory=set, repr=False, compare=False)  # has_dir's missing directories

    def __post_init__(self) -> None:
        self.root = os.path.realpath(self.root)  # the admin's own path; links below it are the snapshot's

    def local_path(self, path: str) -> str:
        return resolve_in_root(self.root, path)

    path = local_path

    def has_dir(self, path: str) -> bool:
        """Whether `path` is a directory in the snapshot (resolved inside it). A directory found
        missing is remembered with everything under it: a scan asks for /var/lib/lxc/<ct>/rootfs
        of every container of a snapshot that has no /var/lib/lxc, once."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        plain = ".." not in parts
        ancestors = ["/" + "/".join(parts[:i]) for i in range(1, len(parts))] if plain else []
        if any(a in self._absent for a in ancestors):
            return False
        if os.path.isdir(self.local_path(path)):
            return True
        for a in ancestors:
            if not os.path.isdir(self.local_path(a)):
                if len(self._absent) < 4096:
                    self._absent.add(a)
                break
        return False

    def _file_path(self, path: str) -> str:
        """local_path(path) for a file to read: its directory resolved once per snapshot (a scan
        reads thousands of configs from the same few directories; a snapshot is the admin's own
        copy, not changed under a scan), its last part checked each time; a link there, or a
        directory that is not one, goes the whole way through resolve_in_root."""
        head, _, name = path.rpartition("/")
        if name in ("", ".", ".."):
            return resolve_in_root(self.root, path)
        base = self._dirs.get(head)
        if base is None:
            base = resolve_in_root(self.root, head or "/")
            if not os.path.isdir(base):
                return resolve_in_root(self.root, path)
            if len(self._dirs) < 4096:
                self._dirs[head] = base
        here = os.path.join(base, name)
        try:
            if st_mod.S_ISLNK(os.lstat(here).st_mode):
                return resolve_in_root(self.root, path)
        except OSError:
            pass  # nothing there: read_regular says so
        return here

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        name = os.path.basename(argv[0])
        try:
            text = read_regular(self.local_path(f"/.lxcfix/{name}"), MAX_OUTPUT if max_output is None else max_output,
                                follow=False)
            return Result(0, text.decode("utf-8", "surrogateescape"), "")
        except OSError:
            return Result(127, "", f"{name}: not in the host snapshot")
        except OutsideRoot as e:
            return Result(127, "", f"{name}: {e}")

    def read(self, path: str) -> bytes:
        """A file whose path leads out of the snapshot is not read: OSError(EXDEV), as openat2
        refuses it, so each file's reader judges it as it judges any unreadable file (a config:
        LXF131; /proc/devices: the facts fail). Directories that lead out raise OutsideRoot."""
        try:
            real = self._file_path(path)
        except OutsideRoot as e:
            raise OSError(errno.EXDEV, e.why, path) from None
        return read_regular(real, follow=False)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self.local_path(path)))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.local_path(path))

    def device_nodes(self, paths: Sequence[str] | None = None) -> dict[str, DeviceNode]:
        if paths is None:
            try:
                top = self.local_path("/dev")
            except OutsideRoot:
                return {}
            return _walk_nodes(top, "/dev", stat=lambda shown: os.stat(self.local_path(shown)))
        out = {}
        for p in paths:  # symlinks NOT followed at the last part; on the way, only inside the snapshot
            try:
                info = os.lstat(resolve_in_root(self.root, p, follow_last=False))
            except (OSError, OutsideRoot):
                continue
            if (node := node_from_stat(p, info)) is not None:
                out[p] = node
        return out

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
    limit: int | None = None  # bytes of stdout/stderr one command may print (None: container_output_max())
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
        """What a tenant's binaries print is read up to the cap, and the command killed past
        it (Local and Ssh both stop there); what comes back is cut to the cap again here,
        whatever the transport under it did."""
        cap = max_output if max_output is not None else (self.limit if self.limit is not None
                                                          else container_output_max())
        return capped(self.inner.run(self.wrap(argv), input=input, timeout=timeout, max_output=cap), cap)

    def read(self, path: str) -> bytes:
        result = self.run(["cat", "--", path], max_output=MAX_READ)
        if result.truncated:
            raise OSError(errno.EFBIG, f"larger than {MAX_READ} bytes", path)
        if not result.ok:
            raise FileNotFoundError(errno.ENOENT, result.tail(), path)
        return result.stdout.encode("utf-8", "surrogateescape")


@dataclass
class InnerExec(_Commands):
    """Runs commands inside a container that a container runs (Docker, Podman, runc: see
    lxcfix.nested), through the outer container's own exec: `docker exec NAME argv` run with
    lxc-attach --clear-env. The argv stays a list at every layer; the outer transport's cap and
    deadline bound it (a tenant's docker binary prints what it likes)."""

    outer: Transport
    inner: object  # nested.Inner
    local = False

    @property
    def name(self) -> str:
        return f"{self.outer.name}/{self.inner.label}"  # type: ignore[attr-defined]

    def wrap(self, argv: Sequence[str]) -> list[str]:
        from .nested import exec_argv

        return self.outer.wrap(exec_argv(self.inner, argv))  # type: ignore[attr-defined,arg-type]

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        from .nested import exec_argv

        return self.outer.run(exec_argv(self.inner, argv), input=input, timeout=timeout,  # type: ignore[arg-type]
                              max_output=max_output)

    def read(self, path: str) -> bytes:
        result = self.run(["cat", "--", path], max_output=MAX_READ)
        if result.truncated or not result.ok:
            raise OSError(errno.EFBIG if result.truncated else errno.ENOENT, result.tail(), path)
        return result.stdout.encode("utf-8", "surrogateescape")


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
        self.python = python_of(inner)
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


def answered(t, argv: Sequence[str]) -> bool:
    """Whether a sweep (a Prefetched transport, or one it wraps) holds argv's answer: running
    it costs no round trip."""
    while isinstance(t, Prefetched):
        if tuple(argv) in t.answers.runs:
            return True
        t = t.inner
    return False


class Prefetched:
    """A transport answering from what one sweep brought back (sweep.Answers),
    and asking `inner` for anything the sweep did not cover: a file it did not
    read, a command it did not run. A path below a directory the sweep read
    whole, and not in it, does not exist (no second trip to find that out)."""

    def __init__(self, inner: Transport, answers):
        self.inner = inner
        self.name = inner.name
        self.local = inner.local
        self.python = python_of(inner)
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


def capped(result: Result, limit: int) -> Result:
    """result with stdout and stderr cut to `limit` bytes each (a remote reply)."""
    if result.truncated:
        return result
    for name in ("stdout", "stderr"):
        data = getattr(result, name).encode("utf-8", "surrogateescape")
        if len(data) > limit:
            cut = data[:limit].decode("utf-8", "surrogateescape")
            fields = {"stdout": result.stdout, "stderr": result.stderr, name: cut}
            return Result(125, fields["stdout"], fields["stderr"], truncated=name)
    return result


def env_number(var: str, default, kind=int):
    """A positive number from the environment (a tuning knob), else the default."""
    text = os.environ.get(var, "").strip()
    if text and len(text) <= 12 and text.isascii():
        try:
            value = kind(text)
        except ValueError:
            return default
        if 0 < value < 1e9:
            return value
    return default


def container_output_max() -> int:
    """Bytes one command inside a container may print: LXCFIX_PROBE_MAX_OUTPUT, else 1 MiB."""
    return env_number("LXCFIX_PROBE_MAX_OUTPUT", CONTAINER_OUTPUT_MAX)


def container_timeout() -> float:
    """Seconds the probe of one container may take, and reading its files (observe.read_rootfs):
    LXCFIX_PROBE_TIMEOUT, else 30."""
    return env_number("LXCFIX_PROBE_TIMEOUT", CONTAINER_TIMEOUT, float)


def env_path(var: str, default: str) -> str:
    """A path the tests may move (LXCFIX_PVE_DIR, LXCFIX_STATE_DIR, LXCFIX_LOCK_DIR)."""
    return os.environ.get(var) or default
