"""Files of a container's own rootfs, for static checks: what was read, and total parsers of the
few files lxcfix reads there. Pure: the reading is observe.read_rootfs (through READER, which
resolves every path inside the root and follows no symlink out of it); this module has its text.

    Rootfs("read", "/proc/4242/root", files={"/etc/group": b"render:x:993:\\n"}, present=frozenset())
    toolkit_config(b'[nvidia-container-cli]\\nno-cgroups = false\\n')
        -> Toml(values={("nvidia-container-cli", "no-cgroups"): False}, bad=())
    cdi_versions(b"... hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04 ...") -> {"580.159.04"}
    daemon_runtimes(b'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}')
        -> Daemon(runtimes={"nvidia": "nvidia-container-runtime"}, default=None, error=None)
    groups(b"render:x:993:\\nvideo:x:44:\\n") -> {"render": 993, "video": 44}

Everything here is the tenant's: each file is at most FILE_MAX bytes (more is a finding, never
read further), a line that does not parse is kept as a bad line for evidence, never an exception.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Mapping

from .bounded import excerpt

FILE_MAX = 256 * 1024
TOOLKIT = "/etc/nvidia-container-runtime/config.toml"
CDI_SPECS = ("/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json", "/var/run/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json")
DAEMON = "/etc/docker/daemon.json"
GROUP = "/etc/group"
FILES = (TOOLKIT, *CDI_SPECS, DAEMON, GROUP)
# A container engine installed: Docker needs `features: nesting=1` (and keyctl=1 unprivileged).
# runc and crun alone are not: every Docker/Podman install has one, and a bare OCI runtime is a
# tool (this project's real tier runs runc in containers without Proxmox's features).
ENGINES = ("/usr/bin/dockerd", "/usr/sbin/dockerd", "/usr/local/bin/dockerd", "/usr/bin/podman",
           "/usr/local/bin/podman", "/usr/bin/containerd", "/usr/local/bin/containerd")
# Where Docker looks for a runtime named by a bare word (PATH of dockerd).
RUNTIME_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


@dataclass(frozen=True)
class Rootfs:
    """state: "read" (files holds what exists; errors what could not be read), "not-mounted"
    (a stopped container's storage is not mounted on the host), "unreadable" (why says it)."""

    state: str
    where: str = ""
    files: Mapping[str, bytes] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    present: frozenset = frozenset()  # paths of ENGINES (and runtime binaries asked for) that exist
    why: str = ""

    def text(self, path: str) -> bytes | None:
        return self.files.get(path)


# --- the NVIDIA Container Toolkit's config.toml (a TOML subset: tables, key = scalar) --------

@dataclass(frozen=True)
class Toml:
    values: Mapping[tuple[str, str], object]
    bad: tuple[str, ...] = ()


_TABLE = re.compile(r"\[\s*([A-Za-z0-9_.-]{1,64})\s*\]")
_KEY = re.compile(r"([A-Za-z0-9_-]{1,64}|\"[^\"]{1,64}\")\s*=\s*(.*)")


def _scalar(text: str) -> tuple[bool, object]:
    text = text.strip()
    if text in ("true", "false"):
        return True, text == "true"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return True, text[1:-1]
    if re.fullmatch(r"-?[0-9]{1,12}", text):
        return True, int(text)
    if text.startswith("[") and text.endswith("]"):
        return True, text  # an array: kept as its text
    return False, None


def _strip_comment(line: str) -> str:
    out, quote = [], ""
    for ch in line:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).strip()


def toolkit_config(data: bytes) -> Toml:
    values: dict[tuple[str, str], object] = {}
    bad: list[str] = []
    table = ""
    for n, raw in enumerate(data[:FILE_MAX].decode("utf-8", "replace").split("\n")[:4096], 1):
        line = _strip_comment(raw)
        if not line:
            continue
        if m := _TABLE.fullmatch(line):
            table = m[1]
            continue
        m = _KEY.fullmatch(line)
        ok, value = _scalar(m[2]) if m else (False, None)
        if not ok:
            if len(bad) < 8:
                bad.append(f"line {n}: '{excerpt(raw, 80)}'")
            continue
        values[(table, m[1].strip('"'))] = value
    return Toml(values, tuple(bad))


