"""Fixes that edit one line differently (issue 23): the later one is left out of
that round and the planner, checking again until stable, makes it in the next
(ruff's apply_fixes); no plan is lost to an overlap."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from lxcfix import ctconfig, plan as planmod
from lxcfix.model import Edit, Finding, Fix
from lxcfix.plan import make_plan, make_plan_in

from .conftest import make_ctx

ALLOW = "lxc.cgroup2.devices.allow"
CFG = b"arch: amd64\nlxc.cgroup2.devices.allow: c 508:* rwm\nlxc.cgroup2.devices.allow: c 10:200 rwm\n"



def _stand_in(ctx, code, severity, message, **kw):
    """A finding of a stand-in rule: its code (LXT...) has no record in lxcfix/codes.py, so it
    is made directly rather than through ctx.finding, which takes the severity from the record."""
    return Finding(code=code, severity=severity, ct=ctx.ct, message=message, host=ctx.host, **kw)

def rep(index: int, value: str) -> Edit:
    return Edit("replace", index, ((ALLOW, value),))


# ---------------------------------------------------------------- apply_groups / apply_edits


def test_a_later_different_edit_of_a_line_is_skipped_not_an_error():
    cfg = ctconfig.parse(CFG, "pve")
    first, later = rep(1, "c 511:* rwm"), rep(1, "c 508:* rw")
    out = ctconfig.apply_groups(cfg, [(first,), (later,)])
    assert (out.applied, out.skipped) == ((0,), (1,))
    assert out.config.raw == CFG.replace(b"c 508:* rwm", b"c 511:* rwm")
    # the flat form makes the first and skips the later one, in either order
    assert ctconfig.apply_edits(cfg, [first, later]).raw == out.config.raw
    assert ctconfig.apply_edits(cfg, [later, first]).raw == CFG.replace(b"c 508:* rwm", b"c 508:* rw")


def test_replace_and_remove_of_one_line_overlap_the_same_edit_twice_does_not():
    cfg = ctconfig.parse(CFG, "pve")
    out = ctconfig.apply_groups(cfg, [(Edit("remove", 2),), (Edit("remove", 2),), (rep(2, "c 10:200 rw"),)])
    assert (out.applied, out.skipped) == ((0, 1), (2,))
    assert out.config.raw == b"arch: amd64\nlxc.cgroup2.devices.allow: c 508:* rwm\n"


def test_a_group_is_made_whole_or_not_at_all():
    """A fix whose one edit overlaps leaves out its other edits too (no half-made fix)."""
    cfg = ctconfig.parse(CFG, "pve")
    add = Edit("add", lines=(("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"),))
    out = ctconfig.apply_groups(cfg, [(rep(1, "c 511:* rwm"),), (rep(1, "c 508:* rw"), add, Edit("remove", 2))])
    assert out.skipped == (1,)
    assert b"lxc.mount.entry" not in out.config.raw and b"c 10:200" in out.config.raw


def test_a_group_that_overlaps_itself_is_skipped_and_does_not_block_others():
    cfg = ctconfig.parse(CFG, "pve")
    out = ctconfig.apply_groups(cfg, [(rep(1, "c 511:* rwm"), Edit("remove", 1)), (rep(2, "c 10:200 rw"),)])
    assert (out.applied, out.skipped) == ((1,), (0,))
    assert out.config.raw == CFG.replace(b"c 10:200 rwm", b"c 10:200 rw")


def test_an_edit_outside_the_main_section_is_still_a_bug():
    cfg = ctconfig.parse(b"arch: amd64\n[snap]\narch: i386\n", "pve")
    with pytest.raises(ValueError, match="not a main-section line"):
        ctconfig.apply_groups(cfg, [(Edit("remove", 1),)])


N_LINES = 6
EDITS = st.one_of(
    st.builds(lambda i: Edit("remove", i), st.integers(0, N_LINES - 1)),
    st.builds(lambda i, v: rep(i, f"c 10:{v} rwm"), st.integers(0, N_LINES - 1), st.integers(0, 3)),
    st.builds(lambda v: Edit("add", lines=((ALLOW, f"c 1:{v} rwm"),)), st.integers(0, 3)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(EDITS, max_size=3), max_size=6))
def test_apply_groups_property(groups):
    """Never raises for main-section edits; deterministic; what it made is exactly the kept
    groups made alone (which no longer overlap); every skipped group overlaps a kept earlier
    group or itself."""
    cfg = ctconfig.parse("".join(f"{ALLOW}: c 1:{i} rwm\n" for i in range(N_LINES)).encode(), "pve")
    out = ctconfig.apply_groups(cfg, groups)
    assert out == ctconfig.apply_groups(cfg, groups)
    assert sorted(out.applied + out.skipped) == list(range(len(groups)))
    kept = [groups[i] for i in out.applied]
    again = ctconfig.apply_groups(cfg, kept)
    assert again.skipped == () and again.config.raw == out.config.raw
    made: dict[int, Edit] = {}
    for i, group in enumerate(groups):
        line_edits = [e for e in group if e.op != "add"]
        if i in out.applied:
            made.update((e.index, e) for e in line_edits)
            continue
        own: dict[int, Edit] = {}
        self_overlap = any(own.setdefault(e.index, e) != e for e in line_edits)
        assert self_overlap or any(made.get(e.index, e) != e for e in line_edits)


# ---------------------------------------------------------------- the planner


def _allow_lines(ctx):
    return [(i, ln) for i, ln in ctx.config.main() if ln.key == ALLOW]


def _major_rule(ctx):
    """Stands in for a rule: the stale major 508 is moved to 511 (keeps the mode)."""
    out = []
    for i, ln in _allow_lines(ctx):
        if ln.value.startswith("c 508:"):
            out.append(_stand_in(ctx, "LXT001", "error", "stale major", line=i + 1, fix=Fix(
                "move it", (rep(i, ln.value.replace("508:", "511:", 1)),), "safe")))
    return out


def _mode_rule(ctx):
    """Stands in for another rule: `rwm` becomes `rw` (keeps the major): the same line, differently."""
    out = []
    for i, ln in _allow_lines(ctx):
        if ln.value.startswith("c 5") and ln.value.endswith(" rwm"):
            out.append(_stand_in(ctx, "LXT002", "warning", "mknod not needed", line=i + 1, fix=Fix(
                "drop m", (rep(i, re.sub(r" rwm$", " rw", ln.value)),), "safe")))
    return out


@pytest.fixture
def two_rules(monkeypatch):
    rules = (SimpleNamespace(check=_major_rule), SimpleNamespace(check=_mode_rule))

    def run_rules(ctx, families=None):
        return [f for r in rules for f in r.check(ctx)]

    monkeypatch.setattr(planmod, "run_rules", run_rules)
    return run_rules


def test_two_rules_editing_one_line_differently_still_give_a_plan(two_rules):
    ctx = make_ctx(CFG)
    edited = [f.fix.edits[0].index for f in two_rules(ctx)]
    assert edited == [1, 1]  # both fixes edit line 2, differently: apply_edits used to raise here
    plan, planned = make_plan_in(ctx, "numeric")
    assert sorted(f.code for f in plan.findings) == ["LXT001", "LXT002"]
    assert plan.after == CFG.replace(b"c 508:* rwm", b"c 511:* rw")  # both made, one round apart
    assert two_rules(planned) == []
    again = make_plan(make_ctx(plan.after), "numeric")
    assert again.is_empty and again.findings == ()  # stable: planning the result gives nothing


def test_a_fix_that_overlaps_itself_stays_a_finding(monkeypatch):
    def broken(ctx):
        i = _allow_lines(ctx)[0][0]
        return [_stand_in(ctx, "LXT003", "error", "odd", fix=Fix("both", (rep(i, "c 1:1 rwm"), Edit("remove", i)), "safe"))]

    monkeypatch.setattr(planmod, "run_rules", lambda ctx, families=None: broken(ctx) + _major_rule(ctx))
    plan = make_plan(make_ctx(CFG), "numeric")
    assert [f.code for f in plan.findings] == ["LXT003", "LXT001"]
    assert plan.after == CFG.replace(b"c 508:", b"c 511:")  # the other fix is made; this one is shown
