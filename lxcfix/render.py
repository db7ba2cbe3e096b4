"""Fix lines from jinja2 templates (templates/fix/<style>.j2, or
<profile>.<style>.j2 when a profile needs its own).

    render("numeric", "nvidia-uvm", rules=[RuleGroup("c", 511, 0, True, nodes)], mounts=[])
        == [("lxc.cgroup2.devices.allow", "c 511:* rwm")]

Every rendered allow rule is checked again here: an over-broad rule
(`a`, `*:*`, a block wildcard, a wildcard minor on a shared major) is a bug,
never output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from . import devices, memo


@dataclass(frozen=True)
class RuleGroup:
    """Nodes one rule covers: one major, and one minor unless wildcard."""

    kind: str
    major: int
    minor: int
    wildcard: bool
    nodes: tuple


class RenderError(RuntimeError):
    pass


@memo.once()
def _templates() -> str:
    """Where the templates are: in a source checkout, the top-level templates/
    folder beside this package (an editable install of another checkout would
    otherwise map `lxcfix.templates` to that checkout's folder); else the
    installed `lxcfix.templates` package. A plain path: importlib.resources
    costs start-up time every command pays."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(top, "pyproject.toml")) and os.path.isdir(os.path.join(top, "templates")):
        return os.path.join(top, "templates")
    import importlib.util

    spec = importlib.util.find_spec("lxcfix.templates")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.join(top, "templates")


# The templates of an lxcfix shipped to a host that has none installed (agent.py): set
# before the first render, they are what _read_templates() returns.
SHIPPED: dict[str, str] | None = None

# The one read a pure module makes, declared (tests/unit/purity_guard.py allows exactly this
# function): every template, once, at first use; from then on rendering reads nothing.
READS_AT_FIRST_USE = ("_read_templates",)


@memo.once()
def _read_templates() -> dict[str, str]:
    """{relative name: text} of every template file (not the package's own .py files)."""
    if SHIPPED is not None:
        return dict(SHIPPED)
    root = _templates()
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(files):
            if file.endswith((".py", ".pyc")):
                continue
            path = os.path.join(folder, file)
            try:
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, root).replace(os.sep, "/")] = f.read()
            except (OSError, UnicodeDecodeError):
                continue
    return out


def _load(name: str):
    text = _read_templates().get(name)
    if text is None:
        return None
    return text, None, lambda: True


@memo.once()
def environment():
    import jinja2  # only plans that add lines render: keep it off the start-up path

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def template_text(name: str) -> str:
    found = _load(name)
    if found is None:
        raise RenderError(f"template {name} is missing from the installed package")
    return found[0]


class Mount(NamedTuple):
    """A node to bind-mount: host path, target inside (relative to the rootfs); create: "file"
    for a node, "dir" for a directory of nodes mounted whole (/dev/nvidia-caps)."""

    path: str
    target: str
    create: str = "file"


class Dev(NamedTuple):
    """A devN entry: key ("dev3"), path, options ((name, value), ...)."""

    key: str
    path: str
    options: tuple[tuple[str, str], ...] = ()


def render(style: str, profile: str | None = None, rules: Iterable[RuleGroup] = (),
           mounts: Iterable[Mount] = (), devs: Iterable[Dev] = ()) -> list[tuple[str, str]]:
    """(key, value) lines. Memoized: a fleet's plans repeat the same few fixes."""
    return list(_render(style, profile, tuple(rules), tuple(mounts), tuple(devs)))


@memo.once(maxsize=1024)
def _render(style: str, profile: str | None, rules: tuple, mounts: tuple, devs: tuple) -> tuple[tuple[str, str], ...]:
    env = environment()
    names = ([f"fix/{profile}.{style}.j2"] if profile else []) + [f"fix/{style}.j2"]
    template = env.select_template(names)
    lines = []
    for line in template.render(rules=rules, mounts=mounts, devs=devs).splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(" = ")
        if not sep:
            raise RenderError(f"template {template.name} rendered a line without ' = ': {line!r}")
        if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            why = devices.is_overbroad(devices.parse_rule(value))
            if why:
                raise RenderError(f"refusing to emit {value!r}: {why}")
        lines.append((key.strip(), value.strip()))
    return tuple(lines)
