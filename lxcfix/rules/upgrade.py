"""What an upgrade of the host's kernel, LXC or Proxmox VE breaks (`lxcfix audit`, through
rules.foresight). Pure: the host's facts and one container in, findings out.

LXF150 a cgroup v1 key (`lxc.cgroup.*`): LXC 7 (upstream 7.0.0, April 2026, lxc/lxc#4671)
       rejects it as "Unsupported config key", so the container does not start; on LXC 5/6
       it was only ignored, and pve-container 6.1.6 warns "this will be a hard error in the
       future". Only `lxc.cgroup.dir*` and `lxc.cgroup.relative` stay (LXC 7's confile.c).
LXF151 on a hybrid cgroup host, what the Proxmox VE 9 upgrade (cgroup v2 only) changes: the
       v1 device rules stop counting, the cgroup2 ones start counting; the container judged
       as it will be then.
LXF156 a device the container is given needs a module built outside the kernel tree (nvidia
       via DKMS or NVIDIA's installer, gasket/apex for Coral, any driver /proc/modules marks
       out of tree) that the target kernel does not have: after the reboot the node is gone.
LXF157 the same question, when the target kernel is not installed yet (so it cannot be
       checked): what must happen before the reboot.

    kernel_target(facts, None)  -> ("6.8.14-1-pve", "the newest installed kernel that is not the running one")
    kernel_modules(ctx, occasion) -> [Finding("LXF156", "error", "200", "after the reboot into 6.8.14-1-pve,
        /dev/nvidia0, /dev/nvidiactl are gone: nvidia (DKMS nvidia/580.159.04) is not built for it ...",
        fix=Fix(..., commands=("dkms autoinstall -k 6.8.14-1-pve", ...)))]
"""

from __future__ import annotations

import re
from dataclasses import replace

from .. import devices
from ..facts import module_name
from ..model import Edit, Fix

# lxc.cgroup.* keys LXC 7 still takes (confile.c's table): everything else under lxc.cgroup. is v1.
V1_KEPT = frozenset({"lxc.cgroup.dir", "lxc.cgroup.dir.container", "lxc.cgroup.dir.container.inner",
                     "lxc.cgroup.dir.monitor", "lxc.cgroup.dir.monitor.pivot", "lxc.cgroup.relative"})
# v1 controller files with a cgroup v2 file of the same meaning.
V2_SAME = {"cpuset.cpus": "cpuset.cpus", "cpuset.mems": "cpuset.mems", "devices.allow": "devices.allow",
           "devices.deny": "devices.deny", "memory.limit_in_bytes": "memory.max",
           "memory.soft_limit_in_bytes": "memory.low", "pids.max": "pids.max"}


def is_v1_key(key: str | None) -> bool:
    return bool(key) and (key == "lxc.cgroup" or key.startswith("lxc.cgroup.")) and key not in V1_KEPT


# ---------------------------------------------------------------- LXF150

def v1_keys(ctx, occasion) -> list:
    """Every cgroup v1 key of the container's own config, with its migration."""
    out = []
    v2_lines = {(k, v.strip()) for k, v in ctx.config.items() if k.startswith("lxc.cgroup2.")}
    will = occasion.for_ == "lxc-upgrade"
    for i, ln in ctx.config.main():
        if not is_v1_key(ln.key):
            continue
        sub = ln.key[len("lxc.cgroup."):]
        twin = ("lxc.cgroup2." + sub, (ln.value or "").strip())
        where = f"{ctx.config.path}:{i + 1}: {ln.text.strip()}"
        if will:
            why = (f"{ln.key} is a cgroup v1 key: LXC 7 (upstream 7.0.0) rejects it as \"Unsupported config key\" "
                   "and the container does not start (on LXC 5/6 the line was only ignored)")
        else:
            why = (f"{ln.key} is a cgroup v1 key: Proxmox VE 9 has no cgroup v1, pve-container 6.1.6 warns \"this "
                   "will be a hard error in the future\", and LXC 7 (upstream 7.0.0) rejects it: once it arrives, "
                   "the container does not start")
        if twin in v2_lines:
            fix = Fix("remove the v1 line: its cgroup v2 twin is already there", (Edit("remove", i),), "manual")
        elif sub in V2_SAME and ln.value:
            v2 = "lxc.cgroup2." + V2_SAME[sub]
            notes = ()
            if sub.startswith("devices.") and ctx.config.flavor == "pve":
                notes = (f"# or pass the device in as a devN entry: lxcfix plan --ct {ctx.ct} --style devn",)
            if sub.startswith("memory.") and not ln.value.strip().isdigit():
                notes += ("# cgroup v2 takes a number of bytes or `max`",)
            fix = Fix(f"use {v2}", (Edit("replace", i, ((v2, ln.value),)),), "manual", notes=notes)
        else:
            fix = Fix("remove it, or set its cgroup v2 equivalent by hand", (Edit("remove", i),), "manual",
                      notes=(f"# {sub} has no cgroup v2 file of the same meaning: see the kernel's "
                             "cgroup-v2.rst for the v2 controller",))
        out.append(ctx.finding("LXF150", why, evidence=(where,), fix=fix, line=i + 1))
    return out


