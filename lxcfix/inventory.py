"""Ansible inventories (YAML, INI, or the JSON `ansible-inventory --list` prints) -> the hosts a
fleet scan visits. Pure: text in, data out (inventory_io.load_file reads a file or
standard input, bounded, and hands its bytes to load_bytes; an INI file it hands to
`ansible-inventory --list` first, when that is installed).

    inv = load(text, "inventory/prod.yaml")            # or load_json(text, name), load_ini(text, name);
                                                       # load_bytes(data, name) picks (text_format)
    inv.hosts[0] == HostEntry(name="pve1", address="10.0.0.11", port=22, user="root",
                              containers=None, backend="pve", groups=("all", "proxmox", "gpu"), ...)
    inv.select(["gpu"])   -> the HostEntry of every host in group gpu (host names work too)

The YAML format is Ansible's YAML inventory: groups with `hosts`, `vars` and
nested `children`; `all` at the top (other top-level groups are children of
`all`); host ranges like `pve[1:3]` or `node[01:10]`; `name:port` host keys.
Variables merge like Ansible's: `all` < parent group < child group < host
(groups of the same depth in name order), host vars last.

The JSON format is Ansible's dynamic-inventory JSON, so any inventory Ansible
reads (plugins and scripts included) works through `ansible-inventory --list`:

    {"_meta": {"hostvars": {"pve1": {"ansible_host": "10.0.0.11"}}},
     "all": {"children": ["ungrouped", "proxmox"]},
     "proxmox": {"hosts": ["pve1"], "vars": {"lxcfix_backend": "pve"}, "children": []},
     "ungrouped": {"hosts": []}}

`_meta.hostvars` are host vars (ansible-inventory has already merged group
vars into them, unless --export); `ungrouped` holding only hosts means hosts
of `all`, as a YAML host directly under `all`. Host names are taken as written
(no ranges), paths as written (ansible-inventory does not say where a relative
one was relative to).

Ansible keys read: ansible_host, ansible_port, ansible_user,
ansible_ssh_private_key_file, ansible_connection (ssh | local) and the old
ansible_ssh_host / ansible_ssh_port / ansible_ssh_user spellings. Other
ansible_* keys are ignored. lxcfix's own keys (inventory/README.md):

    lxcfix_containers            list of vmids / names to scan (default: all)
    lxcfix_backend               auto | pve | lxc (default auto: /etc/pve present -> pve)
    lxcfix_container_access      auto | exec | ssh: how the probe enters containers
    lxcfix_ct_ssh                {ct: "[user@]host[:port]"}: containers reached over their own SSH
    lxcfix_known_hosts           known_hosts file to check these hosts' keys against (read only)
    lxcfix_accept_new_host_keys  false: check these hosts strictly even with --accept-new-host-keys
                                 (true does not trust new keys: only the command line can)
    lxcfix_pve_node              this host's Proxmox node name (default: its /etc/hostname)
    lxcfix_lxc_path              plain LXC lxcpath (default /var/lib/lxc)
    lxcfix_pve_dir               Proxmox config filesystem (default /etc/pve)
    lxcfix_host_timeout          seconds a fleet change may take on this host (10-86400; default 900)

An inventory never chooses where root writes: lxcfix_known_hosts is a file to
check keys against (HostEntry.known_hosts, with known_hosts_from_inventory
True); accept-new only ever appends to the known_hosts the command line names
(--known-hosts) or to the user's ~/.ssh/known_hosts, never to a file an
inventory names.

The INI format is Ansible's default one, read as ansible-core's ini plugin reads it:

    solo ansible_host=10.0.0.9            # before any section: a host of `all`
    [cluster]                             # a group and its hosts, vars on the host's line
    pve[1:3]
    pve-edge:2222 lxcfix_pve_node=edge
    [cluster:vars]                        # the group's vars, one per line
    lxcfix_containers=[200, "web"]
    [proxmox:children]                    # groups in it (each declared somewhere by [name] or [name:children])
    cluster

Values are Python literals where they parse as one (`22`, `True`, `[200, "web"]`,
`'quoted'`), else the text as written; host lines are split as a shell would
(shlex, `#` comments); lines starting `#` or `;` are comments. Group vars
directories (group_vars/, host_vars/) are not read; `ansible-inventory` reads them.

Every error is a BadInput whose one line names the file and line
(`inventory/prod.yaml:12: ansible_port must be an integer, got 'abc'`); in
JSON, the file and the place (`inv.json: _meta.hostvars.pve1: ...`), or the
line of a syntax error. Every variable is validated where it is written (a bad
group var is an error even when a host overrides it). Names and addresses are
checked against strict patterns, and they only ever travel as argv items.
Hostile input costs bounded work: files over 16 MiB, groups nested over 64
deep, a host pattern naming over 4096 hosts, numbers over 64 characters, and
inventories that expand (ranges x variables, aliases, group members) to over
20 million entries are BadInput, found before the work is done.
"""

from __future__ import annotations

import ast
import difflib
import json
import posixpath
import re
import shlex
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from .model import HOST_PYTHON, LXC_NAME, VMID
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
    known_hosts: str | None = None  # a file to check host keys against: read, never written
    known_hosts_from_inventory: bool = False  # True: known_hosts came from lxcfix_known_hosts
    accept_new_host_keys: bool | None = None  # None: not set here (the command line decides)
    pve_node: str | None = None
    lxc_path: str | None = None
    pve_dir: str | None = None
    host_timeout: float | None = None  # lxcfix_host_timeout: the agent's deadline there (None: the run's)
    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # "file:line" (JSON: "file: place") where the host is first named
    python: str = HOST_PYTHON  # what lxcfix's helpers run with there: remote_python()

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


# ----------------------------------------------------------------- limits and patterns

MAX_INVENTORY_BYTES = 16 * 1024 * 1024
MAX_GROUP_DEPTH = 64  # `all` is depth 0
MAX_RANGE_HOSTS = 4096  # names one host pattern may expand to
MAX_PATTERN_CHARS = 1024
MAX_NUMBER_CHARS = 64  # an integer literal in a variable (ints past 4300 digits make int() raise)
MAX_WORK = 20_000_000  # host names x variables, group members, mapping entries: see _Tree.charge

