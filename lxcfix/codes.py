"""Every finding code as one record: what it means and what lxcfix does with it. Pure data.

A code's record is the one place that says its severity, the rule family that
emits it, the Finding fields that carry its subject, whether a verified change
leaves none of it, whether a live apply repairs it, how `causes` folds it,
what `lxcfix audit` and the Proxmox hook do with it, and its `lxcfix explain`
text (like ruff's rule registry). Every other table is derived from these
records (`where`, `must_be_absent`), and `make` builds a Finding with its
record's severity.

What it means, for `lxcfix explain CODE` (like `ruff rule`):

    CODES["LXF210"] == Code(code="LXF210", severity="error", title="probe: cuInit failed ...",
                            meaning="...", knows="...", fixes=(("devn", "..."), ...), false_alarm="...",
                            table=H200)
    explain("lxf210")  -> [(text, role), ...]      roles: "title", "heading", "text", "table", "fix"

Every code in the README's finding table has an entry here, and every code the
rules can emit is in that table (tests/unit/test_explain.py reads both): a new
code needs its README row and an entry here. "How lxcfix knows" names the
measured facts behind a check (the H200 ground truth, LXC's compiled programs),
so an admin can judge a finding, not only obey it.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from .model import Finding, Severity

# Measured on a real NVIDIA H200, driver 580.159.04 (open kernel module), cgroup v2: one device
# denied at a time by a BPF device program on the process's cgroup
# (tests/unit/fixtures/ground-truth/nvidia-h200-cgroup-deny.json; test_explain.py checks this copy).
H200 = (
    ("denied", "open() of that node", "cuInit(0)", "nvidia-smi -L"),
    ("nothing (baseline)", "ok", "0 CUDA_SUCCESS", "lists the GPU, rc 0"),
    ("nvidia-uvm (M:*)", "EPERM", "999 CUDA_ERROR_UNKNOWN", "works, rc 0"),
    ("nvidia-uvm-tools only (M:1)", "EPERM", "0", "works, rc 0"),
    ("nvidiactl (195:255)", "EPERM", "100 CUDA_ERROR_NO_DEVICE", "\"Failed to initialize NVML: Unknown Error\", rc 255"),
    ("nvidia0 (195:0)", "EPERM", "100 CUDA_ERROR_NO_DEVICE", "\"No devices found.\", rc 0"),
    ("all of 195", "EPERM", "100 CUDA_ERROR_NO_DEVICE", "\"Failed to initialize NVML: Unknown Error\", rc 255"),
    ("nvidia-caps (non-MIG GPU)", "EPERM", "0", "works, rc 0"),
)
H200_WHERE = ("Measured on an NVIDIA H200, driver 580.159.04, cgroup v2, one device denied at a time: "
              "the ground truth lxcfix's probe is tested against.")

STYLES = ("devn", "path", "numeric")
# The audit occasions (`lxcfix audit --for`), for the records' `predicts`.
ALL = ("reboot", "driver-upgrade", "kernel-upgrade", "lxc-upgrade", "pve-upgrade")
SEVERITIES = ("error", "warning", "info")
VERIFY = ("", "always", "fixed")


@dataclass(frozen=True)
class Code:
    code: str
    severity: str
    title: str
    meaning: str
    knows: str  # how lxcfix knows: the check and the measured facts behind it
    fixes: tuple[tuple[str, str], ...]  # (style, or "any", how to fix it by hand)
    false_alarm: str
    table: tuple[tuple[str, ...], ...] = ()  # a measured table shown with `knows`
    # What lxcfix does with it. Every other table that names codes is derived from these.
    family: str = ""  # the rules module (or layer: "scan") that emits it
    subject: tuple[str, ...] = ()  # the Finding fields that say what it is about: device, numbers, rule, line
    severities: tuple[str, ...] = ()  # the other severities one finding may carry (the emitter says when)
    verify: str = ""  # "always": a verified change leaves none; "fixed": none on a node whose fix of this kind the plan made
    live: bool = False  # a live apply (lxc-cgroup, lxc-device) can repair it when the plan's change can be made live
    kind: str = ""  # the failure kind `causes` folds a device family by: cgroup-denies, not-passed-in, ...
    node: bool = False  # folds into the cause of the device node it names, whatever its kind
    once: bool = False  # at most once per container (or host): its cause id is the code
    hook: str = ""  # the Proxmox pre-start hook: "block" (fail mode refuses the start, heal mode repairs it)
    audit: str = ""  # how `lxcfix audit` states it (the audit's handler), "" when the audit does not list it
    predicts: tuple[str, ...] = ()  # the audit occasions for which it says what WILL happen (else "may")

    def allows(self, severity: str) -> bool:
        return severity == self.severity or severity in self.severities

    def to_json(self) -> dict:
        return {"code": self.code, "severity": self.severity, "title": self.title, "meaning": self.meaning,
                "how_lxcfix_knows": self.knows, "fix_by_hand": dict(self.fixes), "false_alarm": self.false_alarm,
                "measured": [list(r) for r in self.table]}


_DENIED_FIXES = (
    ("devn", "Proxmox VE 8.1+: replace the node's bind mount with `devN: /dev/nvidia-uvm` (and one per node, "
             "e.g. `dev1: /dev/nvidia-uvm-tools`); Proxmox stat()s the path at every start and emits the exact "
             "allow rule itself, so a moved major cannot break it. NVIDIA nodes want `,mode=0666` (Proxmox "
             "creates a devN node 0660 root:root unless told)."),
    ("path", "`lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm` (Proxmox) or `lxc.cgroup2.devices.allow = "
             "/dev/nvidia-uvm rwm` (LXC), one per node, next to its mount entry: LXC stat()s the path at every "
             "start (LXC 4+). A path that is missing at start is skipped with 'Failed to parse device rule'."),
    ("numeric", "`lxc.cgroup2.devices.allow: c MAJOR:* rwm` with the major from the host's /proc/devices "
                "(`grep nvidia-uvm /proc/devices`); on a shared major (1, 4, 5, 7, 10, 13) the exact minor "
                "instead: tun is `c 10:200 rwm`, fuse `c 10:229 rwm`, kvm `c 10:232 rwm`. A dynamic major breaks "
                "again when it moves (LXF103)."),
    ("any", "Restart the container, or change the running one in place: "
            "`lxc-cgroup -n CT devices.allow 'c MAJOR:* rwm'`. `lxcfix apply --ct CT` (or `--live`) does "
            "all of it with a backup, a verify and a rollback."),
)

_NVIDIA_NODE_FIXES = (
    ("any", "Fix the node it names: EPERM (the cgroup) is LXF100/LXF200, a stale major LXF101, a node absent "
            "inside LXF202/LXF112, a version mismatch LXF212. `lxcfix diagnose --ct CT` folds this finding "
            "under that cause and shows the one command."),
)

CODES: dict[str, Code] = {c.code: c for c in (
    Code(
        "LXF100", "error",
        "a device the container is given has no matching cgroup2 allow rule",
        "The container is given a device node (a bind mount or a Proxmox devN entry) and the node is there "
        "inside, but the container's cgroup v2 device policy does not allow its major:minor, so open() "
        "inside gives EPERM even with mode crw-rw-rw-. LXC compiles the lxc.cgroup2.devices.allow/deny "
        "lines into a BPF device program on the container's cgroup; a privileged container starts from "
        "LXC's common.conf (`deny a`, then a short allowlist), so every other device must be allowed. "
        "For /dev/nvidia-uvm the symptom is CUDA's 'unknown error' (999) while nvidia-smi looks fine.",
        "lxcfix replays what lxc-start applies: the config, its includes (LXC's common.conf and "
        "userns.conf, Proxmox's own files, or their built-in copies for a snapshot), Proxmox's generated "
        "lines, LXC's list semantics (`allow a` and `deny a` switch modes; only rules of the mode's "
        "polarity are compiled), and the host's majors from /proc/devices; then checks each given node. "
        "Measured on LXC 5.0.2 and 6.0.4: a bind-mounted node whose major is not allowed gives EPERM, "
        "and the BPF programs LXC attached were byte-identical to the ones lxcfix computes "
        "(tests/unit/test_gpu_replay.py replays the programs read on an H200 host). A running container "
        "is also probed inside (LXF200) and its attached program decoded (LXF121).",
        _DENIED_FIXES,
        "The host runs a hybrid cgroup layout (LXF300): cgroup2 rules are ignored there and v1 rules "
        "count. Something outside the files lxcfix reads grants the device at start (a hookscript, an "
        "lxc.hook that calls lxc-cgroup). An unprivileged container is in denylist mode and never gets "
        "LXF100. When the container runs, the probe settles it: no LXF200 for the node means open() "
        "works inside, and this finding is wrong (please report it).",
        family="allowlist", subject=("device", "numbers", "line"), verify="always", live=True,
        kind="cgroup-denies", node=True, hook="block", audit="broken_now",
    ),
    Code(
        "LXF101", "error",
        "stale major: an allow rule points at a major the device no longer has",
        "A numeric allow rule such as `c 508:* rwm` was written for a device whose major is dynamic; "
        "the kernel gave the driver another major at its last load (nvidia-uvm 508 -> 511 after a reboot "
        "or a driver upgrade), so the rule allows nothing and the device is denied (EPERM).",
        "The rule's major is held by no driver in the host's /proc/devices, and a given device of the "
        "same kind (and minor, when the rule has one) is denied at its current major: the two are "
        "paired. The kernel hands out dynamic char majors at module load, from 254 down to 234 and then "
        "511 down to 384; nvidia-uvm has been seen at 234, 238, 239, 487, 509 and 511.",
        (("devn", "Replace the rule and the node's bind mounts with `devN: /dev/nvidia-uvm,mode=0666` "
                  "entries (Proxmox VE 8.1+): they follow the major."),
         ("path", "Replace the rule with `lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm` and "
                  "`... /dev/nvidia-uvm-tools rwm`: resolved at every start."),
         ("numeric", "Change the major to the current one (`grep nvidia-uvm /proc/devices`): "
                     "`lxc.cgroup2.devices.allow: c 511:* rwm`. It breaks again at the next move."),
         ("any", "Restart the container (or `lxcfix apply --ct CT --live`).")),
        "The driver is not loaded right now, so its major is missing from /proc/devices and the rule "
        "only looks stale: load the module (for NVIDIA, `nvidia-modprobe -u -c0`) and scan again. A "
        "snapshot's proc/devices taken at another moment than its configs can mislead the same way.",
        family="allowlist", subject=("device", "numbers", "rule", "line"), verify="always", live=True,
        kind="cgroup-denies", node=True, hook="block", audit="broken_now",
    ),
    Code(
        "LXF102", "error",
        "cgroup v1 device key on a cgroup v2 host (ignored silently)",
        "`lxc.cgroup.devices.allow/deny` are cgroup v1 keys. On a host with the unified cgroup v2 "
        "hierarchy (Proxmox VE 7+) LXC applies only `lxc.cgroup2.*`, so the rule does nothing and the "
        "device stays denied. pve-container 6.1.6 warns that they will be an error; LXC 7.0 refuses them "
        "('Unsupported config key') and the container does not start.",
        "The host's layout comes from its mount table (/proc/self/mountinfo): one cgroup2 mount on "
        "/sys/fs/cgroup is v2. A v1 rule whose v2 twin is also in the config (dual-stack configs) is fine "
        "and not reported.",
        (("any", "Rename the key and keep the value and its place: `lxc.cgroup.devices.allow: c 195:* rwm` "
                 "becomes `lxc.cgroup2.devices.allow: c 195:* rwm` (the same in every style; `lxcfix apply` "
                 "converts these first, then adds only what is still missing). Restart the container."),),
        "On a hybrid or v1 host the v1 keys are the ones enforced (LXF300), and lxcfix does not report "
        "them there.",
        family="hygiene", subject=("line",), live=True, audit="v1_key",
    ),
    Code(
        "LXF103", "warning",
        "numeric rule pins a dynamic major (breaks on reboot / driver upgrade)",
        "A rule like `c 238:* rwm` for nvidia-uvm works today, but the kernel chooses that major when "
        "the module loads. After the next reboot or driver upgrade it can be another one, and the device "
        "is denied: EPERM, CUDA error 999 (then LXF101).",
        "The rule's major belongs, in the host's /proc/devices, to a driver whose major is not fixed "
        "(nvidia-uvm, nvidia-caps, kfd: the catalog knows which are static, e.g. 195 nvidia, 226 drm, "
        "10 misc). `lxcfix audit --for reboot|driver-upgrade` lists these before maintenance.",
        (("devn", "`devN: /dev/nvidia-uvm,mode=0666` (and one per node) instead of the rule and the bind "
                  "mounts: `lxcfix plan --ct CT --style devn` writes it."),
         ("path", "`lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm` per node instead of the numeric rule: "
                  "`lxcfix plan --ct CT --style path` writes it."),
         ("numeric", "No numeric rule survives a move: keep it, and run `lxcfix audit --for driver-upgrade` "
                     "before each upgrade.")),
        "Nothing is broken now: it is a warning. If something on the host pins the major itself (a "
        "module option or a unit that recreates the node with a fixed number), the risk is gone; lxcfix "
        "cannot see that.",
        family="hygiene", subject=("line",), audit="pinned",
    ),
    Code(
        "LXF104", "warning",
        "over-broad rule",
        "`a`, `c *:* rwm`, `b *:* rwm`, any block wildcard, or a wildcard minor on a shared major (1 "
        "mem, 4/5 tty, 7 vcs, 10 misc, 13 input) grants far more than the device it was meant for: "
        "`c 10:* rwm` for tun also grants /dev/mapper/control, /dev/loop-control, /dev/kvm and "
        "/dev/btrfs-control. It is the rule that hides the next missing one, and the one copied from "
        "forum answers.",
        "The rule is parsed as LXC does; the shared majors are those the kernel's device list gives to "
        "many unrelated drivers. lxcfix itself never writes such a rule.",
        (("any", "Replace it with exact rules for what the container is given: `c 10:200 rwm` (tun), "
                 "`c 10:229 rwm` (fuse), `c 10:232 rwm` (kvm), a path rule for dynamic majors. "
                 "`lxcfix audit` shows the exact lines. Never applied for you: it takes "
                 "access away, which is the admin's call."),),
        "The container really needs broad device access (nested containers, a device manager inside): "
        "then it is a choice, and the warning can be ignored.",
        family="hygiene", subject=("line",), audit="overbroad",
    ),
    Code(
        "LXF110", "error",
        "device allowed but not passed in",
        "The config allows a device's major but gives the container no node for it: no lxc.mount.entry "
        "and no devN entry. Inside, the node is absent, so whatever needs it fails; usually half of a "
        "copied recipe.",
        "Each allow rule is mapped to a device family through the host's /proc/devices and the catalog; "
        "the given nodes come from mount entries (directory mounts included) and devN entries. fuse is "
        "exempt: LXC's common.conf allows it, and Proxmox adds the mount for `features: fuse=1`.",
        (("devn", "`devN: /dev/dri/renderD128` (Proxmox VE 8.1+): node and rule in one line."),
         ("path", "`lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file`."),
         ("numeric", "The same mount entry; the numeric rule you have stays.")),
        "The container makes the node itself with mknod (common.conf allows `c *:* m`, so mknod works "
        "and only open() is policed), or the rule is left over on purpose.",
        family="allowlist", subject=("device", "rule", "line"), verify="always", live=True, kind="not-passed-in",
        node=True,
    ),
    Code(
        "LXF111", "warning",
        "device bind mount without `optional` for a node that can be absent at start",
        "A bind mount of a node that can be missing when the container starts (a driver not loaded "
        "yet, /dev/nvidia-uvm before nvidia-modprobe, an unplugged USB adapter) without `optional`: "
        "LXC then refuses to start the container.",
        "The mount options are read from the entry; nodes a host always has once booted (/dev/net/tun, "
        "/dev/fuse, /dev/kvm) are not reported.",
        (("any", "Add `optional` (and `create=file`): `lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none "
                 "bind,optional,create=file`. A devN entry fails the start the same way when its path is "
                 "missing: make the node exist at boot (`lxcfix host-fix`)."),),
        "You want the start to fail without the device (no container is better than one without its "
        "GPU): keep the mount as it is.",
        family="hygiene", subject=("device", "line"), audit="not_optional",
    ),
    Code(
        "LXF112", "error",
        "device node missing on the host",
        "A node the container is given does not exist on the host. /dev/nvidia-uvm appears only when "
        "something runs `nvidia-modprobe -u -c=0` (or a CUDA program runs on the host as root), so "
        "containers autostarted at boot come up without it. With devN the start fails ('Device /dev/x "
        "does not exist'); with a mount lacking `optional` LXC refuses to start; with `optional` the "
        "container starts without it (and `create=file` leaves an empty file: LXF203).",
        "The host path is stat()ed (for a snapshot without dev/, the catalog and /proc/devices stand in). "
        "Measured: `optional,create=file` with a missing source leaves a mode-000 regular file at the "
        "target.",
        (("any", "Create it now (`nvidia-modprobe -u -c0` for nvidia-uvm and nvidia-uvm-tools; "
                 "`nvidia-modprobe -c0` for /dev/nvidia0), and at every boot before the guests start: "
                 "`lxcfix host-fix --yes` installs lxcfix-nvidia-nodes.service "
                 "(Before=pve-guests.service). Other devices: load the driver, or fix the path."),),
        "The device is unplugged or removed on purpose. For a snapshot: it was taken while the module "
        "was not loaded.",
        family="allowlist", subject=("device", "line"), kind="missing-on-host", node=True, hook="block",
        audit="missing_on_host",
    ),
    Code(
        "LXF113", "warning",
        "`/dev/dri/cardN` (or one of several renderD nodes): numbering can flip between boots",
        "/dev/dri/card0 and renderD128 are named in probe order. After a reboot another GPU (or "
        "simpledrm/efifb) can take card0, and the container gets the wrong GPU, or (devN) does not "
        "start. /dev/dri/by-path names a GPU by its PCI address, which does not change.",
        "The given path is a cardN node, or one of several renderD nodes on the host; the host's "
        "/dev/dri/by-path links give the stable name when lxcfix can read them.",
        (("any", "Pass the stable name in and keep the name inside: `lxc.mount.entry: "
                 "/dev/dri/by-path/pci-0000:01:00.0-render dev/dri/renderD128 none bind,optional,create=file` "
                 "(find yours with `ls -l /dev/dri/by-path/`). A privileged container also needs the "
                 "rule: the path form `/dev/dri/by-path/pci-...-render rwm`, or `c 226:* rwm`. A devN "
                 "entry keeps its path inside, so it cannot rename the node: use the mount."),),
        "A host with one GPU and no simpledrm/efifb framebuffer: the index does not change.",
        family="foresight", subject=("device", "line"),
    ),
    Code(
        "LXF114", "warning",
        "unprivileged container: the service's group (render, video) cannot open the node",
        "In an unprivileged container a node's owner and group are seen through the idmap. A devN "
        "entry without `gid=` is created root:root 0660, and a host node whose group is not mapped shows "
        "as nogroup: root inside can open it, but jellyfin, plex, frigate or ollama in the container's "
        "render or video group get EACCES.",
        "From the config, the idmap (`lxc.idmap`, or Proxmox's default `u|g 0 100000 65536`) and the "
        "host node's owner and mode: lxcfix works out who inside is owner and group of each render, card, "
        "kfd, video or serial node and whether the group bits let the container's group in. Measured on "
        "real idmapped containers: a devN node without gid= is 100000:100000 0660 on the host (root:root "
        "inside) and a member of render gets EACCES.",
        (("devn", "Proxmox VE 8.1+: `devN: /dev/dri/renderD128,gid=GID` with GID the container's own group "
                  "(`pct exec CT -- getent group render`); a bind mount becomes a devN entry."),
         ("path", "Map the host group onto the container's group: `lxc.idmap` lines that split `g 0 100000 "
                  "65536` around GID (`g GID HOSTGID 1`), and `root:HOSTGID:1` in /etc/subgid "
                  "(`lxcfix apply --write-subgid` writes it, backed up). Never for a host group that grants "
                  "anything on the host (gid 0, shadow, disk, kmem, sudo, adm, a system gid under 100 that is "
                  "not the node's own): give the node a group of its own with a udev rule first."),
         ("numeric", "The same idmap change; `--mode-0666` (devN `mode=0666`) lets every user in instead.")),
        "The service runs as root inside, or its user is in a group the node's mode lets in by other means "
        "(an ACL inside the container). The probe's open as the member (LXF204/LXF205) settles it.",
        family="access", subject=("device",), verify="fixed", kind="no-access", audit="group_access",
    ),
    Code(
        "LXF115", "error",
        "unprivileged container: a bind-mounted node nobody inside can open, root included",
        "A bind mount shows the host node as it is. When neither its owner nor its group is mapped into "
        "the container, inside it is nobody:nogroup, only the 'other' bits count, and with mode 0660 no "
        "user can open it: root inside is just another unmapped uid.",
        "The host node's uid, gid and mode against the container's idmap. Measured on a real idmapped "
        "container: a bind-mounted root:993 0660 node gives EACCES to root inside.",
        (("devn", "Proxmox VE 8.1+: replace the bind mount with `devN: /dev/kfd,gid=GID` (Proxmox creates the "
                  "node inside with the mapped owner)."),
         ("path", "Pass the host group through with `lxc.idmap` lines and `root:HOSTGID:1` in /etc/subgid "
                  "(never gid 0, shadow, disk, kmem, sudo, adm or another system gid under 100: a udev rule "
                  "giving the node its own group instead)."),
         ("numeric", "The same idmap change; or a udev rule on the host that gives the node mode 0666.")),
        "The node's mode lets 'other' in (0666): then anyone inside can open it and lxcfix does not report it.",
        family="access", subject=("device",), verify="fixed", kind="no-access", audit="group_access",
    ),
    Code(
        "LXF116", "error",
        "MIG: a container given an NVIDIA GPU has no /dev/nvidia-caps",
        "The host's GPUs have MIG instances (GPU and compute instances), and the container is given an "
        "NVIDIA GPU node but not /dev/nvidia-caps. With MIG, CUDA opens the capability node of the instance "
        "it uses (/dev/nvidia-caps/nvidia-capN, a dynamic major, nvidia-caps in /proc/devices): without it "
        "inside (or without an allow rule for its major), CUDA cannot use the instance, even where "
        "nvidia-smi still lists it.",
        "The host's /dev/nvidia-caps holds nodes beyond nvidia-cap1 and nvidia-cap2 (MIG's config and "
        "monitor capabilities, which every host with nvidia-caps has: each GPU or compute instance gets its "
        "own), or nvidia-smi -L inside lists MIG devices; the config's mount entries and devN entries give "
        "the container /dev/nvidiaN but no node under /dev/nvidia-caps. On a GPU without MIG the caps "
        "nodes do not matter (measured on an H200: nvidia-caps denied, CUDA works), and lxcfix says nothing. "
        "A /dev/nvidia-caps that is mounted but not allowed is LXF100; an allow rule for its major without "
        "the mount is LXF110.",
        (("any", "Bind the directory: `lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none "
                 "bind,optional,create=dir`, and allow its major: `lxc.cgroup2.devices.allow: c MAJOR:* rwm` "
                 "with MAJOR from `grep nvidia-caps /proc/devices` (or a path rule per node), then restart. "
                 "The whole directory also passes nvidia-cap1 (MIG configuration) and nvidia-cap2 (monitoring): "
                 "for a container that should only use its instances, bind just their nodes (the minor is in "
                 "/proc/driver/nvidia/capabilities/gpuN/mig/giM/access and .../ciK/access)."),),
        "The container is meant to use the whole GPU of a host whose other GPUs have MIG instances "
        "(lxcfix cannot tell which GPU a MIG instance is on from the nodes), or the container never runs "
        "CUDA.",
        family="allowlist", subject=("device",),
    ),
    Code(
        "LXF120", "info",
        "config has `lock:`; apply refuses",
        "`lock: backup|migrate|snapshot|...`: Proxmox is working on the container (a backup, a migration, "
        "a snapshot). Editing the config now can corrupt that operation, so lxcfix reports what it finds "
        "but does not apply.",
        "The `lock:` line of the config's main section.",
        (("any", "Wait for the task to finish and run the command again. If the lock is stale (the task "
                 "that set it died), `pct unlock VMID`."),),
        "Informational: nothing is wrong with the devices because of it.",
        family="host", once=True,
    ),
    Code(
        "LXF121", "warning",
        "running allowlist (decoded from the BPF program) differs from the config",
        "The device program attached to the running container's cgroup is not what the config on disk "
        "compiles to: the config was edited without a restart, or the running program was changed live "
        "(lxc-cgroup). The next restart changes what the container can open, for better or worse.",
        "lxcfix reads the attached program with the bpf() syscalls (BPF_PROG_QUERY on the cgroup, "
        "BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD for the translated instructions; bpftool as a "
        "fallback) and decodes LXC's generated code (one block per rule, in reverse config order). "
        "Measured: LXC 5.0.2 and 6.0.4 generate byte-identical programs, equal to what lxcfix encodes. "
        "The program is read at the container's limit cgroup (`lxc.payload.<name>`, Proxmox's "
        "`lxc/<vmid>`, found in the init's cgroup path), never at the init's own cgroup below it: a "
        "privileged container's root can move its init into a cgroup it made and attach a program of "
        "its own there (the evidence names it), while the kernel still runs LXC's. "
        "`lxc-info -c KEY` reads the file, not the running state, so it cannot tell.",
        (("any", "Restart the container to load the config, or `lxcfix apply --ct CT --live` to make the "
                 "running program match the (fixed) config."),),
        "A deliberate live change not yet written down; or another tool attached its own device "
        "program to the cgroup (programs are attached with ALLOW_MULTI).",
        family="live", severities=("error",), verify="always", once=True, audit="at_next_start",
    ),
    Code(
        "LXF130", "error",
        "a config line or device rule LXC/Proxmox reject",
        "A line that does not parse, or a device rule LXC cannot read: LXC logs 'Failed to parse device "
        "rule' and starts the container without it (measured: the rules after it are still compiled), "
        "so the device stays denied and nothing says so unless the log is read.",
        "Proxmox's `key: value` lines and LXC's `key = value` lines are parsed as they do; a rule must "
        "be `<a|b|c> <major|*>:<minor|*> <access>` with single spaces, or `/dev/path <access>`.",
        (("any", "Rewrite the line: `c MAJOR:MINOR rwm` or `/dev/path rwm`; remove what is not a config "
                 "line (Proxmox and LXC refuse to start with it)."),),
        "A newer LXC or Proxmox accepting a syntax lxcfix does not know yet: please report it.",
        family="hygiene", subject=("line",),
    ),
    Code(
        "LXF131", "error",
        "config file cannot be read",
        "The container's config could not be read (permissions, a vanished file, /etc/pve not "
        "mounted): nothing was judged for it.",
        "The read error itself is the evidence.",
        (("any", "Run lxcfix as root; on Proxmox check that pmxcfs serves /etc/pve "
                 "(`systemctl status pve-cluster`)."),),
        "The container was deleted while the scan ran.",
        family="scan", once=True,
    ),
    Code(
        "LXF132", "error",
        "a container whose name lxcfix cannot act on: not judged",
        "The host lists a container (a directory with a config under LXC's lxcpath) whose name has "
        "characters lxcfix does not put into a command line, a path or a cgroup name: a space, a "
        "non-ASCII letter, a control byte such as ESC, more than 64 bytes, or a first character that "
        "is not a letter or digit. LXC itself accepts such names (`lxc-start -n 'a b'` runs). lxcfix "
        "reads, probes and plans nothing for it, and says so, rather than leave it out of the scan.",
        "The name as the host lists it, checked against what lxcfix accepts for an LXC container: "
        "letters, digits, `_`, `.` and `-`, at most 64, starting with a letter or digit, no `..`. "
        "The name is shown escaped (\\xNN for each byte outside printable ASCII).",
        (("any", "Rename the container to a plain name (stop it, `mv /var/lib/lxc/OLD /var/lib/lxc/NEW`, "
                 "change `lxc.rootfs.path` and `lxc.uts.name` in its config, start it), or check it by hand: "
                 "`lxc-attach -n 'NAME' -- ls -l /dev` and its `lxc.cgroup2.devices.*` lines."),),
        "None: the container is there and was not judged.",
        family="scan",
    ),
    Code(
        "LXF140", "error",
        "a deny line that does nothing: the device stays allowed",
        "In allowlist mode (LXC's default: common.conf allows a short list) LXC keeps one list of rules. "
        "A `deny` line removes an allow rule only when it equals one (type, major, minor and access as "
        "written); `deny c 195:3 rwm` after `allow c 195:* rwm` is dropped, and /dev/nvidia3 stays "
        "allowed. The admin thinks the device is blocked; it is not.",
        "devices.replay_outcomes replays the container's lines (includes first) through LXC's own list "
        "semantics and says what became of each line. Measured on real LXC: `allow c 10:* rwm` + "
        "`deny c 10:200 rwm` leaves /dev/net/tun opening.",
        (("any", "Narrow the allow rule so it leaves the device out (allow only the minors the container "
                 "is given). For a rule that comes from an include, add a deny equal to it (that switches "
                 "it off) and allow the rest again. `lxcfix scan` shows the exact lines; it never applies "
                 "them, since they change what the container may open."),),
        "None known: LXC 5.0 and 6.0 build the same program from the same lines.",
        family="inert", subject=("line",), audit="does_nothing",
    ),
    Code(
        "LXF141", "info",
        "a deny line that matches nothing and is not needed",
        "A deny line no allow line equals, for a device nothing allows anyway: it changes nothing, and "
        "reads as if it did something.",
        "The same replay as LXF140: the line came to nothing and the device is not allowed.",
        (("any", "Delete the line."),),
        "A line kept on purpose for a later include that allows the device.",
        family="inert", subject=("line",),
    ),
    Code(
        "LXF142", "info",
        "allow lines in denylist mode: everything is allowed anyway",
        "Without a `deny = a` the list is in denylist mode (unprivileged Proxmox containers run in it), "
        "and LXC compiles only deny rules: every device not denied is open already, the allow lines "
        "add nothing.",
        "The replay: the list's mode at the end, and the allow lines that came to nothing.",
        (("any", "Delete the allow lines, or switch to an allowlist (`lxc.cgroup2.devices.deny = a` "
                 "first, then the allows) if the container should be limited."),),
        "None: LXC compiles only rules of the mode's polarity.",
        family="inert", subject=("line",),
    ),
    Code(
        "LXF143", "warning",
        "a rule emptied out by a later `a` or empty value",
        "`lxc.cgroup2.devices.deny = a` (or an empty value) later in the config empties the list: every "
        "rule before it is gone, so a device allowed above it is denied at start.",
        "The replay: the rule was in the list and a later line cleared it.",
        (("any", "Move the rule after the line that clears the list."),),
        "None: LXC applies the lines in order.",
        family="inert", subject=("line",), audit="does_nothing",
    ),
    Code(
        "LXF144", "info",
        "an exact duplicate of an earlier rule",
        "The same rule twice: the second one changes nothing.",
        "The replay: the line equals one already in the list.",
        (("any", "Delete the duplicate."),),
        "None.",
        family="inert", subject=("line",),
    ),
    Code(
        "LXF145", "warning",
        "a path-form rule whose path is not a device node here: LXC skips it at start",
        "`lxc.cgroup2.devices.allow = /dev/xyz rwm` is resolved with stat() when the container starts. "
        "When the path is missing, LXC logs \"Failed to parse device rule\", starts the container "
        "without the rule, and the device gives EPERM.",
        "The host's device nodes (a walk of /dev). Measured on real LXC: a missing path gives that log "
        "line and EPERM inside.",
        (("any", "Make the node exist before the start (load its driver at boot), or use the numeric "
                 "rule of its major when the major is fixed (`lxcfix plan --style numeric`)."),),
        "A node created later by a hook before LXC reads the rule (lxc.hook.pre-start).",
        family="inert", subject=("line",), audit="does_nothing",
    ),
    Code(
        "LXF146", "error",
        "`deny = a` or an empty value in the container's own config",
        "It wipes LXC's default allowlist (common.conf): /dev/null, /dev/zero, ptys and the rest are "
        "denied unless allowed again. With no rule left after it, LXC attaches no device program at "
        "all and every device opens.",
        "The container's own lines; measured on real LXC: a config whose last device line is `deny = a` "
        "gets no BPF program and every device opens.",
        (("any", "Delete the line; to limit the container, add deny lines for what it must not open, "
                 "or allow lines after it for what it needs."),),
        "A config that re-allows every default device after the line on purpose.",
        family="inert", subject=("line",), audit="does_nothing",
    ),
    Code(
        "LXF150", "error",
        "cgroup v1 key: LXC 7 refuses it and the container does not start",
        "`lxc.cgroup.devices.allow` and the other `lxc.cgroup.*` keys (all but `lxc.cgroup.dir*` and "
        "`lxc.cgroup.relative`) belong to cgroup v1. LXC 5 and 6 ignore them on a cgroup v2 host "
        "(pve-container warns \"this will be a hard error in the future\"); LXC 7 rejects them as an "
        "unsupported key, and the container does not start.",
        "The config's keys, against the cgroup v1 keys LXC 7 no longer takes.",
        (("any", "Rename to the cgroup v2 key with the same meaning (`lxc.cgroup2.devices.allow`, "
                 "`memory.max` for `memory.limit_in_bytes`); `lxcfix apply` converts device rules in "
                 "place (LXF102), or use devN entries on Proxmox."),),
        "A host that will stay on LXC 5 or 6 (then it is LXF102: the rule is ignored, not fatal).",
        family="upgrade", subject=("line",), predicts=("lxc-upgrade",),
    ),
    Code(
        "LXF151", "error",
        "hybrid cgroup host: what the cgroup v2 only upgrade changes for this container",
        "On a hybrid (v1 + v2) host the v1 device rules are what counts today. Proxmox VE 9 is cgroup v2 "
        "only: the v1 rules stop counting and the cgroup2 ones start, so a container that works now can "
        "lose its devices after the upgrade.",
        "The container judged as it will be on a cgroup v2 only host.",
        (("any", "Add the cgroup2 rules (or devN entries) the audit shows before the upgrade."),),
        "None on a host that stays hybrid.",
        family="upgrade", predicts=ALL,
    ),
    Code(
        "LXF152", "error",
        "hookscript missing, not executable, or on a storage this host lacks",
        "`pct start` runs the `hookscript:` snippet before the container starts; when it is missing or "
        "not executable the start fails (pve-guest-common: \"script '...' does not exist\"). Typical "
        "after a restore or migration onto another node.",
        "The hookscript's volume resolved through /etc/pve/storage.cfg, and the files of that storage's "
        "snippets/ directory (read only on hosts where a config names one).",
        (("any", "Restore the snippet (and `chmod 0755` it), install it on every node, or drop the "
                 "reference: `pct set VMID --delete hookscript`."),),
        "A shared storage that is not mounted at the moment of the scan but will be at start. As a "
        "warning: the snippets directory could not be read (a link out of a snapshot, more than 512 "
        "entries, an error listing it), so the script was not checked; the finding says why.",
        family="drift", subject=("line",), severities=("warning",), audit="at_next_start",
    ),
    Code(
        "LXF153", "warning",
        "a device change waits in `[pve:pending]` until the next start",
        "Proxmox VE 9 hotplugs new devN entries only; other edits to a running container wait in the "
        "pending section (`pct pending`) and take effect at its next start. The finding says what that "
        "start will do to its devices.",
        "The `[pve:pending]` section, parsed read-only as a config of its own.",
        (("any", "Restart the container when it suits (`pct reboot VMID`), or revert the pending change "
                 "(`pct set VMID --revert KEY`)."),),
        "A change the admin made on purpose for the next maintenance window.",
        family="drift", audit="at_next_start",
    ),
    Code(
        "LXF154", "error",
        "a pending change will make the next start fail",
        "The same pending section, when what it holds breaks the start: a devN path the host does not "
        "have, a pending hookscript that is missing.",
        "The pending section against the host's device nodes and snippets.",
        (("any", "Revert the pending change (`pct set VMID --revert KEY`) or make what it names exist "
                 "before the start."),),
        "A node or snippet that will exist by the time of the start (a driver loaded later).",
        family="drift", audit="at_next_start",
    ),
    Code(
        "LXF155", "warning",
        "USB serial node by index (`/dev/ttyUSBn`, `/dev/ttyACMn`): the number can change",
        "USB serial adapters are numbered in the order they are found; after a reboot or a replug "
        "/dev/ttyUSB0 can be another adapter (a Zigbee stick becomes the UPS cable).",
        "The given path is a ttyUSBn/ttyACMn node; /dev/serial/by-id gives the stable name and which "
        "adapter each name points to now.",
        (("any", "Pass the by-id name in and keep the node's name inside: `lxc.mount.entry: "
                 "/dev/serial/by-id/usb-...-if00-port0 dev/ttyUSB0 none bind,optional,create=file` and the "
                 "rule `c 188:* rwm` (a devN entry keeps its host path inside, so it cannot rename it)."),),
        "A host with one USB serial adapter that is never unplugged.",
        family="foresight", subject=("device", "line"),
    ),
    Code(
        "LXF156", "error",
        "the target kernel lacks a module a device needs: after the reboot the node is gone",
        "A device the container is given needs a module built outside the kernel tree (nvidia via DKMS "
        "or NVIDIA's installer, gasket/apex for Coral, any module /proc/modules marks out of tree) and "
        "the kernel the upgrade boots does not have it: the node is missing after the reboot and the "
        "container loses the device (or does not start, with devN).",
        "/proc/modules, `dkms status`, the target's /lib/modules/VER/modules.dep (or a walk of its "
        "out-of-tree directories) and build/ headers, and the devices' drivers from sysfs.",
        (("any", "Build the module for the target before the reboot (`dkms autoinstall -k VER`, with the "
                 "headers installed; or rerun NVIDIA's installer for it), as the audit's command says."),),
        "A module the target kernel ships in tree (then modules.dep lists it and there is no finding).",
        family="upgrade", subject=("device",), predicts=ALL,
    ),
    Code(
        "LXF157", "warning",
        "the target kernel is not installed yet: its modules cannot be checked",
        "The same question as LXF156 when the kernel the upgrade installs is not in /lib/modules yet.",
        "The installed kernel trees against `--to-kernel`.",
        (("any", "Install the kernel (and its headers), let DKMS build, then run the audit again before "
                 "rebooting."),),
        "None: the check needs the kernel's tree.",
        family="upgrade",
    ),
    Code(
        "LXF158", "warning",
        "USB device by bus and device number (`/dev/bus/usb/BBB/DDD`): the number changes",
        "A USB device passed in as one node of /dev/bus/usb gets a new device number whenever it "
        "re-enumerates: on a replug, a reboot, and for a Coral USB Edge TPU the first time it is used: "
        "it enumerates as 1a6e:089a (Global Unichip) and, once its firmware is loaded, again as 18d1:9302 "
        "(Google) with a new number, so the node the container was given is gone and Frigate says "
        "'No EdgeTPU was detected'.",
        "The given path is a /dev/bus/usb/BBB/DDD node (char major 189, minor (BBB-1)*128 + DDD-1); "
        "the kernel numbers devices on a bus in the order they appear.",
        (("any", "Pass the bus directory and allow the USB major: `lxc.mount.entry: /dev/bus/usb/BBB "
                 "dev/bus/usb/BBB none bind,optional,create=dir` and `lxc.cgroup2.devices.allow: c 189:* rwm` "
                 "(cgroup2 rules have no minor ranges: that rule allows every USB device on every bus of the host; "
                 "a privileged container's root can mknod another bus's node and open it, an unprivileged one "
                 "only opens the nodes mounted in; for one bus only, allow its 128 minors one rule each, "
                 "(BBB-1)*128 to (BBB-1)*128+127). A devN entry cannot pass a directory."),),
        "A device that never re-enumerates and is never unplugged (rare for USB).",
        family="hygiene", subject=("device", "line"),
    ),
    Code(
        "LXF159", "error",
        "a device path the container is given is not a device node on the host",
        "The host path a bind mount or devN entry passes in is there, but it is a regular file, a "
        "directory or a symlink to nothing: what a failed driver install, a `cp` or a script left where "
        "the node should be. Proxmox refuses the start ('TASK ERROR: //dev/dri/renderD128 is not a "
        "device'); a bind mount passes the file in and the application cannot open the device.",
        "The host's /dev is walked for nodes, and what is there but not a character or block device is "
        "recorded (a regular file, a directory, a symlink whose target is missing).",
        (("any", "Look at it (`ls -l PATH`), remove it if nothing else uses it, and let the driver create the "
                 "node: reload the driver module, `udevadm trigger`, or reboot; for NVIDIA nodes "
                 "`nvidia-modprobe`."),),
        "A directory on purpose (/dev/dri passed whole): pass it as a directory mount "
        "(`bind,optional,create=dir`), not as one node.",
        family="allowlist", subject=("device", "line"),
    ),
    Code(
        "LXF160", "error",
        "a device passed in from a directory the container can write",
        "A bind mount, `devN:` entry or path-form rule whose source lies under the container's rootfs, "
        "an `mpN:` volume or a directory bind-mounted in (any form: plain `bind`, `bind,rw`, "
        "`rbind`, `create=dir`, idmapped or not, from the config, an include or an `lxc.mount.fstab` "
        "file; `ro` or `ro=1` too: root inside remounts it read-write with `mount -o remount,rw,bind`, "
        "privileged or not, as LXC makes the bind in the container's own user namespace): root inside can replace that path with any device node it likes (mknod), or with a "
        "symlink to a host device that LXC and Proxmox follow at the next start, so the tenant, not "
        "the admin, chooses what the container gets. lxcfix allows nothing for it in any style (no "
        "rule, no devN).",
        "The config's writable host directories (rootfs, mpN, every bind of a directory, read-only too, "
        "fstab files and includes followed) against each device source, by path (lstat, never "
        "followed). Measured: a node the tenant made (c 1:11) still gives EPERM, since no rule is "
        "planned for it; a symlink to /dev/kmsg in a plainly bind-mounted directory stays denied "
        "after a restart.",
        (("any", "Pass the device from the host's /dev (`lxc.mount.entry: /dev/dri/renderD128 "
                 "dev/dri/renderD128 none bind,optional,create=file` or `devN: /dev/dri/renderD128`), never "
                 "from a path inside the container's own storage."),),
        "A directory the admin knows the container cannot write (a bind, read-only or not, of a "
        "directory whose "
        "mode keeps an unprivileged container's mapped root out is still counted: lxcfix judges the "
        "mount, not the directory's owner).",
        family="tenant", subject=("device", "line"),
    ),
    Code(
        "LXF200", "error",
        "probe: open() gives EPERM (cgroup denies)",
        "Inside the running container, open() of a node that is the right character device with the "
        "host's major:minor fails with EPERM. For a device node that is what the cgroup device policy "
        "answers: the node is there, the mode allows it, the policy does not.",
        "The probe (one exec inside: POSIX sh, plus python3 when present) stat()s and opens each given "
        "node read-write and compares its numbers with the host's. Measured on LXC: a denied major gives "
        "EPERM; an allowed major with no driver behind it gives ENXIO; mode/owner problems give EACCES "
        "(LXF201). On the H200, every denied node gave EPERM.",
        _DENIED_FIXES,
        "If the running allowlist in the evidence already allows the node, the EPERM comes from "
        "somewhere else (a driver that refuses the open itself, an LSM) and allowing it changes "
        "nothing.",
        table=H200,
        family="probe", subject=("device", "numbers"), severities=("info",), verify="always", live=True,
        kind="cgroup-denies", node=True,
    ),
    Code(
        "LXF201", "error",
        "probe: open() gives EACCES (mode/uid/gid, idmap, nodev)",
        "open() inside fails with EACCES: not the cgroup (which answers EPERM) but the node's owner, "
        "group or mode, the idmap, or a nodev mount. In an unprivileged container host-owned nodes show "
        "as nobody:nogroup and only their 'other' bits count: the render/video group of "
        "jellyfin, plex or frigate does not match.",
        "The probe's errno. Measured: EACCES is decided before the driver is called, and the cgroup "
        "never gives it.",
        (("devn", "`devN: /dev/dri/renderD128,gid=GID` with GID the container's own render group "
                  "(`pct exec CT -- getent group render`), or `,mode=0666`."),
         ("path", "Map the host's group onto the container's: `lxc.idmap` lines that split `g 0 100000 "
                  "65536` around GID, and `root:HOSTGID:1` in /etc/subgid."),
         ("numeric", "The same idmap; or a udev rule on the host that makes the node 0666.")),
        "The probe opens as the container's root; a service user may reach the node through a group "
        "root inside does not have. Check with the service's own user.",
        family="probe", subject=("device", "numbers"), severities=("info",), verify="fixed",
        kind="no-access", audit="eacces",
    ),
    Code(
        "LXF202", "error",
        "probe: expected node absent inside",
        "A node the host has and the config passes in is not inside the running container: the mount "
        "was skipped (optional, and the source was missing at start), or the container started before "
        "the config got the device.",
        "The probe stat()s the container-side path of each given node.",
        (("any", "Make sure the host has the node before the start (for nvidia-uvm `nvidia-modprobe -u "
                 "-c0`, and `lxcfix host-fix` for every boot), then restart the container. A device that "
                 "is not passed in at all is LXF110: add the mount or devN entry."),),
        "Something inside the container removes or remounts /dev after start.",
        family="probe", subject=("device", "numbers"), verify="always", kind="not-passed-in", node=True,
    ),
    Code(
        "LXF203", "error",
        "probe: path is not the expected char device",
        "The path exists inside but is not the host's character device: an empty regular file that "
        "`optional,create=file` leaves when the source was missing at start (measured), or a copied "
        "node with old numbers (a stale node).",
        "The probe checks S_ISCHR and major:minor, not existence: a file at /dev/nvidia-uvm is not a "
        "device.",
        (("any", "Make the host node exist before the container starts (`lxcfix host-fix` for NVIDIA), "
                 "pass the host's node in (bind mount or devN) instead of a copy, and restart."),),
        "None known.",
        family="probe", subject=("device", "numbers"), verify="always", node=True,
    ),
    Code(
        "LXF204", "error",
        "probe: the open as a member of the node's group was refused",
        "The probe dropped to the service user (a member of render, video or the devN's gid=) and "
        "tried the open for real; it was refused. The container's root may open the node, the "
        "service cannot.",
        "A forked child inside the container sets the member's uid and the group's gid (python3, else "
        "`setpriv`) and calls open(); nothing inside is changed. The finding names the user, group, errno "
        "and the cause (owner, group, mode or idmap).",
        (("devn", "`devN: PATH,gid=GID` with the container's gid for that group."),
         ("path", "`lxc.idmap` lines that pass the host group through, and `root:HOSTGID:1` in /etc/subgid."),
         ("numeric", "The same idmap change, or `--mode-0666`.")),
        "The service runs as another user than the group's members the probe found; the check used "
        "the first member.",
        family="access", subject=("device",), verify="fixed", kind="no-access", audit="group_access",
    ),
    Code(
        "LXF205", "info",
        "probe: root inside is refused but the group's members get in",
        "After an idmap pass-through the node is owned by an unmapped user but its group is the "
        "container's render/video group: the service, a member, can open it; root inside cannot. That "
        "is the intended state, and it replaces LXF201 for the node.",
        "The probe's open as root (EACCES) and as a member of the group (success or a driver errno such "
        "as ENXIO, which means the open reached the driver).",
        (("any", "Nothing to fix when the service runs as a member of the group. Add root to it inside, or "
                 "use `gid=`/`mode=` on a devN entry, if root must open it."),),
        "A service that runs as root inside: then this is LXF201.",
        family="access", subject=("device",),
    ),
    Code(
        "LXF206", "error",
        "probe: its output could not all be used",
        "What came back from the container (its own sh, python3 and nvidia-smi print it) had lines the "
        "probe does not print, numbers out of range, more than the cap (then the probe was killed), or "
        "no `end` line. The container's root may have replaced those binaries; what could be read is "
        "used, the rest is shown escaped as evidence.",
        "probe.parse reads every line totally (bounded digits, bounded line and output sizes) and "
        "lists what it could not use; the output is read up to 1 MiB (LXCFIX_PROBE_MAX_OUTPUT).",
        (("any", "Look at the container's /bin/sh, python3 and nvidia-smi (`pct exec VMID -- ls -l "
                 "/bin/sh`); a probe that is cut short every time may need a larger LXCFIX_PROBE_MAX_OUTPUT "
                 "(many device nodes)."),),
        "A container with very many device nodes whose honest output is larger than the cap.",
        family="probe", verify="always",
    ),
    Code(
        "LXF210", "error",
        "probe: cuInit failed (999: nvidia-uvm denied; 100: nvidiactl/GPU node denied)",
        "CUDA's cuInit(0) fails inside the container. 999 CUDA_ERROR_UNKNOWN is what a denied "
        "/dev/nvidia-uvm gives while nvidia-smi still lists the GPU, which is why this failure is so "
        "confusing; 100 CUDA_ERROR_NO_DEVICE is a denied /dev/nvidiactl or /dev/nvidiaN; 35 and 803 are "
        "a driver/library mismatch (LXF212). The CUDA runtime API reports the 999 case as error 30 "
        "(cudaErrorUnknown).",
        "The probe calls cuInit through the container's own libcuda (python3 ctypes), only when every "
        "given NVIDIA node is already right, since the driver's calls can create nodes. What each denial "
        "gives was measured one device at a time:",
        _NVIDIA_NODE_FIXES,
        "The probe runs cuInit as root in a cleared environment; a code lxcfix does not know is shown "
        "as it is, with the nodes' states. If every node opens, the cause is not the cgroup.",
        table=H200,
        family="probe", subject=("device",), live=True, node=True,
    ),
    Code(
        "LXF211", "error",
        "probe: NVML failed (\"Unknown Error\" / \"No devices found\")",
        "nvidia-smi inside fails: 'Failed to initialize NVML: Unknown Error' (rc 255) when /dev/nvidiactl "
        "is denied, 'No devices found.' (rc 0) when a /dev/nvidiaN is, 'Driver/library version "
        "mismatch' when the container's libraries do not match the host's module (LXF212). A denied "
        "nvidia-uvm does not show here: nvidia-smi keeps working (LXF210).",
        "The probe runs `nvidia-smi -L` inside, only when the nodes are already right. Measured:",
        _NVIDIA_NODE_FIXES,
        "nvidia-smi missing or broken inside for reasons of its own (then the message says so and no "
        "node is named).",
        table=H200,
        family="probe", subject=("device",), live=True, node=True,
    ),
    Code(
        "LXF212", "error",
        "host driver and container userspace driver differ",
        "The host's NVIDIA kernel module and the container's userspace libraries (libcuda.so.VERSION, "
        "nvidia-smi) must be the same version: NVML says 'Driver/library version mismatch' and CUDA "
        "fails (803, 35). It happens after every driver upgrade on the host.",
        "The host's version from /proc/driver/nvidia/version; the container's from the probe "
        "(libcuda.so.<version> it finds, or nvidia-smi).",
        (("any", "Install the host's version in the container without its kernel module: "
                 "`pct push CT NVIDIA-Linux-x86_64-VER.run /root/NVIDIA-Linux-x86_64-VER.run` then "
                 "`pct exec CT -- sh /root/NVIDIA-Linux-x86_64-VER.run --no-kernel-module --silent` (LXC: "
                 "copy it into the rootfs and use lxc-attach); or bind-mount the host's libraries."),),
        "A deliberately newer libcuda from NVIDIA's forward-compatibility package (cuda-compat) on a "
        "datacenter GPU, or several libcuda versions in the container where the one found is not the "
        "one used.",
        family="probe", predicts=ALL, audit="driver_mismatch",
    ),
    Code(
        "LXF220", "error",
        "inner container: the LXC layer's allowlist denies the device",
        "A container that the LXC container runs itself (Docker, Podman, runc) cannot open a node because the "
        "LXC container's own cgroup device policy denies it: open() gives EPERM both in the LXC container and "
        "in the inner one. Whatever the inner container is given (--device, a compose devices: line, an OCI "
        "linux.devices entry), the layer above decides first.",
        "The probe lists the inner containers (docker ps, podman ps, runc list inside the LXC container) and, "
        "with `--inner NAME` (or all), runs the same node checks inside one through the container's own "
        "`docker exec`/`podman exec`/`runc exec` (argv only, the probe's cap and deadline). The LXC layer's "
        "probe of the same path gives EPERM too. Measured on this project's machines: runc 1.1.5 inside a "
        "privileged LXC 5.0.2 container, /dev/net/tun (10:200) in the inner container's linux.devices: EPERM "
        "until the LXC config allows c 10:200 rwm.",
        (("any", "Fix the LXC layer first: the LXF100/LXF200 finding for the same node carries the allow "
                 "rule (`lxcfix plan --ct CT`); then the inner container sees what it is given."),),
        "None known: EPERM in both layers is the LXC layer's policy.",
        family="nested", subject=("device", "numbers"), kind="cgroup-denies", node=True,
    ),
    Code(
        "LXF221", "error",
        "inner container: not given the device",
        "The LXC container has the node, but the container it runs (Docker, Podman, runc) does not: the node "
        "is absent there. An inner container sees only the nodes its runtime creates for it: `docker run "
        "--device`, a compose `devices:` line, an OCI config's `linux.devices`.",
        "The inner probe (`lxcfix diagnose --ct CT --inner NAME`) finds no node at the path the LXC "
        "container's own probe opens (or is given). Measured: runc 1.1.5 in LXC 5.0.2, a config.json without "
        "/dev/net/tun in linux.devices: ENOENT inside, while the LXC container opens it.",
        (("any", "Recreate the inner container with the node: `docker run --device /dev/net/tun:/dev/net/tun "
                 "...`, compose `devices: [\"/dev/net/tun:/dev/net/tun\"]`, or for runc an entry in "
                 "config.json's linux.devices and an allow rule in linux.resources.devices. For NVIDIA, every "
                 "node (/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-caps) or CDI."),),
        "The application does not need that node (then nothing is wrong).",
        family="nested", subject=("device", "numbers"),
    ),
    Code(
        "LXF222", "error",
        "inner container: its runtime's device cgroup denies the device",
        "The node is there inside the inner container (a bind mount or volume of /dev) and opens in the LXC "
        "container, but open() in the inner container gives EPERM: the inner runtime's own device rules "
        "(Docker's default list, an OCI linux.resources.devices) do not allow it.",
        "EPERM from the inner probe while the LXC layer's probe of the same node succeeds: only a device "
        "cgroup below the LXC container's gives that.",
        (("any", "`--device /dev/X` (which adds the rule as well as the node), or `--device-cgroup-rule "
                 "'c MAJOR:MINOR rwm'` (compose: device_cgroup_rules); OCI: an allow entry in "
                 "linux.resources.devices. With the NVIDIA runtime in a container: no-cgroups = true (LXF230) "
                 "and every node listed."),),
        "A runtime that answers EPERM for other reasons (a seccomp or LSM rule on open): rare for device nodes.",
        family="nested", subject=("device", "numbers"),
    ),
    Code(
        "LXF223", "warning",
        "inner container: cannot be probed",
        "An inner container asked for with `--inner` could not be probed: no running inner container of that "
        "name, `docker exec`/`podman exec`/`runc exec` failed (no sh inside, the daemon not answering), the "
        "probe did not answer within its deadline, or the budget of one LXC container's inner probes was "
        "spent (16 probed, 60 s, 4 MiB of output together: the rest is one finding, \"not checked: budget\").",
        "The exec's own exit status and output (bounded), or the names the LXC container's probe listed.",
        (("any", "`lxcfix diagnose --ct CT` lists the inner containers it found (LXF224); an image without "
                 "/bin/sh cannot be probed this way."),),
        "A transient daemon error: run it again.",
        family="nested",
    ),
    Code(
        "LXF224", "info",
        "the container runs inner containers",
        "The LXC container runs containers of its own (Docker, Podman or runc). lxcfix's probe of the LXC "
        "container says nothing about what they can open: each is given devices by its own runtime.",
        "The probe lists them in the same exec as its node checks: `docker ps` where Docker's socket exists, "
        "`podman ps` where Podman's runtime dirs exist, `runc list` where /run/runc exists (nothing is "
        "started or created to ask).",
        (("any", "`lxcfix diagnose --ct CT --inner NAME` (or `--inner all`, also for `lxcfix scan`) runs the "
                 "same device checks inside them."),),
        "None: it is information.",
        family="nested",
    ),
    Code(
        "LXF230", "warning",
        "NVIDIA Container Toolkit in the container: no-cgroups is not set",
        "The container has the NVIDIA Container Toolkit (its /etc/nvidia-container-runtime/config.toml) and "
        "lets nvidia-container-cli set up device cgroups itself. Inside an LXC container (unprivileged or "
        "nested) it cannot attach its own BPF device program: `nvidia-container-cli: initialization error: "
        "load library failed: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted` and no "
        "inner container gets the GPU.",
        "The container's config.toml, read from its rootfs (resolved inside it, no symlink followed out, "
        "bounded): `[nvidia-container-cli]` `no-cgroups` missing or false. Reports: libnvidia-container#154, "
        "frigate#8652.",
        (("any", "In the container's /etc/nvidia-container-runtime/config.toml, under `[nvidia-container-cli]`: "
                 "`no-cgroups = true`. Then list every node for the inner container (`--device /dev/nvidia0 "
                 "--device /dev/nvidiactl --device /dev/nvidia-uvm --device /dev/nvidia-uvm-tools`, and "
                 "/dev/nvidia-caps/* for MIG), and let the LXC layer allow those majors, dynamic ones "
                 "included."),),
        "A privileged container whose inner containers never use the NVIDIA runtime.",
        family="rootfs",
    ),
    Code(
        "LXF231", "warning",
        "NVIDIA Container Toolkit in the container: its mode cannot work",
        "The toolkit's `[nvidia-container-runtime] mode` is \"cdi\" but the container has no CDI spec "
        "(/etc/cdi/nvidia.yaml or .json, /var/run/cdi), or it is a mode the toolkit does not know. "
        "Since toolkit 1.18 CDI is the default; `--gpus` then fails with 'invoking the NVIDIA Container "
        "Runtime Hook directly ... is not supported' (nvidia-container-toolkit#1456).",
        "The container's config.toml and /etc/cdi, /var/run/cdi, read from its rootfs.",
        (("any", "In the container: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (after its "
                 "userspace driver matches the host's), or `mode = \"legacy\"`."),),
        "A spec generated at container start by a service (nvidia-cdi-refresh) that has not run yet.",
        family="rootfs",
    ),
    Code(
        "LXF232", "error",
        "CDI spec: generated for another driver than the host's",
        "The container's CDI spec (/etc/cdi/nvidia.yaml or .json) names the libraries of one driver version "
        "(libcuda.so.VERSION, libnvidia-ml.so.VERSION) and the host runs another: the spec was generated "
        "before a host driver upgrade, and an inner container given the GPU through it gets paths that are "
        "not there. As info: the spec matches the host now, and the next driver upgrade makes it stale "
        "(`lxcfix audit --for driver-upgrade` says so).",
        "The spec's library file names, read from the container's rootfs, against /proc/driver/nvidia/version "
        "on the host.",
        (("any", "In the container, after its userspace driver matches the host's: `nvidia-ctk cdi generate "
                 "--output=/etc/cdi/nvidia.yaml`; after every host driver upgrade again."),),
        "A spec that is regenerated at every container start (nvidia-cdi-refresh) before anything uses it.",
        family="rootfs", severities=("info",), audit="cdi_spec", predicts=("driver-upgrade",),
    ),
    Code(
        "LXF233", "error",
        "Docker's daemon.json: a runtime that is not there",
        "The container's /etc/docker/daemon.json is not one JSON object (dockerd refuses to start), names a "
        "runtime whose binary is not installed in the container (the NVIDIA runtime after the toolkit was "
        "removed), or a default-runtime that is not among its runtimes: every `docker run` fails.",
        "daemon.json read from the container's rootfs (bounded, parsed whole); each runtime's path looked "
        "up inside the rootfs (an absolute path, or a bare name on dockerd's PATH).",
        (("any", "Install the runtime in the container (`nvidia-container-toolkit` for "
                 "nvidia-container-runtime), or remove it (and default-runtime) from daemon.json."),),
        "A runtime binary in a directory lxcfix does not look in (/opt/...), named by a bare name on a PATH "
        "of dockerd's own.",
        family="rootfs",
    ),
    Code(
        "LXF234", "warning",
        "a container engine without the features it needs",
        "Docker or Podman is installed in a Proxmox container whose `features:` lack `nesting=1` (and, "
        "in an unprivileged container, `keyctl=1`): its containers fail to start (mounting proc and sys "
        "is refused by the AppArmor profile; runc's keyring calls fail).",
        "The container's rootfs has dockerd, podman or containerd; its config's `features:` line.",
        (("any", "`features: nesting=1` (unprivileged: `features: keyctl=1,nesting=1`), then restart; "
                 "`pct set CT --features nesting=1,keyctl=1`. Only root@pam may set keyctl. lxcfix plan "
                 "makes the line."),),
        "An engine that is installed but never run.",
        family="rootfs",
    ),
    Code(
        "LXF235", "warning",
        "the container's render/video gid differs from the host node's",
        "A stopped container is given a render or video node, and its own /etc/group has that group "
        "with another gid than the node's on the host (Ubuntu 24.04 templates: render 993, video 44; "
        "26.04: 991; the host's render is often 104). Inside, the node's group is not the container's "
        "render group, so its members (jellyfin, plex) get no group access.",
        "The container's /etc/group read from its rootfs (a running container's from the probe: LXF114, "
        "LXF204); the node's gid from the host.",
        (("devn", "`devN: /dev/dri/renderD128,gid=993` with the container's gid (Proxmox creates the node with "
                  "it)."),
         ("any", "Or map the host group in with lxc.idmap; `lxcfix plan --ct CT` uses the container's gid.")),
        "The application's user is in the host gid's group inside as well.",
        family="rootfs", subject=("device",),
    ),
    Code(
        "LXF236", "info",
        "the container's own files were not read",
        "lxcfix's static checks of the container's files (NVIDIA toolkit config, CDI spec, daemon.json, "
        "features, /etc/group) need its rootfs: a stopped Proxmox container's storage is usually not mounted "
        "on the host, and lxcfix says so instead of guessing; or some files could not be read (too large, "
        "not a regular file, permission).",
        "A running container's root is /proc/<init pid>/root; a stopped one's is its rootfs directory on the "
        "host (LXC's dir: rootfs, or /var/lib/lxc/VMID/rootfs after `pct mount VMID`).",
        (("any", "Start the container, or `pct mount VMID` (then `pct unmount VMID`), and scan again."),),
        "None: it says what was not checked.",
        family="rootfs",
    ),
    Code(
        "LXF237", "error",
        "runc in the container has the CVE-2025-52881 fix, the host's lxc-pve predates 6.0.5-2",
        "runc's fix for CVE-2025-52881 (runc 1.2.8, 1.3.3, 1.4.0-rc.3 and later, Nov 2025) writes procfs "
        "files through a detached procfs mount; the AppArmor profile an lxc-pve before 6.0.5-2 gives a "
        "container denies those writes, so every `docker run` (or `ctr run`, `nerdctl run`) in the container "
        "fails: 'open sysctl net.ipv4.ip_unprivileged_port_start file: reopen fd 8: permission denied' "
        "(runc#4968, moby#51405; Incus fixed it in 6.19). As a warning: the container runs with "
        "`lxc.apparmor.profile: unconfined`, the common workaround, which throws its confinement away. As "
        "info: the container's runc could not be dated (Docker's containerd.io bundles a runc whose version "
        "its own version does not say, except where reported).",
        "The container's package database read from its rootfs (resolved inside it, no symlink followed out, "
        "at most 16 MiB; nothing of the container is run): /var/lib/dpkg/status (packages runc and Docker's "
        "containerd.io) or Alpine's /lib/apk/db/installed; runc's upstream version against the first fixed "
        "release of its line (1.2.8, 1.3.3, 1.4.0-rc.3). containerd.io 1.7.28-1 worked in LXC and 1.7.28-2 "
        "(runc 1.3.3) failed (containerd#12484). The host's lxc-pve from `pveversion -v`, compared as dpkg "
        "compares versions.",
        (("any", "Upgrade the host's LXC: `apt-get update && apt-get install --only-upgrade lxc-pve` (or the "
                 "usual `apt-get dist-upgrade`), until `pveversion -v` says lxc-pve 6.0.5-2 or later, then "
                 "restart the container (`pct reboot CT`): the profile is loaded at start. Second choice, until "
                 "the host is upgraded: inside the container install a runc from before the fix and hold it "
                 "(`apt-get install runc=VERSION` or `containerd.io=1.7.28-1~...` from `apt-cache policy`, then "
                 "`apt-mark hold`); it lacks the Nov 2025 runc security fixes. Not `lxc.apparmor.profile: "
                 "unconfined`: that removes the container's confinement."),),
        "A distribution's runc that carries the fix under an older upstream version (a backport) is not "
        "recognised (no finding where one is due). A container whose engine never starts containers. A runc "
        "installed outside the package database (a static binary in /usr/local) is not seen at all.",
        family="rootfs", severities=("warning", "info"),
    ),
    Code(
        "LXF300", "warning",
        "hybrid/legacy cgroup layout: cgroup2 device rules are ignored",
        "The host mounts cgroup v1 controllers beside (or instead of) the unified hierarchy. LXC then "
        "logs 'Ignoring cgroup2 limits on legacy cgroup system' and ignores every "
        "lxc.cgroup2.devices line; the v1 lxc.cgroup.devices lines are the enforced ones. lxcfix writes "
        "cgroup2 rules only, so it plans none there: a device the probe sees denied (EPERM, from the v1 "
        "devices controller) is fixed by hand, and `lxcfix plan` says so instead of printing nothing.",
        "The host's mount table (/proc/self/mountinfo); said for every container that has cgroup2 device "
        "lines or is given a device. Measured on this project's own machines (LXC 5.0.2): on a hybrid "
        "layout cgroup2 device rules had no effect.",
        (("any", "Boot the host with the unified cgroup v2 hierarchy (the default since Proxmox VE 7; "
                 "`systemd.unified_cgroup_hierarchy=1`), or write the rules as lxc.cgroup.devices.* on "
                 "that host."),),
        "The container's devices are all allowed by its v1 lxc.cgroup.devices lines (or LXC's defaults): "
        "then nothing is denied, and only the move to cgroup v2 (Proxmox VE 9) will matter (LXF151).",
        family="host", once=True, audit="cgroup_layout",
    ),
    Code(
        "LXF301", "error",
        "host or container unreachable",
        "A host could not be scanned (SSH: refused, timed out, an unknown or changed host key, "
        "authentication), or lxcfix could not look inside a container: nothing was judged there.",
        "The connection's own error. Host keys are checked strictly against known_hosts; transient "
        "connect errors are retried with backoff, authentication failures are not.",
        (("any", "Check that the host answers on SSH with the inventory's user and key; an unknown key: "
                 "`--accept-new-host-keys` records it (never a changed one). A container: is it running, "
                 "does `lxc-attach -n CT -- true` (or `pct exec`) work?"),),
        "A transient network problem: run the scan again.",
        family="scan", verify="always", once=True,
    ),
)}


def where(**want) -> frozenset[str]:
    """The codes whose records have these values: where(live=True), where(hook="block")."""
    return _where(tuple(sorted(want.items())))


_WHERE: dict[tuple, frozenset[str]] = {}


def _where(want: tuple) -> frozenset[str]:
    # CODES is fixed at import, so each query is answered once (causes asks per cause).
    hit = _WHERE.get(want)
    if hit is None:
        hit = _WHERE[want] = frozenset(c.code for c in CODES.values() if all(getattr(c, k) == v for k, v in want))
    return hit


def record(code: str) -> Code:
    try:
        return CODES[code]
    except KeyError:
        raise ValueError(f"no finding code {code!r} (a new code needs its record in lxcfix/codes.py)") from None


def make(code: str, ct: str, message: str, *, severity: Severity | None = None, host: str = "localhost",
         **kw) -> Finding:
    """A Finding with its record's severity; `severity` only for one the record allows."""
    rec = record(code)
    said = severity or rec.severity
    if not rec.allows(said):
        raise ValueError(f"{code} is {rec.severity}, not {said} (its record's severities: "
                         f"{', '.join((rec.severity, *rec.severities))})")
    return Finding(code=code, severity=said, ct=ct, message=message, host=host, **kw)  # type: ignore[arg-type]


