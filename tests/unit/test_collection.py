"""The Ansible collection (ansible_collections/lxcfix/lxcfix) with the real
ansible-doc and ansible-playbook, over a local connection, on copies of the
bundled host snapshots (the modules' `root` option): docs as ansible-doc shows
them, check mode and diffs, idempotence, and the failure when lxcfix is missing
or too old where the module runs. (The same modules against real containers
over SSH: tests/real/test_ansible.py.)"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from collection_support import COLLECTION, REPO, Playbooks, ansible_tool, missing_reason
from lxcfix import api

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

MODULES = ("lxcfix_scan", "lxcfix_facts", "lxcfix_fix")
EXAMPLE = REPO / "examples" / "pve-gpu-host"


@pytest.fixture
def snap(tmp_path) -> Path:
    """A copy of examples/pve-gpu-host: the checkout's example is never written."""
    dst = tmp_path / "pve-gpu-host"
    shutil.copytree(EXAMPLE, dst)
    return dst


@pytest.fixture
def play(tmp_path) -> Playbooks:
    return Playbooks(tmp_path / "ansible")


def local_inventory(play: Playbooks, interpreter: str, **hosts) -> Path:
    hosts = hosts or {"hv": {}}
    return play.inventory({name: {"ansible_connection": "local", "ansible_python_interpreter": interpreter,
                                  **extra} for name, extra in hosts.items()})


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- the docs


