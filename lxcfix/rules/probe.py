"""What the in-container probe saw: LXF200-LXF203, LXF210-LXF212 (probe.classify), and
LXF206 when what came out of the container could not all be used (lines the probe does
not print, numbers out of range, output cut at its cap or without its end).

A probe finding about a device carries the same fix as the config finding
about it (rules.Context.repairs), so the plan applies it once; LXF201 gets the
group-access fix (rules.access), LXF212 the commands that install the
matching userspace driver.
"""

from __future__ import annotations

from dataclasses import replace

from .. import codes, fixes
from .. import probe as probe_mod
from ..devices import describe
from ..model import Finding, Fix
from .access import group_access_fix, root_refusal_expected
from .allowlist import needs_no_rule


def expected(ctx) -> dict[str, tuple[str, int, int]]:
    """Container path -> (kind, major, minor) the host says each given node is."""
    return {
        "/" + g.target.lstrip("/"): (g.node.kind, g.node.major, g.node.minor)
        for g in ctx.effective.given if g.node is not None
    }


def host_path(ctx, inside: str) -> str:
    """The host node behind a path inside the container."""
    for g in ctx.effective.given:
        if "/" + g.target.lstrip("/") == inside:
            return g.path
    return inside


# The probe's findings that the device's config repair fixes (codes' records: a live apply can).
_REPAIRED = codes.where(family="probe", live=True)


def with_fix_data(ctx, f: Finding) -> Finding:
    """The finding with its fix's edits or commands filled in."""
    title = f.fix.title if f.fix is not None else None
    if f.code == "LXF201" and f.device and f.severity != "info":
        n = ctx.access.at(f.device)  # the fix the group-access findings about it carry
        if n is not None:
            return replace(f, fix=n.fix._replace(title=title) if title else n.fix)
        group = fixes.group_for(f.device)
        gid = ctx.probe.groups.get(group) if ctx.probe is not None and group else None
        return replace(f, fix=group_access_fix(ctx, f.device, gid, **({"title": title} if title else {})))
    if f.code == "LXF212" and title and ctx.facts.nvidia_driver:
        commands = fixes.userspace_commands(ctx.ct, ctx.config.flavor, ctx.facts.nvidia_driver.strip())
        return replace(f, fix=Fix(title, commands=commands))
    if f.device and title and f.code in _REPAIRED:
        repair = ctx.repairs.for_device(host_path(ctx, f.device), ctx.needs.stale)
        if repair is not None and repair.edits:
            return replace(f, fix=Fix(title, repair.edits, repair.applicability, phase=repair.phase))
    return f


def on_legacy_cgroups(ctx, found: list[Finding]) -> list[Finding]:
    """On a hybrid or v1 host the v1 devices controller gave the EPERM: no cgroup2 rule, nothing
    `lxcfix plan` writes or a live apply changes, helps. A denial's fix (and the cuInit or NVML
    failure's, which carries it) says the v1 rule instead of a plan that plans nothing (LXF300)."""
    layout = ctx.facts.cgroup_layout
    if layout not in ("hybrid", "v1"):
        return found
    instead: dict[str, Fix] = {}
    for f in found:
        if f.code == "LXF200" and f.severity != "info" and f.fix is not None and f.numbers:
            sep = ": " if ctx.config.flavor == "pve" else " = "
            instead[f.fix.title] = Fix(
                f"this host's cgroup layout is {layout} (LXF300): LXC ignores lxc.cgroup2 lines, so allow it with "
                f"a v1 rule, `lxc.cgroup.devices.allow{sep}{fixes.exact_allow(*f.numbers)}`, or boot the host "
                "with cgroup v2")

    def v1(f: Finding) -> Finding:
        for title, fix in instead.items():  # a cuInit/NVML failure's fix is its culprit's, with "(LXF200 PATH)"
            if f.fix is not None and (f.fix.title == title or f.fix.title.startswith(title + " (")):
                return replace(f, fix=fix._replace(title=fix.title + f.fix.title[len(title):]),
                               live_fixable=False if f.live_fixable is not None else None)
        return f

    return [v1(f) for f in found]


def unusable(ctx) -> list:
    """LXF206: the probe's output, or part of it, could not be used. The container's own sh
    and python3 run the probe, so this is either a broken container or one whose tenant
    prints what it likes; what was usable still counts, the rest is the evidence."""
    problems = ctx.probe.unusable
    if not problems:
        return []
    return [ctx.finding(
        "LXF206",
        f"the probe's output from inside CT {ctx.ct} cannot all be used: the container's sh or python3 "
        "printed what lxcfix's probe does not print",
        evidence=tuple(problems) + ("the probe runs with the container's own sh and python3: a tenant "
                                    "who replaced them decides what it prints",),
        fix=Fix("look at the container's /bin/sh and python3; lxcfix's other findings about it come from its "
                "config and the host, which the tenant cannot change"),
    )]


def check(ctx) -> list:
    if ctx.probe is None:
        return []
    allowlist = None
    if ctx.live is not None:
        program = ctx.live.program
        allowlist = describe(r for r in program.rules if r.allow) if program is not None else "(no device program: all devices allowed)"
    majors = {name: ms[0] for name, ms in ctx.facts.char_majors.items() if ms}
    needless = {"/" + g.target.lstrip("/"): why for g in ctx.effective.given
                if g.node is not None and (why := needs_no_rule(ctx, g)) is not None}
    found = probe_mod.classify(ctx.ct, ctx.host, ctx.probe, expected(ctx), ctx.facts.nvidia_driver,
                               allowlist=allowlist, host_majors=majors,
                               mig=probe_mod.mig_in_use(ctx.probe, ctx.facts.nodes), needless=needless)
    # Root refused while the node's group gets in: what an idmap pass-through leaves (rules.access: LXF205).
    found = [f for f in found if not (f.code == "LXF201" and f.device and root_refusal_expected(ctx, f.device))]
    return [with_fix_data(ctx, f) for f in on_legacy_cgroups(ctx, found)] + unusable(ctx)
