"""heal.py, what `lxcfix watch` decides: uevents parsed totally, matched to the catalog's
profiles (derived from devices.CATALOG, not a second list), bursts debounced, opt-in, the
rate limit and the give-up, the metrics text; and the unit's ExecStart words checked."""

from __future__ import annotations

import pytest

from lxcfix import codes, devices, heal, watch
from lxcfix.errors import BadInput

from .conftest import make_facts

TUN = (b"change@/devices/virtual/misc/tun\0ACTION=change\0DEVPATH=/devices/virtual/misc/tun\0SUBSYSTEM=misc\0"
       b"MAJOR=10\0MINOR=200\0DEVNAME=net/tun\0SEQNUM=4711\0")


def uevent(action, devpath, **env) -> bytes:
    fields = {"ACTION": action, "DEVPATH": devpath, **env}
    return f"{action}@{devpath}\0".encode() + b"".join(f"{k}={v}\0".encode() for k, v in fields.items())


def test_a_kernel_uevent_is_parsed_totally():
    ev = heal.parse_uevent(TUN)
    assert ev == heal.Uevent("change", "/devices/virtual/misc/tun", "misc", "/dev/net/tun", 10, 200, None)
    mod = heal.parse_uevent(uevent("add", "/module/nvidia_uvm", SUBSYSTEM="module"))
    assert (mod.action, mod.module) == ("add", "nvidia_uvm")


@pytest.mark.parametrize("data", [
    b"", b"libudev\0\xfe\xed\xca\xfe" + TUN, TUN.replace(b"change@", b"explode@"), b"change\0ACTION=change\0",
    TUN.replace(b"ACTION=change", b"ACTION=add"), TUN + b"X=" + b"y" * heal.MAX_UEVENT,
    TUN.replace(b"net/tun", b"net/t\xc3\xbcn"),
])
def test_what_is_no_kernel_uevent_is_none(data):
    assert heal.parse_uevent(data) is None


@pytest.mark.parametrize("name", ["../etc/passwd", "net/../../etc", "a b", "x" * 70, "net/tun\x1b[2J"])
def test_a_devname_that_is_no_device_name_is_dropped(name):
    ev = heal.parse_uevent(TUN.replace(b"net/tun", name.encode()))
    assert ev is not None and ev.devname is None
    assert heal.FILTER.profiles(ev) == frozenset()  # and with it, the event: misc has no major-wide profile


@pytest.mark.parametrize("data,profiles", [
    (TUN, {"tun"}),
    (uevent("add", "/devices/virtual/misc/fuse", SUBSYSTEM="misc", MAJOR=10, MINOR=229, DEVNAME="fuse"), {"fuse"}),
    (uevent("add", "/devices/virtual/misc/loop-control", SUBSYSTEM="misc", MAJOR=10, MINOR=237,
            DEVNAME="loop-control"), set()),
    (uevent("add", "/module/nvidia_uvm", SUBSYSTEM="module"), {"nvidia", "nvidia-uvm", "nvidia-caps"}),
    (uevent("remove", "/module/i915", SUBSYSTEM="module"), {"dri"}),
    (uevent("add", "/module/amdgpu", SUBSYSTEM="module"), {"dri", "kfd"}),
    (uevent("add", "/module/intel_vpu", SUBSYSTEM="module"), {"accel"}),
    (uevent("add", "/module/gasket", SUBSYSTEM="module"), {"apex"}),
    (uevent("add", "/module/ext4", SUBSYSTEM="module"), set()),
    (uevent("change", "/module/nvidia", SUBSYSTEM="module"), set()),
    (uevent("add", "/devices/pci0000:00/0000:00:02.0/drm/card1", SUBSYSTEM="drm", MAJOR=226, MINOR=1,
            DEVNAME="dri/card1"), {"dri"}),
    (uevent("change", "/devices/pci0000:00/0000:00:0b.0/accel/accel0", SUBSYSTEM="accel", MAJOR=261, MINOR=0,
            DEVNAME="accel/accel0"), {"accel"}),
    (uevent("add", "/devices/virtual/kfd/kfd", SUBSYSTEM="kfd", MAJOR=234, MINOR=0, DEVNAME="kfd"), {"kfd"}),
    (uevent("add", "/devices/pci0000:00/usb1/1-2", SUBSYSTEM="usb", MAJOR=189, MINOR=1, DEVNAME="bus/usb/001/002",
            DEVTYPE="usb_device"), {"usb"}),
    (uevent("add", "/devices/pci0000:00/usb1/1-2/1-2:1.0/ttyUSB0/tty/ttyUSB0", SUBSYSTEM="tty", MAJOR=188,
            MINOR=0, DEVNAME="ttyUSB0"), {"usb-serial"}),
    (uevent("add", "/devices/virtual/tty/ttyS3", SUBSYSTEM="tty", MAJOR=4, MINOR=67, DEVNAME="ttyS3"), set()),
    (uevent("add", "/devices/virtual/block/loop0", SUBSYSTEM="block", MAJOR=7, MINOR=0, DEVNAME="loop0"), set()),
    (uevent("add", "/devices/virtual/net/veth0", SUBSYSTEM="net", INTERFACE="veth0"), set()),
])
def test_events_match_the_catalogs_profiles_or_are_ignored(data, profiles):
    assert heal.FILTER.profiles(heal.parse_uevent(data)) == frozenset(profiles)


