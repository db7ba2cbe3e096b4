"""Looking inside a running container: the probe (one exec) and the device
program on its cgroup (the BPF reader). Thin I/O; the findings come from
rules.probe and rules.live, the decoding from lxcfix.bpf.

    probe, live = observe(transport, backend, "200", effective)
    probe.nodes["/dev/nvidia-uvm"].open == "EPERM"
    live.program.rules == (DeviceRule("c", 195, None, "rwm"), DeviceRule("c", 508, None, "rwm"), ...)
    read_live(Local(), "/sys/fs/cgroup/lxc.payload.web").allows("c", 511, 0) -> False
"""

from __future__ import annotations

import json
from dataclasses import replace


from . import bpf, memo
from . import probe as probe_mod
from .bpf import READER, READER_LIB, ReaderOutput, _bpftool_insns, effective_of, parse_reader
from .devices import LiveAllowlist
from .effective import Effective
from .errors import Unreachable
from .model import HOST_PYTHON, ProbeResult, Result
from .rules.live import Live
from .transport import Transport, container_output_max, container_timeout, python_of




@memo.once(maxsize=4)
def in_process(source: str, name: str) -> dict:
    """A reader script (the BPF reader, the rootfs reader) compiled once per process and run
    here on this machine, as the host-side command would run it: its namespace."""
    namespace: dict = {"__name__": name}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace

def probe_paths(eff: Effective) -> list[str]:
    return sorted({"/" + g.target.lstrip("/") for g in eff.given})


class ProbeFailed(RuntimeError):
    """The probe gave nothing to read: the container could not be entered, or the probe
    did not answer within its deadline. (Output that is there but unusable is not this:
    it is a ProbeResult whose `unusable` says what, LXF206.)"""


def run_probe(enter: Transport, ct: str, paths: list[str], access=(), *,
              timeout: float | None = None, max_output: int | None = None) -> ProbeResult:
    """The probe through `enter` (the container's transport), at most `timeout` seconds
    (container_timeout(): 30, LXCFIX_PROBE_TIMEOUT) and container_output_max() bytes of
    output (1 MiB, LXCFIX_PROBE_MAX_OUTPUT, or `max_output`, what a caller's budget has left:
    the command is killed past that). access:
    (group, path) pairs for its group-access check (rules.access.requests). Raises
    ProbeFailed, nothing else, for a probe that could not run or timed out."""
    timeout = timeout if timeout is not None else container_timeout()
    limit = max_output if max_output is not None else container_output_max()
    try:
        result = enter.run(probe_mod.probe_argv(paths, access), timeout=timeout, max_output=limit)
    except Unreachable as e:
        raise ProbeFailed(f"{enter.name}: {e}") from None
    if result.rc == 124:
        raise ProbeFailed(f"the probe in CT {ct} did not finish within {timeout:g}s (killed)")
    cut = bool(result.truncated) or result.rc == 125
    done = _ended(result.stdout)
    if not done and not cut and not result.ok:
        raise ProbeFailed(f"probe in CT {ct} failed (exit {result.rc}): {probe_mod.excerpt(result.tail(), 200)}")
    found = probe_mod.parse(result.stdout, limit=limit, truncated=cut)
    if not done and not cut:
        found = replace(found, unusable=found.unusable + (
            f"the probe exited {result.rc} without its 'end' line: its output is incomplete",))
    return found


def _ended(stdout: str) -> bool:
    """The probe's last line is `end` (what the script prints when it is done)."""
    return stdout.rstrip("\n").rsplit("\n", 1)[-1].rstrip("\r") == "end"


def read_container_live(t: Transport, backend, ct: str) -> Live | None:
    """The program on the container's limit cgroup; None when it cannot be read.
    The init's own /proc/<pid>/cgroup says where that is: LXC nests the container
    under the monitor's cgroup on some hosts (seen on a real GPU host:
    /sys/fs/cgroup/process_api/core/lxc.payload.NAME). Never the init's own cgroup
    below it: the container's root can move its init into a cgroup it made and attach
    a program there (Live.deeper says so), while the kernel still runs LXC's."""
    proc_cgroup = None
    pid = backend.init_pid(t, ct)
    if pid is not None:
        try:
            proc_cgroup = t.read(f"/proc/{pid}/cgroup").decode("utf-8", "replace")
        except OSError:
            pass
    for cgroup in bpf.cgroup_candidates(backend.name, ct, proc_cgroup=proc_cgroup):
        out = read_programs(t, cgroup)
        if out.status in ("progs", "none"):
            return _with_deeper(t, Live(cgroup, effective_of(out)),
                                bpf.deeper_cgroup(backend.name, ct, proc_cgroup))
    return None


