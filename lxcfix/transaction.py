"""The one way lxcfix changes a host: a Transaction of steps (the engine; the steps
are in steps.py, the atomic file writes and the state dir in atomicfile.py).

    tx = Transaction("apply", [Lock(lock), Expect(path, digest), Backup(backups, before, digest),
                               Write(path, before, after, "pve"), Restart(backend, t, "200"), Verify(problems)],
                     journal, {"host": "pve1", "ct": "200", "path": "/etc/pve/lxc/200.conf", ...})
    tx.describe()   -> ["lock /run/lock/lxc/pve-config-200.lock (Proxmox's own flock) ...", "back up ...", ...]
    tx.check()      -> Verdict(ok=True, steps=(...)): every step's precondition tested, nothing done
                    -> Verdict(ok=False, step="check /etc/pve/lxc/200.conf still has digest 923f005d1757",
                               error=Refused("... changed since it was planned ..."))   verdict.exit_code == 2
    tx.run()        -> TxResult(reached="verified", state={"backup": ".../backups/200/2026...-923f005d1757.conf"})

Steps run in order; each one that changes something is journaled as it is done
(<state>/journal.jsonl, one JSON line per event). On any failure, also an
exception nobody expected, the steps done are undone in reverse, a restart
last (once the files are back), and the error says what was put back (exit 4);
when undoing fails too, exactly what state things are in (exit 5). A failure
before anything changed is the failure itself (refused, exit 2; the state dir
unusable, exit 3).

Check mode (`--dry-run`, `lxcfix.api.fix(check=True)`, the Ansible collection's
check mode) is check(): each step's check() tests its precondition without
acting (the lock free, the config's digest, the state dir usable and with room,
the container running when a step needs it, a live change possible), in order,
and the first that fails is the verdict, with the error the real run raises
there. run() begins with the same check() and raises its verdict's error before
doing anything, so the two agree by construction; the steps that act guard
again as they act (the digest under the lock, a full disk while writing).

Files: a write goes to a temp file beside the target (created exclusively, never
through a symlink), is fsynced, read back and, for a container config,
re-parsed, then compared-and-swapped by digest and renamed over the target; the
directory is fsynced. Killed at any point, the target holds the old bytes or the
new ones. Backups and the journal live under the state dir, whose paths are
opened without following symlinks; a backup is fsynced and read back before the
config is touched.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, ClassVar

from .atomicfile import (  # noqa: F401  (re-exported: callers import them from here)
    KEEP_BACKUPS, Backups, Journal, StateDir, check_room, check_writable_dir, read_file, remove_file,
    remove_stale_temps, write_atomic,
)
from .errors import ApplyFailed, LxcfixError, RollbackFailed, StateError
from .steps import (  # noqa: F401  (re-exported)
    Backend, Backup, Expect, Live, LiveChangeLike, Lock, Restart, Run, Status, Step, UndoFailed, Verify, Write,
    wait_until,
)


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



@dataclass(frozen=True)
class Verdict:
    """What check mode found (Transaction.check()): ok, or the first step whose
    precondition fails (`step`: its describe()) and the error the real run raises
    there (`error`, whose exit_code the run would exit with). steps: describe_steps().

        Verdict(ok=True, steps=("lock ...", "check ... digest 923f005d1757", ...))
        Verdict(ok=False, steps=(...), step="refuse on 'lock:'; ...", error=Refused("CT 200 is locked ..."))
    """

    ok: bool
    steps: tuple[str, ...] = ()
    step: str | None = None
    error: LxcfixError | None = None

    @property
    def exit_code(self) -> int:
        """What the real run would exit with before acting: 0 when it would go ahead."""
        return 0 if self.ok or self.error is None else int(self.error.exit_code)

    @property
    def message(self) -> str | None:
        return None if self.error is None else str(self.error)

    def raise_error(self) -> None:
        """Raise what the real run would (nothing when ok)."""
        if self.error is not None:
            raise self.error

    def to_json(self) -> dict:
        return {"ok": self.ok, "step": self.step, "exit_code": self.exit_code, "error": self.message,
                "error_class": type(self.error).__name__ if self.error is not None else None}


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
        self._journal_checked = False

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

    def check_step(self, step: Step) -> None:
        """One step's precondition (and, before its first journaled event, the journal's)."""
        step.check(self)
        if step.event is not None and self.journal is not None and not self._journal_checked:
            self.journal.check()
            self._journal_checked = True

    def check(self, tx: "Transaction | None" = None) -> Verdict | None:
        """Check mode: every step's check(), in order, nothing done; the first failure is
        the verdict, with the error run() raises at that step (an exception nobody
        expected: the StateError run() makes of it). As a step of another transaction
        (tx given), its steps' checks, raising."""
        if tx is not None:
            for step in self.steps:
                step.check(self) if isinstance(step, Transaction) else self.check_step(step)
            return None
        self.checkpoint_at("planned")
        steps = tuple(self.describe_steps())
        self._journal_checked = False
        for step in self.steps:
            try:
                step.check(self) if isinstance(step, Transaction) else self.check_step(step)
            except LxcfixError as e:
                return Verdict(False, steps, step.describe(), e)
            except Exception as e:
                return Verdict(False, steps, step.describe(), self._before_any_change(e))
        return Verdict(True, steps)

    def _before_any_change(self, e: BaseException) -> StateError:
        why = f"{type(e).__name__}: {e}"
        return StateError(f"{self.what} failed before changing anything: {why}; nothing changed")

    def run(self, tx: "Transaction | None" = None) -> TxResult:
        """Check first (the very check() check mode runs: a precondition that fails raises
        its error before anything is done), then the steps. As a step of another
        transaction (tx given), that one's check() covered this one's steps."""
        if tx is None:
            self.check().raise_error()
        step_name = "start"
        try:
            for step in self.steps:
                step_name = step.reached or step.event or type(step).__name__.lower()
                self.done.append(step)  # before it runs: a step that fails halfway is undone too
                if isinstance(step, Transaction):
                    step.run(self)
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
        verified = any(isinstance(s, Verify) for s in self.done) and not self.state.get("not_verified")
        return TxResult(self.reached or "written", self.state, verified)

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
            raise self._before_any_change(e) from None
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
    "Backend", "Backup", "Backups", "Expect", "Journal", "Live", "Lock", "Restart", "Run", "StateDir", "Status",
    "Step", "Transaction", "TxResult", "UndoFailed", "Verdict", "Verify", "Write", "read_file",
    "remove_stale_temps", "wait_until", "write_atomic",
]
