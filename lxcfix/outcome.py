"""What each command came to, and the one place its exit code is decided
(black's Report.return_code, pip's Command.main). Pure: data in, a code out.

    Scanned([host_report]).exit_code      -> 1 (findings), 3 (a host unreachable), 0 (clean)
    Planned(plan).exit_code               -> 1 when there is something to change
    Applied(result).exit_code             -> 0 applied (and verified); a dry run: 1 when it would change something

Exit codes (README): 0 clean, or applied and verified; 1 findings or changes
pending; 2 usage or bad input; 3 host or container unreachable, facts failed;
4 apply failed and was rolled back; 5 rollback failed, a human is needed.
Errors (2-5) are raised as LxcfixError, whose exit_code the CLI takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import ExitCode
from .model import ApplyResult, HostReport, Plan


@dataclass(frozen=True)
class Scanned:
    """scan, diagnose. When a scan has both findings and unreachable hosts, 1
    wins: there is work to do either way (the JSON says which hosts)."""

    hosts: Sequence[HostReport]
    command: str = "scan"

    @property
    def exit_code(self) -> int:
        findings = [f for h in self.hosts for c in h.containers for f in c.findings]
        if any(f.severity in ("error", "warning") for f in findings):
            return ExitCode.PENDING
        if any(h.error for h in self.hosts):
            return ExitCode.UNREACHABLE
        return ExitCode.CLEAN


@dataclass(frozen=True)
class Planned:
    plan: Plan

    @property
    def exit_code(self) -> int:
        return ExitCode.CLEAN if self.plan.is_empty else ExitCode.PENDING


@dataclass(frozen=True)
class Applied:
    """apply, rollback, host-fix. dry_run: only the diff and the steps were shown."""

    result: ApplyResult | None
    dry_run: bool = False
    pending: bool = False  # dry run of a change that is not empty

    @property
    def exit_code(self) -> int:
        if self.dry_run:
            return ExitCode.PENDING if self.pending else ExitCode.CLEAN
        return ExitCode.CLEAN


@dataclass(frozen=True)
class Audited:
    report: Any  # audit.AuditReport

    @property
    def exit_code(self) -> int:
        if self.report.items:
            return ExitCode.PENDING
        return ExitCode.UNREACHABLE if any(h.error for h in self.report.hosts) else ExitCode.CLEAN


@dataclass(frozen=True)
class Rolled:
    """A change run on many hosts, or many containers (fleetapply.HostRun each): the worst
    host's exit code."""

    runs: Sequence[Any]

    @property
    def exit_code(self) -> int:
        return max((int(r.exit) for r in self.runs), default=0)


@dataclass(frozen=True)
class Hooked:
    """A Proxmox hookscript call: its code is Proxmox's answer (non-zero at pre-start refuses the start)."""

    code: int

    @property
    def exit_code(self) -> int:
        return self.code


@dataclass(frozen=True)
class Watched:
    """lxcfix watch: 0; --once: 1 when a repair failed (and was rolled back)."""

    code: int

    @property
    def exit_code(self) -> int:
        return self.code


@dataclass(frozen=True)
class Shown:
    """facts, explain, --print-snippet: nothing to judge."""

    what: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return ExitCode.CLEAN
