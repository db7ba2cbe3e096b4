"""No printed "run:" leads to a command that does nothing (issue 29): every fix that names
`lxcfix plan --ct CT`, for the cases of the test fixtures and the bundled examples, on a cgroup
v2 host and on a hybrid one (where LXC ignores cgroup2 rules, and lxcfix plans none: LXF300
says why), names a plan that is not empty. A hybrid host's case was a dead end: the probe's
LXF200 said "fix: allow c 10:200 rwm (run: lxcfix plan)", and the plan printed nothing."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest

from lxcfix import cli
from lxcfix.model import DeviceNode, ProbeNode, ProbeResult
from lxcfix.plan import make_plan_in, unplanned

from .conftest import EXAMPLES, make_ctx, make_facts
from .test_causes import gpu_facts
from .test_gpu_replay import CTS, FIX, text

PLAN = re.compile(r"lxcfix plan --ct ([^\s)'`]+)")
HYBRID = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "32 31 0:29 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
          "33 31 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
TUN = {"/dev/net/tun": DeviceNode("/dev/net/tun", "c", 10, 200, 0o20666)}


def hints(findings) -> list[tuple[str, str]]:
    """(code, ct) of every fix text or command that names `lxcfix plan --ct CT`."""
    out = []
    for f in findings:
        if f.fix is None:
            continue
        for text_ in (f.fix.title, *f.fix.commands, *f.fix.notes):
            out += [(f.code, ct) for ct in PLAN.findall(text_)]
    return out


def contexts():
    """(label, ctx) for the fixtures' cases: the H200 run (its configs and the probe's real
    output), a tun bind mount probed EPERM, each on a v2 and on a hybrid host."""
    from lxcfix import ctconfig, gather, probe
    from lxcfix.transport import RootDir

    out = []
    for layout in ("v2", "hybrid"):
        facts = replace(gpu_facts(), cgroup_layout=layout)
        for tag in ("uvm", "ctl", "nocaps"):
            for when in ("before", "after") if tag != "nocaps" else ("before",):
                name = CTS[tag]
                path = f"/var/lib/lxc/{name}/config"
                cfg = ctconfig.parse(text(f"{tag}/config.{when}").encode(), "lxc", path)
                ctx = gather.context(facts, gather.Loaded(name, path, cfg),
                                     gather.include_loader(RootDir(str(FIX / "snapshot"))))
                out.append((f"{tag}-{when}-{layout}", replace(ctx, probe=probe.parse(text(f"{tag}/probe-{when}.txt")))))
        tun = make_ctx("arch: amd64\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n",
                       facts=make_facts(layout=layout, nodes=TUN))
        seen = ProbeResult(nodes={"/dev/net/tun": ProbeNode("/dev/net/tun", True, True, 10, 200, "EPERM")})
        out += [(f"tun-{layout}", tun), (f"tun-probed-{layout}", replace(tun, probe=seen))]
    return out


CASES = contexts()


@pytest.mark.parametrize("label, ctx", CASES, ids=[label for label, _ in CASES])
def test_every_plan_a_fix_names_is_not_empty(label, ctx):
    plan, _ = make_plan_in(ctx, "auto")
    named = hints(plan.findings)
    for code, ct in named:
        assert ct == ctx.ct and not plan.is_empty, f"{label}: {code} says run `lxcfix plan --ct {ct}`: it plans nothing"
    errors = [f for f in plan.findings if f.severity == "error"]
    if plan.is_empty and errors:  # what is broken and not planned: the plan says why
        assert unplanned(plan), label


def test_on_a_hybrid_host_the_layout_is_a_finding_and_the_plan_says_why_it_plans_nothing():
    ctx = dict(CASES)["tun-probed-hybrid"]
    plan, _ = make_plan_in(ctx, "auto")
    assert plan.is_empty
    by = {f.code: f for f in plan.findings}
    assert by["LXF300"].severity == "warning" and "hybrid" in by["LXF300"].message
    assert "lxcfix plan" not in by["LXF200"].fix.title and "lxc.cgroup.devices.allow: c 10:200 rwm" in by["LXF200"].fix.title
    assert not by["LXF200"].live_fixable  # a live cgroup2 change would not help either
    (why, *_) = unplanned(plan)
    assert why.startswith("not planned: host runs a hybrid cgroup layout") and why.endswith("[LXF300]")
    # on a v2 host the same container gets the rule
    plan, _ = make_plan_in(dict(CASES)["tun-probed-v2"], "auto")
    assert "+lxc.cgroup2.devices.allow: c 10:200 rwm" in plan.diff()


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.run(list(argv))
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("layout", ["as-is", "hybrid"])
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_every_plan_the_examples_name_is_not_empty(example, layout, capsys, tmp_path):
    root = tmp_path / example
    shutil.copytree(EXAMPLES / example, root)
    if layout == "hybrid":
        (root / "proc/self").mkdir(parents=True, exist_ok=True)
        (root / "proc/self/mountinfo").write_text(HYBRID)
    code, out, _ = run(capsys, "scan", "--root", str(root), "--json", "--no-probe")
    doc = json.loads(out)
    named = {(f["code"], ct) for c in doc["containers"] for f in c["findings"]
             for ct in PLAN.findall(" ".join([f["fix"] or "", *f["commands"]]))}
    for occasion in ("reboot", "pve-upgrade"):  # the audit's commands and "run:" hints too (a note such as
        # "# lxcfix plan --ct 200 makes this change once the host runs cgroup v2" is about the future)
        code, out, _ = run(capsys, "audit", "--root", str(root), "--for", occasion, "--json")
        named |= {(i["code"], ct) for c in json.loads(out)["containers"] for i in c["findings"]
                  for ct in PLAN.findall(" ".join([*re.findall(r"run: [^)]*", i["change"] or ""), *i["commands"]]))}
    for code_, ct in sorted(named):
        rc, diff, _ = run(capsys, "plan", "--root", str(root), "--ct", ct)
        assert diff.strip(), f"{example} ({layout}): {code_} names `lxcfix plan --ct {ct}`, which plans nothing"
    if layout == "hybrid":
        assert any(f["code"] == "LXF300" for c in doc["containers"] for f in c["findings"]), example \
            if any(c["findings"] for c in doc["containers"]) else None
        for c in doc["containers"]:
            if any(f["severity"] == "error" for f in c["findings"]):
                rc, diff, err = run(capsys, "plan", "--root", str(root), "--ct", c["ct"])
                assert diff.strip() or "not planned: " in err, (example, c["ct"], err)