# ---------------------------------------------------------------- LXF151

def cgroup_v2_view(ctx, occasion) -> list:
    """A host on a hybrid or v1 layout now: after the Proxmox VE 9 upgrade (cgroup v2 only)
    LXC enforces the cgroup2 device rules and ignores the v1 ones."""
    if ctx.facts.cgroup_layout not in ("hybrid", "v1"):
        return []
    from . import allowlist, hygiene

    then = replace(ctx, facts=replace(ctx.facts, cgroup_layout="v2"))
    found = allowlist.check(then) + [f for f in hygiene.check(then) if f.code == "LXF102"]
    # The fix is the one a plan will make once the host runs cgroup v2; today's plan (this
    # layout) makes nothing, so here it is the admin's ("manual"): `lxcfix apply` would not do it.
    return [ctx.finding(
        "LXF151",
        f"after the upgrade to Proxmox VE 9 (cgroup v2 only; this host runs {ctx.facts.cgroup_layout} now) LXC "
        f"enforces lxc.cgroup2.devices.* and ignores lxc.cgroup.devices.*: {f.message} ({f.code} then)",
        device=f.device, evidence=f.evidence, fix=_after_upgrade(ctx, f.fix), line=f.line) for f in found]


def _after_upgrade(ctx, fix):
    if fix is None or not fix.applies:
        return fix
    return fix._replace(applicability="manual", notes=fix.notes + (
        f"# lxcfix plan --ct {ctx.ct} makes this change once the host runs cgroup v2 (after the upgrade); "
        "before it, by hand",))


# ---------------------------------------------------------------- LXF156 / LXF157

def kernel_key(version: str) -> tuple:
    """Sort key for kernel releases: 6.8.12-4-pve < 6.8.14-1-pve < 6.11.0-1-pve."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.findall(r"[0-9]{1,9}|[A-Za-z]+", version))


def kernel_target(facts, asked: str | None) -> tuple[str | None, str]:
    """(the kernel the next boot runs, why that one)."""
    if asked:
        return asked, "asked for with --to-kernel"
    others = sorted((v for v in facts.kernels if v != facts.kernel), key=kernel_key)
    if not others:
        return None, "no kernel other than the running one is installed"
    newest = others[-1]
    if facts.kernel and kernel_key(newest) < kernel_key(facts.kernel):
        return newest, "the only other installed kernel (older than the running one)"
    return newest, "the newest installed kernel that is not the running one"


# Modules a catalog device needs, beyond the driver sysfs names for it: the profiles' `modules`.
PROFILE_MODULES = {p.name: p.modules for p in devices.CATALOG if p.modules}


def needed_modules(g, facts) -> list[str]:
    """The kernel modules the node `g` exists through (its driver and what that needs)."""
    names: list[str] = []
    spec = devices.node_spec(g.path)
    if spec is not None:
        names += spec[1].modules  # /dev/nvidia-modeset: nvidia_modeset
    names += PROFILE_MODULES.get(g.profile or "", ())
    if g.node is not None:
        driver = facts.device_drivers.get(f"{g.node.kind} {g.node.major}:{g.node.minor}")
        profile = devices.PROFILES.get(g.profile or "")
        extra = dict(profile.driver_modules).get(driver or "") if profile is not None else None
        if extra:
            names += extra  # NVIDIA's card nodes: nvidia_drm
        elif driver:
            names.append(driver)
    # what a needed module needs: /proc/modules lists, for each module, those that use it
    todo, seen = list(dict.fromkeys(names)), []
    while todo:
        m = module_name(todo.pop(0))
        if m in seen:
            continue
        seen.append(m)
        todo += [n for n, lm in facts.modules.items() if m in lm.used_by and n not in seen]
    return seen


def out_of_tree(m: str, facts) -> bool:
    """Built outside the kernel tree: /proc/modules' taint O, DKMS's, or installed where out-of-tree
    modules go in the running kernel's tree."""
    if m in facts.modules and facts.modules[m].out_of_tree:
        return True
    if any(d.module == m for d in facts.dkms):
        return True
    running = facts.kernels.get(facts.kernel or "")
    path = (running.modules.get(m) if running is not None else None) or ""
    return path.startswith(("updates/", "extra/", "misc/", "kernel/drivers/video/nvidia"))


