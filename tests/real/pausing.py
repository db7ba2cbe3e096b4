"""`python3 tests/real/pausing.py STEP PAUSE_FILE lxcfix-args...`: the lxcfix CLI,
paused at one checkpoint of its transaction, so a test can SIGKILL it there.

At STEP it writes "<pid> <step>" to PAUSE_FILE and waits while the file exists
(at most 60 s). The production code has only the hook (Transaction.on_checkpoint);
this wrapper is the one thing that sets it.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from lxcfix import cli  # noqa: E402
from lxcfix.transaction import Transaction  # noqa: E402


def pause_at(step: str, marker: str):
    def checkpoint(name: str) -> None:
        if name != step:
            return
        with open(marker, "w") as f:
            f.write(f"{os.getpid()} {step}\n")
        deadline = time.monotonic() + 60
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.02)

    return checkpoint


if __name__ == "__main__":
    step, marker, *args = sys.argv[1:]
    Transaction.on_checkpoint = staticmethod(pause_at(step, marker))
    cli.main(args)
