"""The live device allowlist: what the kernel enforces right now.

LXC compiles `lxc.cgroup2.devices.*` into a BPF_PROG_TYPE_CGROUP_DEVICE
program attached to the container's limit cgroup. `lxc-cgroup` and
`lxc-device` swap that program on a running container without touching any
file, so the program is the only place the live truth is kept. This module
decodes it (pure: bytes in, a LiveAllowlist out) and holds the text of the
reader script that fetches it; lxcfix.observe runs that reader on a host.

    live = decode(xlated_bytes)
    live.mode                   -> "allowlist"
    describe(live.rules)        -> "c *:* m, b *:* m, c 1:3 rwm, ..., c 195:* rwm"
    live.allows("c", 511, 0)    -> False

Layout decoded (LXC 5.0.2 src/lxc/cgroups/cgroup2_devices.c, checked against
real programs, see tests/unit/fixtures/bpf/): 8-byte `struct bpf_insn`s.

    prologue   r2 = *(u32 *)(r1 +0); w2 &= 0xffff    type   (1 block, 2 char)
               r3 = *(u32 *)(r1 +0); w3 >>= 16       access (1 mknod, 2 read, 4 write)
               r4 = *(u32 *)(r1 +4)                  major
               r5 = *(u32 *)(r1 +8)                  minor
    block      [w1 = w3; w1 &= MASK; if r1 != r3 goto next]   absent for rwm
               [if r2 != TYPE goto next]                      absent for type a
               [if r4 != MAJOR goto next]                     absent for *
               [if r5 != MINOR goto next]                     absent for *
               r0 = 1 (allow) | 0 (deny); exit
    epilogue   r0 = 0 (allowlist: default deny) | 1 (denylist); exit

Blocks are in LXC's list order, which is the reverse of the config order
(new entries go to the list head); the first matching block decides.

LXC's list semantics (bpf_list_add_device, bpf_device_add), mirrored by
devices.LxcDeviceList, which the config-side evaluator must agree with:
- `a` (exactly; type a, no numbers, empty access) sets the mode
  (allow a -> denylist, deny a -> allowlist) and empties the list.
  The initial mode is allowlist.
- any other rule: the first list entry with the same type, major, minor and
  the same access *string* ("rw" != "wr") whose polarity is the one the mode
  emits (allow in allowlist mode, deny in denylist mode) is flipped in place
  if the new rule's polarity differs, else reused unchanged; with no such
  entry the rule is inserted at the list head.
- only entries of the mode's polarity are compiled: in allowlist mode deny
  lines never reach the kernel; they only cancel an identical allow line.
  `allow c 195:* rwm` + `deny c 195:0 rwm` still allows 195:0.
- at container start no program is attached when the list is empty (e.g.
  a config whose last device line is `deny a` or `allow a`): every device is
  then allowed (measured). A live `lxc-cgroup` update always builds one.
- path-form rules (`/dev/x rw`) exist only for devices.allow at start; a path
  that cannot be stat()ed is skipped with an ERROR in the log; a deny with a
  path is a parse error, skipped.
- a rule that checks nothing (`a *:* rwm`, as opposed to the bare `a`)
  leaves the rest of the program unreachable: the verifier rejects it and
  lxc-start fails (measured).
- access is tested as "requested bits within MASK" for the whole request:
  with `deny c 195:* w` in denylist mode, open(O_RDWR) (rw) is not matched
  and so allowed; open(O_WRONLY) is denied.

Nothing here prints or exits.
"""

from __future__ import annotations

import posixpath
import struct
from dataclasses import dataclass
from typing import Callable, Iterable

from .devices import (  # noqa: F401  (LiveAllowlist, LxcDeviceList, describe: this module's vocabulary)
    ACC_MKNOD, ACC_READ, ACC_WRITE, LiveAllowlist, LxcDeviceList, Mode, access_from_mask, describe,
    mask_from_access, parse_lxc_value,
)
from .model import DeviceRule

CGROUP_ROOT = "/sys/fs/cgroup"