def _dkms_of(m: str, facts):
    """The DKMS module/version that builds `m` (newest first), or None."""
    mine = [d for d in facts.dkms if d.module == m]
    profile = devices.module_profile(m)
    if not mine and profile is not None and profile.dkms:
        mine = [d for d in facts.dkms if d.module in profile.dkms]  # one DKMS package builds all of them
    return sorted(mine, key=lambda d: kernel_key(d.version))[-1] if mine else None


def built_for(m: str, kernel: str, facts) -> bool | None:
    """Is `m` there for `kernel`? None: the tree cannot tell (not installed, or only partly read)."""
    tree = facts.kernels.get(kernel)
    if tree is not None and m in tree.modules:
        return True
    d = _dkms_of(m, facts)
    if d is not None and any((x.module, x.kernel, x.state) == (d.module, kernel, "installed") for x in facts.dkms):
        return True
    if tree is None:
        return None
    return False if tree.complete or tree.modules or d is not None else None


def headers_package(kernel: str, backend: str) -> str:
    return f"proxmox-headers-{kernel}" if backend == "pve" else f"linux-headers-{kernel}"


def rebuild_commands(m: str, kernel: str, facts) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(notes, commands) that put module `m` into `kernel`'s tree."""
    tree = facts.kernels.get(kernel)
    cmds: list[str] = []
    notes: list[str] = []
    d = _dkms_of(m, facts)
    if tree is None and d is not None:
        meta = "proxmox-default-headers" if facts.backend == "pve" else "linux-headers-amd64"
        cmds.append(f"apt install {meta}    # before the new kernel: DKMS then builds its modules when it is installed")
        notes.append(f"# after installing {kernel}, and before rebooting into it:")
    elif tree is not None and tree.headers is False:
        cmds.append(f"apt install {headers_package(kernel, facts.backend)}    # the module is built against them")
    if d is not None:
        cmds += [f"dkms autoinstall -k {kernel}    # builds {d.module}/{d.version} (and every DKMS module) for it",
                 f"dkms status -k {kernel}    # {d.module}/{d.version}, {kernel}: installed"]
        if facts.backend == "pve" and tree is not None:
            notes.append("# keep proxmox-default-headers installed: new kernels then get their DKMS modules "
                         "built when they are installed")
    elif m.startswith("nvidia") and facts.nvidia_driver:
        run = f"NVIDIA-Linux-x86_64-{facts.nvidia_driver}.run"
        cmds.append(f"sh {run} --kernel-name={kernel} --kernel-module-only --silent    # NVIDIA's installer, "
                    "not DKMS: it builds for one kernel only")
        notes.append("# or install the driver with DKMS (the installer's --dkms), so every new kernel gets it")
    else:
        cmds += [f"# build {m} from its source for {kernel} (its make install, or a DKMS package)",
                 f"depmod -a {kernel}"]
    return tuple(notes), tuple(cmds)


