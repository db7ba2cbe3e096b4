"""Checks: one module per family; each exposes `check(ctx) -> list[Finding]`,
every finding carrying its fix as data (model.Fix).

RULES is an explicit tuple: the order findings come out in is the order here.
foresight (what maintenance will break) runs only for `lxcfix audit`; upgrade
(kernel, LXC 7, Proxmox VE 9) is part of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..codes import make
from ..ctconfig import CtConfig, cached
from ..effective import Effective
from .. import effective as _effective  # the module: its function looked up at each call
from ..model import Finding, HostFacts, ProbeResult
from ..styles import choose_style


@dataclass(frozen=True)
class Context:
    """Everything the checks may look at for one container. Pure data.

    requested: the --style asked for ("auto" unless the admin chose one);
    `style` is what that resolves to on this host, and why.
    """

    host: str
    ct: str
    facts: HostFacts
    config: CtConfig
    effective: Effective
    probe: ProbeResult | None = None
    live: object | None = None  # rules.live.Live: the device program read from the running container
    load: object | None = None  # include loader, so a planner can re-read an edited config
    requested: str = "auto"
    # What the admin asked fixes to do that they never do unasked (rules.access.ASKS):
    # "write-subgid" (apply adds root's /etc/subgid line), "mode-0666" (devN mode=0666).
    asks: frozenset = frozenset()
    # One layer deeper (lxcfix.nested): what the probe saw inside the inner containers asked for.
    inner: tuple = ()  # nested.InnerSeen, ...
    # Files read from the container's own rootfs (lxcfix.rootfs.Rootfs), or None when not read.
    rootfs: object | None = None

    @cached
    def style(self) -> tuple[str, str]:
        """(style, why): raises BadInput for a style this container cannot take."""
        return choose_style(self.requested, self.config.flavor, self.facts)

    @cached
    def needs(self):
        """allowlist.analyze(self), computed once: the checks and their fixes all read it."""
        return allowlist.analyze(self)  # the module, imported below (a call-time import costs each time)

    @cached
    def repairs(self):
        """allowlist.repairs(self): the fixes of what is broken, computed once, so a
        probe finding and a config finding about one device carry the same fix."""
        return allowlist.repairs(self)

    @cached
    def access(self):
        """access.analyze(self), computed once: who inside may open the group-access nodes, and the fixes."""
        return access.analyze(self)

    def with_asks(self, asks) -> "Context":
        asks = frozenset(asks or ())
        return self if asks == self.asks else replace(self, asks=asks)

    def with_config(self, config: CtConfig) -> "Context":
        """The same container with another config (the planner's next round):
        what was seen inside the running container does not carry over."""
        load = self.load or (lambda path: None)
        return replace(self, config=config, effective=_effective.effective(config, self.facts, load), probe=None,
                       live=None, inner=())

    def with_style(self, requested: str) -> "Context":
        return self if requested == self.requested else replace(self, requested=requested)

    def finding(self, code: str, message: str, **kw) -> Finding:
        """A finding about this container, with its code's severity (codes.make)."""
        return make(code, self.ct, message, host=self.host, **kw)


from . import access, allowlist, drift, host, hygiene, inert, live, nested, probe, rootfs, tenant  # noqa: E402

RULES = (host, allowlist, hygiene, access, tenant, inert, drift, live, probe, nested, rootfs)


def run_rules(ctx: Context, rules=RULES) -> list[Finding]:
    out: list[Finding] = []
    for rule in rules:
        out += rule.check(ctx)
    return fold(out)


# More than FOLD_AFTER findings that say the same thing about different lines (a config that
# repeats one bad line 400,000 times) are one finding with a count: the first, its message
# naming how many more and at most FOLD_SHOWN of their places, its fix's edits at most
# FOLD_EDITS. Only findings whose fix is shown, never applied (manual, or none), fold.
FOLD_AFTER = 20
FOLD_SHOWN = 10
FOLD_EDITS = 1000
_DIGITS = re.compile(r"[0-9]+")


def _fold_key(f: Finding):
    if f.fix is not None and (f.fix.applicability != "manual" or f.fix.commands):
        return None
    fix = None if f.fix is None else (f.fix.title, f.fix.notes)
    return (f.code, f.severity, f.device, f.numbers, f.rule, f.kind, fix, _DIGITS.sub("#", f.message))


def fold(findings: list[Finding]) -> list[Finding]:
    """The findings, each group of more than FOLD_AFTER repeats (equal but for line numbers)
    folded into its first; the order is kept."""
    groups: dict = {}
    for i, f in enumerate(findings):
        key = _fold_key(f)
        if key is not None:
            groups.setdefault(key, []).append(i)
    big = {g[0]: g for g in groups.values() if len(g) > FOLD_AFTER}
    if not big:
        return findings
    dropped = {i for g in big.values() for i in g[1:]}
    out = []
    for i, f in enumerate(findings):
        if i in dropped:
            continue
        if i in big:
            f = _folded([findings[j] for j in big[i]])
        out.append(f)
    return out


def _place(f: Finding) -> str:
    if f.line is not None:
        return f"line {f.line}"
    return f.evidence[0][:200] if f.evidence else "?"


def _folded(same: list[Finding]) -> Finding:
    first, rest = same[0], same[1:]
    places = ", ".join(_place(f) for f in rest[:FOLD_SHOWN])
    more = f" and {len(rest) - FOLD_SHOWN} more" if len(rest) > FOLD_SHOWN else ""
    fix = first.fix
    if fix is not None and fix.edits:
        edits = tuple(e for f in same for e in f.fix.edits)[:FOLD_EDITS]
        fix = fix._replace(edits=edits)
    return replace(first, message=f"{first.message} (and {len(rest)} more like it: {places}{more})",
                   evidence=(*first.evidence, f"{len(same)} findings like it"), fix=fix)
