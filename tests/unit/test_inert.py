"""Rules that do nothing (LXF140-LXF146): what LXC really does with each line, and
that each fix really does what the line meant (the fixed config replayed through
LXC's own list semantics, devices.LxcDeviceList)."""

from __future__ import annotations

import pytest

from lxcfix import ctconfig, devices
from lxcfix.model import DeviceNode
from lxcfix.rules import inert, run_rules

from .conftest import make_ctx, make_facts

HEAD = "arch: amd64\nostype: debian\n"
NV = {p: DeviceNode(p, "c", 195, m, 0o20666) for p, m in
      (("/dev/nvidia0", 0), ("/dev/nvidia1", 1), ("/dev/nvidia3", 3), ("/dev/nvidiactl", 255))}
GPU_MOUNTS = ("lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
              "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n"
              "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n")


def found(text, code=None, **kw):
    ctx = make_ctx(text, **kw)
    return ctx, [f for f in inert.check(ctx) if code is None or f.code == code]


def fixed(ctx, f):
    """The container with the finding's fix applied, judged again."""
    return ctx.with_config(ctconfig.apply_edits(ctx.config, f.fix.edits))


def test_inert_deny_under_a_wildcard_allow_leaves_the_device_open_and_the_fix_really_denies_it():
    text = HEAD + "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.deny: c 195:3 rwm\n" + GPU_MOUNTS
    ctx, (f,) = found(text, facts=make_facts(nodes=NV))
    assert ctx.effective.ruleset.allows("c", 195, 3)  # what LXC really does: the deny is not compiled
    assert (f.code, f.severity, f.line) == ("LXF140", "error", 4)
    assert f.message.startswith("lxc.cgroup2.devices.deny: c 195:3 rwm does nothing: in allowlist mode")
    assert "c 195:3 stays allowed by c 195:* rwm (200.conf:3)" in f.message
    assert f.fix.applicability == "manual"  # it takes access away: the admin's call
    assert [line for e in f.fix.edits for line in ctconfig.describe_edit(ctx.config, e)] == [
        "- lxc.cgroup2.devices.allow: c 195:* rwm",
        "+ lxc.cgroup2.devices.allow: c 195:0 rwm", "+ lxc.cgroup2.devices.allow: c 195:255 rwm",
        "- lxc.cgroup2.devices.deny: c 195:3 rwm"]
    after = fixed(ctx, f)
    rs = after.effective.ruleset
    assert not rs.allows("c", 195, 3) and rs.allows("c", 195, 0) and rs.allows("c", 195, 255)
    assert inert.check(after) == []


def test_inert_deny_of_an_include_rule_is_fixed_by_an_equal_deny_then_what_is_left():
    ctx, (f,) = found(HEAD + "lxc.cgroup2.devices.deny: c 1:3 w\n")  # meant: /dev/null read-only
    assert f.code == "LXF140" and "common.conf" in f.message
    rs = fixed(ctx, f).effective.ruleset
    assert not rs.allows("c", 1, 3, "w") and rs.allows("c", 1, 3, "r")


