"""Reading text a host, a container or a config supplies, in bounded pieces. Pure.

    uint("511", 10, 7, 4095) == 511        uint("²", 10, 7, 4095) is None (str.isdigit() says yes)
    uint("9" * 5000, 10, 7, 4095) is None  uint("c3", 16, 8, 4095) == 195
    excerpt("group render ²") == "group render \\\\xc2\\\\xb2"   (printable ASCII, at most 80 bytes shown)
"""

from __future__ import annotations

import json
import re
import unicodedata

_DEC = "0123456789"
_HEX = "0123456789abcdefABCDEF"


def uint(text: str, base: int, max_digits: int, limit: int) -> int | None:
    """text as an unsigned int when it is only ASCII digits (hex digits for base 16),
    1..max_digits of them, and at most limit; else None. No sign, "0x", "_" or spaces:
    int() takes "٥", " 5" and "1_0", and raises past 4300 digits."""
    if not isinstance(text, str) or not 0 < len(text) <= max_digits or text.strip(_HEX if base == 16 else _DEC):
        return None
    value = int(text, base)
    return value if value <= limit else None


def excerpt(text: str, size: int = 80) -> str:
    """The first `size` bytes of `text` (UTF-8, surrogate escapes as the bytes they stand for),
    written as printable ASCII with \\\\xNN escapes, and "..." when there was more: what
    evidence and error messages show of input nobody vouches for."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    return repr(data[:size])[2:-1] + ("..." if len(data) > size else "")


# C0 controls but tab and newline, DEL, and C1: what a container or a config may
# hold to move the cursor, retitle the terminal or write the clipboard (OSC 52).
# The bidi controls (U+061C, U+200E/U+200F, U+202A-202E, U+2066-2069), which turn the text
# after them around, the zero-width ones and the line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def clean(text: object) -> str:
    """Text from a container or a config, safe for a terminal: control bytes
    shown as \\xNN, bidi and zero-width controls as \\uNNNN. (rich's Text never reads
    markup; this stops the escapes.)"""
    return _CONTROL.sub(lambda m: _escaped(m.group()), str(text))


def _escaped(ch: str) -> str:
    """One character as its escape: \\xNN, \\uNNNN or \\UNNNNNNNN, the shortest that holds it."""
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


# Everything but printable text: Cc (C0, DEL, C1, tab and newline too), Cf (the bidi embeddings,
# overrides and isolates U+202A-202E, U+2066-2069, the marks U+200E/U+200F, zero-width joiners,
# soft hyphen, BOM, ...), the line and paragraph separators (Zl, Zp), surrogates (what
# surrogateescape makes of bytes that are no UTF-8), private-use (Co) and unassigned code points (Cn).
def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


def field(text: object, size: int = 4096) -> str:
    """Text a host sent, as one field of one line for a terminal or a table: every character
    that is no printable text (line breaks, tabs, escape sequences, bidi controls) shown as
    \\\\xNN, \\\\uNNNN or \\\\UNNNNNNNN, at most `size` characters kept ("..." after them).

        field("ok\\n  down  applied") == "ok\\\\x0a  down  applied"
        field("abc\\u202edef") == "abc\\\\u202edef"
    """
    text = str(text)
    cut = len(text) > size
    text = text[:size]
    if _PRINTABLE_ASCII.fullmatch(text) is None:
        text = "".join(_escaped(c) if _unsafe(c) else c for c in text)
    return text + ("..." if cut else "")


def md_field(text: object, size: int = 4096) -> str:
    """field() for a markdown table cell or inline text: `|`, backticks and backslashes escaped
    too, so a host's text can neither end a cell nor open code.

        md_field("a|b`c") == "a\\\\|b\\\\`c"
    """
    return field(text, size).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")


def json_doc(raw: bytes, *, max_depth: int, max_values: int):
    """json.loads of `raw` once its shape is known to be small: nesting at most max_depth deep
    and at most max_values values (strings, arrays, objects, commas), told by a scan of the
    bytes that builds nothing (json's parser recurses per level, and 32 MiB of `[],` are
    eleven million lists). ValueError (one line) for anything else, never RecursionError
    or MemoryError from the input's shape.

        json_doc(b'{"a": [1, "]"]}', max_depth=4, max_values=10) == {"a": [1, "]"]}
        json_doc(b"[" * 100_000, max_depth=64, max_values=10**9)  -> ValueError("nested deeper than 64")
    """
    if not isinstance(raw, (bytes, bytearray)):
        raise ValueError("not bytes")
    # Inside a string every backslash starts a two-character escape: drop the escaped
    # backslashes, then the escaped quotes; every quote left opens or closes a string.
    bare = bytes(raw).replace(b"\\\\", b"").replace(b'\\"', b"")
    quotes = bare.count(b'"')
    if quotes // 2 > max_values:
        raise ValueError(f"more than {max_values} values")
    outside = b"".join(bare.split(b'"')[0::2])
    del bare
    opens = outside.count(b"[") + outside.count(b"{")
    closes = outside.count(b"]") + outside.count(b"}")
    if quotes // 2 + opens + closes + outside.count(b",") > 2 * max_values:
        raise ValueError(f"more than {max_values} values")
    depth = deepest = 0
    for b in outside.translate(None, _NOT_BRACKET):
        depth += 1 if b in (0x5B, 0x7B) else -1
        if depth > deepest:
            deepest = depth
            if deepest > max_depth:
                raise ValueError(f"nested deeper than {max_depth}")
    try:
        return json.loads(raw)
    except RecursionError:  # not reached after the scan; never a crash either way
        raise ValueError(f"nested deeper than {max_depth}") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg} at byte {e.pos}") from None


_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
