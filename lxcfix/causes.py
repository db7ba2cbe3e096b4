"""Findings grouped by cause: one problem per thing to fix. Pure.

An admin paged at night wants the cause, the proof and the one command, then
the details. Findings that share a fix are one problem: a container given
nvidia-uvm, nvidia-uvm-tools and two nvidia-caps nodes that its cgroup denies
gets LXF100 and LXF200 for each node and LXF210 for cuInit; that is one cause.

    group(findings, facts)
    -> [Cause(id="cgroup-denies:nvidia", ct="200", severity="error", code="LXF100",
              title="CUDA cannot start in CT 200: the cgroup denies nvidia-uvm (c 238:*) and nvidia-caps (c 241:*)",
              proof=("cuInit(0) = 999 CUDA_ERROR_UNKNOWN: ... (nvidia-smi still works)",
                     "open() inside gives EPERM: /dev/nvidia-uvm, /dev/nvidia-uvm-tools, ..."),
              fixes=(Fix(...), ...), applies=True, live=True, symptoms=(Finding("LXF100", ...), ...))]
    ids(findings, facts) -> ["cgroup-denies:nvidia", ...]       one per finding, in the order given

What folds into one cause (union of):
- fixes with equal edits (rules.allowlist builds each broken device's fix once;
  a probe finding about a device carries the same fix as the config finding);
- findings about one device family that fail the same way: the cgroup denies it
  (LXF100, LXF101, LXF200), it is not passed in (LXF110, LXF202), it is missing
  on the host (LXF112), group access (LXF201, LXF114, LXF115, LXF204); the NVIDIA nodes (nvidia,
  nvidia-uvm, nvidia-caps) are one family: one GPU;
- findings about the same device node across those (LXF112 on the host and
  LXF202 inside), and cuInit / NVML failures (LXF210, LXF211) that name a node;
- a driver/userspace mismatch and the cuInit or NVML failure it explains;
- anything else: one code with one fix title (two LXF103 lines, one remedy).

The id is derived from what the cause is about (kind and device family, or
code and device, or a digest of the fix), never from list order, so it is the
same on every run for the same problem. Every finding keeps its place in
`symptoms`; `-v` and the JSON still show each one.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import codes, devices
from .model import SEVERITY_ORDER, Finding, Fix, HostFacts
from .probe import MIG_ONLY

# What kind of failure a device finding is, for folding a device family (the codes' records).
DEVICE_KIND = {c.code: c.kind for c in codes.CODES.values() if c.kind}
# Findings that fold into the cause of the node they name, whatever its kind.
NODE_LINKED = codes.where(node=True)
# When two kinds meet (LXF112 on the host, LXF202 inside), the deeper one names the cause.
KIND_ORDER = ("missing-on-host", "cgroup-denies", "not-passed-in", "no-access")
# Findings that say what the admin sees (the symptom, not the mechanism).
PROBE_GPU = frozenset({"LXF210", "LXF211"})
NVIDIA = devices.family("nvidia")  # nvidia, nvidia-uvm, nvidia-caps: the catalog profiles of one GPU
# Codes a container (or host) has at most once: their cause id is the code.
ONCE = codes.where(once=True)



@dataclass(frozen=True)
class Cause:
    """One problem in one container, and the findings it explains."""

    id: str
    host: str
    ct: str
    severity: str
    code: str  # the code that names the cause (`lxcfix explain CODE`)
    title: str
    proof: tuple[str, ...]
    fixes: tuple[Fix, ...]  # the distinct fixes of its symptoms
    applies: bool  # the plan makes the change: `lxcfix apply` repairs it
    live: bool  # a live apply can make it without a restart
    symptoms: tuple[Finding, ...]

    @property
    def codes(self) -> list[str]:
        return list(dict.fromkeys(f.code for f in self.symptoms))

    @property
    def fix(self) -> Fix | None:
        return self.fixes[0] if self.fixes else None

    def commands(self, reach: "Reach | None" = None) -> tuple[str, ...]:
        """What to run, as shell command lines that run as printed where `reach` says
        (this host; a --root snapshot: on a copy, so the snapshot itself stays as it is)."""
        reach = reach or LOCAL
        if self.applies:
            out = [reach.apply(self.ct)]
            if self.live and reach.root is None:
                out.append(reach.apply(self.ct, "--live"))
            return tuple(out)
        return tuple(dict.fromkeys(reach.command(c) for f in self.fixes for c in f.commands))

    def to_json(self, reach: "Reach | None" = None) -> dict:
        """The cause for machines; the findings (each with this id) carry the evidence and the fixes."""
        return {"id": self.id, "severity": self.severity, "code": self.code, "title": self.title,
                "codes": self.codes, "applies": self.applies, "live_fixable": self.live,
                "commands": list(self.commands(reach)), "symptoms": len(self.symptoms)}


@dataclass(frozen=True)
class Reach:
    """Where the commands lxcfix prints act: this host (nothing), a --root snapshot
    (`root`), or a fleet host (`ssh`: the argv that logs in there). Every command it
    makes is a shell line whose values are quoted (shlex), and runs as printed:

        Reach().apply("200")                      -> "lxcfix apply --ct 200"
        Reach(root="examples/pve-gpu-host").apply("201")
        -> 'snap=$(mktemp -d)/pve-gpu-host && cp -r examples/pve-gpu-host "$snap" && '
           'lxcfix apply --ct 201 --root "$snap" --no-restart'
        Reach(root=...).show("plan", "201")       -> "lxcfix plan --ct 201 --root examples/pve-gpu-host"

        Reach(ssh=("ssh", "root@pve1"), inventory="inv.yaml", name="pve1").apply("200")
        -> "lxcfix apply --ct 200 --inventory inv.yaml --host pve1"

    A snapshot's changes go to a fresh copy (`apply --root` edits the tree it is
    given: a bundled example's, a checkout's, is never the one); what only reads
    (plan, diagnose, scan) reads the snapshot itself. A fleet host's apply, plan,
    diagnose, rollback and host-fix run from here through its inventory (the agent
    does the change on the host: no lxcfix install there); the hook's snippet, which
    runs lxcfix on the host at every start, needs lxcfix there and goes through ssh,
    as does everything for an inventory read from stdin (no file to name)."""

    root: str | None = None
    ssh: tuple[str, ...] = ()
    inventory: str | None = None  # a fleet host: the inventory it was read from, and its name there
    name: str | None = None
    flags: tuple[str, ...] = ()  # the fleet options it was reached with (--known-hosts F, --ssh-config F)
    # what a command run on the host over ssh needs of the inventory: ("LXCFIX_LXC_PATH=/srv/lxc", ...),
    # lxcfix_lxc_path and lxcfix_pve_dir as the environment lxcfix reads them from (`env` words)
    env: tuple[str, ...] = ()

    @property
    def _root(self) -> str:
        root = self.root or ""
        return shlex.quote("./" + root if root.startswith("-") else root)

    def _copy(self) -> str:
        name = (self.root or "").rstrip("/").rsplit("/", 1)[-1] or "snapshot"
        return f"snap=$(mktemp -d)/{shlex.quote(name)} && cp -r {self._root} \"$snap\""

    def show(self, command: str, ct: str | None = None, *extra: str) -> str:
        """A command that reads only (plan, diagnose, scan, audit), on the snapshot itself; for a
        fleet host, the fleet scan (scan, audit, diagnose: `scan --ct`) or, for plan, over ssh."""
        cts = ["--ct", ct] if ct is not None else []
        if self.inventory is not None and command in FLEET:
            return self._fleet([command, *cts, *extra])
        line = shlex.join(["lxcfix", command, *cts, *extra])
        line += f" --root {self._root}" if self.root else ""
        return self._over_ssh(line)

    def apply(self, ct: str, *extra: str) -> str:
        """`lxcfix apply --ct CT`, where it changes what it should: a snapshot's copy, not the snapshot."""
        if self.inventory is not None:
            return self._fleet(["apply", "--ct", ct, *extra])
        line = shlex.join(["lxcfix", "apply", "--ct", ct, *extra])
        if self.root is not None:
            return f'{self._copy()} && {line} --root "$snap" --no-restart'
        return self._over_ssh(line, tty=True)

    def command(self, text: str) -> str:
        """A fix's own command line (fixes, rules): lxcfix's own (`lxcfix host-fix --yes`)
        made to reach the host (a snapshot: what reads reads it, what writes writes a copy;
        a fleet host: over ssh); a host command as it is (it is the host's to run: pct,
        nvidia-modprobe, dkms)."""
        if not text.startswith("lxcfix "):
            return text
        words, sep, comment = text.partition("    #")
        head, _, rest = words.strip().partition(" ")[2].partition(" ")
        tail = f" {rest}" if rest else ""
        if self.inventory is not None and head in FLEET:
            return self._fleet([head, *shlex.split(rest)]) + (f"    #{comment}" if sep else "")
        if self.root is not None and head in READS_ONLY:
            line = f"lxcfix {head} --root {self._root}{tail}"
        elif self.root is not None:
            line = f'{self._copy()} && lxcfix {head} --root "$snap"{tail}'
        else:
            line = self._over_ssh(f"lxcfix {head}{tail}", tty=head not in READS_ONLY)
        return line + (f"    #{comment}" if sep else "")

    def within(self, text: str) -> str:
        """A fix's prose with lxcfix's own commands in it ("move the rule (lxcfix plan --ct 200)"),
        each made to reach the host as command() makes a whole line (a snapshot's: `--root DIR`)."""
        if self == LOCAL:
            return text
        return _EMBEDDED.sub(lambda m: self.command(m.group(0)), text)

    def _fleet(self, words: list[str]) -> str:
        """A command run from here on the fleet host, through the inventory it was read from."""
        argv = ["lxcfix", *words, "--inventory", self.inventory or "", "--host", self.name or "", *self.flags]
        return shlex.join(argv)

    def _over_ssh(self, line: str, tty: bool = False) -> str:
        if self.env:
            line = shlex.join(["env", *self.env]) + " " + line
        if not self.ssh:
            return line
        argv = [self.ssh[0], *(["-t"] if tty else []), *self.ssh[1:]]
        return " ".join(map(shlex.quote, argv)) + " " + shlex.quote(line)


