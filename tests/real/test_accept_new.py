"""`--accept-new-host-keys` says what it trusted: a real sshd on 127.0.0.1 plays a hypervisor
never seen before, `lxcfix scan --inventory` (the command line, as an admin runs it) records its
key, and the line on stderr names the host, the key type, the SHA256 fingerprint that
`ssh-keygen -lf` prints for the key the server really has, and the known_hosts file written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .sshd import SSH_KEYGEN, Keys, Sshd, write_known_hosts


@pytest.fixture
def sshd(tmp_path):
    d = Sshd.start(tmp_path / "sshd", Keys.make(tmp_path / "client"))
    try:
        yield d
    finally:
        d.stop()


def test_accept_new_says_which_key_it_recorded_and_where(tmp_path, sshd, env):
    home = tmp_path / "home"
    home.mkdir()
    kh = write_known_hosts(tmp_path / "known_hosts")
    inv = tmp_path / "inventory.yaml"
    inv.write_text("all:\n  hosts:\n    pve1:\n"
                   f"      ansible_host: 127.0.0.1\n      ansible_port: {sshd.port}\n      ansible_user: root\n"
                   f"      ansible_ssh_private_key_file: {sshd.keys.private}\n"
                   "      lxcfix_backend: lxc\n      lxcfix_containers: []\n")
    argv = [sys.executable, "-m", "lxcfix", "scan", "--inventory", str(inv), "--no-probe", "--json",
            "--known-hosts", str(kh), "--ssh-config", "/dev/null"]
    env = dict(env, HOME=str(home))
    env.pop("SSH_AUTH_SOCK", None)

    first = subprocess.run(argv + ["--accept-new-host-keys"], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(first.stdout)["hosts"][0]["error"] is None
    # what ssh-keygen says of the server's own key: "256 SHA256:... comment (ED25519)"
    bits, fp, *_ = subprocess.run([SSH_KEYGEN, "-lf", f"{sshd.host_key}.pub"], capture_output=True, text=True,
                                  check=True).stdout.split()
    key_type = sshd.host_public().split()[0]
    assert fp.startswith("SHA256:") and key_type == "ssh-ed25519"
    assert first.stderr.splitlines() == [
        f"lxcfix: recorded the new host key of pve1 (127.0.0.1:{sshd.port}): {key_type} {fp}, "
        f"as [127.0.0.1]:{sshd.port} in {kh}"]
    assert kh.read_text() == sshd.known_hosts_line() + "\n"

    # known now: nothing new is recorded, nothing said
    again = subprocess.run(argv + ["--accept-new-host-keys"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert kh.read_text() == sshd.known_hosts_line() + "\n"
