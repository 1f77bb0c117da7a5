"""The hub's value types that need no database driver: feed positions and pages, and what a
write became. A machine's sync process reads them too (through ``hub.wire``), so this
module imports nothing of psycopg (tests/test_proto.py checks the client side loads
without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from thatch.frontend.store.memory import Memory

__all__ = ["START", "Change", "Cursor", "Outcome", "Page", "Written"]


@dataclass(frozen=True, order=True)
class Cursor:
    txid: int
    seq: int


START = Cursor(0, 0)


@dataclass(frozen=True)
class Change:
    store: str
    slug: str
    rev: int
    conflict_of: str | None
    author: str
    memory: Memory | None  # None: a tombstone, the replica deletes the row
    # The exact float32 little-endian vector the hub embedded (a replica ranks with it as
    # the hub would); None for a tombstone or a pending row.
    vector: bytes | None = None


@dataclass(frozen=True)
class Page:
    changes: list[Change]
    cursor: Cursor  # where the next pull starts (the last change's position)
    # The cursor is older than a purged tombstone: the machine may have missed a delete,
    # so it drops its replica of the team's stores and pulls again from START (which is
    # never reset: a machine with nothing has missed nothing).
    reset: bool = False


class Outcome(Enum):
    SAVED = "saved"
    CONFLICT = "conflict"  # kept as a second version beside the one the writer had not seen


@dataclass(frozen=True)
class Written:
    outcome: Outcome
    slug: str  # the row written: the memory's own slug, or its conflict version's
    rev: int