# struct bpf_insn opcodes LXC's generator uses
_LDX_W = 0x61       # BPF_LDX | BPF_W | BPF_MEM
_AND32_K = 0x54     # BPF_ALU | BPF_AND | BPF_K
_RSH32_K = 0x74     # BPF_ALU | BPF_RSH | BPF_K
_MOV32_X = 0xBC     # BPF_ALU | BPF_MOV | BPF_X
_JNE_K = 0x55       # BPF_JMP | BPF_JNE | BPF_K
_JNE_X = 0x5D       # BPF_JMP | BPF_JNE | BPF_X
_MOV64_K = 0xB7     # BPF_ALU64 | BPF_MOV | BPF_K
_EXIT = 0x95        # BPF_JMP | BPF_EXIT

DEV_BLOCK, DEV_CHAR = 1, 2

_PROLOGUE = (
    (_LDX_W, 2, 1, 0, 0),
    (_AND32_K, 2, 0, 0, 0xFFFF),
    (_LDX_W, 3, 1, 0, 0),
    (_RSH32_K, 3, 0, 0, 16),
    (_LDX_W, 4, 1, 4, 0),
    (_LDX_W, 5, 1, 8, 0),
)


# ---------------------------------------------------------------- decoding

def _insns(data: bytes) -> list[tuple[int, int, int, int, int]]:
    out = []
    for i in range(0, len(data) - len(data) % 8, 8):
        code, regs, off, imm = struct.unpack_from("<BBhi", data, i)
        out.append((code, regs & 0x0F, regs >> 4, off, imm))
    return out


def _is(insn, code: int, dst: int, src: int = 0) -> bool:
    return insn[0] == code and insn[1] == dst and insn[2] == src


def decode(insns: bytes) -> LiveAllowlist:
    """Decode LXC's device program from its xlated instructions. Never raises."""
    try:
        return _decode(bytes(insns))
    except Exception:  # belt and braces: robustness is the contract
        return LiveAllowlist("allowlist", (), True)


def _decode(data: bytes) -> LiveAllowlist:
    ins = _insns(data)
    n = len(ins)
    unknown = len(data) % 8 != 0
    # The mode lives in the last two instructions whatever comes before.
    mode: Mode = "allowlist"
    mode_known = False
    if n >= 2 and _is(ins[-1], _EXIT, 0) and ins[-1][3:] == (0, 0) and _is(ins[-2], _MOV64_K, 0) \
            and ins[-2][3] == 0 and ins[-2][4] in (0, 1):
        mode = "denylist" if ins[-2][4] == 1 else "allowlist"
        mode_known = True
    else:
        unknown = True

    if n < 6 or tuple(ins[:6]) != _PROLOGUE:
        return LiveAllowlist(mode, (), True)

    blocks: list[DeviceRule] = []  # program order
    i = 6
    while i < n:
        if i == n - 2 and mode_known:
            return LiveAllowlist(mode, tuple(reversed(blocks)), unknown)
        rule, nxt = _block(ins, i)
        if rule is None:
            unknown = True
            break
        blocks.append(rule)
        i = nxt
    else:
        unknown = True  # ran out without the epilogue
    return LiveAllowlist(mode, tuple(reversed(blocks)), unknown)


