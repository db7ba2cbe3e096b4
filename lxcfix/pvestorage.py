"""Proxmox VE's storage.cfg and where a container's root volume lies on the host. Pure.

    cfg = parse(text_of_etc_pve_storage_cfg)
    cfg.stores["local-zfs"] == Store("zfspool", "local-zfs", {"pool": "rpool/data", "sparse": "", ...})
    locate(cfg, "200", "local-zfs:subvol-200-disk-0,size=8G", mountpoints)
        -> Volume("dir", "/rpool/data/subvol-200-disk-0", "local-zfs", "zfspool")
    locate(cfg, "200", "local-lvm:vm-200-disk-0,size=8G", ...)
        -> Volume("block", "/dev/pve/vm-200-disk-0", "local-lvm", "lvmthin")
    locate(cfg, "200", "local:200/vm-200-disk-0.raw,size=8G", ...)
        -> Volume("image", "/var/lib/vz/images/200/vm-200-disk-0.raw", "local", "dir")
    locate(cfg, "200", "ceph:vm-200-disk-0", ...)
        -> Volume("none", "", "ceph", "rbd", why="... not mapped on this host ...")

kind: "dir" (read in place), "image" (a file holding a file system: mounted read-only through a
loop device), "block" (a block device: mounted read-only), "none" (why says what was not checked).

The file format is pve-common's PVE/SectionConfig.pm parse_config, as pve-storage's
PVE/Storage/Plugin.pm registers it for storage.cfg: a section starts at column 0 with
`TYPE: ID`, its options follow on indented lines `key value` (a key alone is a true flag,
`sparse`), a blank line or the next header ends it, `#` lines are comments. Plugin.pm's
parse_config adds `dir: local` (path /var/lib/vz) when the file lacks a storage named local.

Where each type keeps a volume (each plugin's path()/filesystem_path()):
- dir, nfs, cifs, glusterfs (Plugin.pm filesystem_path): `VMID/NAME` is PATH/images/VMID/NAME; a
  NAME of format subvol (`subvol-...`) is a directory, raw/qcow2/vmdk a file (only raw is a file
  system lxcfix mounts). nfs and cifs default PATH to /mnt/pve/ID (NFSPlugin/CIFSPlugin).
- btrfs (BTRFSPlugin.pm filesystem_path): a subvol is PATH/images/VMID/NAME; a raw volume
  lives in the subvolume PATH/images/VMID/NAME/disk.raw.
- zfspool (ZFSPoolPlugin.pm path): a subvol- dataset is mounted at MOUNTPOINT/NAME, MOUNTPOINT
  the `mountpoint` option or /POOL; it counts only where the mount table has it.
- lvm, lvmthin (LVMPlugin.pm / LvmThinPlugin.pm path): /dev/VGNAME/NAME.
- rbd (RBDPlugin.pm path, krbd): /dev/rbd/POOL/NAME (POOL default rbd) once mapped; lxcfix
  never maps one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from .bounded import excerpt

MAX_SECTIONS = 4096
_HEADER = re.compile(r"([a-z][a-z0-9_\-]{0,31}):[ \t]*([A-Za-z0-9][A-Za-z0-9_.:\-]{0,99})[ \t]*")
_OPTION = re.compile(r"[ \t]+([a-z][a-z0-9_\-]{0,63})(?:[ \t]+(.*?))?[ \t]*")
# PVE::Storage::parse_volume_id
_VOLID = re.compile(r"([a-z][a-z0-9_.\-]*[a-z0-9]):(.+)")
_VMID = re.compile(r"[1-9][0-9]{2,8}")
FILE_TYPES = ("dir", "nfs", "cifs", "glusterfs")


@dataclass(frozen=True)
class Store:
    type: str
    id: str
    options: Mapping[str, str] = field(default_factory=dict)

    def nodes(self) -> tuple[str, ...] | None:
        """The nodes the storage is limited to (`nodes` option); None: every node."""
        text = self.options.get("nodes", "").strip()
        return tuple(n for n in re.split(r"[,;\s]+", text) if n) or None if text else None

    @property
    def shared(self) -> bool:
        """Shared by nature (nfs, cifs, rbd, ...) or by the `shared` flag."""
        return self.type in ("nfs", "cifs", "glusterfs", "rbd", "cephfs", "iscsi", "iscsidirect", "pbs") \
            or self.options.get("shared", "0") not in ("0", "")

    @property
    def disabled(self) -> bool:
        return "disable" in self.options and self.options["disable"] not in ("0",)


@dataclass(frozen=True)
class StorageCfg:
    stores: Mapping[str, Store]
    bad: tuple[str, ...] = ()  # lines lxcfix does not read (excerpted, with their line number)


@dataclass(frozen=True)
class Volume:
    kind: str  # "dir" | "image" | "block" | "none"
    path: str = ""
    store: str = ""
    type: str = ""
    why: str = ""


def sections(text: str) -> tuple[tuple[Store, ...], tuple[str, ...]]:
    """Any of Proxmox's section config files (storage.cfg, ha/groups.cfg, ha/resources.cfg,
    ha/rules.cfg), totally: every line is a header, an option, blank, a comment, or listed in
    the second item (never raised). An option before any header is bad; a second section with
    an ID already seen is bad (SectionConfig warns and keeps the first)."""
    stores: dict[str, Store] = {}
    bad: list[str] = []
    current: tuple[str, str, dict] | None = None

    def close():
        if current is not None and current[1] not in stores and len(stores) < MAX_SECTIONS:
            stores[current[1]] = Store(current[0], current[1], dict(current[2]))

    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            if not line.strip():
                close()
                current = None
            continue
        m = _HEADER.fullmatch(line)
        if m:
            close()
            if m.group(2) in stores:
                bad.append(f"line {n}: section {m.group(2)} defined twice")
                current = None
                continue
            current = (m.group(1), m.group(2), {})
            continue
        o = _OPTION.fullmatch(line)
        if o and current is not None:
            current[2].setdefault(o.group(1), o.group(2) if o.group(2) is not None else "1")
            continue
        bad.append(f"line {n}: {excerpt(line, 60)}")
    close()
    return tuple(stores.values()), tuple(bad[:16])


def parse(text: str) -> StorageCfg:
    """storage.cfg (sections()); `local` added when missing, as Plugin.pm's parse_config does."""
    found, bad = sections(text)
    stores = {s.id: s for s in found}
    if "local" not in stores:
        stores["local"] = Store("dir", "local", {"path": "/var/lib/vz"})
    return StorageCfg(stores, bad)


