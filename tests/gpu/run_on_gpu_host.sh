#!/usr/bin/env bash
# Real-GPU proof for lxcfix: run on any host with an NVIDIA GPU and LXC, as root.
#
#   sudo tests/gpu/run_on_gpu_host.sh [OUTDIR] [--fake]
#
# Needs: root; LXC 5 (lxc-start, lxc-attach, lxc-info, lxc-stop, LXC's
# /usr/share/lxc/config/common.conf); bpftool; the NVIDIA driver loaded (nvidia,
# nvidia-uvm); python3 with lxcfix's dependencies (pip install . from this checkout, or
# PYTHONPATH). The host's python3 and NVIDIA userspace (libcuda.so.1, nvidia-smi) must be
# under /usr, since the test containers see the host's /usr read-only (a python3 under
# /opt is bind-mounted too when /usr has none).
#
# What it does (tests/gpu/gpu_proof.py; TESTING.md's recipe, tests/real/harness.py's containers):
#   1. host facts: /proc/devices (nvidia-uvm's dynamic major), driver version, nodes,
#      `lxcfix facts --json`; creates /dev/nvidia-uvm (nvidia-modprobe -u -c=0) if missing.
#   2. CT "uvm": given /dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools (bind,
#      optional,create=file) and /dev/nvidia-caps, allowed only `c 195:* rwm`.
#      Shows: a BPF device program is attached; inside cuInit = 999 while nvidia-smi -L works;
#      `lxcfix diagnose` (LXF100/LXF200/LXF210); `lxcfix apply --yes` restarts it; cuInit = 0.
#   3. CT "ctl": allowed `c 195:0 rwm` + nvidia-uvm's major: cuInit = 100, NVML "Unknown
#      Error" (LXF200 + LXF210 + LXF211); `lxcfix apply --style numeric --yes`; cuInit = 0.
#   4. CT "nocaps": as "uvm" but without /dev/nvidia-caps: what the probe reports then.
#   5. `lxcfix audit`: the numeric repair pins a dynamic major (LXF103).
# Every command and its output lands in OUTDIR (commands.log, one folder per container,
# host/, snapshot/ = a host snapshot for `lxcfix --root`, summary.json). The containers
# (lxf-<run id>-uvm/ctl/nocaps in /var/lib/lxc) are destroyed at the end; lxcfix's backups
# and journal go to OUTDIR/lxcfix-state (LXCFIX_STATE_DIR), not /var/lib/lxcfix.
# `lxcfix audit` reads every container in /var/lib/lxc (read-only): yours are listed too.
#
# Safety (shared/design/TESTING.md): containers get `lxc.net.0.type = empty` (own network
# namespace, loopback only) and `sleep infinity` as init; nothing touches the host network.
# If /sys/fs/cgroup is not a pure cgroup v2 mount (LXC would ignore cgroup2 device rules),
# the run moves into a private mount namespace with its own cgroup2 mount; the host's
# mounts are never changed.
#
# --fake: no GPU needed; driverless nodes (majors no driver owns) stand in for the NVIDIA
# ones, to check the flow on any LXC host. Exit code: 0 all checks passed, 1 some failed
# (summary.json says which), 2 cannot run here.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUTDIR=${1:-gpu-proof-$(date -u +%Y%m%dT%H%M%SZ)}
[ $# -gt 0 ] && shift
PYTHON=${PYTHON:-python3}

[ "$(id -u)" = 0 ] || { echo "run_on_gpu_host.sh: needs root" >&2; exit 2; }
for t in lxc-start lxc-attach lxc-info lxc-stop bpftool "$PYTHON"; do
  command -v "$t" >/dev/null 2>&1 || { echo "run_on_gpu_host.sh: $t not found" >&2; exit 2; }
done
"$PYTHON" -c 'import lxcfix.cli' || { echo "run_on_gpu_host.sh: lxcfix does not import (pip install . ?)" >&2; exit 2; }

layout=$("$PYTHON" -c 'from tests.real.harness import cgroup_layout; print(cgroup_layout())')
if [ "$layout" != v2 ]; then
  if [ -n "${LXCFIX_GPU_NS:-}" ]; then
    echo "run_on_gpu_host.sh: still no pure cgroup v2 mount (layout: $layout)" >&2; exit 2
  fi
  echo "run_on_gpu_host.sh: cgroup layout '$layout': moving into a private mount namespace with a cgroup2 mount" >&2
  exec unshare -m --propagation private env LXCFIX_GPU_NS=1 sh -c \
    'umount -l /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && exec "$@"' sh "$0" "$OUTDIR" "$@"
fi
exec "$PYTHON" tests/gpu/gpu_proof.py "$OUTDIR" "$@"
