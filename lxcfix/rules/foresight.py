"""What maintenance breaks that works today: checks `lxcfix audit` runs (not
`scan`), each a finding with its fix as data.

    check(ctx, Occasion("reboot"))
        -> [Finding("LXF113", "warning", ..., "/dev/dri/card1 is named by its index ...", fix=Fix(...)),
            Finding("LXF112", "error", ..., "/dev/nvidia-uvm exists now, but ...", fix=Fix(commands=...))]

LXF113: a /dev/dri/cardN (or renderDN on a multi-GPU host) passed in by its
index, which the kernel gives in probe order. LXF112: /dev/nvidia-uvm exists
now but nothing known creates it at boot. LXF212 (driver upgrade): the
container's NVIDIA userspace must follow the host driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import fixes
from ..model import DeviceNode, Edit, Finding, Fix


@dataclass(frozen=True)
class Occasion:
    """The maintenance ahead. boot_nodes: something creates the NVIDIA nodes at
    boot (lxcfix's unit is installed). new_driver: the version an upgrade installs."""

    for_: str = "reboot"  # reboot | driver-upgrade
    new_driver: str | None = None
    boot_nodes: bool = False

    @property
    def event(self) -> str:
        return "driver upgrade" if self.for_ == "driver-upgrade" else "reboot"


def check(ctx, occasion: Occasion, findings: tuple[Finding, ...] = ()) -> list[Finding]:
    """findings: what the scan found already (an LXF112 or LXF212 there is not repeated)."""
    return dri_numbering(ctx, occasion) + uvm_at_boot(ctx, occasion, findings) + \
        (userspace_after_upgrade(ctx, occasion, findings) if occasion.for_ == "driver-upgrade" else [])


def _by_path(ctx, node: DeviceNode | None, suffix: str) -> str | None:
    if node is None:
        return None
    for p, n in sorted(ctx.facts.nodes.items()):
        if p.startswith("/dev/dri/by-path/") and p.endswith("-" + suffix) and \
                (n.kind, n.major, n.minor) == (node.kind, node.major, node.minor):
            return p
    return None


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
        shown = stable or f"/dev/dri/by-path/pci-<PCI address>-{suffix}"
        why = (f"{g.path} is named by its index, which the kernel gives in probe order: after a "
               f"{occasion.event} another GPU (or simpledrm/efifb) can take {m.group(1)}{m.group(2)}, and the "
               "container then gets the wrong device"
               + (" or does not start (devN: 'Device does not exist')" if g.via == "devn" else "")
               + ". /dev/dri/by-path names the GPU by its PCI address")
        notes = () if stable else (f"# find the GPU's entry: ls -l /dev/dri/by-path/ (the one -> ../{m.group(1)}{m.group(2)})",)
        target = g.target.lstrip("/") if g.via == "mount" else g.path.lstrip("/")
        edits = [Edit("replace", g.index, ((fixes.MOUNT_KEY, f"{shown} {target} none bind,optional,create=file"),))]
        if not eff.unprivileged:
            pinned = [r for r in eff.own_rules if r.rule is not None and r.rule.path is None and r.rule.allow
                      and g.node is not None and r.rule.kind == "c" and r.rule.major == g.node.major
                      and r.rule.minor == g.node.minor]
            edits += [Edit("remove", r.index) for r in pinned]
            if pinned or g.via == "devn":
                edits.append(Edit("add", lines=((fixes.ALLOW, f"{shown} rwm"),)))
        out.append(ctx.finding("LXF113", "warning", why, device=g.path,
                               evidence=(f"{ctx.config.path}:{g.index + 1}",),
                               fix=Fix(f"pass {g.path} in by its /dev/dri/by-path name", tuple(edits), "manual",
                                       notes=notes)))
    return out


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
    why = (f"/dev/nvidia-uvm exists now, but the kernel does not create it when the module loads: "
           f"after the {occasion.event}, until something runs nvidia-modprobe -u, it is absent and {start}")
    return [ctx.finding("LXF112", "error", why, device=g.path, fix=Fix(
        "create the NVIDIA nodes at boot, before guests start",
        commands=(f"{fixes.HOST_FIX}    # installs {fixes.UNIT}: nvidia-modprobe at boot, before guests start",)))]


def userspace_after_upgrade(ctx, occasion: Occasion, findings) -> list[Finding]:
    """Every container using the GPU needs the new userspace driver after an upgrade."""
    if any(f.code == "LXF212" for f in findings):
        return []
    if not any(g.profile in ("nvidia", "nvidia-uvm") for g in ctx.effective.given):
        return []
    version = occasion.new_driver or "<new driver version>"
    notes = () if occasion.new_driver else \
        ("# <new driver version>: the host's after the upgrade: cat /proc/driver/nvidia/version",)
    why = ("the container runs the NVIDIA userspace libraries, which must equal the host's kernel module "
           f"exactly: after the upgrade ({ctx.facts.nvidia_driver or 'current'} -> {version}) NVML says "
           "'Driver/library version mismatch' until the container gets userspace " + version)
    return [ctx.finding("LXF212", "error", why, fix=Fix(
        f"install the NVIDIA userspace {version} in the container", notes=notes,
        commands=fixes.userspace_commands(ctx.ct, ctx.config.flavor, version)))]
