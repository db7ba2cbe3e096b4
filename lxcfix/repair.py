"""The flows behind the commands, as a library: pick a target host, scan it,
apply a plan with verification, restore a backup. Prints nothing.

    target = open_target(root=None, hosts=None)           # this host
    report, ct = one(target, "200", probe=True)
    result = apply_plan(target, ct, report.facts, style="auto", restart=True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from . import ctconfig, gather, liveplan
from .apply import Applier, Host, default_state_dir, wait_until
from .backends import Lxc, Proxmox, detect
from .errors import BadInput
from .liveplan import LiveOps
from .model import ApplyResult, Finding, HostFacts
from .plan import STYLES, make_plan
from .scan import CtReport, HostReport, scan_host
from .transport import Local, RootDir

# Findings that mean the device the plan was for is still not usable.
VERIFY_CODES = frozenset({"LXF100", "LXF101", "LXF110", "LXF121", "LXF200", "LXF202", "LXF203", "LXF301"})


@dataclass
class Target:
    """One host to work on: its transport and backend; `root` for a snapshot."""

    transport: object
    backend: Proxmox | Lxc
    root: str | None = None

    def local_path(self, path: str) -> str:
        return self.transport.path(path) if self.root else path

    @property
    def live(self) -> bool:
        return self.root is None


def open_target(root: str | None, hosts: list[str] | None = None) -> Target:
    if root is not None:
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
    t = Local()
    return Target(t, detect(t))


def check_cts(target: Target, cts: list[str] | None, listed: dict) -> list[str]:
    for ct in cts or []:
        target.backend.validate(ct)
        if ct not in listed:
            raise BadInput(f"no container {ct!r} on {target.transport.name} "
                           f"(known: {', '.join(list(listed)[:10]) or 'none'})")
    return list(cts) if cts else list(listed)


def scan(target: Target, cts: list[str] | None, style: str = "auto", probe: bool = False,
         facts: HostFacts | None = None) -> HostReport:
    if style not in STYLES:
        raise BadInput(f"unknown --style {style!r}: use one of {', '.join(STYLES)}")
    listed = target.backend.list(target.transport)
    wanted = check_cts(target, cts, listed)
    return scan_host(target.transport, target.backend, wanted, style, facts=facts, probe=probe and target.live)


def one(target: Target, ct: str, style: str = "auto", probe: bool = False,
        facts: HostFacts | None = None) -> tuple[HostReport, CtReport]:
    rep = scan(target, [ct], style, probe, facts)
    c = rep.containers[0]
    if c.plan is None:
        raise BadInput(f"CT {ct}: {c.error}")
    return rep, c


def replanner(target: Target, ct: str, style: str, facts: HostFacts, path: str) -> Callable[[bytes], object]:
    """bytes of a config -> its plan: apply checks the new file plans to nothing."""
    loader = gather.include_loader(target.transport)

    def replan(data: bytes):
        cfg = ctconfig.parse(data, target.backend.flavor, path)
        return make_plan(gather.context(facts, gather.Loaded(ct, path, cfg), loader), style)

    return replan


def verifier(target: Target, ct: str, style: str, before: CtReport, facts: HostFacts | None = None):
    """Re-probe and re-plan after the restart. Devices missing on the host
    (LXF112) cannot be fixed by a config change and do not fail the verify."""
    absent = {f.device for f in before.findings if f.code == "LXF112"}

    def problems() -> list[Finding]:
        c = scan(target, [ct], style, probe=True, facts=facts).containers[0]
        found = [f for f in c.findings
                 if f.code in VERIFY_CODES and f.severity == "error" and f.device not in absent]
        if c.plan is not None and not c.plan.is_empty:
            found.append(Finding("LXF100", "error", ct, "planning again after the change is not clean",
                                 host=c.host, evidence=(c.plan.diff(),)))
        return found

    def verify() -> list[Finding]:
        last: list[Finding] = []

        def settled() -> bool:
            last[:] = problems()
            return not last

        wait_until(settled, timeout=10.0, interval=0.2)  # bind mounts and nodes can trail 'running'
        return list(last)

    return verify


def applier(target: Target, ct: str) -> Applier:
    return Applier(
        Host(target.local_path, target.transport, target.backend if target.live else None),
        ct, default_state_dir(target.root), target.backend.flavor,
        lock_path=target.backend.lock_path(ct) if target.live else None,
    )


def live_ops(target: Target, c: CtReport, facts: HostFacts) -> LiveOps:
    """The live operations equal to this plan's config change (liveplan.live_ops)."""
    loader = gather.include_loader(target.transport)

    def ctx(data: bytes):
        cfg = ctconfig.parse(data, target.backend.flavor, c.plan.path)
        return gather.context(facts, gather.Loaded(c.ct, c.plan.path, cfg), loader)

    return liveplan.live_ops(ctx(c.plan.before), ctx(c.plan.after))


def apply_plan(target: Target, c: CtReport, facts: HostFacts, style: str = "auto", restart: bool = True,
               before_write: Callable[[str], None] | None = None, live: bool = False,
               ops: LiveOps | None = None) -> ApplyResult:
    """Back up, write atomically, restart if it ran (or, live, change the running
    container in place: `ops`, or live_ops() of the plan), verify; roll back on failure."""
    if live:
        if not target.live:
            raise BadInput("--live changes a running container: not with --root")
        ops = ops or live_ops(target, c, facts)
        if ops.refuse:
            raise BadInput(f"--live cannot do this change: {ops.refuse}")
        pid = target.backend.init_pid(target.transport, c.ct)
        check = verifier(target, c.ct, style, c, facts)

        def verify() -> list[Finding]:
            found = check()
            now = target.backend.init_pid(target.transport, c.ct)
            if now != pid:
                found.append(Finding("LXF301", "error", c.ct, f"init PID changed ({pid} -> {now}): the container "
                                     "restarted during a live apply", host=c.host))
            return found

        return applier(target, c.ct).apply(
            c.plan, replan=replanner(target, c.ct, style, facts, c.plan.path),
            restart=False, verify=verify, before_write=before_write, live=ops,
        )
    restart = restart and target.live
    verify = verifier(target, c.ct, style, c, facts) if restart else None
    return applier(target, c.ct).apply(
        c.plan, replan=replanner(target, c.ct, style, facts, c.plan.path),
        restart=restart, verify=verify, before_write=before_write,
    )


def rollback(target: Target, ct: str, to: str | None = None, restart: bool = True) -> ApplyResult:
    listed = target.backend.list(target.transport)
    check_cts(target, [ct], listed)
    return applier(target, ct).restore(listed[ct], to, restart=restart and target.live)
