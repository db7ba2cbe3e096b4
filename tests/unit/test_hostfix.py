"""hostfix: the boot-time unit that creates the NVIDIA nodes; golden text, plans
that settle, and the apply flow with a recorded command runner."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field, replace

import pytest

from lxcfix import hostfix
from lxcfix.errors import ApplyFailed, BadInput, Refused
from lxcfix.model import DeviceNode, Result

from .conftest import make_facts

GOLDEN_PVE = """\
# Written by lxcfix (lxcfix host-fix). The kernel does not create the NVIDIA
# device nodes when the driver loads; containers that pass them in (bind mounts,
# devN: entries, path-form allow rules) need them before they start.
[Unit]
Description=Create the NVIDIA device nodes before containers start (lxcfix)
Documentation=man:nvidia-modprobe(1) https://github.com/NVIDIA/nvidia-modprobe
ConditionPathExists=/usr/bin/nvidia-modprobe
After=systemd-modules-load.service
Before=pve-guests.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-modprobe -c0 -c255
ExecStart=/usr/bin/nvidia-modprobe -u -c0

[Install]
WantedBy=multi-user.target
"""


def gpu_facts(backend="pve", gpus=(0,), modeset=False):
    nodes = {f"/dev/nvidia{i}": DeviceNode(f"/dev/nvidia{i}", "c", 195, i) for i in gpus}
    nodes["/dev/nvidiactl"] = DeviceNode("/dev/nvidiactl", "c", 195, 255)
    if modeset:
        nodes["/dev/nvidia-modeset"] = DeviceNode("/dev/nvidia-modeset", "c", 195, 254)
    return replace(make_facts(backend=backend, nodes=nodes), nvidia_driver="580.159.04")


def test_unit_for_proxmox_is_golden():
    plan = hostfix.plan_host_unit(gpu_facts(), None, "/etc/systemd/system/lxcfix-nvidia-nodes.service")
    assert plan.after.decode() == GOLDEN_PVE
    assert (plan.ct, plan.before, plan.style, plan.notes) == ("host", b"", "systemd-unit", ())
    assert plan.diff().startswith("--- a/etc/systemd/system/lxcfix-nvidia-nodes.service\n"
                                  "+++ b/etc/systemd/system/lxcfix-nvidia-nodes.service\n@@ -0,0 +1,18 @@\n")


def test_unit_for_plain_lxc_with_gpus_and_modeset():
    text = hostfix.plan_host_unit(gpu_facts("lxc", gpus=(0, 1, 3), modeset=True), None).after.decode()
    assert "Before=lxc.service\n" in text and "pve-guests" not in text
    assert "ExecStart=/usr/bin/nvidia-modprobe -c0 -c1 -c3 -c255\n" in text
    assert "ExecStart=/usr/bin/nvidia-modprobe -u -c0\nExecStart=/usr/bin/nvidia-modprobe -m\n\n[Install]" in text


def test_plan_is_idempotent_and_shows_a_drifted_unit():
    facts = gpu_facts()
    first = hostfix.plan_host_unit(facts, None)
    assert not first.is_empty
    again = hostfix.plan_host_unit(facts, first.after)
    assert again.is_empty and again.diff() == ""
    drifted = first.after.replace(b"-u -c0", b"-u")
    plan = hostfix.plan_host_unit(facts, drifted)
    assert "-ExecStart=/usr/bin/nvidia-modprobe -u\n+ExecStart=/usr/bin/nvidia-modprobe -u -c0\n" in plan.diff()


def test_unknown_gpu_count_assumes_one_and_says_so():
    facts = make_facts()  # snapshot: no dev/ nodes, no driver
    plan = hostfix.plan_host_unit(facts, None)
    assert b"-c0 -c255" in plan.after
    assert any("one GPU" in n for n in plan.notes) and any("no NVIDIA driver" in n for n in plan.notes)


@pytest.mark.parametrize("bad", ["nvidia-modprobe", "/usr/bin/nvidia modprobe", "/x;rm", "/x\n[Service]"])
def test_modprobe_path_is_checked(bad):
    with pytest.raises(BadInput):
        hostfix.plan_host_unit(gpu_facts(), None, modprobe=bad)


def test_verify_output_counts_warnings_about_our_unit():
    p = "/etc/systemd/system/lxcfix-nvidia-nodes.service"
    assert hostfix.verify_problems(Result(0, "", ""), p) == []
    warn = Result(0, "", f"{p}:12: Unknown key 'Bogus' in section [Service], ignoring.\n")
    assert hostfix.verify_problems(warn, p) == [f"{p}:12: Unknown key 'Bogus' in section [Service], ignoring."]
    other = Result(0, "", "some-other.service: something\n")
    assert hostfix.verify_problems(other, p) == []
    failed = Result(1, "", "lxcfix-nvidia-nodes.service: Command /x is not executable: No such file or directory\n")
    assert hostfix.verify_problems(failed, p) == [failed.stderr.strip()]
    assert hostfix.verify_problems(Result(1, "", ""), p) == ["systemd-analyze verify exited 1"]


def test_systemd_modes():
    assert hostfix.systemd_for("/etc/systemd/system", live=True) == hostfix.Systemd("online")
    assert hostfix.systemd_for("/etc/systemd/system", live=False) == hostfix.Systemd("none")
    assert hostfix.systemd_for("/tmp/r/etc/systemd/system", live=True) == hostfix.Systemd("offline", "/tmp/r")
    assert hostfix.systemd_for("/tmp/units", live=True) == hostfix.Systemd("none")
    assert hostfix.Systemd("offline", "/tmp/r").systemctl("enable", "x") == ["systemctl", "--root=/tmp/r", "enable", "x"]


# ---- the apply flow, with a runner that records commands


@dataclass
class Runner:
    name: str = "testhost"
    fail: dict = field(default_factory=dict)  # argv[ -2 or -1 ] word -> Result
    calls: list = field(default_factory=list)
    enabled: bool = False

    def run(self, argv, *, input=None, timeout=None, max_output=None):
        self.calls.append(list(argv))
        for word, result in self.fail.items():
            if word in argv:
                return result
        if "is-enabled" in argv:
            return Result(0 if self.enabled else 1)
        if "enable" in argv:
            self.enabled = True
        if "disable" in argv:
            self.enabled = False
        return Result(0)


@dataclass
class Target:
    transport: Runner
    root: str | None = None
    live: bool = True

    def local_path(self, p):
        return p


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    d = tmp_path / "root" / "etc" / "systemd" / "system"
    monkeypatch.setenv("LXCFIX_SYSTEMD_DIR", str(d))
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LXCFIX_LOCK_DIR", str(tmp_path / "lock"))
    return d


def events(tmp_path):
    with open(tmp_path / "state" / "journal.jsonl") as f:
        return [json.loads(l)["event"] for l in f]


def test_apply_writes_verifies_enables_offline_then_has_nothing_to_do(sysroot, tmp_path):
    runner = Runner()
    target = Target(runner)
    plan = hostfix.plan_host_unit(gpu_facts(), hostfix.read_existing(target))
    result = hostfix.apply_host_unit(target, plan, enable=True)
    assert (result.step_reached, result.verified, result.backup_path) == ("enabled", True, None)
    unit = sysroot / hostfix.UNIT_NAME
    assert unit.read_bytes() == plan.after and unit.stat().st_mode & 0o777 == 0o644
    root = str(tmp_path / "root")
    assert runner.calls == [["systemd-analyze", "verify", "--man=no", str(unit)],
                            ["systemctl", f"--root={root}", "enable", hostfix.UNIT_NAME]]
    assert events(tmp_path) == ["host-unit-backup", "host-unit-written", "host-unit-verify",
                                "host-unit-command", "host-unit-done"]
    again = hostfix.plan_host_unit(gpu_facts(), hostfix.read_existing(target))
    assert again.is_empty
    assert hostfix.apply_host_unit(target, again, enable=True).step_reached == "nothing-to-do"
    assert not [p for p in os.listdir(sysroot) if p.endswith(".tmp")]


def test_failed_verify_removes_a_new_unit(sysroot, tmp_path):
    p = str(sysroot / hostfix.UNIT_NAME)
    runner = Runner(fail={"verify": Result(0, "", f"{p}:3: Unknown key 'X' in section [Unit], ignoring.")})
    plan = hostfix.plan_host_unit(gpu_facts(), None)
    with pytest.raises(ApplyFailed) as e:
        hostfix.apply_host_unit(Target(runner), plan, enable=True)
    assert "rolled back" in str(e.value) and "removed" in str(e.value) and e.value.exit_code == 4
    assert not os.path.exists(p)
    assert not any("enable" in c for c in runner.calls)
    assert events(tmp_path)[-2:] == ["host-unit-failed", "host-unit-rolled-back"]


def test_failed_enable_restores_the_old_unit_from_its_backup(sysroot, tmp_path):
    sysroot.mkdir(parents=True)
    old = b"[Unit]\nDescription=old\n[Service]\nType=oneshot\nExecStart=/bin/true\n"
    (sysroot / hostfix.UNIT_NAME).write_bytes(old)
    runner = Runner(fail={"enable": Result(1, "", "Failed to enable unit: Access denied")})
    target = Target(runner)
    plan = hostfix.plan_host_unit(gpu_facts(), hostfix.read_existing(target))
    with pytest.raises(ApplyFailed) as e:
        hostfix.apply_host_unit(target, plan, enable=True)
    assert "Access denied" in str(e.value) and "restored from" in str(e.value)
    assert (sysroot / hostfix.UNIT_NAME).read_bytes() == old
    backups = os.listdir(tmp_path / "state" / "host-unit" / hostfix.UNIT_NAME)  # apart from containers' backups
    assert len(backups) == 1
    assert ["systemctl", f"--root={tmp_path / 'root'}", "disable", hostfix.UNIT_NAME] in runner.calls



def test_a_failed_command_is_named_as_it_runs(tmp_path, monkeypatch):
    """The enable that failed, under a snapshot path with a space, named as shlex.join writes it."""
    monkeypatch.setenv("LXCFIX_SYSTEMD_DIR", str(tmp_path / "my snap" / "etc" / "systemd" / "system"))
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LXCFIX_LOCK_DIR", str(tmp_path / "lock"))
    target = Target(Runner(fail={"enable": Result(1, "", "Failed to enable unit: Access denied")}))
    plan = hostfix.plan_host_unit(gpu_facts(), hostfix.read_existing(target))
    with pytest.raises(ApplyFailed) as e:
        hostfix.apply_host_unit(target, plan, enable=True)
    argv = ["systemctl", f"--root={tmp_path / 'my snap'}", "enable", hostfix.UNIT_NAME]
    assert f"`{shlex.join(argv)}` exited 1" in str(e.value)


def test_missing_systemd_analyze_is_a_note_not_a_failure(sysroot):
    runner = Runner(fail={"verify": Result(127, "", "systemd-analyze: command not found")})
    result = hostfix.apply_host_unit(Target(runner), hostfix.plan_host_unit(gpu_facts(), None), enable=False)
    assert (result.step_reached, result.verified) == ("written", False)
    assert "not verified" in result.message


def test_a_unit_changed_since_the_plan_is_refused(sysroot):
    plan = hostfix.plan_host_unit(gpu_facts(), None)
    sysroot.mkdir(parents=True)
    (sysroot / hostfix.UNIT_NAME).write_bytes(b"[Unit]\n")
    with pytest.raises(Refused):
        hostfix.apply_host_unit(Target(Runner()), plan)


def test_enable_needs_a_systemd_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("LXCFIX_SYSTEMD_DIR", str(tmp_path / "units"))
    with pytest.raises(BadInput):
        hostfix.apply_host_unit(Target(Runner()), hostfix.plan_host_unit(gpu_facts(), None), enable=True)


def test_dry_run_steps_name_every_command(sysroot, tmp_path):
    plan = hostfix.plan_host_unit(gpu_facts(), None)
    steps = hostfix.host_unit_steps(Target(Runner()), plan, enable=True)
    assert any(s.startswith("systemd-analyze verify ") for s in steps)
    assert f"systemctl --root={tmp_path / 'root'} enable {hostfix.UNIT_NAME}" in steps
    assert not any("daemon-reload" in s for s in steps)  # offline: nothing to reload



def test_dry_run_steps_are_commands_quoted_as_they_run(tmp_path, monkeypatch):
    """A snapshot under a path with a space: each step's command is printed as shlex.join
    writes it, so it runs as printed."""
    d = tmp_path / "my snap" / "etc" / "systemd" / "system"
    monkeypatch.setenv("LXCFIX_SYSTEMD_DIR", str(d))
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LXCFIX_LOCK_DIR", str(tmp_path / "lock"))
    plan = hostfix.plan_host_unit(gpu_facts(), None)
    steps = hostfix.host_unit_steps(Target(Runner()), plan, enable=True)
    assert shlex.join(["systemctl", f"--root={tmp_path / 'my snap'}", "enable", hostfix.UNIT_NAME]) in steps
    assert any(s.startswith(shlex.join([*hostfix.VERIFY, str(d / hostfix.UNIT_NAME)]) + " (") for s in steps)


def test_a_snapshots_unit_binary_is_not_this_hosts_so_a_missing_one_is_not_checked(sysroot, tmp_path):
    """--root: the unit's nvidia-modprobe is the snapshot host's, so systemd-analyze verify's
    "Command ... is not executable" (about this machine) is said as not checked, not a failure:
    the run goes ahead as its check run said. Any other line still fails it; on a live host the
    same line still fails it."""
    p = str(sysroot / hostfix.UNIT_NAME)
    missing = Result(1, "", f"{hostfix.UNIT_NAME}: Command /usr/bin/nvidia-modprobe is not executable: "
                            "No such file or directory\n")
    assert hostfix.snapshot_problems(hostfix.verify_problems(missing, p)) == ([], ["/usr/bin/nvidia-modprobe"])
    runner = Runner(name="pve-gpu-host", fail={"verify": missing})  # a snapshot's commands run here: given
    snapshot = Target(runner, root=str(tmp_path / "root"), live=False)
    plan = hostfix.plan_host_unit(gpu_facts(), None)
    tx = hostfix.host_unit_transaction(snapshot, plan, enable=True, runner=runner)
    assert tx.check().ok
    assert any("the ExecStart binaries are pve-gpu-host's, not checked here" in s for s in tx.describe_steps())
    result = hostfix.apply_host_unit(snapshot, plan, enable=True, runner=runner)
    assert runner.calls[0] == ["systemd-analyze", "verify", "--man=no", p]
    assert (result.step_reached, result.verified) == ("enabled", True)
    assert result.message == ("not checked: whether /usr/bin/nvidia-modprobe is executable on pve-gpu-host "
                              "(systemd-analyze verify looks on this machine, which lacks it)")
    assert (sysroot / hostfix.UNIT_NAME).read_bytes() == plan.after

    os.unlink(p)
    bad = Result(1, "", missing.stderr + f"{p}:3: Unknown key 'X' in section [Unit], ignoring.\n")
    with pytest.raises(ApplyFailed) as e:
        hostfix.apply_host_unit(Target(Runner(), root=str(tmp_path / "root"), live=False), plan, enable=True,
                                runner=Runner(fail={"verify": bad}))
    assert "Unknown key 'X'" in str(e.value) and "nvidia-modprobe" not in str(e.value).split("\nrolled back")[0]
    assert not os.path.exists(p)
    with pytest.raises(ApplyFailed) as e:  # live: this host's own binary, which the unit runs at boot
        hostfix.apply_host_unit(Target(Runner(fail={"verify": missing})), plan, enable=True)
    assert "nvidia-modprobe is not executable" in str(e.value) and not os.path.exists(p)


def test_on_this_hosts_own_systemd_the_check_run_refuses_a_missing_nvidia_modprobe(sysroot, tmp_path):
    """Installed for this host (/etc/systemd/system, online), the unit runs this host's nvidia-modprobe:
    check mode finds it missing, as verify would, so --dry-run and the run give the same verdict
    (exit 4, the error verify raises, before anything is written); with the binary there, both go
    ahead. Nothing is written here."""
    path = os.path.join(hostfix.SYSTEMD_DIR, hostfix.UNIT_NAME)
    if os.path.lexists(path) or not os.path.isdir(hostfix.SYSTEMD_DIR):
        pytest.skip(f"{path} exists on this machine, or {hostfix.SYSTEMD_DIR} does not")
    assert hostfix.exec_binaries(hostfix.render_unit("pve", modprobe="/opt/x/nvidia-modprobe")) == \
        ("/opt/x/nvidia-modprobe",)
    runner = Runner()
    for modprobe, ok in ((str(tmp_path / "no-such"), False), ("/bin/true", True)):
        plan = hostfix.plan_host_unit(gpu_facts(), None, path, modprobe=modprobe)
        verdict = hostfix.host_unit_transaction(Target(runner), plan, enable=True).check()
        assert verdict.ok is ok, verdict
        if not ok:
            assert isinstance(verdict.error, ApplyFailed) and verdict.exit_code == 4
            assert f"would run {modprobe}, which is not executable on this host" in verdict.message
            assert verdict.step.startswith("systemd-analyze verify --man=no ")
            with pytest.raises(ApplyFailed) as e:  # the run: the same check, before anything
                hostfix.apply_host_unit(Target(runner), plan, enable=True)
            assert str(e.value) == verdict.message
    assert runner.calls == [] and not os.path.lexists(path)
