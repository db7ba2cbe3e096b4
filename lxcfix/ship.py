"""lxcfix run on a hypervisor that has no lxcfix installed (AnsiballZ's way): this
package's host-side modules, the templates and the pure-Python libraries they use
(jinja2, markupsafe, tenacity) go through the stdin of the sweep's fixed bootstrap
(`python3 -c sweep.BOOT`), are imported from memory there (nothing written to the
host's disk) and run agent.main(request). One exec, one round trip after the
connection; the reply is one framed document.

    reply = run_agent(transport, {"op": "apply", "ct": "200", "restart": True})
    reply == {"agent": 1, "host": "pve1", "results": [{"ct": "200", "outcome": "applied", ...}], "error": None}

Failures before the agent answers are AgentError, each one line: NoPython (the host
has no python3: nothing ran there), OldPython (too old: nothing ran), NoReply (it ran
and ended without a reply: what it did, its journal there says).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import zlib

from . import sweep
from .errors import LxcfixError, Unreachable

SHIPPED_PACKAGES = ("lxcfix", "jinja2", "markupsafe", "tenacity")
# The control node's own modules: SSH, inventories, the command line. Never imported there.
CONTROL_ONLY = frozenset({"lxcfix.cli", "lxcfix.ssh", "lxcfix.fleet", "lxcfix.fleetapply", "lxcfix.inventory",
                          "lxcfix.inventory_io", "lxcfix.entry", "lxcfix.__main__", "lxcfix.ship",
                          "lxcfix.api", "lxcfix.templates"})
MIN_PYTHON = (3, 11)  # pyproject's requires-python: Debian 12 (PVE 8) and later
MAX_REPLY = 32 * 1024 * 1024
AGENT_TIMEOUT = 900.0  # a restart and its verify; the transaction's own steps have their deadlines

# Run by sweep.BOOT with REQ set: the shipped modules imported from memory, ahead of
# whatever the host has installed (a shipped package's module that was not shipped is
# missing, never the host's copy of another version).
LOADER = r'''
import sys
if sys.version_info < %(min)r:
    sys.stdout.write("LXFA" + str(REQ.get("nonce")) + "\nOLD " + sys.version.split()[0] + "\n")
    sys.stdout.flush()
    raise SystemExit(0)
import base64, json, zlib, importlib.abc, importlib.util
CODE = json.loads(zlib.decompress(base64.b64decode(REQ.pop("code"))).decode("utf-8"))
MODS = CODE["modules"]
TOPS = tuple(CODE["packages"])

class Shipped(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in MODS:
            return importlib.util.spec_from_loader(name, self, is_package=MODS[name][0])
        if name.split(".")[0] in TOPS:
            raise ModuleNotFoundError("not shipped: " + name, name=name)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__spec__.name
        code = compile(MODS[name][1], "<lxcfix shipped>/" + name.replace(".", "/") + ".py", "exec")
        exec(code, module.__dict__)

sys.meta_path.insert(0, Shipped())
import lxcfix.render
lxcfix.render.SHIPPED = CODE["templates"]
import lxcfix.agent
lxcfix.agent.main(REQ)
''' % {"min": MIN_PYTHON}


class AgentError(Unreachable):
    """The agent did not answer (exit 3): `ran` says whether it may have acted on the host."""

    ran = False


class NoPython(AgentError):
    pass


class OldPython(AgentError):
    pass


class NoReply(AgentError):
    ran = True


def _sources(package: str) -> dict[str, list]:
    """{module name: [is_package, source]} of one importable package (its .py files)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LxcfixError(f"cannot ship {package}: it is not installed here")
    top = list(spec.submodule_search_locations)[0]
    out: dict[str, list] = {}
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "tests") and
                         os.path.isfile(os.path.join(folder, d, "__init__.py")))
        rel = os.path.relpath(folder, top)
        prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            name = prefix if file == "__init__.py" else f"{prefix}.{file[:-3]}"
            if name in CONTROL_ONLY:
                continue
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                out[name] = [file == "__init__.py", f.read()]
    return out


