"""Frozen data shared by every layer. No I/O here.

The shapes, by example:

    Result(rc=0, stdout="195 nvidia\n", stderr="")
    DeviceNode(path="/dev/nvidia-uvm", kind="c", major=511, minor=0, mode=0o20666, uid=0, gid=0)
    HostFacts(host="pve1", backend="pve", char_majors={"nvidia": (195,), "nvidia-uvm": (511,)}, ...)
    ProbeNode(path="/dev/nvidia-uvm", exists=True, is_char=True, major=511, minor=0, open="EPERM")
    Edit("replace", 14, (("lxc.cgroup2.devices.allow", "c 511:* rwm"),))
    Fix("move the rule to major 511", edits=(Edit(...),), applicability="safe")
    Finding(code="LXF101", severity="error", ct="200", message="...", device="/dev/nvidia-uvm",
            evidence=("config allows c 508:* rwm", "/proc/devices: 511 nvidia-uvm"), fix=Fix(...))
    CtReport(host="pve1", ct="200", path="/etc/pve/lxc/200.conf", findings=(...), plan=Plan(...))
    HostReport(host="pve1", backend="pve", facts=HostFacts(...), containers=(CtReport(...), ...))
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, NamedTuple

Severity = Literal["error", "warning", "info"]
Backend = Literal["pve", "lxc"]
CgroupLayout = Literal["v2", "hybrid", "v1", "unknown"]

SEVERITY_ORDER: Mapping[str, int] = {"error": 0, "warning": 1, "info": 2}

# What a container id may look like: a Proxmox vmid, an LXC container name.
VMID = re.compile(r"^[1-9][0-9]{2,8}$")
LXC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


# The interpreter lxcfix's helper processes run with on a remote host, unless its inventory entry
# names one (ansible_python_interpreter): a path, never `python3` looked up on a PATH.
HOST_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Result:
    """What a command did: a failed command is data, not an exception.

    truncated: the stream ("stdout" or "stderr") that went past the reader's cap, when
    one did: reading stopped there and the command was killed (rc 125); the text
    holds what came before the cap."""

    rc: int
    stdout: str = ""
    stderr: str = ""
    truncated: str | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def tail(self) -> str:
        """The last line of stderr (else stdout): what a failed command said."""
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit {self.rc}"


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

    def text(self, listing: bool = False) -> str:
        """The one way a rule is written. As a config value: `c 195:* rwm`,
        `/dev/net/tun rw`, `a`. listing=True, for a compiled program's rules: a
        type-less block keeps its numbers (`a 7:* m`, `a *:* rwm`) and a deny
        rule says so (`deny c 195:3 rwm`)."""
        if self.path is not None:
            text = f"{self.path} {self.access}"
        elif self.kind == "a" and not listing:
            text = "a"
        else:
            major = "*" if self.major is None else str(self.major)
            minor = "*" if self.minor is None else str(self.minor)
            text = f"{self.kind} {major}:{minor} {self.access}"
        return text if self.allow or not listing else f"deny {text}"

    def __str__(self) -> str:
        return self.text()

    def covers(self, kind: str, major: int, minor: int, access: str | None = None) -> bool:
        """The one matcher: does this rule match a device (and every bit of `access`)?"""
        if self.kind != "a" and self.kind != kind:
            return False
        if self.major is not None and self.major != major:
            return False
        if self.minor is not None and self.minor != minor:
            return False
        return access is None or set(access) <= set(self.access)


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
class LoadedModule:
    """One line of /proc/modules. out_of_tree: taint flag O, a module built outside
    the kernel's tree (DKMS, a vendor installer); used_by: the modules that need it."""

    name: str
    out_of_tree: bool = False
    used_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class DkmsModule:
    """One line of `dkms status`: nvidia/580.159.04, 6.8.12-4-pve, x86_64: installed.
    kernel and arch are None for a module only added (built for no kernel yet)."""

    module: str
    version: str
    kernel: str | None
    arch: str | None
    state: str  # installed | built | added | ...


