"""Deriving a memory's label from its content when none is given (docs/tools.md §memory_remember
step 1)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MAX_DERIVED",
    "MIN_CUT",
    "Derived",
    "derive_label",
]

MAX_DERIVED = 80
MIN_CUT = 40

# CommonMark: a bare "#" is an empty heading too.
_HEADING = re.compile(r"^#{1,6}(?: (.*))?$")
_MARKER = re.compile(r"^(?:[-*+>] |\d+\. )")
_TRAILING_HASHES = re.compile(r"(?:\s+#+|^#+)\s*$")


@dataclass(frozen=True)
class Derived:
    label: str  # "" when nothing usable was found
    content: str


def derive_label(content: str) -> Derived:
    """The label taken from the first non-empty line, and the content to store with it.

    A Markdown heading line becomes the label and leaves the content (unless that would
    empty it); any other line stays in the content, minus nothing.
    """
    lines = content.splitlines()
    index = next((i for i, line in enumerate(lines) if line.strip()), None)
    if index is None:
        return Derived("", content)
    first = lines[index].strip()
    heading = _HEADING.match(lines[index].lstrip())
    if heading:
        label = _TRAILING_HASHES.sub("", heading.group(1) or "")
        rest = index + 1
        while rest < len(lines) and not lines[rest].strip():
            rest += 1
        remaining = "\n".join(lines[rest:])
        if remaining.strip():
            content = remaining
    else:
        label = _MARKER.sub("", first, count=1)
    return Derived(_tidy(label), content)


def _tidy(label: str) -> str:
    label = " ".join(label.split()).rstrip(".,;: ")
    if len(label) > MAX_DERIVED:
        space = label.rfind(" ", 0, MAX_DERIVED + 1)
        label = label[:space] if space >= MIN_CUT else label[:MAX_DERIVED]
    return label.strip()
