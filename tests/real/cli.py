"""Running lxcfix's command line from the real tier, as an admin would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

TUN_MOUNT = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"


def lxcfix(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lxcfix", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def codes(doc) -> list[str]:
    return sorted(f["code"] for c in doc["containers"] for f in c["findings"])


def diagnose(env, ct) -> dict:
    r = lxcfix(env, "diagnose", "--ct", ct, "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


PAUSING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pausing.py")


def paused_apply(env, ct, step, pause_file, *extra):
    """apply, paused at a checkpoint of its transaction (tests/real/pausing.py)."""
    proc = subprocess.Popen([sys.executable, PAUSING, step, str(pause_file), "apply", "--ct", ct, "--yes", *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pause_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            pytest.fail(f"apply never reached {step}: rc={proc.returncode}\n{out}\n{err}")
        time.sleep(0.02)
    return proc
