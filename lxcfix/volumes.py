"""A stopped Proxmox container's root volume, found through storage.cfg (pvestorage) and, where
it is an image file or a block device, mounted read-only in a private mount namespace for the
rootfs reader. Thin I/O.

    stopped_volume(Local(), Proxmox(), "200", config)
        -> Volume("image", "/var/lib/vz/images/200/vm-200-disk-0.raw", "local", "dir")
    mount_argv(vol, "/usr/bin/python3", 30.0, files, exists)
        -> ["unshare", "--mount", "--propagation", "private", "--", "/usr/bin/python3", "-c", TEXT,
            "30", "/var/lib/vz/images/200/vm-200-disk-0.raw", CAP, N, *files, *exists]

The command mounts nothing the host sees: `unshare` gives it its own mount namespace (private
propagation), the volume is mounted there on a tmpfs over /run (`ro,noload` for ext4: the
journal is not replayed; `ro,norecovery` for XFS; nosuid,nodev,noexec), then the same fenced
reader as a running container's (fence.rootfs_command) reads it. The namespace dies with the
process, SIGKILL at the deadline included, and the loop device (autoclear) with it. Nothing is
mounted where the volume is in use (mounted elsewhere, or the image already on a loop device),
encrypted (LUKS) or of a file system lxcfix does not know: the command answers
`not checked: why` (exit 124), as the reader does for a path that hung.
"""

from __future__ import annotations

from . import pvestorage
from .model import HOST_PYTHON

# Runs before the reader's own main, in the private namespace: argv is the reader's, with the
# volume where its ROOT goes; it becomes the mount point.
MOUNT_PRE = r'''
import os, subprocess, sys

def _refuse(why):
    sys.stderr.write("not checked: " + why + "\n")
    sys.exit(124)

def _mount_volume(src):
    try:
        st = os.stat(src)
    except OSError as e:
        _refuse("%s: %s (an LVM volume not activated, an RBD image not mapped, a storage not mounted)"
                % (src, e.strerror))
    import stat as _stat
    block = _stat.S_ISBLK(st.st_mode)
    if not block and not _stat.S_ISREG(st.st_mode):
        _refuse("%s is neither an image file nor a block device" % src)
    try:
        with open("/proc/self/mountinfo") as f:
            table = f.read(4 << 20)
    except OSError:
        table = ""
    if block:
        dev = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        for line in table.split("\n"):
            f = line.split(" ")
            if len(f) > 4 and f[2] == dev:
                _refuse("%s is in use: mounted at %s" % (src, f[4][:200]))
    else:
        real = os.path.realpath(src)
        try:
            loops = os.listdir("/sys/block")
        except OSError:
            loops = []
        for name in loops:
            try:
                with open("/sys/block/%s/loop/backing_file" % name) as f:
                    backing = f.read(4096).strip()
            except OSError:
                continue
            if backing == real:
                _refuse("%s is in use: attached to /dev/%s" % (src, name))
    try:
        with open(src, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        _refuse("%s: %s" % (src, e.strerror))
    if head[:6] == b"LUKS\xba\xbe":
        _refuse("%s is encrypted (LUKS)" % src)
    if head[1080:1082] == b"\x53\xef":
        fstype, opts = "ext4", "ro,noload"
    elif head[:4] == b"XFSB":
        fstype, opts = "xfs", "ro,norecovery"
    else:
        _refuse("%s holds no ext4 or XFS file system lxcfix mounts" % src)
    opts += ",nosuid,nodev,noexec" + ("" if block else ",loop")
    where = "/run/lxcfix-volume"
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "lxcfix", "/run"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.mkdir(where, 0o700)
    except (OSError, subprocess.CalledProcessError) as e:
        said = getattr(e, "stderr", b"") or str(e).encode()
        _refuse("no private mount point: %s" % said[:200].decode("utf-8", "replace"))
    r = subprocess.run(["mount", "-t", fstype, "-o", opts, src, where], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if r.returncode:
        _refuse("mounting %s read-only refused: %s" % (src, r.stderr[:300].decode("utf-8", "replace").strip()))
    return where

sys.argv[2] = _mount_volume(sys.argv[2])
'''


def stopped_volume(t, backend, ct: str, config) -> pvestorage.Volume | None:
    """The root volume of a stopped Proxmox container on the host `t` reads (this machine or a
    snapshot), from its `rootfs:` and the cluster's storage.cfg; a "none" Volume says why it is
    not read (locked, unknown storage, dataset not mounted). None: nothing to resolve (no
    `rootfs:` or no storage.cfg), the caller keeps /var/lib/lxc/VMID/rootfs (`pct mount`)."""
    value = (config.get("rootfs") or "").strip()
    if not value:
        return None
    lock = (config.get("lock") or "").strip()
    if lock:
        return pvestorage.Volume("none", why=f"CT {ct} is locked ({pvestorage.excerpt(lock, 30)}): its volume "
                                 "may be changing; `pct unlock` once that is over")
    try:
        text = t.read(f"{backend.pve_dir}/storage.cfg").decode("utf-8", "replace")
    except OSError:
        return None
    try:
        mounted = pvestorage.mountpoints(t.read("/proc/self/mountinfo").decode("utf-8", "replace"))
    except OSError:
        mounted = None
    return pvestorage.locate(pvestorage.parse(text), ct, value, mounted)


def mount_argv(vol: pvestorage.Volume, python: str = HOST_PYTHON, timeout: float = 30.0,
               files=(), exists=()) -> list[str]:
    """The reader of an image or block volume, mounted read-only in its own mount namespace
    (module docstring); argv only, the reader's own arguments after the program."""
    from . import fence, rootfs

    return ["unshare", "--mount", "--propagation", "private", "--", python, "-c",
            MOUNT_PRE + fence.rootfs_command(), f"{timeout:g}", vol.path, str(rootfs.FILE_MAX),
            str(len(files)), *files, *exists]
