"""The accel family (Intel/AMD NPUs, /dev/accel/accelN, char major 261), added as one
profile in lxcfix.devices: scan, plan in every style, audit, explain, group access and
the probe all take it from there. The host: fixtures/facts/*/core-ultra-npu-host.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import audit, causes, cli, ctconfig, devices, fixes, gather, probe
from lxcfix.facts import FACTS
from lxcfix.model import KernelTree, LoadedModule
from lxcfix.plan import make_plan
from lxcfix.rules import run_rules, upgrade
from lxcfix.rules.access import requests
from lxcfix.rules.foresight import Occasion
from lxcfix.scan import HostReport, analyze_container

from .conftest import REPO, make_ctx, make_facts, no_includes

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "facts"
HEAD = "arch: amd64\nostype: debian\n"
NPU = "/dev/accel/accel0"
MOUNT = f"lxc.mount.entry: {NPU} dev/accel/accel0 none bind,optional,create=file\n"


def fixture(fact: str):
    case = json.loads((FIXTURES / fact / "core-ultra-npu-host.json").read_text())
    return case["text"]


def npu_facts(**kw):
    facts = make_facts(fixture("proc_devices"), nodes=FACTS["dev_nodes"].parse(fixture("dev_nodes")),
                       pve_version="8.3.0")
    return replace(facts, **kw)


def ctx_of(text, **kw):
    return make_ctx(text, facts=npu_facts(**kw))


def added(plan) -> list[str]:
    return [l[1:] for l in plan.diff().splitlines() if l.startswith("+") and not l.startswith("+++")]


def removed(plan) -> list[str]:
    return [l[1:] for l in plan.diff().splitlines() if l.startswith("-") and not l.startswith("---")]


# ---------------------------------------------------------------- the profile

def test_the_profile_is_the_catalog_entry():
    facts = npu_facts()
    hit = devices.lookup("/dev/accel/accel1", facts)
    assert (hit.profile.name, hit.major, hit.minor) == ("accel", 261, 1)
    p = devices.PROFILES["accel"]
    assert not p.dynamic and p.owns_major() and 261 not in devices.SHARED_MAJORS
    assert not devices.is_dynamic_major(261)
    assert facts.char_major("accel") == 261 and "accel" in devices.PROC_NAMES
    assert devices.profile_for_major(261, facts) is p
    assert fixes.group_for(NPU) == "render" and "/dev/accel" in devices.CATALOG_DIRS
    assert devices.family_of("accel") == "accel" and devices.noun_of("accel") == "the NPU"
    assert "amdxdna" in devices.KNOWN_OUT_OF_TREE and "accel" in gather._DRIVER_PROFILES


# ---------------------------------------------------------------- scan

def test_a_bind_mount_without_an_allow_rule_is_lxf100():
    (f,) = run_rules(ctx_of(HEAD + MOUNT))
    assert (f.code, f.severity, f.device) == ("LXF100", "error", NPU)
    assert "c 261:0" in f.message and "EPERM" in f.message


def test_a_stale_numeric_rule_is_lxf101_and_261_pins_nothing():
    (f,) = run_rules(ctx_of(HEAD + "lxc.cgroup2.devices.allow: c 250:* rwm\n" + MOUNT))
    assert (f.code, f.device) == ("LXF101", NPU) and "c 250:*" in f.message
    assert run_rules(ctx_of(HEAD + "lxc.cgroup2.devices.allow: c 261:* rwm\n" + MOUNT)) == []  # static: no LXF103


def test_a_node_the_host_lacks_is_lxf112_and_no_optional_is_lxf111():
    found = {f.code: f for f in run_rules(ctx_of(HEAD + "lxc.cgroup2.devices.allow: c 261:* rwm\n"
                                                  "lxc.mount.entry: /dev/accel/accel1 dev/accel/accel1 none bind,optional,create=file\n"))}
    f = found["LXF112"]
    assert f.device == "/dev/accel/accel1" and set(found) == {"LXF110", "LXF112"}
    assert f.fix.title == "load its driver or fix the path" and not f.fix.commands  # no nvidia-modprobe here
    (f,) = run_rules(ctx_of(HEAD + "lxc.cgroup2.devices.allow: c 261:* rwm\n" + MOUNT.replace("optional,", "")))
    assert f.code == "LXF111"


# ---------------------------------------------------------------- plan, every style

@pytest.mark.parametrize("style, plus, minus", [
    ("numeric", ["lxc.cgroup2.devices.allow: c 261:* rwm"], []),
    ("path", [f"lxc.cgroup2.devices.allow: {NPU} rwm"], []),
    ("devn", [f"dev0: {NPU},gid=993"], [MOUNT.rstrip("\n").replace("lxc.mount.entry ", "lxc.mount.entry")]),
])
def test_plan_in_every_style(style, plus, minus):
    ctx = ctx_of(HEAD + MOUNT)
    plan = make_plan(ctx, style)
    assert plan.style == style
    assert added(plan) == plus and removed(plan) == minus
    for line in plus:
        value = line.split(": ", 1)[1]
        if line.startswith("lxc.cgroup2"):
            assert devices.is_overbroad(devices.parse_rule(value)) is None
    assert make_plan(make_ctx(plan.after, facts=ctx.facts), style).is_empty


def test_a_directory_mount_gets_its_nodes_allowed():
    plan = make_plan(ctx_of(HEAD + "lxc.mount.entry: /dev/accel dev/accel none bind,optional,create=dir\n"), "numeric")
    assert added(plan) == ["lxc.cgroup2.devices.allow: c 261:* rwm"]


# ---------------------------------------------------------------- causes and audit

def test_the_cause_says_the_npu():
    ctx = ctx_of(HEAD + MOUNT)
    (cause,) = causes.group(run_rules(ctx), ctx.facts)
    assert cause.title.startswith("CT 200 cannot use the NPU: the cgroup denies accel0 (c 261:0)")


def host(configs, **kw) -> HostReport:
    facts = npu_facts(**kw)
    reports = []
    for ct, text in configs.items():
        path = f"/etc/pve/lxc/{ct}.conf"
        loaded = gather.Loaded(ct, path, ctconfig.parse(text.encode(), "pve", path))
        reports.append(analyze_container(facts, loaded, no_includes, "auto"))
    return HostReport("npu1", "pve", facts, tuple(reports))


def test_audit_reboot_and_driver_upgrade():
    h = host({"300": HEAD + MOUNT, "301": HEAD + "lxc.cgroup2.devices.allow: c 261:* rwm\n" + MOUNT.replace("optional,", "")})
    got = {(i.ct, i.code): i for i in audit.audit([h], "reboot").items}
    assert got[("300", "LXF100")].outcome == "will"
    assert "a node can be absent at start" in got[("301", "LXF111")].why
    # an NVIDIA driver upgrade reloads no NPU driver: only what is broken now
    assert [(i.ct, i.code) for i in audit.audit([h], "driver-upgrade").items] == [("300", "LXF100")]


def kernel_facts(driver: str, out_of_tree: bool, **kw):
    tree = {driver: ("updates/dkms/" if out_of_tree else "kernel/drivers/accel/") + f"{driver}.ko"}
    return dict(kernel="6.8.12-4-pve", modules_known=True,
                kernels={"6.8.12-4-pve": KernelTree("6.8.12-4-pve", tree, True, True),
                         "6.8.12-9-pve": KernelTree("6.8.12-9-pve", {}, True, True)},
                modules={driver: LoadedModule(driver, out_of_tree, ())},
                device_drivers={"c 261:0": driver}, **kw)


def test_kernel_upgrade_an_in_tree_npu_driver_needs_nothing():
    ctx = ctx_of(HEAD + "dev0: /dev/accel/accel0\n", **kernel_facts("intel_vpu", False))
    assert upgrade.kernel_modules(ctx, Occasion("kernel-upgrade")) == []


def test_kernel_upgrade_an_out_of_tree_amdxdna_must_be_rebuilt():
    ctx = ctx_of(HEAD + "dev0: /dev/accel/accel0\n", **kernel_facts("amdxdna", True))
    (f,) = upgrade.kernel_modules(ctx, Occasion("kernel-upgrade"))
    assert f.code == "LXF156" and f.device == NPU
    assert "amdxdna (built outside the kernel tree) is not built for 6.8.12-9-pve" in f.message
    assert "depmod -a 6.8.12-9-pve" in f.fix.commands


def test_explain_is_generic_and_the_readme_lists_the_family(capsys):
    with pytest.raises(SystemExit) as rc:
        cli.main(["explain", "LXF100"])
    assert rc.value.code == 0 and "LXF100" in capsys.readouterr().out
    readme = (REPO / "README.md").read_text()
    assert "`/dev/accel/accel*`" in readme and "261" in readme


# ---------------------------------------------------------------- group access and the probe

RENDER_993 = "agroup render gid=993 name=render members=ollama:999"


def probed(*lines: str) -> str:
    return "lxcfix-probe 1\n" + "".join(l + "\n" for l in lines) + "end\n"


def test_unprivileged_devn_without_gid_is_lxf114_render():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/accel/accel0\n")
    (f,) = run_rules(ctx)
    assert (f.code, f.device) == ("LXF114", NPU)
    assert "the container's render group cannot" in f.message
    assert ctconfig.describe_edit(ctx.config, f.fix.edits[0])[1] == \
        "+ dev0: /dev/accel/accel0,gid=<gid of group 'render' in CT 200>"
    assert requests(ctx) == [("render", NPU)]


def test_the_probe_checks_the_npu_and_an_eacces_gets_the_render_gid():
    ctx = ctx_of(HEAD + "unprivileged: 1\ndev0: /dev/accel/accel0\n")
    argv = probe.probe_argv([NPU], requests(ctx))
    assert argv[-2:] == [f"access:render:{NPU}", NPU]
    text = probed(f"node {NPU} exists=1 char=1 major=261 minor=0 open=ok", "group render 993",
                  f"perm uid=0 gid=0 mode=0660 {NPU}", RENDER_993,
                  f"access render uid=999 gid=993 user=ollama open=EACCES via=python3 why=- {NPU}")
    ctx = replace(ctx, probe=probe.parse(text))
    found = {f.code: f for f in run_rules(ctx)}
    assert "LXF114" in found or "LXF204" in found
    f = found.get("LXF114") or found["LXF204"]
    assert any("gid=993" in v for e in f.fix.edits for _, v in e.lines)


def test_the_probe_classifies_an_eperm_npu_as_lxf200():
    result = probe.parse(probed(f"node {NPU} exists=1 char=1 major=261 minor=0 open=EPERM"))
    (f,) = probe.classify("300", "npu1", result, {NPU: ("c", 261, 0)}, None)
    assert (f.code, f.device) == ("LXF200", NPU)
