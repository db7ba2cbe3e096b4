"""`lxcfix explain CODE` (lxcfix.codes): every code in the README's finding table has an
entry, every code the rules can emit is in that table, and the measured tables shown
are the ground truth the project carries.

The codes the rules can emit are read from lxcfix's own source (every "LXF###" literal),
and the README's table from README.md, so a code added anywhere needs its README row and
an entry in lxcfix/codes.py, and nothing else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lxcfix import cli, codes

from .conftest import REPO

README = (REPO / "README.md").read_text()
GROUND_TRUTH = Path(__file__).resolve().parent / "fixtures" / "ground-truth" / "nvidia-h200-cgroup-deny.json"


def readme_table() -> dict[str, tuple[str, str]]:
    """code -> (severity, meaning) from the README's "Finding codes" table."""
    section = README.split("## Finding codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*\[?`?(LXF\d{3})`?\]?(?:\([^)]*\))?\s*\|\s*(\w+)\s*\|\s*(.*?)\s*\|\s*$", section,
                      flags=re.M)
    return {code: (severity, meaning) for code, severity, meaning in rows}


def emitted_codes() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "lxcfix").rglob("*.py"):
        if path.name == "codes.py":
            continue
        found |= set(re.findall(r"[\"'](LXF\d{3})[\"']", path.read_text()))
    return found


def test_readme_table_is_found():
    table = readme_table()
    assert len(table) >= 20 and "LXF100" in table and "LXF301" in table


def test_every_code_in_the_readme_table_has_an_explanation():
    missing = sorted(set(readme_table()) - set(codes.CODES))
    assert missing == [], f"add an entry to lxcfix/codes.py for {missing}"


def test_every_explanation_is_a_row_of_the_readme_table():
    extra = sorted(set(codes.CODES) - set(readme_table()))
    assert extra == [], f"add a README 'Finding codes' row for {extra}"


def test_every_code_the_rules_can_emit_is_in_the_readme_table():
    emitted = emitted_codes()
    assert {"LXF100", "LXF200", "LXF301"} <= emitted
    missing = sorted(emitted - set(readme_table()))
    assert missing == [], f"codes the source emits without a README row: {missing}"


@pytest.mark.parametrize("code", sorted(codes.CODES))
def test_each_entry_is_complete_and_agrees_with_the_readme(code):
    c = codes.CODES[code]
    severity, _ = readme_table()[code]
    assert c.code == code and c.severity == severity
    assert c.meaning and c.knows and c.fixes and c.false_alarm
    assert all(style in (*codes.STYLES, "any") for style, _ in c.fixes)
    text = [t for t, _ in codes.explain(code)]
    for heading in ("What it means", "How lxcfix knows", "Fix it by hand", "When it is a false alarm"):
        assert heading in text
    assert text[0].startswith(f"{code} ({severity}): ")
    assert all(len(line) <= 100 or role in ("table", "title") for line, role in codes.explain(code))


def test_the_cgroup_denial_is_explained_in_every_style():
    for code in ("LXF100", "LXF101", "LXF103", "LXF200"):
        assert {s for s, _ in codes.CODES[code].fixes} >= set(codes.STYLES), code


def test_the_h200_table_is_the_measured_ground_truth():
    """Each row of the table `explain LXF210` shows is the case measured on the H200."""
    cases = json.loads(GROUND_TRUTH.read_text())["cases"]
    row = {r[0]: r for r in codes.H200[1:]}
    pairs = {"nothing (baseline)": "baseline", "nvidia-uvm (M:*)": "deny nvidia-uvm (all minors)",
             "nvidia-uvm-tools only (M:1)": "deny nvidia-uvm-tools only (uvm:1)",
             "nvidiactl (195:255)": "deny nvidiactl 195:255", "nvidia0 (195:0)": "deny nvidia0 195:0",
             "all of 195": "deny all 195", "nvidia-caps (non-MIG GPU)": "deny nvidia-caps"}
    assert set(pairs) == set(row) and set(pairs.values()) == set(cases)
    for label, case in pairs.items():
        got, want = row[label], cases[case]
        cu = want["cuda"]
        denied = [p for p, v in cu["open"].items() if v != "ok"]
        assert got[1] == ("EPERM" if denied else "ok"), label
        assert all(cu["open"][p].startswith("1:") for p in denied)  # errno 1, EPERM
        assert got[2].split()[0] == str(cu["cuInit"]), label
        if cu["cuInit"]:
            assert got[2].split()[1] == cu["cuInit_name"], label
        assert got[3].endswith(f"rc {want['nvidia_smi_rc']}"), label
        smi = want["nvidia_smi_output"]
        assert (smi in got[3]) if not smi.startswith("GPU 0") else ("works" in got[3] or "lists" in got[3]), label
    for code in ("LXF200", "LXF210", "LXF211"):
        assert codes.CODES[code].table == codes.H200


def test_lookup_takes_any_spelling():
    assert codes.lookup("LXF200") is codes.lookup("lxf200") is codes.lookup(" 200 ") is codes.CODES["LXF200"]
    assert codes.lookup("LXF999") is None and codes.lookup("x") is None


def run(capsys, *argv):
    rc = cli.run(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_cli_explain_one_code(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    rc, out, _ = run(capsys, "explain", "LXF210")
    assert rc == 0
    assert out.startswith("LXF210 (error): probe: cuInit failed")
    assert "999 CUDA_ERROR_UNKNOWN" in out and "nvidia-uvm (M:*)" in out and "Measured on an NVIDIA H200" in out
    rc, out, _ = run(capsys, "explain", "lxf100")
    assert rc == 0 and "devn:" in out and "path:" in out and "numeric:" in out


def test_cli_explain_lists_every_code_and_refuses_an_unknown_one(capsys):
    rc, out, _ = run(capsys, "explain")
    assert rc == 0 and [line.split()[0] for line in out.splitlines()[:-1]] == list(codes.CODES)
    rc, out, err = run(capsys, "explain", "LXF999")
    assert rc == 2 and "no finding code 'LXF999'" in err and out == ""


def test_cli_explain_json(capsys):
    rc, out, _ = run(capsys, "explain", "LXF200", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == 1 and doc["code"] == "LXF200"
    assert set(doc["fix_by_hand"]) >= set(codes.STYLES) and doc["measured"][0][0] == "denied"
    rc, out, _ = run(capsys, "explain", "--json")
    assert [c["code"] for c in json.loads(out)["codes"]] == list(codes.CODES)


def test_readme_says_how_to_look_a_code_up():
    assert "lxcfix explain CODE" in README.split("## Finding codes", 1)[1].split("\n## ", 1)[0]
    assert "### Explain a finding" in README


def test_cli_explain_of_a_huge_argument_is_one_short_line(capsys):
    """Issue 21 row 10: a 100 KB argument was echoed whole in the one-line error."""
    rc, out, err = run(capsys, "explain", "LXF" + "9" * 100_000)
    assert rc == 2 and out == ""
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and len(lines[0]) < 1000 and "no finding code 'LXF999" in lines[0], lines[0][:300]
    # Not code-shaped: an error text (issue 20), which lxcfix does not know: one line, exit 0, not echoed.
    rc, out, err = run(capsys, "explain", "\x1b[31m" + "é" * 50_000)
    assert rc == 0 and err == "" and len(out) < 1000 and "\x1b" not in out and "é" not in out
