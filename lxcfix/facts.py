"""Host facts: each fact names what it reads or runs, plus a pure parse.

    FACTS["nvidia_driver"] == Fact(parse_nvidia_version, read="/proc/driver/nvidia/version")
    parse_nvidia_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ...") == "580.159.04"
    parse_cgroup_layout(mountinfo_text) in ("v2", "hybrid", "v1", "unknown")
    FACTS["pveversion"].to_json(("8.3.0", "5.2.2", "6.0.0-1"))
        == {"manager": "8.3.0", "container": "5.2.2", "lxc_pve": "6.0.0-1"}

gather.py does the reading; everything here is data in, data out. The text comes from
hosts and containers we do not trust, so every parse is total (any str in, a value out,
never an exception) and reads only ASCII digits of bounded length: str.isdigit() accepts
"²" (int() then raises) and int() takes "٥" or "1_0"; a 5,000-digit number is garbage,
not a major. tests/unit/fixtures/facts/<fact>/<case>.json holds one case per file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Sequence

from .bounded import excerpt, uint
from .devices import KNOWN_OUT_OF_TREE, parse_proc_devices
from .model import ConfigWrite, DeviceNode, DkmsModule, LoadedModule, Storage

MAJOR_MAX = (1 << 12) - 1  # Linux dev_t: 12-bit major, 20-bit minor
MINOR_MAX = (1 << 20) - 1
ID_MAX = (1 << 32) - 1  # uid_t / gid_t
PATH_MAX = 4096

# A dotted version, ASCII digits, at most 6 per part and 4 parts. The lookarounds keep it
# from starting or stopping inside a longer number: "8.9999999999" is no version, not "8.999999".
_PART = r"[0-9]{1,6}"
_END = r"(?![0-9]|\.[0-9])"
_VERSION = rf"(?<![0-9.]){_PART}(?:\.{_PART}){{1,3}}{_END}"


def _identity(value):
    return value


@dataclass(frozen=True)
class Fact:
    """A file to read or a command to run (argv), and the pure parse of its text.

    backends: where the fact exists ("pve" hosts have pveversion, plain LXC hosts do not).
    to_json: the parsed value as JSON data (what the fixtures' "expected" holds).
    """

    parse: Callable[[str], object]
    read: str | None = None
    run: Sequence[str] | None = None
    backends: tuple[str, ...] = ("pve", "lxc")
    to_json: Callable[[object], object] = _identity
    each: str | None = None  # "kernel" | "dev": the path names one of many ({kernel}, {dev}); gather picks which


_uint = uint  # the one bounded number reader: lxcfix.bounded.uint


def _proc_devices_line_ok(s: str) -> bool:
    if not s or s.startswith(("Character devices", "Block devices")):
        return True
    parts = s.split(None, 1)
    return (len(parts) == 2 and uint(parts[0], 10, 4, MAJOR_MAX) is not None
            and len(parts[1]) <= 64 and parts[1].isprintable())


def proc_devices_problems(text: str) -> list[str]:
    """The lines of a /proc/devices text the kernel cannot have written, as "line N: '...'"
    (escaped, the first 80 bytes): a saved or snapshot copy that is not one. The kernel's own
    has none; gather refuses facts with any (FactsFailed), rather than judge by a guess."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not _proc_devices_line_ok(line.strip()):
            out.append(f"line {i}: '{excerpt(line)}'")
    return out


def parse_proc_devices_checked(text: str) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """devices.parse_proc_devices over only the lines it can read safely: the section
    headers, blank lines, and `<major> <name>` with a major of 1-4 ASCII digits up to 4095
    and a printable name of at most 64 characters. Anything else is dropped."""
    kept = [s for line in text.splitlines() if _proc_devices_line_ok(s := line.strip())]
    # Lines were split with splitlines() as parse_proc_devices splits them: it sees these same lines.
    return parse_proc_devices("\n".join(kept))


def parse_nvidia_version(text: str) -> str | None:
    # `[^ \t\n]`, not `[^ \n]`: a tab in the platform's name overlapped the `[ \t]+` after it, and
    # a file of tabs took quadratic time (40k: 9 s); the platform never holds one.
    m = re.search(rf"Kernel Module(?: for [^ \t\n]+)?[ \t]+({_PART}(?:\.{_PART}){{1,2}}){_END}", text)
    if m:
        return m.group(1)
    m = re.search(rf"(?<![0-9A-Za-z_.])([0-9]{{3}}(?:\.{_PART}){{1,2}}){_END}", text)
    return m.group(1) if m else None


def parse_cgroup_layout(mountinfo: str) -> str:
    """v2: cgroup2 at /sys/fs/cgroup; hybrid: v1 controllers plus a cgroup2
    mount (usually /sys/fs/cgroup/unified); v1: controllers only.

    The kernel ends lines with "\\n" and escapes spaces in paths as \\040, so lines split
    on "\\n" and fields on " " only (splitlines() would also split on "\\x85" or "\\u2028",
    which a mount point may contain)."""
    v1 = False
    v2_root = False
    v2_other = False
    for line in mountinfo.split("\n"):
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split(" ")
        fstype = right.split(" ", 1)[0]
        if len(fields) < 5:
            continue
        mountpoint = fields[4]
        if fstype == "cgroup2":
            if mountpoint == "/sys/fs/cgroup":
                v2_root = True
            else:
                v2_other = True
        elif fstype == "cgroup":
            v1 = True
    if v2_root and not v1:
        return "v2"
    if v1 and (v2_other or v2_root):
        return "hybrid"
    if v1:
        return "v1"
    return "unknown"


# A Debian package version as pveversion prints it: "6.0.5-2", "5.0.2-4", "6.0.4-pve1".
# The whole rest of the line: "6.0.5-2; rm -rf /" or "6.0.5-2²" is no version.
_PKG_VERSION = r"[0-9]{1,6}(?:\.[0-9]{1,6}){1,3}(?:-[A-Za-z0-9.+~]{1,32})?(?=[ \t]*$)"


def parse_pveversion(text: str) -> tuple[str | None, str | None, str | None]:
    """(pve-manager version, pve-container version, lxc-pve package version) from `pveversion -v`
    ("pve-manager: 8.3.0 (running version: ...)", "lxc-pve: 6.0.5-2") or `pveversion`
    ("pve-manager/8.3.0/c168...", which names no lxc-pve)."""
    manager = re.search(rf"^pve-manager[:/ ][ \t]*({_VERSION})", text, re.M)
    container = re.search(rf"^pve-container:[ \t]*({_VERSION})", text, re.M)
    lxc = re.search(rf"^lxc-pve:[ \t]*({_PKG_VERSION})", text, re.M)
    return (manager.group(1) if manager else None, container.group(1) if container else None,
            lxc.group(1) if lxc else None)


def _pveversion_json(value) -> dict[str, str | None]:
    manager, container, lxc = value
    return {"manager": manager, "container": container, "lxc_pve": lxc}


def parse_lxc_version(text: str) -> str | None:
    m = re.search(_VERSION, text)
    return m.group(0) if m else None


_KINDS = {"character special file": "c", "block special file": "b", "regular file": "f", "regular empty file": "f",
          "directory": "d"}
# What a device walk also reports where a node should be, by the kind letter a DeviceNode then
# carries (gather splits them off into HostFacts.not_nodes: they are never nodes).
NOT_NODES = {"f": "regular file", "d": "directory", "l": "dangling symlink"}


def parse_stat_lines(text: str, odd: bool = False) -> dict[str, DeviceNode]:
    """Output of `stat -L -c '%F|%t|%T|%f|%u|%g|%n'` over device paths (hex major/minor and mode).

        "character special file|c3|ff|21b6|0|0|/dev/nvidiactl" -> {"/dev/nvidiactl": DeviceNode(.., "c", 195, 255, 0o20666, 0, 0)}

    A line is dropped unless every field is in range: major <= 0xfff, minor <= 0xfffff,
    mode <= 0xffff, uid/gid < 2**32, an absolute path of at most 4096 characters without NUL.
    The path is the last field, so it may contain "|". odd: regular files and directories too
    (kind "f", "d": NOT_NODES), for a device walk's caller to keep apart."""
    nodes: dict[str, DeviceNode] = {}
    for line in text.split("\n"):
        parts = line.split("|", 6)
        if len(parts) != 7:
            continue
        ftype, major, minor, mode, uid, gid, path = parts
        kind = _KINDS.get(ftype)
        if kind is None or (kind in NOT_NODES and not odd) or not path.startswith("/") or len(path) > PATH_MAX or "\0" in path:
            continue
        values = (_uint(major, 16, 8, MAJOR_MAX), _uint(minor, 16, 8, MINOR_MAX), _uint(mode, 16, 8, 0xFFFF),
                  _uint(uid, 10, 10, ID_MAX), _uint(gid, 10, 10, ID_MAX))
        if None in values:
            continue
        nodes[path] = DeviceNode(path, kind, *values)
    return nodes


def _nodes_json(nodes: dict[str, DeviceNode]) -> dict[str, dict]:
    return {p: {"kind": n.kind, "major": n.major, "minor": n.minor, "mode": n.mode, "uid": n.uid, "gid": n.gid}
            for p, n in nodes.items()}


def _proc_devices_json(value) -> dict[str, dict[str, list[int]]]:
    char, block = value
    return {"char": {k: list(v) for k, v in char.items()}, "block": {k: list(v) for k, v in block.items()}}


_SUBID_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]{0,31}\$?")


