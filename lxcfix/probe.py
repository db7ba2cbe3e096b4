"""The in-container probe: the script, its argv, and a pure reading of what it prints.

The script (templates/probe.sh, the package lxcfix.templates) runs once per container, the device paths as arguments:

    probe_argv(["/dev/nvidia0", "/dev/nvidia-uvm"])
        -> ["sh", "-c", <script>, "lxcfix-probe", "/dev/nvidia0", "/dev/nvidia-uvm"]

It prints one fact a line:

    lxcfix-probe 1
    node /dev/nvidia-uvm exists=1 char=1 major=511 minor=0 open=EPERM
    gpu skipped /dev/nvidia-uvm          (GPU calls left out: they would have created nodes)
    nvidia_smi rc=0
    nvidia_smi_out GPU 0: NVIDIA H200 (UUID: GPU-...)
    cuinit 999
    driver 580.159.04 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    perm uid=0 gid=0 mode=0660 /dev/dri/renderD128
    agroup render gid=104 name=render members=jellyfin:106
    access render uid=106 gid=104 user=jellyfin open=EACCES via=python3 why=- /dev/dri/renderD128
    end

    parse(text) -> ProbeResult(nodes={"/dev/nvidia-uvm": ProbeNode(..., open="EPERM")},
                               nvidia_smi_rc=0, nvidia_smi_out="GPU 0: ...", cuinit=999,
                               driver_version="580.159.04", raw=text)
    classify("200", "pve1", result, {"/dev/nvidia-uvm": ("c", 511, 0)}, "580.159.04")
        -> [Finding("LXF200", ...), Finding("LXF210", ...)]

Only script() reads anything (the packaged template); parse and classify are pure.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Mapping

from . import memo
from .codes import make
from .errors import BadInput
from .bounded import excerpt, uint
from .facts import ID_MAX, MAJOR_MAX, MINOR_MAX
from .fixes import exact_allow as allow_rule, plan_command
from .render import template_text
from .model import AccessSeen, AccessTry, Finding, Fix, GroupSeen, NodeOwner, ProbeNode, ProbeResult

PROGRAM_NAME = "lxcfix-probe"


# What CUDA/NVML reported on a real H200 (driver 580.159.04) with one node denied at a time:
# shared/ground-truth/nvidia-h200-cgroup-deny.json.
MEASURED_UVM = "measured (H200, driver 580.159.04): with nvidia-uvm denied, cuInit gives 999 while nvidia-smi -L still lists the GPU"
MEASURED_100 = "measured (H200, driver 580.159.04): with nvidiactl (195:255) or nvidia0 (195:0) denied, cuInit gives 100"
MEASURED_NVML_CTL = "measured (H200, driver 580.159.04): with nvidiactl (195:255) denied, nvidia-smi says 'Failed to initialize NVML: Unknown Error' (rc 255)"
MEASURED_NVML_GPU = "measured (H200, driver 580.159.04): with nvidia0 (195:0) denied, nvidia-smi says 'No devices found.' (rc 0)"

CUDA_ERRORS = {
    0: "CUDA_SUCCESS",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    800: "CUDA_ERROR_NOT_PERMITTED",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}


# --- the script ---------------------------------------------------------------------------

@memo.once()
def script() -> str:
    """The probe script's text: templates/probe.sh, packaged as lxcfix.templates (pyproject)."""
    return template_text("probe.sh")


def probe_argv(paths: Iterable[str], access: Iterable[tuple[str, str]] = ()) -> list[str]:
    """argv that runs the probe over `paths` inside a container (wrap it with ContainerExec).

    The paths travel as arguments, never inside the script text. Each must be absolute and
    hold no newline (the output is line-based) and no NUL. access: (group name or gid, path)
    pairs for the group-access check (rules.access.requests), sent before the paths as
    `access:<group>:<path>`.
    """
    paths = list(paths)
    for path in [*paths, *(p for _, p in access)]:
        if not isinstance(path, str) or not path.startswith("/") or "\n" in path or "\0" in path:
            raise BadInput(f"probe: not an absolute device path on one line: {path!r}")
    asked = []
    for spec, path in access:
        if not isinstance(spec, str) or not GROUP_SPEC.fullmatch(spec):
            raise BadInput(f"probe: not a group name or gid: {spec!r}")
        asked.append(f"access:{spec}:{path}")
    return ["sh", "-c", script(), PROGRAM_NAME, *asked, *paths]


