"""`lxcfix watch`: heal running containers on host device events (the I/O around heal.py).

    w = Watcher(target, Options(heal={"200"}, metrics_file="/var/lib/node_exporter/lxcfix.prom"), emit=print)
    w.serve()          # foreground: kernel uevents + inotify under /dev, one pass per burst
    w.serve(once=True) # recover, one pass over every running container, exit

Sources: a NETLINK_KOBJECT_UEVENT socket bound to the kernel's group 1 (only messages whose
sender is the kernel, port id 0, are read: udev's and any process's are dropped), and inotify
on /dev and the catalog's device directories (nvidia-modprobe makes nodes with mknod, which
sends no uevent). A container's own /dev is not the host's: nodes a tenant makes there are
never seen.

A pass: the kill switch, the host's facts read again, the running containers checked
(config against the host, no probe); those with a finding about a device that changed:
opted in (tag lxcfix-heal, --heal, watch.conf) -> repaired live by the transaction
`apply --live` runs (its lock, digest, backup, write, live change, verify, rollback),
journaled with by=watch; else a finding line (and --notify's command, JSON on stdin).
Per container: one repair per --interval, none after two failed ones in a row.
At start, a repair the journal shows unfinished (the watcher was killed) is rolled back
(the config is old again, the journal says which it was) before the first pass repairs
it anew.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import select
import shlex
import signal
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

from . import ctconfig, heal
from .bounded import clean
from .errors import BadInput, LxcfixError, Refused, RollbackFailed
from .transaction import ENDS, Journal, Lock, read_file, runs, write_atomic
from .transport import env_path

NETLINK_KOBJECT_UEVENT = 15
CONF = "/etc/lxcfix/watch.conf"
RUN_DISABLED = "/run/lxcfix/watch.disabled"
NOTIFY_TIMEOUT = 10.0
# inotify(7)
IN_ATTRIB, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x4, 0x80, 0x100, 0x200
IN_Q_OVERFLOW, IN_ISDIR, IN_ONLYDIR, IN_DONT_FOLLOW = 0x4000, 0x40000000, 0x01000000, 0x02000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")


def conf_path() -> str:
    return env_path("LXCFIX_WATCH_CONF", CONF)


def kill_switches() -> tuple[str, ...]:
    """Files whose presence stops every pass: watch.disabled beside watch.conf, and under /run."""
    return (os.path.join(os.path.dirname(conf_path()), "watch.disabled"), RUN_DISABLED)


def lock_path() -> str:
    return os.path.join(env_path("LXCFIX_LOCK_DIR", "/run/lock/lxc"), "lxcfix-watch.lock")


def read_conf(path: str | None = None) -> heal.WatchConf:
    """watch.conf parsed; absent: empty. A line that is not one: BadInput (exit 2)."""
    path = path or conf_path()
    try:
        data = read_file(path)
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror or e}") from None
    if data is None:
        return heal.WatchConf()
    if len(data) > 1 << 20:
        raise BadInput(f"{path}: over 1 MiB, not a watch.conf")
    try:
        return heal.parse_watch_conf(data.decode("utf-8", "replace"), path)
    except ValueError as e:
        raise BadInput(clean(str(e))) from None


def notify_argv(cmd: str | None) -> list[str] | None:
    """--notify CMD split as a shell would split words (no shell runs it)."""
    if cmd is None:
        return None
    try:
        argv = shlex.split(cmd)
    except ValueError as e:
        raise BadInput(f"--notify {cmd!r}: {e}") from None
    if not argv:
        raise BadInput("--notify: an empty command")
    return argv


@dataclass
class Options:
    heal: frozenset[str] = frozenset()
    restart: frozenset[str] = frozenset()
    notify: list[str] | None = None
    metrics_file: str | None = None
    debounce: float = 0.1
    max_wait: float = 1.0
    interval: float = 10.0
    style: str = "auto"


# ---------------------------------------------------------------- sources

class Uevents:
    """The kernel's uevents (group 1), non-blocking; only the kernel's own (port id 0)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                  NETLINK_KOBJECT_UEVENT)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        except OSError:
            pass
        self.sock.bind((0, 1))

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self):
        """Yields (uevent or None, lost): None for a message not from the kernel."""
        while True:
            try:
                data, (portid, _groups) = self.sock.recvfrom(heal.MAX_UEVENT + 1)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the queue overflowed: events were lost
                    yield None, True
                    continue
                raise
            yield (heal.parse_uevent(data) if portid == 0 else None), False

    def close(self) -> None:
        self.sock.close()


