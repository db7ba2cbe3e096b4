"""LXF237 on real parts: a running Proxmox container (the pct shim) whose own dpkg status says
Docker's containerd.io 1.7.28-2 (runc 1.3.3, with the CVE-2025-52881 fix), on a host whose
`pveversion -v` says lxc-pve 6.0.4-2. lxcfix reads the package database through the running
container's /proc/<pid>/root (nothing of the container is run) and the host's lxc-pve from the
pveversion command it runs; a host at 6.0.5-2 gets no finding. pveversion is a small script first
on PATH (Proxmox is not installable here); its lines are Proxmox VE 9's (tests/unit/fixtures/facts/pveversion).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cli import lxcfix

DOCKER_CE = (Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "nested" / "dpkg-status.docker-ce").read_bytes()


def pveversion(bindir: Path, lxc_pve: str) -> None:
    script = bindir / "pveversion"
    script.write_text("#!/bin/sh\nprintf '%s\\n' 'proxmox-ve: 9.0.0 (running kernel: 6.14.8-2-pve)' "
                      "'pve-manager: 9.0.3 (running version: 9.0.3/025864202ebb6109)' "
                      f"'lxc-pve: {lxc_pve}' 'pve-container: 6.0.9'\n")
    script.chmod(0o755)


def findings(env, vmid) -> dict[str, list[dict]]:
    r = lxcfix(env, "diagnose", "--ct", vmid, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (ct,) = json.loads(r.stdout)["containers"]
    out: dict[str, list[dict]] = {}
    for f in ct["findings"]:
        out.setdefault(f["code"], []).append(f)
    return out


def test_a_fixed_runc_in_a_running_container_under_an_old_lxc_pve(pve, env, tmp_path):
    env.update(pve.env())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env["PATH"] = f"{bindir}:{env['PATH']}"
    pveversion(bindir, "6.0.4-2")
    ct = pve.make_ct(start=False)
    dpkg = os.path.join(ct.rootfs, "var", "lib", "dpkg")
    os.makedirs(dpkg, exist_ok=True)
    with open(os.path.join(dpkg, "status"), "wb") as f:
        f.write(DOCKER_CE)
    ct.start()
    assert ct.running()

    (f,) = findings(env, ct.vmid)["LXF237"]
    assert f["severity"] == "error"
    assert "containerd.io 1.7.28-2~debian.13~trixie" in f["message"] and "6.0.4-2" in f["message"]
    said = json.dumps(f)
    assert "apt-get install --only-upgrade lxc-pve" in said and f"pct reboot {ct.vmid}" in said

    pveversion(bindir, "6.0.5-2")  # the host upgraded: nothing to say
    assert "LXF237" not in findings(env, ct.vmid)
