"""Applying a plan: preflight -> backup -> write -> restart -> verify -> rollback.

    result = Applier(host, backend, "200", state_dir).apply(plan, restart=True, verify=check)
    result == ApplyResult(step_reached="verified", backup_path=".../200/20261130T190301Z-3f2a....conf",
                          verified=True, rolled_back=False)

Guarantees, whatever happens (even SIGKILL at any point): the config file is
the old bytes or the new bytes, never a mix (temp file in the same directory,
fsync, re-parse, rename); a backup exists before the first byte is written;
the journal says how far it got. Backups never go next to the config.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from . import ctconfig
from .errors import ApplyFailed, BadInput, Refused, RollbackFailed
from .liveplan import LiveOps
from .model import ApplyResult, Finding, Plan

KEEP_BACKUPS = 20

# verify(ct) -> findings that say the container is not healthy yet
Verify = Callable[[], list[Finding]]


def checkpoint(step: str) -> None:
    """Fault injection for the tests that SIGKILL an apply at each step: with
    LXCFIX_PAUSE_AT=<step> and LXCFIX_PAUSE_FILE=<path>, create the file and
    wait while it exists (at most 60 s). A no-op otherwise."""
    if os.environ.get("LXCFIX_PAUSE_AT") != step or not os.environ.get("LXCFIX_PAUSE_FILE"):
        return
    marker = os.environ["LXCFIX_PAUSE_FILE"]
    with open(marker, "w") as f:
        f.write(f"{os.getpid()} {step}\n")
    deadline = time.monotonic() + 60
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.02)


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
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            os.unlink(os.path.join(directory, entry))
            removed.append(entry)
    return removed


def default_state_dir(root: str | None) -> str:
    if os.environ.get("LXCFIX_STATE_DIR"):
        return os.environ["LXCFIX_STATE_DIR"]
    # A host snapshot keeps its own state, away from its config directories.
    return os.path.join(root, ".lxcfix", "state") if root else "/var/lib/lxcfix"


@dataclass
class Host:
    """Where files live (a path mapper: identity on a live host, DIR-joined for
    --root) and how the container is driven (None for a snapshot)."""

    local_path: Callable[[str], str]
    transport: object | None = None
    backend: object | None = None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, flavor: str | None = None, expect_digest: str | None = None,
                 mode: int | None = None, step: str = "temp-written") -> None:
    """Temp file beside `path`, fsync, read back (and re-parse, for a container
    config of `flavor`), compare-and-swap, rename, fsync the directory: `path`
    holds the old bytes or the new ones, never a mix. expect_digest: the SHA-1
    `path` must hold now (of b"" when it must be absent). mode: for a new file;
    an existing file keeps its mode and owner."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.lxcfix-{os.getpid()}.tmp")
    st = None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None or st is not None:
            os.chmod(tmp, mode if mode is not None else st.st_mode & 0o7777)
        if st is not None and os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        with open(tmp, "rb") as f:
            written = f.read()
        if written != data or (flavor and ctconfig.serialize(ctconfig.parse(written, flavor)) != data):
            raise ApplyFailed(f"{tmp}: written bytes do not read back; nothing replaced")
        checkpoint(step)
        if expect_digest is not None:
            try:
                with open(path, "rb") as f:
                    now = ctconfig.digest(f.read())
            except FileNotFoundError:
                now = ctconfig.digest(b"")
            if now != expect_digest:
                raise Refused(f"{path} changed while lxcfix was working (digest {now[:12]}, "
                              f"expected {expect_digest[:12]}); nothing written, re-run to re-plan")
        os.replace(tmp, path)
        _fsync_dir(directory)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def config_lock(lock_path: str) -> Iterator[None]:
    """Proxmox's own flock on /run/lock/lxc/pve-config-<vmid>.lock (plain LXC: our own)."""
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise Refused(f"another process holds {lock_path} (an apply, or Proxmox itself); "
                              "nothing changed, try again when it is done")
            raise
        yield
    finally:
        os.close(fd)


