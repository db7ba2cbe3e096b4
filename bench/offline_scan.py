#!/usr/bin/env python3
"""Offline fleet scan: `lxcfix scan --root DIR --no-probe --json` over a
synthetic Proxmox VE host snapshot of N container configs (default 10,000),
through the real CLI, R times. Prints median/min wall time, configs/s, the
target (median <= 2 s for 10,000 configs) with PASS/MISS, the same scan of
1,000 configs for scaling, and floors for context (interpreter + imports,
grep over the same files). --profile adds a per-phase breakdown and cProfile
tables of one in-process run.

    python3 bench/offline_scan.py                # N=10000, R=5
    python3 bench/offline_scan.py --profile      # + where the time goes
    python3 bench/offline_scan.py -n 2000 -r 3 --small 500 --keep /tmp/snap
    python3 bench/offline_scan.py --broken-heavy # issue 22: mostly broken GPU configs vs the read floor
    python3 bench/offline_scan.py --smoke        # the broken-heavy mode at N=300, 1 run: seconds (CI)
    python3 bench/offline_scan.py --broken-heavy --against /tmp/base   # + another checkout, paired

--broken-heavy: a snapshot of N configs, 80% broken (stale or missing majors, GPU and tun
bind mounts without rules: C.BROKEN_KINDS), timed through the CLI against the read floor (a
plain read + split of the same files: one python3 process that reads every config and splits
it into lines and each line at its first ':'), the two interleaved and the ratio taken within
each run; and the CPU time per config of what a scan worker does for one (read, parse,
effective view, rules, plan, diff, causes, the JSON row: scan._analyze_chunk and
report.container_json), in one fresh process per pass that analyses each config of the
snapshot once (as a worker does: no config twice, so no cache is warmer than in a scan),
for the broken and the healthy configs apart, after the read floor's own work per config (open,
read, split) over the same configs in the same process: the per-config targets' anchor.
Targets (issue 22): broken <= 0.5 ms, healthy <= 0.1 ms, the scan <= 6x the floor; each is
printed with its figure (min/median/max) and its anchor from the same runs.

Figures are measured in this one run; nothing is asserted. Exit 0 unless the
scan itself fails (wrong container count, crash).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TARGET_S = 2.0
TARGET_N = 10_000


def scan_argv(root: str) -> list[str]:
    return C.lxcfix_argv() + ["scan", "--root", root, "--no-probe", "--json"]


def sanity(root: str, n: int) -> dict:
    """One untimed run with the JSON parsed: every config must be there."""
    p = subprocess.run(scan_argv(root), capture_output=True, stdin=subprocess.DEVNULL, timeout=900)
    if p.returncode not in (0, 1):
        raise SystemExit(f"scan of {n} configs exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    doc = json.loads(p.stdout)
    got = len(doc["containers"])
    if got != n or doc["summary"]["containers"] != n:
        raise SystemExit(f"scan saw {got} containers (summary {doc['summary']['containers']}), expected {n}")
    internal = sum(1 for c in doc["containers"] if c.get("error"))
    planned = sum(1 for c in doc["containers"] if c.get("plan"))
    doc["_bench"] = {"exit": p.returncode, "internal_errors": internal, "planned": planned,
                     "json_bytes": len(p.stdout)}
    return doc


def time_scan(root: str, reps: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(reps):
        walls.append(C.timed_run(scan_argv(root), ok_codes=(0, 1))[0])
        cpus.append(C.last_cpu)
    return walls, cpus


def report_size(label: str, n: int, times: list[float], cpus: list[float]) -> float:
    m = C.med(times)
    print(f"   {label}: wall median {C.s(m)}, min {C.s(min(times))}, max {C.s(max(times))} "
          f"over {len(times)} runs; {n / m:,.0f} configs/s (median)")
    print(f"   {' ' * len(label)}  CPU (user+sys) median {C.s(C.med(cpus))}, min {C.s(min(cpus))}; "
          f"{n / C.med(cpus):,.0f} configs per CPU-second; {C.load()}")
    return m


def phases(root: str) -> None:
    """Wall time per phase of one in-process scan, through the library (no profiler overhead)."""
    try:
        from lxcfix import gather, repair, report
        from lxcfix.plan import make_plan
    except Exception as e:  # the library moves under us: say so, keep going
        print(f"   phase breakdown unavailable: {e!r}")
        return
    try:
        out = {}
        t = time.process_time  # CPU of this process: steadier than wall time on a busy machine
        t0 = t(); target = repair.open_target(root, None); out["open target"] = t() - t0
        tr, be = target.transport, target.backend
        t0 = t(); facts = gather.host_facts(tr, be); out["host facts"] = t() - t0
        t0 = t(); listed = be.list(tr); out["list configs (listdir)"] = t() - t0
        loader = gather.include_loader(tr)
        t0 = t(); loaded = [gather.load_container(tr, be, ct, p) for ct, p in listed.items()]
        out["read + parse configs"] = t() - t0
        t0 = t(); ctxs = [gather.context(facts, ld, loader) for ld in loaded if ld.config is not None]
        out["effective config (includes, rules replay)"] = t() - t0
        t0 = t(); plans = [make_plan(c, "auto") for c in ctxs]; out["rules + plan (make_plan)"] = t() - t0
        t0 = t(); diffs = [p.diff() for p in plans]; out["unified diffs"] = t() - t0
        rep = repair.scan(target, None, "auto", probe=False)
        t0 = t(); doc = report.document("scan", [rep]); out["report.document (incl. diffs again)"] = t() - t0
        t0 = t(); text = json.dumps(doc, indent=2); out["json.dumps"] = t() - t0
        total = sum(out.values())
        print(f"   phase breakdown (CPU time), one in-process pass over {len(listed)} configs "
              f"(phases run one after the other; sum {C.s(total)}):")
        for k, v in out.items():
            print(f"     {k:<44} {v:7.3f} s  {100 * v / total:5.1f}%")
        del diffs, text, doc, rep, plans, ctxs, loaded
    except Exception as e:
        print(f"   phase breakdown failed: {e!r}")
        return
    # Garbage collection: the scan keeps every parsed config alive, so full collections get dearer.
    try:
        import gc

        state = {"t": 0.0, "t0": 0.0, "n": [0, 0, 0]}

        def cb(phase, info):
            if phase == "start":
                state["t0"] = time.perf_counter()
            else:
                state["t"] += time.perf_counter() - state["t0"]
                state["n"][info["generation"]] += 1

        gc.collect()
        gc.callbacks.append(cb)
        try:
            w0, c0 = time.perf_counter(), time.process_time()
            rep = repair.scan(repair.open_target(root, None), None, "auto", probe=False)
            json.dumps(report.document("scan", [rep]), indent=2)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        finally:
            gc.callbacks.remove(cb)
        print(f"   one whole in-process scan + JSON: wall {C.s(wall)}, CPU {C.s(cpu)}; garbage collector "
              f"{C.s(state['t'])} ({100 * state['t'] / cpu:.0f}% of CPU; collections gen0/1/2: "
              f"{'/'.join(map(str, state['n']))})")
    except Exception as e:
        print(f"   phase breakdown failed: {e!r}")


def profile(root: str, top: int = 15) -> None:
    import lxcfix.cli as cli  # imported before profiling: import time is its own figure

    prof = cProfile.Profile()
    sink = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
        prof.enable()
        try:
            cli.main(["scan", "--root", root, "--no-probe", "--json"])
        except SystemExit:
            pass
        finally:
            prof.disable()
    wall = time.perf_counter() - t0
    total = max(ct for _, _, ct, _ in _rows(prof, "cumulative", 1))  # the root call: cli.main
    print(f"   cProfile of one in-process `lxcfix.cli.main(['scan', '--root', DIR, '--no-probe', '--json'])`: "
          f"{C.s(wall)} wall under the profiler (imports excluded; the profiler slows Python code ~2x)")
    tables = (("cumulative", "cumulative", False), ("cumulative", "cumulative, lxcfix functions only", True),
              ("tottime", "own time (tottime)", False))
    for key, title, own_only in tables:
        print(f"\n   top {top} by {title} (% = of cli.main's {total:.3f} s):")
        print(f"     {'ncalls':>12} {'tottime':>8} {'cumtime':>8} {'%cum':>6} {'%own':>6}  function")
        for nc, tt, ct, name in _rows(prof, key, top, own_only):
            print(f"     {nc:>12} {tt:8.3f} {ct:8.3f} {100 * ct / total:5.1f}% {100 * tt / total:5.1f}%  {name}")


def _rows(prof: cProfile.Profile, key: str, top: int, own_only: bool = False):
    st = pstats.Stats(prof)
    items = []
    for (fn, line, func), (cc, nc, tt, ct, _callers) in st.stats.items():
        if own_only and ("lxcfix" not in fn.replace("\\", "/").split("/") or fn.endswith("cli.py")):
            continue
        short = f"{_short(fn)}:{line}({func})"
        items.append((f"{nc}" if nc == cc else f"{nc}/{cc}", tt, ct, short))
    idx = 2 if key == "cumulative" else 1
    items.sort(key=lambda r: r[idx], reverse=True)
    return items[:top]


def _short(fn: str) -> str:
    if fn == "~":
        return "~"
    parts = fn.replace("\\", "/").split("/")
    if "lxcfix" in parts:
        return "/".join(parts[parts.index("lxcfix"):])
    return "/".join(parts[-2:])


# ---------------------------------------------------------------- --broken-heavy (issue 22)

BROKEN_MS, HEALTHY_MS, FLOOR_RATIO = 0.5, 0.1, 6.0

# The read floor: what reading the snapshot costs at all, in one plain python3 process.
READ_FLOOR = r"""
import os, sys
n = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if f.endswith(".conf"):
            with open(os.path.join(d, f), "rb") as fh:
                for line in fh.read().split(b"\n"):
                    line.partition(b":")
            n += 1
