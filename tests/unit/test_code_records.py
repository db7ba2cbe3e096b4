"""One record per finding code (lxcfix.codes): every table that names codes is derived from
the records, a finding's severity is its record's (or one the record allows), and the
verify asks the records what a verified change leaves none of, whatever the severity.

The findings checked are the ones the rules really emit: every bundled example snapshot
scanned and audited for every occasion, and the public corpus when it is there.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import pytest

from lxcfix import audit, causes, codes, hook, probe, repair, scan
from lxcfix.model import DeviceNode, Edit, Finding, Fix, ProbeNode, ProbeResult
from lxcfix.rules import foresight, run_rules

from .conftest import EXAMPLES, REPO, make_ctx, make_facts

SNAPSHOTS = REPO / "tests" / "unit" / "fixtures" / "snapshots"


def example_findings() -> list[Finding]:
    out: list[Finding] = []
    snaps = [p for p in EXAMPLES.iterdir() if p.is_dir()] + [p for p in SNAPSHOTS.iterdir() if p.is_dir()]
    for snap in sorted(snaps):
        target = repair.open_target(str(snap))
        rep = repair.scan(target, None, keep_context=True, upgrade=True)
        for c in rep.containers:
            out += c.findings
            if c.context is not None:
                for occasion in foresight.FOR:
                    out += foresight.check(c.context, foresight.Occasion(occasion), c.findings)
    return out


@pytest.fixture(scope="module")
def emitted() -> list[Finding]:
    found = example_findings()
    assert len({f.code for f in found}) >= 20  # the examples exercise most families
    return found


def test_every_emitted_finding_has_a_record_and_a_severity_it_allows(emitted):
    bad = sorted({(f.code, f.severity) for f in emitted
                  if f.code not in codes.CODES or not codes.CODES[f.code].allows(f.severity)})
    assert bad == []


@pytest.mark.corpus
def test_the_public_corpus_emits_only_recorded_severities(corpus_files):
    bad = set()
    for path in corpus_files:
        flavor = "lxc" if path.parent.name == "lxc" else "pve"
        for f in run_rules(make_ctx(path.read_bytes(), flavor)):
            if f.code not in codes.CODES or not codes.CODES[f.code].allows(f.severity):
                bad.add((path.name, f.code, f.severity))
    assert sorted(bad) == []


def test_make_takes_the_records_severity_and_refuses_another():
    assert codes.make("LXF121", "200", "m").severity == "warning"
    assert codes.make("LXF121", "200", "m", severity="error").severity == "error"  # the record allows it
    with pytest.raises(ValueError, match="LXF103 is warning, not error"):
        codes.make("LXF103", "200", "m", severity="error")
    with pytest.raises(ValueError, match="no finding code 'LXF999'"):
        codes.make("LXF999", "200", "m")


def test_the_derived_tables_are_the_records():
    """What used to be typed in six modules, read from the records."""
    assert scan.LIVE_FIXABLE == {"LXF100", "LXF101", "LXF102", "LXF110", "LXF200", "LXF210", "LXF211"}
    assert hook.BLOCKING == {"LXF100", "LXF101", "LXF112"}
    assert causes.NODE_LINKED == {"LXF100", "LXF101", "LXF110", "LXF112", "LXF200", "LXF202", "LXF203",
                                  "LXF210", "LXF211", "LXF220"}
    assert causes.ONCE == {"LXF120", "LXF121", "LXF131", "LXF300", "LXF301"}
    assert causes.DEVICE_KIND["LXF101"] == "cgroup-denies" and causes.DEVICE_KIND["LXF204"] == "no-access"
    assert codes.where(verify="always") == {"LXF100", "LXF101", "LXF110", "LXF121", "LXF200", "LXF202",
                                            "LXF203", "LXF206", "LXF301"}
    assert set(audit._HANDLERS) == {c.code for c in codes.CODES.values() if c.audit}


def test_every_record_names_what_exists():
    rules = {p.stem for p in (REPO / "lxcfix" / "rules").glob("*.py")} | {"scan"}
    for c in codes.CODES.values():
        assert c.family in rules, c.code
        assert c.verify in codes.VERIFY, c.code
        assert c.kind in ("", *causes.KIND_ORDER), c.code
        assert c.verify != "fixed" or c.kind, f"{c.code}: a 'fixed' verify needs the kind of fix it follows"
        assert not c.audit or callable(getattr(audit._Ct, c.audit, None)), c.code
        assert set(c.predicts) <= set(foresight.FOR), c.code
        assert set(c.severities) <= set(codes.SEVERITIES) - {c.severity}, c.code
        assert set(c.subject) <= {"device", "numbers", "rule", "line"}, c.code
        assert c.hook in ("", "block"), c.code


def test_no_other_module_types_a_table_of_codes():
    """A set, tuple or dict literal of two or more codes outside codes.py is a side table that
    should be a field of the records (a single code compared in a handler is fine)."""
    tables = []
    for path in (REPO / "lxcfix").rglob("*.py"):
        if path.name == "codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            items = node.elts if isinstance(node, (ast.Set, ast.Tuple, ast.List)) else \
                node.keys if isinstance(node, ast.Dict) else ()
            named = [i for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
                     and re.fullmatch(r"LXF\d{3}", i.value)]
            if len(named) >= 2:
                tables.append(f"{path.relative_to(REPO)}:{node.lineno}")
    # What is left names codes for the wording of one message (which codes a title quotes), not
    # what a code is: each is listed here so a new one is a decision, not a slip.
    assert len(tables) <= KNOWN_WORDING_TABLES, tables


KNOWN_WORDING_TABLES = 3  # causes.PROBE_GPU (the symptom codes), audit (two wordings)


# ---------------------------------------------------------------- the verify, derived

def _f(code, device=None, severity=None, applies=False):
    edit = Edit("add", lines=(("lxc.cgroup2.devices.allow", "c 10:200 rwm"),))
    fix = Fix("t", (edit,), applicability="safe") if applies else Fix("t")
    return codes.make(code, "200", "m", device=device, fix=fix, severity=severity)


def test_lxf121_must_be_absent_after_a_change_although_a_scan_calls_it_a_warning():
    f = _f("LXF121")
    assert f.severity == "warning" and codes.must_be_absent(f, {})


def test_a_fixed_code_must_be_absent_only_on_the_nodes_whose_fix_of_its_kind_the_plan_made():
    plan = [_f("LXF114", "/dev/dri/renderD128", applies=True), _f("LXF100", "/dev/net/tun", applies=True)]
    fixed = codes.fixed_devices(plan)
    assert fixed == {"no-access": {"/dev/dri/renderD128"}, "cgroup-denies": {"/dev/net/tun"}}
    assert codes.must_be_absent(_f("LXF204", "/dev/dri/renderD128"), fixed)
    assert not codes.must_be_absent(_f("LXF204", "/dev/net/tun"), fixed)  # its access was not the plan's
    assert not codes.must_be_absent(_f("LXF201", "/dev/nvidia-caps/nvidia-cap1", "info"), fixed)
    assert not codes.must_be_absent(_f("LXF103"), fixed)


# ---------------------------------------------------------------- nvidia-caps: only MIG needs them

CAPS = "/dev/nvidia-caps/nvidia-cap1"


def _caps_probe(smi: str = "GPU 0: NVIDIA H200 (UUID: GPU-1)") -> ProbeResult:
    return ProbeResult(nodes={CAPS: ProbeNode(CAPS, True, True, 241, 1, "EACCES")}, nvidia_smi_rc=0,
                       nvidia_smi_out=smi)


def test_eacces_on_a_caps_node_is_info_without_mig_and_an_error_with_it():
    expected = {CAPS: ("c", 241, 1)}
    (f,) = probe.classify("200", "h", _caps_probe(), expected, None, mig=False)
    assert (f.code, f.severity) == ("LXF201", "info") and "only for MIG" in f.message
    (f,) = probe.classify("200", "h", _caps_probe(), expected, None, mig=True)
    assert (f.code, f.severity) == ("LXF201", "error")
    (f,) = probe.classify("200", "h", _caps_probe(), expected, None)  # not known: as before
    assert f.severity == "error"


def test_mig_in_use_is_read_from_nvidia_smi_or_the_hosts_caps_nodes():
    assert not probe.mig_in_use(_caps_probe(), ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"])
    assert probe.mig_in_use(_caps_probe("GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 1g.18gb     Device  0: (UUID: MIG-2)"), [])
    assert probe.mig_in_use(None, ["/dev/nvidia-caps/nvidia-cap21"])
    assert not probe.mig_in_use(None, ["/dev/nvidia-caps/nvidia-cap1x", "/dev/nvidia0"])


def test_the_h200_unprivileged_case_leaves_no_error_for_the_caps_nodes():
    """The issue's H200 case: an unprivileged container, the caps nodes 0400 root on the host,
    no MIG: the probe's EACCES on them is info, and a verify does not require them gone."""
    facts = make_facts(proc_devices="Character devices:\n195 nvidia\n238 nvidia-uvm\n241 nvidia-caps\n",
                       nodes={CAPS: DeviceNode(CAPS, "c", 241, 1, 0o20400)})
    ctx = make_ctx("arch: amd64\nunprivileged: 1\nlxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none "
                   "bind,optional,create=dir\n", facts=facts)
    ctx = replace(ctx, probe=_caps_probe())
    found = [f for f in run_rules(ctx) if f.code == "LXF201"]
    assert [(f.device, f.severity) for f in found] == [(CAPS, "info")]
    assert not any(codes.must_be_absent(f, codes.fixed_devices(found)) for f in found)


