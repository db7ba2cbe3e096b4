"""A command line that says two things at once is one line, exit 2, nothing read or changed,
never one of them picked in silence: an option that takes one value given two different
ones (click alone keeps the last: `apply --ct 200 --ct 201 --yes` changed 201 only), a
comma list to --ct, --root with --host, --json with another --format."""

from __future__ import annotations

import shutil

import pytest
import typer

from lxcfix import cli

from .conftest import EXAMPLES


def _tree(snap) -> dict[str, bytes]:
    return {str(p.relative_to(snap)): p.read_bytes() for p in sorted(snap.rglob("*")) if p.is_file()}


def test_apply_given_two_containers_changes_neither(tmp_path, capsys):
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    before = _tree(snap)
    rc = cli.run(["apply", "--root", str(snap), "--ct", "200", "--ct=201", "--no-restart", "--yes"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        "lxcfix: error: --ct is given different values ('200', then '201'): it takes one; give the one you mean"]
    assert _tree(snap) == before


def test_the_same_value_twice_is_no_question(tmp_path, capsys):
    rc = cli.run(["plan", "--root", str(EXAMPLES / "pve-gpu-host"), "--ct", "200", "--ct", "200"])
    out, _ = capsys.readouterr()
    assert rc == 1 and "+++ b/etc/pve/lxc/200.conf" in out


def test_an_option_that_takes_several_is_given_several(capsys):
    rc = cli.run(["scan", "--root", str(EXAMPLES / "pve-gpu-host"), "--ct", "200", "--ct", "201", "--json"])
    out, _ = capsys.readouterr()
    assert rc == 1 and '"ct": "200"' in out and '"ct": "201"' in out and '"ct": "202"' not in out


def test_words_after_a_double_dash_and_option_values_are_not_options(capsys):
    assert cli._repeated(["explain", "--", "--ct", "1", "--ct", "2"]) is None
    assert cli._repeated(["plan", "--root", "--ct", "--ct", "200"]) is None  # --root's value is "--ct"
    assert cli._repeated(["--color", "never", "--color=always", "scan"]) is not None  # the group's own
    assert cli._repeated(["--color", "never", "scan", "--color", "always"]) is None  # scan has none: click says so


def _single_valued():
    group = typer.main.get_command(cli.app)
    for name, command in [("", group), *group.commands.items()]:
        for p in command.params:
            if p.param_type_name == "option" and not (p.is_flag or p.count or p.multiple):
                yield name, p.opts[0]


@pytest.mark.parametrize("command,opt", list(_single_valued()))
def test_every_single_valued_option_of_every_command_is_held_to_one(command, opt):
    argv = ([command] if command else []) + [opt, "a", f"{opt}=b"]
    said = cli._repeated(argv)
    assert said == f"{opt} is given different values ('a', then 'b'): it takes one; give the one you mean"
    assert cli._repeated(([command] if command else []) + [opt, "a", opt, "a"]) is None


def test_a_comma_list_of_containers_says_how_to_give_several(capsys):
    root = str(EXAMPLES / "pve-gpu-host")
    assert cli.run(["scan", "--root", root, "--ct", "200,201"]) == 2
    said = "lxcfix: error: --ct 200,201: one --ct names one container (scan takes several: --ct 200 --ct 201)"
    assert capsys.readouterr().err.strip() == said
    assert cli.run(["plan", "--root", root, "--ct", "200,201"]) == 2  # one container only: the same words
    assert capsys.readouterr().err.strip() == said
    assert cli.run(["scan", "--root", root, "--ct", "200,999"]) == 2  # not all of them are there: just not an id
    assert capsys.readouterr().err.strip() == "lxcfix: error: not a Proxmox container id (vmid): '200,999'"


@pytest.mark.parametrize("argv", [["scan"], ["plan", "--ct", "200"], ["apply", "--all", "--no-restart", "--yes"],
                                  ["apply", "--ct", "200", "--no-restart", "--yes"], ["audit"]])
def test_a_snapshot_and_a_live_host_at_once_are_refused_and_nothing_is_read(tmp_path, capsys, argv):
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    before = _tree(snap)
    assert cli.run([*argv, "--root", str(snap), "--host", "pve1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == ("lxcfix: error: --root reads a snapshot and --host pve1 names a live host: "
                                         "one or the other (a fleet host: --inventory FILE --host NAME)")
    assert _tree(snap) == before


@pytest.mark.parametrize("command,fmt", [("scan", "prometheus"), ("audit", "markdown")])
def test_json_and_another_format_at_once_are_refused(capsys, command, fmt):
    assert cli.run([command, "--root", str(EXAMPLES / "pve-gpu-host"), "--json", "--format", fmt]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == f"lxcfix: error: --json and --format {fmt}: one or the other"
