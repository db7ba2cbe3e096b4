"""Who inside an unprivileged container may open the device nodes it is given: the
render, card, kfd, video and serial nodes services use as a member of a group
(jellyfin, plex, frigate, ollama-rocm in `render`/`video`), and the fix.

    access = analyze(ctx)                      # also ctx.access, computed once
    access.nodes[0] == NodeAccess(inside="/dev/dri/renderD128", group="render", via="devn",
                                  view=NodeView(uid=0, gid=0, mode=0o660), gid=104, fix=Fix(...))
    check(ctx) -> [Finding("LXF114", "warning", ..., "inside, /dev/dri/renderD128 will be root:root 0660: "
                           "only root can open it; the container's render group cannot (add gid=104)")]

Static (config, idmap, the host node's owner and mode):
  LXF114 warning  the container's group cannot open the node (root, or another group, can)
  LXF115 error    nobody inside can open it, root included (owner and group outside the idmap)
Probe (an open tried for real as a member of the group, probe.sh "Group access"):
  LXF204 error    that open was refused (EACCES): the user, the group and the cause
  LXF205 info     root inside is refused but the group's members get in (an idmap pass-through
                  does that: the node's owner, host root, is never mapped); rules.probe then
                  leaves out its LXF201 for the node
A static finding stands where the probe did not try (no probe, no python3 or setpriv inside).

The facts (pve-container create_passthrough_device_node; the kernel's capable_wrt_inode_uidgid):
a devN node is made root:root 0660 unless uid=/gid=/mode= are given, with those ids
mapped through the container's idmap; a bind-mounted node keeps its host owner, and a
host id outside the idmap shows as nobody/nogroup inside, where root has no capability
over it. The fixes: devN gid= with the container's own gid (Proxmox VE 8.1+), else an
idmap that passes the host's group through onto the container's (plus the /etc/subgid
line root needs, written by apply only when asked: Context.asks "write-subgid"), never for a
host group that grants anything on the host (idmap.host_gid_refusal: gid 0, shadow, disk,
kmem, sudo, adm, a system gid under 100 not the node's own, any other group the host names
that is not the node's own (kvm, docker) unless the admin named it: "map-group:NAME"; the fix is then manual, a udev
rule giving the node its own group or a devN gid=, and the finding says why); mode=0666
only when asked ("mode-0666"). The container's gid comes from the probe (its /etc/group)
or the caller (the audit's ct_groups); without it the fix says how to read it and is manual.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace
from typing import Mapping

from .. import fixes
from ..bounded import excerpt
from ..ctconfig import next_devn
from ..errors import BadInput
from ..facts import _GROUP_NAME, ID_MAX, subid_allows, version_tuple
from ..idmap import OVERFLOW, PRIVILEGED_GROUPS, IdMap, NodeView, host_gid_refusal
from ..model import DeviceNode, Edit, Finding, Fix

TITLE = ("give the node a mode or group the container can use (devN: ...,gid=N,mode=0660 "
         "or 0666), or map the host group in with lxc.idmap")
ASKS = ("write-subgid", "mode-0666")
MAP_GROUP = "map-group:"  # an ask naming a host group the admin lets be mapped in: "map-group:kvm"


def checked_map_group(name: str) -> str:
    """A --map-group value: a group name (group(5)), never one that grants privileged access on
    any host (idmap.PRIVILEGED_GROUPS). BadInput (exit 2, one line) otherwise."""
    shown = excerpt(name, 40)
    if not _GROUP_NAME.fullmatch(name or ""):
        raise BadInput(f"--map-group {shown}: not a group name")
    if name in PRIVILEGED_GROUPS:
        raise BadInput(f"--map-group {name}: the host's {name} group grants privileged access on the host; "
                       "lxcfix never maps it into a container")
    return name


def named_groups(asks) -> frozenset:
    """The host groups the admin named with --map-group (asks "map-group:NAME")."""
    return frozenset(a[len(MAP_GROUP):] for a in asks if isinstance(a, str) and a.startswith(MAP_GROUP))
SUBGID = "/etc/subgid"
PVE_DEVN = ("pve-container create_passthrough_device_node: a devN node is created root:root 0660 "
            "unless uid=/gid=/mode= are given, the ids mapped through the container's idmap")
NOT_MAPPED = ("a host id outside the container's idmap shows as nobody/nogroup inside, and root inside "
              "has no capability over such a node: only its 'other' mode bits count")
REFUSED = frozenset({"EACCES"})  # what a permission check says; EPERM is the cgroup's (LXF200)


@dataclass(frozen=True)
class NodeAccess:
    """One node the container's users open as a member of `group`. view: the node as the
    container will see it (None: a bind-mounted node whose host owner is not known, a
    snapshot without dev/); gid: the container's gid of `group` (None: not known)."""

    given: object  # effective.Given
    inside: str
    group: str
    via: str  # "devn" | "mount"
    view: NodeView | None
    gid: int | None
    gid_source: str | None
    host_node: DeviceNode | None
    cause: str
    fix: Fix

    @property
    def member_can(self) -> bool | None:
        return None if self.view is None else self.view.member_can(self.gid)


