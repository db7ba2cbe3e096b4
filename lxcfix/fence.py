"""Reading what a tenant controls, in a child that is killed at its deadline. Pure: the text of
the code that does it (run by observe.read_rootfs on this machine, by the sweep or
`python3 -c rootfs_command()` on a remote host), stdlib only, Python 3.5+.

A tenant decides what lies under its container's root: a FUSE file system whose daemon never
answers makes any process that opens a file there wait in the kernel until it is killed
(SIGKILL; nothing else ends the wait). So the reading never happens in lxcfix's own process:

    in_child(fn, args, timeout, cap) -> ("ok" | "timeout" | "large" | "failed", bytes written)

forks a child (its own process group, nothing of the parent's left open in it but its pipe),
which runs fn(*args, out) and writes its answer with out(bytes); the parent reads it as it
comes, kills the group at the deadline and never waits to reap a child the kernel may hold (a
daemon thread does). The rootfs reader runs that way one path at a time, each path's JSON
line sent as soon as it is read, so what was read before a hang is known, and so is the path:

    fenced("/proc/4242/root", 262144, ["/etc/group", ...], ["/usr/bin/dockerd", ...], {}, 30.0)
        -> (0, '{"path": "/etc/group", "status": "ok", "b64": "..."}\\n...', "")
        -> (124, <the lines read before>, "not checked: reading /proc/4242/root/etc/nvidia-container-runtime/config.toml timed out after 30 s")
"""

from __future__ import annotations

from . import memo

# Runs in the process that reads (lxcfix here, the sweep or the reader command there).
CHILD_LIB = r'''
import gc, json, os, select, signal, threading, time

def _reap_later(pid):
    """Reaped now if it is gone, else by a daemon thread: a child stuck in the kernel is never waited for here."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
    except OSError:
        return
    def wait():
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
    t = threading.Thread(target=wait, name="lxcfix-reap")
    t.daemon = True
    t.start()

def _only_fd(keep):
    """In the child: close every fd but `keep` (a child the kernel holds keeps nothing of the parent open)."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        fds = range(256)
    for fd in fds:
        if fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass

def _kill(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass

def _exited(pid, within):
    """Its wait status once it has exited, within `within` seconds (a pidfd where there is one), else None."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    deadline, nap = time.monotonic() + within, 0.0002
    try:
        while True:
            try:
                done, code = os.waitpid(pid, os.WNOHANG)
            except OSError:
                return 0
            if done:
                return code
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if fd is not None:
                p = select.poll()
                p.register(fd, select.POLLIN)
                p.poll(int(left * 1000) + 1)
            else:
                time.sleep(min(nap, left))
                nap = min(nap * 2, 0.01)
    finally:
        if fd is not None:
            os.close(fd)

def in_child(fn, args, timeout, cap):
    """fn(*args, out) in a forked child killed (SIGKILL, its process group) at `timeout` seconds or past
    `cap` bytes: (status, what it wrote with out()) -- "ok", "timeout", "large" or "failed" (it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            gc.disable()  # no finalizer of the parent's objects closes an fd number the reader reuses
            os.setpgid(0, 0)
            _only_fd(w)
            def out(data):
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
            fn(*(tuple(args) + (out,)))
        except BaseException:
            code = 70
        os._exit(code)
    os.close(w)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    data, status = bytearray(), None
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(r, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            if not poller.poll(max(1, int(left * 1000) + 1) if left < 3600 else 3600000):
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
            if len(data) > cap:
                del data[cap:]
                status = "large"
                break
    finally:
        os.close(r)
    if status is None:  # its end of the pipe closed: it is exiting; a moment to reap it, no more
        code = _exited(pid, 2.0)
        if code is not None:
            return ("ok" if code == 0 else "failed"), bytes(data)
        status = "failed"
    _kill(pid)
    _reap_later(pid)
    return status, bytes(data)
'''

# The rootfs reader (rootfs.READER's report(), bound by rootfs_command()) run path by path in a child.
ROOTFS_MAIN = r'''
def _each_path(root, cap, files, exists, caps, out):
    for path in files:
        lines = report(root, cap, [path], [], caps)
        out(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        if any(line.startswith('{"root"') for line in lines):
            return
    for path in exists:
        out(("\n".join(report(root, cap, [], [path], caps)) + "\n").encode("utf-8", "surrogateescape"))

def _answered(text):
    got = set()
    for line in text.split("\n"):
        try:
            doc = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("path"), str):
            got.add(doc["path"])
    return got

def fenced(root, cap, files, exists, caps, timeout):
    """(rc, stdout, stderr) of the reader run in a child killed at `timeout` s: rc 0 and its lines;
    124 and the lines read before, the path it hung on named; 125 past its output cap; 1 it failed."""
    files, exists, caps = list(files), list(exists), caps or {}
    cap_out = 2 * (cap * len(files) + sum(caps.values())) + 512 * (len(files) + len(exists)) + 65536
    status, data = in_child(_each_path, (root, cap, files, exists, caps), timeout, cap_out)
    text = data.decode("utf-8", "surrogateescape")
    if status == "ok":
        return 0, text, ""
    if status == "timeout":
        got = _answered(text)
        left = [p for p in files + exists if p not in got]
        where = root.rstrip("/") + left[0] if left else root
        return 124, text, "not checked: reading %s timed out after %g s" % (where, timeout)
    if status == "large":
        return 125, text, "the reader's output exceeded %d bytes" % cap_out
    return 1, text, "the reader failed in its child process"

if __name__ == "__main__":
    import sys
    n = int(sys.argv[4])
    rc, text, err = fenced(sys.argv[2], int(sys.argv[3]), sys.argv[5:5 + n], sys.argv[5 + n:], {}, float(sys.argv[1]))
    sys.stdout.write(text)
    sys.stderr.write(err + ("\n" if err else ""))
    sys.stdout.flush()
    sys.exit(rc)
'''


@memo.once()
def rootfs_command() -> str:
    """The rootfs reader as one program: READER's functions bound under their own name (its own
    __main__ does not run), CHILD_LIB, ROOTFS_MAIN. As a command (observe.reader_argv):
    `PYTHON -c TEXT TIMEOUT ROOT CAP N FILES... EXISTS...`; exec'd, its `fenced` is what the
    sweep and observe.read_rootfs call."""
    from .rootfs import READER

    return ("_NS = {'__name__': 'lxcfix_rootfs_reader'}\n"
            f"exec(compile({READER!r}, '<lxcfix rootfs reader>', 'exec'), _NS)\n"
            "report = _NS['report']\n" + CHILD_LIB + ROOTFS_MAIN)
