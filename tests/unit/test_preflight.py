"""audit --for migrate|ha (issue 33, item 3): the container judged on another node, from a
snapshot of each node (`--to-root`): copies of examples/pve-gpu-host that differ as nodes of
one cluster do (majors, driver, snippets, storage `nodes`, HA groups and rules)."""

from __future__ import annotations

import json
import shutil

import pytest

from lxcfix import cli, cluster, preflight

from .conftest import EXAMPLES

STORAGE = "dir: local\n\tpath /var/lib/vz\n\tcontent snippets,iso\n\nlvmthin: local-lvm\n\tvgname pve\n" \
          "\tthinpool data\n\tcontent rootdir\n"


def _node(tmp_path, name, uvm=511, driver="580.159.04"):
    """A node's snapshot: pve-gpu-host with CT 200's nvidia-uvm rule fixed for this cluster
    (major 511: it works on pve1), nvidia-uvm at `uvm`, NVIDIA `driver`."""
    snap = tmp_path / name
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    conf = snap / "etc/pve/lxc/200.conf"
    conf.write_text(conf.read_text().replace("c 508:* rwm", "c 511:* rwm"))
    dev = snap / "proc/devices"
    dev.write_text(dev.read_text().replace("511 nvidia-uvm", f"{uvm} nvidia-uvm"))
    ver = snap / "proc/driver/nvidia/version"
    ver.write_text(ver.read_text().replace("580.159.04", driver))
    (snap / "etc/pve/storage.cfg").write_text(STORAGE)
    (snap / "etc/hostname").write_text(name + "\n")
    return snap