@dataclass(frozen=True)
class Access:
    nodes: tuple[NodeAccess, ...] = ()
    idmap: IdMap | None = None

    def at(self, path: str) -> NodeAccess | None:
        """The node a finding names: by where it is inside, or by its host path."""
        return next((n for n in self.nodes if n.inside == path), None) or \
            next((n for n in self.nodes if n.given.path == path), None)


# ---------------------------------------------------------------- what the container sees

def container_idmap(ctx) -> IdMap | None:
    """The idmap LXC applies (None: a privileged container)."""
    eff = ctx.effective
    if not eff.unprivileged:
        return None
    if eff.idmap:
        return IdMap.parse(eff.idmap)
    return IdMap.pve_default() if ctx.config.flavor == "pve" else None


def container_gid(ctx, group: str, supplied: Mapping[str, int] | None = None) -> tuple[int | None, str | None]:
    """The container's own gid of `group`, and where it was read."""
    if supplied and isinstance(supplied.get(group), int) and 0 <= supplied[group] <= ID_MAX:
        return supplied[group], "given by the caller"
    probe = ctx.probe
    if probe is not None:
        seen = probe.access.groups.get(group)
        if seen is not None and seen.gid is not None:
            return seen.gid, "the container's /etc/group, read by the probe"
        if group in probe.groups:
            return probe.groups[group], "the container's /etc/group, read by the probe"
    own = rootfs_groups(ctx)
    if group in own:
        return own[group], "the container's /etc/group, read from its rootfs"
    return None, None


def rootfs_groups(ctx) -> dict[str, int]:
    """name -> gid from the container's own /etc/group, when its rootfs was read (lxcfix.rootfs)."""
    from ..rootfs import GROUP, groups

    seen = getattr(ctx, "rootfs", None)
    data = seen.text(GROUP) if seen is not None and seen.state == "read" else None
    return groups(data) if data is not None else {}


def _devn_id(value: str | None, default: int) -> int | None:
    if value is None:
        return default
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 10 and int(value) <= ID_MAX else None


def _devn_mode(value: str | None) -> int | None:
    if value is None:
        return 0o660
    ok = value.isascii() and 0 < len(value) <= 6 and all(c in "01234567" for c in value)
    return int(value, 8) & 0o7777 if ok else None


