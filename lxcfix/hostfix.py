"""The host-level fix for LXF112: a systemd oneshot unit that creates the NVIDIA
device nodes at boot, before guests start. The kernel does not create
/dev/nvidia-uvm when nvidia-uvm.ko loads; until something runs nvidia-modprobe,
autostarted containers come up without it (or refuse to start).

    plan = plan_host_unit(facts, existing=None)           # pure
    plan == Plan(ct="host", path="/etc/systemd/system/lxcfix-nvidia-nodes.service",
                 before=b"", after=b"# Written by lxcfix ...[Unit]...", style="systemd-unit", ...)
    host_unit_steps(target, plan, enable=True)            # what apply would do (for --dry-run)
    host_unit_transaction(target, plan).check()           # --dry-run's verdict: Verdict(ok=True, ...)
    apply_host_unit(target, plan, enable=True)            # -> ApplyResult(step_reached="enabled", ...)

apply_host_unit runs one Transaction (transaction.py), as the container flow
does: lock, compare the digest, back up (<state>/host-unit/<unit>/, apart from
every container's backups and never beside the unit), write atomically (temp file in the same directory, fsync, read back,
rename, fsync the directory), verify with `systemd-analyze verify`, `systemctl
daemon-reload`, `systemctl enable`; any failure after the write restores the
old file (or removes the new one), undoes the enable and reloads (exit 4); if
that fails too, RollbackFailed says what state things are in (exit 5). Every
step goes to the journal (events host-unit-*).

Where the unit goes: $LXCFIX_SYSTEMD_DIR, else /etc/systemd/system. A
directory `<R>/etc/systemd/system` other than the host's own (a snapshot, a
test) is handled offline: `systemctl --root=<R> enable`, no daemon-reload.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from . import ctconfig, render
from .apply import state_dir as state_dir_of
from .errors import ApplyFailed, BadInput
from .model import ApplyResult, HostFacts, Plan, Result
from .transaction import (
    Backup, Backups, Expect, Journal, Lock, Run, StateDir, Step, Transaction, UndoFailed, Write,
)
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


def exec_binaries(unit: bytes) -> tuple[str, ...]:
    """The absolute programs a unit's ExecStart= lines run: b"ExecStart=/usr/bin/x -u" -> ("/usr/bin/x",)."""
    found = re.findall(rb"^ExecStart=(/\S+)", unit, re.M)
    return tuple(dict.fromkeys(b.decode("utf-8", "surrogateescape") for b in found))


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
    # A snapshot's commands do not run (RootDir); offline systemctl/systemd-analyze
    # act on local files, so they run here.
    runner = target.transport if target.live else Local()
    return target.local_path, target.live, runner, target.transport.name


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


def _lock_path() -> str:
    return os.path.join(env_path("LXCFIX_LOCK_DIR", "/run/lock/lxc"), "lxcfix-host-unit.lock")


# systemd-analyze verify checks the ExecStart= binaries on the machine it runs on.
NOT_EXECUTABLE = re.compile(r"Command (/\S+) is not executable")


def snapshot_problems(problems: list[str]) -> tuple[list[str], list[str]]:
    """(problems, binaries not checked) of a unit verified for a snapshot: `Command X is not
    executable` is about this machine's X, not the snapshot host's, where the unit runs."""
    binaries = [m.group(1) for p in problems if (m := NOT_EXECUTABLE.search(p))]
    return [p for p in problems if not NOT_EXECUTABLE.search(p)], list(dict.fromkeys(binaries))


@dataclass
class UnitVerify(Step):
    """systemd-analyze verify: every line naming the unit is a problem. Not
    installed: a note, not a failure (the unit is then not verified).
    snapshot: the name of the snapshot the unit is written into (--root); its ExecStart
    binaries are that host's, so this machine's lack of them is "not checked", not a problem."""

    runner: object
    path: str
    snapshot: str | None = None
    binaries: tuple[str, ...] = ()  # this host's own unit (online): the ExecStart binaries check() looks for
    event = "verify"
    changes = False
    reached: str | None = "verified"

    def describe(self) -> str:
        also = f"; the ExecStart binaries are {self.snapshot}'s, not checked here" if self.snapshot else ""
        return f"{shlex.join([*VERIFY, self.path])} (skipped if systemd-analyze is missing{also})"

    def check(self, tx) -> None:
        """What do() would reject first on this host, said before anything is written (the error
        do() raises): an ExecStart binary the host does not have (no nvidia-modprobe at that path)."""
        missing = [b for b in self.binaries if not os.access(b, os.X_OK)]
        if missing:
            raise ApplyFailed(f"systemd-analyze verify rejects the unit: {UNIT_NAME} would run "
                              f"{', '.join(missing)}, which is not executable on this host (install the NVIDIA "
                              "driver's nvidia-modprobe, or give its path with --nvidia-modprobe); nothing changed")

    def do(self, tx) -> None:
        r = self.runner.run(VERIFY + [self.path], timeout=120)
        if r.rc == 127:
            tx.state.setdefault("notes", []).append("systemd-analyze is not installed: the unit was not verified")
            self.reached, self.event = None, None
            return
        self.problems = verify_problems(r, self.path)
        if self.snapshot:
            self.problems, unchecked = snapshot_problems(self.problems)
            tx.state.setdefault("notes", []).extend(
                f"not checked: whether {b} is executable on {self.snapshot} (systemd-analyze verify looks on "
                "this machine, which lacks it)" for b in unchecked)
        self.rc = r.rc
        if self.problems:
            tx.journal_event("verify", rc=r.rc, problems=self.problems)
            self.event = None
            raise ApplyFailed("systemd-analyze verify rejects the unit: " + "; ".join(self.problems))
        tx.state["verified"] = True

    def fields(self, tx) -> dict:
        return {"rc": self.rc, "problems": self.problems}


