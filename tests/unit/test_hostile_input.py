"""Issue 15 in the fast tier: what a container prints parsed totally and bounded, reading
bounded, files that are no regular file refused, symlinks at device sources not followed,
tenant-writable sources (LXF160), configs nobody can read (LXF130) refused by plan, facts
that cannot be used refused, one container's failure only its own, the rollback's reading
of the journal. The real tier does the same against containers, disks and sshd.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import bounded, ctconfig, facts, gather, probe, repair, scan
from lxcfix.apply import _stopped_mid_apply, dropped_lines
from lxcfix.errors import BadInput, FactsFailed
from lxcfix.model import DeviceNode, HostFacts, ProbeResult, Result
from lxcfix.plan import make_plan
from lxcfix.rules import run_rules
from lxcfix.transaction import runs
from lxcfix.transport import (ContainerExec, Local, RootDir, capped, container_output_max, read_regular,
                              run_bounded)

from .conftest import EXAMPLES, codes, make_ctx, make_facts

# ---------------------------------------------------------------- bounded numbers and excerpts


@pytest.mark.parametrize("text,value", [("511", 511), ("0", 0), ("4095", 4095), ("4096", None), ("²", None),
                                        ("٥", None), ("1_0", None), (" 5", None), ("-1", None), ("", None),
                                        ("9" * 5000, None), ("0x1f", None)])
def test_uint_takes_ascii_digits_of_bounded_length_only(text, value):
    assert bounded.uint(text, 10, 7, 4095) == value


def test_excerpt_is_printable_ascii_and_bounded():
    assert bounded.excerpt("group render ²") == "group render \\xc2\\xb2"
    assert bounded.excerpt("\x1b]52;c;x\x07") == "\\x1b]52;c;x\\x07"
    shown = bounded.excerpt("9" * 5000)
    assert shown == "9" * 80 + "..." and shown.isascii() and shown.isprintable()


# ---------------------------------------------------------------- the probe's output


def test_each_kind_of_line_the_probe_cannot_print_is_noted_and_the_rest_is_kept():
    text = "\n".join([
        "lxcfix-probe 1",
        "node /dev/net/tun exists=1 char=1 major=10 minor=200 open=EPERM",
        "node /dev/x exists=1 char=1 major=" + "9" * 5000 + " minor=0 open=ok",
        "node /dev/y exists=1 char=1 major=4096 minor=0 open=ok",  # past the 12-bit major
        "node /dev/z exists=1 char=1 major=1 minor=1048576 open=ok",  # past the 20-bit minor
        "group render ²", "group video 44", "cuinit 12345678901", "nvidia_smi rc=x", "driver ² /lib/x",
        "some line a newer probe prints", "node", "group video", "end",
    ])
    got = probe.parse(text)
    assert list(got.nodes) == ["/dev/net/tun"] and got.groups == {"video": 44} and got.cuinit is None
    problems = "\n".join(got.unusable)
    for seen in ("group render \\xc2\\xb2", "longer than", "major=4096", "minor=1048576", "cuinit 1234",
                 "nvidia_smi rc=x", "driver \\xc2\\xb2"):
        assert seen in problems, seen
    assert "newer probe" not in problems  # unknown kinds are skipped, silently
    assert len(got.unusable) == probe.UNUSABLE_MAX + 1 and got.unusable[-1] == "... 1 more such lines"


def test_output_past_the_cap_is_cut_and_said():
    text = "node /dev/a exists=1 char=1 major=10 minor=200 open=ok\n" * 50
    got = probe.parse(text, limit=1000)
    assert len(got.raw.encode()) <= 1000 and got.unusable == (
        "the output went past 1000 bytes: reading stopped there and the probe was killed",)
    assert probe.parse("x" * 10, truncated=True).unusable[-1].startswith("the output went past")
    lines = "nvidia_smi rc=0\n" + "nvidia_smi_out GPU\n" * (probe.SMI_LINES_MAX + 5)
    assert probe.parse(lines).nvidia_smi_out.count("GPU") == probe.SMI_LINES_MAX


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=6000))
def test_parse_takes_any_bytes(data):
    text = data.decode("utf-8", "surrogateescape")
    got = probe.parse(text)
    assert all(0 <= (n.major or 0) <= facts.MAJOR_MAX and 0 <= (n.minor or 0) <= facts.MINOR_MAX
               for n in got.nodes.values())
    assert all(p.isascii() for p in got.unusable) and len(got.unusable) <= probe.UNUSABLE_MAX + 2
    probe.classify("1", "h", got, {"/dev/x": ("c", 511, 0)}, "580.1.2", "c 1:3 rwm", {"x": 511})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["node", "group", "cuinit", "driver", "nvidia_smi", "nvidia_smi_out", "end"])),
       st.lists(st.text(alphabet="0123456789²٥-_ /=abc\x1b", max_size=12)))
def test_parse_takes_known_heads_with_any_fields(heads, fields):
    text = "\n".join(f"{h} {' '.join(fields)}" for h in heads)
    got = probe.parse(text)
    ctx = make_ctx("arch: amd64\n")
    run_rules(replace(ctx, probe=got))


def test_unusable_output_is_lxf204_with_the_evidence_and_other_findings_stand():
    tun = "arch: amd64\nostype: debian\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"
    facts_ = make_facts(nodes={"/dev/net/tun": DeviceNode("/dev/net/tun", "c", 10, 200, 0o20666)})
    ctx = make_ctx(tun, facts=facts_)
    got = probe.parse("node /dev/net/tun exists=1 char=1 major=10 minor=200 open=EPERM\ngroup render ²\nend\n")
    found = {f.code: f for f in run_rules(replace(ctx, probe=got))}
    assert {"LXF100", "LXF200", "LXF206"} <= set(found)
    assert any("group render \\xc2\\xb2" in e for e in found["LXF206"].evidence)


# ---------------------------------------------------------------- reading bounded


def test_run_bounded_stops_at_the_cap_and_kills_the_command():
    start = time.monotonic()
    r = run_bounded(["cat", "/dev/zero"], limit=1 << 16)
    assert (r.rc, r.truncated, len(r.stdout)) == (125, "stdout", 1 << 16)
    assert "output exceeded 65536 bytes on stdout" in r.stderr and time.monotonic() - start < 5
    r = run_bounded(["sh", "-c", "yes >&2"], limit=1000)
    assert (r.rc, r.truncated, len(r.stderr.split("sh: output")[0])) == (125, "stderr", 1000)


def test_run_bounded_deadline_kills_the_whole_group():
    # A duration of this test's own, so nothing else on the machine (the next test's leftover,
    # another run's) passes for a survivor of this group.
    start = time.monotonic()
    r = run_bounded(["sh", "-c", "sleep 301.25 & sleep 301.25; echo never"], timeout=1)
    assert r.rc == 124 and "timed out after 1s" in r.stderr and time.monotonic() - start < 5
    left = subprocess.run(["pgrep", "-f", "sleep 301.25"], capture_output=True, text=True).stdout
    assert not left.strip()


def test_run_bounded_does_not_wait_for_what_a_command_left_running():
    start = time.monotonic()
    try:
        r = run_bounded(["sh", "-c", "echo done; sleep 302.5 & exit 3"], timeout=60)
        assert (r.rc, r.stdout) == (3, "done\n") and time.monotonic() - start < 10
    finally:  # what the command left running is this test's to end
        subprocess.run(["pkill", "-f", "sleep 302.5"], capture_output=True)


def test_local_run_is_bounded_by_default_and_feeds_input():
    r = Local().run(["cat"], input="abc" * 100_000)
    assert r.ok and len(r.stdout) == 300_000
    assert Local().run(["no-such-command-lxcfix"]).rc == 127


class Inner:
    """A transport the container's commands go through: records what it was asked."""

    def __init__(self, local: bool, out: str = ""):
        self.local, self.name, self.out, self.calls = local, "h", out, []

    def run(self, argv, *, input=None, timeout=60, **kw):
        self.calls.append((list(argv), kw))
        return Result(0, self.out, "")


