"""A host read in one round trip: a fixed script, its JSON request, and a pure,
total reading of its framed output. (transport.Prefetched serves the answers;
scan.py sends the sweeps.)

    req = Request(read=["/proc/devices", ...], run=[["lxc-start", "--version"], ...],
                  listdir=["/etc/pve/lxc", ...], walk="/dev", follow_includes=True,
                  live=[LiveAsk(ct="200", status=[...], pid=[...], cgroups=[...])])
    argv(req, "/usr/bin/python3") == ["/usr/bin/python3", "-c", BOOT]   # the same few hundred bytes for any host
    stdin(req, nonce)                                              # the script and its request: the command's input
    answers = parse(stdout_bytes, nonce)
    answers.files["/proc/devices"] == b"Character devices:..."
    answers.runs[("lxc-start", "--version")] == Result(0, "6.0.4\\n", "")

The same script runs a batch of commands (the probes of every running
container of a host) in parallel, each with a deadline and an output cap:
Request(batch=[[argv...], ...]) -> answers.runs.

The command line is a fixed bootstrap (BOOT); the script and the request go
through its stdin, never the argv: a host of 200 running containers whose
probes are 15 KB each would otherwise exceed Linux's 128 KiB per argv string
(E2BIG) or the 256 KiB packet sshd accepts for an exec request (it drops the
connection). An argument of the batch that repeats (every probe's script) is
sent once, in the request's `strings`, and named by its index there.

On the wire the records are zlib-compressed and base64-encoded (text-safe over
any transport). Framing: every record is `\\n@@<nonce> <kind> <hex name> <length>\\n` and
exactly <length> bytes. The nonce is random per run and never appears in the
request a container could see; records are read by length, never by
searching, so nothing a container prints (a config line, a probe's output) can
forge another record. A record that does not check out ends the reading:
what came before it is kept, the rest is reported as garbage.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Sequence

from . import memo
from .model import HOST_PYTHON, Result

MAX_TOTAL = 64 * 1024 * 1024  # a sweep of a big host: configs, /dev, programs
MAX_WIRE = 32 * 1024 * 1024  # what may come back for it, compressed
MAX_RECORD = 16 * 1024 * 1024
MAX_REQUEST = 16 * 1024 * 1024  # what the bootstrap reads of its stdin
SHARED_MIN = 256  # a batch argument this long is sent once (Request.json's `strings`)
_HEADER = re.compile(rb"\n@@([0-9a-f]{32}) ([a-z_]{1,16}) ([0-9a-f]{0,8192}) ([0-9]{1,9})\n")


def nonce() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Live:
    """How to learn a container's state, as argv templates in which `{ct}` is
    the container (a name the script took from the host's own listing and
    checked against `names`): status (running when its last word is `running`,
    any case), init pid, and the cgroups where its device program may sit when
    /proc/<pid>/cgroup does not say."""

    status: Sequence[str]
    pid: Sequence[str]
    cgroups: Sequence[str] = ()

    def to_json(self) -> dict:
        return {"status": list(self.status), "pid": list(self.pid), "cgroups": list(self.cgroups)}


@dataclass(frozen=True)
class Request:
    """One sweep. pve_dir / lxcpath: where the configs are (None: not looked
    for); cts: the containers asked for (None: all); backend: which of the two
    the live state is asked for ("auto": Proxmox when pve_dir is a directory);
    names: the regex a container id must match (per backend) before it goes
    into an argv."""

    read: Sequence[str] = ()
    run: Sequence[Sequence[str]] = ()
    trees: Sequence[str] = ()  # directories whose *.conf files are all read (LXC's own config dir)
    walk: str | None = None  # device nodes under it (links followed)
    pve_dir: str | None = None
    lxcpath: str | None = None
    cts: Sequence[str] | None = None
    backend: str = "auto"
    names: dict = field(default_factory=dict)  # {"pve": regex, "lxc": regex}
    live: dict = field(default_factory=dict)  # {"pve": Live, "lxc": Live}
    batch: Sequence[Sequence[str]] = ()
    # rootfs reader commands (observe.reader_argv: `PYTHON -c TEXT TIMEOUT ROOT CAP N FILES... EXISTS...`),
    # answered by the script itself: TEXT's `fenced` reads each container's files in a forked child
    # killed at min(TIMEOUT, timeout) (lxcfix.fence), no interpreter started per container
    rootfs: Sequence[Sequence[str]] = ()
    timeout: float = 60.0  # per command
    cap: int = 1024 * 1024  # per command's stdout (and stderr)
    parallel: int = 4

    def json(self, nonce: str) -> str:
        strings: list[str] = []
        index: dict[str, int] = {}

        def shared(arg: str):
            """A long argument as its index in `strings` (sent once), a short one as itself."""
            if len(arg) < SHARED_MIN:
                return arg
            if arg not in index:
                index[arg] = len(strings)
                strings.append(arg)
            return index[arg]

        batch = [[shared(a) for a in argv] for argv in self.batch]
        rootfs = [[shared(a) for a in argv] for argv in self.rootfs]
        return json.dumps({
            "nonce": nonce, "read": list(self.read), "run": [list(a) for a in self.run],
            "trees": list(self.trees), "walk": self.walk, "pve_dir": self.pve_dir, "lxcpath": self.lxcpath,
            "cts": None if self.cts is None else list(self.cts), "backend": self.backend,
            "names": dict(self.names), "live": {k: v.to_json() for k, v in self.live.items()},
            "batch": batch, "rootfs": rootfs, "strings": strings, "timeout": self.timeout, "cap": self.cap,
            "parallel": self.parallel,
        }, separators=(",", ":"))


@dataclass
class Answers:
    """What a sweep brought back. files: path -> bytes (absent: could not be
    read, see errors); dirs: path -> names (sorted); isdir: path -> bool;
    runs: argv tuple -> Result; nodes: path -> (kind, major, minor, mode, uid, gid);
    garbage: why the reading stopped early, or None."""

    files: dict[str, bytes] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    isdir: dict[str, bool] = field(default_factory=dict)
    runs: dict[tuple[str, ...], Result] = field(default_factory=dict)
    nodes: dict[str, tuple] = field(default_factory=dict)
    walked: bool = False
    lstated: set = field(default_factory=set)
    complete: set = field(default_factory=set)  # directories read whole: a path below one that is not here is absent
    python: str = ""
    done: bool = False
    garbage: str | None = None


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def parse(data: bytes, nonce: str, limit: int = MAX_TOTAL) -> Answers:
    """The records of one sweep's output (zlib-compressed, see SCRIPT). Never raises."""
    out = Answers()
    head = b"LXFZ" + nonce.encode() + b"\n"
    at = data.find(head)
    if at < 0:
        out.garbage = "no sweep output (no python3 there, or it failed: " + _text(data[:200]) + ")"
        return out
    inflate = zlib.decompressobj()
    try:
        # base64: a transport may decode text and turn \r\n into \n (subprocess's text mode does)
        data = inflate.decompress(base64.b64decode(data[at + len(head):].strip(), validate=True), limit + 1)
    except (zlib.error, ValueError) as e:
        out.garbage = f"sweep output does not decompress: {e}"
        return out
    if len(data) > limit:
        out.garbage = f"output larger than {limit} bytes"
        data = data[:limit]
    ours = nonce.encode()
    pos = data.find(b"\n@@" + ours)
    if pos < 0:
        out.garbage = "no record at all (no python3 there, or it failed: " + _text(data[:200]) + ")"
        return out
    while pos < len(data):
        m = _HEADER.match(data, pos)
        if m is None:
            out.garbage = f"unreadable record at byte {pos}"
            break
        theirs, kind, hexname, size = m.groups()
        if theirs != ours:
            out.garbage = f"unreadable record at byte {pos}"
            break
        kind = kind.decode()
        try:
            name = bytes.fromhex(hexname.decode()).decode("utf-8", "surrogateescape") if hexname else ""
        except ValueError:
            out.garbage = f"bad record name at byte {pos}"
            break
        size = int(size)
        start = m.end()
        if size > MAX_RECORD or start + size > len(data):
            out.garbage = f"record {kind} {name!r} cut short"
            break
        body = data[start:start + size]
        pos = start + size
        try:
            _take(out, kind, name, body)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            out.garbage = f"record {kind} {name!r}: {e}"
            break
        if out.done:
            break
    return out


