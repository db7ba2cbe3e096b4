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
    dpkg_installed(b"Package: runc\\nStatus: install ok installed\\nVersion: 1.3.3-0ubuntu1~24.04.2\\n")
        -> {"runc": "1.3.3-0ubuntu1~24.04.2"}
    runc_has_52881_fix("runc", "1.3.3-0ubuntu1~24.04.2") -> True     (None: cannot tell)
    dpkg_compare("6.0.5-1", "6.0.5-2") -> -1

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
# Package databases, for the runc version (LXF237): read with their own cap (a Debian
# system's dpkg status is megabytes), parsed into Rootfs.packages, never kept whole.
DPKG_STATUS = "/var/lib/dpkg/status"
APK_INSTALLED = "/lib/apk/db/installed"
PACKAGE_DBS = (DPKG_STATUS, APK_INSTALLED)
PKG_MAX = 16 * 1024 * 1024
# The packages whose version says which runc the container runs: runc itself (Debian, Ubuntu,
# Alpine) and Docker's containerd.io, which bundles its own runc binary.
RUNC_PACKAGES = ("runc", "containerd.io")
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
    packages: Mapping[str, str] = field(default_factory=dict)  # RUNC_PACKAGES installed: name -> version

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


# --- package databases: the container's runc version (LXF237) --------------------------------

_PKG_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{0,99}")
_DEB_VERSION = re.compile(r"(?:[0-9]{1,9}:)?[0-9][A-Za-z0-9.+~:-]{0,127}")


def _stanzas(data: bytes, cap: int = PKG_MAX):
    """The blank-line separated records of a dpkg status or apk installed file, each as a list
    of its lines (continuation lines, which start with a space, are dropped: no field read here
    has one)."""
    record: list[str] = []
    for raw in _lines(data, cap):
        line = raw.decode("utf-8", "replace")
        if not line.strip():
            if record:
                yield record
            record = []
        elif not line[:1].isspace():
            record.append(line)
    if record:
        yield record


def _lines(data: bytes, cap: int):
    """The lines of data[:cap], one at a time (a 16 MiB file of short lines is never split whole)."""
    start, end = 0, min(len(data), cap)
    while start < end:
        nl = data.find(b"\n", start, end)
        stop = end if nl < 0 else nl
        yield data[start:stop]
        start = stop + 1


def dpkg_installed(data: bytes, want=RUNC_PACKAGES) -> dict[str, str]:
    """The packages of `want` that dpkg's status file says are installed (Status: install ok
    installed, or held), name -> Version. A record that is not well formed is skipped."""
    out: dict[str, str] = {}
    for record in _stanzas(data):
        fields: dict[str, str] = {}
        for line in record[:200]:
            key, sep, value = line.partition(":")
            if sep and key in ("Package", "Status", "Version"):
                fields.setdefault(key, value.strip())
        name, status, version = fields.get("Package", ""), fields.get("Status", "").split(), fields.get("Version", "")
        if name in want and len(status) == 3 and status[0] in ("install", "hold") and status[2] == "installed" \
                and _DEB_VERSION.fullmatch(version):
            out[name] = version
    return out


def apk_installed(data: bytes, want=RUNC_PACKAGES) -> dict[str, str]:
    """Alpine's /lib/apk/db/installed ("P:runc" then "V:1.3.3-r0"): name -> version."""
    out: dict[str, str] = {}
    for record in _stanzas(data):
        fields = {line[:1]: line[2:].strip() for line in record[:400] if line[1:2] == ":" and line[:1] in "PV"}
        name, version = fields.get("P", ""), fields.get("V", "")
        if name in want and re.fullmatch(r"[0-9][A-Za-z0-9._+-]{0,63}", version):
            out[name] = version
    return out


def installed(files: Mapping[str, bytes]) -> dict[str, str]:
    """RUNC_PACKAGES from whichever package database the container has (dpkg wins)."""
    out = apk_installed(files[APK_INSTALLED]) if APK_INSTALLED in files else {}
    if DPKG_STATUS in files:
        out.update(dpkg_installed(files[DPKG_STATUS]))
    return out


