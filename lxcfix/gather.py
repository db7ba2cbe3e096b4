"""Reading a host: facts, configs and their includes, through a Transport. Thin.

    facts = host_facts(Local(), backend)              -> HostFacts (every fact of facts.FACTS)
    loaded = load_container(transport, backend, "200") -> Loaded(ct, path, config | None, error)
    ctx = context(facts, loaded, loader)              -> rules.Context
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from . import ctconfig, devices, facts as F
from .backends import Lxc, Proxmox
from .ctconfig import CtConfig
from .effective import effective
from .errors import FactsFailed
from .model import LXC_NAME, VMID, DeviceNode, HostFacts, KernelTree, Storage
from .transport import OutsideRoot
from .rules import Context
from .transport import Transport, env_path, python_of

if TYPE_CHECKING:
    from . import sweep  # loaded only where a sweep is built


def fact_text(t: Transport, fact: F.Fact, path: str | None = None) -> str | None:
    """What a fact reads or runs on the host; None when the file or command is not there.
    path: where to read it instead of fact.read (a {kernel}/{dev} filled in, LXCFIX_PVE_DIR)."""
    if fact.read is not None:
        try:
            return t.read(path or fact.read).decode("utf-8", "surrogateescape")
        except FileNotFoundError:
            return None
        except OSError as e:
            kernel = (path or fact.read).startswith(("/proc/", "/sys/"))
            # there, but a FIFO, a device, far too big, or (a snapshot's) a link out of the snapshot
            if kernel and e.errno in (errno.EINVAL, errno.EFBIG, errno.EXDEV):
                raise FactsFailed(f"{t.name}: {path or fact.read}: {e.strerror or e}: not what the kernel "
                                  "writes there; no container is judged against it") from None
            return None
    result = t.run(list(fact.run or ()), timeout=60)
    return result.stdout if result.ok else None


def fact_path(name: str, fact: F.Fact, backend: Proxmox | Lxc) -> str | None:
    """Where a fact is read on this host: the backend's Proxmox directory for storage.cfg,
    lxcfix's state directory for its journal."""
    if name == "storage_cfg":
        return f"{backend.pve_dir if isinstance(backend, Proxmox) else '/etc/pve'}/storage.cfg"
    if name == "journal":
        return f"{env_path('LXCFIX_STATE_DIR', '/var/lib/lxcfix')}/journal.jsonl"
    return fact.read


# Facts only a kernel upgrade needs (audit --for kernel-upgrade|pve-upgrade): read on
# request, never by a scan, whose host costs two round trips (sweep.py).
UPGRADE_ONLY = frozenset({"dkms_status", "modules_dep", "device_driver"})


def host_facts(t: Transport, backend: Proxmox | Lxc, upgrade: bool = False) -> HostFacts:
    """Every fact of facts.FACTS that applies to this backend, parsed. Device
    nodes come through the transport (a walk of /dev here, the dev_nodes
    fact's command over SSH). upgrade: on a host with out-of-tree modules (DKMS,
    NVIDIA's installer), also the installed kernels' module trees and the drivers
    of the catalog's device nodes, what a kernel upgrade needs (`dkms status` runs
    only where /proc/modules shows such a module, or cannot be read). The files of
    the snippets directories hookscripts name come later (with_snippets): only the
    configs say which storages matter."""
    texts: dict[str, str | None] = {}
    for name, fact in F.FACTS.items():
        if name != "dev_nodes" and name not in UPGRADE_ONLY and backend.name in fact.backends:
            texts[name] = fact_text(t, fact, fact_path(name, fact, backend))
    loaded = F.FACTS["proc_modules"].parse(texts["proc_modules"]) if texts.get("proc_modules") is not None else None
    if upgrade and (loaded is None or any(m.out_of_tree for m in loaded.values())):
        # `dkms status` is a shell script that takes a while: only where out-of-tree modules are loaded
        texts["dkms_status"] = fact_text(t, F.FACTS["dkms_status"])
    problems = F.proc_devices_problems(texts["proc_devices"]) if texts.get("proc_devices") else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise FactsFailed(f"{t.name}: /proc/devices {problems[0]}{more} is not '<major> <name>': "
                          "not what the kernel writes; no container is judged against it")
    value = {name: F.FACTS[name].parse(text) for name, text in texts.items() if text is not None}
    try:
        nodes, not_nodes = split_nodes(t.device_nodes())
    except OSError:
        nodes, not_nodes = {}, {}
    char, block = value.get("proc_devices", ({}, {}))
    raw = {"/proc/devices": texts.get("proc_devices") or ""}
    if texts.get("pveversion") is not None:
        raw["pveversion -v"] = texts["pveversion"] or ""
    if texts.get("subgid") is not None:
        raw["/etc/subgid"] = texts["subgid"] or ""
    modules = value.get("proc_modules", {})
    dkms = value.get("dkms_status", ())
    kernel = value.get("kernel_release")
    out_of_tree = any(m.out_of_tree for m in modules.values()) or bool(dkms)
    storages: dict = {}
    if backend.name == "pve":
        storages = value.get("storage_cfg") if texts.get("storage_cfg") is not None else DEFAULT_STORAGES
    return HostFacts(
        host=t.name,
        backend=backend.name,
        char_majors=char,
        block_majors=block,
        nodes=nodes,
        nodes_known=bool(nodes),
        not_nodes=not_nodes,
        nvidia_driver=value.get("nvidia_driver"),
        cgroup_layout=value.get("cgroup_layout", "unknown"),
        pve_version=value.get("pveversion", (None, None, None))[0],
        lxc_pve=value.get("pveversion", (None, None, None))[2],
        lxc_version=value.get("lxc_version"),
        raw=raw,
        subgid=value.get("subgid"),
        groups=value.get("host_groups"),
        kernel=kernel,
        kernels=kernel_trees(t, modules, dkms) if upgrade and out_of_tree else {},
        modules=modules,
        modules_known=texts.get("proc_modules") is not None,
        dkms=dkms,
        dkms_known=texts.get("dkms_status") is not None,
        device_drivers=device_drivers(t, nodes) if upgrade and out_of_tree else {},
        storages=storages,
        config_writes=value.get("journal", {}),
    )


