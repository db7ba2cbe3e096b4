"""What LXC will actually apply for one container: the config as `lxc-start`
sees it (includes followed, Proxmox's generated lines added), its device
rules replayed, its mounts and `devN:` entries, and the devices it is given.

    eff = effective(cfg, facts, load)
    eff.ruleset.allows("c", 511, 0)        -> False
    eff.given[0] == Given(path="/dev/nvidia-uvm", target="dev/nvidia-uvm", via="mount",
                          node=DeviceNode(...511, 0...), index=17, optional=True, ...)

`load(path)` returns [(file, bytes), ...] for an include (a directory gives
its *.conf files in order), or None when it cannot be read; built-in
defaults (lxcdefaults.py) stand in then.
"""

from __future__ import annotations

import functools
import posixpath
from dataclasses import dataclass
from typing import Callable, NamedTuple

from . import ctconfig, devices, lxcdefaults
from .ctconfig import CtConfig, is_devn_key  # noqa: F401  (is_devn_key: part of this module's view)
from .devices import RuleSet
from .model import DeviceNode, HostFacts

Loader = Callable[[str], "list[tuple[str, bytes]] | None"]

V2_KEYS = ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny")
V1_KEYS = ("lxc.cgroup.devices.allow", "lxc.cgroup.devices.deny")
MOUNT_KEY = "lxc.mount.entry"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    fstype: str
    options: tuple[str, ...]
    index: int | None  # line in the container's own config; None if generated/included
    origin: str = ""

    @property
    def is_bind(self) -> bool:
        return "bind" in self.options or "rbind" in self.options

    @property
    def optional(self) -> bool:
        return "optional" in self.options


@dataclass(frozen=True)
class DevN:
    """A Proxmox `devN:` entry."""

    key: str
    path: str
    options: dict
    index: int


@dataclass(frozen=True)
class Given:
    """A device the container is given: host path, where it appears inside,
    how (mount | devn), and the host node (None: missing on the host)."""

    path: str
    target: str
    via: str
    node: DeviceNode | None
    index: int
    optional: bool = False
    profile: str | None = None
    from_dir: str | None = None  # set when it comes in through a directory mount


@dataclass(frozen=True)
class OwnRule:
    """A device rule line of the container's own config (main section)."""

    index: int
    key: str
    value: str
    rule: "devices.DeviceRule | None"  # None: the value does not parse

    @property
    def v1(self) -> bool:
        return self.key in V1_KEYS


@dataclass(frozen=True)
class Effective:
    ruleset: RuleSet
    mounts: tuple[Mount, ...]
    devn: tuple[DevN, ...]
    own_rules: tuple[OwnRule, ...]
    given: tuple[Given, ...]
    unprivileged: bool = False
    lock: str | None = None
    # lxc.idmap values in the order LXC reads them, each with its line in the container's own
    # config (None: from an include). Proxmox reads only the config's own lines.
    idmap: tuple[tuple[str, int | None], ...] = ()
    # The cgroup2 device lines as lxc-start reads them, includes followed: (verb, value,
    # origin); the first `shared` come before the container's own (devices.replay_outcomes).
    rule_lines: tuple[tuple[str, str, str], ...] = ()
    shared: int = 0
    # Host directories the container can write (its rootfs, bind-mounted directories), and the
    # devices passed in from under one: those are the tenant's choice, not the admin's, and
    # are left out of `given` (nothing is allowed for them; rules.tenant reports them, LXF160).
    writable: tuple[str, ...] = ()
    tenant: tuple[Given, ...] = ()
    # For each of `writable`, how the container gets to write it ("lxc.mount.entry at web/config:4
    # bind-mounts it read-write", "mp0", "its rootfs"), in the same order.
    writable_how: tuple[str, ...] = ()
    # lxc.include targets still unread past 8 levels of includes (a file that includes itself)
    too_deep: tuple[str, ...] = ()