def test_a_deny_equal_to_an_allow_line_counts_and_is_not_reported():
    ctx, got = found(HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.deny: c 10:200 rwm\n")
    assert got == [] and not ctx.effective.ruleset.allows("c", 10, 200)


def test_deny_before_an_equal_allow_does_nothing_either():
    ctx, (f,) = found(HEAD + "lxc.cgroup2.devices.deny: c 10:200 rwm\nlxc.cgroup2.devices.allow: c 10:200 rwm\n")
    assert f.code == "LXF140" and ctx.effective.ruleset.allows("c", 10, 200)


def test_inert_deny_that_nothing_allows_is_only_redundant():
    _, (f,) = found(HEAD + "lxc.cgroup2.devices.deny: c 99:3 rw\n")
    assert (f.code, f.severity) == ("LXF141", "info") and "stays denied" in f.message


def test_allow_lines_in_an_unprivileged_proxmox_container_do_nothing():
    _, (f,) = found(HEAD + "unprivileged: 1\nlxc.cgroup2.devices.allow: c 226:* rwm\n")
    assert (f.code, f.severity) == ("LXF142", "info")
    assert "denylist mode" in f.message and "unprivileged Proxmox container" in f.message


def test_rules_emptied_out_by_a_later_a_and_the_fix_moves_them_after_it():
    ctx, (f,) = found(HEAD + "lxc.cgroup2.devices.deny: c 10:200 rwm\nlxc.cgroup2.devices.allow: a\n")
    assert (f.code, f.line) == ("LXF143", 3) and "line 4" in f.message
    assert ctx.effective.ruleset.allows("c", 10, 200)
    assert not fixed(ctx, f).effective.ruleset.allows("c", 10, 200)
    _, (g,) = found(HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.deny: a\n", "LXF143")
    assert "only allow lines after it count" in g.message


def test_an_empty_allow_drops_the_allow_lines_before_it():
    text = HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.allow:\nlxc.cgroup2.devices.allow: c 5:1 rwm\n"
    ctx, got = found(text)
    assert sorted(f.code for f in got) == ["LXF143", "LXF146"]
    assert not ctx.effective.ruleset.allows("c", 1, 3)  # common.conf's /dev/null went with it
    assert "/dev/null (c 1:3)" in next(f for f in got if f.code == "LXF146").message


def test_a_list_emptied_for_good_attaches_no_program_so_everything_is_allowed():
    # measured: an empty list at start attaches no device program (cgfsng_devices_activate)
    for last in ("lxc.cgroup2.devices.allow:\n", "lxc.cgroup2.devices.deny: a\n"):
        ctx, (f,) = found(HEAD + last)
        assert not ctx.effective.ruleset.has_program and ctx.effective.ruleset.allows("c", 10, 232)
        assert f.code == "LXF146" and "every device is allowed inside" in f.message


def test_an_empty_deny_keeps_the_allows():
    # measured on LXC 5.0.2 and 6.0.4 (DOMAIN.md): lxc_clear_cgroups drops the lines of that key only
    ctx, got = found(HEAD + "lxc.cgroup2.devices.deny:\n")
    assert got == [] and ctx.effective.ruleset.allows("c", 1, 3)
    rs = devices.RuleSet.replay([("deny", "a"), ("allow", "c 1:3 rwm"), ("deny", "")])
    assert rs.allows("c", 1, 3) and not rs.allows("c", 10, 200)


def test_deny_a_in_the_container_throws_common_conf_away():
    ctx, (f,) = found(HEAD + "lxc.cgroup2.devices.deny: a\nlxc.cgroup2.devices.allow: c 10:200 rwm\n")
    assert (f.code, f.severity) == ("LXF146", "error")
    assert f.message.startswith("`lxc.cgroup2.devices.deny: a` at line 3 sets allowlist mode")
    assert "/dev/null (c 1:3), /dev/zero (c 1:5)" in f.message
    assert fixed(ctx, f).effective.ruleset.allows("c", 1, 3)


def test_duplicates_of_the_container_or_of_common_conf():
    _, got = found(HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.allow: c 10:200 rwm\n"
                   "lxc.cgroup2.devices.allow: c 1:3 rwm\n")
    assert [(f.code, f.line) for f in got] == [("LXF144", 4), ("LXF144", 5)]
    assert "200.conf:3 already has" in got[0].message and "common.conf:4 already has" in got[1].message


def test_access_is_compared_as_written_so_wr_is_no_duplicate_of_rw():
    _, got = found(HEAD + "lxc.cgroup2.devices.allow: c 10:200 rw\nlxc.cgroup2.devices.allow: c 10:200 wr\n")
    assert got == []


def test_path_form_rule_whose_path_is_missing_on_the_host():
    tun = {"/dev/net/tun": DeviceNode("/dev/net/tun", "c", 10, 200, 0o20666)}
    _, (f,) = found(HEAD + "lxc.cgroup2.devices.allow: /dev/ttyUSB9 rwm\n", facts=make_facts(nodes=tun))
    assert (f.code, f.severity) == ("LXF145", "warning") and "Failed to parse device rule" in f.message
    # nvidia-uvm whose driver is not loaded, on a snapshot without dev/: known absent, with the commands
    facts = make_facts(proc_devices="Character devices:\n195 nvidia\n")
    _, (g,) = found(HEAD + "lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm\n", facts=facts)
    assert g.fix.commands[0] == "nvidia-modprobe -u -c0"
    # a snapshot without dev/ cannot tell for other paths, nor a host for paths outside /dev
    assert found(HEAD + "lxc.cgroup2.devices.allow: /dev/ttyUSB9 rwm\n")[1] == []
    assert found(HEAD + "lxc.cgroup2.devices.allow: /srv/devs/x rwm\n", facts=make_facts(nodes=tun))[1] == []


def test_path_form_rule_naming_a_directory():
    dri = {p: DeviceNode(p, "c", 226, m, 0o20660) for p, m in (("/dev/dri/card0", 0), ("/dev/dri/renderD128", 128))}
    ctx, (f,) = found(HEAD + "lxc.cgroup2.devices.allow: /dev/dri rwm\n", facts=make_facts(nodes=dri))
    assert "is a directory" in f.message
    assert fixed(ctx, f).effective.ruleset.allows("c", 226, 128)


def test_nothing_to_say_on_a_hybrid_host_or_without_rule_lines():
    text = HEAD + "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.deny: c 195:3 rwm\n"
    assert found(text, facts=make_facts(layout="hybrid"))[1] == []
    assert found(HEAD + "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n")[1] == []


def test_plain_lxc_config():
    text = ("lxc.include = /usr/share/lxc/config/common.conf\nlxc.cgroup2.devices.allow = c 10:* rwm\n"
            "lxc.cgroup2.devices.deny = c 10:200 rwm\n"
            "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0\n")
    ctx, (f,) = found(text, flavor="lxc", ct="web")
    assert f.code == "LXF140" and "(config:2)" in f.message
    after = fixed(ctx, f)
    assert not after.effective.ruleset.allows("c", 10, 200) and after.effective.ruleset.allows("c", 10, 229)


def test_run_rules_includes_them_and_the_plan_never_applies_them():
    from lxcfix.plan import make_plan

    text = HEAD + "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.deny: c 195:3 rwm\n" + GPU_MOUNTS
    ctx = make_ctx(text, facts=make_facts(nodes=NV))
    assert "LXF140" in [f.code for f in run_rules(ctx)]
    assert make_plan(ctx).is_empty


@pytest.mark.parametrize("lines,statuses", [
    ([("deny", "a"), ("allow", "c 1:3 rwm"), ("allow", "c 1:3 rwm")], ["reused"]),
    ([("deny", "a"), ("allow", "c 1:3 rwm"), ("deny", "c 1:3 rwm")], ["switched"]),
    ([("deny", "a"), ("allow", "c 1:3 rwm"), ("deny", "c 1:3 rw")], ["added"]),
    ([("deny", "a"), ("allow", "c 1:3 rwm"), ("allow", "")], ["cleared"]),
    ([("deny", "a"), ("allow", "c  1:3 rwm")], ["rejected"]),
    ([("deny", "a"), ("allow", "c 2:2 rwm"), ("allow", "a")], ["added", "mode"]),
])
def test_replay_outcomes_say_what_lxc_did_with_each_own_line(lines, statuses):
    tagged = [(v, x, f"own:{i}") for i, (v, x) in enumerate(lines)]
    dl, out = devices.replay_outcomes(tagged, shared=len(lines) - len(statuses))
    assert [o.status for o in out] == statuses


def test_replay_outcomes_and_ruleset_agree():
    lines = [("deny", "a", "c:1"), ("allow", "c 1:3 rwm", "c:2"), ("allow", "c 10:200 rwm", "x:1"),
             ("deny", "c 10:200 rw", "x:2"), ("allow", "", "x:3"), ("allow", "c 5:1 rwm", "x:4")]
    dl, out = devices.replay_outcomes(lines, shared=2)
    assert [o.status for o in out] == ["removed", "added", "cleared", "added"]
    rs = devices.RuleSet.replay(lines, shared=2)
    assert [sr.rule for sr in rs.rules] == list(dl.program().rules)
    assert rs.allows("c", 5, 1) and not rs.allows("c", 1, 3) and not rs.allows("c", 10, 200)


# ---- a rule repeated many times is one finding with a count (issue 21, row 7)

def test_copies_of_one_rule_are_one_lxf144_with_a_count_and_the_fix_removes_them_all():
    rule = "lxc.cgroup2.devices.allow: c 10:200 rwm\n"
    ctx, got = found(HEAD + rule * 4 + "lxc.cgroup2.devices.allow: c 1:3 rwm\n")
    assert [(f.code, f.line) for f in got] == [("LXF144", 4), ("LXF144", 7)]
    f = got[0]
    assert "does nothing, 3 times: 200.conf:3 already has the same rule" in f.message
    assert "200.conf:4, 5, 6 repeat it" in f.message
    assert [e.index for e in f.fix.edits] == [3, 4, 5] and f.fix.applicability == "manual"
    again = [g.code for g in inert.check(fixed(ctx, f))]
    assert again == ["LXF144"]  # only common.conf's duplicate is left
    assert "common.conf:4 already has" in got[1].message and "times" not in got[1].message


def test_a_fold_names_at_most_ten_lines_and_its_fix_at_most_a_thousand():
    rule = "lxc.cgroup2.devices.allow: c 10:200 rwm\n"
    _, (f,) = found(HEAD + rule * 3001)
    assert "does nothing, 3000 times" in f.message and "and 2990 more lines repeat it" in f.message
    assert f.message.count(",") <= inert.FOLD_SHOWN + 2 and len(f.message) < 400
    assert len(f.fix.edits) == inert.FOLD_EDITS and any("first 1000 of the 3000" in n for n in f.fix.notes)


def test_many_findings_alike_but_for_their_line_fold_into_one():
    from lxcfix import rules

    ctx = make_ctx(HEAD + "garbage line\n" * 200 + "more garbage\n")
    got = [f for f in run_rules(ctx) if f.code == "LXF130"]
    assert len(got) == 2  # 200 alike fold; the odd one stays its own
    assert "(and 199 more like it:" in got[0].message and f" and {199 - rules.FOLD_SHOWN} more)" in got[0].message
    assert "more like it" not in got[1].message
    few = [f for f in run_rules(make_ctx(HEAD + "garbage line\n" * 3)) if f.code == "LXF130"]
    assert len(few) == 3  # a few stay as they are


def test_a_400000_line_config_scans_in_bounded_memory_and_prints_one_finding(tmp_path):
    """It used to make 400,000 LXF144 findings: 1.66 GiB at peak and 200 MB of output. The scan
    runs in a subprocess whose address space is limited to 1 GiB (no timing asserted)."""
    import json
    import os
    import resource
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    root = tmp_path / "snap"
    shutil.copytree(repo / "examples/lxc-healthy", root)
    config = root / "var/lib/lxc/vpn/config"
    config.write_text(config.read_text() + "lxc.cgroup2.devices.allow = c 10:200 rwm\n" * 400_000)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, "PYTHONPATH": str(repo), "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-m", "lxcfix", "scan", "--root", str(root), "--json"], cwd=repo, env=env,
                       preexec_fn=limit, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(r.stdout) < 200_000, len(r.stdout)
    doc = json.loads(r.stdout)
    (vpn,) = [c for c in doc["containers"] if c["ct"] == "vpn"]
    (f,) = vpn["findings"]
    assert f["code"] == "LXF144" and "400000 times" in f["message"] and "399990 more lines" in f["message"]
    assert len(f["edits"]) == inert.FOLD_EDITS
