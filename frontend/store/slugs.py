"""Labels to slugs (docs/database.md §slugs): the slug, not the label, is the memory's key.

The rules reproduce the earlier release exactly (its whitespace set is JavaScript's ``\\s``),
so an existing database keeps finding its memories by label.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "WHITESPACE",
    "slugify",
]

# Exactly JavaScript's whitespace (WhiteSpace + LineTerminator), not Python's str.isspace().
WHITESPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_WHITESPACE_RUN = re.compile(f"[{re.escape(WHITESPACE)}]+")
_HYPHEN_RUN = re.compile("-+")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def slugify(label: str) -> str:
    """The slug of a label; never empty (all-symbol labels fall back to a hash)."""
    text = label.strip(WHITESPACE).lower()
    text = _WHITESPACE_RUN.sub("-", text)
    text = "".join(char for char in text if _kept(char))
    text = _HYPHEN_RUN.sub("-", text)
    if text:
        return text
    return "x" + _base36(_label_hash(label))


def _kept(char: str) -> bool:
    return char in "_-" or unicodedata.category(char)[0] in ("L", "N")


def _label_hash(label: str) -> int:
    value = 0
    for char in label:
        value = (value * 31 + ord(char)) % 2**32
    return value


def _base36(value: int) -> str:
    if value == 0:
        return "0"
    digits = []
    while value:
        value, rest = divmod(value, 36)
        digits.append(_BASE36[rest])
    return "".join(reversed(digits))
