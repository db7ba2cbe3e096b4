"""Inventory parsing: groups, precedence, ranges, lxcfix keys, every error with file:line,
hostile input as bounded BadInput, and the JSON `ansible-inventory --list` prints."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lxcfix import inventory
from lxcfix.errors import BadInput
from lxcfix.inventory import (LXCFIX_KEYS, VALIDATORS, CtAddress, check_var, expand_range, load, load_json,
                              parse_ct_address)
from lxcfix.inventory_io import load_file

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "inventory"


def inv(text: str, filename: str = "inventory/test.yaml"):
    return load(textwrap.dedent(text).lstrip("\n"), filename)


def hosts(text: str) -> dict:
    return {h.name: h for h in inv(text).hosts}


def error(text: str, filename: str = "inventory/test.yaml") -> str:
    with pytest.raises(BadInput) as e:
        inv(text, filename)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------- structure


def test_groups_children_hosts_and_order():
    i = inv("""
        all:
          hosts:
            solo:
          children:
            proxmox:
              children:
                cluster:
                  hosts:
                    pve1:
                    pve2:
                gpu:
                  hosts:
                    pve2:
                    gpu1:
            lab:
              hosts:
                lxc1:
    """)
    assert [h.name for h in i.hosts] == ["solo", "pve1", "pve2", "gpu1", "lxc1"]
    assert i.groups["proxmox"] == ("pve1", "pve2", "gpu1")
    assert i.groups["all"] == ("solo", "pve1", "pve2", "gpu1", "lxc1")
    by = {h.name: h for h in i.hosts}
    assert by["pve2"].groups == ("all", "proxmox", "cluster", "gpu")
    assert by["solo"].groups == ("all",)
    assert [h.name for h in i.select(["gpu", "lxc1"])] == ["pve2", "gpu1", "lxc1"]
    assert [h.name for h in i.select([])] == [h.name for h in i.hosts]


def test_top_level_groups_are_children_of_all():
    i = inv("""
        all:
          vars: {ansible_user: admin}
        web:
          hosts:
            w1:
    """)
    (h,) = i.hosts
    assert h.user == "admin" and h.groups == ("all", "web")


def test_select_unknown_names_the_file_and_a_suggestion():
    i = inv("""
        all:
          hosts:
            pve1:
    """)
    with pytest.raises(BadInput, match=r"inventory/test.yaml: no host or group 'pve' \(did you mean 'pve1'\?\)"):
        i.select(["pve"])


def test_ranges_and_host_port():
    h = hosts("""
        all:
          hosts:
            pve[1:3]:
              ansible_user: root
            node[08:10]:
            "rack[a:b]-n[1:2]":
            edge1:2222:
    """)
    assert list(h) == ["pve1", "pve2", "pve3", "node08", "node09", "node10",
                       "racka-n1", "racka-n2", "rackb-n1", "rackb-n2", "edge1"]
    assert h["pve2"].user == "root"
    assert h["edge1"].port == 2222
    assert expand_range("n[0:10:5]") == ["n0", "n5", "n10"]


# ----------------------------------------------------------------- precedence


PRECEDENCE = """
all:
  vars:
    ansible_user: from_all
    ansible_port: 1001
    lxcfix_backend: lxc
    lxcfix_pve_node: allnode
  children:
    parent:
      vars:
        ansible_port: 1002
        lxcfix_backend: pve
        lxcfix_pve_node: parentnode
      children:
        child:
          vars:
            ansible_port: 1003
            lxcfix_pve_node: childnode
          hosts:
            h1:
              ansible_port: 1004
            h2:
    zeta:
      vars: {ansible_user: from_zeta}
      hosts: {h2: }
    alpha:
      vars: {ansible_user: from_alpha, lxcfix_known_hosts: /k/alpha}
      hosts: {h2: }
