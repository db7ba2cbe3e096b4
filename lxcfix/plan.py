"""The minimal edit that repairs a container's config. Pure.

    plan = make_plan(ctx, "auto")
    plan.style, plan.style_reason == ("devn", "Proxmox VE 8.3.0 supports devN entries (8.1+): ...")
    print(plan.diff())        # unified diff; "" when there is nothing to do
    plan.after                # the whole new file, always computed

Every finding carries its fix as data (model.Fix). The plan applies the fixes
the rules mark as the plan's to make (applicability safe or needs-restart),
the lowest phase first (cgroup v1 keys become v2 keys before anything else is
added), checks the container again, and goes on until a check finds nothing
left to apply: the stability test black and ruff make, so applying the plan
and planning again gives nothing. Two fixes that edit one line differently
never make a plan fail: the later one is left out of that round (ctconfig.
apply_groups) and, computed again on the new config, made in the next; one
whose own edits overlap stays a finding. What the fixes do: stale majors are moved in
place, missing allow rules (and mount entries for allowed-but-not-passed
devices) are added next to lines of their kind; in the devn style a broken
bind mount becomes a devN entry. Asked for explicitly, `devn` and `path` also
migrate working numeric pairs. Over-broad rules and missing `optional` are
reported with a fix the admin applies, never rewritten: removing access a
container has is the admin's call.
"""

from __future__ import annotations

from . import ctconfig
from .model import Finding, Fix, HostFile, HostFacts, Plan
from .rules import Context, access, allowlist, hygiene, rootfs, run_rules

ALLOW = "lxc.cgroup2.devices.allow"
MAX_ROUNDS = 8  # phase 0, phase 1, and room for fixes that uncover another or wait for an overlapping one
# The rule families whose fixes the plan applies: the only ones a re-check needs
# (what the probe saw, the lock, the live program: none of them the plan's to fix).
FIXING = (allowlist, hygiene, access, rootfs)  # rootfs: the features: line (LXF234)


class PlanUnstable(RuntimeError):
    """Planning the planned config still finds fixes to apply: a bug in a rule."""


def applicable(ctx: Context, findings: list[Finding]) -> list[Fix]:
    """The fixes the plan makes for these findings (each once), and the --style
    devn migration when it was asked for."""
    found = [f.fix for f in findings if f.fix is not None and f.fix.applies]
    migration = ctx.repairs.migration if ctx.requested == "devn" else None
    if migration is not None:
        found.append(migration)
    return list(dict.fromkeys(found))


def make_plan_in(ctx: Context, requested: str = "auto") -> tuple[Plan, Context]:
    """The plan and the container as it will be once the plan is applied (what
    apply's verify compares the running container with)."""
    ctx = ctx.with_style(requested)
    style, reason = ctx.style
    findings = run_rules(ctx)
    original = ctx.config
    applied: list[Fix] = []
    stuck: set[Fix] = set()  # fixes whose own edits overlap: never made, they stay findings
    now, now_found = ctx, findings
    for _ in range(MAX_ROUNDS):
        todo = [f for f in applicable(now, now_found) if f not in stuck]
        if not todo:
            break
        phase = min(f.phase for f in todo)
        batch = [f for f in todo if f.phase == phase]
        made = ctconfig.apply_groups(now.config, [f.edits for f in batch])
        # A fix that overlaps one made before it waits: the re-check computes it again on the
        # new config, and the next round makes it (ruff's fix loop). One that overlaps itself
        # can never be made: it stays a finding, shown with its fix.
        stuck.update(batch[i] for i in made.skipped if ctconfig.apply_groups(now.config, [batch[i].edits]).skipped)
        if not made.applied:
            continue
        now = now.with_config(made.config)
        applied += [batch[i] for i in made.applied]
        now_found = run_rules(now, FIXING)
    else:
        raise PlanUnstable(f"CT {ctx.ct}: planning the planned config still changes it "
                           f"({len(applicable(now, now_found))} fixes left after {MAX_ROUNDS} rounds)")
    plan = Plan(ct=ctx.ct, path=original.path, digest=original.digest, before=original.raw,
                after=now.config.raw, findings=tuple(findings), style=style, style_reason=reason,
                lock=ctx.effective.lock, host_files=host_files(ctx.facts, applied))
    return plan, now


def host_files(facts: HostFacts, applied: list[Fix]) -> tuple[HostFile, ...]:
    """The host files the applied fixes add lines to (Fix.host_lines), each line once, after
    what the file holds now (its text read with the host facts: facts.raw[path])."""
    wanted: dict[str, list[str]] = {}
    for fix in applied:
        for path, line in fix.host_lines:
            wanted.setdefault(path, [])
            if line not in wanted[path]:
                wanted[path].append(line)
    out = []
    for path, lines in wanted.items():
        text = facts.raw.get(path)
        before = text.encode("utf-8", "surrogateescape") if text is not None else None
        have = (text or "").split("\n")
        add = [line for line in lines if line not in have]
        if not add:
            continue
        body = before or b""
        if body and not body.endswith(b"\n"):
            body += b"\n"
        out.append(HostFile(path, before, body + "".join(f"{line}\n" for line in add).encode()))
    return tuple(out)


def make_plan(ctx: Context, requested: str = "auto") -> Plan:
    return make_plan_in(ctx, requested)[0]


def unplanned(plan: Plan) -> tuple[str, ...]:
    """Why the plan leaves a problem it found: one line per reason, for `plan` and `apply`
    to say beside an empty diff (a scan that says "error" and a plan that says nothing
    would be a dead end).

        unplanned(plan) -> ("not planned: host runs a hybrid cgroup layout: LXC ignores every "
                            "lxc.cgroup2.devices line here, ... [LXF300]",
                            "not planned: LXF200 (the fix is the admin's: `lxcfix diagnose` shows it)")
    """
    left = [f for f in plan.findings if f.severity != "info" and not (f.fix is not None and f.fix.applies)]
    out = [f"not planned: {f.message} [{f.code}]" for f in plan.findings if f.code == "LXF300"][:1]
    others = list(dict.fromkeys(f.code for f in left if f.code != "LXF300"))
    if others:
        out.append(f"not planned: {', '.join(others)} (the fix is the admin's to make: `lxcfix diagnose` shows it)")
    return tuple(out)
