"""Group access in unprivileged containers (rules.access, lxcfix.idmap): who inside may
open a render/card/kfd/video node, from the config, the idmap and the host node, and
from the opens the probe tried as a member of the group; the fixes, as data."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import agent, cli, ctconfig, plan as plan_mod, probe
from lxcfix.errors import BadInput
from lxcfix.facts import parse_group
from lxcfix.idmap import IdMap, NodeView
from lxcfix.model import DeviceNode
from lxcfix.rules import run_rules
from lxcfix.rules.access import analyze, requests

from .conftest import EXAMPLES, REPO, make_ctx, make_facts

FIXTURES = REPO / "tests" / "unit" / "fixtures"

PVE9 = dict(pve_version="9.0.10")
HEAD = "arch: amd64\nostype: debian\n"
RENDER = "/dev/dri/renderD128"


def node(path, major, minor, uid=0, gid=0, mode=0o660):
    return DeviceNode(path, "c", major, minor, 0o20000 | mode, uid, gid)


HOST_NODES = {RENDER: node(RENDER, 226, 128, gid=993), "/dev/dri/card0": node("/dev/dri/card0", 226, 0, gid=44),
              "/dev/kfd": node("/dev/kfd", 511, 0, gid=993),
              "/dev/dri/by-path/pci-0000:03:00.0-render": node("/dev/dri/by-path/pci-0000:03:00.0-render", 226, 128,
                                                               gid=993)}


def ctx_of(text, flavor="pve", probe_text=None, nodes=None, subgid=None, asks=(), **facts_kw):
    facts = make_facts(backend=flavor, nodes=nodes, **({**PVE9, **facts_kw} if flavor == "pve" else facts_kw))
    if subgid is not None:
        facts = replace(facts, subgid=tuple(subgid), raw={**facts.raw, "/etc/subgid": "".join(
            f"{n}:{s}:{c}\n" for n, s, c in subgid)})
    ctx = make_ctx(text, flavor=flavor, facts=facts)
    if probe_text is not None:
        ctx = replace(ctx, probe=probe.parse(probe_text))
    return ctx.with_asks(asks)


def by_code(findings):
    return {f.code: f for f in findings}


def probed(*lines: str) -> str:
    return "lxcfix-probe 1\n" + "".join(l + "\n" for l in lines) + "end\n"


RENDER_104 = "agroup render gid=104 name=render members=jellyfin:106"


# ---------------------------------------------------------------- the idmap

def test_idmap_maps_both_ways_and_splits_around_a_group():
    m = IdMap.parse([("u 0 100000 65536", 3), ("g 0 100000 65536", 4)])
    assert (m.to_host("g", 104), m.to_ct("g", 100104), m.to_ct("g", 104), m.root_on_host) == (100104, 104, None, 100000)
    assert m.split_at(104, 993).lines() == ["u 0 100000 65536", "g 0 100000 104", "g 104 993 1", "g 105 100105 65431"]
    assert all(r.index == 4 for r in m.split_at(104, 993).of("g"))
    twice = m.split_at(104, 993).split_at(44, 990)  # a second group in the same line keeps the first's pieces
    assert twice.lines() == ["u 0 100000 65536", "g 0 100000 44", "g 44 990 1", "g 45 100045 59", "g 104 993 1",
                             "g 105 100105 65431"]
    assert m.split_at(0, 993).lines()[1:3] == ["g 0 993 1", "g 1 100001 65535"]
    assert m.split_at(65535, 993).lines()[-2:] == ["g 0 100000 65535", "g 65535 993 1"]


def test_idmap_split_refuses_what_is_not_its_own():
    m = IdMap.parse([("u 0 100000 65536", 0), ("g 0 100000 104", 1), ("g 104 993 1", 2), ("g 105 100105 65431", 3)])
    assert m.split_at(104, 993) is m  # mapped already
    assert m.split_at(44, 993) is None  # host 993 is mapped to 104 already: moving it is the admin's call
    assert m.split_at(70000, 5) is None  # not mapped by any line
    included = IdMap.parse([("g 0 100000 65536", None)])
    assert included.split_at(104, 993) is None  # a range from an include cannot be edited here


def test_idmap_parse_is_total_and_bounded():
    m = IdMap.parse([("b 0 100000 65536", 1), ("g 0 \u0661 1", 2), ("u 0 1 0", 3), ("x 0 1 1", 4),
                     ("u 0 99999999999 1", 5), ("g 4294967295 1 2", 6), ("u  0   5\t1", 7)])
    assert [r.text() for r in m.ranges] == ["u 0 100000 65536", "g 0 100000 65536", "u 0 5 1"]
    assert len(m.bad) == 5


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.one_of(st.none(), st.integers(0, 50))), max_size=8))
def test_idmap_parse_never_raises(lines):
    m = IdMap.parse(lines)
    for r in m.ranges:
        assert r.count > 0 and r.host + r.count - 1 < 2 ** 32


def test_who_can_open():
    unmapped = NodeView(None, None, 0o660)  # host root:render 0660 bind-mounted into an unprivileged CT
    assert (unmapped.root_can(), unmapped.member_can(104), unmapped.nobody_can()) == (False, False, True)
    devn = NodeView(0, 0, 0o660)  # Proxmox's devN default
    assert (devn.root_can(), devn.member_can(104), devn.member_can(None), devn.nobody_can()) == (True, False, False, False)
    right = NodeView(0, 104, 0o660)
    assert (right.member_can(104), right.member_can(44), right.member_can(None)) == (True, False, None)
    passed = NodeView(None, 104, 0o660)  # the idmap passes the host group through; root stays unmapped
    assert (passed.root_can(), passed.member_can(104), passed.nobody_can()) == (False, True, False)
    world = NodeView(None, None, 0o666)
    assert (world.root_can(), world.member_can(104)) == (True, True)
    assert unmapped.shown() == "nobody:nogroup 0660" and right.shown({104: "render"}) == "root:render 0660"


# ---------------------------------------------------------------- static findings

def test_offline_devn_without_gid_is_lxf114_with_the_fix():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n")
    (f,) = run_rules(ctx)
    assert (f.code, f.severity, f.device, f.line) == ("LXF114", "warning", RENDER, 4)
    assert f.message == ("inside, /dev/dri/renderD128 will be root:root 0660: only root can open it; "
                         "the container's render group cannot (add gid=N)")
    assert f.fix.applicability == "manual"  # the container's gid is not known offline
    assert ctconfig.describe_edit(ctx.config, f.fix.edits[0]) == [
        "- dev0: /dev/dri/renderD128", "+ dev0: /dev/dri/renderD128,gid=<gid of group 'render' in CT 200>"]
    assert f.fix.notes[0].startswith("# <gid of group 'render' in CT 200>: pct exec 200 -- getent group render")
    assert any("mode=0666" in n for n in f.fix.notes)  # the other way, shown, never applied unasked


def test_offline_scan_of_a_snapshot_reports_it(tmp_path, capsys):
    (tmp_path / "etc/pve/lxc").mkdir(parents=True)
    (tmp_path / "etc/pve/lxc/220.conf").write_text(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text("Character devices:\n226 drm\n")
    with pytest.raises(SystemExit) as rc:
        cli.main(["scan", "--root", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc.value.code == 1
    (c,) = doc["containers"]
    (f,) = c["findings"]
    assert (f["code"], f["device"], f["applicability"]) == ("LXF114", RENDER, "manual")
    assert f["edits"] == [{"op": "replace", "line": 4,
                           "lines": [{"key": "dev0", "value": "/dev/dri/renderD128,gid=<gid of group 'render' in CT 220>"}]}]


def test_devn_with_the_containers_gid_or_mode_0666_is_fine():
    ok = HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128,gid=104\n"
    assert run_rules(ctx_of(ok, probe_text=probed(RENDER_104))) == []
    assert run_rules(ctx_of(ok)) == []  # gid=104 and the container's gid unknown: the probe will tell
    assert run_rules(ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128,mode=0666\n")) == []
    assert run_rules(ctx_of(HEAD + "dev0: /dev/dri/renderD128\n")) == []  # privileged: not this family's


def test_devn_with_another_groups_gid():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128,gid=44\n", probe_text=probed(RENDER_104))
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF114"]
    assert f.message == ("inside, /dev/dri/renderD128 will be root:44 0660: root and members of gid 44 can open it; "
                         "the container's render group (gid 104) cannot (add gid=104)")
    assert ctconfig.describe_edit(ctx.config, f.fix.edits[0])[1] == "+ dev0: /dev/dri/renderD128,gid=104"
    assert f.fix.applicability == "needs-restart"


def test_bind_mount_outside_the_idmap_is_lxf115_nobody_can():
    text = HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file\n"
    (f,) = run_rules(ctx_of(text, nodes=HOST_NODES))
    assert (f.code, f.severity) == ("LXF115", "error")
    assert f.message == ("bind-mounted /dev/kfd is root:993 0660 on the host; gid 993 is not mapped into CT 200, "
                         "so inside /dev/kfd is nobody:nogroup 0660 and nobody can open it, root included")
    # Proxmox VE 8.1+: the bind mount becomes a devN entry with the container's gid
    ctx = ctx_of(text, nodes=HOST_NODES, probe_text=probed("agroup render gid=107 name=render members=-"))
    fix = by_code(run_rules(ctx))["LXF115"].fix
    assert [ctconfig.describe_edit(ctx.config, e) for e in fix.edits] == [
        ["- lxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file"], ["+ dev0: /dev/kfd,gid=107"]]
    assert fix.applicability == "needs-restart"


def test_plain_lxc_gets_the_idmap_pass_through_when_root_may_map_the_group():
    text = ("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"
            "lxc.mount.entry = /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file 0 0\n")
    base = dict(flavor="lxc", nodes=HOST_NODES, probe_text=probed(RENDER_104))
    f = by_code(run_rules(ctx_of(text, **base)))["LXF115"]
    assert f.fix.applicability == "manual"  # /etc/subgid not read: root may not be allowed to map 993
    assert "# let root map the host group: echo 'root:993:1' >> /etc/subgid" in f.fix.notes
    assert f.fix.host_lines == ()
    ctx = ctx_of(text, subgid=[("root", 100000, 65536), ("root", 993, 1)], **base)
    f = by_code(run_rules(ctx))["LXF115"]
    assert f.fix.applicability == "needs-restart" and f.fix.host_lines == ()
    assert [ctconfig.describe_edit(ctx.config, e) for e in f.fix.edits] == [[
        "- lxc.idmap = g 0 100000 65536", "+ lxc.idmap = g 0 100000 104", "+ lxc.idmap = g 104 993 1",
        "+ lxc.idmap = g 105 100105 65431"]]


def test_write_subgid_when_asked_makes_it_part_of_the_plan():
    text = ("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"
            "lxc.mount.entry = /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file 0 0\n")
    ctx = ctx_of(text, flavor="lxc", nodes=HOST_NODES, probe_text=probed(RENDER_104),
                 subgid=[("root", 100000, 65536)], asks=("write-subgid",))
    fix = by_code(run_rules(ctx))["LXF115"].fix
    assert fix.applicability == "needs-restart" and fix.host_lines == (("/etc/subgid", "root:993:1"),)
    p = plan_mod.make_plan(ctx)
    (h,) = p.host_files
    assert (h.path, h.before, h.after) == ("/etc/subgid", b"root:100000:65536\n", b"root:100000:65536\nroot:993:1\n")
    assert "+lxc.idmap = g 104 993 1\n" in p.diff() and "+root:993:1\n" in p.diff()


def test_two_groups_share_one_idmap_change_and_the_plan_is_stable():
    text = ("lxc.idmap = b 0 100000 65536\n"
            "lxc.mount.entry = /dev/dri dev/dri none bind,optional,create=dir 0 0\n")
    nodes = {p: n for p, n in HOST_NODES.items() if p.startswith("/dev/dri/")}
    ctx = ctx_of(text, flavor="lxc", nodes=nodes, subgid=[("root", 44, 1), ("root", 993, 1)],
                 probe_text=probed(RENDER_104, "agroup video gid=44 name=video members=-"))
    found = [f for f in run_rules(ctx) if f.code == "LXF115"]
    assert sorted(f.device for f in found) == ["/dev/dri/card0", RENDER]  # the by-path alias is the same node
    assert found[0].fix == found[1].fix  # one idmap edit for both: no two different edits of one line
    p = plan_mod.make_plan(ctx)
    assert [l for l in p.diff().splitlines() if l.startswith(("+l", "-l"))] == [
        "-lxc.idmap = b 0 100000 65536", "+lxc.idmap = u 0 100000 65536", "+lxc.idmap = g 0 100000 44",
        "+lxc.idmap = g 44 44 1", "+lxc.idmap = g 45 100045 59", "+lxc.idmap = g 104 993 1",
        "+lxc.idmap = g 105 100105 65431"]
    again = ctx.with_config(ctconfig.parse(p.after, "lxc", ctx.config.path))
    assert plan_mod.make_plan(again).is_empty
    assert [f for f in run_rules(again) if f.code in ("LXF114", "LXF115")] == []


def test_pve_default_map_becomes_explicit_lines_before_8_1():
    text = HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n"
    ctx = ctx_of(text, nodes=HOST_NODES, probe_text=probed(RENDER_104), pve_version="7.4.3",
                 subgid=[("root", 100000, 65536), ("root", 993, 1)])
    fix = by_code(run_rules(ctx))["LXF115"].fix
    assert [l for e in fix.edits for l in ctconfig.describe_edit(ctx.config, e)] == [
        "+ lxc.idmap: u 0 100000 65536", "+ lxc.idmap: g 0 100000 104", "+ lxc.idmap: g 104 993 1",
        "+ lxc.idmap: g 105 100105 65431"]
    assert fix.applicability == "needs-restart"
    after = ctconfig.apply_edits(ctx.config, fix.edits)
    assert run_rules(ctx.with_config(after)) == []


def test_mode_0666_only_when_asked():
    text = HEAD + "unprivileged: 1\ndev0: /dev/kfd,uid=0\n"
    nodes = {"/dev/kfd": HOST_NODES["/dev/kfd"]}
    unasked = plan_mod.make_plan(ctx_of(text, nodes=nodes))
    assert unasked.is_empty  # gid unknown: manual, and mode=0666 is never made unasked
    asked = plan_mod.make_plan(ctx_of(text, nodes=nodes, asks=("mode-0666",)))
    assert [l for l in asked.diff().splitlines() if l.startswith(("+d", "-d"))] == [
        "-dev0: /dev/kfd,uid=0", "+dev0: /dev/kfd,uid=0,mode=0666"]


def test_requests_name_each_nodes_group_and_a_devn_gid():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128,gid=44\ndev1: /dev/dri/card0\n"
                        "dev2: /dev/net/tun\n")
    assert requests(ctx) == [("render", RENDER), ("44", RENDER), ("video", "/dev/dri/card0")]
    assert requests(ctx_of(HEAD + "dev0: /dev/dri/renderD128\n")) == []  # privileged


def test_hostile_devn_options_give_no_view_and_no_exception():
    for opts in (",gid=\u0661\u0660\u0664", ",gid=99999999999", ",mode=0999", ",mode=", ",uid=-1"):
        ctx = ctx_of(HEAD + f"unprivileged: 1\ndev0: /dev/dri/renderD128{opts}\n")
        (n,) = analyze(ctx).nodes
        assert n.view is None and run_rules(ctx) == []


# ---------------------------------------------------------------- what the probe tried

DEVN = HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n"


def test_a_refused_open_as_a_member_is_lxf204_and_replaces_the_static_finding():
    text = probed("node /dev/dri/renderD128 exists=1 char=1 major=226 minor=128 open=ok", RENDER_104,
                  "perm uid=0 gid=0 mode=0660 /dev/dri/renderD128",
                  "access render uid=106 gid=104 user=jellyfin open=EACCES via=python3 why=- /dev/dri/renderD128")
    ctx = ctx_of(DEVN, probe_text=text, nodes=HOST_NODES)
    found = by_code(run_rules(ctx))
    assert set(found) == {"LXF204"}
    f = found["LXF204"]
    assert (f.severity, f.device) == ("error", RENDER)
    assert f.message == ("as jellyfin (uid 106) in group render (gid 104), open /dev/dri/renderD128 gives EACCES: "
                         "inside it is root:root 0660: Proxmox creates devN nodes root:root 0660 unless "
                         "uid=/gid=/mode= say otherwise")
    assert f.evidence[0] == ("tried for real (python3): a child process dropped to uid 106, gid 104 and opened "
                             "/dev/dri/renderD128 read-write: EACCES")
    assert "members of render: jellyfin" in f.evidence
    assert "stat inside: /dev/dri/renderD128 is root:root 0660 (0:0)" in f.evidence
    assert f.fix.applicability == "needs-restart"
    p = plan_mod.make_plan(ctx)
    assert "-dev0: /dev/dri/renderD128\n+dev0: /dev/dri/renderD128,gid=104\n" in p.diff()


def test_an_open_that_got_through_gives_no_finding():
    text = probed(RENDER_104, "access render uid=106 gid=104 user=jellyfin open=ENXIO via=setpriv why=- "
                  "/dev/dri/renderD128")
    assert run_rules(ctx_of(DEVN, probe_text=text)) == []  # the probe has the last word


def test_untried_keeps_the_static_finding_and_says_why():
    text = probed(RENDER_104, "access render uid=- gid=- user=- open=untried via=- why=no-python3-or-setpriv "
                  "/dev/dri/renderD128")
    (f,) = run_rules(ctx_of(DEVN, probe_text=text))
    assert f.code == "LXF114" and "(add gid=104)" in f.message
    assert f.evidence[-1] == ("the probe could not try it as a render member: no-python3-or-setpriv "
                              "(no python3 or setpriv inside)")


def test_root_refused_but_members_in_is_lxf205_not_lxf201():
    text = HEAD + ("unprivileged: 1\nlxc.idmap: u 0 100000 65536\nlxc.idmap: g 0 100000 104\nlxc.idmap: g 104 993 1\n"
                   "lxc.idmap: g 105 100105 65431\n"
                   "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n")
    out = probed("node /dev/dri/renderD128 exists=1 char=1 major=226 minor=128 open=EACCES", RENDER_104,
                 "access render uid=106 gid=104 user=jellyfin open=ok via=python3 why=- /dev/dri/renderD128")
    found = by_code(run_rules(ctx_of(text, probe_text=out, nodes=HOST_NODES)))
    assert set(found) == {"LXF205"} and found["LXF205"].severity == "info"
    assert "but members of render can" in found["LXF205"].message
    # The same root EACCES with the member refused too: LXF201 stays, LXF204 says who
    refused = out.replace("open=ok", "open=EACCES")
    assert {"LXF201", "LXF204"} <= set(by_code(run_rules(ctx_of(text, probe_text=refused, nodes=HOST_NODES))))


# ---------------------------------------------------------------- the probe's lines, parsed totally

def test_probe_argv_sends_access_requests_first_and_validates_them():
    argv = probe.probe_argv([RENDER], [("render", RENDER), ("104", RENDER)])
    assert argv[3:] == ["lxcfix-probe", "access:render:/dev/dri/renderD128", "access:104:/dev/dri/renderD128", RENDER]
    for bad in [("render x", RENDER), ("$(reboot)", RENDER), ("Render", RENDER), ("render", "relative"),
                ("render", "/dev/x\nnode /dev/y"), ("9" * 11, RENDER)]:
        with pytest.raises(Exception):
            probe.probe_argv([RENDER], [bad])


def test_parse_access_takes_only_exact_bounded_lines():
    got = probe.parse_access("\n".join([
        "perm uid=0 gid=104 mode=0660 /dev/dri/renderD128",
        "perm uid=\u0660 gid=0 mode=0660 /dev/x", "perm uid=0 gid=0 mode=0999 /dev/y",
        "perm uid=99999999999 gid=0 mode=0660 /dev/z", "perm uid=4294967296 gid=0 mode=0660 /dev/w",
        "agroup render gid=104 name=render members=a:1,b:-,c$:2,d:x," + ",".join(f"u{i}:{i}" for i in range(50)),
        "agroup video gid=- name=- members=-", "agroup Video gid=44 name=video members=-",
        "access render uid=106 gid=104 user=jellyfin open=EACCES via=python3 why=- /dev/dri/renderD128",
        "access render uid=1 gid=1 user=x open=EACCES via=sudo why=- /dev/q",
        "access render uid=1 gid=1 user=x open=eacces via=python3 why=- /dev/q",
        "access render uid=1 gid=1 user=x open=ok via=python3 why=- relative",
    ]))
    assert list(got.owners) == ["/dev/dri/renderD128"] and got.owners[RENDER].mode == 0o660
    assert [m for m, _ in got.groups["render"].members][:3] == ["a", "b", "u0"] and \
        len(got.groups["render"].members) <= probe.MAX_MEMBERS
    assert got.groups["video"].gid is None and "Video" not in got.groups
    (t,) = got.tries
    assert (t.user, t.open, t.via) == ("jellyfin", "EACCES", "python3")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([
    "perm uid=0 gid=0 mode=0660 /dev/x", "agroup render gid=104 name=render members=a:1",
    "access render uid=1 gid=1 user=a open=ok via=python3 why=- /dev/x", "perm ", "agroup ", "access ",
    "\u0661", "9" * 40, " ", "=", ":", ",", "-", "\x00", "\u2028", "\r"]), st.text(max_size=8)), max_size=30).map("".join))
def test_parse_access_never_raises(text):
    probe.parse_access(text)
    probe.parse(text)


def test_parse_access_is_bounded():
    lines = "\n".join(f"access render uid=1 gid=1 user=a open=ok via=python3 why=- /dev/x{i}" for i in range(10000))
    assert len(probe.parse_access(lines).tries) == probe.MAX_ACCESS_LINES


# ---------------------------------------------------------------- the real script's group-access part

SHELLS = {"busybox": ("busybox", "sh"), "dash": ("dash",), "bash": ("bash",)}


@pytest.fixture(params=sorted(SHELLS))
def shell(request):
    import shutil

    exe = shutil.which(SHELLS[request.param][0])
    if exe is None:
        pytest.skip(f"{request.param} is not installed")
    return [exe, *SHELLS[request.param][1:]]


def _free_major() -> int:
    with open("/proc/devices") as f:
        used = {int(l.split()[0]) for l in f if l.strip()[:1].isdigit()}
    return next(m for m in range(511, 383, -1) if m not in used)


@pytest.fixture
def access_tree():
    import os
    import shutil
    import stat
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0:
        pytest.skip("needs root: mknod, and dropping to another uid")
    root = Path(tempfile.mkdtemp(prefix="lxcfix-access-", dir="/tmp"))
    root.chmod(0o755)
    (root / "group").write_text("root:x:0:\nrender:x:4242:svc\nempty:x:4444:\n")
    (root / "passwd").write_text("root:x:0:0::/root:/bin/sh\nsvc:x:4343:4343::/:/bin/sh\n")
    major = _free_major()
    for name, mode, gid in (("group-rw", 0o660, 4242), ("root-only", 0o600, 0)):
        os.mknod(root / name, stat.S_IFCHR | mode, os.makedev(major, 0))
        os.chmod(root / name, mode)
        os.chown(root / name, 0, gid)
    (root / "cwd").mkdir()
    yield root
    shutil.rmtree(root)


def _bin_dir(where, shell, tools):
    import shutil

    d = where / "bin"
    d.mkdir()
    for tool in tools:
        busybox = shell[0].endswith("busybox") and tool != "setpriv"
        target = shell[0] if tool == "sh" or busybox else shutil.which(tool)
        (d / tool).symlink_to(target)
    return str(d)


def _snapshot(root):
    import os

    return {p: (s.st_mode, s.st_uid, s.st_gid, s.st_mtime_ns) for p in root.rglob("*") if (s := os.lstat(p))}


@pytest.mark.parametrize("variant", ["python3", "sh-setpriv", "sh-bare"])
def test_script_tries_the_open_as_a_member_and_changes_nothing(shell, variant, access_tree, tmp_path):
    import os
    import subprocess

    ok, refused = str(access_tree / "group-rw"), str(access_tree / "root-only")
    text = probe.script().replace("/etc/group", str(access_tree / "group")).replace(
        "/etc/passwd", str(access_tree / "passwd"))
    argv = probe.probe_argv([ok, refused], [("render", ok), ("render", refused), ("4444", ok), ("nosuch", ok)])
    argv[2] = text
    env = dict(os.environ)
    tools = {"python3": None, "sh-setpriv": ("sh", "stat", "timeout", "tr", "setpriv"),
             "sh-bare": ("sh", "stat", "timeout", "tr")}[variant]
    if tools is not None:
        env["PATH"] = _bin_dir(tmp_path, shell, tools)
    before = _snapshot(access_tree)
    r = subprocess.run([*shell, *argv[1:]], cwd=access_tree / "cwd", env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.endswith("end\n"), r.stdout + r.stderr
    seen = probe.parse(r.stdout).access
    assert seen.groups["render"].gid == 4242 and seen.groups["render"].members == (("svc", 4343),)
    assert seen.groups["nosuch"].gid is None and seen.groups["4444"].name == "empty"
    assert (seen.owners[ok].gid, seen.owners[ok].mode, seen.owners[refused].mode) == (4242, 0o660, 0o600)
    tried = {(t.path, t.spec): t for t in seen.tries}
    assert tried[(ok, "nosuch")].why == "no-group"
    if variant == "sh-bare":
        assert {t.open for t in seen.tries} == {"untried"}
        assert tried[(ok, "render")].why == "no-python3-or-setpriv"
    else:
        via = "python3" if variant == "python3" else "setpriv"
        # group rw, no driver on that major: the permission check let it through (ENXIO)
        assert (tried[(ok, "render")].open, tried[(ok, "render")].uid, tried[(ok, "render")].via) == ("ENXIO", 4343, via)
        assert tried[(refused, "render")].open == "EACCES"
        assert (tried[(ok, "4444")].open, tried[(ok, "4444")].uid) == ("EACCES", 65534)  # no members: uid 65534
    assert _snapshot(access_tree) == before, "the probe changed something"


# ---------------------------------------------------------------- applying, and the audit

def test_apply_writes_subgid_in_the_same_transaction_backed_up_and_undone_on_failure(tmp_path):
    from lxcfix.apply import Applier, Host
    from lxcfix.errors import ApplyFailed
    from lxcfix.model import Finding

    text = ("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"
            "lxc.mount.entry = /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file 0 0\n")
    ctx = ctx_of(text, flavor="lxc", nodes=HOST_NODES, probe_text=probed(RENDER_104),
                 subgid=[("root", 100000, 65536)], asks=("write-subgid",))
    p = plan_mod.make_plan(ctx)
    root = tmp_path / "host"
    (root / "var/lib/lxc/200").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "var/lib/lxc/200/config").write_text(text)
    (root / "etc/subgid").write_text("root:100000:65536\n")
    local = lambda path: str(root / path.lstrip("/"))  # noqa: E731
    applier = Applier(Host(local), "200", str(tmp_path / "state"), "lxc")
    steps = applier.transaction(p, restart=False).describe_steps()
    assert any(s.startswith("back up /etc/subgid to ") for s in steps)
    assert any(s.startswith("write /etc/subgid atomically") for s in steps)

    still = Finding("LXF204", "error", "200", "still refused", device=RENDER)
    with pytest.raises(ApplyFailed):  # a failure after the writes: both files back as they were
        applier.transaction(p, restart=False, verify=lambda: [still]).run()
    assert (root / "etc/subgid").read_text() == "root:100000:65536\n"
    assert (root / "var/lib/lxc/200/config").read_text() == text

    applier.transaction(p, restart=False).run()
    assert (root / "etc/subgid").read_text() == "root:100000:65536\nroot:993:1\n"
    assert "lxc.idmap = g 104 993 1\n" in (root / "var/lib/lxc/200/config").read_text()
    backups = sorted((tmp_path / "state/host/host-files").iterdir())
    assert [b.read_text() for b in backups][-1] == "root:100000:65536\n"


def test_apply_mode_0666_on_a_snapshot(tmp_path, capsys):
    (tmp_path / "etc/pve/lxc").mkdir(parents=True)
    conf = tmp_path / "etc/pve/lxc/220.conf"
    conf.write_text(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n")
    with pytest.raises(SystemExit) as rc:
        cli.main(["apply", "--root", str(tmp_path), "--ct", "220", "--no-restart", "--yes"])
    assert rc.value.code == 0 and conf.read_text().endswith("dev0: /dev/dri/renderD128\n")  # nothing unasked
    capsys.readouterr()
    with pytest.raises(SystemExit) as rc:
        cli.main(["apply", "--root", str(tmp_path), "--ct", "220", "--no-restart", "--yes", "--mode-0666"])
    assert rc.value.code == 0, capsys.readouterr()
    assert conf.read_text().endswith("dev0: /dev/dri/renderD128,mode=0666\n")


def test_audit_lists_them_as_not_working_for_non_root_users():
    from lxcfix import audit, gather
    from lxcfix.scan import HostReport, analyze_container

    from .conftest import no_includes

    facts = replace(make_facts(backend="pve", nodes=HOST_NODES, **PVE9), host="pve1")
    configs = {"220": HEAD + "unprivileged: 1\ndev0: /dev/kfd\n",
               "221": HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file\n"}
    reports = tuple(analyze_container(facts, gather.Loaded(ct, f"/etc/pve/lxc/{ct}.conf",
                                                           ctconfig.parse(t.encode(), "pve", f"/etc/pve/lxc/{ct}.conf")),
                                      no_includes) for ct, t in configs.items())
    report = audit.audit([HostReport("pve1", "pve", facts, reports)], "reboot",
                         ct_groups={("pve1", "220"): {"render": 107}, ("pve1", "221"): {"render": 107}})
    got = {(i.ct, i.code): i for i in report.items}
    kfd = got[("220", "LXF114")]
    assert kfd.outcome == "will" and kfd.why.startswith("will not work for non-root users, now and after the reboot: "
                                                         "inside, /dev/kfd will be root:root 0660")
    assert "(add gid=107)" in kfd.why and kfd.change.splitlines()[-1] == "+ dev0: /dev/kfd,gid=107"
    mounted = got[("221", "LXF115")]
    assert mounted.why.startswith("will not work for any user, root included")
    assert mounted.change.splitlines()[-2:] == ["- lxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file",
                                                "+ dev0: /dev/kfd,gid=107"]


def test_devn_fix_keeps_what_works_and_refuses_a_gid_outside_the_map():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128,uid=5,mode=0600\n", probe_text=probed(RENDER_104))
    (f,) = run_rules(ctx)
    assert ctconfig.describe_edit(ctx.config, f.fix.edits[0])[1] == "+ dev0: /dev/dri/renderD128,uid=5,mode=0660,gid=104"
    far = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n",
                 probe_text=probed("agroup render gid=70000 name=render members=-"))
    (f,) = run_rules(far)
    assert f.fix.applicability == "manual" and any("outside CT 200's idmap" in n for n in f.fix.notes)


def test_explicit_devn_migration_and_the_access_fix_do_not_both_add_the_entry():
    text = HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n"
    ctx = ctx_of(text, nodes=HOST_NODES, probe_text=probed(RENDER_104))
    added = [l for l in plan_mod.make_plan(ctx, "devn").diff().splitlines() if l.startswith("+dev")]
    assert len(added) == 1  # the migration's one entry
    (f,) = [f for f in run_rules(ctx.with_style("devn")) if f.code == "LXF115"]
    assert f.fix.edits == () and "gid=104" in f.fix.title
    assert [l for l in plan_mod.make_plan(ctx).diff().splitlines() if l.startswith("+dev")] == [
        "+dev0: /dev/dri/renderD128,gid=104"]


# ---------------------------------------------------------------- host groups never mapped in (issue 21 row 2)

from lxcfix.idmap import host_gid_refusal  # noqa: E402


@pytest.mark.parametrize("gid,group,host_groups,refused", [
    (0, "render", None, "root group"),
    (0, "render", {"render": 0}, "root group"),
    (42, "render", None, "shadow"), (6, "render", None, "disk"), (15, "render", None, "kmem"),
    (27, "render", None, "sudo"), (4, "render", None, "adm"),
    (994, "render", {"shadow": 994, "render": 993}, "shadow"),   # by name in the host's /etc/group
    (27, "video", {"sudo": 27, "video": 44}, "sudo"),
    (5, "render", {"tty": 5}, "system group"), (99, "render", None, "system group"),
    (44, "render", None, "system group"),                       # video's gid is not render's own
    (44, "video", None, None), (20, "dialout", None, None),     # the node's own group (Debian's gids)
    (30, "render", {"render": 30}, None),                        # by name, under 100
    (44, "video", {"video": 44, "sudo": 27}, None),
    (993, "render", None, None), (104, "render", {"render": 104}, None), (4242, "render", {}, None),
])
def test_host_gids_that_grant_anything_on_the_host_are_never_mapped(gid, group, host_groups, refused):
    why = host_gid_refusal(gid, group, host_groups)
    assert (why is None) == (refused is None), why
    if refused:
        assert refused in why and f"host gid {gid}" in why


ROOT_NODE = {RENDER: node(RENDER, 226, 128, gid=0)}
PLAIN = ("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"
         "lxc.mount.entry = /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file 0 0\n")


@pytest.mark.parametrize("nodes,groups", [
    (ROOT_NODE, None),                                            # root:root 0660 on the host
    ({RENDER: node(RENDER, 226, 128, gid=42)}, None),             # shadow, by Debian's gid
    ({RENDER: node(RENDER, 226, 128, gid=993)}, {"shadow": 993}),  # shadow, by the host's name
])
def test_write_subgid_never_maps_a_privileged_host_group(nodes, groups):
    """Before: the fix was `lxc.idmap = g 104 0 1` plus `root:0:1` in /etc/subgid (with
    --write-subgid), and the container's root made setgid files of the host's root group."""
    ctx = ctx_of(PLAIN, flavor="lxc", nodes=nodes, probe_text=probed(RENDER_104),
                 subgid=[("root", 100000, 65536), ("root", 0, 1000)], asks=("write-subgid",))
    ctx = replace(ctx, facts=replace(ctx.facts, groups=groups))
    f = by_code(run_rules(ctx))["LXF115"]
    assert f.fix.applicability == "manual" and f.fix.edits == () and f.fix.host_lines == ()
    notes = "\n".join(f.fix.notes)
    assert "never maps it into CT 200" in notes and "udev rule" in notes
    assert "root:0:1" not in notes and "lxc.idmap = g 104" not in notes
    p = plan_mod.make_plan(ctx)
    assert p.host_files == () and b"lxc.idmap = g 104" not in p.after


def test_a_privileged_host_group_on_proxmox_offers_devn_gid():
    text = HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n"
    ctx = ctx_of(text, nodes=ROOT_NODE, probe_text=probed(RENDER_104), pve_version="7.4.3",
                 subgid=[("root", 100000, 65536), ("root", 0, 1)], asks=("write-subgid",))
    fix = by_code(run_rules(ctx))["LXF115"].fix
    assert fix.edits == () and fix.applicability == "manual"
    assert any("devN: /dev/dri/renderD128,gid=104,mode=0660" in n for n in fix.notes), fix.notes


# ---------------------------------------------------------------- only the node's own group (issue 30 item 12)

DEBIAN_SERVICES = json.loads((FIXTURES / "facts" / "host_groups" / "debian12-services.json").read_text())["text"]
HOST_GROUPS = parse_group(DEBIAN_SERVICES)


def _mapped(gid, asks=("write-subgid",)):
    """LXF115's fix for renderD128 bind-mounted from a host node of group `gid` (a Debian host's /etc/group)."""
    nodes = {RENDER: node(RENDER, 226, 128, gid=gid)}
    ctx = ctx_of(PLAIN, flavor="lxc", nodes=nodes, probe_text=probed(RENDER_104),
                 subgid=[("root", 100000, 65536)], asks=asks)
    ctx = replace(ctx, facts=replace(ctx.facts, groups=HOST_GROUPS))
    return ctx, by_code(run_rules(ctx))["LXF115"].fix


@pytest.mark.parametrize("group", ["kvm", "docker", "systemd-journal", "ssl-cert", "users"])
def test_write_subgid_never_maps_a_host_group_that_is_not_the_nodes_own(group):
    """Before: only gids under 100 and six named groups were refused: a node of group kvm (994),
    docker (995), systemd-journal (999) or ssl-cert (103) was passed through with lxc.idmap and
    root:GID:1 written to /etc/subgid, and the container's root got that group's access on the host."""
    gid = HOST_GROUPS[group]
    ctx, fix = _mapped(gid)
    assert fix.applicability == "manual" and fix.edits == () and fix.host_lines == ()
    notes = "\n".join(fix.notes)
    assert f"host gid {gid} is the host's {group} group, not the node's own render group" in notes
    assert f"--map-group {group}" in notes
    p = plan_mod.make_plan(ctx)
    assert p.host_files == () and f"root:{gid}:1".encode() not in p.after and b"lxc.idmap = g 104" not in p.after


def test_the_nodes_own_group_is_mapped_and_a_named_group_only_when_named():
    _, fix = _mapped(HOST_GROUPS["render"])
    assert fix.applicability == "needs-restart" and fix.host_lines == (("/etc/subgid", "root:993:1"),)
    ctx, fix = _mapped(HOST_GROUPS["kvm"], asks=("write-subgid", "map-group:kvm"))
    assert fix.applicability == "needs-restart" and fix.host_lines == (("/etc/subgid", "root:994:1"),)
    assert "+lxc.idmap = g 104 994 1\n" in plan_mod.make_plan(ctx).diff()
    _, fix = _mapped(HOST_GROUPS["kvm"], asks=("write-subgid", "map-group:docker"))  # another group named
    assert fix.applicability == "manual" and fix.host_lines == ()


def test_a_gid_the_host_does_not_name_and_unread_groups_keep_their_old_answer():
    assert host_gid_refusal(4242, "render", HOST_GROUPS) is None  # no host group: grants nothing by name
    assert "kvm" in host_gid_refusal(994, "render", HOST_GROUPS)
    assert host_gid_refusal(994, "render", HOST_GROUPS, named=("kvm",)) is None
    assert "shadow" in host_gid_refusal(42, "render", HOST_GROUPS, named=("shadow",))  # never, named or not


@pytest.mark.parametrize("name,said", [
    ("root", "--map-group root: the host's root group grants privileged access on the host"),
    ("sudo", "--map-group sudo: the host's sudo group grants privileged access on the host"),
    ("a b", "--map-group a b: not a group name"),
])
def test_map_group_refuses_a_privileged_or_bad_name_in_one_line(name, said, capsys):
    rc = cli.run(["plan", "--root", str(EXAMPLES / "pve-gpu-host"), "--ct", "200", "--map-group", name])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [f"lxcfix: error: {said}" + ("; lxcfix never maps it into a container"
                                                                    if "privileged" in said else "")]


def test_map_group_is_carried_to_a_fleet_host_and_checked_there():
    assert agent._asks({"asks": ["write-subgid", "map-group:kvm"]}) == {"write-subgid", "map-group:kvm"}
    with pytest.raises(BadInput):
        agent._asks({"asks": ["map-group:root"]})
    with pytest.raises(BadInput):
        agent._asks({"asks": ["map-group:x;y"]})
