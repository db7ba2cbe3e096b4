"""Config model: byte-exact round trips, main-section-only edits."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

import pytest

from lxcfix import ctconfig

from .conftest import CORPUS


def flavor_of(path) -> str:
    return "pve" if path.parent.name == "pve" else "lxc"


def test_every_corpus_config_round_trips(corpus_files):
    for path in corpus_files:
        raw = path.read_bytes()
        cfg = ctconfig.parse(raw, flavor_of(path), str(path))
        assert ctconfig.serialize(cfg) == raw, path.name
        assert cfg.digest == ctconfig.digest(raw)


def test_only_the_pasted_editor_title_is_unparsable(corpus_files):
    bad = {p.name: ctconfig.parse(p.read_bytes(), flavor_of(p)).bad_lines() for p in corpus_files}
    assert {k: [n for n, _ in v] for k, v in bad.items() if v} == {"bpaludo-frigate-101.conf": [1]}


@pytest.mark.corpus
def test_corpus_sections_are_found():
    cfg = ctconfig.parse((CORPUS / "pve" / "pvetest-rollback-101.conf").read_bytes(), "pve")
    assert cfg.sections() == ["test"]
    assert cfg.get("hostname") == "test"  # main section only, not the snapshot's "test2"


def test_pve_key_forms():
    cfg = ctconfig.parse(b"arch: amd64\nlxc.cgroup2.devices.allow = c 195:* rwm\n"
                         b"lxc.mount.entry:/dev/fuse dev/fuse none bind 0 0\n  # note\n", "pve")
    assert cfg.items() == [("arch", "amd64"), ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
                           ("lxc.mount.entry", "/dev/fuse dev/fuse none bind 0 0")]


def test_lxc_rejects_proxmox_form():
    cfg = ctconfig.parse(b"lxc.arch = x86_64\narch: amd64\n", "lxc")
    assert cfg.bad_lines() == [(2, "arch: amd64")]


def test_duplicates_kept_in_order():
    cfg = ctconfig.parse(b"lxc.cgroup2.devices.allow: c 1:1 r\nlxc.cgroup2.devices.allow: c 1:2 r\n", "pve")
    assert cfg.values("lxc.cgroup2.devices.allow") == ["c 1:1 r", "c 1:2 r"]


def test_add_goes_after_lines_of_its_kind_and_keeps_snapshots():
    raw = (b"arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\nlxc.mount.entry: a b none bind\n"
           b"\n[snap]\nlxc.cgroup2.devices.allow: c 508:* rwm\n")
    cfg = ctconfig.parse(raw, "pve")
    out = ctconfig.add(cfg, "lxc.cgroup2.devices.allow", "c 511:* rwm")
    assert out.raw == (b"arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n"
                       b"lxc.cgroup2.devices.allow: c 511:* rwm\nlxc.mount.entry: a b none bind\n"
                       b"\n[snap]\nlxc.cgroup2.devices.allow: c 508:* rwm\n")


def test_add_without_anchor_goes_before_the_blank_line_of_a_snapshot():
    cfg = ctconfig.parse(b"arch: amd64\n\n[snap]\narch: i386\n", "pve")
    out = ctconfig.add(cfg, "dev0", "/dev/net/tun")
    assert out.raw == b"arch: amd64\ndev0: /dev/net/tun\n\n[snap]\narch: i386\n"


def test_add_keeps_crlf_and_mends_missing_final_newline():
    cfg = ctconfig.parse(b"lxc.arch = x86_64\r\nlxc.uts.name = a", "lxc")
    out = ctconfig.add(cfg, "lxc.cgroup2.devices.allow", "c 10:200 rwm")
    assert out.raw == b"lxc.arch = x86_64\r\nlxc.uts.name = a\r\nlxc.cgroup2.devices.allow = c 10:200 rwm\r\n"


def test_set_value_keeps_line_ending_and_refuses_snapshot_lines():
    cfg = ctconfig.parse(b"a: 1\r\n[s1]\nb: 2\n", "pve")
    assert ctconfig.set_value(cfg, 0, "a", "3").raw == b"a: 3\r\n[s1]\nb: 2\n"
    assert cfg.lines[1].raw == b"[s1]\nb: 2\n"  # the snapshot is kept as one opaque line
    try:
        ctconfig.set_value(cfg, 1, "b", "3")
    except ValueError:
        pass
    else:
        raise AssertionError("edited a snapshot line")


# ---- property tests

line = st.one_of(
    st.sampled_from([b"arch: amd64", b"lxc.cgroup2.devices.allow: c 195:* rwm", b"lxc.mount.entry = /dev/x dev/x none bind",
                     b"# comment", b"", b"   ", b"\tkey:\tvalue\t", b"[snap]", b"[pve:pending]", b"dev0: /dev/dri/card0",
                     b"lxc.include = /usr/share/lxc/config/common.conf", b"garbage line", b"lock: backup"]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
)
ending = st.sampled_from([b"\n", b"\r\n", b"\r", b""])


@st.composite
def config_bytes(draw) -> bytes:
    parts = draw(st.lists(st.tuples(line, ending), max_size=25))
    return b"".join(l + e for l, e in parts)


@settings(max_examples=400, deadline=None)
@given(config_bytes(), st.sampled_from(["pve", "lxc"]))
def test_round_trip_any_bytes(raw, flavor):
    assert ctconfig.serialize(ctconfig.parse(raw, flavor)) == raw


@settings(max_examples=300, deadline=None)
@given(config_bytes(), st.sampled_from(["pve", "lxc"]))
def test_edits_never_touch_other_sections(raw, flavor):
    cfg = ctconfig.parse(raw, flavor)
    out = ctconfig.add(cfg, "lxc.cgroup2.devices.allow", "c 10:200 rwm")
    rest = lambda c: [l.raw for l in c.lines if l.section is not ctconfig.MAIN]
    assert rest(out) == rest(cfg)
    again = ctconfig.parse(out.raw, flavor)
    assert ("lxc.cgroup2.devices.allow", "c 10:200 rwm") in again.items()
    assert ctconfig.serialize(again) == out.raw


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("lxc.abz019_-:= \t[]#/*\u00a0")), max_size=30), st.sampled_from(["pve", "lxc"]))
def test_key_split_matches_the_line_grammar(text, flavor):
    """parse_line's fast split reads lines exactly as the documented regexes do."""
    stripped = text.strip()
    if flavor == "pve":
        m = (ctconfig._PVE_LXC.match(stripped) if stripped.startswith("lxc.") else None) or ctconfig._PVE_KEY.match(stripped)
    else:
        m = ctconfig._LXC_KEY.match(stripped)
    expected = (m.group(1), m.group(2)) if m else None
    assert ctconfig._split_key(stripped, flavor) == expected


