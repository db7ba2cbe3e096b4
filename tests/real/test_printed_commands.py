"""Every command lxcfix prints runs as printed (issue 19).

The commands are collected from the human and the JSON output of `scan`,
`diagnose`, `plan` and `audit` (every occasion, and its markdown ticket): on the bundled snapshots
(examples/*, in a git copy of them, so "the checkout stays unchanged" is
`git status` clean) and on this host with real Proxmox containers behind the
pct shim (tests/real/bin/pct; their own /etc/pve, so only the test's
containers are seen). Each is run by bash as printed, `lxcfix` being this
checkout's, under a pseudo-terminal that answers the apply's question "y"
(what an admin pasting it does), with the test's environment. It must exit 0
(1 for a plan or a scan: changes pending, findings), and after a command
that changes something a re-scan has nothing left for the cause it was
printed for. A command for the host a snapshot came from (pct, dkms,
nvidia-modprobe: that host's to run) is listed, not run.

The list of commands collected, each with what became of it, is written to
$LXCFIX_PRINTED_COMMANDS (default: printed-commands.txt in the test's
tmp_path) and printed (`-s`).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import harness
from .cli import lxcfix

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("pve-gpu-host", "pve-kernel-upgrade", "lxc-healthy")
OCCASIONS = ("reboot", "driver-upgrade", "kernel-upgrade", "lxc-upgrade", "pve-upgrade")
PVE_TUN = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"
# The first word of a command line lxcfix prints (what follows `fix:`, or a line of a "run on the host:" block).
STARTS = ("lxcfix ", "snap=", "ssh ", "pct ", "dkms ", "nvidia-modprobe", "chmod ", "apt ", "apt-get ")
LXCFIX_COMMANDS = ("lxcfix ", "snap=", "ssh ")  # lxcfix's own (on a snapshot's copy, over ssh); the rest: the host's
NVIDIA_MODPROBE = "/usr/bin/nvidia-modprobe"
READS = ("scan", "diagnose", "plan", "audit", "facts", "explain")


# ----------------------------------------------------------------- collecting

def from_human(text: str) -> list[str]:
    """The command lines of lxcfix's human output: after `fix:`, the lines under it, the
    `(lxcfix plan ... shows the change first)` notes and the "run on the host:" blocks."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        s = s[len("fix:"):].strip() if s.startswith("fix:") else s
        m = re.fullmatch(r"\((lxcfix .*) shows the change first\)", s)
        if m:
            s = m.group(1)
        if s.startswith(STARTS):
            out.append(s)
    return out


def from_markdown(text: str) -> list[str]:
    """The commands of audit's change ticket: its ```sh blocks, and "(or `lxcfix apply ...`, which ...)"."""
    out, block = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            block = line == "```sh"
            continue
        if block and line.strip() and not line.startswith("#"):
            out.append(line.strip())
        out += re.findall(r"\(or `([^`]+)`, which makes this change", line)
    return out


def from_json(doc: dict) -> list[tuple[str, str, str]]:
    """(command, ct, cause id) of a scan's, diagnose's or audit's JSON document."""
    out = []
    for c in doc.get("containers", []):
        for cause in c.get("causes", []):  # scan, diagnose
            out += [(cmd, c["ct"], cause["id"]) for cmd in cause["commands"]]
        for item in c.get("findings", []):  # audit's items
            out += [(cmd, c["ct"], item.get("cause", "")) for cmd in item.get("commands", [])]
    return out


