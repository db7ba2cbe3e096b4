"""Container config files, Proxmox and plain LXC, parsed and written byte-exact.

A config is an ordered list of lines; each keeps its raw bytes, so
`serialize(parse(b)) == b` for every input, whatever its encoding, line
endings or final newline. Edits build new lines and touch only the main
section (before the first `[section]`); snapshot and `[pve:pending]` lines
are never rebuilt.

    cfg = parse(b"arch: amd64\\nlxc.cgroup2.devices.allow: c 195:* rwm\\n[snap]\\n...", "pve")
    cfg.lines[1] == Line(raw=b"lxc.cgroup2.devices.allow: c 195:* rwm\\n", section=None,
                         key="lxc.cgroup2.devices.allow", value="c 195:* rwm")
    cfg.values("lxc.cgroup2.devices.allow") == ["c 195:* rwm"]
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Literal, NamedTuple, Sequence

Flavor = Literal["pve", "lxc"]

# pve-container's own line grammar (PVE::LXC::Config::parse_pct_config):
# raw LXC keys take ':' or '=', Proxmox keys take ':'. (The tests' reference: the parser
# itself splits with partition. `(|.*\S)\s*$`, not `(.*?)\s*$`, which is quadratic on spaces.)
_PVE_LXC = re.compile(r"^(lxc\.[A-Za-z0-9_\-.]+)(?:\s*:|\s*=)\s*(|.*\S)\s*$")
_PVE_KEY = re.compile(r"^([a-z][a-z0-9_\-]*):\s*(|.*\S)\s*$")
_LXC_KEY = re.compile(r"^([A-Za-z0-9_\-.]+)\s*=\s*(|.*\S)\s*$")
# Section headers as pve-container's parse_pct_config reads them (case-insensitive,
# at the start of the line): `[pve:pending]`, or a snapshot name of two or more
# characters. `[x]`, ` [snap]`, `[1a]` or `[a b]` are not sections (just bad lines).
_SECTION = re.compile(r"^\[(pve:pending|[a-z][a-z0-9_\-]+)\][ \t\v\f\r]*$", re.I)
_FIRST_SECTION = re.compile(rb"(?mi)^\[(?:pve:pending|[a-z][a-z0-9_\-]+)\][ \t\v\f\r]*(?:\n|$)")
_SECTION_LINE = re.compile(rb"(?mi)^\[(pve:pending|[a-z][a-z0-9_\-]+)\][ \t\v\f\r]*(?:\n|$)")

MAIN = None  # the section of lines before the first "[name]"


class Line(NamedTuple):
    """One physical line. key is None for blank, comment, section and bad lines.
    (A NamedTuple: scans build hundreds of thousands of them.)"""

    raw: bytes
    section: str | None
    key: str | None = None
    value: str | None = None
    bad: bool = False
    header: str | None = None  # set on "[name]" lines

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "surrogateescape").rstrip("\r\n")

    @property
    def eol(self) -> bytes:
        if self.raw.endswith(b"\r\n"):
            return b"\r\n"
        return b"\n" if self.raw.endswith(b"\n") else b""


class cached:  # noqa: N801  (a decorator, named like functools.cached_property)
    """functools.cached_property without its lock (Python 3.11 takes one per first read: a scan
    makes a few per config): the value is computed on first read and kept in the instance's
    __dict__, which every later read finds first. Pure values only (two threads may both compute)."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class CtConfig:
    """A parsed config. `path` is where it came from (for messages)."""

    flavor: Flavor
    lines: tuple[Line, ...]
    path: str = ""

    @cached
    def raw(self) -> bytes:
        return b"".join(line.raw for line in self.lines)

    @cached
    def digest(self) -> str:
        return digest(self.raw)

    @cached
    def _main(self) -> tuple[tuple[int, Line], ...]:
        out = []
        for i, line in enumerate(self.lines):
            if line.section is not MAIN:
                break
            out.append((i, line))
        return tuple(out)

    @cached
    def _items(self) -> tuple[tuple[str, str], ...]:
        return tuple([(ln.key, ln.value) for _, ln in self._main if ln.key is not None])

    def main(self) -> Iterator[tuple[int, Line]]:
        return iter(self._main)

    def items(self) -> list[tuple[str, str]]:
        """(key, value) of the main section, in order; duplicates kept."""
        return list(self._items)

    def values(self, key: str) -> list[str]:
        return [v for k, v in self._items if k == key]

    @cached
    def _last(self) -> dict[str, str]:
        return dict(self._items)

    def get(self, key: str) -> str | None:
        """The last value of `key` in the main section (what Proxmox reads)."""
        return self._last.get(key)

    def keys(self):
        """The keys of the main section (each once)."""
        return self._last.keys()

    @property
    def has_sections(self) -> bool:
        """Whether anything follows the main section (snapshots, [pve:pending])."""
        return len(self._main) < len(self.lines)

    def bad_lines(self) -> list[tuple[int, str]]:
        """(1-based line number, text) of main-section lines that do not parse."""
        return [(i + 1, ln.text) for i, ln in self.main() if ln.bad]

    def sections(self) -> list[str]:
        """Names of the `[section]`s (snapshots, pve:pending), in order."""
        rest = b"".join(ln.raw for ln in self.lines if ln.section is not MAIN)
        return [m.group(1).decode("utf-8", "surrogateescape") for m in _SECTION_LINE.finditer(rest)]

    @property
    def newline(self) -> bytes:
        """The file's own line ending, for lines we add."""
        return _newline_of(self.lines)


