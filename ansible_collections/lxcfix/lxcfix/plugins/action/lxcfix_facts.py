# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)
"""lxcfix_facts's action: the module, with `host` defaulting to inventory_hostname (lxcfix_scan's action)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.lxcfix.lxcfix.plugins.action.lxcfix_scan import ActionModule  # noqa: F401