# fullmatch() everywhere below: `$` alone would also accept a trailing newline
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,251}[A-Za-z0-9_])?")
_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")
# ansible-inventory passes on plugin-made group names (Proxmox tags, pools): '.' and '+' too
_JSON_GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+\-]{0,127}")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.\-]+)?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,31}\$?")
_PVE_NODE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() is True for "²", which int() refuses
_RANGE = re.compile(r"(.*?)\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\](.*)")
_HOST_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])+):([0-9]{1,5})")  # brackets: ranges, pve[1:3]:2222
_CT_ADDR = re.compile(r"(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>[^:]*))?")
_JSON_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")

GROUP_KEYS = ("hosts", "vars", "children")
CONNECTIONS = {"ssh": "ssh", "paramiko": "ssh", "smart": "ssh", "local": "local"}
_ALIASES = {"ansible_ssh_host": "ansible_host", "ansible_ssh_port": "ansible_port",
            "ansible_ssh_user": "ansible_user", "ansible_private_key_file": "ansible_ssh_private_key_file"}
RELATIVE_TO_INVENTORY = ("ansible_ssh_private_key_file", "lxcfix_known_hosts")  # YAML only


def valid_address(value: str) -> bool:
    """A DNS name, IPv4 or IPv6 literal: nothing a shell or ssh would read as an option or metacharacter."""
    # the length check first: _IPV6 backtracks quadratically on a long run of colons
    return len(value) <= 253 and bool(_NAME.fullmatch(value) or _IPV6.fullmatch(value))


# ----------------------------------------------------------------- variables

Err = Callable[[str], BadInput]  # message -> the BadInput naming the file and line
Validator = Callable[[Any, Err], Any]  # (value as written, err) -> normalized value, or raise err(...)


def _either(choices: Iterable[str]) -> str:
    *most, last = choices
    return f"{', '.join(most)} or {last}"


def _one_of(name: str, choices: Mapping[str, str] | tuple[str, ...], shown: tuple[str, ...] | None = None) -> Validator:
    """One of these strings; a mapping also normalizes ("paramiko" -> "ssh")."""
    table = choices if isinstance(choices, Mapping) else {c: c for c in choices}
    message = f"{name} must be {_either(shown or tuple(table))}"

    def check(v: Any, err: Err) -> str:
        if not isinstance(v, str) or v not in table:
            raise err(f"{message}, got {_show(v)}")
        return table[v]
    return check


def _text(name: str, ok: Callable[[str], Any], what: str) -> Validator:
    """A string that ok() accepts."""
    def check(v: Any, err: Err) -> str:
        if not isinstance(v, str) or not ok(v):
            raise err(f"{name} must be {what}, got {_show(v)}")
        return v
    return check


# the strings Ansible's own boolean() reads as true or false: what an INI file's `x=false` is
_BOOLEAN_TEXT = {**dict.fromkeys(("true", "yes", "on", "y", "t", "1"), True),
                 **dict.fromkeys(("false", "no", "off", "n", "f", "0"), False)}


def _boolean(name: str) -> Validator:
    """true, false, or the text of one as Ansible reads it ("false", "no", "off", "0"; any case)."""
    def check(v: Any, err: Err) -> bool:
        if isinstance(v, str) and v.strip().lower() in _BOOLEAN_TEXT:
            return _BOOLEAN_TEXT[v.strip().lower()]
        if not isinstance(v, bool):
            raise err(f"{name} must be true or false, got {_show(v)}")
        return v
    return check


def _file_path(name: str) -> Validator:
    """A file path, only ever a path here: nothing is read. Relative ones are resolved by the reader."""
    def check(v: Any, err: Err) -> str:
        if not isinstance(v, str) or not v or len(v) > 4096 or "\n" in v or "\0" in v:
            raise err(f"{name} must be a file path, got {_show(v)}")
        return v
    return check


def _absolute_dir(name: str) -> Validator:
    """"/srv/lxc/" -> "/srv/lxc"."""
    def check(v: Any, err: Err) -> str:
        if not isinstance(v, str) or len(v) > 4096 or not v.startswith("/") or "\n" in v or "\0" in v \
                or ".." in v.split("/"):
            raise err(f"{name} must be an absolute path, got {_show(v)}")
        return v.rstrip("/") or "/"
    return check


def _port_of(name: str) -> Validator:
    return lambda v, err: _port(v, name, err)


HOST_TIMEOUT = (10, 86400)  # lxcfix_host_timeout and --host-timeout, seconds


def _host_timeout(v: Any, err: Err) -> float:
    lo, hi = HOST_TIMEOUT
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise err(f"lxcfix_host_timeout must be a number of seconds from {lo} to {hi}, got {_show(v)}")
    return float(v)


def _containers(v: Any, err: Err) -> tuple[str, ...] | None:
    """lxcfix_containers: "all" or null -> None; 200 or [200, "web", 200] -> ("200", "web")."""
    if v is None or v == "all":
        return None
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list):
        raise err(f"lxcfix_containers must be a list of container ids or names, got {_show(v)}")
    out = []
    for item in v:
        ct = _ct_id(item)
        if ct is None:
            raise err(f"lxcfix_containers: {_show(item)} is not a Proxmox vmid or an LXC container name")
        out.append(ct)
    return tuple(dict.fromkeys(out))


def _ct_ssh(v: Any, err: Err) -> dict[str, CtAddress]:
    """lxcfix_ct_ssh: {200: "root@10.0.0.5:22"} -> {"200": CtAddress("10.0.0.5", "root", 22)}."""
    if not isinstance(v, dict):
        raise err(f"lxcfix_ct_ssh must be a mapping of container: \"[user@]host[:port]\", got {_show(v)}")
    out = {}
    for ct, addr in v.items():
        ct_id = _ct_id(ct)
        if ct_id is None:
            raise err(f"lxcfix_ct_ssh: {_show(ct)} is not a Proxmox vmid or an LXC container name")
        out[ct_id] = parse_ct_address(addr, err)
    return out


