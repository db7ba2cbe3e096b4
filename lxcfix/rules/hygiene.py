"""Rules that work today but break later or grant too much.

LXF102 cgroup v1 keys on a v2 host, LXF103 numeric rule pinning a dynamic
major, LXF104 over-broad rule, LXF111 device mount without `optional`, LXF158 a
USB device passed in by its bus/device number (a Coral Edge TPU changes it when
its firmware loads).

Their fixes: LXF102's conversion is applied by the plan (first, phase 0);
LXF103's path-form rules only when `--style path` is asked for; narrowing an
over-broad rule (LXF104) and adding `optional` (LXF111) are shown, never
applied for the admin: taking access away, or changing when a container
starts, is the admin's call.
"""

from __future__ import annotations

import functools
import re

from .. import devices, fixes
from ..bounded import excerpt
from ..ctconfig import is_devn_key
from ..lxcdefaults import LXC_CONFIG_DIR
from ..devices import parse_lxc_value
from ..model import DeviceNode, Edit, Fix

# Nodes that exist whenever the host is up: a mount of them cannot fail at start.
ALWAYS_PRESENT = frozenset(p.name for p in devices.CATALOG if p.always_present)  # misc nodes: tun, fuse, kvm


def v1_on_v2(ctx) -> bool:
    # An unknown layout is taken as v2: Proxmox VE 7+ and current distributions default to it.
    return ctx.facts.cgroup_layout in ("v2", "unknown")


def lxc7_note(ctx) -> str:
    """LXF102 on a host whose LXC is 6.x or newer: the next major release refuses the key."""
    from ..facts import version_tuple

    if version_tuple(ctx.facts.lxc_version)[:1] < (6,):
        return ""
    warned = " (pve-container 6.1.6 already warns: \"this will be a hard error in the future\")" \
        if ctx.config.flavor == "pve" else ""
    return ("; and LXC 7 (upstream 7.0.0) rejects lxc.cgroup.* keys as \"Unsupported config key\": after "
            f"that upgrade the container does not start at all{warned}")


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
    """Would LXC's own parser take this rule line (devices.parse_lxc_value)?"""
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


def convert_fix(ctx, r) -> Fix:
    """LXF102: the ignored v1 rule becomes the v2 rule, in place (its place in
    the rule order is kept). Only rules without a v2 twin get here (a dual-stack
    config that has both halves is fine), and LXC 7 refuses v1 keys: the v1 line
    goes. `a` rules are never converted (convertible())."""
    v2 = r.key.replace("lxc.cgroup.", "lxc.cgroup2.")
    title = f"use {v2}: {r.value}"
    if not convertible(r):
        return Fix(title)
    return Fix(title, (Edit("replace", r.index, ((v2, r.value),)),), "safe", phase=0)


def path_rules_fix(ctx, r, profile: devices.Profile) -> Fix:
    """LXF103: path-form rules for the nodes the pinned rule is for, which LXC
    resolves at every start. Applied by the plan when --style path is asked
    for; without a node passed in, a suggestion from the catalog's nodes."""
    title = "use devN entries (Proxmox VE 8.1+) or path-form rules: lxcfix plan --style devn|path"
    given = sorted({g.path for g in ctx.effective.given if g.node is not None and _serves(r.rule, g.node)})
    paths = given or fixes_paths(profile, ctx, r.rule)
    if not paths:
        return Fix(title)
    edit = Edit("replace", r.index, tuple((r.key, f"{p} {r.rule.access}") for p in paths))
    return Fix(title, (edit,), "safe" if given and ctx.requested == "path" else "manual")


def fixes_paths(profile: devices.Profile, ctx, rule) -> list[str]:
    return list(dict.fromkeys(n.path for n in devices.nodes_of(profile, ctx.facts)))


def _serves(rule, node: DeviceNode) -> bool:
    return rule.major is not None and rule.covers(node.kind, node.major, node.minor)


