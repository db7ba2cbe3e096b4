#!/usr/bin/env python3
"""One host's scan with probes, on N real running containers (half of them broken: /dev/net/tun
bind-mounted without its rule), against the floor and an admin's loop, in one run:

- the floor: one python3 process that, for each container, forks a child that joins the
  container's cgroup and mount namespace and opens its nodes (what no tool can do with less);
- an admin's loop: one `lxc-attach` per container, opening the same nodes with sh;
- `lxcfix scan --json` before (LXCFIX_PROBER=attach: the in-container probe) and after (the
  namespace floor, lxcfix.floor).

Prints min/median/max wall time of each, the ratio scan/loop, the marginal cost per container
of the scan after (the fit between the two sizes), processes exec'd and forked per container
(counted by one extra untimed run of each scan under `strace -f -e trace=execve,clone,clone3`),
and peak memory (the largest process of the scan's tree, ru_maxrss). Targets (issue 31): at the
largest size the scan at most 0.3x the admin loop's wall, at most 2 ms per container at the
margin, 0 processes exec'd per container without NVIDIA nodes.

    python3 bench/host_scan.py             # 50 and 200 containers, 3 runs each
    python3 bench/host_scan.py --smoke     # 20 containers, one run
    python3 bench/host_scan.py -n 30 -n 120 -r 5

Root, LXC and a kernel with cgroup BPF (as the real test tier); re-executed in a private mount
namespace with a pure cgroup v2 mount. Figures are measured in this one run; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TUN_MOUNT = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
ALLOW_TUN = "lxc.cgroup2.devices.allow = c 10:200 rwm"
PATHS = ["/dev/net/tun"]

# The floor: one process, a child per container that joins its cgroup and mount namespace and opens.
FLOOR = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for pid, cgroup, paths in json.load(sys.stdin):
    child = os.fork()
    if child == 0:
        try:
            mnt = os.open("/proc/%d/ns/mnt" % pid, os.O_RDONLY)
            with open(cgroup + "/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
            if libc.setns(mnt, 0x00020000) != 0:
                os._exit(2)
            for p in paths:
                try:
                    os.close(os.open(p, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
                except OSError:
                    pass
        finally:
            os._exit(0)
    os.waitpid(child, 0)
'''

LOOP = r'''
for n in "$@"; do
    lxc-attach -n "$n" -- /bin/sh -c 'for p; do (exec 3<>"$p") 2>/dev/null; done' sh /dev/net/tun
done
'''


def make(harness, n: int) -> list:
    """n running containers, every second one broken (tun without its rule)."""
    lines = lambda i: [TUN_MOUNT] + ([ALLOW_TUN] if i % 2 else [])
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda i: harness.make_container(lines(i)), range(n)))


def peak_of(argv, env) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KiB of its largest process) of argv, run by a small python3 that
    waits for it (its RUSAGE_CHILDREN holds only that tree)."""
    probe = ("import resource,subprocess,sys,time;t=time.perf_counter();"
             "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stdin=subprocess.DEVNULL);"
             "dt=time.perf_counter()-t;u=resource.getrusage(resource.RUSAGE_CHILDREN);"
             "print(r.returncode,dt,u.ru_utime+u.ru_stime,u.ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, timeout=900)
    rc, wall, cpu, rss = out.stdout.split()
    if int(rc) not in (0, 1):
        raise RuntimeError(f"{argv[:4]}... exited {rc}: {out.stderr[-2000:]}")
    return float(wall), float(cpu), int(rss)


def counted(argv, env, tmp) -> tuple[int, int]:
    """(execve calls, forks) of argv's whole tree, under strace -f (untimed)."""
    log = os.path.join(tmp, "strace.log")
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve,clone,clone3,fork,vfork", "-e", "signal=none",
                    "-o", log, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL, timeout=900)
    execs = forks = 0
    with open(log, errors="replace") as f:
        for line in f:
            call = line.split(None, 1)[1] if " " in line else ""
            if (call.startswith("execve(") or call.startswith("<... execve resumed>")) and " = 0" in line:
                execs += 1
            elif call.startswith(("clone(", "clone3(", "fork(", "vfork(")) and "CLONE_THREAD" not in line \
                    and "resumed" not in line:
                forks += 1
    return execs, forks