def digest(raw: bytes) -> str:
    return hashlib.sha1(raw).hexdigest()


def split_lines(raw: bytes) -> list[bytes]:
    """Split keeping each line's ending; the last may have none."""
    out = raw.splitlines(keepends=True)
    if b"\r" not in raw:  # bytes split on \n, \r and \r\n alone: without \r, that is LXC's split
        return out
    # bytes.splitlines also splits on \r alone, \x0b, \x0c, \x1c..\x1e: rejoin
    # those, since LXC and Proxmox split on \n only.
    lines: list[bytes] = []
    buf = b""
    for piece in out:
        buf += piece
        if buf.endswith(b"\n"):
            lines.append(buf)
            buf = b""
    if buf:
        lines.append(buf)
    return lines


_PVE_KEY_NAME = re.compile(r"[a-z][a-z0-9_\-]*")
_LXC_KEY_NAME = re.compile(r"lxc\.[A-Za-z0-9_\-.]+")
_ANY_KEY_NAME = re.compile(r"[A-Za-z0-9_\-.]+")


def _split_key(text: str, flavor: Flavor) -> tuple[str, str] | None:
    """key and value of a stripped line, by the grammar of _PVE_LXC/_PVE_KEY/_LXC_KEY
    (a partition and a short match instead of a whole-line regex: scans read 10^5 lines)."""
    if flavor == "pve":
        if text.startswith("lxc."):
            colon, equals = text.find(":"), text.find("=")
            cut = min(i for i in (colon, equals) if i >= 0) if max(colon, equals) >= 0 else -1
            key = text[:cut].rstrip() if cut >= 0 else ""
            if cut >= 0 and _LXC_KEY_NAME.fullmatch(key):
                return key, text[cut + 1:].strip()
        key, sep, value = text.partition(":")
        if sep and _PVE_KEY_NAME.fullmatch(key):
            return key, value.strip()
        return None
    key, sep, value = text.partition("=")
    key = key.rstrip()
    if sep and _ANY_KEY_NAME.fullmatch(key):
        return key, value.strip()
    return None


def parse_line(raw: bytes, section: str | None, flavor: Flavor) -> Line:
    """One line (a Line is immutable, so equal bytes share one: the configs of a host repeat
    most of their lines, `arch: amd64`, the GPU's rule and mount lines); only short lines
    are kept, so a hostile file cannot fill the table with big ones."""
    return (_parse_line if len(raw) <= _SHARED_LINE else _read_line)(raw, section, flavor)


_SHARED_LINE = 256


