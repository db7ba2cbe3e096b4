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
import shlex
import sys
import time
from typing import List, Optional

import typer

from . import __version__, devices, repair
from . import plan as plan_mod
from .errors import BadInput, ExitCode, LxcfixError, Unreachable
from .gather import host_facts
from .model import CtReport, HostReport
from .rules.access import MAP_GROUP, checked_map_group
from .outcome import Applied, Audited, Hooked, Planned, Preflighted, Rolled, Scanned, Shown, Watched, applied_message

OUTCOMES = (Applied, Audited, Hooked, Planned, Preflighted, Rolled, Scanned, Shown, Watched)


class _OnFirstUse:
    """A module of this package imported when one of its names is first read: what only the
    reports need (causes, report: ~40 ms) stays off the start-up of apply, plan and rollback."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{self._name}"), attr)


causes = _OnFirstUse("causes")
report = _OnFirstUse("report")

app = typer.Typer(
    add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find, prove and safely repair broken device passthrough in Proxmox VE and LXC containers.",
    # click's plain help formatter: typer's rich panel prints a type label beside every
    # parameter, flags included (`--debug <bool>`); the plain one gives flags none, and
    # every option that takes a value names it (metavar: --root DIR, --ct ID).
    rich_markup_mode=None,
)

COLORS = ("auto", "always", "never")
_color = {"mode": "auto"}  # --color; read when a console is made
_typed = {"argv": []}  # the command line as given (run()): the change ticket names it


def color_options(mode: str) -> dict:
    """rich Console options for --color: auto leaves it to rich (a terminal, and
    NO_COLOR unset or empty); always colours a pipe too, even under NO_COLOR;
    never writes no escape sequence at all."""
    if mode == "always":
        return {"force_terminal": True, "no_color": False, "color_system": "standard"}
    if mode == "never":
        return {"no_color": True, "color_system": None}
    return {}


class _Console:
    """A rich Console made on first use (JSON and prometheus output never load
    rich), with the --color choice of the command line that made it."""

    def __init__(self, **options):
        self._options = options
        self._console = None

    def reset(self) -> None:
        """Forget the console: the next use makes one with the current --color (and NO_COLOR)."""
        self._console = None

    def stream(self):
        return sys.stderr if self._options.get("stderr") else sys.stdout

    def plain(self) -> bool:
        """What rich would print as the text alone (no colour, no escape: not a terminal, no
        --color always, no FORCE_COLOR), and rich not loaded for it: one line written as it is."""
        if self._console is not None or _color["mode"] == "always":
            return False
        if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") or os.environ.get("TTY_INTERACTIVE"):
            return False
        try:
            return not self.stream().isatty()
        except (AttributeError, ValueError):
            return False

    def real(self):
        """The rich Console itself (what rich's own classes, a Progress, are given: they use it
        as a context manager, which a proxy's __getattr__ cannot stand in for)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True, **color_options(_color["mode"]),
                                    **self._options)
        return self._console

    def __getattr__(self, name):
        if name == "print" and self._options.get("stderr"):
            _flush_stdout()
        return getattr(self.real(), name)


def _flush_stdout() -> None:
    """Before anything goes to stderr: what stdout holds first, so that through a pipe (both
    streams into one, `2>&1 | less`) a refusal comes after the diff it refers to."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


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

from .bounded import clean  # noqa: E402  (text from a container or a config, safe for a terminal)


def say(text: object = "", style: str | None = None, console: "_Console | None" = None) -> None:
    console, text = console or out, clean(text)
    if console is err:
        _flush_stdout()
    if "\t" not in text and console.plain():  # (rich expands tabs by cell width)
        console.stream().write(text + "\n")
        return
    console.print(Text(text, style=style))


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


def _print_findings(findings, ct_label: bool = True, evidence: bool = False,
                    reach: "causes.Reach | None" = None) -> None:
    """Every finding, one by one (-v): containers in vmid order; reach: where the commands shown act."""
    for f in sorted(report.sort_findings(findings), key=lambda f: causes.ct_order(f.ct)):
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
            say(f"{pad}  fix: {(reach or causes.LOCAL).within(f.fix.title)}", "green")
        if f.live_fixable:
            live = (reach or causes.LOCAL).apply(f.ct, "--live") if not (reach and reach.root) else None
            if live:
                say(f"{pad}  fixable live, without a restart: {live}", "green")


CAUSE_STYLE = {**SEVERITY_STYLE, "proof": None, "fix": "green", "symptom": "dim", "note": "dim"}


def _print_causes(c: CtReport, facts, reach: "causes.Reach | None" = None, fold: bool = False,
                  indent: str = "") -> None:
    """A container's findings by cause (lxcfix.causes): the cause, its proof, the fix, then the symptoms."""
    for cause in report.grouped(c, facts):
        for text, role in causes.lines(cause, reach, fold):
            if role in SEVERITY_STYLE:  # the cause itself: its severity coloured, the rest bold
                line = Text(clean(indent))
                line.append(clean(text[:causes.LABEL]), style=SEVERITY_STYLE[role])
                line.append(clean(text[causes.LABEL:]), style="bold")
                out.print(line)
            else:
                say(indent + text, CAUSE_STYLE.get(role))


def _hint() -> None:
    say("-v: every finding on its own; lxcfix explain CODE: what a code means, how lxcfix knows, the fix by hand",
        "dim")


def _reach(root: str | None) -> "causes.Reach":
    """Where the commands shown act: this host, or a copy of the --root snapshot (causes.Reach)."""
    return causes.Reach(root=root) if root is not None else causes.LOCAL


def _ssh_reach(entry, req: "FleetRequest") -> "causes.Reach":
    """How a fleet host's commands reach it: apply, plan, diagnose, rollback, host-fix, scan and audit
    through the same inventory, with the known_hosts and ssh config the scan was given; the hook's
    snippet (lxcfix runs on the host) over ssh, as the scan reached it (its address, port, user, key)."""
    env = (*((f"LXCFIX_LXC_PATH={entry.lxc_path}",) if entry.lxc_path else ()),
           *((f"LXCFIX_PVE_DIR={entry.pve_dir}",) if entry.pve_dir else ()))
    if entry.connection == "local":
        return causes.Reach(env=env) if env else causes.LOCAL
    argv = ["ssh"]
    if req.ssh_config:
        argv += ["-F", req.ssh_config]
    known = entry.known_hosts or req.known_hosts
    if known:
        argv += ["-o", f"UserKnownHostsFile={known}"]
    if entry.port:
        argv += ["-p", str(entry.port)]
    if entry.key_file:
        argv += ["-i", entry.key_file]
    argv.append(f"{entry.user}@{entry.destination}" if entry.user else entry.destination)
    flags = (*(("--known-hosts", req.known_hosts) if req.known_hosts else ()),
             *(("--ssh-config", req.ssh_config) if req.ssh_config else ()))
    return causes.Reach(ssh=tuple(argv), inventory=req.inventory if req.inventory != "-" else None,
                        name=entry.name, flags=flags, env=env)


def _print_diff(diff: str, escape: bool = False) -> None:
    """escape: a fleet host's diff, each line one escaped field (bounded.field)."""
    from .bounded import field

    lines = diff.split("\n") if escape else diff.splitlines()  # \x0c, U+2028: escaped, not a break
    for line in lines[:-1] if escape and lines and not lines[-1] else lines:
        line = field(line) if escape else line
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


def _print_verdict(command: str, verdict) -> None:
    """Check mode's verdict (Transaction.check()): go ahead, or the step the real run stops at
    and its error, which the caller then raises (the real run's exit code)."""
    if verdict.ok:
        say(f"check: every step's precondition holds: {command} would go ahead", "green")
        return
    n = verdict.steps.index(verdict.step) + 1 if verdict.step in verdict.steps else "?"
    say(f"check: {command} would stop at step {n} ({verdict.step}), exit {verdict.exit_code}", "yellow")


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

RootOpt = typer.Option(None, "--root", metavar="DIR", help="Read a host snapshot laid out like the host's root.")
HostOpt = typer.Option(None, "--host", metavar="HOST", help="Host to work on (default: this one).")
CtOpt = typer.Option(..., "--ct", metavar="ID", help="Container: Proxmox vmid or LXC name.")
InnerOpt = typer.Option(
    None, "--inner", metavar="NAME",
    help="Also probe the containers a running container runs (Docker, Podman, runc): all, or names "
         "(RUNTIME:NAME allowed), comma-separated.")
StyleOpt = typer.Option("auto", "--style", metavar="STYLE", help="Fix style: auto, devn, path or numeric.")
InventoryOpt = typer.Option(None, "--inventory", metavar="FILE",
                            help="Inventory of hosts: Ansible YAML, or `ansible-inventory --list` JSON ('-': stdin).")
