"""`python3 tests/real/faulting.py STEP lxcfix-args...`: the lxcfix CLI with an exception
nobody expected (a RuntimeError) raised at one checkpoint of its transaction: the rollback
and journal path must take it as it takes a failed verify. Like pausing.py, the production
code has only the hook (Transaction.on_checkpoint); this wrapper is what sets it."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from lxcfix import cli  # noqa: E402
from lxcfix.transaction import Transaction  # noqa: E402


def raise_at(step: str):
    def checkpoint(name: str) -> None:
        if name == step:
            raise RuntimeError(f"injected at {step}")

    return checkpoint


if __name__ == "__main__":
    step, *args = sys.argv[1:]
    Transaction.on_checkpoint = staticmethod(raise_at(step))
    cli.main(args)
