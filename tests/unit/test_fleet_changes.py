"""Fleet changes without a network: the agent run on bundled snapshot copies (in this process,
and shipped to a bare interpreter that has nothing but the standard library), its reply read
totally, and the rolling order of fleetapply as data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import agent, fleetapply, ship, sweep
from lxcfix.fleetapply import HostRun

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def snap(tmp_path) -> Path:
    d = tmp_path / "pve-gpu-host"
    shutil.copytree(REPO / "examples" / "pve-gpu-host", d, symlinks=True)
    return d


def conf(snap: Path, ct: str) -> bytes:
    return (snap / "etc/pve/lxc" / f"{ct}.conf").read_bytes()


# ----------------------------------------------------------------- the agent, in this process


def test_plan_check_apply_and_rollback_of_a_snapshot_container(snap):
    before = conf(snap, "201")
    (p,) = agent.serve({"op": "plan", "ct": "201", "root": str(snap)})["results"]
    assert p["outcome"] == "planned" and p["exit"] == 1 and "+dev0: /dev/net/tun" in p["diff"]
    (c,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap), "restart": False, "dry_run": True})["results"]
    assert c["outcome"] == "would-apply" and c["exit"] == 1 and c["verdict"]["ok"] is True
    assert c["steps"][-1] == agent.ON_FAILURE and conf(snap, "201") == before
    (a,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap), "restart": False,
                        "expect": c["before"]})["results"]
    assert a["outcome"] == "applied" and a["exit"] == 0 and Path(a["backup"]).read_bytes() == before
    assert conf(snap, "201") != before
    (again,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap), "restart": False})["results"]
    assert again["outcome"] == "nothing-to-do" and again["exit"] == 0
    (r,) = agent.serve({"op": "rollback", "ct": "201", "root": str(snap), "restart": False})["results"]
    assert r["outcome"] == "restored" and r["exit"] == 0 and conf(snap, "201") == before


def test_a_config_changed_since_the_confirmed_diff_is_refused(snap):
    (c,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap), "restart": False, "dry_run": True})["results"]
    path = snap / "etc/pve/lxc/201.conf"
    path.write_bytes(path.read_bytes() + b"# edited meanwhile\n")
    edited = path.read_bytes()
    (a,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap), "restart": False,
                        "expect": c["before"]})["results"]
    assert a["outcome"] == "refused" and a["exit"] == 2 and "changed since its diff was shown" in a["message"]
    assert path.read_bytes() == edited


def test_apply_all_changes_each_container_with_a_fix_and_only_those_confirmed(snap):
    doc = agent.serve({"op": "apply-all", "root": str(snap), "restart": False, "dry_run": True})
    checked = {r["ct"]: r for r in doc["results"]}
    assert set(checked) == {"200", "201"} and all(r["outcome"] == "would-apply" for r in checked.values())
    before = {ct: conf(snap, ct) for ct in checked}
    doc = agent.serve({"op": "apply-all", "root": str(snap), "restart": False,
                       "expect": {"201": checked["201"]["before"]}})
    assert [(r["ct"], r["outcome"]) for r in doc["results"]] == [("200", "skipped"), ("201", "applied")]
    assert conf(snap, "200") == before["200"] and conf(snap, "201") != before["201"]


@pytest.mark.parametrize("req, words", [
    ({"op": "format-disk"}, "op must be one of"),
    ({"op": "apply"}, "no ct"),
    ({"op": "apply", "ct": "201", "dry_run": "yes"}, "dry_run is not true or false"),
    ({"op": "apply", "ct": "201", "asks": ["a"]}, "asks must be"),
    ({"op": "apply-all", "cts": "201"}, "cts must be a list"),
    ({"op": "apply-all", "expect": ["x"]}, "expect must map"),
    ([1, 2], "op must be one of"),
])
def test_a_bad_request_is_one_error_and_changes_nothing(snap, req, words):
    if isinstance(req, dict):
        req = {**req, "root": str(snap)}
    doc = agent.serve(req)
    assert doc["results"] == [] and doc["error"]["exit"] == 2 and words in doc["error"]["message"]


def test_a_snapshot_restart_is_refused(snap):
    (a,) = agent.serve({"op": "apply", "ct": "201", "root": str(snap)})["results"]
    assert a["outcome"] == "refused" and "restart must be off" in a["message"]


# ----------------------------------------------------------------- shipped: nothing installed there


def test_the_shipped_agent_runs_on_an_interpreter_with_nothing_but_the_standard_library(snap, tmp_path):
    """-I -S, from /: neither this checkout nor any site-packages (no jinja2, no tenacity, no
    lxcfix) is importable there; what the plan and the transaction need comes on stdin."""
    bare = subprocess.run([sys.executable, "-I", "-S", "-c", "import jinja2"], capture_output=True, cwd="/")
    assert bare.returncode != 0  # the premise: nothing but the stdlib
    nonce = sweep.nonce()
    req = {"op": "apply", "ct": "200", "root": str(snap), "restart": False}
    r = subprocess.run([sys.executable, "-I", "-S", "-c", sweep.BOOT], input=ship.stdin(req, nonce), cwd="/",
                       capture_output=True, text=True, timeout=120)
    doc = ship.parse_reply(r.stdout, r.stderr, r.returncode, nonce, "here")
    (a,) = doc["results"]
    assert a["outcome"] == "applied", a
    assert "+dev0: /dev/nvidia-uvm,mode=0666" in a["diff"]  # rendered there, from the shipped templates
    assert not list(snap.rglob("*.pyc")) and not list(snap.rglob("__pycache__"))


def test_the_bundle_holds_no_control_only_module_and_the_templates():
    doc = json.loads(__import__("zlib").decompress(__import__("base64").b64decode(ship.bundle())))
    mods = set(doc["modules"])
    assert not mods & ship.CONTROL_ONLY
    assert {"lxcfix.agent", "lxcfix.repair", "lxcfix.rules.access", "jinja2", "markupsafe", "tenacity"} <= mods
    assert not [m for m in mods if m.split(".")[0] in ("paramiko", "fabric", "typer", "rich", "yaml")]
    assert "probe.sh" in doc["templates"] and any(k.startswith("fix/") for k in doc["templates"])
    assert len(ship.bundle()) < 1_000_000  # one exec's stdin, compressed


# ----------------------------------------------------------------- the reply, read totally


def test_no_python3_and_an_old_python3_are_one_line_and_nothing_ran():
    with pytest.raises(ship.NoPython) as e:
        ship.parse_reply("", "bash: line 1: python3: command not found\n", 127, "ab" * 16, "hv1")
    assert "python3 is not installed there" in str(e.value) and not e.value.ran
    with pytest.raises(ship.OldPython) as e:
        ship.parse_reply(f"LXFA{'ab' * 16}\nOLD 3.9.2\n", "", 0, "ab" * 16, "hv1")
    assert "its python3 is 3.9.2; lxcfix needs 3.11 or later there; nothing changed" == str(e.value)
    with pytest.raises(ship.NoReply) as e:
        ship.parse_reply("Traceback ...", "Killed", 137, "ab" * 16, "hv1")
    assert e.value.ran and "exit 137" in str(e.value)


def test_a_reply_round_trips_and_a_forged_one_does_not_read():
    nonce = sweep.nonce()
    doc = {"agent": 1, "host": "pve1", "error": None,
           "results": [{"ct": "200", "outcome": "applied", "exit": 0, "message": "CT 200: applied", "steps": ["x"]}]}
    assert ship.parse_reply(agent.reply(doc, nonce).decode(), "", 0, nonce, "hv1") == doc
    forged = {**doc, "results": [{**doc["results"][0], "outcome": "rm -rf"}]}
    with pytest.raises(ship.NoReply):
        ship.parse_reply(agent.reply(forged, nonce).decode(), "", 0, nonce, "hv1")
    with pytest.raises(ship.NoReply):  # another run's nonce: not this reply
        ship.parse_reply(agent.reply(doc, sweep.nonce()).decode(), "", 0, nonce, "hv1")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.binary(max_size=200), st.integers(-1, 255))
def test_any_output_is_a_document_or_one_agent_error(text, junk, rc):
    nonce = "cd" * 16
    for out in (text, f"LXFA{nonce}\n{text}", f"LXFA{nonce}\n" + junk.hex()):
        try:
            doc = ship.parse_reply(out, text, rc, nonce, "hv1")
        except ship.AgentError as e:
            assert "\n" not in str(e)
        else:
            assert isinstance(doc["results"], list)


# ----------------------------------------------------------------- rolling


def runs_of(statuses: dict[str, str]):
    exits = {"applied": 0, "rolled-back": 4, "unreachable": 3, "refused": 2, "lost": 3, "nothing-to-do": 0}
    started = []

    def run_one(entry):
        started.append(entry.name)
        return HostRun(entry.name, statuses[entry.name], exits[statuses[entry.name]])

    class E:
        def __init__(self, name):
            self.name = name

    return [E(n) for n in statuses], run_one, started


def test_one_host_at_a_time_and_no_host_after_a_failed_one():
    entries, run_one, started = runs_of({"a": "applied", "b": "rolled-back", "c": "applied"})
    runs = fleetapply.roll(entries, run_one)
    assert started == ["a", "b"] and [r.status for r in runs] == ["applied", "rolled-back", "not-tried"]
    assert runs[2].message == "not tried: the run stopped after b failed"
    assert fleetapply.worst_exit(runs) == 4
    assert fleetapply.summary_line(runs) == "3 host(s): 1 rolled back, 1 applied, 1 not tried"


def test_unreachable_and_refused_hosts_do_not_stop_the_run_and_max_fail_tolerates():
    entries, run_one, started = runs_of({"a": "unreachable", "b": "refused", "c": "lost", "d": "applied",
                                         "e": "rolled-back", "f": "applied"})
    runs = fleetapply.roll(entries, run_one, max_fail=1)
    assert started == ["a", "b", "c", "d", "e"] and runs[-1].status == "not-tried"
    assert "after c, e failed (--max-fail 1)" in runs[-1].message


def test_serial_batches_run_together_and_report_in_inventory_order():
    entries, run_one, started = runs_of({n: "applied" for n in "abcde"})
    seen = []
    fleetapply.roll(entries, run_one, serial=2, on_done=lambda r: seen.append(r.host))
    assert seen == list("abcde") and sorted(started) == list("abcde")


def test_a_hosts_status_is_its_worst_container():
    doc = {"results": [{"ct": "1", "outcome": "applied", "exit": 0, "message": ""},
                       {"ct": "2", "outcome": "refused", "exit": 2, "message": ""}], "error": None}
    r = fleetapply.from_doc("hv1", doc)
    assert (r.status, r.exit) == ("refused", 2)
    assert fleetapply.from_doc("hv1", {"results": [], "error": None}).status == "nothing-to-do"
    r = fleetapply.from_doc("hv1", {"results": [], "error": {"message": "m", "exit": 3}})
    assert (r.status, r.exit, r.message) == ("failed", 3, "m")


def test_a_host_gets_its_inventory_backend_and_its_containers():
    from lxcfix import inventory

    text = ("all:\n  hosts:\n    hv1:\n      lxcfix_backend: lxc\n      lxcfix_lxc_path: /srv/lxc\n"
            "      lxcfix_containers: [web, db]\n")
    (hv1,) = inventory.load(text, "inv.yaml").select(None)
    req = fleetapply.request_for(hv1, {"op": "apply-all"})
    assert req == {"op": "apply-all", "backend": "lxc", "pve_dir": None, "lxc_path": "/srv/lxc", "cts": ["web", "db"]}
    assert "cts" not in fleetapply.request_for(hv1, {"op": "apply", "ct": "web"})


def test_host_fix_through_the_agent_checks_and_shows_the_unit(snap):
    """host-fix's check run on a snapshot (what `host-fix --inventory --host --dry-run` runs there)."""
    (h,) = agent.serve({"op": "host-fix", "root": str(snap), "dry_run": True, "enable": False})["results"]
    assert h["ct"] == "host" and h["outcome"] == "would-apply" and h["exit"] == 1, h
    assert "nvidia-modprobe" in h["diff"] and h["steps"][-1] == agent.HOST_FIX_ON_FAILURE
    assert not (snap / "etc/systemd/system").exists() or not list((snap / "etc/systemd/system").glob("lxcfix*"))
    doc = agent.serve({"op": "host-fix", "root": str(snap), "gpus": ["0"]})
    assert doc["error"]["exit"] == 2 and "gpus must be a list of GPU minors" in doc["error"]["message"]