def test_container_exec_clears_the_environment_and_caps_what_comes_back():
    here = Inner(local=True)
    ContainerExec(here, "web", "lxc").run(["true"])
    argv, kw = here.calls[0]
    assert argv[:4] == ["lxc-attach", "-n", "web", "--clear-env"]
    assert argv[4:9] == ["--set-var", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "--set-var", "LC_ALL=C", "--"]
    assert kw == {"max_output": container_output_max()}  # lxc-attach is killed at the cap
    remote = Inner(local=False, out="y\n" * 10)  # a transport that ignores the cap: cut here again
    r = ContainerExec(remote, "200", "pve", limit=8).run(["x"])
    assert remote.calls[0][1] == {"max_output": 8}
    assert (r.rc, r.truncated, r.stdout) == (125, "stdout", "y\ny\ny\ny\n")
    assert capped(Result(0, "abc", ""), 3) == Result(0, "abc", "")


def test_probe_limits_are_configurable(monkeypatch):
    monkeypatch.setenv("LXCFIX_PROBE_MAX_OUTPUT", "4096")
    assert container_output_max() == 4096
    for bad in ("0", "-5", "²", "1e999", "9" * 50, "inf"):
        monkeypatch.setenv("LXCFIX_PROBE_MAX_OUTPUT", bad)
        assert container_output_max() == 1 << 20