class Journal:
    """One JSON line per apply event: what changed, when, the backup, the outcome."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, "journal.jsonl")

    def record(self, **event) -> None:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        event = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), **event}
        line = json.dumps(event, sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[dict]:
        try:
            with open(self.path) as f:
                return [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError):
            return []


class Backups:
    """<state>/backups/<ct>/<UTC timestamp>-<digest>.conf, mode 0600, newest KEEP_BACKUPS kept."""

    def __init__(self, state_dir: str, ct: str):
        self.dir = os.path.join(state_dir, "backups", ct)

    def save(self, data: bytes, digest: str) -> str:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        path = os.path.join(self.dir, f"{stamp}-{digest[:12]}.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.dir)
        for old in self.list()[:-KEEP_BACKUPS]:
            os.unlink(old)
        return path

    def list(self) -> list[str]:
        try:
            return [os.path.join(self.dir, n) for n in sorted(os.listdir(self.dir)) if n.endswith(".conf")]
        except FileNotFoundError:
            return []

    def latest(self) -> str | None:
        found = self.list()
        return found[-1] if found else None


def wait_until(check: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> bool:
    """Poll check() until it is true or time runs out (tenacity does the waiting)."""
    return Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                    retry=retry_if_result(lambda ok: not ok),
                    retry_error_callback=lambda state: False)(check)


class Applier:
    def __init__(self, host: Host, ct: str, state_dir: str, flavor: str, lock_path: str | None = None):
        self.host = host
        self.ct = ct
        self.state_dir = state_dir
        self.flavor = flavor
        self.lock_path = lock_path
        self.journal = Journal(state_dir)
        self.backups = Backups(state_dir, ct)

    # -- steps

    def preflight(self, plan: Plan, replan: Callable[[bytes], Plan]) -> None:
        cfg = ctconfig.parse(plan.before, self.flavor, plan.path)
        lock = cfg.get("lock") if self.flavor == "pve" else None
        if lock:
            raise Refused(f"CT {self.ct} is locked ({lock}): refusing to edit {plan.path}; nothing changed")
        # The new file must be stable: planning it again changes nothing.
        again = replan(plan.after)
        if not again.is_empty:
            raise ApplyFailed(f"internal error: the planned config is not stable (a second plan "
                              f"would change it again); nothing written\n{again.diff()}")
        sections_before = [ln for ln in cfg.lines if ln.section is not ctconfig.MAIN]
        sections_after = [ln for ln in ctconfig.parse(plan.after, self.flavor).lines
                          if ln.section is not ctconfig.MAIN]
        if [l.raw for l in sections_before] != [l.raw for l in sections_after]:
            raise ApplyFailed("internal error: the plan touches a snapshot or pending section; nothing written")

    def _restart(self, was_running: bool) -> None:
        t, b = self.host.transport, self.host.backend
        if b.status(t, self.ct) == "running":
            r = b.stop(t, self.ct)
            if not r.ok:
                raise ApplyFailed(f"stopping {self.ct} failed: {(r.stderr or r.stdout).strip()}")
        if was_running:
            r = b.start(t, self.ct)
            if not r.ok:
                raise ApplyFailed(f"starting {self.ct} with the new config failed: "
                                  f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ['']}")
            if not wait_until(lambda: b.status(t, self.ct) == "running"):
                raise ApplyFailed(f"{self.ct} did not reach 'running' after start")

    def apply(self, plan: Plan, *, replan: Callable[[bytes], Plan], restart: bool = True,
              verify: Verify | None = None, before_write: Callable[[str], None] | None = None,
              live: "LiveOps | None" = None) -> ApplyResult:
        """live: change the running container in place (no restart) with these operations."""
        if plan.is_empty:
            return ApplyResult("nothing-to-do", None, True, False, "nothing to change")
        path = self.host.local_path(plan.path)
        lock = config_lock(self.lock_path) if self.lock_path else _nolock()
        with lock:
            with open(path, "rb") as f:
                current = f.read()
            if ctconfig.digest(current) != plan.digest:
                raise Refused(f"{plan.path} changed since it was planned; nothing written, re-run to re-plan")
            self.preflight(plan, replan)
            remove_stale_temps(path)
            checkpoint("locked")
            t, b = self.host.transport, self.host.backend
            was_running = (restart or live is not None) and b is not None and b.status(t, self.ct) == "running"
            if live is not None and not was_running:
                raise Refused(f"CT {self.ct} is not running: --live changes a running container; "
                              "apply without --live (nothing changed)")
            backup = self.backups.save(plan.before, plan.digest)
            base = dict(host=getattr(t, "name", "snapshot"), ct=self.ct, path=plan.path, backup=backup,
                        digest_before=plan.digest, digest_after=ctconfig.digest(plan.after), style=plan.style)
            self.journal.record(event="backup", **base)
            checkpoint("backed-up")
            if before_write:
                before_write(backup)
            write_atomic(path, plan.after, self.flavor, expect_digest=plan.digest)
            self.journal.record(event="written", **base)
            checkpoint("written")
            step = "written"
            change = LiveChange(t, b, self.ct, live) if live is not None else None
            try:
                if change is not None:
                    step = "live"
                    change.run()
                    step = "changed-live"
                    checkpoint("changed-live")
                elif restart and b is not None:
                    step = "restart"
                    self._restart(was_running)
                    step = "restarted"
                    checkpoint("restarted")
                if verify is not None:
                    step = "verify"
                    problems = [f for f in verify() if f.severity == "error"]
                    if problems:
                        raise ApplyFailed("verify failed: " + "; ".join(f"{f.code} {f.message}" for f in problems))
                    step = "verified"
            except ApplyFailed as e:
                self.journal.record(event="failed", step=step, error=str(e), **base)
                if change is not None:
                    state = self._rollback_live(path, backup, change, str(e), base)
                    raise ApplyFailed(f"{e}\nrolled back: {plan.path} restored from {backup}; {state}") from None
                self._rollback(path, backup, was_running, str(e), base)
                raise ApplyFailed(f"{e}\nrolled back: {plan.path} restored from {backup}"
                                  + (f"; CT {self.ct} restarted with the old config" if was_running else "")) from None
            self.journal.record(event="done", step=step, **base)
            return ApplyResult(step, backup, verify is not None, False)

    def _rollback(self, path: str, backup: str, was_running: bool, why: str, base: dict) -> None:
        try:
            with open(backup, "rb") as f:
                old = f.read()
            write_atomic(path, old, self.flavor)
        except Exception as e:
            self.journal.record(event="rollback-failed", step="restore", error=str(e), **base)
            raise RollbackFailed(
                f"apply failed ({why}) and restoring the config failed too ({e}). State: {path} holds the NEW "
                f"config; the old one is in {backup}; CT {self.ct} may be stopped. Restore by hand: "
                f"cp {backup} {path}") from None
        if was_running:
            try:
                self._restart(True)
            except ApplyFailed as e:
                self.journal.record(event="rollback-failed", step="restart", error=str(e), **base)
                raise RollbackFailed(
                    f"apply failed ({why}); the old config is back in {path}, but CT {self.ct} did not start "
                    f"with it: {e}. State: config restored, container STOPPED. Check `lxc-start -F` / the "
                    f"container log.") from None
        self.journal.record(event="rolled-back", **base)

    def _rollback_live(self, path: str, backup: str, change: "LiveChange", why: str, base: dict) -> str:
        """Put the previous live rules and the previous config back; say what state it is in."""
        running = change.backend.status(change.transport, self.ct) == "running"
        undo_errors = change.undo() if running else []
        try:
            with open(backup, "rb") as f:
                write_atomic(path, f.read(), self.flavor)
        except Exception as e:
            self.journal.record(event="rollback-failed", step="restore", error=str(e), **base)
            raise RollbackFailed(
                f"live apply failed ({why}) and restoring the config failed too ({e}). State: {path} holds the "
                f"NEW config, the old one is in {backup}; CT {self.ct} is {'running' if running else 'STOPPED'}"
                + (f", its live rules were {'not ' if undo_errors else ''}restored" if running else "")) from None
        if undo_errors:
            self.journal.record(event="rollback-failed", step="live-undo", error="; ".join(undo_errors), **base)
            raise RollbackFailed(
                f"live apply failed ({why}); the old config is back in {path}, but undoing the live change failed: "
                f"{'; '.join(undo_errors)}. State: CT {self.ct} runs with a device program that differs from "
                f"its config (LXF121); restart it to load the old config.") from None
        self.journal.record(event="rolled-back", live=True, **base)
        if not running:
            return f"CT {self.ct} is STOPPED (it stopped during the apply); its config is the old one"
        return f"CT {self.ct} still runs, without a restart, with its previous device rules"

    def restore(self, path_shown: str, to: str | None = None, restart: bool = True) -> ApplyResult:
        """`lxcfix rollback`: put a backup (default: the newest) back over the
        config, backing up what is there now first, and restart if it ran."""
        backup = to or self.backups.latest()
        if backup is None:
            raise BadInput(f"no backup of {self.ct} in {self.backups.dir}")
        try:
            with open(backup, "rb") as f:
                old = f.read()
        except OSError as e:
            raise BadInput(f"cannot read backup {backup}: {e.strerror or e}") from None
        if ctconfig.parse(old, self.flavor).bad_lines() and not ctconfig.parse(old, self.flavor).items():
            raise BadInput(f"{backup} does not look like a container config")
        path = self.host.local_path(path_shown)
        lock = config_lock(self.lock_path) if self.lock_path else _nolock()
        with lock:
            with open(path, "rb") as f:
                current = f.read()
            if current == old:
                return ApplyResult("nothing-to-do", backup, False, False, "config already matches the backup")
            t, b = self.host.transport, self.host.backend
            was_running = restart and b is not None and b.status(t, self.ct) == "running"
            saved = self.backups.save(current, ctconfig.digest(current))
            base = dict(host=getattr(t, "name", "snapshot"), ct=self.ct, path=path_shown, backup=saved,
                        restored_from=backup, digest_before=ctconfig.digest(current),
                        digest_after=ctconfig.digest(old))
            write_atomic(path, old, self.flavor)
            self.journal.record(event="restored", **base)
            if was_running:
                try:
                    self._restart(True)
                except ApplyFailed as e:
                    raise RollbackFailed(f"{path_shown} restored from {backup}, but CT {self.ct} did not "
                                         f"start with it: {e}. State: config restored, container STOPPED; "
                                         f"the config before the rollback is in {saved}") from None
            return ApplyResult("restored", backup, False, True, f"{path_shown} restored from {backup}")


class LiveChange:
    """Runs LiveOps against a running container, remembering what it did so
    undo() can put the previous program back."""

    def __init__(self, transport, backend, ct: str, ops):
        self.transport, self.backend, self.ct, self.ops = transport, backend, ct, ops
        self.done: list[tuple[str, str, str]] = []  # (verb, what, dest)

    def _check(self, result, what: str) -> None:
        if not result.ok:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit {result.rc}"]
            raise ApplyFailed(f"live change failed at {what}: {tail[0]}")

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
                errors.append(f"undo {verb} {what}: {(r.stderr or r.stdout).strip()[:200]}")
        self.done = []
        return errors


@contextmanager
def _nolock() -> Iterator[None]:
    yield
