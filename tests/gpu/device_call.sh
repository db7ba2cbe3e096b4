#!/usr/bin/env bash
# How the proof ran on this project's lent GPU machine (no registry reachable there):
#   tests/gpu/device_call.sh CARRY_DIR OUT
# inspects the machine, installs the carried LXC/bpftool and wheels (install_carried.sh),
# runs run_on_gpu_host.sh into /tmp/gpu-proof, and packs it as OUT/gpu-proof.tar.gz
# (plus OUT/summary.json, OUT/run-stdout.txt): few files, shallow, as the device tool returns.
set -u -o pipefail
CARRY=${1:?carry dir}; OUT=${2:?out dir}
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
P=/tmp/gpu-proof; rm -rf "$P"; mkdir -p "$P" "$OUT"
{
  echo "== os";       head -4 /etc/os-release; uname -a
  echo "== python";   command -v python3; python3 -V; ls -l /usr/bin/python3* 2>&1
  echo "== driver";   cat /proc/driver/nvidia/version; command -v nvidia-smi nvidia-modprobe
  echo "== devices";  grep -i -e nvidia -e '^Char' -e '^Block' /proc/devices; ls -ln /dev/nvidia* /dev/nvidia-caps 2>&1
  echo "== cgroup";   grep -e cgroup /proc/self/mountinfo; cat /proc/self/cgroup
  echo "== tools";    command -v lxc-start bpftool dpkg apt-get unshare; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "PATH=$PATH"
  cat /etc/ld.so.conf.d/*.conf 2>/dev/null; ldconfig -p | grep -e libcuda.so -e libnvidia-ml.so
  ls /proc/driver/nvidia/capabilities/ /proc/driver/nvidia/capabilities/mig 2>&1
  grep -e Modify -e DeviceFile /proc/driver/nvidia/params
} > "$P/inspect.txt" 2>&1
cat "$P/inspect.txt"
bash tests/gpu/install_carried.sh "$CARRY" > "$P/install.txt" 2>&1; rc=$?
cat "$P/install.txt"; echo "install rc=$rc"
export PYTHONPATH=/tmp/lxcfix-site${PYTHONPATH:+:$PYTHONPATH}
timeout 420 tests/gpu/run_on_gpu_host.sh "$P/run" 2>&1 | tee "$P/run-stdout.txt"; rc=$?
echo "run rc=$rc"
cp "$P/run-stdout.txt" "$P/run/summary.json" "$OUT/" 2>/dev/null
tar -C "$P" -czf "$OUT/gpu-proof.tar.gz" . && ls -la "$OUT"
exit $rc