# ---------------------------------------------------------------- files that are no regular file


def test_read_regular_refuses_a_fifo_a_device_and_a_huge_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    os.symlink("/dev/zero", zero)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(100 << 20)
    for path, why in ((fifo, "not a regular file"), (zero, "not a regular file"), (tmp_path, "not a regular file"),
                      (big, "larger than")):
        start = time.monotonic()
        with pytest.raises(OSError) as e:
            read_regular(str(path))
        assert why in str(e.value) and time.monotonic() - start < 5
    (tmp_path / "ok").write_bytes(b"arch: amd64\n")
    assert read_regular(str(tmp_path / "ok")) == b"arch: amd64\n"


def test_device_nodes_at_given_paths_do_not_follow_symlinks(tmp_path):
    link = tmp_path / "gpu"
    os.symlink("/dev/null", link)
    found = Local().device_nodes([str(link), "/dev/null"])
    assert list(found) == ["/dev/null"] and found["/dev/null"].kind == "c"
    snap = tmp_path / "snap"
    (snap / "srv").mkdir(parents=True)
    os.symlink("/dev/null", snap / "srv/gpu")
    assert RootDir(str(snap)).device_nodes(["/srv/gpu"]) == {}


# ---------------------------------------------------------------- tenant-writable sources (LXF160)


def _node(path, major=1, minor=11):
    return DeviceNode(path, "c", major, minor, 0o20666)


def test_a_source_in_the_rootfs_is_lxf160_and_nothing_is_planned_for_it():
    src = "/var/lib/lxc/web/rootfs/devs/kmsg"
    text = (f"lxc.rootfs.path = dir:/var/lib/lxc/web/rootfs\n"
            f"lxc.cgroup2.devices.allow = c 10:200 rwm\n"
            f"lxc.mount.entry = {src} dev/kmsg none bind,create=file 0 0\n")
    for nodes in ({src: _node(src)}, {}):  # a node the tenant made, or a symlink lstat did not follow
        for style in ("auto", "path", "numeric"):
            ctx = make_ctx(text, flavor="lxc", ct="web",
                           facts=make_facts(backend="lxc", lxc_version="5.0.2", nodes=nodes or {"/dev/null": _node("/dev/null", 1, 3)}))
            found = run_rules(ctx)
            assert codes(found) == ["LXF160"], (style, codes(found))
            assert make_plan(ctx, style).is_empty


@pytest.mark.parametrize("text,src", [
    ("rootfs: /srv/ct/200,size=8G\nlxc.mount.entry: /srv/ct/200/x dev/x none bind,create=file\n", "/srv/ct/200/x"),
    ("rootfs: local-lvm:vm-200-disk-0\nlxc.mount.entry: /var/lib/lxc/200/rootfs/x dev/x none bind,create=file\n",
     "/var/lib/lxc/200/rootfs/x"),
    ("rootfs: local-lvm:vm-200-disk-0\nmp0: /tank/share,mp=/share\ndev0: /tank/share/gpu\n", "/tank/share/gpu"),
    ("rootfs: local-lvm:vm-200-disk-0\nlxc.mount.entry: /tank/media media none bind,create=dir\n"
     "lxc.mount.entry: /tank/media/dri dev/dri/renderD128 none bind,create=file\n", "/tank/media/dri"),
])
def test_every_kind_of_directory_the_container_writes(text, src):
    ctx = make_ctx("arch: amd64\nostype: debian\n" + text, facts=make_facts(nodes={src: _node(src, 226, 128)}))
    f160 = [f for f in run_rules(ctx) if f.code == "LXF160"]
    assert [f.device for f in f160] == [src] and "LXF100" not in codes(run_rules(ctx))