def _audit(capsys, *args):
    rc = cli.run(["audit", *args, "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def test_a_node_with_the_same_majors_can_run_it(tmp_path, capsys):
    one, two = _node(tmp_path, "pve1"), _node(tmp_path, "pve2")
    rc, doc, _ = _audit(capsys, "--for", "migrate", "--ct", "200", "--to", "pve2", "--root", str(one),
                        "--to-root", str(two))
    assert rc == 0 and doc["can_run_on"] == ["pve2"]
    (v,) = doc["nodes"]
    assert v["issues"] == [] and any("local-lvm (lvmthin) is local" in n for n in v["notes"])


def test_another_major_and_driver_there_are_named_with_their_fix(tmp_path, capsys):
    one, two = _node(tmp_path, "pve1"), _node(tmp_path, "pve2", uvm=509, driver="570.86.10")
    rc, doc, _ = _audit(capsys, "--for", "migrate", "--ct", "200", "--to", "pve2", "--root", str(one),
                        "--to-root", f"pve2={two}")
    assert rc == 1 and doc["can_run_on"] == []
    issues = {i["code"]: i for i in doc["nodes"][0]["issues"]}
    assert "c 509:0" in issues["LXF101"]["why"] and "c 511:*" in issues["LXF101"]["why"]
    assert "devN" in issues["LXF101"]["fix"]
    assert "580.159.04 here, 570.86.10 on pve2" in issues["driver"]["why"]


def test_storage_limited_to_other_nodes_and_a_snippet_only_here(tmp_path, capsys):
    one, two = _node(tmp_path, "pve1"), _node(tmp_path, "pve2")
    (one / "etc/pve/storage.cfg").write_text(STORAGE + "\tnodes pve1\n")
    conf = one / "etc/pve/lxc/200.conf"
    conf.write_text(conf.read_text().replace("swap: 0\n", "swap: 0\nhookscript: local:snippets/gpu.sh\n", 1))
    (one / "var/lib/vz/snippets").mkdir(parents=True)
    (one / "var/lib/vz/snippets/gpu.sh").write_text("#!/bin/sh\n")
    (one / "var/lib/vz/snippets/gpu.sh").chmod(0o755)
    (two / "var/lib/vz/snippets").mkdir(parents=True)  # there, as Proxmox makes it: empty
    rc, doc, _ = _audit(capsys, "--for", "migrate", "--ct", "200", "--to", "pve2", "--root", str(one),
                        "--to-root", str(two))
    issues = {i["code"]: i for i in doc["nodes"][0]["issues"]}
    assert rc == 1
    assert issues["storage"]["why"] == "rootfs storage local-lvm is not available on pve2 (nodes pve1)"
    assert issues["LXF152"]["commands"] == ["scp -p /var/lib/vz/snippets/gpu.sh root@pve2:/var/lib/vz/snippets/gpu.sh"]


def test_ha_checks_every_node_of_its_group_and_lists_where_it_can_run(tmp_path, capsys):
    one = _node(tmp_path, "pve1")
    roots = {"pve2": _node(tmp_path, "pve2", uvm=509), "pve3": _node(tmp_path, "pve3")}
    ha = one / "etc/pve/ha"
    ha.mkdir()
    (ha / "resources.cfg").write_text("ct: 200\n\tgroup gpu\n\tstate started\n")
    (ha / "groups.cfg").write_text("group: gpu\n\tnodes pve1:2,pve2,pve3:1\n\trestricted 1\n")
    shared = STORAGE.replace("lvmthin: local-lvm\n", "lvmthin: local-lvm\n\tshared 1\n")
    (one / "etc/pve/storage.cfg").write_text(shared)
    rc, doc, _ = _audit(capsys, "--for", "ha", "--ct", "200", "--root", str(one),
                        *[f"--to-root={n}={d}" for n, d in roots.items()])
    assert rc == 1
    assert [v["node"] for v in doc["nodes"]] == ["pve2", "pve3"] and doc["can_run_on"] == ["pve3"]
    assert doc["notes"] == ["nodes from HA group gpu"]


def test_ha_nodes_from_groups_and_pve9_rules():
    res = "ct: 200\n\tgroup gpu\n\nvm: 101\n"
    groups = "group: gpu\n\tnodes pve1:2,pve2\n\trestricted 1\n\ngroup: open\n\tnodes pve3\n"
    assert preflight.ha_nodes("200", res, groups) == (("pve1", "pve2"), "HA group gpu")
    assert preflight.ha_nodes("200", res.replace("gpu", "open"), groups)[0] is None
    assert preflight.ha_nodes("201", res, groups)[0] == ()
    rules = "node-affinity: ha-rule-1\n\tnodes pve2:1,pve3\n\tresources ct:200,vm:101\n\tstrict 1\n"
    assert preflight.ha_nodes("200", res, groups, rules) == (("pve2", "pve3"),
                                                             "ha/rules.cfg node-affinity ha-rule-1")


def test_cluster_members_from_pmxcfs_and_corosync():
    doc = json.dumps({"nodename": "pve1", "version": 5, "nodelist": {
        "pve2": {"id": 2, "online": 0, "ip": "10.0.0.12"}, "pve1": {"id": 1, "online": 1, "ip": "10.0.0.11"},
        "bad name": {"ip": "x"}, "pve3": {"ip": "$(reboot)"}}})
    assert cluster.members(doc) == (cluster.Member("pve1", "10.0.0.11", True),
                                    cluster.Member("pve2", "10.0.0.12", False), cluster.Member("pve3", None, None))
    assert cluster.members("not json") == () and cluster.members("[]") == ()
    conf = "nodelist {\n  node {\n    name: pve1\n    nodeid: 1\n    ring0_addr: 10.0.0.11\n  }\n}\n"
    assert cluster.corosync_nodes(conf) == (cluster.Member("pve1", "10.0.0.11", None),)


@pytest.mark.parametrize("args, says", [
    (["--for", "migrate", "--ct", "200"], "--for migrate: one --to NODE"),
    (["--for", "reboot", "--ct", "200", "--to", "pve2"], "go with --for migrate"),
    (["--for", "ha"], "one --ct VMID"),
    (["--for", "ha", "--ct", "200", "--to", "pve2"], "no --to"),
    (["--for", "migrate", "--ct", "200", "--to", "pve2", "--to-root", "/nonexistent"], "--to-root /nonexistent"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, says):
    rc = cli.run(["audit", "--root", str(_node(tmp_path, "pve1")), *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1