LOCAL = Reach()
# lxcfix's own command in a fix's prose: its subcommand, then options and their values, up to
# the text around it (`)`, `;`, `,`, a backtick, a quote, or a word that is no option's value).
_EMBEDDED = re.compile(r"lxcfix (?:plan|apply|diagnose|scan|audit|rollback|host-fix)\b"
                       r"(?: --?[A-Za-z0-9][A-Za-z0-9-]*(?:[ =](?!-)[^\s;,)`'\"]+)?)*")
READS_ONLY = frozenset({"scan", "diagnose", "plan", "audit", "facts", "explain"})
FLEET = frozenset({"scan", "audit", "diagnose", "plan", "apply", "rollback", "host-fix"})  # take --inventory --host


def ids(findings: Sequence[Finding], facts: HostFacts | None = None) -> list[str]:
    """The cause id of each finding, in the order given."""
    by_finding: dict[int, str] = {}
    for cause in group(findings, facts):
        for f in cause.symptoms:
            by_finding[id(f)] = cause.id
    return [by_finding[id(f)] for f in findings]


def group(findings: Iterable[Finding], facts: HostFacts | None = None) -> list[Cause]:
    """Findings (of one container, or of one host's containers) as causes, per
    container, most severe first."""
    by_ct: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        by_ct.setdefault((f.host, f.ct), []).append(f)
    out: list[Cause] = []
    for (host, ct), fs in by_ct.items():
        out += _group_ct(host, ct, fs, facts)
    return out


