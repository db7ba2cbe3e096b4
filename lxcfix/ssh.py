"""The SSH transport: one connection per host, commands multiplexed over its channels.

    t = Ssh("pve1", hostname="10.0.0.11", user="root", key_files=["~/.ssh/id_ed25519"])
    t.connect()                        # raises an SshError subclass with a one-line reason
    t.run(["cat", "/proc/devices"])    -> Result(0, "Character devices:\\n...", "")
    t.read("/etc/pve/lxc/200.conf")    -> b"arch: amd64\\n..."   (SFTP; `cat --` when there is none)
    t.listdir("/etc/pve/lxc")          -> ["200.conf", "201.conf"]
    t.close()

argv is joined with shlex.join here and nowhere else. One paramiko Transport
per host; each run() opens a session channel on it, so threads may share one
Ssh (at most `max_sessions` channels at once, under sshd's MaxSessions of 10).
A failed command is a Result; a connection that cannot be made or is lost is
an SshError (an lxcfix.errors.Unreachable), never an OSError, so callers that
treat OSError as "file missing" cannot mistake a dead host for an empty one.

Host keys are checked strictly against known_hosts (system + user files, or
one explicit file): an unknown key raises HostKeyUnknown, a changed one
HostKeyChanged. accept_new=True is OpenSSH's StrictHostKeyChecking=accept-new:
an unknown key is appended to the (user or explicit) known_hosts file and
trusted; a changed key is still refused. ~/.ssh/config (or an explicit file)
supplies HostName, Port, User, IdentityFile, IdentitiesOnly, ProxyCommand,
ProxyJump, HostKeyAlias, UserKnownHostsFile, GlobalKnownHostsFile,
StrictHostKeyChecking (accept-new and no both mean accept-new here),
ConnectTimeout and ServerAliveInterval. The SSH agent is used when
SSH_AUTH_SOCK is set. Transient connect errors (refused, timed out, reset,
no banner) are retried with backoff, `tries` times in all; authentication and
host-key failures never are.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import select
import shlex
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import fabric
import paramiko
import tenacity

from .errors import BadInput, Unreachable
from .model import Result

DEFAULT_SSH_CONFIG = "~/.ssh/config"
SYSTEM_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")


# ----------------------------------------------------------------- errors


class SshError(Unreachable):
    """The host cannot be reached over SSH; `reason` is one line for a report."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class HostKeyUnknown(SshError):
    pass


class HostKeyChanged(SshError):
    pass


class AuthFailed(SshError):
    pass


class ConnectFailed(SshError):
    pass


class ConnectionLost(SshError):
    pass


class _Transient(Exception):
    """A connect error worth another try (refused, timeout, reset, no banner)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ----------------------------------------------------------------- connection counting

_COUNT_LOCK = threading.Lock()
CONNECTIONS: Counter = Counter()  # Ssh name -> SSH connections made (authenticated) in this process


def connection_counts() -> dict[str, int]:
    with _COUNT_LOCK:
        return dict(CONNECTIONS)


def reset_connection_counts() -> None:
    with _COUNT_LOCK:
        CONNECTIONS.clear()


# ----------------------------------------------------------------- endpoint resolution


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, after ~/.ssh/config and the explicit options are merged."""

    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    identities_only: bool
    proxy_argv: tuple[str, ...] | None
    proxy_jump: str | None
    host_key_name: str  # HostKeyAlias or hostname: what known_hosts is searched for
    known_hosts: tuple[str, ...]  # files read
    known_hosts_write: str | None  # where accept-new appends
    accept_new: bool
    connect_timeout: float
    keepalive: int


def _config(path: str | None) -> paramiko.SSHConfig | None:
    if path is None:
        return None
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        if path == DEFAULT_SSH_CONFIG:
            return None
        raise BadInput(f"ssh config {path}: no such file")
    try:
        return paramiko.SSHConfig.from_path(full)
    except (OSError, paramiko.SSHException, ValueError) as e:
        raise BadInput(f"ssh config {path}: {e}") from None


