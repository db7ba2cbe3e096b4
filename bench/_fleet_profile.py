#!/usr/bin/env python3
"""Where a fleet scan's client CPU goes: `lxcfix ARGS...` in this process, every thread profiled.

    python3 bench/_fleet_profile.py HOSTS OUT.txt scan --inventory FILE --json ...

fleet_latency.py --cpu --profile runs it in place of `python3 -m lxcfix` (one process:
LXCFIX_FLEET_WORKERS=1, so every host's work is in this interpreter). cProfile with a CPU
clock (time.thread_time) in every thread: the main one, each threading.Thread, and paramiko's
transport threads (their run() is their own). Each function's own time (tottime) is put in
one phase by where it lives, and the table is written to OUT.txt, per host (/ HOSTS):

  ssh: key exchange + auth   paramiko's kex_*, auth_handler, pkey/ed25519/ecdsa, client connect
  ssh: packets + channels    paramiko's packet, transport, channel, buffered_pipe, message, cipher
  sweep: decompression       zlib, base64 (the sweep's framed, compressed output)
  sweep: parse               lxcfix/sweep.py itself
  analysis                   lxcfix's pure core (facts, config, effective view, rules, plan, causes)
  report + JSON              lxcfix/report.py, json
  fleet/scan glue            lxcfix's fleet, scan, gather, ssh, transport
  threads + waits            threading, queue, concurrent.futures, locks
  start-up + other           imports, typer/click/rich, everything else

then the 25 functions with the most own time. lxcfix's stdout goes to /dev/null's place as
usual (the caller's), this table to OUT.txt only.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import threading
import time

PHASES = [
    ("ssh: key exchange + auth", ("paramiko/kex_", "paramiko/auth_", "paramiko/pkey", "paramiko/ed25519key",
                                  "paramiko/ecdsakey", "paramiko/rsakey", "paramiko/client.py", "paramiko/hostkeys",
                                  "nacl/", "crypto_sign", "crypto_scalarmult", "X25519", "derive", "sign",
                                  "verify", "exchange", "mlkem")),
    ("ssh: packets + channels", ("paramiko/", "Cipher", "cipher", "hmac", "_hashlib", "socket", "select")),
    ("sweep: decompression", ("zlib", "b64decode", "binascii", "base64")),
    ("sweep: parse", ("lxcfix/sweep.py",)),
    ("report + JSON", ("lxcfix/report.py", "json/", "_json")),
    ("analysis", ("lxcfix/rules/", "lxcfix/effective", "lxcfix/ctconfig", "lxcfix/devices", "lxcfix/plan",
                  "lxcfix/causes", "lxcfix/facts", "lxcfix/probe", "lxcfix/idmap", "lxcfix/codes", "lxcfix/fixes",
                  "lxcfix/render", "lxcfix/model", "lxcfix/bounded", "lxcfix/styles", "lxcfix/lxcdefaults",
                  "lxcfix/rootfs", "lxcfix/bpf", "lxcfix/liveplan", "lxcfix/nested", "difflib", "jinja2", "re/")),
    ("fleet/scan glue", ("lxcfix/",)),
    ("threads + waits", ("threading", "queue", "concurrent/", "acquire", "_thread", "release")),
]


def phase(file: str, name: str) -> str:
    where = f"{file}:{name}"
    for label, needles in PHASES:
        if any(n in where for n in needles):
            return label
    return "start-up + other"


def main() -> int:
    hosts, out, *argv = sys.argv[1:]
    hosts = max(1, int(hosts))
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def wrap(run):
        def profiled(self):
            p = cProfile.Profile(time.thread_time)
            with lock:
                profiles.append(p)
            p.enable()
            try:
                run(self)
            finally:
                p.disable()
        return profiled

    threading.Thread.run = wrap(threading.Thread.run)
    import paramiko

    paramiko.Transport.run = wrap(paramiko.Transport.run)
    main_prof = cProfile.Profile(time.thread_time)
    profiles.append(main_prof)
    from lxcfix import cli

    code = 0
    main_prof.enable()
    try:
        cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        main_prof.disable()
    time.sleep(0.3)  # transport threads winding down
    stats = None
    for p in list(profiles):
        try:
            st = pstats.Stats(p)
        except TypeError:  # a thread that never ran
            continue
        if stats is None:
            stats = st
        else:
            stats.add(st)
    totals: dict[str, float] = {}
    rows = []
    for (file, line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        totals[phase(file, name)] = totals.get(phase(file, name), 0.0) + tt
        rows.append((tt, f"{os.path.relpath(file) if file.startswith('/') else file}:{line}({name})"))
    whole = sum(totals.values())
    lines = [f"client CPU by phase, one process, every thread (cProfile, CPU clock; profiling inflates "
             f"the whole by 1.5-3x, the shares hold): {whole:.3f} s in all, {1000 * whole / hosts:.2f} ms per host "
             f"over {hosts} hosts"]
    for label in [p for p, _ in PHASES] + ["start-up + other"]:
        t = totals.get(label, 0.0)
        lines.append(f"    {label:28}{1000 * t / hosts:8.2f} ms per host  {100 * t / whole if whole else 0:5.1f}%")
    lines.append("  the 25 functions with the most own time (s, all hosts):")
    for tt, where in sorted(rows, reverse=True)[:25]:
        lines.append(f"    {tt:8.3f}  {where[-110:]}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
