"""Plans: minimal, correct, stable (plan, apply, plan again: nothing), never over-broad."""

from __future__ import annotations

import pytest

from lxcfix import ctconfig, devices, gather, repair
from lxcfix.backends import Lxc, Proxmox
from lxcfix.errors import BadInput
from lxcfix.plan import make_plan
from lxcfix.transport import RootDir

from .conftest import CORPUS, EXAMPLES, make_ctx, make_facts
from .test_rules import GPU, TUN

STYLES = ["numeric", "path", "devn"]


def added(plan) -> list[str]:
    return [l[1:] for l in plan.diff().splitlines() if l.startswith("+") and not l.startswith("+++")]


def removed(plan) -> list[str]:
    return [l[1:] for l in plan.diff().splitlines() if l.startswith("-") and not l.startswith("---")]


def replan(plan, flavor="pve", facts=None, requested=None):
    return make_plan(make_ctx(plan.after, flavor=flavor, facts=facts), requested or plan.style)


def test_stale_major_numeric_moves_the_rule_in_place():
    plan = make_plan(make_ctx(GPU), "numeric")
    assert removed(plan) == ["lxc.cgroup2.devices.allow: c 508:* rwm"]
    assert added(plan) == ["lxc.cgroup2.devices.allow: c 511:* rwm"]
    assert plan.after.index(b"c 511:* rwm") == GPU.encode().index(b"c 508:* rwm")
    assert replan(plan).is_empty


def test_stale_major_auto_devn_replaces_only_the_broken_pairs():
    facts = make_facts(pve_version="8.3.0")
    plan = make_plan(make_ctx(GPU, facts=facts), "auto")
    assert plan.style == "devn"
    # mode=0666: Proxmox would create the node 0660 root:root, and NVIDIA's nodes are 0666.
    assert added(plan) == ["dev0: /dev/nvidia-uvm,mode=0666", "dev1: /dev/nvidia-uvm-tools,mode=0666"]
    assert removed(plan) == [
        "lxc.cgroup2.devices.allow: c 508:* rwm",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file",
    ]
    assert replan(plan, facts=facts, requested="auto").is_empty


def test_explicit_devn_migrates_every_allow_and_mount_pair():
    plan = make_plan(make_ctx(GPU.replace("c 508:* rwm", "c 511:* rwm")), "devn")
    assert added(plan) == ["dev0: /dev/nvidia0,mode=0666", "dev1: /dev/nvidiactl,mode=0666",
                           "dev2: /dev/nvidia-uvm,mode=0666", "dev3: /dev/nvidia-uvm-tools,mode=0666"]
    assert not [l for l in plan.after.decode().splitlines() if l.startswith("lxc.")]
    assert replan(plan).is_empty


def test_devn_keeps_uid_gid_and_mode_of_the_host_node():
    from lxcfix.model import DeviceNode
    nodes = {"/dev/dri/renderD128": DeviceNode("/dev/dri/renderD128", "c", 226, 128, 0o20660, 0, 104),
             "/dev/dri/card0": DeviceNode("/dev/dri/card0", "c", 226, 0, 0o20660, 0, 44)}
    facts = make_facts(nodes=nodes)
    text = ("lxc.cgroup2.devices.allow: c 226:* rwm\n"
            "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file\n")
    plan = make_plan(make_ctx(text, facts=facts), "devn")
    assert added(plan) == ["dev0: /dev/dri/renderD128,gid=104"]
    assert removed(plan) == ["lxc.cgroup2.devices.allow: c 226:* rwm",
                             "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file"]


def test_explicit_path_style_converts_pinned_dynamic_majors():
    plan = make_plan(make_ctx(GPU.replace("c 508:* rwm", "c 511:* rwm")), "path")
    assert removed(plan) == ["lxc.cgroup2.devices.allow: c 511:* rwm"]
    assert added(plan) == ["lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm",
                           "lxc.cgroup2.devices.allow: /dev/nvidia-uvm-tools rwm"]
    assert replan(plan).is_empty
    assert [f.code for f in replan(plan).findings] == []  # LXF103 gone


def test_stale_major_path_style():
    plan = make_plan(make_ctx(GPU), "path")
    assert added(plan) == ["lxc.cgroup2.devices.allow: /dev/nvidia-uvm rwm",
                           "lxc.cgroup2.devices.allow: /dev/nvidia-uvm-tools rwm"]
    assert replan(plan).is_empty


def test_tun_gets_its_exact_minor_never_10_star():
    plan = make_plan(make_ctx(TUN), "numeric")
    assert added(plan) == ["lxc.cgroup2.devices.allow: c 10:200 rwm"]
    assert replan(plan).is_empty


def test_tun_devn_and_path():
    assert added(make_plan(make_ctx(TUN), "devn")) == ["dev0: /dev/net/tun,mode=0666"]
    assert added(make_plan(make_ctx(TUN), "path")) == ["lxc.cgroup2.devices.allow: /dev/net/tun rwm"]


def test_devn_numbers_after_existing_entries():
    plan = make_plan(make_ctx("dev3: /dev/dri/renderD128\n" + TUN), "devn")
    assert added(plan) == ["dev4: /dev/net/tun,mode=0666"]