# --- parse ----------------------------------------------------------------------------------

# What the container prints is the tenant's: its sh and python3 run the probe. Every number is
# ASCII digits of bounded length and in range, every line at most LINE_MAX characters, the whole
# output at most OUTPUT_MAX bytes; a line of a kind the probe prints that is not what the probe
# prints is noted in `unusable` (the finding LXF206 shows it), never an exception.
OUTPUT_MAX = 1024 * 1024
LINE_MAX = 4096 + 64  # a path (PATH_MAX) and the node line's fields
SMI_LINES_MAX = 64  # nvidia-smi -L prints one line per GPU (and MIG device)
UNUSABLE_MAX = 8  # problems kept for evidence (the count says how many there were)
EXCERPT = 80  # bytes of a bad line shown

_NODE = re.compile(
    r"node (?P<path>/[^\x00]*) exists=(?P<exists>[01]) char=(?P<char>[01])"
    r" major=(?P<major>[0-9]{1,7}|-) minor=(?P<minor>[0-9]{1,7}|-) open=(?P<open>[A-Za-z0-9_]{1,32})"
)
_INT = re.compile(r"-?[0-9]{1,10}")
_VERSION = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,6}){1,3}")
_GROUPS = ("render", "video")


def _number(text: str | None, limit: int) -> int | None:
    """ASCII digits (the regexes allow at most 10) as an int when it is at most `limit`."""
    if text is None or text == "-":
        return None
    value = uint(text, 10, 10, limit)
    return value


def parse(text: str, limit: int = OUTPUT_MAX, truncated: bool = False) -> ProbeResult:
    """What the probe printed -> ProbeResult. Never raises: lines of kinds the probe does
    not print are skipped, a truncated output gives what was seen, and what the probe
    could not have printed is listed in `unusable`. limit: bytes of `text` read at most;
    truncated: the reader already stopped at its cap (the probe was killed there)."""
    problems: list[str] = []
    bad = 0

    def unusable(lineno: int, line: str, why: str) -> None:
        nonlocal bad
        bad += 1
        if len(problems) < UNUSABLE_MAX:
            problems.append(f"line {lineno}: '{excerpt(line)}': {why}")

    data = text.encode("utf-8", "surrogateescape")
    if len(data) > limit:
        text = data[:limit].decode("utf-8", "surrogateescape")
        truncated = True
    nodes: dict[str, ProbeNode] = {}
    smi_rc: int | None = None
    smi_out: list[str] = []
    cuinit: int | None = None
    driver: str | None = None
    groups: dict[str, int] = {}
    lines = text.split("\n")
    if truncated and lines:
        lines = lines[:-1]  # the last one was cut in the middle
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        head, _, rest = line.partition(" ")
        if head not in _KINDS:
            continue  # a line of a kind this lxcfix does not read (a newer probe's, or noise)
        if len(line) > LINE_MAX:
            unusable(lineno, line, f"longer than {LINE_MAX} characters")
            continue
        if head == "node":
            m = _NODE.fullmatch(line)
            major = _number(m["major"], MAJOR_MAX) if m else None
            minor = _number(m["minor"], MINOR_MAX) if m else None
            if m is None or (m["major"] != "-" and major is None) or (m["minor"] != "-" and minor is None):
                unusable(lineno, line, "not a node line the probe prints")
                continue
            nodes[m["path"]] = ProbeNode(path=m["path"], exists=m["exists"] == "1", is_char=m["char"] == "1",
                                         major=major, minor=minor, open=m["open"])
        elif head == "nvidia_smi":
            if not (rest.startswith("rc=") and _INT.fullmatch(rest[3:])):
                unusable(lineno, line, "not an nvidia_smi rc=N line")
                continue
            smi_rc, smi_out = int(rest[3:]), []
        elif head == "nvidia_smi_out":
            if len(smi_out) >= SMI_LINES_MAX:
                unusable(lineno, line, f"more than {SMI_LINES_MAX} lines of nvidia-smi output")
                continue
            smi_out.append(rest)
        elif head == "cuinit":
            if not _INT.fullmatch(rest):
                unusable(lineno, line, "not a cuinit <code> line")
                continue
            cuinit = int(rest)
        elif head == "driver":
            version = rest.split(" ", 1)[0]
            if not _VERSION.fullmatch(version):
                unusable(lineno, line, "not a driver <version> line")
                continue
            driver = version
        elif head == "group":
            name, _, gid = rest.partition(" ")
            value = uint(gid, 10, 10, ID_MAX)
            if value is None:
                unusable(lineno, line, "not a group <name> <gid> line")
                continue
            if name in _GROUPS:
                groups[name] = value
    if bad > len(problems):
        problems.append(f"... {bad - len(problems)} more such lines")
    if truncated:
        problems.append(f"the output went past {limit} bytes: reading stopped there and the probe was killed")
    return ProbeResult(
        nodes=nodes,
        nvidia_smi_rc=smi_rc,
        nvidia_smi_out="\n".join(smi_out),
        cuinit=cuinit,
        driver_version=driver,
        groups=groups,
        raw=text,
        access=parse_access(text),
        unusable=tuple(problems),
    )


