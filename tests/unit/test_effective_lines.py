"""The effective view reads only a config's lxc.* lines (and devN, and the few Proxmox keys
pct's generated lines depend on): other lines interleaved anywhere change nothing in it, and
every origin and line index it gives still names the line it came from."""

from __future__ import annotations

import pytest

from lxcfix import ctconfig
from lxcfix.effective import effective

from .conftest import make_facts, no_includes

PVE_LINES = [
    "arch: amd64",
    "lxc.cgroup2.devices.allow: c 195:* rwm",
    "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    "lxc.idmap: u 0 100000 65536",
    "lxc.cgroup2.devices.allow: c 10:200 rwm",
    "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file",
    "dev0: /dev/dri/renderD128,gid=104",
    "mp0: /srv/media,mp=/media",
]
LXC_LINES = [
    "lxc.uts.name = web",
    "lxc.cgroup2.devices.allow = c 10:200 rwm",
    "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0",
    "lxc.idmap = u 0 100000 65536",
    "lxc.idmap = g 0 100000 65536",
]
# Lines the view never reads: Proxmox's own keys, a comment, an LXC-flavor key that is no lxc.* key.
PVE_INERT = ["hostname: gpu box", "memory: 4096", "net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01",
             "#a comment", "tags: media;gpu", "cores: 4"]
LXC_INERT = ["# a comment", "foo = bar", "hostname = web"]


def _view(lines: list[str], flavor: str):
    path = "/etc/pve/lxc/200.conf" if flavor == "pve" else "/var/lib/lxc/web/config"
    cfg = ctconfig.parse(("\n".join(lines) + "\n").encode(), flavor, path)
    return cfg, effective(cfg, make_facts(backend=flavor), no_includes)


def _shape(cfg, eff) -> dict:
    """The view with each own line number replaced by that line's text: equal for two configs
    that hold the same lines the view reads, wherever the others lie."""
    text = lambda i: cfg.lines[i].text  # noqa: E731
    own = f"{cfg.path.rsplit('/', 1)[-1]}:"
    return {
        "rules": [(verb, v, text(int(o[len(own):]) - 1) if o.startswith(own) else o)
                  for verb, v, o in eff.rule_lines],
        "mounts": [(m.source, m.target, m.options, None if m.index is None else text(m.index)) for m in eff.mounts],
        "own_rules": [(r.key, r.value, text(r.index)) for r in eff.own_rules],
        "idmap": [(v, text(i)) for v, i in eff.idmap],
        "devn": [(d.path, text(d.index)) for d in eff.devn],
        "given": [(g.path, g.target, g.via, text(g.index)) for g in eff.given],
        "unprivileged": eff.unprivileged, "writable": eff.writable, "shared": eff.shared,
        "allows": [eff.ruleset.allows("c", 195, 0), eff.ruleset.allows("c", 10, 200), eff.ruleset.allows("c", 226, 128)],
    }


@pytest.mark.parametrize("flavor,base,inert", [("pve", PVE_LINES, PVE_INERT), ("lxc", LXC_LINES, LXC_INERT)])
@pytest.mark.parametrize("every", [1, 2, 3])
def test_lines_the_view_does_not_read_change_nothing_and_origins_name_their_lines(flavor, base, inert, every):
    cfg0, eff0 = _view(base, flavor)
    mixed: list[str] = []
    for i, line in enumerate(base):
        if i % every == 0:
            mixed += inert
        mixed.append(line)
    mixed += inert
    cfg1, eff1 = _view(mixed, flavor)
    assert _shape(cfg1, eff1) == _shape(cfg0, eff0)
    # each own origin names a line of this config that says what the view says it said
    own = f"{cfg1.path.rsplit('/', 1)[-1]}:"
    for verb, v, o in eff1.rule_lines:
        if o.startswith(own):
            ln = cfg1.lines[int(o[len(own):]) - 1]
            assert ln.key.endswith(verb) and ln.value == v
    for m in eff1.mounts:
        if m.index is not None:
            assert cfg1.lines[m.index].key == "lxc.mount.entry" and m.source in cfg1.lines[m.index].value
    assert eff1.idmap and all(cfg1.lines[i].key == "lxc.idmap" and cfg1.lines[i].value == v for v, i in eff1.idmap)
