"""Reading text a host, a container or a config supplies, in bounded pieces. Pure.

    uint("511", 10, 7, 4095) == 511        uint("²", 10, 7, 4095) is None (str.isdigit() says yes)
    uint("9" * 5000, 10, 7, 4095) is None  uint("c3", 16, 8, 4095) == 195
    excerpt("group render ²") == "group render \\\\xc2\\\\xb2"   (printable ASCII, at most 80 bytes shown)
"""

from __future__ import annotations

import re

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
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """Text from a container or a config, safe for a terminal: control bytes
    shown as \\xNN. (rich's Text never reads markup; this stops the escapes.)"""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