def _take(out: Answers, kind: str, name: str, body: bytes) -> None:
    if kind == "file":
        out.files[name] = body
    elif kind == "error":
        out.errors[name] = _text(body)[:500]
    elif kind == "dir":
        out.dirs[name] = sorted(n for n in _text(body).split("\n") if n and "/" not in n)
        out.isdir[name] = True
    elif kind == "notdir":
        out.isdir[name] = False
    elif kind == "isdir":
        out.isdir[name] = True
    elif kind == "run":
        doc = json.loads(body)
        argv = tuple(str(a) for a in doc["argv"])
        rc = doc["rc"]
        if not isinstance(rc, int) or isinstance(rc, bool):
            raise ValueError("rc is not a number")
        out.runs[argv] = Result(rc, str(doc["stdout"]), str(doc["stderr"]))
    elif kind == "node":
        m = _NODE.fullmatch(body)  # what nearly every record of a sweep is: one regex, not six
        if m is not None:
            k, *numbers = m.groups()
            out.nodes[name] = (k.decode(), *map(int, numbers))
            return
        k, major, minor, mode, uid, gid = _text(body).split(" ")
        if k not in ("c", "b", "f", "d", "l"):  # f, d, l: what the /dev walk found instead of a node
            raise ValueError("node kind")
        out.nodes[name] = (k, *(_bounded(v) for v in (major, minor, mode, uid, gid)))
    elif kind == "walked":
        out.walked = True
    elif kind == "lstated":
        out.lstated.add(name)
    elif kind == "tree":
        out.complete.add(name)
    elif kind == "python":
        out.python = _text(body)[:100]
    elif kind == "end":
        out.done = True
    # other kinds (a newer script's): ignored


