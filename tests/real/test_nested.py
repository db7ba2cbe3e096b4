"""One layer deeper, on real parts (issue 20): an OCI container run by runc inside a real LXC
container, /dev/net/tun (10:200) passed through both layers.

Measured on these machines: crun (and Podman over it) fails with `setrlimit (RLIM_MEMLOCK):
Operation not permitted` (no CAP_SYS_RESOURCE); Debian 12's runc 1.1.5, given an OCI config.json
whose process has no rlimits, runs the inner container directly (`runc run -d`, no daemon) in a
privileged LXC container with proc:rw sys:rw cgroup:rw and tmpfs on dev/shm and run. The inner
rootfs is hand-made (harness.make_rootfs, /usr bind-mounted read-only from the LXC container's,
which is the host's), so the inner probe has sh and python3.

The three states: the LXC layer lacks the rule (the inner open gives EPERM: LXF220, and the LXC
layer's own LXF100/LXF200), the LXC layer allows it but the inner container is not given it
(LXF221), both (the inner open works: no inner finding). A BPF device program is asserted
attached to the LXC container's cgroup, so a silently ignored rule can never pass.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from . import harness
from .cli import TUN_MOUNT, lxcfix

RUNC = shutil.which("runc")
pytestmark = pytest.mark.skipif(RUNC is None or not RUNC.startswith("/usr/"),
                                reason="runc not installed on the host's /usr (.ci/run installs Debian's runc)")

NESTED = ["lxc.mount.auto = proc:rw sys:rw cgroup:rw",
          "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir 0 0",
          "lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,create=dir 0 0",
          TUN_MOUNT]
ALLOW_TUN = "lxc.cgroup2.devices.allow = c 10:200 rwm"
TUN = {"path": "/dev/net/tun", "type": "c", "major": 10, "minor": 200, "fileMode": 0o666, "uid": 0, "gid": 0}
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETUID", "CAP_SETGID"]


def oci_config(devices=()) -> dict:
    """An OCI runtime spec with no process.rlimits (what crun's setrlimit fails on here)."""
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["sleep", "1000"],
                    "env": ["PATH=/usr/bin:/bin:/usr/sbin:/sbin"], "cwd": "/", "noNewPrivileges": True,
                    "capabilities": {k: CAPS for k in ("bounding", "effective", "permitted")}},
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "inner",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755", "size=1m"]},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
            "devices": list(devices),
            "resources": {"devices": [{"allow": False, "access": "rwm"}] + [
                {"allow": True, "type": d["type"], "major": d["major"], "minor": d["minor"], "access": "rwm"}
                for d in devices]},
        },
    }


class InnerRunc:
    """An inner container `runc run -d` started inside an LXC container, and its cleanup."""

    def __init__(self, c: harness.Container, name: str, devices=()):
        self.c, self.name = c, name
        bundle = os.path.join(c.rootfs, "root", "bundle-" + name)
        harness.make_rootfs(os.path.join(bundle, "rootfs"))
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump(oci_config(devices), f)
        r = c.attach(["runc", "--root", "/run/runc", "run", "-d", "--bundle", "/root/bundle-" + name, name],
                     timeout=30)
        if not r.ok:
            raise harness.HarnessError(f"runc run in {c.name} failed rc={r.rc}: {r.stderr.strip()}")

    def open_errno(self, path: str) -> str:
        r = self.c.attach(["runc", "--root", "/run/runc", "exec", self.name, "python3", "-c",
                           "import errno, os, sys\ntry:\n os.close(os.open(sys.argv[1], os.O_RDWR)); print('ok')\n"
                           "except OSError as e: print(errno.errorcode[e.errno])", path])
        return r.stdout.strip()

    def delete(self) -> None:
        if self.c.running():
            self.c.attach(["runc", "--root", "/run/runc", "delete", "-f", self.name], timeout=30)


