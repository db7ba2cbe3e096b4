"""Device catalog, /proc/devices, rule parse/format and LXC rule-set semantics."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from lxcfix import devices
from lxcfix.devices import RuleSet, parse_proc_devices, parse_rule
from lxcfix.model import DeviceRule

from .conftest import make_facts


def test_proc_devices_both_sections_and_shared_names():
    char, block = parse_proc_devices(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n195 nvidiactl\n180 usb\n189 usb\n\nBlock devices:\n  8 sd\n 65 sd\n")
    assert char == {"mem": (1,), "nvidia-frontend": (195,), "nvidiactl": (195,), "usb": (180, 189)}
    assert block == {"sd": (8, 65)}


def test_old_nvidia_frontend_name_resolves():
    facts = make_facts("Character devices:\n195 nvidia-frontend\n")
    assert devices.resolve("/dev/nvidia0", facts).major == 195


@pytest.mark.parametrize("path,major,minor", [
    ("/dev/nvidia0", 195, 0), ("/dev/nvidia3", 195, 3), ("/dev/nvidiactl", 195, 255),
    ("/dev/nvidia-modeset", 195, 254), ("/dev/nvidia-uvm", 511, 0), ("/dev/nvidia-uvm-tools", 511, 1),
    ("/dev/nvidia-caps/nvidia-cap2", 238, 2), ("/dev/dri/card1", 226, 1), ("/dev/dri/renderD128", 226, 128),
    ("/dev/net/tun", 10, 200), ("/dev/fuse", 10, 229), ("/dev/kvm", 10, 232), ("/dev/apex_0", 120, 0),
    ("/dev/ttyUSB1", 188, 1), ("/dev/ttyACM0", 166, 0), ("/dev/bus/usb/001/002", 189, 1),
])
def test_catalog_resolves_canonical_numbers(path, major, minor):
    node = devices.resolve(path, make_facts())
    assert (node.kind, node.major, node.minor) == ("c", major, minor)


def test_dynamic_major_without_driver_is_missing():
    assert devices.resolve("/dev/kfd", make_facts()) is None
    assert devices.PROFILES["nvidia-uvm"].dynamic and not devices.PROFILES["nvidia"].dynamic


@pytest.mark.parametrize("text,rule", [
    ("a", DeviceRule("a", None, None, "rwm")),
    ("c 195:* rwm", DeviceRule("c", 195, None, "rwm")),
    ("b 8:* r", DeviceRule("b", 8, None, "r")),
    ("c *:* m", DeviceRule("c", None, None, "m")),
    ("c 10:200 wr", DeviceRule("c", 10, 200, "rw")),
    ("/dev/net/tun rw", DeviceRule("c", None, None, "rw", path="/dev/net/tun")),
    ("/dev/nvidia-uvm", DeviceRule("c", None, None, "rwm", path="/dev/nvidia-uvm")),
])
def test_parse_rule(text, rule):
    assert parse_rule(text) == rule


@pytest.mark.parametrize("text", ["c 195 rwm", "x 1:2 r", "c 1:2 rwx", "c -1:2 r", "", "/dev/x rw extra"])
def test_parse_rule_rejects(text):
    with pytest.raises(devices.RuleError):
        parse_rule(text)


@given(st.sampled_from("abc"), st.one_of(st.none(), st.integers(0, 4095)), st.one_of(st.none(), st.integers(0, 2**20)),
       st.sets(st.sampled_from("rwm"), min_size=1))
def test_format_parse_round_trip(kind, major, minor, access):
    access = "".join(c for c in "rwm" if c in access)
    rule = DeviceRule(kind, major, minor, access)
    if kind == "a":
        assert parse_rule(str(rule)).kind == "a"
    else:
        assert parse_rule(str(rule)) == rule


COMMON = [("deny", "a"), ("allow", "c *:* m"), ("allow", "b *:* m"), ("allow", "c 1:3 rwm"), ("allow", "c 10:229 rwm")]


@pytest.mark.parametrize("lines,dev,access,expected", [
    (COMMON, ("c", 1, 3), "rw", True),
    (COMMON, ("c", 10, 200), "rw", False),                  # allowlist: not listed
    (COMMON, ("c", 10, 200), "m", True),                    # mknod allowed, open not
    (COMMON + [("allow", "c 511:* rwm")], ("c", 511, 1), "rw", True),
    (COMMON + [("allow", "c 510:* rwm")], ("c", 511, 0), "rw", False),   # moved major
    (COMMON + [("allow", "c 195:* r")], ("c", 195, 0), "rw", False),     # access subset
    (COMMON + [("allow", "c 195:* r")], ("c", 195, 0), "r", True),
    (COMMON + [("allow", "a")], ("c", 10, 200), "rw", True),             # allow a: denylist, list cleared
    (COMMON + [("allow", "a"), ("deny", "c 10:200 rwm")], ("c", 10, 200), "rw", False),
    (COMMON + [("allow", "c 10:200 rwm"), ("deny", "c 10:200 rwm")], ("c", 10, 200), "rw", False),  # last wins
    ([], ("c", 10, 200), "rw", True),                                    # no rules: no program
    (COMMON + [("deny", ""), ("allow", "")], ("c", 10, 200), "rw", True),  # empty value clears
    (COMMON + [("allow", "b 8:* rwm")], ("c", 8, 0), "rw", False),       # kind matters
])
def test_ruleset_semantics(lines, dev, access, expected):
    assert RuleSet.replay(lines).allows(*dev, access) is expected


def test_deny_in_allowlist_mode_only_cancels_an_equal_allow():
    # LXC compiles only the mode's polarity: a deny of 195:0 under an allow of 195:* does nothing.
    rs = RuleSet.replay([("deny", "a"), ("allow", "c 195:* rwm"), ("deny", "c 195:0 rwm")])
    assert rs.allows("c", 195, 0)
    rs = RuleSet.replay([("deny", "a"), ("allow", "c 195:* rwm"), ("deny", "c 195:* rwm")])
    assert not rs.allows("c", 195, 0) and rs.rules == ()


def test_equal_rule_is_reused_in_place_and_access_compared_as_written():
    rs = RuleSet.replay([("deny", "a"), ("allow", "c 10:200 rwm"), ("allow", "c 10:* rwm"), ("allow", "c 10:200 rwm")])
    assert [str(r.rule) for r in rs.rules] == ["c 10:200 rwm", "c 10:* rwm"]
    rs = RuleSet.replay([("deny", "a"), ("allow", "c 10:200 rw"), ("deny", "c 10:200 wr")])
    assert rs.allows("c", 10, 200)  # "wr" is not "rw" to LXC: nothing cancelled


def test_lxc_rejects_double_spaces_so_the_rule_does_nothing():
    rs = RuleSet.replay([("deny", "a"), ("allow", "c 1:3 rwm"), ("allow", "c  10:200 rwm")])
    assert rs.has_program and not rs.allows("c", 10, 200)


def test_clear_keeps_the_mode():
    rs = RuleSet.replay([("deny", "a"), ("allow", ""), ("allow", "c 10:200 rwm")])
    assert rs.mode == "allowlist" and not rs.allows("c", 1, 3)


def test_path_rules_resolve_at_start_and_vanish_when_missing():
    resolve = {"/dev/net/tun": ("c", 10, 200)}.get
    rs = RuleSet.replay([("deny", "a"), ("allow", "/dev/net/tun rwm"), ("allow", "/dev/nope rwm")], resolve)
    assert rs.allows("c", 10, 200) and len(rs.rules) == 1


@pytest.mark.parametrize("text,broad", [
    ("a", True), ("c *:* rwm", True), ("b *:* rwm", True), ("b 8:* rw", True), ("c 10:* rwm", True),
    ("c 1:* rwm", True), ("c 13:* r", True), ("c *:* m", False), ("c 195:* rwm", False), ("c 511:* rwm", False),
    ("c 10:200 rwm", False), ("b 8:0 rw", False), ("c 226:* rwm", False),
])
def test_overbroad(text, broad):
    assert bool(devices.is_overbroad(parse_rule(text))) is broad


def test_container_exec_argv():
    """Nothing of lxcfix's environment goes into a container: lxc-attach clears it
    and sets a fixed PATH and LC_ALL. A Proxmox container is entered the same way
    (pct exec is lxc-attach -n VMID, keeping pct's environment by default)."""
    from lxcfix.backends import Lxc, Proxmox
    from lxcfix.transport import CONTAINER_PATH, Local

    clean = ["--clear-env", "--set-var", f"PATH={CONTAINER_PATH}", "--set-var", "LC_ALL=C"]
    assert Lxc(lxcpath="/srv/lxc").exec(Local(), "web").wrap(["id"]) == \
        ["lxc-attach", "-n", "web", "-P", "/srv/lxc", *clean, "--", "id"]
    assert Proxmox().exec(Local(), "200").wrap(["id"]) == ["lxc-attach", "-n", "200", *clean, "--", "id"]