# Issue 21 row 1: the shared directory in every mount form (plain bind, bind,rw, idmapped,
# rbind, an include, an lxc.mount.fstab file, mpN), and the device mount that takes its node from it.
_UVM = "/srv/shared/nvidia-uvm"
_UVM_MOUNT = f"{_UVM} dev/nvidia-uvm none bind,optional,create=file 0 0"
_LXC_HEAD = "lxc.include = /usr/share/lxc/config/common.conf\nlxc.rootfs.path = dir:/var/lib/lxc/web/rootfs\n"


def _loader(files):
    def load(path):
        return [(path, files[path])] if path in files else None
    return load


@pytest.mark.parametrize("flavor,text,files", [
    ("lxc", "lxc.mount.entry = /srv/shared mnt/shared none bind 0 0\n", {}),
    ("lxc", "lxc.mount.entry = /srv/shared mnt/shared none bind,rw 0 0\n", {}),
    ("lxc", "lxc.mount.entry = /srv/shared/ mnt/shared none bind,idmap=container 0 0\n", {}),
    ("lxc", "lxc.mount.entry = /srv//shared mnt/shared none rbind,optional 0 0\n", {}),
    ("lxc", "lxc.include = /etc/lxc/shared.conf\n",
     {"/etc/lxc/shared.conf": b"lxc.mount.entry = /srv/shared mnt/shared none bind 0 0\n"}),
    ("lxc", "lxc.mount.fstab = /var/lib/lxc/web/fstab\n",
     {"/var/lib/lxc/web/fstab": b"# shared\n/srv/shared mnt/shared none bind 0 0\n"}),
    ("pve", "mp0: /srv/shared,mp=/mnt/shared\n", {}),
    ("pve", "mp0: /srv/shared,mp=/mnt/shared,ro=0\n", {}),
    ("pve", "lxc.mount.entry: /srv/shared mnt/shared none bind 0 0\n", {}),
])
def test_a_device_under_a_shared_directory_is_lxf160_in_every_mount_form(flavor, text, files):
    """Row 1 of issue 21: the tenant symlinks nvidia-uvm in its shared directory to /dev/kmsg;
    before, only `bind,create=dir` (and rbind) made the directory the tenant's, so scan gave
    LXF100 and the plan allowed <shared>/nvidia-uvm by path (LXC follows the link at start)."""
    sep = " = " if flavor == "lxc" else ": "
    head = _LXC_HEAD if flavor == "lxc" else \
        "arch: amd64\nostype: debian\nrootfs: local-lvm:vm-200-disk-0\n"
    cfg_text = head + text + f"lxc.mount.entry{sep}{_UVM_MOUNT}\n"
    ct = "web" if flavor == "lxc" else "200"
    path = f"/etc/pve/lxc/{ct}.conf" if flavor == "pve" else f"/var/lib/lxc/{ct}/config"
    for nodes in ({_UVM: _node(_UVM, 511, 0)}, {"/dev/null": _node("/dev/null", 1, 3)}):
        fx = make_facts(backend=flavor, lxc_version="5.0.2", nodes=nodes)
        ctx = gather.context(fx, gather.Loaded(ct, path, ctconfig.parse(cfg_text.encode(), flavor, path)),
                             _loader(files))
        found = run_rules(ctx)
        f160 = [f for f in found if f.code == "LXF160"]
        assert [f.device for f in f160] == [_UVM], codes(found)
        assert "LXF100" not in codes(found)
        assert any("/srv/shared: written by the container (" in e for e in f160[0].evidence), f160[0].evidence
        for style in ("auto", "path", "numeric"):
            plan = make_plan(ctx, style)
            assert plan.after == plan.before, (style, plan.after.decode())


_IDMAP = "lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\n"


@pytest.mark.parametrize("line", [
    # (a read-only bind was here: it is the tenant's since issue 30 item 1, see below)
    "lxc.mount.entry = /srv/nodes/nvidia-uvm mnt/nvidia-uvm none bind,create=file 0 0",
    "lxc.mount.entry = /sys/kernel/debug sys/kernel/debug none bind,optional 0 0",
])
def test_read_only_binds_files_and_kernel_filesystems_make_no_shared_directory(line):
    text = f"{_LXC_HEAD}{line}\nlxc.mount.entry = {_UVM_MOUNT}\n"
    fx = make_facts(backend="lxc", lxc_version="5.0.2", nodes={_UVM: _node(_UVM, 511, 0)})
    found = run_rules(make_ctx(text, flavor="lxc", ct="web", facts=fx))
    assert "LXF160" not in codes(found) and "LXF100" in codes(found)


