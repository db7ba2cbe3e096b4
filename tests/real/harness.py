"""Real LXC containers for the real test tier, in well under a second each.

Read /work/shared/design/TESTING.md first. The rules this file keeps:
- network: every container gets `lxc.net.0.type = empty` (own netns, loopback
  only); a config asking for `lxc.net.* = none` or any other network is refused.
- init: our own (`sleep infinity` by default), never a template's.
- rootfs: hand-made under /var/lib/lxc/<name>/rootfs: a few dirs, `/usr`
  bind-mounted read-only from the host, bin/lib/lib64/sbin symlinks into it,
  one-line passwd and group.
- names: `lxf-<run id>-<n>`, unique per test run; every container made is
  destroyed at teardown (and at exit, as a last resort): `lxc-stop -k`, its
  directory removed (only when nothing is mounted under it), cgroups removed.

Needs root, LXC and a pure cgroup v2 /sys/fs/cgroup (tests/run provides one in
a private mount namespace); see `unavailable_reason()`.

    c = make_container(["lxc.cgroup2.devices.allow = c 10:200 rwm",
                        "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"])
    assert c.bpf_attached()
    assert open_errno(c, "/dev/net/tun") == "ok"
    c.destroy()
"""

from __future__ import annotations

import atexit
import json
import os
import random
import secrets
import shutil
import stat
import subprocess
import time
from typing import Iterable, Sequence

from lxcfix.model import ProbeNode, Result
from lxcfix.transport import Local

LXCPATH = "/var/lib/lxc"
CGROUP_ROOT = "/sys/fs/cgroup"
COMMON_CONF = "/usr/share/lxc/config/common.conf"
HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_DIR = os.path.join(HERE, "bin")
RUN_ID = secrets.token_hex(3)
LOCAL = Local()


class HarnessError(RuntimeError):
    pass


def sh(argv: Sequence[str], timeout: float = 30, check: bool = False, env: dict | None = None) -> Result:
    if env is None:
        result = LOCAL.run(argv, timeout=timeout)
    else:
        try:
            p = subprocess.run(list(argv), capture_output=True, text=True, errors="surrogateescape",
                               timeout=timeout, stdin=subprocess.DEVNULL, env=env)
            result = Result(p.returncode, p.stdout, p.stderr)
        except FileNotFoundError:
            result = Result(127, "", f"{argv[0]}: command not found")
    if check and not result.ok:
        raise HarnessError(f"{list(argv)} failed rc={result.rc}: {result.stderr.strip() or result.stdout.strip()}")
    return result


# ----------------------------------------------------------------- preconditions

def cgroup_layout(mountinfo: str | None = None) -> str:
    """"v2" when /sys/fs/cgroup is a cgroup2 mount with no cgroup mount below it."""
    if mountinfo is None:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
    top = None
    below = False
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mnt, fstype = fields[4], right.split()[0]
        if mnt == CGROUP_ROOT:
            top = fstype
            below = False  # a later mount on the same point hides the earlier ones
        elif mnt.startswith(CGROUP_ROOT + "/") and fstype in ("cgroup", "cgroup2"):
            below = True
    if top == "cgroup2" and not below:
        return "v2"
    if top is None:
        return "unknown"
    return "hybrid" if any(" - cgroup2 " in l for l in mountinfo.splitlines()) else "v1"


def unavailable_reason() -> str | None:
    """Why the real tier cannot run here, or None."""
    if os.geteuid() != 0:
        return "real tier needs root (run tests/run as root)"
    for tool in ("lxc-start", "lxc-attach", "lxc-stop", "lxc-info", "bpftool"):
        if shutil.which(tool) is None:
            return f"real tier needs LXC and bpftool: {tool} not found on PATH"
    if not os.path.exists(COMMON_CONF):
        return f"real tier needs LXC's {COMMON_CONF}"
    layout = cgroup_layout()
    if layout != "v2":
        return (f"/sys/fs/cgroup is not a pure cgroup v2 mount (layout: {layout}); LXC would ignore "
                "cgroup2 device rules. Run through tests/run, which mounts one in a private namespace")
    return None


