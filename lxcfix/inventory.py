"""Ansible-style YAML inventories -> the hosts a fleet scan visits. Pure: text in, data out.

    inv = load(text, "inventory/prod.yaml")
    inv.hosts[0] == HostEntry(name="pve1", address="10.0.0.11", port=22, user="root",
                              containers=None, backend="pve", groups=("all", "proxmox", "gpu"), ...)
    inv.select(["gpu"])   -> the HostEntry of every host in group gpu (host names work too)

The format is Ansible's YAML inventory: groups with `hosts`, `vars` and
nested `children`; `all` at the top (other top-level groups are children of
`all`); host ranges like `pve[1:3]` or `node[01:10]`; `name:port` host keys.
Variables merge like Ansible's: `all` < parent group < child group < host
(groups of the same depth in name order), host vars last.

Ansible keys read: ansible_host, ansible_port, ansible_user,
ansible_ssh_private_key_file, ansible_connection (ssh | local) and the old
ansible_ssh_host / ansible_ssh_port / ansible_ssh_user spellings. Other
ansible_* keys are ignored. lxcfix's own keys (inventory/README.md):

    lxcfix_containers            list of vmids / names to scan (default: all)
    lxcfix_backend               auto | pve | lxc (default auto: /etc/pve present -> pve)
    lxcfix_container_access      auto | exec | ssh: how the probe enters containers
    lxcfix_ct_ssh                {ct: "[user@]host[:port]"}: containers reached over their own SSH
    lxcfix_known_hosts           known_hosts file to check (and, with accept-new, extend)
    lxcfix_accept_new_host_keys  true: trust unknown host keys (never changed ones)
    lxcfix_pve_node              this host's Proxmox node name (default: its /etc/hostname)
    lxcfix_lxc_path              plain LXC lxcpath (default /var/lib/lxc)
    lxcfix_pve_dir               Proxmox config filesystem (default /etc/pve)

Every error is a BadInput whose one line names the file and line:
`inventory/prod.yaml:12: ansible_port must be an integer, got 'abc'`.
Every variable is validated where it is written (a bad group var is an error
even when a host overrides it). Names and addresses are checked against
strict patterns, and they only ever travel as argv items.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from .backends import LXC_NAME, VMID
from .errors import BadInput

# ----------------------------------------------------------------- data


@dataclass(frozen=True)
class CtAddress:
    """Where a container's own sshd listens: "root@10.0.0.5:22" -> CtAddress("root", "10.0.0.5", 22)."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port else "")


@dataclass(frozen=True)
class HostEntry:
    """One inventory host, its variables merged and validated."""

    name: str
    address: str | None = None  # ansible_host; None: the name itself (and ~/.ssh/config's HostName)
    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    connection: str = "ssh"  # ssh | local
    containers: tuple[str, ...] | None = None  # None: every container on the host
    backend: str = "auto"  # auto | pve | lxc
    container_access: str = "auto"  # auto | exec | ssh
    ct_ssh: Mapping[str, CtAddress] = field(default_factory=dict)
    known_hosts: str | None = None
    accept_new_host_keys: bool | None = None  # None: not set here (the command line decides)
    pve_node: str | None = None
    lxc_path: str | None = None
    pve_dir: str | None = None
    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # "file:line" where the host is first named

    @property
    def destination(self) -> str:
        """What SSH connects to (and looks up in ssh_config): ansible_host, else the name."""
        return self.address or self.name