def test_read_only_bind_mounts_and_dev_are_not_the_tenants():
    # (an `mp0: ...,ro=1` source was here too: the tenant's since issue 30 item 1, see below)
    text = ("arch: amd64\nrootfs: local-lvm:vm-200-disk-0\n"
            "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n")
    ctx = make_ctx(text, facts=make_facts(nodes={"/dev/dri/renderD128": _node("/dev/dri/renderD128", 226, 128)}))
    assert "LXF160" not in codes(run_rules(ctx))


@pytest.mark.parametrize("flavor,share,how", [
    ("lxc", "lxc.mount.entry = /srv/shared srv/share none bind,ro,create=dir 0 0\n", "bind-mounts it read-only"),
    ("lxc", "lxc.mount.entry = /srv/shared srv/share none rbind,ro 0 0\n", "bind-mounts it read-only"),
    ("lxc", "lxc.mount.entry = /srv/shared srv/share none bind,ro 0 0\n", "bind-mounts it read-only"),
    ("pve", "mp0: /srv/shared,mp=/srv/share,ro=1\n", "mp0: bind-mounts it read-only (ro=1)"),
    ("pve", "lxc.mount.entry: /srv/shared srv/share none bind,ro,create=dir 0 0\n", "bind-mounts it read-only"),
])
def test_a_read_only_share_is_the_tenants_and_the_finding_says_why(flavor, share, how):
    """Issue 30 item 1: `ro` protects nothing. A privileged container's root has CAP_SYS_ADMIN over
    its mounts; an unprivileged one's owns the mount namespace LXC made the bind in (nothing locks
    it; measured on LXC 5.0.2, tests/real/test_tenant.py): `mount -o remount,rw,bind /srv/share`
    either way. Before: no LXF160, and `apply` wrote `lxc.cgroup2.devices.allow =
    /srv/shared/nvidia-uvm rwm`, which LXC stat()s at the next start, following the tenant's link."""
    sep = " = " if flavor == "lxc" else ": "
    head = _LXC_HEAD if flavor == "lxc" else "arch: amd64\nostype: debian\nrootfs: local-lvm:vm-200-disk-0\n"
    ct = "web" if flavor == "lxc" else "200"
    path = f"/etc/pve/lxc/{ct}.conf" if flavor == "pve" else f"/var/lib/lxc/{ct}/config"
    for unprivileged in (False, True):
        idmap = (_IDMAP if flavor == "lxc" else "unprivileged: 1\n") if unprivileged else ""
        text = head + idmap + share + f"lxc.mount.entry{sep}{_UVM_MOUNT}\n"
        fx = make_facts(backend=flavor, lxc_version="5.0.2", nodes={_UVM: _node(_UVM, 511, 0)})
        ctx = gather.context(fx, gather.Loaded(ct, path, ctconfig.parse(text.encode(), flavor, path)), _loader({}))
        found = run_rules(ctx)
        (f,) = [f for f in found if f.code == "LXF160"]
        assert f.device == _UVM and "LXF100" not in codes(found)
        ev = "\n".join(f.evidence)
        assert "/srv/shared: written by the container (" in ev and how in ev, ev
        if not unprivileged:
            assert "remount,rw,bind" in ev and "privileged container" in ev, ev
        elif flavor == "lxc" or "lxc.mount.entry" in share:
            assert "remount,rw,bind" in ev and "own user namespace" in ev, ev
        else:
            assert "MNT_LOCK_READONLY) is not checked" in ev, ev
        for style in ("auto", "path", "numeric"):
            plan = make_plan(ctx, style)
            assert plan.after == plan.before, (style, plan.after.decode())


def test_a_path_rule_in_the_rootfs_is_lxf160():
    text = "lxc.cgroup2.devices.allow = /var/lib/lxc/web/rootfs/dev/x rwm\n"
    got = [f for f in run_rules(make_ctx(text, flavor="lxc", ct="web", facts=make_facts(backend="lxc")))
           if f.code == "LXF160"]
    assert got and "stat()s it at every start" in got[0].message


