"""The in-container probe: the real script under busybox sh, dash and bash; parse; classify.

Ground truth: fixtures/ground-truth/nvidia-h200-cgroup-deny.json, a copy of
shared/ground-truth/nvidia-h200-cgroup-deny.json (one NVIDIA node denied at a
time on a real H200) and fixtures/probe/h200-measured-*.txt (the script's own output there).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import probe
from lxcfix.errors import BadInput
from lxcfix.model import ProbeNode, ProbeResult

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "probe"
# A copy of shared/ground-truth/nvidia-h200-cgroup-deny.json, carried so a plain clone runs (README there).
GROUND_TRUTH = HERE / "fixtures" / "ground-truth" / "nvidia-h200-cgroup-deny.json"

SHELLS = {"busybox": ("busybox", "sh"), "dash": ("dash",), "bash": ("bash",)}
IS_ROOT = os.geteuid() == 0


# --- running the real script ----------------------------------------------------------------

@pytest.fixture(params=sorted(SHELLS))
def shell(request) -> list[str]:
    argv = SHELLS[request.param]
    exe = shutil.which(argv[0])
    if exe is None:
        pytest.skip(f"{argv[0]} is not installed (apt-get install busybox dash)")
    return [exe, *argv[1:]]


def fallback_path(shell: list[str], where: Path) -> str:
    """A PATH with no python3: the script's sh-only branch. busybox gets busybox applets only
    (an Alpine-like container); dash and bash get coreutils."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "stat", "timeout", "readlink"):
        if Path(shell[0]).name == "busybox":
            target = shell[0]
        else:
            target = shell[0] if tool == "sh" else shutil.which(tool)
        (bin_dir / tool).symlink_to(target)
    return str(bin_dir)


@pytest.fixture(params=["python3", "sh-only"])
def variant(request) -> str:
    if request.param == "python3" and shutil.which("python3") is None:
        pytest.skip("no python3 on PATH")
    return request.param