class Collected:
    """Every command, once, with where it was printed and what it was printed for."""

    def __init__(self):
        self.sources: dict[str, list[str]] = {}
        self.causes: dict[str, set[tuple[str, str]]] = {}
        self.outcome: dict[str, str] = {}

    def human(self, source: str, text: str) -> None:
        for cmd in from_human(text):
            self.sources.setdefault(cmd, []).append(source)

    def markdown(self, source: str, text: str) -> None:
        for cmd in from_markdown(text):
            self.sources.setdefault(cmd, []).append(source + " --format markdown")

    def json(self, source: str, text: str) -> None:
        for cmd, ct, cause in from_json(json.loads(text)):
            self.sources.setdefault(cmd, []).append(source + " --json")
            self.causes.setdefault(cmd, set()).add((ct, cause))

    def report(self, path: Path) -> str:
        lines = []
        for cmd, where in self.sources.items():
            lines.append(f"{cmd}\n    printed by: {', '.join(dict.fromkeys(where))}\n"
                         f"    {self.outcome.get(cmd, 'not run')}")
        text = "\n".join(lines) + "\n"
        path.write_text(text)
        return text


def outputs(run, collected: Collected, label: str, cts: list[str], root: list[str]) -> None:
    """scan, diagnose and plan of each container, audit for every occasion: human and JSON."""
    for json_flag in ((), ("--json",)):
        r = run("scan", *root, *json_flag)
        assert r.returncode in (0, 1), r.stdout + r.stderr
        (collected.json if json_flag else collected.human)(f"{label}: lxcfix scan", r.stdout)
        for occasion in OCCASIONS:
            r = run("audit", *root, "--for", occasion, *json_flag)
            assert r.returncode in (0, 1), r.stdout + r.stderr
            (collected.json if json_flag else collected.human)(f"{label}: lxcfix audit --for {occasion}", r.stdout)
        for ct in cts:
            r = run("diagnose", *root, "--ct", ct, *json_flag)
            assert r.returncode in (0, 1), r.stdout + r.stderr
            (collected.json if json_flag else collected.human)(f"{label}: lxcfix diagnose --ct {ct}", r.stdout)
    for occasion in OCCASIONS:
        r = run("audit", *root, "--for", occasion, "--format", "markdown")
        assert r.returncode in (0, 1), r.stdout + r.stderr
        collected.markdown(f"{label}: lxcfix audit --for {occasion}", r.stdout)
    for ct in cts:
        r = run("plan", *root, "--ct", ct)
        assert r.returncode in (0, 1), r.stdout + r.stderr
        collected.human(f"{label}: lxcfix plan --ct {ct}", r.stdout)


# ----------------------------------------------------------------- running, as printed