def resolve(dest: str, *, port: int | None = None, user: str | None = None,
            key_files: Sequence[str] = (), proxy_argv: Sequence[str] | None = None,
            known_hosts: str | None = None, accept_new: bool = False,
            config: paramiko.SSHConfig | None = None, connect_timeout: float = 10.0) -> Endpoint:
    """Explicit options (the inventory's) win over ssh_config, as they do for `ssh -p -l -i`."""
    c = config.lookup(dest) if config is not None else {"hostname": dest}
    hostname = c.get("hostname", dest)
    try:
        port = port or int(c.get("port", 22))
    except ValueError:
        raise BadInput(f"ssh config: Port {c.get('port')!r} for {dest} is not a number") from None
    user = user or c.get("user") or getpass.getuser()
    keys = [os.path.expanduser(k) for k in key_files]
    keys += [os.path.expanduser(k) for k in c.get("identityfile", []) if os.path.expanduser(k) not in keys]
    identities_only = str(c.get("identitiesonly", "no")).lower() == "yes"
    if proxy_argv is None:
        pc = c.get("proxycommand")
        if pc and pc.lower() != "none":
            proxy_argv = shlex.split(pc)  # as paramiko does: split, not run through a shell
    jump = c.get("proxyjump")
    jump = None if proxy_argv or not jump or jump.lower() == "none" else jump
    alias = c.get("hostkeyalias") or hostname
    strict = str(c.get("stricthostkeychecking", "yes")).lower()
    if known_hosts:
        read = (known_hosts,)
        write = known_hosts
    else:
        users = c.get("userknownhostsfile", " ".join(USER_KNOWN_HOSTS)).split()
        system = c.get("globalknownhostsfile", " ".join(SYSTEM_KNOWN_HOSTS)).split()
        read = tuple(system + users)
        write = users[0] if users else None
    try:
        timeout = float(c.get("connecttimeout", connect_timeout))
        keepalive = int(c.get("serveraliveinterval", 15))
    except ValueError:
        raise BadInput(f"ssh config: ConnectTimeout/ServerAliveInterval for {dest} is not a number") from None
    return Endpoint(
        hostname=hostname, port=port, user=user, key_files=tuple(keys), identities_only=identities_only,
        proxy_argv=tuple(proxy_argv) if proxy_argv else None, proxy_jump=jump, host_key_name=alias,
        known_hosts=tuple(os.path.expanduser(p) for p in read),
        known_hosts_write=os.path.expanduser(write) if write and write != "/dev/null" else None,
        accept_new=accept_new or strict in ("accept-new", "no", "off"),
        connect_timeout=timeout, keepalive=keepalive,
    )


# ----------------------------------------------------------------- host keys