def narrow_fix(ctx, r) -> Fix:
    """LXF104: the over-broad rule becomes exact rules for the devices the
    container is given that nothing else allows (a dynamic major by path)."""
    title = "allow only the devices passed in (exact minors on shared majors); lxcfix plan shows the exact rules"
    covered = []
    for g in ctx.effective.given:
        n = g.node
        if n is None or not r.rule.covers(n.kind, n.major, n.minor) or _allowed_elsewhere(ctx, n, r.index):
            continue
        profile = devices.profile_for_major(n.major, ctx.facts, n.minor) if n.kind == "c" else None
        covered.append(f"{n.path} rwm" if profile is not None and profile.dynamic
                       else fixes.exact_allow(n.kind, n.major, n.minor))
    lines = tuple((fixes.ALLOW, v) for v in dict.fromkeys(covered))
    return Fix(title, (fixes.replace_edit(r.index, lines),), "manual")


def _allowed_elsewhere(ctx, n: DeviceNode, skip: int) -> bool:
    for o in ctx.effective.own_rules:
        if o.index == skip or o.rule is None or not o.rule.allow or o.v1 or devices.is_overbroad(o.rule):
            continue
        if o.rule.path is not None:
            if o.rule.path == n.path:
                return True
        elif o.rule.covers(n.kind, n.major, n.minor):
            return True
    return False


def optional_fix(ctx, g) -> Fix:
    """LXF111: the same bind mount with `optional` (and create=file)."""
    title = "add 'optional' to its mount options (and create=file)"
    line = ctx.config.lines[g.index]
    parts = (line.value or "").split()
    if len(parts) < 4:
        return Fix(title)
    opts = parts[3].split(",")
    at = next((i + 1 for i, o in enumerate(opts) if o in ("bind", "rbind")), len(opts))
    opts.insert(at, "optional")
    if not any(o.startswith("create=") for o in opts):
        opts.append("create=file")
    new = " ".join(parts[:3] + [",".join(opts)] + parts[4:])
    return Fix(title, (Edit("replace", g.index, ((fixes.MOUNT_KEY, new),)),), "manual")


def check(ctx) -> list:
    out = []
    eff = ctx.effective
    path = ctx.config.path
    stale_rules = {s.rule.index for s in ctx.needs.stale}
    ignored = {r.index for r in v1_without_twin(eff)} if v1_on_v2(ctx) else set()
    for r in eff.own_rules:
        where = f"{path}:{r.index + 1}: {r.key}: {r.value}"
        if r.index in ignored:
            out.append(ctx.finding(
                "LXF102",
                f"{r.key} is a cgroup v1 key: on this cgroup v2 host LXC ignores it silently" + lxc7_note(ctx),
                evidence=(where, f"cgroup layout: {ctx.facts.cgroup_layout}",
                          *((f"LXC {ctx.facts.lxc_version} on this host: lxcfix audit --for lxc-upgrade",)
                            if ctx.facts.lxc_version else ())),
                fix=convert_fix(ctx, r), line=r.index + 1,
            ))
        if r.value.strip() and not lxc_accepts(r):
            out.append(ctx.finding(
                "LXF130", f"LXC rejects the device rule '{excerpt(r.value)}' and skips it: it has no effect",
                evidence=(excerpt(where, 200), "LXC wants `c MAJOR:MINOR ACCESS` with single spaces, or `/dev/path ACCESS` (allow only)"),
                fix=Fix("write it as `c MAJOR:MINOR rwm` or `/dev/path rwm`"), line=r.index + 1,
            ))
        if r.rule is None:
            continue
        why = devices.is_overbroad(r.rule)
        if why:
            out.append(ctx.finding(
                "LXF104", f"{r.key}: {r.value} {why}",
                evidence=(where,),
                fix=narrow_fix(ctx, r), line=r.index + 1,
            ))
        profile = pinned_dynamic(ctx, r.rule)
        if profile is not None and r.index not in stale_rules and not r.v1:
            out.append(ctx.finding(
                "LXF103",
                f"{r.value} pins the dynamic major of {profile.name}: it breaks when a reboot "
                "or driver upgrade moves the major",
                evidence=(where, f"/proc/devices: {r.rule.major} {profile.drivers[0] if profile.drivers else profile.name}"),
                fix=path_rules_fix(ctx, r, profile), line=r.index + 1,
            ))
    out += unreadable_entries(ctx)
    out += usb_by_number(ctx)
    for g in eff.given:
        if g.via != "mount" or g.optional or g.from_dir is not None:
            continue
        if g.profile in ALWAYS_PRESENT:
            continue
        out.append(ctx.finding(
            "LXF111",
            f"bind mount of {g.path} lacks 'optional': if the node is absent at start "
            "(driver not loaded yet, device unplugged) the container fails to start",
            device=g.path,
            evidence=(f"{path}:{g.index + 1}",),
            fix=optional_fix(ctx, g), line=g.index + 1,
        ))
    return out


