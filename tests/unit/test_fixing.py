"""plan.FIXING guarded (issue 23): the plan applies every applicable fix of the first
check but re-checks only the families in FIXING, so a fix the plan makes from any
other family would never be checked again (nor stabilized). Every rule module in
lxcfix/rules/ is run over every snapshot and config we carry, and every finding
whose fix `applies` must come from a family in FIXING."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import lxcfix.rules
from lxcfix import plan, repair
from lxcfix.rules import RULES, foresight, upgrade

from .conftest import CORPUS, CORPUS_MISSING, EXAMPLES, make_ctx, make_facts

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"
# Families that are not run by run_rules: foresight (`lxcfix audit`), upgrade through it.
AUDIT_ONLY = (foresight, upgrade)


def _name(module) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def test_every_rule_module_is_run_by_this_test():
    """A new rule family is run by the scan (RULES) or by the audit (foresight), never by neither."""
    found = {m.name for m in pkgutil.iter_modules(lxcfix.rules.__path__)}
    assert found == {_name(m) for m in RULES + AUDIT_ONLY}
    assert set(plan.FIXING) <= set(RULES)


def snapshot_contexts():
    for root in (EXAMPLES, SNAPSHOTS):
        for snap in sorted(p for p in root.iterdir() if p.is_dir()):
            for c in repair.scan(repair.open_target(str(snap)), None, keep_context=True, upgrade=True).containers:
                assert c.error is None, f"{snap.name}/{c.ct}: {c.error}"
                yield f"{root.name}/{snap.name}/{c.ct}", c.context


def corpus_contexts():
    facts = {f: make_facts(backend=f) for f in ("pve", "lxc")}
    for path in sorted(CORPUS.glob("*/*.conf")):
        flavor = "pve" if path.parent.name == "pve" else "lxc"
        yield f"corpus/{path.parent.name}/{path.name}", make_ctx(path.read_bytes(), flavor=flavor, facts=facts[flavor])


def findings_by_family(ctx):
    """(family, finding) of every rule module, in every style and for every occasion the audit knows."""
    for style in ("auto", "numeric", "path", "devn"):
        if style == "devn" and ctx.config.flavor != "pve":
            continue
        sctx = ctx.with_style(style)
        scanned = []
        for rule in RULES:
            for f in rule.check(sctx):
                scanned.append(f)
                yield _name(rule), style, f
        for for_ in foresight.FOR:
            for f in foresight.check(sctx, foresight.Occasion(for_), tuple(scanned)):
                yield "foresight/upgrade", style, f


def violations(contexts):
    fixing = {_name(m) for m in plan.FIXING}
    seen = 0
    out = []
    for name, ctx in contexts:
        for family, style, f in findings_by_family(ctx):
            if f.fix is not None and f.fix.applies:
                seen += 1
                if family not in fixing:
                    out.append(f"{name} ({style}): {f.code} from rules.{family} has a fix the plan applies "
                               f"({f.fix.applicability}: {f.fix.title}), but plan.FIXING does not re-check {family}")
    return seen, out


def test_only_the_families_the_plan_rechecks_have_fixes_it_applies():
    seen, bad = violations(snapshot_contexts())
    assert seen > 0  # the snapshots do have fixes the plan makes: the check is not vacuous
    assert bad == []


@pytest.mark.corpus
def test_only_the_families_the_plan_rechecks_have_fixes_it_applies_in_the_corpus():
    if not CORPUS.is_dir():
        pytest.skip(CORPUS_MISSING)
    seen, bad = violations(corpus_contexts())
    assert seen > 0
    assert bad == []
