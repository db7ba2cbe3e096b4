"""What `lxcfix watch` decides, as data: which host events concern a device lxcfix knows,
when a burst of them becomes one pass, which containers opted in to being repaired, and
when a container is left alone (rate limit, repeated failures). Pure: bytes and clocks in,
decisions out; the sockets, inotify and the repairs are watch.py's.

    ev = parse_uevent(b"change@/devices/virtual/misc/tun\\0ACTION=change\\0SUBSYSTEM=misc\\0"
                      b"DEVNAME=net/tun\\0MAJOR=10\\0MINOR=200\\0")
    ev == Uevent(action="change", devpath="/devices/virtual/misc/tun", subsystem="misc",
                 devname="/dev/net/tun", major=10, minor=200, module=None)
    FILTER.profiles(ev)                 -> frozenset({"tun"})
    FILTER.profiles(parse_uevent(b"add@/module/nvidia_uvm\\0ACTION=add\\0SUBSYSTEM=module\\0..."))
                                        -> frozenset({"nvidia", "nvidia-uvm", "nvidia-caps"})
    FILTER.node("/dev/nvidia-uvm")      -> frozenset({"nvidia-uvm"})   (inotify: mknod sends no uevent)
    opt_in({"tags": "gpu;lxcfix-heal"}, conf, "200")  -> OptIn(heal=True, restart=False, why="tag lxcfix-heal")

Events come from the kernel only: a uevent whose sender is not the kernel (udev, or any
process of the host's network namespace) is dropped by watch.py before it gets here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import devices

# A kernel uevent is at most UEVENT_BUFFER_SIZE (2048) bytes; what is longer is no kernel's.
MAX_UEVENT = 8192
HEAL_TAG = "lxcfix-heal"
RESTART_TAG = "lxcfix-heal-restart"
ACTIONS = frozenset({"add", "remove", "change", "move", "bind", "unbind"})
_WORD = re.compile(r"[A-Za-z0-9_.:+-]{1,128}")
_DEVNAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}(/[A-Za-z0-9_.+-]{1,64}){0,4}")
_DIGITS = re.compile(r"[0-9]{1,7}")


@dataclass(frozen=True)
class Uevent:
    """One kernel uevent, parsed totally (fields that do not parse are None)."""

    action: str
    devpath: str
    subsystem: str | None = None
    devname: str | None = None  # as a host path: "/dev/net/tun"
    major: int | None = None
    minor: int | None = None
    module: str | None = None  # SUBSYSTEM=module: the module's name

    def describe(self) -> str:
        what = self.module if self.module else (self.devname or self.devpath)
        return f"{self.action} {self.subsystem or '?'} {what}"


def parse_uevent(data: bytes) -> Uevent | None:
    """A kernel uevent ("ACTION@DEVPATH\\0KEY=VALUE\\0..."), or None: too long, udev's own
    messages ("libudev" header), a header or ACTION that is not one, bytes that are not ASCII."""
    if not data or len(data) > MAX_UEVENT or data.startswith(b"libudev"):
        return None
    try:
        parts = data.decode("ascii").split("\0")
    except UnicodeDecodeError:
        return None
    head, _, path = parts[0].partition("@")
    if head not in ACTIONS or not path.startswith("/") or len(path) > 1024:
        return None
    env: dict[str, str] = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if sep and k.isupper() and len(env) < 64:
            env[k] = v
    if env.get("ACTION", head) != head:
        return None
    sub = env.get("SUBSYSTEM")
    sub = sub if sub is not None and _WORD.fullmatch(sub) else None
    name = env.get("DEVNAME")
    devname = "/dev/" + name if name is not None and _DEVNAME.fullmatch(name) and ".." not in name.split("/") \
        else None
    major = int(env["MAJOR"]) if _DIGITS.fullmatch(env.get("MAJOR", "")) else None
    minor = int(env["MINOR"]) if _DIGITS.fullmatch(env.get("MINOR", "")) else None
    module = None
    if sub == "module":
        m = re.fullmatch(r"/module/([A-Za-z0-9_-]{1,64})", path)
        module = m.group(1).replace("-", "_") if m else None
    return Uevent(head, path, sub, devname, major, minor, module)


@dataclass(frozen=True)
class EventFilter:
    """Which profiles an event concerns, from the device catalog (devices.CATALOG): its
    modules (modules, out_of_tree, module_prefix, reload_modules) and its uevent subsystems.
    Everything else is ignored at the cost of one dict lookup."""

    catalog: tuple[devices.Profile, ...] = devices.CATALOG
    by_subsystem: dict[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        subs: dict[str, set[str]] = {}
        for p in self.catalog:
            for s in p.subsystems:
                subs.setdefault(s, set()).add(p.name)
        self.by_subsystem.update({k: frozenset(v) for k, v in subs.items()})

    @property
    def subsystems(self) -> frozenset[str]:
        """Every uevent SUBSYSTEM a profile names (and "module")."""
        return frozenset(self.by_subsystem) | {"module"}

    def module_profiles(self, module: str) -> frozenset[str]:
        return frozenset(p.name for p in self.catalog
                         if module in p.modules or module in p.reload_modules or p.owns_module(module))

    def node(self, path: str) -> frozenset[str]:
        """The profile of a host node path (an inotify event under /dev), or the profiles
        whose directory it is (/dev/dri made after the watcher started); empty if none."""
        hit = devices.node_spec(path)
        if hit is not None:
            return frozenset({hit[0].name})
        return frozenset(p.name for p in self.catalog if path in p.dirs)

    def profiles(self, ev: Uevent | None) -> frozenset[str]:
        """The profiles an event concerns; empty: ignore it."""
        if ev is None or ev.subsystem is None:
            return frozenset()
        if ev.subsystem == "module":
            if ev.action not in ("add", "remove") or ev.module is None:
                return frozenset()
            return self.module_profiles(ev.module)
        candidates = self.by_subsystem.get(ev.subsystem)
        if not candidates:
            return frozenset()
        if ev.devname is not None:  # a node: its own profile, when the catalog names it
            return self.node(ev.devname) & candidates
        if ev.major is not None:
            return frozenset(p.name for p in self.catalog if p.name in candidates and p.static == ev.major
                             and p.owns_major())
        return frozenset()

    def watch_dirs(self, dev: str = "/dev") -> tuple[str, ...]:
        """The directories inotify watches: /dev and the catalog's device directories."""
        dirs = sorted({d for p in self.catalog for d in p.dirs} | {"/dev"})
        return tuple(dev + d[len("/dev"):] for d in dirs)