# ---------------------------------------------------------------- folding

@dataclass(frozen=True)
class _Node:
    kind: str
    major: int
    minor: int
    path: str


def _node(f: Finding, facts: HostFacts | None) -> _Node | None:
    """The device numbers a finding is about: the ones it carries (the host's), else the
    host's facts. Never read from its message, which can quote what a container printed."""
    if f.numbers is not None:
        kind, major, minor = f.numbers
        return _Node(kind, major, minor, f.device or "")
    if facts is None or not f.device:
        return None
    n = facts.nodes.get(f.device)
    if n is not None:
        return _Node(n.kind, n.major, n.minor, f.device)
    hit = devices.lookup(f.device, facts)
    if hit is not None and hit.major is not None:
        return _Node("c", hit.major, hit.minor, f.device)
    return None


def _profile(node: _Node | None, f: Finding, facts: HostFacts | None) -> str | None:
    if facts is not None and node is not None and node.kind == "c":
        p = devices.profile_for_major(node.major, facts, node.minor)
        if p is not None:
            return p.name
    if facts is not None and f.device:
        hit = devices.lookup(f.device, facts)
        if hit is not None:
            return hit.profile.name
    return None


def _family(profile: str | None, f: Finding, node: _Node | None) -> str:
    if profile is not None:
        return devices.family_of(profile) or profile
    if node is not None:
        return f"{node.kind}{node.major}"
    return f.device or "-"


