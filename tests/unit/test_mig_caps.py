"""LXF116: the host's GPUs have MIG instances (its /dev/nvidia-caps holds nodes beyond nvidia-cap1
and nvidia-cap2, or nvidia-smi -L inside lists MIG devices) and a container is given an NVIDIA GPU
but not /dev/nvidia-caps. The caps node mounted but denied stays LXF100, the allow rule without the
mount LXF110 (covered here too, on a MIG host). Node numbers: the H200 host's /proc/devices
(tests/unit/fixtures/gpu/host/), nvidia-caps at 238 in conftest's PROC_DEVICES."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lxcfix.model import DeviceNode
from lxcfix.plan import make_plan_in
from lxcfix.rules import allowlist

from .conftest import codes, make_ctx, make_facts


def node(path, major, minor):
    return path, DeviceNode(path, "c", major, minor, 0o20666 if "caps" not in path else 0o20400, 0, 0)


GPU = dict([node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 511, 0)])
NO_MIG = {**GPU, **dict([node("/dev/nvidia-caps/nvidia-cap1", 238, 1), node("/dev/nvidia-caps/nvidia-cap2", 238, 2)])}
# one GPU instance (gi1: nvidia-cap21) and its compute instance (ci0: nvidia-cap22)
MIG = {**NO_MIG, **dict([node("/dev/nvidia-caps/nvidia-cap21", 238, 21), node("/dev/nvidia-caps/nvidia-cap22", 238, 22)])}

PRIVILEGED_GPU = """arch: amd64
hostname: cuda
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 511:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
"""
CAPS_MOUNT = "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n"
CAPS_RULE = "lxc.cgroup2.devices.allow: c 238:* rwm\n"


def ctx(text=PRIVILEGED_GPU, nodes=MIG, style="auto", flavor="pve"):
    c = make_ctx(text, flavor=flavor, facts=make_facts(backend=flavor, nodes=nodes))
    return c.with_style(style) if style != "auto" else c


def mig(found):
    return [f for f in found if f.code == "LXF116"]


def test_a_gpu_on_a_mig_host_without_nvidia_caps_gets_the_mount_and_the_rule():
    (f,) = mig(allowlist.check(ctx()))
    assert f.severity == "error" and f.device == "/dev/nvidia-caps" and "/dev/nvidia0" in f.message
    assert "/dev/nvidia-caps/nvidia-cap21" in " ".join(f.evidence)
    assert f.fix.applicability == "manual" and not f.fix.applies  # it passes MIG's config capability too
    lines = [line for e in f.fix.edits for line in e.lines]
    assert ("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir") in lines
    # exact minors, never nvidia-cap1 (issue 29: a wildcard on nvidia-caps' own major would grant it too)
    assert [v for k, v in lines if k == "lxc.cgroup2.devices.allow"] == ["c 238:2 rwm", "c 238:21 rwm", "c 238:22 rwm"]
    assert "nvidia-cap1 (MIG configuration)" in f.fix.notes[0]
    assert "create=dir" in f.fix.title and "c 238:21 rwm" in f.fix.title and "c 238:*" not in f.fix.title


def test_the_fix_lines_follow_the_fix_style():
    (path,) = mig(allowlist.check(ctx(style="path")))
    rules = [v for e in path.fix.edits for k, v in e.lines if k == "lxc.cgroup2.devices.allow"]
    assert rules == ["/dev/nvidia-caps/nvidia-cap2 rwm",  # never nvidia-cap1 unless named
                     "/dev/nvidia-caps/nvidia-cap21 rwm", "/dev/nvidia-caps/nvidia-cap22 rwm"]
    (lxc,) = mig(allowlist.check(ctx(PRIVILEGED_GPU.replace(": ", " = ").replace("arch = amd64\nhostname = cuda\n", ""),
                                     flavor="lxc")))
    assert "lxc.mount.entry = /dev/nvidia-caps" in lxc.fix.title  # LXC's own key = value form


def test_an_allowed_caps_major_needs_only_the_mount():
    (f,) = mig(allowlist.check(ctx(PRIVILEGED_GPU + "lxc.cgroup2.devices.allow: a\n")))
    assert [k for e in f.fix.edits for k, _ in e.lines] == ["lxc.mount.entry"]


def test_no_mig_no_finding_and_no_gpu_no_finding():
    assert mig(allowlist.check(ctx(nodes=NO_MIG))) == []  # cap1/cap2 alone: every NVIDIA host has them
    assert mig(allowlist.check(ctx("arch: amd64\n"))) == []
    uvm_only = "arch: amd64\nlxc.cgroup2.devices.allow: c 511:* rwm\n" \
               "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    assert mig(allowlist.check(ctx(uvm_only))) == []


def test_the_caps_mounted_and_allowed_is_fine_and_the_plan_leaves_the_manual_fix_alone():
    assert allowlist.check(ctx(PRIVILEGED_GPU + CAPS_RULE + CAPS_MOUNT)) == []
    plan, _ = make_plan_in(ctx(), "auto")
    assert b"nvidia-caps" not in plan.after  # shown, never written for the admin


def test_existing_codes_cover_the_half_configured_cases_on_a_mig_host():
    # mounted, not allowed: LXF100 for each caps node, and no LXF116 on top
    found = allowlist.check(ctx(PRIVILEGED_GPU + CAPS_MOUNT))
    assert "LXF116" not in codes(found)
    assert {f.device for f in found if f.code == "LXF100"} >= {"/dev/nvidia-caps/nvidia-cap21",
                                                                "/dev/nvidia-caps/nvidia-cap22"}
    # allowed, not mounted: LXF110 names it, LXF116 does not say it twice
    found = allowlist.check(ctx(PRIVILEGED_GPU + CAPS_RULE))
    assert codes(found).count("LXF110") == 1 and "LXF116" not in codes(found)


def test_mig_seen_by_the_probe_counts_when_the_hosts_nodes_are_not_known():
    from lxcfix.model import ProbeResult

    c = ctx(nodes=GPU)
    assert mig(allowlist.check(c)) == []
    probe = ProbeResult(nodes={}, nvidia_smi_out="GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 1g.18gb     Device  0: "
                                                  "(UUID: MIG-2)\n")
    (f,) = mig(allowlist.check(replace(c, probe=probe)))
    assert [k for e in f.fix.edits for k, _ in e.lines] == ["lxc.mount.entry"]  # no caps node known: no rule
    assert "listed by nvidia-smi -L inside" in " ".join(f.evidence)


# ---------------------------------------------------------------- one fact, one answer (issue 29)

from lxcfix import causes  # noqa: E402
from lxcfix.model import ProbeNode, ProbeResult  # noqa: E402
from lxcfix.rules import run_rules  # noqa: E402

UNPRIVILEGED_LXC = """lxc.include = /usr/share/lxc/config/common.conf
lxc.idmap = u 0 100000 65536
lxc.idmap = g 0 100000 65536
lxc.cgroup2.devices.allow = c 195:* rwm
lxc.cgroup2.devices.allow = c 511:* rwm
lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry = /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir
"""


def probed(c, errno: str):
    """What the H200 probe saw: the GPU nodes open, the caps nodes refused with `errno`
    (EPERM: the cgroup of a privileged container; EACCES: their 0400 root owner, unmapped)."""
    nodes = {p: ProbeNode(p, True, True, n.major, n.minor, errno if "caps" in p else "ok")
             for p, n in c.facts.nodes.items()}
    return replace(c, probe=ProbeResult(nodes=nodes, nvidia_smi_rc=0, cuinit=0,
                                        nvidia_smi_out="GPU 0: NVIDIA H200 (UUID: GPU-1)"))


def about_caps(found):
    return sorted((f.device, f.severity) for f in found if f.device and "nvidia-caps" in f.device)


@pytest.mark.parametrize("flavor", ["pve", "lxc"])
def test_caps_nodes_without_mig_get_the_same_answer_privileged_or_not(flavor):
    """The H200 without MIG: privileged (EPERM) and unprivileged (EACCES) containers given
    /dev/nvidia-caps get the same severity (info), no LXF100 and no rule in the plan."""
    if flavor == "pve":
        texts = {"privileged": PRIVILEGED_GPU + CAPS_MOUNT, "unprivileged": PRIVILEGED_GPU + CAPS_MOUNT + "unprivileged: 1\n"}
    else:
        texts = {"privileged": UNPRIVILEGED_LXC.replace("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n", ""),
                 "unprivileged": UNPRIVILEGED_LXC}
    answers = {}
    for which, errno in (("privileged", "EPERM"), ("unprivileged", "EACCES")):
        for running in (True, False):
            c = ctx(texts[which], nodes=NO_MIG, flavor=flavor)
            c = probed(c, errno) if running else c
            found = run_rules(c)
            plan, _ = make_plan_in(c, "auto")
            assert "LXF100" not in [f.code for f in found if f.device and "caps" in f.device], (which, running)
            assert {s for _, s in about_caps(found)} <= {"info"}, (which, running, about_caps(found))
            assert b"238" not in plan.after and plan.diff().count("nvidia-caps") == 0, plan.diff()
            if running:
                answers[which] = about_caps(found)
                (cause,) = [x for x in causes.group(found, c.facts) if x.symptoms[0].device in dict(answers[which])]
                assert cause.severity == "info" and not cause.applies and cause.commands() == ()
                assert "matters only for MIG" in cause.title and "denies nvidia-caps" not in cause.title
    assert answers["privileged"] == answers["unprivileged"] == [
        ("/dev/nvidia-caps/nvidia-cap1", "info"), ("/dev/nvidia-caps/nvidia-cap2", "info")]


def test_the_gpu_cause_does_not_name_the_caps_nodes_without_mig():
    c = probed(ctx(PRIVILEGED_GPU.replace("lxc.cgroup2.devices.allow: c 511:* rwm\n", "") + CAPS_MOUNT,
                   nodes=NO_MIG), "EPERM")
    c = replace(c, probe=replace(c.probe, nodes={**c.probe.nodes, "/dev/nvidia-uvm": ProbeNode(
        "/dev/nvidia-uvm", True, True, 511, 0, "EPERM")}))
    gpu = [x for x in causes.group(run_rules(c), c.facts) if x.severity == "error"]
    assert [x.title for x in gpu] == ["CT 200 cannot use the GPU: the cgroup denies nvidia-uvm (c 511:0)"]
    plan, _ = make_plan_in(c, "auto")
    assert "+lxc.cgroup2.devices.allow: c 511:* rwm" in plan.diff() and "238" not in plan.diff()


def test_never_cap1_unless_the_config_names_it():
    # on a MIG host, the directory mount: every caps node but nvidia-cap1 is allowed
    c = ctx(PRIVILEGED_GPU + CAPS_MOUNT, nodes=MIG)
    plan, _ = make_plan_in(c, "auto")
    added = [line for line in plan.diff().splitlines() if line.startswith("+lxc.cgroup2")]
    assert added == ["+lxc.cgroup2.devices.allow: c 238:2 rwm", "+lxc.cgroup2.devices.allow: c 238:21 rwm",
                     "+lxc.cgroup2.devices.allow: c 238:22 rwm"]
    assert [f.severity for f in run_rules(probed(c, "EPERM")) if f.device == "/dev/nvidia-caps/nvidia-cap1"] == ["info"]
    # the admin names it: then it is theirs, and allowed like any other node
    named = "lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file\n"
    plan, _ = make_plan_in(ctx(PRIVILEGED_GPU + named, nodes=MIG), "auto")
    assert "+lxc.cgroup2.devices.allow: c 238:1 rwm" in plan.diff()


def test_lxf100_names_the_errno_the_probe_saw():
    """An LXC container in allowlist mode (common.conf) with an idmap: the config denies the
    node, and the probe saw EACCES (the unmapped owner refuses first): the text says EACCES."""
    render = {"/dev/dri/renderD128": DeviceNode("/dev/dri/renderD128", "c", 226, 128, 0o20660, 0, 0)}
    text = UNPRIVILEGED_LXC.split("lxc.cgroup2")[0] + \
        "lxc.mount.entry = /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n"
    c = ctx(text, nodes=render, flavor="lxc")
    (stopped,) = [f for f in run_rules(c) if f.code == "LXF100"]
    assert "open() inside gives EPERM" in stopped.message  # not probed: what the cgroup answers
    seen = replace(c, probe=ProbeResult(nodes={"/dev/dri/renderD128": ProbeNode(
        "/dev/dri/renderD128", True, True, 226, 128, "EACCES")}))
    (f,) = [f for f in run_rules(seen) if f.code == "LXF100"]
    assert "EACCES" in f.message and "EPERM" not in f.message, f.message