@functools.lru_cache(maxsize=1)
def bundle() -> str:
    """What is shipped, base64(zlib(JSON)): {"packages": [...], "modules": {...}, "templates": {...}}."""
    from .render import _read_templates

    modules: dict[str, list] = {}
    for package in SHIPPED_PACKAGES:
        modules.update(_sources(package))
    doc = {"packages": list(SHIPPED_PACKAGES), "modules": modules, "templates": _read_templates()}
    return base64.b64encode(zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 9)).decode()


def stdin(request: dict, nonce: str) -> str:
    return ('{"script":' + json.dumps(LOADER) + ',"request":'
            + json.dumps({**request, "nonce": nonce, "code": bundle()}, separators=(",", ":")) + "}")


def parse_reply(stdout: str, stderr: str, rc: int, nonce: str, host: str) -> dict:
    """The agent's document, checked whole; AgentError when there is none."""
    head = "LXFA" + nonce + "\n"
    at = stdout.find(head)
    if at < 0:
        tail = " ".join((stderr or stdout).split())[-300:]
        if rc == 127 or ("python3" in tail and "not found" in tail):
            raise NoPython("python3 is not installed there (lxcfix runs its transaction on the host with the "
                           "host's python3: apt install python3); nothing changed")
        raise NoReply(f"the agent ended without a reply (exit {rc}: {tail or 'no output'}); what it "
                      f"did, its journal there says: lxcfix rollback --inventory ... --host {host} --ct ID "
                      "restores a container's newest backup")
    body = stdout[at + len(head):].strip()
    if body.startswith("OLD "):
        raise OldPython(f"its python3 is {body[4:20].strip()}; lxcfix needs "
                        f"{'.'.join(map(str, MIN_PYTHON))} or later there; nothing changed")
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(body.split("\n", 1)[0], validate=True), MAX_REPLY + 1)
        if len(raw) > MAX_REPLY:
            raise ValueError(f"larger than {MAX_REPLY} bytes")
        doc = json.loads(raw)
        return check_doc(doc)
    except (ValueError, zlib.error, TypeError, KeyError) as e:
        raise NoReply(f"the agent's reply does not read ({e}); what it did, its journal there says") from None


_FIELDS = {"ct": str, "outcome": str, "exit": int, "message": str, "diff": str, "style": str,
           "style_reason": str, "before": str, "path": str, "backup": (str, type(None)), "reached": str,
           "verified": bool, "steps": list, "verdict": dict, "notes": list}


def check_doc(doc) -> dict:
    """A reply document with the types the agent writes (ValueError otherwise)."""
    from .agent import OUTCOMES

    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError("not an agent document")
    err = doc.get("error")
    if err is not None and not (isinstance(err, dict) and isinstance(err.get("message"), str)
                                and isinstance(err.get("exit"), int)):
        raise ValueError("bad error")
    for rec in doc["results"]:
        if not isinstance(rec, dict):
            raise ValueError("a result is not an object")
        for key, kind in _FIELDS.items():
            if key in rec and not isinstance(rec[key], kind):
                raise ValueError(f"result field {key} has the wrong type")
        if rec.get("outcome") not in OUTCOMES or not isinstance(rec.get("ct"), str) \
                or not isinstance(rec.get("exit"), int) or not isinstance(rec.get("message"), str):
            raise ValueError("a result lacks ct, outcome, exit or message")
        if not all(isinstance(s, str) for s in rec.get("steps", [])):
            raise ValueError("a step is not text")
    return doc


def run_agent(transport, request: dict, timeout: float = AGENT_TIMEOUT) -> dict:
    """One exec on the host: the bootstrap, the code and the request on its stdin."""
    from .transport import python_of

    nonce = sweep.nonce()
    r = transport.run(sweep.argv(None, python_of(transport)), input=stdin(request, nonce), timeout=timeout,
                      max_output=MAX_REPLY)
    return parse_reply(r.stdout, r.stderr, r.rc, nonce, getattr(transport, "name", "host"))