VALIDATORS: dict[str, Validator] = {
    "ansible_host": _text("ansible_host", valid_address, "a host name or IP address"),
    "ansible_port": _port_of("ansible_port"),
    "ansible_user": _text("ansible_user", _USER.fullmatch, "a user name"),
    "ansible_ssh_private_key_file": _file_path("ansible_ssh_private_key_file"),
    "ansible_connection": _one_of("ansible_connection", CONNECTIONS, shown=("ssh", "local")),
    "lxcfix_containers": _containers,
    "lxcfix_backend": _one_of("lxcfix_backend", ("auto", "pve", "lxc")),
    "lxcfix_container_access": _one_of("lxcfix_container_access", ("auto", "exec", "ssh")),
    "lxcfix_ct_ssh": _ct_ssh,
    "lxcfix_known_hosts": _file_path("lxcfix_known_hosts"),
    "lxcfix_accept_new_host_keys": _boolean("lxcfix_accept_new_host_keys"),
    "lxcfix_pve_node": _text("lxcfix_pve_node", _PVE_NODE.fullmatch, "a Proxmox node name"),
    "lxcfix_lxc_path": _absolute_dir("lxcfix_lxc_path"),
    "lxcfix_pve_dir": _absolute_dir("lxcfix_pve_dir"),
    "lxcfix_host_timeout": _host_timeout,
}
LXCFIX_KEYS = tuple(k for k in VALIDATORS if k.startswith("lxcfix_"))
# The Ansible collection's playbook variables (ansible_collections/lxcfix/lxcfix/playbooks): an inventory
# may set them for the collection; the command line accepts them and does not read them.
COLLECTION_KEYS = ("lxcfix_python", "lxcfix_hosts", "lxcfix_style", "lxcfix_live", "lxcfix_serial")


def remote_python(value: Any) -> str:
    """The interpreter lxcfix's helpers (the sweep, the readers, the agent) run with on a host:
    its ansible_python_interpreter when that is an absolute path ("/opt/py/bin/python3.12"),
    else HOST_PYTHON: unset, Ansible's own discovery ("auto", "auto_silent", ...), a template
    ("{{ ... }}") or a bare name, which a remote PATH would decide."""
    if isinstance(value, str) and value.startswith("/") and len(value) <= 4096 \
            and not any(c in value for c in "\n\0{}"):
        return value
    return HOST_PYTHON


def check_var(name: str, value: Any, err: Err) -> Any:
    """Validate one variable where it is written; returns the normalized value.
    Other variables (ansible_python_interpreter, ...) are kept as written and not read;
    an unknown lxcfix_* key is an error, since a typo would otherwise be silently ignored."""
    validator = VALIDATORS.get(name)
    if validator is not None:
        return validator(value, err)
    if not name.startswith("lxcfix_") or name in COLLECTION_KEYS:
        return value
    hint = difflib.get_close_matches(name, LXCFIX_KEYS, n=1)
    raise err(f"unknown key {name}" + (f" (did you mean {hint[0]}?)" if hint else
                                        f"; lxcfix reads {', '.join(LXCFIX_KEYS)}"))


# ----------------------------------------------------------------- loading


def load_bytes(data: bytes, filename: str) -> Inventory:
    """An inventory file's bytes (inventory_io.load_file reads them, or standard input) ->
    Inventory: JSON, YAML or INI as text_format says. Non-UTF-8 or oversized bytes are a
    BadInput too."""
    text = decode(data, filename)
    kind = text_format(text, filename)
    if kind == "ini":
        return load_ini(text, filename)
    if kind == "yaml":
        return load(text, filename)
    try:
        return load_json(text, filename)
    except _SyntaxError as json_error:
        try:  # a YAML flow mapping ({all: {hosts: ...}}) starts with `{` too
            return load(text, filename)
        except _SyntaxError:
            raise json_error from None


def decode(data: bytes, filename: str) -> str:
    """An inventory file's bytes as text (a UTF-8 byte order mark dropped); BadInput when they
    are over MAX_INVENTORY_BYTES or not UTF-8."""
    if len(data) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{filename}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return text.removeprefix("\ufeff")


