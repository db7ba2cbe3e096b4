"""Checks: one module per family; each exposes `check(ctx) -> list[Finding]`,
every finding carrying its fix as data (model.Fix).

RULES is an explicit tuple: the order findings come out in is the order here.
foresight (what maintenance will break) runs only for `lxcfix audit`; upgrade
(kernel, LXC 7, Proxmox VE 9) is part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..codes import make
from ..ctconfig import CtConfig, cached
from ..effective import Effective
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

    @cached
    def style(self) -> tuple[str, str]:
        """(style, why): raises BadInput for a style this container cannot take."""
        return choose_style(self.requested, self.config.flavor, self.facts)

    @cached
    def needs(self):
        """allowlist.analyze(self), computed once: the checks and their fixes all read it."""
        from .allowlist import analyze

        return analyze(self)

    @cached
    def repairs(self):
        """allowlist.repairs(self): the fixes of what is broken, computed once, so a
        probe finding and a config finding about one device carry the same fix."""
        from .allowlist import repairs

        return repairs(self)

    @cached
    def access(self):
        """access.analyze(self), computed once: who inside may open the group-access nodes, and the fixes."""
        from .access import analyze

        return analyze(self)

    def with_asks(self, asks) -> "Context":
        asks = frozenset(asks or ())
        return self if asks == self.asks else replace(self, asks=asks)

    def with_config(self, config: CtConfig) -> "Context":
        """The same container with another config (the planner's next round):
        what was seen inside the running container does not carry over."""
        from ..effective import effective

        load = self.load or (lambda path: None)
        return replace(self, config=config, effective=effective(config, self.facts, load), probe=None, live=None)

    def with_style(self, requested: str) -> "Context":
        return self if requested == self.requested else replace(self, requested=requested)

    def finding(self, code: str, message: str, **kw) -> Finding:
        """A finding about this container, with its code's severity (codes.make)."""
        return make(code, self.ct, message, host=self.host, **kw)


from . import access, allowlist, drift, host, hygiene, inert, live, probe, tenant  # noqa: E402

RULES = (host, allowlist, hygiene, access, tenant, inert, drift, live, probe)


def run_rules(ctx: Context, rules=RULES) -> list[Finding]:
    out: list[Finding] = []
    for rule in rules:
        out += rule.check(ctx)
    return out
