"""apply --live: fix a running container without restarting it (real LXC,
real cgroup v2 BPF device programs). Each test checks the init PID did not
change and that the decoded running allowlist matches the config afterwards."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import harness
from .cli import TUN_MOUNT, codes, diagnose, lxcfix, paused_apply


def test_tun_fixed_live(container_factory, tun, env):
    c = container_factory([TUN_MOUNT])
    assert c.bpf_attached()
    pid = c.init_pid()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    doc = diagnose(env, c.name)
    assert all(f["live_fixable"] for f in doc["containers"][0]["findings"] if f["code"] in ("LXF100", "LXF200"))

    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.init_pid() == pid  # no restart
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    assert "/dev/net/tun rwm" in Path(c.config_path).read_text()
    assert codes(diagnose(env, c.name)) == []  # no LXF121: the running program equals the config
    assert c.bpf_attached()


def test_driverless_major_live_eperm_then_enxio(container_factory, uvm, env):
    node, major = uvm
    c = container_factory([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"])
    pid = c.init_pid()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.init_pid() == pid
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"
    assert "LXF121" not in codes(diagnose(env, c.name))


def test_missing_node_is_created_live(container_factory, tun, env):
    c = container_factory(["lxc.cgroup2.devices.allow = c 10:200 rwm"])
    pid = c.init_pid()
    assert harness.open_errno(c, "/dev/net/tun") == "ENOENT"
    assert "LXF110" in codes(diagnose(env, c.name))
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live", "--dry-run")
    assert "lxc-device add /dev/net/tun" in r.stdout
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.init_pid() == pid
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    assert "lxc.mount.entry = /dev/net/tun dev/net/tun" in Path(c.config_path).read_text()
    assert codes(diagnose(env, c.name)) == []


def test_container_stopping_during_live_apply_restores_old_config(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    pause = tmp_path / "pause"
    proc = paused_apply(env, c.name, "written", pause, "--live")
    c.stop()
    pause.unlink()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, out + err
    assert "STOPPED" in err and "restored" in err
    assert Path(c.config_path).read_bytes() == old
    events = [json.loads(l)["event"] for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()]
    assert events == ["backup", "written", "failed", "rolled-back"]


def test_live_refuses_what_only_a_start_can_do(pve, tun, env):
    """devN conversion removes a bind mount: only a start does that."""
    ct = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"])
    env.update(pve.env())
    before = Path(ct.conf_path).read_bytes()
    r = lxcfix(env, "apply", "--ct", ct.vmid, "--yes", "--live", "--style", "devn")
    assert r.returncode == 2 and "--live cannot do this change" in r.stderr
    assert Path(ct.conf_path).read_bytes() == before


def test_stopped_container_live_is_refused(container_factory, tun, env):
    c = container_factory([TUN_MOUNT], start=False)
    before = Path(c.config_path).read_bytes()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--live")
    assert r.returncode == 2 and "not running" in r.stderr
    assert Path(c.config_path).read_bytes() == before


def test_proxmox_live_through_pct(pve, tun, env):
    ct = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"])
    env.update(pve.env())
    pid = ct.init_pid()
    assert harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    r = lxcfix(env, "apply", "--ct", ct.vmid, "--yes", "--live", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ct.init_pid() == pid
    assert harness.open_errno(ct, "/dev/net/tun") == "ok"
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm" in Path(ct.conf_path).read_text()
    assert "LXF121" not in codes(diagnose(env, ct.vmid))


def test_lxf121_when_changed_live_by_hand(container_factory, tun, env):
    c = container_factory([TUN_MOUNT])
    subprocess.run(["lxc-cgroup", "-n", c.name, "devices.allow", "c 10:200 rwm"], check=True, capture_output=True)
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    doc = diagnose(env, c.name)
    f = next(f for f in doc["containers"][0]["findings"] if f["code"] == "LXF121")
    assert any("running, not in the config: c 10:200 rwm" in e for e in f["evidence"])
