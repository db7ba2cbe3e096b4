"""What makes a Proxmox container's next start fail or change, though its config reads fine.

LXF152 the `hookscript:` snippet does not exist on this host, is not executable, or names
       a storage this host does not have: `pct start` runs it before the container starts
       (pve-guest-common check_hookscript: "script '...' does not exist") and fails.
LXF153 a device-related change waits in `[pve:pending]` (`pct pending`): Proxmox VE 9
       hotplugs new devN entries only; other edits to a running container take effect at
       its next start. The finding says what that start will do.
LXF154 the same, when that start will fail (a pending devN path the host does not have, a
       pending hookscript that is missing).

The pending section is read (ctconfig.section_body, parsed as a config of its own) and
never edited: the fixes are `pct` commands (`pct reboot`, `pct set --revert`).

    check(ctx) -> [Finding("LXF152", "error", "200", "hookscript local:snippets/gpu.sh: script ... does not exist
                            on this host: ...", fix=Fix(..., commands=("pct set 200 --delete hookscript",)))]
"""

from __future__ import annotations

import re
import shlex
import stat

from .. import ctconfig, devices, fixes
from ..effective import parse_devn
from ..model import Edit, Fix

# Pending keys that change the container's devices or whether it starts.
_FEATURE_DEVICES = {"fuse": "/dev/fuse (features: fuse=1)", "mknod": "mknod inside (features: mknod=1)"}


def check(ctx) -> list:
    cfg = ctx.config
    if cfg.flavor != "pve" or (cfg.get("hookscript") is None and not cfg.has_sections):
        return []  # neither a hookscript nor pending changes: most containers
    out = []
    for i, ln in ctx.config.main():
        if ln.key == "hookscript" and ln.value:
            f = hookscript_finding(ctx, ln.value, i)
            if f is not None:
                out.append(f)
    return out + pending(ctx)


# ---------------------------------------------------------------- LXF152

def snippet_problem(ctx, volid: str) -> tuple[str | None, str | None]:
    """(what is wrong with the hookscript `volid` on this host, its path); (None, path) when
    it is fine, (None, None) when this host's files are not known (a snapshot without them)."""
    storages = ctx.facts.storages
    storeid, sep, volname = volid.partition(":")
    if not sep or not storages:
        return (None, None) if not storages else ("is not a storage volume (storage:snippets/NAME)", None)
    st = storages.get(storeid)
    if st is None or st.path is None:
        return f"storage '{storeid}' is not a file storage on this host (see /etc/pve/storage.cfg)", None
    name = volname[len("snippets/"):] if volname.startswith("snippets/") else ""
    if not name or "/" in name:
        return f"'{volid}' is not in the snippets directory", None
    path = f"{st.path}/snippets/{name}"
    files = ctx.facts.snippets.get(storeid)
    if files is None:
        return None, None
    mode = files.get(name)
    if mode is None or not stat.S_ISREG(mode):
        return f"script '{volid}' does not exist on this host ({path})", path
    if not mode & 0o111:
        return f"script '{volid}' is not executable ({path})", path
    return None, path


def snippet_fix(ctx, volid: str, path: str | None, problem: str, index: int | None) -> Fix:
    ours = volid.rpartition("/")[2].startswith("lxcfix")
    if path is not None and "not executable" in problem:
        return Fix("make the snippet executable", commands=(f"chmod 0755 {shlex.quote(path)}",))
    drop = fixes.command("pct", "set", ctx.ct, "--delete", "hookscript")
    if ours and path is not None:
        quoted = shlex.quote(path)
        return Fix("install lxcfix's hook snippet on this host (every node a container may start on)",
                   commands=(f"lxcfix hook --print-snippet > {quoted}", f"chmod 0755 {quoted}",
                             f"{drop}    # or run without the hook"))
    notes = (f"# restore {path} from the host the container came from (a backup or restore does not carry "
             "snippets), or drop the reference:",) if path else ()
    edits = (Edit("remove", index),) if index is not None else ()
    return Fix("restore the snippet, or remove the hookscript reference", edits, "manual", commands=(drop,),
               notes=notes)


def hookscript_finding(ctx, volid: str, index: int):
    problem, path = snippet_problem(ctx, volid)
    if problem is None and path is None:
        return unchecked_finding(ctx, volid, index)
    if problem is None:
        return None
    return ctx.finding(
        "LXF152",
        f"hookscript {volid}: {problem}: `pct start` runs the hookscript before the container "
        f"starts and fails (\"hookscript error for {ctx.ct} on pre-start\"), so CT {ctx.ct} cannot start",
        evidence=(f"{ctx.config.path}:{index + 1}: hookscript: {volid}",
                  "storages here: " + (", ".join(f"{s.id} ({s.path})" for s in ctx.facts.storages.values()
                                                 if s.path) or "none")),
        fix=snippet_fix(ctx, volid, path, problem, index), line=index + 1)