def _block(ins, i: int) -> tuple[DeviceRule | None, int]:
    """One rule block starting at i: (rule, index after its exit) or (None, i)."""
    n = len(ins)
    start = i
    jumps: list[int] = []  # indexes of the conditional jumps, to check targets
    mask = ACC_READ | ACC_WRITE | ACC_MKNOD
    kind = "a"
    if i + 2 < n and _is(ins[i], _MOV32_X, 1, 3) and _is(ins[i + 1], _AND32_K, 1) \
            and _is(ins[i + 2], _JNE_X, 1, 3):
        mask = ins[i + 1][4]
        if not 0 <= mask <= 7 or ins[i][3:] != (0, 0) or ins[i + 1][3] != 0 or ins[i + 2][4] != 0:
            return None, start
        jumps.append(i + 2)
        i += 3
    if i < n and _is(ins[i], _JNE_K, 2):
        t = ins[i][4]
        if t not in (DEV_BLOCK, DEV_CHAR):
            return None, start
        kind = "b" if t == DEV_BLOCK else "c"
        jumps.append(i)
        i += 1
    numbers = {4: None, 5: None}  # r4 major, r5 minor: absent check = wildcard
    for reg in (4, 5):
        if i < n and _is(ins[i], _JNE_K, reg):
            if ins[i][4] < 0:
                return None, start
            numbers[reg] = ins[i][4]
            jumps.append(i)
            i += 1
    major, minor = numbers[4], numbers[5]
    if i + 1 >= n or not _is(ins[i], _MOV64_K, 0) or ins[i][3] != 0 or ins[i][4] not in (0, 1) \
            or not _is(ins[i + 1], _EXIT, 0) or ins[i + 1][3:] != (0, 0):
        return None, start
    end = i + 2
    if end > n - 2:  # the jumps' target must exist: at least the epilogue follows
        return None, start
    for j in jumps:
        if j + 1 + ins[j][3] != end:  # every check must skip to the next block
            return None, start
    return DeviceRule(kind, major, minor, access_from_mask(mask), allow=ins[i][4] == 1), end


def encode(live: LiveAllowlist) -> bytes:
    """The program LXC would generate for live.rules (config order) and mode:
    the inverse of decode(), for tests and for comparing with the kernel's copy."""
    out = [_PROLOGUE[k] for k in range(6)]
    for rule in reversed(live.rules):
        mask = mask_from_access(rule.access)
        checks = []
        if mask != 7:
            checks.append("acc")
        if rule.kind in ("b", "c"):
            checks.append("type")
        if rule.major is not None:
            checks.append("major")
        if rule.minor is not None:
            checks.append("minor")
        jump = len(checks) + 1
        for c in checks:
            if c == "acc":
                out += [(_MOV32_X, 1, 3, 0, 0), (_AND32_K, 1, 0, 0, mask), (_JNE_X, 1, 3, jump, 0)]
            elif c == "type":
                out.append((_JNE_K, 2, 0, jump, DEV_BLOCK if rule.kind == "b" else DEV_CHAR))
            elif c == "major":
                out.append((_JNE_K, 4, 0, jump, rule.major))
            else:
                out.append((_JNE_K, 5, 0, jump, rule.minor))
            jump -= 1
        out += [(_MOV64_K, 0, 0, 0, 1 if rule.allow else 0), (_EXIT, 0, 0, 0, 0)]
    out += [(_MOV64_K, 0, 0, 0, 1 if live.mode == "denylist" else 0), (_EXIT, 0, 0, 0, 0)]
    return b"".join(struct.pack("<BBhi", c, d | (s << 4), o, m) for c, d, s, o, m in out)


def lxc_expected(lines: Iterable[tuple[bool, str]],
                 stat: Callable[[str], tuple[str, int, int] | None] | None = None) -> LiveAllowlist | None:
    """The program lxc-start would attach for these (allow?, value) lines."""
    dl = LxcDeviceList()
    for allow, value in lines:
        dl.add(allow, value, stat)
    return dl.at_start()


# ---------------------------------------------------------------- reading it live

