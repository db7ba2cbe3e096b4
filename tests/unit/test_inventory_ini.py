"""INI inventories, Ansible's default format: lxcfix's own reader (inventory.load_ini), the
same hosts as the YAML form of the same inventory (a property test), the same through the
real `ansible-inventory` (inventory_io, when it is installed), and bad input as one line."""

from __future__ import annotations

import dataclasses
import io
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lxcfix import inventory_io
from lxcfix.errors import BadInput
from lxcfix.inventory import MAX_INVENTORY_BYTES, load, load_bytes, load_ini, load_json, text_format
from lxcfix.inventory_io import load_file

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "inventory"
BESIDE = Path(sys.executable).parent / "ansible-inventory"  # the test venv's (ansible-core is a test extra)


def ini(text: str, filename: str = "inventory/hosts"):
    return load_ini(textwrap.dedent(text).lstrip("\n"), filename)


def ini_error(text: str, filename: str = "inventory/hosts") -> str:
    with pytest.raises(BadInput) as e:
        ini(text, filename)
    assert "\n" not in str(e.value)
    return str(e.value)


def entries(inv) -> list[dict]:
    """The HostEntry list, each as a dict without `source` (which names the file and line)."""
    out = []
    for h in inv.hosts:
        d = dataclasses.asdict(h)
        del d["source"]
        out.append(d)
    return out


@pytest.fixture
def ansible_on_path(tmp_path, monkeypatch):
    """ansible-inventory first on PATH, its state under tmp_path."""
    if not BESIDE.exists():
        pytest.fail(f"{BESIDE} missing: install the test extras (pip install -e '.[test]')")
    monkeypatch.setenv("PATH", f"{BESIDE.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("ANSIBLE_HOME", str(tmp_path / "ansible-home"))
    monkeypatch.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "ansible-tmp"))
    return BESIDE


@pytest.fixture
def no_ansible(monkeypatch):
    monkeypatch.setattr(inventory_io.shutil, "which", lambda name, *a, **kw: None)


# ----------------------------------------------------------------- the reader


def test_hosts_groups_vars_children_comments():
    i = ini("""
        # a comment
        solo ansible_host=10.0.0.9   # before any section: a host of all
        ; another comment
        [cluster]
        pve[1:3]
        pve-edge:2222 lxcfix_pve_node=edge note="a b"
        [cluster:vars]
        lxcfix_containers=[200, "web"]
        ansible_user = root
        label=not a literal # kept as written
        [proxmox:children]
        cluster   # a child
        [all:vars]
        lxcfix_backend=auto
        ansible_user=nobody
    """)
    by = {h.name: h for h in i.hosts}
    assert list(by) == ["solo", "pve1", "pve2", "pve3", "pve-edge"]
    assert by["solo"].groups == ("all",) and by["solo"].address == "10.0.0.9" and by["solo"].user == "nobody"
    assert by["pve2"].groups == ("all", "proxmox", "cluster") and by["pve2"].containers == ("200", "web")
    assert by["pve2"].user == "root"  # the child group's var over all's
    assert by["pve-edge"].port == 2222 and by["pve-edge"].pve_node == "edge" and by["pve-edge"].vars["note"] == "a b"
    assert by["pve1"].vars["label"] == "not a literal # kept as written"
    assert i.groups["proxmox"] == ("pve1", "pve2", "pve3", "pve-edge") and "ungrouped" not in i.groups
    assert by["pve-edge"].source == "inventory/hosts:6" and by["solo"].source == "inventory/hosts:2"


def test_values_are_python_literals_else_text():
    (h,) = ini("""
        [g]
        h1 n=22 q="'22'" t=True f=False no=None l="[1, 'a']" tup="(1, 2)" s=word d='{300: "x"}' e=...
        [g:vars]
        lxcfix_accept_new_host_keys=False
        hexa=0x10
    """).hosts
    v = h.vars
    assert (v["n"], v["q"], v["t"], v["f"], v["no"], v["l"], v["tup"], v["s"], v["d"], v["e"]) == \
        (22, "22", True, False, None, [1, "a"], [1, 2], "word", {300: "x"}, "...")
    assert h.accept_new_host_keys is False and v["hexa"] == 16