def kernel_modules(ctx, occasion) -> list:
    """Devices of this container that vanish when the host boots another kernel."""
    facts = ctx.facts
    target, why = kernel_target(facts, occasion.to_kernel)
    needs: dict[str, list] = {}
    for g in ctx.effective.given:
        for m in needed_modules(g, facts):
            if out_of_tree(m, facts) or (not facts.modules_known and m in PROFILE_MODULES.get(g.profile or "", ())):
                needs.setdefault(m, []).append(g)
    if not needs:
        return []
    out = []
    event = occasion.event
    for ms, given in _by_source(needs, facts):
        m = ms[0]
        names = ", ".join(ms)
        paths = list(dict.fromkeys(g.path for g in given))
        start = _without(given)
        d = _dkms_of(m, facts)
        source = f"DKMS {d.module}/{d.version}" if d else ("NVIDIA's installer" if m.startswith("nvidia") else
                                                            "built outside the kernel tree")
        if target is None or any(built_for(x, target, facts) is None for x in ms):
            when = (f"{target} is not installed here yet" if target else
                    "the new kernel is not installed yet" + (" (Proxmox VE 9 boots a newer one)"
                                                             if occasion.for_ == "pve-upgrade" else ""))
            notes, cmds = rebuild_commands(m, target or "<new kernel>", facts)
            out.append(ctx.finding(
                "LXF157",
                f"{', '.join(paths)} need{'s' if len(paths) == 1 else ''} {names} ({source}), built for each "
                f"kernel; {when}, so whether it will be there cannot be checked: if it is not built for the kernel "
                f"the {event} boots, {start}",
                device=paths[0], evidence=(f"target kernel: {target or 'unknown'} ({why})",
                                           f"running kernel: {facts.kernel or 'unknown'}"),
                fix=Fix(f"make sure {names} {'is' if len(ms) == 1 else 'are'} built for the new kernel before the "
                        "reboot", notes=notes, commands=cmds)))
            continue
        missing = [x for x in ms if not built_for(x, target, facts)]
        if not missing:
            continue
        names = ", ".join(missing)
        notes, cmds = rebuild_commands(missing[0], target, facts)
        running = facts.kernels.get(facts.kernel or "")
        now = [f"{running.modules[x]}" for x in missing if running is not None and x in running.modules]
        now_text = f" (now: {', '.join(now)} in {facts.kernel})" if now else ""
        out.append(ctx.finding(
            "LXF156",
            f"after the {event} into {target}, {', '.join(paths)} {'is' if len(paths) == 1 else 'are'} gone: "
            f"{names} ({source}) {'is' if len(missing) == 1 else 'are'} not built for {target}{now_text}; {start}",
            device=paths[0],
            evidence=(f"target kernel: {target} ({why})", f"running kernel: {facts.kernel or 'unknown'}",
                      f"/lib/modules/{target}: no {names}" + (" (modules.dep)" if facts.kernels[target].complete
                                                              else "")),
            fix=Fix(f"build {names} for {target} before the reboot", notes=notes, commands=cmds)))
    return out


def _by_source(needs: dict, facts) -> list[tuple[list[str], list]]:
    """The needed modules grouped by what builds them (one DKMS package, NVIDIA's installer,
    each other module alone), with the nodes that need any of them."""
    groups: dict[str, tuple[list[str], list]] = {}
    for m, given in needs.items():
        d = _dkms_of(m, facts)
        key = f"dkms:{d.module}" if d else ("nvidia" if m.startswith("nvidia") else m)
        names, nodes = groups.setdefault(key, ([], []))
        names.append(m)
        nodes += [g for g in given if g not in nodes]
    return list(groups.values())


def _without(given) -> str:
    """What a start does when these nodes are missing."""
    if any(g.via == "devn" for g in given):
        return "the container does not start (devN: \"Device ... does not exist\")"
    if any(not g.optional and g.from_dir is None for g in given):
        return "LXC refuses to start the container (a bind mount without 'optional')"
    return "the container starts without them"


__all__ = ["V1_KEPT", "cgroup_v2_view", "is_v1_key", "kernel_key", "kernel_modules", "kernel_target",
           "needed_modules", "out_of_tree", "v1_keys"]
