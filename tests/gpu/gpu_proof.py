#!/usr/bin/env python3
"""The real-GPU proof for lxcfix, run by tests/gpu/run_on_gpu_host.sh (read that first).

On a host with an NVIDIA GPU, its driver loaded, LXC 5 and a pure cgroup v2 /sys/fs/cgroup,
as root, this builds real LXC containers (tests/real/harness.py's recipe: own tiny rootfs,
/usr bind-mounted read-only from the host, LXC's common.conf, `lxc.net.0.type = empty`,
init `sleep infinity`) that are given the NVIDIA nodes but whose cgroup v2 device allowlist
lacks one of them, and drives lxcfix against them:

  uvm     allows c 195:* only (nvidia-uvm's dynamic major missing): cuInit 999, nvidia-smi works;
          `lxcfix diagnose`, then `lxcfix apply --yes` (style auto); cuInit 0 afterwards.
  ctl     allows c 195:0 + nvidia-uvm's major (nvidiactl 195:255 missing): cuInit 100, NVML
          "Unknown Error"; `lxcfix diagnose`, then `lxcfix apply --style numeric --yes`.
  nocaps  as uvm, without /dev/nvidia-caps passed in (what most guides do): what the probe
          says then (diagnose only).
  then    `lxcfix audit` (the numeric repair pins nvidia-uvm's dynamic major: LXF103),
          `lxcfix facts --json`.

Everything it runs and what that printed goes under OUTDIR (commands.log, one folder per
container, host/ facts, snapshot/ = a host snapshot for `--root`, summary.json). It keeps
going after a failed step and says so in summary.json ("failures"). Containers are destroyed
at the end, also on errors.

--fake: no GPU needed; driverless nodes (mknod, majors no driver owns) stand in for the
NVIDIA ones, so the flow (containers, lxcfix diagnose/apply/audit) can be checked anywhere
LXC runs. GPU results are then absent, of course.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from tests.real import harness as H  # noqa: E402  (the real tier's container recipe)
from lxcfix import bpf, devices, probe as P  # noqa: E402

CHECK_PY = r"""
import ctypes, errno, json, os, subprocess, sys
out = {"open": {}}
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
        out["open"][p] = "ok"
    except OSError as e:
        out["open"][p] = errno.errorcode.get(e.errno, str(e.errno))
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    out["libcuda"] = "not loadable: %s" % e
else:
    out["cuinit"] = cuda.cuInit(0)
    n = ctypes.c_int(-1)
    out["cuDeviceGetCount"] = [cuda.cuDeviceGetCount(ctypes.byref(n)), n.value]
try:
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    out["nvidia_smi_rc"] = r.returncode
    out["nvidia_smi_out"] = (r.stdout + r.stderr).strip()
except Exception as e:
    out["nvidia_smi"] = repr(e)
