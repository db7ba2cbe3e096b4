"""Host facts: each fact names what it reads or runs, plus a pure parse.

    FACTS["char_majors"] == Fact(read="/proc/devices", parse=parse_majors)
    parse_nvidia_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ...") == "580.159.04"
    parse_cgroup_layout(mountinfo_text) in ("v2", "hybrid", "v1", "unknown")

gather.py does the reading; everything here is data in, data out.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from typing import Callable, Sequence

from .devices import parse_proc_devices
from .model import DeviceNode


@dataclass(frozen=True)
class Fact:
    """A file to read or a command to run (argv), and the pure parse of its text."""

    parse: Callable[[str], object]
    read: str | None = None
    run: Sequence[str] | None = None


def parse_nvidia_version(text: str) -> str | None:
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return m.group(1)
    m = re.search(r"\b(\d{3}\.\d+(?:\.\d+)?)\b", text)
    return m.group(1) if m else None


def parse_cgroup_layout(mountinfo: str) -> str:
    """v2: cgroup2 at /sys/fs/cgroup; hybrid: v1 controllers plus a cgroup2
    mount (usually /sys/fs/cgroup/unified); v1: controllers only."""
    v1 = False
    v2_root = False
    v2_other = False
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        fstype = right.split()[0] if right.split() else ""
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
    """(pve-manager version, pve-container version) from `pveversion -v`."""
    manager = re.search(r"pve-manager[:/ ]\s*(\d+(?:\.\d+)+)", text)
    container = re.search(r"^pve-container:\s*(\d+(?:\.\d+)+)", text, re.M)
    return (manager.group(1) if manager else None, container.group(1) if container else None)


def parse_lxc_version(text: str) -> str | None:
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def parse_stat_lines(text: str) -> dict[str, DeviceNode]:
    """Output of `stat -L -c '%F|%t|%T|%f|%u|%g|%n'` over device paths (hex major/minor and mode)."""
    nodes: dict[str, DeviceNode] = {}
    for line in text.splitlines():
        parts = line.split("|", 6)
        if len(parts) != 7:
            continue
        ftype, major, minor, mode, uid, gid, path = parts
        kind = {"character special file": "c", "block special file": "b"}.get(ftype)
        if kind is None:
            continue
        try:
            nodes[path] = DeviceNode(path, kind, int(major, 16), int(minor, 16), int(mode, 16), int(uid), int(gid))
        except ValueError:
            continue
    return nodes


def node_from_stat(path: str, st) -> DeviceNode | None:
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        return None
    import os

    return DeviceNode(path, kind, os.major(st.st_rdev), os.minor(st.st_rdev), st.st_mode, st.st_uid, st.st_gid)


def version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(p) for p in re.findall(r"\d+", version)[:4])


FACTS: dict[str, Fact] = {
    "proc_devices": Fact(parse_proc_devices, read="/proc/devices"),
    "nvidia_driver": Fact(parse_nvidia_version, read="/proc/driver/nvidia/version"),
    "cgroup_layout": Fact(parse_cgroup_layout, read="/proc/self/mountinfo"),
    "pveversion": Fact(parse_pveversion, run=("pveversion", "-v")),
    "lxc_version": Fact(parse_lxc_version, run=("lxc-start", "--version")),
    # For remote hosts: one command lists every device node under /dev
    # (symlinks followed, so /dev/serial/by-id and /dev/dri/by-path resolve).
    "dev_nodes": Fact(
        parse_stat_lines,
        run=("find", "/dev", "-xdev", "(", "-type", "c", "-o", "-type", "b", "-o", "-type", "l", ")",
             "-exec", "stat", "-L", "-c", "%F|%t|%T|%f|%u|%g|%n", "{}", "+"),
    ),
}
