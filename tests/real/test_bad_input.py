"""Issue 15, row 15: bad input, through the real command line (a subprocess), as an admin
or a hostile snapshot, inventory or host would give it. Every case must end with exit 2
(bad input) or 3 (unreachable, facts that cannot be used, a disk lxcfix cannot write), one
line on stderr (`lxcfix: error: ...`, no traceback, no "internal error", no raw escape
byte), and nothing changed on disk: every file under the case's sandbox (snapshot, state
dir, inventory) is byte for byte, mode for mode, link for link what it was.

Each case builds its sandbox under tmp_path and returns the arguments. The list has 79
cases (the issue's count); the ones the issue named are marked "issue:".
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from . import harness

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BIG = "9" * 5000


@dataclass
class Sandbox:
    dir: Path

    @property
    def pve(self) -> Path:
        """examples/pve-gpu-host copied (CT 200 has fixes to plan)."""
        p = self.dir / "pve"
        if not p.exists():
            shutil.copytree(EXAMPLES / "pve-gpu-host", p)
        return p

    @property
    def lxc(self) -> Path:
        """examples/lxc-healthy copied (CTs web and vpn)."""
        p = self.dir / "lxc"
        if not p.exists():
            shutil.copytree(EXAMPLES / "lxc-healthy", p)
        return p

    def pve_conf(self, extra: str, head: bytes | None = None) -> list[str]:
        """CT 200 of the pve snapshot with `extra` lines added; `plan` arguments."""
        conf = self.pve / "etc/pve/lxc/200.conf"
        text = conf.read_bytes()
        main, sep, rest = text.partition(b"\n[")
        conf.write_bytes((head or b"") + main + b"\n" + extra.encode("utf-8", "surrogateescape") + b"\n" + sep[:1]
                         + (b"[" + rest if sep else b""))
        return ["plan", "--root", str(self.pve), "--ct", "200"]

    def lxc_conf(self, extra: str) -> list[str]:
        conf = self.lxc / "var/lib/lxc/web/config"
        with open(conf, "ab") as f:
            f.write(extra.encode("utf-8", "surrogateescape") + b"\n")
        return ["plan", "--root", str(self.lxc), "--ct", "web"]

    def replace_config(self, make: Callable[[Path], None]) -> list[str]:
        conf = self.lxc / "var/lib/lxc/web/config"
        conf.unlink()
        make(conf)
        return ["plan", "--root", str(self.lxc), "--ct", "web"]

    def proc_devices(self, make: Callable[[Path], None]) -> list[str]:
        p = self.pve / "proc/devices"
        p.unlink()
        make(p)
        return ["scan", "--root", str(self.pve)]

    def inventory(self, text: str | bytes, name: str = "inv.yaml") -> list[str]:
        p = self.dir / "inv" / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(text.encode() if isinstance(text, str) else text)
        return ["scan", "--inventory", str(p)]

    def file(self, name: str, data: bytes = b"x") -> Path:
        p = self.dir / name
        p.write_bytes(data)
        return p


def _append(path: Path, data: str) -> None:
    with open(path, "a") as f:
        f.write(data)


def _symlink_to(target: str):
    return lambda p: os.symlink(target, p)


def _sparse(size: int):
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _random(p: Path) -> None:
    p.write_bytes(hashlib.sha512(b"lxcfix").digest() * 64 + bytes(range(256)))


def _nested(depth: int) -> str:
    """Groups each the only child of the one before, `depth` deep."""
    return "all:\n  children:\n" + "".join("  " * (2 * i + 2) + f"g{i}:\n" + "  " * (2 * i + 3) + "children:\n"
                                           for i in range(depth)) + "  " * (2 * depth + 2) + "h1:\n"


def _deep_yaml(depth: int) -> str:
    return "all: " + "[" * depth + "]" * depth + "\n"


def _bomb() -> str:
    """Billion laughs: ten lists of nine aliases of the one before (9**10 leaves)."""
    lines = ["all:", "  vars:", '    x0: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"    x{i}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines += ["  hosts:", "    h1: {lxcfix_containers: *j}"]
    return "\n".join(lines) + "\n"


class SilentListener:
    """A TCP listener on 127.0.0.1 that accepts and never says a word (no SSH banner)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self.stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


