"""Renderers: reports in, text or JSON-ready data out. Pure.

JSON schema 1 (`--json`, also documented in README.md):

    {"schema": 1, "tool": "lxcfix", "version": "0.1.0", "command": "scan",
     "hosts": [{"host": "pve1", "backend": "pve", "error": null, "seconds": 0.01,
                "facts": {"nvidia_driver": "580.159.04", "cgroup_layout": "v2", ...}}],
     "containers": [{"host": "pve1", "ct": "200", "path": "/etc/pve/lxc/200.conf", "node": null,
                     "status": "error", "error": null,
                     "findings": [{"code": "LXF101", "severity": "error", "message": "...",
                                   "device": "/dev/nvidia-uvm", "evidence": [...], "fix": "...",
                                   "live_fixable": null, "cause": "cgroup-denies:nvidia"}],
                     "causes": [{"id": "cgroup-denies:nvidia", "severity": "error", "code": "LXF101",
                                 "title": "CT 200 cannot use the GPU: ...", "codes": [...],
                                 "applies": true, "live_fixable": false,
                                 "commands": ["lxcfix apply --ct 200"], "symptoms": 1}],
                     "plan": {"style": "devn", "style_reason": "...", "diff": "..."} | null}],
     "summary": {"containers": 3, "error": 2, "warning": 1, "info": 0, "unreachable": 0}}
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from . import __version__, causes
from .model import SEVERITY_ORDER, CtReport, Finding, HostFacts, HostReport

SCHEMA = 1


def ct_status(findings: Iterable[Finding]) -> str:
    severities = {f.severity for f in findings}
    for s in ("error", "warning", "info"):
        if s in severities:
            return s
    return "ok"


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code))


def facts_json(host: HostReport) -> dict | None:
    f = host.facts
    if f is None:
        return None
    return {
        "backend": f.backend,
        "cgroup_layout": f.cgroup_layout,
        "nvidia_driver": f.nvidia_driver,
        "pve_version": f.pve_version,
        "lxc_version": f.lxc_version,
        "char_majors": {k: list(v) for k, v in sorted(f.char_majors.items())},
        "nodes_known": f.nodes_known,
        "device_nodes": {
            p: {"kind": n.kind, "major": n.major, "minor": n.minor, "mode": oct(n.mode & 0o7777),
                "uid": n.uid, "gid": n.gid}
            for p, n in sorted(f.nodes.items())
            if not p.startswith(("/dev/tty", "/dev/pts", "/dev/vcs", "/dev/loop"))
        },
    }


def findings_json(findings: Iterable[Finding], facts: HostFacts | None = None,
                  grouped=None, reach: causes.Reach | None = None) -> tuple[list[dict], list[dict]]:
    """(findings, causes) as JSON: each finding with the id of its cause (lxcfix.causes),
    so a machine can group them as the human output does. grouped: those causes, when
    they were grouped already (CtReport.causes); reach: where the causes' commands act
    (a --root snapshot's, a fleet host's: causes.Reach)."""
    found = sort_findings(findings)
    if not found:
        return [], []
    grouped = grouped if grouped is not None else causes.group(found, facts)
    cause_of = {id(f): c.id for c in grouped for f in c.symptoms}
    return [{**f.to_json(), "cause": cause_of[id(f)]} for f in found], [c.to_json(reach) for c in grouped]


def grouped(c: CtReport, facts: HostFacts | None = None) -> list:
    """The container's findings as causes: CtReport.causes, or grouped now."""
    return list(c.causes) if c.causes is not None else causes.group(sort_findings(c.findings), facts)


def container_json(c: CtReport, with_plan: bool = True, facts: HostFacts | None = None,
                   reach: causes.Reach | None = None) -> dict:
    findings, grouped = findings_json(c.findings, facts, c.causes, reach)
    return {
        "host": c.host,
        "ct": c.ct,
        "path": c.path,
        "node": c.node,
        "status": ct_status(c.findings),
        "error": c.error,
        "findings": findings,
        "causes": grouped,
        "plan": (
            {"style": c.plan.style, "style_reason": c.plan.style_reason, "diff": c.plan.diff()}
            if with_plan and c.plan is not None and not c.plan.is_empty else None
        ),
    }


def summary(hosts: list[HostReport]) -> dict:
    counts: Counter = Counter()
    n = 0
    for h in hosts:
        for c in h.containers:
            n += 1
            for f in c.findings:
                counts[f.severity] += 1
    return {
        "containers": n,
        "error": counts["error"],
        "warning": counts["warning"],
        "info": counts["info"],
        "unreachable": sum(1 for h in hosts if h.error),
    }


def document(command: str, hosts: list[HostReport], with_plan: bool = True,
             reach: Mapping[str, causes.Reach] | None = None) -> dict:
    """reach: host -> where the commands shown for it act (default: that host itself)."""
    reach = reach or {}
    return {
        "schema": SCHEMA,
        "tool": "lxcfix",
        "version": __version__,
        "command": command,
        "hosts": [
            {"host": h.host, "backend": h.backend, "error": h.error, "seconds": round(h.seconds, 4),
             "facts": facts_json(h), "findings": findings_json(h.findings, h.facts)[0], "notes": list(h.notes)}
            for h in hosts
        ],
        "containers": [container_json(c, with_plan, h.facts, reach.get(h.host)) for h in hosts
                       for c in h.containers],
        "summary": summary(hosts),
    }


def prometheus(hosts: list[HostReport], now: float) -> str:
    """node_exporter textfile: findings by code and severity per host and container."""
    lines = [
        "# HELP lxcfix_findings Findings by code and severity per container.",
        "# TYPE lxcfix_findings gauge",
    ]
    for h in hosts:
        for c in h.containers:
            counts = Counter((f.code, f.severity) for f in c.findings)
            for (code, sev), n in sorted(counts.items()):
                lines.append(f'lxcfix_findings{{host="{_esc(h.host)}",ct="{_esc(c.ct)}",code="{code}",severity="{sev}"}} {n}')
    lines += [
        "# HELP lxcfix_host_up 1 when the host could be scanned.",
        "# TYPE lxcfix_host_up gauge",
    ]
    lines += [f'lxcfix_host_up{{host="{_esc(h.host)}"}} {0 if h.error else 1}' for h in hosts]
    lines += [
        "# HELP lxcfix_scan_duration_seconds Wall time of the scan per host.",
        "# TYPE lxcfix_scan_duration_seconds gauge",
    ]
    lines += [f'lxcfix_scan_duration_seconds{{host="{_esc(h.host)}"}} {h.seconds:.3f}' for h in hosts]
    lines += [
        "# HELP lxcfix_last_success_timestamp_seconds When a scan of the host last succeeded.",
        "# TYPE lxcfix_last_success_timestamp_seconds gauge",
    ]
    lines += [f'lxcfix_last_success_timestamp_seconds{{host="{_esc(h.host)}"}} {now:.0f}'
              for h in hosts if not h.error]
    return "\n".join(lines) + "\n"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
