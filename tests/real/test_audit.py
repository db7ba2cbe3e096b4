"""audit and the host-level fix against real containers and a real systemd toolchain.

1. The audit's "may break on reboot" is real, and its change prevents it: two
   containers pin a driverless node's dynamic major (M) numerically; the audit
   says LXF103/LXF111 (may) with exact lines; one gets those lines. Then the
   "reboot" moves the major (the node is made again with M2, /proc/devices says
   M2): the pinned container gets EPERM, the audited one still passes the cgroup
   (ENXIO: allowed, no driver). BPF programs are asserted attached throughout.
2. The boot unit the audit recommends for nvidia-uvm: written into a temp
   systemd tree, checked by the real `systemd-analyze verify`, enabled with
   the real `systemctl --root`; a unit that fails verify is rolled back.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lxcfix import audit, gather, hostfix, repair
from lxcfix.errors import ApplyFailed

from . import harness

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LXCFIX_LOCK_DIR", str(tmp_path / "lock"))
    return tmp_path / "state"


def proc_devices(path: Path, major: int) -> None:
    path.write_text(f"Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n136 pts\n195 nvidia\n{major} nvidia-uvm\n\n"
                    "Block devices:\n  8 sd\n")


def another_free_major(than: int) -> int:
    used = harness.char_majors_in_use()
    return next(m for m in range(511, 383, -1) if m not in used and m != than)


def apply_change(config: Path, change: str) -> None:
    """The diff-style change the audit gives: '- ' lines out, '+ ' lines in their place."""
    lines = config.read_text().splitlines()
    out, added = [], [l[2:] for l in change.splitlines() if l.startswith("+ ")]
    for l in lines:
        if f"- {l.strip()}" in change.splitlines():
            out += added
            added = []
            continue
        out.append(l)
    config.write_text("\n".join(out + added) + "\n")


def audit_of(names, boot=False):
    target = repair.open_target(None)
    rep = repair.scan(target, names, probe=True)
    return audit.audit([rep], "reboot", boot_nodes={rep.host: boot})


def test_audited_change_survives_a_major_move_that_breaks_the_pinned_one(container_factory, state, tmp_path,
                                                                          monkeypatch):
    major = harness.free_char_major(511)
    (tmp_path / "devs").mkdir()
    node = harness.mknod(str(tmp_path / "devs" / "nvidia-uvm"), major, 0)
    proc = tmp_path / "proc-devices"
    proc_devices(proc, major)
    monkeypatch.setenv("LXCFIX_PROC_DEVICES", str(proc))
    lines = [f"lxc.cgroup2.devices.allow = c {major}:* rwm",
             f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"]
    fixed, pinned = container_factory(lines), container_factory(lines)
    for c in (fixed, pinned):
        assert c.bpf_attached() and harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"

    report = audit_of([fixed.name, pinned.name])
    got = {(i.ct, i.code): i for i in report.items}
    for c in (fixed, pinned):
        assert got[(c.name, "LXF103")].outcome == "may" and got[(c.name, "LXF111")].outcome == "may"
        assert got[(c.name, "LXF112")].outcome == "may"  # nothing known creates nvidia-uvm at boot
    assert got[(fixed.name, "LXF103")].change == (f"- lxc.cgroup2.devices.allow = c {major}:* rwm\n"
                                                  f"+ lxc.cgroup2.devices.allow = {node} rwm")
    md = audit.to_markdown(report)
    assert f"#### CT {fixed.name}: LXF103 {node}" in md and "## How to verify after maintenance" in md

    # Make the audit's changes to one container; the other keeps its numeric pin.
    for i in report.items_of(report.hosts[0].host, fixed.name):
        if i.kind == "config":
            apply_change(Path(fixed.config_path), i.change)
    fixed.restart()
    assert fixed.bpf_attached() and harness.open_errno(fixed, "/dev/nvidia-uvm") == "ENXIO"
    assert not [i for i in audit_of([fixed.name], boot=True).items]  # nothing left at risk

    # The "reboot": the driver comes back with another major.
    moved = another_free_major(major)
    os.unlink(node)
    harness.mknod(node, moved, 0)
    proc_devices(proc, moved)
    for c in (fixed, pinned):
        c.restart()
        assert c.bpf_attached()
    assert harness.open_errno(pinned, "/dev/nvidia-uvm") == "EPERM"  # what the audit warned about
    assert harness.open_errno(fixed, "/dev/nvidia-uvm") == "ENXIO"   # the audited change followed the move
    after = {(i.ct, i.code) for i in audit_of([fixed.name, pinned.name], boot=True).items}
    assert (pinned.name, "LXF101") in after and not [k for k in after if k[0] == fixed.name]


@pytest.fixture
def sysroot(tmp_path, monkeypatch, state):
    d = tmp_path / "root" / "etc" / "systemd" / "system"
    d.mkdir(parents=True)
    monkeypatch.setenv("LXCFIX_SYSTEMD_DIR", str(d))
    stub = tmp_path / "bin" / "nvidia-modprobe"  # the unit must name an executable for verify
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return d, str(stub)


def test_host_unit_is_verified_enabled_idempotent_and_rolled_back(sysroot, state, tmp_path):
    units, stub = sysroot
    can_enable = shutil.which("systemctl") is not None  # without it: write and verify only, nothing skipped
    target = repair.open_target(None)
    facts = gather.host_facts(target.transport, target.backend)
    have_verify = shutil.which("systemd-analyze") is not None

    plan = hostfix.plan_host_unit(facts, hostfix.read_existing(target), modprobe=stub)
    assert plan.path == str(units / hostfix.UNIT_NAME) and not plan.is_empty
    result = hostfix.apply_host_unit(target, plan, enable=can_enable)
    assert result.step_reached == ("enabled" if can_enable else "verified" if have_verify else "written")
    assert result.verified == have_verify
    unit = units / hostfix.UNIT_NAME
    assert unit.read_bytes() == plan.after
    assert f"ExecStart={stub} -u -c0\n" in unit.read_text()
    wants = units / "multi-user.target.wants" / hostfix.UNIT_NAME
    assert wants.is_symlink() == can_enable
    assert hostfix.unit_installed(target)

    again = hostfix.plan_host_unit(facts, hostfix.read_existing(target), modprobe=stub)
    assert again.is_empty
    assert hostfix.apply_host_unit(target, again, enable=can_enable).step_reached == "nothing-to-do"

    if have_verify:  # a unit naming a missing nvidia-modprobe fails verify: the good one comes back
        bad = hostfix.plan_host_unit(facts, hostfix.read_existing(target), modprobe=str(tmp_path / "no-such"))
        with pytest.raises(ApplyFailed) as err:
            hostfix.apply_host_unit(target, bad, enable=can_enable)
        assert "systemd-analyze verify rejects the unit" in str(err.value) and err.value.exit_code == 4
        assert unit.read_bytes() == plan.after and wants.is_symlink() == can_enable
        events = [json.loads(l)["event"] for l in (state / "journal.jsonl").read_text().splitlines()]
        assert events[-3:] == ["host-unit-verify", "host-unit-failed", "host-unit-rolled-back"]
        assert len(os.listdir(state / "host-unit" / hostfix.UNIT_NAME)) == 1


def test_v1_key_overbroad_rule_and_card_index_each_get_a_change_that_works(container_factory, tun, state):
    """LXF102 (v1 key ignored), LXF104 (c 10:* grants /dev/mapper/control too) and LXF113
    (/dev/dri/cardN named by probe order) on a real container; the audit's exact changes for
    the first two, applied to the config, leave /dev/net/tun working with the narrow rule."""
    c = container_factory([
        "lxc.cgroup.devices.allow = c 10:200 rwm",
        "lxc.cgroup2.devices.allow = c 10:* rwm",
        "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0",
        "lxc.mount.entry = /dev/dri/card0 dev/dri/card0 none bind,optional,create=file 0 0",
    ])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "ok"  # through the over-broad c 10:*
    items = {i.code: i for i in audit_of([c.name]).items if i.ct == c.name}
    assert items["LXF102"].outcome == "will"
    assert "+ lxc.cgroup2.devices.allow = c 10:200 rwm" in items["LXF102"].change
    assert items["LXF104"].outcome == "may"
    assert items["LXF104"].change.splitlines()[:2] == ["- lxc.cgroup2.devices.allow = c 10:* rwm",
                                                       "+ lxc.cgroup2.devices.allow = c 10:200 rwm"]
    assert items["LXF113"].outcome == "may" and "/dev/dri/by-path" in items["LXF113"].change

    config = Path(c.config_path)
    apply_change(config, items["LXF104"].change)
    apply_change(config, items["LXF102"].change)
    text = config.read_text()
    assert "c 10:* rwm" not in text and "lxc.cgroup.devices" not in text
    c.restart()
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "ok"  # the exact rule is enough
    after = {i.code for i in audit_of([c.name]).items if i.ct == c.name}
    assert not after & {"LXF102", "LXF104"}


def test_the_printed_host_fix_for_a_snapshot_does_what_its_check_run_says(tmp_path, request):
    """`lxcfix audit --root SNAP` prints `lxcfix host-fix --root "$snap" --yes` (on a copy). Its
    check run said "would go ahead" while the run exited 4: systemd-analyze verify looked for
    the unit's nvidia-modprobe on this machine, which is the snapshot host's binary. Both, run
    by bash as printed, now agree; the copy gets the unit, enabled, with the binary named as not
    checked; the real systemd-analyze and systemctl --root do the work."""
    if not (shutil.which("systemd-analyze") and shutil.which("systemctl")):
        pytest.fail("systemd-analyze and systemctl are needed (Debian's systemd package)")
    snap = tmp_path / "pve-gpu-host"
    shutil.copytree(REPO / "examples" / "pve-gpu-host", snap)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lxcfix").write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec "
                                    f"{shlex.quote(sys.executable)} -m lxcfix \"$@\"\n")
    (bin_dir / "lxcfix").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LXCFIX_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", COLUMNS="400", TERM="dumb")

    def bash(line: str) -> subprocess.CompletedProcess:
        script = f'{line}\nrc=$?\necho "snap=${{snap-}}"\nexit $rc\n'
        return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=180, stdin=subprocess.DEVNULL)

    audited = bash(f"lxcfix audit --root {shlex.quote(str(snap))}")
    assert audited.returncode == 1, audited.stderr
    (printed,) = {l.strip().split("    #")[0].strip() for l in audited.stdout.splitlines()
                  if "lxcfix host-fix --root" in l}
    assert printed.endswith('lxcfix host-fix --root "$snap" --yes'), printed

    check = bash(printed.replace(" --yes", " --dry-run"))
    went = "check: every step's precondition holds: host-fix would go ahead"
    assert check.returncode == 1 and went in check.stdout, check.stdout + check.stderr
    made = [Path(check.stdout.strip().splitlines()[-1].removeprefix("snap="))]

    ran = bash(printed)
    made.append(Path(ran.stdout.strip().splitlines()[-1].removeprefix("snap=")))
    for d in made:  # the copies the printed lines made ($(mktemp -d)/...)
        request.addfinalizer(lambda d=d: shutil.rmtree(d.parent, ignore_errors=True) if d.name else None)
    assert ran.returncode == 0, ran.stdout + ran.stderr  # what the check run said: it goes ahead
    assert "the ExecStart binaries are " in check.stdout and "not checked here" in check.stdout
    copy = made[-1]
    assert copy.is_dir() and copy != snap
    unit = copy / "etc/systemd/system" / hostfix.UNIT_NAME
    assert unit.read_bytes() == hostfix.render_unit("pve")
    assert (copy / "etc/systemd/system/multi-user.target.wants" / hostfix.UNIT_NAME).is_symlink()
    assert f"{hostfix.UNIT_NAME}: enabled" in ran.stdout
    if not os.path.exists(hostfix.MODPROBE):
        assert f"not checked: whether {hostfix.MODPROBE} is executable on " in ran.stdout
    assert not (snap / "etc/systemd/system").exists()  # the bundled snapshot itself is untouched
    again = bash(f"lxcfix audit --root {shlex.quote(str(copy))} --for reboot --json")
    doc = json.loads(again.stdout.rsplit("\nsnap=", 1)[0])
    assert not [i for c in doc["containers"] for i in c["findings"] if i["code"] == "LXF112"]
