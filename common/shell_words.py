"""One shell word to paste: how every ``Fix:`` line quotes the names it repeats.

A name holding a character that is not printable (a TAB, an escape, a bidi control) is
ANSI-C quoted (``$'a\\tb'`` as ``$'a\\x09b'``): ``shlex.quote`` keeps the character itself,
which a terminal acts on, and which the error printer shows escaped (``'a\\tb'``), so the
line as seen pastes as another, literal, name.
"""

from __future__ import annotations

import shlex

__all__ = ["shell_quote"]


def shell_quote(value: str) -> str:
    """``value`` as one shell word to paste: ``shlex.quote`` when every character is
    printable, else ANSI-C quoted (``$'…'``, bash, zsh and ksh), each unprintable
    character, ``'`` and ``\\`` escaped."""
    if value.isprintable():
        return shlex.quote(value)
    escaped = "".join(
        char if char.isprintable() and char not in "'\\" else _c_escape(char) for char in value
    )
    return f"$'{escaped}'"


def _c_escape(char: str) -> str:
    if char in "'\\":
        return "\\" + char
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