def _with_deeper(t: Transport, live: Live, deeper: str | None) -> Live:
    """The live program, and the init's own cgroup below the limit one when a device program
    is attached there itself (the container's root put it there: reported, never read as LXC's)."""
    if deeper is None or deeper == live.cgroup:
        return live
    out = read_programs(t, deeper)
    if out.status != "progs" or out.scope != "direct":
        return live
    return replace(live, deeper=((deeper, effective_of(out)),))


def observe(t: Transport, backend, ct: str, eff: Effective, enter: Transport | None = None,
            access=()) -> tuple[ProbeResult, Live | None]:
    """The probe (through `enter`, default backend.exec) and the live program (through the host)."""
    enter = enter if enter is not None else backend.exec(t, ct)
    return run_probe(enter, ct, probe_paths(eff), access), read_container_live(t, backend, ct)


# ---------------------------------------------------------------- the BPF reader, run on a host

def read_here(cgroup_path: str) -> ReaderOutput:
    """The reader run in this process: on the local host it saves starting a
    second interpreter (part of every verify after an apply)."""
    lines, _ = in_process(READER_LIB, "lxcfix_bpf_reader")["report"](cgroup_path)
    return parse_reader("\n".join(lines))



def read_bpftool(transport: Transport, cgroup_path: str) -> ReaderOutput:
    """The same through bpftool (`cgroup show [effective]` + `prog dump xlated
    opcodes`), whose JSON gives every instruction's bytes."""

    def show(*extra: str) -> list[int] | None:
        r = transport.run(["bpftool", "-j", "cgroup", "show", cgroup_path, *extra], timeout=30)
        if not r.ok:
            return None
        try:
            rows = json.loads(r.stdout) if r.stdout.strip() else []
        except ValueError:
            return None
        return [int(p["id"]) for p in rows if isinstance(p, dict) and "device" in str(p.get("attach_type", ""))]

    ids = show()
    scope = "direct"
    if ids is None:
        return ReaderOutput("error", errno="EIO", message="bpftool cgroup show failed", via="bpftool")
    if not ids:
        scope, ids = "effective", show("effective") or []
    if not ids:
        return ReaderOutput("none", scope=scope, via="bpftool")
    progs = []
    for pid in ids:
        r = transport.run(["bpftool", "-j", "prog", "dump", "xlated", "id", str(pid), "opcodes"], timeout=30)
        try:
            progs.append((pid, _bpftool_insns(json.loads(r.stdout))))
        except (ValueError, KeyError, TypeError):
            return ReaderOutput("error", errno="EIO", message=f"bpftool prog dump xlated id {pid} failed",
                                via="bpftool")
    return ReaderOutput("progs", tuple(progs), scope, via="bpftool")


def read_programs(transport: Transport, cgroup_path: str) -> ReaderOutput:
    """The device programs of one cgroup: the python3 reader, then bpftool
    when python3 gives no clear answer (missing, unsupported arch, ...)."""
    if transport.local:  # the BPF syscalls can be made from this process
        out, r = read_here(cgroup_path), None
    else:
        r = transport.run([python_of(transport), "-c", READER, cgroup_path], timeout=30)
        out = parse_reader(r.stdout)
    if out.status in ("progs", "none"):
        return out
    if out.status == "error" and out.errno == "ENOENT":
        return out  # no such cgroup: bpftool will not find it either
    fallback = read_bpftool(transport, cgroup_path)
    if fallback.status in ("progs", "none"):
        return fallback
    if out.status == "error":
        return out
    detail = (r.stderr.strip() or out.message or f"rc {r.rc}") if r is not None else out.message
    return ReaderOutput("error", errno="EIO", via="python3", message=detail[:300])



def read_live(transport: Transport, cgroup_path: str) -> LiveAllowlist | None:
    """The live device policy of one cgroup, or None when no device program
    applies or it could not be read (read_programs() says which)."""
    return effective_of(read_programs(transport, cgroup_path))




# ---------------------------------------------------------------- one layer deeper, and the rootfs

