"""lxcfix as a library: the small, stable API that the Ansible collection
(ansible_collections/lxcfix/lxcfix) and any other program on the hypervisor
call, instead of scraping the command line. Thin: each call is one of
repair.py's flows; nothing here prints or exits.

    from lxcfix import api
    api.API_VERSION                      -> 1 (bumped only when a field changes meaning or goes away)
    api.require("0.1.0")                 # raises TooOld when the installed lxcfix is older
    api.scan()                           -> the `lxcfix scan --json` document (schema 1), running CTs probed
    api.scan(cts=["200"], probe=False, root="/tmp/snap")
    api.pending()                        -> ["200", "201"]: the containers whose plan changes something
    api.clean()                          -> {"200": True, ...}: each container checks clean as it is
    api.fix("200", check=True)           # check mode: the same plan and transaction, checked, nothing done
    -> {"ct": "200", "host": "localhost", "path": "/etc/pve/lxc/200.conf", "check": True,
        "changed": True, "before": b"arch: amd64\\n...", "after": b"arch: amd64\\n...dev0: ...\\n",
        "diff": "--- a/etc/pve/lxc/200.conf\\n+++ ...", "style": "devn", "style_reason": "...",
        "status": "running", "live": False, "restarted": True, "restart_required": False,
        "backup_file": None, "verified": False, "step_reached": None,
        "steps": ["lock /run/lock/lxc/pve-config-200.lock", "..."],
        "verdict": {"ok": True, "step": None, "exit_code": 0, "error": None, "error_class": None},
        "findings": [{"code": "LXF101", "severity": "error", "message": "...", ...}]}
    api.fix("200", check=False)          # applies: backup_file, step_reached "verified", verified True
    api.scope([200, "web"])              -> ["200", "web"]: an inventory's lxcfix_containers (None: every one)

What the fields mean:
- changed: the config differs (or, in check mode, would differ) from before; a
  second fix of the same container reports False.
- before/after: the config file's bytes before and after (after == before when
  nothing changes); diff: the unified diff `lxcfix plan` prints.
- restarted: the container was (check mode: would be) restarted to load the new
  config: it ran, restart=True, not live, a live host.
- restart_required: the new config is (would be) on disk but the running
  container still runs the old one (restart=False on a running container).
- verified: the apply's verify step ran and passed on the running container: the
  file on disk is the planned one, and a probe inside and its running device
  program show none of the problems the plan was for (False in check mode, on a
  stopped container: step_reached "checked", the config only re-parsed, and where
  no verify runs: a snapshot, or restart=False). When nothing
  needed doing (changed False), the state found: True when the container checks
  clean, probed inside when it runs (none of the findings a verify must not see).
- host: the caller's name for the host (`host=`: Ansible's inventory_hostname), else the host's own.
- findings: the container's findings before the change, as `--json` shows them.
- verdict: in check mode, what the transaction's check (Transaction.check())
  found before acting (None otherwise); when it fails, fix raises its error.

Check mode is the apply's own transaction checked, step by step, without its
effects (transaction.py): a locked config, a config changed since the plan, a
state dir that is full, read-only or a symlink, a live change that cannot be made
live or a stopped container for it raise the same error, with the same exit_code,
with check=True as with check=False, and nothing is written, locked, backed up or
restarted.

Errors are LxcfixError (errors.py; also api.LxcfixError), each with its
exit_code: BadInput (2, nothing changed; also a locked config, or a live
change that needs a start), Unreachable and StateError (3), ApplyFailed (4:
the change failed after the write and was rolled back; the message says what
was put back), RollbackFailed (5: the message says exactly what state the
config and container are in).
"""

from __future__ import annotations

from . import __version__, report, repair
from .errors import BadInput, LxcfixError

API_VERSION = 1

__all__ = ["API_VERSION", "LxcfixError", "TooOld", "clean", "fix", "pending", "require", "scan", "scope", "version"]


class TooOld(LxcfixError):
    """The installed lxcfix is older than the caller needs."""


def version() -> str:
    return __version__


def _numbers(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits or 0))
        if digits != part:  # "1.2.0rc1", "0.2.dev3": compare the numbers before the suffix
            break
    return tuple(out)


def require(minimum: str) -> str:
    """The installed version, or TooOld when it is older than `minimum` ("0.1.0")."""
    if _numbers(__version__) < _numbers(minimum):
        raise TooOld(f"lxcfix {__version__} is installed; {minimum} or newer is needed")
    return __version__


def scope(value: object) -> list[str] | None:
    """An inventory's `lxcfix_containers` as Ansible hands it over (None, "all", 200, "200",
    [200, "web"]) -> the containers it names (["200", "web"]), or None for every container;
    BadInput for anything `lxcfix --inventory` would refuse, with the same message."""
    from .inventory import check_var

    cts = check_var("lxcfix_containers", value, BadInput)
    return None if cts is None else list(cts)


