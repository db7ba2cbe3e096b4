"""Reading an inventory: a file (bounded, never blocking on a FIFO) or standard input,
its bytes handed to the pure `inventory.load_bytes`. I/O: the CLI's and the fleet's side.

    inv = load_file("inventory/prod.yaml")   # or load_file("-"): standard input
"""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
import time

from .errors import BadInput
from .inventory import MAX_INVENTORY_BYTES, Inventory, _too_big, load_bytes


def load_file(path: str) -> Inventory:
    """Read path ("-": standard input) and load it (inventory.load_bytes: JSON when it starts
    with `{`, else YAML). An unreadable, non-UTF-8 or oversized file is a BadInput too."""
    filename = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INVENTORY_BYTES + 1)
        else:
            data = _read_bounded(path, MAX_INVENTORY_BYTES + 1)
    except (OSError, ValueError, AttributeError) as e:  # ValueError, AttributeError: stdin closed or absent
        raise BadInput(f"{filename}: cannot read inventory: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    return load_bytes(data, filename)


def _read_bounded(path: str, limit: int, wait: float = 60.0) -> bytes:
    """At most `limit` bytes of the file at `path`, opened without blocking: a regular file or a
    character device (/dev/zero reads as "too big"); a pipe or FIFO (`--inventory <(cmd)`) only
    for `wait` seconds, so one nobody writes to ends the read instead of hanging it (no writer
    at all: it is empty). A directory, socket or block device is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        pipe = stat.S_ISFIFO(mode)
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or pipe):
            raise OSError(errno.EINVAL, "not a regular file")
        deadline = time.monotonic() + wait
        chunks, size = [], 0
        while size < limit:
            try:  # a FIFO with no writer reads as its end at once; one with a writer may make us wait
                chunk = os.read(fd, min(1 << 20, limit - size))
            except BlockingIOError:
                if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise OSError(errno.ETIMEDOUT, f"nothing more came within {wait:g}s") from None
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