def run_script(shell: list[str], paths: list[str], *, cwd: Path, path_env: str | None = None,
               text: str | None = None, extra_env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    argv = probe.probe_argv(paths)
    assert argv[:2] == ["sh", "-c"] and argv[3] == "lxcfix-probe"
    if text is not None:
        argv[2] = text
    env = dict(os.environ)
    if path_env is not None:
        env["PATH"] = path_env
    env.update(extra_env or {})
    return subprocess.run([*shell, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, **kw)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root, with what a write would change."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            out[os.path.relpath(p, root)] = (s.st_ino, s.st_mode, s.st_size, s.st_mtime_ns, s.st_ctime_ns)
    return out


WEIRD = "a b $(touch pwned) `touch pwned2`; x'\"*?[ |&>pwned3"


@pytest.fixture
def tree():
    """A world-traversable temp dir (the EACCES test runs as nobody) with things to probe."""
    root = Path(tempfile.mkdtemp(prefix="lxcfix-probe-", dir="/tmp"))
    root.chmod(0o755)
    (root / "file").write_text("")
    (root / "file").chmod(0o000)  # what a failed optional,create=file bind leaves
    (root / "dir").mkdir()
    (root / WEIRD).write_text("x")
    (root / "dangling").symlink_to(root / "nothere")
    work = root / "cwd"
    work.mkdir()
    yield root
    shutil.rmtree(root)


def mknod(path: Path, mode: int, major: int, minor: int) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod not permitted here")
    os.chmod(path, mode)


def test_script_reports_each_path_and_writes_nothing(shell, variant, tree):
    paths = {
        "/dev/null": ProbeNode("/dev/null", True, True, 1, 3, "ok"),
        str(tree / "missing"): ProbeNode(str(tree / "missing"), False, open="ENOENT"),
        str(tree / "missing $(touch pwned4)"): ProbeNode(str(tree / "missing $(touch pwned4)"), False, open="ENOENT"),
        str(tree / "file"): ProbeNode(str(tree / "file"), True, False, None, None, "ok" if IS_ROOT else "EACCES"),
        str(tree / WEIRD): ProbeNode(str(tree / WEIRD), True, False, None, None, "ok"),
        str(tree / "dangling"): ProbeNode(str(tree / "dangling"), False, open="ENOENT"),
    }
    if IS_ROOT:  # a node whose major no driver owns: the open reaches the kernel, which says ENXIO
        mknod(tree / "nodriver", 0o666, 511, 0)
        paths[str(tree / "nodriver")] = ProbeNode(str(tree / "nodriver"), True, True, 511, 0, "ENXIO")
    path_env = fallback_path(shell, tree / "cwd") if variant == "sh-only" else None
    before = snapshot(tree)
    result = run_script(shell, [*paths, str(tree / "dir")], cwd=tree / "cwd", path_env=path_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("lxcfix-probe 1\n") and result.stdout.endswith("end\n")
    got = probe.parse(result.stdout)
    for path, want in paths.items():
        assert got.nodes[path] == want, result.stdout
    d = got.nodes[str(tree / "dir")]
    assert (d.exists, d.is_char, d.major) == (True, False, None)
    assert d.open == "EISDIR"  # python3: the errno's name; sh-only: mapped from "Is a directory"
    assert snapshot(tree) == before, "the probe changed the filesystem"
    assert not (tree / "missing").exists() and not (tree / "nothere").exists()
    assert not list(tree.rglob("pwned*")) and not list(Path("/tmp").glob("pwned*"))


def test_sh_only_branch_matches_python_branch(shell, tree):
    paths = ["/dev/null", str(tree / "file"), str(tree / "missing"), str(tree / WEIRD)]
    with_python = run_script(shell, paths, cwd=tree / "cwd")
    without = run_script(shell, paths, cwd=tree / "cwd", path_env=fallback_path(shell, tree / "cwd"))
    assert probe.parse(with_python.stdout).nodes == probe.parse(without.stdout).nodes


@pytest.mark.skipif(not IS_ROOT, reason="needs root to drop to nobody")
def test_eacces_as_an_unprivileged_user(shell, variant, tree):
    """A root-owned 0600 node, opened by nobody: EACCES (mode), not EPERM (cgroup)."""
    mknod(tree / "null600", 0o600, 1, 3)
    path_env = fallback_path(shell, tree / "cwd") if variant == "sh-only" else None
    result = run_script(shell, [str(tree / "null600")], cwd=tree / "cwd", path_env=path_env,
                        user=65534, group=65534)
    node = probe.parse(result.stdout).nodes[str(tree / "null600")]
    assert node == ProbeNode(str(tree / "null600"), True, True, 1, 3, "EACCES"), result.stdout + result.stderr


# The GPU gate, exercised with a fake driver tree: the script text is pointed at fake
# /proc/driver/nvidia, /proc/devices and /dev/nvidia* (test-only substitution).

FAKE_SMI = """#!/bin/sh
case "$1" in
    -L) printf '%s\\n' "$SMI_OUT"; exit "$SMI_RC" ;;
    --query-gpu=driver_version) echo 575.57.08 ;;
esac
"""


@pytest.fixture
def fake_driver(tree):
    if not IS_ROOT:
        pytest.skip("needs root for mknod")
    n = tree / "n"
    (n / "gpus" / "0000:17:00.0").mkdir(parents=True)
    (n / "capabilities" / "mig").mkdir(parents=True)
    (n / "params").write_text("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"
                              "DeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n")
    (n / "gpus" / "0000:17:00.0" / "information").write_text("Model: \t\t NVIDIA H200\nDevice Minor: \t 0\n")
    (n / "capabilities" / "mig" / "config").write_text("DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    (tree / "devices").write_text("Character devices:\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n241 nvidia-caps\n")
    dev = tree / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    mknod(dev / "nvidia0", 0o666, 195, 0)
    mknod(dev / "nvidiactl", 0o666, 195, 255)
    mknod(dev / "nvidia-uvm", 0o666, 238, 0)
    mknod(dev / "nvidia-uvm-tools", 0o666, 238, 1)
    mknod(dev / "nvidia-caps" / "nvidia-cap1", 0o400, 241, 1)
    bin_dir = tree / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    text = (probe.script()
            .replace("N=/proc/driver/nvidia", f"N={n}")
            .replace("/proc/devices", str(tree / "devices"))
            .replace("/dev/nvidia", f"{dev}/nvidia"))
    assert text.count(str(n)) == 1 and str(tree / "devices") in text
    return text, dev, f"{bin_dir}:{os.environ['PATH']}"


def run_gpu(shell, tree, fake_driver, out="GPU 0: NVIDIA H200 (UUID: GPU-x)", rc=0):
    text, _, path_env = fake_driver
    return run_script(shell, [], cwd=tree / "cwd", path_env=path_env, text=text,
                      extra_env={"SMI_OUT": out, "SMI_RC": str(rc)}).stdout


def test_gpu_calls_run_when_every_node_is_already_right(shell, tree, fake_driver):
    out = run_gpu(shell, tree, fake_driver, out="Failed to initialize NVML: Unknown Error", rc=255)
    assert "gpu skipped" not in out
    got = probe.parse(out)
    assert got.nvidia_smi_rc == 255 and got.nvidia_smi_out == "Failed to initialize NVML: Unknown Error"
    if "nvidia-smi\n" in out:  # no libcuda on this machine: the version came from nvidia-smi
        assert got.driver_version == "575.57.08"


@pytest.mark.parametrize("change, blocker", [
    ("missing uvm", "nvidia-uvm"),
    ("uvm is a regular file", "nvidia-uvm"),
    ("nvidia0 mode 0660", "nvidia0"),
    ("nvidiactl stale minor", "nvidiactl"),
    ("cap1 missing", "nvidia-caps/nvidia-cap1"),
])
def test_gpu_calls_skipped_when_the_driver_would_touch_a_node(shell, tree, fake_driver, change, blocker):
    dev = fake_driver[1]
    if change == "missing uvm":
        (dev / "nvidia-uvm").unlink()
    elif change == "uvm is a regular file":
        (dev / "nvidia-uvm").unlink()
        (dev / "nvidia-uvm").write_text("")
    elif change == "nvidia0 mode 0660":
        (dev / "nvidia0").chmod(0o660)
    elif change == "nvidiactl stale minor":
        (dev / "nvidiactl").unlink()
        mknod(dev / "nvidiactl", 0o666, 195, 254)
    else:
        (dev / "nvidia-caps" / "nvidia-cap1").unlink()
    before = snapshot(tree)
    out = run_gpu(shell, tree, fake_driver)
    assert f"gpu skipped {dev}/{blocker}\n" in out
    assert "nvidia_smi" not in out and "cuinit" not in out
    assert snapshot(tree) == before


def test_gpu_gate_ignores_owner_when_it_is_not_mapped(shell, tree, fake_driver):
    """Unprivileged container: host nodes show as nobody; chmod/chown would fail, so no write."""
    os.chown(fake_driver[1] / "nvidia0", 65534, 65534)
    (fake_driver[1] / "nvidia0").chmod(0o660)
    assert "gpu skipped" not in run_gpu(shell, tree, fake_driver)


def test_modify_device_files_0_lets_gpu_calls_run(shell, tree, fake_driver):
    (tree / "n" / "params").write_text("ModifyDeviceFiles: 0\n")
    (fake_driver[1] / "nvidia-uvm").unlink()
    assert "nvidia_smi rc=0" in run_gpu(shell, tree, fake_driver)


def test_probe_argv_keeps_paths_out_of_the_script():
    argv = probe.probe_argv(["/dev/nvidia-uvm", "/dev/x $(reboot)"])
    assert argv == ["sh", "-c", probe.script(), "lxcfix-probe", "/dev/nvidia-uvm", "/dev/x $(reboot)"]
    assert "$(reboot)" not in argv[2]


@pytest.mark.parametrize("bad", ["dev/nvidia0", "", "/dev/a\nnode /dev/b exists=1", "/dev/\0x", "-n"])
def test_probe_argv_refuses_paths_that_would_break_the_output(bad):
    with pytest.raises(BadInput):
        probe.probe_argv([bad])


# --- parse ------------------------------------------------------------------------------------

def test_parse_measured_h200_output():
    text = (FIXTURES / "h200-measured-baseline.txt").read_text()
    got = probe.parse(text)
    assert got.raw == text
    assert set(got.nodes) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                              "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"}
    assert got.nodes["/dev/nvidia-uvm"] == ProbeNode("/dev/nvidia-uvm", True, True, 238, 0, "ok")
    assert (got.nvidia_smi_rc, got.cuinit, got.driver_version) == (0, 0, "580.159.04")
    assert got.nvidia_smi_out.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")


def test_parse_is_tolerant():
    text = ("Welcome to the container!\r\n"
            "node /dev/a b exists=1 char=1 major=511 minor=0 open=EPERM\r\n"
            "node /dev/bad exists=2 char=1 major=1 minor=3 open=ok\n"
            "node relative exists=1 char=1 major=1 minor=3 open=ok\n"
            "nvidia_smi rc=x\n"
            "nvidia_smi rc=255\n"
            "nvidia_smi_out Failed to initialize NVML: Unknown Error\n"
            "nvidia_smi_out \n"
            "cuinit nope\n"
            "driver unknown /x\n"
            "node /dev/a b exists=1 char=1 major=511 minor=0 open=ok\n"  # a later line wins
            "node /dev/cut exists=1 char=1 maj")                          # cut off mid-line
    got = probe.parse(text)
    assert got.nodes == {"/dev/a b": ProbeNode("/dev/a b", True, True, 511, 0, "ok")}
    assert got.nvidia_smi_rc == 255
    assert got.nvidia_smi_out == "Failed to initialize NVML: Unknown Error\n"
    assert (got.cuinit, got.driver_version, got.raw) == (None, None, text)
    assert probe.parse("") == ProbeResult(raw="")


@settings(max_examples=300)
@given(st.text())
def test_parse_never_raises(text):
    got = probe.parse(text)
    assert got.raw == text
    probe.classify("1", "h", got, {"/dev/x": ("c", 511, 0)}, "580.1.2", "c 1:3 rwm", {"x": 511})


@given(path=st.text(min_size=1, max_size=200).filter(lambda s: not {"\n", "\r", "\0"} & set(s)).map(lambda s: "/" + s),
       exists=st.booleans(), is_char=st.booleans(),
       major=st.none() | st.integers(0, 4095), minor=st.none() | st.integers(0, 2**20 - 1),
       open_=st.sampled_from(["ok", "EPERM", "EACCES", "ENXIO", "ENOENT", "ENODEV", "EISDIR", "other"]))
def test_node_lines_round_trip(path, exists, is_char, major, minor, open_):
    line = (f"node {path} exists={int(exists)} char={int(is_char)} major={'-' if major is None else major}"
            f" minor={'-' if minor is None else minor} open={open_}")
    assert probe.parse(line + "\n").nodes == {path: ProbeNode(path, exists, is_char, major, minor, open_)}


# --- classify, from the ground truth ------------------------------------------------------------

GT = json.loads(GROUND_TRUTH.read_text())
GT_NODES = {path: tuple(int(x) for x in mm.split(":")) for path, mm in GT["host"]["nodes"].items()}
EXPECTED = {path: ("c", major, minor) for path, (major, minor) in GT_NODES.items()}
HOST_MAJORS = GT["host"]["proc_devices"]
HOST_DRIVER = GT["host"]["driver"].split()[0]


def gt_output(case: dict) -> str:
    """What the probe would print in that ground-truth case."""
    lines = ["lxcfix-probe 1"]
    for path, result in case["cuda"]["open"].items():
        major, minor = GT_NODES[path]
        errno_name = "ok" if result == "ok" else {"1": "EPERM", "13": "EACCES", "6": "ENXIO"}[result.split(":")[0]]
        lines.append(f"node {path} exists=1 char=1 major={major} minor={minor} open={errno_name}")
    lines.append(f"nvidia_smi rc={case['nvidia_smi_rc']}")
    lines += [f"nvidia_smi_out {line}" for line in case["nvidia_smi_output"].split("\n")]
    lines += [f"cuinit {case['cuda']['cuInit']}", f"driver {HOST_DRIVER} /usr/lib/x86_64-linux-gnu/libcuda.so.{HOST_DRIVER}", "end"]
    return "\n".join(lines) + "\n"


def gt_classify(case_name: str, **kw):
    result = probe.parse(gt_output(GT["cases"][case_name]))
    return probe.classify("200", "pve1", result, EXPECTED, HOST_DRIVER, host_majors=HOST_MAJORS, **kw)


CASES = {
    "baseline": [],
    "deny nvidia-uvm (all minors)": [("LXF200", "/dev/nvidia-uvm"), ("LXF200", "/dev/nvidia-uvm-tools"),
                                     ("LXF210", "/dev/nvidia-uvm")],
    "deny nvidia-uvm-tools only (uvm:1)": [("LXF200", "/dev/nvidia-uvm-tools")],
    "deny nvidiactl 195:255": [("LXF200", "/dev/nvidiactl"), ("LXF210", "/dev/nvidiactl"),
                               ("LXF211", "/dev/nvidiactl")],
    "deny nvidia0 195:0": [("LXF200", "/dev/nvidia0"), ("LXF210", "/dev/nvidia0"), ("LXF211", "/dev/nvidia0")],
    "deny all 195": [("LXF200", "/dev/nvidia0"), ("LXF200", "/dev/nvidiactl"), ("LXF210", "/dev/nvidiactl"),
                     ("LXF211", "/dev/nvidiactl")],
    "deny nvidia-caps": [("LXF200", "/dev/nvidia-caps/nvidia-cap1"), ("LXF200", "/dev/nvidia-caps/nvidia-cap2")],
}


def test_every_ground_truth_case_is_covered():
    assert set(CASES) == set(GT["cases"])


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_ground_truth_cases(case_name):
    findings = gt_classify(case_name)
    assert sorted((f.code, f.device) for f in findings) == sorted(CASES[case_name])
    for f in findings:
        assert f.severity == "error" and f.ct == "200" and f.host == "pve1" and f.message and f.evidence


def test_uvm_denied_reads_at_a_glance():
    findings = gt_classify("deny nvidia-uvm (all minors)", allowlist="c 195:* rwm\nc 508:* rwm")
    eperm = findings[0]
    assert eperm.message == "open /dev/nvidia-uvm: EPERM (the cgroup device policy denies c 238:0)"
    assert eperm.evidence[:2] == ("running allowlist: c 195:* rwm, c 508:* rwm", "nvidia-uvm is 238 on this host")
    assert eperm.fix.title == "allow c 238:* rwm (run: lxcfix plan --ct 200 --host pve1)"
    assert eperm.live_fixable is True
    cuinit = [f for f in findings if f.code == "LXF210"][0]
    assert cuinit.message.startswith("cuInit(0) = 999 CUDA_ERROR_UNKNOWN") and "nvidia-smi still works" in cuinit.message
    assert "open /dev/nvidia-uvm: EPERM" in cuinit.evidence
    assert any("measured" in e and "999" in e for e in cuinit.evidence)
    assert cuinit.fix.title.startswith("allow c 238:* rwm")
    assert not [f for f in findings if f.code == "LXF211"]  # nvidia-smi alone misses this case


def test_nvidiactl_denied_explains_cuinit_100_and_nvml():
    findings = {f.code: f for f in gt_classify("deny nvidiactl 195:255")}
    assert findings["LXF200"].fix.title == "allow c 195:* rwm (run: lxcfix plan --ct 200 --host pve1)"
    assert "nvidia/nvidiactl is 195 on this host" in findings["LXF200"].evidence
    assert findings["LXF210"].message.startswith("cuInit(0) = 100 CUDA_ERROR_NO_DEVICE")
    assert "open /dev/nvidiactl: EPERM" in findings["LXF210"].evidence
    assert "Failed to initialize NVML: Unknown Error" in findings["LXF211"].message


def test_nvidia0_denied_says_no_devices_found():
    f = [f for f in gt_classify("deny nvidia0 195:0") if f.code == "LXF211"][0]
    assert "finds no GPU" in f.message and "nvidia-smi -L: rc 0, 'No devices found.'" in f.evidence


# --- classify, other cases --------------------------------------------------------------------

def one(text: str, expected: dict, host_driver: str | None = None, **kw):
    return probe.classify("101", "localhost", probe.parse(text), expected, host_driver, **kw)


def test_measured_baseline_is_clean():
    text = (FIXTURES / "h200-measured-baseline.txt").read_text()
    expected = {"/dev/nvidia0": ("c", 195, 0), "/dev/nvidiactl": ("c", 195, 255),
                "/dev/nvidia-uvm": ("c", 238, 0), "/dev/nvidia-uvm-tools": ("c", 238, 1)}
    assert one(text, expected, "580.159.04") == []


def test_measured_missing_uvm_is_absent():
    findings = one((FIXTURES / "h200-measured-uvm-missing.txt").read_text(),
                   {"/dev/nvidia0": ("c", 195, 0), "/dev/nvidia-uvm": ("c", 238, 0)}, "580.159.04")
    assert [(f.code, f.device) for f in findings] == [("LXF202", "/dev/nvidia-uvm")]
    assert findings[0].message == "/dev/nvidia-uvm is absent in the container (the host has it as c 238:0)"
    assert findings[0].fix.title == "pass /dev/nvidia-uvm into the container and restart it (run: lxcfix plan --ct 101)"


def test_measured_regular_file_is_not_a_device():
    findings = one((FIXTURES / "h200-measured-uvm-regular-file.txt").read_text(),
                   {"/dev/nvidia-uvm": ("c", 238, 0)})
    assert [(f.code, f.device) for f in findings] == [("LXF203", "/dev/nvidia-uvm")]
    assert "not a character device" in findings[0].message
    assert any("optional,create=file" in e for e in findings[0].evidence)


def test_stale_major_node_is_lxf203_not_a_cgroup_finding():
    findings = one("node /dev/nvidia-uvm exists=1 char=1 major=508 minor=0 open=EPERM\n",
                   {"/dev/nvidia-uvm": ("c", 511, 0)}, host_majors={"nvidia-uvm": 511})
    assert [f.code for f in findings] == ["LXF203"]
    assert findings[0].message == "/dev/nvidia-uvm is c 508:0 in the container but c 511:0 on the host (a stale node)"
    assert "nvidia-uvm is 511 on this host" in findings[0].evidence


def test_eacces_is_mode_not_cgroup():
    findings = one("node /dev/dri/renderD128 exists=1 char=1 major=226 minor=128 open=EACCES\n",
                   {"/dev/dri/renderD128": ("c", 226, 128)})
    assert [(f.code, f.device) for f in findings] == [("LXF201", "/dev/dri/renderD128")]
    assert "not the cgroup" in findings[0].message and "idmap" in findings[0].message


def test_shared_major_gets_an_exact_minor():
    f = one("node /dev/net/tun exists=1 char=1 major=10 minor=200 open=EPERM\n", {"/dev/net/tun": ("c", 10, 200)})[0]
    assert f.fix.title == "allow c 10:200 rwm (run: lxcfix plan --ct 101)"


def test_enxio_is_not_a_cgroup_finding_but_explains_cuinit():
    text = ("node /dev/nvidia-uvm exists=1 char=1 major=511 minor=0 open=ENXIO\n"
            "nvidia_smi rc=0\nnvidia_smi_out GPU 0: NVIDIA H200 (UUID: GPU-x)\ncuinit 999\n")
    findings = one(text, {"/dev/nvidia-uvm": ("c", 511, 0)})
    assert [f.code for f in findings] == ["LXF210"]
    assert any("the cgroup let it through" in e and "511:0" in e for e in findings[0].evidence)
    assert findings[0].fix is None


def test_cuinit_999_with_uvm_open_ok_blames_something_else():
    text = "node /dev/nvidia-uvm exists=1 char=1 major=511 minor=0 open=ok\ncuinit 999\n"
    f = one(text, {"/dev/nvidia-uvm": ("c", 511, 0)})[0]
    assert f.code == "LXF210" and "/dev/nvidia-uvm opens here: the cause is not the cgroup" in f.evidence


def test_driver_mismatch():
    text = ("nvidia_smi rc=18\nnvidia_smi_out Failed to initialize NVML: Driver/library version mismatch\n"
            "nvidia_smi_out NVML library version: 575.57\n"
            "driver 575.57.08 /usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08\nend\n")
    findings = {f.code: f for f in one(text, {}, "580.159.04")}
    assert set(findings) == {"LXF211", "LXF212"}
    assert findings["LXF212"].message == ("NVIDIA driver mismatch: host kernel driver 580.159.04, "
                                          "container userspace 575.57.08")
    assert "container: 575.57.08 from /usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08" in findings["LXF212"].evidence
    assert "--no-kernel-module" in findings["LXF212"].fix.title
    assert "do not match the host driver" in findings["LXF211"].message


def test_same_driver_or_unknown_is_quiet():
    assert one("driver 580.159.04 /x\n", {}, "580.159.04") == []
    assert one("driver 580.159.04 /x\n", {}, None) == []
    assert one("", {}, "580.159.04") == []


def test_truncated_output_reports_only_what_was_seen():
    text = "lxcfix-probe 1\nnode /dev/nvidia0 exists=1 char=1 major=195 minor=0 open=EPERM\nnode /dev/nvidia"
    findings = one(text, {"/dev/nvidia0": ("c", 195, 0), "/dev/nvidiactl": ("c", 195, 255)})
    assert [(f.code, f.device) for f in findings] == [("LXF200", "/dev/nvidia0")]


def test_findings_serialize():
    for f in gt_classify("deny all 195", allowlist="c 238:* rwm"):
        json.dumps(f.to_json())


def test_group_ids_are_read_from_etc_group(shell, tree):
    """`group render|video <gid>` from the container's /etc/group: what a devN gid= must say."""
    expected = {}
    for line in Path("/etc/group").read_text().splitlines():
        name, _, gid = (line.split(":") + ["", "", ""])[:3]
        if name in ("render", "video") and gid.isdigit():
            expected[name] = int(gid)
    r = run_script(shell, ["/dev/null"], cwd=tree)
    assert probe.parse(r.stdout).groups == expected


def test_parse_group_lines():
    got = probe.parse("lxcfix-probe 1\ngroup render 104\ngroup video 44\ngroup wheel 10\ngroup render x\nend\n")
    assert got.groups == {"render": 104, "video": 44}