def test_what_is_listened_to_comes_from_the_catalog():
    subs = heal.FILTER.subsystems
    assert {"drm", "accel", "misc", "usb", "tty", "kfd", "module"} <= subs
    assert subs == {s for p in devices.CATALOG for s in p.subsystems} | {"module"}
    for p in devices.CATALOG:  # every profile is reached by a module event or a node under /dev
        assert p.modules or p.reload_modules or p.out_of_tree or p.subsystems, p.name
    assert heal.FILTER.watch_dirs() == ("/dev", "/dev/accel", "/dev/bus/usb", "/dev/dri", "/dev/net",
                                        "/dev/nvidia-caps")
    assert heal.FILTER.node("/dev/nvidia-uvm") == {"nvidia-uvm"}
    assert heal.FILTER.node("/dev/accel/accel0") == {"accel"}
    assert heal.FILTER.node("/dev/pts/3") == frozenset()
    assert heal.FILTER.node("/dev/dri") == {"dri"}  # the directory appearing: its nodes come with it


def test_a_burst_is_one_pass_and_a_storm_is_bounded():
    b = heal.Burst(debounce=0.2, max_wait=1.0)
    assert not b.pending and b.deadline() is None
    b.add({"tun"}, 10.0)
    b.add({"fuse"}, 10.1)
    assert not b.due(10.25) and b.due(10.31)
    assert b.take() == (frozenset({"tun", "fuse"}), 10.0, 2, False)
    assert not b.pending
    # 1,000 events a second for 5 s: a pass every max_wait at most, and the state stays small
    passes, t = [], 0.0
    for i in range(5000):
        t = i / 1000
        b.add({"tun"} if i % 2 else {"dri"}, t)
        if b.due(t):
            passes.append(b.take())
    assert 4 <= len(passes) <= 5 and all(n <= 1001 for _, _, n, _ in passes)
    assert len(b.profiles) <= len(devices.CATALOG)
    b.lost(t)
    assert b.take()[3] is True


def test_guard_rate_limits_and_gives_up_after_two_failures():
    g = heal.Guard(interval=10.0, max_failures=2)
    assert g.verdict("200", 0.0) is None
    assert g.record("200", True, 0.0) is False
    assert g.verdict("200", 5.0) == "rate-limited" and g.retry_at("200") == 10.0
    assert g.verdict("200", 10.0) is None
    assert g.record("200", False, 10.0) is False
    assert g.record("200", False, 20.0) is True  # the second failure in a row: given up, said once
    assert g.verdict("200", 1000.0) == "gave-up"
    assert g.verdict("201", 20.0) is None  # per container


def test_watch_conf_and_opt_in():
    conf = heal.parse_watch_conf("# plain LXC\nheal = web\n\nheal-restart = 201\n")
    assert conf == heal.WatchConf(frozenset({"web", "201"}), frozenset({"201"}))
    with pytest.raises(ValueError, match=r"watch.conf:2: not 'heal = CT'"):
        heal.parse_watch_conf("heal = web\nheal everything\n")
    with pytest.raises(ValueError):
        heal.parse_watch_conf("heal = ../etc\n")
    assert heal.tags_of("gpu;lxcfix-heal, prod") == {"gpu", "lxcfix-heal", "prod"}
    none = heal.WatchConf()
    assert heal.opt_in("gpu;lxcfix-heal", none, "200") == heal.OptIn(True, False, "tag lxcfix-heal")
    assert heal.opt_in("lxcfix-heal-restart", none, "200") == heal.OptIn(True, True, "tag lxcfix-heal-restart")
    assert heal.opt_in("gpu;lxcfix-healer", none, "200").heal is False
    assert heal.opt_in(None, none, "web", cli_heal={"web"}) == heal.OptIn(True, False, "--heal")
    assert heal.opt_in(None, conf, "201") == heal.OptIn(True, True, "watch.conf")
    assert heal.opt_in(None, conf, "202") == heal.OptIn(False, False, "")


