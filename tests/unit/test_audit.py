"""audit: which containers will or may break on a reboot or driver upgrade, why,
and the exact change; golden text for the renderers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lxcfix import audit, ctconfig, gather
from lxcfix.errors import BadInput
from lxcfix.model import DeviceNode, Finding
from lxcfix.scan import HostReport, analyze_container

from .conftest import make_facts, no_includes


def node(path, major, minor, gid=0, mode=0o666):
    return DeviceNode(path, "c", major, minor, 0o20000 | mode, 0, gid)


NODES = {n.path: n for n in [
    node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255),
    node("/dev/nvidia-uvm", 511, 0), node("/dev/nvidia-uvm-tools", 511, 1),
    node("/dev/dri/card0", 226, 0, 44, 0o660), node("/dev/dri/card1", 226, 1, 44, 0o660),
    node("/dev/dri/renderD128", 226, 128, 104, 0o660),
    node("/dev/dri/by-path/pci-0000:01:00.0-card", 226, 1, 44, 0o660),
    node("/dev/dri/by-path/pci-0000:01:00.0-render", 226, 128, 104, 0o660),
    node("/dev/net/tun", 10, 200),
]}
HEAD = "arch: amd64\nostype: debian\n"
TUN = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"
CONFIGS = {
    "200": HEAD + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
                  "lxc.cgroup2.devices.allow: c 511:* rwm\n"
                  "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
                  "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n"
                  "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,create=file\n"
                  "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n",
    "201": HEAD + "dev0: /dev/dri/card1\n",
    "202": HEAD + "unprivileged: 1\ndev0: /dev/dri/renderD128\n",
    "203": HEAD + "lxc.cgroup.devices.allow: c 10:200 rwm\n" + TUN,
    "204": HEAD + "lxc.cgroup2.devices.allow: a\n" + TUN,
    "205": HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\n" + TUN,
}
# What a probe inside would add (probe.classify): a userspace mismatch, a render node the idmap keeps out.
PROBED = {
    "200": [Finding("LXF212", "error", "200", "NVIDIA driver mismatch: host kernel driver 580.159.04, "
                    "container userspace 575.51.02", host="pve1")],
    "202": [Finding("LXF201", "error", "202", "open /dev/dri/renderD128: EACCES (not the cgroup: ...)",
                    device="/dev/dri/renderD128", host="pve1")],
}


def host(configs=CONFIGS, probed=PROBED, flavor="pve", name="pve1", nodes=NODES, **facts_kw) -> HostReport:
    facts_kw.setdefault("pve_version", "8.3.0" if flavor == "pve" else None)
    facts = replace(make_facts(backend=flavor, nodes=nodes, **facts_kw), host=name, nvidia_driver="580.159.04")
    reports = []
    for ct, text in configs.items():
        path = f"/etc/pve/lxc/{ct}.conf" if flavor == "pve" else f"/var/lib/lxc/{ct}/config"
        loaded = gather.Loaded(ct, path, ctconfig.parse(text.encode(), flavor, path))
        c = analyze_container(facts, loaded, no_includes, "auto")
        reports.append(replace(c, findings=c.findings + tuple((probed or {}).get(ct, ()))))
    return HostReport(name, flavor, facts, tuple(reports))


def items(report, ct=None, code=None):
    return [i for i in report.items if (ct is None or i.ct == ct) and (code is None or i.code == code)]


GOLDEN_REBOOT = """\
# lxcfix audit: before the reboot

5 of 6 containers on 1 host will or may break: 3 will, 2 may.

## Hosts

| host | backend | NVIDIA driver | cgroup | containers | will break | may break |
|---|---|---|---|---|---|---|
| pve1 | pve 8.3.0 | 580.159.04 | v2 | 6 | 3 | 2 |

## pve1

