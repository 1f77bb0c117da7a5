"""Find, replace or append thatch's instruction block in a Markdown file (docs/hooks.md
§instruction-block).

The block sits between the lines ``<!-- thatch:begin -->`` and ``<!-- thatch:end -->``.
Earlier releases wrote an unmarked block starting with ``# Persistence``; it is recognised
and replaced once. Anything ambiguous is "broken": the file is left alone because guessing
where a damaged block ends could delete the user's own text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["BEGIN", "END", "BlockState", "analyse", "has_marker", "install"]

BEGIN = "<!-- thatch:begin -->"
END = "<!-- thatch:end -->"
LEGACY_HEADING = "# Persistence"
LEGACY_INTRO = "Thatch provides persistent memory across"
LEGACY_LAST = '"Forget X"'

Kind = Literal["sentinel", "legacy", "none", "broken"]

_LINE = re.compile(r"[^\n]*\n?")


@dataclass(frozen=True)
class BlockState:
    kind: Kind
    start: int = 0  # character span of the block, excluding the last line's newline
    end: int = 0
    reason: str = ""


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, line without its line break) for every line of ``text``."""
    found: list[tuple[int, str]] = []
    for match in _LINE.finditer(text):
        if match.start() == len(text):
            break
        found.append((match.start(), match.group().rstrip("\n").rstrip("\r")))
    return found


def _legacy_starts(lines: list[tuple[int, str]]) -> list[int]:
    """Indexes of ``# Persistence`` headings whose next non-blank line is the legacy intro."""
    starts = []
    for index, (_, line) in enumerate(lines):
        if not line.startswith(LEGACY_HEADING):
            continue
        following = next((text for _, text in lines[index + 1 :] if text.strip()), "")
        if following.startswith(LEGACY_INTRO):
            starts.append(index)
    return starts


def analyse(text: str) -> BlockState:
    lines = _lines(text)
    begins = [i for i, (_, line) in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, (_, line) in enumerate(lines) if line.strip() == END]
    if begins or ends:
        if len(begins) == 1 and len(ends) == 1 and begins[0] < ends[0]:
            first, last = lines[begins[0]], lines[ends[0]]
            return BlockState("sentinel", first[0], last[0] + len(last[1]))
        if len(begins) > 1:
            return BlockState("broken", reason=f"{len(begins)} begin markers")
        if len(ends) > 1:
            return BlockState("broken", reason=f"{len(ends)} end markers")
        if not ends:
            return BlockState("broken", reason=f"{BEGIN} without {END}")
        if not begins:
            return BlockState("broken", reason=f"{END} without {BEGIN}")
        return BlockState("broken", reason=f"{END} comes before {BEGIN}")
    starts = _legacy_starts(lines)
    if not starts:
        return BlockState("none")
    start = starts[0]
    for offset, line in lines[start + 1 :]:
        if line.startswith(LEGACY_LAST):
            return BlockState("legacy", lines[start][0], offset + len(line))
    return BlockState("broken", reason=f'legacy "{LEGACY_HEADING}" block without its end')


def has_marker(text: str) -> bool:
    """Whether the text holds any sentinel or the start of a legacy block."""
    lines = _lines(text)
    return any(line.strip() in (BEGIN, END) for _, line in lines) or bool(_legacy_starts(lines))


Outcome = Literal["created", "written", "unchanged", "broken"]


def install(current: str | None, block: str) -> tuple[str | None, Outcome, str]:
    """New file text, outcome and reason for putting ``block`` (no final newline) in place.

    The new text is None when the file must not be touched.
    """
    if current is None:
        return block + "\n", "created", ""
    state = analyse(current)
    if state.kind == "broken":
        return None, "broken", state.reason
    if state.kind in ("sentinel", "legacy"):
        updated = current[: state.start] + block + current[state.end :]
    elif not current.strip():
        updated = block + "\n"
    else:
        separator = "" if current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
        updated = current + separator + block + "\n"
    return updated, ("unchanged" if updated == current else "written"), ""
