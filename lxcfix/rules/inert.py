"""Device rule lines that do nothing, and what LXC really does with them (LXF140-LXF146).

LXC keeps one list: the bare `a` sets the mode and empties it, an empty value
empties it, a rule equal to a listed one (type, major, minor, access as
written) flips or reuses it, and only rules of the mode's polarity are
compiled (measured on LXC 5.0.2 and 6.0.4: same code, byte-identical
programs). devices.replay_outcomes replays the container's lines through
LXC's own list (devices.LxcDeviceList) and says what became of each; this
module turns the container's own lines that came to nothing into findings.

    check(ctx) -> [Finding("LXF140", "error", "200", "lxc.cgroup2.devices.deny: c 195:3 rwm does nothing: ...
                            c 195:3 stays allowed by c 195:* rwm (200.conf:14)", line=15,
                            fix=Fix("narrow the allow rule so it leaves c 195:3 out", edits=(...)))]

LXF140 a deny line in allowlist mode that no allow line equals: the device stays allowed
LXF141 the same, but nothing allows the device anyway: a redundant line
LXF142 an allow line in denylist mode (unprivileged Proxmox containers): everything is allowed anyway
LXF143 a rule emptied out by a later `a` or empty value
LXF144 an exact duplicate of an earlier rule
LXF145 a path-form rule whose path is not a device node on this host: LXC skips it at start
LXF146 `deny a` or an empty value in the container's config: LXC's default allowlist is gone
       (or, with no rule left after it, no device program is attached: everything is allowed)

Every fix here changes what a container may open, so all are shown, never applied for the admin.
"""

from __future__ import annotations

import posixpath

from .. import devices, fixes
from ..bounded import excerpt
from ..model import DeviceRule, Edit, Fix

ALLOW, DENY = "lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"

# What common.conf's allowlist gives every container, by name.
DEFAULT_NAMES = {
    ("c", 1, 3): "/dev/null", ("c", 1, 5): "/dev/zero", ("c", 1, 7): "/dev/full", ("c", 1, 8): "/dev/random",
    ("c", 1, 9): "/dev/urandom", ("c", 5, 0): "/dev/tty", ("c", 5, 1): "/dev/console", ("c", 5, 2): "/dev/ptmx",
    ("c", 136, None): "/dev/pts/*", ("c", 10, 229): "/dev/fuse", ("c", 10, 200): "/dev/net/tun",
}
# A rule repeated many times (a config with 400,000 copies of one line) is one LXF144 finding
# with a count: its message names at most FOLD_SHOWN of the lines, its fix removes at most
# FOLD_EDITS of them (a manual fix: shown, never applied), so what a scan keeps and prints
# stays bounded whatever the config holds.
FOLD_SHOWN = 10
FOLD_EDITS = 1000

# /dev subtrees a walk of /dev does not list (gather), so a path there cannot be judged.
_UNWALKED = ("/dev/pts/", "/dev/shm/", "/dev/mqueue/", "/dev/hugepages/")


def check(ctx) -> list:
    eff = ctx.effective
    if ctx.facts.cgroup_layout in ("hybrid", "v1"):
        return []  # LXC ignores every cgroup2 line there (LXF300)
    lines = eff.rule_lines
    if eff.shared >= len(lines):
        return []  # no rule lines of its own (`shared` is where they start): most containers of a fleet
    mine = f"{posixpath.basename(ctx.config.path) or 'config'}:"

    def resolve(path: str):
        node = devices.resolve(path, ctx.facts)
        return (node.kind, node.major, node.minor) if node else None

    dl, outcomes = devices.replay_outcomes(lines, resolve, eff.shared)
    return _Judge(ctx, mine, dl, outcomes).findings()


def _index(origin: str) -> int:
    return int(origin.rsplit(":", 1)[1]) - 1


def _rule(e) -> DeviceRule:
    return e.rule()


def _overlap(a: DeviceRule, b: DeviceRule) -> str:
    """The access letters both rules match on some device ("" when they never meet)."""
    if a.kind != "a" and b.kind != "a" and a.kind != b.kind:
        return ""
    if a.major is not None and b.major is not None and a.major != b.major:
        return ""
    if a.minor is not None and b.minor is not None and a.minor != b.minor:
        return ""
    return "".join(c for c in "rwm" if c in a.access and c in b.access)


