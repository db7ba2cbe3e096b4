"""Issue 21 row 5: `--root DIR` never leaves DIR. With DIR/etc/pve/lxc, DIR/etc/pve or
DIR/var/lib/lxc/<ct> a symlink to a directory elsewhere, apply, rollback, scan, the API's fix
(and the Ansible module, tests/unit/test_collection.py) wrote or read the files out there. Every
path of a snapshot is now resolved inside it (transport.resolve_in_root, as openat2 with
RESOLVE_IN_ROOT would): a link that stays inside is followed (Proxmox's own
etc/pve/lxc -> nodes/<node>/lxc), one that leads out is refused, exit 2, one line, nothing
changed. No container is needed: these are files in tmp dirs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lxcfix import api, cli
from lxcfix.errors import BadInput

from .conftest import EXAMPLES

TUN = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0\n"


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file and link under root (a link as its target): what "nothing changed" compares."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


def run(capsys, *argv):
    rc = cli.run(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def one_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("style: ")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _pve(tmp_path: Path) -> Path:
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "pve-gpu-host", snap)
    return snap


def _lxc(tmp_path: Path) -> Path:
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLES / "lxc-healthy", snap)
    with open(snap / "var/lib/lxc/web/config", "a") as f:
        f.write(TUN)  # tun given, not allowed: a plan that adds the rule
    return snap


def _link_out(snap: Path, rel: str, outside: Path, relative: bool) -> None:
    """Move snap/rel to `outside` and leave a symlink to it in its place."""
    shutil.move(str(snap / rel), str(outside))
    target = os.path.relpath(outside, (snap / rel).parent) if relative else str(outside)
    os.symlink(target, snap / rel)


# (snapshot, the directory that becomes a link out, the container, its config under `outside`)
CASES = {
    "etc/pve/lxc": (_pve, "etc/pve/lxc", "200", "200.conf"),
    "etc/pve": (_pve, "etc/pve", "200", "lxc/200.conf"),
    "var/lib/lxc/ct": (_lxc, "var/lib/lxc/web", "web", "config"),
}


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("LXCFIX_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.mark.parametrize("relative", [False, True], ids=["absolute-link", "relative-link"])
@pytest.mark.parametrize("case", list(CASES))
def test_apply_and_plan_through_a_link_out_of_the_snapshot_are_refused(case, relative, tmp_path, state, capsys):
    make, rel, ct, _ = CASES[case]
    snap = make(tmp_path)
    outside = tmp_path / "outside"
    _link_out(snap, rel, outside, relative)
    before_out, before_snap = tree(outside), tree(snap)
    rc, out, err = run(capsys, "apply", "--root", str(snap), "--ct", ct, "--no-restart", "--yes")
    line = one_line(err)
    assert rc == 2 and "outside the snapshot" in line and f"/{rel} is a symlink to" in line, line
    assert tree(outside) == before_out and tree(snap) == before_snap
    assert not state.exists() or not list(state.rglob("*.conf"))  # not even a backup
    for command in (("plan", "--ct", ct), ("scan",)):
        rc, out, err = run(capsys, command[0], "--root", str(snap), *command[1:])
        assert rc == 2 and "outside the snapshot" in one_line(err) and out == ""
    with pytest.raises(BadInput, match="outside the snapshot"):
        api.fix(ct, root=str(snap), check=False)
    with pytest.raises(BadInput, match="outside the snapshot"):
        api.scan(root=str(snap), probe=False)
    assert tree(outside) == before_out and tree(snap) == before_snap


@pytest.mark.parametrize("case", list(CASES))
def test_rollback_through_a_link_out_of_the_snapshot_is_refused(case, tmp_path, state, capsys):
    """A real backup exists (an apply inside the snapshot); then the directory is moved out and
    linked: the rollback used to restore the backup over the file out there."""
    make, rel, ct, conf = CASES[case]
    snap = make(tmp_path)
    rc, _, err = run(capsys, "apply", "--root", str(snap), "--ct", ct, "--no-restart", "--yes")
    assert rc == 0, err
    outside = tmp_path / "outside"
    _link_out(snap, rel, outside, relative=False)
    applied = (outside / conf).read_bytes()
    rc, out, err = run(capsys, "rollback", "--root", str(snap), "--ct", ct)
    assert rc == 2 and "outside the snapshot" in one_line(err)
    assert (outside / conf).read_bytes() == applied


def test_a_config_that_is_a_link_out_is_neither_read_nor_written(tmp_path, state, capsys):
    snap = _pve(tmp_path)
    victim = tmp_path / "victim.conf"
    shutil.move(str(snap / "etc/pve/lxc/200.conf"), victim)
    os.symlink(victim, snap / "etc/pve/lxc/200.conf")
    old = victim.read_bytes()
    rc, out, err = run(capsys, "apply", "--root", str(snap), "--ct", "200", "--no-restart", "--yes")
    assert rc == 2 and "/etc/pve/lxc/200.conf is a symlink to" in one_line(err)
    assert victim.read_bytes() == old and (snap / "etc/pve/lxc/200.conf").is_symlink()


def test_links_that_stay_inside_are_followed_and_the_real_file_is_written(tmp_path, state, capsys):
    """Proxmox's own layout: /etc/pve/lxc is a link to nodes/<node>/lxc (relative), and a copy made
    with absolute links naming the snapshot's own path: both work, and the file written is the
    real one inside (the link stays a link)."""
    snap = _pve(tmp_path)
    node = snap / "etc/pve/nodes/pve1"
    node.mkdir(parents=True)
    shutil.move(str(snap / "etc/pve/lxc"), node / "lxc")
    os.symlink("nodes/pve1/lxc", snap / "etc/pve/lxc")
    old = (node / "lxc/200.conf").read_bytes()
    rc, out, err = run(capsys, "apply", "--root", str(snap), "--ct", "200", "--no-restart", "--yes")
    assert rc == 0, err
    assert (snap / "etc/pve/lxc").is_symlink() and (node / "lxc/200.conf").read_bytes() != old
    rc, out, err = run(capsys, "rollback", "--root", str(snap), "--ct", "200")
    assert rc == 0, err
    assert (node / "lxc/200.conf").read_bytes() == old
    os.unlink(snap / "etc/pve/lxc")
    os.symlink(str(node / "lxc"), snap / "etc/pve/lxc")  # absolute, inside the snapshot
    rc, out, err = run(capsys, "plan", "--root", str(snap), "--ct", "200")
    assert rc == 1 and ("+dev" in out or "+lxc." in out), (rc, out, err)


def test_resolve_in_root(tmp_path):
    from lxcfix.transport import OutsideRoot, RootDir, resolve_in_root

    root = tmp_path / "r"
    (root / "a/b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink("a/b", root / "in")
    os.symlink("../../elsewhere", root / "a/up")
    os.symlink(str(tmp_path / "elsewhere"), root / "abs")
    os.symlink(str(root / "a"), root / "abs-in")
    os.symlink("loop", root / "loop")
    os.symlink(str(tmp_path / "elsewhere/f"), root / "a/b/last")
    r = str(root.resolve())
    assert resolve_in_root(r, "/in/x.conf") == f"{r}/a/b/x.conf"
    assert resolve_in_root(r, "/abs-in/b/../b/x") == f"{r}/a/b/x"
    assert resolve_in_root(r, "/missing/../a") == f"{r}/a"
    assert resolve_in_root(r, "/a/b/last", follow_last=False) == f"{r}/a/b/last"
    for bad in ("/a/up/x", "/abs", "/abs/x", "/loop/x", "/..", "/a/../../x", "/a/b/last", "/in/../../.."):
        with pytest.raises(OutsideRoot):
            resolve_in_root(r, bad)
    t = RootDir(str(root))
    assert t.isdir("/in") and not t.isdir("/missing")
    with pytest.raises(OSError, match="outside the snapshot"):  # a file: unreadable, judged by its reader
        t.read("/a/b/last")
    with pytest.raises(OutsideRoot):
        t.listdir("/abs")
    assert t.device_nodes(["/abs/null", "/a/b/last"]) == {}
    assert t.run(["pveversion"]).rc == 127


def test_a_kernel_file_linked_out_is_not_read_and_the_facts_fail(tmp_path, state, capsys):
    """A file (not a directory) that leads out is an unreadable file, judged by its reader:
    /proc/devices -> /dev/zero is not what the kernel writes there (exit 3, as for a FIFO)."""
    snap = _pve(tmp_path)
    (snap / "proc/devices").unlink()
    os.symlink("/dev/zero", snap / "proc/devices")
    rc, out, err = run(capsys, "scan", "--root", str(snap))
    line = one_line(err)
    assert rc == 3 and "/proc/devices is a symlink to /dev/zero, outside the snapshot" in line, line


def test_cached_reads_resolve_as_resolve_in_root(tmp_path):
    """RootDir.read resolves a file's directory once per snapshot (_file_path) and has_dir
    remembers missing directories: each answer is resolve_in_root's, links and `..` included,
    asked twice (the second from the caches)."""
    from lxcfix.transport import OutsideRoot, RootDir, resolve_in_root

    root = tmp_path / "r"
    (root / "a/b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/f").write_bytes(b"outside\n")
    (root / "a/b/x.conf").write_bytes(b"inside\n")
    os.symlink("a/b", root / "in")
    os.symlink("x.conf", root / "a/b/alias")
    os.symlink(str(tmp_path / "elsewhere/f"), root / "a/b/last")
    os.symlink("../../elsewhere", root / "a/up")
    r = str(root.resolve())
    t = RootDir(str(root))
    paths = ("/a/b/x.conf", "/in/x.conf", "/a/b/alias", "/in/alias", "/a/b/../b/x.conf", "/a/b/last",
             "/a/up/f", "/missing/x.conf", "/a/b/missing", "/a/b/", "/in/..", "/x.conf")
    for _ in range(2):
        for p in paths:
            try:
                want = read = None
                want = resolve_in_root(r, p)
                with open(want, "rb") as f:
                    read = f.read()
            except (OutsideRoot, OSError) as e:
                want = type(e)
            try:
                got = t.read(p)
            except OSError as e:
                got = OSError if "outside the snapshot" not in str(e) else OutsideRoot
            if want is OutsideRoot:
                assert got is OutsideRoot, p
            elif read is None:
                assert got is OSError, p
            else:
                assert got == read, p
    assert t.read("/in/alias") == b"inside\n"
    for _ in range(2):
        assert t.has_dir("/a/b") and t.has_dir("/in") and not t.has_dir("/a/b/x.conf")
        assert not t.has_dir("/var/lib/lxc/200/rootfs") and not t.has_dir("/var/lib/lxc/201/rootfs")
        with pytest.raises(OutsideRoot):
            t.has_dir("/a/up")
    assert "/var" in t._absent
    (root / "var/lib/lxc/300/rootfs").mkdir(parents=True)
    assert RootDir(str(root)).has_dir("/var/lib/lxc/300/rootfs")  # a new snapshot view asks the disk again