def test_booleans_written_as_ansible_reads_them():
    """In an INI file `x=false` is the text "false" (only `False` is a literal): lxcfix reads it
    as Ansible's boolean() does, as it used to refuse it."""
    a, b, c = ini("""
        [g]
        a lxcfix_accept_new_host_keys=false
        b lxcfix_accept_new_host_keys=yes
        c lxcfix_accept_new_host_keys=False
    """).hosts
    assert (a.accept_new_host_keys, b.accept_new_host_keys, c.accept_new_host_keys) == (False, True, False)
    assert ini_error("[g]\na lxcfix_accept_new_host_keys=maybe\n") == \
        "inventory/hosts:2: lxcfix_accept_new_host_keys must be true or false, got 'maybe'"


def test_ungrouped_with_vars_is_a_group_of_its_own():
    i = ini("""
        solo
        [ungrouped:vars]
        ansible_user=admin
    """)
    assert i.hosts[0].groups == ("all", "ungrouped") and i.hosts[0].user == "admin"
    assert i.groups["ungrouped"] == ("solo",)


def test_children_declared_later_and_relative_paths():
    i = ini("""
        [top:children]
        mid
        [mid:children]
        leaf
        [leaf]
        h1 ansible_ssh_private_key_file=keys/id_ed25519
        [top:vars]
        lxcfix_known_hosts=kh
    """, "site/hosts")
    (h,) = i.hosts
    assert h.groups == ("all", "top", "mid", "leaf")
    assert h.key_file == "site/keys/id_ed25519" and h.known_hosts == "site/kh"  # beside the file, as in YAML


@pytest.mark.parametrize("text, expected", [
    ("[g:vars]\nx=1\n", "inventory/hosts:1: [g:vars] is for a group no [g] or [g:children] section declares"),
    ("[p:children]\nkid\n[p]\nh\n",
     "inventory/hosts:2: [p:children] names group 'kid', which no [kid] or [kid:children] section declares"),
    ("[g]\nh1 oops\n", "inventory/hosts:2: host 'h1': expected name=value after the host, got 'oops'"),
    ("[g]\nh1 x='open\n", "inventory/hosts:2: host line \"h1 x='open\": No closing quotation"),
    ("[a b]\nh\n", "inventory/hosts:1: '[a b]' is not a section header ([group], [group:vars] or "
                   "[group:children]; no spaces)"),
    ("[g:hostz]\n", "inventory/hosts:1: section [g:hostz]: unknown kind 'hostz' (use [g], [g:vars] or [g:children])"),
    ("[g]\nh1\n[g:vars]\nno equals sign\n", "inventory/hosts:4: expected name=value in [g:vars], got 'no equals sign'"),
    ("[g]\nh1\n[p:children]\nall\n", "inventory/hosts:4: `all` cannot be a child group"),
    ("[g]\nh1 ansible_port=abc\n", "inventory/hosts:2: ansible_port must be an integer, got 'abc'"),
    ("[g]\nh1 lxcfix_containerz=[200]\n",
     "inventory/hosts:2: unknown key lxcfix_containerz (did you mean lxcfix_containers?)"),
    ("[g]\nh1;rm\n", "inventory/hosts:2: host name 'h1;rm' is not a valid host name (letters, digits, '.', '-', '_')"),
    ("[g]\npve[3:1]\n", "inventory/hosts:2: host 'pve[3:1]': range [3:1] is empty"),
    ("[g]\nh1 1x=2\n", "inventory/hosts:2: vars of host 'h1': '1x' is not a valid variable name"),
    ("[g]\nh\n[g:children]\ng\n", "inventory/hosts:1: group 'g' is its own ancestor (g -> g)"),
    ("; only comments\n", "inventory/hosts:1: inventory has no hosts"),
    ("[g]\nh x=" + "-" * 100000 + "1\n", "inventory/hosts:2: x: value is nested too deep to read"),
    ("[g]\nh\n[g:vars]\ny=" + "1+" * 100000 + "1\n", "inventory/hosts:4: y: value is nested too deep to read"),
])
def test_bad_input_is_one_line_with_the_line(text, expected):
    assert ini_error(text) == expected