def parse_subid(text: str) -> tuple[tuple[str, int, int], ...]:
    """/etc/subuid or /etc/subgid (subgid(5)): `name:first:count` lines, e.g. "root:100000:65536".
    Lines that are not that (comments, junk, numbers of more than 10 digits or past 2**32) are dropped."""
    out = []
    for line in text.split("\n"):
        parts = line.strip().split(":")
        if len(parts) != 3 or not _SUBID_NAME.fullmatch(parts[0]):
            continue
        first, count = _uint(parts[1], 10, 10, ID_MAX), _uint(parts[2], 10, 10, ID_MAX)
        if first is None or not count:
            continue
        out.append((parts[0], first, count))
    return tuple(out)


def _subid_json(value) -> list[list]:
    return [list(e) for e in value]


_GROUP_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]{0,31}\$?")


def parse_group(text: str) -> dict[str, int]:
    """/etc/group (group(5)): `name:password:gid:members` lines -> {name: gid}, the first line of
    a name winning (as getgrnam reads it). Lines that are not that are dropped; at most 65,536 lines."""
    out: dict[str, int] = {}
    for line in text.split("\n")[:65536]:
        parts = line.strip().split(":")
        if len(parts) != 4 or not _GROUP_NAME.fullmatch(parts[0]) or parts[0] in out:
            continue
        gid = _uint(parts[2], 10, 10, ID_MAX)
        if gid is not None:
            out[parts[0]] = gid
    return out