# --- parse: group access (probe.sh "Group access") ----------------------------------------------

# A group asked about: a name as groupadd takes it, or a gid.
GROUP_SPEC = re.compile(r"[a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}")
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}"
_ID = r"[0-9]{1,10}"
_ERRNO = r"ok|untried|other|E[A-Z0-9]{1,15}"
_PERM = re.compile(rf"perm uid=({_ID}) gid=({_ID}) mode=([0-7]{{4,6}}) (/.*)")
_AGROUP = re.compile(rf"agroup ({GROUP_SPEC.pattern}) gid=({_ID}|-) name=({_NAME}|-) members=(\S{{1,4096}})")
_MEMBER = re.compile(rf"({_NAME}):({_ID}|-)")
_ACCESS = re.compile(rf"access ({GROUP_SPEC.pattern}) uid=({_ID}|-) gid=({_ID}|-) user=({_NAME}|-)"
                     rf" open=({_ERRNO}) via=(python3|setpriv|-) why=([a-z0-9-]{{1,32}}|E[A-Z0-9]{{1,15}}) (/.*)")
MAX_ACCESS_LINES = 4096  # what a container could print is bounded, whatever it prints
MAX_MEMBERS = 32


def _id(text: str) -> int | None:
    return int(text) if text != "-" and len(text) <= 10 and int(text) <= ID_MAX else None


def parse_access(text: str) -> AccessSeen:
    """The `perm`, `agroup` and `access` lines of the probe's output -> AccessSeen. Total: a
    line that is not exactly one of those (ASCII digits of bounded length, names as groupadd
    takes them) is skipped; at most MAX_ACCESS_LINES of them are read; a later line for the
    same path or group replaces an earlier one."""
    owners: dict[str, NodeOwner] = {}
    groups: dict[str, GroupSeen] = {}
    tries: dict[tuple[str, str], AccessTry] = {}
    read = 0
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if not line.startswith(("perm ", "agroup ", "access ")) or len(line) > 8192:
            continue
        read += 1
        if read > MAX_ACCESS_LINES:
            break
        if m := _PERM.fullmatch(line):
            uid, gid = _id(m[1]), _id(m[2])
            if uid is not None and gid is not None:
                owners[m[4]] = NodeOwner(uid, gid, int(m[3], 8) & 0o7777)
        elif m := _AGROUP.fullmatch(line):
            members = []
            for part in ([] if m[4] == "-" else m[4].split(",")[:MAX_MEMBERS]):
                if mm := _MEMBER.fullmatch(part):
                    members.append((mm[1], _id(mm[2])))
            groups[m[1]] = GroupSeen(m[1], None if m[3] == "-" else m[3], _id(m[2]), tuple(members))
        elif m := _ACCESS.fullmatch(line):
            tries[(m[8], m[1])] = AccessTry(m[8], m[1], _id(m[2]), _id(m[3]), None if m[4] == "-" else m[4],
                                            m[5], None if m[6] == "-" else m[6], None if m[7] == "-" else m[7])
    return AccessSeen(owners, groups, tuple(tries.values()))


