"""LXF121: the running container's device program differs from its config on disk."""

from __future__ import annotations

from dataclasses import dataclass

from ..devices import LiveAllowlist, describe
from ..model import DeviceRule, Fix


@dataclass(frozen=True)
class Live:
    """The device program read from a running container's cgroup (None: none attached)."""

    cgroup: str
    program: LiveAllowlist | None
    # Cgroups below `cgroup` (the init's own, made by the container's root) with a device
    # program attached there: (path, its program). The kernel runs LXC's program too.
    deeper: tuple[tuple[str, LiveAllowlist | None], ...] = ()


def _key(rule) -> tuple:
    return (rule.kind, rule.major, rule.minor, "".join(c for c in "rwm" if c in rule.access), rule.allow)


def differences(ctx) -> tuple[list[str], list[str]] | None:
    """(in the config only, running only), or None when they agree or cannot be compared."""
    live = ctx.live
    if live is None or (live.program is not None and live.program.unknown):
        return None
    ruleset = ctx.effective.ruleset
    # One polarity is compiled, so order does not change what the program allows.
    want = sorted(map(_key, (sr.rule for sr in ruleset.rules)), key=repr) if ruleset.has_program else None
    have = sorted(map(_key, live.program.rules), key=repr) if live.program is not None else None
    if want is None and have is None:
        return None
    if want is not None and have is not None and want == have and ruleset.mode == live.program.mode:
        return None
    config_only = [k for k in (want or []) if k not in (have or [])]
    running_only = [k for k in (have or []) if k not in (want or [])]
    return [_fmt(k) for k in config_only], [_fmt(k) for k in running_only]


def _fmt(key: tuple) -> str:
    kind, major, minor, access, allow = key
    rule = DeviceRule(kind, major, minor, access, allow=True)
    text = rule.text(listing=not (kind == "a" and major is None and minor is None))  # a bare `a` is the mode
    return text if allow else f"deny {text}"


def _lines_of(ctx, shown: list[str]) -> list[str]:
    """Where each compiled rule of the config comes from: "200.conf:14 (c 10:200 rwm)"."""
    origins: dict[str, list[str]] = {}
    for sr in ctx.effective.ruleset.rules:
        origins.setdefault(_fmt(_key(sr.rule)), []).append(sr.origin)
    return [f"{', '.join(origins[s])} ({s})" if origins.get(s) else s for s in shown]


def since(ctx) -> str | None:
    """When the config on disk got its present content, if lxcfix's journal knows (it wrote
    exactly these bytes): the container has not been restarted since."""
    write = ctx.facts.config_writes.get(ctx.config.path)
    if write is None or write.digest != ctx.config.digest:
        return None
    how = {"generated": "the hook wrote it", "restored": "lxcfix rollback wrote it"}.get(write.event,
                                                                                         "lxcfix apply wrote it")
    return f"{write.time} ({how})"


def deeper_evidence(live: Live | None) -> list[str]:
    """A device program below the limit cgroup, in words (the container's own: not LXC's)."""
    out = []
    for path, program in (live.deeper if live is not None else ()):
        rules = (describe(program.rules) or "(no rules)") if program is not None else "unreadable"
        mode = f"{program.mode}: " if program is not None else ""
        out.append(f"the container's init runs in {path}, below {live.cgroup}, where a device program of its "
                   f"own is attached ({mode}{rules}); read from {live.cgroup}, LXC's, which the kernel "
                   "still enforces")
    return out


def check(ctx) -> list:
    diff = differences(ctx)
    if diff is None:
        return []
    config_only, running_only = diff
    program = ctx.live.program
    evidence = [f"running program on {ctx.live.cgroup}: "
                + (describe(program.rules) or "(no rules)" if program is not None else "none attached")]
    if config_only:
        evidence.append("in the config, not running: " + ", ".join(config_only))
        evidence.append("config lines not running: " + ", ".join(_lines_of(ctx, config_only)))
    if running_only:
        evidence.append("running, not in the config: " + ", ".join(running_only))
    evidence += deeper_evidence(ctx.live)
    when = since(ctx)
    if when:
        evidence.append(f"config on disk since {when}")
    parts = []
    if config_only:
        parts.append("not running: " + ", ".join(_lines_of(ctx, config_only)))
    if running_only:
        parts.append("running but not in the config: " + ", ".join(running_only))
    return [ctx.finding(
        "LXF121",
        "the running device allowlist differs from the config on disk ("
        + (f"edited on {when} without a restart since" if when else "edited without a restart, or changed live")
        + "): " + "; ".join(parts),
        evidence=tuple(evidence),
        fix=Fix(f"restart the container to load the config, or `lxcfix apply --ct {ctx.ct}`"),
    )]
