"""A Proxmox VE cluster's members, as pmxcfs shows them on every node. Pure.

    members('{"nodename": "pve1", "version": 7, "cluster": {"name": "c", "nodes": 2, ...},
              "nodelist": {"pve1": {"id": 1, "online": 1, "ip": "10.0.0.11"}, ...}}')
        -> (Member("pve1", "10.0.0.11", True), Member("pve2", "10.0.0.12", False))
    corosync_nodes("nodelist {\\n  node {\\n    name: pve1\\n    ring0_addr: 10.0.0.11\\n  }\\n}\\n")
        -> (Member("pve1", "10.0.0.11", None),)

/etc/pve/.members is pmxcfs's JSON (pve-cluster's cfs-plug-func.c / status.c
cfs_create_memberlist_msg: "nodename", "version", "cluster", "nodelist": name -> {id, online,
ip}); /etc/pve/corosync.conf's `nodelist { node { name: ...; ring0_addr: ... } }` is the
fallback (no quorum, or pmxcfs not answering). Proxmox reaches a member as root at that
address with /etc/pve/priv/known_hosts (PVE::SSHInfo get_ssh_info / ssh_info_to_command).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_MEMBERS = 512
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,62}")
_ADDR = re.compile(r"[0-9A-Fa-f.:]{2,45}|[A-Za-z0-9][A-Za-z0-9.\-]{0,252}")


@dataclass(frozen=True)
class Member:
    name: str
    ip: str | None = None
    online: bool | None = None


def members(text: str) -> tuple[Member, ...]:
    """The nodes of /etc/pve/.members (module docstring), sorted by name; () for anything
    that is not that document. A name or address that is not one is left out."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ()
    nodes = doc.get("nodelist") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict):
        return ()
    out = []
    for name, info in list(nodes.items())[:MAX_MEMBERS]:
        if not isinstance(name, str) or not _NAME.fullmatch(name) or not isinstance(info, dict):
            continue
        ip = info.get("ip")
        online = info.get("online")
        out.append(Member(name, ip if isinstance(ip, str) and _ADDR.fullmatch(ip) else None,
                          bool(online) if isinstance(online, (int, bool)) else None))
    return tuple(sorted(out, key=lambda m: m.name))


def this_node(text: str) -> str | None:
    """The node whose pmxcfs wrote /etc/pve/.members ("nodename"), when it names one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    name = doc.get("nodename") if isinstance(doc, dict) else None
    return name if isinstance(name, str) and _NAME.fullmatch(name) else None


def corosync_nodes(text: str) -> tuple[Member, ...]:
    """The `node { name: ...; ring0_addr: ... }` blocks of corosync.conf's nodelist."""
    out = []
    for block in re.findall(r"\bnode\s*\{([^{}]{0,4096})\}", text)[:MAX_MEMBERS]:
        keys = dict(re.findall(r"^\s*([a-z0-9_]+)\s*:\s*(\S+)\s*$", block, re.M))
        name = keys.get("name", "")
        addr = keys.get("ring0_addr")
        if _NAME.fullmatch(name):
            out.append(Member(name, addr if addr and _ADDR.fullmatch(addr) else None, None))
    return tuple(sorted(out, key=lambda m: m.name))
