"""Shared helpers for the unit tier: pure code fed data."""

from __future__ import annotations

from pathlib import Path

import pytest

from lxcfix import ctconfig, gather
from lxcfix.devices import parse_proc_devices
from lxcfix.model import HostFacts
from lxcfix.rules import Context

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus" / "public"
EXAMPLES = REPO / "examples"
# Measured data the tests rely on is carried in the project (fixtures/ground-truth/README.md);
# only the public corpus stays in ../shared (shared/README.md: do not copy it in).
CORPUS_MISSING = "../shared/corpus not found next to the checkout: the public corpus tests need it"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "corpus: reads the public corpus ../shared/corpus/public; skips when it is absent "
                   "(tests/conftest.py makes that skip a failure when CI=true)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "corpus_files" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.corpus)


# Call-time purity (tests/unit/purity_guard.py): every unit test fails that made one of the
# pure modules (test_purity.PURE) open a file, start a process or make a socket.
from .purity_guard import install as _install_purity_guard  # noqa: E402
from .test_purity import PURE as _PURE  # noqa: E402

PURITY_GUARD = _install_purity_guard(_PURE)


@pytest.fixture(autouse=True)
def pure_modules_do_no_io():
    PURITY_GUARD.take()
    PURITY_GUARD.active = True
    try:
        yield PURITY_GUARD
    finally:
        PURITY_GUARD.active = False
    got = PURITY_GUARD.take()
    if got:
        pytest.fail("a pure module did I/O during this test (tests/unit/purity_guard.py):\n  "
                    + "\n  ".join(got[:20]) + (f"\n  ... {len(got) - 20} more" if len(got) > 20 else ""),
                    pytrace=False)


def pytest_runtest_setup(item):
    if item.get_closest_marker("corpus") and not CORPUS.is_dir():
        pytest.skip(CORPUS_MISSING)

PROC_DEVICES = """Character devices:
  1 mem
  5 /dev/tty
 10 misc
136 pts
195 nvidia
195 nvidiactl
226 drm
238 nvidia-caps
511 nvidia-uvm

Block devices:
  8 sd
"""


def make_facts(proc_devices: str = PROC_DEVICES, backend: str = "pve", layout: str = "v2",
               pve_version: str | None = None, lxc_version: str | None = None, nodes=None) -> HostFacts:
    char, block = parse_proc_devices(proc_devices)
    return HostFacts(host="testhost", backend=backend, char_majors=char, block_majors=block,
                     nodes=nodes or {}, nodes_known=nodes is not None, cgroup_layout=layout,
                     pve_version=pve_version, lxc_version=lxc_version)


def no_includes(path):
    return None  # built-in LXC defaults stand in


def make_ctx(text: str | bytes, flavor: str = "pve", facts: HostFacts | None = None, ct: str = "200") -> Context:
    raw = text.encode() if isinstance(text, str) else text
    path = f"/etc/pve/lxc/{ct}.conf" if flavor == "pve" else f"/var/lib/lxc/{ct}/config"
    cfg = ctconfig.parse(raw, flavor, path)
    facts = facts or make_facts(backend=flavor)
    return gather.context(facts, gather.Loaded(ct, path, cfg), no_includes)


def codes(findings) -> list[str]:
    return sorted(f.code for f in findings)


@pytest.fixture
def corpus_files() -> list[Path]:
    """The 69 public corpus configs; any test using this fixture is marked `corpus`."""
    if not CORPUS.is_dir():
        pytest.skip(CORPUS_MISSING)
    files = sorted(CORPUS.glob("*/*.conf"))
    assert len(files) == 69, f"expected the 69 corpus configs under {CORPUS}"
    return files