def parse_mount(value: str, index: int | None, origin: str = "") -> Mount | None:
    parts = value.split()
    if len(parts) < 4:
        return None
    return Mount(parts[0], parts[1], parts[2], tuple(parts[3].split(",")), index, origin)


def parse_devn(key: str, value: str, index: int) -> DevN | None:
    opts: dict[str, str] = {}
    path = None
    for part in value.split(","):
        part = part.strip()
        if "=" in part:
            k, v = part.split("=", 1)
            if k == "path":
                path = v
            else:
                opts[k] = v
        elif part and path is None:
            path = part
    return DevN(key, path, opts, index) if path else None


def _expand(
    items: list[tuple[str, str, str]], load: Loader, builtin: dict[str, bytes], depth: int = 0
) -> list[tuple[str, str, str]]:
    """Follow lxc.include in place. items: (key, value, origin)."""
    out: list[tuple[str, str, str]] = []
    for key, value, origin in items:
        if key != "lxc.include" or depth > 8:
            out.append((key, value, origin))
            continue
        out += _included(value, load, builtin, depth)
    return out


# (loader, builtin table, include target) -> its expanded lines: every container of a
# host includes the same few files (common.conf and what it includes), so the walk is done once.
_INCLUDED: dict[tuple[int, int, str, int], tuple[object, tuple[tuple[str, str, str], ...]]] = {}


def _included(value: str, load: Loader, builtin: dict[str, bytes], depth: int) -> tuple[tuple[str, str, str], ...]:
    key = (id(load), id(builtin), value, depth)
    hit = _INCLUDED.get(key)
    if hit is not None and hit[0] is load:
        return hit[1]
    files = load(value)
    if files is None:
        fallback = builtin.get(value) if value in builtin else builtin.get(value.rstrip("/") + "/")
        files = [(value, fallback)] if fallback else []
    out: list[tuple[str, str, str]] = []
    for name, raw in files:
        out += _expand(list(_include_items(name, raw)), load, builtin, depth + 1)
    if len(_INCLUDED) > 256:
        _INCLUDED.clear()
    entry = (load, tuple(out))  # the loader is kept, so its id cannot be reused meanwhile
    _INCLUDED[key] = entry  # (threads share this table: read back the entry, not the table)
    return entry[1]


@functools.lru_cache(maxsize=512)
def _include_items(name: str, raw: bytes) -> tuple[tuple[str, str, str], ...]:
    """An included file's (key, value, origin) lines; every container of a host
    includes the same few files, so they are parsed once."""
    sub = ctconfig.parse(raw, "lxc", name)
    base = posixpath.basename(name.rstrip("/")) or name
    return tuple((ln.key, ln.value, f"{base}:{i + 1}") for i, ln in enumerate(sub.lines) if ln.key is not None)


class _Generated(NamedTuple):
    """What `pct start` writes before a Proxmox container's own lxc.* lines, includes followed,
    and what it gives: the same for most containers of a host, so computed once (facts.memo).
    rules: its cgroup2 device lines (verb, value, origin); entries and fstab: its mount entries
    and lxc.mount.fstab mounts (none of them a line of the container's own); heads: the file
    names its origins start with (an own line's origin, `200.conf:4`, must not be one)."""

    items: tuple[tuple[str, str, str], ...]
    rules: tuple[tuple[str, str, str], ...]
    entries: tuple[Mount, ...]
    fstab: tuple[Mount, ...]
    heads: frozenset