def subid_allows(entries, name: str, first: int, count: int = 1) -> bool:
    """Do these subgid entries let `name` map [first, first + count)? (newgidmap's check)"""
    return any(n == name and s <= first and first + count <= s + c for n, s, c in entries or ())


def node_from_stat(path: str, st, odd: bool = False) -> DeviceNode | None:
    """The device node stat() saw; odd: also a regular file or a directory (kind "f", "d":
    not a node, where a walk of /dev found one)."""
    try:
        if stat.S_ISCHR(st.st_mode):
            kind = "c"
        elif stat.S_ISBLK(st.st_mode):
            kind = "b"
        elif odd and stat.S_ISREG(st.st_mode):
            return DeviceNode(path, "f", 0, 0, st.st_mode, st.st_uid, st.st_gid)
        elif odd and stat.S_ISDIR(st.st_mode):
            return DeviceNode(path, "d", 0, 0, st.st_mode, st.st_uid, st.st_gid)
        else:
            return None
        return DeviceNode(path, kind, os.major(st.st_rdev), os.minor(st.st_rdev), st.st_mode, st.st_uid, st.st_gid)
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None


def version_tuple(version) -> tuple[int, ...]:
    """"580.159.04" -> (580, 159, 4); at most 4 parts. Anything else (None, not a str, no
    ASCII digits) -> (); a part of more than 9 digits ends the tuple there."""
    if not isinstance(version, str):
        return ()
    parts = []
    for digits in re.findall(r"[0-9]+", version)[:4]:
        if len(digits) > 9:
            break
        parts.append(int(digits))
    return tuple(parts)