# Runs on the target host (`python3 -c READER <cgroup dir>`), stdlib only.
# Output, one item a line:
#   scope direct|effective   programs attached to the cgroup itself, or (none
#                            there) the effective list inherited from ancestors
#   prog <id> <hex>          the xlated instructions of one program, in the
#                            kernel's order (direct: attach order; effective:
#                            this cgroup's first, then its parent's, ...)
#   none                     no device program applies
#   error <ERRNO> <message>  (exit status 1)
READER_LIB = r'''
import ctypes, errno, os, struct, sys

NR_BPF = {"x86_64": 321, "amd64": 321, "aarch64": 280, "arm64": 280}
BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD, BPF_PROG_QUERY = 13, 15, 16
BPF_CGROUP_DEVICE, BPF_F_QUERY_EFFECTIVE = 6, 1


class Fail(Exception):
    pass


def main(path):
    nr = NR_BPF.get(os.uname().machine)
    if nr is None:
        raise Fail("ENOSYS", "no bpf() syscall number known for " + os.uname().machine)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def bpf(cmd, attr):
        r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(cmd), ctypes.c_void_p(ctypes.addressof(attr)),
                         ctypes.c_long(len(attr)))
        if r < 0:
            e = ctypes.get_errno()
            return -e
        return r

    def check(r, what):
        if r < 0:
            raise Fail(errno.errorcode.get(-r, str(-r)), what + ": " + os.strerror(-r))
        return r

    def query(fd, flags):
        cnt = 64
        for _ in range(8):
            ids = (ctypes.c_uint32 * cnt)()
            attr = ctypes.create_string_buffer(40)
            struct.pack_into("<IIIIQI", attr, 0, fd, BPF_CGROUP_DEVICE, flags, 0, ctypes.addressof(ids), cnt)
            r = bpf(BPF_PROG_QUERY, attr)
            got = struct.unpack_from("<I", attr, 24)[0]
            if r == -errno.ENOSPC and got > cnt:
                cnt = got
                continue
            check(r, "BPF_PROG_QUERY " + path)
            return list(ids[:got])
        raise Fail("ENOSPC", "BPF_PROG_QUERY: program list keeps growing")

    def xlated(prog_id):
        attr = ctypes.create_string_buffer(12)
        struct.pack_into("<I", attr, 0, prog_id)
        r = bpf(BPF_PROG_GET_FD_BY_ID, attr)
        if r == -errno.ENOENT:
            return None  # detached and freed meanwhile
        pfd = check(r, "BPF_PROG_GET_FD_BY_ID %d" % prog_id)
        try:
            info = ctypes.create_string_buffer(80)
            attr = ctypes.create_string_buffer(16)
            struct.pack_into("<IIQ", attr, 0, pfd, len(info), ctypes.addressof(info))
            check(bpf(BPF_OBJ_GET_INFO_BY_FD, attr), "BPF_OBJ_GET_INFO_BY_FD %d" % prog_id)
            size = struct.unpack_from("<I", info, 20)[0]
            buf = ctypes.create_string_buffer(max(size, 8))
            info = ctypes.create_string_buffer(80)
            struct.pack_into("<I", info, 20, size)
            struct.pack_into("<Q", info, 32, ctypes.addressof(buf))
            struct.pack_into("<IIQ", attr, 0, pfd, len(info), ctypes.addressof(info))
            check(bpf(BPF_OBJ_GET_INFO_BY_FD, attr), "BPF_OBJ_GET_INFO_BY_FD %d" % prog_id)
            if size and struct.unpack_from("<Q", info, 32)[0] == 0:
                raise Fail("EPERM", "the kernel withholds xlated instructions (raw dumps not permitted)")
            got = struct.unpack_from("<I", info, 20)[0]
            return buf.raw[:min(size, got)]
        finally:
            os.close(pfd)

    try:
        cfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise Fail(errno.errorcode.get(e.errno, str(e.errno)), "open %s: %s" % (path, e.strerror))
    try:
        for _ in range(5):
            scope, ids = "direct", query(cfd, 0)
            if not ids:
                scope, ids = "effective", query(cfd, BPF_F_QUERY_EFFECTIVE)
            if not ids:
                return ["none"]
            progs = [(i, xlated(i)) for i in ids]
            if all(p is not None for _, p in progs):
                return ["scope " + scope] + ["prog %d %s" % (i, p.hex()) for i, p in progs]
        raise Fail("EAGAIN", "device programs kept changing while being read")
    finally:
        os.close(cfd)



def report(path):
    """The reader's output lines and exit status, never an exception."""
    try:
        return main(path), 0
    except Fail as f:
        return ["error %s %s" % f.args], 1
    except Exception as e:
        return ["error EIO %s: %s" % (type(e).__name__, e)], 1
'''

