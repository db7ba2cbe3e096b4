"""What runs on a hypervisor for a fleet command (`apply/plan/rollback --inventory`):
the same flows as a local command, on that host, with its own lock, digest check,
backups and journal in its own state dir. ship.py sends this package there (no
lxcfix install needed) and reads back one document.

    serve({"op": "apply", "ct": "200", "dry_run": False, "restart": True, "live": False,
           "style": "auto", "asks": [], "expect": "923f005d1757..."})
    -> {"agent": 1, "host": "pve1", "error": None,
        "results": [{"ct": "200", "outcome": "applied", "exit": 0, "message": "CT 200: applied (verified); ...",
                     "diff": "--- a/...", "style": "devn", "style_reason": "...", "steps": [...],
                     "verdict": {"ok": True, ...}, "before": "923f005d1757...", "backup": "/var/lib/...",
                     "reached": "verified", "verified": True}]}

ops: "plan" (diff and steps, nothing checked or changed), "apply" (dry_run: the check
run), "apply-all" (every container with a fix, in order; after one rolls back the rest
are not tried), "rollback", "host-fix" (the unit that creates the NVIDIA nodes at boot).
An outcome is one of OUTCOMES; `exit` is what the same local command exits with. Nothing is printed while it runs: a client that went away
must not fail a transaction half-way (SIGHUP is ignored, the reply is written at the
end, and a reply nobody reads is dropped).
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import sys
import zlib

from . import ctconfig
from .agentreply import OUTCOMES  # noqa: F401  (re-exported)
from .errors import ApplyFailed, BadInput, LxcfixError, RollbackFailed
from .outcome import applied_message

AGENT_VERSION = 1
OPS = ("plan", "apply", "apply-all", "rollback", "host-fix")
# applied, nothing-to-do, would-apply (a check run that would go ahead), would-fail (a check run
# whose check found the run would fail and roll back: nothing done), restored (rollback),
# refused (nothing changed: lock:, digest moved, bad input), rolled-back (changed, failed,
# put back), rollback-failed, failed (lxcfix's own state or a host file unusable: nothing
# changed), skipped (not tried: an earlier container of this host rolled back): OUTCOMES, as
# the control node reads them (agentreply).
ON_FAILURE = ("on failure: undo the steps done, in reverse (restore the backup, restart or undo the "
              "live change), exit 4")
HOST_FIX_ON_FAILURE = "on failure: restore the old unit (or remove the new one), undo the enable, reload; exit 4"


def outcome_of(e: LxcfixError) -> str:
    if isinstance(e, RollbackFailed):
        return "rollback-failed"
    if isinstance(e, ApplyFailed):
        return "rolled-back"
    return _refused_or_failed(e)


def checked_outcome(e: LxcfixError) -> str:
    """A check run's verdict when its check failed: nothing was done, so never "rolled-back"; the
    run would fail and roll back ("would-fail", exit 4 as the run would), be refused, or fail."""
    if isinstance(e, ApplyFailed):
        return "would-fail"
    return _refused_or_failed(e)


def _refused_or_failed(e: LxcfixError) -> str:
    """An error that is neither a rollback nor its failure: "refused" when nothing changed (bad
    input, or exit 2: the control node exits 2 for it), else "failed"."""
    return "refused" if isinstance(e, BadInput) or int(e.exit_code) == 2 else "failed"


def _str(req: dict, key: str, default: str | None = None) -> str | None:
    v = req.get(key, default)
    if v is not None and not isinstance(v, str):
        raise BadInput(f"agent request: {key} is not a string")
    return v


def _bool(req: dict, key: str, default: bool = False) -> bool:
    v = req.get(key, default)
    if not isinstance(v, bool):
        raise BadInput(f"agent request: {key} is not true or false")
    return v


def _target(req: dict):
    """This host (or, in tests, a snapshot), with the inventory's lxcfix_backend / lxcfix_pve_dir /
    lxcfix_lxc_path the control sent."""
    from dataclasses import replace

    from . import repair
    from .backends import choose

    root = _str(req, "root")
    target = repair.open_target(root)
    backend, pve_dir, lxc_path = _str(req, "backend", "auto"), _str(req, "pve_dir"), _str(req, "lxc_path")
    if root is None and (backend != "auto" or pve_dir or lxc_path):
        if backend not in ("auto", "pve", "lxc"):
            raise BadInput(f"agent request: backend {backend!r} is not auto, pve or lxc")
        target = replace(target, backend=choose(target.transport, backend, pve_dir, lxc_path))
    return target


def _asks(req: dict) -> frozenset:
    from .rules.access import MAP_GROUP, checked_map_group

    asks = req.get("asks", [])
    if not isinstance(asks, list) or not all(isinstance(a, str) and (a in ("write-subgid", "mode-0666") or (
            a.startswith(MAP_GROUP) and checked_map_group(a[len(MAP_GROUP):]))) for a in asks):
        raise BadInput("agent request: asks must be a list of write-subgid, mode-0666, map-group:NAME")
    return frozenset(asks)


def apply_one(target, ct: str, *, dry_run: bool = False, restart: bool = True, live: bool = False,
              style: str = "auto", asks=frozenset(), expect: str | None = None, plan_only: bool = False) -> dict:
    """One container, as `lxcfix apply --ct CT` (or plan, or its --dry-run) runs it on this host.
    expect: the digest of the config the admin saw the diff of; another one now is refused."""
    from . import repair

    rec: dict = {"ct": ct}
    try:
        rep, c = repair.one(target, ct, style, probe=live, asks=asks, editable=True)
        p = c.plan
        rec.update(style=p.style, style_reason=p.style_reason, before=ctconfig.digest(p.before), path=p.path)
        if p.is_empty:
            return {**rec, "outcome": "nothing-to-do", "exit": 0, "message": f"CT {ct}: nothing to change"}
        rec["diff"] = p.diff()
        if plan_only:
            return {**rec, "outcome": "planned", "exit": 1, "message": f"CT {ct}: a change is planned"}
        if target.root is not None and restart:
            raise BadInput("a snapshot has no container to restart: restart must be off")
        tx = repair.apply_transaction(target, c, rep.facts, restart=restart, live=live)
        rec["steps"] = tx.describe_steps() + [ON_FAILURE]
        if dry_run:  # check mode: the transaction's own check (the real run begins with it too)
            verdict = tx.check()
            rec["verdict"] = verdict.to_json()
            if verdict.ok:
                return {**rec, "outcome": "would-apply", "exit": 1, "message": f"CT {ct}: apply would go ahead"}
            return {**rec, "outcome": checked_outcome(verdict.error), "exit": verdict.exit_code,
                    "message": verdict.message}
        if expect is not None and expect != rec["before"]:
            return {**rec, "outcome": "refused", "exit": 2,
                    "message": f"CT {ct}: {p.path} changed since its diff was shown (digest {expect[:12]}, now "
                               f"{rec['before'][:12]}); nothing changed, look at the new diff"}
        result = tx.run()
        backup = result.state.get("backup")
        return {**rec, "outcome": "applied", "exit": 0, "reached": result.reached, "verified": result.verified,
                "backup": backup,
                "message": applied_message(ct, result.reached, backup, result.state.get("not_verified"))}
    except LxcfixError as e:
        return {**rec, "outcome": outcome_of(e), "exit": int(e.exit_code), "message": str(e)}


def apply_all(target, cts: list[str] | None, *, dry_run: bool = False, restart: bool = True, live: bool = False,
              style: str = "auto", asks=frozenset(), expect: dict | None = None) -> list[dict]:
    """Every container (of `cts`, or all) whose plan is not empty, one after another. A container
    lxcfix cannot edit (an unreadable line: LXF130) is refused and the rest go on; after one
    rolls back, the others are skipped (whatever made its verify fail may be the host's).
    expect: {ct: digest} of the check run the admin confirmed: only those, each refused if
    its config changed since."""
    from . import causes, repair

    rep = repair.scan(target, cts, style, probe=False)
    out: list[dict] = []
    stop = None
    for c in sorted(rep.containers, key=lambda c: causes.ct_order(c.ct)):
        if c.plan is None:
            if cts is not None or c.error:
                out.append({"ct": c.ct, "outcome": "refused", "exit": 2, "message": f"CT {c.ct}: {c.error}"})
            continue
        if c.plan.is_empty:
            continue  # nothing for it: not listed
        if stop is not None:
            out.append({"ct": c.ct, "outcome": "skipped", "exit": 0,
                        "message": f"CT {c.ct}: not tried: CT {stop} of this host rolled back"})
            continue
        if expect is not None and c.ct not in expect:
            out.append({"ct": c.ct, "outcome": "skipped", "exit": 0,
                        "message": f"CT {c.ct}: not applied: its fix was not in the check run that was confirmed"})
            continue
        rec = apply_one(target, c.ct, dry_run=dry_run, restart=restart, live=live, style=style, asks=asks,
                        expect=None if expect is None else expect[c.ct])
        out.append(rec)
        if rec["outcome"] in ("rolled-back", "rollback-failed"):
            stop = c.ct
    return out


def rollback_one(target, ct: str, to: str | None, restart: bool) -> dict:
    from . import repair

    try:
        result = repair.rollback(target, ct, to, restart=restart)
    except LxcfixError as e:
        return {"ct": ct, "outcome": outcome_of(e), "exit": int(e.exit_code), "message": str(e)}
    return {"ct": ct, "outcome": "restored", "exit": 0, "message": result.message,
            "backup": result.backup_path, "reached": result.step_reached}


def host_fix(target, *, dry_run: bool = False, enable: bool = True, now: bool = False,
             modprobe: str | None = None, gpus: list[int] | None = None, expect: str | None = None) -> dict:
    """`lxcfix host-fix` on this host (LXF112's unit): the record of its one change (ct "host")."""
    from . import hostfix
    from .gather import host_facts

    rec: dict = {"ct": "host"}
    try:
        plan = hostfix.plan_host_unit(host_facts(target.transport, target.backend), hostfix.read_existing(target),
                                      modprobe=modprobe or hostfix.MODPROBE, gpu_minors=gpus or None)
        rec.update(path=plan.path, before=plan.digest, style=plan.style, style_reason=plan.style_reason,
                   diff=plan.diff(), notes=list(plan.notes))
        tx = hostfix.host_unit_transaction(target, plan, enable=enable, now=now)
        rec["steps"] = tx.describe_steps() + [HOST_FIX_ON_FAILURE]
        if dry_run:
            verdict = tx.check()
            rec["verdict"] = verdict.to_json()
            if not verdict.ok:
                return {**rec, "outcome": checked_outcome(verdict.error), "exit": verdict.exit_code,
                        "message": verdict.message}
            if plan.is_empty:
                return {**rec, "outcome": "nothing-to-do", "exit": 0, "message": f"{plan.path} is up to date"}
            return {**rec, "outcome": "would-apply", "exit": 1, "message": f"host-fix would install {plan.path}"}
        if expect is not None and expect != plan.digest:
            return {**rec, "outcome": "refused", "exit": 2,
                    "message": f"{plan.path} changed since its diff was shown; nothing changed, look at the new diff"}
        r = hostfix.apply_host_unit(target, plan, enable=enable, now=now)
        outcome = "nothing-to-do" if r.step_reached == "nothing-to-do" else "applied"
        return {**rec, "outcome": outcome, "exit": 0, "reached": r.step_reached, "backup": r.backup_path,
                "message": f"{hostfix.UNIT_NAME}: {r.step_reached}" + (f"; backup {r.backup_path}" if r.backup_path
                                                                        else "") + (f" ({r.message})" if r.message
                                                                                    else "")}
    except LxcfixError as e:
        return {**rec, "outcome": outcome_of(e), "exit": int(e.exit_code), "message": str(e)}


def serve(req: dict) -> dict:
    """One request (see the module's doc), answered; never raises for a bad one."""
    doc: dict = {"agent": AGENT_VERSION, "host": socket.gethostname(), "results": [], "error": None}
    try:
        if not isinstance(req, dict) or req.get("op") not in OPS:
            raise BadInput(f"agent request: op must be one of {', '.join(OPS)}")
        op = req["op"]
        target = _target(req)
        opts = dict(style=_str(req, "style", "auto") or "auto", asks=_asks(req))
        if op == "apply-all":
            cts = req.get("cts")
            if cts is not None and not (isinstance(cts, list) and all(isinstance(c, str) for c in cts)):
                raise BadInput("agent request: cts must be a list of container ids")
            expect = req.get("expect")
            if expect is not None and not (isinstance(expect, dict) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in expect.items())):
                raise BadInput("agent request: expect must map container ids to digests")
            doc["results"] = apply_all(target, cts, dry_run=_bool(req, "dry_run"),
                                       restart=_bool(req, "restart", True), live=_bool(req, "live"),
                                       expect=expect, **opts)
            return doc
        if op == "host-fix":
            gpus = req.get("gpus")
            if gpus is not None and not (isinstance(gpus, list) and all(
                    isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 256 for g in gpus)):
                raise BadInput("agent request: gpus must be a list of GPU minors")
            doc["results"] = [host_fix(target, dry_run=_bool(req, "dry_run"), enable=_bool(req, "enable", True),
                                       now=_bool(req, "now"), modprobe=_str(req, "modprobe"), gpus=gpus,
                                       expect=_str(req, "expect"))]
            return doc
        ct = _str(req, "ct")
        if not ct:
            raise BadInput("agent request: no ct")
        if op == "rollback":
            doc["results"] = [rollback_one(target, ct, _str(req, "to"), _bool(req, "restart", True))]
        else:
            doc["results"] = [apply_one(target, ct, dry_run=_bool(req, "dry_run"), restart=_bool(req, "restart", True),
                                        live=_bool(req, "live"), expect=_str(req, "expect"),
                                        plan_only=op == "plan", **opts)]
    except LxcfixError as e:
        doc["error"] = {"class": type(e).__name__, "message": str(e), "exit": int(e.exit_code)}
    except Exception as e:  # a bug: the control says so in one line; the transaction has rolled back
        doc["error"] = {"class": type(e).__name__, "message": f"internal error (a bug): {type(e).__name__}: {e}",
                        "exit": 3}
    return doc


def reply(doc: dict, nonce: str) -> bytes:
    """The framed reply: `LXFA<nonce>\\n` and the document, zlib-compressed and base64-encoded."""
    body = base64.b64encode(zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6))
    return b"LXFA" + nonce.encode() + b"\n" + body + b"\n"


def main(req: dict) -> None:
    """The shipped script's entry (ship.LOADER): serve, then write the reply once."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the client's end going away must not stop a transaction
    real_out = sys.stdout.buffer
    sys.stdout = sys.stderr = io.StringIO()  # nothing printed half-way (see the doc)
    nonce = str(req.get("nonce", "")) if isinstance(req, dict) else ""
    data = reply(serve(req), nonce)
    try:
        real_out.write(data)
        real_out.flush()
    except OSError:  # nobody reads it any more: the journal on this host says what happened
        pass
    os._exit(0)
