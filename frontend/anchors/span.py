"""What an anchor fingerprints: a file's git blob id and one span's hash, computed in
process (no git on the recall path), and the language-agnostic symbol locator.

The locator finds the first line declaring the name (``def``, ``class``, ``function``,
``fn``, ``func``, ``struct``, ``interface``, ``trait``, ``impl``, ``enum``, ``type``,
``const``/``let``/``var``, after any modifiers such as ``export async`` or ``pub``; a Go
method's receiver, ``func (s *T) Name``, included), then its block: to the matching
closing brace when the declaration leaves one open, else every following line indented
deeper than it (blank lines included). A dotted name
(``Class.method``, ``Type::fn``) is looked up part by part, each inside the last one's
block.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO

__all__ = [
    "OutOfTime",
    "blob_id",
    "blob_id_of",
    "find_lines",
    "find_window",
    "lines_of",
    "locate_symbol",
    "span_hash",
]

_KEYWORDS = "def|class|function|fn|func|struct|interface|trait|impl|enum|type|const|let|var|module"


def blob_id(content: bytes) -> str:
    """``git hash-object`` of ``content``: sha1 over ``blob <len>\\0`` and the bytes."""
    digest = hashlib.sha1(b"blob %d\x00" % len(content), usedforsecurity=False)
    digest.update(content)
    return digest.hexdigest()


def blob_id_of(handle: BinaryIO, size: int, keep: int) -> tuple[str, bytes]:
    """(``blob_id`` of the file open in ``handle``, ``size`` bytes long by its ``fstat``;
    its content when that is at most ``keep`` bytes, else b""). A larger file is hashed in
    chunks as it is read, never held whole. OSError when the file's length changed while
    it was read (the id would be of neither version)."""
    if size <= keep:
        content = handle.read()
        return blob_id(content), content
    digest = hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)
    length = 0
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
        length += len(chunk)
    if length != size:
        raise OSError(errno.EAGAIN, "changed while it was read; try again")
    return digest.hexdigest(), b""


def lines_of(content: bytes) -> list[str]:
    """The file's lines as git and editors number them: each ended by "\n" (a "\r" before
    it dropped). str.splitlines also ends lines at form feeds, U+2028 and the like, which
    C and Python sources hold: a span named by line numbers was then hashed off by one."""
    lines = content.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def span_hash(lines: list[str]) -> str:
    """The span's fingerprint: trailing whitespace ignored, so an editor's trimming is no
    change."""
    text = "\n".join(line.rstrip() for line in lines)
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


class OutOfTime(Exception):
    """The search for a moved span reached its deadline before its end."""


def _unhurried() -> bool:
    return False


def find_window(
    lines: list[str],
    size: int,
    wanted: str,
    near: int = 0,
    out_of_time: Callable[[], bool] = _unhurried,
    limit: int | None = None,
) -> int | None:
    """Where (0-based) ``size`` lines hash to ``wanted``, the place nearest line ``near``
    (searched outwards from it); None when none does (among the ``limit`` nearest places,
    when given): a span that moved in its file unchanged is still the same code, usually
    moved by the lines edited above it.

    Each line is trimmed and encoded once, and each window hashed from one buffer. sha1
    does not roll, so every window is still hashed whole: a large span in a large file
    costs seconds, and ``out_of_time`` is asked before each window (OutOfTime raised once
    it answers yes)."""
    if size <= 0 or size > len(lines):
        return None
    text, starts = _joined(lines)
    view = memoryview(text)
    places = _nearest_first(near, len(lines) - size)
    for start in places if limit is None else itertools.islice(places, limit):
        if out_of_time():
            raise OutOfTime
        window = view[starts[start] : starts[start + size] - 1]
        if hashlib.sha1(window, usedforsecurity=False).hexdigest() == wanted:
            return start
    return None


def find_lines(
    lines: list[str],
    wanted: list[str],
    near: int = 0,
    out_of_time: Callable[[], bool] = _unhurried,
) -> int | None:
    """Where (0-based) ``wanted`` stands in ``lines``, trailing whitespace ignored, the
    place nearest line ``near`` first; None when nowhere. With the saved lines known (git
    still holds the saved file), only the places their first line stands at are compared:
    a file's length, not a window hash per line (``find_window``)."""
    if not wanted or len(wanted) > len(lines):
        return None
    trimmed = [line.rstrip() for line in lines]
    want = [line.rstrip() for line in wanted]
    last = len(lines) - len(want)
    places = sorted(
        (i for i, line in enumerate(trimmed[: last + 1]) if line == want[0]),
        key=lambda i: (abs(i - near), -i),
    )
    for start in places:
        if out_of_time():
            raise OutOfTime
        if trimmed[start : start + len(want)] == want:
            return start
    return None


def _joined(lines: list[str]) -> tuple[bytes, list[int]]:
    """``span_hash``'s text of all ``lines`` and where each line starts in it, with one
    start past the end: lines s to e-1 are ``text[starts[s] : starts[e] - 1]``."""
    encoded = [line.rstrip().encode("utf-8") for line in lines]
    starts = [0]
    for line in encoded:
        starts.append(starts[-1] + len(line) + 1)
    return b"\n".join(encoded), starts


def _nearest_first(near: int, last: int) -> Iterator[int]:
    """0 to ``last``, by distance from ``near``; of two as near, the later first."""
    near = min(max(near, 0), last)
    yield near
    for distance in range(1, max(near, last - near) + 1):
        if near + distance <= last:
            yield near + distance
        if near - distance >= 0:
            yield near - distance


def locate_symbol(lines: list[str], symbol: str) -> tuple[int, int] | None:
    """(first, last) 0-based lines of ``symbol``'s block, or None when not found."""
    low, high = 0, len(lines) - 1
    found: tuple[int, int] | None = None
    for part in [p for p in re.split(r"\.|::", symbol) if p]:
        found = _locate_one(lines, part, low, high)
        if found is None:
            return None
        low, high = found[0] + 1, found[1]
    return found


def _locate_one(lines: list[str], name: str, low: int, high: int) -> tuple[int, int] | None:
    # A Go method names its receiver first: ``func (s *Server) Handle``.
    pattern = re.compile(
        rf"^(\s*)(?:[\w()\[\]@]+\s+)*?(?:func\s*\([^()]*\)\s*|(?:{_KEYWORDS})\s+)"
        rf"\*?{re.escape(name)}(?![\w$])"
    )
    for index in range(low, high + 1):
        match = pattern.match(lines[index])
        if match:
            return index, _block_end(lines, index, len(match.group(1)), high)
    return None


def _block_end(lines: list[str], start: int, indent: int, high: int) -> int:
    """The block's last line: the closing brace matching the one the declaration line
    leaves open, else the last line indented deeper than the declaration."""
    if _leaves_brace_open(lines[start]):
        depth = 0
        for index in range(start, high + 1):
            depth += lines[index].count("{") - lines[index].count("}")
            if depth <= 0:
                return index
        return high
    last = start
    for index in range(start + 1, high + 1):
        line = lines[index]
        if not line.strip():
            continue
        # A closing bracket at the declaration's indent ends a multi-line signature.
        if len(line) - len(line.lstrip()) <= indent and line.lstrip()[0] not in ")]":
            break
        last = index
    return last


def _leaves_brace_open(line: str) -> bool:
    """Whether a brace opened on ``line`` is still open at its end: braces closed on the
    line (a ``{}`` default, a ``struct{}`` type) open no block."""
    depth = 0
    for char in line:
        if char == "{":
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
    return depth > 0
