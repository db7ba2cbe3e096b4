"""The minimal edit that repairs a container's config. Pure.

    plan = make_plan(ctx, "auto")
    plan.style, plan.style_reason == ("devn", "Proxmox VE 8.3.0 supports devN entries (8.1+): ...")
    print(plan.diff())        # unified diff; "" when there is nothing to do
    plan.after                # the whole new file, always computed

What it changes: stale majors are moved in place, missing allow rules (and
mount entries for allowed-but-not-passed devices) are added next to lines of
their kind, cgroup v1 device keys become v2 keys; in the devn style, a broken
bind mount becomes a devN entry. Asked for explicitly, `devn` and `path` also
migrate working numeric pairs. Nothing else is touched: over-broad rules and
missing `optional` are reported, not rewritten, since removing access a
container has is the admin's call.
"""

from __future__ import annotations

from . import ctconfig, devices, render
from .ctconfig import CtConfig
from .effective import MOUNT_KEY, V2_KEYS, Given, is_devn_key
from .errors import BadInput
from .facts import version_tuple
from .model import DeviceNode, Plan
from .rules import Context, run_rules
from .rules.hygiene import convertible, pinned_dynamic, v1_on_v2, v1_without_twin

STYLES = ("auto", "devn", "path", "numeric")
ALLOW = "lxc.cgroup2.devices.allow"


def choose_style(requested: str, ctx: Context) -> tuple[str, str]:
    """(style, why). auto: the most robust style this host supports."""
    if requested not in STYLES:
        raise BadInput(f"unknown --style {requested!r}: use one of {', '.join(STYLES)}")
    flavor = ctx.config.flavor
    facts = ctx.facts
    if requested == "devn" and flavor != "pve":
        raise BadInput("--style devn needs a Proxmox VE container (devN entries are a Proxmox feature)")
    if requested != "auto":
        return requested, f"--style {requested} was asked for"
    if flavor == "pve":
        if _pve_has_devn(facts.pve_version):
            return "devn", (f"Proxmox VE {facts.pve_version} supports devN entries (8.1+): Proxmox stat()s "
                            "the path at every start, so they survive major changes")
    if version_tuple(facts.lxc_version) >= (4,) or (flavor == "pve" and facts.pve_version):
        return "path", ("LXC resolves path-form rules at every start, so they survive major changes"
                        + (f" (LXC {facts.lxc_version})" if facts.lxc_version else ""))
    return "numeric", ("host version unknown: numeric rules from this host's /proc/devices "
                       "(re-run lxcfix after a reboot or driver upgrade; lxcfix audit warns)")


def _pve_has_devn(pve_version: str | None) -> bool:
    return version_tuple(pve_version) >= (8, 1)


def _groups(nodes: list[DeviceNode], facts) -> list[render.RuleGroup]:
    """One wildcard rule per major one driver owns whole; exact minors otherwise."""
    groups: dict[tuple, list[DeviceNode]] = {}
    for n in nodes:
        profile = devices.profile_for_major(n.major, facts, n.minor)
        whole = n.kind == "c" and profile is not None and profile.owns_major() and n.major not in devices.SHARED_MAJORS
        key = (n.kind, n.major, None if whole else n.minor)
        groups.setdefault(key, []).append(n)
    return [render.RuleGroup(k, M, m if m is not None else ns[0].minor, m is None, tuple(ns))
            for (k, M, m), ns in groups.items()]


def _profile(nodes, facts) -> str | None:
    names = {p.name for n in nodes if (p := devices.profile_for_major(n.major, facts, n.minor))}
    return names.pop() if len(names) == 1 else None


def _next_devn(cfg: CtConfig) -> int:
    used = [int(ln.key[3:]) for _, ln in cfg.main() if ln.key and is_devn_key(ln.key)]
    return max(used) + 1 if used else 0


