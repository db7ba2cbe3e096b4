"""Reading an inventory: a file (bounded, never blocking on a FIFO) or standard input,
its bytes handed to the pure `inventory.load_bytes`. I/O: the CLI's and the fleet's side.

    inv = load_file("inventory/prod.yaml")   # or load_file("-"): standard input
    inv = load_file("inventory/hosts")       # INI: through `ansible-inventory -i FILE --list --export`
                                             # when it is on PATH, else inventory.load_ini

An INI file is read the way Ansible itself reads it where Ansible is installed: its own
ini plugin (and any group_vars/ and host_vars/ beside the file), by a bounded
`ansible-inventory` (argv, no shell, a deadline, its output capped), whose JSON then goes
through inventory.load_json like any other. Standard input, a pipe, and a host without
ansible-inventory get lxcfix's own INI reader.
"""

from __future__ import annotations

import errno
import os
import posixpath
import select
import shlex
import shutil
import stat
import sys
import time

from .errors import BadInput
from .inventory import MAX_INVENTORY_BYTES, Inventory, _too_big, decode, load_ini, load_bytes, load_json, text_format
from .transport import run_bounded

ANSIBLE_INVENTORY_TIMEOUT = 60.0
# only the ini plugin, and a file it cannot parse is an error (not a warning and an empty inventory)
ANSIBLE_INVENTORY_ENV = {"ANSIBLE_INVENTORY_ENABLED": "ini", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
                         "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_DEPRECATION_WARNINGS": "False"}


def load_file(path: str) -> Inventory:
    """Read path ("-": standard input) and load it (inventory.load_bytes: JSON when it starts
    with `{`, else YAML). An unreadable, non-UTF-8 or oversized file is a BadInput too."""
    filename = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data, regular = sys.stdin.buffer.read(MAX_INVENTORY_BYTES + 1), False
        else:
            data, regular = _read_bounded(path, MAX_INVENTORY_BYTES + 1)
    except (OSError, ValueError, AttributeError) as e:  # ValueError, AttributeError: stdin closed or absent
        raise BadInput(f"{filename}: cannot read inventory: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    if regular:
        text = decode(data, filename)
        tool = shutil.which("ansible-inventory")
        if tool is not None and text_format(text, filename) == "ini":
            return load_ini_with(tool, path, text)
    return load_bytes(data, filename)


def load_ini_with(tool: str, path: str, text: str) -> Inventory:
    """The INI file at path, as `ansible-inventory` (the program at `tool`) lists it; text: the
    file as read, for lxcfix's own reader to name the line of what Ansible could not parse."""
    argv = [tool, "-i", path, "--list", "--export"]
    r = run_bounded(argv, timeout=ANSIBLE_INVENTORY_TIMEOUT, limit=MAX_INVENTORY_BYTES,
                    env={**os.environ, **ANSIBLE_INVENTORY_ENV})
    if r.truncated:
        raise _too_big(f"{path} (as {shlex.join(argv)} lists it)")
    if r.rc == 124:
        raise BadInput(f"{path}: ansible-inventory did not list it within {ANSIBLE_INVENTORY_TIMEOUT:g}s")
    if r.rc != 0:
        load_ini(text, path)  # where lxcfix's reader finds the error too, its line says where
        raise BadInput(f"{path}: ansible-inventory cannot read it: {_ansible_error(r.stderr, r.rc)}")
    try:
        return load_json(r.stdout, path, posixpath.dirname(path))
    except BadInput:
        load_ini(text, path)  # a bad value: the line it is on, where lxcfix's reader finds it
        raise


def _ansible_error(stderr: str, rc: int) -> str:
    """The reason in what ansible-inventory printed: its ini plugin's failure, else its first error."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip()]
    for prefix in ("[WARNING]: Failed to parse inventory with 'ini' plugin: ", "[ERROR]: "):
        for line in lines:
            if line.startswith(prefix):
                reason = line[len(prefix):].removeprefix("Failed to parse inventory: ")
                return reason[:300]
    return (lines[-1][:300] if lines else f"exit status {rc}")


def _read_bounded(path: str, limit: int, wait: float = 60.0) -> tuple[bytes, bool]:
    """(At most `limit` bytes of the file at `path`, whether it is a regular file), opened without
    blocking: a regular file or a
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
        return b"".join(chunks), stat.S_ISREG(mode)
    finally:
        os.close(fd)
