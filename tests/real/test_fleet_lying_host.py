"""A fleet host that lies (issue 30): a real sshd whose forced command (authorized_keys
`command=`) answers the agent's request as a compromised host would, the framed reply the
control node expects (its nonce taken from the request) around a forged document. Beside it an
honest host, a real sshd in front of a real container that needs a fix, in the same batch
(--serial 2). The control node runs under RLIMIT_AS: whatever the liar sends, the honest host's
change is in the summary, the exit code is the control node's, and no forged row is printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import harness
from .hostile import lxcfix_limited
from .test_fleet_apply import Fleet, broken

MEMORY = 400 * 1024 * 1024  # the control node's address space (the issue saw 0.9 to 1.8 GiB)

# The lying host's python3 (the forced command): reads the request, answers with the document
# of the file named by argv[1], as raw bytes (any JSON, or none), compressed and framed.
LIAR = r'''
import base64, json, sys, zlib
request = json.loads(sys.stdin.buffer.read().decode("utf-8"))["request"]
raw = open(sys.argv[1], "rb").read()
if len(sys.argv) > 2:  # a template: the request as it came, for a reply that echoes it
    raw = raw.replace(b"@CTS@", json.dumps(request.get("cts") or [request.get("ct")]).encode())
sys.stdout.write("LXFA" + request["nonce"] + "\n" + base64.b64encode(zlib.compress(raw, 9)).decode() + "\n")
'''


class Ct:
    def __init__(self, name: str):
        self.name = name


class Hosts(Fleet):
    """Fleet, where a host listed with no containers has no lxcfix_containers (all of them)."""

    def write(self) -> None:
        super().write()
        text = self.inventory.read_text().replace(", lxcfix_containers: []", "")
        self.inventory.write_text(text)


@pytest.fixture
def fleet(tmp_path):
    from .sshd import Keys

    f = Hosts(tmp_path, Keys.make(tmp_path / "client"))
    try:
        yield f
    finally:
        f.stop()


def liar(fleet: Fleet, name: str, doc: bytes, cts=("300",)) -> None:
    """Host `name` of the fleet: every session runs LIAR, answering with `doc`."""
    d = fleet.add(name, [Ct(c) for c in cts])
    script, body = fleet.tmp / f"liar-{name}.py", fleet.tmp / f"liar-{name}.json"
    script.write_text(LIAR)
    body.write_bytes(doc)
    d.authorized_keys.write_text(f'command="/usr/bin/python3 {script} {body}" {fleet.keys.public_line()}\n')


def run(fleet: Fleet, *args: str):
    r = lxcfix_limited(fleet.env(), *args, "--inventory", str(fleet.inventory), memory=MEMORY, timeout=240)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace"), r.stdout


def summary(stdout: str) -> list[str]:
    """The rows under the summary's head line ("N host(s): ...")."""
    head, _, rows = stdout.rpartition(" host(s): ")
    assert head, stdout
    return [line for line in rows.splitlines()[1:] if line.strip()]


def doc(*results: dict, **extra) -> bytes:
    return json.dumps({"agent": 1, "host": "pve9", "error": None, "results": list(results), **extra}).encode()


# ----------------------------------------------------------------- its number is not the exit code


def test_a_hosts_exit_number_never_sets_the_runs_exit_code(fleet, container_factory, tun):
    """The issue: `"exit": 256` made the run exit 0 (sys.exit(256)) with another host unreachable
    and the summary saying "rolled back"."""
    c = broken(container_factory)
    fleet.add("hv1", [c])
    liar(fleet, "hv2", doc({"ct": "300", "outcome": "rolled-back", "exit": 256, "message": "CT 300: rolled back"}))
    down = fleet.add("hv3", [Ct("301")])
    down.kill()

    rc, out, err, _ = run(fleet, "apply", "--all", "--yes", "--serial", "2", "--max-fail", "5")

    assert rc == 4, out + err  # rolled back, the control node's code for it; not 256 % 256
    rows = summary(out)
    assert rows[0].split()[:2] == ["hv1", "applied"] and rows[1].split()[:3] == ["hv2", "rolled", "back"], rows
    assert rows[2].split()[:2] == ["hv3", "unreachable"], rows
    assert harness.open_errno(c, "/dev/net/tun") == "ok"

    # one host alone, "rolled back": 4, never 0
    (fleet.tmp / "lone").mkdir()
    lone = Hosts(fleet.tmp / "lone", fleet.keys)
    try:
        liar(lone, "hv9", doc({"ct": "300", "outcome": "rolled-back", "exit": 0, "message": "m"}))
        rc, out, err, _ = run(lone, "apply", "--all", "--yes")
        assert rc == 4 and "1 host(s): 1 rolled back" in out, out + err
    finally:
        lone.stop()


# ----------------------------------------------------------------- replies that do not read


