"""One layer deeper: the containers a running LXC container runs itself (Docker, Podman, runc),
and the same device checks inside one of them. Pure: argv in, text in, data out.

The probe (templates/probe.sh) lists them, one line each, in the same exec as its node checks:

    inner docker 3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e frigate
    inner podman 0123456789ab immich_server
    inner runc - web1                       (runc has no separate id: the name is the id)

    listed(probe.raw) -> (Inner("docker", "3f4e...", "frigate"), Inner("podman", ...), Inner("runc", "-", "web1"))
    exec_argv(Inner("docker", ..., "frigate"), ["sh", "-c", ...])
        -> ["docker", "exec", "frigate", "sh", "-c", ...]     (run through the LXC container's ContainerExec)
    classify_inner("200", "pve1", inner, inner_probe, outer_probe, expected)
        -> [Finding("LXF221", "inner docker container frigate: /dev/net/tun is absent ...")]

What the inner probe sees is read against what the LXC layer's probe saw for the same path, so a
finding names the layer that denies: LXF220 the LXC layer's allowlist (the node is denied in the
LXC container itself), LXF221 the inner container not given the node, LXF222 the inner runtime's
own device cgroup (the node is there inside and opens in the LXC container, but not in the inner
one). The names come from the container: they are parsed strictly (what Docker, Podman and runc
accept as names), never passed through a shell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from .bounded import excerpt
from .codes import make
from .fixes import plan_command
from .model import Finding, Fix, ProbeNode, ProbeResult

RUNTIMES = ("docker", "podman", "runc")
RUNC_ROOT = "/run/runc"  # runc's state dir as root (what `runc list` reads by default)
MAX_INNER = 256  # inner containers read from one probe's output at most
# What the inner probes of one LXC container may cost in all, whatever it lists (a tenant's
# `docker ps` names 256, each `docker exec` sleeping or printing 1 MiB): at most INNER_PROBED
# probed, within INNER_DEADLINE seconds (LXCFIX_INNER_DEADLINE) and INNER_OUTPUT bytes of
# output together; each output is parsed and dropped as it comes, and the rest is one LXF223,
# "not checked: budget".
INNER_PROBED = 16
INNER_DEADLINE = 60.0
INNER_OUTPUT = 4 * 1024 * 1024
# Docker and Podman names ([a-zA-Z0-9][a-zA-Z0-9_.-]*), runc ids ([\w+-.]+), bounded.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
_ID = re.compile(r"[0-9a-f]{12,64}|-")
_LINE = re.compile(rf"inner ({'|'.join(RUNTIMES)}) ({_ID.pattern}) ({NAME.pattern})")


@dataclass(frozen=True)
class Inner:
    """One container an LXC container runs: its runtime, id ("-" for runc) and name."""

    runtime: str
    id: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.runtime}:{self.name}"


@dataclass(frozen=True)
class InnerSeen:
    """What the probe saw inside one inner container (probe), or why it could not run (error).
    rest: the inner containers after this one that the budget left unprobed too (same error)."""

    inner: Inner
    probe: ProbeResult | None = None
    error: str | None = None
    rest: tuple[Inner, ...] = ()


def budget_spent(probed: int, seconds_left: float, bytes_left: int) -> str | None:
    """Why no further inner container of this LXC container is probed, or None: it may be.

        budget_spent(16, 30.0, 2**20) -> "16 inner containers probed (at most 16 per container)"
    """
    if probed >= INNER_PROBED:
        return f"{probed} inner containers probed (at most {INNER_PROBED} per container)"
    if seconds_left < 1:
        return "the inner probes' deadline is spent"
    if bytes_left < 4096:
        return f"the inner probes' {INNER_OUTPUT} bytes of output are spent"
    return None


def listed(raw: str) -> tuple[Inner, ...]:
    """The `inner` lines of the probe's output. Total: a line that is not exactly one the probe
    prints is skipped; at most MAX_INNER; one container listed twice counts once."""
    out: dict[tuple[str, str], Inner] = {}
    for line in raw.split("\n"):
        if not line.startswith("inner ") or len(line) > 256:
            continue
        m = _LINE.fullmatch(line.rstrip("\r"))
        if m is None:
            continue
        out.setdefault((m[1], m[3]), Inner(m[1], m[2], m[3]))
        if len(out) >= MAX_INNER:
            break
    return tuple(out.values())


def select(found: Iterable[Inner], want: str) -> tuple[list[Inner], list[str]]:
    """The inner containers `--inner WANT` names: "all", a name, an id (prefix of 12+), or
    RUNTIME:NAME; (chosen, names asked for that none matched)."""
    found = list(found)
    if want == "all":
        return found, []
    chosen = []
    for part in [p for p in want.split(",") if p]:
        runtime, _, name = part.rpartition(":") if ":" in part else ("", "", part)
        hit = [i for i in found if (not runtime or i.runtime == runtime)
               and (i.name == name or (len(name) >= 12 and i.id != "-" and i.id.startswith(name)))]
        if not hit:
            return chosen, [part]
        chosen += [i for i in hit if i not in chosen]
    return chosen, []


def valid_want(want: str) -> bool:
    """A --inner value lxcfix accepts: all, or names (RUNTIME:NAME allowed), comma-separated."""
    if want == "all":
        return True
    parts = want.split(",")
    return 0 < len(parts) <= 64 and all(
        NAME.fullmatch(p.rpartition(":")[2]) and p.rpartition(":")[0] in ("", *RUNTIMES) for p in parts)


def exec_argv(inner: Inner, argv: Iterable[str]) -> list[str]:
    """argv run inside the inner container, to be run through its LXC container's exec.
    Nothing of the caller's environment goes in: `docker exec`/`podman exec`/`runc exec` start
    the process with the inner container's own environment."""
    if inner.runtime not in RUNTIMES or not NAME.fullmatch(inner.name):
        raise ValueError(f"not an inner container lxcfix can enter: {inner!r}")
    target = inner.id if inner.id != "-" else inner.name
    if inner.runtime == "runc":
        return ["runc", "--root", RUNC_ROOT, "exec", target, *argv]
    return [inner.runtime, "exec", target, *argv]


