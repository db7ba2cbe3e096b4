"""Before maintenance: which containers WILL or MAY break on the next reboot or
driver upgrade, why, and the exact change that prevents it. Pure: scan reports
in, an AuditReport and its renderings out.

    report = audit([host_report], "reboot")
    report.items[0] == AuditItem(
        host="pve1", ct="200", code="LXF103", severity="warning", outcome="may",
        why="c 511:* rwm pins the dynamic major of nvidia-uvm ...",
        change="- lxc.cgroup2.devices.allow: c 511:* rwm\\n+ lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm\\n...",
        kind="config", device="/dev/nvidia-uvm", path="/etc/pve/lxc/200.conf")
    to_table_rows(report)   -> [(host, ct, code, severity, outcome, device, why, change), ...]
    to_json(report)         -> {"schema": 1, "command": "audit", "for": "reboot", ...}
    to_markdown(report)     -> a change ticket: summary, a table per host, the changes, how to verify

Where an item comes from:
- the container's findings (LXF100/101/102/103/104/111/112/201/212/300), read
  together with its config (re-parsed from the plan's `before` bytes), so a
  change is written against the exact line it replaces;
- facts the audit computes itself: LXF113 (a /dev/dri/cardN or renderDN node
  passed in by its index, which can flip between boots), "nvidia-uvm is not
  created at boot" (LXF112, may) and, for a driver upgrade, "the container's
  NVIDIA userspace must follow the host driver" (LXF212, will).

`change` is exact: for kind "config", diff-style lines for the container's
config (`- old line`, `+ new line`); for kind "command", commands to run on the
host; for kind "manual", an instruction (no exact text is possible). Values
only the container knows (the gid of its `render` group) come from `ct_groups`
when the caller has them; otherwise the change says how to read them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import __version__, ctconfig, devices
from .effective import MOUNT_KEY, Effective, Given, OwnRule, effective, is_devn_key
from .errors import BadInput
from .facts import version_tuple
from .model import SEVERITY_ORDER, DeviceNode, Finding, HostFacts
from .probe import allow_rule
from .scan import CtReport, HostReport

SCHEMA = 1
FOR = ("reboot", "driver-upgrade")
ALLOW = "lxc.cgroup2.devices.allow"
HOST_FIX = "lxcfix host-fix --yes"
UNIT = "lxcfix-nvidia-nodes.service"

# Dynamic majors a driver upgrade can move (the NVIDIA modules are reloaded);
# a reboot can move any dynamic major.
NVIDIA_PROFILES = frozenset({"nvidia", "nvidia-uvm", "nvidia-caps"})
# Groups the host gives these nodes (Debian/Proxmox udev rules), by node name.
NODE_GROUPS = ((r"/dev/dri/renderD\d+", "render"), (r"/dev/dri/card\d+", "video"),
               (r"/dev/tty(USB|ACM)\d+", "dialout"))
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

    def to_json(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.why, "outcome": self.outcome,
                "device": self.device, "change": self.change, "change_kind": self.kind, "path": self.path}


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


@dataclass(frozen=True)
class AuditReport:
    for_: str
    hosts: tuple[HostAudit, ...]
    items: tuple[AuditItem, ...]
    new_driver: str | None = None

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


# ---------------------------------------------------------------- the audit

def audit(hosts: Sequence[HostReport], for_: str, *, new_driver: str | None = None,
          boot_nodes: Mapping[str, bool] | None = None,
          ct_groups: Mapping[tuple[str, str], Mapping[str, int]] | None = None) -> AuditReport:
    """hosts: scan reports (with probe results for LXF201/LXF212 to show up).
    new_driver: the NVIDIA driver version the upgrade installs, when known.
    boot_nodes: host -> True when something creates the NVIDIA nodes at boot
    (lxcfix's unit is installed); unknown hosts get a "may" item.
    ct_groups: (host, ct) -> {"render": 104, "video": 44} read inside the container."""
    if for_ not in FOR:
        raise BadInput(f"unknown --for {for_!r}: use reboot or driver-upgrade")
    items: list[AuditItem] = []
    summaries = []
    for h in hosts:
        f = h.facts
        summaries.append(HostAudit(
            h.host, h.backend, h.error, f.nvidia_driver if f else None, f.cgroup_layout if f else None,
            f.pve_version if f else None, f.lxc_version if f else None,
            tuple((c.ct, c.path) for c in h.containers)))
        if f is None:
            continue
        for c in h.containers:
            groups = (ct_groups or {}).get((h.host, c.ct)) or _probed_groups(c)
            boot = (boot_nodes or {}).get(h.host, False)
            items += _Ct(h, c, f, for_, new_driver, boot, groups).items()
    items.sort(key=_item_order)
    return AuditReport(for_, tuple(summaries), tuple(items), new_driver)


def _probed_groups(c: CtReport) -> Mapping[str, int]:
    """Group ids the probe read in the container's /etc/group; {} when it did not run."""
    return dict(c.probe.groups) if c.probe is not None else {}


def _ct_key(ct: str) -> tuple:
    return (0, int(ct), "") if ct.isdigit() else (1, 0, ct)


def _item_order(i: AuditItem) -> tuple:
    return (i.host, _ct_key(i.ct), OUTCOME_ORDER[i.outcome], SEVERITY_ORDER[i.severity], i.code, i.device or "")


def _no_includes(path: str):
    return None  # LXC's built-in defaults stand in: the audit reads nothing


class _Ct:
    """One container: its findings, config and effective view, turned into items."""

    def __init__(self, h: HostReport, c: CtReport, facts: HostFacts, for_: str, new_driver: str | None,
                 boot: bool, groups: Mapping[str, int]):
        self.h, self.c, self.facts, self.for_ = h, c, facts, for_
        self.new_driver, self.boot, self.groups = new_driver, boot, groups
        self.flavor = "pve" if h.backend == "pve" else "lxc"
        self.cfg: ctconfig.CtConfig | None = None
        self.eff: Effective | None = None
        if c.plan is not None:
            self.cfg = ctconfig.parse(c.plan.before, self.flavor, c.path)
            self.eff = effective(self.cfg, facts, _no_includes)

    # -- helpers

    def item(self, code: str, severity: str, outcome: str, why: str, change: str, kind: str = "config",
             device: str | None = None) -> AuditItem:
        return AuditItem(self.h.host, self.c.ct, code, severity, outcome, why, change, kind, device,
                         self.c.path if kind == "config" else None)

    def line_text(self, index: int) -> str:
        return self.cfg.lines[index].text.strip()

    def fmt(self, key: str, value: str, like: int | None = None) -> str:
        """A config line in the file's own style (raw lxc.* keys in a Proxmox
        config may use ' = '; keep what the replaced line used)."""
        if like is not None and key.startswith("lxc.") and re.match(r"^\s*lxc\.[^:=\s]+\s*=", self.line_text(like)):
            return f"{key} = {value}"
        return ctconfig.format_line(self.flavor, key, value).decode("utf-8", "surrogateescape").rstrip("\n")

    def evidence_line(self, f: Finding) -> int | None:
        """The 0-based config line a finding's evidence names (`<path>:<n>...`)."""
        for e in f.evidence:
            m = re.match(re.escape(self.c.path) + r":(\d+)(?::|$)", e)
            if m and self.cfg is not None and 0 < int(m.group(1)) <= len(self.cfg.lines):
                return int(m.group(1)) - 1
        return None

    def rule_at(self, index: int | None) -> OwnRule | None:
        if index is None or self.eff is None:
            return None
        return next((r for r in self.eff.own_rules if r.index == index), None)

    def given(self, path: str | None) -> Given | None:
        if self.eff is None or path is None:
            return None
        for g in self.eff.given:
            if g.path == path or "/" + g.target.lstrip("/") == path:
                return g
        return None

    def next_devn(self) -> int:
        used = [int(ln.key[3:]) for _, ln in self.cfg.main() if ln.key and is_devn_key(ln.key)]
        return max(used) + 1 if used else 0

    @property
    def exec_prefix(self) -> str:
        return f"pct exec {self.c.ct} --" if self.flavor == "pve" else f"lxc-attach -n {self.c.ct} --"

    # -- all items of this container

    def items(self) -> list[AuditItem]:
        out: list[AuditItem] = []
        for f in sorted(self.c.findings, key=lambda f: (f.code, f.device or "")):
            handler = _HANDLERS.get(f.code)
            got = handler(self, f) if handler else None
            if got is not None:
                out.append(got)
        if self.eff is not None:
            out += self.dri_numbering()
            out += self.uvm_at_boot()
            if self.for_ == "driver-upgrade":
                out += self.userspace_after_upgrade()
        return out

    # -- from findings

    def broken_now(self, f: Finding) -> AuditItem:
        """LXF100/LXF101: broken already; the plan's change fixes them all at once."""
        lines = [l for l in (self.c.plan.diff() if self.c.plan else "").splitlines()
                 if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        why = f"broken now, and stays broken after the {self._event}: {f.message}"
        if not lines:
            return self.item(f.code, f.severity, "will", why, f"lxcfix plan --ct {self.c.ct}", "command", f.device)
        return self.item(f.code, f.severity, "will", why, "\n".join(f"{l[0]} {l[1:]}" for l in lines),
                         device=f.device)

    def v1_key(self, f: Finding) -> AuditItem | None:
        r = self.rule_at(self.evidence_line(f))
        why = f"{f.message}; the rule does nothing, now or after the {self._event}"
        if r is None:
            return self.item(f.code, f.severity, "will", why, f.fix or "", "manual")
        new = self.fmt(r.key.replace("lxc.cgroup.", "lxc.cgroup2."), r.value.strip(), like=r.index)
        return self.item(f.code, f.severity, "will", why, f"- {self.line_text(r.index)}\n+ {new}")

    def pinned(self, f: Finding) -> AuditItem | None:
        r = self.rule_at(self.evidence_line(f))
        if r is None or r.rule is None:
            return None
        profile = devices.profile_for_major(r.rule.major, self.facts, r.rule.minor) if r.rule.major else None
        name = profile.name if profile else f"major {r.rule.major}"
        if self.for_ == "driver-upgrade" and profile is not None and profile.name not in NVIDIA_PROFILES:
            return None  # an NVIDIA upgrade does not reload this driver
        nodes = [g.node for g in self.eff.given if g.node is not None and g.node.kind == r.rule.kind
                 and g.node.major == r.rule.major and r.rule.minor in (None, g.node.minor)]
        paths = _unique([n.path for n in nodes] or
                        ([n.path for n in devices.nodes_of(profile, self.facts)] if profile else []))
        when = ("the upgrade reloads the NVIDIA modules" if self.for_ == "driver-upgrade"
                else "the reboot loads the driver again")
        why = (f"{r.rule} pins {name}'s dynamic major {r.rule.major}: the kernel picks the major when the "
               f"module loads; if {when} and it gets another one, the device is denied (EPERM"
               + ("; CUDA error 999" if name == "nvidia-uvm" else "") + "). Path-form rules are resolved "
               "at every start")
        if not paths:
            return self.item(f.code, f.severity, "may", why, f.fix or "", "manual", f.device)
        change = [f"- {self.line_text(r.index)}"] + [f"+ {self.fmt(ALLOW, f'{p} {r.rule.access}', like=r.index)}"
                                                     for p in paths]
        return self.item(f.code, f.severity, "may", why, "\n".join(change), device=paths[0])

    def overbroad(self, f: Finding) -> AuditItem | None:
        r = self.rule_at(self.evidence_line(f))
        if r is None or r.rule is None:
            return None
        covered = []
        for g in self.eff.given:
            n = g.node
            if n is None or not _covers(r.rule, n) or self._allowed_elsewhere(n, r.index):
                continue
            covered.append(self.exact_rule(n))
        why = (f"{f.message}: it works, so nothing breaks because of it, but it is the rule that hides the "
               "next missing one; narrow it in the same window (the lines below keep every device the "
               "container is given)")
        change = [f"- {self.line_text(r.index)}"] + [f"+ {self.fmt(ALLOW, v, like=r.index)}" for v in _unique(covered)]
        return self.item(f.code, f.severity, "may", why, "\n".join(change), device=f.device)

    def exact_rule(self, n: DeviceNode) -> str:
        profile = devices.profile_for_major(n.major, self.facts, n.minor) if n.kind == "c" else None
        if profile is not None and profile.dynamic:
            return f"{n.path} rwm"
        return allow_rule(n.kind, n.major, n.minor)

    def _allowed_elsewhere(self, n: DeviceNode, skip: int) -> bool:
        for r in self.eff.own_rules:
            if r.index == skip or r.rule is None or not r.rule.allow or r.v1 or devices.is_overbroad(r.rule):
                continue
            if r.rule.path is not None:
                if r.rule.path == n.path:
                    return True
            elif _covers(r.rule, n):
                return True
        return False

    def not_optional(self, f: Finding) -> AuditItem | None:
        g = self.given(f.device)
        index = self.evidence_line(f)
        if index is None and g is not None:
            index = g.index
        if index is None:
            return None
        if self.for_ == "driver-upgrade" and (g is None or g.profile not in NVIDIA_PROFILES):
            return None
        line = self.cfg.lines[index]
        parts = (line.value or "").split()
        if len(parts) < 4:
            return None
        opts = parts[3].split(",")
        at = next((i + 1 for i, o in enumerate(opts) if o in ("bind", "rbind")), len(opts))
        opts.insert(at, "optional")
        if not any(o.startswith("create=") for o in opts):
            opts.append("create=file")
        new = " ".join(parts[:3] + [",".join(opts)] + parts[4:])
        absent = ("/dev/nvidia-uvm is absent at boot until something runs nvidia-modprobe"
                  if g is not None and g.profile == "nvidia-uvm" else "a node can be absent at start "
                  "(driver not loaded yet, device unplugged)")
        why = f"{absent}; without 'optional' LXC then refuses to start the container"
        return self.item(f.code, f.severity, "may", why,
                         f"- {self.line_text(index)}\n+ {self.fmt(MOUNT_KEY, new, like=index)}", device=f.device)

    def missing_on_host(self, f: Finding) -> AuditItem:
        g = self.given(f.device)
        why = f"{f.message}; after the {self._event} too, unless something creates it before the container starts"
        argv = _modprobe_for(f.device or "", g.profile if g else None)
        if argv is None:
            return self.item(f.code, f.severity, "will", why, f.fix or "load its driver or fix the path",
                             "manual", f.device)
        return self.item(f.code, f.severity, "will", why,
                         f"{argv}\n{HOST_FIX}    # installs {UNIT}: creates the nodes at every boot, "
                         "before guests start", "command", f.device)

    def eacces(self, f: Finding) -> AuditItem | None:
        """LXF201 (probe): mode/uid/gid or idmap keeps the container's root out."""
        path = f.device or ""
        g = self.given(path)
        host_path = g.path if g else path
        group = _group_for(path)
        why = f"broken now, and after the {self._event}: {f.message}"
        host_node = self.facts.nodes.get(host_path)
        if host_node is not None:
            why += f" (on the host: gid {host_node.gid}, mode {oct(host_node.mode & 0o777)[2:].zfill(4)})"
        gid = self.groups.get(group) if group else None
        gid_text = str(gid) if gid is not None else f"<gid of group '{group or 'the device group'}' in CT {self.c.ct}>"
        lookup = (f"# {gid_text}: {self.exec_prefix} getent group {group}   (the third field)\n"
                  if gid is None and group else "")
        if self.flavor == "pve" and (not self.facts.pve_version or version_tuple(self.facts.pve_version) >= (8, 1)):
            return self.item(f.code, f.severity, "will", why, lookup + self._devn_gid(g, host_path, gid_text),
                             device=path)
        host_gid = host_node.gid if host_node is not None else None
        return self.item(f.code, f.severity, "will", why, lookup + self._idmap_gid(gid, host_gid, group),
                         device=path)

    def _devn_gid(self, g: Given | None, host_path: str, gid_text: str) -> str:
        if g is not None and g.via == "devn":
            d = next(d for d in self.eff.devn if d.index == g.index)
            opts = {k: v for k, v in d.options.items() if k != "gid"}
            value = ",".join([d.path] + [f"{k}={v}" for k, v in opts.items()] + [f"gid={gid_text}"])
            return f"- {self.line_text(g.index)}\n+ {d.key}: {value}"
        lines = []
        if g is not None and g.via == "mount" and g.from_dir is None:
            lines.append(f"- {self.line_text(g.index)}")
        lines.append(f"+ dev{self.next_devn()}: {host_path},gid={gid_text}")
        if g is not None and g.from_dir is not None:
            lines.insert(0, f"# {g.from_dir} is mounted whole: the devN entry adds {host_path} with the right group "
                            "(keep the directory mount only if other nodes in it are needed)")
        return "\n".join(lines)

    def _idmap_gid(self, gid: int | None, host_gid: int | None, group: str | None) -> str:
        """Map the host's group onto the container's group: the classic idmap split
        (a custom idmap replaces Proxmox's default one, so the uid line comes too)."""
        base, count = 100000, 65536
        lines = []
        for i, ln in self.cfg.main():
            parts = (ln.value or "").split() if ln.key == "lxc.idmap" else []
            if len(parts) == 4 and parts[:2] == ["g", "0"] and parts[2].isdigit() and parts[3].isdigit():
                base, count = int(parts[2]), int(parts[3])
                lines.append(f"- {self.line_text(i)}")
        has_u = any(ln.key == "lxc.idmap" and (ln.value or "").split()[:1] == ["u"] for _, ln in self.cfg.main())
        H = str(host_gid) if host_gid is not None else "H"
        if gid is not None:
            maps = [f"g 0 {base} {gid}", f"g {gid} {H} 1", f"g {gid + 1} {base + gid + 1} {count - gid - 1}"]
        else:
            maps = [f"g 0 {base} C", f"g C {H} 1", f"g C+1 {base}+C+1 {count}-C-1"]
        if not has_u:
            maps.insert(0, f"u 0 {base} {count}")
        note = ([f"# C = gid of group '{group}' in CT {self.c.ct}"] if gid is None else []) + \
               [f"# let root map the host group: echo 'root:{H}:1' >> /etc/subgid"]
        return "\n".join(note + lines + [f"+ {self.fmt('lxc.idmap', m)}" for m in maps])

    def driver_mismatch(self, f: Finding) -> AuditItem:
        host = self.facts.nvidia_driver or "the host's driver version"
        version = self.new_driver if (self.for_ == "driver-upgrade" and self.new_driver) else host
        why = f"broken now: {f.message}"
        if self.for_ == "driver-upgrade":
            why += f"; after the upgrade the container needs userspace {self.new_driver or 'equal to the new host driver'}"
        return self.item(f.code, f.severity, "will", why, self._userspace(version), "command")

    def _userspace(self, version: str) -> str:
        run = f"NVIDIA-Linux-x86_64-{version}.run"
        if self.flavor == "pve":
            return (f"pct push {self.c.ct} {run} /root/{run}\n"
                    f"pct exec {self.c.ct} -- sh /root/{run} --no-kernel-module --silent")
        return (f"cp {run} <rootfs of {self.c.ct}>/root/{run}\n"
                f"lxc-attach -n {self.c.ct} -- sh /root/{run} --no-kernel-module --silent")

    def cgroup_layout(self, f: Finding) -> AuditItem:
        return self.item(f.code, f.severity, "will", f"{f.message}; the {self._event} does not change that",
                         f.fix or "", "manual")

    # -- computed from the config and facts

    def dri_numbering(self) -> list[AuditItem]:
        """LXF113: /dev/dri/cardN (or renderDN on a multi-GPU host) passed in by its index."""
        out = []
        renders = [p for p in self.facts.nodes if re.fullmatch(r"/dev/dri/renderD\d+", p)]
        for g in self.eff.given:
            if g.from_dir is not None:
                continue
            m = re.fullmatch(r"/dev/dri/(card|renderD)(\d+)", g.path)
            if not m or (m.group(1) == "renderD" and len(renders) < 2):
                continue
            suffix = "card" if m.group(1) == "card" else "render"
            stable = self._by_path(g.node, suffix)
            shown = stable or f"/dev/dri/by-path/pci-<PCI address>-{suffix}"
            why = (f"{g.path} is named by its index, which the kernel gives in probe order: after a "
                   f"{self._event} another GPU (or simpledrm/efifb) can take {m.group(1)}{m.group(2)}, and the "
                   "container then gets the wrong device"
                   + (" or does not start (devN: 'Device does not exist')" if g.via == "devn" else "")
                   + ". /dev/dri/by-path names the GPU by its PCI address")
            change = [] if stable else [f"# find the GPU's entry: ls -l /dev/dri/by-path/ (the one -> ../{m.group(1)}{m.group(2)})"]
            target = g.target.lstrip("/") if g.via == "mount" else g.path.lstrip("/")
            change.append(f"- {self.line_text(g.index)}")
            change.append(f"+ {self.fmt(MOUNT_KEY, f'{shown} {target} none bind,optional,create=file', like=g.index if g.via == 'mount' else None)}")
            if not self.eff.unprivileged:
                pinned = [r for r in self.eff.own_rules if r.rule is not None and r.rule.path is None and r.rule.allow
                          and g.node is not None and r.rule.kind == "c" and r.rule.major == g.node.major
                          and r.rule.minor == g.node.minor]
                for r in pinned:
                    change.append(f"- {self.line_text(r.index)}")
                if pinned or g.via == "devn":
                    change.append(f"+ {self.fmt(ALLOW, f'{shown} rwm', like=pinned[0].index if pinned else None)}")
            out.append(AuditItem(self.h.host, self.c.ct, "LXF113", "warning", "may", why, "\n".join(change),
                                 "config", g.path, self.c.path))
        return out

    def _by_path(self, node: DeviceNode | None, suffix: str) -> str | None:
        if node is None:
            return None
        for p, n in sorted(self.facts.nodes.items()):
            if p.startswith("/dev/dri/by-path/") and p.endswith("-" + suffix) and \
                    (n.kind, n.major, n.minor) == (node.kind, node.major, node.minor):
                return p
        return None

    def uvm_at_boot(self) -> list[AuditItem]:
        """/dev/nvidia-uvm exists now, but nothing known creates it at boot."""
        if self.boot:
            return []
        uvm = [g for g in self.eff.given if g.profile == "nvidia-uvm" and g.node is not None]
        if not uvm or any(f.code == "LXF112" for f in self.c.findings):
            return []
        g = uvm[0]
        start = ("the container does not start (devN)" if g.via == "devn" else
                 "the container starts without it and CUDA fails" if g.optional else
                 "LXC refuses to start the container")
        why = (f"/dev/nvidia-uvm exists now, but the kernel does not create it when the module loads: "
               f"after the {self._event}, until something runs nvidia-modprobe -u, it is absent and {start}")
        return [AuditItem(self.h.host, self.c.ct, "LXF112", "error", "may", why,
                          f"{HOST_FIX}    # installs {UNIT}: nvidia-modprobe at boot, before guests start",
                          "command", g.path, None)]

    def userspace_after_upgrade(self) -> list[AuditItem]:
        """Every container using the GPU needs the new userspace driver after an upgrade."""
        if any(f.code == "LXF212" for f in self.c.findings):
            return []
        if not any(g.profile in ("nvidia", "nvidia-uvm") for g in self.eff.given):
            return []
        version = self.new_driver or "<new driver version>"
        lookup = "" if self.new_driver else \
            "# <new driver version>: the host's after the upgrade: cat /proc/driver/nvidia/version\n"
        why = ("the container runs the NVIDIA userspace libraries, which must equal the host's kernel module "
               f"exactly: after the upgrade ({self.facts.nvidia_driver or 'current'} -> {version}) NVML says "
               "'Driver/library version mismatch' until the container gets userspace " + version)
        return [AuditItem(self.h.host, self.c.ct, "LXF212", "error", "will", why, lookup + self._userspace(version),
                          "command", None, None)]

    @property
    def _event(self) -> str:
        return "driver upgrade" if self.for_ == "driver-upgrade" else "reboot"


_HANDLERS = {
    "LXF100": _Ct.broken_now,
    "LXF101": _Ct.broken_now,
    "LXF102": _Ct.v1_key,
    "LXF103": _Ct.pinned,
    "LXF104": _Ct.overbroad,
    "LXF111": _Ct.not_optional,
    "LXF112": _Ct.missing_on_host,
    "LXF201": _Ct.eacces,
    "LXF212": _Ct.driver_mismatch,
    "LXF300": _Ct.cgroup_layout,
}


def _covers(rule, n: DeviceNode) -> bool:
    if rule.kind not in ("a", n.kind):
        return False
    return (rule.major is None or rule.major == n.major) and (rule.minor is None or rule.minor == n.minor)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _group_for(path: str) -> str | None:
    for pattern, group in NODE_GROUPS:
        if re.fullmatch(pattern, path):
            return group
    return None


def _modprobe_for(path: str, profile: str | None) -> str | None:
    """The nvidia-modprobe call that creates this node now (nvidia-modprobe(1):
    -c N creates /dev/nvidiaN, N=255 /dev/nvidiactl; -u -c0 nvidia-uvm and
    nvidia-uvm-tools; -m nvidia-modeset)."""
    if profile == "nvidia-uvm":
        return "nvidia-modprobe -u -c0"
    m = re.fullmatch(r"/dev/nvidia(\d+)", path)
    if m:
        return f"nvidia-modprobe -c{m.group(1)}"
    if path == "/dev/nvidiactl":
        return "nvidia-modprobe -c255"
    if path == "/dev/nvidia-modeset":
        return "nvidia-modprobe -m"
    return None


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


def to_json(report: AuditReport) -> dict:
    return {
        "schema": SCHEMA,
        "tool": "lxcfix",
        "version": __version__,
        "command": "audit",
        "for": report.for_,
        "new_driver": report.new_driver,
        "hosts": [
            {"host": h.host, "backend": h.backend, "error": h.error, "nvidia_driver": h.nvidia_driver,
             "cgroup_layout": h.cgroup_layout, "pve_version": h.pve_version, "lxc_version": h.lxc_version,
             "containers": len(h.containers),
             "will": sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "will"),
             "may": sum(1 for ct, _ in h.containers if report.outcome_of(h.host, ct) == "may")}
            for h in report.hosts
        ],
        "containers": [
            {"host": h.host, "ct": ct, "path": path, "outcome": report.outcome_of(h.host, ct),
             "findings": [i.to_json() for i in report.items_of(h.host, ct)]}
            for h in report.hosts for ct, path in h.containers
        ],
        "summary": summary(report),
    }


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")


def _host_flag(host: str, flags: Mapping[str, str] | None) -> str:
    if flags is not None and host in flags:
        return (" " + flags[host]) if flags[host] else ""
    return "" if host in ("localhost", "local", "127.0.0.1") else f" --host {host}"


def to_markdown(report: AuditReport, host_flags: Mapping[str, str] | None = None) -> str:
    """A change ticket. host_flags: host -> the lxcfix option that reaches it in
    the verify commands ("" for this host; default `--host H` for other names)."""
    event = "driver upgrade" if report.for_ == "driver-upgrade" else "reboot"
    s = summary(report)
    at_risk = s["will"] + s["may"]
    title = f"# lxcfix audit: before the {event}"
    if report.for_ == "driver-upgrade" and report.new_driver:
        title += f" to NVIDIA {report.new_driver}"
    out = [title, ""]
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
    for h in report.hosts:
        items = report.items_of(h.host)
        if not items:
            continue
        out += ["", f"## {h.host}", "", "| CT | code | severity | outcome | device | why |",
                "|---|---|---|---|---|---|"]
        for i in items:
            out.append("| " + " | ".join(_cell(c) for c in (i.ct, i.code, i.severity, i.outcome,
                                                             i.device or "-", i.why)) + " |")
        out += ["", f"### Changes on {h.host}"]
        for (ct, kind, change, path), group in _changes(items):
            what = ", ".join(f"{i.code}" + (f" {i.device}" if i.device else "") for i in group)
            out += ["", f"#### CT {ct}: {what}", ""]
            if kind == "config":
                extra = (f" (or `lxcfix apply --ct {ct}{_host_flag(h.host, host_flags)}`, which makes this "
                         "change with a backup and a verify)") if group[0].code in ("LXF100", "LXF101") else ""
                out += [f"In `{path}`{extra}:", "", "```diff", change, "```"]
            elif kind == "command":
                out += ["On the host:", "", "```sh", change, "```"]
            else:
                out += [change]
    out += ["", "## How to verify after maintenance", "", "```sh"]
    for h in report.hosts:
        flag = _host_flag(h.host, host_flags)
        out.append(f"lxcfix audit --for {report.for_}{flag}    # nothing left at risk")
        out.append(f"lxcfix scan{flag}    # every container probed inside: no errors")
        for ct in _unique(i.ct for i in report.items_of(h.host)):
            out.append(f"lxcfix diagnose --ct {ct}{flag}")
    out.append("```")
    return "\n".join(out) + "\n"


def _changes(items: list[AuditItem]) -> list[tuple[tuple, list[AuditItem]]]:
    """Items of one host grouped by identical change (a plan fixes several findings at once)."""
    groups: dict[tuple, list[AuditItem]] = {}
    for i in items:
        groups.setdefault((i.ct, i.kind, i.change, i.path), []).append(i)
    return list(groups.items())