def _view(ctx, g, idmap: IdMap) -> tuple[NodeView | None, str]:
    """The node as the container sees it, and why (in words)."""
    if g.via == "devn":
        d = next((d for d in ctx.effective.devn if d.index == g.index), None)
        opts = d.options if d is not None else {}
        uid, gid, mode = _devn_id(opts.get("uid"), 0), _devn_id(opts.get("gid"), 0), _devn_mode(opts.get("mode"))
        if uid is None or gid is None or mode is None:
            return None, "its uid=/gid=/mode= options do not parse"
        view = NodeView(uid if idmap.to_host("u", uid) is not None else None,
                        gid if idmap.to_host("g", gid) is not None else None, mode)
        given = [f"{k}={opts[k]}" for k in ("uid", "gid", "mode") if k in opts]
        cause = ("Proxmox creates devN nodes root:root 0660 unless uid=/gid=/mode= say otherwise" if not given
                 else f"Proxmox creates the devN node with {', '.join(given)}")
        return view, cause
    node = ctx.facts.nodes.get(g.path) if ctx.facts.nodes_known else None
    if node is None:
        return None, "the host node's owner is not known"
    view = NodeView(idmap.to_ct("u", node.uid), idmap.to_ct("g", node.gid), node.mode & 0o7777)
    host = f"{'root' if node.uid == 0 else node.uid}:{node.gid} {node.mode & 0o7777:04o}"
    # Host root is never mapped into an unprivileged container: only another unmapped owner is news.
    unmapped = [f"{w} {i}" for w, i, v in (("uid", node.uid, view.uid), ("gid", node.gid, view.gid))
                if v is None and not (w == "uid" and i == 0)]
    cause = f"bind-mounted {g.path} is {host} on the host"
    if unmapped:
        cause += f"; {' and '.join(unmapped)} {'is' if len(unmapped) == 1 else 'are'} not mapped into CT {ctx.ct}"
    return view, cause


def _who(view: NodeView, group: str, gid: int | None) -> str:
    """Who can open it, in words: 'only root can open it; the container's render group cannot'."""
    side = f"the container's {group} group" + (f" (gid {gid})" if gid is not None else "")
    if view.nobody_can():
        return "nobody can open it, root included"
    can = []
    if view.root_can():
        can.append("root")
    mode = view.mode & 0o777
    if view.gid not in (None, 0) and (mode >> 3) & 6 == 6 and view.gid != gid:
        can.append(f"members of gid {view.gid}")
    who = ("only root can open it" if can == ["root"] else
           f"{' and '.join(can)} can open it" if can else "only its owner can open it")
    return f"{who}; {side} cannot"


# ---------------------------------------------------------------- the analysis

def analyze(ctx, groups: Mapping[str, int] | None = None) -> Access:
    """Every group-access node of an unprivileged container, with its fix. groups: the
    container's gids when the caller knows them (the audit's ct_groups)."""
    if not ctx.effective.unprivileged:
        return Access()
    wanted = []
    for g in _distinct(ctx.effective.given):
        if g.path in ctx.facts.not_nodes:
            continue  # no node there to open (LXF159)
        inside = "/" + g.target.lstrip("/")
        group = fixes.group_for(inside) or (fixes.group_for(g.path) if g.via == "devn" else None)
        if group is not None:
            wanted.append((g, inside, group))
    if not wanted:
        return Access()  # no render, card, kfd, video or serial node: most containers of a fleet
    idmap = container_idmap(ctx)
    if idmap is None:
        return Access()
    found = []
    for g, inside, group in wanted:
        gid, source = container_gid(ctx, group, groups)
        view, cause = _view(ctx, g, idmap)
        host_node = ctx.facts.nodes.get(g.path) if ctx.facts.nodes_known else None
        found.append(NodeAccess(g, inside, group, g.via, view, gid, source, host_node, cause, Fix(TITLE)))
    if not found:
        return Access((), idmap)
    return Access(tuple(_with_fixes(ctx, idmap, found)), idmap)


def _distinct(given) -> list:
    """The given nodes, a directory mount's /dev/dri/by-path aliases left out where the node
    itself (renderD128, card1) comes in too: one node, one fix."""
    canonical = {(g.index, g.node.major, g.node.minor) for g in given
                 if g.from_dir is not None and g.node is not None and "/by-path/" not in g.path}
    return [g for g in given if not (g.from_dir is not None and g.node is not None and "/by-path/" in g.path
                                     and (g.index, g.node.major, g.node.minor) in canonical)]


