"""lxcfix as a Proxmox hookscript, called the way Proxmox calls it: the pct shim
generates /var/lib/lxc/<vmid>/config, runs `<snippet> <vmid> pre-start`
(non-zero aborts the start), starts, then runs `<snippet> <vmid> post-start`.

The moved major is simulated: a driverless node (free dynamic major M)
bind-mounted as dev/nvidia-uvm, a /proc/devices text naming M nvidia-uvm, and a
config that still pins M-1. Each start that succeeds is checked for an attached
BPF device program, so a silently ignored rule cannot pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lxcfix import hook

from . import harness


@pytest.fixture
def env(tmp_path, monkeypatch):
    """lxcfix's state and lock dirs, and the shim's snippets dir, in tmp_path."""
    for key, sub in (("LXCFIX_STATE_DIR", "state"), ("LXCFIX_LOCK_DIR", "lock"), ("PCT_SHIM_SNIPPETS", "snippets")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(key, str(tmp_path / sub))
    return tmp_path


@pytest.fixture
def moved(tmp_path, monkeypatch):
    """(node, M): a driverless node with major M, which /proc/devices (as lxcfix reads it) names nvidia-uvm."""
    node, major, proc = harness.driverless_uvm(str(tmp_path))
    monkeypatch.setenv("LXCFIX_PROC_DEVICES", proc)
    return node, major


def install_snippet(env: Path, mode: str, *extra: str) -> Path:
    """The packaged snippet, running this checkout's lxcfix with this interpreter."""
    path = env / "snippets" / "lxcfix-hook.sh"
    path.write_text(hook.snippet(mode, [sys.executable, "-m", "lxcfix", "hook", *extra]))
    path.chmod(0o755)
    return path


def pinned_ct(pve, node, major, *extra_lines, start=False, hooked=True):
    return pve.make_ct(["hookscript: local:snippets/lxcfix-hook.sh"] * hooked +
                       [f"lxc.cgroup2.devices.allow: c {major - 1}:* rwm",
                        f"lxc.mount.entry: {node} dev/nvidia-uvm none bind,create=file",
                        *extra_lines], start=start)


def journal(env: Path) -> list[dict]:
    path = env / "state" / "journal.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def generated(ct) -> str:
    return Path(ct.config_path).read_text()


def test_fail_mode_refuses_the_start_and_changes_nothing(pve, env, moved):
    node, major = moved
    install_snippet(env, "fail")
    ct = pinned_ct(pve, node, major)
    before = Path(ct.conf_path).read_bytes()

    r = pve.pct("start", ct.vmid, timeout=60)
    assert r.rc != 0
    assert f"hookscript error for {ct.vmid} on pre-start" in r.stderr
    assert f"Run: lxcfix apply --ct {ct.vmid}" in r.stderr and "LXF101" in r.stderr
    assert not ct.running()
    assert Path(ct.conf_path).read_bytes() == before
    assert f"c {major - 1}:* rwm" in generated(ct)  # the generated config is left as Proxmox wrote it
    assert not (env / "state" / "backups").exists()
    (event,) = [e for e in journal(env) if e["event"] == "hook-pre-start"]
    assert (event["decision"], event["codes"], event["ct"]) == ("blocked", ["LXF101"], ct.vmid)


