"""Running the Ansible collection (ansible_collections/lxcfix/lxcfix) from tests,
with the real ansible-playbook, as an admin would.

    play = Playbooks(tmp_path)                        # ANSIBLE_* settings all under tmp_path
    py = play.interpreter("py", PYTHONPATH=str(REPO))  # an ansible_python_interpreter that finds this checkout
    run = play.run("snapshot.yml", inventory, "--check", "--diff")
    run.rc, run.task("Fix")["changed"]                # each task's result, recorded by a callback

Nothing is read from the machine's Ansible configuration: ANSIBLE_CONFIG,
ANSIBLE_HOME, the temp dirs and the collections path are the test's. SSH
connections are never kept open after the play (no ControlMaster), so no ssh
process outlives ansible-playbook.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PLAYBOOKS = HERE / "playbooks"
CALLBACKS = HERE / "callback"
COLLECTION = REPO / "ansible_collections" / "lxcfix" / "lxcfix"


def ansible_tool(name: str) -> str | None:
    """ansible-playbook (or another Ansible command) of the Python running the tests, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def missing_reason() -> str | None:
    if ansible_tool("ansible-playbook") is None:
        return "ansible-playbook not found (pip install ansible-core; the test extras include it)"
    return None


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    records: list[dict] = field(default_factory=list)

    def results(self, task: str, host: str | None = None) -> list[dict]:
        """The results of every run of the task named `task` (one per host)."""
        return [r["result"] | {"_status": r["status"], "_host": r["host"]} for r in self.records
                if r["task"] == task and (host is None or r["host"] == host)]

    def task(self, task: str, host: str | None = None) -> dict:
        found = self.results(task, host)
        assert len(found) == 1, f"task {task!r} ran {len(found)} times\n{self.output()}"
        return found[0]

    def output(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-3000:]}"


class Playbooks:
    def __init__(self, tmp: Path, ssh_args: str = ""):
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.config = self.tmp / "ansible.cfg"
        self.config.write_text("[defaults]\n")
        self.ssh_args = ssh_args
        self._n = 0

    def env(self, record: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(
            ANSIBLE_CONFIG=str(self.config),
            ANSIBLE_HOME=str(self.tmp / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(self.tmp / "ansible-local"),
            ANSIBLE_REMOTE_TEMP=str(self.tmp / "ansible-remote"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO),
            ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False",
            ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
            ANSIBLE_CALLBACKS_ENABLED="lxcfix_record",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="False",
            ANSIBLE_HOST_KEY_CHECKING="True",
            ANSIBLE_PIPELINING="True",
            ANSIBLE_TIMEOUT="30",
            ANSIBLE_SSH_ARGS=self.ssh_args or "-o ControlMaster=no -o ControlPersist=no",
            LXCFIX_RECORD=str(record),
        )
        return env

    def interpreter(self, name: str, *flags: str, python: str | None = None, unset: tuple[str, ...] = (),
                    **variables: str) -> str:
        """An executable to set as ansible_python_interpreter: `python` (default: the tests' own)
        with these environment variables (and flags, e.g. -S), since a module on the "remote"
        gets only the SSH session's environment."""
        path = self.tmp / name
        lines = ["#!/bin/sh"] + [f"unset {shlex.quote(k)}" for k in unset]
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in variables.items()]
        lines.append(f"exec {shlex.join([python or sys.executable, *flags])} \"$@\"")
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o755)
        return str(path)

    def run(self, playbook: str | Path, inventory: str | Path, *args: str, timeout: float = 300) -> Run:
        self._n += 1
        record = self.tmp / f"record-{self._n}.jsonl"
        book = str(playbook)
        if not os.path.isabs(book) and (PLAYBOOKS / book).exists():
            book = str(PLAYBOOKS / book)
        argv = [ansible_tool("ansible-playbook"), "-i", str(inventory), book, *args]
        p = subprocess.run(argv, env=self.env(record), cwd=self.tmp, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        records = []
        if record.exists():
            records = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
        return Run(p.returncode, p.stdout, p.stderr, records)

    def inventory(self, hosts: dict[str, dict], name: str = "inventory.json") -> Path:
        """An inventory in Ansible's JSON form: {"all": {"hosts": {name: vars}}}."""
        path = self.tmp / name
        path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=1))
        return path
