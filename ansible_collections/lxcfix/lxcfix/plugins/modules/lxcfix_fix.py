#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lxcfix_fix
short_description: Repair the device passthrough of LXC containers safely, with check mode and diffs
version_added: "0.1.0"
description:
  - Plans and applies lxcfix's repair of one, several or all containers of the managed hypervisor, as
    C(lxcfix apply --yes) does - refuse on C(lock:), take Proxmox's config lock, back up the config (outside its
    directory), write it atomically, restart the container if it ran (or, with O(live), change the running container
    in place), verify by probing inside, and roll back on any failure.
  - In check mode nothing is written, locked, backed up or restarted; the result says what would change, with the
    same diff and the steps the apply would take. Check mode checks each step's precondition as the apply does
    before acting (C(lock:), the config lock, the config unchanged since the plan, the state dir usable and with
    room, the change possible live with O(live)), and fails the task with the apply's own message and RV(exit_code)
    where the apply would refuse.
  - Idempotent - a container whose plan is empty is not touched and reports C(changed=false), so a second run
    reports C(changed=false).
  - A failure after the write is rolled back (the old config restored, the container restarted with it) and fails
    the task with lxcfix's message and C(rolled_back=true); a rollback that fails too says exactly what state the
    config and container are in (C(exit_code=5)).
  - Runs lxcfix as a library (C(lxcfix.api)) on the managed host.
