"""The command line's help, colour and completion, as a new user meets them (issue 16):
no `<bool>` (or any type label) beside an option, each command's --help ending with real
examples (the read-only ones are run here against the bundled snapshot), --color beside
NO_COLOR, and typer's shell completion.

Why `<bool>` was there: typer's rich help panel prints every parameter's type label, flags
included (typer's plain formatter skips flags; older typers skipped "BOOLEAN"). lxcfix's
help is click's plain formatter (rich_markup_mode=None), where flags carry no label, and
every option that takes a value names it (metavar: --root DIR, --ct ID).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

import pytest

from lxcfix import cli

from .conftest import EXAMPLES, REPO

COMMANDS = [c.name or c.callback.__name__.replace("_", "-") for c in cli.app.registered_commands]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.run(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def help_of(capsys, command: str | None) -> str:
    rc, out, _ = run(capsys, *([command] if command else []), "--help")
    assert rc == 0
    return out


def options_section(text: str) -> str:
    return text.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]


def examples_of(text: str) -> list[tuple[str, str]]:
    """(what, command line) pairs of the Examples: part of a --help."""
    part = text.split("Examples:\n", 1)[1]
    return re.findall(r"^\s+# (.+)\n\s+(\S.*)$", part, flags=re.M)


def test_every_command_is_listed():
    assert set(COMMANDS) >= {"scan", "diagnose", "plan", "apply", "rollback", "audit", "host-fix", "hook", "facts",
                             "explain"}


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_shows_no_type_label_beside_an_option(capsys, command):
    text = help_of(capsys, command)
    assert "<bool>" not in text
    options = options_section(text)
    assert not re.search(r"<[a-z][a-z\[\], ]*>", options), options  # <str>, <int range>, <list[str]>
    if command in ("scan", "diagnose", "plan", "apply", "audit", "facts"):
        assert "--root DIR" in options
    if command in ("diagnose", "plan", "apply", "rollback"):
        assert "--ct ID" in options


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_ends_with_two_or_three_real_examples(capsys, command):
    text = help_of(capsys, command)
    examples = examples_of(text)
    assert 2 <= len(examples) <= 3, text
    assert all("lxcfix" in line for _, line in examples)
    if command:
        assert all(line.startswith(("lxcfix ", "cp ", "pct ")) for _, line in examples)
        assert any(f"lxcfix {command}" in line for _, line in examples)
    # nothing but examples (and the completion note on the top level) after them
    tail = text.rsplit(examples[-1][1], 1)[1].strip()
    assert tail == "" or (command is None and tail.startswith("Shell completion"))


def read_only_examples() -> list[list[str]]:
    """Every example that only reads: those on the bundled snapshot, and explain."""
    out = []
    for command in [None, *COMMANDS]:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            cli.run([*([command] if command else []), "--help"])
        for _, line in examples_of(buf.getvalue()):
            argv = shlex.split(line)
            if argv[0] == "lxcfix" and ("--root" in argv and "examples/pve-gpu-host" in argv or argv[1:2] == ["explain"]) \
                    and argv[1] in ("scan", "diagnose", "plan", "facts", "explain", "audit"):
                out.append(argv[1:])
    return out


EXAMPLES_RUN = read_only_examples()


def test_the_read_only_examples_are_found():
    assert len(EXAMPLES_RUN) >= 6 and ["explain", "LXF200"] in EXAMPLES_RUN


@pytest.mark.parametrize("argv", EXAMPLES_RUN, ids=[" ".join(a) for a in EXAMPLES_RUN])
def test_the_read_only_examples_work(capsys, monkeypatch, argv):
    monkeypatch.chdir(REPO)
    before = {p: p.read_bytes() for p in (EXAMPLES / "pve-gpu-host").rglob("*") if p.is_file()}
    rc, out, err = run(capsys, *argv)
    assert rc in (0, 1), err
    assert out
    assert {p: p.read_bytes() for p in (EXAMPLES / "pve-gpu-host").rglob("*") if p.is_file()} == before


SNAPSHOT = ["diagnose", "--root", str(EXAMPLES / "pve-gpu-host"), "--ct", "200"]


def test_color_always_colours_a_pipe_even_under_no_color(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    rc, out, _ = run(capsys, "--color", "always", *SNAPSHOT)
    assert rc == 1 and "\x1b[" in out


def test_color_never_and_auto_in_a_pipe_write_no_escape(capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    for argv in (["--color", "never", *SNAPSHOT], SNAPSHOT, ["--color", "auto", *SNAPSHOT]):
        rc, out, _ = run(capsys, *argv)
        assert rc == 1 and "\x1b" not in out and "cannot use the GPU" in out


def test_color_takes_three_values(capsys):
    rc, out, err = run(capsys, "--color", "sometimes", "facts", "--root", str(EXAMPLES / "pve-gpu-host"))
    assert rc == 2 and "--color must be auto, always or never" in err and out == ""
    assert "--color auto|always|never" in help_of(capsys, None)


def test_shell_completion_is_offered_and_completes(tmp_path):
    """typer's completion, through a program called lxcfix (the console script's name)."""
    prog = tmp_path / "lxcfix"
    prog.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
                    "from lxcfix.cli import main\nmain()\n")
    prog.chmod(0o755)
    env = {**os.environ, "_LXCFIX_COMPLETE": "complete_bash", "COMP_WORDS": "lxcfix expl", "COMP_CWORD": "1"}
    r = subprocess.run([str(prog)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["explain"], r.stderr
    env.update(COMP_WORDS="lxcfix scan --ro", COMP_CWORD="2")
    r = subprocess.run([str(prog)], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["--root"]
    env = {**os.environ, "_LXCFIX_COMPLETE": "source_zsh"}
    r = subprocess.run([str(prog)], env=env, capture_output=True, text=True, timeout=60)
    assert "#compdef lxcfix" in r.stdout


def test_completion_options_are_in_the_help(capsys):
    text = help_of(capsys, None)
    assert "--install-completion" in text and "--show-completion" in text


def test_no_arguments_print_the_help_on_stdout_and_exit_0(capsys):
    """`lxcfix` alone is a question, not an error (issue 19): what --help prints, on stdout."""
    rc, out, err = run(capsys)
    assert rc == 0 and err == ""
    assert out == help_of(capsys, None)
    assert out.startswith("Usage: ") and "\nCommands:\n" in out and "error" not in out.split("\n", 1)[0]
