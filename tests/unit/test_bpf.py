"""lxcfix.bpf: decoding LXC's cgroup device programs, reading them over a
Transport, and LXC's device-list semantics.

Fixtures (tests/unit/fixtures/bpf/, README.md there) are real programs that
LXC 5.0.2 attached to real containers, read back with both the bpf() reader
and bpftool. Their expected rules are written out here by hand for the main
cases; every fixture is also checked against (a) a small BPF interpreter
running the raw bytes and (b) LxcDeviceList replaying the config lines.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lxcfix import bpf, observe
from lxcfix.bpf import LiveAllowlist, LxcDeviceList, decode, describe, encode
from lxcfix.model import DeviceRule, Result

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "bpf")


def R(text: str, allow: bool = True) -> DeviceRule:
    """"c 195:* rwm" -> DeviceRule; "a 7:* m" keeps its numbers."""
    kind, nums, access = text.split()
    major, minor = nums.split(":")
    return DeviceRule(kind, None if major == "*" else int(major), None if minor == "*" else int(minor),
                      access, allow=allow)


def D(text: str) -> DeviceRule:
    return R(text, allow=False)


COMMON = [R("c *:* m"), R("b *:* m"), R("c 1:3 rwm"), R("c 1:5 rwm"), R("c 1:7 rwm"), R("c 5:0 rwm"),
          R("c 5:1 rwm"), R("c 5:2 rwm"), R("c 1:8 rwm"), R("c 1:9 rwm"), R("c 136:* rwm"), R("c 10:229 rwm")]


# ----------------------------------------------------------------- fixtures

def read_hex(name: str) -> bytes | None:
    """The program of a .hex fixture; None for "no program attached"."""
    lines = open(os.path.join(FIX, name + ".hex")).read().splitlines()
    data = "".join(l.strip() for l in lines if l.strip() and not l.startswith("#"))
    if not data:
        assert any("no device program" in l for l in lines)
        return None
    return bytes.fromhex(data)


def read_lines(path: str) -> list[tuple[bool, str]]:
    out = []
    for line in open(path).read().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        assert key in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"), line
        out.append((key.endswith(".allow"), value.strip()))
    return out


def read_live_steps(case: str) -> list[tuple[bool, str]]:
    out = []
    for line in open(os.path.join(FIX, case + ".live")).read().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(" ", 1)
            out.append((key == "devices.allow", value))
    return out


CASES = sorted(f[:-5] for f in os.listdir(FIX) if f.endswith(".conf") and f != "common.conf.lines")
PROGRAMS = sorted(f[:-4] for f in os.listdir(FIX) if f.endswith(".hex") and read_hex(f[:-4]) is not None)

# Where the host's device nodes were when the path_form fixture was made.
HOST_NODES = {"/dev/net/tun": ("c", 10, 200), "/dev/fuse": ("c", 10, 229)}

EXPECTED: dict[str, LiveAllowlist | None] = {
    "common_only": LiveAllowlist("allowlist", tuple(COMMON)),
    "shapes": LiveAllowlist("allowlist", tuple(COMMON + [R("c 195:* rwm"), R("c 10:200 rwm"), R("c 511:0 rw"),
                                                         R("b 8:* r")])),
    # live: lxc-cgroup devices.allow 'c 511:* rwm' -> checked first
    "shapes.live1": LiveAllowlist("allowlist", tuple(COMMON + [R("c 195:* rwm"), R("c 10:200 rwm"),
                                                               R("c 511:0 rw"), R("b 8:* r"), R("c 511:* rwm")])),
    # live: devices.deny 'c 195:* rwm' flips the identical allow: gone
    "shapes.live2": LiveAllowlist("allowlist", tuple(COMMON + [R("c 10:200 rwm"), R("c 511:0 rw"), R("b 8:* r"),
                                                               R("c 511:* rwm")])),
    # deny c 1:3 rwm flips common's entry; allow c 1:3 rwm again is a NEW entry
    # at the head; deny c 4:* never emitted; repeated c 10:200 rwm reused in
    # place; "rw" differs from "rwm"; a 1:* has no type check; mrw == all.
    "merge": LiveAllowlist("allowlist", tuple(
        [r for r in COMMON if r != R("c 1:3 rwm")]
        + [R("c 10:200 rwm"), R("c 1:3 rwm"), R("c 10:200 rw"), R("a 1:* rwm"), R("c 10:232 rwm")])),
    # allow a: denylist, common's allows dropped; allow c 1:3 never emitted
    "denylist": LiveAllowlist("denylist", (D("c 5:1 rwm"), D("b *:* rw"), D("c 10:200 rwm"), D("c 195:* w"),
                                           D("a 7:* m"))),
    "denylist.live1": LiveAllowlist("denylist", (D("c 5:1 rwm"), D("b *:* rw"), D("c 10:200 rwm"),
                                                 D("c 195:* w"), D("a 7:* m"), D("c 4:* rwm"))),
    "denylist.live2": LiveAllowlist("denylist", (D("b *:* rw"), D("c 10:200 rwm"), D("c 195:* w"),
                                                 D("a 7:* m"), D("c 4:* rwm"))),
    "mode_switch": LiveAllowlist("allowlist", (R("c 10:200 rwm"),)),
    "mode_switch.live1": LiveAllowlist("denylist", ()),  # live `allow a`: empty denylist program
    # /dev/net/tun -> c 10:200; deny with a path and a missing path: skipped
    "path_form": LiveAllowlist("allowlist", tuple(COMMON + [R("c 10:200 rwm"), R("c 195:* rwm")])),
    "allow_a_only": None,  # empty list at start: no program at all
    "allow_a_only.live1": LiveAllowlist("denylist", (D("c 10:200 rwm"),)),  # a live update attaches one
    "deny_a_only": None,   # no program: every device allowed (measured)
    "deny_only": LiveAllowlist("allowlist", ()),  # list holds one (never emitted) deny: deny everything
    # allow c 1:3 mrw is not cancelled by deny c 1:3 rwm (strcmp), which
    # cancels common's; rw and wr are two entries; deny c 1:7 r cancels
    # allow c 1:7 r; deny c 195:0/195:1 do not carve 195:* up.
    "access_strings": LiveAllowlist("allowlist", tuple(
        [r for r in COMMON if r != R("c 1:3 rwm")]
        + [R("c 1:3 rwm"), R("c 1:5 rw"), R("c 1:5 rw"), R("b 7:0 m"), R("a *:* w"), R("c 195:* rwm")])),
}


def fixture_states() -> list[str]:
    states = []
    for case in CASES:
        states.append(case)
        if os.path.exists(os.path.join(FIX, case + ".live")):
            states += [f"{case}.live{k}" for k in range(1, len(read_live_steps(case)) + 1)]
    return states


def test_every_fixture_state_has_an_expectation():
    assert sorted(fixture_states()) == sorted(EXPECTED)
    assert len(PROGRAMS) >= 12


@pytest.mark.parametrize("state", sorted(EXPECTED))
def test_decode_real_programs(state):
    data = read_hex(state)
    want = EXPECTED[state]
    if want is None:
        assert data is None
        return
    got = decode(data)
    assert got.unknown is False
    assert got.mode == want.mode
    assert got.rules == want.rules
    assert encode(got) == data  # LXC's generator, reproduced byte for byte


@pytest.mark.parametrize("state", sorted(EXPECTED))
def test_lxc_list_semantics_predict_the_real_programs(state):
    """LxcDeviceList replaying common.conf + the case's lines (+ live steps)
    gives exactly what LXC attached."""
    case, _, live = state.partition(".live")
    lines = read_lines(os.path.join(FIX, "common.conf.lines")) + read_lines(os.path.join(FIX, case + ".conf"))
    dl = LxcDeviceList()
    for allow, value in lines:
        dl.add(allow, value, stat=HOST_NODES.get)
    if not live:
        assert dl.at_start() == EXPECTED[state]
        return
    for allow, value in read_live_steps(case)[: int(live)]:
        dl.add(allow, value)  # lxc-cgroup: no path form
    assert dl.program() == EXPECTED[state]


def test_fixture_xlated_text_matches_bytes():
    """The bpftool listing saved next to each program says the same."""
    for name in PROGRAMS:
        text = open(os.path.join(FIX, name + ".xlated")).read()
        data = read_hex(name)
        assert text.count("\n") == len(data) // 8
        assert ("r0 = 1\n" in text.splitlines(keepends=True)[-2]) == (decode(data).mode == "denylist")


# ----------------------------------------------------------------- the kernel's view

class Unsupported(Exception):
    pass


def run_program(data: bytes, dev_type: int, access: int, major: int, minor: int) -> int:
    """A tiny interpreter for the instructions LXC uses: the kernel's answer."""
    ctx = struct.pack("<III", access << 16 | dev_type, major, minor)
    regs = [0] * 11
    insns = [struct.unpack_from("<BBhi", data, i) for i in range(0, len(data), 8)]
    pc = 0
    for _ in range(10000):
        code, r, off, imm = insns[pc]
        dst, src = r & 15, r >> 4
        pc += 1
        if code == 0x61:
            assert src == 1
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif code == 0x54:
            regs[dst] = (regs[dst] & imm) & 0xFFFFFFFF
        elif code == 0x74:
            regs[dst] = (regs[dst] & 0xFFFFFFFF) >> imm
        elif code == 0xBC:
            regs[dst] = regs[src] & 0xFFFFFFFF
        elif code == 0x55:
            if regs[dst] != imm & 0xFFFFFFFFFFFFFFFF:
                pc += off
        elif code == 0x5D:
            if regs[dst] != regs[src]:
                pc += off
        elif code == 0xB7:
            regs[dst] = imm & 0xFFFFFFFFFFFFFFFF
        elif code == 0x95:
            return regs[0]
        else:
            raise Unsupported(hex(code))
    raise Unsupported("loop")