def stats(xs) -> str:
    return f"min {min(xs):.3f} / median {C.med(xs):.3f} / max {max(xs):.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, action="append", help="containers (repeat: the fit takes the first and last)")
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="20 containers, one run")
    a = ap.parse_args()
    sizes = sorted(a.n or ([20] if a.smoke else [50, 200]))
    runs = 1 if a.smoke else a.runs
    if os.geteuid() != 0 or shutil.which("lxc-start") is None:
        print("host_scan: needs root and LXC", file=sys.stderr)
        return 2
    C.reexec_in_cgroup2(__file__)
    from lxcfix import nsprobe
    from tests.real import harness

    C.header(f"lxcfix scan of one host's running containers: {sizes} containers, {runs} run(s) each")
    tmp = tempfile.mkdtemp(prefix="lxcfix-bench-host-")
    env = dict(os.environ, LXCFIX_STATE_DIR=os.path.join(tmp, "state"), LXCFIX_LOCK_DIR=os.path.join(tmp, "lock"),
               LXCFIX_LXC_PATH=harness.LXCPATH, LXCFIX_PVE_DIR=os.path.join(tmp, "no-pve"), NO_COLOR="1")
    cli = C.lxcfix_argv()
    loop = os.path.join(tmp, "loop.sh")
    with open(loop, "w") as f:
        f.write(LOOP)
    cts = []
    results = {}
    try:
        harness.ensure_tun()
        t0 = time.perf_counter()
        cts = make(harness, max(sizes))
        print(f"   {len(cts)} containers made and started in {C.s(time.perf_counter() - t0)}; "
              f"BPF device program on each: {all(c.bpf_attached() for c in cts[:5])} (first 5 checked)")
        for n in sizes:
            some = cts[:n]
            names = [c.name for c in some]
            scan = [*cli, "scan", "--json", *[x for name in names for x in ("--ct", name)]]
            floor_in = json.dumps([[c.init_pid(), nsprobe.payload_cgroup("lxc", c.name), PATHS] for c in some])
            got = {k: [] for k in ("floor", "loop", "before", "after")}
            rss = {}
            for _ in range(runs):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", FLOOR], input=floor_in, text=True, check=True)
                got["floor"].append(time.perf_counter() - t)
                t = time.perf_counter()
                subprocess.run(["sh", loop, *names], check=True, stdout=subprocess.DEVNULL)
                got["loop"].append(time.perf_counter() - t)
                for key, prober in (("before", "attach"), ("after", "ns")):
                    wall, cpu, peak = peak_of(scan, dict(env, LXCFIX_PROBER=prober))
                    got[key].append(wall)
                    rss[key] = max(rss.get(key, 0), peak)
            procs = {key: counted(scan, dict(env, LXCFIX_PROBER=prober), tmp)
                     for key, prober in (("before", "attach"), ("after", "ns"))}
            results[n] = got
            print(f"\n-- {n} containers")
            for key, what in (("floor", "floor (one process: join cgroup + mntns, open)"),
                              ("loop", "admin loop (lxc-attach per container)"),
                              ("before", "lxcfix scan before (in-container probe)"),
                              ("after", "lxcfix scan after (namespace floor)")):
                print(f"   {what:50s} {stats(got[key])}")
            for key in ("before", "after"):
                execs, forks = procs[key]
                print(f"   {key:6s}: {execs / n:.2f} processes exec'd and {forks / n:.2f} forked per container "
                      f"({execs} / {forks} in all, strace -f); peak memory {rss[key] / 1024:.1f} MiB")
            ratio = C.med(got["after"]) / C.med(got["loop"])
            print(f"   scan after / admin loop: {ratio:.2f}x (target <= 0.3x: {C.verdict(ratio, 0.3)}); "
                  f"before / loop: {C.med(got['before']) / C.med(got['loop']):.2f}x; "
                  f"before / after: {C.med(got['before']) / C.med(got['after']):.1f}x")
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            for key in ("after", "before", "floor", "loop"):
                marginal = (C.med(results[hi][key]) - C.med(results[lo][key])) / (hi - lo)
                target = f" (target <= 2 ms: {C.verdict(marginal, 0.002)})" if key == "after" else ""
                print(f"   marginal per container, {key:6s} ({lo} -> {hi}): {marginal * 1000:.2f} ms{target}")
    finally:
        for c in cts:
            try:
                c.destroy()
            except Exception as e:
                print(f"   teardown {c.name}: {e}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
