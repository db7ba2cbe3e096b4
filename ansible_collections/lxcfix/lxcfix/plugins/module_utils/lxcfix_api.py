# -*- coding: utf-8 -*-
# Copyright: lxcfix contributors
# MIT License (see the repository's pyproject.toml)
"""Shared by the lxcfix modules: find the lxcfix package on the managed host
(the hypervisor) and load its library API (lxcfix.api), or fail the task with
what to do. The modules never run the lxcfix command line.

    api = load_api(module)     # lxcfix.api, or module.fail_json(...) with the reason
    cts = in_scope(api, ["200"], ["200", "201"])   # -> ["200"]; an LxcfixError (2) for one outside
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import re
import sys
import traceback

# The oldest lxcfix whose lxcfix.api this collection speaks, and that API's version.
MIN_LXCFIX_VERSION = "0.1.0"
API_VERSION = 1

INSTALL_HINT = (
    "Install lxcfix on the hypervisor (README, 'Install': apt install pipx, then "
    "PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install <lxcfix checkout>) and run the "
    "lxcfix tasks with ansible_python_interpreter=/opt/pipx/venvs/lxcfix/bin/python"
)


def version_tuple(text):
    """"0.1.0" -> (0, 1, 0); a suffix ("1.2.0rc1") ends the numbers."""
    out = []
    for part in str(text).split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits or 0))
        if digits != part:
            break
    return tuple(out)


def load_api(module):
    """lxcfix.api from the Python this module runs with, checked for version."""
    try:
        import lxcfix
    except ImportError:
        module.fail_json(msg="lxcfix is not installed for %s on this host. %s" % (sys.executable, INSTALL_HINT),
                         exception=traceback.format_exc(), lxcfix_missing=True)
    version = getattr(lxcfix, "__version__", "0")
    where = getattr(lxcfix, "__file__", None) or "?"
    if version_tuple(version) < version_tuple(MIN_LXCFIX_VERSION):
        module.fail_json(msg="lxcfix %s (%s, for %s) is too old: this collection needs lxcfix %s or newer. "
                             "Upgrade it (README, 'Install')." % (version, where, sys.executable, MIN_LXCFIX_VERSION),
                         lxcfix_version=version)
    try:
        from lxcfix import api
    except ImportError as e:
        if importlib.util.find_spec("lxcfix.api") is None:
            module.fail_json(msg="lxcfix %s (%s) has no library API (lxcfix.api): too old for this collection, "
                                 "which needs lxcfix %s or newer with API version %d. Upgrade it (README, 'Install')."
                                 % (version, where, MIN_LXCFIX_VERSION, API_VERSION),
                             exception=traceback.format_exc(), lxcfix_version=version)
        module.fail_json(msg="lxcfix %s (%s) is installed but its API does not import for %s: %s. "
                             "Reinstall it (README, 'Install')." % (version, where, sys.executable, e),
                         exception=traceback.format_exc(), lxcfix_version=version)
    if getattr(api, "API_VERSION", None) != API_VERSION:
        module.fail_json(msg="lxcfix %s speaks library API version %s; this collection speaks version %d. "
                             "Install the collection and lxcfix from the same release."
                             % (version, getattr(api, "API_VERSION", None), API_VERSION),
                         lxcfix_version=version)
    return api


SCAN_ARGUMENT_SPEC = dict(
    ct=dict(type="list", elements="str"),
    probe=dict(type="bool", default=True),
    style=dict(type="str", default="auto", choices=["auto", "devn", "path", "numeric"]),
    root=dict(type="path"),
    host=dict(type="str"),
    host_nodes=dict(type="bool", default=False),
    scope=dict(type="raw"),
)

# lxcfix's command-line words, as this collection's option names (a message from lxcfix
# says `--root DIR`; a task was given `root: DIR`). Commands it quotes (`lxcfix diagnose
# --ct 200`) stay as they are: they are run as they are.
OPTION_WORDS = (("--no-restart", "restart: false"), ("--root", "root"), ("--style", "style"),
                ("--live", "live"), ("--ct", "ct"))
_COMMAND = re.compile(r"lxcfix [a-z-]+(?: [^\s);,]+)*")


def option_words(text):
    """A message of lxcfix's in the modules' words: `--root X` -> `root X`, `--live` -> `live`."""
    if not isinstance(text, str):
        return text
    out, last = [], 0
    for m in _COMMAND.finditer(text):
        out += [_words(text[last:m.start()]), m.group()]
        last = m.end()
    return "".join(out + [_words(text[last:])])


def _words(text):
    for cli, option in OPTION_WORDS:
        text = re.sub(r"(?<![\w-])%s(?![\w-])" % re.escape(cli), option, text)
    return text


def scope_of(api, params):
    """The containers this task may touch: the `scope` option (the action plugin fills it with the
    inventory's lxcfix_containers), read as `lxcfix --inventory` reads lxcfix_containers:
    None (every container), or ["200", "web"]."""
    if params.get("scope") is None:
        return None
    return api.scope(params["scope"])


def in_scope(api, cts, scope):
    """cts (None: every container in scope) checked against scope: ["200"], ["200", "201"] -> ["200"];
    a container outside it is an LxcfixError (exit code 2), before anything is read or changed."""
    if scope is None:
        return cts
    if cts is None:
        return list(scope)
    outside = [ct for ct in cts if ct not in scope]
    if outside:
        raise api.LxcfixError(  # exit code 2: bad input, nothing changed
            "%s %s outside this host's lxcfix_containers (%s): nothing done"
            % (", ".join(outside), "is" if len(outside) == 1 else "are", ", ".join(scope)))
    return cts


def scan_result(api, params):
    """lxcfix_scan's and lxcfix_facts' data: the scan document (schema 1), its
    findings also in one list (each with host and ct), the containers whose plan
    changes something. host: the inventory's name for the host (the action plugin
    passes inventory_hostname); host_nodes: the host's device nodes in its facts."""
    cts = in_scope(api, params["ct"], scope_of(api, params))
    doc = api.scan(cts, probe=params["probe"], style=params["style"], root=params["root"],
                   host=params.get("host"), host_nodes=bool(params.get("host_nodes")))
    for c in doc["containers"]:
        if c.get("plan"):
            c["plan"]["style_reason"] = option_words(c["plan"]["style_reason"])
    findings = [dict(f, host=c["host"], ct=c["ct"]) for c in doc["containers"] for f in c["findings"]]
    pending = [c["ct"] for c in doc["containers"] if c.get("plan")]
    return dict(schema=doc["schema"], lxcfix_version=doc["version"], hosts=doc["hosts"],
                containers=doc["containers"], findings=findings, pending=pending, summary=doc["summary"])


def error_result(e):
    """What a failed lxcfix call tells the task: its exit code and whether it was rolled back,
    its message in the modules' option names."""
    code = int(getattr(e, "exit_code", 3))
    return {"msg": "lxcfix: %s" % option_words(str(e)), "exit_code": code, "rolled_back": code == 4}


def text_of(data):
    """Config bytes as text for Ansible's diff (a non-UTF-8 byte shows as U+FFFD)."""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data
