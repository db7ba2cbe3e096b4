"""Is every device the container is given allowed, and on the right major?

LXF100 missing allow rule, LXF101 stale major, LXF110 allowed but not passed
in, LXF112 node missing on the host. `analyze()` is shared with plan.py, so
what is reported and what is fixed can never drift apart.

    needs = analyze(ctx)
    needs.stale[0] == Stale(rule=OwnRule(index=14, value="c 508:* rwm", ...), major=511,
                            given=(Given("/dev/nvidia-uvm", ...), Given("/dev/nvidia-uvm-tools", ...)))
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import devices
from ..effective import Given, OwnRule
from ..model import DeviceNode


# LXC's own common.conf allows fuse without passing it in (Proxmox adds the mount
# for `features: fuse=1`): a fuse rule without a mount is LXC's default, not a mistake.
MKNOD_USUAL = frozenset({"fuse"})


@dataclass(frozen=True)
class Stale:
    rule: OwnRule
    major: int  # the major the device has now
    given: tuple[Given, ...]


@dataclass(frozen=True)
class Unpassed:
    rule: OwnRule
    profile: devices.Profile
    nodes: tuple[DeviceNode, ...]  # host nodes the rule is for


@dataclass(frozen=True)
class Needs:
    denied: tuple[Given, ...]  # given, present on the host, not allowed, no stale rule to move
    stale: tuple[Stale, ...]
    unpassed: tuple[Unpassed, ...]
    absent: tuple[Given, ...]  # given, but missing on the host


def _enforced(ctx) -> bool:
    """cgroup2 device rules are ignored on hybrid/v1 hosts (LXF300 says so)."""
    return ctx.facts.cgroup_layout not in ("hybrid", "v1")


def analyze(ctx) -> Needs:
    eff = ctx.effective
    facts = ctx.facts
    absent = tuple(g for g in eff.given if g.node is None)
    denied = [
        g for g in eff.given
        if g.node is not None and _enforced(ctx)
        and not eff.ruleset.allows(g.node.kind, g.node.major, g.node.minor, "rw")
    ]

    # A numeric allow rule whose major no driver holds any more, paired with a
    # denied device of the same kind: the device's major moved.
    known = {m for ms in facts.char_majors.values() for m in ms}
    candidates = [
        r for r in eff.own_rules
        if r.key == "lxc.cgroup2.devices.allow" and r.rule is not None and r.rule.path is None
        and r.rule.major is not None and known and r.rule.major not in known
    ]
    stale: list[Stale] = []
    for r in candidates:
        fits = [g for g in denied if g.node.kind == r.rule.kind and r.rule.minor in (None, g.node.minor)]
        if not fits:
            continue
        moved = tuple(g for g in fits if g.node.major == fits[0].node.major)
        stale.append(Stale(r, moved[0].node.major, moved))
        denied = [g for g in denied if g not in moved]

    given_majors = {(g.node.kind, g.node.major, g.node.minor) for g in eff.given if g.node is not None}
    unpassed: list[Unpassed] = []
    for r in eff.own_rules:
        if r.key != "lxc.cgroup2.devices.allow" or r.rule is None or r.rule.major is None:
            continue
        if r.rule.kind != "c" or r.rule.path is not None or "r" not in r.rule.access:
            continue
        profile = devices.profile_for_major(r.rule.major, facts, r.rule.minor)
        if profile is None or profile.name in MKNOD_USUAL:
            continue
        if any(k == "c" and M == r.rule.major and (r.rule.minor in (None, m)) for k, M, m in given_majors):
            continue
        nodes = tuple(n for n in devices.nodes_of(profile, facts)
                      if n.major == r.rule.major and r.rule.minor in (None, n.minor))
        unpassed.append(Unpassed(r, profile, nodes))
    return Needs(tuple(denied), tuple(stale), tuple(unpassed), absent)


def _dev(node: DeviceNode) -> str:
    return f"{node.kind} {node.major}:{node.minor}"


def _names(ctx, major: int) -> str:
    names = ctx.facts.char_names(major)
    return names[0] if names else f"major {major}"


def check(ctx) -> list:
    needs = ctx.needs
    eff = ctx.effective
    out = []
    allowed = eff.ruleset.describe("c")
    for g in needs.denied:
        node = g.node
        via = f"devN entry {eff.devn[0].key}" if g.via == "devn" and eff.devn else "a bind mount"
        out.append(ctx.finding(
            "LXF100", "error",
            f"{g.path} is {_dev(node)} on this host; no cgroup2 rule allows it, so open() inside gives EPERM",
            device=g.path,
            evidence=(f"passed in by {via} ({ctx.config.path}:{g.index + 1})",
                      f"device rules allow: {allowed}",
                      f"/proc/devices: {node.major} {_names(ctx, node.major)}"),
            fix="add an allow rule for it: lxcfix plan --ct " + ctx.ct,
        ))
    for s in needs.stale:  # analyze() pairs every stale rule with at least one device
        first, rule = s.given[0], s.rule.rule
        name = _names(ctx, s.major)
        minor = "*" if rule.minor is None else rule.minor
        out.append(ctx.finding(
            "LXF101", "error",
            f"{first.path} is {_dev(first.node)} on this host; the config allows "
            f"{rule.kind} {rule.major}:{minor} (stale: the {name} major moved)",
            device=first.path,
            evidence=(f"{ctx.config.path}:{s.rule.index + 1}: {s.rule.key}: {s.rule.value}",
                      f"/proc/devices: {s.major} {name}; no driver holds major {rule.major}",
                      "affects " + ", ".join(g.path for g in s.given)),
            fix=f"move the rule to major {s.major} (lxcfix plan --ct {ctx.ct}); "
                "devN entries or path-form rules survive the next move",
        ))
    for u in needs.unpassed:
        paths = ", ".join(n.path for n in u.nodes) or f"{u.profile.name} nodes"
        out.append(ctx.finding(
            "LXF110", "error",
            f"{u.rule.value} allows {u.profile.name} but no {u.profile.name} node is passed in: {paths} absent inside",
            device=u.nodes[0].path if u.nodes else None,
            evidence=(f"{ctx.config.path}:{u.rule.index + 1}: {u.rule.key}: {u.rule.value}",
                      "no lxc.mount.entry or devN entry for it"),
            fix=f"pass the node in with a mount entry or devN entry (lxcfix plan --ct {ctx.ct})",
        ))
    for g in needs.absent:
        hint = ("run `nvidia-modprobe -u -c=0` on the host, and make it run at boot before guests start"
                if g.profile == "nvidia-uvm" else "load its driver or fix the path")
        start = ("the container will not start" if g.via == "devn" or not g.optional
                 else "the container starts without it")
        out.append(ctx.finding(
            "LXF112", "error", f"{g.path} does not exist on the host: {start}",
            device=g.path,
            evidence=(f"{ctx.config.path}:{g.index + 1} passes it in",),
            fix=hint,
        ))
    return out


