"""Changes to many hosts: `apply`, `plan` and `rollback` with --inventory (or `apply --all`
on this host), each host's part run there by the agent (agent.py, shipped by ship.py),
rolling: `serial` hosts at a time, in inventory order, and no new batch once more than
`max_fail` hosts have failed (FAILED: rolled back, rollback failed, or lost mid-run, whose
state only the host's journal knows). A host that was not reached, has no python3, or
refused (nothing changed there) is listed and the run goes on.

    runs = roll(entries, lambda e: host_run(e, agent_over(connect), request), serial=1, max_fail=0,
                on_done=show)
    runs == [HostRun("hv1", "applied", 0, [{"ct": "200", "outcome": "applied", ...}]),
             HostRun("hv2", "rolled-back", 4, [...]), HostRun("hv3", "not-tried", 0, [], "the run stopped ...")]
    worst_exit(runs) == 4
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .errors import LxcfixError
from .outcome import Rolled, run_exit

# Worst first: a host's status is its worst container's outcome.
RANK = ("rollback-failed", "rolled-back", "would-fail", "lost", "invalid", "failed", "no-python", "unreachable", "refused",
        "would-apply", "planned", "applied", "restored", "skipped", "nothing-to-do", "not-tried")
# invalid: the host sent a reply that is not the agent's answer to the request (agentreply):
# what it did there, only its journal says, as for a host lost mid-run.
FAILED = frozenset({"rollback-failed", "rolled-back", "lost", "invalid"})
WORDS = {"rollback-failed": "rollback FAILED", "rolled-back": "rolled back", "lost": "lost mid-run",
         "invalid": "invalid reply", "no-python": "no python3", "nothing-to-do": "nothing to do",
         "would-apply": "would apply", "would-fail": "would fail", "not-tried": "not tried"}


@dataclass
class HostRun:
    """One host's part of a fleet change. results: the agent's records (agent.py), one per container."""

    host: str
    status: str
    exit: int
    results: list[dict] = field(default_factory=list)
    message: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def to_json(self) -> dict:
        return {"host": self.host, "status": self.status, "exit_code": self.exit, "message": self.message,
                "seconds": round(self.seconds, 3), "results": self.results}


Agent = Callable[[object, dict], dict]  # (inventory entry or None, request) -> the agent's document


def from_doc(host: str, doc: dict, seconds: float = 0.0) -> HostRun:
    """The agent's document, checked (agentreply.validate), as one host's run: its status the
    worst container's outcome, its exit code the control node's for that status."""
    err = doc.get("error")
    if err:
        status = "refused" if err["exit"] == 2 else "failed"
        return HostRun(host, status, run_exit(status), [], err["message"], seconds)
    results = doc["results"]
    if not results:
        return HostRun(host, "nothing-to-do", 0, [], "nothing to change", seconds)
    status = min((r["outcome"] for r in results), key=RANK.index)
    return HostRun(host, status, run_exit(status), results, "", seconds)


def host_run(entry, agent: Agent, request: dict, name: str | None = None) -> HostRun:
    """One host: the agent's answer, checked against the request, or why there is none (a
    finding of the run, never a crash: an invalid reply is that host's "invalid")."""
    from .agentreply import Invalid, validate
    from .ship import AgentError, InvalidReply, NoReply

    host = name or getattr(entry, "name", "this host")
    start = time.monotonic()
    try:
        doc = validate(agent(entry, request), request)
    except (Invalid, InvalidReply) as e:
        return HostRun(host, "invalid", run_exit("invalid"), [], f"host sent an invalid reply: {e}",
                       time.monotonic() - start)
    except AgentError as e:
        status = "lost" if isinstance(e, NoReply) else "no-python"
        return HostRun(host, status, run_exit(status), [], str(e), time.monotonic() - start)
    except LxcfixError as e:  # not reached: connect, host key, login
        return HostRun(host, "unreachable", run_exit("unreachable", int(e.exit_code)), [], str(e),
                       time.monotonic() - start)
    except Exception as e:  # a bug, or a library's odd error: this host's, never the run's
        return HostRun(host, "lost", run_exit("lost"), [], f"internal error (a bug) with this host: "
                       f"{type(e).__name__}: {e}; what ran there, its journal says", time.monotonic() - start)
    return from_doc(host, doc, time.monotonic() - start)


def agent_over(connect, timeout: float | None = None) -> Agent:
    """The agent run over one connection per host: connect(entry) -> transport (fleet.SshConnector).
    timeout: how long a host's part may take (--host-timeout); None: the host's
    lxcfix_host_timeout, else ship.AGENT_TIMEOUT."""
    from .errors import Unreachable
    from .ship import AGENT_TIMEOUT, AgentError, NoReply, run_agent

    def run(entry, request: dict) -> dict:
        deadline = timeout or getattr(entry, "host_timeout", None) or AGENT_TIMEOUT
        t = connect(entry)
        try:
            try:
                return run_agent(t, request, timeout=deadline)
            except AgentError:
                raise
            except Unreachable as e:  # the link went after the request: what happened there, its journal says
                raise NoReply(f"{e}; the change may have run there: `lxcfix rollback --ct ID` through the same "
                              "inventory restores a container's newest backup") from None
        finally:
            close = getattr(t, "close", None)
            if close is not None:
                close()

    return run


def request_for(entry, base: dict) -> dict:
    """The request a host gets: the inventory's backend choices, and for apply-all its containers."""
    req = dict(base)
    if entry is not None:
        req.update(backend=entry.backend, pve_dir=entry.pve_dir, lxc_path=entry.lxc_path)
        if base.get("op") == "apply-all" and entry.containers is not None and "cts" not in base:
            req["cts"] = list(entry.containers)
    return req


def roll(entries: Sequence, run_one: Callable[[object], HostRun], *, serial: int = 1, max_fail: int = 0,
         on_done: Callable[[HostRun], None] | None = None) -> list[HostRun]:
    """Hosts in batches of `serial` (run at once), each batch's runs reported in inventory order;
    once more than max_fail hosts failed, the rest are "not-tried"."""
    out: list[HostRun] = []
    failed: list[str] = []
    for i in range(0, len(entries), max(1, serial)):
        batch = list(entries[i:i + max(1, serial)])
        if len(failed) > max_fail:
            runs = [HostRun(getattr(e, "name", "this host"), "not-tried", 0, [],
                            f"not tried: the run stopped after {', '.join(failed)} failed"
                            + (f" (--max-fail {max_fail})" if max_fail else "")) for e in batch]
        elif len(batch) == 1:
            runs = [run_one(batch[0])]
        else:
            with ThreadPoolExecutor(len(batch)) as pool:
                runs = list(pool.map(run_one, batch))
        for r in runs:
            if r.failed:
                failed.append(r.host)
            if on_done is not None:
                on_done(r)
        out += runs
    return out


def worst_exit(runs: Iterable[HostRun]) -> int:
    """The exit code of the whole run: the worst host's (5 > 4 > 3 > 2 > 1 > 0), from its status."""
    return Rolled(list(runs)).exit_code


def counts(runs: Iterable[HostRun]) -> dict[str, int]:
    """{status: hosts}, in RANK order, the statuses that occur."""
    found: dict[str, int] = {}
    for r in runs:
        found[r.status] = found.get(r.status, 0) + 1
    return {s: found[s] for s in RANK if s in found}


def summary_line(runs: Sequence[HostRun]) -> str:
    parts = ", ".join(f"{n} {WORDS.get(s, s)}" for s, n in counts(runs).items())
    return f"{len(runs)} host(s): {parts or 'none'}"