def test_concerns_picks_the_findings_about_a_changed_device():
    facts = make_facts("Character devices:\n 10 misc\n195 nvidia\n511 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    tun = codes.make("LXF100", "200", "tun denied", device="/dev/net/tun", numbers=("c", 10, 200))
    uvm = codes.make("LXF100", "200", "uvm denied", device="/srv/devs/nvidia-uvm", numbers=("c", 511, 0))
    assert heal.concerns([tun, uvm], frozenset({"tun"}), facts) == [tun]
    assert heal.concerns([tun, uvm], frozenset({"nvidia-uvm"}), facts) == [uvm]  # the dynamic major, by facts
    assert heal.concerns([tun, uvm], frozenset({"fuse"}), facts) == []  # major 10 is shared: by path only
    assert heal.concerns([tun, uvm], frozenset(), facts, everything=True) == [tun, uvm]


def test_metrics_text_is_node_exporter_textfile():
    text = heal.metrics_text({"events_total": 3, "repairs_total": 1, "last_latency_seconds": 0.412})
    assert "# TYPE lxcfix_watch_events_total counter\nlxcfix_watch_events_total 3\n" in text
    assert "lxcfix_watch_last_latency_seconds 0.412\n" in text and "lxcfix_watch_failures_total 0\n" in text
    assert all(l.startswith("# ") or l.startswith("lxcfix_watch_") for l in text.splitlines())


@pytest.mark.parametrize("word", ["two words", "it's", "%h", "$HOME", "a\\b", ""])
def test_the_unit_refuses_a_word_systemd_would_read_otherwise(word):
    with pytest.raises(BadInput, match="cannot go into the unit's ExecStart"):
        watch.unit_argv("/usr/bin/python3", ["--heal", word])


def test_the_unit_is_hardened_and_runs_the_given_options():
    argv = watch.unit_argv("/opt/lxcfix/bin/python", ["--heal", "200"])
    text = watch.render_unit("pve", argv, "/var/lib/node_exporter/textfile/lxcfix.prom").decode()
    assert "ExecStart=/opt/lxcfix/bin/python -m lxcfix watch --heal 200\n" in text
    assert "After=pve-cluster.service lxc.service\n" in text
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectKernelModules=yes", "PrivateTmp=yes"):
        assert line + "\n" in text
    rw = next(l for l in text.splitlines() if l.startswith("ReadWritePaths="))
    assert "-/etc/pve" in rw and "-/var/lib/node_exporter/textfile" in rw and "-/run" in rw


def test_only_configs_that_name_a_changed_device_are_checked():
    facts = make_facts("Character devices:\n 10 misc\n195 nvidia\n511 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    tun = heal.needles(frozenset({"tun"}), facts)
    uvm = heal.needles(frozenset({"nvidia-uvm"}), facts)
    given_tun = b"arch: amd64\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"
    numeric_uvm = b"memory: 511\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
    devn_uvm = b"dev0: /dev/nvidia-uvm\n"
    bound = b"lxc.mount.entry: /srv/devs/uvm dev/nvidia-uvm none bind,create=file\n"
    plain = b"arch: amd64\nmemory: 1511\nnet0: name=eth0,hwaddr=BC:24:11:51:10:20\n"
    assert heal.might_concern(given_tun, tun) and not heal.might_concern(given_tun, uvm)
    assert heal.might_concern(numeric_uvm, uvm) and heal.might_concern(devn_uvm, uvm)
    assert heal.might_concern(bound, uvm)
    assert not heal.might_concern(plain, uvm) and not heal.might_concern(plain, tun)
    assert heal.needles(frozenset(), facts) is None and not heal.might_concern(given_tun, None)


def test_notify_is_an_argv_and_an_empty_one_is_refused():
    assert watch.notify_argv(None) is None
    assert watch.notify_argv("/usr/local/bin/page --team 'ops on call'") == ["/usr/local/bin/page", "--team",
                                                                             "ops on call"]
    for bad in ("", "   ", "a 'b"):
        with pytest.raises(BadInput):
            watch.notify_argv(bad)
