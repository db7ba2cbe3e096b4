#!/usr/bin/env python3
"""Fleet repair at network latency: `lxcfix apply --all --inventory` behind a real round trip,
hosts per minute and round trips per host, against the same run's anchor.

    sudo python3 bench/fleet_apply.py                       # 8 and 32 hosts, RTT 50 ms, 3 runs
    sudo python3 bench/fleet_apply.py --hosts 8 --reps 5
    sudo python3 bench/fleet_apply.py --smoke               # 2 hosts, 1 run (CI)

The hosts are built as bench/fleet_latency.py builds them (each its own network namespace, a
delay relay holding every chunk RTT/2 each way, its own sshd in front of this machine's real
LXC containers); each host has one container given /dev/net/tun without an allow rule, and
its own state dir (the sshd's SetEnv), so each host's backups and journal are its own.

Measured in each run, interleaved, over the same hosts:
  apply    `lxcfix apply --all --inventory FILE --yes --json --serial S`: on every host the
           agent (shipped over stdin, nothing installed there) plans, backs up, writes,
           restarts the container and verifies it from inside; S = 1 (rolling, the default)
           and S = N (every host at once)
  anchor   the same restarts done by hand, lxcfix's own way (`lxc-stop -k`, `lxc-start`): one
           `ssh host "lxc-stop -k -n CT && lxc-start -n CT"` per host, one host after another
           (what the admin's loop costs: connection, restart, nothing checked, nothing kept)
Between runs the configs are put back broken (the files only; the next apply restarts).
Figures: wall (min / median / max), hosts per minute, apply / anchor in the same run, the
control node's CPU per host, and the round trips of each host's connection from the relay's
trace (connect: TCP + key exchange + auth; after: the exec and its reply).
Not a test: it prints figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

import fleet_latency as fl  # noqa: E402  (its namespaces, sshds, relay and round-trip counting)

TUN_BIND = fl.TUN_BIND


def say(msg: str = "") -> None:
    print(msg, flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.N = max(args.hosts)
        self.rid = secrets.token_hex(2)
        self.tmp = Path(tempfile.mkdtemp(prefix="lxcfix-fleet-apply-"))
        self.ns = fl.Namespaces(self.rid, self.N)
        self.sshds: list[fl.HostSshd] = []
        self.relay = None
        self.factory = None
        self.cts: list[str] = []
        self.broken: dict[str, bytes] = {}

    def setup(self) -> None:
        from tests.real import harness

        self.shell_note = fl.hide_root_bashrc(self.tmp)
        harness.ensure_tun()
        self.factory = harness.Factory()
        for _ in range(self.N):
            c = self.factory([TUN_BIND])
            self.cts.append(c.name)
            self.broken[c.name] = Path(c.config_path).read_bytes()
        self.ns.up()
        self.client_key, self.known_hosts, self.relay = fl.serve_hosts(
            self.ns, self.tmp, self.N, "DEBUG3", self.sshds,
            extra_config=lambda i: [f"SetEnv LXCFIX_STATE_DIR={self.tmp / f'state-pve{i}'} "
                                    f"LXCFIX_LOCK_DIR={self.tmp / f'lock-pve{i}'}"])
        self.env = {"PATH": fl.CLEAN_PATH, "HOME": "/root", "LANG": "C.UTF-8", "PYTHONPATH": str(REPO),
                    "PYTHONPYCACHEPREFIX": str(fl.OUT / "pycache"), "NO_COLOR": "1"}

    def inventory(self, n: int) -> Path:
        p = self.tmp / f"inventory-{n}.yaml"
        lines = ["all:", "  vars:", "    ansible_user: root", "    ansible_port: 22",
                 f"    ansible_ssh_private_key_file: {self.client_key}",
                 f"    lxcfix_known_hosts: {self.known_hosts}", "    lxcfix_backend: lxc", "  hosts:"]
        for i in range(1, n + 1):
            lines += [f"    pve{i}:", f"      ansible_host: {self.ns.address(i)}",
                      f"      lxcfix_containers: [{self.cts[i - 1]}]"]
        p.write_text("\n".join(lines) + "\n")
        return p

    def reset(self, n: int) -> None:
        for name in self.cts[:n]:
            Path(fl.LXCPATH, name, "config").write_bytes(self.broken[name])

    def apply(self, n: int, serial: int):
        argv = self.ns.nsenter() + [sys.executable, "-m", "lxcfix", "apply", "--all", "--inventory",
                                    str(self.inventory(n)), "--yes", "--json", "--serial", str(serial)]

        def go():
            self.reset(n)
            p = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.tmp,
                               stdin=subprocess.DEVNULL, timeout=1800)
            try:
                doc = json.loads(p.stdout)
            except ValueError:
                return False, f"exit {p.returncode}, no JSON: {p.stderr.strip()[-300:]}", None
            bad = [f"{h['host']}: {h['status']} {h['message']}" for h in doc["hosts"] if h["status"] != "applied"]
            verified = sum(1 for h in doc["hosts"] for r in h["results"] if r.get("verified"))
            if p.returncode != 0 or bad or verified != n:
                return False, f"exit {p.returncode}, {verified}/{n} verified: {'; '.join(bad)[:400]}", doc
            return True, "", doc
        return go

    def anchor(self, n: int):
        opts = ["-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes",
                "-i", str(self.client_key)]
        lines = ["#!/bin/sh", "fail=0"]
        for i in range(1, n + 1):
            ct = self.cts[i - 1]
            remote = f"lxc-stop -k -n {shlex.quote(ct)} && lxc-start -n {shlex.quote(ct)}"
            lines.append(f"ssh {shlex.join(opts)} root@{self.ns.address(i)} {shlex.quote(remote)} || fail=1")
        script = self.tmp / f"anchor-{n}.sh"
        script.write_text("\n".join(lines + ["exit $fail"]) + "\n")
        argv = self.ns.nsenter() + ["sh", str(script)]

        def go():
            self.reset(n)
            p = subprocess.run(argv, capture_output=True, text=True, env={"PATH": fl.CLEAN_PATH, "HOME": "/root"},
                               cwd=self.tmp, stdin=subprocess.DEVNULL, timeout=1800)
            return p.returncode == 0, p.stderr.strip()[-300:], None
        return go

    def measure(self, go, n: int) -> dict:
        import resource

        self.relay.mark()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p0 = time.perf_counter()
        ok, note, doc = go()
        wall = time.perf_counter() - p0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        recs, still = self.relay.collect()
        time.sleep(0.05)
        t1 = time.monotonic()
        accepted = {}
        for d in self.sshds[:n]:
            for t, line in d.window(t0, t1):
                m = fl.ACCEPTED.search(line)
                if m:
                    accepted[(d.name, int(m.group(1)))] = t
        conns = [fl.connection_stats(r, self.relay.one_way, accepted) for r in recs]
        return {"wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), "ok": ok,
                "note": note + (f"; {still} connection(s) still open" if still else ""), "conns": conns, "doc": doc}

    def run_all(self) -> dict:
        res: dict = {}
        self.relay.start(self.args.rtt)
        try:
            for n in self.args.hosts:
                tools = [("anchor", self.anchor(n)), ("apply-1", self.apply(n, 1))]
                if n > 1:
                    tools.append((f"apply-{n}", self.apply(n, n)))
                say(f"... {n} hosts, RTT {self.args.rtt:g} ms: {self.args.reps} run(s) of {len(tools)}")
                res[n] = {k: [] for k, _ in tools}
                for rep in range(self.args.reps):
                    order = tools[rep % len(tools):] + tools[:rep % len(tools)]
                    for key, go in order:
                        m = self.measure(go, n)
                        m["rep"] = rep
                        res[n][key].append(m)
                        if not m["ok"]:
                            say(f"  {n} hosts run {rep + 1} {key}: FAILED: {m['note']}")
        finally:
            self.relay.stop()
        return res

    def teardown(self) -> None:
        if self.relay is not None:
            self.relay.stop()
        for d in self.sshds:
            d.stop()
        self.ns.down()
        if self.factory is not None:
            self.factory.destroy_all()
        shutil.rmtree(self.tmp, ignore_errors=True)


def mmm(xs) -> str:
    return fl.mmm(xs)


def report(b: Bench, res: dict) -> None:
    say("")
    say(f"fleet apply at RTT {b.args.rtt:g} ms ({os.cpu_count()} cores; {b.shell_note})")
    for n, tools in res.items():
        say(f"\n{n} host(s), one broken container each (wall s: min / median / max over {b.args.reps} run(s))")
        anchors = {m["rep"]: m["wall"] for m in tools["anchor"] if m["ok"]}
        for key, runs in tools.items():
            good = [m for m in runs if m["ok"]]
            if not good:
                say(f"  {key:10} no run succeeded: {runs[0]['note'] if runs else ''}")
                continue
            walls = [m["wall"] for m in good]
            per_min = [60.0 * n / w for w in walls]
            cpu = [1000 * m["cpu"] / n for m in good]
            line = f"  {key:10} wall {mmm(walls)}  hosts/min {mmm(per_min)}  CPU/host {mmm(cpu)} ms"
            if key != "anchor":
                ratios = [m["wall"] / anchors[m["rep"]] for m in good if m["rep"] in anchors]
                if ratios:
                    line += f"  / anchor {mmm(ratios)}x"
                conns = [c for m in good for c in m["conns"] if c["split"] and c["connect"] is not None]
                if conns:
                    per = {}
                    for m in good:
                        for c in m["conns"]:
                            per.setdefault((m["rep"], c["host"]), []).append(c)
                    counts = [len(v) for v in per.values()]
                    rt_connect, rt_after = mmm([c["connect"] for c in conns]), mmm([c["after"] for c in conns])
                    line += (f"\n  {'':10} per host: {statistics.median(counts):g} connection(s), round trips "
                             f"connect {rt_connect}, after auth {rt_after}")
            say(line)
    say("\nanchor: the same restarts by hand over ssh, one host after another, nothing planned, "
        "backed up or verified")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--hosts", default="8,32", help="host counts, comma-separated (default 8,32)")
    ap.add_argument("--rtt", type=float, default=50.0, help="round-trip time in ms (default 50)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="2 hosts, 1 run")
    args = ap.parse_args()
    args.hosts = [2] if args.smoke else [int(x) for x in args.hosts.split(",")]
    args.reps = 1 if args.smoke else args.reps
    if os.geteuid() != 0:
        say("fleet_apply: needs root (network namespaces, LXC containers, sshd)")
        return 2
    from _common import header, reexec_in_cgroup2

    reexec_in_cgroup2(__file__)  # a pure cgroup2 mount in a private namespace, as tests/run gives
    from tests.real import harness

    reason = harness.unavailable_reason()
    if reason:
        say(f"cannot run: {reason}")
        return 2
    header(f"lxcfix fleet apply at network latency: {', '.join(map(str, args.hosts))} hosts, RTT {args.rtt:g} ms")
    b = Bench(args)
    try:
        b.setup()
        res = b.run_all()
        report(b, res)
    finally:
        b.teardown()
    ok = all(m["ok"] for tools in res.values() for runs in tools.values() for m in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
