"""Many hosts at once: an inventory in, one HostReport per host out, in inventory order.

    inv = inventory_io.load_file("inventory/prod.yaml")
    reports = scan_fleet(inv.hosts, concurrency=8, per_host=4, progress=bar.update)
    reports[2] == HostReport(host="pve3", backend="unknown", facts=None, error="connection refused ...",
                             findings=(Finding("LXF301", "error", ct="", message="connection refused ...", host="pve3"),))

Per host: connect (one SSH connection, ssh.Ssh), pick the backend (the
inventory's lxcfix_backend, else backends.detect), read the host facts once,
then scan.scan_host() over the containers in up to `per_host` chunks at once,
all sharing that connection and those facts. `concurrency` hosts are in
flight at most. A host that cannot be reached, or fails in any way, becomes a
host-level LXF301 report; the other hosts are not affected. fleet prints
nothing: `progress(host, done, total)` is called from the calling thread after
each host finishes. From 32 hosts up the hosts are spread over worker processes,
one per core (fleetpool.py), each holding its share of the connections.

Proxmox clusters: every node sees every node's configs under
/etc/pve/nodes/*/lxc, but device facts (majors, nodes, driver) belong to the
node a container runs on. So when scanning a cluster member, only containers
whose config is this node's are judged there: those under /etc/pve/lxc (on a
real node a link to its own nodes/<node>/lxc) or /etc/pve/nodes/<node>/lxc,
where <node> is the inventory's lxcfix_pve_node, else the host's /etc/hostname
(`hostname` when that is unreadable), short form.
A container on a node the inventory does not list is not judged anywhere.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

from . import codes, fleetpool, gather
from .backends import Lxc, Proxmox, choose
from .errors import BadInput, LxcfixError
from .inventory import HostEntry
from .scan import CtReport, HostReport, one_by_one, scan_host, unusable_reports
from .ssh import HostKeyUnknown, Ssh, SshOptions
from .transport import Cached, Failing, Local, Transport

Progress = Callable[[str, int, int], None]
Connect = Callable[[HostEntry], Transport]


# ----------------------------------------------------------------- connecting


class SshConnector:
    """connect(entry) for scan_fleet: Local for `ansible_connection: local`, else a connected Ssh.
    .container(host, entry, backend, ct) reaches one container the way the inventory says.

    `options` are the command line's (--known-hosts, --accept-new-host-keys, --ssh-config, ...),
    checked here, before any host is contacted (BadInput). An inventory cannot choose where
    root writes: its lxcfix_known_hosts is only an extra file to check keys against (accept-new
    writes the command line's file, else the user's), and its lxcfix_accept_new_host_keys can
    only narrow: false keeps that host strict; true alone trusts nothing (trusting a new host
    key is the decision of whoever runs lxcfix, not of an inventory that others may edit), so an
    unknown key stays refused and the reason says --accept-new-host-keys is needed.
    """

    def __init__(self, options: SshOptions = SshOptions()):
        self.options = options.check()

    def _ssh(self, name: str, entry: HostEntry, max_sessions: int | None = None, **kw) -> Ssh:
        options = self.options
        if entry.accept_new_host_keys is False and options.accept_new:
            options = replace(options, accept_new=False)
        if max_sessions is not None:
            options = replace(options, max_sessions=max_sessions)
        return Ssh(name, key_files=[entry.key_file] if entry.key_file else [], options=options,
                   known_hosts_extra=(entry.known_hosts,) if entry.known_hosts else (), python=entry.python, **kw)

    def __call__(self, entry: HostEntry) -> Transport:
        if entry.connection == "local":
            return Local(name=entry.name)
        t = self._ssh(entry.name, entry, hostname=entry.destination, port=entry.port, user=entry.user)
        try:
            return t.connect()
        except HostKeyUnknown as e:
            t.close()
            if entry.accept_new_host_keys and not self.options.accept_new:
                raise HostKeyUnknown(f"{e.reason}; lxcfix_accept_new_host_keys in the inventory alone "
                                     "trusts no key: the command line must say --accept-new-host-keys") from None
            raise
        except BaseException:
            t.close()
            raise

    def container(self, host: Transport, entry: HostEntry, backend: Proxmox | Lxc, ct: str) -> Transport:
        """See container_transport(); the container's Ssh is not connected yet."""
        addr = entry.ct_ssh.get(ct)
        if entry.container_access != "exec" and addr is not None:
            return self._ssh(f"{entry.name}/{ct}", entry, hostname=addr.host, port=addr.port,
                             user=addr.user or entry.user, max_sessions=2)
        if entry.container_access == "ssh":
            raise BadInput(f"{entry.source}: host {entry.name}: lxcfix_container_access is ssh "
                           f"but lxcfix_ct_ssh has no address for CT {ct}")
        return backend.exec(host, ct)


