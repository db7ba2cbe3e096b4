"""Reading a host: facts, configs and their includes, through a Transport. Thin.

    facts = host_facts(Local())                       -> HostFacts
    loaded = load_container(transport, backend, "200") -> Loaded(ct, path, config | None, error)
    ctx = context(facts, loaded, loader)              -> rules.Context
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Callable

from . import ctconfig, facts as F
from .backends import Lxc, Proxmox
from .ctconfig import CtConfig
from .effective import effective
from .model import DeviceNode, HostFacts
from .rules import Context
from .transport import Local, Transport


def _read_text(t: Transport, path: str) -> str | None:
    try:
        return t.read(path).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def _nodes(t: Transport) -> tuple[dict[str, DeviceNode], bool]:
    walk = getattr(t, "walk_dev", None)
    if walk is not None:
        try:
            entries = walk("/dev")
        except OSError:
            return {}, False
        nodes = {p: n for p, st in entries if (n := F.node_from_stat(p, st)) is not None}
        return nodes, bool(nodes)
    fact = F.FACTS["dev_nodes"]
    result = t.run(list(fact.run), timeout=60)
    nodes = fact.parse(result.stdout)
    return nodes, bool(nodes)


def host_facts(t: Transport, backend: Proxmox | Lxc) -> HostFacts:
    raw: dict[str, str] = {}
    proc_devices = _read_text(t, "/proc/devices") or ""
    override = os.environ.get("LXCFIX_PROC_DEVICES")
    if override and isinstance(t, Local):
        # Tests (and reproducing another host's state): majors from this file instead.
        proc_devices = _read_text(t, override) or ""
    raw["/proc/devices"] = proc_devices
    char, block = F.parse_proc_devices(proc_devices)
    nv = _read_text(t, "/proc/driver/nvidia/version")
    mountinfo = _read_text(t, "/proc/self/mountinfo")
    nodes, known = _nodes(t)
    pve_version = lxc_version = None
    if backend.name == "pve":
        r = t.run(["pveversion", "-v"])
        if r.ok:
            raw["pveversion -v"] = r.stdout
            pve_version = F.parse_pveversion(r.stdout)[0]
    r = t.run(["lxc-start", "--version"])
    if r.ok:
        lxc_version = F.parse_lxc_version(r.stdout)
    return HostFacts(
        host=t.name,
        backend=backend.name,
        char_majors=char,
        block_majors=block,
        nodes=nodes,
        nodes_known=known,
        nvidia_driver=F.parse_nvidia_version(nv) if nv else None,
        cgroup_layout=F.parse_cgroup_layout(mountinfo) if mountinfo else "unknown",
        pve_version=pve_version,
        lxc_version=lxc_version,
        raw=raw,
    )


def source_nodes(t: Transport, paths: list[str]) -> dict[str, DeviceNode]:
    """Device nodes at bind-mount sources outside /dev (walked already), stat()ed
    through the transport: admins do pass nodes in from other directories."""
    paths = sorted({p for p in paths if p.startswith("/") and not p.startswith("/dev/")})
    if not paths:
        return {}
    local = getattr(t, "local_path", None) or getattr(t, "path", None)
    if local is not None or isinstance(t, Local):
        out = {}
        for p in paths:
            try:
                st = os.stat(local(p) if local else p)
            except OSError:
                continue
            if (n := F.node_from_stat(p, st)) is not None:
                out[p] = n
        return out
    result = t.run(["stat", "-L", "-c", "%F|%t|%T|%f|%u|%g|%n", "--", *paths])
    return F.parse_stat_lines(result.stdout)


def mount_sources(cfg: CtConfig) -> list[str]:
    return [v.split()[0] for k, v in cfg.items() if k == "lxc.mount.entry" and v.split()]


def include_loader(t: Transport) -> Callable[[str], list[tuple[str, bytes]] | None]:
    """lxc.include target -> [(file, bytes)], directories as their *.conf files
    in order; None when unreadable (built-in defaults stand in). Cached: every
    container of a host includes the same few files."""
    cache: dict[str, list[tuple[str, bytes]] | None] = {}

    def load(path: str):
        if path in cache:
            return cache[path]
        out: list[tuple[str, bytes]] | None
        try:
            if t.isdir(path):
                out = []
                for name in t.listdir(path):
                    if name.endswith(".conf"):
                        full = posixpath.join(path, name)
                        out.append((full, t.read(full)))
            else:
                out = [(path, t.read(path))]
        except OSError:
            out = None
        cache[path] = out
        return out

    return load


@dataclass(frozen=True)
class Loaded:
    ct: str
    path: str
    config: CtConfig | None
    error: str | None = None
    node: str | None = None  # Proxmox cluster node the config lives under


def load_container(t: Transport, backend: Proxmox | Lxc, ct: str, path: str | None = None) -> Loaded:
    path = path or backend.config_path(ct)
    try:
        raw = t.read(path)
    except FileNotFoundError:
        return Loaded(ct, path, None, f"{path}: no such file")
    except OSError as e:
        return Loaded(ct, path, None, f"{path}: {e.strerror or e}")
    return Loaded(ct, path, ctconfig.parse(raw, backend.flavor, path), node=backend.node_of(path))


def context(facts: HostFacts, loaded: Loaded, loader, probe=None, live=None) -> Context:
    cfg = loaded.config
    return Context(
        host=facts.host, ct=loaded.ct, facts=facts, config=cfg,
        effective=effective(cfg, facts, loader), probe=probe, live=live, load=loader,
    )

