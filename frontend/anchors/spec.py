"""What an agent writes for an anchor: ``path``, ``path:symbol`` or ``path:10-20``."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["MAX_ANCHORS", "AnchorSpec", "parse_anchor"]

MAX_ANCHORS = 10
_LINES = re.compile(r"(\d+)(?:-(\d+))?")


class AnchorSpec(NamedTuple):
    path: str
    symbol: str | None = None
    lines: tuple[int, int] | None = None  # 1-based, inclusive


def parse_anchor(text: str) -> AnchorSpec:
    """The spec ``text`` names; raises ValueError with the reason. The part after the last
    ``:`` is a line span when it is ``N`` or ``N-M``, else a symbol name."""
    text = text.strip()
    if not text:
        raise ValueError("empty anchor")
    path, sep, rest = text.rpartition(":")
    if not sep or not path or "/" in rest or "\\" in rest:
        return AnchorSpec(text)
    span = _LINES.fullmatch(rest)
    if span:
        first = int(span.group(1))
        last = int(span.group(2) or first)
        if first < 1 or last < first:
            raise ValueError(f"bad line span {rest!r} (want N or N-M, 1 ≤ N ≤ M)")
        return AnchorSpec(path, lines=(first, last))
    if not rest.strip():
        raise ValueError(f"empty symbol after {path!r}")
    return AnchorSpec(path, symbol=rest.strip())
