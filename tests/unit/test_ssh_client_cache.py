"""What a fleet's connections share per process instead of redoing per host: the client's private
key parsed once (ssh._private_key, as paramiko's key_filename would load it), and fabric's Config
read, never rewritten, by each host's Connection (ssh._Connection)."""

from __future__ import annotations

import os

import fabric
import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from lxcfix import ssh


def _write_key(path, private, password: bytes | None = None) -> None:
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    path.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, enc))


def test_a_key_is_parsed_once_and_as_paramiko_loads_it(tmp_path):
    for private, kind in ((ed25519.Ed25519PrivateKey.generate(), paramiko.Ed25519Key),
                          (ec.generate_private_key(ec.SECP256R1()), paramiko.ECDSAKey)):
        path = tmp_path / f"id_{kind.__name__}"
        _write_key(path, private)
        key = ssh._private_key(str(path))
        assert isinstance(key, kind)
        assert key == kind.from_private_key_file(str(path))
        assert ssh._private_key(str(path)) is key  # from the cache


def test_a_changed_key_file_is_read_again(tmp_path):
    path = tmp_path / "id"
    _write_key(path, ed25519.Ed25519PrivateKey.generate())
    first = ssh._private_key(str(path))
    _write_key(path, ed25519.Ed25519PrivateKey.generate())
    os.utime(path, ns=(1, 1))
    again = ssh._private_key(str(path))
    assert again is not first and again != first


def test_what_it_cannot_load_is_left_to_paramiko(tmp_path):
    locked = tmp_path / "locked"
    _write_key(locked, ed25519.Ed25519PrivateKey.generate(), password=b"secret")
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    for path in (locked, junk, tmp_path / "missing"):
        assert ssh._private_key(str(path)) is None  # paramiko tries key_filename itself, as before


def test_a_connection_does_not_rewrite_the_shared_config(monkeypatch):
    """fabric.Connection's inline_ssh_env was written into the shared Config (a merge() per
    host, and a race: another thread's Connection found it empty)."""
    config = ssh._fabric_config()
    merges = []
    real = fabric.Config.merge

    def counted(self, *a, **kw):
        merges.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(fabric.Config, "merge", counted)
    conns = [ssh._Connection(f"h{i}", user="root", port=22, config=config, connect_kwargs={"look_for_keys": False})
             for i in range(3)]
    assert merges == []
    assert all(c.inline_ssh_env == config.inline_ssh_env for c in conns)
    assert [c.host for c in conns] == ["h0", "h1", "h2"] and conns[0].config is config
