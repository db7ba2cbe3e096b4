"""Files lxcfix writes, and its own state: the atomic write of a target file (temp file
beside it, created exclusively and never through a symlink, fsynced, read back, compared
by digest, renamed, the directory fsynced), the checks of a directory about to take a
file (check_room, check_writable_dir: writable, room, without creating anything), and the
state dir (StateDir: opened part by part without following symlinks), its journal and
its backups.

    write_atomic("/etc/pve/lxc/200.conf", new, "pve", expect_digest=old_digest)
    StateDir("/var/lib/lxcfix").check("backups", "200", need=len(old))   # StateError when unusable
    Backups(StateDir("/var/lib/lxcfix"), "200").save(old, digest) -> ".../backups/200/<time>-<digest>.conf"
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import stat
from typing import Callable

from . import ctconfig
from .errors import ApplyFailed, Refused, StateError
from .transport import read_regular

KEEP_BACKUPS = 20


# ---------------------------------------------------------------- files

def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_room(fd: int, need: int, error: Callable[[str], Exception]) -> None:
    """The directory `fd` can take a new file of `need` bytes (and a journal line): not on a
    read-only filesystem, writable, and the filesystem has the blocks (and an inode) free.
    Raises error(why) with why as the kernel would say it ("No space left on device")."""
    st = os.fstatvfs(fd)
    if st.f_flag & os.ST_RDONLY:
        raise error(os.strerror(errno.EROFS))
    if not os.access(".", os.W_OK, dir_fd=fd):
        raise error(os.strerror(errno.EACCES))
    block = st.f_frsize or st.f_bsize or 4096
    blocks = -(-need // block) + 1  # the file's blocks, and one for the journal line or a directory
    if st.f_blocks and st.f_bavail < blocks:
        raise error(f"{os.strerror(errno.ENOSPC)} ({st.f_bavail * block} bytes free, {blocks * block} needed)")
    if st.f_files and st.f_favail < 2:
        raise error(f"{os.strerror(errno.ENOSPC)} (no free inode)")


def check_writable_dir(directory: str, need: int, error: Callable[[str], Exception]) -> None:
    """A file of `need` bytes can be created in `directory`, or, when it does not exist yet,
    in the nearest directory above it that does (os.makedirs creates the rest)."""
    d = os.path.abspath(directory or ".")
    while True:
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            break
        except FileNotFoundError:
            if d == os.path.dirname(d):
                raise error(os.strerror(errno.ENOENT)) from None
            d = os.path.dirname(d)
        except OSError as e:
            raise error(e.strerror or str(e)) from None
    try:
        check_room(fd, need, error)
    finally:
        os.close(fd)


def read_file(path: str) -> bytes | None:
    """A config's bytes now (None when absent); a FIFO or device is refused."""
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None