# What Proxmox assumes without a storage.cfg: the `local` directory storage.
DEFAULT_STORAGES = {"local": Storage("local", "dir", "/var/lib/vz", ("iso", "vztmpl", "backup", "snippets"))}

# Where modules built outside the kernel tree are installed: DKMS (updates/dkms), other
# packages (updates, extra), NVIDIA's .run installer (kernel/drivers/video).
_OUT_OF_TREE_DIRS = ("updates", "extra", "kernel/drivers/video")


def kernel_trees(t: Transport, modules, dkms) -> dict[str, KernelTree]:
    """Every installed kernel's /lib/modules tree: where the modules a kernel upgrade
    needs are (those loaded out of tree now, DKMS's, facts.KNOWN_OUT_OF_TREE), from
    modules.dep (what modprobe loads from), else a walk of the out-of-tree directories;
    and whether its build headers are there (DKMS builds need them)."""
    wanted = {n for n, m in modules.items() if m.out_of_tree} | {d.module for d in dkms} | set(F.KNOWN_OUT_OF_TREE)
    try:
        versions = [v for v in t.listdir("/lib/modules") if F.parse_kernel_release(v) == v]
    except OSError:
        return {}
    fact = F.FACTS["modules_dep"]
    out = {}
    for v in versions[:32]:
        top = f"/lib/modules/{v}"
        text = fact_text(t, fact, fact.read.format(kernel=v))
        if text is not None:
            found, complete = fact.parse(text), True
        else:
            found, complete = _walk_modules(t, top), False
        try:
            headers = t.isdir(f"{top}/build")
        except OSError:
            headers = None
        out[v] = KernelTree(v, {n: p for n, p in found.items() if n in wanted}, complete, headers)
    return out


def _walk_modules(t: Transport, top: str) -> dict[str, str]:
    """module name -> path, from the directories out-of-tree modules go to (a tree without modules.dep)."""
    found: dict[str, str] = {}
    todo = [(d, 0) for d in _OUT_OF_TREE_DIRS]
    while todo and len(found) < 4096:
        rel, depth = todo.pop()
        try:
            names = t.listdir(f"{top}/{rel}")
        except OSError:
            continue
        for name in names:
            parsed = F.parse_modules_dep(f"{rel}/{name}:")
            if parsed:
                for k, v in parsed.items():
                    found.setdefault(k, v)
            elif depth < 3 and "." not in name and rel != "kernel/drivers/video":
                todo.append((f"{rel}/{name}", depth + 1))
    return found


# The catalog profiles whose nodes sit on a device with a driver (sysfs: /sys/dev/char/M:m/device).
_DRIVER_PROFILES = frozenset(p.name for p in devices.CATALOG if p.sysfs_driver)


def device_drivers(t: Transport, nodes) -> dict[str, str]:
    """"c 226:1" -> "nvidia": the driver of the device behind each catalog node
    (its sysfs uevent's DRIVER=), so a kernel upgrade knows which module it needs."""
    from .devices import lookup

    fact = F.FACTS["device_driver"]
    probe = HostFacts(host=t.name, backend="lxc")
    out: dict[str, str] = {}
    for path, n in sorted(nodes.items()):
        key = f"{n.kind} {n.major}:{n.minor}"
        hit = lookup(path, probe)
        if n.kind != "c" or key in out or hit is None or hit.profile.name not in _DRIVER_PROFILES:
            continue
        text = fact_text(t, fact, fact.read.format(dev=f"{n.major}:{n.minor}"))
        driver = fact.parse(text) if text is not None else None
        if driver is not None:
            out[key] = driver
        if len(out) >= 256:
            break
    return out


_HOOKSCRIPT = re.compile(rb"^hookscript:[ \t]*([A-Za-z][A-Za-z0-9._-]{0,99}):", re.M)