def _devn_anchor(cfg: CtConfig) -> int:
    """After the last devN line, else after the last Proxmox key (raw lxc.* lines come last)."""
    anchor = -1
    for i, ln in cfg.main():
        if ln.key and is_devn_key(ln.key):
            anchor = i
    if anchor >= 0:
        return anchor
    for i, ln in cfg.main():
        if ln.key and not ln.key.startswith("lxc."):
            anchor = i
    return anchor


def make_plan(ctx: Context, requested: str = "auto") -> Plan:
    style, reason = choose_style(requested, ctx)
    findings = run_rules(ctx)
    original = ctx.config
    # Phase 1: cgroup v1 device keys become v2 keys; the rest is planned on the result,
    # so a converted rule is not added a second time.
    converted = _convert_v1(ctx)
    if converted is not ctx.config:
        ctx = ctx.with_config(converted)
    cfg = ctx.config
    facts = ctx.facts
    needs = ctx.needs

    replace_at: dict[int, list[tuple[str, str]]] = {}  # line index -> new lines in its place
    drop: set[int] = set()
    add_rules: list[DeviceNode] = []
    add_mounts: list[DeviceNode] = []
    add_devs: list[DeviceNode] = []

    def via_devn(g: Given) -> bool:
        return style == "devn" and g.via == "mount" and g.from_dir is None

    for s in needs.stale:
        r = s.rule.rule
        # In the devn style a node in a directory mount keeps needing the rule.
        rule_still_needed = any(not via_devn(g) for g in s.given)
        if style == "numeric" or (style == "devn" and rule_still_needed):
            new = devices.DeviceRule(r.kind, s.major, r.minor, r.access)
            replace_at[s.rule.index] = [(s.rule.key, str(new))]
        elif style == "path":
            replace_at[s.rule.index] = [(s.rule.key, f"{g.path} {r.access}") for g in s.given]
        else:  # devn: devN entries replace the rule and the nodes' mounts
            replace_at[s.rule.index] = []
        for g in s.given:
            if via_devn(g):
                add_devs.append(g.node)
                drop.add(g.index)

    for g in needs.denied:
        if via_devn(g):
            add_devs.append(g.node)
            drop.add(g.index)
        elif g.via == "mount":
            add_rules.append(g.node)

    if requested == "devn":
        _migrate_to_devn(ctx, needs, replace_at, drop, add_devs)
    elif requested == "path":
        _migrate_to_path(ctx, needs, replace_at)

    for u in needs.unpassed:
        for n in u.nodes:
            if style == "devn":
                add_devs.append(n)
            else:
                add_mounts.append(n)

    new = cfg
    # In-place edits first, bottom up, so earlier indexes stay valid.
    for index in sorted(set(replace_at) | drop, reverse=True):
        lines = replace_at.get(index, [])
        if index in drop or not lines:
            new = ctconfig.remove(new, index)
            continue
        new = ctconfig.set_value(new, index, *lines[0])
        if lines[1:]:
            new = ctconfig.insert_after(new, index, lines[1:])

    rule_style = "path" if style == "devn" else style  # devN cannot replace a directory mount
    if add_rules:
        for key, value in render.render(rule_style, _profile(add_rules, facts),
                                        rules=_groups(_unique(add_rules), facts), mounts=[]):
            new = ctconfig.add(new, key, value, near=(MOUNT_KEY,))
    if add_mounts:
        targets = [render.Mount(n.path, n.path.lstrip("/")) for n in _unique(add_mounts)]
        for key, value in render.render(rule_style, None, rules=[], mounts=targets):
            new = ctconfig.add(new, key, value, near=V2_KEYS)
    if add_devs:
        n0 = _next_devn(new)
        devs = [render.Dev(f"dev{n0 + i}", n.path, tuple(devn_options(n)))
                for i, n in enumerate(_unique(add_devs))]
        rendered = render.render("devn", None, devs=devs)
        new = ctconfig.insert_after(new, _devn_anchor(new), rendered)

    return Plan(
        ct=ctx.ct, path=original.path, digest=original.digest, before=original.raw, after=new.raw,
        findings=tuple(findings), style=style, style_reason=reason,
    )