_DIGITS = re.compile(r"[0-9]{1,10}")
_NODE = re.compile(rb"([cbfdl]) ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10}) ([0-9]{1,10})")


def _bounded(v: str) -> int:
    if not _DIGITS.fullmatch(v):
        raise ValueError(f"not a number: {v[:20]!r}")
    return int(v)


# The script (stdlib only, Python 3.5+: it runs with the host's python3), run by BOOT with REQ set.
SCRIPT = r'''
import io, json, os, stat, subprocess, sys, threading, zlib
STRINGS = REQ.get("strings", [])
NONCE = REQ["nonce"].encode()
OUT = io.BytesIO()  # every record, then written compressed: a sweep of a big host stays small on the wire
LOCK = threading.Lock()
MAX_FILE = 16 * 1024 * 1024

def emit(kind, name, body):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogateescape")
    head = b"\n@@" + NONCE + b" " + kind.encode() + b" " + name.encode("utf-8", "surrogateescape").hex().encode() + b" " + str(len(body)).encode() + b"\n"
    with LOCK:
        OUT.write(head + body)

def read(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        emit("error", path, e.strerror or str(e)); return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            emit("error", path, "not a regular file"); return None
        chunks, size = [], 0
        while True:
            c = os.read(fd, 1 << 20)
            if not c: break
            chunks.append(c); size += len(c)
            if size > MAX_FILE:
                emit("error", path, "larger than %d bytes" % MAX_FILE); return None
        data = b"".join(chunks)
    except OSError as e:
        emit("error", path, e.strerror or str(e)); return None
    finally:
        os.close(fd)
    emit("file", path, data)
    return data

def listdir(path):
    try:
        if not os.path.isdir(path):
            emit("notdir", path, b""); return []
        names = sorted(os.listdir(path))
    except OSError as e:
        emit("error", path, e.strerror or str(e)); return []
    emit("dir", path, "\n".join(names))
    return names

def run(argv, timeout, cap):
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    except OSError as e:
        return 127, "", "%s: %s" % (argv[0], e.strerror or e)
    bufs = {p.stdout: bytearray(), p.stderr: bytearray()}
    over = []
    def pump(f):
        b = bufs[f]
        while True:
            c = f.read1(65536) if hasattr(f, "read1") else os.read(f.fileno(), 65536)
            if not c: break
            if len(b) + len(c) > cap:
                b += c[:cap - len(b)]; over.append(1)
                try: os.killpg(p.pid, 9)
                except OSError: pass
                break
            b += c
    ts = [threading.Thread(target=pump, args=(f,)) for f in bufs]
    for t in ts: t.daemon = True; t.start()
    import time
    deadline = time.monotonic() + timeout
    for t in ts: t.join(max(0.0, deadline - time.monotonic()))
    timed_out = any(t.is_alive() for t in ts)
    if timed_out:
        try: os.killpg(p.pid, 9)
        except OSError: pass
    try: rc = p.wait(5)
    except Exception: rc = -9
    out = bufs[p.stdout].decode("utf-8", "surrogateescape")
    err = bufs[p.stderr].decode("utf-8", "surrogateescape")
    if timed_out: return 124, out, err + "%s: timed out after %ss" % (argv[0], timeout)
    if over: return 125, out, err + "%s: output exceeded %d bytes" % (argv[0], cap)
    return rc, out, err

def emit_run(argv, timeout, cap):
    rc, out, err = run(argv, timeout, cap)
    emit("run", " ".join(argv)[:200], json.dumps({"argv": argv, "rc": rc, "stdout": out, "stderr": err}))
    return rc, out

def includes_of(data, key="lxc.include"):
    found = []
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        s = line.strip()
        if not s.startswith(key): continue
        rest = s[len(key):].lstrip()
        if rest[:1] in (":", "="): found.append(rest[1:].strip())
    return found

SEEN, SOURCES = set(), []
def follow(path, depth):
    if path in SEEN or depth > 8 or not path.startswith("/"): return
    SEEN.add(path)
    if os.path.isdir(path):
        for n in listdir(path):
            if n.endswith(".conf"): follow(os.path.join(path, n), depth + 1)
        return
    emit("notdir", path, b"")
    data = read(path)
    if data is not None:
        SOURCES.extend(mounts_of(data))
        for inc in includes_of(data): follow(inc, depth + 1)
        for f in includes_of(data, "lxc.mount.fstab"):
            if f.startswith("/") and f not in SEEN and not os.path.isdir(f):
                SEEN.add(f); emit("notdir", f, b""); read(f)

def node(path, follow_links, odd=False):
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except FileNotFoundError:
        if odd and os.path.islink(path): emit("node", path, "l 0 0 0 0 0")
        return
    except OSError:
        return
    kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
    if kind is None and odd:
        kind = "f" if stat.S_ISREG(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else None
    if kind:
        rdev = st.st_rdev if kind in "cb" else 0
        emit("node", path, "%s %d %d %d %d %d" % (kind, os.major(rdev), os.minor(rdev), st.st_mode, st.st_uid, st.st_gid))

def walk(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in ("pts", "shm", "mqueue", "hugepages")]
        for name in filenames + dirnames:
            node(os.path.join(dirpath, name), True, True)
    emit("walked", top, b"")

def mounts_of(data):
    found = []
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        s = line.strip()
        if not s.startswith("lxc.mount.entry"): continue
        rest = s[len("lxc.mount.entry"):].lstrip()
        if rest[:1] in (":", "="):
            parts = rest[1:].split()
            if parts and parts[0].startswith("/") and not parts[0].startswith("/dev/"): found.append(parts[0])
    return found

def reader_record(c):
    lines, status = report(c)
    emit("run", "reader " + c, json.dumps({"argv": ["python3", "-c", "READER", c], "rc": status,
                                            "stdout": "\n".join(lines) + "\n", "stderr": ""}))
    return status

def live(ct, tpl, timeout, cap):
    fill = lambda argv: [a.replace("{ct}", ct) for a in argv]
    rc, out = emit_run(fill(tpl["status"]), timeout, cap)
    words = out.strip().split()
    if rc != 0 or not words or words[-1].lower() != "running": return
    rc, out = emit_run(fill(tpl["pid"]), timeout, cap)
    pid = out.strip()
    data = None
    if rc == 0 and pid.isdigit() and len(pid) < 12:
        data = read("/proc/%s/cgroup" % pid)
    cands, deeper = cgroup_plan((data or b"").decode("utf-8", "replace"), ct, fill(tpl["cgroups"]))
    for c in cands:
        if reader_record(c) == 0: break
    if deeper: reader_record(deeper)

def pool(jobs, n):
    jobs = list(jobs)
    lock = threading.Lock()
    def worker():
        while True:
            with lock:
                if not jobs: return
                job = jobs.pop(0)
            job()
    ts = [threading.Thread(target=worker) for _ in range(max(1, min(n, len(jobs))))]
    for t in ts: t.daemon = True; t.start()
    for t in ts: t.join()

import re
def configs():
    """(backend, ct, path) of every config asked for, listing as lxcfix's backends do."""
    out, cts = [], REQ["cts"]
    want = lambda ct: cts is None or ct in cts
    pve, lxc = REQ["pve_dir"], REQ["lxcpath"]
    vmid = re.compile(REQ["names"].get("pve", "^$"))
    name = re.compile(REQ["names"].get("lxc", "^$"))
    if pve and os.path.isdir(pve):
        emit("isdir", pve, b"")
        dirs = [pve + "/lxc"] + [pve + "/nodes/" + n + "/lxc" for n in listdir(pve + "/nodes")]
        seen = set()
        for d in dirs:
            for e in listdir(d):
                ct = e[:-5] if e.endswith(".conf") else ""
                if vmid.match(ct) and want(ct) and ct not in seen:
                    seen.add(ct); out.append(("pve", ct, d + "/" + e))
    if lxc:
        for e in listdir(lxc):
            has = "config" in listdir(lxc + "/" + e)  # every entry: one lxcfix cannot act on is still listed (LXF132)
            if name.match(e) and ".." not in e and has and want(e):
                out.append(("lxc", e, lxc + "/" + e + "/config"))
    return out

emit("python", "version", "%d.%d" % sys.version_info[:2])
for p in REQ["read"]: read(p)
for t in REQ["trees"]:
    for root, dirs, files in os.walk(t):
        listdir(root)
        for f in sorted(files):
            if f.endswith(".conf"): read(os.path.join(root, f))
    emit("tree", t, b"")
backend = REQ["backend"]
if backend == "auto":
    backend = "pve" if REQ["pve_dir"] and os.path.isdir(REQ["pve_dir"]) else "lxc"
found = configs()
for b, ct, path in found:
    follow(path, 0)
for p in sorted(set(SOURCES)):
    node(p, False); emit("lstated", p, b"")
if REQ["walk"]: walk(REQ["walk"])
for d in (REQ["pve_dir"], REQ["lxcpath"]):
    if d and not os.path.isdir(d): emit("notdir", d, b"")
T, CAP, N = REQ["timeout"], REQ["cap"], REQ["parallel"]
pool([(lambda a=a: emit_run(a, T, CAP)) for a in REQ["run"]], N)
tpl = REQ["live"].get(backend)
if tpl:
    pool([(lambda ct=ct: live(ct, tpl, T, CAP)) for b, ct, p in found if b == backend], N)
BATCH = [[STRINGS[a] if isinstance(a, int) else a for a in argv] for argv in REQ["batch"]]
pool([(lambda a=a: emit_run(a, T, CAP)) for a in BATCH], N)
READERS = {}
def rootfs_run(argv):
    """A rootfs reader command answered here, as the command itself prints (its files read in a child
    of this process, killed at the deadline: lxcfix.fence)."""
    try:
        ns = READERS.get(argv[2])
        if ns is None:
            ns = {"__name__": "lxcfix_rootfs_reader"}
            exec(compile(argv[2], "<lxcfix rootfs reader>", "exec"), ns)
            READERS[argv[2]] = ns
        n = int(argv[6])
        rc, out, err = ns["fenced"](argv[4], int(argv[5]), argv[7:7 + n], argv[7 + n:], {}, min(float(argv[3]), T))
    except Exception as e:
        out, rc, err = "", 1, repr(e)[:500]
    emit("run", "rootfs", json.dumps({"argv": argv, "rc": rc, "stdout": out, "stderr": err}))
ROOTFS = [[STRINGS[a] if isinstance(a, int) else a for a in argv] for argv in REQ.get("rootfs", [])]
pool([(lambda a=a: rootfs_run(a)) for a in ROOTFS], N)
emit("end", "", b"")
STDOUT = getattr(sys.stdout, "buffer", sys.stdout)
import base64
STDOUT.write(b"LXFZ" + NONCE + b"\n" + base64.b64encode(zlib.compress(OUT.getvalue(), 6)) + b"\n")
STDOUT.flush()
'''


