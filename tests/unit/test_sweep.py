"""The sweep's command (sweep.py): a fixed bootstrap whose size does not grow with the host.

Linux refuses one argv string over 128 KiB (MAX_ARG_STRLEN: "Argument list too long") and
OpenSSH's sshd drops a connection whose packet exceeds 256 KiB; a probe is ~15 KB, so a
request that carried each running container's probe in the argv broke at 9 containers
locally and 16 over SSH (issue 21, row 4)."""

from __future__ import annotations

import shlex

from lxcfix import gather, sweep
from lxcfix.backends import Lxc, Proxmox
from lxcfix.probe import probe_argv
from lxcfix.transport import Local

MAX_ARG_STRLEN = 128 * 1024
SSHD_MAX_PACKET = 256 * 1024


def probe_batch(backend, n: int) -> list[list[str]]:
    """What scan._probe_in_one_go asks of a host of n running containers: each one's probe,
    wrapped in its lxc-attach."""
    t = Local()
    names = [f"{100 + i}" if backend.name == "pve" else f"ct-{i:03d}" for i in range(n)]
    return [backend.exec(t, ct).wrap(probe_argv(["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/dri/renderD128"],
                                                [("render", "/dev/dri/renderD128")]))
            for ct in names]


def test_the_command_line_is_the_same_for_1_20_and_200_containers():
    for backend in (Lxc(), Proxmox()):
        lines = set()
        for n in (1, 20, 200):
            request = sweep.Request(batch=probe_batch(backend, n), timeout=30, cap=1 << 20)
            argv = sweep.argv(request)
            command = shlex.join(argv)  # what ssh.Ssh sends as the exec request
            assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN
            assert len(command) < 1024, len(command)
            lines.add(command)
            data = sweep.stdin(request, sweep.nonce())
            # the probe's script travels once: each further container adds its short lxc-attach argv
            assert len(data) < 40_000 + 300 * n, (n, len(data))
        assert len(lines) == 1  # independent of the container count


def test_the_first_sweep_of_a_200_container_host_is_small_too():
    request = gather.sweep_request(pve_dir="/etc/pve", lxcpath="/var/lib/lxc",
                                   cts=[str(100 + i) for i in range(200)])
    assert len(shlex.join(sweep.argv(request))) < 1024
    assert len(sweep.stdin(request, sweep.nonce())) < SSHD_MAX_PACKET


def test_a_batch_of_200_long_commands_runs_in_one_command_and_every_one_answers():
    """End to end on this machine: 200 commands whose shared argument is 15 KB (3 MB if each
    carried its own), one python3, every answer back under its own argv."""
    script = "# " + "x" * 15_000 + '\nprintf "%s\\n" "$1"\n'
    batch = [["sh", "-c", script, "probe", f"ct-{i}"] for i in range(200)]
    calls = []

    class Counting(Local):
        def run(self, argv, **kw):
            calls.append((argv, kw.get("input")))
            return super().run(argv, **kw)

    answers = gather.run_sweep(Counting(), sweep.Request(batch=batch, parallel=8))
    assert answers.done and answers.garbage is None, answers.garbage
    assert len(calls) == 1 and calls[0][0] == sweep.argv(None, Local().python) and calls[0][1]
    assert len(answers.runs) == 200
    for i, argv in enumerate(batch):
        r = answers.runs[tuple(argv)]
        assert (r.rc, r.stdout) == (0, f"ct-{i}\n")


def test_a_short_argument_stays_in_place_and_equal_long_ones_are_sent_once():
    long_a, long_b = "a" * sweep.SHARED_MIN, "b" * (sweep.SHARED_MIN + 5)
    request = sweep.Request(batch=[["x", long_a, "1"], ["y", long_a, long_b], ["z", "short"]])
    import json

    doc = json.loads(request.json("0" * 32))
    assert doc["strings"] == [long_a, long_b]
    assert doc["batch"] == [["x", 0, "1"], ["y", 0, 1], ["z", "short"]]