_INI_SECTION = re.compile(r"\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?")  # ansible-core's ini plugin's
_INI_GROUP_LINE = re.compile(r"([^:\]\s]+)\s*(?:#.*)?")
# a YAML mapping key opening a line: `all:`, `"all":`, `all: {hosts: ...}`; never an INI host line
# (`pve1:2222`, `pve1 ansible_host=...`) nor a section (`[gpu]`)
_YAML_KEY = re.compile(r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s#=:'"\[\]{}][^\s=:]*)[ \t]*:(?:\s|$)""")


def text_format(text: str, filename: str = "") -> str:
    """Which reader an inventory is for: "json" when it starts with `{`; "yaml" for a name
    ending .yaml, .yml or .json, "ini" for one ending .ini; otherwise its first line that is
    not blank or a `#` comment decides: "yaml" for a mapping key (`all:`), `---`, `%YAML`, a
    list item, tag, anchor or quoted text; "ini" for anything else (`[group]`, `; comment`,
    `host var=value`, `host:port`), as Ansible falls back to its ini plugin."""
    if text.lstrip()[:1] == "{":
        return "json"
    suffix = posixpath.splitext(filename)[1].lower()
    if suffix in (".yaml", ".yml", ".json"):
        return "yaml"
    if suffix == ".ini":
        return "ini"
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        start = end + 1
        if not line or line.startswith("#"):
            continue
        if line[0] in "-%!&*|>'\"" or _YAML_KEY.match(line):
            return "yaml"
        return "ini"
    return "yaml"  # nothing but comments: YAML says it is empty


def load(text: str, filename: str = "<inventory>") -> Inventory:
    """An Ansible YAML inventory -> Inventory."""
    if len(text) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    try:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark else 1
            raise _SyntaxError(f"{filename}:{line}: YAML syntax error: {e.problem or e.context}") from None
        except yaml.reader.ReaderError as e:
            line = text.count("\n", 0, e.position) + 1
            char = f"#x{e.character:04x}" if isinstance(e.character, int) else repr(e.character)
            raise _SyntaxError(f"{filename}:{line}: YAML error: unacceptable character {char}: {e.reason}") from None
        except yaml.YAMLError as e:
            raise _SyntaxError(f"{filename}:1: YAML error: {' '.join(str(e).split())}") from None
        if root is None:
            raise BadInput(f"{filename}:1: inventory is empty (expected `all:` with hosts)")
        reader = _YamlReader(_Where(filename), posixpath.dirname(filename))
        reader.top(root)
        return reader.finish()
    except RecursionError:
        raise _too_deep(filename) from None


def load_json(text: str, filename: str = "<inventory>", base_dir: str = "") -> Inventory:
    """What `ansible-inventory --list [--export]` prints (Ansible's dynamic-inventory JSON) -> Inventory,
    validated like load() and with the same precedence; see the module docstring for the shape.
    base_dir: where relative key and known_hosts paths are relative to, when the file the JSON
    was made from is known (`ansible-inventory -i hosts.ini`); "": taken as written."""
    if len(text) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    try:
        try:
            doc = json.loads(text, parse_int=_json_int)
        except json.JSONDecodeError as e:
            raise _SyntaxError(f"{filename}:{e.lineno}: JSON syntax error: {e.msg} (column {e.colno})") from None
        except _LongNumber as e:
            line = text.count("\n", 0, max(text.find(e.digits), 0)) + 1
            raise BadInput(f"{filename}:{line}: number has more than {MAX_NUMBER_CHARS} characters") from None
        reader = _JsonReader(_Where(filename), base_dir)
        reader.top(doc)
        return reader.finish()
    except RecursionError:
        raise _too_deep(filename) from None


def load_ini(text: str, filename: str = "<inventory>") -> Inventory:
    """An Ansible INI inventory -> Inventory (the module docstring shows the format); relative
    key and known_hosts paths are relative to the file's directory, as in YAML."""
    if len(text) > MAX_INVENTORY_BYTES:
        raise _too_big(filename)
    try:
        reader = _IniReader(_Where(filename), posixpath.dirname(filename))
        reader.top(text)
        return reader.finish()
    except RecursionError:
        raise _too_deep(filename) from None


def _too_big(filename: str) -> BadInput:
    return BadInput(f"{filename}: inventory is bigger than {MAX_INVENTORY_BYTES // 2**20} MiB")


def _too_deep(filename: str) -> BadInput:
    return BadInput(f"{filename}:1: inventory is nested too deep to read")


class _SyntaxError(BadInput):
    """Not JSON (load_bytes then tries YAML before reporting it), or not YAML."""


class _LongNumber(ValueError):
    def __init__(self, digits: str):
        self.digits = digits


def _json_int(digits: str) -> int:
    if len(digits) > MAX_NUMBER_CHARS:
        raise _LongNumber(digits)
    return int(digits)


Loc = int | str  # where something is written: a line (YAML) or a place in the JSON document


class _Where:
    def __init__(self, filename: str):
        self.filename = filename

    def at(self, loc: Loc) -> str:
        return f"{self.filename}:{loc}" if isinstance(loc, int) else f"{self.filename}: {loc}"

    def err(self, node_or_loc: yaml.Node | Loc, message: str) -> BadInput:
        loc = node_or_loc.start_mark.line + 1 if isinstance(node_or_loc, yaml.Node) else node_or_loc
        return BadInput(f"{self.at(loc)}: {message}")


@dataclass
class _Var:
    value: Any
    loc: Loc


@dataclass
class _Group:
    name: str
    loc: Loc
    vars: dict[str, _Var] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: set[str] = field(default_factory=set)


@dataclass
class _Host:
    name: str
    loc: Loc
    vars: dict[str, _Var] = field(default_factory=dict)
    groups: dict[str, None] = field(default_factory=dict)  # an ordered set


class _Tree:
    """Groups, hosts and their vars as read, before merging: what both readers build.
    finish() merges them into an Inventory."""

    def __init__(self, where: _Where, base_dir: str):
        self.w = where
        self.base_dir = base_dir
        self.groups: dict[str, _Group] = {}
        self.hosts: dict[str, _Host] = {}
        self.work = 0
        self.group_of("all", 1)

    def charge(self, n: int, loc: Loc) -> None:
        """Count work about to be done; past MAX_WORK the inventory is refused instead.
        Small texts can expand a lot (a range times many vars, YAML aliases and merge keys)."""
        self.work += n
        if self.work > MAX_WORK:
            raise self.w.err(loc, f"inventory expands to more than {MAX_WORK:,} entries "
                                  "(host names x variables, group members); split it")

    def group_of(self, name: str, loc: Loc) -> _Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = _Group(name, loc)
        return g

    def link(self, parent: str, name: str) -> None:
        g = self.groups[name]
        if parent not in g.parents:  # a set: `all` can have a great many children
            g.parents.add(parent)
            self.groups[parent].children.append(name)

    def host_in(self, g: _Group, name: str, loc: Loc) -> _Host:
        if not _NAME.fullmatch(name):
            raise self.w.err(loc, f"host name {_show(name)} is not a valid host name "
                                  "(letters, digits, '.', '-', '_')")
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = _Host(name, loc)
        if g.name not in h.groups:
            h.groups[g.name] = None
            g.hosts.append(name)
        return h

    def var(self, name: str, value: Any, loc: Loc) -> _Var:
        """name already checked and de-aliased; value validated where it is written."""
        self.charge(len(value) if isinstance(value, (list, dict)) else 1, loc)
        value = check_var(name, value, lambda msg: self.w.err(loc, msg))
        if name in RELATIVE_TO_INVENTORY and self.base_dir and not value.startswith(("/", "~")):
            value = posixpath.join(self.base_dir, value)
        return _Var(value, loc)

    # result

    def finish(self) -> Inventory:
        depth = self._depths()
        if not self.hosts:
            raise self.w.err(self.groups["all"].loc, "inventory has no hosts")
        for name, h in self.hosts.items():
            if "all" not in h.groups:
                self.groups["all"].hosts.append(name)
        members = self._members(depth)
        merged_groups: dict[tuple[str, ...], dict[str, _Var]] = {}  # hosts in the same groups share it
        entries = []
        for name, h in self.hosts.items():
            groups = set()
            todo = list(h.groups) + ["all"]
            while todo:
                g = todo.pop()
                if g not in groups:
                    groups.add(g)
                    todo.extend(self.groups[g].parents)
            ordered = tuple(sorted(groups, key=lambda g: (depth[g], g)))
            if ordered not in merged_groups:
                merged = merged_groups[ordered] = {}
                for g in ordered:
                    self.charge(len(self.groups[g].vars), h.loc)
                    merged.update(self.groups[g].vars)
            merged = {**merged_groups[ordered], **h.vars}
            self.charge(len(groups) + len(merged), h.loc)
            entries.append(self._entry(h, list(ordered), merged))
        return Inventory(self.w.filename, tuple(entries), members)

    def _depths(self) -> dict[str, int]:
        """group -> its longest distance from `all`; cycles and nesting past MAX_GROUP_DEPTH are errors."""
        depth: dict[str, int] = {}
        visiting: list[str] = []

        def d(g: str) -> int:
            if g not in depth:
                if g in visiting:
                    cycle = visiting[visiting.index(g):] + [g]
                    raise self.w.err(self.groups[g].loc,
                                     f"group {g!r} is its own ancestor ({' -> '.join(reversed(cycle))})")
                if len(visiting) > MAX_GROUP_DEPTH:  # and so the recursion stays shallow
                    raise self._nested_too_deep(visiting[0])
                visiting.append(g)
                parents = self.groups[g].parents
                depth[g] = 0 if not parents else 1 + max(d(p) for p in parents)
                visiting.pop()
                if depth[g] > MAX_GROUP_DEPTH:
                    raise self._nested_too_deep(g)
            return depth[g]

        for g in self.groups:
            d(g)
        return depth

    def _nested_too_deep(self, g: str) -> BadInput:
        return self.w.err(self.groups[g].loc, f"group {g!r} is nested more than {MAX_GROUP_DEPTH} levels deep")

    def _members(self, depth: dict[str, int]) -> dict[str, tuple[str, ...]]:
        """group -> its hosts and its children's, in inventory order."""
        index = {name: i for i, name in enumerate(self.hosts)}
        members: dict[str, set[str]] = {}
        for g in sorted(self.groups, key=lambda g: -depth[g]):  # a child is deeper than each parent
            hosts = set(self.groups[g].hosts)
            for c in self.groups[g].children:
                self.charge(len(members[c]), self.groups[g].loc)
                hosts |= members[c]
            members[g] = hosts
        return {g: tuple(sorted(members[g], key=index.__getitem__)) for g in self.groups}

    def _entry(self, h: _Host, groups: list[str], merged: dict[str, _Var]) -> HostEntry:
        v = {k: x.value for k, x in merged.items()}
        loc = lambda k: merged[k].loc
        backend = v.get("lxcfix_backend", "auto")
        containers = v.get("lxcfix_containers")
        ct_ssh = v.get("lxcfix_ct_ssh") or {}
        if backend in ("pve", "lxc"):
            pattern, what = (VMID, "a Proxmox vmid") if backend == "pve" else (LXC_NAME, "an LXC container name")
            for key in ("lxcfix_containers", "lxcfix_ct_ssh"):
                self.charge(len(v.get(key) or ()), h.loc)
                for ct in (v.get(key) or ()):
                    if not pattern.fullmatch(ct):
                        raise self.w.err(loc(key), f"{key}: {ct!r} is not {what} (host {h.name} has lxcfix_backend: {backend})")
        access = v.get("lxcfix_container_access", "auto")
        if access == "ssh":
            if not ct_ssh:
                raise self.w.err(loc("lxcfix_container_access"),
                                 f"host {h.name}: lxcfix_container_access is ssh but lxcfix_ct_ssh gives no addresses")
            missing = [ct for ct in (containers or ()) if ct not in ct_ssh]
            if missing:
                more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
                raise self.w.err(loc("lxcfix_container_access"),
                                 f"host {h.name}: lxcfix_container_access is ssh but lxcfix_ct_ssh has no address "
                                 f"for {', '.join(missing[:10])}{more}")
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
            known_hosts_from_inventory="lxcfix_known_hosts" in v,
            accept_new_host_keys=v.get("lxcfix_accept_new_host_keys"),
            pve_node=v.get("lxcfix_pve_node"),
            lxc_path=v.get("lxcfix_lxc_path"),
            pve_dir=v.get("lxcfix_pve_dir"),
            host_timeout=v.get("lxcfix_host_timeout"),
            groups=tuple(groups),
            vars=v,
            source=self.w.at(h.loc),
            python=remote_python(v.get("ansible_python_interpreter")),
        )