def must_be_absent(f: Finding, fixed: dict[str, set[str]]) -> bool:
    """Whether a verified change may leave this finding. fixed: kind -> the devices whose
    fix of that kind the plan made (a group-access fix for /dev/dri/renderD128)."""
    rec = CODES.get(f.code)
    if rec is None or not rec.verify or f.severity == "info":
        return False  # info: what is left on purpose (a caps node without MIG), never a failed change
    return rec.verify == "always" or (f.device is not None and f.device in fixed.get(rec.kind, ()))


def fixed_devices(findings) -> dict[str, set[str]]:
    """kind -> the devices whose findings of that kind carry a fix the plan makes."""
    out: dict[str, set[str]] = {}
    for f in findings:
        rec = CODES.get(f.code)
        if rec is not None and rec.kind and f.device and f.fix is not None and f.fix.applies:
            out.setdefault(rec.kind, set()).add(f.device)
    return out


def audit_outcome(code: str, occasion: str) -> str:
    """"will" or "may": what an audit item predicts for this occasion."""
    rec = CODES.get(code)
    return "will" if rec is not None and occasion in rec.predicts else "may"


def lookup(code: str) -> Code | None:
    """LXF200, lxf200 or 200."""
    text = code.strip().upper()
    if re.fullmatch(r"[0-9]{3}", text):
        text = "LXF" + text
    return CODES.get(text)


