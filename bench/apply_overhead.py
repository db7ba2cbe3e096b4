#!/usr/bin/env python3
"""What `lxcfix apply` costs on top of the container restart it has to do anyway.

On a real LXC container (tests/real/harness.py: hand-made rootfs, `sleep
infinity` init, `lxc.net.0.type = empty`) that has /dev/net/tun bind mounted
but no allow rule, R times (default 5), interleaved:

  (a) bare restart, as lxcfix's apply does it through its backend
      (lxcfix.backends.Lxc: status, `lxc-stop -k`, `lxc-start`, poll status
      until RUNNING), on the same container;
  (b) `lxcfix apply --ct NAME --yes`, end to end, as a subprocess (state and
      lock dirs in a temp dir: LXCFIX_STATE_DIR / LXCFIX_LOCK_DIR); the config
      is reset to the broken one and the container restarted, untimed, before
      each run, so there is something to apply.

Prints the medians, apply minus bare restart (the overhead; target <= 0.25 s, issue 11)
with PASS/MISS, and a breakdown: interpreter start, `import lxcfix.cli`,
`lxcfix plan` and `lxcfix diagnose` alone, and the steps of an in-process
apply (facts, plan, preflight, backup, write, journal, restart, verify).

    sudo python3 bench/apply_overhead.py [-r 5]

Needs root and LXC. Started as root outside a private mount namespace, it
re-executes itself inside one with a pure cgroup v2 /sys/fs/cgroup (as
tests/run does; the machine's mounts are never changed). Not root, no LXC,
or no such namespace: it says why and exits 0. Every container it makes is
destroyed (lxc-stop -k, directory and cgroups removed), also on errors.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TARGET_S = 0.25
TUN_MOUNT = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0"
LXC_TOOLS = ("lxc-start", "lxc-stop", "lxc-info", "lxc-attach", "lxc-wait", "bpftool")


def skip(why: str) -> int:
    print(f"apply_overhead: skipped: {why}")
    return 0


def preconditions() -> int | None:
    """None when we can run here; else the exit code (after re-exec or a skip message)."""
    if os.geteuid() != 0:
        return skip("needs root (real LXC containers): sudo python3 bench/apply_overhead.py")
    missing = [t for t in LXC_TOOLS if shutil.which(t) is None]
    if missing:
        return skip(f"needs LXC and bpftool; not on PATH: {', '.join(missing)} "
                    "(apt-get install -y --no-install-recommends lxc bpftool)")
    if not os.path.exists("/usr/share/lxc/config/common.conf"):
        return skip("needs LXC's /usr/share/lxc/config/common.conf")
    sys.path.insert(0, C.REPO)
    from tests.real import harness

    if harness.cgroup_layout() == "v2":
        return None
    if os.environ.get(C.INNER) == "1":
        return skip(f"/sys/fs/cgroup is not a pure cgroup v2 mount even in the private namespace "
                    f"(layout: {harness.cgroup_layout()}); LXC would ignore cgroup2 device rules")
    if shutil.which("unshare") is None:
        return skip("needs unshare(1) for a private mount namespace with a pure cgroup v2 mount")
    C.reexec_in_cgroup2(__file__, on_failure='echo "apply_overhead: skipped: no pure cgroup2 mount in a '
                                             'private namespace" >&2; exit 0')
    return 0  # not reached


class Steps:
    """Wall time of named calls (monkeypatched wrappers around lxcfix internals, this process only)."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.undo: list = []

    def wrap(self, owner, attr: str, name: str) -> None:
        orig = getattr(owner, attr)

        @functools.wraps(orig)
        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.times.setdefault(name, []).append(time.perf_counter() - t)

        setattr(owner, attr, timed)
        self.undo.append((owner, attr, orig))

    def restore(self) -> None:
        for owner, attr, orig in reversed(self.undo):
            setattr(owner, attr, orig)
        self.undo.clear()

    def total(self, name: str) -> float:
        return sum(self.times.get(name, []))

    def count(self, name: str) -> int:
        return len(self.times.get(name, []))


