"""Is every device the container is given allowed, and on the right major?

LXF100 missing allow rule, LXF101 stale major, LXF110 allowed but not passed
in, LXF112 node missing on the host, LXF116 a GPU given on a MIG host without
/dev/nvidia-caps (a manual fix). `analyze()` finds what is broken and
`repairs()` builds each one's fix (in the container's fix style), so what is
reported and what is fixed can never drift apart.

    needs = analyze(ctx)
    needs.stale[0] == Stale(rule=OwnRule(index=14, value="c 508:* rwm", ...), major=511,
                            given=(Given("/dev/nvidia-uvm", ...), Given("/dev/nvidia-uvm-tools", ...)))
    repairs(ctx).stale[14] == Fix("move the rule to major 511 ...",
                                  edits=(Edit("replace", 14, (("lxc.cgroup2.devices.allow", "/dev/nvidia-uvm rwm"), ...)),),
                                  applicability="safe")
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from .. import devices, fixes
from ..ctconfig import next_devn
from ..effective import Given, OwnRule
from ..bounded import excerpt
from ..model import DeviceNode, DeviceRule, Edit, Fix
from ..probe import CAPS_DIR, NO_MIG, is_caps_node, mig_in_use


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


CAP1 = CAPS_DIR + "nvidia-cap1"  # MIG's configuration capability: create and destroy instances
# Why a denied node needs no allow rule (NO_MIG, or this; the probe's findings say it of what it saw).
CAP1_UNNAMED = ("it is MIG's configuration capability (create and destroy instances): lxcfix allows it only "
                "to a container whose config names it")


def needs_no_rule(ctx, g: Given) -> str | None:
    """Why the cgroup may keep denying this given node, or None when it needs its rule: an
    nvidia-caps node on a host whose GPUs have no MIG instances (measured on an H200: CUDA and
    nvidia-smi work with nvidia-caps denied), or nvidia-cap1 that came in with the directory
    (never granted unless the admin names it). Privileged or not: the same answer."""
    if not is_caps_node(g.path):
        return None
    if not mig_in_use(ctx.probe, ctx.facts.nodes):
        return NO_MIG
    if g.path == CAP1 and g.from_dir is not None:
        return CAP1_UNNAMED
    return None


def analyze(ctx) -> Needs:
    eff = ctx.effective
    facts = ctx.facts
    absent = tuple(g for g in eff.given if g.node is None)
    denied = [
        g for g in eff.given
        if g.node is not None and _enforced(ctx)
        and not eff.ruleset.allows(g.node.kind, g.node.major, g.node.minor, "rw")
        and needs_no_rule(ctx, g) is None
    ]

    # A numeric allow rule whose major no driver holds any more, paired with a
    # denied device of the same kind: the device's major moved.
    known = facts.known_majors
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


@dataclass(frozen=True)
class Repairs:
    """The fix of everything analyze() found broken. devN entries are numbered
    across all of them, in one order (stale, denied, --style devn migration,
    not passed in), so fixes shown one by one agree with the plan."""

    stale: Mapping[int, Fix] = field(default_factory=dict)  # rule line index -> fix
    denied: Mapping[str, Fix] = field(default_factory=dict)  # given host path -> fix
    unpassed: Mapping[int, Fix] = field(default_factory=dict)  # rule line index -> fix
    migration: Fix | None = None  # --style devn asked for: working bind mounts become devN entries

    def for_device(self, path: str, stale: tuple = ()) -> Fix | None:
        """The fix that repairs the host node at `path` (a denied one, or one a stale rule is for)."""
        if path in self.denied:
            return self.denied[path]
        for s in stale:
            if any(g.path == path for g in s.given):
                return self.stale.get(s.rule.index)
        return None


NOTHING = Repairs()


def repairs(ctx) -> Repairs:
    needs, facts = ctx.needs, ctx.facts
    if not (needs.stale or needs.denied or needs.unpassed or ctx.requested == "devn"):
        return NOTHING  # most containers of a fleet
    style, _ = ctx.style
    numbers: list[int] = []
    assigned: dict[str, int] = {}

    def devn(node: DeviceNode) -> Edit:
        if node.path not in assigned:
            if not numbers:
                numbers.append(next_devn(ctx.config))
            assigned[node.path] = numbers[0] + len(assigned)
        return fixes.devn_edit(node, assigned[node.path])

    def via_devn(g: Given) -> bool:
        return style == "devn" and g.via == "mount" and g.from_dir is None

    plan = fixes.plan_command(ctx.ct)
    stale: dict[int, Fix] = {}
    for s in needs.stale:
        r = s.rule.rule
        # In the devn style a node in a directory mount keeps needing the rule.
        still_needed = any(not via_devn(g) for g in s.given)
        if style == "numeric" or (style == "devn" and still_needed):
            lines = [(s.rule.key, str(DeviceRule(r.kind, s.major, r.minor, r.access)))]
        elif style == "path":
            lines = [(s.rule.key, f"{g.path} {r.access}") for g in s.given]
        else:  # devn: devN entries replace the rule and the nodes' mounts
            lines = []
        edits = [fixes.replace_edit(s.rule.index, lines)]
        for g in s.given:
            if via_devn(g):
                edits += [fixes.remove_edit(g.index), devn(g.node)]
        stale[s.rule.index] = Fix(
            f"move the rule to major {s.major} ({plan}); devN entries or path-form rules survive the next move",
            tuple(edits), "needs-restart" if len(edits) > 1 else "safe")

    denied: dict[str, Fix] = {}
    for g in needs.denied:
        title = "add an allow rule for it: " + plan
        if via_devn(g):
            denied[g.path] = Fix(title, (fixes.remove_edit(g.index), devn(g.node)), "needs-restart")
        elif g.via == "mount":
            denied[g.path] = Fix(title, (fixes.allow_edit([g.node], facts, style),), "safe")
        else:
            denied[g.path] = Fix(title)

    migration = _migrate_to_devn(ctx, needs, [*stale.values(), *denied.values()], devn) \
        if ctx.requested == "devn" else None

    unpassed: dict[int, Fix] = {}
    for u in needs.unpassed:
        title = f"pass the node in with a mount entry or devN entry ({plan})"
        if not u.nodes:  # nothing to pass in: no plan can help, and none is named
            unpassed[u.rule.index] = Fix(f"no {u.profile.name} node exists on this host to pass in: load its "
                                         "driver, or drop the rule if the container does not need it")
        elif style == "devn":
            unpassed[u.rule.index] = Fix(title, tuple(devn(n) for n in u.nodes), "needs-restart")
        else:
            unpassed[u.rule.index] = Fix(title, tuple(fixes.mount_edit([n]) for n in u.nodes), "safe")
    return Repairs(stale, denied, unpassed, migration)


def _migrate_to_devn(ctx, needs: Needs, done: list[Fix], devn) -> Fix | None:
    """--style devn asked for: every node passed in by its own bind mount and
    allowed by a numeric rule becomes a devN entry; rules left serving nothing
    go. `done`: the fixes of what is broken, whose lines this leaves alone."""
    broken = {(g.path, g.index) for g in needs.denied} | {(g.path, g.index) for s in needs.stale for g in s.given}
    given = [g for g in ctx.effective.given if g.node is not None]
    touched = {e.index for f in done for e in f.edits if e.index is not None}
    drop = {e.index for f in done for e in f.edits if e.op == "remove"}
    edits: list[Edit] = []
    for g in given:
        if g.via == "mount" and g.from_dir is None and (g.path, g.index) not in broken:
            edits += [fixes.remove_edit(g.index), devn(g.node)]
            drop.add(g.index)
    remaining = [g for g in given if not (g.via == "mount" and g.index in drop)]
    for r in ctx.effective.own_rules:
        if r.key != fixes.ALLOW or r.rule is None or r.rule.path is not None or r.rule.major is None:
            continue
        if r.index in touched:
            continue
        if any(_serves(r.rule, g.node) for g in given) and not any(_serves(r.rule, g.node) for g in remaining):
            edits.append(fixes.remove_edit(r.index))
            # Its cgroup v1 twin (dual-stack configs) goes with it.
            for twin in ctx.effective.own_rules:
                if twin.v1 and twin.key.endswith("allow") and twin.value.strip() == r.value.strip():
                    edits.append(fixes.remove_edit(twin.index))
    if not edits:
        return None
    return Fix("--style devn: bind mounts with numeric rules become devN entries, which survive major changes",
               tuple(edits), "needs-restart")


def _serves(rule: DeviceRule, node: DeviceNode) -> bool:
    return rule.major is not None and rule.covers(node.kind, node.major, node.minor)


def _inside(ctx, g: Given) -> str:
    """What open() inside gives a denied node: the errno the probe saw, when it saw the node
    (EACCES is decided before the cgroup is asked: an unprivileged container's unmapped node)."""
    seen = ctx.probe.nodes.get("/" + g.target.lstrip("/")) if ctx.probe is not None else None
    if seen is None or not seen.exists or seen.open == "EPERM":
        return "so open() inside gives EPERM"
    if seen.open == "EACCES":
        return ("and open() inside gives EACCES first (the probe saw it: the node's mode and owner refuse "
                "before the cgroup is asked)")
    return f"yet open() inside gave {excerpt(seen.open)} (the probe saw it: something outside the config allows it)"


def _rule(rule: DeviceRule) -> str:
    """'c 195:*': a rule as LXC reads it, without its access."""
    return f"{rule.kind} {rule.major}:{'*' if rule.minor is None else rule.minor}"


def _dev(node: DeviceNode) -> str:
    return f"{node.kind} {node.major}:{node.minor}"


def _names(ctx, major: int) -> str:
    names = ctx.facts.char_names(major)
    return names[0] if names else f"major {major}"


def check(ctx) -> list:
    needs = ctx.needs
    eff = ctx.effective
    fixed = ctx.repairs
    out = []
    allowed = eff.ruleset.describe("c") if needs.denied else ""
    for g in needs.denied:
        node = g.node
        via = f"devN entry {eff.devn[0].key}" if g.via == "devn" and eff.devn else "a bind mount"
        out.append(ctx.finding(
            "LXF100", f"{g.path} is {_dev(node)} on this host; no cgroup2 rule allows it, " + _inside(ctx, g),
            device=g.path,
            evidence=(f"passed in by {via} ({ctx.config.path}:{g.index + 1})",
                      f"device rules allow: {allowed}",
                      f"/proc/devices: {node.major} {_names(ctx, node.major)}"),
            fix=fixed.denied[g.path], line=g.index + 1, numbers=(node.kind, node.major, node.minor),
        ))
    for s in needs.stale:  # analyze() pairs every stale rule with at least one device
        first, rule = s.given[0], s.rule.rule
        name = _names(ctx, s.major)
        minor = "*" if rule.minor is None else rule.minor
        out.append(ctx.finding(
            "LXF101",
            f"{first.path} is {_dev(first.node)} on this host; the config allows "
            f"{rule.kind} {rule.major}:{minor} (stale: the {name} major moved)",
            device=first.path,
            evidence=(f"{ctx.config.path}:{s.rule.index + 1}: {s.rule.key}: {s.rule.value}",
                      f"/proc/devices: {s.major} {name}; no driver holds major {rule.major}",
                      "affects " + ", ".join(g.path for g in s.given)),
            fix=fixed.stale[s.rule.index], line=s.rule.index + 1,
            numbers=(first.node.kind, first.node.major, first.node.minor), rule=f"{rule.kind} {rule.major}:{minor}",
        ))
    for u in needs.unpassed:
        paths = ", ".join(n.path for n in u.nodes) or f"{u.profile.name} nodes"
        out.append(ctx.finding(
            "LXF110",
            f"{u.rule.value} allows {u.profile.name} but no {u.profile.name} node is passed in: {paths} absent inside",
            device=u.nodes[0].path if u.nodes else None,
            evidence=(f"{ctx.config.path}:{u.rule.index + 1}: {u.rule.key}: {u.rule.value}",
                      "no lxc.mount.entry or devN entry for it"),
            fix=fixed.unpassed[u.rule.index], line=u.rule.index + 1, rule=_rule(u.rule.rule),
        ))
    out += _mig_caps(ctx, needs)
    for g in needs.absent:
        what = ctx.facts.not_nodes.get(g.path)
        if what is not None:
            out.append(ctx.finding(
                "LXF159",
                f"{g.path} on the host is a {what}, not a device node"
                + (": the container will not start ('is not a device')" if g.via == "devn" else
                   ": the container gets that, and opening it is not the device"),
                device=g.path,
                evidence=(f"{ctx.config.path}:{g.index + 1} passes it in", f"on the host: {g.path} is a {what}"),
                fix=not_a_node_fix(g.path, what, g.profile), line=g.index + 1,
            ))
            continue
        start = ("the container will not start" if g.via == "devn" or not g.optional
                 else "the container starts without it")
        out.append(ctx.finding(
            "LXF112", f"{g.path} does not exist on the host: {start}",
            device=g.path,
            evidence=(f"{ctx.config.path}:{g.index + 1} passes it in",),
            fix=create_node_fix(g.path, g.profile), line=g.index + 1,
        ))
    return out


def not_a_node_fix(path: str, what: str, profile: str | None) -> Fix:
    """LXF159: what is at the path is the admin's to remove (lxcfix never deletes on the host);
    the driver then makes the node."""
    tool = "rmdir" if what == "directory" else "rm"
    hint = create_node_fix(path, profile).title
    # The command is its own line (Fix.commands), never quoted in the sentence: a name may hold a backtick.
    return Fix(f"remove the {what} at {path} ({tool} it, after checking nothing else uses it), then {hint}",
               commands=(fixes.command(tool, path),))


def create_node_fix(path: str, profile: str | None) -> Fix:
    """LXF112: a node missing on the host is made by its driver, not by a config edit."""
    known = devices.PROFILES.get(profile or "")
    hint = (known.missing_hint if known is not None else None) or "load its driver or fix the path"
    argv = fixes.modprobe_argv(path)
    if argv is None:
        return Fix(hint)
    return Fix(hint, commands=(fixes.command(*argv), f"{fixes.HOST_FIX}    # installs {fixes.UNIT}: creates the "
                                                    "nodes at every boot, before guests start"))




_GPU_NODE = re.compile(r"/dev/nvidia[0-9]{1,6}")


def _mig_caps(ctx, needs) -> list:
    """LXF116: the host's GPUs have MIG instances and the container is given a GPU node but no
    /dev/nvidia-caps. A caps node mounted but denied is LXF100, an allow rule for the caps major
    without the mount LXF110: said there, not twice."""
    eff = ctx.effective
    gpus = [g for g in eff.given if g.node is not None and _GPU_NODE.fullmatch(g.path)]
    if not gpus or any(is_caps_node(g.path) for g in eff.given) \
            or any(u.profile.name == "nvidia-caps" for u in needs.unpassed):
        return []
    if not mig_in_use(ctx.probe, ctx.facts.nodes):
        return []
    caps = sorted((n for p, n in ctx.facts.nodes.items() if is_caps_node(p) and n.kind == "c"), key=lambda n: n.path)
    style, _ = ctx.style
    edits = [fixes.mount_dir_edit(CAPS_DIR.rstrip("/"), style)]
    denied = [n for n in caps if _enforced(ctx) and n.path != CAP1
              and not eff.ruleset.allows(n.kind, n.major, n.minor, "rw")]
    if denied:
        edits.append(fixes.allow_edit(denied, ctx.facts, style))
    instances = [n.path for n in caps if n.path.rsplit("nvidia-cap", 1)[-1] not in ("1", "2")]
    lines = [f"{k}: {v}" if ctx.config.flavor == "pve" else f"{k} = {v}" for e in edits for k, v in e.lines]
    return [ctx.finding(
        "LXF116", f"the host's GPUs have MIG instances and {gpus[0].path} is passed in, but /dev/nvidia-caps is "
        "not: inside, CUDA finds no MIG device", device=CAPS_DIR.rstrip("/"),
        evidence=(f"passed in: {', '.join(g.path for g in gpus[:4])} ({ctx.config.path}:{gpus[0].index + 1})",
                  "MIG instances on the host: " + (", ".join(instances[:6]) or "listed by nvidia-smi -L inside"),
                  "no lxc.mount.entry or devN entry under /dev/nvidia-caps"),
        fix=Fix(f"pass /dev/nvidia-caps in: {' ; '.join(lines)} (then restart the container)", tuple(edits),
                "manual", notes=(
                    "the whole directory also passes nvidia-cap1 (MIG configuration) and nvidia-cap2 (monitoring): "
                    "the rules above leave nvidia-cap1 denied (allow it by name only for a container that manages "
                    "MIG); for a container that should only use its instances, bind just their nvidia-capN nodes "
                    "(/proc/driver/nvidia/capabilities/gpuN/mig/giM/access names the minor)",)))]
