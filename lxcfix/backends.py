"""Proxmox VE (pct, /etc/pve) and plain LXC (lxc-*, /var/lib/lxc): where
configs live and how a container is started, stopped and entered.

    pve = Proxmox()                     configs: /etc/pve/lxc/<vmid>.conf, /etc/pve/nodes/*/lxc/<vmid>.conf
    pve.start(transport, "200")         -> Result of ["pct", "start", "200"]
    Lxc().config_path("web")            -> "/var/lib/lxc/web/config"

Every command is an argv list; container ids are validated before use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .bounded import excerpt
from .errors import BadInput
from .model import LXC_NAME, VMID, Result
from .transport import ContainerExec, Transport, env_path

if TYPE_CHECKING:
    from .sweep import Live


def _listdir(transport: Transport, path: str) -> list[str]:
    try:
        return transport.listdir(path)
    except OSError:
        return []


class LiveTools:
    """Changing a running container in place, through LXC's command socket
    (Proxmox's containers are LXC containers named by vmid)."""

    name: str = ""

    def lxc_args(self, ct: str) -> list[str]:
        raise NotImplementedError

    def status_argv(self, ct: str) -> list[str]:
        raise NotImplementedError

    def pid_argv(self, ct: str) -> list[str]:
        return ["lxc-info", *self._lxc_args(ct), "-p", "-H"]

    def _lxc_args(self, ct: str) -> list[str]:
        return ["-n", ct]

    def live_template(self) -> "Live":
        """The same argv, with `{ct}` for the container: what a sweep runs for every container."""
        from . import bpf, sweep

        return sweep.Live(self.status_argv("{ct}"), self.pid_argv("{ct}"), bpf.cgroup_candidates(self.name, "{ct}"))

    def init_pid(self, t: Transport, ct: str) -> int | None:
        r = t.run(self.pid_argv(self.validate(ct)))
        text = r.stdout.strip()
        return int(text) if r.ok and text.isascii() and text.isdigit() and len(text) < 12 else None

    def cgroup_set(self, t: Transport, ct: str, key: str, value: str) -> Result:
        return t.run(["lxc-cgroup", *self.lxc_args(ct), key, value])

    def device_add(self, t: Transport, ct: str, path: str, dest: str) -> Result:
        return t.run(["lxc-device", *self.lxc_args(ct), "add", path, dest])

    def device_del(self, t: Transport, ct: str, dest: str) -> Result:
        return t.run(["lxc-device", *self.lxc_args(ct), "del", dest])


@dataclass
class Proxmox(LiveTools):
    name = "pve"
    flavor = "pve"
    pve_dir: str = field(default_factory=lambda: env_path("LXCFIX_PVE_DIR", "/etc/pve"))

    def unusable(self, transport: Transport) -> dict[str, str]:
        """Proxmox names its containers by vmid: a config that is no vmid's is no container of pct's."""
        return {}

    def validate(self, ct: str) -> str:
        if not VMID.match(ct or ""):
            raise BadInput(f"not a Proxmox container id (vmid): '{excerpt(str(ct))}'")
        return ct

    def list(self, transport: Transport) -> dict[str, str]:
        """vmid -> config path. /etc/pve/lxc is this node's; nodes/*/lxc holds the cluster's."""
        found: dict[str, str] = {}
        dirs = [f"{self.pve_dir}/lxc"] + [
            f"{self.pve_dir}/nodes/{node}/lxc" for node in _listdir(transport, f"{self.pve_dir}/nodes")
        ]
        for d in dirs:
            for entry in _listdir(transport, d):
                vmid = entry[:-5] if entry.endswith(".conf") else ""
                if VMID.match(vmid):
                    found.setdefault(vmid, f"{d}/{entry}")
        return dict(sorted(found.items(), key=lambda kv: int(kv[0])))

    def node_of(self, path: str) -> str | None:
        m = re.match(re.escape(self.pve_dir) + r"/nodes/([^/]+)/lxc/", path)
        return m.group(1) if m else None

    def config_path(self, ct: str) -> str:
        return f"{self.pve_dir}/lxc/{self.validate(ct)}.conf"

    def lock_path(self, ct: str) -> str:
        return f"{env_path('LXCFIX_LOCK_DIR', '/run/lock/lxc')}/pve-config-{self.validate(ct)}.lock"

    def start(self, t: Transport, ct: str) -> Result:
        return t.run(["pct", "start", self.validate(ct)], timeout=120)

    def stop(self, t: Transport, ct: str) -> Result:
        return t.run(["pct", "stop", self.validate(ct)], timeout=120)

    def status_argv(self, ct: str) -> list[str]:
        # What `pct status` asks too, without its Perl start-up (~0.3 s a container on a host):
        # pve-container runs each container as the LXC container named by its vmid.
        return ["lxc-info", "-s", "-H", "-n", ct]

    def status(self, t: Transport, ct: str) -> str:
        """running | stopped | ... as lxc-info says; a container never started since boot has
        no LXC state ("doesn't exist"): stopped; anything else unknown."""
        r = t.run(self.status_argv(self.validate(ct)))
        if r.ok and re.fullmatch(r"[A-Z]{1,16}", r.stdout.strip()):
            return r.stdout.strip().lower()
        return "stopped" if "doesn't exist" in (r.stderr + r.stdout) else "unknown"

    def exec(self, t: Transport, ct: str) -> ContainerExec:
        return ContainerExec(inner=t, ct=self.validate(ct), backend="pve")

    def cgroup(self, ct: str) -> str:
        return f"/sys/fs/cgroup/lxc/{self.validate(ct)}"

    def lxc_args(self, ct: str) -> list[str]:
        """A Proxmox container is an LXC container named by its vmid in the default lxcpath."""
        return ["-n", self.validate(ct)]


@dataclass
class Lxc(LiveTools):
    name = "lxc"
    flavor = "lxc"
    lxcpath: str = field(default_factory=lambda: env_path("LXCFIX_LXC_PATH", "/var/lib/lxc"))

    def validate(self, ct: str) -> str:
        if not LXC_NAME.match(ct or "") or ".." in ct:
            raise BadInput(f"not an LXC container name: '{excerpt(str(ct))}'")
        return ct

    def list(self, transport: Transport) -> dict[str, str]:
        found = {}
        for name in _listdir(transport, self.lxcpath):
            if LXC_NAME.match(name) and "config" in _listdir(transport, f"{self.lxcpath}/{name}"):
                found[name] = f"{self.lxcpath}/{name}/config"
        return found

    def unusable(self, transport: Transport) -> dict[str, str]:
        """The containers list() leaves out because lxcfix cannot act on their name ('a b',
        'tëst', one with an ESC byte: LXC accepts them): name -> why (LXF132)."""
        found = {}
        for name in _listdir(transport, self.lxcpath):
            if (not LXC_NAME.match(name) or ".." in name) and "config" in _listdir(transport,
                                                                                   f"{self.lxcpath}/{name}"):
                found[name] = ("its name is not one lxcfix passes to lxc-* commands, paths or cgroup names "
                               "(letters, digits, '_', '.', '-'; at most 64, starting with a letter or digit)")
        return found

    def node_of(self, path: str) -> str | None:
        return None

    def config_path(self, ct: str) -> str:
        return f"{self.lxcpath}/{self.validate(ct)}/config"

    def lock_path(self, ct: str) -> str:
        return f"{env_path('LXCFIX_LOCK_DIR', '/run/lock/lxc')}/lxcfix-{self.validate(ct)}.lock"

    def start(self, t: Transport, ct: str) -> Result:
        return t.run(["lxc-start", "-n", self.validate(ct), "-P", self.lxcpath], timeout=120)

    def stop(self, t: Transport, ct: str) -> Result:
        return t.run(["lxc-stop", "-k", "-n", self.validate(ct), "-P", self.lxcpath], timeout=120)

    def status_argv(self, ct: str) -> list[str]:
        return ["lxc-info", "-s", "-H", "-n", ct, "-P", self.lxcpath]

    def _lxc_args(self, ct: str) -> list[str]:
        return ["-n", ct, "-P", self.lxcpath]

    def status(self, t: Transport, ct: str) -> str:
        r = t.run(self.status_argv(self.validate(ct)))
        return r.stdout.strip().lower() if r.ok else "unknown"

    def exec(self, t: Transport, ct: str) -> ContainerExec:
        return ContainerExec(inner=t, ct=self.validate(ct), backend="lxc", lxcpath=self.lxcpath)

    def cgroup(self, ct: str) -> str:
        return f"/sys/fs/cgroup/lxc.payload.{self.validate(ct)}"

    def lxc_args(self, ct: str) -> list[str]:
        return ["-n", self.validate(ct), "-P", self.lxcpath]


def detect(transport: Transport) -> Proxmox | Lxc:
    """Proxmox when its config filesystem is there, else plain LXC."""
    pve = Proxmox()
    try:
        if transport.isdir(pve.pve_dir):
            return pve
    except OSError:
        pass
    return Lxc()


def choose(transport: Transport, backend: str = "auto", pve_dir: str | None = None,
           lxc_path: str | None = None) -> Proxmox | Lxc:
    """An inventory's lxcfix_backend when given ("pve", "lxc"), else detect(); its
    lxcfix_pve_dir / lxcfix_lxc_path honoured."""
    if backend == "pve":
        return Proxmox(pve_dir=pve_dir) if pve_dir else Proxmox()
    if backend == "lxc":
        return Lxc(lxcpath=lxc_path) if lxc_path else Lxc()
    if pve_dir:
        try:
            if transport.isdir(pve_dir):
                return Proxmox(pve_dir=pve_dir)
        except OSError:
            pass
    found = detect(transport)
    if found.name == "lxc" and lxc_path:
        return Lxc(lxcpath=lxc_path)
    return found
