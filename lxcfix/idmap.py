"""A container's user namespace id map, and who inside may open a device node. Pure.

    m = IdMap.parse([("u 0 100000 65536", 3), ("g 0 100000 65536", 4)])
    m.to_host("g", 104) == 100104          m.to_ct("g", 104) is None     (host gid 104: not mapped)
    m.split_at(ct_gid=104, host_gid=44).lines()
        -> ["u 0 100000 65536", "g 0 100000 104", "g 104 44 1", "g 105 100105 65431"]   (the g pieces: line 4)

    view = NodeView(uid=None, gid=None, mode=0o660)      # host root:44 0660, neither id mapped
    view.shown() == "nobody:nogroup 0660";  view.root_can() is False;  view.member_can(104) is False

`lxc.idmap = <u|g|b> <first id inside> <first id on the host> <count>`: ids inside
[first, first + count) are host ids [host, host + count). A host id outside every
range shows as the overflow id (65534, nobody/nogroup) inside, and root inside has
no capability over an inode whose owner or group is not mapped
(capable_wrt_inode_uidgid): only the mode's "other" bits count for it then.
Values come from configs we did not write: every parse is total and reads ASCII
digits of bounded length only; a line that does not parse is listed in `bad`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, NamedTuple

ID_MAX = (1 << 32) - 1
OVERFLOW = 65534  # /proc/sys/kernel/overflow{u,g}id: what an unmapped id shows as
RW = 0o6  # open(O_RDWR) needs read and write bits
_LINE = re.compile(r"([ugb]) ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10})")

# What Proxmox gives an unprivileged container without lxc.idmap lines (PVE::LXC::parse_id_maps).
PVE_DEFAULT = ("u 0 100000 65536", "g 0 100000 65536")


class Range(NamedTuple):
    kind: str  # "u" or "g" ("b" lines are split into both)
    ct: int
    host: int
    count: int
    index: int | None = None  # the line of the container's own config; None: an include or a default

    def text(self) -> str:
        return f"{self.kind} {self.ct} {self.host} {self.count}"


@dataclass(frozen=True)
class IdMap:
    ranges: tuple[Range, ...] = ()
    bad: tuple[str, ...] = ()
    default: bool = False  # Proxmox's implied map: no lxc.idmap lines in the config

    @classmethod
    def parse(cls, lines: Iterable[tuple[str, int | None]], default: bool = False) -> "IdMap":
        """(value, config line index | None) pairs of `lxc.idmap` lines, in order."""
        ranges: list[Range] = []
        bad: list[str] = []
        for value, index in lines:
            m = _LINE.fullmatch(" ".join(str(value).split()))
            if m is None:
                bad.append(str(value)[:80])
                continue
            ct, host, count = (int(m.group(i)) for i in (2, 3, 4))
            if count == 0 or ct + count - 1 > ID_MAX or host + count - 1 > ID_MAX:
                bad.append(str(value)[:80])
                continue
            for kind in (("u", "g") if m.group(1) == "b" else (m.group(1),)):
                ranges.append(Range(kind, ct, host, count, index))
        return cls(tuple(ranges), tuple(bad), default)

    @classmethod
    def pve_default(cls) -> "IdMap":
        return cls.parse(((v, None) for v in PVE_DEFAULT), default=True)

    def of(self, kind: str) -> list[Range]:
        return [r for r in self.ranges if r.kind == kind]

    def to_host(self, kind: str, ct_id: int) -> int | None:
        for r in self.of(kind):
            if r.ct <= ct_id < r.ct + r.count:
                return r.host + ct_id - r.ct
        return None

    def to_ct(self, kind: str, host_id: int) -> int | None:
        for r in self.of(kind):
            if r.host <= host_id < r.host + r.count:
                return r.ct + host_id - r.host
        return None

    @property
    def root_on_host(self) -> int | None:
        """The host uid the container's root runs as."""
        return self.to_host("u", 0)

    def split_at(self, ct_gid: int, host_gid: int) -> "IdMap | None":
        """The map with the host's group `host_gid` passed through onto the container's
        `ct_gid`: the g range holding ct_gid cut around it (the classic idmap for a render
        group); each piece keeps the config line it came from. Itself when that is mapped
        already; None when it cannot be done with the container's own lines: ct_gid in no
        range, host_gid mapped to another gid already, or the range from an include."""
        if self.to_host("g", ct_gid) == host_gid:
            return self
        if self.to_ct("g", host_gid) is not None:
            return None
        ranges = list(self.ranges)
        pos = next((i for i, r in enumerate(ranges) if r.kind == "g" and r.ct <= ct_gid < r.ct + r.count), None)
        if pos is None or (ranges[pos].index is None and not self.default):
            return None
        r = ranges[pos]
        before, after = ct_gid - r.ct, r.ct + r.count - ct_gid - 1
        pieces = [Range("g", r.ct, r.host, before, r.index)] if before else []
        pieces.append(Range("g", ct_gid, host_gid, 1, r.index))
        if after:
            pieces.append(Range("g", ct_gid + 1, r.host + before + 1, after, r.index))
        return IdMap(tuple(ranges[:pos] + pieces + ranges[pos + 1:]), self.bad, self.default)

    def lines(self) -> list[str]:
        return [r.text() for r in self.ranges]


