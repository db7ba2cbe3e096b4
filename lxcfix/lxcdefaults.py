"""LXC's and Proxmox's own config files, for hosts whose copies we cannot read
(a snapshot may hold only /etc/pve). The host's own files win when readable.

Only the lines that matter to devices and mounts are kept; the text is LXC
5.0's `common.conf` / `userns.conf` and pve-container's `lxc-pve-userns.conf`.
"""

from __future__ import annotations

LXC_CONFIG_DIR = "/usr/share/lxc/config"

COMMON_CONF = b"""\
lxc.cgroup2.devices.deny = a
lxc.cgroup2.devices.allow = c *:* m
lxc.cgroup2.devices.allow = b *:* m
lxc.cgroup2.devices.allow = c 1:3 rwm
lxc.cgroup2.devices.allow = c 1:5 rwm
lxc.cgroup2.devices.allow = c 1:7 rwm
lxc.cgroup2.devices.allow = c 5:0 rwm
lxc.cgroup2.devices.allow = c 5:1 rwm
lxc.cgroup2.devices.allow = c 5:2 rwm
lxc.cgroup2.devices.allow = c 1:8 rwm
lxc.cgroup2.devices.allow = c 1:9 rwm
lxc.cgroup2.devices.allow = c 136:* rwm
lxc.cgroup2.devices.allow = c 10:229 rwm
lxc.mount.entry = /sys/fs/fuse/connections sys/fs/fuse/connections none bind,optional 0 0
lxc.include = /usr/share/lxc/config/common.conf.d/
"""

USERNS_CONF = b"""\
lxc.cgroup.devices.deny =
lxc.cgroup.devices.allow =
lxc.cgroup2.devices.deny =
lxc.cgroup2.devices.allow =
lxc.include = /usr/share/lxc/config/userns.conf.d/
"""

# pve-container installs this as userns.conf.d/01-pve.conf (Proxmox VE 7.0+):
# unprivileged containers run in denylist mode.
PVE_USERNS_CONF = b"""\
lxc.cgroup2.devices.deny =
lxc.cgroup2.devices.allow =
lxc.cgroup2.devices.allow = a
"""

BUILTIN: dict[str, bytes] = {
    f"{LXC_CONFIG_DIR}/common.conf": COMMON_CONF,
    f"{LXC_CONFIG_DIR}/userns.conf": USERNS_CONF,
    f"{LXC_CONFIG_DIR}/common.conf.d/": b"",
    f"{LXC_CONFIG_DIR}/userns.conf.d/": b"",
}

PVE_BUILTIN: dict[str, bytes] = {
    **BUILTIN,
    f"{LXC_CONFIG_DIR}/userns.conf.d/": PVE_USERNS_CONF,
}