options:
  ct:
    description:
      - The containers to fix, Proxmox vmids or LXC names, or C(all) for every container whose plan changes
        something, within O(scope) (the inventory's C(lxcfix_containers)). A container outside O(scope) fails the
        task before anything is changed.
      - Containers are fixed one after the other; the first failure stops the task (the ones before it stay fixed
        and are listed in RV(containers)).
    type: list
    elements: str
    required: true
  style:
    description:
      - The fix style. C(auto) picks the most robust the host supports (Proxmox C(devN) entries on Proxmox VE 8.1+,
        path-form rules on LXC) and changes only what is broken; C(devn) and C(path) asked for explicitly also migrate
        working numeric rules; C(numeric) writes majors from the host's current C(/proc/devices).
    type: str
    choices: [auto, devn, path, numeric]
    default: auto
  live:
    description:
      - Fix running containers in place, without a restart (C(lxc-cgroup) rule changes, C(lxc-device add)), and write
        the same change to the config. Refused, with the reason, for changes only a start can make, and for a container
        that is not running.
    type: bool
    default: false
  restart:
    description:
      - Restart a running container so it loads the new config, then verify inside it. With C(false) only the config
        is written; RV(restart_required) then says which containers still run the old one.
      - Ignored with O(live) (nothing is restarted) and with O(root).
    type: bool
    default: true
  root:
    description:
      - Fix a host snapshot, a directory laid out like a host's root, instead of the live host. Only files under it
        are written (backups in O(root)/.lxcfix/state); nothing is restarted. Every path is resolved inside it, and a
        symlink that leads out of it (its C(etc/pve/lxc) linked to a directory elsewhere) fails the task, nothing
        changed.
    type: path
extends_documentation_fragment:
  - lxcfix.lxcfix.host
notes:
  - Set C(ansible_python_interpreter) for these tasks to the Python that has lxcfix, for example
    C(/opt/pipx/venvs/lxcfix/bin/python) after the README's pipx install. The module fails with that hint when lxcfix
    is missing or older than this collection needs.
  - Needs root on the hypervisor (C(become)).
  - Run it with C(serial) across a cluster so a bad change stops before it reaches every node.
  - lxcfix's own state (backups, journal) is in C(/var/lib/lxcfix) unless C(LXCFIX_STATE_DIR) is set in the task's
    C(environment).
requirements:
  - lxcfix 0.1.0 or newer on the managed host, importable by the Python the module runs with
seealso:
  - module: lxcfix.lxcfix.lxcfix_scan
  - module: lxcfix.lxcfix.lxcfix_facts
author:
  - lxcfix contributors (@lxcfix)
attributes:
  check_mode:
    support: full
    description: The plan and the steps, nothing written or restarted.
  diff_mode:
    support: full
    description: One diff per config file changed.
"""

EXAMPLES = r"""
- name: Fix CT 200, restarting it if it runs
  lxcfix.lxcfix.lxcfix_fix:
    ct: 200
  vars:
    ansible_python_interpreter: /opt/pipx/venvs/lxcfix/bin/python

- name: What would change on every container (run with --check --diff)
  lxcfix.lxcfix.lxcfix_fix:
    ct: all
  check_mode: true
  register: would

- name: Fix the running GPU containers in place, no restart
  lxcfix.lxcfix.lxcfix_fix:
    ct: [200, 201]
    live: true

- name: Write the configs only; restart in the next maintenance window
  lxcfix.lxcfix.lxcfix_fix:
    ct: all
    restart: false
  register: fixed

- name: Containers that still run the old config
  ansible.builtin.debug:
    msg: "{{ fixed.containers | selectattr('restart_required') | map(attribute='ct') | list }}"
"""

RETURN = r"""
changed:
  description: A config was changed (in check mode - would be changed).
  returned: always
  type: bool
diff:
  description: One entry per config file changed, in Ansible's diff format (shown with C(--diff)).
  returned: changed and in diff mode
  type: list
  elements: dict
  sample:
    - before_header: /etc/pve/lxc/200.conf
      after_header: /etc/pve/lxc/200.conf
      before: "arch: amd64\n..."
      after: "arch: amd64\n...\ndev0: /dev/nvidia-uvm,mode=0666\n"
backup_file:
  description: The backup lxcfix took of the config, when exactly one container was changed (see RV(containers) for each).
  returned: changed, not in check mode
  type: str
  sample: /var/lib/lxcfix/backups/200/20261130T190301.123456Z-3f2a9c1d0b7e.conf
host:
  description: The managed host, by its inventory name (O(host)).
  returned: success
  type: str
  sample: pve1
restart_required:
  description: A container changed by this task still runs its old config (O(restart=false)).
  returned: success
  type: bool
  sample: false
verified:
  description:
    - Every container this task changed was verified afterwards - its config on disk is the planned one and, when it
      runs, a probe inside and its running device program show none of the problems the plan was for - and every one
      it did not need to change checks clean as it was found (a rerun - the same checks, probed inside when it runs).
      False in check mode, and when no verify ran (O(restart=false), O(root)) on a container it changed.
  returned: success
  type: bool
  sample: true
findings:
  description: The findings of the containers handled, before the change, each with its C(ct) (as in C(lxcfix scan --json)).
  returned: success
  type: list
  elements: dict
  sample:
    - {ct: "200", code: LXF101, severity: error, message: "stale major: ...", device: /dev/nvidia-uvm, fix: "..."}
containers:
  description: One entry per container handled.
  returned: always
  type: list
  elements: dict
  contains:
    ct:
      description: The container.
      type: str
    path:
      description: Its config file.
      type: str
    changed:
      description: Its config changed (would change).
      type: bool
    status:
      description: Whether it ran when the task began (C(running), C(stopped); null for a snapshot).
      type: str
    style:
      description: The fix style used, and RV(containers[].style_reason) why.
      type: str
    style_reason:
      description: Why that style.
      type: str
    backup_file:
      description: Its backup (null in check mode or when unchanged).
      type: str
    restarted:
      description: It was (would be) restarted to load the new config.
      type: bool
    restart_required:
      description: Its new config is on disk but it still runs the old one.
      type: bool
    verified:
      description: Its verify step ran and passed (see RV(verified)).
      type: bool
    step_reached:
      description: The last step of the apply (C(verified), C(restarted), C(written), C(changed-live)); null in check mode.
      type: str
    steps:
      description: The steps the apply takes (in check mode - would take).
      type: list
      elements: str
    diff:
      description: The unified diff of its config.
      type: str
    findings:
      description: Its findings before the change.
      type: list
      elements: dict
exit_code:
  description: On failure, lxcfix's exit code - 2 refused or bad input (nothing changed), 3 unreachable,
    4 failed and rolled back, 5 the rollback failed too (the message says the state).
  returned: failure
  type: int
  sample: 4
rolled_back:
  description: On failure, whether the change was made and then rolled back.
  returned: failure
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.lxcfix.lxcfix.plugins.module_utils.lxcfix_api import (
    error_result, in_scope, load_api, option_words, scope_of, text_of,
)

ARGUMENT_SPEC = dict(
    ct=dict(type="list", elements="str", required=True),
    style=dict(type="str", default="auto", choices=["auto", "devn", "path", "numeric"]),
    live=dict(type="bool", default=False),
    restart=dict(type="bool", default=True),
    root=dict(type="path"),
    host=dict(type="str"),
    scope=dict(type="raw"),
)

SHOWN = ("ct", "host", "path", "changed", "status", "style", "style_reason", "backup_file", "restarted",
         "restart_required", "verified", "step_reached", "steps", "diff", "findings")


def summarize(results, check, want_diff, host=None, found_clean=False):
    """The task's result from the per-container ones. found_clean: `ct: all` found nothing to
    do, and every container checks clean as it is."""
    changed = [r for r in results if r["changed"]]
    out = dict(
        changed=bool(changed),
        containers=[dict((k, option_words(r[k]) if k == "style_reason" else r[k]) for k in SHOWN)
                    for r in results],
        findings=[dict(f, ct=r["ct"]) for r in results for f in r["findings"]],
        restart_required=any(r["restart_required"] for r in changed),
        # the state each container was left in, or found in when nothing needed doing (a rerun)
        verified=not check and (all(r["verified"] for r in results) if results else bool(found_clean)),
    )
    if host is not None:
        out["host"] = host
    if len(changed) == 1 and not check:
        out["backup_file"] = changed[0]["backup_file"]
    if want_diff and changed:
        out["diff"] = [dict(before_header=r["path"], after_header=r["path"],
                            before=text_of(r["before"]), after=text_of(r["after"])) for r in changed]
    return out


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    api = load_api(module)
    p = module.params
    check = module.check_mode
    results = []
    ct = None
    found_clean = False
    try:
        cts = p["ct"]
        scope = scope_of(api, p)  # the inventory's lxcfix_containers: nothing outside it is touched
        if cts == ["all"]:
            cts = [c for c in api.pending(style=p["style"], root=p["root"]) if scope is None or c in scope]
            if not cts and not check:  # a rerun: the state found, checked as a verify would
                found_clean = scope == [] or all(api.clean(scope, style=p["style"], root=p["root"]).values())
        elif "all" in cts:
            module.fail_json(msg="ct: 'all' stands alone (got %s)" % ", ".join(cts))
        else:
            cts = in_scope(api, cts, scope)
        for ct in cts:
            results.append(api.fix(ct, style=p["style"], live=p["live"], restart=p["restart"], check=check,
                                   root=p["root"], host=p["host"]))
    except api.LxcfixError as e:
        done = summarize(results, check, module._diff, p["host"])
        module.fail_json(ct=ct, **dict(done, **error_result(e)))
    module.exit_json(**summarize(results, check, module._diff, p["host"], found_clean))


if __name__ == "__main__":
    main()
