# The options every lxcfix module shares, written once (extends_documentation_fragment).


class ModuleDocFragment:
    # lxcfix.lxcfix.host: the name results give the managed host
    DOCUMENTATION = r"""
options:
  host:
    description:
      - The name the results give the managed host (C(host) of each container and finding).
      - Defaults to the play's C(inventory_hostname) (the collection's action plugin passes it), so results name
        the inventory's host, never C(localhost).
    type: str
  scope:
    description:
      - The containers of this host the task may read or change, as the inventory's C(lxcfix_containers) names them
        (a vmid or name, a list of them, or C(all)), read as C(lxcfix scan --inventory) and C(lxcfix apply --all
        --inventory) read it. Containers outside it are not scanned, probed, changed or restarted.
      - Defaults to the host's C(lxcfix_containers) (the collection's action plugin passes it); every container of the
        host when that is not set.
    type: raw
"""

    # lxcfix.lxcfix.host.nodes: the host's device nodes, only when asked
    NODES = r"""
options:
  host_nodes:
    description:
      - Also return the host's device nodes (RV(hosts[].facts.device_nodes), about 100 on a hypervisor). Left out
        by default; the findings name the nodes they are about.
    type: bool
    default: false
"""
