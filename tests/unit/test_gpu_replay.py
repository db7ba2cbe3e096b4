"""Replays of a real-GPU run (tests/unit/fixtures/gpu/, README.md there) on every CI run.

tests/gpu/run_on_gpu_host.sh ran on an NVIDIA H200 host (driver 580.159.04, LXC 5.0.2,
pure cgroup v2) against real LXC containers whose cgroup2 allowlist denied nvidia-uvm
("uvm", "nocaps") or nvidiactl ("ctl"). What the kernel, the driver and lxcfix said there is
kept; here the same inputs go through the pure code again:

- the probe's real output       -> lxcfix.probe.parse / classify (and the device's diagnose agrees)
- the attached BPF programs     -> lxcfix.bpf.parse_reader / decode / encode, bpftool's copy,
                                   and LXC's list semantics replayed from the config lines
- the host's /proc/devices      -> lxcfix.devices.parse_proc_devices, lxcfix.facts
- a host snapshot of the run    -> `lxcfix scan/plan/apply/audit --root` (CLI), compared with
                                   what lxcfix planned and wrote on the GPU host
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lxcfix import bpf, cli, devices, facts, probe
from lxcfix.model import DeviceRule

FIX = Path(__file__).resolve().parent / "fixtures" / "gpu"
SUMMARY = json.loads((FIX / "summary.json").read_text())
CTS = {tag: c["name"] for tag, c in SUMMARY["containers"].items()}  # uvm/ctl/nocaps -> LXC name
UVM, CAPS = 238, 241  # this host's dynamic majors (host/proc-devices.txt)
NV = "/dev/nvidia"


def text(rel: str) -> str:
    return (FIX / rel).read_text()


def recorded_json(rel: str) -> dict:
    return json.loads(text(rel))


def host_nodes() -> dict[str, tuple[str, int, int]]:
    """path -> (kind, major, minor) from the host's `ls -ln /dev/nvidia* /dev/nvidia-caps/`."""
    nodes: dict[str, tuple[str, int, int]] = {}
    folder = "/dev"
    for line in text("host/dev-nvidia.txt").splitlines():
        if line.endswith(":"):
            folder = line[:-1].rstrip("/")
            continue
        m = re.match(r"^([cb])\S+\s+\d+\s+\d+\s+\d+\s+(\d+),\s+(\d+)\s+\S+\s+\d+\s+\S+\s+(\S+)$", line)
        if m:
            name = m[4] if m[4].startswith("/") else f"{folder}/{m[4]}"
            nodes[name] = (m[1], int(m[2]), int(m[3]))
    return nodes


def host_majors() -> dict[str, int]:
    char, _ = devices.parse_proc_devices(text("host/proc-devices.txt"))
    return {name: majors[0] for name, majors in char.items()}


def R(spec: str) -> DeviceRule:
    kind, nums, access = spec.split()
    major, minor = nums.split(":")
    return DeviceRule(kind, None if major == "*" else int(major), None if minor == "*" else int(minor), access)


# ------------------------------------------------------------------- the host

def test_proc_devices_of_the_gpu_host():
    char, block = devices.parse_proc_devices(text("host/proc-devices.txt"))
    assert char["nvidia"] == (195,) and char["nvidiactl"] == (195,)
    assert char["nvidia-uvm"] == (UVM,) and char["nvidia-caps"] == (CAPS,)
    assert char["nvidia-nvswitch"] == (239,) and char["nvidia-nvlink"] == (240,)
    assert char["nvidia-caps-imex-channels"] == (242,)
    assert char["infiniband_mad"] == (231, 245)  # one name, two majors: kept both
    assert block["virtblk"] == (254,)
    assert devices.is_dynamic_major(UVM) and devices.is_dynamic_major(CAPS)
    assert not devices.is_dynamic_major(195)
    # the host snapshot carries the same text
    assert text("snapshot/proc/devices") == text("host/proc-devices.txt")


