"""lxcfix as a Proxmox VE hookscript: `lxcfix hook [--mode fail|heal] <vmid> <phase>`.

    pct set 200 --hookscript local:snippets/lxcfix-hook.sh
    # snippet(): exec /usr/local/bin/lxcfix hook --mode fail "$@"  (the path lxcfix was run from)

Proxmox runs `<script> <vmid> <phase>` (pve-container, PVE::LXC::vm_start):
inside `lock_config` (so the hook must never take the config lock: its parent
holds it), after `update_lxc_config` wrote /var/lib/lxc/<vmid>/config from the
Proxmox config, before lxc-start; a non-zero exit at pre-start aborts the start.

- pre-start: re-check the container's device rules against the host's current
  majors (LXF100 missing rule, LXF101 stale major, LXF112 node missing).
  fail: exit 1 with one message saying what to run. heal: fix the Proxmox
  config (backup + journal, as `lxcfix apply`, without the lock) AND the
  generated config this start uses (same planner, style path or numeric);
  a missing NVIDIA node is created with nvidia-modprobe first. Exit 0 when
  healed; when healing fails, both files are restored and the exit is 4 (5 if
  restoring failed too).
- post-start: probe inside and journal the result ("hook-post-start"); always 0.
- other phases: 0.
lxcfix's own failures (a bug, an unreadable host) never block a start: exit 0
with a warning. Everything goes to the journal.

The decision is pure (`decide`, `block_message`); `run_hook` does the I/O.

    decide("200", "pre-start", "fail", findings)
        -> Decision(action="block", exit_code=1, blocking=(Finding("LXF101", ...),),
                    message="lxcfix: CT 200 must not start: ... Run: lxcfix apply --ct 200 ...")
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from . import codes, ctconfig, fixes, gather, repair
from .apply import Applier, Host, state_dir
from .backends import Lxc
from .errors import ApplyFailed, ExitCode, LxcfixError, RollbackFailed
from .model import Finding, Plan
from .plan import make_plan
from .render import template_text
from .styles import STYLES
from .transaction import Journal, Run, Step, Transaction, Verify, Write, write_atomic
from .transport import env_path

PHASES = ("pre-start", "post-start", "pre-stop", "post-stop")
MODES = ("fail", "heal")
BLOCKING = codes.where(hook="block")  # the codes' records: what must not start
SNIPPET = "hook/lxcfix-hook.sh"
MODPROBE = "/usr/bin/nvidia-modprobe"


# ---------------------------------------------------------------- pure

@dataclass(frozen=True)
class Decision:
    action: str  # "pass" | "block" | "heal" | "record"
    exit_code: int
    blocking: tuple[Finding, ...] = ()
    message: str = ""


def blocking_findings(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.code in BLOCKING and f.severity == "error"]


def decide(vmid: str, phase: str, mode: str, findings: Sequence[Finding] = ()) -> Decision:
    """What the hook does for this phase, given the pre-start findings."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}")
    if phase == "post-start":
        return Decision("record", 0)
    if phase != "pre-start":
        return Decision("pass", 0)
    blocking = tuple(blocking_findings(findings))
    if not blocking:
        return Decision("pass", 0, message=f"lxcfix: CT {vmid}: device rules match this host")
    if mode == "heal":
        return Decision("heal", 0, blocking)
    return Decision("block", int(ExitCode.PENDING), blocking, block_message(vmid, blocking))


def _what_to_run(vmid: str, blocking: Sequence[Finding]) -> str:
    runs = []
    if any(f.code in codes.where(kind="cgroup-denies") for f in blocking):  # a config change fixes these
        runs.append(f"lxcfix apply --ct {vmid}")
    for f in blocking:
        if f.code == "LXF112":
            argv = modprobe_argv(f.device or "")
            runs.append(f"{' '.join(argv)} (and `lxcfix host-fix` to do it at every boot)" if argv
                        else f"fix {f.device} on the host ({f.fix.title if f.fix else 'load its driver'})")
    return "; then ".join(dict.fromkeys(runs))


def block_message(vmid: str, blocking: Sequence[Finding]) -> str:
    """One message: why the start was refused and what to run."""
    why = "; ".join(f"{f.code} {f.message}" for f in blocking)
    return (f"lxcfix: CT {vmid} must not start with broken device passthrough: {why}. "
            f"Run: {_what_to_run(vmid, blocking)} (or set the hookscript to --mode heal).")