def with_snippets(t: Transport, facts: HostFacts, configs) -> HostFacts:
    """facts with the files of the snippets/ directories of the storages the configs'
    hookscripts name (any section: a pending hookscript counts at the next start).
    Nothing is read when no config has one; one command over SSH when some do."""
    wanted = set()
    for cfg in configs:
        if cfg.get("hookscript"):
            wanted.add(cfg.get("hookscript").partition(":")[0])
        if cfg.has_sections:  # a pending (or snapshot) hookscript counts too
            wanted |= {m.group(1).decode() for m in _HOOKSCRIPT.finditer(ctconfig.sections_tail(cfg.raw, cfg.flavor))}
    # Only absolute paths: one starting with "-" would be an option to find.
    stores = {sid: facts.storages[sid] for sid in sorted(wanted) if sid in facts.storages
              and (facts.storages[sid].path or "").startswith("/") and sid not in facts.snippets}
    if not stores:
        return facts
    return replace(facts, snippets={**facts.snippets, **snippet_files(t, stores)})


def snippet_files(t: Transport, storages) -> dict[str, dict[str, int]]:
    """storage id -> {file: st_mode} of its snippets/ directory (symlinks followed, as
    Proxmox's -x test follows them), for every storage whose directory exists here (an
    unmounted share's or a snapshot's without it: unknown, left out)."""
    out: dict[str, dict[str, int]] = {}
    if t.local:
        for sid, st in storages.items():
            try:  # a snapshot's paths resolve inside it (OutsideRoot: a storage dir that leads out: unknown)
                top = t.local_path(f"{st.path}/snippets")
                there = os.path.isdir(t.local_path(st.path))
            except OutsideRoot:
                continue
            try:
                names = sorted(os.listdir(top))[:512] if there else None
            except OSError:
                names = [] if there else None
            if names is None:
                continue
            modes = {}
            for n in names:
                try:
                    modes[n] = os.stat(t.local_path(f"{st.path}/snippets/{n}")).st_mode
                except (OSError, OutsideRoot):
                    continue
            out[sid] = modes
        return out
    # A live host: a snippets directory that is not there holds no script (Proxmox sees the same).
    dirs = {sid: f"{st.path}/snippets" for sid, st in storages.items()}
    found = t.run(["find", "-L", *dirs.values(), "-mindepth", "1", "-maxdepth", "1",
                   "-exec", "stat", "-L", "-c", "%f|%n", "{}", "+"], timeout=60, max_output=1 << 20)
    modes = F.parse_stat_modes(found.stdout)
    for sid, d in dirs.items():
        prefix = d + "/"
        out[sid] = {p[len(prefix):]: m for p, m in modes.items() if p.startswith(prefix) and "/" not in p[len(prefix):]}
    return out


def split_nodes(found: dict[str, DeviceNode]) -> tuple[dict[str, DeviceNode], dict[str, str]]:
    """A device walk's answer as (the device nodes, path -> what is there instead: facts.NOT_NODES)."""
    nodes = {p: n for p, n in found.items() if n.kind in ("c", "b")}
    return nodes, {p: F.NOT_NODES[n.kind] for p, n in found.items() if n.kind in F.NOT_NODES}


def source_nodes(t: Transport, paths: list[str]) -> dict[str, DeviceNode]:
    """Device nodes at bind-mount sources outside /dev (walked already): admins
    do pass nodes in from other directories. A symlink there is not followed:
    such a directory may be one a container can write."""
    paths = sorted({p for p in paths if p.startswith("/") and not p.startswith("/dev/")})
    return split_nodes(t.device_nodes(paths))[0] if paths else {}


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

    pve, lxc = Proxmox(pve_dir=pve_dir) if pve_dir else Proxmox(), Lxc(lxcpath=lxcpath) if lxcpath else Lxc()
    wanted = [(name, f) for name, f in F.FACTS.items() if name != "dev_nodes" and name not in UPGRADE_ONLY]
    reads = [fact_path(name, f, pve if name == "storage_cfg" else lxc) for name, f in wanted if f.read]
    reads = list(dict.fromkeys(reads + ["/etc/hostname"]))
    runs = [list(f.run) for name, f in wanted if f.run] + [["hostname"]]
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
    # the script and its request through stdin: the command line stays a few hundred bytes
    python = python_of(t)
    result = t.run(sweep.argv(request, python), input=sweep.stdin(request, nonce), timeout=timeout,
                   max_output=sweep.MAX_WIRE)
    answers = sweep.parse(result.stdout.encode("utf-8", "surrogateescape"), nonce)
    if answers.garbage and not answers.done and not answers.files and not answers.runs:
        answers.garbage = f"{answers.garbage}; exit {result.rc}: {result.tail()}"
    # the reader ran in-process there; lxcfix would run it as `PYTHON -c READER <cgroup>`
    for argv in [a for a in answers.runs if a[:3] == ("python3", "-c", "READER")]:
        answers.runs[(python, "-c", bpf.READER, *argv[3:])] = answers.runs.pop(argv)
    return answers


def prefetch(t: Transport, request: "sweep.Request") -> tuple[Transport, str | None]:
    """(a transport answering from one sweep, None) or (t itself, why not)."""
    from .transport import Prefetched

    answers = run_sweep(t, request)
    if not answers.done:
        return t, answers.garbage or "the sweep did not finish"
    return Prefetched(t, answers), None
