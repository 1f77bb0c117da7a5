"""The stamp that marks a seeded default behavior (engines.md §6), and how people see it.

Each default's rationale ends with `` seed-key:<key> seed-version:<thatch version>``: the
seeder finds and upgrades its defaults by it. It is bookkeeping, so everything shown to
people (lists, the UI, JSON) leaves it out. A small module of its own: the prompt hook's
listing imports it without the seeder's threads.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from thatch.frontend.store.engine_store import Item

__all__ = ["SEED_STORE", "STAMP_MARKER", "default_key", "parse_stamp", "stamp", "without_stamp"]

SEED_STORE = "global"
STAMP_MARKER = "seed-key:"
_STAMP = re.compile(r" seed-key:(\S+) seed-version:(\S+)\Z")


def stamp(key: str, version: str) -> str:
    return f" seed-key:{key} seed-version:{version}"


def parse_stamp(rationale: str | None) -> tuple[str, str] | None:
    """(key, version) of a stamped rationale, None for an unstamped one."""
    found = _STAMP.search(rationale or "")
    return None if found is None else (found.group(1), found.group(2))


def default_key(item: Item) -> str | None:
    """The key of a seeded default (its stamp), None for any other item."""
    if item.store != SEED_STORE:
        return None
    parsed = parse_stamp(item.rationale)
    return None if parsed is None else parsed[0]


def without_stamp(text: str | None) -> str:
    """A rationale or provenance detail as people read it: the seed stamp is bookkeeping."""
    return _STAMP.sub("", text or "")