def modprobe_argv(device: str, modprobe: str = MODPROBE) -> list[str] | None:
    """fixes.modprobe_argv, run by its absolute path (a hook runs with Proxmox's PATH)."""
    return fixes.modprobe_argv(device, modprobe)


def generated_style(style: str) -> str:
    """The generated LXC config takes path or numeric rules, never devN entries."""
    return style if style in ("path", "numeric") else "path"


def installed_command(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """This lxcfix as an argv that runs without PATH: the console script by the absolute path it
    was started from, else this interpreter with `-m lxcfix`. Proxmox runs a hookscript with
    PATH=/sbin:/bin:/usr/sbin:/usr/bin (pve-common PVE::CLIHandler::run_cli_handler for `pct`,
    PVE::Daemon for pvedaemon and the HA resource agents), without /usr/local/bin, where the
    README's pipx install puts the `lxcfix` console script.

        installed_command("/usr/local/bin/lxcfix")          -> ["/usr/local/bin/lxcfix", "hook"]
        installed_command("/x/lxcfix/__main__.py", "/v/bin/python3") -> ["/v/bin/python3", "-m", "lxcfix", "hook"]
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = executable or sys.executable
    if argv0 and os.path.basename(argv0).startswith("lxcfix"):
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return [os.path.abspath(found), "hook"]
    return [os.path.abspath(executable), "-m", "lxcfix", "hook"]


def snippet(mode: str = "fail", command: Sequence[str] = ("lxcfix", "hook")) -> str:
    """The hookscript snippet (templates/hook/lxcfix-hook.sh) for this mode and command
    (`lxcfix hook --print-snippet` gives installed_command(): an absolute path, as the hook
    runs with Proxmox's PATH); where command[0] is missing it says so on stderr (the task
    log) and lets the start go on."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}")
    lines = template_text(SNIPPET).splitlines()
    exec_line = f'exec {shlex.join(command)} --mode {mode} "$@"'
    # Without the command on this host (a restore onto another node) the hook lets the start go on.
    guard = (f'command -v {shlex.quote(command[0])} >/dev/null 2>&1 || {{ echo "lxcfix hook: '
             f'{command[0]} is not installed on $(hostname); not checking CT $1" >&2; exit 0; }}')
    return "\n".join(exec_line if l.startswith("exec ") else guard if l.startswith("command -v ") else l
                     for l in lines) + "\n"


# ---------------------------------------------------------------- I/O

@dataclass(frozen=True)
class HookResult:
    exit_code: int
    message: str = ""
    action: str = "pass"

    @property
    def stream(self) -> str:
        return "stderr" if self.exit_code or self.action in ("block", "heal-failed", "warning") else "stdout"


def run_hook(vmid: str, phase: str, mode: str = "fail", *, style: str = "auto", target=None) -> HookResult:
    """Serve one hookscript call. Never raises."""
    if mode not in MODES:
        return HookResult(int(ExitCode.USAGE), f"lxcfix hook: --mode must be fail or heal, not {mode!r}", "usage")
    if style not in STYLES:
        return HookResult(int(ExitCode.USAGE), f"lxcfix hook: unknown --style {style!r}", "usage")
    if phase not in ("pre-start", "post-start"):
        return HookResult(0, "", "pass")
    try:
        target = target or repair.open_target(None)
    except LxcfixError as e:
        return HookResult(0, f"lxcfix hook: {e}; nothing checked", "warning")
    if target.backend.name != "pve":
        return HookResult(0, "lxcfix hook: not a Proxmox VE host; nothing checked", "pass")
    try:
        target.backend.validate(vmid)
    except LxcfixError as e:
        return HookResult(int(ExitCode.USAGE) if phase == "pre-start" else 0, f"lxcfix hook: {e}", "usage")
    journal = Journal(state_dir(None))
    if phase == "post-start":
        return _post_start(target, vmid, journal)
    try:
        return _pre_start(target, vmid, mode, style, journal)
    except Exception as e:  # lxcfix's own failure must not block a start
        _record(journal, event="hook-pre-start", host=_host(target), ct=vmid, mode=mode, decision="error",
                error=f"{type(e).__name__}: {e}")
        return HookResult(0, f"lxcfix hook: CT {vmid}: could not check the device rules ({e}); "
                             "not blocking the start", "warning")