def _pve_generated(cfg: CtConfig, facts: HostFacts, load: Loader, devn: tuple[DevN, ...]) -> tuple[_Generated, bool]:
    """The lines `pct start` writes before the raw lxc.* ones (pve-container's
    update_lxc_config), and whether the container is unprivileged."""
    unprivileged = cfg.get("unprivileged") == "1" or cfg.get("lxc.idmap") is not None
    ostype = cfg.get("ostype") or ""
    fuse = "fuse=1" in (cfg.get("features") or "").split(",")
    console = cfg.get("console") == "0"
    # What it writes depends on these alone: most of a host's containers share them, and a
    # plan's next round nearly always does (one host's answers: facts.memo, with the loader).
    key = (load, unprivileged, ostype, fuse, console,
           tuple((d.key, d.path, d.options.get("deny-write") == "1") for d in devn))
    memo = facts.memo.setdefault("pve_generated", {})
    hit = memo.get(key)
    if hit is None:
        if len(memo) > 256:
            memo.clear()
        items = tuple(_expand(_pve_lines(facts, load, devn, unprivileged, ostype, fuse, console), load,
                              lxcdefaults.PVE_BUILTIN))
        hit = memo[key] = _Generated(items, tuple(_rules_of(items)), tuple(_entries_of(items, {})),
                                     fstab_mounts(items, load), frozenset(o.split(":", 1)[0] for _, _, o in items))
    return hit, unprivileged


def _rules_of(items) -> list[tuple[str, str, str]]:
    return [(k.rsplit(".", 1)[1], v, o) for k, v, o in items if k in V2_KEYS]


def _entries_of(items, line_of: dict[str, int]) -> list[Mount]:
    return [m for k, v, o in items if k == MOUNT_KEY if (m := parse_mount(v, line_of.get(o), o)) is not None]


def _pve_lines(facts: HostFacts, load: Loader, devn: tuple[DevN, ...], unprivileged: bool, ostype: str,
               fuse: bool, console: bool) -> list[tuple[str, str, str]]:
    cfgdir = lxcdefaults.LXC_CONFIG_DIR
    items: list[tuple[str, str, str]] = []
    common = f"{cfgdir}/{ostype}.common.conf"
    items.append(("lxc.include", common if ostype and load(common) else f"{cfgdir}/common.conf", "pct"))
    if unprivileged:
        userns = f"{cfgdir}/{ostype}.userns.conf"
        items.append(("lxc.include", userns if ostype and load(userns) else f"{cfgdir}/userns.conf", "pct"))
    if fuse:
        items.append((MOUNT_KEY, "/dev/fuse dev/fuse none bind,create=file 0 0", "pct:features"))
    for dev in devn:
        node = devices.resolve(dev.path, facts)
        if node is not None:
            access = "r" if dev.options.get("deny-write") == "1" else "rw"
            items.append(("lxc.cgroup2.devices.allow", f"{node.kind} {node.major}:{node.minor} {access}", f"pct:{dev.key}"))
    if console:
        items.append(("lxc.cgroup2.devices.deny", "c 5:1 rwm", "pct:console"))
    return items


_RULE_KEYS = frozenset(V2_KEYS) | frozenset(V1_KEYS)
# A mount point's option that makes it read-only (pve-container's ro=<bool>).
_RO = frozenset(f"ro={v}" for v in ("1", "on", "yes", "true"))


