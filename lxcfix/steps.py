"""The steps of a Transaction (transaction.py): each says what it does (describe), tests
its precondition without acting (check: what check mode runs, and what the run runs first),
does it (do), and undoes it (undo) when a later step fails.

    Lock(path)  Expect(path, digest)  Status(backend, t, ct)  Backup(backups, data, digest)
    Write(path, before, after, flavor)  Restart(backend, t, ct)  Live(change)  Verify(problems)
    Run(transport, argv, what, undo_argv)

The container backend and a live change are typed by what the steps call of them
(Backend, LiveChangeLike: Protocols), as the transport is (transport.Transport).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from . import ctconfig
from .atomicfile import Backups, check_writable_dir, read_file, remove_file, remove_stale_temps, write_atomic
from .errors import ApplyFailed, BadInput, CannotWrite, Refused, StateError
from .model import Result
from .transport import Transport

if TYPE_CHECKING:
    from .liveplan import LiveOps
    from .transaction import Transaction


class Backend(Protocol):
    """What the steps ask of a container backend (backends.Proxmox, backends.Lxc)."""

    def status(self, t: Transport, ct: str) -> str: ...

    def start(self, t: Transport, ct: str) -> Result: ...

    def stop(self, t: Transport, ct: str) -> Result: ...


class LiveChangeLike(Protocol):
    """What the Live step asks of a live change (apply.LiveChange)."""

    ct: str
    ops: "LiveOps"
    done: list
    backend: Backend
    transport: Transport

    def run(self) -> None: ...

    def undo(self) -> list[str]: ...


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

    def check(self, tx: "Transaction") -> None:
        """Test this step's precondition without acting; raise the LxcfixError do() would
        raise for it. Check mode runs only this; run() runs it right before do()."""

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

    def _held(self) -> Refused:
        return Refused(f"another process holds {self.path} (an apply, or Proxmox itself); "
                       "nothing changed, try again when it is done")

    def _unusable(self, why: str) -> StateError:
        return StateError(f"cannot take the lock {self.path}: {why}; nothing changed")

    def check(self, tx) -> None:
        """Nobody holds the lock now (taken and let go at once, never created), or its file is
        absent and its directory can be created and written."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            check_writable_dir(os.path.dirname(self.path), 0, self._unusable)
            return
        except OSError as e:
            raise self._unusable(e.strerror or str(e)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise self._held() from None
            raise self._unusable(e.strerror or str(e)) from None
        finally:
            os.close(fd)

    def _open(self) -> int:
        """The lock file's descriptor, created when absent (never through a symlink)."""
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise self._unusable(e.strerror or str(e)) from None

    def do(self, tx) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise self._held() from None
            raise self._unusable(e.strerror or str(e)) from None
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

    def check(self, tx) -> None:
        now = read_file(self.path)
        if ctconfig.digest(now or b"") != self.digest:
            raise Refused(f"{self.shown or self.path} changed since it was planned; nothing written, re-run to re-plan")

    def do(self, tx) -> None:
        self.check(tx)  # again, now under the lock
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

    def check(self, tx) -> None:
        """The backup directory is usable, and has room for the backup."""
        if self.data is not None:
            self.backups.state.check(*self.backups.sub, need=len(self.data),
                                     what=f"cannot create a backup in {self.backups.dir}")

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

    def check(self, tx) -> None:
        """Its directory (or the nearest one above it, when it is still to be made) takes
        the temp file: writable, and room for `after` beside the old file."""
        def error(why: str) -> CannotWrite:
            return CannotWrite(f"cannot write {self.shown or self.path}: {why} ({os.path.dirname(self.path)})")

        check_writable_dir(os.path.dirname(self.path) or ".", len(self.after), error)

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

    backend: Backend
    transport: Transport
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

    change: LiveChangeLike  # apply.LiveChange
    reached = "changed-live"
    checkpoint = "changed-live"

    def describe(self) -> str:
        ops = self.change.ops
        parts = ([f"lxc-cgroup devices.allow '{r}'" for r in ops.allow]
                 + [f"lxc-device add {g.path}" for g in ops.create]
                 + [f"lxc-cgroup devices.deny '{r}'" for r in ops.deny])
        return f"change the running CT {self.change.ct}: " + "; ".join(parts)

    def check(self, tx) -> None:
        """liveplan can make this change live (ops.refuse says why not)."""
        if self.change.ops.refuse:
            raise BadInput(f"--live cannot do this change: {self.change.ops.refuse}")

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

    backend: Backend
    transport: Transport
    ct: str
    need_running: bool = False
    changes = False

    def describe(self) -> str:
        return f"note whether CT {self.ct} runs" + (" (it must: the change is made live)" if self.need_running else "")

    def _refuse_unless(self, running: bool) -> None:
        if self.need_running and not running:
            raise Refused(f"CT {self.ct} is not running: --live changes a running container; "
                          "apply without --live (nothing changed)")

    def check(self, tx) -> None:
        if self.need_running:
            self._refuse_unless(self.backend.status(self.transport, self.ct) == "running")

    def do(self, tx) -> None:
        running = self.backend.status(self.transport, self.ct) == "running"
        self._refuse_unless(running)
        # force_start: a rollback after an apply was killed between stop and start
        tx.state["was_running"] = running or bool(tx.state.get("force_start"))
        tx.base["was_running"] = tx.state["was_running"]


@dataclass
class Verify(Step):
    """problems() -> findings or strings: any problem fails the transaction. The callable says
    what a problem is (repair.verifier: what the codes' records say a verified change leaves
    none of, whatever its severity). (Its check(), check mode's, has nothing to test:
    verifying is what the run does.)"""

    problems: Callable[[], list]
    what: str = "verify: probe inside and compare with the planned config"
    event: str | None = None
    reached: str | None = "verified"
    checkpoint: str | None = "verified"
    # unchecked() after problems(): why nothing was probed ("CT 200 is stopped, nothing was
    # probed"), or None. Then the run reached "checked", not "verified": tx.state["not_verified"].
    unchecked: Callable[[], str | None] | None = None
    _result: dict = field(default_factory=dict, repr=False)
    changes = False

    def describe(self) -> str:
        return self.what

    def do(self, tx) -> None:
        problems = list(self.problems())
        self._result["problems"] = [p if isinstance(p, str) else f"{p.code} {p.message}" for p in problems]
        if problems:
            raise ApplyFailed("verify failed: " + "; ".join(self._result["problems"]))
        why = self.unchecked() if self.unchecked is not None else None
        if why:
            self.reached = "checked"
            tx.state["not_verified"] = why

    def fields(self, tx) -> dict:
        return dict(self._result)


@dataclass
class Run(Step):
    """A host command (argv); undo_argv runs to undo it."""

    transport: Transport
    argv: Sequence[str]
    what: str
    undo_argv: Sequence[str] | None = None
    undo_last: bool = False
    reached: str | None = None

    def describe(self) -> str:
        return shlex.join(self.argv)

    def _run(self, tx, argv) -> Result:
        r = self.transport.run(list(argv), timeout=120)
        tx.journal_event("command", argv=list(argv), rc=r.rc)
        return r

    def do(self, tx) -> None:
        r = self._run(tx, self.argv)
        if not r.ok:
            raise ApplyFailed(f"{self.what} failed: `{shlex.join(self.argv)}` exited {r.rc}: {r.tail()}")

    def undo(self, tx) -> str | None:
        if self.undo_argv is None:
            return None
        r = self._run(tx, self.undo_argv)
        if not r.ok:
            raise UndoFailed(f"`{shlex.join(self.undo_argv)}` exited {r.rc}: {r.tail()}", fatal=False, step="command")
        return None



__all__ = [
    "Backend", "Backup", "Expect", "Live", "LiveChangeLike", "Lock", "Restart", "Run", "Status", "Step",
    "UndoFailed", "Verify", "Write", "wait_until",
]
