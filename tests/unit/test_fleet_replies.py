"""A fleet host's reply read as bytes nobody vouches for (issue 30): sizes after decompression,
the shape before parsing, the document validated against the request it answers, every exit
code the control node's, every text one escaped field. Property tests: any bytes in -> a
document or one invalid-reply finding, never an exception."""

from __future__ import annotations

import base64
import json
import tracemalloc
import unicodedata
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import agentreply, fleetapply, ship, sweep
from lxcfix.agentreply import Invalid, validate
from lxcfix.bounded import field, json_doc, md_field
from lxcfix.fleetapply import RANK, HostRun
from lxcfix.outcome import Rolled

NONCE = "ef" * 16
DIGEST = "a" * 40


def framed(raw: bytes) -> str:
    return f"LXFA{NONCE}\n" + base64.b64encode(zlib.compress(raw, 9)).decode() + "\n"


def doc(*results: dict, error=None) -> dict:
    return {"agent": 1, "host": "pve9", "error": error, "results": list(results)}


def rec(ct: str = "200", outcome: str = "applied", **kw) -> dict:
    return {"ct": ct, "outcome": outcome, "exit": 0, "message": f"CT {ct}: {outcome}", **kw}


class Entry:
    def __init__(self, name: str):
        self.name = name


def host_run(reply, request: dict) -> HostRun:
    """fleetapply.host_run with an agent that answers `reply` (a document, or bytes framed as a host sends them)."""
    def agent(entry, req):
        if isinstance(reply, bytes):
            return ship.parse_reply(framed(reply), "", 0, NONCE, "hv2")
        return reply
    return fleetapply.host_run(Entry("hv2"), agent, request)


# ----------------------------------------------------------------- sizes and shape, before parsing


def test_nested_lists_are_refused_before_json_recurses():
    """The issue: 100,000 nested lists (296 bytes compressed) raised RecursionError and ended the run."""
    packed = framed(b"[" * 100_000)
    assert len(packed) < 400
    with pytest.raises(ship.InvalidReply, match="nested deeper than 8"):
        ship.parse_reply(packed, "", 0, NONCE, "hv2")
    r = host_run(b"[" * 100_000 + b"]" * 100_000, {"op": "apply-all"})
    assert (r.status, r.exit) == ("invalid", 3)
    assert r.message == "host sent an invalid reply: nested deeper than 8" and r.failed