def test_host_facts_and_lxcfix_facts_json():
    assert facts.parse_nvidia_version(text("host/nvidia-version.txt")) == "580.159.04"
    assert facts.parse_cgroup_layout(text("host/mountinfo.txt")) == "v2"
    doc = recorded_json("host/lxcfix-facts.json")["facts"]
    assert doc["cgroup_layout"] == "v2" and doc["nvidia_driver"] == "580.159.04" and doc["lxc_version"] == "5.0.2"
    assert doc["char_majors"]["nvidia-uvm"] == [UVM] and doc["char_majors"]["nvidia-caps"] == [CAPS]
    assert doc["nodes_known"] is True
    for path, (kind, major, minor) in host_nodes().items():
        node = doc["device_nodes"][path]
        assert (node["kind"], node["major"], node["minor"]) == (kind, major, minor), path
    assert set(host_nodes()) == {f"{NV}0", f"{NV}ctl", f"{NV}-uvm", f"{NV}-uvm-tools",
                                 f"{NV}-caps/nvidia-cap1", f"{NV}-caps/nvidia-cap2"}


# ------------------------------------------------------------------- what CUDA said (our own check)

@pytest.mark.parametrize("rel, cuinit, smi_rc, smi", [
    ("host/host-check.json", 0, 0, "GPU 0: NVIDIA H200"),
    ("uvm/check-before.json", 999, 0, "GPU 0: NVIDIA H200"),          # nvidia-smi works, CUDA does not
    ("uvm/check-after.json", 0, 0, "GPU 0: NVIDIA H200"),
    ("ctl/check-before.json", 100, 255, "Failed to initialize NVML: Unknown Error"),
    ("ctl/check-after.json", 0, 0, "GPU 0: NVIDIA H200"),
    ("nocaps/check-before.json", 999, 0, "GPU 0: NVIDIA H200"),
])
def test_cuinit_and_nvml_inside_match_the_ground_truth(rel, cuinit, smi_rc, smi):
    got = recorded_json(rel)
    assert got["cuinit"] == cuinit and got["nvidia_smi_rc"] == smi_rc
    assert got["nvidia_smi_out"].startswith(smi)


def test_opens_inside_give_eperm_exactly_where_the_allowlist_denies():
    before = recorded_json("uvm/check-before.json")["open"]
    assert before[f"{NV}-uvm"] == before[f"{NV}-uvm-tools"] == "EPERM"
    assert before[f"{NV}0"] == before[f"{NV}ctl"] == "ok"
    ctl = recorded_json("ctl/check-before.json")["open"]
    assert ctl[f"{NV}ctl"] == "EPERM" and ctl[f"{NV}0"] == ctl[f"{NV}-uvm"] == "ok"
    for tag in ("uvm", "ctl"):
        assert set(recorded_json(f"{tag}/check-after.json")["open"].values()) == {"ok"}


def test_nvidia_smi_not_cuinit_creates_missing_caps_nodes():
    """Why the probe's GPU gate matters (nocaps: /dev/nvidia-caps not passed in): cuInit alone
    (999 here, nvidia-uvm denied) left /dev untouched; the following nvidia-smi -L, run as root,
    created /dev/nvidia-caps/nvidia-cap1,2 inside the container."""
    nocaps = SUMMARY["containers"]["nocaps"]
    assert nocaps["cuinit_only"] == "cuinit 999"
    assert nocaps["caps_after_cuinit_only"] is False and nocaps["caps_after_nvidia_smi"] is True
    assert "nvidia-cap" not in text("nocaps/dev-before.txt").replace("/dev/nvidia-caps': No such", "")
    assert "nvidia-cap1" not in text("nocaps/dev-before-after-cuinit-only.txt")
    assert "nvidia-cap1" in text("nocaps/dev-before-after-check.txt")


# ------------------------------------------------------------------- the probe, replayed

