"""The one way lxcfix changes a host: a Transaction of steps.

    tx = Transaction("apply", [Lock(lock), Expect(path, digest), Backup(backups, before, digest),
                               Write(path, before, after, "pve"), Restart(backend, t, "200"), Verify(check)],
                     journal, {"host": "pve1", "ct": "200", "path": "/etc/pve/lxc/200.conf", ...})
    tx.describe()   -> ["lock /run/lock/lxc/pve-config-200.lock (Proxmox's own flock) ...", "back up ...", ...]
    tx.run()        -> TxResult(reached="verified", state={"backup": ".../backups/200/2026...-923f005d1757.conf"})

Steps run in order; each one that changes something is journaled as it is done
(<state>/journal.jsonl, one JSON line per event). On any failure, also an
exception nobody expected, the steps done are undone in reverse, a restart
last (once the files are back), and the error says what was put back (exit 4);
when undoing fails too, exactly what state things are in (exit 5). A failure
before anything changed is the failure itself (refused, exit 2; the state dir
unusable, exit 3). `--dry-run` prints describe() of the same transaction
(check mode: the same steps, their effects skipped).

Files: a write goes to a temp file beside the target (created exclusively, never
through a symlink), is fsynced, read back and, for a container config,
re-parsed, then compared-and-swapped by digest and renamed over the target; the
directory is fsynced. Killed at any point, the target holds the old bytes or the
new ones. Backups and the journal live under the state dir, whose paths are
opened without following symlinks; a backup is fsynced and read back before the
config is touched.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Sequence

from . import ctconfig
from .errors import ApplyFailed, CannotWrite, LxcfixError, Refused, RollbackFailed, StateError
from .transport import read_regular

KEEP_BACKUPS = 20


# ---------------------------------------------------------------- files

def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
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


def new_tx_id() -> str:
    return f"{time.time_ns():x}-{os.getpid()}-{os.urandom(3).hex()}"


# Journal events that end a run (its outcome); a run whose events stop before one was killed.
ENDS = frozenset({"done", "rolled-back", "rollback-failed"})


def runs(events: list[dict]) -> list[list[dict]]:
    """Journal events grouped by run (their "tx"), in the order the runs began. Events of
    journals older than the run id are one run each from a "backup" event to its end."""
    out: list[list[dict]] = []
    by_id: dict[str, list[dict]] = {}
    for e in events:
        key = e.get("tx")
        if key is not None:
            if key not in by_id:
                by_id[key] = []
                out.append(by_id[key])
            by_id[key].append(e)
        elif e.get("event") == "backup" or not out or out[-1][-1].get("event") in ENDS:
            out.append([e])
        else:
            out[-1].append(e)
    return out


def wait_until(check: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> bool:
    """Poll check() until it is true or time runs out (tenacity does the waiting)."""
    from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

    return Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                    retry=retry_if_result(lambda ok: not ok),
                    retry_error_callback=lambda state: False)(check)


# ---------------------------------------------------------------- steps

class UndoFailed(Exception):
    """An undo that did not work. state: what is true now, for the person who
    has to finish it; fatal: stop undoing (later undos would make it worse)."""

    def __init__(self, state: str, fatal: bool = True, step: str = ""):
        super().__init__(state)
        self.state, self.fatal, self.step = state, fatal, step


class Step:
    """One step. event: the journal event once done (the transaction adds its
    prefix); reached: what `step_reached` says once it is done; changes: undo
    matters once it ran; undo_last: undone after every other step."""

    event: str | None = None
    reached: str | None = None
    changes: bool = True
    undo_last: bool = False
    checkpoint: str | None = None

    def describe(self) -> str:
        raise NotImplementedError

    def do(self, tx: "Transaction") -> None:
        raise NotImplementedError

    def undo(self, tx: "Transaction") -> str | None:
        """What it put back (for the message); raises UndoFailed."""
        return None

    def changed(self, tx: "Transaction") -> bool:
        """Did it change something (so a failure must undo it)? Asked of steps that ran or failed."""
        return self.changes

    def release(self, tx: "Transaction") -> None:
        """Always, at the end (a lock)."""

    def fields(self, tx: "Transaction") -> dict:
        """Extra journal fields of its event."""
        return {}


@dataclass
class Lock(Step):
    """Proxmox's own flock on /run/lock/lxc/pve-config-<vmid>.lock (plain LXC: lxcfix's)."""

    path: str
    changes = False
    _fd: int | None = field(default=None, repr=False)

    def describe(self) -> str:
        return f"lock {self.path}"

    def do(self, tx) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise Refused(f"another process holds {self.path} (an apply, or Proxmox itself); "
                              "nothing changed, try again when it is done") from None
            raise
        self._fd = fd

    def release(self, tx) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class Expect(Step):
    """The file still holds what was planned (its digest), and no killed apply left a temp beside it."""

    path: str
    digest: str
    shown: str = ""
    checkpoint = "locked"
    changes = False

    def describe(self) -> str:
        return f"check {self.shown or self.path} still has digest {self.digest[:12]}"

    def do(self, tx) -> None:
        now = read_file(self.path)
        if ctconfig.digest(now or b"") != self.digest:
            raise Refused(f"{self.shown or self.path} changed since it was planned; nothing written, re-run to re-plan")
        remove_stale_temps(self.path)


@dataclass
class Backup(Step):
    """The current bytes, saved (and read back) before anything is written.
    data None: there is no file yet; nothing to save (undo removes the new one)."""

    backups: Backups
    data: bytes | None
    digest: str
    event = "backup"
    checkpoint = "backed-up"
    changes = False

    def describe(self) -> str:
        if self.data is None:
            return "nothing to back up: the file does not exist yet (undo removes it)"
        return f"back up to {self.backups.dir}/<time>-{self.digest[:12]}.conf (0600, fsynced, read back)"

    def do(self, tx) -> None:
        tx.state["backup"] = self.backups.save(self.data, self.digest) if self.data is not None else None
        tx.base["backup"] = tx.state["backup"]

    def fields(self, tx) -> dict:
        return {"created": True} if self.data is None else {}


@dataclass
class Write(Step):
    """path (on this machine) gets `after` atomically; undo puts `before` back
    (removes the file when there was none)."""

    path: str
    before: bytes | None
    after: bytes
    flavor: str | None = None
    shown: str = ""
    mode: int | None = None
    writer: Callable[..., None] | None = None  # write_atomic, or a caller's that wraps it
    event: str | None = "written"
    checkpoint: str | None = "written"
    temp_checkpoint: str = "temp-written"
    extra: dict = field(default_factory=dict)
    reached = "written"

    def describe(self) -> str:
        return f"write {self.shown or self.path} atomically (temp file, fsync, read back" + \
            (", re-parse" if self.flavor else "") + ", rename, fsync the directory)"

    def _write(self, data: bytes, **kw) -> None:
        (self.writer or write_atomic)(self.path, data, self.flavor, **kw)

    def do(self, tx) -> None:
        # None: not known yet; True: past the temp file, the rename may have happened; False:
        # the compare-and-swap refused, this write put nothing on disk (whatever is there now
        # is someone else's: a hand edit, another writer) and undo must not touch it.
        self._wrote: bool | None = None

        def temp_written() -> None:
            tx.checkpoint_at(self.temp_checkpoint)
            self._wrote = True

        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._write(self.after, expect_digest=ctconfig.digest(self.before or b""), mode=self.mode,
                        on_temp=temp_written)
        except Refused:
            self._wrote = False
            raise
        except OSError as e:  # a full or read-only disk: one line that says which file and why
            where = e.filename if isinstance(e.filename, str) else self.path
            raise CannotWrite(f"cannot write {self.shown or self.path}: {e.strerror or e} ({where})") from None

    def _now(self) -> bytes | None:
        try:
            return read_file(self.path)
        except OSError:
            return b""

    def changed(self, tx) -> bool:
        """Only what this write put there is its to undo: a file someone else changed while it
        waited (its compare-and-swap refused) is not, whatever it holds now."""
        if getattr(self, "_wrote", None) is False:
            return False
        return self._now() != self.before

    def undo(self, tx) -> str | None:
        if getattr(self, "_wrote", None) is False:
            return None  # nothing of it reached the disk
        backup = tx.state.get("backup")
        shown = self.shown or self.path
        now = self._now()
        if now == self.before:
            return None  # the write never happened
        if now != self.after:
            raise UndoFailed(f"{shown} was changed by someone else meanwhile (digest {ctconfig.digest(now or b'')[:12]}); "
                             f"lxcfix leaves it as it is. The content before lxcfix's change is in {backup}",
                             fatal=False, step="restore")
        try:
            if self.before is None:
                remove_file(self.path)
                return f"{self.path} removed (it did not exist before)"
            self._write(self.before)
        except Exception as e:
            kept = f"the old one is in {backup}" if backup else "there was none before (delete it)"
            raise UndoFailed(f"restoring {shown} failed too ({e}). State: {shown} holds the NEW content; {kept}."
                             + (f" Restore by hand: cp {backup} {self.path}" if backup else ""),
                             step="restore") from None
        return f"{shown} restored" + (f" from {backup}" if backup else "")

    def fields(self, tx) -> dict:
        return dict(self.extra)


@dataclass
class Restart(Step):
    """Stop the container if it runs, start it again if it ran when the
    transaction began (tx.state["was_running"]), wait until it runs. Undone
    last: once the old config is back, the container is restarted with it."""

    backend: object
    transport: object
    ct: str
    reached = "restarted"
    checkpoint = "restarted"
    undo_last = True

    def describe(self) -> str:
        return f"restart CT {self.ct} if it runs, wait until it is up"

    def cycle(self, tx) -> None:
        b, t = self.backend, self.transport
        if b.status(t, self.ct) == "running":
            r = b.stop(t, self.ct)
            if not r.ok:
                raise ApplyFailed(f"stopping {self.ct} failed: {r.tail()}")
            tx.checkpoint_at("stopped")  # killed here: `lxcfix rollback` starts it again (the journal says it ran)
        if tx.state.get("was_running"):
            r = b.start(t, self.ct)
            if not r.ok:
                raise ApplyFailed(f"starting {self.ct} with the new config failed: {r.tail()}")
            if not wait_until(lambda: b.status(t, self.ct) == "running"):
                raise ApplyFailed(f"{self.ct} did not reach 'running' after start")

    def do(self, tx) -> None:
        self.cycle(tx)

    def changed(self, tx) -> bool:
        return True

    def undo(self, tx) -> str | None:
        if not tx.state.get("was_running"):
            return None
        try:
            self.cycle(tx)
        except ApplyFailed as e:
            raise UndoFailed(f"the old config is back, but CT {self.ct} did not start with it: {e}. "
                             "State: config restored, container STOPPED. Check `lxc-start -F` / the container log.",
                             step="restart") from None
        return f"CT {self.ct} restarted with the old config"


@dataclass
class Live(Step):
    """The live operations of liveplan on the running container; undone by their opposites."""

    change: object  # apply.LiveChange
    reached = "changed-live"
    checkpoint = "changed-live"

    def describe(self) -> str:
        ops = self.change.ops
        parts = ([f"lxc-cgroup devices.allow '{r}'" for r in ops.allow]
                 + [f"lxc-device add {g.path}" for g in ops.create]
                 + [f"lxc-cgroup devices.deny '{r}'" for r in ops.deny])
        return f"change the running CT {self.change.ct}: " + "; ".join(parts)

    def do(self, tx) -> None:
        self.change.run()

    def changed(self, tx) -> bool:
        return bool(self.change.done)

    def undo(self, tx) -> str:
        c = self.change
        running = c.backend.status(c.transport, c.ct) == "running"
        if not running:
            return f"CT {c.ct} is STOPPED (it stopped during the apply); its config is the old one"
        errors = c.undo()
        if errors:
            raise UndoFailed(f"undoing the live change failed: {'; '.join(errors)}. State: CT {c.ct} runs with a "
                             "device program that differs from its config (LXF121); restart it to load the old "
                             "config.", fatal=False, step="live-undo")
        return f"CT {c.ct} still runs, without a restart, with its previous device rules"


@dataclass
class Status(Step):
    """Whether the container runs now (tx.state["was_running"], journaled with
    every event, so a rollback after a kill knows to start it again).
    need_running: refuse when it does not (a live change)."""

    backend: object
    transport: object
    ct: str
    need_running: bool = False
    changes = False

    def describe(self) -> str:
        return f"note whether CT {self.ct} runs" + (" (it must: the change is made live)" if self.need_running else "")

    def do(self, tx) -> None:
        running = self.backend.status(self.transport, self.ct) == "running"
        if self.need_running and not running:
            raise Refused(f"CT {self.ct} is not running: --live changes a running container; "
                          "apply without --live (nothing changed)")
        # force_start: a rollback after an apply was killed between stop and start
        tx.state["was_running"] = running or bool(tx.state.get("force_start"))
        tx.base["was_running"] = tx.state["was_running"]


@dataclass
class Verify(Step):
    """check() -> problems (findings or strings): any problem fails the transaction. The check
    says what a problem is (repair.verifier: what the codes' records say a verified change
    leaves none of, whatever its severity)."""

    check: Callable[[], list]
    what: str = "verify: probe inside and compare with the planned config"
    event: str | None = None
    reached: str | None = "verified"
    checkpoint: str | None = "verified"
    _result: dict = field(default_factory=dict, repr=False)
    changes = False

    def describe(self) -> str:
        return self.what

    def do(self, tx) -> None:
        problems = list(self.check())
        self._result["problems"] = [p if isinstance(p, str) else f"{p.code} {p.message}" for p in problems]
        if problems:
            raise ApplyFailed("verify failed: " + "; ".join(self._result["problems"]))

    def fields(self, tx) -> dict:
        return dict(self._result)


@dataclass
class Run(Step):
    """A host command (argv); undo_argv runs to undo it."""

    transport: object
    argv: Sequence[str]
    what: str
    undo_argv: Sequence[str] | None = None
    undo_last: bool = False
    reached: str | None = None

    def describe(self) -> str:
        return " ".join(self.argv)

    def _run(self, tx, argv) -> object:
        r = self.transport.run(list(argv), timeout=120)
        tx.journal_event("command", argv=list(argv), rc=r.rc)
        return r

    def do(self, tx) -> None:
        r = self._run(tx, self.argv)
        if not r.ok:
            raise ApplyFailed(f"{self.what} failed: `{' '.join(self.argv)}` exited {r.rc}: {r.tail()}")

    def undo(self, tx) -> str | None:
        if self.undo_argv is None:
            return None
        r = self._run(tx, self.undo_argv)
        if not r.ok:
            raise UndoFailed(f"`{' '.join(self.undo_argv)}` exited {r.rc}: {r.tail()}", fatal=False, step="command")
        return None


@dataclass
class TxResult:
    reached: str
    state: dict
    verified: bool = False


EVENTS = {"done": "done", "failed": "failed", "rolled-back": "rolled-back", "rollback-failed": "rollback-failed"}


class Transaction(Step):
    """Steps, run in order, undone in reverse on failure; journaled. A
    Transaction is itself a Step, so one can hold another (the hook heals the
    Proxmox config with the same apply transaction, then writes the config this
    start uses)."""

    # Fault injection for the tests that kill an apply at each step: set by a
    # wrapper around the CLI (tests/real/pausing.py), never in production.
    on_checkpoint: ClassVar[Callable[[str], None] | None] = None

    def __init__(self, what: str, steps: list[Step], journal: Journal | None, base: dict, *,
                 prefix: str = "", events: dict | None = None, state: dict | None = None):
        self.what = what
        self.steps = steps
        self.journal = journal
        # Every event of one run carries its id: `lxcfix rollback` reads which run took a
        # backup and whether the last run ended (a kill between stop and start did not).
        self.base = {"tx": new_tx_id(), **base}
        self.prefix = prefix
        self.events = {**EVENTS, **(events or {})}
        self.state = state if state is not None else {}
        self.done: list[Step] = []
        self.reached = None

    # -- journal and checkpoints

    def journal_event(self, event: str | None, **fields) -> None:
        if event is None or self.journal is None:
            return
        self.journal.record(event=self.prefix + event, **self.base, **fields)

    def _record(self, key: str, **fields) -> None:
        name = self.events.get(key)
        if name is None or self.journal is None:
            return
        if key == "done":
            self.journal.record(event=self.prefix + name, **self.base, **fields)
            return
        try:  # while failing or undoing, a journal that cannot be written must not stop the undo
            self.journal.record(event=self.prefix + name, **self.base, **fields)
        except (OSError, StateError):
            pass

    def checkpoint_at(self, name: str | None) -> None:
        hook = type(self).on_checkpoint
        if name and hook is not None:
            hook(self.prefix + name if self.prefix and not name.startswith(self.prefix) else name)

    # -- describe / run

    def describe(self) -> str:  # as a step of another transaction
        return "; ".join(self.describe_steps())

    def describe_steps(self) -> list[str]:
        out = []
        for s in self.steps:
            out += s.describe_steps() if isinstance(s, Transaction) else [s.describe()]
        return out

    def run(self) -> TxResult:
        step_name = "start"
        try:
            for step in self.steps:
                step_name = step.reached or step.event or type(step).__name__.lower()
                self.done.append(step)  # before it runs: a step that fails halfway is undone too
                if isinstance(step, Transaction):
                    step.run()
                else:
                    step.do(self)
                if step.event is not None:
                    self.journal_event(step.event, **step.fields(self))
                if step.reached is not None:
                    self.reached = step.reached
                self.checkpoint_at(step.checkpoint)
        except (Exception, KeyboardInterrupt) as e:
            try:
                return self._fail(e, step_name)
            finally:
                self._release()
        except BaseException:
            self._release()
            raise
        self._release()
        try:
            self._record("done", step=self.reached or "written")
        except StateError as e:
            raise StateError(f"{self.what} is done ({self.reached or 'written'}), and stays: only its last "
                             f"journal line could not be written ({e})") from None
        return TxResult(self.reached or "written", self.state, any(isinstance(s, Verify) for s in self.done))

    def _release(self) -> None:
        for s in reversed(self.steps):
            if not isinstance(s, Transaction):
                s.release(self)

    def _fail(self, e: BaseException, step: str) -> TxResult:
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else \
            str(e) if isinstance(e, LxcfixError) else f"{type(e).__name__}: {e}"
        failed = self.done[-1] if self.done else None
        if not any(s.changed(self) for s in self.done):
            self.done = []
            if isinstance(e, (LxcfixError, KeyboardInterrupt)):
                raise e
            raise StateError(f"{self.what} failed before changing anything: {why}; nothing changed") from None
        if isinstance(failed, Transaction) and not failed.done:
            self.done.pop()  # it rolled itself back already
        self._record("failed", step=step, error=why)
        summaries = self.undo_all(why)
        raise ApplyFailed(f"{why}\nrolled back: " + ("; ".join(summaries) or "nothing had changed")) from None

    def changed(self, tx=None) -> bool:
        return any(s.changed(self) for s in self.done)

    def undo(self, tx=None) -> str:
        """As a step of another transaction: undo what this one did."""
        return "; ".join(self.undo_all("a later step failed", record=False))

    release = Step.release

    def undo_all(self, why: str, record: bool = True) -> list[str]:
        """Undo the steps done, in reverse (undo_last ones at the end); the
        summaries in step order. Raises RollbackFailed with the state."""
        order = [s for s in reversed(self.done) if not s.undo_last] + \
                [s for s in reversed(self.done) if s.undo_last]
        summaries: dict[int, str] = {}
        soft: list[str] = []
        for s in order:
            try:
                text = s.undo(self)
            except UndoFailed as u:
                self._record("rollback-failed", step=u.step, error=u.state)
                if u.fatal:
                    raise RollbackFailed(f"{self.what} failed ({why}) and {self._so_far(summaries)}{u.state}") from None
                soft.append(u.state)
                continue
            except RollbackFailed:
                raise
            except Exception as x:
                self._record("rollback-failed", step=type(s).__name__.lower(), error=str(x))
                raise RollbackFailed(f"{self.what} failed ({why}) and undoing it failed too "
                                     f"({type(x).__name__}: {x}). {self._so_far(summaries)}") from None
            if text:
                summaries[self.steps.index(s)] = text
        if soft:
            raise RollbackFailed(f"{self.what} failed ({why}); {self._so_far(summaries)}but " + "; ".join(soft))
        if record:
            self._record("rolled-back")
        self.done = []
        return [summaries[i] for i in sorted(summaries)]

    @staticmethod
    def _so_far(summaries: dict[int, str]) -> str:
        return "".join(f"{summaries[i]}; " for i in sorted(summaries))


__all__ = [
    "ENDS", "runs", "new_tx_id",
    "Backup", "Backups", "Expect", "Journal", "Live", "Lock", "Restart", "Run", "StateDir", "Status", "Step",
    "Transaction", "TxResult", "UndoFailed", "Verify", "Write", "read_file", "remove_stale_temps",
    "wait_until", "write_atomic",
]
