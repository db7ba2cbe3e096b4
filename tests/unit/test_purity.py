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
    "lxcfix.rules.probe", "lxcfix.rules.access", "lxcfix.rules.foresight", "lxcfix.rules.inert", "lxcfix.rules.tenant",
    "lxcfix.rules.drift", "lxcfix.rules.upgrade", "lxcfix.plan", "lxcfix.liveplan",
    "lxcfix.render", "lxcfix.report", "lxcfix.audit", "lxcfix.fixes", "lxcfix.styles", "lxcfix.outcome",
    "lxcfix.idmap", "lxcfix.inventory", "lxcfix.sweep", "lxcfix.causes", "lxcfix.codes",
)
IO_MODULES = (
    "subprocess", "socket", "multiprocessing", "paramiko", "fabric", "invoke",
    "lxcfix.transport", "lxcfix.ssh", "lxcfix.gather", "lxcfix.observe", "lxcfix.scan", "lxcfix.fleet",
    "lxcfix.apply", "lxcfix.transaction", "lxcfix.backends", "lxcfix.repair", "lxcfix.cli", "lxcfix.hook",
    "lxcfix.hostfix", "lxcfix.api", "lxcfix.inventory_io",
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
