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
    layout = ctx.facts.cgroup_layout
    rules = any(r.key in V2_KEYS for r in eff.own_rules)
    v1 = [r.rule for r in eff.own_rules if r.v1 and r.key.endswith("allow") and r.rule is not None]
    uncovered = [g for g in eff.given if g.node is not None
                 and not any(r.covers(g.node.kind, g.node.major, g.node.minor, "rw") for r in v1)]
    if layout in ("hybrid", "v1") and (rules or uncovered):
        # Said for a container given a device no v1 rule of its own allows too: there the probe's
        # EPERM is the v1 devices controller's, and no lxc.cgroup2 line lxcfix could plan changes it.
        out.append(ctx.finding(
            "LXF300",
            f"host runs a {layout} cgroup layout: LXC ignores every lxc.cgroup2.devices line here, so lxcfix "
            "plans no device rule (cgroup v1 rules decide what the container may open)",
            evidence=(f"cgroup layout: {layout} (/proc/self/mountinfo: cgroup v1 controllers mounted)",
                      "passed in, no lxc.cgroup.devices rule of its own allows it: "
                      + ", ".join(g.path for g in uncovered[:4]) if uncovered else
                      "lxc.cgroup2.devices lines: " + ", ".join(r.value.strip() for r in eff.own_rules
                                                                if r.key in V2_KEYS)[:200]),
            fix=Fix(HYBRID_FIX),
        ))
    return out


HYBRID_FIX = ("boot the host with the unified cgroup v2 hierarchy (Proxmox VE 7+ default: remove "
              "systemd.unified_cgroup_hierarchy=0 from the kernel command line), or write the rules as "
              "lxc.cgroup.devices.allow lines on this host; lxcfix plans cgroup2 rules only")