def volume_of(rootfs: str) -> tuple[str, str] | None:
    """(storage id, volume name) of a `rootfs:` value (`local-lvm:vm-200-disk-0,size=8G`);
    None for an absolute path (a bind rootfs: a directory) or a value that is neither."""
    head = rootfs.split(",", 1)[0].strip()
    if head.startswith("volume="):
        head = head[len("volume="):]
    m = _VOLID.fullmatch(head)
    return (m.group(1), m.group(2)) if m else None


def mountpoints(mountinfo: str) -> frozenset:
    """The mount points of /proc/self/mountinfo (octal escapes decoded), bounded by its text."""
    out = set()
    for line in mountinfo.split("\n"):
        fields = line.split(" ")
        if len(fields) > 5:
            out.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return frozenset(out)


def _safe(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_.+\-]{1,200}", name)) and name not in (".", "..")


def locate(cfg: StorageCfg, vmid: str, rootfs: str, mounted: frozenset | None = None) -> Volume:
    """Where the volume of a `rootfs:` value lies on this host (module docstring). `mounted`:
    the host's mount points (mountpoints()); None when unknown (a snapshot), then a ZFS
    dataset's directory is taken as it is."""
    head = rootfs.split(",", 1)[0].strip()
    if head.startswith("volume="):
        head = head[len("volume="):]
    if head.startswith("/"):
        return Volume("dir", head, "", "bind")
    vol = volume_of(rootfs)
    if vol is None:
        return Volume("none", why=f"rootfs {excerpt(head, 80)!s} is not a volume lxcfix can read")
    sid, name = vol
    store = cfg.stores.get(sid)
    if store is None:
        return Volume("none", store=sid, why=f"storage {sid} is not in storage.cfg")
    t = store.type
    if store.disabled:
        return Volume("none", store=sid, type=t, why=f"storage {sid} is disabled")

    def none(why: str) -> Volume:
        return Volume("none", store=sid, type=t, why=why)

    if t in FILE_TYPES or t == "btrfs":
        m = re.fullmatch(r"(\d+)/([^/]+)", name)
        if not m or not _safe(m.group(2)) or m.group(1) != vmid:
            return none(f"volume {excerpt(name, 80)} of {t} storage {sid} is not VMID/NAME of CT {vmid}")
        base = store.options.get("path") or (f"/mnt/pve/{sid}" if t in ("nfs", "cifs", "glusterfs") else "")
        if not base.startswith("/"):
            return none(f"{t} storage {sid} has no path")
        path = f"{base.rstrip('/')}/images/{vmid}/{m.group(2)}"
        fname = m.group(2)
        if fname.startswith(("subvol-", "basevol-")):
            return Volume("dir", path, sid, t)
        if fname.endswith(".raw"):
            return Volume("image", f"{path}/disk.raw" if t == "btrfs" else path, sid, t)
        return none(f"volume {fname} is not raw (qcow2/vmdk are not mounted by lxcfix)")
    if t == "zfspool":
        if not re.fullmatch(r"(?:(?:base|basevol)-\d+-[^/]+/)?((?:subvol|basevol)-\d+-[^/]+)", name) \
                or not _safe(name.rsplit("/", 1)[-1]):
            return none(f"volume {excerpt(name, 80)} on zfspool {sid} is not a subvol- dataset")
        pool = store.options.get("pool", "")
        mp = store.options.get("mountpoint") or (f"/{pool}" if pool else "")
        if not mp.startswith("/"):
            return none(f"zfspool {sid} has no pool")
        path = f"{mp.rstrip('/')}/{name.rsplit('/', 1)[-1]}"
        if mounted is not None and path not in mounted:
            return none(f"the ZFS dataset {pool}/{name.rsplit('/', 1)[-1]} is not mounted at {path} "
                        "(`zfs mount` it, or `pct mount " + vmid + "`)")
        return Volume("dir", path, sid, t)
    if t in ("lvm", "lvmthin"):
        vg = store.options.get("vgname", "")
        if not _safe(vg) or not _safe(name):
            return none(f"volume {excerpt(name, 80)} on {t} storage {sid} has no volume group or a bad name")
        return Volume("block", f"/dev/{vg}/{name}", sid, t)
    if t == "rbd":
        pool = store.options.get("pool", "rbd")
        if not _safe(pool) or not _safe(name):
            return none(f"volume {excerpt(name, 80)} on rbd storage {sid} has a bad name")
        return Volume("block", f"/dev/rbd/{pool}/{name}", sid, t,
                      why=f"RBD image {pool}/{name} is not mapped on this host")
    return none(f"storage {sid} is of type {excerpt(t, 30)}, which lxcfix does not read")


def vmid_ok(vmid: str) -> bool:
    return bool(_VMID.fullmatch(vmid))