# The line kinds parse() reads (the first word); others are skipped.
_KINDS = frozenset({"node", "nvidia_smi", "nvidia_smi_out", "cuinit", "driver", "group"})


def _driver_source(raw: str) -> str | None:
    """Where the probe saw the userspace driver (the file name, escaped), for evidence."""
    for line in raw.split("\n"):
        parts = line.rstrip("\r").split(" ", 2)
        if len(parts) == 3 and parts[0] == "driver" and _VERSION.fullmatch(parts[1]):
            return excerpt(parts[2], 200)
    return None


# --- classify -------------------------------------------------------------------------------

def classify(
    ct: str,
    host: str,
    probe: ProbeResult,
    expected: Mapping[str, tuple[str, int, int]],
    host_driver: str | None,
    allowlist: str | None = None,
    host_majors: Mapping[str, int] | None = None,
    mig: bool | None = None,
    needless: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Findings LXF200-LXF212 for one container.

    expected: container path -> (kind, major, minor) the host says the node is.
    allowlist: the running allowlist as text (one rule a line, or comma-separated), for evidence.
    host_majors: driver name -> char major from the host's /proc/devices, for evidence.
    A path the probe did not report (output cut short) gives no finding.
    mig: whether the host's GPUs have MIG instances (mig_in_use); False makes EACCES on an
    nvidia-caps node info: those nodes matter only for MIG (on a non-MIG GPU CUDA works
    without them, measured on an H200), and no cgroup rule cures EACCES anyway.
    needless: container path -> why the node needs no allow rule (rules.allowlist.needs_no_rule):
    EPERM or EACCES on it is info, privileged or not, with no rule to add (kind MIG_ONLY).
    """
    ctx = _Context(ct, host, allowlist, host_majors or {}, mig, needless)
    findings: list[Finding] = []
    by_path: dict[str, Finding] = {}
    for path, (kind, major, minor) in expected.items():
        node = probe.nodes.get(path)
        if node is None:
            continue
        finding = _node_finding(ctx, node, kind, major, minor)
        if finding is not None:
            finding = replace(finding, numbers=(kind, major, minor))  # the host's numbers, whatever it saw
            findings.append(finding)
            by_path[path] = finding
    findings += _cuinit_findings(ctx, probe, by_path)
    findings += _nvml_findings(ctx, probe, by_path, host_driver)
    if host_driver and probe.driver_version and host_driver.strip() != probe.driver_version:
        findings.append(_driver_mismatch(ctx, probe, host_driver.strip()))
    return findings


class _Context:
    def __init__(self, ct: str, host: str, allowlist: str | None, host_majors: Mapping[str, int],
                 mig: bool | None = None, needless: Mapping[str, str] | None = None):
        self.ct, self.host, self.mig = ct, host, mig
        self.needless = dict(needless or {})
        self.allowlist = ", ".join(
            part.strip() for part in re.split(r"[,\n]", allowlist or "") if part.strip()
        ) if allowlist is not None else None
        self.names: dict[int, list[str]] = {}
        for name, major in host_majors.items():
            self.names.setdefault(major, []).append(name)

    @property
    def plan(self) -> str:
        return plan_command(self.ct, self.host)

    def finding(self, code: str, message: str, device: str | None, evidence: Iterable[str],
                fix: str | None = None, live_fixable: bool | None = None, severity: str | None = None,
                **subject) -> Finding:
        return make(code, self.ct, message, severity=severity, device=device, evidence=tuple(evidence),
                    fix=Fix(fix) if fix else None, host=self.host, live_fixable=live_fixable, **subject)

    def major_evidence(self, major: int | None) -> list[str]:
        names = self.names.get(major) if major is not None else None
        return [f"{'/'.join(names)} is {major} on this host"] if names else []

    def allowlist_evidence(self) -> list[str]:
        if self.allowlist is None:
            return []
        return [f"running allowlist: {self.allowlist or '(empty)'}"]


def _node_finding(ctx: _Context, node: ProbeNode, kind: str, major: int, minor: int) -> Finding | None:
    path, dev = node.path, f"{kind} {major}:{minor}"
    if not node.exists:
        evidence = [f"the host has {path} as {dev}"]
        if node.open not in ("ENOENT", "ENOTDIR"):
            evidence.append(f"stat {path} inside: {node.open}")
        return ctx.finding(
            "LXF202", f"{path} is absent in the container (the host has it as {dev})", path,
            evidence, fix=f"pass {path} into the container and restart it (run: {ctx.plan})")

    right_kind = node.is_char if kind == "c" else (not node.is_char and node.major is not None)
    if not right_kind:
        return ctx.finding(
            "LXF203",
            f"{path} exists in the container but is not a {'character' if kind == 'c' else 'block'} "
            f"device (the host has it as {dev})",
            path,
            [f"probe: {path} exists, char={int(node.is_char)}, open gives {node.open}",
             "a bind mount with optional,create=file whose source was missing at start "
             "leaves an empty regular file there"],
            fix=f"make sure the host has {path} before the container starts (for nvidia-uvm: "
                f"nvidia-modprobe -u -c=0), then restart the container (run: {ctx.plan})")
    if (node.major, node.minor) != (major, minor):
        return ctx.finding(
            "LXF203",
            f"{path} is {kind} {node.major}:{node.minor} in the container but {dev} on the host "
            "(a stale node)",
            path,
            [f"open gives {node.open}", *ctx.major_evidence(major)],
            fix=f"pass the host's {path} in (bind mount or devN:) instead of a copied node, "
                f"then restart the container (run: {ctx.plan})")

    needless = ctx.needless.get(path) or (NO_MIG if ctx.mig is False and is_caps_node(path) else None)
    if needless is not None and node.open in ("EPERM", "EACCES"):
        # Privileged (the cgroup: EPERM) or unprivileged (the node's owner: EACCES, decided first):
        # one answer, info, and no rule to add.
        why = (f"the cgroup device policy denies {dev}" if node.open == "EPERM" else
               "the node's mode and owner keep the container out before the cgroup is asked")
        return ctx.finding(
            "LXF200" if node.open == "EPERM" else "LXF201",
            f"open {path}: {node.open} ({why}); {needless}",
            path,
            ["the nvidia-caps nodes grant MIG configuration (nvidia-cap1) and monitoring (nvidia-cap2); on a GPU "
             "without MIG instances denying them leaves cuInit at 0 (measured on an H200)",
             f"{path} is {dev} on the host"],
            fix="nothing to do unless the container is to use MIG; then pass in and allow the nodes of its "
                "instances by name",
            severity="info", kind=MIG_ONLY)
    if node.open == "EPERM":
        rule = f"{kind} {major}:{minor} rwm" if is_caps_node(path) else allow_rule(kind, major, minor)
        return ctx.finding(
            "LXF200",
            f"open {path}: EPERM (the cgroup device policy denies {dev})",
            path,
            [*ctx.allowlist_evidence(), *ctx.major_evidence(major),
             f"{path} is present inside as {dev}, as on the host: only the cgroup gives EPERM"],
            fix=f"allow {rule} (run: {ctx.plan})",
            live_fixable=True)
    if node.open == "EACCES":
        return ctx.finding(
            "LXF201",
            f"open {path}: EACCES (not the cgroup: the node's mode/owner, the idmap or a nodev "
            "mount keeps the container's root out)",
            path,
            ["the cgroup device policy answers EPERM, not EACCES",
             "in an unprivileged container, host-owned nodes show as nobody:nogroup and only "
             "their 'other' bits count"],
            fix="give the node a mode or group the container can use (devN: ...,gid=N,mode=0660 "
                "or 0666), or map the host group in with lxc.idmap")
    return None  # ok, or ENXIO/ENODEV/...: the cgroup let it through; see the GPU findings


MISMATCH = "driver-mismatch"  # the cause kind of a cuInit/NVML failure the userspace's version explains
MIG_ONLY = "mig-only"  # the cause kind of a denied node only MIG needs: a cause of its own, never the GPU's
NO_MIG = "it matters only for MIG, and no GPU of this host has MIG instances (CUDA and nvidia-smi work without it)"
CAPS_DIR = "/dev/nvidia-caps/"
_MIG_CAP = re.compile(r"/dev/nvidia-caps/nvidia-cap([0-9]{1,7})")
_MIG_DEVICE = re.compile(r"^\s*MIG [0-9]+g\.")


def is_caps_node(path: str) -> bool:
    return path.startswith(CAPS_DIR)


def mig_in_use(probe: ProbeResult | None, host_nodes: Iterable[str]) -> bool:
    """Whether the GPUs have MIG instances: nvidia-smi -L inside lists MIG devices, or the
    host has nvidia-caps nodes beyond nvidia-cap1 and nvidia-cap2 (MIG's config and monitor
    capabilities, which every NVIDIA host with nvidia-caps has; a GPU or compute instance
    gets a node of its own)."""
    if probe is not None and any(_MIG_DEVICE.match(line) for line in probe.nvidia_smi_out.splitlines()):
        return True
    for path in host_nodes:
        m = _MIG_CAP.fullmatch(path)
        if m is not None and m.group(1) not in ("1", "2"):
            return True
    return False


def _nvidia_nodes(probe: ProbeResult) -> tuple[ProbeNode | None, ProbeNode | None, list[ProbeNode]]:
    uvm = ctl = None
    gpus: list[ProbeNode] = []
    for node in probe.nodes.values():
        base = node.path.rsplit("/", 1)[-1]
        if base == "nvidia-uvm":
            uvm = node
        elif base == "nvidiactl":
            ctl = node
        elif re.fullmatch(r"nvidia[0-9]+", base):
            gpus.append(node)
    return uvm, ctl, gpus


def _state(node: ProbeNode) -> str:
    """One node as evidence: 'open /dev/nvidia-uvm: EPERM', with what ENXIO means."""
    if not node.exists:
        return f"{node.path} is absent in the container"
    text = f"open {node.path}: {node.open}"
    if node.open in ("ENXIO", "ENODEV"):
        text += (f" (the cgroup let it through; no driver answers {node.major}:{node.minor}: "
                 "module not loaded, or the major moved)")
    return text


def _broken(node: ProbeNode | None) -> bool:
    return node is not None and (not node.exists or not node.is_char or node.open != "ok")


def _fix_from(by_path: Mapping[str, Finding], nodes: Iterable[ProbeNode | None]) -> str | None:
    for node in nodes:
        if node is not None and node.path in by_path and by_path[node.path].fix:
            return f"{by_path[node.path].fix.title} ({by_path[node.path].code} {node.path})"
    return None


def _smi_summary(probe: ProbeResult) -> str | None:
    if probe.nvidia_smi_rc is None:
        return None
    first = probe.nvidia_smi_out.strip().split("\n", 1)[0] or "(no output)"
    return f"nvidia-smi -L: rc {probe.nvidia_smi_rc}, {first!r}"


def _cuinit_findings(ctx: _Context, probe: ProbeResult, by_path: Mapping[str, Finding]) -> list[Finding]:
    code = probe.cuinit
    if code is None or code == 0:
        return []
    name = CUDA_ERRORS.get(code, "unknown code")
    uvm, ctl, gpus = _nvidia_nodes(probe)
    smi = _smi_summary(probe)
    if code == 999:
        smi_ok = probe.nvidia_smi_rc == 0 and "GPU " in probe.nvidia_smi_out
        message = f"cuInit(0) = 999 {name}: CUDA cannot use /dev/nvidia-uvm" + (
            " (nvidia-smi still works)" if smi_ok else "")
        evidence = [_state(uvm) if uvm else "/dev/nvidia-uvm was not probed"]
        if uvm is not None and not _broken(uvm):
            evidence.append(f"{uvm.path} opens here: the cause is not the cgroup")
        evidence += [e for e in (smi, MEASURED_UVM) if e]
        return [ctx.finding("LXF210", message, uvm.path if uvm else None, evidence,
                            fix=_fix_from(by_path, [uvm]))]
    if code == 100:
        culprits = [n for n in (ctl, *gpus) if _broken(n)]
        message = f"cuInit(0) = 100 {name}: CUDA cannot reach a GPU through /dev/nvidiactl or /dev/nvidiaN"
        evidence = [_state(n) for n in culprits] or ["/dev/nvidiactl and /dev/nvidiaN open fine or were not probed"]
        evidence += [e for e in (smi, MEASURED_100) if e]
    else:
        culprits = [n for n in (ctl, *gpus, uvm) if _broken(n)]
        message = f"cuInit(0) = {code} {name}"
        evidence = [_state(n) for n in culprits] + ([smi] if smi else [])
        if code in (35, 803):
            evidence.append("the container's CUDA driver library and the host's kernel driver disagree")
    device = culprits[0].path if culprits else None
    return [ctx.finding("LXF210", message, device, evidence, fix=_fix_from(by_path, culprits),
                        kind=MISMATCH if code in (35, 803) else None)]


def _nvml_findings(ctx: _Context, probe: ProbeResult, by_path: Mapping[str, Finding],
                   host_driver: str | None) -> list[Finding]:
    rc, out = probe.nvidia_smi_rc, probe.nvidia_smi_out
    if rc is None:
        return []
    _, ctl, gpus = _nvidia_nodes(probe)
    first = out.strip().split("\n", 1)[0] or "(no output)"
    kind = None
    if "Unknown Error" in out:
        nodes = [ctl] if _broken(ctl) else [n for n in gpus if _broken(n)]
        message = f"nvidia-smi: {first} (NVML cannot open /dev/nvidiactl)"
        extra = [MEASURED_NVML_CTL]
    elif "No devices found" in out:
        nodes = [n for n in gpus if _broken(n)]
        message = "nvidia-smi finds no GPU: a /dev/nvidiaN node is denied or missing"
        extra = [MEASURED_NVML_GPU]
    elif "mismatch" in out.lower():
        nodes = []
        kind = MISMATCH
        message = f"nvidia-smi: {first} (the container's NVIDIA libraries do not match the host driver)"
        extra = [f"host driver {host_driver}" if host_driver else "host driver version unknown"]
    elif rc != 0:
        nodes = [n for n in (ctl, *gpus) if _broken(n)]
        message = "nvidia-smi -L timed out" if rc == 124 else f"nvidia-smi -L failed (rc {rc}): {first}"
        extra = []
    else:
        return []
    evidence = [_state(n) for n in nodes if n is not None] + [f"nvidia-smi -L: rc {rc}, {first!r}"] + extra
    return [ctx.finding("LXF211", message, nodes[0].path if nodes else None, evidence,
                        fix=_fix_from(by_path, nodes), kind=kind)]


def _driver_mismatch(ctx: _Context, probe: ProbeResult, host_driver: str) -> Finding:
    where = _driver_source(probe.raw)
    return ctx.finding(
        "LXF212",
        f"NVIDIA driver mismatch: host kernel driver {host_driver}, container userspace "
        f"{probe.driver_version}",
        None,
        [f"host: NVIDIA kernel module {host_driver}",
         f"container: {probe.driver_version} from {where}" if where else f"container: {probe.driver_version}",
         "CUDA and NVML need the container's libraries to match the host's kernel module exactly"],
        fix=f"install the {host_driver} userspace driver in the container without its kernel "
            f"module (the NVIDIA .run installer with --no-kernel-module), or bind-mount the host's libraries")
