"""Host facts: each fact names what it reads or runs, plus a pure parse.

    FACTS["nvidia_driver"] == Fact(parse_nvidia_version, read="/proc/driver/nvidia/version")
    parse_nvidia_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ...") == "580.159.04"
    parse_cgroup_layout(mountinfo_text) in ("v2", "hybrid", "v1", "unknown")
    FACTS["pveversion"].to_json(("8.3.0", "5.2.2")) == {"manager": "8.3.0", "container": "5.2.2"}

gather.py does the reading; everything here is data in, data out. The text comes from
hosts and containers we do not trust, so every parse is total (any str in, a value out,
never an exception) and reads only ASCII digits of bounded length: str.isdigit() accepts
"²" (int() then raises) and int() takes "٥" or "1_0"; a 5,000-digit number is garbage,
not a major. tests/unit/fixtures/facts/<fact>/<case>.json holds one case per file.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Sequence

from .bounded import excerpt, uint
from .devices import parse_proc_devices
from .model import DeviceNode

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
    m = re.search(rf"Kernel Module(?: for [^ \n]+)?[ \t]+({_PART}(?:\.{_PART}){{1,2}}){_END}", text)
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


def parse_pveversion(text: str) -> tuple[str | None, str | None]:
    """(pve-manager version, pve-container version) from `pveversion -v`
    ("pve-manager: 8.3.0 (running version: ...)") or `pveversion` ("pve-manager/8.3.0/c168...")."""
    manager = re.search(rf"^pve-manager[:/ ][ \t]*({_VERSION})", text, re.M)
    container = re.search(rf"^pve-container:[ \t]*({_VERSION})", text, re.M)
    return (manager.group(1) if manager else None, container.group(1) if container else None)


def _pveversion_json(value) -> dict[str, str | None]:
    manager, container = value
    return {"manager": manager, "container": container}


def parse_lxc_version(text: str) -> str | None:
    m = re.search(_VERSION, text)
    return m.group(0) if m else None


_KINDS = {"character special file": "c", "block special file": "b"}


def parse_stat_lines(text: str) -> dict[str, DeviceNode]:
    """Output of `stat -L -c '%F|%t|%T|%f|%u|%g|%n'` over device paths (hex major/minor and mode).

        "character special file|c3|ff|21b6|0|0|/dev/nvidiactl" -> {"/dev/nvidiactl": DeviceNode(.., "c", 195, 255, 0o20666, 0, 0)}

    A line is dropped unless every field is in range: major <= 0xfff, minor <= 0xfffff,
    mode <= 0xffff, uid/gid < 2**32, an absolute path of at most 4096 characters without NUL.
    The path is the last field, so it may contain "|"."""
    nodes: dict[str, DeviceNode] = {}
    for line in text.split("\n"):
        parts = line.split("|", 6)
        if len(parts) != 7:
            continue
        ftype, major, minor, mode, uid, gid, path = parts
        kind = _KINDS.get(ftype)
        if kind is None or not path.startswith("/") or len(path) > PATH_MAX or "\0" in path:
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


def node_from_stat(path: str, st) -> DeviceNode | None:
    try:
        if stat.S_ISCHR(st.st_mode):
            kind = "c"
        elif stat.S_ISBLK(st.st_mode):
            kind = "b"
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


FACTS: dict[str, Fact] = {
    "proc_devices": Fact(parse_proc_devices_checked, read="/proc/devices", to_json=_proc_devices_json),
    "nvidia_driver": Fact(parse_nvidia_version, read="/proc/driver/nvidia/version"),
    "cgroup_layout": Fact(parse_cgroup_layout, read="/proc/self/mountinfo"),
    "pveversion": Fact(parse_pveversion, run=("pveversion", "-v"), backends=("pve",), to_json=_pveversion_json),
    "lxc_version": Fact(parse_lxc_version, run=("lxc-start", "--version")),
    # For remote hosts: one command lists every device node under /dev
    # (symlinks followed, so /dev/serial/by-id and /dev/dri/by-path resolve).
    "dev_nodes": Fact(
        parse_stat_lines,
        run=("find", "/dev", "-xdev", "(", "-type", "c", "-o", "-type", "b", "-o", "-type", "l", ")",
             "-exec", "stat", "-L", "-c", "%F|%t|%T|%f|%u|%g|%n", "{}", "+"),
        to_json=_nodes_json,
    ),
}