def in_process_apply(name: str) -> dict:
    """One apply through the library (what the CLI's apply does after parsing
    args), with its steps timed. Returns step -> seconds, plus counts."""
    from lxcfix import apply as A
    from lxcfix import gather, observe, repair
    from lxcfix import transaction as T

    st = Steps()
    st.wrap(gather, "host_facts", "host facts (walk /dev, lxc-start --version)")
    st.wrap(A.Preflight, "do", "preflight (lock:, sections byte-identical)")
    st.wrap(T.Backups, "save", "backup (write + fsync + read back)")
    st.wrap(T, "write_atomic", "atomic write (temp, fsync, re-parse, rename)")
    st.wrap(T.Journal, "record", "journal (fsync per event)")
    st.wrap(T.Restart, "do", "restart (status, stop -k, start, wait)")
    orig_verifier = repair.verifier

    def verifier(*a, **kw):
        fn = orig_verifier(*a, **kw)

        def verify():
            t = time.perf_counter()
            try:
                return fn()
            finally:
                st.times.setdefault("verify (probe inside, running program vs planned config, until clean)", []).append(
                    time.perf_counter() - t)

        # the same Verifier (its unchecked() says why a verify probed nothing), timed
        return repair.Verifier(verify, fn._ct, fn._seen)

    repair.verifier = verifier
    try:
        t0 = time.perf_counter()
        target = repair.open_target(None, None)
        t1 = time.perf_counter()
        rep, c = repair.one(target, name)
        t2 = time.perf_counter()
        if c.plan.is_empty:
            raise RuntimeError("in-process apply: nothing to apply (reset failed?)")
        st.wrap(observe, "observe", "verify probes")  # after one(): from here on only verify probes
        result = repair.apply_plan(target, c, rep.facts, "auto", restart=True)
        t3 = time.perf_counter()
    finally:
        repair.verifier = orig_verifier
        st.restore()
    if result.step_reached != "verified":
        raise RuntimeError(f"in-process apply ended at {result.step_reached}")
    out = {"open target": t1 - t0,
           "plan: one() (facts + read + rules + plan)": t2 - t1}
    for k in ("host facts (walk /dev, lxc-start --version)", "preflight (lock:, sections byte-identical)",
              "backup (write + fsync + read back)", "atomic write (temp, fsync, re-parse, rename)",
              "journal (fsync per event)", "restart (status, stop -k, start, wait)",
              "verify (probe inside, running program vs planned config, until clean)"):
        out[k] = st.total(k)
    out["apply_plan total"] = t3 - t2
    out["total (open + plan + apply_plan)"] = t3 - t0
    out["_verify_scans"] = st.count("verify probes")
    out["_journal_events"] = st.count("journal (fsync per event)")
    return out


