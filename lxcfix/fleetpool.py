"""A fleet scan spread over worker processes: each holds a share of the SSH connections.

    reports = scan_in_processes(hosts, workers=2, concurrency=64, scan=functools.partial(
        fleet.scan_one, connect=connector, per_host=4, probe=True, style="auto", enter=connector.container))
    # one HostReport per host, in inventory order; progress(host, done, total) as each arrives

One process's threads hold every connection of fleet.scan_fleet's thread path, and paramiko's
packet handling, the sweep's decoding and the analysis of each host all run under that one
interpreter lock: a fleet scan is bound to one core. Here the parent keeps the inventory and the
progress; `workers` processes (forkserver: each forked from one clean, single-threaded server
that imported lxcfix once, never from this process, whose threads may hold locks) each run
their hosts' scan_one in threads of their own. The parent hands out host indexes one at a time
as slots free up (at most `concurrency` hosts in flight in all, an even share per worker), so
a worker with slow hosts gets fewer; each finished HostReport comes back pickled over the
worker's pipe, and the parent reassembles the list in inventory order.

scan_one never raises (a host's failure is its LXF301 report), so what comes back is what the
thread path returns. A worker that dies (killed, out of memory) takes only its hosts in
flight with it: each becomes an LXF301 report ("scan failed: worker process ... exited"),
and the hosts it had not started go to the workers left (or, with none left, to threads here).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from .inventory import HostEntry
from .scan import HostReport

Progress = Callable[[str, int, int], None]
Scan = Callable[[HostEntry], HostReport]

MAX_WORKERS = 8
HOSTS_PER_WORKER = 16  # below 2 x this, one process: a worker's start-up (~0.3 s CPU) is not worth it


def workers_for(n_hosts: int, cores: int | None = None) -> int:
    """How many worker processes a scan of n_hosts gets: 1 (threads in this process) for a small
    fleet or a single core, else one per core (at most MAX_WORKERS), at least HOSTS_PER_WORKER hosts each."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS, n_hosts // HOSTS_PER_WORKER))


# ----------------------------------------------------------------- the worker


def portable(rep: HostReport) -> HostReport:
    """What crosses back to the parent, as scan._analyze_chunk sends it: each container without the
    views it was judged in (context, planned: they hold the host's loader, and stay here), its
    causes grouped and its plan's diff computed here, in this worker (the parent would otherwise
    do both, on one core). The report and the JSON made of it are the same."""
    from dataclasses import replace

    from .report import grouped

    cts = []
    for c in rep.containers:
        if c.plan is not None:
            c.plan.diff()  # kept by the plan: it travels back with it
        cts.append(replace(c, context=None, planned=None, causes=tuple(grouped(c, rep.facts))))
    return replace(rep, containers=tuple(cts))



def _worker(conn, scan: Scan, threads: int, gc_threshold: tuple[int, ...]) -> None:
    """A worker process: (index, entry) in, (index, HostReport) out; None ends it.
    gc_threshold: the parent's (cli.main raises it: a scan's objects all live until the
    report; the default thresholds re-walk them again and again, in every worker too)."""
    import gc

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the workers
    gc.freeze()  # what the forkserver imported: never garbage
    gc.set_threshold(*gc_threshold)
    send_lock = threading.Lock()

    def one(index: int, entry: HostEntry) -> None:
        rep = scan(entry)  # never raises
        try:
            rep = portable(rep)
        except Exception as e:
            from .fleet import unreachable

            rep = unreachable(entry.name, f"scan failed: {type(e).__name__}: {e}", rep.seconds)
        with send_lock:
            try:
                conn.send((index, rep))
            except (OSError, EOFError):
                os._exit(0)  # the parent is gone
            except Exception as e:  # a report that does not pickle: that host's failure, as a report
                from .fleet import unreachable

                conn.send((index, unreachable(entry.name, f"scan failed: {type(e).__name__}: {e}", rep.seconds)))

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lxcfix-host") as pool:
        while True:
            try:
                msg = conn.recv()
            except (OSError, EOFError):
                os._exit(0)
            if msg is None:
                break
            pool.submit(one, *msg)
    conn.close()


# ----------------------------------------------------------------- the parent