_USB_NODE = re.compile(r"/dev/bus/usb/([0-9]{3})/([0-9]{3})")
# A Coral USB Edge TPU enumerates twice: before its firmware is loaded, and after, with a new number.
CORAL_IDS = (("1a6e", "089a", "Global Unichip: a Coral Edge TPU before its firmware is loaded"),
             ("18d1", "9302", "Google: a Coral Edge TPU with its firmware loaded"))
USB_MAJOR = 189


def usb_by_number(ctx) -> list:
    """LXF158: one /dev/bus/usb/BBB/DDD node passed in (a mount of the node, or devN): its
    number changes on every re-enumeration; the fix passes the bus directory and `c 189:* rwm`."""
    out = []
    for g in ctx.effective.given:
        m = _USB_NODE.fullmatch(g.path)
        if m is None or g.from_dir is not None:
            continue
        bus = f"/dev/bus/usb/{m.group(1)}"
        out.append(ctx.finding(
            "LXF158",
            f"{g.path} is a USB device by its bus and device number: the number changes when it re-enumerates "
            "(a replug, a reboot, and a Coral Edge TPU when its firmware loads), and the container keeps the old node",
            device=g.path,
            evidence=(f"{ctx.config.path}:{g.index + 1}",
                      "a Coral USB Edge TPU is " + " until its firmware loads, then ".join(
                          f"{v}:{p}" for v, p, _ in CORAL_IDS) + " (a new device number)"),
            fix=usb_bus_fix(ctx, g, bus), line=g.index + 1,
        ))
    return out


USB_BUS_MINORS = 128  # minors per bus on major 189: (bus-1)*128 + (device-1)


def usb_bus_minors(bus: int) -> range:
    """The minors of one USB bus's devices on major 189 (bus 2: 128..255)."""
    return range((bus - 1) * USB_BUS_MINORS, bus * USB_BUS_MINORS)


def usb_bus_fix(ctx, g, bus: str) -> Fix:
    """Manual: the bus directory instead of the node, and the USB major allowed. cgroup2 device
    rules have no minor ranges: `c 189:* rwm` allows every bus's devices, not that bus's, and the
    text says so (a privileged container's root can mknod another bus's node and open it)."""
    mount = ("lxc.mount.entry", f"{bus} {bus.lstrip('/')} none bind,optional,create=dir 0 0"
             if ctx.config.flavor == "lxc" else f"{bus} {bus.lstrip('/')} none bind,optional,create=dir")
    allow = ("lxc.cgroup2.devices.allow", f"c {USB_MAJOR}:* rwm")
    edits = (Edit("replace", g.index, (mount,)),)
    if not ctx.effective.ruleset.allows("c", USB_MAJOR, 0, "rw"):
        edits += (Edit("add", lines=(allow,), near=("lxc.mount.entry",)),)
    minors = usb_bus_minors(int(bus.rsplit("/", 1)[1]))
    who = ("its root can mknod any other bus's node (c 189:M) and open it" if not ctx.effective.unprivileged
           else "only the nodes mounted in can be opened (an unprivileged root cannot mknod), so the mount "
                "is what narrows it to that bus")
    return Fix(f"pass the bus directory {bus} and allow c {USB_MAJOR}:* rwm: that rule allows every USB device on "
               f"every bus of the host, not only bus {bus.rsplit('/', 1)[1]} (cgroup2 rules have no minor ranges); "
               f"{who}",
               edits, notes=("# which device is where: lsusb, or cat /sys/bus/usb/devices/*/idVendor",
                             f"# only {bus}: one rule per minor instead of c {USB_MAJOR}:*, "
                             f"lxc.cgroup2.devices.allow = c {USB_MAJOR}:N rwm for N in "
                             f"{minors.start}..{minors.stop - 1} ({USB_BUS_MINORS} lines)"))


