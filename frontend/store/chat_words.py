"""The 64 words chat names are made of (docs/chat.md §identity).

A session's name is ``<word>-<NNNNN>``, the word chosen by its session id's hash modulo
64. THIS LIST MUST NEVER CHANGE once released (not its order, not its length): names are
stored in every user's database, and the per-word counters in ``chat_name_counters`` are
keyed on these words; a changed list would hand out names that collide with stored ones
or that skip counters.
"""

from __future__ import annotations

__all__ = [
    "WORDS",
]

WORDS: tuple[str, ...] = (
    "amber", "aspen", "badger", "basil", "birch", "bison", "brook", "cedar",
    "cider", "clover", "comet", "coral", "crane", "delta", "dune", "ember",
    "fern", "finch", "fjord", "flint", "gecko", "ginger", "granite", "harbor",
    "hazel", "heron", "indigo", "iris", "jasper", "juniper", "kestrel", "koala",
    "lagoon", "larch", "lemon", "lotus", "lynx", "maple", "marten", "meadow",
    "mesa", "moss", "nectar", "nova", "oak", "ocelot", "olive", "onyx",
    "otter", "pebble", "pine", "plover", "quartz", "quill", "raven", "reef",
    "saffron", "sage", "sparrow", "spruce", "tundra", "walnut", "willow", "zephyr",
)  # fmt: skip

assert len(WORDS) == 64 and len(set(WORDS)) == 64