"""


def test_precedence_host_over_child_over_parent_over_all():
    h = {x.name: x for x in load(PRECEDENCE, "p.yaml").hosts}
    assert h["h1"].port == 1004  # host var
    assert h["h2"].port == 1003  # child group
    assert h["h1"].backend == "pve"  # parent over all
    assert h["h1"].pve_node == "childnode"
    assert h["h1"].user == "from_all"


def test_precedence_same_depth_groups_in_name_order():
    h = {x.name: x for x in load(PRECEDENCE, "p.yaml").hosts}
    # alpha and zeta are both depth 1: applied alpha then zeta, so zeta wins
    assert h["h2"].user == "from_zeta"
    assert h["h2"].known_hosts == "/k/alpha"


def test_host_vars_given_twice_merge_in_file_order():
    h = hosts("""
        all:
          children:
            a:
              hosts:
                h: {ansible_port: 1, ansible_user: u1}
            b:
              hosts:
                h: {ansible_port: 2}
    """)
    assert (h["h"].port, h["h"].user) == (2, "u1")


# ----------------------------------------------------------------- lxcfix keys


def test_lxcfix_keys():
    h = hosts("""
        all:
          hosts:
            pve1:
              ansible_host: 10.0.0.11
              ansible_ssh_private_key_file: keys/id
              lxcfix_containers: [200, "201"]
              lxcfix_backend: pve
              lxcfix_ct_ssh: {200: "root@10.0.5.200:22", "201": "[fe80::1]"}
              lxcfix_known_hosts: /etc/lxcfix/known_hosts
              lxcfix_accept_new_host_keys: true
              lxcfix_pve_node: pve1
            lxc1:
              ansible_connection: local
              lxcfix_containers: all
              lxcfix_lxc_path: /srv/lxc/
              lxcfix_container_access: exec
    """)
    p = h["pve1"]
    assert p.destination == "10.0.0.11"
    assert p.key_file == "inventory/keys/id"  # relative to the inventory file
    assert p.containers == ("200", "201")
    assert p.ct_ssh == {"200": CtAddress("10.0.5.200", "root", 22), "201": CtAddress("fe80::1")}
    assert str(p.ct_ssh["201"]) == "[fe80::1]"
    assert (p.known_hosts, p.accept_new_host_keys, p.pve_node) == ("/etc/lxcfix/known_hosts", True, "pve1")
    l = h["lxc1"]
    assert (l.connection, l.containers, l.lxc_path, l.container_access) == ("local", None, "/srv/lxc", "exec")
    assert l.accept_new_host_keys is None and l.destination == "lxc1"


def test_old_ansible_spellings():
    h = hosts("""
        all:
          hosts:
            a: {ansible_ssh_host: 10.1.1.1, ansible_ssh_port: "2200", ansible_ssh_user: ops}
    """)
    assert (h["a"].address, h["a"].port, h["a"].user) == ("10.1.1.1", 2200, "ops")


def test_parse_ct_address():
    assert parse_ct_address("root@10.0.0.5:22") == CtAddress("10.0.0.5", "root", 22)
    assert parse_ct_address("ct.lan") == CtAddress("ct.lan")
    assert parse_ct_address("u@[2001:db8::5]:2222") == CtAddress("2001:db8::5", "u", 2222)
    with pytest.raises(BadInput):
        parse_ct_address("root@host;reboot")


@pytest.mark.parametrize("path", ["inventory/prod.yaml", "inventory/lab.yaml"])
def test_shipped_examples_load(path):
    i = load_file(str(REPO / path))
    assert i.hosts
    for h in i.hosts:
        assert h.backend in ("auto", "pve", "lxc")


def test_prod_example_shape():
    i = load_file(str(REPO / "inventory/prod.yaml"))
    by = {h.name: h for h in i.hosts}
    assert i.groups["cluster_fra"] == ("pve1", "pve2", "pve3")
    assert by["pve-gpu2"].port == 2222 and by["pve-gpu2"].pve_node == "gpu2"
    assert by["pve-gpu2"].ct_ssh["300"] == CtAddress("10.20.5.30", "root", 22)
    assert by["pve1"].user == "root" and by["pve1"].backend == "pve"


# ----------------------------------------------------------------- errors, each with file:line


@pytest.mark.parametrize("text, expected", [
    # line 4: the value of ansible_port
    ("all:\n  hosts:\n    pve1:\n      ansible_port: abc\n",
     "inventory/test.yaml:4: ansible_port must be an integer, got 'abc'"),
    ("all:\n  hosts:\n    pve1:\n      ansible_port: 70000\n",
     "inventory/test.yaml:4: ansible_port must be between 1 and 65535, got 70000"),
    ("all:\n  hosts:\n    pve1:\n      ansible_port: true\n",
     "inventory/test.yaml:4: ansible_port must be an integer, got True"),
    ("all:\n  hosts:\n    'web;reboot':\n",
     "inventory/test.yaml:3: host name 'web;reboot' is not a valid host name"),
    ("all:\n  hosts:\n    -oProxyCommand=x:\n",
     "inventory/test.yaml:3: host name '-oProxyCommand=x' is not a valid host name"),
    ("all:\n  hosts:\n    a:\n      ansible_host: '10.0.0.1 && reboot'\n",
     "inventory/test.yaml:4: ansible_host must be a host name or IP address, got '10.0.0.1 && reboot'"),
    ("all:\n  hosts:\n    a:\n      ansible_host: -oProxyCommand=sh\n",
     "inventory/test.yaml:4: ansible_host must be a host name or IP address"),
    ("all:\n  hosts:\n    a:\n      ansible_user: 'root$(id)'\n",
     "inventory/test.yaml:4: ansible_user must be a user name, got 'root$(id)'"),
    ("all:\n  hosts:\n    a:\n      ansible_connection: winrm\n",
     "inventory/test.yaml:4: ansible_connection must be ssh or local, got 'winrm'"),
    ("all:\n  hosts:\n    a:\n      ansible_ssh_private_key_file: 12\n",
     "inventory/test.yaml:4: ansible_ssh_private_key_file must be a file path, got 12"),
    ("all:\n  vars:\n    lxcfix_backend: docker\n  hosts:\n    a:\n",
     "inventory/test.yaml:3: lxcfix_backend must be auto, pve or lxc, got 'docker'"),
    ("all:\n  hosts:\n    a:\n      lxcfix_containers: {x: 1}\n",
     "inventory/test.yaml:4: lxcfix_containers must be a list of container ids or names"),
    ("all:\n  hosts:\n    a:\n      lxcfix_containers: [200, 'bad name']\n",
     "inventory/test.yaml:4: lxcfix_containers: 'bad name' is not a Proxmox vmid or an LXC container name"),
    ("all:\n  hosts:\n    a:\n      lxcfix_backend: pve\n      lxcfix_containers: [web]\n",
     "inventory/test.yaml:5: lxcfix_containers: 'web' is not a Proxmox vmid (host a has lxcfix_backend: pve)"),
    ("all:\n  hosts:\n    a:\n      lxcfix_container_access: telnet\n",
     "inventory/test.yaml:4: lxcfix_container_access must be auto, exec or ssh, got 'telnet'"),
    ("all:\n  hosts:\n    a:\n      lxcfix_container_access: ssh\n",
     "inventory/test.yaml:4: host a: lxcfix_container_access is ssh but lxcfix_ct_ssh gives no addresses"),
    ("all:\n  hosts:\n    a:\n      lxcfix_container_access: ssh\n      lxcfix_containers: [web, db]\n"
     + "      lxcfix_ct_ssh: {web: 10.0.0.5}\n",
     "inventory/test.yaml:4: host a: lxcfix_container_access is ssh but lxcfix_ct_ssh has no address for db"),
    ("all:\n  hosts:\n    a:\n      lxcfix_ct_ssh: [root@x]\n",
     "inventory/test.yaml:4: lxcfix_ct_ssh must be a mapping"),
    ("all:\n  hosts:\n    a:\n      lxcfix_ct_ssh: {200: 'root@10.0.0.5:ssh'}\n",
     "inventory/test.yaml:4: lxcfix_ct_ssh port in 'root@10.0.0.5:ssh' must be an integer, got 'ssh'"),
    ("all:\n  hosts:\n    a:\n      lxcfix_ct_ssh: {200: 'root@`reboot`'}\n",
     "inventory/test.yaml:4: lxcfix_ct_ssh: '`reboot`' in 'root@`reboot`' is not a host name or IP address"),
    ("all:\n  hosts:\n    a:\n      lxcfix_accept_new_host_keys: maybe\n",
     "inventory/test.yaml:4: lxcfix_accept_new_host_keys must be true or false, got 'maybe'"),
    ("all:\n  hosts:\n    a:\n      lxcfix_pve_node: 'pve_1!'\n",
     "inventory/test.yaml:4: lxcfix_pve_node must be a Proxmox node name"),
    ("all:\n  hosts:\n    a:\n      lxcfix_lxc_path: relative/dir\n",
     "inventory/test.yaml:4: lxcfix_lxc_path must be an absolute path, got 'relative/dir'"),
    ("all:\n  hosts:\n    a:\n      lxcfix_known_hosts: ''\n",
     "inventory/test.yaml:4: lxcfix_known_hosts must be a file path"),
    ("all:\n  vars:\n    lxcfix_contaners: [1]\n  hosts:\n    a:\n",
     "inventory/test.yaml:3: unknown key lxcfix_contaners (did you mean lxcfix_containers?)"),
    ("all:\n  host:\n    a:\n",
     "inventory/test.yaml:2: unknown key 'host' in group 'all': a group has hosts, vars and children (did you mean 'hosts'?)"),
    ("all:\n  hosts:\n    a:\n    a:\n",
     "inventory/test.yaml:4: hosts of group 'all': 'a' given twice (first on line 3)"),
    ("all:\n  hosts: [a, b]\n",
     "inventory/test.yaml:2: hosts of group 'all' must be a mapping (name: vars or empty), got a list"),
    ("all:\n  hosts:\n    a: 10.0.0.1\n",
     "inventory/test.yaml:3: host 'a': host vars must be a mapping, got '10.0.0.1'"),
    ("all:\n  vars: [x]\n  hosts: {a: }\n",
     "inventory/test.yaml:2: vars of group 'all' must be a mapping of name: value, got a list"),
    ("all:\n  children: [web]\n",
     "inventory/test.yaml:2: children of group 'all' must be a mapping of groups, got a list"),
    ("all:\n  children:\n    'bad group':\n      hosts: {a: }\n",
     "inventory/test.yaml:3: group name 'bad group' is not valid"),
    ("all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
     "inventory/test.yaml:7: group 'a' is its own ancestor (all -> a -> b -> a)"),
    ("all:\n  children:\n    a:\n      children:\n        b:\n    b:\n      children:\n        a:\n",
     "inventory/test.yaml:3: group 'a' is its own ancestor (a -> b -> a)"),
    ("all:\n  children:\n    web: [h1]\n",
     "inventory/test.yaml:3: group 'web' must be a mapping with hosts/vars/children, got a list"),
    ("hosts:\n  a:\n",
     "inventory/test.yaml:1: 'hosts' at the top level: put it under `all:`"),
    ("- a\n- b\n",
     "inventory/test.yaml:1: inventory must be a mapping of groups"),
    ("all:\n  hosts:\n    a: {ansible_port: 22\n",
     "inventory/test.yaml:4: YAML syntax error:"),
    ("all:\n  vars:\n    ansible_user: root\n",
     "inventory/test.yaml:1: inventory has no hosts"),
    ("",
     "inventory/test.yaml:1: inventory is empty"),
    ("all:\n  hosts:\n    n[1:a]:\n",
     "inventory/test.yaml:3: host 'n[1:a]': range [1:a] mixes digits and letters"),
    ("all:\n  hosts:\n    a:\n      secret: !vault |\n        abc\n",
     "inventory/test.yaml:4: secret: could not determine a constructor for the tag '!vault'"),
])
def test_errors_name_file_and_line(text, expected):
    assert error(text).startswith(expected), error(text)


def test_error_line_points_at_group_var_even_when_a_host_overrides_it():
    text = """
        all:
          children:
            pve:
              vars:
                ansible_port: twenty-two
              hosts:
                pve1: {ansible_port: 22}
    """
    assert error(text, "inventory/prod.yaml") == "inventory/prod.yaml:5: ansible_port must be an integer, got 'twenty-two'"


def test_load_file_unreadable(tmp_path):
    with pytest.raises(BadInput, match=r"nope.yaml: cannot read inventory"):
        load_file(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"all:\n  hosts:\n    \xff:\n")
    with pytest.raises(BadInput, match=r"bin.yaml: not UTF-8"):
        load_file(str(bad))


def test_other_ansible_keys_are_kept_and_not_read():
    h = hosts("""
        all:
          hosts:
            a: {ansible_python_interpreter: /usr/bin/python3, ansible_become: yes, my_app_port: "²"}
    """)
    assert h["a"].vars["ansible_python_interpreter"] == "/usr/bin/python3"
    assert h["a"].vars["ansible_become"] is True and h["a"].vars["my_app_port"] == "²"


# ----------------------------------------------------------------- the validator table


def test_validator_table_normalizes():
    err = BadInput
    assert check_var("ansible_connection", "paramiko", err) == "ssh"
    assert check_var("ansible_port", " 2222 ", err) == 2222
    assert check_var("lxcfix_containers", 200, err) == ("200",)
    assert check_var("lxcfix_containers", "all", err) is None
    assert check_var("lxcfix_lxc_path", "/", err) == "/"
    assert check_var("some_var", object, err) is object
    with pytest.raises(BadInput, match=r"^unknown key lxcfix_zzzzzzzzz; lxcfix reads lxcfix_containers, lxcfix_backend, "):
        check_var("lxcfix_zzzzzzzzz", 1, err)


def test_every_lxcfix_key_has_a_validator_and_a_readme_row():
    readme = (REPO / "inventory/README.md").read_text()
    assert LXCFIX_KEYS == tuple(k for k in VALIDATORS if k.startswith("lxcfix_"))
    for key in VALIDATORS:
        assert f"`{key}`" in readme, key


# ----------------------------------------------------------------- known_hosts: checked, never written


def test_known_hosts_from_the_inventory_is_marked_as_such():
    h = hosts("""
        all:
          children:
            pve:
              vars: {lxcfix_known_hosts: keys/known_hosts}
              hosts: {pve1: }
          hosts:
            other:
    """)
    assert h["pve1"].known_hosts == "inventory/keys/known_hosts" and h["pve1"].known_hosts_from_inventory
    assert h["other"].known_hosts is None and not h["other"].known_hosts_from_inventory


def test_known_hosts_device_path_is_only_a_path():
    h = hosts("""
        all:
          hosts:
            a: {lxcfix_known_hosts: /dev/zero, ansible_ssh_private_key_file: /dev/zero}
    """)
    assert (h["a"].known_hosts, h["a"].key_file) == ("/dev/zero", "/dev/zero")


# ----------------------------------------------------------------- hostile input: one-line BadInput, bounded work


def quick_error(text: str, limit_s: float = 2.0) -> str:
    t = time.monotonic()
    msg = error(text)
    assert time.monotonic() - t < limit_s, msg
    return msg


@pytest.mark.parametrize("key, expected", [
    ("h[0:99999999999999999999]", "range [0:99999999999999999999] names more than 4096 hosts"),
    ("a[0:99][0:99]", "its ranges name more than 4096 hosts together"),
    ("n[a:z][a:z][a:z]", "its ranges name more than 4096 hosts together"),
    ("x[0:9][0:9][0:9][0:9][0:9][0:9][0:9][0:9][0:9][0:9][0:9][0:9]", "its ranges name more than 4096 hosts together"),
    ("n[0:" + "9" * 100 + "]", "range bound with more than 64 digits"),
    ("n" * 2000, "host pattern is longer than 1024 characters"),
    ("n[3:1]", "range [3:1] is empty"),
    ("n[1:3:0]", "range step must be at least 1"),
], ids=lambda x: x[:40])
def test_host_ranges_are_counted_before_any_name_is_built(key, expected):
    # an explicit key (`? key`): YAML refuses simple keys over 1024 characters by itself
    msg = quick_error(f"all:\n  hosts:\n    ? {key}\n")
    assert msg.startswith("inventory/test.yaml:3: host ") and msg.endswith(expected), msg


def test_ranges_up_to_the_bound_expand():
    assert len(expand_range("a[0:63][0:63]")) == 4096
    assert expand_range("r[a:b]-n[1:2]x") == ["ra-n1x", "ra-n2x", "rb-n1x", "rb-n2x"]
    with pytest.raises(ValueError, match="together"):
        expand_range("a[0:64][0:63]")


@pytest.mark.parametrize("value, expected", [
    ('"²"', "ansible_port must be an integer, got '²'"),
    ('"٢٢"', "ansible_port must be an integer, got '٢٢'"),  # Arabic-Indic digits: isdigit() too
    ('"' + "1" * 5000 + '"', "ansible_port must be between 1 and 65535, got a number of 5000 digits"),
    ("1" * 5000, "ansible_port: number has more than 64 characters"),
    ("0x" + "f" * 5000, "ansible_port: number has more than 64 characters"),
    ("99999999999", "ansible_port must be between 1 and 65535, got 99999999999"),
])
def test_numbers_are_ascii_digits_of_bounded_length(value, expected):
    assert quick_error(f"all:\n  hosts:\n    a:\n      ansible_port: {value}\n") == f"inventory/test.yaml:4: {expected}"


def test_long_numbers_are_refused_in_any_variable():
    # repr() of such an int would raise ValueError (Python's 4300-digit limit) in any message
    assert quick_error("all:\n  hosts:\n    a:\n      ansible_host: 0x" + "f" * 5000 + "\n") == \
        "inventory/test.yaml:4: ansible_host: number has more than 64 characters"
    assert quick_error("all:\n  hosts:\n    a:\n      whatever: " + "7" * 5000 + "\n") == \
        "inventory/test.yaml:4: whatever: number has more than 64 characters"


@pytest.mark.parametrize("addr, expected", [
    ("root@h:²", "lxcfix_ct_ssh port in 'root@h:²' must be an integer, got '²'"),
    ("root@h:" + "2" * 5000, "lxcfix_ct_ssh: 'root@h:2222222222"),
    ("root@h:" + "2" * 400, "lxcfix_ct_ssh port in 'root@h:2222"),
])
def test_ports_in_ct_ssh_addresses(addr, expected):
    msg = quick_error(f"all:\n  hosts:\n    a:\n      lxcfix_ct_ssh: {{200: '{addr}'}}\n")
    assert msg.startswith(f"inventory/test.yaml:4: {expected}"), msg
    assert len(msg) < 1200
    with pytest.raises(BadInput, match="must be an integer"):
        parse_ct_address("root@h:²")


def test_inventory_nested_100000_deep_in_yaml_flow_style():
    n = 100_000
    text = '{"all": ' + '{"children": {"a": ' * n + "null" + "}}" * n + "}"
    assert quick_error(text) == "inventory/test.yaml:1: inventory is nested too deep to read"


def test_inventory_nested_deep_in_yaml_block_style():
    lines = ["all:"]
    for i in range(1000):
        lines += ["  " * (2 * i + 1) + "children:", "  " * (2 * i + 2) + f"g{i}:"]
    assert quick_error("\n".join(lines) + "\n") == "inventory/test.yaml:1: inventory is nested too deep to read"


def test_groups_nested_more_than_64_deep():
    def nested(levels: int) -> str:
        lines = ["all:"]
        for i in range(levels):
            lines += ["  " * (2 * i + 1) + "children:", "  " * (2 * i + 2) + f"g{i}:"]
        lines += ["  " * (2 * levels + 1) + "hosts: {h: }"]
        return "\n".join(lines) + "\n"

    assert inv(nested(64)).hosts[0].groups[-1] == "g63"
    assert quick_error(nested(70)) == "inventory/test.yaml:131: group 'g64' is nested more than 64 levels deep"


def test_groups_chained_at_the_top_level_more_than_64_deep():
    # no deep YAML at all: each group names the next as a child, 2,000 of them
    text = "all:\n  hosts: {h: }\n" + "".join(f"g{i}:\n  children:\n    g{i + 1}:\n" for i in range(2_000))
    assert quick_error(text).endswith(": group 'g64' is nested more than 64 levels deep")


def test_expansion_is_bounded_ranges_times_vars():
    text = ("all:\n  vars: &v {" + ", ".join(f"v{i}: {i}" for i in range(6000)) + "}\n"
            "  hosts:\n    h[0:4095]: *v\n")
    assert quick_error(text) == ("inventory/test.yaml:4: inventory expands to more than 20,000,000 entries "
                                 "(host names x variables, group members); split it")


def test_expansion_is_bounded_yaml_merge_keys(monkeypatch):
    """10^8 merges: PyYAML up to 6.0.3 expands each one (the bound refuses it); 6.0.4 (what PyPI
    serves Debian 13's Python 3.13) merges without copying, so the inventory is small and loads."""
    monkeypatch.setattr(inventory, "MAX_WORK", 100_000)
    lines = ["m0: &m0 {k0: 1, k1: 2}"] + [
        f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}" for i in range(1, 9)]
    text = "all:\n  vars:\n" + "".join(f"    {x}\n" for x in lines) + "  hosts: {a: }\n"
    t = time.monotonic()
    try:
        (entry,) = load(text, "inventory/test.yaml").select(None)
    except BadInput as e:
        assert "inventory expands to more than 100,000 entries" in str(e)
    else:
        assert entry.vars == {f"m{i}": {"k0": 1, "k1": 2} for i in range(9)}
    assert time.monotonic() - t < 2.0


def test_error_messages_stay_short_for_huge_or_alias_shared_values():
    lines = ["x0: &x0 [a, a, a, a, a, a, a, a, a, a]"] + [
        f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = ("all:\n  vars:\n" + "".join(f"    {x}\n" for x in lines)
            + "    lxcfix_ct_ssh: *x8\n  hosts: {a: }\n")  # a list of 10^9 'a's once printed in full
    msg = quick_error(text)
    assert msg.startswith("inventory/test.yaml:11: lxcfix_ct_ssh must be a mapping") and len(msg) < 300
    msg = quick_error("all:\n  hosts:\n    a:\n      ansible_user: '" + "x" * 1_000_000 + "'\n")
    assert msg.startswith("inventory/test.yaml:4: ansible_user must be a user name, got 'xxx") and len(msg) < 300


def test_address_check_does_not_backtrack_on_long_input():
    msg = quick_error("all:\n  hosts:\n    a:\n      ansible_host: '" + ":" * 1_000_000 + "!'\n")
    assert msg.startswith("inventory/test.yaml:4: ansible_host must be a host name or IP address")


@pytest.mark.parametrize("text, expected", [
    ('all:\n  hosts:\n    "pve1\\n":\n', "inventory/test.yaml:3: host name 'pve1\\n' is not a valid host name"),
    ('all:\n  hosts:\n    "edge:22\\n":\n', "inventory/test.yaml:3: host name 'edge:22\\n' is not a valid host name"),
    ('all:\n  hosts:\n    a: {ansible_user: "root\\n"}\n', "inventory/test.yaml:3: ansible_user must be a user name"),
    ('all:\n  hosts:\n    a: {lxcfix_containers: ["200\\n"]}\n',
     "inventory/test.yaml:3: lxcfix_containers: '200\\n' is not a Proxmox vmid"),
    ('all:\n  hosts:\n    a: {ansible_connection: [ssh]}\n',
     "inventory/test.yaml:3: ansible_connection must be ssh or local, got ['ssh']"),
])
def test_trailing_newlines_and_unhashable_values_are_bad_input(text, expected):
    assert error(text).startswith(expected), error(text)


def test_oversized_inventory_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(17 * 2**20)  # sparse: costs no disk
    with pytest.raises(BadInput, match=r"^.*big.yaml: inventory is bigger than 16 MiB$"):
        load_file(str(big))
    with pytest.raises(BadInput, match=r"^x.yaml: inventory is bigger than 16 MiB$"):
        load("#" * (16 * 2**20 + 1), "x.yaml")
    with pytest.raises(BadInput, match=r"^x.json: inventory is bigger than 16 MiB$"):
        load_json(" " * (16 * 2**20 + 1), "x.json")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_as_inventory_is_read_bounded():
    with pytest.raises(BadInput, match=r"^/dev/zero: inventory is bigger than 16 MiB$"):
        load_file("/dev/zero")


# ----------------------------------------------------------------- JSON (ansible-inventory --list)


def strip_source(h) -> dict:
    d = dataclasses.asdict(h)
    del d["source"]
    return d


def assert_same_inventory(a, b):
    assert [h.name for h in a.hosts] == [h.name for h in b.hosts]
    assert dict(a.groups) == dict(b.groups)
    for x, y in zip(a.hosts, b.hosts):
        assert strip_source(x) == strip_source(y), x.name


@pytest.mark.parametrize("fixture", ["list.json", "export.json"])
def test_ansible_inventory_json_fixtures_match_their_yaml(fixture):
    yaml_inv = load_file(str(FIXTURES / "source.yaml"))
    json_inv = load_json((FIXTURES / fixture).read_text(), fixture)
    assert_same_inventory(yaml_inv, json_inv)
    by = {h.name: h for h in json_inv.hosts}
    assert by["pve3"].user == "from_zeta"  # same-depth groups in name order
    assert by["pve2"].user == "gpuadmin" and by["pve2"].containers == ("300", "301")
    assert by["pve2"].ct_ssh == {"300": CtAddress("10.20.5.30", "root", 22)}
    assert by["pve-edge"].port == 2222 and by["pve-edge"].pve_node == "edge" and by["pve1"].pve_node == "fra"
    assert by["pve-gpu1"].port == 2201 and by["pve1"].known_hosts_from_inventory
    assert by["solo"].backend == "lxc" and by["solo"].groups == ("all",)  # `ungrouped` is `all`
    assert by["lxc1"].lxc_path == "/srv/lxc" and by["lxc1"].connection == "local"
    assert by["solo"].source == f"{fixture}: ungrouped.hosts[0]"
    assert "ungrouped" not in json_inv.groups


def test_script_style_json():
    i = load_json((FIXTURES / "script.json").read_text(), "script.json")
    by = {h.name: h for h in i.hosts}
    assert list(by) == ["web1", "web2", "pve1", "pve2", "lonely"]
    assert (by["pve1"].address, by["pve1"].port, by["pve1"].user, by["pve1"].backend) == ("10.0.0.11", 2222, "ops", "pve")
    assert by["pve2"].user == "admin" and by["pve2"].backend == "pve"  # host vars win over group vars
    assert by["pve2"].groups == ("all", "proxmox", "proxmox_tag_gpu.a100")
    assert by["web2"].groups == ("all", "tag_c++", "webservers")
    assert by["lonely"].connection == "local" and by["lonely"].groups == ("all",)
    assert i.groups["proxmox"] == ("pve1", "pve2") and i.groups["empty_child"] == ()
    assert i.groups["all"] == ("web1", "web2", "pve1", "pve2", "lonely")
    assert by["pve2"].source == "script.json: ['proxmox_tag_gpu.a100'].hosts[0]"
    assert [h.name for h in i.select(["proxmox_tag_gpu.a100", "lonely"])] == ["pve2", "lonely"]


def test_json_precedence_host_over_child_over_parent_over_all():
    doc = {
        "_meta": {"hostvars": {"h1": {"ansible_port": 1004}}},
        "all": {"children": ["parent"], "vars": {"ansible_port": 1001, "ansible_user": "from_all",
                                                 "lxcfix_backend": "lxc"}},
        "parent": {"children": ["child"], "vars": {"ansible_port": 1002, "lxcfix_backend": "pve"}},
        "child": {"hosts": ["h1", "h2"], "vars": {"ansible_port": 1003}},
    }
    by = {h.name: h for h in load_json(json.dumps(doc), "p.json").hosts}
    assert (by["h1"].port, by["h2"].port, by["h1"].backend, by["h1"].user) == (1004, 1003, "pve", "from_all")


def test_json_paths_are_taken_as_written():
    doc = {"all": {"hosts": ["a"]},
           "_meta": {"hostvars": {"a": {"ansible_ssh_private_key_file": "keys/id", "lxcfix_known_hosts": "kh"}}}}
    (h,) = load_json(json.dumps(doc), "inventory/x.json").hosts
    assert (h.key_file, h.known_hosts, h.known_hosts_from_inventory) == ("keys/id", "kh", True)


def jerror(doc) -> str:
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=1)
    with pytest.raises(BadInput) as e:
        load_json(text, "inv.json")
    msg = str(e.value)
    assert "\n" not in msg
    return msg


ONE = {"all": {"hosts": ["a"]}}


@pytest.mark.parametrize("doc, expected", [
    ({**ONE, "_meta": {"hostvars": {"a": {"ansible_port": "abc"}}}},
     "inv.json: _meta.hostvars.a: ansible_port must be an integer, got 'abc'"),
    ({**ONE, "_meta": {"hostvars": {"a": {"ansible_port": "²"}}}},
     "inv.json: _meta.hostvars.a: ansible_port must be an integer, got '²'"),
    ({"all": {"children": ["gpu"]}, "gpu": {"hosts": ["a"], "vars": {"lxcfix_backend": "docker"}}},
     "inv.json: gpu.vars: lxcfix_backend must be auto, pve or lxc, got 'docker'"),
    ({**ONE, "_meta": {"hostvars": {"a": {"lxcfix_contaners": [1]}}}},
     "inv.json: _meta.hostvars.a: unknown key lxcfix_contaners (did you mean lxcfix_containers?)"),
    ({**ONE, "_meta": {"hostvars": {"a": {"lxcfix_container_access": "ssh"}}}},
     "inv.json: _meta.hostvars.a: host a: lxcfix_container_access is ssh but lxcfix_ct_ssh gives no addresses"),
    ({**ONE, "_meta": {"hostvars": {"a": {"bad-name": 1}}}},
     "inv.json: _meta.hostvars.a: vars of host 'a': 'bad-name' is not a valid variable name"),
    ({**ONE, "_meta": {"hostvars": {"a": [1]}}},
     "inv.json: _meta.hostvars.a: vars of host 'a' must be an object of name: value, got a list"),
    ({**ONE, "_meta": {"hostvars": {"web;reboot": {}}}},
     "inv.json: _meta.hostvars['web;reboot']: host name 'web;reboot' is not a valid host name"),
    ({**ONE, "_meta": []}, "inv.json: _meta: _meta must be an object with hostvars"),
    ({"web": {"hosts": ["ok", "-oProxyCommand=x"]}},
     "inv.json: web.hosts[1]: host name '-oProxyCommand=x' is not a valid host name"),
    ({"web": {"hots": ["a"]}},
     "inv.json: web.hots: unknown key 'hots' in group 'web': a group has hosts, vars and children "
     "(did you mean 'hosts'?)"),
    ({"web": "a"}, "inv.json: web: group 'web' must be an object with hosts/vars/children, got 'a'"),
    ({"web": {"hosts": {"a": {}}}}, "inv.json: web.hosts: hosts of group 'web' must be a list of host names, got an object"),
    ({"web": {"hosts": ["a"], "vars": ["x"]}}, "inv.json: web.vars: vars of group 'web' must be an object of name: value"),
    ({"web": {"hosts": ["a"], "children": "db"}}, "inv.json: web.children: children of group 'web' must be a list"),
    ({"web": {"hosts": ["a"], "children": ["all"]}}, "inv.json: web.children[0]: `all` cannot be a child group"),
    ({"bad group": {"hosts": ["a"]}}, "inv.json: ['bad group']: group name 'bad group' is not valid"),
    ({**ONE, "a": {"children": ["b"]}, "b": {"children": ["a"]}},
     "inv.json: a: group 'a' is its own ancestor (a -> b -> a)"),
    ({"all": {"children": ["web"]}}, "inv.json:1: inventory has no hosts"),
    ([1, 2], "inv.json:1: inventory must be a JSON object of groups"),
    ('{\n "all": {\n  "hosts": [,]\n }\n}', "inv.json:3: JSON syntax error: Expecting value (column 13)"),
    ('{\n "all": {"hosts": ["a"]},\n "_meta": {"hostvars": {"a": {"ansible_port": ' + "1" * 5000 + "}}}\n}",
     "inv.json:3: number has more than 64 characters"),
])
def test_json_errors_name_the_file_and_place(doc, expected):
    assert jerror(doc).startswith(expected), jerror(doc)


def test_json_nested_100000_deep():
    n = 100_000
    assert jerror('{"all": ' + '{"children": [' * n + "]}" * n + "}") == "inv.json:1: inventory is nested too deep to read"


def test_json_groups_chained_more_than_64_deep():
    doc = {"all": {"hosts": ["h"], "children": ["g0"]}, **{f"g{i}": {"children": [f"g{i + 1}"]} for i in range(10_000)}}
    t = time.monotonic()
    assert jerror(doc) == "inv.json: g63.children[0]: group 'g64' is nested more than 64 levels deep"
    assert time.monotonic() - t < 5


def test_json_a_hundred_levels_of_children_lists_is_fine_as_data():
    deep = {"all": {"hosts": ["a"]}, "_meta": {"hostvars": {"a": {"blob": json.loads("[" * 100 + "]" * 100)}}}}
    assert load_json(json.dumps(deep), "x.json").hosts[0].name == "a"


# ----------------------------------------------------------------- load_file: format by content, "-" is stdin


def test_load_file_picks_the_format_by_content(tmp_path):
    j = tmp_path / "inv.yaml"  # the name does not matter
    j.write_text("\ufeff \n  " + (FIXTURES / "export.json").read_text())
    assert [h.name for h in load_file(str(j)).hosts][:2] == ["solo", "pve1"]
    flow = tmp_path / "flow.yaml"  # a YAML flow mapping starts with `{` too
    flow.write_text("{all: {hosts: {a: {ansible_port: 22}}}}\n")
    assert load_file(str(flow)).hosts[0].port == 22
    flow.write_text("{all: {hosts: {a: {ansible_port: x}}}}\n")  # YAML, so YAML's error
    with pytest.raises(BadInput, match=r"flow.yaml:1: ansible_port must be an integer, got 'x'$"):
        load_file(str(flow))
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "all": {"hosts": ["a"]\n')
    with pytest.raises(BadInput, match=r"broken.json:3: JSON syntax error: "):
        load_file(str(broken))


def test_load_file_dash_reads_standard_input(monkeypatch):
    text = (FIXTURES / "list.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    i = load_file("-")
    assert i.filename == "<stdin>" and i.hosts[0].source == "<stdin>: ungrouped.hosts[0]"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"all:\n  hosts:\n    a: {ansible_port: x}\n")))
    with pytest.raises(BadInput, match=r"^<stdin>:3: ansible_port must be an integer"):
        load_file("-")