def script() -> str:
    """The script with the BPF reader's functions (bpf.READER_LIB) it runs in-process."""
    from .bpf import CGROUP_LIB, READER_LIB

    return READER_LIB + CGROUP_LIB + SCRIPT


# `python3 -c BOOT`: reads {"script": ..., "request": ...} from stdin (at most MAX_REQUEST bytes)
# and runs the script with REQ set. Fixed: the command line is the same for any host.
BOOT = ("import json,sys;D=json.loads(sys.stdin.buffer.read(%d).decode('utf-8'));"
        "exec(compile(D['script'],'<lxcfix sweep>','exec'),{'__name__':'__main__','REQ':D['request']})"
        % (MAX_REQUEST + 1))


def argv(request: Request | None = None, python: str = HOST_PYTHON) -> list[str]:
    """The sweep's command line: the bootstrap alone, whatever the request (see stdin), run by the
    host's `python` (transport.python_of: this process's own here, the inventory's over SSH)."""
    return [python, "-c", BOOT]


@memo.once()
def _script_json() -> str:
    """script() as a JSON string: the same for every host, encoded once per process."""
    return json.dumps(script())


def stdin(request: Request, nonce_: str) -> str:
    """What the sweep's command reads: the script and the request, as one JSON document
    (ASCII: json.dumps escapes the rest)."""
    data = '{"script":' + _script_json() + ',"request":' + request.json(nonce_) + "}"
    if len(data) > MAX_REQUEST:
        raise ValueError(f"sweep request of {len(data)} bytes is larger than {MAX_REQUEST}")
    return data