# --- a CDI spec's driver version --------------------------------------------------------------

_LIB_VERSION = re.compile(rb"lib(?:cuda|nvidia-ml|nvidia-ptxjitcompiler)\.so\.([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)")


def cdi_versions(data: bytes) -> set[str]:
    """The driver versions a CDI spec's library paths name (nvidia-ctk writes the host's
    libcuda.so.VERSION and libnvidia-ml.so.VERSION into it)."""
    return {m.decode() for m in _LIB_VERSION.findall(data[:FILE_MAX])}


# --- Docker's daemon.json ---------------------------------------------------------------------

@dataclass(frozen=True)
class Daemon:
    runtimes: Mapping[str, str]
    default: str | None
    error: str | None


def daemon_runtimes(data: bytes) -> Daemon:
    if len(data) > FILE_MAX:
        return Daemon({}, None, f"larger than {FILE_MAX} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        return Daemon({}, None, f"not JSON: {excerpt(str(e), 120)}")
    if not isinstance(doc, dict):
        return Daemon({}, None, "not a JSON object")
    runtimes: dict[str, str] = {}
    raw = doc.get("runtimes")
    if raw is not None and not isinstance(raw, dict):
        return Daemon({}, None, "\"runtimes\" is not an object")
    for name, spec in list((raw or {}).items())[:64]:
        path = spec.get("path") if isinstance(spec, dict) else None
        if not isinstance(path, str) or not path or len(path) > 4096:
            return Daemon(runtimes, None, f"runtime {excerpt(str(name), 64)!r} has no \"path\" string")
        runtimes[str(name)[:64]] = path
    default = doc.get("default-runtime")
    return Daemon(runtimes, default if isinstance(default, str) else None, None)


def runtime_paths(path: str) -> tuple[str, ...]:
    """Where dockerd looks for a runtime's binary: the path itself, or a bare name on its PATH."""
    if path.startswith("/"):
        return (path,)
    if "/" in path or "\0" in path:
        return ()
    return tuple(f"{d}/{path}" for d in RUNTIME_DIRS)


# --- /etc/group -------------------------------------------------------------------------------

def groups(data: bytes) -> dict[str, int]:
    """name -> gid of each well-formed line (the first line of a name counts, as getgrnam's)."""
    out: dict[str, int] = {}
    for line in data[:FILE_MAX].decode("utf-8", "replace").split("\n")[:65536]:
        parts = line.split(":")
        if len(parts) != 4 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", parts[0]) \
                or not re.fullmatch(r"[0-9]{1,10}", parts[2]) or int(parts[2]) > 0xFFFFFFFE:
            continue
        out.setdefault(parts[0], int(parts[2]))
    return out


def features(value: str | None) -> dict[str, str]:
    """A Proxmox `features:` value -> {key: value}: "nesting=1,keyctl=1"."""
    out: dict[str, str] = {}
    for part in (value or "").split(","):
        key, sep, val = part.strip().partition("=")
        if key and sep:
            out[key.strip()] = val.strip()
    return out


def features_value(have: Mapping[str, str], add: Mapping[str, str]) -> str:
    """The `features:` value with `add` set, the other keys kept in their order."""
    merged = dict(have)
    merged.update(add)
    return ",".join(f"{k}={v}" for k, v in merged.items())


# --- the reader, run on the host (observe.read_rootfs) ----------------------------------------

# Resolves each path component by component from an O_PATH fd of the root, O_NOFOLLOW at every
# step: a symlink's target is resolved again inside the root (an absolute one from the root, ".."
# stops at the root), so nothing outside the root is ever opened, whatever the tenant put there;
# a regular file only, at most FILE_MAX bytes (+1, to tell a larger one). Prints one JSON object
# a line: {"path", "status": "ok"|"absent"|errno name|"large"|"not-file", "b64"}.
READER = r'''
import base64, errno, json, os, stat, sys

def resolve(root_fd, path, links=40):
    parts = [p for p in path.split("/") if p]
    fds = [os.dup(root_fd)]
    try:
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            if name == "..":
                if len(fds) > 1:
                    os.close(fds.pop())
                continue
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fds[-1])
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=fds[-1])
                os.close(fd)
                links -= 1
                if links < 0:
                    raise OSError(errno.ELOOP, "too many links")
                if target.startswith("/"):
                    while len(fds) > 1:
                        os.close(fds.pop())
                parts = [p for p in target.split("/") if p] + parts
                continue
            if parts and not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise OSError(errno.ENOTDIR, "not a directory")
            fds.append(fd)
        return os.dup(fds[-1]) if len(fds) > 1 else None
    finally:
        for fd in fds:
            os.close(fd)

def read_one(root_fd, path, cap, want_data):
    out = {"path": path}
    try:
        fd = resolve(root_fd, path)
    except OSError as e:
        out["status"] = "absent" if e.errno in (errno.ENOENT, errno.ENOTDIR) else errno.errorcode.get(e.errno, "EIO")
        return out
    if fd is None:
        out["status"] = "not-file"
        return out
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            out["status"] = "not-file"
            return out
        if not want_data:
            out["status"] = "ok"
            return out
        rfd = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            data = b""
            while len(data) <= cap:
                chunk = os.read(rfd, cap + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(rfd)
        if len(data) > cap:
            out["status"] = "large"
        else:
            out["status"] = "ok"
            out["b64"] = base64.b64encode(data).decode()
    except OSError as e:
        out["status"] = errno.errorcode.get(e.errno, "EIO")
    finally:
        os.close(fd)
    return out

def report(root, cap, files, exists):
    lines = []
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        return [json.dumps({"root": root, "status": errno.errorcode.get(e.errno, "EIO")})]
    try:
        for path in files:
            lines.append(json.dumps(read_one(root_fd, path, cap, True)))
        for path in exists:
            lines.append(json.dumps(read_one(root_fd, path, cap, False)))
    finally:
        os.close(root_fd)
    return lines

if __name__ == "__main__":
    root, cap, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("\n".join(report(root, cap, sys.argv[4:4 + n], sys.argv[4 + n:])))
'''


def parse_reader(root: str, text: str, files, exists) -> Rootfs:
    """What READER printed -> Rootfs. Total: a line that is not one of its JSON objects is
    skipped, a path it did not report is an error ("no answer")."""
    got: dict[str, dict] = {}
    for line in text.split("\n")[:1024]:
        try:
            doc = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(doc, dict) and "root" in doc:
            return Rootfs("unreadable", root, why=f"{root}: {excerpt(str(doc.get('status')), 40)}")
        if isinstance(doc, dict) and isinstance(doc.get("path"), str):
            got[doc["path"]] = doc
    data: dict[str, bytes] = {}
    errors: dict[str, str] = {}
    present = set()
    for path in files:
        doc = got.get(path)
        status = doc.get("status") if doc else "no answer"
        if status == "ok" and isinstance(doc.get("b64"), str):
            try:
                data[path] = base64.b64decode(doc["b64"], validate=True)[:FILE_MAX]
                continue
            except (binascii.Error, ValueError):
                status = "bad answer"
        if status != "absent":
            errors[path] = f"{excerpt(str(status), 40)}" + (f" (over {FILE_MAX} bytes)" if status == "large" else "")
    for path in exists:
        doc = got.get(path)
        if doc and doc.get("status") == "ok":
            present.add(path)
    return Rootfs("read", root, data, errors, frozenset(present))
