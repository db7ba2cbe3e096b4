"""diagnose / apply / rollback on real LXC containers with real cgroup v2 BPF
device filtering, driven through the command line as an admin would.

Each test asserts a BPF device program is attached, so a silently ignored
rule can never pass.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from . import harness
from .cli import TUN_MOUNT, codes, diagnose, lxcfix, paused_apply


def test_tun_denied_then_repaired(container_factory, tun, env):
    c = container_factory([TUN_MOUNT])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"

    doc = diagnose(env, c.name)
    assert {"LXF100", "LXF200"} <= set(codes(doc))
    f200 = next(f for f in doc["containers"][0]["findings"] if f["code"] == "LXF200")
    assert f200["device"] == "/dev/net/tun"
    assert any("running allowlist" in e for e in f200["evidence"])

    before_pid = c.init_pid()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.running() and c.bpf_attached() and c.init_pid() != before_pid
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    assert "/dev/net/tun rwm" in Path(c.config_path).read_text()  # auto style on LXC 5: path form

    backups = list((Path(env["LXCFIX_STATE_DIR"]) / "backups" / c.name).iterdir())
    assert len(backups) == 1 and backups[0].stat().st_mode & 0o777 == 0o600
    journal = [json.loads(l) for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()]
    assert [e["event"] for e in journal] == ["backup", "written", "done"]
    assert journal[-1]["step"] == "verified"

    again = lxcfix(env, "plan", "--ct", c.name)
    assert again.returncode == 0 and again.stdout == ""
    assert codes(diagnose(env, c.name)) == []


def test_driverless_dynamic_major_eperm_then_enxio(container_factory, uvm, env):
    node, major = uvm
    c = container_factory([f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"
    doc = diagnose(env, c.name)
    assert {"LXF100", "LXF200"} <= set(codes(doc))

    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"lxc.cgroup2.devices.allow = c {major}:* rwm" in Path(c.config_path).read_text()
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"  # the cgroup lets it through; no driver


def test_moved_major_is_moved_in_place(container_factory, uvm, env):
    node, major = uvm
    old = major - 1
    c = container_factory([f"lxc.cgroup2.devices.allow = c {old}:* rwm",
                           f"lxc.mount.entry = {node} dev/nvidia-uvm none bind,create=file 0 0"])
    assert c.bpf_attached()
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "EPERM"
    doc = diagnose(env, c.name)
    assert "LXF101" in codes(doc) and "LXF200" in codes(doc)
    msg = next(f["message"] for c_ in doc["containers"] for f in c_["findings"] if f["code"] == "LXF101")
    assert f"c {major}:0 on this host; the config allows c {old}:*" in msg

    r = lxcfix(env, "apply", "--ct", c.name, "--yes", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    text = Path(c.config_path).read_text()
    assert f"c {major}:* rwm" in text and f"c {old}:* rwm" not in text
    assert harness.open_errno(c, "/dev/nvidia-uvm") == "ENXIO"


def test_dry_run_and_non_terminal_change_nothing(container_factory, tun, env):
    c = container_factory([TUN_MOUNT])
    before = Path(c.config_path).read_bytes()
    r = lxcfix(env, "apply", "--ct", c.name, "--dry-run")
    assert r.returncode == 1 and "+lxc.cgroup2.devices.allow = /dev/net/tun rwm" in r.stdout
    assert "steps apply would take" in r.stdout
    r = lxcfix(env, "apply", "--ct", c.name)
    assert r.returncode == 2 and "no --yes" in r.stderr
    assert Path(c.config_path).read_bytes() == before
    assert not (Path(env["LXCFIX_STATE_DIR"]) / "backups").exists()


@pytest.mark.parametrize("step", ["locked", "backed-up", "temp-written", "written", "restarted"])
def test_sigkill_at_each_step_leaves_old_or_new_and_rollback_restores(container_factory, tun, env, tmp_path, step):
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    plan = lxcfix(env, "plan", "--ct", c.name)
    assert plan.returncode == 1
    proc = paused_apply(env, c.name, step, tmp_path / "pause")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    now = Path(c.config_path).read_bytes()
    if step in ("locked", "backed-up", "temp-written"):
        assert now == old
    else:
        assert now != old and b"/dev/net/tun rwm" in now
        assert now == old + b"lxc.cgroup2.devices.allow = /dev/net/tun rwm\n" or b"/dev/net/tun rwm" in now

    r = lxcfix(env, "rollback", "--ct", c.name)
    if step == "locked":
        assert r.returncode == 2 and "no backup" in r.stderr  # killed before the backup: nothing to undo
    else:
        assert r.returncode == 0, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == old
    # A later apply cleans up a temp file the killed one left, then works.
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not [p for p in Path(c.config_path).parent.iterdir() if p.name.endswith(".tmp")]
    assert harness.open_errno(c, "/dev/net/tun") == "ok"


def test_two_concurrent_applies_one_is_refused(container_factory, tun, env, tmp_path):
    c = container_factory([TUN_MOUNT])
    pause = tmp_path / "pause"
    first = paused_apply(env, c.name, "locked", pause)
    second = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert second.returncode == 2 and "holds" in second.stderr
    pause.unlink()  # let the first go on
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert harness.open_errno(c, "/dev/net/tun") == "ok"


# ---- the Proxmox backend, through the pct shim



def test_proxmox_tun_flow_through_pct(pve, tun, env):
    ct = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"])
    env.update(pve.env())
    assert ct.bpf_attached()
    assert harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    doc = diagnose(env, ct.vmid)
    assert {"LXF100", "LXF200"} <= set(codes(doc))
    r = lxcfix(env, "apply", "--ct", ct.vmid, "--yes", "--style", "numeric")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm" in Path(ct.conf_path).read_text()
    assert ct.bpf_attached()
    assert harness.open_errno(ct, "/dev/net/tun") == "ok"


def test_locked_proxmox_config_is_refused_untouched(pve, tun, env):
    ct = pve.make_ct(["lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"])
    env.update(pve.env())
    text = Path(ct.conf_path).read_text()
    Path(ct.conf_path).write_text("lock: backup\n" + text)
    before = Path(ct.conf_path).read_bytes()
    r = lxcfix(env, "apply", "--ct", ct.vmid, "--yes")
    assert r.returncode == 2 and "locked (backup)" in r.stderr
    assert Path(ct.conf_path).read_bytes() == before
    assert "LXF120" in codes(diagnose(env, ct.vmid))


def test_failed_start_rolls_back_and_runs_old_config(pve, env, tmp_path, monkeypatch):
    """devN style replaces the bind mount with `dev0:`; the node vanishes before the
    restart, so Proxmox refuses to start ("Device ... does not exist"): apply must
    restore the old config (whose mount is optional) and get the container running."""
    from lxcfix import repair
    from lxcfix.errors import ApplyFailed

    node, major, proc = harness.driverless_uvm(str(tmp_path))
    monkeypatch.setenv("LXCFIX_PROC_DEVICES", proc)
    for k, v in pve.env().items():
        monkeypatch.setenv(k, v)
    ct = pve.make_ct([f"lxc.mount.entry: {node} dev/nvidia-uvm none bind,optional,create=file"])
    assert ct.bpf_attached()
    old = Path(ct.conf_path).read_bytes()

    target = repair.open_target(None)
    rep, c = repair.one(target, ct.vmid, "devn", probe=True)
    assert "LXF200" in [f.code for f in c.findings]
    from lxcfix.transaction import Transaction

    # The node vanishes once the backup is taken, before the config is written.
    monkeypatch.setattr(Transaction, "on_checkpoint",
                        staticmethod(lambda name: os.unlink(node) if name == "backed-up" else None))
    with pytest.raises(ApplyFailed) as err:
        repair.apply_plan(target, c, rep.facts, "devn")
    assert "rolled back" in str(err.value) and err.value.exit_code == 4
    assert Path(ct.conf_path).read_bytes() == old
    assert ct.running() and ct.bpf_attached()
    events = [json.loads(l)["event"] for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()]
    assert events == ["backup", "written", "failed", "rolled-back"]


def test_rollback_goes_back_one_change_at_a_time_and_says_when_it_restarts(container_factory, tun, env):
    """apply, rollback, rollback again on a running container: the first rollback undoes the
    apply (named by its date) and restarts the container, saying so; the second finds nothing
    earlier and changes nothing (before, it re-applied the fix and restarted again); a stopped
    container is not started, and the rollback says that too."""
    c = container_factory([TUN_MOUNT])
    old = Path(c.config_path).read_bytes()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    fixed = Path(c.config_path).read_bytes()
    assert fixed != old and harness.open_errno(c, "/dev/net/tun") == "ok"
    (applied,) = [json.loads(l) for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()
                  if json.loads(l)["event"] == "backup"]

    pid = c.init_pid()
    r = lxcfix(env, "rollback", "--ct", c.name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path(c.config_path).read_bytes() == old
    day, clock = applied["time"][:10], applied["time"][11:19]
    assert r.stdout.startswith(f"CT {c.name}: undid lxcfix's change of {day} {clock} UTC: "
                               f"{c.config_path} restored from ")
    assert "removed 'lxc.cgroup2.devices.allow = /dev/net/tun rwm'" in r.stdout and "put back" not in r.stdout
    assert r.stdout.rstrip().endswith(f"CT {c.name} was running: restarted with the restored config")
    assert c.running() and c.init_pid() != pid and c.bpf_attached()
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"

    pid = c.init_pid()
    for _ in range(2):
        r = lxcfix(env, "rollback", "--ct", c.name)
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert f"CT {c.name}: nothing earlier to roll back" in r.stderr and "nothing changed" in r.stderr
        assert Path(c.config_path).read_bytes() == old
        assert c.init_pid() == pid and harness.open_errno(c, "/dev/net/tun") == "EPERM"  # not restarted

    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0 and Path(c.config_path).read_bytes() == fixed
    c.stop()
    r = lxcfix(env, "rollback", "--ct", c.name)
    assert r.returncode == 0 and Path(c.config_path).read_bytes() == old, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith(f"CT {c.name} is stopped: not started "
                                      "(the restored config applies at its next start)")
    assert not c.running()

    c.start()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0 and harness.open_errno(c, "/dev/net/tun") == "ok"
    pid = c.init_pid()
    r = lxcfix(env, "rollback", "--ct", c.name, "--no-restart")
    assert r.returncode == 0 and Path(c.config_path).read_bytes() == old, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith(f"CT {c.name} not restarted (--no-restart): it runs with its previous "
                                      "config until it restarts")
    assert c.init_pid() == pid and harness.open_errno(c, "/dev/net/tun") == "ok"


def test_a_stopped_container_is_never_verified(container_factory, tun, env):
    """An apply that probed nothing says what it checked and what not, never "verified": on a
    stopped container the config is written and re-parsed; with --no-restart it is written."""
    c = container_factory([TUN_MOUNT], start=False)
    assert not c.running()
    r = lxcfix(env, "apply", "--ct", c.name, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"CT {c.name}: applied (config re-parsed; not verified: CT {c.name} is stopped, nothing was "
            "probed); backup ") in r.stdout
    assert "verified" not in r.stdout.replace("not verified", "")
    journal = [json.loads(l) for l in (Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl").read_text().splitlines()]
    assert journal[-1]["event"] == "done" and journal[-1]["step"] == "checked"
    assert not c.running()  # a stopped container stays stopped
    c.start()  # what was written is right: it runs with the rule now
    assert c.bpf_attached() and harness.open_errno(c, "/dev/net/tun") == "ok"

    running = container_factory([TUN_MOUNT])
    assert running.bpf_attached()
    r = lxcfix(env, "apply", "--ct", running.name, "--yes", "--no-restart")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"CT {running.name}: applied (written; not verified: --no-restart, nothing was probed; CT "
            f"{running.name} gets the new config at its next start); backup ") in r.stdout
    assert "verified" not in r.stdout.replace("not verified", "")
    assert harness.open_errno(running, "/dev/net/tun") == "EPERM"  # indeed: it runs the old config