# Host groups that grant something on the host (Debian's reserved ones, base-passwd): mapped
# into a container, its root owns files of that group on the host (setgid ones included).
# Looked up by name in the host's /etc/group, and by these usual Debian gids.
PRIVILEGED_GROUPS = {"root": 0, "adm": 4, "disk": 6, "kmem": 15, "sudo": 27, "shadow": 42}
# The static Debian gids of groups a device node may have as its own (render is dynamic, >= 100).
DEDICATED_GIDS = {"dialout": 20, "video": 44}
SYSTEM_GID_MAX = 99  # Debian: 0-99 are base-passwd's static system groups


def host_gid_refusal(gid: int, node_group: str | None, host_groups: dict | None = None,
                     named: Iterable[str] = ()) -> str | None:
    """Why the host's group `gid` must never be mapped into a container (None: it may be).

    Refused: gid 0; the groups Debian reserves for privileged access (root, adm, disk, kmem,
    sudo, shadow), by their name in the host's /etc/group (`host_groups`, {name: gid}, None
    when it could not be read) and by their usual gids, whatever the admin names; any other
    gid under 100 unless it is the node's own group (`node_group`: render, video, dialout), by
    name, or by its Debian gid where the host's names are not known; and any group the host's
    /etc/group names that is not the node's own (kvm, docker, systemd-journal, ssl-cert: each
    grants something on the host), unless the admin named it (`named`: `--map-group NAME`).
    A gid the host's /etc/group does not name is no group of the host's: it may be mapped."""
    names = {g: n for n, g in (host_groups or {}).items() if isinstance(g, int)}
    name = names.get(gid)
    if gid == 0:
        return "host gid 0 is the host's root group"
    for priv, usual in PRIVILEGED_GROUPS.items():
        if (host_groups or {}).get(priv) == gid or (usual == gid and (name is None or name == priv)):
            return f"host gid {gid} is the host's {priv} group, which grants privileged access on the host"
    if name in PRIVILEGED_GROUPS:
        return f"host gid {gid} is the host's {name} group, which grants privileged access on the host"
    own = node_group is not None and (name == node_group or (name is None and DEDICATED_GIDS.get(node_group) == gid))
    if own or (name is not None and name in set(named)):
        return None
    if gid <= SYSTEM_GID_MAX:
        shown = f" ({name})" if name else ""
        return (f"host gid {gid}{shown} is a system group (under 100), not the node's own "
                f"{node_group or 'device'} group")
    if name is not None:
        return (f"host gid {gid} is the host's {name} group, not the node's own {node_group or 'device'} group: "
                f"mapped in, the container's root gets {name}'s access on the host (map it only if you mean "
                f"it: --map-group {name})")
    return None


@dataclass(frozen=True)
class NodeView:
    """A device node as the container sees it. uid/gid: the ids inside; None when the
    host id behind it is not mapped (shown as nobody/nogroup). mode: permission bits."""

    uid: int | None
    gid: int | None
    mode: int

    def shown(self, group_names: dict[int, str] | None = None) -> str:
        user = "nobody" if self.uid is None else "root" if self.uid == 0 else str(self.uid)
        names = group_names or {}
        group = "nogroup" if self.gid is None else "root" if self.gid == 0 else names.get(self.gid, str(self.gid))
        return f"{user}:{group} {self.mode & 0o7777:04o}"

    def _bits(self, uid: int, gids: Iterable[int]) -> int:
        mode = self.mode & 0o777
        if self.uid is not None and uid == self.uid:
            return (mode >> 6) & 7
        if self.gid is not None and self.gid in set(gids):
            return (mode >> 3) & 7
        return mode & 7

    def root_can(self) -> bool:
        """Root inside: capabilities over the inode only when owner and group are both mapped."""
        if self.uid is not None and self.gid is not None:
            return True
        return self._bits(0, (0,)) & RW == RW

    def member_can(self, gid: int | None, uid: int | None = None) -> bool | None:
        """A user (not root, not the owner unless `uid` says so) in group `gid`: can it open
        the node read-write? None when that cannot be told (gid unknown, node group mapped)."""
        if gid is None:
            if self.gid not in (None, 0) and self.mode & 0o777 & (RW << 3) == RW << 3:
                return None  # some group inside can; whether it is the right one needs the gid
            return self._bits(-1 if uid is None else uid, ()) & RW == RW
        return self._bits(-1 if uid is None else uid, (gid,)) & RW == RW

    def nobody_can(self) -> bool:
        """Not root, not the owner, not the node's group, not anyone else."""
        mode = self.mode & 0o777
        owner = self.uid is not None and (mode >> 6) & RW == RW
        group = self.gid is not None and (mode >> 3) & RW == RW
        return not (self.root_can() or owner or group or mode & RW == RW)
