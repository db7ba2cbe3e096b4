"""What maintenance breaks that works today: checks `lxcfix audit` runs (not
`scan`), each a finding with its fix as data.

    check(ctx, Occasion("reboot"))
        -> [Finding("LXF113", "warning", ..., "/dev/dri/card1 is named by its index ...", fix=Fix(...)),
            Finding("LXF112", "error", ..., "/dev/nvidia-uvm exists now, but ...", fix=Fix(commands=...))]

LXF113: a /dev/dri/cardN (or renderDN on a multi-GPU host) passed in by its
index, which the kernel gives in probe order. LXF155: a USB serial node
(/dev/ttyUSBn, /dev/ttyACMn) passed in by its index, which changes on replug.
Both fixes keep the name the application expects inside and pass in the
host's stable name (/dev/dri/by-path, /dev/serial/by-id), resolved at start.
LXF112: /dev/nvidia-uvm exists now but nothing known creates it at boot.
LXF212 (driver upgrade): the container's NVIDIA userspace must follow the
host driver; said per container, from the version the probe read. The
upgrades of the kernel, LXC and Proxmox VE are rules.upgrade's
(LXF150, LXF151, LXF156, LXF157).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import fixes
from ..codes import audit_outcome
from ..model import DeviceNode, Edit, Finding, Fix
from . import upgrade

FOR = ("reboot", "driver-upgrade", "kernel-upgrade", "lxc-upgrade", "pve-upgrade")
EVENTS = {"reboot": "reboot", "driver-upgrade": "driver upgrade", "kernel-upgrade": "kernel upgrade",
          "lxc-upgrade": "LXC upgrade", "pve-upgrade": "Proxmox VE upgrade"}


@dataclass(frozen=True)
class Occasion:
    """The maintenance ahead. boot_nodes: something creates the NVIDIA nodes at
    boot (lxcfix's unit is installed). new_driver: the version an upgrade installs.
    to_kernel: the kernel a kernel upgrade boots (default: the newest installed one
    that is not running)."""

    for_: str = "reboot"  # one of FOR
    new_driver: str | None = None
    boot_nodes: bool = False
    to_kernel: str | None = None

    @property
    def event(self) -> str:
        return EVENTS.get(self.for_, self.for_)

    @property
    def reboots(self) -> bool:
        """The host boots again (device numbering, dynamic majors, /dev/nvidia-uvm at boot)."""
        return self.for_ in ("reboot", "kernel-upgrade", "pve-upgrade")

    @property
    def restarts_containers(self) -> bool:
        """Every container starts again: what waits for a start (pending changes, the config
        on disk) happens."""
        return self.reboots


def outcome(f: Finding, occasion: Occasion) -> str:
    """What the finding says of the occasion: "will" or "may" (its code's record's `predicts`)."""
    return audit_outcome(f.code, occasion.for_)


def check(ctx, occasion: Occasion, findings: tuple[Finding, ...] = ()) -> list[Finding]:
    """findings: what the scan found already (an LXF112 or LXF212 there is not repeated)."""
    out: list[Finding] = []
    if occasion.for_ != "lxc-upgrade":  # an LXC upgrade reloads no driver and renumbers nothing
        out += dri_numbering(ctx, occasion) + uvm_at_boot(ctx, occasion, findings)
    if occasion.reboots:  # USB serial numbering moves with plug order: a boot, not a driver reload
        out += serial_names(ctx, occasion)
    if occasion.for_ == "driver-upgrade":
        out += userspace_after_upgrade(ctx, occasion, findings)
    if occasion.for_ in ("kernel-upgrade", "pve-upgrade"):
        out += upgrade.kernel_modules(ctx, occasion)
    if occasion.for_ in ("lxc-upgrade", "pve-upgrade"):
        out += upgrade.v1_keys(ctx, occasion)
    if occasion.for_ == "pve-upgrade":
        out += upgrade.cgroup_v2_view(ctx, occasion)
    return out


# ---------------------------------------------------------------- names that move

def stable_names(ctx, node: DeviceNode | None, prefixes: tuple[str, ...], suffix: str = "") -> list[str]:
    """The host's stable names (udev links under these directories) of this node now, best first."""
    if node is None:
        return []
    found = []
    for rank, prefix in enumerate(prefixes):
        for p, n in sorted(ctx.facts.nodes.items()):
            if p.startswith(prefix) and p.endswith(suffix) and \
                    (n.kind, n.major, n.minor) == (node.kind, node.major, node.minor):
                found.append((rank, p))
    return [p for _, p in sorted(found)]


def _by_path(ctx, node: DeviceNode | None, suffix: str) -> str | None:
    names = stable_names(ctx, node, ("/dev/dri/by-path/",), "-" + suffix)
    return names[0] if names else None


def stable_fix(ctx, g, stable: str | None, placeholder: str, title: str, notes: tuple[str, ...]) -> Fix:
    """The node keeps its name inside (what the application opens); the host side is the
    stable name: a bind mount from it, and a path-form rule LXC resolves at every start.
    (A devN entry would name the node inside by its host path: /dev/serial/by-id/... .)"""
    eff = ctx.effective
    shown = stable or placeholder
    target = g.target.lstrip("/") if g.via == "mount" else g.path.lstrip("/")
    edits = [Edit("replace", g.index, ((fixes.MOUNT_KEY, f"{shown} {target} none bind,optional,create=file"),))]
    if not eff.unprivileged:
        pinned = [r for r in eff.own_rules if r.rule is not None and r.rule.path is None and r.rule.allow
                  and g.node is not None and r.rule.kind == "c" and r.rule.major == g.node.major
                  and r.rule.minor == g.node.minor]
        edits += [Edit("remove", r.index) for r in pinned]
        if pinned or g.via == "devn":
            edits.append(Edit("add", lines=((fixes.ALLOW, f"{shown} rwm"),)))
    return Fix(title, tuple(edits), "manual", notes=notes)


def _now(ctx, g, stable: list[str]) -> tuple[str, ...]:
    """Which physical device each stable name points to now."""
    if g.node is None:
        return ()
    n = g.node
    return tuple(f"# now: {p} is {n.kind} {n.major}:{n.minor}, {g.path} on this host" for p in stable)


def dri_numbering(ctx, occasion: Occasion) -> list[Finding]:
    out = []
    eff = ctx.effective
    renders = [p for p in ctx.facts.nodes if re.fullmatch(r"/dev/dri/renderD[0-9]+", p)]
    for g in eff.given:
        if g.from_dir is not None:
            continue
        m = re.fullmatch(r"/dev/dri/(card|renderD)([0-9]+)", g.path)
        if not m or (m.group(1) == "renderD" and len(renders) < 2):
            continue
        suffix = "card" if m.group(1) == "card" else "render"
        stable = _by_path(ctx, g.node, suffix)
        why = (f"{g.path} is named by its index, which the kernel gives in probe order: after a "
               f"{occasion.event} another GPU (or simpledrm/efifb) can take {m.group(1)}{m.group(2)}, and the "
               "container then gets the wrong device"
               + (" or does not start (devN: 'Device does not exist')" if g.via == "devn" else "")
               + ". /dev/dri/by-path names the GPU by its PCI address")
        notes = _now(ctx, g, [stable]) if stable else \
            (f"# find the GPU's entry: ls -l /dev/dri/by-path/ (the one -> ../{m.group(1)}{m.group(2)})",)
        out.append(ctx.finding("LXF113", why, device=g.path,
                               evidence=(f"{ctx.config.path}:{g.index + 1}",),
                               fix=stable_fix(ctx, g, stable, f"/dev/dri/by-path/pci-<PCI address>-{suffix}",
                                              f"pass {g.path} in by its /dev/dri/by-path name", notes)))
    return out


_SERIAL = re.compile(r"/dev/tty(USB|ACM)[0-9]{1,4}")


def serial_names(ctx, occasion: Occasion) -> list[Finding]:
    """LXF155: a USB serial adapter passed in by /dev/ttyUSBn or /dev/ttyACMn, numbers the
    kernel hands out in plug order: a replug, another adapter or a reboot moves them."""
    out = []
    for g in ctx.effective.given:
        if g.from_dir is not None or not _SERIAL.fullmatch(g.path):
            continue
        stable = stable_names(ctx, g.node, ("/dev/serial/by-id/", "/dev/serial/by-path/"))
        why = (f"{g.path} is named by the order USB serial adapters appeared: after a replug, another adapter, or a "
               f"{occasion.event}, it can be another device, or missing"
               + (" (devN: the container does not start)" if g.via == "devn" else "")
               + ". /dev/serial/by-id names the adapter by its vendor, model and serial number")
        notes = _now(ctx, g, stable) if stable else \
            (f"# find the adapter's name: ls -l /dev/serial/by-id/ (the one -> ../../{g.path.rsplit('/', 1)[1]})",)
        out.append(ctx.finding("LXF155", why, device=g.path,
                               evidence=(f"{ctx.config.path}:{g.index + 1}",
                                         *(f"{p} -> {g.path}" for p in stable)),
                               fix=stable_fix(ctx, g, stable[0] if stable else None, "/dev/serial/by-id/<adapter>",
                                              f"pass {g.path} in by its /dev/serial/by-id name", notes)))
    return out


# ---------------------------------------------------------------- NVIDIA

def uvm_at_boot(ctx, occasion: Occasion, findings) -> list[Finding]:
    """/dev/nvidia-uvm exists now, but nothing known creates it at boot."""
    if occasion.boot_nodes:
        return []
    uvm = [g for g in ctx.effective.given if g.profile == "nvidia-uvm" and g.node is not None]
    if not uvm or any(f.code == "LXF112" for f in findings):
        return []
    g = uvm[0]
    start = ("the container does not start (devN)" if g.via == "devn" else
             "the container starts without it and CUDA fails" if g.optional else
             "LXC refuses to start the container")
    by_path = [r for r in ctx.effective.own_rules if r.rule is not None and r.rule.path in (u.path for u in uvm)]
    why = (f"/dev/nvidia-uvm exists now, but the kernel does not create it when the module loads: "
           f"after the {occasion.event}, until something runs nvidia-modprobe -u, it is absent and {start}")
    if by_path:
        why += (f"; the path-form rule `{by_path[0].value}` is dropped at that start (\"Failed to parse device "
                "rule\"), so it stays denied even once the node exists, until the container restarts")
    return [ctx.finding("LXF112", why, device=g.path, fix=Fix(
        "create the NVIDIA nodes at boot, before guests start",
        commands=(f"{fixes.HOST_FIX}    # installs {fixes.UNIT}: nvidia-modprobe at boot, before guests start",)))]


# The container gets its NVIDIA userspace from the host at every start (LXC's nvidia hook,
# bind mounts of the host's libraries): it follows an upgrade once it restarts.
_HOST_LIBS = re.compile(r"lib(nvidia|cuda)[-_.]|/nvidia/|hooks/nvidia")


def follows_host(ctx) -> str | None:
    """The line that brings the host's NVIDIA userspace in at every start, if any."""
    for i, ln in ctx.config.main():
        if ln.key in ("lxc.hook.mount", "lxc.mount.entry", "lxc.hook.pre-mount") and _HOST_LIBS.search(ln.value or ""):
            return f"{ctx.config.path}:{i + 1}: {ln.text.strip()}"
    return None


def userspace_after_upgrade(ctx, occasion: Occasion, findings) -> list[Finding]:
    """LXF212, predicted per container: the userspace that will no longer match the host."""
    if any(f.code == "LXF212" for f in findings):
        return []
    if not any(g.profile in ("nvidia", "nvidia-uvm") for g in ctx.effective.given):
        return []
    version = occasion.new_driver or "<new driver version>"
    host = ctx.facts.nvidia_driver or "current"
    have = ctx.probe.driver_version if ctx.probe is not None else None
    if have and occasion.new_driver and have == occasion.new_driver:
        return []  # the container already has the new userspace
    notes = () if occasion.new_driver else \
        ("# <new driver version>: the host's after the upgrade: cat /proc/driver/nvidia/version",)
    mismatch = (f"after the upgrade ({host} -> {version}) NVML says 'Driver/library version mismatch' until the "
                f"container gets userspace {version}")
    source = follows_host(ctx)
    if source is not None:
        why = (f"the container takes the host's NVIDIA userspace at every start ({source}): {mismatch}, which "
               "it does at its next start")
        return [ctx.finding("LXF212", why, fix=Fix(
            "restart the container after the upgrade", commands=(_restart(ctx),)))]
    seen = (f"its userspace is {have} (the probe read it; it matches the host's {host} now)" if have else
            "its userspace version is not known (the probe did not run)")
    why = (f"the container runs its own copy of the NVIDIA userspace libraries, which must equal the host's kernel "
           f"module exactly; {seen}: {mismatch}")
    return [ctx.finding("LXF212", why, evidence=(f"host driver now: {host}",), fix=Fix(
        f"install the NVIDIA userspace {version} in the container", notes=notes,
        commands=fixes.userspace_commands(ctx.ct, ctx.config.flavor, version)))]


def _restart(ctx) -> str:
    return fixes.command(*(("pct", "reboot", ctx.ct) if ctx.config.flavor == "pve" else ("lxc-stop", "-r", "-n", ctx.ct)))
