"""The command line. The only module that prints or picks an exit code.

Exit codes: 0 clean (or applied and verified), 1 findings or changes pending,
2 usage or bad input, 3 host/container unreachable or facts failed, 4 apply
failed and was rolled back, 5 rollback failed (the message says the state).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, report
from . import repair
from .apply import default_state_dir
from .errors import BadInput, ExitCode, LxcfixError
from .gather import host_facts
from .scan import HostReport

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find, prove and safely repair broken device passthrough in Proxmox VE and LXC containers.",
)

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}


# ---- targets


# ---- human output


def _print_host(rep: HostReport, show_ok: bool = True) -> None:
    table = Table(title=f"{rep.host} ({rep.backend})", title_justify="left")
    for col in ("CT", "status", "errors", "warnings", "info", "findings"):
        table.add_column(col)
    for c in rep.containers:
        status = report.ct_status(c.findings)
        if status == "ok" and not show_ok:
            continue
        counts = {s: sum(1 for f in c.findings if f.severity == s) for s in ("error", "warning", "info")}
        codes = ", ".join(sorted({f.code for f in c.findings}))
        table.add_row(c.ct, Text(status, style=SEVERITY_STYLE[status]), str(counts["error"]),
                      str(counts["warning"]), str(counts["info"]), codes)
    out.print(table)


def _print_findings(findings, ct_label: bool = True, evidence: bool = False) -> None:
    for f in report.sort_findings(findings):
        line = Text()
        if ct_label:
            line.append(f"{f.ct:>8}  ")
        line.append(f"{f.code} ", style="bold")
        line.append(f"{f.severity:<7} ", style=SEVERITY_STYLE[f.severity])
        line.append(f.message)
        out.print(line)
        pad = " " * (10 if ct_label else 0)
        if evidence:
            for e in f.evidence:
                out.print(Text(f"{pad}  evidence: {e}", style="dim"))
        if f.fix:
            out.print(Text(f"{pad}  fix: {f.fix}", style="green"))
        if f.live_fixable:
            out.print(Text(f"{pad}  fixable live, without a restart: lxcfix apply --ct {f.ct} --live", style="green"))


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
        out.print(Text(line, style=style))


def _json(doc: dict) -> None:
    # Indented for a person at a terminal; compact otherwise (json's C encoder
    # only runs without indent: 10,000 containers print 5x faster).
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(doc, indent=indent) + "\n")


def _exit_for(hosts: list[HostReport]) -> int:
    findings = [f for h in hosts for c in h.containers for f in c.findings]
    if any(f.severity in ("error", "warning") for f in findings):
        return ExitCode.PENDING
    if any(h.error for h in hosts):
        return ExitCode.UNREACHABLE
    return ExitCode.CLEAN


# ---- commands

RootOpt = typer.Option(None, "--root", help="Read a host snapshot laid out like the host's root.")
HostOpt = typer.Option(None, "--host", help="Host to work on (default: this one).")
CtOpt = typer.Option(..., "--ct", help="Container: Proxmox vmid or LXC name.")
StyleOpt = typer.Option("auto", "--style", help="Fix style: auto, devn, path or numeric.")


@app.command()
def scan(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = typer.Option(None, "--inventory", help="YAML inventory of hosts (Ansible style)."),
    host: Optional[List[str]] = HostOpt,
    ct: Optional[List[str]] = typer.Option(None, "--ct", help="Only these containers."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Config and host facts only; do not enter containers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    fmt: str = typer.Option("table", "--format", help="table, json or prometheus."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=256, help="Hosts scanned at once."),
    accept_new: bool = typer.Option(False, "--accept-new-host-keys",
                                    help="Trust and record unknown SSH host keys (never changed ones)."),
    known_hosts: Optional[str] = typer.Option(None, "--known-hosts", help="known_hosts file to check against."),
    ssh_config: Optional[str] = typer.Option(None, "--ssh-config", help="ssh config file (default ~/.ssh/config)."),
    style: str = StyleOpt,
) -> None:
    """Diagnose every container on a host, snapshot or inventory of hosts, and show what to fix."""
    if fmt not in ("table", "json", "prometheus"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or prometheus")
    fmt = "json" if as_json else fmt
    if inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        hosts = _fleet(inventory, host, ct, no_probe, concurrency, style, accept_new, known_hosts, ssh_config,
                       show_progress=fmt == "table")
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
                out.print(Text(f"{rep.host}: unreachable (LXF301): {rep.error}", style="bold red"))
                continue
            _print_host(rep)
            findings = [f for c in rep.containers for f in c.findings]
            if findings:
                out.print()
                _print_findings(findings)
            pending = [c.ct for c in rep.containers if c.plan is not None and not c.plan.is_empty]
            if pending:
                where = f" --root {root}" if root else (f" --host {rep.host}" if inventory else "")
                out.print(f"fixes ready for CT {', '.join(pending)}: lxcfix plan --ct ID{where}")
            out.print()
        s = report.summary(hosts)
        out.print(f"{len(hosts)} host(s), {s['containers']} containers: {s['error']} errors, "
                  f"{s['warning']} warnings, {s['info']} info, {s['unreachable']} unreachable")
    raise typer.Exit(_exit_for(hosts))


def _fleet(inventory_file, names, cts, no_probe, concurrency, style, accept_new, known_hosts, ssh_config,
           show_progress: bool) -> list[HostReport]:
    """Scan an inventory over SSH; a progress bar on a terminal (stderr, so stdout stays clean)."""
    from rich.progress import Progress

    from . import fleet, inventory

    entries = inventory.load_file(inventory_file).select(names)
    if not entries:
        raise BadInput(f"{inventory_file}: no host matches {', '.join(names or []) or 'the inventory'}")
    if cts:
        entries = [dataclasses.replace(e, containers=tuple(cts)) for e in entries]
    options = {"known_hosts": known_hosts, "accept_new": accept_new}
    if ssh_config is not None:
        options["ssh_config"] = ssh_config
    connect = fleet.ssh_connector(**options)
    with Progress(console=err, disable=not (show_progress and err.is_terminal), transient=True) as bar:
        task = bar.add_task("scanning", total=len(entries))
        return fleet.scan_fleet(entries, concurrency=concurrency, per_host=4, probe=not no_probe, style=style,
                                progress=lambda h, done, total: bar.update(task, completed=done, description=h),
                                connect=connect)


@app.command()
def diagnose(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One container in depth: findings with their evidence."""
    target = repair.open_target(root, host)
    rep, c = repair.one(target, ct, probe=True)
    if as_json:
        _json(report.document("diagnose", [HostReport(rep.host, rep.backend, rep.facts, (c,))]))
    else:
        state = f" ({c.status})" if c.status else ""
        out.print(Text(f"CT {ct}{state} on {rep.host}: {c.path}", style="bold"))
        if not c.findings:
            out.print(Text("no problems found", style="green"))
        _print_findings(c.findings, ct_label=False, evidence=True)
    raise typer.Exit(_exit_for([HostReport(rep.host, rep.backend, rep.facts, (c,))]))


