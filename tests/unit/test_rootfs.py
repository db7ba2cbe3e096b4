"""Static checks from the container's own rootfs (lxcfix.rootfs, rules.rootfs, observe.read_rootfs):
the NVIDIA Container Toolkit's config.toml, the CDI spec against the host driver, Docker's
daemon.json, the features a container engine needs, the render gid of a stopped container, and
a reader that follows no symlink out of the root. Fixtures: tests/unit/fixtures/nested/README.md."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import audit, ctconfig, observe, rootfs as rf
from lxcfix.model import DeviceNode, HostReport, CtReport
from lxcfix.plan import make_plan_in
from lxcfix.rules import rootfs as rule
from lxcfix.transport import Local

from .conftest import codes, make_ctx, make_facts

FIX = Path(__file__).resolve().parent / "fixtures" / "nested"
TOOLKIT = (FIX / "config.toml").read_bytes()
CDI = (FIX / "nvidia.yaml").read_bytes()
DAEMON = (FIX / "daemon.json").read_bytes()
DOCKER = frozenset({"/usr/bin/dockerd"})


def seen(files=None, present=frozenset(), state="read", why=""):
    return rf.Rootfs(state, "/proc/1/root", files or {}, {}, frozenset(present), why)


def ctx_with(text="arch: amd64\n", flavor="pve", driver=None, **kw):
    facts = make_facts(backend=flavor)
    if driver:
        facts = replace(facts, nvidia_driver=driver)
    return replace(make_ctx(text, flavor=flavor, facts=facts), rootfs=seen(**kw))


# --- parsers -----------------------------------------------------------------------------------

def test_the_toolkits_default_config_toml_is_read_whole():
    toml = rf.toolkit_config(TOOLKIT)
    assert toml.bad == ()
    assert ("nvidia-container-cli", "no-cgroups") not in toml.values  # commented out: the default, false
    assert toml.values[("nvidia-container-cli", "load-kmods")] is True
    assert toml.values[("nvidia-container-runtime", "mode")] == "auto"
    assert toml.values[("nvidia-container-runtime.modes.cdi", "spec-dirs")] == '["/etc/cdi", "/var/run/cdi"]'


@pytest.mark.parametrize("data", [b"\xff\xfe[x\n", b"no-cgroups\n", b"[a\n" * 10000, b"k = \"unterminated\n",
                                  b"=" * 300000, b"\x00" * 100])
def test_a_broken_config_toml_gives_bad_lines_never_an_exception(data):
    toml = rf.toolkit_config(data)
    assert len(toml.bad) <= 8


def test_the_cdi_specs_driver_version_is_its_library_names():
    assert rf.cdi_versions(CDI) == {"580.159.04"}
    assert rf.cdi_versions(b"libcuda.so.1 libcuda.so") == set()


def test_daemon_json_runtimes_and_broken_ones():
    d = rf.daemon_runtimes(DAEMON)
    assert (d.runtimes, d.default, d.error) == ({"nvidia": "nvidia-container-runtime"}, "nvidia", None)
    assert rf.daemon_runtimes(b"{").error.startswith("not JSON")
    assert rf.daemon_runtimes(b"[]").error == "not a JSON object"
    assert rf.daemon_runtimes(b'{"runtimes": {"x": {}}}').error
    assert rf.daemon_runtimes(b"[" * 100000).error  # nested too deep: an answer, not a RecursionError
    assert rf.runtime_paths("nvidia-container-runtime")[0] == "/usr/local/sbin/nvidia-container-runtime"
    assert rf.runtime_paths("../x") == ()


def test_group_file_and_features():
    assert rf.groups(b"root:x:0:\nrender:x:993:\nvideo:x:44:jellyfin\nbad line\nrender:x:1:\n") == \
        {"root": 0, "render": 993, "video": 44}
    assert rf.features("nesting=1, keyctl=0") == {"nesting": "1", "keyctl": "0"}
    assert rf.features_value({"keyctl": "0", "fuse": "1"}, {"keyctl": "1", "nesting": "1"}) == "keyctl=1,fuse=1,nesting=1"


# --- the rule ----------------------------------------------------------------------------------

def test_toolkit_without_no_cgroups_gets_the_exact_lines():
    (f,) = rule.check(ctx_with(files={rf.TOOLKIT: TOOLKIT}))
    assert f.code == "LXF230" and f.fix.notes == ("[nvidia-container-cli]", "no-cgroups = true")
    assert f.fix.applicability == "manual"
    fixed = TOOLKIT.replace(b"#no-cgroups = false", b"no-cgroups = true")
    assert rule.check(ctx_with(files={rf.TOOLKIT: fixed})) == []


def test_cdi_mode_without_a_spec():
    cdi = TOOLKIT.replace(b'mode = "auto"', b'mode = "cdi"').replace(b"#no-cgroups = false", b"no-cgroups = true")
    (f,) = rule.check(ctx_with(files={rf.TOOLKIT: cdi}))
    assert f.code == "LXF231" and f.fix.commands == ("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",)
    assert rule.check(ctx_with(files={rf.TOOLKIT: cdi, "/etc/cdi/nvidia.yaml": CDI})) == []


def test_a_stale_cdi_spec_is_an_error_and_a_current_one_is_what_a_driver_upgrade_breaks():
    (stale,) = rule.check(ctx_with(files={"/etc/cdi/nvidia.yaml": CDI}, driver="580.95.05"))
    assert (stale.code, stale.severity) == ("LXF232", "error") and "580.159.04" in stale.message
    ctx = ctx_with(files={"/etc/cdi/nvidia.yaml": CDI}, driver="580.159.04")
    (now,) = rule.check(ctx)
    assert (now.code, now.severity) == ("LXF232", "info")
    report = HostReport("h", "pve", ctx.facts, (CtReport("h", "200", "/etc/pve/lxc/200.conf", (now,), context=ctx),))
    (item,) = [i for i in audit.audit([report], "driver-upgrade").items if i.code == "LXF232"]
    assert item.outcome == "will" and "regenerate" in item.why
    assert not [i for i in audit.audit([report], "reboot").items if i.code == "LXF232"]
    assert rule.check(ctx_with(files={"/etc/cdi/nvidia.yaml": CDI})) == []  # no host driver: nothing to compare


def test_daemon_json_naming_a_runtime_that_is_not_installed():
    found = rule.check(ctx_with(files={rf.DAEMON: DAEMON}))
    assert codes(found) == ["LXF233"] and "nvidia-container-runtime" in found[0].message
    assert rule.check(ctx_with(files={rf.DAEMON: DAEMON}, present={"/usr/bin/nvidia-container-runtime"})) == []
    (bad,) = rule.check(ctx_with(files={rf.DAEMON: b'{"runtimes": 1}'}))
    assert bad.code == "LXF233" and "refuses to start" in bad.message


def test_docker_without_nesting_gets_the_features_line_and_the_plan_makes_it():
    ctx = ctx_with("arch: amd64\nhostname: web\nunprivileged: 1\n", present=DOCKER)
    (f,) = rule.check(ctx)
    assert f.code == "LXF234" and f.fix.applicability == "needs-restart" and "root@pam" in f.fix.notes[0]
    plan, planned = make_plan_in(ctx, "auto")
    assert b"features: nesting=1,keyctl=1\n" in plan.after
    assert rule.check(planned) == []  # the plan's own re-check settles it

    kept = ctx_with("arch: amd64\nfeatures: fuse=1\n", present=DOCKER)
    plan, _ = make_plan_in(kept, "auto")
    assert b"features: fuse=1,nesting=1\n" in plan.after and b"features: fuse=1\n" not in plan.after
    assert rule.check(ctx_with("arch: amd64\nfeatures: nesting=1\n", present=DOCKER)) == []
    assert rule.check(ctx_with("lxc.arch = amd64\n", flavor="lxc", present=DOCKER)) == []  # Proxmox's key only
    assert rf.ENGINES and not any(p.endswith(("/runc", "/crun")) for p in rf.ENGINES)  # a bare OCI runtime is a tool


def test_a_stopped_containers_render_gid_from_its_own_group_file():
    facts = replace(make_facts(nodes={"/dev/dri/renderD128": DeviceNode("/dev/dri/renderD128", "c", 226, 128,
                                                                         0o20660, 0, 104)}))
    ctx = make_ctx("arch: amd64\ndev0: /dev/dri/renderD128\n", facts=facts)
    ctx = replace(ctx, rootfs=seen({rf.GROUP: b"root:x:0:\nrender:x:993:\nvideo:x:44:\n"}))
    found = [f for f in rule.check(ctx) if f.code == "LXF235"]
    assert len(found) == 1 and "gid 993" in found[0].message and "gid=993" in found[0].fix.title
    from lxcfix.rules.access import container_gid

    assert container_gid(ctx, "render") == (993, "the container's /etc/group, read from its rootfs")


def test_a_rootfs_not_read_is_said_not_guessed():
    (f,) = rule.check(ctx_with(state="not-mounted", why="CT 200 is stopped and its rootfs is not mounted"))
    assert (f.code, f.severity) == ("LXF236", "info") and "not mounted" in f.message
    assert rule.check(replace(ctx_with(), rootfs=None)) == []


# --- the reader --------------------------------------------------------------------------------

class _Backend:
    name = "lxc"

    def init_pid(self, t, ct):
        return None


def test_the_reader_resolves_every_symlink_inside_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "docker").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc" / "group").write_text("render:x:993:\n")
    outside = tmp_path / "secret"
    outside.write_text("host secret\n")
    # absolute, relative and dot-dot links that point outside: each ends inside the root
    os.symlink(str(outside), root / "etc" / "docker" / "daemon.json")
    (root / "etc" / "nvidia-container-runtime").mkdir()
    os.symlink("../../../secret", root / "etc" / "nvidia-container-runtime" / "config.toml")
    (root / "etc" / "cdi").mkdir()
    os.symlink("/etc/group", root / "etc" / "cdi" / "nvidia.yaml")  # inside: the container's own file
    (root / "usr" / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/dockerd", root / "usr" / "bin" / "podman")  # dangling inside the root
    os.mkfifo(root / "etc" / "cdi" / "nvidia.json")  # never opened for reading (it would block)
    config = ctconfig.parse(f"lxc.rootfs.path = dir:{root}\n".encode(), "lxc", "/var/lib/lxc/web/config")
    got = observe.read_rootfs(Local(), _Backend(), "web", config, running=False)
    assert got.state == "read"
    assert rf.DAEMON not in got.files and rf.TOOLKIT not in got.files  # the host's file never read
    assert got.files["/etc/cdi/nvidia.yaml"] == b"render:x:993:\n"
    assert got.files[rf.GROUP] == b"render:x:993:\n"
    assert got.errors == {"/etc/cdi/nvidia.json": "not-file"}
    assert "/usr/bin/podman" not in got.present


def test_the_reader_caps_what_it_reads_and_says_when_nothing_is_mounted(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc" / "group").write_bytes(b"x" * (rf.FILE_MAX + 10))
    config = ctconfig.parse(f"lxc.rootfs.path = {root}\n".encode(), "lxc", "/var/lib/lxc/web/config")
    got = observe.read_rootfs(Local(), _Backend(), "web", config, running=False)
    assert rf.GROUP not in got.files and "over" in got.errors[rf.GROUP]
    (root / "etc" / "passwd").unlink()
    assert observe.read_rootfs(Local(), _Backend(), "web", config, running=False).state == "not-mounted"
    lvm = ctconfig.parse(b"lxc.rootfs.path = lvm:/dev/vg/web\n", "lxc", "/var/lib/lxc/web/config")
    assert observe.read_rootfs(Local(), _Backend(), "web", lvm, running=False).state == "not-mounted"


# --- runc in the container against the host's lxc-pve (LXF237) --------------------------------

import json  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

DPKG_DEBIAN12 = (FIX / "dpkg-status.debian12").read_bytes()
DPKG_DOCKER_CE = (FIX / "dpkg-status.docker-ce").read_bytes()
APK = (FIX / "apk-installed.alpine").read_bytes()
OLD_LXC = "6.0.4-2"  # Proxmox VE 9.0's lxc-pve: before the AppArmor change runc's fix needs


def runc_ctx(packages, lxc_pve=OLD_LXC, text="arch: amd64\nfeatures: nesting=1\n", backend="pve"):
    facts = replace(make_facts(backend=backend), lxc_pve=lxc_pve)
    ctx = make_ctx(text, flavor=backend, facts=facts)
    return replace(ctx, rootfs=rf.Rootfs("read", "/proc/1/root", packages=packages))


def test_the_package_databases_give_the_runc_packages_installed():
    assert rf.dpkg_installed(DPKG_DEBIAN12) == {"runc": "1.1.5+ds1-1+deb12u1"}  # containerd.io: removed
    assert rf.dpkg_installed(DPKG_DOCKER_CE) == {"containerd.io": "1.7.28-2~debian.13~trixie"}
    assert rf.apk_installed(APK) == {"runc": "1.3.3-r0"}
    assert rf.installed({rf.DPKG_STATUS: DPKG_DOCKER_CE, rf.APK_INSTALLED: APK}) == \
        {"runc": "1.3.3-r0", "containerd.io": "1.7.28-2~debian.13~trixie"}
    hostile = (b"Package: runc\nStatus: install ok installed\nVersion: 1.3.3; rm -rf /\n\n"
               b"Package: runc\nStatus: install ok\nVersion: 1.3.3\n\n\xff\xfe\x00Package: runc\n")
    assert rf.dpkg_installed(hostile) == {}


@pytest.mark.parametrize("data", [b"", b"\n" * 100000, b"Package:" * 50000, b"\xff" * 300000,
                                  b"P:runc\nV:\n", b"P:runc\nV:1.3.3 ;x\n"])
def test_a_broken_package_database_gives_nothing_never_an_exception(data):
    assert rf.dpkg_installed(data) == {} and rf.apk_installed(data) == {}


def test_dpkg_compare_agrees_with_dpkg_on_every_measured_pair():
    pairs = json.loads((FIX / "dpkg-compare.json").read_text())["pairs"]
    assert len(pairs) == 351
    for a, b, want in pairs:
        assert (rf.dpkg_compare(a, b), rf.dpkg_compare(b, a)) == (want, -want), (a, b)


_VERSION_TEXT = st.text(alphabet="0123456789.+~-:abcZ", max_size=24)


@settings(max_examples=300, deadline=None)
@given(_VERSION_TEXT, _VERSION_TEXT)
def test_dpkg_compare_is_total_and_antisymmetric(a, b):
    assert rf.dpkg_compare(a, b) == -rf.dpkg_compare(b, a)
    assert rf.dpkg_compare(a, a) == 0


@pytest.mark.parametrize("package, version, fixed", [
    ("runc", "1.1.5+ds1-1+deb12u1", False), ("runc", "1.1.12-0ubuntu3", False), ("runc", "1.2.7-1", False),
    ("runc", "1.2.8-1", True), ("runc", "1.3.2", False), ("runc", "1.3.3-0ubuntu1~22.04.2", True),
    ("runc", "1.4.0~rc.2-1", False), ("runc", "1.4.0~rc.3-1", True), ("runc", "1.4.0_rc3-r0", True),
    ("runc", "1.4.0-1", True), ("runc", "1.5.0-1", True), ("runc", "1:1.3.3-1", True), ("runc", "garbage", None),
    ("containerd.io", "1.7.28-1~debian.13~trixie", False), ("containerd.io", "1.7.28-2~debian.13~trixie", True),
    ("containerd.io", "1.7.29-1~ubuntu.24.04~noble", True), ("containerd.io", "1.6.33-1", False),
    ("containerd.io", "2.1.5-1~debian.13~trixie", None),
])
def test_which_runc_releases_carry_the_fix(package, version, fixed):
    assert rf.runc_has_52881_fix(package, version) is fixed


def test_a_fixed_runc_under_an_old_lxc_pve_is_an_error_with_the_hosts_upgrade_as_the_fix():
    (f,) = rule.check(runc_ctx({"runc": "1.3.3-0ubuntu1~24.04.3"}))
    assert (f.code, f.severity) == ("LXF237", "error") and "reopen fd 8" in f.message
    assert f.fix.applicability == "manual" and not f.fix.edits
    assert f.fix.commands == ("apt-get update", "apt-get install --only-upgrade lxc-pve", "pct reboot 200")
    assert any("apt-mark hold" in n for n in f.fix.notes)  # the second choice
    said = " ".join((f.fix.title, *f.fix.commands))
    assert "unconfined" not in said  # never the fix; only named in a note as what not to do
    assert any(n.startswith("not lxc.apparmor.profile: unconfined") for n in f.fix.notes)


def test_no_finding_where_runc_and_lxc_pve_agree():
    assert rule.check(runc_ctx({"runc": "1.3.3-0ubuntu1~24.04.3"}, lxc_pve="6.0.5-2")) == []
    assert rule.check(runc_ctx({"runc": "1.3.3-1"}, lxc_pve="6.0.5-3+pmx1")) == []
    assert rule.check(runc_ctx({"runc": "1.1.5+ds1-1+deb12u1"})) == []  # from before the fix: works
    assert rule.check(runc_ctx({})) == []
    assert rule.check(runc_ctx({"runc": "1.3.3-1"}, lxc_pve=None)) == []  # lxc-pve unknown: nothing said
    assert rule.check(runc_ctx({"runc": "1.3.3-1"}, text="lxc.arch = amd64\n", backend="lxc")) == []


def test_docker_ces_containerd_io_1_7_28_2_is_the_reported_case():
    pkgs = rf.dpkg_installed(DPKG_DOCKER_CE)
    (f,) = rule.check(runc_ctx(pkgs))
    assert f.severity == "error" and "containerd.io 1.7.28-2~debian.13~trixie" in f.message
    assert rule.check(runc_ctx({"containerd.io": "1.7.28-1~debian.13~trixie"})) == []


def test_a_runc_that_cannot_be_dated_is_info():
    (f,) = rule.check(runc_ctx({"containerd.io": "2.1.5-1~debian.13~trixie"}))
    assert (f.code, f.severity) == ("LXF237", "info") and "not known" in f.message


def test_the_unconfined_workaround_is_a_warning_about_lost_confinement():
    (f,) = rule.check(runc_ctx({"runc": "1.3.3-1"}, text="arch: amd64\nlxc.apparmor.profile: unconfined\n"))
    assert (f.code, f.severity) == ("LXF237", "warning") and "confinement is gone" in f.message
    assert "remove lxc.apparmor.profile: unconfined" in f.fix.title


def test_the_package_database_is_read_with_its_own_cap_and_never_kept_whole(tmp_path):
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    filler = b"".join(b"Package: pkg%d\nStatus: install ok installed\nVersion: 1.0-%d\n\n" % (i, i)
                      for i in range(8000))  # ~ 450 KiB: more than FILE_MAX, as a real one is
    assert len(filler) > rf.FILE_MAX
    (root / "var" / "lib" / "dpkg" / "status").write_bytes(filler + DPKG_DOCKER_CE)
    config = ctconfig.parse(f"lxc.rootfs.path = dir:{root}\n".encode(), "lxc", "/var/lib/lxc/web/config")
    got = observe.read_rootfs(Local(), _Backend(), "web", config, running=False)
    assert got.packages == {"containerd.io": "1.7.28-2~debian.13~trixie"}
    assert rf.DPKG_STATUS not in got.files and got.errors == {}
    # a link out of the root is resolved inside it: the host's own database is never read
    (root / "var" / "lib" / "dpkg" / "status").unlink()
    os.symlink("/var/lib/dpkg/status", root / "var" / "lib" / "dpkg" / "status")
    got = observe.read_rootfs(Local(), _Backend(), "web", config, running=False)
    assert got.packages == {}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2048), st.text(max_size=40))
def test_the_package_parsers_are_total(data, version):
    for got in (rf.dpkg_installed(data), rf.apk_installed(data)):
        assert set(got) <= set(rf.RUNC_PACKAGES) and all(v.isprintable() for v in got.values())
    for package in rf.RUNC_PACKAGES:
        assert rf.runc_has_52881_fix(package, version) in (True, False, None)


# --- a host snapshot (`--root DIR`): the container's rootfs lies under DIR ---------------------

def snapshot_with_rootfs(tmp_path, lxc_pve=OLD_LXC, link_out=False):
    top = tmp_path / "snap"
    (top / "etc" / "pve" / "lxc").mkdir(parents=True)
    (top / "etc" / "pve" / "lxc" / "200.conf").write_text("arch: amd64\nhostname: docker\nunprivileged: 1\n"
                                                          "rootfs: local:200/vm-200-disk-0.raw,size=8G\n")
    (top / "proc" / "self").mkdir(parents=True)
    (top / "proc" / "devices").write_text("Character devices:\n  1 mem\n 10 misc\n\nBlock devices:\n  8 sd\n")
    (top / "proc" / "self" / "mountinfo").write_text(
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw\n")
    (top / ".lxcfix").mkdir()
    (top / ".lxcfix" / "pveversion").write_text(f"pve-manager: 9.0.3 (running version: 9.0.3/0258642)\n"
                                                f"lxc-pve: {lxc_pve}\npve-container: 6.0.9\n")
    root = top / "var" / "lib" / "lxc" / "200" / "rootfs"  # a mounted Proxmox container (pct mount)
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "dockerd").write_bytes(b"\x7fELF")
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_bytes(DPKG_DOCKER_CE)
    if link_out:  # the container's rootfs is a link out of the snapshot: not followed
        outside = tmp_path / "elsewhere"
        root.rename(outside)
        os.symlink(str(outside), root)
    return top


def test_a_snapshots_container_files_are_checked_where_the_snapshot_holds_them(tmp_path):
    from lxcfix import repair

    report = repair.scan(repair.open_target(str(snapshot_with_rootfs(tmp_path))), None, keep_context=True)
    (c,) = report.containers
    assert report.facts.lxc_pve == OLD_LXC
    found = {f.code: f for f in c.findings}
    assert found["LXF237"].severity == "error" and "containerd.io 1.7.28-2" in found["LXF237"].message
    assert "LXF234" in found  # dockerd without nesting=1,keyctl=1: the same checks as on a live host


def test_a_snapshot_without_the_containers_files_says_nothing_about_them(tmp_path):
    from lxcfix import repair

    top = snapshot_with_rootfs(tmp_path, link_out=True)
    (c,) = repair.scan(repair.open_target(str(top)), None, keep_context=True).containers
    assert not {"LXF234", "LXF236", "LXF237"} & {f.code for f in c.findings}
    import shutil

    shutil.rmtree(top / "var")
    (c,) = repair.scan(repair.open_target(str(top)), None, keep_context=True).containers
    assert not {"LXF234", "LXF236", "LXF237"} & {f.code for f in c.findings}


# --- a 16 MiB dpkg status of short lines (issue 30 item 4) ------------------------------------

import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

# The reader and the parse of what it printed, in a child under RLIMIT_AS (as read_rootfs runs the
# reader in this process, the parse after it); prints the packages and the child's peak RSS (KiB).
_READ_AND_PARSE = r'''
import json, sys
from lxcfix import rootfs


def hwm_kib():
    # VmHWM is this process image's own peak; ru_maxrss is not: Linux keeps it across execve, so
    # it would count the pytest process this child was forked from (preexec_fn forks).
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

reader = {"__name__": "lxcfix_rootfs_reader"}
exec(compile(rootfs.READER, "<reader>", "exec"), reader)
root = sys.argv[1]
files, caps = [rootfs.DPKG_STATUS], {rootfs.DPKG_STATUS: rootfs.PKG_MAX}
text = "\n".join(reader["report"](root, rootfs.FILE_MAX, files, [], caps))
seen = rootfs.parse_reader(root, text, files, [], caps)
print(json.dumps({"state": seen.state, "errors": seen.errors, "packages": seen.packages,
                  "out": len(text), "maxrss_kib": hwm_kib()}))
'''
READ_BOUND = 192 * 1024 * 1024  # the child's address space: interpreter and lxcfix's imports take ~60 MiB


def _short_lines_status(root: Path, size: int) -> None:
    """A dpkg status of `size` bytes, nearly all of it two-byte lines (a continuation line each, as
    a hostile or broken Description would be), runc's record at its end."""
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    tail = b"\nPackage: runc\nStatus: install ok installed\nVersion: 1.1.5+ds1-1+deb12u1\n"
    head = b"Package: filler\nStatus: install ok installed\nVersion: 1\nDescription: x\n"
    body = b" .\n" * ((size - len(head) - len(tail)) // 3)
    status.write_bytes(head + body + tail)


def _read_and_parse(root: Path) -> dict:
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (READ_BOUND, READ_BOUND))  # noqa: E731
    r = subprocess.run([sys.executable, "-c", _READ_AND_PARSE, str(root)], capture_output=True, text=True,
                       timeout=120, preexec_fn=limit, cwd=str(Path(rf.__file__).parents[1]))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_a_16_mib_dpkg_status_of_short_lines_is_read_streaming_within_a_bound(tmp_path):
    """Before: the reader kept the whole file, base64'd it into its JSON line, and the parse split the
    decoded text into 5.6 million line strings (532 MiB peak here, and runc's record, past 4 million
    lines, was lost). Now the reader keeps
    only the records of the runc packages as it reads, within PKG_MAX, and prints those."""
    _short_lines_status(tmp_path, rf.PKG_MAX - 4096)
    got = _read_and_parse(tmp_path)
    assert got["state"] == "read" and got["errors"] == {}
    assert got["packages"] == {"runc": "1.1.5+ds1-1+deb12u1"}
    assert got["out"] < 4096  # the runc record, not 16 MiB of base64
    assert got["maxrss_kib"] < 96 * 1024  # measured: 45 MiB (the interpreter's own), 532 MiB before


