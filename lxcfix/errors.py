"""The exception tree and the exit codes (ARCHITECTURE.md, "Exit codes")."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    CLEAN = 0
    PENDING = 1
    USAGE = 2
    UNREACHABLE = 3
    ROLLED_BACK = 4
    ROLLBACK_FAILED = 5


class LxcfixError(Exception):
    """Base: carries the exit code the CLI turns it into."""

    exit_code: ExitCode = ExitCode.USAGE


class BadInput(LxcfixError):
    """Usage error or bad input: one clear line, exit 2, nothing changed."""

    exit_code = ExitCode.USAGE


class ConfigError(BadInput):
    """A config file that cannot be read or parsed."""


class Refused(BadInput):
    """apply refuses (lock:, no --yes off a terminal, digest moved): nothing changed."""


class Unreachable(LxcfixError):
    """Host or container could not be reached, or its facts could not be read."""

    exit_code = ExitCode.UNREACHABLE


class StateError(LxcfixError):
    """lxcfix's own state (the state dir: backups, journal) cannot be used: a
    full or read-only disk, a symlink planted there. Nothing was changed."""

    exit_code = ExitCode.UNREACHABLE


class CannotWrite(LxcfixError):
    """A file lxcfix must change on the host cannot be written (a full or read-only disk,
    a directory it may not write): one line naming the file and the reason."""

    exit_code = ExitCode.UNREACHABLE


class FactsFailed(LxcfixError):
    """The host's facts cannot be used (a /proc/devices line that is no `<major> <name>`):
    judging containers against them would be guessing."""

    exit_code = ExitCode.UNREACHABLE


class CommandFailed(LxcfixError):
    """Result.check() on a non-zero exit."""

    exit_code = ExitCode.UNREACHABLE

    def __init__(self, argv, result):
        self.argv = list(argv)
        self.result = result
        super().__init__(f"{argv[0]} exited {result.rc}: {result.tail()}")


class ApplyFailed(LxcfixError):
    """The change failed and was rolled back."""

    exit_code = ExitCode.ROLLED_BACK


class RollbackFailed(LxcfixError):
    """The rollback failed too: the message says exactly what state things are in."""

    exit_code = ExitCode.ROLLBACK_FAILED