FILTER = EventFilter()


@dataclass
class Burst:
    """Events debounced into one pass: the first event of a burst opens a window of
    `debounce` seconds; more events join it; the window closes at most `max_wait` after its
    first event (a storm never postpones the pass for ever). Memory is the set of profiles
    (bounded by the catalog) and counters, whatever the rate.

        b = Burst(0.2); b.add({"tun"}, now=10.0); b.add({"fuse"}, now=10.1)
        b.due(10.25) -> False; b.due(10.31) -> True; b.take() -> ({"tun", "fuse"}, 10.0, 2)
    """

    debounce: float = 0.2
    max_wait: float = 1.0
    profiles: set[str] = field(default_factory=set)
    first: float | None = None
    last: float | None = None
    count: int = 0
    everything: bool = False  # events were lost (a full queue): every container is checked

    def add(self, profiles, now: float) -> None:
        self.profiles |= set(profiles)
        self.first = now if self.first is None else self.first
        self.last = now
        self.count += 1

    def lost(self, now: float) -> None:
        self.everything = True
        self.add((), now)

    @property
    def pending(self) -> bool:
        return self.first is not None

    def deadline(self) -> float | None:
        if self.first is None or self.last is None:
            return None
        return min(self.last + self.debounce, self.first + self.max_wait)

    def due(self, now: float) -> bool:
        d = self.deadline()
        return d is not None and now >= d

    def take(self) -> tuple[frozenset[str], float, int, bool]:
        """(profiles, time of the first event, events, everything) and a new window."""
        out = (frozenset(self.profiles), self.first or 0.0, self.count, self.everything)
        self.profiles, self.first, self.last, self.count, self.everything = set(), None, None, 0, False
        return out


@dataclass
class Guard:
    """Per container: at most one repair every `interval` seconds, and none after `max_failures`
    failed repairs in a row (reported once: no repair loop). Pure: the caller gives the time."""

    interval: float = 10.0
    max_failures: int = 2
    last: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def verdict(self, ct: str, now: float) -> str | None:
        """None: may repair now; else why not ("gave-up", "rate-limited")."""
        if self.failures.get(ct, 0) >= self.max_failures:
            return "gave-up"
        if ct in self.last and now - self.last[ct] < self.interval:
            return "rate-limited"
        return None

    def retry_at(self, ct: str) -> float | None:
        """When a rate-limited container may be repaired again."""
        return self.last[ct] + self.interval if ct in self.last else None

    def record(self, ct: str, ok: bool, now: float) -> bool:
        """Note a repair; True when this failure is the one that makes lxcfix give up."""
        self.last[ct] = now
        if ok:
            self.failures.pop(ct, None)
            return False
        self.failures[ct] = self.failures.get(ct, 0) + 1
        return self.failures[ct] == self.max_failures


# ---------------------------------------------------------------- opt-in

@dataclass(frozen=True)
class WatchConf:
    """/etc/lxcfix/watch.conf: `heal = CT` and `heal-restart = CT` lines, `#` comments.

        heal = web          repair CT web live on a host event
        heal-restart = 201  and restart CT 201 when a live change cannot do it
    """

    heal: frozenset[str] = frozenset()
    restart: frozenset[str] = frozenset()


