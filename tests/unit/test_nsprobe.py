"""The namespace floor's pure parts (lxcfix.nsprobe): finding a container's init from /proc texts,
and reading what the floor's program printed. The program itself runs on real containers:
tests/real/test_floor.py."""

from __future__ import annotations

import json

from lxcfix import nsprobe, probe
from lxcfix.model import Result

STATUS = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nPPid:\t4100\nNSpid:\t4242\t1\nNSpgid:\t4242\t1\n"


def test_nspid_and_ppid_read_the_status_lines_totally():
    assert nsprobe.nspid(STATUS) == (4242, 1)
    assert nsprobe.ppid(STATUS) == 4100
    assert nsprobe.nspid("Name:\tx\n") is None
    assert nsprobe.nspid("NSpid:\t12a\t1\n") is None
    assert nsprobe.nspid("NSpid:\t" + "1" * 11 + "\n") is None
    assert nsprobe.ppid("PPid:\t-1\n") is None


def test_an_init_is_pid_1_exactly_one_namespace_below():
    assert nsprobe.is_init(STATUS, depth=1)
    assert not nsprobe.is_init(STATUS, depth=2)  # lxcfix itself runs in a container: one level deeper
    assert not nsprobe.is_init("NSpid:\t5000\t200\t1\n", depth=1)  # an inner container's init
    assert not nsprobe.is_init("NSpid:\t4243\t7\n", depth=1)  # a process of the container, not its init


def test_the_monitor_must_be_this_containers_in_this_lxcpath():
    assert nsprobe.is_monitor(b"[lxc monitor] /var/lib/lxc web\0\0\0", "/var/lib/lxc", "web")
    assert nsprobe.is_monitor(b"[lxc monitor] /srv/lxc a b", "/srv/lxc", "a b")
    assert not nsprobe.is_monitor(b"[lxc monitor] /srv/other web", "/var/lib/lxc", "web")
    assert not nsprobe.is_monitor(b"[lxc monitor] /var/lib/lxc web2", "/var/lib/lxc", "web")
    assert not nsprobe.is_monitor(b"sleep\0infinity", "/var/lib/lxc", "web")


def test_payload_cgroups_of_lxc_and_proxmox():
    assert nsprobe.payload_cgroup("lxc", "web") == "/sys/fs/cgroup/lxc.payload.web"
    assert nsprobe.payload_cgroup("pve", "101") == "/sys/fs/cgroup/lxc/101/ns"


def test_nvidia_nodes_keep_the_in_container_probe():
    assert nsprobe.needs_inside(["/dev/net/tun", "/dev/nvidia-uvm"])
    assert nsprobe.needs_inside(["/dev/nvidia-caps/nvidia-cap1"])
    assert not nsprobe.needs_inside(["/dev/dri/renderD128", "/dev/kfd", "/dev/net/tun"])


def test_a_childs_answer_is_the_probes_result_or_why_it_left_it():
    text = "lxcfix-probe 1\nnode /dev/net/tun exists=1 char=1 major=10 minor=200 open=EPERM\nend\n"
    assert nsprobe.answer("ok", text.encode()) == Result(0, text, "")
    assert probe.parse(nsprobe.answer("ok", text.encode()).stdout).nodes["/dev/net/tun"].open == "EPERM"
    assert nsprobe.answer("timeout", b"lxcfix-probe 1\n").rc == 124
    large = nsprobe.answer("large", b"lxcfix-probe 1\nnode")
    assert large.rc == 125 and large.truncated == "stdout"
    assert nsprobe.answer("failed", b"").rc == 1
    assert nsprobe.answer("ok", b"lxcfix-ns fallback its cgroup takes no process: EBUSY\n") == \
        "its cgroup takes no process: EBUSY"


def test_the_programs_output_is_read_totally():
    lines = [json.dumps({"status": "ok", "out": "end\n"}), json.dumps({"status": "timeout", "out": "\udcff"})]
    assert nsprobe.answers_of("\n".join(lines) + "\n", 3) == [("ok", b"end\n"), ("timeout", b"\xff"),
                                                             ("failed", b"")]
    assert nsprobe.answers_of("garbage\n" + lines[0], 2) == [("failed", b""), ("failed", b"")]
    assert nsprobe.answers_of(json.dumps({"status": "pwned", "out": ""}), 1) == [("failed", b"")]
    assert nsprobe.answers_of(json.dumps({"status": "ok", "out": 5}), 1) == [("failed", b"")]


def test_the_program_is_stdlib_python_that_imports_nothing_once_inside():
    code = nsprobe.program()
    compile(code, "<nsprobe>", "exec")
    look = code[code.index("def look("):code.index("def fan_out(")]
    assert "import " not in look
    assert look.index("sys.meta_path[:] = []") < look.index("enter(pid, cgroup)")
    request = json.loads(nsprobe.request([{"pid": 1, "cgroup": "/x", "paths": ["/dev/a"], "access": []}], 5, 99))
    assert request["timeout"] == 5 and request["cap"] == 99 and request["table_max"] == nsprobe.TABLE_MAX
