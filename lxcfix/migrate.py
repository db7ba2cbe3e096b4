"""`lxcfix audit --for migrate|ha`: the container judged here and on each other node (thin I/O;
the comparison is lxcfix.preflight). A node's facts come from a snapshot of it (`--to-root
NODE=DIR`) or from the node itself over SSH, reached as Proxmox reaches a member: root at its
address in /etc/pve/.members, host keys checked strictly against /etc/pve/priv/known_hosts.

    run(Target(Local(), Proxmox()), "200", "migrate", ["pve2"], {"pve2": "/srv/pve2-snapshot"})
        -> Preflight("200", "migrate", "pve1", verdicts=(NodeVerdict("pve2", issues=(...)),))
"""

from __future__ import annotations

from . import cluster, gather, preflight, pvestorage
from .errors import BadInput
from .scan import analyze_container


def _text(t, path: str) -> str:
    try:
        return t.read(path).decode("utf-8", "replace")
    except OSError:
        return ""


def cluster_members(t, backend) -> tuple[cluster.Member, ...]:
    """The cluster's nodes from pmxcfs (.members), else corosync.conf's nodelist."""
    return cluster.members(_text(t, f"{backend.pve_dir}/.members")) or \
        cluster.corosync_nodes(_text(t, f"{backend.pve_dir}/corosync.conf"))


def cluster_entries(t, backend) -> tuple[str | None, list]:
    """(this node's name, an inventory entry for each other member): root at the member's
    address, host keys checked against the cluster's known_hosts (read, never written). No
    members (not a cluster, pmxcfs not mounted): bad input, one line."""
    from .inventory import HostEntry

    found = cluster_members(t, backend)
    if not found:
        raise BadInput(f"--cluster: no cluster members in {backend.pve_dir}/.members or "
                       f"{backend.pve_dir}/corosync.conf "
                       "(not a Proxmox VE cluster node?)")
    this = cluster.this_node(_text(t, f"{backend.pve_dir}/.members"))
    try:
        known = t.local_path(f"{backend.pve_dir}/priv/known_hosts") if t.local else "/etc/pve/priv/known_hosts"
    except OSError:
        known = "/etc/pve/priv/known_hosts"
    return this, [HostEntry(m.name, address=m.ip, user="root", known_hosts=known)
                  for m in found if m.name != this]


def open_node(name: str, roots: dict, members, ssh_options=None, known_hosts: str = "/etc/pve/priv/known_hosts"):
    """(transport, backend) of another node: its snapshot, or SSH to it (module docstring)."""
    from .repair import open_target

    if name in roots:
        target = open_target(roots[name])
        return target.transport, target.backend
    from .backends import Proxmox
    from .ssh import Ssh, SshOptions

    ip = next((m.ip for m in members if m.name == name and m.ip), None)
    if ssh_options is None:
        opts = SshOptions(known_hosts=known_hosts).check()
    else:  # --ssh-config without --known-hosts: still the cluster's known_hosts
        from dataclasses import replace

        opts = replace(ssh_options, known_hosts=ssh_options.known_hosts or known_hosts)
    t = Ssh(name, hostname=ip or name, user="root", options=opts)
    t.connect()
    return t, Proxmox()


def judge_on(name: str, t, backend, loaded, loader, here, here_facts, store, sid, event):
    facts = gather.host_facts(t, backend)
    if facts.nodes_known:
        extra = {p: n for p, n in gather.source_nodes(t, gather.mount_sources(loaded.config)).items()
                 if p not in facts.nodes}
        if extra:
            from dataclasses import replace

            facts = replace(facts, nodes={**facts.nodes, **extra})
    facts = gather.with_snippets(t, facts, [loaded.config])
    there = analyze_container(facts, loaded, loader)
    return preflight.judge(loaded.ct, here, there, name, here_facts, facts, store, sid, event)


def run(target, ct: str, event: str, nodes: list[str], roots: dict, ssh_options=None) -> preflight.Preflight:
    """The preflight of CT `ct` for each node (migrate: `nodes`; ha: its HA group's or rules')."""
    from .repair import scan

    t, backend = target.transport, target.backend
    if backend.name != "pve":
        raise BadInput(f"audit --for {event}: a Proxmox VE node's containers (this host is plain LXC)")
    ct = backend.validate(ct)
    if ct not in backend.list(t):
        raise BadInput(f"CT {ct}: no such container on this node")
    rep = scan(target, [ct], keep_context=True)
    (here,) = rep.containers
    if here.context is None:
        raise BadInput(f"CT {ct}: its config cannot be read: {here.error or 'unreadable'}")
    here_facts = rep.facts
    notes: list[str] = []
    members = cluster_members(t, backend)
    if event == "ha":
        pve = backend.pve_dir
        found, where = preflight.ha_nodes(ct, _text(t, f"{pve}/ha/resources.cfg"), _text(t, f"{pve}/ha/groups.cfg"),
                                          _text(t, f"{pve}/ha/rules.cfg"))
        if found == ():
            raise BadInput(where)
        notes.append(f"nodes from {where}")
        nodes = list(found) if found is not None else [m.name for m in members] or sorted(roots)
        nodes = [n for n in nodes if n != here_facts.host or n in roots]
    cfg_text = _text(t, f"{backend.pve_dir}/storage.cfg")
    vol = pvestorage.volume_of((here.context.config.get("rootfs") or ""))
    sid = vol[0] if vol else ""
    store = pvestorage.parse(cfg_text).stores.get(sid) if sid and cfg_text else False
    if sid and not cfg_text:
        notes.append(f"rootfs storage {sid} not checked: no {backend.pve_dir}/storage.cfg")
    loaded = gather.load_container(t, backend, ct)
    loader = gather.include_loader(t)
    verdicts = []
    try:  # the cluster's own known_hosts (pmxcfs: every node's key), where this node's /etc/pve is
        known = t.local_path(f"{backend.pve_dir}/priv/known_hosts") if t.local else "/etc/pve/priv/known_hosts"
    except OSError:
        known = "/etc/pve/priv/known_hosts"
    for name in nodes:
        nt = None
        try:
            nt, nb = open_node(name, roots, members, ssh_options, known)
        except BadInput:
            raise
        except Exception as e:
            verdicts.append(preflight.NodeVerdict(name, error=f"not checked: {name} cannot be reached: "
                                                  f"{pvestorage.excerpt(str(e), 200)}"))
            continue
        try:
            verdicts.append(judge_on(name, nt, nb, loaded, loader, here, here_facts, store, sid, event))
        except Exception as e:
            verdicts.append(preflight.NodeVerdict(name, error=f"not checked: {type(e).__name__}: "
                                                  f"{pvestorage.excerpt(str(e), 200)}"))
        finally:
            if nt is not None and nt is not t:
                try:
                    nt.close()
                except Exception:
                    pass
    return preflight.Preflight(ct, event, here_facts.host, tuple(verdicts), tuple(notes))