# ---- what the next upgrade needs

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+~-]{0,63}")
_KERNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}")
_MODULE = re.compile(r"[A-Za-z0-9_-]{1,64}")

# Device drivers built outside the kernel tree that lxcfix knows of (asked about even when
# /proc/modules cannot be read): the catalog profiles' `out_of_tree` (NVIDIA's, Coral's gasket/apex).
KNOWN_OUT_OF_TREE = KNOWN_OUT_OF_TREE


def module_name(text: str) -> str:
    """A module's canonical name: modprobe treats '-' and '_' alike."""
    return text.replace("-", "_")


def parse_kernel_release(text: str) -> str | None:
    """/proc/sys/kernel/osrelease (`uname -r`): "6.8.12-4-pve\n" -> "6.8.12-4-pve"."""
    first = text.split("\n", 1)[0].strip()
    return first if _KERNEL.fullmatch(first) else None


def parse_proc_modules(text: str) -> dict[str, LoadedModule]:
    """/proc/modules: `name size refcount used_by state address [(taints)]`.

        "nvidia 56823808 1430 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)"
            -> {"nvidia": LoadedModule("nvidia", out_of_tree=True, used_by=("nvidia_uvm", "nvidia_modeset"))}

    Taint O: built out of tree. A line that is not of that shape is dropped."""
    out: dict[str, LoadedModule] = {}
    for line in text.split("\n")[:20000]:
        parts = line.split(" ")
        if len(parts) < 6 or not _MODULE.fullmatch(parts[0]) or _uint(parts[1], 10, 12, 1 << 40) is None:
            continue
        users = tuple(module_name(u) for u in parts[3].split(",") if u != "-" and _MODULE.fullmatch(u))
        taints = parts[6] if len(parts) > 6 and parts[6].startswith("(") and parts[6].endswith(")") else ""
        name = module_name(parts[0])
        out[name] = LoadedModule(name, "O" in taints, users)
    return out


def _modules_json(value) -> dict:
    return {n: {"out_of_tree": m.out_of_tree, "used_by": list(m.used_by)} for n, m in value.items()}


_DKMS = re.compile(
    r"(?P<module>[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63})(?:/|, )(?P<version>[A-Za-z0-9_][A-Za-z0-9_.+~-]{0,63})"
    r"(?:, (?P<kernel>[A-Za-z0-9][A-Za-z0-9._+~-]{0,63})(?:, (?P<arch>[A-Za-z0-9_]{1,32}))?)?"
    r": (?P<state>[a-z][a-z-]{0,31})(?![a-z-])")


def parse_dkms_status(text: str) -> tuple[DkmsModule, ...]:
    """`dkms status`, DKMS 3 ("nvidia/580.159.04, 6.8.12-4-pve, x86_64: installed") and DKMS 2
    ("nvidia, 470.82.00, 5.4.0-91-generic, x86_64: installed"); "gasket/1.0: added" (built for
    no kernel); warnings after the state are ignored, other lines dropped."""
    out = []
    for line in text.split("\n")[:5000]:
        m = _DKMS.match(line.strip())
        if m:
            out.append(DkmsModule(module_name(m["module"]), m["version"], m["kernel"], m["arch"], m["state"]))
    return tuple(out)