def requests(ctx) -> list[tuple[str, str]]:
    """(group, path inside) pairs the probe tries an open for: each node's group, and a
    devN's own gid= when it names one."""
    out: list[tuple[str, str]] = []
    for n in ctx.access.nodes:
        out.append((n.group, n.inside))
        if n.view is not None and n.view.gid not in (None, 0) and n.via == "devn":
            out.append((str(n.view.gid), n.inside))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------- fixes

def _placeholder(n: NodeAccess, ct: str) -> str:
    return f"<gid of group '{n.group}' in CT {ct}>"


def _read_gid_note(ctx, n: NodeAccess) -> str:
    return (f"# {_placeholder(n, ctx.ct)}: {fixes.exec_prefix(ctx.ct, ctx.config.flavor)} getent group "
            f"{n.group}   (the third field)")


def _devn_ok(ctx) -> bool:
    pve = ctx.facts.pve_version
    return ctx.config.flavor == "pve" and (not pve or version_tuple(pve) >= (8, 1))


def _with_fixes(ctx, idmap: IdMap, found: list[NodeAccess]) -> list[NodeAccess]:
    """Each node's fix, made for the container as a whole: new devN entries get
    consecutive indexes, and every node the idmap fixes shares one idmap edit."""
    asks = frozenset(getattr(ctx, "asks", ()) or ())
    style = _style(ctx)
    next_index = next_devn(ctx.config)
    by_idmap: list[NodeAccess] = []
    out: dict[int, NodeAccess] = {}
    for i, n in enumerate(found):
        if n.via == "devn" and _devn_ok(ctx):
            out[i] = replace(n, fix=_devn_fix(ctx, idmap, n, asks))
        elif n.via == "mount" and _devn_ok(ctx) and style == "devn" and ctx.requested == "devn" \
                and n.given.from_dir is None:
            out[i] = replace(n, fix=_after_migration_fix(ctx, n))
        elif n.via == "mount" and _devn_ok(ctx) and style == "devn" and _devn_can_replace(n):
            out[i] = replace(n, fix=_mount_to_devn_fix(ctx, idmap, n, f"dev{next_index}", asks))
            next_index += 1
        else:
            by_idmap.append(n)
    if by_idmap:
        shared = _idmap_fix(ctx, idmap, by_idmap, asks)
        for i, n in enumerate(found):
            if n in by_idmap:
                out[i] = replace(n, fix=shared)
    return [out[i] for i in range(len(found))]


def _style(ctx) -> str | None:
    try:
        return ctx.style[0]
    except BadInput:  # a --style this container cannot take: the plan says so; the fix takes the default
        return None


def _devn_can_replace(n: NodeAccess) -> bool:
    """A devN entry puts the node at its host path inside: only for a /dev node mounted at that same path."""
    g = n.given
    return g.path.startswith("/dev/") and "/" + g.target.lstrip("/") == g.path


def _gid_options(ctx, idmap: IdMap, n: NodeAccess, old: Mapping[str, str], asks) -> tuple[list[tuple[str, str]], bool, list[str]]:
    """devN options with the container's group (or mode=0666, when asked): (options, known, notes).
    A mode without group read-write becomes 0660; a gid outside the idmap cannot be used."""
    notes: list[str] = []
    mode = _devn_mode(old.get("mode"))
    keep_mode = "mode-0666" not in asks and mode is not None and (mode >> 3) & 6 == 6
    opts = [(k, v) for k, v in old.items() if k != "gid" and (k != "mode" or keep_mode)]
    if "mode-0666" in asks:
        if "gid" in old:
            opts.append(("gid", old["gid"]))
        return opts + [("mode", "0666")], True, notes
    if "mode" in old and not keep_mode:
        opts.append(("mode", "0660"))
    known = n.gid is not None
    if known and idmap.to_host("g", n.gid) is None:
        notes.append(f"# gid {n.gid} ({n.group}) is outside CT {ctx.ct}'s idmap: Proxmox would give the node a "
                     "host gid that shows as nogroup inside; map it, or use another group")
        known = False
    if n.gid is not None:
        gid = str(n.gid)
    else:
        gid = _placeholder(n, ctx.ct)
        notes.append(_read_gid_note(ctx, n))
    return opts + [("gid", gid)], known, notes


