"""Shared helpers of the benchmarks: timing, formatting, machine description,
and the generator of a synthetic Proxmox VE host snapshot (`--root DIR` layout).

Benchmarks are scripts that print figures measured in one run; nothing here
asserts a time.
"""

from __future__ import annotations

import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_HOST = os.path.join(REPO, "examples", "pve-gpu-host")

# An installed lxcfix runs from byte-code (pipx compiles it at install). A machine that sets
# PYTHONDONTWRITEBYTECODE would time the compiler on every CLI run: the commands timed here get
# a byte-code cache under bench/out/ (the tree under test is not written to).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(REPO, "bench", "out", "pycache"))
# The lxcfix measured is this checkout's, in the commands timed and in this process, even where an
# editable install (the console script beside the interpreter) points at another checkout.
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != REPO:
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
if sys.path[:2].count(REPO) == 0:
    sys.path.insert(1, REPO)


# ---------------------------------------------------------------- a pure cgroup v2 mount

INNER = "LXCFIX_BENCH_INNER"  # set in the re-executed process


def reexec_in_cgroup2(script_path: str, on_failure: str = "") -> None:
    """As tests/run does: re-exec `script_path` (with this process's arguments) in a private
    mount namespace whose /sys/fs/cgroup is a pure cgroup v2 mount (on a hybrid layout LXC
    ignores cgroup2 device rules). The machine's own mounts are never touched. Returns in
    the re-executed process. on_failure: shell run when the mount cannot be made (default:
    a warning, then the bench runs anyway)."""
    if os.environ.get(INNER) == "1":
        return
    fallback = on_failure or 'echo "bench: no pure cgroup2 mount in the private namespace" >&2; exec "$@"'
    script = f'if umount -l /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup; then exec "$@"; fi; {fallback}'
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
            sys.executable, os.path.abspath(script_path), *sys.argv[1:]]
    sys.stdout.flush()
    os.execvpe("unshare", argv, dict(os.environ, **{INNER: "1"}))


# ---------------------------------------------------------------- timing / output

def lxcfix_argv() -> list[str]:
    """The real CLI: the console script installed beside this interpreter
    (not a pyenv shim, whose bash startup would be timed too), else `python -m lxcfix`; either
    runs this checkout's lxcfix (PYTHONPATH, set above)."""
    script = os.path.join(os.path.dirname(sys.executable), "lxcfix")
    if os.path.isfile(script) and os.access(script, os.X_OK) and _runs_entry_point(script):
        return [script]
    return [sys.executable, "-m", "lxcfix"]


def _runs_entry_point(script: str) -> bool:
    """Whether the installed console script calls this checkout's entry point (pyproject's
    [project.scripts]); one installed from an older checkout would time another start-up."""
    try:
        with open(os.path.join(REPO, "pyproject.toml")) as f:
            line = next(l for l in f if l.replace(" ", "").startswith('lxcfix="'))
        module, func = line.split("=", 1)[1].strip().strip('"').split(":")
        with open(script, errors="replace") as f:
            return f"from {module} import {func}" in f.read(4096)
    except (OSError, StopIteration, ValueError):
        return False


