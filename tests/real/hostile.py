"""Hostile containers for the real tier (TESTING.md, "A hostile container").

The probe runs inside a container with the container's own `sh` and `python3`; a tenant
who owns the container's root decides what they print. A hostile container here is a
normal harness container with a script of the test's bind-mounted read-only over
/usr/bin/python3.X (what `python3` is) or /usr/bin/dash (what `sh` is), inside that one
container only: the host's binaries and every other container are untouched.

    script = hostile_script(tmp_path, "python3", "exec cat /dev/zero")
    c = container_factory([TUN_MOUNT, *over_python3(script)])

lxcfix itself runs under RLIMIT_AS (lxcfix_limited): reading a tenant's endless output
whole would end in MemoryError, not in a test that quietly passes on a big machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

# What `python3` is on the host, and so inside (the harness binds the host's /usr): python3.11
# on Debian 12, python3.13 on Debian 13. The bind target must exist: /usr is bound read-only.
PYTHON3 = os.path.realpath("/usr/bin/python3").lstrip("/")
SH = "usr/bin/dash"  # /bin/sh -> usr/bin/sh -> dash
MEMORY = 512 * 1024 * 1024  # lxcfix's address space in these tests (the issue saw 3 GiB)


def hostile_script(directory, name: str, body: str, interpreter: str = "/bin/sh") -> str:
    """An executable script at directory/name; `body` runs under `interpreter` inside the
    container (for a script bound over sh, give /usr/bin/bash)."""
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        f.write(f"#!{interpreter}\n{body}\n")
    os.chmod(path, 0o755)
    return path


def over(script: str, target: str) -> list[str]:
    """Config lines binding `script` over `target` (relative to the rootfs) after the /usr mount."""
    return [f"lxc.mount.entry = {script} {target} none bind,ro,create=file 0 0"]


def over_python3(script: str) -> list[str]:
    return over(script, PYTHON3)


def over_sh(script: str) -> list[str]:
    return over(script, SH)


def _limit(memory: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def lxcfix_limited(env, *args, memory: int = MEMORY, timeout: float = 120) -> subprocess.CompletedProcess:
    """The lxcfix CLI under RLIMIT_AS = memory, output as bytes (a test looks for raw escapes)."""
    return subprocess.run([sys.executable, "-m", "lxcfix", *args], env=env, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=_limit(memory))


# What a privileged tenant runs inside (python3 -c, stdlib only): load a cgroup device program
# (BPF_PROG_LOAD) from its hex instructions and attach it (BPF_PROG_ATTACH, BPF_F_ALLOW_MULTI)
# to a cgroup directory. argv: CGROUP_DIR HEX.
TENANT_ATTACH = r'''
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def bpf(cmd, attr):
    r = libc.syscall(ctypes.c_long(321), ctypes.c_long(cmd), ctypes.c_void_p(ctypes.addressof(attr)),
                     ctypes.c_long(len(attr)))
    if r < 0:
        raise SystemExit("bpf(%d): %s" % (cmd, os.strerror(ctypes.get_errno())))
    return r
insns = bytes.fromhex(sys.argv[2])
code = ctypes.create_string_buffer(insns, len(insns))
lic = ctypes.create_string_buffer(b"GPL")
attr = ctypes.create_string_buffer(128)
struct.pack_into("<IIQQ", attr, 0, 15, len(insns) // 8, ctypes.addressof(code), ctypes.addressof(lic))
prog = bpf(5, attr)  # BPF_PROG_LOAD, BPF_PROG_TYPE_CGROUP_DEVICE
cg = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
attr = ctypes.create_string_buffer(32)
struct.pack_into("<IIII", attr, 0, cg, prog, 6, 2)  # BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI
bpf(8, attr)  # BPF_PROG_ATTACH
print("attached")
'''


# A privileged container whose root may write its cgroups (made, moved into, programs attached).
CGROUP_RW = ["lxc.mount.auto =", "lxc.mount.auto = proc:mixed sys:mixed cgroup:rw"]


def move_init_and_attach(c, program, name: str = "lxf-hide") -> str:
    """What a privileged tenant does from inside (lxc-attach as its root, cgroup mounted rw):
    a cgroup `name` below its own, PID 1 moved there, and `program` (a LiveAllowlist, encoded
    as LXC encodes one) loaded and attached to it. Returns that cgroup's host path."""
    from lxcfix import bpf

    if os.uname().machine not in ("x86_64", "amd64"):
        raise RuntimeError("the tenant's loader uses x86_64's bpf() number")
    limit = c.cgroup_path()  # before the move: the init's cgroup is then one with a program
    r = c.attach(["sh", "-c", f"mkdir /sys/fs/cgroup/{name} && echo 1 > /sys/fs/cgroup/{name}/cgroup.procs"])
    assert r.ok, r.stderr
    r = c.attach(["/usr/bin/python3", "-I", "-c", TENANT_ATTACH, f"/sys/fs/cgroup/{name}",
                  bpf.encode(program).hex()])
    assert r.ok and "attached" in r.stdout, r.stderr
    return f"{limit}/{name}"
