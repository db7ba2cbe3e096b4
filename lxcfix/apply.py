"""A plan applied to a container's config, as one Transaction (transaction.py):
lock -> preflight -> digest -> note if it runs -> backup -> write -> restart
(or the live change) -> verify; undone in reverse on any failure.

    applier = Applier(Host(local_path, transport, backend), "200", state_dir("/"), "pve", lock_path)
    applier.transaction(plan, restart=True, verify=check).check()   # check mode: a Verdict, nothing done
    applier.apply(plan, restart=True, verify=check)
        -> ApplyResult(step_reached="verified", backup_path=".../200/20261130T190301Z-3f2a....conf",
                       verified=True, rolled_back=False)
    applier.restore("/etc/pve/lxc/200.conf")            # lxcfix rollback: the newest backup

Guarantees, whatever happens (even SIGKILL at any point): the config file is
the old bytes or the new bytes, never a mix; a backup exists, read back whole,
before the first byte is written; the journal says how far it got. Backups
never go next to the config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from . import ctconfig
from .errors import ApplyFailed, BadInput, Refused, RollbackFailed, StateError
from .liveplan import LiveOps
from .model import ApplyResult, Finding, Plan
from .transaction import (
    Backend, Backup, Backups, Expect, Journal, Live, Lock, Restart, StateDir, Status, Step, Transaction, Verify, Write,
    runs,
)
from .transport import Transport

# verify() -> findings that say the container is not healthy yet
Verify_ = Callable[[], list[Finding]]


def state_dir(root: str | None) -> StateDir:
    """Backups and journal: $LXCFIX_STATE_DIR, /var/lib/lxcfix, or a snapshot's
    own DIR/.lxcfix/state (away from its config directories; nothing below DIR
    is followed if it is a symlink)."""
    if os.environ.get("LXCFIX_STATE_DIR"):
        return StateDir(os.environ["LXCFIX_STATE_DIR"])
    if root:
        return StateDir(os.path.join(root, ".lxcfix", "state"), trusted=root)
    return StateDir("/var/lib/lxcfix")


def default_state_dir(root: str | None) -> str:
    return state_dir(root).root


@dataclass
class Host:
    """Where files live (a path mapper: identity on a live host, DIR-joined for
    --root) and how the container is driven (None for a snapshot)."""

    local_path: Callable[[str], str]
    transport: "Transport | None" = None
    backend: "Backend | None" = None


@dataclass
class StateLock(Lock):
    """A host snapshot has no Proxmox lock: lxcfix's own flock on <state>/locks/<ct>.lock (the
    state dir this --root uses), opened without following a link, so two applies or rollbacks
    of one snapshot's container never overlap (the second is refused, nothing changed)."""

    state: StateDir | None = None

    def describe(self) -> str:
        return f"lock {self.path} (lxcfix's own: a snapshot has no Proxmox lock)"

    def _held(self) -> Refused:  # what check() and do() say when it is held
        return Refused(f"another lxcfix holds {self.path} (an apply or rollback of this container in this "
                       "snapshot); nothing changed, try again when it is done")

    def _unusable(self, why: str) -> StateError:
        return StateError(f"lock {self.path}: {why}; nothing changed")

    def _open(self) -> int:
        """The lock file in the state dir's locks/, opened through that directory (no link followed)."""
        dfd = self.state.open_dir("locks")
        try:
            return os.open(os.path.basename(self.path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o600, dir_fd=dfd)
        except OSError as e:
            raise self._unusable(e.strerror or str(e)) from None
        finally:
            os.close(dfd)


@dataclass
class Preflight(Step):
    """Refuse a locked container; the snapshot and pending sections must come out byte-identical."""

    plan: Plan
    flavor: str
    changes = False

    def describe(self) -> str:
        return "refuse on 'lock:'; snapshot and pending sections must stay byte-identical"

    def check(self, tx) -> None:
        if self.plan.lock:
            raise Refused(f"CT {self.plan.ct} is locked ({self.plan.lock}): refusing to edit {self.plan.path}; "
                          "nothing changed")
        if ctconfig.sections_tail(self.plan.before, self.flavor) != ctconfig.sections_tail(self.plan.after, self.flavor):
            raise ApplyFailed("internal error: the plan touches a snapshot or pending section; nothing written")

    def do(self, tx) -> None:
        self.check(tx)


@dataclass
class HostFileBackup(Backup):
    """A host file the plan changes besides the config (/etc/subgid), saved first; its
    path is kept apart from the config's backup (tx.state["host_backups"])."""

    path: str = ""
    event = "host-file-backup"
    checkpoint = "host-file-backed-up"

    def describe(self) -> str:
        if self.data is None:
            return f"nothing to back up: {self.path} does not exist yet (undo removes it)"
        return f"back up {self.path} to {self.backups.dir}/<time>-{self.digest[:12]}.conf (0600, fsynced, read back)"

    def do(self, tx) -> None:
        if self.data is not None:
            tx.state.setdefault("host_backups", {})[self.path] = self.backups.save(self.data, self.digest)

    def fields(self, tx) -> dict:
        return {"file": self.path, "host_backup": tx.state.get("host_backups", {}).get(self.path)}


def host_file_steps(host: "Host", state: StateDir, plan: Plan) -> list[Step]:
    """Check, back up and write each host file the plan changes (Plan.host_files)."""
    steps: list[Step] = []
    for h in plan.host_files:
        path = host.local_path(h.path)
        digest = ctconfig.digest(h.before or b"")
        expect = Expect(path, digest, shown=h.path)
        expect.checkpoint = None
        steps += [expect, HostFileBackup(Backups(state, "host-files", kind="host"), h.before, digest, path=h.path),
                  Write(path, h.before, h.after, None, shown=h.path, mode=0o644, event="host-file-written",
                        checkpoint="host-file-written", temp_checkpoint="host-file-temp-written",
                        extra={"file": h.path})]
    return steps


class LiveChange:
    """Runs LiveOps against a running container, remembering what it did so
    undo() can put the previous program back."""

    def __init__(self, transport, backend, ct: str, ops: LiveOps):
        self.transport, self.backend, self.ct, self.ops = transport, backend, ct, ops
        self.done: list[tuple[str, str, str]] = []  # (verb, what, dest)

    def _check(self, result, what: str) -> None:
        if not result.ok:
            raise ApplyFailed(f"live change failed at {what}: {result.tail()}")

    def run(self) -> None:
        t, b, ct = self.transport, self.backend, self.ct
        # Allow the new before taking out the old: the device is never denied more than before.
        for rule in self.ops.allow:
            self._check(b.cgroup_set(t, ct, "devices.allow", rule), f"devices.allow {rule}")
            self.done.append(("allow", rule, ""))
        for g in self.ops.create:
            dest = "/" + g.target.lstrip("/")
            self._check(b.device_add(t, ct, g.path, dest), f"lxc-device add {g.path}")
            self.done.append(("create", g.path, dest))
        for rule in self.ops.deny:
            self._check(b.cgroup_set(t, ct, "devices.deny", rule), f"devices.deny {rule}")
            self.done.append(("deny", rule, ""))

    def undo(self) -> list[str]:
        errors = []
        t, b, ct = self.transport, self.backend, self.ct
        for verb, what, dest in reversed(self.done):
            if verb == "allow":
                r = b.cgroup_set(t, ct, "devices.deny", what)
            elif verb == "deny":
                r = b.cgroup_set(t, ct, "devices.allow", what)
            else:
                r = b.device_del(t, ct, dest)
            if not r.ok:
                errors.append(f"undo {verb} {what}: {r.tail()[:200]}")
        self.done = []
        return errors


class Applier:
    """lock_path: the host's own lock of the config (Proxmox's flock). snapshot_lock: none such
    exists (a host snapshot): lxcfix's own in the state dir (StateLock)."""

    def __init__(self, host: Host, ct: str, state: StateDir | str, flavor: str, lock_path: str | None = None,
                 snapshot_lock: bool = False):
        self.host = host
        self.ct = ct
        self.state = state if isinstance(state, StateDir) else StateDir(state)
        self.state_dir = self.state.root
        self.flavor = flavor
        self.lock_path = lock_path
        self.snapshot_lock = snapshot_lock
        self.journal = Journal(self.state)
        self.backups = Backups(self.state, ct)

    def _lock(self) -> list[Step]:
        if self.lock_path:
            return [Lock(self.lock_path)]
        if self.snapshot_lock:
            return [StateLock(self.state.path("locks", f"{self.ct}.lock"), state=self.state)]
        return []

    def _base(self, plan: Plan) -> dict:
        t = self.host.transport
        return dict(host=t.name if t is not None else "snapshot", ct=self.ct, path=plan.path,
                    digest_before=plan.digest, digest_after=ctconfig.digest(plan.after), style=plan.style)

    def transaction(self, plan: Plan, *, restart: bool = True, verify: Verify_ | None = None,
                    live: LiveOps | None = None, unchecked: Callable[[], str | None] | None = None) -> Transaction:
        """The steps this apply takes; check mode (`--dry-run`) checks them, apply() runs them.
        unchecked: after verify, why nothing was probed (steps.Verify), or None."""
        path = self.host.local_path(plan.path)
        t, b = self.host.transport, self.host.backend
        steps: list[Step] = self._lock()
        steps += [Preflight(plan, self.flavor), Expect(path, plan.digest, shown=plan.path)]
        if b is not None and (restart or live is not None):
            steps.append(Status(b, t, self.ct, need_running=live is not None))
        steps.append(Backup(self.backups, plan.before, plan.digest))
        steps += host_file_steps(self.host, self.state, plan)
        steps.append(Write(path, plan.before, plan.after, self.flavor, shown=plan.path))
        if live is not None:
            steps.append(Live(LiveChange(t, b, self.ct, live)))
        elif restart and b is not None:
            steps.append(Restart(b, t, self.ct))
        if verify is not None:
            steps.append(Verify(verify, "verify: probe inside, and the running device program equals the "
                                        "planned config" + (", init PID unchanged" if live is not None else ""),
                                unchecked=unchecked))
        return Transaction("apply", steps, self.journal, self._base(plan))

    def apply(self, plan: Plan, *, restart: bool = True, verify: Verify_ | None = None,
              live: LiveOps | None = None) -> ApplyResult:
        if plan.is_empty:
            return ApplyResult("nothing-to-do", None, True, False, "nothing to change")
        result = self.transaction(plan, restart=restart, verify=verify, live=live).run()
        return ApplyResult(result.reached, result.state.get("backup"), result.verified, False)

    # -- lxcfix rollback

    def journal_of(self, path_shown: str) -> list[dict]:
        """This container's config's events (not host-fix's, whose events are host-unit-*)."""
        return [e for e in self.journal.entries() if e.get("ct") == self.ct and e.get("path") == path_shown
                and not str(e.get("event", "")).startswith("host-unit-")]

    def _owner_problem(self, backup: str, path_shown: str) -> str | None:
        """Why `backup` is not one lxcfix took of this container's config, by the journal
        (a backup the journal names for another config, or for host-fix's unit)."""
        for e in self.journal.entries():
            if e.get("backup") != backup:
                continue
            if str(e.get("event", "")).startswith("host-unit-") or e.get("ct") != self.ct or \
                    e.get("path") != path_shown:
                what = "host-fix's unit" if str(e.get("event", "")).startswith("host-unit-") else \
                    f"{e.get('path')} (CT {e.get('ct')})"
                return f"the journal says it is a backup of {what}"
        return None

    def restore(self, path_shown: str, to: str | None = None, restart: bool = True) -> ApplyResult:
        """`lxcfix rollback`: put a backup (default: the newest lxcfix took for this
        container) back over the config, backing up what is there now first, and
        restart if it ran (or start it, if an apply was killed while it was stopped).

        Without --to it undoes lxcfix's last change only: when the config is no longer
        what that change wrote (edited by hand since, or changed by something else), it
        refuses and names what restoring would drop; --to BACKUP restores it anyway and
        says what it dropped."""
        events = self.journal_of(path_shown)
        hist = history(events)
        undoing = None  # the change this rollback undoes (without --to)
        if to is None and hist.changes:
            undoing = hist.changes[-1]
            backup = undoing.backup
        elif to is None and hist.undone:  # every change lxcfix made is undone: never re-apply one
            change, by = hist.undone[-1]
            raise BadInput(f"CT {self.ct}: nothing earlier to roll back: every change lxcfix made to {path_shown} "
                           f"is undone (the last undone, of {when(change.time)}, by the rollback of "
                           f"{when(str(by.get('time', '')))}); nothing changed")
        else:
            backup = to or self.backups.latest()
        if to is not None and "/" not in to:
            backup = os.path.join(self.backups.dir, to)  # a name as `rollback` lists them
        if backup is None:
            raise BadInput(f"no backup of {self.ct} in {self.backups.dir}")
        if not self.backups.owns(backup):
            raise BadInput(f"--to {backup}: not a backup lxcfix took of CT {self.ct} (those are in "
                           f"{self.backups.dir}); nothing changed")
        backup = os.path.join(self.backups.dir, os.path.basename(backup))
        why = self._owner_problem(backup, path_shown)
        if why:
            raise BadInput(f"{backup}: not a backup of CT {self.ct}'s config: {why}; nothing changed")
        try:
            old = self.backups.read(backup)
        except OSError as e:
            raise BadInput(f"cannot read backup {backup}: {e.strerror or e}") from None
        parsed = ctconfig.parse(old, self.flavor)
        if not old.strip() or not parsed.items() or parsed.bad_lines():
            raise BadInput(f"{backup} is empty or does not parse as a container config; nothing changed")
        path = self.host.local_path(path_shown)
        t, b = self.host.transport, self.host.backend
        try:
            current = _read(path)
        except OSError as e:
            raise BadInput(f"cannot read {path_shown}: {e.strerror or e}; nothing changed") from None
        asked_restart = restart
        restart = restart and b is not None
        interrupted = restart and _stopped_mid_apply(events, current)
        if current == old:
            note = self._start_if_stopped(interrupted)
            return ApplyResult("nothing-to-do", backup, False, False,
                               f"{path_shown} already matches {backup}" + note)
        taken = _taken_by(events, backup)
        lost = dropped_lines(current or b"", old)
        if to is None:
            self._refuse_dropping(path_shown, backup, taken, current, lost)
        elif taken is None:
            raise BadInput(f"--to {backup}: the journal ({self.journal.path}) has no record of lxcfix taking it "
                           f"of {path_shown}: not restoring a file lxcfix cannot vouch for; nothing changed")
        steps: list[Step] = self._lock()
        steps += [Expect(path, ctconfig.digest(current or b""), shown=path_shown)]
        if restart:
            steps.append(Status(b, t, self.ct))
        steps += [Backup(self.backups, current or b"", ctconfig.digest(current or b"")),
                  Write(path, current, old, self.flavor, shown=path_shown, event="restored")]
        if restart:
            steps.append(Restart(b, t, self.ct))
        base = dict(host=t.name if t is not None else "snapshot", ct=self.ct, path=path_shown,
                    restored_from=backup, digest_before=ctconfig.digest(current or b""),
                    digest_after=ctconfig.digest(old))
        tx = Transaction("rollback", steps, self.journal, base)
        if interrupted:
            tx.state["force_start"] = True
        try:
            result = tx.run()
        except ApplyFailed as e:
            raise RollbackFailed(f"restoring {path_shown} from {backup} failed: {e}") from None
        change = undoing or (_change_of(taken) if taken else None)
        head = f"CT {self.ct}: "
        if change and change.time:
            head += (f"back to before lxcfix's change of {when(change.time)}: " if to is not None else
                     f"undid lxcfix's change of {when(change.time)}: ")
        message = f"{head}{path_shown} restored from {backup}; " + restored_lines(lost)
        if interrupted:
            message += f"; CT {self.ct} started again (an apply was stopped while it was down)"
        else:
            message += "; " + self._restart_said(restart, asked_restart, bool(result.state.get("was_running")))
        return ApplyResult("restored", backup, False, True, message)

    def _restart_said(self, restarted: bool, asked: bool, was_running: bool) -> str:
        """Whether the rollback restarted the container, and if not, why and what that means."""
        t, b = self.host.transport, self.host.backend
        if b is None:
            return "a snapshot: no container restarted"
        if restarted:
            return (f"CT {self.ct} was running: restarted with the restored config" if was_running else
                    f"CT {self.ct} is stopped: not started (the restored config applies at its next start)")
        running = b.status(t, self.ct) == "running"
        return (f"CT {self.ct} not restarted (--no-restart): it runs with its previous config until it restarts"
                if running else f"CT {self.ct} is stopped: the restored config applies at its next start")

    def _refuse_dropping(self, path_shown: str, backup: str, taken: dict | None, current: bytes | None,
                         lost: list[str]) -> None:
        """Without --to, a rollback undoes lxcfix's own last change, nothing else."""
        now = ctconfig.digest(current or b"")
        again = f"to restore it anyway: lxcfix rollback --ct {self.ct} --to {backup}"
        if taken is None:
            raise BadInput(f"CT {self.ct}: the journal ({self.journal.path}) has no record of lxcfix taking {backup}, "
                           f"so lxcfix cannot tell what restoring it drops ({summary(lost)}); nothing changed")
        wrote = taken.get("digest_after")
        if wrote != now:
            raise BadInput(f"CT {self.ct}: {path_shown} was changed after lxcfix's change of {taken.get('time', '?')} "
                           f"(lxcfix wrote {str(wrote)[:12]}, it is {now[:12]} now): restoring {backup} would also "
                           f"drop those edits ({summary(lost)}); nothing changed; {again}")

    def _start_if_stopped(self, interrupted: bool) -> str:
        """A killed apply left the container stopped and its config already the old one: start it."""
        t, b = self.host.transport, self.host.backend
        if not interrupted or b is None or b.status(t, self.ct) == "running":
            return ""
        r = b.start(t, self.ct)
        if not r.ok:
            raise RollbackFailed(f"CT {self.ct}: its config is the old one, but it was stopped by an apply that "
                                 f"was killed and does not start: {r.tail()}. State: config restored, container STOPPED")
        return f"; CT {self.ct} started again (an apply was killed while it was stopped)"


def _read(path: str) -> bytes | None:
    from .transaction import read_file

    return read_file(path)


def _taken_by(events: list[dict], backup: str) -> dict | None:
    """The journal event of the run that took `backup` (its digest_after: what that run wrote)."""
    for e in reversed(events):
        if e.get("event") == "backup" and e.get("backup") == backup:
            return e
    return None


@dataclass(frozen=True)
class Change:
    """One change lxcfix made to a container's config (an apply, the hook's heal, or a rollback
    to a backup of no change in effect), from the journal's "backup" event of its run:

        Change(backup="/var/lib/lxcfix/backups/200/20261203T114414.996966Z-993b1c1e7bba.conf",
               time="2026-12-03T11:44:15.011+00:00", digest_before="993b1c1e...", digest_after="7deaa253...")
    """

    backup: str
    time: str
    digest_before: str
    digest_after: str


@dataclass(frozen=True)
class History:
    """A config's changes by lxcfix: `changes` still in effect, oldest first (a rollback undoes the
    last); `undone`: (change, the "backup" event of the rollback that undid it), in undo order."""

    changes: tuple[Change, ...] = ()
    undone: tuple[tuple[Change, dict], ...] = ()


def _change_of(e: dict) -> Change:
    return Change(str(e.get("backup", "")), str(e.get("time", "")), str(e.get("digest_before", "")),
                  str(e.get("digest_after", "")))


def history(events: list[dict]) -> History:
    """The journal's events of one config (Applier.journal_of), as changes. A run counts once it
    wrote the config ("written", or a rollback's "restored") and was not undone by its own failure
    ("...rolled-back"): a run killed after the write is in effect. A rollback that restored the
    backup of a change in effect undoes that change and every later one (`--to` an older backup);
    one that restored anything else is a change itself. Pure.

        history([apply A (done), rollback restoring A's backup (done)])
            -> History(changes=(), undone=((A, <rollback's backup event>),))
    """
    stack: list[Change] = []
    undone: list[tuple[Change, dict]] = []
    for run in runs(events):
        names = {str(e.get("event", "")) for e in run}
        b = next((e for e in run if e.get("event") == "backup" and e.get("backup")), None)
        if b is None or any(n.endswith("rolled-back") for n in names) or not names & {"written", "restored"}:
            continue
        restored = b.get("restored_from")
        at = next((i for i, c in enumerate(stack) if c.backup == restored), None) if restored else None
        if at is not None:
            undone += [(c, b) for c in reversed(stack[at:])]
            del stack[at:]
        else:
            stack.append(_change_of(b))
    return History(tuple(stack), tuple(undone))


def when(time: str) -> str:
    """A journal time as people read it: "2026-12-03T11:44:15.011+00:00" -> "2026-12-03 11:44:15 UTC"."""
    if len(time) >= 19 and time[10:11] == "T":
        return time[:10] + " " + time[11:19] + (" UTC" if time.endswith(("+00:00", "Z")) else "")
    return time or "an unknown time"


def restored_lines(lost: list[str]) -> str:
    """What a restore took away and put back, from dropped_lines()."""
    gone = [l[1:] for l in lost if l.startswith("-")]
    back = [l[1:] for l in lost if l.startswith("+")]
    parts = ([f"removed {summary(gone)}"] if gone else []) + ([f"put back {summary(back)}"] if back else [])
    return "; ".join(parts) or "no line changed"


def dropped_lines(current: bytes, old: bytes) -> list[str]:
    """What restoring `old` over `current` takes away and puts back: "-line" for a line of
    the current config that goes, "+line" for one that comes back."""
    import difflib

    a = current.decode("utf-8", "surrogateescape").splitlines()
    b = old.decode("utf-8", "surrogateescape").splitlines()
    return [f"{l[0]}{l[1:].strip()}" for l in difflib.unified_diff(a, b, lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]


def summary(lines: list[str], shown: int = 4) -> str:
    if not lines:
        return "no line"
    text = "; ".join(f"'{l}'" for l in lines[:shown])
    return text + (f" and {len(lines) - shown} more" if len(lines) > shown else "")


def _stopped_mid_apply(events: list[dict], current: bytes | None) -> bool:
    """The last run on this config noted the container running and never ended (no done,
    rolled-back or rollback-failed: killed, maybe between stop and start, or while its
    undo restarted the container): a rollback makes sure it runs again."""
    from .transaction import ENDS, runs

    history = runs(events)
    if not history:
        return False
    last = history[-1]
    ended = any(e.get("event") in ENDS for e in last)
    return not ended and any(e.get("was_running") for e in last)
