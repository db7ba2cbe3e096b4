"""A tenant's FUSE mount that never answers (TESTING.md, "A tenant's FUSE mount"): a privileged
container given /dev/fuse mounts a file system over /etc/nvidia-container-runtime whose daemon
never reads /dev/fuse. A host process that opens a file there waits in the kernel until it is
killed. lxcfix reads the container's files in a child killed at the deadline (lxcfix.fence):
every command finishes, the healthy neighbour is reported in full, the hung container gets
"not checked: reading <path> timed out after N s", and no process of lxcfix's is left behind,
on this machine or on the host behind a real sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from .cli import TUN_MOUNT
from .sshd import Keys, Sshd, lean_root_shell, write_known_hosts

TIMEOUT = 3  # LXCFIX_PROBE_TIMEOUT: the deadline of each container's probe and of reading its files
BOUND = 90  # what any one command here may take before the test calls it hung
TARGET = "/etc/nvidia-container-runtime"
FUSE_MOUNT = "lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file 0 0"

# Inside the container (its root, through lxc-attach): /dev/fuse opened as fd 3, mounted with
# mount(8)'s fd= option (-i: no mount.fuse helper), then never read: every request waits. EOF on
# stdin ends it, and with it the connection (the waiting readers get ENOTCONN).
DAEMON = r'''
import os, subprocess, sys
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open("/dev/fuse", os.O_RDWR)
os.dup2(fd, 3, inheritable=True)
r = subprocess.run(["mount", "-i", "-t", "fuse", "-o", "fd=3,rootmode=40000,user_id=0,group_id=0",
                    "lxf-hang", sys.argv[1]], pass_fds=(3,), capture_output=True, text=True)
print("mounted" if r.returncode == 0 else "mount failed: " + r.stderr.strip(), flush=True)
sys.stdin.read()
'''


class Hung:
    """The FUSE daemon inside `c`, started by attach; release() ends it (and with it every wait)."""

    def __init__(self, c, tmp_path):
        script = os.path.join(c.rootfs, "lxf-fuse-hang.py")
        with open(script, "w") as f:
            f.write(DAEMON)
        self.c = c
        self.proc = subprocess.Popen(["lxc-attach", "-n", c.name, "--", "/usr/bin/python3", "-I",
                                      "/lxf-fuse-hang.py", TARGET], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "mounted":
            self.release()
            raise RuntimeError(f"the FUSE mount in {c.name} failed: {line} {self.proc.stderr.read()}")

    def release(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def fuse_cts(container_factory, tun, tmp_path, env):
    """(hung, neighbour): both deny /dev/net/tun (LXF100, and LXF200 from the probe), the first
    with the hung FUSE mount; the daemon is ended first at teardown (the stuck readers with it)."""
    if not os.path.exists("/dev/fuse") or shutil.which("mount") is None:
        pytest.skip("needs /dev/fuse and mount(8) on the host")
    hung_ct = container_factory([TUN_MOUNT, FUSE_MOUNT])
    neighbour = container_factory([TUN_MOUNT])
    assert hung_ct.bpf_attached() and neighbour.bpf_attached()
    env["LXCFIX_PROBE_TIMEOUT"] = str(TIMEOUT)
    hung = Hung(hung_ct, tmp_path)
    try:
        yield hung, neighbour
    finally:
        hung.release()


def finish(hung: Hung, argv, env) -> subprocess.CompletedProcess:
    """argv run to its end, at most BOUND seconds; past that the daemon is ended first (what lets a
    process stuck in the kernel die) and the test fails."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        hung.release()
        p.kill()
        p.communicate()
        pytest.fail(f"{argv[2:]} did not finish within {BOUND}s: a tenant's FUSE mount hangs it")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def leftovers(*needles: str, environ: bool = False) -> list[str]:
    """Processes on this machine whose command line (and, with environ, environment) holds every
    needle. The command line alone by default: a forked reader keeps its parent's, and an
    environment would match the container's own LXC monitor ("[lxc monitor] ... NAME"), whose
    PATH holds the CI venv's /opt/lxcfix-ci-venv/bin."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if environ:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    cmd += b"\0" + f.read()
        except OSError:
            continue
        if all(n.encode() in cmd for n in needles):
            found.append(f"{pid}: {cmd[:200]!r}")
    return found


def none_left(*needles: str, environ: bool = False) -> list[str]:
    """leftovers(), given a moment: a killed child is reaped by its parent's thread or by init."""
    for _ in range(50):
        left = leftovers(*needles, environ=environ)
        if not left:
            return left
        time.sleep(0.1)
    return left