# ---------------------------------------------------------------- configs nobody can read: LXF130, plan refuses


@pytest.mark.parametrize("line,why", [
    ("lxc.mount.entry: /dev/net/tun dev/net/tun", "LXC wants `source target"),
    (f"lxc.mount.entry: /dev/nvidia{'9' * 5000} dev/nvidia0 none bind", "the kernel cannot mount it"),
    ("dev256: /dev/nvidia0", "dev0 to dev255"),
    (f"dev{'9' * 5000}: /dev/nvidia0", "dev0 to dev255"),
    ("dev00: /dev/nvidia0", "dev0 to dev255"),
    ("dev0: gid=44", "names a device path"),
    ("lxc.cgroup2.devices.allow: c ²:0 rwm", "LXC rejects the device rule"),
])
def test_entries_nobody_can_use_are_lxf130_and_plan_refuses(line, why):
    ctx = make_ctx("arch: amd64\nostype: debian\n" + line + "\n")
    f130 = [f for f in run_rules(ctx) if f.code == "LXF130"]
    assert f130 and why in f130[0].message and len(f130[0].message) < 400
    report = scan.analyze_container(ctx.facts, gather.Loaded("200", "/etc/pve/lxc/200.conf", ctx.config),
                                    lambda p: None)
    with pytest.raises(BadInput) as e:
        repair.check_editable(report)
    assert "nothing planned" in str(e.value) and "\n" not in str(e.value)


def test_an_include_of_itself_is_lxf130():
    raw = b"lxc.include = /var/lib/lxc/web/config\nlxc.uts.name = web\n"
    load = {"/var/lib/lxc/web/config": [("/var/lib/lxc/web/config", raw)]}.get
    from lxcfix import ctconfig

    loaded = gather.Loaded("web", "/var/lib/lxc/web/config", ctconfig.parse(raw, "lxc", "/var/lib/lxc/web/config"))
    ctx = gather.context(make_facts(backend="lxc"), loaded, load)
    assert [f.line for f in run_rules(ctx) if f.code == "LXF130"] == [1]


# ---------------------------------------------------------------- host facts


def test_proc_devices_lines_the_kernel_cannot_write_are_named():
    assert facts.proc_devices_problems("Character devices:\n  1 mem\n195 nvidia\n\nBlock devices:\n  8 sd\n") == []
    got = facts.proc_devices_problems("Character devices:\n² nvidia-uvm\n" + "9" * 5000 + " x\n")
    assert got == ["line 2: '\\xc2\\xb2 nvidia-uvm'", f"line 3: '{'9' * 80}...'"]


def test_facts_with_such_lines_are_refused(tmp_path):
    snap = tmp_path / "snap"
    import shutil

    shutil.copytree(EXAMPLES / "lxc-healthy", snap)
    (snap / "proc/devices").write_text("Character devices:\n  1 mem\n² nvidia-uvm\n")
    target = repair.open_target(str(snap))
    with pytest.raises(FactsFailed) as e:
        gather.host_facts(target.transport, target.backend)
    assert e.value.exit_code == 3 and "line 3" in str(e.value)


# ---------------------------------------------------------------- one container's failure is its own


def test_a_probe_that_breaks_is_that_containers_lxf301_and_the_others_are_reported(tmp_path, monkeypatch):
    import shutil

    from lxcfix import observe

    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "lxc-healthy", snap)
    (snap / ".lxcfix/lxc-info").write_text("RUNNING\n")  # every container runs
    target = repair.open_target(str(snap))

    def broken(t, backend, ct, eff, enter=None, access=()):
        if ct == "vpn":
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return ProbeResult(), None

    monkeypatch.setattr(observe, "observe", broken)
    rep = scan.scan_host(target.transport, target.backend, ["vpn", "web"], probe=True)
    by_ct = {c.ct: c for c in rep.containers}
    assert [f.code for f in by_ct["vpn"].findings] == ["LXF301"]
    assert "ValueError" in by_ct["vpn"].findings[0].message and by_ct["web"].plan is not None
    from lxcfix import report

    text = report.prometheus([rep], 0)
    assert 'ct="vpn",code="LXF301"' in text


# ---------------------------------------------------------------- the journal, for rollback


