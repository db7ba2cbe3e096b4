"""Every code's text, rendered with its subject missing (no device, no numbers, no rule: a rule
for a driver whose nodes the host does not have), never shows an empty name slot such as
"CT 200 lacks :  are not passed into the container" (the JSON message was right; the cause's
title lost its names)."""

from __future__ import annotations

import re

import pytest

from lxcfix import causes, codes
from lxcfix.model import Fix
from lxcfix.rules import run_rules

from .conftest import make_ctx, make_facts

# A slot left empty: a separator with nothing before it, empty brackets, doubled or trailing spaces,
# a sentence that ends on a word that needs its object.
EMPTY = re.compile(r"(^|\s)[:,;]|(?<!\w)\(\s*\)|[:,]\s*\?|\[\s*\]|\S {2,}\S|\s$|^\s|\b(lacks|denies|open|and|of)$")


def empty_slots(text: str) -> list[str]:
    return [m.group(0) for m in EMPTY.finditer(text)]


def rendered(findings, facts):
    out = []
    for cause in causes.group(findings, facts):
        out.append(cause.title)
        out += list(cause.proof)
    return out


@pytest.mark.parametrize("code", sorted(codes.CODES))
@pytest.mark.parametrize("device", [None, ""])
def test_no_code_renders_an_empty_name_slot_without_its_subject(code, device):
    facts = make_facts(nodes={})
    rec = codes.CODES[code]
    for severity in (rec.severity, *rec.severities):
        f = codes.make(code, "200", f"the {code} message", severity=severity, device=device,
                       fix=Fix(f"the {code} fix"))
        for text in rendered([f], facts) + rendered([f, f], facts):
            assert not empty_slots(text), (code, severity, text)


@pytest.mark.parametrize("kind", sorted({c.kind for c in codes.CODES.values() if c.kind}))
def test_every_kind_of_cause_names_what_it_is_about_when_no_finding_names_a_device(kind):
    facts = make_facts(nodes={})
    found = [codes.make(c.code, "200", f"the {c.code} message", severity=c.severity)
             for c in codes.CODES.values() if c.kind == kind]
    for text in rendered(found, facts):
        assert not empty_slots(text), (kind, text)


def test_a_rule_for_a_driver_without_nodes_on_this_host_names_the_rule():
    # the case of the report: no NVIDIA node on the host, a rule for its major in the config
    ctx = make_ctx("arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n", facts=make_facts(nodes={}))
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF110"]
    assert f.device is None and f.rule == "c 195:*"
    (cause,) = causes.group([f], ctx.facts)
    assert "c 195:*" in cause.title and not empty_slots(cause.title), cause.title
    # and its fix names no plan, which could not pass in a node the host does not have
    assert "lxcfix plan" not in cause.fix.title and not cause.applies