def test_a_small_reply_that_inflates_to_millions_of_lists_costs_little():
    """The issue: 44 KB (32 MiB of `[],` compressed) cost the control node 0.9 GiB. Now: the
    decompression stops past 8 MiB; 7 MiB of it is refused by its value count, unparsed."""
    for size, why in ((32 << 20, "larger than 8388608 bytes decompressed"), (7 << 20, "more than 200000 values")):
        packed = framed(b"[" + b"[]," * (size // 3) + b"[]]")
        assert len(packed) < 60_000
        tracemalloc.start()
        try:
            with pytest.raises(ship.InvalidReply, match=why):
                ship.parse_reply(packed, "", 0, NONCE, "hv2")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20, peak  # the bytes, a copy or two: not 11 million lists


def test_json_doc_counts_what_json_would_build_and_skips_strings():
    assert json_doc(b'{"a": [1, "]]]]", "\\\\", "\\"[["]}', max_depth=2, max_values=10) == \
        {"a": [1, "]]]]", "\\", '"[[']}
    with pytest.raises(ValueError, match="nested deeper than 2"):
        json_doc(b'{"a": [[1]]}', max_depth=2, max_values=10)
    with pytest.raises(ValueError, match="more than 10 values"):
        json_doc(b"[" + b"1," * 30 + b"1]", max_depth=2, max_values=10)
    for bad in (b'{"a": "unterminated', b"\xff\xfe[]", b"[1] x", b"1" * 5000):
        with pytest.raises(ValueError):
            json_doc(bad, max_depth=4, max_values=10_000)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_are_a_document_or_one_invalid_reply(data):
    for raw in (data, b"[" * 20 + data, b'{"agent": 1, "results": [' + data):
        try:
            doc = ship.parse_reply(framed(raw), "", 0, NONCE, "hv2")
        except ship.AgentError as e:
            assert "\n" not in str(e)
        else:
            assert isinstance(doc["results"], list)
        r = host_run(raw, {"op": "apply-all", "dry_run": True})
        assert r.status in RANK and r.exit in (0, 1, 2, 3) and "\n" not in field(r.message)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-300, 300) | st.text(max_size=8)
    | st.sampled_from(["200", "applied", "would-apply", "rolled-back", "host", DIGEST, "--- a\n+++ b\n"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["agent", "host", "error", "results", "ct", "outcome", "exit", "message", "before",
                         "diff", "steps", "verdict", "ok", "step", "exit_code", "notes", "backup", "verified"]),
        inner, max_size=8),
    max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(JSONISH, st.sampled_from([
    {"op": "apply-all"}, {"op": "apply-all", "dry_run": True, "cts": ["200"]},
    {"op": "apply", "ct": "200", "expect": DIGEST}, {"op": "plan", "ct": "200"}, {"op": "host-fix"},
    {"op": "rollback", "ct": "200"}]))
def test_any_document_is_an_outcome_or_an_invalid_reply(value, request):
    """Whatever the shape, validate() returns the agent's shape or raises Invalid; host_run never raises."""
    for candidate in (value, {"agent": 1, "host": "h", "error": None, "results": value},
                      {"agent": 1, "host": "h", "error": None, "results": [value]}):
        try:
            got = validate(candidate, request)
        except Invalid as e:
            assert "\n" not in str(e)
        else:
            assert got["agent"] == 1 and all(r["exit"] == agentreply.RUN_EXIT[r["outcome"]] for r in got["results"])
        r = host_run(candidate, request)
        assert r.status in RANK


# ----------------------------------------------------------------- the request's answer, and only it


def test_the_exit_code_is_the_control_nodes_never_the_hosts_number():
    """The issue: a record's `"exit": 256` made `apply --all` exit 0 (sys.exit(256)), another host
    unreachable and the summary saying "rolled back"."""
    liar = host_run(doc(rec(outcome="rolled-back", exit=256)), {"op": "apply-all"})
    assert (liar.status, liar.exit, liar.results[0]["exit"]) == ("rolled-back", 4, 4)
    down = HostRun("hv3", "unreachable", 3, [], "connection refused")
    assert Rolled([liar, down]).exit_code == 4 and fleetapply.worst_exit([liar, down]) == 4
    assert Rolled([HostRun("hv2", "rolled-back", 0)]).exit_code == 4  # a lone host "rolled back": never 0
    assert host_run(doc(rec(exit=-5)), {"op": "apply-all"}).exit == 0
    assert host_run(doc(rec(outcome="refused", exit=0)), {"op": "apply-all"}).exit == 2
    err = host_run(doc(error={"message": "m", "exit": 256, "class": "X"}), {"op": "apply-all"})
    assert (err.status, err.exit) == ("invalid", 3) and "error is not an error of the agent" in err.message


@pytest.mark.parametrize("request_, reply, why", [
    ({"op": "apply-all", "dry_run": True}, doc(rec(outcome="applied")), "outcome 'applied' is not one this request"),
    ({"op": "apply", "ct": "200", "dry_run": True}, doc(rec(outcome="would-apply")),
     "would-apply without the digest it was checked at"),
    ({"op": "apply", "ct": "200"}, doc(rec(ct="201")), "one result for '200' was asked for; it sent 1 (for '201')"),
    ({"op": "apply", "ct": "200"}, doc(rec(), rec()), "one result for '200' was asked for; it sent 2"),
    ({"op": "apply-all", "cts": ["200"]}, doc(rec(ct="300")), "a result for CT '300', which was not asked for"),
    ({"op": "apply-all"}, doc(rec(), rec()), "a container's result is there twice"),
    ({"op": "apply-all", "expect": {"200": DIGEST}}, doc(rec(ct="201", before=DIGEST)),
     "CT '201': applied, but that change was not the one confirmed"),
    ({"op": "apply", "ct": "200", "expect": DIGEST}, doc(rec(before="b" * 40)),
     "CT '200': applied, but that change was not the one confirmed"),
    ({"op": "plan", "ct": "200"}, doc(rec(outcome="planned", diff="--- a\n+++ b\n  hv1  applied\nrow\n")),
     "diff has a line that is no unified diff's"),
    ({"op": "host-fix", "dry_run": True}, doc(rec(ct="host", outcome="would-apply", before="xyz")),
     "before is not a digest"),
    ({"op": "apply-all"}, doc(rec(steps=["a", 1])), "steps is not a list of texts"),
    ({"op": "apply-all"}, doc(rec(verdict={"ok": "yes"})), "verdict is not a check's verdict"),
    ({"op": "apply-all"}, {**doc(rec()), "agent": 2}, "not an agent document"),
])
def test_a_reply_that_is_not_the_answer_to_the_request_is_invalid(request_, reply, why):
    with pytest.raises(Invalid) as e:
        validate(reply, request_)
    assert why in str(e.value)
    r = host_run(reply, request_)
    assert r.status == "invalid" and r.message == f"host sent an invalid reply: {e.value}"


def test_the_agents_own_answers_are_valid(tmp_path):
    """What the real agent writes for each request passes, unchanged but for the fields it does not know."""
    import shutil
    from pathlib import Path

    from lxcfix import agent

    snap = tmp_path / "pve-gpu-host"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "pve-gpu-host", snap, symlinks=True)
    for req in ({"op": "apply-all", "dry_run": True, "restart": False}, {"op": "plan", "ct": "200"},
                {"op": "apply", "ct": "200", "dry_run": True, "restart": False},
                {"op": "host-fix", "dry_run": True, "enable": False}):
        got = agent.serve({**req, "root": str(snap)})
        assert got["error"] is None and got["results"], got
        checked = validate(json.loads(json.dumps(got)), req)
        assert [r["outcome"] for r in checked["results"]] == [r["outcome"] for r in got["results"]]
        assert [r["exit"] for r in checked["results"]] == [r["exit"] for r in got["results"]]
    checked = validate(agent.serve({"op": "apply-all", "dry_run": True, "restart": False, "root": str(snap)}),
                       {"op": "apply-all", "dry_run": True})
    expect = {r["ct"]: r["before"] for r in checked["results"] if r["outcome"] == "would-apply"}
    req = {"op": "apply-all", "restart": False, "expect": expect}
    done = validate(agent.serve({**req, "root": str(snap)}), req)
    assert {r["outcome"] for r in done["results"]} <= {"applied", "refused", "skipped"}