@app.command()
def plan(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt, style: str = StyleOpt,
) -> None:
    """Print the fix as a unified diff of the config (nothing when there is nothing to do)."""
    target = repair.open_target(root, host)
    _, c = repair.one(target, ct, style)
    err.print(Text(f"style: {c.plan.style} ({c.plan.style_reason})", style="dim"))
    if c.plan.is_empty:
        raise typer.Exit(ExitCode.CLEAN)
    _print_diff(c.plan.diff())
    raise typer.Exit(ExitCode.PENDING)


@app.command()
def apply(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff and the steps; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    no_restart: bool = typer.Option(False, "--no-restart", help="Write the config only."),
    live: bool = typer.Option(False, "--live", help="Fix the running container in place, without a restart."),
    style: str = StyleOpt,
) -> None:
    """Back up, write atomically, restart (or --live: change it in place), verify; roll back on any failure."""
    target = repair.open_target(root, host)
    if root is not None and not no_restart:
        raise BadInput("--root edits a snapshot: add --no-restart (there is no container to restart)")
    if live and (root is not None or no_restart):
        raise BadInput("--live changes a running container in place: not with --root or --no-restart")
    rep, c = repair.one(target, ct, style)
    p = c.plan
    if p.is_empty:
        out.print(f"CT {ct}: nothing to change")
        raise typer.Exit(ExitCode.CLEAN)
    state = default_state_dir(root)
    steps = [
        f"lock {target.backend.lock_path(ct)}; refuse on 'lock:'; check the digest ({p.digest[:12]})",
        f"back up to {os.path.join(state, 'backups', ct)}/<time>-{p.digest[:12]}.conf (0600)",
        f"write {p.path} atomically (temp file, fsync, re-parse, rename)",
    ]
    ops = None
    if live:
        ops = repair.live_ops(target, c, rep.facts)
        if ops.refuse:
            raise BadInput(f"--live cannot do this change: {ops.refuse}")
        steps += [f"change the running CT {ct}: " + "; ".join(
            [f"lxc-cgroup devices.allow '{r}'" for r in ops.allow]
            + [f"lxc-device add {g.path}" for g in ops.create]
            + [f"lxc-cgroup devices.deny '{r}'" for r in ops.deny]),
            "verify: probe inside, init PID unchanged, running allowlist equals the config",
            "on failure: undo the live change, restore the backup, exit 4"]
    elif not no_restart:
        steps += [f"restart CT {ct} if it runs, wait until it is up", "verify: probe inside and re-plan clean",
                  "on failure: restore the backup, restart, exit 4"]
    _print_diff(p.diff())
    err.print(Text(f"style: {p.style} ({p.style_reason})", style="dim"))
    if dry_run:
        out.print("\nsteps apply would take:")
        for i, s in enumerate(steps, 1):
            out.print(f"  {i}. {s}")
        raise typer.Exit(ExitCode.PENDING)
    if not yes:
        if not sys.stdin.isatty():
            raise BadInput("not a terminal and no --yes: refusing to change anything (the diff is above)")
        if not typer.confirm(f"apply this change to CT {ct}?", default=False):
            raise BadInput("not confirmed; nothing changed")
    result = repair.apply_plan(target, c, rep.facts, style, restart=not no_restart, live=live, ops=ops)
    out.print(Text(f"CT {ct}: applied ({result.step_reached}); backup {result.backup_path}", style="green"))
    raise typer.Exit(ExitCode.CLEAN)


