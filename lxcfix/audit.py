"""Before maintenance: which containers WILL or MAY break on the next reboot,
driver, kernel, LXC or Proxmox VE upgrade, why, and the exact change that
prevents it. Pure: scan reports in, an AuditReport and its renderings out.

    report = audit([host_report], "reboot")
    report.items[0] == AuditItem(
        host="pve1", ct="200", code="LXF103", severity="warning", outcome="may",
        why="c 511:* rwm pins the dynamic major of nvidia-uvm ...",
        change="- lxc.cgroup2.devices.allow: c 511:* rwm\n+ lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm\n...",
        kind="config", device="/dev/nvidia-uvm", path="/etc/pve/lxc/200.conf")
    to_table_rows(report)   -> [(host, ct, code, severity, outcome, device, why, change), ...]
    to_json(report)         -> {"schema": 1, "command": "audit", "for": "reboot", ...}
    to_markdown(report)     -> a change ticket: summary, a table per host, the changes, how to verify

The audit judges the view the scan judged (each CtReport's context: includes
followed, the host's own LXC files) and shows the fixes the scan's findings
carry (model.Fix, rendered: `- old line` / `+ new line` for a config change,
commands for the host, an instruction when no exact text is possible). Items
come from the findings (LXF100/101/102/103/104/111/112/114/115/121/140/143/145/
146/152/153/154/201/204/212/300) and from the checks only maintenance needs
(rules.foresight: LXF113 cardN and LXF155 ttyUSBn numbering, nvidia-uvm not
created at boot, the userspace an upgrade needs; rules.upgrade: LXF150 v1
keys LXC 7 refuses, LXF151 what cgroup v2 only changes, LXF156/LXF157 modules
the next kernel lacks). Each occasion takes the items it concerns: an LXC
upgrade reloads no driver and renumbers no device. Values only
the container knows (the gid of its `render` group) come from `ct_groups` when
the caller has them, else from the probe; otherwise the change says how to read them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from . import __version__, causes, codes, devices, fixes
from .ctconfig import describe_edit
from .bounded import field, md_field
from .errors import BadInput
from .model import SEVERITY_ORDER, CtReport, Finding, Fix, HostFacts, HostReport
from .rules import access, foresight
from .rules.access import given_at, group_access_fix

SCHEMA = 1
FOR = foresight.FOR  # reboot, driver-upgrade, kernel-upgrade, lxc-upgrade, pve-upgrade
# Occasions that need the installed kernels' modules and the devices' drivers (gather.UPGRADE_ONLY).
UPGRADE_FACTS = frozenset({"kernel-upgrade", "pve-upgrade"})

# Dynamic majors a driver upgrade can move (the NVIDIA modules are reloaded);
# a reboot can move any dynamic major.
NVIDIA_PROFILES = devices.family("nvidia")  # the profiles of family "nvidia" (devices.CATALOG)
OUTCOME_ORDER = {"will": 0, "may": 1}


@dataclass(frozen=True)
class AuditItem:
    """One risk in one container and the change that removes it."""

    host: str
    ct: str
    code: str
    severity: str
    outcome: str  # "will" | "may"
    why: str
    change: str
    kind: str = "config"  # "config" | "command" | "manual"
    device: str | None = None
    path: str | None = None  # the config file a "config" change goes in
    cause: str = ""  # the cause id of the finding it comes from (lxcfix.causes), as scan's JSON gives it
    applies: bool = False  # `lxcfix apply --ct CT` makes the change (the container's plan holds it)

    def commands(self, reach: causes.Reach | None = None) -> tuple[str, ...]:
        """What to run for it, as printed (causes.Reach: this host, a snapshot's copy, a fleet
        host): `lxcfix apply` for a change the plan makes; a host change's own commands; none
        for a change made by hand (the change says what to write)."""
        reach = reach or causes.LOCAL
        if self.applies:
            return (reach.apply(self.ct),)
        if self.kind == "command":
            return tuple(reach.command(line) for line in self.change.splitlines()
                         if line.strip() and not line.startswith("#"))
        return ()

    def to_json(self, reach: causes.Reach | None = None) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.why, "outcome": self.outcome,
                "device": self.device, "change": self.change, "change_kind": self.kind, "path": self.path,
                "cause": self.cause, "applies": self.applies, "commands": list(self.commands(reach))}


@dataclass(frozen=True)
class HostAudit:
    host: str
    backend: str
    error: str | None
    nvidia_driver: str | None
    cgroup_layout: str | None
    pve_version: str | None
    lxc_version: str | None
    containers: tuple[tuple[str, str], ...] = ()  # (ct, config path), in scan order
    kernel: str | None = None
    notes: tuple[str, ...] = ()  # what the audit assumed for this host ("target kernel: ...")
    not_healed: tuple[str, ...] = ()  # GPU/NPU containers without the tag lxcfix-heal (lxcfix watch)


@dataclass(frozen=True)
class AuditReport:
    for_: str
    hosts: tuple[HostAudit, ...]
    items: tuple[AuditItem, ...]
    new_driver: str | None = None
    to_kernel: str | None = None

    @property
    def event(self) -> str:
        return foresight.EVENTS.get(self.for_, self.for_)

    def items_of(self, host: str, ct: str | None = None) -> list[AuditItem]:
        return [i for i in self.items if i.host == host and (ct is None or i.ct == ct)]

    def outcome_of(self, host: str, ct: str) -> str:
        found = {i.outcome for i in self.items_of(host, ct)}
        return "will" if "will" in found else "may" if "may" in found else "ok"

    @property
    def at_risk(self) -> list[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for i in self.items:
            seen.setdefault((i.host, i.ct), None)
        return list(seen)


@dataclass(frozen=True)
class Provenance:
    """Who made a change ticket, when, where and how (the command line fills it in; the
    version is this lxcfix's): the ticket's header.

        Provenance("2026-12-03T11:40:00Z", "pve1", "lxcfix audit --format markdown", "alice")
    """

    date: str  # UTC, ISO 8601
    host: str  # where lxcfix ran
    command: str  # the command line, quoted as shlex.join quotes it
    user: str  # who ran it (SUDO_USER when set)


# ---------------------------------------------------------------- the audit

def audit(hosts: Sequence[HostReport], for_: str, *, new_driver: str | None = None,
          boot_nodes: Mapping[str, bool] | None = None,
          ct_groups: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
          to_kernel: str | None = None) -> AuditReport:
    """hosts: scan reports (with probe results for LXF201/LXF212 to show up).
    new_driver: the NVIDIA driver version the upgrade installs, when known.
    boot_nodes: host -> True when something creates the NVIDIA nodes at boot
    (lxcfix's unit is installed); unknown hosts get a "may" item.
    ct_groups: (host, ct) -> {"render": 104, "video": 44} read inside the container.
    to_kernel: the kernel a kernel upgrade boots (default: each host's newest
    installed kernel that is not the running one)."""
    if for_ not in FOR:
        raise BadInput(f"unknown --for {for_!r}: use {', '.join(FOR)}")
    items: list[AuditItem] = []
    summaries = []
    for h in hosts:
        f = h.facts
        summaries.append(HostAudit(
            h.host, h.backend, h.error, f.nvidia_driver if f else None, f.cgroup_layout if f else None,
            f.pve_version if f else None, f.lxc_version if f else None,
            tuple((c.ct, c.path) for c in h.containers), f.kernel if f else None,
            _host_notes(f, for_, to_kernel) if f else (), _not_healed(h.containers)))
        if f is None:
            continue
        occasion = foresight.Occasion(for_, new_driver, (boot_nodes or {}).get(h.host, False), to_kernel)
        for c in h.containers:
            groups = (ct_groups or {}).get((h.host, c.ct)) or _probed_groups(c)
            items += _Ct(h, c, f, occasion, groups).items()
    items.sort(key=_item_order)
    return AuditReport(for_, tuple(summaries), tuple(items), new_driver, to_kernel)


# The device families a driver reload, a late node or a renumbering takes from a running container.
HEAL_FAMILIES = frozenset({"nvidia", "dri", "kfd", "accel"})


def _not_healed(containers: Sequence[CtReport]) -> tuple[str, ...]:
    """The containers given a GPU or NPU that no `lxcfix-heal` tag opts in to `lxcfix watch`
    (--heal and watch.conf are the watcher's own: not seen here)."""
    from .heal import HEAL_TAG, RESTART_TAG, tags_of

    out = []
    for c in containers:
        ctx = c.context
        if ctx is None or not any(devices.family_of(g.profile) in HEAL_FAMILIES for g in ctx.effective.given):
            continue
        if not tags_of(ctx.config.get("tags")) & {HEAL_TAG, RESTART_TAG}:
            out.append(c.ct)
    return tuple(out)


def _host_notes(f: HostFacts, for_: str, to_kernel: str | None) -> tuple[str, ...]:
    """What the audit of one host assumed: the kernel it checks modules against, the LXC and
    Proxmox VE versions an upgrade starts from."""
    from .facts import version_tuple
    from .rules.upgrade import kernel_target

    notes = []
    if for_ in ("kernel-upgrade", "pve-upgrade"):
        target, why = kernel_target(f, to_kernel)
        notes.append(f"kernel: running {f.kernel or 'unknown'}; target {target or 'unknown'} ({why})")
        if not f.modules_known:
            notes.append("/proc/modules not read: only NVIDIA's and Coral's modules are known to be out of tree")
    if for_ == "lxc-upgrade":
        notes.append(f"LXC {f.lxc_version or 'version unknown'} -> 7 (upstream 7.0.0 refuses cgroup v1 keys)")
    if for_ == "pve-upgrade":
        major = version_tuple(f.pve_version)[:1]
        notes.append(f"Proxmox VE {f.pve_version or 'version unknown'} -> 9 (cgroup v2 only, LXC 6.0, a new "
                     "kernel); pve8to9 checks no device lines" if major < (9,) else
                     f"Proxmox VE {f.pve_version} is 9 already: the items are what LXC 7 and the next kernel need")
    return tuple(notes)


def _probed_groups(c: CtReport) -> Mapping[str, int]:
    """Group ids the probe read in the container's /etc/group; {} when it did not run."""
    return dict(c.probe.groups) if c.probe is not None else {}


def _ct_key(ct: str) -> tuple:
    return (0, int(ct), "") if ct.isascii() and ct.isdigit() else (1, 0, ct)


def _item_order(i: AuditItem) -> tuple:
    return (i.host, _ct_key(i.ct), OUTCOME_ORDER[i.outcome], SEVERITY_ORDER[i.severity], i.code, i.device or "")


class _Ct:
    """One container: its findings (and what foresight adds), turned into items."""

    def __init__(self, h: HostReport, c: CtReport, facts: HostFacts, occasion: foresight.Occasion,
                 groups: Mapping[str, int]):
        self.h, self.c, self.facts, self.occasion, self.groups = h, c, facts, occasion, groups
        self.for_ = occasion.for_
        self.renumbers = occasion.for_ != "lxc-upgrade"  # majors and nodes can move (modules load again)
        self.ctx = c.context  # None for a report that crossed processes: then only its findings' fixes count

    def item(self, f: Finding, outcome: str, why: str, fix: Fix | None = None, kind: str | None = None,
             device: str | None = None) -> AuditItem:
        used = fix if fix is not None else f.fix
        kind_, change = self.render(used)
        kind = kind or kind_
        return AuditItem(self.h.host, self.c.ct, f.code, f.severity, outcome, why, change, kind,
                         device if device is not None else f.device, self.c.path if kind == "config" else None,
                         applies=kind == "config" and used is not None and used.applies)

    def render(self, fix: Fix | None) -> tuple[str, str]:
        """(kind, change) of a fix: its edits as `- old` / `+ new` lines, else its commands, else its title."""
        if fix is None:
            return "manual", ""
        if fix.edits and self.ctx is not None:
            lines = [line for e in fix.edits for line in describe_edit(self.ctx.config, e)]
            return "config", "\n".join([*fix.notes, *lines])
        if fix.commands:
            return "command", "\n".join([*fix.notes, *fix.commands])
        return "manual", fix.title

    def rule_of(self, f: Finding):
        if self.ctx is None or f.line is None:
            return None
        return next((r for r in self.ctx.effective.own_rules if r.index == f.line - 1), None)

    @property
    def _event(self) -> str:
        return self.occasion.event

    # -- all items of this container

    def items(self) -> list[AuditItem]:
        out: list[AuditItem] = []
        cause = dict(zip(map(id, self.c.findings), causes.ids(self.c.findings, self.facts)))
        planned = self.c.plan is not None and not self.c.plan.is_empty  # `lxcfix apply` makes its fixes
        for f in sorted(self.c.findings, key=lambda f: (f.code, f.device or "")):
            handler = _HANDLERS.get(f.code)
            got = handler(self, f) if handler else None
            if got is not None:
                out.append(replace(got, cause=cause[id(f)], applies=got.applies and planned))
        if self.ctx is not None:
            ahead = foresight.check(self.ctx, self.occasion, self.c.findings)
            for f, cid in zip(ahead, causes.ids(ahead, self.facts)):
                # what only maintenance needs is no finding of the scan's: no plan makes it
                out.append(replace(self.item(f, foresight.outcome(f, self.occasion), f.message), cause=cid,
                                   applies=False))
        return out

    # -- from findings

    def broken_now(self, f: Finding) -> AuditItem:
        """LXF100/LXF101: broken already; the plan's change fixes them all at once."""
        lines = [l for l in (self.c.plan.diff() if self.c.plan else "").splitlines()
                 if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        why = f"broken now, and stays broken after the {self._event}: {f.message}"
        if not lines:  # nothing planned: its own fix, never a plan command that prints nothing
            return self.item(f, "will", why)
        return AuditItem(self.h.host, self.c.ct, f.code, f.severity, "will", why,
                         "\n".join(f"{l[0]} {l[1:]}" for l in lines), "config", f.device, self.c.path,
                         applies=True)

    def v1_key(self, f: Finding) -> AuditItem | None:
        if self.for_ in ("lxc-upgrade", "pve-upgrade") and self.ctx is not None:
            return None  # rules.upgrade's LXF150 says what the upgrade does with it
        return self.item(f, "will", f"{f.message}; the rule does nothing, now or after the {self._event}")

    def does_nothing(self, f: Finding) -> AuditItem:
        """LXF140/143/145/146: a rule line that does not do what it says, now or after."""
        return self.item(f, "will", f"{f.message} (now, and after the {self._event})")

    def at_next_start(self, f: Finding) -> AuditItem | None:
        """LXF121/152/153/154: what the next start of the container does."""
        if f.code == "LXF153" and not self.occasion.restarts_containers:
            return None
        if f.code == "LXF121" and not self.occasion.restarts_containers:
            return None
        starts = self._starts_again()
        why = {"LXF121": f"{starts}, the container runs the config on disk, not what runs now: {f.message}",
               "LXF153": f"{starts}: {f.message}" if starts != "at its next start" else f.message,
               }.get(f.code, f.message)
        # a hookscript not checked (LXF152 as a warning) may fail the start; it is not known that it will
        return self.item(f, "may" if f.code == "LXF152" and f.severity != "error" else "will", why)

    def _starts_again(self) -> str:
        """When the container starts next: with the host, when it starts on boot."""
        cfg = self.ctx.config if self.ctx is not None else None
        onboot = cfg is not None and (cfg.get("onboot") == "1" or cfg.get("lxc.start.auto") == "1")
        if self.occasion.reboots and onboot:
            return f"after the {self._event} (it starts on boot)"
        return "at its next start"

    def pinned(self, f: Finding) -> AuditItem | None:
        r = self.rule_of(f)
        if r is None or r.rule is None or not self.renumbers:
            return None
        profile = devices.profile_for_major(r.rule.major, self.facts, r.rule.minor) if r.rule.major else None
        name = profile.name if profile else f"major {r.rule.major}"
        if self.for_ == "driver-upgrade" and profile is not None and profile.name not in NVIDIA_PROFILES:
            return None  # an NVIDIA upgrade does not reload this driver
        when = ("the upgrade reloads the NVIDIA modules" if self.for_ == "driver-upgrade"
                else "the reboot loads the driver again")
        symptom = profile.deny_symptom if profile is not None else None
        why = (f"{r.rule} pins {name}'s dynamic major {r.rule.major}: the kernel picks the major when the "
               f"module loads; if {when} and it gets another one, the device is denied (EPERM"
               + (f"; {symptom}" if symptom else "") + "). Path-form rules are resolved "
               "at every start")
        fix = f.fix
        paths = [v.split()[0] for e in (fix.edits if fix else ()) for _, v in e.lines]
        return self.item(f, "may", why, device=paths[0] if paths else f.device)

    def overbroad(self, f: Finding) -> AuditItem | None:
        if self.rule_of(f) is None:
            return None
        why = (f"{f.message}: it works, so nothing breaks because of it, but it is the rule that hides the "
               "next missing one; narrow it in the same window (the lines below keep every device the "
               "container is given)")
        return self.item(f, "may", why)

    def not_optional(self, f: Finding) -> AuditItem | None:
        if self.ctx is None or f.fix is None or not f.fix.edits or not self.renumbers:
            return None
        g = given_at(self.ctx, f.device or "")
        if self.for_ == "driver-upgrade" and (g is None or g.profile not in NVIDIA_PROFILES):
            return None
        profile = devices.PROFILES.get(g.profile or "") if g is not None else None
        absent = ((profile.absent_at_boot if profile is not None else None)
                  or "a node can be absent at start (driver not loaded yet, device unplugged)")
        return self.item(f, "may", f"{absent}; without 'optional' LXC then refuses to start the container")

    def missing_on_host(self, f: Finding) -> AuditItem:
        why = f"{f.message}; after the {self._event} too, unless something creates it before the container starts"
        return self.item(f, "will", why)

    def eacces(self, f: Finding) -> AuditItem | None:
        """LXF201 (probe): mode/uid/gid or idmap keeps the container's users out."""
        path = f.device or ""
        why = f"broken now, and after the {self._event}: {f.message}"
        if self.ctx is None:
            return self.item(f, "will", why)
        g = given_at(self.ctx, path)
        host_node = self.facts.nodes.get(g.path if g else path)
        if host_node is not None:
            why += f" (on the host: gid {host_node.gid}, mode {oct(host_node.mode & 0o777)[2:].zfill(4)})"
        group = fixes.group_for(path)
        gid = self.groups.get(group) if group else None
        return self.item(f, "will", why, fix=group_access_fix(self.ctx, path, gid), device=path)

    def group_access(self, f: Finding) -> AuditItem:
        """LXF114/LXF115 (config), LXF204 (probe): the container's service users (a render or
        video member) cannot open the node; LXF115: nobody can, root included."""
        path = f.device or ""
        who = "will not work for any user, root included" if f.code == "LXF115" else \
            "will not work for non-root users"
        why = f"{who}, now and after the {self._event}: {f.message}"
        if self.ctx is None:
            return self.item(f, "will", why)
        group = fixes.group_for(path)
        gid = self.groups.get(group) if group else None
        if gid is not None:  # the finding again, with the gid the caller knows (its message names it)
            known = access.check(self.ctx, access.analyze(self.ctx, {group: gid}))
            again = next((g for g in known if (g.code, g.device) == (f.code, f.device)), None)
            if again is not None:
                why = f"{who}, now and after the {self._event}: {again.message}"
        return self.item(f, "will", why, fix=group_access_fix(self.ctx, path, gid), device=path)

    def driver_mismatch(self, f: Finding) -> AuditItem:
        host = self.facts.nvidia_driver or "the host's driver version"
        version = self.occasion.new_driver if (self.for_ == "driver-upgrade" and self.occasion.new_driver) else host
        why = f"broken now: {f.message}"
        if self.for_ == "driver-upgrade":
            why += (f"; after the upgrade the container needs userspace "
                    f"{self.occasion.new_driver or 'equal to the new host driver'}")
        flavor = self.ctx.config.flavor if self.ctx is not None else ("pve" if self.h.backend == "pve" else "lxc")
        return self.item(f, "will", why, fix=Fix(f.fix.title if f.fix else "install the matching userspace",
                                                 commands=fixes.userspace_commands(self.c.ct, flavor, version)))

    def cdi_spec(self, f: Finding) -> AuditItem | None:
        """LXF232: a stale CDI spec is broken now; a current one goes stale at a driver upgrade."""
        if f.severity != "info":
            return self.item(f, "will", f"broken now, and after the {self._event}: {f.message}")
        if self.for_ != "driver-upgrade":
            return None
        new = self.occasion.new_driver or "the new driver"
        return self.item(f, "will", f"{f.message.split(': the next', 1)[0]}; after the upgrade to {new} it names "
                                    "libraries that are gone: regenerate it in the container then")

    def cgroup_layout(self, f: Finding) -> AuditItem:
        return self.item(f, "will", f"{f.message}; the {self._event} does not change that", kind="manual")


# How each code is stated: its record's `audit` names the handler (codes.py).
_HANDLERS = {c.code: getattr(_Ct, c.audit) for c in codes.CODES.values() if c.audit}


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# ---------------------------------------------------------------- renderers

TABLE_COLUMNS = ("host", "ct", "code", "severity", "outcome", "device", "why", "change")


def to_table_rows(report: AuditReport) -> list[tuple[str, ...]]:
    """One row per item, in TABLE_COLUMNS order (the change as it is, newlines kept)."""
    return [(i.host, i.ct, i.code, i.severity, i.outcome, i.device or "-", i.why, i.change) for i in report.items]


def summary(report: AuditReport) -> dict:
    cts = [(h.host, ct) for h in report.hosts for ct, _ in h.containers]
    outcomes = [report.outcome_of(host, ct) for host, ct in cts]
    return {"containers": len(cts), "will": outcomes.count("will"), "may": outcomes.count("may"),
            "ok": outcomes.count("ok"), "items": len(report.items),
            "unreachable": sum(1 for h in report.hosts if h.error)}


def to_json(report: AuditReport, reach: Mapping[str, causes.Reach] | None = None) -> dict:
    """reach: host -> where the items' commands act (default: that host itself)."""
    reach = reach or {}
    return {
        "schema": SCHEMA,
        "tool": "lxcfix",
        "version": __version__,
        "command": "audit",
        "for": report.for_,
        "new_driver": report.new_driver,
        "to_kernel": report.to_kernel,
        "hosts": [
            {"host": h.host, "backend": h.backend, "error": h.error, "nvidia_driver": h.nvidia_driver,
             "cgroup_layout": h.cgroup_layout, "pve_version": h.pve_version, "lxc_version": h.lxc_version,
             "kernel": h.kernel, "notes": list(h.notes),
             "containers": len(h.containers),
             "will": sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "will"),
             "may": sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "may")}
            for h in report.hosts
        ],
        "containers": [
            {"host": h.host, "ct": ct, "path": path, "outcome": report.outcome_of(h.host, ct),
             "findings": [i.to_json(reach.get(h.host)) for i in report.items_of(h.host, ct)]}
            for h in report.hosts for ct, path in h.containers
        ],
        "summary": summary(report),
    }


def _cell(text: str) -> str:
    """A table cell: each line of `text` one escaped field (bounded.md_field: no `|` or backtick
    of a host's text ends the cell or opens code), the lines joined by <br>."""
    return "<br>".join(md_field(line, 1 << 20) for line in str(text).split("\n"))


def _code(text: str) -> str:
    """`text` as inline code, one escaped field, whatever backticks it holds (CommonMark: the
    delimiter is a run of backticks longer than any in it)."""
    text = field(text, 1 << 20)
    ticks = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(text: str) -> str:
    """The fence of a code block holding `text`: longer than any backtick run at a line's start in it."""
    runs = [len(m) for m in re.findall(r"^\s*(`{3,})", text, re.M)]
    return "`" * max(3, max(runs, default=0) + 1)


def _host_flag(host: str, flags: Mapping[str, str] | None) -> str:
    if flags is not None and host in flags:
        return (" " + flags[host]) if flags[host] else ""
    return "" if host in ("localhost", "local", "127.0.0.1") else f" --host {host}"


def to_markdown(report: AuditReport, host_flags: Mapping[str, str] | None = None,
                reach: Mapping[str, causes.Reach] | None = None, made: Provenance | None = None) -> str:
    """A change ticket. host_flags: host -> the lxcfix option that reaches it in
    the verify commands ("" for this host; default `--host H` for other names);
    reach: host -> where its commands act (causes.Reach), instead: every command then
    runs as printed (a snapshot's change on a copy, a fleet host's over ssh).
    made: the date, host, command line and user the ticket names under its title."""
    event = report.event
    s = summary(report)
    at_risk = s["will"] + s["may"]
    title = f"# lxcfix audit: before the {event}"
    if report.for_ == "driver-upgrade" and report.new_driver:
        title += f" to NVIDIA {report.new_driver}"
    elif report.for_ == "kernel-upgrade" and report.to_kernel:
        title += f" to {report.to_kernel}"
    elif report.for_ == "lxc-upgrade":
        title += " to LXC 7"
    elif report.for_ == "pve-upgrade":
        title += " from 8 to 9"
    out = [title, ""]
    if made is not None:
        out += _provenance(made)
    out.append(f"{at_risk} of {s['containers']} containers on {len(report.hosts)} "
               f"host{'s' if len(report.hosts) != 1 else ''} will or may break: "
               f"{s['will']} will, {s['may']} may." if at_risk else
               f"No container on {len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} is at risk "
               f"({s['containers']} audited).")
    if s["unreachable"]:
        out.append(f"{s['unreachable']} host(s) could not be audited (see the table).")
    out += ["", "## Hosts", "",
            "| host | backend | NVIDIA driver | cgroup | containers | will break | may break |",
            "|---|---|---|---|---|---|---|"]
    for h in report.hosts:
        backend = h.backend + (f" {h.pve_version}" if h.backend == "pve" and h.pve_version else
                               f" (LXC {h.lxc_version})" if h.lxc_version and h.backend == "lxc" else "")
        will = sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "will")
        may = sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "may")
        row = [h.host, backend, h.nvidia_driver or "-", h.cgroup_layout or "-",
               str(len(h.containers)) if not h.error else f"unreachable: {h.error}", str(will), str(may)]
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    notes = [(h.host, n) for h in report.hosts for n in h.notes]
    if notes:
        out.append("")
        out += [f"- {md_field(host)}: {_cell(n)}" for host, n in notes]
    for h in report.hosts:
        items = report.items_of(h.host)
        if not items:
            continue
        out += ["", f"## {md_field(h.host)}", "", "| CT | code | severity | outcome | device | why |",
                "|---|---|---|---|---|---|"]
        for i in items:
            out.append("| " + " | ".join(_cell(c) for c in (i.ct, i.code, i.severity, i.outcome,
                                                             i.device or "-", i.why)) + " |")
        out += ["", f"### Changes on {h.host}"]
        for (ct, kind, change, path), group in _changes(items):
            what = ", ".join(f"{i.code}" + (f" {i.device}" if i.device else "") for i in group)
            out += ["", f"#### CT {md_field(ct)}: {md_field(what)}", ""]
            if kind == "config":
                apply = (reach[h.host].apply(ct) if reach is not None and h.host in reach
                         else f"lxcfix apply --ct {ct}{_host_flag(h.host, host_flags)}")
                applies = any(i.applies for i in group) if reach is not None else \
                    group[0].code in ("LXF100", "LXF101")
                extra = (f" (or {_code(apply)}, which makes this change with a backup and a verify)") if applies else ""
                fence = _fence(change)
                out += [f"In {_code(path)}{extra}:", "", f"{fence}diff", change, fence]
            elif kind == "command":
                if reach is not None and h.host in reach:
                    change = "\n".join(line if line.startswith("#") else reach[h.host].command(line)
                                        for line in change.splitlines())
                fence = _fence(change)
                out += ["On the host:", "", f"{fence}sh", change, fence]
            else:
                out += [change]
    out += ["", "## How to verify after maintenance", "", "```sh"]
    for h in report.hosts:
        flag = _host_flag(h.host, host_flags)
        to = f" --to-kernel {report.to_kernel}" if report.for_ == "kernel-upgrade" and report.to_kernel else ""
        if reach is not None and h.host in reach:
            r = reach[h.host]
            more = ("--to-kernel", report.to_kernel) if to else ()
            out.append(f"{r.show('audit', None, '--for', report.for_, *more)}    # nothing left at risk")
            out.append(f"{r.show('scan')}    # every container probed inside: no errors")
            out += [r.show("diagnose", ct) for ct in _unique(i.ct for i in report.items_of(h.host))]
            continue
        out.append(f"lxcfix audit --for {report.for_}{to}{flag}    # nothing left at risk")
        out.append(f"lxcfix scan{flag}    # every container probed inside: no errors")
        for ct in _unique(i.ct for i in report.items_of(h.host)):
            out.append(f"lxcfix diagnose --ct {ct}{flag}")
    out.append("```")
    return "\n".join(out) + "\n"


def _provenance(made: Provenance) -> list[str]:
    """The ticket's header lines: a list, then the command line in a fence no backtick run in
    it can close (a value may hold anything the admin typed). Not an `sh` block: those are
    the ticket's changes, to run; this one says what ran."""
    fence = "`" * max(3, 1 + _longest_run(made.command, "`"))
    return [f"- date (UTC): {_cell(made.date)}", f"- lxcfix version: {__version__}",
            f"- run on host: {_cell(made.host)}", f"- run by: {_cell(made.user)}", "- command line:", "",
            fence, made.command, fence, ""]


def _longest_run(text: str, char: str) -> int:
    longest = n = 0
    for c in text:
        n = n + 1 if c == char else 0
        longest = max(longest, n)
    return longest


def _changes(items: list[AuditItem]) -> list[tuple[tuple, list[AuditItem]]]:
    """Items of one host grouped by identical change (a plan fixes several findings at once)."""
    groups: dict[tuple, list[AuditItem]] = {}
    for i in items:
        groups.setdefault((i.ct, i.kind, i.change, i.path), []).append(i)
    return list(groups.items())
