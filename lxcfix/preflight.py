"""Before a migration or an HA recovery: would this container's devices work on that node?
Pure: the container judged against this node's facts and against the other node's (two
CtReports, made by lxcfix.migrate) is compared here; what fails only there is an Issue.

    verdict = judge("200", here, there, "pve2", here_facts, there_facts, store, "migrate")
    verdict == NodeVerdict("pve2", issues=(
        Issue("LXF101", "CT 200: rule c 508:* allows nothing: nvidia-uvm is 511 on pve2 ...",
              "replace the rule with dev entries: lxcfix plan --ct 200"),
        Issue("driver", "NVIDIA driver 580.95.05 here, 570.86.10 on pve2: ...", ""),
        Issue("storage", "rootfs storage local-lvm is not available on pve2 (nodes pve1)", ""),
    ))
    verdict.ok -> False

Issue.code: the finding code the other node's check gave (LXF1xx: a node missing there, a
numeric rule that matches another major, a hookscript snippet missing there), or one of
"driver" (the NVIDIA version the container's userspace was matched to, here, against that
node's), "gid" (render/video numbered differently there), "storage" (the rootfs storage is
not on that node; for HA, a local one cannot be recovered elsewhere). pve-container's
PVE/LXC/Migrate.pm prepare() checks the storage's availability (`nodes`) and says of the rest
"todo: test if VM uses local resources".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .bounded import excerpt
from .pvestorage import Store, sections

SERIOUS = ("error", "warning")


@dataclass(frozen=True)
class Issue:
    code: str
    why: str
    fix: str = ""
    commands: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"code": self.code, "why": self.why, "fix": self.fix, "commands": list(self.commands)}


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    issues: tuple[Issue, ...] = ()
    notes: tuple[str, ...] = ()
    error: str = ""  # "not checked: why" (the node could not be read)

    @property
    def ok(self) -> bool:
        return not self.issues and not self.error

    def to_json(self) -> dict:
        return {"node": self.node, "ok": self.ok, "error": self.error or None,
                "issues": [i.to_json() for i in self.issues], "notes": list(self.notes)}


@dataclass(frozen=True)
class Preflight:
    ct: str
    event: str  # "migrate" | "ha"
    source: str
    verdicts: tuple[NodeVerdict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def can_run_on(self) -> tuple[str, ...]:
        return tuple(v.node for v in self.verdicts if v.ok)

    def to_json(self) -> dict:
        return {"ct": self.ct, "for": self.event, "source": self.source, "can_run_on": list(self.can_run_on),
                "nodes": [v.to_json() for v in self.verdicts], "notes": list(self.notes)}


def _key(f) -> tuple:
    """A finding's subject: the same problem here and there (another major in its message) is not new."""
    return (f.code, f.device, f.rule)


def _gives(report, prefix: str) -> bool:
    ctx = getattr(report, "context", None)
    eff = getattr(ctx, "effective", None)
    return any((g.profile or "").startswith(prefix) or g.path.startswith(f"/dev/{prefix}")
               for g in getattr(eff, "given", ()))


