"""LXF160: a device passed in (or allowed by path) from a directory the container can write.

A bind-mount source, a `devN:` path or a path-form allow rule under the container's rootfs,
a Proxmox `mpN:` directory or a directory bind-mounted in (read-only too: the container's
root remounts it read-write; effective.writable_mount says why) is the tenant's to replace: with a
symlink to /dev/kmsg (LXC and Proxmox stat() the path at every start, following links) or
with a node it made (common.conf lets a container mknod anything). The device is then the
tenant's choice. lxcfix plans no allow rule for such a source (effective.py keeps it out
of `given`) and reports the config; the fix is the admin's: keep device nodes where the
container cannot write.
"""

from __future__ import annotations

from ..effective import under
from ..model import Fix


def _how(eff, root: str) -> str:
    """How the container writes `root`, in words: "lxc.mount.entry at config:4 bind-mounts it read-write"."""
    hows = dict(zip(eff.writable, eff.writable_how))
    return f"{root}: written by the container ({hows[root]})" if hows.get(root) else f"{root}: written by the container"


FIX = Fix("keep device nodes in a host directory the container cannot write (/dev, or one of its own "
          "outside the rootfs and the container's mounts), and point the mount, devN entry or rule there")


def check(ctx) -> list:
    eff = ctx.effective
    out = []
    for g in eff.tenant:
        root = under(g.path, eff.writable)
        how = f"devN entry {g.index + 1}" if g.via == "devn" else "a bind mount"
        now = (f"{g.path} is {g.node.kind} {g.node.major}:{g.node.minor} now (lstat: not followed)"
               if g.node is not None else f"{g.path} is not a device node now (a symlink or a file: not followed)")
        out.append(ctx.finding(
            "LXF160",
            f"{g.path} is passed in by {how} from {root}, which CT {ctx.ct} can write: its tenant can put any "
            "device there (a symlink to a host device, a node it made); lxcfix allows nothing for it (no rule, "
            "no devN): the host would follow the tenant's link at the next start",
            device=g.path,
            evidence=(f"{ctx.config.path}:{g.index + 1}", _how(eff, root), now),
            fix=FIX, line=g.index + 1,
        ))
    for r in eff.own_rules:
        if r.rule is None or r.rule.path is None or not r.rule.allow:
            continue
        root = under(r.rule.path, eff.writable)
        if root is None:
            continue
        out.append(ctx.finding(
            "LXF160",
            f"{r.key}: {r.value} names a path in {root}, which CT {ctx.ct} can write: LXC stat()s it at every "
            "start, so the tenant chooses which device this rule allows",
            device=r.rule.path,
            evidence=(f"{ctx.config.path}:{r.index + 1}: {r.key}: {r.value}", _how(eff, root)),
            fix=FIX, line=r.index + 1,
        ))
    return out
