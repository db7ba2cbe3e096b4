"""The Ansible collection against real LXC containers: ansible-playbook connects
over SSH (an sshd on 127.0.0.1, tests/real/ansible_host.py) to this machine as
its "hypervisor", and the modules run there with lxcfix as a library. Proxmox
containers go through the pct shim (tests/real/bin/pct), as in test_repair.py.

Every test asserts a BPF device program is attached, so a silently ignored rule
can never pass; "changes nothing" is checked on the config's bytes, the init
PID and the running device program (bpftool's dump of it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collection_support import ansible_tool, missing_reason

from . import harness
from .ansible_host import AnsibleHypervisor
from .cli import TUN_MOUNT

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

PVE_TUN = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"
EXAMPLE = "lxcfix.lxcfix.pre_maintenance"
SCAN_TASK = "Scan the containers, probing the running ones"
WOULD_TASK = "What a fix would change (check mode; --diff shows each config's diff)"
FIX_TASK = ("Fix every container whose plan changes something (backup, write, restart or live, verify; "
            "rolled back on failure)")


@pytest.fixture
def hypervisor(tmp_path, env):
    """This machine over SSH, the module's environment pointing at the test's state, lock and pve dirs."""
    keep = ("LXCFIX_STATE_DIR", "LXCFIX_LOCK_DIR", "LXCFIX_PVE_DIR", "LXCFIX_PROC_DEVICES", "PCT_SHIM_SNIPPETS")
    interp_env = {k: env[k] for k in keep if k in env}
    interp_env["PATH"] = env["PATH"]  # the pct shim first, when the test uses it
    hv = AnsibleHypervisor.start(tmp_path / "hv", interp_env)
    try:
        yield hv
    finally:
        hv.stop()


def untouched(ct) -> tuple:
    """What check mode must leave exactly as it was."""
    return Path(ct.conf_path if hasattr(ct, "conf_path") else ct.config_path).read_bytes(), ct.init_pid(), ct.bpf_dump()


def journal(env) -> list[str]:
    path = Path(env["LXCFIX_STATE_DIR"]) / "journal.jsonl"
    return [json.loads(l)["event"] for l in path.read_text().splitlines()] if path.exists() else []


def test_example_playbook_audits_in_check_mode_then_fixes_with_serial(pve, tun, env, hypervisor):
    env.update(pve.env())
    broken = pve.make_ct([PVE_TUN])
    fine = pve.make_ct([])
    assert broken.bpf_attached() and harness.open_errno(broken, "/dev/net/tun") == "EPERM"
    before, fine_before = untouched(broken), untouched(fine)
    inv = hypervisor.inventory()
    # The hypervisor needs the pct shim and the test's pve dir: the interpreter carries them.
    hv = hypervisor.play

    audit = hv.run(EXAMPLE, inv, "--tags", "audit", "--diff")
    assert audit.rc == 0, audit.output()
    scan = audit.task(SCAN_TASK)
    assert {"LXF100", "LXF200"} <= {f["code"] for f in scan["findings"] if f["ct"] == broken.vmid}
    assert scan["pending"] == [broken.vmid]
    # results name the inventory's host; a one-container scan leaves the host's device nodes out
    assert {c["host"] for c in scan["containers"]} == {"hv"} and [h["host"] for h in scan["hosts"]] == ["hv"]
    assert "device_nodes" not in scan["hosts"][0]["facts"] and len(json.dumps(scan["hosts"])) < 4000
    would = audit.task(WOULD_TASK)
    # the audit is read-only: its check-mode task never counts as changed (it used to: changed True);
    # what a fix would change is in its containers and its diff
    assert would["changed"] is False and [c["ct"] for c in would["containers"] if c["changed"]] == [broken.vmid]
    assert [d["before_header"] for d in would["diff"]] == [broken.conf_path]
    assert "/dev/net/tun" in would["diff"][0]["after"].replace(would["diff"][0]["before"], "")
    # Ansible shows a task's diff only when it changed: the audit play prints each would-be diff itself
    shown = [line for line in would["containers"][0]["diff"].splitlines() if line.startswith(("+", "-"))]
    assert shown and all(line in audit.stdout for line in shown), audit.output()
    assert not audit.results(FIX_TASK)  # --tags audit: the fix play did not run
    assert "changed=0" in audit.stdout.split("PLAY RECAP")[-1]

    whole_check = hv.run(EXAMPLE, inv, "--check", "--diff")
    assert whole_check.rc == 0, whole_check.output()
    assert whole_check.task(FIX_TASK)["changed"] is True and whole_check.task(FIX_TASK)["verified"] is False
    assert untouched(broken) == before and untouched(fine) == fine_before
    assert harness.open_errno(broken, "/dev/net/tun") == "EPERM"
    assert journal(env) == [] and not (Path(env["LXCFIX_STATE_DIR"]) / "backups").exists()

    real = hv.run(EXAMPLE, inv, "--diff", "-e", "lxcfix_serial=1")
    assert real.rc == 0, real.output()
    fixed = real.task(FIX_TASK)
    assert fixed["changed"] is True and fixed["verified"] is True and fixed["restart_required"] is False
    assert [c["ct"] for c in fixed["containers"]] == [broken.vmid]
    assert fixed["containers"][0]["restarted"] is True and fixed["containers"][0]["step_reached"] == "verified"
    assert Path(fixed["backup_file"]).read_bytes() == before[0]
    assert broken.bpf_attached() and broken.init_pid() != before[1]
    assert harness.open_errno(broken, "/dev/net/tun") == "ok"
    assert untouched(fine) == fine_before
    assert journal(env) == ["backup", "written", "done"]

    again = hv.run(EXAMPLE, inv)
    assert again.rc == 0, again.output()
    assert again.task(FIX_TASK)["changed"] is False and again.task(SCAN_TASK)["pending"] == []
    # the rerun reports the verified state it found: nothing to do, and the containers check clean
    assert again.task(FIX_TASK)["verified"] is True and again.task(FIX_TASK)["host"] == "hv"
    assert "changed=0" in again.stdout.split("PLAY RECAP")[-1]


def test_failure_after_the_write_rolls_back_and_fails_the_task(pve, tun, env, tmp_path, monkeypatch):
    """The fixed config cannot start (a hookscript refuses any config that grants a device, as a
    site's own hook might): the write happened, the restart fails, the old config comes back."""
    snippets = tmp_path / "snippets"
    snippets.mkdir()
    hook = snippets / "refuse-devices.sh"
    hook.write_text("#!/bin/sh\n[ \"$2\" = pre-start ] || exit 0\n"
                    f"if grep -qE '^(lxc\\.cgroup2\\.devices\\.allow|dev[0-9]+):' '{pve.conf_dir}'/\"$1\".conf; then\n"
                    "  echo 'site hook: no device grants here' >&2; exit 1\nfi\n")
    hook.chmod(0o755)
    monkeypatch.setenv("PCT_SHIM_SNIPPETS", str(snippets))
    env.update(pve.env())
    ct = pve.make_ct(["hookscript: local:snippets/refuse-devices.sh", PVE_TUN])
    assert ct.bpf_attached() and harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    keep = ("LXCFIX_STATE_DIR", "LXCFIX_LOCK_DIR", "LXCFIX_PVE_DIR", "PCT_SHIM_SNIPPETS", "PATH")
    hv = AnsibleHypervisor.start(tmp_path / "hv", {k: env[k] for k in keep})
    try:
        old = Path(ct.conf_path).read_bytes()
        run = hv.play.run("fix.yml", hv.inventory(), "-e", f"fix_ct={ct.vmid}")
    finally:
        hv.stop()
    assert run.rc == 2, run.output()  # ansible-playbook: a task failed
    fix = run.task("Fix")
    assert fix["_status"] == "failed" and fix["exit_code"] == 4 and fix["rolled_back"] is True
    assert fix["msg"].startswith("lxcfix: ") and "rolled back" in fix["msg"]
    assert f"hookscript error for {ct.vmid} on pre-start" in fix["msg"]
    assert Path(ct.conf_path).read_bytes() == old
    assert ct.running() and ct.bpf_attached() and harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    assert journal(env) == ["backup", "written", "failed", "rolled-back"]


def test_live_fix_in_check_mode_then_in_place(container_factory, tun, env, hypervisor):
    c = container_factory([TUN_MOUNT])
    assert c.bpf_attached() and harness.open_errno(c, "/dev/net/tun") == "EPERM"
    before = untouched(c)
    inv = hypervisor.inventory()
    args = ("-e", json.dumps({"fix_ct": [c.name], "fix_live": True}))

    check = hypervisor.play.run("fix.yml", inv, "--check", "--diff", *args)
    assert check.rc == 0, check.output()
    would = check.task("Fix")
    assert would["changed"] is True and would["diff"][0]["before_header"] == c.config_path
    steps = would["containers"][0]["steps"]
    assert any("lxc-cgroup devices.allow" in s for s in steps) and not any(s.startswith("restart") for s in steps)
    assert would["containers"][0]["restarted"] is False
    assert untouched(c) == before and harness.open_errno(c, "/dev/net/tun") == "EPERM"

    real = hypervisor.play.run("fix.yml", inv, *args)
    assert real.rc == 0, real.output()
    done = real.task("Fix")
    assert done["changed"] is True and done["verified"] is True
    assert done["containers"][0]["step_reached"] == "verified"
    assert c.init_pid() == before[1]  # no restart
    assert c.bpf_attached() and c.bpf_dump() != before[2]
    assert harness.open_errno(c, "/dev/net/tun") == "ok"

    again = hypervisor.play.run("fix.yml", inv, *args)
    assert again.rc == 0 and again.task("Fix")["changed"] is False, again.output()


def test_ansible_inventory_list_piped_into_scan_inventory_stdin(container_factory, tun, env, hypervisor, tmp_path):
    """Any inventory Ansible reads: `ansible-inventory --list` (here of an INI file, which lxcfix's
    YAML reader cannot read) piped into `lxcfix scan --inventory -`, which scans over SSH."""
    c = container_factory([TUN_MOUNT])
    assert c.bpf_attached()
    ini = tmp_path / "hosts.ini"
    ini.write_text("[hypervisors]\n"
                   f"hv ansible_host=127.0.0.1 ansible_port={hypervisor.port} ansible_user=root "
                   f"ansible_ssh_private_key_file={hypervisor.client_key}\n"
                   "[hypervisors:vars]\nlxcfix_backend=lxc\n"
                   f"lxcfix_known_hosts={hypervisor.known_hosts}\nlxcfix_python=/opt/pipx/venvs/lxcfix/bin/python\n"
                   f"lxcfix_containers=['{c.name}']\n")
    listed = subprocess.run([ansible_tool("ansible-inventory"), "-i", str(ini), "--list"], capture_output=True,
                            text=True, env=hypervisor.play.env(tmp_path / "unused"), cwd=tmp_path, timeout=120)
    assert listed.returncode == 0, listed.stderr
    scan = subprocess.run([sys.executable, "-m", "lxcfix", "scan", "--inventory", "-", "--json"],
                          input=listed.stdout, capture_output=True, text=True, env=env, timeout=120)
    assert scan.returncode == 1, scan.stdout + scan.stderr  # findings
    doc = json.loads(scan.stdout)
    assert [h["host"] for h in doc["hosts"]] == ["hv"] and doc["hosts"][0]["error"] is None
    assert [x["ct"] for x in doc["containers"]] == [c.name]
    assert {"LXF100", "LXF200"} <= {f["code"] for f in doc["containers"][0]["findings"]}


def test_example_playbook_keeps_to_the_inventorys_lxcfix_containers(pve, tun, env, hypervisor):
    """A host scoped to one container (lxcfix_containers, as `lxcfix apply --all --inventory` reads
    it): the playbook audits and fixes that one; another broken container on the same host is not
    listed, not changed and not restarted, in check mode or for real."""
    env.update(pve.env())
    inside = pve.make_ct([PVE_TUN])
    outside = pve.make_ct([PVE_TUN])  # just as broken: only the scope keeps the playbook off it
    for ct in (inside, outside):
        assert ct.bpf_attached() and harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    inside_before, outside_before = untouched(inside), untouched(outside)
    inv = hypervisor.inventory(lxcfix_containers=[int(inside.vmid)])  # a vmid as YAML/JSON writes it
    hv = hypervisor.play

    audit = hv.run(EXAMPLE, inv, "--tags", "audit", "--diff")
    assert audit.rc == 0, audit.output()
    scan = audit.task(SCAN_TASK)
    assert [c["ct"] for c in scan["containers"]] == [inside.vmid] and scan["pending"] == [inside.vmid]
    assert {f["ct"] for f in scan["findings"]} == {inside.vmid}
    would = audit.task(WOULD_TASK)
    assert [c["ct"] for c in would["containers"]] == [inside.vmid]
    assert [d["before_header"] for d in would["diff"]] == [inside.conf_path]
    assert outside.vmid not in audit.stdout.replace(inside.vmid, "")  # not named anywhere in the audit

    check = hv.run(EXAMPLE, inv, "--check", "--diff")
    assert check.rc == 0, check.output()
    assert [c["ct"] for c in check.task(FIX_TASK)["containers"]] == [inside.vmid]
    assert untouched(inside) == inside_before and untouched(outside) == outside_before

    real = hv.run(EXAMPLE, inv, "--diff")
    assert real.rc == 0, real.output()
    fixed = real.task(FIX_TASK)
    assert [c["ct"] for c in fixed["containers"]] == [inside.vmid] and fixed["verified"] is True
    assert inside.init_pid() != inside_before[1] and harness.open_errno(inside, "/dev/net/tun") == "ok"
    assert untouched(outside) == outside_before and outside.bpf_attached()
    assert harness.open_errno(outside, "/dev/net/tun") == "EPERM"
    assert journal(env) == ["backup", "written", "done"]

    # a task naming a container outside the scope fails before anything is read or changed
    named = hv.run("fix.yml", inv, "-e", json.dumps({"fix_ct": [outside.vmid]}))
    assert named.rc == 2, named.output()
    fail = named.task("Fix")
    assert fail["_status"] == "failed" and fail["exit_code"] == 2 and fail["containers"] == []
    assert fail["msg"] == (f"lxcfix: {outside.vmid} is outside this host's lxcfix_containers ({inside.vmid}): "
                           "nothing done")
    assert untouched(outside) == outside_before and journal(env) == ["backup", "written", "done"]