def judge(ct: str, here, there, node: str, here_facts, there_facts, store, sid: str,
          event: str = "migrate") -> NodeVerdict:
    """What fails for CT `ct` on `node` that does not fail here (module docstring). here/there:
    CtReports of the same config judged with this node's facts and that node's. store: the
    rootfs storage `sid`'s Store, None when storage.cfg lacks it, False when there is no
    storage.cfg to tell (not checked)."""
    issues: list[Issue] = []
    notes: list[str] = []
    seen = {_key(f) for f in here.findings}
    broken = sorted({f.code for f in here.findings if f.severity in SERIOUS})
    if broken:
        notes.append(f"already failing here too ({', '.join(broken)}): `lxcfix diagnose --ct {ct}`")
    for f in there.findings:
        if f.severity in SERIOUS and _key(f) not in seen:
            fix = f.fix
            title = fix.title if fix is not None else ""
            cmds = tuple(fix.commands) if fix is not None else ()
            copy = _copy_snippet(here, node) if f.code == "LXF152" else []
            if copy:  # the hookscript's snippet is only here: a `local:` storage is per node
                title, cmds = f"copy the snippet to {node} (each node has its own local storage)", tuple(copy)
            issues.append(Issue(f.code, f.message.replace(f"CT {ct}", f"CT {ct} on {node}", 1), title, cmds))
    if _gives(here, "nvidia"):
        mine, theirs = here_facts.nvidia_driver, there_facts.nvidia_driver
        if theirs is None:
            issues.append(Issue("driver", f"no NVIDIA driver is loaded on {node} (here: {mine or 'unknown'}): "
                                "the container's nvidia nodes have no device behind them there",
                                f"install NVIDIA {mine} on {node}" if mine else ""))
        elif mine is not None and mine != theirs:
            issues.append(Issue("driver", f"NVIDIA driver {mine} here, {theirs} on {node}: the container's NVIDIA "
                                f"userspace matches {mine}; there nvidia-smi says 'Failed to initialize NVML: "
                                "Driver/library version mismatch'",
                                f"install {mine} on {node}, or the container's NVIDIA libraries of {theirs}"))
    if _gives(here, "dri") or _gives(here, "kfd"):
        for group in ("render", "video"):
            a = (here_facts.groups or {}).get(group)
            b = (there_facts.groups or {}).get(group)
            if a is not None and b is not None and a != b:
                issues.append(Issue("gid", f"group {group} is gid {a} here and {b} on {node}: a devN "
                                    f"gid={a} or an idmap that passes {a} through gives the wrong group there",
                                    f"the same {group} gid on every node (groupmod -g {a} {group} on {node})"))
    if sid and store is not False:
        if store is None:
            issues.append(Issue("storage", f"rootfs storage {sid} is not in storage.cfg"))
        else:
            allowed = store.nodes()
            if allowed is not None and node not in allowed:
                issues.append(Issue("storage", f"rootfs storage {sid} is not available on {node} "
                                    f"(nodes {','.join(allowed)})",
                                    f"move the volume to a storage {node} has: pct move-volume {ct} rootfs STORAGE"))
            elif store.disabled:
                issues.append(Issue("storage", f"rootfs storage {sid} is disabled"))
            elif not store.shared:
                if event == "ha":
                    issues.append(Issue("storage", f"rootfs storage {sid} ({store.type}) is local: when this node "
                                        f"fails, HA cannot start CT {ct} on {node} (the volume stays here)",
                                        "a shared storage (or replication) for HA resources"))
                else:
                    notes.append(f"rootfs storage {sid} ({store.type}) is local: `pct migrate` copies the volume "
                                 "(offline, or --restart)")
    return NodeVerdict(node, tuple(issues), tuple(notes))


def _copy_snippet(here, node: str) -> list[str]:
    import shlex

    ctx = getattr(here, "context", None)
    cfg = getattr(ctx, "config", None)
    value = (cfg.get("hookscript") if cfg is not None else None) or ""
    storeid, _, vol = value.partition(":")
    facts = getattr(ctx, "facts", None)
    st = (getattr(facts, "storages", {}) or {}).get(storeid)
    if not vol.startswith("snippets/") or st is None or not st.path:
        return []
    path = f"{st.path}/snippets/{vol[len('snippets/'):]}"
    return [shlex.join(["scp", "-p", path, f"root@{node}:{path}"])]


# ---------------------------------------------------------------- HA: where a container may run

def ha_nodes(ct: str, resources: str, groups: str, rules: str = "") -> tuple[tuple[str, ...] | None, str]:
    """(the nodes HA may start CT `ct` on, where that comes from). None: any node of the cluster
    (no group, or a group that is not `restricted`: pve-ha-manager's
    PVE/HA/Groups.pm/Resources.pm; PVE 9's PVE/HA/Rules/NodeAffinity.pm `node-affinity` rules with
    `strict`). Nodes are `name[:priority]`, comma separated. A resource not in resources.cfg:
    ((), "not an HA resource")."""
    res, _ = sections(resources)
    mine = next((r for r in res if r.type == "ct" and r.id == ct), None) or \
        next((r for r in res if r.type in ("ct", "service") and r.id in (f"ct:{ct}", ct)), None)
    if mine is None:
        return (), f"CT {ct} is not an HA resource (ha/resources.cfg)"
    for rule in sections(rules)[0]:
        if rule.type != "node-affinity" or rule.options.get("disable", "0") not in ("0", ""):
            continue
        if f"ct:{ct}" in [x.strip() for x in rule.options.get("resources", "").split(",")]:
            nodes = _node_list(rule.options.get("nodes", ""))
            strict = rule.options.get("strict", "0") not in ("0", "")
            return (nodes if strict else None), f"ha/rules.cfg node-affinity {rule.id}" + \
                ("" if strict else " (not strict: any node when those fail)")
    group = mine.options.get("group", "")
    if group:
        g = next((x for x in sections(groups)[0] if x.type == "group" and x.id == group), None)
        if g is None:
            return None, f"HA group {excerpt(group, 40)} is not in ha/groups.cfg"
        nodes = _node_list(g.options.get("nodes", ""))
        restricted = g.options.get("restricted", "0") not in ("0", "")
        return (nodes if restricted else None), f"HA group {group}" + ("" if restricted else
                                                                      " (not restricted: any node when those fail)")
    return None, "no HA group or rule: any node of the cluster"


def _node_list(text: str) -> tuple[str, ...]:
    out = []
    for part in text.split(","):
        name = part.strip().split(":", 1)[0]
        if name and name not in out and len(out) < 64:
            out.append(name)
    return tuple(out)