def write_atomic(path: str, data: bytes, flavor: str | None = None, expect_digest: str | None = None,
                 mode: int | None = None, on_temp: Callable[[], None] | None = None) -> None:
    """`path` gets `data`, atomically: temp file beside it (created exclusively,
    never through a symlink), fsync, read back (and re-parse, for a container
    config of `flavor`), compare-and-swap on `expect_digest` (the SHA-1 `path`
    must hold now; of b"" when it must be absent), rename, fsync the directory.
    mode: for a new file; an existing file keeps its mode and owner."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.lxcfix-{os.getpid()}.tmp")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    try:
        os.unlink(tmp)  # a leftover of a killed run with this pid (unlink never follows a link)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            if mode is not None or st is not None:
                os.fchmod(fd, mode if mode is not None else st.st_mode & 0o7777)
            if st is not None and os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)
            written = os.pread(fd, len(data) + 1, 0)
        finally:
            os.close(fd)
        if written != data or (flavor and ctconfig.serialize(ctconfig.parse(written, flavor)) != data):
            raise ApplyFailed(f"{tmp}: written bytes do not read back; nothing replaced")
        if on_temp is not None:
            on_temp()
        if expect_digest is not None:
            now = read_file(path)
            if ctconfig.digest(now or b"") != expect_digest:
                raise Refused(f"{path} changed while lxcfix was working (digest {ctconfig.digest(now or b'')[:12]}, "
                              f"expected {expect_digest[:12]}); nothing written, re-run to re-plan")
        os.replace(tmp, path)
        _fsync_dir(directory)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(path) or ".")


def remove_stale_temps(path: str) -> list[str]:
    """Temp files an apply killed mid-write left beside the config."""
    directory, name = os.path.split(path)
    removed = []
    try:
        entries = os.listdir(directory or ".")
    except OSError:
        return removed
    for entry in entries:
        if not (entry.startswith(f".{name}.lxcfix-") and entry.endswith(".tmp")):
            continue
        pid = entry[len(f".{name}.lxcfix-"):-4]
        if pid.isascii() and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            os.unlink(os.path.join(directory, entry))
            removed.append(entry)
    return removed


# ---------------------------------------------------------------- the state dir

class StateDir:
    """lxcfix's own state (backups, journal): `root`, whose parts below `trusted`
    are opened one by one without following symlinks, created 0700 as needed.
    A host snapshot's state dir lies inside the snapshot, whose files are data,
    not instructions: a planted symlink there makes the write fail, it never
    sends it elsewhere."""

    def __init__(self, root: str, trusted: str | None = None):
        self.root = os.path.abspath(root)
        self.trusted = os.path.abspath(trusted) if trusted else os.path.dirname(self.root)

    def _parts(self, *sub: str) -> list[str]:
        rel = os.path.relpath(self.root, self.trusted)
        parts = [] if rel == "." else rel.split(os.sep)
        return parts + [p for s in sub for p in s.split("/") if p]

    def open_dir(self, *sub: str, create: bool = True) -> int:
        """An fd of root/sub..., every part below `trusted` opened with O_NOFOLLOW."""
        try:
            fd = os.open(self.trusted, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise StateError(f"state dir {self.root}: {self.trusted}: {e.strerror or e}") from None
        for part in self._parts(*sub):
            if part in ("..", "."):
                os.close(fd)
                raise StateError(f"state dir {self.root}: bad path part {part!r}")
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as e:
                    os.close(fd)
                    raise StateError(f"state dir {self.root}: cannot create {part}: {e.strerror or e}") from None
            except OSError as e:
                os.close(fd)
                why = "a symlink or not a directory" if e.errno in (errno.ELOOP, errno.ENOTDIR) else (e.strerror or e)
                raise StateError(f"state dir {self.root}: {part} is {why}; refusing to follow it") from None
            os.close(fd)
            fd = nxt
        return fd

    def path(self, *sub: str) -> str:
        return os.path.join(self.root, *sub)

    def check(self, *sub: str, need: int = 0, what: str = "") -> None:
        """Without creating anything: root/sub... can be used as open_dir(create=True) would
        use it (each part below `trusted` a directory, not a symlink, or absent and then
        creatable), the deepest one that exists is writable, and its filesystem has room
        for `need` bytes and a journal line. StateError, saying so, when not."""
        what = what or f"state dir {self.root}"
        try:
            fd = os.open(self.trusted, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise StateError(f"state dir {self.root}: {self.trusted}: {e.strerror or e}") from None
        try:
            for part in self._parts(*sub):
                if part in ("..", "."):
                    raise StateError(f"state dir {self.root}: bad path part {part!r}")
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    break  # the run creates it (0700) in the directory fd is
                except OSError as e:
                    why = "a symlink or not a directory" if e.errno in (errno.ELOOP, errno.ENOTDIR) else \
                        (e.strerror or e)
                    raise StateError(f"state dir {self.root}: {part} is {why}; refusing to follow it") from None
                os.close(fd)
                fd = nxt
            check_room(fd, need, lambda why: StateError(f"{what}: {why}; nothing changed"))
        finally:
            os.close(fd)


def _exists_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


class Journal:
    """One JSON line per event: what changed, when, the backup, the outcome."""

    def __init__(self, state: StateDir | str):
        self.state = state if isinstance(state, StateDir) else StateDir(state)
        self.path = self.state.path("journal.jsonl")

    def record(self, **event) -> None:
        event = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), **event}
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        dfd = self.state.open_dir()
        try:
            fd = os.open("journal.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        except OSError as e:
            raise StateError(f"journal {self.path}: {e.strerror or e}") from None
        finally:
            os.close(dfd)
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as e:
            raise StateError(f"journal {self.path}: {e.strerror or e}") from None
        finally:
            os.close(fd)

    def check(self) -> None:
        """The journal can be appended to: its directory usable (StateDir.check), the file a
        regular file when it exists (never a symlink: record() would refuse to follow it)."""
        self.state.check(what=f"journal {self.path}")
        dfd = self.state.open_dir(create=False) if _exists_dir(self.state.root) else None
        if dfd is None:
            return
        try:
            st = os.stat("journal.jsonl", dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(dfd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"journal {self.path}: not a regular file (a symlink?); refusing to follow it; "
                             "nothing changed")

    def entries(self) -> list[dict]:
        try:
            data = read_file(self.path) or b""
        except OSError:
            return []
        out = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class Backups:
    """<state>/<kind>/<name>/<UTC timestamp>-<digest>.conf, mode 0600, newest KEEP_BACKUPS kept.
    kind "backups" holds containers' configs (by ct), "host-unit" the host's own files."""

    def __init__(self, state: StateDir | str, name: str, kind: str = "backups"):
        self.state = state if isinstance(state, StateDir) else StateDir(state)
        self.sub = (kind, name)
        self.dir = self.state.path(kind, name)

    def save(self, data: bytes, digest: str) -> str:
        """Write, fsync, read back and compare: a backup that is not whole is no backup."""
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{digest[:12]}.conf"
        dfd = self.state.open_dir(*self.sub)
        try:
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
            except OSError as e:
                raise StateError(f"cannot create a backup in {self.dir}: {e.strerror or e}; nothing changed") from None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                back = os.pread(fd, len(data) + 1, 0)
            except OSError as e:
                os.close(fd)
                fd = -1
                os.unlink(name, dir_fd=dfd)
                raise StateError(f"cannot write the backup {os.path.join(self.dir, name)}: {e.strerror or e}; "
                                 "nothing changed") from None
            finally:
                if fd >= 0:
                    os.close(fd)
            if len(back) != len(data) or ctconfig.digest(back) != digest:
                os.unlink(name, dir_fd=dfd)
                raise StateError(f"the backup in {self.dir} does not read back whole; nothing changed")
            os.fsync(dfd)
            for old in sorted(n for n in os.listdir(dfd) if n.endswith(".conf"))[:-KEEP_BACKUPS]:
                os.unlink(old, dir_fd=dfd)
        finally:
            os.close(dfd)
        return os.path.join(self.dir, name)

    def list(self) -> list[str]:
        try:
            dfd = self.state.open_dir(*self.sub, create=False)
        except (FileNotFoundError, StateError):
            return []
        try:
            return [os.path.join(self.dir, n) for n in sorted(os.listdir(dfd)) if n.endswith(".conf")]
        finally:
            os.close(dfd)

    def latest(self) -> str | None:
        found = self.list()
        return found[-1] if found else None

    def owns(self, path: str) -> bool:
        """True when `path` is one of these backups (by name, in this directory)."""
        return os.path.dirname(os.path.abspath(path)) == self.dir and os.path.abspath(path) in self.list()

    def read(self, path: str) -> bytes:
        """A backup's bytes, read without following a link."""
        dfd = self.state.open_dir(*self.sub, create=False)
        try:
            return read_regular(os.path.basename(path), dir_fd=dfd, follow=False)
        finally:
            os.close(dfd)



__all__ = [
    "KEEP_BACKUPS", "Backups", "Journal", "StateDir", "check_room", "check_writable_dir", "read_file",
    "remove_file", "remove_stale_temps", "write_atomic",
]
