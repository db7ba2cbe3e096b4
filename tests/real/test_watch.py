"""lxcfix watch on real parts: real kernel uevents, inotify under a private /dev, real LXC
containers (privileged and unprivileged) repaired live, and its faults (SIGKILL mid-repair,
a container deleted mid-repair, two events in one pass, a second watcher, a tenant)."""

from __future__ import annotations

import json
from pathlib import Path

import os
import shutil
import tempfile
import time

import pytest

from . import harness
from .cli import TUN_MOUNT, lxcfix
from .watching import TUN_CHANGE, Watch, forged_uevent, kernel_change


def _journal(env) -> list[dict]:
    p = Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl"
    return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []


def test_uevent_repairs_opted_in_container_live(container_factory, tun, env, tmp_path):
    metrics = tmp_path / "lxcfix.prom"
    name = harness.new_name()
    w = Watch(env, "--heal", name, "--metrics-file", str(metrics))
    try:
        w.wait_for(r"^pass 1: ")  # the start pass: nothing to do yet
        c = container_factory([TUN_MOUNT], name=name)
        pid = c.init_pid()
        assert c.bpf_attached()
        assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
        kernel_change()
        w.wait_for(r"^event: change misc /dev/net/tun \(tun\)")
        line = w.wait_for(rf"^CT {name}: .*repaired live \(verified\)")
        assert "after the event" in line and "--heal" in line
        assert harness.open_errno(c, "/dev/net/tun") == "ok"
        assert c.init_pid() == pid
        assert "/dev/net/tun rwm" in Path(c.config_path).read_text()
        assert [e["event"] for e in _journal(env) if e.get("by") == "watch"][-1] == "done"
        text = metrics.read_text()
        assert "lxcfix_watch_repairs_total 1" in text and "lxcfix_watch_failures_total 0" in text
        latency = float(next(l.split()[1] for l in text.splitlines()
                             if l.startswith("lxcfix_watch_last_latency_seconds ")))
        assert 0 < latency < 30
    finally:
        assert w.stop() == 0, "\n".join(w.lines)


PRIVATE_DEV = r'''set -e
d=$(mktemp -d /tmp/lxcfix-dev.XXXXXX)
mount -t tmpfs -o mode=755 none "$d"
for n in null zero full random urandom tty; do touch "$d/$n"; mount --bind "/dev/$n" "$d/$n"; done
mkdir "$d/net" "$d/pts"; touch "$d/net/tun"; mount --bind /dev/net/tun "$d/net/tun"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$d/pts"; ln -s pts/ptmx "$d/ptmx"
mount --move "$d" /dev
exec "$@"
'''


@pytest.fixture
def world_uvm(env):
    """A driverless nvidia-uvm node in a directory the mapped root can traverse (pytest's
    tmp_path is 0700 root), and LXCFIX_PROC_DEVICES naming its major."""
    d = tempfile.mkdtemp(prefix="lxf-watch-", dir="/tmp")
    os.chmod(d, 0o755)
    node, major, proc = harness.driverless_uvm(d)
    env["LXCFIX_PROC_DEVICES"] = proc
    yield node, major
    shutil.rmtree(d)