# Run as a script on the target host: `python3 -c READER <cgroup dir>`.
READER = READER_LIB + '''
if len(sys.argv) != 2:
    print("error EINVAL usage: reader CGROUP_DIR")
    sys.exit(1)
lines, status = report(sys.argv[1])
print("\\n".join(lines))
sys.exit(status)
'''


@dataclass(frozen=True)
class ReaderOutput:
    """Parsed reader output. status: "progs" | "none" | "error" | "garbage"."""

    status: str
    programs: tuple[tuple[int, bytes], ...] = ()
    scope: str = "direct"
    errno: str | None = None
    message: str = ""
    via: str = "python3"


def parse_reader(text: str) -> ReaderOutput:
    programs: list[tuple[int, bytes]] = []
    scope = "direct"
    none = False
    for line in text.splitlines():
        parts = line.strip().split(" ", 2)
        if not parts or not parts[0]:
            continue
        if parts[0] == "prog" and len(parts) == 3:
            try:
                programs.append((int(parts[1]), bytes.fromhex(parts[2])))
            except ValueError:
                return ReaderOutput("garbage", message=line[:200])
        elif parts[0] == "prog" and len(parts) == 2 and parts[1].isdigit():
            programs.append((int(parts[1]), b""))
        elif parts[0] == "scope" and len(parts) == 2 and parts[1] in ("direct", "effective"):
            scope = parts[1]
        elif parts[0] == "none" and len(parts) == 1:
            none = True
        elif parts[0] == "error":
            return ReaderOutput("error", errno=parts[1] if len(parts) > 1 else "EIO",
                                message=parts[2] if len(parts) > 2 else "")
        else:
            return ReaderOutput("garbage", message=line[:200])
    if programs:
        return ReaderOutput("progs", tuple(programs), scope)
    if none:
        return ReaderOutput("none", scope=scope)
    return ReaderOutput("garbage", message="no output")


def parse_reader_output(text: str) -> list[bytes]:
    """The xlated instructions of each program the reader printed, in order."""
    return [p for _, p in parse_reader(text).programs]


def _bpftool_insns(listing: list) -> bytes:
    """`bpftool -j prog dump xlated id N opcodes` -> raw bytes."""
    out = bytearray()
    for item in listing:
        op = item["opcodes"]
        code = int(op["code"], 16)
        regs = (int(op["src_reg"], 16) << 4) | int(op["dst_reg"], 16)
        off = bytes(int(b, 16) for b in op["off"])
        imm = bytes(int(b, 16) for b in op["imm"])
        if len(off) != 2 or len(imm) not in (4, 12):
            raise ValueError("unexpected opcode layout")
        # a 16-byte ld_imm64 comes as one item whose imm holds its own imm
        # and the whole second slot (bpftool's print_hex_data_json(.., 12))
        out += bytes([code, regs]) + off + imm
    return bytes(out)


def effective_of(out: ReaderOutput) -> LiveAllowlist | None:
    """One LiveAllowlist for what the reader saw; None without programs.

    Several programs (BPF_F_ALLOW_MULTI, as LXC and Proxmox attach): the
    kernel runs them all and allows only what all allow. The one returned is
    the one LXC manages for this container: for programs attached to the
    cgroup itself the LAST in the kernel's list (the most recently attached;
    LXC's live update replaces its program in place, or, on kernels without
    BPF_F_REPLACE, appends the new one after the old); for inherited ones the
    FIRST (the kernel lists the deepest cgroup's first). The rest go in
    `others`, which allows() ANDs in.
    """
    if out.status != "progs" or not out.programs:
        return None
    decoded = [(pid, decode(insns)) for pid, insns in out.programs]
    decoded = [(pid, _with_id(d, pid)) for pid, d in decoded]
    pick = len(decoded) - 1 if out.scope == "direct" else 0
    main = decoded[pick][1]
    others = tuple(d for k, (_, d) in enumerate(decoded) if k != pick)
    return LiveAllowlist(main.mode, main.rules, main.unknown, main.prog_id, others)


