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