@pytest.mark.parametrize("text, name, expected", [
    ("all:\n  hosts:\n", "hosts", "yaml"),
    ('"all":\n', "hosts", "yaml"),
    ("---\nall:\n", "hosts", "yaml"),
    ("# c\n\nall: {hosts: {a: }}\n", "hosts", "yaml"),
    ("- a\n", "hosts", "yaml"),
    ("[gpu]\npve1\n", "hosts", "ini"),
    ("# c\n; c\npve1\n", "hosts", "ini"),
    ("pve1:2222 ansible_user=root\n", "hosts", "ini"),
    ("pve1 ansible_ssh_common_args='-o Foo: bar'\n", "hosts", "ini"),
    ("[gpu]\npve1\n", "inv.yaml", "yaml"),
    ("all:\n", "inv.ini", "ini"),
    ('  {"all": {}}', "x.ini", "json"),
])
def test_text_format(text, name, expected):
    assert text_format(text, name) == expected


def test_an_ini_file_is_no_longer_a_yaml_syntax_error(tmp_path, no_ansible):
    """It used to be `hosts: YAML syntax error: expected '<document start>'`."""
    f = tmp_path / "hosts"
    f.write_text("[hypervisors]\npve1 ansible_host=10.0.0.11\n")
    (h,) = load_file(str(f)).hosts
    assert h.name == "pve1" and h.address == "10.0.0.11" and h.groups == ("all", "hypervisors")