# ---------------------------------------------------------------- the subject is data, not text

def test_causes_never_read_device_numbers_out_of_a_message():
    """nvidia-smi's output is the container's text, and LXF211 quotes it: a tenant printing
    'c 10:200' must not move the finding into another device's cause."""
    facts = make_facts(nodes={"/dev/nvidiactl": DeviceNode("/dev/nvidiactl", "c", 195, 255, 0o20666)})
    quoted = codes.make("LXF211", "200", "nvidia-smi: c 10:200 Unknown Error (NVML cannot open /dev/nvidiactl)",
                        device="/dev/nvidiactl")
    tun = codes.make("LXF100", "200", "/dev/net/tun is c 10:200 on this host; ...", device="/dev/net/tun",
                     numbers=("c", 10, 200))
    assert len(causes.group([quoted, tun], facts)) == 2
    assert causes._node(quoted, facts).major == 195  # the host's node, from the facts


def test_a_driver_mismatch_is_the_kind_the_probe_gives_not_a_word_in_the_message():
    says = codes.make("LXF211", "200", "nvidia-smi: mismatch mismatch (the tenant's text)")
    assert not causes._is_mismatch(says)
    (f,) = probe.classify("200", "h", ProbeResult(nodes={}, nvidia_smi_rc=18,
                                                    nvidia_smi_out="Failed to initialize NVML: Driver/library "
                                                                   "version mismatch"), {}, None)
    assert f.kind == "driver-mismatch" and causes._is_mismatch(f)


def test_the_subject_a_record_declares_is_there(emitted):
    """numbers and rule, where a record says its findings carry them, are set on every one
    emitted (causes read them instead of the message)."""
    missing = sorted({(f.code, field) for f in emitted for field in ("numbers", "rule")
                      if field in codes.CODES[f.code].subject and getattr(f, field) is None
                      and not (field == "numbers" and f.device is None)})
    assert missing == []
    assert any(f.code == "LXF101" and f.rule for f in emitted)
    assert any(f.code == "LXF100" and f.numbers for f in emitted)