def timed_out(hung_ct, doc) -> str:
    (report,) = [c for c in doc["containers"] if c["ct"] == hung_ct.name]
    texts = [f["message"] for f in report["findings"] if f["code"] == "LXF236"]
    assert texts, report["findings"]
    return texts[0]


def assert_judged(doc, hung, neighbour) -> None:
    by_ct = {c["ct"]: {f["code"] for f in c["findings"]} for c in doc["containers"]}
    assert {"LXF100", "LXF200"} <= by_ct[neighbour.name], by_ct  # probed, its program read: in full
    assert "LXF236" not in by_ct[neighbour.name], by_ct  # and its own files read
    assert "LXF100" in by_ct[hung.c.name], by_ct
    message = timed_out(hung.c, doc)
    assert f"not checked: reading /proc/{hung.c.init_pid()}/root{TARGET}/config.toml timed out after " \
           f"{TIMEOUT} s" in message, message


def test_scan_text_and_json_finish_and_report_the_neighbour(fuse_cts, env):
    hung, neighbour = fuse_cts
    cts = ["--ct", hung.c.name, "--ct", neighbour.name]
    r = finish(hung, [sys.executable, "-m", "lxcfix", "scan", *cts, "--json"], env)
    assert r.returncode == 1, r.stderr
    assert_judged(json.loads(r.stdout), hung, neighbour)
    r = finish(hung, [sys.executable, "-m", "lxcfix", "scan", *cts], env)
    assert r.returncode == 1, r.stderr
    assert neighbour.name in r.stdout and "timed out after" in r.stdout, r.stdout
    assert none_left("lxcfix", hung.c.name) == []


def test_diagnose_and_apply_dry_run_live_finish(fuse_cts, env):
    hung, neighbour = fuse_cts
    r = finish(hung, [sys.executable, "-m", "lxcfix", "diagnose", "--ct", hung.c.name, "--json"], env)
    assert r.returncode == 1, r.stderr
    assert "timed out after" in timed_out(hung.c, json.loads(r.stdout))
    r = finish(hung, [sys.executable, "-m", "lxcfix", "apply", "--ct", hung.c.name, "--dry-run", "--live",
                      "--yes"], env)
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    assert "lxc.cgroup2.devices.allow" in r.stdout + r.stderr or "10:200" in r.stdout + r.stderr, r.stdout
    assert none_left("lxcfix", hung.c.name) == []


API = """
import json, sys
from lxcfix import api
doc = api.scan(sys.argv[1:])
print(json.dumps(doc))
"""


def test_api_scan_finishes_and_reports_the_neighbour(fuse_cts, env):
    """lxcfix.api.scan(), what the Ansible collection's lxcfix_scan calls on the hypervisor."""
    hung, neighbour = fuse_cts
    r = finish(hung, [sys.executable, "-c", API, hung.c.name, neighbour.name], env)
    assert r.returncode == 0, r.stderr
    assert_judged(json.loads(r.stdout), hung, neighbour)
    assert none_left(hung.c.name, "api.scan") == []


def test_over_ssh_the_hosts_sweep_finishes_and_leaves_no_process_there(fuse_cts, env, tmp_path):
    hung, neighbour = fuse_cts
    keys = Keys.make(tmp_path / "client")
    with lean_root_shell(tmp_path):
        d = Sshd.start(tmp_path / "sshd", keys)
        try:
            kh = write_known_hosts(tmp_path / "known_hosts", d.known_hosts_line())
            inv = tmp_path / "inventory.yaml"
            inv.write_text("\n".join([
                "all:", "  hosts:", "    hv:", "      ansible_host: 127.0.0.1", f"      ansible_port: {d.port}",
                "      ansible_user: root", f"      ansible_ssh_private_key_file: {keys.private}",
                f"      lxcfix_known_hosts: {kh}", "      lxcfix_backend: lxc",
                f"      lxcfix_containers: [{hung.c.name}, {neighbour.name}]"]) + "\n")
            r = finish(hung, [sys.executable, "-m", "lxcfix", "scan", "--inventory", str(inv), "--json",
                              "--ssh-config", "/dev/null"], {**env, "SSH_AUTH_SOCK": "", "HOME": str(tmp_path)})
            assert r.returncode == 1, r.stderr
            doc = json.loads(r.stdout)
            assert not [h for h in doc["hosts"] if h.get("error")], doc["hosts"]
            assert_judged(doc, hung, neighbour)
            # nothing the sweep started (its own python3, the reader's child) is left on the "host"
            assert none_left("SSH_CONNECTION=", f"127.0.0.1 {d.port}\0", environ=True) == []
        finally:
            d.stop()