class DevNodes:
    """inotify on /dev and the catalog's directories (those that exist; one made later is
    added when its creation is seen)."""

    MASK = IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW

    def __init__(self, dirs: tuple[str, ...]) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1: " + os.strerror(ctypes.get_errno()))
        self.wds: dict[int, str] = {}
        self.wanted = set(dirs)
        for d in dirs:
            self.add(d)

    def add(self, d: str) -> None:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(d), self.MASK)
        if wd >= 0:
            self.wds[wd] = d

    def fileno(self) -> int:
        return self.fd

    def read(self):
        """Yields (path, lost)."""
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            i = 0
            while i + _EVENT.size <= len(buf):
                wd, mask, _cookie, n = _EVENT.unpack_from(buf, i)
                name = buf[i + _EVENT.size:i + _EVENT.size + n].split(b"\0", 1)[0]
                i += _EVENT.size + n
                if mask & IN_Q_OVERFLOW:
                    yield None, True
                    continue
                base = self.wds.get(wd)
                if base is None or not name:
                    continue
                path = os.path.join(base, os.fsdecode(name))
                if mask & IN_ISDIR:
                    if path in self.wanted and mask & (IN_CREATE | IN_MOVED_TO):
                        self.add(path)
                        yield path, False
                    continue
                yield path, False

    def close(self) -> None:
        os.close(self.fd)


# ---------------------------------------------------------------- the watcher