def unchecked_finding(ctx, volid: str, index: int):
    """LXF152 as a warning: the snippets directory of the hookscript's storage could not be read
    (gather.snippet_listing says why), so whether the start fails is not known: said, not passed over."""
    storeid, _, volname = volid.partition(":")
    why = ctx.facts.snippets_unread.get(storeid)
    if why is None:
        return None  # not read because not there (a snapshot without the storage): nothing to say
    st = ctx.facts.storages[storeid]
    path = f"{st.path}/{volname}"
    return ctx.finding(
        "LXF152",
        f"hookscript {volid}: not checked: {why}; `pct start` fails if the script is missing or not executable",
        evidence=(f"{ctx.config.path}:{index + 1}: hookscript: {volid}", f"storage {storeid}: {st.path}"),
        fix=Fix("check it by hand on the host: it must exist and be executable",
                commands=(fixes.command("ls", "-lL", path),)),
        line=index + 1, severity="warning")


# ---------------------------------------------------------------- LXF153 / LXF154

def _device_key(key: str) -> bool:
    return ctconfig.is_devn_key(key) or key in ("features", "hookscript", "console")


def pending_changes(cfg) -> tuple[dict[str, str], set[str]] | None:
    """({key: pending value}, {keys pending deletion}) of the device-related keys of the
    `[pve:pending]` section; None when there is no such section."""
    body = ctconfig.section_body(cfg, "pve:pending")
    if body is None:
        return None
    section = ctconfig.parse(body, "pve", f"{cfg.path} [pve:pending]")
    values: dict[str, str] = {}
    deletes: set[str] = set()
    for key, value in section.items():
        if key == "delete":  # pve-guest-common parse_pending_delete: split on , ; and spaces, `!` forces
            deletes |= {k.lstrip("!") for k in re.split(r"[,;\s]+", value) if k.lstrip("!")}
        elif _device_key(key):
            values[key] = value
    return values, {k for k in deletes if _device_key(k)}


def _features(value: str | None) -> set[str]:
    return {p.split("=", 1)[0] for p in (value or "").split(",") if p.endswith("=1")}


def pending(ctx) -> list:
    found = pending_changes(ctx.config)
    if not found:
        return []
    values, deletes = found
    keys = sorted(set(values) | deletes, key=lambda k: (not ctconfig.is_devn_key(k), k))
    if not keys:
        return []
    last = {ln.key: (i, ln.value) for i, ln in ctx.config.main() if ln.key}
    out = []
    for key in keys:
        effect, fails = _effect(ctx, key, last.get(key, (None, None))[1], values.get(key), key in deletes)
        if effect is None:
            continue
        code = "LXF154" if fails else "LXF153"
        what = f"{key}: {values[key]}" if key in values else f"delete {key}"
        now = last.get(key, (None, None))[1]
        out.append(ctx.finding(
            code,
            f"pending change `{what}` ([pve:pending], `pct pending {ctx.ct}`) takes effect at the next start: "
            + effect,
            evidence=(f"{ctx.config.path} [pve:pending]: {what}",
                      f"running config: {key}: {now}" if now is not None else f"running config: no {key}"),
            fix=Fix("drop it (or make what it needs exist) before the next start", commands=(
                fixes.command("pct", "pending", ctx.ct, comment="every pending change"),
                fixes.command("pct", "set", ctx.ct, "--revert", key, comment="drops this one")))
            if fails else Fix("restart to apply it now, or drop it", commands=(
                fixes.command("pct", "pending", ctx.ct, comment="every pending change"),
                fixes.command("pct", "reboot", ctx.ct, comment="applies the pending changes now"),
                fixes.command("pct", "set", ctx.ct, "--revert", key, comment="or drops this one")))))
    return out


def _effect(ctx, key: str, now: str | None, new: str | None, deleted: bool) -> tuple[str | None, bool]:
    """(what the next start does with this pending change, whether that start fails)."""
    facts = ctx.facts
    if ctconfig.is_devn_key(key):
        old = parse_devn(key, now, 0) if now else None
        if new is None:
            return (f"{old.path} is no longer passed in" if old else None), False
        dev = parse_devn(key, new, 0)
        if dev is None:
            return f"{key} has no device path: pct refuses it", True
        node = devices.resolve(dev.path, facts)
        knowable = facts.nodes_known or devices.lookup(dev.path, facts) is not None
        if node is None and knowable:
            return f"pct fails: \"Device {dev.path} does not exist\" on this host, so CT {ctx.ct} does not start", True
        numbers = f" ({node.kind} {node.major}:{node.minor})" if node else ""
        access = "read-only" if dev.options.get("deny-write") == "1" else "read-write"
        what = (f"{dev.path}{numbers} is passed in instead of {old.path}" if old and old.path != dev.path else
                f"{key} changes to {new}" if old else
                f"{dev.path}{numbers} is passed in, {access} (new devN entries are hotplugged only on "
                "Proxmox VE 9: this one was not)")
        return what, False
    if key == "features":
        before, after = _features(now), _features(None if deleted and new is None else new)
        changes = [("gives the container " if name in after else "takes away ") + text
                   for name, text in _FEATURE_DEVICES.items() if (name in before) != (name in after)]
        return ("; ".join(changes) if changes else None), False
    if key == "hookscript":
        if new is None:
            return (f"{now} no longer runs at start" if now else None), False
        problem, _ = snippet_problem(ctx, new)
        if problem is not None:
            return f"the new hookscript fails: {problem}, so CT {ctx.ct} does not start", True
        return f"{new} runs before every start", False
    if key == "console":
        if (new or "1") == "0" and now != "0":
            return "/dev/console (c 5:1) is denied (console: 0)", False
        if now == "0" and (new or "1") != "0":
            return "/dev/console (c 5:1) is allowed again", False
    return None, False