def test_standard_input_ini(monkeypatch, ansible_on_path):
    """A pipe has no file for ansible-inventory to read: lxcfix's reader reads it."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[g]\npve1 ansible_port=2200\n")))
    (h,) = load_file("-").hosts
    assert h.port == 2200 and h.source == "<stdin>:2"


# ----------------------------------------------------------------- the same inventory as YAML


def test_source_ini_is_source_yaml(no_ansible):
    yaml_inv, ini_inv = load_file(str(FIXTURES / "source.yaml")), load_file(str(FIXTURES / "source.ini"))
    assert entries(ini_inv) == entries(yaml_inv) and dict(ini_inv.groups) == dict(yaml_inv.groups)



def test_a_range_with_a_port_reads_alike_in_yaml_ini_and_ansible(tmp_path, ansible_on_path):
    """`pve[1:2]:2222` is a range of hosts on port 2222 in either format, as ansible-inventory reads
    it (parse_address with ranges for both); YAML refused it as a host named 'pve1:2222'."""
    src = tmp_path / "hosts.yml"
    src.write_text("all:\n  hosts:\n    pve[1:2]:2222:\n      ansible_user: ops\n    solo:\n")
    yaml_inv = load_file(str(src))
    assert [(h.name, h.port, h.user) for h in yaml_inv.hosts] == [("pve1", 2222, "ops"), ("pve2", 2222, "ops"),
                                                                 ("solo", None, None)]
    assert entries(yaml_inv) == entries(ini("pve[1:2]:2222 ansible_user=ops\nsolo\n"))
    listed = subprocess.run([str(ansible_on_path), "-i", str(src), "--list", "--export"], capture_output=True,
                            text=True, check=True).stdout
    assert entries(load_json(listed, str(src))) == entries(yaml_inv)


NAMES = st.sampled_from(["h0", "h1", "h2", "h3", "web-1", "db.lan"])
TEXT = st.text(st.sampled_from(list("ab z#;=:'\"\\[]{},-_/é")), max_size=8)
VALUES = {
    "ansible_user": st.sampled_from(["root", "admin", "ops_1"]),
    "ansible_port": st.integers(1, 65535),
    "lxcfix_containers": st.lists(st.integers(100, 999) | st.sampled_from(["web", "db"]), max_size=3),
    "x_text": TEXT,
    "x_num": st.integers(-10**6, 10**6),
    "x_bool": st.booleans(),
    "x_none": st.none(),
    "x_list": st.lists(st.integers(0, 9) | TEXT, max_size=3),
}
VARS = st.dictionaries(st.sampled_from(sorted(VALUES)), st.none(), max_size=4).flatmap(
    lambda d: st.fixed_dictionaries({k: VALUES[k] for k in d}))
GROUP = st.fixed_dictionaries({"hosts": st.dictionaries(NAMES, VARS, max_size=3), "vars": VARS})


@st.composite
def inventories(draw):
    """{"ungrouped": {host: vars}, "all_vars": {...}, "groups": [(name, parent index or None, group)]}."""
    n = draw(st.integers(0, 4))
    groups = []
    for i in range(n):
        parent = draw(st.none() | st.integers(0, i - 1)) if i else None
        groups.append((f"g{i}", parent, draw(GROUP)))
    return {"ungrouped": draw(st.dictionaries(NAMES, VARS, max_size=3)), "all_vars": draw(VARS), "groups": groups}


def as_yaml(inv) -> str:
    def group(i):
        name, _, g = inv["groups"][i]
        kids = {inv["groups"][j][0]: group(j) for j, (_, p, _) in enumerate(inv["groups"]) if p == i}
        return {"hosts": {h: v or None for h, v in g["hosts"].items()}, "vars": g["vars"], "children": kids}
    roots = {name: group(i) for i, (name, p, _) in enumerate(inv["groups"]) if p is None}
    doc = {"all": {"hosts": {h: v or None for h, v in inv["ungrouped"].items()}, "vars": inv["all_vars"],
                   "children": roots}}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def as_ini(inv) -> str:
    """Sections in the order the YAML reader meets the groups (depth first), so hosts come in
    the same order; vars and children sections after them."""
    def host_line(h, v):
        return " ".join([h] + [shlex.quote(f"{k}={v!r}") for k, v in v.items()])

    order, lines = [], [host_line(h, v) for h, v in inv["ungrouped"].items()]

    def visit(i):
        order.append(i)
        for j, (_, p, _) in enumerate(inv["groups"]):
            if p == i:
                visit(j)
    for i, (_, p, _) in enumerate(inv["groups"]):
        if p is None:
            visit(i)
    for i in order:
        name, _, g = inv["groups"][i]
        lines += [f"[{name}]"] + [host_line(h, v) for h, v in g["hosts"].items()]
    lines += ["[all:vars]"] + [f"{k}={v!r}" for k, v in inv["all_vars"].items()]
    for name, parent, g in inv["groups"]:
        lines += [f"[{name}:vars]"] + [f"{k}={v!r}" for k, v in g["vars"].items()]
        if parent is not None:
            lines += [f"[{inv['groups'][parent][0]}:children]", name]
    return "\n".join(lines) + "\n"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_yaml_and_ini_forms_of_the_same_inventory_give_the_same_hosts(inv):
    try:
        from_yaml = load(as_yaml(inv), "inv/hosts.yaml")
    except BadInput as e:
        with pytest.raises(BadInput):  # no hosts at all: both refuse it
            load_ini(as_ini(inv), "inv/hosts")
        assert "inventory has no hosts" in str(e)
        return
    from_ini = load_ini(as_ini(inv), "inv/hosts")
    assert entries(from_ini) == entries(from_yaml)
    assert dict(from_ini.groups) == dict(from_yaml.groups)


INI_TEXT = st.lists(st.sampled_from(["[g]", "[g:vars]", "[g:children]", "[all:vars]", "[ungrouped]", "h1", "h2:22",
                                     "x=1", "x=[1,", "g", "#c", ";c", "=", "'", '"', " ", "\n", "pve[1:3]", "ansible_port=",
                                     "lxcfix_containers=", "[", "]", "all", "\t", "²"]),
                    max_size=30).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(INI_TEXT)
def test_any_ini_text_is_an_inventory_or_bad_input(text):
    try:
        load_ini(text, "f")
    except BadInput as e:
        assert "\n" not in str(e)


# ----------------------------------------------------------------- through the real ansible-inventory


def test_ansible_inventory_path_gives_the_same_entries(tmp_path, ansible_on_path, monkeypatch):
    src = tmp_path / "hosts"
    src.write_text((FIXTURES / "source.ini").read_text())
    calls = []
    run = inventory_io.run_bounded
    monkeypatch.setattr(inventory_io, "run_bounded", lambda argv, **kw: calls.append(argv) or run(argv, **kw))
    through_ansible = load_file(str(src))
    assert calls == [[str(ansible_on_path), "-i", str(src), "--list", "--export"]]
    assert entries(through_ansible) == entries(load_ini(src.read_text(), str(src)))
    assert entries(through_ansible) == entries(load_file(str(FIXTURES / "source.yaml")))


def test_ansible_inventory_path_reads_group_vars_beside_the_file(tmp_path, ansible_on_path):
    """What only Ansible's own reading gives: group_vars/ next to the inventory."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("lxcfix_containers: [300]\n")
    src = tmp_path / "hosts.ini"
    src.write_text("[gpu]\npve1\n")
    (h,) = load_file(str(src)).hosts
    assert h.containers == ("300",) and h.groups == ("all", "gpu")


