"""LXF158: a USB device passed in by its bus and device number (/dev/bus/usb/BBB/DDD), which
changes when it re-enumerates; a Coral USB Edge TPU does so when its firmware loads
(1a6e:089a, then 18d1:9302, frigate#1807). The fix passes the bus directory and c 189:* rwm."""

from __future__ import annotations

from lxcfix import ctconfig, devices
from lxcfix.model import DeviceNode
from lxcfix.rules import hygiene, run_rules

from .conftest import make_ctx, make_facts

NODE = "/dev/bus/usb/002/003"
FACTS = make_facts(nodes={NODE: DeviceNode(NODE, "c", 189, 130, 0o20664)})


def test_a_coral_passed_by_its_device_number_is_named_with_its_two_ids():
    ctx = make_ctx("arch: amd64\nlxc.cgroup2.devices.allow: c 189:130 rwm\n"
                   f"lxc.mount.entry: {NODE} dev/bus/usb/002/003 none bind,optional,create=file\n", facts=FACTS)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF158"]
    assert f.severity == "warning" and f.device == NODE and f.line == 3
    assert "1a6e:089a until its firmware loads, then 18d1:9302" in " ".join(f.evidence)
    assert not f.fix.applies  # shown, never made for the admin: it widens access to the whole bus
    after = ctconfig.apply_edits(ctx.config, f.fix.edits)
    text = ctconfig.serialize(after).decode()
    assert "lxc.mount.entry: /dev/bus/usb/002 dev/bus/usb/002 none bind,optional,create=dir\n" in text
    assert "lxc.cgroup2.devices.allow: c 189:* rwm\n" in text


def test_the_rule_is_not_added_twice_and_is_never_over_broad():
    ctx = make_ctx("lxc.cgroup2.devices.allow: c 189:* rwm\n"
                   f"lxc.mount.entry: {NODE} dev/bus/usb/002/003 none bind,optional,create=file\n", facts=FACTS)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF158"]
    assert len(f.fix.edits) == 1
    assert devices.is_overbroad(devices.parse_rule(f"c {hygiene.USB_MAJOR}:* rwm")) in (None, "")


def test_the_bus_directory_and_other_usb_paths_are_not_findings():
    ctx = make_ctx("lxc.cgroup2.devices.allow: c 189:* rwm\n"
                   "lxc.mount.entry: /dev/bus/usb/002 dev/bus/usb/002 none bind,optional,create=dir\n", facts=FACTS)
    assert [f for f in run_rules(ctx) if f.code == "LXF158"] == []


def test_an_lxc_config_gets_its_own_line_form():
    ctx = make_ctx(f"lxc.mount.entry = {NODE} dev/bus/usb/002/003 none bind,optional,create=file 0 0\n",
                   flavor="lxc", facts=FACTS)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF158"]
    text = ctconfig.serialize(ctconfig.apply_edits(ctx.config, f.fix.edits)).decode()
    assert "lxc.mount.entry = /dev/bus/usb/002 dev/bus/usb/002 none bind,optional,create=dir 0 0\n" in text


def test_the_fix_says_the_rule_grants_every_bus_not_only_that_one():
    """Issue 30 item 11: the fix said "every USB device on that bus" while `c 189:* rwm` allows every
    bus's minors; a privileged tenant mknods c 189:M of another bus and the cgroup lets it open it."""
    ctx = make_ctx(f"lxc.mount.entry: {NODE} dev/bus/usb/002/003 none bind,optional,create=file\n", facts=FACTS)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF158"]
    assert "every USB device on every bus of the host, not only bus 002" in f.fix.title
    assert "mknod" in f.fix.title and "that bus)" not in f.fix.title
    # the honest alternative: that bus's own minors, (2-1)*128 .. (2-1)*128+127, one rule each
    assert any("for N in 128..255 (128 lines)" in n for n in f.fix.notes), f.fix.notes
    assert 130 in hygiene.usb_bus_minors(2) and 127 not in hygiene.usb_bus_minors(2)


def test_an_unprivileged_container_is_told_the_mount_narrows_it():
    ctx = make_ctx("unprivileged: 1\n"
                   f"lxc.mount.entry: {NODE} dev/bus/usb/002/003 none bind,optional,create=file\n", facts=FACTS)
    (f,) = [f for f in run_rules(ctx) if f.code == "LXF158"]
    assert "cannot mknod" in f.fix.title and "every bus of the host" in f.fix.title