| CT | code | severity | outcome | device | why |
|---|---|---|---|---|---|
| 200 | LXF212 | error | will | - | broken now: NVIDIA driver mismatch: host kernel driver 580.159.04, container userspace 575.51.02 |
| 200 | LXF112 | error | may | /dev/nvidia-uvm | /dev/nvidia-uvm exists now, but the kernel does not create it when the module loads: after the reboot, until something runs nvidia-modprobe -u, it is absent and LXC refuses to start the container |
| 200 | LXF103 | warning | may | /dev/nvidia-uvm | c 511:* rwm pins nvidia-uvm's dynamic major 511: the kernel picks the major when the module loads; if the reboot loads the driver again and it gets another one, the device is denied (EPERM; CUDA error 999). Path-form rules are resolved at every start |
| 200 | LXF111 | warning | may | /dev/nvidia-uvm | /dev/nvidia-uvm is absent at boot until something runs nvidia-modprobe; without 'optional' LXC then refuses to start the container |
| 201 | LXF113 | warning | may | /dev/dri/card1 | /dev/dri/card1 is named by its index, which the kernel gives in probe order: after a reboot another GPU (or simpledrm/efifb) can take card1, and the container then gets the wrong device or does not start (devN: 'Device does not exist'). /dev/dri/by-path names the GPU by its PCI address |
| 202 | LXF201 | error | will | /dev/dri/renderD128 | broken now, and after the reboot: open /dev/dri/renderD128: EACCES (not the cgroup: ...) (on the host: gid 104, mode 0660) |
| 202 | LXF114 | warning | will | /dev/dri/renderD128 | will not work for non-root users, now and after the reboot: inside, /dev/dri/renderD128 will be root:root 0660: only root can open it; the container's render group (gid 105) cannot (add gid=105) |
| 203 | LXF100 | error | will | /dev/net/tun | broken now, and stays broken after the reboot: /dev/net/tun is c 10:200 on this host; no cgroup2 rule allows it, so open() inside gives EPERM |
| 203 | LXF102 | error | will | - | lxc.cgroup.devices.allow is a cgroup v1 key: on this cgroup v2 host LXC ignores it silently; the rule does nothing, now or after the reboot |
| 204 | LXF104 | warning | may | - | lxc.cgroup2.devices.allow: a allows every device: it works, so nothing breaks because of it, but it is the rule that hides the next missing one; narrow it in the same window (the lines below keep every device the container is given) |

### Changes on pve1

#### CT 200: LXF212

On the host:

```sh
pct push 200 NVIDIA-Linux-x86_64-580.159.04.run /root/NVIDIA-Linux-x86_64-580.159.04.run
pct exec 200 -- sh /root/NVIDIA-Linux-x86_64-580.159.04.run --no-kernel-module --silent
```

#### CT 200: LXF112 /dev/nvidia-uvm

On the host:

```sh
lxcfix host-fix --yes    # installs lxcfix-nvidia-nodes.service: nvidia-modprobe at boot, before guests start
```

#### CT 200: LXF103 /dev/nvidia-uvm

In `/etc/pve/lxc/200.conf`:

```diff
- lxc.cgroup2.devices.allow: c 511:* rwm
+ lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm
+ lxc.cgroup2.devices.allow: /dev/nvidia-uvm-tools rwm
```

#### CT 200: LXF111 /dev/nvidia-uvm

In `/etc/pve/lxc/200.conf`:

```diff
- lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,create=file
+ lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
```

#### CT 201: LXF113 /dev/dri/card1

In `/etc/pve/lxc/201.conf`:

```diff
# now: /dev/dri/by-path/pci-0000:01:00.0-card is c 226:1, /dev/dri/card1 on this host
- dev0: /dev/dri/card1
+ lxc.mount.entry: /dev/dri/by-path/pci-0000:01:00.0-card dev/dri/card1 none bind,optional,create=file
+ lxc.cgroup2.devices.allow: /dev/dri/by-path/pci-0000:01:00.0-card rwm
```

#### CT 202: LXF201 /dev/dri/renderD128, LXF114 /dev/dri/renderD128

In `/etc/pve/lxc/202.conf`:

```diff
# or let every user in CT 202 open it: dev0: /dev/dri/renderD128,mode=0666 (lxcfix apply --mode-0666; any process inside, not only the render group)
- dev0: /dev/dri/renderD128
+ dev0: /dev/dri/renderD128,gid=105
```

#### CT 203: LXF100 /dev/net/tun, LXF102

In `/etc/pve/lxc/203.conf` (or `lxcfix apply --ct 203`, which makes this change with a backup and a verify):

```diff
- lxc.cgroup.devices.allow: c 10:200 rwm
+ lxc.cgroup2.devices.allow: c 10:200 rwm
```

#### CT 204: LXF104

In `/etc/pve/lxc/204.conf`:

```diff
- lxc.cgroup2.devices.allow: a
+ lxc.cgroup2.devices.allow: c 10:200 rwm
```

## How to verify after maintenance

