"""Static findings (no probe): one case per code, with the evidence an admin reads."""

from __future__ import annotations

from lxcfix.rules import run_rules

from .conftest import codes, make_ctx, make_facts

GPU = """arch: amd64
hostname: gpu
ostype: debian
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 508:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
"""

TUN = "arch: amd64\nostype: debian\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"


def findings(text, **kw):
    return run_rules(make_ctx(text, **kw))


def test_stale_uvm_major_is_lxf101_with_the_admin_message():
    (f,) = findings(GPU)
    assert f.code == "LXF101" and f.severity == "error" and f.device == "/dev/nvidia-uvm"
    assert f.message == ("/dev/nvidia-uvm is c 511:0 on this host; the config allows c 508:* "
                         "(stale: the nvidia-uvm major moved)")
    assert any("511 nvidia-uvm" in e for e in f.evidence)


def test_missing_tun_rule_is_lxf100():
    (f,) = findings(TUN)
    assert (f.code, f.device) == ("LXF100", "/dev/net/tun")
    assert "c 10:200" in f.message


def test_unprivileged_pve_is_denylist_mode_so_no_lxf100():
    assert findings("unprivileged: 1\n" + TUN) == []
    assert findings("lxc.idmap: u 0 100000 65536\n" + TUN) == []


def test_pve_console_off_denies_console_only():
    assert codes(findings("console: 0\n" + TUN)) == ["LXF100"]


def test_v1_keys_on_v2_host_is_lxf102():
    got = findings("arch: amd64\nlxc.cgroup.devices.allow: c 10:200 rwm\n" + TUN.split("\n", 1)[1])
    assert "LXF102" in codes(got) and "LXF100" in codes(got)


def test_v1_keys_are_enforced_on_hybrid_and_v2_rules_ignored():
    facts = make_facts(layout="hybrid")
    got = findings("lxc.cgroup2.devices.allow: c 10:200 rwm\n" + TUN, facts=facts)
    assert codes(got) == ["LXF300"]


def test_pinned_dynamic_major_is_lxf103_warning():
    text = GPU.replace("c 508:* rwm", "c 511:* rwm")
    got = findings(text)
    assert codes(got) == ["LXF103"]
    assert got[0].severity == "warning" and "nvidia-uvm" in got[0].message


def test_overbroad_rules_are_lxf104():
    got = findings("lxc.cgroup2.devices.allow: c 10:* rwm\nlxc.cgroup2.devices.allow: a\n" + TUN)
    # ... and the `a` after it empties LXC's list: `c 10:* rwm` does nothing (LXF143)
    assert codes(got) == ["LXF104", "LXF104", "LXF143"]
    assert "/dev/mapper/control" in " ".join(f.message for f in got)


def test_allowed_but_not_passed_is_lxf110():
    got = findings("arch: amd64\nlxc.cgroup2.devices.allow: c 226:* rwm\n")
    assert codes(got) == ["LXF110"]
    assert "/dev/dri/card0" in got[0].message


def test_mount_without_optional_is_lxf111_but_not_for_tun():
    text = GPU.replace("c 508:* rwm", "c 511:* rwm").replace("nvidia-uvm none bind,optional,", "nvidia-uvm none bind,")
    assert "LXF111" in codes(findings(text))
    assert "LXF111" not in codes(findings("lxc.cgroup2.devices.allow: c 10:200 rwm\n" + TUN))


def test_node_missing_on_host_is_lxf112():
    got = findings("lxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file\n")
    assert codes(got) == ["LXF112"]
    assert "starts without it" in got[0].message


def test_uvm_missing_on_host_says_nvidia_modprobe():
    facts = make_facts("Character devices:\n195 nvidia\n")
    (f,) = [f for f in findings(GPU.replace("lxc.cgroup2.devices.allow: c 508:* rwm\n", ""), facts=facts)
            if f.device == "/dev/nvidia-uvm"]
    assert f.code == "LXF112" and "nvidia-modprobe -u -c=0" in f.fix.title


def test_lock_is_lxf120_info():
    got = findings("lock: backup\narch: amd64\n")
    assert [(f.code, f.severity) for f in got] == [("LXF120", "info")]


def test_unparsable_line_is_lxf130():
    assert codes(findings("arch: amd64\nthis is not a config line\n")) == ["LXF130"]


def test_devn_entries_are_allowed_by_proxmox_itself():
    assert findings("arch: amd64\ndev0: /dev/net/tun\ndev1: path=/dev/dri/renderD128,gid=104\n") == []


def test_devn_of_missing_node_fails_start():
    (f,) = findings("dev0: /dev/kfd\n")
    assert f.code == "LXF112" and "will not start" in f.message


def test_plain_lxc_includes_common_conf_which_allows_fuse():
    text = ("lxc.include = /usr/share/lxc/config/common.conf\n"
            "lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file 0 0\n")
    assert findings(text, flavor="lxc", facts=make_facts(backend="lxc")) == []
    text2 = text.replace("/dev/fuse dev/fuse", "/dev/net/tun dev/net/tun")
    assert codes(findings(text2, flavor="lxc", facts=make_facts(backend="lxc"))) == ["LXF100"]


def test_plain_lxc_without_device_rules_allows_everything():
    text = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0\n"
    assert findings(text, flavor="lxc", facts=make_facts(backend="lxc")) == []


def test_directory_mount_brings_its_nodes():
    text = "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n"
    got = findings(text)
    assert sorted(f.device for f in got) == ["/dev/dri/card0", "/dev/dri/renderD128"]
    assert codes(got) == ["LXF100", "LXF100"]


def test_rule_lxc_rejects_is_lxf130():
    got = findings("lxc.cgroup2.devices.allow: c  10:200 rwm\n" + TUN)
    assert "LXF130" in codes(got) and "LXF100" in codes(got)
