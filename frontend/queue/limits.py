"""Bounds of everything the extraction queue stores, and its times.

Hosts pass tool names, argument names, ids and values as they come, and one 5 MB tool
name once made a 10 MB queue and a 10 MB ``get_extraction_payload``: every field of a
record has a cap, applied when a record is written and again when it is read
(``records.capped``), so a file written by anyone else is bounded too.
"""

from __future__ import annotations

from thatch.frontend.identifiers import SESSION_ID_MAX

__all__ = [
    "ABANDONED_PER_PASS",
    "ABANDONED_SECONDS",
    "ACCEPTED_TTL_SECONDS",
    "ARGS_CHARS_LIMIT",
    "ARG_DEPTH_LIMIT",
    "ARG_ITEMS_LIMIT",
    "ARG_STRING_LIMIT",
    "CLEANUP_INTERVAL_SECONDS",
    "ID_LIMIT",
    "KEY_LIMIT",
    "LOCK_TIMEOUT_SECONDS",
    "MAX_RECORDS",
    "OUTPUT_LIMIT",
    "PAYLOAD_OUTPUT_LIMIT",
    "QUEUE_BYTES_LIMIT",
    "RECORD_CHARS_LIMIT",
    "SPILLS_PER_SESSION",
    "SPILL_BYTES_LIMIT",
    "STALE_SECONDS",
    "TITLE_LIMIT",
    "TOOL_NAME_LIMIT",
]

MAX_RECORDS = 20
ARG_STRING_LIMIT = 500
OUTPUT_LIMIT = 2000
PAYLOAD_OUTPUT_LIMIT = 500
TOOL_NAME_LIMIT = 200  # host-prefixed tool names are well under 100 characters
KEY_LIMIT = 100  # an argument's name
ID_LIMIT = 200  # tool_use_id (hosts send ~40-character ids)
ARG_ITEMS_LIMIT = 50  # entries kept per object or array inside args
ARG_DEPTH_LIMIT = 8  # nesting kept inside args; deeper values become "…"
ARGS_CHARS_LIMIT = 4000  # budget of one record's args (names and strings counted)
TITLE_LIMIT = 200
# One record is at most about the sum of its fields' limits (~7.5k characters), so a
# queue of MAX_RECORDS stays under QUEUE_BYTES_LIMIT; reading never takes more than that
# from the end of a file (a foreign or older file may be larger).
RECORD_CHARS_LIMIT = (
    TOOL_NAME_LIMIT + SESSION_ID_MAX + ARGS_CHARS_LIMIT + TITLE_LIMIT + OUTPUT_LIMIT + ID_LIMIT
)
QUEUE_BYTES_LIMIT = 4 * MAX_RECORDS * RECORD_CHARS_LIMIT  # UTF-8: up to 4 bytes a character
LOCK_TIMEOUT_SECONDS = 2.0
# A tool hook that waited out the lock spills its batch to a file of its own (``spill``):
# at most this many wait per session (a lock held for good, a runaway agent; hooks that
# spill at once may each pass the count), each holding what a full queue holds. A spill is
# ASCII JSON, which spells a character in up to 12 bytes (an astral one's two ``\u``
# escapes; 6 for any other non-ASCII one), 3 times the 4 bytes a character's UTF-8 takes
# at most (QUEUE_BYTES_LIMIT's budget): the newest 20 records fit whatever their script.
SPILLS_PER_SESSION = 16
SPILL_BYTES_LIMIT = 3 * QUEUE_BYTES_LIMIT
STALE_SECONDS = 7 * 24 * 3600
# How long a handed-out snapshot keeps the extraction nudge quiet: an extractor that died
# (host closed, sub-agent killed) must not strand its records; after this they nudge again.
ACCEPTED_TTL_SECONDS = 600
CLEANUP_INTERVAL_SECONDS = 24 * 3600
# A session's queue untouched this long counts as abandoned (its host died before its
# session-end ran) and is carried over to its project. Every tool call, nudge and fetch
# touches a live session's queue: a day is well past an idle evening, and the daily pass
# that carries it (CLEANUP_INTERVAL_SECONDS) still runs days before STALE_SECONDS.
ABANDONED_SECONDS = 24 * 3600
# Abandoned sessions one pass carries over (each rewrites a carry file, ~1 ms): the prompt
# that runs the pass stays within ~0.2 s however many piled up; the next hook goes on.
ABANDONED_PER_PASS = 100