@pytest.mark.parametrize("text, expected", [
    # lxcfix's reader names the line where it finds the error too
    ("[g]\nh1 x='open\n", "hosts.ini:2: host line \"h1 x='open\": No closing quotation"),
    ("[g]\nh1 ansible_port=abc\n", "hosts.ini:2: ansible_port must be an integer, got 'abc'"),
    ("[p:children]\nkid\n", "hosts.ini:2: [p:children] names group 'kid', which no [kid] or [kid:children] "
                            "section declares"),
])
def test_ansible_inventory_path_bad_input_is_one_line(tmp_path, ansible_on_path, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    Path("hosts.ini").write_text(text)
    with pytest.raises(BadInput) as e:
        load_file("hosts.ini")
    assert str(e.value) == expected



def test_ansible_inventory_listing_too_much_names_its_command_quoted(tmp_path):
    """Past the cap, the command that listed the file is named as it runs (shlex.join), the
    path with a space in it one word."""
    tool = tmp_path / "ansible-inventory"
    tool.write_text(f"#!/bin/sh\nexec head -c {MAX_INVENTORY_BYTES + 1} /dev/zero\n")
    tool.chmod(0o755)
    src = tmp_path / "my hosts"
    src.write_text("[g]\nh1\n")
    with pytest.raises(BadInput) as e:
        inventory_io.load_ini_with(str(tool), str(src), src.read_text())
    assert f"(as {shlex.join([str(tool), '-i', str(src), '--list', '--export'])} lists it)" in str(e.value)


def test_bad_ini_on_the_command_line_is_one_line_exit_2(tmp_path, ansible_on_path):
    src = tmp_path / "hosts"
    src.write_text("[gpu]\npve1 ansible_port=abc\n")
    r = subprocess.run([sys.executable, "-m", "lxcfix", "scan", "--inventory", str(src), "--json"],
                       capture_output=True, text=True, timeout=120, env=os.environ)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"lxcfix: error: {src}:2: ansible_port must be an integer, got 'abc'\n"