def _host(target) -> str:
    return target.transport.name


def _record(journal: Journal, **event) -> None:
    try:
        journal.record(**event)
    except (OSError, LxcfixError):
        pass


def _codes(findings: Iterable[Finding]) -> list[str]:
    return sorted(f.code for f in findings)


def _post_start(target, vmid: str, journal: Journal) -> HookResult:
    try:
        rep, c = repair.one(target, vmid, probe=True)
    except Exception as e:
        _record(journal, event="hook-post-start", host=_host(target), ct=vmid, error=f"{type(e).__name__}: {e}")
        return HookResult(0, f"lxcfix hook: CT {vmid}: post-start probe failed: {e}", "warning")
    errors = [f for f in c.findings if f.severity == "error"]
    _record(journal, event="hook-post-start", host=rep.host, ct=vmid, status=c.status, codes=_codes(c.findings),
            errors=_codes(errors), devices=sorted({f.device for f in c.findings if f.device}))
    if not errors:
        return HookResult(0, f"lxcfix: CT {vmid} started; the probe inside found no device errors", "record")
    return HookResult(0, f"lxcfix: CT {vmid} started, but the probe inside found: "
                         + "; ".join(f"{f.code} {f.message}" for f in errors)
                         + f" (lxcfix diagnose --ct {vmid})", "warning")


def _pre_start(target, vmid: str, mode: str, style: str, journal: Journal) -> HookResult:
    rep, c = repair.one(target, vmid, style, probe=False)
    d = decide(vmid, "pre-start", mode, c.findings)
    base = dict(event="hook-pre-start", host=rep.host, ct=vmid, mode=mode)
    if d.action == "pass":
        _record(journal, decision="ok", codes=_codes(c.findings), **base)
        return HookResult(0, d.message, "pass")
    if d.action == "block":
        _record(journal, decision="blocked", codes=_codes(d.blocking), message=d.message, **base)
        return HookResult(d.exit_code, d.message, "block")
    return _heal(target, vmid, style, journal, rep, c, base)


def _create_missing_nodes(target, c, journal: Journal, base: dict) -> bool:
    """LXF112 on NVIDIA nodes: run nvidia-modprobe, as the boot unit would. True if it ran."""
    modprobe = env_path("LXCFIX_NVIDIA_MODPROBE", MODPROBE)
    argvs = []
    for f in c.findings:
        if f.code == "LXF112" and (argv := modprobe_argv(f.device or "", modprobe)) and argv not in argvs:
            argvs.append(argv)
    if not argvs or not os.path.exists(target.local_path(modprobe)):
        return False
    # Steps of the one engine, journaled as every change is ("hook-nvidia-modprobe-command",
    # with argv and rc); nothing to undo: a node the driver made stays.
    steps: list[Step] = [Run(target.transport, argv, "nvidia-modprobe") for argv in argvs]
    tx = Transaction("creating the NVIDIA nodes", steps, journal, {k: v for k, v in base.items() if k != "event"},
                     prefix="hook-nvidia-modprobe-", events={"done": None, "failed": None, "rolled-back": None})
    try:
        tx.run()
    except ApplyFailed:
        pass  # the plan made next says what is still missing
    return True


