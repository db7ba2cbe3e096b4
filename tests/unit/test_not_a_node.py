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
