"""Control characters: which characters of a text show something other than themselves,
and the ``\\uXXXX`` escapes that show them.

A control character, a line or paragraph separator, a bidi override or another format
character (Unicode's category Cf) in a value thatch prints could start a line of its own,
send a terminal escape or reorder what a reader sees. ``frontend/untrusted.py`` frames
stored text with these; the embedder, which may not import the frontend, shows the data
its messages quote (an address from the environment, a model directory's name) with
``escape_controls``: those characters escaped, everything else (non-ASCII letters and
spaces, quotes, backslashes) as it is.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = [
    "CONTROL_CLASS",
    "control",
    "double_quoted",
    "escape_controls",
    "escaped",
    "has_control",
    "plain_ascii",
    "quote_lookalikes",
    "shown_escaped",
]

# C0/C1 controls (tab and newline included: callers that keep them say so), DEL, soft
# hyphen, bidi marks, overrides and isolates, zero-width space and word joiners, line and
# paragraph separators, BOM, interlinear annotations, lone surrogates, tag characters, the
# supplementary variation selectors (the last two can carry invisible ASCII text), and the
# other default-ignorable characters that render as nothing and no script needs (Hangul
# fillers, Khmer inherent vowels, the Mongolian vowel separator, musical format controls).
# Format characters (Cf) this list does not name are found by their category: _formats.
CONTROL_CLASS = (
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0"
    "\ufff0-\ufffb\ud800-\udfff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)
# Invisible characters scripts and emoji need beside their letters: ZWNJ/ZWJ (Persian,
# Indic, emoji sequences), the combining grapheme joiner (Hebrew), Mongolian free
# variation selectors, variation selectors (emoji, CJK; after a keycap's digit, # or *).
# Beside a non-ASCII letter on either side they stay. Between ASCII, blanks or the text's
# edges they only hide something ("<\u200d<<" reads as "<<<", "\u200d[store:…" as a
# record's meta line), and are shown escaped.
_JOINERS = "[\u034f\u180b-\u180d\u180f\u200c\u200d\ufe00-\ufe0f]"
# What does not count as a letter beside a joiner: ASCII, blanks, the joiners themselves
# (two side by side would vouch for each other), the Braille blank, and the lookalikes of
# thatch's "[", "<" and dashes.
_NOT_LETTER = (
    "\x00-\x7f\\s\u034f\u180b-\u180d\u180f\u200c\u200d\ufe00-\ufe0f\u2800"
    "\uff3b\uff1c\ufe64\u02c2\u1438\u2329\u276e\u27e8\u3008"
    "\u2010-\u2015\u2212\u2500\u2501\ufe58\ufe63\uff0d"
)
_STRAY_JOINERS = (
    f"(?<![^{_NOT_LETTER}])[\u034f\u180b-\u180d\u180f\u200c\u200d](?![^{_NOT_LETTER}])"
    f"|(?<![^{_NOT_LETTER}]|[0-9#*])[\ufe00-\ufe0f](?![^{_NOT_LETTER}])"
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


# Compiled on first need (each costs ~2 ms, and a hook showing plain ASCII never needs one).
@functools.cache
def control() -> re.Pattern[str]:
    """``CONTROL_CLASS`` compiled."""
    return re.compile(CONTROL_CLASS)


@functools.cache
def _joiners() -> re.Pattern[str]:
    return re.compile(_JOINERS)


@functools.cache
def _stray_joiners() -> re.Pattern[str]:
    return re.compile(_STRAY_JOINERS)


def plain_ascii(text: str) -> bool:
    """Printable ASCII, which holds none of the class: no C0 control, no DEL, nothing
    non-ASCII. A C-speed check."""
    return text.isascii() and text.isprintable()


def shown_escaped(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with each character of ``pattern`` (``control()``, or a class that keeps
    some of it), each format character and each stray joiner written as its escape."""
    # Two passes: a plain class scans at C speed, the joiners' look-arounds would not, and
    # most text holds no joiner at all.
    text = pattern.sub(_escape, text)
    formats = _formats(text)
    if formats:
        text = text.translate({ord(char): escaped(char) for char in formats})
    if _joiners().search(text):
        text = _stray_joiners().sub(_escape, text)
    return text


def _formats(text: str) -> set[str]:
    """The format characters (Cf) in ``text`` but the zero-width (non-)joiners, whose
    neighbours decide. Asked of the character database, not listed: one a later Unicode
    adds is covered too."""
    # Format characters are not printable, so most text is done with at C speed; the
    # rest is looked at one distinct character at a time.
    if text.isascii() or text.replace("\n", "").replace("\t", "").isprintable():
        return set()
    return {
        char
        for char in set(text)
        if char not in "\u200c\u200d" and unicodedata.category(char) == "Cf"
    }


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character ``escape_controls`` (and ``inline``/``quoted`` of
    the frontend) would show escaped."""
    if plain_ascii(text):
        return False
    return (
        control().search(text) is not None
        or _stray_joiners().search(text) is not None
        or bool(_formats(text))
    )


def escape_controls(text: str) -> str:
    """``text`` with just the characters ``has_control`` counts written as escapes
    (``\\n``, ``\\r``, ``\\t``, else ``\\uXXXX``, an astral one as JSON's surrogate pair):
    one line, nothing a terminal acts on. Any other character is left as it is."""
    return text if plain_ascii(text) else shown_escaped(text, control())


def double_quoted(text: str) -> str:
    """``"text"``: its ``\\`` and ``"`` backslashed and a quote's look-alikes escaped, so
    the quote cannot end early or seem to, and its control characters escaped as
    ``escape_controls`` does; the same string a JSON reader decodes, with other non-ASCII
    characters left readable."""
    inner = escape_controls(text.replace("\\", "\\\\").replace('"', '\\"'))
    return '"' + quote_lookalikes(inner) + '"'


# The characters a quoted literal's end depends on.
_QUOTING = ('"', "\\")


def quote_lookalikes(literal: str) -> str:
    """``literal`` with each character whose compatibility form is ``"`` or ``\\`` written
    as its ``\\uXXXX`` escape (the same string once decoded): ``"a＂ b"`` would read as
    ``"a"`` followed by words of the program's own, and ``"a＼"`` as a quote escaped."""
    if plain_ascii(literal):
        return literal
    escapes = {
        ord(char): escaped(char)
        for char in set(literal)
        if char not in _QUOTING and unicodedata.normalize("NFKC", char) in _QUOTING
    }
    return literal.translate(escapes) if escapes else literal


def _escape(match: re.Match[str]) -> str:
    return escaped(match.group())


def escaped(char: str) -> str:
    """One character as its escape: ``\\n``, ``\\r``, ``\\t``, else ``\\uXXXX``."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code > 0xFFFF:  # as JSON writes it: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"