@dataclass(frozen=True)
class Inventory:
    filename: str
    hosts: tuple[HostEntry, ...]
    groups: Mapping[str, tuple[str, ...]]  # group -> host names (members of its children included)

    def select(self, patterns: Iterable[str] | None) -> list[HostEntry]:
        """Hosts named, or in the groups named, in inventory order; all when patterns is empty."""
        patterns = list(patterns or [])
        if not patterns:
            return list(self.hosts)
        by_name = {h.name: h for h in self.hosts}
        wanted: set[str] = set()
        for p in patterns:
            if p in by_name:
                wanted.add(p)
            elif p in self.groups:
                wanted.update(self.groups[p])
            else:
                known = sorted(set(by_name) | set(self.groups))
                hint = difflib.get_close_matches(p, known, n=1)
                raise BadInput(f"{self.filename}: no host or group {p!r}"
                               + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        return [h for h in self.hosts if h.name in wanted]


# ----------------------------------------------------------------- patterns

_NAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,251}[A-Za-z0-9_])?$")
_GROUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.\-]+)?$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,31}\$?$")
_PVE_NODE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?$")
_RANGE = re.compile(r"^(.*?)\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\](.*)$")
_HOST_PORT = re.compile(r"^([^:\[\]]+):([0-9]{1,5})$")
_CT_ADDR = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>[^:]*))?$")

GROUP_KEYS = ("hosts", "vars", "children")
CONNECTIONS = {"ssh": "ssh", "paramiko": "ssh", "smart": "ssh", "local": "local"}
LXCFIX_KEYS = (
    "lxcfix_containers", "lxcfix_backend", "lxcfix_container_access", "lxcfix_ct_ssh",
    "lxcfix_known_hosts", "lxcfix_accept_new_host_keys", "lxcfix_pve_node", "lxcfix_lxc_path",
    "lxcfix_pve_dir",
)
_ALIASES = {"ansible_ssh_host": "ansible_host", "ansible_ssh_port": "ansible_port",
            "ansible_ssh_user": "ansible_user", "ansible_private_key_file": "ansible_ssh_private_key_file"}


def valid_address(value: str) -> bool:
    """A DNS name, IPv4 or IPv6 literal: nothing a shell or ssh would read as an option or metacharacter."""
    return bool(_NAME.match(value) or _IPV6.match(value))


# ----------------------------------------------------------------- loading


class _Where:
    def __init__(self, filename: str):
        self.filename = filename

    def err(self, node_or_line, message: str) -> BadInput:
        line = node_or_line if isinstance(node_or_line, int) else node_or_line.start_mark.line + 1
        return BadInput(f"{self.filename}:{line}: {message}")


@dataclass
class _Var:
    value: Any
    line: int


@dataclass
class _Group:
    name: str
    line: int
    vars: dict[str, _Var] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: set[str] = field(default_factory=set)


@dataclass
class _Host:
    name: str
    line: int
    vars: dict[str, _Var] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