print(n)
"""


def _mmm(xs, fmt="{:.3f}") -> str:
    return "min " + fmt.format(min(xs)) + ", median " + fmt.format(C.med(xs)) + ", max " + fmt.format(max(xs))


# One worker's pass over the snapshot, in a fresh process (cold caches, as a scan's worker starts),
# each config once, in the snapshot's order: CPU time per config, by kind.
PER_CONFIG = r"""
import gc, json, os, sys, time
from dataclasses import replace
from lxcfix import gather, repair, report, scan
# A scan's worker is forked from `lxcfix`'s main(), which sets the collector so (cli.main):
gc.freeze()
gc.set_threshold(50_000, 50, 50)
root, kinds_file = sys.argv[1], sys.argv[2]
kinds = json.load(open(kinds_file))
target = repair.open_target(root, None)
tr, be = target.transport, target.backend
facts = gather.host_facts(tr, be)
listed = list(be.list(tr).items())
loader = gather.include_loader(tr)
clock = time.process_time
out = {}
# The anchor, in this same process and over the same files, first: the read floor's work per
# config (open, read, split into lines and each line at its first ':'), each config timed alike.
floor = []
for ct, path in listed:
    t0 = clock()
    with open(os.path.join(root, path.lstrip("/")), "rb") as fh:
        for line in fh.read().split(b"\n"):
            line.partition(b":")
    floor.append(clock() - t0)