def profile_apply(cli: list[str], name: str, env: dict, tmp: str, top: int = 25) -> None:
    """One `lxcfix apply --ct NAME --yes` under cProfile (the same interpreter and checkout):
    the functions with the most cumulative time, imports included (a CLI run pays them)."""
    import pstats

    out = os.path.join(tmp, "apply.prof")
    argv = [sys.executable, "-m", "cProfile", "-o", out, "-m", "lxcfix", "apply", "--ct", name, "--yes"]
    wall = C.timed_run(argv, env=env)[0]
    print(f"\n-- one apply under cProfile ({C.s(wall)} wall; the profiler slows Python code ~2x):")
    st = pstats.Stats(out)
    keep = os.path.join(C.REPO, "bench", "out", "apply.prof")
    os.makedirs(os.path.dirname(keep), exist_ok=True)
    shutil.copyfile(out, keep)
    # lxcfix's own functions (cli's wrappers left out) and module bodies (what importing each costs)
    rows = sorted(((ct, nc, f"{os.path.relpath(fn, C.REPO) if fn.startswith(C.REPO) else os.path.basename(fn)}"
                    f":{line}({func})")
                   for (fn, line, func), (cc, nc, tt, ct, _) in st.stats.items()
                   if (f"{os.sep}lxcfix{os.sep}" in fn and func not in ("main", "run", "wrapper"))
                   or func == "<module>"), reverse=True)[:top]
    for ct, nc, where in rows:
        print(f"   {ct:7.3f} s {nc:7d}  {where}")
    print(f"   (the whole profile: {os.path.relpath(keep)}; python3 -m pstats it)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", "--reps", type=int, default=5, help="runs of each measurement (default 5)")
    ap.add_argument("--profile", action="store_true",
                    help="one more `lxcfix apply` under cProfile: where the CLI's own time goes")
    a = ap.parse_args()

    code = preconditions()
    if code is not None:
        return code

    from tests.real import harness
    from lxcfix.transaction import wait_until
    from lxcfix.backends import Lxc
    from lxcfix.transport import Local

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    C.header("lxcfix apply overhead benchmark")
    print(f"   in a private mount namespace with a pure cgroup v2 /sys/fs/cgroup: "
          f"{'re-executed into it' if os.environ.get(C.INNER) == '1' else 'already'}")
    tmp = tempfile.mkdtemp(prefix="lxcfix-bench-apply-")
    env = dict(os.environ, LXCFIX_STATE_DIR=os.path.join(tmp, "state"), LXCFIX_LOCK_DIR=os.path.join(tmp, "lock"),
               LXCFIX_LXC_PATH=harness.LXCPATH, LXCFIX_PVE_DIR=os.path.join(tmp, "no-pve"), NO_COLOR="1")
    for k in ("LXCFIX_STATE_DIR", "LXCFIX_LOCK_DIR", "LXCFIX_LXC_PATH", "LXCFIX_PVE_DIR", "NO_COLOR"):
        os.environ[k] = env[k]  # the in-process runs read them too
    cli = C.lxcfix_argv()
    ct = None
    try:
        harness.ensure_tun()
        t0 = time.perf_counter()
        ct = harness.make_container([TUN_MOUNT])
        made = time.perf_counter() - t0
        name = ct.name
        if not ct.bpf_attached():
            raise RuntimeError("no BPF device program on the container's cgroup: device rules would be ignored")
        before = harness.open_errno(ct, "/dev/net/tun")
        print(f"   container {name} (made and started in {C.s(made)}); /dev/net/tun inside: open -> {before} "
              f"(expected EPERM: bind mounted, not allowed)")
        if before != "EPERM":
            raise RuntimeError(f"expected EPERM for /dev/net/tun before the fix, got {before}")

        b, t = Lxc(lxcpath=harness.LXCPATH), Local()

        def reset() -> None:
            """Broken config back, container restarted with it (untimed)."""
            if ct.running():
                ct.stop()
            ct.write_config([TUN_MOUNT])
            ct.start()

        def bare_restart() -> float:
            t0 = time.perf_counter()
            if b.status(t, name) == "running":
                r = b.stop(t, name)
                if not r.ok:
                    raise RuntimeError(f"lxc-stop: {r.stderr.strip()}")
            r = b.start(t, name)
            if not r.ok:
                raise RuntimeError(f"lxc-start: {r.stderr.strip()}")
            if not wait_until(lambda: b.status(t, name) == "running"):
                raise RuntimeError(f"{name} did not reach RUNNING")
            return time.perf_counter() - t0

        bare, applies, plans, diags, apply_cpu = [], [], [], [], []
        diff_shown = False
        for i in range(a.reps):
            reset()
            plans.append(C.timed_run(cli + ["plan", "--ct", name], env=env, ok_codes=(1,))[0])
            diags.append(C.timed_run(cli + ["diagnose", "--ct", name], env=env, ok_codes=(1,))[0])
            bare.append(bare_restart())
            dt, p = C.timed_run(cli + ["apply", "--ct", name, "--yes"], env=env, stdout=subprocess.PIPE)
            applies.append(dt)
            apply_cpu.append(C.last_cpu)
            if not diff_shown:
                after = harness.open_errno(ct, "/dev/net/tun")
                print(f"   after `lxcfix apply`: /dev/net/tun inside: open -> {after}; the change:")
                for line in p.stdout.decode(errors="replace").splitlines():
                    print(f"     | {line}")
                if after != "ok":
                    raise RuntimeError(f"apply did not fix /dev/net/tun (open -> {after})")
                diff_shown = True

        inproc = []
        for i in range(a.reps):
            reset()
            inproc.append(in_process_apply(name))

        interp = [C.timed_run([sys.executable, "-c", "pass"])[0] for _ in range(a.reps)]
        imports = [C.timed_run([sys.executable, "-c", "import lxcfix.cli"])[0] for _ in range(a.reps)]
        floor = [C.timed_run(cli + ["plan", "--ct", name, "--root", os.path.join(tmp, "no-such-dir")], env=env,
                             ok_codes=(2,))[0] for _ in range(a.reps)]

        mb, ma = C.med(bare), C.med(applies)
        over = ma - mb
        pairs = [x - y for x, y in zip(applies, bare)]
        print(f"\n-- {a.reps} runs each, interleaved (plan, diagnose, bare restart, apply per round)")
        print(f"   (a) bare restart via lxcfix.backends.Lxc:   median {C.s(mb)}, min {C.s(min(bare))}, "
              f"max {C.s(max(bare))}")
        print(f"   (b) lxcfix apply --ct {name} --yes:  median {C.s(ma)}, min {C.s(min(applies))}, "
              f"max {C.s(max(applies))}")
        print(f"   apply / bare restart: {ma / mb:.1f}x; CPU (user+sys) of the apply and the commands it ran: "
              f"median {C.s(C.med(apply_cpu))}; {C.load()}")
        print(f"\n-- overhead = apply - bare restart: {C.s(over)} (median of each); per round: "
              + ", ".join(f"{x:.3f}" for x in pairs) + f" (median {C.s(C.med(pairs))})")
        print(f"   target <= {TARGET_S:.2f} s: {C.verdict(over, TARGET_S)} ({over / TARGET_S:.2f}x the budget)")

        print("\n-- breakdown (medians)")
        print(f"   python3 -c pass (interpreter start):               {C.s(C.med(interp))}")
        print(f"   python3 -c 'import lxcfix.cli' (+ imports):         {C.s(C.med(imports))}")
        print(f"   lxcfix plan --ct X --root NO-SUCH-DIR (CLI start-up floor: imports incl. typer's lazy ones, "
              f"arg parsing, exit 2): {C.s(C.med(floor))}")
        print(f"   lxcfix plan --ct {name} (subprocess):   {C.s(C.med(plans))}")
        print(f"   lxcfix diagnose --ct {name} (subprocess, probes): {C.s(C.med(diags))}")
        print(f"   in-process apply, {a.reps} runs (repair.open_target + one + apply_plan, timed by wrappers):")
        keys = [k for k in inproc[0] if not k.startswith("_")]
        for k in keys:
            v = C.med([r[k] for r in inproc])
            indent = "       " if k not in ("apply_plan total", "total (open + plan + apply_plan)",
                                          "plan: one() (facts + read + rules + plan)", "open target") else "     "
            print(f"{indent}{k:<48} {v:7.3f} s")
        print(f"       (verify probes per apply: {sorted({r['_verify_scans'] for r in inproc})}; "
              f"journal events: {sorted({r['_journal_events'] for r in inproc})})")
        in_total = C.med([r["total (open + plan + apply_plan)"] for r in inproc])
        restart = C.med([r["restart (status, stop -k, start, wait)"] for r in inproc])
        print(f"   in-process apply minus its own restart: {C.s(in_total - restart)}")
        print(f"   CLI apply = start-up floor {C.med(floor):.3f} + in-process apply {in_total:.3f} "
              f"+ rest {ma - C.med(floor) - in_total:.3f} s (rest: CLI output, exit, process noise)")
        if a.profile:
            reset()
            profile_apply(cli, name, env, tmp)
        return 0
    finally:
        if ct is not None:
            try:
                ct.destroy()
            except Exception as e:
                print(f"apply_overhead: cleanup of {ct.name} failed: {e}", file=sys.stderr)
        harness.cleanup_shared_cgroups()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
