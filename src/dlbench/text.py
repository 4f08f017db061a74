"""Stored text made safe for a terminal (ground floor: imports nothing of dlbench).

Trial errors, warnings, notes and commands come from worker processes and frameworks, and a
framework may echo back what a user put in an environment variable. Rich strips only a few
control characters (BEL, BS, VT, FF, CR) and passes ESC through, so an escape sequence stored in
an error (`ESC ]0;title BEL`, `ESC [31m`) would retitle or recolour the user's terminal when a
report prints it. Every stored string goes through `printable` before it reaches a console.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F: 8-bit CSI and OSC
# introducers that some terminals honour).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """`text` as a string with every control character but tab and newline shown as a visible
    escape (`\\x1b`), so nothing stored can drive the terminal and nothing is silently lost.
    Lone surrogates (bytes that were not UTF-8) are shown as their escapes too."""
    s = text if isinstance(text, str) else str(text)
    s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)
    if any("\ud800" <= ch <= "\udfff" for ch in s):
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


SHOWN_CHARS = 60


def shown(value: object) -> str:
    """A bad value for a one-line message: its repr, cut to a readable length with the true
    length said (a 5,000-digit run id names itself in a line, not in a page)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[: SHOWN_CHARS - 3] + "..." + size
