"""scan --cluster (issue 33, item 2): the members from pmxcfs's /etc/pve/.members, each reached as
Proxmox reaches it (root, host keys checked against /etc/pve/priv/known_hosts), one report
grouped by node; a member that cannot be reached is LXF301 for that node alone. This node
is a snapshot of a GPU host; pve2 is this machine behind a real sshd; pve3 answers nowhere."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .sshd import Keys, Sshd, closed_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_scan_cluster_reports_each_member_and_an_unreachable_one_alone(tmp_path):
    keys = Keys.make(tmp_path / "client")
    d = Sshd.start(tmp_path / "sshd-pve2", keys)
    try:
        src = tmp_path / "pve1"
        shutil.copytree(EXAMPLES / "pve-gpu-host", src)
        (src / "etc/pve/.members").write_text(json.dumps({
            "nodename": "pve1", "version": 9, "cluster": {"name": "lab", "nodes": 3, "quorate": 1},
            "nodelist": {"pve1": {"id": 1, "online": 1, "ip": "10.99.0.1"},
                         "pve2": {"id": 2, "online": 1, "ip": "pve2.lab.invalid"},
                         "pve3": {"id": 3, "online": 0, "ip": "pve3.lab.invalid"}}}))
        (src / "etc/pve/priv").mkdir()
        (src / "etc/pve/priv/known_hosts").write_text(d.known_hosts_line() + "\n")
        cfg = tmp_path / "ssh_config"
        cfg.write_text("".join(f"Host {n}\n  HostName 127.0.0.1\n  Port {p}\n  IdentityFile {keys.private}\n"
                               "  IdentitiesOnly yes\n"
                               for n, p in (("pve2.lab.invalid", d.port), ("pve3.lab.invalid", closed_port()))))
        r = subprocess.run([sys.executable, "-m", "lxcfix", "scan", "--cluster", "--root", str(src), "--no-probe",
                            "--ssh-config", str(cfg), "--json"], capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)})
        doc = json.loads(r.stdout)
        hosts = {h["host"]: h for h in doc["hosts"]}
        assert sorted(hosts) == ["pve1", "pve2", "pve3"], r.stderr
        assert d.accepted() >= 1  # pve2 really logged in to, as root
        assert not hosts["pve2"].get("error"), hosts["pve2"]
        assert hosts["pve3"]["error"] and "pve3" in hosts["pve3"]["error"]
        unreachable = {h for h, rep in hosts.items() for f in rep["findings"] if f["code"] == "LXF301"}
        assert unreachable == {"pve3"}
        assert {c["ct"] for c in doc["containers"] if c["host"] == "pve1"} >= {"200", "201"}
        assert r.returncode == 1  # findings (pve1's), as for any scan with one host unreachable
    finally:
        d.stop()
