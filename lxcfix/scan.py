"""One host scanned: facts, every container's config, findings and plan.

    report = scan_host(Local(), detect(Local()), cts=["200"], style="auto")
    report.containers[0] == CtReport(ct="200", path="/etc/pve/lxc/200.conf", findings=(...), plan=Plan(...))

Failures become data: an unreadable config is a finding for that container,
an unreachable host a finding for the host; nothing here raises for them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Callable

from . import codes, gather
from .backends import Lxc, Proxmox
from .errors import LxcfixError
from .model import LXC_NAME, VMID, CtReport, Finding, HostFacts, HostReport, Plan  # noqa: F401  (re-exported)
from .plan import make_plan_in
from .rules import Context, run_rules
from .transport import Transport, env_number

# How the probe reaches one container: backend.exec(host, ct) unless the inventory says otherwise.
Route = Callable[[Transport, str], Transport]


@dataclass(frozen=True)
class Enter:
    """How to look inside running containers on a live host."""

    transport: Transport
    backend: Proxmox | Lxc
    route: Route | None = None
    inner: str | None = None  # the inner containers to probe too (`--inner`: all, or names; nested.select)

    def container(self, ct: str) -> Transport:
        return self.route(self.transport, ct) if self.route is not None else self.backend.exec(self.transport, ct)


def analyze_container(facts: HostFacts, loaded: gather.Loaded, loader, style: str = "auto",
                      enter: Enter | None = None, ctx: Context | None = None,
                      snapshot: Enter | None = None) -> CtReport:
    """Findings and plan for one container. `enter` (live hosts) looks inside a
    running container: probe and device program. ctx: its view, when the caller
    made it already. snapshot (a host snapshot, `--root`): where the container's own
    files lie in it, for the static checks (with_snapshot_rootfs). Whatever goes wrong with one container (its config, its probe,
    a bug in a rule) is that container's report; only a bad --style (the command's
    own input) is raised."""
    if loaded.config is None:
        f = codes.make("LXF131", loaded.ct, f"config cannot be read: {loaded.error}",
                    evidence=(loaded.path,), host=facts.host)
        return CtReport(facts.host, loaded.ct, loaded.path, (f,), error=loaded.error, node=loaded.node)
    if ctx is None:
        try:
            ctx = gather.context(facts, loaded, loader, requested=style)
        except Exception as e:  # a bug in reading one config must not end the host's scan
            f = codes.make("LXF131", loaded.ct, f"config cannot be analysed: {type(e).__name__}: {e}",
                        evidence=(loaded.path,), host=facts.host)
            return CtReport(facts.host, loaded.ct, loaded.path, (f,), error=f"internal error reading this "
                            f"container's config: {e!r}", node=loaded.node)
    status = None
    extra: list[Finding] = []
    if enter is not None:
        ctx, status, extra = look_inside(ctx, enter, loaded.ct, facts.host)
        ctx = with_rootfs(ctx, enter, loaded.ct, status)
    elif snapshot is not None:
        ctx = with_snapshot_rootfs(ctx, snapshot, loaded.ct)
    try:
        plan, planned = make_plan_in(ctx, style)
        findings = plan.findings
    except LxcfixError:
        raise  # bad input (a --style the container cannot take): the command's answer
    except Exception as e:  # a bug in one container's analysis must not end a fleet scan
        try:
            found = tuple(run_rules(ctx))
        except Exception:
            found = ()
        return CtReport(facts.host, loaded.ct, loaded.path, found + tuple(extra),
                        error=f"internal error planning this container: {e!r}", node=loaded.node, status=status,
                        context=ctx)
    if status == "running" and not plan.is_empty:
        try:
            findings = mark_live_fixable(ctx, planned, findings)
        except Exception:
            pass  # only a hint; the findings stand
    return CtReport(facts.host, loaded.ct, loaded.path, tuple(findings) + tuple(extra), plan,
                    node=loaded.node, status=status, probe=ctx.probe, context=ctx, planned=planned)


def look_inside(ctx: Context, enter: Enter, ct: str, host: str) -> tuple[Context, str | None, list[Finding]]:
    """The probe and the device program of a running container, into the context. Any
    failure (the container cannot be entered, the probe times out, the host's answer
    breaks a reader) is an LXF301 finding for this container, never an exception."""
    from .observe import ProbeFailed, observe  # only a live host is looked inside
    from .rules.access import requests

    try:
        status = enter.backend.status(enter.transport, ct)
    except Exception as e:
        return ctx, None, [codes.make("LXF301", ct, f"cannot ask whether CT {ct} runs: {_why(e)}", host=host)]
    if status != "running":
        return ctx, status, []
    try:
        probe, live = observe(enter.transport, enter.backend, ct, ctx.effective, enter.container(ct),
                              access=requests(ctx))
    except ProbeFailed as e:
        return ctx, status, [codes.make("LXF301", ct, f"cannot look inside CT {ct}: {e}", host=host)]
    except Exception as e:
        return ctx, status, [codes.make("LXF301", ct, f"cannot look inside CT {ct}: {_why(e)}", host=host)]
    ctx = replace(ctx, probe=probe, live=live)
    if enter.inner:
        from .observe import probe_inner, probe_paths

        try:
            ctx = replace(ctx, inner=probe_inner(enter.container(ct), ct, probe, enter.inner,
                                                 probe_paths(ctx.effective)))
        except Exception as e:
            return ctx, status, [codes.make("LXF223", ct, f"cannot look inside CT {ct}'s containers: {_why(e)}",
                                            host=host)]
    return ctx, status, []


def with_rootfs(ctx: Context, enter: Enter, ct: str, status: str | None) -> Context:
    """The container's own files for the static checks (rules.rootfs): on this machine read in this
    process (observe.read_rootfs: nothing followed out of the root); on a remote host read by the
    sweep that probed its containers (the same reader, run in the sweep's process there:
    _probe_in_one_go), and not at all when that sweep did not ask (a command per container would
    break the scan's round trips)."""
    if status is None:
        return ctx
    from .observe import read_rootfs
    from .transport import answered

    if not on_this_machine(enter.transport):
        ask = _rootfs_ask(enter.transport, enter.backend, ct, ctx, status == "running")
        if ask is None or not answered(enter.transport, ask):
            return ctx
    try:
        seen = read_rootfs(enter.transport, enter.backend, ct, ctx.config, status == "running")
    except Exception:
        return ctx
    return replace(ctx, rootfs=seen)


def with_snapshot_rootfs(ctx: Context, snapshot: Enter, ct: str) -> Context:
    """A host snapshot's container files, where the snapshot holds its rootfs (LXC's dir:
    rootfs, /var/lib/lxc/VMID/rootfs of a mounted Proxmox container), read as a stopped
    container's: each path resolved inside that root, which lies inside the snapshot. Most
    snapshots hold only the configs: then nothing is said (no LXF236 for each container)."""
    from .observe import read_rootfs, rootfs_root

    try:
        root, _ = rootfs_root(snapshot.transport, snapshot.backend, ct, ctx.config, False)
        # No such directory in the snapshot: the reader would find no /etc/passwd there either
        # (a stopped container's rootfs that is not there is not mounted), and each config of a
        # snapshot without rootfs dirs would pay for its run.
        if root is None or not snapshot.transport.has_dir(root):
            return ctx
        seen = read_rootfs(snapshot.transport, snapshot.backend, ct, ctx.config, running=False)
    except Exception:
        return ctx
    return replace(ctx, rootfs=seen) if seen.state == "read" else ctx


def snapshot_of(t: Transport, backend: Proxmox | Lxc) -> Enter | None:
    """The snapshot whose containers' files with_snapshot_rootfs reads; None for a live host."""
    from .transport import RootDir

    return Enter(t, backend) if isinstance(t, RootDir) else None


def on_this_machine(t: Transport) -> bool:
    """The machine lxcfix runs on itself (not a snapshot, whose paths map into a directory)."""
    try:
        return bool(t.local) and t.local_path("/proc/1/root") == "/proc/1/root"
    except OSError:
        return False


def _why(e: Exception) -> str:
    return str(e) if isinstance(e, LxcfixError) else f"{type(e).__name__}: {e}"


# What a live apply repairs when the plan's change can be made live (the codes' records).
LIVE_FIXABLE = codes.where(live=True)


def mark_live_fixable(ctx: Context, planned: Context, findings) -> tuple[Finding, ...]:
    from .liveplan import live_ops

    ops = live_ops(ctx, planned)
    ok = ops.refuse is None
    return tuple(replace(f, live_fixable=ok) if f.code in LIVE_FIXABLE else f for f in findings)


def scan_host(t: Transport, backend: Proxmox | Lxc, cts: list[str] | None = None,
              style: str = "auto", facts: HostFacts | None = None, probe: bool = False,
              route: Route | None = None, keep_context: bool = False, batch: bool = True,
              swept: bool = False, inner: str | None = None, diffs: bool = True) -> HostReport:
    """probe: enter running containers (live hosts only) to probe them and read
    their device program; route: how (default backend.exec). keep_context: the
    reports keep the view they were judged in (the audit reads it), so no worker
    processes. batch: the probes of all running containers in one command
    (sweep.py), which a route (containers' own SSH) does not allow. swept: `t`
    answers from a sweep that read the containers' live state already. diffs: worker processes
    compute each plan's diff (the JSON shows it; a table does not, and then a plan's diff is made
    when it is first asked for)."""
    start = time.monotonic()
    facts = facts or gather.host_facts(t, backend)
    listed = backend.list(t)
    wanted = cts if cts else list(listed)
    loader = gather.include_loader(t)
    enter = Enter(t, backend, route, inner) if probe else None
    # Processes only where reading configs is local work: a forked SSH connection is not shared.
    workers = workers_for(len(wanted)) if enter is None and t.local and not facts.nodes_known \
        and not keep_context and only_thread() else 1
    if workers > 1:
        reports = _analyze_in_processes(facts, [(ct, listed.get(ct)) for ct in wanted], t, backend, style, workers,
                                        diffs)
        if cts is None:
            reports += unusable_reports(t, backend, facts.host)
        return HostReport(t.name, backend.name, facts, tuple(reports), seconds=time.monotonic() - start)
    loaded_all = [gather.load_container(t, backend, ct, listed.get(ct)) for ct in wanted]
    if facts.nodes_known:
        sources = [p for ld in loaded_all if ld.config is not None for p in gather.mount_sources(ld.config)]
        extra = {p: n for p, n in gather.source_nodes(t, sources).items() if p not in facts.nodes}
        if extra:
            facts = replace(facts, nodes={**facts.nodes, **extra})
    facts = gather.with_snippets(t, facts, [ld.config for ld in loaded_all if ld.config is not None])
    ctxs = {ld.ct: c for ld in loaded_all if ld.config is not None
            and (c := _context_or_none(facts, ld, loader, style)) is not None}
    notes: list[str] = []
    answered = False  # every probe answered by one sweep: no thread pool needed
    # One container on this machine: its probe and program directly (a sweep would only add
    # its own python3 start-up); over SSH, or for more, all in one command.
    # This machine's containers first at the namespace floor (lxcfix.floor: nothing exec'd per
    # container); the rest, and every remote host's, by the in-container probe.
    rest, view = ctxs, t
    if enter is not None and enter.route is None and batch and not swept and ctxs and on_this_machine(t):
        view, rest = _floor(t, backend, ctxs)
        enter = Enter(view, backend, inner=inner)
        answered = not rest
    if enter is not None and enter.route is None and batch and rest and (swept or not t.local or len(rest) > 1):
        view, why = _probe_in_one_go(view, backend, rest, swept)
        enter = Enter(view, backend, inner=inner)
        answered = why is None
        if why:
            notes.append(one_by_one(why))

    def analyze(loaded: gather.Loaded) -> CtReport:
        return analyze_container(facts, loaded, loader, style, enter, ctxs.get(loaded.ct),
                                 snapshot=snapshot_of(t, backend) if enter is None else None)

    # Probes of this machine's containers, when not swept, run a few at a time (each has its own
    # deadline, so a stuck one holds one worker, never the others' reports). A remote host's
    # containers are spread over threads by the fleet scan already (fleet.scan_one's per_host).
    parallel = min(probe_parallel(), len(loaded_all)) if enter is not None and t.local and not answered else 1
    if parallel > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(parallel, thread_name_prefix="lxcfix-probe") as pool:
            reports = list(pool.map(analyze, loaded_all))
    else:
        reports = [analyze(loaded) for loaded in loaded_all]
    if cts is None:  # every container of the host: those it cannot act on too, as LXF132
        reports += unusable_reports(t, backend, facts.host)
    return HostReport(t.name, backend.name, facts, tuple(reports), seconds=time.monotonic() - start,
                      notes=tuple(notes))


def unusable_reports(t: Transport, backend, host: str) -> tuple[CtReport, ...]:
    """A report for each container the host has whose name lxcfix cannot act on (backend.unusable):
    listed, under its name escaped for display, with an LXF132 finding saying why; nothing more
    is read or run for it."""
    from .bounded import excerpt

    try:
        odd = backend.unusable(t)
    except Exception:
        return ()
    out = []
    for name in sorted(odd):
        shown = excerpt(name, 200)
        path = f"{excerpt(getattr(backend, 'lxcpath', ''), 200)}/{shown}/config"
        f = codes.make("LXF132", shown, f"container '{shown}' not judged: {odd[name]}", evidence=(path,), host=host)
        out.append(CtReport(host, shown, path, (f,), error=f"not judged: {odd[name]}"))
    return tuple(out)


def _context_or_none(facts: HostFacts, loaded: gather.Loaded, loader, style: str) -> Context | None:
    """The container's view; None when making it fails (analyze_container reports why)."""
    try:
        return gather.context(facts, loaded, loader, requested=style)
    except Exception:
        return None


def one_by_one(why: str) -> str:
    """The note of a host the sweep could not read in one go."""
    return f"not read in one round trip ({why}); read command by command instead (slower)"


def _probe_in_one_go(t: Transport, backend, ctxs: dict[str, Context], swept: bool) -> tuple[Transport, str | None]:
    """Every running container's status, then all their probes in one command
    (sweep.py), as a transport that answers from them. The statuses come from
    the host's sweep (swept), else from a sweep of the live state first."""
    from . import sweep
    from .observe import probe_paths
    from .probe import probe_argv
    from .rules.access import requests
    from .transport import container_output_max, container_timeout

    if not ctxs:
        return t, None
    if not swept:
        t, why = gather.prefetch(t, sweep.Request(
            cts=list(ctxs), backend=backend.name, names={"pve": VMID.pattern, "lxc": LXC_NAME.pattern},
            **({"pve_dir": backend.pve_dir} if backend.name == "pve" else {"lxcpath": backend.lxcpath}),
            live={backend.name: backend.live_template()}))
        if why:
            return t, why
    status = {ct: backend.status(t, ct) for ct in ctxs}
    running = [ct for ct in ctxs if status[ct] == "running"]
    # The same argv analyze_container's probe will ask for, so the sweep answers it. A container
    # whose argv cannot be made is left out: its own probe (look_inside) reports why.
    batch = []
    for ct in running:
        try:
            batch.append(backend.exec(t, ct).wrap(probe_argv(probe_paths(ctxs[ct].effective), requests(ctxs[ct]))))
        except Exception:
            continue
    # A remote host's container files (with_rootfs), read there in the same sweep.
    rootfs = [] if on_this_machine(t) else [
        a for ct in ctxs if status[ct] in ("running", "stopped")
        and (a := _rootfs_ask(t, backend, ct, ctxs[ct], status[ct] == "running")) is not None]
    if not batch and not rootfs:
        return t, None
    return gather.prefetch(t, sweep.Request(batch=batch, rootfs=rootfs, timeout=container_timeout(),
                                            cap=container_output_max(), parallel=probe_parallel()))


def _floor(t: Transport, backend, ctxs: dict[str, Context]) -> tuple[Transport, dict[str, Context]]:
    """(a transport answering the floor's probes, the containers left to the in-container probe)."""
    from . import floor
    from .observe import probe_paths
    from .rules.access import requests

    if not floor.enabled():
        return t, ctxs
    wanted = {}
    for ct, ctx in ctxs.items():
        try:
            wanted[ct] = (probe_paths(ctx.effective), requests(ctx))
        except Exception:
            continue  # its own probe says why
    try:
        view, left = floor.floor_view(t, backend, wanted)
    except Exception:  # a bug here must not cost the scan: every container's own probe instead
        return t, ctxs
    return view, {ct: c for ct, c in ctxs.items() if ct in left or ct not in wanted}


def _rootfs_ask(t, backend, ct: str, ctx: Context, running: bool) -> list[str] | None:
    from .observe import rootfs_ask

    try:
        return rootfs_ask(t, backend, ct, ctx.config, running)
    except Exception:  # its own read (with_rootfs) says why, or reads nothing
        return None


# Containers of one host probed at once (LXCFIX_PROBE_PARALLEL).
PROBE_PARALLEL = 4


def probe_parallel() -> int:
    return min(int(env_number("LXCFIX_PROBE_PARALLEL", PROBE_PARALLEL)), 32)


# Below this many configs a second process costs more than it saves.
PARALLEL_MIN = 1500


def only_thread() -> bool:
    """Whether this process runs one thread, the one that forks. A child of fork() gets
    only the forking thread: a lock another thread held at that moment (memo.once's,
    logging's, a pool's) stays held in the child for good. A fleet scans hosts in threads,
    so there the configs are analysed in this process."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no procfs: the threads Python knows of
        import threading

        return threading.active_count() == 1


def workers_for(n: int) -> int:
    if n < PARALLEL_MIN:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), 8, n // (PARALLEL_MIN // 2)))


def _analyze_chunk(args, loader=None, diffs: bool = True) -> list[CtReport]:
    from .report import grouped

    facts, chunk, transport, backend, style = args
    loader = loader or gather.include_loader(transport)
    snapshot = snapshot_of(transport, backend)
    out = []
    for ct, path in chunk:
        loaded = gather.load_container(transport, backend, ct, path)
        if loaded.config is not None:
            facts = gather.with_snippets(transport, facts, [loaded.config])
        report = analyze_container(facts, loaded, loader, style, snapshot=snapshot)
        if diffs and report.plan is not None:
            report.plan.diff()  # computed here, in parallel; it travels back with the plan
        # The views stay in this process; the causes are grouped here, in parallel (pickle keeps
        # their symptoms the very findings of the report, so ids still match on the other side).
        out.append(replace(report, context=None, planned=None, causes=tuple(grouped(report, facts))))
    return out


# Configs per task of a worker process: small enough that results stream back while the
# workers go on (the parent unpickles one part while the next is analysed, instead of all
# of them at the end), large enough that a task's overhead does not count.
CHUNK = 250

# What every task of one worker process shares (set once per process, by _start_worker): the
# host's facts (whose memo then stays warm from one task to the next), the transport, the
# backend, the style and one include loader.
_WORKER: dict = {}


def _start_worker(facts, transport, backend, style, diffs: bool = True) -> None:
    _WORKER.clear()
    _WORKER.update(facts=facts, transport=transport, backend=backend, style=style,
                   loader=gather.include_loader(transport), diffs=diffs)


def _analyze_part(chunk) -> list[CtReport]:
    w = _WORKER
    return _analyze_chunk((w["facts"], chunk, w["transport"], w["backend"], w["style"]), w["loader"], w["diffs"])


def _analyze_in_processes(facts, targets, transport, backend, style, workers, diffs: bool = True) -> list[CtReport]:
    """Reading and analysing configs offline is CPU work: spread it over the
    cores (fork, so workers start with everything imported, and the facts, transport
    and backend are theirs without pickling). Order is kept."""
    import concurrent.futures
    import multiprocessing

    size = max(1, min(-(-len(targets) // workers), CHUNK))
    chunks = [targets[i:i + size] for i in range(0, len(targets), size)]
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker,
                                                initargs=(facts, transport, backend, style, diffs)) as pool:
        return [r for part in pool.map(_analyze_part, chunks) for r in part]