@dataclass
class Watcher:
    target: object  # repair.Target
    opts: Options
    emit: Callable[[str], None]
    conf: heal.WatchConf = field(default_factory=heal.WatchConf)
    counters: dict = field(default_factory=dict)
    stop: bool = False

    def __post_init__(self) -> None:
        self.guard = heal.Guard(interval=self.opts.interval)
        self.burst = heal.Burst(self.opts.debounce, self.opts.max_wait)
        self.retry: dict[str, float] = {}  # rate-limited containers: when they may be repaired
        self.gave_up_said: set[str] = set()
        for name, _kind, _help in heal.METRICS:
            self.counters.setdefault(name, 0)

    # -- the run

    def serve(self, once: bool = False) -> None:
        lock = Lock(lock_path())
        try:
            lock.do(None)
        except Refused:
            raise Refused(f"another lxcfix watch is running (it holds {lock.path}); not starting a second") from None
        try:
            self.recover()
            if once:
                self.run_pass(frozenset(), time.monotonic(), 0, everything=True)
                return
            self._loop()
        finally:
            lock.release(None)

    def _loop(self) -> None:
        uev = Uevents()
        dev = DevNodes(heal.FILTER.watch_dirs())
        old = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        # select() is resumed after a handler (PEP 475): the signal's byte on a pipe wakes it
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wake = signal.set_wakeup_fd(wake_w)
        try:
            self.emit(f"watching: kernel uevents ({', '.join(sorted(heal.FILTER.subsystems))}), "
                      f"inotify on {len(dev.wds)} directories under /dev; pid {os.getpid()}")
            self.run_pass(frozenset(), time.monotonic(), 0, everything=True)  # what changed while it was down
            while not self.stop:
                now = time.monotonic()
                wake = [d for d in (self.burst.deadline(), min(self.retry.values(), default=None)) if d is not None]
                timeout = max(0.0, min(wake) - now) if wake else None
                try:
                    ready, _, _ = select.select([uev, dev, wake_r], [], [], timeout)
                except InterruptedError:
                    continue
                if wake_r in ready:
                    while True:
                        try:
                            if not os.read(wake_r, 512):
                                break
                        except BlockingIOError:
                            break
                now = time.monotonic()
                if uev in ready:
                    for ev, lost in uev.read():
                        self._event(heal.FILTER.profiles(ev) if ev else frozenset(), lost, now,
                                    ev.describe() if ev else None)
                if dev in ready:
                    for path, lost in dev.read():
                        self._event(heal.FILTER.node(path) if path else frozenset(), lost, now,
                                    f"node {path}" if path else None)
                now = time.monotonic()
                if self.burst.due(now):
                    profiles, first, count, everything = self.burst.take()
                    self.run_pass(profiles, first, count, everything)
                elif self.retry and min(self.retry.values()) <= now:
                    self.run_pass(frozenset(), now, 0, everything=False, retry_only=True)
        finally:
            signal.set_wakeup_fd(old_wake)
            for s, h in old.items():
                signal.signal(s, h)
            os.close(wake_r)
            os.close(wake_w)
            uev.close()
            dev.close()

    def _stop(self, signum, frame) -> None:
        self.stop = True

    def _event(self, profiles: frozenset[str], lost: bool, now: float, what: str | None) -> None:
        self.counters["events_total"] += 1
        if lost:
            self.emit("events lost (queue overflow): the next pass checks every running container")
            self.burst.lost(now)
        elif profiles:
            self.counters["events_relevant_total"] += 1
            if not self.burst.pending:
                self.emit(f"event: {clean(what)} ({', '.join(sorted(profiles))})")
            self.burst.add(profiles, now)

    # -- one pass

    def disabled(self) -> str | None:
        return next((p for p in kill_switches() if os.path.lexists(p)), None)

    def run_pass(self, profiles: frozenset[str], first: float, events: int, everything: bool,
                 retry_only: bool = False) -> None:
        from . import repair
        from .gather import host_facts

        t0, cpu0 = time.monotonic(), time.process_time()
        self.counters["passes_total"] += 1
        n = self.counters["passes_total"]
        switch = self.disabled()
        if switch:
            self.emit(f"pass {n}: skipped: kill switch {switch} exists")
            self._metrics(cpu0)
            return
        if retry_only:
            due = {ct for ct, at in self.retry.items() if at <= t0}
            for ct in due:
                del self.retry[ct]
        tgt = self.target
        try:
            facts = host_facts(tgt.transport, tgt.backend)
            listed = tgt.backend.list(tgt.transport)
            running = [ct for ct in listed if (not retry_only or ct in due) and self._running(ct, facts)]
            checked = running if everything or retry_only else self._candidates(running, listed, profiles, facts)
            rep = repair.scan(tgt, checked, self.opts.style, probe=False, facts=facts, keep_context=True,
                              diffs=False) if checked else None
        except LxcfixError as e:
            self.emit(f"pass {n}: cannot read the host: {clean(e)}")
            self._metrics(cpu0)
            return
        acted = 0
        for c in rep.containers if rep else ():
            hits = heal.concerns(c.findings, profiles, facts, everything or retry_only)
            if not hits or c.plan is None or c.plan.is_empty:
                continue
            acted += 1
            tags = c.context.config.get("tags") if c.context is not None else None
            self._handle(c, hits, heal.opt_in(tags, self.conf, c.ct, self.opts.heal, self.opts.restart),
                         facts, first)
        what = "every running container" if everything else ", ".join(sorted(profiles)) or "retries"
        self.emit(f"pass {n}: {len(running)} running, {len(checked)} checked, {acted} with findings ({what}; "
                  f"{events} events) "
                  f"in {time.monotonic() - t0:.2f} s, cpu {time.process_time() - cpu0:.2f} s")
        self._metrics(cpu0)

    def _candidates(self, running: list[str], listed: dict, profiles: frozenset[str], facts) -> list[str]:
        """The running containers whose config names a device of the changed profiles."""
        pattern = heal.needles(profiles, facts)
        out = []
        for ct in running:
            try:
                data = self.target.transport.read(listed[ct])
            except OSError:
                out.append(ct)  # the scan says what is wrong with it
                continue
            if heal.might_concern(data, pattern):
                out.append(ct)
        return out

    def _running(self, ct: str, facts) -> bool:
        """On a pure cgroup v2 host: its cgroup exists (one stat, where `lxc-info` is a process
        per container); elsewhere (hybrid, v1) LXC's own answer."""
        from .bpf import cgroup_candidates

        tgt = self.target
        try:
            if facts.cgroup_layout == "v2":
                return any(os.path.isdir(p) for p in cgroup_candidates(tgt.backend.name, ct))
            return tgt.backend.status(tgt.transport, ct) == "running"
        except Exception:
            return False

    def _handle(self, c, hits, opt: heal.OptIn, facts, first: float) -> None:
        codes = ", ".join(sorted({f.code for f in hits}))
        if not opt.heal:
            self.counters["findings_total"] += 1
            self.emit(f"CT {c.ct}: {codes}: {clean(hits[0].message)}; not opted in to healing "
                      f"(tag {heal.HEAL_TAG}, --heal {c.ct} or watch.conf): not repaired")
            self._notify({"ct": c.ct, "host": c.host, "codes": sorted({f.code for f in hits}),
                          "findings": [f.to_json() for f in hits], "repaired": False})
            return
        now = time.monotonic()
        why = self.guard.verdict(c.ct, now)
        if why == "gave-up":
            if c.ct not in self.gave_up_said:
                self.gave_up_said.add(c.ct)
                self.emit(f"CT {c.ct}: {codes}: left alone: {self.guard.max_failures} repairs failed in a row "
                          "(restart lxcfix watch to try again)")
            return
        if why == "rate-limited":
            at = self.guard.retry_at(c.ct) or now
            self.retry[c.ct] = at
            self.emit(f"CT {c.ct}: {codes}: repaired {now - (at - self.guard.interval):.1f} s ago; "
                      f"next repair in {at - now:.1f} s (rate limit)")
            return
        self._repair(c, codes, opt, facts, first)

    def _repair(self, c, codes: str, opt: heal.OptIn, facts, first: float) -> None:
        from . import repair

        tgt = self.target
        start = time.monotonic()
        try:
            one = c  # the pass's own scan, with its context: no second read of the config
            repair.check_editable(one)
            if repair.needs_inside(one.context):  # a gid only the container knows: probe it
                _, one = repair.one(tgt, c.ct, self.opts.style, probe=True, facts=facts, editable=True)
            if one.plan.is_empty:
                return
            ops = repair.live_ops(tgt, one)
            tx = repair.apply_transaction(tgt, one, facts, live=True, ops=ops)
            verdict = tx.check()
            how = "live"
            if not verdict.ok:
                if c.ct not in tgt.backend.list(tgt.transport):
                    self.emit(f"CT {c.ct}: gone (deleted while it was checked): nothing repaired")
                    return
                if ops.refuse and opt.restart:
                    tx, how = repair.apply_transaction(tgt, one, facts, restart=True), "with a restart"
                elif ops.refuse:
                    self.counters["findings_total"] += 1
                    self.emit(f"CT {c.ct}: {codes}: a live change cannot repair it ({clean(ops.refuse)}); "
                              f"not opted in to restarts (tag {heal.RESTART_TAG}): not repaired")
                    self._notify({"ct": c.ct, "host": c.host, "codes": codes.split(", "), "repaired": False,
                                  "why": ops.refuse})
                    return
                elif isinstance(verdict.error, Refused):  # its lock held (an apply), locked, edited meanwhile
                    self.emit(f"CT {c.ct}: {codes}: not now: {clean(verdict.error)}; tried again later")
                    self.retry[c.ct] = time.monotonic() + max(self.opts.interval, 1.0)
                    return
                else:
                    verdict.raise_error()
            tx.base["by"] = "watch"
            result = tx.run()
        except BadInput as e:
            if c.ct not in tgt.backend.list(tgt.transport):
                self.emit(f"CT {c.ct}: gone (deleted while it was checked): nothing repaired")
                return
            self._failed(c, codes, e, start)
            return
        except LxcfixError as e:
            self._failed(c, codes, e, start)
            return
        except Exception as e:  # one container's surprise is that container's failure, never the watcher's end
            self._failed(c, codes, e, start)
            return
        done = time.monotonic()
        self.guard.record(c.ct, True, done)
        self.counters["repairs_total"] += 1
        self.counters["last_latency_seconds"] = round(done - first, 4)
        self.emit(f"CT {c.ct}: {codes}: repaired {how} ({result.reached}) in {done - start:.2f} s, "
                  f"{done - first:.2f} s after the event; backup {result.state.get('backup')} ({opt.why})")
        self._notify({"ct": c.ct, "host": c.host, "codes": codes.split(", "), "repaired": True, "how": how})

    def _failed(self, c, codes: str, e: BaseException, start: float) -> None:
        self.counters["failures_total"] += 1
        gave_up = self.guard.record(c.ct, False, time.monotonic())
        kind = "rollback failed" if isinstance(e, RollbackFailed) else "failed"
        text = clean(str(e)).replace("\n", "; ")
        self.emit(f"CT {c.ct}: {codes}: repair {kind} after {time.monotonic() - start:.2f} s: {text}"
                  + ("; left alone from now on (2 failures in a row)" if gave_up else ""))
        self._notify({"ct": c.ct, "host": c.host, "codes": codes.split(", "), "repaired": False,
                      "error": str(e), "left_alone": gave_up})

    def _notify(self, finding: dict) -> None:
        if not self.opts.notify:
            return
        from .transport import Local

        r = Local().run(self.opts.notify, input=json.dumps(finding, sort_keys=True) + "\n",
                        timeout=NOTIFY_TIMEOUT, max_output=64 << 10)
        if not r.ok:
            self.emit(f"notify: {shlex.join(self.opts.notify)} exited {r.rc}: {clean(r.tail()[:200])}")

    def _metrics(self, cpu0: float) -> None:
        self.counters["last_pass_cpu_seconds"] = round(time.process_time() - cpu0, 4)
        if not self.opts.metrics_file:
            return
        try:
            write_atomic(self.opts.metrics_file, heal.metrics_text(self.counters).encode(), mode=0o644)
        except (OSError, LxcfixError) as e:
            self.emit(f"metrics: cannot write {self.opts.metrics_file}: {clean(e)}")

    # -- after a kill

    def recover(self) -> None:
        """Repairs this watcher began and never ended (killed): each config is the old bytes
        or the new ones (the atomic write); new ones are rolled back to the backup taken
        before (the live change may be half done), the run closed in the journal with what
        it found; the first pass then repairs the container anew."""
        from . import repair
        from .apply import state_dir

        journal = Journal(state_dir(self.target.root))
        for run in runs(journal.entries()):
            first = run[0]
            if first.get("by") != "watch" or any(e.get("event") in ENDS for e in run):
                continue
            ct, path = str(first.get("ct")), str(first.get("path"))
            try:
                now = ctconfig.digest(read_file(self.target.local_path(path)) or b"")
            except OSError:
                now = None
            before, after = first.get("digest_before"), first.get("digest_after")
            state = "new" if now == after else "old" if now == before else "changed since" if now else "gone"
            note = "nothing to undo"
            if state == "new":
                try:
                    r = repair.rollback(self.target, ct, restart=False)
                    note = f"rolled back to {r.backup_path}"
                except LxcfixError as e:
                    note = f"not rolled back: {clean(e)}"
            journal.record(event="rolled-back", tx=first.get("tx"), ct=ct, path=path, by="watch", recovered=True,
                           config=state, note=note)
            shown = {"new": "the new one (written before the kill)", "old": "the old one (not written yet)",
                     "changed since": "changed by something else since", "gone": "gone"}[state]
            self.emit(f"CT {clean(ct)}: a repair was interrupted (lxcfix watch was killed); its config is "
                      f"{shown}: {note}")