AcceptNewOpt = typer.Option(False, "--accept-new-host-keys",
                            help="Trust and record unknown SSH host keys (never changed ones).")
KnownHostsOpt = typer.Option(None, "--known-hosts", metavar="FILE",
                             help="known_hosts file to check against (and to record in).")
SshConfigOpt = typer.Option(None, "--ssh-config", metavar="FILE", help="ssh config file (default ~/.ssh/config).")
HostTimeoutOpt = typer.Option(
    None, "--host-timeout", metavar="SECONDS", min=10, max=86400,  # inventory.HOST_TIMEOUT (not imported here)
    help="With --inventory: how long a host's part may take before it counts as lost mid-run (default: "
         "the host's lxcfix_host_timeout, else 900).")
VerboseOpt = typer.Option(False, "--verbose", "-v", help="Every finding on its own, with its evidence.")


def examples(*pairs: str, after: str = "") -> str:
    """A command's --help epilog: real command lines, each under what it does
    (click prints a paragraph that starts with \\b as it is)."""
    rows = [(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]
    text = "Examples:\n\n" + "\n\n".join(f"\b\n  # {what}\n  {command}" for command, what in rows)
    return text + (f"\n\n{after}" if after else "")


WriteSubgidOpt = typer.Option(False, "--write-subgid",
                              help="Group-access fixes that map a host group in also add root's /etc/subgid "
                                   "line (backed up, in the same transaction); otherwise that stays a manual step.")
Mode0666Opt = typer.Option(False, "--mode-0666",
                           help="Group-access fixes give devN nodes mode=0666 (every user in the container "
                                "can open them) instead of the container's group.")


MapGroupOpt = typer.Option(None, "--map-group", metavar="GROUP",
                           help="A host group (by name) a group-access fix may map into the container although "
                                "it is not the device node's own group (kvm, docker...: it grants access on the "
                                "host). Root, adm, disk, kmem, sudo and shadow are never mapped.")


def _asks(write_subgid: bool, mode_0666: bool, map_group: Optional[List[str]] = None) -> frozenset:
    named = frozenset(f"{MAP_GROUP}{checked_map_group(g)}" for g in map_group or ())
    return named | frozenset(name for name, on in (("write-subgid", write_subgid), ("mode-0666", mode_0666)) if on)


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
    upgrade: bool = False  # also the facts a kernel upgrade needs (gather.UPGRADE_ONLY)
    entries: tuple = ()  # the hosts themselves (scan --cluster: the members), no inventory file


def _say_recorded(key) -> None:
    """What accept-new wrote to a known_hosts file (ssh.RecordedKey), on stderr as it happens.
    A module-level function: SshOptions travel pickled to a big scan's worker processes."""
    say(f"lxcfix: {key.message()}", console=err)


def _fleet(req: FleetRequest, show_progress: bool, reaches: dict | None = None) -> list[HostReport]:
    """Scan an inventory over SSH; a progress bar on a terminal (stderr, so stdout stays clean).
    reaches: filled with each host's causes.Reach (how the commands shown for it get there)."""
    from . import inventory_io

    entries = list(req.entries) or inventory_io.load_file(req.inventory).select(list(req.hosts))  # bad input first
    if not entries:
        raise BadInput(f"{req.inventory}: no host matches {', '.join(req.hosts) or 'the inventory'}")
    from rich.progress import Progress  # the SSH stack and the progress bar only for an inventory that reads

    from . import fleet, ssh

    options = ssh.SshOptions.from_cli(known_hosts=req.known_hosts, accept_new=req.accept_new,
                                      ssh_config=req.ssh_config, on_record=_say_recorded)
    options.check()  # a missing or garbled --ssh-config is bad input, before any host is tried
    if req.cts:
        entries = [dataclasses.replace(e, containers=tuple(req.cts)) for e in entries]
    if reaches is not None:
        reaches.update((e.name, _ssh_reach(e, req)) for e in entries)
    connect = fleet.SshConnector(options)
    # LXCFIX_FLEET_WORKERS: how many processes hold the connections (1: threads in this one;
    # unset: one per core from 32 hosts up, fleetpool.workers_for). The bench's anchor sets it.
    workers = os.environ.get("LXCFIX_FLEET_WORKERS", "").strip() or None
    if workers is not None and not (workers.isdigit() and 1 <= int(workers) <= 64):
        raise BadInput(f"LXCFIX_FLEET_WORKERS={workers[:20]!r}: a number of processes, 1 to 64")
    # A terminal, not --color always: a progress bar must never land in a log.
    with Progress(console=err.real(), disable=not (show_progress and sys.stderr.isatty()), transient=True) as bar:
        task = bar.add_task("scanning", total=len(entries))
        return fleet.scan_fleet(entries, concurrency=req.concurrency, per_host=4, probe=req.probe, style=req.style,
                                progress=lambda h, done, total: bar.update(task, completed=done, description=h),
                                connect=connect, enter=connect.container, keep_context=req.keep_context,
                                upgrade=req.upgrade, workers=int(workers) if workers else None)


# ---- commands


@app.command(short_help="Every container of a host, snapshot or fleet: what is broken, and the fix.",
             epilog=examples(
                 "lxcfix scan", "every container on this host, probed inside when running",
                 "lxcfix scan --root examples/pve-gpu-host", "a bundled host snapshot: no hypervisor needed",
                 "lxcfix scan --inventory inventory/prod.yaml --json", "a fleet over SSH, one JSON document"))
def scan(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    host: Optional[List[str]] = HostOpt,
    ct: Optional[List[str]] = typer.Option(None, "--ct", metavar="ID", help="Only these containers."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Config and host facts only; do not enter containers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, json or prometheus."),
    concurrency: int = typer.Option(8, "--concurrency", metavar="N", min=1, max=256, help="Hosts scanned at once."),
    accept_new: bool = AcceptNewOpt,
    known_hosts: Optional[str] = KnownHostsOpt,
    ssh_config: Optional[str] = SshConfigOpt,
    style: str = StyleOpt,
    verbose: bool = VerboseOpt,
    inner: Optional[str] = InnerOpt,
    in_cluster: bool = typer.Option(False, "--cluster", help="This node and every other member of its Proxmox "
                                    "VE cluster (/etc/pve/.members), reached as Proxmox reaches them."),
) -> Scanned:
    """Diagnose every container on a host, snapshot or inventory of hosts, and show what to fix."""
    if fmt not in ("table", "json", "prometheus"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or prometheus")
    if as_json and fmt == "prometheus":
        raise BadInput("--json and --format prometheus: one or the other")
    fmt = "json" if as_json else fmt
    reaches: dict = {}
    if in_cluster:
        if inventory is not None or inner is not None:
            raise BadInput("--cluster scans the members of this node's cluster: not with --inventory or --inner")
        from . import migrate

        target = repair.open_target(root, host)
        this, members = migrate.cluster_entries(target.transport, target.backend)
        here = repair.scan(target, ct, style, probe=not no_probe, diffs=fmt == "json")
        hosts = [dataclasses.replace(here, host=this or here.host)]
        reaches = {hosts[0].host: _reach(root)}
        if members:
            hosts += _fleet(FleetRequest("", (), tuple(ct or ()), not no_probe, style, concurrency, known_hosts,
                                         accept_new, ssh_config, entries=tuple(members)),
                            show_progress=fmt == "table", reaches=reaches)
    elif inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        if inner is not None:
            raise BadInput("--inner probes the inner containers of one host's containers: not with --inventory")
        hosts = _fleet(FleetRequest(inventory, tuple(host or ()), tuple(ct or ()), not no_probe, style, concurrency,
                                    known_hosts, accept_new, ssh_config), show_progress=fmt == "table",
                       reaches=reaches)
    else:
        target = repair.open_target(root, host)
        hosts = [repair.scan(target, ct, style, probe=not no_probe, inner=inner, diffs=fmt == "json")]
        reaches = {h.host: _reach(root) for h in hosts}
    if fmt == "json":
        _json(report.document("scan", hosts, reach=reaches))
    elif fmt == "prometheus":
        sys.stdout.write(report.prometheus(hosts, time.time()))
    else:
        any_findings = False
        for rep in hosts:
            if rep.error:
                say(f"{rep.host}: unreachable: {rep.error} [LXF301]", "bold red")
                continue
            _print_host(rep)
            for note in rep.notes:
                say(f"note: {rep.host}: {note}", "dim", err)
            reach = reaches.get(rep.host, causes.LOCAL)
            cts = sorted(rep.containers, key=lambda c: causes.ct_order(c.ct))
            findings = [f for c in cts for f in c.findings]
            if findings:
                any_findings = True
                out.print()
                if verbose:
                    _print_findings(findings, reach=reach)
                for c in cts if not verbose else ():
                    if c.findings:
                        say(f"CT {c.ct}" + (f" ({c.status})" if c.status else ""), "bold")
                        _print_causes(c, rep.facts, reach, fold=True, indent="  ")
            pending = [c.ct for c in cts if c.plan is not None and not c.plan.is_empty]
            if pending:
                say(f"fixes ready for CT {', '.join(pending)}: `{reach.show('plan', 'ID')}` shows each change")
            out.print()
        s = report.summary(hosts)
        out.print(f"{len(hosts)} host(s), {s['containers']} containers: {s['error']} errors, "
                  f"{s['warning']} warnings, {s['info']} info, {s['unreachable']} unreachable")
        if any_findings and not verbose:
            _hint()
    return Scanned(hosts)


@app.command(short_help="One container in depth: each cause, its proof and its fix.",
             epilog=examples(
                 "lxcfix diagnose --ct 200", "causes, proof from inside, the one command that fixes them",
                 "lxcfix diagnose --ct 200 --inner frigate", "the same checks inside its Docker container frigate",
                 "lxcfix diagnose --ct 200 --inventory inventory/prod.yaml --host pve1", "a container of a fleet host"))
def diagnose(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    verbose: bool = VerboseOpt,
    inner: Optional[str] = InnerOpt,
    known_hosts: Optional[str] = KnownHostsOpt, ssh_config: Optional[str] = SshConfigOpt,
) -> Scanned:
    """One container in depth: each cause, the proof (probed inside when it runs), the fix, then the findings
    it explains."""
    if inventory is not None:
        _one_fleet_host(inventory, host, root, "diagnose")
        if inner is not None:
            raise BadInput("--inner probes one host's containers from that host: not with --inventory")
        reaches: dict = {}
        (rep,) = _fleet(FleetRequest(inventory, tuple(host or ()), (ct,), True, "auto", 1, known_hosts, False,
                                     ssh_config, keep_context=True), show_progress=False, reaches=reaches)
        if rep.error:
            raise Unreachable(f"{rep.host}: {rep.error}")
        reach = reaches.get(rep.host, causes.LOCAL)
        c = next((c for c in rep.containers if c.ct == ct), None)
        if c is None:
            raise BadInput(f"no container {ct!r} on {rep.host} (the inventory's lxcfix_containers may leave it out)")
    else:
        target = repair.open_target(root, host)
        rep, c = repair.one(target, ct, probe=True, inner=inner)
        reach = _reach(root)
    one = HostReport(rep.host, rep.backend, rep.facts, (c,))
    if as_json:
        _json(report.document("diagnose", [one], reach={one.host: reach}))
    else:
        state = f" ({c.status})" if c.status else ""
        say(f"CT {ct}{state} on {rep.host}: {c.path}", "bold")
        if not c.findings:
            say("no problems found", "green")
        elif verbose:
            _print_findings(c.findings, ct_label=False, evidence=True, reach=reach)
        else:
            _print_causes(c, rep.facts, reach)
            _hint()
    return Scanned([one], "diagnose")


@app.command(short_help="The fix, as a unified diff of the config.",
             epilog=examples(
                 "lxcfix plan --ct 200", "the change apply would make (nothing when there is nothing to do)",
                 "lxcfix plan --root examples/pve-gpu-host --ct 201", "the fix for a bundled snapshot",
                 "lxcfix plan --ct 200 --inventory inventory/prod.yaml --host pve1",
                 "planned on that host itself (no lxcfix install needed there)"))
def plan(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt, style: str = StyleOpt,
    write_subgid: bool = WriteSubgidOpt, mode_0666: bool = Mode0666Opt,
    map_group: Optional[List[str]] = MapGroupOpt,
    inventory: Optional[str] = InventoryOpt,
    known_hosts: Optional[str] = KnownHostsOpt, ssh_config: Optional[str] = SshConfigOpt,
    host_timeout: Optional[float] = HostTimeoutOpt,
):
    """Print the fix as a unified diff of the config (nothing when there is nothing to do)."""
    if inventory is not None:
        entry = _one_fleet_host(inventory, host, root, "plan --ct")
        req = {"op": "plan", "ct": ct, "style": style, "asks": sorted(_asks(write_subgid, mode_0666, map_group))}
        return Rolled(_changes([entry], req, _agent_for(known_hosts, ssh_config, host_timeout),
                               show=lambda r: _print_run(r, diff=True)))
    _no_host_timeout(host_timeout)
    target = repair.open_target(root, host)
    _, c = repair.one(target, ct, style, asks=_asks(write_subgid, mode_0666, map_group), editable=True)
    say(f"style: {c.plan.style} ({c.plan.style_reason})", "dim", err)
    if not c.plan.is_empty:
        _print_diff(c.plan.diff())
    elif why := plan_mod.unplanned(c.plan):
        for line in why:
            say(line, "yellow", err)
    else:  # on stderr, as the style: stdout stays the diff, empty when there is none
        say(f"CT {ct}: nothing to do", "green", err)
    return Planned(c.plan)


@app.command(short_help="Apply the fix: back up, write, restart or --live, verify, roll back on failure.",
             epilog=examples(
                 "lxcfix apply --ct 200 --dry-run", "the diff and every step apply would take; nothing changes",
                 "cp -r examples/pve-gpu-host /tmp/snap && lxcfix apply --root /tmp/snap --ct 200 --no-restart --yes",
                 "edit a copy of a snapshot (the checkout stays clean)",
                 "lxcfix apply --all --inventory inventory/prod.yaml --serial 4 --max-fail 1",
                 "rolling, 4 hosts at a time; stop once 2 hosts failed (default: one at a time, stop at the first)"))
def apply(
    ct: Optional[str] = typer.Option(None, "--ct", metavar="ID", help="Container: Proxmox vmid or LXC name."),
    all_: bool = typer.Option(False, "--all", help="Every container with a fix (of the host, or of each "
                              "inventory host; its lxcfix_containers when set)."),
    host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Check mode: show the diff and the steps, and check "
                                 "every step's precondition as the apply would (exit 1: it would go ahead; "
                                 "2 or 3: the error the apply would stop with); change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    no_restart: bool = typer.Option(False, "--no-restart", help="Write the config only."),
    live: bool = typer.Option(False, "--live", help="Fix the running container in place, without a restart."),
    style: str = StyleOpt,
    write_subgid: bool = WriteSubgidOpt, mode_0666: bool = Mode0666Opt,
    map_group: Optional[List[str]] = MapGroupOpt,
    serial: int = typer.Option(1, "--serial", metavar="N", min=1, max=256,
                               help="With --inventory: hosts changed at once (default 1: one after another)."),
    max_fail: int = typer.Option(0, "--max-fail", metavar="N", min=0,
                                 help="With --inventory: hosts that may fail (rolled back, or lost mid-run) "
                                      "before no further host is started (default 0: stop at the first)."),
    known_hosts: Optional[str] = KnownHostsOpt, ssh_config: Optional[str] = SshConfigOpt,
    as_json: bool = typer.Option(False, "--json", help="With --inventory or --all: one JSON document on stdout."),
    host_timeout: Optional[float] = HostTimeoutOpt,
):
    """Back up, write atomically, restart (or --live: change it in place), verify; roll back on any failure."""
    if (ct is None) == (not all_):
        raise BadInput("name one container (--ct ID) or every container with a fix (--all)")
    if root is not None and not no_restart:
        raise BadInput("--root edits a snapshot: add --no-restart (there is no container to restart)")
    if live and (root is not None or no_restart):
        raise BadInput("--live changes a running container in place: not with --root or --no-restart")
    if inventory is not None or all_:
        return _apply_many(ct, host, root, inventory, dry_run=dry_run, yes=yes, restart=not no_restart, live=live,
                           style=style, asks=_asks(write_subgid, mode_0666, map_group), serial=serial, max_fail=max_fail,
                           known_hosts=known_hosts, ssh_config=ssh_config, as_json=as_json,
                           host_timeout=host_timeout)
    _no_host_timeout(host_timeout)
    if as_json:
        raise BadInput("--json: with --inventory or --all (one container's apply prints its diff and steps)")
    target = repair.open_target(root, host)
    rep, c = repair.one(target, ct, style, probe=live, asks=_asks(write_subgid, mode_0666, map_group), editable=True)
    p = c.plan
    if p.is_empty:
        say(f"CT {ct}: nothing to change")
        for line in plan_mod.unplanned(p):
            say(line, "yellow", err)
        return Applied(None, dry_run=dry_run)
    tx = repair.apply_transaction(target, c, rep.facts, restart=not no_restart, live=live)
    _print_diff(p.diff())
    say(f"style: {p.style} ({p.style_reason})", "dim", err)
    if dry_run:
        from .agent import ON_FAILURE

        _print_steps("steps apply would take", tx.describe_steps() + [ON_FAILURE])
        verdict = tx.check()  # check mode: the apply's own preconditions, nothing done
        _print_verdict("apply", verdict)
        verdict.raise_error()
        return Applied(None, dry_run=True, pending=True)
    if not yes:
        _confirm(f"apply this change to CT {ct}?")
    result = tx.run()
    say(applied_message(ct, result.reached, result.state.get("backup"), result.state.get("not_verified")),
        "green" if result.verified else "yellow")
    return Applied(None)


@app.command(epilog=examples(
    "lxcfix rollback --ct 200", "restore the newest backup apply took, and restart",
    "lxcfix rollback --ct 200 --to /var/lib/lxcfix/backups/200/FILE.conf", "a given backup",
    "lxcfix rollback --ct 200 --inventory inventory/prod.yaml --host pve1", "on a fleet host, from its own backups"))
def rollback(
    ct: str = CtOpt, host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    to: Optional[str] = typer.Option(None, "--to", metavar="FILE", help="Backup file to restore (default: the newest)."),
    no_restart: bool = typer.Option(False, "--no-restart", help="Restore the file only."),
    inventory: Optional[str] = InventoryOpt,
    known_hosts: Optional[str] = KnownHostsOpt, ssh_config: Optional[str] = SshConfigOpt,
    host_timeout: Optional[float] = HostTimeoutOpt,
):
    """Restore a backup taken by apply."""
    if inventory is not None:
        entry = _one_fleet_host(inventory, host, root, "rollback --ct")
        req = {"op": "rollback", "ct": ct, "to": to, "restart": not no_restart}
        return Rolled(_changes([entry], req, _agent_for(known_hosts, ssh_config, host_timeout),
                               show=lambda r: _print_run(r, diff=False)))
    _no_host_timeout(host_timeout)
    result = repair.rollback(repair.open_target(root, host), ct, to, restart=not no_restart)
    say(result.message)
    return Applied(result)


# ---- changes through the agent (fleetapply.py): fleet hosts, or every container of this host

RUN_STYLE = {"applied": "green", "restored": "green", "nothing-to-do": None, "would-apply": "yellow",
             "planned": None, "refused": "yellow", "would-fail": "bold red", "skipped": "dim", "not-tried": "dim", "rolled-back": "bold red",
             "rollback-failed": "bold red", "failed": "bold red", "lost": "bold red", "invalid": "bold red",
             "unreachable": "bold red",
             "no-python": "bold red"}


def _fleet_entries(inventory: str, hosts: Optional[List[str]], root: Optional[str]) -> list:
    from . import inventory_io

    if root is not None:
        raise BadInput("--inventory and --root: one or the other")
    entries = inventory_io.load_file(inventory).select(list(hosts or ()))
    if not entries:
        raise BadInput(f"{inventory}: no host matches {', '.join(hosts or ()) or 'the inventory'}")
    return entries


def _one_fleet_host(inventory: str, hosts: Optional[List[str]], root: Optional[str], command: str):
    """--ct names a container of one host: --host must pick exactly one."""
    entries = _fleet_entries(inventory, hosts, root)
    if len(entries) != 1:
        names = ", ".join(e.name for e in entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise BadInput(f"{command} with --inventory: --host must name one host (it names "
                       f"{len(entries)}: {names})")
    return entries[0]


def _no_host_timeout(host_timeout: Optional[float]) -> None:
    """--host-timeout without --inventory: bad input (only a fleet host's part has that deadline)."""
    if host_timeout is not None:
        raise BadInput("--host-timeout: with --inventory (a fleet host's part has that deadline)")


def _agent_for(known_hosts: Optional[str], ssh_config: Optional[str], host_timeout: Optional[float] = None):
    """The agent over SSH (strict host keys: a change never trusts a new key; scan
    --accept-new-host-keys records it first)."""
    from . import fleet, fleetapply, ssh

    options = ssh.SshOptions.from_cli(known_hosts=known_hosts, accept_new=False, ssh_config=ssh_config)
    options.check()
    return fleetapply.agent_over(fleet.SshConnector(options), host_timeout)


def _changes(entries: list, request, agent_fn, show, serial: int = 1, max_fail: int = 0,
             name: Optional[str] = None) -> list:
    """Each host's part run by the agent (agent_fn: _agent_for, or agent.serve here), rolling
    (fleetapply.roll); request: a dict, or entry -> dict. name: what the one host is called (this
    host, a snapshot) when there is no inventory entry."""
    from . import fleetapply

    request_of = request if callable(request) else (lambda e: request)
    return fleetapply.roll(
        entries, lambda e: fleetapply.host_run(e, agent_fn, fleetapply.request_for(e, request_of(e)), name=name),
        serial=serial, max_fail=max_fail, on_done=show)


def _print_run(r, diff: bool, steps: bool = False, label: bool = True, command: str = "apply") -> None:
    """One host's part: each container's diff (and steps and check, for a check run), then its outcome.
    Every text a host sent is one escaped field (bounded.field): no line of it can pass for another
    host's row, move the cursor or turn the text around (bidi)."""
    from .bounded import field
    from .fleetapply import WORDS

    head = f"{field(r.host)}: " if label else ""
    if not r.results:
        say(f"{head}{field(r.message or WORDS.get(r.status, r.status))}", RUN_STYLE.get(r.status))
        return
    for rec in r.results:
        ct = field(rec["ct"])
        if diff and rec.get("diff"):
            say(f"{head}CT {ct}: {field(rec.get('path', ''))}", "bold")
            _print_diff(rec["diff"], escape=True)
            if rec.get("style"):
                say(f"style: {field(rec['style'])} ({field(rec.get('style_reason', ''))})", "dim", err)
        for note in rec.get("notes", []):
            say(f"note: {field(note)}", "dim", err)
        if steps and rec.get("steps"):
            _print_steps(f"steps {command} would take", [field(s) for s in rec["steps"]])
            v = rec.get("verdict") or {}
            if v.get("ok"):
                say(f"check: every step's precondition holds: {command} would go ahead", "green")
            elif v:
                n = rec["steps"].index(v["step"]) + 1 if v.get("step") in rec["steps"] else "?"
                say(f"check: {command} would stop at step {n} ({field(v.get('step'))}), exit {rec['exit']}",
                    "yellow")
        say(f"{head}{field(rec['message'])}", RUN_STYLE.get(rec["outcome"]))


def _print_summary(runs: list) -> None:
    from .bounded import field
    from .fleetapply import WORDS, summary_line

    out.print()
    say(summary_line(runs), "bold")
    width = max(len(field(r.host)) for r in runs)
    for r in runs:
        what = r.message or "; ".join(f"CT {x['ct']}: {WORDS.get(x['outcome'], x['outcome'])}" for x in r.results)
        say(f"  {field(r.host).ljust(width)}  {WORDS.get(r.status, r.status):<15} {field(what)}",
            RUN_STYLE.get(r.status))


def _apply_many(ct, hosts, root, inventory, *, dry_run: bool, yes: bool, restart: bool, live: bool, style: str,
                asks: frozenset, serial: int, max_fail: int, known_hosts, ssh_config, as_json: bool,
                host_timeout: Optional[float] = None) -> Rolled:
    """apply --inventory (one host's --ct, or --all over the hosts), or apply --all on this host or
    snapshot, through the agent (run in this process for this host)."""
    base = {"op": "apply-all" if ct is None else "apply", "dry_run": dry_run, "restart": restart, "live": live,
            "style": style, "asks": sorted(asks), **({"ct": ct} if ct is not None else {})}
    if inventory is not None:
        entries = [_one_fleet_host(inventory, hosts, root, "apply --ct")] if ct is not None \
            else _fleet_entries(inventory, hosts, root)
        return _run_confirmed(entries, base, _agent_for(known_hosts, ssh_config, host_timeout), None, single=ct,
                              yes=yes,
                              dry_run=dry_run, serial=serial, max_fail=max_fail, as_json=as_json)
    _no_host_timeout(host_timeout)
    from . import agent

    repair.open_target(root, hosts)  # a bad --root or --host: bad input before anything runs
    label = os.path.basename(os.path.abspath(root).rstrip("/")) if root else "this host"
    return _run_confirmed([None], base, lambda entry, req: agent.serve({**req, "root": root}), label, single=ct,
                          yes=yes, dry_run=dry_run, serial=serial, max_fail=max_fail, as_json=as_json)


def _run_confirmed(entries: list, base: dict, agent_fn, name: Optional[str], *, single: Optional[str], yes: bool,
                   dry_run: bool, serial: int = 1, max_fail: int = 0, as_json: bool = False,
                   command: str = "apply") -> Rolled:
    """Without --yes (and not --dry-run): a check run first, its diffs shown and confirmed, then the
    real run of exactly those changes (each record's digest sent back: a file changed meanwhile is
    refused). single: the record whose digest is the one expected (--ct, "host"), else a map per
    container. name: what the one host is called without an inventory."""
    from . import fleetapply

    many = name is None

    def show(r, diff=True, steps=dry_run):
        if not as_json:
            _print_run(r, diff=diff, steps=steps, label=many, command=command)

    def run(entries, request, show, serial=serial, max_fail=max_fail):
        return _changes(entries, request, agent_fn, show, serial, max_fail, name)

    if dry_run or yes:
        runs = run(entries, base, show)
    else:
        checked = run(entries, {**base, "dry_run": True}, lambda r: show(r, steps=False), serial=8, max_fail=10**6)
        expect = [{x["ct"]: x["before"] for x in r.results if x["outcome"] == "would-apply"} for r in checked]
        todo = [i for i, ex in enumerate(expect) if ex]
        if not todo:
            runs = checked
        else:
            n = sum(len(ex) for ex in expect)
            _confirm(f"{command}: {n} change(s)" + (f" on {len(todo)} host(s)" if many else "") + "?")
            by_entry = {id(entries[i]): expect[i] for i in todo}

            def confirmed(e):
                ex = by_entry[id(e)]
                return {**base, "expect": ex[single]} if single is not None else {**base, "expect": ex}

            done = iter(run([entries[i] for i in todo], confirmed, lambda r: show(r, diff=False)))
            runs = [next(done) if i in todo else checked[i] for i in range(len(entries))]
    if as_json:
        _json({"command": command, "check": dry_run, "hosts": [r.to_json() for r in runs],
               "exit_code": fleetapply.worst_exit(runs)})
    elif many or len(runs[0].results) > 1:
        _print_summary(runs)
    return Rolled(runs)


@app.command(short_help="What breaks on the next reboot or driver upgrade, and the change that prevents it.",
             epilog=examples(
                 "lxcfix audit --for reboot", "every container that will or may break, and the exact change",
                 "lxcfix audit --for driver-upgrade --to-driver 580.159.04 --markdown ticket.md",
                 "a change ticket, ready to paste",
                 "lxcfix audit --inventory inventory/prod.yaml --json", "a fleet, one JSON document"))
def audit(
    root: Optional[str] = RootOpt,
    inventory: Optional[str] = InventoryOpt,
    host: Optional[List[str]] = HostOpt,
    ct: Optional[List[str]] = typer.Option(None, "--ct", metavar="ID", help="Only these containers."),
    for_: str = typer.Option("reboot", "--for", metavar="EVENT",
                             help="reboot, driver-upgrade, kernel-upgrade, lxc-upgrade (LXC 7), pve-upgrade (8 -> 9), "
                                  "migrate (--ct, --to) or ha (--ct)"),
    to: Optional[List[str]] = typer.Option(None, "--to", metavar="NODE", help="--for migrate: the node it moves to."),
    to_root: Optional[List[str]] = typer.Option(None, "--to-root", metavar="[NODE=]DIR",
                                                help="--for migrate|ha: a snapshot of that node instead of SSH to it."),
    to_driver: Optional[str] = typer.Option(None, "--to-driver", metavar="VERSION",
                                            help="NVIDIA version the upgrade installs."),
    to_kernel: Optional[str] = typer.Option(
        None, "--to-kernel", metavar="VERSION",
        help="Kernel the kernel upgrade boots (default: the newest installed, not running)."),
    no_probe: bool = typer.Option(False, "--no-probe", help="Do not enter running containers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    markdown: Optional[str] = typer.Option(None, "--markdown", metavar="FILE",
                                           help="Also write a change-ticket report to FILE ('-': stdout)."),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, json or markdown"),
    concurrency: int = typer.Option(8, "--concurrency", metavar="N", min=1, max=256, help="Hosts audited at once."),
    accept_new: bool = AcceptNewOpt,
    known_hosts: Optional[str] = KnownHostsOpt,
    ssh_config: Optional[str] = SshConfigOpt,
    verbose: bool = VerboseOpt,
) -> Audited:
    """What breaks on the next reboot, driver, kernel, LXC or Proxmox VE upgrade, and the exact change that prevents it."""
    from . import audit as audit_mod, hostfix

    if for_ in ("migrate", "ha") or to or to_root:
        return _preflight(for_, root, host, ct, list(to or ()), list(to_root or ()), as_json or fmt == "json",
                          dict(known_hosts=known_hosts, accept_new=accept_new, ssh_config=ssh_config))
    if for_ not in audit_mod.FOR:
        raise BadInput(f"unknown --for {for_!r}: use {', '.join(audit_mod.FOR)}")
    if to_kernel is not None and (for_ != "kernel-upgrade" or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}",
                                                                                  to_kernel)):
        raise BadInput(f"--to-kernel {to_kernel!r}: a kernel release (uname -r) with --for kernel-upgrade")
    if fmt not in ("table", "json", "markdown"):
        raise BadInput(f"unknown --format {fmt!r}: use table, json or markdown")
    if as_json and fmt == "markdown":
        raise BadInput("--json and --format markdown: one or the other")
    if inventory is not None:
        if root is not None:
            raise BadInput("--inventory and --root: one or the other")
        reaches: dict = {}
        reps = _fleet(FleetRequest(inventory, tuple(host or ()), tuple(ct or ()), not no_probe, "auto", concurrency,
                                   known_hosts, accept_new, ssh_config, keep_context=True,
                                   upgrade=for_ in audit_mod.UPGRADE_FACTS),
                      show_progress=fmt == "table", reaches=reaches)
        result = audit_mod.audit(reps, for_, new_driver=to_driver, to_kernel=to_kernel)
    else:
        target = repair.open_target(root, host)
        rep = repair.scan(target, ct or None, probe=not no_probe, keep_context=True,
                          upgrade=for_ in audit_mod.UPGRADE_FACTS)
        result = audit_mod.audit([rep], for_, new_driver=to_driver, to_kernel=to_kernel,
                                 boot_nodes={rep.host: hostfix.unit_installed(target)})
        reaches = {rep.host: _reach(root)}
    made = _provenance() if markdown is not None or fmt == "markdown" else None
    if markdown is not None:
        text = clean(audit_mod.to_markdown(result, reach=reaches, made=made))
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
        _json(audit_mod.to_json(result, reach=reaches))
    elif fmt == "markdown":
        sys.stdout.write(clean(audit_mod.to_markdown(result, reach=reaches, made=made)))
    else:
        _print_audit(result, for_, verbose, reaches)
    return Audited(result)


def _provenance():
    """The change ticket's header: now (UTC), this host, the command line as typed, and who
    ran it (SUDO_USER when set: root's name says nothing of who ran sudo)."""
    import datetime
    import pwd
    import shlex
    import socket

    from . import audit as audit_mod
    from .bounded import excerpt

    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = f"uid {os.getuid()}"
    sudo = os.environ.get("SUDO_USER", "").strip()
    if sudo:
        user = f"{excerpt(sudo, 64)} (through sudo, as {user})"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return audit_mod.Provenance(date, excerpt(socket.gethostname(), 253), shlex.join(["lxcfix", *_typed["argv"]]),
                                user)


def _preflight(for_: str, root, host, ct, to: list[str], to_root: list[str], as_json: bool,
               ssh_flags: dict | None = None) -> Preflighted:
    """audit --for migrate|ha: would CT's devices work on that node (lxcfix.migrate)."""
    from . import migrate

    if for_ not in ("migrate", "ha") or len(ct or ()) != 1:
        raise BadInput("--to and --to-root go with --for migrate (one --ct VMID --to NODE) or --for ha (one --ct VMID)")
    (ct,) = ct
    if for_ == "migrate" and len(to) != 1:
        raise BadInput("--for migrate: one --to NODE")
    if for_ == "ha" and to:
        raise BadInput("--for ha: the nodes come from the HA group or rules; no --to")
    roots: dict[str, str] = {}
    for item in to_root:
        node, sep, d = item.partition("=")
        if not sep:
            if len(to) != 1:
                raise BadInput(f"--to-root {item}: NODE=DIR (a plain DIR only with one --to NODE)")
            node, d = to[0], item
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,62}", node) or not os.path.isdir(d):
            raise BadInput(f"--to-root {item}: NODE=DIR, a node name and a snapshot directory")
        roots[node] = d
    options = None
    if ssh_flags and (ssh_flags.get("known_hosts") or ssh_flags.get("ssh_config") or ssh_flags.get("accept_new")):
        from .ssh import SshOptions

        options = SshOptions.from_cli(**ssh_flags).check()  # else the cluster's known_hosts, strictly
    result = migrate.run(repair.open_target(root, host), ct, for_, to, roots, options)
    if as_json:
        _json(result.to_json())
        return Preflighted(result)
    say(f"{for_} preflight of CT {ct} from {result.source}: "
        + (f"can run on {', '.join(result.can_run_on)}" if result.can_run_on else "no node checked can run it"), "bold")
    for n in result.notes:
        say(f"  {n}", "dim")
    for v in result.verdicts:
        say(f"{v.node}: " + ("ok" if v.ok else v.error or f"{len(v.issues)} problem(s)"),
            "green" if v.ok else "bold red")
        for i in v.issues:
            say(f"  {i.why} [{i.code}]")
            if i.fix:
                say(f"    fix: {i.fix}", "dim")
            for c in i.commands:
                say(f"    {c}", "dim")
        for n in v.notes:
            say(f"  note: {n}", "dim")
    return Preflighted(result)


def _print_audit(result, for_: str, verbose: bool = False, reaches: dict | None = None) -> None:
    from . import audit as audit_mod

    s = audit_mod.summary(result)
    hosts = ", ".join(h.host for h in result.hosts)
    say(f"audit for {for_} on {hosts}: {s['will']} will break, {s['may']} may break, "
        f"of {s['containers']} containers", "bold")
    for h in result.hosts:
        for n in h.notes:
            say(f"  {h.host}: {n}", "dim")
        if h.not_healed:
            say(clean(f"  {h.host}: GPU containers not healed on device events (no tag lxcfix-heal; see "
                      f"lxcfix watch): {', '.join(h.not_healed)}"), "dim")
    if verbose:
        shown: dict = {}  # (host, ct) -> the changes shown for that container
        for i in result.items:
            line = Text(clean(f"{i.ct:>8}  "))
            line.append(f"{i.code} ", style="bold")
            line.append(f"{i.outcome:<5}", style="bold red" if i.outcome == "will" else "yellow")
            line.append(clean(i.why + (f" [{i.device}]" if i.device else "")))
            out.print(line)
            _print_change(i, "          ", (reaches or {}).get(i.host, causes.LOCAL),
                          shown.setdefault((i.host, i.ct), set()))
        return
    last, shown = None, set()
    for group in causes.audit_groups(result.items):
        first = group[0]
        if (first.host, first.ct) != last:
            last, shown = (first.host, first.ct), set()
            say(f"CT {first.ct}" + (f" on {first.host}" if len(result.hosts) > 1 else ""), "bold")
        line = Text(f"  {first.outcome:<5}  ", style="bold red" if first.outcome == "will" else "yellow")
        line.append(clean(f"{first.why} [{first.code}]"))
        out.print(line)
        _print_group(group, (reaches or {}).get(first.host, causes.LOCAL), "         ", shown)
        for i in group[1:]:
            say(f"         also: {i.why} [{i.code}]", "dim")
    if result.items:
        _hint()


def _change_lines(i, reach) -> list[str]:
    """An audit item's change as printed: lxcfix's own commands made to reach the host (causes.Reach)."""
    return [reach.command(t) if i.kind == "command" and not t.startswith("#") else reach.within(t)
            for t in i.change.splitlines()]


def _print_group(group, reach, pad: str, shown: set) -> None:
    """The changes of one cause's items, each block once (items of one cause share their
    lines: `pct pending`, `pct reboot`), then the command that makes them: `lxcfix apply`
    for what the plan makes; a host block is itself the commands (lxcfix's own made to
    reach the host: causes.Reach); a change by hand says so. shown: what this container's
    groups showed already (one plan fixes several causes: its diff is shown once)."""
    blocks: dict[tuple, list[str]] = {}
    for i in group:
        where = f"in {i.path}:" if i.kind == "config" else "run on the host:" if i.kind == "command" else "do:"
        have = blocks.setdefault((where,), [])
        for text in _change_lines(i, reach):
            if text not in have:
                have.append(text)
    applying = [i for i in group if i.applies]
    fix = applying[0].commands(reach)[0] if applying else None
    said = {k: v for k, v in blocks.items() if v}
    fresh = {k: v for k, v in said.items() if (k, tuple(v)) not in shown}
    if said and not fresh and (fix is None or fix in shown):
        say(f"{pad}fix:   the change above" + (" (the same apply)" if fix else ""), "dim")
        return
    for (where,), texts in fresh.items():
        shown.add(((where,), tuple(texts)))
        say(f"{pad}{where}", "dim")
        for text in texts:
            say(f"{pad}  {text}", "green" if text.startswith("+") else "red" if text.startswith("-") else None)
    if fix is not None:
        shown.add(fix)
        say(f"{pad}fix:   {fix}", "green")
        say(f"{pad}       ({reach.show('plan', applying[0].ct)} shows the change first)", "dim")
    elif any(i.kind == "config" for i in group):
        path = next(i.path for i in group if i.kind == "config")
        say(f"{pad}fix:   by hand: edit {path} as above (lxcfix apply leaves this change to you)", "dim")


def _print_change(i, pad: str, reach, shown: set) -> None:
    """One item's change (-v); a change this container's items showed already is named, not repeated."""
    where = f"in {i.path}:" if i.kind == "config" else "run on the host:" if i.kind == "command" else "do:"
    texts = _change_lines(i, reach)
    if (where, tuple(texts)) in shown:
        say(f"{pad}the change above", "dim")
        return
    shown.add((where, tuple(texts)))
    say(f"{pad}{where}", "dim")
    for text in texts:
        say(f"{pad}  {text}", "green" if text.startswith("+") else "red" if text.startswith("-") else None)


@app.command("host-fix", short_help="A systemd unit that creates the NVIDIA nodes at boot, before guests (LXF112).",
             epilog=examples(
                 "lxcfix host-fix --dry-run", "the unit, as a diff, and the steps; nothing changes",
                 "lxcfix host-fix --yes --now", "install and enable it, and create the nodes now",
                 "lxcfix host-fix --gpu 0 --gpu 1 --yes", "only these GPUs' nodes"))
def host_fix(
    root: Optional[str] = RootOpt, host: Optional[List[str]] = HostOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Check mode: show the unit and the steps, and check "
                                 "every step's precondition as the install would; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    no_enable: bool = typer.Option(False, "--no-enable", help="Install the unit without enabling it."),
    now: bool = typer.Option(False, "--now", help="Also start it now."),
    modprobe: Optional[str] = typer.Option(None, "--nvidia-modprobe", metavar="PATH",
                                           help="Default: /usr/bin/nvidia-modprobe."),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", metavar="MINOR", help="GPU minor (repeat)"),
    inventory: Optional[str] = InventoryOpt,
    known_hosts: Optional[str] = KnownHostsOpt, ssh_config: Optional[str] = SshConfigOpt,
    host_timeout: Optional[float] = HostTimeoutOpt,
):
    """Install a systemd unit that creates the NVIDIA nodes at boot, before guests start (LXF112)."""
    from . import hostfix

    if inventory is not None:
        entry = _one_fleet_host(inventory, host, root, "host-fix")
        req = {"op": "host-fix", "dry_run": dry_run, "enable": not no_enable, "now": now, "modprobe": modprobe,
               "gpus": list(gpu) if gpu else None}
        return _run_confirmed([entry], req, _agent_for(known_hosts, ssh_config, host_timeout), None, single="host",
                              yes=yes,
                              dry_run=dry_run, command="host-fix")

    _no_host_timeout(host_timeout)
    target = repair.open_target(root, host)
    plan = hostfix.plan_host_unit(host_facts(target.transport, target.backend), hostfix.read_existing(target),
                                  modprobe=modprobe or hostfix.MODPROBE, gpu_minors=gpu or None)
    for n in plan.notes:
        say(f"note: {n}", "dim", err)
    _print_diff(plan.diff())
    if dry_run:
        tx = hostfix.host_unit_transaction(target, plan, enable=not no_enable, now=now)
        _print_steps("steps host-fix would take", tx.describe_steps()
                     + ["on failure: restore the old unit (or remove the new one), undo the enable, reload; exit 4"])
        verdict = tx.check()
        _print_verdict("host-fix", verdict)
        verdict.raise_error()
        return Applied(None, dry_run=True, pending=not plan.is_empty)
    if not plan.is_empty and not yes:
        _confirm(f"install {plan.path}?")
    r = hostfix.apply_host_unit(target, plan, enable=not no_enable, now=now)
    say(f"{hostfix.UNIT_NAME}: {r.step_reached}" + (f"; backup {r.backup_path}" if r.backup_path else "")
        + (f" ({r.message})" if r.message else ""), "green")
    return Applied(r)


@app.command("watch", short_help="Heal opted-in running containers on host device events (a service).",
             epilog=examples(
                 "lxcfix watch --install --yes", "install and start lxcfix-watch.service (hardened)",
                 "pct set 200 --tags 'gpu;lxcfix-heal'", "opt CT 200 in: repaired live when the host's devices change",
                 "lxcfix watch --once --heal web", "one pass over every running container now, then exit (cron)"))
def watch(
    once: bool = typer.Option(False, "--once", help="One pass over every running container, then exit."),
    install: bool = typer.Option(False, "--install", help="Install lxcfix-watch.service (with these options) "
                                 "through a transaction, enable and start it."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --install: do not ask."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --install: show the unit and the steps only."),
    heal_ct: Optional[List[str]] = typer.Option(None, "--heal", metavar="CT", help="Repair this container "
                                                "(repeat); also: tag lxcfix-heal, /etc/lxcfix/watch.conf."),
    heal_restart: Optional[List[str]] = typer.Option(None, "--heal-restart", metavar="CT",
                                                     help="Repair it, restarting it when a live change cannot."),
    notify: Optional[str] = typer.Option(None, "--notify", metavar="CMD", help="Run CMD (no shell) with each "
                                         "finding as JSON on stdin, 10 s at most."),
    metrics_file: Optional[str] = typer.Option(None, "--metrics-file", metavar="PATH",
                                               help="node_exporter textfile: events, passes, repairs, latency."),
    debounce: float = typer.Option(0.1, "--debounce", metavar="S", min=0.0, max=10.0,
                                   help="Quiet time that ends a burst of events (one pass per burst)."),
    interval: float = typer.Option(10.0, "--interval", metavar="S", min=0.0, max=86400.0,
                                   help="At most one repair per container in this many seconds."),
    style: str = StyleOpt,
) -> Watched:
    """Listen to the kernel's device events and /dev; re-check the running containers given the devices that
    changed; repair opted-in ones live (the apply --live transaction), report the others."""
    from . import hostfix
    from . import watch as w

    for ct in (heal_ct or []) + (heal_restart or []):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", ct):
            raise BadInput(f"--heal {ct!r}: not a container name or vmid")
    if (dry_run or yes) and not install:
        raise BadInput("--yes and --dry-run go with --install")
    if once and install:
        raise BadInput("--once runs one pass; --install installs the service: one or the other")
    argv_notify = w.notify_argv(notify)
    if metrics_file is not None and not os.path.isabs(metrics_file):
        raise BadInput(f"--metrics-file {metrics_file!r}: an absolute path")
    target = repair.open_target(None)
    if install:
        args = [a for ct in heal_ct or [] for a in ("--heal", ct)] + \
               [a for ct in heal_restart or [] for a in ("--heal-restart", ct)] + \
               (["--notify", shlex.join(argv_notify)] if argv_notify else []) + \
               (["--metrics-file", metrics_file] if metrics_file else []) + \
               (["--debounce", f"{debounce:g}"] if debounce != 0.1 else []) + \
               (["--interval", f"{interval:g}"] if interval != 10.0 else [])
        plan = w.plan_unit(target, w.unit_argv(sys.executable, args), metrics_file)
        _print_diff(plan.diff())
        tx = hostfix.host_unit_transaction(target, plan, now=True, unit=w.UNIT_NAME)
        if dry_run:
            _print_steps("steps watch --install would take", tx.describe_steps())
            verdict = tx.check()
            _print_verdict("watch --install", verdict)
            verdict.raise_error()
            return Watched(0)
        if not plan.is_empty and not yes:
            _confirm(f"install {plan.path}?")
        r = hostfix.apply_host_unit(target, plan, now=True, unit=w.UNIT_NAME)
        say(f"{w.UNIT_NAME}: {r.step_reached}" + (f"; backup {r.backup_path}" if r.backup_path else ""), "green")
        return Watched(0)
    opts = w.Options(heal=frozenset(heal_ct or []), restart=frozenset(heal_restart or []), notify=argv_notify,
                     metrics_file=metrics_file, debounce=debounce, interval=interval, style=style)

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    watcher = w.Watcher(target, opts, emit, conf=w.read_conf())
    watcher.serve(once=once)
    # --once: 1 when a repair failed (cron mails it); the service stops with 0 (systemd would mark it failed)
    return Watched(1 if once and watcher.counters["failures_total"] else 0)


@app.command("hook", short_help="Proxmox VE hookscript: re-check device rules at every start.",
             epilog=examples(
                 "lxcfix hook --print-snippet --mode heal > /var/lib/vz/snippets/lxcfix-hook.sh",
                 "the snippet to install (chmod +x it)",
                 "pct set 200 --hookscript local:snippets/lxcfix-hook.sh", "use it for CT 200",
                 "lxcfix hook --mode fail 200 pre-start", "what Proxmox runs before CT 200 starts"))
def hook(
    vmid: Optional[str] = typer.Argument(None, metavar="VMID", help="The container Proxmox starts or stops."),
    phase: Optional[str] = typer.Argument(None, metavar="PHASE",
                                          help="pre-start, post-start, pre-stop or post-stop."),
    mode: str = typer.Option("fail", "--mode", metavar="MODE", help="fail: refuse the start; heal: fix and go on"),
    style: str = StyleOpt,
    print_snippet: bool = typer.Option(False, "--print-snippet", help="Print the hookscript snippet to install."),
) -> Hooked | Shown:
    """Proxmox VE hookscript: re-check the container's device rules against the host's majors every time it
    starts; refuse the start (--mode fail) or heal the config (--mode heal)."""
    from . import hook as hook_mod

    if mode not in hook_mod.MODES:
        raise BadInput(f"--mode must be fail or heal, not {mode!r}")
    if print_snippet:
        sys.stdout.write(hook_mod.snippet(mode, hook_mod.installed_command()))  # Proxmox's PATH lacks /usr/local/bin
        return Shown("snippet")
    if vmid is None or phase is None:
        raise BadInput("usage: lxcfix hook [--mode fail|heal] VMID PHASE")
    res = hook_mod.run_hook(vmid, phase, mode, style=style)
    if res.message:  # plain text: Proxmox shows it in the task log
        (sys.stderr if res.stream == "stderr" else sys.stdout).write(clean(res.message) + "\n")
    return Hooked(res.exit_code)


@app.command(short_help="What lxcfix knows about the host: majors, nodes, driver, cgroup layout.",
             epilog=examples(
                 "lxcfix facts", "this host",
                 "lxcfix facts --root examples/pve-gpu-host --json", "a snapshot, as JSON"))
def facts(
    host: Optional[List[str]] = HostOpt, root: Optional[str] = RootOpt,
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
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
    interesting = devices.PROC_NAMES  # the catalog profiles' /proc/devices names
    table.add_row("char majors", ", ".join(f"{n} {','.join(map(str, ms))}" for n, ms in sorted(f.char_majors.items())
                                            if n in interesting) or "-")
    table.add_row("device nodes", str(len(f.nodes)) if f.nodes_known else "not read (snapshot without dev/)")
    out.print(table)
    return Shown("facts")


@app.command(short_help="What a finding code, or an error text an app printed, means; the fix by hand.",
             epilog=examples(
                 "lxcfix explain LXF200", "one code (LXF200, lxf200 or 200)",
                 "lxcfix explain 'CUDA unknown error - this may be due to an incorrectly set up environment'",
                 "an error text an application printed: the likely causes, and what tells which",
                 "lxcfix explain --json 'Failed to initialize NVML: Unknown Error'", "as JSON (`-` reads a log from "
                                                                                     "standard input)"))
def explain(
    words: Optional[List[str]] = typer.Argument(
        None, metavar="CODE|TEXT",
        help="A finding code (LXF200, lxf200 or 200), or an error text (quoted, or several words; - reads it "
             "from standard input)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> Shown:
    """What a finding code means, how lxcfix knows (the measured facts behind it), how to fix it by hand in
    each style, and when it is a false alarm. Given an error text instead (what Jellyfin, CUDA, nvidia-smi,
    pct or Docker printed), the likely causes in order, the command that tells which one it is on this host,
    and what it is known not to be."""
    from . import codes

    if not words:
        if as_json:
            _json({"schema": report.SCHEMA, "codes": [c.to_json() for c in codes.CODES.values()]})
        else:
            for text, role in codes.summary_lines():
                say(text, SEVERITY_STYLE.get(role))
            say("lxcfix explain CODE: the whole entry; lxcfix explain 'TEXT': what an error text means", "dim")
        return Shown("explain")
    found = codes.lookup(words[0]) if len(words) == 1 else None
    if found is None and len(words) == 1 and re.fullmatch(r"(?i)(lxf)?[0-9]+", words[0].strip()):
        from .bounded import excerpt

        raise BadInput(f"no finding code '{excerpt(words[0].strip(), 40)}': lxcfix explain lists them "
                       f"({', '.join(codes.CODES)})")
    if found is None:
        return _explain_text(_pasted_log(errortexts_max()) if words == ["-"] else " ".join(words), as_json)
    if as_json:
        _json({"schema": report.SCHEMA, **found.to_json()})
        return Shown("explain")
    style = {"title": "bold", "heading": "bold", "fix": "green", "table": None, "text": None}
    for text, role in codes.explain(found.code):
        say(text, style[role])
    return Shown("explain")


def _pasted_log(limit: int) -> str:
    """`explain -`: the log on standard input, read as bytes (at most `limit`; the rest is left
    unread) and decoded as UTF-8 with a bad byte replaced, whatever the locale; a closed or
    empty standard input is bad input."""
    stdin = sys.stdin
    if stdin is None:  # started with fd 0 closed (`0<&-`)
        raise BadInput("explain -: standard input is closed: give the log on it "
                       "(lxcfix explain - < app.log), or the text as an argument")
    try:
        raw = stdin.buffer.read(limit) if hasattr(stdin, "buffer") else stdin.read(limit)
    except (OSError, ValueError) as e:  # a closed descriptor or stream
        raise BadInput(f"explain -: standard input cannot be read ({type(e).__name__}): give the log "
                       "on it (lxcfix explain - < app.log), or the text as an argument") from None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if not text.strip():
        raise BadInput("explain -: nothing on standard input: give the log on it "
                       "(lxcfix explain - < app.log), or the text as an argument")
    return text


def errortexts_max() -> int:
    from .errortexts import MAX_TEXT

    return MAX_TEXT


def _explain_text(text: str, as_json: bool) -> Shown:
    """An error text: the known messages in it (errortexts.KNOWN); none known is one line, exit 0."""
    from . import errortexts

    known = errortexts.match(text)
    if as_json:
        _json({"schema": report.SCHEMA, "text_lines": len(text.splitlines()),
               "known": [k.to_json() for k in known]})
        return Shown("explain")
    if not known:
        say(f"lxcfix explain: no error text lxcfix knows in what was given ({len(text.splitlines()) or 1} "
            "line(s)); run `lxcfix scan` (or `lxcfix diagnose --ct CT`) to look at the containers themselves, "
            "and `lxcfix explain` for the finding codes")
        return Shown("explain")
    style = {"title": "bold", "heading": "bold", "fix": "green", "text": None}
    for i, k in enumerate(known):
        if i:
            say("")
        for line, role in errortexts.lines(k):
            say(line, style[role])
    return Shown("explain")


def _version(value: bool) -> None:
    if value:
        out.print(f"lxcfix {__version__}")
        raise typer.Exit(0)


def _color_choice(value: str) -> str:
    """--color, decided before anything prints (eager), so even --version honours it."""
    if value not in COLORS:
        raise BadInput(f"--color must be auto, always or never, not {value!r}")
    _color["mode"] = value
    out.reset()
    err.reset()
    return value


@app.callback(epilog=examples(
    "lxcfix scan --root examples/pve-gpu-host", "try it on a bundled host snapshot, no hypervisor needed",
    "lxcfix diagnose --ct 200", "one container: the cause, the proof, the one command",
    "lxcfix explain LXF210", "what a finding code means and how lxcfix knows",
    after="Shell completion: lxcfix --install-completion (bash, zsh, fish, PowerShell: the shell you run it "
          "from), or lxcfix --show-completion to put it where you want. NO_COLOR=1 or --color never: no "
          "colours."))
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for internal errors."),
    color: str = typer.Option("auto", "--color", metavar="auto|always|never", callback=_color_choice,
                              is_eager=True,
                              help="Colour the output: auto (a terminal, unless NO_COLOR is set), always, never."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Find, prove and safely repair broken device passthrough in Proxmox VE and LXC containers."""
    if debug:
        os.environ["LXCFIX_DEBUG"] = "1"


def _short_values(message: str, keep: int = 40) -> str:
    """click quotes the value it refuses whole (a 5,000-digit --concurrency): one line, bounded."""
    message = re.sub(r"'([^']{%d,})'" % (2 * keep), lambda m: f"'{m.group(1)[:keep]}...' "
                     f"({len(m.group(1))} characters)", message)
    return message if len(message) <= 600 else message[:600] + "..."


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
    if name == "NoArgsIsHelpError" and getattr(e, "ctx", None) is not None:
        # `lxcfix` alone (click 8.2+ raises this for no_args_is_help): the help, on stdout,
        # exit 0, as `lxcfix --help` and click 8.1 do; not an error.
        print(e.ctx.get_help())  # what --help prints, as click prints it
        return 0
    if hasattr(e, "format_message") and hasattr(e, "exit_code"):
        ctx = getattr(e, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        say(f"lxcfix: error: {_short_values(e.format_message())}{hint}", console=err)
        return ExitCode.USAGE
    return None


def _options_of(cmd) -> dict:
    """A click command's options by name (click's, or the copy typer 0.28 carries: duck typing)."""
    return {o: p for p in cmd.params if p.param_type_name == "option" for o in p.opts + p.secondary_opts}


def _color_first(argv: list[str]) -> list[str]:
    """`lxcfix scan --color never`: --color belongs to lxcfix itself (it is decided before
    anything prints); given after the command, it is moved in front of it, as
    `lxcfix --color never scan` (the rest of the line unchanged)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if not any(w == "--color" or w.startswith("--color=") for w in argv[:end]):
        return argv
    command = typer.main.get_command(app)
    commands = getattr(command, "commands", {})
    i = 0
    while i < end and argv[i] not in commands:  # lxcfix's own options: only --color takes a value
        i += 2 if argv[i] == "--color" else 1
    if i >= end:
        return argv
    opts, moved, rest, j = _options_of(commands[argv[i]]), [], [], i + 1
    while j < end:
        w = argv[j]
        name = w.partition("=")[0]
        if name == "--color" and name not in opts:
            take = 1 if "=" in w else 2
            if j + take > end:
                raise BadInput("--color needs a value: auto, always or never")
            moved += argv[j:j + take]
            j += take
            continue
        p = opts.get(name)
        take = 2 if p is not None and not (p.is_flag or p.count) and "=" not in w else 1
        rest += argv[j:j + take]
        j += take
    return argv[:i] + moved + [argv[i]] + rest + argv[j:]


def _repeated(argv: list[str]) -> str | None:
    """The first option that takes one value but is given it twice, different ("--ct 200 --ct
    201" to `apply`), said as an error; None when there is none. Click would keep the last one
    and go on: an admin who meant both would have one container changed, and nothing said.
    The same value again is no question, so it is let through."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    longs = [w.split("=", 1)[0] for w in words if w.startswith("--")]
    if len(set(longs)) == len(longs):  # nothing given twice: the command line is not walked
        return None
    from .bounded import excerpt

    command = typer.main.get_command(app)
    opts, seen = _options_of(command), {}
    words = iter(words)
    for w in words:
        if not w.startswith("-"):
            if w in getattr(command, "commands", ()):
                command = command.commands[w]
                opts = _options_of(command)
            continue
        name, eq, value = w.partition("=")
        p = opts.get(name)
        if p is None or p.is_flag or p.count:
            continue
        value = value if eq else next(words, "")
        if not p.multiple:
            seen.setdefault(p.opts[0], []).append(value)
    for opt, values in seen.items():
        if len(set(values)) > 1:
            given = ", then ".join(f"'{excerpt(v, 40)}'" for v in values)
            return f"{opt} is given different values ({given}): it takes one; give the one you mean"
    return None


def run(argv: list[str] | None = None) -> int:
    """The exit code of one command line: its outcome's, or its error's."""
    try:
        _typed["argv"] = sys.argv[1:] if argv is None else list(argv)
        argv = _color_first(_typed["argv"])
        twice = _repeated(argv)
        if twice:
            raise BadInput(twice)
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