def _mode_note(ctx, key: str, path: str) -> str:
    return (f"# or let every user in CT {ctx.ct} open it: {key}: {path},mode=0666 "
            f"(lxcfix apply --mode-0666; any process inside, not only the {fixes.group_for(path) or 'device'} group)")


def _devn_fix(ctx, idmap: IdMap, n: NodeAccess, asks) -> Fix:
    d = next(d for d in ctx.effective.devn if d.index == n.given.index)
    opts, known, notes = _gid_options(ctx, idmap, n, d.options, asks)
    edit = Edit("replace", d.index, (fixes.devn_line(d.key, d.path, opts),))
    if "mode-0666" not in asks:
        notes.append(_mode_note(ctx, d.key, d.path))
    title = (f"let every user in CT {ctx.ct} open {n.inside}: {d.key} mode=0666" if "mode-0666" in asks else
             f"give {n.inside} the container's {n.group} group: {d.key}: ...,gid={n.gid if known else 'N'}")
    return Fix(title, (edit,), "needs-restart" if known else "manual", notes=tuple(notes))


def _mount_to_devn_fix(ctx, idmap: IdMap, n: NodeAccess, key: str, asks) -> Fix:
    g = n.given
    opts, known, notes = _gid_options(ctx, idmap, n, {}, asks)
    edits = []
    if g.from_dir is None:
        edits.append(Edit("remove", g.index))
    else:
        notes.insert(0, f"# {g.from_dir} is mounted whole: the devN entry adds {g.path} with the right group "
                        "(keep the directory mount only if other nodes in it are needed)")
    edits.append(Edit("add", lines=(fixes.devn_line(key, g.path, opts),)))
    if "mode-0666" not in asks:
        notes.append(_mode_note(ctx, key, g.path))
    title = f"pass {g.path} in as {key} with the container's {n.group} group (gid={n.gid if known else 'N'})"
    return Fix(title, tuple(edits), "needs-restart" if known else "manual", notes=tuple(notes))


def _after_migration_fix(ctx, n: NodeAccess) -> Fix:
    """--style devn asked for: the migration (rules.allowlist) turns this bind mount into a
    devN entry itself, with the host node's options; its gid must be the container's."""
    gid = str(n.gid) if n.gid is not None else _placeholder(n, ctx.ct)
    notes = [] if n.gid is not None else [_read_gid_note(ctx, n)]
    return Fix(f"once --style devn makes {n.given.path} a devN entry, give it the container's {n.group} group: "
               f"...,gid={gid} (the host's gid means another group inside)", (), "manual", notes=tuple(notes))