def test_runs_group_events_by_their_transaction_and_old_journals_by_backup():
    events = [{"tx": "a", "event": "backup"}, {"tx": "a", "event": "written"}, {"tx": "a", "event": "done"},
              {"tx": "b", "event": "backup", "was_running": True}, {"tx": "b", "event": "written", "was_running": True}]
    assert [len(r) for r in runs(events)] == [3, 2]
    assert _stopped_mid_apply(events, b"") is True
    assert _stopped_mid_apply(events + [{"tx": "b", "event": "rolled-back"}], b"") is False
    old = [{"event": "backup", "was_running": True}, {"event": "written", "was_running": True}, {"event": "done"},
           {"event": "backup", "was_running": True}, {"event": "written", "was_running": True}]
    assert [len(r) for r in runs(old)] == [3, 2] and _stopped_mid_apply(old, b"") is True
    # a killed apply's undo left the config restored and the container stopped: "failed" is no end
    assert _stopped_mid_apply([*events[:3], {"tx": "c", "event": "backup", "was_running": True},
                               {"tx": "c", "event": "failed", "was_running": True}], b"") is True


def test_dropped_lines_name_what_a_restore_takes_away_and_puts_back():
    now = b"arch: amd64\nlxc.cgroup2.devices.allow: c 10:200 rwm\n# by hand\n"
    old = b"arch: amd64\nswap: 0\n"
    assert dropped_lines(now, old) == ["-lxc.cgroup2.devices.allow: c 10:200 rwm", "-# by hand", "+swap: 0"]


def test_the_cli_runs_a_scan_of_the_examples_with_little_memory():
    """lxcfix itself in 200 MiB of address space (the hostile tests give it 512)."""
    code = ("import resource,sys;resource.setrlimit(resource.RLIMIT_AS,(200<<20,200<<20));"
            "from lxcfix import cli;cli.main(['scan','--root',%r,'--json'])"
            % str(EXAMPLES / "pve-gpu-host"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert r.returncode == 1 and '"schema": 1' in r.stdout, r.stderr


# ---------------------------------------------------------------- printing (row 12)


def test_control_bytes_in_a_config_never_reach_the_terminal_and_json_stays_exact(tmp_path):
    import json
    import shutil

    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    conf = snap / "etc/pve/lxc/201.conf"
    evil = "\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07"
    conf.write_text(conf.read_text().replace("arch: amd64\n", f"arch: amd64\nlxc.cgroup2.devices.allow: c 10:* rwm"
                                             f" {evil}\n{evil} not a line\n", 1))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "NO_COLOR": "1",
           "LXCFIX_STATE_DIR": str(tmp_path / "state")}
    md = tmp_path / "ticket.md"
    for args in (["scan"], ["diagnose", "--ct", "201"], ["audit"], ["audit", "--format", "markdown"],
                 ["audit", "--markdown", str(md)], ["plan", "--ct", "201"]):
        r = subprocess.run([sys.executable, "-m", "lxcfix", *args, "--root", str(snap)], capture_output=True,
                           env=env, timeout=120)
        assert r.returncode in (1, 2), (args, r.stderr)
        assert b"\x1b" not in r.stdout + r.stderr and b"\x07" not in r.stdout + r.stderr, args
    assert b"\x1b" not in md.read_bytes()
    r = subprocess.run([sys.executable, "-m", "lxcfix", "scan", "--json", "--root", str(snap)], capture_output=True,
                       env=env, timeout=120)
    doc = json.loads(r.stdout)
    messages = [f["message"] for c in doc["containers"] for f in c["findings"]]
    assert any(evil in m or "\\x1b[2J" in m for m in messages)  # exact in JSON, or escaped by the finding itself


# ---------------------------------------------------------------- an inventory that is no regular file


def test_an_inventory_fifo_never_blocks_and_a_pipe_still_works(tmp_path):
    from lxcfix import inventory_io as inventory

    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(BadInput, match="inventory is empty"):
        inventory.load_file(str(fifo))  # nobody writes to it: its end at once, not a hang
    assert time.monotonic() - start < 5
    r, w = os.pipe()  # `--inventory <(ansible-inventory --list)`
    os.write(w, b"all:\n  hosts:\n    pve1: {ansible_host: 10.0.0.11}\n")
    os.close(w)
    try:
        assert [h.name for h in inventory.load_file(f"/proc/self/fd/{r}").hosts] == ["pve1"]
    finally:
        os.close(r)
    with pytest.raises(BadInput, match="not a regular file"):
        inventory.load_file(str(tmp_path))