@dataclass(frozen=True)
class KernelTree:
    """/lib/modules/<version>: where the modules lxcfix asks about are
    ({"nvidia": "updates/dkms/nvidia.ko"}), and whether its build headers are
    installed (`build` exists: DKMS can build for it). complete: read from
    modules.dep, so a module not listed is not there (else a walk of the
    directories out-of-tree modules go to)."""

    version: str
    modules: Mapping[str, str] = field(default_factory=dict)
    complete: bool = False
    headers: bool | None = None


@dataclass(frozen=True)
class Storage:
    """One storage of /etc/pve/storage.cfg (dir, nfs, cifs, ...: the ones with a path)."""

    id: str
    type: str
    path: str | None = None
    content: tuple[str, ...] = ()
    disabled: bool = False


@dataclass(frozen=True)
class ConfigWrite:
    """The last time lxcfix's journal says it wrote a config file (apply, the hook)."""

    time: str
    digest: str
    event: str = "written"


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
    lxc_pve: str | None = None  # Proxmox's lxc-pve package version (`pveversion -v`): "6.0.5-2"
    raw: Mapping[str, str] = field(default_factory=dict)
    # /etc/subgid as (name, first, count) entries; None when it was not read (raw["/etc/subgid"]: its text)
    subgid: tuple[tuple[str, int, int], ...] | None = None
    # /etc/group as {name: gid}; None when it was not read
    groups: Mapping[str, int] | None = None
    # What the next upgrade needs (audit --for kernel-upgrade): the running kernel, the
    # kernels installed (/lib/modules), the modules loaded, DKMS, and the driver
    # (sysfs DRIVER=) of device nodes ("c 226:1" -> "nvidia"), read on hosts with
    # out-of-tree modules. modules_known / dkms_known: the fact could be read at all.
    kernel: str | None = None
    kernels: Mapping[str, KernelTree] = field(default_factory=dict)
    modules: Mapping[str, LoadedModule] = field(default_factory=dict)
    modules_known: bool = False
    dkms: tuple[DkmsModule, ...] = ()
    dkms_known: bool = False
    device_drivers: Mapping[str, str] = field(default_factory=dict)
    # Proxmox storages (storage.cfg) and the files in their snippets/ directories:
    # storage id -> {file name: st_mode}, only for storages whose directory exists here.
    storages: Mapping[str, Storage] = field(default_factory=dict)
    snippets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # config path -> when lxcfix last wrote it (its journal)
    config_writes: Mapping[str, ConfigWrite] = field(default_factory=dict)
    # Paths under /dev (and given mount sources) that are there but are not device nodes:
    # path -> "regular file" | "directory" | "dangling symlink" (what a failed driver or a script left)
    not_nodes: Mapping[str, str] = field(default_factory=dict)

    def char_major(self, name: str) -> int | None:
        majors = self.char_majors.get(name)
        return majors[0] if majors else None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("memo", None)  # derived, and it holds catalog entries that do not pickle
        return state

    @functools.cached_property
    def memo(self) -> dict:
        """What the pure layers derive from these facts once per host (catalog
        lookups, majors by profile): a fleet's containers ask the same few questions."""
        return {}

    @functools.cached_property
    def known_majors(self) -> frozenset[int]:
        """Every char major some driver holds now."""
        return frozenset(m for ms in self.char_majors.values() for m in ms)

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
class NodeOwner:
    """A node's owner and mode inside the container, as stat() saw them there."""

    uid: int
    gid: int
    mode: int


@dataclass(frozen=True)
class GroupSeen:
    """A group the probe looked up in the container's /etc/group. spec: what was asked
    (a name, "render", or a gid, "104"); gid/name None when the container has no such
    group; members: (user, uid or None) from /etc/group and primary groups in /etc/passwd."""

    spec: str
    name: str | None = None
    gid: int | None = None
    members: tuple[tuple[str, int | None], ...] = ()


