"""Test-only Ansible callback: every task result, one JSON line each, appended to
$LXCFIX_RECORD, so a test reads what each module returned (also on failure)
instead of scraping the play's output."""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "lxcfix_record"
    CALLBACK_NEEDS_ENABLED = True

    def _record(self, result, status):
        data = getattr(result, "result", None)
        if data is None:  # ansible-core before 2.19
            data = result._result
        line = {"host": result._host.get_name(), "task": result._task.get_name(), "status": status, "result": data}
        with open(os.environ["LXCFIX_RECORD"], "a") as f:
            f.write(json.dumps(line, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")