def ensure_tun() -> str:
    """/dev/net/tun on the host (10:200), loading or making it if missing."""
    path = "/dev/net/tun"
    if not os.path.exists(path):
        sh(["modprobe", "tun"])
    if not os.path.exists(path):
        os.makedirs("/dev/net", exist_ok=True)
        mknod(path, 10, 200, mode=0o666)
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (10, 200):
        raise HarnessError(f"{path} is not the char device 10:200")
    return path


def mknod(path: str, major: int, minor: int, mode: int = 0o666, kind: str = "c") -> str:
    """A device node on the host, e.g. mknod(tmp/"nvidia-uvm", 511, 0): driverless
    when no driver owns that major (open gives ENXIO once the cgroup allows it)."""
    fmt = stat.S_IFCHR if kind == "c" else stat.S_IFBLK
    os.mknod(path, fmt | mode, os.makedev(major, minor))
    os.chmod(path, mode)  # not subject to umask
    return str(path)


def driverless_uvm(directory) -> tuple[str, int, str]:
    """(node, major, proc_devices_file): a node with a free dynamic-range major at
    <directory>/devs/nvidia-uvm, and a /proc/devices text naming that major
    nvidia-uvm, for LXCFIX_PROC_DEVICES. Open gives EPERM denied, ENXIO allowed."""
    major = free_char_major(511)
    os.makedirs(os.path.join(directory, "devs"), exist_ok=True)
    node = mknod(os.path.join(directory, "devs", "nvidia-uvm"), major, 0)
    proc = os.path.join(directory, "proc-devices")
    with open(proc, "w") as f:
        f.write(f"Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n136 pts\n195 nvidia\n{major} nvidia-uvm\n\n"
                "Block devices:\n  8 sd\n")
    return node, major, proc


def char_majors_in_use(proc_devices: str | None = None) -> set[int]:
    if proc_devices is None:
        with open("/proc/devices") as f:
            proc_devices = f.read()
    used: set[int] = set()
    section = None
    for line in proc_devices.splitlines():
        if line.startswith("Character devices"):
            section = "c"
        elif line.startswith("Block devices"):
            section = "b"
        elif section == "c" and line.strip():
            used.add(int(line.split()[0]))
    return used


def free_char_major(preferred: int = 511) -> int:
    """A char major no driver owns, 511 if free (the dynamic range 511..384)."""
    used = char_majors_in_use()
    for major in [preferred, *range(511, 383, -1)]:
        if major not in used:
            return major
    raise HarnessError("no free char major in 384..511")


# ----------------------------------------------------------------- rootfs

