"""ssh.py without a network: the options and their check, ssh_config validation, where host
keys may be written and when, a channel request that is never answered.

Real connections (sshd, caps, deadlines, a silent listener) are in tests/real/test_ssh_*.py
and tests/real/test_fleet.py."""

from __future__ import annotations

import dataclasses
import threading
import time

import paramiko
import pytest

from lxcfix import fleet, ssh
from lxcfix.errors import BadInput
from lxcfix.inventory import HostEntry


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


# ----------------------------------------------------------------- options


def test_options_are_frozen_with_safe_defaults():
    o = ssh.SshOptions()
    assert (o.known_hosts, o.accept_new, o.ssh_config, o.tries, o.max_sessions) == (None, False, "~/.ssh/config", 3, 8)
    assert o.max_output == 1 << 20 and o.max_read >= 1 << 20 and o.connect_timeout == 10.0 and o.op_timeout > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.accept_new = True  # type: ignore[misc]
    assert o.check() is o


def test_from_cli_takes_unset_flags_as_defaults():
    o = ssh.SshOptions.from_cli(known_hosts=None, accept_new=True, ssh_config=None)
    assert o == ssh.SshOptions(accept_new=True) and o.ssh_config == ssh.DEFAULT_SSH_CONFIG
    assert ssh.SshOptions.from_cli(ssh_config="/etc/lxcfix/ssh_config").ssh_config == "/etc/lxcfix/ssh_config"


@pytest.mark.parametrize("field, value, message", [
    ("connect_timeout", 0, "SSH connect timeout must be more than 0 seconds"),
    ("op_timeout", -1.0, "SSH op timeout must be more than 0 seconds"),
    ("tries", 0, "SSH tries must be at least 1"),
    ("max_output", 0, "SSH max output must be at least 1"),
])
def test_check_refuses_numbers_that_cannot_work(field, value, message):
    with pytest.raises(BadInput, match=message):
        dataclasses.replace(ssh.SshOptions(ssh_config=None), **{field: value}).check()


def test_check_known_hosts(tmp_path):
    ssh.SshOptions(ssh_config=None, known_hosts=str(tmp_path / "not-yet")).check()  # accept-new may create it
    with pytest.raises(BadInput, match="known_hosts .*: not a regular file"):
        ssh.SshOptions(ssh_config=None, known_hosts=str(tmp_path)).check()


# ----------------------------------------------------------------- ssh_config


def test_ssh_config_missing_default_is_none_missing_explicit_is_bad_input(tmp_path):
    assert ssh.load_ssh_config(None) is None
    assert ssh.load_ssh_config(ssh.DEFAULT_SSH_CONFIG) is None  # $HOME/.ssh/config absent
    with pytest.raises(BadInput, match=f"^ssh config {tmp_path}/nope: no such file$"):
        ssh.load_ssh_config(str(tmp_path / "nope"))
    assert ssh.load_ssh_config("/dev/null").lookup("x")["hostname"] == "x"


@pytest.mark.parametrize("text, message", [
    ("Host *\n  {{{ garbage\n", r":2: cannot parse '\{\{\{ garbage'"),
    ("Host a\n  HostName 10.0.0.1\n  this is not ssh config\n", r":3: unknown keyword 'this'"),
    ("Host a\n  Port twentytwo\n", r":2: Port 'twentytwo' is not a valid number"),
    ("Port 70000\n", r":1: Port '70000' is not a valid number"),
    ("Host a\n  ConnectTimeout soon\n", r":2: ConnectTimeout 'soon' is not a valid number"),
])
def test_garbage_ssh_config_is_bad_input_with_its_line(tmp_path, text, message):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(text)
    with pytest.raises(BadInput, match=f"^ssh config {cfg}{message}"):
        ssh.load_ssh_config(str(cfg))
    with pytest.raises(BadInput, match=message):
        ssh.SshOptions(ssh_config=str(cfg)).check()