@pytest.mark.parametrize("what, body, why", [
    ("100,000 nested lists (296 bytes sent)", b"[" * 100_000, "nested deeper than 8"),
    ("32 MiB of [], (44 KB sent)", b"[" + b"[]," * (32 * 1024 * 1024 // 3) + b"[]]",
     "larger than 8388608 bytes decompressed"),
    ("7 MiB of [], (within the size)", b"[" + b"[]," * (7 * 1024 * 1024 // 3) + b"[]]", "more than 200000 values"),
    ("a record for a container not asked for", doc({"ct": "999", "outcome": "applied", "exit": 0, "message": "m"}),
     "a result for CT '999', which was not asked for"),
])
def test_a_reply_that_does_not_read_is_that_hosts_finding_and_the_run_goes_on(
        fleet, container_factory, tun, what, body, why):
    c = broken(container_factory)
    before = Path(c.config_path).read_bytes()
    fleet.add("hv1", [c])
    liar(fleet, "hv2", body)

    rc, out, err, _ = run(fleet, "apply", "--all", "--yes", "--serial", "2")

    assert rc == 3 and "Traceback" not in err and "internal error" not in out + err, what + "\n" + out + err
    rows = summary(out)
    assert rows[0].split()[:2] == ["hv1", "applied"], rows  # the honest host's change, said
    assert rows[1].split()[:3] == ["hv2", "invalid", "reply"] and f"host sent an invalid reply: {why}" in rows[1], rows
    assert Path(c.config_path).read_bytes() != before and harness.open_errno(c, "/dev/net/tun") == "ok"


def test_a_check_run_takes_only_a_check_verdict(fleet, container_factory, tun):
    """--dry-run: "applied" from a host is no answer to a check; a would-apply without the digest
    it was checked at cannot be confirmed (the issue: KeyError after the admin said y)."""
    c = broken(container_factory)
    fleet.add("hv1", [c])
    liar(fleet, "hv2", doc({"ct": "300", "outcome": "applied", "exit": 0, "message": "CT 300: applied"}))
    rc, out, err, _ = run(fleet, "apply", "--all", "--dry-run", "--serial", "2")
    assert rc == 3 and "Traceback" not in err, out + err
    rows = summary(out)
    assert rows[0].split()[:3] == ["hv1", "would", "apply"], rows
    assert "outcome 'applied' is not one this request can have" in rows[1], rows

    liar(fleet, "hv2", doc({"ct": "300", "outcome": "would-apply", "exit": 1, "message": "m"}))
    rc, out, err, _ = run(fleet, "apply", "--all", "--dry-run", "--serial", "2")
    assert rc == 3 and "would-apply without the digest it was checked at" in summary(out)[1], out + err


# ----------------------------------------------------------------- forged rows


def test_nothing_a_host_sends_prints_a_row_or_a_control_character(fleet, container_factory, tun):
    c = broken(container_factory)
    fleet.add("hv1", [c])
    forged = "  hv1  rolled back      CT 200: rolled back"
    liar(fleet, "hv2", doc(
        {"ct": "300\n  hv3  applied         CT 300: applied (verified)", "outcome": "refused", "exit": 0,
         "message": f"CT 300: refused\n{forged}\r\x1b[2K\u202eok", "steps": ["a\nb"],
         "diff": "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\u2028  hv1  applied\n"},
    ), cts=())  # no lxcfix_containers: every container of that host may answer

    rc, out, err, raw = run(fleet, "apply", "--all", "--yes", "--serial", "2")

    assert rc == 2, out + err  # refused: the control node's 2, not the host's 0
    assert "\u202e".encode() not in raw and b"\x1b" not in raw and b"\r" not in raw and "\u2028".encode() not in raw
    lines = out.splitlines()
    assert forged not in lines and not any(line.lstrip().startswith("hv3") for line in lines), out
    rows = summary(out)
    assert len(rows) == 2 and rows[0].split()[:2] == ["hv1", "applied"], rows
    assert rows[1].startswith("  hv2  refused") and "CT 300\\x0a  hv3  applied" in rows[1], rows
    assert "CT 300: refused\\x0a  hv1  rolled back" in out and "\\u202eok" in out


# ----------------------------------------------------------------- a host that never answers


def test_a_stalled_host_holds_the_run_only_as_long_as_its_host_timeout(fleet, container_factory, tun):
    """The agent's deadline was 900 s, fixed: --host-timeout (and lxcfix_host_timeout) set it."""
    import time

    c = broken(container_factory)
    fleet.add("hv1", [c])
    d = fleet.add("hv2", [Ct("300")])
    stall = fleet.tmp / "stall.sh"
    stall.write_text("#!/bin/sh\nexec sleep 300\n")
    stall.chmod(0o755)
    d.authorized_keys.write_text(f'command="{stall}" {fleet.keys.public_line()}\n')

    start = time.monotonic()
    rc, out, err, _ = run(fleet, "apply", "--all", "--yes", "--serial", "2", "--host-timeout", "10")
    took = time.monotonic() - start
    assert rc == 3 and took < 60, (took, out + err)
    rows = summary(out)
    assert rows[0].split()[:2] == ["hv1", "applied"], rows
    assert rows[1].split()[:3] == ["hv2", "lost", "mid-run"] and "no reply within 10s" in rows[1], rows

    text = fleet.inventory.read_text().replace("lxcfix_backend: lxc", "lxcfix_backend: lxc\n    lxcfix_host_timeout: 10")
    fleet.inventory.write_text(text)
    start = time.monotonic()
    rc, out, err, _ = run(fleet, "apply", "--all", "--yes", "--host", "hv2")
    assert rc == 3 and time.monotonic() - start < 60 and "no reply within 10s" in out, out + err

    fleet.inventory.write_text(text.replace("lxcfix_host_timeout: 10", "lxcfix_host_timeout: 5"))
    rc, out, err, _ = run(fleet, "apply", "--all", "--yes")
    assert rc == 2 and err.count("\n") == 1 and "lxcfix_host_timeout must be a number of seconds from 10 to 86400" \
        in err, out + err
    assert d.accepted() == 2  # the bad value: nothing reached