def ssh_connector(options: SshOptions | None = None, **fields) -> SshConnector:
    """SshConnector(options, with the SshOptions fields given by name replaced):
    ssh_connector(ssh_config=None, max_sessions=4) == SshConnector(SshOptions(ssh_config=None, max_sessions=4))."""
    return SshConnector(replace(options or SshOptions(), **fields))


def container_transport(host: Transport, entry: HostEntry, backend: Proxmox | Lxc, ct: str, *,
                        options: SshOptions | None = None, **fields) -> Transport:
    """How the probe enters one container of `entry`:
    - its own SSH when lxcfix_ct_ssh names it (and lxcfix_container_access is not exec):
      an Ssh named "<host>/<ct>" to that address (connects on first use);
    - else `pct exec` / `lxc-attach` through the host's transport (ContainerExec).
    lxcfix_container_access: ssh with no address for ct is a BadInput.
    options / SshOptions fields by name (known_hosts=, accept_new=, ssh_config=, ...) as for ssh_connector()."""
    return ssh_connector(options, **fields).container(host, entry, backend, ct)


# ----------------------------------------------------------------- one host


def unreachable(host: str, reason: str, seconds: float = 0.0) -> HostReport:
    """The report of a host that could not be scanned."""
    reason = " ".join(str(reason).split()) or "unreachable"
    return HostReport(host, backend="unknown", facts=None, error=reason, seconds=seconds,
                      findings=(codes.make("LXF301", "", f"host {host} not scanned: {reason}", host=host),))


def pick_backend(t: Transport, entry: HostEntry) -> Proxmox | Lxc:
    """lxcfix_backend when given, else backends.detect() (lxcfix_pve_dir / lxcfix_lxc_path honoured)."""
    return choose(t, entry.backend, entry.pve_dir, entry.lxc_path)


def node_name(t: Transport, entry: HostEntry) -> str | None:
    """This host's Proxmox node name: lxcfix_pve_node, else its /etc/hostname (a read, no
    command), else `hostname` run on it; short form."""
    if entry.pve_node:
        return entry.pve_node
    try:
        text = t.read("/etc/hostname").decode("utf-8", "replace")
    except OSError:
        text = ""
    name = text.strip().split(".")[0] if text.strip() and "\n" not in text.strip() else ""
    if not name:
        r = t.run(["hostname"], timeout=30)
        name = r.stdout.strip().split(".")[0] if r.ok else ""
    return name or None


def own_containers(backend: Proxmox | Lxc, listed: dict[str, str], node: str | None) -> dict[str, str]:
    """The containers judged on this host: for Proxmox, those whose config is this node's
    (/etc/pve/lxc/..., or /etc/pve/nodes/<node>/lxc/...); every one for plain LXC."""
    if backend.name != "pve":
        return dict(listed)
    return {ct: path for ct, path in listed.items() if backend.node_of(path) in (None, node)}


MAX_PER_CALL = 1000


def _chunks(items: list[str], n: int) -> list[list[str]]:
    n = max(1, min(n, len(items)))
    return [items[i::n] for i in range(n)]


Enter = Callable[[Transport, HostEntry, "Proxmox | Lxc", str], Transport]