def lxcfix_bin(tmp_path: Path) -> str:
    """A directory whose `lxcfix` is this checkout's (the one under test), first on PATH."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    exe = d / "lxcfix"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "
                   "-m lxcfix \"$@\"\n")
    exe.chmod(0o755)
    return str(d)


def paste(command: str, cwd: Path, env: dict, tmp_path: Path, timeout: float = 120) -> tuple[int, str, str]:
    """Run one printed line with bash, as pasted into a terminal: a pseudo-terminal for its
    input and output, "y" typed for a question. Returns (exit code, output, the $snap it made)."""
    snap_file = tmp_path / f"snap-{time.monotonic_ns()}"
    script = f"{command}\nrc=$?\nprintf %s \"${{snap-}}\" > {shlex.quote(str(snap_file))}\nexit $rc\n"
    master, slave = pty.openpty()
    p = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True)
    os.close(slave)
    os.write(master, b"y\n")
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed
                break
            if not data:
                break
            chunks.append(data)
        elif p.poll() is not None:
            break
    os.close(master)
    try:
        rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    snap = snap_file.read_text() if snap_file.exists() else ""
    return rc, b"".join(chunks).decode(errors="replace"), snap


def subcommand(command: str) -> str:
    """The lxcfix subcommand a printed line runs (the last `lxcfix X` in it)."""
    words = re.findall(r"lxcfix ([a-z-]+)", command)
    return words[-1] if words else ""


def causes_left(run, ct: str, root: list[str]) -> set[str]:
    r = run("diagnose", *root, "--ct", ct, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return {c["id"] for c in json.loads(r.stdout)["containers"][0]["causes"]}


def audit_left(run, root: list[str]) -> set[tuple[str, str]]:
    left = set()
    for occasion in OCCASIONS:
        r = run("audit", *root, "--for", occasion, "--json")
        assert r.returncode in (0, 1), r.stdout + r.stderr
        left |= {(c["ct"], i["cause"]) for c in json.loads(r.stdout)["containers"] for i in c["findings"]}
    return left


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def write_report(collected: Collected, tmp_path: Path, name: str) -> None:
    path = Path(os.environ.get("LXCFIX_PRINTED_COMMANDS", tmp_path / "printed-commands.txt"))
    if os.environ.get("LXCFIX_PRINTED_COMMANDS"):
        path = path.with_name(f"{path.stem}-{name}{path.suffix}")
    text = collected.report(path)
    print(f"\n--- commands lxcfix printed ({name}), and what each did ---\n{text}")


# ----------------------------------------------------------------- the bundled snapshots

def test_every_command_printed_for_the_bundled_snapshots_runs_and_leaves_the_checkout_unchanged(tmp_path, env):
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", checkout / "examples", symlinks=True)
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "examples")
    env = {**env, "PATH": lxcfix_bin(tmp_path) + os.pathsep + env["PATH"], "COLUMNS": "400", "TERM": "dumb"}

    def run(*args):
        return subprocess.run(["lxcfix", *args], cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    collected = Collected()
    for name in EXAMPLES:
        root = ["--root", f"examples/{name}"]
        doc = json.loads(run("scan", *root, "--json").stdout)
        cts = [c["ct"] for c in doc["containers"] if c["findings"]]
        outputs(run, collected, name, cts, root)
    assert collected.sources, "lxcfix printed no command for the bundled snapshots"
    assert not [c for c in collected.sources if "--root examples/" in c and subcommand(c) not in READS], \
        "a command that writes names the checkout's snapshot"

    for command in collected.sources:
        if not command.startswith(LXCFIX_COMMANDS):
            collected.outcome[command] = "not run: a command for the host the snapshot was taken from"
            continue
        rc, out, snap = paste(command, checkout, env, tmp_path)
        sub = subcommand(command)
        assert git(checkout, "status", "--porcelain") == "", f"{command} changed the checkout:\n{out}"
        if sub == "host-fix":
            # its check run agrees with it: the unit's nvidia-modprobe is the snapshot host's, which
            # systemd-analyze verify on this host (with or without the NVIDIA driver) does not decide
            crc, cout, _ = paste(command.replace(" --yes", " --dry-run"), checkout, env, tmp_path)
            assert crc == 1 and "host-fix would go ahead" in cout, f"{command} --dry-run\nexit {crc}\n{cout}"
            if not os.path.exists(NVIDIA_MODPROBE):
                assert f"not checked: whether {NVIDIA_MODPROBE} is executable" in out, out
        ok = (0, 1) if sub in ("scan", "plan", "audit", "diagnose") else (0,)
        assert rc in ok, f"{command}\nexit {rc}\n{out}"
        what = f"ran: exit {rc}"
        if sub not in READS:
            assert snap and Path(snap).is_dir(), f"{command}: no copy made\n{out}"
            root = ["--root", snap]
            cts = {ct for ct, _ in collected.causes.get(command, ())} or \
                set(re.findall(r"--ct (\S+)", command))
            for ct in cts:
                if sub == "apply":
                    left = causes_left(run, ct, root)
                    gone = {cause for c, cause in collected.causes.get(command, ()) if c == ct}
                    assert not (gone & left), f"{command}: still there in the copy: {gone & left}\n{out}"
            if sub == "host-fix":
                left = audit_left(run, root)
                assert not (collected.causes.get(command, set()) & left), f"{command}: still at risk\n{out}"
            what += f"; nothing left for its cause in the copy {snap}"
        collected.outcome[command] = what
    write_report(collected, tmp_path, "snapshots")


# ----------------------------------------------------------------- this host, real containers

def test_every_command_printed_for_real_containers_runs_and_fixes_its_cause(pve, tun, env, tmp_path):
    env.update(pve.env())
    env.update({"PATH": lxcfix_bin(tmp_path) + os.pathsep + env["PATH"], "COLUMNS": "400", "TERM": "dumb"})
    running = pve.make_ct([PVE_TUN])  # the cgroup denies /dev/net/tun: EPERM inside
    stopped = pve.make_ct([PVE_TUN], start=False)
    assert running.bpf_attached() and harness.open_errno(running, "/dev/net/tun") == "EPERM"
    originals = {ct.vmid: Path(ct.conf_path).read_bytes() for ct in (running, stopped)}

    def run(*args):
        return subprocess.run(["lxcfix", *args], env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, cwd=tmp_path)

    collected = Collected()
    outputs(run, collected, "this host", [running.vmid, stopped.vmid], [])
    assert collected.sources, "lxcfix printed no command for broken containers"

    for command in collected.sources:
        sub = subcommand(command)
        cts = {ct for ct, _ in collected.causes.get(command, ())} or set(re.findall(r"--ct (\S+)", command))
        assert command.startswith(LXCFIX_COMMANDS), f"unexpected host command for a tun denial: {command}"
        for ct in (running, stopped):  # every command starts from the broken containers
            if Path(ct.conf_path).read_bytes() != originals[ct.vmid]:
                was = ct.running()
                ct.stop()
                Path(ct.conf_path).write_bytes(originals[ct.vmid])
                if was or ct is running:
                    ct.start()
        before = {ct.vmid: causes_left(run, ct.vmid, []) for ct in (running, stopped)}
        rc, out, _ = paste(command, tmp_path, env, tmp_path)
        ok = (0, 1) if sub in ("scan", "plan", "audit", "diagnose") else (0,)
        assert rc in ok, f"{command}\nexit {rc}\n{out}"
        what = f"ran: exit {rc}"
        if sub not in READS:
            for vmid in cts:
                left = causes_left(run, vmid, [])
                gone = {cause for c, cause in collected.causes.get(command, ()) if c == vmid} or before[vmid]
                assert not (gone & left), f"{command}: still there: {gone & left}\n{out}"
            if running.vmid in cts:
                assert running.bpf_attached() and harness.open_errno(running, "/dev/net/tun") == "ok", command
            what += "; a re-scan has nothing left for its cause"
        else:
            assert {ct.vmid: Path(ct.conf_path).read_bytes() for ct in (running, stopped)} == originals, command
        collected.outcome[command] = what
    write_report(collected, tmp_path, "this-host")


# ----------------------------------------------------------------- a fleet host, over SSH

def test_every_command_printed_for_a_fleet_host_runs_from_here_and_fixes_its_cause(
        container_factory, tun, tmp_path):
    """The same, for a host reached through an inventory (a real sshd in front of this host's
    real containers, its own state dir): every command lxcfix prints for it runs from the control
    node as printed, through the inventory, and what changes is changed on that host by the agent."""
    from .sshd import Keys
    from .test_fleet_apply import Fleet

    running = container_factory([harness_tun_mount()])
    stopped = container_factory([harness_tun_mount()], start=False)
    assert harness.open_errno(running, "/dev/net/tun") == "EPERM"
    fleet = Fleet(tmp_path, Keys.make(tmp_path / "client"))
    try:
        fleet.add("hv1", [running, stopped])
        originals = {c.name: Path(c.config_path).read_bytes() for c in (running, stopped)}
        env = {**fleet.env(), "PATH": lxcfix_bin(tmp_path) + os.pathsep + fleet.env()["PATH"], "TERM": "dumb"}
        where = ["--inventory", str(fleet.inventory), "--host", "hv1"]

        def run(*args):
            return subprocess.run(["lxcfix", *args], env=env, capture_output=True, text=True, timeout=240,
                                  stdin=subprocess.DEVNULL, cwd=tmp_path)

        collected = Collected()
        outputs(run, collected, "fleet host hv1", [running.name, stopped.name], where)
        assert collected.sources, "lxcfix printed no command for a fleet host's broken containers"
        assert not [c for c in collected.sources if c.startswith("ssh ")], \
            "a fleet host's apply, plan or diagnose printed as ssh (it needs no lxcfix there)"

        for command in collected.sources:
            sub = subcommand(command)
            assert command.startswith("lxcfix ") and "--inventory" in command, command
            cts = {ct for ct, _ in collected.causes.get(command, ())} or set(re.findall(r"--ct (\S+)", command))
            for c in (running, stopped):  # every command starts from the broken containers
                if Path(c.config_path).read_bytes() != originals[c.name]:
                    was = c.running()
                    if was:
                        c.stop()
                    Path(c.config_path).write_bytes(originals[c.name])
                    if was or c is running:
                        c.start()
            before = {c.name: causes_left(run, c.name, where) for c in (running, stopped)}
            rc, out, _ = paste(command, tmp_path, env, tmp_path, timeout=240)
            ok = (0, 1) if sub in ("scan", "plan", "audit", "diagnose") else (0,)
            assert rc in ok, f"{command}\nexit {rc}\n{out}"
            what = f"ran: exit {rc}"
            if sub not in READS:
                for ct in cts:
                    left = causes_left(run, ct, where)
                    gone = {cause for c, cause in collected.causes.get(command, ()) if c == ct} or before[ct]
                    assert not (gone & left), f"{command}: still there: {gone & left}\n{out}"
                if running.name in cts:
                    assert harness.open_errno(running, "/dev/net/tun") == "ok", command
                assert fleet.journal("hv1"), f"{command}: no journal in the host's own state dir"
                what += "; a re-scan has nothing left for its cause (changed on the host by the agent)"
            else:
                assert {c.name: Path(c.config_path).read_bytes() for c in (running, stopped)} == originals, command
            collected.outcome[command] = what
        write_report(collected, tmp_path, "fleet-host")
    finally:
        fleet.stop()


def harness_tun_mount() -> str:
    from .cli import TUN_MOUNT

    return TUN_MOUNT


# ----------------------------------------------------------------- hostile names, pasted (issue 30)

# Names a tenant or a careless admin can give a node, a snippet, a snapshot: each would run
# `touch PWN` if lxcfix printed it unquoted.
HOSTILE = ("x$(touch${IFS}PWN)", "y`touch${IFS}PWN`", "z;touch${IFS}PWN;'\"é", "sp ace$(touch${IFS}PWN)")
# The commands a printed line may start with that act on the host: replaced by a stub that
# records its argv, so a pasted line changes nothing on this machine (rm of a /dev path).
STUBBED = ("rm", "rmdir", "chmod", "ls", "pct", "lxc-stop", "lxc-attach", "nvidia-modprobe", "nvidia-ctk", "dkms")
FIRST_WORDS = STUBBED + ("lxcfix", "snap=")


def hostile_snapshot(where: Path) -> str:
    """A Proxmox snapshot whose name, device paths and hookscript are hostile; returns its
    name (relative to `where`, as an admin passes it)."""
    name = "snap $(touch${IFS}PWN) é"
    root = where / name
    (root / "etc/pve/lxc").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "proc").mkdir()
    (root / "var/lib/vz/snippets").mkdir(parents=True)
    shutil.copy(REPO / "examples/pve-gpu-host/proc/devices", root / "proc/devices")
    lines = ["arch: amd64", "hookscript: local:snippets/h$(touch${IFS}PWN).sh",
             "lxc.cgroup2.devices.allow: c 10:200 rwm"]
    for i, node in enumerate(HOSTILE):
        lines.append(f"dev{i}: /dev/{node}")
        (root / "dev" / node).write_text("")  # a regular file where a node should be: LXF159's rm
    (root / "etc/pve/lxc/300.conf").write_text("\n".join(lines) + "\n")
    (root / "var/lib/vz/snippets/h$(touch${IFS}PWN).sh").write_text("#!/bin/sh\n")  # not executable
    return name


def printed_lines(text: str) -> list[str]:
    """Every command line in lxcfix's output: after `fix:`, a line of its own, or `quoted` in a sentence."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        s = s[len("fix:"):].strip() if s.startswith("fix:") else s
        m = re.fullmatch(r"\((lxcfix .*) shows the change first\)", s)
        s = m.group(1) if m else s
        if s.startswith(FIRST_WORDS):
            out.append(s)
        out += [q for q in re.findall(r"`([^`]+)`", line) if q.startswith(FIRST_WORDS) and " ID " not in q]
    return out