# ---------------------------------------------------------------- the unit

UNIT_NAME = "lxcfix-watch.service"
UNIT_TEMPLATE = "systemd/lxcfix-watch.service.j2"
AFTER = {"pve": ("pve-cluster.service", "lxc.service"), "lxc": ("lxc.service",)}
_UNSAFE = set(" \t\n\"'\\%$;`")


def unit_argv(python: str, args: list[str]) -> list[str]:
    """ExecStart's words: this interpreter running lxcfix watch with the given options. systemd
    splits ExecStart on spaces and reads quotes, % and $: a word holding one is refused."""
    argv = [python, "-m", "lxcfix", "watch", *args]
    for w in argv:
        if not w or set(w) & _UNSAFE or any(ord(ch) < 32 for ch in w):
            raise BadInput(f"--install: {w!r} cannot go into the unit's ExecStart (no spaces, quotes, %, $ or "
                           "backslashes); name containers in /etc/lxcfix/watch.conf, and a --notify command with arguments "
                           "in a script of its own")
    if not python.startswith("/"):
        raise BadInput(f"--install: the interpreter {python!r} is not an absolute path")
    return argv


def render_unit(backend: str, argv: list[str], metrics_file: str | None = None) -> bytes:
    """ProtectSystem=strict leaves writable what the repairs write: the configs (/etc/pve,
    /var/lib/lxc), lxcfix's state, /run (locks, LXC's and pct's runtime files), the cgroups,
    the logs pct and LXC write, and the metrics file's directory."""
    from . import render
    from .apply import state_dir

    paths = {"/etc/pve", "/var/lib/lxc", state_dir(None).root, "/run", "/sys/fs/cgroup", "/var/log"}
    if metrics_file:
        paths.add(os.path.dirname(metrics_file))
    writable = [f"-{p}" for p in sorted(paths)]
    return render.environment().get_template(UNIT_TEMPLATE).render(
        argv=argv, after=AFTER.get(backend, AFTER["lxc"]), writable=writable).encode()


def plan_unit(target, argv: list[str], metrics_file: str | None = None):
    """The unit as a Plan over its file (before: what is there now)."""
    from . import hostfix
    from .model import Plan

    path = os.path.join(hostfix.unit_dir(), UNIT_NAME)
    try:
        before = read_file(target.local_path(path)) or b""
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror or e}") from None
    after = render_unit(target.backend.name, argv, metrics_file)
    return Plan(ct="host", path=path, digest=ctconfig.digest(before), before=before, after=after,
                style="systemd-unit", style_reason=f"{UNIT_NAME}: lxcfix watch, hardened")