def parse_watch_conf(text: str, path: str = "watch.conf") -> WatchConf:
    """WatchConf, or ValueError naming the first line that is not one."""
    heal: set[str] = set()
    restart: set[str] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = (s.strip() for s in line.partition("="))
        if not sep or key not in ("heal", "heal-restart") or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
                                                                               value):
            raise ValueError(f"{path}:{n}: not 'heal = CT' or 'heal-restart = CT': {line[:80]!r}")
        (restart if key == "heal-restart" else heal).add(value)
    return WatchConf(frozenset(heal | restart), frozenset(restart))


def tags_of(value: str | None) -> frozenset[str]:
    """Proxmox's `tags:` value (`;`-separated; `,` and spaces also split, as pct takes them)."""
    return frozenset(t for t in re.split(r"[;,\s]+", value or "") if t)


@dataclass(frozen=True)
class OptIn:
    heal: bool
    restart: bool
    why: str  # where the admin said so ("tag lxcfix-heal", "--heal", "watch.conf")


def opt_in(tags: str | None, conf: WatchConf, ct: str, cli_heal=frozenset(), cli_restart=frozenset()) -> OptIn:
    """Whether CT is repaired (and may be restarted): its tags, --heal/--heal-restart, watch.conf."""
    t = tags_of(tags)
    restart = RESTART_TAG in t or ct in cli_restart or ct in conf.restart
    heal = restart or HEAL_TAG in t or ct in cli_heal or ct in conf.heal
    why = (f"tag {RESTART_TAG if RESTART_TAG in t else HEAL_TAG}" if t & {HEAL_TAG, RESTART_TAG}
           else "--heal" if ct in cli_heal or ct in cli_restart else "watch.conf" if heal else "")
    return OptIn(heal, restart, why)


def needles(profiles: frozenset[str], facts=None) -> re.Pattern | None:
    """What a config that gives a device of these profiles holds: a node path's literal
    start ("dev/nvidia", "dev/net/tun"), a directory mounted whole, or "MAJOR:" of a
    major the profile owns (its dynamic one from the host's facts). None: no profile."""
    words: set[str] = set()
    majors: set[int] = set()
    for name in profiles:
        p = devices.PROFILES.get(name)
        if p is None:
            continue
        for spec in p.nodes:
            words.add(re.split(r"[\\()\[{.*+?^$|]", spec.pattern, maxsplit=1)[0])
        words.update(p.dirs)
        m = p.major(facts) if facts is not None else p.static
        if m is not None and p.owns_major():
            majors.add(m)
    # without the leading slash: a mount entry's target inside ("dev/nvidia-uvm") names it too,
    # whatever host path the node is bound from
    alts = [re.escape(w.lstrip("/")) for w in sorted(words) if len(w) > len("/dev/")] + \
        [rf"(?<![0-9]){m}:" for m in sorted(majors)]
    return re.compile("|".join(alts)) if alts else None


def might_concern(config: bytes, pattern: re.Pattern | None) -> bool:
    """The cheap test before a container is checked: its config names one of the devices
    (a device given only through an lxc.include'd file waits for a full pass)."""
    return pattern is not None and pattern.search(config.decode("utf-8", "replace")) is not None


def concerns(findings, profiles: frozenset[str], facts=None, everything: bool = False) -> list:
    """The findings a pass acts on: errors and warnings about a device of the changed
    profiles, by its path or by its numbers (a dynamic major as the host's facts give it);
    every one of them when `everything` (a full pass)."""
    majors = set()
    for name in profiles:
        p = devices.PROFILES[name]
        m = p.major(facts) if facts is not None else p.static
        if m is not None and p.owns_major():
            majors.add(m)
    out = []
    for f in findings:
        if f.severity not in ("error", "warning"):
            continue
        hit = devices.node_spec(f.device) if f.device else None
        if everything or (hit is not None and hit[0].name in profiles) or \
                (f.numbers is not None and f.numbers[1] in majors):
            out.append(f)
    return out


# ---------------------------------------------------------------- metrics

METRICS = (
    ("events_total", "counter", "Host events received (uevents and /dev node changes), relevant or not"),
    ("events_relevant_total", "counter", "Events about a device the catalog knows"),
    ("passes_total", "counter", "Passes run (one per debounced burst)"),
    ("repairs_total", "counter", "Containers repaired"),
    ("failures_total", "counter", "Repairs that failed (rolled back)"),
    ("findings_total", "counter", "Findings reported for containers not opted in"),
    ("last_latency_seconds", "gauge", "Seconds from the first event of a burst to the last repair it made"),
    ("last_pass_cpu_seconds", "gauge", "CPU seconds of the last pass"),
)


def metrics_text(values: dict[str, float]) -> str:
    """node_exporter's textfile format: lxcfix_watch_<name> lines, HELP and TYPE first."""
    out = []
    for name, kind, text in METRICS:
        full = f"lxcfix_watch_{name}"
        out += [f"# HELP {full} {text}", f"# TYPE {full} {kind}", f"{full} {float(values.get(name, 0)):g}"]
    return "\n".join(out) + "\n"
