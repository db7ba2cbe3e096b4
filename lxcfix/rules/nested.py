"""One layer deeper: the containers a running container runs (Docker, Podman, runc), listed by
the probe (LXF224), and what the probe saw inside the ones asked for (`--inner`): LXF220 the
LXC layer's allowlist denies, LXF221 the inner container is not given the node, LXF222 the inner
runtime's device cgroup denies, LXF223 the inner probe could not run (lxcfix.nested)."""

from __future__ import annotations

from .. import nested
from .probe import expected


def check(ctx) -> list:
    if ctx.probe is None:
        return []
    found = nested.listed_finding(ctx.ct, ctx.host, nested.listed(ctx.probe.raw), bool(ctx.inner))
    want = expected(ctx)
    for seen in ctx.inner:
        found += nested.classify_inner(ctx.ct, ctx.host, seen, ctx.probe, want)
    return found