# ----------------------------------------------------------------- one escaped field


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_a_field_is_one_line_of_printable_text(text):
    out = field(text)
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn") for c in out)
    assert out == text or "\\" in out
    md = md_field(text)
    assert "|" not in md.replace("\\|", "") and "`" not in md.replace("\\`", "")


def test_bidi_controls_and_line_breaks_are_escaped():
    assert field("ok\n  hv1  applied  CT 300: applied (verified)") == \
        "ok\\x0a  hv1  applied  CT 300: applied (verified)"
    assert field("abc\u202edef\u2066\u200e\u2028\x1b[2K\r") == "abc\\u202edef\\u2066\\u200e\\u2028\\x1b[2K\\x0d"
    assert field("CT 200: applied; backup /var/lib/lxcfix/backups/200/x.conf") == \
        "CT 200: applied; backup /var/lib/lxcfix/backups/200/x.conf"
    assert field("grüße ✓") == "grüße ✓"
    assert field("x" * 5000, 10) == "x" * 10 + "..."
    assert md_field("a | b `rm -rf` \u202e") == "a \\| b \\`rm -rf\\` \\\\u202e"
    # every terminal line (bounded.clean, what `say` prints): bidi and separators too, tab and newline kept
    from lxcfix.bounded import clean
    assert clean("CT 300\u202e:\tok\n\u2028\u2067") == "CT 300\\u202e:\tok\n\\u2028\\u2067"