def _order(c: str) -> int:
    # dpkg's order of a version's non-digit characters: "~" before the end, letters before the rest
    if c == "~":
        return -1
    if c.isascii() and c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i] in "0123456789") or (j < len(b) and not b[j] in "0123456789"):
            ac = _order(a[i]) if i < len(a) and a[i] not in "0123456789" else 0
            bc = _order(b[j]) if j < len(b) and b[j] not in "0123456789" else 0
            if ac != bc:
                return -1 if ac < bc else 1
            if i < len(a) and a[i] not in "0123456789":
                i += 1
            if j < len(b) and b[j] not in "0123456789":
                j += 1
        n = i
        while n < len(a) and a[n] in "0123456789":
            n += 1
        m = j
        while m < len(b) and b[m] in "0123456789":
            m += 1
        x, y = int(a[i:n] or "0"), int(b[j:m] or "0")
        if x != y:
            return -1 if x < y else 1
        i, j = n, m
    return 0


def _split_deb(version: str) -> tuple[int, str, str]:
    epoch, sep, rest = version.partition(":")
    if not sep or not epoch.isdigit():
        epoch, rest = "0", version
    upstream, sep, revision = rest.rpartition("-")
    if not sep:
        upstream, revision = rest, ""
    return int(epoch[:9] or "0"), upstream, revision


