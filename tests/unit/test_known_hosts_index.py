"""ssh._KnownHostsFile: a known_hosts file parsed once and indexed by host name gives each
connection exactly the keys paramiko's own HostKeys.load + lookup give (plain and hashed
names, several key types, the first key of a type winning, bad lines skipped), and a file
that changes is read again."""

from __future__ import annotations

import os

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from lxcfix import ssh


def _pub(private) -> str:
    return private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH).decode()


def _ed() -> str:
    return _pub(ed25519.Ed25519PrivateKey.generate())


def _ec() -> str:
    return _pub(ec.generate_private_key(ec.SECP256R1()))


def _as_dict(hk: paramiko.HostKeys, name: str):
    found = hk.lookup(name)
    return None if found is None else {t: found[t].get_base64() for t in found.keys()}


def test_index_gives_what_paramiko_finds(tmp_path):
    lines = [f"{n} {_ed()}" for n in ("a", "[b]:2222", "c", "10.0.0.1")]
    lines += [f"a,c {_ec()}", f"{paramiko.HostKeys.hash_host('c')} {_ed()}",
              f"{paramiko.HostKeys.hash_host('d')} {_ed()}", "|1|not-base64|x ssh-ed25519 AAAA",
              "garbage line", "# a comment", "", f"a {_ed()}"]  # a second ed25519 key for a: the first wins
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    theirs = paramiko.HostKeys(str(path))
    for name in ("a", "[b]:2222", "c", "10.0.0.1", "d", "e", "b"):
        mine = paramiko.HostKeys()
        ssh._known_hosts(str(path)).give(mine, name)
        assert _as_dict(mine, name) == _as_dict(theirs, name), name


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(f"a {_ed()}\n")
    first = ssh._known_hosts(str(path))
    assert ssh._known_hosts(str(path)) is first  # parsed once
    with open(path, "a") as f:
        f.write(f"b {_ed()}\n")
    os.utime(path, ns=(1, 1))
    again = ssh._known_hosts(str(path))
    assert again is not first and again.keys("b") and again.keys("a") == first.keys("a")


def test_hosts_connecting_at_once_parse_the_file_once(tmp_path, monkeypatch):
    """A fleet's first hosts (a worker process's 32) all want the file in the same moment: one
    thread parses it, the others wait for that parse and get the same index."""
    import threading

    path = tmp_path / "known_hosts"
    path.write_text("".join(f"h{i} {_ed()}\n" for i in range(20)))
    parses = []
    real = ssh._KnownHostsFile

    def counted(p):
        parses.append(p)
        return real(p)

    monkeypatch.setattr(ssh, "_KnownHostsFile", counted)
    start = threading.Barrier(16)
    got = []

    def connect():
        start.wait()
        got.append(ssh._known_hosts(str(path)))

    threads = [threading.Thread(target=connect) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 16 and len({id(x) for x in got}) == 1
    assert parses == [str(path)]
    assert not ssh._KNOWN_HOSTS_PARSING  # nobody is left marked as parsing


def test_a_file_that_cannot_be_read_fails_each_caller_and_is_not_left_busy(tmp_path):
    path = tmp_path / "known_hosts"
    path.mkdir()  # open() of a directory: IsADirectoryError
    for _ in range(2):
        try:
            ssh._known_hosts(str(path))
        except OSError:
            pass
        else:
            raise AssertionError("a directory parsed as known_hosts")
    assert str(path) not in ssh._KNOWN_HOSTS_PARSING