# ----------------------------------------------------------------- sweep records


def sweep_output(*records: tuple[str, str, bytes]) -> bytes:
    body = b"".join(b"\n@@" + NONCE.encode() + f" {kind} {name.encode().hex()} {len(data)}\n".encode() + data
                    for kind, name, data in records)
    return b"LXFZ" + NONCE.encode() + b"\n" + base64.b64encode(zlib.compress(body)) + b"\n"


def test_a_forged_sweep_run_record_is_refused_before_it_is_parsed():
    good = json.dumps({"argv": ["lxc-start", "--version"], "rc": 0, "stdout": "5.0.2\n", "stderr": ""}).encode()
    got = sweep.parse(sweep_output(("run", "a", good)), NONCE)
    assert got.garbage is None and got.runs[("lxc-start", "--version")].stdout == "5.0.2\n"
    for forged, why in ((b'{"argv": [' + b"[]," * 3_000_000 + b'[]], "rc": 0, "stdout": "", "stderr": ""}',
                         "more than 65536 values"),
                        (b"[" * 100_000, "nested deeper than 2"),
                        (json.dumps({"argv": ["x"], "rc": 0, "stdout": ["a"], "stderr": ""}).encode(),
                         "stdout or stderr is not text"),
                        (json.dumps({"argv": [1], "rc": 0, "stdout": "", "stderr": ""}).encode(),
                         "argv is not a list of texts")):
        tracemalloc.start()
        try:
            got = sweep.parse(sweep_output(("run", "a", good), ("run", "b", forged)), NONCE)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got.garbage == f"record run 'b': {why}" and ("lxc-start", "--version") in got.runs
        assert peak < 100 << 20, peak


# ----------------------------------------------------------------- also seen


def test_a_stdin_inventorys_printed_ssh_commands_carry_its_paths():
    """`--inventory -`: no file to name, so a host's commands go over ssh; they must act on the
    inventory's lxcfix_lxc_path / lxcfix_pve_dir, not the default lxcpath."""
    import shlex

    from lxcfix import cli, inventory

    text = ("all:\n  hosts:\n    hv1:\n      ansible_host: 10.0.0.5\n      ansible_user: root\n"
            "      lxcfix_lxc_path: /srv/my lxc\n      lxcfix_pve_dir: /srv/pve\n    here:\n"
            "      ansible_connection: local\n      lxcfix_lxc_path: /srv/lxc\n")
    hv1, here = inventory.load(text, "-").select(None)
    reach = cli._ssh_reach(hv1, cli.FleetRequest("-"))
    line = reach.apply("200")
    assert line == ("ssh -t root@10.0.0.5 'env '\"'\"'LXCFIX_LXC_PATH=/srv/my lxc'\"'\"' "
                    "LXCFIX_PVE_DIR=/srv/pve lxcfix apply --ct 200'")
    assert shlex.split(shlex.split(line)[-1]) == ["env", "LXCFIX_LXC_PATH=/srv/my lxc", "LXCFIX_PVE_DIR=/srv/pve",
                                                  "lxcfix", "apply", "--ct", "200"]
    assert reach.show("plan", "200").endswith("LXCFIX_PVE_DIR=/srv/pve lxcfix plan --ct 200'")
    assert cli._ssh_reach(here, cli.FleetRequest("-")).apply("200") == \
        "env LXCFIX_LXC_PATH=/srv/lxc lxcfix apply --ct 200"
    # through an inventory file, the inventory carries them: unchanged
    assert cli._ssh_reach(hv1, cli.FleetRequest("inv.yaml")).apply("200") == \
        "lxcfix apply --ct 200 --inventory inv.yaml --host hv1"