def test_every_printed_command_quotes_hostile_names_and_runs_as_printed(tmp_path, env):
    work = tmp_path / "work"
    work.mkdir()
    name = hostile_snapshot(work)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "argv.jsonl"
    for cmd in STUBBED:
        stub = stubs / cmd
        stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n")
        stub.chmod(0o755)
    env = {**env, "PATH": os.pathsep.join([str(stubs), lxcfix_bin(tmp_path), env["PATH"]]), "COLUMNS": "400",
           "TERM": "dumb"}

    def run(*args):
        return subprocess.run(["lxcfix", *args], cwd=work, env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    texts = []
    for args in (("scan",), ("scan", "--json"), ("diagnose", "--ct", "300"), ("diagnose", "--ct", "300", "--json"),
                 ("scan", "-v"), ("audit",), ("audit", "--json"), ("plan", "--ct", "300")):
        r = run(*args, "--root", name)
        assert r.returncode in (0, 1), f"{args}\n{r.stdout}{r.stderr}"
        assert not list(tmp_path.rglob("PWN")), f"lxcfix {args} itself ran a name"
        texts.append(r.stdout + r.stderr)
    commands = list(dict.fromkeys(c for t in texts for c in printed_lines(t)))
    for t in texts:
        if t.lstrip().startswith("{"):
            doc = json.loads(t)
            for c in doc.get("containers", []):
                for f in c.get("findings", []):
                    commands += [x for x in [*f.get("commands", []), *re.findall(r"`([^`]+)`", f.get("fix") or
                                                                                   f.get("change") or "")]
                                 if x.startswith(FIRST_WORDS) and x not in commands and " ID " not in x]
                for cause in c.get("causes", []):
                    commands += [x for x in cause["commands"] if x not in commands]
    # what a hostile name reaches: the rm of each node, the chmod of the snippet, the snapshot's copy
    assert {f"rm '/dev/{n}'" if "'" not in n else None for n in HOSTILE} - {None} <= set(commands), commands
    assert any(c.startswith("chmod 0755 ") and "PWN" in c for c in commands), commands
    assert any(c.startswith("snap=") for c in commands), commands

    for command in commands:
        log.write_text("")
        rc, out, _ = paste(command, work, env, tmp_path)
        assert not list(tmp_path.rglob("PWN")), f"pasting ran a name: {command}\n{out}"
        # nothing but the intended effect: each hostile value reached its command as one argument
        for line in log.read_text().splitlines():
            argv = json.loads(line)
            for arg in argv[1:]:
                if "PWN" in arg:
                    assert arg in {f"/dev/{n}" for n in HOSTILE} | {"/var/lib/vz/snippets/h$(touch${IFS}PWN).sh"}, \
                        (command, argv)
        if command.startswith("rm "):
            assert json.loads(log.read_text())[1:] in [[f"/dev/{n}"] for n in HOSTILE], command
        if command.startswith(("lxcfix ", "snap=")):
            ok = (0, 1) if subcommand(command) in ("scan", "plan", "audit", "diagnose") else (0,)
            assert rc in ok, f"{command}\nexit {rc}\n{out}"
    assert (work / name / "etc/pve/lxc/300.conf").read_text().count("PWN") == 5  # the snapshot unchanged