def test_ansible_doc_shows_every_module_and_its_options_match_the_argument_spec(tmp_path):
    env = Playbooks(tmp_path).env(tmp_path / "unused")
    r = subprocess.run([ansible_tool("ansible-doc"), "--json", "-t", "module", *(f"lxcfix.lxcfix.{m}" for m in MODULES)],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    docs = json.loads(r.stdout)
    assert sorted(docs) == sorted(f"lxcfix.lxcfix.{m}" for m in MODULES)
    for name, doc in docs.items():
        assert doc["doc"]["short_description"] and doc["examples"].strip() and doc["return"], name
        assert doc["doc"]["attributes"]["check_mode"]["support"] == "full", name
        source = (COLLECTION / "plugins" / "modules" / f"{name.split('.')[-1]}.py").read_text()
        assert set(doc["doc"]["options"]) == _argument_spec_keys(source), name
    fix = docs["lxcfix.lxcfix.lxcfix_fix"]
    assert fix["doc"]["attributes"]["diff_mode"]["support"] == "full"
    assert {"changed", "diff", "backup_file", "restart_required", "verified", "findings"} <= set(fix["return"])
    assert fix["doc"]["options"]["ct"]["required"] is True


def _argument_spec_keys(source: str) -> set[str]:
    """The option names of a module: its ARGUMENT_SPEC, or the shared SCAN_ARGUMENT_SPEC."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ARGUMENT_SPEC" for t in node.targets):
            return {k.arg for k in node.value.keywords}
    utils = (COLLECTION / "plugins" / "module_utils" / "lxcfix_api.py").read_text()
    return _spec_named(utils, "SCAN_ARGUMENT_SPEC")


def _spec_named(source: str, name: str) -> set[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return {k.arg for k in node.value.keywords}
    raise AssertionError(f"no {name}")


def test_collection_and_library_agree_on_the_api_version():
    utils = (COLLECTION / "plugins" / "module_utils" / "lxcfix_api.py").read_text()
    assert f"API_VERSION = {api.API_VERSION}\n" in utils
    assert api.require("0.1.0") == api.version()
    with pytest.raises(api.TooOld, match="999.0 or newer is needed"):
        api.require("999.0")


# ---------------------------------------------------------------- check mode, diff, idempotence


def test_check_mode_reports_the_diffs_and_writes_nothing(play, snap):
    before = tree_bytes(snap)
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)))
    run = play.run("snapshot.yml", inv, "--check", "--diff", "-e", f"snap={snap}")
    assert run.rc == 0, run.output()

    scan = run.task("Scan")
    assert scan["changed"] is False and scan["schema"] == 1
    assert scan["pending"] == ["200", "201"] and scan["summary"]["containers"] == 4
    # the results name the inventory's host (the action passes inventory_hostname), never localhost
    assert {c["host"] for c in scan["containers"]} == {f["host"] for f in scan["findings"]} == {"hv"}
    assert [h["host"] for h in scan["hosts"]] == ["hv"]
    assert all("device_nodes" not in (h["facts"] or {}) for h in scan["hosts"])  # host_nodes: false
    assert {"LXF101"} <= {f["code"] for f in scan["findings"] if f["ct"] == "200"}
    assert run.task("Facts")["ansible_facts"]["lxcfix"]["pending"] == ["200", "201"]

    fix = run.task("Fix")
    assert fix["changed"] is True and fix["verified"] is False and "backup_file" not in fix
    assert [d["before_header"] for d in fix["diff"]] == ["/etc/pve/lxc/200.conf", "/etc/pve/lxc/201.conf"]
    d200 = fix["diff"][0]
    assert d200["before"] == (snap / "etc/pve/lxc/200.conf").read_text()
    assert "dev0: /dev/nvidia-uvm,mode=0666\n" in d200["after"]
    assert d200["after"].count("c 508:* rwm") == d200["before"].count("c 508:* rwm") - 1  # the snapshot keeps its own
    assert d200["after"] == api.fix("200", root=str(snap))["after"].decode()
    assert all(c["steps"] and c["backup_file"] is None for c in fix["containers"])
    assert "--- before: /etc/pve/lxc/200.conf" in run.stdout  # --diff shows it
    assert run.task("Fix again")["changed"] is True  # still nothing written
    assert tree_bytes(snap) == before  # no config changed, no backup, no journal


def test_real_run_changes_then_second_run_is_unchanged(play, snap):
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)))
    planned = api.fix("201", root=str(snap))["after"]
    run = play.run("snapshot.yml", inv, "-e", f"snap={snap}", "-e", "fix_ct=201")
    assert run.rc == 0, run.output()
    fix = run.task("Fix")
    assert fix["changed"] is True and "diff" not in fix  # no --diff: no diff
    assert (snap / "etc/pve/lxc/201.conf").read_bytes() == planned
    backup = Path(fix["backup_file"])
    assert backup.parent == snap / ".lxcfix/state/backups/201" and backup.read_bytes() == \
        (EXAMPLE / "etc/pve/lxc/201.conf").read_bytes()
    assert fix["containers"][0]["step_reached"] == "written" and fix["restart_required"] is False
    again = run.task("Fix again")
    assert again["changed"] is False and again["containers"][0]["steps"] == []
    # the rerun reports the state it found: nothing to do, and the container checks clean
    assert again["verified"] is True and again["host"] == "hv" and again["containers"][0]["host"] == "hv"
    assert (snap / "etc/pve/lxc/200.conf").read_bytes() == (EXAMPLE / "etc/pve/lxc/200.conf").read_bytes()


def test_bad_input_fails_the_task_with_lxcfixs_message(play, snap):
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)))
    run = play.run("snapshot.yml", inv, "-e", f"snap={snap}", "-e", "fix_ct=999")
    assert run.rc != 0
    fix = run.task("Fix")
    assert fix["_status"] == "failed" and fix["exit_code"] == 2 and fix["rolled_back"] is False
    assert fix["msg"].startswith("lxcfix: no container '999'")


def test_fix_through_a_link_out_of_the_snapshot_fails_the_task_and_writes_nothing(play, snap, tmp_path):
    """Issue 21 row 5: with the snapshot's etc/pve/lxc a symlink to a directory elsewhere, the
    module (lxcfix.api.fix) wrote the config out there. Now the task fails with lxcfix's one
    line (exit 2) and nothing out there, or in the snapshot, changes."""
    import os

    outside = tmp_path / "outside"
    shutil.move(str(snap / "etc/pve/lxc"), outside)
    os.symlink(outside, snap / "etc/pve/lxc")
    book = tmp_path / "fix-only.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Fix\n"
                    "      lxcfix.lxcfix.lxcfix_fix:\n        ct: '200'\n        root: '{{ snap }}'\n")
    before, inside = tree_bytes(outside), tree_bytes(snap)
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)))
    run = play.run(book, inv, "-e", f"snap={snap}")
    assert run.rc != 0
    fix = run.task("Fix")
    assert fix["_status"] == "failed" and fix["exit_code"] == 2 and fix["rolled_back"] is False, run.output()
    assert fix["msg"].startswith("lxcfix: root ") and "outside the snapshot" in fix["msg"]
    assert tree_bytes(outside) == before and tree_bytes(snap) == inside
    assert not (snap / ".lxcfix/state").exists()


# ---------------------------------------------------------------- lxcfix missing or too old where the module runs


def _fake_lxcfix(root: Path, version: str, api_version: int | None) -> Path:
    pkg = root / "lxcfix"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    if api_version is not None:
        (pkg / "api.py").write_text(f"API_VERSION = {api_version}\n")
    return root


def test_missing_or_old_lxcfix_fails_with_what_to_do(play, snap, tmp_path):
    # -S: no site-packages, so only what PYTHONPATH names is importable.
    hosts = {
        "missing": play.interpreter("py-missing", "-S", unset=("PYTHONPATH",)),
        "old": play.interpreter("py-old", "-S", PYTHONPATH=str(_fake_lxcfix(tmp_path / "old", "0.0.9", None))),
        "noapi": play.interpreter("py-noapi", "-S", PYTHONPATH=str(_fake_lxcfix(tmp_path / "noapi", "0.1.0", None))),
        "future": play.interpreter("py-future", "-S", PYTHONPATH=str(_fake_lxcfix(tmp_path / "future", "9.0.0", 9))),
    }
    inv = play.inventory({h: {"ansible_connection": "local", "ansible_python_interpreter": py}
                          for h, py in hosts.items()})
    run = play.run("one_task.yml", inv, "-e", f"snap={snap}")
    assert run.rc != 0
    msgs = {h: run.task("Scan", h) for h in hosts}
    assert all(m["_status"] == "failed" for m in msgs.values()), run.output()
    assert "lxcfix is not installed for" in msgs["missing"]["msg"]
    assert "ansible_python_interpreter=/opt/pipx/venvs/lxcfix/bin/python" in msgs["missing"]["msg"]
    assert "lxcfix 0.0.9" in msgs["old"]["msg"] and "is too old" in msgs["old"]["msg"]
    assert "has no library API (lxcfix.api)" in msgs["noapi"]["msg"]
    assert "speaks library API version 9" in msgs["future"]["msg"]


# ---------------------------------------------------------------- the playbook's variables in an inventory


def test_playbook_variables_are_accepted_by_lxcfixs_inventory_reader():
    """The example playbook's variables may live in an inventory; `lxcfix scan --inventory` must still read it."""
    import re

    from lxcfix import inventory

    book = (COLLECTION / "playbooks" / "pre_maintenance.yml").read_text()
    used = set(re.findall(r"\b(lxcfix_[a-z_]+) \| default", book))
    assert used == set(inventory.COLLECTION_KEYS)
    text = "all:\n  vars:\n" + "".join(f"    {k}: x\n" for k in sorted(used)) + "  hosts:\n    pve1: {}\n"
    (entry,) = inventory.load(text, "inv.yaml").select(None)
    assert entry.name == "pve1"
    js = '{"_meta": {"hostvars": {"pve1": {"lxcfix_python": "/opt/pipx/venvs/lxcfix/bin/python"}}}, ' \
         '"all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": ["pve1"]}}'
    assert [e.name for e in inventory.load_json(js, "inv.json").select(None)] == ["pve1"]


def test_messages_use_the_modules_option_names(play, snap, tmp_path):
    """lxcfix says `--root DIR`; a task was given `root: DIR`: the message says `root`."""
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)))
    run = play.run("snapshot.yml", inv, "-e", f"snap={tmp_path / 'nowhere'}")
    assert run.rc != 0
    scan = run.task("Scan")
    assert scan["_status"] == "failed" and scan["exit_code"] == 2
    assert scan["msg"] == f"lxcfix: root {tmp_path / 'nowhere'}: no such directory", scan["msg"]
    from ansible_collections.lxcfix.lxcfix.plugins.module_utils.lxcfix_api import option_words

    assert option_words("--live cannot do this change; use --style path or numeric with --live") == \
        "live cannot do this change; use style path or numeric with live"
    assert option_words("fix it by hand first (lxcfix diagnose --ct 200 lists them)") == \
        "fix it by hand first (lxcfix diagnose --ct 200 lists them)"  # a command stays runnable


