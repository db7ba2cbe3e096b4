"""Who inside may open a device node: the fixes for LXF201 (EACCES: the node's
owner, group or mode, or the idmap, keeps the container's users out).

    group_access_fix(ctx, "/dev/dri/renderD128", gid=105)
        -> Fix("give the node a mode or group ...",
               edits=(Edit("replace", 3, (("dev0", "/dev/dri/renderD128,gid=105"),)),), applicability="manual")

On Proxmox VE 8.1+ the fix is devN's gid= (Proxmox creates the node with that
group inside); before that, and for plain LXC, an idmap that maps the host's
group onto the container's. The gid is the container's own (its /etc/group,
read by the probe); unknown, the fix says how to read it. Manual: only the
admin knows which group the service user is in.
"""

from __future__ import annotations

from .. import fixes
from ..ctconfig import next_devn
from ..facts import version_tuple
from ..model import Edit, Fix

TITLE = ("give the node a mode or group the container can use (devN: ...,gid=N,mode=0660 "
         "or 0666), or map the host group in with lxc.idmap")


def given_at(ctx, path: str):
    """The given device a finding names: by host path, or by where it appears inside."""
    for g in ctx.effective.given:
        if g.path == path or "/" + g.target.lstrip("/") == path:
            return g
    return None


def group_access_fix(ctx, device: str, gid: int | None, title: str = TITLE) -> Fix:
    g = given_at(ctx, device)
    host_path = g.path if g is not None else device
    group = fixes.group_for(device)
    gid_text = str(gid) if gid is not None else f"<gid of group '{group or 'the device group'}' in CT {ctx.ct}>"
    notes: list[str] = []
    if gid is None and group:
        notes.append(f"# {gid_text}: {fixes.exec_prefix(ctx.ct, ctx.config.flavor)} getent group {group}   "
                     "(the third field)")
    pve_version = ctx.facts.pve_version
    if ctx.config.flavor == "pve" and (not pve_version or version_tuple(pve_version) >= (8, 1)):
        edits = _devn_gid(ctx, g, host_path, gid_text, notes)
    else:
        host_node = ctx.facts.nodes.get(host_path)
        old, lines = fixes.idmap_lines(ctx.config, gid, host_node.gid if host_node is not None else None)
        if gid is None:
            notes.append(f"# C = gid of group '{group}' in CT {ctx.ct}")
        host = str(host_node.gid) if host_node is not None else "H"
        notes.append(f"# let root map the host group: echo 'root:{host}:1' >> /etc/subgid")
        edits = [Edit("remove", i) for i in old] + [Edit("add", lines=(line,)) for line in lines]
    return Fix(title, tuple(edits), "manual", notes=tuple(notes))


def _devn_gid(ctx, g, host_path: str, gid_text: str, notes: list[str]) -> list[Edit]:
    if g is not None and g.via == "devn":
        d = next(d for d in ctx.effective.devn if d.index == g.index)
        return [fixes.devn_with_gid(ctx.config, d, gid_text)]
    edits = []
    if g is not None and g.via == "mount" and g.from_dir is None:
        edits.append(Edit("remove", g.index))
    edits.append(Edit("add", lines=((f"dev{next_devn(ctx.config)}", f"{host_path},gid={gid_text}"),)))
    if g is not None and g.from_dir is not None:
        notes.append(f"# {g.from_dir} is mounted whole: the devN entry adds {host_path} with the right group "
                     "(keep the directory mount only if other nodes in it are needed)")
    return edits
