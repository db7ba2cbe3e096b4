"""lxcfix's own interpreter: the helper processes it starts on this machine (the sweep that
probes every running container at once, the readers) run with sys.executable, never with the
`python3` first on PATH (a pyenv shim there made a 4-container scan take 4.7 s instead of 0.45 s).
Inside a container the probe's python3 is the container's own, as before."""

from __future__ import annotations

import json

from .cli import TUN_MOUNT, lxcfix

FAKE = """#!/bin/sh
echo "$0 $*" >> {mark}
exit 1
"""


def test_a_local_scan_never_runs_the_python3_first_on_path(container_factory, tun, env, tmp_path):
    mark = tmp_path / "python3-was-run"
    fake = tmp_path / "shim" / "python3"
    fake.parent.mkdir()
    fake.write_text(FAKE.format(mark=mark))
    fake.chmod(0o755)
    cts = [container_factory([TUN_MOUNT]) for _ in range(2)]  # two running: one sweep probes both
    env["PATH"] = f"{fake.parent}:{env['PATH']}"
    r = lxcfix(env, "scan", *[a for c in cts for a in ("--ct", c.name)], "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    for c in cts:  # probed inside (LXF200), the device program read (LXF100): in full
        (report,) = [x for x in doc["containers"] if x["ct"] == c.name]
        assert {"LXF100", "LXF200"} <= {f["code"] for f in report["findings"]}, report["findings"]
    assert not any(h.get("notes") for h in doc["hosts"]), doc["hosts"]  # read in one go, not one by one
    assert not mark.exists(), mark.read_text()
