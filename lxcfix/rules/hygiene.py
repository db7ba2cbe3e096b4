"""Rules that work today but break later or grant too much.

LXF102 cgroup v1 keys on a v2 host, LXF103 numeric rule pinning a dynamic
major, LXF104 over-broad rule, LXF111 device mount without `optional`.
"""

from __future__ import annotations

from .. import devices
from ..bpf import parse_lxc_value

# Nodes that exist whenever the host is up: a mount of them cannot fail at start.
ALWAYS_PRESENT = frozenset({"tun", "fuse", "kvm"})


def v1_on_v2(ctx) -> bool:
    # An unknown layout is taken as v2: Proxmox VE 7+ and current distributions default to it.
    return ctx.facts.cgroup_layout in ("v2", "unknown")


def v1_without_twin(eff) -> list:
    """v1 device rules LXC ignores here and whose v2 twin the config lacks.
    A config holding both halves (LXC's own dual-stack templates) is fine."""
    v2 = {(r.key.rsplit(".", 1)[1], r.value.strip()) for r in eff.own_rules if not r.v1}
    return [r for r in eff.own_rules if r.v1 and (r.key.rsplit(".", 1)[1], r.value.strip()) not in v2]


def convertible(r) -> bool:
    """A v1 rule we may turn into v2 ourselves: a specific rule, not `a` (which
    resets the list: converting it would drop LXC's default allowlist) and not a clear."""
    return r.rule is not None and r.rule.kind != "a" and not devices.is_overbroad(r.rule)


def lxc_accepts(r) -> bool:
    """Would LXC's own parser take this rule line (bpf.parse_lxc_value)?"""
    value = r.value.strip()
    if value.startswith("/"):
        return r.key.endswith("allow") and len(value.split()) == 2
    return parse_lxc_value(r.key.endswith("allow"), value) is not None


def pinned_dynamic(ctx, rule) -> devices.Profile | None:
    """The dynamic profile whose current major this numeric rule pins, if any."""
    if rule is None or rule.path is not None or rule.major is None or rule.kind != "c" or not rule.allow:
        return None
    profile = devices.profile_for_major(rule.major, ctx.facts, rule.minor)
    if profile is not None and profile.dynamic:
        return profile
    return None


def check(ctx) -> list:
    out = []
    eff = ctx.effective
    path = ctx.config.path
    stale_rules = {s.rule.index for s in ctx.needs.stale}
    ignored = {r.index for r in v1_without_twin(eff)} if v1_on_v2(ctx) else set()
    for r in eff.own_rules:
        where = f"{path}:{r.index + 1}: {r.key}: {r.value}"
        if r.index in ignored:
            v2 = r.key.replace("lxc.cgroup.", "lxc.cgroup2.")
            out.append(ctx.finding(
                "LXF102", "error",
                f"{r.key} is a cgroup v1 key: on this cgroup v2 host LXC ignores it silently",
                evidence=(where, f"cgroup layout: {ctx.facts.cgroup_layout}"),
                fix=f"use {v2}: {r.value}",
            ))
        if r.value.strip() and not lxc_accepts(r):
            out.append(ctx.finding(
                "LXF130", "error", f"LXC rejects the device rule {r.value!r} and skips it: it has no effect",
                evidence=(where, "LXC wants `c MAJOR:MINOR ACCESS` with single spaces, or `/dev/path ACCESS` (allow only)"),
                fix="write it as `c MAJOR:MINOR rwm` or `/dev/path rwm`",
            ))
        if r.rule is None:
            continue
        why = devices.is_overbroad(r.rule)
        if why:
            out.append(ctx.finding(
                "LXF104", "warning", f"{r.key}: {r.value} {why}",
                evidence=(where,),
                fix="allow only the devices passed in (exact minors on shared majors); "
                    "lxcfix plan shows the exact rules",
            ))
        profile = pinned_dynamic(ctx, r.rule)
        if profile is not None and r.index not in stale_rules and not r.v1:
            out.append(ctx.finding(
                "LXF103", "warning",
                f"{r.value} pins the dynamic major of {profile.name}: it breaks when a reboot "
                "or driver upgrade moves the major",
                evidence=(where, f"/proc/devices: {r.rule.major} {profile.drivers[0] if profile.drivers else profile.name}"),
                fix="use devN entries (Proxmox VE 8.1+) or path-form rules: lxcfix plan --style devn|path",
            ))
    for g in eff.given:
        if g.via != "mount" or g.optional or g.from_dir is not None:
            continue
        if g.profile in ALWAYS_PRESENT:
            continue
        out.append(ctx.finding(
            "LXF111", "warning",
            f"bind mount of {g.path} lacks 'optional': if the node is absent at start "
            "(driver not loaded yet, device unplugged) the container fails to start",
            device=g.path,
            evidence=(f"{path}:{g.index + 1}",),
            fix="add 'optional' to its mount options (and create=file)",
        ))
    return out
