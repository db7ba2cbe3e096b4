"""The host-level fix for LXF112: a systemd oneshot unit that creates the NVIDIA
device nodes at boot, before guests start. The kernel does not create
/dev/nvidia-uvm when nvidia-uvm.ko loads; until something runs nvidia-modprobe,
autostarted containers come up without it (or refuse to start).

    plan = plan_host_unit(facts, existing=None)           # pure
    plan == Plan(ct="host", path="/etc/systemd/system/lxcfix-nvidia-nodes.service",
                 before=b"", after=b"# Written by lxcfix ...[Unit]...", style="systemd-unit", ...)
    host_unit_steps(target, plan, enable=True)            # what apply would do (for --dry-run)
    apply_host_unit(target, plan, enable=True)            # -> ApplyResult(step_reached="enabled", ...)

apply_host_unit follows the container flow: lock, compare the digest, back up
(<state>/backups/host/, never beside the unit), write atomically (temp file in
the same directory, fsync, read back, rename, fsync the directory), verify
with `systemd-analyze verify`, `systemctl daemon-reload`, `systemctl enable`;
any failure after the write restores the old file (or removes the new one),
undoes the enable and reloads (exit 4); if that fails too, RollbackFailed
says what state things are in (exit 5). Every step goes to the journal.

Where the unit goes: $LXCFIX_SYSTEMD_DIR, else /etc/systemd/system. A
directory `<R>/etc/systemd/system` other than the host's own (a snapshot, a
test) is handled offline: `systemctl --root=<R> enable`, no daemon-reload.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import ctconfig, render
from .apply import (
    Backups,
    Journal,
    _fsync_dir,
    checkpoint,
    config_lock,
    default_state_dir,
    write_atomic,
)
from .errors import ApplyFailed, BadInput, Refused, RollbackFailed
from .model import ApplyResult, HostFacts, Plan, Result
from .transport import Local, env_path

UNIT_NAME = "lxcfix-nvidia-nodes.service"
SYSTEMD_DIR = "/etc/systemd/system"
MODPROBE = "/usr/bin/nvidia-modprobe"
TEMPLATE = "systemd/lxcfix-nvidia-nodes.service.j2"
# Ordered before the service that starts the guests at boot.
BEFORE = {"pve": ("pve-guests.service",), "lxc": ("lxc.service",)}
# --man=no: the man page a Documentation= line names may not be installed (NVIDIA .run installs).
VERIFY = ["systemd-analyze", "verify", "--man=no"]


def unit_dir() -> str:
    return env_path("LXCFIX_SYSTEMD_DIR", SYSTEMD_DIR)


def unit_path(directory: str | None = None) -> str:
    return os.path.join(directory or unit_dir(), UNIT_NAME)


# ---------------------------------------------------------------- pure

def gpu_minors_from(facts: HostFacts) -> tuple[int, ...]:
    """The /dev/nvidiaN the host has now (GPU minors); () when none is known."""
    return tuple(sorted(int(m.group(1)) for p in facts.nodes
                        if (m := re.fullmatch(r"/dev/nvidia(\d+)", p)) and int(m.group(1)) < 255))


def render_unit(backend: str, *, modprobe: str = MODPROBE, gpu_minors: Sequence[int] = (0,),
                modeset: bool = False) -> bytes:
    if not modprobe.startswith("/") or re.search(r"\s|[\"'\\%$;]", modprobe):
        raise BadInput(f"nvidia-modprobe path must be absolute, without spaces or quotes: {modprobe!r}")
    if backend not in BEFORE:
        raise BadInput(f"unknown backend {backend!r}: pve or lxc")
    minors = sorted({int(m) for m in gpu_minors})
    if not minors or any(not 0 <= m < 255 for m in minors):
        raise BadInput(f"GPU minors must be 0..254: {list(gpu_minors)}")
    text = render.environment().get_template(TEMPLATE).render(
        modprobe=modprobe, before=BEFORE[backend], gpu_minors=minors, modeset=modeset)
    return text.encode()


def plan_host_unit(facts: HostFacts, existing: bytes | None, path: str | None = None, *,
                   modprobe: str = MODPROBE, gpu_minors: Sequence[int] | None = None,
                   modeset: bool | None = None) -> Plan:
    """The unit this host needs, as a Plan over the unit file (before: what is
    there now, b"" when absent). Pure: `existing` is read by the caller.
    Re-planning the written unit gives an empty plan."""
    path = path or unit_path()
    notes = []
    minors = tuple(gpu_minors) if gpu_minors is not None else gpu_minors_from(facts)
    if not minors:
        minors = (0,)
        notes.append("no /dev/nvidiaN on this host now: the unit creates /dev/nvidia0 and /dev/nvidiactl "
                     "(one GPU); give the GPU minors for more")
    if modeset is None:
        modeset = "/dev/nvidia-modeset" in facts.nodes
    if not facts.nvidia_driver:
        notes.append("no NVIDIA driver is loaded on this host now (/proc/driver/nvidia/version): "
                     "the unit only helps once it is")
    after = render_unit(facts.backend, modprobe=modprobe, gpu_minors=minors, modeset=modeset)
    before = existing or b""
    return Plan(
        ct="host", path=path, digest=ctconfig.digest(before), before=before, after=after,
        style="systemd-unit",
        style_reason=(f"{UNIT_NAME}: nvidia-modprobe at boot, ordered before "
                      f"{' '.join(BEFORE[facts.backend])}"),
        notes=tuple(notes),
    )


def verify_problems(result: Result, path: str) -> list[str]:
    """What `systemd-analyze verify` said about our unit. It exits 0 on unknown
    keys or values it ignores ("Unknown key ...", "Failed to parse ..."), so
    every line naming our unit counts, not just the exit code."""
    names = (path, os.path.basename(path))
    lines = [l.strip() for l in (result.stderr + "\n" + result.stdout).splitlines() if l.strip()]
    mine = [l for l in lines if any(n in l for n in names)]
    if result.rc != 0 and not mine:
        mine = lines[-3:] or [f"systemd-analyze verify exited {result.rc}"]
    return mine


# ---------------------------------------------------------------- where systemd is

@dataclass(frozen=True)
class Systemd:
    """How the unit directory is managed: "online" (this host's own systemd:
    daemon-reload, enable), "offline" (<root>/etc/systemd/system of a tree:
    `systemctl --root`), or "none" (another directory: the file only)."""

    mode: str
    root: str | None = None

    def systemctl(self, *args: str) -> list[str]:
        return ["systemctl", *([f"--root={self.root}"] if self.mode == "offline" else []), *args]


def systemd_for(local_dir: str, live: bool) -> Systemd:
    local_dir = os.path.normpath(local_dir)
    if live and local_dir == SYSTEMD_DIR:
        return Systemd("online")
    if local_dir.endswith(SYSTEMD_DIR) and local_dir != SYSTEMD_DIR:
        return Systemd("offline", local_dir[: -len(SYSTEMD_DIR)] or "/")
    return Systemd("none")


def _target_parts(target):
    """(local path mapper, live?, command runner, host name) of a repair.Target."""
    live = getattr(target, "live", True)
    local = target.local_path if hasattr(target, "local_path") else (lambda p: p)
    # A snapshot's commands do not run (RootDir); offline systemctl/systemd-analyze
    # act on local files, so they run here.
    runner = target.transport if live else Local()
    return local, live, runner, getattr(target.transport, "name", "localhost")


def read_existing(target, path: str | None = None) -> bytes | None:
    local, *_ = _target_parts(target)
    try:
        with open(local(path or unit_path()), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def unit_installed(target, path: str | None = None) -> bool:
    """Something lxcfix can see creates the NVIDIA nodes at boot (audit's boot_nodes)."""
    return read_existing(target, path) is not None


def host_unit_steps(target, plan: Plan, *, enable: bool = True, now: bool = False) -> list[str]:
    """What apply_host_unit would do, in order (for --dry-run)."""
    local, live, _, _ = _target_parts(target)
    sd = systemd_for(os.path.dirname(local(plan.path)), live)
    steps = []
    if not plan.is_empty:
        steps += [
            (f"lock {_lock_path()}; " if live else "") + f"check {plan.path} still has digest {plan.digest[:12]}",
            (f"back up the current unit to {os.path.join(default_state_dir(getattr(target, 'root', None)), 'backups', 'host')}/"
             if plan.before else f"{plan.path} does not exist yet: nothing to back up (rollback removes it)"),
            f"write {plan.path} atomically (temp file, fsync, read back, rename, fsync the directory)",
            f"{' '.join(VERIFY)} {plan.path} (skipped if systemd-analyze is missing)",
        ]
    if sd.mode == "online" and not plan.is_empty:
        steps.append("systemctl daemon-reload")
    if enable:
        steps.append(" ".join(sd.systemctl("enable", *(["--now"] if now and sd.mode == "online" else []), UNIT_NAME)))
    steps.append("on failure: restore the old unit (or remove the new one), undo the enable, reload; exit 4")
    return steps


def _lock_path() -> str:
    return os.path.join(env_path("LXCFIX_LOCK_DIR", "/run/lock/lxc"), "lxcfix-host-unit.lock")


# ---------------------------------------------------------------- the write

def write_file_atomic(path: str, data: bytes, mode: int = 0o644, expect_digest: str | None = None) -> None:
    """apply.write_atomic for a unit file (no config re-parse); creates the directory."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    write_atomic(path, data, None, expect_digest=expect_digest, mode=mode, step="host-unit-temp-written")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(path) or ".")


def _tail(r: Result) -> str:
    return ((r.stderr or r.stdout).strip().splitlines() or [f"exit {r.rc}"])[-1]


class _Run:
    """Runs the host's commands and remembers what it must undo."""

    def __init__(self, runner, journal: Journal, base: dict):
        self.runner, self.journal, self.base = runner, journal, base

    def __call__(self, argv: list[str], what: str) -> Result:
        r = self.runner.run(argv, timeout=120)
        self.journal.record(event="host-unit-command", argv=argv, rc=r.rc, **self.base)
        if not r.ok:
            raise ApplyFailed(f"{what} failed: `{' '.join(argv)}` exited {r.rc}: {_tail(r)}")
        return r


def apply_host_unit(target, plan: Plan, *, enable: bool = True, now: bool = False,
                    state_dir: str | None = None, runner=None, verify: bool = True) -> ApplyResult:
    """Install the planned unit (see the module docstring for the steps).
    target: a repair.Target (its transport runs systemctl on a live host).
    now: start the unit at once (online only): the nodes appear without a reboot.
    The caller asks for confirmation; this function changes the host."""
    local, live, default_runner, host = _target_parts(target)
    runner = runner or default_runner
    path = local(plan.path)
    sd = systemd_for(os.path.dirname(path), live)
    if enable and sd.mode == "none":
        raise BadInput(f"cannot enable a unit in {os.path.dirname(path)}: not a systemd unit directory "
                       f"(use {SYSTEMD_DIR}, or <root>{SYSTEMD_DIR}; or do not enable)")
    state_dir = state_dir or default_state_dir(getattr(target, "root", None))
    journal = Journal(state_dir)
    base = dict(host=host, ct="host", path=plan.path, digest_before=plan.digest,
                digest_after=ctconfig.digest(plan.after), style=plan.style)
    run = _Run(runner, journal, base)
    notes: list[str] = []

    def enabled() -> bool:
        return runner.run(sd.systemctl("is-enabled", "--quiet", UNIT_NAME), timeout=60).ok

    with config_lock(_lock_path()) if live else contextlib.nullcontext():
        current = _read(path)
        if ctconfig.digest(current or b"") != plan.digest:
            raise Refused(f"{plan.path} changed since it was planned; nothing written, re-run to re-plan")
        if plan.is_empty:
            if not enable or enabled():
                return ApplyResult("nothing-to-do", None, True, False, f"{plan.path} is up to date")
            run(sd.systemctl("enable", *(["--now"] if now and sd.mode == "online" else []), UNIT_NAME), "enable")
            journal.record(event="host-unit-enabled", **base)
            return ApplyResult("enabled", None, False, False, f"{UNIT_NAME} enabled")
        was_enabled = enable and current is not None and enabled()
        backup = None
        if current is not None:
            backup = Backups(state_dir, "host").save(current, plan.digest)
        journal.record(event="host-unit-backup", backup=backup, created=current is None, **base)
        checkpoint("host-unit-backed-up")
        write_file_atomic(path, plan.after, expect_digest=plan.digest)
        journal.record(event="host-unit-written", backup=backup, **base)
        checkpoint("host-unit-written")
        step = "written"
        verified = False
        try:
            if verify:
                step = "verify"
                r = runner.run(VERIFY + [path], timeout=120)
                if r.rc == 127:
                    notes.append("systemd-analyze is not installed: the unit was not verified")
                else:
                    problems = verify_problems(r, path)
                    journal.record(event="host-unit-verify", rc=r.rc, problems=problems, **base)
                    if problems:
                        raise ApplyFailed("systemd-analyze verify rejects the unit: " + "; ".join(problems))
                    verified = True
            if sd.mode == "online":
                step = "daemon-reload"
                run(sd.systemctl("daemon-reload"), "daemon-reload")
            if enable:
                step = "enable"
                run(sd.systemctl("enable", *(["--now"] if now and sd.mode == "online" else []), UNIT_NAME), "enable")
                step = "enabled"
            else:
                step = "verified" if verified else "written"
        except ApplyFailed as e:
            journal.record(event="host-unit-failed", step=step, error=str(e), **base)
            undo = step in ("enable", "enabled") and not was_enabled  # only an enable this apply ran
            state = _rollback(path, current, backup, sd, run, journal, base, undo_enable=undo, why=str(e))
            raise ApplyFailed(f"{e}\nrolled back: {state}") from None
        journal.record(event="host-unit-done", step=step, **base)
        return ApplyResult(step, backup, verified, False, "; ".join(notes))


def _rollback(path: str, old: bytes | None, backup: str | None, sd: Systemd, run: _Run, journal: Journal,
              base: dict, undo_enable: bool, why: str) -> str:
    errors = []
    if undo_enable and sd.mode != "none":
        try:
            run(sd.systemctl("disable", UNIT_NAME), "disable")
        except ApplyFailed as e:
            errors.append(str(e))
    try:
        if old is None:
            _remove(path)
        else:
            write_file_atomic(path, old)
    except Exception as e:
        journal.record(event="host-unit-rollback-failed", step="restore", error=str(e), **base)
        kept = f"the old one is in {backup}" if backup else "there was none before (delete it)"
        raise RollbackFailed(
            f"installing {UNIT_NAME} failed ({why}) and restoring failed too ({e}). State: {path} holds the NEW "
            f"unit; {kept}. Then run `systemctl daemon-reload`.") from None
    if sd.mode == "online":
        try:
            run(sd.systemctl("daemon-reload"), "daemon-reload")
        except ApplyFailed as e:
            errors.append(str(e))
    if errors:
        journal.record(event="host-unit-rollback-failed", step="systemctl", error="; ".join(errors), **base)
        raise RollbackFailed(
            f"installing {UNIT_NAME} failed ({why}); the unit file is restored ({path}), but "
            f"{'; '.join(errors)}. Run `systemctl disable {UNIT_NAME}` (if it is enabled) and "
            "`systemctl daemon-reload` by hand.") from None
    journal.record(event="host-unit-rolled-back", **base)
    return (f"{path} removed (it did not exist before)" if old is None else f"{path} restored from {backup}") + \
        ("; the enable was undone" if undo_enable and sd.mode != "none" else "")