def test_v1_keys_become_v2_in_place_but_never_an_allow_all():
    text = "lxc.cgroup.devices.allow: c 10:200 rwm\nlxc.cgroup.devices.allow: a\n" + TUN
    plan = make_plan(make_ctx(text), "numeric")
    assert removed(plan) == ["lxc.cgroup.devices.allow: c 10:200 rwm"]
    assert added(plan) == ["lxc.cgroup2.devices.allow: c 10:200 rwm"]
    assert replan(plan).is_empty


def test_allowed_not_passed_gets_mount_entries():
    plan = make_plan(make_ctx("arch: amd64\nlxc.cgroup2.devices.allow: c 226:* rwm\n"), "numeric")
    assert added(plan) == [
        "lxc.mount.entry: /dev/dri/card0 dev/dri/card0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file",
    ]
    assert replan(plan).is_empty


def test_plain_lxc_lines_use_equals():
    text = "lxc.include = /usr/share/lxc/config/common.conf\nlxc.mount.entry = /dev/net/tun dev/net/tun none bind,create=file 0 0\n"
    facts = make_facts(backend="lxc")
    plan = make_plan(make_ctx(text, flavor="lxc", facts=facts), "numeric")
    assert added(plan) == ["lxc.cgroup2.devices.allow = c 10:200 rwm"]


def test_devn_style_on_plain_lxc_is_bad_input():
    with pytest.raises(BadInput):
        make_plan(make_ctx("lxc.arch = x\n", flavor="lxc", facts=make_facts(backend="lxc")), "devn")
    with pytest.raises(BadInput):
        make_plan(make_ctx(TUN), "bogus")


@pytest.mark.parametrize("pve,lxc,flavor,style", [
    ("8.3.0", None, "pve", "devn"), ("8.0.4", None, "pve", "path"), (None, "5.0.2", "lxc", "path"),
    (None, None, "pve", "numeric"), (None, None, "lxc", "numeric"),
])
def test_auto_style(pve, lxc, flavor, style):
    facts = make_facts(backend=flavor, pve_version=pve, lxc_version=lxc)
    text = TUN if flavor == "pve" else "lxc.arch = x\n"
    plan = make_plan(make_ctx(text, flavor=flavor, facts=facts), "auto")
    assert plan.style == style and plan.style_reason


def test_snapshot_sections_stay_byte_identical():
    raw = GPU + "\n[snap1]\n" + GPU + "\n[pve:pending]\n" + TUN
    for style in STYLES:
        plan = make_plan(make_ctx(raw), style)
        tail = lambda b: b[b.index(b"[snap1]"):]
        assert tail(plan.after) == tail(raw.encode())


# ---- every fixture we have: stable and never over-broad


def example_contexts():
    """Each bundled snapshot's containers in the view a scan judges them in."""
    for snap in sorted(EXAMPLES.iterdir()):
        if not snap.is_dir():
            continue
        for c in repair.scan(repair.open_target(str(snap)), None, keep_context=True).containers:
            yield f"{snap.name}/{c.ct}", c.context


def corpus_contexts():
    """One param per corpus config, marked `corpus`; without ../shared/corpus one param
    that skips (conftest.CORPUS_MISSING), so the absence shows instead of passing silently."""
    if not CORPUS.is_dir():
        yield pytest.param("corpus", None, marks=pytest.mark.corpus, id="corpus")
        return
    facts = {f: make_facts(backend=f) for f in ("pve", "lxc")}
    for path in sorted(CORPUS.glob("*/*.conf")):
        flavor = "pve" if path.parent.name == "pve" else "lxc"
        name = f"corpus/{path.name}"
        yield pytest.param(name, make_ctx(path.read_bytes(), flavor=flavor, facts=facts[flavor]),
                           marks=pytest.mark.corpus, id=name)


ALL = [pytest.param(name, ctx, id=name) for name, ctx in example_contexts()] + list(corpus_contexts())


@pytest.mark.parametrize("name,ctx", ALL)
def test_plan_is_stable_and_safe_in_every_style(name, ctx):
    for style in STYLES:
        if style == "devn" and ctx.config.flavor != "pve":
            continue
        plan = make_plan(ctx, style)
        cfg = ctconfig.parse(plan.after, ctx.config.flavor, ctx.config.path)
        again = make_plan(gather.context(ctx.facts, gather.Loaded(ctx.ct, ctx.config.path, cfg),
                                         lambda p: None), style)
        assert again.is_empty, f"{name} {style}: second plan not empty\n{again.diff()}"
        for line in added(plan):
            key, _, value = line.replace(" = ", ": ", 1).partition(": ")
            if "devices.allow" in key:
                assert not devices.is_overbroad(devices.parse_rule(value)), f"{name}: emitted {line}"
        rest = lambda b: [l.raw for l in ctconfig.parse(b, ctx.config.flavor).lines if l.section is not None]
        assert rest(plan.after) == rest(plan.before)