_KNOWN_HOSTS_LOCK = threading.Lock()


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called only for a key known_hosts has no entry for (paramiko raises BadHostKeyException
    itself for a changed one). Strict: refuse. accept-new: append to known_hosts, trust."""

    def __init__(self, label: str, ep: Endpoint):
        self.label = label
        self.ep = ep

    def missing_host_key(self, client, hostname, key):
        if not self.ep.accept_new:
            raise HostKeyUnknown(
                f"host key for {self.label} is unknown (not in known_hosts); "
                f"re-run with --accept-new-host-keys to trust it ({key.get_name()} {fingerprint(key)})")
        path = self.ep.known_hosts_write
        if path is None:
            raise HostKeyUnknown(f"host key for {self.label} is unknown and there is no known_hosts file "
                                 "to add it to (UserKnownHostsFile /dev/null)")
        with _KNOWN_HOSTS_LOCK:
            current = paramiko.HostKeys()
            if os.path.exists(path):
                try:
                    current.load(path)
                except OSError as e:
                    raise HostKeyUnknown(f"host key for {self.label} is unknown and {path} cannot be read: "
                                         f"{e.strerror or e}") from None
            entry = current.lookup(hostname)
            if entry is not None and key.get_name() in entry:
                if entry[key.get_name()] != key:  # another thread's view differs: a changed key
                    raise HostKeyChanged(_changed(self.label, hostname, key, path))
            else:
                _append_known_host(path, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)


def _append_known_host(path: str, hostname: str, key: paramiko.PKey) -> None:
    d = os.path.dirname(path)
    if d and not os.path.isdir(d):
        os.makedirs(d, mode=0o700, exist_ok=True)
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _changed(label: str, hostname: str, key: paramiko.PKey, where: str) -> str:
    return (f"host key for {label} CHANGED: it now offers {key.get_name()} {fingerprint(key)}, "
            f"which does not match {where}; refusing to connect (possible man-in-the-middle; "
            f"if the host was reinstalled: ssh-keygen -R '{hostname}')")


# ----------------------------------------------------------------- proxy command


class _ProxyProcess:
    """A ProxyCommand as a socket (argv, no shell). Unlike paramiko.ProxyCommand it reports
    the end of the proxy's output as EOF instead of spinning, and keeps its stderr for the error."""

    def __init__(self, argv: Sequence[str]):
        self.argv = list(argv)
        self.stderr = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.stderr, bufsize=0, start_new_session=True)
        except OSError as e:
            self.stderr.close()
            raise ConnectFailed(f"proxy command {self.argv[0]} cannot start: {e.strerror or e}") from None
        self.timeout: float | None = None
        self._closed = False

    def send(self, data: bytes) -> int:
        try:
            self.process.stdin.write(data)
        except (OSError, ValueError):
            raise EOFError("proxy command closed its input") from None
        return len(data)

    def recv(self, size: int) -> bytes:
        fd = self.process.stdout.fileno()
        r, _, _ = select.select([fd], [], [], self.timeout)
        if not r:
            raise TimeoutError()
        return os.read(fd, size)  # b"" at EOF: paramiko's packetizer raises EOFError

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def error_text(self) -> str:
        try:
            self.stderr.seek(0)
            text = self.stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text.splitlines()[-1] if text else ""

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for f in (self.process.stdin, self.process.stdout):
            try:
                f.close()
            except OSError:
                pass
        if self.process.poll() is None:
            try:
                self.process.terminate()
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            except OSError:
                pass
        self.stderr.close()


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    """"user@host:port" (one hop of ProxyJump) -> (user, host, port)."""
    spec = spec.strip()
    spec = spec.removeprefix("ssh://")
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else None
    elif hostport.count(":") == 1:
        host, p = hostport.split(":")
        port = int(p)
    return user or None, host, port


# ----------------------------------------------------------------- the transport


