"""Inventory parsing: groups, precedence, ranges, lxcfix keys, and every error with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lxcfix.errors import BadInput
from lxcfix.inventory import CtAddress, expand_range, load, load_file, parse_ct_address

REPO = Path(__file__).resolve().parents[2]


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