@pytest.mark.parametrize("style", ["numeric", "auto"])
def test_heal_mode_fixes_both_configs_and_the_container_starts(pve, env, moved, style):
    node, major = moved
    install_snippet(env, "heal", "--style", style)
    ct = pinned_ct(pve, node, major)
    before = Path(ct.conf_path).read_bytes()

    r = pve.pct("start", ct.vmid, timeout=90)
    assert r.rc == 0, r.stdout + r.stderr
    assert f"CT {ct.vmid}: healed LXF101" in r.stdout + r.stderr
    # Persisted for the next starts, and applied to the config this start used.
    want_pve, want_gen = ((f"lxc.cgroup2.devices.allow: c {major}:* rwm", f"lxc.cgroup2.devices.allow = c {major}:* rwm")
                          if style == "numeric" else
                          (f"lxc.cgroup2.devices.allow: {node} rwm", f"lxc.cgroup2.devices.allow = {node} rwm"))
    conf = Path(ct.conf_path).read_text()
    assert want_pve in conf and f"c {major - 1}:* rwm" not in conf
    assert want_gen in generated(ct) and f"c {major - 1}:*" not in generated(ct)
    # The container runs with the fix: the cgroup lets the node through, no driver answers.
    assert ct.running() and ct.bpf_attached()
    assert harness.open_errno(ct, "/dev/nvidia-uvm") == "ENXIO"

    backups = list((env / "state" / "backups" / ct.vmid).iterdir())
    assert len(backups) == 1 and backups[0].read_bytes() == before
    events = journal(env)
    assert [e["event"] for e in events] == ["backup", "written", "done", "hook-heal-generated",
                                            "hook-pre-start", "hook-post-start"]
    pre = events[4]
    assert (pre["decision"], pre["codes"], pre["mode"]) == ("healed", ["LXF101"], "heal")
    post = events[5]
    assert post["ct"] == ct.vmid and post["status"] == "running"
    assert post["errors"] == [] and "LXF200" not in post["codes"]  # the probe inside saw ENXIO, not EPERM

    # The next start needs nothing: the hook passes, no new backup.
    ct.stop()
    r = pve.pct("start", ct.vmid, timeout=90)
    assert r.rc == 0, r.stderr
    assert ct.bpf_attached() and harness.open_errno(ct, "/dev/nvidia-uvm") == "ENXIO"
    assert [e["decision"] for e in journal(env) if e["event"] == "hook-pre-start"] == ["healed", "ok"]
    assert len(list((env / "state" / "backups" / ct.vmid).iterdir())) == 1


def test_heal_mode_refuses_what_a_config_change_cannot_fix(pve, env, moved):
    """A node missing on the host (LXF112) is not healed by editing configs: nothing changes."""
    node, major = moved
    install_snippet(env, "heal")
    absent = f"/dev/lxcfix-absent-{harness.RUN_ID}"
    assert not os.path.exists(absent)
    ct = pinned_ct(pve, node, major, f"lxc.mount.entry: {absent} dev/absent none bind,optional,create=file")
    before = Path(ct.conf_path).read_bytes()
    r = pve.pct("start", ct.vmid, timeout=60)
    assert r.rc != 0 and "cannot heal LXF112" in r.stderr, r.stderr
    assert Path(ct.conf_path).read_bytes() == before and not ct.running()
    assert not (env / "state" / "backups").exists()
    assert [e["decision"] for e in journal(env) if e["event"] == "hook-pre-start"] == ["heal-failed"]


def test_heal_failure_restores_both_configs(pve, env, moved, monkeypatch):
    """The generated config cannot be written: the Proxmox config, already healed, is
    restored, and the hook exits 4 (the start is refused)."""
    node, major = moved
    ct = pinned_ct(pve, node, major, start=True, hooked=False)  # a plain start writes the generated config
    assert ct.bpf_attached() and harness.open_errno(ct, "/dev/nvidia-uvm") == "EPERM"
    ct.stop()
    before, gen_before = Path(ct.conf_path).read_bytes(), Path(ct.config_path).read_bytes()

    real = hook.write_atomic
    calls = []

    def broken_once(path, data, flavor, **kw):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(path, data, flavor, **kw)

    monkeypatch.setattr(hook, "write_atomic", broken_once)
    result = hook.run_hook(ct.vmid, "pre-start", "heal", style="numeric")
    assert result.exit_code == 4 and result.action == "heal-failed", result
    assert "both configs are restored" in result.message
    assert Path(ct.conf_path).read_bytes() == before
    assert Path(ct.config_path).read_bytes() == gen_before
    events = [e["event"] for e in journal(env)]
    assert events == ["backup", "written", "done", "hook-heal-rolled-back", "hook-pre-start"]


def test_post_start_never_fails_and_records_the_probe(pve, env, moved):
    """Called after a start the hook did not check: the probe sees EPERM, the
    journal says so, the exit is still 0."""
    node, major = moved
    ct = pinned_ct(pve, node, major, start=True, hooked=False)
    assert ct.bpf_attached()
    result = hook.run_hook(ct.vmid, "post-start", "fail")
    assert result.exit_code == 0
    (event,) = [e for e in journal(env) if e["event"] == "hook-post-start"]
    assert "LXF200" in event["errors"] and "/dev/nvidia-uvm" in event["devices"]
    assert hook.run_hook(ct.vmid, "pre-stop", "fail").exit_code == 0
    assert hook.run_hook(ct.vmid, "post-stop", "heal").exit_code == 0


