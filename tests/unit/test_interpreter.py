"""Which interpreter lxcfix's own helper processes run with (the sweep, the BPF and rootfs
readers, the shipped agent): this process's own here (sys.executable), on a remote host the one
its inventory names (ansible_python_interpreter), else /usr/bin/python3; never `python3` looked
up on a PATH. (A local scan with a fake python3 first on PATH: tests/real/test_interpreter.py.)"""

from __future__ import annotations

import sys

import pytest

from lxcfix import fleet, gather, observe, ship, ssh, sweep
from lxcfix.inventory import load, remote_python
from lxcfix.model import HOST_PYTHON, Result
from lxcfix.transport import Cached, Local, Prefetched, python_of


def entries(text: str):
    return load(text, "inv.yaml").hosts


@pytest.mark.parametrize("value, expected", [
    (None, "/usr/bin/python3"),
    ("/opt/py/bin/python3.12", "/opt/py/bin/python3.12"),
    ("/usr/libexec/platform-python", "/usr/libexec/platform-python"),
    ("auto", "/usr/bin/python3"), ("auto_silent", "/usr/bin/python3"), ("auto_legacy", "/usr/bin/python3"),
    ("python3", "/usr/bin/python3"),  # a bare name: a remote PATH would decide
    ("{{ ansible_playbook_python }}", "/usr/bin/python3"),
    ("/opt/{{ v }}/python3", "/usr/bin/python3"),
    ("/usr/bin/python3\n--x", "/usr/bin/python3"), (3, "/usr/bin/python3"), (["/x"], "/usr/bin/python3"),
])
def test_the_remote_interpreter_is_the_inventorys_absolute_path_else_usr_bin_python3(value, expected):
    assert remote_python(value) == expected


def test_each_host_gets_its_own_and_the_ssh_transport_carries_it(monkeypatch):
    made = []

    class FakeSsh:
        def __init__(self, name, **kw):
            self.name, self.kw = name, kw
            made.append(self)

        def connect(self):
            return self

    monkeypatch.setattr(fleet, "Ssh", FakeSsh)
    a, b, c, d = entries("""
all:
  vars: {ansible_python_interpreter: /opt/py/bin/python3}
  hosts:
    a: {}
    b: {ansible_python_interpreter: /usr/bin/python3.11}
    c: {ansible_python_interpreter: auto_silent}
    d: {ansible_connection: local}
""")
    assert (a.python, b.python, c.python) == ("/opt/py/bin/python3", "/usr/bin/python3.11", HOST_PYTHON)
    connect = fleet.ssh_connector(ssh_config=None)
    assert [connect(e).kw["python"] for e in (a, b, c)] == ["/opt/py/bin/python3", "/usr/bin/python3.11",
                                                            HOST_PYTHON]
    assert connect(d).python == sys.executable  # ansible_connection: local is this process's machine
    real = ssh.Ssh("h", python="/opt/py/bin/python3")
    assert python_of(real) == "/opt/py/bin/python3" and python_of(ssh.Ssh("h2")) == HOST_PYTHON


class Recording:
    """A remote host (no files here) that records each argv and answers nothing."""

    name, local = "hv", False

    def __init__(self, python=None):
        if python is not None:
            self.python = python
        self.argvs: list[list[str]] = []

    def run(self, argv, *, input=None, timeout=60, max_output=None):
        self.argvs.append(list(argv))
        return Result(1, "", "no")

    def read(self, path):
        raise FileNotFoundError(path)


def test_the_sweep_the_readers_and_the_agent_start_the_hosts_interpreter():
    t = Recording("/opt/py/bin/python3")
    gather.run_sweep(Cached(t), sweep.Request(read=["/etc/hostname"]))
    observe.read_programs(Prefetched(t, sweep.Answers()), "/sys/fs/cgroup/lxc.payload.x")
    with pytest.raises(Exception):
        ship.run_agent(t, {"op": "plan"})
    assert [a[0] for a in t.argvs if a[0] != "bpftool"] == ["/opt/py/bin/python3"] * 3
    ask = observe.rootfs_ask(t, _Running(), "x", {}, True)
    assert ask[0] == "/opt/py/bin/python3" and ask[1] == "-c"
    # a transport that names none (a container, a snapshot): /usr/bin/python3, never a bare python3
    bare = Recording()
    gather.run_sweep(bare, sweep.Request(read=["/etc/hostname"]))
    assert bare.argvs[0][0] == HOST_PYTHON
    assert Local().python == sys.executable and python_of(Cached(Local())) == sys.executable


class _Running:
    name = "lxc"

    def init_pid(self, t, ct):
        return 4242