LISTENERS: list[SilentListener] = []


def _silent(sb: Sandbox) -> list[str]:
    lis = SilentListener()
    LISTENERS.append(lis)
    cfg = sb.file("ssh_config", b"Host *\n  ConnectTimeout 2\n")
    return [*sb.inventory(f"all:\n  hosts:\n    quiet:\n      ansible_host: 127.0.0.1\n      ansible_port: {lis.port}\n"),
            "--ssh-config", str(cfg), "--known-hosts", str(sb.file("known_hosts", b""))]


# (id, build(sandbox) -> argv, expected exit). Ids say what is wrong.
CASES: list[tuple[str, Callable[[Sandbox], list[str]], int]] = [
    # ---- the command line
    ("unknown option with rich markup [/]  (issue: MarkupError traceback)", lambda s: ["scan", "--root", str(s.lxc), "--x[/]"], 2),
    ("unknown command", lambda s: ["frobnicate"], 2),
    ("extra argument", lambda s: ["facts", "--root", str(s.lxc), "surplus"], 2),
    ("--format with markup", lambda s: ["scan", "--root", str(s.lxc), "--format", "[bold]x[/bold]"], 2),
    ("--concurrency 0", lambda s: ["scan", "--root", str(s.lxc), "--concurrency", "0"], 2),
    ("--concurrency ²", lambda s: ["scan", "--root", str(s.lxc), "--concurrency", "²"], 2),
    ("--concurrency of 5,000 digits", lambda s: ["scan", "--root", str(s.lxc), "--concurrency", BIG], 2),
    ("--style unknown", lambda s: ["scan", "--root", str(s.lxc), "--style", "fancy"], 2),
    ("plan without --ct", lambda s: ["plan", "--root", str(s.lxc)], 2),
    ("--ct empty", lambda s: ["plan", "--root", str(s.lxc), "--ct", ""], 2),
    ("--ct ../web", lambda s: ["plan", "--root", str(s.lxc), "--ct", "../web"], 2),
    ("--ct with escape sequences", lambda s: ["plan", "--root", str(s.lxc), "--ct", "\x1b[2J\x1b]52;c;eA==\x07"], 2),
    ("--ct of 5,000 characters", lambda s: ["plan", "--root", str(s.lxc), "--ct", "a" * 5000], 2),
    ("--ct ² (Proxmox)", lambda s: ["plan", "--root", str(s.pve), "--ct", "2²0"], 2),
    ("--ct that does not exist", lambda s: ["plan", "--root", str(s.lxc), "--ct", "nosuch"], 2),
    ("--root missing", lambda s: ["scan", "--root", str(s.dir / "nowhere")], 2),
    ("--root a file", lambda s: ["scan", "--root", str(s.file("a-file"))], 2),
    ("--root no snapshot", lambda s: ["scan", "--root", str(s.dir)], 2),
    ("--root with etc/pve a file", lambda s: (s.dir.joinpath("odd/etc").mkdir(parents=True),
                                              s.dir.joinpath("odd/etc/pve").write_text("x"),
                                              ["scan", "--root", str(s.dir / "odd")])[-1], 2),
    ("--root and --inventory", lambda s: ["scan", "--root", str(s.lxc), "--inventory", str(s.file("i.yaml"))], 2),
    ("--host remote without an inventory", lambda s: ["scan", "--host", "pve9"], 2),
    ("apply --root without --no-restart", lambda s: ["apply", "--root", str(s.pve), "--ct", "200", "--yes"], 2),
    ("apply --root --live", lambda s: ["apply", "--root", str(s.pve), "--ct", "200", "--live", "--no-restart"], 2),
    ("apply off a terminal without --yes", lambda s: ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart"], 2),
    ("audit --for tomorrow", lambda s: ["audit", "--root", str(s.pve), "--for", "tomorrow"], 2),
    ("audit --format xml", lambda s: ["audit", "--root", str(s.pve), "--format", "xml"], 2),
    ("audit --markdown into a missing dir", lambda s: ["audit", "--root", str(s.pve), "--markdown",
                                                        str(s.dir / "no/such/dir/t.md")], 2),
    ("audit --markdown a directory", lambda s: ["audit", "--root", str(s.pve), "--markdown", str(s.dir)], 2),
    ("host-fix --nvidia-modprobe relative", lambda s: ["host-fix", "--root", str(s.pve), "--dry-run",
                                                        "--nvidia-modprobe", "bin/nvidia-modprobe"], 2),
    ("host-fix --nvidia-modprobe with a quote", lambda s: ["host-fix", "--root", str(s.pve), "--dry-run",
                                                            "--nvidia-modprobe", "/usr/bin/x'; rm -rf /"], 2),
    ("host-fix --gpu -1", lambda s: ["host-fix", "--root", str(s.pve), "--dry-run", "--gpu", "-1"], 2),
    ("host-fix --gpu of 5,000 digits", lambda s: ["host-fix", "--root", str(s.pve), "--dry-run", "--gpu", BIG], 2),
    ("host-fix --gpu ²", lambda s: ["host-fix", "--root", str(s.pve), "--dry-run", "--gpu", "²"], 2),
    ("hook --mode unknown", lambda s: ["hook", "--mode", "explode", "200", "pre-start"], 2),
    ("hook without arguments", lambda s: ["hook"], 2),
    ("rollback --to /etc/passwd  (issue: exit 0, passwd became the config)",
     lambda s: ["rollback", "--root", str(s.pve), "--ct", "200", "--to", "/etc/passwd"], 2),
    ("rollback with no backup", lambda s: ["rollback", "--root", str(s.pve), "--ct", "200"], 2),
    ("rollback --to an empty backup  (issue: restored a 0-byte config)", lambda s: (
        (s.dir.parent / "state/backups/200").mkdir(parents=True),
        (s.dir.parent / "state/backups/200/20000101T000000.000000Z-da39a3ee5e6b.conf").write_bytes(b""),
        ["rollback", "--root", str(s.pve), "--ct", "200", "--to", "20000101T000000.000000Z-da39a3ee5e6b.conf"])[-1],
     2),
    # ---- host facts in a snapshot
    ("/proc/devices with a 5,000-digit major  (issue: internal error)",
     lambda s: s.proc_devices(lambda p: p.write_text(f"Character devices:\n{BIG} nvidia-uvm\n")), 3),
    ("/proc/devices with ² as a major  (issue: internal error)",
     lambda s: s.proc_devices(lambda p: p.write_text("Character devices:\n195 nvidia\n² nvidia-uvm\n")), 3),
    ("/proc/devices random bytes", lambda s: s.proc_devices(_random), 3),
    ("/proc/devices a FIFO", lambda s: s.proc_devices(_fifo), 3),
    ("/proc/devices -> /dev/zero", lambda s: s.proc_devices(_symlink_to("/dev/zero")), 3),
    ("/proc/driver/nvidia/version of 100 MB", lambda s: (
        (s.pve / "proc/driver/nvidia/version").unlink(), _sparse(100 << 20)(s.pve / "proc/driver/nvidia/version"),
        ["scan", "--root", str(s.pve)])[-1], 3),
    # ---- a container's config
    ("config -> /dev/zero  (issue: internal error)", lambda s: s.replace_config(_symlink_to("/dev/zero")), 2),
    ("config a FIFO  (issue: hangs forever)", lambda s: s.replace_config(_fifo), 2),
    ("config of 100 MB  (issue: internal error)", lambda s: s.replace_config(_sparse(100 << 20)), 2),
    ("config random bytes  (issue: plan exits 0)", lambda s: s.replace_config(_random), 2),
    ("config a directory", lambda s: s.replace_config(lambda p: p.mkdir()), 2),
    ("rule with a 5,000-digit major  (issue: internal error)",
     lambda s: s.lxc_conf(f"lxc.cgroup2.devices.allow = c {BIG}:0 rwm"), 2),
    ("rule with a 5,000-digit minor", lambda s: s.lxc_conf(f"lxc.cgroup2.devices.allow = c 10:{BIG} rwm"), 2),
    ("rule with ² as a major", lambda s: s.lxc_conf("lxc.cgroup2.devices.allow = c ²:0 rwm"), 2),
    ("mount source with a 5,000-digit name  (issue: internal error)",
     lambda s: s.lxc_conf(f"lxc.mount.entry = /dev/nvidia{BIG} dev/nvidia0 none bind,optional,create=file 0 0"), 2),
    ("mount entry of two fields", lambda s: s.lxc_conf("lxc.mount.entry = /dev/net/tun dev/net/tun"), 2),
    ("devN index of 5,000 digits  (issue: internal error)", lambda s: s.pve_conf(f"dev{BIG}: /dev/nvidia0"), 2),
    ("dev256", lambda s: s.pve_conf("dev256: /dev/nvidia0"), 2),
    ("devN without a path", lambda s: s.pve_conf("dev0: gid=44,mode=0666"), 2),
    ("lxc.include of itself  (issue: traceback)", lambda s: s.lxc_conf("lxc.include = /var/lib/lxc/web/config"), 2),
    ("lxc.include loop through another file", lambda s: (
        _append(s.lxc / "var/lib/lxc/vpn/config", "lxc.include = /var/lib/lxc/web/config\n"),
        s.lxc_conf("lxc.include = /var/lib/lxc/vpn/config"))[-1], 2),
    ("a line with control bytes", lambda s: s.lxc_conf("\x1b]0;owned\x07 not a line"), 2),
    ("`[x]` before `lock: backup`  (issue: the lock was ignored)",
     lambda s: s.pve_conf("[x]\nlock: backup") and ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart", "--yes"], 2),
    ("` [snap]` before `lock: backup`",
     lambda s: s.pve_conf(" [snap]\nlock: backup") and ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart", "--yes"], 2),
    ("`[1a]` before `lock: backup`",
     lambda s: s.pve_conf("[1a]\nlock: backup") and ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart", "--yes"], 2),
    ("`[a b]` before `lock: backup`",
     lambda s: s.pve_conf("[a b]\nlock: backup") and ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart", "--yes"], 2),
    # ---- the state dir
    ("state dir is a file", lambda s: (os.environ.__setitem__("LXCFIX_STATE_DIR", str(s.file("state-file"))),
                                       ["apply", "--root", str(s.pve), "--ct", "200", "--no-restart", "--yes"])[-1], 3),
    # ---- inventories
    ("inventory missing", lambda s: ["scan", "--inventory", str(s.dir / "nope.yaml")], 2),
    ("inventory a directory", lambda s: ["scan", "--inventory", str(s.dir)], 2),
    ("inventory -> /dev/zero", lambda s: (os.symlink("/dev/zero", s.dir / "zero.yaml"),
                                          ["scan", "--inventory", str(s.dir / "zero.yaml")])[-1], 2),
    ("inventory a FIFO", lambda s: (os.mkfifo(s.dir / "fifo.yaml"), ["scan", "--inventory", str(s.dir / "fifo.yaml")])[-1], 2),
    ("inventory nested 100,000 deep  (issue: internal error)", lambda s: s.inventory(_deep_yaml(100_000)), 2),
    ("inventory groups nested 200 deep", lambda s: s.inventory(_nested(200)), 2),
    ("host range h[0:99999999]  (issue: built before the limit)",
     lambda s: s.inventory("all:\n  hosts:\n    h[0:99999999]:\n"), 2),
    ("ansible_port ²  (issue: internal error)", lambda s: s.inventory('all:\n  hosts:\n    h1: {ansible_port: "²"}\n'), 2),
    ("ansible_port of 5,000 digits", lambda s: s.inventory(f"all:\n  hosts:\n    h1: {{ansible_port: {BIG}}}\n"), 2),
    ("YAML alias bomb", lambda s: s.inventory(_bomb()), 2),
    ("ansible_host that is an ssh option", lambda s: s.inventory(
        "all:\n  hosts:\n    h1: {ansible_host: '-oProxyCommand=touch /tmp/lxcfix-pwned'}\n"), 2),
    ("inventory not UTF-8", lambda s: s.inventory(b"all:\n  hosts:\n    h\xff\xfe:\n"), 2),
    # ---- SSH input (lxcfix/ssh.py: the SSH work's; see SSH_LAYER below)
    ("--ssh-config missing  (issue: reported as host unreachable)", lambda s: [
        *s.inventory("all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1}\n"), "--ssh-config", str(s.dir / "none")], 2),
    ("a silent listener  (issue: 'No existing session')", _silent, 3),
]
SSH_CASES = {CASES[-2][0], CASES[-1][0]}


def _ssh_layer_here() -> bool:
    """cli._fleet builds its SSH policy with ssh.SshOptions.from_cli, which the SSH work adds to
    lxcfix/ssh.py (not this branch's to edit): until it is there, the two cases that reach the SSH
    layer cannot pass, and are expected to fail (not skipped: they run, and pass once it is)."""
    from lxcfix import ssh

    return hasattr(ssh.SshOptions, "from_cli")


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: type, mode, and its bytes' digest (a link's target; no FIFO is opened)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[p] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha1()
                with open(p, "rb") as f:
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
                out[p] = ("file", st.st_mode, st.st_size, h.hexdigest())
            else:
                out[p] = (stat.S_IFMT(st.st_mode), st.st_mode)
    return out


def test_the_list_has_the_issues_79_cases():
    assert len(CASES) == 79
    assert len({c[0] for c in CASES}) == 79


@pytest.mark.parametrize("name,build,code", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(name, build, code, tmp_path, monkeypatch, request):
    if name in SSH_CASES and not _ssh_layer_here():
        request.applymarker(pytest.mark.xfail(reason="needs the SSH work's ssh.SshOptions.from_cli", strict=True))
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LXCFIX_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("NO_COLOR", "1")
    for k in ("LXCFIX_PVE_DIR", "LXCFIX_PROC_DEVICES"):
        monkeypatch.delenv(k, raising=False)
    sandbox = Sandbox(tmp_path / "sb")
    sandbox.dir.mkdir()
    try:
        argv = build(sandbox)
        before = _tree(tmp_path)
        r = subprocess.run([sys.executable, "-m", "lxcfix", *argv], capture_output=True, timeout=90,
                           stdin=subprocess.DEVNULL, env=dict(os.environ))
    finally:
        while LISTENERS:
            LISTENERS.pop().close()
    out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    assert r.returncode == code, f"{name}: exit {r.returncode}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert b"\x1b" not in r.stdout + r.stderr and b"\x07" not in r.stdout + r.stderr
    assert "Traceback" not in err + out and "internal error" not in err + out
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("style: ")]
    if code == 3 and not lines:  # a fleet scan reports an unreachable host in its output
        assert "unreachable" in out and len([l for l in out.splitlines() if "unreachable" in l and l.endswith("[LXF301]")]) == 1
    else:
        assert len(lines) == 1 and lines[0].startswith("lxcfix: error: "), err
        assert len(lines[0]) < 1200, lines[0]
    assert _tree(tmp_path) == before, "something changed on disk"
