"""Checks: one module per family; each exposes `check(ctx) -> list[Finding]`.

RULES is an explicit tuple: the order findings come out in is the order here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..ctconfig import CtConfig
from ..effective import Effective
from ..model import Finding, HostFacts, ProbeResult


@dataclass(frozen=True)
class Context:
    """Everything the checks may look at for one container. Pure data."""

    host: str
    ct: str
    facts: HostFacts
    config: CtConfig
    effective: Effective
    probe: ProbeResult | None = None
    live: object | None = None  # rules.live.Live: the device program read from the running container
    load: object | None = None  # include loader, so a planner can re-read an edited config

    @functools.cached_property
    def needs(self):
        """allowlist.analyze(self), computed once: the checks and the planner all read it."""
        from .allowlist import analyze

        return analyze(self)

    def with_config(self, config: CtConfig) -> "Context":
        """The same container with another config (the planner's intermediate steps)."""
        from ..effective import effective

        load = self.load or (lambda path: None)
        return replace(self, config=config, effective=effective(config, self.facts, load))

    def finding(self, code: str, severity: str, message: str, **kw) -> Finding:
        return Finding(code=code, severity=severity, ct=self.ct, message=message, host=self.host, **kw)


from . import allowlist, host, hygiene, live, probe  # noqa: E402

RULES = (host, allowlist, hygiene, live, probe)


def run_rules(ctx: Context, rules=RULES) -> list[Finding]:
    out: list[Finding] = []
    for rule in rules:
        out += rule.check(ctx)
    return out
