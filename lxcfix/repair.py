"""The flows behind the commands, as a library: pick a target host, scan it,
apply a plan with verification, restore a backup. Prints nothing.

    target = open_target(root=None)                       # this host
    report, ct = one(target, "200", probe=True)
    tx = apply_transaction(target, ct, report.facts)      # its steps: tx.describe_steps()
    result = apply_plan(target, ct, report.facts, restart=True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from typing import TYPE_CHECKING

from . import codes
from .backends import Lxc, Proxmox, detect
from .errors import BadInput
from .model import ApplyResult, CtReport, Finding, HostFacts, HostReport
from .rules import run_rules
from .scan import scan_host, unusable_reports
from .styles import STYLES
from .transport import Local, RootDir, Transport

if TYPE_CHECKING:  # what only a change needs is imported by the functions that make one
    from .apply import Applier
    from .liveplan import LiveOps
    from .transaction import Transaction


@dataclass
class Target:
    """One host to work on: its transport and backend; `root` for a snapshot."""

    transport: Transport
    backend: Proxmox | Lxc
    root: str | None = None

    def local_path(self, path: str) -> str:
        return self.transport.local_path(path)

    @property
    def live(self) -> bool:
        return self.root is None


def open_target(root: str | None, hosts: list[str] | None = None) -> Target:
    if root is not None:
        if hosts:  # not said, the snapshot would be read and --host dropped
            raise BadInput(f"--root reads a snapshot and --host {hosts[0]} names a live host: one or the other "
                           "(a fleet host: --inventory FILE --host NAME)")
        if not os.path.isdir(root):
            raise BadInput(f"--root {root}: no such directory")
        top = os.path.abspath(root)
        t = RootDir(top, name=os.path.basename(top.rstrip("/")) or root)
        if t.isdir("/etc/pve"):
            return Target(t, Proxmox(pve_dir="/etc/pve"), root)
        if t.isdir("/var/lib/lxc"):
            return Target(t, Lxc(lxcpath="/var/lib/lxc"), root)
        raise BadInput(f"--root {root}: not a host snapshot (no etc/pve or var/lib/lxc inside)")
    for h in hosts or []:
        if h not in ("localhost", "local", "127.0.0.1"):
            raise BadInput(f"--host {h}: remote hosts are reached through an inventory (--inventory FILE)")
    overrides = {}
    if os.environ.get("LXCFIX_PROC_DEVICES"):  # majors from a saved /proc/devices (tests; another host's state)
        overrides["/proc/devices"] = os.environ["LXCFIX_PROC_DEVICES"]
    if os.environ.get("LXCFIX_SUBGID"):  # another /etc/subgid, read and (apply --write-subgid) written (tests)
        overrides["/etc/subgid"] = os.environ["LXCFIX_SUBGID"]
    t = Local(overrides=overrides)
    return Target(t, detect(t))


def check_cts(target: Target, cts: list[str] | None, listed: dict) -> list[str]:
    for ct in cts or []:
        if ct not in listed and "," in ct and all(p.strip() in listed for p in ct.split(",")):
            # "200,201" is one LXC name as far as LXC goes, but here it is meant as two
            several = " ".join(f"--ct {p.strip()}" for p in ct.split(","))
            raise BadInput(f"--ct {ct}: one --ct names one container (scan takes several: {several})")
        target.backend.validate(ct)
        if ct not in listed:
            raise BadInput(f"no container {ct!r} on {target.transport.name} "
                           f"(known: {', '.join(list(listed)[:10]) or 'none'})")
    return list(cts) if cts else list(listed)


def scan(target: Target, cts: list[str] | None, style: str = "auto", probe: bool = False,
         facts: HostFacts | None = None, keep_context: bool = False, upgrade: bool = False,
         inner: str | None = None, diffs: bool = True) -> HostReport:
    """upgrade: also the facts only a kernel upgrade needs (gather.UPGRADE_ONLY). inner: the
    containers the probed containers run to probe too (`--inner`: all, or names). diffs: False
    when the diffs are not shown (scan_host)."""
    if inner is not None:
        from .nested import valid_want

        if not valid_want(inner):
            raise BadInput(f"--inner {inner!r}: use all, or inner container names (RUNTIME:NAME allowed), "
                           "comma-separated")
    if style not in STYLES:
        raise BadInput(f"unknown --style {style!r}: use one of {', '.join(STYLES)}")
    listed = target.backend.list(target.transport)
    wanted = check_cts(target, cts, listed)
    if facts is None and upgrade:
        from .gather import host_facts

        facts = host_facts(target.transport, target.backend, upgrade=True)
    rep = scan_host(target.transport, target.backend, wanted, style, facts=facts, probe=probe and target.live,
                    keep_context=keep_context, inner=inner, diffs=diffs)
    if not cts:  # every container: those whose name lxcfix cannot act on are listed too (LXF132)
        rep = replace(rep, containers=rep.containers + unusable_reports(target.transport, target.backend,
                                                                        rep.facts.host if rep.facts else rep.host))
    return rep


def one(target: Target, ct: str, style: str = "auto", probe: bool = False,
        facts: HostFacts | None = None, asks=frozenset(), editable: bool = False,
        inner: str | None = None) -> tuple[HostReport, CtReport]:
    """One container scanned and planned. asks: what the admin asked fixes to do that
    they never do unasked (rules.access.ASKS). A running container whose fixes need a
    value only it knows (its render group's gid) is probed even when `probe` is off.
    editable: for a change (plan, apply, the API's fix): a config with lines nobody can
    read is refused (check_editable)."""
    rep = scan(target, [ct], style, probe, facts, inner=inner)
    c = rep.containers[0]
    if not probe and target.live and c.context is not None and needs_inside(c.context) \
            and target.backend.status(target.transport, ct) == "running":
        rep = scan(target, [ct], style, True, rep.facts)
        c = rep.containers[0]
    if asks and c.context is not None and c.plan is not None:
        c = replanned(c, c.context.with_asks(asks), style)
    if c.plan is None:
        raise BadInput(f"CT {ct}: {c.error}")
    if editable:
        check_editable(c)
    return rep, c


def needs_inside(ctx) -> bool:
    """Group-access fixes that wait for the container's own gid of a group (rules.access)."""
    return any(n.gid is None and not n.fix.applies and n.member_can is not True for n in ctx.access.nodes)


def replanned(c: CtReport, ctx, style: str) -> CtReport:
    """The same container planned again in another context (the admin's asks)."""
    from .plan import make_plan_in

    plan, planned = make_plan_in(ctx, style)
    return replace(c, findings=plan.findings + tuple(f for f in c.findings if f.code == "LXF301"),
                   plan=plan, context=ctx, planned=planned)


def check_editable(c: CtReport) -> None:
    """plan and apply change only a config they can read whole: a line that does not parse,
    a device rule LXC rejects, a mount entry or devN entry nobody can use (LXF130) is the
    admin's to fix first (lxcfix cannot tell what it was meant to say). BadInput, exit 2."""
    bad = sorted((f for f in c.findings if f.code == "LXF130"), key=lambda f: f.line or 0)
    if bad:
        more = f" (and {len(bad) - 1} more such line{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
        raise BadInput(f"CT {c.ct}: {bad[0].message}{more}; lxcfix edits only a config it can read whole: fix "
                       f"it by hand first (lxcfix diagnose --ct {c.ct} lists them); nothing planned")


class Verifier:
    """verify() -> the problems left (a callable, for steps.Verify); unchecked() -> why the last
    verify probed nothing (the container is stopped: only the config was re-parsed), or None."""

    def __init__(self, verify, ct: str, seen: dict):
        self._verify, self._ct, self._seen = verify, ct, seen

    def __call__(self) -> list[Finding]:
        return self._verify()

    def unchecked(self) -> str | None:
        return None if self._seen.get("probed") else f"CT {self._ct} is stopped, nothing was probed"


def verifier(target: Target, c: CtReport, extra=None) -> Verifier:
    """After the change: the file on disk is the planned one, and the container,
    probed inside with its running device program read, shows none of the
    problems the plan was for, judged against the planned config (no second
    plan: the planner already checked that planning its result finds nothing).
    Devices missing on the host (LXF112) cannot be fixed by a config change and
    do not fail the verify. extra(): more problems (the live path's init PID).
    A stopped container is only re-parsed: Verifier.unchecked() says so."""
    from .observe import ProbeFailed, observe
    from .transaction import read_file, wait_until

    planned = c.planned
    absent = {f.device for f in c.findings if f.code == "LXF112"}
    # The verify is derived from the codes' records (codes.must_be_absent), whatever a finding's
    # severity: LXF121 after a live apply (the running program is not the config) fails it.
    # "fixed" codes fail it on the nodes whose fix of that kind the plan made (group access).
    fixed = codes.fixed_devices(c.findings)
    path = target.local_path(c.plan.path)
    seen = {"probed": False}

    def problems() -> list[Finding]:
        found: list[Finding] = []
        seen["probed"] = False
        try:
            on_disk = read_file(path)
        except OSError as e:
            on_disk = None
            found.append(codes.make("LXF131", c.ct, f"cannot read {c.plan.path} back: {e}", host=c.host))
        if on_disk is not None and on_disk != c.plan.after:
            found.append(codes.make("LXF121", c.ct, f"{c.plan.path} is not the planned config any more "
                                    "(edited meanwhile)", host=c.host, severity="error"))
        ctx = planned
        # Not running now: it did not run before either (a restart waits until it runs, or fails).
        if target.backend.status(target.transport, c.ct) == "running":
            try:
                from .rules.access import requests

                probe, live = observe(target.transport, target.backend, c.ct, planned.effective,
                                      access=requests(planned))
            except ProbeFailed as e:
                return found + [codes.make("LXF301", c.ct, f"cannot look inside CT {c.ct}: {e}", host=c.host)]
            except Exception as e:  # whatever came out of the container: a failed verify, never a crash
                return found + [codes.make("LXF301", c.ct, f"cannot look inside CT {c.ct}: "
                                           f"{type(e).__name__}: {e}", host=c.host)]
            ctx = replace(planned, probe=probe, live=live)
            seen["probed"] = True
        found += [f for f in run_rules(ctx) if codes.must_be_absent(f, fixed)
                  and (f.device is None or f.device not in absent)]
        return found + (extra() if extra is not None else [])

    def verify() -> list[Finding]:
        last: list[Finding] = []

        def settled() -> bool:
            last[:] = problems()
            return not last

        wait_until(settled, timeout=10.0, interval=0.2)  # bind mounts and nodes can trail 'running'
        return list(last)

    return Verifier(verify, c.ct, seen)


def applier(target: Target, ct: str) -> "Applier":
    from .apply import Applier, Host, state_dir

    return Applier(
        Host(target.local_path, target.transport, target.backend if target.live else None),
        ct, state_dir(target.root), target.backend.flavor,
        lock_path=target.backend.lock_path(ct) if target.live else None, snapshot_lock=not target.live,
    )


def live_ops(target: Target, c: CtReport, facts: HostFacts | None = None) -> "LiveOps":
    """The live operations equal to this plan's config change (liveplan.live_ops)."""
    from . import liveplan

    return liveplan.live_ops(c.context, c.planned)


def apply_transaction(target: Target, c: CtReport, facts: HostFacts | None = None, *, restart: bool = True,
                      live: bool = False, ops: "LiveOps | None" = None) -> "Transaction":
    """The one transaction `apply` runs and `apply --dry-run` checks (Transaction.check())."""
    if live:
        if not target.live:
            raise BadInput("--live changes a running container: not with --root")
        ops = ops or live_ops(target, c)  # a change it cannot make live: its Live step's check refuses
        pid = target.backend.init_pid(target.transport, c.ct)

        def pid_unchanged() -> list[Finding]:
            now = target.backend.init_pid(target.transport, c.ct)
            if now == pid:
                return []
            return [codes.make("LXF301", c.ct, f"init PID changed ({pid} -> {now}): the container "
                               "restarted during a live apply", host=c.host)]

        check = verifier(target, c, pid_unchanged)
        return applier(target, c.ct).transaction(c.plan, restart=False, live=ops, verify=check,
                                                 unchecked=check.unchecked)
    restart = restart and target.live
    check = verifier(target, c) if restart else None
    tx = applier(target, c.ct).transaction(c.plan, restart=restart, verify=check,
                                           unchecked=check.unchecked if check is not None else None)
    if check is None:  # what the apply's message says instead of "verified" (outcome.applied_message)
        tx.state["not_verified"] = ("a snapshot, nothing was probed" if not target.live else
                                    f"--no-restart, nothing was probed; CT {c.ct} gets the new config at its "
                                    "next start")
    return tx


def apply_plan(target: Target, c: CtReport, facts: HostFacts | None = None, style: str = "auto",
               restart: bool = True, live: bool = False, ops: "LiveOps | None" = None) -> ApplyResult:
    """Back up, write atomically, restart if it ran (or, live, change the running
    container in place), verify; roll back on failure."""
    if c.plan.is_empty:
        return ApplyResult("nothing-to-do", None, True, False, "nothing to change")
    tx = apply_transaction(target, c, facts, restart=restart, live=live, ops=ops)
    result = tx.run()
    return ApplyResult(result.reached, result.state.get("backup"), result.verified, False)


def rollback(target: Target, ct: str, to: str | None = None, restart: bool = True) -> ApplyResult:
    listed = target.backend.list(target.transport)
    check_cts(target, [ct], listed)
    return applier(target, ct).restore(listed[ct], to, restart=restart and target.live)
