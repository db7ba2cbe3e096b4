"""The error texts applications and tools print, and what each means here: `lxcfix explain
"<text>"`. Pure data and a pure match.

People start from what their app printed, not from a finding code. Each row is one message
(as its program prints it, with the public report it is known from), its likely causes in
order (each with the finding code that names it, when lxcfix has one), the command that
tells which one it is on this host, and what it is known not to be.

    match("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment")
    -> [Known(id="cuda-unknown", ...)]
    match("hello") -> []

The text comes from a paste (a log, several lines); it is read bounded (MAX_TEXT), and only
matched, never echoed back whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TEXT = 256 * 1024  # a pasted log; more is cut (only the first part is matched)


@dataclass(frozen=True)
class Cause:
    code: str  # the finding code that names it ("" when lxcfix has none)
    text: str


@dataclass(frozen=True)
class Known:
    id: str
    says: str  # the message, as its program prints it
    who: str  # the program that prints it
    patterns: tuple[str, ...]  # regexes (case-insensitive): any one matches
    causes: tuple[Cause, ...]  # most likely first
    confirm: str  # what tells which cause it is on this host
    not_it: str  # what it is known not to be
    sources: tuple[str, ...]  # the public reports it is known from
    generic: bool = False  # said only when no other row matches (a more specific one knows more)

    def to_json(self) -> dict:
        return {"id": self.id, "says": self.says, "who": self.who,
                "causes": [{"code": c.code or None, "text": c.text} for c in self.causes],
                "confirm": self.confirm, "not": self.not_it, "sources": list(self.sources)}


DIAGNOSE = "lxcfix diagnose --ct CT (the container the app runs in; `lxcfix scan` for all of them)"
_UVM_DENIED = Cause("LXF200", "the container's cgroup denies /dev/nvidia-uvm: its major is dynamic and moved "
                              "after a reboot or driver upgrade (a stale `c M:* rwm` rule, LXF101), or no rule "
                              "allows it (LXF100)")
_UVM_MISSING = Cause("LXF112", "/dev/nvidia-uvm does not exist on the host yet: nothing ran nvidia-modprobe "
                               "before the container started (LXF202 inside)")
_MISMATCH = Cause("LXF212", "the container's NVIDIA userspace is another version than the host's kernel "
                            "module (after a host driver upgrade)")

KNOWN: tuple[Known, ...] = (
    Known(
        "cuda-unknown", "CUDA unknown error - this may be due to an incorrectly set up environment",
        "PyTorch, TensorFlow, Frigate, Ollama, llama.cpp (cuInit = 999 CUDA_ERROR_UNKNOWN; the runtime API's "
        "error 30; Ollama: 'cuda driver library init failure: 999')",
        (r"CUDA unknown error", r"CUDA_ERROR_UNKNOWN", r"cuInit\(0\)[^\n]{0,40}\b999\b",
         r"cudaGetDeviceCount returned 30", r"cudaErrorUnknown", r"CUDA error: unknown error",
         r"failed to initialize CUDA: unknown error", r"\b(cuda driver library|nvcuda) init failure: 999\b",
         r"\bcuInit err: 999\b", r"\bCUDA error 999\b"),
        (_UVM_DENIED, _UVM_MISSING, _MISMATCH,
         Cause("", "the same 999 on the host itself, outside any container: the host's nvidia_uvm module is "
                   "in a bad state (reported after a suspend and resume); reloading nvidia_uvm on the host, "
                   "with no GPU user running, clears it")),
        DIAGNOSE + ": its probe opens /dev/nvidia-uvm and calls cuInit inside",
        "not the GPU or nvidia-smi: on an H200 with nvidia-uvm denied, nvidia-smi still lists the GPU "
        "and cuInit returns 999 (measured; `lxcfix explain LXF210`)",
        ("tensorflow/tensorflow#53341", "blakeblackshear/frigate#4136", "canonical/lxd#5618",
         "ollama/ollama#9796", "ollama/ollama#8638",
         "gist.github.com/mikaelhg/9b6dfbf1ff66b899e6132c808c55e4e9 (nvidia_uvm after a resume)",
         "measured on an NVIDIA H200 (shared ground truth)"),
    ),
    Known(
        "cuda-no-device", "no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE, cuInit = 100)",
        "CUDA applications",
        (r"no CUDA-capable device is detected", r"CUDA_ERROR_NO_DEVICE", r"cuInit\(0\)[^\n]{0,40}\b100\b"),
        (Cause("LXF200", "the cgroup denies /dev/nvidiactl (195:255) or /dev/nvidiaN (195:N)"),
         Cause("LXF202", "/dev/nvidiactl or /dev/nvidiaN is not passed into the container")),
        DIAGNOSE,
        "not nvidia-uvm: a denied nvidia-uvm gives 999, not 100 (measured on an H200)",
        ("measured on an NVIDIA H200 (shared ground truth)",),
    ),
    Known(
        "nvml-unknown", "Failed to initialize NVML: Unknown Error", "nvidia-smi, NVML users "
        "(Ollama: 'nvml vram init failure: 999', NVML_ERROR_UNKNOWN)",
        (r"Failed to initialize NVML: Unknown Error", r"\bnvml vram init failure: 999\b"),
        (Cause("LXF200", "the cgroup denies /dev/nvidiactl (195:255): NVML cannot open it (measured)"),
         Cause("", "inside Docker in the container: a `systemctl daemon-reload` on the Docker host reset "
                   "the inner container's device cgroup (the NVIDIA runtime's devices are lost until the "
                   "inner container restarts)")),
        DIAGNOSE,
        "not a driver mismatch (that says 'Driver/library version mismatch'), not nvidia-uvm "
        "(nvidia-smi works with it denied)",
        ("NVIDIA/nvidia-docker#1671", "NVIDIA/libnvidia-container#111", "ollama/ollama#1877",
         "measured on an NVIDIA H200 (shared ground truth)"),
    ),
    Known(
        "nvml-mismatch", "Failed to initialize NVML: Driver/library version mismatch", "nvidia-smi, NVML users",
        (r"Driver/library version mismatch",),
        (_MISMATCH,),
        DIAGNOSE + " (it compares /proc/driver/nvidia/version with the container's libcuda)",
        "not a device permission: every node opens; the versions differ",
        ("shared/design/DOMAIN.md (driver/library mismatch)",),
    ),
    Known(
        "nvml-no-devices", "No devices were found", "nvidia-smi",
        (r"^[ \t]{0,16}No devices (were )?found\.?[ \t\r]{0,16}$",),
        (Cause("LXF200", "the cgroup denies /dev/nvidiaN (195:N): nvidia-smi finds no GPU (measured)"),
         Cause("LXF202", "/dev/nvidiaN is not passed into the container")),
        DIAGNOSE,
        "not /dev/nvidiactl: with it denied NVML says 'Unknown Error'",
        ("measured on an NVIDIA H200 (shared ground truth)",),
    ),
    Known(
        "vaapi-22", "Device creation failed: -22", "ffmpeg (Jellyfin, Plex, Frigate: VA-API on /dev/dri/renderD128)",
        (r"Device creation failed: -22", r"No VA display found for (any default )?device"),
        (Cause("LXF204", "the service user (jellyfin, plex) is not allowed to open the render node: its group "
                         "inside is not the node's group, or the idmap maps it to nobody (LXF114, LXF115)"),
         Cause("LXF202", "/dev/dri/renderD128 is not passed into the container, or it is another index now "
                         "(LXF113)"),
         Cause("LXF200", "the cgroup denies 226:128 (a privileged container without the rule)")),
        DIAGNOSE + ": it opens the node as a render/video member inside",
        "not the media file or the codec: ffmpeg cannot create the VA-API device at all",
        ("jellyfin/jellyfin#2467", "tteck/Proxmox#3489", "jellyfin/jellyfin#8217"),
    ),
    Known(
        "not-a-device", "/dev/dri/renderD128 is not a device", "pct start (Proxmox, a devN entry)",
        (r"(/dev/\S{1,96}) is not a device",),
        (Cause("LXF159", "the host path is a regular file or a directory, left by a failed driver install or "
                         "a script, not the device node: the driver did not create it"),),
        "ls -l the path on the host (a node shows `c` first); then " + DIAGNOSE,
        "not the container's config syntax: Proxmox stat()s the path and finds no device there",
        ("tteck/Proxmox#3758", "community-scripts/ProxmoxVE#5589"),
    ),
    Known(
        "devn-missing", "Device /dev/... does not exist", "pct start (Proxmox, a devN entry)",
        (r"Device (/dev/\S{1,96}) does not exist",),
        (Cause("LXF112", "the devN entry's path is missing on the host at start: a driver not loaded, a USB "
                         "device unplugged, a /dev/dri/cardN that got another index (LXF113)"),),
        DIAGNOSE,
        "not the container: Proxmox refuses the start before the container runs",
        ("shared/design/DOMAIN.md (devN: a missing path fails the start)",),
    ),
    Known(
        "bpf-prog-query", "nvidia-container-cli: ... bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted",
        "the NVIDIA container CLI (Docker or Podman with the NVIDIA runtime, inside an LXC container)",
        (r"bpf_prog_query\(BPF_CGROUP_DEVICE\) failed",),
        (Cause("", "the NVIDIA runtime inside the container tries to attach its own device program, which a "
                   "nested or unprivileged container may not: set `no-cgroups = true` in the container's "
                   "/etc/nvidia-container-runtime/config.toml and give the inner container every node "
                   "(/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, /dev/nvidia-caps/*)"),
         Cause("LXF100", "and the LXC layer must allow those majors, nvidia-uvm's dynamic one included")),
        DIAGNOSE + " (the LXC layer); then the inner container's devices",
        "not the host's driver: the CLI fails before it touches the GPU",
        ("blakeblackshear/frigate#8652", "NVIDIA/libnvidia-container#154"),
    ),
    Known(
        "runtime-hook", "invoking the NVIDIA Container Runtime Hook directly ... is not supported",
        "Docker with NVIDIA Container Toolkit 1.18+ (`--gpus`)",
        (r"invoking the NVIDIA Container Runtime Hook directly",),
        (Cause("", "toolkit 1.18 made CDI the default: generate the CDI spec inside the container "
                   "(`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`) and use `--device nvidia.com/gpu=all`, "
                   "or set the runtime's mode back to legacy; regenerate the spec after every host driver upgrade"),),
        "the container's /etc/nvidia-container-runtime/config.toml (`mode`) and /etc/cdi/",
        "not a device permission at the LXC layer",
        ("NVIDIA/nvidia-container-toolkit#1456",),
    ),
    Known(
        "reopen-fd", "... reopen fd 8: permission denied", "runc (docker run inside an LXC container)",
        (r"reopen fd \d{1,10}: permission denied",),
        (Cause("LXF237", "runc's fix for CVE-2025-52881 (runc 1.2.8, 1.3.3, 1.4.0-rc.3 and later) meets the "
                         "AppArmor profile of an lxc-pve before 6.0.5-2: upgrade the host's lxc-pve to 6.0.5-2 or "
                         "later (Incus 6.19) and restart the container; `lxc.apparmor.profile: unconfined` also "
                         "'works' and throws the container's confinement away"),),
        DIAGNOSE + ": it reads the container's runc version from its package database and the host's lxc-pve "
        "(`pveversion -v | grep lxc-pve`)",
        "not the image or Docker's storage driver",
        ("opencontainers/runc#4968", "moby/moby#51405", "opencontainers/runc#4972", "containerd/containerd#12484"),
    ),
    Known(
        "tun-missing", "CreateTUN(\"tailscale0\") failed; /dev/net/tun does not exist",
        "tailscaled, wireguard-go, OpenVPN",
        (r"/dev/net/tun does not exist", r"CreateTUN[^\n]{0,60}(no such file|does not exist)",
         r"Cannot open TUN/TAP dev /dev/net/tun"),
        (Cause("LXF110", "/dev/net/tun is not passed in (its rule may be there without the mount entry)"),
         Cause("LXF100", "or it is passed in and the cgroup denies 10:200 (then the error says 'operation not "
                         "permitted')")),
        DIAGNOSE,
        "not a missing tun kernel module on the host (modprobe inside the container always fails: it has no "
        "modules of its own)",
        ("tailscale/tailscale#5002", "tailscale/tailscale#62"),
    ),
    Known(
        "kfd-missing", "kfd driver not loaded. If running in a container, remember to include '--device "
        "/dev/kfd --device /dev/dri'", "Ollama (ROCm on an AMD GPU: /dev/kfd)",
        (r"kfd driver not loaded",),
        (Cause("LXF110", "/dev/kfd is not passed into the container (Ollama prints this when opening it says "
                         "'no such file'; the render node may be passed in without it)"),
         Cause("LXF112", "/dev/kfd is missing on the host: amdgpu is not loaded there")),
        DIAGNOSE,
        "not a permission: with /dev/kfd there and refused, Ollama says 'permission problems block access' and "
        "names the error (permission denied: the group, LXF204; operation not permitted: the cgroup, LXF200)",
        ("ollama/ollama discover/amd_linux.go (verifyKFDDriverAccess)",),
    ),
    Known(
        "fuse-denied", "fuse: device not found / failed to open /dev/fuse: Operation not permitted",
        "fusermount, rclone, sshfs, Docker's fuse-overlayfs",
        (r"failed to open /dev/fuse", r"fuse: device not found"),
        (Cause("LXF110", "/dev/fuse is not passed in: Proxmox adds it for `features: fuse=1`"),
         Cause("LXF100", "the cgroup denies 10:229")),
        DIAGNOSE,
        "not FUSE's userspace package",
        ("shared/design/DOMAIN.md (features: fuse=1)",),
    ),
    Known(
        "edgetpu", "No EdgeTPU was detected", "Frigate (Coral USB)",
        (r"No EdgeTPU was detected",),
        (Cause("LXF158", "the Coral USB re-enumerates after its firmware loads (1a6e:089a becomes 18d1:9302) "
                         "and lands on another /dev/bus/usb path: pass the bus directory with `c 189:* rwm` "
                         "instead of one device node"),
         Cause("LXF100", "the cgroup denies the USB device (189:N)")),
        DIAGNOSE,
        "not the TPU model file",
        ("blakeblackshear/frigate#1807",),
    ),
    Known(
        "lxc-bad-rule", "Failed to parse device rule devices.allow=/dev/x rw", "lxc-start (its log)",
        (r"Failed to parse device rule",),
        (Cause("LXF145", "a path-form rule whose path is missing at start: LXC skips the rule and starts the "
                         "container anyway, with the device denied"),),
        DIAGNOSE,
        "not a syntax error in the config",
        ("measured on LXC 5.0.2 and 6.0.4 (shared/design/DOMAIN.md)",),
    ),
    Known(
        "lxc-v1-key", "Unsupported config key \"lxc.cgroup.devices.allow\"", "lxc-start (LXC 7)",
        (r"Unsupported config key[^\n]{0,20}lxc\.cgroup\.",),
        (Cause("LXF150", "LXC 7 rejects cgroup v1 keys: rename them to lxc.cgroup2.* (or use devN)"),),
        "lxcfix audit --for lxc-upgrade",
        "not a typo: the key was valid (and ignored) on cgroup v2 until LXC 7",
        ("lxc/lxc#4671",),
    ),
    Known(
        "lxc-hybrid", "Ignoring cgroup2 limits on legacy cgroup system", "lxc-start (its log)",
        (r"Ignoring cgroup2 limits on legacy cgroup system",),
        (Cause("LXF300", "the host runs a hybrid cgroup layout: every lxc.cgroup2.devices line is ignored"),),
        "lxcfix facts (cgroup layout)",
        "not the container's rules: they are not read at all",
        ("measured on LXC 5.0.2 (shared/design/DOMAIN.md)",),
    ),
    Known(
        "eperm-open", "Operation not permitted (opening a /dev node that exists with mode crw-rw-rw-)",
        "any program inside the container",
        (r"can't (create|open) '?/dev/[^\s:']{1,96}'?: Operation not permitted",
         r"open\S{0,16} /dev/[^\s:]{1,96}: operation not permitted"),
        (Cause("LXF200", "the container's cgroup v2 device allowlist lacks the node's major:minor (EPERM comes "
                         "only from the cgroup; the mode and owner give EACCES)"),),
        DIAGNOSE,
        "not the node's mode or owner (that is 'Permission denied', EACCES: LXF201)",
        ("measured on LXC 5.0.2 and 6.0.4 (shared/design/DOMAIN.md)",),
        generic=True,
    ),
    Known(
        "eacces-open", "Permission denied (opening a /dev node the container has)",
        "any program inside the container (a service user: jellyfin, plex, frigate, ollama)",
        (r"(can't|cannot|could not|couldn't|failed to|unable to) (create|open)(?=[^\n]{0,60}/dev/)[^\n]{0,160}?"
         r"permission denied", r"/dev/[^\s:'\")]{1,96}'?\)?: permission denied",
         r"open\S{0,16} /dev/[^\s:]{1,96}: permission denied"),
        (Cause("LXF204", "the service user is not in the node's group inside (its render/video gid is not the "
                         "host node's, LXF235), or the idmap maps the node's group to nobody (LXF114)"),
         Cause("LXF201", "the node's mode, owner or group refuses the user, the idmap maps its owner to "
                         "nobody, or the mount is nodev"),
         Cause("LXF115", "an unprivileged container's bind-mounted node that nobody inside can open, root "
                         "included")),
        DIAGNOSE + ": it opens the node as root and as a member of the node's group inside",
        "not the cgroup: a major:minor the cgroup denies gives 'Operation not permitted' (EPERM, LXF200), "
        "whatever the node's mode",
        ("measured on LXC 5.0.2 and 6.0.4 (shared/design/DOMAIN.md)",),
        generic=True,
    ),
)


def _cut(text: str) -> str:
    return text[:MAX_TEXT]


# Every pattern's quantifiers are bounded ({m,n}): a paste is someone's log, and a repeated
# `\S*`/`\S+` next to what it can also match takes quadratic time on a hostile one ("open" x
# 64 Ki took 34 s). A test holds every pattern to that.
_COMPILED = tuple((k, tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in k.patterns)) for k in KNOWN)


def match(text: str) -> list[Known]:
    """The known messages in `text` (a paste of any length), in the order of the table (each once);
    a generic row only when nothing more specific matched."""
    text = _cut(text)
    found = [k for k, patterns in _COMPILED if any(p.search(text) for p in patterns)]
    specific = [k for k in found if not k.generic]
    return specific or found


def lines(k: Known) -> list[tuple[str, str]]:
    """One match as (text, role) lines; roles "title", "heading", "text", "fix"."""
    out = [(f"{k.says}", "title"), (f"  printed by {k.who}", "text"), ("", "text"), ("Likely causes, in order", "heading")]
    for i, c in enumerate(k.causes, 1):
        out.append((f"  {i}. {c.text}" + (f" [{c.code}]" if c.code else ""), "text"))
    out += [("", "text"), ("Which one it is here", "heading"), (f"  {k.confirm}", "fix"),
            ("", "text"), ("What it is not", "heading"), (f"  {k.not_it}", "text"),
            ("", "text"), (f"Known from: {', '.join(k.sources)}", "text")]
    return out