def _read_line(raw: bytes, section: str | None, flavor: Flavor) -> Line:
    head = raw.lstrip()[:1]
    if not head or head == b"#":  # blank or comment: the common cheap case
        return Line(raw, section)
    stripped = raw.decode("utf-8", "surrogateescape").strip()
    if flavor == "pve" and raw[:1] == b"[":
        m = _SECTION.match(raw.decode("utf-8", "surrogateescape").rstrip("\n"))
        if m:
            return Line(raw, m.group(1), header=m.group(1))
    kv = _split_key(stripped, flavor)
    if kv is None:
        return Line(raw, section, bad=True)
    return Line(raw, section, key=kv[0], value=kv[1])


_parse_line = functools.lru_cache(maxsize=8192)(_read_line)


def parse(raw: bytes, flavor: Flavor, path: str = "") -> CtConfig:
    """Never raises: lines it cannot read are kept, marked bad. Proxmox files:
    everything from the first `[section]` on is one line, kept byte for byte and
    never read or edited (snapshots and pending changes)."""
    lines: list[Line] = []
    tail = b""
    if flavor == "pve":
        m = _FIRST_SECTION.search(raw)
        if m:
            raw, tail = raw[:m.start()], raw[m.start():]
    for chunk in split_lines(raw):
        lines.append((_parse_line if len(chunk) <= _SHARED_LINE else _read_line)(chunk, MAIN, flavor))
    if tail:
        first = tail.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        header = _SECTION.match(first)
        name = header.group(1) if header else first.strip()
        lines.append(Line(tail, name, header=name))
    return CtConfig(flavor, tuple(lines), path)


def sections_tail(raw: bytes, flavor: Flavor) -> bytes:
    """Everything from the first `[section]` on (snapshots, pending changes),
    which no edit may touch; b"" for plain LXC configs, which have none."""
    if flavor != "pve":
        return b""
    m = _FIRST_SECTION.search(raw)
    return raw[m.start():] if m else b""


def section_body(cfg: CtConfig, name: str) -> bytes | None:
    """The lines of section `[name]` (after its header, up to the next section), read
    only: `section_body(cfg, "pve:pending")` is what `pct pending` shows. None when the
    config has no such section. Nothing here edits a section."""
    tail = sections_tail(cfg.raw, cfg.flavor)
    headers = list(_SECTION_LINE.finditer(tail))
    for i, m in enumerate(headers):
        if m.group(1).decode("utf-8", "surrogateescape").lower() == name.lower():
            end = headers[i + 1].start() if i + 1 < len(headers) else len(tail)
            return tail[m.end():end]
    return None


def serialize(cfg: CtConfig) -> bytes:
    return cfg.raw


# ---- edit primitives: each returns a new CtConfig; only the main section moves


def is_devn_key(key: str | None) -> bool:
    """`dev0` .. `dev255`: a Proxmox device passthrough entry (ASCII digits only)."""
    return bool(key) and key.startswith("dev") and _is_devn(key)


@functools.lru_cache(maxsize=1024)  # a host's configs share a few hundred keys
def _is_devn(key: str) -> bool:
    return _DEVN_INDEX.fullmatch(key[3:]) is not None and int(key[3:]) <= 255


_DEVN_INDEX = re.compile(r"0|[1-9][0-9]{0,2}")


def next_devn(cfg: CtConfig) -> int:
    """The first devN index after every one the main section uses."""
    used = [int(k[3:]) for k, _ in cfg._items if k.startswith("dev") and _is_devn(k)]
    return max(used) + 1 if used else 0


def format_line(flavor: Flavor, key: str, value: str, eol: bytes = b"\n", like: Line | None = None) -> bytes:
    """`key: value` (Proxmox) or `key = value` (LXC). like: the line this one
    replaces; a raw `lxc.* = ` line in a Proxmox file keeps its ` = `."""
    sep = ": " if flavor == "pve" else " = "
    if like is not None and flavor == "pve" and key.startswith("lxc.") and like.key and like.key.startswith("lxc.") \
            and _uses_equals(like):
        sep = " = "
    return f"{key}{sep}{value}".encode("utf-8", "surrogateescape") + eol


def _uses_equals(line: Line) -> bool:
    text = line.text.lstrip()
    head = text[len(line.key or ""):]
    return head.lstrip()[:1] == "="