PROBES = ["uvm/probe-before.txt", "uvm/probe-after.txt", "ctl/probe-before.txt", "ctl/probe-after.txt",
          "nocaps/probe-before.txt"]


@pytest.mark.parametrize("rel", PROBES)
def test_probe_output_parses_completely(rel):
    raw = text(rel)
    got = probe.parse(raw)
    assert raw.startswith("lxcfix-probe 1\n") and raw.rstrip().endswith("end")
    assert got.raw == raw and got.driver_version == "580.159.04"
    nodes = host_nodes()
    for path, node in got.nodes.items():
        assert node.exists and node.is_char
        assert ("c", node.major, node.minor) == nodes[path], path
    assert probe._driver_source(raw) == "/usr/local/nvidia/lib64/libcuda.so.580.159.04"


def classify(rel: str, tag: str, when: str):
    got = probe.parse(text(rel))
    expected = {p: n for p, n in host_nodes().items() if p in got.nodes}
    allowlist = recorded_json(f"{tag}/bpf-{when}.decoded.json")["rules"]
    return got, probe.classify(CTS[tag], "localhost", got, expected, "580.159.04",
                               allowlist=allowlist, host_majors=host_majors())


def codes(findings) -> set[tuple[str, str | None]]:
    return {(f.code, f.device) for f in findings}


def test_uvm_denied_classifies_as_lxf200_and_cuinit_999():
    got, found = classify("uvm/probe-before.txt", "uvm", "before")
    assert got.cuinit == 999 and got.nvidia_smi_rc == 0 and got.nvidia_smi_out.startswith("GPU 0: NVIDIA H200")
    assert codes(found) == {("LXF200", f"{NV}-uvm"), ("LXF200", f"{NV}-uvm-tools"),
                            ("LXF200", f"{NV}-caps/nvidia-cap1"), ("LXF200", f"{NV}-caps/nvidia-cap2"),
                            ("LXF210", f"{NV}-uvm")}
    by = {(f.code, f.device): f for f in found}
    uvm = by[("LXF200", f"{NV}-uvm")]
    assert f"c {UVM}:0" in uvm.message and f"allow c {UVM}:* rwm" in uvm.fix.title
    assert f"nvidia-uvm is {UVM} on this host" in uvm.evidence
    assert any(e.startswith("running allowlist: ") and "c 195:* rwm" in e for e in uvm.evidence)
    cu = by[("LXF210", f"{NV}-uvm")]
    assert "999" in cu.message and "nvidia-smi still works" in cu.message
    assert f"open {NV}-uvm: EPERM" in cu.evidence
    assert not [f for f in found if f.code in ("LXF211", "LXF212")]


def test_nvidiactl_denied_classifies_as_lxf200_cuinit_100_and_nvml():
    got, found = classify("ctl/probe-before.txt", "ctl", "before")
    assert got.cuinit == 100 and got.nvidia_smi_rc == 255
    assert codes(found) == {("LXF200", f"{NV}ctl"), ("LXF200", f"{NV}-caps/nvidia-cap1"),
                            ("LXF200", f"{NV}-caps/nvidia-cap2"), ("LXF210", f"{NV}ctl"), ("LXF211", f"{NV}ctl")}
    by = {(f.code, f.device): f for f in found}
    assert "= 100" in by[("LXF210", f"{NV}ctl")].message
    assert "Unknown Error" in by[("LXF211", f"{NV}ctl")].message
    assert by[("LXF200", f"{NV}ctl")].fix.title.startswith("allow c 195:* rwm")


def test_nocaps_probe_skips_the_gpu_calls_and_still_finds_the_denial():
    got, found = classify("nocaps/probe-before.txt", "nocaps", "before")
    assert "gpu skipped /dev/nvidia-caps/nvidia-cap1\n" in got.raw
    assert got.cuinit is None and got.nvidia_smi_rc is None
    assert codes(found) == {("LXF200", f"{NV}-uvm"), ("LXF200", f"{NV}-uvm-tools")}


