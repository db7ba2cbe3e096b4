# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)
"""The action of the lxcfix modules (lxcfix_scan, lxcfix_facts, lxcfix_fix): the
module, run on the managed host as it is, with its `host` option defaulting to the
play's inventory_hostname, so results name the inventory's host (a module on the
hypervisor knows only the machine's own name, `localhost` through a local API), and
its `scope` option defaulting to the host's lxcfix_containers, so a task never reads
or changes a container the inventory leaves out (as `lxcfix --inventory` does not)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("host") is None and task_vars.get("inventory_hostname"):
            args["host"] = task_vars["inventory_hostname"]
        if args.get("scope") is None and task_vars.get("lxcfix_containers") is not None:
            # validated on the hypervisor, by lxcfix's own inventory reader (module_utils' scope_of)
            args["scope"] = self._templar.template(task_vars["lxcfix_containers"])
        result.update(self._execute_module(module_name=self._task.action, module_args=args, task_vars=task_vars))
        return result