def _new_line(cfg: CtConfig, key: str, value: str, like: Line | None = None) -> Line:
    return parse_line(format_line(cfg.flavor, key, value, cfg.newline, like), MAIN, cfg.flavor)


# The edits below work on a list of lines and its main section's length: apply_groups makes
# every edit of a plan on one list (a config per edit would re-read the whole file each time);
# each public function is one of them on a config.

def _newline_of(lines: Sequence[Line]) -> bytes:
    for line in lines:
        if line.eol:
            return line.eol
    return b"\n"


def _main_len(cfg: CtConfig) -> int:
    return len(cfg._main)


def _insert_in(lines: list[Line], main: int, flavor: Flavor, index: int, entries: Iterable[tuple[str, str]],
               like: Line | None = None) -> int:
    """Insert after lines[index] (-1: at the top); the main section's new length."""
    at = index + 1
    eol = _newline_of(lines)
    if at > 0 and not lines[at - 1].eol:
        # The file had no final newline: the line we append after needs one.
        lines[at - 1] = lines[at - 1]._replace(raw=lines[at - 1].raw + eol)
    new = [parse_line(format_line(flavor, k, v, eol, like), MAIN, flavor) for k, v in entries]
    lines[at:at] = new
    return main + len(new)


def _anchor_in(lines: Sequence[Line], main: int, key: str, near: Iterable[str]) -> int:
    if is_devn_key(key):
        last_devn = last_pve = -1
        for i in range(main):
            k = lines[i].key
            if not k:
                continue
            if k.startswith("dev") and _is_devn(k):
                last_devn = i
            elif not k.startswith("lxc."):
                last_pve = i
        return last_devn if last_devn >= 0 else last_pve
    keys = {key, *near}
    found = end = -1
    for i in range(main):
        line = lines[i]
        if line.key in keys:
            found = i
        if line.raw.strip():
            end = i
    return found if found >= 0 else end


def _remove_in(lines: list[Line], main: int, index: int) -> int:
    line = lines[index]
    if line.section is not MAIN:
        raise ValueError("only main-section lines are edited")
    del lines[index]
    if index == len(lines) and index > 0 and not line.eol and lines[index - 1].eol:
        # Removing a last line that had no newline: keep "no final newline".
        prev = lines[index - 1]
        lines[index - 1] = prev._replace(raw=prev.raw[: -len(prev.eol)])
    return main - 1


def _set_in(lines: list[Line], flavor: Flavor, index: int, key: str, value: str) -> None:
    line = lines[index]
    if line.section is not MAIN:
        raise ValueError("only main-section lines are edited")
    lines[index] = parse_line(format_line(flavor, key, value, line.eol, like=line), MAIN, flavor)


def insert_after(cfg: CtConfig, index: int, entries: Iterable[tuple[str, str]], like: Line | None = None) -> CtConfig:
    """Insert key/value lines after lines[index] (index -1: at the top)."""
    lines = list(cfg.lines)
    _insert_in(lines, _main_len(cfg), cfg.flavor, index, entries, like)
    return replace(cfg, lines=tuple(lines))


def anchor(cfg: CtConfig, key: str, near: Iterable[str] = ()) -> int:
    """Where `add` puts a new `key` line: after the last main-section line of
    `key` or of a key in `near`, else after the last non-blank one (so blank
    lines before a snapshot stay put). A devN entry goes after the last devN
    line, else after the last Proxmox key (raw lxc.* lines come last)."""
    return _anchor_in(cfg.lines, _main_len(cfg), key, near)


def add(cfg: CtConfig, key: str, value: str, near: Iterable[str] = ()) -> CtConfig:
    """Add `key value` where anchor() says."""
    return insert_after(cfg, anchor(cfg, key, near), [(key, value)])


def remove(cfg: CtConfig, index: int) -> CtConfig:
    lines = list(cfg.lines)
    _remove_in(lines, _main_len(cfg), index)
    return replace(cfg, lines=tuple(lines))


def set_value(cfg: CtConfig, index: int, key: str, value: str) -> CtConfig:
    """Replace lines[index] with `key value`, keeping its line ending (and its
    ` = ` when it is a raw lxc.* line of a Proxmox file)."""
    lines = list(cfg.lines)
    _set_in(lines, cfg.flavor, index, key, value)
    return replace(cfg, lines=tuple(lines))


