"""Rewrite thatch's own entries in host files without losing what the user added there
(docs/hooks.md §setup-files).

thatch owns the keys it writes into its MCP entry and into its hook entries. Anything else
a user put into those entries (a variable for the server, a hook's timeout, a matcher) is
the user's and stays. A user's value for a key thatch writes gives way to thatch's, and is
recorded so that setup can say which one it replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["IDENTITY_KEYS", "Replaced", "merge_own"]

# What an entry runs, not a setting: a different value there is an older setup's (another
# binary path, other switches in the command), which setup exists to bring up to date.
IDENTITY_KEYS = frozenset({"type", "command", "args", "hooks"})


@dataclass(frozen=True)
class Replaced:
    """A user's value of a key thatch writes, replaced by thatch's."""

    where: str
    old: object
    new: object
    # Names thatch's value instead of showing it: a whole entry would not fit the line.
    named: str = ""

    def describe(self, dry_run: bool) -> str:
        verb = "would be replaced" if dry_run else "replaced"
        new = self.named or _shown(self.new)
        return f"{self.where} was {_shown(self.old)}; {verb} by thatch's {new}"


def _shown(value: object) -> str:
    """A value from a file a cloned repository controls: its line separators, bidi and
    other controls escaped, so it cannot start or reorder a line of setup's."""
    from thatch.frontend.untrusted import json_document

    return json_document(value)


def merge_own(
    new: dict[str, Any],
    old: object,
    where: Callable[[str], str],
    replaced: list[Replaced],
    identity: frozenset[str] = IDENTITY_KEYS,
) -> dict[str, Any]:
    """``new`` (thatch's keys) written over ``old``: the old entry's other keys kept in
    their order, nested objects (an env map) merged the same way. ``where(key)`` names a
    key for the message; each user value that gives way is appended to ``replaced``."""
    if not isinstance(old, dict):
        return new
    merged = dict(old)
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            merged[key] = merge_own(value, before, _inside(where, key), replaced, frozenset())
            continue
        if key in old and before != value and key not in identity:
            replaced.append(Replaced(where(key), before, value))
        merged[key] = value
    return merged


def _inside(where: Callable[[str], str], key: str) -> Callable[[str], str]:
    return lambda inner: where(f"{key}.{inner}")