@pytest.mark.parametrize("tag", ["uvm", "ctl"])
def test_after_the_repair_the_probe_is_clean(tag):
    got, found = classify(f"{tag}/probe-after.txt", tag, "after")
    assert found == [] and got.cuinit == 0 and got.nvidia_smi_rc == 0
    assert set(n.open for n in got.nodes.values()) == {"ok"}


@pytest.mark.parametrize("tag, when", [("uvm", "before"), ("uvm", "after"), ("ctl", "before"),
                                       ("ctl", "after"), ("nocaps", "before")])
def test_replayed_probe_findings_equal_what_diagnose_said_on_the_gpu_host(tag, when):
    _, found = classify(f"{tag}/probe-{when}.txt", tag, when)
    doc = recorded_json(f"{tag}/diagnose-{when}.json")
    assert doc["schema"] == 1 and doc["command"] == "diagnose"
    (ct,) = doc["containers"]
    device = {(f["code"], f["device"]) for f in ct["findings"] if f["code"].startswith("LXF2")}
    assert device == codes(found)


def test_diagnose_text_shows_the_evidence():
    out = text("uvm/diagnose-before.txt")
    assert f"LXF200 error   open /dev/nvidia-uvm: EPERM (the cgroup device policy denies c {UVM}:0)" in out
    assert "LXF210 error   cuInit(0) = 999 CUDA_ERROR_UNKNOWN" in out and "(nvidia-smi still works)" in out
    assert f"evidence: nvidia-uvm is {UVM} on this host" in out
    assert f"evidence: /proc/devices: {UVM} nvidia-uvm" in out
    assert text("uvm/diagnose-after.txt").startswith(f"CT {CTS['uvm']} (running)")
    assert "no problems found" in text("uvm/diagnose-after.txt")


# ------------------------------------------------------------------- the live allowlist

BPF = [(tag, when) for tag in ("uvm", "ctl") for when in ("before", "after")] + [("nocaps", "before")]


def program(tag: str, when: str) -> tuple[int, bytes]:
    out = bpf.parse_reader(text(f"{tag}/bpf-{when}.reader"))
    assert out.status == "progs" and out.scope == "direct" and len(out.programs) == 1
    return out.programs[0]


@pytest.mark.parametrize("tag, when", BPF)
def test_reader_output_decodes_to_what_was_decoded_there(tag, when):
    prog_id, raw = program(tag, when)
    live = bpf.decode(raw)
    want = recorded_json(f"{tag}/bpf-{when}.decoded.json")
    assert live.mode == want["mode"] == "allowlist" and live.unknown is False
    assert bpf.describe(live.rules) == want["rules"]
    assert [p["id"] for p in want["bpftool_progs"]] == [prog_id]
    assert want["bpftool_progs"][0]["attach_flags"] == "multi"
    assert bpf.encode(live) == raw  # lxcfix's model of LXC's generator gives the same bytes


@pytest.mark.parametrize("tag, when", BPF)
def test_bpftool_dump_is_the_same_program(tag, when):
    prog_id, raw = program(tag, when)
    (listing,) = json.loads(text(f"{tag}/bpf-{when}.bpftool.json"))
    assert bpf._bpftool_insns(listing) == raw
    xlated = text(f"{tag}/bpf-{when}.xlated")
    assert xlated.startswith(f"# prog {prog_id}\n") and "r0 = 0" in xlated
    for rule in bpf.decode(raw).rules:
        if rule.major is not None:
            assert f"if r4 != {rule.major:#x} goto" in xlated, rule


BASE = [R("c *:* m"), R("b *:* m"), R("c 1:3 rwm"), R("c 1:5 rwm"), R("c 1:7 rwm"), R("c 5:0 rwm"),
        R("c 5:1 rwm"), R("c 5:2 rwm"), R("c 1:8 rwm"), R("c 1:9 rwm"), R("c 136:* rwm"), R("c 10:229 rwm")]


