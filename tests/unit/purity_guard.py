"""The pure core does no I/O, checked at call time (issue 23): an audit hook
(`sys.addaudithook`) sees every file opened, process started and socket made in
this interpreter, and blames the code that asked for it.

Who is blamed: walking the Python stack out from the event, frames outside the
project (the standard library, jinja2, yaml, pytest) are passed over, and the
first frame of the project's own code (lxcfix/ or tests/) decides. When that is
a function of a pure module (tests/unit/test_purity.py's PURE), the event is a
violation; an I/O module or a test (a loader a test hands to a pure function,
say) is not. An import is never a violation: a frame of the import machinery
(or linecache, reading source for a traceback) met before the deciding frame
means Python itself is reading .py/.pyc files. The one declared exception is
render's `_read_templates` (render.READS_AT_FIRST_USE): every template, read
once at first use.

tests/unit/conftest.py installs the hook once and an autouse fixture makes every
unit test fail that made a pure module do I/O. A process forked by a test
inherits the hook, but what it sees there is not reported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJECT = tuple(os.path.join(ROOT, d) + os.sep for d in ("lxcfix", "tests"))
# Events that are I/O: files, processes, sockets.
WATCHED = frozenset({
    "open", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "pty.spawn", "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr",
})
_STDLIB = os.path.dirname(os.__file__) + os.sep
# pytest's own frames are outside every test: meeting one first, the walk is over (and short).
_RUNNER = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                for m in (__import__("_pytest"), __import__("pluggy")))
# Python reading its own source: imports and tracebacks.
_PYTHON_READS = (os.path.join(_STDLIB, "importlib") + os.sep, os.path.join(_STDLIB, "linecache.py"),
                 os.path.join(_STDLIB, "zipimport.py"), os.path.join(_STDLIB, "pkgutil.py"))


@dataclass
class Guard:
    pure: dict[str, str] = field(default_factory=dict)  # file -> module name
    allowed: set[tuple[str, str]] = field(default_factory=set)  # (file, function)
    active: bool = False
    seen: list[str] = field(default_factory=list)
    _kinds: dict[str, str] = field(default_factory=dict)

    def declare_pure(self, module: str, path: str | None = None) -> None:
        if path is None:
            spec = importlib.util.find_spec(module)
            path = spec.origin if spec else None
        if path:
            self.pure[os.path.abspath(path)] = module
            self._kinds.clear()

    def allow(self, path: str, function: str) -> None:
        self.allowed.add((os.path.abspath(path), function))

    def _kind(self, filename: str) -> str:
        """"python" (import machinery, linecache, pytest itself), "project" (lxcfix, tests), "other", or the
        name of the pure module; cached by the code object's file name, as written."""
        kind = self._kinds.get(filename)
        if kind is None:
            if filename.startswith("<frozen importlib"):
                kind = "python"
            else:
                path = os.path.abspath(filename)
                kind = ("python" if path.startswith(_PYTHON_READS + _RUNNER) else self.pure.get(path) or
                        ("project" if path.startswith(PROJECT) else "other"))
            self._kinds[filename] = kind
        return kind

    def hook(self, event: str, args: tuple, _getframe=sys._getframe) -> None:
        if event not in WATCHED or not self.active:
            return
        kinds = self._kinds
        frame = _getframe(1)
        while frame is not None:  # the common case, frames outside the project, kept tight
            kind = kinds.get(frame.f_code.co_filename) or self._kind(frame.f_code.co_filename)
            if kind == "other":
                frame = frame.f_back
                continue
            code = frame.f_code
            if kind not in ("python", "project") and (os.path.abspath(code.co_filename), code.co_name) not in self.allowed:
                what = args[0] if args else ""
                self.seen.append(f"{event} {what!r:.120} from {kind}.{code.co_name} "
                                 f"({os.path.relpath(os.path.abspath(code.co_filename), ROOT)}:{frame.f_lineno})")
            return  # python: an import or a traceback's source line; project: an I/O module or a test

    def take(self) -> list[str]:
        got, self.seen = self.seen, []
        return got


GUARD = Guard()
_installed = False


def install(pure_modules) -> Guard:
    """Declare the pure modules and add the hook (once per interpreter: hooks cannot be removed)."""
    global _installed
    for m in pure_modules:
        GUARD.declare_pure(m)
    import lxcfix.render as render

    for function in render.READS_AT_FIRST_USE:
        GUARD.allow(render.__file__, function)
    if not _installed:
        sys.addaudithook(GUARD.hook)
        _installed = True
    return GUARD