@app.command()
def rollback(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    to: Optional[str] = typer.Option(None, "--to", help="Backup file to restore (default: the newest)."),
    no_restart: bool = typer.Option(False, "--no-restart"),
) -> None:
    """Restore a backup taken by apply."""
    result = repair.rollback(repair.open_target(root, host), ct, to, restart=not no_restart)
    out.print(result.message)
    raise typer.Exit(ExitCode.CLEAN)


@app.command()
def audit(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = typer.Option(None, "--inventory"),
    host: Optional[List[str]] = HostOpt,
    for_: str = typer.Option("reboot", "--for", help="reboot or driver-upgrade"),
    to_driver: Optional[str] = typer.Option(None, "--to-driver", help="NVIDIA version the upgrade installs."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Do not enter running containers."),
    as_json: bool = typer.Option(False, "--json"),
    markdown: Optional[str] = typer.Option(None, "--markdown", help="Also write a change-ticket report to FILE ('-': stdout)."),
    fmt: str = typer.Option("table", "--format", help="table, json or markdown"),
) -> None:
    """What breaks on the next reboot or driver upgrade, and the exact change that prevents it."""
    from . import audit as audit_mod, hostfix

    if for_ not in audit_mod.FOR:
        raise BadInput(f"unknown --for {for_!r}: use reboot or driver-upgrade")
    if fmt not in ("table", "json", "markdown"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or markdown")
    if inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        reps = _fleet(inventory, host, None, no_probe, 8, "auto", False, None, None, show_progress=fmt == "table")
        result = audit_mod.audit(reps, for_, new_driver=to_driver)
        flags = {r.host: f"--host {r.host}" for r in reps}
    else:
        target = repair.open_target(root, host)
        rep = repair.scan(target, None, probe=not no_probe)
        result = audit_mod.audit([rep], for_, new_driver=to_driver,
                                 boot_nodes={rep.host: hostfix.unit_installed(target)})
        flags = {rep.host: f"--root {root}" if root else ""}
    if markdown is not None:
        text = audit_mod.to_markdown(result, host_flags=flags)
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
        sys.stdout.write(audit_mod.to_markdown(result, host_flags=flags))
    else:
        _print_audit(result, for_)
    if result.items:
        raise typer.Exit(ExitCode.PENDING)
    raise typer.Exit(ExitCode.UNREACHABLE if any(h.error for h in result.hosts) else ExitCode.CLEAN)


def _print_audit(result, for_: str) -> None:
    from . import audit as audit_mod

    s = audit_mod.summary(result)
    hosts = ", ".join(h.host for h in result.hosts)
    out.print(Text(f"audit for {for_} on {hosts}: {s['will']} will break, {s['may']} may break, "
                   f"of {s['containers']} containers", style="bold"))
    for i in result.items:
        line = Text(f"{i.ct:>8}  ")
        line.append(f"{i.code} ", style="bold")
        line.append(f"{i.outcome:<5}", style="bold red" if i.outcome == "will" else "yellow")
        line.append(i.why + (f" [{i.device}]" if i.device else ""))
        out.print(line)
        where = f"in {i.path}:" if i.kind == "config" else "run on the host:" if i.kind == "command" else "do:"
        out.print(Text(f"          {where}", style="dim"))
        for text in i.change.splitlines():
            out.print(Text(f"            {text}", style="green" if text.startswith("+")
                           else "red" if text.startswith("-") else None))


@app.command("host-fix")
def host_fix(
    root: Optional[str] = RootOpt, host: Optional[List[str]] = HostOpt,
    dry_run: bool = typer.Option(False, "--dry-run"), yes: bool = typer.Option(False, "--yes", "-y"),
    no_enable: bool = typer.Option(False, "--no-enable"), now: bool = typer.Option(False, "--now"),
    modprobe: Optional[str] = typer.Option(None, "--nvidia-modprobe", help="Default: /usr/bin/nvidia-modprobe."),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="GPU minor (repeat)"),
) -> None:
    """Install a systemd unit that creates the NVIDIA nodes at boot, before guests start (LXF112)."""
    from . import hostfix

    target = repair.open_target(root, host)
    plan = hostfix.plan_host_unit(host_facts(target.transport, target.backend), hostfix.read_existing(target),
                                  modprobe=modprobe or hostfix.MODPROBE, gpu_minors=gpu or None)
    for n in plan.notes:
        err.print(Text(f"note: {n}", style="dim"))
    _print_diff(plan.diff())
    if dry_run:
        out.print("\nsteps host-fix would take:")
        for k, step in enumerate(hostfix.host_unit_steps(target, plan, enable=not no_enable, now=now), 1):
            out.print(f"  {k}. {step}")
        raise typer.Exit(ExitCode.CLEAN if plan.is_empty else ExitCode.PENDING)
    if not plan.is_empty and not yes:
        if not sys.stdin.isatty():
            raise BadInput("not a terminal and no --yes: refusing to change anything (the diff is above)")
        if not typer.confirm(f"install {plan.path}?", default=False):
            raise BadInput("not confirmed; nothing changed")
    r = hostfix.apply_host_unit(target, plan, enable=not no_enable, now=now)
    out.print(Text(f"{hostfix.UNIT_NAME}: {r.step_reached}" + (f"; backup {r.backup_path}" if r.backup_path else "")
                   + (f" ({r.message})" if r.message else ""), style="green"))
    raise typer.Exit(ExitCode.CLEAN)


@app.command("hook")
def hook(
    vmid: Optional[str] = typer.Argument(None), phase: Optional[str] = typer.Argument(None),
    mode: str = typer.Option("fail", "--mode", help="fail: refuse the start; heal: fix and go on"),
    style: str = StyleOpt,
    print_snippet: bool = typer.Option(False, "--print-snippet", help="Print the hookscript snippet to install."),
) -> None:
    """Proxmox VE hookscript: pct set VMID --hookscript local:snippets/lxcfix-hook.sh"""
    from . import hook as hook_mod

    if print_snippet:
        sys.stdout.write(hook_mod.snippet(mode))
        raise typer.Exit(ExitCode.CLEAN)
    if vmid is None or phase is None:
        raise BadInput("usage: lxcfix hook [--mode fail|heal] VMID PHASE")
    res = hook_mod.run_hook(vmid, phase, mode, style=style)
    if res.message:  # plain text: Proxmox shows it in the task log
        (sys.stderr if res.stream == "stderr" else sys.stdout).write(res.message + "\n")
    raise typer.Exit(res.exit_code)


@app.command()
def facts(
    host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """What lxcfix knows about the host: majors, nodes, driver, cgroup layout."""
    target = repair.open_target(root, host)
    f = host_facts(target.transport, target.backend)
    doc = report.facts_json(HostReport(f.host, f.backend, f))
    if as_json:
        _json({"schema": report.SCHEMA, "host": f.host, "facts": doc})
        raise typer.Exit(ExitCode.CLEAN)
    table = Table(title=f"{f.host}", show_header=False, title_justify="left")
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
    raise typer.Exit(ExitCode.CLEAN)


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
        err.print(f"lxcfix: error: {e.format_message()}{hint}")
        return ExitCode.USAGE
    return None


def main(argv: list[str] | None = None) -> None:
    # A scan allocates many small objects that all live until the report is
    # printed: the cyclic collector only re-walks them (9% of a 10,000-config scan).
    gc.freeze()
    gc.set_threshold(50_000, 50, 50)
    try:
        code = app(args=argv, standalone_mode=False)
    except LxcfixError as e:
        err.print(Text(f"lxcfix: error: {e}", style="bold red" if e.exit_code >= 4 else None))
        code = e.exit_code
    except KeyboardInterrupt:
        err.print("lxcfix: interrupted")
        code = 130
    except Exception as e:
        code = _framework_exit(e)
        if code is None:  # a bug: one line, not a traceback, unless asked
            if os.environ.get("LXCFIX_DEBUG"):
                raise
            err.print(f"lxcfix: internal error (a bug, please report it): {type(e).__name__}: {e}; "
                      "--debug shows the traceback")
            code = ExitCode.UNREACHABLE
    sys.exit(int(code or 0))
