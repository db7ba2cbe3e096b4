"""The building blocks of fixes: config lines rendered from the jinja2 templates,
as Edits, and the host commands a person runs. Pure; the rules put them
together into each finding's Fix.

    allow_edit([uvm_node], facts, "numeric")
        -> Edit("add", lines=(("lxc.cgroup2.devices.allow", "c 511:* rwm"),), near=("lxc.mount.entry",))
    mount_edit([tun_node])
        -> Edit("add", lines=(("lxc.mount.entry", "/dev/net/tun dev/net/tun none bind,optional,create=file"),),
                near=("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"))
    devn_edit(uvm_node, 3)          -> Edit("add", lines=(("dev3", "/dev/nvidia-uvm,mode=0666"),))
    modprobe_argv("/dev/nvidia-uvm") -> ["nvidia-modprobe", "-u", "-c0"]
    userspace_commands("200", "pve", "580.159.04") -> ("pct push 200 NVIDIA-Linux-x86_64-580.159.04.run ...", ...)
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Sequence

from . import devices, render
from .ctconfig import CtConfig, is_devn_key
from .model import DeviceNode, Edit, HostFacts

ALLOW = "lxc.cgroup2.devices.allow"
MOUNT_KEY = "lxc.mount.entry"
V2_KEYS = ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny")
HOST_FIX = "lxcfix host-fix --yes"
UNIT = "lxcfix-nvidia-nodes.service"
MODPROBE = "nvidia-modprobe"


# ---- config lines

def rule_groups(nodes: Sequence[DeviceNode], facts: HostFacts) -> list[render.RuleGroup]:
    """One wildcard rule per major one driver owns whole; exact minors otherwise (and for a
    profile whose wildcard would grant more than its nodes: nvidia-caps)."""
    groups: dict[tuple, list[DeviceNode]] = {}
    for n in nodes:
        profile = devices.profile_for_major(n.major, facts, n.minor)
        whole = n.kind == "c" and profile is not None and profile.owns_major() and profile.wildcard \
            and n.major not in devices.SHARED_MAJORS
        groups.setdefault((n.kind, n.major, None if whole else n.minor), []).append(n)
    return [render.RuleGroup(k, M, m if m is not None else ns[0].minor, m is None, tuple(ns))
            for (k, M, m), ns in groups.items()]


def _profile(nodes: Sequence[DeviceNode], facts: HostFacts) -> str | None:
    names = {p.name for n in nodes if (p := devices.profile_for_major(n.major, facts, n.minor))}
    return names.pop() if len(names) == 1 else None


def exact_allow(kind: str, major: int, minor: int) -> str:
    """The rule that lets this node through: a wildcard minor only on a major one driver owns."""
    if kind == "b" or major in devices.SHARED_MAJORS:
        return f"{kind} {major}:{minor} rwm"
    return f"{kind} {major}:* rwm"


def unique(nodes: Iterable[DeviceNode]) -> list[DeviceNode]:
    seen: dict[str, DeviceNode] = {}
    for n in nodes:
        seen.setdefault(n.path, n)
    return list(seen.values())


def allow_lines(nodes: Sequence[DeviceNode], facts: HostFacts, style: str) -> list[tuple[str, str]]:
    """The allow rules that let these nodes through, in `style` (devn: path rules,
    since a devN entry cannot stand in for a node of a directory mount)."""
    style = "path" if style == "devn" else style
    nodes = unique(nodes)
    return render.render(style, _profile(nodes, facts), rules=rule_groups(nodes, facts), mounts=[])


def allow_edit(nodes: Sequence[DeviceNode], facts: HostFacts, style: str) -> Edit:
    return Edit("add", lines=tuple(allow_lines(nodes, facts, style)), near=(MOUNT_KEY,))


def mount_edit(nodes: Sequence[DeviceNode]) -> Edit:
    """Bind mounts for nodes to pass in (optional, create=file: a node absent at
    start must not stop the container)."""
    targets = [render.Mount(n.path, n.path.lstrip("/")) for n in unique(nodes)]
    return Edit("add", lines=tuple(render.render("path", None, rules=[], mounts=targets)), near=V2_KEYS)


def mount_dir_edit(path: str, style: str) -> Edit:
    """A bind mount of a whole directory of nodes (optional, create=dir): /dev/nvidia-caps,
    whose nodes come and go with MIG instances."""
    style = "path" if style == "devn" else style
    lines = render.render(style, None, rules=[], mounts=[render.Mount(path, path.lstrip("/"), "dir")])
    return Edit("add", lines=tuple(lines), near=V2_KEYS)


def devn_options(node: DeviceNode) -> list[tuple[str, str]]:
    """What a devN entry needs to look like the host's node inside: Proxmox
    creates it 0660 root:root unless told (pve-container's
    create_passthrough_device_node); NVIDIA's nodes are 0666."""
    opts = []
    if node.uid:
        opts.append(("uid", str(node.uid)))
    if node.gid:
        opts.append(("gid", str(node.gid)))
    mode = node.mode & 0o7777
    if mode and mode != 0o660:
        opts.append(("mode", f"0{mode:o}"))
    return opts


def devn_edit(node: DeviceNode, index: int, options: Sequence[tuple[str, str]] | None = None) -> Edit:
    opts = tuple(devn_options(node) if options is None else options)
    return Edit("add", lines=tuple(render.render("devn", None, devs=[render.Dev(f"dev{index}", node.path, opts)])))


def replace_edit(index: int, lines: Iterable[tuple[str, str]]) -> Edit:
    lines = tuple(lines)
    return Edit("replace", index, lines) if lines else Edit("remove", index)


def remove_edit(index: int) -> Edit:
    return Edit("remove", index)