def _idmap_fix(ctx, idmap: IdMap, nodes: list[NodeAccess], asks) -> Fix:
    """One lxc.idmap change for every node here: each host group passed through onto the
    container's gid of the node's group. Applied when every id is known, the container's
    own lines (or Proxmox's default map) can be split, and root may map each host gid
    (/etc/subgid already says so, or the admin asked lxcfix to write it)."""
    pairs: dict[int, int | None] = {}  # host gid -> container gid
    notes: list[str] = []
    symbolic = False
    for n in nodes:
        host = n.host_node.gid if n.host_node is not None else None
        if host is None or n.gid is None:
            symbolic = True
            if n.gid is None:
                notes.append(_read_gid_note(ctx, n))
            continue
        if pairs.get(host, n.gid) != n.gid:
            symbolic = True  # one host group, two container groups: the admin picks
        pairs[host] = n.gid
    title = (f"map the host's group onto the container's {'/'.join(sorted({n.group for n in nodes}))} "
             "group with lxc.idmap")
    refused = [(n, why) for n in nodes if n.host_node is not None
               and (why := host_gid_refusal(n.host_node.gid, n.group, ctx.facts.groups, named_groups(asks))) is not None]
    if refused:
        return _refused_fix(ctx, refused)
    edits: list[Edit] = []
    lines = None
    if not symbolic and pairs:
        lines = _split(idmap, pairs)
    if lines is None:  # ids unknown, or the map cannot be split here: the classic lines, symbolic where needed
        n = nodes[0]
        host = n.host_node.gid if n.host_node is not None else None
        old, new = fixes.idmap_lines(ctx.config, n.gid, host)
        edits = [Edit("remove", i) for i in old] + [Edit("add", lines=(line,)) for line in new]
        if n.gid is None:
            notes.append(f"# C = gid of group '{n.group}' in CT {ctx.ct}")
        notes.append(f"# let root map the host group: echo '{fixes.subgid_line(host if host is not None else 'H')}' "
                     f">> {SUBGID}")
        return Fix(title, tuple(edits), "manual", notes=tuple(dict.fromkeys(notes)))
    edits, hosts = lines
    missing = [h for h in hosts if not subid_allows(ctx.facts.subgid, "root", h)]
    host_lines: tuple[tuple[str, str], ...] = ()
    applicability = "needs-restart"
    if missing and "write-subgid" in asks:
        host_lines = tuple((SUBGID, fixes.subgid_line(h)) for h in missing)
        notes.append(f"# {SUBGID} gets {', '.join(fixes.subgid_line(h) for h in missing)} (backed up, in the "
                     "same transaction)")
    elif missing:
        applicability = "manual"
        notes += [f"# let root map the host group: echo '{fixes.subgid_line(h)}' >> {SUBGID}" for h in missing]
        notes.append(f"#   (or: lxcfix apply --ct {ctx.ct} --write-subgid, which writes it with a backup)")
    notes.append("# or on the host: a udev rule giving the node mode 0666 (every user of every container "
                 "that gets it can open it)")
    return Fix(title, tuple(edits), applicability, notes=tuple(notes), host_lines=host_lines)


def _refused_fix(ctx, refused: list[tuple[NodeAccess, str]]) -> Fix:
    """No idmap and no /etc/subgid line for a host group that grants something on the host:
    the safe ways instead, and why (manual: nothing is written)."""
    notes: list[str] = []
    for n, why in refused:
        gid = str(n.gid) if n.gid is not None else _placeholder(n, ctx.ct)
        node = posixpath.basename(n.given.path)
        notes.append(f"# {n.given.path}: {why}; lxcfix never maps it into CT {ctx.ct} (no lxc.idmap line, no "
                     f"{SUBGID} line): the container's root would own files of that group on the host, "
                     "setgid ones included")
        if ctx.config.flavor == "pve":
            notes.append(f"# instead: pass the node as devN with the container's own group, e.g. "
                         f"devN: {n.given.path},gid={gid},mode=0660 (Proxmox creates it with that group inside)")
        notes.append(f"# or on the host: a udev rule giving the node a group of its own, e.g. "
                     f"/etc/udev/rules.d/70-{node}.rules: KERNEL==\"{node}\", GROUP=\"{n.group}\", MODE=\"0660\" "
                     f"(udevadm trigger), then map that group (lxcfix plans it)")
        if n.gid is None:
            notes.append(_read_gid_note(ctx, n))
    title = (f"give {', '.join(sorted({n.inside for n, _ in refused}))} a group of its own on the host (udev) "
             "or a devN gid=: its host group is not one to map into a container")
    return Fix(title, (), "manual", notes=tuple(dict.fromkeys(notes)))


