"""Findings grouped by cause (lxcfix.causes): what the real H200 run saw, folded into one
problem per thing to fix; the stable cause ids in the JSON; the human output of scan,
diagnose and audit (causes first, -v every finding as before; containers in vmid order).

The GPU cases replay tests/unit/fixtures/gpu/ (README.md there): the configs, the host's
/proc/devices and /dev/nvidia* nodes, and the probe's real output inside each container,
through the same rules and planner as `lxcfix diagnose` on that host.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from dataclasses import replace

import pytest

from lxcfix import causes, cli, ctconfig, devices, gather, probe, report
from lxcfix.model import CtReport, DeviceNode, Finding, Fix, HostFacts, HostReport
from lxcfix.plan import make_plan_in
from lxcfix.transport import RootDir

from .conftest import EXAMPLES, make_ctx, make_facts
from .test_gpu_replay import CTS, FIX, host_nodes, text

UVM, CAPS = 238, 241


def gpu_facts() -> HostFacts:
    char, block = devices.parse_proc_devices(text("host/proc-devices.txt"))
    nodes = {p: DeviceNode(p, k, M, m, 0o20666) for p, (k, M, m) in host_nodes().items()}
    return HostFacts("localhost", "lxc", char, block, nodes, True, "580.159.04", "v2", None, "5.0.2")


def gpu_findings(tag: str, when: str = "before", style: str = "auto") -> tuple[HostFacts, list[Finding]]:
    """What diagnose finds in that container of the GPU run: config + host + the probe's real output."""
    facts = gpu_facts()
    name = CTS[tag]
    path = f"/var/lib/lxc/{name}/config"
    cfg = ctconfig.parse(text(f"{tag}/config.{when}").encode(), "lxc", path)
    ctx = gather.context(facts, gather.Loaded(name, path, cfg), gather.include_loader(RootDir(str(FIX / "snapshot"))))
    ctx = replace(ctx, probe=probe.parse(text(f"{tag}/probe-{when}.txt")))
    plan, _ = make_plan_in(ctx, style)
    return facts, list(plan.findings)


# ------------------------------------------------------------------- the H200 run, folded