class _Union:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def _order(f: Finding) -> tuple:
    return (SEVERITY_ORDER[f.severity], f.code, f.device or "", f.line or 0, f.message)


def _rule(value: str):
    try:
        return devices.parse_rule(value)
    except ValueError:
        return None


def _kind(f: Finding) -> str | None:
    """The failure kind a device finding folds by: its own (a caps node only MIG needs:
    probe.MIG_ONLY, a cause apart from the GPU's), else its record's."""
    return f.kind if f.kind == MIG_ONLY else DEVICE_KIND.get(f.code)


def _is_mismatch(f: Finding) -> bool:
    return f.code == "LXF212" or f.kind == "driver-mismatch"


def _group_ct(host: str, ct: str, findings: list[Finding], facts: HostFacts | None) -> list[Cause]:
    fs = sorted(findings, key=_order) if len(findings) > 1 else findings  # ids never depend on the input's order
    nodes = [_node(f, facts) for f in fs]
    families = [_family(_profile(n, f, facts), f, n) if f.device else None for f, n in zip(fs, nodes)]
    if len(fs) == 1:  # most containers of a fleet: nothing to fold
        return [_cause(host, ct, fs, nodes, families, facts, set())]
    u = _Union(len(fs))
    seen: dict[tuple, int] = {}

    def key(k: tuple, i: int) -> None:
        if k in seen:
            u.join(seen[k], i)
        else:
            seen[k] = i

    for i, f in enumerate(fs):
        if f.fix is not None and f.fix.edits:
            key(("edits", f.fix.edits), i)
            if f.fix.applies:  # fixes the plan makes that write the same line: one change (LXF102 + LXF100)
                for e in f.fix.edits:
                    if e.lines:
                        key(("lines", e.lines), i)
        if _kind(f) and f.device:
            key(("kind", _kind(f), families[i]), i)
        if f.code in NODE_LINKED and f.device:
            key(("device", f.device), i)
            n = nodes[i]
            if n is not None:
                key(("numbers", n.kind, n.major, n.minor), i)
        if _is_mismatch(f):
            key(("mismatch",), i)
        elif f.code not in NODE_LINKED and f.code not in DEVICE_KIND:
            key(("code", f.code, f.fix.title if f.fix is not None else f.message), i)

    # A cgroup v1 rule the host ignores is the cause of the denial of what it was meant to allow.
    for i, f in enumerate(fs):
        if f.code != "LXF102" or f.fix is None:
            continue
        rules = [r for e in f.fix.edits for _, v in e.lines if (r := _rule(v)) is not None]
        for j, n in enumerate(nodes):
            if n is not None and _kind(fs[j]) == "cgroup-denies" and \
                    any(r.covers(n.kind, n.major, n.minor, "rw") for r in rules):
                u.join(i, j)

    members: dict[int, list[int]] = {}
    for i in range(len(fs)):
        members.setdefault(u.find(i), []).append(i)
    causes: list[Cause] = []
    used: set[str] = set()
    for idx in members.values():
        causes.append(_cause(host, ct, [fs[i] for i in idx], [nodes[i] for i in idx],
                             [families[i] for i in idx], facts, used))
    causes.sort(key=lambda c: (SEVERITY_ORDER[c.severity], c.code, c.id))
    return causes


# ---------------------------------------------------------------- one cause

