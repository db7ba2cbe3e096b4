"""This host's running containers probed at the namespace floor (nsprobe): found by file reads,
each looked at by a forked child, answered as the commands the scan would run.

    view, left = floor_view(Local(), backend, {"web": (["/dev/net/tun"], [])})
    view.run(["lxc-info", "-s", "-H", "-n", "web", "-P", "/var/lib/lxc"]).stdout == "RUNNING\\n"
    left == []    # containers for the in-container probe (not found running, NVIDIA nodes, ...)

Only for the machine lxcfix runs on (scan.on_this_machine): joining a namespace is a syscall here.
"""

from __future__ import annotations

import os

from . import nsprobe
from .model import Result
from .transport import Transport, container_output_max, container_timeout

PROBER_ENV = "LXCFIX_PROBER"  # "attach": every container probed by the in-container probe (lxc-attach)


def enabled() -> bool:
    """Whether scans use the floor (LXCFIX_PROBER=attach: the in-container probe for all, to compare)."""
    return os.environ.get(PROBER_ENV, "ns").strip().lower() != "attach"


def _read(path: str, cap: int = 65536) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, cap)
    except OSError:
        return None
    finally:
        os.close(fd)


def _pids(cgroup: str) -> list[int]:
    """The processes of `cgroup` and the cgroups below it (LOCATE_DIRS_MAX of them in all), by
    cgroup, shallowest first: the init is at the top on a plain container."""
    out, dirs = [], [cgroup]
    for d in dirs:
        data = _read(d + "/cgroup.procs", 1 << 20) or b""
        out += [int(w) for w in data.split() if w.isdigit() and len(w) <= 10]
        if len(dirs) < nsprobe.LOCATE_DIRS_MAX:  # a tenant's many cgroups cost a bounded search
            try:
                with os.scandir(d) as it:
                    below = [e.path for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                below = []
            dirs += below[:nsprobe.LOCATE_DIRS_MAX - len(dirs)]
    return out


def locate(backend, ct: str, depth: int) -> tuple[int, str] | None:
    """(init pid, payload cgroup) of a running container, from /sys/fs/cgroup and /proc alone; None
    when not found there (stopped, a cgroup path of its own, LXC nested under a monitor's cgroup):
    then lxc-info asks LXC. depth: the length of this process's own NSpid."""
    cgroup = nsprobe.payload_cgroup(backend.name, ct)
    lxcpath = getattr(backend, "lxcpath", None) or "/var/lib/lxc"
    for pid in _pids(cgroup):
        status = (_read(f"/proc/{pid}/status") or b"").decode("utf-8", "replace")
        if nsprobe.is_init(status, depth):
            parent = nsprobe.ppid(status)
            if parent and nsprobe.is_monitor(_read(f"/proc/{parent}/cmdline", 8192) or b"", lxcpath, ct):
                return pid, cgroup
            return None
    return None


def _rootfs_request() -> dict:
    """What observe.read_rootfs reads first of a running container's root, for the floor's program."""
    from . import fence, rootfs
    from .observe import first_exists

    return {"program": fence.rootfs_command(), "cap": rootfs.FILE_MAX,
            "files": [*rootfs.FILES, *rootfs.PACKAGE_DBS], "exists": first_exists(),
            "caps": {path: rootfs.PKG_MAX for path in rootfs.PACKAGE_DBS}}


def floor_view(t: Transport, backend, wanted: dict) -> tuple[Transport, list[str]]:
    """wanted: ct -> (paths, access pairs), what observe.run_probe would ask. Returns a transport that
    answers, for each container the floor probed, its status and init pid (lxc-info's argv) and its
    probe's argv (as observe.run_probe wraps it), and the containers it left to the in-container probe.
    The children are forked by one small interpreter started for them all (nsprobe.program)."""
    from .probe import probe_argv
    from .sweep import Answers
    from .transport import Prefetched, python_of

    depth = len(nsprobe.nspid((_read("/proc/self/status") or b"").decode("utf-8", "replace")) or (0,))
    runs: dict[tuple[str, ...], Result] = {}
    left: list[str] = []
    jobs, asked = [], []
    for ct, (paths, access) in wanted.items():
        if nsprobe.needs_inside(paths):
            left.append(ct)
            continue
        where = locate(backend, ct, depth)
        try:
            argv = tuple(backend.exec(t, ct).wrap(probe_argv(paths, access)))
        except Exception:  # its own probe (scan.look_inside) says why
            where = None
        if where is None:
            left.append(ct)
            continue
        pid, cgroup = where
        if (_read(cgroup + "/cgroup.freeze") or b"").strip() == b"1":
            # lxc-info says whether LXC froze it (then nothing is probed); running, its probe's answer:
            runs[argv] = Result(1, "", f"not checked: its cgroup {cgroup} is frozen (cgroup.freeze is 1)")
            continue
        jobs.append({"pid": pid, "cgroup": cgroup, "paths": list(paths), "access": [list(a) for a in access]})
        asked.append((ct, pid, argv))
    if jobs:
        timeout, cap = container_timeout(), container_output_max()
        rounds = -(-len(jobs) // nsprobe.PARALLEL)
        read = _rootfs_request()
        r = t.run([python_of(t), "-I", "-S", "-c", nsprobe.program()],
                  input=nsprobe.request(jobs, timeout, cap, read),
                  timeout=timeout * (rounds + len(jobs)) + 30,
                  max_output=(cap + 4096 + 2 * (read["cap"] * len(read["files"]) + sum(read["caps"].values()))) * 2 * len(jobs))
        for (ct, pid, argv), got in zip(asked, nsprobe.rootfs_of(r.stdout, len(jobs))):
            if got is not None:
                runs[nsprobe.rootfs_key(f"/proc/{pid}/root", read["files"], read["exists"], read["caps"], timeout)] = got
        for (ct, pid, argv), (status, data) in zip(asked, nsprobe.answers_of(r.stdout, len(jobs))):
            got = nsprobe.answer(status, data)
            if isinstance(got, str) or (status == "failed" and not data):
                left.append(ct)  # the floor could not answer: the in-container probe does
                continue
            runs[tuple(backend.status_argv(ct))] = Result(0, "RUNNING\n", "")
            runs[tuple(backend.pid_argv(ct))] = Result(0, f"{pid}\n", "")
            runs[argv] = got
    return Prefetched(t, Answers(runs=runs, done=True)), left
