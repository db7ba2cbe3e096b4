"""Reading a host: facts, configs and their includes, through a Transport. Thin.

    facts = host_facts(Local(), backend)              -> HostFacts (every fact of facts.FACTS)
    loaded = load_container(transport, backend, "200") -> Loaded(ct, path, config | None, error)
    ctx = context(facts, loaded, loader)              -> rules.Context
"""

from __future__ import annotations

import errno
import posixpath
from dataclasses import dataclass
from typing import Callable

from . import ctconfig, facts as F
from .backends import Lxc, Proxmox
from .ctconfig import CtConfig
from .effective import effective
from .errors import FactsFailed
from .model import DeviceNode, HostFacts
from .rules import Context
from .transport import Transport


def fact_text(t: Transport, fact: F.Fact) -> str | None:
    """What a fact reads or runs on the host; None when the file or command is not there."""
    if fact.read is not None:
        try:
            return t.read(fact.read).decode("utf-8", "surrogateescape")
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.EFBIG):  # there, but a FIFO, a device, or far too big
                raise FactsFailed(f"{t.name}: {fact.read}: {e.strerror or e}: not what the kernel writes "
                                  "there; no container is judged against it") from None
            return None
    result = t.run(list(fact.run or ()), timeout=60)
    return result.stdout if result.ok else None


def host_facts(t: Transport, backend: Proxmox | Lxc) -> HostFacts:
    """Every fact of facts.FACTS that applies to this backend, parsed. Device
    nodes come through the transport (a walk of /dev here, the dev_nodes
    fact's command over SSH)."""
    texts: dict[str, str | None] = {}
    for name, fact in F.FACTS.items():
        if name != "dev_nodes" and backend.name in fact.backends:
            texts[name] = fact_text(t, fact)
    problems = F.proc_devices_problems(texts["proc_devices"]) if texts.get("proc_devices") else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise FactsFailed(f"{t.name}: /proc/devices {problems[0]}{more} is not '<major> <name>': "
                          "not what the kernel writes; no container is judged against it")
    value = {name: F.FACTS[name].parse(text) for name, text in texts.items() if text is not None}
    try:
        nodes = t.device_nodes()
    except OSError:
        nodes = {}
    char, block = value.get("proc_devices", ({}, {}))
    raw = {"/proc/devices": texts.get("proc_devices") or ""}
    if texts.get("pveversion") is not None:
        raw["pveversion -v"] = texts["pveversion"] or ""
    return HostFacts(
        host=t.name,
        backend=backend.name,
        char_majors=char,
        block_majors=block,
        nodes=nodes,
        nodes_known=bool(nodes),
        nvidia_driver=value.get("nvidia_driver"),
        cgroup_layout=value.get("cgroup_layout", "unknown"),
        pve_version=value.get("pveversion", (None, None))[0],
        lxc_version=value.get("lxc_version"),
        raw=raw,
    )


def source_nodes(t: Transport, paths: list[str]) -> dict[str, DeviceNode]:
    """Device nodes at bind-mount sources outside /dev (walked already): admins
    do pass nodes in from other directories. A symlink there is not followed:
    such a directory may be one a container can write."""
    paths = sorted({p for p in paths if p.startswith("/") and not p.startswith("/dev/")})
    return t.device_nodes(paths) if paths else {}


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


def context(facts: HostFacts, loaded: Loaded, loader, probe=None, live=None, requested: str = "auto") -> Context:
    cfg = loaded.config
    return Context(
        host=facts.host, ct=loaded.ct, facts=facts, config=cfg,
        effective=effective(cfg, facts, loader), probe=probe, live=live, load=loader, requested=requested,
    )

