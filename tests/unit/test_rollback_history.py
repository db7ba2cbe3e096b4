"""`lxcfix rollback` goes back one change in the journal's history at a time (apply.history):
a second rollback goes one further back or says there is nothing earlier, never re-applies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lxcfix import cli
from lxcfix.apply import Change, History, history, restored_lines, when

REPO = Path(__file__).resolve().parents[2]
PATH = "/etc/pve/lxc/201.conf"


def run(tx: str, backup: str, before: str, after: str, *names: str, restored_from: str | None = None,
        time: str = "2026-12-03T10:00:00.000+00:00") -> list[dict]:
    """One run's journal events: its "backup" event, then `names`."""
    base = dict(ct="201", path=PATH, tx=tx, backup=backup, digest_before=before, digest_after=after, time=time)
    if restored_from:
        base["restored_from"] = restored_from
    return [dict(base, event="backup")] + [dict(base, event=n) for n in names]


def change(backup: str, before: str, after: str, time: str = "2026-12-03T10:00:00.000+00:00") -> Change:
    return Change(backup, time, before, after)


def test_each_rollback_undoes_the_last_change_in_effect_and_then_there_is_none():
    a = run("1", "b/A", "d0", "d1", "written", "done")
    b = run("2", "b/B", "d1", "d2", "written", "done")
    assert history(a + b) == History((change("b/A", "d0", "d1"), change("b/B", "d1", "d2")))
    undo_b = run("3", "b/R1", "d2", "d1", "restored", "done", restored_from="b/B")
    h = history(a + b + undo_b)
    assert h.changes == (change("b/A", "d0", "d1"),) and h.undone == ((change("b/B", "d1", "d2"), undo_b[0]),)
    undo_a = run("4", "b/R2", "d1", "d0", "restored", "done", restored_from="b/A")
    h = history(a + b + undo_b + undo_a)
    assert h.changes == () and [c.backup for c, _ in h.undone] == ["b/B", "b/A"]
    # the rollbacks' own backups are no changes: nothing would restore b/R2 (the toggle)
    assert "b/R2" not in {c.backup for c in h.changes}


def test_a_rollback_to_an_older_backup_undoes_every_later_change():
    events = (run("1", "b/A", "d0", "d1", "written", "done") + run("2", "b/B", "d1", "d2", "written", "done")
              + run("3", "b/R", "d2", "d0", "restored", "done", restored_from="b/A"))
    h = history(events)
    assert h.changes == () and [c.backup for c, _ in h.undone] == ["b/B", "b/A"]


def test_what_counts_as_a_change():
    failed = run("1", "b/F", "d0", "d1", "written", "failed", "rolled-back")  # undone by its own failure
    before_write = run("2", "b/K", "d0", "d1")  # killed after its backup, before the write: nothing changed
    killed = run("3", "b/W", "d0", "d1", "written")  # killed after the write: in effect
    assert history(failed + before_write + killed).changes == (change("b/W", "d0", "d1"),)
    # a rollback that restored a backup of no change in effect (an older journal's toggle) is a change
    odd = run("4", "b/R", "d1", "d0", "restored", "done", restored_from="b/elsewhere")
    assert history(killed + odd).changes == (change("b/W", "d0", "d1"), change("b/R", "d1", "d0"))
    # a rollback killed before it wrote undoes nothing
    assert history(killed + run("5", "b/R", "d1", "d0", restored_from="b/W")).changes == (change("b/W", "d0", "d1"),)
    assert history([]) == History()


def test_when_and_what_a_restore_changed_read_plainly():
    assert when("2026-12-03T11:44:15.011+00:00") == "2026-12-03 11:44:15 UTC"
    assert when("") == "an unknown time"
    assert restored_lines(["-dev0: /dev/net/tun", "+lxc.mount.entry: x"]) == \
        "removed 'dev0: /dev/net/tun'; put back 'lxc.mount.entry: x'"
    assert restored_lines([]) == "no line changed"


def cli_run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def test_apply_rollback_rollback_on_a_snapshot_never_reapplies(tmp_path, capsys):
    snap = tmp_path / "s"
    shutil.copytree(REPO / "examples" / "pve-gpu-host", snap)
    conf = snap / "etc/pve/lxc/201.conf"
    original = conf.read_bytes()
    rc, _, err = cli_run(capsys, "apply", "--ct", "201", "--root", str(snap), "--yes", "--no-restart")
    assert rc == 0, err
    applied = conf.read_bytes()
    assert applied != original and b"dev0: /dev/net/tun" in applied

    rc, out, err = cli_run(capsys, "rollback", "--ct", "201", "--root", str(snap))
    assert rc == 0, err
    assert conf.read_bytes() == original
    assert out.startswith("CT 201: undid lxcfix's change of 20") and " UTC: /etc/pve/lxc/201.conf restored from " in out
    assert "removed 'dev0: /dev/net/tun,mode=0666'; put back 'lxc.mount.entry: /dev/net/tun" in out
    assert "a snapshot: no container restarted" in out

    for _ in range(2):  # a second and a third: nothing earlier, nothing changed (the toggle re-applied)
        rc, out, err = cli_run(capsys, "rollback", "--ct", "201", "--root", str(snap))
        assert rc == 2 and out == "", out
        assert "CT 201: nothing earlier to roll back" in err and "nothing changed" in err
        assert conf.read_bytes() == original


def test_two_changes_are_undone_newest_first(tmp_path, capsys):
    snap = tmp_path / "s"
    shutil.copytree(REPO / "examples" / "pve-gpu-host", snap)
    conf = snap / "etc/pve/lxc/201.conf"
    states = [conf.read_bytes()]
    for style in ("path", "devn"):  # two changes: a path rule, then a devN entry next to it
        rc, _, err = cli_run(capsys, "apply", "--ct", "201", "--root", str(snap), "--yes", "--no-restart",
                             "--style", style)
        assert rc == 0, err
        states.append(conf.read_bytes())
    assert len(set(states)) == 3
    for back_to in (states[1], states[0]):
        rc, out, err = cli_run(capsys, "rollback", "--ct", "201", "--root", str(snap))
        assert rc == 0, err
        assert conf.read_bytes() == back_to and out.startswith("CT 201: undid lxcfix's change of ")
    rc, _, err = cli_run(capsys, "rollback", "--ct", "201", "--root", str(snap))
    assert rc == 2 and "nothing earlier to roll back" in err and conf.read_bytes() == states[0]