def _add_rank(edit) -> int:
    """Adds go in this order: device rules, then mount entries, then devN entries."""
    key = edit.lines[0][0] if edit.lines else ""
    if key.startswith(("lxc.cgroup2.devices.", "lxc.cgroup.devices.")):
        return 0
    if key == "lxc.mount.entry":
        return 1
    return 2 if is_devn_key(key) else 3


class Applied(NamedTuple):
    """What `apply_groups` made: the new config, and which groups (by position) went in
    and which were left out because an edit of theirs overlaps one made before."""

    config: CtConfig
    applied: tuple[int, ...]
    skipped: tuple[int, ...]


def _check_index(cfg: CtConfig, e) -> None:
    if e.index is None or not 0 <= e.index < len(cfg.lines) or cfg.lines[e.index].section is not MAIN:
        raise ValueError(f"edit of line {e.index}: not a main-section line")


def apply_groups(cfg: CtConfig, groups) -> Applied:
    """Make each group of model.Edit's (one fix's edits) whole or not at all, in order,
    every index being one of `cfg`: ruff's `apply_fixes`. A group with an edit of a line
    that an earlier group (or the group itself) edits differently overlaps it and is left
    out, whole, so no fix is half made; the planner checks the result again, and the fix
    left out comes back, computed on the new config, in the next round. The same edit
    twice counts once (two fixes often need the same rule: nvidia-uvm and nvidia-uvm-tools
    share `c 511:* rwm`); adds never overlap (each goes next to its kind when made).
    An index outside the main section is a ValueError: a bug, not an overlap."""
    at: dict[int, object] = {}
    adds: dict = {}  # ordered, each once
    applied: list[int] = []
    skipped: list[int] = []
    for n, group in enumerate(groups):
        mine: dict[int, object] = {}
        clash = False
        for e in dict.fromkeys(group):
            if e.op == "add":
                continue
            _check_index(cfg, e)
            if at.get(e.index, e) != e or mine.get(e.index, e) != e:
                clash = True
            mine[e.index] = e
        if clash:
            skipped.append(n)
            continue
        at.update(mine)
        adds.update((e, None) for e in group if e.op == "add")
        applied.append(n)
    lines, main, flavor = list(cfg.lines), _main_len(cfg), cfg.flavor
    for index in sorted(at, reverse=True):
        e = at[index]
        if e.op == "remove" or not e.lines:
            main = _remove_in(lines, main, index)
            continue
        like = cfg.lines[index]
        _set_in(lines, flavor, index, *e.lines[0])
        if e.lines[1:]:
            main = _insert_in(lines, main, flavor, index, e.lines[1:], like=like)
    for e in sorted(adds, key=_add_rank):
        for key, value in e.lines:
            main = _insert_in(lines, main, flavor, _anchor_in(lines, main, key, e.near), [(key, value)])
    new = replace(cfg, lines=tuple(lines)) if at or adds else cfg
    return Applied(new, tuple(applied), tuple(skipped))


def apply_edits(cfg: CtConfig, edits) -> CtConfig:
    """The config with these model.Edit's made, every index being one of `cfg`.
    Line edits go bottom up, so the indexes stay valid; then the adds, each next
    to its kind. The same edit twice counts once; of two different edits of one
    line the first is made and the later one skipped (`apply_groups`, each edit
    its own group, says which)."""
    return apply_groups(cfg, [(e,) for e in edits]).config


def describe_edit(cfg: CtConfig, edit) -> list[str]:
    """An edit as a person reads it: `- old line` / `+ new line`, in the file's style."""
    if edit.op == "add":
        return [f"+ {_text(cfg, k, v)}" for k, v in edit.lines]
    old = cfg.lines[edit.index]
    out = [f"- {old.text.strip()}"]
    return out + [f"+ {_text(cfg, k, v, old)}" for k, v in edit.lines]


def _text(cfg: CtConfig, key: str, value: str, like: Line | None = None) -> str:
    return format_line(cfg.flavor, key, value, b"", like).decode("utf-8", "surrogateescape")