@dataclass(frozen=True)
class AccessTry:
    """One open(O_RDWR) the probe made as a member of a group (a forked child that
    dropped to uid/gid first). open: "ok" or an errno name, or "untried" (why: no
    such group, no python3 or setpriv inside, not a device node)."""

    path: str
    spec: str
    uid: int | None = None
    gid: int | None = None
    user: str | None = None
    open: str = "untried"
    via: str | None = None
    why: str | None = None


@dataclass(frozen=True)
class AccessSeen:
    """Who inside may open the nodes: owners and modes, groups, and the opens tried as their members."""

    owners: Mapping[str, NodeOwner] = field(default_factory=dict)
    groups: Mapping[str, GroupSeen] = field(default_factory=dict)
    tries: tuple[AccessTry, ...] = ()

    def tried(self, path: str, spec: str) -> AccessTry | None:
        return next((t for t in self.tries if t.path == path and t.spec == spec), None)


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
    access: AccessSeen = field(default_factory=AccessSeen)  # probe.parse_access
    # What could not be used of the output, for evidence (escaped, the first bytes of each):
    # ("line 3: 'group render \\xc2\\xb2': not a group line the probe prints", "output cut at 1048576 bytes")
    unusable: tuple[str, ...] = ()


Applicability = Literal["safe", "needs-restart", "manual"]


class Edit(NamedTuple):
    """One change to the main section of a container config: the fix as data.

    index: a 0-based line of the config the fix was computed on; lines: (key, value) pairs.

        Edit("replace", 14, (("lxc.cgroup2.devices.allow", "c 511:* rwm"),))   line 14 becomes that
        Edit("replace", 14, (("lxc.cgroup2.devices.allow", "/dev/nvidia-uvm rwm"),
                             ("lxc.cgroup2.devices.allow", "/dev/nvidia-uvm-tools rwm")))
        Edit("remove", 17)
        Edit("add", lines=(("lxc.cgroup2.devices.allow", "c 10:200 rwm"),), near=("lxc.mount.entry",))
            after the last line of that key or of a key in `near` (resolved when applied, so
            several adds of a kind stay together), else after the last non-blank line;
            a devN key goes after the last devN line, else after the last Proxmox key.

    (A NamedTuple: a fleet's reports carry tens of thousands of them across processes.)
    """

    op: Literal["replace", "remove", "add"]
    index: int | None = None
    lines: tuple[tuple[str, str], ...] = ()
    near: tuple[str, ...] = ()

    def to_json(self) -> dict:
        out: dict[str, Any] = {"op": self.op}
        if self.index is not None:
            out["line"] = self.index + 1
        if self.lines:
            out["lines"] = [{"key": k, "value": v} for k, v in self.lines]
        return out


