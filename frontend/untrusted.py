"""Showing text that agents wrote: always as data, never as thatch's own words.

Memories, labels, store and branch names and session ids come from agents, or from what
they read. thatch's own lines start with ``[`` (``[thatch] …``, a record's
``[store:…] [score:…]`` meta line, ``[<S>] <label>``) and recall records are separated by
a ``-----`` line, so stored text must imitate none of that wherever it is shown:

- ``body``: multi-line stored text. A line that could pass for thatch's own (its first
  non-blank character is ``[``, or it is a rule of dashes) gets a leading backslash,
  Markdown's escape, so it still reads the same to a person.
- ``inline``: text inside one of thatch's lines; line breaks are shown as escapes, and a
  backslash of the text's that would read as the start of one is doubled.
- ``quoted``: a JSON string literal, so a ``"`` inside cannot end it early (nor its
  fullwidth form, written ``\\uff02``, nor seem escaped by a backslash's look-alike,
  ``\\uff3c``, ``\\ufe68``), and an id copied from it into a tool call's JSON arguments is
  exactly the original.
- ``token``: a meta value (``main``, ``owner/repo``, a UUID) verbatim when it is one plain
  word, else quoted with its brackets escaped.

All four show control characters, line separators and format characters (Unicode's
category Cf: bidi overrides, zero-width and tag characters, prepended number signs) as
``\\uXXXX``, and break every ``[thatch`` marker (``\\[thatch``; ``\\u005bthatch`` inside a
quoted literal, the same string once decoded). A combining mark with no letter to sit on
counts as blank before a ``[``, a rule or ``thatch``. A marker is found in its
compatibility forms too (fullwidth letters, the fullwidth or vertical ``[``: what NFKC
makes the same text). Text from agents that passes through them cannot speak with
thatch's voice. ``json_document`` writes the CLI's ``--json`` documents and the extraction
payload with the same characters escaped. Which characters those are, and their escapes,
``common/control_chars.py`` says, for the embedder's messages too.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Iterable

__all__ = [
    "blank",
    "body",
    "escape_openings",
    "has_control",
    "inline",
    "json_document",
    "quoted",
    "token",
]

from thatch.common.control_chars import (
    CONTROL_CLASS,
    control,
    escape_controls,
    has_control,
    plain_ascii,
    quote_lookalikes,
    shown_escaped,
)


# Compiled on first need (it costs ~2 ms, and a hook showing plain ASCII never needs it).
@functools.cache
def _body_control() -> re.Pattern[str]:
    return re.compile(CONTROL_CLASS.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


_BRACKET = "[\\[\ufe47\uff3b]"  # and its vertical and fullwidth forms
_DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2500\u2501\ufe58\ufe63\uff0d"
_DASH = f"[{_DASHES}]"
# What may be blank to the eye: a space but a line break, or a character that is neither
# ASCII nor a letter or digit (\W), a bracket or a dash. That takes in symbols too, so
# blank() has the last word; a regex cannot ask for a category.
_MAYBE_BLANK = f"[^\\w\x00-\x08\\n\x0e-\x1f\x21-\x7f\uff3b{_DASHES[1:]}]"
_MARKER = re.compile(f"{_BRACKET}(?=({_MAYBE_BLANK}*)thatch)", re.IGNORECASE)
# Matched after a newline (the text gets one in front), a literal prefix regex scans fast.
_LOOKALIKE = re.compile(
    f"\\n({_MAYBE_BLANK}*)({_BRACKET}|{_DASH}{_MAYBE_BLANK}*{_DASH}{_MAYBE_BLANK}*{_DASH}"
    f"(?:{_DASH}|{_MAYBE_BLANK})*(?=\\n|\\Z))"
)
# A run of backslashes a reader would take for the start of one of the escapes:
# before n, r, t, uXXXX, or a character that is shown escaped (anything not printable
# ASCII may be).
_ESCAPE_LIKE = re.compile(r"\\+(?=[nrt]|u[0-9a-fA-F]{4}|[^\x20-\x7e])")
_PLAIN = re.compile(r"[\w.@/+:#-]+")


def blank(chars: Iterable[str]) -> bool:
    """Whether ``chars`` render as nothing or as space: spaces, the Braille blank, and
    format characters and combining marks (at a line's start there is no letter for a
    mark to sit on, and next to a bracket it reads as the bracket's)."""
    return all(
        char.isspace() or char == "\u2800" or unicodedata.category(char) in ("Mn", "Me", "Cf")
        for char in chars
    )


def _compatibility_forms(text: str) -> str | None:
    """``text`` with each character in its NFKC form (``（ａ`` as ``(a``, ``﹇`` as ``[``);
    None when every character is its own form, as in most text."""
    if text.isascii():
        return None
    forms = {char: unicodedata.normalize("NFKC", char) for char in set(text)}
    if all(form == char for char, form in forms.items()):
        return None
    # One character at a time, not the whole text: each form maps back to its character
    # (_origins), and a letter with a combining mark after it stays two, as it was typed.
    return "".join(map(forms.__getitem__, text))


def _origins(text: str) -> list[int]:
    """For each character of ``_compatibility_forms(text)``, the index in ``text`` of the
    one it comes from."""
    return [index for index, char in enumerate(text) for _ in unicodedata.normalize("NFKC", char)]


def _starts(
    pattern: re.Pattern[str], text: str, wanted: Callable[[re.Match[str]], bool]
) -> list[int]:
    """Where in ``text`` the matches of ``pattern`` that are ``wanted`` start, ``text``
    read in its compatibility forms: a fullwidth ``（archived）`` reads as ``(archived)``."""
    forms = _compatibility_forms(text)
    if forms is None:
        return [match.start() for match in pattern.finditer(text) if wanted(match)]
    found = [match.start() for match in pattern.finditer(forms) if wanted(match)]
    if not found:  # most text: no need to map back
        return []
    origins = _origins(text)
    return sorted({origins[start] for start in found})


def _rewritten(text: str, starts: list[int], rewrite: Callable[[str], str]) -> str:
    """``text`` with the character at each of ``starts`` (ascending) rewritten."""
    parts, done = [], 0
    for start in starts:
        parts += [text[done:start], rewrite(text[start])]
        done = start + 1
    return "".join(parts) + text[done:]


def _backslashed(text: str) -> str:
    return "\\" + text


def escape_openings(opening: re.Pattern[str], text: str) -> str:
    """``text`` with a backslash before each character where ``opening`` matches, in its
    compatibility forms too: a label's ``（archived）`` as well as its ``(archived)``."""
    return _rewritten(text, _starts(opening, text, lambda _: True), _backslashed)


def _break_markers(text: str, broken: Callable[[str], str]) -> str:
    """``text`` with every ``[thatch`` (blanks inside it too, in compatibility forms too)
    written as ``broken`` says."""
    return _rewritten(text, _starts(_MARKER, text, lambda match: blank(match.group(1))), broken)


def _escape_lookalike(match: re.Match[str]) -> str:
    opening, start = match.groups()
    # Past the bracket or the first dash, anything but a dash must be blank too.
    if not (blank(opening) and blank(char for char in start[1:] if char not in _DASHES)):
        return match.group()
    return f"\n{opening}\\{start}"


def _maybe_control(text: str) -> bool:
    """False when ASCII ``text`` surely holds nothing for the body scan: a C-speed check,
    where the regex costs ~30 ns a character and a memory can be 50,000 of them."""
    return not (text.isascii() and text.replace("\n", "").replace("\t", "").isprintable())


def body(text: str) -> str:
    """Multi-line stored text, neutralised; newlines and tabs kept."""
    text = text.replace("\r\n", "\n")
    if _maybe_control(text):
        text = shown_escaped(text, _body_control())
    text = _break_markers(text, _backslashed)
    return _LOOKALIKE.sub(_escape_lookalike, "\n" + text)[1:]


def inline(text: str) -> str:
    """Stored text inside one of thatch's lines: one line, no marker, no invisible part.
    A backslash that would read as the start of an escape is doubled, so ``tab\\there``
    typed out never looks like a tab shown escaped."""
    if "\\" in text:
        text = _ESCAPE_LIKE.sub(_doubled_if_escape_like, text)
    return _break_markers(escape_controls(text), _backslashed)


def _doubled_if_escape_like(match: re.Match[str]) -> str:
    """The run doubled when what follows reads as an escape: n, r, t, uXXXX, or a
    character ``inline`` shows escaped; a letter such as ``Ë`` after it is left alone."""
    after = match.string[match.end() : match.end() + 1]
    if after.isascii() or shown_escaped(after, control()) != after:
        return match.group(0) * 2
    return match.group(0)


def quoted(text: str) -> str:
    """``"text"`` as a JSON string literal; readable non-ASCII characters stay as they are,
    but the compatibility forms of a quote (the fullwidth ``＂``, which reads as the
    literal's end) and of a backslash (``＼``, ``﹨``, which read as escaping it) are
    escaped too."""
    literal = json.dumps(text, ensure_ascii=False)
    if not plain_ascii(literal):
        literal = shown_escaped(literal, control())
        literal = quote_lookalikes(literal)
    return _break_markers(literal, lambda bracket: f"\\u{ord(bracket):04x}")


def json_document(value: object, *, compact: bool = False) -> str:
    """``value`` as JSON on one line: readable non-ASCII characters as they are, and what
    ``quoted`` shows escaped (controls, line separators, format characters) as ``\\uXXXX``,
    so a bidi override in a label cannot reorder a terminal's line. The same data once
    decoded. ``compact``: no space after ``,`` and ``:``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)
    # json.dumps escaped every C0 control (newlines too): what is left raw is data inside
    # string literals, where a \uXXXX escape decodes to the same character.
    return escape_controls(text)


def token(text: str) -> str:
    """A name in a meta line: verbatim when one plain word, else ``quoted`` with its
    brackets escaped too, so the only brackets in a meta line are thatch's."""
    # Hangul fillers are letters to \w, and invisible: a plain word holds none of the class.
    if _PLAIN.fullmatch(text) and (text.isascii() or not has_control(text)):
        return text
    return quoted(text).replace("[", "\\u005b").replace("]", "\\u005d")
