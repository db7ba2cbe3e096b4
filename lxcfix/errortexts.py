"""The error texts applications and tools print, and what each means here: `lxcfix explain
"<text>"`. Pure data and a pure match.

People start from what their app printed, not from a finding code. Each row is one message
(as its program prints it, with the public report it is known from), its likely causes in
order (each with the finding code that names it, when lxcfix has one), the command that
tells which one it is on this host, and what it is known not to be, and the real wordings it
is known by, each with where it is printed (`Said`: a repository and file, or a public
report). One failure is one row whoever prints it (PyTorch, ffmpeg, Ollama, the Proxmox task
log), and the errno a text names picks the row: EPERM the cgroup, EACCES the owner, group or
idmap, ENOENT a node that is not there.

    Said("ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)",
         "binhex/arch-delugevpn#393")   -> row "tun-denied" (LXF100), not "tun-missing"

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
class Said:
    """One wording of a message as its program prints it, and where that wording is printed:
    the repository and file, or a public report that quotes it (each is a test)."""

    text: str
    source: str


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
    said: tuple[Said, ...] = ()  # real wordings, each with its source
    needs: tuple[str, ...] = ()  # lowercase words every pattern spells out: a text without one is skipped


    def to_json(self) -> dict:
        return {"id": self.id, "says": self.says, "who": self.who,
                "causes": [{"code": c.code or None, "text": c.text} for c in self.causes],
                "confirm": self.confirm, "not": self.not_it, "sources": list(self.sources),
                "said": [{"text": w.text, "source": w.source} for w in self.said]}


DIAGNOSE = "lxcfix diagnose --ct CT (the container the app runs in; `lxcfix scan` for all of them)"
_UVM_DENIED = Cause("LXF200", "the container's cgroup denies /dev/nvidia-uvm: its major is dynamic and moved "
                              "after a reboot or driver upgrade (a stale `c M:* rwm` rule, LXF101), or no rule "
                              "allows it (LXF100)")
_UVM_MISSING = Cause("LXF112", "/dev/nvidia-uvm does not exist on the host yet: nothing ran nvidia-modprobe "
                               "before the container started (LXF202 inside)")
_MISMATCH = Cause("LXF212", "the container's NVIDIA userspace is another version than the host's kernel "
                            "module (after a host driver upgrade)")
_PCT_START = "pct start (Proxmox task log: TASK ERROR)"
_LXC_DEBUG = "lxc-start -n CT -F -l DEBUG -o /tmp/lxc-CT.log (the container's full start log), then " + DIAGNOSE
# the errno a text names picks the cause: EPERM is the cgroup, EACCES the owner, group, mode or
# idmap, ENOENT a node that is not there; these three rows are what any /dev open says
_OPEN_VERB = (r"(can't|cannot|could not|couldn't|failed to|unable to) (create|open|access)"
              r"(?=[^\n]{0,60}/dev/)[^\n]{0,160}?")

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
        said=(
            Said("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. "
                 "changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices "
                 "to be zero.", "pytorch/pytorch c10/cuda/CUDAFunctions.cpp (cudaErrorUnknown)"),
            Said("E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: CUDA_ERROR_UNKNOWN: "
                 "unknown error", "tensorflow/tensorflow#53341"),
            Said("cu->cuInit(0) failed -> CUDA_ERROR_UNKNOWN: unknown error",
                 "blakeblackshear/frigate#4136, FFmpeg/FFmpeg libavutil/hwcontext_cuda.c (cuda_device_init)"),
            Said("error: cudaGetDeviceCount returned 30", "canonical/lxd#5618"),
        ),
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
        said=(
            Said("[AVHWDeviceContext] cu->cuInit(0) failed -> CUDA_ERROR_NO_DEVICE: no CUDA-capable device is "
                 "detected", "FFmpeg/FFmpeg libavutil/hwcontext_cuda.c (cuda_device_init)"),
        ),
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
        said=(Said("Failed to initialize NVML: Unknown Error", "NVIDIA/nvidia-docker#1671"),),
    ),
    Known(
        "nvml-mismatch", "Failed to initialize NVML: Driver/library version mismatch", "nvidia-smi, NVML users",
        (r"Driver/library version mismatch",),
        (_MISMATCH,),
        DIAGNOSE + " (it compares /proc/driver/nvidia/version with the container's libcuda)",
        "not a device permission: every node opens; the versions differ",
        ("shared/design/DOMAIN.md (driver/library mismatch)", "NVIDIA/nvidia-docker#365",
         "NVIDIA/nvidia-container-toolkit#394"),
        said=(
            Said("Failed to initialize NVML: Driver/library version mismatch", "NVIDIA/nvidia-docker#365"),
            Said("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: "
                 "unknown.", "NVIDIA/nvidia-container-toolkit#394"),
        ),
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
        "vaapi-22", "Device creation failed: -22",
        "ffmpeg (Jellyfin, Plex, Frigate: VA-API or QSV on /dev/dri/renderD128)",
        (r"Device creation failed: -22", r"No VA display found for (any default )?device",
         r"Failed to initialise VAAPI connection", r"Failed to open /dev/dri/\S{1,32} as DRM device node",
         r"Cannot open DRM render node for device", r"Cannot open a VA display from DRM device",
         r"Failed to set value '(qsv|vaapi)[^'\n]{0,160}' for option 'init_hw_device'",
         r"Failed to set value '/dev/dri/[^'\n]{1,64}' for option 'vaapi_device'"),
        (Cause("LXF204", "the service user (jellyfin, plex) is not allowed to open the render node: its group "
                         "inside is not the node's group, or the idmap maps it to nobody (LXF114, LXF115)"),
         Cause("LXF202", "/dev/dri/renderD128 is not passed into the container, or it is another index now "
                         "(LXF113)"),
         Cause("LXF200", "the cgroup denies 226:128 (a privileged container without the rule)"),
         Cause("", "the node opens and the VA driver does not load (libva prints '..._drv_video.so init "
                   "failed' just before): the wrong driver for the iGPU's generation (iHD for Broadwell and "
                   "later, i965 before: LIBVA_DRIVER_NAME), or an NVIDIA card behind the render node")),
        DIAGNOSE + ": it opens the node as a render/video member inside",
        "not the media file or the codec: ffmpeg cannot create the VA-API device at all",
        ("jellyfin/jellyfin#2467", "tteck/Proxmox#3489", "jellyfin/jellyfin#8217", "jellyfin/jellyfin#9929",
         "jellyfin/jellyfin#7280", "FFmpeg/FFmpeg libavutil/hwcontext_vaapi.c"),
        said=(
            Said("[AVHWDeviceContext @ 0x5623c11ebd40] No VA display found for device /dev/dri/renderD128. Device "
                 "creation failed: -22.", "jellyfin/jellyfin#2467"),
            Said("[AVHWDeviceContext @ 0x6543173f52c0] No VA display found for any default device.",
                 "tteck/Proxmox#3489"),
            Said("[AVHWDeviceContext @ 0x55ebf0c4d9c0] Failed to initialise VAAPI connection: -1 (unknown libva "
                 "error).", "jellyfin/jellyfin#9929, datarhei/restreamer#522 (a Proxmox LXC container)"),
            Said("Failed to open /dev/dri/renderD128 as DRM device node.",
                 "FFmpeg/FFmpeg libavutil/hwcontext_vaapi.c (vaapi_device_create)"),
            Said("[AVHWDeviceContext @ 0x5f7c1a5a90c0] Cannot open DRM render node for device 0.",
                 "FFmpeg/FFmpeg libavutil/hwcontext_vaapi.c (vaapi_device_create)"),
            Said("Device creation failed: -542398533.\nFailed to set value 'qsv=hw' for option 'init_hw_device': "
                 "Generic error in an external library", "jellyfin/jellyfin#7280 (QSV in a Proxmox container: the "
                 "jellyfin user's group)"),
            Said("Failed to set value '/dev/dri/renderD128' for option 'vaapi_device': Input/output error",
                 "linuxserver/docker-ffmpeg#80, datarhei/restreamer#522"),
        ),
    ),
    Known(
        "not-a-device", "/dev/dri/renderD128 is not a device", "pct start (Proxmox, a devN entry)",
        (r"(/dev/\S{1,96}) is not a device",),
        (Cause("LXF159", "the host path is a regular file or a directory, left by a failed driver install or "
                         "a script, not the device node: the driver did not create it"),),
        "ls -l the path on the host (a node shows `c` first); then " + DIAGNOSE,
        "not the container's config syntax: Proxmox stat()s the path and finds no device there",
        ("tteck/Proxmox#3758", "community-scripts/ProxmoxVE#5589", "proxmox/pve-container src/PVE/LXC/Tools.pm"),
        said=(
            Said("TASK ERROR: //dev/dri/renderD128 is not a device",
                 "proxmox/pve-container src/PVE/LXC/Tools.pm, tteck/Proxmox#3758"),
            Said("Starting LXC Container/dev/dri/renderD128 is not a device", "community-scripts/ProxmoxVE#5589"),
        ),
    ),
    Known(
        "devn-missing", "Device /dev/... does not exist", "pct start (Proxmox, a devN entry)",
        (r"Device (/dev/\S{1,96}) does not exist",),
        (Cause("LXF112", "the devN entry's path is missing on the host at start: a driver not loaded, a USB "
                         "device unplugged, a /dev/dri/cardN that got another index (LXF113)"),),
        DIAGNOSE,
        "not the container: Proxmox refuses the start before the container runs",
        ("shared/design/DOMAIN.md (devN: a missing path fails the start)",
         "proxmox/pve-container src/PVE/LXC/Tools.pm"),
        said=(Said("TASK ERROR: Device /dev/dri/card1 does not exist",
                   "proxmox/pve-container src/PVE/LXC/Tools.pm (a devN path, ENOENT)"),),
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
        said=(Said("nvidia-container-cli: initialization error: load library failed: bpf_prog_query"
                   "(BPF_CGROUP_DEVICE) failed: operation not permitted: unknown", "NVIDIA/libnvidia-container#154"),),
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
        "tailscaled, wireguard-go, OpenVPN, ZeroTier",
        (r"/dev/net/tun does not exist", r"CreateTUN[^\n]{0,60}(no such file|does not exist)",
         r"Cannot open TUN/TAP dev /dev/net/tun: No such file", r"open /dev/net/tun: no such file",
         r"could not open TUN/TAP device: No such file"),
        (Cause("LXF110", "/dev/net/tun is not passed in (its rule may be there without the mount entry)"),
         Cause("LXF112", "or the host has no /dev/net/tun (the tun module is not loaded there)")),
        DIAGNOSE,
        "not a permission: a tun node that is there and denied says 'Operation not permitted' (the cgroup); "
        "not something to fix inside: modprobe in the container always fails (it has no modules of its own)",
        ("tailscale/tailscale#5002", "tailscale/tailscale#62", "turnkeylinux/tracker#1032"),
        said=(
            Said("getLocalBackend error: createEngine: tstun.New(\"tailscale0\"): CreateTUN(\"tailscale0\") failed; "
                 "/dev/net/tun does not exist", "tailscale/tailscale#5002"),
            Said("ERROR: Cannot open TUN/TAP dev /dev/net/tun: No such file or directory (errno=2)",
                 "turnkeylinux/tracker#1032 (OpenVPN in a Proxmox container)"),
        ),
    ),
    Known(
        "tun-denied", "ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted (errno=1)",
        "OpenVPN, tailscaled, wireguard-go (EPERM opening /dev/net/tun)",
        (r"Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted",
         r"CreateTUN[^\n]{0,60}operation not permitted", r"open /dev/net/tun: operation not permitted"),
        (Cause("LXF100", "the container's cgroup does not allow 10:200: the node is there and the open is "
                         "refused (EPERM comes only from the cgroup); Proxmox: `dev0: /dev/net/tun`, or "
                         "`lxc.cgroup2.devices.allow: c 10:200 rwm` with its mount entry"),
         Cause("LXF121", "the rule is in the config, the running container predates it: restart it"),
         Cause("LXF222", "inside Docker in the container: the inner container needs the node too "
                         "(`--device /dev/net/tun`, `cap_add: NET_ADMIN`)")),
        DIAGNOSE,
        "not a missing node (that is 'No such file or directory', errno=2) and not the node's mode "
        "(that is 'Permission denied', errno=13)",
        ("binhex/arch-delugevpn#393", "haugene/docker-transmission-openvpn#2900"),
        said=(Said("2024-03-10 13:46:25 ERROR: Cannot open TUN/TAP dev /dev/net/tun: Operation not permitted "
                   "(errno=1)", "binhex/arch-delugevpn#393 (a privileged Proxmox container), "
                   "haugene/docker-transmission-openvpn#2900"),),
    ),
    Known(
        "cuda-init", "CUDA driver initialization failed, you might not have a CUDA gpu.",
        "PyTorch (cudaGetDeviceCount = 3, cudaErrorInitializationError), vLLM, anything on torch",
        (r"CUDA driver initialization failed, you might not have a CUDA gpu", r"\bcudaErrorInitializationError\b"),
        (Cause("LXF202", "the NVIDIA nodes are not all inside: /dev/nvidiactl, /dev/nvidiaN or /dev/nvidia-uvm "
                         "was missing on the host when the container started, or is not passed in"),
         Cause("LXF200", "the container's cgroup denies one of them (nvidia-uvm's major is dynamic)"),
         Cause("", "the host's driver itself is in a bad state (an Xid, a GPU fallen off the bus, a driver "
                   "upgrade without a reboot): `nvidia-smi` on the host says so"),
         Cause("", "not a device at all: a worker process forked after its parent had initialised CUDA "
                   "(vLLM: VLLM_WORKER_MULTIPROC_METHOD=spawn)")),
        DIAGNOSE + ": its probe opens every NVIDIA node and calls cuInit inside, and names the result",
        "not a missing GPU: the wording guesses; cudaGetDeviceCount returned 3 because the driver could not "
        "be initialised",
        ("pytorch/pytorch c10/cuda/CUDAFunctions.cpp",),
        said=(
            Said("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
                 "pytorch/pytorch c10/cuda/CUDAFunctions.cpp (cudaErrorInitializationError)"),
        ),
    ),
    Known(
        "nvidia-no-driver", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        "nvidia-smi; nvidia-container-cli ('nvml error: driver not loaded': Docker or Podman with the NVIDIA "
        "runtime inside the container)",
        (r"couldn.t communicate with the NVIDIA driver", r"nvml error: driver not loaded"),
        (Cause("LXF202", "/dev/nvidiactl is not inside the container: it is not passed in, or it was an optional "
                         "bind mount of a node missing at start (NVML finds no driver to talk to)"),
         Cause("LXF112", "the host's nvidia module is not loaded (nvidia-smi fails on the host too): a kernel "
                         "upgrade without the module built for it, or nouveau took the GPU")),
        DIAGNOSE + "; on the host: nvidia-smi",
        "not a permission: with /dev/nvidiactl there and denied, NVML says 'Unknown Error' (measured); not the "
        "container's driver version (that says 'Driver/library version mismatch')",
        ("canonical/lxd#3642", "canonical/lxd#5433", "NVIDIA/nvidia-container-toolkit#1269",
         "NVIDIA/nvidia-docker#1393"),
        said=(
            Said("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                 "latest NVIDIA driver is installed and running.", "canonical/lxd#5433"),
            Said("nvidia-container-cli: initialization error: nvml error: driver not loaded",
                 "NVIDIA/nvidia-container-toolkit#1269"),
            Said("stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
                 "NVIDIA/nvidia-docker#1393"),
        ),
    ),
    Known(
        "lxc-mount-missing", "No such file or directory - Failed to mount \"/dev/...\" on \".../rootfs/dev/...\"",
        "lxc-start (in the pct start task log, before 'startup for container ... failed')",
        (r"No such file or directory - Failed to mount \"/dev/[^\"\n]{1,96}\" (on|onto) ",),
        (Cause("LXF111", "an lxc.mount.entry of a /dev node without `optional` whose source is missing on the "
                         "host at start: LXC aborts the start (with `optional` it starts without the node)"),
         Cause("LXF112", "why the source is missing: the driver is not loaded yet (nvidia-modeset, nvidia-uvm "
                         "before nvidia-modprobe), a USB device unplugged, a card/renderD index that changed "
                         "(LXF113)")),
        DIAGNOSE,
        "not the container's rootfs: the source, on the host, is what is missing",
        ("remz1337/Proxmox#8", "lxc/lxc src/lxc/conf.c (mount_entry)"),
        said=(
            Said("safe_mount: 1425 No such file or directory - Failed to mount \"/dev/nvidia-modeset\" onto "
                 "\"/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/nvidia-modeset\"", "remz1337/Proxmox#8"),
            Said("No such file or directory - Failed to mount \"/dev/dri/renderD128\" on "
                 "\"/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/dri/renderD128\"",
                 "lxc/lxc src/lxc/conf.c (mount_entry's message)"),
        ),
    ),
    Known(
        "hookscript-failed", "hookscript error for 200 on pre-start: command '...' failed: exit code 1",
        "pct start (Proxmox runs the container's `hookscript:` before the start)",
        (r"hookscript error for \d{1,10} on [a-z-]{1,16}:",),
        (Cause("", "the script ran and refused the start (exit code N): its own message is on the lines above "
                   "in the task log; `lxcfix hook --mode fail` refuses a container with an error finding and "
                   "says which and what to run"),
         Cause("LXF152", "the snippet is missing, not executable, or on a storage this host lacks (the error "
                         "then names the script, not an exit code)")),
        "the task log's lines above it; run the snippet by hand as Proxmox does: /var/lib/vz/snippets/SCRIPT "
        "CT pre-start; `lxcfix scan` reports LXF152",
        "not LXC: the start stops before lxc-start runs",
        ("proxmox/pve-guest-common src/PVE/GuestHelpers.pm (exec_hookscript)",),
        said=(Said("hookscript error for 200 on pre-start: command '/var/lib/vz/snippets/hook.sh 200 pre-start' "
                   "failed: exit code 1", "proxmox/pve-guest-common src/PVE/GuestHelpers.pm (exec_hookscript)"),),
    ),
    Known(
        "pct-start-failed", "TASK ERROR: startup for container '200' failed", _PCT_START,
        (r"startup for container '\d{1,10}' failed",),
        (Cause("LXF112", "a device the config passes in is missing on the host (the lines above say 'Failed to "
                         "mount \"/dev/...\"')"),
         Cause("LXF152", "the hookscript failed or is missing ('hookscript error for ...' above)"),
         Cause("", "a pre-start hook or a storage mount point (mpN) failed: 'Failed to run lxc.hook.pre-start' "
                   "above; lxc-start's debug log names the step")),
        _LXC_DEBUG,
        "only the last line: the cause is in the lines before it (paste the whole task log)",
        ("proxmox/pve-container src/PVE/LXC.pm",),
        generic=True,
        said=(Said("TASK ERROR: startup for container '102' failed",
                   "proxmox/pve-container src/PVE/LXC.pm, Saberwolf64/Proxmox-Nvidia-LXC-#1"),),
    ),
    Known(
        "kfd-missing", "kfd driver not loaded. If running in a container, remember to include '--device "
        "/dev/kfd --device /dev/dri'", "Ollama, rocminfo (ROCm on an AMD GPU: /dev/kfd)",
        (r"kfd driver not loaded", r"Unable to open /dev/kfd read-write: No such file"),
        (Cause("LXF110", "/dev/kfd is not passed into the container (Ollama prints this when opening it says "
                         "'no such file'; the render node may be passed in without it)"),
         Cause("LXF112", "/dev/kfd is missing on the host: amdgpu is not loaded there")),
        DIAGNOSE,
        "not a permission: with /dev/kfd there and refused, Ollama says 'permission problems block access' and "
        "names the error (permission denied: the group, LXF204; operation not permitted: the cgroup, LXF200)",
        ("ollama/ollama discover/amd_linux.go (verifyKFDDriverAccess)", "ROCm/rocminfo rocminfo.cc"),
        said=(
            Said("msg=\"amdgpu devices detected but permission problems block access: kfd driver not loaded.  If "
                 "running in a container, remember to include '--device /dev/kfd --device /dev/dri'\"",
                 "ollama/ollama discover/amd_linux.go (verifyKFDDriverAccess)"),
            Said("Unable to open /dev/kfd read-write: No such file or directory",
                 "ROCm/rocminfo rocminfo.cc (CheckInitialState)"),
        ),
    ),
    Known(
        "fuse-missing", "fusermount: fuse device not found, try 'modprobe fuse' first",
        "fusermount, fusermount3, libfuse users (rclone mount, sshfs, s3fs, Docker's fuse-overlayfs)",
        (r"fuse device not found", r"fuse: device not found"),
        (Cause("LXF110", "/dev/fuse is not inside the container (ENOENT or ENODEV opening it): Proxmox adds it "
                         "for `features: fuse=1`; a raw config needs the node and `c 10:229 rwm`"),
         Cause("LXF112", "or the host has no /dev/fuse (the fuse module is not loaded there)")),
        DIAGNOSE,
        "not a module to load inside: `modprobe fuse` in a container cannot work; and not a permission "
        "(that is 'failed to open /dev/fuse: ...' with the error)",
        ("libfuse/libfuse util/fusermount.c", "itsToggle/rclone_RD#37", "lxc/lxc#80"),
        said=(
            Said("2023/06/09 17:56:36 mount helper error: fusermount: fuse device not found, try 'modprobe fuse' "
                 "first", "itsToggle/rclone_RD#37 (Plex in a Proxmox container), libfuse/libfuse util/fusermount.c"),
            Said("fuse: device not found, try 'modprobe fuse' first", "lxc/lxc#80"),
        ),
    ),
    Known(
        "fuse-denied", "fusermount: failed to open /dev/fuse: Operation not permitted",
        "fusermount, rclone, sshfs, Docker's fuse-overlayfs (EPERM opening /dev/fuse)",
        (r"failed to open /dev/fuse: Operation not permitted",),
        (Cause("LXF100", "the cgroup denies 10:229: the node is there and the open is refused (EPERM comes only "
                         "from the cgroup)"),
         Cause("LXF121", "the rule is in the config, the running container predates it: restart it")),
        DIAGNOSE,
        "not FUSE's userspace package, and not a missing node (that is 'fuse device not found')",
        ("shared/design/DOMAIN.md (features: fuse=1)", "libfuse/libfuse util/fusermount.c"),
    ),
    Known(
        "kvm-missing", "Could not access KVM kernel module: No such file or directory",
        "QEMU (qemu-system-*, Android emulator, Docker-OSX), Docker ('adding custom device \"/dev/kvm\"')",
        (r"Could not access KVM kernel module: No such file", r"failed to initialize kvm: No such file",
         r"custom device \"/dev/kvm\": no such file"),
        (Cause("LXF110", "/dev/kvm is not passed into the container (`dev0: /dev/kvm`, or its mount entry and "
                         "`c 10:232 rwm`)"),
         Cause("LXF112", "the host has no /dev/kvm: kvm_intel or kvm_amd is not loaded, virtualization is off "
                         "in the firmware, or the host is itself a VM without nested virtualization")),
        DIAGNOSE,
        "not a package inside (qemu-kvm is there; the node is not); a /dev/kvm that is there and refused says "
        "'Permission denied' (the kvm group) or 'Operation not permitted' (the cgroup)",
        ("qemu/qemu accel/kvm/kvm-all.c", "foxlet/macOS-Simple-KVM#121", "sickcodes/Docker-OSX#522"),
        said=(
            Said("Could not access KVM kernel module: No such file or directory\nqemu-system-x86_64: failed to "
                 "initialize KVM: No such file or directory",
                 "foxlet/macOS-Simple-KVM#121, qemu/qemu accel/kvm/kvm-all.c"),
            Said("docker: Error response from daemon: error gathering device information while adding custom device "
                 "\"/dev/kvm\": no such file or directory.", "sickcodes/Docker-OSX#522"),
        ),
    ),
    Known(
        "edgetpu", "No EdgeTPU was detected", "Frigate, pycoral, tflite_runtime (Coral USB or PCIe/M.2)",
        (r"No EdgeTPU was detected", r"Failed to load delegate from libedgetpu"),
        (Cause("LXF158", "the Coral USB re-enumerates after its firmware loads (1a6e:089a becomes 18d1:9302) "
                         "and lands on another /dev/bus/usb path: pass the bus directory with `c 189:* rwm` "
                         "instead of one device node"),
         Cause("LXF100", "the cgroup denies the USB device (189:N), or the PCIe Coral's /dev/apex_0 (its major is "
                         "dynamic: 120 on most hosts, not fixed)"),
         Cause("LXF112", "the PCIe/M.2 Coral: /dev/apex_0 is missing on the host (the gasket and apex modules "
                         "are out of tree: gasket-dkms, rebuilt for each kernel)")),
        DIAGNOSE,
        "not the TPU model file, and not the libedgetpu package: the delegate cannot open the device",
        ("blakeblackshear/frigate#1807", "blakeblackshear/frigate#6254", "Bytelake/Coral-in-LXC#1"),
        said=(
            Said("frigate.detectors.plugins.edgetpu_tfl ERROR   : No EdgeTPU was detected. If you do not have a "
                 "Coral device yet, you must configure CPU detectors.", "blakeblackshear/frigate#9330"),
            Said("ValueError: Failed to load delegate from libedgetpu.so.1.0",
                 "blakeblackshear/frigate#6254 (a PCIe Coral, Docker in a Proxmox container), Bytelake/Coral-in-LXC#1"),
        ),
    ),
    Known(
        "rknpu", "E RKNN: failed to open rknpu module, need to insmod rknpu dirver!",
        "the Rockchip NPU runtime (librknnrt: rknn-toolkit-lite2, RKLLM, Frigate's rknn detector)",
        (r"failed to open rknpu module", r"failed to open rknn device"),
        (Cause("LXF110", "the NPU's node is not inside the container: the RKNPU is a DRM device on the vendor "
                         "kernels (/dev/dri/card1 and renderD129 on an RK3588), so /dev/dri must be passed in, "
                         "not only renderD128"),
         Cause("LXF204", "the user is not allowed to open it (the reports' 'works with sudo'): not in the node's "
                         "group (video or render) inside, or the idmap maps that group to nobody (LXF114)"),
         Cause("LXF112", "the host kernel has no rknpu driver (a mainline kernel without it)")),
        DIAGNOSE,
        "not a module to insert inside the container, whatever the message says",
        ("airockchip/rknn-toolkit2#68", "rockchip-linux/rknn-toolkit2#244", "rockchip-linux/rknn-toolkit#507"),
        said=(Said("E RKNN: [01:39:03.186] failed to open rknpu module, need to insmod rknpu dirver!",
                   "airockchip/rknn-toolkit2#68"),),
    ),
    Known(
        "serial-denied", "Error: Error: Permission denied, cannot open /dev/ttyACM0",
        "zigbee2mqtt and Z-Wave JS (node serialport), pyserial users (Home Assistant ZHA: [Errno 13])",
        (r"Permission denied, cannot open /dev/tty", r"could not open port /dev/tty\S{1,40}: \[Errno 13\]"),
        (Cause("LXF114", "an unprivileged container: the adapter is root:dialout 0660 on the host and the idmap "
                         "maps dialout (20) to nobody, unless it passes gid 20 through"),
         Cause("LXF204", "the service user (zigbee2mqtt, node, homeassistant) is not in dialout inside"),
         Cause("LXF115", "the node's host owner and group are both outside the idmap: nobody:nogroup inside, "
                         "root included")),
        DIAGNOSE + ": it opens the node as root and as a dialout member inside",
        "not the cgroup (that is 'Operation not permitted, cannot open'), not the adapter's firmware",
        ("Koenkk/zigbee2mqtt#22927", "Koenkk/zigbee2mqtt#12218"),
        said=(
            Said("Error while opening serialport 'Error: Error: Permission denied, cannot open /dev/ttyACM0'",
                 "Koenkk/zigbee2mqtt#22927 (zigbee2mqtt in an LXC container)"),
            Said("Error: Error while opening serialport 'Error: Error: Permission denied, cannot open /dev/ttyUSB0'",
                 "Koenkk/zigbee2mqtt#12218"),
        ),
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
         r"open\S{0,16} /dev/[^\s:]{1,96}: operation not permitted", _OPEN_VERB + r"operation not permitted",
         r"operation not permitted, cannot open /dev/", r"\[Errno 1\] Operation not permitted: '/dev/",
         r"Could not access KVM kernel module: Operation not permitted"),
        (Cause("LXF200", "the container's cgroup v2 device allowlist lacks the node's major:minor (EPERM comes "
                         "only from the cgroup; the mode and owner give EACCES)"),
         Cause("LXF121", "the rule is in the config, the running container predates it: restart it")),
        DIAGNOSE,
        "not the node's mode or owner (that is 'Permission denied', EACCES: LXF201)",
        ("measured on LXC 5.0.2 and 6.0.4 (shared/design/DOMAIN.md)", "Koenkk/zigbee2mqtt#25853",
         "home-assistant/core#83263", "ROCm/rocminfo rocminfo.cc"),
        generic=True, needs=("operation not permitted",),
        said=(
            Said("Operation not permitted, cannot open /dev/ttyUSB0",
                 "Koenkk/zigbee2mqtt#25853 (k3s in a Proxmox container), pimox/pimox7#47"),
            Said("PermissionError: [Errno 1] Operation not permitted: '/dev/ttyACM0'", "home-assistant/core#83263"),
            Said("Unable to open /dev/kfd read-write: Operation not permitted",
                 "ROCm/rocminfo rocminfo.cc (CheckInitialState)"),
        ),
    ),
    Known(
        "eacces-open", "Permission denied (opening a /dev node the container has)",
        "any program inside the container (a service user: jellyfin, plex, frigate, ollama)",
        (_OPEN_VERB + r"permission denied", r"/dev/[^\s:'\")]{1,96}'?\)?: permission denied",
         r"open\S{0,16} /dev/[^\s:]{1,96}: permission denied", r"\[Errno 13\] Permission denied: '/dev/",
         r"Could not access KVM kernel module: Permission denied"),
        (Cause("LXF204", "the service user is not in the node's group inside (its render/video gid is not the "
                         "host node's, LXF235), or the idmap maps the node's group to nobody (LXF114)"),
         Cause("LXF201", "the node's mode, owner or group refuses the user, the idmap maps its owner to "
                         "nobody, or the mount is nodev"),
         Cause("LXF115", "an unprivileged container's bind-mounted node that nobody inside can open, root "
                         "included")),
        DIAGNOSE + ": it opens the node as root and as a member of the node's group inside",
        "not the cgroup: a major:minor the cgroup denies gives 'Operation not permitted' (EPERM, LXF200), "
        "whatever the node's mode",
        ("measured on LXC 5.0.2 and 6.0.4 (shared/design/DOMAIN.md)", "ROCm/rocminfo rocminfo.cc",
         "intel/linux-npu-driver#74"),
        generic=True, needs=("permission denied",),
        said=(
            Said("Unable to open /dev/kfd read-write: Permission denied",
                 "ROCm/rocminfo rocminfo.cc (CheckInitialState)"),
            Said("[ERROR] Failed to open file '/dev/accel/accel0': Permission denied",
                 "intel/linux-npu-driver#74 (the Intel NPU: the render group)"),
        ),
    ),
    Known(
        "enoent-open", "No such file or directory (opening a /dev node)", "any program inside the container",
        (_OPEN_VERB + r"no such file or directory", r"no such file or directory, cannot open /dev/",
         r"\[Errno 2\] No such file or directory: '/dev/", r"open /dev/[^\s:]{1,96}: no such file or directory",
         r"custom device \"/dev/[^\"\n]{1,96}\": no such file or directory"),
        (Cause("LXF110", "the node is not passed into the container (a rule without its mount entry or devN)"),
         Cause("LXF112", "the node is missing on the host: its driver is not loaded, the device is unplugged"),
         Cause("LXF155", "a USB serial adapter or a card/renderD node by its index, which changed on a replug "
                         "or a reboot (LXF113): pass /dev/serial/by-id/... or /dev/dri/by-path/... instead")),
        DIAGNOSE,
        "not a permission (that is 'Permission denied' or 'Operation not permitted')",
        ("Koenkk/zigbee2mqtt#13555", "linuxserver/docker-webtop#232"),
        generic=True, needs=("no such file or directory",),
        said=(
            Said("Error: Error while opening serialport 'Error: Error: No such file or directory, cannot open "
                 "/dev/ttyUSB0'", "Koenkk/zigbee2mqtt#13555"),
            Said("Error response from daemon: error gathering device information while adding custom device "
                 "\"/dev/dri\": no such file or directory", "linuxserver/docker-webtop#232 (Docker in a Proxmox "
                 "container)"),
        ),
    ),
)


def _cut(text: str) -> str:
    return text[:MAX_TEXT]


# Every pattern's quantifiers are bounded ({m,n}): a paste is someone's log, and a repeated
# `\S*`/`\S+` next to what it can also match takes quadratic time on a hostile one ("open" x
# 64 Ki took 34 s). A test holds every pattern to that.
_COMPILED = tuple((k, tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in k.patterns)) for k in KNOWN)
# A row's `needs` is a quick reject: the three errno rows' patterns try a verb at every position of a
# paste (0.2 s each on 256 KiB), and most pastes do not name that errno at all.


def match(text: str) -> list[Known]:
    """The known messages in `text` (a paste of any length), in the order of the table (each once);
    a generic row only when nothing more specific matched."""
    text = _cut(text)
    low = text.lower()
    found = [k for k, patterns in _COMPILED
             if (not k.needs or any(w in low for w in k.needs)) and any(p.search(text) for p in patterns)]
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