class Fix(NamedTuple):
    """What repairs a finding, as data (ruff's Fix). `plan` applies the edits of
    every fix whose applicability is not "manual"; `audit`, the hook and `--json`
    show the same fixes.

    applicability: "safe" (the plan applies it; it takes effect at the next start or
    live), "needs-restart" (the plan applies it; only a start makes it real: mounts,
    devN entries), "manual" (shown, never applied for you: host commands, changes that
    take access away, values only the container knows).
    commands: what to run on the host (display-only, for a person); notes: lines shown
    before the change. phase: fixes of a lower phase are applied, and the container
    checked again, before the others (cgroup v1 keys become v2 keys first, so a
    converted rule is not added a second time).

        Fix("add an allow rule for it: lxcfix plan --ct 200",
            edits=(Edit("add", lines=(("lxc.cgroup2.devices.allow", "c 10:200 rwm"),), near=(...)),),
            applicability="safe")
        Fix("run nvidia-modprobe -u -c0 on the host", commands=("nvidia-modprobe -u -c0",))
    """

    title: str
    edits: tuple[Edit, ...] = ()
    applicability: Applicability = "manual"
    commands: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    phase: int = 1
    # Lines a host file needs, (path, line): the plan adds each one missing, and apply writes
    # the file in the same transaction, backed up (e.g. ("/etc/subgid", "root:104:1")).
    host_lines: tuple[tuple[str, str], ...] = ()

    @property
    def applies(self) -> bool:
        """The plan makes this change itself."""
        return self.applicability != "manual" and bool(self.edits)

    def __str__(self) -> str:
        return self.title


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    ct: str
    message: str
    device: str | None = None
    evidence: tuple[str, ...] = ()
    fix: Fix | None = None
    host: str = "localhost"
    live_fixable: bool | None = None
    line: int | None = None  # the config line it is about (1-based), when it is about one
    # Its subject as data (the code's record says which fields it has), never parsed back out
    # of the message, which can quote what a container printed:
    numbers: tuple[str, int, int] | None = None  # the host's (kind, major, minor) of the device
    rule: str | None = None  # the config's rule it is about, as LXC reads it ("c 508:*": LXF101's stale rule)
    kind: str | None = None  # the cause kind when not its record's ("driver-mismatch": a cuInit 803)

    def to_json(self) -> dict:
        fix = self.fix
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "device": self.device,
            "evidence": list(self.evidence),
            "fix": fix.title if fix is not None else None,
            "live_fixable": self.live_fixable,
            "applicability": fix.applicability if fix is not None else None,
            "edits": [e.to_json() for e in fix.edits] if fix is not None else [],
            "commands": list(fix.commands) if fix is not None else [],
            "line": self.line,
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
    lock: str | None = None  # the config's `lock:`; apply refuses while it is set
    host_files: tuple["HostFile", ...] = ()  # host files the plan changes too (/etc/subgid)

    @property
    def is_empty(self) -> bool:
        return self.before == self.after and all(h.before == h.after for h in self.host_files)

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
        out = _unified(self.path, self.before, self.after)
        return out + "".join(_unified(h.path, h.before or b"", h.after) for h in self.host_files)


# Lines of context around each change, as `diff -u` shows them.
DIFF_CONTEXT = 3
# Past this many lines on a side, difflib's "popular line" heuristic (autojunk) can find no match
# at all in a config of repeated lines and show a one-line change as the whole file replaced.
_DIFFLIB_SAFE = 200
# Work the O(ND) diff may do ((N+M)*D line comparisons) before the fallback (difflib) is used.
_MYERS_BUDGET = 20_000_000


def _unified(path: str, before: bytes, after: bytes) -> str:
    """`diff -u` of the two texts: 3 lines of context, whatever the file's size (a one-line
    change in a 100,000-line config is a few lines, not the file twice)."""
    if before == after:
        return ""
    a = before.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    b = after.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    small = len(a) < _DIFFLIB_SAFE and len(b) < _DIFFLIB_SAFE
    if small and (len(set(a)) < len(a) or len(set(b)) < len(b)):
        lines = difflib.unified_diff(a, b, fromfile=f"a{path}", tofile=f"b{path}", n=DIFF_CONTEXT)
    else:
        # A big file; or a small one whose lines each occur once on each side (most configs
        # without snapshots): difflib can pair a line only with its one twin, so its matching
        # keeps the common head and tail as they are, and _opcodes' text is difflib's own (a
        # property test holds the two equal) without matching over the whole file.
        lines = _unified_lines(a, b, f"a{path}", f"b{path}", _opcodes(a, b))
    return "".join(l if l.endswith("\n") else l + "\n\\ No newline at end of file\n" for l in lines)


