"""scan --cluster's bad input: a node that is no cluster member is one line, exit 2."""

from __future__ import annotations

import shutil

from lxcfix import cli

from .conftest import EXAMPLES


def test_scan_cluster_on_a_node_without_members_is_bad_input(tmp_path, capsys):
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    rc = cli.run(["scan", "--cluster", "--root", str(snap)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "--cluster: no cluster members" in err and len(err.strip().splitlines()) == 1


def test_scan_cluster_with_an_inventory_is_bad_input(tmp_path, capsys):
    rc = cli.run(["scan", "--cluster", "--inventory", str(tmp_path / "x.yaml")])
    _, err = capsys.readouterr()
    assert rc == 2 and "not with --inventory" in err
