"""Host- and file-level checks: LXF120 (lock:), LXF130 (unparsable lines), LXF300 (cgroup layout)."""

from __future__ import annotations

from ..bounded import excerpt
from ..effective import V2_KEYS
from ..model import Fix


def check(ctx) -> list:
    out = []
    eff = ctx.effective
    if eff.lock:
        out.append(ctx.finding(
            "LXF120", f"config has 'lock: {eff.lock}': the container is busy; apply refuses",
            evidence=(f"lock: {eff.lock}",),
            fix=Fix("wait for the operation to finish (or `pct unlock` if it is stale), then re-run"),
        ))
    for lineno, text in ctx.config.bad_lines():
        out.append(ctx.finding(
            "LXF130", f"line {lineno} of {ctx.config.path or 'the config'} does not parse: '{excerpt(text.strip())}'",
            evidence=(f"{ctx.config.path}:{lineno}",),
            fix=Fix("remove or fix the line: Proxmox and LXC refuse to start with it"),
        ))
    if ctx.facts.cgroup_layout in ("hybrid", "v1") and any(r.key in V2_KEYS for r in eff.own_rules):
        out.append(ctx.finding(
            "LXF300",
            f"host runs a {ctx.facts.cgroup_layout} cgroup layout: LXC ignores every lxc.cgroup2.devices line here",
            evidence=(f"cgroup layout: {ctx.facts.cgroup_layout}",),
            fix=Fix("boot the host with the unified cgroup v2 hierarchy (Proxmox VE 7+ default), "
                    "or use lxc.cgroup.devices.* keys"),
        ))
    return out
