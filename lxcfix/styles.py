"""Which fix style a container gets (`--style auto|devn|path|numeric`). Pure.

    choose_style("auto", "pve", facts)   -> ("devn", "Proxmox VE 8.3.0 supports devN entries (8.1+): ...")
    choose_style("path", "lxc", facts)   -> ("path", "--style path was asked for")
"""

from __future__ import annotations

import functools

from .errors import BadInput
from .facts import version_tuple
from .model import HostFacts

STYLES = ("auto", "devn", "path", "numeric")


def pve_has_devn(pve_version: str | None) -> bool:
    """devN entries exist from pve-container 5.0.7, Proxmox VE 8.1."""
    return version_tuple(pve_version) >= (8, 1)


def choose_style(requested: str, flavor: str, facts: HostFacts) -> tuple[str, str]:
    """(style, why). auto: the most robust style this host supports."""
    return _choose(requested, flavor, facts.pve_version, facts.lxc_version)


@functools.lru_cache(maxsize=64)
def _choose(requested: str, flavor: str, pve_version: str | None, lxc_version: str | None) -> tuple[str, str]:
    if requested not in STYLES:
        raise BadInput(f"unknown --style {requested!r}: use one of {', '.join(STYLES)}")
    if requested == "devn" and flavor != "pve":
        raise BadInput("--style devn needs a Proxmox VE container (devN entries are a Proxmox feature)")
    if requested != "auto":
        return requested, f"--style {requested} was asked for"
    if flavor == "pve" and pve_has_devn(pve_version):
        return "devn", (f"Proxmox VE {pve_version} supports devN entries (8.1+): Proxmox stat()s "
                        "the path at every start, so they survive major changes")
    if version_tuple(lxc_version) >= (4,) or (flavor == "pve" and pve_version):
        return "path", ("LXC resolves path-form rules at every start, so they survive major changes"
                        + (f" (LXC {lxc_version})" if lxc_version else ""))
    return "numeric", ("host version unknown: numeric rules from this host's /proc/devices "
                       "(re-run lxcfix after a reboot or driver upgrade; lxcfix audit warns)")