# ----------------------------------------------------------------- the real ansible-inventory


ANSIBLE_INVENTORY = shutil.which("ansible-inventory")


@pytest.mark.skipif(ANSIBLE_INVENTORY is None,
                    reason="ansible-inventory not on PATH (pip install ansible-core; the test extras include it)")
@pytest.mark.parametrize("export", [False, True], ids=["list", "export"])
def test_real_ansible_inventory_output_loads_like_the_yaml(tmp_path, export):
    src = tmp_path / "inventory.yaml"
    src.write_text((FIXTURES / "source.yaml").read_text()
                   + "    extra:\n      hosts:\n        node[08:10]:\n          ansible_port: 2200\n")
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_NOCOLOR": "1"}
    argv = [ANSIBLE_INVENTORY, "--list", *(["--export"] if export else []), "-i", str(src)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert_same_inventory(load_file(str(src)), load_json(out.stdout, "ansible-inventory"))


@pytest.mark.parametrize("value, expected", [
    ("2001-13-45", "x: invalid YAML value (month must be in 1..12)"),
    ("!!int abc", "x: invalid YAML value (invalid literal for int() with base 10: 'abc')"),
    ("!!int ''", "x: invalid YAML value ("),
    ("!!bool maybe", "x: invalid YAML value ('maybe')"),
    ("!!timestamp x", "x: invalid YAML value ("),
    ("!!float '.'", "x: invalid YAML value ("),
])
def test_values_yaml_cannot_build_are_bad_input(value, expected):
    assert error(f"all:\n  hosts:\n    a:\n      x: {value}\n").startswith(f"inventory/test.yaml:4: {expected}")


def test_unprintable_characters_are_one_line_with_the_line():
    assert error("all:\n  hosts:\n    a\x00:\n") == \
        "inventory/test.yaml:3: YAML error: unacceptable character #x0000: special characters are not allowed"


# ----------------------------------------------------------------- any input: an Inventory or one line of BadInput


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["a", "all", "hosts", "vars", "children", "²", "22"])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["all", "_meta", "hostvars", "hosts", "vars", "children", "ungrouped", "a", "g",
                         "ansible_port", "lxcfix_ct_ssh", "lxcfix_containers"]) | st.text(max_size=6),
        inner, max_size=4),
    max_leaves=20)
YAML_TEXT = st.lists(st.sampled_from(list("{}[]:,-&*!|>?\"'# \n\t0123456789ab²")
                                     + ["all", "hosts", "children", "vars", "ansible_port", "<<", "!!int", "\n  "]),
                     max_size=40).map("".join)


def loads_or_bad_input(fn, text):
    try:
        fn(text, "f")
    except BadInput as e:
        assert "\n" not in str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_any_json_document_is_an_inventory_or_bad_input(doc):
    loads_or_bad_input(load_json, json.dumps(doc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAML_TEXT)
def test_any_yaml_text_is_an_inventory_or_bad_input(text):
    loads_or_bad_input(load, text)
