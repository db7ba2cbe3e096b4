"""The SSH transport: one connection per host, commands multiplexed over its channels.

    opts = SshOptions(known_hosts="/root/.ssh/lxcfix_known_hosts", accept_new=False).check()
    t = Ssh("pve1", hostname="10.0.0.11", user="root", key_files=["~/.ssh/id_ed25519"], options=opts)
    t.connect()                        # raises an SshError subclass with a one-line reason
    t.run(["cat", "/proc/devices"])    -> Result(0, "Character devices:\\n...", "")
    t.run(["yes"])                     -> Result(125, "y\\ny\\n..." (1 MiB),
                                             "yes: output exceeded 1048576 bytes on stdout; stopped")
    t.read("/etc/pve/lxc/200.conf")    -> b"arch: amd64\\n..."   (SFTP; `head -c` when there is none)
    t.read("/run/a-fifo")              -> OSError(EINVAL, "not a regular file")
    t.listdir("/etc/pve/lxc")          -> ["200.conf", "201.conf"]
    t.close()

SshOptions is the per-run policy (the command line's flags), one frozen value shared by every
Ssh of a run; what differs per host (address, port, user, key, an inventory's extra
known_hosts file) are Ssh's own arguments. SshOptions.check() raises BadInput for input
that cannot work (a missing or unparsable --ssh-config, a known_hosts that is a directory,
a zero timeout) before any host is contacted.

argv is joined with shlex.join here and nowhere else (its stdin is /dev/null
there unless input= is given). One paramiko Transport per host; each run()
opens a session channel on it, so threads may share one Ssh (at most
`max_sessions` channels at once, under sshd's MaxSessions of 10).
A failed command is a Result; a connection that cannot be made or is lost, or a
server that stops answering, is an SshError (an lxcfix.errors.Unreachable), never
an OSError, so callers that treat OSError as "file missing" cannot mistake a dead
host for an empty one.

The remote side is hostile: run() reads at most max_output bytes of stdout and of
stderr (past that the channel is closed: rc 125), and gives up at its timeout (rc 124);
a command's output is complete only once the channel's EOF came, since sshd may send
the exit status before the last of the output. Files are read with one command each
(`head -c`, 2 round trips, in parallel channels) unless use_sftp: an SFTP read is 5 round
trips (stat, open, read, read to EOF, close) on one channel whose deadline is channel
state, so a host's SFTP operations take turns. Every SFTP operation, and the server's
answer to starting a command, has a deadline (op_timeout; OperationTimedOut after it, and
a host whose SFTP timed out is not asked over SFTP again), and read() refuses what is
not a regular file (a FIFO would block the server) and anything over max_read bytes.

Host keys are checked strictly against known_hosts (system + user files, or
one explicit file, plus any extra files a host's inventory entry names): an
unknown key raises HostKeyUnknown, a changed one HostKeyChanged.
accept_new=True is OpenSSH's StrictHostKeyChecking=accept-new: an unknown key is
trusted for this connection and appended, once authentication has succeeded, to
the explicit known_hosts file, else the user's (UserKnownHostsFile, ~/.ssh/known_hosts);
never to an inventory's file; a changed key is still refused. ~/.ssh/config (or an
explicit file) supplies HostName, Port, User, IdentityFile, IdentitiesOnly, ProxyCommand,
ProxyJump, HostKeyAlias, UserKnownHostsFile, GlobalKnownHostsFile,
StrictHostKeyChecking (accept-new and no both mean accept-new here),
ConnectTimeout and ServerAliveInterval. The SSH agent is used when
SSH_AUTH_SOCK is set. Transient connect errors (refused, timed out, reset,
closed during the handshake) are retried with backoff, `tries` times in all;
authentication and host-key failures, and a listener that never sends an SSH
banner, never are.
"""

from __future__ import annotations

import base64
import errno
import fnmatch
import getpass
import hashlib
import heapq
import hmac
import itertools
import logging
import os
import re
import select
import shlex
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import fabric
import paramiko
import tenacity

from . import memo
from .errors import BadInput, Unreachable
from .model import HOST_PYTHON, Result
from .transport import MAX_READ, _Commands, read_regular

DEFAULT_SSH_CONFIG = "~/.ssh/config"
# What lxcfix reads of the files SSH needs, at most (an inventory may name /dev/zero as a key):
# a private key is a few KB (RSA 16384 bits: 13 KB), an ssh config or a known_hosts a few hundred.
MAX_KEY_FILE = 1 << 20
MAX_SSH_CONFIG = 4 << 20
MAX_KNOWN_HOSTS = 64 << 20
SYSTEM_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
MiB = 1 << 20

# paramiko logs a transport thread's failure ("Exception (client): Error reading SSH protocol
# banner") at ERROR; with no handler Python's last-resort handler writes it to stderr, a second
# line beside lxcfix's own report of the same host. The report (LXF301) is what says it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


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


class OperationTimedOut(SshError):
    """The host is connected but stopped answering (an SFTP reply, a channel request)."""