def test_a_dpkg_status_over_its_cap_is_said_and_a_long_line_is_read_in_pieces(tmp_path):
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_bytes(b"Package: runc\nStatus: install ok installed\nVersion: 1.1.5\nDescription: "
                       + b"y" * (rf.PKG_MAX + 10) + b"\n")  # one line over the whole cap, no newline in reach
    got = _read_and_parse(tmp_path)
    assert got["packages"] == {} and got["errors"] == {rf.DPKG_STATUS: f"large (over {rf.PKG_MAX} bytes)"}


def test_the_readers_package_filter_keeps_what_the_parsers_read():
    """What the reader keeps of a real status (Debian 12's, Docker CE's) gives the same packages."""
    ns = {"__name__": "reader"}
    exec(compile(rf.READER, "<reader>", "exec"), ns)
    assert set(ns["PKG"]) == set(rf.PACKAGE_DBS) and ns["WANT"] == tuple(p.encode() for p in rf.RUNC_PACKAGES)
    for data in (DPKG_DEBIAN12, DPKG_DOCKER_CE):
        kept = ns["filter_packages"](iter(data.splitlines(keepends=True)), rf.DPKG_STATUS)
        assert rf.dpkg_installed(kept) == rf.dpkg_installed(data) and len(kept) < 512
    kept = ns["filter_packages"](iter(APK.splitlines(keepends=True)), rf.APK_INSTALLED)
    assert rf.apk_installed(kept) == rf.apk_installed(APK)
