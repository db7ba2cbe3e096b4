"""LXF159: a device path a container is given is on the host, but not as a device node: a
regular file, a directory or a dangling symlink (tteck/Proxmox#3758: "TASK ERROR:
//dev/dri/renderD128 is not a device"). Not LXF112 ("does not exist"): it exists, wrongly."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lxcfix.rules import run_rules

from .conftest import make_ctx, make_facts

RENDER = "/dev/dri/renderD128"


@pytest.mark.parametrize("what", ["regular file", "directory", "dangling symlink"])
def test_a_devn_path_that_is_not_a_node_is_lxf159_not_lxf112(what):
    facts = replace(make_facts(nodes={}), not_nodes={RENDER: what})
    ctx = make_ctx(f"arch: amd64\nunprivileged: 1\ndev0: {RENDER},gid=104\n", facts=facts)
    found = run_rules(ctx)
    (f,) = [f for f in found if f.code == "LXF159"]
    assert "LXF112" not in [g.code for g in found]
    assert f.severity == "error" and f.device == RENDER and f.line == 3
    assert f"{RENDER} on the host is a {what}, not a device node" in f.message
    assert "will not start" in f.message
    assert not f.fix.applies and ("rmdir" if what == "directory" else "rm ") in f.fix.title


def test_a_bind_mount_of_a_regular_file_says_what_the_container_gets():
    facts = replace(make_facts(nodes={}), not_nodes={RENDER: "regular file"})
    ctx = make_ctx(f"lxc.mount.entry: {RENDER} dev/dri/renderD128 none bind,optional,create=file\n", facts=facts)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF159"]
    assert "opening it is not the device" in f.message


def test_a_path_that_is_simply_missing_stays_lxf112():
    ctx = make_ctx(f"dev0: {RENDER}\n", facts=make_facts(nodes={}))
    assert "LXF112" in [f.code for f in run_rules(ctx)]
    assert "LXF159" not in [f.code for f in run_rules(ctx)]


# ---------------------------------------------------------------- the walks that find them

def _odd_tree(top):
    (top / "dri").mkdir(parents=True)
    (top / "dri" / "renderD128").write_text("left by a script\n")  # a regular file where the node should be
    (top / "dri" / "card0").mkdir()  # a directory
    (top / "nvidia-uvm").symlink_to(top / "gone")  # a symlink to nothing
    return top


def test_the_local_walk_keeps_what_is_not_a_node_apart(tmp_path):
    from lxcfix.gather import split_nodes
    from lxcfix.transport import _walk_nodes

    top = _odd_tree(tmp_path / "dev")
    nodes, odd = split_nodes(_walk_nodes(str(top), "/dev"))
    assert nodes == {}
    assert odd == {"/dev/dri": "directory", "/dev/dri/renderD128": "regular file", "/dev/dri/card0": "directory",
                   "/dev/nvidia-uvm": "dangling symlink"}


def test_the_sweep_walk_reports_them_too(tmp_path):
    """The one-command sweep a fleet host runs (its python3 script, here on this machine)."""
    from lxcfix import gather, sweep
    from lxcfix.transport import Local

    top = _odd_tree(tmp_path / "dev")
    answers = gather.run_sweep(Local(), sweep.Request(walk=str(top)))
    assert answers.done and answers.garbage is None, answers.garbage
    kinds = {p[len(str(top)):]: n[0] for p, n in answers.nodes.items()}
    assert kinds == {"/dri": "d", "/dri/renderD128": "f", "/dri/card0": "d", "/nvidia-uvm": "l"}


def test_a_snapshot_with_a_regular_file_for_a_node_scans_to_lxf159(tmp_path, capsys):
    import json
    import shutil

    from lxcfix import cli

    from .conftest import EXAMPLES

    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    (snap / "dev" / "dri").mkdir(parents=True)
    (snap / "dev" / "dri" / "renderD128").write_text("")
    (snap / "etc" / "pve" / "lxc" / "250.conf").write_text("arch: amd64\nunprivileged: 1\ndev0: /dev/dri/renderD128\n")
    rc = cli.run(["scan", "--root", str(snap), "--ct", "250", "--json"])
    doc = json.loads(capsys.readouterr().out)
    (ct,) = doc["containers"]
    assert rc == 1 and [f["code"] for f in ct["findings"]] == ["LXF159"]
    assert "regular file, not a device node" in ct["findings"][0]["message"]