QUERY_MAJORS = [0, 1, 4, 5, 7, 8, 10, 136, 195, 508, 511]
QUERY_MINORS = [0, 1, 3, 200, 229, 232, 255]
QUERY_ACCESS = ["r", "w", "m", "rw", "rwm", "wm"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_allows_matches_running_the_program(name):
    data = read_hex(name)
    live = decode(data)
    for kind, major, minor, access in itertools.product("bc", QUERY_MAJORS, QUERY_MINORS, QUERY_ACCESS):
        kernel = run_program(data, 1 if kind == "b" else 2, bpf.mask_from_access(access), major, minor)
        assert live.allows(kind, major, minor, access) == (kernel == 1), (kind, major, minor, access)


def test_allows_examples():
    shapes = decode(read_hex("shapes"))
    assert shapes.allows("c", 195, 0)
    assert shapes.allows("c", 511, 0, "rw")
    assert not shapes.allows("c", 511, 1, "rw")
    assert not shapes.allows("c", 508, 0)
    assert shapes.allows("c", 508, 0, "m")          # common.conf: c *:* m
    assert shapes.allows("b", 8, 1, "r") and not shapes.allows("b", 8, 1, "w")
    live1 = decode(read_hex("shapes.live1"))
    assert live1.allows("c", 511, 7)
    assert not decode(read_hex("shapes.live2")).allows("c", 195, 0)

    deny = decode(read_hex("denylist"))
    assert not deny.allows("c", 5, 1) and deny.allows("c", 5, 2)
    assert not deny.allows("b", 8, 0, "r") and deny.allows("b", 8, 0, "m")
    # `deny c 195:* w`: only a request within "w" matches it; O_RDWR gets through
    assert not deny.allows("c", 195, 0, "w")
    assert deny.allows("c", 195, 0, "rw")
    assert not deny.allows("c", 7, 3, "m") and not deny.allows("b", 7, 3, "m")

    assert not decode(read_hex("deny_only")).allows("c", 1, 3)
    assert decode(read_hex("mode_switch.live1")).allows("b", 8, 0)


def test_first_matching_block_in_program_order_decides():
    # config order: allow c 10:* rwm, then deny c 10:200 rwm (last line checked first)
    live = LiveAllowlist("allowlist", (R("c 10:* rwm"), D("c 10:200 rwm")))
    assert not live.allows("c", 10, 200)
    assert live.allows("c", 10, 229)
    data = encode(live)
    assert run_program(data, 2, 6, 10, 200) == 0 and run_program(data, 2, 6, 10, 229) == 1
    assert decode(data) == live


# ----------------------------------------------------------------- hand-built programs

PROLOGUE = bytes.fromhex("6112000000000000" "54020000ffff0000" "6113000000000000" "7403000010000000"
                         "6114040000000000" "6115080000000000")


def ins(code, dst=0, src=0, off=0, imm=0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


EXIT = ins(0x95)
ALLOW_EXIT = ins(0xB7, 0, imm=1) + EXIT
DENY_EXIT = ins(0xB7, 0, imm=0) + EXIT
TUN = ins(0x55, 2, off=4, imm=2) + ins(0x55, 4, off=3, imm=10) + ins(0x55, 5, off=2, imm=200) + ALLOW_EXIT


@dataclass
class Case:
    name: str
    data: bytes
    mode: str
    rules: tuple
    unknown: bool


HAND = [
    Case("empty allowlist", PROLOGUE + DENY_EXIT, "allowlist", (), False),
    Case("empty denylist", PROLOGUE + ALLOW_EXIT, "denylist", (), False),
    Case("one exact rule", PROLOGUE + TUN + DENY_EXIT, "allowlist", (R("c 10:200 rwm"),), False),
    Case("access only, type a",
         PROLOGUE + ins(0xBC, 1, 3) + ins(0x54, 1, imm=1) + ins(0x5D, 1, 3, off=2) + ALLOW_EXIT + DENY_EXIT,
         "allowlist", (R("a *:* m"),), False),
    Case("minor only",
         PROLOGUE + ins(0x55, 5, off=2, imm=3) + DENY_EXIT + ALLOW_EXIT, "denylist", (D("a *:3 rwm"),), False),
    Case("access mask 0 (empty access string)",
         PROLOGUE + ins(0xBC, 1, 3) + ins(0x54, 1, imm=0) + ins(0x5D, 1, 3, off=3) + ins(0x55, 2, off=2, imm=2)
         + ALLOW_EXIT + DENY_EXIT, "allowlist", (DeviceRule("c", None, None, ""),), False),
    Case("no-check block mid-program",
         PROLOGUE + ALLOW_EXIT + TUN + DENY_EXIT, "allowlist", (R("c 10:200 rwm"), R("a *:* rwm")), False),
    Case("nothing", b"", "allowlist", (), True),
    Case("odd length", PROLOGUE + TUN + DENY_EXIT + b"\x00\x01\x02", "allowlist", (R("c 10:200 rwm"),), True),
    Case("prologue only", PROLOGUE, "allowlist", (), True),
    Case("bad prologue", PROLOGUE[:8] + ins(0x54, 2, imm=0xFF) + PROLOGUE[16:] + TUN + DENY_EXIT,
         "allowlist", (), True),
    # its last block looks like a denylist epilogue; its jumps leave the program
    Case("no epilogue", PROLOGUE + TUN, "denylist", (), True),
    Case("epilogue r0 = 2", PROLOGUE + TUN + ins(0xB7, 0, imm=2) + EXIT, "allowlist", (R("c 10:200 rwm"),), True),
    Case("jump past the block",
         PROLOGUE + ins(0x55, 2, off=5, imm=2) + ins(0x55, 4, off=3, imm=10) + ins(0x55, 5, off=2, imm=200)
         + ALLOW_EXIT + TUN + DENY_EXIT, "allowlist", (), True),
    Case("decoded blocks survive a strange one",
         PROLOGUE + TUN + ins(0x55, 6, off=2, imm=1) + ALLOW_EXIT + DENY_EXIT, "allowlist",
         (R("c 10:200 rwm"),), True),
    Case("type 3", PROLOGUE + ins(0x55, 2, off=2, imm=3) + ALLOW_EXIT + DENY_EXIT, "allowlist", (), True),
    Case("negative major", PROLOGUE + ins(0x55, 4, off=2, imm=-1) + ALLOW_EXIT + DENY_EXIT, "allowlist", (), True),
    Case("verdict 7", PROLOGUE + ins(0x55, 4, off=2, imm=1) + ins(0xB7, 0, imm=7) + EXIT + DENY_EXIT,
         "allowlist", (), True),
    Case("checks out of order",
         PROLOGUE + ins(0x55, 4, off=3, imm=10) + ins(0x55, 2, off=2, imm=2) + ALLOW_EXIT + DENY_EXIT,
         "allowlist", (), True),
    Case("trailing instructions after an epilogue-like pair",
         PROLOGUE + DENY_EXIT + ins(0x07, 1, imm=1), "allowlist", (), True),
    Case("64-bit and (not LXC's)",
         PROLOGUE + ins(0xBC, 1, 3) + ins(0x57, 1, imm=1) + ins(0x5D, 1, 3, off=2) + ALLOW_EXIT + DENY_EXIT,
         "allowlist", (), True),
]


@pytest.mark.parametrize("case", HAND, ids=[c.name for c in HAND])
def test_decode_hand_built(case):
    got = decode(case.data)
    assert (got.mode, got.rules, got.unknown) == (case.mode, case.rules, case.unknown)


def test_unknown_program_verdicts():
    # blocks decoded before the strange part still decide; after it: unknown
    live = decode(PROLOGUE + TUN + ins(0x55, 6, off=2, imm=1) + ALLOW_EXIT + DENY_EXIT)
    assert live.unknown
    assert live.verdict("c", 10, 200) is True and live.allows("c", 10, 200)
    assert live.verdict("c", 195, 0) is None and not live.allows("c", 195, 0)


# ----------------------------------------------------------------- properties

@settings(max_examples=500)
@given(st.binary(max_size=600))
def test_decode_never_raises(data):
    live = decode(data)
    assert live.mode in ("allowlist", "denylist")
    assert isinstance(live.rules, tuple)
    for rule in live.rules:
        assert rule.kind in "abc" and set(rule.access) <= set("rwm")
    live.allows("c", 1, 3)


@settings(max_examples=300)
@given(st.sampled_from(PROGRAMS), st.data())
def test_corrupted_real_programs_never_raise(name, data):
    raw = bytearray(read_hex(name))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    live = decode(bytes(raw))
    if not live.unknown:  # a corruption that still parses is some other valid program
        assert decode(encode(live)) == live


rules_st = st.builds(
    DeviceRule,
    kind=st.sampled_from("abc"),
    major=st.none() | st.integers(0, 4095),
    minor=st.none() | st.integers(0, 2**20 - 1),
    access=st.sampled_from(["r", "w", "m", "rw", "rm", "wm", "rwm"]),
    allow=st.booleans(),
).filter(lambda r: not (r.kind == "a" and r.major is None and r.minor is None and r.access == "rwm"))


@settings(max_examples=300)
@given(st.sampled_from(["allowlist", "denylist"]), st.lists(rules_st, max_size=12),
       st.sampled_from("bc"), st.sampled_from([0, 1, 10, 195, 511]), st.sampled_from([0, 1, 200]),
       st.sampled_from(QUERY_ACCESS))
def test_encode_decode_round_trip_and_verdicts(mode, rules, kind, major, minor, access):
    live = LiveAllowlist(mode, tuple(rules))
    data = encode(live)
    assert decode(data) == live
    kernel = run_program(data, 1 if kind == "b" else 2, bpf.mask_from_access(access), major, minor)
    assert live.allows(kind, major, minor, access) == (kernel == 1)


# ----------------------------------------------------------------- LXC's list

def replay(*lines: str, stat=None) -> LxcDeviceList:
    dl = LxcDeviceList()
    for line in lines:
        verb, value = line.split(" ", 1)
        dl.add(verb == "allow", value, stat)
    return dl


def test_list_initial_mode_is_allowlist():
    assert replay("allow c 10:200 rwm").at_start() == LiveAllowlist("allowlist", (R("c 10:200 rwm"),))


def test_list_deny_does_not_carve_an_exception():
    dl = replay("deny a", "allow c 195:* rwm", "deny c 195:0 rwm")
    assert dl.at_start() == LiveAllowlist("allowlist", (R("c 195:* rwm"),))
    assert dl.at_start().allows("c", 195, 0)


def test_list_identical_deny_cancels_and_re_allow_adds_at_head():
    dl = replay("deny a", "allow c 1:3 rwm", "allow c 1:5 rwm", "deny c 1:3 rwm")
    assert dl.at_start().rules == (R("c 1:5 rwm"),)
    assert dl.add(True, "c 1:3 rwm") == "added"
    assert dl.at_start().rules == (R("c 1:5 rwm"), R("c 1:3 rwm"))
    assert dl.add(True, "c 1:5 rwm") == "reused"
    assert dl.add(False, "c 1:5 mrw") == "added"  # different access string: no flip
    assert dl.at_start().rules == (R("c 1:5 rwm"), R("c 1:3 rwm"))


def test_list_a_resets_and_empty_list_attaches_nothing():
    assert replay("allow c 1:3 rwm", "deny a").at_start() is None
    assert replay("deny a", "allow c 1:3 rwm", "allow a").at_start() is None
    assert replay("deny a", "deny c 1:3 rwm").at_start() == LiveAllowlist("allowlist", ())
    dl = replay("allow a")
    dl.add(True, "a")
    assert dl.program() == LiveAllowlist("denylist", ())


def test_list_rejects_what_lxc_rejects():
    dl = LxcDeviceList()
    for bad in ["x 1:3 rwm", "c  1:3 rwm", "c 1:3", "c 1:3 rwq", "c 1-3 rwm", "c :3 rwm", "c 99999999999:0 rwm",
                "/dev/net/tun rw", ""]:
        assert dl.add(False, bad) == "rejected", bad
    assert dl.add(True, "/dev/lxf-missing rw", stat=HOST_NODES.get) == "rejected"
    assert dl.add(True, "/dev/net/tun rw", stat=None) == "rejected"
    assert dl.add(True, "/dev/net/tun rw", stat=HOST_NODES.get) == "added"
    assert dl.add(True, "c 1:3 rwmx") == "added"  # LXC reads three letters and stops
    assert dl.entries[0].access == "rwm"
    assert dl.add(True, "c 1:4 ") == "rejected"    # config values arrive trimmed
    empty = bpf.parse_lxc_value(True, "c 1:4 ")      # (lxc-cgroup passes argv as is)
    assert empty is not None and empty.access == ""  # a mask of 0: matches nothing
    assert decode(encode(LiveAllowlist("allowlist", (empty.rule(),)))).rules == (DeviceRule("c", 1, 4, ""),)


def test_list_a_star_rwm_is_unloadable():
    assert replay("deny a", "allow a *:* rwm").unloadable()
    assert not replay("deny a", "allow a *:* rw").unloadable()
    assert not replay("allow a", "allow a *:* rwm").unloadable()  # not emitted in denylist mode
    assert replay("allow a", "deny a *:* rwm").unloadable()


# ----------------------------------------------------------------- describe

def test_describe():
    assert describe([R("c 195:* rwm"), R("c 508:* rwm")]) == "c 195:* rwm, c 508:* rwm"
    assert describe([R("a 7:* m"), D("b *:* rw"), R("a *:* rwm")]) == "a 7:* m, deny b *:* rw, a *:* rwm"
    assert describe([]) == ""
    assert decode(read_hex("mode_switch")).summary() == "allowlist: c 10:200 rwm"
    assert decode(read_hex("deny_only")).summary() == "allowlist: no rules"


# ----------------------------------------------------------------- reader output

def hexprog(name: str) -> str:
    return read_hex(name).hex()


def test_parse_reader_output():
    text = f"scope direct\nprog 12 {hexprog('shapes')}\nprog 15 {hexprog('mode_switch')}\n"
    assert bpf.parse_reader_output(text) == [read_hex("shapes"), read_hex("mode_switch")]
    out = bpf.parse_reader(text)
    assert (out.status, out.scope, [p for p, _ in out.programs]) == ("progs", "direct", [12, 15])
    assert bpf.parse_reader("none\n").status == "none"
    assert bpf.parse_reader_output("none\n") == []
    err = bpf.parse_reader("error EPERM the kernel withholds xlated instructions\n")
    assert (err.status, err.errno, err.message) == ("error", "EPERM", "the kernel withholds xlated instructions")
    assert bpf.parse_reader_output("error ENOENT open /x: No such file or directory") == []
    for junk in ["", "Traceback (most recent call last):", "prog 1 zz", "prog x 00", "scope sideways"]:
        assert bpf.parse_reader(junk).status == "garbage", junk


def test_reader_is_plain_python_and_takes_the_path_as_argv(tmp_path):
    compile(bpf.READER, "<reader>", "exec")
    weird = str(tmp_path / "no such'; rm -rf / #\n")
    r = subprocess.run([sys.executable, "-c", bpf.READER, weird], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stdout.startswith("error ENOENT open "), r.stdout
    r = subprocess.run([sys.executable, "-c", bpf.READER], capture_output=True, text=True, timeout=30)
    assert r.stdout.startswith("error EINVAL")


class FakeTransport:
    """Answers argv by its first words; records every call."""

    name = "fake"
    local = False
    python = "python3"  # the interpreter lxcfix runs there (transport.python_of)

    def __init__(self, answers: dict[tuple, Result]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def run(self, argv, *, input=None, timeout=60, max_output=None):
        argv = list(argv)
        self.calls.append(argv)
        for n in range(len(argv), 0, -1):
            key = tuple(a if i != 2 or argv[0] != "python3" else "READER" for i, a in enumerate(argv[:n]))
            if key in self.answers:
                return self.answers[key]
        return Result(127, "", f"{argv[0]}: command not found")

    def read(self, path):
        raise FileNotFoundError(path)


def bpftool_json(data: bytes) -> str:
    rows = []
    for i in range(0, len(data), 8):
        code, regs = data[i], data[i + 1]
        rows.append({"disasm": "...", "opcodes": {
            "code": hex(code), "src_reg": hex(regs >> 4), "dst_reg": hex(regs & 15),
            "off": [f"0x{b:02x}" for b in data[i + 2:i + 4]], "imm": [f"0x{b:02x}" for b in data[i + 4:i + 8]]}})
    return json.dumps(rows)


CG = "/sys/fs/cgroup/lxc.payload.web"


def test_read_live_through_python3():
    t = FakeTransport({("python3", "-c", "READER", CG): Result(0, f"scope direct\nprog 7 {hexprog('shapes')}\n")})
    live = observe.read_live(t, CG)
    assert live == EXPECTED["shapes"] and live.prog_id == 7
    assert t.calls == [["python3", "-c", bpf.READER, CG]]  # the path is an argument, not code


def test_read_live_falls_back_to_bpftool():
    data = read_hex("shapes.live1")
    t = FakeTransport({
        ("bpftool", "-j", "cgroup", "show", CG): Result(0, json.dumps(
            [{"id": 41, "attach_type": "cgroup_device", "attach_flags": "multi", "name": ""}])),
        ("bpftool", "-j", "prog", "dump", "xlated", "id", "41", "opcodes"): Result(0, bpftool_json(data)),
    })
    out = observe.read_programs(t, CG)
    assert (out.status, out.via, out.programs) == ("progs", "bpftool", ((41, data),))
    assert observe.read_live(t, CG) == EXPECTED["shapes.live1"]


def test_read_live_none_and_errors():
    t = FakeTransport({("python3", "-c", "READER", CG): Result(0, "none\n")})
    assert observe.read_live(t, CG) is None
    assert len(t.calls) == 1
    t = FakeTransport({("python3", "-c", "READER", CG): Result(1, "error ENOENT open x: No such file\n")})
    assert observe.read_live(t, CG) is None
    assert observe.read_programs(t, CG).errno == "ENOENT" and len(t.calls) == 2  # no bpftool for a missing cgroup
    t = FakeTransport({("python3", "-c", "READER", CG): Result(1, "error EPERM not permitted\n"),
                       ("bpftool",): Result(255, "", "Error: can't query")})
    out = observe.read_programs(t, CG)
    assert (out.status, out.errno) == ("error", "EPERM")
    assert observe.read_programs(FakeTransport({}), CG).status == "error"  # neither python3 nor bpftool


def test_bpftool_effective_fallback():
    data = read_hex("mode_switch")
    t = FakeTransport({
        ("bpftool", "-j", "cgroup", "show", CG): Result(0, ""),
        ("bpftool", "-j", "cgroup", "show", CG, "effective"): Result(0, json.dumps(
            [{"id": 9, "attach_type": "cgroup_device", "name": ""}])),
        ("bpftool", "-j", "prog", "dump", "xlated", "id", "9", "opcodes"): Result(0, bpftool_json(data)),
    })
    out = observe.read_bpftool(t, CG)
    assert (out.status, out.scope, out.programs) == ("progs", "effective", ((9, data),))


def test_several_programs_and_the_one_chosen():
    old, new = hexprog("shapes"), hexprog("shapes.live1")
    # attached to the cgroup itself: the last attached is LXC's current one
    t = FakeTransport({("python3", "-c", "READER", CG): Result(0, f"scope direct\nprog 3 {old}\nprog 5 {new}\n")})
    live = observe.read_live(t, CG)
    assert live == EXPECTED["shapes.live1"] and live.prog_id == 5
    assert [o.prog_id for o in live.others] == [3]
    # ...but the kernel runs both: the old one still denies 511:7
    assert live.verdict("c", 511, 7) is False and not live.allows("c", 511, 7)
    assert live.allows("c", 195, 0)
    # inherited (effective): the deepest cgroup's comes first
    t = FakeTransport({("python3", "-c", "READER", CG): Result(0, f"scope effective\nprog 5 {new}\nprog 3 {old}\n")})
    assert observe.read_live(t, CG).prog_id == 5


def test_cgroup_candidates():
    assert bpf.cgroup_candidates("lxc", "web") == ["/sys/fs/cgroup/lxc.payload.web"]
    assert bpf.cgroup_candidates("pve", "200") == [
        "/sys/fs/cgroup/lxc/200", "/sys/fs/cgroup/lxc/200/ns", "/sys/fs/cgroup/lxc.payload.200"]
    assert bpf.cgroup_candidates("lxc", "web", proc_cgroup="5:devices:/\n0::/lxc.payload.web-1\n") == [
        "/sys/fs/cgroup/lxc.payload.web-1", "/sys/fs/cgroup/lxc.payload.web"]
    # issue 21 row 3: the limit cgroup first (the program LXC attached), not the init's own `ns`
    assert bpf.cgroup_candidates("pve", "200", proc_cgroup="0::/lxc/200/ns\n", root="/cg")[:2] == [
        "/cg/lxc/200", "/cg/lxc/200/ns"]


@pytest.mark.parametrize("backend,ct,proc,limit,deeper", [
    ("lxc", "web", "0::/lxc.payload.web/evil\n", "/lxc.payload.web", "/lxc.payload.web/evil"),
    ("lxc", "web", "0::/lxc.payload.web-2/a/b\n", "/lxc.payload.web-2", "/lxc.payload.web-2/a/b"),
    ("lxc", "web", "0::/process_api/core/lxc.payload.web/init.scope\n", "/process_api/core/lxc.payload.web",
     "/process_api/core/lxc.payload.web/init.scope"),
    # the tenant names its cgroup like LXC's: the outermost one is LXC's
    ("lxc", "web", "0::/lxc.payload.web/lxc.payload.web/lxc/web\n", "/lxc.payload.web",
     "/lxc.payload.web/lxc.payload.web/lxc/web"),
    ("pve", "200", "0::/lxc/200/ns/evil\n", "/lxc/200", "/lxc/200/ns/evil"),
    ("pve", "200", "0::/lxc/200/ns\n", "/lxc/200", "/lxc/200/ns"),
    # a newline in a cgroup name: only the kernel's first 0:: line counts
    ("lxc", "web", "0::/lxc.payload.web/x\n0::/lxc.payload.other\n", "/lxc.payload.web", "/lxc.payload.web/x"),
    ("lxc", "web", "0::/lxc.payload.web\n", "/lxc.payload.web", None),
])
def test_the_limit_cgroup_is_read_never_the_inits_own_below_it(backend, ct, proc, limit, deeper):
    """Issue 21 row 3: container root moves its init into a cgroup it made and attaches an
    allow-all program there; before, that cgroup came first and its program was read as LXC's."""
    cands = bpf.cgroup_candidates(backend, ct, proc_cgroup=proc, root="/cg")
    assert cands[0] == "/cg" + limit
    assert bpf.deeper_cgroup(backend, ct, proc, root="/cg") == (None if deeper is None else "/cg" + deeper)
    assert deeper is None or cands[0] != "/cg" + deeper


def test_a_layout_of_no_known_form_reads_the_inits_cgroup_last():
    assert bpf.cgroup_candidates("lxc", "web", proc_cgroup="0::/custom/web\n", root="/cg") == [
        "/cg/lxc.payload.web", "/cg/custom/web"]
    assert bpf.deeper_cgroup("lxc", "web", "0::/custom/web\n", root="/cg") is None


class _Backend:
    name = "lxc"

    def init_pid(self, t, ct):
        return 42


class _ProcTransport(FakeTransport):
    def __init__(self, answers, proc):
        super().__init__(answers)
        self.proc = proc

    def read(self, path):
        if path == "/proc/42/cgroup":
            return self.proc.encode()
        raise FileNotFoundError(path)


def test_lxf121_reads_lxcs_program_when_the_init_moved_below_it():
    """The program on the init's cgroup (allow-all, the tenant's) is evidence, never the live one."""
    lxc = encode(LiveAllowlist("allowlist", (DeviceRule("c", 10, 200, "rwm"),)))
    anything = encode(LiveAllowlist("denylist", ()))
    limit, mine = "/sys/fs/cgroup/lxc.payload.web", "/sys/fs/cgroup/lxc.payload.web/evil"
    t = _ProcTransport({("python3", "-c", "READER", limit): Result(0, f"scope direct\nprog 7 {lxc.hex()}\n"),
                        ("python3", "-c", "READER", mine): Result(0, f"scope direct\nprog 9 {anything.hex()}\n")},
                       "0::/lxc.payload.web/evil\n")
    live = observe.read_container_live(t, _Backend(), "web")
    assert live.cgroup == limit and live.program.rules == (DeviceRule("c", 10, 200, "rwm"),)
    assert [(p, d.mode) for p, d in live.deeper] == [(mine, "denylist")]
    from lxcfix.rules.live import deeper_evidence
    (said,) = deeper_evidence(live)
    assert mine in said and "below " + limit in said


def test_bpftool_double_slot_instruction():
    item = {"opcodes": {"code": "0x18", "src_reg": "0x0", "dst_reg": "0x1", "off": ["0x00", "0x00"],
                        "imm": ["0x01", "0x00", "0x00", "0x00"] + ["0x00"] * 4 + ["0x02", "0x00", "0x00", "0x00"]}}
    raw = bpf._bpftool_insns([item])
    assert raw == bytes.fromhex("1801000001000000" "0000000002000000")
    assert decode(raw).unknown