def _dkms_json(value) -> list[dict]:
    return [{"module": d.module, "version": d.version, "kernel": d.kernel, "arch": d.arch, "state": d.state}
            for d in value]


_KO = re.compile(r"\.ko(?:\.xz|\.gz|\.zst)?$")


def parse_modules_dep(text: str) -> dict[str, str]:
    """/lib/modules/<version>/modules.dep (depmod's index, what modprobe loads from): module
    name -> its path in the tree. "updates/dkms/nvidia.ko: " -> {"nvidia": "updates/dkms/nvidia.ko"}."""
    out: dict[str, str] = {}
    for line in text.split("\n")[:100000]:
        path = line.split(":", 1)[0].strip()
        if not path or len(path) > 512 or path.startswith("/") or ".." in path.split("/") or not path.isprintable():
            continue
        base = path.rsplit("/", 1)[-1]
        m = _KO.search(base)
        if m and _MODULE.fullmatch(base[:m.start()]):
            out.setdefault(module_name(base[:m.start()]), path)
    return out


# Storage types whose volumes are files under a path (default /mnt/pve/<id> for network ones).
_PATH_TYPES = {"dir": None, "btrfs": None, "nfs": "/mnt/pve", "cifs": "/mnt/pve", "glusterfs": "/mnt/pve",
               "cephfs": "/mnt/pve"}


def parse_storage_cfg(text: str) -> dict[str, Storage]:
    """/etc/pve/storage.cfg: `type: id` then indented `key value` lines. Only storages that
    keep files under a path (dir, nfs, cifs, ...; where snippets live) are kept.

        "dir: local\n\tpath /var/lib/vz\n\tcontent iso,snippets\n"
            -> {"local": Storage("local", "dir", "/var/lib/vz", ("iso", "snippets"))}"""
    from .pvestorage import sections  # the one reading of Proxmox's section config format

    found = [{**st.options, "type": st.type, "id": st.id} for st in sections("\n".join(text.split("\n")[:20000]))[0]]
    out: dict[str, Storage] = {}
    for s in found:
        if not s or s["type"] not in _PATH_TYPES:
            continue
        path = s.get("path") or (f"{_PATH_TYPES[s['type']]}/{s['id']}" if _PATH_TYPES[s["type"]] else None)
        if path is not None and (not path.startswith("/") or len(path) > PATH_MAX or not path.isprintable()):
            path = None
        content = tuple(c.strip() for c in s.get("content", "").split(",") if c.strip() and c.strip().isalnum())
        out[s["id"]] = Storage(s["id"], s["type"], path, content, s.get("disable", None) is not None)
    return out


def _storages_json(value) -> dict:
    return {k: {"type": s.type, "path": s.path, "content": list(s.content), "disabled": s.disabled}
            for k, s in value.items()}


def parse_stat_modes(text: str) -> dict[str, int]:
    """`stat -L -c '%f|%n' PATH...` (hex mode, then the path): {path: st_mode}."""
    out: dict[str, int] = {}
    for line in text.split("\n"):
        mode, sep, path = line.partition("|")
        value = _uint(mode, 16, 8, 0xFFFF)
        if sep and value is not None and path.startswith("/") and len(path) <= PATH_MAX and "\0" not in path:
            out[path] = value
    return out


def parse_uevent_driver(text: str) -> str | None:
    """A sysfs device's uevent: the DRIVER= line ("DRIVER=nvidia" -> "nvidia")."""
    for line in text.split("\n")[:200]:
        if line.startswith("DRIVER="):
            name = line[7:].strip()
            return module_name(name) if _MODULE.fullmatch(name) else None
    return None


# The journal's events that wrote a config: apply's "written", rollback's "restored", the hook's
# "hook-heal-generated" (the config `pct start` generated).
_WRITES = {"written": "written", "restored": "restored", "hook-heal-generated": "generated"}