def timed_run(argv: Sequence[str], env: dict | None = None, ok_codes=(0,), stdout=subprocess.DEVNULL,
              timeout: float = 600, cwd: str | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, completed process) of one run; raises on an exit code not in ok_codes.
    The child's CPU time (user + sys) is left in `last_cpu` (less sensitive to a busy machine).
    cwd: where it runs (`python -m` and `-c` put the working directory first on sys.path: a
    command meant to run another checkout's lxcfix must not run in this one)."""
    global last_cpu
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(list(argv), stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       env=env, timeout=timeout, cwd=cwd)
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    last_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode not in ok_codes:
        err = p.stderr.decode(errors="replace").strip() if isinstance(p.stderr, bytes) else (p.stderr or "")
        raise RuntimeError(f"{list(argv)} exited {p.returncode}: {err[-2000:]}")
    return dt, p


last_cpu = 0.0


def repeat(fn: Callable[[], float], n: int) -> list[float]:
    return [fn() for _ in range(n)]


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def s(x: float) -> str:
    return f"{x:.3f} s"


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "MISS"


def machine() -> str:
    cores = os.cpu_count() or 0
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        model = "?"
    return (f"{cores} cores ({model}), Linux {platform.release()}, "
            f"Python {platform.python_version()} ({sys.executable})")


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average ?"


def header(title: str) -> None:
    print(f"== {title}")
    print(f"   {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {machine()}")
    print(f"   {load()} at start (a busy machine inflates wall times; CPU times are printed too)")
    print(f"   lxcfix measured: {REPO} (PYTHONPATH)")


# ---------------------------------------------------------------- synthetic host snapshot

def _head(rng: random.Random, vmid: int, hostname: str, unprivileged: bool, features: str | None,
          extra: Sequence[str] = (), description: Sequence[str] = ()) -> list[str]:
    lines = [f"#{d}" for d in description]
    lines.append("arch: amd64")
    lines.append(f"cores: {rng.choice((1, 1, 2, 2, 4, 8, 16))}")
    if features:
        lines.append(f"features: {features}")
    lines.append(f"hostname: {hostname}")
    lines.append(f"memory: {rng.choice((512, 1024, 2048, 4096, 8192, 16384, 65536))}")
    if rng.random() < 0.3:
        lines.append(f"mp0: local-lvm:vm-{vmid}-disk-1,mp=/srv/data,size={rng.choice((8, 32, 100))}G")
    mac = ":".join(f"{rng.randrange(256):02X}" for _ in range(5))
    lines.append(f"net0: name=eth0,bridge=vmbr{rng.choice((0, 0, 1))},firewall=1,hwaddr=BC:{mac},"
                 f"ip={'dhcp' if rng.random() < 0.6 else f'10.{vmid // 250 % 250}.{vmid % 250}.2/16,gw=10.0.0.1'},"
                 "type=veth")
    if rng.random() < 0.5:
        lines.append("onboot: 1")
    lines.append(f"ostype: {rng.choice(('debian', 'debian', 'ubuntu', 'alpine', 'archlinux'))}")
    lines.append(f"rootfs: local-lvm:vm-{vmid}-disk-0,size={rng.choice((4, 8, 16, 32, 64))}G")
    if rng.random() < 0.2:
        lines.append(f"startup: order={rng.randrange(1, 20)}")
    lines.append(f"swap: {rng.choice((0, 512, 512, 1024))}")
    if rng.random() < 0.3:
        lines.append(f"tags: {rng.choice(('prod', 'lab', 'media', 'ai', 'vpn'))}")
    if unprivileged:
        lines.append("unprivileged: 1")
    lines.extend(extra)
    return lines


GPU_MOUNTS = [
    "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
    "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
    "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file",
]
TUN_MOUNT = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"

# kind -> weight (per cent of the configs). Stale/current: the host's nvidia-uvm is 511.
KINDS = {
    "gpu-stale-uvm": 8,      # c 508:* for nvidia-uvm (LXF101), as examples/pve-gpu-host 200
    "gpu-current-uvm": 8,    # c 511:* (works until the next major change: LXF103)
    "gpu-no-uvm-rule": 3,    # uvm mounted, no rule at all (LXF100)
    "gpu-path-rules": 3,     # lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm (healthy)
    "gpu-devn": 5,           # dev0..dev3 (healthy)
    "tun-missing": 8,        # bind mount, no rule (LXF100), as 201
    "tun-ok": 6,             # c 10:200 rwm + mount
    "tun-v1-key": 2,         # lxc.cgroup.devices.allow (LXF102)
    "unpriv-devn": 15,       # unprivileged, dev0: /dev/dri/renderD128,gid=104 (as 202)
    "fuse-feature": 3,       # features: fuse=1
    "usb-serial": 2,         # c 188:* + /dev/ttyUSB0 mount
    "over-broad": 2,         # lxc.cgroup2.devices.allow: a (LXF104)
    "locked": 1,             # lock: backup (LXF120), as 203
    "plain": 34,             # no devices at all
}

# The broken-heavy mix (issue 22): mostly broken GPU containers (stale or missing majors, bind
# mounts without rules), the rest healthy. Broken: LXF100/LXF101 and their plans.
BROKEN_KINDS = {
    "gpu-stale-uvm": 30,     # c 508..510:* for nvidia-uvm (LXF101)
    "gpu-no-uvm-rule": 20,   # uvm mounted, its rule missing (LXF100)
    "gpu-no-rules": 15,      # every NVIDIA node bind mounted, no rule at all (LXF100 x4)
    "tun-missing": 15,       # bind mount, no rule (LXF100)
    "gpu-devn": 5,           # healthy
    "tun-ok": 5,             # healthy
    "plain": 10,             # healthy
}
BROKEN = frozenset(("gpu-stale-uvm", "gpu-no-uvm-rule", "gpu-no-rules", "tun-missing"))
HEALTHY = frozenset(("gpu-devn", "tun-ok", "plain"))


def _ct_lines(kind: str, rng: random.Random, vmid: int) -> tuple[list[str], bool]:
    """(main-section lines, privileged-and-has-raw-lines) of one container of `kind`."""
    name = f"{kind.split('-')[0]}-{vmid}"
    desc = ()
    if rng.random() < 0.15:
        desc = (f"Owner%3A team-{vmid % 17}", "Managed by ansible")
    if kind.startswith("gpu-"):
        if kind == "gpu-devn":
            unpriv = rng.random() < 0.5
            extra = ["dev0: /dev/nvidia0", "dev1: /dev/nvidiactl", "dev2: /dev/nvidia-uvm",
                     "dev3: /dev/nvidia-uvm-tools"]
            return _head(rng, vmid, name, unpriv, "nesting=1", extra, desc), False
        rules = ["lxc.cgroup2.devices.allow: c 195:* rwm"]
        if kind == "gpu-stale-uvm":
            rules.append(f"lxc.cgroup2.devices.allow: c {rng.choice((508, 509, 510))}:* rwm")
        elif kind == "gpu-current-uvm":
            rules.append("lxc.cgroup2.devices.allow: c 511:* rwm")
        elif kind == "gpu-no-rules":
            rules = []
        elif kind == "gpu-path-rules":
            rules = ["lxc.cgroup2.devices.allow: /dev/nvidia0 rwm", "lxc.cgroup2.devices.allow: /dev/nvidiactl rwm",
                     "lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm",
                     "lxc.cgroup2.devices.allow: /dev/nvidia-uvm-tools rwm"]
        if rng.random() < 0.3:
            rules.append("lxc.cgroup2.devices.allow: c 226:* rwm")
            mounts = GPU_MOUNTS + ["lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir"]
        else:
            mounts = list(GPU_MOUNTS)
        return _head(rng, vmid, name, False, "nesting=1", description=("GPU inference",) + desc) + rules + mounts, True
    if kind == "tun-missing":
        return _head(rng, vmid, name, False, None, description=desc) + [TUN_MOUNT], True
    if kind == "tun-ok":
        return _head(rng, vmid, name, rng.random() < 0.3, "nesting=1" if rng.random() < 0.5 else None,
                     description=desc) + ["lxc.cgroup2.devices.allow: c 10:200 rwm", TUN_MOUNT], True
    if kind == "tun-v1-key":
        return _head(rng, vmid, name, False, None, description=desc) + ["lxc.cgroup.devices.allow: c 10:200 rwm",
                                                                  TUN_MOUNT], True
    if kind == "unpriv-devn":
        extra = ["dev0: /dev/dri/renderD128,gid=104"]
        if rng.random() < 0.4:
            extra.append("dev1: /dev/dri/card0,gid=44")
        return _head(rng, vmid, name, True, "nesting=1", extra, desc), False
    if kind == "fuse-feature":
        return _head(rng, vmid, name, rng.random() < 0.7, "fuse=1,nesting=1", description=desc), False
    if kind == "usb-serial":
        return _head(rng, vmid, name, False, None, description=("zigbee stick",) + desc) + [
            "lxc.cgroup2.devices.allow: c 188:* rwm",
            "lxc.mount.entry: /dev/ttyUSB0 dev/ttyUSB0 none bind,optional,create=file"], True
    if kind == "over-broad":
        return _head(rng, vmid, name, False, "nesting=1", description=desc) + [
            "lxc.cgroup2.devices.allow: a", "lxc.cap.drop:", "lxc.mount.auto: proc:rw sys:rw"], True
    if kind == "locked":
        head = _head(rng, vmid, name, True, None, description=desc)
        head.insert(next(i for i, l in enumerate(head) if l.startswith("memory:")), "lock: backup")
        return head, False
    return _head(rng, vmid, name, rng.random() < 0.8, "nesting=1" if rng.random() < 0.5 else None, description=desc), False


def _config_text(kind: str, rng: random.Random, vmid: int) -> str:
    main, _ = _ct_lines(kind, rng, vmid)
    # snapshot sections: copies of the main section as it was (Proxmox keeps the parent chain)
    nsnap = rng.choices((0, 1, 2, 3), weights=(75, 13, 8, 4))[0]
    sections = []
    parent = None
    for k in range(nsnap):
        snap = f"snap{k}-{rng.choice(('pre-upgrade', 'before-driver', 'weekly', 'test'))}"
        body = [l for l in main if not l.startswith(("#", "lock:"))]
        if parent:
            body.insert(1, f"parent: {parent}")
        body.append(f"snaptime: {1_760_000_000 + vmid * 10 + k}")
        sections.append(f"\n[{snap}]\n" + "\n".join(body) + "\n")
        parent = snap
    if parent:  # the main section names its newest snapshot
        at = next(i for i, l in enumerate(main) if l.startswith("ostype:")) + 1
        main.insert(at, f"parent: {parent}")
    if rng.random() < 0.02:
        sections.append(f"\n[pve:pending]\nmemory: {rng.choice((2048, 4096))}\n")
    return "\n".join(main) + "\n" + "".join(sections)


def make_pve_snapshot(root: str, n: int, seed: int = 8, cluster_share: float = 0.2,
                      kinds: dict[str, int] | None = None, kind_of: dict[str, str] | None = None) -> dict[str, int]:
    """A Proxmox VE host snapshot with `n` containers under `root` (laid out like
    examples/pve-gpu-host: etc/pve/lxc/*.conf plus etc/pve/nodes/pve{2,3}/lxc/*.conf
    for the cluster's other nodes, proc/devices with nvidia-uvm at 511,
    proc/driver/nvidia/version, proc/self/mountinfo (pure cgroup2),
    .lxcfix/pveversion). Deterministic for a seed. Returns kind -> count. kinds: the mix
    (default KINDS; BROKEN_KINDS for the broken-heavy one); kind_of: filled with vmid -> kind."""
    rng = random.Random(seed)
    for rel in ("proc/devices", "proc/driver/nvidia/version", "proc/self/mountinfo", ".lxcfix/pveversion"):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(EXAMPLE_HOST, rel), os.path.join(root, rel))
    dirs = {"local": os.path.join(root, "etc/pve/lxc"),
            "pve2": os.path.join(root, "etc/pve/nodes/pve2/lxc"),
            "pve3": os.path.join(root, "etc/pve/nodes/pve3/lxc")}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
    names, weights = zip(*(kinds or KINDS).items())
    counts: dict[str, int] = {k: 0 for k in names}
    for i in range(n):
        vmid = 100 + i
        kind = rng.choices(names, weights=weights)[0]
        counts[kind] += 1
        if kind_of is not None:
            kind_of[str(vmid)] = kind
        r = rng.random()
        where = "local" if r >= cluster_share else ("pve2" if r < cluster_share / 2 else "pve3")
        with open(os.path.join(dirs[where], f"{vmid}.conf"), "w") as f:
            f.write(_config_text(kind, rng, vmid))
    return counts
