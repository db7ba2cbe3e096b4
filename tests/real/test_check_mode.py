"""Issue 23: check mode is the transaction run without its effects. On a real Proxmox-style
container (the pct shim) with real cgroup v2 BPF device filtering, six preconditions that
stop an apply (a `lock:` line, the config edited between plan and apply, a full state dir,
a state dir that is a symlink, a container that does not exist, a --live change liveplan
refuses) go through the three check modes - `lxcfix apply --dry-run`, `lxcfix.api.fix(
check=True)` and the Ansible collection's check mode (ansible-playbook --check, over SSH) -
and through the real run (`lxcfix apply --yes`, `api.fix(check=False)`): all give the same
exit code and the same message, and nothing changes (config bytes, init PID, the running
device program, no backup, no journal line).

The config edited "meanwhile" is edited at the transaction's "planned" checkpoint
(tests/real/edit_at_planned/sitecustomize.py, on PYTHONPATH, for the CLI and the Ansible
module alike; Transaction.on_checkpoint in-process for the API). The full state dir is a
tiny tmpfs in this test's private mount namespace (tests/run).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from collection_support import REPO, missing_reason

from . import harness
from .ansible_host import AnsibleHypervisor
from .cli import lxcfix
from .edit_at_planned import sitecustomize as edit_at_planned
from .test_state_safety import fill, tmpfs

PVE_TUN = "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"
HOOK_DIR = str(Path(edit_at_planned.__file__).parent)

# case: (exit code, what the message says)
CASES = {
    "locked": (2, "is locked (backup)"),
    "digest-changed": (2, "changed since it was planned"),
    "state-dir-full": (3, "No space left on device"),
    "state-dir-symlink": (3, "refusing to follow it"),
    "container-missing": (2, "no container"),
    "live-unfixable": (2, "--live cannot do this change"),
}


@contextlib.contextmanager
def case_setup(case, ct, tmp_path, env):
    """The case's precondition on the host; yields (vmid asked for, extra CLI args, api kwargs,
    environment overrides)."""
    vmid, args, kw, extra = ct.vmid, [], {}, {}
    if case == "locked":
        Path(ct.conf_path).write_bytes(b"lock: backup\n" + Path(ct.conf_path).read_bytes())
    elif case == "digest-changed":
        extra = {"LXCFIX_TEST_EDIT_AT_PLANNED": ct.conf_path,
                 "PYTHONPATH": f"{REPO}:{HOOK_DIR}"}
    elif case == "state-dir-symlink":
        (tmp_path / "elsewhere").mkdir()
        os.symlink(tmp_path / "elsewhere", tmp_path / "state-link")
        extra = {"LXCFIX_STATE_DIR": str(tmp_path / "state-link")}
    elif case == "container-missing":
        vmid = str(int(ct.vmid) + 500)
    elif case == "live-unfixable":  # devN replaces the bind mount: only a start does that
        args, kw = ["--live", "--style", "devn"], {"live": True, "style": "devn"}
    if case == "state-dir-full":
        with tmpfs(tmp_path / "tiny") as disk:
            filler = fill(disk)
            try:
                yield vmid, args, kw, {"LXCFIX_STATE_DIR": str(disk / "state")}
            finally:
                filler.unlink()
        return
    yield vmid, args, kw, extra


def untouched(ct, state_dir) -> tuple:
    conf = Path(ct.conf_path).read_bytes()
    lines = conf.splitlines(keepends=True)
    if lines and lines[-1].startswith(edit_at_planned.EDIT):  # the test's own edit, not lxcfix's
        conf = b"".join(lines[:-1])
    state = Path(state_dir)
    written = sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.is_file()) \
        if state.is_dir() and not state.is_symlink() else []
    return conf, ct.init_pid(), ct.bpf_dump(), written


def cli_error(r) -> str:
    lines = [l for l in r.stderr.splitlines() if l.startswith("lxcfix: error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return lines[0][len("lxcfix: error: "):]


def api_error(monkeypatch, vmid, kw, extra, check) -> tuple[int, str]:
    from lxcfix import api
    from lxcfix.transaction import Transaction

    with monkeypatch.context() as m:
        for k, v in extra.items():
            if k != "PYTHONPATH":
                m.setenv(k, v)
        if "LXCFIX_TEST_EDIT_AT_PLANNED" in extra:
            path = extra["LXCFIX_TEST_EDIT_AT_PLANNED"]
            m.setattr(Transaction, "on_checkpoint",
                      staticmethod(lambda name: edit_at_planned.edit(path) if name == "planned" else None))
        with pytest.raises(api.LxcfixError) as raised:
            api.fix(vmid, check=check, **kw)
    return int(raised.value.exit_code), str(raised.value)


def ansible_check(tmp_path, env, vmid, kw, extra) -> tuple[int, str]:
    keep = ("LXCFIX_STATE_DIR", "LXCFIX_LOCK_DIR", "LXCFIX_PVE_DIR", "PATH")
    interp_env = {**{k: env[k] for k in keep}, **extra}
    hv = AnsibleHypervisor.start(tmp_path / "hv", {k: v for k, v in interp_env.items() if k != "PYTHONPATH"})
    try:
        python = hv.play.interpreter("python-checked", **{"PYTHONPATH": str(REPO), **interp_env})
        inv = hv.inventory(ansible_python_interpreter=python, lxcfix_python=python)
        params = {"fix_ct": [vmid], "fix_live": kw.get("live", False), "fix_style": kw.get("style", "auto")}
        run = hv.play.run("fix.yml", inv, "--check", "--diff", "-e", json.dumps(params))
    finally:
        hv.stop()
    assert run.rc == 2, run.output()  # the task failed
    fix = run.task("Fix")
    assert fix["_status"] == "failed" and fix["rolled_back"] is False and fix["msg"].startswith("lxcfix: "), fix
    return fix["exit_code"], fix["msg"][len("lxcfix: "):]


@pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))
@pytest.mark.parametrize("case", list(CASES))
def test_check_modes_and_the_real_run_agree(case, pve, tun, env, tmp_path, monkeypatch):
    env.update(pve.env())
    ct = pve.make_ct([PVE_TUN])
    assert ct.bpf_attached() and harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    code, says = CASES[case]
    with case_setup(case, ct, tmp_path, env) as (vmid, args, kw, extra):
        state = extra.get("LXCFIX_STATE_DIR", env["LXCFIX_STATE_DIR"])
        before = untouched(ct, state)
        run_env = {**env, **extra}

        dry = lxcfix(run_env, "apply", "--ct", vmid, "--dry-run", *args)
        verdicts = {"apply --dry-run": (dry.returncode, cli_error(dry))}
        if case != "container-missing":  # refused before a transaction exists: by repair.one, for all
            assert "check: apply would stop at step" in dry.stdout, dry.stdout
        verdicts["api.fix(check=True)"] = api_error(monkeypatch, vmid, kw, extra, check=True)
        verdicts["ansible --check"] = ansible_check(tmp_path, env, vmid, kw, extra)
        assert untouched(ct, state) == before  # check mode changed nothing

        real = lxcfix(run_env, "apply", "--ct", vmid, "--yes", *args)
        verdicts["apply --yes"] = (real.returncode, cli_error(real))
        verdicts["api.fix(check=False)"] = api_error(monkeypatch, vmid, kw, extra, check=False)
        assert untouched(ct, state) == before  # the real run refused before acting, as check mode said

    codes = {k: v[0] for k, v in verdicts.items()}
    assert set(codes.values()) == {code}, codes
    # The same message, but for the digests in "changed since it was planned" (equal here too).
    # Ansible's is in the modules' option names (`live`, not `--live`): the others, so worded, equal it.
    from ansible_collections.lxcfix.lxcfix.plugins.module_utils.lxcfix_api import option_words

    messages = {k: v[1] if k == "ansible --check" else option_words(v[1]) for k, v in verdicts.items()}
    assert len(set(messages.values())) == 1, messages
    assert says in verdicts["apply --yes"][1], verdicts
    assert ct.running() and ct.bpf_attached() and harness.open_errno(ct, "/dev/net/tun") == "EPERM"
    if case == "state-dir-symlink":
        assert list((tmp_path / "elsewhere").iterdir()) == []