class _Worker:
    def __init__(self, ctx, scan: Scan, slots: int):
        parent_end, child_end = ctx.Pipe(duplex=True)
        self.conn = parent_end
        self.slots = slots
        self.busy: dict[int, HostEntry] = {}
        import gc

        self.proc = ctx.Process(target=_worker, args=(child_end, scan, slots, gc.get_threshold()), daemon=True,
                                name="lxcfix-fleet-worker")
        self.proc.start()
        child_end.close()
        self.alive = True

    def give(self, index: int, entry: HostEntry) -> bool:
        try:
            self.conn.send((index, entry))
        except (OSError, EOFError):
            return False
        self.busy[index] = entry
        return True

    def stop(self, wait: float) -> None:
        if self.alive:
            try:
                self.conn.send(None)
            except (OSError, EOFError):
                pass
        self.proc.join(wait)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()
        self.alive = False


def _context():
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["lxcfix.fleet", "lxcfix.fleetpool"])
    return ctx


def scan_in_processes(hosts: Sequence[HostEntry], *, scan: Scan, workers: int, concurrency: int,
                      progress: Progress | None = None) -> list[HostReport]:
    """scan(entry) for every host, in `workers` processes, `concurrency` hosts in flight in all.
    scan must pickle (fleet.scan_one with an SshConnector, through functools.partial).
    NoWorkers when not one process starts; when every worker has died, the hosts not started
    yet are scanned in threads here."""
    from multiprocessing.connection import wait

    from .fleet import unreachable

    hosts = list(hosts)
    total = len(hosts)
    workers = max(1, min(workers, total))
    per = max(1, -(-concurrency // workers))
    todo = deque(range(total))
    results: dict[int, HostReport] = {}
    done = 0
    ctx = _context()
    pool: list[_Worker] = []

    def finish(index: int, rep: HostReport) -> None:
        nonlocal done
        if index in results:
            return
        results[index] = rep
        done += 1
        if progress is not None:
            progress(hosts[index].name, done, total)

    def feed(w: _Worker) -> None:
        while todo and w.alive and len(w.busy) < w.slots and in_flight() < concurrency:
            index = todo.popleft()
            if not w.give(index, hosts[index]):
                todo.appendleft(index)
                return

    def in_flight() -> int:
        return sum(len(w.busy) for w in pool)

    try:
        for _ in range(workers):
            pool.append(_Worker(ctx, scan, per))
    except Exception as e:  # no process could be started (a limit, no /dev/shm): the caller's threads
        for w in pool:
            w.proc.kill()
            w.proc.join(5)
        raise NoWorkers(f"{type(e).__name__}: {e}") from None
    try:
        for w in pool:
            feed(w)
        while done < total:
            live = [w for w in pool if w.alive]
            if not live:  # every worker died: the hosts not started yet are scanned here, in threads
                rest = list(todo)
                todo.clear()
                _threads(scan, concurrency, [(i, hosts[i]) for i in rest], finish)
                break
            ready = wait([w.conn for w in live] + [w.proc.sentinel for w in live])
            for w in live:
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            index, rep = w.conn.recv()
                            w.busy.pop(index, None)
                            finish(index, rep)
                    except (OSError, EOFError):
                        _dead(w, finish, unreachable)
                        continue
                if w.proc.sentinel in ready and not w.proc.is_alive() and not w.conn.poll():
                    _dead(w, finish, unreachable)
            for w in pool:
                feed(w)
    except BaseException:  # Ctrl-C, or a bug: no worker outlives the scan
        for w in pool:
            if w.proc.is_alive():
                w.proc.kill()
        for w in pool:
            w.proc.join(5)
        raise
    for w in pool:
        w.stop(wait=10)
    return [results[i] for i in range(total)]


def _dead(w: _Worker, finish, unreachable) -> None:
    """A worker that exited with hosts in flight: each of them is a failed scan, reported."""
    w.alive = False
    w.proc.join(1)
    code = w.proc.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    for index, entry in sorted(w.busy.items()):
        finish(index, unreachable(entry.name, f"scan failed: worker process {w.proc.pid} {how}"))
    w.busy.clear()


def _threads(scan: Scan, concurrency: int, todo: list[tuple[int, HostEntry]], finish) -> None:
    from concurrent.futures import as_completed

    if not todo:
        return
    with ThreadPoolExecutor(max_workers=min(concurrency, len(todo)), thread_name_prefix="lxcfix-host") as pool:
        futures = {pool.submit(scan, entry): index for index, entry in todo}
        for fut in as_completed(futures):
            finish(futures[fut], fut.result())  # scan_one never raises


class NoWorkers(Exception):
    """No worker process could be started; nothing was scanned (the caller scans in threads)."""


__all__ = ["HOSTS_PER_WORKER", "MAX_WORKERS", "NoWorkers", "scan_in_processes", "workers_for"]
