"""The command line. The only module that prints; every command returns an
outcome (outcome.py) and main() turns it, or an LxcfixError, into the exit code.

Exit codes: 0 clean (or applied and verified), 1 findings or changes pending,
2 usage or bad input, 3 host/container unreachable or facts failed, 4 apply
failed and was rolled back, 5 rollback failed (the message says the state).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import sys
import time
from typing import List, Optional

import typer

from . import __version__, report, repair
from .errors import BadInput, ExitCode, LxcfixError
from .gather import host_facts
from .model import HostReport
from .outcome import Applied, Audited, Hooked, Planned, Scanned, Shown

OUTCOMES = (Applied, Audited, Hooked, Planned, Scanned, Shown)

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find, prove and safely repair broken device passthrough in Proxmox VE and LXC containers.",
)

class _Console:
    """A rich Console made on first use: JSON and prometheus output never load rich."""

    def __init__(self, **options):
        self._options = options
        self._console = None

    def __getattr__(self, name):
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True, **self._options)
        return getattr(self._console, name)


out = _Console()
err = _Console(stderr=True)


def Text(*args, **kw):  # noqa: N802  (rich's Text, loaded on first use)
    from rich.text import Text as RichText

    return RichText(*args, **kw)


def Table(*args, **kw):  # noqa: N802
    """rich's Table, whose string title and cells are plain text (escaped, never markup:
    a snapshot named `[red]x[/]` or a driver name in /proc/devices is shown as it is)."""
    from rich.table import Table as RichTable

    if isinstance(kw.get("title"), str):
        kw["title"] = Text(clean(kw["title"]))
    table = RichTable(*args, **kw)
    add_row = table.add_row
    table.add_row = lambda *cells, **k: add_row(*(Text(clean(c)) if isinstance(c, str) else c for c in cells), **k)
    return table


SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}

# C0 controls but tab and newline, DEL, and C1: what a container or a config may
# hold to move the cursor, retitle the terminal or write the clipboard (OSC 52).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """Text from a container or a config, safe for a terminal: control bytes
    shown as \\xNN. (rich's Text never reads markup; this stops the escapes.)"""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def say(text: object = "", style: str | None = None, console: Console | None = None) -> None:
    (console or out).print(Text(clean(text), style=style))


# ---- human output


def _print_host(rep: HostReport, show_ok: bool = True) -> None:
    table = Table(title=clean(f"{rep.host} ({rep.backend})"), title_justify="left")
    for col in ("CT", "status", "errors", "warnings", "info", "findings"):
        table.add_column(col)
    for c in rep.containers:
        status = report.ct_status(c.findings)
        if status == "ok" and not show_ok:
            continue
        counts = {s: sum(1 for f in c.findings if f.severity == s) for s in ("error", "warning", "info")}
        codes = ", ".join(sorted({f.code for f in c.findings}))
        table.add_row(Text(clean(c.ct)), Text(status, style=SEVERITY_STYLE[status]), str(counts["error"]),
                      str(counts["warning"]), str(counts["info"]), codes)
    out.print(table)


def _print_findings(findings, ct_label: bool = True, evidence: bool = False) -> None:
    for f in report.sort_findings(findings):
        line = Text()
        if ct_label:
            line.append(clean(f"{f.ct:>8}  "))
        line.append(f"{f.code} ", style="bold")
        line.append(f"{f.severity:<7} ", style=SEVERITY_STYLE[f.severity])
        line.append(clean(f.message))
        out.print(line)
        pad = " " * (10 if ct_label else 0)
        if evidence:
            for e in f.evidence:
                say(f"{pad}  evidence: {e}", "dim")
        if f.fix is not None:
            say(f"{pad}  fix: {f.fix.title}", "green")
        if f.live_fixable:
            say(f"{pad}  fixable live, without a restart: lxcfix apply --ct {f.ct} --live", "green")


def _print_diff(diff: str) -> None:
    for line in diff.splitlines():
        style = None
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        say(line, style)


def _print_steps(title: str, steps: list[str]) -> None:
    out.print(f"\n{title}:")
    for i, s in enumerate(steps, 1):
        say(f"  {i}. {s}")


def _json(doc: dict) -> None:
    # Indented for a person at a terminal; compact otherwise (json's C encoder
    # only runs without indent: 10,000 containers print 5x faster).
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(doc, indent=indent) + "\n")


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise BadInput("not a terminal and no --yes: refusing to change anything (the diff is above)")
    if not typer.confirm(question, default=False):
        raise BadInput("not confirmed; nothing changed")