def test_sections_are_listed_from_the_opaque_tail():
    cfg = ctconfig.parse(b"a: 1\n[snap1]\nb: 2\n[pve:pending]  \nc: 3\n", "pve")
    assert cfg.sections() == ["snap1", "pve:pending"]
    assert [ln.raw for ln in cfg.lines] == [b"a: 1\n", b"[snap1]\nb: 2\n[pve:pending]  \nc: 3\n"]


@pytest.mark.parametrize("line", [b"[x]", b" [snap]", b"[1a]", b"[a b]", b"\t[pve:pending]", b"[]"])
def test_only_proxmox_section_headers_start_a_section(line):
    """pve-container's parse_pct_config: `[pve:pending]` or [a-z][a-z0-9_-]+ at the line's
    start. Anything else is a bad line of the main section, and what follows still counts."""
    cfg = ctconfig.parse(b"arch: amd64\n" + line + b"\nlock: backup\nlxc.cgroup2.devices.allow: c 10:200 rwm\n", "pve")
    assert cfg.sections() == []
    assert cfg.get("lock") == "backup" and cfg.values("lxc.cgroup2.devices.allow") == ["c 10:200 rwm"]
    assert [n for n, _ in cfg.bad_lines()] == [2]
    assert ctconfig.serialize(cfg) == b"arch: amd64\n" + line + b"\nlock: backup\nlxc.cgroup2.devices.allow: c 10:200 rwm\n"


def test_section_headers_are_case_insensitive_like_proxmox():
    cfg = ctconfig.parse(b"arch: amd64\n[Snap_1]\nx: 1\n[PVE:PENDING]\n", "pve")
    assert cfg.sections() == ["Snap_1", "PVE:PENDING"]
