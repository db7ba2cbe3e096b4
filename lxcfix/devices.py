"""Devices: /proc/devices, the device catalog, cgroup rules and their evaluation.

Pure: data in, data out.

    parse_proc_devices("Character devices:\\n195 nvidia\\n511 nvidia-uvm\\n\\nBlock devices:\\n8 sd\\n")
        == ({"nvidia": (195,), "nvidia-uvm": (511,)}, {"sd": (8,)})
    parse_rule("c 195:* rwm") == DeviceRule("c", 195, None, "rwm")
    RuleSet.replay([("deny", "a"), ("allow", "c 195:* rwm")]).allows("c", 195, 0, "rw") is True

LXC's list semantics live here too (LxcDeviceList mirrors LXC 5.0's struct
bpf_devices; measured byte-identical on 6.0.4), and the compiled program they
produce (Program, which lxcfix.bpf decodes from the kernel's copy).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, NamedTuple

from .model import DeviceNode, DeviceRule, HostFacts

# ---- /proc/devices


_MAJOR = re.compile(r"[0-9]{1,7}")  # ASCII digits only: str.isdigit() takes "²", which int() refuses


def parse_proc_devices(text: str) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """(char majors by name, block majors by name)."""
    char: dict[str, list[int]] = {}
    block: dict[str, list[int]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Character devices"):
            section = char
        elif line.startswith("Block devices"):
            section = block
        elif section is not None and line:
            parts = line.split(None, 1)
            if len(parts) == 2 and _MAJOR.fullmatch(parts[0]):
                section.setdefault(parts[1], []).append(int(parts[0]))
    return ({k: tuple(v) for k, v in char.items()}, {k: tuple(v) for k, v in block.items()})


# ---- the catalog (DOMAIN.md section 2)

# Majors several drivers share: never allow a wildcard minor there.
SHARED_MAJORS = frozenset({1, 4, 5, 7, 10, 13})

# Kernel dynamic char majors: 254..234, then 511..384.
def is_dynamic_major(major: int) -> bool:
    return 234 <= major <= 254 or 384 <= major <= 511


@dataclass(frozen=True)
class NodeSpec:
    """A node path pattern; minor(match) gives the canonical minor. modules: kernel
    modules this node exists through beyond its profile's; create(match): the
    nvidia-modprobe arguments that make it now (fixes.modprobe_argv), or None."""

    pattern: str
    minor: Callable[[re.Match], int]
    modules: tuple[str, ...] = ()
    create: Callable[[re.Match], tuple[str, ...] | None] | None = None

    def match(self, path: str) -> re.Match | None:
        return _compiled(self.pattern).fullmatch(path)


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _fixed(n: int) -> Callable[[re.Match], int]:
    return lambda m: n


def _group(i: int = 1, offset: int = 0) -> Callable[[re.Match], int]:
    return lambda m: int(m.group(i)) + offset


def _args(*args: str) -> Callable[[re.Match], tuple[str, ...]]:
    return lambda m: args


def _nvidia_index(m: re.Match) -> tuple[str, ...] | None:
    """nvidia-modprobe -c N creates /dev/nvidiaN (N < 255; 255 is nvidiactl)."""
    index = m.group(1)
    return (f"-c{index}",) if len(index) <= 3 and int(index) < 255 else None


@dataclass(frozen=True)
class Profile:
    """A device family: everything lxcfix knows about it, in one record. The side
    tables (fixes, rules, gather, facts, audit, causes, cli) read these fields.

    name: the profile's name (findings' `profile`, templates/fix/<name>.<style>.j2
      when it needs its own template).
    nodes: the host paths it makes, each with its canonical minor.
    drivers: its names in /proc/devices (the first one found gives a dynamic major).
    static: its major when the kernel fixes it; None: dynamic, looked up by `drivers`.
    dirs: directories mounted whole (create=dir); defaults: the nodes a directory
      mount usually holds, and the canonical nodes when the host's dev/ was not read.
    family: the one device several profiles make up (causes: "nvidia" for nvidia,
      nvidia-uvm, nvidia-caps: one GPU); None: the profile is its own family.
    noun: what the admin calls the device ("the GPU"): a cause's title says
      "CT 200 cannot use the GPU".
    groups: (path regex, group) the host's udev gives its nodes: who inside an
      unprivileged container may open them (rules.access, LXF114/LXF201).
    modules: the kernel modules its nodes exist through (rules.upgrade).
    driver_modules: (sysfs driver, modules) when a driver of its device needs more
      modules than itself (NVIDIA's card nodes need nvidia_drm).
    sysfs_driver: /sys/dev/char/M:m/device names the driver (gather.device_drivers).
    out_of_tree: modules built outside the kernel tree lxcfix knows of, asked about
      even when /proc/modules cannot be read (facts.KNOWN_OUT_OF_TREE).
    module_prefix: modules whose name starts with it belong to this profile's driver
      package (one DKMS package builds them all).
    dkms: the DKMS package names that build its out-of-tree modules.
    always_present: the node exists whenever the kernel runs (misc devices):
      a bind mount without `optional` is no risk (LXF111 is not said).
    missing_hint: what makes a missing node (LXF112's fix).
    deny_symptom: what a denied node shows inside ("CUDA error 999"), for audit.
    absent_at_boot: why the node may be absent at boot, for audit (LXF111).
    wildcard: False when a rule lxcfix writes names each node even on a major the
      driver owns (`c M:* rwm` on nvidia-caps would also grant nvidia-cap1, MIG's
      configuration capability).
    subsystems: the kernel's uevent SUBSYSTEM of its nodes ("drm", "misc"): `lxcfix watch`
      listens for add/remove/change there (heal.EventFilter).
    reload_modules: more modules whose load or unload makes, removes or renumbers its
      nodes (drivers that serve it: i915, amdgpu), beyond `modules` and `out_of_tree`;
      only `lxcfix watch` reads them.
    """

    name: str
    nodes: tuple[NodeSpec, ...]
    drivers: tuple[str, ...] = ()
    static: int | None = None
    dirs: tuple[str, ...] = ()  # directories mounted whole (create=dir)
    defaults: tuple[str, ...] = ()  # nodes a directory mount usually holds
    family: str | None = None
    noun: str | None = None
    groups: tuple[tuple[str, str], ...] = ()
    modules: tuple[str, ...] = ()
    driver_modules: tuple[tuple[str, tuple[str, ...]], ...] = ()
    sysfs_driver: bool = False
    out_of_tree: tuple[str, ...] = ()
    module_prefix: str | None = None
    dkms: tuple[str, ...] = ()
    always_present: bool = False
    missing_hint: str | None = None
    deny_symptom: str | None = None
    absent_at_boot: str | None = None
    wildcard: bool = True
    subsystems: tuple[str, ...] = ()
    reload_modules: tuple[str, ...] = ()

    @property
    def dynamic(self) -> bool:
        return self.static is None

    @property
    def family_name(self) -> str:
        return self.family or self.name

    def major(self, facts: HostFacts) -> int | None:
        if self.static is not None:
            return self.static
        for name in self.drivers:
            m = facts.char_major(name)
            if m is not None:
                return m
        return None

    def owns_major(self) -> bool:
        """True when one driver owns the whole major, so `c M:* rwm` grants nothing else."""
        return self.static is None or self.static not in SHARED_MAJORS

    def owns_module(self, module: str) -> bool:
        """Is `module` one of this profile's driver package (its out-of-tree list or prefix)?"""
        return module in self.out_of_tree or (self.module_prefix is not None and module.startswith(self.module_prefix))


_NVIDIA: dict[str, Any] = dict(family="nvidia", noun="the GPU", module_prefix="nvidia", dkms=("nvidia",))

CATALOG: tuple[Profile, ...] = (
    Profile(
        "nvidia",
        (
            NodeSpec(r"/dev/nvidia([0-9]{1,6})", _group(), create=_nvidia_index),
            NodeSpec(r"/dev/nvidiactl", _fixed(255), create=_args("-c255")),
            NodeSpec(r"/dev/nvidia-modeset", _fixed(254), modules=("nvidia_modeset", "nvidia"), create=_args("-m")),
        ),
        drivers=("nvidia", "nvidia-frontend"),
        static=195,
        defaults=("/dev/nvidia0", "/dev/nvidiactl"),
        modules=("nvidia",),
        out_of_tree=("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"),
        **_NVIDIA,
    ),
    Profile(
        "nvidia-uvm",
        (NodeSpec(r"/dev/nvidia-uvm", _fixed(0), create=_args("-u", "-c0")),
         NodeSpec(r"/dev/nvidia-uvm-tools", _fixed(1), create=_args("-u", "-c0"))),
        drivers=("nvidia-uvm",),
        defaults=("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
        modules=("nvidia_uvm", "nvidia"),
        missing_hint="run `nvidia-modprobe -u -c=0` on the host, and make it run at boot before guests start",
        deny_symptom="CUDA error 999",
        absent_at_boot="/dev/nvidia-uvm is absent at boot until something runs nvidia-modprobe",
        **_NVIDIA,
    ),
    Profile(
        "nvidia-caps",
        (NodeSpec(r"/dev/nvidia-caps/nvidia-cap([0-9]{1,6})", _group()),),
        drivers=("nvidia-caps",),
        dirs=("/dev/nvidia-caps",),
        modules=("nvidia",),
        wildcard=False,
        **_NVIDIA,
    ),
    Profile(
        "dri",
        (NodeSpec(r"/dev/dri/card([0-9]{1,6})", _group()), NodeSpec(r"/dev/dri/renderD([0-9]{1,6})", _group())),
        drivers=("drm",),
        static=226,
        dirs=("/dev/dri",),
        defaults=("/dev/dri/card0", "/dev/dri/renderD128"),
        # the /dev/dri/by-path names are what the LXF113 fix passes in
        groups=((r"/dev/dri/renderD[0-9]+", "render"), (r"/dev/dri/by-path/[^/]+-render", "render"),
                (r"/dev/dri/card[0-9]+", "video"), (r"/dev/dri/by-path/[^/]+-card", "video")),
        driver_modules=(("nvidia", ("nvidia_drm", "nvidia")),),
        sysfs_driver=True,
        subsystems=("drm",),
        reload_modules=("i915", "xe", "amdgpu", "radeon", "nouveau", "nvidia_drm", "virtio_gpu"),
    ),
    Profile("kfd", (NodeSpec(r"/dev/kfd", _fixed(0)),), drivers=("kfd",), defaults=("/dev/kfd",),
            groups=((r"/dev/kfd", "render"),), sysfs_driver=True, subsystems=("kfd",), reload_modules=("amdgpu",)),
    Profile("tun", (NodeSpec(r"/dev/net/tun", _fixed(200)),), drivers=("misc",), static=10, dirs=("/dev/net",),
            defaults=("/dev/net/tun",), always_present=True, subsystems=("misc",), reload_modules=("tun",)),
    Profile("fuse", (NodeSpec(r"/dev/fuse", _fixed(229)),), drivers=("misc",), static=10, defaults=("/dev/fuse",),
            always_present=True, subsystems=("misc",), reload_modules=("fuse",)),
    Profile("kvm", (NodeSpec(r"/dev/kvm", _fixed(232)),), drivers=("misc",), static=10, defaults=("/dev/kvm",),
            always_present=True, subsystems=("misc",), reload_modules=("kvm", "kvm_intel", "kvm_amd")),
    Profile("apex", (NodeSpec(r"/dev/apex_([0-9]{1,6})", _group()),), static=120, defaults=("/dev/apex_0",),
            modules=("apex", "gasket"), sysfs_driver=True, out_of_tree=("gasket", "apex"), dkms=("gasket", "apex"),
            subsystems=("apex",)),
    Profile("usb-serial", (NodeSpec(r"/dev/ttyUSB([0-9]{1,6})", _group()),), static=188,
            groups=((r"/dev/ttyUSB[0-9]+", "dialout"),), sysfs_driver=True, subsystems=("tty",),
            reload_modules=("usbserial", "ftdi_sio", "cp210x", "ch341", "pl2303")),
    Profile("usb-acm", (NodeSpec(r"/dev/ttyACM([0-9]{1,6})", _group()),), static=166,
            groups=((r"/dev/ttyACM[0-9]+", "dialout"),), sysfs_driver=True, subsystems=("tty",),
            reload_modules=("cdc_acm",)),
    # NPUs: the kernel's compute-accelerator class (drivers/accel, ACCEL_MAJOR 261, one minor per
    # device); Intel's intel_vpu (Core Ultra) and AMD's amdxdna (Ryzen AI), in-tree since 6.3 and
    # 6.14, amdxdna built out of tree (AMD's xdna-driver) before that. OpenVINO, Ollama.
    Profile("accel", (NodeSpec(r"/dev/accel/accel([0-9]{1,6})", _group()),), drivers=("accel",), static=261,
            dirs=("/dev/accel",), defaults=("/dev/accel/accel0",), noun="the NPU",
            groups=((r"/dev/accel/accel[0-9]+", "render"),), sysfs_driver=True, out_of_tree=("amdxdna",),
            subsystems=("accel",), reload_modules=("intel_vpu", "amdxdna", "habanalabs", "qaic")),
    Profile(
        "usb",
        (NodeSpec(r"/dev/bus/usb/([0-9]{1,6})/([0-9]{1,6})", lambda m: (int(m.group(1)) - 1) * 128 + int(m.group(2)) - 1),),
        static=189,
        dirs=("/dev/bus/usb",),
        subsystems=("usb",),
    ),
)

PROFILES: Mapping[str, Profile] = {p.name: p for p in CATALOG}
CATALOG_DIRS = frozenset(d for p in CATALOG for d in p.dirs)

# ---- derived from the profiles: the tables the other modules read

# Nodes with a group but no catalog profile: V4L capture devices (/dev/video*), which
# lxcfix passes through only as what a config already gives.
OUTSIDE_CATALOG_GROUPS: tuple[tuple[str, str], ...] = ((r"/dev/video[0-9]+", "video"),)
# (path regex, group) the host gives nodes (Debian/Proxmox udev rules): fixes.group_for.
NODE_GROUPS: tuple[tuple[str, str], ...] = tuple(g for p in CATALOG for g in p.groups) + OUTSIDE_CATALOG_GROUPS
# The /proc/devices names of the catalog (lxcfix facts shows these majors).
PROC_NAMES: tuple[str, ...] = tuple(dict.fromkeys(d for p in CATALOG for d in p.drivers))
# Out-of-tree modules lxcfix knows of (facts.KNOWN_OUT_OF_TREE, gather asks for them).
KNOWN_OUT_OF_TREE: tuple[str, ...] = tuple(dict.fromkeys(m for p in CATALOG for m in p.out_of_tree))


def family(name: str) -> frozenset[str]:
    """The profile names that make up one device family ("nvidia" -> nvidia, nvidia-uvm, nvidia-caps)."""
    return frozenset(p.name for p in CATALOG if p.family_name == name)


def family_of(profile: str | None) -> str | None:
    """The family a profile (by name) belongs to; None for a name outside the catalog."""
    p = PROFILES.get(profile or "")
    return p.family_name if p is not None else None


def noun_of(family_name: str | None) -> str | None:
    """What the admin calls a family's device ("the GPU"), when its profiles say."""
    return next((p.noun for p in CATALOG if p.family_name == family_name and p.noun), None)


def node_spec(path: str) -> tuple[Profile, NodeSpec, re.Match] | None:
    """The catalog entry that names `path`: (profile, node spec, the match)."""
    for profile in CATALOG:
        for spec in profile.nodes:
            m = spec.match(path)
            if m:
                return profile, spec, m
    return None


def module_profile(module: str) -> Profile | None:
    """The profile whose driver package builds `module` (nvidia_uvm -> nvidia)."""
    return next((p for p in CATALOG if p.owns_module(module)), None)



@dataclass(frozen=True)
class CatalogNode:
    """A host path the catalog knows: its profile and expected numbers."""

    path: str
    profile: Profile
    major: int | None  # None: dynamic and its driver is not loaded
    minor: int


@functools.lru_cache(maxsize=4096)
def _catalog_match(path: str) -> tuple[Profile, int] | None:
    """(profile, canonical minor) for a node path; the host's facts give the major."""
    for profile in CATALOG:
        for spec in profile.nodes:
            m = spec.match(path)
            if m:
                return profile, spec.minor(m)
    return None


def lookup(path: str, facts: HostFacts) -> CatalogNode | None:
    memo = facts.memo.setdefault("lookup", {})  # one host's answers: a fleet asks the same few
    if path not in memo:
        hit = _catalog_match(path)
        memo[path] = None if hit is None else CatalogNode(path, hit[0], hit[0].major(facts), hit[1])
    return memo[path]


def profile_for_major(major: int, facts: HostFacts, minor: int | None = None) -> Profile | None:
    """Which catalog profile a char major (and minor, on a shared major) belongs to here."""
    memo = facts.memo.setdefault("profile_for_major", {})
    key = (major, minor if major in SHARED_MAJORS else None)
    if key not in memo:
        memo[key] = _profile_for_major(major, facts, minor)
    return memo[key]


def _profile_for_major(major: int, facts: HostFacts, minor: int | None) -> Profile | None:
    for profile in CATALOG:
        if profile.major(facts) != major:
            continue
        if major in SHARED_MAJORS and not any(n.minor == minor for n in nodes_of(profile, facts)):
            continue
        return profile
    return None


def nodes_of(profile: Profile, facts: HostFacts) -> list[DeviceNode]:
    """The host nodes of a profile: stat()ed ones when known, else its canonical ones."""
    if facts.nodes_known:
        return [n for p, n in sorted(facts.nodes.items())
                if n.kind == "c" and (hit := lookup(p, facts)) is not None and hit.profile is profile]
    return [n for p in profile.defaults if (n := resolve(p, facts)) is not None]


def resolve(path: str, facts: HostFacts) -> DeviceNode | None:
    """The node at `path` on the host: stat()ed when the host's dev/ was read,
    else from the catalog and /proc/devices. None when it does not exist, or what is
    there is not a node (a regular file, a directory: facts.not_nodes)."""
    if facts.nodes_known:
        return facts.nodes.get(path)
    memo = facts.memo.setdefault("resolve", {})  # one host's answers, as lookup's (DeviceNode is frozen)
    if path in memo:
        return memo[path]
    if path in facts.not_nodes:
        node = None
    else:
        known = lookup(path, facts)
        node = None if known is None or known.major is None else DeviceNode(path, "c", known.major, known.minor,
                                                                             0o20666)
    memo[path] = node
    return node


def nodes_under(directory: str, facts: HostFacts) -> list[DeviceNode]:
    """Nodes a directory bind mount brings in (/dev/dri -> card0, renderD128)."""
    prefix = directory.rstrip("/") + "/"
    if facts.nodes_known:
        return [n for p, n in sorted(facts.nodes.items()) if p.startswith(prefix)]
    out = []
    for profile in CATALOG:
        if directory in profile.dirs:
            out += [n for p in profile.defaults if (n := resolve(p, facts)) is not None]
    return out


# ---- rules

_RULE = re.compile(r"^([abc])\s+(\*|[0-9]{1,10}):(\*|[0-9]{1,10})\s+([rwm]+)$")


class RuleError(ValueError):
    pass


def parse_rule(value: str, allow: bool = True) -> DeviceRule:
    """Every form LXC takes: `a`, `c 195:* rwm`, `b 8:* r`, `/dev/net/tun rw` (memoized: a
    DeviceRule is frozen, and a host's configs repeat a few rule lines; RuleError is raised each time)."""
    return _parse_rule(value, allow) if len(value) <= 256 else _parse_rule.__wrapped__(value, allow)


@functools.lru_cache(maxsize=2048)
def _parse_rule(value: str, allow: bool = True) -> DeviceRule:
    """Every form LXC takes: `a`, `c 195:* rwm`, `b 8:* r`, `/dev/net/tun rw`."""
    v = value.strip()
    if v == "a" or re.fullmatch(r"a(\s+\*:\*)?(\s+[rwm]+)?", v):
        return DeviceRule("a", None, None, "rwm", allow=allow)
    if v.startswith("/"):
        parts = v.split()
        access = parts[1] if len(parts) > 1 else "rwm"
        if len(parts) > 2 or not re.fullmatch(r"[rwm]+", access):
            raise RuleError(f"bad device rule {value!r}")
        return DeviceRule("c", None, None, _norm_access(access), path=parts[0], allow=allow)
    m = _RULE.match(v)
    if not m:
        raise RuleError(f"bad device rule {value!r}")
    kind, major, minor, access = m.groups()
    return DeviceRule(
        kind,
        None if major == "*" else int(major),
        None if minor == "*" else int(minor),
        _norm_access(access),
        allow=allow,
    )


def _norm_access(access: str) -> str:
    return "".join(c for c in "rwm" if c in access)


def covers_access(granted: str, wanted: str) -> bool:
    return set(wanted) <= set(granted)


def is_overbroad(rule: DeviceRule) -> str | None:
    """Why an allow rule grants too much, or None (LXF104)."""
    if not rule.allow or rule.path is not None:
        return None
    if rule.kind == "a":
        return "allows every device"
    if rule.access == "m":
        return None  # mknod only: LXC's own common.conf does this
    if rule.major is None:
        return f"allows every {'block' if rule.kind == 'b' else 'char'} device"
    if rule.kind == "b" and rule.minor is None:
        return f"allows every block device of major {rule.major}"
    if rule.minor is None and rule.major in SHARED_MAJORS:
        extra = {10: " (/dev/mapper/control, /dev/loop-control, /dev/kvm, ...)"}.get(rule.major, "")
        return f"a wildcard minor on shared major {rule.major} grants every device on it{extra}"
    return None


Mode = Literal["allowlist", "denylist"]


# ---- the compiled program

ACC_MKNOD, ACC_READ, ACC_WRITE = 1, 2, 4  # the kernel's access bits


def access_from_mask(mask: int) -> str:
    """1 mknod, 2 read, 4 write -> subset of "rwm" in that order."""
    return ("r" if mask & ACC_READ else "") + ("w" if mask & ACC_WRITE else "") + ("m" if mask & ACC_MKNOD else "")


def mask_from_access(access: str) -> int:
    return (ACC_READ if "r" in access else 0) | (ACC_WRITE if "w" in access else 0) | (ACC_MKNOD if "m" in access else 0)


@dataclass(frozen=True)
class LiveAllowlist:
    """One device program: what LXC compiles from a container's rules, or what
    lxcfix.bpf decodes from the kernel's copy.

    rules are in CONFIG order (the program holds them in reverse): rules[-1]
    is the block checked first. unknown: something in the program was not
    LXC's layout; rules then hold the blocks decoded before it (in program
    order those are the first checked, so a match among them still decides),
    and mode comes from the final `r0 = K; exit` when one was found.
    prog_id: the kernel's id, when read live. others: the other device
    programs that also run for this cgroup (several attached with
    BPF_F_ALLOW_MULTI, or inherited from ancestors); the kernel allows an
    access only when every one of them does, so allows() ANDs them in.
    """

    mode: Mode
    rules: tuple[DeviceRule, ...] = ()
    unknown: bool = False
    prog_id: int | None = field(default=None, compare=False)
    others: tuple["LiveAllowlist", ...] = field(default=(), compare=False)

    def _own_verdict(self, kind: str, major: int, minor: int, access: str) -> bool | None:
        for rule in reversed(self.rules):  # program order: last config line first
            if rule.covers(kind, major, minor, access):
                return rule.allow
        if self.unknown:
            return None
        return self.mode == "denylist"

    def verdict(self, kind: str, major: int, minor: int, access: str = "rw") -> bool | None:
        """True/False as the kernel decides; None when an undecoded part of a
        program would decide."""
        verdicts = [self._own_verdict(kind, major, minor, access)]
        verdicts += [o._own_verdict(kind, major, minor, access) for o in self.others]
        if False in verdicts:
            return False
        if None in verdicts:
            return None
        return True

    def allows(self, kind: str, major: int, minor: int, access: str = "rw") -> bool:
        """kind "c"|"b"; access a subset of "rwm" (several letters: all at
        once, as open(O_RDWR) asks). An undecidable answer counts as no."""
        return self.verdict(kind, major, minor, access) is True

    def summary(self) -> str:
        text = f"{self.mode}: {describe(self.rules) or 'no rules'}"
        if self.unknown:
            text += " (+ undecoded instructions)"
        return text


def describe(rules: Iterable[DeviceRule]) -> str:
    """"c 195:* rwm, deny c 195:3 rwm" (in the order given): a program's rules."""
    return ", ".join(r.text(listing=True) for r in rules)


# ---- LXC's list, mirrored

@dataclass
class _Entry:
    kind: str
    major: int
    minor: int
    access: str  # raw, as written (LXC compares it with strcmp)
    allow: bool
    origin: str = ""  # where the line came from ("200.conf:14"), for messages

    def rule(self) -> DeviceRule:
        return DeviceRule(self.kind, None if self.major < 0 else self.major,
                          None if self.minor < 0 else self.minor,
                          access_from_mask(mask_from_access(self.access)), allow=self.allow)


def parse_lxc_value(allow: bool, value: str) -> _Entry | None:
    """LXC 5.0's device_cgroup_rule_parse (non-path form); None: LXC rejects it. A new
    entry each time (a list flips its entries in place); the parse itself is memoized,
    since a host's configs repeat a few rule lines."""
    got = _lxc_fields(value) if len(value) <= 256 else _lxc_fields.__wrapped__(value)
    return None if got is None else _Entry(*got, allow)


@functools.lru_cache(maxsize=2048)
def _lxc_fields(value: str) -> tuple[str, int, int, str] | None:
    """(kind, major, minor, access) of a rule value as LXC parses it; None: LXC rejects it."""
    v = value
    if v == "a":
        return "a", -1, -1, ""
    if not v or v[0] not in "abc":
        return None
    kind, v = v[0], v[1:]
    if not v or v[0] not in " \t\n\v\f\r":
        return None
    v = v[1:]

    def number(v: str) -> tuple[int | None, str] | None:
        if v[:1] == "*":
            return -1, v[1:]
        digits = ""
        while v[:1] and v[0] in "0123456789" and len(digits) < 49:
            digits, v = digits + v[0], v[1:]
        if not digits or int(digits) > 2**31 - 1:
            return None
        return int(digits), v

    got = number(v)
    if got is None:
        return None
    major, v = got
    if v[:1] != ":":
        return None
    got = number(v[1:])
    if got is None:
        return None
    minor, v = got
    if not v or v[0] not in " \t\n\v\f\r":
        return None
    v = v[1:]
    access = ""
    for ch in v[:3]:
        if ch in "rwm":
            access += ch
        elif ch in "\n\0":
            break
        else:
            return None
    return kind, major, minor, access


class LxcDeviceList:
    """LXC 5.0's struct bpf_devices, replayed: feed it the config's
    lxc.cgroup2.devices.* lines in order (includes expanded), then ask for the
    program it would attach.

        dl = LxcDeviceList()
        dl.add(False, "a"); dl.add(True, "c 195:* rwm"); dl.add(False, "c 195:0 rwm")
        dl.program()   -> LiveAllowlist("allowlist", (DeviceRule("c", 195, None, "rwm"),))
    """

    def __init__(self) -> None:
        self.mode: Mode = "allowlist"
        self.entries: list[_Entry] = []  # LXC list order: head (newest) first
        self.touched: _Entry | None = None  # the entry the last add() added, flipped or reused
        self._shared = False  # entries are another list's (shared()): copied before one is flipped

    def copy(self) -> "LxcDeviceList":
        """An independent copy (entries are flipped in place by later lines)."""
        dl = LxcDeviceList()
        dl.mode = self.mode
        dl.entries = [_Entry(e.kind, e.major, e.minor, e.access, e.allow, e.origin) for e in self.entries]
        return dl

    def shared(self) -> "LxcDeviceList":
        """A copy whose entries are this list's own objects until a later line flips one (then
        that one is copied first): RuleSet.replay continues the cached prefix of every
        container of a host without copying it each time. Not for replay_outcomes, which
        tells entries apart by identity."""
        dl = LxcDeviceList()
        dl.mode = self.mode
        dl.entries = list(self.entries)
        dl._shared = True
        return dl

    def emitted(self, e: _Entry) -> bool:  # bpf_device_add: only the mode's polarity is compiled
        return e.allow == (self.mode == "allowlist")

    def add(self, allow: bool, value: str,
            stat: Callable[[str], tuple[str, int, int] | None] | None = None, origin: str = "") -> str:
        """One `devices.allow|deny = value` line. Returns what LXC did:
        "mode", "added", "switched", "reused" or "rejected" (logged, skipped).
        stat(path) -> (kind, major, minor) resolves the path form (allow only)."""
        value = value.strip()
        self.touched = None
        if allow and value.startswith("/"):
            parts = value.split()
            if len(parts) < 2 or stat is None:
                return "rejected"
            hit = stat(parts[0])
            acc = parse_lxc_value(True, f"c 0:0 {parts[1]}")
            if hit is None or acc is None:
                return "rejected"
            entry = _Entry(hit[0], hit[1], hit[2], acc.access, True, origin)
        else:
            entry = parse_lxc_value(allow, value)
            if entry is None:
                return "rejected"
            entry.origin = origin
        if entry.kind == "a" and entry.major < 0 and entry.minor < 0 and entry.access == "":
            self.mode = "denylist" if entry.allow else "allowlist"
            self.entries = []
            return "mode"
        for at, cur in enumerate(self.entries):
            if (cur.kind, cur.major, cur.minor, cur.access) != (entry.kind, entry.major, entry.minor, entry.access):
                continue
            if not self.emitted(cur):
                continue
            if cur.allow != entry.allow:
                if self._shared:  # the cached prefix's entry stays as it was
                    cur = self.entries[at] = _Entry(cur.kind, cur.major, cur.minor, cur.access, cur.allow, cur.origin)
                self.touched = cur
                cur.allow = entry.allow
                return "switched"
            self.touched = cur
            return "reused"
        self.entries.insert(0, entry)
        self.touched = entry
        return "added"

    def program(self) -> LiveAllowlist:
        """The program LXC builds from the list (what a live update attaches)."""
        emitted = [e.rule() for e in self.entries if self.emitted(e)]
        return LiveAllowlist(self.mode, tuple(reversed(emitted)), False)

    def unloadable(self) -> bool:
        """True when the program would be rejected by the kernel's verifier:
        an emitted rule with no check at all (`a *:* rwm`, not the bare `a`)
        ends the program early and leaves the rest unreachable. Measured:
        `lxc.cgroup2.devices.allow = a *:* rwm` in allowlist mode makes
        lxc-start fail ("Failed to load bpf program", EINVAL)."""
        return any(e.kind == "a" and e.major < 0 and e.minor < 0 and mask_from_access(e.access) == 7
                   for e in self.entries if self.emitted(e))

    def at_start(self) -> LiveAllowlist | None:
        """What lxc-start attaches: None (no program, all devices allowed) when
        the list is empty."""
        return self.program() if self.entries else None




class LineOutcome(NamedTuple):
    """What LXC did with one `devices.allow|deny` line (replay_outcomes).

    status: "mode" (the bare `a`: mode set, list emptied), "cleared" (an empty value:
    the earlier lines of its key dropped when the config is read), "removed" (dropped
    so by the empty line `by`), "added", "switched" (an equal listed rule flipped),
    "reused" (an equal listed rule of the same polarity: a duplicate), "rejected".
    entry: the list entry the line added, flipped or reused; dropped: the entries
    a "mode" or "cleared" line did away with, and whether each was compiled then."""

    verb: str
    value: str
    origin: str
    status: str
    entry: "_Entry | None" = None
    dropped: tuple[tuple["_Entry", bool], ...] = ()
    by: str = ""


def _line_entry(line) -> "_Entry | None":
    verb, value, origin = line
    entry = parse_lxc_value(verb == "allow", value.strip())
    if entry is not None:
        entry.origin = origin
    return entry


def replay_outcomes(lines, resolve_path=None, shared: int = 0) -> tuple[LxcDeviceList, list[LineOutcome]]:
    """The list at the end and what LXC did with each of lines[shared:] (the
    container's own lines; the shared prefix, LXC's and Proxmox's includes, is
    replayed from RuleSet.replay's cache unless an own empty value reaches back
    into it). lines: (verb, value, origin)."""
    lines = [item if len(item) > 2 else (item[0], item[1], "") for item in lines]
    kept, removed_by = _kept(lines)
    clears = any(not v.strip() for _, v, _ in lines[shared:])
    cached = _replayed_prefix(tuple(lines[:shared])) if shared and not clears else None
    dl, start = (cached.copy(), shared) if cached is not None else (LxcDeviceList(), 0)
    done: dict[int, tuple] = {}
    for i in kept:
        if i < start:
            continue
        verb, value, origin = lines[i]
        # What a mode line (`a`) empties: only such a line needs the list as it was.
        before = tuple((e, dl.emitted(e)) for e in dl.entries) if value.lstrip()[:1] == "a" else ()
        status = dl.add(verb == "allow", value.strip(), resolve_path, origin)
        done[i] = (status, dl.touched, before if status == "mode" else ())
    out: list[LineOutcome] = []
    for i in range(shared, len(lines)):
        verb, value, origin = lines[i]
        if not value.strip():
            dropped = tuple((e, True) for k in sorted(removed_by) if removed_by[k] == i
                            if (e := _line_entry(lines[k])) is not None)
            out.append(LineOutcome(verb, value, origin, "cleared", None, dropped))
        elif i in removed_by:
            out.append(LineOutcome(verb, value, origin, "removed", by=lines[removed_by[i]][2]))
        else:
            status, entry, dropped = done[i]
            out.append(LineOutcome(verb, value, origin, status, entry, dropped))
    return dl, out


class SourcedRule(NamedTuple):
    """A rule and where it came from ("200.conf:14", "common.conf:23")."""

    rule: DeviceRule
    origin: str = ""


def _kept(lines) -> tuple[list[int], dict[int, int]]:
    """LXC's config-time list (lxc_clear_cgroups): an empty `devices.allow =` drops every
    earlier allow line, an empty `devices.deny =` every earlier deny line (so an empty
    allow keeps `deny = a`, an empty deny keeps the allows); the rest are compiled at
    start in order. (indexes kept, {index removed: index of the empty line})."""
    kept: list[int] = []
    removed_by: dict[int, int] = {}
    for i, (verb, value, _) in enumerate(lines):
        if value.strip():
            kept.append(i)
            continue
        for k in kept:
            if lines[k][0] == verb:
                removed_by[k] = i
        kept = [k for k in kept if lines[k][0] != verb]
    return kept, removed_by


def _replay_into(dl, lines, resolve_path) -> None:
    lines = list(lines)
    for i in _kept(lines)[0]:
        verb, value, origin = lines[i]
        dl.add(verb == "allow", value.strip(), resolve_path, origin)


@functools.lru_cache(maxsize=64)
def _replayed_prefix(prefix: tuple[tuple[str, str, str], ...]):
    """The list after the shared lines; None when they hold path-form rules
    (those resolve against facts, so they are replayed each time)."""
    if any(v.lstrip().startswith("/") for _, v, _ in prefix):
        return None
    dl = LxcDeviceList()
    _replay_into(dl, prefix, None)
    return dl


def _ruleset_of(dl) -> "RuleSet":
    emitted = [e for e in reversed(dl.entries) if dl.emitted(e)]
    rules = tuple(_sourced(e.kind, e.major, e.minor, e.access, e.allow, e.origin) for e in emitted)
    return RuleSet(dl.mode, rules, bool(dl.entries))


@functools.lru_cache(maxsize=4096)  # immutable; the shared prefix's rules recur in every container
def _sourced(kind: str, major: int, minor: int, access: str, allow: bool, origin: str) -> "SourcedRule":
    return SourcedRule(_entry_rule(kind, major, minor, access, allow), origin)


@functools.lru_cache(maxsize=64)
def _prefix_ruleset(prefix: tuple[tuple[str, str, str], ...]) -> "RuleSet | None":
    dl = _replayed_prefix(prefix)
    return _ruleset_of(dl) if dl is not None else None


@functools.lru_cache(maxsize=4096)
def _entry_rule(kind: str, major: int, minor: int, access: str, allow: bool) -> DeviceRule:
    return DeviceRule(kind, None if major < 0 else major, None if minor < 0 else minor,
                      "".join(c for c in "rwm" if c in access), allow=allow)


@dataclass(frozen=True)
class RuleSet:
    """The cgroup2 device program LXC would attach, from the config's lines.

    Built by replaying the lines through LxcDeviceList, LXC 5.0's own list
    semantics (checked against real programs): initial mode allowlist; the
    bare value `a` picks the mode and empties the list; a rule equal to a listed one (access compared
    as written) flips or reuses it; only rules of the mode's polarity are
    compiled; the program checks them last line first; an empty list at start
    attaches no program, so everything is allowed. An empty value drops the earlier
    lines of its own key when the config is read (LXC's lxc_clear_cgroups): an empty
    allow keeps `deny = a`, an empty deny keeps the allows.
    """

    mode: Mode = "allowlist"
    rules: tuple[SourcedRule, ...] = ()  # compiled rules, config order
    has_program: bool = False

    @staticmethod
    def replay(lines: Iterable[tuple[str, str] | tuple[str, str, str]], resolve_path=None,
               shared: int = 0) -> "RuleSet":
        """lines: (verb "allow"|"deny", value[, origin]).
        resolve_path(path) -> (kind, major, minor) | None, for path-form rules.
        shared: how many leading lines every container of the host has alike
        (LXC's and Proxmox's includes): their replay is cached."""
        lines = [item if len(item) > 2 else (item[0], item[1], "") for item in lines]
        if shared and shared == len(lines):
            done = _prefix_ruleset(tuple(lines))  # no rules of its own: most containers of a fleet
            if done is not None:
                return done
        # An empty value among the container's own lines drops earlier lines, shared ones too.
        clears = any(not v.strip() for _, v, _ in lines[shared:])
        cached = _replayed_prefix(tuple(lines[:shared])) if shared and not clears else None
        if cached is not None:
            dl = cached.shared()
            rest = lines[shared:]
        else:
            dl = LxcDeviceList()
            rest = lines
        _replay_into(dl, rest, resolve_path)
        return _ruleset_of(dl)

    def match(self, kind: str, major: int, minor: int, access: str = "rw") -> SourcedRule | None:
        """The compiled rule that decides, or None when the default does."""
        for sr in reversed(self.rules):
            if sr.rule.covers(kind, major, minor, access):
                return sr
        return None

    def allows(self, kind: str, major: int, minor: int, access: str = "rw") -> bool:
        if not self.has_program:
            return True
        hit = self.match(kind, major, minor, access)
        if hit is None:
            return self.mode == "denylist"
        return hit.rule.allow

    def describe(self, kind: str | None = None) -> str:
        shown = [sr.rule.text() for sr in self.rules if sr.rule.allow and sr.rule.access != "m"
                 and (kind is None or sr.rule.kind == kind)]
        return ", ".join(shown) or "nothing"
