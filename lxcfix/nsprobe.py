"""The probe at the namespace floor: a running container looked at without running anything in it.

For each running container (found by file reads alone: `locate`), a child forked by lxcfix joins
the container's payload cgroup (LXC's, under the limit cgroup its device program is attached to:
`lxc.payload.NAME`, Proxmox's `lxc/VMID/ns`), its user namespace where it has one and its mount
namespace (ctypes `setns`: Python 3.11 has no os.setns), becomes the container's root, and then
stats and opens the nodes the container is given, reads /etc/group and /etc/passwd through the
container's root (bounded, regular files only) and tries each group-access open as that group's
user in a grandchild that drops to its uid and gids. It executes nothing from the container and
prints what templates/probe.sh prints, so probe.parse and probe.classify read both the same:

    lxcfix-probe 1
    node /dev/net/tun exists=1 char=1 major=10 minor=200 open=EPERM
    group render 104
    perm uid=65534 gid=104 mode=0660 /dev/dri/renderD128
    agroup render gid=104 name=render members=svc:1000
    access render uid=1000 gid=104 user=svc open=ENXIO via=python3 why=- /dev/dri/renderD128
    end

A container the floor cannot answer for prints `lxcfix-ns fallback <why>` instead (NVIDIA nodes,
whose cuInit and NVML need the container's own libraries; a container engine inside, which only
its own CLI lists; a payload cgroup that takes no process): the in-container probe runs for it.

Every child runs under a deadline (container_timeout()) and an output cap; past either, its
process group is killed (fence.CHILD_LIB) and the container gets its finding (LXF301, LXF206):
a FUSE node whose daemon never answers, a frozen cgroup, a huge /etc/group hold that child only.

    answers(Local(), backend, {"web": (["/dev/net/tun"], [("render", "/dev/dri/renderD128")])})
        -> ({("lxc-info", "-s", ...): Result(0, "RUNNING\\n", ""), ("lxc-info", ..., "-p", "-H"): Result(0, "4242\\n", ""),
             ("lxc-attach", "-n", "web", ..., "sh", "-c", <probe.sh>, ...): Result(0, "lxcfix-probe 1\\n...end\\n", "")},
            ["db"])    # the containers left to the in-container probe

The keys are the argv the scan would run; a transport answering from them (transport.Prefetched)
lets observe.run_probe and the rest read the floor's answers as the probe's.
"""

from __future__ import annotations

from . import memo
from .model import Result

TABLE_MAX = 1024 * 1024  # bytes of /etc/group or /etc/passwd read at most
LOCATE_DIRS_MAX = 256  # cgroups below the payload one searched for the init
PARALLEL = 8  # children at once (each is short; one held by the kernel holds one slot until its deadline)

