"""lxcfix.api, the library API the Ansible collection calls, on copies of the bundled snapshots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lxcfix import api, ctconfig
from lxcfix.errors import BadInput, Refused

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pve-gpu-host"


@pytest.fixture
def snap(tmp_path) -> Path:
    dst = tmp_path / "pve-gpu-host"
    shutil.copytree(EXAMPLE, dst)
    return dst


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_scan_is_the_json_document(snap):
    doc = api.scan(root=str(snap))
    assert doc["schema"] == 1 and doc["command"] == "scan" and doc["version"] == api.version()
    assert [c["ct"] for c in doc["containers"]] == ["200", "201", "202", "203"]
    assert api.scan(["201"], root=str(snap))["summary"]["containers"] == 1
    assert api.pending(root=str(snap)) == ["200", "201"]


def test_check_mode_plans_and_describes_but_writes_nothing(snap):
    before = files(snap)
    r = api.fix("200", root=str(snap))
    assert r["check"] and r["changed"] and r["backup_file"] is None and r["step_reached"] is None
    assert r["before"] == before["etc/pve/lxc/200.conf"] and r["after"] != r["before"]
    assert r["diff"].startswith("--- a/etc/pve/lxc/200.conf\n") and r["style"] == "devn"
    assert any(s.startswith("back up to") for s in r["steps"]) and any(s.startswith("write ") for s in r["steps"])
    assert {f["code"] for f in r["findings"]} >= {"LXF101"}
    assert r["restarted"] is False and r["restart_required"] is False and r["status"] is None  # a snapshot
    assert files(snap) == before


def test_fix_writes_the_planned_bytes_then_is_unchanged(snap):
    planned = api.fix("201", root=str(snap))["after"]
    r = api.fix("201", root=str(snap), check=False)
    assert r["changed"] and r["step_reached"] == "written" and r["verified"] is False
    assert (snap / "etc/pve/lxc/201.conf").read_bytes() == planned
    assert Path(r["backup_file"]).read_bytes() == (EXAMPLE / "etc/pve/lxc/201.conf").read_bytes()
    again = api.fix("201", root=str(snap), check=False)
    assert again["changed"] is False and again["steps"] == [] and again["backup_file"] is None
    assert again["before"] == again["after"] == planned


def test_refusals_are_lxcfix_errors_in_check_mode_too(snap):
    conf = snap / "etc/pve/lxc/200.conf"
    conf.write_bytes(b"lock: backup\n" + conf.read_bytes())
    with pytest.raises(Refused, match="is locked"):
        api.fix("200", root=str(snap))
    with pytest.raises(BadInput, match="not with a snapshot"):
        api.fix("201", root=str(snap), live=True)
    with pytest.raises(BadInput, match="no container '999'"):
        api.fix("999", root=str(snap))
    with pytest.raises(api.LxcfixError):
        api.fix("201", root=str(snap), style="bogus")


def test_digest_of_the_result_matches_the_file(snap):
    r = api.fix("201", root=str(snap), check=False)
    assert ctconfig.digest((snap / "etc/pve/lxc/201.conf").read_bytes()) == ctconfig.digest(r["after"])


def test_clean_and_the_callers_name_for_the_host(tmp_path):
    """api.clean: each container checks clean as it is (what fix's `verified` reports when nothing
    needs doing); host=: the name the results give the host (Ansible's inventory_hostname)."""
    import shutil

    from lxcfix import api

    from .conftest import EXAMPLES

    snap = tmp_path / "pve-gpu-host"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    found = api.clean(root=str(snap))
    assert found["200"] is False and found["201"] is False and found["202"] is True  # 200, 201: denied devices
    done = api.fix("201", check=False, root=str(snap), host="pve1")
    assert done["changed"] is True and done["host"] == "pve1"
    again = api.fix("201", check=False, root=str(snap))
    assert again["changed"] is False and again["verified"] is True and api.clean(["201"], root=str(snap)) == {"201": True}
    doc = api.scan(root=str(snap), host="pve1", host_nodes=False)
    assert {c["host"] for c in doc["containers"]} == {"pve1"} and doc["hosts"][0]["host"] == "pve1"