def devn_value(path: str, options: Sequence[tuple[str, str]]) -> str:
    return ",".join([path] + [f"{k}={v}" for k, v in options])


# ---- host commands (display-only: a person runs them)

def modprobe_argv(device: str, modprobe: str = MODPROBE) -> list[str] | None:
    """The nvidia-modprobe call that creates this node now (nvidia-modprobe(1):
    -c N creates /dev/nvidiaN, N=255 /dev/nvidiactl; -u -c0 nvidia-uvm and
    nvidia-uvm-tools; -m nvidia-modeset), or None: the catalog's NodeSpec.create."""
    hit = devices.node_spec(device)
    if hit is None or hit[1].create is None:
        return None
    args = hit[1].create(hit[2])
    return [modprobe, *args] if args is not None else None


def command(*argv: str, comment: str = "") -> str:
    """A command line a person runs as printed: every value quoted as shlex.join does (a
    node's, a container's or a config key's name is never shell text), then a comment.

        command("rm", "/dev/x$(touch PWN)") -> "rm '/dev/x$(touch PWN)'"
    """
    return shlex.join(argv) + (f"    # {comment}" if comment else "")


def plan_command(ct: str, host: str = "localhost") -> str:
    """`lxcfix plan --ct CT` (and `--host H` for a fleet host), quoted: the "run:" hint of a fix."""
    return command("lxcfix", "plan", "--ct", ct, *(() if host in ("", "localhost") else ("--host", host)))


def userspace_commands(ct: str, flavor: str, version: str) -> tuple[str, ...]:
    """Install the NVIDIA userspace `version` in the container, without its kernel module."""
    run = f"NVIDIA-Linux-x86_64-{version}.run"
    if flavor == "pve":
        return (command("pct", "push", ct, run, f"/root/{run}"),
                command("pct", "exec", ct, "--", "sh", f"/root/{run}", "--no-kernel-module", "--silent"))
    return (command("lxc-attach", "-n", ct, "--", "sh", "-c", 'cat > "$1"', "sh", f"/root/{run}") + " < "
            + shlex.quote(run),
            command("lxc-attach", "-n", ct, "--", "sh", f"/root/{run}", "--no-kernel-module", "--silent"))


def exec_prefix(ct: str, flavor: str) -> str:
    return f"pct exec {ct} --" if flavor == "pve" else f"lxc-attach -n {ct} --"


# ---- group access inside unprivileged containers (LXF201)

# Groups the host gives these nodes (Debian/Proxmox udev rules): the profiles' `groups`.
NODE_GROUPS = devices.NODE_GROUPS


def group_for(path: str) -> str | None:
    for pattern, group in NODE_GROUPS:
        if re.fullmatch(pattern, path):
            return group
    return None


def devn_with_gid(cfg: CtConfig, devn, gid_text: str) -> Edit:
    """An existing devN entry, with gid= set to the container's group."""
    opts = [(k, v) for k, v in devn.options.items() if k != "gid"] + [("gid", gid_text)]
    return Edit("replace", devn.index, ((devn.key, devn_value(devn.path, opts)),))


def devn_line(key: str, path: str, options: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """One devN entry, rendered from the devn template: ("dev2", "/dev/kfd,gid=104")."""
    (line,) = render.render("devn", None, devs=[render.Dev(key, path, tuple(options))])
    return line


def idmap_line(text: str) -> tuple[str, str]:
    return ("lxc.idmap", text)


def subgid_line(host_gid: int | str) -> str:
    """What /etc/subgid needs so root may map the host's group into a container (subgid(5))."""
    return f"root:{host_gid}:1"


def idmap_lines(cfg: CtConfig, gid: int | None, host_gid: int | None) -> tuple[list[int], list[tuple[str, str]]]:
    """The classic idmap split that maps the host's group `host_gid` onto the
    container's gid: (indexes of the `g 0 ...` lines it replaces, new lines).
    A custom idmap replaces Proxmox's default one, so the uid line comes too.
    Unknown ids stay symbolic: C (the container's gid), H (the host's)."""
    base, count = 100000, 65536
    old = []
    for i, ln in cfg.main():
        parts = (ln.value or "").split() if ln.key == "lxc.idmap" else []
        if len(parts) == 4 and parts[:2] == ["g", "0"] and parts[2].isascii() and parts[2].isdigit() \
                and parts[3].isascii() and parts[3].isdigit() and len(parts[2]) < 10 and len(parts[3]) < 10:
            base, count = int(parts[2]), int(parts[3])
            old.append(i)
    has_u = any(ln.key == "lxc.idmap" and (ln.value or "").split()[:1] == ["u"] for _, ln in cfg.main())
    H = str(host_gid) if host_gid is not None else "H"
    if gid is not None:
        maps = [f"g 0 {base} {gid}", f"g {gid} {H} 1", f"g {gid + 1} {base + gid + 1} {count - gid - 1}"]
    else:
        maps = [f"g 0 {base} C", f"g C {H} 1", f"g C+1 {base}+C+1 {count}-C-1"]
    if not has_u:
        maps.insert(0, f"u 0 {base} {count}")
    return old, [("lxc.idmap", m) for m in maps]


__all__ = [
    "ALLOW", "HOST_FIX", "MOUNT_KEY", "UNIT", "V2_KEYS", "allow_edit", "allow_lines", "devn_edit",
    "devn_line", "devn_options", "devn_value", "devn_with_gid", "idmap_line", "subgid_line", "exact_allow", "exec_prefix", "group_for", "idmap_lines",
    "is_devn_key", "modprobe_argv", "mount_dir_edit", "mount_edit", "remove_edit", "replace_edit", "rule_groups",
    "unique", "userspace_commands",
]
