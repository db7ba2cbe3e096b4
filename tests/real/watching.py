"""`lxcfix watch` run as a unit runs it, from the real tier: its stdout read line by line
(the journal's lines), real kernel uevents, a forged one from user space."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

from .cli import PAUSING

TUN_UEVENT = "/sys/class/misc/tun/uevent"


class Watch:
    """A running `lxcfix watch ARGS` (or `tests/real/pausing.py STEP FILE watch ARGS`)."""

    def __init__(self, env, *args, pause: tuple[str, str] | None = None, prefix: tuple[str, ...] = ()):
        head = [PAUSING, *pause] if pause else ["-m", "lxcfix"]
        self.proc = subprocess.Popen([*prefix, sys.executable, *head, "watch", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        self._buf = b""

    def _read(self, timeout: float) -> bool:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return False
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:
            return False
        self._buf += data
        *done, self._buf = self._buf.split(b"\n")
        self.lines += [l.decode("utf-8", "replace") for l in done]
        return True

    def wait_for(self, pattern: str, timeout: float = 30, start: int = 0) -> str:
        """The first line (from index `start`) matching `pattern`; AssertionError with the output past timeout."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines[start:]:
                if rx.search(line):
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and not self._read(0)):
                raise AssertionError(f"no line matching {pattern!r} in {timeout} s; output:\n" + "\n".join(self.lines))
            self._read(min(left, 0.5))

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(max(0.0, deadline - time.monotonic()))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.drain(0)
        while self._read(0):
            pass
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def kernel_change(uevent: str = TUN_UEVENT) -> None:
    """Make the kernel send a `change` uevent for a device (works without udev)."""
    with open(uevent, "w") as f:
        f.write("change")


def forged_uevent(payload: bytes) -> None:
    """A uevent sent from user space to the kernel's group: what udev, or any process of the
    host's network namespace with CAP_NET_ADMIN, could send. Its sender is not the kernel."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
    try:
        s.bind((0, 0))
        s.sendto(payload, (0, 1))
    finally:
        s.close()


TUN_CHANGE = (b"change@/devices/virtual/misc/tun\0ACTION=change\0DEVPATH=/devices/virtual/misc/tun\0"
              b"SUBSYSTEM=misc\0MAJOR=10\0MINOR=200\0DEVNAME=net/tun\0SEQNUM=1\0")