def probe_inner(enter: Transport, ct: str, probe: ProbeResult, want: str, paths: list[str]) -> tuple:
    """The probe run inside the inner containers `want` names (lxcfix.nested.select), through
    the LXC container's own `docker exec`/`podman exec`/`runc exec` (transport.InnerExec), one
    after another within one budget for them all (nested.INNER_PROBED containers, the
    INNER_DEADLINE seconds, LXCFIX_INNER_DEADLINE, and INNER_OUTPUT bytes): each probe gets
    what is left of the deadline (at most its own, container_timeout()) and of the output
    (at most container_output_max()); its output is parsed and dropped. A name that matches
    nothing, a probe that cannot run, and the inner containers the budget leaves are
    InnerSeens with their error (LXF223), never an exception."""
    import time

    from .nested import INNER_DEADLINE, INNER_OUTPUT, Inner, InnerSeen, budget_spent, listed, select
    from .transport import InnerExec, env_number

    found = listed(probe.raw)
    chosen, missing = select(found, want)
    end = time.monotonic() + env_number("LXCFIX_INNER_DEADLINE", INNER_DEADLINE, float)
    left_bytes = INNER_OUTPUT
    seen = []
    for n, inner in enumerate(chosen):
        left = end - time.monotonic()
        why = budget_spent(n, left, left_bytes)
        if why is not None:
            seen.append(InnerSeen(inner, error=why, rest=tuple(chosen[n + 1:])))
            break
        try:
            got = run_probe(InnerExec(enter, inner), ct, paths, timeout=min(container_timeout(), left),
                            max_output=min(container_output_max(), left_bytes))
            left_bytes -= len(got.raw)
            seen.append(InnerSeen(inner, replace(got, raw="")))  # parsed: the text is not kept
        except ProbeFailed as e:
            seen.append(InnerSeen(inner, error=str(e)))
        except Exception as e:  # a bug or a hostile answer: that inner container's finding
            seen.append(InnerSeen(inner, error=f"{type(e).__name__}: {e}"))
    names = ", ".join(i.label for i in found[:20]) + (f" and {len(found) - 20} more" if len(found) > 20 else "") \
        if found else "none"
    for name in missing:
        runtime, _, base = name.rpartition(":")
        seen.append(InnerSeen(Inner(runtime or "?", "-", base),
                              error=f"no running inner container {name!r} (running: {names})"))
    return tuple(seen)


def rootfs_root(t: Transport, backend, ct: str, config, running: bool) -> tuple[str | None, str]:
    """(the directory on the host that is the container's /, why not). A running container's is
    /proc/<init pid>/root; a stopped one's only where it is a plain directory on the host (LXC's
    dir: rootfs, or a Proxmox container mounted with `pct mount`)."""
    if running:
        pid = backend.init_pid(t, ct)
        return (f"/proc/{pid}/root", "") if pid is not None else (None, f"CT {ct} runs, but its init's pid is unknown")
    if backend.name == "pve":
        vol = _pve_volume(t, backend, ct, config)
        if vol is None:
            return f"/var/lib/lxc/{ct}/rootfs", ""
        return (vol.path, "") if vol.kind != "none" else (None, f"not checked: CT {ct}'s rootfs: {vol.why}")
    value = (config.get("lxc.rootfs.path") or config.get("lxc.rootfs") or "").strip()
    if value.startswith("dir:"):
        value = value[4:]
    if not value.startswith("/") or ":" in value:
        return None, (f"CT {ct} is stopped and its rootfs ({probe_mod.excerpt(value or 'none', 80)}) is not a "
                      "directory on the host")
    return value, ""


def _pve_volume(t: Transport, backend, ct: str, config):
    """A stopped Proxmox container's root volume (volumes.stopped_volume) where lxcfix reads it
    itself (this machine, a snapshot); None: /var/lib/lxc/VMID/rootfs, where `pct mount` puts it
    (mounted so: read there), and always on a remote host (the sweep reads only that)."""
    from . import volumes

    if not t.local:
        return None
    try:
        if t.isdir(f"/var/lib/lxc/{ct}/rootfs/etc"):
            return None
    except Exception:
        pass
    return volumes.stopped_volume(t, backend, ct, config)


def first_exists() -> list[str]:
    """What the reader's first round looks for without reading: the container engines, and the
    two files that say a stopped container's rootfs is mounted at all."""
    from . import rootfs

    return [*rootfs.ENGINES, "/etc/passwd", "/etc/os-release"]


def reader_argv(root: str, files, exists, python: str = HOST_PYTHON, timeout: float | None = None) -> list[str]:
    """The rootfs reader as a command on a host that is not this machine, run by `python` (the
    host's: transport.python_of), each path read in a child killed after `timeout` seconds
    (container_timeout()); answered in the sweep's own process when the scan asked for it
    (sweep.Request.rootfs)."""
    from . import fence, rootfs

    timeout = container_timeout() if timeout is None else timeout
    return [python, "-c", fence.rootfs_command(), f"{timeout:g}", root, str(rootfs.FILE_MAX), str(len(files)),
            *files, *exists]


