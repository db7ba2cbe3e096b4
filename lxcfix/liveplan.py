"""What a config change means for a running container, as live operations. Pure.

    ops = live_ops(before_ctx, after_ctx)
    ops == LiveOps(allow=("c 511:* rwm",), deny=("c 508:* rwm",), create=(), refuse=None)

LXC changes a running container's device program through its command socket
(`lxc-cgroup -n NAME devices.allow|deny RULE`: measured, the attached program
is swapped at once) and creates a node inside with `lxc-device add`. A deny of
a rule equal to a listed allow flips that entry out of the program, so
removing a stale rule is `devices.deny` with its exact text.

`refuse` says why a live change cannot reproduce what the config change means;
the admin then needs a normal apply (restart).
"""

from __future__ import annotations

from dataclasses import dataclass

from .effective import Given
from .rules import Context


@dataclass(frozen=True)
class LiveOps:
    allow: tuple[str, ...] = ()  # rules to add to the running program
    deny: tuple[str, ...] = ()  # listed allow rules to take out of it
    create: tuple[Given, ...] = ()  # nodes to create inside (lxc-device add; del undoes it)
    refuse: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.allow or self.deny or self.create)


def _compiled(ctx: Context) -> dict[tuple, str]:
    rs = ctx.effective.ruleset
    # `c 511:* rwm`, as lxc-cgroup takes it (a compiled rule's path is resolved already)
    return {(r.rule.kind, r.rule.major, r.rule.minor, r.rule.access, r.rule.allow): r.rule.text(listing=True)
            .removeprefix("deny ")
            for r in rs.rules} if rs.has_program else {}


def _mount_key(g: Given) -> tuple:
    return (g.path, g.target.lstrip("/"))


def live_ops(before: Context, after: Context) -> LiveOps:
    b_rs, a_rs = before.effective.ruleset, after.effective.ruleset
    if b_rs.has_program != a_rs.has_program or (a_rs.has_program and b_rs.mode != a_rs.mode):
        return LiveOps(refuse="the change switches the device policy mode (allowlist/denylist): "
                              "that takes effect at start only")
    b_rules, a_rules = _compiled(before), _compiled(after)
    if any(not key[4] for key in set(a_rules) ^ set(b_rules)):
        return LiveOps(refuse="the change edits deny rules of a denylist-mode container: apply with a restart")
    allow = tuple(text for key, text in a_rules.items() if key not in b_rules)
    deny = tuple(text for key, text in b_rules.items() if key not in a_rules)

    b_mounts = {_mount_key(g) for g in before.effective.given if g.via == "mount"}
    a_mounts = {_mount_key(g) for g in after.effective.given if g.via == "mount"}
    b_devs = {g.path for g in before.effective.given if g.via == "devn"}
    a_devs = {g.path for g in after.effective.given if g.via == "devn"}
    if b_mounts - a_mounts or b_devs - a_devs:
        return LiveOps(refuse="the change removes bind mounts or devN entries (devN conversion): mounts of a "
                              "running container change at start only; apply with a restart")
    if before.effective.idmap != after.effective.idmap:
        return LiveOps(refuse="the change edits lxc.idmap: a user namespace's id map is set at start only; "
                              "apply with a restart")
    b_opts = {d.path: d.options for d in before.effective.devn}
    if any(b_opts.get(d.path, d.options) != d.options for d in after.effective.devn):
        return LiveOps(refuse="the change edits devN options (gid=, uid=, mode=): Proxmox makes the node with "
                              "them at start; apply with a restart")
    if a_devs - b_devs:
        return LiveOps(refuse="devN entries are hotplugged by Proxmox itself (pct set --devN, pve-container "
                              "6.0.4+); use --style path or numeric with --live, or apply with a restart")
    create = []
    for g in after.effective.given:
        if g.via == "mount" and _mount_key(g) not in b_mounts:
            if g.node is None or g.from_dir is not None:
                return LiveOps(refuse=f"the new mount of {g.path} cannot be reproduced live; apply with a restart")
            create.append(g)
    # lxc-device add also allows the node's exact `c M:m rwm` (measured); take it
    # out again where the new config allows it another way (a wildcard minor).
    for g in create:
        key = (g.node.kind, g.node.major, g.node.minor, "rwm", True)
        if key not in a_rules:
            deny += (f"{g.node.kind} {g.node.major}:{g.node.minor} rwm",)
    before_mounts = {(m.source, m.target, m.options) for m in before.effective.mounts}
    after_mounts = {(m.source, m.target, m.options) for m in after.effective.mounts}
    changed = {(s, t) for s, t, _ in after_mounts - before_mounts} & {(s, t) for s, t, _ in before_mounts}
    if changed:
        return LiveOps(refuse="the change edits mount options, which take effect at start only; apply with a restart")
    return LiveOps(allow=allow, deny=deny, create=tuple(create))
