"""Static checks from the container's own rootfs (lxcfix.rootfs; read by observe.read_rootfs,
never following a symlink out of the root): the NVIDIA Container Toolkit's config.toml (LXF230
no-cgroups, LXF231 mode), the CDI spec's driver version against the host's (LXF232, and what a
driver upgrade does to it), Docker's daemon.json runtimes (LXF233), the Proxmox `features:` a
container engine needs (LXF234, the one fix the plan makes here), the render/video gid of the
container's own /etc/group against the host node's (LXF235), a runc with the CVE-2025-52881 fix
under a host lxc-pve that predates 6.0.5-2 (LXF237, from the container's package database), and
a rootfs that could not be read (LXF236: a stopped Proxmox container's storage is not mounted;
said, not guessed)."""

from __future__ import annotations

from .. import rootfs as rf
from ..bounded import excerpt
from ..fixes import command, group_for, plan_command
from ..model import Edit, Fix

NESTED_NOTE = ("Only root@pam may set keyctl (`pct set CT --features keyctl=1` as another user is refused: "
               "'changing feature flags (except nesting) is only allowed for root@pam'); lxcfix edits the file as root.")


def check(ctx) -> list:
    seen = ctx.rootfs
    if seen is None:
        return []
    if seen.state != "read":
        return [ctx.finding("LXF236", f"CT {ctx.ct}: its own files were not read: {excerpt(seen.why, 200)}",
                            evidence=("the static checks of the container's files (NVIDIA toolkit, CDI spec, "
                                      "daemon.json, features, /etc/group) were skipped",))]
    out = []
    out += _toolkit(ctx, seen)
    out += _cdi(ctx, seen)
    out += _daemon(ctx, seen)
    out += _features(ctx, seen)
    out += _gids(ctx, seen)
    out += _runc(ctx, seen)
    unread = [f"{p}: {why}" for p, why in sorted(seen.errors.items())]
    if unread:
        out.append(ctx.finding("LXF236", f"CT {ctx.ct}: {len(unread)} of its files could not be read",
                               severity="info", evidence=tuple(unread[:8])))
    return out


def _toolkit(ctx, seen) -> list:
    data = seen.text(rf.TOOLKIT)
    if data is None:
        return []
    toml = rf.toolkit_config(data)
    out = []
    bad = tuple(f"{rf.TOOLKIT} {b}: not a line lxcfix reads" for b in toml.bad)
    if toml.values.get(("nvidia-container-cli", "no-cgroups")) is not True:
        was = toml.values.get(("nvidia-container-cli", "no-cgroups"))
        lines = ("[nvidia-container-cli]", "no-cgroups = true")
        out.append(ctx.finding(
            "LXF230", f"CT {ctx.ct}: the NVIDIA Container Toolkit sets up device cgroups itself "
            f"(no-cgroups = {str(was).lower() if was is not None else 'unset (false)'}): inside an LXC container "
            "it cannot attach its device program", evidence=(
                f"{rf.TOOLKIT}: [nvidia-container-cli] no-cgroups is "
                f"{'unset' if was is None else excerpt(str(was), 40)}",
                "inside a container, nvidia-container-cli fails with 'bpf_prog_query(BPF_CGROUP_DEVICE) failed: "
                "operation not permitted' (libnvidia-container#154, frigate#8652)", *bad),
            fix=Fix(f"in the container's {rf.TOOLKIT}: " + " / ".join(lines) + "; then give the inner container "
                    "every node itself (--device /dev/nvidia0 --device /dev/nvidiactl --device /dev/nvidia-uvm "
                    "--device /dev/nvidia-uvm-tools, or CDI)", notes=lines)))
    mode = toml.values.get(("nvidia-container-runtime", "mode"))
    specs = [p for p in rf.CDI_SPECS if p in seen.files]
    if mode == "cdi" and not specs:
        out.append(ctx.finding(
            "LXF231", f"CT {ctx.ct}: the NVIDIA runtime is in CDI mode but the container has no CDI spec",
            evidence=(f"{rf.TOOLKIT}: [nvidia-container-runtime] mode = \"cdi\"",
                      f"none of {', '.join(rf.CDI_SPECS)} exists in the container",
                      "an inner container asking for a GPU fails to start (nvidia-container-toolkit#1456)"),
            fix=Fix("in the container: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (or mode = \"legacy\")",
                    commands=("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",))))
    elif isinstance(mode, str) and mode not in ("auto", "legacy", "cdi", "csv"):
        out.append(ctx.finding(
            "LXF231", f"CT {ctx.ct}: the NVIDIA runtime's mode {excerpt(mode, 40)!r} is not one it knows",
            evidence=(f"{rf.TOOLKIT}: [nvidia-container-runtime] mode = {excerpt(mode, 40)!r}",
                      "the toolkit knows auto, legacy, cdi and csv"),
            fix=Fix(f"in the container's {rf.TOOLKIT}: [nvidia-container-runtime] mode = \"auto\"")))
    return out


