"""Looking inside a running container: the probe (one exec) and the device
program on its cgroup. Thin I/O; the findings come from rules.probe and rules.live.

    probe, live = observe(transport, backend, "200", effective)
    probe.nodes["/dev/nvidia-uvm"].open == "EPERM"
    live.program.rules == (DeviceRule("c", 195, None, "rwm"), DeviceRule("c", 508, None, "rwm"), ...)
"""

from __future__ import annotations

from . import bpf
from . import probe as probe_mod
from .effective import Effective
from .model import ProbeResult
from .rules.live import Live
from .transport import Transport

PROBE_TIMEOUT = 60


def probe_paths(eff: Effective) -> list[str]:
    return sorted({"/" + g.target.lstrip("/") for g in eff.given})


def run_probe(t: Transport, backend, ct: str, paths: list[str]) -> ProbeResult:
    result = backend.exec(t, ct).run(probe_mod.probe_argv(paths), timeout=PROBE_TIMEOUT)
    if not result.ok and "end" not in result.stdout:
        raise ProbeFailed(f"probe in CT {ct} failed (exit {result.rc}): "
                          f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no output']}")
    return probe_mod.parse(result.stdout)


class ProbeFailed(RuntimeError):
    pass


def read_live(t: Transport, backend, ct: str) -> Live | None:
    """The program on the container's limit cgroup; None when it cannot be read.
    The init's own /proc/<pid>/cgroup comes first: LXC nests the container
    under the monitor's cgroup on some hosts (seen on a real GPU host:
    /sys/fs/cgroup/process_api/core/lxc.payload.NAME)."""
    proc_cgroup = None
    pid = backend.init_pid(t, ct)
    if pid is not None:
        try:
            proc_cgroup = t.read(f"/proc/{pid}/cgroup").decode("utf-8", "replace")
        except OSError:
            pass
    for cgroup in bpf.cgroup_candidates(backend.name, ct, proc_cgroup=proc_cgroup):
        out = bpf.read_programs(t, cgroup)
        if out.status in ("progs", "none"):
            return Live(cgroup, bpf.effective_of(out))
    return None


def observe(t: Transport, backend, ct: str, eff: Effective) -> tuple[ProbeResult, Live | None]:
    return run_probe(t, backend, ct, probe_paths(eff)), read_live(t, backend, ct)
