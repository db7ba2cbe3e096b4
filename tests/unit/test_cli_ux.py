"""What an admin sees, tried as a new user would: the real command line in a subprocess,
its output read through a pipe (not a terminal), on a copy of a bundled snapshot.

- audit --ct: a container's diff shown once, however many findings one plan fixes;
- the markdown change ticket names when, which lxcfix, where, the command line and who;
- through a pipe, the refusal ("not a terminal and no --yes") comes after the diff;
- --color after the command (`lxcfix scan --color never`);
- plan says "nothing to do" (stderr: stdout stays the diff, empty);
- every command printed for a --root snapshot carries --root, quoted (-v too);
- an apply that probed nothing never says "verified";
- the README's walkthrough and `.ci/run --run` leave nothing in /tmp.
"""

from __future__ import annotations

import datetime
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lxcfix import __version__

from .conftest import EXAMPLES, REPO

TUN = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"


def lxcfix(*args: str, env: dict | None = None, merged: bool = False) -> subprocess.CompletedProcess:
    """`lxcfix ARGS` as a user runs it, stdin not a terminal; merged: stderr into stdout's pipe."""
    # PYTHONUNBUFFERED: an admin's shell has none (with it, stdout is never held back)
    e = {k: v for k, v in os.environ.items()
         if k not in ("NO_COLOR", "FORCE_COLOR", "SUDO_USER", "PYTHONUNBUFFERED")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "lxcfix", *args], env=e, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE)


def snapshot(tmp_path: Path, name: str = "pve-gpu-host") -> Path:
    snap = tmp_path / name
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    return snap


def two_causes(tmp_path: Path) -> Path:
    """CT 200 with a stale nvidia-uvm major (LXF101) and a tun mount with no rule (LXF100):
    two causes, one plan, one diff."""
    snap = snapshot(tmp_path, "two causes")
    conf = snap / "etc/pve/lxc/200.conf"
    text = conf.read_text()
    conf.write_text(text.replace("\n[before-driver-580]", TUN + "\n[before-driver-580]", 1))
    return snap


# ---- audit --ct: a container's diff once


@pytest.mark.parametrize("verbose", [(), ("-v",)])
def test_audit_of_one_container_shows_its_diff_once(tmp_path, verbose):
    snap = two_causes(tmp_path)
    r = lxcfix("audit", "--root", str(snap), "--ct", "200", *verbose)
    assert r.returncode == 1, r.stderr
    assert "LXF100" in r.stdout and "LXF101" in r.stdout and "CT 201" not in r.stdout
    for line in ("+ dev2: /dev/net/tun,mode=0666", "+ dev0: /dev/nvidia-uvm,mode=0666",
                 "- lxc.cgroup2.devices.allow: c 508:* rwm", "in /etc/pve/lxc/200.conf:"):
        assert r.stdout.count(line) == 1, (line, r.stdout)
    assert r.stdout.count("the change above") == 1
    if not verbose:
        assert r.stdout.count("lxcfix apply --ct 200") == 1


# ---- the change ticket


ISO_UTC = re.compile(r"- date \(UTC\): (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$", re.M)


@pytest.mark.parametrize("how", ["--format", "--markdown"])
def test_the_change_ticket_says_when_which_where_how_and_who(tmp_path, how):
    snap = snapshot(tmp_path, "my snap")  # a value a shell must quote
    out = tmp_path / "ticket.md"
    args = ["audit", "--root", str(snap), "--for", "reboot", *(("--format", "markdown") if how == "--format"
                                                                else ("--markdown", str(out)))]
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    r = lxcfix(*args, env={"SUDO_USER": "alice"})
    assert r.returncode == 1, r.stderr
    text = r.stdout if how == "--format" else out.read_text()
    head = text.split("\n## ", 1)[0]
    when = datetime.datetime.strptime(ISO_UTC.search(head).group(1), "%Y-%m-%dT%H:%M:%SZ")
    when = when.replace(tzinfo=datetime.timezone.utc)
    assert before <= when <= datetime.datetime.now(datetime.timezone.utc)
    assert f"- lxcfix version: {__version__}\n" in head
    assert f"- run on host: {socket.gethostname()}\n" in head
    assert f"- run by: alice (through sudo, as {pwd.getpwuid(os.getuid()).pw_name})\n" in head
    command = shlex.join(["lxcfix", *args])
    assert f"\n```\n{command}\n```\n" in head and "'" in command  # quoted as shlex.join quotes it


