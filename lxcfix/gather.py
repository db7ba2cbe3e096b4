"""Reading a host: facts, configs and their includes, through a Transport. Thin.

    facts = host_facts(Local(), backend)              -> HostFacts (every fact of facts.FACTS)
    loaded = load_container(transport, backend, "200") -> Loaded(ct, path, config | None, error)
    ctx = context(facts, loaded, loader)              -> rules.Context
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable

from . import ctconfig, facts as F
from .backends import Lxc, Proxmox
from .ctconfig import CtConfig
from .effective import effective
from .model import LXC_NAME, VMID, DeviceNode, HostFacts
from .rules import Context
from .transport import Transport


def fact_text(t: Transport, fact: F.Fact) -> str | None:
    """What a fact reads or runs on the host; None when the file or command is not there."""
    if fact.read is not None:
        try:
            return t.read(fact.read).decode("utf-8", "surrogateescape")
        except OSError:
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
    value = {name: F.FACTS[name].parse(text) for name, text in texts.items() if text is not None}
    try:
        nodes = t.device_nodes()
    except OSError:
        nodes = {}
    char, block = value.get("proc_devices", ({}, {}))
    raw = {"/proc/devices": texts.get("proc_devices") or ""}
    if texts.get("pveversion") is not None:
        raw["pveversion -v"] = texts["pveversion"] or ""
    if texts.get("subgid") is not None:
        raw["/etc/subgid"] = texts["subgid"] or ""
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
        subgid=value.get("subgid"),
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



# ---- a host in two round trips (sweep.py)

def sweep_request(*, pve_dir: str | None, lxcpath: str | None, cts: list[str] | None, backend: str = "auto",
                  probe: bool = True) -> "sweep.Request":
    """The first sweep: every fact of facts.FACTS (a walk of /dev for the device nodes),
    LXC's own config dir, the configs asked for and what they include, the mount
    sources outside /dev, and (probe) each container's status, init pid and device program."""
    from . import lxcdefaults, sweep

    reads = [f.read for name, f in F.FACTS.items() if f.read] + ["/etc/hostname"]
    runs = [list(f.run) for name, f in F.FACTS.items() if f.run and name != "dev_nodes"] + [["hostname"]]
    pve, lxc = Proxmox(pve_dir=pve_dir) if pve_dir else Proxmox(), Lxc(lxcpath=lxcpath) if lxcpath else Lxc()
    return sweep.Request(
        read=reads, run=runs, trees=[lxcdefaults.LXC_CONFIG_DIR], walk="/dev",
        pve_dir=pve.pve_dir, lxcpath=lxc.lxcpath, cts=cts, backend=backend,
        names={"pve": VMID.pattern, "lxc": LXC_NAME.pattern},
        live={"pve": pve.live_template(), "lxc": lxc.live_template()} if probe else {},
    )


def run_sweep(t: Transport, request: "sweep.Request", timeout: float = 120) -> "sweep.Answers":
    """One round trip: the sweep script through `t`, its answers (answers.garbage
    says why when it could not run: no python3, a cut-short output)."""
    from . import bpf, sweep

    nonce = sweep.nonce()
    result = t.run(sweep.argv(request, nonce), timeout=timeout, max_output=sweep.MAX_WIRE)
    answers = sweep.parse(result.stdout.encode("utf-8", "surrogateescape"), nonce)
    if answers.garbage and not answers.done and not answers.files and not answers.runs:
        answers.garbage = f"{answers.garbage}; exit {result.rc}: {result.tail()}"
    # the reader ran in-process there; lxcfix would run it as `python3 -c READER <cgroup>`
    for argv in [a for a in answers.runs if a[:3] == ("python3", "-c", "READER")]:
        answers.runs[("python3", "-c", bpf.READER, *argv[3:])] = answers.runs.pop(argv)
    return answers


def prefetch(t: Transport, request: "sweep.Request") -> tuple[Transport, str | None]:
    """(a transport answering from one sweep, None) or (t itself, why not)."""
    from .transport import Prefetched

    answers = run_sweep(t, request)
    if not answers.done:
        return t, answers.garbage or "the sweep did not finish"
    return Prefetched(t, answers), None