def test_binary_or_directory_ssh_config_is_bad_input(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_bytes(b"\xff\xfe\x00garbage\x9c")
    with pytest.raises(BadInput, match="not a text file"):
        ssh.load_ssh_config(str(cfg))
    with pytest.raises(BadInput, match="not a regular file"):
        ssh.load_ssh_config(str(tmp_path))


def test_real_world_ssh_config_loads(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("""
# comment
IgnoreUnknown UseKeychain,Foo*
Host pve*
  HostName %h.lan
  Port 2222
  User root
  IdentityFile ~/.ssh/pve
  IdentitiesOnly yes
  UseKeychain yes
  FooBar 1
  ServerAliveInterval 30
  ServerAliveCountMax 3
  StrictHostKeyChecking accept-new
  GSSAPIAuthentication no
  ControlMaster auto
  ControlPath ~/.ssh/cm-%r@%h:%p
Match host bastion
  ProxyJump none
""")
    c = ssh.load_ssh_config(str(cfg))
    assert c.lookup("pve1")["hostname"] == "pve1.lan" and c.lookup("pve1")["port"] == "2222"


def test_connector_checks_its_options_before_any_host(tmp_path, monkeypatch):
    tried = []
    monkeypatch.setattr(ssh.socket, "create_connection", lambda *a, **k: tried.append(a))
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Hots typo\n")
    with pytest.raises(BadInput, match=r":1: unknown keyword 'Hots'"):
        fleet.SshConnector(ssh.SshOptions(ssh_config=str(cfg)))
    with pytest.raises(BadInput, match="no such file"):
        fleet.ssh_connector(ssh_config=str(tmp_path / "missing"))
    assert tried == []


# ----------------------------------------------------------------- known_hosts: read vs written


def test_inventory_known_hosts_is_read_never_the_write_target():
    ep = ssh.resolve("h", known_hosts="/cli/kh", extra_known_hosts=["/inv/kh"], config=None)
    assert ep.known_hosts == ("/cli/kh", "/inv/kh") and ep.known_hosts_write == "/cli/kh"
    ep = ssh.resolve("h", extra_known_hosts=["/inv/kh"], config=None)
    assert ep.known_hosts[-1] == "/inv/kh" and ep.known_hosts_write.endswith("/home/.ssh/known_hosts")
    cfg = paramiko.SSHConfig.from_text("Host h\n  UserKnownHostsFile /etc/lxcfix/kh\n")
    ep = ssh.resolve("h", extra_known_hosts=["/inv/kh"], config=cfg)
    assert ep.known_hosts_write == "/etc/lxcfix/kh"


class FakeClient:
    def __init__(self):
        self.keys = paramiko.HostKeys()

    def get_host_keys(self):
        return self.keys


@pytest.fixture(scope="module")
def key():
    return paramiko.RSAKey.generate(1024)


def test_accept_new_records_the_key_only_on_commit(tmp_path, key):
    kh = tmp_path / "sub" / "known_hosts"
    ep = ssh.resolve("127.0.0.1", port=2222, known_hosts=str(kh), accept_new=True, config=None)
    policy = ssh._Policy("h", ep)
    client = FakeClient()
    policy.missing_host_key(client, "[127.0.0.1]:2222", key)
    assert client.keys.lookup("[127.0.0.1]:2222")[key.get_name()] == key  # trusted for this connection
    assert not kh.exists() and not kh.parent.exists()  # ... not written: no login yet
    policy.commit()
    assert kh.read_text() == f"[127.0.0.1]:2222 {key.get_name()} {key.get_base64()}\n"
    policy.commit()  # once
    again = ssh._Policy("h", ep)
    again.missing_host_key(FakeClient(), "[127.0.0.1]:2222", key)
    again.commit()  # another connection that raced for it: already there, not appended twice
    assert kh.read_text().count("\n") == 1


def test_commit_refuses_a_key_that_another_connection_recorded_differently(tmp_path, key):
    kh = tmp_path / "known_hosts"
    other = paramiko.RSAKey.generate(1024)
    ep = ssh.resolve("10.0.0.1", known_hosts=str(kh), accept_new=True, config=None)
    policy = ssh._Policy("h", ep)
    policy.missing_host_key(FakeClient(), "10.0.0.1", key)
    kh.write_text(f"10.0.0.1 {other.get_name()} {other.get_base64()}\n")
    with pytest.raises(ssh.HostKeyChanged, match="CHANGED"):
        policy.commit()
    assert kh.read_text().count("\n") == 1


def test_strict_refuses_and_writes_nothing(tmp_path, key):
    kh = tmp_path / "known_hosts"
    policy = ssh._Policy("h", ssh.resolve("10.0.0.1", known_hosts=str(kh), config=None))
    with pytest.raises(ssh.HostKeyUnknown, match="re-run with --accept-new-host-keys"):
        policy.missing_host_key(FakeClient(), "10.0.0.1", key)
    policy.commit()
    assert not kh.exists()


def test_inventory_can_narrow_accept_new_never_widen(monkeypatch):
    made = {}

    class FakeSsh:
        def __init__(self, name, **kw):
            made[name] = kw

    monkeypatch.setattr(fleet, "Ssh", FakeSsh)
    strict = fleet.SshConnector(ssh.SshOptions(ssh_config=None, known_hosts="/cli/kh"))
    trusting = fleet.SshConnector(ssh.SshOptions(ssh_config=None, known_hosts="/cli/kh", accept_new=True))
    yes = HostEntry("yes", known_hosts="/inv/kh", accept_new_host_keys=True)
    no = HostEntry("no", accept_new_host_keys=False)
    strict._ssh("a", yes)
    trusting._ssh("b", yes)
    trusting._ssh("c", no)
    assert made["a"]["options"].accept_new is False  # the inventory alone trusts nothing
    assert made["b"]["options"].accept_new is True and made["c"]["options"].accept_new is False
    assert made["a"]["known_hosts_extra"] == ("/inv/kh",) and made["a"]["options"].known_hosts == "/cli/kh"


# ----------------------------------------------------------------- a request never answered


class SilentChannel:
    """What paramiko's exec_command/invoke_subsystem do when the server never replies: wait,
    until the channel is closed, then raise."""

    def __init__(self):
        self._closed = threading.Event()

    def close(self):
        self._closed.set()

    def request(self):
        self._closed.wait(30)
        raise paramiko.SSHException("Channel closed.")


def test_unanswered_channel_request_times_out():
    chan = SilentChannel()
    start = time.monotonic()
    with pytest.raises(ssh.OperationTimedOut, match=r"^h did not start cat: no answer within 0.3s$"):
        ssh._answered(chan, 0.3, chan.request, "h did not start cat")
    assert time.monotonic() - start < 2
    answered = SilentChannel()
    ssh._answered(answered, 5, lambda: None, "x")  # answered in time: no error, channel left open
    assert not answered._closed.is_set()


def test_files_ssh_needs_are_read_bounded(tmp_path):
    """Issue 21 row 9: a key file, ssh config or known_hosts is never read whole."""
    from lxcfix import ssh
    from lxcfix.errors import BadInput, Unreachable

    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(ssh.MAX_SSH_CONFIG + 1)
    for path, why in (("/dev/zero", "not a regular file"), (str(big), "larger than")):
        with pytest.raises(BadInput, match=why):
            ssh.load_ssh_config(path)
        with pytest.raises(Unreachable, match=f"private key file {path}: " + why):
            ssh.check_key_files([path])
    ssh.check_key_files([str(tmp_path / "missing")])  # left to paramiko, as before
    assert ssh.load_ssh_config("/dev/null") is not None


def test_connections_never_share_their_connect_arguments_through_the_one_fabric_config(tmp_path):
    """fabric's Config is built once per process (ssh._fabric_config); each connection's
    connect_kwargs must be its own dict, or one host's key, socket and timeouts would become
    the next host's (fabric uses the Config's own dict when a Connection is given none)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def garbage():  # accepts and answers no SSH: each connect gets its socket, then fails
        for _ in range(2):
            c, _ = srv.accept()
            c.sendall(b"not ssh\r\n")
            c.close()

    threading.Thread(target=garbage, daemon=True).start()
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    options = ssh.SshOptions(ssh_config=None, allow_agent=False, look_for_keys=False, known_hosts=str(kh),
                             connect_timeout=5, tries=1)
    for _ in range(2):
        t = ssh.Ssh("h", hostname="127.0.0.1", port=port, key_files=[str(tmp_path / "k")], options=options)
        with pytest.raises(ssh.SshError):
            t.connect()
        t.close()
    srv.close()
    assert dict(ssh._fabric_config().connect_kwargs) == {}