@pytest.mark.parametrize("style", ["auto", "numeric"])
def test_uvm_and_caps_denied_on_the_h200_is_one_cause_of_nine_findings(style):
    """The issue's case: the errors (LXF100 and LXF200 for the two uvm nodes, LXF210) are one cause,
    one fix. The H200 has no MIG instances: its caps nodes, denied too, are one info apart (no rule
    for them: issue 29's "two answers to one fact")."""
    facts, found = gpu_findings("uvm", style=style)
    assert sorted(f.code for f in found) == ["LXF100"] * 2 + ["LXF200"] * 4 + ["LXF210"]
    gpu, caps = causes.group(found, facts)
    name = CTS["uvm"]
    assert gpu.title == f"CUDA cannot start in CT {name}: the cgroup denies nvidia-uvm (c {UVM}:*)"
    assert caps.severity == "info" and {f.device for f in caps.symptoms} == {
        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"} and not caps.applies
    found = [f for f in found if f in gpu.symptoms]
    cause = gpu
    assert cause.id == "cgroup-denies:nvidia" and cause.code == "LXF100" and cause.severity == "error"
    assert cause.proof[0] == ("cuInit(0) = 999 CUDA_ERROR_UNKNOWN: CUDA cannot use /dev/nvidia-uvm "
                              "(nvidia-smi still works)")
    assert cause.proof[1].startswith("open() inside gives EPERM: ") and cause.proof[1].count("/dev/nvidia") == 2
    # the probe saw EPERM in a running container: the live change can fix it too
    assert cause.applies and cause.commands() == (f"lxcfix apply --ct {name}", f"lxcfix apply --ct {name} --live")
    # a snapshot is changed on a copy: the command printed for it never writes the snapshot itself
    assert cause.commands(causes.Reach(root="/snap")) == (
        f'snap=$(mktemp -d)/snap && cp -r /snap "$snap" && lxcfix apply --ct {name} --root "$snap" --no-restart',)
    assert sorted(cause.symptoms, key=id) == sorted(found, key=id)


def test_nvidiactl_denied_folds_cuinit_100_and_nvml_and_keeps_the_pinned_major_apart():
    facts, found = gpu_findings("ctl")
    got = causes.group(found, facts)
    assert [c.id for c in got][:2] == ["cgroup-denies:nvidia", got[1].id] and got[1].id.startswith("LXF103:")
    gpu, pinned, caps = got
    assert gpu.title == f"CUDA cannot start in CT {CTS['ctl']}: the cgroup denies nvidiactl (c 195:255)"
    assert sorted(gpu.codes) == ["LXF100", "LXF200", "LXF210", "LXF211"] and len(gpu.symptoms) == 4
    assert caps.severity == "info" and caps.codes == ["LXF200"]  # no MIG on the H200: the caps nodes apart
    assert gpu.proof[:2] == ("cuInit(0) = 100 CUDA_ERROR_NO_DEVICE: CUDA cannot reach a GPU through "
                             "/dev/nvidiactl or /dev/nvidiaN",
                             "nvidia-smi: Failed to initialize NVML: Unknown Error (NVML cannot open /dev/nvidiactl)")
    assert pinned.severity == "warning" and [f.code for f in pinned.symptoms] == ["LXF103"]
    assert not pinned.applies and pinned.commands() == ()  # a suggestion (--style path), not the plan


def test_gpu_skipped_probe_still_gives_one_cause_with_the_eperm_proof():
    facts, found = gpu_findings("nocaps")
    (cause,) = causes.group(found, facts)
    assert cause.title == f"CT {CTS['nocaps']} cannot use the GPU: the cgroup denies nvidia-uvm (c {UVM}:*)"
    assert cause.proof == ("open() inside gives EPERM: /dev/nvidia-uvm, /dev/nvidia-uvm-tools",)


def test_after_the_repair_nothing_is_left():
    facts, found = gpu_findings("uvm", when="after")
    assert causes.group(found, facts) == []


def test_cause_ids_do_not_depend_on_the_order_of_the_findings():
    facts, found = gpu_findings("ctl")
    want = dict(zip(map(id, found), causes.ids(found, facts)))
    for seed in range(5):
        shuffled = found[:]
        random.Random(seed).shuffle(shuffled)
        assert dict(zip(map(id, shuffled), causes.ids(shuffled, facts))) == want
        assert [c.title for c in causes.group(shuffled, facts)] == [c.title for c in causes.group(found, facts)]


def test_json_keeps_every_finding_and_adds_its_cause():
    facts, found = gpu_findings("uvm")
    ct = CTS["uvm"]
    rep = HostReport("localhost", "lxc", facts, (CtReport("localhost", ct, "/var/lib/lxc/x/config", tuple(found)),))
    doc = json.loads(json.dumps(report.document("diagnose", [rep])))
    (c,) = doc["containers"]
    assert doc["schema"] == 1 and len(c["findings"]) == 7
    assert {f["cause"] for f in c["findings"] if f["severity"] == "error"} == {"cgroup-denies:nvidia"}
    cause, caps = c["causes"]
    assert caps["severity"] == "info" and caps["applies"] is False and caps["commands"] == []
    assert cause["id"] == "cgroup-denies:nvidia" and cause["symptoms"] == 5 and cause["applies"] is True
    assert cause["codes"] == ["LXF100", "LXF200", "LXF210"] and cause["commands"] == [f"lxcfix apply --ct {ct}", f"lxcfix apply --ct {ct} --live"]
    # the old fields are all still there, with the same meaning (schema 1 only gains fields)
    assert set(c["findings"][0]) >= {"code", "severity", "message", "device", "evidence", "fix", "live_fixable",
                                     "applicability", "edits", "commands", "line"}


# ------------------------------------------------------------------- other folds

def test_a_cgroup_v1_rule_the_host_ignores_is_the_cause_of_the_denial():
    found = cli_free_findings("arch: amd64\nlxc.cgroup.devices.allow: c 10:200 rwm\n"
                              "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n")
    assert sorted(f.code for f in found) == ["LXF100", "LXF102"]
    (cause,) = causes.group(found, make_facts())
    assert cause.code == "LXF102" and cause.id == "cgroup-denies:tun"
    assert cause.title == ("CT 200 cannot open /dev/net/tun: the cgroup denies tun (c 10:200); its rule is a "
                           "cgroup v1 key, which LXC ignores on this cgroup v2 host")


def cli_free_findings(config: str, **kw) -> list[Finding]:
    plan, _ = make_plan_in(make_ctx(config, **kw))
    return list(plan.findings)


def test_different_devices_are_different_causes_and_a_stale_major_names_the_old_rule():
    facts = make_facts()
    found = cli_free_findings("arch: amd64\nlxc.cgroup2.devices.allow: c 508:* rwm\n"
                              "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
                              "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n")
    got = {c.id: c for c in causes.group(found, facts)}
    assert set(got) == {"cgroup-denies:nvidia", "cgroup-denies:tun"}
    assert got["cgroup-denies:nvidia"].title == ("CT 200 cannot use the GPU: the cgroup denies nvidia-uvm "
                                                 "(c 511:*; the config still allows the old c 508:*)")
    assert got["cgroup-denies:tun"].title == "CT 200 cannot open /dev/net/tun: the cgroup denies tun (c 10:200)"
    assert "from the config and the host's majors" in got["cgroup-denies:tun"].proof[-1]


def finding(code, message, device=None, ct="200", severity="error", fix=None, line=None, host="pve1", **subject):
    return Finding(code, severity, ct, message, device=device, fix=fix, host=host, line=line, **subject)


def test_a_node_missing_on_the_host_explains_it_being_absent_inside_and_cuda_failing():
    fix = Fix("run `nvidia-modprobe -u -c=0` on the host", commands=("nvidia-modprobe -u -c0",))
    found = [
        finding("LXF112", "/dev/nvidia-uvm does not exist on the host: the container starts without it",
                "/dev/nvidia-uvm", fix=fix, line=7),
        finding("LXF202", "/dev/nvidia-uvm is absent in the container (the host has it as c 511:0)", "/dev/nvidia-uvm",
                fix=Fix("pass /dev/nvidia-uvm into the container and restart it")),
        finding("LXF210", "cuInit(0) = 999 CUDA_ERROR_UNKNOWN: CUDA cannot use /dev/nvidia-uvm", "/dev/nvidia-uvm"),
        finding("LXF120", "config has 'lock: backup': the container is busy; apply refuses", severity="info",
                fix=Fix("wait")),
    ]
    gpu, lock = causes.group(found, make_facts())
    assert gpu.id == "missing-on-host:nvidia" and gpu.code == "LXF112"
    assert gpu.title == ("CUDA cannot start in CT 200: /dev/nvidia-uvm does not exist on the host "
                         "(the container starts without it)")
    assert gpu.commands() == ("nvidia-modprobe -u -c0",) and not gpu.applies
    assert (lock.id, lock.severity, lock.title) == ("LXF120", "info", found[3].message)


def test_a_driver_mismatch_explains_nvml_saying_so():
    found = [finding("LXF212", "NVIDIA driver mismatch: host kernel driver 580.159.04, container userspace 570.1"),
             finding("LXF211", "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch (...)",
                     kind="driver-mismatch")]  # what probe.classify gives it: the cause kind as data
    (cause,) = causes.group(found, make_facts())
    assert cause.id == "driver-mismatch" and cause.code == "LXF212" and cause.title == found[0].message


def test_one_code_with_one_fix_title_is_one_cause():
    fix = Fix("use devN entries (Proxmox VE 8.1+) or path-form rules: lxcfix plan --style devn|path")
    found = [finding("LXF103", "c 238:* rwm pins the dynamic major of nvidia-uvm: ...", severity="warning", fix=fix,
                     line=4),
             finding("LXF103", "c 241:* rwm pins the dynamic major of nvidia-caps: ...", severity="warning", fix=fix,
                     line=5)]
    (cause,) = causes.group(found, make_facts())
    assert cause.title == found[0].message + " (config lines 4, 5)" and len(cause.symptoms) == 2


def test_containers_and_hosts_never_share_a_cause():
    a = finding("LXF100", "/dev/net/tun is c 10:200 on this host; ...", "/dev/net/tun", ct="200")
    b = replace(a, ct="201")
    c = replace(a, host="pve2")
    got = causes.group([a, b, c], make_facts())
    assert [(x.host, x.ct, x.id) for x in got] == [("pve1", "200", "cgroup-denies:tun"),
                                                   ("pve1", "201", "cgroup-denies:tun"),
                                                   ("pve2", "200", "cgroup-denies:tun")]


def test_ct_order_is_numeric_then_names():
    assert sorted(["web", "1000", "201", "200", "99x"], key=causes.ct_order) == ["200", "201", "1000", "99x", "web"]


# ------------------------------------------------------------------- the command line

def run(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.run(list(argv))
    return rc, capsys.readouterr().out


@pytest.fixture(autouse=True)
def plain(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")


def test_scan_prints_one_cause_per_problem_in_vmid_order(capsys):
    rc, out = run(capsys, "scan", "--root", str(EXAMPLES / "pve-gpu-host"))
    assert rc == 1
    heads = re.findall(r"^CT (\S+)$", out, flags=re.M)
    assert heads == ["200", "201", "203"]  # 201 came before 200 when findings were sorted by code
    snap = EXAMPLES / "pve-gpu-host"
    assert ("  error    CT 200 cannot use the GPU: the cgroup denies nvidia-uvm (c 511:*; the config still "
            "allows the old c 508:*) [LXF101]") in out
    # the fix for a bundled snapshot applies to a copy (the checkout stays as it is), its plan reads the snapshot
    assert (f'fix:   snap=$(mktemp -d)/pve-gpu-host && cp -r {snap} "$snap" && '
            'lxcfix apply --ct 200 --root "$snap" --no-restart') in out
    assert f"(lxcfix plan --ct 200 --root {snap} shows the change first)" in out
    assert "  error    CT 201 cannot open /dev/net/tun: the cgroup denies tun (c 10:200) [LXF100]" in out
    assert "-v: every finding on its own; lxcfix explain CODE" in out


def test_scan_verbose_shows_every_finding_as_before_in_vmid_order(capsys):
    rc, out = run(capsys, "scan", "--root", str(EXAMPLES / "pve-gpu-host"), "-v")
    assert rc == 1
    rows = re.findall(r"^\s+(\d+)  (LXF\d+) ", out, flags=re.M)
    assert rows == [("200", "LXF101"), ("201", "LXF100"), ("203", "LXF120")]
    assert "fix: move the rule to major 511" in out


def test_diagnose_of_the_gpu_snapshot_folds_and_verbose_unfolds(capsys, tmp_path):
    root = tmp_path / "snapshot"
    shutil.copytree(FIX / "snapshot", root)
    rc, out = run(capsys, "diagnose", "--root", str(root), "--ct", CTS["uvm"])
    assert rc == 1
    assert re.findall(r"^(error|warning)", out, flags=re.M) == ["error"]
    assert f"CT {CTS['uvm']} cannot use the GPU: the cgroup denies nvidia-uvm (c {UVM}:*) [LXF100]" in out
    assert "2 findings:" in out and out.count("[LXF100]") == 3  # the cause, and each finding folded under it
    rc, out = run(capsys, "diagnose", "--root", str(root), "--ct", CTS["uvm"], "--verbose")
    assert rc == 1 and len(re.findall(r"^LXF100 error ", out, flags=re.M)) == 2 and "evidence:" in out


def test_audit_groups_items_by_cause(capsys):
    rc, out = run(capsys, "audit", "--root", str(EXAMPLES / "pve-gpu-host"))
    assert rc == 1
    assert re.findall(r"^CT (\S+)$", out, flags=re.M) == ["200", "201"]
    assert "  will   broken now, and stays broken after the reboot: /dev/nvidia-uvm is c 511:0" in out
    rc, verbose = run(capsys, "audit", "--root", str(EXAMPLES / "pve-gpu-host"), "-v")
    assert re.findall(r"^\s+(\d+)  (LXF\d+) ", verbose, flags=re.M) == [("200", "LXF101"), ("200", "LXF112"),
                                                                         ("201", "LXF100")]


def test_audit_folds_findings_with_one_change_under_one_cause(capsys, tmp_path):
    root = tmp_path / "snapshot"
    shutil.copytree(FIX / "snapshot", root)
    rc, out = run(capsys, "audit", "--root", str(root), "--json")
    doc = json.loads(out)
    uvm = next(c for c in doc["containers"] if c["ct"] == CTS["uvm"])
    assert {f["code"]: f["cause"] for f in uvm["findings"]} == {"LXF100": "cgroup-denies:nvidia",
                                                                 "LXF112": "missing-on-host:nvidia"}
    rc, out = run(capsys, "audit", "--root", str(root))
    block = out.split(f"CT {CTS['uvm']}\n", 1)[1].split("\nCT ", 1)[0]
    assert block.count("  will   ") == 1 and block.count("also: broken now") == 1  # two LXF100, one change
    assert block.count("in /var/lib/lxc/") == 1


def test_audit_prints_each_block_once_and_a_command_for_each_item(capsys):
    """pve-kernel-upgrade's CT 304 has two pending changes of one cause: `pct pending`/`pct reboot`
    once, each revert once; an item the plan makes names `lxcfix apply`, on a copy of the snapshot."""
    snap = EXAMPLES / "pve-kernel-upgrade"
    rc, out = run(capsys, "audit", "--root", str(snap), "--for", "kernel-upgrade")
    assert rc == 1
    assert out.count("pct pending 304    # every pending change") == 1
    assert out.count("pct reboot 304") == 1
    assert out.count("pct set 304 --revert dev0") == 1 and out.count("pct set 304 --revert dev1") == 1
    assert (f'fix:   snap=$(mktemp -d)/pve-kernel-upgrade && cp -r {snap} "$snap" && '
            'lxcfix apply --ct 303 --root "$snap" --no-restart') in out
    assert f'lxcfix host-fix --root "$snap" --yes' in out and "lxcfix host-fix --yes" not in out
    assert "fix:   by hand: edit /etc/pve/lxc/302.conf as above" in out
    rc, text = run(capsys, "audit", "--root", str(snap), "--for", "kernel-upgrade", "--json")
    items = {(c["ct"], i["code"]): i for c in json.loads(text)["containers"] for i in c["findings"]}
    assert items[("303", "LXF100")]["applies"] and items[("303", "LXF100")]["commands"] == [
        f'snap=$(mktemp -d)/pve-kernel-upgrade && cp -r {snap} "$snap" && '
        'lxcfix apply --ct 303 --root "$snap" --no-restart']
    assert items[("302", "LXF155")]["commands"] == []


def test_commands_are_quoted_and_reach_where_the_report_was_made():
    odd = causes.Reach(root="/tmp/my snap")
    assert odd.show("plan", "200") == "lxcfix plan --ct 200 --root '/tmp/my snap'"
    assert odd.apply("200") == ("snap=$(mktemp -d)/'my snap' && cp -r '/tmp/my snap' \"$snap\" && "
                                'lxcfix apply --ct 200 --root "$snap" --no-restart')
    fleet = causes.Reach(ssh=("ssh", "-p", "2222", "root@10.0.0.5"), inventory="my inv.yaml", name="hv1")
    assert fleet.apply("200") == "lxcfix apply --ct 200 --inventory 'my inv.yaml' --host hv1"
    assert fleet.show("diagnose", "200") == "lxcfix diagnose --ct 200 --inventory 'my inv.yaml' --host hv1"
    assert fleet.show("plan", "200") == "lxcfix plan --ct 200 --inventory 'my inv.yaml' --host hv1"
    assert fleet.command("lxcfix apply --ct 200 --write-subgid") == \
        "lxcfix apply --ct 200 --write-subgid --inventory 'my inv.yaml' --host hv1"
    assert fleet.command("lxcfix host-fix --yes    # why") == \
        "lxcfix host-fix --yes --inventory 'my inv.yaml' --host hv1    # why"
    # the hook's snippet runs lxcfix on the host at every start: it needs lxcfix there, over ssh
    assert fleet.command("lxcfix hook --print-snippet") == "ssh -t -p 2222 root@10.0.0.5 'lxcfix hook --print-snippet'"
    stdin_fleet = causes.Reach(ssh=("ssh", "root@10.0.0.5"), name="hv1")  # `--inventory -`: no file to name
    assert stdin_fleet.apply("200") == "ssh -t root@10.0.0.5 'lxcfix apply --ct 200'"
    assert causes.LOCAL.command("pct reboot 304") == "pct reboot 304"


def test_a_fleet_hosts_commands_reach_it_as_the_scan_did():
    """A fleet host's apply, plan and diagnose run from here through the same inventory, with the
    known_hosts and ssh config the scan had; host-fix goes over ssh, as the scan reached it."""
    from lxcfix import inventory

    text = ("all:\n  hosts:\n    hv1:\n      ansible_host: 10.0.0.5\n      ansible_port: 2222\n"
            "      ansible_user: root\n      ansible_ssh_private_key_file: /keys/id\n    here:\n"
            "      ansible_connection: local\n")
    hv1, here = inventory.load(text, "inv.yaml").select(None)
    req = cli.FleetRequest("inv.yaml", known_hosts="/kh", ssh_config="/cfg")
    reach = cli._ssh_reach(hv1, req)
    assert reach.apply("200") == ("lxcfix apply --ct 200 --inventory inv.yaml --host hv1 --known-hosts /kh "
                                  "--ssh-config /cfg")
    assert reach.show("diagnose", "200") == ("lxcfix diagnose --ct 200 --inventory inv.yaml --host hv1 "
                                             "--known-hosts /kh --ssh-config /cfg")
    assert reach.command("lxcfix host-fix --yes") == ("lxcfix host-fix --yes --inventory inv.yaml --host hv1 "
                                                      "--known-hosts /kh --ssh-config /cfg")
    assert reach.command("lxcfix hook --print-snippet") == ("ssh -t -F /cfg -o UserKnownHostsFile=/kh -p 2222 -i "
                                                            "/keys/id root@10.0.0.5 'lxcfix hook --print-snippet'")
    assert cli._ssh_reach(here, req) == causes.LOCAL