def effective(cfg: CtConfig, facts: HostFacts, load: Loader) -> Effective:
    name = posixpath.basename(cfg.path) or "config"
    pve = cfg.flavor == "pve"
    own: list[tuple[str, str, str]] = []
    line_of: dict[str, int] = {}
    devn: list[DevN] = []
    own_rules: list[OwnRule] = []
    # One pass over the container's own lines. Only its lxc.* lines are items (what the view is
    # made of reads no other key; for Proxmox they are the raw lines pct writes after its own).
    for i, ln in cfg.main():
        key = ln.key
        if key is None:
            continue
        if key.startswith("lxc."):  # every rule key is one
            origin = f"{name}:{i + 1}"
            own.append((key, ln.value, origin))
            line_of[origin] = i
            if key in _RULE_KEYS:
                try:
                    rule = devices.parse_rule(ln.value, allow=key.endswith("allow")) if ln.value.strip() else None
                except devices.RuleError:
                    rule = None
                own_rules.append(OwnRule(i, key, ln.value, rule))
        elif pve and key.startswith("dev") and is_devn_key(key):
            if (d := parse_devn(key, ln.value, i)) is not None:
                devn.append(d)
    unprivileged = False
    mine = f"{name}:"
    gen = None
    if pve:
        gen, unprivileged = _pve_generated(cfg, facts, load, tuple(devn))
        items = _expand(own, load, lxcdefaults.PVE_BUILTIN)
        if ":" in name or name in gen.heads:  # an own origin that reads like a generated one: no shortcut
            items, gen = list(gen.items) + items, None
    else:
        items = _expand(own, load, lxcdefaults.BUILTIN)
        unprivileged = any(k == "lxc.idmap" for k, _, _ in items)

    def resolve_path(path: str):
        node = devices.resolve(path, facts)
        return (node.kind, node.major, node.minor) if node else None

    # The generated part's rules, mounts and fstab mounts are its own (gen), then the rest's.
    rule_lines = _rules_of(items)
    shared = next((i for i, (_, _, o) in enumerate(rule_lines) if o.startswith(mine)), len(rule_lines))
    mounts = tuple(_entries_of(items, line_of))
    fstab = fstab_mounts(items, load)
    if gen is not None:
        rule_lines = list(gen.rules) + rule_lines
        shared += len(gen.rules)
        mounts = gen.entries + mounts + gen.fstab + fstab
        items = list(gen.items) + items
    else:
        mounts += fstab
    ruleset = RuleSet.replay(rule_lines, resolve_path, shared=shared)
    devn_t = tuple(devn)
    if pve:
        idmap = tuple((v, line_of.get(o)) for k, v, o in own if k == "lxc.idmap")
    else:
        idmap = tuple((v, line_of.get(o)) for k, v, o in items if k == "lxc.idmap")
    too_deep = tuple(dict.fromkeys(v for k, v, _ in items if k == "lxc.include"))
    # Only a config that bind-mounts something in itself (common.conf's mounts are LXC's), passes
    # a devN, or allows a path can take a device from a directory the tenant writes.
    path_rules = any(verb == "allow" and v.lstrip()[:1] == "/" for verb, v, _ in rule_lines[shared:])
    own_binds = any(m.is_bind and m.index is not None and m.source.startswith("/") for m in mounts)
    found = _writable(cfg, items, mounts, facts, not unprivileged) if own_binds or devn_t or path_rules else ()
    writable = tuple(p for p, _ in found)
    given, tenant = [], []
    for g in _given(mounts, devn_t, facts, writable):
        (tenant if under(g.path, writable) else given).append(g)
    return Effective(
        ruleset=ruleset,
        mounts=mounts,
        devn=devn_t,
        own_rules=tuple(own_rules),
        given=tuple(given),
        unprivileged=unprivileged,
        lock=cfg.get("lock") if pve else None,
        idmap=idmap,
        rule_lines=tuple(rule_lines),
        shared=shared,
        writable=writable,
        tenant=tuple(tenant),
        writable_how=tuple(how for _, how in found),
        too_deep=too_deep,
    )


# lxc.rootfs.path forms whose value is a directory on the host (`dir:/x`, `/x`, `btrfs:/x`,
# `overlay:/lower:/upper`: the upper one is written); lvm, zfs, loop, nbd, rbd are not.
_ROOTFS_DIR_TYPES = ("dir", "btrfs", "overlay", "overlayfs")


def fstab_mounts(items: list[tuple[str, str, str]], load: Loader) -> tuple[Mount, ...]:
    """The mounts of the `lxc.mount.fstab` files a config names (fstab lines: `source target
    fstype options [dump pass]`, as lxc.mount.entry takes them), read through `load`."""
    out: list[Mount] = []
    for key, value, _ in items:
        path = value.strip()
        if key != "lxc.mount.fstab" or not path.startswith("/"):
            continue
        for name, raw in (load(path) or [])[:1]:
            base = posixpath.basename(name) or name
            for n, line in enumerate(raw.decode("utf-8", "surrogateescape").split("\n")[:10000]):
                text = line.strip()
                if text and not text.startswith("#") and (m := parse_mount(text, None, f"fstab {base}:{n + 1}")):
                    out.append(m)
    return tuple(out)