@pytest.fixture
def nested(container_factory, tun):
    made = []

    def make(lxc_rule: bool, inner_device: bool):
        c = container_factory(NESTED + ([ALLOW_TUN] if lxc_rule else []))
        assert c.bpf_attached()
        inner = InnerRunc(c, "inner1", [TUN] if inner_device else [])
        made.append(inner)
        return c, inner

    yield make
    for inner in made:
        inner.delete()


def diagnose_inner(env, c, want="runc:inner1") -> list[dict]:
    r = lxcfix(env, "diagnose", "--ct", c.name, "--inner", want, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (ct,) = json.loads(r.stdout)["containers"]
    return ct["findings"]


def by_code(findings) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in findings:
        out.setdefault(f["code"], []).append(f)
    return out


def test_the_lxc_layer_denies_and_lxcfix_names_the_lxc_fix(nested, env):
    c, inner = nested(lxc_rule=False, inner_device=True)
    assert harness.open_errno(c, "/dev/net/tun") == "EPERM"
    assert inner.open_errno("/dev/net/tun") == "EPERM"

    found = by_code(diagnose_inner(env, c))
    assert "runc:inner1" in found["LXF224"][0]["message"]
    (deeper,) = found["LXF220"]
    assert deeper["device"] == "/dev/net/tun" and "LXC layer" in deeper["message"]
    assert "c 10:200 rwm" in deeper["fix"] and "LXF200" in deeper["fix"]
    assert "LXF200" in found and "LXF100" in found  # the LXC layer's own findings, with the plan's fix
    assert "LXF221" not in found and "LXF222" not in found


def test_the_inner_container_not_given_the_device_gets_the_inner_fix(nested, env):
    c, inner = nested(lxc_rule=True, inner_device=False)
    assert harness.open_errno(c, "/dev/net/tun") == "ok"
    assert inner.open_errno("/dev/net/tun") == "ENOENT"

    found = by_code(diagnose_inner(env, c))
    (deeper,) = found["LXF221"]
    assert deeper["device"] == "/dev/net/tun" and deeper["applicability"] == "manual"
    assert 'linux.devices: {"path": "/dev/net/tun", "type": "c", "major": 10, "minor": 200' in deeper["fix"]
    assert not {"LXF100", "LXF200", "LXF220", "LXF222"} & set(found)


def test_both_layers_given_the_device_the_inner_open_works(nested, env):
    c, inner = nested(lxc_rule=True, inner_device=True)
    assert inner.open_errno("/dev/net/tun") == "ok"

    found = by_code(diagnose_inner(env, c, "all"))
    assert set(found) == {"LXF224"}, found
    # without --inner: listed, with what to run
    r = lxcfix(env, "diagnose", "--ct", c.name, "--json")
    (ct,) = json.loads(r.stdout)["containers"]
    (listed,) = [f for f in ct["findings"] if f["code"] == "LXF224"]
    assert f"--inner all" in " ".join(listed["evidence"])
    # a name that is not running: one warning, what runs is named
    found = by_code(diagnose_inner(env, c, "nosuch"))
    (missing,) = found["LXF223"]
    assert "runc:inner1" in missing["message"]


def test_the_rootfs_reader_follows_no_symlink_out_of_the_container(container_factory, env):
    """A tenant's absolute symlink is resolved inside the container's root, never on the host:
    config.toml -> /etc/passwd reads the container's two-line passwd (LXF230 quotes its lines)."""
    c = container_factory()
    etc = os.path.join(c.rootfs, "etc", "nvidia-container-runtime")
    os.makedirs(etc)
    os.symlink("/../../../../etc/passwd", os.path.join(etc, "config.toml"))
    os.makedirs(os.path.join(c.rootfs, "etc", "docker"))
    os.symlink("../../../../../../etc/shadow", os.path.join(c.rootfs, "etc", "docker", "daemon.json"))
    r = lxcfix(env, "diagnose", "--ct", c.name, "--json")
    (ct,) = json.loads(r.stdout)["containers"]
    found = by_code(ct["findings"])
    evidence = " ".join(found["LXF230"][0]["evidence"])
    assert "nobody:x:65534" in evidence and "daemon:x:1:1" not in evidence
    assert "LXF233" not in found  # the container has no /etc/shadow: nothing read