def _split(idmap: IdMap, pairs: Mapping[int, int]) -> tuple[list[Edit], list[int]] | None:
    """Edits that pass each host gid through onto its container gid, and the host gids
    that get newly mapped; None when not possible."""
    current: IdMap | None = idmap
    for host, ct in sorted(pairs.items(), key=lambda p: p[1]):
        current = current.split_at(ct, host) if current is not None else None
    if current is None:
        return None
    changed = [h for h, c in pairs.items() if idmap.to_host("g", c) != h]
    if current.ranges == idmap.ranges:
        return [], []
    if idmap.default:  # a custom map replaces Proxmox's default one: all of it, u lines too
        return [Edit("add", lines=tuple(fixes.idmap_line(t) for t in current.lines()))], changed
    edits = []
    for old in idmap.of("g"):  # each g line of the config becomes the pieces cut from it
        pieces = [r.text() for r in current.of("g") if r.index == old.index]
        if pieces != [old.text()]:
            both = [r.text() for r in idmap.of("u") if r.index == old.index]  # a `b` line maps uids too
            edits.append(Edit("replace", old.index, tuple(fixes.idmap_line(t) for t in both + pieces)))
    return edits, changed


def group_access_fix(ctx, device: str, gid: int | None, title: str = TITLE) -> Fix:
    """The fix that lets the container's users open `device` (LXF201's, the audit's): the
    analysis's, with `gid` as the container's gid of the node's group when the caller knows it."""
    group = fixes.group_for(device)
    n = analyze(ctx, {group: gid} if group and gid is not None else None).at(device)
    if n is None:
        given = given_at(ctx, device)
        inside = "/" + given.target.lstrip("/") if given is not None else device
        n = analyze(ctx, {group: gid} if group and gid is not None else None).at(inside)
    if n is not None:
        return n.fix._replace(title=title) if title != TITLE else n.fix
    return Fix(title)


def given_at(ctx, path: str):
    """The given device a finding names: by host path, or by where it appears inside."""
    for g in ctx.effective.given:
        if g.path == path or "/" + g.target.lstrip("/") == path:
            return g
    return None


# ---------------------------------------------------------------- findings

def check(ctx, access: Access | None = None) -> list[Finding]:
    """access: another analysis of this container (analyze(ctx, groups) with the caller's gids)."""
    access = access if access is not None else ctx.access
    out: list[Finding] = []
    for n in access.nodes:
        tried = ctx.probe.access.tried(n.inside, n.group) if ctx.probe is not None else None
        if tried is not None and tried.open != "untried":
            out += _probed(ctx, access, n, tried)
            continue
        f = _static(ctx, access, n, tried)
        if f is not None:
            out.append(f)
    return out


def _evidence(ctx, access: Access, n: NodeAccess) -> list[str]:
    g = n.given
    ev = [f"{ctx.config.path}:{g.index + 1}"]
    if n.via == "devn":
        ev.append(PVE_DEVN)
    elif n.host_node is not None:
        ev.append(f"on the host: {g.path} is {n.host_node.uid}:{n.host_node.gid} {n.host_node.mode & 0o7777:04o}")
    m = access.idmap
    if m is not None:
        ranges = ", ".join(r.text() for r in m.of("g"))
        ev.append(f"gid map of CT {ctx.ct}: {ranges}" + (" (Proxmox's default for unprivileged: 1)" if m.default else ""))
    if n.view is not None and (n.view.uid is None or n.view.gid is None):
        ev.append(NOT_MAPPED)
    why = host_gid_refusal(n.host_node.gid, n.group, ctx.facts.groups,
                           named_groups(getattr(ctx, "asks", ()) or ())) if n.host_node is not None \
        and n.via == "mount" else None
    if why:
        ev.append(f"{why}: lxcfix never maps it into a container (no lxc.idmap, no {SUBGID} line); "
                  "a udev rule giving the node a group of its own, or a devN gid=, instead")
    if n.gid is not None:
        ev.append(f"the container's {n.group} group is gid {n.gid} ({n.gid_source})")
    if ctx.probe is not None:
        seen = ctx.probe.access.groups.get(n.group)
        if seen is not None and seen.gid is None:
            ev.append(f"the container has no '{n.group}' group in /etc/group: create it and put the service user in it")
        elif seen is not None and seen.members:
            ev.append(f"members of {n.group}: {', '.join(m for m, _ in seen.members)}")
        owner = ctx.probe.access.owners.get(n.inside)
        if owner is not None:
            ev.append(f"stat inside: {n.inside} is {_stat_shown(owner)} ({owner.uid}:{owner.gid})")
    return ev