def _cdi(ctx, seen) -> list:
    host = (ctx.facts.nvidia_driver or "").strip()
    out = []
    for path in rf.CDI_SPECS:
        data = seen.text(path)
        if data is None:
            continue
        versions = rf.cdi_versions(data)
        if not versions:
            continue
        regen = Fix(f"in the container, after its userspace driver matches the host's: nvidia-ctk cdi generate "
                    f"--output={path}", commands=(command("nvidia-ctk", "cdi", "generate", f"--output={path}"),))
        if host and host not in versions:
            out.append(ctx.finding(
                "LXF232", f"CT {ctx.ct}: the CDI spec {path} was generated for driver {', '.join(sorted(versions))}, "
                f"the host runs {host}: an inner container given the GPU through it gets libraries that are not there",
                device=None, evidence=(f"{path}: libraries of {', '.join(sorted(versions))}",
                                       f"host: /proc/driver/nvidia/version says {host}"), fix=regen))
        elif host:
            out.append(ctx.finding(
                "LXF232", f"CT {ctx.ct}: the CDI spec {path} names driver {host}, the host's: the next driver "
                "upgrade makes it stale", severity="info",
                evidence=(f"{path}: libraries of {host}",), fix=regen))
    return out


def _daemon(ctx, seen) -> list:
    data = seen.text(rf.DAEMON)
    if data is None:
        return []
    d = rf.daemon_runtimes(data)
    if d.error:
        return [ctx.finding("LXF233", f"CT {ctx.ct}: Docker's {rf.DAEMON} cannot be read: {d.error}: dockerd "
                                      "refuses to start with it", evidence=(f"{rf.DAEMON}: {d.error}",),
                            fix=Fix(f"correct {rf.DAEMON} in the container (it must be one JSON object)"))]
    out = []
    for name, path in d.runtimes.items():
        where = rf.runtime_paths(path)
        if where and not any(p in seen.present for p in where):
            out.append(ctx.finding(
                "LXF233", f"CT {ctx.ct}: Docker's runtime {excerpt(name, 64)!r} is {excerpt(path, 120)}, which is not "
                "installed in the container", evidence=(f"{rf.DAEMON}: runtimes.{excerpt(name, 64)}.path = "
                                                          f"{excerpt(path, 120)}", f"looked for: {', '.join(where[:3])}"),
                fix=Fix(f"install the runtime in the container (nvidia-container-toolkit for "
                        f"nvidia-container-runtime) or remove it from {rf.DAEMON}")))
    if d.default and d.default not in ("runc", "io.containerd.runc.v2") and d.default not in d.runtimes:
        out.append(ctx.finding(
            "LXF233", f"CT {ctx.ct}: Docker's default-runtime {excerpt(d.default, 64)!r} is not one of its runtimes",
            evidence=(f"{rf.DAEMON}: default-runtime = {excerpt(d.default, 64)}",),
            fix=Fix(f"add it under \"runtimes\" in {rf.DAEMON}, or remove default-runtime")))
    return out


def _features(ctx, seen) -> list:
    if ctx.config.flavor != "pve":
        return []
    engines = sorted(p for p in rf.ENGINES if p in seen.present)
    if not engines:
        return []
    index, value = None, None
    for i, line in ctx.config.main():
        if line.key == "features":
            index, value = i, line.value
    have = rf.features(value)
    unprivileged = (ctx.config.get("unprivileged") or "").strip() == "1"
    need = {}
    if have.get("nesting") != "1":
        need["nesting"] = "1"
    if unprivileged and have.get("keyctl") != "1":
        need["keyctl"] = "1"
    if not need:
        return []
    new = rf.features_value(have, need)
    edit = Edit("replace", index, (("features", new),)) if index is not None else Edit("add", lines=(("features", new),))
    return [ctx.finding(
        "LXF234", f"CT {ctx.ct} has a container engine ({', '.join(engines)}) but its features lack "
        f"{', '.join(f'{k}=1' for k in need)}", evidence=(
            f"features: {excerpt(value, 120) if value is not None else '(none)'}",
            "Docker and Podman need nesting=1 (mounting proc and sys for their containers), an unprivileged "
            "container also keyctl=1"),
        fix=Fix(f"features: {new}, then restart the container (run: {plan_command(ctx.ct)})", (edit,),
                "needs-restart", notes=(NESTED_NOTE,) if "keyctl" in need else ()))]


