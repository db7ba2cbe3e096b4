"""Start-up (issue 11): what a command does not need, it does not load. An offline
`scan --json` loads neither the SSH stack (paramiko, fabric, invoke) nor yaml (the
inventory's), rich (terminal output) or multiprocessing (a few configs need no
workers); `scan --inventory` of a missing file fails before paramiko is imported."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import EXAMPLES, REPO

PROBE = """
import contextlib, io, json, sys
from lxcfix import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = cli.run({argv!r})
print(json.dumps({{"code": code, "loaded": sorted(m for m in {heavy!r} if m in sys.modules)}}))
"""
HEAVY = ("rich", "paramiko", "fabric", "invoke", "yaml", "multiprocessing")


def loaded(argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)], capture_output=True,
                       text=True, timeout=120, cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_offline_json_scan_loads_no_ssh_yaml_rich_or_processes():
    got = loaded(["scan", "--root", str(EXAMPLES / "pve-gpu-host"), "--json"])
    assert got == {"code": 1, "loaded": []}  # findings: exit 1


def test_a_missing_inventory_fails_before_the_ssh_stack_is_loaded(tmp_path):
    got = loaded(["scan", "--inventory", str(tmp_path / "nope.yaml"), "--json"])
    assert got["code"] == 2 and not {"paramiko", "fabric", "invoke"} & set(got["loaded"]), got
