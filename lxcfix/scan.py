"""One host scanned: facts, every container's config, findings and plan.

    report = scan_host(Local(), detect(Local()), cts=["200"], style="auto")
    report.containers[0] == CtReport(ct="200", path="/etc/pve/lxc/200.conf", findings=(...), plan=Plan(...))

Failures become data: an unreadable config is a finding for that container,
an unreachable host a finding for the host; nothing here raises for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import gather
from .backends import Lxc, Proxmox
from .errors import LxcfixError
from .model import Finding, HostFacts, Plan
from .plan import make_plan
from .rules import Context, run_rules
from .transport import Transport


@dataclass(frozen=True)
class CtReport:
    host: str
    ct: str
    path: str
    findings: tuple[Finding, ...]
    plan: Plan | None = None
    node: str | None = None
    status: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class HostReport:
    host: str
    backend: str
    facts: HostFacts | None
    containers: tuple[CtReport, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    findings: tuple[Finding, ...] = field(default=())  # host-level (LXF301)


def analyze_container(facts: HostFacts, loaded: gather.Loaded, loader, style: str = "auto",
                      probe=None, live=None) -> CtReport:
    if loaded.config is None:
        f = Finding("LXF131", "error", loaded.ct, f"config cannot be read: {loaded.error}",
                    evidence=(loaded.path,), host=facts.host)
        return CtReport(facts.host, loaded.ct, loaded.path, (f,), error=loaded.error, node=loaded.node)
    ctx: Context = gather.context(facts, loaded, loader, probe=probe, live=live)
    try:
        plan = make_plan(ctx, style)
        findings = plan.findings
    except LxcfixError:
        raise
    except Exception as e:  # a bug in one container's analysis must not end a fleet scan
        return CtReport(facts.host, loaded.ct, loaded.path, tuple(run_rules(ctx)),
                        error=f"internal error planning this container: {e!r}", node=loaded.node)
    return CtReport(facts.host, loaded.ct, loaded.path, findings, plan, node=loaded.node)


def scan_host(t: Transport, backend: Proxmox | Lxc, cts: list[str] | None = None,
              style: str = "auto", facts: HostFacts | None = None) -> HostReport:
    start = time.monotonic()
    facts = facts or gather.host_facts(t, backend)
    listed = backend.list(t)
    wanted = cts if cts else list(listed)
    loader = gather.include_loader(t)
    reports = []
    for ct in wanted:
        loaded = gather.load_container(t, backend, ct, listed.get(ct))
        reports.append(analyze_container(facts, loaded, loader, style))
    return HostReport(t.name, backend.name, facts, tuple(reports), seconds=time.monotonic() - start)