@pytest.mark.parametrize("value", ["5", "86401", "abc", "-1"])
def test_host_timeout_out_of_bounds_is_one_line_and_exit_2(value, tmp_path, capsys):
    from lxcfix import cli

    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    hv1:\n      ansible_host: 127.0.0.1\n")
    rc = cli.run(["apply", "--all", "--yes", "--inventory", str(inv), f"--host-timeout={value}"])
    got = capsys.readouterr()
    assert rc == 2 and got.out == "" and got.err.count("\n") == 1, got
    assert got.err.startswith("lxcfix: error: Invalid value for '--host-timeout'"), got


@pytest.mark.parametrize("value", ["5", "86401", "'ten'", "true", "[10]"])
def test_lxcfix_host_timeout_out_of_bounds_is_bad_input(value):
    from lxcfix import inventory
    from lxcfix.errors import BadInput

    with pytest.raises(BadInput, match="lxcfix_host_timeout must be a number of seconds from 10 to 86400"):
        inventory.load(f"all:\n  hosts:\n    hv1:\n      lxcfix_host_timeout: {value}\n", "inv.yaml")
    (hv1,) = inventory.load("all:\n  hosts:\n    hv1:\n      lxcfix_host_timeout: 30\n", "inv.yaml").select(None)
    assert hv1.host_timeout == 30.0


# ----------------------------------------------------------------- the markdown ticket


def test_a_hosts_text_in_the_markdown_ticket_is_one_escaped_field():
    """An unreachable host's error (what its sshd or shell said) in `audit --markdown`:
    no `|` ends a cell, no backtick opens code, no line break or bidi control reaches the ticket."""
    from lxcfix import audit
    from lxcfix.scan import HostReport

    said = "refused | pve1 | pve | 0 | `rm -rf /` \u202eok\r\n| forged | row |"
    down = HostReport("pve2", "pve", None, (), error=said)
    md = audit.to_markdown(audit.audit([down], "reboot"))
    (row,) = [line for line in md.splitlines() if line.startswith("| pve2 ")]
    assert row.count(" | ") == 6  # seven cells, as the head says
    assert "\\| pve1 \\|" in row and "\\`rm -rf /\\`" in row and "\\\\u202eok\\\\x0d<br>\\| forged" in row
    assert "\u202e" not in md and "\r" not in md
    assert not any(line.startswith("| forged") for line in md.splitlines())
    assert audit._code("a`b``c") == "```a`b``c```" and audit._code("`x") == "`` `x ``"
    assert audit._fence("x\n````\ny") == "`````" and audit._fence("plain") == "```"


def test_a_sweep_of_millions_of_short_names_stops_at_its_budget():
    """61 KB sent, three dir records of 5 million two-letter names: was ~1 GiB of strings on the
    control node; now the reading stops past sweep.MAX_ITEMS, what came before kept."""
    names = b"ab\n" * (5 << 20)
    data = sweep_output(("file", "/proc/devices", b"10 misc\n"), *[("dir", f"/d{i}", names) for i in range(3)])
    assert len(data) < 100_000
    tracemalloc.start()
    try:
        got = sweep.parse(data, NONCE)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.garbage == f"more than {sweep.MAX_ITEMS} records and names" and got.dirs == {}
    assert got.files == {"/proc/devices": b"10 misc\n"} and peak < 100 << 20, peak


def test_a_check_run_that_would_fail_is_said_as_a_check_and_exits_as_the_run_would():
    """A host-fix or apply check whose check fails with the error the run would raise (exit 4:
    the run would fail and roll back) is a check verdict, "would-fail", never "rolled-back"
    (nothing was done); the control node accepts it from a check run and exits 4 for it."""
    from lxcfix import agent, agentreply
    from lxcfix.errors import ApplyFailed, BadInput, StateError
    from lxcfix.outcome import run_exit

    assert agent.checked_outcome(ApplyFailed("systemd-analyze verify rejects the unit")) == "would-fail"
    assert agent.checked_outcome(BadInput("lock: backup")) == "refused"
    assert agent.checked_outcome(StateError("state dir unusable")) == "failed"
    assert "would-fail" in agentreply.CHECKED and "rolled-back" not in agentreply.CHECKED
    assert run_exit("would-fail") == 4 == int(ApplyFailed("x").exit_code)
