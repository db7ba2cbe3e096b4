"""A "hypervisor" for ansible-playbook: this machine, reached over SSH through a
throwaway OpenSSH server on 127.0.0.1:<free port> (root, by key only), so the
collection's modules run as they do on a real host: copied over SSH and run
there with the host's Python (ansible_python_interpreter).

    hv = AnsibleHypervisor.start(tmp_path / "hv", interpreter_env={"PYTHONPATH": REPO, ...})
    hv.inventory_vars()     -> {"ansible_host": "127.0.0.1", "ansible_port": 40123, ...}
    hv.play.run("fix.yml", hv.inventory(), "--check", "--diff", "-e", "fix_ct=200")
    hv.stop()               # the listener and every per-connection process, by PID

Only loopback (ListenAddress 127.0.0.1). Ansible's SSH client is told to check
the host key strictly against this server's key and to keep no master
connection, so no ssh process outlives a play.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from collection_support import REPO, Playbooks

from .sshd import _keygen, descendants, free_port

SSHD = "/usr/sbin/sshd"


class AnsibleHypervisor:
    def __init__(self, directory: Path):
        self.dir = directory
        self.client_key = directory / "client_ed25519"
        self.host_key = directory / "ssh_host_ed25519_key"
        self.known_hosts = directory / "known_hosts"
        self.config = directory / "sshd_config"
        self.log = directory / "sshd.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.play: Playbooks | None = None
        self.python: str = ""

    @classmethod
    def start(cls, directory: Path, interpreter_env: dict[str, str]) -> "AnsibleHypervisor":
        directory.mkdir(parents=True, exist_ok=True)
        hv = cls(directory)
        _keygen(hv.client_key, comment="lxcfix-test-ansible")
        _keygen(hv.host_key, comment="lxcfix-test-ansible-host")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # Debian's sshd refuses to start without it
        last = ""
        for _ in range(5):  # a free port can be taken before sshd binds it: another one
            hv.port = free_port()
            hv._write_config()
            try:
                hv._start()
                break
            except RuntimeError as e:
                last = str(e)
                hv.stop()
        else:
            raise RuntimeError(f"sshd did not start: {last}")
        kind, b64 = Path(str(hv.host_key) + ".pub").read_text().split()[:2]
        hv.known_hosts.write_text(f"[127.0.0.1]:{hv.port} {kind} {b64}\n")
        hv.play = Playbooks(directory / "ansible", ssh_args=" ".join([
            "-F /dev/null", "-o ControlMaster=no", "-o ControlPersist=no", "-o BatchMode=yes",
            "-o StrictHostKeyChecking=yes", f"-o UserKnownHostsFile={hv.known_hosts}",
            "-o GlobalKnownHostsFile=/dev/null", "-o IdentitiesOnly=yes",
        ]))
        hv.python = hv.play.interpreter("python-with-lxcfix", PYTHONPATH=str(REPO), **interpreter_env)
        return hv

    def _write_config(self) -> None:
        authorized = self.dir / "authorized_keys"
        authorized.write_text(Path(str(self.client_key) + ".pub").read_text())
        self.config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}", f"AuthorizedKeysFile {authorized}",
            "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "X11Forwarding no",
            "AllowTcpForwarding no", "PrintMotd no", "PrintLastLog no", "LogLevel INFO",
            "Subsystem sftp internal-sftp", "",
        ]))

    def _start(self) -> None:
        log = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.log_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.settimeout(1.0)
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"sshd not listening on 127.0.0.1:{self.port}: {self.log_text()[-2000:]}")

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def inventory_vars(self, **extra) -> dict:
        return {"ansible_host": "127.0.0.1", "ansible_port": self.port, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.client_key), "ansible_python_interpreter": self.python,
                "lxcfix_python": self.python, **extra}

    def inventory(self, name: str = "hv", **extra) -> Path:
        return self.play.inventory({name: self.inventory_vars(**extra)})

    def stop(self) -> None:
        if self.proc is None:
            return
        victims = descendants(self.proc.pid) if self.proc.poll() is None else []
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None
