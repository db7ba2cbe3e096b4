#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lxcfix_scan
short_description: Find broken or fragile device passthrough in the LXC containers of a hypervisor
version_added: "0.1.0"
description:
  - Scans the Proxmox VE or plain LXC containers of the managed host with lxcfix, as C(lxcfix scan --json) does,
    and returns the findings as data, for C(when), C(assert) and reports.
  - Read-only. It never changes the host, so it runs the same in check mode.
  - Runs lxcfix as a library (C(lxcfix.api)) on the managed host. lxcfix must be installed there, for the Python
    the module runs with; see C(ansible_python_interpreter) in the notes.
  - M(lxcfix.lxcfix.lxcfix_facts) returns the same document as the fact C(ansible_facts.lxcfix).
options:
  ct:
    description:
      - Only these containers (Proxmox vmids or LXC names). Every container in O(scope) when omitted (without a
        scope, every container of the host). A container outside O(scope) fails the task.
    type: list
    elements: str
  probe:
    description:
      - Look inside running containers (a probe that opens each device, and the running device program) to prove
        a failure. Without it only the configs and the host's facts are judged.
    type: bool
    default: true
  style:
    description:
      - The fix style the plans in the result are made in (C(auto) picks the most robust the host supports).
    type: str
    choices: [auto, devn, path, numeric]
    default: auto
  root:
    description:
      - Scan a host snapshot, a directory laid out like a host's root (C(etc/pve/lxc/*.conf), C(proc/devices), ...),
        instead of the live host. No probe is made in a snapshot.
    type: path
extends_documentation_fragment:
  - lxcfix.lxcfix.host
  - lxcfix.lxcfix.host.nodes
notes:
  - Set C(ansible_python_interpreter) for these tasks to the Python that has lxcfix, for example
    C(/opt/pipx/venvs/lxcfix/bin/python) after the README's pipx install. The module fails with that hint when lxcfix
    is missing or older than this collection needs.
  - Needs root on the hypervisor (C(become)) to read the configs and enter the containers.
requirements:
  - lxcfix 0.1.0 or newer on the managed host, importable by the Python the module runs with
seealso:
  - module: lxcfix.lxcfix.lxcfix_facts
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
"""

EXAMPLES = r"""
- name: Scan every container of the hypervisor
  lxcfix.lxcfix.lxcfix_scan:
  register: scan
  vars:
    ansible_python_interpreter: /opt/pipx/venvs/lxcfix/bin/python

- name: No container may have a device error
  ansible.builtin.assert:
    that: scan.summary.error == 0
    fail_msg: "{{ scan.findings | selectattr('severity', 'eq', 'error') | map(attribute='message') | list }}"

- name: Only the GPU containers, from their configs alone
  lxcfix.lxcfix.lxcfix_scan:
    ct: [200, 201]
    probe: false
"""

RETURN = r"""
containers:
  description: One entry per container, as in C(lxcfix scan --json) (schema 1).
  returned: success
  type: list
  elements: dict
  sample:
    - host: localhost
      ct: "200"
      path: /etc/pve/lxc/200.conf
      node: null
      status: error
      error: null
      findings:
        - code: LXF101
          severity: error
          message: "stale major: ..."
          device: /dev/nvidia-uvm
      plan:
        style: devn
        style_reason: "Proxmox VE 8.3.0 supports devN entries (8.1+)"
        diff: "--- a/etc/pve/lxc/200.conf ..."
findings:
  description: Every container's findings in one list, each with its C(host) and C(ct).
  returned: success
  type: list
  elements: dict
  sample:
    - host: localhost
      ct: "200"
      code: LXF101
      severity: error
      message: "stale major: ..."
      device: /dev/nvidia-uvm
      fix: "move the rule to major 511"
pending:
  description: The containers whose plan changes their config (what M(lxcfix.lxcfix.lxcfix_fix) would change).
  returned: success
  type: list
  elements: str
  sample: ["200", "201"]
hosts:
  description: The host's facts (cgroup layout, NVIDIA driver, Proxmox and LXC versions, device majors) and host findings.
  returned: success
  type: list
  elements: dict
summary:
  description: Counts of containers and of findings by severity.
  returned: success
  type: dict
  sample: {containers: 4, error: 2, warning: 0, info: 1, unreachable: 0}
schema:
  description: The version of the document's shape (lxcfix's JSON schema).
  returned: success
  type: int
  sample: 1
lxcfix_version:
  description: The lxcfix version on the managed host.
  returned: success
  type: str
  sample: 0.1.0
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
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