def test_heal_runs_nvidia_modprobe_as_a_journaled_step(pve, env, moved, tmp_path, monkeypatch):
    """/dev/nvidia-uvm missing on the host (LXF112): heal runs nvidia-modprobe first, as a step
    of the transaction engine (journaled with its argv and rc); a modprobe that creates nothing
    leaves LXF112, so the start is refused and nothing else changes."""
    node, major = moved
    modprobe = tmp_path / "nvidia-modprobe"
    modprobe.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/modprobe.log\nexit 0\n")
    modprobe.chmod(0o755)
    monkeypatch.setenv("LXCFIX_NVIDIA_MODPROBE", str(modprobe))
    install_snippet(env, "heal")
    assert not os.path.exists("/dev/nvidia-uvm")
    ct = pve.make_ct(["hookscript: local:snippets/lxcfix-hook.sh",
                      "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"],
                     start=False)
    before = Path(ct.conf_path).read_bytes()

    r = pve.pct("start", ct.vmid, timeout=60)

    assert r.rc != 0 and "cannot heal LXF112" in r.stderr, r.stderr
    assert (tmp_path / "modprobe.log").read_text() == "-u -c0\n"
    (ran,) = [e for e in journal(env) if e["event"] == "hook-nvidia-modprobe-command"]
    assert (ran["argv"], ran["rc"], ran["ct"]) == ([str(modprobe), "-u", "-c0"], 0, ct.vmid)
    assert Path(ct.conf_path).read_bytes() == before and not ct.running()


# ---------------------------------------------------------------- the snippet as Proxmox runs it

# What Proxmox gives a hookscript (cited in tests/real/bin/pct, hook_env): pve-guest-common
# PVE::GuestHelpers::exec_hookscript runs [script, vmid, phase] through pve-common
# PVE::Tools::run_command = PVE::Cmd::run (open3: stdin a pipe closed at once; LC_ALL=C,
# LVM_SUPPRESS_FD_WARNINGS=1), from PVE::LXC::vm_start (pre-start, post-start) and PVE::LXC::vm_stop
# (pre-stop) in the task worker of `pct` (PVE::CLIHandler::run_cli_handler: PATH=/sbin:/bin:/usr/sbin:/usr/bin)
# or of pvedaemon/the HA agents (PVE::Daemon: the same PATH; cwd /); post-stop from
# src/lxc-pve-poststop-hook (LXC's hook in pve-container@.service: systemd's PATH, LXC_* variables).
PROXMOX_ENV = {"PATH": "/sbin:/bin:/usr/sbin:/usr/bin", "LC_ALL": "C", "LVM_SUPPRESS_FD_WARNINGS": "1"}


def pipx_install(tmp_path: Path) -> Path:
    """lxcfix installed as the README's pipx install does it: a bin dir on no PATH Proxmox uses
    (pipx's PIPX_BIN_DIR=/usr/local/bin) holding a link to the venv's console script; here, the
    console script pip made beside this interpreter (`pip install -e .` of this checkout)."""
    script = Path(sys.executable).parent / "lxcfix"
    if not os.access(script, os.X_OK):
        pytest.skip(f"no lxcfix console script beside {sys.executable}: pip install -e .")
    where = subprocess.run([sys.executable, "-c", "import lxcfix; print(lxcfix.__file__)"], env={}, cwd="/",
                           capture_output=True, text=True, timeout=60).stdout.strip()
    here = str(Path(__file__).resolve().parents[2])
    if not where.startswith(here + os.sep):
        pytest.skip(f"{script} runs another checkout's lxcfix ({where}): pip install -e {here}")
    bin_dir = tmp_path / "pipx-bin"
    bin_dir.mkdir()
    (bin_dir / "lxcfix").symlink_to(script)
    return bin_dir / "lxcfix"