class _YamlReader(_Tree):
    def __init__(self, where: _Where, base_dir: str):
        super().__init__(where, base_dir)
        self.values = _ValueLoader(lambda n: self.charge(n, self.value_line))
        self.value_line = 1

    def top(self, root: yaml.Node) -> None:
        if not isinstance(root, yaml.MappingNode):
            raise self.w.err(root, "inventory must be a mapping of groups (`all:` with `hosts:`, `children:`, `vars:`)")
        for key, value in self._items(root, "top level"):
            name = key.value
            if name != "all" and name in GROUP_KEYS:
                raise self.w.err(key, f"{name!r} at the top level: put it under `all:` (all: {{{name}: ...}})")
            self._check_group_name(key)
            self.group(name, value, key, parent=None if name == "all" else "all")

    def group(self, name: str, node: yaml.Node, key: yaml.Node, parent: str | None,
              chain: tuple[str, ...] = ()) -> None:
        if name in chain:
            raise self.w.err(key, f"group {name!r} is its own ancestor ({' -> '.join(chain + (name,))})")
        if len(chain) > MAX_GROUP_DEPTH:
            raise self.w.err(key, f"group {name!r} is nested more than {MAX_GROUP_DEPTH} levels deep")
        g = self.group_of(name, key.start_mark.line + 1)
        if parent is not None:
            self.link(parent, name)
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
                raise self.w.err(skey, _unknown_section(section, name))

    def group_hosts(self, g: _Group, node: yaml.Node) -> None:
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            raise self.w.err(node, f"hosts of group {g.name!r} must be a mapping (name: vars or empty), got {_kind(node)}")
        for key, value in self._items(node, f"hosts of group {g.name!r}"):
            pattern = key.value
            line = key.start_mark.line + 1
            pattern, port = _host_port(pattern)
            try:
                names = expand_range(pattern)
            except ValueError as e:
                raise self.w.err(key, f"host {_show(key.value)}: {e}") from None
            if not _is_null(value) and not isinstance(value, yaml.MappingNode):
                raise self.w.err(value, f"host {_show(key.value)}: host vars must be a mapping, got {_kind(value)}")
            host_vars = self.var_items(value, f"vars of host {_show(key.value)}") if not _is_null(value) else []
            self.charge(len(names) * (1 + len(host_vars)), line)
            for name in names:
                h = self.host_in(g, name, line)
                if port is not None:
                    h.vars["ansible_port"] = _Var(port, line)
                for k, v in host_vars:
                    h.vars[k] = v

    def var_items(self, node: yaml.Node, what: str) -> list[tuple[str, _Var]]:
        if _is_null(node):
            return []
        if not isinstance(node, yaml.MappingNode):
            raise self.w.err(node, f"{what} must be a mapping of name: value, got {_kind(node)}")
        out = []
        for key, value in self._items(node, what):
            name = _ALIASES.get(key.value, key.value)
            if not _VAR_NAME.fullmatch(name):
                raise self.w.err(key, f"{what}: {_show(name)} is not a valid variable name")
            self.value_line = line = value.start_mark.line + 1
            try:
                data = self.values.value(value)
            except yaml.MarkedYAMLError as e:
                raise self.w.err(value, f"{name}: {e.problem}") from None
            except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
                # what PyYAML's constructors raise for `2001-13-45`, `!!int abc`, `!!bool maybe`, ...
                raise self.w.err(value, f"{name}: invalid YAML value ({str(e)[:120]})") from None
            out.append((name, self.var(name, data, line)))
        return out

    def _items(self, node: yaml.MappingNode, what: str) -> Iterator[tuple[yaml.ScalarNode, yaml.Node]]:
        seen: dict[str, int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                raise self.w.err(key, f"{what}: keys must be plain names")
            if key.value in seen:
                raise self.w.err(key, f"{what}: {_show(key.value)} given twice (first on line {seen[key.value]})")
            seen[key.value] = key.start_mark.line + 1
            yield key, value

    def _check_group_name(self, key: yaml.ScalarNode) -> None:
        if not _GROUP.fullmatch(key.value):
            raise self.w.err(key, f"group name {_show(key.value)} is not valid "
                                  "(letters, digits, '_', '-'; not starting with a digit)")


class _ValueLoader(yaml.SafeLoader):
    """Builds the values of variables, one loader per document, so that a value reached
    through many aliases is built once (construct_document would forget it after each value)."""

    def __init__(self, charge: Callable[[int], None]):
        super().__init__("")
        self.charge = charge

    def value(self, node: yaml.Node) -> Any:
        data = self.construct_object(node)
        while self.state_generators:
            generators, self.state_generators = self.state_generators, []
            for generator in generators:
                for _ in generator:
                    pass
        return data

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        super().flatten_mapping(node)
        self.charge(len(node.value))  # merge keys (<<: [*a, *b]) can multiply a mapping at every level

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"number has more than {MAX_NUMBER_CHARS} characters", node.start_mark)
        return self.construct_yaml_int(node)