def _heal(target, vmid: str, style: str, journal: Journal, rep, c, base: dict) -> HookResult:
    codes = _codes(blocking_findings(c.findings))
    if _create_missing_nodes(target, c, journal, base):
        rep, c = repair.one(target, vmid, style, probe=False)  # the new node may change the plan
    facts = rep.facts
    gen_path = Lxc(lxcpath=env_path("LXCFIX_LXC_PATH", "/var/lib/lxc")).config_path(vmid)
    gen_local = target.local_path(gen_path)
    loader = gather.include_loader(target.transport)

    def gen_plan(raw: bytes) -> Plan:
        cfg = ctconfig.parse(raw, "lxc", gen_path)
        extra = gather.source_nodes(target.transport, gather.mount_sources(cfg)) if facts.nodes_known else {}
        f = replace(facts, nodes={**facts.nodes, **{p: n for p, n in extra.items() if p not in facts.nodes}})
        return make_plan(gather.context(f, gather.Loaded(vmid, gen_path, cfg), loader), generated_style(style))

    def failed(message: str, code: int = int(ExitCode.ROLLED_BACK)) -> HookResult:
        _record(journal, decision="heal-failed", codes=codes, message=message, **base)
        return HookResult(code, message, "heal-failed")

    try:
        with open(gen_local, "rb") as fh:
            gen_before = fh.read()
    except OSError as e:
        return failed(f"lxcfix: CT {vmid}: cannot heal: the generated config {gen_path} is unreadable "
                      f"({e.strerror or e}); nothing changed. Run: lxcfix apply --ct {vmid}", int(ExitCode.PENDING))
    pve_plan = c.plan
    gplan = gen_plan(gen_before)
    left = blocking_findings(c.findings)
    absent = [f for f in left if f.code == "LXF112"]
    if absent or (left and pve_plan.is_empty and gplan.is_empty):
        # A node missing on the host is not a config problem: change nothing, refuse the start.
        return failed(f"lxcfix: CT {vmid}: cannot heal {', '.join(_codes(absent or left))} by a config change; "
                      f"nothing changed. {block_message(vmid, left)}", int(ExitCode.PENDING))
    if not left:  # nvidia-modprobe created what was missing
        _record(journal, decision="healed", codes=codes, **base)
        return HookResult(0, f"lxcfix: CT {vmid}: created the missing NVIDIA nodes with nvidia-modprobe", "heal")

    def still_broken() -> list[str]:
        _, now = repair.one(target, vmid, style, probe=False)
        with open(gen_local, "rb") as fh:
            gen_now = gen_plan(fh.read())
        return [f"{f.code} {f.message}" for f in blocking_findings(now.findings) + blocking_findings(gen_now.findings)]

    steps: list[Step] = []
    if not pve_plan.is_empty:
        # As `lxcfix apply`, but without the lock: Proxmox holds it around this hook.
        steps.append(Applier(Host(target.local_path, target.transport, None), vmid, state_dir(None), "pve",
                             lock_path=None).transaction(pve_plan, restart=False))
    if not gplan.is_empty:
        steps.append(Write(gen_local, gen_before, gplan.after, "lxc", shown=gen_path, event="generated",
                           writer=lambda *a, **k: write_atomic(*a, **k),
                           extra=dict(path=gen_path, digest_before=gplan.digest,
                                      digest_after=ctconfig.digest(gplan.after), style=gplan.style)))
    steps.append(Verify(still_broken, "check both configs again: nothing left to block the start", reached=None))
    heal = Transaction("healing", steps, journal, {k: v for k, v in base.items() if k != "event"},
                       prefix="hook-heal-", events={"done": None, "failed": None})
    try:
        result = heal.run()
    except RollbackFailed as e:
        msg = (f"lxcfix: CT {vmid}: {e}. The start is refused.")
        _record(journal, decision="heal-rollback-failed", codes=codes, message=msg, **base)
        return HookResult(int(ExitCode.ROLLBACK_FAILED), msg, "heal-failed")
    except ApplyFailed as e:
        why = str(e).split("\nrolled back:", 1)[0]
        return failed(f"lxcfix: CT {vmid}: healing failed ({why}); both configs are restored and the start is "
                      f"refused. Run: lxcfix diagnose --ct {vmid}")
    except LxcfixError as e:  # refused before anything changed (the config moved, the state dir)
        return failed(f"lxcfix: CT {vmid}: healing {pve_plan.path} failed ({e}); it is unchanged. "
                      f"Run: lxcfix apply --ct {vmid}",
                      int(e.exit_code) if e.exit_code >= ExitCode.ROLLED_BACK else int(ExitCode.PENDING))
    backup = result.state.get("backup")
    _record(journal, decision="healed", codes=codes, backup=backup, **base)
    changed = ([f"{pve_plan.path} (backup {backup})"] if not pve_plan.is_empty else []) + \
              ([f"{gen_path} (this start)"] if not gplan.is_empty else [])
    return HookResult(0, f"lxcfix: CT {vmid}: healed {', '.join(codes)}: changed {' and '.join(changed)}", "heal")
