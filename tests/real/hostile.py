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