_ValueLoader.add_constructor("tag:yaml.org,2002:int", _ValueLoader.construct_bounded_int)


class _JsonReader(_Tree):
    """Groups are read from `all` down through `children`, a group's hosts before its children,
    so hosts come in the order the YAML they were made from gives; groups nothing names are
    children of `all`."""

    def top(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            raise self.w.err(1, "inventory must be a JSON object of groups (what `ansible-inventory --list` prints)")
        meta = doc.get("_meta", {})
        if not isinstance(meta, dict) or not isinstance(meta.get("hostvars", {}), dict):
            raise self.w.err("_meta", f"_meta must be an object with hostvars: {{host: {{vars}}}}, "
                                      f"got {_json_kind(meta)}")
        bodies = {name: self._body(name, body) for name, body in doc.items() if name != "_meta"}
        ungrouped = bodies.get("ungrouped")
        self.fold = ungrouped is not None and not ungrouped[1] and not ungrouped[2]
        self.named = {c for _, _, children in bodies.values() for c in children}
        seen: set[str] = set()
        self._walk(["all"] + [n for n in bodies if n != "all" and n not in self.named], bodies, seen)
        self._walk([n for n in bodies if n not in seen], bodies, seen)  # only groups in a cycle are left
        for name, host_vars in meta.get("hostvars", {}).items():
            self._hostvars(name, host_vars)

    def _walk(self, roots: list[str], bodies: dict[str, tuple[list, dict, list]], seen: set[str]) -> None:
        stack = [iter(roots)]  # not recursive: `children` can chain groups any number deep
        while stack:
            name = next(stack[-1], None)
            if name is None:
                stack.pop()
                continue
            if name in seen:
                continue
            seen.add(name)
            hosts, group_vars, children = bodies.get(name, ([], {}, []))
            if self.fold and name == "ungrouped":  # hosts only: hosts of `all`, as under `all:` in YAML
                self._hosts(self.groups["all"], name, hosts)
                continue
            g = self.group_of(name, _jpath(name))
            if name != "all" and name not in self.named:
                self.link("all", name)
            self._hosts(g, name, hosts)
            where = _jpath(name, "vars")
            for k, value in group_vars.items():
                var_name = self._var_name(k, where, f"vars of group {name!r}")
                g.vars[var_name] = self.var(var_name, value, where)
            for i, child in enumerate(children):
                if not (self.fold and child == "ungrouped"):
                    self.group_of(child, _jpath(name, "children", i))
                    self.link(name, child)
            stack.append(iter(children))

    def _hosts(self, g: _Group, name: str, hosts: list[str]) -> None:
        self.charge(len(hosts), _jpath(name, "hosts"))
        for i, host in enumerate(hosts):
            self.host_in(g, host, _jpath(name, "hosts", i))

    def _hostvars(self, name: str, host_vars: Any) -> None:
        where = _jpath("_meta", "hostvars", name)
        h = self.hosts.get(name) or self.host_in(self.groups["all"], name, where)
        if not isinstance(host_vars, dict):
            raise self.w.err(where, f"vars of host {_show(name)} must be an object of name: value, "
                                    f"got {_json_kind(host_vars)}")
        for k, value in host_vars.items():
            var_name = self._var_name(k, where, f"vars of host {_show(name)}")
            h.vars[var_name] = self.var(var_name, value, where)

    def _var_name(self, key: str, where: str, what: str) -> str:
        name = _ALIASES.get(key, key)
        if not _VAR_NAME.fullmatch(name):
            raise self.w.err(where, f"{what}: {_show(name)} is not a valid variable name")
        return name

    def _body(self, name: str, body: Any) -> tuple[list, dict, list]:
        """One group's (hosts, vars, children), checked for shape; a plain list is its hosts."""
        if name != "all":
            self._check_group_name(name, _jpath(name))
        if body is None:
            return [], {}, []
        if isinstance(body, list):
            body = {"hosts": body}
        if not isinstance(body, dict):
            raise self.w.err(_jpath(name), f"group {name!r} must be an object with hosts/vars/children, "
                                           f"got {_json_kind(body)}")
        for key in body:
            if key not in GROUP_KEYS:
                raise self.w.err(_jpath(name, key), _unknown_section(key, name))
        hosts, group_vars, children = body.get("hosts") or [], body.get("vars") or {}, body.get("children") or []
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise self.w.err(_jpath(name, "hosts"), f"hosts of group {name!r} must be a list of host names, "
                                                    f"got {_json_kind(hosts)}")
        if not isinstance(group_vars, dict):
            raise self.w.err(_jpath(name, "vars"), f"vars of group {name!r} must be an object of name: value, "
                                                   f"got {_json_kind(group_vars)}")
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            raise self.w.err(_jpath(name, "children"), f"children of group {name!r} must be a list of group "
                                                       f"names, got {_json_kind(children)}")
        for i, child in enumerate(children):
            if child == "all":
                raise self.w.err(_jpath(name, "children", i), "`all` cannot be a child group")
            self._check_group_name(child, _jpath(name, "children", i))
        return hosts, group_vars, children

    def _check_group_name(self, name: str, where: str) -> None:
        if not _JSON_GROUP.fullmatch(name):
            raise self.w.err(where, f"group name {_show(name)} is not valid (letters, digits, '_', '-', '.', '+')")


class _IniReader(_Tree):
    """Lines in order: sections switch the group and what its lines are (hosts, vars,
    children); hosts before any section are `ungrouped`, which is `all` itself unless it has
    vars or children of its own (as the JSON reader reads ansible-inventory's `ungrouped`).
    A group is declared by [name] or [name:children]; [name:vars] of a group never declared,
    or a child never declared, is an error, as in ansible-core; groups no section names a
    child of are children of `all`."""

    def top(self, text: str) -> None:
        lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
        lines = [(n, line) for n, line in lines if line and line[0] not in "#;"]
        sections = [m.groups() for _, line in lines if (m := _INI_SECTION.fullmatch(line))]
        self.fold = ("ungrouped", "vars") not in sections and ("ungrouped", "children") not in sections
        declared: dict[str, int] = {"all": 1}
        vars_of: dict[str, int] = {}  # group -> the line of its first [group:vars]
        children: list[tuple[str, str, int]] = []  # (parent, child, line)
        group, kind = "ungrouped", "hosts"
        if not self.fold:
            self._group("ungrouped", 1, declared)
        for n, line in lines:
            m = _INI_SECTION.fullmatch(line)
            if m:
                group, kind = m.group(1), m.group(2) or "hosts"
                self._check_group_name(group, n)
                if kind not in ("hosts", "vars", "children"):
                    raise self.w.err(n, f"section [{group}:{kind}]: unknown kind {kind!r} "
                                        f"(use [{group}], [{group}:vars] or [{group}:children])")
                if kind == "vars":
                    vars_of.setdefault(group, n)
                elif not (self.fold and group == "ungrouped"):
                    self._group(group, n, declared)
            elif line.startswith("[") and line.endswith("]"):
                raise self.w.err(n, f"{_show(line)} is not a section header ([group], [group:vars] or "
                                    "[group:children]; no spaces)")
            elif kind == "hosts":
                self._host_line(group, line, n)
            elif kind == "vars":
                name, eq, value = line.partition("=")
                if not eq:
                    raise self.w.err(n, f"expected name=value in [{group}:vars], got {_show(line)}")
                g = self.group_of(group, n)
                var_name = self._var_name(name.strip(), n, f"vars of group {group!r}")
                g.vars[var_name] = self.var(var_name, self._value(value.strip(), var_name, n), n)
            else:
                m = _INI_GROUP_LINE.fullmatch(line)
                if not m:
                    raise self.w.err(n, f"expected a group name in [{group}:children], got {_show(line)}")
                if m.group(1) == "all":
                    raise self.w.err(n, "`all` cannot be a child group")
                self._check_group_name(m.group(1), n)
                children.append((group, m.group(1), n))
        for name, n in vars_of.items():
            if name not in declared and not (self.fold and name == "ungrouped"):
                raise self.w.err(n, f"[{name}:vars] is for a group no [{name}] or [{name}:children] section declares")
        self.charge(len(children), 1)
        for parent, child, n in children:
            if child not in declared:
                raise self.w.err(n, f"[{parent}:children] names group {child!r}, which no [{child}] or "
                                    f"[{child}:children] section declares")
            self.link(parent, child)
        for name in list(self.groups):
            if name != "all" and not self.groups[name].parents:
                self.link("all", name)

    def _group(self, name: str, n: int, declared: dict[str, int]) -> _Group:
        declared.setdefault(name, n)
        return self.group_of(name, n)

    def _host_line(self, group: str, line: str, n: int) -> None:
        """`pve[1:3]:2222 ansible_user=root lxcfix_containers='[200, "web"]'  # comment`."""
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as e:
            raise self.w.err(n, f"host line {_show(line)}: {e}") from None
        if not tokens:
            return
        pattern, port = _host_port(tokens[0])
        try:
            names = expand_range(pattern)
        except ValueError as e:
            raise self.w.err(n, f"host {_show(tokens[0])}: {e}") from None
        host_vars = []
        for token in tokens[1:]:
            name, eq, value = token.partition("=")
            if not eq:
                raise self.w.err(n, f"host {_show(tokens[0])}: expected name=value after the host, got {_show(token)}")
            var_name = self._var_name(name, n, f"vars of host {_show(tokens[0])}")
            host_vars.append((var_name, self.var(var_name, self._value(value, var_name, n), n)))
        self.charge(len(names) * (1 + len(host_vars)), n)
        g = self.groups["all"] if self.fold and group == "ungrouped" else self.group_of(group, n)
        for name in names:
            h = self.host_in(g, name, n)
            if port is not None:
                h.vars["ansible_port"] = _Var(port, n)
            for k, v in host_vars:
                h.vars[k] = v

    def _value(self, text: str, name: str, n: int) -> Any:
        """A Python literal where the text is one ("22", "True", "[200, 'web']", "'x'"), else the
        text itself, as ansible-core's ini plugin reads values; tuples and sets become lists."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ("\d" in a literal: invalid escape sequence)
                value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError):
            return text
        except (RecursionError, MemoryError):
            raise self.w.err(n, f"{name}: value is nested too deep to read") from None
        return _plain(value)

    def _var_name(self, key: str, n: int, what: str) -> str:
        name = _ALIASES.get(key, key)
        if not _VAR_NAME.fullmatch(name):
            raise self.w.err(n, f"{what}: {_show(name)} is not a valid variable name")
        return name

    def _check_group_name(self, name: str, n: int) -> None:
        if not _JSON_GROUP.fullmatch(name):
            raise self.w.err(n, f"group name {_show(name)} is not valid (letters, digits, '_', '-', '.', '+')")



def _host_port(pattern: str) -> tuple[str, int | None]:
    """A host key of a YAML or INI inventory split as Ansible's parse_address (allow_ranges) does:
    `pve[1:3]:2222` -> ("pve[1:3]", 2222), `pve1` -> ("pve1", None)."""
    m = _HOST_PORT.fullmatch(pattern)
    return (m.group(1), int(m.group(2))) if m else (pattern, None)


def _plain(value: Any) -> Any:
    """A literal_eval result as ansible-core keeps it: tuples and sets as lists, bytes as text,
    complex numbers and `...` as the text they were written as."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k) if isinstance(k, bytes) else k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, complex):
        return str(value)
    if value is ...:
        return "..."
    return value


# ----------------------------------------------------------------- helpers


def expand_range(pattern: str) -> list[str]:
    """Ansible host ranges: "pve[1:3]" -> pve1 pve2 pve3; "n[01:10:3]" keeps the zero padding; "[a:c]x".
    Several ranges multiply: "r[a:b]-n[1:2]" -> ra-n1 ra-n2 rb-n1 rb-n2. The names are counted
    before any is built: more than MAX_RANGE_HOSTS is an error."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"host pattern is longer than {MAX_PATTERN_CHARS} characters")
    pieces: list[str] = []  # the text before each range
    spans: list[tuple[range, int]] = []
    count, rest = 1, pattern
    while m := _RANGE.fullmatch(rest):
        head, start, end, step, rest = m.groups()
        span, width, n = _range_span(start, end, step)
        count *= n
        if count > MAX_RANGE_HOSTS:
            raise ValueError(f"its ranges name more than {MAX_RANGE_HOSTS} hosts together")
        pieces.append(head)
        spans.append((span, width))
    if "[" in rest or "]" in rest:
        raise ValueError("bad host range (use name[1:3], name[01:10] or name[a:c])")
    names = [""]
    for head, (span, width) in zip(pieces, spans):
        items = [chr(i) if width < 0 else str(i).zfill(width) for i in span]
        names = [name + head + item for name in names for item in items]
    return [name + rest for name in names]


def _range_span(start: str, end: str, step: str | None) -> tuple[range, int, int]:
    """One bracket: ("01", "10", None) -> (range(1, 11), width 2, 10 names); letters have width -1."""
    if max(len(start), len(end), len(step or "")) > MAX_NUMBER_CHARS:
        raise ValueError(f"range bound with more than {MAX_NUMBER_CHARS} digits")
    step_n = int(step) if step else 1
    if step_n < 1:
        raise ValueError("range step must be at least 1")
    if start.isdigit() != end.isdigit():
        raise ValueError(f"range [{start}:{end}] mixes digits and letters")
    if start.isdigit():
        span = range(int(start), int(end) + 1, step_n)
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
    else:
        span, width = range(ord(start), ord(end) + 1, step_n), -1
    n = max(0, (span.stop - span.start + step_n - 1) // step_n)  # len(span) overflows past sys.maxsize
    if not n:
        raise ValueError(f"range [{start}:{end}] is empty")
    if n > MAX_RANGE_HOSTS:
        raise ValueError(f"range [{start}:{end}] names more than {MAX_RANGE_HOSTS} hosts")
    return span, width, n


def parse_ct_address(value: Any, err: Err | None = None) -> CtAddress:
    """"root@10.0.0.5:22", "10.0.0.5", "ct200.lan:2222", "root@[fe80::5]:22" -> CtAddress."""
    err = err or BadInput

    if not isinstance(value, str):
        raise err(f"lxcfix_ct_ssh: address must be a string like \"root@10.0.0.5:22\", got {_show(value)}")
    m = _CT_ADDR.fullmatch(value) if len(value) <= 512 else None
    if not m:
        raise err(f"lxcfix_ct_ssh: {_show(value)} is not [user@]host[:port]")
    user, host = m.group("user"), m.group("v6") or m.group("host")
    if user is not None and not _USER.fullmatch(user):
        raise err(f"lxcfix_ct_ssh: {user!r} in {value!r} is not a user name")
    if not valid_address(host):
        raise err(f"lxcfix_ct_ssh: {host!r} in {value!r} is not a host name or IP address")
    port = None
    if m.group("port") is not None:
        port = _port(m.group("port"), f"lxcfix_ct_ssh port in {value!r}", err)
    return CtAddress(host, user, port)


def _port(v: Any, name: str, err: Err) -> int:
    """22, "22", " 22 " -> 22. ASCII digits only: "²".isdigit() is True, and int("²") raises."""
    if isinstance(v, str) and _DIGITS.fullmatch(v.strip()):
        digits = v.strip()
        if len(digits) > 10:
            raise err(f"{name} must be between 1 and 65535, got a number of {len(digits)} digits")
        v = int(digits)
    if isinstance(v, bool) or not isinstance(v, int):
        raise err(f"{name} must be an integer, got {_show(v)}")
    if not 1 <= v <= 65535:
        raise err(f"{name} must be between 1 and 65535, got {v}")
    return v


def _ct_id(item: Any) -> str | None:
    if isinstance(item, bool) or not isinstance(item, (str, int)):
        return None
    s = str(item)
    return s if (VMID.fullmatch(s) or (LXC_NAME.fullmatch(s) and ".." not in s)) else None


def _unknown_section(section: str, group: str) -> str:
    hint = difflib.get_close_matches(section, GROUP_KEYS, n=1)
    return (f"unknown key {_show(section)} in group {group!r}: a group has hosts, vars and children"
            + (f" (did you mean {hint[0]!r}?)" if hint else ""))


def _jpath(*keys: str | int) -> str:
    """A place in a JSON document, for messages: ("_meta", "hostvars", "pve1") -> "_meta.hostvars.pve1",
    ("gpu", "hosts", 0) -> "gpu.hosts[0]", ("my group",) -> "['my group']"."""
    out = ""
    for k in keys:
        if isinstance(k, int):
            out += f"[{k}]"
        elif _JSON_KEY.fullmatch(k):
            out += ("." if out else "") + k
        else:
            out += f"[{_show(k)}]"
    return out


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return _show(node.value)


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return _show(value)


def _show(value: Any, room: int = 100) -> str:
    """repr(value), cut to `room` characters, in work bounded by `room`: values in messages
    can be megabytes long, or lists that hold one list a million times over (YAML aliases)."""
    out, used = [], 0
    for piece in _repr_pieces(value, room):
        out.append(piece)
        used += len(piece)
        if used > room:
            return "".join(out)[:room - 3] + "..."
    return "".join(out)


def _repr_pieces(value: Any, room: int) -> Iterator[str]:
    if isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _repr_pieces(k, room)
            yield ": "
            yield from _repr_pieces(v, room)
        yield "}"
    elif isinstance(value, list):
        yield "["
        for i, v in enumerate(value):
            yield ", " if i else ""
            yield from _repr_pieces(v, room)
        yield "]"
    elif isinstance(value, str):
        yield repr(value[:room + 1])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_NUMBER_CHARS:
        yield "<a very long integer>"  # repr() of a big enough int raises
    else:
        yield repr(value)