def writable_dirs(cfg: CtConfig, items: list[tuple[str, str, str]], mounts: tuple[Mount, ...],
                  facts: HostFacts | None = None) -> tuple[str, ...]:
    """Host directories the container can write, from its config (see _writable)."""
    return tuple(p for p, _ in _writable(cfg, items, mounts, facts))


# Kernel filesystems: a bind of one of these is no directory a tenant puts a device node in.
_KERNEL_FS = ("/proc", "/sys", "/dev")


@functools.lru_cache(maxsize=4096)  # a host's configs name the same few paths
def _norm(path: str) -> str:
    return "/" + posixpath.normpath(path).lstrip("/")


def writable_mount(m: Mount, facts: HostFacts | None = None) -> bool:
    """A bind mount that gives the container a host directory to write: any bind (plain
    `bind`, `bind,rw`, `rbind`, `create=dir`, idmapped or not, `ro` or not) of a directory.
    `ro` protects nothing: the container's root remounts it read-write (`mount -o
    remount,rw,bind`), privileged (CAP_SYS_ADMIN) or not (LXC makes the bind inside the
    container's own user namespace, so the kernel does not lock it: measured, LXC 5.0.2).
    What is not a directory: a `create=file` mount, a node the host walk found at the source,
    a mount into the container's dev/ that does not say create=dir (a device mount)."""
    known = _writable_by_entry(m.source, m.target, m.options)
    if known is not None:
        return known
    return not (facts is not None and facts.nodes_known and facts.nodes.get(m.source) is not None)


@functools.lru_cache(maxsize=4096)  # a host's configs repeat the same few mount entries
def _writable_by_entry(source: str, target: str, options: tuple[str, ...]) -> bool | None:
    """writable_mount from the entry alone; None: it depends on what the host has at the source."""
    if not ("bind" in options or "rbind" in options) or not source.startswith("/"):
        return False
    src = _norm(source)
    if any(src == k or src.startswith(k + "/") for k in _KERNEL_FS) or src == "/":
        return False
    if "create=dir" in options or "rbind" in options:
        return True
    if "create=file" in options or target.lstrip("/").startswith("dev/"):
        return False
    return None


# Why a read-only bind is the tenant's all the same, by the kind of container.
_REMOUNT = "its root remounts it read-write (mount -o remount,rw,bind)"
_RO_PRIVILEGED = f"{_REMOUNT}: `ro` protects nothing in a privileged container (CAP_SYS_ADMIN)"
_RO_UNPRIVILEGED = (f"{_REMOUNT}: LXC makes the bind inside the container's own user namespace, so the kernel "
                    "does not lock it read-only (no MNT_LOCK_READONLY)")
_MP_RO_UNPRIVILEGED = ("whether the kernel locks it read-only (MNT_LOCK_READONLY) is not checked: counted as "
                       "the tenant's")