@dataclass
class Enable(Step):
    """systemctl enable [--now]; undone by disable when this transaction enabled it."""

    runner: object
    sd: "Systemd"
    now: bool = False
    check_before: bool = True  # the unit existed before: ask whether it was enabled
    unit: str = UNIT_NAME
    reached = "enabled"
    _was: bool = False

    def _argv(self, *verb: str) -> list[str]:
        return self.sd.systemctl(*verb, self.unit)

    def _enable_argv(self) -> list[str]:
        return self._argv("enable", *(["--now"] if self.now and self.sd.mode == "online" else []))

    def describe(self) -> str:
        return shlex.join(self._enable_argv())

    def do(self, tx) -> None:
        self._was = self.check_before and self.runner.run(self._argv("is-enabled", "--quiet"), timeout=60).ok
        Run(self.runner, self._enable_argv(), "enable").do(tx)

    def undo(self, tx) -> str | None:
        if self._was:
            return None
        argv = self._argv("disable")
        r = self.runner.run(argv, timeout=120)
        tx.journal_event("command", argv=argv, rc=r.rc)
        if not r.ok:
            raise UndoFailed(f"`{shlex.join(argv)}` exited {r.rc}: {r.tail()}", fatal=False, step="command")
        return "the enable was undone"


def host_unit_transaction(target, plan: Plan, *, enable: bool = True, now: bool = False,
                          state_dir: str | None = None, runner=None, verify: bool = True,
                          unit: str = UNIT_NAME) -> Transaction:
    """The steps of installing the planned unit: what apply_host_unit runs and --dry-run prints.
    unit: its name (lxcfix watch --install installs lxcfix-watch.service the same way)."""
    local, live, default_runner, host = _target_parts(target)
    runner = runner or default_runner
    path = local(plan.path)
    sd = systemd_for(os.path.dirname(path), live)
    if enable and sd.mode == "none":
        raise BadInput(f"cannot enable a unit in {os.path.dirname(path)}: not a systemd unit directory "
                       f"(use {SYSTEMD_DIR}, or <root>{SYSTEMD_DIR}; or do not enable)")
    state = StateDir(state_dir) if state_dir else state_dir_of(target.root)
    base = dict(host=host, unit=unit, path=plan.path, digest_before=plan.digest,
                digest_after=ctconfig.digest(plan.after), style=plan.style)
    current = plan.before if plan.before else None
    steps: list[Step] = [Lock(_lock_path())] if live else []
    steps.append(Expect(path, plan.digest, shown=plan.path))
    if not plan.is_empty:
        steps += [Backup(unit_backups(state, unit), current, plan.digest),
                  Write(path, current, plan.after, None, shown=plan.path, mode=0o644)]
        if verify:
            steps.append(UnitVerify(runner, path, snapshot=None if live else host,
                                    binaries=exec_binaries(plan.after) if sd.mode == "online" else ()))
        if sd.mode == "online":
            steps.append(Run(runner, sd.systemctl("daemon-reload"), "daemon-reload",
                             undo_argv=sd.systemctl("daemon-reload"), undo_last=True))
    if enable:
        steps.append(Enable(runner, sd, now, check_before=current is not None, unit=unit))
    events = {"done": "enabled"} if plan.is_empty else {}
    return Transaction(f"installing {unit}", steps, Journal(state), base, prefix="host-unit-", events=events)


def unit_backups(state: StateDir, unit: str = UNIT_NAME) -> Backups:
    """Where host-fix keeps the unit's old versions: <state>/host-unit/<unit>/, apart from
    every container's (<state>/backups/<ct>/: an LXC container may be named `host`).
    Before 0.2 they went to <state>/backups/host/, which `lxcfix rollback --ct host` of a
    container named host now refuses to read (they are no container config)."""
    return Backups(state, unit, kind="host-unit")


def host_unit_steps(target, plan: Plan, *, enable: bool = True, now: bool = False) -> list[str]:
    """What apply_host_unit would do, in order (for --dry-run): the same transaction, described."""
    return host_unit_transaction(target, plan, enable=enable, now=now).describe_steps()


def apply_host_unit(target, plan: Plan, *, enable: bool = True, now: bool = False,
                    state_dir: str | None = None, runner=None, verify: bool = True,
                    unit: str = UNIT_NAME) -> ApplyResult:
    """Install the planned unit (see the module docstring for the steps).
    target: a repair.Target (its transport runs systemctl on a live host).
    now: start the unit at once (online only): the nodes appear without a reboot.
    The caller asks for confirmation; this function changes the host."""
    local, live, default_runner, _ = _target_parts(target)
    runner = runner or default_runner
    sd = systemd_for(os.path.dirname(local(plan.path)), live)
    tx = host_unit_transaction(target, plan, enable=enable, now=now, state_dir=state_dir, runner=runner,
                               verify=verify, unit=unit)
    if plan.is_empty and (not enable or (sd.mode != "none" and
                                         runner.run(sd.systemctl("is-enabled", "--quiet", unit), timeout=60).ok)):
        tx.check().raise_error()  # nothing to do, if the unit is still what was planned (and the lock is free)
        return ApplyResult("nothing-to-do", None, True, False, f"{plan.path} is up to date")
    result = tx.run()  # which begins with tx.check(), what --dry-run shows
    if plan.is_empty:
        return ApplyResult("enabled", None, False, False, f"{unit} enabled")
    return ApplyResult(result.reached, result.state.get("backup"), bool(result.state.get("verified")), False,
                       "; ".join(result.state.get("notes", [])))