def _cause(host: str, ct: str, fs: list[Finding], nodes: list[_Node | None], families: list[str | None],
           facts: HostFacts | None, used: set[str]) -> Cause:
    kinds = [k for f in fs if (k := _kind(f))]
    kind = next((k for k in KIND_ORDER if k in kinds), None)
    if kind is None and any(_is_mismatch(f) for f in fs):
        kind = "driver-mismatch"
    family = next((fam for f, fam in zip(fs, families) if fam and _kind(f) == kind), None) \
        or next((fam for fam in families if fam), None)
    severity = min((f.severity for f in fs), key=SEVERITY_ORDER.__getitem__)
    code = _naming_code(fs, kind)
    cid = _id(kind, family, fs, code)
    n = 2
    base = cid
    while cid in used:
        cid = f"{base}#{n}"
        n += 1
    used.add(cid)
    distinct: dict[tuple, Fix] = {}
    for f in fs:
        if f.fix is not None:
            x = f.fix
            distinct.setdefault((x.edits, x.commands) if x.edits or x.commands else (x.title,), x)
    fixes = list(distinct.values())
    # An applying fix first: it is the one `lxcfix apply` makes.
    fixes.sort(key=lambda x: (not x.applies, not x.commands))
    applies = any(x.applies for x in fixes)
    live = applies and any(f.live_fixable for f in fs)
    title = _title(kind, ct, fs, nodes, family, facts)
    return Cause(cid, host, ct, severity, code, title, _proof(kind, fs), tuple(fixes), applies, live, tuple(fs))


def _naming_code(fs: list[Finding], kind: str | None) -> str:
    if kind == "cgroup-denies" and any(f.code == "LXF102" for f in fs):
        return "LXF102"  # the rule is there, as a v1 key the host ignores: that is the cause
    if kind is not None:
        for f in fs:
            if _kind(f) == kind or (kind == "driver-mismatch" and f.code == "LXF212"):
                return f.code
    return fs[0].code


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _id(kind: str | None, family: str | None, fs: list[Finding], code: str) -> str:
    if kind == "driver-mismatch":
        return kind
    if kind is not None:
        return f"{kind}:{family or '-'}"
    first = next(f for f in fs if f.code == code)
    if first.device:
        return f"{code}:{first.device}"
    if code in ONCE:
        return code
    return f"{code}:{_digest(first.fix.title if first.fix is not None else first.message)}"