# ---- options shared by the commands

RootOpt = typer.Option(None, "--root", help="Read a host snapshot laid out like the host's root.")
HostOpt = typer.Option(None, "--host", help="Host to work on (default: this one).")
CtOpt = typer.Option(..., "--ct", help="Container: Proxmox vmid or LXC name.")
StyleOpt = typer.Option("auto", "--style", help="Fix style: auto, devn, path or numeric.")
InventoryOpt = typer.Option(None, "--inventory",
                            help="Inventory of hosts: Ansible YAML, or `ansible-inventory --list` JSON ('-': stdin).")
AcceptNewOpt = typer.Option(False, "--accept-new-host-keys",
                            help="Trust and record unknown SSH host keys (never changed ones).")
KnownHostsOpt = typer.Option(None, "--known-hosts", help="known_hosts file to check against (and to record in).")
SshConfigOpt = typer.Option(None, "--ssh-config", help="ssh config file (default ~/.ssh/config).")


@dataclasses.dataclass(frozen=True)
class FleetRequest:
    """What a command that reaches hosts over SSH was asked: the same for scan and audit."""

    inventory: str
    hosts: tuple[str, ...] = ()
    cts: tuple[str, ...] = ()
    probe: bool = True
    style: str = "auto"
    concurrency: int = 8
    known_hosts: str | None = None
    accept_new: bool = False
    ssh_config: str | None = None
    keep_context: bool = False


def _fleet(req: FleetRequest, show_progress: bool) -> list[HostReport]:
    """Scan an inventory over SSH; a progress bar on a terminal (stderr, so stdout stays clean)."""
    from rich.progress import Progress

    from . import fleet, inventory, ssh

    entries = inventory.load_file(req.inventory).select(list(req.hosts))  # bad input first: nothing reached yet
    if not entries:
        raise BadInput(f"{req.inventory}: no host matches {', '.join(req.hosts) or 'the inventory'}")
    options = ssh.SshOptions.from_cli(known_hosts=req.known_hosts, accept_new=req.accept_new,
                                      ssh_config=req.ssh_config)
    options.check()  # a missing or garbled --ssh-config is bad input, before any host is tried
    if req.cts:
        entries = [dataclasses.replace(e, containers=tuple(req.cts)) for e in entries]
    connect = fleet.SshConnector(options)
    with Progress(console=err, disable=not (show_progress and err.is_terminal), transient=True) as bar:
        task = bar.add_task("scanning", total=len(entries))
        return fleet.scan_fleet(entries, concurrency=req.concurrency, per_host=4, probe=req.probe, style=req.style,
                                progress=lambda h, done, total: bar.update(task, completed=done, description=h),
                                connect=connect, keep_context=req.keep_context)


# ---- commands


