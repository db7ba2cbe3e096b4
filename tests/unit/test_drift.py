"""Drift and dangling references: hookscripts (LXF152), pending changes (LXF153/LXF154),
edited-not-restarted (LXF121), the LXC 7 note on LXF102, and the hook snippet that
never blocks a start on a host without lxcfix."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import audit, ctconfig, gather, repair
from lxcfix.devices import LiveAllowlist
from lxcfix.model import ConfigWrite, DeviceNode, DeviceRule, Storage
from lxcfix.plan import make_plan
from lxcfix.rules import drift, hygiene, live

from .conftest import EXAMPLES, REPO, make_ctx, make_facts

HEAD = "arch: amd64\nostype: debian\n"
LOCAL = {"local": Storage("local", "dir", "/var/lib/vz", ("iso", "snippets"))}
SNIPPETS = {"local": {"lxcfix-hook.sh": 0o100755, "plain.sh": 0o100644}}


def pve_facts(**kw):
    kw.setdefault("storages", LOCAL)
    kw.setdefault("snippets", SNIPPETS)
    return replace(make_facts(nodes=kw.pop("nodes", {"/dev/dri/renderD128": DeviceNode(
        "/dev/dri/renderD128", "c", 226, 128, 0o20660, 0, 104)})), **kw)


def hook_findings(volid, **kw):
    return [f for f in drift.check(make_ctx(HEAD + f"hookscript: {volid}\n", facts=pve_facts(**kw)))
            if f.code == "LXF152"]


def test_missing_hookscript_snippet_stops_the_start():
    (f,) = hook_findings("local:snippets/gpu-passthrough.sh")
    assert (f.severity, f.line) == ("error", 3)
    assert "script 'local:snippets/gpu-passthrough.sh' does not exist on this host" in f.message
    assert "/var/lib/vz/snippets/gpu-passthrough.sh" in f.message and "CT 200 cannot start" in f.message
    assert f.fix.commands == ("pct set 200 --delete hookscript",)
    assert f.fix.edits and f.fix.applicability == "manual"


def test_not_executable_unknown_storage_and_not_in_snippets():
    (f,) = hook_findings("local:snippets/plain.sh")
    assert "is not executable" in f.message and f.fix.commands == ("chmod 0755 /var/lib/vz/snippets/plain.sh",)
    (g,) = hook_findings("nas:snippets/x.sh")
    assert "storage 'nas' is not a file storage on this host" in g.message
    (h,) = hook_findings("local:iso/x.sh")
    assert "is not in the snippets directory" in h.message


def test_lxcfix_own_missing_snippet_says_how_to_install_it():
    (f,) = hook_findings("local:snippets/lxcfix-hook.sh", snippets={"local": {}})
    assert f.fix.commands[:2] == ("lxcfix hook --print-snippet > /var/lib/vz/snippets/lxcfix-hook.sh",
                                  "chmod 0755 /var/lib/vz/snippets/lxcfix-hook.sh")


def test_present_snippet_and_unknown_storage_directory_say_nothing():
    assert hook_findings("local:snippets/lxcfix-hook.sh") == []
    assert hook_findings("local:snippets/anything.sh", snippets={}) == []  # a snapshot without /var/lib/vz


def test_pending_device_changes_say_what_the_next_start_does_and_are_never_edited():
    text = (HEAD + "dev0: /dev/dri/renderD128,gid=104\nunprivileged: 1\n\n[pve:pending]\n"
            "delete: !dev0;memory\ndev1: /dev/dri/renderD129,gid=104\nfeatures: fuse=1,nesting=1\nmemory: 512\n"
            "\n[snap1]\narch: amd64\n")
    ctx = make_ctx(text, facts=pve_facts())
    got = {f.evidence[0].split(": ", 1)[1]: f for f in drift.check(ctx)}
    assert sorted(got) == ["delete dev0", "dev1: /dev/dri/renderD129,gid=104", "features: fuse=1,nesting=1"]
    assert got["delete dev0"].code == "LXF153" and "/dev/dri/renderD128 is no longer passed in" in \
        got["delete dev0"].message
    new = got["dev1: /dev/dri/renderD129,gid=104"]
    assert new.code == "LXF154" and 'pct fails: "Device /dev/dri/renderD129 does not exist"' in new.message
    assert new.fix.commands[-1] == "pct set 200 --revert dev1    # drops this one"
    assert "gives the container /dev/fuse" in got["features: fuse=1,nesting=1"].message
    assert all(not f.fix.edits for f in got.values())
    plan = make_plan(ctx)
    assert ctconfig.sections_tail(plan.after, "pve") == ctconfig.sections_tail(ctx.config.raw, "pve")


def test_pending_hookscript_that_is_missing_fails_the_next_start():
    ctx = make_ctx(HEAD + "\n[pve:pending]\nhookscript: local:snippets/gone.sh\n", facts=pve_facts())
    (f,) = drift.check(ctx)
    assert f.code == "LXF154" and "the new hookscript fails" in f.message


def test_pending_of_other_keys_or_no_pending_section():
    assert drift.check(make_ctx(HEAD + "\n[pve:pending]\nmemory: 1024\ndelete: swap\n", facts=pve_facts())) == []
    assert drift.pending_changes(make_ctx(HEAD + "\n[snap]\ndev0: /dev/x\n").config) is None


def test_lxf121_says_which_lines_differ_and_since_when_the_journal_knows():
    text = HEAD + "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n"
    ctx = make_ctx(text)
    running = LiveAllowlist("allowlist", tuple(sr.rule for sr in ctx.effective.ruleset.rules
                                               if sr.rule != DeviceRule("c", 10, 200, "rwm")))
    ctx = replace(ctx, live=live.Live("/sys/fs/cgroup/lxc/200", running))
    (f,) = live.check(ctx)
    assert f.message == ("the running device allowlist differs from the config on disk (edited without a restart, "
                         "or changed live): not running: 200.conf:3 (c 10:200 rwm)")
    when = ConfigWrite("2026-12-01T10:00:00.120+00:00", ctx.config.digest)
    ctx = replace(ctx, facts=replace(ctx.facts, config_writes={ctx.config.path: when}))
    (g,) = live.check(ctx)
    assert "edited on 2026-12-01T10:00:00.120+00:00 (lxcfix apply wrote it) without a restart since" in g.message
    other = replace(ctx, facts=replace(ctx.facts, config_writes={ctx.config.path: replace(when, digest="0" * 40)}))
    assert "edited without a restart, or changed live" in live.check(other)[0].message


def test_lxf102_says_lxc_7_refuses_the_key_on_lxc_6_hosts():
    text = HEAD + "lxc.cgroup.devices.allow: c 10:200 rwm\n"
    old = [f for f in hygiene.check(make_ctx(text, facts=make_facts(lxc_version="5.0.2"))) if f.code == "LXF102"]
    new = [f for f in hygiene.check(make_ctx(text, facts=make_facts(lxc_version="6.0.4"))) if f.code == "LXF102"]
    assert "LXC 7" not in old[0].message
    assert 'LXC 7 (upstream 7.0.0) rejects lxc.cgroup.* keys as "Unsupported config key"' in new[0].message
    assert "this will be a hard error in the future" in new[0].message


def test_gather_reads_storages_and_snippet_modes_from_a_snapshot(tmp_path):
    root = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-kernel-upgrade", root)
    (root / "var/lib/vz/snippets/plain.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "var/lib/vz/snippets/plain.sh", 0o644)
    t = repair.open_target(str(root))
    f = gather.host_facts(t.transport, t.backend)
    assert set(f.storages) == {"local"} and f.storages["local"].path == "/var/lib/vz"
    assert f.snippets == {}  # read only for the storages a hookscript names
    cfg = ctconfig.parse(b"hookscript: local:snippets/lxcfix-hook.sh\n", "pve")
    f = gather.with_snippets(t.transport, f, [cfg])
    assert stat.S_IMODE(f.snippets["local"]["lxcfix-hook.sh"]) & 0o111
    assert not stat.S_IMODE(f.snippets["local"]["plain.sh"]) & 0o111
    none = ctconfig.parse(b"arch: amd64\n", "pve")
    assert gather.with_snippets(t.transport, replace(f, snippets={}), [none]).snippets == {}


class _Remote:
    """A transport that only runs commands (what SSH gives), run here for real on
    files below `top` (the storage paths name them)."""

    name, local = "remote", False

    def __init__(self):
        self.argvs = []

    def run(self, argv, *, input=None, timeout=60, max_output=None):
        from lxcfix.model import Result

        self.argvs.append(list(argv))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return Result(r.returncode, r.stdout, r.stderr)


def test_snippet_modes_over_a_remote_transport_in_one_command(tmp_path):
    (tmp_path / "vz/snippets").mkdir(parents=True)
    (tmp_path / "vz/snippets/a.sh").write_text("#!/bin/sh\n")
    (tmp_path / "vz/snippets/b.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "vz/snippets/a.sh", 0o755)
    os.chmod(tmp_path / "vz/snippets/b.sh", 0o644)
    (tmp_path / "empty").mkdir()
    remote = _Remote()
    stores = {"local": Storage("local", "dir", str(tmp_path / "vz"), ("snippets",)),
              "nfs": Storage("nfs", "dir", str(tmp_path / "empty"), ("snippets",))}
    got = gather.snippet_files(remote, stores)
    assert got == {"local": {"a.sh": 0o100755, "b.sh": 0o100644}, "nfs": {}}
    assert len(remote.argvs) == 1 and remote.argvs[0][:2] == ["find", "-L"]


def test_hook_snippet_lets_a_start_go_on_where_lxcfix_is_missing(tmp_path, monkeypatch):
    import lxcfix.render as render

    from lxcfix import hook

    monkeypatch.setattr(render, "_templates", lambda: REPO / "templates")  # this checkout's templates
    script = tmp_path / "lxcfix-hook.sh"
    script.write_text(hook.snippet("fail", ["/nonexistent/lxcfix", "hook"]))
    script.chmod(0o755)
    r = subprocess.run([str(script), "200", "pre-start"], capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and "not installed" in r.stderr
    assert "command -v /nonexistent/lxcfix" in script.read_text()


def test_audit_lists_drift_under_the_restart_it_concerns():
    t = repair.open_target(str(EXAMPLES / "pve-kernel-upgrade"))
    rep = repair.scan(t, None, keep_context=True)
    reboot = {(i.ct, i.code) for i in audit.audit([rep], "reboot").items}
    assert {("304", "LXF152"), ("304", "LXF153")} <= reboot
    driver = {(i.ct, i.code) for i in audit.audit([rep], "driver-upgrade").items}
    assert ("304", "LXF152") in driver and ("304", "LXF153") not in driver  # a driver upgrade restarts no container


def test_never_edits_a_pending_section_even_when_asked_to_plan_in_every_style():
    text = HEAD + "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file\n\n[pve:pending]\ndev0: /dev/net/tun\n"
    ctx = make_ctx(text, facts=pve_facts(nodes={"/dev/net/tun": DeviceNode("/dev/net/tun", "c", 10, 200, 0o20666)}))
    for style in ("auto", "numeric", "path", "devn"):
        after = make_plan(ctx, style).after
        assert after.endswith(b"[pve:pending]\ndev0: /dev/net/tun\n")


def test_example_snapshot_is_a_real_file_tree():
    assert (Path(EXAMPLES) / "pve-kernel-upgrade/var/lib/vz/snippets/lxcfix-hook.sh").stat().st_mode & 0o111


# ---------------------------------------------------------------- a snippets directory lxcfix could not read

def _scan(capsys, root):
    from lxcfix import cli

    capsys.readouterr()
    cli.run(["scan", "--root", str(root), "--json", "--no-probe"])
    doc = json.loads(capsys.readouterr().out)
    return [f for c in doc["containers"] for f in c["findings"] if f["code"] == "LXF152"]


def _snapshot(tmp_path):
    root = tmp_path / "snap"
    (root / "etc/pve/lxc").mkdir(parents=True)
    (root / "etc/pve/lxc/200.conf").write_text(HEAD + "hookscript: local:snippets/gpu.sh\n")
    (root / "proc").mkdir()
    (root / "proc/devices").write_text("Character devices:\n  1 mem\n")
    (root / "var/lib/vz").mkdir(parents=True)
    return root


@pytest.mark.parametrize("case", ["a link out of the snapshot", "too many entries"])
def test_a_hookscript_whose_snippets_directory_cannot_be_read_is_not_checked_and_says_why(capsys, tmp_path, case):
    root = _snapshot(tmp_path)
    if case == "a link out of the snapshot":
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (outside / "gpu.sh").write_text("#!/bin/sh\n")
        (root / "var/lib/vz/snippets").symlink_to(outside)
        why = "leads out of the snapshot"
    else:
        (root / "var/lib/vz/snippets").mkdir()
        for i in range(gather.MAX_SNIPPETS + 1):
            (root / f"var/lib/vz/snippets/s{i:04d}.sh").touch()
        why = "too large to list"
    (f,) = _scan(capsys, root)
    assert f["severity"] == "warning" and "not checked: " in f["message"] and why in f["message"], f["message"]
    assert f["commands"] == ["ls -lL /var/lib/vz/snippets/gpu.sh"]


def test_a_readable_snippets_directory_is_still_checked(capsys, tmp_path):
    root = _snapshot(tmp_path)
    (root / "var/lib/vz/snippets").mkdir()
    (f,) = _scan(capsys, root)
    assert f["severity"] == "error" and "does not exist on this host" in f["message"]
    (root / "var/lib/vz/snippets/gpu.sh").write_text("#!/bin/sh\n")
    (root / "var/lib/vz/snippets/gpu.sh").chmod(0o755)
    assert _scan(capsys, root) == []


def test_a_remote_listing_that_fails_or_is_too_large_is_not_checked(tmp_path):
    big = tmp_path / "big/snippets"
    big.mkdir(parents=True)
    for i in range(gather.MAX_SNIPPETS + 1):
        (big / f"s{i:04d}").touch()
    (tmp_path / "gone").mkdir()
    stores = {"big": Storage("big", "dir", str(tmp_path / "big"), ("snippets",)),
              "gone": Storage("gone", "dir", str(tmp_path / "gone"), ("snippets",))}  # no snippets/: no script
    files, unread = gather.snippet_listing(_Remote(), stores)
    assert files == {"gone": {}} and "too large to list" in unread["big"]

    class Denied(_Remote):
        def run(self, argv, timeout=None, max_output=None, input=None):
            from lxcfix.model import Result

            return Result(1, "", f"find: '{tmp_path}/big/snippets': Permission denied\n")

    files, unread = gather.snippet_listing(Denied(), stores)
    assert "big" not in files and "Permission denied" in unread["big"] and files == {"gone": {}}