# --- classify ---------------------------------------------------------------------------------

def _lxc_ok(node: ProbeNode | None) -> bool | None:
    """Whether the LXC layer lets the node through (None: not probed there)."""
    if node is None:
        return None
    return node.exists and node.open != "EPERM"


def given_lines(inner: Inner, path: str, numbers: tuple[str, int, int]) -> tuple[str, ...]:
    """The lines that give one node to an inner container, per way of running it."""
    kind, major, minor = numbers
    if inner.runtime == "runc":
        return (f'config.json linux.devices: {{"path": "{path}", "type": "{kind}", "major": {major}, '
                f'"minor": {minor}, "fileMode": 438}}',
                f'config.json linux.resources.devices: {{"allow": true, "type": "{kind}", "major": {major}, '
                f'"minor": {minor}, "access": "rwm"}}')
    return (f"{inner.runtime} run --device {path}:{path} ...",
            f"compose: devices: [\"{path}:{path}\"]")


def classify_inner(ct: str, host: str, seen: InnerSeen, outer: ProbeResult | None,
                   expected: Mapping[str, tuple[str, int, int]],
                   lxc_fix: Mapping[str, str] | None = None) -> list[Finding]:
    """LXF220-LXF223 for one inner container. expected: path -> the host's (kind, major, minor),
    the nodes the LXC container is given (the same paths its own probe checks); lxc_fix: path ->
    the LXC layer's fix title, where the config findings have one."""
    inner, where = seen.inner, f"inner {seen.inner.runtime} container {seen.inner.name}"
    if seen.rest:  # the budget's cut: one finding for every inner container it left
        left = (inner, *seen.rest)
        names = ", ".join(i.label for i in left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        return [make("LXF223", ct, f"{len(left)} inner containers of CT {ct} not checked: budget: "
                     f"{excerpt(seen.error or '?', 200)}", host=host, evidence=(f"not checked: {names}",))]
    if seen.probe is None:
        ran = (f"ran: {' '.join(exec_argv(inner, ['sh', '-c', '<probe>']))} in CT {ct}",) \
            if inner.runtime in RUNTIMES and NAME.fullmatch(inner.name) else ()
        return [make("LXF223", ct, f"cannot look inside the {where} of CT {ct}: {excerpt(seen.error or '?', 200)}",
                     host=host, evidence=ran)]
    lxc_fix = lxc_fix or {}
    plan = plan_command(ct, host)
    found: list[Finding] = []
    for path, numbers in expected.items():
        node = seen.probe.nodes.get(path)
        if node is None:
            continue
        kind, major, minor = numbers
        dev = f"{kind} {major}:{minor}"
        at_lxc = _lxc_ok(outer.nodes.get(path)) if outer is not None else None
        lxc_state = ("not probed in the LXC container" if at_lxc is None else
                     f"in CT {ct} itself: open {path}: {outer.nodes[path].open}")
        if node.exists and node.open == "EPERM" and at_lxc is False:
            fix = lxc_fix.get(path) or f"allow {dev} rwm in CT {ct}'s config (run: {plan})"
            found.append(make(
                "LXF220", ct, f"{where}: open {path}: EPERM, denied by CT {ct}'s own device allowlist "
                f"(the LXC layer): fix it there first", host=host, device=path, numbers=numbers,
                evidence=(f"{where}: open {path}: EPERM", lxc_state,
                          "a node the LXC layer denies is denied to every container below it"),
                fix=Fix(f"the LXC layer: {fix} (LXF200)")))
        elif not node.exists and (at_lxc is not False or outer.nodes[path].exists):
            lines = given_lines(inner, path, numbers)
            found.append(make(
                "LXF221", ct, f"{where}: {path} is absent: the inner container is not given it "
                f"(CT {ct} {'has it' if at_lxc is not None and outer.nodes[path].exists else 'is given it'} as {dev})", host=host, device=path,
                numbers=numbers, evidence=(f"{where}: stat {path}: {node.open}", lxc_state),
                fix=Fix(f"give {path} to the inner container and recreate it: "
                        + (" and " if inner.runtime == "runc" else "; or ").join(lines),
                        notes=lines)))
        elif node.exists and node.open == "EPERM" and at_lxc:
            found.append(make(
                "LXF222", ct, f"{where}: open {path}: EPERM while it opens in CT {ct}: the inner runtime's "
                f"device cgroup denies {dev}", host=host, device=path, numbers=numbers,
                evidence=(f"{where}: open {path}: EPERM", lxc_state,
                          "the node is there inside (a bind mount or volume), but the inner container's "
                          "device rules do not allow it"),
                fix=Fix(f"let the inner runtime allow it: --device {path} (which adds the rule), or "
                        f"--device-cgroup-rule '{kind} {major}:{minor} rwm' (compose: device_cgroup_rules); "
                        f"OCI: linux.resources.devices; the NVIDIA runtime in a nested container: "
                        "no-cgroups = true (LXF230) with every node listed")))
    return found


def listed_finding(ct: str, host: str, inner: tuple[Inner, ...], probed: bool) -> list[Finding]:
    """LXF224: the inner containers a running container has (info), once per container."""
    if not inner:
        return []
    names = ", ".join(i.label for i in inner[:20]) + (f" and {len(inner) - 20} more" if len(inner) > 20 else "")
    how = "the ones asked for (--inner) were probed inside too" if probed else f"check them: lxcfix diagnose --ct {ct} --inner all"
    return [make("LXF224", ct, f"CT {ct} runs {len(inner)} inner container(s): {names}", host=host,
                 evidence=(how,))]