def as_proxmox(snippet: Path, vmid: str, phase: str):
    """The snippet run as exec_hookscript runs it: env -i with Proxmox's PATH and LC_ALL, cwd /,
    `<script> <vmid> <phase>`; plus only lxcfix's test variables (its /etc/pve, state, /proc/devices)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("LXCFIX_")}
    env.update(PROXMOX_ENV)
    return harness.sh(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "sh", "-c",
                       'cd / && exec "$0" "$@" </dev/null', str(snippet), vmid, phase], timeout=90)


def test_the_printed_snippet_checks_with_proxmoxs_path_in_every_phase(pve, env, moved, tmp_path):
    """`lxcfix hook --print-snippet` from an admin's shell (lxcfix found on its PATH, in a pipx bin
    dir Proxmox's PATH lacks) gives a snippet that runs that lxcfix by its absolute path: with
    Proxmox's environment the pre-start check refuses a stale major, the fixed config starts and
    post-start probes it, pre-stop and post-stop pass; without the install it says so and lets go."""
    node, major = moved
    lxcfix = pipx_install(tmp_path)
    snippet = env / "snippets" / "lxcfix-hook.sh"
    admin = {"PATH": f"{lxcfix.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    r = harness.sh(["sh", "-c", f'lxcfix hook --print-snippet --mode fail > "$1" && chmod +x "$1"', "sh",
                    str(snippet)], env=admin)
    assert r.ok, r.stderr
    ct = pinned_ct(pve, node, major)

    blocked = as_proxmox(snippet, ct.vmid, "pre-start")
    assert blocked.rc == 1 and "not installed" not in blocked.stderr, blocked.stdout + blocked.stderr
    assert f"CT {ct.vmid} must not start" in blocked.stderr and f"Run: lxcfix apply --ct {ct.vmid}" in blocked.stderr
    r = pve.pct("start", ct.vmid, timeout=60)  # the shim runs it the same way (hook_env)
    assert r.rc != 0 and f"hookscript error for {ct.vmid} on pre-start" in r.stderr and "LXF101" in r.stderr
    assert not ct.running()
    assert f'\nexec {lxcfix} hook --mode fail "$@"\n' in snippet.read_text()  # by its path: no PATH needed

    ct.write_conf(ct.conf_text().replace(f"c {major - 1}:* rwm", f"c {major}:* rwm"))
    r = pve.pct("start", ct.vmid, timeout=90)  # pre-start passes, post-start probes inside
    assert r.rc == 0, r.stderr
    assert f"lxcfix: CT {ct.vmid}: device rules match this host" in r.stdout
    assert ct.running() and ct.bpf_attached() and harness.open_errno(ct, "/dev/nvidia-uvm") == "ENXIO"
    for phase in ("pre-start", "post-start"):
        r = as_proxmox(snippet, ct.vmid, phase)
        assert r.rc == 0 and r.stderr == "", (phase, r.stdout, r.stderr)
    pre = [e for e in journal(env) if e["event"] == "hook-pre-start"]
    assert [(e["decision"], e["ct"]) for e in pre] == [("blocked", ct.vmid)] * 2 + [("ok", ct.vmid)] * 2
    post = [e for e in journal(env) if e["event"] == "hook-post-start"]
    assert len(post) == 2 and all(e["status"] == "running" and e["errors"] == [] for e in post)
    for phase in ("pre-stop", "post-stop"):
        r = as_proxmox(snippet, ct.vmid, phase)
        assert (r.rc, r.stdout, r.stderr) == (0, "", ""), phase
    ct.stop()  # the shim runs pre-stop and post-stop too
    assert not ct.running() and len(journal(env)) == 6  # both stop phases check nothing, record nothing

    lxcfix.unlink()  # a node without lxcfix (a restore, a migration): say so, let the start go on
    r = pve.pct("start", ct.vmid, timeout=60)
    assert r.rc == 0 and ct.running(), r.stderr
    r = as_proxmox(snippet, ct.vmid, "pre-start")
    assert r.rc == 0 and r.stderr.startswith(f"lxcfix hook: {lxcfix} is not installed on "), r.stderr
    assert r.stderr.rstrip().endswith(f"; not checking CT {ct.vmid}")