def dpkg_compare(a: str, b: str) -> int:
    """-1, 0 or 1, as `dpkg --compare-versions` orders two versions (epoch, upstream,
    revision; "~" sorts before everything, even the end): "1.4.0~rc.3" < "1.4.0"."""
    ea, ua, ra = _split_deb(a)
    eb, ub, rb = _split_deb(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


# runc's fix for CVE-2025-52881 (Nov 2025), per release line: the first release that has it.
# rc None: a final release; a line after 1.4 has it from its start, one before 1.2 never did.
RUNC_FIXED = {(1, 2): (8, None), (1, 3): (3, None), (1, 4): (0, 3)}
_RUNC_VERSION = re.compile(r"(?:[0-9]{1,9}:)?([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,4})"
                           r"(?:[~_.-]?rc\.?([0-9]{1,4}))?(?![0-9])")
# Docker's containerd.io bundles runc; its version is containerd's, so which runc it carries
# is known only where it was reported: 1.7.28-1 worked in LXC, 1.7.28-2 (runc 1.3.3) failed
# (containerd/containerd#12484); "~" so that 1.7.28-2~debian.13~trixie counts. Lines before
# 1.7 ended before Nov 2025: none bundles a runc with the fix.
CONTAINERD_IO_FIXED = {(1, 7): "1.7.28-2~"}


def runc_upstream(version: str) -> tuple[int, int, int, int | None] | None:
    """A package version's runc release: "1.3.3-0ubuntu1~22.04.2" -> (1, 3, 3, None),
    "1.4.0~rc.3-1" -> (1, 4, 0, 3), "1:1.1.5+ds1-1" -> (1, 1, 5, None), "1.4.0_rc3-r0" -> (1, 4, 0, 3)."""
    m = _RUNC_VERSION.match(version)
    if m is None:
        return None
    return int(m[1]), int(m[2]), int(m[3]), int(m[4]) if m[4] is not None else None


def runc_has_52881_fix(package: str, version: str) -> bool | None:
    """Whether the runc this package installs has the CVE-2025-52881 fix (it then fails under
    an lxc-pve before 6.0.5-2); None when its version does not say."""
    if package == "containerd.io":
        m = re.match(r"([0-9]{1,4})\.([0-9]{1,4})\.", version)
        if m is None:
            return None
        line = (int(m[1]), int(m[2]))
        if line < min(CONTAINERD_IO_FIXED):
            return False
        first = CONTAINERD_IO_FIXED.get(line)
        return dpkg_compare(version, first) >= 0 if first else None
    got = runc_upstream(version)
    if got is None:
        return None
    major, minor, patch, rc = got
    line = (major, minor)
    if line < (1, 2):
        return False
    if line not in RUNC_FIXED:
        return True
    fixed_patch, fixed_rc = RUNC_FIXED[line]
    inf = 1 << 20  # a final release sorts after its release candidates
    return (patch, inf if rc is None else rc) >= (fixed_patch, inf if fixed_rc is None else fixed_rc)


# --- the reader, run on the host (observe.read_rootfs) ----------------------------------------

# Resolves each path component by component from an O_PATH fd of the root, O_NOFOLLOW at every
# step: a symlink's target is resolved again inside the root (an absolute one from the root, ".."
# stops at the root), so nothing outside the root is ever opened, whatever the tenant put there;
# a regular file only, at most FILE_MAX bytes (+1, to tell a larger one); of a package database
# (PKG: only given with its own cap) only the runc packages' records, kept as it is read a chunk
# at a time within that cap (filter_packages: a 16 MiB status is never held). Prints one JSON object
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

# The package databases: only the records of the runc packages are kept, as the file is read a
# chunk at a time (a 16 MiB status of short lines is never held whole, nor split at once).
PKG = {"/var/lib/dpkg/status": (b"Package:", (b"Package:", b"Status:", b"Version:")),
       "/lib/apk/db/installed": (b"P:", (b"P:", b"V:"))}
WANT = (b"runc", b"containerd.io")
LINE_MAX = 4096

def pkg_lines(rfd, cap):
    total, buf, skipping = 0, b"", False
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        total += len(chunk)
        if total > cap:
            raise OverflowError(cap)
        lines = (buf + chunk).split(b"\n")
        buf = lines.pop()
        for line in lines:
            if skipping:  # the rest of a line longer than LINE_MAX: no field read here is one
                skipping = False
                continue
            yield line
        if len(buf) > LINE_MAX:
            buf, skipping = b"", True
    if buf and not skipping:
        yield buf

def filter_packages(lines, path, records=64):
    name_key, fields = PKG[path]
    kept, record, hit = [], [], False
    for line in lines:
        line = line.rstrip(b"\r\n")
        if not line.strip():
            if hit and records > 0:
                kept += record + [b"\n"]
                records -= 1
            record, hit = [], False
        elif line.startswith(fields) and len(record) < 8:
            record.append(line + b"\n")
            hit = hit or (line.startswith(name_key) and line[len(name_key):].strip() in WANT)
    if hit and records > 0:
        kept += record
    return b"".join(kept)

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
            data, large = b"", False
            if path in PKG:
                try:
                    data = filter_packages(pkg_lines(rfd, cap), path)
                except OverflowError:
                    large = True
            while len(data) <= cap and path not in PKG:
                chunk = os.read(rfd, cap + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(rfd)
        if large or len(data) > cap:
            out["status"] = "large"
        else:
            out["status"] = "ok"
            out["b64"] = base64.b64encode(data).decode()
    except OSError as e:
        out["status"] = errno.errorcode.get(e.errno, "EIO")
    finally:
        os.close(fd)
    return out

def report(root, cap, files, exists, caps=None):
    caps = caps or {}
    lines = []
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        return [json.dumps({"root": root, "status": errno.errorcode.get(e.errno, "EIO")})]
    try:
        for path in files:
            lines.append(json.dumps(read_one(root_fd, path, caps.get(path, cap), True)))
        for path in exists:
            lines.append(json.dumps(read_one(root_fd, path, cap, False)))
    finally:
        os.close(root_fd)
    return lines

if __name__ == "__main__":
    root, cap, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("\n".join(report(root, cap, sys.argv[4:4 + n], sys.argv[4 + n:])))
'''


def parse_reader(root: str, text: str, files, exists, caps=None) -> Rootfs:
    """What READER printed -> Rootfs. Total: a line that is not one of its JSON objects is
    skipped, a path it did not report is an error ("no answer"). caps: path -> its own cap
    (the package databases'); the package databases become Rootfs.packages."""
    caps = caps or {}
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
                data[path] = base64.b64decode(doc["b64"], validate=True)[:caps.get(path, FILE_MAX)]
                continue
            except (binascii.Error, ValueError):
                status = "bad answer"
        if status != "absent":
            errors[path] = f"{excerpt(str(status), 40)}" + (
                f" (over {caps.get(path, FILE_MAX)} bytes)" if status == "large" else "")
    for path in exists:
        doc = got.get(path)
        if doc and doc.get("status") == "ok":
            present.add(path)
    packages = installed(data)
    for path in PACKAGE_DBS:
        data.pop(path, None)
    return Rootfs("read", root, data, errors, frozenset(present), packages=packages)