def test_the_running_allowlists():
    live = {(t, w): bpf.decode(program(t, w)[1]) for t, w in BPF}
    assert live["uvm", "before"].rules == tuple(BASE + [R("c 195:* rwm")])
    # path-form rules, stat()ed by LXC at start: exact minors
    assert live["uvm", "after"].rules == tuple(BASE + [R("c 195:* rwm"), R(f"c {UVM}:0 rwm"), R(f"c {UVM}:1 rwm"),
                                                       R(f"c {CAPS}:1 rwm"), R(f"c {CAPS}:2 rwm")])
    assert live["ctl", "before"].rules == tuple(BASE + [R("c 195:0 rwm"), R(f"c {UVM}:* rwm")])
    assert live["ctl", "after"].rules == tuple(BASE + [R("c 195:0 rwm"), R(f"c {UVM}:* rwm"),
                                                       R("c 195:* rwm"), R(f"c {CAPS}:* rwm")])
    assert live["nocaps", "before"].rules == live["uvm", "before"].rules
    u, c = live["uvm", "before"], live["ctl", "before"]
    assert not u.allows("c", UVM, 0, "rw") and not u.allows("c", UVM, 1, "rw") and u.allows("c", 195, 255, "rw")
    assert u.allows("c", UVM, 0, "m")  # mknod stays allowed (common.conf's c *:* m)
    assert not c.allows("c", 195, 255, "rw") and c.allows("c", 195, 0, "rw") and c.allows("c", UVM, 0, "rw")
    for key in (("uvm", "after"), ("ctl", "after")):
        for node in host_nodes().values():
            assert live[key].allows(*node, "rw"), (key, node)


def config_device_lines(config: str) -> list[tuple[bool, str]]:
    """(allow?, value) of the cgroup2 device lines LXC sees: common.conf's, then the config's."""
    common = text("snapshot/usr/share/lxc/config/common.conf")
    lines: list[tuple[bool, str]] = []
    for line in (common + "\n" + config).splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"):
            lines.append((key.endswith("allow"), value))
    return lines


@pytest.mark.parametrize("tag, when", BPF)
def test_lxc_list_semantics_replayed_from_the_config_give_the_attached_program(tag, when):
    nodes = host_nodes()
    config = text(f"{tag}/config.{'before' if when == 'before' else 'after'}")
    expected = bpf.lxc_expected(config_device_lines(config), stat=nodes.get)
    assert expected is not None
    assert bpf.encode(expected) == program(tag, when)[1]


# ------------------------------------------------------------------- the host snapshot, through the CLI

def run_cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    return exit_.value.code, capsys.readouterr().out


def findings_of(doc: dict) -> dict[str, set[tuple[str, str | None]]]:
    return {c["ct"]: {(f["code"], f["device"]) for f in c["findings"]} for c in doc["containers"]}


@pytest.fixture
def snap(tmp_path) -> Path:
    root = tmp_path / "snapshot"
    shutil.copytree(FIX / "snapshot", root)
    return root


def test_snapshot_scan_here_equals_the_scan_there(capsys, snap):
    rc, out = run_cli(capsys, "scan", "--root", str(snap), "--json")
    assert rc == 1
    here, there = json.loads(out), recorded_json("snapshot-scan.json")
    assert findings_of(here) == findings_of(there)
    assert [c["plan"]["diff"] for c in here["containers"]] == [c["plan"]["diff"] for c in there["containers"]]
    f = findings_of(here)
    assert f[CTS["uvm"]] == {("LXF100", f"{NV}-uvm"), ("LXF100", f"{NV}-uvm-tools")}
    assert f[CTS["ctl"]] == {("LXF100", f"{NV}ctl"), ("LXF103", None)}
    assert f[CTS["nocaps"]] == f[CTS["uvm"]]
    assert here["hosts"][0]["facts"]["nvidia_driver"] == "580.159.04"


