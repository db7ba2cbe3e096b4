"""`lxcfix explain "<error text>"` (lxcfix.errortexts): what applications and tools print,
matched to the likely causes, the command that tells which, and what it is not. The samples
are lines as the public reports quote them (each row names its reports)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lxcfix import cli, codes, errortexts

# (a paste, as a user would give it, the row it must match)
SAMPLES = [
    ("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
     "variable CUDA_VISIBLE_DEVICES after program start.", "cuda-unknown"),
    ("2022-06-17 E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: CUDA_ERROR_UNKNOWN: "
     "unknown error", "cuda-unknown"),
    ("[HW Accel Support]: cu->cuInit(0) failed -> CUDA_ERROR_UNKNOWN", "cuda-unknown"),
    ("error: cudaGetDeviceCount returned 30", "cuda-unknown"),
    ("cudaGetDeviceCount: CUDA driver initialization failed: no CUDA-capable device is detected",
     "cuda-no-device"),
    ("Failed to initialize NVML: Unknown Error", "nvml-unknown"),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.86", "nvml-mismatch"),
    ("No devices were found", "nvml-no-devices"),
    ("[AVHWDeviceContext @ 0x6543173f52c0] No VA display found for any default device.\nDevice creation failed: "
     "-22.\nFailed to set value 'vaapi=va:,kernel_driver=i915,driver=iHD' for option 'init_hw_device': Invalid "
     "argument", "vaapi-22"),
    ("TASK ERROR: //dev/dri/renderD128 is not a device", "not-a-device"),
    ("Starting LXC Container/dev/dri/renderD128 is not a device", "not-a-device"),
    ("TASK ERROR: Device /dev/dri/card1 does not exist", "devn-missing"),
    ("nvidia-container-cli: initialization error: load library failed: bpf_prog_query(BPF_CGROUP_DEVICE) failed: "
     "operation not permitted: unknown", "bpf-prog-query"),
    ("docker: Error response from daemon: failed to create task for container: invoking the NVIDIA Container "
     "Runtime Hook directly (e.g. specifying the docker --gpus flag) is not supported.", "runtime-hook"),
    ("OCI runtime create failed: runc create failed: unable to start container process: error during container "
     "init: open sysctl net.ipv4.ip_unprivileged_port_start file: reopen fd 8: permission denied", "reopen-fd"),
    ("Aug 04 02:48:57 tailnet tailscaled[2502]: getLocalBackend error: createEngine: tstun.New(\"tailscale0\"): "
     "CreateTUN(\"tailscale0\") failed; /dev/net/tun does not exist", "tun-missing"),
    ('level=ERROR source=amd_linux.go:405 msg="amdgpu devices detected but permission problems block access: kfd '
     'driver not loaded.  If running in a container, remember to include \'--device /dev/kfd --device /dev/dri\'"',
     "kfd-missing"),
    ("fusermount: failed to open /dev/fuse: Operation not permitted", "fuse-denied"),
    ("frigate.detectors.plugins.edgetpu_tfl ERROR : No EdgeTPU was detected.", "edgetpu"),
    ("lxc-start 200 20261201 ERROR cgfsng - ../src/lxc/cgroups/cgfsng.c:... - Failed to parse device rule "
     "devices.allow=/dev/nvidia-uvm rw", "lxc-bad-rule"),
    ("lxc-start: 200: confile.c: parse_line: Unsupported config key \"lxc.cgroup.devices.allow\"", "lxc-v1-key"),
    ("WARN cgfsng - Ignoring cgroup2 limits on legacy cgroup system", "lxc-hybrid"),
    ("sh: can't create /dev/net/tun: Operation not permitted", "eperm-open"),
    ("RuntimeError: CUDA error: unknown error\nCUDA kernel errors might be asynchronously reported at some other "
     "API call, so the stacktrace below might be incorrect.", "cuda-unknown"),
    ('time=2025-08-30T09:03:23.843-05:00 level=WARN source=gpu.go:605 msg="unknown error initializing cuda driver '
     'library /usr/lib/x86_64-linux-gnu/libcuda.so.575.64.03: cuda driver library init failure: 999. see '
     'https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md for more information"', "cuda-unknown"),
    ('level=DEBUG source=gpu.go:517 msg="Unable to load nvcuda" library=/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01'
     ' error="nvcuda init failure: 999"', "cuda-unknown"),
    ("ggml_cuda_init: failed to initialize CUDA: unknown error", "cuda-unknown"),
    ('msg="Unable to load CUDA management library /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14: nvml vram '
     'init failure: 999', "nvml-unknown"),
    ("[AVHWDeviceContext @ 0x55d1] Failed to open /dev/dri/renderD128: Permission denied", "eacces-open"),
    ("open /dev/dri/renderD128: permission denied", "eacces-open"),
    ('msg="amdgpu devices detected but permission problems block access: permissions not set up properly.  Either '
     'run ollama as root, or add you user account to the render group. open /dev/kfd: permission denied"',
     "eacces-open"),
    ('msg="amdgpu devices detected but permission problems block access: permissions not set up properly.  Either '
     'run ollama as root, or add you user account to the render group. open /dev/kfd: operation not permitted"',
     "eperm-open"),
    ("sh: can't open '/dev/dri/card0': Permission denied", "eacces-open"),
    # issue 29 ("The words users paste"): the texts a new user tried that were unknown
    ("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", "cuda-init"),
    ("[AVHWDeviceContext @ 0x55ca6d404d80] Failed to initialise VAAPI connection: -1 (unknown libva error).\n"
     "Device creation failed: -5.", "vaapi-22"),
    ("[AVHWDeviceContext @ 0x5581] Failed to open /dev/dri/renderD128 as DRM device node.", "vaapi-22"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown", "nvidia-no-driver"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "nvidia-no-driver"),
    ("fusermount: fuse device not found, try 'modprobe fuse' first", "fuse-missing"),
    ("Error while opening serialport 'Error: Error: Permission denied, cannot open /dev/ttyUSB0'", "serial-denied"),
    ("ValueError: Failed to load delegate from libedgetpu.so.1.0", "edgetpu"),
    ("TASK ERROR: startup for container '200' failed", "pct-start-failed"),
    ("mount_entry: No such file or directory - Failed to mount \"/dev/dri/renderD128\" on "
     "\"/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/dri/renderD128\"", "lxc-mount-missing"),
    ("hookscript error for 200 on pre-start: command '/var/lib/vz/snippets/x.sh 200 pre-start' failed: exit code 1",
     "hookscript-failed"),
    ("ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)", "tun-denied"),
    ("qemu-system-x86_64: failed to initialize kvm: No such file or directory", "kvm-missing"),
    ("E RKNN: [21:14:26.243] failed to open rknpu module, need to insmod rknpu dirver!", "rknpu"),
    ("Error while opening serialport 'Error: Error: No such file or directory, cannot open /dev/ttyACM0'",
     "enoent-open"),
]

# what printed it, the errno it names -> the row (the errno picks the cause: EPERM the cgroup, EACCES the
# owner, group, mode or idmap, ENOENT a node that is not there)
BY_ERRNO = [
    ("ERROR: Cannot open TUN/TAP dev /dev/net/tun: No such file or directory (errno=2)", "tun-missing"),
    ("ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)", "tun-denied"),
    ("ERROR: Cannot open TUN/TAP dev /dev/net/tun: Permission denied (errno=13)", "eacces-open"),
    ("fusermount: fuse device not found, try 'modprobe fuse' first", "fuse-missing"),
    ("fusermount: failed to open /dev/fuse: Operation not permitted", "fuse-denied"),
    ("fusermount: failed to open /dev/fuse: Permission denied", "eacces-open"),
    ("Could not access KVM kernel module: No such file or directory", "kvm-missing"),
    ("Could not access KVM kernel module: Operation not permitted", "eperm-open"),
    ("Could not access KVM kernel module: Permission denied", "eacces-open"),
    ("Error: Error: No such file or directory, cannot open /dev/ttyUSB0", "enoent-open"),
    ("Error: Error: Operation not permitted, cannot open /dev/ttyUSB0", "eperm-open"),
    ("Error: Error: Permission denied, cannot open /dev/ttyUSB0", "serial-denied"),
    ("could not open port /dev/ttyUSB0: [Errno 2] No such file or directory: '/dev/ttyUSB0'", "enoent-open"),
    ("PermissionError: [Errno 1] Operation not permitted: '/dev/ttyACM0'", "eperm-open"),
    ("could not open port /dev/ttyACM0: [Errno 13] Permission denied: '/dev/ttyACM0'", "serial-denied"),
    ("Unable to open /dev/kfd read-write: No such file or directory", "kfd-missing"),
    ("Unable to open /dev/kfd read-write: Operation not permitted", "eperm-open"),
    ("Unable to open /dev/kfd read-write: Permission denied", "eacces-open"),
]


@pytest.mark.parametrize("text,want", SAMPLES)
def test_each_sample_is_known_as_its_row(text, want):
    assert [k.id for k in errortexts.match(text)] == [want]


SAID = [(k.id, w) for k in errortexts.KNOWN for w in k.said]


@pytest.mark.parametrize("want,said", SAID, ids=[f"{want}-{i}" for i, (want, _) in enumerate(SAID)])
def test_each_wording_in_the_catalog_is_known_as_its_row(want, said):
    """Every real wording the data carries, as its program prints it, goes to the row it sits in."""
    assert [k.id for k in errortexts.match(said.text)] == [want]
    # the same line inside a pasted log, between other lines
    assert [k.id for k in errortexts.match(f"noise before\n{said.text}\nnoise after\n")] == [want]


def test_the_catalog_carries_forty_real_wordings_each_with_its_source():
    texts = [w.text for _, w in SAID]
    assert len(texts) >= 40 and len(set(texts)) == len(texts)
    for want, w in SAID:
        # a repository and its file ("owner/repo path/file"), or a public report ("owner/repo#N")
        assert re.search(r"[\w.-]+/[\w.-]+(#\d+| [\w./-]+\.\w+)", w.source), (want, w.source)
    families = {"cuda": "cuda-unknown", "nvml": "nvml-unknown", "rocm": "kfd-missing", "vaapi": "vaapi-22",
                "edgetpu": "edgetpu", "npu": "rknpu", "tun": "tun-denied", "fuse": "fuse-missing",
                "kvm": "kvm-missing", "serial": "serial-denied", "proxmox": "pct-start-failed"}
    assert set(families.values()) <= {want for want, _ in SAID}


@pytest.mark.parametrize("text,want", BY_ERRNO)
def test_the_errno_a_text_names_picks_the_row(text, want):
    assert [k.id for k in errortexts.match(text)] == [want]


def test_openvpn_eperm_is_the_cgroup_not_a_missing_node():
    """Issue 29: `Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)` got the row
    titled "does not exist"; EPERM is the cgroup."""
    (k,) = errortexts.match("ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)")
    assert "does not exist" not in k.says and k.causes[0].code == "LXF100"
    (missing,) = errortexts.match("ERROR: Cannot open TUN/TAP dev /dev/net/tun: No such file or directory (errno=2)")
    assert missing.id == "tun-missing" and missing.causes[0].code == "LXF110"


def test_a_log_goes_to_the_step_that_failed_not_to_its_last_line():
    log = ("run_buffer: 571 Script exited with status 1\n"
           "safe_mount: 1425 No such file or directory - Failed to mount \"/dev/nvidia-uvm\" onto "
           "\"/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/nvidia-uvm\"\n"
           "lxc_setup: 3948 Failed to run autodev hooks\n"
           "do_start: 1273 Failed to setup container \"200\"\n"
           "__lxc_start: 2114 Failed to spawn container \"200\"\n"
           "TASK ERROR: startup for container '200' failed\n")
    assert [k.id for k in errortexts.match(log)] == ["lxc-mount-missing"]
    assert [k.id for k in errortexts.match(log.splitlines()[-1])] == ["pct-start-failed"]
    cuda = ("[AVHWDeviceContext] cu->cuInit(0) failed -> CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\n"
            "Device creation failed: -542398533.\nFailed to set value 'cuda=cu:0' for option 'init_hw_device': "
            "Generic error in an external library")
    assert [k.id for k in errortexts.match(cuda)] == ["cuda-no-device"]  # ffmpeg's CUDA device, not VA-API's
    hook = ("hookscript error for 200 on pre-start: command '/var/lib/vz/snippets/x.sh 200 pre-start' failed: "
            "exit code 2")
    assert [k.id for k in errortexts.match(hook + "\nTASK ERROR: startup for container '200' failed")] == \
        ["hookscript-failed"]


def test_every_row_has_a_sample_a_source_and_causes_that_exist():
    assert {want for _, want in SAMPLES} == {k.id for k in errortexts.KNOWN}
    for k in errortexts.KNOWN:
        assert k.sources and k.causes and k.confirm and k.not_it, k.id
        assert all(c.code == "" or c.code in codes.CODES for c in k.causes), k.id
    assert len({k.id for k in errortexts.KNOWN}) == len(errortexts.KNOWN)


def test_a_log_with_several_messages_names_each_once_in_table_order():
    sample = {want: text for text, want in reversed(SAMPLES)}  # each row's first sample
    log = "\n".join(["noise"] * 50 + [sample["fuse-denied"], sample["nvml-unknown"], sample["nvml-unknown"],
                                     "more noise"])
    assert [k.id for k in errortexts.match(log)] == ["nvml-unknown", "fuse-denied"]


def test_nothing_known_in_ordinary_text():
    assert errortexts.match("hello world\nall is well\n") == []
    assert errortexts.match("") == []


def run(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = cli.run(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_cli_explains_a_quoted_text_and_several_words(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    rc, out, err = run(capsys, "explain", "Failed to initialize NVML: Unknown Error")
    assert rc == 0 and err == ""
    assert out.startswith("Failed to initialize NVML: Unknown Error\n")
    assert "Likely causes, in order" in out and "[LXF200]" in out and "lxcfix diagnose --ct CT" in out
    assert "NVIDIA/nvidia-docker#1671" in out
    rc, out2, _ = run(capsys, "explain", "Failed", "to", "initialize", "NVML:", "Unknown", "Error")
    assert rc == 0 and out2 == out


def test_cli_reads_a_log_from_stdin_and_says_it_in_json(capsys, monkeypatch):
    log = "x\n" + SAMPLES[15][0] + "\n" + SAMPLES[8][0] + "\n"
    rc, out, _ = run(capsys, "explain", "-", "--json", stdin=log, monkeypatch=monkeypatch)
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == 1 and doc["text_lines"] == 5
    assert [k["id"] for k in doc["known"]] == ["vaapi-22", "tun-missing"]
    assert doc["known"][1]["causes"][0] == {"code": "LXF110", "text": errortexts.KNOWN[11].causes[0].text}


def test_an_unknown_text_is_one_line_exit_0_and_never_echoed(capsys):
    big = "z" * 100_000
    rc, out, err = run(capsys, "explain", big)
    assert rc == 0 and err == ""
    assert out.count("\n") == 1 and "z" * 100 not in out and "lxcfix scan" in out


def test_a_code_shaped_word_that_is_no_code_is_still_bad_input(capsys):
    rc, out, err = run(capsys, "explain", "LXF999")
    assert rc == 2 and "no finding code 'LXF999'" in err and out == ""


def test_the_readme_lists_every_message_with_its_codes_and_sources():
    from .conftest import REPO

    readme = (REPO / "README.md").read_text()
    for k in errortexts.KNOWN:
        row = f"| {k.says.replace('|', '/')} | {k.who} | " + ", ".join(c.code for c in k.causes if c.code) + \
            f" | {', '.join(k.sources)} |"
        assert row in readme, k.id


def _unbounded(pattern: str) -> list[str]:
    """The repeats in a pattern with no upper bound (`*`, `+`, `{m,}`)."""
    try:
        import re._parser as sre  # 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse as sre
    found, todo = [], [sre.parse(pattern)]
    while todo:
        for op, av in todo.pop():
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                lo, hi, sub = av
                if hi == sre.MAXREPEAT:
                    found.append(f"{{{lo},}}")
                todo.append(sub)
            elif op in (sre.SUBPATTERN,):
                todo.append(av[-1])
            elif op in (sre.BRANCH,):
                todo.extend(av[1])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                todo.append(av[1])
    return found


def test_every_pattern_repeats_a_bounded_number_of_times():
    """A paste is someone's log: with every repeat bounded, a match costs a bounded amount per
    position, never the quadratic time `open\\S* /dev/` took on "open" x 64 Ki (34 s)."""
    for k in errortexts.KNOWN:
        for p in k.patterns:
            assert _unbounded(p) == [], (k.id, p)
    assert _unbounded(r"open\S* /dev/") == ["{0,}"] and _unbounded(r"(a|b+)c") == ["{1,}"]


def test_a_rows_quick_reject_words_are_spelled_out_by_every_one_of_its_patterns():
    """`needs` skips a row whose words the paste lacks: only sound when no pattern can match without them."""
    assert {k.id for k in errortexts.KNOWN if k.needs} == {"eperm-open", "eacces-open", "enoent-open"}
    for k in errortexts.KNOWN:
        assert all(w == w.lower() for w in k.needs), k.id
        for p in k.patterns if k.needs else ():
            assert any(w in p.lower() for w in k.needs), (k.id, p)


HOSTILE = ["open" * 65536, "/dev/" * 52428, "can't open /dev/" * 16384, "\n" * 262144, " \n" * 131072,
           "cuInit(0)" * 29127, "CreateTUN" * 29127, "reopen fd " + "1" * 262000, "open /dev/" + "x" * 262000]


def test_a_hostile_paste_of_the_largest_size_is_matched_without_stalling():
    import time

    start = time.monotonic()
    for text in HOSTILE:
        assert len(text) <= errortexts.MAX_TEXT and errortexts.match(text) == []
    assert time.monotonic() - start < 20  # a hang guard, not a figure: about 1 s here; it was minutes


def _explain_stdin(stdin, shell_closes_stdin=False, env_extra=None):
    """The real CLI, `python -m lxcfix explain -`, as a subprocess with the given standard input."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "NO_COLOR": "1", **(env_extra or {})}
    argv = [sys.executable, "-m", "lxcfix", "explain", "-"]
    if shell_closes_stdin:  # fd 0 closed before the interpreter starts: Python sets sys.stdin to None
        argv = ["sh", "-c", 'exec "$@" 0<&-', "sh", *argv]
    kw = {"input": stdin} if isinstance(stdin, bytes) else {"stdin": stdin}
    return subprocess.run(argv, capture_output=True, env=env, timeout=60, **kw)