class Ssh:
    """A host over SSH. Thread-safe; connects on first use (or connect()); close() when done."""

    def __init__(self, name: str, *, hostname: str | None = None, port: int | None = None,
                 user: str | None = None, key_files: Sequence[str] = (), known_hosts: str | None = None,
                 accept_new: bool = False, ssh_config: str | None = DEFAULT_SSH_CONFIG,
                 proxy_argv: Sequence[str] | None = None, jump: Ssh | None = None,
                 connect_timeout: float = 10.0, tries: int = 3, max_sessions: int = 8,
                 allow_agent: bool = True, look_for_keys: bool = True, use_sftp: bool = True,
                 _depth: int = 0):
        self.name = name
        self.dest = hostname or name
        self._opts = dict(port=port, user=user, key_files=tuple(key_files), known_hosts=known_hosts,
                          accept_new=accept_new, proxy_argv=proxy_argv, connect_timeout=connect_timeout)
        self.ssh_config = ssh_config
        self.jump = jump
        self.tries = max(1, tries)
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        self.use_sftp = use_sftp
        self._depth = _depth
        # sshd's MaxSessions (default 10) counts the SFTP channel too: at most 9 commands at once
        self._sessions = threading.BoundedSemaphore(max(1, min(max_sessions, 9)))
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_failed = False
        self._proxy: _ProxyProcess | None = None
        self._own_jumps: list[Ssh] = []
        self.endpoint: Endpoint | None = None
        self.connections = 0  # successful connections (a scan asserts 1)
        self.attempts = 0  # TCP/proxy attempts, retries included
        self.closed = False

    def __repr__(self) -> str:
        return f"<Ssh {self.name} -> {self.dest}>"

    def __enter__(self) -> Ssh:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def label(self) -> str:
        ep = self.endpoint
        if ep is None:
            return self.name
        where = f"{ep.hostname}:{ep.port}" if not ep.proxy_argv else f"proxy {ep.proxy_argv[0]}"
        return self.name if where.startswith(self.name + ":") else f"{self.name} ({where})"

    # connecting

    def connect(self) -> Ssh:
        with self._lock:
            if self.closed:
                raise ConnectionLost(f"connection to {self.name} was closed")
            if self._client is not None:
                return self
            if self.endpoint is None:
                self.endpoint = resolve(self.dest, config=_config(self.ssh_config), **self._opts)
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(_Transient),
                stop=tenacity.stop_after_attempt(self.tries),
                wait=tenacity.wait_exponential(multiplier=0.25, max=2.0),
                reraise=True,
            )
            try:
                self._client = retrying(self._connect_once)
            except _Transient as e:
                raise ConnectFailed(f"{e.reason} ({self.label}; {self.tries} tries)") from None
            self.connections += 1
            with _COUNT_LOCK:
                CONNECTIONS[self.name] += 1
            return self

    def _sock(self, ep: Endpoint):
        if ep.proxy_argv:
            self._proxy = _ProxyProcess(ep.proxy_argv)
            return self._proxy
        if self.jump is None and ep.proxy_jump:
            if self._depth >= 8:
                raise ConnectFailed(f"ProxyJump for {self.name} nests more than 8 hops")
            hops = [h for h in ep.proxy_jump.split(",") if h.strip()]
            via = None
            for hop in hops:
                user, host, port = _parse_jump(hop)
                via = Ssh(host, port=port, user=user, known_hosts=self._opts["known_hosts"],
                          accept_new=self._opts["accept_new"], ssh_config=self.ssh_config, jump=via,
                          connect_timeout=ep.connect_timeout, tries=self.tries,
                          allow_agent=self.allow_agent, look_for_keys=self.look_for_keys,
                          use_sftp=False, _depth=self._depth + 1)
                self._own_jumps.append(via)
            self.jump = via
        if self.jump is not None:
            t = self.jump.connect()._client.get_transport()
            try:
                return t.open_channel("direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0),
                                      timeout=ep.connect_timeout)
            except paramiko.ChannelException as e:
                raise ConnectFailed(f"jump host {self.jump.name} cannot reach {ep.hostname}:{ep.port}: "
                                    f"{e.text}") from None
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ConnectFailed(f"jump host {self.jump.name} failed: {e}") from None
        try:
            sock = socket.create_connection((ep.hostname, ep.port), timeout=ep.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small request/reply packets
            return sock
        except socket.gaierror as e:
            raise ConnectFailed(f"cannot resolve {ep.hostname}: {e.strerror}") from None
        except ConnectionRefusedError:
            raise _Transient(f"connection refused by {ep.hostname}:{ep.port}") from None
        except TimeoutError:
            raise _Transient(f"connection to {ep.hostname}:{ep.port} timed out after {ep.connect_timeout:g}s") from None
        except ConnectionResetError:
            raise _Transient(f"connection reset by {ep.hostname}:{ep.port}") from None
        except OSError as e:
            raise _Transient(f"cannot connect to {ep.hostname}:{ep.port}: {e.strerror or e}") from None

    def _connect_once(self) -> paramiko.SSHClient:
        ep = self.endpoint
        self.attempts += 1
        # fabric manages the client; its default missing-key policy adds unknown keys,
        # so ours (strict, or accept-new when asked) replaces it before connecting.
        conn = fabric.Connection(
            ep.host_key_name, user=ep.user, port=ep.port, connect_timeout=ep.connect_timeout,
            config=fabric.Config(overrides={"load_ssh_configs": False}),
        )
        client = conn.client
        for path in ep.known_hosts:
            if os.path.isfile(path):
                try:
                    if path == ep.known_hosts_write:
                        client.load_host_keys(path)
                    else:
                        client.load_system_host_keys(path)
                except (OSError, paramiko.SSHException) as e:
                    raise ConnectFailed(f"known_hosts {path} cannot be read: {e}") from None
        client.set_missing_host_key_policy(_Policy(self.label, ep))
        sock = None
        try:
            sock = self._sock(ep)
            conn.connect_kwargs.update(
                key_filename=list(ep.key_files) or None,
                allow_agent=self.allow_agent and not ep.identities_only,
                look_for_keys=self.look_for_keys and not ep.identities_only,
                sock=sock, banner_timeout=ep.connect_timeout,
                auth_timeout=ep.connect_timeout, channel_timeout=ep.connect_timeout,
            )
            conn.open()
        except SshError:
            self._drop(client, sock)
            raise
        except _Transient:
            self._drop(client, sock)
            raise
        except paramiko.BadHostKeyException as e:
            self._drop(client, sock)
            raise HostKeyChanged(_changed(self.label, known_hosts_name(ep.host_key_name, ep.port), e.key,
                                          "known_hosts")) from None
        except paramiko.AuthenticationException as e:
            self._drop(client, sock)
            raise AuthFailed(f"authentication failed for {ep.user}@{self.label}"
                             + (f": {e}" if str(e) and "Authentication failed" not in str(e) else "")) from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            proxy_err = self._proxy.error_text() if self._proxy is not None else ""
            self._drop(client, sock)
            text = str(e) or type(e).__name__
            if "No authentication methods available" in text or "no acceptable" in text.lower():
                raise AuthFailed(f"authentication failed for {ep.user}@{self.label}: no usable key "
                                 "(give ansible_ssh_private_key_file or load the agent)") from None
            if proxy_err or ep.proxy_argv:
                raise ConnectFailed(f"proxy command for {self.name} failed"
                                    + (f": {proxy_err}" if proxy_err else f": {text}")) from None
            if isinstance(e, (socket.timeout, TimeoutError)) or "timeout" in text.lower():
                raise _Transient(f"SSH handshake with {ep.hostname}:{ep.port} timed out") from None
            if isinstance(e, (EOFError, ConnectionResetError, BrokenPipeError)) or "banner" in text.lower() \
                    or "reset" in text.lower():
                raise _Transient(f"connection closed by {ep.hostname}:{ep.port} during the SSH handshake") from None
            raise ConnectFailed(f"SSH to {self.label} failed: {text}") from None
        t = client.get_transport()
        if ep.keepalive:
            t.set_keepalive(ep.keepalive)
        return client

    def _drop(self, client: paramiko.SSHClient, sock) -> None:
        try:
            client.close()
        except Exception:
            pass
        if sock is not None:
            try:
                sock.close()
            except Exception:
                pass
        self._proxy = None

    def _transport(self) -> paramiko.Transport:
        self.connect()
        t = self._client.get_transport() if self._client is not None else None
        if t is None or not t.is_active():
            raise ConnectionLost(f"connection to {self.name} lost")
        return t

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:
                    pass
                self._sftp = None
            if self._client is not None:
                try:
                    self._client.close()
                except Exception:
                    pass
                self._client = None
            if self._proxy is not None:
                self._proxy.close()
                self._proxy = None
            for j in reversed(self._own_jumps):
                j.close()

    # commands

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60) -> Result:
        argv = list(argv)
        if not argv:
            raise ValueError("empty argv")
        command = shlex.join(argv)
        t = self._transport()
        with self._sessions:
            try:
                chan = t.open_session(timeout=self.endpoint.connect_timeout)
            except paramiko.ChannelException as e:
                return Result(255, "", f"{argv[0]}: {self.name} refused a new session: {e.text}")
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ConnectionLost(f"connection to {self.name} lost: {e or type(e).__name__}") from None
            try:
                return self._exec(chan, t, argv, command, input, timeout)
            finally:
                chan.close()

    def _exec(self, chan: paramiko.Channel, t, argv, command: str, input: str | None, timeout) -> Result:
        try:
            chan.exec_command(command)
            if input is None:
                chan.shutdown_write()
            else:  # fed from a thread: a command may write more than a window before it reads it all
                data = input.encode("utf-8", "surrogateescape")

                def feed():
                    try:
                        chan.sendall(data)
                        chan.shutdown_write()
                    except (paramiko.SSHException, EOFError, OSError):
                        pass  # the channel closed: the reader sees it

                threading.Thread(target=feed, name=f"lxcfix-ssh-input-{self.name}", daemon=True).start()
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectionLost(f"connection to {self.name} lost while starting {argv[0]}: "
                                 f"{e or type(e).__name__}") from None
        out, err = bytearray(), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if chan.recv_ready():
                out += chan.recv(65536)
                continue
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                continue
            if chan.exit_status_ready():
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                break
            wait = 1.0
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return Result(124, _text(out), _text(err) + f"{argv[0]}: timed out after {timeout}s")
                wait = min(wait, 1.0)
            if chan.eof_received:
                chan.status_event.wait(wait)  # output closed, process still running
            else:
                select.select([chan], [], [], wait)
        rc = chan.recv_exit_status()
        if rc == -1:
            if not t.is_active():
                raise ConnectionLost(f"connection to {self.name} lost while running {argv[0]}")
            rc = 255  # killed by a signal: sshd sends exit-signal, not exit-status
            sig = getattr(chan, "exit_signal", None)
            err += f"{argv[0]}: terminated{' by ' + sig if sig else ''}".encode()
        return Result(rc, _text(out), _text(err))

    # files

    def _sftp_client(self) -> paramiko.SFTPClient | None:
        if not self.use_sftp or self._sftp_failed:
            return None
        if self._sftp is None:
            t = self._transport()
            try:
                self._sftp = paramiko.SFTPClient.from_transport(t)
            except (paramiko.SSHException, EOFError, OSError):
                if not t.is_active():
                    raise ConnectionLost(f"connection to {self.name} lost") from None
                self._sftp_failed = True  # no sftp subsystem: fall back to commands
                return None
        return self._sftp

    def _sftp_do(self, fn):
        """(True, value) from an SFTP call, or (False, None) when there is no SFTP."""
        with self._sftp_lock:
            sftp = self._sftp_client()
            if sftp is None:
                return False, None
            try:
                return True, fn(sftp)
            except OSError as e:
                if e.errno is not None:
                    raise  # FileNotFoundError, PermissionError, ...: the file's answer
                self._lost_or(e)
                raise
            except (paramiko.SSHException, EOFError) as e:
                self._lost_or(e)
                raise OSError(str(e)) from None

    def _lost_or(self, e: BaseException) -> None:
        t = self._client.get_transport() if self._client is not None else None
        if t is None or not t.is_active():
            raise ConnectionLost(f"connection to {self.name} lost: {e or type(e).__name__}") from None

    def read(self, path: str) -> bytes:
        def get(sftp):
            with sftp.open(path, "rb") as f:
                return f.read()

        ok, data = self._sftp_do(get)
        if ok:
            return data
        r = self.run(["cat", "--", path])
        if not r.ok:
            raise _os_error(r, path)
        return r.stdout.encode("utf-8", "surrogateescape")

    def listdir(self, path: str) -> list[str]:
        ok, names = self._sftp_do(lambda sftp: sftp.listdir(path))
        if ok:
            return sorted(names)
        r = self.run(["ls", "-1A", "--", path])
        if not r.ok:
            raise _os_error(r, path)
        return sorted(n for n in r.stdout.split("\n") if n)

    def isdir(self, path: str) -> bool:
        def check(sftp):
            try:
                return stat.S_ISDIR(sftp.stat(path).st_mode)
            except FileNotFoundError:
                return False

        ok, value = self._sftp_do(check)
        if ok:
            return value
        return self.run(["test", "-d", path]).ok

    # what a test or a bench asks

    def open_tunnel(self, host: str, port: int) -> paramiko.Channel:
        return self._transport().open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0))


def _text(b: bytes | bytearray) -> str:
    return bytes(b).decode("utf-8", "surrogateescape")


def _os_error(r: Result, path: str) -> OSError:
    import errno as E

    msg = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
    low = msg[0].lower()
    for needle, code in (("no such file", E.ENOENT), ("permission denied", E.EACCES),
                         ("is a directory", E.EISDIR), ("not a directory", E.ENOTDIR)):
        if needle in low:
            return OSError(code, msg[0], path)
    return OSError(E.EIO, msg[0] or f"exit {r.rc}", path)


__all__ = [
    "AuthFailed",
    "ConnectFailed",
    "ConnectionLost",
    "Endpoint",
    "HostKeyChanged",
    "HostKeyUnknown",
    "Ssh",
    "SshError",
    "connection_counts",
    "fingerprint",
    "known_hosts_name",
    "reset_connection_counts",
    "resolve"
]
