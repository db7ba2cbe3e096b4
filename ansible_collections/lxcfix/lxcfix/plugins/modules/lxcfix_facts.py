#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lxcfix_facts
short_description: The device passthrough findings of a hypervisor's LXC containers, as facts
version_added: "0.1.0"
description:
  - Scans the managed host's containers with lxcfix, as M(lxcfix.lxcfix.lxcfix_scan) does, and sets the fact
    C(ansible_facts.lxcfix) (also reachable as C(lxcfix)) to the result, so later plays and templates can use it
    without registering a variable.
  - Read-only. It never changes the host, so it runs the same in check mode.
options:
  ct:
    description:
      - Only these containers (Proxmox vmids or LXC names). All of the host's containers when omitted.
    type: list
    elements: str
  probe:
    description:
      - Look inside running containers to prove a failure; without it only configs and host facts are judged.
    type: bool
    default: true
  style:
    description:
      - The fix style the plans in the facts are made in.
    type: str
    choices: [auto, devn, path, numeric]
    default: auto
  root:
    description:
      - Read a host snapshot (a directory laid out like a host's root) instead of the live host.
    type: path
extends_documentation_fragment:
  - lxcfix.lxcfix.host
  - lxcfix.lxcfix.host.nodes
notes:
  - Set C(ansible_python_interpreter) for these tasks to the Python that has lxcfix, for example
    C(/opt/pipx/venvs/lxcfix/bin/python) after the README's pipx install.
requirements:
  - lxcfix 0.1.0 or newer on the managed host, importable by the Python the module runs with
seealso:
  - module: lxcfix.lxcfix.lxcfix_scan
  - module: lxcfix.lxcfix.lxcfix_fix
author:
  - lxcfix contributors (@lxcfix)
attributes:
  check_mode:
    support: full
    description: Read-only; the same scan in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Sets C(ansible_facts.lxcfix).
"""

EXAMPLES = r"""
- name: Gather lxcfix facts
  lxcfix.lxcfix.lxcfix_facts:
  vars:
    ansible_python_interpreter: /opt/pipx/venvs/lxcfix/bin/python

- name: Containers that need a fix
  ansible.builtin.debug:
    msg: "{{ ansible_facts.lxcfix.pending }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts set.
  returned: success
  type: complex
  contains:
    lxcfix:
      description:
        - The scan, as M(lxcfix.lxcfix.lxcfix_scan) returns it - C(containers), C(findings), C(pending), C(hosts),
          C(summary), C(schema), C(lxcfix_version).
      returned: success
      type: dict
      sample:
        pending: ["200"]
        summary: {containers: 4, error: 2, warning: 0, info: 1, unreachable: 0}
        findings:
          - {host: localhost, ct: "200", code: LXF101, severity: error, message: "stale major: ..."}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.lxcfix.lxcfix.plugins.module_utils.lxcfix_api import (
    SCAN_ARGUMENT_SPEC, error_result, load_api, scan_result,
)


def main():
    module = AnsibleModule(argument_spec=SCAN_ARGUMENT_SPEC, supports_check_mode=True)
    api = load_api(module)
    try:
        result = scan_result(api, module.params)
    except api.LxcfixError as e:
        module.fail_json(**error_result(e))
    module.exit_json(changed=False, ansible_facts=dict(lxcfix=result))


if __name__ == "__main__":
    main()
