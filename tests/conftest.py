"""Project-wide pytest setup.

Markers: `real` = needs root, LXC and a pure cgroup v2 /sys/fs/cgroup (tests/run
gives one in a private mount namespace). Every test under tests/real gets it.
`corpus` = reads the public corpus in ../shared (tests/unit/conftest.py); it
skips, with the reason, in a plain clone of the project alone.
With CI=true a skipped `real` or `corpus` test (or a skipped tests/real
module) is a failure: CI has both and must run them.
"""

import os

import pytest

REAL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _under_real(path) -> bool:
    p = os.path.abspath(str(path))
    return p == REAL_DIR or p.startswith(REAL_DIR + os.sep)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "real: needs root, LXC and a pure cgroup v2 mount; must not skip when CI=true")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _under_real(item.path):
            item.add_marker(pytest.mark.real)


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not (rep.skipped and _ci() and not hasattr(rep, "wasxfail")):
        return
    for marker, why in (("real", "TESTING.md: the real tier must not skip in CI"),
                        ("corpus", "CI has ../shared/corpus")):
        if item.get_closest_marker(marker):
            rep.outcome = "failed"
            rep.longrepr = (f"{marker} test skipped with CI=true, which is a failure ({why}). "
                            f"Skip reason: {_skip_reason(rep.longrepr)}")
            return


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and _ci() and _under_real(collector.path):
        rep.outcome = "failed"
        rep.longrepr = (f"real test module skipped with CI=true, which is a failure. "
                        f"Skip reason: {_skip_reason(rep.longrepr)}")