def scan_one(entry: HostEntry, connect: Connect, *, per_host: int = 4, probe: bool = True,
             style: str = "auto", enter: Enter | None = None, keep_context: bool = False,
             upgrade: bool = False) -> HostReport:
    """Connect, scan, close. Never raises: any failure is the host's LXF301 report.
    enter(host, entry, backend, ct): how the probe reaches a container (default
    container_transport: its own SSH when the inventory says so, else lxc-attach).
    upgrade: also the facts only a kernel upgrade needs (gather.UPGRADE_ONLY; the audit
    asks for them, at the cost of more round trips)."""
    start = time.monotonic()
    try:
        t = connect(entry)
    except LxcfixError as e:
        return unreachable(entry.name, str(e), time.monotonic() - start)
    except Exception as e:  # a bug or an odd library error: this host's problem, not the fleet's
        return unreachable(entry.name, f"cannot connect: {type(e).__name__}: {e}", time.monotonic() - start)
    opened: list[Transport] = [t]
    lock = threading.Lock()
    try:
        # The first round trip reads the whole host (gather.sweep_request); anything it
        # did not cover is read on demand, and a host without python3 is read that way.
        request = gather.sweep_request(pve_dir=entry.pve_dir, lxcpath=entry.lxc_path, backend=entry.backend,
                                       cts=list(entry.containers) if entry.containers is not None else None,
                                       probe=probe)
        view, why = gather.prefetch(Cached(t), request)
        notes = () if why is None else (one_by_one(why),)
        backend = pick_backend(view, entry)
        facts = gather.host_facts(view, backend, upgrade=upgrade)
        listed = backend.list(view)
        node = node_name(view, entry) if backend.name == "pve" else None
        own = own_containers(backend, listed, node)
        wanted = [ct for ct in entry.containers if ct in own or ct not in listed] \
            if entry.containers is not None else list(own)
        if not wanted:
            odd = unusable_reports(view, backend, facts.host) if entry.containers is None else ()
            return HostReport(t.name, backend.name, facts, odd, seconds=time.monotonic() - start, notes=notes)
        route = None
        if probe and (entry.ct_ssh or entry.container_access == "ssh"):
            reach = enter or container_transport

            def route(host: Transport, ct: str) -> Transport:
                try:
                    target = reach(host, entry, backend, ct)
                except LxcfixError as e:
                    return Failing(f"{host.name}/{ct}", str(e))
                with lock:
                    opened.append(target)
                return target
        # chunks run the containers' probes in parallel; without probes a host is a few
        # cached SFTP reads, and every chunk would repeat scan_host's per-call commands.
        # Calls stay under MAX_PER_CALL configs: scan_host may fork processes for bigger
        # offline batches, and a live SSH connection must not be forked or pickled.
        # Probes through a swept host run in one command (scan_host's second round trip), so
        # one chunk; containers with their own SSH (route), and hosts read command by command,
        # are probed per_host at a time.
        batch = why is None
        n = per_host if probe and (route is not None or not batch) else 1
        chunks = _chunks(wanted, max(n, -(-len(wanted) // MAX_PER_CALL)))

        def part(chunk: list[str]) -> HostReport:
            return scan_host(view, backend, chunk, style, facts=facts, probe=probe, route=route,
                             keep_context=keep_context, batch=batch, swept=batch and probe)

        if len(chunks) == 1:
            parts = [part(chunks[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix=f"lxcfix-{entry.name}") as pool:
                parts = list(pool.map(part, chunks))
        by_ct: dict[str, CtReport] = {c.ct: c for p in parts for c in p.containers}
        containers = tuple(by_ct[ct] for ct in wanted if ct in by_ct)
        if entry.containers is None:  # every container: those whose name lxcfix cannot act on too (LXF132)
            containers += unusable_reports(view, backend, facts.host)
        host_notes = tuple(dict.fromkeys(notes + tuple(n for p in parts for n in p.notes)))
        return HostReport(t.name, backend.name, facts, containers, seconds=time.monotonic() - start,
                          notes=host_notes)
    except LxcfixError as e:
        return unreachable(entry.name, str(e), time.monotonic() - start)
    except Exception as e:
        return unreachable(entry.name, f"scan failed: {type(e).__name__}: {e}", time.monotonic() - start)
    finally:
        for transport in reversed(opened):
            try:
                transport.close()
            except Exception:
                pass


# ----------------------------------------------------------------- the fleet


def scan_fleet(inventory_hosts: Iterable[HostEntry], *, concurrency: int = 8, per_host: int = 4,
               probe: bool = True, style: str = "auto", progress: Progress | None = None,
               connect: Connect | None = None, enter: Enter | None = None,
               keep_context: bool = False, upgrade: bool = False, workers: int | None = None) -> list[HostReport]:
    """Scan every host, `concurrency` at a time, `per_host` containers of a host at a time.
    Returns one HostReport per host in inventory order; never raises for a host's failure.
    connect(entry) -> the host's Transport; enter: how probes reach containers (scan_one).
    workers: processes holding the connections (fleetpool); None: fleetpool.workers_for(hosts)
    when the scan can cross a process boundary (an SshConnector without accept-new, and enter
    None or its .container; no keep_context: the analysis views stay where they were made),
    else 1 (threads in this process, the only way for any other connect). An explicit
    workers > 1 is taken as it is, but for keep_context (the caller vouches that connect and
    enter pickle; where no worker can start, threads here)."""
    hosts = list(inventory_hosts)
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise BadInput(f"host names must be unique in a fleet scan: {', '.join(dup)}")
    if concurrency < 1 or per_host < 1:
        raise BadInput("--concurrency and per-host concurrency must be at least 1")
    connect = connect or ssh_connector(max_sessions=per_host)
    reports: dict[str, HostReport] = {}
    if not hosts:
        return []
    if workers is None:
        workers = fleetpool.workers_for(len(hosts)) if _crosses(connect, enter, keep_context) else 1
    if workers > 1 and len(hosts) > 1 and concurrency > 1 and not keep_context:
        scan = functools.partial(scan_one, connect=connect, per_host=per_host, probe=probe, style=style,
                                 enter=enter, keep_context=keep_context, upgrade=upgrade)
        try:
            return fleetpool.scan_in_processes(hosts, scan=scan, workers=min(workers, concurrency),
                                               concurrency=concurrency, progress=progress)
        except fleetpool.NoWorkers:
            pass  # not one process started: this process's threads, below
    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(hosts)), thread_name_prefix="lxcfix-host")
    try:
        futures = {pool.submit(scan_one, h, connect, per_host=per_host, probe=probe, style=style, enter=enter,
                               keep_context=keep_context, upgrade=upgrade): h for h in hosts}
        for done, fut in enumerate(as_completed(futures), 1):
            h = futures[fut]
            try:
                reports[h.name] = fut.result()
            except Exception as e:  # scan_one does not raise; belt and braces
                reports[h.name] = unreachable(h.name, f"scan failed: {type(e).__name__}: {e}")
            if progress is not None:
                progress(h.name, done, len(hosts))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C: hosts not started yet are dropped
        raise
    pool.shutdown(wait=True)
    return [reports[n] for n in names]


def _crosses(connect: Connect, enter: Enter | None, keep_context: bool) -> bool:
    """Whether scan_one with these can run in a worker process (pickled there, its report back).
    Not with accept-new: a new host key is appended to known_hosts under a lock of this process."""
    if keep_context or type(connect) is not SshConnector or connect.options.accept_new:
        return False
    return enter is None or (getattr(enter, "__self__", None) is connect
                             and getattr(enter, "__func__", None) is SshConnector.container)


__all__ = [
    "SshConnector",
    "container_transport",
    "node_name",
    "own_containers",
    "pick_backend",
    "scan_fleet",
    "scan_one",
    "ssh_connector",
    "unreachable",
]