def _private_dev_watch(env, *args) -> tuple[Watch, str]:
    """The watcher in a private mount namespace with its own /dev; (watch, its pid)."""
    w = Watch(env, *args, prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", PRIVATE_DEV, "sh"))
    line = w.wait_for(r"^watching: .*; pid \d+$")
    w.wait_for(r"^pass 1: ")
    return w, line.rsplit(" ", 1)[1]


def _mknod_uvm(pid: str, major: int) -> None:
    """What nvidia-modprobe does, in the watcher's private /dev: mknod, no uevent."""
    r = harness.sh(["nsenter", "-t", pid, "-m", "mknod", "-m", "666", "/dev/nvidia-uvm", "c", str(major), "0"])
    assert r.ok, r.stderr


def test_mknod_in_private_dev_heals_tagged_pve_container_and_reports_the_other(pve, world_uvm, env, tmp_path):
    """nvidia-modprobe makes /dev/nvidia-uvm with mknod and sends no uevent: the watcher
    (in a private mount namespace with its own /dev: the host's is never touched) sees the
    node through inotify. Proxmox CT A (tag `lxcfix-heal`) is repaired live; CT B, with the
    same problem and no tag, is reported: a line, and --notify's JSON on its stdin."""
    node, major = world_uvm
    env.update({k: v for k, v in pve.env().items() if k in ("LXCFIX_PVE_DIR", "PATH")})
    got = tmp_path / "notified.jsonl"
    notify = tmp_path / "notify.sh"
    notify.write_text(f"#!/bin/sh\ncat >> {got}\n")
    notify.chmod(0o755)
    host_had = os.path.lexists("/dev/nvidia-uvm")
    w, pid = _private_dev_watch(env, "--style", "numeric", "--notify", str(notify))
    try:
        mount = f"lxc.mount.entry: {node} dev/nvidia-uvm none bind,create=file"
        a = pve.make_ct(["tags: gpu;lxcfix-heal", mount])
        b = pve.make_ct([mount])
        b_before = Path(b.conf_path).read_bytes()
        pid_a = a.init_pid()
        for c in (a, b):
            assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"
        start = len(w.lines)
        _mknod_uvm(pid, major)
        w.wait_for(r"^event: node /dev/nvidia-uvm \(nvidia-uvm\)", start=start)
        w.wait_for(rf"^CT {a.vmid}: .*repaired live \(verified\).*\(tag lxcfix-heal\)", start=start)
        w.wait_for(rf"^CT {b.vmid}: .*not opted in to healing", start=start)
    finally:
        assert w.stop() == 0, "\n".join(w.lines)
    assert harness.open_errno(a, "/dev/nvidia-uvm") == "ENXIO"  # allowed now: the open reaches the (absent) driver
    assert a.init_pid() == pid_a
    assert Path(b.conf_path).read_bytes() == b_before
    assert harness.open_errno(b, "/dev/nvidia-uvm") == "EPERM"
    assert os.path.lexists("/dev/nvidia-uvm") == host_had
    sent = [json.loads(l) for l in got.read_text().splitlines()]
    assert {(d["ct"], d["repaired"]) for d in sent} >= {(a.vmid, True), (b.vmid, False)}
    assert next(d for d in sent if d["ct"] == b.vmid)["codes"][0] == "LXF100"


def test_mknod_in_private_dev_heals_unprivileged_container(world_uvm, env):
    """The same for a plain LXC container, unprivileged (a real idmap), opted in by --heal."""
    node, major = world_uvm
    name = harness.new_name()
    w, pid = _private_dev_watch(env, "--style", "numeric", "--heal", name)
    u = None
    try:
        u = harness.make_unprivileged_container([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"],
                                                name=name)
        assert harness.host_uid(u) == harness.MAPPED_ROOT and u.bpf_attached()
        pid_u = u.init_pid()
        assert harness.open_errno(u, "/dev/nvidia-uvm") == "EPERM"
        start = len(w.lines)
        _mknod_uvm(pid, major)
        w.wait_for(rf"^CT {name}: .*repaired live \(verified\).*\(--heal\)", start=start)
        assert harness.open_errno(u, "/dev/nvidia-uvm") == "ENXIO" and u.init_pid() == pid_u
    finally:
        code = w.stop()
        if u is not None:
            u.destroy()
    assert code == 0, "\n".join(w.lines)


def test_second_watcher_refused_kill_switch_and_watch_conf(container_factory, tun, env, tmp_path):
    conf = tmp_path / "etc" / "watch.conf"
    conf.parent.mkdir()
    env["LXCFIX_WATCH_CONF"] = str(conf)
    c = container_factory([TUN_MOUNT])
    before = Path(c.config_path).read_bytes()
    conf.write_text(f"# plain LXC containers lxcfix watch repairs\nheal = {c.name}\n")
    w = Watch(env)
    try:
        w.wait_for(r"^watching: ")
        r = lxcfix(env, "watch", "--once")
        assert r.returncode == 2 and "another lxcfix watch is running" in r.stderr, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1
    finally:
        assert w.stop() == 0, "\n".join(w.lines)
    assert any(f"CT {c.name}: LXF100: repaired live" in l and "(watch.conf)" in l for l in w.lines), w.lines
    # the kill switch: a pass does nothing while the file exists
    Path(c.config_path).write_bytes(before)
    c.restart()
    (conf.parent / "watch.disabled").touch()
    r = lxcfix(env, "watch", "--once")
    assert r.returncode == 0 and "skipped: kill switch" in r.stdout, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == before
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    (conf.parent / "watch.disabled").unlink()
    r = lxcfix(env, "watch", "--once")
    assert r.returncode == 0 and f"CT {c.name}: LXF100: repaired live" in r.stdout, r.stdout + r.stderr
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    # a watch.conf line that is not one: one line, exit 2, nothing done
    conf.write_text("heal = ok\nrestart everything\n")
    r = lxcfix(env, "watch", "--once")
    assert r.returncode == 2 and "watch.conf:2: not 'heal = CT'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("step,state", [("backed-up", "the old one"), ("changed-live", "the new one")])
def test_sigkill_mid_repair_then_next_start_rolls_back_and_repairs(container_factory, tun, env, tmp_path,
                                                                   step, state):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    pause = tmp_path / "pause"
    w = Watch(env, "--once", "--heal", c.name, pause=(step, str(pause)))
    try:
        deadline = 60
        t = time.monotonic()
        while not pause.exists():
            assert time.monotonic() - t < deadline and w.proc.poll() is None, "\n".join(w.lines)
            time.sleep(0.02)
    finally:
        w.kill()
    run = [e for e in _journal(env) if e.get("by") == "watch"]
    assert run and run[-1]["event"] == ("backup" if step == "backed-up" else "written")
    now = Path(c.config_path).read_bytes()
    assert now == old if step == "backed-up" else b"/dev/net/tun rwm" in now
    r = lxcfix(env, "watch", "--once", "--heal", c.name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"CT {c.name}: a repair was interrupted (lxcfix watch was killed); its config is {state}" in r.stdout
    assert f"CT {c.name}: LXF100: repaired live (verified)" in r.stdout
    closed = [e for e in _journal(env) if e.get("recovered")]
    assert closed and closed[-1]["tx"] == run[0]["tx"] and closed[-1]["config"] == state.split()[1]
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    # the next start finds nothing unfinished
    r = lxcfix(env, "watch", "--once", "--heal", c.name)
    assert f"CT {c.name}:" not in r.stdout, r.stdout


def test_container_deleted_while_its_repair_runs(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    pause = tmp_path / "pause"
    w = Watch(env, "--once", "--heal", c.name, pause=("planned", str(pause)))
    t = time.monotonic()
    while not pause.exists():
        assert time.monotonic() - t < 60 and w.proc.poll() is None, "\n".join(w.lines)
        time.sleep(0.02)
    c.destroy()
    pause.unlink()
    assert w.proc.wait(timeout=60) == 0, "\n".join(w.lines)
    w.drain(0.5)
    assert any(f"CT {c.name}: gone (deleted while it was checked)" in l for l in w.lines), w.lines
    assert not Path(c.config_path).exists()
    assert not any(e.get("ct") == c.name and e["event"] == "written" for e in _journal(env))


def test_two_events_during_one_pass_make_one_more_pass(container_factory, tun, env, tmp_path):
    name = harness.new_name()
    pause = tmp_path / "pause"
    w = Watch(env, "--heal", name, pause=("changed-live", str(pause)))
    try:
        w.wait_for(r"^pass 1: ")
        c = container_factory([TUN_MOUNT], name=name)
        kernel_change()
        t = time.monotonic()
        while not pause.exists():
            assert time.monotonic() - t < 60, "\n".join(w.lines)
            time.sleep(0.02)
        kernel_change()
        kernel_change()
        pause.unlink()
        w.wait_for(rf"^CT {name}: LXF100: repaired live")
        w.wait_for(r"^pass 2: ")
        w.wait_for(r"^pass 3: .*\(tun; 2 events\)")
        w.drain(1.0)
        assert not any(l.startswith("pass 4:") for l in w.lines), w.lines
        assert harness.open_errno(c, "/dev/net/tun") == "ok"
    finally:
        assert w.stop() == 0, "\n".join(w.lines)


def test_a_tenant_cannot_make_the_watcher_act_on_another_container(container_factory, tun, env, tmp_path):
    """What a tenant can cause: nodes in its own /dev (not the host's: no inotify event), a
    write to /sys/.../uevent (sys:mixed is read-only: refused), a uevent sent from user space
    (not the kernel's: dropped). None makes the watcher act on the opted-in neighbour."""
    victim_name = harness.new_name()
    w = Watch(env, "--heal", victim_name)
    try:
        w.wait_for(r"^pass 1: ")
        tenant = container_factory([])  # privileged, LXC's common.conf: mknod allowed in its own /dev
        victim = container_factory([TUN_MOUNT], name=victim_name)
        before = Path(victim.config_path).read_bytes()
        r = tenant.attach(["/usr/bin/mknod", "-m", "666", "/dev/nvidia-uvm", "c", "195", "0"])
        assert r.ok, r.stderr
        r = tenant.attach(["/bin/sh", "-c", "echo change > /sys/class/misc/tun/uevent"])
        assert not r.ok
        forged_uevent(TUN_CHANGE)  # the worst case: a process in the host's network namespace
        w.drain(1.5)
        assert not any(l.startswith(("event:", "pass 2:")) for l in w.lines), w.lines
        assert Path(victim.config_path).read_bytes() == before
        assert harness.open_errno(victim, "/dev/net/tun") == "EPERM"
        kernel_change()  # the watcher was listening all along: the kernel's own event is acted on
        w.wait_for(rf"^CT {victim_name}: LXF100: repaired live")
    finally:
        assert w.stop() == 0, "\n".join(w.lines)


def test_install_writes_a_verified_hardened_unit_through_the_transaction(env, tmp_path):
    """`lxcfix watch --install` into a tree's etc/systemd/system: the real systemd-analyze
    verifies it, the real `systemctl --root` enables it, the journal has every step; the
    second run has nothing to do."""
    units = tmp_path / "root" / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    env["LXCFIX_SYSTEMD_DIR"] = str(units)
    r = lxcfix(env, "watch", "--install", "--dry-run", "--heal", "200")
    assert r.returncode == 0 and "systemd-analyze verify" in r.stdout and not (units / "lxcfix-watch.service").exists()
    r = lxcfix(env, "watch", "--install", "--yes", "--heal", "200", "--metrics-file", str(tmp_path / "m" / "w.prom"))
    assert r.returncode == 0 and "lxcfix-watch.service: enabled" in r.stdout, r.stdout + r.stderr
    text = (units / "lxcfix-watch.service").read_text()
    assert f"-m lxcfix watch --heal 200 --metrics-file {tmp_path}/m/w.prom\n" in text
    assert "ProtectSystem=strict\n" in text and "NoNewPrivileges=yes\n" in text
    assert (units / "multi-user.target.wants" / "lxcfix-watch.service").is_symlink()
    assert [e["event"] for e in _journal(env)] == ["host-unit-backup", "host-unit-written", "host-unit-verify",
                                                   "host-unit-command", "host-unit-done"]
    assert {e["unit"] for e in _journal(env)} == {"lxcfix-watch.service"}
    r = lxcfix(env, "watch", "--install", "--yes", "--heal", "200", "--metrics-file", str(tmp_path / "m" / "w.prom"))
    assert r.returncode == 0 and "nothing-to-do" in r.stdout, r.stdout + r.stderr
    r = lxcfix(env, "watch", "--install", "--yes", "--heal", "two words")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def test_a_repair_that_fails_twice_is_left_alone(container_factory, tun, env, tmp_path):
    """No repair loop: lxc-cgroup refuses (a stand-in first on PATH), each repair is rolled
    back; after the second failure in a row the container is left alone, said once."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "lxc-cgroup").write_text("#!/bin/sh\necho 'lxc-cgroup: refused by the test' >&2\nexit 1\n")
    (shim / "lxc-cgroup").chmod(0o755)
    env["PATH"] = f"{shim}:{env['PATH']}"
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    w = Watch(env, "--heal", c.name, "--interval", "0")
    try:
        w.wait_for(rf"^CT {c.name}: LXF100: repair failed after .*lxc-cgroup: refused by the test")
        kernel_change()
        w.wait_for(rf"^CT {c.name}: LXF100: repair failed .*; left alone from now on \(2 failures in a row\)")
        for _ in range(2):
            start = len(w.lines)
            kernel_change()
            w.wait_for(r"^pass \d+: ", start=start)
    finally:
        code = w.stop()
    assert code == 0, "\n".join(w.lines)  # the service stops cleanly: its lines and metrics say what failed
    mine = [l for l in w.lines if l.startswith(f"CT {c.name}:")]
    assert len([l for l in mine if "repair failed" in l]) == 2
    assert len([l for l in mine if "left alone: 2 repairs failed in a row" in l]) == 1, mine
    assert Path(c.config_path).read_bytes() == old
    ends = [e["event"] for e in _journal(env) if e.get("by") == "watch" and e["event"] in ("done", "rolled-back")]
    assert ends == ["rolled-back", "rolled-back"]
    r = lxcfix(env, "watch", "--once", "--heal", c.name)  # a cron run: a failed repair is exit 1
    assert r.returncode == 1 and f"CT {c.name}: LXF100: repair failed" in r.stdout, r.stdout + r.stderr