def load_file(path: str) -> Inventory:
    """Read and load(); an unreadable file is a BadInput too."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read inventory: {e.strerror or e}") from None
    return load(text, path)


def load(text: str, filename: str = "<inventory>") -> Inventory:
    where = _Where(filename)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        raise BadInput(f"{filename}:{line}: YAML syntax error: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{filename}:1: YAML error: {e}") from None
    if root is None:
        raise BadInput(f"{filename}:1: inventory is empty (expected `all:` with hosts)")
    parser = _Parser(where, posixpath.dirname(filename))
    parser.top(root)
    return parser.finish()


class _Parser:
    def __init__(self, where: _Where, base_dir: str):
        self.w = where
        self.base_dir = base_dir
        self.groups: dict[str, _Group] = {}
        self.hosts: dict[str, _Host] = {}

    # structure

    def top(self, root: yaml.Node) -> None:
        if not isinstance(root, yaml.MappingNode):
            raise self.w.err(root, "inventory must be a mapping of groups (`all:` with `hosts:`, `children:`, `vars:`)")
        self.group_of("all", 1)
        for key, value in self._items(root, "top level"):
            name = key.value
            if name != "all" and name in GROUP_KEYS:
                raise self.w.err(key, f"{name!r} at the top level: put it under `all:` (all: {{{name}: ...}})")
            self._check_group_name(key)
            self.group(name, value, key, parent=None if name == "all" else "all")

    def group_of(self, name: str, line: int) -> _Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = _Group(name, line)
        return g

    def group(self, name: str, node: yaml.Node, key: yaml.Node, parent: str | None,
              chain: tuple[str, ...] = ()) -> None:
        if name in chain:
            raise self.w.err(key, f"group {name!r} is its own ancestor ({' -> '.join(chain + (name,))})")
        g = self.group_of(name, key.start_mark.line + 1)
        if parent is not None:
            g.parents.add(parent)
            if name not in self.groups[parent].children:
                self.groups[parent].children.append(name)
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            raise self.w.err(node, f"group {name!r} must be a mapping with hosts/vars/children, got {_kind(node)}")
        for skey, value in self._items(node, f"group {name!r}"):
            section = skey.value
            if section == "hosts":
                self.group_hosts(g, value)
            elif section == "vars":
                for k, v in self.var_items(value, f"vars of group {name!r}"):
                    g.vars[k] = v
            elif section == "children":
                if _is_null(value):
                    continue
                if not isinstance(value, yaml.MappingNode):
                    raise self.w.err(value, f"children of group {name!r} must be a mapping of groups, got {_kind(value)}")
                for ckey, cvalue in self._items(value, f"children of group {name!r}"):
                    self._check_group_name(ckey)
                    if ckey.value == "all":
                        raise self.w.err(ckey, "`all` cannot be a child group")
                    self.group(ckey.value, cvalue, ckey, parent=name, chain=chain + (name,))
            else:
                hint = difflib.get_close_matches(section, GROUP_KEYS, n=1)
                raise self.w.err(skey, f"unknown key {section!r} in group {name!r}: a group has "
                                      f"hosts, vars and children" + (f" (did you mean {hint[0]!r}?)" if hint else ""))

    def group_hosts(self, g: _Group, node: yaml.Node) -> None:
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            raise self.w.err(node, f"hosts of group {g.name!r} must be a mapping (name: vars or empty), got {_kind(node)}")
        for key, value in self._items(node, f"hosts of group {g.name!r}"):
            pattern = key.value
            port = None
            m = _HOST_PORT.match(pattern)
            if m:
                pattern, port = m.group(1), int(m.group(2))
            try:
                names = expand_range(pattern)
            except ValueError as e:
                raise self.w.err(key, f"host {key.value!r}: {e}") from None
            if not _is_null(value) and not isinstance(value, yaml.MappingNode):
                raise self.w.err(value, f"host {key.value!r}: host vars must be a mapping, got {_kind(value)}")
            host_vars = self.var_items(value, f"vars of host {key.value!r}") if not _is_null(value) else []
            for name in names:
                if not _NAME.match(name):
                    raise self.w.err(key, f"host name {name!r} is not a valid host name "
                                          "(letters, digits, '.', '-', '_')")
                h = self.hosts.get(name)
                if h is None:
                    h = self.hosts[name] = _Host(name, key.start_mark.line + 1)
                if g.name not in h.groups:
                    h.groups.append(g.name)
                if name not in g.hosts:
                    g.hosts.append(name)
                if port is not None:
                    h.vars["ansible_port"] = _Var(port, key.start_mark.line + 1)
                for k, v in host_vars:
                    h.vars[k] = v

    def var_items(self, node: yaml.Node, what: str) -> list[tuple[str, _Var]]:
        if _is_null(node):
            return []
        if not isinstance(node, yaml.MappingNode):
            raise self.w.err(node, f"{what} must be a mapping of name: value, got {_kind(node)}")
        out = []
        for key, value in self._items(node, what):
            name = key.value
            name = _ALIASES.get(name, name)
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise self.w.err(key, f"{what}: {name!r} is not a valid variable name")
            try:
                loader = yaml.SafeLoader("")
                try:
                    data = loader.construct_document(value)
                finally:
                    loader.dispose()
            except yaml.MarkedYAMLError as e:
                raise self.w.err(value, f"{name}: {e.problem}") from None
            line = value.start_mark.line + 1
            out.append((name, _Var(self.check_var(name, data, line, value), line)))
        return out

    def _items(self, node: yaml.MappingNode, what: str):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                raise self.w.err(key, f"{what}: keys must be plain names")
            if key.value in seen:
                raise self.w.err(key, f"{what}: {key.value!r} given twice (first on line {seen[key.value]})")
            seen[key.value] = key.start_mark.line + 1
            yield key, value

    def _check_group_name(self, key: yaml.ScalarNode) -> None:
        if not _GROUP.match(key.value):
            raise self.w.err(key, f"group name {key.value!r} is not valid (letters, digits, '_', '-'; not starting with a digit)")

    # variables

    def check_var(self, name: str, v: Any, line: int, node: yaml.Node) -> Any:
        """Validate one variable where it is written; returns the normalized value."""
        err = lambda msg: self.w.err(line, msg)
        if name == "ansible_host":
            if not isinstance(v, str) or not valid_address(v):
                raise err(f"ansible_host must be a host name or IP address, got {v!r}")
            return v
        if name == "ansible_port":
            return _port(v, name, err)
        if name == "ansible_user":
            if not isinstance(v, str) or not _USER.match(v):
                raise err(f"ansible_user must be a user name, got {v!r}")
            return v
        if name == "ansible_ssh_private_key_file":
            return self._path(v, name, err)
        if name == "ansible_connection":
            if v not in CONNECTIONS:
                raise err(f"ansible_connection must be ssh or local, got {v!r}")
            return CONNECTIONS[v]
        if not name.startswith("lxcfix_"):
            return v
        if name == "lxcfix_containers":
            if v is None or v == "all":
                return None
            if isinstance(v, (str, int)) and not isinstance(v, bool):
                v = [v]
            if not isinstance(v, list):
                raise err(f"lxcfix_containers must be a list of container ids or names, got {v!r}")
            out = []
            for item in v:
                ct = _ct_id(item)
                if ct is None:
                    raise err(f"lxcfix_containers: {item!r} is not a Proxmox vmid or an LXC container name")
                out.append(ct)
            return tuple(dict.fromkeys(out))
        if name == "lxcfix_backend":
            if v not in ("auto", "pve", "lxc"):
                raise err(f"lxcfix_backend must be auto, pve or lxc, got {v!r}")
            return v
        if name == "lxcfix_container_access":
            if v not in ("auto", "exec", "ssh"):
                raise err(f"lxcfix_container_access must be auto, exec or ssh, got {v!r}")
            return v
        if name == "lxcfix_ct_ssh":
            if not isinstance(v, dict):
                raise err(f"lxcfix_ct_ssh must be a mapping of container: \"[user@]host[:port]\", got {v!r}")
            out = {}
            for ct, addr in v.items():
                ct_id = _ct_id(ct)
                if ct_id is None:
                    raise err(f"lxcfix_ct_ssh: {ct!r} is not a Proxmox vmid or an LXC container name")
                out[ct_id] = parse_ct_address(addr, err)
            return out
        if name == "lxcfix_known_hosts":
            return self._path(v, name, err)
        if name == "lxcfix_accept_new_host_keys":
            if not isinstance(v, bool):
                raise err(f"lxcfix_accept_new_host_keys must be true or false, got {v!r}")
            return v
        if name == "lxcfix_pve_node":
            if not isinstance(v, str) or not _PVE_NODE.match(v):
                raise err(f"lxcfix_pve_node must be a Proxmox node name, got {v!r}")
            return v
        if name in ("lxcfix_lxc_path", "lxcfix_pve_dir"):
            if not isinstance(v, str) or not v.startswith("/") or "\n" in v or "\0" in v \
                    or ".." in v.split("/") or len(v) > 4096:
                raise err(f"{name} must be an absolute path, got {v!r}")
            return v.rstrip("/") or "/"
        hint = difflib.get_close_matches(name, LXCFIX_KEYS, n=1)
        raise err(f"unknown key {name}" + (f" (did you mean {hint[0]}?)" if hint else
                                            f"; lxcfix reads {', '.join(LXCFIX_KEYS)}"))

    def _path(self, v: Any, name: str, err) -> str:
        if not isinstance(v, str) or not v or "\n" in v or "\0" in v or len(v) > 4096:
            raise err(f"{name} must be a file path, got {v!r}")
        if v.startswith(("/", "~")) or not self.base_dir:
            return v
        return posixpath.join(self.base_dir, v)  # relative to the inventory file

    # result

    def finish(self) -> Inventory:
        depth = self._depths()
        if not self.hosts:
            raise self.w.err(self.groups["all"].line, "inventory has no hosts")
        for name, h in self.hosts.items():
            if "all" not in h.groups:
                self.groups["all"].hosts.append(name)
        members = self._members()
        entries = []
        for name, h in self.hosts.items():
            groups = set()
            todo = list(h.groups) + ["all"]
            while todo:
                g = todo.pop()
                if g not in groups:
                    groups.add(g)
                    todo.extend(self.groups[g].parents)
            ordered = sorted(groups, key=lambda g: (depth[g], g))
            merged: dict[str, _Var] = {}
            for g in ordered:
                merged.update(self.groups[g].vars)
            merged.update(h.vars)
            entries.append(self._entry(h, ordered, merged))
        return Inventory(self.w.filename, tuple(entries), {g: tuple(ms) for g, ms in members.items()})

    def _depths(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        visiting: list[str] = []

        def d(g: str) -> int:
            if g not in depth:
                if g in visiting:
                    cycle = visiting[visiting.index(g):] + [g]
                    raise self.w.err(self.groups[g].line,
                                     f"group {g!r} is its own ancestor ({' -> '.join(reversed(cycle))})")
                visiting.append(g)
                parents = self.groups[g].parents
                depth[g] = 0 if not parents else 1 + max(d(p) for p in parents)
                visiting.pop()
            return depth[g]

        for g in self.groups:
            d(g)
        return depth

    def _members(self) -> dict[str, list[str]]:
        order = list(self.hosts)
        out: dict[str, list[str]] = {}

        def collect(g: str, seen: set[str]) -> set[str]:
            if g in seen:
                return set()
            seen.add(g)
            hosts = set(self.groups[g].hosts)
            for c in self.groups[g].children:
                hosts |= collect(c, seen)
            return hosts

        for g in self.groups:
            hosts = collect(g, set())
            out[g] = [h for h in order if h in hosts]
        return out

    def _entry(self, h: _Host, groups: list[str], merged: dict[str, _Var]) -> HostEntry:
        v = {k: x.value for k, x in merged.items()}
        line = lambda k: merged[k].line
        backend = v.get("lxcfix_backend", "auto")
        containers = v.get("lxcfix_containers")
        ct_ssh = v.get("lxcfix_ct_ssh") or {}
        if backend in ("pve", "lxc"):
            pattern, what = (VMID, "a Proxmox vmid") if backend == "pve" else (LXC_NAME, "an LXC container name")
            for key in ("lxcfix_containers", "lxcfix_ct_ssh"):
                for ct in (v.get(key) or ()):
                    if not pattern.match(ct):
                        raise self.w.err(line(key), f"{key}: {ct!r} is not {what} (host {h.name} has lxcfix_backend: {backend})")
        access = v.get("lxcfix_container_access", "auto")
        if access == "ssh":
            if not ct_ssh:
                raise self.w.err(line("lxcfix_container_access"),
                                 f"host {h.name}: lxcfix_container_access is ssh but lxcfix_ct_ssh gives no addresses")
            missing = [ct for ct in (containers or ()) if ct not in ct_ssh]
            if missing:
                raise self.w.err(line("lxcfix_container_access"),
                                 f"host {h.name}: lxcfix_container_access is ssh but lxcfix_ct_ssh has no address "
                                 f"for {', '.join(missing)}")
        return HostEntry(
            name=h.name,
            address=v.get("ansible_host"),
            port=v.get("ansible_port"),
            user=v.get("ansible_user"),
            key_file=v.get("ansible_ssh_private_key_file"),
            connection=v.get("ansible_connection", "ssh"),
            containers=containers,
            backend=backend,
            container_access=access,
            ct_ssh=dict(ct_ssh),
            known_hosts=v.get("lxcfix_known_hosts"),
            accept_new_host_keys=v.get("lxcfix_accept_new_host_keys"),
            pve_node=v.get("lxcfix_pve_node"),
            lxc_path=v.get("lxcfix_lxc_path"),
            pve_dir=v.get("lxcfix_pve_dir"),
            groups=tuple(groups),
            vars=v,
            source=f"{self.w.filename}:{h.line}",
        )


# ----------------------------------------------------------------- helpers


def expand_range(pattern: str) -> list[str]:
    """Ansible host ranges: "pve[1:3]" -> pve1 pve2 pve3; "n[01:10:3]" keeps the zero padding; "[a:c]x"."""
    m = _RANGE.match(pattern)
    if not m:
        if "[" in pattern or "]" in pattern:
            raise ValueError("bad host range (use name[1:3], name[01:10] or name[a:c])")
        return [pattern]
    head, start, end, step, tail = m.groups()
    step_n = int(step) if step else 1
    if step_n < 1:
        raise ValueError("range step must be at least 1")
    if start.isdigit() != end.isdigit():
        raise ValueError(f"range [{start}:{end}] mixes digits and letters")
    if start.isdigit():
        lo, hi = int(start), int(end)
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        items = [str(i).zfill(width) for i in range(lo, hi + 1, step_n)]
    else:
        lo, hi = ord(start), ord(end)
        items = [chr(i) for i in range(lo, hi + 1, step_n)]
    if not items:
        raise ValueError(f"range [{start}:{end}] is empty")
    if len(items) > 4096:
        raise ValueError(f"range [{start}:{end}] names more than 4096 hosts")
    return [head + item + rest for item in items for rest in expand_range(tail)]


def parse_ct_address(value: Any, err=None) -> CtAddress:
    """"root@10.0.0.5:22", "10.0.0.5", "ct200.lan:2222", "root@[fe80::5]:22" -> CtAddress."""
    def fail(msg):
        raise (err(msg) if err else BadInput(msg))

    if not isinstance(value, str):
        fail(f"lxcfix_ct_ssh: address must be a string like \"root@10.0.0.5:22\", got {value!r}")
    m = _CT_ADDR.match(value)
    if not m:
        fail(f"lxcfix_ct_ssh: {value!r} is not [user@]host[:port]")
    user, host = m.group("user"), m.group("v6") or m.group("host")
    if user is not None and not _USER.match(user):
        fail(f"lxcfix_ct_ssh: {user!r} in {value!r} is not a user name")
    if not valid_address(host):
        fail(f"lxcfix_ct_ssh: {host!r} in {value!r} is not a host name or IP address")
    port = None
    if m.group("port") is not None:
        port = _port(m.group("port"), f"lxcfix_ct_ssh port in {value!r}", lambda msg: BadInput(msg) if err is None else err(msg))
    return CtAddress(host, user, port)


def _port(v: Any, name: str, err) -> int:
    if isinstance(v, bool):
        raise err(f"{name} must be an integer, got {v!r}")
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if not isinstance(v, int):
        raise err(f"{name} must be an integer, got {v!r}")
    if not 1 <= v <= 65535:
        raise err(f"{name} must be between 1 and 65535, got {v}")
    return v


def _ct_id(item: Any) -> str | None:
    if isinstance(item, bool) or not isinstance(item, (str, int)):
        return None
    s = str(item)
    return s if (VMID.match(s) or (LXC_NAME.match(s) and ".." not in s)) else None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value)