def make_rootfs(path: str) -> str:
    """The hand-made rootfs: dirs, symlinks into /usr, passwd and group.
    /usr itself is an empty mount point; the config bind-mounts the host's."""
    for d in ("usr", "etc", "dev", "proc", "sys", "tmp", "root", "run", "var/tmp", "mnt", "home"):
        os.makedirs(os.path.join(path, d), exist_ok=True)
    os.chmod(os.path.join(path, "tmp"), 0o1777)
    for d in ("bin", "lib", "lib64", "sbin"):
        link = os.path.join(path, d)
        if not os.path.lexists(link):
            os.symlink(f"usr/{d}", link)
    with open(os.path.join(path, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(os.path.join(path, "etc/group"), "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\n")
    with open(os.path.join(path, "etc/hostname"), "w") as f:
        f.write("lxf\n")
    return path


def mounts_under(path: str) -> list[str]:
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == path or mnt.startswith(path + "/"):
                found.append(mnt)
    return found


def safe_rmtree(path: str) -> None:
    """rm -rf, refusing when anything is mounted under path (a bind-mounted /usr!)."""
    if not os.path.lexists(path):
        return
    busy = mounts_under(path)
    if busy:
        raise HarnessError(f"refusing to remove {path}: mounted under it: {busy}")
    shutil.rmtree(path)


def _init_argv(init: Sequence[str]) -> str:
    argv = list(init)
    if not argv:
        raise ValueError("init must not be empty")
    exe = argv[0]
    if not exe.startswith("/"):
        exe = shutil.which(exe, path="/usr/bin:/usr/sbin") or exe
    real = os.path.realpath(exe)
    if not real.startswith("/usr/") or not os.access(real, os.X_OK):
        raise ValueError(f"init {argv[0]!r} must be an executable on the host's /usr (it is bind-mounted)")
    for a in argv:
        if not a or any(ch.isspace() or ch in "'\"\\" for ch in a):
            raise ValueError(f"init argument {a!r}: lxc.init.cmd is split on spaces; no spaces or quotes")
    return " ".join([exe, *argv[1:]])


def check_lines(lines: Iterable[str]) -> list[str]:
    out = []
    for line in lines:
        if "\n" in line:
            raise ValueError(f"config line with a newline: {line!r}")
        key = line.split("=", 1)[0].strip()
        if key.startswith("lxc.net") or key.startswith("lxc.network"):
            raise ValueError(f"refusing {line!r}: containers here only get lxc.net.0.type = empty (TESTING.md)")
        out.append(line)
    return out


# ----------------------------------------------------------------- containers

class Container:
    """One LXC container in the default lxcpath, driven with lxc-* commands."""

    def __init__(self, name: str, rootfs: str | None = None, init: Sequence[str] = ("sleep", "infinity")):
        self.name = name
        self.dir = os.path.join(LXCPATH, name)
        self.config_path = os.path.join(self.dir, "config")
        self.log_path = os.path.join(self.dir, "lxc.log")
        self.rootfs = rootfs or os.path.join(self.dir, "rootfs")
        self.init = tuple(init)
        self.extra_lines: list[str] = []
        self.destroyed = False

    def __repr__(self) -> str:
        return f"<Container {self.name}>"

    # config
    def base_lines(self) -> list[str]:
        return [
            f"lxc.include = {COMMON_CONF}",
            f"lxc.uts.name = {self.name}",
            f"lxc.rootfs.path = dir:{self.rootfs}",
            "lxc.mount.entry = /usr usr none bind,ro 0 0",
            "lxc.autodev = 1",
            "lxc.net.0.type = empty",
            f"lxc.init.cmd = {_init_argv(self.init)}",
        ]

    def write_config(self, extra_lines: Sequence[str] = ()) -> str:
        """(Re)write the whole config: base lines, then extra_lines in order.
        A running container sees it at its next start (see restart())."""
        self.extra_lines = check_lines(extra_lines)
        text = "\n".join(self.base_lines() + self.extra_lines) + "\n"
        os.makedirs(self.dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(text)
        return text

    def config_text(self) -> str:
        with open(self.config_path) as f:
            return f.read()

    # lifecycle
    def start(self, timeout: float = 10) -> None:
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
        r = sh(["lxc-start", "-n", self.name, "-l", "INFO", "-o", self.log_path], timeout=timeout)
        if not r.ok or not self.wait("RUNNING", timeout):
            raise HarnessError(f"lxc-start {self.name} failed rc={r.rc}: {r.stderr.strip()}\n{self.log_errors()}")

    def stop(self, timeout: float = 10) -> None:
        """lxc-stop -k (a clean stop can wait 60 s)."""
        if not self.running():
            return
        sh(["lxc-stop", "-k", "-n", self.name], timeout=timeout)
        if not self.wait("STOPPED", timeout):
            raise HarnessError(f"{self.name} did not stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def wait(self, state: str, timeout: float = 10) -> bool:
        return sh(["lxc-wait", "-n", self.name, "-s", state, "-t", str(int(max(1, timeout)))],
                  timeout=timeout + 5).ok

    def state(self) -> str:
        r = sh(["lxc-info", "-n", self.name, "-s", "-H"])
        return r.stdout.strip() if r.ok else "UNKNOWN"

    def running(self) -> bool:
        return self.state() == "RUNNING"

    def init_pid(self) -> int:
        r = sh(["lxc-info", "-n", self.name, "-p", "-H"], check=True)
        return int(r.stdout.strip())

    def attach(self, argv: Sequence[str], timeout: float = 30) -> Result:
        """lxc-attach -n NAME -- argv (what lxcfix's ContainerExec runs for plain LXC)."""
        return sh(["lxc-attach", "-n", self.name, "--", *argv], timeout=timeout)

    def log_errors(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(l for l in f if " ERROR " in l)
        except FileNotFoundError:
            return ""

    # cgroup / BPF
    def init_cgroup(self) -> str:
        """The cgroup v2 directory of the container's init process."""
        with open(f"/proc/{self.init_pid()}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return os.path.normpath(CGROUP_ROOT + "/" + line[3:].strip())
        raise HarnessError(f"{self.name}: init has no cgroup v2 path")

    def cgroup_path(self) -> str:
        """The cgroup the device program is attached to: the init's cgroup or the
        nearest ancestor with a cgroup_device program (plain LXC 5:
        /sys/fs/cgroup/lxc.payload.NAME; Proxmox layout: /sys/fs/cgroup/lxc/VMID,
        init in .../ns). Falls back to the init's cgroup."""
        start = path = self.init_cgroup()
        while path != CGROUP_ROOT and path.startswith(CGROUP_ROOT + "/"):
            if any(_is_device_prog(p) for p in bpf_programs(path)):
                return path
            path = os.path.dirname(path)
        return start

    def bpf_programs(self) -> list[dict]:
        return bpf_programs(self.cgroup_path())

    def bpf_attached(self) -> bool:
        """A cgroup_device program is attached to the container's cgroup
        (so a silently ignored device rule cannot pass a test)."""
        return any(_is_device_prog(p) for p in self.bpf_programs())

    def bpf_dump(self) -> str:
        """`bpftool prog dump xlated` of the attached device program(s)."""
        out = []
        for p in self.bpf_programs():
            if _is_device_prog(p):
                out.append(sh(["bpftool", "prog", "dump", "xlated", "id", str(p["id"])], check=True).stdout)
        return "".join(out)

    # teardown
    def cgroup_dirs(self) -> list[str]:
        return [f"{CGROUP_ROOT}/lxc.payload.{self.name}", f"{CGROUP_ROOT}/lxc.monitor.{self.name}"]

    def destroy(self) -> None:
        if self.destroyed:
            return
        try:
            if self.running():
                sh(["lxc-stop", "-k", "-n", self.name], timeout=15)
                self.wait("STOPPED", 10)
        finally:
            for d in self.cgroup_dirs():
                rmdir_cgroup(d)
            safe_rmtree(self.dir)
            self.destroyed = True
            _LIVE.discard(self)


def _is_device_prog(p: dict) -> bool:
    return p.get("attach_type") in ("cgroup_device", "device")


def bpf_programs(cgroup: str) -> list[dict]:
    """Programs attached to one cgroup (bpftool -j cgroup show)."""
    r = sh(["bpftool", "-j", "cgroup", "show", cgroup])
    if not r.ok or not r.stdout.strip():
        return []
    return json.loads(r.stdout)


def rmdir_cgroup(path: str) -> None:
    """Remove a cgroup tree bottom-up; leaves what is busy (has processes)."""
    if not os.path.isdir(path) or not path.startswith(CGROUP_ROOT + "/"):
        return
    for root, dirs, _files in os.walk(path, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def cleanup_shared_cgroups() -> None:
    """lxc.pivot (and empty lxc / lxc.monitor parents of the Proxmox layout), only
    when no LXC container runs here at all, so another run's start is not raced."""
    try:
        names = os.listdir(CGROUP_ROOT)
    except OSError:
        return
    if any(n.startswith(("lxc.payload.", "lxc.monitor.")) for n in names):
        return
    for n in ("lxc.pivot", "lxc", "lxc.monitor"):
        p = os.path.join(CGROUP_ROOT, n)
        if os.path.isdir(p) and not any(os.path.isdir(os.path.join(p, c)) for c in os.listdir(p)):
            try:
                os.rmdir(p)
            except OSError:
                pass


_LIVE: set[Container] = set()
_COUNTER = iter(range(1, 1 << 30))


@atexit.register
def _destroy_leftovers() -> None:
    for c in list(_LIVE):
        try:
            c.destroy()
        except Exception:
            pass


def new_name() -> str:
    while True:
        name = f"lxf-{RUN_ID}-{next(_COUNTER)}"
        if not os.path.lexists(os.path.join(LXCPATH, name)):
            return name


def make_container(extra_lines: Sequence[str] = (), init: Sequence[str] = ("sleep", "infinity"),
                   name: str | None = None, start: bool = True) -> Container:
    """Create (and by default start) a container; the caller destroys it
    (the container_factory fixture does so for you)."""
    name = name or new_name()
    if os.path.lexists(os.path.join(LXCPATH, name)):
        raise HarnessError(f"{LXCPATH}/{name} already exists")
    c = Container(name, init=init)
    _LIVE.add(c)
    try:
        make_rootfs(c.rootfs)
        c.write_config(extra_lines)
        if start:
            c.start()
    except BaseException:
        c.destroy()
        raise
    return c


class Factory:
    """make_container() that remembers what it made; destroy_all() at teardown."""

    def __init__(self) -> None:
        self.made: list[Container] = []

    def __call__(self, extra_lines: Sequence[str] = (), init: Sequence[str] = ("sleep", "infinity"),
                 name: str | None = None, start: bool = True) -> Container:
        c = make_container(extra_lines, init=init, name=name, start=start)
        self.made.append(c)
        return c

    make_container = __call__

    def destroy_all(self) -> None:
        errors = []
        for c in reversed(self.made):
            try:
                c.destroy()
            except Exception as e:  # keep going: destroy the others
                errors.append(f"{c.name}: {e}")
        self.made.clear()
        if errors:
            raise HarnessError("teardown: " + "; ".join(errors))


# ----------------------------------------------------------------- probing

_PROBE_PY = r"""
import errno, json, os, stat, sys
path, mode = sys.argv[1], sys.argv[2]
flags = {"rw": os.O_RDWR, "r": os.O_RDONLY, "w": os.O_WRONLY}[mode] | os.O_NOCTTY
out = {"exists": False, "is_char": False, "major": None, "minor": None, "open": "ENOENT"}
try:
    st = os.stat(path)
except OSError as e:
    out["open"] = errno.errorcode.get(e.errno, str(e.errno))
else:
    out["exists"] = True
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        out["is_char"] = stat.S_ISCHR(st.st_mode)
        out["major"], out["minor"] = os.major(st.st_rdev), os.minor(st.st_rdev)
    try:
        os.close(os.open(path, flags))
        out["open"] = "ok"
    except OSError as e:
        out["open"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


def probe_node(container: Container, path: str, mode: str = "rw") -> ProbeNode:
    """stat() and open() `path` inside the container, with the host's python3
    (/usr is bind-mounted). The path travels as an argv item, never in a shell string."""
    if mode not in ("rw", "r", "w"):
        raise ValueError(mode)
    r = container.attach(["/usr/bin/python3", "-I", "-c", _PROBE_PY, path, mode])
    if not r.ok:
        raise HarnessError(f"probe in {container.name} failed rc={r.rc}: {r.stderr.strip()}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return ProbeNode(path=path, exists=d["exists"], is_char=d["is_char"], major=d["major"],
                     minor=d["minor"], open=d["open"])


def open_errno(container: Container, path: str, mode: str = "rw") -> str:
    """"ok" or the errno name ("EPERM", "EACCES", "ENXIO", "ENOENT", ...) of
    open(path, O_RDWR) inside the container."""
    return probe_node(container, path, mode).open


# ----------------------------------------------------------------- Proxmox (pct shim)

class PveContainer(Container):
    """A container driven through the pct shim: config in $LXCFIX_PVE_DIR/lxc/VMID.conf,
    /var/lib/lxc/VMID/config generated by `pct start`. Rootfs at /var/lib/lxc/VMID/rootfs."""

    def __init__(self, pve: "Pve", vmid: str):
        super().__init__(vmid)
        self.pve = pve
        self.vmid = vmid
        self.conf_path = os.path.join(pve.conf_dir, f"{vmid}.conf")

    def write_conf(self, text: str) -> None:
        with open(self.conf_path, "w") as f:
            f.write(text)

    def conf_text(self) -> str:
        with open(self.conf_path) as f:
            return f.read()

    def write_config(self, extra_lines: Sequence[str] = ()) -> str:
        raise HarnessError("a Proxmox container's config is generated by `pct start`; edit write_conf()")

    def start(self, timeout: float = 10) -> None:
        r = self.pve.pct("start", self.vmid, timeout=timeout + 5)
        if not r.ok:
            raise HarnessError(f"pct start {self.vmid} failed rc={r.rc}: {r.stderr.strip()}\n{self.log_errors()}")

    def stop(self, timeout: float = 10) -> None:
        if not self.running():
            return
        r = self.pve.pct("stop", self.vmid, timeout=timeout + 5)
        if not r.ok:
            raise HarnessError(f"pct stop {self.vmid} failed rc={r.rc}: {r.stderr.strip()}")

    def exec(self, argv: Sequence[str], timeout: float = 30) -> Result:
        return self.pve.pct("exec", self.vmid, "--", *argv, timeout=timeout)

    def cgroup_dirs(self) -> list[str]:
        return [f"{CGROUP_ROOT}/lxc/{self.vmid}", f"{CGROUP_ROOT}/lxc.monitor/{self.vmid}",
                *super().cgroup_dirs()]

    def destroy(self) -> None:
        """As Container.destroy, and the devN passthrough tmpfs the pct shim mounted goes too."""
        if self.destroyed:
            return
        try:
            if self.running():
                sh(["lxc-stop", "-k", "-n", self.name], timeout=15)
                self.wait("STOPPED", 10)
        finally:
            passthrough = os.path.join(self.dir, "passthrough")
            while passthrough in mounts_under(passthrough):
                if not sh(["umount", passthrough]).ok:
                    break
            super().destroy()


class Pve:
    """A fake /etc/pve ($LXCFIX_PVE_DIR) plus the pct shim; makes PveContainers
    with random vmids (unique per run) and destroys them in destroy_all()."""

    def __init__(self, pve_dir: str):
        self.dir = pve_dir
        self.conf_dir = os.path.join(pve_dir, "lxc")
        os.makedirs(self.conf_dir, exist_ok=True)
        self.made: list[PveContainer] = []

    def env(self) -> dict:
        env = dict(os.environ)
        env["LXCFIX_PVE_DIR"] = self.dir
        env["PATH"] = SHIM_DIR + os.pathsep + env.get("PATH", "")
        return env

    def pct(self, *args: str, timeout: float = 30) -> Result:
        return sh([os.path.join(SHIM_DIR, "pct"), *args], timeout=timeout, env=self.env())

    def new_vmid(self) -> str:
        while True:
            vmid = str(random.randint(200000, 899999))
            if not os.path.lexists(os.path.join(LXCPATH, vmid)) and \
               not os.path.exists(os.path.join(self.conf_dir, f"{vmid}.conf")):
                return vmid

    def make_ct(self, lines: Sequence[str] = (), vmid: str | None = None, hostname: str | None = None,
                start: bool = True, head: str | None = None) -> PveContainer:
        """Write VMID.conf (arch/hostname/ostype/rootfs, then `lines`, e.g.
        "lxc.cgroup2.devices.allow: c 10:200 rwm" or "dev0: /dev/net/tun") and
        optionally `pct start` it. `head` replaces the generated first lines."""
        vmid = vmid or self.new_vmid()
        if os.path.lexists(os.path.join(LXCPATH, vmid)):
            raise HarnessError(f"{LXCPATH}/{vmid} already exists")
        ct = PveContainer(self, vmid)
        _LIVE.add(ct)
        self.made.append(ct)
        make_rootfs(ct.rootfs)
        if head is None:
            head = (f"arch: amd64\nhostname: {hostname or 'lxf-' + RUN_ID + '-' + vmid}\n"
                    f"memory: 512\nostype: debian\nrootfs: {ct.rootfs},size=1G\nswap: 0\n")
        ct.write_conf(head + "".join(l + "\n" for l in lines))
        if start:
            ct.start()
        return ct

    def destroy_all(self) -> None:
        errors = []
        for ct in reversed(self.made):
            try:
                ct.destroy()
            except Exception as e:
                errors.append(f"{ct.vmid}: {e}")
        self.made.clear()
        if errors:
            raise HarnessError("teardown: " + "; ".join(errors))


def timed(fn, *args, **kw):
    t = time.perf_counter()
    value = fn(*args, **kw)
    return value, time.perf_counter() - t


# ----------------------------------------------------------------- unprivileged (idmapped) containers

MAPPED_ROOT = 100000  # Proxmox's default idmap: u|g 0 100000 65536
MAPPED_COUNT = 65536
IDMAP_LINES = (f"lxc.idmap = u 0 {MAPPED_ROOT} {MAPPED_COUNT}", f"lxc.idmap = g 0 {MAPPED_ROOT} {MAPPED_COUNT}")


def make_unprivileged_rootfs(path: str, users: Sequence[tuple[str, int, Sequence[str]]] = (),
                             groups: dict[str, int] | None = None, mapped_root: int = MAPPED_ROOT) -> str:
    """make_rootfs, plus the container's own groups ({"render": 104}) and users
    (("svc", 1000, ["render"]): a primary group of the same id, and those groups), every
    file owned by the mapped root (uid/gid 0 inside: mapped_root on the host)."""
    make_rootfs(path)
    groups = dict(groups or {})
    members: dict[str, list[str]] = {g: [] for g in groups}
    with open(os.path.join(path, "etc/passwd"), "a") as f:
        for name, uid, extra in users:
            f.write(f"{name}:x:{uid}:{uid}::/tmp:/bin/sh\n")
            for g in extra:
                members[g].append(name)
    with open(os.path.join(path, "etc/group"), "a") as f:
        for name, uid, _ in users:
            f.write(f"{name}:x:{uid}:\n")
        for g, gid in groups.items():
            f.write(f"{g}:x:{gid}:{','.join(members[g])}\n")
    os.lchown(path, mapped_root, mapped_root)
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), mapped_root, mapped_root)
    return path


def host_uid(container: Container) -> int:
    """The real uid, on the host, the container's init runs as (the mapped root when unprivileged)."""
    with open(f"/proc/{container.init_pid()}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise HarnessError(f"{container.name}: no Uid line for its init")


def make_unprivileged_container(extra_lines: Sequence[str] = (), users=(), groups=None,
                                init: Sequence[str] = ("sleep", "infinity"), name: str | None = None,
                                start: bool = True, idmap: Sequence[str] = IDMAP_LINES) -> Container:
    """An unprivileged plain-LXC container: `idmap` lines, a rootfs owned by the mapped
    root, the given users and groups. Started, its init runs as the mapped root on the host."""
    name = name or new_name()
    if os.path.lexists(os.path.join(LXCPATH, name)):
        raise HarnessError(f"{LXCPATH}/{name} already exists")
    c = Container(name, init=init)
    _LIVE.add(c)
    try:
        make_unprivileged_rootfs(c.rootfs, users, groups)
        c.write_config([*idmap, *extra_lines])
        if start:
            c.start()
            if host_uid(c) != MAPPED_ROOT:
                raise HarnessError(f"{name}: init runs as uid {host_uid(c)} on the host, not {MAPPED_ROOT}")
    except BaseException:
        c.destroy()
        raise
    return c


def make_unprivileged_ct(pve: "Pve", lines: Sequence[str] = (), users=(), groups=None,
                         start: bool = True) -> PveContainer:
    """A Proxmox `unprivileged: 1` container through the pct shim, its rootfs owned by the
    mapped root (so the shim gives it Proxmox's default idmap)."""
    ct = pve.make_ct(["unprivileged: 1", *lines], start=False)
    make_unprivileged_rootfs(ct.rootfs, users, groups)
    if start:
        ct.start()
        if host_uid(ct) != MAPPED_ROOT:
            raise HarnessError(f"CT {ct.vmid}: init runs as uid {host_uid(ct)} on the host, not {MAPPED_ROOT}")
    return ct


def open_errno_as(container: Container, path: str, uid: int, gid: int, mode: str = "rw") -> str:
    """open() inside the container as uid, in group gid only (setpriv from the host's /usr):
    "ok" or the errno name. EACCES: the mode/owner check refused; ENXIO: it reached the driver."""
    r = container.attach(["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={gid}",
                          "/usr/bin/python3", "-I", "-c", _PROBE_PY, path, mode])
    if not r.ok:
        raise HarnessError(f"open as {uid}:{gid} in {container.name} failed rc={r.rc}: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])["open"]


def driverless_dev_node(name_candidates: Sequence[str] = ("/dev/kfd",), minor: int = 0,
                        mode: int = 0o666) -> tuple[str, int]:
    """(path, major): a driverless node at the first of `name_candidates` the host does not
    have (a devN path must be under /dev), with a free dynamic-range major. The caller
    removes it (remove_dev_node). Like ensure_tun, this makes a node in the host's /dev."""
    for path in name_candidates:
        if not os.path.lexists(path):
            major = free_char_major(509)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return mknod(path, major, minor, mode=mode), major
    raise HarnessError(f"every candidate exists on this host: {list(name_candidates)}")


def remove_dev_node(path: str, major: int) -> None:
    """Remove a node driverless_dev_node made (only if it still is that node)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major:
        os.unlink(path)