@app.command()
def scan(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    host: Optional[List[str]] = HostOpt,
    ct: Optional[List[str]] = typer.Option(None, "--ct", help="Only these containers."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Config and host facts only; do not enter containers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    fmt: str = typer.Option("table", "--format", help="table, json or prometheus."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=256, help="Hosts scanned at once."),
    accept_new: bool = AcceptNewOpt,
    known_hosts: Optional[str] = KnownHostsOpt,
    ssh_config: Optional[str] = SshConfigOpt,
    style: str = StyleOpt,
) -> Scanned:
    """Diagnose every container on a host, snapshot or inventory of hosts, and show what to fix."""
    if fmt not in ("table", "json", "prometheus"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or prometheus")
    fmt = "json" if as_json else fmt
    if inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        hosts = _fleet(FleetRequest(inventory, tuple(host or ()), tuple(ct or ()), not no_probe, style, concurrency,
                                    known_hosts, accept_new, ssh_config), show_progress=fmt == "table")
    else:
        target = repair.open_target(root, host)
        hosts = [repair.scan(target, ct, style, probe=not no_probe)]
    if fmt == "json":
        _json(report.document("scan", hosts))
    elif fmt == "prometheus":
        sys.stdout.write(report.prometheus(hosts, time.time()))
    else:
        for rep in hosts:
            if rep.error:
                say(f"{rep.host}: unreachable (LXF301): {rep.error}", "bold red")
                continue
            _print_host(rep)
            findings = [f for c in rep.containers for f in c.findings]
            if findings:
                out.print()
                _print_findings(findings)
            pending = [c.ct for c in rep.containers if c.plan is not None and not c.plan.is_empty]
            if pending:
                where = f" --root {root}" if root else (f" --host {rep.host}" if inventory else "")
                say(f"fixes ready for CT {', '.join(pending)}: lxcfix plan --ct ID{where}")
            out.print()
        s = report.summary(hosts)
        out.print(f"{len(hosts)} host(s), {s['containers']} containers: {s['error']} errors, "
                  f"{s['warning']} warnings, {s['info']} info, {s['unreachable']} unreachable")
    return Scanned(hosts)


@app.command()
def diagnose(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    as_json: bool = typer.Option(False, "--json"),
) -> Scanned:
    """One container in depth: findings with their evidence."""
    target = repair.open_target(root, host)
    rep, c = repair.one(target, ct, probe=True)
    one = HostReport(rep.host, rep.backend, rep.facts, (c,))
    if as_json:
        _json(report.document("diagnose", [one]))
    else:
        state = f" ({c.status})" if c.status else ""
        say(f"CT {ct}{state} on {rep.host}: {c.path}", "bold")
        if not c.findings:
            say("no problems found", "green")
        _print_findings(c.findings, ct_label=False, evidence=True)
    return Scanned([one], "diagnose")


@app.command()
def plan(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt, style: str = StyleOpt,
) -> Planned:
    """Print the fix as a unified diff of the config (nothing when there is nothing to do)."""
    target = repair.open_target(root, host)
    _, c = repair.one(target, ct, style)
    repair.check_editable(c)
    say(f"style: {c.plan.style} ({c.plan.style_reason})", "dim", err)
    if not c.plan.is_empty:
        _print_diff(c.plan.diff())
    return Planned(c.plan)


@app.command()
def apply(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff and the steps; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    no_restart: bool = typer.Option(False, "--no-restart", help="Write the config only."),
    live: bool = typer.Option(False, "--live", help="Fix the running container in place, without a restart."),
    style: str = StyleOpt,
) -> Applied:
    """Back up, write atomically, restart (or --live: change it in place), verify; roll back on any failure."""
    target = repair.open_target(root, host)
    if root is not None and not no_restart:
        raise BadInput("--root edits a snapshot: add --no-restart (there is no container to restart)")
    if live and (root is not None or no_restart):
        raise BadInput("--live changes a running container in place: not with --root or --no-restart")
    rep, c = repair.one(target, ct, style, probe=live)
    repair.check_editable(c)
    p = c.plan
    if p.is_empty:
        say(f"CT {ct}: nothing to change")
        return Applied(None, dry_run=dry_run)
    tx = repair.apply_transaction(target, c, rep.facts, restart=not no_restart, live=live)
    _print_diff(p.diff())
    say(f"style: {p.style} ({p.style_reason})", "dim", err)
    if dry_run:
        _print_steps("steps apply would take", tx.describe_steps()
                     + ["on failure: undo the steps done, in reverse (restore the backup, restart or undo the "
                        "live change), exit 4"])
        return Applied(None, dry_run=True, pending=True)
    if not yes:
        _confirm(f"apply this change to CT {ct}?")
    result = tx.run()
    say(f"CT {ct}: applied ({result.reached}); backup {result.state.get('backup')}", "green")
    return Applied(None)


@app.command()
def rollback(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    to: Optional[str] = typer.Option(None, "--to", help="Backup file to restore (default: the newest)."),
    no_restart: bool = typer.Option(False, "--no-restart"),
) -> Applied:
    """Restore a backup taken by apply."""
    result = repair.rollback(repair.open_target(root, host), ct, to, restart=not no_restart)
    say(result.message)
    return Applied(result)


@app.command()
def audit(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    host: Optional[List[str]] = HostOpt,
    for_: str = typer.Option("reboot", "--for", help="reboot or driver-upgrade"),
    to_driver: Optional[str] = typer.Option(None, "--to-driver", help="NVIDIA version the upgrade installs."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Do not enter running containers."),
    as_json: bool = typer.Option(False, "--json"),
    markdown: Optional[str] = typer.Option(None, "--markdown", help="Also write a change-ticket report to FILE ('-': stdout)."),
    fmt: str = typer.Option("table", "--format", help="table, json or markdown"),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=256, help="Hosts audited at once."),
    accept_new: bool = AcceptNewOpt,
    known_hosts: Optional[str] = KnownHostsOpt,
    ssh_config: Optional[str] = SshConfigOpt,
) -> Audited:
    """What breaks on the next reboot or driver upgrade, and the exact change that prevents it."""
    from . import audit as audit_mod, hostfix

    if for_ not in audit_mod.FOR:
        raise BadInput(f"unknown --for {for_!r}: use reboot or driver-upgrade")
    if fmt not in ("table", "json", "markdown"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or markdown")
    if inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        reps = _fleet(FleetRequest(inventory, tuple(host or ()), (), not no_probe, "auto", concurrency,
                                   known_hosts, accept_new, ssh_config, keep_context=True),
                      show_progress=fmt == "table")
        result = audit_mod.audit(reps, for_, new_driver=to_driver)
        flags = {r.host: f"--host {r.host}" for r in reps}
    else:
        target = repair.open_target(root, host)
        rep = repair.scan(target, None, probe=not no_probe, keep_context=True)
        result = audit_mod.audit([rep], for_, new_driver=to_driver,
                                 boot_nodes={rep.host: hostfix.unit_installed(target)})
        flags = {rep.host: f"--root {root}" if root else ""}
    if markdown is not None:
        text = clean(audit_mod.to_markdown(result, host_flags=flags))
        if markdown == "-":
            fmt = "markdown"
        else:
            try:
                with open(markdown, "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                raise BadInput(f"--markdown {markdown}: {e.strerror or e}") from None
    fmt = "json" if as_json else fmt
    if fmt == "json":
        _json(audit_mod.to_json(result))
    elif fmt == "markdown":
        sys.stdout.write(clean(audit_mod.to_markdown(result, host_flags=flags)))
    else:
        _print_audit(result, for_)
    return Audited(result)


def _print_audit(result, for_: str) -> None:
    from . import audit as audit_mod

    s = audit_mod.summary(result)
    hosts = ", ".join(h.host for h in result.hosts)
    say(f"audit for {for_} on {hosts}: {s['will']} will break, {s['may']} may break, "
        f"of {s['containers']} containers", "bold")
    for i in result.items:
        line = Text(clean(f"{i.ct:>8}  "))
        line.append(f"{i.code} ", style="bold")
        line.append(f"{i.outcome:<5}", style="bold red" if i.outcome == "will" else "yellow")
        line.append(clean(i.why + (f" [{i.device}]" if i.device else "")))
        out.print(line)
        where = f"in {i.path}:" if i.kind == "config" else "run on the host:" if i.kind == "command" else "do:"
        say(f"          {where}", "dim")
        for text in i.change.splitlines():
            say(f"            {text}", "green" if text.startswith("+") else "red" if text.startswith("-") else None)


@app.command("host-fix")
def host_fix(
    root: Optional[str] = RootOpt, host: Optional[List[str]] = HostOpt,
    dry_run: bool = typer.Option(False, "--dry-run"), yes: bool = typer.Option(False, "--yes", "-y"),
    no_enable: bool = typer.Option(False, "--no-enable"), now: bool = typer.Option(False, "--now"),
    modprobe: Optional[str] = typer.Option(None, "--nvidia-modprobe", help="Default: /usr/bin/nvidia-modprobe."),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="GPU minor (repeat)"),
) -> Applied:
    """Install a systemd unit that creates the NVIDIA nodes at boot, before guests start (LXF112)."""
    from . import hostfix

    target = repair.open_target(root, host)
    plan = hostfix.plan_host_unit(host_facts(target.transport, target.backend), hostfix.read_existing(target),
                                  modprobe=modprobe or hostfix.MODPROBE, gpu_minors=gpu or None)
    for n in plan.notes:
        say(f"note: {n}", "dim", err)
    _print_diff(plan.diff())
    if dry_run:
        _print_steps("steps host-fix would take", hostfix.host_unit_steps(target, plan, enable=not no_enable, now=now)
                     + ["on failure: restore the old unit (or remove the new one), undo the enable, reload; exit 4"])
        return Applied(None, dry_run=True, pending=not plan.is_empty)
    if not plan.is_empty and not yes:
        _confirm(f"install {plan.path}?")
    r = hostfix.apply_host_unit(target, plan, enable=not no_enable, now=now)
    say(f"{hostfix.UNIT_NAME}: {r.step_reached}" + (f"; backup {r.backup_path}" if r.backup_path else "")
        + (f" ({r.message})" if r.message else ""), "green")
    return Applied(r)


@app.command("hook")
def hook(
    vmid: Optional[str] = typer.Argument(None), phase: Optional[str] = typer.Argument(None),
    mode: str = typer.Option("fail", "--mode", help="fail: refuse the start; heal: fix and go on"),
    style: str = StyleOpt,
    print_snippet: bool = typer.Option(False, "--print-snippet", help="Print the hookscript snippet to install."),
) -> Hooked | Shown:
    """Proxmox VE hookscript: pct set VMID --hookscript local:snippets/lxcfix-hook.sh"""
    from . import hook as hook_mod

    if mode not in hook_mod.MODES:
        raise BadInput(f"--mode must be fail or heal, not {mode!r}")
    if print_snippet:
        sys.stdout.write(hook_mod.snippet(mode))
        return Shown("snippet")
    if vmid is None or phase is None:
        raise BadInput("usage: lxcfix hook [--mode fail|heal] VMID PHASE")
    res = hook_mod.run_hook(vmid, phase, mode, style=style)
    if res.message:  # plain text: Proxmox shows it in the task log
        (sys.stderr if res.stream == "stderr" else sys.stdout).write(clean(res.message) + "\n")
    return Hooked(res.exit_code)


@app.command()
def facts(
    host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    as_json: bool = typer.Option(False, "--json"),
) -> Shown:
    """What lxcfix knows about the host: majors, nodes, driver, cgroup layout."""
    target = repair.open_target(root, host)
    f = host_facts(target.transport, target.backend)
    doc = report.facts_json(HostReport(f.host, f.backend, f))
    if as_json:
        _json({"schema": report.SCHEMA, "host": f.host, "facts": doc})
        return Shown("facts")
    table = Table(title=clean(f.host), show_header=False, title_justify="left")
    table.add_row("backend", f.backend)
    table.add_row("cgroup layout", f.cgroup_layout)
    table.add_row("NVIDIA driver", f.nvidia_driver or "-")
    table.add_row("Proxmox VE", f.pve_version or "-")
    table.add_row("LXC", f.lxc_version or "-")
    interesting = ("nvidia", "nvidia-frontend", "nvidia-uvm", "nvidia-caps", "drm", "kfd", "misc")
    table.add_row("char majors", ", ".join(f"{n} {','.join(map(str, ms))}" for n, ms in sorted(f.char_majors.items())
                                            if n in interesting) or "-")
    table.add_row("device nodes", str(len(f.nodes)) if f.nodes_known else "not read (snapshot without dev/)")
    out.print(table)
    return Shown("facts")


def _version(value: bool) -> None:
    if value:
        out.print(f"lxcfix {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for internal errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True),
) -> None:
    if debug:
        os.environ["LXCFIX_DEBUG"] = "1"


def _framework_exit(e: Exception) -> int | None:
    """typer/click signal exits, aborts and usage errors with exceptions; which
    click they come from (click itself, or the copy newer typer ships) varies,
    so they are recognised by shape, not class."""
    name = type(e).__name__
    if name == "Exit" and hasattr(e, "exit_code"):
        return int(e.exit_code or 0)
    if name == "Abort":
        err.print("lxcfix: aborted; nothing changed")
        return ExitCode.USAGE
    if hasattr(e, "format_message") and hasattr(e, "exit_code"):
        ctx = getattr(e, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        say(f"lxcfix: error: {e.format_message()}{hint}", console=err)
        return ExitCode.USAGE
    return None


def run(argv: list[str] | None = None) -> int:
    """The exit code of one command line: its outcome's, or its error's."""
    try:
        result = app(args=argv, standalone_mode=False)
    except LxcfixError as e:
        say(f"lxcfix: error: {e}", "bold red" if e.exit_code >= 4 else None, err)
        return int(e.exit_code)
    except KeyboardInterrupt:
        err.print("lxcfix: interrupted")
        return 130
    except Exception as e:
        code = _framework_exit(e)
        if code is None:  # a bug: one line, not a traceback, unless asked
            if os.environ.get("LXCFIX_DEBUG"):
                raise
            say(f"lxcfix: internal error (a bug, please report it): {type(e).__name__}: {e}; "
                "--debug shows the traceback", console=err)
            return int(ExitCode.UNREACHABLE)
        return code
    if isinstance(result, OUTCOMES):
        return int(result.exit_code)
    return int(result or 0)  # --help, --version: click's own exit


def main(argv: list[str] | None = None) -> None:
    # A scan allocates many small objects that all live until the report is
    # printed: the cyclic collector only re-walks them (9% of a 10,000-config scan).
    gc.freeze()
    gc.set_threshold(50_000, 50, 50)
    sys.exit(run(argv))