def _writable(cfg: CtConfig, items: list[tuple[str, str, str]], mounts: tuple[Mount, ...],
              facts: HostFacts | None, privileged: bool = True) -> tuple[tuple[str, str], ...]:
    """(host directory, how the container writes it) for each directory the container can
    write: its rootfs (lxc.rootfs.path, Proxmox's `rootfs:` when it is a directory, and
    /var/lib/lxc/<ct>/rootfs where LXC and Proxmox keep it), Proxmox bind mount points
    (`mpN: /host/dir,mp=...`, ro=1 too), and directories bind-mounted in by lxc.mount.entry,
    an include or an lxc.mount.fstab file (writable_mount: `ro` too). A device node under
    one of them is whatever the tenant puts there."""
    out: list[tuple[str, str]] = []
    base = posixpath.basename(cfg.path or "")
    if cfg.flavor == "pve":
        vmid = base[:-5] if base.endswith(".conf") else ""
        if vmid.isascii() and vmid.isdigit():
            out.append((f"/var/lib/lxc/{vmid}/rootfs", "the container's rootfs"))
        for key, value in cfg.items():
            if key == "rootfs" or (key.startswith("mp") and key[2:].isascii() and key[2:].isdigit()):
                volume, *opts = value.split(",")
                ro = any(o.strip() in _RO for o in opts)
                if volume.strip().startswith("/"):
                    out.append((volume.strip(), "the container's rootfs" if key == "rootfs"
                                else f"{key}: bind-mounts it read-write" if not ro
                                else f"{key}: bind-mounts it read-only (ro=1), but "
                                + (_RO_PRIVILEGED if privileged else _MP_RO_UNPRIVILEGED)))
    elif cfg.path:
        out.append((posixpath.join(posixpath.dirname(cfg.path), "rootfs"), "the container's rootfs"))
    for key, value, _ in items:
        if key != "lxc.rootfs.path" or not value.strip():
            continue
        kind, sep, rest = value.strip().partition(":")
        if not sep:
            kind, rest = "dir", value.strip()
        if kind in _ROOTFS_DIR_TYPES:
            path = rest.rsplit(":", 1)[-1] if kind.startswith("overlay") else rest
            if path.startswith("/"):
                out.append((path, "the container's rootfs (lxc.rootfs.path)"))
    for m in mounts:
        if writable_mount(m, facts):
            where = f"lxc.mount.entry at {m.origin}" if not m.origin.startswith("fstab ") else \
                f"lxc.mount.fstab ({m.origin[6:]})"
            out.append((m.source, f"{where} bind-mounts it read-write ({','.join(m.options)})" if "ro" not in m.options
                        else f"{where} bind-mounts it read-only ({','.join(m.options)}), but "
                        + (_RO_PRIVILEGED if privileged else _RO_UNPRIVILEGED)))
    roots: dict[str, str] = {}
    for p, how in out:
        p = _norm(p)
        if p not in roots and p != "/" and not p.startswith("/dev/") and p != "/dev":
            roots[p] = how
    return tuple(roots.items())


def under(path: str, roots: tuple[str, ...]) -> str | None:
    """The first of `roots` that `path` lies in (or is), else None."""
    p = _norm(path or "/")
    for root in roots:
        if p == root or p.startswith(root.rstrip("/") + "/"):
            return root
    return None


def _profile_name(catalog, node, facts) -> str | None:
    if catalog is not None:
        return catalog.profile.name
    if node is not None and node.kind == "c":
        profile = devices.profile_for_major(node.major, facts, node.minor)
        return profile.name if profile else None
    return None


def _given(mounts, devn, facts: HostFacts, writable: tuple[str, ...] = ()) -> list[Given]:
    out: list[Given] = []
    for m in mounts:
        if not m.is_bind or m.index is None or not m.source.startswith("/"):
            continue
        node = devices.resolve(m.source, facts)
        if writable and under(m.source, writable) and (node is not None or m.target.lstrip("/").startswith("dev/")):
            # a device (or what a device mount's source is now) where the tenant writes: theirs to pick
            out.append(Given(m.source, m.target, "mount", node, m.index, m.optional))
            continue
        if not m.source.startswith("/dev/") and node is None:
            continue  # a file or directory, not a device node
        catalog = devices.lookup(m.source, facts)
        is_dir = "create=dir" in m.options or m.source in devices.CATALOG_DIRS
        if is_dir and node is None:
            for sub in devices.nodes_under(m.source, facts):
                rel = sub.path[len(m.source.rstrip("/")):]
                hit = devices.lookup(sub.path, facts)
                out.append(Given(sub.path, m.target.rstrip("/") + rel, "mount", sub, m.index, m.optional,
                                 hit.profile.name if hit else None, from_dir=m.source))
            continue
        if node is None and catalog is None and not facts.nodes_known:
            continue  # a path we know nothing about, on a host snapshot without dev/
        out.append(Given(m.source, m.target, "mount", node, m.index, m.optional, _profile_name(catalog, node, facts)))
    for d in devn:
        catalog = devices.lookup(d.path, facts)
        out.append(Given(d.path, d.path.lstrip("/"), "devn", devices.resolve(d.path, facts), d.index, False,
                         catalog.profile.name if catalog else None))
    return out