def _wrap(text: str, indent: str = "  ", width: int = 88) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [indent]


def table_lines(table: tuple[tuple[str, ...], ...], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    rows = [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    return rows[:1] + [indent + "  ".join("-" * w for w in widths)] + rows[1:]


def explain(code: str) -> list[tuple[str, str]]:
    """The explanation as (text, role) lines; [] for a code lxcfix does not have."""
    c = lookup(code)
    if c is None:
        return []
    out = [(f"{c.code} ({c.severity}): {c.title}", "title"), ("", "text"), ("What it means", "heading")]
    out += [(line, "text") for line in _wrap(c.meaning)]
    out += [("", "text"), ("How lxcfix knows", "heading")]
    out += [(line, "text") for line in _wrap(c.knows)]
    if c.table:
        out += [("", "text")] + [(line, "table") for line in table_lines(c.table)]
        out += [(line, "text") for line in _wrap(H200_WHERE)]
    out += [("", "text"), ("Fix it by hand", "heading")]
    styled = any(style != "any" for style, _ in c.fixes)
    for style, how in c.fixes:
        if not styled:
            out += [(line, "fix") for line in _wrap(how)]
            continue
        label = f"{style}:" if style != "any" else "then:"
        first, *rest = _wrap(how, indent=" " * 11, width=88)
        out.append((f"  {label:<9}" + first[11:], "fix"))
        out += [(line, "fix") for line in rest]
    out += [("", "text"), ("When it is a false alarm", "heading")]
    out += [(line, "text") for line in _wrap(c.false_alarm)]
    return out


def summary_lines() -> list[tuple[str, str]]:
    """Every code, one line each (`lxcfix explain` with no code)."""
    return [(f"{c.code}  {c.severity:<7}  {c.title}", c.severity) for c in CODES.values()]