# Runs in a child forked by lxcfix (stdlib only, after fence.CHILD_LIB): it never returns to the caller.
CHILD = r'''
import ctypes, errno, fnmatch, os, stat, sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded in the parent: nothing is dlopen'ed in a child

class Fallback(Exception):
    """The floor cannot answer for this container: the in-container probe runs instead."""

def _setns(fd, kind):
    if _LIBC.setns(fd, kind) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))

def _errname(e):
    return errno.errorcode.get(e.errno, "other") if isinstance(e, OSError) else "other"

def enter(pid, cgroup):
    """Join the container: its payload cgroup, user namespace (where it has its own), mount namespace;
    then be its root (uid and gid 0 there, no supplementary groups), at its /."""
    proc = "/proc/%d/" % pid
    try:
        mnt = os.open(proc + "ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        user = None
        if os.stat(proc + "ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
            user = os.open(proc + "ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise Fallback("its namespaces cannot be opened: " + _errname(e))
    try:
        fd = os.open(cgroup + "/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise Fallback("its cgroup takes no process: " + _errname(e))
    try:
        if user is not None:
            _setns(user, CLONE_NEWUSER)
        _setns(mnt, CLONE_NEWNS)
    except OSError as e:
        raise Fallback("setns: " + _errname(e))
    os.chdir("/")
    try:
        os.setgroups([])
    except OSError:
        pass  # a user namespace whose setgroups is "deny"
    os.setgid(0)
    os.setuid(0)

def node_line(p):
    """probe.sh's node line: stat, then open(O_RDWR|O_NOCTTY|O_NONBLOCK), never O_CREAT."""
    e, c, mj, mn = 0, 0, "-", "-"
    try:
        st = os.stat(p)
    except OSError as x:
        o = _errname(x)
    else:
        e, c = 1, int(stat.S_ISCHR(st.st_mode))
        if c or stat.S_ISBLK(st.st_mode):
            mj, mn = os.major(st.st_rdev), os.minor(st.st_rdev)
        try:
            os.close(os.open(p, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
            o = "ok"
        except OSError as x:
            o = _errname(x)
    return "node %s exists=%d char=%d major=%s minor=%s open=%s" % (p, e, c, mj, mn, o)

def table(path, cap):
    """The rows of a colon-separated table inside the container, read bounded: ([rows], why not whole)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return [], None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], "not-a-file"
        data = b""
        while len(data) <= cap:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > cap:
        return [], "table-too-large"
    text = data.decode("utf-8", "replace")
    return [l.split(":") for l in text.split("\n") if l], None

def number(text):
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/lib",
            "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu/nvidia/current")

def driver_line():
    """probe.sh's driver line: the file libcuda.so.1 / libnvidia-ml.so.1 lead to, else a libcuda.so.<version>."""
    for d in LIB_DIRS:
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith(("libcuda.so.", "libnvidia-ml.so.")))[:4096]
        except OSError:
            continue
        for pattern in ("libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so.*.*", "libnvidia-ml.so.*.*"):
            for n in [n for n in names if fnmatch.fnmatchcase(n, pattern)]:
                f = d + "/" + n
                if os.path.islink(f):
                    f = os.path.realpath(f)
                base = f.rsplit("/", 1)[-1]
                if fnmatch.fnmatchcase(base, "lib*.so.[0-9]*.[0-9]*") and os.path.isfile(f):
                    return "driver %s %s" % (f.split(".so.", 1)[1], f)
    return None

ENGINES = (("socket", "/run/docker.sock"), ("socket", "/var/run/docker.sock"), ("dir", "/run/libpod"),
           ("dir", "/run/containers/storage"), ("dir", "/run/runc"))

def engine():
    """A container engine's socket or state dir inside: only its own CLI lists its containers."""
    for kind, path in ENGINES:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) if kind == "socket" else stat.S_ISDIR(st.st_mode):
            return path
    return None

def try_open(path, uid, gid):
    """open(O_RDWR) as uid in gid alone, in a grandchild: 0, an errno, 254 (could not drop), 255 (died)."""
    pid = os.fork()
    if pid == 0:
        code = 254
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            code = 253
            os.close(os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
            code = 0
        except OSError as x:
            if code == 253 and 0 < x.errno < 250:
                code = x.errno
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255

def access_lines(asked, cap, out):
    """probe.sh's group-access lines (its PY_ACCESS, without the container's python3)."""
    groups, gwhy = table("/etc/group", cap)
    users, uwhy = table("/etc/passwd", cap)
    whole = gwhy or uwhy
    def lookup(spec):
        for g in groups:
            if len(g) >= 4 and (g[0] == spec or g[2] == spec) and number(g[2]) is not None:
                members = [m for m in g[3].split(",") if m]
                members += [u[0] for u in users if len(u) >= 4 and u[3] == g[2] and u[0] not in members]
                uids = {u[0]: number(u[2]) for u in users if len(u) >= 4}
                return g[0], number(g[2]), [(m, uids.get(m)) for m in members][:32]
        return None
    found, stated = {}, set()
    for spec, path in asked:
        if spec not in found:
            found[spec] = hit = None if whole else lookup(spec)
            if hit is None:
                out("agroup %s gid=- name=- members=-" % spec)
            else:
                text = ",".join("%s:%s" % (m, "-" if u is None else u) for m, u in hit[2]) or "-"
                out("agroup %s gid=%d name=%s members=%s" % (spec, hit[1], hit[0], text))
        untried = "access %s uid=- gid=- user=- open=untried via=- why=%%s %s" % (spec, path)
        try:
            st = os.stat(path)
        except OSError as x:
            out(untried % _errname(x))
            continue
        if path not in stated:
            stated.add(path)
            out("perm uid=%d gid=%d mode=%04o %s" % (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), path))
        if whole:
            out(untried % whole)
            continue
        if found[spec] is None or not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            out(untried % ("no-group" if found[spec] is None else "not-a-device"))
            continue
        name, gid, members = found[spec]
        user, uid = next(((m, u) for m, u in members if u), ("-", 65534))
        code = try_open(path, uid, gid)
        if code == 254 or code == 255:
            out(untried % ("cannot-drop" if code == 254 else "child-died"))
            continue
        result = "ok" if code == 0 else errno.errorcode.get(code, "other")
        out("access %s uid=%d gid=%d user=%s open=%s via=python3 why=- %s" % (spec, uid, gid, user, result, path))
    return groups, whole

def look(pid, cgroup, paths, asked, cap, write):
    """The whole probe of one container, in the child: its lines through write(bytes)."""
    def out(line):
        write((line + "\n").encode("utf-8", "surrogateescape"))
    # Inside, a module imported would be read from the container's files, as root: none is.
    sys.meta_path[:] = []
    sys.path_hooks[:] = []
    sys.path_importer_cache.clear()
    try:
        enter(pid, cgroup)
        busy = engine()
        if busy is not None:
            raise Fallback("a container engine runs inside (%s): only its own CLI lists its containers" % busy)
    except Fallback as e:
        out("lxcfix-ns fallback %s" % e)
        return
    out("lxcfix-probe 1")
    for p in paths:
        out(node_line(p))
    line = driver_line()
    if line:
        out(line)
    groups, whole = access_lines(asked, cap, out) if asked else (table("/etc/group", cap)[0], None)
    for g in groups:
        if len(g) >= 3 and g[0] in ("render", "video") and number(g[2]) is not None:
            out("group %s %s" % (g[0], g[2]))
    out("end")
'''

