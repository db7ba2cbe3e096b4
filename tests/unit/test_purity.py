"""The pure core imports no I/O (ARCHITECTURE.md): each core module, imported
alone in a fresh interpreter, loads none of subprocess, socket,
multiprocessing, paramiko, fabric, nor any of lxcfix's own I/O modules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = (
    "lxcfix.model", "lxcfix.errors", "lxcfix.bounded", "lxcfix.ctconfig", "lxcfix.devices", "lxcfix.lxcdefaults",
    "lxcfix.effective", "lxcfix.facts", "lxcfix.probe", "lxcfix.bpf", "lxcfix.rules",
    "lxcfix.rules.allowlist", "lxcfix.rules.hygiene", "lxcfix.rules.host", "lxcfix.rules.live",
    "lxcfix.nested", "lxcfix.rootfs", "lxcfix.rules.nested", "lxcfix.rules.rootfs",
    "lxcfix.rules.probe", "lxcfix.rules.access", "lxcfix.rules.foresight", "lxcfix.rules.inert", "lxcfix.rules.tenant",
    "lxcfix.rules.drift", "lxcfix.rules.upgrade", "lxcfix.plan", "lxcfix.liveplan",
    "lxcfix.render", "lxcfix.report", "lxcfix.audit", "lxcfix.fixes", "lxcfix.styles", "lxcfix.outcome",
    "lxcfix.idmap", "lxcfix.inventory", "lxcfix.sweep", "lxcfix.causes", "lxcfix.codes", "lxcfix.errortexts",
    "lxcfix.memo", "lxcfix.agentreply", "lxcfix.fence", "lxcfix.pvestorage", "lxcfix.preflight", "lxcfix.cluster",
    "lxcfix.nsprobe", "lxcfix.heal",
)
IO_MODULES = (
    "subprocess", "socket", "multiprocessing", "paramiko", "fabric", "invoke",
    "lxcfix.transport", "lxcfix.ssh", "lxcfix.gather", "lxcfix.observe", "lxcfix.scan", "lxcfix.fleet", "lxcfix.fleetpool",
    "lxcfix.apply", "lxcfix.transaction", "lxcfix.steps", "lxcfix.atomicfile", "lxcfix.backends", "lxcfix.repair",
    "lxcfix.cli", "lxcfix.hook", "lxcfix.hostfix", "lxcfix.api", "lxcfix.inventory_io", "lxcfix.entry",
    "lxcfix.agent", "lxcfix.ship", "lxcfix.fleetapply", "lxcfix.volumes", "lxcfix.migrate", "lxcfix.floor", "lxcfix.watch",
)
PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules if m in {io!r} or m.split(".")[0] in {io!r})))
"""


@pytest.mark.parametrize("module", PURE)
def test_core_module_imports_no_io(module):
    r = subprocess.run([sys.executable, "-c", PROBE.format(module=module, io=IO_MODULES)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], f"importing {module} loads I/O modules"


def test_every_lxcfix_module_is_classified():
    """A new module must say which side it is on."""
    import pkgutil

    import lxcfix
    import lxcfix.rules

    found = {f"lxcfix.{m.name}" for m in pkgutil.iter_modules(lxcfix.__path__)} | \
        {f"lxcfix.rules.{m.name}" for m in pkgutil.iter_modules(lxcfix.rules.__path__)}
    known = set(PURE) | {m for m in IO_MODULES if m.startswith("lxcfix.")} | {"lxcfix.__main__"}
    assert found - known == set()


# ---------------------------------------------------------------- at call time (conftest, purity_guard.py)


def _in_pure_module(monkeypatch, module, name: str, src: str):
    """`src` (defining `name`) compiled as code of the pure `module` and patched into it:
    to the hook, a function of that module."""
    import textwrap

    ns = {"__name__": module.__name__}
    exec(compile(textwrap.dedent(src), module.__file__, "exec"), ns)
    monkeypatch.setattr(module, name, ns[name], raising=False)
    return getattr(module, name)


def test_the_guard_catches_open_subprocess_and_socket_in_a_pure_function(monkeypatch, tmp_path, pure_modules_do_no_io):
    from lxcfix import bounded

    guard = pure_modules_do_no_io
    f = tmp_path / "x"
    f.write_text("x")
    _in_pure_module(monkeypatch, bounded, "sneaky", """
        import socket, subprocess
        def sneaky(path):
            with open(path) as f:
                f.read()
            subprocess.run(["true"], check=True)
            socket.socket().close()
    """)
    bounded.sneaky(str(f))
    got = guard.take()
    assert [g.split(" ", 1)[0] for g in got] == ["open", "subprocess.Popen", "socket.__new__"], got
    assert all("from lxcfix.bounded.sneaky (lxcfix/bounded.py:" in g for g in got), got
    assert repr(str(f)) in got[0]


def test_the_guard_catches_os_system_and_posix_spawn_in_a_module_declared_pure(tmp_path, pure_modules_do_no_io):
    import importlib.util

    guard = pure_modules_do_no_io
    src = tmp_path / "lxcfix_fake_pure.py"
    src.write_text("import os\n\ndef run():\n    os.system('true')\n    os.waitpid(os.posix_spawn('/bin/true', ['true'], {}), 0)\n")
    spec = importlib.util.spec_from_file_location("lxcfix_fake_pure", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    guard.declare_pure("lxcfix_fake_pure", str(src))
    try:
        mod.run()
    finally:
        guard.pure.pop(str(src))
        guard._kinds.clear()
    got = guard.take()
    assert [g.split(" ", 1)[0] for g in got] == ["os.system", "os.posix_spawn"], got


def test_the_guard_blames_no_import_no_callback_and_not_the_declared_template_read(monkeypatch, tmp_path,
                                                                                   pure_modules_do_no_io):
    from lxcfix import bounded, render

    guard = pure_modules_do_no_io
    (tmp_path / "lxcfix_fresh_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "data"
    data.write_text("d")
    call = _in_pure_module(monkeypatch, bounded, "calls", """
        def calls(load):
            import lxcfix_fresh_module  # an import reads .py files: Python's, not the module's
            return lxcfix_fresh_module.VALUE, load()
    """)
    assert call(lambda: data.read_text()) == (1, "d")  # a loader the caller hands in is the caller's I/O
    render._read_templates.cache_clear()
    assert render.template_text("probe.sh")  # every template read once, at first use: declared
    assert guard.take() == []
    _in_pure_module(monkeypatch, render, "_load_again", "def _load_again(p):\n    return open(p).read()\n")
    render._load_again(str(data))  # any other read in render is still caught
    assert len(guard.take()) == 1
