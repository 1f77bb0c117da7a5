"""Which session ids and store names thatch accepts: one predicate per kind, used everywhere.

The tool layer validates arguments with these, and the hooks (which import only the
standard library) decide with the same functions whether a session gets a queue and a
nudge, so a hook can never name an id the tools would refuse.
"""

from __future__ import annotations

import re

__all__ = [
    "ALL_STORES",
    "NOT_UTF8",
    "SESSION_ID_MAX",
    "not_utf8",
    "session_id_problem",
    "store_name_problem",
]

SESSION_ID_MAX = 512  # docs/tools.md §validation
LINE_BREAKS = "\r\n\u2028\u2029\x0b\x0c\x85"
# C0 and C1 controls, DEL, and the bidirectional controls that reorder displayed text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def has_control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


# Python reads argv, stdin and file names with ``surrogateescape``: a byte that is not
# UTF-8 (a Latin-1 file piped in, a terminal in another encoding) arrives as a lone
# surrogate, which no database, pipe or JSON document takes.
_SURROGATE = re.compile("[\ud800-\udfff]")
NOT_UTF8 = "must be UTF-8 text (it holds bytes that are not)"


def not_utf8(text: str) -> bool:
    """Whether ``text`` carries bytes that were not UTF-8 (as lone surrogates)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def session_id_problem(session_id: object) -> str | None:
    """Why the extraction tools refuse this session id, or None when it is usable.

    Ids are tokens (UUIDs, ``ses_…``): anything that could not be one, or that could
    pass as a path, is refused rather than quietly mapped.
    """
    if not isinstance(session_id, str):
        return "must be a string"
    if not session_id.strip():
        return "must not be empty"
    if len(session_id) > SESSION_ID_MAX:
        return f"too long ({len(session_id)} characters; maximum {SESSION_ID_MAX})"
    if any(char in session_id for char in LINE_BREAKS):
        return "must be a single line"
    if has_control_characters(session_id):
        return "must not contain control characters"
    if session_id != session_id.strip():
        return "must not start or end with whitespace"
    if "/" in session_id or "\\" in session_id or session_id in (".", ".."):
        return "must not be a path (no /, \\, . or ..)"
    return None


# What the CLI's list and search read as the project store plus global, never a store's
# name (a store of that name made before it was reserved is read beside them).
ALL_STORES = "all"


def store_name_problem(name: object) -> str | None:
    """Why a store name is refused, or None. Case is kept: names are literal (docs/tools.md
    §common-rules).

    ``global `` or ``\x00global`` would otherwise become stores of their own that look
    like ``global`` in every listing.
    """
    if not isinstance(name, str):
        return "must be a string"
    if not_utf8(name):
        return NOT_UTF8
    if has_control_characters(name) or any(char in name for char in LINE_BREAKS):
        return "must not contain control characters"
    if name != name.strip():
        return "must not start or end with whitespace"
    if name == ALL_STORES:
        return 'must not be "all" (thatch list all means the project store and global)'
    return None