def _dev(rule: DeviceRule) -> str:
    major = "*" if rule.major is None else rule.major
    minor = "*" if rule.minor is None else rule.minor
    return f"{rule.kind} {major}:{minor}"


class _Judge:
    def __init__(self, ctx, mine: str, dl, outcomes):
        self.ctx, self.mine, self.dl, self.outcomes = ctx, mine, dl, outcomes
        self.eff = ctx.effective
        self.final = {id(e) for e in dl.entries}
        self.own = {r.index: r for r in self.eff.own_rules}
        # Which of the container's own lines made or touched each list entry, and which
        # line later emptied the list under them.
        self.by_entry: dict[int, list[int]] = {}
        self.shadowed: dict[int, int] = {}
        at = {o.origin: i for i, o in enumerate(outcomes)}
        for i, o in enumerate(outcomes):
            if o.status in ("added", "switched", "reused") and o.entry is not None and self.is_own(o):
                self.by_entry.setdefault(id(o.entry), []).append(i)
            if o.status == "mode":
                for e, _ in o.dropped:
                    for j in self.by_entry.pop(id(e), []):
                        self.shadowed[j] = i
            if o.status == "removed" and o.by in at:
                self.shadowed[i] = at[o.by]

    def wrong_polarity(self, o) -> bool:
        """A deny in allowlist mode, an allow in denylist mode: LXC does not compile it."""
        return (o.verb == "allow") != (self.dl.mode == "allowlist")

    def is_own(self, o) -> bool:
        return o.origin.startswith(self.mine)

    def text(self, o) -> str:
        return self.ctx.config.lines[_index(o.origin)].text.strip()

    def where(self, o) -> str:
        return f"{self.ctx.config.path}:{_index(o.origin) + 1}: {self.text(o)}"

    def finding(self, code, o, message, evidence=(), fix=None):
        return self.ctx.finding(code, message, evidence=(self.where(o), *evidence), fix=fix,
                                line=_index(o.origin) + 1)

    def findings(self) -> list:
        out: list = []
        dups: dict[int, list] = {}  # id(entry) -> [first outcome, count, line indexes (at most FOLD_EDITS)]
        for i, o in enumerate(self.outcomes):
            if not self.is_own(o):
                continue
            if i in self.shadowed:
                out.append(self.cleared_later(o, self.outcomes[self.shadowed[i]]))
            elif o.status == "added" and id(o.entry) in self.final and self.wrong_polarity(o):
                out.append(self.inert_deny(o) if o.verb == "deny" else self.inert_allow(i, o))
            elif o.status == "reused" and id(o.entry) in self.final:
                group = dups.get(id(o.entry))
                if group is None:
                    group = dups[id(o.entry)] = [o, 0, []]
                    out.append(group)  # its place in the order; made into a finding below
                group[1] += 1
                if len(group[2]) < FOLD_EDITS:
                    group[2].append(_index(o.origin))
            elif o.status == "rejected" and o.verb == "allow" and o.value.strip().startswith("/"):
                f = self.missing_path(o)
                if f is not None:
                    out.append(f)
            if o.status == "cleared" or (o.status == "mode" and o.verb == "deny"):
                f = self.defaults_dropped(o)
                if f is not None:
                    out.append(f)
        return [self.duplicate(*f) if isinstance(f, list) else f for f in out]

    # ---- LXF140 / LXF141: a deny in allowlist mode

    def inert_deny(self, o):
        d = _rule(o.entry)
        shown = f"{DENY}: {o.value.strip()}"
        allowing = [sr for sr in self.eff.ruleset.rules if sr.rule.allow and set(_overlap(d, sr.rule)) & set("rw")]
        how = ("in allowlist mode LXC compiles only allow rules, and a deny line counts only when it equals an "
               "allow line before it (same type, numbers and access, as written)")
        if not allowing:
            return self.finding(
                "LXF141", o,
                f"{shown} does nothing: {how}; nothing here allows {_dev(d)} anyway, so it stays denied",
                fix=Fix("remove the line: the default already denies it", (Edit("remove", _index(o.origin)),)))
        by = ", ".join(f"{sr.rule.text(listing=True)} ({sr.origin})" for sr in allowing)
        return self.finding(
            "LXF140", o,
            f"{shown} does nothing: {how}. {_dev(d)} stays allowed by {by}: open() of it inside succeeds",
            evidence=(f"compiled rules that allow it: {by}",),
            fix=self.narrow_fix(o, d, allowing))

    def narrow_fix(self, o, d: DeviceRule, allowing) -> Fix:
        """What really denies it: the allow rule narrowed so it leaves the denied device
        (or access) out. An allow rule of the container's own config is replaced; one from
        an include is flipped off by an equal deny line, then allowed again without it."""
        title = f"narrow the allow rule so it leaves {_dev(d)} {d.access} out (an inert deny cannot take it away)"
        if d.major is None:
            return Fix(title, notes=("# a deny with a wildcard major never counts in allowlist mode: remove the "
                                     "allow lines that grant too much instead",))
        edits, at_deny, notes = [], [], []
        for sr in allowing:
            r = sr.rule
            narrowed = self.narrowed(r, d, sr.origin)
            if narrowed is None:
                notes.append(f"# {r.text(listing=True)} ({sr.origin}) allows every major: narrow it first (LXF104)")
                continue
            if sr.origin.startswith(self.mine):
                i = _index(sr.origin)
                edits.append(fixes.replace_edit(i, [(ALLOW, v) for v in narrowed]))
            elif sr.origin.startswith("pct:"):
                notes.append(f"# {r.text(listing=True)} comes from {sr.origin[4:]}: remove that entry, or give it "
                             "deny-write=1 to take write access away")
            else:
                at_deny += [(DENY, r.text()), *((ALLOW, v) for v in narrowed)]
                notes.append(f"# {sr.origin} is not this container's file: `{DENY}: {r.text()}` (equal to it) "
                             "switches it off, then the lines after it allow the rest again")
        if (edits or at_deny) and d.minor is not None and any(sr.rule.minor is None for sr in allowing):
            notes.append(f"# the new rules list the devices of major {d.major} it is given now: "
                         "a device that appears later needs its own rule")
        edits.append(Edit("replace", _index(o.origin), tuple(at_deny)) if at_deny else Edit("remove", _index(o.origin)))
        return Fix(title, tuple(edits), "manual", notes=tuple(notes))

    def narrowed(self, r: DeviceRule, d: DeviceRule, origin: str) -> list[str] | None:
        """The values that allow what `r` does, less what `d` denies (None: r is too broad to list)."""
        if r.major is None or r.kind == "a":
            return None
        left = "".join(c for c in r.access if c not in d.access)
        own_value = self.ctx.config.lines[_index(origin)].value if origin.startswith(self.mine) else None
        if r.minor is not None or d.minor is None:  # d takes the access away from every device r allows
            if not left:
                return []
            if own_value and own_value.strip().startswith("/"):
                return [f"{own_value.split()[0]} {left}"]
            return [DeviceRule(r.kind, r.major, r.minor, left).text()]
        minors = sorted({n.minor for n in self.nodes_of(r.kind, r.major)} | {d.minor})
        out = []
        for m in minors:
            access = left if m == d.minor else r.access
            if access:
                out.append(DeviceRule(r.kind, r.major, m, access).text())
        return out

    def nodes_of(self, kind: str, major: int):
        """The nodes of this major the container is given; else the host's; else the catalog's."""
        given = [g.node for g in self.eff.given if g.node is not None and (g.node.kind, g.node.major) == (kind, major)]
        if given:
            return given
        facts = self.ctx.facts
        if facts.nodes_known:
            return [n for n in facts.nodes.values() if (n.kind, n.major) == (kind, major)]
        profile = devices.profile_for_major(major, facts) if kind == "c" else None
        return devices.nodes_of(profile, facts) if profile is not None else []

    # ---- LXF142: an allow in denylist mode

    def inert_allow(self, i: int, o):
        why = self.mode_origin(i)
        return self.finding(
            "LXF142", o,
            f"{ALLOW}: {o.value.strip()} does nothing: this container's device list is in denylist mode ({why}), "
            "where every device is allowed unless a deny line names it; an allow line counts only when it equals "
            "an earlier deny line",
            evidence=(f"mode set by {why}",),
            fix=Fix("remove the line (it grants nothing the mode does not)", (Edit("remove", _index(o.origin)),)))

    def mode_origin(self, i: int) -> str:
        lines = self.eff.rule_lines
        upto = self.eff.shared + i
        for verb, value, origin in reversed(lines[:upto]):
            if value.strip() == "a":
                if origin.startswith(("01-pve.conf", "userns.conf")) or "userns" in origin:
                    return f"`allow = a` in {origin}: an unprivileged Proxmox container"
                return f"`{verb} = a` at {origin}"
        return "LXC's default"

    # ---- LXF143: emptied out by a later `a` or empty value

    def cleared_later(self, o, by):
        rule_text = f"{'lxc.cgroup2.devices.' + o.verb}: {o.value.strip()}"
        if by.status == "cleared":
            then = (f"an empty value drops every {by.verb} line before it when LXC reads the config: only "
                    f"{by.verb} lines after it count")
        elif by.verb == "allow":
            then = ("the bare `a` sets denylist mode and empties the list: every device is allowed unless a deny "
                    "after it names it")
        else:
            then = "the bare `a` sets allowlist mode and empties the list: only allow lines after it count"
        by_own = self.is_own(by)
        where = f"line {_index(by.origin) + 1}" if by_own else by.origin
        i = _index(o.origin)
        move = (by.status == "cleared" or (by.verb == "allow") == (o.verb == "deny"))
        if move and by_own:
            b = _index(by.origin)
            key = self.ctx.config.lines[b].key
            fix = Fix(f"move it after {where}, where it counts",
                      (Edit("remove", i), Edit("replace", b, ((key, by.value.strip()), (f"lxc.cgroup2.devices.{o.verb}",
                                                                                       o.value.strip())))),
                      "manual")
        elif move:
            fix = Fix(f"move it after {where} (an include), where it counts")
        else:
            fix = Fix("remove it: the mode set after it already does what it says", (Edit("remove", i),), "manual")
        return self.finding(
            "LXF143", o,
            f"{rule_text} does nothing: {where} (`lxc.cgroup2.devices.{by.verb}: {by.value.strip()}`) comes after "
            f"it; {then}",
            evidence=(f"emptied by {by.origin}",), fix=fix)

    # ---- LXF144: a duplicate

    def duplicate(self, o, count: int = 1, indexes=()):
        """LXF144 for `o` and the count-1 lines after it that repeat the same rule: one finding."""
        first = o.entry.origin or "an earlier line"
        message = (f"lxc.cgroup2.devices.{o.verb}: {excerpt(o.value.strip())} does nothing: {first} already has "
                   "the same rule (LXC keeps one)")
        indexes = list(indexes) or [_index(o.origin)]
        if count == 1:
            return self.finding("LXF144", o, message, evidence=(f"same rule at {first}",),
                                fix=Fix("remove the duplicate", (Edit("remove", indexes[0]),), "manual"))
        shown = ", ".join(str(i + 1) for i in indexes[:FOLD_SHOWN])
        more = count - min(count, FOLD_SHOWN)
        lines = f"{self.mine}{shown}" + (f" and {more} more lines" if more else "")
        notes = ()
        if count > len(indexes):
            notes = (f"# the edits remove the first {len(indexes)} of the {count} copies: remove every other "
                     f"line `{excerpt(self.text(o))}` after {first} too",)
        message = (f"lxc.cgroup2.devices.{o.verb}: {excerpt(o.value.strip())} does nothing, {count} times: {first} "
                   f"already has the same rule (LXC keeps one), and {lines} repeat it")
        return self.finding(
            "LXF144", o, message,
            evidence=(f"same rule at {first}", f"{count} copies at {lines}"),
            fix=Fix(f"remove the {count} duplicates", tuple(Edit("remove", i) for i in indexes), "manual",
                    notes=notes))

    # ---- LXF145: a path-form rule whose path is not a device node here

    def missing_path(self, o):
        parts = o.value.split()
        if len(parts) != 2:
            return None  # LXF130 says LXC rejects its syntax
        path, facts = parts[0], self.ctx.facts
        known = devices.lookup(path, facts)
        under = devices.nodes_under(path, facts) if facts.nodes_known else []
        if facts.nodes_known:
            if not path.startswith("/dev/") or path.startswith(_UNWALKED):
                return None  # outside the walk of /dev: cannot tell
        elif known is None or known.major is not None:
            return None  # a snapshot without dev/: only a catalog node whose driver is not loaded is known absent
        i = _index(o.origin)
        what = ("is a directory, not a device node" if under else "does not exist on this host")
        message = (f"{ALLOW}: {o.value.strip()} does nothing: {path} {what}; LXC logs \"Failed to parse device "
                   "rule\" and starts the container without it, so the device stays denied (until a restart "
                   "after it exists)")
        if under:
            fix = Fix(f"name the device nodes in {path}, not the directory",
                      (Edit("replace", i, tuple((ALLOW, f"{n.path} {parts[1]}") for n in under)),), "manual")
        else:
            argv = fixes.modprobe_argv(path)
            fix = Fix("make the node exist before the container starts (a path-form rule is resolved only then)",
                      commands=(fixes.command(*argv), f"{fixes.HOST_FIX}    # creates it at every boot, before guests start")
                      if argv else (),
                      notes=() if argv else ("# check the name: " + fixes.command("ls", "-l", "--", path),))
        return self.finding("LXF145", o, message, fix=fix)

    # ---- LXF146: `deny a` or an empty value drops LXC's default allowlist

    def defaults_dropped(self, o):
        ruleset = self.eff.ruleset
        if o.status == "mode":
            what = f"`{DENY}: a`"
            done = "sets allowlist mode and empties LXC's device list"
            why = "common.conf already starts with `deny = a`; this one only throws its allowlist away"
        else:
            what = f"the empty `lxc.cgroup2.devices.{o.verb}:`"
            done = f"drops every {o.verb} line before it, LXC's own too"
            why = "it takes away what common.conf allows; to take one device away, deny exactly that rule"
        fix = Fix(f"remove the line: {why}", (Edit("remove", _index(o.origin)),), "manual")
        dropped_defaults = any(emitted and e.allow and not self.is_own_origin(e.origin) for e, emitted in o.dropped)
        if not ruleset.has_program:
            if self.dl.mode != "allowlist" or not dropped_defaults:
                return None
            # measured: an empty list at start attaches no device program at all
            return self.finding(
                "LXF146", o,
                f"{what} at line {_index(o.origin) + 1} {done}, and no device rule is left after it: LXC then "
                "attaches no device program at all, so every device is allowed inside (the opposite of a deny)",
                evidence=("device rules compiled: none (no program attached)",), fix=fix)
        lost = []
        for e, emitted in (reversed(o.dropped) if o.status == "mode" else o.dropped):  # in config order
            r = _rule(e)
            if not (emitted and e.allow and not self.is_own_origin(e.origin) and set(r.access) & set("rw")):
                continue
            if not ruleset.allows(r.kind, r.major or 0, r.minor or 0, "".join(c for c in r.access if c in "rw")):
                name = DEFAULT_NAMES.get((r.kind, r.major, r.minor))
                lost.append(f"{name} ({_dev(r)})" if name else f"{_dev(r)} ({e.origin})")
        if not lost:
            return None
        shown = ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else "")
        return self.finding(
            "LXF146", o,
            f"{what} at line {_index(o.origin) + 1} {done}: the defaults LXC's common.conf allowed are gone, "
            f"so {shown} are denied inside unless allowed again after it",
            evidence=("denied now: " + ", ".join(lost),), fix=fix)

    def is_own_origin(self, origin: str) -> bool:
        return origin.startswith(self.mine)
