"""Frozen data shared by every layer. No I/O here.

The shapes, by example:

    Result(rc=0, stdout="195 nvidia\n", stderr="")
    DeviceNode(path="/dev/nvidia-uvm", kind="c", major=511, minor=0, mode=0o20666, uid=0, gid=0)
    HostFacts(host="pve1", backend="pve", char_majors={"nvidia": (195,), "nvidia-uvm": (511,)}, ...)
    ProbeNode(path="/dev/nvidia-uvm", exists=True, is_char=True, major=511, minor=0, open="EPERM")
    Finding(code="LXF101", severity="error", ct="200", message="...", device="/dev/nvidia-uvm",
            evidence=("config allows c 508:* rwm", "/proc/devices: 511 nvidia-uvm"), fix="...")
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal, Mapping

Severity = Literal["error", "warning", "info"]
Backend = Literal["pve", "lxc"]
CgroupLayout = Literal["v2", "hybrid", "v1", "unknown"]

SEVERITY_ORDER: Mapping[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Result:
    """What a command did: a failed command is data, not an exception."""

    rc: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass(frozen=True)
class DeviceRule:
    """One cgroup device rule, as LXC reads `lxc.cgroup2.devices.allow|deny`.

    kind "a" (all), "b" or "c"; major/minor None mean "*"; access a subset
    of "rwm" in that order; path set for the path form (`/dev/net/tun rw`),
    which LXC stat()s at start into an exact kind/major/minor.

        DeviceRule("c", 195, None, "rwm")        c 195:* rwm
        DeviceRule("a", None, None, "rwm")       a
        DeviceRule("c", None, None, "rwm", path="/dev/net/tun")
    """

    kind: str
    major: int | None
    minor: int | None
    access: str = "rwm"
    path: str | None = None
    allow: bool = True

    def __str__(self) -> str:
        if self.path is not None:
            return f"{self.path} {self.access}"
        if self.kind == "a":
            return "a"
        major = "*" if self.major is None else str(self.major)
        minor = "*" if self.minor is None else str(self.minor)
        return f"{self.kind} {major}:{minor} {self.access}"


@dataclass(frozen=True)
class DeviceNode:
    """A device node as `stat()` saw it. kind is "c" or "b"."""

    path: str
    kind: str
    major: int
    minor: int
    mode: int = 0
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class HostFacts:
    """One host, at one moment.

    char_majors / block_majors map a driver name from /proc/devices to its
    majors (a name may appear under several, e.g. "usb" in some kernels).
    nodes maps a host path to the node found there; empty for snapshots
    without dev/, where the catalog's canonical minors stand in.
    """

    host: str
    backend: Backend
    char_majors: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    block_majors: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    nodes: Mapping[str, DeviceNode] = field(default_factory=dict)
    nodes_known: bool = False
    nvidia_driver: str | None = None
    cgroup_layout: CgroupLayout = "unknown"
    pve_version: str | None = None
    lxc_version: str | None = None
    raw: Mapping[str, str] = field(default_factory=dict)

    def char_major(self, name: str) -> int | None:
        majors = self.char_majors.get(name)
        return majors[0] if majors else None

    def char_names(self, major: int) -> tuple[str, ...]:
        return tuple(n for n, ms in self.char_majors.items() if major in ms)


@dataclass(frozen=True)
class ProbeNode:
    """One node as the in-container probe saw it.

    open is "ok" or an errno name ("EPERM", "EACCES", "ENXIO", "ENOENT", ...).
    """

    path: str
    exists: bool
    is_char: bool = False
    major: int | None = None
    minor: int | None = None
    open: str = "ENOENT"


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw inside one container."""

    nodes: Mapping[str, ProbeNode] = field(default_factory=dict)
    nvidia_smi_rc: int | None = None
    nvidia_smi_out: str = ""
    cuinit: int | None = None
    driver_version: str | None = None
    groups: Mapping[str, int] = field(default_factory=dict)  # {"render": 104, "video": 44}
    raw: str = ""


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    ct: str
    message: str
    device: str | None = None
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    host: str = "localhost"
    live_fixable: bool | None = None

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "device": self.device,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "live_fixable": self.live_fixable,
        }


@dataclass(frozen=True)
class Plan:
    """The whole new config file, computed; only the write is gated."""

    ct: str
    path: str
    digest: str
    before: bytes
    after: bytes
    findings: tuple[Finding, ...] = ()
    style: str = "numeric"
    style_reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return self.before == self.after

    def diff(self) -> str:
        # Frozen, so the text is cached in __dict__ by hand (pickling keeps it).
        cached = self.__dict__.get("_diff")
        if cached is None:
            cached = self._make_diff()
            object.__setattr__(self, "_diff", cached)
        return cached

    def _make_diff(self) -> str:
        if self.is_empty:
            return ""
        a = self.before.decode("utf-8", "surrogateescape").splitlines(keepends=True)
        b = self.after.decode("utf-8", "surrogateescape").splitlines(keepends=True)
        lines = difflib.unified_diff(a, b, fromfile=f"a{self.path}", tofile=f"b{self.path}")
        return "".join(l if l.endswith("\n") else l + "\n\\ No newline at end of file\n" for l in lines)


@dataclass(frozen=True)
class ApplyResult:
    step_reached: str
    backup_path: str | None
    verified: bool
    rolled_back: bool
    message: str = ""
