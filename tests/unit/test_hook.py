"""hook: the pure decisions of the Proxmox hookscript (the real tier drives it through pct)."""

from __future__ import annotations

import pytest

from lxcfix import cli, hook
from lxcfix.model import Finding

STALE = Finding("LXF101", "error", "200", "/dev/nvidia-uvm is c 511:0 on this host; the config allows c 508:* "
                "(stale: the nvidia-uvm major moved)", device="/dev/nvidia-uvm")
MISSING_RULE = Finding("LXF100", "error", "200", "/dev/net/tun is c 10:200 on this host; no cgroup2 rule allows it",
                       device="/dev/net/tun")
ABSENT = Finding("LXF112", "error", "200", "/dev/nvidia-uvm does not exist on the host: the container starts "
                 "without it", device="/dev/nvidia-uvm")
PINNED = Finding("LXF103", "warning", "200", "c 511:* rwm pins the dynamic major of nvidia-uvm")


def test_clean_pre_start_passes():
    d = hook.decide("200", "pre-start", "fail", [PINNED])
    assert (d.action, d.exit_code, d.blocking) == ("pass", 0, ())


def test_fail_mode_blocks_with_one_message_naming_lxcfix_apply():
    d = hook.decide("200", "pre-start", "fail", [PINNED, STALE])
    assert (d.action, d.exit_code, d.blocking) == ("block", 1, (STALE,))
    assert d.message == (
        "lxcfix: CT 200 must not start with broken device passthrough: LXF101 /dev/nvidia-uvm is c 511:0 on this "
        "host; the config allows c 508:* (stale: the nvidia-uvm major moved). Run: lxcfix apply --ct 200 "
        "(or set the hookscript to --mode heal).")
    assert "\n" not in d.message


def test_missing_node_says_nvidia_modprobe_and_the_boot_unit():
    d = hook.decide("200", "pre-start", "fail", [MISSING_RULE, ABSENT])
    assert d.message.endswith("Run: lxcfix apply --ct 200; then /usr/bin/nvidia-modprobe -u -c0 (and `lxcfix "
                              "host-fix` to do it at every boot) (or set the hookscript to --mode heal).")


def test_heal_mode_heals_and_other_phases_pass():
    assert hook.decide("200", "pre-start", "heal", [STALE]).action == "heal"
    assert hook.decide("200", "post-start", "fail", [STALE]) == hook.Decision("record", 0)
    for phase in ("pre-stop", "post-stop", "pre-migrate"):
        assert hook.decide("200", phase, "fail", [STALE]) == hook.Decision("pass", 0)
    with pytest.raises(ValueError):
        hook.decide("200", "pre-start", "repair", [])


def test_only_errors_of_the_blocking_codes_block():
    warning = Finding("LXF101", "warning", "200", "x")
    other = Finding("LXF200", "error", "200", "open: EPERM")
    assert hook.blocking_findings([warning, other, PINNED]) == []


@pytest.mark.parametrize("device, argv", [
    ("/dev/nvidia-uvm", ["/usr/bin/nvidia-modprobe", "-u", "-c0"]),
    ("/dev/nvidia-uvm-tools", ["/usr/bin/nvidia-modprobe", "-u", "-c0"]),
    ("/dev/nvidia3", ["/usr/bin/nvidia-modprobe", "-c3"]),
    ("/dev/nvidiactl", ["/usr/bin/nvidia-modprobe", "-c255"]),
    ("/dev/nvidia-modeset", ["/usr/bin/nvidia-modprobe", "-m"]),
    ("/dev/net/tun", None),
])
def test_modprobe_argv(device, argv):
    assert hook.modprobe_argv(device) == argv


def test_the_generated_config_never_gets_devn():
    assert [hook.generated_style(s) for s in ("auto", "devn", "path", "numeric")] == ["path", "path", "path", "numeric"]


def test_snippet_is_a_sh_wrapper_passing_proxmox_arguments():
    text = hook.snippet("heal")
    assert text.startswith("#!/bin/sh\n") and text.endswith('\nexec lxcfix hook --mode heal "$@"\n')
    assert text.count("\nexec ") == 1
    custom = hook.snippet("fail", ["/opt/venv/bin/python3", "-m", "lxcfix.hook", "--style", "path"])
    assert custom.endswith('\nexec /opt/venv/bin/python3 -m lxcfix.hook --style path --mode fail "$@"\n')
    with pytest.raises(ValueError):
        hook.snippet("nope")


def test_run_hook_usage_and_ignored_phases_need_no_host():
    assert hook.run_hook("200", "pre-start", "nope").exit_code == 2
    assert hook.run_hook("200", "pre-start", "fail", style="weird").exit_code == 2
    assert hook.run_hook("200", "pre-stop", "fail") == hook.HookResult(0, "", "pass")
    assert hook.run_hook("200", "post-stop", "heal").exit_code == 0


def test_main_parses_proxmox_argv(monkeypatch, capsys):
    seen = {}

    def fake(vmid, phase, mode, style):
        seen.update(vmid=vmid, phase=phase, mode=mode, style=style)
        return hook.HookResult(1, "lxcfix: CT 200 must not start", "block")

    monkeypatch.setattr(hook, "run_hook", lambda vmid, phase, mode, *, style: fake(vmid, phase, mode, style))
    assert cli.run(["hook", "--mode", "fail", "200", "pre-start"]) == 1
    assert seen == {"vmid": "200", "phase": "pre-start", "mode": "fail", "style": "auto"}
    assert capsys.readouterr().err == "lxcfix: CT 200 must not start\n"
    assert cli.run(["hook", "--mode", "bogus", "200", "pre-start"]) == 2


def test_installed_command_is_absolute_so_proxmoxs_path_need_not_find_it(tmp_path, monkeypatch):
    """Proxmox runs the hookscript with PATH=/sbin:/bin:/usr/sbin:/usr/bin; the snippet names the
    console script by the path it was run from (pipx: /usr/local/bin/lxcfix), else `python -m`."""
    script = tmp_path / "bin" / "lxcfix"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert hook.installed_command(str(script), "/v/bin/python3") == [str(script), "hook"]
    monkeypatch.setenv("PATH", str(script.parent))
    assert hook.installed_command("lxcfix", "/v/bin/python3") == [str(script), "hook"]  # found on the admin's PATH
    monkeypatch.chdir(tmp_path)
    assert hook.installed_command("bin/lxcfix", "/v/bin/python3") == [str(script), "hook"]
    assert hook.installed_command("/src/lxcfix/__main__.py", "/v/bin/python3") == \
        ["/v/bin/python3", "-m", "lxcfix", "hook"]
    assert hook.installed_command(str(tmp_path / "gone" / "lxcfix"), "/v/bin/python3")[1:] == ["-m", "lxcfix", "hook"]
    text = hook.snippet("fail", hook.installed_command(str(script), "/v/bin/python3"))
    assert text.endswith(f'\nexec {script} hook --mode fail "$@"\n') and f"command -v {script} " in text
