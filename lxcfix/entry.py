"""The `lxcfix` console script (and `python -m lxcfix`).

A Proxmox hookscript runs at every container start (`exec lxcfix hook --mode fail "$@"`:
Proxmox waits for it before lxc-start), so that one command line is served without
the command-line framework: typer, click and the pydantic typer coerces every
parameter with are most of a hook's start-up, and the hook reads two arguments.
Only the exact forms Proxmox and the snippet use are read here:

    lxcfix hook [--mode fail|heal] [--style STYLE] VMID PHASE     (also --mode=M, --style=S)

with a known mode and style; anything else (--help, --print-snippet, a global option,
a bad mode, an extra argument) goes to cli.main, which answers it as always. What is
printed and the exit code are cli's `hook` command's: the message on the stream the
hook's result names, control bytes escaped (bounded.clean).
"""

from __future__ import annotations

import os
import sys

_MODES = ("fail", "heal")
_STYLES = ("auto", "devn", "path", "numeric")


def hook_args(argv: list[str]) -> tuple[str, str, str, str] | None:
    """(vmid, phase, mode, style) when argv is a plain hookscript call; None: cli.main's."""
    if not argv or argv[0] != "hook":
        return None
    opts = {"--mode": "fail", "--style": "auto"}
    pos: list[str] = []
    rest = argv[1:]
    i = 0
    while i < len(rest):
        a = rest[i]
        name, eq, value = a.partition("=")
        if name in opts and eq:
            opts[name] = value
        elif a in opts and i + 1 < len(rest):
            opts[a] = rest[i + 1]
            i += 1
        elif a and not a.startswith("-"):
            pos.append(a)
        else:
            return None  # --help, --print-snippet, "--", "-x": the framework's
        i += 1
    if len(pos) != 2 or opts["--mode"] not in _MODES or opts["--style"] not in _STYLES:
        return None
    return pos[0], pos[1], opts["--mode"], opts["--style"]


def run_hook(vmid: str, phase: str, mode: str, style: str) -> int:
    """cli's `hook` command and cli.run's handling around it, for a plain hookscript call."""
    from .bounded import clean

    try:
        from . import hook

        res = hook.run_hook(vmid, phase, mode, style=style)
        if res.message:  # plain text: Proxmox shows it in the task log
            (sys.stderr if res.stream == "stderr" else sys.stdout).write(clean(res.message) + "\n")
        return int(res.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("lxcfix: interrupted\n")
        return 130
    except Exception as e:  # a bug: one line, as cli.run says it, unless asked
        if os.environ.get("LXCFIX_DEBUG"):
            raise
        from .errors import ExitCode, LxcfixError

        if isinstance(e, LxcfixError):
            sys.stderr.write(clean(f"lxcfix: error: {e}") + "\n")
            return int(e.exit_code)
        sys.stderr.write(clean(f"lxcfix: internal error (a bug, please report it): {type(e).__name__}: {e}; "
                               "--debug shows the traceback") + "\n")
        return int(ExitCode.UNREACHABLE)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    plain = hook_args(args)
    if plain is not None:
        code = run_hook(*plain)
        sys.stdout.flush()
        sys.exit(code)
    from .cli import main as cli_main

    cli_main(args)