def test_cli_explain_stdin_with_a_byte_that_is_not_utf8_under_a_utf8_locale():
    """Issue 30 item 13: one non-UTF-8 byte in a pasted log was a UnicodeDecodeError, exit 3."""
    log = b"x\xff\xfe garbage\n" + SAMPLES[5][0].encode() + b"\n\xc3(\n"
    r = _explain_stdin(log, env_extra={"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0 and r.stderr == b"", r.stderr[-500:]
    assert r.stdout.startswith(b"Failed to initialize NVML: Unknown Error\n") and b"[LXF200]" in r.stdout
    r = _explain_stdin(b"\xff" * 1000 + b"\n", env_extra={"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0 and r.stderr == b"" and r.stdout.count(b"\n") == 1
    assert b"no error text lxcfix knows" in r.stdout and b"\xff" not in r.stdout


def test_cli_explain_stdin_is_read_bounded():
    big = SAMPLES[5][0].encode() + b"\n" + b"z" * (errortexts.MAX_TEXT + 1_000_000) + b"\n" + SAMPLES[17][0].encode()
    r = _explain_stdin(big)
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout.startswith(b"Failed to initialize NVML") and b"fusermount" not in r.stdout  # past the cap


@pytest.mark.parametrize("closed", [False, True], ids=["devnull", "closed"])
def test_cli_explain_stdin_empty_or_closed_is_one_line_exit_2(closed):
    """Issue 30 item 13: standard input closed (`0<&-`) was an AttributeError, exit 3; /dev/null is nothing
    to explain. Both: one clear line, exit 2, no traceback."""
    r = _explain_stdin(None if closed else subprocess.DEVNULL, shell_closes_stdin=closed)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 2 and r.stdout == b"" and len(lines) == 1, r.stderr[-500:]
    assert lines[0].startswith("lxcfix: error: explain -: ") and "Traceback" not in lines[0]
    assert ("closed" if closed else "nothing on standard input") in lines[0]


def test_cli_json_gives_each_entry_its_wordings_and_sources(capsys, monkeypatch):
    rc, out, _ = run(capsys, "explain", "--json", "fusermount: fuse device not found, try 'modprobe fuse' first")
    (k,) = json.loads(out)["known"]
    assert rc == 0 and k["id"] == "fuse-missing"
    assert {"text": "fuse: device not found, try 'modprobe fuse' first", "source": "lxc/lxc#80"} in k["said"]
