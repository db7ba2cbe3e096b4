"""audit --for ha with the other nodes reached over real SSH (issue 33, item 3): as Proxmox
reaches a member (root, host keys checked strictly against the cluster's
/etc/pve/priv/known_hosts). The source node is a snapshot of a GPU host; "pve2" is this
machine behind a real sshd on 127.0.0.1 (no NVIDIA driver here: the container's GPU cannot
work there); "pve3" answers nowhere."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .sshd import Keys, Sshd, closed_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def cluster(tmp_path):
    keys = Keys.make(tmp_path / "client")
    d = Sshd.start(tmp_path / "sshd-pve2", keys)
    src = tmp_path / "pve1"
    shutil.copytree(EXAMPLES / "pve-gpu-host", src)
    conf = src / "etc/pve/lxc/200.conf"
    conf.write_text(conf.read_text().replace("c 508:* rwm", "c 511:* rwm"))
    (src / "etc/pve/ha").mkdir()
    (src / "etc/pve/ha/resources.cfg").write_text("ct: 200\n\tgroup gpu\n")
    (src / "etc/pve/ha/groups.cfg").write_text("group: gpu\n\tnodes pve2,pve3\n\trestricted 1\n")
    (src / "etc/pve/priv").mkdir()
    (src / "etc/pve/priv/known_hosts").write_text(d.known_hosts_line() + "\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"Host {n}\n  HostName 127.0.0.1\n  Port {p}\n  User root\n  IdentityFile {keys.private}\n"
                           "  IdentitiesOnly yes\n" for n, p in (("pve2", d.port), ("pve3", closed_port()))))
    try:
        yield src, cfg, d
    finally:
        d.stop()


def _audit(src, cfg, env_home):
    return subprocess.run([sys.executable, "-m", "lxcfix", "audit", "--for", "ha", "--ct", "200", "--root", str(src),
                           "--ssh-config", str(cfg), "--json"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(env_home)})


def test_ha_preflight_reaches_the_nodes_over_ssh_with_the_clusters_known_hosts(cluster, tmp_path):
    src, cfg, d = cluster
    r = _audit(src, cfg, tmp_path)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    nodes = {v["node"]: v for v in doc["nodes"]}
    assert d.accepted() >= 1  # a real login
    codes = {i["code"] for i in nodes["pve2"]["issues"]}
    assert "driver" in codes, nodes["pve2"]  # facts read over SSH: no NVIDIA driver on that node
    assert nodes["pve3"]["error"].startswith("not checked: pve3 cannot be reached")
    assert doc["can_run_on"] == []
    # a key the cluster's known_hosts does not hold: refused, never accepted in silence
    (src / "etc/pve/priv/known_hosts").write_text("")
    r = _audit(src, cfg, tmp_path)
    doc = json.loads(r.stdout)
    pve2 = {v["node"]: v for v in doc["nodes"]}["pve2"]
    assert r.returncode == 3 and "is unknown" in pve2["error"], pve2
