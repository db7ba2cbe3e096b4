"""Host facts: every fixture under fixtures/facts/<fact>/<case>.json through FACTS[fact].parse,
and every parse total on arbitrary (hostile) text.

A fixture is {"text": what the file or command gave, "expected": FACTS[fact].to_json(parse(text))}.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import facts as F
from lxcfix.facts import FACTS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "facts"
CASES = sorted(FIXTURES.glob("*/*.json"))


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fact_fixture(path):
    case = json.loads(path.read_text(encoding="utf-8"))
    assert set(case) == {"text", "expected"}, path.name
    fact = FACTS[path.parent.name]
    assert fact.to_json(fact.parse(case["text"])) == case["expected"]


def test_every_fact_has_at_least_two_fixture_cases():
    counts = {name: len(list((FIXTURES / name).glob("*.json"))) for name in FACTS}
    assert {name: n for name, n in counts.items() if n < 2} == {}
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} <= set(FACTS), "a fixture folder names no fact"


def test_every_fact_reads_or_runs_exactly_one_thing():
    for name, fact in FACTS.items():
        assert (fact.read is None) != (fact.run is None), name
        assert set(fact.backends) <= {"pve", "lxc"} and fact.backends, name
    assert FACTS["pveversion"].backends == ("pve",)


@pytest.mark.parametrize("version,expected", [
    ("580.159.04", (580, 159, 4)), ("8.1", (8, 1)), ("6.0.4-2", (6, 0, 4, 2)), ("1.2.3.4.5", (1, 2, 3, 4)),
    (None, ()), ("", ()), ("abc", ()), (5, ()), (b"8.1", ()), ("\u00b2.\u00b3", ()), ("\u0668.\u0661", ()),
    ("1." + "9" * 5000, (1,)), ("9" * 5000, ()), ("8.1\x00", (8, 1)),
])
def test_version_tuple_never_raises(version, expected):
    assert F.version_tuple(version) == expected


# --- every parse is total ----------------------------------------------------------------------

PARSERS = {**{name: fact.parse for name, fact in FACTS.items()},
           "parse_nvidia_version": F.parse_nvidia_version, "parse_cgroup_layout": F.parse_cgroup_layout,
           "parse_pveversion": F.parse_pveversion, "parse_lxc_version": F.parse_lxc_version,
           "parse_stat_lines": F.parse_stat_lines, "parse_proc_devices_checked": F.parse_proc_devices_checked,
           "version_tuple": F.version_tuple}

# Pieces of real output mixed with the characters that break naive parsers: '²' (isdigit() but
# not int()), Arabic-Indic digits (int() takes them), NUL, U+2028 (splitlines() splits there),
# separators, and long digit runs.
TOKENS = st.sampled_from([
    "Character devices:", "Block devices:", " 195 nvidia", "511 nvidia-uvm", "\u00b2", "\u0665\u0668\u0660", "\x00",
    "\u2028", "\x85", "\r", "\n", " ", "\t", "|", ".", "-", " - ", "0x", "_", "+", "9" * 50, "f" * 50, "580.159.04",
    "Kernel Module ", "Kernel Module for x86_64  ", "pve-manager: ", "pve-manager/", "pve-container: ", "8.3.0",
    "character special file|", "block special file|", "c3|ff|21b6|0|0|/dev/nvidiactl", "/dev/", "cgroup2 cgroup2 rw",
    "30 22 0:26 / /sys/fs/cgroup rw", "- cgroup cgroup rw", "cgroup2", "/sys/fs/cgroup",
])
HOSTILE_TEXT = st.one_of(st.text(), st.lists(st.one_of(TOKENS, st.text(max_size=5)), max_size=40).map("".join))


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=300, deadline=None)
@given(text=HOSTILE_TEXT)
def test_every_parse_returns_for_any_text(name, text):
    PARSERS[name](text)


@settings(max_examples=300, deadline=None)
@given(text=HOSTILE_TEXT)
def test_every_fact_value_is_json(text):
    for name, fact in FACTS.items():
        json.dumps(fact.to_json(fact.parse(text)))


def test_huge_numbers_never_become_ints():
    big = "9" * 5000
    assert F.parse_stat_lines(f"character special file|{'f' * 5000}|0|21b6|0|0|/dev/x\n") == {}
    assert F.parse_proc_devices_checked(f"Character devices:\n{big} x\n\u00b2 y\n") == ({}, {})
    assert F.parse_lxc_version(f"{big}.1") is None and F.parse_nvidia_version(f"Kernel Module  {big}.1") is None


def test_node_from_stat_takes_odd_objects():
    assert F.node_from_stat("/dev/x", object()) is None


def test_a_hostile_nvidia_version_file_is_read_without_stalling():
    """/proc/driver/nvidia/version as a snapshot or a hostile host gives it: tabs after
    `Kernel Module for` took quadratic time (40k tabs: 9 s) before the platform's name
    stopped at a tab."""
    import time

    start = time.monotonic()
    assert F.parse_nvidia_version("Kernel Module for " + "\t" * 200_000 + "!") is None
    assert F.parse_nvidia_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\t580.95.05  Release "
                                  "Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:55:41 UTC 2025") == "580.95.05"
    assert time.monotonic() - start < 10  # a hang guard, not a figure: about 1 ms here; 40k tabs took 9 s