print(json.dumps(out, sort_keys=True))
"""

CUINIT_ONLY = r"""
import ctypes
print("cuinit %d" % ctypes.CDLL("libcuda.so.1").cuInit(0))
"""

NV_NODES = ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


class Proof:
    def __init__(self, out: str, fake: bool, lxcfix_cmd: list[str]):
        self.out = out
        self.fake = fake
        self.lxcfix = lxcfix_cmd
        self.failures: list[str] = []
        self.summary: dict = {"fake": fake, "run_id": H.RUN_ID, "containers": {}, "failures": self.failures}
        self.log = open(os.path.join(out, "commands.log"), "a")
        self.made: list[H.Container] = []
        self.env = dict(os.environ)
        self.env["LXCFIX_STATE_DIR"] = os.path.join(out, "lxcfix-state")  # backups/journal: here
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.dev = "/dev"
        self.fake_dir = None

    # ------------------------------------------------------------ running and saving
    def run(self, argv, save: str | None = None, timeout: float = 180, env=None, check=False):
        """Run argv, log it (commands.log) and optionally save stdout+stderr+rc to OUT/save."""
        t = time.monotonic()
        try:
            p = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                               timeout=timeout, stdin=subprocess.DEVNULL, env=env or self.env, cwd=REPO)
            rc, so, se = p.returncode, p.stdout, p.stderr
        except FileNotFoundError:
            rc, so, se = 127, "", f"{argv[0]}: not found"
        except subprocess.TimeoutExpired as e:
            rc, so, se = 124, (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
        dt = time.monotonic() - t
        shown = " ".join(shlex.quote(a) if len(a) < 200 else "'<script>'" for a in argv)
        self.log.write(f"\n$ {shown}\n# rc={rc} ({dt:.2f} s)\n{so}")
        if se:
            self.log.write(f"# stderr:\n{se}")
        self.log.flush()
        print(f"$ {shown[:160]}  -> rc {rc} ({dt:.1f} s)", flush=True)
        if save:
            self.write(save, so + (f"\n# stderr:\n{se}" if se else "") + f"\n# rc={rc}\n" if not save.endswith(".json") else so)
        if check and rc != 0:
            self.fail(f"{shown[:200]}: rc {rc}: {(se or so).strip()[-300:]}")
        return rc, so, se

    def write(self, rel: str, text: str) -> str:
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def copy(self, src: str, rel: str) -> None:
        try:
            with open(src, errors="replace") as f:
                self.write(rel, f.read())
        except OSError as e:
            self.write(rel, f"# cannot read {src}: {e}\n")

    def fail(self, what: str) -> None:
        print(f"FAILED: {what}", flush=True)
        self.failures.append(what)

    def expect(self, ok: bool, what: str) -> bool:
        print(("ok:     " if ok else "FAILED: ") + what, flush=True)
        self.log.write(f"# expect {'ok' if ok else 'FAILED'}: {what}\n")
        if not ok:
            self.failures.append(what)
        return ok

    def lx(self, *args, save=None, timeout=180):
        return self.run([*self.lxcfix, *args], save=save, timeout=timeout)

    # ------------------------------------------------------------ host
    def host(self) -> None:
        self.run(["uname", "-a"], save="host/uname.txt")
        self.copy("/etc/os-release", "host/os-release.txt")
        self.copy("/proc/devices", "host/proc-devices.txt")
        self.copy("/proc/self/mountinfo", "host/mountinfo.txt")
        self.copy("/proc/driver/nvidia/version", "host/nvidia-version.txt")
        self.copy("/proc/driver/nvidia/params", "host/nvidia-params.txt")
        caps = []
        for root, _dirs, files in os.walk("/proc/driver/nvidia/capabilities"):
            for name in sorted(files):
                p = os.path.join(root, name)
                try:
                    caps.append(f"== {p}\n{open(p).read()}")
                except OSError as e:
                    caps.append(f"== {p}: {e}\n")
        self.write("host/nvidia-capabilities.txt", "".join(caps))
        self.run(["lxc-start", "--version"], save="host/lxc-version.txt")
        self.run(["bpftool", "version"], save="host/bpftool-version.txt")
        self.run(["sh", "-c", "command -v nvidia-smi python3; readlink -f $(command -v python3);"
                  " ls -l /usr/bin/python3* 2>&1; echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH; echo PATH=$PATH;"
                  " ldconfig -p | grep -E 'libcuda|libnvidia-ml'"], save="host/userspace.txt")
        if self.fake:
            self.fake_nodes()
        else:
            if not os.path.exists("/dev/nvidia-uvm"):
                self.run(["nvidia-modprobe", "-u", "-c=0"], save="host/nvidia-modprobe.txt")
            # nvidia-smi as root creates /dev/nvidia-caps/nvidia-cap1,2 (MIG config/monitor) if missing
            self.run(["nvidia-smi", "-L"], save="host/nvidia-smi-L.txt")
            self.run([sys.executable, "-c", CHECK_PY, *[f"/dev/{n}" for n in NV_NODES]],
                     save="host/host-check.json")
        self.run(["sh", "-c", f"ls -ln {self.dev}/nvidia* {self.dev}/nvidia-caps/ 2>&1"], save="host/dev-nvidia.txt")
        self.run(self.lxcfix + ["facts", "--json"], save="host/lxcfix-facts.json")
        self.run(self.lxcfix + ["facts"], save="host/lxcfix-facts.txt")
        char, _ = devices.parse_proc_devices(open(self.proc_devices()).read())
        self.uvm_major = (char.get("nvidia-uvm") or (None,))[0]
        self.caps_major = (char.get("nvidia-caps") or (None,))[0]
        self.summary["host"] = {"nvidia-uvm": self.uvm_major, "nvidia-caps": self.caps_major,
                                "driver": _first_line("/proc/driver/nvidia/version")}
        self.expect(self.uvm_major is not None, f"the host's /proc/devices names nvidia-uvm (major {self.uvm_major})")

    def proc_devices(self) -> str:
        return self.env.get("LXCFIX_PROC_DEVICES") or "/proc/devices"

    def fake_nodes(self) -> None:
        """Driverless stand-ins: majors no driver owns here, named in a private proc/devices."""
        d = self.fake_dir = f"/var/lib/lxcfix-gpu-fake-{H.RUN_ID}"  # not /run: nodev
        os.makedirs(d + "/nvidia-caps", exist_ok=True)
        used = H.char_majors_in_use()
        free = [m for m in range(511, 383, -1) if m not in used]
        nv, uvm, caps = (195 if 195 not in used else free.pop()), free.pop(0), free.pop(0)
        H.mknod(f"{d}/nvidia0", nv, 0)
        H.mknod(f"{d}/nvidiactl", nv, 255)
        H.mknod(f"{d}/nvidia-uvm", uvm, 0)
        H.mknod(f"{d}/nvidia-uvm-tools", uvm, 1)
        H.mknod(f"{d}/nvidia-caps/nvidia-cap1", caps, 1, mode=0o400)
        text = open("/proc/devices").read().replace(
            "\nBlock devices:", f"{nv} nvidia\n{nv} nvidiactl\n{uvm} nvidia-uvm\n{caps} nvidia-caps\n\nBlock devices:")
        self.write("host/fake-proc-devices.txt", text)
        self.env["LXCFIX_PROC_DEVICES"] = os.path.join(self.out, "host/fake-proc-devices.txt")
        self.dev = d
        self.fake_195 = nv

    # ------------------------------------------------------------ containers
    def mounts(self, caps: bool) -> list[str]:
        lines = [f"lxc.mount.entry = {self.dev}/{n} dev/{n} none bind,optional,create=file"
                 for n in NV_NODES]
        if caps:
            lines.append(f"lxc.mount.entry = {self.dev}/nvidia-caps dev/nvidia-caps none bind,optional,create=dir")
        return lines

    def extra_base(self) -> list[str]:
        lines = []
        try:
            if open("/sys/module/apparmor/parameters/enabled").read().strip() == "Y":
                lines.append("lxc.apparmor.profile = unconfined")
        except OSError:
            pass
        # `/usr usr none bind,ro` does not bring mounts below /usr (a driver image on
        # /usr/local/nvidia, say): bind each of them too, read-only
        for mp in sorted(_mounts_below("/usr")):
            lines.append(f"lxc.mount.entry = {mp} {mp.lstrip('/')} none bind,ro,optional,create=dir 0 0")
        py = os.path.realpath(shutil.which("python3", path="/usr/bin") or "/nonexistent")
        if not os.path.exists("/usr/bin/python3") or not py.startswith("/usr/"):
            # the container sees the host's /usr only: bring /opt's python3 too, read-only
            lines.append("lxc.mount.entry = /opt opt none bind,ro,optional,create=dir 0 0")
        return lines

    def make(self, tag: str, rules: list[str], caps: bool = True) -> H.Container:
        name = f"lxf-{H.RUN_ID}-{tag}"
        c = H.make_container(self.extra_base() + rules + self.mounts(caps), name=name, start=False)
        self.made.append(c)
        # the host's dynamic-loader cache, as a container with the driver's userspace has:
        # libcuda/libnvidia-ml may sit in a directory only ld.so.conf names (/usr/local/nvidia/lib64)
        for f in ("ld.so.cache", "ld.so.conf"):
            if os.path.isfile(f"/etc/{f}"):
                shutil.copy2(f"/etc/{f}", os.path.join(c.rootfs, "etc", f))
        if os.path.isdir("/etc/ld.so.conf.d"):
            shutil.copytree("/etc/ld.so.conf.d", os.path.join(c.rootfs, "etc/ld.so.conf.d"), dirs_exist_ok=True)
        self.copy(c.config_path, f"{tag}/config.before")
        try:
            c.start()
        except Exception as e:
            self.fail(f"{tag}: start: {e}")
        self.copy(c.log_path, f"{tag}/lxc-start.log")
        return c

    def paths(self, caps: bool) -> list[str]:
        out = [f"/dev/{n}" for n in NV_NODES]
        if caps:
            d = f"{self.dev}/nvidia-caps"
            try:
                out += sorted(f"/dev/nvidia-caps/{n}" for n in os.listdir(d))
            except OSError:
                pass
        return out

    def bpf_state(self, c: H.Container, tag: str, when: str) -> dict:
        """bpftool view + lxcfix's own reader (raw hex) + its decoding."""
        cg = _safe(c.cgroup_path) or bpf.cgroup_candidates("lxc", c.name)[-1]
        state: dict = {"cgroup": cg}
        self.run(["bpftool", "cgroup", "show", cg], save=f"{tag}/bpftool-cgroup-{when}.txt")
        progs = H.bpf_programs(cg)
        state["bpftool_progs"] = progs
        dumps, jdumps = [], []
        for p in progs:
            if p.get("attach_type") in ("cgroup_device", "device"):
                _, so, _ = self.run(["bpftool", "prog", "dump", "xlated", "id", str(p["id"])])
                dumps.append(f"# prog {p['id']}\n{so}")
                _, so, _ = self.run(["bpftool", "-j", "prog", "dump", "xlated", "id", str(p["id"]), "opcodes"])
                jdumps.append(so.strip())
        self.write(f"{tag}/bpf-{when}.xlated", "".join(dumps))
        self.write(f"{tag}/bpf-{when}.bpftool.json", "[" + ",".join(j for j in jdumps if j) + "]\n")
        rc, so, _ = self.run([sys.executable, "-c", bpf.READER, cg])
        self.write(f"{tag}/bpf-{when}.reader", so)
        out = bpf.parse_reader(so)
        live = bpf.effective_of(out)
        state["reader_status"] = out.status
        state["attached"] = bool(progs) or out.status == "progs"
        if live is not None:
            state["mode"] = live.mode
            state["rules"] = bpf.describe(live.rules)
            state["unknown"] = live.unknown
            if self.uvm_major is not None:
                state["allows_uvm"] = live.allows("c", self.uvm_major, 0, "rw")
            state["allows_ctl"] = live.allows("c", getattr(self, "fake_195", 195), 255, "rw")
            state["allows_gpu0"] = live.allows("c", getattr(self, "fake_195", 195), 0, "rw")
        self.write(f"{tag}/bpf-{when}.decoded.json", json.dumps(state, indent=1, sort_keys=True) + "\n")
        return state

    def raw_probe(self, c: H.Container, tag: str, when: str, caps: bool) -> dict:
        """lxcfix's probe script, run by hand (raw output kept), before anything else touches
        the container: libcuda/NVML running as root may create missing nodes."""
        paths = self.paths(caps)
        self.run(["lxc-attach", "-n", c.name, "--", "sh", "-c", "ls -ln /dev /dev/nvidia-caps 2>&1"],
                 save=f"{tag}/dev-{when}.txt")
        rc, so, se = self.run(["lxc-attach", "-n", c.name, "--", *P.probe_argv(paths)])
        self.write(f"{tag}/probe-{when}.txt", so)
        if se.strip():
            self.write(f"{tag}/probe-{when}.stderr", se)
        parsed = P.parse(so)
        return {"nodes": {p: n.open for p, n in parsed.nodes.items()}, "cuinit": parsed.cuinit,
                "nvidia_smi_rc": parsed.nvidia_smi_rc, "nvidia_smi_out": parsed.nvidia_smi_out,
                "driver": parsed.driver_version,
                "skipped": [l for l in parsed.raw.splitlines() if l.startswith("gpu skipped")]}

    def check(self, c: H.Container, tag: str, when: str, caps: bool) -> dict:
        """Our own look, after lxcfix's: open() each node, cuInit(0) via ctypes, nvidia-smi -L."""
        paths = self.paths(caps)
        rc, so, se = self.run(["lxc-attach", "-n", c.name, "--", "python3", "-I", "-c", CHECK_PY, *paths],
                              save=f"{tag}/check-{when}.json")
        try:
            check = json.loads(so.strip().splitlines()[-1])
        except (ValueError, IndexError):
            check = {"error": f"rc {rc}: {se.strip()[-300:]}"}
        self.run(["lxc-attach", "-n", c.name, "--", "sh", "-c", "ls -ln /dev /dev/nvidia-caps 2>&1"],
                 save=f"{tag}/dev-{when}-after-check.txt")
        return check

    def diagnose(self, c: H.Container, tag: str, when: str) -> list[str]:
        self.lx("diagnose", "--ct", c.name, save=f"{tag}/diagnose-{when}.txt")
        rc, so, _ = self.lx("diagnose", "--ct", c.name, "--json", save=f"{tag}/diagnose-{when}.json")
        try:
            doc = json.loads(so)
            return [f["code"] for ct in doc["containers"] for f in ct["findings"]]
        except (ValueError, KeyError, TypeError):
            self.fail(f"{tag}: diagnose --json did not give JSON")
            return []

    def case(self, tag: str, rules: list[str], style: str | None, caps: bool = True,
             want_cuinit: int | None = None, want_codes: tuple = (), want_smi: str | None = None) -> None:
        s: dict = {"rules": rules, "style": style, "caps_passed": caps}
        self.summary["containers"][tag] = s
        c = self.make(tag, rules, caps)
        s["name"] = c.name
        if not c.running():
            self.fail(f"{tag}: container not running")
            return
        s["bpf_before"] = st = self.bpf_state(c, tag, "before")
        self.expect(st["attached"], f"{tag}: a cgroup device program is attached to {st['cgroup']}")
        s["probe_before"] = self.raw_probe(c, tag, "before", caps)
        s["codes_before"] = codes = self.diagnose(c, tag, "before")
        if not caps:
            # Which GPU call creates the missing /dev/nvidia-caps nodes (the probe's gate skips
            # both when they are missing): cuInit alone first, then the full check (nvidia-smi).
            rc, so, se = self.run(["lxc-attach", "-n", c.name, "--", "python3", "-I", "-c", CUINIT_ONLY],
                                  save=f"{tag}/cuinit-only-before.txt")
            s["cuinit_only"] = so.strip()
            _, so, _ = self.run(["lxc-attach", "-n", c.name, "--", "sh", "-c", "ls -ln /dev /dev/nvidia-caps 2>&1"],
                                save=f"{tag}/dev-before-after-cuinit-only.txt")
            s["caps_after_cuinit_only"] = "nvidia-cap1" in so or "nvidia-cap2" in so
        s["check_before"] = check = self.check(c, tag, "before", caps)
        if not caps:
            _, so, _ = self.run(["lxc-attach", "-n", c.name, "--", "sh", "-c", "ls /dev/nvidia-caps/ 2>/dev/null"])
            s["caps_after_nvidia_smi"] = "nvidia-cap" in so
        if not self.fake and want_cuinit is not None:
            self.expect(check.get("cuinit") == want_cuinit,
                        f"{tag}: cuInit inside = {check.get('cuinit')} (want {want_cuinit}); "
                        f"nvidia-smi -L rc {check.get('nvidia_smi_rc')}: {check.get('nvidia_smi_out', '')[:80]!r}")
        if not self.fake and want_smi is not None:
            self.expect(want_smi in check.get("nvidia_smi_out", ""),
                        f"{tag}: nvidia-smi -L inside says {want_smi!r} ({check.get('nvidia_smi_out', '')[:80]!r})")
        for code in want_codes:
            self.expect(code in codes, f"{tag}: lxcfix diagnose reports {code} (got {sorted(set(codes))})")
        if style is None:
            return
        self.lx("plan", "--ct", c.name, "--style", style, save=f"{tag}/plan.txt")
        pid0 = _safe(c.init_pid)
        rc, _, _ = self.lx("apply", "--ct", c.name, "--yes", "--style", style, save=f"{tag}/apply.txt", timeout=240)
        self.expect(rc == 0, f"{tag}: lxcfix apply --style {style} --yes exits 0 (rc {rc})")
        self.copy(c.config_path, f"{tag}/config.after")
        s["restarted"] = pid0 != _safe(c.init_pid)
        s["bpf_after"] = self.bpf_state(c, tag, "after")
        s["probe_after"] = self.raw_probe(c, tag, "after", caps)
        s["codes_after"] = codes = self.diagnose(c, tag, "after")
        s["check_after"] = check = self.check(c, tag, "after", caps)
        if not self.fake:
            self.expect(check.get("cuinit") == 0, f"{tag}: cuInit inside after apply = {check.get('cuinit')} (want 0); "
                        f"nvidia-smi -L rc {check.get('nvidia_smi_rc')}")
        self.expect(not [x for x in codes if x.startswith("LXF2")], f"{tag}: no probe findings after apply ({codes})")

    # ------------------------------------------------------------ snapshot for --root replays
    def snapshot(self) -> None:
        snap = os.path.join(self.out, "snapshot")
        for tag, s in self.summary["containers"].items():
            src = os.path.join(self.out, tag, "config.before")
            if "name" in s and os.path.exists(src):
                d = os.path.join(snap, "var/lib/lxc", s["name"])
                os.makedirs(d, exist_ok=True)
                shutil.copy(src, os.path.join(d, "config"))
        pd = self.proc_devices()
        for src, rel in ((pd, "proc/devices"), ("/proc/driver/nvidia/version", "proc/driver/nvidia/version"),
                         ("/proc/self/mountinfo", "proc/self/mountinfo"), (H.COMMON_CONF, H.COMMON_CONF.lstrip("/"))):
            if os.path.exists(src):
                os.makedirs(os.path.dirname(os.path.join(snap, rel)), exist_ok=True)
                shutil.copy(src, os.path.join(snap, rel))
        _, so, _ = self.run(["lxc-start", "--version"])
        self.write("snapshot/.lxcfix/lxc-start", so)

    def cleanup(self) -> None:
        for c in reversed(self.made):
            try:
                c.destroy()
            except Exception as e:
                self.fail(f"cleanup {c.name}: {e}")
        if self.fake_dir:
            shutil.rmtree(self.fake_dir, ignore_errors=True)
        left = [n for n in os.listdir(H.LXCPATH) if n.startswith(f"lxf-{H.RUN_ID}-")] if os.path.isdir(H.LXCPATH) else []
        self.expect(not left, f"cleanup: no container of this run left ({left})")

    # ------------------------------------------------------------ all
    def main(self) -> int:
        try:
            self.host()
            uvm = self.uvm_major
            u = f"c {uvm}:* rwm"
            nv = getattr(self, "fake_195", 195)
            self.case("uvm", [f"lxc.cgroup2.devices.allow = c {nv}:* rwm"], "auto",
                      want_cuinit=999, want_smi="GPU 0:",
                      want_codes=("LXF100", "LXF200") + (() if self.fake else ("LXF210",)))
            self.case("ctl", [f"lxc.cgroup2.devices.allow = c {nv}:0 rwm", f"lxc.cgroup2.devices.allow = {u}"],
                      "numeric", want_cuinit=100, want_smi="Unknown Error",
                      want_codes=("LXF100", "LXF200") + (() if self.fake else ("LXF210", "LXF211")))
            self.case("nocaps", [f"lxc.cgroup2.devices.allow = c {nv}:* rwm"], None, caps=False,
                      want_codes=("LXF100", "LXF200"))
            self.lx("audit", save="audit.txt")
            rc, so, _ = self.lx("audit", "--json", save="audit.json")
            try:
                doc = json.loads(so)
                by_ct = {c["ct"]: [f["code"] for f in c["findings"]] for c in doc["containers"]}
            except (ValueError, KeyError, TypeError):
                by_ct = {}
            self.summary["audit"] = by_ct
            ctl = self.summary["containers"].get("ctl", {}).get("name")
            self.expect("LXF103" in by_ct.get(ctl, []), f"audit flags LXF103 on the numeric repair ({ctl}: {by_ct.get(ctl)})")
            self.lx("audit", "--for", "driver-upgrade", save="audit-driver-upgrade.txt")
            self.lx("scan", "--no-probe", save="scan-no-probe.txt")
            self.snapshot()
            self.lx("scan", "--root", os.path.join(self.out, "snapshot"), "--json", save="snapshot-scan.json")
        except Exception:
            self.fail("exception: " + traceback.format_exc())
        finally:
            self.cleanup()
            state = os.path.join(self.out, "lxcfix-state", "journal.jsonl")
            if os.path.exists(state):
                self.copy(state, "journal.jsonl")
            self.write("summary.json", json.dumps(self.summary, indent=1, sort_keys=True, default=str) + "\n")
            self.log.close()
        print(json.dumps({"failures": self.failures}, indent=1))
        return 1 if self.failures else 0


def _mounts_below(top: str) -> set[str]:
    out = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp.startswith(top + "/") and "\\" not in mp and " " not in mp:
                out.add(mp)
    return out


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


def _first_line(path: str) -> str | None:
    try:
        return open(path).readline().strip()
    except OSError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("--fake", action="store_true", help="driverless stand-in nodes: no GPU needed")
    a = ap.parse_args()
    reason = H.unavailable_reason()
    if reason:
        print(f"gpu_proof: {reason}", file=sys.stderr)
        return 2
    if not a.fake and not os.path.exists("/proc/driver/nvidia/version"):
        print("gpu_proof: no NVIDIA driver loaded (/proc/driver/nvidia/version); --fake runs without", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    cmd = shlex.split(os.environ.get("LXCFIX_CMD", "")) or [sys.executable, "-m", "lxcfix"]
    return Proof(os.path.abspath(a.out), a.fake, cmd).main()


if __name__ == "__main__":
    sys.exit(main())
