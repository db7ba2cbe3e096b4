"""The console script's fast path for the Proxmox hookscript (lxcfix.entry): the plain hook
call is served without typer, with what cli's `hook` command prints and returns; every other
command line goes to cli.main."""

from __future__ import annotations

import pytest

from lxcfix import cli, entry, hook, styles


def test_the_fast_path_knows_the_modes_and_styles_the_command_knows():
    assert entry._MODES == hook.MODES
    assert entry._STYLES == styles.STYLES


@pytest.mark.parametrize("argv,want", [
    (["hook", "200", "pre-start"], ("200", "pre-start", "fail", "auto")),
    (["hook", "--mode", "heal", "200", "pre-start"], ("200", "pre-start", "heal", "auto")),
    (["hook", "--mode=heal", "--style", "numeric", "200", "post-start"], ("200", "post-start", "heal", "numeric")),
    (["hook", "200", "pre-start", "--style=path"], ("200", "pre-start", "fail", "path")),
])
def test_a_plain_hookscript_call_is_read(argv, want):
    assert entry.hook_args(argv) == want


@pytest.mark.parametrize("argv", [
    [], ["scan"], ["hook"], ["hook", "200"], ["hook", "200", "pre-start", "x"], ["hook", "--help"],
    ["hook", "--print-snippet"], ["hook", "--mode", "bad", "200", "pre-start"], ["hook", "--style=x", "1", "p"],
    ["--debug", "hook", "200", "pre-start"], ["hook", "--", "200", "pre-start"], ["hook", "-5", "pre-start"],
    ["hook", "", "pre-start"], ["hook", "200", "pre-start", "--mode"],
])
def test_anything_else_is_left_to_the_command_line_framework(argv):
    assert entry.hook_args(argv) is None


@pytest.mark.parametrize("result", [
    hook.HookResult(0, "lxcfix: CT 200: device rules match this host", "pass"),
    hook.HookResult(1, "lxcfix: CT 200 must not start: \x1b]52;c;x\x07 Run: lxcfix apply --ct 200", "block"),
    hook.HookResult(0, "lxcfix hook: warning", "warning"),
    hook.HookResult(0, "", "pass"),
])
def test_it_prints_and_returns_what_the_hook_command_does(result, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(hook, "run_hook", lambda *a, **kw: calls.append((a, kw)) or result)
    capsys.readouterr()
    via_cli = cli.run(["hook", "--mode", "heal", "--style", "path", "200", "pre-start"])
    cli_out = capsys.readouterr()
    via_entry = entry.run_hook(*entry.hook_args(["hook", "--mode", "heal", "--style", "path", "200", "pre-start"]))
    entry_out = capsys.readouterr()
    assert (via_entry, entry_out.out, entry_out.err) == (via_cli, cli_out.out, cli_out.err)
    assert calls[0] == calls[1] == (("200", "pre-start", "heal"), {"style": "path"})


def test_a_bug_is_one_line_and_never_a_traceback(monkeypatch, capsys):
    def boom(*a, **kw):
        raise RuntimeError("x")

    monkeypatch.setattr(hook, "run_hook", boom)
    monkeypatch.delenv("LXCFIX_DEBUG", raising=False)
    capsys.readouterr()
    want = cli.run(["hook", "200", "pre-start"])
    cli_err = capsys.readouterr().err
    assert entry.run_hook("200", "pre-start", "fail", "auto") == want == 3
    assert capsys.readouterr().err == cli_err