def _join(items: Sequence[str]) -> str:
    items = list(dict.fromkeys(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _base(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def _subjects(fs: list[Finding], nodes: list[_Node | None], facts: HostFacts | None, codes: Iterable[str]) -> list[str]:
    """'nvidia-uvm (c 238:*)', 'nvidiactl (c 195:255)': the denied majors, by driver."""
    by_major: dict[tuple[str, int], dict[int, tuple[str, Finding]]] = {}
    for f, n in zip(fs, nodes):
        if n is None or f.code not in codes:
            continue
        by_major.setdefault((n.kind, n.major), {}).setdefault(n.minor, (f.device or n.path, f))
    out = []
    for (kind, major), minors in sorted(by_major.items()):
        stale = next((f.rule for _, f in minors.values() if f.code == "LXF101" and f.rule), None)
        profile = devices.profile_for_major(major, facts, next(iter(minors))) if facts is not None else None
        if len(minors) == 1:
            (minor, (path, _)), = minors.items()
            label = _base(path) if path else (profile.name if profile else f"major {major}")
            numbers = f"{kind} {major}:{minor}"
        else:
            names = facts.char_names(major) if facts is not None and kind == "c" else ()
            label = profile.name if profile is not None else (names[0] if names else f"major {major}")
            whole = kind == "c" and major not in devices.SHARED_MAJORS and \
                (profile is None or (profile.owns_major() and profile.wildcard))
            numbers = f"{kind} {major}:*" if whole else ", ".join(f"{kind} {major}:{m}" for m in sorted(minors))
        if stale:
            if stale.endswith(":*"):
                numbers = f"{kind} {major}:*"
            numbers += f"; the config still allows the old {stale}"
        out.append(f"{label} ({numbers})")
    return out


def _paths(fs: list[Finding], codes: Iterable[str]) -> list[str]:
    """The devices these findings name; where none names one (a rule for a driver whose nodes
    the host does not have), what they are about instead: the rule, the numbers, or that
    lxcfix could not name it. Never empty, so no title has an empty name slot."""
    codes = set(codes)
    named = list(dict.fromkeys(f.device for f in fs if f.code in codes and f.device))
    if named:
        return named
    about = [f"the nodes {f.rule} allows" if f.rule else
             f"{f.numbers[0]} {f.numbers[1]}:{f.numbers[2]}" if f.numbers else ""
             for f in fs if f.code in codes]
    return list(dict.fromkeys(a for a in about if a)) or ["a device lxcfix could not name"]


def _one(paths: list[str]) -> bool:
    """One node named by its path (a fallback of _paths names nodes in the plural)."""
    return len(paths) == 1 and paths[0].startswith("/")


def _what(ct: str, fs: list[Finding], family: str | None, fallback: str) -> str:
    """What the admin sees, proven by the probe when it ran."""
    codes = {f.code for f in fs}
    if "LXF210" in codes:
        return f"CUDA cannot start in CT {ct}"
    if "LXF211" in codes:
        return f"nvidia-smi fails in CT {ct}"
    noun = devices.noun_of(family)
    if noun:
        return f"CT {ct} cannot use {noun}"
    return fallback


def _title(kind: str | None, ct: str, fs: list[Finding], nodes: list[_Node | None], family: str | None,
           facts: HostFacts | None) -> str:
    if kind == "cgroup-denies":
        subjects = _subjects(fs, nodes, facts, codes.where(kind=kind))
        paths = _paths(fs, codes.where(kind=kind))
        what = _what(ct, fs, family, f"CT {ct} cannot open {_join(paths)}")
        v1 = any(f.code == "LXF102" for f in fs)
        return f"{what}: the cgroup denies {_join(subjects) or _join(paths)}" + \
            ("; its rule is a cgroup v1 key, which LXC ignores on this cgroup v2 host" if v1 else "")
    if kind == "missing-on-host":
        paths = _paths(fs, codes.where(kind=kind))
        starts = next((f.message.split(": ", 1)[1] for f in fs if f.code == "LXF112" and ": " in f.message), "")
        what = _what(ct, fs, family, f"CT {ct} lacks {_join(paths)}")
        return f"{what}: {_join(paths)} {'does' if _one(paths) else 'do'} not exist on the host" + \
            (f" ({starts})" if starts else "")
    if kind == "not-passed-in":
        paths = _paths(fs, codes.where(kind=kind)) or _paths(fs, DEVICE_KIND)
        what = _what(ct, fs, family, f"CT {ct} lacks {_join(paths)}")
        return f"{what}: {_join(paths)} {'is' if _one(paths) else 'are'} not passed into the container"
    if kind == "no-access":
        paths = _paths(fs, codes.where(kind=kind))
        return (f"CT {ct}'s users cannot open {_join(paths)}: EACCES from the node's owner, group or mode "
                "(not the cgroup)")
    if kind == "driver-mismatch":
        first = next((f for f in fs if f.code == "LXF212"), None) or next(f for f in fs if _is_mismatch(f))
        return first.message if first.code == "LXF212" else f"NVIDIA driver mismatch in CT {ct}: {first.message}"
    first = fs[0]
    if len(fs) == 1:
        return first.message
    same = [f for f in fs if f.code == first.code]
    others = list(dict.fromkeys(f.device for f in same[1:] if f.device and f.device != first.device))
    lines = [str(f.line) for f in same if f.line is not None]
    where = (f" (also {_join(others)})" if others else f" (config lines {', '.join(lines)})" if lines
             else f" ({len(same)} findings)")
    return f"{first.message}{where}" if len(same) == len(fs) else f"{first.message} (and {len(fs) - 1} more)"


def _dynamic(evidence: str) -> bool:
    """'/proc/devices: 238 nvidia-uvm': a major the kernel picks at module load (worth showing)."""
    number = evidence.split(": ", 1)[1].split(" ", 1)[0]
    return number.isascii() and number.isdigit() and devices.is_dynamic_major(int(number))


def _proof(kind: str | None, fs: list[Finding]) -> tuple[str, ...]:
    """The evidence that settles it: what the probe saw inside first, else the config and the host."""
    out: list[str] = []
    by: dict[str, list[Finding]] = {}
    for f in fs:
        by.setdefault(f.code, []).append(f)
    none: list[Finding] = []
    for f in by.get("LXF210", none) + by.get("LXF211", none):
        out.append(f.message)
    for code, errno in (("LXF200", "EPERM"), ("LXF201", "EACCES")):
        if code in by:
            out.append(f"open() inside gives {errno}: " + ", ".join(_paths(by[code], (code,))))
    if "LXF202" in by:
        out.append("absent inside the container: " + ", ".join(_paths(by["LXF202"], ("LXF202",))))
    for f in by.get("LXF101", none) + by.get("LXF102", none):
        out += f.evidence[:2]
    if not out or kind != "cgroup-denies":
        for f in by.get("LXF112", none) + by.get("LXF110", none):
            out += f.evidence[:1]
    if kind == "cgroup-denies" and "LXF100" in by and "LXF200" not in by and "LXF210" not in by:
        allowed = next((e for f in by["LXF100"] for e in f.evidence if e.startswith("device rules allow")), None)
        if allowed:
            out.append(allowed)
        majors = list(dict.fromkeys(e for f in by["LXF100"] for e in f.evidence
                                    if e.startswith("/proc/devices: ") and _dynamic(e)))
        if majors:
            out.append("/proc/devices: " + ", ".join(m.split(": ", 1)[1] for m in majors))
        out.append("from the config and the host's majors (not probed inside: the container is not "
                   "running, or --no-probe)")
    if not out:
        out += fs[0].evidence[:2]
    return tuple(dict.fromkeys(out))


# ---------------------------------------------------------------- rendering (text and roles; cli prints)

def ct_order(ct: str) -> tuple:
    """Containers in numeric vmid order (200 before 1000 before 'web'), names after."""
    return (0, int(ct), "") if ct.isascii() and ct.isdigit() and len(ct) < 19 else (1, 0, ct)


LABEL = 9  # width of the severity column that starts a cause's first line


def lines(cause: Cause, reach: Reach | None = None, fold: bool = False) -> list[tuple[str, str]]:
    """One cause as (text, role) lines, roles: "error"/"warning"/"info" (the title),
    "proof", "fix", "symptom", "note". fold: the symptoms as one line of codes
    (scan); else one line each (diagnose). Every line that states a finding ends
    with its code, for `lxcfix explain CODE`."""
    pad = " " * LABEL
    out = [(f"{cause.severity:<{LABEL}}{cause.title} [{cause.code}]", cause.severity)]
    out += [(f"{pad}proof: {p}", "proof") for p in cause.proof]
    reach = reach or LOCAL
    commands = cause.commands(reach)
    if commands:
        out.append((f"{pad}fix:   {commands[0]}", "fix"))
        out += [(f"{pad}       {c}" + ("    # without a restart" if c.endswith(" --live") else ""), "fix")
                for c in commands[1:]]
        if cause.applies:
            out.append((f"{pad}       ({reach.show('plan', cause.ct)} shows the change first)", "note"))
    elif cause.fix is not None:
        out.append((f"{pad}fix:   {reach.within(cause.fix.title)}", "fix"))
    if len(cause.symptoms) > 1:
        if fold:
            counts: dict[str, int] = {}
            for f in cause.symptoms:
                counts[f.code] = counts.get(f.code, 0) + 1
            codes = ", ".join(c if n == 1 else f"{c} ({n})" for c, n in counts.items())
            out.append((f"{pad}{len(cause.symptoms)} findings: {codes}", "note"))
        else:
            out.append((f"{pad}{len(cause.symptoms)} findings:", "note"))
            out += [(f"{pad}  {f.message} [{f.code}]", "symptom") for f in cause.symptoms]
    return out


def audit_groups(items: Sequence) -> list[list]:
    """Audit items (lxcfix.audit.AuditItem) of each container, grouped by their
    cause, in the audit's order (containers in vmid order, "will" first): the
    first item of a group names it, the others fold under it."""
    groups: dict[tuple, list] = {}
    for i in sorted(items, key=lambda i: (i.host, ct_order(i.ct))):  # stable: the audit's order within
        groups.setdefault((i.host, i.ct, i.cause or (i.code, i.device, i.change)), []).append(i)
    return list(groups.values())
