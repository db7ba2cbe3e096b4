#!/usr/bin/env python3
"""A TCP relay that adds a fixed one-way delay in both directions, and traces every chunk.

    python3 bench/_delay_relay.py --one-way-ms 25 --trace FILE \
        --listen NAME,NETNS_FILE,ADDR,PORT,UPSTREAM_PORT [--listen ...]

This kernel has no netem, so a "remote" hypervisor's latency is made here, in user space:
each listener is bound inside a network namespace (NETNS_FILE, e.g. /run/netns/X: the
socket is created there and stays there) and forwards every accepted connection to
127.0.0.1:UPSTREAM_PORT in the namespace this process runs in (the root one, where the
sshd must run because LXC's command socket is network-namespace scoped).

Delay model, one-way delay d (RTT = 2d), as a real link would have it:
  - every chunk read from one side is written to the other side d later, in order;
  - the TCP handshake: the client's connect() returns at once here, but on a real link it
    returns after 2d and the server accepts after 3d. So the upstream connection is opened
    3d after the accept (the server's banner reaches the client at 4d, as it would) and
    nothing the client sent is delivered before then;
  - EOF (shutdown) travels with the same delay.
Bandwidth is unlimited; TCP_NODELAY on every socket (no Nagle delays of ours).

Trace, appended to FILE: {"open": ID, "host": NAME, "t_open": T} when a connection is
accepted, and one line when it ends:
  {"id": ID, "host": NAME, "up_port": the upstream socket's local port (what sshd logs as "port N"),
   "t_open": accept time, "t_up": upstream connected, "t_close": (CLOCK_MONOTONIC seconds,
   comparable with time.monotonic() of any process on this machine),
   "events": [[seconds since t_open, 0 client->server | 1 server->client, bytes], ...],
   "late": [deliveries, sum, max of how many seconds after its due time each chunk was written]}
The events are the times each chunk was READ by the relay, i.e. the time its sender sent it.

Ready: prints "READY" on stdout once every listener is bound. SIGTERM/SIGINT: stops.
Started by bench/fleet_latency.py; stands alone for experiments.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import signal
import socket
import sys
import time

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listener_in(netns_file: str, addr: str, port: int) -> socket.socket:
    """A listening socket created inside the network namespace netns_file."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_file, os.O_RDONLY)
    try:
        setns(target)
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(256)
            s.setblocking(False)
        finally:
            setns(own)
    finally:
        os.close(own)
        os.close(target)
    return s


class Relay:
    def __init__(self, one_way: float, trace_path: str):
        self.d = one_way
        self.trace = open(trace_path, "a", buffering=1)
        self.tasks: set[asyncio.Task] = set()
        self.ids = iter(range(1, 1 << 62))

    def record(self, rec: dict) -> None:
        self.trace.write(json.dumps(rec, separators=(",", ":")) + "\n")

    async def handle(self, name: str, up_port: int, c_reader: asyncio.StreamReader,
                     c_writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        t_open = time.monotonic()
        events: list[list] = []
        cid = next(self.ids)
        self.record({"open": cid, "host": name, "t_open": t_open})
        rec = {"id": cid, "host": name, "up_port": None, "t_open": t_open, "t_up": None, "t_close": None,
               "events": events, "error": None}
        _nodelay(c_writer)
        c2s: asyncio.Queue = asyncio.Queue()
        s2c: asyncio.Queue = asyncio.Queue()
        connected = asyncio.Event()
        up: dict = {}

        async def pump(reader: asyncio.StreamReader, q: asyncio.Queue, direction: int) -> None:
            try:
                while True:
                    data = await reader.read(262144)
                    t = time.monotonic()
                    if not data:
                        q.put_nowait((t + self.d, None))
                        return
                    events.append([round(t - t_open, 6), direction, len(data)])
                    q.put_nowait((t + self.d, data))
            except (ConnectionError, OSError):
                q.put_nowait((time.monotonic() + self.d, None))

        late = [0, 0.0, 0.0]  # deliveries, sum and max of how late each one was written (s)

        async def deliver(q: asyncio.Queue, writer_of) -> None:
            while True:
                due, data = await q.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                # (not counting the wait for the upstream connection: that is the handshake's charge)
                lateness = time.monotonic() - max(due, rec["t_up"] or due)
                late[0] += 1
                late[1] += max(lateness, 0.0)
                late[2] = max(late[2], lateness)
                w = writer_of()
                try:
                    if data is None:
                        if w.can_write_eof():
                            w.write_eof()
                        return
                    w.write(data)
                    await w.drain()
                except (ConnectionError, OSError, RuntimeError):
                    return

        async def upstream() -> None:
            # the handshake a real link charges: the server accepts 3d after the client's SYN
            await asyncio.sleep(3 * self.d)
            r, w = await asyncio.open_connection("127.0.0.1", up_port)
            _nodelay(w)
            up["r"], up["w"] = r, w
            rec["t_up"] = time.monotonic()
            rec["up_port"] = w.get_extra_info("sockname")[1]
            connected.set()

        async def deliver_c2s() -> None:
            await connected.wait()
            await deliver(c2s, lambda: up["w"])

        async def server_side() -> None:
            await connected.wait()
            await pump(up["r"], s2c, 1)

        tasks = [loop.create_task(pump(c_reader, c2s, 0)), loop.create_task(deliver_c2s()),
                 loop.create_task(server_side()), loop.create_task(deliver(s2c, lambda: c_writer))]
        try:
            await upstream()
            await asyncio.gather(*tasks)
        except Exception as e:  # upstream refused, reset...: end this connection, keep serving
            rec["error"] = f"{type(e).__name__}: {e}"
            for t in tasks:
                t.cancel()
        finally:
            for t in tasks:
                t.cancel()
            for w in (c_writer, up.get("w")):
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass
            rec["t_close"] = time.monotonic()
            rec["late"] = [late[0], round(late[1], 6), round(late[2], 6)]
            self.record(rec)


def _nodelay(w: asyncio.StreamWriter) -> None:
    sock = w.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


async def main_async(args) -> None:
    relay = Relay(args.one_way_ms / 1000.0, args.trace)
    servers = []
    loop = asyncio.get_running_loop()
    for spec in args.listen:
        name, netns_file, addr, port, up_port = spec.split(",")
        sock = listener_in(netns_file, addr, int(port))

        def cb(r, w, name=name, up_port=int(up_port)):
            task = loop.create_task(relay.handle(name, up_port, r, w))
            relay.tasks.add(task)
            task.add_done_callback(relay.tasks.discard)

        servers.append(await asyncio.start_server(cb, sock=sock))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    print("READY", flush=True)
    await stop.wait()
    for s in servers:
        s.close()
    for t in list(relay.tasks):  # connections still open: end them, so their traces are written
        t.cancel()
    await asyncio.gather(*relay.tasks, return_exceptions=True)
    relay.trace.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one-way-ms", type=float, required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--listen", action="append", required=True,
                    help="NAME,NETNS_FILE,ADDR,PORT,UPSTREAM_PORT")
    args = ap.parse_args()
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