def rootfs_ask(t: Transport, backend, ct: str, config, running: bool) -> list[str] | None:
    """The first command read_rootfs runs for a container of a remote host (None: it runs none),
    for the scan to put into the sweep that probes the host's containers."""
    from . import rootfs

    root, _ = rootfs_root(t, backend, ct, config, running)
    return None if root is None else reader_argv(root, list(rootfs.FILES), first_exists(), python_of(t))


def read_rootfs(t: Transport, backend, ct: str, config, running: bool):
    """The files lxcfix's static checks read (rootfs.FILES) and whether a container engine is
    installed (rootfs.ENGINES), read inside the container's root (rootfs.READER: no symlink
    followed out of it, regular files only, bounded), never in this process: in a child killed
    after container_timeout() seconds (lxcfix.fence; a tenant's FUSE mount that never answers
    holds that child, not the scan). A read that timed out: "unreadable", its why naming the
    path ("not checked: reading ... timed out after 30 s"). Never raises."""
    from . import fence, nsprobe, rootfs
    from .transport import answered

    root, why = rootfs_root(t, backend, ct, config, running)
    if root is None:
        return rootfs.Rootfs("not-mounted" if not running else "unreadable", why=why)
    vol = _pve_volume(t, backend, ct, config) if backend.name == "pve" and not running else None
    mount = vol is not None and vol.kind in ("image", "block")
    here = root
    if t.local and not mount:
        try:  # a snapshot's container root lies inside the snapshot: a link out of it is not followed
            here = t.local_path(root)
        except Exception as e:
            return rootfs.Rootfs("unreadable", root, why=f"{root}: {probe_mod.excerpt(str(e), 200)}")
    daemon = None
    files, exists = list(rootfs.FILES), first_exists()
    # the package databases only where the reader runs in this process: their own cap
    # (megabytes) would not fit one command's output
    caps = {path: rootfs.PKG_MAX for path in rootfs.PACKAGE_DBS} if t.local and not mount else {}
    files += list(caps)
    timeout = container_timeout()
    for attempt in range(2):  # a second round for the runtimes daemon.json names
        try:
            key = nsprobe.rootfs_key(here, files, exists, caps, timeout) if t.local and not mount else ()
            if mount:
                from . import volumes

                r = t.run(volumes.mount_argv(vol, python_of(t), timeout, files, exists), timeout=timeout + 15,
                          max_output=8 * rootfs.FILE_MAX * 2)
            elif t.local and answered(t, key):  # read already, by the floor's program (lxcfix.floor)
                r = t.run(key)
            elif t.local:
                fenced = in_process(fence.rootfs_command(), "lxcfix_rootfs_reader")["fenced"]
                r = Result(*fenced(here, rootfs.FILE_MAX, files, exists, caps, timeout))
            else:
                r = t.run(reader_argv(root, files, exists, python_of(t), timeout), timeout=timeout + 15,
                          max_output=8 * rootfs.FILE_MAX * 2)
            if r.rc == 124 and r.stderr.startswith("not checked: "):
                why = r.stderr.strip().split("\n")[0]
                return rootfs.Rootfs("unreadable", root, why=probe_mod.excerpt(why, 400))
            if not r.ok:
                return rootfs.Rootfs("unreadable", root, why=f"the reader failed (exit {r.rc}): "
                                     f"{probe_mod.excerpt(r.tail(), 200)}")
            text = r.stdout
        except Exception as e:
            return rootfs.Rootfs("unreadable", root, why=f"{type(e).__name__}: {probe_mod.excerpt(str(e), 200)}")
        seen = rootfs.parse_reader(root, text, files, exists, caps)
        if seen.state != "read" or attempt or rootfs.DAEMON not in seen.files:
            break
        daemon = rootfs.daemon_runtimes(seen.files[rootfs.DAEMON])
        extra = [p for path in daemon.runtimes.values() for p in rootfs.runtime_paths(path)][:64]
        if not extra:
            break
        exists += extra
    if not running and seen.state == "read" and not ({"/etc/passwd", "/etc/os-release"} & seen.present):
        return rootfs.Rootfs("not-mounted", root, why=(
            f"CT {ct} is stopped and its rootfs is not mounted on the host ({root} holds no /etc/passwd)"
            + (f"; `pct mount {ct}` mounts it there" if backend.name == "pve" else "")))
    return seen