class _Transient(Exception):
    """A connect error worth another try (refused, timeout, reset, closed during the handshake)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ----------------------------------------------------------------- options


@dataclass(frozen=True)
class SshOptions:
    """The per-run SSH policy: what the command line decides for every host it reaches.

    known_hosts      the one known_hosts file to check, and where accept-new writes
                     (None: the system and user files; accept-new writes the user's)
    accept_new       trust unknown host keys (never changed ones); written after login only
    ssh_config       ssh_config(5) file; the default is skipped when absent, another is not
    connect_timeout  TCP connect, SSH banner, key exchange and authentication, each (s)
    op_timeout       each SFTP operation, and each channel request's reply (s)
    tries            connection attempts for transient errors
    max_sessions     channels one host runs at once (capped at 9: sshd's MaxSessions is 10)
    allow_agent      use SSH_AUTH_SOCK's agent
    look_for_keys    try ~/.ssh/id_* too
    max_output       bytes of stdout, and of stderr, one command may return
    max_read         bytes one read() may return
    """

    known_hosts: str | None = None
    accept_new: bool = False
    ssh_config: str | None = DEFAULT_SSH_CONFIG
    connect_timeout: float = 10.0
    op_timeout: float = 60.0
    tries: int = 3
    max_sessions: int = 8
    allow_agent: bool = True
    look_for_keys: bool = True
    max_output: int = 1 * MiB
    max_read: int = MAX_READ

    @classmethod
    def from_cli(cls, **flags) -> SshOptions:
        """From command-line flags by field name; a flag that is None was not given (its default)."""
        return cls(**{k: v for k, v in flags.items() if v is not None})

    def check(self) -> SshOptions:
        """self, or BadInput for what cannot work; reads the ssh config (no host is contacted)."""
        for name in ("connect_timeout", "op_timeout"):
            if not getattr(self, name) > 0:
                raise BadInput(f"SSH {name.replace('_', ' ')} must be more than 0 seconds, "
                               f"got {getattr(self, name)!r}")
        for name in ("tries", "max_sessions", "max_output", "max_read"):
            if getattr(self, name) < 1:
                raise BadInput(f"SSH {name.replace('_', ' ')} must be at least 1, got {getattr(self, name)!r}")
        if self.known_hosts is not None:
            path = os.path.expanduser(self.known_hosts)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            except OSError as e:
                raise BadInput(f"known_hosts {self.known_hosts}: {e.strerror or e}") from None
            if st is not None and not stat.S_ISREG(st.st_mode) and path != os.devnull:
                raise BadInput(f"known_hosts {self.known_hosts}: not a regular file")
            if st is not None and not os.access(path, os.R_OK):
                raise BadInput(f"known_hosts {self.known_hosts}: cannot be read")
        load_ssh_config(self.ssh_config)
        return self


# ----------------------------------------------------------------- ssh_config

# ssh_config(5) keywords of OpenSSH 9.x (with Debian's GSSAPI ones), lower case. paramiko
# accepts any word as a keyword; OpenSSH refuses a config with an unknown one, and so do we,
# so that a garbage file is the admin's error (exit 2), not every host "unreachable".
SSH_CONFIG_KEYWORDS = frozenset("""
host match include addkeystoagent addressfamily batchmode bindaddress bindinterface
canonicaldomains canonicalizefallbacklocal canonicalizehostname canonicalizemaxdots
canonicalizepermittedcnames casignaturealgorithms certificatefile channeltimeout
challengeresponseauthentication checkhostip cipher ciphers clearallforwardings compression
compressionlevel connectionattempts connecttimeout controlmaster controlpath controlpersist
dynamicforward enableescapecommandline enablesshkeysign escapechar exitonforwardfailure
fingerprinthash forkafterauthentication forwardagent forwardx11 forwardx11timeout
forwardx11trusted gatewayports globalknownhostsfile globalknownhostsfile2
gssapiauthentication gssapiclientidentity gssapidelegatecredentials gssapikexalgorithms
gssapikeyexchange gssapirenewalforcesrekey gssapiserveridentity gssapitrustdns
hashknownhosts hostbasedacceptedalgorithms hostbasedauthentication hostbasedkeytypes
hostkeyalgorithms hostkeyalias hostname identitiesonly identityagent identityfile
identityfile2 ignoreunknown ipqos kbdinteractiveauthentication kbdinteractivedevices
kexalgorithms knownhostscommand localcommand localforward loglevel logverbose macs
nohostauthenticationforlocalhost numberofpasswordprompts obscurekeystroketiming
passwordauthentication permitlocalcommand permitremoteopen pkcs11provider port
preferredauthentications protocol proxycommand proxyjump proxyusefdpass
pubkeyacceptedalgorithms pubkeyacceptedkeytypes pubkeyauthentication rekeylimit
remotecommand remoteforward requesttty requiredrsasize revokedhostkeys
rhostsrsaauthentication rsaauthentication securitykeyprovider sendenv serveralivecountmax
serveraliveinterval sessiontype setenv smartcarddevice stdinnull streamlocalbindmask
streamlocalbindunlink stricthostkeychecking syslogfacility tag tcpkeepalive tunnel
tunneldevice updatehostkeys useprivilegedport user userknownhostsfile userknownhostsfile2
useroaming verifyhostkeydns visualhostkey xauthlocation
""".split())
_CONFIG_LINE = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko's own line syntax
_NUMERIC = {"port": (1, 65535), "connecttimeout": (0, None), "serveraliveinterval": (0, None)}


def load_ssh_config(path: str | None) -> paramiko.SSHConfig | None:
    """The parsed ssh config, None for no config (path None, or the default one absent).
    BadInput ("ssh config PATH:LINE: ...") for a missing explicit file or one OpenSSH would refuse."""
    if path is None:
        return None
    full = os.path.expanduser(path)
    try:
        st = os.stat(full)
        if os.path.realpath(full) == os.devnull:  # `--ssh-config /dev/null`: no config, as ssh -F takes it
            text = ""
        elif not stat.S_ISREG(st.st_mode):
            raise BadInput(f"ssh config {path}: not a regular file")
        else:  # bounded: a config is a few KB; /dev/zero or a huge file is refused, never read whole
            text = read_regular(full, MAX_SSH_CONFIG).decode("utf-8")
    except FileNotFoundError:
        if path == DEFAULT_SSH_CONFIG:
            return None
        raise BadInput(f"ssh config {path}: no such file") from None
    except UnicodeDecodeError:
        raise BadInput(f"ssh config {path}: not a text file (not UTF-8)") from None
    except OSError as e:
        raise BadInput(f"ssh config {path}: {e.strerror or e}") from None
    _validate_config(path, text)
    try:
        return paramiko.SSHConfig.from_text(text)
    except (paramiko.SSHException, ValueError) as e:
        raise BadInput(f"ssh config {path}: {e}") from None


def _validate_config(path: str, text: str) -> None:
    ignored: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _CONFIG_LINE.match(line)
        if not m:
            raise BadInput(f"ssh config {path}:{n}: cannot parse {line[:60]!r} (expected 'Keyword value')")
        key, value = m.group(1).lower(), m.group(2).strip().strip('"')
        if key == "ignoreunknown":
            ignored += [p.lower() for p in value.replace(",", " ").split()]
        if key not in SSH_CONFIG_KEYWORDS and not any(fnmatch.fnmatchcase(key, p) for p in ignored):
            raise BadInput(f"ssh config {path}:{n}: unknown keyword {m.group(1)!r}")
        if key in _NUMERIC and value.lower() != "none":
            low, high = _NUMERIC[key]
            if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
                raise BadInput(f"ssh config {path}:{n}: {m.group(1)} {value!r} is not a valid number")


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
    known_hosts_write: str | None  # where accept-new appends (never an extra file)
    accept_new: bool
    connect_timeout: float
    keepalive: int


def resolve(dest: str, *, port: int | None = None, user: str | None = None,
            key_files: Sequence[str] = (), proxy_argv: Sequence[str] | None = None,
            known_hosts: str | None = None, accept_new: bool = False,
            config: paramiko.SSHConfig | None = None, connect_timeout: float = 10.0,
            extra_known_hosts: Sequence[str] = ()) -> Endpoint:
    """Explicit options (the inventory's) win over ssh_config, as they do for `ssh -p -l -i`.
    known_hosts is the command line's file (read and written); extra_known_hosts are only read."""
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
        read = [known_hosts]
        write = known_hosts
    else:
        users = c.get("userknownhostsfile", " ".join(USER_KNOWN_HOSTS)).split()
        system = c.get("globalknownhostsfile", " ".join(SYSTEM_KNOWN_HOSTS)).split()
        read = system + users
        write = users[0] if users else None
    read += [p for p in extra_known_hosts if p not in read]
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


def check_key_files(paths: Sequence[str]) -> None:
    """Each private key file that exists must be a regular file of at most MAX_KEY_FILE bytes
    before paramiko reads it (whole): `ansible_ssh_private_key_file: /dev/zero` would be read
    until memory runs out. ConnectFailed (this host unreachable, with the reason) otherwise;
    a missing one is left to paramiko, as before."""
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ConnectFailed(f"private key file {path}: {e.strerror or e}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConnectFailed(f"private key file {path}: not a regular file; not read")
        if st.st_size > MAX_KEY_FILE:
            raise ConnectFailed(f"private key file {path}: larger than {MAX_KEY_FILE >> 10} KiB "
                                "(a key is a few KB); not read")


# ----------------------------------------------------------------- host keys

_KNOWN_HOSTS_LOCK = threading.Lock()


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _KnownHostsFile:
    """One known_hosts file, parsed once per process (until its inode, size or mtime change),
    indexed by host name. give() puts in a client's HostKeys exactly the entries paramiko's
    HostKeys.load would have let lookup() find for that name, in file order (lookup answers
    the first key of each type): lines read as paramiko reads them (HostKeyEntry.from_line,
    bad lines skipped), plain names by a dict, hashed ones (|1|salt|hash) matched as paramiko
    matches them."""

    def __init__(self, path: str):
        self.plain: dict[str, list[tuple[int, paramiko.PKey]]] = {}
        self.hashed: list[tuple[int, bytes, bytes, paramiko.PKey]] = []  # (line, salt, HMAC-SHA1, key)
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line[0] == "#":
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except paramiko.SSHException:
                    continue
                if entry is None:
                    continue
                for h in entry.hostnames:
                    if h.startswith("|1|"):
                        try:  # decoded once here, not for every host looked up (paramiko's hash_host)
                            salt, digest = (base64.b64decode(x, validate=True) for x in h[3:].split("|"))
                        except ValueError:
                            continue  # a malformed hashed name matches no host
                        self.hashed.append((lineno, salt, digest, entry.key))
                    else:
                        self.plain.setdefault(h, []).append((lineno, entry.key))

    def keys(self, name: str) -> list[paramiko.PKey]:
        found = list(self.plain.get(name, ()))
        if self.hashed and not name.startswith("|1|"):
            raw = name.encode()
            found += [(n, key) for n, salt, digest, key in self.hashed
                      if hmac.compare_digest(hmac.digest(salt, raw, "sha1"), digest)]
        return [key for _, key in sorted(found, key=lambda nk: nk[0])]

    def give(self, into: paramiko.HostKeys, name: str) -> None:
        for key in self.keys(name):
            into._entries.append(paramiko.hostkeys.HostKeyEntry([name], key))


_KNOWN_HOSTS_CACHE: dict[str, tuple[tuple, _KnownHostsFile]] = {}
_KNOWN_HOSTS_CACHE_LOCK = threading.Lock()
_KNOWN_HOSTS_PARSING: dict[str, threading.Lock] = {}  # path -> the lock of whoever parses it now


def _known_hosts(path: str) -> _KnownHostsFile:
    """The parsed file, from the cache while its stamp holds. One thread parses a file at a time
    and the others that want it wait for that parse: a fleet's first hosts all connect at once
    (a worker process's 32, in the same millisecond), and each parsing the same file for itself
    cost each host a whole parse (~0.1 ms a line), every time over in every worker process."""
    while True:
        st = os.stat(path)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _KNOWN_HOSTS_CACHE_LOCK:
            cached = _KNOWN_HOSTS_CACHE.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            busy = _KNOWN_HOSTS_PARSING.get(path)
            if busy is None:
                mine = _KNOWN_HOSTS_PARSING[path] = threading.Lock()
                mine.acquire()
        if busy is None:
            break
        with busy:  # another thread is parsing this file: its result, then look again
            pass
    try:
        parsed = _KnownHostsFile(path)  # outside the cache lock: hosts with other files need not wait
        with _KNOWN_HOSTS_CACHE_LOCK:
            _KNOWN_HOSTS_CACHE[path] = (stamp, parsed)
        return parsed
    finally:
        with _KNOWN_HOSTS_CACHE_LOCK:
            del _KNOWN_HOSTS_PARSING[path]
        mine.release()


@memo.once()
def _fabric_config() -> "fabric.Config":
    """fabric's Config, built once per process (building it per host cost ~0.2-3 ms of CPU: invoke's
    layered config) and shared by every _Connection, which only reads it. No ssh config loaded by
    fabric: resolve() reads it."""
    return fabric.Config(overrides={"load_ssh_configs": False})


class _Connection(fabric.Connection):
    """fabric's Connection whose every attribute is its own. fabric.Connection.__init__ sets
    inline_ssh_env, which is no class attribute there, so invoke's DataProxy wrote it into the
    Config, shared by every host: a merge() of the whole layered config per host (~0.7 ms of CPU),
    and while one thread's merge rebuilt it another thread's Connection found it empty
    ("AttributeError: No attribute or config key found for 'gateway'": that host unreachable)."""

    inline_ssh_env = None


_KEY_CACHE: dict[str, tuple[tuple, paramiko.PKey]] = {}
_KEY_CACHE_LOCK = threading.Lock()


def _stamp(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _private_key(path: str) -> paramiko.PKey | None:
    """The private key in path as paramiko's SSHClient would load it for key_filename (RSA, then
    ECDSA, then Ed25519; its -cert.pub certificate when there is one), parsed once per process
    while neither file changes; None where that fails (a passphrase, no such file, not a key),
    and paramiko is left to try the file itself, as before. paramiko reads and parses the file
    for each host, once for each key type it tries before the right one (3 times for ed25519)."""
    cert = path[: -len("-cert.pub")] if path.endswith("-cert.pub") else path + "-cert.pub"
    key_path = path if not path.endswith("-cert.pub") else cert
    cert_path = path if path.endswith("-cert.pub") else cert
    stamp = (_stamp(key_path), _stamp(cert_path))
    if stamp[0] is None:
        return None
    with _KEY_CACHE_LOCK:
        cached = _KEY_CACHE.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        key = None
        for klass in (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key):
            try:
                key = klass.from_private_key_file(key_path, None)
                break
            except (paramiko.SSHException, OSError, ValueError):
                continue
        if key is None:
            return None
        if stamp[1] is not None:
            try:
                key.load_certificate(cert_path)
            except (paramiko.SSHException, OSError, ValueError):
                return None  # paramiko's own load says what is wrong with it
        _KEY_CACHE[path] = (stamp, key)
        return key


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called only for a key known_hosts has no entry for (paramiko raises BadHostKeyException
    itself for a changed one). Strict: refuse. accept-new: trust it for this connection and
    remember it; commit() appends it to known_hosts once authentication has succeeded, so a
    server that cannot even log us in leaves nothing behind."""

    def __init__(self, label: str, ep: Endpoint):
        self.label = label
        self.ep = ep
        self.pending: tuple[str, paramiko.PKey] | None = None

    def missing_host_key(self, client, hostname, key):
        if not self.ep.accept_new:
            raise HostKeyUnknown(
                f"host key for {self.label} is unknown (not in known_hosts); "
                f"re-run with --accept-new-host-keys to trust it ({key.get_name()} {fingerprint(key)})")
        if self.ep.known_hosts_write is None:
            raise HostKeyUnknown(f"host key for {self.label} is unknown and there is no known_hosts file "
                                 "to add it to (UserKnownHostsFile /dev/null)")
        self.pending = (hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)

    def commit(self) -> None:
        if self.pending is None:
            return
        hostname, key = self.pending
        path = self.ep.known_hosts_write
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
                if entry[key.get_name()] != key:  # another connection recorded another key meanwhile
                    raise HostKeyChanged(_changed(self.label, hostname, key, path))
            else:
                try:
                    _append_known_host(path, hostname, key)
                except OSError as e:
                    raise HostKeyUnknown(f"host key for {self.label} is unknown and cannot be added to "
                                         f"{path}: {e.strerror or e}") from None
        self.pending = None


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


class Ssh(_Commands):
    """A host over SSH (a transport.Transport; device_nodes() runs `stat` there). Thread-safe;
    connects on first use (or connect()); close() when done.

    hostname/port/user/key_files/proxy_argv come from the inventory and win over ssh_config;
    known_hosts_extra are known_hosts files this host is also checked against (an inventory's
    lxcfix_known_hosts), read only: accept-new never writes them."""

    local = False  # its files are not on this machine

    def __init__(self, name: str, *, hostname: str | None = None, port: int | None = None,
                 user: str | None = None, key_files: Sequence[str] = (), options: SshOptions = SshOptions(),
                 proxy_argv: Sequence[str] | None = None, jump: Ssh | None = None, use_sftp: bool = False,
                 known_hosts_extra: Sequence[str] = (), python: str = HOST_PYTHON, _depth: int = 0):
        self.name = name
        self.python = python  # what lxcfix's helpers run with there (transport.python_of)
        self.dest = hostname or name
        self.port = port
        self.user = user
        self.key_files = tuple(key_files)
        self.proxy_argv = tuple(proxy_argv) if proxy_argv is not None else None
        self.known_hosts_extra = tuple(known_hosts_extra)
        self.options = options
        self.jump = jump
        self.use_sftp = use_sftp
        self._depth = _depth
        # sshd's MaxSessions (default 10) counts the SFTP channel too: at most 9 commands at once
        self._sessions = threading.BoundedSemaphore(max(1, min(options.max_sessions, 9)))
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()  # use_sftp only: one SFTP channel, its timeout is channel state
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_failed = False  # no SFTP subsystem: files go through commands
        self._sftp_stuck: str | None = None  # SFTP stopped answering once: the reason, raised again
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
                o = self.options
                self.endpoint = resolve(
                    self.dest, port=self.port, user=self.user, key_files=self.key_files,
                    proxy_argv=self.proxy_argv, known_hosts=o.known_hosts, accept_new=o.accept_new,
                    config=load_ssh_config(o.ssh_config), connect_timeout=o.connect_timeout,
                    extra_known_hosts=self.known_hosts_extra)
            tries = max(1, self.options.tries)
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(_Transient),
                stop=tenacity.stop_after_attempt(tries),
                wait=tenacity.wait_exponential(multiplier=0.25, max=2.0),
                reraise=True,
            )
            try:
                self._client = retrying(self._connect_once)
            except _Transient as e:
                raise ConnectFailed(f"{e.reason} ({self.label}; {tries} tries)") from None
            self.connections += 1
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
            hop_options = replace(self.options, connect_timeout=ep.connect_timeout)
            for hop in hops:
                user, host, port = _parse_jump(hop)
                via = Ssh(host, port=port, user=user, options=hop_options, jump=via, use_sftp=False,
                          known_hosts_extra=self.known_hosts_extra, _depth=self._depth + 1)
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
        check_key_files(ep.key_files)
        # fabric manages the client (its layered Config built once per process: _fabric_config);
        # it loads no host keys of its own: only the files resolve() chose, and our policy
        # (strict, or accept-new when asked) replaces fabric's, which adds unknown keys.
        # connect_kwargs of its own: without them fabric uses the shared Config's dict itself
        conn = _Connection(ep.host_key_name, user=ep.user, port=ep.port, config=_fabric_config(),
                           connect_kwargs={"look_for_keys": False})  # (set below, with the rest)
        client = conn.client
        for path in ep.known_hosts:
            if os.path.isfile(path):
                try:
                    if os.stat(path).st_size > MAX_KNOWN_HOSTS:
                        raise ConnectFailed(f"known_hosts {path}: larger than {MAX_KNOWN_HOSTS >> 20} MiB; "
                                            "not read")
                    # (paramiko's own load parses every line for every connection, and checks each
                    # line against all before it: quadratic in the file, for each of a fleet's hosts)
                    _known_hosts(path).give(client.get_host_keys() if path == ep.known_hosts_write
                                            else client._system_host_keys,
                                            known_hosts_name(ep.host_key_name, ep.port))
                except (OSError, paramiko.SSHException) as e:
                    raise ConnectFailed(f"known_hosts {path} cannot be read: {e}") from None
        policy = _Policy(self.label, ep)
        client.set_missing_host_key_policy(policy)
        sock = None
        try:
            sock = self._sock(ep)
            # the first key file, parsed once per process, goes as pkey (paramiko tries it first,
            # then key_filename's, as it would have tried the files in that order)
            key_files = list(ep.key_files)
            pkey = _private_key(key_files[0]) if key_files else None
            conn.connect_kwargs.update(
                pkey=pkey, key_filename=(key_files[1:] if pkey is not None else key_files) or None,
                allow_agent=self.options.allow_agent and not ep.identities_only,
                look_for_keys=self.options.look_for_keys and not ep.identities_only,
                sock=sock, timeout=ep.connect_timeout,  # not fabric's connect_timeout: it int()s it
                banner_timeout=ep.connect_timeout,
                auth_timeout=ep.connect_timeout, channel_timeout=ep.connect_timeout,
            )
            conn.open()
            policy.commit()  # logged in: only now may a new host key be recorded
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
            tr = client.get_transport()
            no_banner = tr is not None and not tr.remote_version
            self._drop(client, sock)
            text = str(e) or type(e).__name__
            if "No authentication methods available" in text or "no acceptable" in text.lower():
                raise AuthFailed(f"authentication failed for {ep.user}@{self.label}: no usable key "
                                 "(give ansible_ssh_private_key_file or load the agent)") from None
            if proxy_err:
                raise ConnectFailed(f"proxy command for {self.name} failed: {proxy_err}") from None
            closed = _closed_by_peer(e)
            if no_banner and not closed:
                # accepted the connection but said nothing for the whole banner timeout
                # ("No existing session" is paramiko's word for it): not worth another try
                where = f"proxy command {ep.proxy_argv[0]}" if ep.proxy_argv else f"{ep.hostname}:{ep.port}"
                raise ConnectFailed(f"no SSH banner from {where} within {ep.connect_timeout:g}s "
                                    "(not an SSH server, or it is stuck)") from None
            if ep.proxy_argv:
                raise ConnectFailed(f"proxy command for {self.name} failed: {text}") from None
            if isinstance(e, (socket.timeout, TimeoutError)) or "timeout" in text.lower() \
                    or "No existing session" in text:  # paramiko's word for a key exchange cut short
                raise _Transient(f"SSH handshake with {ep.hostname}:{ep.port} timed out") from None
            if closed or "banner" in text.lower():
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
            self._drop_sftp()
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

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = 60,
            max_output: int | None = None) -> Result:
        """max_output: this command's cap on stdout and on stderr, each (default options.max_output),
        for a caller that bounds a bigger answer itself (a sweep's framed output)."""
        return self._run(argv, input, timeout, max_output or self.options.max_output)

    def _run(self, argv: Sequence[str], input: str | None, timeout: float | None, cap: int) -> Result:
        argv = list(argv)
        if not argv:
            raise ValueError("empty argv")
        # No input: stdin from /dev/null over there rather than an EOF from here. paramiko's
        # shutdown_write() builds the EOF under the channel lock but sends it outside, so after a
        # fast command the transport thread can send our CLOSE first, and sshd drops the whole
        # connection for an EOF on a closed channel.
        command = shlex.join(argv) + (" </dev/null" if input is None else "")
        t = self._transport()
        with self._sessions:
            try:
                chan = t.open_session(timeout=self.endpoint.connect_timeout)
            except paramiko.ChannelException as e:
                return Result(255, "", f"{argv[0]}: {self.name} refused a new session: {e.text}")
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ConnectionLost(f"connection to {self.name} lost: {e or type(e).__name__}") from None
            try:
                return self._exec(chan, t, argv, command, input, timeout, cap)
            finally:
                _close(chan)

    def _exec(self, chan: paramiko.Channel, t, argv, command: str, input: str | None, timeout,
              cap: int) -> Result:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            _answered(chan, self.options.op_timeout, lambda: chan.exec_command(command),
                      f"{self.name} did not start {argv[0]}")
            if input is not None:
                data = input.encode("utf-8", "surrogateescape")

                def feed():
                    try:
                        chan.sendall(data)
                        if not (chan.closed or chan.exit_status_ready()):  # (the EOF race above)
                            chan.shutdown_write()
                    except (paramiko.SSHException, EOFError, OSError):
                        pass  # the channel closed: the reader sees it

                if len(data) <= chan.out_window_size:  # within the window the server gave: sent now, never waits
                    feed()
                else:  # from a thread: a command may write more than a window before it reads it all
                    threading.Thread(target=feed, name=f"lxcfix-ssh-input-{self.name}", daemon=True).start()
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectionLost(f"connection to {self.name} lost while starting {argv[0]}: "
                                 f"{e or type(e).__name__}") from None
        # Woken by data, EOF or close on either stream. Not select() on chan.fileno(): paramiko's
        # pipe behind it is closed by chan.close() while the transport thread may still write to
        # it, and the EBADF that gives kills the whole connection (every channel of the host).
        woken = threading.Event()
        chan.in_buffer.set_event(woken)
        chan.in_stderr_buffer.set_event(woken)
        woken.set()
        out, err = bytearray(), bytearray()
        while True:
            woken.clear()  # before draining: a feed from now on sets it again
            for buf, ready, recv, what in ((out, chan.recv_ready, chan.recv, "stdout"),
                                           (err, chan.recv_stderr_ready, chan.recv_stderr, "stderr")):
                while ready():
                    buf += recv(65536)
                    if len(buf) > cap:
                        del buf[cap:]
                        _close(chan)
                        return Result(125, _text(out), _text(err) + _nl(err)
                                      + f"{argv[0]}: output exceeded {cap} bytes on {what}; stopped",
                                      truncated=what)
            # sshd may send the exit status before the last of the output: done only at EOF
            # (nothing is sent after it), or when the channel is gone
            if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                if chan.recv_ready() or chan.recv_stderr_ready():
                    continue
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
                woken.wait(wait)
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
        if self._sftp_stuck is not None:
            raise OperationTimedOut(self._sftp_stuck)
        if self._sftp is None:
            t = self._transport()
            op = self.options.op_timeout
            try:
                chan = t.open_session(timeout=self.endpoint.connect_timeout)
            except paramiko.ChannelException:
                self._sftp_failed = True  # refused (MaxSessions): fall back to commands
                return None
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ConnectionLost(f"connection to {self.name} lost: {e or type(e).__name__}") from None
            try:
                chan.settimeout(op)
                _answered(chan, op, lambda: chan.invoke_subsystem("sftp"), f"SFTP on {self.name}")
                self._sftp = paramiko.SFTPClient(chan)
            except (OperationTimedOut, TimeoutError):
                _close(chan)
                self._stuck(f"SFTP on {self.name}")
            except (paramiko.SSHException, EOFError, OSError):
                _close(chan)
                if not t.is_active():
                    raise ConnectionLost(f"connection to {self.name} lost") from None
                self._sftp_failed = True  # no sftp subsystem: fall back to commands
                return None
        return self._sftp

    def _drop_sftp(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass  # closing a session that is gone or stuck: nothing left to do
            self._sftp = None

    def _stuck(self, what: str):
        """SFTP did not answer in time: that session may still answer late (out of step), so it is
        dropped, and the host's SFTP is not tried again: every later operation fails at once."""
        self._drop_sftp()
        self._sftp_stuck = (f"{what}: no answer within {self.options.op_timeout:g}s "
                            "(the SFTP server is stuck)")
        raise OperationTimedOut(self._sftp_stuck)

    def _sftp_do(self, what: str, fn):
        """(True, fn(sftp, left)) from SFTP, or (False, None) when there is none. left() before each
        request makes the operation's remaining time the limit for the next reply."""
        with self._sftp_lock:
            sftp = self._sftp_client()
            if sftp is None:
                return False, None
            deadline = time.monotonic() + self.options.op_timeout

            def left():
                rest = deadline - time.monotonic()
                if rest <= 0:
                    raise TimeoutError()
                sftp.get_channel().settimeout(rest)

            try:
                left()
                return True, fn(sftp, left)
            except TimeoutError:
                self._stuck(f"SFTP {what} on {self.name}")
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
        """The file's bytes. OSError: the file's answer (ENOENT, EACCES, ...; EINVAL for what is
        not a regular file: a FIFO would block the server; EFBIG past max_read bytes)."""
        cap = self.options.max_read

        def get(sftp, left):
            st = sftp.stat(path)  # before open(): opening a FIFO blocks until a writer comes
            if not stat.S_ISREG(st.st_mode or 0):
                raise OSError(errno.EINVAL, "not a regular file", path)
            left()
            chunks, size = [], 0
            with sftp.open(path, "rb") as f:
                while True:
                    left()
                    chunk = f.read(32768)
                    if not chunk:
                        return b"".join(chunks)
                    size += len(chunk)
                    if size > cap:
                        raise OSError(errno.EFBIG, f"larger than {cap} bytes", path)
                    chunks.append(chunk)

        ok, data = self._sftp_do(f"read {path}", get)
        if ok:
            return data
        r = self._run(["sh", "-c", _READ_SCRIPT, "sh", path, str(cap + 1)], None, self.options.op_timeout,
                      cap + 1)
        if r.rc == _NOT_REGULAR:
            raise OSError(errno.EINVAL, "not a regular file", path)
        if not r.ok:
            raise _os_error(r, path)
        data = r.stdout.encode("utf-8", "surrogateescape")
        if len(data) > cap:
            raise OSError(errno.EFBIG, f"larger than {cap} bytes", path)
        return data

    def listdir(self, path: str) -> list[str]:
        ok, names = self._sftp_do(f"listdir {path}", lambda sftp, left: sftp.listdir(path))
        if ok:
            return sorted(names)
        r = self.run(["ls", "-1A", "--", path])
        if not r.ok:
            raise _os_error(r, path)
        return sorted(n for n in r.stdout.split("\n") if n)

    def isdir(self, path: str) -> bool:
        def check(sftp, left):
            try:
                return stat.S_ISDIR(sftp.stat(path).st_mode or 0)
            except FileNotFoundError:
                return False

        ok, value = self._sftp_do(f"stat {path}", check)
        if ok:
            return value
        return self.run(["test", "-d", path]).ok

    # what a test or a bench asks

    def open_tunnel(self, host: str, port: int) -> paramiko.Channel:
        return self._transport().open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0))


# The read fallback without SFTP: a fixed script, the path as its argument (never pasted in).
_NOT_REGULAR = 22
_READ_SCRIPT = ('if [ -e "$1" ] && [ ! -f "$1" ]; then echo "$1: not a regular file" >&2; exit 22; fi; '
                'exec head -c "$2" -- "$1"')


class _Deadlines:
    """One thread for the deadlines of every pending channel request (a threading.Timer per
    request would start a thread per command: ~2 ms each). The thread ends once nothing is
    pending for IDLE seconds and the next request starts it again: a process done with SSH is
    left with its own threads only (scan.only_thread: worker processes may be forked)."""

    IDLE = 2.0

    def __init__(self):
        self._cv = threading.Condition()
        self._heap: list = []  # (when, seq, _Pending)
        self._live = 0  # requests still waiting: neither answered nor expired
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, seconds: float, pending: _Pending) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), pending))
            pending.deadlines = self
            self._live += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lxcfix-ssh-deadlines", daemon=True)
                self._thread.start()
            self._cv.notify()

    def settled(self) -> None:
        """One request answered or expired (each says so once): with none left waiting, the
        heap's answered entries are dropped now, not at their deadlines."""
        with self._cv:
            self._live -= 1
            if self._live == 0:
                self._heap.clear()
                self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    if self._heap and self._heap[0][2].done:
                        heapq.heappop(self._heap)  # answered in time: forget it now
                        continue
                    if not self._heap:
                        if not self._cv.wait(self.IDLE) and not self._heap:
                            self._thread = None  # add() starts another, under this same lock
                            return
                        continue
                    self._cv.wait(self._heap[0][0] - time.monotonic())
                _, _, due = heapq.heappop(self._heap)
            try:
                due.expire()
            except Exception:  # this thread serves every deadline: it must not die
                pass


class _Pending:
    """A channel request waiting for its reply: expire() (the deadline) and finish() (the reply)
    race; whichever comes first wins, under the lock, and tells the deadlines it is settled."""

    def __init__(self, chan: paramiko.Channel):
        self.chan = chan
        self.lock = threading.Lock()
        self.done = False
        self.fired = False
        self.deadlines: _Deadlines | None = None  # the ones it was added to (add sets it)

    def _settled(self) -> None:
        if self.deadlines is not None:
            self.deadlines.settled()

    def expire(self) -> None:
        with self.lock:
            if self.done:
                return
            self.fired = self.done = True
        self._settled()
        _close(self.chan)  # ends paramiko's wait for the reply

    def finish(self) -> bool:
        """True when the reply came in time (the channel is still open)."""
        with self.lock:
            first, self.done = not self.done, True
            in_time = not self.fired
        if first:
            self._settled()
        return in_time


_DEADLINES = _Deadlines()


def _answered(chan: paramiko.Channel, seconds: float, request, what: str) -> None:
    """request() (a channel request that waits for the server's reply: exec, subsystem), or
    OperationTimedOut after `seconds`. paramiko waits for that reply with no limit; closing the
    channel ends the wait."""
    pending = _Pending(chan)
    _DEADLINES.add(seconds, pending)
    try:
        request()
    except (paramiko.SSHException, EOFError, OSError):
        if pending.finish():
            raise
    else:
        if pending.finish():
            return
    raise OperationTimedOut(f"{what}: no answer within {seconds:g}s")


def _close(chan: paramiko.Channel) -> None:
    """Close a channel; on a dead connection sending the CLOSE raises, and nothing is left to do."""
    try:
        chan.close()
    except (paramiko.SSHException, EOFError, OSError):
        pass


def _closed_by_peer(e: BaseException) -> bool:
    """Whether the handshake ended because the other side closed (paramiko wraps the EOFError)."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, (EOFError, ConnectionResetError, BrokenPipeError)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _nl(b: bytes | bytearray) -> str:
    return "\n" if b and not b.endswith(b"\n") else ""


def _text(b: bytes | bytearray) -> str:
    return bytes(b).decode("utf-8", "surrogateescape")


def _os_error(r: Result, path: str) -> OSError:
    msg = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
    low = msg[0].lower()
    for needle, code in (("no such file", errno.ENOENT), ("permission denied", errno.EACCES),
                         ("is a directory", errno.EISDIR), ("not a directory", errno.ENOTDIR)):
        if needle in low:
            return OSError(code, msg[0], path)
    return OSError(errno.EIO, msg[0] or f"exit {r.rc}", path)


__all__ = [
    "AuthFailed",
    "ConnectFailed",
    "ConnectionLost",
    "DEFAULT_SSH_CONFIG",
    "Endpoint",
    "HostKeyChanged",
    "HostKeyUnknown",
    "OperationTimedOut",
    "Ssh",
    "SshError",
    "SshOptions",
    "fingerprint",
    "known_hosts_name",
    "load_ssh_config",
    "resolve",
]