# Runs in lxcfix's process (after fence.CHILD_LIB and CHILD): the children, several at once.
FAN_OUT = r'''
def fan_out(jobs, timeout, cap, parallel):
    """jobs: [(key, fn, args)]. Each fn(*args, out) in its own forked child (its process group),
    at most `parallel` at once, each killed at `timeout` seconds from its start or past `cap` bytes:
    {key: (status, bytes)}, status as in_child's ("ok", "timeout", "large", "failed")."""
    jobs, running, done = list(jobs), {}, {}
    poller = select.poll()
    def start(key, fn, args):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                gc.disable()
                os.setpgid(0, 0)
                _only_fd(w)
                def out(data):
                    view = memoryview(data)
                    while view:
                        view = view[os.write(w, view):]
                fn(*(tuple(args) + (out,)))
            except BaseException:
                code = 70
            os._exit(code)
        os.close(w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        running[r] = [key, pid, time.monotonic() + timeout, bytearray()]
        poller.register(r, select.POLLIN)
    def finish(r, status):
        key, pid, _, data = running.pop(r)
        poller.unregister(r)
        os.close(r)
        if status is None:
            code = _exited(pid, 2.0)
            if code is not None:
                done[key] = ("ok" if code == 0 else "failed", bytes(data))
                return
            status = "failed"
        _kill(pid)
        _reap_later(pid)
        done[key] = (status, bytes(data))
    while jobs or running:
        while jobs and len(running) < parallel:
            start(*jobs.pop(0))
        now = time.monotonic()
        for r in [r for r, job in running.items() if job[2] <= now]:
            finish(r, "timeout")
        if not running:
            continue
        left = min(job[2] for job in running.values()) - time.monotonic()
        for r, _ in poller.poll(max(1, int(left * 1000) + 1)):
            if r not in running:
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                finish(r, None)
                continue
            data = running[r][3]
            data += chunk
            if len(data) > cap:
                del data[cap:]
                finish(r, "large")
    return done
'''


