"""Put on PYTHONPATH (with LXCFIX_TEST_EDIT_AT_PLANNED=<config path>) for any Python that
runs lxcfix, the CLI or an Ansible module: the config is edited after lxcfix planned it,
before its transaction is checked or run (the "planned" checkpoint), as an admin editing
it meanwhile would. Like pausing.py, the production code has only the hook
(Transaction.on_checkpoint); this file is what sets it, in the tests only."""

import os

EDIT = b"# lxcfix-test: edited between plan and apply "


def edit(path: str) -> None:
    """Replace the previous test edit (the config's last line, if it is one) by a new one:
    the digest differs every time, and the config is the original plus one comment line."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.splitlines(keepends=True)
    if lines and lines[-1].startswith(EDIT):
        data = b"".join(lines[:-1])
    with open(path, "wb") as f:
        f.write(data + EDIT + os.urandom(4).hex().encode() + b"\n")


def install(path: str) -> None:
    from lxcfix.transaction import Transaction

    def checkpoint(name: str) -> None:
        if name == "planned":
            edit(path)

    Transaction.on_checkpoint = staticmethod(checkpoint)


if os.environ.get("LXCFIX_TEST_EDIT_AT_PLANNED"):
    install(os.environ["LXCFIX_TEST_EDIT_AT_PLANNED"])