out["_floor"] = floor
snapshot = scan.snapshot_of(tr, be)
for ct, path in listed:  # scan._analyze_chunk's loop, each config timed, then its JSON row
    t0 = clock()
    loaded = gather.load_container(tr, be, ct, path)
    if loaded.config is not None:
        facts = gather.with_snippets(tr, facts, [loaded.config])
    rep = scan.analyze_container(facts, loaded, loader, "auto", snapshot=snapshot)
    if rep.plan is not None:
        rep.plan.diff()
    rep = replace(rep, context=None, planned=None, causes=tuple(report.grouped(rep, facts)))
    report.container_json(rep, True, facts)
    out.setdefault(kinds[ct], []).append(clock() - t0)
print(json.dumps(out))
"""


def per_config_ms(root: str, kinds: dict[str, str], reps: int, env: dict | None = None) -> dict[str, list[float]]:
    """CPU ms per config (the mean over every broken, and every healthy, config of the
    snapshot, each analysed once in one fresh process per rep) of what a scan worker does
    for one config: read, parse, effective view, rules, plan, diff, causes, its JSON row."""
    kinds_file = os.path.join(os.path.dirname(root), os.path.basename(root) + ".kinds.json")
    with open(kinds_file, "w") as f:
        json.dump(kinds, f)
    out: dict[str, list[float]] = {"broken": [], "healthy": [], "floor": []}
    for _ in range(reps):
        p = subprocess.run([sys.executable, "-c", PER_CONFIG, root, kinds_file], capture_output=True, text=True,
                           env=env, timeout=900, cwd=os.path.dirname(root))  # not this checkout's dir: -c's path
        if p.returncode:
            raise SystemExit(f"per-config pass failed: {p.stderr[-2000:]}")
        got = json.loads(p.stdout)
        floor = got.pop("_floor", [])
        if floor:
            out["floor"].append(sum(floor) / len(floor) * 1e3)
        for k, group in (("broken", C.BROKEN), ("healthy", C.HEALTHY)):
            times = [t for kind, ts in got.items() if kind in group for t in ts]
            if times:
                out[k].append(sum(times) / len(times) * 1e3)
    return out


def broken_heavy(a, base: str) -> int:
    root = os.path.join(base, f"broken-{a.n}")
    if os.path.exists(root):
        shutil.rmtree(root)
    kinds: dict[str, str] = {}
    t0 = time.perf_counter()
    counts = C.make_pve_snapshot(root, a.n, seed=a.seed, kinds=C.BROKEN_KINDS, kind_of=kinds)
    broken = sum(v for k, v in counts.items() if k in C.BROKEN)
    print(f"\n-- broken-heavy snapshot of {a.n:,} configs in {root}: {broken:,} broken "
          f"({100 * broken / a.n:.0f}%), made in {C.s(time.perf_counter() - t0)}")
    print("   mix: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    doc = sanity(root, a.n)
    b, sm = doc["_bench"], doc["summary"]
    print(f"   sanity run ok (exit {b['exit']}): {sm['error']} errors, {sm['warning']} warnings, {sm['info']} info; "
          f"{b['planned']} with a plan; {b['internal_errors']} internal errors; JSON {b['json_bytes'] / 1e6:.1f} MB")
    if b["internal_errors"]:
        raise SystemExit(f"{b['internal_errors']} containers failed with an internal error")

    floor_argv = [sys.executable, "-c", READ_FLOOR, os.path.join(root, "etc")]
    C.timed_run(floor_argv)  # warm the page cache
    order = [("floor", floor_argv, None), ("scan", scan_argv(root), None)]
    if a.against:  # another checkout's lxcfix, the same command, in the same runs (run from the
        # snapshot's dir: `python -m` would find this checkout's lxcfix in the working directory)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(a.against))
        order.append(("against", [sys.executable, "-m", "lxcfix"] + scan_argv(root)[len(C.lxcfix_argv()):], env))
        C.timed_run(order[-1][1], env=env, ok_codes=(0, 1), cwd=base)  # its byte-code
    walls: dict[str, list[float]] = {name: [] for name, _, _ in order}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in order}
    ratios, cpu_ratios, paired = [], [], []
    for i in range(a.reps):
        for name, argv, env in (order if i % 2 == 0 else order[::-1]):
            walls[name].append(C.timed_run(argv, env=env, ok_codes=(0, 1), cwd=base if env else None)[0])
            cpus[name].append(C.last_cpu)
        ratios.append(walls["scan"][-1] / walls["floor"][-1])
        cpu_ratios.append(cpus["scan"][-1] / cpus["floor"][-1])
        if a.against:
            paired.append(cpus["against"][-1] / cpus["scan"][-1])
    print(f"\n-- {a.reps} runs, the floor and the scan interleaved ({C.load()})")
    print(f"   read floor (python3: read + split every config): wall {_mmm(walls['floor'])} s; "
          f"CPU {_mmm(cpus['floor'])} s")
    print(f"   lxcfix scan --root DIR --no-probe --json:       wall {_mmm(walls['scan'])} s; "
          f"CPU {_mmm(cpus['scan'])} s")
    print(f"   scan / floor within each run: wall {_mmm(ratios, '{:.2f}x')}; CPU {_mmm(cpu_ratios, '{:.2f}x')}")
    if a.against:
        print(f"   --against {a.against}: wall {_mmm(walls['against'])} s; CPU {_mmm(cpus['against'])} s; "
              f"its CPU / this checkout's, within each run: {_mmm(paired, '{:.2f}x')}")

    # One pass of this checkout's, then (--against) one of the other's, rep after rep: drift on a
    # busy machine hits both alike, and each rep gives a paired ratio.
    other_env = dict(os.environ, PYTHONPATH=os.path.abspath(a.against)) if a.against else None
    ms: dict[str, list[float]] = {"broken": [], "healthy": [], "floor": []}
    other: dict[str, list[float]] = {"broken": [], "healthy": [], "floor": []}
    for i in range(a.reps):
        for side, env in ([(ms, None), (other, other_env)] if i % 2 == 0 else [(other, other_env), (ms, None)]):
            if side is other and other_env is None:
                continue
            for k, v in per_config_ms(root, kinds, 1, env).items():
                side[k] += v
    print(f"\n-- CPU per config: one worker's pass over the snapshot in a fresh process, each config once "
          f"(the mean over its {broken:,} broken and {a.n - broken:,} healthy configs; {a.reps} passes; {C.load()})")
    for k in ("broken", "healthy"):
        if ms[k]:
            print(f"   {k:<8} {_mmm(ms[k])} ms")
    if ms["floor"]:
        print(f"   anchor: the read floor's open + read + split of the same configs, in the same processes: "
              f"{_mmm(ms['floor'])} ms")
    if a.against:
        for k in ("broken", "healthy"):
            if other[k] and len(other[k]) == len(ms[k]):
                pairs = [o / m for o, m in zip(other[k], ms[k])]
                print(f"   {k:<8} {_mmm(other[k])} ms  --against {a.against}; its CPU / this checkout's, "
                      f"pass by pass (interleaved): {_mmm(pairs, '{:.2f}x')}")

    print(f"\n-- targets (issue 22), {a.n:,} configs on this {os.cpu_count()}-core machine; {C.load()}")
    # Each target with its figure (min/median/max) and the anchor measured in the same runs.
    per_floor = (f"anchor: read floor {_mmm(ms['floor'])} ms/config in the same passes"
                 if ms["floor"] else "anchor: none measured")
    rows = [(f"a broken config <= {BROKEN_MS} ms (median)", ms["broken"], BROKEN_MS, "{:.3f} ms", per_floor,
             ms["floor"]),
            (f"a healthy config <= {HEALTHY_MS} ms (median)", ms["healthy"], HEALTHY_MS, "{:.3f} ms", per_floor,
             ms["floor"]),
            (f"the scan <= {FLOOR_RATIO:.0f}x the read floor, same run (median wall ratio)", ratios, FLOOR_RATIO,
             "{:.2f}x", f"anchor: read floor wall {_mmm(walls['floor'])} s, the scan's {_mmm(walls['scan'])} s "
             f"(CPU ratio {_mmm(cpu_ratios, '{:.2f}x')})", None)]
    for label, xs, target, fmt, anchor, base in rows:
        if not xs:
            continue
        times = f" ({C.med(xs) / C.med(base):.1f}x the floor's median)" if base else ""
        print(f"   {label}: {_mmm(xs, fmt)}: {C.verdict(C.med(xs), target)}\n     {anchor}{times}")
    if a.n != TARGET_N:
        print(f"   (ran -n {a.n}, not {TARGET_N:,}: the ratio target is for {TARGET_N:,} configs)")
    if a.profile:
        print("\n-- where the time goes (this snapshot)")
        phases(root)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=TARGET_N, help="configs in the big snapshot (default 10000)")
    ap.add_argument("--small", type=int, default=1000, help="configs in the scaling snapshot (0: skip)")
    ap.add_argument("-r", "--reps", type=int, default=5, help="timed runs per size (default 5)")
    ap.add_argument("--profile", action="store_true", help="phase breakdown + cProfile top 15")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temp dir, removed)")
    ap.add_argument("--broken-heavy", action="store_true",
                    help="issue 22: a mostly broken snapshot, per-config ms and the ratio to the read floor")
    ap.add_argument("--smoke", action="store_true", help="--broken-heavy at N=300, 1 run: seconds (CI)")
    ap.add_argument("--against", metavar="DIR", help="--broken-heavy: also time this checkout's lxcfix "
                    "(PYTHONPATH=DIR python3 -m lxcfix), in the same runs")
    a = ap.parse_args()
    if a.smoke:
        a.broken_heavy, a.n, a.reps, a.small, a.profile = True, 300, 1, 0, False

    C.header("lxcfix offline scan benchmark")
    print(f"   CLI: {' '.join(C.lxcfix_argv())} scan --root DIR --no-probe --json (stdout to /dev/null)")
    base = a.keep or tempfile.mkdtemp(prefix="lxcfix-bench-scan-")
    os.makedirs(base, exist_ok=True)
    if a.broken_heavy:
        try:
            return broken_heavy(a, base)
        finally:
            if not a.keep:
                shutil.rmtree(base, ignore_errors=True)
    try:
        sizes = [a.n] + ([a.small] if a.small else [])
        roots = {}
        for n in sizes:
            root = os.path.join(base, f"host-{n}")
            if os.path.exists(root):
                shutil.rmtree(root)
            t0 = time.perf_counter()
            counts = C.make_pve_snapshot(root, n, seed=a.seed)
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(root, "etc"))
                       for f in fs)
            print(f"\n-- snapshot of {n:,} configs in {root}: {size / 1e6:.1f} MB of config, "
                  f"made in {C.s(time.perf_counter() - t0)}")
            if n == a.n:
                print("   mix: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            roots[n] = root

        results, cpu_results = {}, {}
        for n in sizes:
            doc = sanity(roots[n], n)
            b, sm = doc["_bench"], doc["summary"]
            print(f"\n-- {n:,} configs: sanity run ok (exit {b['exit']}): {sm['containers']} containers, "
                  f"{sm['error']} errors, {sm['warning']} warnings, {sm['info']} info; "
                  f"{b['planned']} with a plan; {b['internal_errors']} internal errors; "
                  f"JSON {b['json_bytes'] / 1e6:.1f} MB")
            times, cpus = time_scan(roots[n], a.reps)
            results[n] = report_size(f"scan {n:,}", n, times, cpus)
            cpu_results[n] = C.med(cpus)

        print("\n-- floors, for context")
        imp = [C.timed_run([sys.executable, "-c", "import lxcfix.cli"])[0] for _ in range(a.reps)]
        print(f"   python3 -c 'import lxcfix.cli' (interpreter + imports): median {C.s(C.med(imp))}")
        floor_argv = C.lxcfix_argv() + ["scan", "--root", os.path.join(base, "no-such-dir"), "--no-probe", "--json"]
        floor = [C.timed_run(floor_argv, ok_codes=(2,))[0] for _ in range(a.reps)]
        print(f"   lxcfix scan --root NO-SUCH-DIR (CLI start-up floor: imports incl. typer's lazy ones, "
              f"arg parsing, exit 2): median {C.s(C.med(floor))}")
        grep = [C.timed_run(["grep", "-rc", "devices.allow", os.path.join(roots[a.n], "etc/pve")], ok_codes=(0, 1))[0]
                for _ in range(a.reps)]
        print(f"   grep -rc devices.allow over the {a.n:,} configs (what an admin reaches for; "
              f"reads every file, understands nothing): median {C.s(C.med(grep))}; "
              f"lxcfix is {results[a.n] / C.med(grep):.0f}x that")

        print("\n-- scaling")
        if a.small and a.small in results:
            big, small = results[a.n], results[a.small]
            per = (big - small) / (a.n - a.small)
            fixed = big - per * a.n
            print(f"   {a.n:,} / {a.small:,} configs: {big / small:.2f}x the wall time "
                  f"({cpu_results[a.n] / cpu_results[a.small]:.2f}x the CPU time) for {a.n / a.small:.0f}x the configs")
            print(f"   marginal cost {per * 1e3:.3f} ms/config; fixed cost (start-up, facts) ~{C.s(max(fixed, 0))}"
                  f" (CLI start-up floor {C.s(C.med(floor))})")
            print(f"   budget left for the configs at {TARGET_N:,}: {TARGET_S:.1f} s - floor {C.med(floor):.3f} s = "
                  f"{TARGET_S - C.med(floor):.3f} s, i.e. <= {(TARGET_S - C.med(floor)) / TARGET_N * 1e3:.3f} ms/config "
                  f"(now {per * 1e3:.3f})")
            if a.n != TARGET_N:
                print(f"   extrapolated to {TARGET_N:,}: {C.s(fixed + per * TARGET_N)}")

        m = results[a.n]
        print(f"\n-- target: {TARGET_N:,} configs, median <= {TARGET_S:.1f} s on this {os.cpu_count()}-core machine")
        if a.n == TARGET_N:
            print(f"   median {C.s(m)} vs {TARGET_S:.1f} s: {C.verdict(m, TARGET_S)} "
                  f"({m / TARGET_S:.2f}x the budget); CPU time alone {C.s(cpu_results[a.n])}: "
                  f"{C.verdict(cpu_results[a.n], TARGET_S)}")
        else:
            print(f"   (ran -n {a.n}, not {TARGET_N:,}: no verdict)")

        if a.profile:
            print("\n-- where the time goes")
            phases(roots[a.n])
            print()
            profile(roots[a.n])
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