def test_the_ticket_names_the_user_without_sudo(tmp_path):
    r = lxcfix("audit", "--root", str(EXAMPLES / "pve-gpu-host"), "--format", "markdown")
    assert f"- run by: {pwd.getpwuid(os.getuid()).pw_name}\n" in r.stdout


# ---- through a pipe


def test_the_refusal_comes_after_the_diff_through_a_pipe(tmp_path):
    snap = snapshot(tmp_path)
    before = (snap / "etc/pve/lxc/200.conf").read_bytes()
    r = lxcfix("apply", "--root", str(snap), "--ct", "200", "--no-restart", merged=True)
    assert r.returncode == 2
    lines = r.stdout.splitlines()
    refusal = next(i for i, line in enumerate(lines) if "not a terminal and no --yes" in line)
    diff = [i for i, line in enumerate(lines) if line.startswith(("+", "-", "@@"))]
    assert diff and max(diff) < refusal == len(lines) - 1, r.stdout
    assert (snap / "etc/pve/lxc/200.conf").read_bytes() == before


# ---- --color after the command


def test_color_is_taken_after_the_command():
    root = str(EXAMPLES / "pve-gpu-host")
    never = lxcfix("scan", "--root", root, "--color", "never")
    always = lxcfix("scan", "--root", root, "--color=always")
    assert never.returncode == always.returncode == 1, never.stderr + always.stderr
    assert "\x1b[" not in never.stdout and "CT 200" in never.stdout
    assert "\x1b[" in always.stdout
    both = lxcfix("--color", "never", "scan", "--root", root, "--color", "always")
    assert both.returncode == 2 and both.stdout == ""
    assert "--color is given different values ('never', then 'always')" in both.stderr
    bare = lxcfix("scan", "--root", root, "--color")
    assert bare.returncode == 2 and bare.stderr.strip() == "lxcfix: error: --color needs a value: auto, always or never"


# ---- plan: nothing to do


def test_plan_says_nothing_to_do(tmp_path):
    snap = snapshot(tmp_path)
    assert lxcfix("apply", "--root", str(snap), "--ct", "200", "--no-restart", "--yes").returncode == 0
    for ct in ("200", "202"):
        r = lxcfix("plan", "--root", str(snap), "--ct", ct)
        assert r.returncode == 0 and r.stdout == ""  # stdout: the diff, and there is none
        assert r.stderr.splitlines()[-1] == f"CT {ct}: nothing to do"


# ---- --root in every command printed


LXCFIX_COMMAND = re.compile(r"lxcfix (plan|apply|diagnose|host-fix)\b")


@pytest.mark.parametrize("args", [("scan", "-v"), ("diagnose", "--ct", "200", "-v"), ("audit", "-v"),
                                  ("scan",), ("audit",)])
def test_every_command_printed_for_a_snapshot_carries_its_root(tmp_path, args):
    snap = snapshot(tmp_path, "my snap")
    r = lxcfix(args[0], "--root", str(snap), *args[1:])
    assert r.returncode == 1, r.stderr
    quoted = shlex.quote(str(snap))
    found = [line for line in r.stdout.splitlines() if LXCFIX_COMMAND.search(line)]
    assert found
    for line in found:
        assert len(LXCFIX_COMMAND.findall(line)) == line.count("--root "), line
        assert quoted in line, line


# ---- "verified" only when probed


def test_an_apply_to_a_snapshot_says_it_was_not_verified(tmp_path):
    snap = snapshot(tmp_path)
    one = lxcfix("apply", "--root", str(snap), "--ct", "200", "--no-restart", "--yes")
    assert one.returncode == 0, one.stderr
    assert "CT 200: applied (written; not verified: a snapshot, nothing was probed); backup " in one.stdout
    every = lxcfix("apply", "--root", str(snap), "--all", "--no-restart", "--yes")
    assert every.returncode == 0, every.stderr
    assert "CT 201: applied (written; not verified: a snapshot, nothing was probed)" in every.stdout
    for r in (one, every):
        assert "verified" not in r.stdout.replace("not verified", "")


