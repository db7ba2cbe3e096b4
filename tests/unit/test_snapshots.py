"""One host snapshot per finding of the foresight/drift family (tests/unit/fixtures/snapshots/),
read the way `lxcfix scan --root` and `lxcfix audit --root --for ...` read a host: offline, every
fact through the transport (files, `.lxcfix/<command>` outputs, `lib/modules` trees)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from lxcfix import audit, repair
from lxcfix.plan import make_plan

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"


@functools.lru_cache(maxsize=None)
def scanned(name: str, upgrade: bool = False):
    return repair.scan(repair.open_target(str(SNAPSHOTS / name)), None, keep_context=True, upgrade=upgrade)


@pytest.mark.parametrize("ct,code", [
    ("400", "LXF140"), ("401", "LXF141"), ("402", "LXF142"), ("403", "LXF143"), ("404", "LXF144"),
    ("405", "LXF145"), ("406", "LXF146"), ("408", "LXF152"), ("409", "LXF153"), ("410", "LXF154"),
])
def test_scan_of_the_snapshot_finds(ct, code):
    (c,) = [c for c in scanned("pve-drift").containers if c.ct == ct]
    assert code in {f.code for f in c.findings}, [f"{f.code} {f.message}" for f in c.findings]
    f = next(f for f in c.findings if f.code == code)
    assert f.fix is not None and f.message and f.evidence


@pytest.mark.parametrize("snapshot,for_,kw,ct,code,outcome", [
    ("pve-drift", "lxc-upgrade", {}, "407", "LXF150", "will"),
    ("pve-drift", "pve-upgrade", {}, "407", "LXF150", "may"),
    ("pve-drift", "reboot", {}, "411", "LXF155", "may"),
    ("pve-drift", "kernel-upgrade", {}, "412", "LXF156", "will"),
    ("pve-drift", "kernel-upgrade", {"to_kernel": "6.14.8-2-pve"}, "412", "LXF157", "may"),
    ("pve-drift", "reboot", {}, "400", "LXF140", "will"),
    ("pve-drift", "reboot", {}, "408", "LXF152", "will"),
    ("pve-drift", "reboot", {}, "410", "LXF154", "will"),
    ("pve-hybrid", "pve-upgrade", {}, "420", "LXF151", "will"),
])
def test_audit_of_the_snapshot_lists(snapshot, for_, kw, ct, code, outcome):
    report = audit.audit([scanned(snapshot, for_ in audit.UPGRADE_FACTS)], for_, **kw)
    got = {(i.ct, i.code): i for i in report.items}
    assert (ct, code) in got, sorted(got)
    assert got[(ct, code)].outcome == outcome and got[(ct, code)].change


def test_the_hybrid_host_is_fine_today():
    (c,) = scanned("pve-hybrid").containers
    assert {f.code for f in c.findings} == set()  # v1 keys are enforced on a hybrid host
    report = audit.audit([scanned("pve-hybrid")], "reboot")
    assert report.items == ()


def test_no_fix_of_the_family_is_applied_by_a_plan():
    for c in scanned("pve-drift").containers:
        assert c.error is None, c.error
        fam = [f for f in c.findings if f.code.startswith(("LXF14", "LXF15"))]
        assert all(f.fix is None or not f.fix.applies for f in fam), c.ct
        if {f.code for f in c.findings} <= {"LXF140", "LXF141", "LXF142", "LXF143", "LXF144", "LXF145", "LXF146",
                                            "LXF152", "LXF153", "LXF154"}:
            assert make_plan(c.context).is_empty, c.ct