```sh
lxcfix audit --for reboot    # nothing left at risk
lxcfix scan    # every container probed inside: no errors
lxcfix diagnose --ct 200
lxcfix diagnose --ct 201
lxcfix diagnose --ct 202
lxcfix diagnose --ct 203
lxcfix diagnose --ct 204
```
"""


def test_markdown_change_ticket_for_a_reboot_is_golden():
    report = audit.audit([host()], "reboot", ct_groups={("pve1", "202"): {"render": 105}})
    assert audit.to_markdown(report, host_flags={"pve1": ""}) == GOLDEN_REBOOT


def test_json_is_schema_1_with_every_container_and_its_changes():
    report = audit.audit([host(configs={k: CONFIGS[k] for k in ("203", "205")}, probed={})], "driver-upgrade",
                         new_driver="590.44.01")
    doc = audit.to_json(report)
    assert doc == {
        "schema": 1, "tool": "lxcfix", "version": doc["version"], "command": "audit", "for": "driver-upgrade",
        "new_driver": "590.44.01", "to_kernel": None,
        "hosts": [{"host": "pve1", "backend": "pve", "error": None, "nvidia_driver": "580.159.04",
                   "cgroup_layout": "v2", "pve_version": "8.3.0", "lxc_version": None, "kernel": None,
                   "notes": [], "containers": 2,
                   "will": 1, "may": 0}],
        "containers": [
            {"host": "pve1", "ct": "203", "path": "/etc/pve/lxc/203.conf", "outcome": "will", "findings": [
                {"code": "LXF100", "severity": "error", "outcome": "will", "device": "/dev/net/tun",
                 "message": "broken now, and stays broken after the driver upgrade: /dev/net/tun is c 10:200 on "
                            "this host; no cgroup2 rule allows it, so open() inside gives EPERM",
                 "change": "- lxc.cgroup.devices.allow: c 10:200 rwm\n+ lxc.cgroup2.devices.allow: c 10:200 rwm",
                 "change_kind": "config", "path": "/etc/pve/lxc/203.conf", "cause": "cgroup-denies:tun",
                     "applies": True, "commands": ["lxcfix apply --ct 203"]},
                {"code": "LXF102", "severity": "error", "outcome": "will", "device": None,
                 "message": "lxc.cgroup.devices.allow is a cgroup v1 key: on this cgroup v2 host LXC ignores it "
                            "silently; the rule does nothing, now or after the driver upgrade",
                 "change": "- lxc.cgroup.devices.allow: c 10:200 rwm\n+ lxc.cgroup2.devices.allow: c 10:200 rwm",
                 "change_kind": "config", "path": "/etc/pve/lxc/203.conf", "cause": "cgroup-denies:tun",
                     "applies": True, "commands": ["lxcfix apply --ct 203"]}]},
            {"host": "pve1", "ct": "205", "path": "/etc/pve/lxc/205.conf", "outcome": "ok", "findings": []}],
        "summary": {"containers": 2, "will": 1, "may": 0, "ok": 1, "items": 2, "unreachable": 0},
    }


def test_table_rows_follow_the_columns():
    report = audit.audit([host()], "reboot")
    rows = audit.to_table_rows(report)
    assert len(rows) == len(report.items) and all(len(r) == len(audit.TABLE_COLUMNS) for r in rows)
    assert rows[0][:6] == ("pve1", "200", "LXF212", "error", "will", "-")


def test_driver_upgrade_needs_the_new_userspace_in_every_gpu_container():
    configs = {"200": CONFIGS["200"], "205": CONFIGS["205"]}
    report = audit.audit([host(configs=configs, probed={})], "driver-upgrade", new_driver="590.44.01")
    (i,) = items(report, code="LXF212")
    assert (i.ct, i.outcome, i.kind) == ("200", "will", "command")
    assert "580.159.04 -> 590.44.01" in i.why and "userspace 590.44.01" in i.why
    assert i.change == ("pct push 200 NVIDIA-Linux-x86_64-590.44.01.run /root/NVIDIA-Linux-x86_64-590.44.01.run\n"
                        "pct exec 200 -- sh /root/NVIDIA-Linux-x86_64-590.44.01.run --no-kernel-module --silent")
    # Without the new version: say how to read it after the upgrade.
    (j,) = items(audit.audit([host(configs=configs, probed={})], "driver-upgrade"), code="LXF212")
    assert j.change.startswith("# <new driver version>: the host's after the upgrade: cat /proc/driver/nvidia/version\n")
    # A reboot alone does not change the driver.
    assert not items(audit.audit([host(configs=configs, probed={})], "reboot"), code="LXF212")


def test_an_existing_mismatch_installs_the_hosts_current_version():
    (i,) = items(audit.audit([host()], "reboot"), code="LXF212")
    assert "NVIDIA-Linux-x86_64-580.159.04.run" in i.change and i.outcome == "will"


def test_driver_upgrade_leaves_out_dynamic_majors_it_does_not_reload():
    kfd = HEAD + "lxc.cgroup2.devices.allow: c 240:* rwm\nlxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file\n"
    proc = "Character devices:\n 10 misc\n195 nvidia\n240 kfd\n511 nvidia-uvm\n"
    h = host(configs={"300": kfd}, probed={}, nodes={"/dev/kfd": node("/dev/kfd", 240, 0)}, proc_devices=proc)
    assert [i.code for i in audit.audit([h], "reboot").items] == ["LXF103"]
    assert audit.audit([h], "driver-upgrade").items == ()


def test_boot_unit_installed_removes_the_nvidia_uvm_at_boot_risk():
    configs = {"200": CONFIGS["200"]}
    without = audit.audit([host(configs=configs, probed={})], "reboot")
    assert [i.outcome for i in items(without, code="LXF112")] == ["may"]
    with_unit = audit.audit([host(configs=configs, probed={})], "reboot", boot_nodes={"pve1": True})
    assert not items(with_unit, code="LXF112")


def test_node_missing_on_the_host_now_is_will_with_nvidia_modprobe():
    nodes = {p: n for p, n in NODES.items() if "uvm" not in p}
    report = audit.audit([host(configs={"200": CONFIGS["200"]}, probed={}, nodes=nodes)], "reboot")
    got = items(report, code="LXF112")
    assert {i.outcome for i in got} == {"will"} and {i.device for i in got} == {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert got[0].change.splitlines()[0] == "nvidia-modprobe -u -c0"
    assert got[0].change.splitlines()[1].startswith("lxcfix host-fix --yes")


def test_render_gid_unknown_says_how_to_read_it():
    report = audit.audit([host(configs={"202": CONFIGS["202"]})], "reboot")
    (i,) = items(report, code="LXF201")
    assert i.change == ("# <gid of group 'render' in CT 202>: pct exec 202 -- getent group render   (the third field)\n"
                        "# or let every user in CT 202 open it: dev0: /dev/dri/renderD128,mode=0666 "
                        "(lxcfix apply --mode-0666; any process inside, not only the render group)\n"
                        "- dev0: /dev/dri/renderD128\n"
                        "+ dev0: /dev/dri/renderD128,gid=<gid of group 'render' in CT 202>")


def test_render_through_a_directory_mount_adds_a_devn_entry():
    cfg = HEAD + "unprivileged: 1\nlxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n"
    probed = {"206": [replace(PROBED["202"][0], ct="206")]}
    report = audit.audit([host(configs={"206": cfg}, probed=probed)], "reboot", ct_groups={("pve1", "206"): {"render": 993}})
    (i,) = items(report, code="LXF201")
    # card0 and card1 (video) become dev0 and dev1: every node of the directory gets its own entry
    assert i.change.splitlines()[-1] == "+ dev2: /dev/dri/renderD128,gid=993"
    assert i.change.startswith("# /dev/dri is mounted whole")
    assert not items(report, code="LXF113")  # a directory mount brings every card in, whatever its number


def test_render_gid_on_proxmox_before_8_1_maps_the_group_with_an_idmap():
    report = audit.audit([host(configs={"202": CONFIGS["202"]}, pve_version="7.4.3")], "reboot",
                         ct_groups={("pve1", "202"): {"render": 105}})
    (i,) = items(report, code="LXF201")
    assert i.change == ("# let root map the host group: echo 'root:104:1' >> /etc/subgid\n"
                        "#   (or: lxcfix apply --ct 202 --write-subgid, which writes it with a backup)\n"
                        "# or on the host: a udev rule giving the node mode 0666 (every user of every container "
                        "that gets it can open it)\n"
                        "+ lxc.idmap: u 0 100000 65536\n"
                        "+ lxc.idmap: g 0 100000 105\n"
                        "+ lxc.idmap: g 105 104 1\n"
                        "+ lxc.idmap: g 106 100106 65430")


def test_plain_lxc_changes_use_its_own_line_format():
    cfg = ("lxc.cgroup2.devices.allow = c 511:* rwm\n"
           "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,create=file 0 0\n")
    report = audit.audit([host(configs={"web": cfg}, probed={}, flavor="lxc", name="localhost")], "reboot")
    assert {i.code: i.change for i in report.items if i.kind == "config"} == {
        "LXF103": "- lxc.cgroup2.devices.allow = c 511:* rwm\n+ lxc.cgroup2.devices.allow = /dev/nvidia-uvm rwm",
        "LXF111": "- lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,create=file 0 0\n"
                  "+ lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file 0 0",
    }
    assert all(i.path == "/var/lib/lxc/web/config" for i in report.items if i.kind == "config")


def test_card_by_index_without_a_known_by_path_link_says_how_to_find_it():
    nodes = {p: n for p, n in NODES.items() if "by-path" not in p}
    cfg = HEAD + ("lxc.cgroup2.devices.allow: c 226:0 rwm\n"
                  "lxc.mount.entry: /dev/dri/card0 dev/dri/card0 none bind,optional,create=file\n")
    (i,) = audit.audit([host(configs={"207": cfg}, probed={}, nodes=nodes)], "reboot").items
    assert i.code == "LXF113" and i.outcome == "may"
    assert i.change == ("# find the GPU's entry: ls -l /dev/dri/by-path/ (the one -> ../card0)\n"
                        "- lxc.mount.entry: /dev/dri/card0 dev/dri/card0 none bind,optional,create=file\n"
                        "+ lxc.mount.entry: /dev/dri/by-path/pci-<PCI address>-card dev/dri/card0 none bind,optional,create=file\n"
                        "- lxc.cgroup2.devices.allow: c 226:0 rwm\n"
                        "+ lxc.cgroup2.devices.allow: /dev/dri/by-path/pci-<PCI address>-card rwm")


def test_render_by_index_counts_only_on_a_multi_gpu_host():
    cfg = HEAD + "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n"
    one = audit.audit([host(configs={"208": cfg}, probed={})], "reboot")
    assert not items(one, code="LXF113")
    two = dict(NODES, **{"/dev/dri/renderD129": node("/dev/dri/renderD129", 226, 129, 104, 0o660)})
    (i,) = items(audit.audit([host(configs={"208": cfg}, probed={}, nodes=two)], "reboot"), code="LXF113")
    assert "+ lxc.mount.entry: /dev/dri/by-path/pci-0000:01:00.0-render dev/dri/renderD128" in i.change


def test_overbroad_shared_major_is_narrowed_to_the_exact_minor():
    cfg = HEAD + "lxc.cgroup2.devices.allow: c 10:* rwm\n" + TUN
    (i,) = audit.audit([host(configs={"209": cfg}, probed={})], "reboot").items
    assert i.code == "LXF104" and i.change == ("- lxc.cgroup2.devices.allow: c 10:* rwm\n"
                                                "+ lxc.cgroup2.devices.allow: c 10:200 rwm")


def test_clean_fleet_and_unreachable_host():
    down = HostReport("pve2", "pve", None, (), error="ssh: connection refused")
    report = audit.audit([host(configs={"205": CONFIGS["205"]}, probed={}), down], "reboot")
    assert report.items == () and audit.summary(report)["unreachable"] == 1
    md = audit.to_markdown(report)
    assert "No container on 2 hosts is at risk (1 audited)." in md
    assert "| pve2 | pve | - | - | unreachable: ssh: connection refused | 0 | 0 |" in md
    assert "lxcfix audit --for reboot --host pve1    # nothing left at risk" in md


def test_unknown_occasion_is_bad_input():
    with pytest.raises(BadInput):
        audit.audit([], "moon-landing")


def test_markdown_cells_are_escaped():
    assert audit._cell("a|b\nc") == "a\\|b<br>c"


def test_render_gid_comes_from_the_probe_when_it_ran():
    from lxcfix.model import ProbeResult

    h = host()
    probed = tuple(replace(c, probe=ProbeResult(groups={"render": 993})) if c.ct == "202" else c
                   for c in h.containers)
    report = audit.audit([replace(h, containers=probed)], "reboot")
    (i,) = items(report, ct="202", code="LXF201")
    assert "gid=993" in i.change


def test_audit_names_the_gpu_containers_not_opted_in_to_healing():
    configs = {**CONFIGS, "206": HEAD + "tags: gpu;lxcfix-heal\ndev0: /dev/dri/renderD128\n",
               "207": HEAD + "tags: lxcfix-heal-restart\ndev0: /dev/dri/card1\n"}
    report = audit.audit([host(configs)], "reboot")
    # 200 (NVIDIA), 201 and 202 (DRM) have no tag; 203-205 pass only /dev/net/tun; 206 and 207 opted in
    assert report.hosts[0].not_healed == ("200", "201", "202")