def _with_id(d: LiveAllowlist, pid: int) -> LiveAllowlist:
    return LiveAllowlist(d.mode, d.rules, d.unknown, pid)


# Where a container's device program is read, as source the sweep script runs on a host too
# (sweep.script() puts it next to READER_LIB), so both read the same cgroups in the same order.
CGROUP_LIB = r'''
def cgroup_plan(proc_cgroup, ct, defaults, root="/sys/fs/cgroup"):
    """(the cgroups to read the container's device program from, in order; the init's own
    cgroup when it lies below the container's limit cgroup, else None).

    The limit cgroup is LXC's: the outermost `lxc.payload.<ct>` (or `-N`) or `lxc/<ct>` in the
    init's v2 path. Below it, container root (privileged, cgroup mounted rw) makes its own
    cgroups, moves its init there and attaches programs of its own; what LXC attached stays
    where it was. Only the first `0::` line counts (a cgroup name may hold a newline, and
    the kernel writes the real line first). A path of no known layout is read last."""
    own = None
    for line in (proc_cgroup or "")[:8192].split("\n"):
        if line.startswith("0::"):
            own = line[3:].strip()
            if own.endswith(" (deleted)"):
                own = own[:-10]
            break
    cands, deeper, limit, own_path = [], None, None, None
    if own is not None:
        parts = [p for p in own.split("/") if p and p != "."]
        if ".." not in parts:
            own_path = root + "/" + "/".join(parts) if parts else root
            payload = "lxc.payload." + ct
            for i, p in enumerate(parts):
                if p == payload or (p.startswith(payload + "-") and p[len(payload) + 1:].isdigit()):
                    limit = parts[:i + 1]
                elif p == "lxc" and parts[i + 1:i + 2] == [ct]:
                    limit = parts[:i + 2]
                if limit is not None:
                    break
    if limit is not None:
        cands.append(root + "/" + "/".join(limit))
        if own_path != cands[0]:
            deeper = own_path
    for c in defaults:
        if c not in cands:
            cands.append(c)
    if own_path is not None and limit is None and own_path not in cands:
        cands.append(own_path)
    return cands, deeper
'''

_CGROUP_NS: dict = {}
exec(compile(CGROUP_LIB, "<lxcfix cgroup plan>", "exec"), _CGROUP_NS)
cgroup_plan = _CGROUP_NS["cgroup_plan"]


def default_cgroups(backend: str, ct: str, root: str = CGROUP_ROOT) -> list[str]:
    """Where LXC and Proxmox put a container's limit cgroup by default (see cgroup_candidates)."""
    return ([f"{root}/lxc/{ct}", f"{root}/lxc/{ct}/ns"] if backend == "pve" else []) + [f"{root}/lxc.payload.{ct}"]


def cgroup_candidates(backend: str, ct: str, *, proc_cgroup: str | None = None,
                      root: str = CGROUP_ROOT) -> list[str]:
    """Where the container's device program lives, most likely first.

    lxc: LXC 5 attaches to its limit cgroup, `<root>/lxc.payload.<name>`
         (measured; `-1`, `-2`... suffixes when the name was taken).
    pve: Proxmox sets lxc.cgroup.dir.container = lxc/<vmid> with the inner
         `ns` cgroup: the program sits on `<root>/lxc/<vmid>` (measured with
         the same settings), processes in `.../ns`.
    proc_cgroup: the text of /proc/<init pid>/cgroup, when known: the limit cgroup in its
    v2 path comes first (LXC nests the container under the monitor's cgroup on some
    hosts), never the init's own cgroup below it, which the container's root can make
    and attach a program of its own to (deeper_cgroup: that one, to be reported).
    """
    return cgroup_plan(proc_cgroup, ct, default_cgroups(backend, ct, root), root)[0]


def deeper_cgroup(backend: str, ct: str, proc_cgroup: str | None, root: str = CGROUP_ROOT) -> str | None:
    """The init's own cgroup when it lies below the container's limit cgroup, else None."""
    return cgroup_plan(proc_cgroup, ct, default_cgroups(backend, ct, root), root)[1]