def scan(cts: list[str] | None = None, *, probe: bool = True, style: str = "auto",
         root: str | None = None, host: str | None = None, host_nodes: bool = True) -> dict:
    """`lxcfix scan --json` of this host (or of the snapshot `root`): schema 1,
    {"schema", "tool", "version", "command": "scan", "hosts", "containers", "summary"}.
    cts: these containers (None: every one; []: none, as an inventory's empty lxcfix_containers).
    probe: look inside running containers (live hosts only). host: the name the
    document gives the host (a caller's own, Ansible's inventory_hostname; default:
    the host's). host_nodes: the host's device nodes in its facts (about 100 on a
    hypervisor); without, `device_nodes` is left out."""
    if cts is not None and not list(cts):  # an empty list names no container (None: every one)
        return _named(report.document("scan", []), host)
    target = repair.open_target(root)
    doc = report.document("scan", [repair.scan(target, list(cts) if cts else None, style, probe=probe)])
    if not host_nodes:
        for h in doc["hosts"]:
            if h.get("facts"):
                h["facts"].pop("device_nodes", None)
    return _named(doc, host)


def _named(doc: dict, host: str | None) -> dict:
    """The document with every `host` field the caller's name for the host."""
    if host is None:
        return doc
    for h in doc["hosts"]:
        h["host"] = host
        for f in h.get("findings", ()):
            f["host"] = host
    for c in doc["containers"]:
        c["host"] = host
        for f in c["findings"]:
            if "host" in f:
                f["host"] = host
    return doc


def pending(*, style: str = "auto", root: str | None = None) -> list[str]:
    """The containers whose plan changes their config (no probe: the plan is made from the config)."""
    target = repair.open_target(root)
    rep = repair.scan(target, None, style, probe=False)
    return [c.ct for c in rep.containers if c.plan is not None and not c.plan.is_empty]


def fix(ct: str, *, style: str = "auto", live: bool = False, restart: bool = True, check: bool = True,
        root: str | None = None, host: str | None = None) -> dict:
    """Plan one container's repair and, unless check, apply it as `lxcfix apply
    --yes` does (backup, atomic write, restart or --live, verify, roll back on
    failure). check=True checks that transaction and does nothing: the result says
    what would change and the steps it would take, or it raises what the apply would
    raise before acting. See the module docstring for the fields."""
    if root is not None and live:
        raise BadInput("live changes a running container: not with a snapshot (root)")
    target = repair.open_target(root)
    restart = restart and target.live
    rep, c = repair.one(target, ct, style, probe=live, editable=True)
    p = c.plan
    status = target.backend.status(target.transport, ct) if target.live else None
    running = status == "running"
    out = {
        "ct": c.ct, "host": host or c.host, "path": c.path, "check": check, "changed": not p.is_empty,
        "before": p.before, "after": p.after, "diff": p.diff(), "style": p.style, "style_reason": p.style_reason,
        "status": status, "live": live, "restarted": False, "restart_required": False, "backup_file": None,
        "verified": False, "step_reached": None, "steps": [], "verdict": None,
        "findings": [f.to_json() for f in report.sort_findings(c.findings)],
    }
    if p.is_empty:
        if not check:  # nothing to do: the state found, checked as the apply's verify would
            out["verified"] = _checks_clean(target, ct, style, status == "running")
        return out
    tx = repair.apply_transaction(target, c, rep.facts, restart=restart, live=live)
    out["steps"] = tx.describe_steps()
    out["restarted"] = running and restart and not live
    out["restart_required"] = running and not restart and not live
    if check:
        verdict = tx.check()
        out["verdict"] = verdict.to_json()
        verdict.raise_error()  # what the apply raises before acting
        return out
    result = tx.run()  # which begins with the same check
    out["backup_file"] = result.state.get("backup")
    out["verified"] = result.verified
    out["step_reached"] = result.reached
    return out


def clean(cts: list[str] | None = None, *, style: str = "auto", root: str | None = None) -> dict[str, bool]:
    """Each container (default: every one of the host): True when it checks clean as it is,
    probed inside when it runs (what `fix` reports as `verified` when nothing needs doing)."""
    target = repair.open_target(root)
    names = list(cts) if cts else [c.ct for c in repair.scan(target, None, style, probe=False).containers]
    out = {}
    for ct in names:
        running = target.live and target.backend.status(target.transport, ct) == "running"
        out[ct] = _checks_clean(target, ct, style, running)
    return out


def _checks_clean(target, ct: str, style: str, running: bool) -> bool:
    """A container nothing needs doing to has none of the findings a verified change must
    leave none of (codes.must_be_absent: the device denied or absent, the running device
    program not the config's, the probe unusable), probed inside when it runs."""
    from . import codes

    _, c = repair.one(target, ct, style, probe=running)
    fixed = codes.fixed_devices(c.findings)
    return not c.error and not any(codes.must_be_absent(f, fixed) for f in c.findings)
