"""Stored text never drives the terminal (dlbench.text.printable)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dlbench.text import printable


def test_escape_sequences_become_visible_text() -> None:
    out = printable("boom \x1b]0;owned\x07 \x1b[31mred\x9b2J")
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert out == "boom \\x1b]0;owned\\x07 \\x1b[31mred\\x9b2J"


def test_newlines_tabs_and_unicode_are_kept() -> None:
    assert printable("a\tb\nc é ①") == "a\tb\nc é ①"


@given(st.text())
def test_no_control_character_or_surrogate_survives(text: str) -> None:
    out = printable(text)
    assert not any(ord(c) < 32 and c not in "\t\n" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in out)
    out.encode("utf-8")  # printable on any UTF-8 terminal
