#!/usr/bin/env python3
"""Fleet scan benchmark: lxcfix vs what an admin would otherwise run, measured in one run.

    sudo python3 bench/fleet_scan.py [--hosts 8] [--containers 4] [--reps 3] [--no-ansible]

H inventory names all point at ONE throwaway sshd on 127.0.0.1 (tests/real/sshd.py), in
front of C real LXC containers made by the test harness (half of them given /dev/net/tun
without an allow rule). As root, it re-executes itself in the wrapper tests/run uses (a
private mount namespace with a pure cgroup v2 /sys/fs/cgroup). Then, median of --reps:

  lxcfix       scan_fleet(concurrency=H): one SSH connection per host, SFTP reads,
               commands multiplexed; --no-probe (the facts below) and the full scan
  (a)          an admin's shell loop with OpenSSH (BatchMode, the test known_hosts):
               every host, every command one after another, one `ssh` per command
  (a')         the same loop with one `ssh` per host running all the commands
  (b)          `ansible all -m raw -f H` over the same inventory file (ansible-core
               installed in a venv under /tmp if missing; skipped when it cannot be)

The facts the baselines gather are what `lxcfix scan --no-probe` reads: /proc/devices,
/proc/self/mountinfo, /proc/driver/nvidia/version, the device nodes under /dev (find +
stat), `lxc-start --version`, the container list, every config and common.conf.
Not a test: it prints figures and ratios.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANSIBLE_VENV = Path("/tmp/lxcfix-bench-ansible")


def lean_root_shell(tmp: Path) -> str:
    """Hide root's ~/.bashrc from the login shells sshd starts, with a bind mount in this
    private mount namespace only (the machine's own mounts and files are untouched).

    Debian's bash sources ~/.bashrc for every command sshd runs; on this machine it runs
    `pyenv init` (~30 processes, ~0.1 s) each time, a cost a hypervisor's root does not
    have, which would charge each tool by its number of remote commands."""
    import pwd

    rc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
    if not rc.is_file():
        return "root has no ~/.bashrc"
    try:  # the caller (our parent) is outside the namespace tests/run-style re-exec made
        private = os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    except OSError:
        private = False
    if not private:
        return "not sure this is a private mount namespace: root's ~/.bashrc left as is"
    empty = tmp / "empty-bashrc"
    empty.write_text("")
    r = subprocess.run(["mount", "--bind", str(empty), str(rc)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"could not hide root's ~/.bashrc: {r.stderr.strip()}"
    return f"root's {rc} hidden (empty) in this mount namespace: remote commands cost what they cost on a lean host"


def median_time(fn, reps: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(reps):
        t = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), value


def fact_commands(lxcpath: str, cts: list[str]) -> list[list[str]]:
    """The argv of each fact `lxcfix scan --no-probe` gathers, as a shell loop would run them."""
    from lxcfix.facts import FACTS

    cmds = [
        ["cat", "/proc/devices"],
        ["cat", "/proc/self/mountinfo"],
        ["sh", "-c", "cat /proc/driver/nvidia/version 2>/dev/null || true"],
        list(FACTS["dev_nodes"].run),
        ["lxc-start", "--version"],
        ["ls", "-1A", lxcpath],
    ]
    cmds += [["cat", f"{lxcpath}/{ct}/config"] for ct in cts]
    cmds += [["cat", "/usr/share/lxc/config/common.conf"], ["ls", "-1A", "/usr/share/lxc/config/common.conf.d"]]
    return cmds


def ensure_ansible() -> tuple[str | None, str]:
    """Path of the `ansible` binary, or None and why not."""
    found = shutil.which("ansible")
    if found:
        return found, "ansible on PATH"
    binary = ANSIBLE_VENV / "bin" / "ansible"
    if binary.exists():
        return str(binary), f"ansible-core in {ANSIBLE_VENV}"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True, capture_output=True)
        r = subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "-q", "ansible-core"],
                           capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot create a venv for ansible-core: {e}"
    if r.returncode != 0 or not binary.exists():
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return None, f"pip install ansible-core failed: {tail[0]}"
    return str(binary), f"ansible-core installed in {ANSIBLE_VENV}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--containers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per-host", type=int, default=4)
    ap.add_argument("--no-ansible", action="store_true")
    ap.add_argument("--keep-bashrc", action="store_true",
                    help="leave root's ~/.bashrc visible to the sshd's sessions (see lean_root_shell)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/fleet_scan.py needs root (real LXC containers, an sshd)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "bench"))
    from _common import reexec_in_cgroup2

    reexec_in_cgroup2(__file__)
    sys.path.insert(0, str(REPO))

    from lxcfix import fleet
    from lxcfix.inventory_io import load_file
    from tests.real import harness
    from tests.real.sshd import Keys, Sshd, write_known_hosts

    reason = harness.unavailable_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2

    H, C, reps = args.hosts, args.containers, args.reps
    ansible_bin, ansible_note = (None, "--no-ansible") if args.no_ansible else ensure_ansible()
    tmp = Path(tempfile.mkdtemp(prefix="lxcfix-bench-"))
    containers, sshd = [], None
    shell_note = "root's ~/.bashrc kept (--keep-bashrc)" if args.keep_bashrc else lean_root_shell(tmp)
    try:
        harness.ensure_tun()
        bind = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
        allow = "lxc.cgroup2.devices.allow = c 10:200 rwm"
        for i in range(C):
            containers.append(harness.make_container([bind] if i % 2 == 0 else [bind, allow]))
        names = [c.name for c in containers]
        keys = Keys.make(tmp / "client")
        sshd = Sshd.start(tmp / "sshd", keys)
        kh = write_known_hosts(tmp / "known_hosts", sshd.known_hosts_line())

        def inventory_file(hosts: list[str]) -> Path:
            p = tmp / f"inventory-{len(hosts)}.yaml"
            p.write_text("\n".join([
                "all:",
                "  vars:",
                "    ansible_host: 127.0.0.1",
                f"    ansible_port: {sshd.port}",
                "    ansible_user: root",
                f"    ansible_ssh_private_key_file: {keys.private}",
                f"    lxcfix_known_hosts: {kh}",
                "    lxcfix_backend: lxc",
                f"    lxcfix_containers: [{', '.join(names)}]",
                "  hosts:",
                *[f"    {h}:" for h in hosts],
            ]) + "\n")
            return p

        host_names = [f"pve{i}" for i in range(1, H + 1)]
        inv_all = load_file(str(inventory_file(host_names))).hosts
        inv_one = load_file(str(inventory_file(host_names[:1]))).hosts
        connect = fleet.ssh_connector(ssh_config=None, allow_agent=False, look_for_keys=False,
                                      max_sessions=args.per_host)

        def lxcfix_scan(hosts, probe: bool):
            def go():
                reports = fleet.scan_fleet(hosts, concurrency=len(hosts), per_host=args.per_host,
                                           probe=probe, connect=connect)
                bad = [r for r in reports if r.error]
                if bad:
                    raise SystemExit(f"lxcfix scan failed: {bad[0].host}: {bad[0].error}")
                return reports
            return go

        # warm-up (page cache, sshd, python imports), not measured
        lxcfix_scan(inv_one, False)()

        accepted_before = sshd.accepted()
        from tests.real.sshcount import counting

        with counting() as counts:
            t_fleet, _ = median_time(lxcfix_scan(inv_all, False), reps)
        conns_client = sum(counts.values()) / (H * reps)
        conns_server = (sshd.wait_log("Accepted publickey", accepted_before + H * reps) - accepted_before) / (H * reps)
        t_one, _ = median_time(lxcfix_scan(inv_one, False), reps)
        t_full, full = median_time(lxcfix_scan(inv_all, True), reps)
        t_full_one, _ = median_time(lxcfix_scan(inv_one, True), reps)
        codes = sorted({f.code for r in full for c in r.containers for f in c.findings})

        # (a) and (a'): OpenSSH, one host after another
        cmds = fact_commands("/var/lib/lxc", names)
        ssh_base = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={kh}",
                    "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
                    "-o", "ControlMaster=no", "-o", "IdentitiesOnly=yes", "-F", "/dev/null",
                    "-i", str(keys.private), "-p", str(sshd.port), "-l", "root"]
        batched = "; ".join(shlex.join(c) for c in cmds)

        def ssh_loop_per_command():
            out = []
            for _h in host_names:
                for c in cmds:
                    r = subprocess.run(ssh_base + ["127.0.0.1", "--", shlex.join(c)], capture_output=True,
                                       text=True, stdin=subprocess.DEVNULL)
                    if r.returncode != 0:
                        raise SystemExit(f"ssh loop: {c[0]} failed: {r.stderr.strip()}")
                    out.append(r.stdout)
            return out

        def ssh_loop_per_host():
            out = []
            for _h in host_names:
                r = subprocess.run(ssh_base + ["127.0.0.1", "--", batched], capture_output=True, text=True,
                                   stdin=subprocess.DEVNULL)
                if r.returncode != 0:
                    raise SystemExit(f"ssh loop: failed: {r.stderr.strip()}")
                out.append(r.stdout)
            return out

        before = sshd.accepted()
        t_loop, loop_out = median_time(ssh_loop_per_command, reps)
        loop_conns = (sshd.wait_log("Accepted publickey", before + H * len(cmds) * reps) - before) / (H * reps)
        assert "Character devices:" in loop_out[0] and all(any(f"lxc.uts.name = {n}" in o for o in loop_out)
                                                           for n in names)
        t_loop_host, _ = median_time(ssh_loop_per_host, reps)

        # exec cost on this server (the login shell of root runs per command)
        one_exec, _ = median_time(lambda: subprocess.run(ssh_base + ["127.0.0.1", "true"], capture_output=True), 5)

        # (b) ansible ad-hoc, same inventory file, same forks
        t_ansible = ansible_conns = None
        if ansible_bin:
            ahome = tmp / "ansible-home"
            env = dict(os.environ, ANSIBLE_HOME=str(ahome), ANSIBLE_LOCAL_TEMP=str(ahome / "tmp"),
                       ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="minimal",
                       ANSIBLE_SSH_ARGS=f"-o ControlMaster=no -o UserKnownHostsFile={kh} "
                                        f"-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes",
                       ANSIBLE_INVENTORY_ENABLED="yaml")
            inv_path = tmp / f"inventory-{H}.yaml"

            def ansible_raw():
                r = subprocess.run([ansible_bin, "all", "-i", str(inv_path), "-m", "raw", "-a", batched,
                                    "-f", str(H)], capture_output=True, text=True, env=env,
                                   stdin=subprocess.DEVNULL)
                if r.returncode != 0 or r.stdout.count("CHANGED | rc=0") != H:
                    raise RuntimeError((r.stdout + r.stderr).strip()[-800:])
                return r

            try:
                ansible_raw()  # warm-up: python byte-compiles ansible's modules on first use
                before = sshd.accepted()
                t_ansible, _ = median_time(ansible_raw, reps)
                ansible_conns = (sshd.wait_log("Accepted publickey", before + H * reps) - before) / (H * reps)
            except (RuntimeError, OSError) as e:
                ansible_note = f"ansible run failed: {str(e).splitlines()[-1] if str(e) else e}"
                t_ansible = None

        # ---------------------------------------------------------- report
        print(f"lxcfix fleet scan benchmark: {H} hosts x {C} containers "
              f"({H} inventory names -> one sshd on 127.0.0.1; real LXC containers), median of {reps}")
        print(f"facts per host: {len(cmds)} commands/files; one `ssh host true` here costs {one_exec:.3f} s "
              f"(handshake + root's login shell); {shell_note}")
        print()
        rows = [
            (f"lxcfix scan --no-probe, {H} hosts, concurrency {H}", t_fleet),
            ("(a)  ssh loop, one ssh per command, sequential", t_loop),
            ("(a') ssh loop, one ssh per host, sequential", t_loop_host),
        ]
        if t_ansible is not None:
            rows.append((f"(b)  ansible all -m raw -f {H}", t_ansible))
        width = max(len(r[0]) for r in rows) + 2
        print(f"{'':{width}}{'wall s':>8}  {'/ lxcfix':>9}")
        for label, t in rows:
            print(f"{label:{width}}{t:8.3f}  {t / t_fleet:8.1f}x")
        if t_ansible is None:
            print(f"(b)  ansible: skipped ({ansible_note})")
        print()
        print(f"lxcfix full scan (probes inside every container + device program), {H} hosts: {t_full:.3f} s; "
              f"1 host: {t_full_one:.3f} s; findings: {', '.join(codes) or 'none'}")
        print(f"{H} hosts vs 1 host (lxcfix --no-probe): {t_fleet:.3f} s / {t_one:.3f} s = {t_fleet / t_one:.2f}x "
              f"the time for {H}x the hosts  (full scan: {t_full / t_full_one:.2f}x)")
        line = (f"SSH connections per host: lxcfix {conns_client:.1f} (client count), {conns_server:.1f} "
                f"(sshd log); ssh loop {loop_conns:.1f}; ssh loop batched 1.0")
        if ansible_conns is not None:
            line += f"; ansible {ansible_conns:.1f}"
        print(line)
        if t_ansible is not None:
            print(f"ansible: {ansible_note}")
        return 0
    finally:
        if sshd is not None:
            sshd.stop()
        for c in containers:
            try:
                c.destroy()
            except Exception as e:  # keep destroying the others
                print(f"teardown: {c.name}: {e}", file=sys.stderr)
        harness.cleanup_shared_cgroups()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
