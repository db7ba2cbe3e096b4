"""A stopped Proxmox container's own files, on the storage Proxmox puts them (issue 33, item 1).

Until `pct mount`, /var/lib/lxc/VMID/rootfs does not exist: the root is a volume of a storage
in /etc/pve/storage.cfg. Here, with real parts: a real ext4 image (mkfs.ext4 -d) as a `dir`
storage's raw volume, mounted read-only (`ro,noload`) by lxcfix in a private mount namespace
through a real loop device; a directory mounted where a zfspool's dataset is mounted (a bind
mount in the tests' private namespace stands for the dataset: ZFS is not installable here).
Each scan finds the toolkit's `no-cgroups = false` (LXF230), which main missed (LXF236: not
mounted). A volume in use, encrypted, locked, or a dataset not mounted: LXF236 saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from . import harness
from .cli import lxcfix

TOOLKIT = b"[nvidia-container-cli]\nno-cgroups = false\n"


def _tree(root) -> str:
    for d in ("etc/nvidia-container-runtime", "usr/bin"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for path, data in (("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
                       ("etc/group", b"root:x:0:\nvideo:x:44:\nrender:x:104:\n"),
                       ("etc/os-release", b"ID=debian\n"),
                       ("etc/nvidia-container-runtime/config.toml", TOOLKIT)):
        with open(os.path.join(root, path), "wb") as f:
            f.write(data)
    return str(root)


def _conf(pve, vmid, rootfs, extra=""):
    with open(os.path.join(pve.conf_dir, f"{vmid}.conf"), "w") as f:
        f.write(f"arch: amd64\nhostname: lxf-{vmid}\nostype: debian\nrootfs: {rootfs}\n{extra}")


def _storage(pve, text):
    with open(os.path.join(pve.dir, "storage.cfg"), "w") as f:
        f.write(text)


def _rootfs_findings(env, vmid) -> dict:
    r = lxcfix(env, "diagnose", "--ct", vmid, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (c,) = json.loads(r.stdout)["containers"]
    return {f["code"]: f for f in c["findings"] if f["code"].startswith("LXF23")}


def _loops_of(path) -> str:
    return subprocess.run(["losetup", "-j", path], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def raw_volume(pve, tmp_path):
    """`local:VMID/vm-VMID-disk-0.raw` on a dir storage at tmp_path/vz: a real ext4 image."""
    vmid = pve.new_vmid()
    images = tmp_path / "vz" / "images" / vmid
    images.mkdir(parents=True)
    img = str(images / f"vm-{vmid}-disk-0.raw")
    r = subprocess.run(["mkfs.ext4", "-q", "-F", "-d", _tree(tmp_path / "tree"), img, "16M"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _storage(pve, f"dir: local\n\tpath {tmp_path / 'vz'}\n\tcontent rootdir,images\n")
    return vmid, img


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_stopped_containers_raw_image_on_dir_storage_is_read(raw_volume, pve, env):
    vmid, img = raw_volume
    _conf(pve, vmid, f"local:{vmid}/vm-{vmid}-disk-0.raw,size=16M")
    before = _sha(img)
    found = _rootfs_findings({**env, **pve.env()}, vmid)
    assert "LXF230" in found, found  # main: LXF236, "its rootfs is not mounted on the host"
    assert "LXF236" not in found, found
    assert _sha(img) == before  # mounted read-only, the journal not replayed: not one byte written
    assert _loops_of(img) == ""  # the loop device went with the private namespace
    assert not any(img in m for m in harness.mounts_under("/"))


def test_an_image_in_use_locked_or_encrypted_is_not_checked_and_says_why(raw_volume, pve, env, tmp_path):
    vmid, img = raw_volume
    e = {**env, **pve.env()}
    _conf(pve, vmid, f"local:{vmid}/vm-{vmid}-disk-0.raw,size=16M", "lock: backup\n")
    assert "is locked (backup)" in _rootfs_findings(e, vmid)["LXF236"]["message"]
    _conf(pve, vmid, f"local:{vmid}/vm-{vmid}-disk-0.raw,size=16M")
    loop = subprocess.run(["losetup", "-f", "--show", "-r", img], capture_output=True, text=True)
    assert loop.returncode == 0, loop.stderr
    try:
        found = _rootfs_findings(e, vmid)
        assert "in use: attached to " + loop.stdout.strip() in found["LXF236"]["message"], found
    finally:
        subprocess.run(["losetup", "-d", loop.stdout.strip()], check=True)
    with open(img, "r+b") as f:
        f.write(b"LUKS\xba\xbe\x00\x02")
    found = _rootfs_findings(e, vmid)
    assert "is encrypted (LUKS)" in found["LXF236"]["message"], found
    assert "LXF230" not in found


def test_a_stopped_containers_zfs_dataset_is_read_where_it_is_mounted(pve, env, tmp_path):
    vmid = pve.new_vmid()
    mountpoint = tmp_path / "rpool" / "data"
    dataset = mountpoint / f"subvol-{vmid}-disk-0"
    dataset.mkdir(parents=True)
    _tree(dataset)
    _storage(pve, f"dir: local\n\tpath /var/lib/vz\n\tcontent iso\n\n"
                  f"zfspool: local-zfs\n\tpool rpool/data\n\tmountpoint {mountpoint}\n\tsparse\n"
                  "\tcontent images,rootdir\n")
    _conf(pve, vmid, f"local-zfs:subvol-{vmid}-disk-0,size=8G")
    e = {**env, **pve.env()}
    found = _rootfs_findings(e, vmid)
    assert "is not mounted at" in found["LXF236"]["message"], found  # a dir that is no mount point
    assert "LXF230" not in found
    subprocess.run(["mount", "--bind", str(dataset), str(dataset)], check=True)  # the tests' namespace
    try:
        found = _rootfs_findings(e, vmid)
        assert "LXF230" in found and "LXF236" not in found, found
    finally:
        subprocess.run(["umount", str(dataset)], check=True)


@pytest.fixture
def block_volume(pve, tmp_path):
    """`local-lvm:vm-VMID-disk-0` as LvmThinPlugin's path() names it, /dev/VG/NAME, a real block
    device: this kernel has no device-mapper (no thin pool can be made here), so the VG is a
    tmpfs over /dev/shm in the tests' private mount namespace ("shm") holding a node of a real
    loop device whose image is an ext4 file system. Detached and unmounted at teardown, always."""
    vmid = pve.new_vmid()
    img = str(tmp_path / "lv.img")
    r = subprocess.run(["mkfs.ext4", "-q", "-F", "-d", _tree(tmp_path / "tree"), img, "16M"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    loop = subprocess.run(["losetup", "-f", "--show", "-r", img], capture_output=True, text=True)
    assert loop.returncode == 0, loop.stderr
    dev = loop.stdout.strip()
    mounted = []
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "lxf-vg", "/dev/shm"], check=True)
        mounted.append("/dev/shm")
        st = os.stat(dev)
        os.mknod(f"/dev/shm/vm-{vmid}-disk-0", 0o600 | 0o060000, st.st_rdev)
        _storage(pve, "lvmthin: local-lvm\n\tthinpool data\n\tvgname shm\n\tcontent rootdir,images\n")
        yield vmid, dev, mounted
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", m])
        subprocess.run(["losetup", "-d", dev])


def test_a_stopped_containers_lvm_volume_is_mounted_read_only_and_in_use_is_said(block_volume, pve, env, tmp_path):
    vmid, dev, mounted = block_volume
    _conf(pve, vmid, f"local-lvm:vm-{vmid}-disk-0,size=16M")
    e = {**env, **pve.env()}
    found = _rootfs_findings(e, vmid)
    assert "LXF230" in found and "LXF236" not in found, found
    assert not any(dev in line.split(" ")[:1] for line in open("/proc/self/mounts"))  # nothing left mounted
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["mount", "-o", "ro,noload", dev, str(elsewhere)], check=True)
    mounted.append(str(elsewhere))
    found = _rootfs_findings(e, vmid)
    assert f"is in use: mounted at {elsewhere}" in found["LXF236"]["message"], found


def test_the_stand_ins_pct_mount_agrees_with_proxmox_and_lxcfix_reads_the_mounted_root(raw_volume, pve, env):
    """pct.pm `mount`: check_lock, set_lock 'mounted', mount_all at /var/lib/lxc/VMID/rootfs and
    its message; `unmount`: umount_all, remove_lock. The raw image is found as Plugin.pm's
    filesystem_path puts it. While mounted, lxcfix reads the root there (the `lock: mounted` is
    pct's own, not a reason to skip it)."""
    vmid, img = raw_volume
    e = {**env, **pve.env()}
    root = os.path.join("/var/lib/lxc", vmid, "rootfs")
    _conf(pve, vmid, f"local:{vmid}/vm-{vmid}-disk-0.raw,size=16M", "lock: backup\n")
    r = pve.pct("mount", vmid)
    assert r.rc == 255 and r.stderr.strip() == "CT is locked (backup)" and not os.path.isdir(root)
    _conf(pve, vmid, f"local:{vmid}/vm-{vmid}-disk-0.raw,size=16M")
    try:
        r = pve.pct("mount", vmid)
        assert r.ok and r.stdout.strip() == f"mounted CT {vmid} in '{root}'", r.stderr
        assert "lock: mounted" in open(os.path.join(pve.conf_dir, f"{vmid}.conf")).read()
        assert root in harness.mounts_under(root)
        found = _rootfs_findings(e, vmid)
        assert "LXF230" in found and "LXF236" not in found, found
    finally:
        r = pve.pct("unmount", vmid)
        harness.safe_rmtree(os.path.join("/var/lib/lxc", vmid))
    assert r.ok and "lock:" not in open(os.path.join(pve.conf_dir, f"{vmid}.conf")).read()
    assert _loops_of(img) == ""