def added_lines(before: str, after: str) -> list[str]:
    old = before.splitlines()
    return [line for line in after.splitlines() if line not in old]


@pytest.mark.parametrize("tag, style", [("uvm", "auto"), ("ctl", "numeric")])
def test_snapshot_apply_writes_what_apply_wrote_on_the_gpu_host(capsys, snap, tag, style):
    name = CTS[tag]
    conf = snap / "var/lib/lxc" / name / "config"
    assert conf.read_text() == text(f"{tag}/config.before")
    rc, _ = run_cli(capsys, "apply", "--root", str(snap), "--ct", name, "--style", style, "--no-restart", "--yes")
    assert rc == 0
    here = added_lines(text(f"{tag}/config.before"), conf.read_text())
    there = added_lines(text(f"{tag}/config.before"), text(f"{tag}/config.after"))
    # the snapshot has no dev/ nodes, so the /dev/nvidia-caps directory mount brings nothing
    # (no mig-minors either); the GPU host also allowed its two caps nodes
    assert here == [line for line in there if "241" not in line and "nvidia-caps" not in line]
    if tag == "uvm":
        assert here == ["lxc.cgroup2.devices.allow = /dev/nvidia-uvm rwm",
                        "lxc.cgroup2.devices.allow = /dev/nvidia-uvm-tools rwm"]
    else:
        assert here == ["lxc.cgroup2.devices.allow = c 195:* rwm"]
    rc, _ = run_cli(capsys, "plan", "--root", str(snap), "--ct", name, "--style", style)
    assert rc == 0  # nothing left to do


def test_audit_of_the_repaired_configs_flags_the_pinned_dynamic_majors(capsys, snap):
    """The configs as apply left them on the GPU host: the numeric repair pins nvidia-uvm's and
    nvidia-caps' dynamic majors (LXF103); the path-form repair does not."""
    for tag in ("uvm", "ctl"):
        (snap / "var/lib/lxc" / CTS[tag] / "config").write_text(text(f"{tag}/config.after"))
    rc, out = run_cli(capsys, "audit", "--root", str(snap), "--json")
    assert rc == 1
    here = json.loads(out)
    assert here["for"] == "reboot"
    by_ct = {c["ct"]: c["findings"] for c in here["containers"]}
    # The snapshot has no lxcfix-nvidia-nodes unit: every GPU container "may" lose
    # /dev/nvidia-uvm at boot (LXF112). Beyond that, the path-form repair is safe.
    assert {f["code"] for f in by_ct[CTS["uvm"]]} == {"LXF112"}
    pinned = sorted(f["message"].split(" pins ")[0] for f in by_ct[CTS["ctl"]] if f["code"] == "LXF103")
    assert pinned == [f"c {UVM}:* rwm", f"c {CAPS}:* rwm"]
    # the same LXF103s as the audit run on the GPU host (recorded by an earlier audit that
    # listed only future risks; this one also lists what is broken now and LXF112 at boot)
    there = recorded_json("audit.json")
    lxf103 = lambda doc: {c["ct"]: sorted(f["message"].split(" pins ")[0] for f in c["findings"]
                                          if f["code"] == "LXF103") for c in doc["containers"]}
    assert lxf103(there) == lxf103(here)
    assert "LXF103 warning c 238:* rwm pins the dynamic major of nvidia-uvm" in text("audit.txt")


def test_the_gpu_run_itself_passed_every_check():
    assert SUMMARY["failures"] == [] and SUMMARY["fake"] is False
    assert SUMMARY["host"]["nvidia-uvm"] == UVM
    for tag in ("uvm", "ctl"):
        c = SUMMARY["containers"][tag]
        assert c["restarted"] is True and c["bpf_before"]["attached"] and c["bpf_after"]["attached"]
    assert "applied (verified)" in text("uvm/apply.txt") and "style: path" in text("uvm/apply.txt")
    assert "style: numeric" in text("ctl/apply.txt")