# The program's own process: started once per scan (a small interpreter forks faster than lxcfix,
# and its children copy less), it reads the jobs as JSON on stdin and prints one JSON line a
# container, in the order asked: {"status": "ok"|"timeout"|"large"|"failed", "out": <what it printed>}.
MAIN = r'''
if __name__ == "__main__":
    import sys
    _req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    _jobs = [(n, look, (j["pid"], j["cgroup"], j["paths"], [tuple(a) for a in j["access"]], _req["table_max"]))
             for n, j in enumerate(_req["jobs"])]
    _done = fan_out(_jobs, _req["timeout"], _req["cap"], _req["parallel"])
    for n in range(len(_jobs)):
        _status, _data = _done[n]
        sys.stdout.write(json.dumps({"status": _status, "out": _data.decode("utf-8", "surrogateescape")}) + "\n")
    sys.stdout.flush()
    # The container's files (fence's rootfs reader, its own child per container, killed at the deadline).
    _rootfs = _req.get("rootfs")
    if _rootfs:
        _R = {"__name__": "lxcfix_rootfs_reader"}
        exec(compile(_rootfs["program"], "<lxcfix rootfs reader>", "exec"), _R)
        for j in _req["jobs"]:
            _got = _R["fenced"]("/proc/%d/root" % j["pid"], _rootfs["cap"], _rootfs["files"], _rootfs["exists"],
                                _rootfs["caps"], _req["timeout"])
            sys.stdout.write(json.dumps({"rootfs": list(_got)}) + "\n")
            sys.stdout.flush()
'''


@memo.once()
def program() -> str:
    """The floor prober as one program: fence.CHILD_LIB (the deadline and the kill), CHILD, FAN_OUT,
    MAIN. Run as `PYTHON -I -S -c program()` with request() on stdin."""
    from .fence import CHILD_LIB

    return CHILD_LIB + CHILD + FAN_OUT + MAIN


def request(jobs: list[dict], timeout: float, cap: int, rootfs: dict | None = None) -> str:
    """The program's stdin. jobs: [{"pid": 4242, "cgroup": "/sys/fs/cgroup/lxc.payload.web",
    "paths": ["/dev/net/tun"], "access": [["render", "/dev/dri/renderD128"]]}]. rootfs: what it reads
    of each container's root after (fence.rootfs_command()'s `fenced`), {"program": its text,
    "cap": bytes a file, "files": [...], "exists": [...], "caps": {path: bytes}}; None: nothing."""
    import json

    return json.dumps({"jobs": jobs, "timeout": timeout, "cap": cap, "parallel": PARALLEL, "table_max": TABLE_MAX,
                       "rootfs": rootfs})


def rootfs_key(root: str, files, exists, caps, timeout: float) -> tuple[str, ...]:
    """The key under which a transport answers the rootfs reader's (rc, stdout, stderr) for one
    root read in this machine's floor program (observe.read_rootfs asks for it; never a command)."""
    import json

    return ("lxcfix-floor-rootfs", root, json.dumps([list(files), list(exists), dict(caps), timeout]))