def _convert_v1(ctx: Context) -> CtConfig:
    """Ignored cgroup v1 device rules become v2 rules: in place when the config
    has no v2 device rules, else added beside them (a dual-stack config keeps its
    v1 half for legacy hosts). `a` rules are never converted (hygiene.convertible)."""
    if not v1_on_v2(ctx):
        return ctx.config
    todo = [r for r in v1_without_twin(ctx.effective) if convertible(r)]
    cfg = ctx.config
    in_place = not any(not r.v1 for r in ctx.effective.own_rules)
    if in_place:
        for r in sorted(todo, key=lambda r: r.index, reverse=True):
            cfg = ctconfig.set_value(cfg, r.index, r.key.replace("lxc.cgroup.", "lxc.cgroup2."), r.value)
    else:
        for r in todo:
            cfg = ctconfig.add(cfg, r.key.replace("lxc.cgroup.", "lxc.cgroup2."), r.value.strip(), near=V2_KEYS)
    return cfg


def devn_options(node: DeviceNode) -> list[tuple[str, str]]:
    """What a devN entry needs to look like the host's node inside: Proxmox
    creates it 0660 root:root unless told (pve-container's
    create_passthrough_device_node); NVIDIA's nodes are 0666."""
    opts = []
    if node.uid:
        opts.append(("uid", str(node.uid)))
    if node.gid:
        opts.append(("gid", str(node.gid)))
    mode = node.mode & 0o7777
    if mode and mode != 0o660:
        opts.append(("mode", f"0{mode:o}"))
    return opts


def _matches(rule, node: DeviceNode) -> bool:
    return (rule.kind == node.kind and rule.major == node.major and rule.minor in (None, node.minor))


def _numeric_allows(ctx: Context):
    return [r for r in ctx.effective.own_rules
            if r.key == ALLOW and r.rule is not None and r.rule.path is None and r.rule.major is not None]


def _migrate_to_devn(ctx: Context, needs, replace_at: dict, drop: set, add_devs: list) -> None:
    """--style devn asked for: every node passed in by its own bind mount and
    allowed by a numeric rule becomes a devN entry; rules left serving nothing go."""
    broken = {id(g) for g in needs.denied} | {id(g) for s in needs.stale for g in s.given}
    given = [g for g in ctx.effective.given if g.node is not None]
    for g in given:
        if g.via == "mount" and g.from_dir is None and id(g) not in broken:
            add_devs.append(g.node)
            drop.add(g.index)
    remaining = [g for g in given if not (g.via == "mount" and g.index in drop)]
    for r in _numeric_allows(ctx):
        if r.index in replace_at:
            continue
        if any(_matches(r.rule, g.node) for g in given) and not any(_matches(r.rule, g.node) for g in remaining):
            replace_at[r.index] = []
            # Its cgroup v1 twin (dual-stack configs) goes with it.
            for twin in ctx.effective.own_rules:
                if twin.v1 and twin.key.endswith("allow") and twin.value.strip() == r.value.strip():
                    replace_at[twin.index] = []


def _migrate_to_path(ctx: Context, needs, replace_at: dict) -> None:
    """--style path asked for: numeric rules pinning a dynamic major become
    path-form rules for the nodes passed in, which LXC resolves at every start."""
    given = [g for g in ctx.effective.given if g.node is not None]
    for r in _numeric_allows(ctx):
        if r.index in replace_at or pinned_dynamic(ctx, r.rule) is None:
            continue
        paths = sorted({g.path for g in given if _matches(r.rule, g.node)})
        if paths:
            replace_at[r.index] = [(r.key, f"{p} {r.rule.access}") for p in paths]


def _unique(nodes) -> list[DeviceNode]:
    seen: dict[str, DeviceNode] = {}
    for n in nodes:
        seen.setdefault(n.path, n)
    return list(seen.values())
