"""What the next upgrade breaks (audit --for kernel-upgrade | lxc-upgrade | pve-upgrade |
driver-upgrade) and names that move (LXF113, LXF155), on snapshots and built facts."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from lxcfix import audit, cli, ctconfig, gather, repair
from lxcfix.model import DeviceNode, DkmsModule, KernelTree, LoadedModule, ProbeResult
from lxcfix.rules import foresight, upgrade
from lxcfix.rules.foresight import Occasion

from .conftest import EXAMPLES, make_ctx, make_facts

SNAP = EXAMPLES / "pve-kernel-upgrade"
HEAD = "arch: amd64\nostype: debian\n"


def snapshot_audit(for_, root=SNAP, **kw):
    t = repair.open_target(str(root))
    rep = repair.scan(t, None, keep_context=True, upgrade=for_ in audit.UPGRADE_FACTS)
    return audit.audit([rep], for_, **kw)


def by(report):
    return {(i.ct, i.code): i for i in report.items}


# ---------------------------------------------------------------- kernel upgrade

def test_snapshot_facts_carry_kernels_modules_and_dkms():
    t = repair.open_target(str(SNAP))
    f = gather.host_facts(t.transport, t.backend, upgrade=True)
    assert f.kernel == "6.8.12-4-pve" and sorted(f.kernels) == ["6.8.12-4-pve", "6.8.12-9-pve"]
    assert f.kernels["6.8.12-9-pve"].complete and f.kernels["6.8.12-9-pve"].headers is True
    assert "gasket" in f.kernels["6.8.12-4-pve"].modules and "gasket" not in f.kernels["6.8.12-9-pve"].modules
    assert f.modules["gasket"].used_by == ("apex",) and f.modules["nvidia"].out_of_tree
    assert [d.module for d in f.dkms] == ["gasket", "nvidia", "nvidia"]


def test_kernel_upgrade_says_which_container_loses_which_device_and_what_to_run():
    report = snapshot_audit("kernel-upgrade")
    got = by(report)
    i = got[("301", "LXF156")]
    assert (i.outcome, i.severity, i.device, i.kind) == ("will", "error", "/dev/apex_0", "command")
    assert i.why == ("after the kernel upgrade into 6.8.12-9-pve, /dev/apex_0 is gone: apex, gasket (DKMS gasket/1.0) "
                     "are not built for 6.8.12-9-pve (now: updates/dkms/apex.ko, updates/dkms/gasket.ko in "
                     "6.8.12-4-pve); the container does not start (devN: \"Device ... does not exist\")")
    assert "dkms autoinstall -k 6.8.12-9-pve    # builds gasket/1.0 (and every DKMS module) for it" in i.change
    # NVIDIA's DKMS modules are built for the new kernel: no item for CT 300's GPU
    assert not [k for k in got if k[1] in ("LXF156", "LXF157") and k[0] != "301"]
    assert report.hosts[0].notes[0] == ("kernel: running 6.8.12-4-pve; target 6.8.12-9-pve (the newest installed "
                                        "kernel that is not the running one)")


def test_kernel_upgrade_to_a_kernel_not_installed_yet_is_may():
    got = by(snapshot_audit("kernel-upgrade", to_kernel="6.14.8-2-pve"))
    for ct in ("300", "301"):
        i = got[(ct, "LXF157")]
        assert i.outcome == "may" and "6.14.8-2-pve is not installed here yet" in i.why
        assert "apt install proxmox-default-headers" in i.change


def test_kernel_upgrade_markdown_and_json(tmp_path):
    report = snapshot_audit("kernel-upgrade")
    md = audit.to_markdown(report, host_flags={"pve-kernel-upgrade": "--root x"})
    assert md.startswith("# lxcfix audit: before the kernel upgrade\n")
    assert "- pve-kernel-upgrade: kernel: running 6.8.12-4-pve; target 6.8.12-9-pve" in md
    doc = audit.to_json(snapshot_audit("kernel-upgrade", to_kernel="6.8.12-9-pve"))
    assert doc["for"] == "kernel-upgrade" and doc["to_kernel"] == "6.8.12-9-pve"
    assert doc["hosts"][0]["kernel"] == "6.8.12-4-pve"


def test_a_tree_without_modules_dep_is_walked(tmp_path):
    root = tmp_path / "snap"
    shutil.copytree(SNAP, root)
    (root / "lib/modules/6.8.12-9-pve/modules.dep").unlink()
    dkms = root / "lib/modules/6.8.12-9-pve/updates/dkms"
    dkms.mkdir(parents=True)
    for name in ("nvidia.ko", "nvidia-uvm.ko.zst", "gasket.ko"):
        (dkms / name).write_bytes(b"")
    t = repair.open_target(str(root))
    tree = gather.host_facts(t.transport, t.backend, upgrade=True).kernels["6.8.12-9-pve"]
    assert not tree.complete and set(tree.modules) == {"nvidia", "nvidia_uvm", "gasket"}
    got = by(snapshot_audit("kernel-upgrade", root=root))
    assert "apex (DKMS gasket/1.0) is not built for 6.8.12-9-pve" in got[("301", "LXF156")].why


def kernel_facts(**kw):
    base = dict(kernel="6.8.12-4-pve", modules_known=True,
                kernels={"6.8.12-4-pve": KernelTree("6.8.12-4-pve", {"nvidia": "kernel/drivers/video/nvidia.ko"}, True,
                                                    True),
                         "6.8.12-9-pve": KernelTree("6.8.12-9-pve", {}, True, False)},
                modules={"nvidia": LoadedModule("nvidia", True, ())})
    base.update(kw)
    facts = make_facts(nodes={"/dev/nvidia0": DeviceNode("/dev/nvidia0", "c", 195, 0, 0o20666),
                              "/dev/dri/card1": DeviceNode("/dev/dri/card1", "c", 226, 1, 0o20660)})
    return replace(facts, nvidia_driver="550.144.03", **base)


def test_nvidia_from_the_run_installer_must_be_rebuilt_by_it():
    ctx = make_ctx(HEAD + "dev0: /dev/nvidia0\n", facts=kernel_facts())
    (f,) = upgrade.kernel_modules(ctx, Occasion("kernel-upgrade"))
    assert f.code == "LXF156" and "nvidia (NVIDIA's installer) is not built for 6.8.12-9-pve" in f.message
    assert f.fix.commands == (
        "apt install proxmox-headers-6.8.12-9-pve    # the module is built against them",
        "sh NVIDIA-Linux-x86_64-550.144.03.run --kernel-name=6.8.12-9-pve --kernel-module-only --silent    "
        "# NVIDIA's installer, not DKMS: it builds for one kernel only",)


def test_missing_headers_come_first_and_a_dri_card_of_an_nvidia_gpu_needs_nvidia_drm():
    facts = kernel_facts(dkms=(DkmsModule("nvidia", "550.144.03", "6.8.12-4-pve", "x86_64", "installed"),),
                         device_drivers={"c 226:1": "nvidia"},
                         modules={"nvidia": LoadedModule("nvidia", True, ("nvidia_drm",)),
                                  "nvidia_drm": LoadedModule("nvidia_drm", True, ())})
    ctx = make_ctx(HEAD + "dev0: /dev/dri/card1\n", facts=facts)
    (f,) = upgrade.kernel_modules(ctx, Occasion("kernel-upgrade"))
    assert "nvidia_drm, nvidia" in f.message and f.device == "/dev/dri/card1"
    assert f.fix.commands[0] == "apt install proxmox-headers-6.8.12-9-pve    # the module is built against them"


def test_in_tree_drivers_need_nothing_and_the_default_target():
    facts = kernel_facts(device_drivers={"c 226:1": "i915"}, modules={"i915": LoadedModule("i915")})
    assert upgrade.kernel_modules(make_ctx(HEAD + "dev0: /dev/dri/card1\n", facts=facts), Occasion("kernel-upgrade")) == []
    assert upgrade.kernel_target(facts, None) == ("6.8.12-9-pve", "the newest installed kernel that is not the running one")
    assert upgrade.kernel_target(replace(facts, kernels={}), None)[0] is None
    assert sorted(["6.11.0-1-pve", "6.8.14-1-pve", "6.8.12-4-pve"], key=upgrade.kernel_key) == \
        ["6.8.12-4-pve", "6.8.14-1-pve", "6.11.0-1-pve"]


# ---------------------------------------------------------------- LXC 7, Proxmox VE 9

def test_lxc_upgrade_lists_every_v1_key_with_its_migration():
    text = (HEAD + "lxc.cgroup.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.allow: c 10:200 rwm\n"
            "lxc.cgroup.devices.allow: c 188:* rwm\nlxc.cgroup.cpuset.cpus: 0-3\nlxc.cgroup.cpu.shares: 512\n"
            "lxc.cgroup.dir: custom\n")
    ctx = make_ctx(text)
    got = upgrade.v1_keys(ctx, Occasion("lxc-upgrade"))
    assert [f.line for f in got] == [3, 5, 6, 7]  # lxc.cgroup.dir stays in LXC 7
    assert all(foresight.outcome(f, Occasion("lxc-upgrade")) == "will" for f in got)
    assert foresight.outcome(got[0], Occasion("pve-upgrade")) == "may"
    changes = [[l for e in f.fix.edits for l in ctconfig.describe_edit(ctx.config, e)] for f in got]
    assert changes == [["- lxc.cgroup.devices.allow: c 10:200 rwm"],  # its v2 twin is there
                       ["- lxc.cgroup.devices.allow: c 188:* rwm", "+ lxc.cgroup2.devices.allow: c 188:* rwm"],
                       ["- lxc.cgroup.cpuset.cpus: 0-3", "+ lxc.cgroup2.cpuset.cpus: 0-3"],
                       ["- lxc.cgroup.cpu.shares: 512"]]
    assert "Unsupported config key" in got[0].message


def test_lxc_upgrade_of_the_snapshot():
    got = by(snapshot_audit("lxc-upgrade"))
    assert got[("303", "LXF150")].outcome == "will"
    assert ("303", "LXF102") not in got  # LXF150 says it, for this upgrade
    assert not [k for k in got if k[1] in ("LXF112", "LXF155", "LXF103")]  # an LXC upgrade renumbers nothing


def test_pve_upgrade_on_a_hybrid_host_judges_the_container_as_cgroup_v2_will():
    text = HEAD + "lxc.cgroup.devices.allow: c 10:200 rwm\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"
    ctx = make_ctx(text, facts=make_facts(layout="hybrid"))
    got = upgrade.cgroup_v2_view(ctx, Occasion("pve-upgrade"))
    assert sorted(f.code for f in got) == ["LXF151", "LXF151"]
    assert all("after the upgrade to Proxmox VE 9 (cgroup v2 only; this host runs hybrid now)" in f.message for f in got)
    assert {f.message.rsplit("(", 1)[1] for f in got} == {"LXF100 then)", "LXF102 then)"}
    assert upgrade.cgroup_v2_view(make_ctx(text), Occasion("pve-upgrade")) == []


def test_pve_upgrade_of_the_snapshot():
    report = snapshot_audit("pve-upgrade")
    got = by(report)
    assert got[("303", "LXF150")].outcome == "may" and got[("301", "LXF156")].outcome == "will"
    assert "pve8to9 checks no device lines" in report.hosts[0].notes[1]
    assert audit.to_markdown(report).startswith("# lxcfix audit: before the Proxmox VE upgrade from 8 to 9\n")


# ---------------------------------------------------------------- names that move

SERIAL = {
    "/dev/ttyUSB0": DeviceNode("/dev/ttyUSB0", "c", 188, 0, 0o20660, 0, 20),
    "/dev/ttyUSB1": DeviceNode("/dev/ttyUSB1", "c", 188, 1, 0o20660, 0, 20),
    "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1ABC-if00-port0": DeviceNode(
        "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1ABC-if00-port0", "c", 188, 0, 0o20660, 0, 20),
    "/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0-port0": DeviceNode(
        "/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0-port0", "c", 188, 0, 0o20660, 0, 20),
}
BY_ID = "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1ABC-if00-port0"


def change(ctx, f):
    return [*f.fix.notes, *(l for e in f.fix.edits for l in ctconfig.describe_edit(ctx.config, e))]


def test_usb_serial_by_index_gets_its_by_id_name_and_keeps_its_name_inside():
    text = (HEAD + "lxc.cgroup2.devices.allow: c 188:0 rwm\n"
            "lxc.mount.entry: /dev/ttyUSB0 dev/ttyUSB0 none bind,optional,create=file\n")
    ctx = make_ctx(text, facts=make_facts(nodes=SERIAL))
    (f,) = foresight.serial_names(ctx, Occasion("reboot"))
    assert (f.code, f.severity, f.device) == ("LXF155", "warning", "/dev/ttyUSB0")
    assert change(ctx, f) == [
        f"# now: {BY_ID} is c 188:0, /dev/ttyUSB0 on this host",
        "# now: /dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0-port0 is c 188:0, /dev/ttyUSB0 on this host",
        f"- lxc.mount.entry: /dev/ttyUSB0 dev/ttyUSB0 none bind,optional,create=file",
        f"+ lxc.mount.entry: {BY_ID} dev/ttyUSB0 none bind,optional,create=file",
        "- lxc.cgroup2.devices.allow: c 188:0 rwm",
        f"+ lxc.cgroup2.devices.allow: {BY_ID} rwm"]
    after = ctx.with_config(ctconfig.apply_edits(ctx.config, f.fix.edits))
    (g,) = after.effective.given
    assert (g.path, g.target) == (BY_ID, "dev/ttyUSB0") and after.effective.ruleset.allows("c", 188, 0)
    assert not after.effective.ruleset.allows("c", 188, 1)


def test_usb_serial_by_devn_and_only_on_occasions_that_renumber():
    ctx = make_ctx(HEAD + "dev0: /dev/ttyACM0\n", facts=make_facts(nodes={
        "/dev/ttyACM0": DeviceNode("/dev/ttyACM0", "c", 166, 0, 0o20660)}))
    (f,) = foresight.serial_names(ctx, Occasion("reboot"))
    assert "(devN: the container does not start)" in f.message
    assert change(ctx, f)[0] == "# find the adapter's name: ls -l /dev/serial/by-id/ (the one -> ../../ttyACM0)"
    assert not [x for x in foresight.check(ctx, Occasion("driver-upgrade")) if x.code == "LXF155"]


# ---------------------------------------------------------------- driver upgrade, per container

NVIDIA = {p: DeviceNode(p, "c", 195, m, 0o20666) for p, m in (("/dev/nvidia0", 0), ("/dev/nvidiactl", 255))}


def userspace(text, probe=None, new="590.44.01"):
    ctx = make_ctx(HEAD + text, facts=replace(make_facts(nodes=NVIDIA), nvidia_driver="580.159.04"))
    if probe is not None:
        ctx = replace(ctx, probe=probe)
    return foresight.userspace_after_upgrade(ctx, Occasion("driver-upgrade", new_driver=new), ())


def test_driver_upgrade_predicts_each_containers_userspace():
    gpu = "dev0: /dev/nvidia0\ndev1: /dev/nvidiactl\n"
    (f,) = userspace(gpu, ProbeResult(driver_version="580.159.04"))
    assert "its userspace is 580.159.04 (the probe read it; it matches the host's 580.159.04 now)" in f.message
    assert "after the upgrade (580.159.04 -> 590.44.01)" in f.message
    assert userspace(gpu, ProbeResult(driver_version="590.44.01")) == []  # installed ahead of the upgrade
    (g,) = userspace(gpu + "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n")
    assert "takes the host's NVIDIA userspace at every start" in g.message and g.fix.commands == ("pct reboot 200",)


# ---------------------------------------------------------------- the command line

def test_cli_audit_for_the_new_occasions(capsys):
    assert cli.run(["audit", "--root", str(SNAP), "--for", "kernel-upgrade", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {"LXF156"} <= {f["code"] for c in doc["containers"] for f in c["findings"]}
    assert cli.run(["audit", "--root", str(SNAP), "--for", "lxc-upgrade", "--json"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("args", [["--for", "moon"], ["--for", "reboot", "--to-kernel", "6.8.12-9-pve"],
                                  ["--for", "kernel-upgrade", "--to-kernel", "6.8; rm -rf /"]])
def test_cli_audit_refuses_bad_occasions_and_kernels(args, capsys):
    assert cli.run(["audit", "--root", str(SNAP), *args]) == 2
    capsys.readouterr()


def test_device_drivers_come_from_sysfs_uevents(tmp_path):
    from lxcfix.transport import RootDir

    for dev, text in (("226:1", "DRIVER=nvidia\nPCI_SLOT_NAME=0000:01:00.0\n"), ("188:0", "DRIVER=ftdi_sio\n")):
        d = tmp_path / "sys/dev/char" / dev / "device"
        d.mkdir(parents=True)
        (d / "uevent").write_text(text)
    nodes = {"/dev/dri/card1": DeviceNode("/dev/dri/card1", "c", 226, 1),
             "/dev/dri/by-path/pci-0000:01:00.0-card": DeviceNode("/dev/dri/by-path/pci-0000:01:00.0-card", "c", 226, 1),
             "/dev/ttyUSB0": DeviceNode("/dev/ttyUSB0", "c", 188, 0),
             "/dev/net/tun": DeviceNode("/dev/net/tun", "c", 10, 200)}
    assert gather.device_drivers(RootDir(str(tmp_path)), nodes) == {"c 226:1": "nvidia", "c 188:0": "ftdi_sio"}