def test_host_nodes_only_when_asked(snap):
    assert "device_nodes" in api.scan(root=str(snap))["hosts"][0]["facts"]  # the library's default: as --json
    assert "device_nodes" not in api.scan(root=str(snap), host_nodes=False)["hosts"][0]["facts"]
    assert api.scan(root=str(snap), host="pve1")["containers"][0]["host"] == "pve1"


def test_every_module_keeps_to_the_inventorys_lxcfix_containers(play, snap):
    """lxcfix_containers scopes the modules as it scopes `lxcfix apply --all --inventory`: the scan,
    the facts and `ct: all` see only container 201; 200 (just as broken) is not read or written."""
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)), hv={"lxcfix_containers": 201})
    run = play.run("snapshot.yml", inv, "-e", f"snap={snap}")
    assert run.rc == 0, run.output()
    scan = run.task("Scan")
    assert [c["ct"] for c in scan["containers"]] == ["201"] and scan["pending"] == ["201"]
    assert {f["ct"] for f in scan["findings"]} == {"201"}
    assert run.task("Facts")["ansible_facts"]["lxcfix"]["pending"] == ["201"]
    fix = run.task("Fix")
    assert [c["ct"] for c in fix["containers"]] == ["201"] and fix["changed"] is True
    assert (snap / "etc/pve/lxc/200.conf").read_bytes() == (EXAMPLE / "etc/pve/lxc/200.conf").read_bytes()
    assert (snap / "etc/pve/lxc/201.conf").read_bytes() != (EXAMPLE / "etc/pve/lxc/201.conf").read_bytes()
    assert not (snap / ".lxcfix/state/backups/200").exists()
    assert run.task("Fix again")["changed"] is False and run.task("Fix again")["verified"] is True


def test_a_bad_lxcfix_containers_fails_the_task_as_the_command_line_refuses_it(play, snap):
    before = tree_bytes(snap)
    inv = local_inventory(play, play.interpreter("py", PYTHONPATH=str(REPO)),
                          hv={"lxcfix_containers": ["201", "../etc"]})
    run = play.run("snapshot.yml", inv, "-e", f"snap={snap}")
    assert run.rc == 2, run.output()
    scan = run.task("Scan")
    assert scan["_status"] == "failed" and scan["exit_code"] == 2
    assert scan["msg"] == "lxcfix: lxcfix_containers: '../etc' is not a Proxmox vmid or an LXC container name"
    assert tree_bytes(snap) == before
    assert api.scope([200, "web", 200]) == ["200", "web"] and api.scope("all") is None and api.scope(None) is None