NAME_MAX, PATH_MAX = 255, 4096


@functools.lru_cache(maxsize=2048)  # a host's configs repeat their mount and devN lines
def _line_why(key: str, value: str, pve: bool) -> str | None:
    """Why LXC or Proxmox cannot use this mount entry or devN line (unreadable_entries), or None."""
    if key == "lxc.mount.entry":
        fields = value.split()
        if len(fields) < 4:
            return "LXC wants `source target fstype options [dump pass]`"
        bad = _bad_path(fields[0]) or _bad_path(fields[1])
        return f"the kernel cannot mount it: {bad}" if bad else None
    if pve and key.startswith("dev") and key[3:].isascii() and key[3:].isdigit():
        if not is_devn_key(key):
            return "Proxmox knows dev0 to dev255"
        if not any(p.strip() and (p.strip().startswith(("/", "path=/"))) for p in value.split(",")):
            return "a devN entry names a device path: `devN: /dev/x[,gid=..][,mode=..]`"
    return None


def _bad_path(path: str) -> str | None:
    """Why the kernel refuses this path, if it does (a name over 255 bytes, a path over 4096)."""
    if len(path) * 4 <= NAME_MAX:  # UTF-8 takes at most 4 bytes a character: nothing to refuse
        return None
    data = path.encode("utf-8", "surrogateescape")
    if len(data) >= PATH_MAX:
        return f"a path of {len(data)} bytes (the kernel takes {PATH_MAX - 1})"
    longest = max((len(p) for p in data.split(b"/")), default=0)
    if longest > NAME_MAX:
        return f"a name of {longest} bytes in the path (the kernel takes {NAME_MAX})"
    return None


def _looping_include(ctx) -> int | None:
    """The line of the container's own lxc.include that leads into includes nested past 8
    levels: one naming the config itself, else the first whose target was left unread."""
    deep = ctx.effective.too_deep
    if not deep:
        return None
    own = [(i, ln.value) for i, ln in ctx.config.main() if ln.key == "lxc.include"]
    for i, value in own:
        if value == ctx.config.path:
            return i
    # LXC's own files (common.conf, ...) are only where the loop was cut, when a file of the
    # admin's is among those left unread: the loop goes through the admin's own include
    if any(not d.startswith(LXC_CONFIG_DIR + "/") for d in deep):
        for i, value in own:
            if not value.startswith(LXC_CONFIG_DIR + "/"):
                return i
    for i, value in own:
        if value in deep:
            return i
    return own[0][0] if own else None


def unreadable_entries(ctx) -> list:
    """LXF130 for mount entries LXC cannot read or mount (fewer than the four fstab fields,
    a path the kernel refuses) and, in Proxmox configs, devN keys past dev255 (or with a
    leading 0) and devN entries without a path: lxcfix cannot tell which device they mean."""
    if not any(k == "lxc.mount.entry" or k == "lxc.include" or k[:3] == "dev" for k in ctx.config.keys()):
        return []  # no mount entry, devN or include line: nothing here can be unreadable
    out = []
    path = ctx.config.path
    pve = ctx.config.flavor == "pve"
    for i, ln in ctx.config.main():
        key = ln.key
        if key is None:
            continue
        why = None
        if key == "lxc.mount.entry" or (pve and key.startswith("dev")):
            value = ln.value or ""
            why = (_line_why if len(value) <= 256 else _line_why.__wrapped__)(key, value, pve)
        elif key == "lxc.include" and i == _looping_include(ctx):
            why = "includes nest more than 8 deep (a file that includes itself, or a loop of includes)"
        if why:
            text = ln.text.strip()
            out.append(ctx.finding(
                "LXF130", f"line {i + 1} of {path or 'the config'} cannot be used: {why}: '{excerpt(text)}'",
                evidence=(f"{path}:{i + 1}",),
                fix=Fix("fix or remove the line"), line=i + 1,
            ))
    return out