def test_examples_have_the_documented_findings():
    got = {name: sorted(f.code for f in make_plan(ctx).findings) for name, ctx in example_contexts()}
    assert got == {
        "lxc-healthy/vpn": [], "lxc-healthy/web": [],
        "pve-gpu-host/200": ["LXF101"], "pve-gpu-host/201": ["LXF100"],
        "pve-gpu-host/202": [], "pve-gpu-host/203": ["LXF120"],
        "pve-kernel-upgrade/300": [], "pve-kernel-upgrade/301": [], "pve-kernel-upgrade/302": ["LXF140"],
        "pve-kernel-upgrade/303": ["LXF100", "LXF102"],
        "pve-kernel-upgrade/304": ["LXF152", "LXF153", "LXF153"],
    }


# ---------------------------------------------------------------- issue 21 row 10: a bounded diff


def _big_config(n: int = 100_000) -> list[str]:
    # no line unique: difflib's popular-line heuristic then finds no match at all
    return [f"lxc.mount.entry: /srv/d{i % 60} srv/d{i % 60} none bind,optional 0 0\n" for i in range(n)]


@pytest.mark.parametrize("where", ["top", "middle", "top-and-bottom"])
def test_a_one_line_change_in_a_100k_line_config_is_a_diff_of_a_few_lines(where):
    from lxcfix.model import Plan

    lines = _big_config()
    new = "lxc.cgroup2.devices.allow: c 10:200 rwm\n"
    if where == "top":
        after = [new] + lines
    elif where == "middle":
        after = lines[:50_000] + [new] + lines[50_000:]
    else:
        after = [new] + lines[:-1]
    before, after_b = "".join(lines).encode(), "".join(after).encode()
    plan = Plan("200", "/etc/pve/lxc/200.conf", ctconfig.digest(before), before, after_b)
    diff = plan.diff().splitlines()
    assert len(diff) <= 20, len(diff)
    assert diff[:2] == ["--- a/etc/pve/lxc/200.conf", "+++ b/etc/pve/lxc/200.conf"]
    assert [l for l in diff if l.startswith("+") and not l.startswith("+++")] == ["+" + new.rstrip("\n")]
    assert sum(1 for l in diff if l.startswith(" ")) <= 3 * 4  # 3 lines of context a side, as diff -u


def test_the_bounded_diff_is_difflibs_text_and_applies_back():
    """Wherever difflib finds the changes, the text is difflib's own; and every diff, applied
    to the old lines, gives the new ones."""
    import difflib
    import random

    from lxcfix import model

    rng = random.Random(21)
    for _ in range(300):
        a = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 300))]
        b = list(a)
        for _ in range(rng.randint(1, 6)):
            i = rng.randint(0, len(b))
            b[i:i + rng.randint(0, 2)] = [rng.choice("abxyz") + "\n"] * rng.randint(0, 2)
        ops = model._opcodes(a, b)
        rebuilt = [line for tag, i1, i2, j1, j2 in ops for line in (a[i1:i2] if tag == "equal" else b[j1:j2])]
        assert rebuilt == b
        assert all(a[i1:i2] == b[j1:j2] for tag, i1, i2, j1, j2 in ops if tag == "equal")
        small = difflib.SequenceMatcher(None, a, b).get_opcodes()
        assert model._unified_lines(a, b, "x", "y", small) == list(difflib.unified_diff(a, b, "x", "y"))


def test_a_diff_of_distinct_lines_is_difflibs_text():
    """Where every line occurs once on each side, the diff matches only the middle between the
    common head and tail (model._unified's shortcut), and its text is difflib's own: edits of
    every kind (insert, delete, replace, move) and unrelated files, 20,000 cases. With a line
    twice on one side difflib may pair it elsewhere: that case is difflib's (checked too)."""
    import difflib
    import random

    from lxcfix import model

    rng = random.Random(22)
    for _ in range(20_000):
        alpha = [f"key{i}: {i}\n" for i in range(rng.randint(1, 40))]
        a = rng.sample(alpha, rng.randint(0, len(alpha)))
        if rng.random() < 0.6:
            b = list(a)
            for _ in range(rng.randint(0, 4)):
                pool = [x for x in alpha if x not in b]
                op = rng.random()
                if op < 0.5 and pool:
                    b.insert(rng.randint(0, len(b)), rng.choice(pool))
                elif op < 0.75 and b:
                    del b[rng.randrange(len(b))]
                elif b and pool:
                    b[rng.randrange(len(b))] = rng.choice(pool)
                elif len(b) > 1:
                    b.insert(rng.randint(0, len(b) - 1), b.pop(rng.randrange(len(b))))
        else:
            b = rng.sample(alpha, rng.randint(0, len(alpha)))
        before, after = "".join(a).encode(), "".join(b).encode()
        want = "".join(difflib.unified_diff(a, b, "a/x", "b/x", n=3))
        assert model._unified("/x", before, after) == want, (a, b)
    a, b = ["A\n", "C\n", "D\n"], ["A\n", "X\n", "A\n", "C\n", "D\n"]  # A twice in b: difflib pairs the second
    assert model._unified("/x", "".join(a).encode(), "".join(b).encode()) == \
        "".join(difflib.unified_diff(a, b, "a/x", "b/x", n=3))