def _opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib-style opcodes of a -> b: the common head and tail set aside first (linear), the
    middle by an O(ND) diff (few changes: fast on any size), difflib past its budget."""
    n, m = len(a), len(b)
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    mid_a, mid_b = a[head:n - tail], b[head:m - tail]
    if len(mid_a) < 2000 and len(mid_b) < 2000:
        mid = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes()
    else:
        budget = max(64, _MYERS_BUDGET // (len(mid_a) + len(mid_b)))
        mid = _myers(mid_a, mid_b, budget)
        if mid is None:
            mid = difflib.SequenceMatcher(None, mid_a, mid_b).get_opcodes()
    ops = [("equal", 0, head, 0, head)] if head else []
    ops += [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in mid]
    if tail:
        ops.append(("equal", n - tail, n, m - tail, m))
    return ops


def _myers(a: list[str], b: list[str], max_d: int) -> list[tuple[str, int, int, int, int]] | None:
    """Opcodes of a shortest edit script (Myers 1986), None when more than max_d edits are needed."""
    n, m = len(a), len(b)
    v = {1: 0}
    trace = []
    for d in range(max_d + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _script(trace, n, m)
    return None


def _script(trace: list[dict[int, int]], n: int, m: int) -> list[tuple[str, int, int, int, int]]:
    """Walk the trace back into opcodes (runs of equal lines, deletes and inserts)."""
    moves: list[tuple[str, int, int]] = []  # (kind, i, j) one line each, backwards
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        if d == 0:
            prev_k = k
        else:
            prev_k = k + 1 if k == -d or (k != d and v[k - 1] < v[k + 1]) else k - 1
        prev_x = v[prev_k] if d else 0
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            moves.append(("equal", x, y))
        if d:
            if x == prev_x:
                moves.append(("insert", x, y - 1))
            else:
                moves.append(("delete", x - 1, y))
            x, y = prev_x, prev_y
    ops: list[list] = []
    for kind, i, j in reversed(moves):
        di, dj = (1, 1) if kind == "equal" else (1, 0) if kind == "delete" else (0, 1)
        if ops and (ops[-1][0] == kind or (kind != "equal" and ops[-1][0] in ("delete", "insert", "replace"))):
            last = ops[-1]
            if last[0] != kind:
                last[0] = "replace"
            last[2] += di
            last[4] += dj
        else:
            ops.append([kind, i, i + di, j, j + dj])
    return [tuple(o) for o in ops]  # type: ignore[misc]


def _unified_lines(a: list[str], b: list[str], fromfile: str, tofile: str, ops) -> list[str]:
    """difflib.unified_diff's text for these opcodes (3 lines of context)."""
    matcher = difflib.SequenceMatcher(None, (), ())
    matcher.opcodes = ops  # get_grouped_opcodes() groups the opcodes it is given
    groups = list(matcher.get_grouped_opcodes(DIFF_CONTEXT))
    if not groups:
        return []
    out = [f"--- {fromfile}\n", f"+++ {tofile}\n"]
    for group in groups:
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return out


def _range(start: int, stop: int) -> str:
    """A unified diff hunk's range, as difflib writes it."""
    begin, length = start + 1, stop - start
    if length == 1:
        return str(begin)
    return f"{begin - 1 if not length else begin},{length}"


@dataclass(frozen=True)
class HostFile:
    """A host file a plan changes besides the config: before None when it does not exist."""

    path: str
    before: bytes | None
    after: bytes


@dataclass(frozen=True)
class ApplyResult:
    step_reached: str
    backup_path: str | None
    verified: bool
    rolled_back: bool
    message: str = ""


@dataclass(frozen=True)
class CtReport:
    """One container scanned. context: the rules.Context it was judged in, and
    planned: the same container with its plan applied (same process only: both
    are dropped before a report crosses to another process), so the audit reads
    the view the scan did and apply verifies against the planned one."""

    host: str
    ct: str
    path: str
    findings: tuple[Finding, ...]
    plan: Plan | None = None
    node: str | None = None
    status: str | None = None
    error: str | None = None
    probe: ProbeResult | None = None  # what the probe saw inside, when it ran
    context: Any = field(default=None, compare=False, repr=False)
    planned: Any = field(default=None, compare=False, repr=False)
    # causes.group(sort_findings(findings)) when the process that made the report grouped them
    # (an offline scan's workers do: it is CPU work); None: grouped when shown.
    causes: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class HostReport:
    host: str
    backend: str
    facts: HostFacts | None
    containers: tuple[CtReport, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    findings: tuple[Finding, ...] = field(default=())  # host-level (LXF301)
    notes: tuple[str, ...] = ()  # how the host was read, when it matters ("read command by command: no python3")
