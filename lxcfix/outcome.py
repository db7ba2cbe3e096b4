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


def applied_message(ct: str, reached: str, backup: str | None, not_verified: str | None = None) -> str:
    """What an apply says it came to: "verified" only when its verify probed the running
    container; otherwise what was checked, and what was not (the transaction's
    state["not_verified"]).

        applied_message("200", "verified", "/b/200.conf")  -> "CT 200: applied (verified); backup /b/200.conf"
        applied_message("200", "checked", "/b/200.conf", "CT 200 is stopped, nothing was probed")
          -> "CT 200: applied (config re-parsed; not verified: CT 200 is stopped, nothing was probed); backup ..."
        applied_message("200", "written", "/b/200.conf", "a snapshot, nothing was probed")
          -> "CT 200: applied (written; not verified: a snapshot, nothing was probed); backup /b/200.conf"
    """
    done = "config re-parsed" if reached == "checked" else reached
    if not_verified or reached != "verified":
        done += f"; not verified: {not_verified or 'nothing was probed'}"
    return f"CT {ct}: applied ({done}); backup {backup}"


@dataclass(frozen=True)
class Audited:
    report: Any  # audit.AuditReport

    @property
    def exit_code(self) -> int:
        if self.report.items:
            return ExitCode.PENDING
        return ExitCode.UNREACHABLE if any(h.error for h in self.report.hosts) else ExitCode.CLEAN


# A change's outcome on one container or host (agent.OUTCOMES, fleetapply's host statuses) ->
# its exit code, decided here: a fleet host's reply says what happened (checked against the
# request, agentreply.validate), never which number the run exits with.
RUN_EXIT = {"applied": 0, "nothing-to-do": 0, "restored": 0, "skipped": 0, "not-tried": 0,
            "would-apply": 1, "planned": 1, "refused": 2, "failed": 3, "lost": 3, "invalid": 3, "no-python": 3,
            "unreachable": 3, "would-fail": 4, "rolled-back": 4, "rollback-failed": 5}


@dataclass(frozen=True)
class Preflighted:
    """audit --for migrate|ha: 1 when a node checked would break the container, 3 when a node
    could not be checked (and none breaks it), 0 when every node can run it."""

    report: Any  # preflight.Preflight

    @property
    def exit_code(self) -> int:
        if any(v.issues for v in self.report.verdicts):
            return ExitCode.PENDING
        return ExitCode.UNREACHABLE if any(v.error for v in self.report.verdicts) else ExitCode.CLEAN


@dataclass(frozen=True)
class Rolled:
    """A change run on many hosts, or many containers (fleetapply.HostRun each): the worst
    host's exit code, each host's from its status (an unreachable host's from the error the
    control node met: 2 for a host key it refused, else 3)."""

    runs: Sequence[Any]

    @property
    def exit_code(self) -> int:
        return max((run_exit(r.status, r.exit) for r in self.runs), default=0)


def run_exit(status: str, reached: int = 3) -> int:
    """A host's (or container's) exit code from its status; reached: the control node's own
    error's code for a host it did not reach (unreachable), 2 or 3."""
    if status == "unreachable":
        return reached if reached in (ExitCode.USAGE, ExitCode.UNREACHABLE) else ExitCode.UNREACHABLE
    return RUN_EXIT.get(status, ExitCode.UNREACHABLE)


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