def parse_journal_writes(text: str) -> dict[str, ConfigWrite]:
    """lxcfix's own journal (one JSON object a line): for each config path, the last time
    lxcfix wrote it and the digest it wrote. A line that is not such an event is skipped."""
    out: dict[str, ConfigWrite] = {}
    for line in text.split("\n"):
        if not line.startswith("{") or len(line) > 65536 or not any(f'"{w}"' in line for w in _WRITES):
            continue  # most of a journal is other events: only these lines are worth decoding
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(event, dict) or event.get("event") not in _WRITES:
            continue
        path, time, digest = event.get("path"), event.get("time"), event.get("digest_after")
        if all(isinstance(v, str) and 0 < len(v) <= PATH_MAX and v.isprintable() for v in (path, time, digest)):
            out[path] = ConfigWrite(time, digest, _WRITES[event["event"]])
    return out


def _writes_json(value) -> dict:
    return {p: {"time": w.time, "digest": w.digest, "event": w.event} for p, w in value.items()}


FACTS: dict[str, Fact] = {
    "proc_devices": Fact(parse_proc_devices_checked, read="/proc/devices", to_json=_proc_devices_json),
    "nvidia_driver": Fact(parse_nvidia_version, read="/proc/driver/nvidia/version"),
    "cgroup_layout": Fact(parse_cgroup_layout, read="/proc/self/mountinfo"),
    "pveversion": Fact(parse_pveversion, run=("pveversion", "-v"), backends=("pve",), to_json=_pveversion_json),
    "lxc_version": Fact(parse_lxc_version, run=("lxc-start", "--version")),
    # Which host ids root may map into containers (newgidmap checks it): an idmap that passes a
    # host group through needs a `root:<gid>:1` line here.
    "subgid": Fact(parse_subid, read="/etc/subgid", to_json=_subid_json),
    # The host's groups by name: which host gid is root's, shadow's, disk's... (never mapped
    # into a container, rules.access), and which is a node's own group (render, video).
    "host_groups": Fact(parse_group, read="/etc/group"),
    # For remote hosts: one command lists every device node under /dev
    # (symlinks followed, so /dev/serial/by-id and /dev/dri/by-path resolve).
    "dev_nodes": Fact(
        parse_stat_lines,
        run=("find", "/dev", "-xdev", "(", "-type", "c", "-o", "-type", "b", "-o", "-type", "l", "-o", "-type", "f", ")",
             "-exec", "stat", "-L", "-c", "%F|%t|%T|%f|%u|%g|%n", "{}", "+"),
        to_json=_nodes_json,
    ),
    "kernel_release": Fact(parse_kernel_release, read="/proc/sys/kernel/osrelease"),
    "proc_modules": Fact(parse_proc_modules, read="/proc/modules", to_json=_modules_json),
    "dkms_status": Fact(parse_dkms_status, run=("dkms", "status"), to_json=_dkms_json),
    # Read once per installed kernel, on hosts with out-of-tree modules (gather.kernel_trees).
    "modules_dep": Fact(parse_modules_dep, read="/lib/modules/{kernel}/modules.dep", each="kernel"),
    # Read once per device node of a catalog profile, on the same hosts (gather.device_drivers).
    "device_driver": Fact(parse_uevent_driver, read="/sys/dev/char/{dev}/device/uevent", each="dev"),
    # The Proxmox config directory: read from the backend's (LXCFIX_PVE_DIR in tests).
    "storage_cfg": Fact(parse_storage_cfg, read="/etc/pve/storage.cfg", backends=("pve",), to_json=_storages_json),
    # lxcfix's journal ($LXCFIX_STATE_DIR, default /var/lib/lxcfix): when it last wrote each config.
    "journal": Fact(parse_journal_writes, read="/var/lib/lxcfix/journal.jsonl", to_json=_writes_json),
}