def _gids(ctx, seen) -> list:
    """A stopped container's own render/video gid (a running one's is the probe's, rules.access)."""
    if ctx.probe is not None:
        return []
    own = rf.groups(seen.text(rf.GROUP) or b"")
    out = []
    for g in ctx.effective.given:
        path = "/" + g.target.lstrip("/")
        group = group_for(path)
        node = ctx.facts.nodes.get(g.path)
        if group is None or node is None or group not in own or own[group] == node.gid:
            continue
        out.append(ctx.finding(
            "LXF235", f"CT {ctx.ct}: its {group} group is gid {own[group]} (its /etc/group), the host's {g.path} "
            f"is group {node.gid}: the container's {group} members do not get the node's group access",
            device=path, evidence=(f"{rf.GROUP} in the container: {group}:x:{own[group]}",
                                   f"host: {g.path} gid {node.gid}"),
            fix=Fix(f"give the node the container's gid: devN: {g.path},gid={own[group]} (Proxmox), or map the "
                    f"host group in ({plan_command(ctx.ct)} uses gid {own[group]})")))
    return out


LXC_PVE_FIXED = "6.0.5-2"  # the lxc-pve whose AppArmor handling lets runc's CVE-2025-52881 fix work
UPGRADE = ("apt-get update", "apt-get install --only-upgrade lxc-pve")


def _runc(ctx, seen) -> list:
    """A runc with the CVE-2025-52881 fix under a host lxc-pve before 6.0.5-2: every inner
    container start fails ("reopen fd 8: permission denied", runc#4968). The container's runc
    comes from its package database (nothing of it is run); the host's lxc-pve from pveversion."""
    host = ctx.facts.lxc_pve
    if ctx.facts.backend != "pve" or not host or rf.dpkg_compare(host, LXC_PVE_FIXED) >= 0 or not seen.packages:
        return []
    verdicts = {pkg: rf.runc_has_52881_fix(pkg, ver) for pkg, ver in sorted(seen.packages.items())}
    if not any(v is not False for v in verdicts.values()):
        return []  # only a runc from before the fix: it works under this lxc-pve
    fixed = [pkg for pkg, v in verdicts.items() if v]
    which = ", ".join(f"{excerpt(pkg, 40)} {excerpt(seen.packages[pkg], 64)}"
                      for pkg in (fixed or [p for p, v in verdicts.items() if v is None]))
    profile = (ctx.config.get("lxc.apparmor.profile") or "").strip()
    commands = (*UPGRADE, f"pct reboot {ctx.ct}")
    pin = ("second choice, until the host is upgraded: inside the container, install a runc from before the fix "
           "and hold it (apt-cache policy runc containerd.io lists the versions; e.g. apt-get install "
           "containerd.io=1.7.28-1~... && apt-mark hold containerd.io); it lacks the Nov 2025 runc security fixes")
    never = "not lxc.apparmor.profile: unconfined: that throws the container's confinement away"
    evidence = (f"the container's package database: {which}",
                f"host: lxc-pve {excerpt(host, 64)} (pveversion -v); the fix needs lxc-pve {LXC_PVE_FIXED} or later",
                "runc has the fix from 1.2.8, 1.3.3 and 1.4.0-rc.3 (runc#4968, moby#51405, containerd#12484)")
    title = (f"upgrade the host's lxc-pve to {LXC_PVE_FIXED} or later ({' && '.join(UPGRADE)}), then restart "
             f"the container (pct reboot {ctx.ct})")
    if profile == "unconfined" and fixed:
        return [ctx.finding(
            "LXF237", f"CT {ctx.ct} runs unconfined (lxc.apparmor.profile: unconfined), the workaround for its runc "
            f"({which}) under the host's lxc-pve {excerpt(host, 64)}: its confinement is gone", severity="warning",
            evidence=evidence, fix=Fix(title + "; then remove lxc.apparmor.profile: unconfined from its config",
                                       commands=commands, notes=(pin,)))]
    if fixed:
        return [ctx.finding(
            "LXF237", f"CT {ctx.ct}: its runc ({which}) has the CVE-2025-52881 fix and the host's lxc-pve "
            f"{excerpt(host, 64)} predates {LXC_PVE_FIXED}: every docker run in it fails with "
            "'reopen fd 8: permission denied'", evidence=evidence,
            fix=Fix(title, commands=commands, notes=(pin, never)))]
    return [ctx.finding(
        "LXF237", f"CT {ctx.ct}: which runc its {which} carries is not known, and the host's lxc-pve "
        f"{excerpt(host, 64)} predates {LXC_PVE_FIXED}: if docker run fails there with 'reopen fd 8: permission "
        "denied', this is why", severity="info", evidence=evidence,
        fix=Fix(title, commands=commands, notes=(never,)))]
