"""One layer deeper (lxcfix.nested, rules.nested): the inner containers the probe lists, and
which layer denies a node, from recorded probe outputs (tests/unit/fixtures/nested/README.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lxcfix import nested, probe
from lxcfix.model import Result
from lxcfix.nested import Inner, InnerSeen
from lxcfix.rules import nested as nested_rule
from lxcfix.transport import ContainerExec, InnerExec

from .conftest import codes, make_ctx

FIX = Path(__file__).resolve().parent / "fixtures" / "nested"
TUN_CONF = "lxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0\n"
EXPECTED = {"/dev/net/tun": ("c", 10, 200)}
RUNC1 = Inner("runc", "-", "inner1")


def recorded(name: str) -> tuple[probe.ProbeResult, probe.ProbeResult]:
    return (probe.parse((FIX / f"{name}.outer.txt").read_text()), probe.parse((FIX / f"{name}.inner.txt").read_text()))


def test_the_probe_lists_runc_docker_and_podman_containers_and_nothing_else():
    outer, _ = recorded("lxc-denies")
    assert nested.listed(outer.raw) == (RUNC1,)
    docker, _ = recorded("docker-volume")
    found = nested.listed(docker.raw)
    assert [i.label for i in found] == ["docker:frigate", "docker:mqtt", "podman:immich_server"]  # once each
    assert not any("rm" in i.name for i in found)  # a line that is not what docker prints is skipped


@pytest.mark.parametrize("line", [
    "inner docker 3f4e5d6c7b8a frig ate", "inner lxc - web", "inner runc - -rf", "inner runc - a/b",
    "inner docker 3F4E5D6C7B8A frigate", "inner runc - " + "a" * 200, "inner docker  frigate",
    "inner runc - web\x1b[2J", "inner runc - w\u00e9b",
])
def test_a_hostile_inner_line_is_skipped(line):
    assert nested.listed(f"lxcfix-probe 1\n{line}\nend\n") == ()


def test_at_most_max_inner_are_read():
    text = "".join(f"inner runc - c{i}\n" for i in range(nested.MAX_INNER + 50))
    assert len(nested.listed(text)) == nested.MAX_INNER


def test_exec_argv_is_a_list_through_each_runtime_and_the_lxc_attach_with_a_cleared_environment():
    assert nested.exec_argv(RUNC1, ["sh", "-c", "x"]) == ["runc", "--root", "/run/runc", "exec", "inner1",
                                                           "sh", "-c", "x"]
    d = Inner("docker", "3f4e5d6c7b8a", "frigate")
    assert nested.exec_argv(d, ["true"]) == ["docker", "exec", "3f4e5d6c7b8a", "true"]
    assert nested.exec_argv(Inner("podman", "-", "immich"), ["true"]) == ["podman", "exec", "immich", "true"]
    with pytest.raises(ValueError):
        nested.exec_argv(Inner("docker", "-", "-v"), ["true"])

    calls = []

    class Host:
        name, local = "h", False

        def run(self, argv, **kw):
            calls.append((list(argv), kw))
            return Result(0, "lxcfix-probe 1\nend\n", "")

    t = InnerExec(ContainerExec(Host(), "200", "pve"), d)
    t.run(probe.probe_argv(["/dev/net/tun"]), timeout=30, max_output=1000)
    (argv, kw), = calls
    assert argv[:4] == ["lxc-attach", "-n", "200", "--clear-env"]
    assert argv[argv.index("--") + 1:][:4] == ["docker", "exec", "3f4e5d6c7b8a", "sh"]
    assert argv[-1] == "/dev/net/tun" and kw["timeout"] == 30 and kw["max_output"] == 1000
    assert t.name == "h/200/docker:frigate"


def test_select_by_name_runtime_id_prefix_or_all():
    found = nested.listed(recorded("docker-volume")[0].raw)
    assert nested.select(found, "all")[0] == list(found)
    assert [i.name for i in nested.select(found, "frigate")[0]] == ["frigate"]
    assert [i.name for i in nested.select(found, "podman:immich_server")[0]] == ["immich_server"]
    assert [i.name for i in nested.select(found, "3f4e5d6c7b8a")[0]] == ["frigate"]
    assert nested.select(found, "docker:immich_server") == ([], ["docker:immich_server"])
    assert nested.valid_want("docker:frigate,mqtt") and nested.valid_want("all")
    assert not nested.valid_want("lxc:web") and not nested.valid_want("a b") and not nested.valid_want("")


def _classify(name: str, inner: Inner = RUNC1):
    outer, seen = recorded(name)
    return nested.classify_inner("200", "localhost", InnerSeen(inner, seen), outer, EXPECTED)


def test_the_lxc_layer_denies():
    (f,) = _classify("lxc-denies")
    assert (f.code, f.device, f.numbers) == ("LXF220", "/dev/net/tun", ("c", 10, 200))
    assert "LXC layer" in f.message and "c 10:200 rwm" in f.fix.title and "LXF200" in f.fix.title
    assert "in CT 200 itself: open /dev/net/tun: EPERM" in f.evidence


def test_the_inner_container_not_given_the_node_gets_the_runtimes_own_lines():
    (f,) = _classify("inner-not-given")
    assert f.code == "LXF221" and f.fix.applicability == "manual"
    assert any('linux.devices: {"path": "/dev/net/tun", "type": "c", "major": 10, "minor": 200' in n
               for n in f.fix.notes)
    (d,) = _classify("inner-not-given", Inner("docker", "3f4e5d6c7b8a", "frigate"))
    assert d.fix.notes == ("docker run --device /dev/net/tun:/dev/net/tun ...",
                           'compose: devices: ["/dev/net/tun:/dev/net/tun"]')


def test_the_inner_runtimes_device_cgroup_denies_a_volume_mounted_node():
    (f,) = _classify("docker-volume", Inner("docker", "3f4e5d6c7b8a", "frigate"))
    assert f.code == "LXF222" and "--device-cgroup-rule 'c 10:200 rwm'" in f.fix.title


def test_both_layers_given_nothing_to_say():
    assert _classify("both-given") == []


def test_an_inner_probe_that_could_not_run_is_a_warning_never_an_exception():
    (f,) = nested.classify_inner("200", "h", InnerSeen(RUNC1, error="exec failed: no sh\x1b[2J"), None, EXPECTED)
    assert f.code == "LXF223" and f.severity == "warning" and "\x1b" not in f.message
    (g,) = nested.classify_inner("200", "h", InnerSeen(Inner("?", "-", "nosuch"), error="not running"), None, EXPECTED)
    assert g.code == "LXF223" and g.evidence == ()


def test_the_rule_lists_inner_containers_and_classifies_the_ones_probed():
    outer, inner = recorded("lxc-denies")
    ctx = replace(make_ctx(TUN_CONF, flavor="lxc"), probe=outer)
    (listed,) = nested_rule.check(ctx)
    assert listed.code == "LXF224" and listed.severity == "info" and "--inner all" in listed.evidence[0]
    probed = replace(ctx, inner=(InnerSeen(RUNC1, inner),))
    assert codes(nested_rule.check(probed)) == ["LXF220", "LXF224"]
    assert probed.with_config(ctx.config).inner == ()  # a planned config is not what was seen inside
    assert nested_rule.check(replace(ctx, probe=None)) == []


# ---------------------------------------------------------------- one budget for all inner probes (issue 30 item 3)

from lxcfix import observe  # noqa: E402

LISTED_256 = probe.parse("lxcfix-probe 1\n" + "".join(f"inner runc - c{i}\n" for i in range(256)) + "end\n")


class Tenant:
    """An LXC container whose `runc exec` prints `out` bytes of nothing a probe prints (or a
    probe's own answer), within the cap and deadline it is given, as run_bounded does."""

    name, local = "h", False

    def __init__(self, out: int = 0, answer: str = "lxcfix-probe 1\nend\n"):
        self.out, self.answer, self.calls = out, answer, []

    def run(self, argv, timeout=None, max_output=None, **kw):
        self.calls.append((timeout, max_output))
        if not self.out:
            return Result(0, self.answer, "")
        text = "x" * min(self.out, max_output)
        return Result(125, text, "", "stdout") if self.out > max_output else Result(0, text, "")


def _probed(tenant):
    return observe.probe_inner(ContainerExec(tenant, "200", "lxc"), "200", LISTED_256, "all", ["/dev/net/tun"])


def test_256_inner_containers_are_probed_at_most_inner_probed_and_the_rest_is_one_finding():
    """Before: every one of the 256 listed was probed, one after another, each with its own 30 s."""
    tenant = Tenant()
    seen = _probed(tenant)
    assert len(tenant.calls) == nested.INNER_PROBED
    assert all(s.probe is not None and s.probe.raw == "" for s in seen[:nested.INNER_PROBED])  # parsed, dropped
    last = seen[-1]
    assert last.probe is None and len(last.rest) == 256 - nested.INNER_PROBED - 1
    (f,) = nested.classify_inner("200", "h", last, None, EXPECTED)
    assert f.code == "LXF223" and f.message.startswith(f"{256 - nested.INNER_PROBED} inner containers of CT 200 "
                                                       "not checked: budget: 16 inner containers probed")


def test_outputs_of_1_mib_each_share_one_output_budget():
    """Before: 256 outputs of 1 MiB, each kept whole (1 GiB for one diagnose)."""
    tenant = Tenant(out=1024 * 1024)
    seen = _probed(tenant)
    assert sum(cap for _, cap in tenant.calls) <= nested.INNER_OUTPUT
    assert len(tenant.calls) == nested.INNER_OUTPUT // (1024 * 1024)
    assert "output are spent" in seen[-1].error and seen[-1].rest


def test_each_probe_gets_what_is_left_of_the_total_deadline(monkeypatch):
    monkeypatch.setenv("LXCFIX_INNER_DEADLINE", "5")
    tenant = Tenant()
    _probed(tenant)
    timeouts = [t for t, _ in tenant.calls]
    assert all(t <= 5 for t in timeouts) and timeouts == sorted(timeouts, reverse=True)