def _stat_shown(owner) -> str:
    """What stat() saw inside, in words: the overflow id is an unmapped host id."""
    return NodeView(None if owner.uid == OVERFLOW else owner.uid,
                    None if owner.gid == OVERFLOW else owner.gid, owner.mode).shown()


def _static(ctx, access: Access, n: NodeAccess, tried) -> Finding | None:
    if n.view is None or n.member_can is not False:
        return None
    nobody = n.view.nobody_can()
    code = "LXF115" if nobody else "LXF114"
    will = "will be" if n.via == "devn" else "is"
    gid = n.gid if n.gid is not None else "N"
    hint = f" (add gid={gid})" if n.via == "devn" and not nobody else ""
    if n.via == "devn":
        message = f"inside, {n.inside} {will} {n.view.shown()}: {_who(n.view, n.group, n.gid)}{hint}"
    else:
        message = f"{n.cause}, so inside {n.inside} is {n.view.shown()} and {_who(n.view, n.group, n.gid)}"
    evidence = _evidence(ctx, access, n)
    if tried is not None:
        evidence.append(f"the probe could not try it as a {n.group} member: {tried.why or 'unknown'}"
                        + (" (no python3 or setpriv inside)" if tried.why == "no-python3-or-setpriv" else ""))
    return ctx.finding(code, message, device=n.inside, evidence=tuple(evidence), fix=n.fix,
                       line=n.given.index + 1)


def _probed(ctx, access: Access, n: NodeAccess, tried) -> list[Finding]:
    who = f"{tried.user} (uid {tried.uid})" if tried.user else f"uid {tried.uid}"
    as_ = f"as {who} in group {n.group} (gid {tried.gid})"
    if tried.open in REFUSED:
        owner = ctx.probe.access.owners.get(n.inside)
        if n.view is not None:
            shown = n.view.shown()
            cause = f"inside it is {shown}: {n.cause}" if n.via == "devn" else f"{n.cause}, so inside it is {shown}"
        elif owner is not None:
            cause = f"inside it is {_stat_shown(owner)} (stat inside)"
        else:
            cause = "the node's owner, group or mode keeps the group out"
        evidence = [f"tried for real ({tried.via}): a child process dropped to uid {tried.uid}, gid {tried.gid} "
                    f"and opened {n.inside} read-write: {tried.open}", *_evidence(ctx, access, n)]
        return [ctx.finding("LXF204", f"{as_}, open {n.inside} gives {tried.open}: {cause}",
                            device=n.inside, evidence=tuple(evidence), fix=n.fix, line=n.given.index + 1)]
    if root_refusal_expected(ctx, n.inside):
        return [ctx.finding(
            "LXF205",
            f"root inside cannot open {n.inside} (its owner, host root, is not mapped: {n.cause}), but members "
            f"of {n.group} can ({as_}: {tried.open}): services running in the {n.group} group work; root's own "
            "tools do not",
            device=n.inside, evidence=tuple(_evidence(ctx, access, n)), line=n.given.index + 1)]
    return []


def root_refusal_expected(ctx, inside: str) -> bool:
    """The probe's root open of `inside` got EACCES, and a member of the node's group got in:
    the state an idmap pass-through leaves (rules.probe leaves its LXF201 out then)."""
    if ctx.probe is None:
        return False
    node = ctx.probe.nodes.get(inside)
    n = ctx.access.at(inside)
    if node is None or node.open != "EACCES" or n is None:
        return False
    tried = ctx.probe.access.tried(inside, n.group)
    return tried is not None and tried.open not in REFUSED and tried.open not in ("untried", "EPERM")
