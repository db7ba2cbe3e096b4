"""How commands reach a host or a container: one seam, `run(argv) -> Result`.

Transports compose rather than subclass:

    Local()                                  runs argv here
    ContainerExec(inner=Local(), ct="200", backend="pve")
                                             runs ["pct", "exec", "200", "--", *argv] through inner
    ContainerExec(inner=Ssh(...), ct="web", backend="lxc")
                                             runs ["lxc-attach", "-n", "web", "--", *argv] on a remote host

Commands are argv lists everywhere; only an SSH transport joins them, with
shlex.join, at its own boundary.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Protocol, Sequence

from .errors import CommandFailed
from .model import Result


class Transport(Protocol):
    name: str

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60) -> Result: ...

    def read(self, path: str) -> bytes:
        """Bytes of a file; raises FileNotFoundError / PermissionError / OSError."""
        ...


def check(transport: Transport, argv: Sequence[str], **kw) -> Result:
    """run(), raising CommandFailed on a non-zero exit."""
    result = transport.run(argv, **kw)
    if not result.ok:
        raise CommandFailed(argv, result)
    return result


@dataclass
class Local:
    """The machine lxcfix runs on."""

    name: str = "localhost"

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60) -> Result:
        try:
            proc = subprocess.run(
                list(argv), input=input, capture_output=True, text=True,
                errors="surrogateescape", timeout=timeout,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return Result(127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return Result(124, "", f"{argv[0]}: timed out after {timeout}s")
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def walk_dev(self, top: str = "/dev") -> list[tuple[str, os.stat_result]]:
        return _walk_nodes(top, top)


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

    def path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60) -> Result:
        name = os.path.basename(argv[0])
        try:
            with open(os.path.join(self.root, ".lxcfix", name), encoding="utf-8", errors="surrogateescape") as f:
                return Result(0, f.read(), "")
        except OSError:
            return Result(127, "", f"{name}: not in the host snapshot")

    def read(self, path: str) -> bytes:
        with open(self.path(path), "rb") as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self.path(path)))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.path(path))

    def walk_dev(self, top: str = "/dev") -> list[tuple[str, os.stat_result]]:
        return _walk_nodes(self.path(top), top)


def _walk_nodes(real_top: str, shown_top: str) -> list[tuple[str, os.stat_result]]:
    """(path as the host names it, stat following links) for every entry under top."""
    out = []
    for dirpath, dirnames, filenames in os.walk(real_top):
        dirnames[:] = [d for d in dirnames if d not in ("pts", "shm", "mqueue", "hugepages")]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            real = os.path.join(dirpath, name)
            try:
                st = os.stat(real)
            except OSError:
                continue
            out.append((shown_top + real[len(real_top):], st))
    return out


@dataclass
class ContainerExec:
    """Runs commands inside a container, through the transport of its host."""

    inner: Transport
    ct: str
    backend: str  # "pve" -> pct exec, "lxc" -> lxc-attach
    lxcpath: str | None = None  # lxc-attach -P, when not the default

    @property
    def name(self) -> str:
        return f"{self.inner.name}/{self.ct}"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        if self.backend == "pve":
            return ["pct", "exec", self.ct, "--", *argv]
        where = ["-P", self.lxcpath] if self.lxcpath else []
        return ["lxc-attach", "-n", self.ct, *where, "--", *argv]

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60) -> Result:
        return self.inner.run(self.wrap(argv), input=input, timeout=timeout)

    def read(self, path: str) -> bytes:
        result = self.run(["cat", "--", path])
        if not result.ok:
            raise FileNotFoundError(path)
        return result.stdout.encode("utf-8", "surrogateescape")


def env_path(var: str, default: str) -> str:
    """A path the tests may move (LXCFIX_PVE_DIR, LXCFIX_STATE_DIR, LXCFIX_LOCK_DIR)."""
    return os.environ.get(var) or default