# ---- nothing left in /tmp


def _in_private_tmp(script: str) -> subprocess.CompletedProcess:
    """script run in a private mount namespace with an empty tmpfs on /tmp: what it leaves
    there is what it made (other processes on the machine never show up)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare: a private /tmp")
    lxcfix_bin = Path(sys.executable).parent
    if not (lxcfix_bin / "lxcfix").exists():
        pytest.skip(f"no lxcfix script beside {sys.executable}")
    env = {**os.environ, "PATH": f"{lxcfix_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("LXCFIX_CI_LOGS", None)
    env.pop("TMPDIR", None)
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           "mount -t tmpfs -o mode=1777 none /tmp && cd \"$0\" && " + script + "; rc=$?; "
                           "echo '--- left in /tmp:'; ls -A /tmp; exit $rc", str(REPO)],
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_readme_walkthrough_leaves_nothing_in_tmp():
    r = _in_private_tmp('walk=$(bash .ci/run --run readme_block 2) && sh -c "$walk" 2>&1')
    out, left = r.stdout.split("--- left in /tmp:\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.splitlines()[-1] == "CT 200: nothing to do"  # its last plan: what .ci/run checks
    assert left == "", left


def test_a_ci_stage_run_alone_leaves_no_log_dir():
    r = _in_private_tmp("bash .ci/run --run readme_block 1 && bash .ci/run --run install_line 'pipx uninstall'")
    out, left = r.stdout.split("--- left in /tmp:\n")
    assert r.returncode == 0, r.stdout + r.stderr
    first, second, remove = out.splitlines()  # the quick start's first block, Install's remove command
    assert first.startswith("apt install ") and second.startswith(".ci/run ") and "pipx uninstall lxcfix" in remove
    assert left == "", left


def test_the_quick_start_says_what_its_second_command_does():
    qs = (REPO / "README.md").read_text().split("## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = qs.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2 and block[0].startswith("apt install") and block[1].startswith(".ci/run ")
    assert "15-30 minutes" in block[1] and "production hypervisor" in block[1]


# ---- the pure parts


def test_a_command_line_with_backticks_stays_inside_its_fence():
    from lxcfix import audit, causes, repair

    rep = repair.scan(repair.open_target(str(EXAMPLES / "lxc-healthy")), None, keep_context=True)
    command = shlex.join(["lxcfix", "audit", "--root", "a ```\n## b", "--ct", "``````"])
    made = audit.Provenance("2026-12-03T11:40:00Z", "pve1", command, "alice")
    md = audit.to_markdown(audit.audit([rep], "reboot"), reach={rep.host: causes.LOCAL}, made=made)
    fence = "`" * 7  # one more than the longest run of backticks in the line
    assert f"\n{fence}\n{command}\n{fence}\n" in md
    outside = md.replace(f"{fence}\n{command}\n{fence}", "")
    assert outside.count("\n## ") == 2 and "## b" not in outside  # Hosts, How to verify; "## b" is the value's


def test_reach_makes_the_commands_in_a_fixs_prose_reach_the_host():
    from lxcfix import causes

    snap = causes.Reach(root="/srv/my snap")
    assert snap.within("move the rule (lxcfix plan --ct 200); then `lxcfix host-fix --yes`") == (
        "move the rule (lxcfix plan --root '/srv/my snap' --ct 200); then `snap=$(mktemp -d)/'my snap' && "
        "cp -r '/srv/my snap' \"$snap\" && lxcfix host-fix --root \"$snap\" --yes`")
    assert causes.LOCAL.within("lxcfix plans it (lxcfix plan --ct 200)") == "lxcfix plans it (lxcfix plan --ct 200)"
    assert snap.within("lxcfix plans it") == "lxcfix plans it"  # a word, not the command


def test_applied_says_verified_only_when_probed():
    from lxcfix.outcome import applied_message

    assert applied_message("200", "verified", "/b") == "CT 200: applied (verified); backup /b"
    assert applied_message("200", "checked", "/b", "CT 200 is stopped, nothing was probed") == (
        "CT 200: applied (config re-parsed; not verified: CT 200 is stopped, nothing was probed); backup /b")
    assert applied_message("200", "written", "/b") == "CT 200: applied (written; not verified: nothing was probed); backup /b"