def rootfs_of(stdout: str, n: int) -> list[Result | None]:
    """The reader's answers after the n probe lines: a Result (rc, stdout, stderr) for each job, None
    where the program did not answer (then read_rootfs reads it itself). Never raises."""
    import json

    out: list[Result | None] = []
    for line in stdout.split("\n")[n:2 * n]:
        try:
            rc, text, err = json.loads(line)["rootfs"]
            out.append(Result(int(rc), str(text), str(err)))
        except (ValueError, KeyError, TypeError):
            break
    return out + [None] * (n - len(out))


def answers_of(stdout: str, n: int) -> list[tuple[str, bytes]]:
    """The program's output -> (status, output) for each of the n jobs, in order; a job it did not
    answer (the program died, its output was cut) is ("failed", b""). Never raises."""
    import json

    out: list[tuple[str, bytes]] = []
    for line in stdout.split("\n")[:n]:
        try:
            doc = json.loads(line)
            status, text = doc["status"], doc["out"]
        except (ValueError, KeyError, TypeError):
            break
        if status not in ("ok", "timeout", "large", "failed") or not isinstance(text, str):
            break
        out.append((status, text.encode("utf-8", "surrogateescape")))
    return out + [("failed", b"")] * (n - len(out))


# --- pure: what the parent reads about a container, and what a child's answer means ----------------

FALLBACK = "lxcfix-ns fallback "


def payload_cgroup(backend: str, ct: str, root: str = "/sys/fs/cgroup") -> str:
    """The cgroup LXC puts the container's processes in, below (or at) the limit cgroup whose device
    program bpf.cgroup_candidates finds: Proxmox's `lxc/VMID/ns`, plain LXC's `lxc.payload.NAME`."""
    return f"{root}/lxc/{ct}/ns" if backend == "pve" else f"{root}/lxc.payload.{ct}"


def nspid(status: str) -> tuple[int, ...] | None:
    """The NSpid line of /proc/PID/status -> its pids, outermost first; None without one.

    nspid("Name:\tsleep\nNSpid:\t4242\t1\n") -> (4242, 1)"""
    for line in status.split("\n"):
        if line.startswith("NSpid:"):
            parts = line[6:].split()
            if parts and len(parts) <= 64 and all(p.isascii() and p.isdigit() and len(p) <= 10 for p in parts):
                return tuple(int(p) for p in parts)
            return None
    return None


def ppid(status: str) -> int | None:
    """The PPid line of /proc/PID/status."""
    for line in status.split("\n"):
        if line.startswith("PPid:"):
            text = line[5:].strip()
            return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None
    return None


def is_init(status: str, depth: int) -> bool:
    """Whether a process is a container's init, seen from a process whose NSpid has `depth` entries:
    pid 1 one pid namespace below (an inner container's init is two or more below)."""
    pids = nspid(status)
    return pids is not None and len(pids) == depth + 1 and pids[-1] == 1


def is_monitor(cmdline: bytes, lxcpath: str, ct: str) -> bool:
    """Whether /proc/PPID/cmdline is LXC's monitor of this container (`[lxc monitor] LXCPATH NAME`,
    the title lxc-start gives it): the init found in the payload cgroup is this container's, not one
    of another lxcpath that took the same cgroup name."""
    return cmdline.rstrip(b"\0").decode("utf-8", "surrogateescape") == f"[lxc monitor] {lxcpath} {ct}"


def needs_inside(paths) -> bool:
    """Whether the container's own probe must run: cuInit and NVML need its NVIDIA libraries."""
    return any(p.startswith("/dev/nvidia") for p in paths)


def answer(status: str, data: bytes) -> Result | str:
    """A child's (status, output) -> the Result the probe's command would have given, or the reason
    (a str) the in-container probe must answer instead."""
    text = data.decode("utf-8", "surrogateescape")
    if text.startswith(FALLBACK):
        return text[len(FALLBACK):].split("\n", 1)[0]
    if status == "ok":
        return Result(0, text, "")
    if status == "timeout":
        return Result(124, text, "")
    if status == "large":
        return Result(125, text, "", truncated="stdout")
    return Result(1, text, "the prober failed in its child process")
