"""storage.cfg parsed totally, and where each storage type keeps a container's root volume
(pve-storage's Plugin.pm parse_config and each plugin's path()/filesystem_path())."""

from __future__ import annotations

from lxcfix import pvestorage as ps

# Proxmox's installer writes this for a ZFS install (plus an LVM-thin and an NFS one here)
CFG = """dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup

zfspool: local-zfs
\tpool rpool/data
\tsparse
\tcontent images,rootdir

lvmthin: local-lvm
\tthinpool data
\tvgname pve
\tcontent rootdir,images

nfs: share
\texport /export
\tserver 10.0.0.1
\tcontent images,rootdir
\tnodes pve1,pve2

btrfs: bt
\tpath /mnt/b

rbd: ceph
\tpool vms
\tcontent rootdir
"""


def test_sections_options_and_flags():
    cfg = ps.parse(CFG)
    assert cfg.bad == ()
    assert cfg.stores["local-zfs"] == ps.Store("zfspool", "local-zfs", {"pool": "rpool/data", "sparse": "1",
                                                                        "content": "images,rootdir"})
    assert cfg.stores["share"].nodes() == ("pve1", "pve2") and cfg.stores["share"].shared
    assert cfg.stores["local-lvm"].nodes() is None and not cfg.stores["local-lvm"].shared


def test_bad_lines_are_listed_never_raised_and_local_is_always_there():
    cfg = ps.parse("\tpath /orphan\nnot a header\ndir: x\n\tpath /x\ndir: x\n\tpath /y\n\x00\n")
    assert [b.split(":")[0] for b in cfg.bad] == ["line 1", "line 2", "line 5", "line 6", "line 7"]
    assert cfg.stores["x"].options["path"] == "/x"  # the first definition is kept
    assert cfg.stores["local"] == ps.Store("dir", "local", {"path": "/var/lib/vz"})


def test_each_storage_types_volume_path():
    cfg = ps.parse(CFG)
    mounted = frozenset({"/rpool/data/subvol-200-disk-0"})
    assert ps.locate(cfg, "200", "local-zfs:subvol-200-disk-0,size=8G", mounted) == \
        ps.Volume("dir", "/rpool/data/subvol-200-disk-0", "local-zfs", "zfspool")
    assert ps.locate(cfg, "200", "local-lvm:vm-200-disk-0,size=8G") == \
        ps.Volume("block", "/dev/pve/vm-200-disk-0", "local-lvm", "lvmthin")
    assert ps.locate(cfg, "200", "local:200/vm-200-disk-0.raw,size=8G") == \
        ps.Volume("image", "/var/lib/vz/images/200/vm-200-disk-0.raw", "local", "dir")
    assert ps.locate(cfg, "200", "share:200/subvol-200-disk-0") == \
        ps.Volume("dir", "/mnt/pve/share/images/200/subvol-200-disk-0", "share", "nfs")
    assert ps.locate(cfg, "200", "bt:200/vm-200-disk-0.raw").path == "/mnt/b/images/200/vm-200-disk-0.raw/disk.raw"
    assert ps.locate(cfg, "200", "ceph:vm-200-disk-0").path == "/dev/rbd/vms/vm-200-disk-0"
    assert ps.locate(cfg, "200", "/srv/ct200") == ps.Volume("dir", "/srv/ct200", "", "bind")


def test_what_is_not_checked_says_why():
    cfg = ps.parse(CFG)
    zfs = ps.locate(cfg, "200", "local-zfs:subvol-200-disk-0", frozenset())
    assert zfs.kind == "none" and "rpool/data/subvol-200-disk-0 is not mounted" in zfs.why
    assert "not in storage.cfg" in ps.locate(cfg, "200", "nope:vm-200-disk-0").why
    assert "not VMID/NAME" in ps.locate(cfg, "200", "local:201/../../etc").why
    assert "not raw" in ps.locate(cfg, "200", "local:200/vm-200-disk-0.qcow2").why
    assert ps.locate(cfg, "200", "local-lvm:../../dev/sda").kind == "none"


def test_mountpoints_decode_escapes():
    info = "36 25 0:32 / /rpool/data/a\\040b rw,relatime shared:1 - zfs rpool/data/a rw\n"
    assert ps.mountpoints(info) == frozenset({"/rpool/data/a b"})
