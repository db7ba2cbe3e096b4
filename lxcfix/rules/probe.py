"""What the in-container probe saw: LXF200-LXF203, LXF210-LXF212 (probe.classify)."""

from __future__ import annotations

from .. import probe as probe_mod
from ..bpf import describe


def expected(ctx) -> dict[str, tuple[str, int, int]]:
    """Container path -> (kind, major, minor) the host says each given node is."""
    return {
        "/" + g.target.lstrip("/"): (g.node.kind, g.node.major, g.node.minor)
        for g in ctx.effective.given if g.node is not None
    }


def check(ctx) -> list:
    if ctx.probe is None:
        return []
    allowlist = None
    if ctx.live is not None:
        program = ctx.live.program
        allowlist = describe(r for r in program.rules if r.allow) if program is not None else "(no device program: all devices allowed)"
    majors = {name: ms[0] for name, ms in ctx.facts.char_majors.items() if ms}
    return probe_mod.classify(ctx.ct, ctx.host, ctx.probe, expected(ctx), ctx.facts.nvidia_driver,
                              allowlist=allowlist, host_majors=majors)
