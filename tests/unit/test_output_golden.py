"""No output changes (issue 22): the JSON of `lxcfix scan --root EXAMPLE --json` in every
style, and the findings, causes, fixes and plans of every public corpus config in every style,
pinned as digests (tests/unit/fixtures/golden/output-digests.json). A speed change keeps
these equal; a change meant to alter the output regenerates them on purpose:

    LXCFIX_REGEN_GOLDEN=1 tests/run tests/unit/test_output_golden.py -q -p no:cacheprovider

The only field left out is a host's `seconds` (wall time).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from lxcfix import cli, report
from lxcfix.plan import make_plan

from .conftest import CORPUS, EXAMPLES, make_ctx, make_facts

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden" / "output-digests.json"
STYLES = ("auto", "numeric", "path", "devn")
REGEN = os.environ.get("LXCFIX_REGEN_GOLDEN") == "1"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _golden() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def _check(key: str, value: str) -> None:
    if REGEN:
        doc = _golden()
        doc[key] = value
        GOLDEN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        return
    want = _golden().get(key)
    assert want is not None, f"{key}: no pinned digest (LXCFIX_REGEN_GOLDEN=1 records it)"
    assert value == want, f"{key}: output changed"


def _examples():
    return sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("example", _examples())
@pytest.mark.parametrize("style", STYLES)
def test_scan_json_of_each_example_is_unchanged(example, style, capsys, monkeypatch):
    # From the checkout's root, by a relative path: the printed commands name the snapshot as
    # given (a copy step for a snapshot's fix), so the digest must not depend on where the
    # checkout lies.
    monkeypatch.chdir(EXAMPLES.parent)
    capsys.readouterr()
    code = cli.run(["scan", "--root", f"examples/{example}", "--no-probe", "--json", "--style", style])
    captured = capsys.readouterr()
    out = {"exit": code, "stderr": captured.err}
    if captured.out.strip():
        doc = json.loads(captured.out)
        for h in doc["hosts"]:
            h["seconds"] = 0
        out["doc"] = doc
    _check(f"scan/{example}/{style}", _digest(out))


def _corpus():
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.corpus, id="corpus")]
    return [pytest.param(p, marks=pytest.mark.corpus, id=f"{p.parent.name}/{p.name}")
            for p in sorted(CORPUS.glob("*/*.conf"))]


@pytest.mark.parametrize("path", _corpus())
def test_findings_fixes_and_plans_of_each_corpus_config_are_unchanged(path):
    if path is None:
        pytest.skip("../shared/corpus not found")
    flavor = "pve" if path.parent.name == "pve" else "lxc"
    facts = make_facts(backend=flavor)
    ctx = make_ctx(path.read_bytes(), flavor=flavor, facts=facts)
    out = {}
    for style in STYLES:
        if style == "devn" and flavor != "pve":
            continue
        plan = make_plan(ctx, style)
        findings, causes = report.findings_json(plan.findings, facts)
        out[style] = {"findings": findings, "causes": causes, "diff": plan.diff(),
                      "after": hashlib.sha256(plan.after).hexdigest(), "style": [plan.style, plan.style_reason],
                      "host_files": [[h.path, h.after.decode("utf-8", "replace")] for h in plan.host_files]}
    _check(f"corpus/{path.parent.name}/{path.name}", _digest(out))