def test_a_rootfs_ask_is_answered_in_the_scripts_process_as_the_reader_command_prints(tmp_path):
    """sweep.Request.rootfs: the reader's report() run inside the sweep's python3 (no process per
    container), its answer the one `python3 -c READER ...` prints, a link out not followed."""
    import subprocess

    from lxcfix import rootfs
    from lxcfix.observe import first_exists, reader_argv
    from lxcfix.transport import Local

    root = tmp_path / "rootfs"
    (root / "etc/nvidia-container-runtime").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc/nvidia-container-runtime/config.toml").symlink_to("/../../../../etc/passwd")
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    (root / "etc/docker").mkdir()
    (root / "etc/docker/daemon.json").symlink_to(str(secret))  # absolute: the container's /tmp/..., absent
    argv = reader_argv(str(root), list(rootfs.FILES), first_exists())
    answers = gather.run_sweep(Local(), sweep.Request(rootfs=[argv]))
    got = answers.runs[tuple(argv)]
    direct = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert got.rc == 0 and got.stdout == direct.stdout
    seen = rootfs.parse_reader(str(root), got.stdout, list(rootfs.FILES), first_exists())
    assert seen.state == "read" and b"root:x:0:0" in (seen.text("/etc/nvidia-container-runtime/config.toml") or b"")
    assert "host only" not in got.stdout


def _wire(nonce: str, records) -> bytes:
    """A sweep's output as the script frames it: records, zlib, base64, after the LXFZ head."""
    import base64
    import zlib

    raw = b"".join(b"\n@@%s %s %s %d\n" % (nonce.encode(), kind.encode(), name.encode().hex().encode(), len(body))
                   + body for kind, name, body in records)
    return b"LXFZ" + nonce.encode() + b"\n" + base64.b64encode(zlib.compress(raw)) + b"\n"


def test_node_records_read_the_same_on_the_fast_path_and_bad_ones_end_the_reading():
    n = sweep.nonce()
    good = [("node", "/dev/null", b"c 1 3 8630 0 0"), ("node", "/dev/sda", b"b 8 0 25008 0 6"),
            ("node", "/dev/dri", b"d 0 0 16877 0 0"), ("node", "/dev/x", b"c 0000000010 7 0 4294967295 0")]
    a = sweep.parse(_wire(n, good + [("end", "", b"")]), n)
    assert a.done and a.garbage is None
    assert a.nodes == {"/dev/null": ("c", 1, 3, 8630, 0, 0), "/dev/sda": ("b", 8, 0, 25008, 0, 6),
                       "/dev/dri": ("d", 0, 0, 16877, 0, 0), "/dev/x": ("c", 10, 7, 0, 4294967295, 0)}
    for body in (b"q 1 3 0 0 0", b"c 1 3 0 0", b"c 1 3 0 0 0 0", b"c 1 -3 0 0 0", b"c 1 3 0 0 99999999999",
                 "c 1 \u0663 0 0 0".encode(), b"c  1 3 0 0 0"):
        bad = sweep.parse(_wire(n, [good[0], ("node", "/dev/bad", body), good[1], ("end", "", b"")]), n)
        assert bad.nodes == {"/dev/null": ("c", 1, 3, 8630, 0, 0)} and not bad.done, body
        assert bad.garbage.startswith("record node '/dev/bad'"), (body, bad.garbage)


def test_a_record_of_another_nonce_ends_the_reading():
    n, other = sweep.nonce(), sweep.nonce()
    wire = _wire(n, [("file", "/etc/hostname", b"pve1\n")])
    forged = _wire(other, [("file", "/etc/shadow", b"x")])
    import base64
    import zlib

    raw = zlib.decompress(base64.b64decode(wire.split(b"\n")[1])) + zlib.decompress(base64.b64decode(forged.split(b"\n")[1]))
    a = sweep.parse(b"LXFZ" + n.encode() + b"\n" + base64.b64encode(zlib.compress(raw)) + b"\n", n)
    assert a.files == {"/etc/hostname": b"pve1\n"} and a.garbage.startswith("unreadable record at byte")
